/* flsubmit doctor and what a user sees of a job, against the real control
 * plane: redis-server, flsched and flagents on loopback. The doctor passes
 * on a healthy cluster and names the fault with Redis stopped, with no
 * agent, and for a job asking for RDMA on nodes without a device; a
 * failed job's reason carries its process's error line; a running job's
 * "sent" counts every worker. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../scheduler/redis_fixture.h"
#include "runcmd.h"
#include "spawn.h"

typedef struct cluster {
    test_redis redis;
    char dir[64];
    char api[160]; /* http://127.0.0.1:PORT */
    pid_t sched;
    pid_t agent[2];
} cluster;

static cluster cl;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void start_sched(void)
{
    char log[128], bound[128];
    const char *args[] = {"--redis", cl.redis.url, "--listen", "127.0.0.1:0",
                          NULL};

    snprintf(log, sizeof(log), "%s/flsched.log", cl.dir);
    cl.sched =
        test_spawn("flsched", args, log, "listening on ", bound, sizeof(bound));
    cr_assert_gt(cl.sched, 0, "flsched did not start; see %s", log);
    snprintf(cl.api, sizeof(cl.api), "http://%s", bound);
}

static void start_agent(int i)
{
    char log[128], name[16], work[128];
    const char *args[] = {"--redis",     cl.redis.url, "--name",     name,
                          "--cpus",      "2",          "--memory",   "4Gi",
                          "--gpus",      "0",          "--work-dir", work,
                          "--heartbeat", "1",          NULL};

    snprintf(name, sizeof(name), "n%d", i + 1);
    snprintf(log, sizeof(log), "%s/flagent-%s.log", cl.dir, name);
    snprintf(work, sizeof(work), "%s/%s", cl.dir, name);
    cl.agent[i] = test_spawn("flagent", args, log, NULL, NULL, 0);
    cr_assert_gt(cl.agent[i], 0);
}

static void stop(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

/* flsubmit ARGS against the cluster, output captured. */
static void flsubmit(const char *args, run_result *r)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit %s", cl.api,
             FLPS_BIN_DIR, args);
    run_cmd(cmd, r);
}

static json_t *flsubmit_json(const char *args)
{
    char a[512];
    run_result r;
    json_t *o;

    snprintf(a, sizeof(a), "--json %s", args);
    flsubmit(a, &r);
    cr_assert_eq(r.status, 0, "flsubmit %s exited %d:\n%s%s", args, r.status,
                 r.out, r.err);
    o = json_incref(r.summary);
    run_free(&r);
    cr_assert_not_null(o, "flsubmit %s printed no JSON", args);
    return o;
}

static char *write_job(const char *name, const char *yaml)
{
    static char path[160];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.yaml", cl.dir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(yaml, f);
    fclose(f);
    return path;
}

static char *submit(const char *name, const char *yaml)
{
    char args[256];
    json_t *o;
    char *id;

    snprintf(args, sizeof(args), "submit %s", write_job(name, yaml));
    o = flsubmit_json(args);
    id = strdup(json_string_value(json_object_get(o, "id")));
    json_decref(o);
    return id;
}

/* Until every node the doctor sees has published its checks. */
static void wait_agents(size_t want)
{
    for (int i = 0; i < 100; i++) {
        json_t *o = flsubmit_json("nodes");
        size_t n = json_array_size(json_object_get(o, "nodes"));

        json_decref(o);
        if (n == want)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("the agents did not register");
}

static void setup_bare(void)
{
    memset(&cl, 0, sizeof(cl));
    snprintf(cl.dir, sizeof(cl.dir), "/tmp/flps-doctor-XXXXXX");
    cr_assert_not_null(mkdtemp(cl.dir));
    cr_assert_eq(chmod(cl.dir, 0711), 0); /* job uids pass through */
    cr_assert_eq(test_redis_start(&cl.redis), 0, "redis-server did not start");
    start_sched();
}

static void setup(void)
{
    setup_bare();
    start_agent(0);
    start_agent(1);
    wait_agents(2);
}

static void teardown(void)
{
    stop(&cl.agent[0]);
    stop(&cl.agent[1]);
    stop(&cl.sched);
    test_redis_stop(&cl.redis);
}

TestSuite(doctor, .init = setup, .fini = teardown, .timeout = 120);

Test(doctor, passes_on_a_healthy_cluster)
{
    run_result r;

    flsubmit("doctor", &r);
    cr_assert_eq(r.status, 0, "doctor failed:\n%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "OK    redis      Redis ") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "OK    agents     2 alive: n1 (2 CPUs, 4 GiB, 0 "
                            "GPUs), n2 (2 CPUs, 4 GiB, 0 GPUs)") != NULL,
              "%s", r.out);
    cr_assert(strstr(r.out, "OK    clocks     ") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "All 5 checks passed.") != NULL, "%s", r.out);
    cr_assert_str_eq(r.err, "");
    run_free(&r);
}

Test(doctor, names_redis_when_it_is_stopped)
{
    run_result r;

    test_redis_stop(&cl.redis);
    flsubmit("doctor", &r);
    cr_assert_neq(r.status, 0, "doctor passed without Redis:\n%s", r.out);
    cr_assert(strstr(r.out, "OK    scheduler") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "FAIL  redis      flsched cannot reach its "
                            "Redis") != NULL,
              "%s", r.out);
    cr_assert(strstr(r.err, "doctor: 1 check failed: redis") != NULL, "%s",
              r.err);
    run_free(&r);
}

static int has_rdma_device(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n > 0;
}

Test(doctor, names_the_missing_rdma_device_for_a_job_that_asks_for_it)
{
    run_result r;
    char args[256];

    if (has_rdma_device())
        cr_skip_test("this machine has an RDMA device");
    snprintf(args, sizeof(args), "doctor --job %s",
             write_job("rdma", "name: r\nmodel: mlp\ntransport: rdma\n"
                               "workers: 1\n"));
    flsubmit(args, &r);
    cr_assert_neq(r.status, 0, "doctor passed:\n%s", r.out);
    cr_assert(strstr(r.out, "FAIL  rdma       no RDMA device "
                            "(/sys/class/infiniband is empty) on n1, n2; "
                            "run the job on nodes with RDMA NICs (check "
                            "with ibv_devinfo), or use transport: zmq or "
                            "auto") != NULL,
              "%s", r.out);
    cr_assert(strstr(r.err, "doctor: 1 check failed: rdma") != NULL, "%s",
              r.err);
    run_free(&r);
    flsubmit("doctor", &r);
    cr_assert_eq(r.status, 0, "without the job, RDMA is not checked:\n%s",
                 r.out);
    run_free(&r);
}

Test(doctor, a_failed_jobs_reason_carries_its_processs_error_line)
{
    char *id = submit("bad", "name: bad\nmodel: mlp\nworkers: 1\nservers: 1\n"
                             "iterations: 50\ndata_dir: /nonexistent/fm\n");
    char args[64];
    run_result r;

    snprintf(args, sizeof(args), "watch %s", id);
    flsubmit(args, &r);
    cr_assert_eq(r.status, 1, "watch of a failed job exits 1:\n%s%s", r.out,
                 r.err);
    cr_assert(strstr(r.out, "FAILED: worker-0 on n") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "exited with status 2: ") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "fashion-mnist file "
                            "'/nonexistent/fm/train-images-idx3-ubyte.gz' "
                            "is missing") != NULL,
              "the cause, not only the exit:\n%s", r.out);
    run_free(&r);
    snprintf(args, sizeof(args), "status %s", id);
    flsubmit(args, &r);
    cr_assert(strstr(r.out, "Reason:      worker-0 on n") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "is missing") != NULL, "%s", r.out);
    run_free(&r);
    free(id);
}

/* Rank 0's bytes as its agent stored them in the job hash. */
static double rank0_sent(const char *id)
{
    char cmd[256];
    run_result r;
    double v;

    snprintf(cmd, sizeof(cmd), "redis-cli -p %d HGET flps:job:%s p_bytes_sent",
             cl.redis.port, id);
    run_cmd(cmd, &r);
    v = atof(r.out);
    run_free(&r);
    return v;
}

Test(doctor, a_running_jobs_sent_counts_every_worker)
{
    char *id = submit("two", "name: two\nmodel: mlp\ndataset: synthetic\n"
                             "workers: 2\nservers: 1\niterations: 3000\n"
                             "compression: topk:0.01\neval_every: 0\n");
    char args[64];
    int checked = 0;

    snprintf(args, sizeof(args), "status %s", id);
    for (int i = 0; i < 300 && !checked; i++) {
        double r0 = rank0_sent(id);
        json_t *j = flsubmit_json(args);
        json_t *sent =
            json_object_get(json_object_get(j, "progress"), "bytes_sent");
        const char *state = json_string_value(json_object_get(j, "state"));
        json_t *it =
            json_object_get(json_object_get(j, "progress"), "iteration");

        cr_assert_str_neq(state, "FAILED");
        /* Far enough in that one more report of rank 0 between the two
         * reads adds little to its total. */
        if (strcmp(state, "RUNNING") == 0 && r0 > 0 && json_is_number(sent) &&
            json_is_number(it) && json_number_value(it) >= 600) {
            /* Two workers in step: the sum is about twice rank 0's. */
            cr_assert_gt(json_number_value(sent), 1.5 * r0,
                         "sent %g is rank 0's %g, not the sum",
                         json_number_value(sent), r0);
            checked = 1;
        }
        json_decref(j);
        sleep_ms(100);
    }
    cr_assert(checked, "the job never reported progress while running");
    {
        run_result r;

        flsubmit("cancel --all", &r);
        cr_assert_eq(r.status, 0, "%s", r.err);
        run_free(&r);
    }
    free(id);
}

/* Without agents: a suite of its own. */
TestSuite(doctor_no_agent, .init = setup_bare, .fini = teardown, .timeout = 60);

Test(doctor_no_agent, names_the_missing_agents)
{
    run_result r;

    flsubmit("doctor", &r);
    cr_assert_neq(r.status, 0, "doctor passed without agents:\n%s", r.out);
    cr_assert(strstr(r.out, "OK    redis") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "FAIL  agents     no agent is alive; start "
                            "flagent on each node") != NULL,
              "%s", r.out);
    cr_assert(strstr(r.err, "doctor: 1 check failed: agents") != NULL, "%s",
              r.err);
    run_free(&r);
}
