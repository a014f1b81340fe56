/* The leader's loop: lease, exits, nodes, failures, placement. */
#include "scheduler/sched_loop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/strbuf.h"
#include "scheduler/sched_saps.h"
#include "services/event.h"
#include "services/jobenergy.h"
#include "services/jobspec.h"
#include "services/jsonout.h"
#include "services/plan.h"
#include "services/plural.h"

/* A follower tries for the lease this often (docs/scheduler.md). */
#define LOOP_LEASE_RETRY_S 1.0

/* A turn whose Redis calls took this long (a paused Redis: SIGSTOP, DEBUG
 * SLEEP, a slow disk) counts as an outage of the store: the agents' calls
 * time out meanwhile and their alive keys may expire. */
#define LOOP_STALL_S 1.0

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
    launch *launcher; /* NULL: the agents */
    char id[128];
    long lease_ms;
    int node_ttl_s;
    int leader;
    int need_sweep;       /* just became leader: look at every RUNNING job */
    double next_lease;    /* mono time of the next lease attempt */
    double lease_expires; /* mono time our lease surely ends by */
    double store_grace_s; /* no node judged LOST this long after ... */
    double store_away;    /* ... the mono time Redis was last away or
                             stalled (-HUGE_VAL: never) */
    int grace_logged;     /* "judged after the grace" said for this outage */
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
    l->launcher = cfg->launcher;
    snprintf(l->id, sizeof(l->id), "%s", cfg->id);
    l->lease_ms = cfg->lease_ms;
    l->node_ttl_s = cfg->node_ttl_s > 0 ? cfg->node_ttl_s : 6;
    l->store_grace_s =
        cfg->store_grace_s > 0 ? cfg->store_grace_s : (double)l->node_ttl_s;
    l->store_away = -HUGE_VAL;
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

/* Redis was away, or stalled, during a turn that began at mono (and at
 * flps_mono_s() t0): no READY node is judged LOST for the grace after it.
 * Its end is mono plus what the turn has taken so far. */
static void store_away(sched_loop *l, double mono, double t0)
{
    l->store_away = mono + (flps_mono_s() - t0);
    l->grace_logged = 0;
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
        if (rc == FLPS_EIO || rc == FLPS_ETIMEDOUT)
            store_away(l, mono, flps_mono_s());
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

/* What the workers' done events say they ran, setting by setting, as
 * flrun's summary folds it: the first word, "mixed" once another differs,
 * and how many workers said one. */
typedef struct ran_word {
    const char *key;
    char word[64];
    uint32_t said;
} ran_word;

static void ran_fold(ran_word *rw, const char *v)
{
    if (v == NULL || v[0] == '\0' || strlen(v) >= sizeof(rw->word))
        return;
    rw->said++;
    if (rw->word[0] == '\0')
        snprintf(rw->word, sizeof(rw->word), "%s", v);
    else if (strcmp(rw->word, v) != 0)
        snprintf(rw->word, sizeof(rw->word), "mixed");
}

/* The summary's compression, mode and optimizer (what the workers ran,
 * where they said it), "mismatch" (each setting they ran other than the
 * job file gives) and "not_reported" (a test accuracy, a worker's done
 * event, or a setting the file gives that a worker did not confirm): the
 * fields flrun's summary has. */
static void summary_ran(json_t *o, const sched_job *job, const ran_word *rw,
                        size_t nrw, uint32_t done, int have_acc)
{
    json_t *mis = json_array(), *gaps = json_array();
    jobspec spec;
    int have_spec =
        job->spec != NULL &&
        jobspec_parse(job->spec, strlen(job->spec), &spec, NULL, 0) == FLPS_OK;
    char line[256], jobv[64];

    if (!have_acc)
        json_array_append_new(gaps, json_string("test_accuracy"));
    if (done < job->workers)
        json_array_append_new(gaps, json_string("done"));
    for (size_t i = 0; i < nrw; i++) {
        if (rw[i].word[0] != '\0')
            json_object_set_new(o, rw[i].key, json_string(rw[i].word));
        if (!have_spec)
            continue;
        if (jobspec_ran_differs(&spec, rw[i].key, rw[i].word, jobv,
                                sizeof(jobv))) {
            snprintf(line, sizeof(line),
                     "%s: the job file says %s, the workers ran %s", rw[i].key,
                     jobv, rw[i].word);
            json_array_append_new(mis, json_string(line));
        }
        if (jobv[0] != '\0' && rw[i].said < job->workers &&
            jobspec_is_given(&spec, rw[i].key))
            json_array_append_new(gaps, json_string(rw[i].key));
    }
    if (json_array_size(mis) > 0)
        json_object_set(o, "mismatch", mis);
    if (json_array_size(gaps) > 0)
        json_object_set(o, "not_reported", gaps);
    json_decref(mis);
    json_decref(gaps);
}

/* The job's joules per iteration (services/jobenergy.h) and the GPU
 * clock its workers ran at, as flrun's summary writes them. */
static void summary_energy(json_t *o, const jobenergy *en)
{
    double total, gpu, cpu;
    int has_gpu, has_cpu;

    if (jobenergy_total(en, &total, &gpu, &cpu, &has_gpu, &has_cpu)) {
        json_object_set_new(o, "joules_per_iteration", json_real(total));
        if (has_gpu)
            json_object_set_new(o, "gpu_joules_per_iteration", json_real(gpu));
        if (has_cpu)
            json_object_set_new(o, "cpu_joules_per_iteration", json_real(cpu));
        json_object_set_new(o, "energy_method", json_string(en->method));
    }
    if (en->clock[0] != '\0')
        json_object_set_new(o, "gpu_clock", json_string(en->clock));
}

flps_err sched_loop_summary(const sched_job *job, char **out)
{
    json_int_t sent = 0, recv = 0, dense = 0, late = 0, client_rounds = 0;
    json_t *acc = NULL, *last5 = NULL, *o;
    int fl = 0; /* a done event counted a fedavg job's clients */
    uint64_t iterations = job->iterations;
    double last_exit = job->started_at;
    char *text = NULL;
    ran_word rw[] = {
        {"compression", "", 0}, {"mode", "", 0}, {"optimizer", "", 0}};
    uint32_t done = 0;
    jobenergy en = {0};
    int saps = sched_saps_is_saps(job);
    sapsfold ss = {0};
    flps_err rc;

    for (size_t i = 0; i < job->ntasks; i++) {
        const sched_task *t = &job->tasks[i];
        char why[160];
        event ev;
        const event_done *d = &ev.done;

        if (strcmp(t->role, "worker") != 0)
            continue;
        if (t->exited_at > last_exit)
            last_exit = t->exited_at;
        if (t->done == NULL)
            continue;
        /* The reader of the event lines (services/event.h): a done line
         * that breaks the schema still gives the fields it has right. */
        event_read(t->done, strlen(t->done), 0, &ev, why, sizeof(why));
        if (ev.kind != EVENT_DONE) {
            log_warn("job %s: %s's stored done line is no done event (%s); "
                     "its bytes are left out of the summary",
                     job->id, t->name,
                     why[0]                  ? why
                     : ev.kind == EVENT_NONE ? "out of memory"
                                             : "another event");
            event_fini(&ev);
            continue;
        }
        done++;
        sent += (json_int_t)d->bytes_sent;
        recv += (json_int_t)d->bytes_received;
        dense += (json_int_t)d->dense_bytes;
        ran_fold(&rw[0],
                 EVENT_HAS(d, done, compression) ? d->compression : NULL);
        ran_fold(&rw[1], EVENT_HAS(d, done, mode) ? d->mode : NULL);
        ran_fold(&rw[2], EVENT_HAS(d, done, optimizer) ? d->optimizer : NULL);
        jobenergy_add(&en, t->node, d); /* CPU packages once per node */
        if (saps)
            sapsfold_add(&ss, d, job->workers);
        fl |= EVENT_HAS(d, done, late_clients);
        late += (json_int_t)d->late_clients;
        client_rounds += (json_int_t)d->client_rounds;
        if (t->index == 0 && EVENT_HAS(d, done, test_accuracy_last5)) {
            json_decref(last5);
            last5 = json_real(d->test_accuracy_last5);
        }
        if (t->index == 0) {
            if (EVENT_HAS(d, done, test_accuracy)) {
                json_decref(acc);
                acc = json_real(d->test_accuracy);
            }
            if (EVENT_HAS(d, done, iterations))
                iterations = d->iterations;
        }
        event_fini(&ev);
    }
    o = json_object();
    if (o == NULL) {
        json_decref(acc);
        json_decref(last5);
        sapsfold_fini(&ss);
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
    summary_ran(o, job, rw, sizeof(rw) / sizeof(rw[0]), done, acc != NULL);
    summary_energy(o, &en);
    if (last5 != NULL) /* fedavg, as flrun's summary */
        json_object_set_new(o, "test_accuracy_last5", last5);
    if (fl) {
        json_object_set_new(o, "late_clients", json_integer(late));
        json_object_set_new(o, "client_rounds", json_integer(client_rounds));
    }
    if (saps) /* as flrun's summary */
        sched_saps_summary(&ss, job, o);
    sapsfold_fini(&ss);
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
    uint32_t lost;
    char reason[sizeof(job.reason)];

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
    lost = sched_saps_is_lost(&t) ? sched_saps_lost(&job) : 0;
    if (lost > 0) {
        /* As under flrun: the others leave it out of their matchings. */
        log_info("job %s: mode saps goes on with the other %u workers", job.id,
                 job.workers - lost);
        if (sched_store_event(l->st, job.id, now, "worker_lost", reason) !=
            FLPS_OK)
            log_warn("job %s: cannot record the lost worker: %s", job.id,
                     sched_store_error(l->st));
    }
    if (strcmp(t.role, "worker") == 0 &&
        ((t.signal == 0 && t.exit_code == 0) || lost > 0)) {
        uint32_t ok = 0;
        char *summary = NULL;
        int done = 0;

        for (size_t i = 0; i < job.ntasks; i++) {
            const sched_task *w = &job.tasks[i];

            ok += strcmp(w->role, "worker") == 0 &&
                  strcmp(w->state, "EXITED") == 0 && w->exited &&
                  w->exit_code == 0 && w->signal == 0;
        }
        if (ok + sched_saps_lost(&job) < job.workers)
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
    /* A launcher of its own adopts the running jobs it may not know. */
    rc = launch_sweep(l->launcher, l->st, jobs, n);
    for (size_t i = 0; rc == FLPS_OK && i < n; i++) {
        if (jobs[i].state != SCHED_RUNNING)
            continue;
        for (size_t k = 0; k < jobs[i].ntasks; k++)
            if (strcmp(jobs[i].tasks[k].state, "EXITED") == 0)
                loop_exit(l, jobs[i].tasks[k].key, now);
    }
    sched_jobs_free(jobs, n);
    return rc;
}

/* Lost nodes: READY without an alive key becomes LOST and every job with a
 * task on it fails (also for a LOST node that still has tasks, in case a
 * previous leader stopped in between), unless Redis was away within the
 * store grace. A LOST node alive again is READY. */
static flps_err loop_nodes(sched_loop *l, double now, double mono, double t0)
{
    sched_node *nodes = NULL;
    size_t n = 0;
    flps_err rc = sched_store_nodes(l->st, &nodes, &n);
    int judge;

    if (rc != FLPS_OK)
        return rc;
    /* The turn so far (from t0, the real time it began) stalled: Redis was
     * paused, and the agents could not refresh their keys meanwhile. */
    if (flps_mono_s() - t0 >= LOOP_STALL_S)
        store_away(l, mono, t0);
    /* An outage of the store is not a node failure: within the grace
     * after it, a READY node without its alive key is not judged. */
    judge = mono - l->store_away >= l->store_grace_s;
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
        if (strcmp(nd->state, "READY") == 0 && !judge) {
            if (!l->grace_logged)
                log_info("node %s has no alive key, but Redis was away "
                         "%.1f s ago: nodes are judged %.0f s after it, "
                         "once their agents could register again",
                         nd->name, mono - l->store_away, l->store_grace_s);
            l->grace_logged = 1;
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

/* ---- What the loop reads of a job file ---- */

/* The settings of a job's file the loop acts on. */
typedef struct job_settings {
    jobspec_transport transport;
    int is_auto; /* compression: auto */
    int beside;  /* servers: auto: server i on worker i's node */
} job_settings;

/* The job file's settings from the job hash's fields, which the submit
 * wrote from the job file it parsed: the loop never parses a spec again.
 * Only a hash written by a flsched from before the compression field
 * (which came after transport) has its spec read for them. */
static void job_settings_of(const sched_job *job, job_settings *out)
{
    static const jobspec_transport all[] = {
        JOBSPEC_TRANSPORT_ZMQ, JOBSPEC_TRANSPORT_RDMA, JOBSPEC_TRANSPORT_AUTO};
    codec_spec cs;
    jobspec spec;

    out->transport = JOBSPEC_TRANSPORT_ZMQ;
    out->is_auto = 0;
    out->beside = strcmp(job->placement, "beside") == 0;
    if (job->compression[0] == '\0') {
        if (job->spec != NULL && jobspec_parse(job->spec, strlen(job->spec),
                                               &spec, NULL, 0) == FLPS_OK) {
            out->transport = spec.transport;
            out->is_auto = spec.compression == CODEC_AUTO;
            out->beside = spec.servers_auto;
        }
        return;
    }
    out->is_auto = codec_setting_parse(job->compression, &cs) == FLPS_OK &&
                   cs.kind == CODEC_AUTO;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(job->transport, jobspec_transport_name(all[i])) == 0)
            out->transport = all[i];
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
    job_settings js;
    flps_err rc;

    if (job->profile == NULL)
        return;
    job_settings_of(job, &js);
    if (!js.is_auto)
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

        if (plan_parse(plan_json, &p, err, sizeof(err)) != FLPS_OK) {
            log_error("job %s: the planner's plan does not parse: %s: %s",
                      job->id, err, plan_json);
            free(plan_json);
            return;
        }
        for (size_t i = 0; i < p->nlayers; i++)
            sparse += p->layers[i].kind != CODEC_DENSE;
        snprintf(msg, sizeof(msg),
                 "plan v%llu: %zu of %zu %s sparse, predicted %.3f ms vs "
                 "%.3f ms dense",
                 (unsigned long long)version + 1, sparse, p->nlayers,
                 plural_word((double)p->nlayers, "layer", "layers"),
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

/* What a placed job's processes run, into job->transport_used, and the
 * line that says why into why: rdma and zmq as asked; auto RDMA when every
 * node the job was placed on reports an ACTIVE RDMA port, else ZeroMQ,
 * naming a node without one. */
static void choose_transport(sched_job *job, const sched_node *nodes,
                             const sched_pdecision *d, char *why, size_t len)
{
    job_settings js;
    jobspec_transport t;
    const char *without = NULL;
    size_t nwithout = 0;

    why[0] = '\0';
    job_settings_of(job, &js);
    t = js.transport;
    if (t != JOBSPEC_TRANSPORT_AUTO) {
        snprintf(job->transport_used, sizeof(job->transport_used), "%s",
                 jobspec_transport_name(t));
        return;
    }
    if (nodes == NULL) { /* the cluster places: no node's facts to read */
        snprintf(job->transport_used, sizeof(job->transport_used), "zmq");
        snprintf(why, len,
                 "transport: auto: ZeroMQ, because on Kubernetes flsched "
                 "does not know the nodes' RDMA ports; ask for rdma");
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

/* What the running jobs hold on each node, from the nodes' task sets. */
typedef struct run_acc {
    char id[32];
    uint32_t attempt;
    sched_res *held; /* by node */
} run_acc;

/* One turn of placement: what it read from Redis and what it decided.
 * Everything is owned and freed by place_turn_fini. */
typedef struct place_turn {
    sched_node *nodes;
    size_t nn;
    sched_pnode *pn; /* by node */
    run_acc *runs;
    size_t nr;
    sched_prun *pr;   /* by run */
    sched_job *queue; /* flps:queue's jobs */
    size_t nq;
    sched_pjob *pq; /* by queue index */
    size_t *order;  /* the placement order of the queue */
    sched_pjob *ordered;
    sched_pdecision *dec; /* by place in that order */
    uint32_t **slots;     /* the decisions' node arrays */
    size_t nslots;
} place_turn;

static void place_turn_fini(place_turn *t)
{
    for (size_t i = 0; i < t->nslots; i++)
        flps_free(t->slots[i]);
    flps_free(t->slots);
    flps_free(t->dec);
    flps_free(t->ordered);
    flps_free(t->order);
    flps_free(t->pq);
    sched_jobs_free(t->queue, t->nq);
    flps_free(t->pr);
    for (size_t r = 0; r < t->nr; r++)
        flps_free(t->runs[r].held);
    flps_free(t->runs);
    flps_free(t->pn);
    sched_nodes_free(t->nodes, t->nn);
}

/* The run of job id (at attempt) among t's, added when new; NULL without
 * memory. */
static run_acc *place_run(place_turn *t, const char *id, uint32_t attempt)
{
    run_acc *nv;

    for (size_t r = 0; r < t->nr; r++)
        if (strcmp(t->runs[r].id, id) == 0)
            return &t->runs[r];
    nv = flps_realloc(t->runs, (t->nr + 1) * sizeof(*t->runs));
    if (nv == NULL)
        return NULL;
    t->runs = nv;
    nv = &t->runs[t->nr];
    memset(nv, 0, sizeof(*nv));
    snprintf(nv->id, sizeof(nv->id), "%s", id);
    nv->attempt = attempt;
    nv->held = flps_calloc(t->nn + 1, sizeof(sched_res));
    if (nv->held == NULL)
        return NULL;
    t->nr++;
    return nv;
}

/* The nodes, their capacity and use, and what each running job holds on
 * each (from the tasks in the nodes' desired sets). */
static flps_err place_read_nodes(sched_loop *l, place_turn *t)
{
    flps_err rc = sched_store_nodes(l->st, &t->nodes, &t->nn);

    if (rc != FLPS_OK)
        return rc;
    t->pn = flps_calloc(t->nn + 1, sizeof(*t->pn));
    if (t->pn == NULL)
        return FLPS_ENOMEM;
    for (size_t i = 0; i < t->nn; i++) {
        const sched_node *nd = &t->nodes[i];

        t->pn[i].cap = nd->cap;
        t->pn[i].used = nd->used;
        t->pn[i].ready = nd->alive && strcmp(nd->state, "READY") == 0;
        t->pn[i].rdma = nd->rdma_ports > 0;
        for (size_t k = 0; k < nd->ntasks; k++) {
            char id[32];
            uint32_t attempt = 0;
            run_acc *run;

            if (!parse_task_key(nd->tasks[k], id, sizeof(id), &attempt))
                continue;
            run = place_run(t, id, attempt);
            if (run == NULL)
                return FLPS_ENOMEM;
            run->held[i].mcpus += nd->task_need[k].mcpus;
            run->held[i].memory += nd->task_need[k].memory;
            run->held[i].gpus += nd->task_need[k].gpus;
        }
    }
    return FLPS_OK;
}

/* The running jobs: when each ends (its time_limit), failing those past
 * it (no restart: the limit would hit again), and planning the others. */
static flps_err place_running(sched_loop *l, place_turn *t, double now)
{
    t->pr = flps_calloc(t->nr + 1, sizeof(*t->pr));
    if (t->pr == NULL)
        return FLPS_ENOMEM;
    for (size_t r = 0; r < t->nr; r++) {
        sched_job job;
        int found = 0;
        flps_err rc;

        t->pr[r].held = t->runs[r].held;
        rc = sched_store_job(l->st, t->runs[r].id, 0, &job, &found);
        if (rc != FLPS_OK)
            return rc;
        if (!found)
            continue;
        if (job.state == SCHED_RUNNING && job.time_limit > 0 &&
            job.started_at > 0)
            t->pr[r].end = job.started_at + job.time_limit;
        if (job.state == SCHED_RUNNING && t->pr[r].end > 0 &&
            now > t->pr[r].end) {
            char reason[128];

            snprintf(reason, sizeof(reason), "time limit of %g s exceeded",
                     job.time_limit);
            loop_fail(l, job.id, job.attempt, reason, 0, now);
        } else if (job.state == SCHED_RUNNING) {
            loop_plan(l, &job, now);
        }
        sched_job_fini(&job);
    }
    return FLPS_OK;
}

/* The queue, what each job needs, and the order placement takes them in,
 * with room for each decision's nodes. */
static flps_err place_read_queue(sched_loop *l, place_turn *t)
{
    size_t nq;
    flps_err rc = sched_store_queue(l->st, &t->queue, &t->nq);

    if (rc != FLPS_OK)
        return rc;
    nq = t->nq;
    t->pq = flps_calloc(nq + 1, sizeof(*t->pq));
    t->order = flps_calloc(nq + 1, sizeof(*t->order));
    t->ordered = flps_calloc(nq + 1, sizeof(*t->ordered));
    t->dec = flps_calloc(nq + 1, sizeof(*t->dec));
    t->slots = flps_calloc(2 * nq + 1, sizeof(*t->slots));
    if (!t->pq || !t->order || !t->ordered || !t->dec || !t->slots)
        return FLPS_ENOMEM;
    for (size_t j = 0; j < nq; j++) {
        const sched_job *q = &t->queue[j];
        job_settings js;

        job_settings_of(q, &js);
        t->pq[j].servers = q->servers;
        t->pq[j].workers = q->workers;
        t->pq[j].per_server = q->per_server;
        t->pq[j].per_worker = q->per_worker;
        t->pq[j].time_limit = q->time_limit;
        t->pq[j].priority = q->priority;
        t->pq[j].seq = q->seq;
        t->pq[j].need_rdma = js.transport == JOBSPEC_TRANSPORT_RDMA;
        t->pq[j].beside = js.beside;
    }
    sched_place_order(t->pq, nq, t->order);
    for (size_t j = 0; j < nq; j++) {
        sched_pjob *o = &t->ordered[j];

        *o = t->pq[t->order[j]];
        t->slots[t->nslots] = flps_calloc(o->servers + 1, sizeof(uint32_t));
        t->dec[j].server_node = t->slots[t->nslots++];
        t->slots[t->nslots] = flps_calloc(o->workers + 1, sizeof(uint32_t));
        t->dec[j].worker_node = t->slots[t->nslots++];
        if (t->dec[j].server_node == NULL || t->dec[j].worker_node == NULL)
            return FLPS_ENOMEM;
    }
    return FLPS_OK;
}

/* The log line of a committed placement: where each task went. */
static void log_placed(const sched_job *job, const sched_pdecision *d,
                       const sched_node *nodes)
{
    flps_strbuf where = FLPS_STRBUF_INIT;

    for (uint32_t k = 0; k < job->servers + job->workers; k++) {
        int srv = k < job->servers;
        uint32_t idx = srv ? k : k - job->servers;
        uint32_t nd = srv ? d->server_node[idx] : d->worker_node[idx];

        flps_strbuf_printf(&where, "%s%s-%u on %s", k ? ", " : "",
                           srv ? "server" : "worker", idx,
                           nodes != NULL ? nodes[nd].name : "the cluster");
    }
    /* Without memory for the list the line still says it placed. */
    log_info("job %s placed%s (attempt %u): %s", job->id,
             d->how == SCHED_PLACE_BACKFILL ? " by backfill" : "", job->attempt,
             flps_strbuf_error(&where) == FLPS_OK && where.data ? where.data
                                                                : "");
    flps_strbuf_fini(&where);
}

/* Commit decision d for job: its transport, then the placement in one
 * script; counted and logged when it committed. */
static flps_err place_commit(sched_loop *l, const place_turn *t, sched_job *job,
                             const sched_pdecision *d, double now)
{
    const char **sn, **wn;
    char twhy[256];
    int committed = 0;
    flps_err rc;

    choose_transport(job, t->nn ? t->nodes : NULL, d, twhy, sizeof(twhy));
    sn = flps_calloc(job->servers + 1, sizeof(*sn));
    wn = flps_calloc(job->workers + 1, sizeof(*wn));
    if (sn == NULL || wn == NULL) {
        flps_free(sn);
        flps_free(wn);
        return FLPS_ENOMEM;
    }
    /* Admitted to a cluster that places the pods: no node yet. */
    for (uint32_t s = 0; s < job->servers; s++)
        sn[s] = t->nn ? t->nodes[d->server_node[s]].name : "";
    for (uint32_t w = 0; w < job->workers; w++)
        wn[w] = t->nn ? t->nodes[d->worker_node[w]].name : "";
    rc = sched_store_place(l->st, l->id, job, sn, wn, now, &committed);
    flps_free(sn);
    flps_free(wn);
    if (rc != FLPS_OK)
        return rc;
    if (!committed) {
        log_info("job %s changed or leadership moved while placing it; "
                 "the next turn looks again",
                 job->id);
        return FLPS_OK;
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
    if (d->how == SCHED_PLACE_BACKFILL)
        atomic_fetch_add(&l->stats.backfills, 1);
    log_placed(job, d, t->nn ? t->nodes : NULL);
    if (launch_admitted(l->launcher, l->st, job->id) != FLPS_OK) {
        /* The next turn's sweep adopts it. */
        log_warn("job %s: cannot hand it to the %s launcher: %s", job->id,
                 launch_name(l->launcher), sched_store_error(l->st));
        l->need_sweep = 1;
    }
    return FLPS_OK;
}

/* A launcher whose cluster places (kubernetes): the jobs it runs get
 * their time limits and plans, and every queued job is admitted in queue
 * order (priority, then submission) as it is; a job whose pods cannot be
 * placed waits in the cluster, not at the head of flsched's queue. */
static flps_err loop_admit(sched_loop *l, double now)
{
    place_turn t;
    char **ids = NULL;
    size_t n = 0;
    flps_err rc;

    memset(&t, 0, sizeof(t));
    rc = launch_running(l->launcher, l->st, &ids, &n);
    for (size_t i = 0; rc == FLPS_OK && i < n; i++)
        if (place_run(&t, ids[i], 0) == NULL)
            rc = FLPS_ENOMEM;
    sched_strv_free(ids, n);
    if (rc == FLPS_OK)
        rc = place_running(l, &t, now);
    if (rc == FLPS_OK)
        rc = place_read_queue(l, &t);
    for (size_t j = 0; rc == FLPS_OK && j < t.nq; j++) {
        t.dec[j].how = SCHED_PLACE_IN_ORDER;
        rc = place_commit(l, &t, &t.queue[t.order[j]], &t.dec[j], now);
    }
    if (rc == FLPS_ENOMEM)
        log_error("admission: out of memory");
    place_turn_fini(&t);
    return rc;
}

/* One turn of placement: nodes and their use, running jobs and when they
 * end, the queue in order; place what the rules allow. Running jobs past
 * their time_limit fail here too. */
static flps_err loop_place(sched_loop *l, double now)
{
    place_turn t;
    sched_preserve res;
    flps_err rc;

    memset(&t, 0, sizeof(t));
    rc = place_read_nodes(l, &t);
    if (rc == FLPS_OK)
        rc = place_running(l, &t, now);
    if (rc == FLPS_OK)
        rc = place_read_queue(l, &t);
    if (rc == FLPS_OK)
        rc = sched_place_queue(t.pn, t.nn, t.pr, t.nr, t.ordered, t.nq, now,
                               t.dec, &res);
    for (size_t j = 0; rc == FLPS_OK && j < t.nq; j++)
        if (t.dec[j].how != SCHED_PLACE_NO)
            rc = place_commit(l, &t, &t.queue[t.order[j]], &t.dec[j], now);
    if (rc == FLPS_ENOMEM)
        log_error("placement: out of memory");
    place_turn_fini(&t);
    return rc;
}

flps_err sched_loop_step(sched_loop *l, double now, double mono)
{
    char key[256];
    double t0 = flps_mono_s();
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
    rc = loop_nodes(l, now, mono, t0);
    if (rc != FLPS_OK)
        goto fail;
    rc = launch_places(l->launcher) ? loop_place(l, now) : loop_admit(l, now);
    if (rc == FLPS_OK)
        rc = launch_turn(l->launcher, l->st, l->id, now);
    if (rc != FLPS_OK)
        goto fail;
    if (flps_mono_s() - t0 >= LOOP_STALL_S)
        store_away(l, mono, t0);
    repeat_ok(&l->turn_fail);
    return FLPS_OK;
fail:
    if (rc == FLPS_EIO || rc == FLPS_ETIMEDOUT)
        store_away(l, mono, t0);
    repeat_fail(&l->turn_fail, mono, FLPS_LOG_ERROR,
                rc == FLPS_ENOMEM ? "out of memory" : sched_store_error(l->st));
    return rc;
}
