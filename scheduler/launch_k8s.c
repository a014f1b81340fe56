/* The kubernetes launcher's turn: create an admitted attempt's objects,
 * follow its pods into the task hashes, delete the objects of an attempt
 * that ended (launch_k8s.h). */
#include "scheduler/launch_k8s.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "scheduler/agent_task.h"
#include "scheduler/launch_k8s_int.h"
#include "scheduler/sched_launch_store.h"
#include "scheduler/sched_report.h"
#include "services/jobspec.h"

#define LOG_INTERVAL_S_DEFAULT 2.0
#define PULL_GRACE_S_DEFAULT 120.0
/* The end of a pod's log kept for its error line. */
#define TAIL_MAX 4096

/* What the turn remembers of one pod between turns (rebuilt from Redis
 * and the API after a restart: only the pace of work lives here). */
typedef struct pod_mem {
    char key[160];    /* its task's key */
    char name[128];   /* the pod's name (a JobSet's has a random end) */
    char log_ts[40];  /* the last log line stored: its time, 9 decimals */
    int have_ts;      /* log_ts read from the task hash (or set) */
    double next_poll; /* mono time of the next read of its log */
    char tail[TAIL_MAX];
    size_t tail_len;
    k8s_pod_problem told; /* the problem last made an event */
    double pull_since;    /* mono time its image pull started failing */
    int seen;             /* a turn found it */
} pod_mem;

/* What one job's attempt waits on, remembered to clear it later. */
typedef struct job_mem {
    char id[64];
    char waiting[512]; /* the reason this launcher set, "" if none */
    int older_logged;
    int seen;
} job_mem;

typedef struct k8s_launcher {
    k8s_api *api; /* the loop's client */
    k8s_cache cache;
    k8s_settings set;
    /* Owned copies of what set points to. */
    char prefix[K8S_PREFIX_MAX + 1], image[256], pull[32], url[512], claim[254],
        account[254];
    double log_interval, pull_grace;
    pod_mem *pods;
    size_t npods, podcap;
    job_mem *jobs;
    size_t njobs, jobcap;
} k8s_launcher;

/* ---- Memory of pods and jobs ---- */

/* The memory of task t's pod, made when new; pod is its name. */
static pod_mem *pod_of(k8s_launcher *k, const sched_task *t, const char *pod)
{
    pod_mem *m = NULL;

    for (size_t i = 0; i < k->npods && m == NULL; i++)
        if (strcmp(k->pods[i].key, t->key) == 0)
            m = &k->pods[i];
    if (m == NULL) {
        m = k8s_push(&k->pods, &k->npods, &k->podcap, sizeof(*m));
        if (m == NULL)
            return NULL;
        snprintf(m->key, sizeof(m->key), "%s", t->key);
    }
    snprintf(m->name, sizeof(m->name), "%s", pod);
    return m;
}

static job_mem *job_of(k8s_launcher *k, const char *id)
{
    job_mem *m;

    for (size_t i = 0; i < k->njobs; i++)
        if (strcmp(k->jobs[i].id, id) == 0)
            return &k->jobs[i];
    m = k8s_push(&k->jobs, &k->njobs, &k->jobcap, sizeof(*m));
    if (m != NULL)
        snprintf(m->id, sizeof(m->id), "%s", id);
    return m;
}

/* Forget what no turn looked at: jobs that left the launched set. */
static void forget_unseen(k8s_launcher *k)
{
    size_t w = 0;

    for (size_t i = 0; i < k->njobs; i++)
        if (k->jobs[i].seen) {
            k->jobs[i].seen = 0;
            k->jobs[w++] = k->jobs[i];
        }
    k->njobs = w;
    w = 0;
    for (size_t i = 0; i < k->npods; i++)
        if (k->pods[i].seen) {
            k->pods[i].seen = 0;
            k->pods[w++] = k->pods[i];
        }
    k->npods = w;
}

/* ---- Logs ---- */

/* An RFC 3339 time with its fraction padded to 9 digits, so two compare
 * as strings ("2025-01-02T03:04:05.100000000Z"). 0 when it is not one. */
static int fixed_ts(const char *s, size_t n, char out[40])
{
    size_t whole = 19, frac = 0;

    if (n < 20 || s[4] != '-' || s[10] != 'T' || s[n - 1] != 'Z')
        return 0;
    memcpy(out, s, whole);
    out[whole] = '.';
    if (s[whole] == '.')
        for (frac = 0; frac < 9 && whole + 1 + frac < n - 1; frac++)
            out[whole + 1 + frac] = s[whole + 1 + frac];
    for (; frac < 9; frac++)
        out[whole + 1 + frac] = '0';
    out[whole + 10] = 'Z';
    out[whole + 11] = '\0';
    return 1;
}

static void keep_tail(pod_mem *m, const char *line, size_t n)
{
    if (n + 1 > TAIL_MAX) {
        line += n - (TAIL_MAX - 1);
        n = TAIL_MAX - 1;
    }
    if (m->tail_len + n + 1 > TAIL_MAX) {
        size_t drop = m->tail_len + n + 1 - TAIL_MAX;

        memmove(m->tail, m->tail + drop, m->tail_len - drop);
        m->tail_len -= drop;
    }
    memcpy(m->tail + m->tail_len, line, n);
    m->tail_len += n;
    m->tail[m->tail_len++] = '\n';
}

/* Read the pod's log since the last line stored and append the new lines
 * to the job's log stream under the task's name (as flagent does with its
 * processes' lines). */
static flps_err copy_logs(k8s_launcher *k, sched_store *st, const sched_task *t,
                          pod_mem *m)
{
    char since[32] = "", ts[40] = "", last[40];
    const char **lines = NULL;
    size_t nlines = 0, cap = 0;
    k8s_reply r;
    flps_err rc;

    if (!m->have_ts) { /* a new leader continues where the last stopped */
        rc = sched_store_task_get(st, t->key, "log_ts", m->log_ts,
                                  sizeof(m->log_ts));
        if (rc != FLPS_OK)
            return rc;
        m->have_ts = 1;
    }
    if (m->log_ts[0] != '\0')
        snprintf(since, sizeof(since), "%.19sZ", m->log_ts);
    rc = k8s_api_pod_log(k->api, m->name, since[0] ? since : NULL, &r);
    if (rc != FLPS_OK || r.status != 200) {
        if (rc == FLPS_OK && r.status != 400)
            log_debug("kubernetes: the log of pod %s: %s", m->name,
                      k8s_api_error(k->api));
        k8s_reply_fini(&r);
        return rc == FLPS_ENOMEM ? rc : FLPS_OK; /* read again next time */
    }
    snprintf(last, sizeof(last), "%s", m->log_ts);
    for (char *p = r.text; p != NULL && *p != '\0';) {
        char *nl = strchr(p, '\n');
        char *sp = strchr(p, ' ');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);

        if (nl != NULL)
            *nl = '\0';
        if (sp != NULL && (size_t)(sp - p) < n &&
            fixed_ts(p, (size_t)(sp - p), ts) &&
            (last[0] == '\0' || strcmp(ts, last) > 0)) {
            const char **slot = k8s_push(&lines, &nlines, &cap, sizeof(*lines));

            if (slot == NULL)
                break;
            *slot = sp + 1;
            keep_tail(m, sp + 1, strlen(sp + 1));
            snprintf(last, sizeof(last), "%s", ts);
        }
        p = nl ? nl + 1 : NULL;
    }
    rc = sched_store_log_append(st, t->job, t->name, lines, nlines);
    if (rc == FLPS_OK && nlines > 0) {
        const char *fv[] = {"log_ts", last};

        snprintf(m->log_ts, sizeof(m->log_ts), "%s", last);
        rc = sched_store_task_set(st, t->key, fv, 1);
    }
    flps_free(lines);
    k8s_reply_fini(&r);
    return rc;
}

/* ---- Objects ---- */

static int resource_of_kind(const char *kind, k8s_resource *r)
{
    static const struct {
        const char *kind;
        k8s_resource r;
    } kinds[] = {{"Pod", K8S_PODS},
                 {"Service", K8S_SERVICES},
                 {"Secret", K8S_SECRETS},
                 {"JobSet", K8S_JOBSETS},
                 {"PodGroup", K8S_PODGROUPS}};

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(kind, kinds[i].kind) == 0) {
            *r = kinds[i].r;
            return 1;
        }
    }
    return 0;
}

/* The job's file, parsed (it was at submit). */
static int spec_of(const sched_job *job, jobspec *spec)
{
    return job->spec != NULL && jobspec_parse(job->spec, strlen(job->spec),
                                              spec, NULL, 0) == FLPS_OK;
}

/* Fail the job's attempt for a reason no restart would change. */
static void fail_job(sched_store *st, const sched_job *job, const char *reason,
                     double now)
{
    sched_fail_result res = SCHED_FAIL_IGNORED;

    if (sched_store_fail(st, job->id, job->attempt, reason, 0, now, &res) !=
        FLPS_OK)
        log_error("job %s: cannot record the failure '%s': %s", job->id, reason,
                  sched_store_error(st));
    else if (res != SCHED_FAIL_IGNORED)
        log_info("job %s failed: %s", job->id, reason);
}

/* Create every object of the job's current attempt. A create answered
 * 409 is one a previous turn (or leader) made. FLPS_EIO: try again next
 * turn; a refusal of the cluster fails the job. */
static flps_err create_attempt(k8s_launcher *k, sched_store *st,
                               const sched_job *job, double now)
{
    char token[SCHED_REPORT_TOKEN_LEN + 1] = "", reason[768], set[96];
    char *creds = NULL;
    json_t *all = NULL, *o;
    jobspec *spec = flps_malloc(sizeof(*spec));
    k8s_job kj;
    size_t i;
    flps_err rc;

    if (spec == NULL)
        return FLPS_ENOMEM;
    if (!spec_of(job, spec)) {
        fail_job(st, job, "its job file no longer parses", now);
        flps_free(spec);
        return FLPS_OK;
    }
    rc = sched_store_job_credentials(st, job->id, &creds);
    if (rc != FLPS_OK) {
        flps_free(spec);
        return rc;
    }
    if (creds != NULL)
        sched_report_token(creds, job->id, token);
    memset(&kj, 0, sizeof(kj));
    kj.id = job->id;
    kj.attempt = job->attempt;
    kj.spec = spec;
    kj.spec_text = job->spec;
    kj.credentials = creds;
    kj.report_token = token[0] ? token : NULL;
    kj.transport = job->transport_used;
    rc = k8s_manifest_all(&k->set, &kj, &all);
    if (creds != NULL) {
        explicit_bzero(creds, strlen(creds));
        flps_free(creds);
    }
    explicit_bzero(token, sizeof(token));
    if (rc == FLPS_EINVAL) {
        snprintf(reason, sizeof(reason),
                 "its objects cannot be named: %s-%s-%u is not a DNS label "
                 "short enough",
                 k->set.prefix, job->id, job->attempt);
        fail_job(st, job, reason, now);
        flps_free(spec);
        return FLPS_OK;
    }
    json_array_foreach(all, i, o)
    {
        const char *kind = json_string_value(json_object_get(o, "kind"));
        const char *name = json_string_value(
            json_object_get(json_object_get(o, "metadata"), "name"));
        k8s_resource res;
        k8s_reply r;

        if (rc != FLPS_OK || !resource_of_kind(kind, &res))
            continue;
        rc = k8s_api_create_object(k->api, res, o, &r);
        if (rc == FLPS_OK && r.status >= 400 && r.status != 409) {
            /* 5xx were retried already: a refusal (403, 422, 404 for a
             * CRD that went) the next turn would meet again. */
            snprintf(reason, sizeof(reason),
                     "the cluster refused its %s %s: %ld %s", kind, name,
                     r.status, k8s_reply_message(&r));
            rc = r.status >= 500 ? FLPS_EIO : FLPS_EREMOTE;
            if (rc == FLPS_EREMOTE)
                fail_job(st, job, reason, now);
        } else if (rc != FLPS_OK) {
            log_warn("job %s: %s", job->id, k8s_api_error(k->api));
        }
        k8s_reply_fini(&r);
    }
    if (rc == FLPS_OK) {
        char msg[1024];

        k8s_manifest_set_name(&k->set, job->id, job->attempt, set, sizeof(set));
        snprintf(msg, sizeof(msg),
                 "created on Kubernetes (namespace %s): %s %s, %u servers and "
                 "%u workers, image %s",
                 k8s_api_namespace(k->api),
                 k->set.jobset ? "JobSet" : "Pods of", set, job->servers,
                 job->workers, spec->image[0] ? spec->image : k->set.image);
        log_info("job %s: %s", job->id, msg);
        sched_store_event(st, job->id, now, "launched", msg);
    }
    json_decref(all);
    flps_free(spec);
    return rc == FLPS_EREMOTE ? FLPS_OK : rc;
}

/* Delete every object of attempt (404 counts as deleted); FLPS_OK once
 * all are gone or going. */
static flps_err delete_attempt(k8s_launcher *k, const sched_job *job,
                               uint32_t attempt)
{
    char set[96], name[128];
    jobspec *spec = flps_malloc(sizeof(*spec));
    int volcano = 0;
    flps_err rc = FLPS_OK;
    struct {
        k8s_resource r;
        char name[128];
    } del[2 + 2 + 2048];
    size_t n = 0;

    if (spec == NULL)
        return FLPS_ENOMEM;
    volcano =
        spec_of(job, spec) && strcmp(spec->scheduler_name, "volcano") == 0;
    flps_free(spec);
    if (k8s_manifest_set_name(&k->set, job->id, attempt, set, sizeof(set)) !=
        FLPS_OK)
        return FLPS_OK; /* nothing could have been made */
    if (k->set.jobset) {
        del[n].r = K8S_JOBSETS;
        snprintf(del[n++].name, sizeof(del[0].name), "%s", set);
    } else {
        for (int server = 1; server >= 0; server--)
            for (uint32_t i = 0; i < (server ? job->servers : job->workers) &&
                                 n + 4 < sizeof(del) / sizeof(del[0]);
                 i++) {
                del[n].r = K8S_PODS;
                k8s_manifest_pod_name(set, server, i, del[n++].name,
                                      sizeof(del[0].name));
            }
        del[n].r = K8S_SERVICES;
        snprintf(del[n++].name, sizeof(del[0].name), "%s", set);
    }
    if (volcano) {
        del[n].r = K8S_PODGROUPS;
        snprintf(del[n++].name, sizeof(del[0].name), "%s", set);
    }
    del[n].r = K8S_SECRETS;
    snprintf(name, sizeof(name), "%s-job", set);
    snprintf(del[n++].name, sizeof(del[0].name), "%s", name);
    for (size_t i = 0; i < n; i++) {
        k8s_reply r;
        /* Background: the JobSet goes at once, its Jobs and pods after
         * it (each pod with its grace period for a last checkpoint). */
        flps_err e =
            k8s_api_delete(k->api, del[i].r, del[i].name, "Background", &r);

        if (e != FLPS_OK || (r.status >= 400 && r.status != 404)) {
            log_warn("job %s: cannot delete %s %s: %s", job->id,
                     k8s_resource_name(del[i].r), del[i].name,
                     k8s_api_error(k->api));
            rc = FLPS_EIO;
        }
        k8s_reply_fini(&r);
    }
    if (rc == FLPS_OK)
        log_info("job %s: attempt %u's objects deleted (%s%s)", job->id,
                 attempt, k->set.jobset ? "JobSet " : "pods, Service ", set);
    return rc;
}

/* ---- Following the pods ---- */

/* Task t's pod, by its labels (and a JobSet pod's completion index): a
 * pod a JobSet's Job made has a name of its own. */
static const k8s_pod_view *find_pod(const k8s_pod_view *pods, size_t n,
                                    const sched_task *t)
{
    int server = strcmp(t->role, "server") == 0;

    for (size_t i = 0; i < n; i++)
        if (strcmp(pods[i].job, t->job) == 0 && pods[i].attempt == t->attempt &&
            pods[i].server == server && pods[i].have_index &&
            pods[i].index == t->index)
            return &pods[i];
    return NULL;
}

/* Whether a pod of an older attempt of job id is still there. */
static int older_pods(const k8s_pod_view *pods, size_t n, const char *id,
                      uint32_t attempt)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(pods[i].job, id) == 0 && pods[i].attempt < attempt)
            return 1;
    return 0;
}

static const char *state_name(k8s_pod_state s)
{
    return s == K8S_POD_RUNNING  ? "RUNNING"
           : s == K8S_POD_EXITED ? "EXITED"
                                 : "PENDING";
}

/* Write what the pod says into the task hash when it changed: state,
 * node, the shard's address, where its /metrics are, when it started. */
static flps_err update_task(k8s_launcher *k, sched_store *st,
                            const sched_task *t, const jobspec *spec,
                            const char *set, const k8s_pod_view *v)
{
    const char *fv[10];
    char endpoint[200] = "", metrics[128] = "", started[48] = "";
    size_t n = 0;
    int server = strcmp(t->role, "server") == 0;

    if (v->state == K8S_POD_EXITED)
        return FLPS_OK; /* the exit writes it */
    if (strcmp(t->state, state_name(v->state)) != 0) {
        fv[2 * n] = "state";
        fv[2 * n++ + 1] = state_name(v->state);
    }
    if (strcmp(t->node, v->node) != 0) {
        fv[2 * n] = "node";
        fv[2 * n++ + 1] = v->node;
    }
    if (server && v->state == K8S_POD_RUNNING) {
        k8s_manifest_endpoint(&k->set, set, t->index, endpoint,
                              sizeof(endpoint));
        if (strcmp(t->endpoint, endpoint) != 0) {
            fv[2 * n] = "endpoint";
            fv[2 * n++ + 1] = endpoint;
        }
    }
    if (v->ip[0] != '\0' && (server || spec->command_argc == 0)) {
        snprintf(metrics, sizeof(metrics), "%s:%d", v->ip,
                 k8s_manifest_metrics_port(&k->set, spec, server, t->index));
        if (strcmp(t->metrics, metrics) != 0) {
            fv[2 * n] = "metrics";
            fv[2 * n++ + 1] = metrics;
        }
    }
    if (v->started_at > 0 && t->started_at == 0) {
        flps_format_double(started, sizeof(started), v->started_at);
        fv[2 * n] = "started_at";
        fv[2 * n++ + 1] = started;
    }
    return sched_store_task_set(st, t->key, fv, n);
}

/* The pod's container ended: its last lines, then the exit for the loop
 * (which restarts or fails the job, or counts a worker done). */
static flps_err report_exit(k8s_launcher *k, sched_store *st,
                            const sched_task *t, const k8s_pod_view *v,
                            pod_mem *m, double now)
{
    char error[400] = "";
    flps_err rc = copy_logs(k, st, t, m);

    if (rc != FLPS_OK)
        return rc;
    if (v->why[0] != '\0')
        snprintf(error, sizeof(error), "pod %.100s %.290s", v->name, v->why);
    else if (v->exit_code != 0 || v->signal != 0)
        agent_last_error_line(m->tail, m->tail_len, error, sizeof(error));
    log_info("job %s: pod %s ended (exit code %d, signal %d)%s%s", t->job,
             v->name, v->exit_code, v->signal, error[0] ? ": " : "", error);
    return sched_store_task_exit(st, t->key, v->exit_code, v->signal,
                                 v->finished_at > 0 ? v->finished_at : now,
                                 error);
}

/* A problem newly seen on the pod becomes an event of the job, once. */
static void tell_problem(sched_store *st, const sched_task *t,
                         const k8s_pod_view *v, pod_mem *m, double now)
{
    char msg[600];

    if (v->problem == m->told)
        return;
    m->told = v->problem;
    if (v->problem == K8S_POD_OK)
        return;
    snprintf(msg, sizeof(msg), "%s (pod %s) %s", t->name, v->name, v->why);
    log_warn("job %s: %s", t->job, msg);
    sched_store_event(st, t->job, now, k8s_pod_problem_type(v->problem), msg);
}

/* One task of a running attempt against its pod. unsched receives the
 * first Unschedulable pod's words. 1 when the job was failed here. */
static int follow_task(k8s_launcher *k, sched_store *st, const sched_job *job,
                       const jobspec *spec, const char *set,
                       const sched_task *t, const k8s_pod_view *pods,
                       size_t npods, int synced, char *unsched, size_t ulen,
                       double now, double mono)
{
    char name[128], reason[600];
    const k8s_pod_view *v = find_pod(pods, npods, t);
    pod_mem *m;

    k8s_manifest_pod_name(set, strcmp(t->role, "server") == 0, t->index, name,
                          sizeof(name));
    m = pod_of(k, t, v != NULL ? v->name : name);
    if (m == NULL)
        return 0;
    m->seen = 1;
    if (strcmp(t->state, "EXITED") == 0)
        return 0;
    if (v == NULL) {
        /* Seen once (no longer ASSIGNED) and gone from a synced cache:
         * someone deleted it. */
        if (synced && strcmp(t->state, "ASSIGNED") != 0)
            sched_store_task_exit(st, t->key, -1, 0, now,
                                  "its pod was deleted");
        return 0;
    }
    update_task(k, st, t, spec, set, v);
    tell_problem(st, t, v, m, now);
    if (v->problem == K8S_POD_UNSCHEDULABLE && unsched[0] == '\0')
        snprintf(unsched, ulen, "%.23s: %.360s", t->name, v->why);
    if (v->problem == K8S_POD_IMAGE_PULL && m->pull_since == 0)
        m->pull_since = mono;
    if (v->problem != K8S_POD_IMAGE_PULL)
        m->pull_since = 0;
    if (v->problem == K8S_POD_CANNOT_START ||
        (v->problem == K8S_POD_IMAGE_PULL &&
         mono - m->pull_since >= k->pull_grace)) {
        snprintf(reason, sizeof(reason), "%s (pod %s) %s", t->name, v->name,
                 v->why);
        fail_job(st, job, reason, now);
        return 1;
    }
    if (v->state == K8S_POD_EXITED) {
        report_exit(k, st, t, v, m, now);
        return 0;
    }
    if (v->state == K8S_POD_RUNNING && mono >= m->next_poll) {
        m->next_poll = mono + k->log_interval;
        copy_logs(k, st, t, m);
    }
    return 0;
}

/* The job's reason while its pods wait for the cluster, and back to ""
 * once they are placed. */
static void set_waiting(sched_store *st, const sched_job *job, job_mem *jm,
                        const char *unsched, double now)
{
    char text[512];
    int changed = 0;

    if (unsched[0] != '\0') {
        snprintf(text, sizeof(text),
                 "waiting for the cluster: its pods cannot be scheduled: %s",
                 unsched);
        if (strcmp(text, jm->waiting) == 0)
            return;
        if (sched_store_job_waiting(st, job->id, job->attempt, text, NULL,
                                    &changed) == FLPS_OK)
            snprintf(jm->waiting, sizeof(jm->waiting), "%s", text);
        (void)now;
        return;
    }
    if (jm->waiting[0] == '\0')
        return;
    if (sched_store_job_waiting(st, job->id, job->attempt, NULL, jm->waiting,
                                &changed) == FLPS_OK) {
        if (changed)
            log_info("job %s: its pods are scheduled", job->id);
        jm->waiting[0] = '\0';
    }
}

static void follow_attempt(k8s_launcher *k, sched_store *st,
                           const sched_job *job, job_mem *jm,
                           const k8s_pod_view *pods, size_t npods, int synced,
                           double now)
{
    char set[96], unsched[400] = "";
    double mono = flps_mono_s();
    jobspec *spec = flps_malloc(sizeof(*spec));

    if (spec == NULL || !spec_of(job, spec) ||
        k8s_manifest_set_name(&k->set, job->id, job->attempt, set,
                              sizeof(set)) != FLPS_OK) {
        flps_free(spec);
        return;
    }
    for (size_t i = 0; i < job->ntasks; i++)
        if (follow_task(k, st, job, spec, set, &job->tasks[i], pods, npods,
                        synced, unsched, sizeof(unsched), now, mono))
            break;
    set_waiting(st, job, jm, unsched, now);
    flps_free(spec);
}

/* The last lines of every pod of an attempt that ended, before its pods
 * are deleted. */
static void final_logs(k8s_launcher *k, sched_store *st, const sched_job *job,
                       const k8s_pod_view *pods, size_t npods)
{
    for (size_t i = 0; i < job->ntasks; i++) {
        const sched_task *t = &job->tasks[i];
        const k8s_pod_view *v = find_pod(pods, npods, t);
        pod_mem *m = v != NULL ? pod_of(k, t, v->name) : NULL;

        if (m != NULL) {
            m->seen = 1;
            copy_logs(k, st, t, m);
        }
    }
}

/* One job of the launched set. */
static flps_err job_turn(k8s_launcher *k, sched_store *st, const char *id,
                         const k8s_pod_view *pods, size_t npods, int synced,
                         double now)
{
    sched_job job;
    job_mem *jm = job_of(k, id);
    long launched = -1;
    int found = 0, running;
    flps_err rc = sched_store_job(st, id, 1, &job, &found);

    if (rc != FLPS_OK)
        return rc;
    if (!found)
        return sched_store_launched_remove(st, id);
    if (jm != NULL)
        jm->seen = 1;
    rc = sched_store_launched_attempt(st, id, &launched);
    if (rc != FLPS_OK)
        goto out;
    running = job.state == SCHED_RUNNING;
    if (launched >= 0 && (!running || (uint32_t)launched != job.attempt)) {
        /* The attempt ended (done, failed, cancelled, restarting). */
        if ((uint32_t)launched == job.attempt)
            final_logs(k, st, &job, pods, npods);
        if (delete_attempt(k, &job, (uint32_t)launched) != FLPS_OK)
            goto out; /* again next turn */
        rc = sched_store_launched_set_attempt(st, id, -1);
        if (rc != FLPS_OK)
            goto out;
        launched = -1;
    }
    if (!running) {
        /* A restart is admitted again from the queue (and added again). */
        rc = sched_store_launched_remove(st, id);
        goto out;
    }
    if (launched < 0) {
        /* The old attempt's shards write their last checkpoint as they
         * stop: the new ones restore from it only once they are gone. */
        if (older_pods(pods, npods, id, job.attempt) || !synced) {
            if (jm != NULL && !jm->older_logged)
                log_info("job %s: waiting for the pods of its earlier "
                         "attempt to go",
                         id);
            if (jm != NULL)
                jm->older_logged = 1;
            goto out;
        }
        rc = create_attempt(k, st, &job, now);
        if (rc == FLPS_OK)
            rc = sched_store_launched_set_attempt(st, id, job.attempt);
        goto out;
    }
    if (jm != NULL)
        follow_attempt(k, st, &job, jm, pods, npods, synced, now);
out:
    sched_job_fini(&job);
    return rc;
}

static flps_err k8s_turn(void *impl, sched_store *st, const char *leader_id,
                         double now)
{
    k8s_launcher *k = impl;
    k8s_pod_view *pods = NULL;
    size_t npods = 0, n = 0;
    char **ids = NULL;
    int synced = 0;
    flps_err rc = k8s_cache_snapshot(&k->cache, &pods, &npods, &synced);

    (void)leader_id;
    if (rc == FLPS_OK)
        rc = sched_store_launched(st, &ids, &n);
    for (size_t i = 0; rc == FLPS_OK && i < n; i++)
        rc = job_turn(k, st, ids[i], pods, npods, synced, now);
    if (rc == FLPS_OK)
        forget_unseen(k);
    sched_strv_free(ids, n);
    flps_free(pods);
    return rc;
}

static flps_err k8s_admitted(void *impl, sched_store *st, const char *id)
{
    (void)impl;
    return sched_store_launched_add(st, id);
}

static flps_err k8s_sweep(void *impl, sched_store *st, const sched_job *jobs,
                          size_t n)
{
    (void)impl;
    for (size_t i = 0; i < n; i++) {
        flps_err rc;

        if (jobs[i].state != SCHED_RUNNING)
            continue;
        rc = sched_store_launched_add(st, jobs[i].id);
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

static flps_err k8s_running(void *impl, sched_store *st, char ***ids, size_t *n)
{
    (void)impl;
    return sched_store_launched(st, ids, n);
}

static void k8s_destroy(void *impl)
{
    k8s_launcher *k = impl;

    if (k == NULL)
        return;
    k8s_cache_stop(&k->cache);
    k8s_api_destroy(k->api);
    flps_free(k->pods);
    flps_free(k->jobs);
    flps_free(k);
}

static const launch_ops k8s_ops = {
    .name = "kubernetes",
    .places = 0,
    .turn = k8s_turn,
    .admitted = k8s_admitted,
    .sweep = k8s_sweep,
    .running = k8s_running,
    .destroy = k8s_destroy,
};

/* Copy the settings' strings into k, pointing set at them. */
static flps_err copy_settings(k8s_launcher *k, const k8s_settings *s)
{
    struct {
        const char *from;
        char *to;
        size_t len;
        const char **at;
    } f[] = {
        {s->prefix, k->prefix, sizeof(k->prefix), &k->set.prefix},
        {s->image, k->image, sizeof(k->image), &k->set.image},
        {s->pull_policy, k->pull, sizeof(k->pull), &k->set.pull_policy},
        {s->scheduler_url, k->url, sizeof(k->url), &k->set.scheduler_url},
        {s->checkpoint_claim, k->claim, sizeof(k->claim),
         &k->set.checkpoint_claim},
        {s->service_account, k->account, sizeof(k->account),
         &k->set.service_account},
    };

    k->set = *s;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        const char *v = f[i].from != NULL ? f[i].from : "";

        if (strlen(v) >= f[i].len)
            return FLPS_EINVAL;
        snprintf(f[i].to, f[i].len, "%s", v);
        *f[i].at = f[i].to;
    }
    return FLPS_OK;
}

/* JobSet or Pods: the CRD's discovery, against what was asked. */
static flps_err choose_shape(k8s_launcher *k, launch_k8s_jobset want, char *err,
                             size_t errlen)
{
    int has = 0;

    if (want == LAUNCH_K8S_JOBSET_NEVER) {
        k->set.jobset = 0;
        return FLPS_OK;
    }
    if (k8s_api_has_group(k->api, k8s_resource_group(K8S_JOBSETS),
                          k8s_resource_version(K8S_JOBSETS), &has) != FLPS_OK)
        return flps_errbuf_set(err, errlen, FLPS_EIO,
                               "cannot ask the Kubernetes API whether JobSet "
                               "is installed: %s",
                               k8s_api_error(k->api));
    if (!has && want == LAUNCH_K8S_JOBSET_ALWAYS)
        return flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                               "--k8s-jobset always, but the API serves no "
                               "jobset.x-k8s.io/v1alpha2: install JobSet or "
                               "use auto");
    k->set.jobset = has;
    return FLPS_OK;
}

flps_err launch_k8s_create(const launch_k8s_cfg *cfg, launch **out, char *err,
                           size_t errlen)
{
    k8s_launcher *k = flps_calloc(1, sizeof(*k));
    char selector[200];
    json_t *info;
    flps_err rc;

    if (k == NULL)
        return FLPS_ENOMEM;
    if (cfg->set.prefix == NULL || strlen(cfg->set.prefix) > K8S_PREFIX_MAX ||
        copy_settings(k, &cfg->set) != FLPS_OK) {
        flps_free(k);
        return flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                               "--k8s-prefix must be 1 to %d of a-z 0-9 -",
                               K8S_PREFIX_MAX);
    }
    k->log_interval =
        cfg->log_interval_s > 0 ? cfg->log_interval_s : LOG_INTERVAL_S_DEFAULT;
    k->pull_grace = cfg->image_pull_grace_s > 0 ? cfg->image_pull_grace_s
                                                : PULL_GRACE_S_DEFAULT;
    rc = k8s_api_create(&cfg->api, &k->api, err, errlen);
    if (rc == FLPS_OK)
        rc = choose_shape(k, cfg->jobset, err, errlen);
    snprintf(selector, sizeof(selector), "%s=flsched,%s=%s", K8S_LABEL_MANAGED,
             K8S_LABEL_INSTANCE, k->prefix);
    if (rc == FLPS_OK)
        rc = k8s_cache_start(&k->cache, &cfg->api, selector, err, errlen);
    if (rc != FLPS_OK) {
        k8s_destroy(k);
        return rc;
    }
    if (k->url[0] == '\0')
        log_warn("kubernetes launcher: no --k8s-scheduler-url, so the pods "
                 "cannot report their workers' progress and done events "
                 "(the jobs run; their summaries lack the workers' numbers)");
    log_info("kubernetes launcher: namespace %s, %s per job, image %s",
             k8s_api_namespace(k->api),
             k->set.jobset ? "a JobSet (the JobSet CRD is installed)"
                           : "Pods and a headless Service (no JobSet CRD)",
             k->set.image);
    info =
        json_pack("{s:s,s:s,s:b,s:s,s:s}", "kind", "kubernetes", "namespace",
                  k8s_api_namespace(k->api), "jobset", k->set.jobset, "objects",
                  k->set.jobset ? "JobSet" : "Pods and a headless Service",
                  "image", k->set.image);
    return launch_create(&k8s_ops, k, info, out);
}
