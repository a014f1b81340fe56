/* libFuzzer target: a job file's text with launcher flags merged in
 * (jobspec_flags_text, what flrun and flsubmit build from a file and
 * `-n 3 --seed 9 --name fz -- /bin/prog 'a b'`), and a refusal of it
 * explained (jobspec_flags_explain). Never a crash; and
 * whenever the file alone is a job, the merged text is the same job with
 * exactly those keys changed: the flags never lose or corrupt what the
 * file says. */
#include <getopt.h>
#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "services/jobspec_flags.h"
#include "tests/fuzz/fuzz_jobspec_check.h"
#include "tests/fuzz/fuzz_target.h"

/* The flags, taken as a launcher takes them. */
static void take_flags(jobspec_flags *f)
{
    static char *argv[] = {"x",  "-n", "3",         "--seed", "9", "--name",
                           "fz", "--", "/bin/prog", "a b",    NULL};
    struct option opts[JOBSPEC_FLAGS_KEYS + 1];
    size_t n;
    int c, nargs;

    jobspec_flags_init(f);
    n = jobspec_flags_options(f, opts, JOBSPEC_FLAGS_KEYS);
    memset(&opts[n], 0, sizeof(opts[n]));
    nargs = jobspec_flags_split(f, 10, argv);
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(nargs, argv, JOBSPEC_FLAGS_SHORT, opts, NULL)) !=
           -1)
        fuzz_check(jobspec_flags_take(f, c, optarg, NULL, 0) == 1,
                   "a good flag refused");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static jobspec_flags f;
    jobspec alone, merged;
    char err[1024], said[1100], *text = NULL;
    jobspec_where where = {0};
    size_t len = 0;
    flps_err rc, alone_rc;

    take_flags(&f);
    alone_rc = jobspec_parse((const char *)data, size, &alone, NULL, 0);
    rc = jobspec_flags_text(&f, (const char *)data, size, &text, &len, err,
                            sizeof(err));
    if (rc != FLPS_OK) {
        fuzz_check(rc == FLPS_ENOMEM || (rc == FLPS_ECONFIG && alone_rc != 0),
                   "a job file the parser takes could not take the flags");
        return 0;
    }
    fuzz_check(text[len] == '\0', "a job text without its terminator");
    if (jobspec_parse_where(text, len, &merged, err, sizeof(err), &where) ==
        FLPS_OK) {
        fuzz_check_accepted(&merged);
    } else {
        fuzz_check(alone_rc != FLPS_OK, "the flags broke a job file");
        /* The message as flrun and flsubmit show it. */
        jobspec_flags_explain(&f, &where, err, said, sizeof(said));
        fuzz_check(memchr(said, '\0', sizeof(said)) != NULL,
                   "an explained message without its terminator");
    }
    if (alone_rc == FLPS_OK) {
        fuzz_check(merged.workers == 3 && merged.seed == 9 &&
                       strcmp(merged.name, "fz") == 0 &&
                       merged.command_argc == 2 &&
                       strcmp(merged.command, "/bin/prog") == 0 &&
                       strcmp(merged.command + 10, "a b") == 0,
                   "a flag lost in the merge");
        /* The file's keys are given, and the flags'. */
        fuzz_check(jobspec_is_given(&merged, "workers") &&
                       jobspec_is_given(&merged, "seed") &&
                       jobspec_is_given(&merged, "name") &&
                       jobspec_is_given(&merged, "command"),
                   "a flag's key not given");
        jobspec_give(&alone, "workers");
        jobspec_give(&alone, "seed");
        jobspec_give(&alone, "name");
        jobspec_give(&alone, "command");
        /* Everything else is the file's. */
        memcpy(alone.name, merged.name, sizeof(alone.name));
        alone.workers = merged.workers;
        alone.seed = merged.seed;
        memcpy(alone.command, merged.command, sizeof(alone.command));
        alone.command_argc = merged.command_argc;
        fuzz_check(memcmp(&alone, &merged, sizeof(alone)) == 0,
                   "the merge changed a key no flag gave");
    }
    flps_free(text);
    return 0;
}
