/* flsched's jobs in Redis: the job and task hashes, submit, and the moves
 * of a job's state (placement, success, failure, restart, cancel). */
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
#include "scheduler/sched_store_int.h"

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
    sched_store_copy(t->key, sizeof(t->key), key, strlen(key));
    sched_store_hcopy(r, "job", t->job, sizeof(t->job));
    t->attempt = (uint32_t)sched_store_to_u64(sched_store_hget(r, "attempt"));
    sched_store_hcopy(r, "role", t->role, sizeof(t->role));
    t->index = (uint32_t)sched_store_to_u64(sched_store_hget(r, "index"));
    parse_task_name(t);
    sched_store_hcopy(r, "node", t->node, sizeof(t->node));
    sched_store_hcopy(r, "state", t->state, sizeof(t->state));
    sched_store_hcopy(r, "endpoint", t->endpoint, sizeof(t->endpoint));
    v = sched_store_hget(r, "exit_code");
    if (v != NULL && *v != '\0') {
        t->exited = 1;
        t->exit_code = strtol(v, NULL, 10);
    }
    v = sched_store_hget(r, "signal");
    if (v != NULL && *v != '\0') {
        t->signal = strtol(v, NULL, 10);
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

static flps_err job_from_reply(const redisReply *r, sched_job *j)
{
    static const char *const pf[] = {"p_iteration",     "p_loss",
                                     "p_test_accuracy", "p_bytes_sent",
                                     "p_dense_bytes",   "p_elapsed"};
    double *pv[] = {&j->p_iteration,  &j->p_loss,        &j->p_test_accuracy,
                    &j->p_bytes_sent, &j->p_dense_bytes, &j->p_elapsed};
    const char *v;

    memset(j, 0, sizeof(*j));
    sched_store_hcopy(r, "id", j->id, sizeof(j->id));
    sched_store_hcopy(r, "name", j->name, sizeof(j->name));
    v = sched_store_hget(r, "state");
    if (v == NULL || !sched_state_parse(v, &j->state))
        return FLPS_EPROTO;
    j->priority = (uint32_t)sched_store_to_u64(sched_store_hget(r, "priority"));
    j->seq = sched_store_to_u64(sched_store_hget(r, "seq"));
    j->submitted_at =
        sched_store_to_double(sched_store_hget(r, "submitted_at"));
    j->started_at = sched_store_to_double(sched_store_hget(r, "started_at"));
    j->finished_at = sched_store_to_double(sched_store_hget(r, "finished_at"));
    j->attempt = (uint32_t)sched_store_to_u64(sched_store_hget(r, "attempt"));
    j->restarts = (uint32_t)sched_store_to_u64(sched_store_hget(r, "restarts"));
    j->max_restarts =
        (uint32_t)sched_store_to_u64(sched_store_hget(r, "max_restarts"));
    sched_store_hcopy(r, "reason", j->reason, sizeof(j->reason));
    j->workers = (uint32_t)sched_store_to_u64(sched_store_hget(r, "workers"));
    j->servers = (uint32_t)sched_store_to_u64(sched_store_hget(r, "servers"));
    j->iterations = sched_store_to_u64(sched_store_hget(r, "iterations"));
    j->time_limit = sched_store_to_double(sched_store_hget(r, "time_limit"));
    j->per_worker.mcpus = sched_res_mcpus(
        sched_store_to_double(sched_store_hget(r, "cpus_per_worker")));
    j->per_worker.memory =
        sched_store_to_u64(sched_store_hget(r, "memory_per_worker"));
    j->per_worker.gpus =
        sched_store_to_u64(sched_store_hget(r, "gpus_per_worker"));
    j->per_server.mcpus = sched_res_mcpus(
        sched_store_to_double(sched_store_hget(r, "cpus_per_server")));
    j->per_server.memory =
        sched_store_to_u64(sched_store_hget(r, "memory_per_server"));
    for (size_t i = 0; i < 6; i++) {
        v = sched_store_hget(r, pf[i]);
        if (v != NULL && *v != '\0') {
            *pv[i] = sched_store_to_double(v);
            j->p_mask |= 1u << i;
            j->have_progress = 1;
        }
    }
    v = sched_store_hget(r, "spec");
    j->spec = flps_strdup(v ? v : "");
    if (j->spec == NULL)
        return FLPS_ENOMEM;
    v = sched_store_hget(r, "summary");
    if (v != NULL && *v != '\0') {
        j->summary = flps_strdup(v);
        if (j->summary == NULL)
            return FLPS_ENOMEM;
    }
    v = sched_store_hget(r, "profile");
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
        return sched_store_rerr(st, rc);
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

flps_err sched_store_jobs(sched_store *st, sched_job **out, size_t *n)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "ZRANGE flps:jobs 0 -1");

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    rc = load_jobs(st, r, 1, out, n);
    freeReplyObject(r);
    return rc;
}

flps_err sched_store_queue(sched_store *st, sched_job **out, size_t *n)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "ZRANGE flps:queue 0 -1");

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
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
        sched_cmd c = {0};
        int ok = 0;

        rc = sched_store_drop(st, rconn_cmd(st->rc, &r, "WATCH flps:seq:job"),
                              &r);
        if (rc != FLPS_OK)
            return rc;
        rc = rconn_cmd(st->rc, &r, "GET flps:seq:job");
        if (rc != FLPS_OK)
            return sched_store_rerr(st, rc);
        seq = (r->type == REDIS_REPLY_STRING ? sched_store_to_u64(r->str) : 0) +
              1;
        freeReplyObject(r);
        snprintf(id, sizeof(id), "j%llu", (unsigned long long)seq);
        sched_store_job_key(jk, sizeof(jk), id);
        rc = sched_store_multi(st);
        if (rc != FLPS_OK)
            return rc;
        rc = sched_store_queued(st, rconn_cmd(st->rc, &r, "INCR flps:seq:job"),
                                &r);
        if (rc != FLPS_OK)
            goto discard;
        sched_cmd_add(&c, "HSET");
        sched_cmd_add(&c, jk);
        sched_cmd_add(&c, "id");
        sched_cmd_add(&c, id);
        sched_cmd_add(&c, "name");
        sched_cmd_add(&c, spec->name);
        sched_cmd_add(&c, "state");
        sched_cmd_add(&c, "QUEUED");
        sched_cmd_add(&c, "priority");
        sched_cmd_addf(&c, "%u", spec->priority);
        sched_cmd_add(&c, "seq");
        sched_cmd_addf(&c, "%llu", (unsigned long long)seq);
        sched_cmd_add(&c, "submitted_at");
        sched_store_fmt_double(num, sizeof(num), now);
        sched_cmd_add(&c, num);
        sched_cmd_add(&c, "attempt");
        sched_cmd_add(&c, "0");
        sched_cmd_add(&c, "restarts");
        sched_cmd_add(&c, "0");
        sched_cmd_add(&c, "max_restarts");
        sched_cmd_addf(&c, "%u", spec->max_restarts);
        sched_cmd_add(&c, "reason");
        sched_cmd_add(&c, "");
        sched_cmd_add(&c, "spec");
        sched_cmd_addb(&c, text, len);
        sched_cmd_add(&c, "workers");
        sched_cmd_addf(&c, "%u", spec->workers);
        sched_cmd_add(&c, "servers");
        sched_cmd_addf(&c, "%u", spec->servers);
        sched_cmd_add(&c, "iterations");
        sched_cmd_addf(&c, "%llu", (unsigned long long)spec->iterations);
        sched_cmd_add(&c, "time_limit");
        sched_store_fmt_double(num, sizeof(num), spec->time_limit);
        sched_cmd_add(&c, num);
        sched_cmd_add(&c, "cpus_per_worker");
        sched_store_fmt_mcpus(num, sizeof(num),
                              sched_res_mcpus(spec->cpus_per_worker));
        sched_cmd_add(&c, num);
        sched_cmd_add(&c, "memory_per_worker");
        sched_cmd_addf(&c, "%llu", (unsigned long long)spec->memory_per_worker);
        sched_cmd_add(&c, "gpus_per_worker");
        sched_cmd_addf(&c, "%u", spec->gpus_per_worker);
        sched_cmd_add(&c, "cpus_per_server");
        sched_store_fmt_mcpus(num, sizeof(num),
                              sched_res_mcpus(spec->cpus_per_server));
        sched_cmd_add(&c, num);
        sched_cmd_add(&c, "memory_per_server");
        sched_cmd_addf(&c, "%llu", (unsigned long long)spec->memory_per_server);
        rc = sched_cmd_queue(st, &c);
        if (rc != FLPS_OK)
            goto discard;
        rc = sched_store_queued(st,
                                rconn_cmd(st->rc, &r, "ZADD flps:jobs %llu %s",
                                          (unsigned long long)seq, id),
                                &r);
        if (rc != FLPS_OK)
            goto discard;
        snprintf(score, sizeof(score), "%.17g",
                 sched_store_queue_score(spec->priority, seq));
        rc = sched_store_queued(
            st, rconn_cmd(st->rc, &r, "ZADD flps:queue %s %s", score, id), &r);
        if (rc != FLPS_OK)
            goto discard;
        {
            char msg[160];

            snprintf(msg, sizeof(msg),
                     "submitted: %u servers, %u workers, priority %u",
                     spec->servers, spec->workers, spec->priority);
            rc = sched_store_queue_event(st, id, now, "submitted", msg);
        }
        if (rc != FLPS_OK)
            goto discard;
        rc = sched_store_exec(st, &ok);
        if (rc != FLPS_OK)
            return rc;
        if (!ok)
            continue;
        if (out != NULL) {
            int found = 0;

            rc = sched_store_job(st, id, 1, out, &found);
            if (rc == FLPS_OK && !found)
                rc = sched_store_seterr(st, FLPS_EPROTO, "job %s vanished", id);
        }
        return rc;
    discard:
        sched_store_discard(st);
        return rc;
    }
    return sched_store_seterr(st, FLPS_ETIMEDOUT,
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
        return sched_store_rerr(st, rc);
    tl->keys = flps_calloc(r->elements + 1, sizeof(char *));
    tl->nodes = flps_calloc(r->elements + 1, sizeof(char *));
    if (tl->keys == NULL || tl->nodes == NULL) {
        freeReplyObject(r);
        flps_free(tl->keys);
        flps_free(tl->nodes);
        memset(tl, 0, sizeof(*tl));
        return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        const char *key = r->element[i]->str;

        rc = rconn_cmd(st->rc, &h, "HGET %s node", key);
        if (rc != FLPS_OK) {
            rc = sched_store_rerr(st, rc);
            break;
        }
        tl->keys[tl->n] = flps_strdup(key);
        tl->nodes[tl->n] =
            flps_strdup(h->type == REDIS_REPLY_STRING ? h->str : "");
        freeReplyObject(h);
        tl->n++;
        if (tl->keys[tl->n - 1] == NULL || tl->nodes[tl->n - 1] == NULL) {
            rc = sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
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
        rc = sched_store_queued(st,
                                rconn_cmd(st->rc, &r,
                                          "SREM flps:node:%s:tasks %s",
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

    rc = sched_store_drop(st, rconn_cmd(st->rc, &w, "WATCH flps:job:%s", id),
                          &w);
    if (rc != FLPS_OK)
        return rc;
    rc = rconn_cmd(st->rc, r, "HGETALL flps:job:%s", id);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    if ((*r)->type != REDIS_REPLY_ARRAY || (*r)->elements == 0) {
        freeReplyObject(*r);
        *r = NULL;
    }
    return FLPS_OK;
}

static int job_is(const redisReply *h, const char *state, uint32_t attempt)
{
    const char *s = sched_store_hget(h, "state");

    return s != NULL && strcmp(s, state) == 0 &&
           sched_store_to_u64(sched_store_hget(h, "attempt")) == attempt;
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
        sched_store_unwatch(st);
        return rc;
    }
    rc = sched_store_multi(st);
    if (rc != FLPS_OK) {
        task_list_free(&tl);
        return rc;
    }
    sched_store_fmt_double(num, sizeof(num), now);
    rc = fields(st, id, num, arg);
    if (rc == FLPS_OK)
        rc = queue_unassign(st, &tl);
    if (rc == FLPS_OK)
        rc = sched_store_queue_event(st, id, now, ev_type, ev_msg);
    task_list_free(&tl);
    if (rc != FLPS_OK) {
        sched_store_discard(st);
        return rc;
    }
    return sched_store_exec(st, ok);
}

static flps_err cancel_fields(sched_store *st, const char *id, const char *now,
                              void *arg)
{
    redisReply *r = NULL;
    flps_err rc;

    (void)arg;
    rc = sched_store_queued(st,
                            rconn_cmd(st->rc, &r,
                                      "HSET flps:job:%s state CANCELLED "
                                      "finished_at %s reason %s",
                                      id, now, "cancelled"),
                            &r);
    if (rc == FLPS_OK)
        rc = sched_store_queued(
            st, rconn_cmd(st->rc, &r, "ZREM flps:queue %s", id), &r);
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
            sched_store_unwatch(st);
            *result = SCHED_CANCEL_NO_JOB;
            return FLPS_OK;
        }
        if (!sched_state_parse(sched_store_hget(h, "state")
                                   ? sched_store_hget(h, "state")
                                   : "",
                               &state) ||
            sched_state_is_final(state)) {
            freeReplyObject(h);
            sched_store_unwatch(st);
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
            rc = sched_store_seterr(st, FLPS_EPROTO, "job %s vanished", id);
        return rc;
    }
    return sched_store_seterr(
        st, FLPS_ETIMEDOUT, "gave up cancelling %s: the job kept changing", id);
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
            rc = sched_store_drop(
                st, rconn_cmd(st->rc, &r, "WATCH flps:leader"), &r);
            if (rc != FLPS_OK)
                return rc;
            rc = rconn_cmd(st->rc, &r, "GET flps:leader");
            if (rc != FLPS_OK)
                return sched_store_rerr(st, rc);
            ok =
                r->type == REDIS_REPLY_STRING && strcmp(r->str, leader_id) == 0;
            freeReplyObject(r);
            if (!ok) {
                sched_store_unwatch(st);
                return FLPS_OK;
            }
        }
        rc = watch_job(st, job->id, &h);
        if (rc != FLPS_OK)
            return rc;
        if (h == NULL || !job_is(h, "QUEUED", job->attempt)) {
            if (h)
                freeReplyObject(h);
            sched_store_unwatch(st);
            return FLPS_OK;
        }
        freeReplyObject(h);
        rc = sched_store_multi(st);
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
                sched_cmd c = {0};

                sched_store_task_key(key, sizeof(key), job->id, job->attempt,
                                     rname, i);
                rc = sched_store_queued(
                    st, rconn_cmd(st->rc, &r, "DEL %s", key), &r);
                if (rc != FLPS_OK)
                    break;
                sched_cmd_add(&c, "HSET");
                sched_cmd_add(&c, key);
                sched_cmd_add(&c, "job");
                sched_cmd_add(&c, job->id);
                sched_cmd_add(&c, "attempt");
                sched_cmd_addf(&c, "%u", job->attempt);
                sched_cmd_add(&c, "role");
                sched_cmd_add(&c, rname);
                sched_cmd_add(&c, "index");
                sched_cmd_addf(&c, "%u", i);
                sched_cmd_add(&c, "node");
                sched_cmd_add(&c, where[i]);
                sched_cmd_add(&c, "state");
                sched_cmd_add(&c, "ASSIGNED");
                sched_cmd_add(&c, "cpus");
                sched_store_fmt_mcpus(num, sizeof(num), need->mcpus);
                sched_cmd_add(&c, num);
                sched_cmd_add(&c, "memory");
                sched_cmd_addf(&c, "%llu", (unsigned long long)need->memory);
                sched_cmd_add(&c, "gpus");
                sched_cmd_addf(&c, "%llu", (unsigned long long)need->gpus);
                rc = sched_cmd_queue(st, &c);
                if (rc == FLPS_OK)
                    rc = sched_store_queued(
                        st,
                        rconn_cmd(st->rc, &r, "SADD flps:node:%s:tasks %s",
                                  where[i], key),
                        &r);
                if (rc == FLPS_OK)
                    rc = sched_store_queued(
                        st,
                        rconn_cmd(st->rc, &r, "SADD flps:job:%s:tasks %s",
                                  job->id, key),
                        &r);
                if (off < sizeof(msg))
                    off += (size_t)snprintf(
                        msg + off, sizeof(msg) - off, "%s %s-%u on %s",
                        i == 0 && role == 0 ? "" : ",", rname, i, where[i]);
            }
        }
        sched_store_fmt_double(num, sizeof(num), now);
        if (rc == FLPS_OK)
            rc = sched_store_queued(st,
                                    rconn_cmd(st->rc, &r,
                                              "HSET flps:job:%s state RUNNING "
                                              "started_at %s",
                                              job->id, num),
                                    &r);
        if (rc == FLPS_OK)
            rc = sched_store_queued(
                st, rconn_cmd(st->rc, &r, "ZREM flps:queue %s", job->id), &r);
        if (rc == FLPS_OK)
            rc = sched_store_queue_event(st, job->id, now, "placed", msg);
        if (rc != FLPS_OK) {
            sched_store_discard(st);
            return rc;
        }
        rc = sched_store_exec(st, &ok);
        if (rc != FLPS_OK)
            return rc;
        if (ok) {
            *committed = 1;
            return FLPS_OK;
        }
    }
    return sched_store_seterr(st, FLPS_ETIMEDOUT,
                              "gave up placing %s: the job kept changing",
                              job->id);
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

static flps_err succeed_fields(sched_store *st, const char *id, const char *now,
                               void *arg)
{
    redisReply *r = NULL;

    return sched_store_queued(st,
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
            sched_store_unwatch(st);
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
    return sched_store_seterr(
        st, FLPS_ETIMEDOUT, "gave up finishing %s: the job kept changing", id);
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
        return sched_store_queued(st,
                                  rconn_cmd(st->rc, &r,
                                            "HSET flps:job:%s state FAILED "
                                            "finished_at %s reason %s",
                                            id, now, fa->reason),
                                  &r);
    rc = sched_store_queued(st,
                            rconn_cmd(st->rc, &r,
                                      "HSET flps:job:%s state QUEUED "
                                      "reason %s restarts %u attempt %u",
                                      id, fa->reason, fa->restarts + 1,
                                      fa->attempt + 1),
                            &r);
    if (rc == FLPS_OK)
        rc = sched_store_queued(
            st, rconn_cmd(st->rc, &r, "ZADD flps:queue %s %s", fa->score, id),
            &r);
    if (rc == FLPS_OK)
        rc = sched_store_queued(
            st, rconn_cmd(st->rc, &r, "DEL flps:job:%s:tasks", id), &r);
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
            sched_store_unwatch(st);
            return FLPS_OK;
        }
        restarts =
            (uint32_t)sched_store_to_u64(sched_store_hget(h, "restarts"));
        max_restarts =
            (uint32_t)sched_store_to_u64(sched_store_hget(h, "max_restarts"));
        priority =
            (uint32_t)sched_store_to_u64(sched_store_hget(h, "priority"));
        seq = sched_store_to_u64(sched_store_hget(h, "seq"));
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
    return sched_store_seterr(st, FLPS_ETIMEDOUT,
                              "gave up failing %s: the job kept changing", id);
}
