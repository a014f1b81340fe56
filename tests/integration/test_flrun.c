/* flrun end to end: real jobs on Fashion-MNIST must train as well as the
 * issue demands, bad job files start nothing, and a dying process is
 * named with its exit status. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runcmd.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(flrun, a_job_file_with_an_unknown_key_starts_nothing_and_names_the_line)
{
    char dir[] = "/tmp/flrun-bad-XXXXXX", job[128], cmd[512], logs[160];
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/bad.yaml", dir);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    write_file(job, "name: bad\nmodel: mlp\nwrokers: 4\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s %s", FLPS_BIN_DIR, logs,
             job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 2);
    cr_assert_not_null(strstr(r.err, "line 3"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "wrokers"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "workers"), "%s", r.err);
    cr_assert_eq(access(logs, F_OK), -1, "nothing may start: no log dir");
    run_free(&r);
}

Test(flrun, a_worker_that_dies_is_named_with_its_exit_status)
{
    char dir[] = "/tmp/flrun-die-XXXXXX", job[128], cmd[1024], path[160];
    run_result r;

    /* A bin dir with the real flps and a flworker that fails at once. */
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/flps", dir);
    cr_assert_eq(symlink(FLPS_BIN_DIR "/flps", path), 0);
    snprintf(path, sizeof(path), "%s/flworker", dir);
    write_file(path, "#!/bin/sh\necho 'simulated failure' >&2\nexit 3\n");
    chmod(path, 0755);
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    write_file(job, "name: dies\nmodel: mlp\nworkers: 2\nservers: 1\n"
                    "iterations: 10\n");
    snprintf(cmd, sizeof(cmd), "FLPS_BIN_DIR=%s %s/flrun %s", dir, FLPS_BIN_DIR,
             job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "flworker rank"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "exit status 3"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "simulated failure"),
                       "the tail of its log is shown: %s", r.err);
    /* The shard it started was stopped: no flps of this job survives. */
    cr_assert_eq(system("pgrep -f 'flps --job [d]ies' >/dev/null"), 256,
                 "a shard of the job is still running");
    run_free(&r);
}

Test(flrun, a_synthetic_job_learns_its_test_set)
{
    char dir[] = "/tmp/flrun-syn-XXXXXX", job[128], cmd[512];
    run_result r;

    /* Train and test come from one draw of class centres: a model that
     * learned the training set classifies the test set. */
    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    write_file(job, "name: syn\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
                    "servers: 1\niterations: 200\ncompression: topk:0.01\n"
                    "eval_every: 0\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet %s", FLPS_BIN_DIR, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary);
    cr_assert_geq(num(r.summary, "test_accuracy"), 0.95);
    run_free(&r);
}

Test(flrun, writes_logs_plans_and_checkpoints_only_its_user_can_read)
{
    char dir[] = "/tmp/flrun-modes-XXXXXX", job[128], cmd[768], logs[160];
    run_result r;
    mode_t old = umask(022); /* the usual umask, inherited by flrun */
    struct stat st;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    write_file(job, "name: modes\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
                    "servers: 1\niterations: 300\ncompression: auto\n"
                    "checkpoint_interval: 0.2\neval_every: 0\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet --log-dir %s %s", FLPS_BIN_DIR,
             logs, job);
    run_cmd(cmd, &r);
    umask(old);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_eq(stat(logs, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0700, "%s: %o", logs,
                 (unsigned)(st.st_mode & 07777));
    /* Something was written: logs of every process, and the plan. */
    snprintf(cmd, sizeof(cmd), "test -n \"$(find %s -type f)\"", logs);
    cr_assert_eq(system(cmd), 0, "no file under %s", logs);
    snprintf(cmd, sizeof(cmd),
             "test -z \"$(find %s -perm /077)\" || find %s -perm /077 -ls "
             ">&2",
             logs, logs);
    cr_assert_eq(system(cmd), 0,
                 "a file or directory under %s is readable by others", logs);
    run_free(&r);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(flrun, a_built_in_job_of_flags_alone_trains_and_shows_its_workers_lines)
{
    char dir[] = "/tmp/flrun-flags-XXXXXX", cmd[512], path[160];
    char *job;
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "%s/flrun --log-dir %s/logs -n 2 -s 1 --model mlp "
             "--iterations 50",
             FLPS_BIN_DIR, dir);
    run_to_summary(cmd, &r);
    cr_assert_eq(num(r.summary, "iterations"), 50);
    cr_assert_not_null(strstr(r.err, "flrun: job mlp: mlp on fashion-mnist, 2 "
                                     "workers"),
                       "%s", r.err);
    /* flworker's own lines, prefixed by rank as a program's are. */
    cr_assert_not_null(strstr(r.err, "[worker-1] "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "rank 1 done: 50 iterations"), "%s",
                       r.err);
    snprintf(path, sizeof(path), "%s/logs/flrun-job.yaml", dir);
    job = slurp(path);
    cr_assert_str_eq(job, "name: \"mlp\"\nmodel: \"mlp\"\nworkers: \"2\"\n"
                          "servers: \"1\"\niterations: \"50\"\n");
    free(job);
    run_free(&r);
}

Test(flrun, the_job_files_env_reaches_the_built_in_worker)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], cmd[PATH_MAX + 16];
    char *wlog, *slog;
    run_result r;

    /* FLPS_LOG=error silences every INFO line of the process that reads
     * it: the workers', not the shards' (env: is the workers'). */
    run_flrun_text_in_tmp("name: envjob\nmodel: mlp\ndataset: synthetic\n"
                          "workers: 2\nservers: 1\niterations: 20\n"
                          "eval_every: 0\nenv:\n  FLPS_LOG: error\n",
                          &r, dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(path, sizeof(path), "%s/logs/flworker-0.log", dir);
    wlog = slurp(path);
    snprintf(path, sizeof(path), "%s/logs/flps-0.log", dir);
    slog = slurp(path);
    cr_assert_null(strstr(wlog, " INFO "),
                   "flworker logged INFO under env: FLPS_LOG: error:\n%s",
                   wlog);
    cr_assert_not_null(strstr(slog, " INFO "), "the shard's log:\n%s", slog);
    free(wlog);
    free(slog);
    run_free(&r);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(flrun, flags_override_the_job_files_values)
{
    char dir[] = "/tmp/flrun-over-XXXXXX", job[128], cmd[512], path[160];
    char *text;
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    write_file(job, "name: over\nmodel: mlp\ndataset: synthetic\nworkers: 3\n"
                    "servers: 2\niterations: 5000\neval_every: 0\n");
    snprintf(cmd, sizeof(cmd),
             "%s/flrun --quiet --log-dir %s/logs %s --iterations 30 -n 1 "
             "--compression topk:0.1",
             FLPS_BIN_DIR, dir, job);
    run_to_summary(cmd, &r);
    cr_assert_eq(num(r.summary, "iterations"), 30);
    cr_assert_str_eq(r.err, "", "--quiet shows nothing: %s", r.err);
    /* run_cmd took off the summary's newline: one line is left. */
    cr_assert_null(strchr(r.out, '\n'), "only the summary on stdout: %s",
                   r.out);
    snprintf(path, sizeof(path), "%s/logs/flrun-job.yaml", dir);
    text = slurp(path);
    cr_assert_str_eq(text,
                     "name: over\nmodel: mlp\ndataset: synthetic\nworkers: "
                     "\"1\"\nservers: 2\niterations: \"30\"\neval_every: 0\n"
                     "compression: \"topk:0.1\"\n",
                     "%s", text);
    free(text);
    snprintf(path, sizeof(path), "%s/logs/flps-1.log", dir);
    cr_assert_eq(access(path, F_OK), 0, "the file's two servers ran");
    run_free(&r);
}
