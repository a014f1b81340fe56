/* flsched's HTTP/JSON API over the Redis store. */
#include "scheduler/sched_api.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "scheduler/sched_info.h"
#include "scheduler/sched_jobhash.h"
#include "scheduler/sched_metrics.h"
#include "scheduler/sched_place.h"
#include "scheduler/sched_report.h"
#include "scheduler/sched_store.h"
#include "services/jobspec.h"
#include "services/jsonout.h"
#include "services/plural.h"

#define API_LOG_LIMIT_DEFAULT 100
#define API_LOG_LIMIT_MAX 10000

struct sched_api {
    pthread_mutex_t lock; /* guards st (one Redis connection) and http */
    sched_store *st;
    httpd *http; /* the server serving the API (its certificate); NULL
                    until sched_api_set_http */
    char *token; /* NULL: no auth; immutable after create */
    sched_loop_stats *stats;
    metrics *reg;
    /* Families: set up at create, then only updated (metrics locks). */
    metrics_family *m_requests, *m_seconds, *m_jobs, *m_queue, *m_nodes,
        *m_leader, *m_placements, *m_backfills, *m_failures, *m_restarts,
        *m_succeeded, *m_failed, *m_lost;
    sched_metrics *sm;      /* per-job series, placements, target list */
    const launch *launcher; /* immutable; NULL: the agents */
};

static const char *const code_label[] = {"code"};
static const char *const state_label[] = {"state"};

/* The API's families, in the order /metrics shows them (sched_metrics.c's
 * follow). */
static const metrics_def api_metric_defs[] = {
    {METRICS_COUNTER, "flsched_api_requests_total",
     METRICS_AT(sched_api, m_requests), "HTTP API requests by status code",
     METRICS_LABELS(code_label)},
    {METRICS_HISTOGRAM, "flsched_api_request_seconds",
     METRICS_AT(sched_api, m_seconds), "time to answer an HTTP API request"},
    {METRICS_GAUGE, "flsched_jobs", METRICS_AT(sched_api, m_jobs),
     "jobs by state", METRICS_LABELS(state_label)},
    {METRICS_GAUGE, "flsched_queue_length", METRICS_AT(sched_api, m_queue),
     "jobs waiting in queue"},
    {METRICS_GAUGE, "flsched_nodes", METRICS_AT(sched_api, m_nodes),
     "registered nodes by state", METRICS_LABELS(state_label)},
    {METRICS_GAUGE, "flsched_leader", METRICS_AT(sched_api, m_leader),
     "1 while this scheduler holds the lease"},
    {METRICS_COUNTER, "flsched_placements_total",
     METRICS_AT(sched_api, m_placements), "jobs placed by this scheduler"},
    {METRICS_COUNTER, "flsched_backfills_total",
     METRICS_AT(sched_api, m_backfills),
     "placements that went past a waiting head"},
    {METRICS_COUNTER, "flsched_failures_total",
     METRICS_AT(sched_api, m_failures),
     "task, node and time-limit failures handled"},
    {METRICS_COUNTER, "flsched_restarts_total",
     METRICS_AT(sched_api, m_restarts),
     "jobs sent back to the queue after a failure"},
    {METRICS_COUNTER, "flsched_jobs_succeeded_total",
     METRICS_AT(sched_api, m_succeeded), "jobs this scheduler saw succeed"},
    {METRICS_COUNTER, "flsched_jobs_failed_total",
     METRICS_AT(sched_api, m_failed), "jobs this scheduler marked FAILED"},
    {METRICS_COUNTER, "flsched_nodes_lost_total", METRICS_AT(sched_api, m_lost),
     "nodes this scheduler marked LOST"},
};

flps_err sched_api_create(const sched_api_cfg *cfg, sched_api **out)
{
    sched_api *a;
    flps_err rc;

    if (cfg == NULL || cfg->redis_url == NULL || cfg->stats == NULL ||
        cfg->reg == NULL || out == NULL)
        return FLPS_EINVAL;
    a = flps_calloc(1, sizeof(*a));
    if (a == NULL)
        return FLPS_ENOMEM;
    a->stats = cfg->stats;
    a->reg = cfg->reg;
    a->launcher = cfg->launcher;
    if (cfg->token != NULL) {
        a->token = flps_strdup(cfg->token);
        if (a->token == NULL) {
            flps_free(a);
            return FLPS_ENOMEM;
        }
    }
    rc = sched_store_create(cfg->redis_url, 2000, &a->st);
    if (rc != FLPS_OK)
        goto fail;
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        rc = FLPS_ESYS;
        goto fail_store;
    }
    rc = metrics_register_table(a->reg, api_metric_defs,
                                METRICS_NDEFS(api_metric_defs), a);
    if (rc == FLPS_OK)
        rc = sched_metrics_create(a->reg, a->stats, &a->sm);
    if (rc != FLPS_OK)
        goto fail_lock;
    *out = a;
    return FLPS_OK;

fail_lock:
    pthread_mutex_destroy(&a->lock);
fail_store:
    sched_store_destroy(a->st);
fail:
    flps_free(a->token);
    flps_free(a);
    return rc;
}

void sched_api_destroy(sched_api *a)
{
    if (a == NULL)
        return;
    sched_metrics_destroy(a->sm);
    pthread_mutex_destroy(&a->lock);
    sched_store_destroy(a->st);
    flps_free(a->token);
    flps_free(a);
}

/* ---- JSON ---- */

/* A job object: the job hash's fields (sched_jobhash.c's table says
 * which, under what names) and the current attempt's tasks. */
static json_t *job_json(const sched_job *j)
{
    json_t *o = sched_jobhash_json(j), *tasks = json_array();

    if (o == NULL || tasks == NULL) {
        json_decref(o);
        json_decref(tasks);
        return NULL;
    }
    for (size_t i = 0; i < j->ntasks; i++) {
        const sched_task *t = &j->tasks[i];
        json_t *to = json_object();

        if (to == NULL)
            continue;
        json_object_set_new(to, "task", json_string(t->name));
        json_object_set_new(to, "node", json_string(t->node));
        json_object_set_new(to, "state", json_string(t->state));
        if (t->endpoint[0] != '\0')
            json_object_set_new(to, "endpoint", json_string(t->endpoint));
        if (strcmp(t->state, "EXITED") == 0) {
            json_object_set_new(to, "exit_code", json_integer(t->exit_code));
            if (t->signal != 0)
                json_object_set_new(to, "signal", json_integer(t->signal));
        }
        json_array_append_new(tasks, to);
    }
    json_object_set_new(o, "tasks", tasks);
    sched_jobhash_sum_progress(j, o);
    return o;
}

static json_t *node_json(const sched_node *n)
{
    json_t *used = json_pack(
        "{s:o,s:I,s:I}", "cpus", sched_json_cpus(n->used.mcpus), "memory",
        (json_int_t)n->used.memory, "gpus", (json_int_t)n->used.gpus);

    if (used == NULL)
        return NULL;
    return json_pack("{s:s,s:s,s:o,s:I,s:I,s:s,s:o,s:o}", "name", n->name,
                     "address", n->address, "cpus",
                     sched_json_cpus(n->cap.mcpus), "memory",
                     (json_int_t)n->cap.memory, "gpus", (json_int_t)n->cap.gpus,
                     "state", n->state[0] ? n->state : "LOST", "last_heartbeat",
                     sched_json_time(n->last_heartbeat), "used", used);
}

/* ---- Responses ---- */

/* Answer status with o (consumed). */
static void reply_json(httpd_response *resp, int status, json_t *o)
{
    char *text = NULL;

    if (o == NULL) {
        httpd_respond_printf(resp, 500, "{\"error\":\"out of memory\"}");
        return;
    }
    /* Shortest reals: 0.8768 prints as 0.8768, not 0.87680000000000002. */
    if (jsonout_dumps(o, &text) != FLPS_OK ||
        httpd_respond(resp, status, "application/json", text, strlen(text)) !=
            FLPS_OK)
        httpd_respond_printf(resp, 500, "{\"error\":\"out of memory\"}");
    json_decref(o);
    flps_free(text);
}

/* A JSON string of text; bytes that are not UTF-8 (a message quoting what
 * a client sent, cut somewhere) become '?' rather than failing the whole
 * answer with a misleading 500. */
static json_t *json_text(const char *text)
{
    json_t *s = json_string(text);
    char *copy;

    if (s != NULL || text == NULL)
        return s;
    copy = flps_strdup(text);
    if (copy == NULL)
        return NULL;
    for (char *p = copy; *p != '\0'; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    s = json_string(copy);
    flps_free(copy);
    return s;
}

static void reply_error(httpd_response *resp, int status, const char *msg)
{
    reply_json(resp, status, json_pack("{s:o}", "error", json_text(msg)));
}

/* A Redis failure: 503, the API is there but its state is not. */
static void reply_store_error(sched_api *a, httpd_response *resp)
{
    char msg[600];

    snprintf(msg, sizeof(msg), "the scheduler's Redis failed: %s",
             sched_store_error(a->st));
    log_error("api: %s", msg);
    reply_error(resp, 503, msg);
}

/* ---- Endpoints ---- */

/* Parse a submitted job file. Runs before the API-wide lock is taken, so
 * a large or hostile body costs only its own connection's time (the
 * parser refuses deep nesting first: services/textguard.h). 1 when *spec
 * holds the job; 0 when resp holds the refusal. */
static int submit_parse(const httpd_request *req, httpd_response *resp,
                        jobspec *spec)
{
    jobspec_where where;
    char err[1024];
    flps_err rc;

    rc = jobspec_parse_where(req->body, req->body_len, spec, err, sizeof(err),
                             &where);
    if (rc == FLPS_ECONFIG) {
        json_t *o = json_pack("{s:o}", "error", json_text(err));

        if (o != NULL) {
            json_object_set_new(o, "line",
                                where.line > 0
                                    ? json_integer((json_int_t)where.line)
                                    : json_null());
            json_object_set_new(o, "field",
                                where.field[0] ? json_text(where.field)
                                               : json_null());
        }
        log_info("job refused: %s", err);
        reply_json(resp, 400, o);
        return 0;
    }
    if (rc != FLPS_OK) {
        reply_error(resp, 500, flps_strerror(rc));
        return 0;
    }
    return 1;
}

static int is_submit(const httpd_request *req)
{
    return strcmp(req->method, "POST") == 0 &&
           (strcmp(req->path, "/v1/jobs") == 0 ||
            strcmp(req->path, "/v1/jobs/") == 0);
}

/* spec: the body, parsed by submit_parse; NULL if it was not. */
static void submit(sched_api *a, const httpd_request *req, const jobspec *spec,
                   httpd_response *resp)
{
    char err[1024];
    sched_node *nodes = NULL;
    sched_pnode *pn = NULL;
    size_t nn = 0;
    sched_pjob pj;
    sched_job job;
    int fits = 0;
    flps_err rc;

    if (spec == NULL) {
        reply_error(resp, 500, "internal error: the job was not parsed");
        return;
    }
    if (spec->mode == JOBSPEC_MODE_SAPS && !launch_places(a->launcher)) {
        /* flagent gives a saps job's workers each other's endpoints
         * (agent_peers.c); the kubernetes launcher does not yet. */
        snprintf(err, sizeof(err),
                 "job '%s': mode saps runs under flrun and flsched's agents "
                 "launcher: the %s launcher does not give a saps job's "
                 "workers each other's endpoints (FLPS_PEERS)",
                 spec->name, launch_name(a->launcher));
        log_info("job refused: %s", err);
        reply_json(
            resp, 422,
            json_pack("{s:o,s:s}", "error", json_text(err), "field", "mode"));
        return;
    }
    /* A cluster that places the pods says itself what never fits. */
    if (!launch_places(a->launcher))
        goto store;
    if (sched_store_nodes(a->st, &nodes, &nn) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    pn = flps_calloc(nn + 1, sizeof(*pn));
    if (pn == NULL) {
        sched_nodes_free(nodes, nn);
        reply_error(resp, 500, "out of memory");
        return;
    }
    for (size_t i = 0; i < nn; i++) {
        pn[i].cap = nodes[i].cap;
        pn[i].rdma = nodes[i].rdma_ports > 0;
    }
    memset(&pj, 0, sizeof(pj));
    pj.need_rdma = spec->transport == JOBSPEC_TRANSPORT_RDMA;
    pj.beside = spec->servers_auto;
    pj.servers = spec->servers;
    pj.workers = spec->workers;
    pj.per_server.mcpus = sched_res_mcpus(spec->cpus_per_server);
    pj.per_server.memory = spec->memory_per_server;
    pj.per_worker.mcpus = sched_res_mcpus(spec->cpus_per_worker);
    pj.per_worker.memory = spec->memory_per_worker;
    pj.per_worker.gpus = spec->gpus_per_worker;
    rc = sched_place_fits_ever(pn, nn, &pj, &fits);
    if (rc == FLPS_OK && !fits) {
        const char *field = "workers";
        char why[512];

        sched_place_explain(pn, nn, &pj, &field, why, sizeof(why));
        snprintf(err, sizeof(err), "job '%s' can never be placed: %s",
                 spec->name, why);
        log_info("job refused: %s", err);
        reply_json(
            resp, 422,
            json_pack("{s:o,s:s}", "error", json_text(err), "field", field));
    }
    flps_free(pn);
    sched_nodes_free(nodes, nn);
    if (rc != FLPS_OK) {
        reply_error(resp, 500, flps_strerror(rc));
        return;
    }
    if (!fits)
        return;
store:
    if (sched_store_submit(a->st, spec, req->body, req->body_len, flps_wall_s(),
                           &job) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    log_info("job %s submitted: '%s', %u %s, %u %s, priority %u", job.id,
             job.name, job.servers,
             plural_word(job.servers, "server", "servers"), job.workers,
             plural_word(job.workers, "worker", "workers"), job.priority);
    reply_json(resp, 201, job_json(&job));
    sched_job_fini(&job);
}

static void list_jobs(sched_api *a, httpd_response *resp)
{
    sched_job *jobs = NULL;
    size_t n = 0;
    json_t *arr;

    if (sched_store_jobs(a->st, &jobs, &n) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++)
        json_array_append_new(arr, job_json(&jobs[i]));
    sched_jobs_free(jobs, n);
    reply_json(resp, 200, arr ? json_pack("{s:o}", "jobs", arr) : NULL);
}

static void list_nodes(sched_api *a, httpd_response *resp)
{
    sched_node *nodes = NULL;
    size_t n = 0;
    json_t *arr;

    if (sched_store_nodes(a->st, &nodes, &n) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++)
        json_array_append_new(arr, node_json(&nodes[i]));
    sched_nodes_free(nodes, n);
    reply_json(resp, 200, arr ? json_pack("{s:o}", "nodes", arr) : NULL);
}

/* 1 when job id exists (404 answered otherwise, or 503). */
static int job_exists(sched_api *a, const char *id, httpd_response *resp)
{
    sched_job j;
    int found = 0;
    char msg[96];

    if (sched_store_job(a->st, id, 0, &j, &found) != FLPS_OK) {
        reply_store_error(a, resp);
        return 0;
    }
    if (found) {
        sched_job_fini(&j);
        return 1;
    }
    snprintf(msg, sizeof(msg), "no job %.40s", id);
    reply_error(resp, 404, msg);
    return 0;
}

static void get_job(sched_api *a, const char *id, httpd_response *resp)
{
    sched_job j;
    int found = 0;
    char msg[96];

    if (sched_store_job(a->st, id, 1, &j, &found) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    if (!found) {
        snprintf(msg, sizeof(msg), "no job %.40s", id);
        reply_error(resp, 404, msg);
        return;
    }
    reply_json(resp, 200, job_json(&j));
    sched_job_fini(&j);
}

static void cancel_job(sched_api *a, const char *id, httpd_response *resp)
{
    sched_cancel_result res;
    sched_job j;
    char msg[160];

    if (sched_store_cancel(a->st, id, flps_wall_s(), &res, &j) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    if (res == SCHED_CANCEL_NO_JOB) {
        snprintf(msg, sizeof(msg), "no job %.40s", id);
        reply_error(resp, 404, msg);
        return;
    }
    if (res == SCHED_CANCEL_FINISHED) {
        json_t *o;

        snprintf(msg, sizeof(msg), "job %s already finished: %s", j.id,
                 sched_state_name(j.state));
        o = json_pack("{s:s,s:s}", "error", msg, "state",
                      sched_state_name(j.state));
        sched_job_fini(&j);
        reply_json(resp, 409, o);
        return;
    }
    log_info("job %s cancelled", j.id);
    reply_json(resp, 200, job_json(&j));
    sched_job_fini(&j);
}

/* A decimal integer from 0 to max (the whole string, no sign). */
static int parse_count(const char *s, long long max, long long *out)
{
    uint64_t v = 0;

    if (s == NULL ||
        flps_parse_u64(NULL, s, 0, (uint64_t)max, &v, NULL, 0) != FLPS_OK)
        return 0;
    *out = (long long)v;
    return 1;
}

static void get_events(sched_api *a, const char *id, const httpd_request *req,
                       httpd_response *resp)
{
    const char *since_s = httpd_query(req, "since");
    long long since = 0;
    char **ev = NULL;
    size_t n = 0;
    json_t *arr;

    if (since_s != NULL && !parse_count(since_s, 1LL << 62, &since)) {
        reply_error(resp, 400, "since must be an event seq (an integer >= 0)");
        return;
    }
    if (!job_exists(a, id, resp))
        return;
    if (sched_store_events(a->st, id, since, &ev, &n) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        json_t *e = json_loads(ev[i], 0, NULL);

        if (e != NULL)
            json_array_append_new(arr, e);
    }
    sched_strv_free(ev, n);
    reply_json(resp, 200, arr ? json_pack("{s:o}", "events", arr) : NULL);
}

static int is_stream_id(const char *s)
{
    size_t d = strspn(s, "0123456789");

    if (d == 0)
        return 0;
    if (s[d] == '\0')
        return 1;
    return s[d] == '-' && s[d + 1] != '\0' &&
           strspn(s + d + 1, "0123456789") == strlen(s + d + 1);
}

static void get_logs(sched_api *a, const char *id, const httpd_request *req,
                     httpd_response *resp)
{
    const char *after = httpd_query(req, "after");
    const char *limit_s = httpd_query(req, "limit");
    long long limit = API_LOG_LIMIT_DEFAULT;
    char **ids = NULL, **tasks = NULL, **lines = NULL;
    size_t n = 0;
    json_t *arr, *o;

    if (after != NULL && *after != '\0' && !is_stream_id(after)) {
        reply_error(resp, 400,
                    "after must be a log line id as returned in 'next' "
                    "(MS-SEQ)");
        return;
    }
    if (limit_s != NULL &&
        (!parse_count(limit_s, API_LOG_LIMIT_MAX, &limit) || limit == 0)) {
        reply_error(resp, 400, "limit must be an integer from 1 to 10000");
        return;
    }
    if (!job_exists(a, id, resp))
        return;
    if (sched_store_logs(a->st, id, after, (long)limit, &ids, &tasks, &lines,
                         &n) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++)
        json_array_append_new(arr,
                              json_pack("{s:s,s:s,s:s}", "id", ids[i], "task",
                                        tasks[i], "line", lines[i]));
    /* next: where to continue; the last id given, else what was asked. */
    o = arr ? json_pack("{s:o,s:s}", "lines", arr, "next",
                        n > 0 ? ids[n - 1] : (after && *after ? after : "0-0"))
            : NULL;
    sched_strv_free(ids, n);
    sched_strv_free(tasks, n);
    sched_strv_free(lines, n);
    reply_json(resp, 200, o);
}

static void get_plan(sched_api *a, const char *id, httpd_response *resp)
{
    char *version = NULL, *plan = NULL;
    int found = 0;
    json_t *o, *v;

    if (!job_exists(a, id, resp))
        return;
    if (sched_store_plan(a->st, id, &version, &plan, &found) != FLPS_OK) {
        reply_store_error(a, resp);
        return;
    }
    if (!found) {
        reply_error(resp, 404, "no plan yet");
        return;
    }
    o = json_loads(plan, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        o = json_object();
    }
    v = json_loads(version, JSON_DECODE_ANY, NULL);
    json_object_set_new(o, "version", v ? v : json_string(version));
    flps_free(version);
    flps_free(plan);
    reply_json(resp, 200, o);
}

static void healthz(sched_api *a, httpd_response *resp)
{
    int leader = atomic_load(&a->stats->leader);

    if (sched_store_ping(a->st) != FLPS_OK) {
        reply_json(resp, 503,
                   json_pack("{s:s,s:b,s:s}", "status", "error", "leader",
                             leader, "redis", sched_store_error(a->st)));
        return;
    }
    reply_json(resp, 200,
               json_pack("{s:s,s:b,s:s}", "status", "ok", "leader", leader,
                         "redis", "ok"));
}

/* Gauges that come from Redis are read at scrape time. */
static void refresh_metrics(sched_api *a)
{
    static const char *const states[] = {"QUEUED", "RUNNING", "SUCCEEDED",
                                         "FAILED", "CANCELLED"};
    sched_loop_stats *s = a->stats;
    sched_job *jobs = NULL;
    sched_node *nodes = NULL;
    size_t nj = 0, nn = 0;
    double count[5] = {0};
    double ready = 0, lost = 0;
    int jobs_ok, nodes_ok;

    metrics_gauge_set(a->m_leader, NULL, atomic_load(&s->leader));
    metrics_counter_set(a->m_placements, NULL,
                        (double)atomic_load(&s->placements));
    metrics_counter_set(a->m_backfills, NULL,
                        (double)atomic_load(&s->backfills));
    metrics_counter_set(a->m_failures, NULL, (double)atomic_load(&s->failures));
    metrics_counter_set(a->m_restarts, NULL, (double)atomic_load(&s->restarts));
    metrics_counter_set(a->m_succeeded, NULL,
                        (double)atomic_load(&s->jobs_succeeded));
    metrics_counter_set(a->m_failed, NULL,
                        (double)atomic_load(&s->jobs_failed));
    metrics_counter_set(a->m_lost, NULL, (double)atomic_load(&s->nodes_lost));
    jobs_ok = sched_store_jobs(a->st, &jobs, &nj) == FLPS_OK;
    nodes_ok = sched_store_nodes(a->st, &nodes, &nn) == FLPS_OK;

    sched_metrics_refresh(a->sm, jobs, jobs_ok ? nj : 0, nodes,
                          nodes_ok ? nn : 0);
    if (jobs_ok) {
        for (size_t i = 0; i < nj; i++)
            count[jobs[i].state]++;
        for (size_t i = 0; i < 5; i++) {
            const char *v[] = {states[i]};

            metrics_gauge_set(a->m_jobs, v, count[i]);
        }
        metrics_gauge_set(a->m_queue, NULL, count[SCHED_QUEUED]);
        sched_jobs_free(jobs, nj);
    }
    if (nodes_ok) {
        const char *r[] = {"READY"}, *l[] = {"LOST"};

        for (size_t i = 0; i < nn; i++) {
            if (strcmp(nodes[i].state, "READY") == 0)
                ready++;
            else
                lost++;
        }
        metrics_gauge_set(a->m_nodes, r, ready);
        metrics_gauge_set(a->m_nodes, l, lost);
        sched_nodes_free(nodes, nn);
    }
}

/* GET /v1/metrics/targets: Prometheus http_sd_configs reads this. */
static void serve_targets(sched_api *a, httpd_response *resp)
{
    sched_job *jobs = NULL;
    sched_node *nodes = NULL;
    size_t nj = 0, nn = 0;
    char *text = NULL;

    if (sched_store_jobs(a->st, &jobs, &nj) != FLPS_OK ||
        sched_store_nodes(a->st, &nodes, &nn) != FLPS_OK) {
        sched_jobs_free(jobs, nj);
        reply_store_error(a, resp);
        return;
    }
    if (sched_metrics_targets_json(jobs, nj, nodes, nn, &text) != FLPS_OK ||
        httpd_respond(resp, 200, "application/json", text, strlen(text)) !=
            FLPS_OK)
        reply_error(resp, 500, "out of memory");
    free(text);
    sched_jobs_free(jobs, nj);
    sched_nodes_free(nodes, nn);
}

static void serve_metrics(sched_api *a, httpd_response *resp)
{
    refresh_metrics(a);
    if (metrics_respond(a->reg, resp) != FLPS_OK)
        reply_error(resp, 500, "out of memory");
}

/* Constant-time comparison, so the token cannot be guessed byte by byte
 * from response times. */
static int token_ok(const sched_api *a, const httpd_request *req)
{
    const char *h = httpd_header(req, "Authorization");
    size_t n = strlen(a->token), m;
    unsigned char diff = 0;

    if (h == NULL || strncmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    m = strlen(h);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a->token[i] ^ (i < m ? h[i] : 0));
    return diff == 0 && m == n;
}

static void method_not_allowed(httpd_response *resp, const char *allowed);

/* GET /v1/info, with the API's certificate and how jobs run. */
static json_t *info_json(sched_api *a)
{
    httpd_cert_info tls;
    json_t *o =
        sched_info_json(a->st, httpd_tls_info(a->http, &tls) ? &tls : NULL);

    if (o != NULL)
        json_object_set_new(o, "launcher", launch_info_json(a->launcher));
    return o;
}

/* POST /v1/jobs/{id}/report: a job's pods, with the job's own token
 * (sched_report.h) instead of the API's. 1 when p is that path (answered). */
static int serve_report(sched_api *a, const httpd_request *req,
                        httpd_response *resp)
{
    const char *p = req->path, *rest;
    char id[48], msg[300];
    json_t *answer = NULL;
    int status = 500;

    if (strncmp(p, "/v1/jobs/", 9) != 0 ||
        (rest = strchr(p + 9, '/')) == NULL || strcmp(rest, "/report") != 0 ||
        rest == p + 9 || (size_t)(rest - (p + 9)) >= sizeof(id))
        return 0;
    if (strcmp(req->method, "POST") != 0) {
        method_not_allowed(resp, "POST");
        return 1;
    }
    memcpy(id, p + 9, (size_t)(rest - (p + 9)));
    id[rest - (p + 9)] = '\0';
    if (sched_report_apply(a->st, id, httpd_header(req, "Authorization"),
                           req->body, req->body_len, &status, msg, sizeof(msg),
                           &answer) != FLPS_OK) {
        reply_store_error(a, resp);
        return 1;
    }
    if (status == 200)
        reply_json(resp, 200, answer);
    else
        reply_error(resp, status, msg);
    return 1;
}

static void method_not_allowed(httpd_response *resp, const char *allowed)
{
    char msg[96];

    snprintf(msg, sizeof(msg), "method not allowed here; use %s", allowed);
    reply_error(resp, 405, msg);
}

static void route(sched_api *a, const httpd_request *req, const jobspec *spec,
                  httpd_response *resp)
{
    const char *m = req->method, *p = req->path;
    int get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
    char id[48], msg[300];
    const char *rest;
    size_t idlen;

    if (strcmp(p, "/healthz") == 0) {
        if (get)
            healthz(a, resp);
        else
            method_not_allowed(resp, "GET");
        return;
    }
    if (strcmp(p, "/metrics") == 0) {
        if (get)
            serve_metrics(a, resp);
        else
            method_not_allowed(resp, "GET");
        return;
    }
    /* Like /metrics, without the token: Prometheus scrapes both, and the
     * list holds only addresses and job ids. */
    if (strcmp(p, "/v1/metrics/targets") == 0) {
        if (get)
            serve_targets(a, resp);
        else
            method_not_allowed(resp, "GET");
        return;
    }
    /* A job's pods hold the job's token, not the API's. */
    if (serve_report(a, req, resp))
        return;
    if (a->token != NULL && !token_ok(a, req)) {
        reply_error(resp, 401,
                    "missing or wrong bearer token; send Authorization: "
                    "Bearer TOKEN (flsubmit reads FLPS_TOKEN)");
        return;
    }
    if (strcmp(p, "/v1/jobs") == 0 || strcmp(p, "/v1/jobs/") == 0) {
        if (strcmp(m, "POST") == 0)
            submit(a, req, spec, resp);
        else if (get)
            list_jobs(a, resp);
        else
            method_not_allowed(resp, "GET or POST");
        return;
    }
    if (strcmp(p, "/v1/info") == 0) {
        if (get)
            reply_json(resp, 200, info_json(a));
        else
            method_not_allowed(resp, "GET");
        return;
    }
    if (strcmp(p, "/v1/nodes") == 0) {
        if (get)
            list_nodes(a, resp);
        else
            method_not_allowed(resp, "GET");
        return;
    }
    if (strncmp(p, "/v1/jobs/", 9) == 0) {
        rest = strchr(p + 9, '/');
        idlen = rest ? (size_t)(rest - (p + 9)) : strlen(p + 9);
        if (idlen > 0 && idlen < sizeof(id)) {
            memcpy(id, p + 9, idlen);
            id[idlen] = '\0';
            if (rest == NULL) {
                if (get)
                    get_job(a, id, resp);
                else if (strcmp(m, "DELETE") == 0)
                    cancel_job(a, id, resp);
                else
                    method_not_allowed(resp, "GET or DELETE");
                return;
            }
            if (strcmp(rest, "/events") == 0 || strcmp(rest, "/logs") == 0 ||
                strcmp(rest, "/plan") == 0) {
                if (!get)
                    method_not_allowed(resp, "GET");
                else if (rest[1] == 'e')
                    get_events(a, id, req, resp);
                else if (rest[1] == 'l')
                    get_logs(a, id, req, resp);
                else
                    get_plan(a, id, resp);
                return;
            }
        }
    }
    snprintf(msg, sizeof(msg), "no such endpoint: %.10s %.200s", m, p);
    reply_error(resp, 404, msg);
}

void sched_api_set_http(sched_api *a, httpd *h)
{
    pthread_mutex_lock(&a->lock);
    a->http = h;
    pthread_mutex_unlock(&a->lock);
}

void sched_api_handle(void *arg, const httpd_request *req, httpd_response *resp)
{
    sched_api *a = arg;
    double t0 = flps_mono_s();
    char code[8];
    const char *v[] = {code};
    jobspec spec;
    int parsed = 0;

    /* The lock serializes Redis; parsing a body needs none of it. */
    if (is_submit(req) && (a->token == NULL || token_ok(a, req))) {
        if (!submit_parse(req, resp, &spec))
            goto out;
        parsed = 1;
    }
    pthread_mutex_lock(&a->lock);
    route(a, req, parsed ? &spec : NULL, resp);
    pthread_mutex_unlock(&a->lock);
out:
    /* A client that holds the token (or, with none, was answered) is an
     * established one: under a flood of strangers its connections are
     * still let in (services/httpd.h). */
    resp->proven = a->token != NULL ? token_ok(a, req) : resp->status < 400;
    snprintf(code, sizeof(code), "%d", resp->status);
    metrics_counter_add(a->m_requests, v, 1);
    metrics_histogram_observe(a->m_seconds, NULL, flps_mono_s() - t0);
}
