/* The leader's loop: lease, exits, nodes, failures, placement. */
#include "scheduler/sched_loop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/strbuf.h"
#include "services/jobspec.h"
#include "services/jsonout.h"
#include "services/plan.h"

/* A follower tries for the lease this often (docs/scheduler.md). */
#define LOOP_LEASE_RETRY_S 1.0

/* While the same failure repeats (Redis down: every turn, 5 a second) it is
 * logged when it starts, then once a minute with a count, and once more
 * when it ends. */
#define LOOP_REPEAT_LOG_S 60.0

/* One kind of failure that may repeat every turn. */
typedef struct loop_repeat {
    const char *what; /* "scheduling turn stopped", as the first line says */
    unsigned long n;  /* in a row, 0 = not failing */
    double logged;    /* mono time of the last line */
    char why[200];    /* the reason last logged */
} loop_repeat;

static void repeat_fail(loop_repeat *r, double mono, flps_log_level level,
                        const char *why)
{
    r->n++;
    if (r->n == 1 || strncmp(why, r->why, sizeof(r->why) - 1) != 0) {
        flps_log(level, "%s: %s", r->what, why);
    } else if (mono - r->logged >= LOOP_REPEAT_LOG_S) {
        flps_log(level, "%s: %s (still, %lu times in a row)", r->what, why,
                 r->n);
    } else {
        return;
    }
    r->logged = mono;
    snprintf(r->why, sizeof(r->why), "%s", why);
}

static void repeat_ok(loop_repeat *r)
{
    if (r->n > 1)
        log_info("%s no more: it failed %lu times in a row", r->what, r->n);
    else if (r->n == 1)
        log_info("%s no more", r->what);
    r->n = 0;
    r->why[0] = '\0';
}

struct sched_loop {
    sched_store *st;
    char id[128];
    long lease_ms;
    int node_ttl_s;
    int leader;
    int need_sweep;       /* just became leader: look at every RUNNING job */
    double next_lease;    /* mono time of the next lease attempt */
    double lease_expires; /* mono time our lease surely ends by */
    loop_repeat lease_fail, turn_fail;
    sched_loop_stats stats;
};

flps_err sched_loop_create(sched_store *st, const sched_loop_cfg *cfg,
                           sched_loop **out)
{
    sched_loop *l;

    if (st == NULL || cfg == NULL || cfg->id == NULL || cfg->id[0] == '\0' ||
        strlen(cfg->id) >= sizeof(l->id) || cfg->lease_ms < 100 || out == NULL)
        return FLPS_EINVAL;
    l = flps_calloc(1, sizeof(*l));
    if (l == NULL)
        return FLPS_ENOMEM;
    l->st = st;
    snprintf(l->id, sizeof(l->id), "%s", cfg->id);
    l->lease_ms = cfg->lease_ms;
    l->node_ttl_s = cfg->node_ttl_s > 0 ? cfg->node_ttl_s : 6;
    l->lease_fail.what = "cannot reach the lease";
    l->turn_fail.what = "scheduling turn stopped";
    atomic_init(&l->stats.leader, 0);
    atomic_init(&l->stats.placements, 0);
    atomic_init(&l->stats.backfills, 0);
    atomic_init(&l->stats.failures, 0);
    atomic_init(&l->stats.restarts, 0);
    atomic_init(&l->stats.jobs_failed, 0);
    atomic_init(&l->stats.jobs_succeeded, 0);
    atomic_init(&l->stats.nodes_lost, 0);
    *out = l;
    return FLPS_OK;
}

void sched_loop_destroy(sched_loop *l)
{
    if (l == NULL)
        return;
    if (l->leader) {
        if (sched_store_lease_release(l->st, l->id) == FLPS_OK)
            log_info("leadership released (%s)", l->id);
    }
    flps_free(l);
}

int sched_loop_is_leader(const sched_loop *l)
{
    return l->leader;
}

sched_loop_stats *sched_loop_stats_of(sched_loop *l)
{
    return &l->stats;
}

static void set_leader(sched_loop *l, int leader, const char *why)
{
    if (leader == l->leader)
        return;
    l->leader = leader;
    atomic_store(&l->stats.leader, leader);
    if (leader) {
        l->need_sweep = 1;
        log_info("leadership gained (%s): this scheduler now schedules", l->id);
    } else {
        log_warn("leadership lost (%s): %s", l->id, why);
    }
}

/* Take or renew the lease when due. A leader keeps leading while the
 * lease it last renewed can still be valid, so a short Redis outage does
 * not make it give up, and a long one does before another can take over. */
static void loop_lease(sched_loop *l, double mono)
{
    int held = 0;
    double started = mono;
    flps_err rc;

    if (l->leader && mono >= l->lease_expires) {
        set_leader(l, 0, "the lease ran out before it could be renewed");
        l->next_lease = mono;
    }
    if (mono < l->next_lease)
        return;
    rc = sched_store_lease(l->st, l->id, l->lease_ms, &held);
    if (rc != FLPS_OK) {
        repeat_fail(&l->lease_fail, mono, FLPS_LOG_WARN,
                    sched_store_error(l->st));
        l->next_lease = mono + LOOP_LEASE_RETRY_S;
        return;
    }
    repeat_ok(&l->lease_fail);
    if (held) {
        l->lease_expires = started + (double)l->lease_ms / 1000.0;
        l->next_lease = mono + (double)l->lease_ms / 3000.0;
        set_leader(l, 1, "");
    } else {
        set_leader(l, 0, "another scheduler holds flps:leader");
        l->next_lease = mono + LOOP_LEASE_RETRY_S;
    }
}

/* ---- Summary ---- */

flps_err sched_loop_summary(const sched_job *job, char **out)
{
    json_int_t sent = 0, recv = 0, dense = 0;
    json_t *acc = NULL, *o;
    uint64_t iterations = job->iterations;
    double last_exit = job->started_at;
    char *text = NULL;
    flps_err rc;

    for (size_t i = 0; i < job->ntasks; i++) {
        const sched_task *t = &job->tasks[i];
        json_t *d;

        if (strcmp(t->role, "worker") != 0)
            continue;
        if (t->exited_at > last_exit)
            last_exit = t->exited_at;
        if (t->done == NULL)
            continue;
        d = json_loads(t->done, 0, NULL);
        if (d == NULL) {
            log_warn("job %s: %s's done event is not JSON; its bytes are "
                     "left out of the summary",
                     job->id, t->name);
            continue;
        }
        sent += json_integer_value(json_object_get(d, "bytes_sent"));
        recv += json_integer_value(json_object_get(d, "bytes_received"));
        dense += json_integer_value(json_object_get(d, "dense_bytes"));
        if (t->index == 0) {
            json_t *a = json_object_get(d, "test_accuracy");

            if (json_is_number(a))
                acc = json_real(json_number_value(a));
            if (json_is_integer(json_object_get(d, "iterations")))
                iterations = (uint64_t)json_integer_value(
                    json_object_get(d, "iterations"));
        }
        json_decref(d);
    }
    o = json_object();
    if (o == NULL) {
        json_decref(acc);
        return FLPS_ENOMEM;
    }
    /* The fields and order of flrun's summary line. */
    json_object_set_new(o, "test_accuracy", acc ? acc : json_null());
    json_object_set_new(o, "iterations", json_integer((json_int_t)iterations));
    json_object_set_new(o, "bytes_sent", json_integer(sent));
    json_object_set_new(o, "bytes_received", json_integer(recv));
    json_object_set_new(o, "dense_bytes", json_integer(dense));
    json_object_set_new(
        o, "wall_seconds",
        json_real(last_exit > job->started_at && job->started_at > 0
                      ? round((last_exit - job->started_at) * 1000) / 1000
                      : 0.0));
    /* Shortest reals: 0.8768 prints as 0.8768, not 0.87680000000000002. */
    rc = jsonout_dumps(o, &text);
    json_decref(o);
    if (rc != FLPS_OK)
        return rc;
    *out = text;
    return FLPS_OK;
}

/* ---- Failures and exits ---- */

static void loop_fail(sched_loop *l, const char *id, uint32_t attempt,
                      const char *reason, int allow_restart, double now)
{
    sched_fail_result res = SCHED_FAIL_IGNORED;

    if (sched_store_fail(l->st, id, attempt, reason, allow_restart, now,
                         &res) != FLPS_OK) {
        log_error("job %s: cannot record the failure '%s': %s", id, reason,
                  sched_store_error(l->st));
        return;
    }
    if (res == SCHED_FAIL_IGNORED)
        return;
    atomic_fetch_add(&l->stats.failures, 1);
    if (res == SCHED_FAIL_REQUEUED) {
        atomic_fetch_add(&l->stats.restarts, 1);
        log_info("job %s restarted (back to the queue, attempt %u): %s", id,
                 attempt + 1, reason);
    } else {
        atomic_fetch_add(&l->stats.jobs_failed, 1);
        log_info("job %s failed: %s", id, reason);
    }
}

/* ": LINE" after the reason: the failing process's last error line, as
 * its agent read it from the process's log. */
static void append_error_line(char *reason, size_t len, const sched_task *t)
{
    size_t n = strlen(reason);

    if (t->error[0] != '\0' && n < len)
        snprintf(reason + n, len - n, ": %s", t->error);
}

/* Handle one exited task: completion or failure of its job. */
static void loop_exit(sched_loop *l, const char *key, double now)
{
    sched_task t;
    sched_job job;
    int found = 0;
    char reason[512];

    if (sched_store_task(l->st, key, &t, &found) != FLPS_OK) {
        log_error("cannot read exited task %s: %s", key,
                  sched_store_error(l->st));
        return;
    }
    if (!found) {
        log_warn("exit of %s, which has no task hash: ignored", key);
        return;
    }
    if (sched_store_job(l->st, t.job, 1, &job, &found) != FLPS_OK || !found) {
        log_warn("exit of %s, whose job %s cannot be read: ignored", key,
                 t.job);
        sched_task_fini(&t);
        return;
    }
    if (job.state != SCHED_RUNNING || job.attempt != t.attempt) {
        log_debug("exit of %s ignored: job %s is %s at attempt %u", key, job.id,
                  sched_state_name(job.state), job.attempt);
        goto out;
    }
    if (t.signal != 0)
        snprintf(reason, sizeof(reason), "%s on %s was killed by signal %ld",
                 t.name, t.node, t.signal);
    else
        snprintf(reason, sizeof(reason), "%s on %s exited with status %ld",
                 t.name, t.node, t.exit_code);
    append_error_line(reason, sizeof(reason), &t);
    log_info("job %s: task %s", job.id, reason);
    if (strcmp(t.role, "worker") == 0 && t.signal == 0 && t.exit_code == 0) {
        uint32_t ok = 0;
        char *summary = NULL;
        int done = 0;

        for (size_t i = 0; i < job.ntasks; i++) {
            const sched_task *w = &job.tasks[i];

            ok += strcmp(w->role, "worker") == 0 &&
                  strcmp(w->state, "EXITED") == 0 && w->exited &&
                  w->exit_code == 0 && w->signal == 0;
        }
        if (ok < job.workers)
            goto out;
        if (sched_loop_summary(&job, &summary) != FLPS_OK) {
            log_error("job %s: out of memory for the summary", job.id);
            goto out;
        }
        if (sched_store_succeed(l->st, job.id, job.attempt, summary, now,
                                &done) != FLPS_OK)
            log_error("job %s: cannot record success: %s", job.id,
                      sched_store_error(l->st));
        else if (done) {
            atomic_fetch_add(&l->stats.jobs_succeeded, 1);
            log_info("job %s succeeded: %s", job.id, summary);
        }
        flps_free(summary);
        goto out;
    }
    loop_fail(l, job.id, job.attempt, reason, 1, now);
out:
    sched_job_fini(&job);
    sched_task_fini(&t);
}

/* Job id and attempt from "flps:task:{id}:{attempt}:{role}-{index}". */
static int parse_task_key(const char *key, char *id, size_t idlen,
                          uint32_t *attempt)
{
    const char *p, *c;

    if (strncmp(key, "flps:task:", 10) != 0)
        return 0;
    p = key + 10;
    c = strchr(p, ':');
    if (c == NULL || (size_t)(c - p) >= idlen || c == p)
        return 0;
    memcpy(id, p, (size_t)(c - p));
    id[c - p] = '\0';
    {
        /* The attempt is the digits up to the next ':'. */
        char num[16];
        size_t n = strspn(c + 1, "0123456789");
        uint64_t v = 0;

        if (n == 0 || n >= sizeof(num))
            return 0;
        memcpy(num, c + 1, n);
        num[n] = '\0';
        if (flps_parse_u64(NULL, num, 0, UINT32_MAX, &v, NULL, 0) != FLPS_OK)
            return 0;
        *attempt = (uint32_t)v;
    }
    return 1;
}

/* A crash between LPOP and the commit would lose an exit; on becoming
 * leader every RUNNING job's tasks are looked at again instead. */
static flps_err loop_sweep(sched_loop *l, double now)
{
    sched_job *jobs = NULL;
    size_t n = 0;
    flps_err rc = sched_store_jobs(l->st, &jobs, &n);

    if (rc != FLPS_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].state != SCHED_RUNNING)
            continue;
        for (size_t k = 0; k < jobs[i].ntasks; k++)
            if (strcmp(jobs[i].tasks[k].state, "EXITED") == 0)
                loop_exit(l, jobs[i].tasks[k].key, now);
    }
    sched_jobs_free(jobs, n);
    return FLPS_OK;
}

/* Lost nodes: READY without an alive key becomes LOST and every job with a
 * task on it fails (also for a LOST node that still has tasks, in case a
 * previous leader stopped in between). A LOST node alive again is READY. */
static flps_err loop_nodes(sched_loop *l, double now)
{
    sched_node *nodes = NULL;
    size_t n = 0;
    flps_err rc = sched_store_nodes(l->st, &nodes, &n);

    if (rc != FLPS_OK)
        return rc;
    for (size_t i = 0; i < n && rc == FLPS_OK; i++) {
        sched_node *nd = &nodes[i];
        int marked = 0;

        if (nd->alive) {
            rc = sched_store_node_cap_ttl(l->st, nd->name, l->node_ttl_s);
            if (rc == FLPS_OK && strcmp(nd->state, "LOST") == 0) {
                rc = sched_store_node_back(l->st, nd->name, &marked);
                if (rc == FLPS_OK && marked)
                    log_info("node %s is back: READY", nd->name);
            }
            continue;
        }
        if (strcmp(nd->state, "READY") == 0) {
            rc = sched_store_node_lost(l->st, nd->name, &marked);
            if (rc != FLPS_OK)
                break;
            if (marked) {
                atomic_fetch_add(&l->stats.nodes_lost, 1);
                log_warn("node %s lost: no heartbeat (its alive key expired)",
                         nd->name);
                strcpy(nd->state, "LOST");
            }
        }
        if (strcmp(nd->state, "LOST") != 0)
            continue;
        for (size_t k = 0; k < nd->ntasks; k++) {
            char id[32], reason[128];
            uint32_t attempt = 0;

            if (!parse_task_key(nd->tasks[k], id, sizeof(id), &attempt))
                continue;
            snprintf(reason, sizeof(reason), "node %s lost", nd->name);
            if (sched_store_event(l->st, id, now, "node_lost", reason) !=
                FLPS_OK)
                log_warn("job %s: cannot record event: %s", id,
                         sched_store_error(l->st));
            loop_fail(l, id, attempt, reason, 1, now);
        }
    }
    sched_nodes_free(nodes, n);
    return rc;
}

/* ---- Plans (compression: auto) ---- */

/* FNV-1a of a profile's text. The plan hash keeps the digest of the last
 * profile planned (or refused) as profile_seen, so each profile is handled
 * once however many turns see it, by this leader or the next. */
static void profile_digest(const char *text, char *out, size_t len)
{
    uint64_t h = 14695981039346656037ULL;

    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    snprintf(out, len, "%016llx", (unsigned long long)h);
}

/* A RUNNING job whose spec says compression: auto and whose profile is
 * new: run the planner on it and store the plan as the next version. A
 * profile the planner refuses gives an event and no plan; the job runs
 * on as its workers do without one. */
static void loop_plan(sched_loop *l, const sched_job *job, double now)
{
    char digest[32], seen[32], err[256], msg[512];
    const char *type = "plan";
    uint64_t version = 0;
    char *plan_json = NULL;
    int committed = 0;
    jobspec spec;
    flps_err rc;

    if (job->profile == NULL || job->spec == NULL ||
        jobspec_parse(job->spec, strlen(job->spec), &spec, NULL, 0) !=
            FLPS_OK ||
        spec.compression != JOBSPEC_COMP_AUTO)
        return;
    profile_digest(job->profile, digest, sizeof(digest));
    if (sched_store_plan_seen(l->st, job->id, &version, seen, sizeof(seen)) !=
        FLPS_OK) {
        log_warn("job %s: cannot read its plan: %s", job->id,
                 sched_store_error(l->st));
        return;
    }
    if (strcmp(seen, digest) == 0)
        return;
    err[0] = '\0';
    rc = plan_from_profile(job->profile, version + 1, &plan_json, err,
                           sizeof(err));
    if (rc == FLPS_OK) {
        plan *p = NULL;
        size_t sparse = 0;

        if (plan_parse(plan_json, &p) != FLPS_OK) {
            log_error("job %s: the planner's plan does not parse: %s", job->id,
                      plan_json);
            free(plan_json);
            return;
        }
        for (size_t i = 0; i < p->nlayers; i++)
            sparse += p->layers[i].kind != CODEC_DENSE;
        snprintf(msg, sizeof(msg),
                 "plan v%llu: %zu of %zu layers sparse, predicted %.3f ms vs "
                 "%.3f ms dense",
                 (unsigned long long)version + 1, sparse, p->nlayers,
                 p->predicted_iteration_seconds * 1000.0,
                 p->dense_iteration_seconds * 1000.0);
        plan_free(p);
    } else if (rc == FLPS_ENOMEM) {
        log_error("job %s: out of memory for its plan", job->id);
        return;
    } else {
        type = "plan_error";
        snprintf(msg, sizeof(msg), "no plan from the workers' profile: %s",
                 err[0] ? err : flps_strerror(rc));
    }
    rc = sched_store_plan_put(l->st, l->id, job->id, version, plan_json, digest,
                              now, type, msg, &committed);
    free(plan_json);
    if (rc != FLPS_OK)
        log_warn("job %s: cannot store its plan: %s", job->id,
                 sched_store_error(l->st));
    else if (committed)
        log_info("job %s: %s", job->id, msg);
}

/* ---- Placement ---- */

/* The job file's transport: the job hash's field, or its spec for a hash
 * written before the field existed. */
static jobspec_transport job_transport(const sched_job *job)
{
    static const jobspec_transport all[] = {
        JOBSPEC_TRANSPORT_ZMQ, JOBSPEC_TRANSPORT_RDMA, JOBSPEC_TRANSPORT_AUTO};
    jobspec spec;

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(job->transport, jobspec_transport_name(all[i])) == 0)
            return all[i];
    if (job->spec != NULL &&
        jobspec_parse(job->spec, strlen(job->spec), &spec, NULL, 0) == FLPS_OK)
        return spec.transport;
    return JOBSPEC_TRANSPORT_ZMQ;
}

/* What a placed job's processes run, into job->transport_used, and the
 * line that says why into why: rdma and zmq as asked; auto RDMA when every
 * node the job was placed on reports an ACTIVE RDMA port, else ZeroMQ,
 * naming a node without one. */
static void choose_transport(sched_job *job, const sched_node *nodes,
                             const sched_pdecision *d, char *why, size_t len)
{
    jobspec_transport t = job_transport(job);
    const char *without = NULL;
    size_t nwithout = 0;

    why[0] = '\0';
    if (t != JOBSPEC_TRANSPORT_AUTO) {
        snprintf(job->transport_used, sizeof(job->transport_used), "%s",
                 jobspec_transport_name(t));
        return;
    }
    for (uint32_t k = 0; k < job->servers + job->workers; k++) {
        uint32_t nd = k < job->servers ? d->server_node[k]
                                       : d->worker_node[k - job->servers];

        if (nodes[nd].rdma_ports == 0 &&
            (without == NULL || strcmp(without, nodes[nd].name) != 0)) {
            if (without == NULL)
                without = nodes[nd].name;
            nwithout++;
        }
    }
    if (without == NULL) {
        snprintf(job->transport_used, sizeof(job->transport_used), "rdma");
        snprintf(why, len,
                 "transport: auto: RDMA, because every node the job was "
                 "placed on reports an ACTIVE RDMA port");
    } else {
        snprintf(job->transport_used, sizeof(job->transport_used), "zmq");
        snprintf(why, len,
                 "transport: auto: ZeroMQ, because node %s%s the job was "
                 "placed on reports no ACTIVE RDMA port",
                 without, nwithout > 1 ? " (and others)" : "");
    }
}

typedef struct run_acc {
    char id[32];
    uint32_t attempt;
    sched_res *held;
} run_acc;

/* One turn of placement: nodes and their use, running jobs and when they
 * end, the queue in order; place what the rules allow. Running jobs past
 * their time_limit fail here too (no restart: the limit would hit again). */
static flps_err loop_place(sched_loop *l, double now)
{
    sched_node *nodes = NULL;
    sched_job *queue = NULL;
    size_t nn = 0, nq = 0, nr = 0;
    sched_pnode *pn = NULL;
    run_acc *runs = NULL;
    sched_prun *pr = NULL;
    sched_pjob *pq = NULL;
    size_t *order = NULL;
    sched_pdecision *dec = NULL;
    sched_pjob *ordered = NULL;
    uint32_t **slots = NULL;
    size_t nslots = 0;
    sched_preserve res;
    flps_err rc;

    rc = sched_store_nodes(l->st, &nodes, &nn);
    if (rc != FLPS_OK)
        return rc;
    rc = FLPS_ENOMEM;
    pn = flps_calloc(nn + 1, sizeof(*pn));
    if (pn == NULL)
        goto out;
    for (size_t i = 0; i < nn; i++) {
        pn[i].cap = nodes[i].cap;
        pn[i].used = nodes[i].used;
        pn[i].ready = nodes[i].alive && strcmp(nodes[i].state, "READY") == 0;
        pn[i].rdma = nodes[i].rdma_ports > 0;
        for (size_t k = 0; k < nodes[i].ntasks; k++) {
            char id[32];
            uint32_t attempt = 0;
            size_t r;

            if (!parse_task_key(nodes[i].tasks[k], id, sizeof(id), &attempt))
                continue;
            for (r = 0; r < nr; r++)
                if (strcmp(runs[r].id, id) == 0)
                    break;
            if (r == nr) {
                run_acc *nv = flps_realloc(runs, (nr + 1) * sizeof(*runs));

                if (nv == NULL)
                    goto out;
                runs = nv;
                memset(&runs[nr], 0, sizeof(runs[nr]));
                snprintf(runs[nr].id, sizeof(runs[nr].id), "%s", id);
                runs[nr].attempt = attempt;
                runs[nr].held = flps_calloc(nn + 1, sizeof(sched_res));
                nr++;
                if (runs[r].held == NULL)
                    goto out;
            }
            runs[r].held[i].mcpus += nodes[i].task_need[k].mcpus;
            runs[r].held[i].memory += nodes[i].task_need[k].memory;
            runs[r].held[i].gpus += nodes[i].task_need[k].gpus;
        }
    }
    pr = flps_calloc(nr + 1, sizeof(*pr));
    if (pr == NULL)
        goto out;
    for (size_t r = 0; r < nr; r++) {
        sched_job job;
        int found = 0;

        pr[r].held = runs[r].held;
        rc = sched_store_job(l->st, runs[r].id, 0, &job, &found);
        if (rc != FLPS_OK)
            goto out;
        if (!found)
            continue;
        if (job.state == SCHED_RUNNING && job.time_limit > 0 &&
            job.started_at > 0)
            pr[r].end = job.started_at + job.time_limit;
        if (job.state == SCHED_RUNNING && pr[r].end > 0 && now > pr[r].end) {
            char reason[128];

            snprintf(reason, sizeof(reason), "time limit of %g s exceeded",
                     job.time_limit);
            loop_fail(l, job.id, job.attempt, reason, 0, now);
        } else if (job.state == SCHED_RUNNING) {
            loop_plan(l, &job, now);
        }
        sched_job_fini(&job);
    }

    rc = sched_store_queue(l->st, &queue, &nq);
    if (rc != FLPS_OK)
        goto out;
    rc = FLPS_ENOMEM;
    pq = flps_calloc(nq + 1, sizeof(*pq));
    order = flps_calloc(nq + 1, sizeof(*order));
    ordered = flps_calloc(nq + 1, sizeof(*ordered));
    dec = flps_calloc(nq + 1, sizeof(*dec));
    slots = flps_calloc(2 * nq + 1, sizeof(*slots));
    if (!pq || !order || !ordered || !dec || !slots)
        goto out;
    for (size_t j = 0; j < nq; j++) {
        pq[j].servers = queue[j].servers;
        pq[j].workers = queue[j].workers;
        pq[j].per_server = queue[j].per_server;
        pq[j].per_worker = queue[j].per_worker;
        pq[j].time_limit = queue[j].time_limit;
        pq[j].priority = queue[j].priority;
        pq[j].seq = queue[j].seq;
        pq[j].need_rdma = job_transport(&queue[j]) == JOBSPEC_TRANSPORT_RDMA;
    }
    sched_place_order(pq, nq, order);
    for (size_t j = 0; j < nq; j++) {
        ordered[j] = pq[order[j]];
        slots[nslots] = flps_calloc(ordered[j].servers + 1, sizeof(uint32_t));
        dec[j].server_node = slots[nslots++];
        slots[nslots] = flps_calloc(ordered[j].workers + 1, sizeof(uint32_t));
        dec[j].worker_node = slots[nslots++];
        if (dec[j].server_node == NULL || dec[j].worker_node == NULL)
            goto out;
    }
    rc = sched_place_queue(pn, nn, pr, nr, ordered, nq, now, dec, &res);
    if (rc != FLPS_OK)
        goto out;
    for (size_t j = 0; j < nq; j++) {
        sched_job *job = &queue[order[j]];
        const char **sn = NULL, **wn = NULL;
        char twhy[256];
        int committed = 0;

        if (dec[j].how == SCHED_PLACE_NO)
            continue;
        choose_transport(job, nodes, &dec[j], twhy, sizeof(twhy));
        sn = flps_calloc(job->servers + 1, sizeof(*sn));
        wn = flps_calloc(job->workers + 1, sizeof(*wn));
        if (sn == NULL || wn == NULL) {
            flps_free(sn);
            flps_free(wn);
            rc = FLPS_ENOMEM;
            goto out;
        }
        for (uint32_t s = 0; s < job->servers; s++)
            sn[s] = nodes[dec[j].server_node[s]].name;
        for (uint32_t w = 0; w < job->workers; w++)
            wn[w] = nodes[dec[j].worker_node[w]].name;
        rc = sched_store_place(l->st, l->id, job, sn, wn, now, &committed);
        flps_free(sn);
        flps_free(wn);
        if (rc != FLPS_OK)
            goto out;
        if (!committed) {
            log_info("job %s changed or leadership moved while placing it; "
                     "the next turn looks again",
                     job->id);
            continue;
        }
        if (twhy[0] != '\0') {
            log_info("job %s: %s", job->id, twhy);
            if (sched_store_event(l->st, job->id, now, "transport", twhy) !=
                FLPS_OK)
                log_warn("job %s: cannot record event: %s", job->id,
                         sched_store_error(l->st));
        }
        atomic_fetch_add(&l->stats.placements, 1);
        if (l->stats.on_place != NULL)
            l->stats.on_place(l->stats.on_place_arg, now - job->submitted_at);
        if (dec[j].how == SCHED_PLACE_BACKFILL)
            atomic_fetch_add(&l->stats.backfills, 1);
        {
            flps_strbuf where = FLPS_STRBUF_INIT;

            for (uint32_t k = 0; k < job->servers + job->workers; k++) {
                int srv = k < job->servers;
                uint32_t idx = srv ? k : k - job->servers;
                uint32_t nd =
                    srv ? dec[j].server_node[idx] : dec[j].worker_node[idx];

                flps_strbuf_printf(&where, "%s%s-%u on %s", k ? ", " : "",
                                   srv ? "server" : "worker", idx,
                                   nodes[nd].name);
            }
            /* Without memory for the list the line still says it placed. */
            log_info("job %s placed%s (attempt %u): %s", job->id,
                     dec[j].how == SCHED_PLACE_BACKFILL ? " by backfill" : "",
                     job->attempt,
                     flps_strbuf_error(&where) == FLPS_OK && where.data
                         ? where.data
                         : "");
            flps_strbuf_fini(&where);
        }
    }
    rc = FLPS_OK;
out:
    if (rc == FLPS_ENOMEM)
        log_error("placement: out of memory");
    for (size_t i = 0; i < nslots; i++)
        flps_free(slots[i]);
    flps_free(slots);
    flps_free(dec);
    flps_free(ordered);
    flps_free(order);
    flps_free(pq);
    sched_jobs_free(queue, nq);
    flps_free(pr);
    for (size_t r = 0; r < nr; r++)
        flps_free(runs[r].held);
    flps_free(runs);
    flps_free(pn);
    sched_nodes_free(nodes, nn);
    return rc;
}

flps_err sched_loop_step(sched_loop *l, double now, double mono)
{
    char key[256];
    flps_err rc;
    int got = 1;

    loop_lease(l, mono);
    if (!l->leader)
        return FLPS_OK;
    if (l->need_sweep) {
        rc = loop_sweep(l, now);
        if (rc != FLPS_OK)
            goto fail;
        l->need_sweep = 0;
    }
    while (got) {
        rc = sched_store_pop_exit(l->st, key, sizeof(key), &got);
        if (rc != FLPS_OK)
            goto fail;
        if (got)
            loop_exit(l, key, now);
    }
    rc = loop_nodes(l, now);
    if (rc != FLPS_OK)
        goto fail;
    rc = loop_place(l, now);
    if (rc != FLPS_OK)
        goto fail;
    repeat_ok(&l->turn_fail);
    return FLPS_OK;
fail:
    repeat_fail(&l->turn_fail, mono, FLPS_LOG_ERROR,
                rc == FLPS_ENOMEM ? "out of memory" : sched_store_error(l->st));
    return rc;
}
