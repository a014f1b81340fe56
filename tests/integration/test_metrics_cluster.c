/* Metrics turned on by the cluster: redis-server, flsched and an flagent
 * started with --metrics on loopback run a real job; flsched's target list
 * names the job's shard and worker (which flagent started with --metrics)
 * and the agent. Every daemon's /metrics passes promtool and its counters
 * move, and a real Prometheus server finds them all through http_sd and
 * stores the job's series. A PyTorch program run as a command: job (whose
 * libflps serves the worker metrics flagent asks for with FLPS_METRICS)
 * beside a C worker's job: every query of the Grafana dashboard that has
 * data for the C worker's job has data for it too. Where the hardware
 * (here the NVML stub and a fake powercap) reports energy, the worker and
 * the agent serve a series per device. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../scheduler/redis_fixture.h"
#include "flps.h"
#include "runcmd.h"
#include "spawn.h"
#include "tests/fakes/fake_powercap.h"
#include "tests/fakes/nvml_stub_ctl.h"

typedef struct cluster {
    test_redis redis;
    char dir[64];
    char api[128]; /* flsched's HOST:PORT */
    pid_t sched, agent, prom;
} cluster;

static cluster cl;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct body {
    char *text;
    size_t len;
} body;

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    body *b = arg;
    char *nb = realloc(b->text, b->len + size * n + 1);

    if (nb == NULL)
        return 0;
    memcpy(nb + b->len, p, size * n);
    b->len += size * n;
    nb[b->len] = '\0';
    b->text = nb;
    return size * n;
}

/* GET http://hostport path; the body (caller frees) when the answer was
 * 200, else NULL. */
static char *http_get(const char *hostport, const char *path)
{
    CURL *c = curl_easy_init();
    body b = {NULL, 0};
    char url[1024];
    long code = 0;

    snprintf(url, sizeof(url), "http://%s%s", hostport, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    if (code != 200) {
        free(b.text);
        return NULL;
    }
    return b.text ? b.text : calloc(1, 1);
}

/* The value of the sample line that starts with series (name and labels
 * as rendered) followed by a space, or -1 if absent. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

/* The series daemon_build_info{version="<flps_version()>"}'s value. */
static double build_info(const char *text, const char *daemon)
{
    char series[128];

    snprintf(series, sizeof(series), "%s_build_info{version=\"%s\"}", daemon,
             flps_version());
    return sample(text, series);
}

static int have_promtool(void)
{
    return system("command -v promtool >/dev/null 2>&1") == 0;
}

/* promtool check metrics on text; its output goes to the test's log. */
static void assert_promtool_accepts(const char *what, const char *text)
{
    char path[128], cmd[512];
    FILE *f;
    int st;

    snprintf(path, sizeof(path), "%s/scrape.txt", cl.dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 1>&2", path);
    st = system(cmd);
    cr_assert_eq(st, 0, "promtool refused %s's /metrics:\n%s", what, text);
}

static void start_cluster(void)
{
    char log[128], work[128], agent_metrics[32];
    const char *sargs[] = {"--redis",     cl.redis.url, "--listen",
                           "127.0.0.1:0", "--lease-ms", "2000",
                           NULL};
    const char *aargs[] = {
        "--redis",     cl.redis.url, "--name",      "n1",     "--cpus",
        "4",           "--memory",   "4Gi",         "--gpus", "0",
        "--work-dir",  work,         "--heartbeat", "1",      "--metrics",
        agent_metrics, NULL};

    memset(&cl, 0, sizeof(cl));
    snprintf(cl.dir, sizeof(cl.dir), "/tmp/flps-mcl-XXXXXX");
    cr_assert_not_null(mkdtemp(cl.dir));
    cr_assert_eq(chmod(cl.dir, 0711), 0); /* job uids pass through */
    cr_assert_eq(test_redis_start(&cl.redis), 0, "redis-server did not start");
    snprintf(log, sizeof(log), "%s/flsched.log", cl.dir);
    cl.sched = test_spawn("flsched", sargs, log, "listening on ", cl.api,
                          sizeof(cl.api));
    cr_assert_gt(cl.sched, 0, "flsched did not start; see %s", log);
    snprintf(log, sizeof(log), "%s/flagent.log", cl.dir);
    snprintf(work, sizeof(work), "%s/n1", cl.dir);
    snprintf(agent_metrics, sizeof(agent_metrics), "127.0.0.1:0");
    cl.agent = test_spawn("flagent", aargs, log, NULL, NULL, 0);
    cr_assert_gt(cl.agent, 0);
    /* The node registered before anything is submitted (flsched refuses
     * a job no registered node could ever run). */
    for (int i = 0; i < 150; i++) {
        char *text = http_get(cl.api, "/v1/nodes");
        json_t *o = text ? json_loads(text, 0, NULL) : NULL;
        size_t n = json_array_size(json_object_get(o, "nodes"));

        free(text);
        json_decref(o);
        if (n == 1)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("flagent did not register; see %s", log);
}

static void stop(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

static void teardown(void)
{
    stop(&cl.prom);
    stop(&cl.agent); /* stops the job's processes too */
    stop(&cl.sched);
    test_redis_stop(&cl.redis);
    /* FLPS_KEEP_TEST_DIR=1 keeps the daemons' logs for a look. */
    if (cl.dir[0] != '\0' && getenv("FLPS_KEEP_TEST_DIR") == NULL) {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf %s", cl.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", cl.dir);
    }
}

/* Submit yaml through flsubmit; returns the job id (caller frees). */
static char *submit(const char *yaml)
{
    char path[128], cmd[512];
    run_result r;
    FILE *f;
    char *id;

    snprintf(path, sizeof(path), "%s/job.yaml", cl.dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(yaml, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "FLPS_SCHEDULER=http://%s %s/flsubmit --json submit %s", cl.api,
             FLPS_BIN_DIR, path);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "flsubmit exited %d:\n%s%s", r.status, r.out,
                 r.err);
    cr_assert_not_null(r.summary, "flsubmit printed no JSON");
    id = strdup(json_string_value(json_object_get(r.summary, "id")));
    run_free(&r);
    return id;
}

/* A job that outlasts a test (some 80 s on an idle machine): the agent's
 * stop ends it. Rank 0 evaluates every 100 iterations and reports progress
 * every 500 (1%), so both show within seconds. */
#define LONG_JOB                                                               \
    "name: watched\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"              \
    "servers: 1\niterations: 50000\nbatch_size: 32\n"                          \
    "compression: gtopk:0.01\neval_every: 100\n"

typedef struct targets {
    char server[64], worker[64], agent[64];
} targets;

/* Poll flsched's target list until it names the job's shard and worker
 * and the agent, each with the labels Prometheus will attach. */
static void wait_targets(const char *id, targets *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 300; i++) {
        char *text = http_get(cl.api, "/v1/metrics/targets");
        json_t *arr = text ? json_loads(text, 0, NULL) : NULL;
        size_t k;
        json_t *g;

        free(text);
        cr_assert(text == NULL || json_is_array(arr),
                  "the target list is not a JSON array");
        json_array_foreach(arr, k, g)
        {
            json_t *labels = json_object_get(g, "labels");
            const char *role =
                json_string_value(json_object_get(labels, "role"));
            const char *job =
                json_string_value(json_object_get(labels, "job_id"));
            const char *rank =
                json_string_value(json_object_get(labels, "rank"));
            const char *addr = json_string_value(
                json_array_get(json_object_get(g, "targets"), 0));
            char *slot = NULL;

            cr_assert_not_null(addr, "a group without a target");
            cr_assert_not_null(role, "a group without a role label");
            if (strcmp(role, "agent") == 0) {
                cr_assert_str_eq(
                    json_string_value(json_object_get(labels, "node")), "n1");
                slot = out->agent;
            } else if (job != NULL && strcmp(job, id) == 0) {
                cr_assert_str_eq(rank, "0");
                slot = strcmp(role, "server") == 0 ? out->server : out->worker;
            }
            if (slot != NULL)
                snprintf(slot, 64, "%s", addr);
        }
        json_decref(arr);
        if (out->server[0] && out->worker[0] && out->agent[0])
            return;
        sleep_ms(200);
    }
    cr_assert_fail("flsched's target list never named the job's server and "
                   "worker and the agent (have '%s' '%s' '%s')",
                   out->server, out->worker, out->agent);
}

/* Scrape hostport's /metrics until series is above 0 (for up to
 * timeout_s); the text of that scrape (caller frees). */
static char *scrape_until_positive(const char *hostport, const char *series,
                                   int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++) {
        char *text = http_get(hostport, "/metrics");

        if (text != NULL && sample(text, series) > 0)
            return text;
        free(text);
        sleep_ms(200);
    }
    cr_assert_fail("%s/metrics never had %s above 0", hostport, series);
    return NULL;
}

TestSuite(metrics_cluster, .fini = teardown, .timeout = 150);

Test(metrics_cluster, every_daemon_serves_linted_metrics_whose_counters_move)
{
    char *id, *w1, *w2, *s1, *s2, *a, *f;
    char series[160];
    targets tg;

    if (!have_promtool())
        cr_skip_test("promtool is absent (Debian package prometheus; "
                     "scripts/deps.sh installs it)");
    start_cluster();
    id = submit(LONG_JOB);
    wait_targets(id, &tg);

    /* The worker: bytes grow between two scrapes, accuracy shows, and
     * each large layer's pushes send 1% of it, as gtopk:0.01 says. */
    w1 = scrape_until_positive(tg.worker, "flworker_test_accuracy", 60);
    assert_promtool_accepts("flworker", w1);
    cr_assert_geq(sample(w1, "flworker_test_accuracy"), 0.5,
                  "the synthetic set is easy: accuracy %g",
                  sample(w1, "flworker_test_accuracy"));
    cr_assert_eq(build_info(w1, "flworker"), 1);
    cr_assert_gt(sample(w1, "process_resident_memory_bytes"), 1e6);
    cr_assert_gt(sample(w1, "process_open_fds"), 2);
    cr_assert_gt(sample(w1, "flworker_push_seconds_count"), 0);
    cr_assert_gt(sample(w1, "flworker_compute_seconds_total"), 0);
    cr_assert_gt(sample(w1, "flworker_communication_seconds_total"), 0);
    for (const char *const *l =
             (const char *const[]){"fc1.weight", "fc2.weight", NULL};
         *l != NULL; l++) {
        double d;

        snprintf(series, sizeof(series), "flworker_layer_density{layer=\"%s\"}",
                 *l);
        d = sample(w1, series);
        cr_assert(d > 0.008 && d < 0.012, "%s is %g, not ~0.01", series, d);
        snprintf(series, sizeof(series),
                 "flworker_layer_compression_ratio{layer=\"%s\"}", *l);
        d = sample(w1, series);
        /* A value and an index gap of a byte or two per pair (protocol
         * 3: gaps average 100 at 1%, most under 128): 1% costs ~1.33% of
         * dense. */
        cr_assert(d > 60 && d < 90, "%s is %g, not ~75", series, d);
    }
    cr_assert_gt(sample(w1, "flworker_compression_ratio"), 10,
                 "1%% of the pairs must cost far less than dense");
    sleep_ms(1500);
    w2 = http_get(tg.worker, "/metrics");
    cr_assert_not_null(w2);
    cr_assert_gt(sample(w2, "flworker_sent_bytes_total"),
                 sample(w1, "flworker_sent_bytes_total"),
                 "the worker's bytes sent did not grow");
    cr_assert_gt(sample(w2, "flworker_iteration"),
                 sample(w1, "flworker_iteration"));

    /* The shard flagent started with --metrics. */
    s1 = http_get(tg.server, "/metrics");
    cr_assert_not_null(s1, "no /metrics at the shard's %s", tg.server);
    assert_promtool_accepts("flps", s1);
    cr_assert_eq(build_info(s1, "flps"), 1);
    sleep_ms(1000);
    s2 = http_get(tg.server, "/metrics");
    cr_assert_not_null(s2);
    cr_assert_gt(sample(s2, "flps_received_bytes_total"),
                 sample(s1, "flps_received_bytes_total"));
    cr_assert_gt(sample(s1, "process_cpu_seconds_total"), 0);

    /* The agent: one server and one worker started and running. */
    a = http_get(tg.agent, "/metrics");
    cr_assert_not_null(a);
    assert_promtool_accepts("flagent", a);
    cr_assert_eq(sample(a, "flagent_processes_started_total{role=\"server\"}"),
                 1);
    cr_assert_eq(sample(a, "flagent_processes_started_total{role=\"worker\"}"),
                 1);
    cr_assert_eq(sample(a, "flagent_tasks_running{role=\"worker\"}"), 1);
    cr_assert_eq(sample(a, "flagent_node_cpus"), 4);
    cr_assert_gt(sample(a, "flagent_last_heartbeat_timestamp_seconds"),
                 (double)time(NULL) - 10);

    /* flsched: the job's series by job id, jobs by state, nodes alive.
     * Bytes come with the progress reports (every 500 iterations), the
     * accuracy with the evaluations (every 100): wait for the later. */
    snprintf(series, sizeof(series),
             "flsched_job_sent_bytes{job_id=\"%s\",job_name=\"watched\"}", id);
    f = scrape_until_positive(cl.api, series, 60);
    assert_promtool_accepts("flsched", f);
    snprintf(series, sizeof(series),
             "flsched_job_test_accuracy{job_id=\"%s\",job_name=\"watched\"}",
             id);
    cr_assert_gt(sample(f, series), 0.5);
    snprintf(series, sizeof(series),
             "flsched_job_state{job_id=\"%s\",job_name=\"watched\","
             "state=\"RUNNING\"}",
             id);
    cr_assert_eq(sample(f, series), 1);
    cr_assert_eq(sample(f, "flsched_jobs{state=\"RUNNING\"}"), 1);
    cr_assert_eq(sample(f, "flsched_queue_length"), 0);
    cr_assert_eq(sample(f, "flsched_placement_wait_seconds_count"), 1);
    cr_assert_eq(sample(f, "flsched_nodes_alive"), 1);
    cr_assert_eq(build_info(f, "flsched"), 1);
    cr_assert_eq(build_info(a, "flagent"), 1);
    free(w1);
    free(w2);
    free(s1);
    free(s2);
    free(a);
    free(f);
    free(id);
}

/* The result of an instant query as a JSON array (caller decrefs), NULL
 * when Prometheus did not answer with success. */
static json_t *prom_query(const char *prom, const char *promql)
{
    CURL *c = curl_easy_init();
    char *esc = curl_easy_escape(c, promql, 0), path[1024], *text;
    json_t *o, *res = NULL;

    snprintf(path, sizeof(path), "/api/v1/query?query=%s", esc);
    curl_free(esc);
    curl_easy_cleanup(c);
    text = http_get(prom, path);
    o = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (json_is_string(json_object_get(o, "status")) &&
        strcmp(json_string_value(json_object_get(o, "status")), "success") == 0)
        res =
            json_incref(json_object_get(json_object_get(o, "data"), "result"));
    json_decref(o);
    return res;
}

/* Query until the result has a series; its value. */
static double prom_wait_value(const char *prom, const char *promql,
                              json_t **metric_out, int timeout_s)
{
    for (int i = 0; i < timeout_s * 2; i++) {
        json_t *r = prom_query(prom, promql);

        if (json_array_size(r) > 0) {
            json_t *s = json_array_get(r, 0);
            const char *v = json_string_value(
                json_array_get(json_object_get(s, "value"), 1));
            double d = v ? strtod(v, NULL) : -1;

            if (metric_out != NULL)
                *metric_out = json_incref(json_object_get(s, "metric"));
            json_decref(r);
            return d;
        }
        json_decref(r);
        sleep_ms(500);
    }
    cr_assert_fail("Prometheus never had a series for %s", promql);
    return -1;
}

/* prometheus from $PATH with args, its output to log; the pid or -1. */
static pid_t spawn_prometheus(const char *const *args, const char *log)
{
    char *argv[16];
    int a = 0;
    pid_t pid;

    argv[a++] = "prometheus";
    for (int i = 0; args[i] != NULL && a < 15; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* A real Prometheus scraping flsched's target list (http_sd) and flsched,
 * every second; prom gets its HOST:PORT once it is ready. */
static void start_prometheus(char *prom, size_t len)
{
    char cfg[128], tsdb[128], listen[64], log[128];
    char cfgarg[160], tsdbarg[160], listenarg[96];
    const char *pargs[] = {cfgarg, tsdbarg, listenarg, "--log.level=warn",
                           NULL};
    FILE *f;
    int ready = 0;

    snprintf(cfg, sizeof(cfg), "%s/prometheus.yml", cl.dir);
    snprintf(tsdb, sizeof(tsdb), "%s/tsdb", cl.dir);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", test_free_port());
    f = fopen(cfg, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            "  - job_name: flps-cluster\n"
            "    http_sd_configs:\n"
            "      - url: http://%s/v1/metrics/targets\n"
            "        refresh_interval: 1s\n"
            "  - job_name: flsched\n"
            "    static_configs:\n"
            "      - targets: [\"%s\"]\n",
            cl.api, cl.api);
    fclose(f);
    snprintf(cfgarg, sizeof(cfgarg), "--config.file=%s", cfg);
    snprintf(tsdbarg, sizeof(tsdbarg), "--storage.tsdb.path=%s", tsdb);
    snprintf(listenarg, sizeof(listenarg), "--web.listen-address=%s", listen);
    snprintf(log, sizeof(log), "%s/prometheus.log", cl.dir);
    cl.prom = spawn_prometheus(pargs, log);
    cr_assert_gt(cl.prom, 0, "prometheus did not start; see %s", log);
    for (int i = 0; i < 60 && !ready; i++) {
        char *r = http_get(listen, "/-/ready");
        ready = r != NULL;
        free(r);
        if (!ready)
            sleep_ms(250);
    }
    cr_assert(ready, "prometheus never became ready; see %s", log);
    snprintf(prom, len, "%s", listen);
}

static int have_prometheus(void)
{
    return system("command -v prometheus >/dev/null 2>&1") == 0;
}

Test(metrics_cluster, a_real_prometheus_finds_every_target_through_flsched)
{
    char prom[64], q[256];
    json_t *labels = NULL;
    char *id;
    double v;

    if (!have_prometheus())
        cr_skip_test("the prometheus binary is absent (Debian package "
                     "prometheus; scripts/deps.sh installs it)");
    start_cluster();
    start_prometheus(prom, sizeof(prom));

    id = submit(LONG_JOB);
    /* The worker's own bytes-sent series, found through http_sd with the
     * labels flsched gave it. */
    snprintf(q, sizeof(q),
             "flworker_sent_bytes_total{job_id=\"%s\",role=\"worker\"}", id);
    v = prom_wait_value(prom, q, &labels, 60);
    cr_assert_gt(v, 0);
    cr_assert_str_eq(json_string_value(json_object_get(labels, "rank")), "0");
    cr_assert_str_eq(json_string_value(json_object_get(labels, "job_name")),
                     "watched");
    json_decref(labels);
    labels = NULL;
    /* Its accuracy, from the worker and from flsched's per-job series. */
    snprintf(q, sizeof(q), "flworker_test_accuracy{job_id=\"%s\"} > 0", id);
    v = prom_wait_value(prom, q, NULL, 60);
    cr_assert(v > 0.5 && v <= 1, "accuracy %g", v);
    snprintf(q, sizeof(q),
             "flsched_job_test_accuracy{job=\"flsched\",job_id=\"%s\"}", id);
    v = prom_wait_value(prom, q, NULL, 30);
    cr_assert(v > 0.5 && v <= 1, "flsched's accuracy for the job: %g", v);
    /* The shard and the agent are scraped too. */
    snprintf(q, sizeof(q),
             "rate(flps_received_bytes_total{job_id=\"%s\",role=\"server\"}"
             "[5s]) > 0",
             id);
    v = prom_wait_value(prom, q, NULL, 30);
    cr_assert_gt(v, 0);
    v = prom_wait_value(prom, "up{role=\"agent\",node=\"n1\"}", NULL, 30);
    cr_assert_eq(v, 1);
    free(id);
}

/* ---- the dashboard, for a C worker and for a PyTorch program ---- */

/* The PyTorch MLP of examples/torch as a command: job beside LONG_JOB, with
 * its codec, so both jobs fill the same panels: progress every 50
 * iterations, an evaluation every 100 (of 500 test samples). */
#define TORCH_JOB                                                              \
    "name: torch-watched\nmodel: mlp\nworkers: 1\nservers: 1\n"                \
    "iterations: 50000\nbatch_size: 32\ncompression: gtopk:0.01\n"             \
    "eval_every: 100\n"                                                        \
    "command: [/usr/bin/python3, " FLPS_SOURCE_DIR "/examples/torch/mlp.py,"   \
    " --test-samples, '500']\n"                                                \
    "env:\n  OMP_NUM_THREADS: '1'\n"

/* Panels whose query may rightly return nothing in a healthy run
 * (scripts/render_dashboard.py's MAY_BE_EMPTY): nothing refused; the
 * energy row where no GPU or RAPL counter reports (this test's cluster
 * has neither; energy_series_come_per_device_where_hardware_reports
 * checks the series on the NVML stub and a fake powercap). */
static int may_be_empty(const char *title)
{
    static const char *const empty[] = {
        "Rejected messages", "Joules per iteration",
        "Power per worker and device", "Node power (flagent)"};

    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++)
        if (strcmp(title, empty[i]) == 0)
            return 1;
    return 0;
}

#define MAX_QUERIES 64

typedef struct dash_query {
    const char *title, *expr; /* borrowed from the dashboard's JSON */
    int data[2];              /* has had data for job 0, job 1 */
} dash_query;

/* Every panel's queries, rows' panels included, in the dashboard's order. */
static size_t dashboard_queries(json_t *panels, dash_query *q, size_t n)
{
    size_t i;
    json_t *p;

    json_array_foreach(panels, i, p)
    {
        size_t k;
        json_t *t;

        n = dashboard_queries(json_object_get(p, "panels"), q, n);
        json_array_foreach(json_object_get(p, "targets"), k, t)
        {
            cr_assert_lt(n, MAX_QUERIES);
            q[n].title = json_string_value(json_object_get(p, "title"));
            q[n].expr = json_string_value(json_object_get(t, "expr"));
            cr_assert(q[n].title != NULL && q[n].expr != NULL);
            q[n].data[0] = q[n].data[1] = 0;
            n++;
        }
    }
    return n;
}

/* expr with Grafana's variables as the dashboard would send them: the job
 * selected, $__rate_interval four scrape intervals. */
static void expand(const char *expr, const char *job, char *out, size_t len)
{
    size_t o = 0;

    while (*expr != '\0' && o + 1 < len) {
        const char *with = NULL;
        size_t skip = 0;

        if (strncmp(expr, "$job_id", 7) == 0) {
            with = job;
            skip = 7;
        } else if (strncmp(expr, "$__rate_interval", 16) == 0) {
            with = "4s";
            skip = 16;
        }
        if (with == NULL) {
            out[o++] = *expr++;
            continue;
        }
        o += (size_t)snprintf(out + o, len - o, "%s", with);
        cr_assert_lt(o, len, "a query too long for the test's buffer");
        expr += skip;
    }
    out[o] = '\0';
}

/* Whether every query that must have data for job 0 has, and job 1 has
 * data wherever job 0 has. */
static int dashboard_done(const dash_query *q, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((!q[i].data[0] && !may_be_empty(q[i].title)) ||
            (q[i].data[0] && !q[i].data[1]))
            return 0;
    return 1;
}

/* Whether Prometheus lists job among the values of job_id on
 * flworker_iteration: the dashboard's job list
 * (label_values(flworker_iteration, job_id)). */
static int in_job_list(const char *prom, const char *job)
{
    char *text = http_get(prom, "/api/v1/label/job_id/values?match%5B%5D="
                                "flworker_iteration");
    json_t *o = text ? json_loads(text, 0, NULL) : NULL, *v;
    size_t i;
    int found = 0;

    json_array_foreach(json_object_get(o, "data"), i, v) found |=
        strcmp(json_string_value(v), job) == 0;
    json_decref(o);
    free(text);
    return found;
}

Test(metrics_cluster,
     a_torch_job_has_data_in_every_dashboard_query_a_c_worker_job_has,
     .timeout = 300)
{
    dash_query q[MAX_QUERIES];
    char prom[64], expr[2048];
    const char *ids[2];
    json_t *dash;
    size_t n;
    int listed = 0;

#if defined(__SANITIZE_ADDRESS__)
    /* /usr/bin/python3 cannot load a libflps built with AddressSanitizer
     * (its runtime must be the first library loaded); the other cases run
     * the same daemons' metrics under it. */
    cr_skip_test("the PyTorch worker needs the release build's libflps: "
                 "the release stage runs this case");
#endif
    if (!have_prometheus())
        cr_skip_test("the prometheus binary is absent (Debian package "
                     "prometheus; scripts/deps.sh installs it)");
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
        cr_skip_test("no PyTorch for /usr/bin/python3 (Debian package "
                     "python3-torch; scripts/deps.sh installs it)");
    dash = json_load_file(FLPS_SOURCE_DIR "/helm/flps/dashboards/flps-job.json",
                          0, NULL);
    cr_assert_not_null(dash);
    n = dashboard_queries(json_object_get(dash, "panels"), q, 0);
    cr_assert_gt(n, 20, "the dashboard's queries (%zu)", n);
    start_cluster();
    start_prometheus(prom, sizeof(prom));
    ids[0] = submit(LONG_JOB); /* flworker, the C worker */
    ids[1] = submit(TORCH_JOB);
    /* Each query in turn, for each job, until every query the C worker's
     * job fills is filled for the PyTorch job too (a rate needs a few
     * scrapes, an evaluation 100 iterations, the program's start-up some
     * seconds). */
    for (int round = 0; round < 150 && !(dashboard_done(q, n) && listed);
         round++) {
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < 2; j++) {
                json_t *r;

                if (q[i].data[j])
                    continue;
                expand(q[i].expr, ids[j], expr, sizeof(expr));
                r = prom_query(prom, expr);
                q[i].data[j] = json_array_size(r) > 0;
                json_decref(r);
            }
        listed = in_job_list(prom, ids[0]) && in_job_list(prom, ids[1]);
        sleep_ms(1000);
    }
    for (size_t i = 0; i < n; i++) {
        cr_log_info("%-40s C worker %s, PyTorch %s: %s", q[i].title,
                    q[i].data[0] ? "data" : "none",
                    q[i].data[1] ? "data" : "none", q[i].expr);
        cr_expect(q[i].data[0] || may_be_empty(q[i].title),
                  "'%s' had no data for the C worker's job: %s", q[i].title,
                  q[i].expr);
        cr_expect(!q[i].data[0] || q[i].data[1],
                  "'%s' had data for the C worker's job but none for the "
                  "PyTorch job: %s",
                  q[i].title, q[i].expr);
    }
    cr_assert(in_job_list(prom, ids[1]),
              "the PyTorch job is not in the dashboard's job list");
    cr_assert(in_job_list(prom, ids[0]));
    json_decref(dash);
    free((char *)ids[0]);
    free((char *)ids[1]);
}

Test(metrics_cluster,
     a_worker_whose_metrics_port_is_taken_stops_before_training)
{
    char path[128], cmd[512], taken[64];
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    run_result r;
    FILE *f;

    memset(&cl, 0, sizeof(cl));
    snprintf(cl.dir, sizeof(cl.dir), "/tmp/flps-mcl-XXXXXX");
    cr_assert_not_null(mkdtemp(cl.dir));
    cr_assert_eq(chmod(cl.dir, 0711), 0); /* job uids pass through */
    /* Hold a port: bound and listening, as another daemon would. */
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 1), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    snprintf(taken, sizeof(taken), "127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(path, sizeof(path), "%s/job.yaml", cl.dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(LONG_JOB, f);
    fclose(f);
    /* No shard listens at the endpoint: a worker that went on would wait
     * for it, not exit 1 at once. */
    snprintf(cmd, sizeof(cmd),
             "timeout 60 %s/flworker --job %s --rank 0 --servers "
             "tcp://127.0.0.1:1 --metrics %s",
             FLPS_BIN_DIR, path, taken);
    run_cmd(cmd, &r);
    close(fd);
    cr_assert_eq(r.status, 1, "flworker exited %d:\n%s%s", r.status, r.out,
                 r.err);
    cr_assert_not_null(strstr(r.err, "cannot serve metrics on"), "%s", r.err);
    cr_assert_null(strstr(r.out, "metrics on"), "it must not claim to serve");
    run_free(&r);
}

/* The energy series where the hardware reports energy: the NVML stub's
 * GPU (its counter runs with the wall clock) and a fake powercap package
 * in the environment the agent, and so the job's worker, inherits. The
 * worker's flworker_energy_joules_total and the agent's
 * flagent_node_energy_joules_total have a series per device, those of
 * the GPU grow, and promtool accepts both scrapes. (Without them, as in
 * the tests above, the families have no series.) */
Test(metrics_cluster, energy_series_come_per_device_where_hardware_reports)
{
    stub_ctl stub;
    fake_sysfs sysfs;
    char *id, *w, *a;
    targets tg;

    if (!have_promtool())
        cr_skip_test("promtool is absent (Debian package prometheus; "
                     "scripts/deps.sh installs it)");
    stub_init(&stub, "init ok\ndevices 1\nd0.clocks 1980,1530\nd0.mem 3201\n"
                     "d0.realtime 1\n");
    fake_sysfs_init(&sysfs, 0);
    fake_powercap_zone(&sysfs, "intel-rapl:0", "package-0", 5000000,
                       262143000000ULL);
    setenv("FLPS_NVML_LIBRARY", FLPS_NVML_STUB, 1);
    setenv("FLPS_SYSFS_ROOT", sysfs.root, 1);
    start_cluster();
    id = submit(LONG_JOB);
    wait_targets(id, &tg);
    w = scrape_until_positive(
        tg.worker, "flworker_energy_joules_total{device=\"gpu0\"}", 60);
    assert_promtool_accepts("flworker", w);
    cr_assert_geq(
        sample(w, "flworker_energy_joules_total{device=\"cpu-package0\"}"), 0,
        "the package's series is there: %s", w);
    /* flagent reads the node's counters every 10 s. */
    a = scrape_until_positive(
        tg.agent, "flagent_node_energy_joules_total{device=\"gpu0\"}", 60);
    assert_promtool_accepts("flagent", a);
    cr_assert_geq(
        sample(a, "flagent_node_energy_joules_total{device=\"cpu-package0\"}"),
        0, "%s", a);
    free(w);
    free(a);
    free(id);
    unsetenv("FLPS_NVML_LIBRARY");
    unsetenv("FLPS_SYSFS_ROOT");
    fake_sysfs_fini(&sysfs);
    stub_fini(&stub);
}
