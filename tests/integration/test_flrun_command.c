/* flrun with command: jobs that need no PyTorch: the user's program gets
 * the job's FLPS_* variables and env:, its events make the summary, and a
 * failing, missing or endless program fails the job with a reason. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runcmd.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* Prints what flworker prints (rank 0's eval, every rank's done) and
 * keeps its environment for the test to read. */
static const char reporter_sh[] =
    "#!/bin/sh\n"
    "env > \"$OUT_DIR/env-$FLPS_RANK\"\n"
    "if [ \"$FLPS_RANK\" = 0 ]; then\n"
    "  echo '{\"event\":\"progress\",\"iter\":5,\"iterations\":5,"
    "\"loss\":0.25,\"accuracy\":0.5,\"bytes_sent\":100,\"dense_bytes\":"
    "1000,\"elapsed\":0.1}'\n"
    "  echo '{\"event\":\"eval\",\"iter\":5,\"test_accuracy\":0.625}'\n"
    "fi\n"
    "echo not an event\n"
    "echo \"{\\\"event\\\":\\\"done\\\",\\\"rank\\\":$FLPS_RANK,"
    "\\\"bytes_sent\\\":100,\\\"bytes_received\\\":7,"
    "\\\"dense_bytes\\\":1000}\"\n";

Test(flrun_command, the_program_gets_the_jobs_variables_and_its_events_count)
{
    char dir[] = "/tmp/flrun-cmd-XXXXXX", job[128], cmd[1024], path[160];
    char text[1024];
    char *env;
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/report.sh", dir);
    write_file(path, reporter_sh);
    chmod(path, 0755);
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(text, sizeof(text),
             "name: cmdenv\nmodel: cnn\nworkers: 2\nservers: 2\n"
             "iterations: 5\nlr: 0.125\nbatch_size: 8\nseed: 7\n"
             "compression: gtopk:0.01\n"
             "command: [%s]\nenv:\n  OUT_DIR: %s\n  MY_SETTING: 'a b'\n",
             path, dir);
    write_file(job, text);
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s/logs %s", FLPS_BIN_DIR,
             dir, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    cr_assert_float_eq(
        json_real_value(json_object_get(r.summary, "test_accuracy")), 0.625,
        1e-9);
    cr_assert_eq(json_integer_value(json_object_get(r.summary, "bytes_sent")),
                 200, "both ranks' bytes: %s", r.out);
    cr_assert_eq(json_integer_value(json_object_get(r.summary, "dense_bytes")),
                 2000);
    cr_assert_not_null(strstr(r.err, "iter 5/5  loss 0.2500  acc 0.5000"),
                       "progress with accuracy on screen: %s", r.err);
    cr_assert_not_null(strstr(r.err, "iter 5: test accuracy 0.6250"), "%s",
                       r.err);

    snprintf(path, sizeof(path), "%s/env-1", dir);
    env = slurp(path);
    cr_assert_not_null(strstr(env, "\nFLPS_RANK=1\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_JOB=cmdenv\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_WORKERS=2\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_SERVERS=tcp://127.0.0.1:"), "%s", env);
    cr_assert_not_null(strstr(env, ",tcp://127.0.0.1:"), "two shards: %s", env);
    cr_assert_not_null(strstr(env, "FLPS_ITERATIONS=5\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_COMPRESSION=gtopk:0.01\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_LR=0.125\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_BATCH=8\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_SEED=7\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_MODEL=cnn\n"), "%s", env);
    cr_assert_not_null(
        strstr(env, "FLPS_DATA_DIR=/usr/share/datasets/fashion-mnist\n"), "%s",
        env);
    cr_assert_not_null(strstr(env, "FLPS_LIBRARY=/"), "%s", env);
    cr_assert_not_null(strstr(env, "PYTHONPATH=" FLPS_SOURCE_DIR "/python"),
                       "%s", env);
    cr_assert_not_null(strstr(env, "MY_SETTING=a b\n"), "%s", env);
    cr_assert_null(strstr(env, "FLPS_PLAN_FILE="), "no plan: %s", env);
    free(env);
    run_free(&r);
}

Test(flrun_command, a_failing_program_fails_the_job_with_its_last_error_line)
{
    char dir[] = "/tmp/flrun-cmdfail-XXXXXX", job[128], cmd[512];
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    write_file(job,
               "name: cmdfail\nmodel: mlp\nworkers: 2\niterations: 10\n"
               "command: [/bin/sh, -c, 'if [ $FLPS_RANK = 1 ]; then echo "
               "Traceback >&2; echo \"  File x.py\" >&2; echo "
               "\"ValueError: batch of rank $FLPS_RANK is empty\" >&2; echo "
               ">&2; exit 4; fi; sleep 60']\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun %s", FLPS_BIN_DIR, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "flrun: job cmdfail failed: worker rank "
                                     "1 (sh) exit status 4: ValueError: "
                                     "batch of rank 1 is empty\n"),
                       "%s", r.err);
    cr_assert_eq(system("pgrep -f 'flps --job [c]mdfail' >/dev/null"), 256,
                 "a shard of the job is still running");
    run_free(&r);
}

Test(flrun_command, a_program_not_in_path_starts_nothing)
{
    char dir[] = "/tmp/flrun-cmdnone-XXXXXX", job[128], cmd[512], logs[160];
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    write_file(job, "name: cmdnone\nmodel: mlp\ncommand: no-such-trainer x\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s %s", FLPS_BIN_DIR, logs,
             job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "no program 'no-such-trainer' in PATH"),
                       "%s", r.err);
    cr_assert_eq(access(logs, F_OK), -1, "nothing may start: no log dir");
    run_free(&r);
}

Test(flrun_command, a_program_that_never_finishes_is_stopped_at_the_time_limit)
{
    char dir[] = "/tmp/flrun-cmdslow-XXXXXX", job[128], cmd[512], text[256];
    char look[64];
    struct timespec t0, t1;
    run_result r;
    /* A duration of this run's own, so that another run's sleep (tests
     * run side by side) is not taken for this one's. */
    const unsigned secs = 100000u + (unsigned)getpid() % 100000u;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(text, sizeof(text),
             "name: cmdslow\nmodel: mlp\nworkers: 2\ntime_limit: 2\n"
             "command: sleep %u\n",
             secs);
    write_file(job, text);
    snprintf(cmd, sizeof(cmd), "%s/flrun %s", FLPS_BIN_DIR, job);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_cmd(cmd, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "ran past its time_limit of 2 s"), "%s",
                       r.err);
    cr_assert_lt(t1.tv_sec - t0.tv_sec, 30, "stopped within the grace");
    snprintf(look, sizeof(look), "pgrep -f '^[s]leep %u$' >/dev/null", secs);
    cr_assert_eq(system(look), 256, "the program was stopped");
    run_free(&r);
}
