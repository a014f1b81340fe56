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

#include "cluster_fixture.h"

static void setup(void)
{
    cluster_setup("flps-rec", 1);
}

static void teardown(void)
{
    cluster_teardown();
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
 * ... --job-id ID") in this test's cluster, or -1. */
static pid_t pid_of(const char *id, int worker)
{
    char cmd[384];
    FILE *p;
    int pid = -1;

    /* This cluster's only: its job file or its checkpoints lie under
     * cl.dir (another cluster on the machine may run a job of that id). */
    if (worker)
        snprintf(cmd, sizeof(cmd),
                 "pgrep -f -- '[f]lworker --job %s/[^ ]* --rank 1 .*--job-id "
                 "%s( |$)'",
                 cl.dir, id);
    else
        snprintf(cmd, sizeof(cmd),
                 "pgrep -f -- '[f]lps --job %s --shard 1 .*--checkpoint-dir "
                 "%s/'",
                 id, cl.dir);
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
