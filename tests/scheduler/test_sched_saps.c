/* Tests of scheduler/sched_saps.c: which of a saps job's workers it goes
 * on without, and the summary's saps fields. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "scheduler/sched_saps.h"
#include "services/event.h"

static const char saps_spec[] = "name: s\nmodel: mlp\nworkers: 4\n"
                                "mode: saps\niterations: 100\n"
                                "local_steps: 2\n";

static void task(sched_task *t, uint32_t index, const char *state, long code,
                 long sig, const char *error)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->role, sizeof(t->role), "worker");
    snprintf(t->state, sizeof(t->state), "%s", state);
    snprintf(t->name, sizeof(t->name), "worker-%u", index);
    snprintf(t->error, sizeof(t->error), "%s", error);
    t->index = index;
    t->exited = strcmp(state, "EXITED") == 0;
    t->exit_code = code;
    t->signal = sig;
}

/* Four workers in state, each with status 0. */
static void four(sched_task t[4], const char *state)
{
    for (uint32_t i = 0; i < 4; i++)
        task(&t[i], i, state, 0, 0, "");
}

static void job_of(sched_job *job, const char *spec, sched_task *tasks,
                   size_t n)
{
    memset(job, 0, sizeof(*job));
    job->spec = (char *)spec;
    job->workers = (uint32_t)n;
    job->tasks = tasks;
    job->ntasks = n;
}

Test(sched_saps, a_killed_worker_is_lost_while_two_others_are_left)
{
    sched_task t[4];
    sched_job job;

    task(&t[0], 0, "RUNNING", 0, 0, "");
    task(&t[1], 1, "RUNNING", 0, 0, "");
    task(&t[2], 2, "EXITED", -1, 9, "");
    task(&t[3], 3, "EXITED", 0, 0, "");
    job_of(&job, saps_spec, t, 4);
    cr_assert(sched_saps_is_saps(&job));
    cr_assert(sched_saps_is_lost(&t[2]));
    cr_assert(!sched_saps_is_lost(&t[3]), "status 0 is done, not lost");
    cr_assert_eq(sched_saps_lost(&job), 1);
    /* A second loss leaves two: still on; a third would leave one. */
    task(&t[1], 1, "EXITED", 3, 0, "boom");
    cr_assert_eq(sched_saps_lost(&job), 2);
    task(&t[0], 0, "EXITED", -1, 9, "");
    cr_assert_eq(sched_saps_lost(&job), 0, "one left cannot exchange");
}

Test(sched_saps, a_worker_its_agent_could_not_start_is_not_lost)
{
    sched_task t[4];
    sched_job job;

    four(t, "RUNNING");
    task(&t[1], 1, "EXITED", -1, 0,
         "flagent could not start it: worker-3 of the job never registered "
         "its endpoint");
    job_of(&job, saps_spec, t, 4);
    cr_assert(!sched_saps_is_lost(&t[1]));
    cr_assert_eq(sched_saps_lost(&job), 0, "it fails the job instead");
}

Test(sched_saps, another_mode_loses_no_worker)
{
    sched_task t[4];
    sched_job job;

    four(t, "RUNNING");
    task(&t[2], 2, "EXITED", -1, 9, "");
    job_of(&job, "name: s\nmodel: mlp\nworkers: 4\n", t, 4);
    cr_assert(!sched_saps_is_saps(&job));
    cr_assert_eq(sched_saps_lost(&job), 0);
}

Test(sched_saps, the_summary_has_the_consensus_the_lost_and_the_matrix)
{
    static const char *done[] = {
        "{\"event\":\"done\",\"rank\":0,\"iterations\":100,\"bytes_sent\":10,"
        "\"bytes_received\":10,\"dense_bytes\":100,\"exchanges\":50,"
        "\"slow_exchanges\":5,\"matching_digest\":\"00000000000000aa\","
        "\"consensus_workers\":3,\"consensus_distance\":0.25,"
        "\"consensus_accuracy\":0.9,\"bandwidth\":[0,2000000,3000000,0,"
        "2000000,0,1000000,0,3000000,1000000,0,0,0,0,0,0],"
        "\"seconds\":1}",
        "{\"event\":\"done\",\"rank\":1,\"iterations\":100,\"bytes_sent\":10,"
        "\"bytes_received\":10,\"dense_bytes\":100,\"exchanges\":50,"
        "\"slow_exchanges\":5,\"matching_digest\":\"00000000000000aa\","
        "\"dead_workers\":[3],\"seconds\":1}"};
    sched_task t[4];
    sched_job job;
    sapsfold s = {0};
    json_t *o = json_object(), *rows;

    four(t, "EXITED");
    task(&t[3], 3, "EXITED", -1, 9, "");
    job_of(&job, saps_spec, t, 4);
    for (size_t i = 0; i < 2; i++) {
        event ev;
        event_read(done[i], strlen(done[i]), 0, &ev, NULL, 0);
        cr_assert_eq(ev.kind, EVENT_DONE);
        sapsfold_add(&s, &ev.done, 4);
        event_fini(&ev);
    }
    sched_saps_summary(&s, &job, o);
    sapsfold_fini(&s);
    cr_assert_eq(json_integer_value(json_object_get(o, "rounds")), 50);
    cr_assert_eq(json_integer_value(json_object_get(o, "exchanges")), 100);
    cr_assert_float_eq(
        json_real_value(json_object_get(o, "slow_exchange_share")), 0.1, 1e-9);
    cr_assert_eq(json_integer_value(json_object_get(o, "consensus_workers")),
                 3);
    cr_assert(json_is_true(json_object_get(o, "matchings_agree")));
    cr_assert_eq(json_array_size(json_object_get(o, "workers_lost")), 1,
                 "worker 3, lost and said dead, is named once");
    cr_assert_eq(json_integer_value(
                     json_array_get(json_object_get(o, "workers_lost"), 0)),
                 3);
    rows = json_object_get(o, "bandwidth_mbps");
    cr_assert_eq(json_array_size(rows), 4);
    cr_assert_float_eq(
        json_real_value(json_array_get(json_array_get(rows, 0), 2)), 3.0, 1e-9,
        "bytes/s become MB/s");
    json_decref(o);
}
