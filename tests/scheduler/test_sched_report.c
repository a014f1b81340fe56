/* Tests for scheduler/sched_report.c (POST /v1/jobs/{id}/report: a job's
 * pods report their workers' events with the job's own token) and the
 * launcher's part of the store it uses (sched_launch_store.c), on a real
 * redis-server. */
#include "scheduler/sched_report.h"

#include <criterion/criterion.h>
#include <string.h>

#include "common/alloc.h"
#include "redis_fixture.h"
#include "scheduler/rconn.h"
#include "scheduler/sched_launch_store.h"
#include "services/jobspec.h"

static test_redis srv;
static rconn *rc;
static sched_store *st;
static char token[SCHED_REPORT_TOKEN_LEN + 1];

/* The field of a hash as Redis holds it, "" when absent. */
static const char *hget(const char *key, const char *field)
{
    static char out[4096];
    redisReply *r = NULL;

    cr_assert_eq(rconn_cmd(rc, &r, "HGET %s %s", key, field), FLPS_OK);
    snprintf(out, sizeof(out), "%s",
             r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return out;
}

/* One command without an answer worth reading (or its string). */
static const char *cmd1(const char *fmt, const char *arg)
{
    static char out[256];
    redisReply *r = NULL;

    cr_assert_eq(rconn_cmd(rc, &r, fmt, arg), FLPS_OK);
    snprintf(out, sizeof(out), "%s",
             r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return out;
}

/* j1: 1 server, 2 workers, admitted to a cluster (no node). */
static void setup(void)
{
    static const char text[] = "name: r\nmodel: mlp\nworkers: 2\nservers: 1\n";
    const char *sn[] = {""}, *wn[] = {"", ""};
    jobspec spec;
    sched_job j;
    char *creds = NULL;
    int committed = 0;

    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    cr_assert_eq(rconn_create(srv.url, 2000, &rc), FLPS_OK);
    cr_assert_eq(sched_store_create(srv.url, 2000, &st), FLPS_OK);
    cr_assert_eq(jobspec_parse(text, strlen(text), &spec, NULL, 0), FLPS_OK);
    cr_assert_eq(sched_store_submit(st, &spec, text, strlen(text), 1000, &j),
                 FLPS_OK);
    snprintf(j.transport_used, sizeof(j.transport_used), "zmq");
    cr_assert_eq(sched_store_place(st, NULL, &j, sn, wn, 1001, &committed),
                 FLPS_OK);
    cr_assert(committed);
    sched_job_fini(&j);
    cr_assert_eq(sched_store_job_credentials(st, "j1", &creds), FLPS_OK);
    cr_assert_not_null(creds);
    cr_assert_eq(sched_report_token(creds, "j1", token), FLPS_OK);
    flps_free(creds);
}

static void teardown(void)
{
    sched_store_destroy(st);
    rconn_destroy(rc);
    test_redis_stop(&srv);
}

TestSuite(sched_report, .init = setup, .fini = teardown);

/* Apply body with the bearer token tok; the status, msg and answer. */
static int apply(const char *tok, const char *body, char *msg, json_t **answer)
{
    char auth[128];
    int status = 0;
    json_t *a = NULL;

    snprintf(auth, sizeof(auth), "Bearer %s", tok ? tok : "");
    cr_assert_eq(sched_report_apply(st, "j1", tok ? auth : NULL, body,
                                    strlen(body), &status, msg, 300, &a),
                 FLPS_OK);
    if (answer != NULL)
        *answer = a;
    else
        json_decref(a);
    return status;
}

Test(sched_report, the_token_is_the_jobs_own_and_differs_per_job)
{
    char other[SCHED_REPORT_TOKEN_LEN + 1];
    char *creds = NULL;

    cr_assert_eq(strlen(token), SCHED_REPORT_TOKEN_LEN);
    cr_assert_eq(sched_store_job_credentials(st, "j1", &creds), FLPS_OK);
    cr_assert_eq(sched_report_token(creds, "j2", other), FLPS_OK);
    cr_assert_str_neq(other, token);
    cr_assert_eq(sched_report_token("not credentials", "j1", other),
                 FLPS_ECONFIG);
    flps_free(creds);
}

Test(sched_report, a_report_without_or_with_a_wrong_token_is_refused)
{
    static const char body[] = "{\"task\":\"worker-0\",\"attempt\":0,"
                               "\"lines\":[\"{\\\"event\\\":\\\"progress\\\","
                               "\\\"iter\\\":5}\"]}";
    char msg[300];

    cr_assert_eq(apply(NULL, body, msg, NULL), 401);
    cr_assert_eq(apply("0123", body, msg, NULL), 403);
    cr_assert_not_null(strstr(msg, "the job's own token"), "%s", msg);
    cr_assert_str_eq(hget("flps:job:j1", "p_iteration"), "");
}

Test(sched_report, rank_zeros_progress_goes_to_the_job_and_bytes_to_the_task)
{
    static const char body[] =
        "{\"task\":\"worker-0\",\"attempt\":0,\"lines\":["
        "\"{\\\"event\\\":\\\"progress\\\",\\\"iter\\\":5,\\\"loss\\\":2.5,"
        "\\\"bytes_sent\\\":100,\\\"dense_bytes\\\":400}\","
        "\"not an event\","
        "\"{\\\"event\\\":\\\"progress\\\",\\\"iter\\\":6,\\\"bytes_sent\\\":"
        "150,\\\"dense_bytes\\\":500}\"]}";
    char msg[300];
    json_t *a = NULL;

    cr_assert_eq(apply(token, body, msg, &a), 200, "%s", msg);
    cr_assert_eq(json_integer_value(json_object_get(a, "stored")), 2);
    cr_assert_null(json_object_get(a, "plan"), "no plan yet");
    json_decref(a);
    cr_assert_str_eq(hget("flps:job:j1", "p_iteration"), "6");
    cr_assert_str_eq(hget("flps:task:j1:0:worker-0", "p_bytes_sent"), "150");
    cr_assert_str_eq(hget("flps:task:j1:0:worker-0", "p_dense_bytes"), "500");
}

Test(sched_report, another_ranks_done_goes_to_its_task_only)
{
    static const char body[] =
        "{\"task\":\"worker-1\",\"attempt\":0,\"lines\":["
        "\"{\\\"event\\\":\\\"progress\\\",\\\"iter\\\":9}\","
        "\"{\\\"event\\\":\\\"done\\\",\\\"iterations\\\":10}\"]}";
    char msg[300];

    cr_assert_eq(apply(token, body, msg, NULL), 200, "%s", msg);
    cr_assert_str_eq(hget("flps:job:j1", "p_iteration"), "",
                     "only rank 0 is the job's progress");
    cr_assert_not_null(
        strstr(hget("flps:task:j1:0:worker-1", "done"), "\"done\""));
}

Test(sched_report, a_stale_attempt_or_an_unknown_task_is_a_conflict)
{
    char msg[300];

    cr_assert_eq(apply(token,
                       "{\"task\":\"worker-0\",\"attempt\":1,\"lines\":[]}",
                       msg, NULL),
                 409);
    cr_assert_eq(apply(token,
                       "{\"task\":\"worker-2\",\"attempt\":0,\"lines\":[]}",
                       msg, NULL),
                 409, "rank 2 of 2 workers");
    cr_assert_eq(apply(token, "{\"task\":\"chief\",\"attempt\":0,\"lines\":[]}",
                       msg, NULL),
                 400);
    cr_assert_eq(apply(token, "[]", msg, NULL), 400);
}

Test(sched_report, a_newer_plan_comes_back_with_the_answer)
{
    char msg[300];
    json_t *a = NULL;
    int committed = 0;

    cr_assert_eq(sched_store_plan_put(st, "", "j1", 0,
                                      "{\"version\":1,\"layers\":[]}", "d1",
                                      1002, "plan", "plan v1", &committed),
                 FLPS_OK);
    /* plan_put checks the leader: with none, it writes nothing. */
    cmd1("SET flps:leader %s", "me");
    cr_assert_eq(sched_store_plan_put(st, "me", "j1", 0,
                                      "{\"version\":1,\"layers\":[]}", "d1",
                                      1002, "plan", "plan v1", &committed),
                 FLPS_OK);
    cr_assert(committed);
    cr_assert_eq(apply(token,
                       "{\"task\":\"worker-0\",\"attempt\":0,\"lines\":[],"
                       "\"plan_version\":0}",
                       msg, &a),
                 200);
    cr_assert_eq(json_integer_value(json_object_get(a, "plan_version")), 1);
    cr_assert(
        json_is_array(json_object_get(json_object_get(a, "plan"), "layers")));
    json_decref(a);
    cr_assert_eq(apply(token,
                       "{\"task\":\"worker-0\",\"attempt\":0,\"lines\":[],"
                       "\"plan_version\":1}",
                       msg, &a),
                 200);
    cr_assert_null(json_object_get(a, "plan"), "the pod has it already");
    json_decref(a);
}

Test(sched_report, the_launched_set_and_the_waiting_reason)
{
    char **ids = NULL;
    size_t n = 0;
    long attempt = 7;
    int changed = 0;

    cr_assert_eq(sched_store_launched_add(st, "j1"), FLPS_OK);
    cr_assert_eq(sched_store_launched(st, &ids, &n), FLPS_OK);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(ids[0], "j1");
    sched_strv_free(ids, n);
    cr_assert_eq(sched_store_launched_attempt(st, "j1", &attempt), FLPS_OK);
    cr_assert_eq(attempt, -1);
    cr_assert_eq(sched_store_launched_set_attempt(st, "j1", 0), FLPS_OK);
    cr_assert_eq(sched_store_launched_attempt(st, "j1", &attempt), FLPS_OK);
    cr_assert_eq(attempt, 0);
    cr_assert_eq(
        sched_store_job_waiting(st, "j1", 0, "waiting: x", NULL, &changed),
        FLPS_OK);
    cr_assert(changed);
    cr_assert_str_eq(hget("flps:job:j1", "reason"), "waiting: x");
    cr_assert_eq(
        sched_store_job_waiting(st, "j1", 0, NULL, "another", &changed),
        FLPS_OK);
    cr_assert(!changed, "only the reason it set is cleared");
    cr_assert_eq(
        sched_store_job_waiting(st, "j1", 0, NULL, "waiting: x", &changed),
        FLPS_OK);
    cr_assert(changed);
    cr_assert_str_eq(hget("flps:job:j1", "reason"), "");
    cr_assert_eq(
        sched_store_job_waiting(st, "j1", 1, "waiting: y", NULL, &changed),
        FLPS_OK);
    cr_assert(!changed, "not at that attempt");
    cr_assert_eq(sched_store_launched_remove(st, "j1"), FLPS_OK);
    cr_assert_eq(sched_store_launched(st, &ids, &n), FLPS_OK);
    cr_assert_eq(n, 0);
    sched_strv_free(ids, n);
}

Test(sched_report, an_exit_is_written_then_queued_for_the_loop)
{
    cr_assert_eq(sched_store_task_exit(st, "flps:task:j1:0:server-0", -1, 9,
                                       1005.5, "pod x was evicted"),
                 FLPS_OK);
    cr_assert_str_eq(hget("flps:task:j1:0:server-0", "state"), "EXITED");
    cr_assert_str_eq(hget("flps:task:j1:0:server-0", "signal"), "9");
    cr_assert_str_eq(hget("flps:task:j1:0:server-0", "error"),
                     "pod x was evicted");
    cr_assert_str_eq(cmd1("LPOP %s", "flps:exits"), "flps:task:j1:0:server-0");
}
