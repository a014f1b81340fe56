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

#include "tests/fakes/fake_sysfs.h"
#include "transports/select.h"

#include "cluster_script_fixture.h"

static fake_sysfs sys;

/* Wait up to seconds for job's state to be one of a, b; returns it. */
static const char *job_final(const char *job, int seconds)
{
    static char state[32];
    char args[128];

    snprintf(args, sizeof(args), "HGET flps:job:%s state", job);
    for (int i = 0; i < seconds * 10; i++) {
        snprintf(state, sizeof(state), "%.31s", rcli(args));
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

    cluster_dir("flps-tcl");
    fake_sysfs_init(&sys, 1);
    snprintf(cluster_env, sizeof(cluster_env), "FLPS_SYSFS_ROOT=%s", sys.root);
    if (with_ports)
        fake_sysfs_port(&sys, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
    cluster("up", &status);
    cr_assert_eq(status, 0, "cluster.sh up failed: see %s/cluster.err", dir);
    wait_facts();
}

static void teardown(void)
{
    cluster_remove();
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
    if (!transport_is_built(TRANSPORT_KIND_RDMA))
        cr_assert(strstr(out, "this build has no RDMA support") != NULL,
                  "reason: %s", out);
}
