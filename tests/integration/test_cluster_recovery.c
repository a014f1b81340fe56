/* Recovery of a real job on the local cluster (redis-server with its
 * append-only file, flsched, two flagents, real flps and flworker): a
 * shard, a worker or an agent of an MLP job with gtopk:0.01 and
 * max_restarts: 2 killed with SIGKILL at about 40 % of its iterations
 * makes the job restart from the shards' checkpoints and logs; flsched or
 * Redis killed at that point and started again leaves the job running.
 * Either way it finishes SUCCEEDED within one point of accuracy of an
 * undisturbed run (docs/design.md, "Rejoining after a crash").
 *
 * FLPS_RECOVERY_ITERS sets the job's iterations (default 2000; the
 * acceptance run of the reliability issue is 6000). */
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
    snprintf(cl.dir, sizeof(cl.dir), "/tmp/flps-rec-XXXXXX");
    cr_assert_not_null(mkdtemp(cl.dir));
    cr_assert_eq(test_redis_start_aof(&cl.redis), 0,
                 "redis-server did not start");
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

/* The highest start_iteration a worker of the job announced in its log
 * ({"event":"start",...} lines, streamed by the agents). */
static double resumed_at(const char *id)
{
    char cmd[512];
    run_result r;
    double best = -1;
    char *line, *save = NULL;

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

TestSuite(cluster_recovery, .init = setup, .fini = teardown, .timeout = 580);

static double iters(void)
{
    const char *e = getenv("FLPS_RECOVERY_ITERS");
    double n = e != NULL ? atof(e) : 2000;

    cr_assert_geq(n, 100, "FLPS_RECOVERY_ITERS must be at least 100");
    return n;
}
#define ITERS iters()

/* The MLP on Fashion-MNIST with gtopk:0.01: 2 workers and 2 servers, the
 * 4 CPUs of both nodes. Returns a static buffer. */
static const char *mlp_gtopk(const char *name, const char *extra)
{
    static char yaml[1024];

    snprintf(yaml, sizeof(yaml),
             "name: %s\nmodel: mlp\ndataset: fashion-mnist\n"
             "workers: 2\nservers: 2\niterations: %.0f\nbatch_size: 32\n"
             "lr: 0.05\nmomentum: 0.9\nlr_schedule: cosine\n"
             "compression: gtopk:0.01\nseed: 3\neval_every: 0\n"
             "checkpoint_interval: 2\n%s",
             name, ITERS, extra);
    return yaml;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double accuracy_of(json_t *job)
{
    json_t *sum = json_object_get(job, "summary");
    cr_assert_not_null(sum, "a finished job carries its summary");
    cr_assert_eq(json_number_value(json_object_get(sum, "iterations")), ITERS);
    return json_number_value(json_object_get(sum, "test_accuracy"));
}

/* The pid of job id's shard 1 or its worker of rank 1 (as the agents
 * start them: "flps --job ID --shard 1 ...", "flworker --job FILE --rank 1
 * ... --job-id ID"), or -1. */
static pid_t pid_of(const char *id, int worker)
{
    char cmd[256];
    FILE *p;
    int pid = -1;

    if (worker)
        snprintf(cmd, sizeof(cmd),
                 "pgrep -f -- '[f]lworker .*--rank 1 .*--job-id %s( |$)'", id);
    else
        snprintf(cmd, sizeof(cmd), "pgrep -f -- '[f]lps --job %s --shard 1 '",
                 id);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    if (fscanf(p, "%d", &pid) != 1)
        pid = -1;
    pclose(p);
    return pid;
}

/* Is node name LOST? */
static int node_is_lost(const char *name)
{
    json_t *o = flsubmit_json("nodes", 0), *nodes = json_object_get(o, "nodes");
    int lost = 0;

    for (size_t k = 0; k < json_array_size(nodes); k++) {
        json_t *n = json_array_get(nodes, k);
        if (strcmp(json_string_value(json_object_get(n, "name")), name) == 0)
            lost = strcmp(json_string_value(json_object_get(n, "state")),
                          "LOST") == 0;
    }
    json_decref(o);
    return lost;
}

typedef enum {
    KILL_SHARD,
    KILL_WORKER,
    KILL_AGENT,
    KILL_SCHED,
    KILL_REDIS
} victim_kind;

/* flsubmit answers again after an outage of the control plane (flsched's
 * API is back, or it reaches Redis again). */
static void wait_api(int timeout_s)
{
    char cmd[512];
    run_result r;

    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit --json nodes",
             cl.api, FLPS_BIN_DIR);
    for (int i = 0; i < timeout_s * 5; i++) {
        int ok;
        run_cmd(cmd, &r);
        ok = r.status == 0;
        run_free(&r);
        if (ok)
            return;
        sleep_ms(200);
    }
    cr_assert_fail("flsubmit got no answer within %d s of the restart",
                   timeout_s);
}

/* An undisturbed run of the job, then one where the victim is killed with
 * SIGKILL at 40 % of the iterations: SUCCEEDED after one restart, resumed
 * where the shards were, within one point of accuracy. flsched and Redis
 * are started again at once; the job's processes never depended on them,
 * so it finishes without a restart. */
static void kill_at_40_percent(victim_kind kind, const char *what)
{
    char *ref = submit(mlp_gtopk("undisturbed", ""));
    char *id;
    json_t *j;
    double ref_acc, acc, t0, t_ref, t_kill;

    t0 = now_s();
    j = wait_state(ref, "SUCCEEDED", 240);
    t_ref = now_s() - t0;
    ref_acc = accuracy_of(j);
    json_decref(j);

    id = submit(mlp_gtopk("killed", "max_restarts: 2\n"));
    t0 = now_s();
    json_decref(wait_state(id, "RUNNING", 30));
    wait_progress(id, 0.4 * ITERS, 240);
    t_kill = now_s() - t0;
    if (kind == KILL_SCHED) {
        /* A new flsched (on a new port) takes over once the dead one's
         * leader lease (2 s) runs out. */
        stop(&cl.sched, SIGKILL);
        start_sched();
        wait_api(30);
    } else if (kind == KILL_REDIS) {
        cr_assert_eq(test_redis_kill_and_restart(&cl.redis, 1), 0,
                     "redis-server did not start again on its port");
        wait_api(30);
    } else if (kind == KILL_AGENT) {
        /* Node n2 and everything on it die; its agent comes back once
         * flsched has seen the node lost (the job needs both nodes). */
        stop(&cl.agent[1], SIGKILL);
        for (int i = 0; i < 100 && !node_is_lost("n2"); i++)
            sleep_ms(100);
        cr_assert(node_is_lost("n2"), "node n2 was never marked LOST");
        start_agent(1);
    } else {
        pid_t victim = pid_of(id, kind == KILL_WORKER);
        cr_assert_gt(victim, 0, "%s of job %s is not running", what, id);
        cr_assert_eq(kill(victim, SIGKILL), 0);
    }
    j = wait_state(id, "SUCCEEDED", 300);
    if (kind == KILL_SCHED || kind == KILL_REDIS) {
        cr_assert_eq(num_of(j, "restarts"), 0,
                     "the job's processes outlive %s: no restart (%s)", what,
                     json_string_value(json_object_get(j, "reason")));
    } else {
        cr_assert_eq(num_of(j, "restarts"), 1, "restarted once: %s",
                     json_string_value(json_object_get(j, "reason")));
        cr_assert_eq(num_of(j, "attempt"), 1);
        cr_assert_geq(resumed_at(id), 0.3 * ITERS,
                      "the restarted workers did not resume near where the "
                      "shards were");
    }
    acc = accuracy_of(j);
    json_decref(j);
    cr_log_info("%s killed: undisturbed accuracy %.4f in %.1f s; killed at "
                "%.1f s, resumed at iteration %.0f: accuracy %.4f in %.1f s",
                what, ref_acc, t_ref, t_kill, resumed_at(id), acc,
                now_s() - t0);
    cr_assert_leq(fabs(acc - ref_acc), 0.01,
                  "accuracy %.4f after %s was killed, %.4f undisturbed", acc,
                  what, ref_acc);
    free(ref);
    free(id);
}

Test(cluster_recovery,
     a_shard_killed_at_40_percent_restarts_the_job_and_it_trains_as_well)
{
    kill_at_40_percent(KILL_SHARD, "shard 1");
}

Test(cluster_recovery,
     a_worker_killed_at_40_percent_restarts_the_job_and_it_trains_as_well)
{
    kill_at_40_percent(KILL_WORKER, "worker 1");
}

Test(cluster_recovery, a_killed_flagent_restarts_the_job_and_it_trains_as_well)
{
    kill_at_40_percent(KILL_AGENT, "the agent of node n2");
}

Test(cluster_recovery, a_killed_flsched_replaced_leaves_the_job_to_finish)
{
    kill_at_40_percent(KILL_SCHED, "flsched");
}

Test(cluster_recovery, a_killed_redis_restarted_leaves_the_job_to_finish)
{
    kill_at_40_percent(KILL_REDIS, "redis-server");
}
