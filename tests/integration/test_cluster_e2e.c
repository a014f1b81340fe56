/* The whole control plane for real: redis-server, flsched and two flagents
 * on loopback, jobs submitted and followed with flsubmit, real flps and
 * flworker processes. Two agents whose CPUs fit two jobs at once: the third
 * queues and runs when one ends; cancel stops every process of a job;
 * flsched killed mid-job and restarted loses nothing; an agent killed gets
 * its node marked lost and the job restarted from its checkpoints on the
 * other node; a job file's env: reaches the worker an agent starts. */
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
    cluster_setup("flps-e2e", 0);
}

static void teardown(void)
{
    cluster_teardown();
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

Test(cluster_e2e, the_job_files_env_reaches_the_built_in_worker)
{
    /* FLPS_LOG=error silences every INFO line of the process that reads
     * it: the worker flagent starts, not the shard (env: is the
     * workers'), as under flrun. */
    char *id = submit(SMALL_JOB("envjob", "50", "env:\n  FLPS_LOG: error\n"));
    json_t *j = wait_state(id, "SUCCEEDED", 120);
    char cmd[1024];

    json_decref(j);
    snprintf(cmd, sizeof(cmd),
             "set -e; w=$(ls %s/n*/%s/attempt-*/worker-0.log | head -1); "
             "s=$(ls %s/n*/%s/attempt-*/server-0.log | head -1); "
             "test -s \"$s\"; grep -q ' INFO ' \"$s\"; "
             "test -f \"$w\"; if grep -q ' INFO ' \"$w\"; then cat \"$w\"; "
             "exit 1; fi",
             cl.dir, id, cl.dir, id);
    cr_assert_eq(system(cmd), 0,
                 "the worker logged INFO under env: FLPS_LOG: error, or a "
                 "log is missing: %s",
                 cmd);
    free(id);
}

static int processes_of(const char *id)
{
    char cmd[384];
    /* "[-]" keeps the pattern from matching the shell running pgrep. This
     * cluster's only: a shard's checkpoints and a worker's job file lie
     * under cl.dir (another cluster may run a job of that id). */
    snprintf(cmd, sizeof(cmd),
             "pgrep -f -- '[-]-job %s .*--checkpoint-dir %s/|"
             "[-]-job %s/.*--job-id %s( |$)' >/dev/null",
             id, cl.dir, cl.dir, id);
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

/* Every "[worker-N] ..." line of text, one per line, in out. */
static void worker_lines(const char *text, char *out, size_t len)
{
    size_t n = 0;

    out[0] = '\0';
    for (const char *l = text; l != NULL && *l != '\0';) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) : strlen(l);

        if (strncmp(l, "[worker-", 8) == 0 && n + ll + 2 < len) {
            memcpy(out + n, l, ll);
            n += ll;
            out[n++] = '\n';
            out[n] = '\0';
        }
        l = nl ? nl + 1 : NULL;
    }
}

Test(cluster_e2e,
     a_programs_lines_read_the_same_in_flsubmit_logs_as_under_flrun)
{
    static const char prog[] =
        "import os, sys\n"
        "import flps\n"
        "rank = os.environ['FLPS_RANK']\n"
        "print('hello from rank', rank)\n"
        "print('a warning from rank', rank, file=sys.stderr)\n"
        "flps.report(iteration=1, test_accuracy=0.5)\n";
    char path[160], yaml[512], cmd[768], seen[4096], want[4096];
    char *id, *line, *save = NULL;
    json_t *j;
    run_result r;
    FILE *f;

    snprintf(path, sizeof(path), "%s/lines.py", cl.dir);
    f = fopen(path, "w");
    cr_assert(f != NULL && fputs(prog, f) >= 0 && fclose(f) == 0,
              "cannot write %s", path);
    /* No model: a command: job runs its own. */
    snprintf(yaml, sizeof(yaml),
             "name: lines\nworkers: 2\nservers: 1\n"
             "command: [/usr/bin/python3, %s]\n",
             path);
    id = submit(yaml);
    j = wait_state(id, "SUCCEEDED", 120);
    json_decref(j);
    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit logs %s", cl.api,
             FLPS_BIN_DIR, id);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    worker_lines(r.out, seen, sizeof(seen));
    run_free(&r);
    /* The same program under flrun: each of its worker lines, character
     * for character, is one of the job's logs. */
    snprintf(cmd, sizeof(cmd), "%s/flrun -n 2 -s 1 -- /usr/bin/python3 %s",
             FLPS_BIN_DIR, path);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    worker_lines(r.out, want, sizeof(want) / 2);
    worker_lines(r.err, want + strlen(want), sizeof(want) / 2);
    run_free(&r);
    cr_assert_not_null(strstr(want, "[worker-1] a warning from rank 1\n"), "%s",
                       want);
    for (line = strtok_r(want, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char whole[600];

        snprintf(whole, sizeof(whole), "%s\n", line);
        cr_assert_not_null(strstr(seen, whole),
                           "'%s' not in flsubmit logs:\n%s", line, seen);
    }
    free(id);
}
