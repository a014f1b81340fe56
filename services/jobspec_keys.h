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
    JOBSPEC_KEY_SAPS_DENSITY,
    JOBSPEC_KEY_PEER_SELECTION,
    JOBSPEC_KEY_BANDWIDTH_THRESHOLD,
    JOBSPEC_KEY_CONNECTIVITY_WINDOW,
    JOBSPEC_KEY_BANDWIDTH_REPROBE,
    JOBSPEC_KEY_PEER_DEADLINE,
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
    JOBSPEC_KEY_GPU_CLOCK,
    JOBSPEC_KEY_GPU_CLOCK_SLOWDOWN,
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
    JOBSPEC_KEY_IMAGE,
    JOBSPEC_KEY_RESOURCES,
    JOBSPEC_KEY_NODE_SELECTOR,
    JOBSPEC_KEY_TOLERATIONS,
    JOBSPEC_KEY_SCHEDULER_NAME,
    JOBSPEC_KEY_QUEUE,
    JOBSPEC_KEY_CHECKPOINT_VOLUME,
    /* Federated averaging's strategy, after the keys of 0.4 and the
     * Kubernetes keys, so their order (messages, flags) stays as it was. */
    JOBSPEC_KEY_LOCAL_EPOCHS,
    JOBSPEC_KEY_PROX_MU,
    JOBSPEC_KEY_SERVER_OPTIMIZER,
    JOBSPEC_KEY_SERVER_LR,
    /* Whether the data plane is encrypted (0.5). */
    JOBSPEC_KEY_ENCRYPTION,
    JOBSPEC_KEY_COUNT
} jobspec_key;

/* A job file is a short list of settings; anything bigger is a mistake
 * (a dataset or a log passed by accident) and is refused before parsing. */
#define JOBSPEC_MAX_FILE ((size_t)1 << 20)

/* A job file is one flat mapping (depth 1); a little more lets a value
 * given as a list or mapping get its own message. Deeper text is refused
 * before libyaml sees it: libyaml's time grows with the square of the
 * depth of nested "[" (a 1 MiB body of them took minutes). */
#define JOBSPEC_MAX_DEPTH 8

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

/* Whether key takes a list (command, tolerations) or a mapping (env,
 * resources, node_selector) as well as a single value. */
int jobspec_key_takes_words(jobspec_key key);

/* For such a key: 1 when it takes a mapping, 0 when a list. */
int jobspec_key_takes_mapping(jobspec_key key);

/* For a list key: 1 when its items may be mappings too (tolerations). A
 * mapping item reaches jobspec_key_set_words as one word:
 * JOBSPEC_ITEM_MAPPING, then "KEY=VALUE" pairs each ended by
 * JOBSPEC_ITEM_SEP. */
int jobspec_key_items_may_be_mappings(jobspec_key key);
#define JOBSPEC_ITEM_MAPPING '\x01'
#define JOBSPEC_ITEM_SEP '\x1f'

/* The Kubernetes keys' entries (resources, node_selector, tolerations),
 * for jobspec_keys.c: check n words (used bytes, NULs included) given on
 * line and store them into *spec. FLPS_ECONFIG with the message in errbuf
 * (it names the line, the key, the entry and what is accepted; expect is
 * the key's accepted-values text). jobspec_k8s.c. */
flps_err jobspec_k8s_store(jobspec_key key, const char *name,
                           const char *expect, const char *words, size_t n,
                           size_t used, unsigned long line, jobspec *spec,
                           char *errbuf, size_t errlen);

/* A problem with a Kubernetes name, or NULL when s is one: for image (an
 * image reference), scheduler_name (a DNS subdomain), queue (a label
 * value) and checkpoint_volume (a DNS subdomain). jobspec_k8s.c. */
const char *jobspec_k8s_check_text(jobspec_key key, const char *s);

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
