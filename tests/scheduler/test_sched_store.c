/* flsched's Redis store against a real redis-server: the exact keys a
 * submit writes, cancel, placement commits, failures and restarts, events,
 * logs, nodes and the leader lease. */
#include "scheduler/sched_store.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "proto/creds.h"
#include "redis_fixture.h"
#include "scheduler/rconn.h"
#include "scheduler/sched_launch_store.h"

static test_redis srv;
static rconn *rc;
static sched_store *st;

static void setup(void)
{
    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    cr_assert_eq(rconn_create(srv.url, 2000, &rc), FLPS_OK);
    cr_assert_eq(sched_store_create(srv.url, 2000, &st), FLPS_OK);
}

static void teardown(void)
{
    sched_store_destroy(st);
    rconn_destroy(rc);
    test_redis_stop(&srv);
}

TestSuite(sched_store, .init = setup, .fini = teardown);

/* The string reply of a printf-style command ("" for nil). */
static char *S(const char *cmd, const char *a, const char *b)
{
    redisReply *r = NULL;
    static char out[8192];

    if (b != NULL)
        cr_assert_eq(rconn_cmd(rc, &r, cmd, a, b), FLPS_OK, "%s",
                     rconn_error(rc));
    else if (a != NULL)
        cr_assert_eq(rconn_cmd(rc, &r, cmd, a), FLPS_OK, "%s", rconn_error(rc));
    else
        cr_assert_eq(rconn_cmd(rc, &r, cmd), FLPS_OK, "%s", rconn_error(rc));
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        snprintf(out, sizeof(out), "%s", r->str);
    else if (r->type == REDIS_REPLY_INTEGER)
        snprintf(out, sizeof(out), "%lld", r->integer);
    else
        out[0] = '\0';
    freeReplyObject(r);
    return out;
}

/* Sorted members of an array reply, joined by spaces. */
static char *L(const char *cmd, const char *a)
{
    redisReply *r = NULL;
    static char out[8192];
    size_t off = 0;
    const char *v[256];
    size_t n;

    if (a != NULL)
        cr_assert_eq(rconn_cmd(rc, &r, cmd, a), FLPS_OK, "%s", rconn_error(rc));
    else
        cr_assert_eq(rconn_cmd(rc, &r, cmd), FLPS_OK, "%s", rconn_error(rc));
    n = r->elements < 256 ? r->elements : 256;
    for (size_t i = 0; i < n; i++)
        v[i] = r->element[i]->str;
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && strcmp(v[k - 1], v[k]) > 0; k--) {
            const char *t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s%s",
                                i ? " " : "", v[i]);
    freeReplyObject(r);
    return out;
}

static jobspec spec_of(const char *text)
{
    jobspec s;
    char err[512];

    cr_assert_eq(jobspec_parse(text, strlen(text), &s, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    return s;
}

static sched_job submit(const char *text, double now)
{
    jobspec s = spec_of(text);
    sched_job j;

    cr_assert_eq(sched_store_submit(st, &s, text, strlen(text), now, &j),
                 FLPS_OK, "%s", sched_store_error(st));
    return j;
}

static const char job2[] = "name: two\nmodel: mlp\nworkers: 2\nservers: 1\n"
                           "priority: 3\nmax_restarts: 1\n"
                           "cpus_per_worker: 1.5\nmemory_per_worker: 2Gi\n"
                           "gpus_per_worker: 1\ntime_limit: 60\n";

Test(sched_store, submit_writes_exactly_the_documented_keys)
{
    sched_job j = submit(job2, 1000.25);
    char score[64];

    cr_assert_str_eq(j.id, "j1");
    cr_assert_eq(j.state, SCHED_QUEUED);
    cr_assert_str_eq(L("KEYS flps:*", NULL),
                     "flps:job:j1 flps:job:j1:events flps:jobs flps:queue "
                     "flps:seq:job");
    cr_assert_str_eq(S("GET flps:seq:job", NULL, NULL), "1");
    cr_assert_str_eq(S("ZSCORE flps:jobs j1", NULL, NULL), "1");
    snprintf(score, sizeof(score), "%.17g", -3.0 * 4294967296.0 + 1);
    cr_assert_eq(strtod(S("ZSCORE flps:queue j1", NULL, NULL), NULL),
                 strtod(score, NULL));
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "state", NULL), "QUEUED");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "name", NULL), "two");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "spec", NULL), job2);
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "submitted_at", NULL), "1000.25");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "cpus_per_worker", NULL), "1.5");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "memory_per_worker", NULL),
                     "2147483648");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "gpus_per_worker", NULL), "1");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "cpus_per_server", NULL), "1");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "memory_per_server", NULL),
                     "536870912");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "time_limit", NULL), "60");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "max_restarts", NULL), "1");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "attempt", NULL), "0");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "started_at", NULL), "",
                     "no start time until placed");
    cr_assert_eq(j.per_worker.mcpus, 1500);
    cr_assert_eq(j.per_worker.memory, 2ULL << 30);
    cr_assert_eq(j.per_worker.gpus, 1);
    cr_assert_eq(j.ntasks, 0);
    sched_job_fini(&j);
}

Test(sched_store, a_job_with_encryption_false_gets_no_curve_keys)
{
    char *creds = NULL;
    flps_creds c;
    char why[256];

    submit("name: clear\nmodel: mlp\nencryption: false\n", 1000);
    submit("name: sealed\nmodel: mlp\n", 1001);
    cr_assert_eq(sched_store_job_credentials(st, "j1", &creds), FLPS_OK);
    cr_assert_not_null(creds);
    cr_assert_eq(creds_parse(creds, strlen(creds), &c, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_neq(c.secret[0], '\0', "the secret is there either way");
    cr_assert_eq(c.has_curve, 0, "encryption: false still made CURVE keys");
    flps_free(creds);
    creds = NULL;
    cr_assert_eq(sched_store_job_credentials(st, "j2", &creds), FLPS_OK);
    cr_assert_not_null(creds);
    cr_assert_eq(creds_parse(creds, strlen(creds), &c, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(c.has_curve, creds_have_curve(),
                 "the default makes CURVE keys wherever libzmq has CURVE");
    creds_wipe(&c);
    flps_free(creds);
}

Test(sched_store, numbers_jobs_in_submission_order)
{
    sched_job a = submit("name: a\nmodel: mlp\n", 1),
              b = submit("name: b\nmodel: mlp\n", 2);
    sched_job *all = NULL, *q = NULL;
    size_t n = 0, nq = 0;

    cr_assert_str_eq(a.id, "j1");
    cr_assert_str_eq(b.id, "j2");
    cr_assert_eq(sched_store_jobs(st, &all, &n), FLPS_OK);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(all[0].id, "j1");
    cr_assert_str_eq(all[1].name, "b");
    cr_assert_eq(sched_store_queue(st, &q, &nq), FLPS_OK);
    cr_assert_eq(nq, 2);
    sched_jobs_free(all, n);
    sched_jobs_free(q, nq);
    sched_job_fini(&a);
    sched_job_fini(&b);
}

Test(sched_store, reads_no_job_for_unknown_or_malformed_ids)
{
    sched_job j;
    int found = 1;

    cr_assert_eq(sched_store_job(st, "j9", 1, &j, &found), FLPS_OK);
    cr_assert_eq(found, 0);
    cr_assert_eq(sched_store_job(st, "j1 x", 1, &j, &found), FLPS_OK);
    cr_assert_eq(found, 0);
    cr_assert_eq(sched_store_job(st, "*", 1, &j, &found), FLPS_OK);
    cr_assert_eq(found, 0);
}

static void place(const sched_job *j, const char *const *sn,
                  const char *const *wn, const char *leader, int want)
{
    int committed = -1;

    cr_assert_eq(sched_store_place(st, leader, j, sn, wn, 2000, &committed),
                 FLPS_OK, "%s", sched_store_error(st));
    cr_assert_eq(committed, want);
}

Test(sched_store, a_placement_writes_tasks_desired_sets_and_state_at_once)
{
    sched_job j = submit(job2, 1000), got;
    const char *sn[] = {"n1"}, *wn[] = {"n1", "n2"};
    int found = 0;

    place(&j, sn, wn, NULL, 1);
    cr_assert_str_eq(L("SMEMBERS flps:node:n1:tasks", NULL),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0");
    cr_assert_str_eq(L("SMEMBERS flps:node:n2:tasks", NULL),
                     "flps:task:j1:0:worker-1");
    cr_assert_str_eq(L("SMEMBERS flps:job:j1:tasks", NULL),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0 "
                     "flps:task:j1:0:worker-1");
    cr_assert_str_eq(L("HKEYS flps:task:j1:0:worker-1", NULL),
                     "attempt cpus gpus index job memory node role state "
                     "transport");
    cr_assert_str_eq(S("HGET flps:task:j1:0:worker-1 %s", "state", NULL),
                     "ASSIGNED");
    cr_assert_str_eq(S("HGET flps:task:j1:0:worker-1 %s", "cpus", NULL), "1.5");
    cr_assert_str_eq(S("HGET flps:task:j1:0:server-0 %s", "role", NULL),
                     "server");
    cr_assert_str_eq(S("ZCARD flps:queue", NULL, NULL), "0");
    cr_assert_eq(sched_store_job(st, "j1", 1, &got, &found), FLPS_OK);
    cr_assert_eq(got.state, SCHED_RUNNING);
    cr_assert_eq(got.started_at, 2000.0);
    cr_assert_eq(got.ntasks, 3);
    cr_assert_str_eq(got.tasks[0].name, "server-0");
    cr_assert_str_eq(got.tasks[2].name, "worker-1");
    cr_assert_str_eq(got.tasks[2].node, "n2");
    sched_job_fini(&got);
    /* The same placement again is refused: the job is no longer QUEUED. */
    place(&j, sn, wn, NULL, 0);
    sched_job_fini(&j);
}

Test(sched_store, only_the_lease_holder_commits_a_placement)
{
    sched_job j = submit(job2, 1000);
    const char *sn[] = {"n1"}, *wn[] = {"n1", "n1"};
    int held = 0;

    place(&j, sn, wn, "me", 0); /* nobody leads */
    cr_assert_eq(sched_store_lease(st, "other", 5000, &held), FLPS_OK);
    cr_assert_eq(held, 1);
    place(&j, sn, wn, "me", 0);
    cr_assert_str_eq(L("KEYS flps:task:*", NULL), "");
    cr_assert_str_eq(L("KEYS flps:node:*", NULL), "");
    place(&j, sn, wn, "other", 1);
    sched_job_fini(&j);
}

Test(sched_store, cancel_stops_a_job_once_and_says_why_not_otherwise)
{
    sched_job j = submit(job2, 1000), out;
    const char *sn[] = {"n1"}, *wn[] = {"n1", "n2"};
    sched_cancel_result res;

    place(&j, sn, wn, NULL, 1);
    cr_assert_eq(sched_store_cancel(st, "j1", 3000, &res, &out), FLPS_OK);
    cr_assert_eq(res, SCHED_CANCEL_DONE);
    cr_assert_eq(out.state, SCHED_CANCELLED);
    cr_assert_eq(out.finished_at, 3000.0);
    sched_job_fini(&out);
    cr_assert_str_eq(L("SMEMBERS flps:node:n1:tasks", NULL), "");
    cr_assert_str_eq(L("SMEMBERS flps:node:n2:tasks", NULL), "");
    cr_assert_eq(sched_store_cancel(st, "j1", 3001, &res, &out), FLPS_OK);
    cr_assert_eq(res, SCHED_CANCEL_FINISHED);
    cr_assert_eq(out.finished_at, 3000.0, "a second cancel changes nothing");
    sched_job_fini(&out);
    cr_assert_eq(sched_store_cancel(st, "j7", 3001, &res, NULL), FLPS_OK);
    cr_assert_eq(res, SCHED_CANCEL_NO_JOB);
    sched_job_fini(&j);
}

Test(sched_store, cancel_takes_a_queued_job_out_of_the_queue)
{
    sched_job j = submit(job2, 1000);
    sched_cancel_result res;

    cr_assert_eq(sched_store_cancel(st, "j1", 1500, &res, NULL), FLPS_OK);
    cr_assert_eq(res, SCHED_CANCEL_DONE);
    cr_assert_str_eq(S("ZCARD flps:queue", NULL, NULL), "0");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "state", NULL), "CANCELLED");
    place(&j, (const char *[]){"n1"}, (const char *[]){"n1", "n1"}, NULL, 0);
    sched_job_fini(&j);
}

/* The queue score is computed in one place, the scripts' Lua (score() in
 * sched_scripts.c); this pins what it computes: higher priority first,
 * then submission order, exactly -priority * 2^32 + number. */
Test(sched_store, the_queue_score_orders_by_priority_then_submission)
{
    static const unsigned prio[] = {0, 5, 0, 4294967295u, 5, 1};
    char text[128], want[64];

    for (size_t i = 0; i < sizeof(prio) / sizeof(prio[0]); i++) {
        sched_job j;

        snprintf(text, sizeof(text), "name: q%zu\nmodel: mlp\npriority: %u\n",
                 i, prio[i]);
        j = submit(text, 1000 + (double)i);
        sched_job_fini(&j);
    }
    {
        redisReply *r = NULL;
        static const char *const order[] = {"j4", "j2", "j5", "j6", "j1", "j3"};

        cr_assert_eq(rconn_cmd(rc, &r, "ZRANGE flps:queue 0 -1"), FLPS_OK);
        cr_assert_eq(r->elements, 6);
        for (size_t i = 0; i < 6; i++)
            cr_assert_str_eq(r->element[i]->str, order[i], "place %zu", i);
        freeReplyObject(r);
    }
    for (size_t i = 0; i < sizeof(prio) / sizeof(prio[0]); i++) {
        char id[16];

        snprintf(id, sizeof(id), "j%zu", i + 1);
        snprintf(want, sizeof(want), "%.17g",
                 -(double)prio[i] * 4294967296.0 + (double)(i + 1));
        cr_assert_eq(strtod(S("ZSCORE flps:queue %s", id, NULL), NULL),
                     strtod(want, NULL), "%s", id);
    }
}

/* The job file is parsed once, at submit; what the leader's loop acts on
 * (transport, compression) is in the hash in canonical form. */
Test(sched_store, submit_records_the_settings_the_loop_acts_on)
{
    sched_job a = submit("name: a\nmodel: mlp\ncompression: gtopk:1e-2\n", 1),
              b = submit("name: b\nmodel: mlp\ncompression: auto\n"
                         "transport: auto\n",
                         2);

    cr_assert_str_eq(S("HGET flps:job:j1 %s", "compression", NULL),
                     "gtopk:0.01");
    cr_assert_str_eq(S("HGET flps:job:j2 %s", "compression", NULL), "auto");
    cr_assert_str_eq(a.compression, "gtopk:0.01", "read back");
    cr_assert_str_eq(a.transport, "zmq");
    cr_assert_str_eq(b.compression, "auto");
    cr_assert_str_eq(b.transport, "auto");
    sched_job_fini(&a);
    sched_job_fini(&b);
}

Test(sched_store, a_failure_requeues_in_place_until_restarts_run_out)
{
    sched_job j = submit(job2, 1000), got;
    const char *sn[] = {"n1"}, *wn[] = {"n1", "n2"};
    const char *score = NULL;
    char before[64];
    sched_fail_result res;
    int found = 0;

    snprintf(before, sizeof(before), "%s",
             S("ZSCORE flps:queue j1", NULL, NULL));
    place(&j, sn, wn, NULL, 1);
    cr_assert_eq(sched_store_fail(st, "j1", 0,
                                  "worker-1 on n2 exited with "
                                  "status 1",
                                  1, 2500, &res),
                 FLPS_OK);
    cr_assert_eq(res, SCHED_FAIL_REQUEUED);
    score = S("ZSCORE flps:queue j1", NULL, NULL);
    cr_assert_str_eq(score, before, "it keeps its queue position");
    cr_assert_str_eq(L("SMEMBERS flps:node:n1:tasks", NULL), "");
    cr_assert_str_eq(S("EXISTS flps:job:j1:tasks", NULL, NULL), "0");
    cr_assert_eq(sched_store_job(st, "j1", 1, &got, &found), FLPS_OK);
    cr_assert_eq(got.state, SCHED_QUEUED);
    cr_assert_eq(got.attempt, 1);
    cr_assert_eq(got.restarts, 1);
    cr_assert_str_eq(got.reason, "worker-1 on n2 exited with status 1");
    /* A late failure report of attempt 0 changes nothing. */
    cr_assert_eq(sched_store_fail(st, "j1", 0, "late", 1, 2600, &res), FLPS_OK);
    cr_assert_eq(res, SCHED_FAIL_IGNORED);
    place(&got, sn, wn, NULL, 1);
    cr_assert_str_eq(L("SMEMBERS flps:job:j1:tasks", NULL),
                     "flps:task:j1:1:server-0 flps:task:j1:1:worker-0 "
                     "flps:task:j1:1:worker-1");
    cr_assert_eq(sched_store_fail(st, "j1", 1, "node n2 lost", 1, 2700, &res),
                 FLPS_OK);
    cr_assert_eq(res, SCHED_FAIL_FAILED);
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "state", NULL), "FAILED");
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "reason", NULL), "node n2 lost");
    cr_assert_str_eq(L("SMEMBERS flps:node:n2:tasks", NULL), "");
    sched_job_fini(&got);
    sched_job_fini(&j);
}

Test(sched_store, success_stores_the_summary_and_empties_the_desired_sets)
{
    sched_job j = submit(job2, 1000);
    const char *sn[] = {"n1"}, *wn[] = {"n1", "n2"};
    int done = 0;

    place(&j, sn, wn, NULL, 1);
    cr_assert_eq(sched_store_succeed(st, "j1", 1, "{}", 3000, &done), FLPS_OK);
    cr_assert_eq(done, 0, "wrong attempt");
    cr_assert_eq(sched_store_succeed(st, "j1", 0, "{\"x\":1}", 3000, &done),
                 FLPS_OK);
    cr_assert_eq(done, 1);
    cr_assert_str_eq(S("HGET flps:job:j1 %s", "summary", NULL), "{\"x\":1}");
    cr_assert_str_eq(L("SMEMBERS flps:node:n1:tasks", NULL), "");
    cr_assert_str_eq(L("SMEMBERS flps:job:j1:tasks", NULL),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0 "
                     "flps:task:j1:0:worker-1",
                     "the finished job still lists its tasks");
    sched_job_fini(&j);
}

Test(sched_store, events_carry_increasing_seqs_and_keep_the_last_thousand)
{
    sched_job j = submit("name: a\nmodel: mlp\n", 10);
    char **ev = NULL;
    size_t n = 0;
    json_t *e;

    for (int i = 0; i < 1100; i++)
        cr_assert_eq(sched_store_event(st, "j1", 11, "note", "hello \"you\""),
                     FLPS_OK);
    cr_assert_str_eq(S("LLEN flps:job:j1:events", NULL, NULL), "1000");
    cr_assert_eq(sched_store_events(st, "j1", 1099, &ev, &n), FLPS_OK);
    cr_assert_eq(n, 2, "seqs 1100 and 1101");
    e = json_loads(ev[1], 0, NULL);
    cr_assert_not_null(e, "%s", ev[1]);
    cr_assert_eq(json_integer_value(json_object_get(e, "seq")), 1101);
    cr_assert_str_eq(json_string_value(json_object_get(e, "message")),
                     "hello \"you\"");
    cr_assert_str_eq(json_string_value(json_object_get(e, "type")), "note");
    cr_assert_eq(json_number_value(json_object_get(e, "time")), 11.0);
    cr_assert_eq(strncmp(ev[1], "{\"seq\":1101,", 12), 0, "%s", ev[1]);
    json_decref(e);
    sched_strv_free(ev, n);
    sched_job_fini(&j);
}

Test(sched_store, a_late_event_never_recreates_the_hash_of_a_job_that_is_gone)
{
    sched_job j = submit("name: a\nmodel: mlp\n", 10);

    /* An event for a job that never existed writes nothing. */
    cr_assert_eq(sched_store_event(st, "j9", 11, "node_lost", "n1"), FLPS_OK);
    cr_assert_str_eq(S("EXISTS flps:job:j9", NULL, NULL), "0");
    cr_assert_str_eq(S("EXISTS flps:job:j9:events", NULL, NULL), "0");
    /* Nor one for a job whose hash went (e.g. a Redis that lost it). */
    S("DEL flps:job:j1 flps:job:j1:events", NULL, NULL);
    cr_assert_eq(sched_store_event(st, "j1", 12, "node_lost", "n1"), FLPS_OK);
    cr_assert_str_eq(S("EXISTS flps:job:j1", NULL, NULL), "0",
                     "no hash holding only event_seq");
    cr_assert_str_eq(S("EXISTS flps:job:j1:events", NULL, NULL), "0");
    sched_job_fini(&j);
}

Test(sched_store, reads_log_lines_after_an_id_up_to_a_limit)
{
    char **ids, **tasks, **lines;
    size_t n = 0;
    char first[64];

    for (int i = 0; i < 5; i++) {
        char line[32];

        snprintf(line, sizeof(line), "line %d", i);
        S("XADD flps:job:j1:logs * task worker-0 line %s", line, NULL);
    }
    cr_assert_eq(sched_store_logs(st, "j1", NULL, 2, &ids, &tasks, &lines, &n),
                 FLPS_OK);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(lines[0], "line 0");
    cr_assert_str_eq(tasks[1], "worker-0");
    snprintf(first, sizeof(first), "%s", ids[1]);
    sched_strv_free(ids, n);
    sched_strv_free(tasks, n);
    sched_strv_free(lines, n);
    cr_assert_eq(
        sched_store_logs(st, "j1", first, 100, &ids, &tasks, &lines, &n),
        FLPS_OK);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(lines[0], "line 2");
    sched_strv_free(ids, n);
    sched_strv_free(tasks, n);
    sched_strv_free(lines, n);
}

Test(sched_store, derives_what_nodes_use_from_their_desired_sets)
{
    sched_job j = submit(job2, 1000);
    const char *sn[] = {"n2"}, *wn[] = {"n1", "n2"};
    sched_node *nodes = NULL;
    size_t n = 0;

    S("SADD flps:nodes %s %s", "n2", "n1");
    S("HSET flps:node:n1 cpus 8 memory %s gpus 2 state READY address 10.0.0.1",
      "17179869184", NULL);
    S("HSET flps:node:n2 cpus 4 memory %s gpus 1 state READY", "8Gi", NULL);
    S("SET flps:node:n1:alive %s EX 30", "1", NULL);
    place(&j, sn, wn, NULL, 1);
    cr_assert_eq(sched_store_nodes(st, &nodes, &n), FLPS_OK);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(nodes[0].name, "n1", "name order");
    cr_assert_eq(nodes[0].alive, 1);
    cr_assert_eq(nodes[1].alive, 0);
    cr_assert_eq(nodes[0].cap.memory, 16ULL << 30);
    cr_assert_eq(nodes[1].cap.memory, 8ULL << 30, "a SIZE is read too");
    cr_assert_eq(nodes[0].used.mcpus, 1500);
    cr_assert_eq(nodes[0].used.gpus, 1);
    cr_assert_eq(nodes[1].used.mcpus, 2500);
    cr_assert_eq(nodes[1].used.memory, (2ULL << 30) + (512ULL << 20));
    cr_assert_eq(nodes[1].ntasks, 2);
    cr_assert_str_eq(nodes[0].address, "10.0.0.1");
    sched_nodes_free(nodes, n);
    sched_job_fini(&j);
}

Test(sched_store, marks_a_node_lost_only_without_its_alive_key)
{
    int marked = -1;

    S("SADD flps:nodes %s", "n1", NULL);
    S("HSET flps:node:n1 state READY cpus %s", "4", NULL);
    S("SET flps:node:n1:alive 1", NULL, NULL);
    cr_assert_eq(sched_store_node_lost(st, "n1", &marked), FLPS_OK);
    cr_assert_eq(marked, 0);
    cr_assert_eq(sched_store_node_cap_ttl(st, "n1", 5), FLPS_OK);
    cr_assert_eq(atoi(S("TTL flps:node:n1:alive", NULL, NULL)), 5,
                 "an alive key without TTL gets one");
    S("DEL flps:node:n1:alive", NULL, NULL);
    cr_assert_eq(sched_store_node_lost(st, "n1", &marked), FLPS_OK);
    cr_assert_eq(marked, 1);
    cr_assert_str_eq(S("HGET flps:node:n1 %s", "state", NULL), "LOST");
    cr_assert_eq(sched_store_node_back(st, "n1", &marked), FLPS_OK);
    cr_assert_eq(marked, 0, "still no heartbeat");
    S("SET flps:node:n1:alive 1 EX %s", "5", NULL);
    cr_assert_eq(sched_store_node_back(st, "n1", &marked), FLPS_OK);
    cr_assert_eq(marked, 1);
    cr_assert_str_eq(S("HGET flps:node:n1 %s", "state", NULL), "READY");
}

Test(sched_store, the_lease_goes_to_one_holder_and_passes_on_when_it_expires)
{
    int a = 0, b = 1;
    struct timespec ts = {0, 400 * 1000000L};

    cr_assert_eq(sched_store_lease(st, "A", 300, &a), FLPS_OK);
    cr_assert_eq(a, 1);
    cr_assert_eq(sched_store_lease(st, "B", 300, &b), FLPS_OK);
    cr_assert_eq(b, 0);
    cr_assert_eq(sched_store_lease(st, "A", 300, &a), FLPS_OK);
    cr_assert_eq(a, 1, "the holder renews");
    cr_assert_eq(sched_store_lease_release(st, "B"), FLPS_OK);
    cr_assert_str_eq(S("GET flps:leader", NULL, NULL), "A",
                     "only the holder releases");
    nanosleep(&ts, NULL);
    cr_assert_eq(sched_store_lease(st, "B", 300, &b), FLPS_OK);
    cr_assert_eq(b, 1, "B takes over once A's lease expired");
    cr_assert_eq(sched_store_lease(st, "A", 300, &a), FLPS_OK);
    cr_assert_eq(a, 0);
    cr_assert_eq(sched_store_lease_release(st, "B"), FLPS_OK);
    cr_assert_str_eq(S("EXISTS flps:leader", NULL, NULL), "0");
}

Test(sched_store, reports_redis_being_away)
{
    sched_job j;
    int found;

    test_redis_stop(&srv);
    cr_assert_eq(sched_store_job(st, "j1", 1, &j, &found), FLPS_EIO);
    cr_assert_not_null(strstr(sched_store_error(st), "Redis"), "%s",
                       sched_store_error(st));
}

Test(sched_store, stores_a_plan_as_the_next_version_only_for_the_leader)
{
    sched_job j = submit("name: a\nmodel: mlp\ncompression: auto\n", 10);
    uint64_t version = 99;
    char seen[32] = "x";
    int held = 0, committed = 1;

    cr_assert_eq(sched_store_plan_seen(st, "j1", &version, seen, sizeof(seen)),
                 FLPS_OK);
    cr_assert_eq(version, 0);
    cr_assert_str_eq(seen, "");
    cr_assert_eq(sched_store_plan_put(st, "me", "j1", 0, "{\"version\":1}",
                                      "d1", 11, "plan", "plan v1", &committed),
                 FLPS_OK);
    cr_assert_eq(committed, 0, "nobody leads: nothing written");
    cr_assert_str_eq(L("KEYS flps:job:j1:plan", NULL), "");
    cr_assert_eq(sched_store_lease(st, "me", 5000, &held), FLPS_OK);
    cr_assert_eq(sched_store_plan_put(st, "me", "j1", 0, "{\"version\":1}",
                                      "d1", 11, "plan", "plan v1", &committed),
                 FLPS_OK);
    cr_assert_eq(committed, 1);
    cr_assert_str_eq(S("HGET flps:job:j1:plan version", NULL, NULL), "1");
    cr_assert_str_eq(S("HGET flps:job:j1:plan plan", NULL, NULL),
                     "{\"version\":1}");
    cr_assert_str_eq(S("HGET flps:job:j1:plan created_at", NULL, NULL), "11");
    cr_assert_str_eq(S("HGET flps:job:j1:plan profile_seen", NULL, NULL), "d1");
    cr_assert_eq(sched_store_plan_seen(st, "j1", &version, seen, sizeof(seen)),
                 FLPS_OK);
    cr_assert_eq(version, 1);
    cr_assert_str_eq(seen, "d1");

    /* Planned from version 0 while the plan moved on: nothing written. */
    cr_assert_eq(sched_store_plan_put(st, "me", "j1", 0, "{\"version\":1}",
                                      "d2", 12, "plan", "plan v1", &committed),
                 FLPS_OK);
    cr_assert_eq(committed, 0);
    cr_assert_str_eq(S("HGET flps:job:j1:plan profile_seen", NULL, NULL), "d1");

    /* A refused profile: seen, and the plan stays. */
    cr_assert_eq(sched_store_plan_put(st, "me", "j1", 1, NULL, "d3", 13,
                                      "plan_error", "no plan", &committed),
                 FLPS_OK);
    cr_assert_eq(committed, 1);
    cr_assert_str_eq(S("HGET flps:job:j1:plan version", NULL, NULL), "1");
    cr_assert_str_eq(S("HGET flps:job:j1:plan profile_seen", NULL, NULL), "d3");
    cr_assert_str_eq(S("LINDEX flps:job:j1:events -1", NULL, NULL),
                     "{\"seq\":3,\"time\":13.0,\"type\":\"plan_error\","
                     "\"message\":\"no plan\"}");
    sched_job_fini(&j);
}

Test(sched_store, runs_its_scripts_again_after_redis_forgets_them)
{
    sched_job j = submit(job2, 10);
    sched_fail_result fr;
    int committed = 0, done = 0;
    const char *servers[] = {"n1"}, *workers[] = {"n1", "n1"};
    char *stats;

    sched_job_fini(&j);
    cr_assert_str_eq(S("SCRIPT FLUSH", NULL, NULL), "OK");
    j = submit(job2, 11);
    cr_assert_str_eq(j.id, "j2", "the submit script was loaded again");
    cr_assert_str_eq(S("GET flps:seq:job", NULL, NULL), "2",
                     "a NOSCRIPT reply ran nothing: no number skipped");
    cr_assert_str_eq(S("LLEN flps:job:j2:events", NULL, NULL), "1");
    cr_assert_str_eq(S("SCRIPT FLUSH", NULL, NULL), "OK");
    cr_assert_eq(
        sched_store_place(st, NULL, &j, servers, workers, 12, &committed),
        FLPS_OK, "%s", sched_store_error(st));
    cr_assert_eq(committed, 1);
    cr_assert_str_eq(S("SCRIPT FLUSH", NULL, NULL), "OK");
    cr_assert_eq(sched_store_fail(st, "j2", 0, "boom", 1, 13, &fr), FLPS_OK,
                 "%s", sched_store_error(st));
    cr_assert_eq(fr, SCHED_FAIL_REQUEUED);
    cr_assert_str_eq(S("HGET flps:job:j2 %s", "attempt", NULL), "1");
    cr_assert_str_eq(S("SCRIPT FLUSH", NULL, NULL), "OK");
    cr_assert_eq(sched_store_node_lost(st, "n1", &done), FLPS_OK);
    cr_assert_eq(done, 0, "n1 never registered: nothing to mark");

    /* Every multi-key change ran as a script by SHA1: no transaction, no
     * script text sent with each call. */
    stats = S("INFO commandstats", NULL, NULL);
    cr_assert_not_null(strstr(stats, "cmdstat_evalsha:"), "%s", stats);
    cr_assert_null(strstr(stats, "cmdstat_watch:"), "%s", stats);
    cr_assert_null(strstr(stats, "cmdstat_exec:"), "%s", stats);
    cr_assert_null(strstr(stats, "cmdstat_eval:"), "%s", stats);
    sched_job_fini(&j);
}

Test(sched_store, leaves_out_nodes_whose_names_no_agent_could_have)
{
    sched_node *nodes = NULL;
    size_t n = 0;

    S("SADD flps:nodes %s %s", "n1", "..");
    S("SADD flps:nodes %s %s", "a:b", "-x");
    S("HSET flps:node:n1 cpus 8 memory %s gpus 0 state READY", "8Gi", NULL);
    S("HSET flps:node:.. cpus 64 memory %s gpus 0 state READY", "64Gi", NULL);
    cr_assert_eq(sched_store_nodes(st, &nodes, &n), FLPS_OK);
    cr_assert_eq(n, 1, "only n1 can be placed on");
    cr_assert_str_eq(nodes[0].name, "n1");
    sched_nodes_free(nodes, n);
}
