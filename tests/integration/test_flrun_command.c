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

/* A program as a new user writes it: print() lines on stdout and stderr,
 * one flps.report so that today's flrun has a result to sum up (the
 * checks here are the launching and the output, not the report). */
static const char printer_py[] =
    "import os, sys\n"
    "import flps\n"
    "rank = os.environ['FLPS_RANK']\n"
    "print('hello from rank', rank, 'args', sys.argv[1:])\n"
    "print('a warning from rank', rank, file=sys.stderr)\n"
    "print('{\"not\": \"an event\"}')\n"
    "flps.report(iteration=1, test_accuracy=0.5)\n"
    "print('bye from rank', rank)\n";

Test(flrun_command, a_program_after_double_dash_runs_without_a_job_file)
{
    char dir[] = "/tmp/flrun-dash-XXXXXX", cmd[1024], path[160], want[128];
    char *log, *job;
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/prog.py", dir);
    write_file(path, printer_py);
    snprintf(cmd, sizeof(cmd),
             "cd %s && %s/flrun --log-dir %s/logs -n 2 -s 1 -- "
             "/usr/bin/python3 prog.py --lr 0.1",
             dir, FLPS_BIN_DIR, dir);
    run_to_summary(cmd, &r);
    cr_assert_not_null(strstr(r.err, "flrun: job prog: /usr/bin/python3 "
                                     "prog.py --lr 0.1, 2 workers"),
                       "named after its script: %s", r.err);
    for (int rank = 0; rank < 2; rank++) {
        /* On flrun's stdout and stderr, prefixed as flsubmit logs does. */
        snprintf(want, sizeof(want),
                 "[worker-%d] hello from rank %d args ['--lr', '0.1']\n", rank,
                 rank);
        cr_assert_not_null(strstr(r.out, want), "%s in:\n%s", want, r.out);
        snprintf(want, sizeof(want), "[worker-%d] bye from rank %d\n", rank,
                 rank);
        cr_assert_not_null(strstr(r.out, want), "%s in:\n%s", want, r.out);
        snprintf(want, sizeof(want), "[worker-%d] {\"not\": \"an event\"}\n",
                 rank);
        cr_assert_not_null(strstr(r.out, want), "%s in:\n%s", want, r.out);
        snprintf(want, sizeof(want), "[worker-%d] a warning from rank %d\n",
                 rank, rank);
        cr_assert_not_null(strstr(r.err, want), "%s in:\n%s", want, r.err);
        /* And in the rank's log, as printed. */
        snprintf(path, sizeof(path), "%s/logs/worker-%d.log", dir, rank);
        log = slurp(path);
        snprintf(want, sizeof(want), "hello from rank %d args", rank);
        cr_assert_not_null(strstr(log, want), "%s: %s", path, log);
        snprintf(want, sizeof(want), "a warning from rank %d\n", rank);
        cr_assert_not_null(strstr(log, want), "%s: %s", path, log);
        cr_assert_null(strstr(log, "\"event\""), "events are not logged: %s",
                       log);
        free(log);
    }
    /* The event lines are read, not shown: only the summary is JSON. */
    cr_assert_null(strstr(r.out, "{\"event\""), "%s", r.out);
    cr_assert_null(strstr(r.err, "{\"event\""), "%s", r.err);
    /* The job as it ran is kept beside the logs. */
    snprintf(path, sizeof(path), "%s/logs/flrun-job.yaml", dir);
    job = slurp(path);
    cr_assert_not_null(strstr(job, "workers: \"2\"\n"), "%s", job);
    cr_assert_not_null(strstr(job, "command: [\"/usr/bin/python3\", "
                                   "\"prog.py\", \"--lr\", \"0.1\"]"),
                       "%s", job);
    free(job);
    run_free(&r);
}

/* Prints a line, then waits for the file argv[1] that the test makes once
 * it has seen the line: a line held back in a buffer until the program
 * exits fails the job. */
static const char waiter_py[] =
    "import os, sys, time\n"
    "import flps\n"
    "print('waiting for the go')\n"
    "t = time.time() + 60\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    if time.time() > t:\n"
    "        sys.exit('nobody saw the line in 60 s')\n"
    "    time.sleep(0.05)\n"
    "flps.report(iteration=1, test_accuracy=0.5)\n";

Test(flrun_command, a_programs_lines_show_while_it_still_runs)
{
    char dir[] = "/tmp/flrun-live-XXXXXX", cmd[1024], path[160], line[512];
    char go[192];
    int seen = 0, status;
    FILE *out;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(go, sizeof(go), "%s/go", dir);
    snprintf(path, sizeof(path), "%s/live.py", dir);
    write_file(path, waiter_py);
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s/logs -n 1 -- %s %s %s",
             FLPS_BIN_DIR, dir, "/usr/bin/python3", path, go);
    out = popen(cmd, "r");
    cr_assert_not_null(out);
    while (fgets(line, sizeof(line), out) != NULL) {
        if (strcmp(line, "[worker-0] waiting for the go\n") == 0) {
            seen = 1;
            write_file(go, "");
        }
    }
    status = pclose(out);
    cr_assert(seen, "the line never came");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "flrun: status 0x%x", (unsigned)status);
}

Test(flrun_command, bad_flags_start_nothing_and_exit_2)
{
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"-n 0 -- /bin/true", "flrun: --workers: '0' is out of range; "
                              "expected an integer from 1 to 1024\n"
                              "nothing was started"},
        {"--compression gtop:0.01 -- /bin/true",
         "flrun: --compression: 'gtop:0.01' is not a codec"},
        {"--no-such-flag 1 -- /bin/true", "no-such-flag"},
        {"-n 2 --", "flrun: nothing after --; give the program"},
        {"-n 2 /bin/true x", "flrun: 'x' after the job file /bin/true: a "
                             "program and its arguments go after --"},
        {"-n 2 --density-warmup 10 -- /bin/true",
         "flrun: --density-warmup: compression 'dense' has no selection "
         "density to warm up"},
        {"-n 2 -- no-such-trainer", "no program 'no-such-trainer' in PATH"},
        {"", "usage: flrun"},
    };
    char dir[] = "/tmp/flrun-badflags-XXXXXX", cmd[512], logs[160];
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s %s", FLPS_BIN_DIR,
                 logs, cases[i].args);
        run_cmd(cmd, &r);
        cr_assert_eq(r.status, 2, "%s: %s", cases[i].args, r.err);
        cr_assert_not_null(strstr(r.err, cases[i].says), "%s: %s",
                           cases[i].args, r.err);
        cr_assert_eq(access(logs, F_OK), -1, "%s: nothing may start",
                     cases[i].args);
        run_free(&r);
    }
}

/* Run a command: job of 2 workers whose file ends in `keys` and whose
 * program is the shell text `script` (flrun's exit status, out, err). */
static void run_script_job(const char *name, const char *keys,
                           const char *script, run_result *r)
{
    char dir[] = "/tmp/flrun-cmdres-XXXXXX", path[160], text[1024];

    cr_assert_not_null(mkdtemp(dir));
    snprintf(text, sizeof(text),
             "name: %s\nmodel: mlp\nworkers: 2\niterations: 5\n%s"
             "command: [/bin/sh, %s/prog.sh]\n",
             name, keys, dir);
    snprintf(path, sizeof(path), "%s/prog.sh", dir);
    write_file(path, script);
    run_flrun_text(dir, text, r);
}

/* Run a command: job of 2 workers whose file ends in `keys` and whose
 * program is a shell script that prints, where the shell test `who`
 * holds (an empty one always), a done event of its rank with 40 bytes
 * sent, 80 dense, and the further fields `fields` (",\"k\":v...") (flrun's
 * exit status, out, err). */
static void run_done_job(const char *name, const char *keys, const char *who,
                         const char *fields, run_result *r)
{
    char script[1024];

    snprintf(script, sizeof(script),
             "#!/bin/sh\n%secho '{\"event\":\"done\",\"rank\":'$FLPS_RANK',"
             "\"iterations\":5,\"bytes_sent\":40,\"bytes_received\":9,"
             "\"dense_bytes\":80,\"resends\":0%s,\"seconds\":0.1}'\n"
             "exit 0\n",
             who, fields);
    run_script_job(name, keys, script, r);
}

Test(flrun_command,
     a_program_that_reports_nothing_succeeds_and_the_summary_says_so)
{
    run_result r;
    char *list;

    /* Rank 1 prints its done event; rank 0 prints nothing at all. */
    run_done_job("cmdquiet", "", "[ \"$FLPS_RANK\" = 1 ] || exit 0\n", "", &r);
    cr_assert_eq(r.status, 0, "every worker exited 0: %s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    cr_assert(json_is_null(json_object_get(r.summary, "test_accuracy")),
              "never reported, so not 0: %s", r.out);
    cr_assert_eq(json_integer_value(json_object_get(r.summary, "bytes_sent")),
                 40);
    list = json_dumps(json_object_get(r.summary, "not_reported"), JSON_COMPACT);
    cr_assert_str_eq(list, "[\"test_accuracy\",\"done\"]", "%s", r.out);
    free(list);
    list = json_dumps(json_object_get(r.summary, "ranks_not_reported"),
                      JSON_COMPACT);
    cr_assert_str_eq(list, "[0]");
    free(list);
    cr_assert_not_null(strstr(r.err, "flrun: done in "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "test accuracy not reported"), "%s",
                       r.err);
    cr_assert_not_null(strstr(r.err, "the done event of rank 0 (the byte "
                                     "counts leave it out)"),
                       "%s", r.err);
    run_free(&r);
}

Test(flrun_command, a_test_loss_never_reported_is_not_printed)
{
    run_result r;

    run_script_job("cmdnoloss", "",
                   "#!/bin/sh\n"
                   "[ \"$FLPS_RANK\" = 0 ] && echo '{\"event\":\"eval\","
                   "\"iter\":5,\"test_accuracy\":0.5}'\n"
                   "exit 0\n",
                   &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "iter 5: test accuracy 0.5000\n"), "%s",
                       r.err);
    cr_assert_null(strstr(r.err, "test loss"), "%s", r.err);
    run_free(&r);
}

Test(flrun_command, workers_that_ran_other_than_the_job_file_says_are_loud)
{
    run_result r;
    char *list;

    /* The file gives gtopk:0.01 and async; the program says it ran dense
     * ssgd (a program that ignored the job file). */
    run_done_job("cmdliar", "compression: gtopk:0.01\nmode: async\n", "",
                 ",\"compression\":\"dense\",\"mode\":\"ssgd\"", &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    cr_assert_str_eq(
        json_string_value(json_object_get(r.summary, "compression")), "dense",
        "the summary says what ran, not the file: %s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(r.summary, "mode")),
                     "ssgd");
    list = json_dumps(json_object_get(r.summary, "mismatch"), JSON_COMPACT);
    cr_assert_str_eq(list,
                     "[\"compression: the job file says gtopk:0.01, the "
                     "workers ran dense\",\"mode: the job file says async, "
                     "the workers ran ssgd\"]",
                     "%s", r.out);
    free(list);
    cr_assert_not_null(strstr(r.err, "flrun: MISMATCH: the job file says "
                                     "compression: gtopk:0.01 but the "
                                     "workers ran dense"),
                       "%s", r.err);
    cr_assert_not_null(strstr(r.err, "flrun: MISMATCH: the job file says "
                                     "mode: async but the workers ran ssgd"),
                       "%s", r.err);
    run_free(&r);
}
