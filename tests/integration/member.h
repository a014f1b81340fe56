/* Helpers for integration tests: one real worker of a small dense job
 * (one tensor, one rank) through libflps, stepped with gradients any test
 * can repeat, so that a run under attack can be compared bit for bit with
 * the same run unattacked. Header-only, like spawn.h. */
#ifndef FLPS_TESTS_MEMBER_H
#define FLPS_TESTS_MEMBER_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "flps.h"

#define MEMBER_NUMEL_MAX 131072

typedef struct job_run {
    float w[MEMBER_NUMEL_MAX]; /* past numel: 0 */
    uint32_t numel;
    flps_tensor tensor;
    flps_client *c;
} job_run;

/* Register a worker of job (numel elements in parts of part_size,
 * compressed as compression) with the shard at endpoint, with the
 * credentials $FLPS_CREDENTIALS_FILE names if set, and take the initial
 * values. */
static inline void job_start_sized(job_run *j, const char *endpoint,
                                   const char *job, uint32_t numel,
                                   uint32_t part_size, const char *compression)
{
    const char *servers[1] = {endpoint};
    flps_client_config cfg;

    cr_assert_leq(numel, MEMBER_NUMEL_MAX);
    memset(j->w, 0, sizeof(j->w));
    for (uint32_t i = 0; i < numel; i++)
        j->w[i] = (float)i * 0.125f;
    j->numel = numel;
    j->tensor.name = "w";
    j->tensor.numel = numel;
    j->tensor.data = j->w;
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = job;
    cfg.rank = 0;
    cfg.workers = 1;
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.tensors = &j->tensor;
    cfg.ntensors = 1;
    cfg.part_size = part_size;
    cfg.compression = compression;
    cfg.lr = 0.5;
    cfg.retry_ms = 300;
    cfg.deadline_ms = 20000;
    cr_assert_eq(flps_client_create(&cfg, &j->c), FLPS_OK,
                 "the real worker could not register");
    cr_assert_eq(flps_client_init(j->c), FLPS_OK, "%s",
                 flps_client_last_error(j->c));
}

/* Push iteration it's gradient and wait for its update. */
static inline void job_step(job_run *j, uint64_t it)
{
    static float g[MEMBER_NUMEL_MAX];

    for (uint32_t i = 0; i < j->numel; i++)
        g[i] = (float)(((int)i * 7 + (int)it * 3) % 11 - 5) * 0.25f;
    cr_assert_eq(flps_client_push(j->c, 0, g, it), FLPS_OK, "%s",
                 flps_client_last_error(j->c));
    cr_assert_eq(flps_client_wait(j->c, it), FLPS_OK, "%s",
                 flps_client_last_error(j->c));
}

/* Step a and b through iterations [from, to) and check that their models
 * are the same, bit for bit. */
static inline void jobs_step_same(job_run *a, job_run *b, uint64_t from,
                                  uint64_t to)
{
    for (uint64_t it = from; it < to; it++) {
        job_step(a, it);
        job_step(b, it);
    }
    cr_assert_eq(memcmp(a->w, b->w, sizeof(a->w)), 0);
}

#endif
