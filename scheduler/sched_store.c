/* flsched's Redis store: jobs, tasks, nodes, events, the lease. */
#include "scheduler/sched_store.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/log.h"
#include "scheduler/rconn.h"

/* Transactions that lose a WATCH race (an agent updating progress on the
 * job hash, another submit) are retried this often before giving up. */
#define STORE_TXN_TRIES 32
#define STORE_EVENTS_MAX 1000

struct sched_store {
    rconn *rc;
    char err[512];
};

/* ---- Small helpers ---- */

static flps_err st_fail(sched_store *st, flps_err rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static flps_err st_fail(sched_store *st, flps_err rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st->err, sizeof(st->err), fmt, ap);
    va_end(ap);
    return rc;
}

/* The rconn's message for a failed command. */
static flps_err st_rerr(sched_store *st, flps_err rc)
{
    if (rc == FLPS_ENOMEM)
        return st_fail(st, rc, "out of memory");
    return st_fail(st, rc, "%s", rconn_error(st->rc));
}

static void copy_str(char *dst, size_t len, const char *src, size_t n)
{
    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static double to_double(const char *s)
{
    char *end;
    double v;

    if (s == NULL || *s == '\0')
        return 0;
    v = strtod(s, &end);
    return isfinite(v) ? v : 0;
}

static uint64_t to_u64(const char *s)
{
    if (s == NULL || *s < '0' || *s > '9')
        return 0;
    return strtoull(s, NULL, 10);
}

/* Shortest text that reads back as the same double. */
static void fmt_double(char *buf, size_t len, double x)
{
    /* Whole numbers as integers ("60", not "6e+01"). */
    if (x == floor(x) && fabs(x) < 1e15) {
        snprintf(buf, len, "%.0f", x);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

static void fmt_mcpus(char *buf, size_t len, uint64_t mcpus)
{
    fmt_double(buf, len, (double)mcpus / 1000.0);
}

const char *sched_state_name(sched_state s)
{
    switch (s) {
    case SCHED_QUEUED:
        return "QUEUED";
    case SCHED_RUNNING:
        return "RUNNING";
    case SCHED_SUCCEEDED:
        return "SUCCEEDED";
    case SCHED_FAILED:
        return "FAILED";
    case SCHED_CANCELLED:
        return "CANCELLED";
    }
    return "UNKNOWN";
}

int sched_state_parse(const char *name, sched_state *out)
{
    for (int s = SCHED_QUEUED; s <= SCHED_CANCELLED; s++) {
        if (strcmp(name, sched_state_name((sched_state)s)) == 0) {
            *out = (sched_state)s;
            return 1;
        }
    }
    return 0;
}

int sched_state_is_final(sched_state s)
{
    return s == SCHED_SUCCEEDED || s == SCHED_FAILED || s == SCHED_CANCELLED;
}

double sched_store_queue_score(uint32_t priority, uint64_t seq)
{
    return -(double)priority * 4294967296.0 + (double)seq;
}

void sched_task_fini(sched_task *t)
{
    if (t == NULL)
        return;
    flps_free(t->done);
    t->done = NULL;
}

void sched_job_fini(sched_job *j)
{
    if (j == NULL)
        return;
    flps_free(j->spec);
    flps_free(j->summary);
    flps_free(j->profile);
    for (size_t i = 0; i < j->ntasks; i++)
        sched_task_fini(&j->tasks[i]);
    flps_free(j->tasks);
    j->spec = j->summary = j->profile = NULL;
    j->tasks = NULL;
    j->ntasks = 0;
}

void sched_jobs_free(sched_job *jobs, size_t n)
{
    if (jobs == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        sched_job_fini(&jobs[i]);
    flps_free(jobs);
}

void sched_strv_free(char **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        flps_free(v[i]);
    flps_free(v);
}

void sched_nodes_free(sched_node *nodes, size_t n)
{
    if (nodes == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        sched_strv_free(nodes[i].tasks, nodes[i].ntasks);
        flps_free(nodes[i].task_need);
    }
    flps_free(nodes);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = flps_malloc(n + 1);

    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* ---- Argument vectors ----
 * Commands with many or binary arguments are built here: each argument is
 * copied, so callers may pass stack buffers. */

typedef struct cmdv {
    int argc, cap;
    char **argv;
    size_t *len;
    int oom;
} cmdv;

static void cmd_addb(cmdv *c, const char *s, size_t n)
{
    if (c->oom)
        return;
    if (c->argc == c->cap) {
        int ncap = c->cap ? c->cap * 2 : 16;
        char **nv = flps_realloc(c->argv, (size_t)ncap * sizeof(*nv));
        size_t *nl;

        if (nv == NULL) {
            c->oom = 1;
            return;
        }
        c->argv = nv;
        nl = flps_realloc(c->len, (size_t)ncap * sizeof(*nl));
        if (nl == NULL) {
            c->oom = 1;
            return;
        }
        c->len = nl;
        c->cap = ncap;
    }
    c->argv[c->argc] = dup_n(s, n);
    if (c->argv[c->argc] == NULL) {
        c->oom = 1;
        return;
    }
    c->len[c->argc++] = n;
}

static void cmd_add(cmdv *c, const char *s)
{
    cmd_addb(c, s, strlen(s));
}

static void cmd_addf(cmdv *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void cmd_addf(cmdv *c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    cmd_add(c, buf);
}

static void cmd_free(cmdv *c)
{
    for (int i = 0; i < c->argc; i++)
        flps_free(c->argv[i]);
    flps_free(c->argv);
    flps_free(c->len);
    memset(c, 0, sizeof(*c));
}

/* Run and free c; *reply may be NULL when the reply is not wanted. */
static flps_err cmd_run(sched_store *st, cmdv *c, redisReply **reply)
{
    redisReply *r = NULL;
    flps_err rc;

    if (c->oom) {
        cmd_free(c);
        return st_fail(st, FLPS_ENOMEM, "out of memory");
    }
    rc = rconn_cmdv(st->rc, &r, c->argc, (const char **)c->argv, c->len);
    cmd_free(c);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    if (reply != NULL)
        *reply = r;
    else
        freeReplyObject(r);
    return FLPS_OK;
}

/* Check a rconn_cmd result and drop the reply. */
/* rp, not the reply itself: arguments are evaluated in no set order, so
 * the reply pointer must be read after rconn_cmd (in the first argument)
 * has written it. */
static flps_err st_drop(sched_store *st, flps_err rc, redisReply **rp)
{
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    freeReplyObject(*rp);
    return FLPS_OK;
}

/* Queue one command inside MULTI: the reply must be +QUEUED. */
static flps_err st_queued(sched_store *st, flps_err rc, redisReply **rp)
{
    redisReply *r;

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    r = *rp;
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "QUEUED") != 0) {
        freeReplyObject(r);
        return st_fail(st, FLPS_EPROTO, "Redis did not queue a command");
    }
    freeReplyObject(r);
    return FLPS_OK;
}

static flps_err cmd_queue(sched_store *st, cmdv *c)
{
    redisReply *r = NULL;
    flps_err rc = cmd_run(st, c, &r);

    if (rc != FLPS_OK)
        return rc;
    return st_queued(st, FLPS_OK, &r);
}

static void st_unwatch(sched_store *st)
{
    redisReply *r = NULL;

    if (rconn_cmd(st->rc, &r, "UNWATCH") == FLPS_OK)
        freeReplyObject(r);
}

static void st_discard(sched_store *st)
{
    redisReply *r = NULL;

    if (rconn_cmd(st->rc, &r, "DISCARD") == FLPS_OK)
        freeReplyObject(r);
}

/* EXEC: *ok = 0 when a WATCHed key changed (nothing was done). A command
 * that failed inside the transaction is an error. */
static flps_err st_exec(sched_store *st, int *ok)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "EXEC");

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    *ok = r->type == REDIS_REPLY_ARRAY;
    if (*ok) {
        for (size_t i = 0; i < r->elements; i++) {
            if (r->element[i]->type == REDIS_REPLY_ERROR) {
                st_fail(st, FLPS_EREMOTE, "Redis at %s: in a transaction: %s",
                        rconn_address(st->rc), r->element[i]->str);
                freeReplyObject(r);
                return FLPS_EREMOTE;
            }
        }
    }
    freeReplyObject(r);
    return FLPS_OK;
}

static flps_err st_multi(sched_store *st)
{
    redisReply *r = NULL;

    return st_drop(st, rconn_cmd(st->rc, &r, "MULTI"), &r);
}

/* Value of field in an HGETALL reply, or NULL. */
static const char *hget(const redisReply *r, const char *field)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[i]->str, field) == 0 &&
            r->element[i + 1]->type == REDIS_REPLY_STRING)
            return r->element[i + 1]->str;
    return NULL;
}

static void hcopy(const redisReply *r, const char *field, char *dst, size_t len)
{
    const char *v = hget(r, field);

    copy_str(dst, len, v ? v : "", v ? strlen(v) : 0);
}

/* ---- Keys ---- */

static void job_key(char *buf, size_t len, const char *id)
{
    snprintf(buf, len, "flps:job:%s", id);
}

static void task_key(char *buf, size_t len, const char *id, uint32_t attempt,
                     const char *role, uint32_t index)
{
    snprintf(buf, len, "flps:task:%s:%u:%s-%u", id, attempt, role, index);
}

/* ---- Events ---- */

/* The event's seq comes from the job hash, so it is unique and ordered
 * even though the list is trimmed. The JSON is built here without seq and
 * the script puts seq first. */
static const char event_lua[] =
    "local s = redis.call('HINCRBY', KEYS[1], 'event_seq', 1)\n"
    "redis.call('RPUSH', KEYS[2], '{\"seq\":' .. s .. ',' .. "
    "string.sub(ARGV[1], 2))\n"
    "redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)\n"
    "return s\n";

static flps_err event_cmd(cmdv *c, const char *id, double now, const char *type,
                          const char *message)
{
    char jk[64], ek[80], max[16];
    json_t *o;
    char *text;

    job_key(jk, sizeof(jk), id);
    snprintf(ek, sizeof(ek), "flps:job:%s:events", id);
    snprintf(max, sizeof(max), "%d", STORE_EVENTS_MAX);
    o = json_pack("{s:f,s:s,s:s}", "time", now, "type", type, "message",
                  message);
    if (o == NULL)
        return FLPS_ENOMEM;
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (text == NULL)
        return FLPS_ENOMEM;
    cmd_add(c, "EVAL");
    cmd_add(c, event_lua);
    cmd_add(c, "2");
    cmd_add(c, jk);
    cmd_add(c, ek);
    cmd_add(c, text);
    cmd_add(c, max);
    free(text);
    return FLPS_OK;
}

flps_err sched_store_event(sched_store *st, const char *id, double now,
                           const char *type, const char *message)
{
    cmdv c = {0};
    flps_err rc = event_cmd(&c, id, now, type, message);

    if (rc != FLPS_OK) {
        cmd_free(&c);
        return st_fail(st, rc, "out of memory");
    }
    return cmd_run(st, &c, NULL);
}

static flps_err queue_event(sched_store *st, const char *id, double now,
                            const char *type, const char *message)
{
    cmdv c = {0};
    flps_err rc = event_cmd(&c, id, now, type, message);

    if (rc != FLPS_OK) {
        cmd_free(&c);
        return st_fail(st, rc, "out of memory");
    }
    return cmd_queue(st, &c);
}

/* ---- Create ---- */

flps_err sched_store_create(const char *url, int timeout_ms, sched_store **out)
{
    sched_store *st;
    flps_err rc;

    if (url == NULL || out == NULL)
        return FLPS_EINVAL;
    st = flps_calloc(1, sizeof(*st));
    if (st == NULL)
        return FLPS_ENOMEM;
    rc = rconn_create(url, timeout_ms, &st->rc);
    if (rc != FLPS_OK) {
        flps_free(st);
        return rc;
    }
    *out = st;
    return FLPS_OK;
}

void sched_store_destroy(sched_store *st)
{
    if (st == NULL)
        return;
    rconn_destroy(st->rc);
    flps_free(st);
}

const char *sched_store_error(const sched_store *st)
{
    return st->err;
}

flps_err sched_store_ping(sched_store *st)
{
    flps_err rc = rconn_ping(st->rc);

    return rc == FLPS_OK ? rc : st_rerr(st, rc);
}

/* ---- Reading jobs and tasks ---- */

static void parse_task_name(sched_task *t)
{
    snprintf(t->name, sizeof(t->name), "%s-%u", t->role, t->index);
}

static flps_err task_from_reply(const char *key, const redisReply *r,
                                sched_task *t)
{
    const char *v;

    memset(t, 0, sizeof(*t));
    copy_str(t->key, sizeof(t->key), key, strlen(key));
    hcopy(r, "job", t->job, sizeof(t->job));
    t->attempt = (uint32_t)to_u64(hget(r, "attempt"));
    hcopy(r, "role", t->role, sizeof(t->role));
    t->index = (uint32_t)to_u64(hget(r, "index"));
    parse_task_name(t);
    hcopy(r, "node", t->node, sizeof(t->node));
    hcopy(r, "state", t->state, sizeof(t->state));
    hcopy(r, "endpoint", t->endpoint, sizeof(t->endpoint));
    v = hget(r, "exit_code");
    if (v != NULL && *v != '\0') {
        t->exited = 1;
        t->exit_code = strtol(v, NULL, 10);
    }
    v = hget(r, "signal");
    if (v != NULL && *v != '\0') {
        t->signal = strtol(v, NULL, 10);
        t->exited = t->exited || t->signal != 0;
    }
    t->started_at = to_double(hget(r, "started_at"));
    t->exited_at = to_double(hget(r, "exited_at"));
    t->need.mcpus = sched_res_mcpus(to_double(hget(r, "cpus")));
    t->need.memory = to_u64(hget(r, "memory"));
    t->need.gpus = to_u64(hget(r, "gpus"));
    v = hget(r, "done");
    if (v != NULL && *v != '\0') {
        t->done = flps_strdup(v);
        if (t->done == NULL)
            return FLPS_ENOMEM;
    }
    return FLPS_OK;
}

flps_err sched_store_task(sched_store *st, const char *key, sched_task *out,
                          int *found)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "HGETALL %s", key);

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    *found = r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    if (*found) {
        rc = task_from_reply(key, r, out);
        if (rc != FLPS_OK) {
            sched_task_fini(out);
            st_fail(st, rc, "out of memory");
        }
    }
    freeReplyObject(r);
    return rc;
}

static int cmp_task(const void *a, const void *b)
{
    const sched_task *x = a, *y = b;
    int c = strcmp(x->role, y->role); /* "server" < "worker" */

    if (c != 0)
        return c;
    return (x->index > y->index) - (x->index < y->index);
}

static flps_err load_tasks(sched_store *st, sched_job *j)
{
    redisReply *r = NULL;
    flps_err rc;
    size_t n = 0;

    rc = rconn_cmd(st->rc, &r, "SMEMBERS flps:job:%s:tasks", j->id);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    if (r->elements > 0) {
        j->tasks = flps_calloc(r->elements, sizeof(*j->tasks));
        if (j->tasks == NULL) {
            freeReplyObject(r);
            return st_fail(st, FLPS_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < r->elements; i++) {
        int found = 0;

        rc = sched_store_task(st, r->element[i]->str, &j->tasks[n], &found);
        if (rc != FLPS_OK)
            break;
        n += found;
    }
    j->ntasks = n;
    freeReplyObject(r);
    if (rc == FLPS_OK && j->ntasks > 1) /* qsort(NULL, 0) is undefined */
        qsort(j->tasks, j->ntasks, sizeof(*j->tasks), cmp_task);
    return rc;
}

static flps_err job_from_reply(const redisReply *r, sched_job *j)
{
    static const char *const pf[] = {"p_iteration",     "p_loss",
                                     "p_test_accuracy", "p_bytes_sent",
                                     "p_dense_bytes",   "p_elapsed"};
    double *pv[] = {&j->p_iteration,  &j->p_loss,        &j->p_test_accuracy,
                    &j->p_bytes_sent, &j->p_dense_bytes, &j->p_elapsed};
    const char *v;

    memset(j, 0, sizeof(*j));
    hcopy(r, "id", j->id, sizeof(j->id));
    hcopy(r, "name", j->name, sizeof(j->name));
    v = hget(r, "state");
    if (v == NULL || !sched_state_parse(v, &j->state))
        return FLPS_EPROTO;
    j->priority = (uint32_t)to_u64(hget(r, "priority"));
    j->seq = to_u64(hget(r, "seq"));
    j->submitted_at = to_double(hget(r, "submitted_at"));
    j->started_at = to_double(hget(r, "started_at"));
    j->finished_at = to_double(hget(r, "finished_at"));
    j->attempt = (uint32_t)to_u64(hget(r, "attempt"));
    j->restarts = (uint32_t)to_u64(hget(r, "restarts"));
    j->max_restarts = (uint32_t)to_u64(hget(r, "max_restarts"));
    hcopy(r, "reason", j->reason, sizeof(j->reason));
    j->workers = (uint32_t)to_u64(hget(r, "workers"));
    j->servers = (uint32_t)to_u64(hget(r, "servers"));
    j->iterations = to_u64(hget(r, "iterations"));
    j->time_limit = to_double(hget(r, "time_limit"));
    j->per_worker.mcpus =
        sched_res_mcpus(to_double(hget(r, "cpus_per_worker")));
    j->per_worker.memory = to_u64(hget(r, "memory_per_worker"));
    j->per_worker.gpus = to_u64(hget(r, "gpus_per_worker"));
    j->per_server.mcpus =
        sched_res_mcpus(to_double(hget(r, "cpus_per_server")));
    j->per_server.memory = to_u64(hget(r, "memory_per_server"));
    for (size_t i = 0; i < 6; i++) {
        v = hget(r, pf[i]);
        if (v != NULL && *v != '\0') {
            *pv[i] = to_double(v);
            j->p_mask |= 1u << i;
            j->have_progress = 1;
        }
    }
    v = hget(r, "spec");
    j->spec = flps_strdup(v ? v : "");
    if (j->spec == NULL)
        return FLPS_ENOMEM;
    v = hget(r, "summary");
    if (v != NULL && *v != '\0') {
        j->summary = flps_strdup(v);
        if (j->summary == NULL)
            return FLPS_ENOMEM;
    }
    v = hget(r, "profile");
    if (v != NULL && *v != '\0') {
        j->profile = flps_strdup(v);
        if (j->profile == NULL)
            return FLPS_ENOMEM;
    }
    return FLPS_OK;
}

flps_err sched_store_job(sched_store *st, const char *id, int with_tasks,
                         sched_job *out, int *found)
{
    redisReply *r = NULL;
    sched_job j;
    flps_err rc;

    *found = 0;
    /* Ids are "j" and digits; anything else cannot name a job, and must
     * not reach a key name. */
    if (id[0] != 'j' || id[1] == '\0' ||
        strspn(id + 1, "0123456789") != strlen(id + 1) || strlen(id) > 24)
        return FLPS_OK;
    rc = rconn_cmd(st->rc, &r, "HGETALL flps:job:%s", id);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        freeReplyObject(r);
        return FLPS_OK;
    }
    rc = job_from_reply(r, &j);
    freeReplyObject(r);
    if (rc == FLPS_OK && with_tasks)
        rc = load_tasks(st, &j);
    if (rc != FLPS_OK) {
        sched_job_fini(&j);
        if (rc == FLPS_EPROTO)
            return st_fail(st, rc, "job %s in Redis has no valid state", id);
        if (rc == FLPS_ENOMEM)
            return st_fail(st, rc, "out of memory");
        return rc;
    }
    *out = j;
    *found = 1;
    return FLPS_OK;
}

/* Load the jobs named in a ZRANGE reply. */
static flps_err load_jobs(sched_store *st, const redisReply *ids,
                          int with_tasks, sched_job **out, size_t *n)
{
    sched_job *jobs = NULL;
    size_t k = 0;
    flps_err rc = FLPS_OK;

    if (ids->elements > 0) {
        jobs = flps_calloc(ids->elements, sizeof(*jobs));
        if (jobs == NULL)
            return st_fail(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < ids->elements; i++) {
        int found = 0;

        rc = sched_store_job(st, ids->element[i]->str, with_tasks, &jobs[k],
                             &found);
        if (rc == FLPS_EPROTO) {
            log_warn("skipping job %s: %s", ids->element[i]->str, st->err);
            rc = FLPS_OK;
            continue;
        }
        if (rc != FLPS_OK)
            break;
        k += found;
    }
    if (rc != FLPS_OK) {
        sched_jobs_free(jobs, k);
        return rc;
    }
    *out = jobs;
    *n = k;
    return FLPS_OK;
}

flps_err sched_store_jobs(sched_store *st, sched_job **out, size_t *n)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "ZRANGE flps:jobs 0 -1");

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    rc = load_jobs(st, r, 1, out, n);
    freeReplyObject(r);
    return rc;
}

flps_err sched_store_queue(sched_store *st, sched_job **out, size_t *n)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "ZRANGE flps:queue 0 -1");

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    rc = load_jobs(st, r, 0, out, n);
    freeReplyObject(r);
    return rc;
}

/* ---- Submit ---- */

flps_err sched_store_submit(sched_store *st, const jobspec *spec,
                            const char *text, size_t len, double now,
                            sched_job *out)
{
    char id[32], jk[64], num[64], score[64];
    flps_err rc = FLPS_OK;

    for (int tries = 0; tries < STORE_TXN_TRIES; tries++) {
        redisReply *r = NULL;
        uint64_t seq;
        cmdv c = {0};
        int ok = 0;

        rc = st_drop(st, rconn_cmd(st->rc, &r, "WATCH flps:seq:job"), &r);
        if (rc != FLPS_OK)
            return rc;
        rc = rconn_cmd(st->rc, &r, "GET flps:seq:job");
        if (rc != FLPS_OK)
            return st_rerr(st, rc);
        seq = (r->type == REDIS_REPLY_STRING ? to_u64(r->str) : 0) + 1;
        freeReplyObject(r);
        snprintf(id, sizeof(id), "j%llu", (unsigned long long)seq);
        job_key(jk, sizeof(jk), id);
        rc = st_multi(st);
        if (rc != FLPS_OK)
            return rc;
        rc = st_queued(st, rconn_cmd(st->rc, &r, "INCR flps:seq:job"), &r);
        if (rc != FLPS_OK)
            goto discard;
        cmd_add(&c, "HSET");
        cmd_add(&c, jk);
        cmd_add(&c, "id");
        cmd_add(&c, id);
        cmd_add(&c, "name");
        cmd_add(&c, spec->name);
        cmd_add(&c, "state");
        cmd_add(&c, "QUEUED");
        cmd_add(&c, "priority");
        cmd_addf(&c, "%u", spec->priority);
        cmd_add(&c, "seq");
        cmd_addf(&c, "%llu", (unsigned long long)seq);
        cmd_add(&c, "submitted_at");
        fmt_double(num, sizeof(num), now);
        cmd_add(&c, num);
        cmd_add(&c, "attempt");
        cmd_add(&c, "0");
        cmd_add(&c, "restarts");
        cmd_add(&c, "0");
        cmd_add(&c, "max_restarts");
        cmd_addf(&c, "%u", spec->max_restarts);
        cmd_add(&c, "reason");
        cmd_add(&c, "");
        cmd_add(&c, "spec");
        cmd_addb(&c, text, len);
        cmd_add(&c, "workers");
        cmd_addf(&c, "%u", spec->workers);
        cmd_add(&c, "servers");
        cmd_addf(&c, "%u", spec->servers);
        cmd_add(&c, "iterations");
        cmd_addf(&c, "%llu", (unsigned long long)spec->iterations);
        cmd_add(&c, "time_limit");
        fmt_double(num, sizeof(num), spec->time_limit);
        cmd_add(&c, num);
        cmd_add(&c, "cpus_per_worker");
        fmt_mcpus(num, sizeof(num), sched_res_mcpus(spec->cpus_per_worker));
        cmd_add(&c, num);
        cmd_add(&c, "memory_per_worker");
        cmd_addf(&c, "%llu", (unsigned long long)spec->memory_per_worker);
        cmd_add(&c, "gpus_per_worker");
        cmd_addf(&c, "%u", spec->gpus_per_worker);
        cmd_add(&c, "cpus_per_server");
        fmt_mcpus(num, sizeof(num), sched_res_mcpus(spec->cpus_per_server));
        cmd_add(&c, num);
        cmd_add(&c, "memory_per_server");
        cmd_addf(&c, "%llu", (unsigned long long)spec->memory_per_server);
        rc = cmd_queue(st, &c);
        if (rc != FLPS_OK)
            goto discard;
        rc = st_queued(st,
                       rconn_cmd(st->rc, &r, "ZADD flps:jobs %llu %s",
                                 (unsigned long long)seq, id),
                       &r);
        if (rc != FLPS_OK)
            goto discard;
        snprintf(score, sizeof(score), "%.17g",
                 sched_store_queue_score(spec->priority, seq));
        rc = st_queued(
            st, rconn_cmd(st->rc, &r, "ZADD flps:queue %s %s", score, id), &r);
        if (rc != FLPS_OK)
            goto discard;
        {
            char msg[160];

            snprintf(msg, sizeof(msg),
                     "submitted: %u servers, %u workers, priority %u",
                     spec->servers, spec->workers, spec->priority);
            rc = queue_event(st, id, now, "submitted", msg);
        }
        if (rc != FLPS_OK)
            goto discard;
        rc = st_exec(st, &ok);
        if (rc != FLPS_OK)
            return rc;
        if (!ok)
            continue;
        if (out != NULL) {
            int found = 0;

            rc = sched_store_job(st, id, 1, out, &found);
            if (rc == FLPS_OK && !found)
                rc = st_fail(st, FLPS_EPROTO, "job %s vanished", id);
        }
        return rc;
    discard:
        st_discard(st);
        return rc;
    }
    return st_fail(st, FLPS_ETIMEDOUT,
                   "gave up after %d submits raced on flps:seq:job",
                   STORE_TXN_TRIES);
}

/* ---- Transitions ---- */

/* The task keys of a job's current attempt and the node of each (""
 * when the task hash is gone). */
typedef struct task_list {
    char **keys;
    char **nodes;
    size_t n;
} task_list;

static void task_list_free(task_list *tl)
{
    sched_strv_free(tl->keys, tl->n);
    sched_strv_free(tl->nodes, tl->n);
    memset(tl, 0, sizeof(*tl));
}

static flps_err task_list_read(sched_store *st, const char *id, task_list *tl)
{
    redisReply *r = NULL, *h = NULL;
    flps_err rc;

    memset(tl, 0, sizeof(*tl));
    rc = rconn_cmd(st->rc, &r, "SMEMBERS flps:job:%s:tasks", id);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    tl->keys = flps_calloc(r->elements + 1, sizeof(char *));
    tl->nodes = flps_calloc(r->elements + 1, sizeof(char *));
    if (tl->keys == NULL || tl->nodes == NULL) {
        freeReplyObject(r);
        flps_free(tl->keys);
        flps_free(tl->nodes);
        memset(tl, 0, sizeof(*tl));
        return st_fail(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        const char *key = r->element[i]->str;

        rc = rconn_cmd(st->rc, &h, "HGET %s node", key);
        if (rc != FLPS_OK) {
            rc = st_rerr(st, rc);
            break;
        }
        tl->keys[tl->n] = flps_strdup(key);
        tl->nodes[tl->n] =
            flps_strdup(h->type == REDIS_REPLY_STRING ? h->str : "");
        freeReplyObject(h);
        tl->n++;
        if (tl->keys[tl->n - 1] == NULL || tl->nodes[tl->n - 1] == NULL) {
            rc = st_fail(st, FLPS_ENOMEM, "out of memory");
            break;
        }
    }
    freeReplyObject(r);
    if (rc != FLPS_OK)
        task_list_free(tl);
    return rc;
}

/* Queue SREM of every task from its node's desired set. */
static flps_err queue_unassign(sched_store *st, const task_list *tl)
{
    for (size_t i = 0; i < tl->n; i++) {
        redisReply *r = NULL;
        flps_err rc;

        if (tl->nodes[i][0] == '\0')
            continue;
        rc = st_queued(st,
                       rconn_cmd(st->rc, &r, "SREM flps:node:%s:tasks %s",
                                 tl->nodes[i], tl->keys[i]),
                       &r);
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

/* WATCH the job hash and read the fields a transition checks. *r is the
 * HGETALL reply (NULL when the job does not exist). */
static flps_err watch_job(sched_store *st, const char *id, redisReply **r)
{
    flps_err rc;
    redisReply *w = NULL;

    rc = st_drop(st, rconn_cmd(st->rc, &w, "WATCH flps:job:%s", id), &w);
    if (rc != FLPS_OK)
        return rc;
    rc = rconn_cmd(st->rc, r, "HGETALL flps:job:%s", id);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    if ((*r)->type != REDIS_REPLY_ARRAY || (*r)->elements == 0) {
        freeReplyObject(*r);
        *r = NULL;
    }
    return FLPS_OK;
}

static int job_is(const redisReply *h, const char *state, uint32_t attempt)
{
    const char *s = hget(h, "state");

    return s != NULL && strcmp(s, state) == 0 &&
           to_u64(hget(h, "attempt")) == attempt;
}

/* The end of an attempt, inside a WATCH on the job hash: MULTI, the job's
 * own fields (queued by fields()), its tasks taken off their nodes'
 * desired sets (the agents stop them), an event, EXEC. *ok is 0 when the
 * job changed under the WATCH: the caller retries. */
typedef flps_err (*end_fields_fn)(sched_store *st, const char *id,
                                  const char *now, void *arg);

static flps_err end_attempt(sched_store *st, const char *id, double now,
                            end_fields_fn fields, void *arg,
                            const char *ev_type, const char *ev_msg, int *ok)
{
    char num[64];
    task_list tl;
    flps_err rc;

    *ok = 0;
    rc = task_list_read(st, id, &tl);
    if (rc != FLPS_OK) {
        st_unwatch(st);
        return rc;
    }
    rc = st_multi(st);
    if (rc != FLPS_OK) {
        task_list_free(&tl);
        return rc;
    }
    fmt_double(num, sizeof(num), now);
    rc = fields(st, id, num, arg);
    if (rc == FLPS_OK)
        rc = queue_unassign(st, &tl);
    if (rc == FLPS_OK)
        rc = queue_event(st, id, now, ev_type, ev_msg);
    task_list_free(&tl);
    if (rc != FLPS_OK) {
        st_discard(st);
        return rc;
    }
    return st_exec(st, ok);
}

static flps_err cancel_fields(sched_store *st, const char *id, const char *now,
                              void *arg)
{
    redisReply *r = NULL;
    flps_err rc;

    (void)arg;
    rc = st_queued(st,
                   rconn_cmd(st->rc, &r,
                             "HSET flps:job:%s state CANCELLED "
                             "finished_at %s reason %s",
                             id, now, "cancelled"),
                   &r);
    if (rc == FLPS_OK)
        rc = st_queued(st, rconn_cmd(st->rc, &r, "ZREM flps:queue %s", id), &r);
    return rc;
}

flps_err sched_store_cancel(sched_store *st, const char *id, double now,
                            sched_cancel_result *result, sched_job *out)
{
    flps_err rc = FLPS_OK;
    int found = 0;

    for (int tries = 0; tries < STORE_TXN_TRIES; tries++) {
        redisReply *h = NULL;
        sched_state state;
        int ok = 0;

        sched_job tmp;

        rc = sched_store_job(st, id, 0, &tmp, &found); /* validates id */
        if (rc != FLPS_OK)
            return rc;
        if (!found) {
            *result = SCHED_CANCEL_NO_JOB;
            return FLPS_OK;
        }
        sched_job_fini(&tmp);
        rc = watch_job(st, id, &h);
        if (rc != FLPS_OK)
            return rc;
        if (h == NULL) {
            st_unwatch(st);
            *result = SCHED_CANCEL_NO_JOB;
            return FLPS_OK;
        }
        if (!sched_state_parse(hget(h, "state") ? hget(h, "state") : "",
                               &state) ||
            sched_state_is_final(state)) {
            freeReplyObject(h);
            st_unwatch(st);
            *result = SCHED_CANCEL_FINISHED;
            return out ? sched_store_job(st, id, 1, out, &found) : FLPS_OK;
        }
        freeReplyObject(h);
        rc = end_attempt(st, id, now, cancel_fields, NULL, "cancelled",
                         state == SCHED_RUNNING
                             ? "cancelled; its tasks are being stopped"
                             : "cancelled while queued",
                         &ok);
        if (rc != FLPS_OK)
            return rc;
        if (!ok)
            continue;
        *result = SCHED_CANCEL_DONE;
        if (out == NULL)
            return FLPS_OK;
        rc = sched_store_job(st, id, 1, out, &found);
        if (rc == FLPS_OK && !found)
            rc = st_fail(st, FLPS_EPROTO, "job %s vanished", id);
        return rc;
    }
    return st_fail(st, FLPS_ETIMEDOUT,
                   "gave up cancelling %s: the job kept changing", id);
}

flps_err sched_store_place(sched_store *st, const char *leader_id,
                           const sched_job *job,
                           const char *const *server_nodes,
                           const char *const *worker_nodes, double now,
                           int *committed)
{
    char key[160], num[64], msg[512];
    flps_err rc = FLPS_OK;

    *committed = 0;
    for (int tries = 0; tries < STORE_TXN_TRIES; tries++) {
        redisReply *h = NULL, *r = NULL;
        int ok = 0;
        size_t off = 0;

        if (leader_id != NULL) {
            rc = st_drop(st, rconn_cmd(st->rc, &r, "WATCH flps:leader"), &r);
            if (rc != FLPS_OK)
                return rc;
            rc = rconn_cmd(st->rc, &r, "GET flps:leader");
            if (rc != FLPS_OK)
                return st_rerr(st, rc);
            ok =
                r->type == REDIS_REPLY_STRING && strcmp(r->str, leader_id) == 0;
            freeReplyObject(r);
            if (!ok) {
                st_unwatch(st);
                return FLPS_OK;
            }
        }
        rc = watch_job(st, job->id, &h);
        if (rc != FLPS_OK)
            return rc;
        if (h == NULL || !job_is(h, "QUEUED", job->attempt)) {
            if (h)
                freeReplyObject(h);
            st_unwatch(st);
            return FLPS_OK;
        }
        freeReplyObject(h);
        rc = st_multi(st);
        if (rc != FLPS_OK)
            return rc;
        off = (size_t)snprintf(msg, sizeof(msg),
                               "placed (attempt %u):", job->attempt);
        for (int role = 0; role < 2 && rc == FLPS_OK; role++) {
            uint32_t count = role == 0 ? job->servers : job->workers;
            const char *const *where = role == 0 ? server_nodes : worker_nodes;
            const sched_res *need =
                role == 0 ? &job->per_server : &job->per_worker;
            const char *rname = role == 0 ? "server" : "worker";

            for (uint32_t i = 0; i < count && rc == FLPS_OK; i++) {
                cmdv c = {0};

                task_key(key, sizeof(key), job->id, job->attempt, rname, i);
                rc = st_queued(st, rconn_cmd(st->rc, &r, "DEL %s", key), &r);
                if (rc != FLPS_OK)
                    break;
                cmd_add(&c, "HSET");
                cmd_add(&c, key);
                cmd_add(&c, "job");
                cmd_add(&c, job->id);
                cmd_add(&c, "attempt");
                cmd_addf(&c, "%u", job->attempt);
                cmd_add(&c, "role");
                cmd_add(&c, rname);
                cmd_add(&c, "index");
                cmd_addf(&c, "%u", i);
                cmd_add(&c, "node");
                cmd_add(&c, where[i]);
                cmd_add(&c, "state");
                cmd_add(&c, "ASSIGNED");
                cmd_add(&c, "cpus");
                fmt_mcpus(num, sizeof(num), need->mcpus);
                cmd_add(&c, num);
                cmd_add(&c, "memory");
                cmd_addf(&c, "%llu", (unsigned long long)need->memory);
                cmd_add(&c, "gpus");
                cmd_addf(&c, "%llu", (unsigned long long)need->gpus);
                rc = cmd_queue(st, &c);
                if (rc == FLPS_OK)
                    rc = st_queued(st,
                                   rconn_cmd(st->rc, &r,
                                             "SADD flps:node:%s:tasks %s",
                                             where[i], key),
                                   &r);
                if (rc == FLPS_OK)
                    rc = st_queued(st,
                                   rconn_cmd(st->rc, &r,
                                             "SADD flps:job:%s:tasks %s",
                                             job->id, key),
                                   &r);
                if (off < sizeof(msg))
                    off += (size_t)snprintf(
                        msg + off, sizeof(msg) - off, "%s %s-%u on %s",
                        i == 0 && role == 0 ? "" : ",", rname, i, where[i]);
            }
        }
        fmt_double(num, sizeof(num), now);
        if (rc == FLPS_OK)
            rc = st_queued(st,
                           rconn_cmd(st->rc, &r,
                                     "HSET flps:job:%s state RUNNING "
                                     "started_at %s",
                                     job->id, num),
                           &r);
        if (rc == FLPS_OK)
            rc = st_queued(
                st, rconn_cmd(st->rc, &r, "ZREM flps:queue %s", job->id), &r);
        if (rc == FLPS_OK)
            rc = queue_event(st, job->id, now, "placed", msg);
        if (rc != FLPS_OK) {
            st_discard(st);
            return rc;
        }
        rc = st_exec(st, &ok);
        if (rc != FLPS_OK)
            return rc;
        if (ok) {
            *committed = 1;
            return FLPS_OK;
        }
    }
    return st_fail(st, FLPS_ETIMEDOUT,
                   "gave up placing %s: the job kept changing", job->id);
}

flps_err sched_store_pop_exit(sched_store *st, char *key, size_t keylen,
                              int *got)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "LPOP flps:exits");

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    *got = r->type == REDIS_REPLY_STRING;
    if (*got)
        copy_str(key, keylen, r->str, r->len);
    freeReplyObject(r);
    return FLPS_OK;
}

static flps_err succeed_fields(sched_store *st, const char *id, const char *now,
                               void *arg)
{
    redisReply *r = NULL;

    return st_queued(st,
                     rconn_cmd(st->rc, &r,
                               "HSET flps:job:%s state SUCCEEDED "
                               "finished_at %s summary %s",
                               id, now, (const char *)arg),
                     &r);
}

flps_err sched_store_succeed(sched_store *st, const char *id, uint32_t attempt,
                             const char *summary, double now, int *done)
{
    flps_err rc = FLPS_OK;

    *done = 0;
    for (int tries = 0; tries < STORE_TXN_TRIES; tries++) {
        redisReply *h = NULL;
        int ok = 0;

        rc = watch_job(st, id, &h);
        if (rc != FLPS_OK)
            return rc;
        if (h == NULL || !job_is(h, "RUNNING", attempt)) {
            if (h)
                freeReplyObject(h);
            st_unwatch(st);
            return FLPS_OK;
        }
        freeReplyObject(h);
        rc = end_attempt(st, id, now, succeed_fields, (void *)summary,
                         "succeeded", summary, &ok);
        if (rc != FLPS_OK)
            return rc;
        if (ok) {
            *done = 1;
            return FLPS_OK;
        }
    }
    return st_fail(st, FLPS_ETIMEDOUT,
                   "gave up finishing %s: the job kept changing", id);
}

typedef struct fail_args {
    int restart;
    const char *reason;
    uint32_t restarts, attempt;
    char score[64]; /* the job's queue score, for a restart */
} fail_args;

/* A failed attempt: back to the queue at its old place for a restart,
 * else FAILED. */
static flps_err fail_fields(sched_store *st, const char *id, const char *now,
                            void *arg)
{
    const fail_args *fa = arg;
    redisReply *r = NULL;
    flps_err rc;

    if (!fa->restart)
        return st_queued(st,
                         rconn_cmd(st->rc, &r,
                                   "HSET flps:job:%s state FAILED "
                                   "finished_at %s reason %s",
                                   id, now, fa->reason),
                         &r);
    rc = st_queued(st,
                   rconn_cmd(st->rc, &r,
                             "HSET flps:job:%s state QUEUED "
                             "reason %s restarts %u attempt %u",
                             id, fa->reason, fa->restarts + 1, fa->attempt + 1),
                   &r);
    if (rc == FLPS_OK)
        rc = st_queued(
            st, rconn_cmd(st->rc, &r, "ZADD flps:queue %s %s", fa->score, id),
            &r);
    if (rc == FLPS_OK)
        rc = st_queued(st, rconn_cmd(st->rc, &r, "DEL flps:job:%s:tasks", id),
                       &r);
    return rc;
}

flps_err sched_store_fail(sched_store *st, const char *id, uint32_t attempt,
                          const char *reason, int allow_restart, double now,
                          sched_fail_result *result)
{
    char msg[700];
    flps_err rc = FLPS_OK;

    *result = SCHED_FAIL_IGNORED;
    for (int tries = 0; tries < STORE_TXN_TRIES; tries++) {
        redisReply *h = NULL;
        uint32_t restarts, max_restarts, priority;
        uint64_t seq;
        fail_args fa;
        int ok = 0;

        rc = watch_job(st, id, &h);
        if (rc != FLPS_OK)
            return rc;
        if (h == NULL || !job_is(h, "RUNNING", attempt)) {
            if (h)
                freeReplyObject(h);
            st_unwatch(st);
            return FLPS_OK;
        }
        restarts = (uint32_t)to_u64(hget(h, "restarts"));
        max_restarts = (uint32_t)to_u64(hget(h, "max_restarts"));
        priority = (uint32_t)to_u64(hget(h, "priority"));
        seq = to_u64(hget(h, "seq"));
        freeReplyObject(h);
        fa.restart = allow_restart && restarts < max_restarts;
        fa.reason = reason;
        fa.restarts = restarts;
        fa.attempt = attempt;
        snprintf(fa.score, sizeof(fa.score), "%.17g",
                 sched_store_queue_score(priority, seq));
        if (fa.restart)
            snprintf(msg, sizeof(msg),
                     "restart %u of %u from the latest checkpoint after: %s",
                     restarts + 1, max_restarts, reason);
        else
            snprintf(msg, sizeof(msg), "failed: %s", reason);
        rc = end_attempt(st, id, now, fail_fields, &fa,
                         fa.restart ? "restarted" : "failed", msg, &ok);
        if (rc != FLPS_OK)
            return rc;
        if (ok) {
            *result = fa.restart ? SCHED_FAIL_REQUEUED : SCHED_FAIL_FAILED;
            return FLPS_OK;
        }
    }
    return st_fail(st, FLPS_ETIMEDOUT,
                   "gave up failing %s: the job kept changing", id);
}

/* ---- Events, logs, plan ---- */

flps_err sched_store_events(sched_store *st, const char *id, long long since,
                            char ***out, size_t *n)
{
    redisReply *r = NULL;
    char **v = NULL;
    size_t k = 0;
    flps_err rc;

    rc = rconn_cmd(st->rc, &r, "LRANGE flps:job:%s:events 0 -1", id);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    v = flps_calloc(r->elements + 1, sizeof(*v));
    if (v == NULL) {
        freeReplyObject(r);
        return st_fail(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        json_t *e = json_loadb(r->element[i]->str, r->element[i]->len, 0, NULL);
        json_int_t seq = e ? json_integer_value(json_object_get(e, "seq")) : 0;

        json_decref(e);
        if (seq <= since)
            continue;
        v[k] = dup_n(r->element[i]->str, r->element[i]->len);
        if (v[k] == NULL) {
            freeReplyObject(r);
            sched_strv_free(v, k);
            return st_fail(st, FLPS_ENOMEM, "out of memory");
        }
        k++;
    }
    freeReplyObject(r);
    *out = v;
    *n = k;
    return FLPS_OK;
}

flps_err sched_store_logs(sched_store *st, const char *id, const char *after,
                          long limit, char ***ids, char ***tasks, char ***lines,
                          size_t *n)
{
    redisReply *r = NULL;
    char start[80];
    char **vi = NULL, **vt = NULL, **vl = NULL;
    size_t k = 0;
    flps_err rc;

    if (after == NULL || *after == '\0')
        snprintf(start, sizeof(start), "-");
    else
        snprintf(start, sizeof(start), "(%s", after);
    rc = rconn_cmd(st->rc, &r, "XRANGE flps:job:%s:logs %s + COUNT %ld", id,
                   start, limit);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    vi = flps_calloc(r->elements + 1, sizeof(*vi));
    vt = flps_calloc(r->elements + 1, sizeof(*vt));
    vl = flps_calloc(r->elements + 1, sizeof(*vl));
    if (vi == NULL || vt == NULL || vl == NULL)
        goto oom;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        const redisReply *f;
        const char *task = "", *line = "";

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
            continue;
        f = e->element[1];
        for (size_t j = 0; j + 1 < f->elements; j += 2) {
            if (strcmp(f->element[j]->str, "task") == 0)
                task = f->element[j + 1]->str;
            else if (strcmp(f->element[j]->str, "line") == 0)
                line = f->element[j + 1]->str;
        }
        vi[k] = flps_strdup(e->element[0]->str);
        vt[k] = flps_strdup(task);
        vl[k] = flps_strdup(line);
        k++;
        if (vi[k - 1] == NULL || vt[k - 1] == NULL || vl[k - 1] == NULL)
            goto oom;
    }
    freeReplyObject(r);
    *ids = vi;
    *tasks = vt;
    *lines = vl;
    *n = k;
    return FLPS_OK;
oom:
    freeReplyObject(r);
    sched_strv_free(vi, k);
    sched_strv_free(vt, k);
    sched_strv_free(vl, k);
    return st_fail(st, FLPS_ENOMEM, "out of memory");
}

flps_err sched_store_plan(sched_store *st, const char *id, char **version,
                          char **plan, int *found)
{
    redisReply *r = NULL;
    flps_err rc =
        rconn_cmd(st->rc, &r, "HMGET flps:job:%s:plan version plan", id);

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    *found = r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING;
    if (*found) {
        *version = flps_strdup(r->element[0]->type == REDIS_REPLY_STRING
                                   ? r->element[0]->str
                                   : "0");
        *plan = flps_strdup(r->element[1]->str);
        if (*version == NULL || *plan == NULL) {
            flps_free(*version);
            flps_free(*plan);
            freeReplyObject(r);
            return st_fail(st, FLPS_ENOMEM, "out of memory");
        }
    }
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_plan_seen(sched_store *st, const char *id,
                               uint64_t *version, char *seen, size_t seenlen)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r,
                            "HMGET flps:job:%s:plan version profile_seen", id);

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        return st_fail(st, FLPS_EPROTO, "Redis answered HMGET oddly");
    }
    *version = r->element[0]->type == REDIS_REPLY_STRING
                   ? to_u64(r->element[0]->str)
                   : 0;
    if (r->element[1]->type == REDIS_REPLY_STRING)
        copy_str(seen, seenlen, r->element[1]->str, r->element[1]->len);
    else
        copy_str(seen, seenlen, "", 0);
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_plan_put(sched_store *st, const char *leader_id,
                              const char *id, uint64_t prev_version,
                              const char *plan_json, const char *seen,
                              double now, const char *type, const char *message,
                              int *committed)
{
    char key[96], num[64];
    redisReply *r = NULL;
    flps_err rc;
    int ok = 0;

    *committed = 0;
    snprintf(key, sizeof(key), "flps:job:%s:plan", id);
    rc = st_drop(st, rconn_cmd(st->rc, &r, "WATCH flps:leader %s", key), &r);
    if (rc != FLPS_OK)
        return rc;
    rc = rconn_cmd(st->rc, &r, "GET flps:leader");
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    ok = r->type == REDIS_REPLY_STRING && strcmp(r->str, leader_id) == 0;
    freeReplyObject(r);
    if (ok) {
        rc = rconn_cmd(st->rc, &r, "HGET %s version", key);
        if (rc != FLPS_OK)
            return st_rerr(st, rc);
        ok = (r->type == REDIS_REPLY_STRING ? to_u64(r->str) : 0) ==
             prev_version;
        freeReplyObject(r);
    }
    if (!ok) {
        st_unwatch(st);
        return FLPS_OK;
    }
    rc = st_multi(st);
    if (rc != FLPS_OK)
        return rc;
    if (plan_json != NULL) {
        cmdv c = {0};

        fmt_double(num, sizeof(num), now);
        cmd_add(&c, "HSET");
        cmd_add(&c, key);
        cmd_add(&c, "version");
        cmd_addf(&c, "%llu", (unsigned long long)prev_version + 1);
        cmd_add(&c, "plan");
        cmd_add(&c, plan_json);
        cmd_add(&c, "created_at");
        cmd_add(&c, num);
        cmd_add(&c, "profile_seen");
        cmd_add(&c, seen);
        rc = cmd_queue(st, &c);
    } else {
        rc = st_queued(
            st, rconn_cmd(st->rc, &r, "HSET %s profile_seen %s", key, seen),
            &r);
    }
    if (rc == FLPS_OK)
        rc = queue_event(st, id, now, type, message);
    if (rc != FLPS_OK) {
        st_discard(st);
        return rc;
    }
    rc = st_exec(st, &ok);
    if (rc != FLPS_OK)
        return rc;
    *committed = ok;
    return FLPS_OK;
}

/* ---- Nodes ---- */

static int cmp_node(const void *a, const void *b)
{
    return strcmp(((const sched_node *)a)->name, ((const sched_node *)b)->name);
}

static flps_err load_node(sched_store *st, const char *name, sched_node *nd)
{
    redisReply *r = NULL, *t = NULL;
    flps_err rc;

    copy_str(nd->name, sizeof(nd->name), name, strlen(name));
    rc = rconn_cmd(st->rc, &r, "HGETALL flps:node:%s", name);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    hcopy(r, "address", nd->address, sizeof(nd->address));
    hcopy(r, "state", nd->state, sizeof(nd->state));
    {
        const char *mem = hget(r, "memory");
        uint64_t bytes = 0;

        /* Bytes as flagent writes them; a SIZE ("8Gi") is read too. */
        if (mem != NULL && jobspec_size_parse(mem, &bytes) == FLPS_OK)
            nd->cap.memory = bytes;
    }
    nd->cap.mcpus = sched_res_mcpus(to_double(hget(r, "cpus")));
    nd->cap.gpus = to_u64(hget(r, "gpus"));
    nd->last_heartbeat = to_double(hget(r, "last_heartbeat"));
    nd->registered_at = to_double(hget(r, "registered_at"));
    freeReplyObject(r);
    rc = rconn_cmd(st->rc, &r, "EXISTS flps:node:%s:alive", name);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    nd->alive = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    rc = rconn_cmd(st->rc, &r, "SMEMBERS flps:node:%s:tasks", name);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    nd->tasks = flps_calloc(r->elements + 1, sizeof(*nd->tasks));
    nd->task_need = flps_calloc(r->elements + 1, sizeof(*nd->task_need));
    if (nd->tasks == NULL || nd->task_need == NULL) {
        freeReplyObject(r);
        return st_fail(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        const char *key = r->element[i]->str;
        sched_res need;

        rc = rconn_cmd(st->rc, &t, "HMGET %s cpus memory gpus", key);
        if (rc != FLPS_OK) {
            freeReplyObject(r);
            return st_rerr(st, rc);
        }
        need.mcpus = sched_res_mcpus(to_double(
            t->element[0]->type == REDIS_REPLY_STRING ? t->element[0]->str
                                                      : NULL));
        need.memory = to_u64(t->element[1]->type == REDIS_REPLY_STRING
                                 ? t->element[1]->str
                                 : NULL);
        need.gpus = to_u64(t->element[2]->type == REDIS_REPLY_STRING
                               ? t->element[2]->str
                               : NULL);
        freeReplyObject(t);
        nd->tasks[nd->ntasks] = flps_strdup(key);
        if (nd->tasks[nd->ntasks] == NULL) {
            freeReplyObject(r);
            return st_fail(st, FLPS_ENOMEM, "out of memory");
        }
        nd->task_need[nd->ntasks++] = need;
        nd->used.mcpus += need.mcpus;
        nd->used.memory += need.memory;
        nd->used.gpus += need.gpus;
    }
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_nodes(sched_store *st, sched_node **out, size_t *n)
{
    redisReply *r = NULL;
    sched_node *nodes = NULL;
    size_t k = 0;
    flps_err rc = rconn_cmd(st->rc, &r, "SMEMBERS flps:nodes");

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    nodes = flps_calloc(r->elements + 1, sizeof(*nodes));
    if (nodes == NULL) {
        freeReplyObject(r);
        return st_fail(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        rc = load_node(st, r->element[i]->str, &nodes[k++]);
        if (rc != FLPS_OK)
            break;
    }
    freeReplyObject(r);
    if (rc != FLPS_OK) {
        sched_nodes_free(nodes, k);
        return rc;
    }
    qsort(nodes, k, sizeof(*nodes), cmp_node);
    *out = nodes;
    *n = k;
    return FLPS_OK;
}

/* Move node name from state `from` to `to` when its alive key exists
 * (want_alive = 1) or not (0), WATCHing both keys. */
static flps_err node_move(sched_store *st, const char *name, const char *from,
                          const char *to, int want_alive, int *marked)
{
    flps_err rc = FLPS_OK;

    *marked = 0;
    for (int tries = 0; tries < STORE_TXN_TRIES; tries++) {
        redisReply *r = NULL;
        int ok = 0, alive;

        rc = st_drop(st,
                     rconn_cmd(st->rc, &r,
                               "WATCH flps:node:%s flps:node:%s:alive", name,
                               name),
                     &r);
        if (rc != FLPS_OK)
            return rc;
        rc = rconn_cmd(st->rc, &r, "EXISTS flps:node:%s:alive", name);
        if (rc != FLPS_OK)
            return st_rerr(st, rc);
        alive = r->integer == 1;
        freeReplyObject(r);
        rc = rconn_cmd(st->rc, &r, "HGET flps:node:%s state", name);
        if (rc != FLPS_OK)
            return st_rerr(st, rc);
        ok = r->type == REDIS_REPLY_STRING && strcmp(r->str, from) == 0;
        freeReplyObject(r);
        if (!ok || alive != want_alive) {
            st_unwatch(st);
            return FLPS_OK;
        }
        rc = st_multi(st);
        if (rc != FLPS_OK)
            return rc;
        rc = st_queued(
            st, rconn_cmd(st->rc, &r, "HSET flps:node:%s state %s", name, to),
            &r);
        if (rc != FLPS_OK) {
            st_discard(st);
            return rc;
        }
        rc = st_exec(st, &ok);
        if (rc != FLPS_OK)
            return rc;
        if (ok) {
            *marked = 1;
            return FLPS_OK;
        }
    }
    return st_fail(st, FLPS_ETIMEDOUT, "gave up marking node %s %s", name, to);
}

flps_err sched_store_node_lost(sched_store *st, const char *name, int *marked)
{
    return node_move(st, name, "READY", "LOST", 0, marked);
}

flps_err sched_store_node_back(sched_store *st, const char *name, int *marked)
{
    return node_move(st, name, "LOST", "READY", 1, marked);
}

flps_err sched_store_node_cap_ttl(sched_store *st, const char *name, int ttl_s)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "PTTL flps:node:%s:alive", name);
    int forever;

    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    forever = r->type == REDIS_REPLY_INTEGER && r->integer == -1;
    freeReplyObject(r);
    if (!forever)
        return FLPS_OK;
    log_warn("node %s: its alive key has no TTL; giving it %d s", name, ttl_s);
    return st_drop(
        st, rconn_cmd(st->rc, &r, "EXPIRE flps:node:%s:alive %d", name, ttl_s),
        &r);
}

/* ---- Lease ---- */

static const char renew_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

static const char release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n";

flps_err sched_store_lease(sched_store *st, const char *id, long lease_ms,
                           int *held)
{
    redisReply *r = NULL;
    flps_err rc;

    rc = rconn_cmd(st->rc, &r, "SET flps:leader %s NX PX %ld", id, lease_ms);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    *held = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (*held)
        return FLPS_OK;
    rc = rconn_cmd(st->rc, &r, "EVAL %s 1 flps:leader %s %ld", renew_lua, id,
                   lease_ms);
    if (rc != FLPS_OK)
        return st_rerr(st, rc);
    *held = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_lease_release(sched_store *st, const char *id)
{
    redisReply *r = NULL;

    return st_drop(
        st, rconn_cmd(st->rc, &r, "EVAL %s 1 flps:leader %s", release_lua, id),
        &r);
}
