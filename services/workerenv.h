/* The environment and program of a command: job's workers: what flrun and
 * flagent hand the user's program in place of flworker's arguments. */
#ifndef FLPS_SERVICES_WORKERENV_H
#define FLPS_SERVICES_WORKERENV_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "services/jobspec.h"

/* Where one worker belongs. Every pointer is borrowed for the call. */
typedef struct workerenv {
    const char *job;       /* FLPS_JOB */
    uint32_t rank;         /* FLPS_RANK */
    const char *servers;   /* FLPS_SERVERS: comma-separated endpoints */
    const char *plan_file; /* FLPS_PLAN_FILE; NULL or "" = none */
    const char *bin_dir;   /* the launcher's binaries: bin_dir/../lib holds
                              libflps.so in a build or an install; NULL =
                              do not look */
    uint64_t deadline_ms;  /* FLPS_DEADLINE_MS; 0 = 120000 */
    const char *transport; /* FLPS_TRANSPORT: what the launcher chose for
                              the shards; NULL = the job file's transport */
    const char *credentials_file; /* FLPS_CREDENTIALS_FILE: the job's
                                     credentials (a path; the secret stays
                                     in the file); NULL = none */
    const char *metrics;          /* FLPS_METRICS: HOST:PORT for libflps's
                                     metrics endpoint; NULL = none */
    const char *peers;            /* FLPS_PEERS (saps): every worker's endpoint,
                                     comma-separated; NULL = none */
    const char *gpu_clock_record; /* FLPS_GPU_CLOCK_RECORD: where the
                                     worker records the GPU clocks it
                                     changed, for the launcher to restore
                                     after a crash; NULL = none */
} workerenv;

/* Build the environment of one worker: base (the launcher's environ)
 * without any JOBSPEC_WORKER_ENV variable, then spec's env: entries
 * (each in place of base's variable of the same name),
 * PYTHONUNBUFFERED=1 unless one of those sets it (so a program's print()
 * lines reach the launcher as they are printed), then the
 * JOBSPEC_WORKER_ENV variables (FLPS_MODEL only where the job gives a
 * model), and PYTHONPATH with the repository's
 * python/ directory first when the build has one ($FLPS_PYTHON_DIR in
 * base overrides it). FLPS_BUILD_DIR and FLPS_LIBRARY are set when
 * bin_dir/../lib/libflps.so exists, else passed on from base. Returns
 * FLPS_OK with *out a NULL-terminated array (caller owns; free it with
 * workerenv_free), FLPS_ENOMEM, or FLPS_EINVAL for NULL arguments. */
flps_err workerenv_build(const jobspec *spec, const workerenv *w,
                         char *const *base, char ***out);

/* The environment of a job's built-in worker (flworker): base (the
 * launcher's environment) with spec's env: entries over it, an entry of
 * env: replacing base's variable of the same name. flworker takes the
 * job's settings from its arguments and the job file, so nothing else is
 * set. FLPS_OK with *out as workerenv_build's, FLPS_ENOMEM, or
 * FLPS_EINVAL for NULL spec or out. */
flps_err workerenv_build_flworker(const jobspec *spec, char *const *base,
                                  char ***out);

void workerenv_free(char **env);

/* The value of name in env (a NULL-terminated "NAME=VALUE" array), or
 * NULL. */
const char *workerenv_get(char *const *env, const char *name);

/* The path to execute for a command's program: prog itself when it holds
 * a '/', else the first executable prog in env's PATH (the default
 * /usr/local/bin:/usr/bin:/bin when PATH is not set). FLPS_ECONFIG with a
 * message in errbuf when there is none; FLPS_EINVAL for NULL arguments. */
flps_err workerenv_find_program(const char *prog, char *const *env, char *out,
                                size_t len, char *errbuf, size_t errlen);

#endif
