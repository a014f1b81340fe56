/* The GPU clocks of a worker killed mid-job on the local cluster
 * (redis-server, flsched, two flagents; tests/integration/
 * cluster_fixture.h), on the NVML stub every process of the cluster
 * shares: the worker sets gpu_clock, is killed with SIGKILL (it restores
 * nothing), and its flagent restores the clocks from the worker's record
 * once it has reaped it. */
#include <criterion/criterion.h>
#include <glob.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_fixture.h"
#include "tests/fakes/fake_sysfs.h"
#include "tests/fakes/nvml_stub_ctl.h"

static stub_ctl stub;
static fake_sysfs sysfs;

/* The stub and an empty sysfs in the environment the agents, and so
 * their workers, inherit. */
static void setup(void)
{
    stub_init(&stub, "init ok\ndevices 1\nd0.clocks 1980,1830,1680,1530\n"
                     "d0.mem 3201\nd0.realtime 1\n");
    fake_sysfs_init(&sysfs, 0);
    setenv("FLPS_NVML_LIBRARY", FLPS_NVML_STUB, 1);
    setenv("FLPS_SYSFS_ROOT", sysfs.root, 1);
    cluster_setup("flps-energy", 0);
}

static void teardown(void)
{
    cluster_teardown();
    stub_fini(&stub);
    fake_sysfs_fini(&sysfs);
    unsetenv("FLPS_NVML_LIBRARY");
    unsetenv("FLPS_SYSFS_ROOT");
}

TestSuite(cluster_energy, .init = setup, .fini = teardown, .timeout = 300);

/* The pid that job id's worker of rank 0 wrote into its record of the
 * clocks it changed (in its attempt's directory on whichever node runs
 * it), or -1 while there is none. */
static pid_t recorded_pid(const char *id)
{
    char pattern[256];
    glob_t g;
    long pid = -1;

    snprintf(pattern, sizeof(pattern), "%s/n*/%s/attempt-0/gpu_clock.rank0",
             cl.dir, id);
    if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1) {
        char *text = slurp(g.gl_pathv[0]);
        const char *line = strstr(text, "\npid ");

        if (line == NULL || sscanf(line, "\npid %ld", &pid) != 1)
            pid = -1;
        free(text);
    }
    globfree(&g);
    return (pid_t)pid;
}

/* Poll the stub until key reaches want (or fail after timeout_s). */
static void wait_stub(const char *key, double want, int timeout_s,
                      const char *what)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        if (stub_num(&stub, key) == want)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("%s: %s is %g, not %g after %d s", what, key,
                   stub_num(&stub, key), want, timeout_s);
}

Test(cluster_energy, a_worker_killed_mid_job_has_its_clocks_restored_by_flagent)
{
    char *id = submit("name: clocked\nmodel: mlp\ndataset: synthetic\n"
                      "workers: 1\nservers: 1\niterations: 1000000\n"
                      "batch_size: 8\neval_every: 0\ngpu_clock: 1530\n");
    pid_t victim;
    char log[160];
    char *text;

    json_decref(wait_state(id, "RUNNING", 60));
    wait_stub("d0.locked", 1530, 60, "the worker sets gpu_clock");
    victim = recorded_pid(id);
    cr_assert_gt(victim, 0, "job %s's worker left no record of its clock", id);
    cr_assert_eq(kill(victim, SIGKILL), 0);
    wait_stub("d0.locked", 0, 30, "flagent restores the killed worker's clock");
    cr_assert_geq(stub_num(&stub, "d0.resets"), 1);
    json_decref(wait_state(id, "FAILED", 60));
    /* Which agent ran it: the one that says so. */
    for (int i = 0; i < 2; i++) {
        snprintf(log, sizeof(log), "%s/flagent-n%d.log", cl.dir, i + 1);
        text = slurp(log);
        if (strstr(text, "restored the GPU clocks it left set") != NULL) {
            free(text);
            free(id);
            return;
        }
        free(text);
    }
    cr_assert_fail("no flagent said it restored the clocks");
}
