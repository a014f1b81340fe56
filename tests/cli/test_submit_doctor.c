/* Tests of cli/submit_doctor.c: the doctor's checks on fixed /v1/info
 * answers. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "cli/submit_doctor.h"
#include "common/alloc.h"

#define URL "http://10.0.0.5:8080"

static const char *node_ok =
    "{\"name\": \"n1\", \"state\": \"READY\", \"alive\": true, \"cpus\": 4,"
    " \"memory\": 8589934592, \"gpus\": 0, \"facts\": {\"reported_at\": 1e9,"
    " \"clock_offset\": 0.002, \"dataset_dir\": \"/data\","
    " \"dataset_missing\": \"\", \"rdma_devices\": 1, \"memlock\": -1}}";

static char *report(const char *info_text, const submit_doctor_job *job,
                    int *failed, char *names)
{
    json_t *info = json_loads(info_text, 0, NULL);
    char *out = NULL, *got = NULL;

    cr_assert_not_null(info, "fixture is JSON: %s", info_text);
    cr_assert_eq(submit_doctor_report(info, URL, job, 0, &out, failed, &got),
                 FLPS_OK);
    snprintf(names, 256, "%s", got);
    flps_free(got);
    json_decref(info);
    return out;
}

static char *info_with(const char *nodes)
{
    static char buf[4096];

    snprintf(buf, sizeof(buf),
             "{\"version\": \"0.2.0\", \"time\": 1e9, \"redis\": {\"ok\": "
             "true, \"version\": \"7.0.15\", \"clock_offset\": 0.001},"
             " \"nodes\": [%s]}",
             nodes);
    return buf;
}

Test(submit_doctor, a_healthy_cluster_passes_every_check)
{
    submit_doctor_job job = {0};
    char names[256];
    int failed = -1;
    char *out = report(info_with(node_ok), &job, &failed, names);

    cr_assert_eq(failed, 0, "%s", out);
    cr_assert_str_eq(out,
                     "OK    scheduler  flsched 0.2.0 answers at " URL "\n"
                     "OK    redis      Redis 7.0.15 answers flsched\n"
                     "OK    agents     1 alive: n1 (4 CPUs, 8 GiB, 0 GPUs)\n"
                     "OK    dataset    Fashion-MNIST present on n1\n"
                     "OK    clocks     within 1 s of flsched's on n1\n"
                     "All 5 checks passed.\n");
    flps_free(out);
}

Test(submit_doctor, redis_down_fails_and_names_the_fix)
{
    submit_doctor_job job = {0};
    char names[256];
    int failed = 0;
    char *out = report("{\"version\": \"0.2.0\", \"redis\": {\"ok\": false,"
                       " \"error\": \"connection refused\"}}",
                       &job, &failed, names);

    cr_assert_eq(failed, 1);
    cr_assert_str_eq(names, "redis");
    cr_assert(strstr(out, "FAIL  redis      flsched cannot reach its Redis "
                          "(connection refused); start redis-server") != NULL,
              "%s", out);
    cr_assert_null(strstr(out, "agents"), "nothing more can be checked");
    flps_free(out);
}

Test(submit_doctor, no_agent_alive_fails)
{
    submit_doctor_job job = {0};
    char names[256];
    int failed = 0;
    char *out = report(info_with("{\"name\": \"n3\", \"state\": \"LOST\","
                                 " \"alive\": false, \"facts\": null}"),
                       &job, &failed, names);

    cr_assert_eq(failed, 1);
    cr_assert_str_eq(names, "agents");
    cr_assert(strstr(out, "FAIL  agents     no agent is alive (n3 LOST); "
                          "start flagent") != NULL,
              "%s", out);
    flps_free(out);
}

Test(submit_doctor, a_missing_dataset_and_a_skewed_clock_name_the_node)
{
    submit_doctor_job job = {0};
    char names[256];
    int failed = 0;
    char *out = report(
        info_with("{\"name\": \"n2\", \"state\": \"READY\", \"alive\": true,"
                  " \"facts\": {\"clock_offset\": -3.5, \"dataset_dir\":"
                  " \"/d\", \"dataset_missing\": \"t10k-labels-idx1-ubyte.gz\","
                  " \"rdma_devices\": 0, \"memlock\": 65536}}"),
        &job, &failed, names);

    cr_assert_eq(failed, 2, "%s", out);
    cr_assert_str_eq(names, "dataset, clocks");
    cr_assert(strstr(out, "FAIL  dataset    the Fashion-MNIST file "
                          "t10k-labels-idx1-ubyte.gz is missing from /d on "
                          "n2; install it") != NULL,
              "%s", out);
    cr_assert(strstr(out, "FAIL  clocks     the clock is 3.5 s behind "
                          "flsched's (more than 1 s) on n2; run NTP") != NULL,
              "%s", out);
    cr_assert_null(strstr(out, "rdma"), "RDMA is checked only for a job "
                                        "that asks for it");
    flps_free(out);
}

Test(submit_doctor, nodes_with_the_same_problem_are_named_together)
{
    submit_doctor_job job = {.given = 1, .rdma = 1};
    char names[256];
    int failed = 0;
    const char *bare = "{\"name\": \"%s\", \"state\": \"READY\", \"alive\":"
                       " true, \"facts\": {\"rdma_devices\": 0}}";
    char nodes[512], a[160], b[160];
    char *out;

    snprintf(a, sizeof(a), bare, "n1");
    snprintf(b, sizeof(b), bare, "n2");
    snprintf(nodes, sizeof(nodes), "%s, %s", a, b);
    out = report(info_with(nodes), &job, &failed, names);
    cr_assert(strstr(out,
                     "FAIL  rdma       no RDMA device "
                     "(/sys/class/infiniband is empty) on n1, n2; run "
                     "the job on nodes with RDMA NICs (check with "
                     "ibv_devinfo), or use transport: zmq or auto\n") != NULL,
              "the cause and the fix once:\n%s", out);
    flps_free(out);
}

Test(submit_doctor, an_rdma_job_needs_a_device_and_a_memlock_limit)
{
    submit_doctor_job job = {.given = 1, .rdma = 1, .synthetic = 1};
    char names[256];
    int failed = 0;
    char *out = report(
        info_with("{\"name\": \"n1\", \"state\": \"READY\", \"alive\": true,"
                  " \"facts\": {\"clock_offset\": 0, \"dataset_missing\":"
                  " \"x\", \"rdma_devices\": 0, \"memlock\": -1}},"
                  " {\"name\": \"n2\", \"state\": \"READY\", \"alive\": true,"
                  " \"facts\": {\"clock_offset\": 0, \"rdma_devices\": 2,"
                  " \"memlock\": 8388608}}"),
        &job, &failed, names);

    cr_assert_eq(failed, 1, "%s", out);
    cr_assert_str_eq(names, "rdma");
    cr_assert(strstr(out,
                     "FAIL  rdma       no RDMA device "
                     "(/sys/class/infiniband is empty) on n1; flagent "
                     "may lock only 8 MiB (8388608 bytes) of memory "
                     "(RLIMIT_MEMLOCK; RDMA needs at least 64 MiB (67108864 "
                     "bytes)) on n2; run the job") != NULL,
              "%s", out);
    cr_assert(strstr(out, "ulimit -l unlimited") != NULL, "%s", out);
    cr_assert(strstr(out, "IPC_LOCK for its container (Helm: "
                          "agent.rdma.enabled=true)") != NULL,
              "%s", out);
    cr_assert(strstr(out, "OK    dataset    not needed: the job uses the "
                          "synthetic dataset") != NULL,
              "%s", out);
    flps_free(out);
}

Test(submit_doctor, json_gives_every_check_as_an_object)
{
    submit_doctor_job job = {0};
    json_t *info = json_loads(info_with(node_ok), 0, NULL), *o;
    char *out = NULL;
    int failed = -1;

    cr_assert_eq(submit_doctor_report(info, URL, &job, 1, &out, &failed, NULL),
                 FLPS_OK);
    o = json_loads(out, 0, NULL);
    cr_assert_not_null(o, "%s", out);
    cr_assert(json_is_true(json_object_get(o, "ok")));
    cr_assert_eq(json_array_size(json_object_get(o, "checks")), 5);
    cr_assert_str_eq(
        json_string_value(json_object_get(
            json_array_get(json_object_get(o, "checks"), 1), "check")),
        "redis");
    json_decref(o);
    json_decref(info);
    flps_free(out);
    info = json_array();
    cr_assert_eq(submit_doctor_report(info, URL, &job, 0, &out, &failed, NULL),
                 FLPS_EINVAL);
    json_decref(info);
}

/* A node as an agent with the port facts publishes it. */
static const char rdma_node_fmt[] =
    "{\"name\": \"%s\", \"state\": \"READY\", \"alive\": true, \"facts\": "
    "{\"clock_offset\": 0, \"rdma_devices\": %d, \"rdma_active_ports\": %d, "
    "\"rdma_ports\": \"%s\", \"rdma_detail\": \"%s\", \"memlock\": %s}}";

Test(submit_doctor, names_the_active_ports_and_memlock_of_each_fit_node)
{
    submit_doctor_job job = {.given = 1, .rdma = 1, .synthetic = 1};
    char names[256], a[512], b[512], nodes[1100];
    int failed = -1;
    char *out;

    snprintf(a, sizeof(a), rdma_node_fmt, "n1", 1, 1, "mlx5_0:1",
             "mlx5_0 port 1 ACTIVE InfiniBand 1 GID", "-1");
    snprintf(b, sizeof(b), rdma_node_fmt, "n2", 2, 2, "mlx5_0:1,mlx5_1:1", "",
             "134217728");
    snprintf(nodes, sizeof(nodes), "%s, %s", a, b);
    out = report(info_with(nodes), &job, &failed, names);
    cr_assert_eq(failed, 0, "%s", out);
    cr_assert(strstr(out, "OK    rdma       an ACTIVE RDMA port and memlock "
                          "limit fit on n1 (mlx5_0:1, memlock unlimited), n2 "
                          "(mlx5_0:1,mlx5_1:1, memlock 128 MiB (134217728 "
                          "bytes))\n") != NULL,
              "%s", out);
    flps_free(out);
}

Test(submit_doctor, a_device_whose_ports_are_all_down_names_them)
{
    submit_doctor_job job = {.given = 1, .rdma = 1, .synthetic = 1};
    char names[256], a[512];
    int failed = -1;
    char *out;

    snprintf(a, sizeof(a), rdma_node_fmt, "n1", 1, 0, "",
             "mlx5_0 port 1 DOWN InfiniBand 0 GIDs", "-1");
    out = report(info_with(a), &job, &failed, names);
    cr_assert_eq(failed, 1, "%s", out);
    cr_assert(strstr(out, "FAIL  rdma       no RDMA port is ACTIVE (mlx5_0 "
                          "port 1 DOWN InfiniBand 0 GIDs) on n1; check the "
                          "cable and the subnet manager (ibstat, "
                          "ibv_devinfo)") != NULL,
              "%s", out);
    flps_free(out);
}

Test(submit_doctor, an_auto_job_is_told_where_it_would_run_rdma)
{
    submit_doctor_job job = {.given = 1, .rdma_auto = 1, .synthetic = 1};
    char names[256], a[512], b[512], nodes[1100];
    int failed = -1;
    char *out;

    snprintf(a, sizeof(a), rdma_node_fmt, "n1", 0, 0, "", "", "65536");
    snprintf(b, sizeof(b), rdma_node_fmt, "n2", 1, 1, "mlx5_0:1", "", "-1");
    snprintf(nodes, sizeof(nodes), "%s, %s", a, b);
    out = report(info_with(nodes), &job, &failed, names);
    cr_assert_eq(failed, 0, "auto runs anywhere: %s", out);
    cr_assert(strstr(out, "OK    rdma       transport: auto: RDMA on n2 "
                          "(mlx5_0:1, memlock unlimited); ZeroMQ for a job "
                          "placed on n1\n") != NULL,
              "%s", out);
    flps_free(out);
}

Test(submit_doctor, a_long_data_directory_is_named_whole)
{
    submit_doctor_job job = {0};
    char names[256], dir[1500], node[2000], want[1600];
    int failed = 0;
    char *out;

    dir[0] = '/';
    memset(dir + 1, 'd', sizeof(dir) - 2);
    dir[sizeof(dir) - 1] = '\0';
    snprintf(node, sizeof(node),
             "{\"name\": \"n2\", \"state\": \"READY\", \"alive\": true,"
             " \"facts\": {\"clock_offset\": 0, \"dataset_dir\": \"%s\","
             " \"dataset_missing\": \"train-images-idx3-ubyte.gz\"}}",
             dir);
    out = report(info_with(node), &job, &failed, names);
    snprintf(want, sizeof(want), "is missing from %s on n2; install it", dir);
    cr_assert_eq(failed, 1, "%s", out);
    cr_assert(strstr(out, want) != NULL, "the whole directory in:\n%s", out);
    flps_free(out);
}

/* /v1/info of an HTTPS flsched whose certificate is valid from+until s
 * around its clock (1e9: 2001-09-09 01:46:40 UTC). */
static char *info_tls(double from, double until)
{
    static char buf[4096];

    snprintf(buf, sizeof(buf),
             "{\"version\": \"0.4.0\", \"time\": 1e9, \"tls\": {\"subject\": "
             "\"sched\", \"names\": \"DNS:sched.example\", \"not_before\": "
             "%.0f, \"not_after\": %.0f, \"names_listen_host\": true}, "
             "\"redis\": {\"ok\": true, \"version\": \"7.0.15\", "
             "\"clock_offset\": 0.001}, \"nodes\": [%s]}",
             1e9 + from, 1e9 + until, node_ok);
    return buf;
}

Test(submit_doctor, shows_when_the_schedulers_certificate_expires)
{
    submit_doctor_job job = {0};
    char names[256];
    int failed = -1;
    char *out = report(info_tls(-86400, 90 * 86400.0), &job, &failed, names);

    cr_assert_eq(failed, 0, "%s", out);
    cr_assert_not_null(strstr(out, "OK    tls        flsched's certificate "
                                   "(DNS:sched.example) expires on "
                                   "2001-12-08 01:46:40 UTC, in 90 days\n"),
                       "%s", out);
    flps_free(out);
    out = report(info_tls(-86400, 5.5 * 86400), &job, &failed, names);
    cr_assert_eq(failed, 0, "%s", out);
    cr_assert_not_null(strstr(out, "expires on 2001-09-14 13:46:40 UTC, in 5.5 "
                                   "days: renew it soon"),
                       "%s", out);
    flps_free(out);
}

Test(submit_doctor, an_expired_or_early_certificate_fails)
{
    submit_doctor_job job = {0};
    char names[256];
    int failed = -1;
    char *out = report(info_tls(-86400, -60), &job, &failed, names);

    cr_assert_eq(failed, 1, "%s", out);
    cr_assert_str_eq(names, "tls");
    cr_assert_not_null(strstr(out, "FAIL  tls        flsched's certificate "
                                   "(DNS:sched.example) expired on 2001-09-09 "
                                   "01:45:40 UTC: renew it"),
                       "%s", out);
    flps_free(out);
    out = report(info_tls(3600, 86400), &job, &failed, names);
    cr_assert_eq(failed, 1, "%s", out);
    cr_assert_not_null(
        strstr(out, "is not valid before 2001-09-09 02:46:40 UTC"), "%s", out);
    flps_free(out);
    /* Plain HTTP: no tls line at all. */
    out = report(info_with(node_ok), &job, &failed, names);
    cr_assert_null(strstr(out, "tls"), "%s", out);
    flps_free(out);
}

Test(submit_doctor,
     the_kubernetes_launcher_says_what_it_creates_and_needs_no_agent)
{
    submit_doctor_job job = {0};
    char names[256];
    int failed = -1;
    char *out = report(
        "{\"version\": \"0.4.0\", \"redis\": {\"ok\": true, \"version\": "
        "\"7.0.15\", \"clock_offset\": 0.001}, \"nodes\": [],"
        " \"launcher\": {\"kind\": \"kubernetes\", \"namespace\": \"ml\","
        " \"jobset\": true, \"image\": \"reg/flps:0.4.0\"}}",
        &job, &failed, names);

    cr_assert_eq(failed, 0, "no agent is needed: %s", out);
    cr_assert_str_eq(out, "OK    scheduler  flsched 0.4.0 answers at " URL "\n"
                          "OK    redis      Redis 7.0.15 answers flsched\n"
                          "OK    launcher   kubernetes: a JobSet per job in "
                          "namespace ml (the JobSet CRD is installed), image "
                          "reg/flps:0.4.0 unless the job file names one; the "
                          "cluster places the pods\n"
                          "All 3 checks passed.\n");
    flps_free(out);
}
