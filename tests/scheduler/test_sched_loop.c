/* The leader's loop against a real redis-server, with fake nodes
 * registered directly in Redis and exits written as an agent writes them:
 * queue order and priorities, completion with its summary, restarts then
 * FAILED, lost nodes, time limits, leadership. */
#include "scheduler/sched_loop.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "redis_fixture.h"
#include "scheduler/rconn.h"
#include "tests/log_capture.h"

static test_redis srv;
static rconn *rc;
static sched_store *st;
static sched_loop *loop;

static void setup(void)
{
    sched_loop_cfg cfg = {"test-leader", 5000, 6, 0, NULL};

    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    cr_assert_eq(rconn_create(srv.url, 2000, &rc), FLPS_OK);
    cr_assert_eq(sched_store_create(srv.url, 2000, &st), FLPS_OK);
    cr_assert_eq(sched_loop_create(st, &cfg, &loop), FLPS_OK);
}

static void teardown(void)
{
    sched_loop_destroy(loop);
    sched_store_destroy(st);
    rconn_destroy(rc);
    test_redis_stop(&srv);
}

TestSuite(sched_loop, .init = setup, .fini = teardown);

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *S(const char *fmt, const char *a, const char *b)
{
    redisReply *r = NULL;
    static char out[8192];

    cr_assert_eq(rconn_cmd(rc, &r, fmt, a, b), FLPS_OK, "%s", rconn_error(rc));
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        snprintf(out, sizeof(out), "%s", r->str);
    else if (r->type == REDIS_REPLY_INTEGER)
        snprintf(out, sizeof(out), "%lld", r->integer);
    else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0)
        snprintf(out, sizeof(out), "%s", r->element[0]->str);
    else
        out[0] = '\0';
    freeReplyObject(r);
    return out;
}

/* Sorted members of a set, joined by spaces. */
static char *members(const char *key)
{
    redisReply *r = NULL;
    static char out[8192];
    const char *v[256];
    size_t n, off = 0;

    cr_assert_eq(rconn_cmd(rc, &r, "SMEMBERS %s", key), FLPS_OK);
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

/* A node as flagent registers it, alive for ttl_ms. */
static void add_node(const char *name, int cpus, long ttl_ms)
{
    char c[16], ttl[32];
    redisReply *r = NULL;

    snprintf(c, sizeof(c), "%d", cpus);
    snprintf(ttl, sizeof(ttl), "%ld", ttl_ms);
    S("SADD flps:nodes %s", name, NULL);
    cr_assert_eq(rconn_cmd(rc, &r,
                           "HSET flps:node:%s name %s address 127.0.0.1 cpus "
                           "%s memory 68719476736 gpus 0 state READY",
                           name, name, c),
                 FLPS_OK);
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(rc, &r, "SET flps:node:%s:alive 1 PX %s", name, ttl),
                 FLPS_OK);
    freeReplyObject(r);
}

static void submit(const char *text)
{
    jobspec s;
    char err[512];

    cr_assert_eq(jobspec_parse(text, strlen(text), &s, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_eq(
        sched_store_submit(st, &s, text, strlen(text), flps_wall_s(), NULL),
        FLPS_OK, "%s", sched_store_error(st));
}

static void step(void)
{
    cr_assert_eq(sched_loop_step(loop, flps_wall_s(), flps_mono_s()), FLPS_OK,
                 "%s", sched_store_error(st));
}

static const char *state_of(const char *id)
{
    return S("HGET flps:job:%s state", id, NULL);
}

/* What an agent writes when a task's process exits. */
static void agent_exit(const char *key, int code, int sig, const char *done)
{
    redisReply *r = NULL;
    char c[16], s[16], at[32];

    snprintf(c, sizeof(c), "%d", code);
    snprintf(s, sizeof(s), "%d", sig);
    snprintf(at, sizeof(at), "%.3f", flps_wall_s());
    if (done != NULL) {
        cr_assert_eq(rconn_cmd(rc, &r, "HSET %s done %s", key, done), FLPS_OK);
        freeReplyObject(r);
    }
    cr_assert_eq(rconn_cmd(rc, &r,
                           "HSET %s state EXITED exit_code %s signal %s "
                           "exited_at %s",
                           key, c, s, at),
                 FLPS_OK);
    freeReplyObject(r);
    S("RPUSH flps:exits %s", key, NULL);
}

static const char small[] = "name: small\nmodel: mlp\nworkers: 1\n";
static const char three[] = "name: three\nmodel: mlp\nworkers: 2\n";

Test(sched_loop, places_by_priority_then_submission_and_all_or_nothing)
{
    add_node("n1", 4, 30000);
    submit(three);                                     /* j1: 3 CPUs */
    submit(small);                                     /* j2: 2 CPUs */
    submit("name: urgent\nmodel: mlp\npriority: 5\n"); /* j3: 2 CPUs */
    step();
    cr_assert_eq(sched_loop_is_leader(loop), 1);
    cr_assert_str_eq(state_of("j3"), "RUNNING", "the highest priority first");
    cr_assert_str_eq(state_of("j1"), "QUEUED", "3 CPUs do not fit in 2");
    cr_assert_str_eq(state_of("j2"), "QUEUED",
                     "j2 would take what the head j1 is waiting for");
    cr_assert_str_eq(members("flps:node:n1:tasks"),
                     "flps:task:j3:0:server-0 flps:task:j3:0:worker-0");
    cr_assert_str_eq(S("ZRANGE flps:queue 0 0", NULL, NULL), "j1");
    /* j3 ends: j1 goes next, j2 still waits (1 CPU left). */
    agent_exit("flps:task:j3:0:worker-0", 0, 0,
               "{\"event\":\"done\",\"rank\":0,\"iterations\":1000,"
               "\"bytes_sent\":10,\"bytes_received\":20,\"dense_bytes\":40,"
               "\"test_accuracy\":0.5}");
    step();
    cr_assert_str_eq(state_of("j3"), "SUCCEEDED");
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(state_of("j2"), "QUEUED");
    cr_assert_str_eq(members("flps:node:n1:tasks"),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0 "
                     "flps:task:j1:0:worker-1");
}

Test(sched_loop, spreads_servers_and_packs_workers_over_fake_nodes)
{
    add_node("n1", 3, 30000);
    add_node("n2", 3, 30000);
    submit("name: wide\nmodel: mlp\nservers: 2\nworkers: 4\n");
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(members("flps:node:n1:tasks"),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0 "
                     "flps:task:j1:0:worker-1");
    cr_assert_str_eq(members("flps:node:n2:tasks"),
                     "flps:task:j1:0:server-1 flps:task:j1:0:worker-2 "
                     "flps:task:j1:0:worker-3");
}

Test(sched_loop, succeeds_when_every_worker_exits_zero_with_the_summary)
{
    json_t *sum;
    double started;

    add_node("n1", 8, 30000);
    submit(three);
    step();
    started = atof(S("HGET flps:job:j1 started_at", NULL, NULL));
    agent_exit("flps:task:j1:0:worker-1", 0, 0,
               "{\"event\":\"done\",\"rank\":1,\"iterations\":600,"
               "\"bytes_sent\":100,\"bytes_received\":200,\"dense_bytes\":"
               "1000,\"resends\":0,\"seconds\":1.5}");
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING", "one worker of two is done");
    sleep_ms(50);
    agent_exit("flps:task:j1:0:worker-0", 0, 0,
               "{\"event\":\"done\",\"rank\":0,\"iterations\":600,"
               "\"bytes_sent\":7,\"bytes_received\":9,\"dense_bytes\":1000,"
               "\"resends\":0,\"test_accuracy\":0.8768,\"test_loss\":0.3,"
               "\"seconds\":1.6}");
    step();
    cr_assert_str_eq(state_of("j1"), "SUCCEEDED");
    sum = json_loads(S("HGET flps:job:j1 summary", NULL, NULL), 0, NULL);
    cr_assert_not_null(sum);
    cr_assert_eq(json_object_size(sum), 6);
    cr_assert_eq(json_real_value(json_object_get(sum, "test_accuracy")),
                 0.8768);
    cr_assert_eq(json_integer_value(json_object_get(sum, "iterations")), 600);
    cr_assert_eq(json_integer_value(json_object_get(sum, "bytes_sent")), 107);
    cr_assert_eq(json_integer_value(json_object_get(sum, "bytes_received")),
                 209);
    cr_assert_eq(json_integer_value(json_object_get(sum, "dense_bytes")), 2000);
    {
        double wall = json_real_value(json_object_get(sum, "wall_seconds"));
        double last =
            atof(S("HGET flps:task:j1:0:worker-0 exited_at", NULL, NULL));
        cr_assert(fabs(wall - (last - started)) < 0.002, "wall %f", wall);
    }
    json_decref(sum);
    cr_assert_str_eq(members("flps:node:n1:tasks"), "",
                     "the agents stop the servers");
    /* The servers' exits after the end change nothing. */
    agent_exit("flps:task:j1:0:server-0", 0, 15, NULL);
    step();
    cr_assert_str_eq(state_of("j1"), "SUCCEEDED");
}

Test(sched_loop, the_summary_says_what_ran_against_the_file_and_what_is_missing)
{
    json_t *sum;
    char *mis;

    add_node("n1", 8, 30000);
    submit("name: told\nmodel: mlp\nworkers: 2\ncompression: gtopk:0.01\n"
           "command: python3 t.py\n");
    step();
    /* A program that ignored the job file's codec, and printed no test
     * accuracy: the job still succeeds, and its summary says both. */
    for (int rank = 1; rank >= 0; rank--) {
        json_t *d =
            json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:i}",
                      "event", "done", "rank", rank, "iterations", 5,
                      "bytes_sent", 100, "bytes_received", 200, "dense_bytes",
                      100, "resends", 0, "compression", "dense", "mode", "ssgd",
                      "optimizer", "Adam", "seconds", 1);
        char key[64], *done = json_dumps(d, JSON_COMPACT);

        snprintf(key, sizeof(key), "flps:task:j1:0:worker-%d", rank);
        agent_exit(key, 0, 0, done);
        free(done);
        json_decref(d);
    }
    step();
    cr_assert_str_eq(state_of("j1"), "SUCCEEDED");
    sum = json_loads(S("HGET flps:job:j1 summary", NULL, NULL), 0, NULL);
    cr_assert_not_null(sum);
    cr_assert(json_is_null(json_object_get(sum, "test_accuracy")));
    cr_assert_str_eq(json_string_value(json_object_get(sum, "compression")),
                     "dense");
    cr_assert_str_eq(json_string_value(json_object_get(sum, "mode")), "ssgd");
    cr_assert_str_eq(json_string_value(json_object_get(sum, "optimizer")),
                     "Adam");
    mis = json_dumps(json_object_get(sum, "mismatch"), 0);
    cr_assert_str_eq(mis,
                     "[\"compression: the job file says gtopk:0.01, "
                     "the workers ran dense\"]",
                     "mode: the file leaves it to the program");
    free(mis);
    mis = json_dumps(json_object_get(sum, "not_reported"), 0);
    cr_assert_str_eq(mis, "[\"test_accuracy\"]");
    free(mis);
    json_decref(sum);
}

/* A worker task of rank index on node that printed done. */
static sched_task energy_task(uint32_t index, const char *node,
                              const char *fields)
{
    sched_task t;
    char line[512];

    memset(&t, 0, sizeof(t));
    snprintf(t.role, sizeof(t.role), "worker");
    snprintf(t.node, sizeof(t.node), "%s", node);
    t.index = index;
    snprintf(line, sizeof(line),
             "{\"event\":\"done\",\"rank\":%u,\"iterations\":10,"
             "\"bytes_sent\":1,\"bytes_received\":1,\"dense_bytes\":1,"
             "\"resends\":0,\"energy_method\":\"counter\"%s,\"seconds\":1}",
             index, fields);
    t.done = strdup(line);
    return t;
}

Test(sched_loop, the_summary_counts_a_nodes_packages_once_and_names_the_clock)
{
    sched_task tasks[3];
    sched_job job;
    char *text = NULL;
    json_t *sum;

    tasks[0] = energy_task(0, "n1",
                           ",\"joules_per_iteration\":14,"
                           "\"gpu_joules_per_iteration\":10,"
                           "\"cpu_joules_per_iteration\":4,"
                           "\"energy_gpus\":\"0\",\"gpu_clock_mhz\":1680");
    tasks[1] = energy_task(1, "n1",
                           ",\"joules_per_iteration\":16,"
                           "\"gpu_joules_per_iteration\":10,"
                           "\"cpu_joules_per_iteration\":6,"
                           "\"energy_gpus\":\"1\",\"gpu_clock_mhz\":1680");
    tasks[2] = energy_task(2, "n2",
                           ",\"joules_per_iteration\":13,"
                           "\"gpu_joules_per_iteration\":10,"
                           "\"cpu_joules_per_iteration\":3,"
                           "\"energy_gpus\":\"0\",\"gpu_clock_mhz\":1680");
    memset(&job, 0, sizeof(job));
    snprintf(job.id, sizeof(job.id), "j1");
    job.workers = 3;
    job.tasks = tasks;
    job.ntasks = 3;
    cr_assert_eq(sched_loop_summary(&job, &text), FLPS_OK);
    sum = json_loads(text, 0, NULL);
    cr_assert_not_null(sum, "%s", text);
    cr_assert_float_eq(
        json_real_value(json_object_get(sum, "gpu_joules_per_iteration")), 30,
        1e-9, "three workers' own GPUs: %s", text);
    cr_assert_float_eq(
        json_real_value(json_object_get(sum, "cpu_joules_per_iteration")),
        5 + 3, 1e-9, "n1's packages once (its workers' mean), n2's: %s", text);
    cr_assert_float_eq(
        json_real_value(json_object_get(sum, "joules_per_iteration")), 38,
        1e-9);
    cr_assert_str_eq(json_string_value(json_object_get(sum, "energy_method")),
                     "counter");
    cr_assert_str_eq(json_string_value(json_object_get(sum, "gpu_clock")),
                     "1680");
    json_decref(sum);
    flps_free(text);
    for (int i = 0; i < 3; i++)
        free(tasks[i].done);
}

Test(sched_loop, a_failed_workers_last_error_line_is_the_jobs_reason)
{
    add_node("n1", 8, 30000);
    submit("name: cmd\nmodel: mlp\nworkers: 2\ncommand: python3 t.py\n");
    step();
    /* flagent keeps the program's last stderr line with the exit. */
    S("HSET flps:task:j1:0:worker-1 error %s", "ValueError: no data in /data",
      NULL);
    agent_exit("flps:task:j1:0:worker-1", 1, 0, NULL);
    step();
    cr_assert_str_eq(state_of("j1"), "FAILED");
    cr_assert_str_eq(S("HGET flps:job:j1 reason", NULL, NULL),
                     "worker-1 on n1 exited with status 1: ValueError: no "
                     "data in /data");
}

Test(sched_loop, restarts_a_failed_job_then_fails_it_when_restarts_run_out)
{
    add_node("n1", 8, 30000);
    submit("name: flaky\nmodel: mlp\nworkers: 2\nmax_restarts: 1\n");
    step();
    agent_exit("flps:task:j1:0:worker-1", 1, 0, NULL);
    step();
    /* Requeued and placed again in the same turn, as attempt 1. */
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(S("HGET flps:job:j1 attempt", NULL, NULL), "1");
    cr_assert_str_eq(S("HGET flps:job:j1 restarts", NULL, NULL), "1");
    cr_assert_str_eq(S("HGET flps:job:j1 reason", NULL, NULL),
                     "worker-1 on n1 exited with status 1");
    cr_assert_str_eq(members("flps:node:n1:tasks"),
                     "flps:task:j1:1:server-0 flps:task:j1:1:worker-0 "
                     "flps:task:j1:1:worker-1");
    /* A late exit of the old attempt is ignored. */
    agent_exit("flps:task:j1:0:server-0", 0, 15, NULL);
    step();
    cr_assert_str_eq(S("HGET flps:job:j1 attempt", NULL, NULL), "1");
    agent_exit("flps:task:j1:1:server-0", 0, 9, NULL);
    step();
    cr_assert_str_eq(state_of("j1"), "FAILED");
    cr_assert_str_eq(S("HGET flps:job:j1 reason", NULL, NULL),
                     "server-0 on n1 was killed by signal 9");
    cr_assert_str_eq(members("flps:node:n1:tasks"), "");
    cr_assert_str_eq(S("ZCARD flps:queue", NULL, NULL), "0");
}

Test(sched_loop, a_node_whose_alive_key_expires_is_lost_with_its_jobs)
{
    add_node("n1", 4, 600);
    add_node("n2", 4, 30000);
    submit(small); /* j1 on n1 */
    step();
    cr_assert_str_eq(members("flps:node:n1:tasks"),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0");
    sleep_ms(200);
    step();
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "READY");
    sleep_ms(500);
    step();
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "LOST");
    cr_assert_str_eq(state_of("j1"), "FAILED");
    cr_assert_str_eq(S("HGET flps:job:j1 reason", NULL, NULL), "node n1 lost");
    cr_assert_str_eq(members("flps:node:n1:tasks"), "");
    cr_assert_str_eq(members("flps:node:n2:tasks"), "",
                     "a failed job is not placed again");
    /* A lost node that heartbeats again is READY and gets work. */
    S("SET flps:node:n1:alive 1 PX %s", "30000", NULL);
    submit(small);
    step();
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "READY");
    cr_assert_str_eq(state_of("j2"), "RUNNING");
}

Test(sched_loop, fails_a_job_past_its_time_limit_without_restart)
{
    add_node("n1", 4, 30000);
    submit("name: short\nmodel: mlp\ntime_limit: 1\nmax_restarts: 3\n");
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    sleep_ms(1100);
    step();
    cr_assert_str_eq(state_of("j1"), "FAILED");
    cr_assert_str_eq(S("HGET flps:job:j1 reason", NULL, NULL),
                     "time limit of 1 s exceeded");
}

Test(sched_loop, backfills_a_short_job_around_a_waiting_head)
{
    add_node("n1", 4, 30000);
    submit("name: long\nmodel: mlp\nworkers: 1\ntime_limit: 3600\n"); /* 2 */
    submit("name: head\nmodel: mlp\nworkers: 3\n");                   /* 4 */
    submit("name: quick\nmodel: mlp\nworkers: 1\ntime_limit: 60\n");  /* 2 */
    submit("name: endless\nmodel: mlp\nworkers: 1\n");                /* 2 */
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(state_of("j3"), "QUEUED",
                     "j1 was placed this turn: when it ends is not known yet");
    step();
    cr_assert_str_eq(state_of("j2"), "QUEUED");
    cr_assert_str_eq(state_of("j3"), "RUNNING", "ends long before j1 does");
    cr_assert_str_eq(state_of("j4"), "QUEUED", "no time_limit, no remainder");
}

Test(sched_loop, only_the_lease_holder_places_and_another_takes_over)
{
    sched_store *st2 = NULL;
    sched_loop *other = NULL;
    sched_loop_cfg cfg = {"other", 600, 6, 0, NULL};

    cr_assert_eq(sched_store_create(srv.url, 2000, &st2), FLPS_OK);
    cr_assert_eq(sched_loop_create(st2, &cfg, &other), FLPS_OK);
    add_node("n1", 4, 30000);
    cr_assert_eq(sched_loop_step(other, flps_wall_s(), flps_mono_s()), FLPS_OK);
    cr_assert_eq(sched_loop_is_leader(other), 1);
    step();
    cr_assert_eq(sched_loop_is_leader(loop), 0);
    submit(small);
    step();
    cr_assert_str_eq(state_of("j1"), "QUEUED", "a follower places nothing");
    /* "other" stops (as if killed): its lease runs out after 600 ms. */
    sleep_ms(1100);
    step();
    cr_assert_eq(sched_loop_is_leader(loop), 1);
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(S("GET flps:leader", NULL, NULL), "test-leader");
    /* The old leader's next turn sees it lost the lease. */
    cr_assert_eq(sched_loop_step(other, flps_wall_s(), flps_mono_s() + 1),
                 FLPS_OK);
    cr_assert_eq(sched_loop_is_leader(other), 0);
    sched_loop_destroy(other);
    sched_store_destroy(st2);
    cr_assert_str_eq(S("GET flps:leader", NULL, NULL), "test-leader",
                     "a follower's exit leaves the lease alone");
}

Test(sched_loop, a_new_leader_finds_exits_whose_report_was_lost)
{
    add_node("n1", 4, 30000);
    submit(small);
    step();
    /* The exit was popped by a leader that then died: only the task hash
     * says the worker ended. */
    agent_exit("flps:task:j1:0:worker-0", 0, 0,
               "{\"event\":\"done\",\"rank\":0,\"iterations\":1,"
               "\"bytes_sent\":1,\"bytes_received\":1,\"dense_bytes\":1,"
               "\"test_accuracy\":0.1}");
    S("DEL flps:exits", NULL, NULL);
    sched_loop_destroy(loop);
    {
        sched_loop_cfg cfg = {"successor", 5000, 6, 0, NULL};
        cr_assert_eq(sched_loop_create(st, &cfg, &loop), FLPS_OK);
    }
    step();
    cr_assert_str_eq(state_of("j1"), "SUCCEEDED");
}

/* ---- transport: rdma | auto ---- */

/* What flagent publishes of a node's RDMA ports (scheduler/agent_facts.c). */
static void give_rdma(const char *name, const char *ports)
{
    redisReply *r = NULL;

    cr_assert_eq(rconn_cmd(rc, &r,
                           "HSET flps:node:%s:facts rdma_active_ports %s "
                           "rdma_ports mlx5_0:1",
                           name, ports),
                 FLPS_OK);
    freeReplyObject(r);
}

/* The events of job id, one JSON text per line. */
static char *events_of(const char *id)
{
    redisReply *r = NULL;
    static char out[16384];
    size_t off = 0;

    cr_assert_eq(rconn_cmd(rc, &r, "LRANGE flps:job:%s:events 0 -1", id),
                 FLPS_OK);
    out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++)
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s\n",
                                r->element[i]->str);
    freeReplyObject(r);
    return out;
}

Test(sched_loop, places_an_rdma_job_only_on_the_node_with_an_active_port)
{
    add_node("n1", 8, 30000); /* first in name order, most room, no RDMA */
    add_node("n2", 4, 30000);
    give_rdma("n2", "1");
    give_rdma("n1", "0");
    submit("name: r\nmodel: mlp\nworkers: 2\ntransport: rdma\n");
    submit("name: z\nmodel: mlp\nworkers: 1\n");
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(members("flps:node:n2:tasks"),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0 "
                     "flps:task:j1:0:worker-1");
    cr_assert_str_eq(members("flps:node:n1:tasks"),
                     "flps:task:j2:0:server-0 flps:task:j2:0:worker-0",
                     "the ZeroMQ job may go anywhere");
    cr_assert_str_eq(S("HGET flps:job:%s transport_used", "j1", NULL), "rdma");
    cr_assert_str_eq(S("HGET flps:task:j1:0:worker-1 transport", NULL, NULL),
                     "rdma", "flagent passes it to the processes");
    cr_assert_str_eq(S("HGET flps:job:%s transport_used", "j2", NULL), "zmq");
}

/* The loop reads the job file's settings from the hash's fields; a hash
 * from a flsched before them has only its spec, which is read instead. */
Test(sched_loop, servers_auto_puts_shard_i_on_worker_is_node)
{
    add_node("n1", 4, 30000);
    add_node("n2", 4, 30000);
    /* Apart, the 2 workers would pack onto n1 (test above). */
    submit("name: beside\nmodel: mlp\nservers: auto\nworkers: 2\n");
    cr_assert_str_eq(S("HGET flps:job:%s placement", "j1", NULL), "beside");
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(members("flps:node:n1:tasks"),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0");
    cr_assert_str_eq(members("flps:node:n2:tasks"),
                     "flps:task:j1:0:server-1 flps:task:j1:0:worker-1");
}

Test(sched_loop, servers_auto_of_a_hash_without_the_field_comes_from_its_spec)
{
    redisReply *r = NULL;

    add_node("n1", 8, 30000);
    add_node("n2", 8, 30000);
    submit("name: old\nmodel: mlp\nservers: auto\nworkers: 2\n");
    cr_assert_eq(
        rconn_cmd(rc, &r, "HDEL flps:job:j1 placement transport compression"),
        FLPS_OK);
    freeReplyObject(r);
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    /* Apart, both workers would pack onto n1. */
    cr_assert_str_eq(members("flps:node:n2:tasks"),
                     "flps:task:j1:0:server-1 flps:task:j1:0:worker-1");
}

Test(sched_loop, reads_the_transport_of_a_hash_without_the_fields_from_its_spec)
{
    redisReply *r = NULL;

    add_node("n1", 8, 30000);
    add_node("n2", 4, 30000);
    give_rdma("n2", "1");
    give_rdma("n1", "0");
    submit("name: r\nmodel: mlp\nworkers: 2\ntransport: rdma\n");
    cr_assert_eq(rconn_cmd(rc, &r, "HDEL flps:job:j1 transport compression"),
                 FLPS_OK);
    freeReplyObject(r);
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(members("flps:node:n2:tasks"),
                     "flps:task:j1:0:server-0 flps:task:j1:0:worker-0 "
                     "flps:task:j1:0:worker-1");
    cr_assert_str_eq(S("HGET flps:job:%s transport_used", "j1", NULL), "rdma");
}

Test(sched_loop, an_rdma_job_waits_while_the_rdma_nodes_are_full)
{
    add_node("n1", 8, 30000);
    add_node("n2", 2, 30000);
    give_rdma("n2", "1");
    submit("name: r\nmodel: mlp\nworkers: 2\ntransport: rdma\n");
    step();
    cr_assert_str_eq(state_of("j1"), "QUEUED",
                     "3 CPUs do not fit the 2-CPU RDMA node, n1 has none");
    cr_assert_str_eq(members("flps:node:n1:tasks"), "");
}

Test(sched_loop, auto_takes_rdma_when_every_node_of_the_job_has_it)
{
    add_node("n1", 3, 30000);
    add_node("n2", 3, 30000);
    give_rdma("n1", "1");
    give_rdma("n2", "2");
    submit("name: a\nmodel: mlp\nservers: 2\nworkers: 4\ntransport: auto\n");
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(S("HGET flps:job:%s transport_used", "j1", NULL), "rdma");
    cr_assert_str_eq(S("HGET flps:job:%s transport", "j1", NULL), "auto",
                     "the job file's word stays for a restart to decide again");
    cr_assert_str_eq(S("HGET flps:task:j1:0:server-1 transport", NULL, NULL),
                     "rdma");
    cr_assert(strstr(events_of("j1"),
                     "\"type\":\"transport\",\"message\":\"transport: auto: "
                     "RDMA, because every node the job was placed on reports "
                     "an ACTIVE RDMA port\"") != NULL,
              "%s", events_of("j1"));
}

Test(sched_loop, auto_falls_back_to_zeromq_naming_a_node_without_rdma)
{
    add_node("n1", 3, 30000);
    add_node("n2", 3, 30000);
    give_rdma("n1", "1"); /* n2 publishes nothing: no RDMA */
    submit("name: a\nmodel: mlp\nservers: 2\nworkers: 4\ntransport: auto\n");
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING",
                     "auto is placed as a ZeroMQ job is");
    cr_assert_str_eq(S("HGET flps:job:%s transport_used", "j1", NULL), "zmq");
    cr_assert_str_eq(S("HGET flps:task:j1:0:worker-0 transport", NULL, NULL),
                     "zmq");
    cr_assert(strstr(events_of("j1"),
                     "transport: auto: ZeroMQ, because node n2 the job was "
                     "placed on reports no ACTIVE RDMA port") != NULL,
              "%s", events_of("j1"));
}

Test(sched_loop,
     a_redis_outage_is_logged_when_it_starts_each_minute_and_when_it_ends)
{
    double mono = flps_mono_s();

    add_node("n1", 4, 30000);
    step();
    cr_assert_eq(sched_loop_is_leader(loop), 1);
    test_log_begin();
    test_redis_stop(&srv);
    /* Two simulated minutes of turns 200 ms apart, as flsched makes them:
     * every turn fails until the lease (5 s) runs out, then every lease
     * attempt (one a second). */
    for (int i = 0; i < 600; i++)
        sched_loop_step(loop, flps_wall_s(), mono + 0.2 * i);
    test_log_end();
    cr_assert_eq(sched_loop_is_leader(loop), 0);
    cr_assert_eq(test_log_count("scheduling turn stopped: "), 1,
                 "the turns' failure once, not per turn:\n%s", test_logged);
    cr_assert_eq(test_log_count("cannot reach the lease: "), 2,
                 "the lease's failure when it starts and a minute later:\n%s",
                 test_logged);
    cr_assert_eq(test_log_count("(still, "), 1, "%s", test_logged);
    cr_assert_lt(test_log_count("\n"), 8, "%s", test_logged);
    /* Redis back on the same port: the next lease attempt says so, once. */
    cr_assert_eq(test_redis_exec(&srv, 0), 0);
    test_log_begin();
    for (int i = 0; i < 20; i++)
        sched_loop_step(loop, flps_wall_s(), mono + 120 + 0.2 * i);
    test_log_end();
    cr_assert_eq(sched_loop_is_leader(loop), 1, "%s", test_logged);
    cr_assert_eq(test_log_count("cannot reach the lease no more: it failed "),
                 1, "%s", test_logged);
    cr_assert_eq(test_log_count("cannot reach the lease: "), 0, "%s",
                 test_logged);
    cr_assert_eq(test_log_count("scheduling turn stopped: "), 0, "%s",
                 test_logged);
}

/* Redis paused for the length of pause_ms while step() runs: the step's
 * calls wait (or time out after the store's 2 s) meanwhile. */
static flps_err step_through_pause(long pause_ms, double mono)
{
    pid_t waker;
    flps_err err;

    cr_assert_eq(kill(srv.pid, SIGSTOP), 0);
    waker = fork();
    cr_assert_geq(waker, 0);
    if (waker == 0) {
        sleep_ms(pause_ms);
        kill(srv.pid, SIGCONT);
        _exit(0);
    }
    err = sched_loop_step(loop, flps_wall_s(), mono);
    waitpid(waker, NULL, 0);
    return err;
}

Test(sched_loop, a_redis_outage_is_not_a_node_failure)
{
    double mono = flps_mono_s();

    add_node("n1", 4, 30000);
    submit(small); /* j1 on n1 */
    step();
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    /* Redis away for longer than the store's timeout: the turn fails,
     * and the node's alive key expired meanwhile. */
    cr_assert_neq(step_through_pause(3000, mono), FLPS_OK);
    S("DEL flps:node:n1:alive", NULL, NULL);
    for (int i = 1; i <= 25; i++) /* 5 s of turns, within the 6 s grace */
        cr_assert_eq(sched_loop_step(loop, flps_wall_s(), mono + 0.2 * i),
                     FLPS_OK);
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "READY",
                     "the node was judged while its agent could not "
                     "register again");
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    /* Its agent registers again: nothing happened. */
    S("SET flps:node:n1:alive 1 PX %s", "30000", NULL);
    cr_assert_eq(sched_loop_step(loop, flps_wall_s(), mono + 10), FLPS_OK);
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "READY");
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    cr_assert_str_eq(S("HGET flps:job:j1 restarts", NULL, NULL), "0");
}

Test(sched_loop, a_paused_redis_counts_as_an_outage_too)
{
    double mono = flps_mono_s();

    add_node("n1", 4, 30000);
    submit(small);
    step();
    /* Paused for 1.5 s, under the store's timeout: the turn succeeds, late,
     * and finds the key gone (expired while the agent timed out). */
    S("DEL flps:node:n1:alive", NULL, NULL);
    cr_assert_eq(step_through_pause(1500, mono), FLPS_OK);
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "READY");
    cr_assert_eq(sched_loop_step(loop, flps_wall_s(), mono + 5), FLPS_OK);
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "READY");
    cr_assert_str_eq(state_of("j1"), "RUNNING");
    /* Past the grace a node that never came back is lost, as always. */
    cr_assert_eq(sched_loop_step(loop, flps_wall_s(), mono + 8), FLPS_OK);
    cr_assert_str_eq(S("HGET flps:node:n1 state", NULL, NULL), "LOST");
    cr_assert_str_eq(state_of("j1"), "FAILED");
    cr_assert_str_eq(S("HGET flps:job:j1 reason", NULL, NULL), "node n1 lost");
}
