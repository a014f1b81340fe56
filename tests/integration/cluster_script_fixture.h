/* The local cluster of scripts/cluster.sh, driven from a test: the
 * cluster's directory and script, a shell command's output, redis-cli on
 * the cluster's Redis (its password from the cluster's file, through the
 * environment), the script's verbs and flsubmit against its scheduler.
 * Included by one test file each (every function is static). */
#ifndef FLPS_TESTS_CLUSTER_SCRIPT_FIXTURE_H
#define FLPS_TESTS_CLUSTER_SCRIPT_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static char dir[64];
static char script[512];
/* Variables the script's verbs run with, after the cluster's own, so
 * they may replace them (e.g. FLPS_SYSFS_ROOT=... for agents that read a
 * fake sysfs, FLPS_BIN_DIR=... for programs elsewhere). */
static char cluster_env[512];

/* Run a shell command; its stdout without the trailing newlines (static
 * buffer, valid until the next call) and its exit status in *status. */
static inline const char *sh(const char *cmd, int *status)
{
    static char out[16384];
    FILE *p = popen(cmd, "r");
    size_t n;
    int st;

    cr_assert_not_null(p, "%s", cmd);
    n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = '\0';
    st = pclose(p);
    if (status != NULL)
        *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* A redis-cli command on the cluster's Redis, authenticated through the
 * environment from the password file. */
static inline const char *rcli(const char *args)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd),
             "REDISCLI_AUTH=\"$(head -n1 %s/redis-password)\" redis-cli "
             "--no-auth-warning -p \"$(cat %s/redis-port)\" %s 2>&1",
             dir, dir, args);
    return sh(cmd, NULL);
}

/* scripts/cluster.sh VERB on the cluster's directory, 2 CPUs and 2 GiB
 * per agent; its stderr goes to cluster.err there. */
static inline const char *cluster(const char *verb, int *status)
{
    char cmd[2048];

    snprintf(cmd, sizeof(cmd),
             "FLPS_CLUSTER_DIR=%s FLPS_BIN_DIR=%s FLPS_AGENT_CPUS=2 "
             "FLPS_AGENT_MEMORY=2Gi %s bash %s %s 2>>%s/cluster.err",
             dir, FLPS_BIN_DIR, cluster_env, script, verb, dir);
    return sh(cmd, status);
}

static inline const char *flsubmit(const char *args, int *status)
{
    char cmd[2048];

    snprintf(
        cmd, sizeof(cmd),
        "FLPS_SCHEDULER=\"$(cat %s/scheduler)\" FLPS_TOKEN_FILE=%s/api-token "
        "%s/flsubmit %s 2>&1",
        dir, dir, FLPS_BIN_DIR, args);
    return sh(cmd, status);
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A fresh directory /tmp/PREFIX-XXXXXX for the cluster, and the script. */
static inline void cluster_dir(const char *prefix)
{
    snprintf(dir, sizeof(dir), "/tmp/%s-XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(script, sizeof(script), "%s/scripts/cluster.sh", FLPS_SOURCE_DIR);
}

/* The cluster down and its directory gone. */
static inline void cluster_remove(void)
{
    char cmd[256];

    cluster("down", NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    sh(cmd, NULL);
}

#endif
