/* scripts/cluster.sh, the local cluster: Redis keeps its data in an
 * append-only file under the cluster's directory and asks for a password
 * that never appears on a command line or in a log, so a restart of Redis
 * keeps every job, the running one keeps running, and job ids go on. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster_script_fixture.h"

/* Wait up to seconds for the job's state to be want. */
static int job_state_is(const char *job, const char *want, int seconds)
{
    char args[128];

    snprintf(args, sizeof(args), "HGET flps:job:%s state", job);
    for (int i = 0; i < seconds * 10; i++) {
        if (strcmp(rcli(args), want) == 0)
            return 1;
        sleep_ms(100);
    }
    return 0;
}

static void setup(void)
{
    cluster_dir("flps-clsh");
}

static void teardown(void)
{
    cluster_remove();
}

TestSuite(cluster_script, .init = setup, .fini = teardown, .timeout = 240);

/* Does any file directly in d, or any process's command line, hold pw? */
static int password_leaks(const char *d, const char *pw, const char *pidfile)
{
    char cmd[1024];
    int st;
    FILE *f;
    char name[64];
    int pid;

    snprintf(cmd, sizeof(cmd),
             "grep -rlF -- '%s' %s/*.log %s/*.out %s/*.err 2>/dev/null", pw, d,
             d, d);
    if (sh(cmd, &st)[0] != '\0')
        return 1;
    f = fopen(pidfile, "r");
    cr_assert_not_null(f);
    while (fscanf(f, "%63s %d", name, &pid) == 2) {
        char path[64], args[4096];
        size_t n;
        FILE *c;
        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
        c = fopen(path, "r");
        cr_assert_not_null(c, "%s (%s) is not running", name, path);
        n = fread(args, 1, sizeof(args) - 1, c);
        fclose(c);
        for (size_t i = 0; i < n; i++)
            if (args[i] == '\0')
                args[i] = ' ';
        args[n] = '\0';
        if (strstr(args, pw) != NULL) {
            fclose(f);
            return 1;
        }
    }
    fclose(f);
    return 0;
}

Test(cluster_script, jobs_and_job_ids_survive_a_redis_restart)
{
    char path[512], job[256], pw[128], pids[128];
    struct stat st;
    const char *out;
    int status;
    FILE *f;

    out = cluster("up", &status);
    cr_assert_eq(status, 0, "cluster.sh up failed: see %s/cluster.err", dir);
    cr_assert_eq(strncmp(out, "export FLPS_SCHEDULER=http://", 29), 0, "%s",
                 out);

    /* The password: 0600, required by Redis, nowhere in sight. */
    snprintf(path, sizeof(path), "%s/redis-password", dir);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(pw, sizeof(pw), f));
    fclose(f);
    pw[strcspn(pw, "\n")] = '\0';
    cr_assert_geq(strlen(pw), 32, "a generated password, not a default");
    snprintf(path, sizeof(path), "%s/redis.conf", dir);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "the config holds the password");
    {
        char cmd[256];
        snprintf(cmd, sizeof(cmd),
                 "redis-cli -p \"$(cat %s/redis-port)\" ping 2>&1", dir);
        cr_assert_not_null(strstr(sh(cmd, NULL), "NOAUTH"),
                           "Redis answers without the password");
    }
    cr_assert_str_eq(rcli("CONFIG GET appendonly"), "appendonly\nyes");
    cr_assert_str_eq(rcli("CONFIG GET appendfsync"), "appendfsync\neverysec");
    snprintf(path, sizeof(path), "CONFIG GET dir");
    snprintf(job, sizeof(job), "dir\n%s/redis", dir);
    cr_assert_str_eq(rcli(path), job);

    /* A long job, running. */
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    f = fopen(job, "w");
    cr_assert_not_null(f);
    fputs("name: survivor\nmodel: mlp\nworkers: 1\nservers: 1\n"
          "iterations: 1000000\n",
          f);
    fclose(f);
    snprintf(path, sizeof(path), "submit %s", job);
    cr_assert_str_eq(flsubmit(path, &status), "j1");
    cr_assert(job_state_is("j1", "RUNNING", 60), "j1 never ran");
    snprintf(pids, sizeof(pids), "%s/pids", dir);
    cr_assert_not(password_leaks(dir, pw, pids),
                  "the password is in a log or on a command line");

    /* Redis dies (SIGKILL) and comes back on its append-only file. */
    cluster("restart-redis", &status);
    cr_assert_eq(status, 0, "see %s/cluster.err", dir);
    cr_assert_str_eq(rcli("HGET flps:job:j1 state"), "RUNNING",
                     "the job survived the restart");
    cr_assert_str_eq(rcli("HGET flps:job:j1 name"), "survivor");
    cr_assert_str_eq(rcli("GET flps:seq:job"), "1");
    cr_assert_str_eq(rcli("SCARD flps:job:j1:tasks"), "2");

    /* flsched reconnects; the next job is j2, not j1 again. */
    for (int i = 0; i < 100; i++) {
        flsubmit("list", &status);
        if (status == 0)
            break;
        sleep_ms(100);
    }
    cr_assert_eq(status, 0, "flsched never answered again");
    snprintf(path, sizeof(path), "submit %s", job);
    cr_assert_str_eq(flsubmit(path, &status), "j2");
    cr_assert_str_eq(rcli("GET flps:seq:job"), "2");
    /* The running job was not killed by the restart: still its first
     * attempt, still running a while later. */
    sleep_ms(3000);
    cr_assert_str_eq(rcli("HGET flps:job:j1 state"), "RUNNING");
    cr_assert_str_eq(rcli("HGET flps:job:j1 attempt"), "0");
    cr_assert_str_eq(rcli("HGET flps:job:j1 restarts"), "0");
    cr_assert_not(password_leaks(dir, pw, pids),
                  "the password is in a log or on a command line");
}

/* A job file at path, readable by every user. */
static void write_job(const char *path, const char *fmt, ...)
{
    FILE *f = fopen(path, "w");
    va_list ap;

    cr_assert_not_null(f, "%s", path);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(path, 0644), 0);
}

/* Run cmd as uid 4242, a user of the machine that is not the cluster's;
 * its output and exit status. */
static const char *as_other_user(const char *cmd, int *status)
{
    char line[2048];

    snprintf(line, sizeof(line),
             "setpriv --reuid=4242 --regid=4242 --clear-groups "
             "sh -c '%s' 2>&1",
             cmd);
    return sh(line, status);
}

/* What a file's mode is (its permission bits), -1 when it is missing. */
static int mode_of(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

Test(cluster_script, another_user_submits_nothing_and_no_job_runs_as_root)
{
    char path[512], cmd[1024], sched[256], job[512];
    const char *out;
    int status;
    FILE *f;

    if (geteuid() != 0)
        cr_skip_test("starts the cluster as root and acts as uid 4242");
    out = cluster("up", &status);
    cr_assert_eq(status, 0, "cluster.sh up failed: see %s/cluster.err", dir);
    cr_assert_not_null(strstr(out, "\nexport FLPS_TOKEN_FILE="), "%s", out);

    /* The token and Redis's data: the cluster's user's alone. */
    snprintf(path, sizeof(path), "%s/api-token", dir);
    cr_assert_eq(mode_of(path), 0600);
    snprintf(path, sizeof(path), "%s/redis", dir);
    cr_assert_eq(mode_of(path), 0700);
    cr_assert_str_eq(rcli("SET flps:probe 1"), "OK"); /* the AOF grows */
    sleep_ms(1500);
    snprintf(cmd, sizeof(cmd), "find %s/redis -mindepth 1 -perm /077", dir);
    cr_assert_str_eq(sh(cmd, NULL), "", "readable by others");
    snprintf(cmd, sizeof(cmd), "find %s/redis -type f | wc -l", dir);
    cr_assert_neq(atoi(sh(cmd, NULL)), 0, "Redis wrote no file");

    /* Another user: no token, so no job. */
    snprintf(path, sizeof(path), "%s/scheduler", dir);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(sched, sizeof(sched), f));
    fclose(f);
    sched[strcspn(sched, "\n")] = '\0';
    snprintf(job, sizeof(job), "%s/intruder.yaml", dir);
    write_job(job, "name: intruder\nmodel: mlp\nworkers: 1\nservers: 1\n"
                   "command: [/bin/sh, -c, 'id -u']\n");
    snprintf(cmd, sizeof(cmd), "cat %s/api-token", dir);
    as_other_user(cmd, &status);
    cr_assert_neq(status, 0, "uid 4242 read the token");
    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit submit %s", sched,
             FLPS_BIN_DIR, job);
    out = as_other_user(cmd, &status);
    cr_assert_eq(status, 4, "flsubmit as uid 4242: %s", out);
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -w %%{http_code} -X POST "
             "--data-binary @%s %s/v1/jobs",
             job, sched);
    cr_assert_str_eq(as_other_user(cmd, NULL), "401");
    cr_assert_str_eq(rcli("GET flps:seq:job"), "", "a job was made");

    /* With the token: the job's command runs, as a uid of its own. */
    snprintf(job, sizeof(job), "%s/who.yaml", dir);
    write_job(job,
              "name: who\nmodel: mlp\nworkers: 1\nservers: 1\n"
              "command: [/bin/sh, -c, 'echo uid=$(id -u); "
              "cat %s/redis-password %s/api-token 2>&1 | sed s/^/read:/; "
              "true']\n",
              dir, dir);
    snprintf(cmd, sizeof(cmd), "submit %s", job);
    cr_assert_str_eq(flsubmit(cmd, &status), "j1");
    cr_assert(job_state_is("j1", "SUCCEEDED", 90), "j1: %s",
              rcli("HGET flps:job:j1 state"));
    out = flsubmit("logs j1", &status);
    cr_assert_eq(status, 0, "%s", out);
    {
        const char *u = strstr(out, "uid=");
        cr_assert_not_null(u, "%s", out);
        cr_assert_neq(atoi(u + 4), 0, "the job ran as root:\n%s", out);
        cr_assert(atoi(u + 4) >= 60000 && atoi(u + 4) <= 60999, "%s", out);
    }
    snprintf(cmd, sizeof(cmd), "read:cat: %s/redis-password: Permission denied",
             dir);
    cr_assert_not_null(strstr(out, cmd), "%s", out);
    snprintf(cmd, sizeof(cmd), "read:cat: %s/api-token: Permission denied",
             dir);
    cr_assert_not_null(strstr(out, cmd), "%s", out);
}

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* A tree under a private directory (a clone in /root on a fresh machine):
 * the job uids cannot reach its programs, so `up` copies the programs,
 * libflps and the Python package into the cluster's directory and the
 * agents run from there; a built-in job and a Python one that loads
 * libflps both succeed, as a uid of their own, from the copies. */
Test(cluster_script, a_private_tree_is_staged_for_the_job_uids)
{
    char priv[64] = "/tmp/flps-priv-XXXXXX", cmd[2048], job[512], arg[600];
    const char *out, *u;
    int status;

    if (geteuid() != 0)
        cr_skip_test("starts the cluster as root, with per-job uids");
    cr_assert_not_null(mkdtemp(priv)); /* 0700: root's alone */
    snprintf(cmd, sizeof(cmd),
             "cp -a %s %s/bin && mkdir %s/lib && cp -a %s/../lib/libflps.so* "
             "%s/lib/",
             FLPS_BIN_DIR, priv, priv, FLPS_BIN_DIR, priv);
    sh(cmd, &status);
    cr_assert_eq(status, 0, "copying the build into %s", priv);
    snprintf(cluster_env, sizeof(cluster_env), "FLPS_BIN_DIR=%s/bin", priv);
    cluster("up", &status);
    cr_assert_eq(status, 0, "cluster.sh up failed: see %s/cluster.err", dir);
    snprintf(cmd, sizeof(cmd), "cat %s/cluster.err", dir);
    out = sh(cmd, NULL);
    snprintf(job, sizeof(job), "copied to %s/stage", dir);
    cr_assert_not_null(strstr(out, job), "%s", out);

    snprintf(job, sizeof(job), "%s/mlp.yaml", dir);
    write_job(job, "name: staged\nmodel: mlp\ndataset: synthetic\n"
                   "workers: 1\nservers: 1\niterations: 20\n");
    snprintf(arg, sizeof(arg), "submit %s", job);
    cr_assert_str_eq(flsubmit(arg, &status), "j1");
    cr_assert(job_state_is("j1", "SUCCEEDED", 90), "j1 did not succeed: %s",
              rcli("HGET flps:job:j1 reason"));

    /* The package from the stage, and (but in a sanitizer build, whose
     * libflps /usr/bin/python3 cannot load) libflps from it too. */
    snprintf(job, sizeof(job), "%s/py.yaml", dir);
    write_job(job,
              "name: staged-py\nworkers: 1\nservers: 1\n"
              "command: [/usr/bin/python3, -c, 'import os, flps, "
              "flps._native as n; print(\"uid=%%d pkg=%%s lib=%%s\" %% "
              "(os.getuid(), flps.__file__, %s))']\n",
              SANITIZED ? "\"-\"" : "n.library_path()");
    snprintf(arg, sizeof(arg), "submit %s", job);
    cr_assert_str_eq(flsubmit(arg, &status), "j2");
    cr_assert(job_state_is("j2", "SUCCEEDED", 90), "j2 did not succeed: %s",
              rcli("HGET flps:job:j2 reason"));
    out = flsubmit("logs j2", &status);
    u = strstr(out, "uid=");
    cr_assert_not_null(u, "%s", out);
    cr_assert(atoi(u + 4) >= 60000 && atoi(u + 4) <= 60999, "%s", out);
    snprintf(job, sizeof(job), "pkg=%s/stage/python/flps/", dir);
    cr_assert_not_null(strstr(out, job), "%s", out);
    snprintf(job, sizeof(job), "lib=%s/stage/lib/", dir);
    cr_assert(SANITIZED || strstr(out, job) != NULL, "%s", out);
    cluster("down", NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", priv);
    sh(cmd, NULL);
}
