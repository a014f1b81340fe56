/* scripts/cluster.sh, the local cluster: Redis keeps its data in an
 * append-only file under the cluster's directory and asks for a password
 * that never appears on a command line or in a log, so a restart of Redis
 * keeps every job, the running one keeps running, and job ids go on. */
#include <criterion/criterion.h>
#include <dirent.h>
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
