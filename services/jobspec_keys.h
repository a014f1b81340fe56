/* The job file's keys, for the jobspec module's own files: jobspec.c walks
 * the YAML and hands each key and value to jobspec_keys.c, whose one table
 * row per key drives parsing, defaults, messages, enum names and docs.
 * Not for other modules: they use services/jobspec.h. */
#ifndef FLPS_SERVICES_JOBSPEC_KEYS_H
#define FLPS_SERVICES_JOBSPEC_KEYS_H

#include <stddef.h>

#include "services/jobspec.h"

/* Every key, in the table's (and the docs') order. */
typedef enum {
    JOBSPEC_KEY_NAME,
    JOBSPEC_KEY_MODEL,
    JOBSPEC_KEY_DATASET,
    JOBSPEC_KEY_DATA_DIR,
    JOBSPEC_KEY_PARTITION,
    JOBSPEC_KEY_WORKERS,
    JOBSPEC_KEY_SERVERS,
    JOBSPEC_KEY_MODE,
    JOBSPEC_KEY_ITERATIONS,
    JOBSPEC_KEY_ROUNDS,
    JOBSPEC_KEY_LOCAL_STEPS,
    JOBSPEC_KEY_CLIENT_FRACTION,
    JOBSPEC_KEY_CLIENTS,
    JOBSPEC_KEY_ROUND_DEADLINE,
    JOBSPEC_KEY_STRAGGLER_FRACTION,
    JOBSPEC_KEY_STRAGGLER_SLOWDOWN,
    JOBSPEC_KEY_BATCH_SIZE,
    JOBSPEC_KEY_LR,
    JOBSPEC_KEY_MOMENTUM,
    JOBSPEC_KEY_LR_SCHEDULE,
    JOBSPEC_KEY_COMPRESSION,
    JOBSPEC_KEY_DENSITY_WARMUP,
    JOBSPEC_KEY_DENSITY_WARMUP_START,
    JOBSPEC_KEY_TRANSPORT,
    JOBSPEC_KEY_SEED,
    JOBSPEC_KEY_EVAL_EVERY,
    JOBSPEC_KEY_PART_SIZE,
    JOBSPEC_KEY_OVERLAP,
    JOBSPEC_KEY_BACKEND,
    JOBSPEC_KEY_CHECKPOINT_INTERVAL,
    JOBSPEC_KEY_MAX_RESTARTS,
    JOBSPEC_KEY_PRIORITY,
    JOBSPEC_KEY_CPUS_PER_WORKER,
    JOBSPEC_KEY_MEMORY_PER_WORKER,
    JOBSPEC_KEY_GPUS_PER_WORKER,
    JOBSPEC_KEY_CPUS_PER_SERVER,
    JOBSPEC_KEY_MEMORY_PER_SERVER,
    JOBSPEC_KEY_TIME_LIMIT,
    JOBSPEC_KEY_COMMAND,
    JOBSPEC_KEY_ENV,
    JOBSPEC_KEY_COUNT
} jobspec_key;

/* Longest value quoted back in a message; longer ones end in "...". */
#define JOBSPEC_SHOW_MAX 40

/* Room for any accepted-values text. */
#define JOBSPEC_EXPECT_MAX 256

/* The key as written in a file: a static string. */
const char *jobspec_key_name(jobspec_key key);

/* The key spelled exactly s[0..n) into *out; FLPS_EINVAL (*out untouched)
 * when there is none. */
flps_err jobspec_key_find(const char *s, size_t n, jobspec_key *out);

/* The key closest to word when close enough to be a typo ("wrokers" ->
 * "workers"): a static string; NULL when none is. */
const char *jobspec_key_suggest(const char *word);

/* Every key, ", "-separated, into buf (len > 0; cut to fit). Returns
 * buf. */
const char *jobspec_key_list(char *buf, size_t len);

/* What key accepts, as messages quote it after "expected" ("an integer
 * from 1 to 1024"): a static string or buf, which it then fills. */
const char *jobspec_key_expect(jobspec_key key, char buf[JOBSPEC_EXPECT_MAX]);

/* v (n bytes) as quoted in a message: control bytes become '?' so a stray
 * newline cannot break the one-line message; over JOBSPEC_SHOW_MAX bytes
 * it is cut and ends in "...". */
void jobspec_key_show(const char *v, size_t n, char out[JOBSPEC_SHOW_MAX + 4]);

/* Read value s (n bytes; s[n] is NUL) given for key on line into *spec,
 * writing only the key's fields and only on FLPS_OK. FLPS_ECONFIG with
 * one message in errbuf ("line 5: workers: '0' is out of range; expected
 * an integer from 1 to 1024"), also for a NUL byte inside the value. */
flps_err jobspec_key_set(jobspec_key key, const char *s, size_t n,
                         unsigned long line, jobspec *spec, char *errbuf,
                         size_t errlen);

/* Whether key takes a list (command) or a mapping (env) as well as a
 * single value. */
int jobspec_key_takes_words(jobspec_key key);

/* Read a list (command) or mapping (env) given for key on line into
 * *spec: n words stored back to back in words (NUL-terminated each), for
 * env each "NAME=VALUE". Writes only the key's fields and only on FLPS_OK;
 * FLPS_ECONFIG with one message in errbuf otherwise. */
flps_err jobspec_key_set_words(jobspec_key key, const char *words, size_t n,
                               unsigned long line, jobspec *spec, char *errbuf,
                               size_t errlen);

/* Every field of *spec at its key's default (required keys zero). Fails
 * (FLPS_ECONFIG, message in errbuf) only if the table's own default text
 * is refused, which is a bug in the table. */
flps_err jobspec_key_defaults(jobspec *spec, char *errbuf, size_t errlen);

#endif
