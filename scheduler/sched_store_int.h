/* What the store's modules (sched_store.c, sched_jobs.c, sched_nodes.c)
 * share and nobody else uses: the store struct, its sticky error, command
 * building and reading of Redis replies. Not part of the sched_store API. */
#ifndef FLPS_SCHED_STORE_INT_H
#define FLPS_SCHED_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/rconn.h"
#include "scheduler/sched_scripts.h"
#include "scheduler/sched_store.h"

/* A failure whose restart decision was made from fields that changed
 * before its script ran is decided again this often before giving up. */
#define STORE_DECIDE_TRIES 32
#define STORE_EVENTS_MAX 1000

struct sched_store {
    rconn *rc;
    int script[SCHED_SCRIPT_COUNT]; /* rconn's id of each script */
    char err[512];                  /* sticky message of the last failure */
    double bad_node_warned; /* flps_mono_s() of the last "bad node" line */
};

/* Set the store's sticky message; evaluates to rc. */
#define sched_store_seterr(st, rc, ...)                                        \
    flps_errbuf_set((st)->err, sizeof((st)->err), (rc), __VA_ARGS__)

/* The rconn's message for a failed command (or "out of memory"). */
flps_err sched_store_rerr(sched_store *st, flps_err rc);

/* Copy n bytes of src into dst (len bytes), truncated, NUL-terminated. */
void sched_store_copy(char *dst, size_t len, const char *src, size_t n);

/* Lenient readers of Redis fields: 0 when absent or malformed. */
double sched_store_to_double(const char *s);
uint64_t sched_store_to_u64(const char *s);

/* Thousandths of a CPU as decimal CPUs ("1.5"). */
void sched_store_fmt_mcpus(char *buf, size_t len, uint64_t mcpus);

/* A NUL-terminated copy of n bytes (caller frees), NULL without memory. */
char *sched_store_dup(const char *s, size_t n);

/* An argument vector for commands with many or binary arguments: each
 * argument is copied, so callers may pass stack buffers. oom is sticky:
 * add many, check once (sched_store_eval reports it). */
typedef struct sched_cmd {
    int argc, cap;
    char **argv;
    size_t *len;
    int oom;
} sched_cmd;

void sched_cmd_addb(sched_cmd *c, const char *s, size_t n);
void sched_cmd_add(sched_cmd *c, const char *s);
void sched_cmd_addf(sched_cmd *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sched_cmd_free(sched_cmd *c);

/* Check a rconn_cmd result and drop the reply. rp, not the reply itself:
 * arguments are evaluated in no set order, so the reply pointer must be
 * read after rconn_cmd (in the first argument) has written it. */
flps_err sched_store_drop(sched_store *st, flps_err rc, redisReply **rp);

/* Run script s (EVALSHA, reloaded on NOSCRIPT) with c's arguments, the
 * first nkeys of them as KEYS, and free c. *reply (caller frees) may be
 * NULL when not wanted. */
flps_err sched_store_eval(sched_store *st, sched_script s, int nkeys,
                          sched_cmd *c, redisReply **reply);
/* The same for a script that answers an integer (*out). */
flps_err sched_store_eval_int(sched_store *st, sched_script s, int nkeys,
                              sched_cmd *c, long long *out);

/* Append an event's JSON without seq ({"time","type","message"}) and the
 * list's cap: the two ARGV of the scripts that write an event. Errors:
 * FLPS_ENOMEM. _text appends the JSON alone. */
flps_err sched_cmd_add_event(sched_cmd *c, double now, const char *type,
                             const char *message);
flps_err sched_cmd_add_event_text(sched_cmd *c, double now, const char *type,
                                  const char *message);

/* Value of field in an HGETALL reply (borrowed from r), or NULL. */
const char *sched_store_hget(const redisReply *r, const char *field);
/* Copy that value into dst ("" when absent). */
void sched_store_hcopy(const redisReply *r, const char *field, char *dst,
                       size_t len);

/* flps:job:{id} and flps:task:{id}:{attempt}:{role}-{index}. */
void sched_store_job_key(char *buf, size_t len, const char *id);
void sched_store_task_key(char *buf, size_t len, const char *id,
                          uint32_t attempt, const char *role, uint32_t index);

#endif
