/* POST /v1/jobs/{id}/report: a job's pods report their workers' events
 * (sched_report.h). */
#include "scheduler/sched_report.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "proto/creds.h"
#include "scheduler/agent_task.h"
#include "scheduler/sched_launch_store.h"
#include "scheduler/sched_store_int.h"

flps_err sched_report_token(const char *credentials, const char *id,
                            char out[SCHED_REPORT_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    char msg[128];
    flps_creds c;
    int n;

    if (credentials == NULL || id == NULL || out == NULL)
        return FLPS_EINVAL;
    if (creds_parse(credentials, strlen(credentials), &c, NULL, 0) != FLPS_OK)
        return FLPS_ECONFIG;
    n = snprintf(msg, sizeof(msg), "flps-report:%s", id);
    if (n < 0 || (size_t)n >= sizeof(msg) ||
        HMAC(EVP_sha256(), c.secret, (int)strlen(c.secret),
             (const unsigned char *)msg, (size_t)n, mac, &maclen) == NULL ||
        maclen * 2 < SCHED_REPORT_TOKEN_LEN) {
        creds_wipe(&c);
        return FLPS_ECONFIG;
    }
    creds_wipe(&c);
    for (unsigned i = 0; i < SCHED_REPORT_TOKEN_LEN / 2; i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 15];
    }
    out[SCHED_REPORT_TOKEN_LEN] = '\0';
    explicit_bzero(mac, sizeof(mac));
    return FLPS_OK;
}

/* "worker-3" / "server-0" into role and index. */
static int parse_task(const char *task, int *server, unsigned long *index)
{
    const char *digits;
    char *end = NULL;

    if (strncmp(task, "worker-", 7) == 0) {
        *server = 0;
        digits = task + 7;
    } else if (strncmp(task, "server-", 7) == 0) {
        *server = 1;
        digits = task + 7;
    } else {
        return 0;
    }
    if (*digits < '0' || *digits > '9' || strlen(digits) > 6)
        return 0;
    *index = strtoul(digits, &end, 10);
    return *end == '\0';
}

/* Whether the request's bearer token is the job's (constant time). */
static int token_matches(const char *authorization, const char *want)
{
    unsigned char diff = 0;
    size_t n;

    if (authorization == NULL || strncmp(authorization, "Bearer ", 7) != 0)
        return 0;
    authorization += 7;
    n = strlen(authorization);
    for (size_t i = 0; i < SCHED_REPORT_TOKEN_LEN; i++)
        diff |= (unsigned char)(want[i] ^ (i < n ? authorization[i] : 0));
    return diff == 0 && n == SCHED_REPORT_TOKEN_LEN;
}

/* 1 when the bearer token is job id's; 0 with *status/msg set. */
static flps_err check_token(sched_store *st, const char *id,
                            const char *authorization, int *ok, int *status,
                            char *msg, size_t msglen)
{
    char want[SCHED_REPORT_TOKEN_LEN + 1];
    char *creds = NULL;
    flps_err rc = sched_store_job_credentials(st, id, &creds);

    *ok = 0;
    if (rc != FLPS_OK)
        return rc;
    if (creds == NULL || sched_report_token(creds, id, want) != FLPS_OK) {
        *status = 403;
        snprintf(msg, msglen, "job %s takes no reports (it has no credentials)",
                 id);
    } else if (!token_matches(authorization, want)) {
        *status = authorization == NULL ? 401 : 403;
        snprintf(msg, msglen,
                 "a report needs the job's own token (its Secret's token) "
                 "as the bearer token");
    } else {
        *ok = 1;
    }
    if (creds != NULL) {
        explicit_bzero(creds, strlen(creds));
        flps_free(creds);
    }
    explicit_bzero(want, sizeof(want));
    return FLPS_OK;
}

/* The last of each event kind in the report, as flagent keeps them. */
typedef struct report_keep {
    agent_event progress, eval;
    int have_progress, have_eval;
    const char *profile, *done;
} report_keep;

static void keep_line(report_keep *k, const char *line, size_t *n)
{
    agent_event ev;

    agent_event_parse(line, &ev);
    if (ev.kind == AGENT_EVENT_PROGRESS || ev.kind == AGENT_EVENT_EVAL) {
        int progress = ev.kind == AGENT_EVENT_PROGRESS;

        *(progress ? &k->progress : &k->eval) = ev;
        *(progress ? &k->have_progress : &k->have_eval) = 1;
    } else if (ev.kind == AGENT_EVENT_PROFILE) {
        k->profile = line;
    } else if (ev.kind == AGENT_EVENT_DONE) {
        k->done = line;
    } else {
        return; /* not an event flsched keeps */
    }
    (*n)++;
}

/* The fields of an event, as field/value pairs for the job hash. */
static size_t event_pairs(const agent_event *ev, const char **fv)
{
    for (int i = 0; i < ev->nfields; i++) {
        fv[2 * i] = ev->fields[i];
        fv[2 * i + 1] = ev->values[i];
    }
    return (size_t)ev->nfields;
}

/* Store what was kept: rank 0's progress, eval and profile on the job,
 * every worker's bytes and done line on its task. */
static flps_err store_kept(sched_store *st, const char *id, uint32_t attempt,
                           const char *task_key, unsigned long index,
                           const report_keep *k)
{
    const char *fv[2 * (AGENT_EVENT_MAX_FIELDS + 2)];
    char att[16];
    int stored = 0;
    flps_err rc = FLPS_OK;

    if (k->have_progress) {
        const char *bytes[4] = {"p_bytes_sent", "0", "p_dense_bytes", "0"};

        for (int i = 0; i < k->progress.nfields; i++) {
            if (strcmp(k->progress.fields[i], "p_bytes_sent") == 0)
                bytes[1] = k->progress.values[i];
            else if (strcmp(k->progress.fields[i], "p_dense_bytes") == 0)
                bytes[3] = k->progress.values[i];
        }
        rc = sched_store_task_set(st, task_key, bytes, 2);
        if (rc == FLPS_OK && index == 0)
            rc = sched_store_job_report(st, id, attempt, fv,
                                        event_pairs(&k->progress, fv), &stored);
    }
    if (rc == FLPS_OK && k->have_eval && index == 0)
        rc = sched_store_job_report(st, id, attempt, fv,
                                    event_pairs(&k->eval, fv), &stored);
    if (rc == FLPS_OK && k->profile != NULL && index == 0) {
        snprintf(att, sizeof(att), "%u", attempt);
        fv[0] = "profile";
        fv[1] = k->profile;
        fv[2] = "profile_attempt";
        fv[3] = att;
        rc = sched_store_job_report(st, id, attempt, fv, 2, &stored);
    }
    if (rc == FLPS_OK && k->done != NULL) {
        fv[0] = "done";
        fv[1] = k->done;
        rc = sched_store_task_set(st, task_key, fv, 1);
    }
    return rc;
}

/* The body's task, attempt and lines; 0 with *status/msg when it is not
 * one. */
static int parse_body(json_t *o, int *server, unsigned long *index,
                      uint32_t *attempt, json_t **lines, int *status, char *msg,
                      size_t msglen)
{
    const char *task = json_string_value(json_object_get(o, "task"));
    json_t *a = json_object_get(o, "attempt");

    *lines = json_object_get(o, "lines");
    *status = 400;
    if (task == NULL || !parse_task(task, server, index)) {
        snprintf(msg, msglen, "task must be \"worker-N\" or \"server-N\"");
        return 0;
    }
    if (!json_is_integer(a) || json_integer_value(a) < 0 ||
        json_integer_value(a) > (json_int_t)UINT32_MAX) {
        snprintf(msg, msglen, "attempt must be the job's attempt (an integer)");
        return 0;
    }
    *attempt = (uint32_t)json_integer_value(a);
    if (!json_is_array(*lines) ||
        json_array_size(*lines) > SCHED_REPORT_LINES_MAX) {
        snprintf(msg, msglen, "lines must be a list of at most %d strings",
                 SCHED_REPORT_LINES_MAX);
        return 0;
    }
    return 1;
}

/* The answer of a stored report: the count, and the job's plan when it is
 * newer than the one the pod holds (have). */
static flps_err answer_of(sched_store *st, const char *id, size_t stored,
                          json_int_t have, json_t **out)
{
    char *version = NULL, *plan = NULL;
    int found = 0;
    json_t *o = json_pack("{s:I}", "stored", (json_int_t)stored);
    flps_err rc = sched_store_plan(st, id, &version, &plan, &found);

    if (o == NULL || rc != FLPS_OK) {
        json_decref(o);
        return rc != FLPS_OK ? rc : FLPS_ENOMEM;
    }
    if (found && strtoll(version, NULL, 10) > have) {
        json_t *p = json_loads(plan, 0, NULL);

        if (p != NULL) {
            json_object_set_new(o, "plan_version",
                                json_integer(strtoll(version, NULL, 10)));
            json_object_set_new(o, "plan", p);
        }
    }
    flps_free(version);
    flps_free(plan);
    *out = o;
    return FLPS_OK;
}

flps_err sched_report_apply(sched_store *st, const char *id,
                            const char *authorization, const char *body,
                            size_t len, int *status, char *msg, size_t msglen,
                            json_t **answer)
{
    json_t *o = json_loadb(body ? body : "", len, 0, NULL), *lines, *l;
    unsigned long index = 0;
    uint32_t attempt = 0;
    int server = 0, ok = 0, found = 0;
    char key[160];
    report_keep k;
    sched_job job;
    size_t i, stored = 0;
    flps_err rc;

    *answer = NULL;
    msg[0] = '\0';
    if (!json_is_object(o)) {
        json_decref(o);
        *status = 400;
        snprintf(msg, msglen, "the body must be a JSON object");
        return FLPS_OK;
    }
    rc = sched_store_job(st, id, 0, &job, &found);
    if (rc != FLPS_OK || !found) {
        json_decref(o);
        *status = 404;
        snprintf(msg, msglen, "no job %.40s", id);
        return rc;
    }
    rc = check_token(st, id, authorization, &ok, status, msg, msglen);
    if (rc != FLPS_OK || !ok ||
        !parse_body(o, &server, &index, &attempt, &lines, status, msg, msglen))
        goto out;
    if (job.state != SCHED_RUNNING || job.attempt != attempt ||
        index >= (server ? job.servers : job.workers)) {
        *status = 409;
        snprintf(msg, msglen,
                 "job %s is %s at attempt %u: no task %s-%lu "
                 "of attempt %u runs",
                 id, sched_state_name(job.state), job.attempt,
                 server ? "server" : "worker", index, attempt);
        goto out;
    }
    memset(&k, 0, sizeof(k));
    json_array_foreach(lines, i, l)
    {
        if (json_is_string(l))
            keep_line(&k, json_string_value(l), &stored);
    }
    sched_store_task_key(key, sizeof(key), id, attempt,
                         server ? "server" : "worker", (uint32_t)index);
    rc = store_kept(st, id, attempt, key, index, &k);
    if (rc == FLPS_OK)
        rc = answer_of(st, id, stored,
                       json_integer_value(json_object_get(o, "plan_version")),
                       answer);
    *status = 200;
out:
    sched_job_fini(&job);
    json_decref(o);
    return rc;
}
