/* transport: rdma and auto with real processes on a node without an RDMA
 * device (a fake, empty sysfs through FLPS_SYSFS_ROOT, so the result is the
 * same on a machine that has one): flrun, flps and flworker stop at once,
 * naming the cause and the fix, and auto runs the job on ZeroMQ and says
 * so. With a fake ACTIVE port the job still fails fast and clearly where
 * the build or the hardware cannot back it. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "flps.h"
#include "runcmd.h"
#include "spawn.h"
#include "tests/fakes/fake_sysfs.h"
#include "tests/log_capture.h"
#include "transports/select.h"

/* Stopping "at once" against hanging until a deadline: the client's waits
 * run for minutes, so anything under this bound did not wait on a peer. */
#define FAST_S 30.0

#define NO_DEVICE_FIX                                                          \
    "run on nodes with RDMA NICs (check with ibv_devinfo), or set "            \
    "transport: zmq or auto"

typedef struct scene {
    fake_sysfs sys;
    char dir[64];
    char job[128];
    char logs[160];
} scene;

static void scene_init(scene *s, int with_port, const char *kind)
{
    char text[512];
    FILE *f;

    fake_sysfs_init(&s->sys, 1);
    if (with_port)
        fake_sysfs_port(&s->sys, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
    snprintf(s->dir, sizeof(s->dir), "/tmp/flps-tsel-XXXXXX");
    cr_assert_not_null(mkdtemp(s->dir));
    snprintf(s->job, sizeof(s->job), "%s/job.yaml", s->dir);
    snprintf(s->logs, sizeof(s->logs), "%s/logs", s->dir);
    snprintf(text, sizeof(text),
             "name: tsel\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
             "servers: 2\niterations: 30\ncompression: gtopk:0.01\n"
             "transport: %s\n",
             kind);
    f = fopen(s->job, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void scene_fini(scene *s)
{
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
    cr_assert_eq(system(cmd), 0);
    fake_sysfs_fini(&s->sys);
}

/* Run cmd with FLPS_SYSFS_ROOT at the scene's fake sysfs; *secs gets how
 * long it took. */
static void run_in(const scene *s, const char *cmd, run_result *r, double *secs)
{
    char line[2048];
    double t0;

    snprintf(line, sizeof(line), "FLPS_SYSFS_ROOT=%s %s", s->sys.root, cmd);
    t0 = flps_mono_s();
    run_cmd(line, r);
    *secs = flps_mono_s() - t0;
}

Test(transport_choice, flrun_with_rdma_and_no_device_stops_at_once_and_says_why)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;

    scene_init(&s, 0, "rdma");
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s %s", FLPS_BIN_DIR, s.logs,
             s.job);
    run_in(&s, cmd, &r, &secs);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert_lt(secs, FAST_S, "flrun waited %.1f s", secs);
    cr_assert(strstr(r.err, "transport: rdma: no RDMA device on this node (") !=
                  NULL,
              "%s", r.err);
    cr_assert(strstr(r.err, "class/infiniband is empty); " NO_DEVICE_FIX) !=
                  NULL,
              "%s", r.err);
    cr_assert(strstr(r.err, "nothing was started") != NULL, "%s", r.err);
    cr_assert_eq(access(s.logs, F_OK), -1, "no process, no log directory");
    cr_assert_null(r.summary);
    run_free(&r);
    scene_fini(&s);
}

Test(transport_choice,
     flrun_with_auto_and_no_device_trains_over_zeromq_and_says)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;
    json_t *tr;

    scene_init(&s, 0, "auto");
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s %s", FLPS_BIN_DIR, s.logs,
             s.job);
    run_in(&s, cmd, &r, &secs);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "flrun: transport: auto: ZeroMQ, because no RDMA "
                            "device on this node (") != NULL,
              "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    tr = json_object_get(r.summary, "transport");
    cr_assert(json_is_string(tr) && strcmp(json_string_value(tr), "zmq") == 0,
              "%s", r.out);
    cr_assert_eq(num(r.summary, "iterations"), 30);
    cr_assert_gt(num(r.summary, "bytes_sent"), 0);
    run_free(&r);
    scene_fini(&s);
}

Test(transport_choice, flps_with_transport_rdma_and_no_device_exits_at_once)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;

    scene_init(&s, 0, "zmq");
    snprintf(cmd, sizeof(cmd),
             "%s/flps --job j --shard 0 --shards 1 --transport rdma",
             FLPS_BIN_DIR);
    run_in(&s, cmd, &r, &secs);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert_lt(secs, FAST_S);
    cr_assert(strstr(r.err, "transport: rdma: no RDMA device on this node (") !=
                  NULL,
              "%s", r.err);
    cr_assert(strstr(r.err, NO_DEVICE_FIX) != NULL, "%s", r.err);
    cr_assert_null(strstr(r.out, "listening on"), "it never listened: %s",
                   r.out);
    run_free(&r);
    scene_fini(&s);
}

Test(transport_choice, flps_with_transport_auto_and_no_device_listens_on_zeromq)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;

    scene_init(&s, 0, "zmq");
    /* SIGTERM after it started: a shard stops cleanly on it. */
    snprintf(cmd, sizeof(cmd),
             "timeout -s TERM 2 %s/flps --job j --shard 0 --shards 1 "
             "--transport auto",
             FLPS_BIN_DIR);
    run_in(&s, cmd, &r, &secs);
    cr_assert(strstr(r.out, "listening on tcp://127.0.0.1:") != NULL,
              "out: %s\nerr: %s", r.out, r.err);
    cr_assert(strstr(r.err, "transport: auto: ZeroMQ, because no RDMA device "
                            "on this node") != NULL,
              "%s", r.err);
    cr_assert(strstr(r.err, "over ZeroMQ") != NULL, "%s", r.err);
    run_free(&r);
    scene_fini(&s);
}

Test(transport_choice, flps_refuses_a_transport_it_does_not_know)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;

    scene_init(&s, 0, "zmq");
    snprintf(cmd, sizeof(cmd),
             "%s/flps --job j --shard 0 --shards 1 --transport tcp",
             FLPS_BIN_DIR);
    run_in(&s, cmd, &r, &secs);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "--transport: 'tcp' is not a transport; use zmq, "
                            "rdma or auto") != NULL,
              "%s", r.err);
    run_free(&r);
    scene_fini(&s);
}

Test(transport_choice, flworker_with_rdma_and_no_device_exits_before_its_data)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;

    scene_init(&s, 0, "rdma");
    /* Nothing listens on the endpoint: a worker that tried to connect
     * would wait for its deadline. */
    snprintf(cmd, sizeof(cmd),
             "%s/flworker --job %s --rank 0 --servers "
             "tcp://127.0.0.1:9,tcp://127.0.0.1:10",
             FLPS_BIN_DIR, s.job);
    run_in(&s, cmd, &r, &secs);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert_lt(secs, FAST_S);
    cr_assert(strstr(r.err, "transport: rdma: no RDMA device on this node") !=
                  NULL,
              "%s", r.err);
    run_free(&r);
    scene_fini(&s);
}

Test(transport_choice, rdma_on_a_node_with_an_active_port_fails_fast_without_it)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;

    scene_init(&s, 1, "rdma");
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s %s", FLPS_BIN_DIR, s.logs,
             s.job);
    run_in(&s, cmd, &r, &secs);
    if (!transport_is_built(TRANSPORT_KIND_RDMA)) {
        /* The node looks fit; the build is what cannot run it. */
        cr_assert_eq(r.status, 2, "%s", r.err);
        cr_assert(strstr(r.err, "transport: rdma: this build has no RDMA "
                                "support (libibverbs-dev and librdmacm-dev "
                                "were not found when it was built)") != NULL,
                  "%s", r.err);
        cr_assert(strstr(r.err, "nothing was started") != NULL, "%s", r.err);
    } else if (r.status == 0) {
        run_free(&r);
        scene_fini(&s);
        cr_skip_test("this machine has a real RDMA device behind the fake "
                     "sysfs: the job ran over RDMA");
    } else {
        /* The fake sysfs says ACTIVE, libibverbs finds no device: the
         * shards stop at their transport, and flrun names them. */
        cr_assert_neq(r.status, 0);
        cr_assert(strstr(r.err, "flps shard") != NULL, "%s", r.err);
    }
    cr_assert_lt(secs, FAST_S, "flrun took %.1f s", secs);
    run_free(&r);
    scene_fini(&s);
}

/* ---- libflps: flps_client_create_with and FLPS_TRANSPORT ---- */

static float cdata[64], cgrad[64];

static void client_cfg(flps_client_config *cfg, const char **servers,
                       flps_tensor *t)
{
    memset(cfg, 0, sizeof(*cfg));
    t->name = "w";
    t->numel = 64;
    t->data = cdata;
    cfg->job = "tsel";
    cfg->rank = 0;
    cfg->workers = 1;
    cfg->servers = servers;
    cfg->nservers = 1;
    cfg->tensors = t;
    cfg->ntensors = 1;
    cfg->compression = "dense";
    cfg->lr = 0.5;
    cfg->iterations = 10;
    cfg->deadline_ms = 20000;
}

Test(transport_choice, a_client_asking_for_rdma_without_a_device_fails_at_once)
{
    scene s;
    const char *servers[] = {"tcp://127.0.0.1:9"}; /* nobody listens */
    flps_client_config cfg;
    flps_tensor t;
    flps_client *c = NULL;
    double t0;

    scene_init(&s, 0, "zmq");
    cr_assert_eq(setenv("FLPS_SYSFS_ROOT", s.sys.root, 1), 0);
    test_log_begin();
    client_cfg(&cfg, servers, &t);
    t0 = flps_mono_s();
    cr_assert_eq(flps_client_create_with(&cfg, "rdma", &c), FLPS_ECONFIG);
    cr_assert_lt(flps_mono_s() - t0, FAST_S, "it did not wait on the shard");
    cr_assert_null(c);
    cr_assert(strstr(test_logged, "transport: rdma: no RDMA device on this "
                                  "node (") != NULL,
              "%s", test_logged);
    cr_assert(strstr(test_logged, NO_DEVICE_FIX) != NULL, "%s", test_logged);

    test_logged[0] = '\0';
    cr_assert_eq(flps_client_create_with(&cfg, "infiniband", &c), FLPS_EINVAL);
    cr_assert(strstr(test_logged, "transport: 'infiniband' is not a "
                                  "transport; use zmq, rdma or auto") != NULL,
              "%s", test_logged);

    /* flps_client_create follows FLPS_TRANSPORT, as a job's program does
     * under flrun and flagent. */
    test_logged[0] = '\0';
    cr_assert_eq(setenv("FLPS_TRANSPORT", "rdma", 1), 0);
    cr_assert_eq(flps_client_create(&cfg, &c), FLPS_ECONFIG);
    cr_assert(strstr(test_logged, "transport: rdma: no RDMA device") != NULL,
              "%s", test_logged);
    cr_assert_eq(setenv("FLPS_TRANSPORT", "bogus", 1), 0);
    cr_assert_eq(flps_client_create(&cfg, &c), FLPS_EINVAL);
    cr_assert(strstr(test_logged, "'bogus' (from FLPS_TRANSPORT) is not a "
                                  "transport") != NULL,
              "%s", test_logged);
    unsetenv("FLPS_TRANSPORT");
    unsetenv("FLPS_SYSFS_ROOT");
    flps_set_logger(NULL, NULL);
    scene_fini(&s);
}

Test(transport_choice, a_client_on_auto_trains_with_a_shard_on_auto_over_zeromq)
{
    scene s;
    test_shard sh = {0, ""};
    const char *args[] = {"--job", "tsel",        "--shard", "0", "--shards",
                          "1",     "--transport", "auto",    NULL};
    const char *servers[1];
    flps_client_config cfg;
    flps_tensor t;
    flps_client *c = NULL;
    char log[200];

    scene_init(&s, 0, "zmq");
    cr_assert_eq(setenv("FLPS_SYSFS_ROOT", s.sys.root, 1), 0);
    snprintf(log, sizeof(log), "%s/flps.log", s.dir);
    cr_assert_eq(test_shard_start(&sh, log, args), 0, "see %s", log);
    servers[0] = sh.endpoint;
    test_log_begin();
    client_cfg(&cfg, servers, &t);
    cr_assert_eq(flps_client_create_with(&cfg, "auto", &c), FLPS_OK, "%s",
                 test_logged);
    cr_assert(strstr(test_logged, "transport: auto: ZeroMQ, because no RDMA "
                                  "device on this node") != NULL,
              "%s", test_logged);
    cr_assert_eq(flps_client_init(c), FLPS_OK, "%s", flps_client_last_error(c));
    for (int i = 0; i < 64; i++)
        cgrad[i] = 1.0f;
    cr_assert_eq(flps_client_push(c, 0, cgrad, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(c, 0), FLPS_OK, "%s",
                 flps_client_last_error(c));
    cr_assert_float_eq(cdata[0], -0.5f, 1e-6, "one step of lr 0.5: %f",
                       cdata[0]);
    flps_client_destroy(c);
    flps_set_logger(NULL, NULL);
    unsetenv("FLPS_SYSFS_ROOT");
    test_shard_stop(&sh, SIGTERM);
    {
        char *text = slurp(log);

        cr_assert(strstr(text, "transport: auto: ZeroMQ, because no RDMA "
                               "device on this node") != NULL,
                  "the shard says what it chose: %s", text);
        free(text);
    }
    scene_fini(&s);
}
