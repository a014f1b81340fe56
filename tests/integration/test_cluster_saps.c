/* Decentralized training (mode saps) on the local cluster: redis-server,
 * flsched and two flagents on loopback. The agents give the workers, two
 * on each node, each other's endpoints; no shard runs. The job succeeds
 * with its consensus and its measured bandwidth matrix in the summary and
 * in `flsubmit status`; a worker killed mid-job leaves the others going
 * on, and the summary names it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_fixture.h"

static void setup(void)
{
    cluster_setup("flps-saps", 0);
}

static void teardown(void)
{
    cluster_teardown();
}

TestSuite(cluster_saps, .init = setup, .fini = teardown, .timeout = 300);

/* Four workers of one CPU each: two per node, so peers meet across the
 * agents. */
#define SAPS_JOB(name, iters, extra)                                           \
    "name: " name "\nmodel: mlp\ndataset: synthetic\nworkers: 4\n"             \
    "mode: saps\niterations: " iters "\nbatch_size: 32\nlr: 0.02\n"            \
    "peer_deadline: 2\neval_every: 0\n" extra

static json_t *summary_of(json_t *job)
{
    json_t *sum = json_object_get(job, "summary");

    cr_assert(json_is_object(sum), "a finished job carries its summary");
    return sum;
}

/* `flsubmit status ID` as people read it (caller frees). */
static char *status_text(const char *id)
{
    char args[64];

    snprintf(args, sizeof(args), "status %s", id);
    return flsubmit_text(args);
}

Test(cluster_saps, a_saps_job_succeeds_with_its_consensus_and_matrix)
{
    char *id = submit(SAPS_JOB("saps", "300", ""));
    json_t *j = wait_state(id, "SUCCEEDED", 180), *sum, *rows, *tasks, *t;
    char *text;
    size_t i;
    int on[2] = {0, 0};

    sum = summary_of(j);
    cr_assert_eq(num_of(j, "servers"), 0, "a saps job runs no shard");
    cr_assert_str_eq(json_string_value(json_object_get(sum, "mode")), "saps");
    cr_assert_eq(num_of(sum, "consensus_workers"), 4);
    cr_assert_geq(num_of(sum, "consensus_distance"), 0);
    cr_assert_gt(num_of(sum, "consensus_accuracy"), 0.5);
    cr_assert(json_is_true(json_object_get(sum, "matchings_agree")),
              "every worker computed the same matchings");
    cr_assert_eq(json_array_size(json_object_get(sum, "workers_lost")), 0);
    cr_assert_gt(num_of(sum, "exchanges"), 0);
    rows = json_object_get(sum, "bandwidth_mbps");
    cr_assert_eq(json_array_size(rows), 4, "the 4 x 4 matrix measured");
    for (size_t r = 0; r < 4; r++)
        for (size_t c = 0; c < 4; c++)
            if (r != c)
                cr_assert_gt(json_number_value(
                                 json_array_get(json_array_get(rows, r), c)),
                             0, "link %zu-%zu measured nothing", r, c);
    /* Two workers on each node: the rendezvous crossed the agents. */
    tasks = json_object_get(j, "tasks");
    json_array_foreach(tasks, i, t)
    {
        const char *node = json_string_value(json_object_get(t, "node"));
        on[node != NULL && strcmp(node, "n1") == 0]++;
    }
    cr_assert(on[0] > 0 && on[1] > 0, "the workers ran on one node only");
    text = status_text(id);
    cr_assert(strstr(text, "bandwidth MB/s") != NULL, "%s", text);
    cr_assert(strstr(text, "consensus acc.") != NULL, "%s", text);
    free(text);
    json_decref(j);
    free(id);
}

/* The pid of the job's flworker of rank w, 0 if none. */
static pid_t worker_pid(const char *id, int w)
{
    char cmd[384];
    FILE *p;
    long pid = 0;

    /* This cluster's only: the job file lies under cl.dir. */
    snprintf(cmd, sizeof(cmd),
             "pgrep -f -- '[-]-job %s/[^ ]* --rank %d --peers .* --job-id "
             "%s( |$)' | head -1",
             cl.dir, w, id);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    if (fscanf(p, "%ld", &pid) != 1)
        pid = 0;
    pclose(p);
    return (pid_t)pid;
}

Test(cluster_saps, a_killed_worker_leaves_the_others_going_on_and_is_named)
{
    char *id = submit(SAPS_JOB("saps-kill", "6000", ""));
    json_t *j = wait_state(id, "RUNNING", 30), *sum, *lost;
    pid_t victim = 0;
    char *text;

    json_decref(j);
    wait_progress(id, 300, 120);
    for (int i = 0; i < 50 && victim == 0; i++) {
        victim = worker_pid(id, 2);
        if (victim == 0)
            sleep_ms(100);
    }
    cr_assert_neq(victim, 0, "no flworker of rank 2");
    cr_assert_eq(kill(victim, SIGKILL), 0);
    j = wait_state(id, "SUCCEEDED", 240);
    sum = summary_of(j);
    lost = json_object_get(sum, "workers_lost");
    cr_assert_eq(json_array_size(lost), 1, "workers_lost: %zu",
                 json_array_size(lost));
    cr_assert_eq(json_integer_value(json_array_get(lost, 0)), 2);
    cr_assert_eq(num_of(sum, "consensus_workers"), 3,
                 "the consensus of the three that went on");
    cr_assert_eq(num_of(j, "restarts"), 0, "the job was not restarted");
    text = status_text(id);
    cr_assert(strstr(text, "workers lost") != NULL, "%s", text);
    free(text);
    json_decref(j);
    free(id);
}
