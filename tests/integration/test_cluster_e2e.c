/* The whole control plane for real: redis-server, flsched and two flagents
 * on loopback, jobs submitted and followed with flsubmit, real flps and
 * flworker processes. Two agents whose CPUs fit two jobs at once: the third
 * queues and runs when one ends; cancel stops every process of a job;
 * flsched killed mid-job and restarted loses nothing; an agent killed gets
 * its node marked lost and the job restarted from its checkpoints on the
 * other node. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../scheduler/redis_fixture.h"
#include "runcmd.h"
#include "spawn.h"

#define HEARTBEAT_S 1

typedef struct cluster {
    test_redis redis;
    char dir[64];
    char api[160]; /* http://127.0.0.1:PORT */
    pid_t sched;
    pid_t agent[2];
} cluster;

static cluster cl;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void start_sched(void)
{
    char log[128], bound[128];
    const char *args[] = {"--redis",    cl.redis.url, "--listen", "127.0.0.1:0",
                          "--lease-ms", "2000",       NULL};

    snprintf(log, sizeof(log), "%s/flsched.log", cl.dir);
    cl.sched =
        test_spawn("flsched", args, log, "listening on ", bound, sizeof(bound));
    cr_assert_gt(cl.sched, 0, "flsched did not start; see %s", log);
    snprintf(cl.api, sizeof(cl.api), "http://%s", bound);
}

static void start_agent(int i)
{
    char log[128], name[16], work[128], hb[16], ckpt[128];
    const char *args[] = {"--redis",     cl.redis.url, "--name",
                          name,          "--cpus",     "2",
                          "--memory",    "4Gi",        "--gpus",
                          "0",           "--work-dir", work,
                          "--heartbeat", hb,           "--checkpoint-root",
                          ckpt,          NULL};

    snprintf(name, sizeof(name), "n%d", i + 1);
    snprintf(log, sizeof(log), "%s/flagent-%s.log", cl.dir, name);
    snprintf(work, sizeof(work), "%s/%s", cl.dir, name);
    snprintf(hb, sizeof(hb), "%d", HEARTBEAT_S);
    /* One checkpoint directory for both nodes, as shared storage would
     * be: a job restarted on the other node restores. */
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints", cl.dir);
    cl.agent[i] = test_spawn("flagent", args, log, NULL, NULL, 0);
    cr_assert_gt(cl.agent[i], 0);
}

static void stop(pid_t *pid, int sig)
{
    if (*pid > 0) {
        kill(*pid, sig);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

/* Run flsubmit against the cluster; returns its parsed --json output. */
static json_t *flsubmit_json(const char *args, int want_status)
{
    char cmd[1024];
    run_result r;
    json_t *o;

    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit --json %s",
             cl.api, FLPS_BIN_DIR, args);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, want_status, "flsubmit %s exited %d:\n%s%s", args,
                 r.status, r.out, r.err);
    o = r.summary ? json_incref(r.summary) : NULL;
    run_free(&r);
    return o;
}

static char *submit(const char *yaml)
{
    char path[160], args[200];
    FILE *f;
    json_t *o;
    char *id;
    static int n;

    snprintf(path, sizeof(path), "%s/job%d.yaml", cl.dir, n++);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(yaml, f);
    fclose(f);
    snprintf(args, sizeof(args), "submit %s", path);
    o = flsubmit_json(args, 0);
    cr_assert_not_null(o, "submit printed no JSON");
    id = strdup(json_string_value(json_object_get(o, "id")));
    json_decref(o);
    return id;
}

static json_t *status(const char *id)
{
    char args[64];
    snprintf(args, sizeof(args), "status %s", id);
    return flsubmit_json(args, 0);
}

static const char *state_of(json_t *job)
{
    return json_string_value(json_object_get(job, "state"));
}

static double num_of(json_t *job, const char *k)
{
    json_t *v = json_object_get(job, k);
    return json_is_number(v) ? json_number_value(v) : -1;
}

/* Poll until the job reaches state (or fail after timeout_s). */
static json_t *wait_state(const char *id, const char *want, int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++) {
        json_t *j = status(id);
        if (strcmp(state_of(j), want) == 0)
            return j;
        if (strcmp(want, "RUNNING") != 0 &&
            (strcmp(state_of(j), "FAILED") == 0 ||
             strcmp(state_of(j), "CANCELLED") == 0))
            cr_assert_fail("job %s ended %s waiting for %s: %s", id,
                           state_of(j), want,
                           json_string_value(json_object_get(j, "reason")));
        json_decref(j);
        sleep_ms(200);
    }
    cr_assert_fail("job %s did not reach %s within %d s", id, want, timeout_s);
    return NULL;
}

/* Poll until the job reports at least min_iter iterations done. */
static void wait_progress(const char *id, double min_iter, int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++) {
        json_t *j = status(id);
        json_t *it =
            json_object_get(json_object_get(j, "progress"), "iteration");
        int done = json_is_number(it) && json_number_value(it) >= min_iter;
        json_decref(j);
        if (done)
            return;
        sleep_ms(200);
    }
    cr_assert_fail("job %s did not reach iteration %.0f within %d s", id,
                   min_iter, timeout_s);
}

static void setup(void)
{
    memset(&cl, 0, sizeof(cl));
    snprintf(cl.dir, sizeof(cl.dir), "/tmp/flps-e2e-XXXXXX");
    cr_assert_not_null(mkdtemp(cl.dir));
    cr_assert_eq(test_redis_start(&cl.redis), 0, "redis-server did not start");
    start_sched();
    start_agent(0);
    start_agent(1);
    /* Both nodes READY before anything is submitted. */
    for (int i = 0; i < 50; i++) {
        json_t *o = flsubmit_json("nodes", 0);
        json_t *nodes = json_object_get(o, "nodes");
        size_t n = json_array_size(nodes);
        json_decref(o);
        if (n == 2)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("the agents did not register");
}

static void teardown(void)
{
    stop(&cl.agent[0], SIGTERM);
    stop(&cl.agent[1], SIGTERM);
    stop(&cl.sched, SIGTERM);
    test_redis_stop(&cl.redis);
}

TestSuite(cluster_e2e, .init = setup, .fini = teardown, .timeout = 240);

/* One server and one worker: 2 CPUs, exactly one node's worth. */
#define SMALL_JOB(name, iters, extra)                                          \
    "name: " name "\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"             \
    "servers: 1\niterations: " iters "\nbatch_size: 32\n"                      \
    "compression: topk:0.01\neval_every: 0\n" extra

Test(cluster_e2e, three_jobs_on_two_nodes_run_two_at_a_time_and_all_succeed)
{
    char *a = submit(SMALL_JOB("a", "1500", ""));
    char *b = submit(SMALL_JOB("b", "1500", ""));
    char *c = submit(SMALL_JOB("c", "300", ""));
    json_t *ja, *jb, *jc;

    ja = wait_state(a, "RUNNING", 30);
    jb = wait_state(b, "RUNNING", 30);
    jc = status(c);
    cr_assert_str_eq(state_of(jc), "QUEUED",
                     "the third job must wait while two fill the nodes");
    json_decref(ja);
    json_decref(jb);
    json_decref(jc);

    ja = wait_state(a, "SUCCEEDED", 120);
    jb = wait_state(b, "SUCCEEDED", 120);
    jc = wait_state(c, "SUCCEEDED", 120);
    cr_assert_geq(num_of(jc, "started_at"),
                  fmin(num_of(ja, "finished_at"), num_of(jb, "finished_at")) -
                      0.5,
                  "c started before a node was free");
    {
        json_t *sum = json_object_get(jc, "summary");
        cr_assert_not_null(sum, "a finished job carries its summary");
        cr_assert_geq(json_number_value(json_object_get(sum, "test_accuracy")),
                      0.9);
        cr_assert_eq(json_number_value(json_object_get(sum, "iterations")),
                     300);
        cr_assert_gt(json_number_value(json_object_get(sum, "bytes_sent")), 0);
    }
    {
        /* The job's data plane was authenticated with credentials flsched
         * made and flagent wrote 0600 for each task; the secret is in no
         * log line and not in the API's answer. */
        char cmd[1024], api[160];
        FILE *f;
        snprintf(api, sizeof(api), "%s/status-c.json", cl.dir);
        f = fopen(api, "w");
        cr_assert_not_null(f);
        cr_assert_eq(json_dumpf(jc, f, JSON_COMPACT), 0);
        fclose(f);
        snprintf(cmd, sizeof(cmd),
                 "set -e; f=$(ls %s/n*/%s/server-0.credentials | head -1); "
                 "test \"$(stat -c %%a \"$f\")\" = 600; "
                 "s=$(sed -n 's/^secret=//p' \"$f\"); test ${#s} -eq 64; "
                 "grep -q 'data plane authenticated' "
                 "%s/n*/%s/attempt-*/server-0.log; "
                 "if grep -rq --include='*.log' \"$s\" %s; then exit 1; fi; "
                 "if grep -q \"$s\" %s; then exit 1; fi",
                 cl.dir, c, cl.dir, c, cl.dir, api);
        cr_assert_eq(system(cmd), 0, "credentials check failed: %s", cmd);
    }
    json_decref(ja);
    json_decref(jb);
    json_decref(jc);
    free(a);
    free(b);
    free(c);
}

static int processes_of(const char *id)
{
    char cmd[160];
    /* "[-]" keeps the pattern from matching the shell running pgrep. */
    snprintf(cmd, sizeof(cmd), "pgrep -f -- '[-]-job(-id)? %s( |$)' >/dev/null",
             id);
    return system(cmd) == 0;
}

Test(cluster_e2e, cancel_stops_every_process_of_the_job)
{
    char *id = submit(SMALL_JOB("long", "1000000", ""));
    char args[64];
    json_t *j = wait_state(id, "RUNNING", 30);
    int alive = 0;

    json_decref(j);
    for (int i = 0; i < 50 && !alive; i++) {
        alive = processes_of(id);
        sleep_ms(100);
    }
    cr_assert(alive, "the job's processes never started");
    snprintf(args, sizeof(args), "cancel %s", id);
    j = flsubmit_json(args, 0);
    json_decref(j);
    j = wait_state(id, "CANCELLED", 10);
    json_decref(j);
    for (int i = 0; i < 150 && alive; i++) {
        sleep_ms(100);
        alive = processes_of(id);
    }
    cr_assert(!alive, "a process of the cancelled job is still running");
    free(id);
}

Test(cluster_e2e, flsched_killed_mid_job_and_restarted_loses_nothing)
{
    char *id = submit(SMALL_JOB("survivor", "3000", ""));
    json_t *j = wait_state(id, "RUNNING", 30);

    json_decref(j);
    wait_progress(id, 200, 60);
    stop(&cl.sched, SIGKILL);
    sleep_ms(1000);
    start_sched();
    j = wait_state(id, "SUCCEEDED", 150);
    cr_assert_eq(num_of(j, "attempt"), 0, "the job was run twice");
    cr_assert_eq(num_of(j, "restarts"), 0);
    json_decref(j);
    free(id);
}

/* The highest start_iteration a worker of the job announced in its log
 * ({"event":"start",...} lines, streamed by the agents). */
static double resumed_at(const char *id)
{
    char cmd[512];
    run_result r;
    double best = -1;
    char *line, *save = NULL;

    /* --events: the event lines are hidden from people otherwise. */
    snprintf(cmd, sizeof(cmd),
             "FLPS_SCHEDULER=%s %s/flsubmit --json logs --events %s", cl.api,
             FLPS_BIN_DIR, id);
    run_cmd(cmd, &r);
    for (line = strtok_r(r.out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *o = json_loads(line, 0, NULL), *ev;
        const char *text = json_string_value(json_object_get(o, "line"));
        ev = text ? json_loads(text, 0, NULL) : NULL;
        if (ev != NULL &&
            json_is_number(json_object_get(ev, "start_iteration")))
            best =
                fmax(best,
                     json_number_value(json_object_get(ev, "start_iteration")));
        json_decref(ev);
        json_decref(o);
    }
    run_free(&r);
    return best;
}

Test(cluster_e2e, a_killed_agent_loses_its_node_and_the_job_restarts_elsewhere)
{
    char *id = submit(SMALL_JOB("moves", "4000", "max_restarts: 1\n"));
    json_t *j = wait_state(id, "RUNNING", 30), *tasks, *nodes;
    const char *node;
    int victim, lost = 0;
    struct timespec t0, t1;

    tasks = json_object_get(j, "tasks");
    node = json_string_value(json_object_get(json_array_get(tasks, 0), "node"));
    cr_assert_not_null(node);
    victim = strcmp(node, "n1") == 0 ? 0 : 1;
    /* Training is under way: acknowledged updates are in the shard's log. */
    wait_progress(id, 400, 60);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    stop(&cl.agent[victim], SIGKILL);
    for (int i = 0; i < 100 && !lost; i++) {
        json_t *o = flsubmit_json("nodes", 0);
        nodes = json_object_get(o, "nodes");
        for (size_t k = 0; k < json_array_size(nodes); k++) {
            json_t *n = json_array_get(nodes, k);
            if (strcmp(json_string_value(json_object_get(n, "name")),
                       victim ? "n2" : "n1") == 0 &&
                strcmp(json_string_value(json_object_get(n, "state")),
                       "LOST") == 0)
                lost = 1;
        }
        json_decref(o);
        if (!lost)
            sleep_ms(100);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert(lost, "the node of the killed agent was never marked LOST");
    /* The alive key lives 2 heartbeats; flsched looks every 200 ms; and
     * each flsubmit call here takes some time of its own. */
    cr_assert_leq((double)(t1.tv_sec - t0.tv_sec) +
                      (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
                  2.0 * HEARTBEAT_S + 1.0, "the node was marked lost too late");
    json_decref(j);
    j = wait_state(id, "SUCCEEDED", 180);
    cr_assert_eq(num_of(j, "restarts"), 1, "restarted once from checkpoint");
    cr_assert_eq(num_of(j, "attempt"), 1);
    tasks = json_object_get(j, "tasks");
    for (size_t k = 0; k < json_array_size(tasks); k++)
        cr_assert_str_eq(json_string_value(
                             json_object_get(json_array_get(tasks, k), "node")),
                         victim ? "n1" : "n2",
                         "the new attempt runs on the live node");
    json_decref(j);
    cr_assert_gt(resumed_at(id), 0,
                 "the restarted worker began at iteration 0: the shards did "
                 "not restore from their checkpoint");
    free(id);
}

static void cancel(const char *id)
{
    char args[64];
    json_t *j;

    snprintf(args, sizeof(args), "cancel %s", id);
    j = flsubmit_json(args, 0);
    json_decref(j);
}

static void assert_state(const char *id, const char *want, const char *why)
{
    json_t *j = status(id);
    cr_assert_str_eq(state_of(j), want, "job %s: %s", id, why);
    json_decref(j);
}

Test(cluster_e2e, a_higher_priority_job_runs_before_an_earlier_lower_one)
{
    char *l1 = submit(SMALL_JOB("fill1", "1000000", ""));
    char *l2 = submit(SMALL_JOB("fill2", "1000000", ""));
    char *low, *high;
    json_t *j;

    json_decref(wait_state(l1, "RUNNING", 30));
    json_decref(wait_state(l2, "RUNNING", 30));
    low = submit(SMALL_JOB("low", "200", ""));
    high = submit(SMALL_JOB("high", "200", "priority: 5\n"));
    sleep_ms(1000);
    assert_state(low, "QUEUED", "no node is free");
    assert_state(high, "QUEUED", "no node is free");

    /* One node frees up: the later but higher-priority job takes it. */
    cancel(l1);
    json_decref(wait_state(high, "RUNNING", 30));
    assert_state(low, "QUEUED", "the lower priority waits for the next node");
    cancel(l2);
    json_decref(wait_state(high, "SUCCEEDED", 120));
    j = wait_state(low, "SUCCEEDED", 120);
    json_decref(j);
    free(l1);
    free(l2);
    free(low);
    free(high);
}

Test(cluster_e2e, backfill_never_delays_the_head_of_the_queue)
{
    /* r holds one node; the head h needs both; b could run on the free
     * node now but has no time limit, so it could hold that node past r's
     * end and delay h: it must wait. b2 declares it ends long before r's
     * time limit does, so it may use the free node meanwhile. */
    char *r = submit(SMALL_JOB("r", "1000000", "time_limit: 600\n"));
    char *h, *b, *b2;

    json_decref(wait_state(r, "RUNNING", 30));
    h = submit("name: h\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
               "servers: 2\niterations: 200\ncompression: topk:0.01\n"
               "eval_every: 0\n");
    b = submit(SMALL_JOB("b", "200", ""));
    b2 = submit(SMALL_JOB("b2", "200", "time_limit: 60\n"));
    json_decref(wait_state(b2, "SUCCEEDED", 60));
    assert_state(h, "QUEUED", "the head needs both nodes");
    assert_state(b, "QUEUED",
                 "b has no time limit: starting it could delay the head");

    cancel(r);
    json_decref(wait_state(h, "RUNNING", 30));
    assert_state(b, "QUEUED", "the head holds both nodes");
    json_decref(wait_state(h, "SUCCEEDED", 120));
    json_decref(wait_state(b, "SUCCEEDED", 120));
    free(r);
    free(h);
    free(b);
    free(b2);
}

Test(cluster_e2e, an_auto_job_gets_a_plan_from_flsched_that_its_workers_apply)
{
    /* Long enough for the plan's round trip (profile after 25 iterations,
     * flsched, Redis, the agent's 500 ms poll, the worker): 400 iterations
     * now take half a second, less than that trip. */
    char *id = submit("name: auto\nmodel: mlp\ndataset: synthetic\n"
                      "workers: 1\nservers: 1\niterations: 3000\n"
                      "compression: auto\neval_every: 0\n");
    char args[64], cmd[512];
    json_t *j, *plan, *layers;
    run_result r;

    j = wait_state(id, "SUCCEEDED", 120);
    json_decref(j);
    /* flsched planned from the workers' profile... */
    snprintf(args, sizeof(args), "plan %s", id);
    plan = flsubmit_json(args, 0);
    cr_assert_not_null(plan);
    cr_assert_geq(json_number_value(json_object_get(plan, "version")), 1);
    layers = json_object_get(plan, "layers");
    cr_assert_eq(json_array_size(layers), 6, "one entry per tensor");
    cr_assert_str_eq(
        json_string_value(json_object_get(json_array_get(layers, 0), "name")),
        "fc1.weight", "layers in layout order");
    json_decref(plan);
    /* ...and the worker applied it (its plan event is in the job's log). */
    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit logs --events %s",
             cl.api, FLPS_BIN_DIR, id);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "\"event\":\"plan\""),
                       "no worker applied the plan:\n%s", r.out);
    run_free(&r);
    free(id);
}
