/* transport: rdma | auto through a whole local cluster (scripts/cluster.sh:
 * Redis, flsched, two flagents) whose agents read a fake sysfs
 * (FLPS_SYSFS_ROOT): with no RDMA port anywhere an auto job trains over
 * ZeroMQ and its events say why, an rdma job is refused at submit naming
 * the key; with an ACTIVE port on every node auto chooses RDMA, and where
 * the build or the hardware cannot back it the job fails with the shard's
 * reason instead of hanging. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proto/transport_select.h"
#include "tests/common/fake_sysfs.h"

static char dir[64];
static char script[512];
static fake_sysfs sys;

static const char *sh(const char *cmd, int *status)
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

static const char *rcli(const char *args)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd),
             "REDISCLI_AUTH=\"$(head -n1 %s/redis-password)\" redis-cli "
             "--no-auth-warning -p \"$(cat %s/redis-port)\" %s 2>&1",
             dir, dir, args);
    return sh(cmd, NULL);
}

/* The cluster's script, its agents reading the fake sysfs. */
static const char *cluster(const char *verb, int *status)
{
    char cmd[2048];

    snprintf(cmd, sizeof(cmd),
             "FLPS_SYSFS_ROOT=%s FLPS_CLUSTER_DIR=%s FLPS_BIN_DIR=%s "
             "FLPS_AGENT_CPUS=2 FLPS_AGENT_MEMORY=2Gi bash %s %s 2>>%s/"
             "cluster.err",
             sys.root, dir, FLPS_BIN_DIR, script, verb, dir);
    return sh(cmd, status);
}

static const char *flsubmit(const char *args, int *status)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd),
             "FLPS_SCHEDULER=\"$(cat %s/scheduler)\" %s/flsubmit %s 2>&1", dir,
             FLPS_BIN_DIR, args);
    return sh(cmd, status);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait up to seconds for job's state to be one of a, b; returns it. */
static const char *job_final(const char *job, int seconds)
{
    static char state[32];
    char args[128];

    snprintf(args, sizeof(args), "HGET flps:job:%s state", job);
    for (int i = 0; i < seconds * 10; i++) {
        snprintf(state, sizeof(state), "%s", rcli(args));
        if (strcmp(state, "SUCCEEDED") == 0 || strcmp(state, "FAILED") == 0)
            return state;
        sleep_ms(100);
    }
    return state;
}

/* Wait until both agents published their facts. */
static void wait_facts(void)
{
    for (int i = 0; i < 100; i++) {
        if (strcmp(rcli("EXISTS flps:node:n1:facts"), "1") == 0 &&
            strcmp(rcli("EXISTS flps:node:n2:facts"), "1") == 0)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("the agents published no facts");
}

static void write_job(const char *name, const char *kind, char *path,
                      size_t len)
{
    FILE *f;

    snprintf(path, len, "%s/%s.yaml", dir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "name: %s\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
            "servers: 2\niterations: 30\ncompression: gtopk:0.01\n"
            "cpus_per_worker: 0.5\ncpus_per_server: 0.5\n"
            "memory_per_worker: 256Mi\nmemory_per_server: 256Mi\n"
            "max_restarts: 0\ntransport: %s\n",
            name, kind);
    fclose(f);
}

static void up(int with_ports)
{
    int status;

    strcpy(dir, "/tmp/flps-tcl-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(script, sizeof(script), "%s/scripts/cluster.sh", FLPS_SOURCE_DIR);
    fake_sysfs_init(&sys, 1);
    if (with_ports)
        fake_sysfs_port(&sys, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
    cluster("up", &status);
    cr_assert_eq(status, 0, "cluster.sh up failed: see %s/cluster.err", dir);
    wait_facts();
}

static void teardown(void)
{
    char cmd[256];

    cluster("down", NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    sh(cmd, NULL);
    fake_sysfs_fini(&sys);
}

TestSuite(transport_cluster, .fini = teardown, .timeout = 240);

Test(transport_cluster, without_rdma_auto_trains_on_zeromq_and_rdma_is_refused)
{
    char job[256], args[512];
    const char *out;
    int status;

    up(0);
    cr_assert_str_eq(rcli("HGET flps:node:n1:facts rdma_active_ports"), "0");

    write_job("needs-rdma", "rdma", job, sizeof(job));
    snprintf(args, sizeof(args), "submit %s", job);
    out = flsubmit(args, &status);
    cr_assert_neq(status, 0, "an rdma job no node can run is refused: %s", out);
    cr_assert(strstr(out, "none of the 2 registered nodes reports an ACTIVE "
                          "RDMA port") != NULL,
              "%s", out);

    write_job("auto", "auto", job, sizeof(job));
    snprintf(args, sizeof(args), "submit %s", job);
    out = flsubmit(args, &status);
    cr_assert_eq(status, 0, "%s", out);
    cr_assert_str_eq(out, "j1");
    cr_assert_str_eq(job_final("j1", 120), "SUCCEEDED", "reason: %s",
                     rcli("HGET flps:job:j1 reason"));
    cr_assert_str_eq(rcli("HGET flps:job:j1 transport"), "auto");
    cr_assert_str_eq(rcli("HGET flps:job:j1 transport_used"), "zmq");
    out = rcli("LRANGE flps:job:j1:events 0 -1");
    cr_assert(strstr(out, "transport: auto: ZeroMQ, because node n") != NULL,
              "%s", out);
    cr_assert(strstr(out, "reports no ACTIVE RDMA port") != NULL, "%s", out);
}

Test(transport_cluster,
     with_rdma_ports_auto_chooses_rdma_and_fails_clearly_without_it)
{
    char job[256], args[512];
    const char *out;
    int status;

    up(1);
    cr_assert_str_eq(rcli("HGET flps:node:n2:facts rdma_ports"), "mlx5_0:1");
    write_job("auto", "auto", job, sizeof(job));
    snprintf(args, sizeof(args), "submit %s", job);
    out = flsubmit(args, &status);
    cr_assert_eq(status, 0, "%s", out);
    out = job_final("j1", 120);
    cr_assert_str_eq(rcli("HGET flps:job:j1 transport_used"), "rdma");
    if (strcmp(out, "SUCCEEDED") == 0)
        cr_skip_test("this machine has real RDMA devices: the job ran on "
                     "them");
    /* The fake sysfs promised a port; the processes find none behind it
     * (or a build without RDMA) and say so: the job fails, it does not
     * hang. */
    cr_assert_str_eq(out, "FAILED", "state %s", out);
    out = rcli("HGET flps:job:j1 reason");
    cr_assert(strstr(out, "transport: rdma: ") != NULL, "reason: %s", out);
    cr_log_info("the failed job's reason: %s", out);
    if (!transport_have_rdma())
        cr_assert(strstr(out, "this build has no RDMA support") != NULL,
                  "reason: %s", out);
}
