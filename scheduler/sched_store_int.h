/* What the store's modules (sched_store.c, sched_jobs.c, sched_nodes.c)
 * share and nobody else uses: the store struct, its sticky error, command
 * building and reading of Redis replies. Not part of the sched_store API. */
#ifndef FLPS_SCHED_STORE_INT_H
#define FLPS_SCHED_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/rconn.h"
#include "scheduler/sched_store.h"

/* Transactions that lose a WATCH race (an agent updating progress on the
 * job hash, another submit) are retried this often before giving up. */
#define STORE_TXN_TRIES 32
#define STORE_EVENTS_MAX 1000

struct sched_store {
    rconn *rc;
    char err[512]; /* sticky message of the last failure */
};

/* Set the store's message and return rc. */
flps_err sched_store_seterr(sched_store *st, flps_err rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The rconn's message for a failed command (or "out of memory"). */
flps_err sched_store_rerr(sched_store *st, flps_err rc);

/* Copy n bytes of src into dst (len bytes), truncated, NUL-terminated. */
void sched_store_copy(char *dst, size_t len, const char *src, size_t n);

/* Lenient readers of Redis fields: 0 when absent or malformed. */
double sched_store_to_double(const char *s);
uint64_t sched_store_to_u64(const char *s);

/* Shortest text that reads back as the same double ("60", "1.5"). */
void sched_store_fmt_double(char *buf, size_t len, double x);
/* Thousandths of a CPU as decimal CPUs ("1.5"). */
void sched_store_fmt_mcpus(char *buf, size_t len, uint64_t mcpus);

/* A NUL-terminated copy of n bytes (caller frees), NULL without memory. */
char *sched_store_dup(const char *s, size_t n);

/* An argument vector for commands with many or binary arguments: each
 * argument is copied, so callers may pass stack buffers. oom is sticky:
 * add many, check once (sched_cmd_run reports it). */
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

/* Run and free c; *reply (caller frees) may be NULL when not wanted. */
flps_err sched_cmd_run(sched_store *st, sched_cmd *c, redisReply **reply);
/* Run c inside MULTI: the reply must be +QUEUED. Frees c. */
flps_err sched_cmd_queue(sched_store *st, sched_cmd *c);

/* Check a rconn_cmd result and drop the reply. rp, not the reply itself:
 * arguments are evaluated in no set order, so the reply pointer must be
 * read after rconn_cmd (in the first argument) has written it. */
flps_err sched_store_drop(sched_store *st, flps_err rc, redisReply **rp);
/* The same for a command queued inside MULTI (+QUEUED expected). */
flps_err sched_store_queued(sched_store *st, flps_err rc, redisReply **rp);

void sched_store_unwatch(sched_store *st);
void sched_store_discard(sched_store *st);
flps_err sched_store_multi(sched_store *st);
/* EXEC: *ok = 0 when a WATCHed key changed (nothing was done). A command
 * that failed inside the transaction is an error. */
flps_err sched_store_exec(sched_store *st, int *ok);

/* Value of field in an HGETALL reply (borrowed from r), or NULL. */
const char *sched_store_hget(const redisReply *r, const char *field);
/* Copy that value into dst ("" when absent). */
void sched_store_hcopy(const redisReply *r, const char *field, char *dst,
                       size_t len);

/* flps:job:{id} and flps:task:{id}:{attempt}:{role}-{index}. */
void sched_store_job_key(char *buf, size_t len, const char *id);
void sched_store_task_key(char *buf, size_t len, const char *id,
                          uint32_t attempt, const char *role, uint32_t index);

/* Queue the event script inside MULTI (see sched_store_event). */
flps_err sched_store_queue_event(sched_store *st, const char *id, double now,
                                 const char *type, const char *message);

#endif
