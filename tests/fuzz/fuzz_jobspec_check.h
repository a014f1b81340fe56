/* What every job the parser accepts must satisfy, whatever the text was:
 * the bounds docs/job-file.md promises, and a compression setting that
 * reads back to itself. Shared by the job-file and API-body targets. */
#ifndef FLPS_TESTS_FUZZ_JOBSPEC_CHECK_H
#define FLPS_TESTS_FUZZ_JOBSPEC_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "services/jobspec.h"

static void fuzz_check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_jobspec: %s\n", what);
        abort();
    }
}

static void fuzz_check_refusal(const char *err, size_t errlen)
{
    fuzz_check(memchr(err, '\0', errlen) != NULL,
               "an error message without its terminator");
    fuzz_check(err[0] != '\0', "a refusal without a message");
}

static void fuzz_check_accepted(const jobspec *s)
{
    size_t n = strnlen(s->name, sizeof(s->name));
    char text[160], comp[64], err[512];
    jobspec back;

    fuzz_check(n >= 1 && n <= 63, "an accepted name of a bad length");
    for (size_t i = 0; i < n; i++) {
        char c = s->name[i];
        fuzz_check((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                       c == '-',
                   "an accepted name with a character outside [A-Za-z0-9_.-]");
    }
    fuzz_check(s->workers >= 1 && s->workers <= 1024,
               "workers out of 1..1024 accepted");
    fuzz_check(s->servers >= 1 && s->servers <= 256,
               "servers out of 1..256 accepted");
    fuzz_check(s->batch_size >= 1 && s->batch_size <= 65536,
               "batch_size out of 1..65536 accepted");
    fuzz_check(s->iterations >= 1, "0 iterations accepted");
    fuzz_check(isfinite(s->lr) && s->lr > 0, "a bad lr accepted");
    fuzz_check(isfinite(s->momentum) && s->momentum >= 0 && s->momentum < 1,
               "a bad momentum accepted");
    fuzz_check(isfinite(s->density) && s->density > 0 && s->density <= 1,
               "a density out of (0, 1] accepted");
    fuzz_check(isfinite(s->cpus_per_worker) && s->cpus_per_worker > 0 &&
                   isfinite(s->cpus_per_server) && s->cpus_per_server > 0,
               "a bad cpu request accepted");
    fuzz_check(isfinite(s->checkpoint_interval) && s->checkpoint_interval >= 0,
               "a bad checkpoint_interval accepted");
    fuzz_check(isfinite(s->time_limit) && s->time_limit >= 0,
               "a bad time_limit accepted");
    fuzz_check(s->density_warmup == 0 || (s->density_warmup <= s->iterations &&
                                          s->mode == JOBSPEC_MODE_SSGD &&
                                          isfinite(s->density_warmup_start) &&
                                          s->density_warmup_start > 0 &&
                                          s->density_warmup_start <= 1),
               "a density warm-up that cannot run accepted");

    jobspec_comp_format(s, comp, sizeof(comp));
    snprintf(text, sizeof(text), "name: x\nmodel: mlp\ncompression: %s\n",
             comp);
    fuzz_check(jobspec_parse(text, strlen(text), &back, err, sizeof(err)) ==
                   FLPS_OK,
               "the canonical text of an accepted codec is refused");
    fuzz_check(back.compression == s->compression &&
                   back.qsgd_bits == s->qsgd_bits,
               "the canonical text of a codec reads back as another");
}

#endif
