/* flsched's jobs in Redis: the job and task hashes, submit, and the moves
 * of a job's state (placement, success, failure, restart, cancel). */
#include "scheduler/sched_store.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "proto/creds.h"
#include "scheduler/sched_jobhash.h"
#include "scheduler/sched_store_int.h"
#include "services/plural.h"

/* ---- States and freeing ---- */

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
    if (j->credentials != NULL) {
        explicit_bzero(j->credentials, strlen(j->credentials));
        flps_free(j->credentials);
        j->credentials = NULL;
    }
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

/* ---- Reading jobs and tasks ---- */

static void parse_task_name(sched_task *t)
{
    snprintf(t->name, sizeof(t->name), "%s-%u", t->role, t->index);
}

/* An exit status or signal as flagent writes it; 0 when malformed (the
 * task still counts as exited). */
static long field_long(const char *s)
{
    int64_t v = 0;

    if (flps_parse_i64(NULL, s, LONG_MIN, LONG_MAX, &v, NULL, 0) != FLPS_OK)
        return 0;
    return (long)v;
}

static flps_err task_from_reply(const char *key, const redisReply *r,
                                sched_task *t)
{
    const char *v;

    memset(t, 0, sizeof(*t));
    sched_store_copy(t->key, sizeof(t->key), key, strlen(key));
    sched_store_hcopy(r, "job", t->job, sizeof(t->job));
    t->attempt = (uint32_t)sched_store_to_u64(sched_store_hget(r, "attempt"));
    sched_store_hcopy(r, "role", t->role, sizeof(t->role));
    t->index = (uint32_t)sched_store_to_u64(sched_store_hget(r, "index"));
    parse_task_name(t);
    sched_store_hcopy(r, "node", t->node, sizeof(t->node));
    sched_store_hcopy(r, "state", t->state, sizeof(t->state));
    sched_store_hcopy(r, "endpoint", t->endpoint, sizeof(t->endpoint));
    sched_store_hcopy(r, "metrics", t->metrics, sizeof(t->metrics));
    sched_store_hcopy(r, "error", t->error, sizeof(t->error));
    v = sched_store_hget(r, "p_bytes_sent");
    if (v != NULL && *v != '\0') {
        t->have_bytes = 1;
        t->p_bytes_sent = sched_store_to_double(v);
        t->p_dense_bytes =
            sched_store_to_double(sched_store_hget(r, "p_dense_bytes"));
    }
    v = sched_store_hget(r, "exit_code");
    if (v != NULL && *v != '\0') {
        t->exited = 1;
        t->exit_code = field_long(v);
    }
    v = sched_store_hget(r, "signal");
    if (v != NULL && *v != '\0') {
        t->signal = field_long(v);
        t->exited = t->exited || t->signal != 0;
    }
    t->started_at = sched_store_to_double(sched_store_hget(r, "started_at"));
    t->exited_at = sched_store_to_double(sched_store_hget(r, "exited_at"));
    t->need.mcpus =
        sched_res_mcpus(sched_store_to_double(sched_store_hget(r, "cpus")));
    t->need.memory = sched_store_to_u64(sched_store_hget(r, "memory"));
    t->need.gpus = sched_store_to_u64(sched_store_hget(r, "gpus"));
    v = sched_store_hget(r, "done");
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
        return sched_store_rerr(st, rc);
    *found = r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    if (*found) {
        rc = task_from_reply(key, r, out);
        if (rc != FLPS_OK) {
            sched_task_fini(out);
            sched_store_seterr(st, rc, "out of memory");
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
        return sched_store_rerr(st, rc);
    if (r->elements > 0) {
        j->tasks = flps_calloc(r->elements, sizeof(*j->tasks));
        if (j->tasks == NULL) {
            freeReplyObject(r);
            return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
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
        return sched_store_rerr(st, rc);
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        freeReplyObject(r);
        return FLPS_OK;
    }
    rc = sched_jobhash_read(r, &j);
    freeReplyObject(r);
    if (rc == FLPS_OK && with_tasks)
        rc = load_tasks(st, &j);
    if (rc != FLPS_OK) {
        sched_job_fini(&j);
        if (rc == FLPS_EPROTO)
            return sched_store_seterr(st, rc,
                                      "job %s in Redis has no valid state", id);
        if (rc == FLPS_ENOMEM)
            return sched_store_seterr(st, rc, "out of memory");
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
            return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
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

/* The jobs whose ids the sorted set zkey holds, in its order (with their
 * tasks when with_tasks). */
static flps_err jobs_of_set(sched_store *st, const char *zkey, int with_tasks,
                            sched_job **out, size_t *n)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "ZRANGE %s 0 -1", zkey);

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    rc = load_jobs(st, r, with_tasks, out, n);
    freeReplyObject(r);
    return rc;
}

flps_err sched_store_jobs(sched_store *st, sched_job **out, size_t *n)
{
    return jobs_of_set(st, "flps:jobs", 1, out, n);
}

flps_err sched_store_queue(sched_store *st, sched_job **out, size_t *n)
{
    return jobs_of_set(st, "flps:queue", 0, out, n);
}

/* ---- Submit ---- */

/* The job's own credentials (a secret, and CURVE keys where libzmq has
 * them): stored in its hash for flagent to hand to its processes only. */
static flps_err job_credentials(sched_job *j, const jobspec *spec)
{
    char text[CREDS_FILE_MAX], why[256];
    flps_creds c;
    /* CURVE keys whenever this libzmq can make them and the job did not
     * turn encryption off: the transport is chosen only at placement, and
     * a shard over RDMA ignores them. */
    flps_err rc = creds_generate(spec->encryption && creds_have_curve(), &c,
                                 why, sizeof(why));

    if (rc != FLPS_OK) {
        log_error("cannot make the job's credentials: %s", why);
        return rc;
    }
    rc = creds_format(&c, text, sizeof(text));
    creds_wipe(&c);
    if (rc == FLPS_OK) {
        j->credentials = flps_strdup(text);
        rc = j->credentials != NULL ? FLPS_OK : FLPS_ENOMEM;
    }
    explicit_bzero(text, sizeof(text));
    return rc;
}

/* The job a submit writes. id and seq stay empty: only the script knows
 * the number, and fills them in. */
static flps_err job_of_spec(const jobspec *spec, const char *text, size_t len,
                            double now, sched_job *j)
{
    memset(j, 0, sizeof(*j));
    snprintf(j->name, sizeof(j->name), "%s", spec->name);
    j->state = SCHED_QUEUED;
    j->priority = spec->priority;
    j->submitted_at = now;
    j->max_restarts = spec->max_restarts;
    j->workers = spec->workers;
    j->servers = spec->servers;
    /* What progress counts to: a fedavg job closes one iteration a round. */
    j->iterations =
        spec->mode == JOBSPEC_MODE_FEDAVG ? spec->rounds : spec->iterations;
    j->time_limit = spec->time_limit;
    snprintf(j->transport, sizeof(j->transport), "%s",
             jobspec_transport_name(spec->transport));
    jobspec_comp_format(spec, j->compression, sizeof(j->compression));
    snprintf(j->placement, sizeof(j->placement), "%s",
             spec->servers_auto ? "beside" : "");
    j->per_worker.mcpus = sched_res_mcpus(spec->cpus_per_worker);
    j->per_worker.memory = spec->memory_per_worker;
    j->per_worker.gpus = spec->gpus_per_worker;
    j->per_server.mcpus = sched_res_mcpus(spec->cpus_per_server);
    j->per_server.memory = spec->memory_per_server;
    /* The job file text as posted; YAML holds no NUL, so a C string keeps
     * all of it. */
    j->spec = sched_store_dup(text, len);
    if (j->spec == NULL)
        return FLPS_ENOMEM;
    return job_credentials(j, spec);
}

static flps_err put_field(void *arg, const char *field, const char *value,
                          size_t len)
{
    sched_cmd *c = arg;

    sched_cmd_add(c, field);
    sched_cmd_addb(c, value, len);
    return c->oom ? FLPS_ENOMEM : FLPS_OK;
}

flps_err sched_store_submit(sched_store *st, const jobspec *spec,
                            const char *text, size_t len, double now,
                            sched_job *out)
{
    char id[32], msg[160];
    sched_cmd c = {0};
    sched_job j;
    long long seq = 0;
    flps_err rc;

    sched_cmd_add(&c, "flps:seq:job");
    sched_cmd_add(&c, "flps:jobs");
    sched_cmd_add(&c, "flps:queue");
    snprintf(msg, sizeof(msg), "submitted: %u %s, %u %s, priority %u",
             spec->servers, plural_word(spec->servers, "server", "servers"),
             spec->workers, plural_word(spec->workers, "worker", "workers"),
             spec->priority);
    if (sched_cmd_add_event(&c, now, "submitted", msg) != FLPS_OK)
        c.oom = 1;
    sched_cmd_addf(&c, "%u", spec->priority);
    rc = job_of_spec(spec, text, len, now, &j);
    if (rc == FLPS_OK)
        rc = sched_jobhash_write(&j, put_field, &c);
    sched_job_fini(&j);
    if (rc != FLPS_OK) {
        sched_cmd_free(&c);
        return sched_store_seterr(st, rc, "out of memory");
    }
    rc = sched_store_eval_int(st, SCHED_SCRIPT_SUBMIT, 3, &c, &seq);
    if (rc != FLPS_OK || out == NULL)
        return rc;
    snprintf(id, sizeof(id), "j%lld", seq);
    {
        int found = 0;

        rc = sched_store_job(st, id, 1, out, &found);
        if (rc == FLPS_OK && !found)
            rc = sched_store_seterr(st, FLPS_EPROTO, "job %s vanished", id);
    }
    return rc;
}

/* ---- Transitions ----
 * Each is one script (sched_scripts.c) that checks the job's state and
 * attempt and makes the whole change, or nothing: the job's fields, its
 * tasks out of their nodes' desired sets (the agents stop them), an
 * event. */

/* The job's keys every transition script takes: hash, tasks set, events
 * list (and the queue, for those that take it). */
static void add_job_keys(sched_cmd *c, const char *id, int with_queue)
{
    char jk[64];

    sched_store_job_key(jk, sizeof(jk), id);
    sched_cmd_add(c, jk);
    sched_cmd_addf(c, "%s:tasks", jk);
    sched_cmd_addf(c, "%s:events", jk);
    if (with_queue)
        sched_cmd_add(c, "flps:queue");
}

flps_err sched_store_cancel(sched_store *st, const char *id, double now,
                            sched_cancel_result *result, sched_job *out)
{
    char num[64];
    sched_cmd c = {0};
    sched_job tmp;
    long long res = 0;
    int found = 0;
    flps_err rc;

    rc = sched_store_job(st, id, 0, &tmp, &found); /* validates id */
    if (rc != FLPS_OK)
        return rc;
    if (!found) {
        *result = SCHED_CANCEL_NO_JOB;
        return FLPS_OK;
    }
    sched_job_fini(&tmp);
    add_job_keys(&c, id, 1);
    flps_format_double(num, sizeof(num), now);
    sched_cmd_add(&c, num);
    /* Both texts: which one applies is known only inside the script. */
    if (sched_cmd_add_event_text(&c, now, "cancelled",
                                 "cancelled; its tasks are being stopped") !=
            FLPS_OK ||
        sched_cmd_add_event(&c, now, "cancelled", "cancelled while queued") !=
            FLPS_OK)
        c.oom = 1;
    sched_cmd_add(&c, id);
    rc = sched_store_eval_int(st, SCHED_SCRIPT_CANCEL, 4, &c, &res);
    if (rc != FLPS_OK)
        return rc;
    if (res == 0) {
        *result = SCHED_CANCEL_NO_JOB;
        return FLPS_OK;
    }
    if (res == 1) {
        *result = SCHED_CANCEL_FINISHED;
        return out ? sched_store_job(st, id, 1, out, &found) : FLPS_OK;
    }
    *result = SCHED_CANCEL_DONE;
    if (out == NULL)
        return FLPS_OK;
    rc = sched_store_job(st, id, 1, out, &found);
    if (rc == FLPS_OK && !found)
        rc = sched_store_seterr(st, FLPS_EPROTO, "job %s vanished", id);
    return rc;
}

/* The fields of a task hash at placement, in the order written. */
#define PLACE_TASK_FIELDS 10

flps_err sched_store_place(sched_store *st, const char *leader_id,
                           const sched_job *job,
                           const char *const *server_nodes,
                           const char *const *worker_nodes, double now,
                           int *committed)
{
    char jk[64], key[160], num[64], msg[512];
    sched_cmd c = {0}, tasks = {0};
    long long placed = 0;
    size_t off;
    flps_err rc;

    *committed = 0;
    sched_store_job_key(jk, sizeof(jk), job->id);
    sched_cmd_add(&c, "flps:leader");
    sched_cmd_add(&c, jk);
    sched_cmd_addf(&c, "%s:tasks", jk);
    sched_cmd_add(&c, "flps:queue");
    sched_cmd_addf(&c, "%s:events", jk);
    sched_cmd_add(&c, leader_id != NULL ? "1" : "0");
    sched_cmd_add(&c, leader_id != NULL ? leader_id : "");
    sched_cmd_add(&c, job->id);
    sched_cmd_addf(&c, "%u", job->attempt);
    flps_format_double(num, sizeof(num), now);
    sched_cmd_add(&c, num);
    off = (size_t)snprintf(msg, sizeof(msg),
                           "placed (attempt %u):", job->attempt);
    for (int role = 0; role < 2; role++) {
        uint32_t count = role == 0 ? job->servers : job->workers;
        const char *const *where = role == 0 ? server_nodes : worker_nodes;
        const sched_res *need = role == 0 ? &job->per_server : &job->per_worker;
        const char *rname = role == 0 ? "server" : "worker";

        for (uint32_t i = 0; i < count; i++) {
            sched_store_task_key(key, sizeof(key), job->id, job->attempt, rname,
                                 i);
            sched_cmd_add(&tasks, key);
            sched_cmd_add(&tasks, where[i]);
            sched_cmd_add(&tasks, "job");
            sched_cmd_add(&tasks, job->id);
            sched_cmd_add(&tasks, "attempt");
            sched_cmd_addf(&tasks, "%u", job->attempt);
            sched_cmd_add(&tasks, "role");
            sched_cmd_add(&tasks, rname);
            sched_cmd_add(&tasks, "index");
            sched_cmd_addf(&tasks, "%u", i);
            sched_cmd_add(&tasks, "node");
            sched_cmd_add(&tasks, where[i]);
            sched_cmd_add(&tasks, "state");
            sched_cmd_add(&tasks, "ASSIGNED");
            sched_cmd_add(&tasks, "cpus");
            sched_store_fmt_mcpus(num, sizeof(num), need->mcpus);
            sched_cmd_add(&tasks, num);
            sched_cmd_add(&tasks, "memory");
            sched_cmd_addf(&tasks, "%llu", (unsigned long long)need->memory);
            sched_cmd_add(&tasks, "gpus");
            sched_cmd_addf(&tasks, "%llu", (unsigned long long)need->gpus);
            /* "" for a job placed without a choice: flagent then passes
             * no --transport and the processes read the job file. */
            sched_cmd_add(&tasks, "transport");
            sched_cmd_add(&tasks, job->transport_used);
            if (off < sizeof(msg))
                off += (size_t)snprintf(
                    msg + off, sizeof(msg) - off, "%s %s-%u on %s",
                    i == 0 && role == 0 ? "" : ",", rname, i, where[i]);
        }
    }
    if (sched_cmd_add_event(&c, now, "placed", msg) != FLPS_OK)
        c.oom = 1;
    sched_cmd_addf(&c, "%d", PLACE_TASK_FIELDS);
    sched_cmd_add(&c, job->transport_used);
    for (int i = 0; i < tasks.argc; i++)
        sched_cmd_addb(&c, tasks.argv[i], tasks.len[i]);
    c.oom |= tasks.oom;
    sched_cmd_free(&tasks);
    rc = sched_store_eval_int(st, SCHED_SCRIPT_PLACE, 5, &c, &placed);
    if (rc != FLPS_OK)
        return rc;
    *committed = placed == 1;
    return FLPS_OK;
}

flps_err sched_store_pop_exit(sched_store *st, char *key, size_t keylen,
                              int *got)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "LPOP flps:exits");

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    *got = r->type == REDIS_REPLY_STRING;
    if (*got)
        sched_store_copy(key, keylen, r->str, r->len);
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_succeed(sched_store *st, const char *id, uint32_t attempt,
                             const char *summary, double now, int *done)
{
    char num[64];
    sched_cmd c = {0};
    long long res = 0;
    flps_err rc;

    *done = 0;
    add_job_keys(&c, id, 0);
    sched_cmd_addf(&c, "%u", attempt);
    flps_format_double(num, sizeof(num), now);
    sched_cmd_add(&c, num);
    sched_cmd_add(&c, summary);
    if (sched_cmd_add_event(&c, now, "succeeded", summary) != FLPS_OK)
        c.oom = 1;
    rc = sched_store_eval_int(st, SCHED_SCRIPT_SUCCEED, 3, &c, &res);
    if (rc != FLPS_OK)
        return rc;
    *done = res == 1;
    return FLPS_OK;
}

flps_err sched_store_fail(sched_store *st, const char *id, uint32_t attempt,
                          const char *reason, int allow_restart, double now,
                          sched_fail_result *result)
{
    char msg[700], num[64];
    flps_err rc = FLPS_OK;

    *result = SCHED_FAIL_IGNORED;
    flps_format_double(num, sizeof(num), now);
    for (int tries = 0; tries < STORE_DECIDE_TRIES; tries++) {
        redisReply *h = NULL;
        uint32_t restarts, max_restarts;
        const char *state;
        sched_cmd c = {0};
        long long res = 0;
        int restart;

        rc = rconn_cmd(st->rc, &h,
                       "HMGET flps:job:%s state attempt restarts "
                       "max_restarts",
                       id);
        if (rc != FLPS_OK)
            return sched_store_rerr(st, rc);
        state = h->elements == 4 && h->element[0]->type == REDIS_REPLY_STRING
                    ? h->element[0]->str
                    : NULL;
        if (state == NULL || strcmp(state, "RUNNING") != 0 ||
            sched_store_to_u64(h->element[1]->str) != attempt) {
            freeReplyObject(h);
            return FLPS_OK;
        }
        restarts = (uint32_t)sched_store_to_u64(h->element[2]->str);
        max_restarts = (uint32_t)sched_store_to_u64(h->element[3]->str);
        freeReplyObject(h);
        restart = allow_restart && restarts < max_restarts;
        if (restart)
            snprintf(msg, sizeof(msg),
                     "restart %u of %u from the latest checkpoint after: %s",
                     restarts + 1, max_restarts, reason);
        else
            snprintf(msg, sizeof(msg), "failed: %s", reason);
        add_job_keys(&c, id, 1);
        sched_cmd_addf(&c, "%u", attempt);
        sched_cmd_addf(&c, "%u", restarts);
        sched_cmd_addf(&c, "%u", max_restarts);
        sched_cmd_add(&c, restart ? "1" : "0");
        sched_cmd_add(&c, reason);
        sched_cmd_add(&c, num);
        if (sched_cmd_add_event(&c, now, restart ? "restarted" : "failed",
                                msg) != FLPS_OK)
            c.oom = 1;
        sched_cmd_add(&c, id);
        sched_cmd_addf(&c, "%u", restarts + 1);
        sched_cmd_addf(&c, "%u", attempt + 1);
        rc = sched_store_eval_int(st, SCHED_SCRIPT_FAIL, 4, &c, &res);
        if (rc != FLPS_OK)
            return rc;
        if (res == 0)
            return FLPS_OK;
        if (res == 1) {
            *result = restart ? SCHED_FAIL_REQUEUED : SCHED_FAIL_FAILED;
            return FLPS_OK;
        }
    }
    return sched_store_seterr(st, FLPS_ETIMEDOUT,
                              "gave up failing %s: the job kept changing", id);
}
