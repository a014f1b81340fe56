/* A PyTorch program as a cluster job: redis-server, flsched and one flagent
 * on loopback, examples/torch/mlp.py submitted with flsubmit as a command:
 * job with compression: auto. It must reach SUCCEEDED with its accuracy in
 * `flsubmit status --json`, flsched must plan from the profile the Python
 * package printed, and the workers must apply that plan. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../scheduler/redis_fixture.h"
#include "runcmd.h"
#include "spawn.h"

typedef struct cluster {
    test_redis redis;
    char dir[64];
    char api[160]; /* http://127.0.0.1:PORT */
    pid_t sched;
    pid_t agent;
} cluster;

static cluster cl;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

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

static void setup(void)
{
    char log[128], bound[128], work[128], ckpt[128];
    const char *sched_args[] = {"--redis",    NULL,   "--listen", "127.0.0.1:0",
                                "--lease-ms", "2000", NULL};
    const char *agent_args[] = {
        "--redis",    NULL,       "--name",      "n1",     "--cpus",
        "4",          "--memory", "4Gi",         "--gpus", "0",
        "--work-dir", work,       "--heartbeat", "1",      "--checkpoint-root",
        ckpt,         NULL};

    memset(&cl, 0, sizeof(cl));
    snprintf(cl.dir, sizeof(cl.dir), "/tmp/flps-torchcl-XXXXXX");
    cr_assert_not_null(mkdtemp(cl.dir));
    cr_assert_eq(chmod(cl.dir, 0711), 0); /* job uids pass through */
    cr_assert_eq(test_redis_start(&cl.redis), 0, "redis-server did not start");
    sched_args[1] = cl.redis.url;
    snprintf(log, sizeof(log), "%s/flsched.log", cl.dir);
    cl.sched = test_spawn("flsched", sched_args, log, "listening on ", bound,
                          sizeof(bound));
    cr_assert_gt(cl.sched, 0, "flsched did not start; see %s", log);
    snprintf(cl.api, sizeof(cl.api), "http://%s", bound);
    agent_args[1] = cl.redis.url;
    snprintf(log, sizeof(log), "%s/flagent.log", cl.dir);
    snprintf(work, sizeof(work), "%s/n1", cl.dir);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints", cl.dir);
    cl.agent = test_spawn("flagent", agent_args, log, NULL, NULL, 0);
    cr_assert_gt(cl.agent, 0);
    for (int i = 0; i < 50; i++) {
        json_t *o = flsubmit_json("nodes", 0);
        size_t n = json_array_size(json_object_get(o, "nodes"));
        json_decref(o);
        if (n == 1)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("the agent did not register");
}

static void stop(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

static void teardown(void)
{
    stop(&cl.agent);
    stop(&cl.sched);
    test_redis_stop(&cl.redis);
}

TestSuite(cluster_torch, .init = setup, .fini = teardown, .timeout = 400);

/* Submit the job file text; its id (caller frees). */
static char *submit_text(const char *yaml)
{
    char path[160], args[200];
    json_t *o;
    char *id;
    FILE *f;

    snprintf(path, sizeof(path), "%s/job.yaml", cl.dir);
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

/* flsubmit status --json of job id once it has ended (within seconds),
 * which must be SUCCEEDED; the caller decrefs it. */
static json_t *wait_succeeded(const char *id, int seconds)
{
    char args[200];
    const char *state = "";
    json_t *job = NULL;

    for (int i = 0; i < seconds * 5; i++) {
        snprintf(args, sizeof(args), "status %s", id);
        job = flsubmit_json(args, 0);
        state = json_string_value(json_object_get(job, "state"));
        if (strcmp(state, "SUCCEEDED") == 0 || strcmp(state, "FAILED") == 0 ||
            strcmp(state, "CANCELLED") == 0)
            break;
        json_decref(job);
        job = NULL;
        sleep_ms(200);
    }
    cr_assert_not_null(job, "the job did not finish within %d s", seconds);
    cr_assert_str_eq(state, "SUCCEEDED", "reason: %s",
                     json_string_value(json_object_get(job, "reason")));
    return job;
}

Test(cluster_torch,
     a_torch_command_job_with_auto_compression_succeeds_and_follows_the_plan)
{
    char args[200], cmd[512], yaml[1024];
    char *id = NULL;
    json_t *job = NULL, *sum, *plan;
    run_result r;

    /* 400 iterations: the profile is out after 25, and the plan's trip
     * (flagent, Redis, flsched, the agent's poll) takes a few seconds,
     * while an iteration of two Python workers takes ~10 ms here. */
    snprintf(yaml, sizeof(yaml),
             "name: torch-auto\nmodel: mlp\nworkers: 2\nservers: 1\n"
             "iterations: 400\nbatch_size: 32\nlr: 0.05\neval_every: 0\n"
             "compression: auto\n"
             "command: [/usr/bin/python3, %s/examples/torch/mlp.py,"
             " --test-samples, '1000']\n"
             "env:\n  OMP_NUM_THREADS: '1'\n",
             FLPS_SOURCE_DIR);
    id = submit_text(yaml);
    job = wait_succeeded(id, 300);
    sum = json_object_get(job, "summary");
    cr_assert_not_null(sum, "a finished job carries its summary");
    cr_assert(json_is_number(json_object_get(sum, "test_accuracy")),
              "the program's accuracy is in status --json");
    cr_log_info("torch mlp under flsched, compression auto: test accuracy "
                "%.4f",
                json_number_value(json_object_get(sum, "test_accuracy")));
    cr_assert_gt(json_number_value(json_object_get(sum, "test_accuracy")), 0.6);
    cr_assert_eq(json_integer_value(json_object_get(sum, "iterations")), 400);
    json_decref(job);

    /* flsched planned from the profile rank 0's package printed... */
    snprintf(args, sizeof(args), "plan %s", id);
    plan = flsubmit_json(args, 0);
    cr_assert_not_null(plan);
    cr_assert_geq(json_number_value(json_object_get(plan, "version")), 1);
    cr_assert_eq(json_array_size(json_object_get(plan, "layers")), 6,
                 "one entry per parameter of the MLP");
    cr_assert_str_eq(
        json_string_value(json_object_get(
            json_array_get(json_object_get(plan, "layers"), 0), "name")),
        "1.weight", "the layout's names, in its order");
    json_decref(plan);
    /* ...and the workers applied it (their plan events are in the log). */
    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit logs --events %s",
             cl.api, FLPS_BIN_DIR, id);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "\"event\":\"plan\""),
                       "no worker applied the plan:\n%s", r.out);
    cr_assert_not_null(strstr(r.out, "\"event\":\"profile\""), "%s", r.out);
    run_free(&r);
    free(id);
}

/* flps.fl under flsched (the flrun case: test_fl_torch.c): client 1 of a
 * fedavg job kills its own process in round 3; the job succeeds, the
 * summary counts one late client, and the progress bar counts rounds. */
Test(cluster_torch, a_federated_client_killed_mid_round_is_late_not_a_failure)
{
    char yaml[1024];
    char *id;
    json_t *job, *sum;

    snprintf(yaml, sizeof(yaml),
             "name: fl-kill\nworkers: 2\nservers: 1\nmode: fedavg\n"
             "clients: 6\nclient_fraction: 0.5\nrounds: 4\nlocal_steps: 5\n"
             "batch_size: 32\nlr: 0.1\nmomentum: 0.9\nseed: 3\n"
             "eval_every: 2\n"
             "command: [/usr/bin/python3, %s/tests/integration/fl_user.py]\n"
             "env:\n  OMP_NUM_THREADS: '1'\n  FL_KILL: '1:3'\n",
             FLPS_SOURCE_DIR);
    id = submit_text(yaml);
    job = wait_succeeded(id, 300);
    cr_assert_eq(json_integer_value(json_object_get(job, "iterations")), 4,
                 "a fedavg job's progress counts its rounds");
    sum = json_object_get(job, "summary");
    cr_assert_not_null(sum);
    cr_assert_eq(json_integer_value(json_object_get(sum, "late_clients")), 1,
                 "%s", json_dumps(sum, 0));
    cr_assert_eq(json_integer_value(json_object_get(sum, "client_rounds")),
                 4 * 3);
    cr_assert_str_eq(json_string_value(json_object_get(sum, "mode")), "fedavg");
    cr_assert(json_is_number(json_object_get(sum, "test_accuracy_last5")));
    json_decref(job);
    free(id);
}
