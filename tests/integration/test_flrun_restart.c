/* flrun keeps a job going through the death of a shard: a job file with
 * checkpoint_interval has its killed shard (SIGKILL) started again with
 * --restore on its port, and the job finishes as well as an undisturbed
 * run of it. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runcmd.h"

#define JOB_NAME "flrun-restart"

/* A short MLP job on Fashion-MNIST with two shards. */
static const char job_text[] = "name: " JOB_NAME "\n"
                               "model: mlp\n"
                               "dataset: fashion-mnist\n"
                               "workers: 2\n"
                               "servers: 2\n"
                               "iterations: 400\n"
                               "batch_size: 32\n"
                               "lr: 0.05\n"
                               "momentum: 0.9\n"
                               "compression: gtopk:0.01\n"
                               "seed: 3\n"
                               "eval_every: 0\n"
                               "checkpoint_interval: 1\n";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The pid of shard `shard` of the job, or -1. */
static pid_t shard_pid(int shard)
{
    char cmd[160];
    FILE *p;
    int pid = -1;

    snprintf(cmd, sizeof(cmd),
             "pgrep -f -- '[f]lps --job " JOB_NAME " --shard %d '", shard);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    if (fscanf(p, "%d", &pid) != 1)
        pid = -1;
    pclose(p);
    return pid;
}

/* The summary's last line of the file, parsed (NULL if none). */
static json_t *summary_of(const char *path)
{
    char *text = slurp(path), *last;
    json_t *o = NULL;

    last = text + strlen(text);
    while (last > text && last[-1] == '\n')
        *--last = '\0';
    last = strrchr(text, '\n');
    last = last ? last + 1 : text;
    if (*last == '{')
        o = json_loads(last, 0, NULL);
    free(text);
    return o;
}

Test(flrun_restart, a_killed_shard_is_restored_and_the_job_trains_as_well,
     .timeout = 600)
{
    char dir[] = "/tmp/flrun-restart-XXXXXX", job[128], cmd[512];
    char out[160], err[160], logs[160];
    run_result ref;
    double ref_acc, acc, wall, t0;
    pid_t flrun, victim = -1;
    int st;
    json_t *sum;
    char *errtext;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    write_file(job, job_text);

    /* Undisturbed. */
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet --log-dir %s/ref %s",
             FLPS_BIN_DIR, dir, job);
    run_cmd(cmd, &ref);
    cr_assert_eq(ref.status, 0, "%s", ref.err);
    cr_assert_not_null(ref.summary);
    ref_acc = num(ref.summary, "test_accuracy");
    wall = num(ref.summary, "wall_seconds");
    run_free(&ref);

    /* The same job, shard 1 killed at about 40 % of the run. */
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(err, sizeof(err), "%s/err", dir);
    snprintf(logs, sizeof(logs), "%s/run", dir);
    t0 = now_s();
    flrun = fork();
    cr_assert_geq(flrun, 0);
    if (flrun == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char bin[256];
        dup2(o, STDOUT_FILENO);
        dup2(e, STDERR_FILENO);
        snprintf(bin, sizeof(bin), "%s/flrun", FLPS_BIN_DIR);
        execl(bin, bin, "--quiet", "--log-dir", logs, job, (char *)NULL);
        _exit(127);
    }
    while (now_s() - t0 < 0.4 * wall + 0.5)
        usleep(20000);
    victim = shard_pid(1);
    cr_assert_gt(victim, 0, "shard 1 of the job is not running");
    cr_assert_eq(kill(victim, SIGKILL), 0);
    cr_assert_eq(waitpid(flrun, &st, 0), flrun);
    errtext = slurp(err);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "flrun did not finish the job after shard 1 was killed:\n%s",
              errtext);
    cr_assert_not_null(strstr(errtext, "restarting it from its checkpoint"),
                       "flrun did not say it restarted the shard:\n%s",
                       errtext);
    free(errtext);
    sum = summary_of(out);
    cr_assert_not_null(sum, "no summary after the restart");
    acc = json_number_value(json_object_get(sum, "test_accuracy"));
    cr_assert_eq(json_number_value(json_object_get(sum, "iterations")), 400);
    cr_log_info("undisturbed accuracy %.4f in %.1f s; shard 1 killed at "
                "%.1f s: accuracy %.4f",
                ref_acc, wall, 0.4 * wall + 0.5, acc);
    cr_assert_leq(fabs(acc - ref_acc), 0.01,
                  "accuracy %.4f after the restart, %.4f undisturbed", acc,
                  ref_acc);
    json_decref(sum);
}
