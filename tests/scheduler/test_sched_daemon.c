/* A real flsched process against a real redis-server, driven over HTTP
 * with libcurl: the API's status codes and JSON, refused job files that
 * write nothing, placement with fake nodes, exits written as an agent
 * writes them, kill -9 and restart, two schedulers and one leader. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_fixture.h"
#include "scheduler/rconn.h"

static test_redis srv;
static rconn *rc;

typedef struct sched_proc {
    pid_t pid;
    char base[300]; /* http://127.0.0.1:PORT */
} sched_proc;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Start flsched with extra arguments (NULL-terminated); wait for its
 * "listening on" line. */
static void start_sched(sched_proc *p, const char *const *extra)
{
    int pfd[2];
    char *argv[24];
    int a = 0;
    FILE *f;
    char line[256];

    cr_assert_eq(pipe(pfd), 0);
    argv[a++] = (char *)FLPS_BIN_DIR "/flsched";
    argv[a++] = (char *)"--redis";
    argv[a++] = srv.url;
    argv[a++] = (char *)"--listen";
    argv[a++] = (char *)"127.0.0.1:0";
    for (int i = 0; extra != NULL && extra[i] != NULL && a < 23; i++)
        argv[a++] = (char *)extra[i];
    argv[a] = NULL;
    p->pid = fork();
    cr_assert(p->pid >= 0);
    if (p->pid == 0) {
        int fd = open("/tmp/flps-test-flsched.log",
                      O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(pfd[1], STDOUT_FILENO);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        close(pfd[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    f = fdopen(pfd[0], "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(line, sizeof(line), f), "flsched did not start");
    fclose(f);
    cr_assert_eq(strncmp(line, "listening on ", 13), 0, "%s", line);
    line[strcspn(line, "\n")] = '\0';
    snprintf(p->base, sizeof(p->base), "http://%s", line + 13);
}

static void stop_sched(sched_proc *p, int sig)
{
    if (p->pid > 0) {
        kill(p->pid, sig);
        waitpid(p->pid, NULL, 0);
        p->pid = 0;
    }
}

static sched_proc fls;

static void setup(void)
{
    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    cr_assert_eq(rconn_create(srv.url, 2000, &rc), FLPS_OK);
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void)
{
    stop_sched(&fls, SIGTERM);
    rconn_destroy(rc);
    test_redis_stop(&srv);
    curl_global_cleanup();
}

TestSuite(sched_daemon, .init = setup, .fini = teardown, .timeout = 60);

/* ---- HTTP ---- */

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t on_data(char *d, size_t sz, size_t nm, void *arg)
{
    buf *b = arg;
    size_t n = sz * nm;
    char *np = realloc(b->p, b->n + n + 1);

    if (np == NULL)
        return 0;
    memcpy(np + b->n, d, n);
    b->p = np;
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

/* Send method path (body may be NULL); the status; *out the parsed JSON
 * body when out is not NULL (caller decrefs). */
static long http(const sched_proc *p, const char *method, const char *path,
                 const char *body, size_t blen, const char *auth, json_t **out)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    buf b = {NULL, 0};
    char url[512], hdr[256];
    long code = 0;

    snprintf(url, sizeof(url), "%s%s", p->base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    if (body != NULL) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)blen);
    }
    h = curl_slist_append(h, "Content-Type: application/yaml");
    if (auth != NULL) {
        snprintf(hdr, sizeof(hdr), "Authorization: %s", auth);
        h = curl_slist_append(h, hdr);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    cr_assert_eq(curl_easy_perform(c), CURLE_OK, "%s %s", method, url);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out != NULL) {
        *out = json_loads(b.p ? b.p : "", 0, NULL);
        cr_assert_not_null(*out, "%s %s: not JSON: %s", method, path,
                           b.p ? b.p : "");
    }
    free(b.p);
    return code;
}

static long post(const char *yaml, json_t **out)
{
    return http(&fls, "POST", "/v1/jobs", yaml, strlen(yaml), NULL, out);
}

static long get(const char *path, json_t **out)
{
    return http(&fls, "GET", path, NULL, 0, NULL, out);
}

static const char *str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    cr_assert(json_is_string(v), "%s is not a string", k);
    return json_string_value(v);
}

/* ---- Redis ---- */

static char *S(const char *fmt, const char *a, const char *b)
{
    redisReply *r = NULL;
    static char out[8192];

    cr_assert_eq(rconn_cmd(rc, &r, fmt, a, b), FLPS_OK, "%s", rconn_error(rc));
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        snprintf(out, sizeof(out), "%s", r->str);
    else if (r->type == REDIS_REPLY_INTEGER)
        snprintf(out, sizeof(out), "%lld", r->integer);
    else
        out[0] = '\0';
    freeReplyObject(r);
    return out;
}

/* Sorted members of an array reply (SMEMBERS, KEYS), space-separated. */
static char *sorted(const char *fmt, const char *a)
{
    redisReply *r = NULL;
    static char out[16384];
    const char *v[512];
    size_t n, off = 0;

    cr_assert_eq(rconn_cmd(rc, &r, fmt, a), FLPS_OK);
    n = r->elements < 512 ? r->elements : 512;
    for (size_t i = 0; i < n; i++)
        v[i] = r->element[i]->str;
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && strcmp(v[k - 1], v[k]) > 0; k--) {
            const char *t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s%s",
                                i ? " " : "", v[i]);
    freeReplyObject(r);
    return out;
}

static void add_node(const char *name, int cpus, long ttl_ms)
{
    char c[16], ttl[32];
    redisReply *r = NULL;

    snprintf(c, sizeof(c), "%d", cpus);
    snprintf(ttl, sizeof(ttl), "%ld", ttl_ms);
    S("SADD flps:nodes %s", name, NULL);
    cr_assert_eq(rconn_cmd(rc, &r,
                           "HSET flps:node:%s name %s address 127.0.0.1 cpus "
                           "%s memory 68719476736 gpus 0 state READY "
                           "last_heartbeat 1",
                           name, name, c),
                 FLPS_OK);
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(rc, &r, "SET flps:node:%s:alive 1 PX %s", name, ttl),
                 FLPS_OK);
    freeReplyObject(r);
}

static void agent_exit(const char *key, int code, const char *done)
{
    redisReply *r = NULL;
    char c[16];

    snprintf(c, sizeof(c), "%d", code);
    if (done != NULL) {
        cr_assert_eq(rconn_cmd(rc, &r, "HSET %s done %s", key, done), FLPS_OK);
        freeReplyObject(r);
    }
    cr_assert_eq(rconn_cmd(rc, &r,
                           "HSET %s state EXITED exit_code %s signal 0 "
                           "exited_at %s",
                           key, c, "1.0"),
                 FLPS_OK);
    freeReplyObject(r);
    S("RPUSH flps:exits %s", key, NULL);
}

/* Poll GET /v1/jobs/id until its state is want (about 5 s at most). */
static void wait_state(const char *id, const char *want)
{
    char path[64], last[32] = "";

    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    for (int i = 0; i < 100; i++) {
        json_t *j = NULL;

        cr_assert_eq(get(path, &j), 200);
        snprintf(last, sizeof(last), "%s", str(j, "state"));
        json_decref(j);
        if (strcmp(last, want) == 0)
            return;
        sleep_ms(50);
    }
    cr_assert_fail("job %s is %s, not %s", id, last, want);
}

/* Wait until p holds the lease (its loop has taken its first turn). */
static void wait_leader(const sched_proc *p)
{
    for (int i = 0; i < 100; i++) {
        json_t *h = NULL;
        int leads;

        cr_assert_eq(http(p, "GET", "/healthz", NULL, 0, NULL, &h), 200);
        leads = json_is_true(json_object_get(h, "leader"));
        json_decref(h);
        if (leads)
            return;
        sleep_ms(50);
    }
    cr_assert_fail("flsched did not take the lease");
}

static const char job_a[] = "name: a\nmodel: mlp\nworkers: 2\n";

/* ---- Tests ---- */

Test(sched_daemon, submits_lists_gets_and_cancels_with_the_documented_json)
{
    static const char *const keys[] = {
        "id",           "name",         "state",          "priority",
        "submitted_at", "started_at",   "finished_at",    "attempt",
        "restarts",     "max_restarts", "reason",         "workers",
        "servers",      "iterations",   "time_limit",     "resources",
        "tasks",        "transport",    "transport_used", NULL};
    json_t *j = NULL, *l = NULL;
    size_t nkeys = 0;

    start_sched(&fls, NULL);
    add_node("n1", 4, 30000);
    S("DEL flps:node:n1:alive", NULL, NULL); /* down: nothing is placed */
    cr_assert_eq(post(job_a, &j), 201);
    for (nkeys = 0; keys[nkeys] != NULL; nkeys++)
        cr_assert_not_null(json_object_get(j, keys[nkeys]), "no %s",
                           keys[nkeys]);
    cr_assert_eq(json_object_size(j), nkeys, "exactly the documented fields");
    cr_assert_str_eq(str(j, "id"), "j1");
    cr_assert_str_eq(str(j, "name"), "a");
    cr_assert_str_eq(str(j, "state"), "QUEUED");
    cr_assert(json_is_null(json_object_get(j, "started_at")));
    cr_assert(json_is_null(json_object_get(j, "finished_at")));
    cr_assert(json_is_real(json_object_get(j, "submitted_at")));
    cr_assert_eq(json_integer_value(json_object_get(j, "workers")), 2);
    cr_assert_eq(json_integer_value(json_object_get(j, "servers")), 1);
    cr_assert_eq(json_integer_value(json_object_get(j, "iterations")), 1000);
    cr_assert_eq(json_array_size(json_object_get(j, "tasks")), 0);
    json_decref(j);
    cr_assert_eq(post("name: b\nmodel: mlp\n", NULL), 201);
    cr_assert_eq(get("/v1/jobs", &l), 200);
    cr_assert_eq(json_array_size(json_object_get(l, "jobs")), 2);
    cr_assert_str_eq(str(json_array_get(json_object_get(l, "jobs"), 0), "id"),
                     "j1");
    cr_assert_str_eq(str(json_array_get(json_object_get(l, "jobs"), 1), "id"),
                     "j2");
    json_decref(l);
    cr_assert_eq(get("/v1/jobs/j2", &j), 200);
    cr_assert_str_eq(str(j, "name"), "b");
    json_decref(j);
    cr_assert_eq(get("/v1/jobs/j99", &j), 404);
    cr_assert_str_eq(str(j, "error"), "no job j99");
    json_decref(j);
    cr_assert_eq(http(&fls, "DELETE", "/v1/jobs/j1", NULL, 0, NULL, &j), 200);
    cr_assert_str_eq(str(j, "state"), "CANCELLED");
    cr_assert(json_is_real(json_object_get(j, "finished_at")));
    json_decref(j);
    cr_assert_eq(http(&fls, "DELETE", "/v1/jobs/j1", NULL, 0, NULL, &j), 409);
    json_decref(j);
    cr_assert_eq(http(&fls, "DELETE", "/v1/jobs/j99", NULL, 0, NULL, NULL),
                 404);
    cr_assert_eq(http(&fls, "PUT", "/v1/jobs/j2", "x", 1, NULL, NULL), 405);
    cr_assert_eq(get("/v1/nope", NULL), 404);
}

static void expect_refusal(const char *yaml, long status, const char *field,
                           long line)
{
    json_t *j = NULL;

    cr_assert_eq(post(yaml, &j), status, "for:\n%s", yaml);
    cr_assert(json_is_string(json_object_get(j, "error")));
    cr_assert_str_eq(str(j, "field"), field, "for:\n%s", yaml);
    if (status == 400) {
        if (line > 0)
            cr_assert_eq(json_integer_value(json_object_get(j, "line")), line);
        else
            cr_assert(json_is_null(json_object_get(j, "line")));
    }
    json_decref(j);
}

Test(sched_daemon, refuses_bad_job_files_naming_the_field_and_writes_nothing)
{
    char before[16384], big[1100000];
    json_t *j;

    start_sched(&fls, NULL);
    add_node("n1", 8, 30000);
    wait_leader(&fls); /* flps:leader exists before the snapshot */
    snprintf(before, sizeof(before), "%s", sorted("KEYS %s", "flps:*"));
    expect_refusal("name: a\nmodel: mlp\nwrokers: 2\n", 400, "wrokers", 3);
    expect_refusal("name: a\nmodel: mlp\nworkers: many\n", 400, "workers", 3);
    expect_refusal("name: a\nworkers: 2\n", 400, "model", 0);
    expect_refusal("name: a\nmodel: resnet50\n", 400, "model", 2);
    cr_assert_eq(post("name: a\nmodel: resnet50\n", &j), 400);
    cr_assert(strstr(str(j, "error"), "expected one of mlp, cnn") != NULL,
              "an unknown model is refused naming the known ones: %s",
              str(j, "error"));
    json_decref(j);
    expect_refusal("name: a\nmodel: mlp\nmemory_per_worker: 1GB\n", 400,
                   "memory_per_worker", 3);
    expect_refusal("name: a\nmodel: mlp\ncpus_per_worker: 64\n", 422,
                   "cpus_per_worker", 0);
    expect_refusal("name: a\nmodel: mlp\nworkers: 8\n", 422, "workers", 0);
    expect_refusal("name: a\nmodel: mlp\ngpus_per_worker: 1\n", 422,
                   "gpus_per_worker", 0);
    /* n1's agent reports no RDMA port: an rdma job could never run. */
    expect_refusal("name: a\nmodel: mlp\ntransport: rdma\n", 422, "transport",
                   0);
    cr_assert_eq(post("name: a\nmodel: mlp\ntransport: rdma\n", &j), 422);
    cr_assert(strstr(str(j, "error"), "the only registered node reports no "
                                      "ACTIVE RDMA port") != NULL,
              "%s", str(j, "error"));
    json_decref(j);
    memset(big, '#', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_assert_eq(post(big, NULL), 413);
    cr_assert_str_eq(sorted("KEYS %s", "flps:*"), before,
                     "a refused job leaves Redis as it was");
    cr_assert_eq(post("name: ok\nmodel: mlp\ncompression: auto\n", &j), 201,
                 "compression: auto is accepted");
    json_decref(j);
    cr_assert_eq(post("name: ok\nmodel: mlp\ntransport: auto\n", &j), 201,
                 "transport: auto runs anywhere, on ZeroMQ without RDMA");
    cr_assert_str_eq(str(j, "transport"), "auto");
    json_decref(j);
    /* Decentralized jobs run under the agents launcher too: flagent hands
     * the workers each other's endpoints (a job of no servers). */
    cr_assert_eq(post("name: a\nmodel: mlp\nworkers: 2\nmode: saps\n", &j), 201,
                 "mode saps is accepted under the agents launcher");
    cr_assert_eq(json_integer_value(json_object_get(j, "servers")), 0,
                 "a saps job runs no shard");
    json_decref(j);
}

Test(sched_daemon, the_kubernetes_launcher_refuses_a_saps_job_naming_mode)
{
    /* No API server answers there: a submit never reaches it. */
    static const char token[] = "/tmp/flps-test-sched-k8s-token";
    static const char *const k8s[] = {"--launcher",
                                      "kubernetes",
                                      "--k8s-api",
                                      "http://127.0.0.1:9",
                                      "--k8s-token-file",
                                      token,
                                      "--k8s-image",
                                      "flps:test",
                                      "--k8s-namespace",
                                      "flps",
                                      "--k8s-jobset",
                                      "never",
                                      NULL};
    json_t *j = NULL;
    FILE *f = fopen(token, "w");

    cr_assert_not_null(f);
    fputs("not-a-real-token\n", f);
    fclose(f);
    start_sched(&fls, k8s);
    unlink(token);
    expect_refusal("name: a\nmodel: mlp\nworkers: 2\nmode: saps\n", 422, "mode",
                   0);
    cr_assert_eq(post("name: a\nmodel: mlp\nworkers: 2\nmode: saps\n", &j),
                 422);
    cr_assert(strstr(str(j, "error"), "the kubernetes launcher does not give "
                                      "a saps job's workers") != NULL,
              "%s", str(j, "error"));
    json_decref(j);
}

Test(sched_daemon, places_by_priority_on_fake_nodes_and_finishes_with_summary)
{
    json_t *j = NULL, *sum;

    start_sched(&fls, NULL);
    add_node("n1", 3, 30000);
    S("DEL flps:node:n1:alive", NULL, NULL); /* both wait for the node */
    cr_assert_eq(post("name: low\nmodel: mlp\nworkers: 2\n", NULL), 201);
    cr_assert_eq(
        post("name: high\nmodel: mlp\nworkers: 2\npriority: 9\n", NULL), 201);
    S("SET flps:node:n1:alive 1 EX %s", "30", NULL);
    wait_state("j2", "RUNNING");
    cr_assert_str_eq(sorted("SMEMBERS %s", "flps:node:n1:tasks"),
                     "flps:task:j2:0:server-0 flps:task:j2:0:worker-0 "
                     "flps:task:j2:0:worker-1");
    cr_assert_eq(get("/v1/jobs/j1", &j), 200);
    cr_assert_str_eq(str(j, "state"), "QUEUED");
    json_decref(j);
    agent_exit("flps:task:j2:0:worker-0", 0,
               "{\"event\":\"done\",\"rank\":0,\"iterations\":1000,"
               "\"bytes_sent\":5,\"bytes_received\":6,\"dense_bytes\":50,"
               "\"test_accuracy\":0.875}");
    agent_exit("flps:task:j2:0:worker-1", 0,
               "{\"event\":\"done\",\"rank\":1,\"iterations\":1000,"
               "\"bytes_sent\":7,\"bytes_received\":8,\"dense_bytes\":50}");
    wait_state("j2", "SUCCEEDED");
    wait_state("j1", "RUNNING");
    cr_assert_eq(get("/v1/jobs/j2", &j), 200);
    sum = json_object_get(j, "summary");
    cr_assert(json_is_object(sum));
    cr_assert_eq(json_object_size(sum), 6);
    cr_assert_eq(json_real_value(json_object_get(sum, "test_accuracy")), 0.875);
    cr_assert_eq(json_integer_value(json_object_get(sum, "bytes_sent")), 12);
    cr_assert_eq(json_integer_value(json_object_get(sum, "bytes_received")),
                 14);
    cr_assert_eq(json_integer_value(json_object_get(sum, "dense_bytes")), 100);
    cr_assert_eq(json_integer_value(json_object_get(sum, "iterations")), 1000);
    cr_assert_str_eq(
        str(json_array_get(json_object_get(j, "tasks"), 1), "state"), "EXITED");
    json_decref(j);
    cr_assert_eq(get("/v1/jobs/j2/events?since=1", &j), 200);
    {
        json_t *ev = json_object_get(j, "events");
        cr_assert_eq(json_array_size(ev), 2, "placed, succeeded");
        cr_assert_eq(
            json_integer_value(json_object_get(json_array_get(ev, 0), "seq")),
            2);
        cr_assert_str_eq(str(json_array_get(ev, 1), "type"), "succeeded");
    }
    json_decref(j);
}

Test(sched_daemon, restarts_then_fails_per_max_restarts)
{
    json_t *j = NULL;

    start_sched(&fls, NULL);
    add_node("n1", 4, 30000);
    cr_assert_eq(post("name: f\nmodel: mlp\nmax_restarts: 1\n", NULL), 201);
    wait_state("j1", "RUNNING");
    agent_exit("flps:task:j1:0:worker-0", 3, NULL);
    for (int i = 0; i < 100; i++) {
        if (strcmp(S("HGET flps:job:j1 attempt", NULL, NULL), "1") == 0 &&
            strcmp(S("HGET flps:job:j1 state", NULL, NULL), "RUNNING") == 0)
            break;
        sleep_ms(50);
    }
    cr_assert_eq(get("/v1/jobs/j1", &j), 200);
    cr_assert_eq(json_integer_value(json_object_get(j, "restarts")), 1);
    cr_assert_eq(json_integer_value(json_object_get(j, "attempt")), 1);
    cr_assert_str_eq(str(j, "reason"), "worker-0 on n1 exited with status 3");
    json_decref(j);
    agent_exit("flps:task:j1:1:worker-0", 1, NULL);
    wait_state("j1", "FAILED");
    cr_assert_eq(get("/v1/jobs/j1", &j), 200);
    cr_assert_str_eq(str(j, "reason"), "worker-0 on n1 exited with status 1");
    json_decref(j);
}

Test(sched_daemon, marks_a_node_lost_when_its_alive_key_expires)
{
    json_t *j = NULL;
    const char *state = "";

    start_sched(&fls, NULL);
    add_node("n1", 4, 1000);
    cr_assert_eq(post("name: x\nmodel: mlp\n", NULL), 201);
    wait_state("j1", "RUNNING");
    for (int i = 0; i < 60; i++) {
        cr_assert_eq(get("/v1/nodes", &j), 200);
        state = str(json_array_get(json_object_get(j, "nodes"), 0), "state");
        if (strcmp(state, "LOST") == 0)
            break;
        json_decref(j);
        j = NULL;
        sleep_ms(50);
    }
    cr_assert_str_eq(state, "LOST");
    json_decref(j);
    wait_state("j1", "FAILED");
    cr_assert_str_eq(S("HGET flps:job:j1 reason", NULL, NULL), "node n1 lost");
}

Test(sched_daemon, a_restarted_flsched_carries_on_without_placing_twice)
{
    const char *const args[] = {"--lease-ms", "1000", NULL};
    char tasks_before[4096], n1_before[4096];
    json_t *j = NULL;

    start_sched(&fls, args);
    add_node("n1", 3, 60000);
    cr_assert_eq(post("name: one\nmodel: mlp\nworkers: 2\n", NULL), 201);
    cr_assert_eq(post("name: two\nmodel: mlp\nworkers: 2\n", NULL), 201);
    wait_state("j1", "RUNNING");
    snprintf(tasks_before, sizeof(tasks_before), "%s",
             sorted("KEYS %s", "flps:task:*"));
    snprintf(n1_before, sizeof(n1_before), "%s",
             sorted("SMEMBERS %s", "flps:node:n1:tasks"));
    stop_sched(&fls, SIGKILL);
    start_sched(&fls, args);
    /* Wait out the dead leader's lease: the new one then schedules. */
    for (int i = 0; i < 60; i++) {
        cr_assert_eq(get("/healthz", &j), 200);
        if (json_is_true(json_object_get(j, "leader"))) {
            json_decref(j);
            j = NULL;
            break;
        }
        json_decref(j);
        j = NULL;
        sleep_ms(100);
    }
    sleep_ms(600); /* a few turns of the new leader's loop */
    cr_assert_str_eq(sorted("KEYS %s", "flps:task:*"), tasks_before,
                     "no task was placed again");
    cr_assert_str_eq(sorted("SMEMBERS %s", "flps:node:n1:tasks"), n1_before);
    cr_assert_eq(get("/v1/jobs/j1", &j), 200);
    cr_assert_str_eq(str(j, "state"), "RUNNING");
    cr_assert_eq(json_integer_value(json_object_get(j, "attempt")), 0);
    json_decref(j);
    cr_assert_eq(get("/v1/jobs/j2", &j), 200);
    cr_assert_str_eq(str(j, "state"), "QUEUED");
    json_decref(j);
    /* It finishes j1 and places j2 as the old one would have. */
    agent_exit("flps:task:j1:0:worker-0", 0, "{\"rank\":0}");
    agent_exit("flps:task:j1:0:worker-1", 0, "{\"rank\":1}");
    wait_state("j1", "SUCCEEDED");
    wait_state("j2", "RUNNING");
}

Test(sched_daemon, two_schedulers_elect_one_leader_and_the_other_takes_over)
{
    const char *const a_args[] = {"--lease-ms", "1000", "--id", "A", NULL};
    const char *const b_args[] = {"--lease-ms", "1000", "--id", "B", NULL};
    sched_proc b = {0};
    json_t *ha = NULL, *hb = NULL;
    int a_leads, b_leads;

    start_sched(&fls, a_args);
    sleep_ms(300);
    start_sched(&b, b_args);
    sleep_ms(500);
    cr_assert_eq(http(&fls, "GET", "/healthz", NULL, 0, NULL, &ha), 200);
    cr_assert_eq(http(&b, "GET", "/healthz", NULL, 0, NULL, &hb), 200);
    a_leads = json_is_true(json_object_get(ha, "leader"));
    b_leads = json_is_true(json_object_get(hb, "leader"));
    json_decref(ha);
    json_decref(hb);
    cr_assert_eq(a_leads, 1);
    cr_assert_eq(b_leads, 0);
    cr_assert_str_eq(S("GET flps:leader", NULL, NULL), "A");
    /* Both serve the API; only the leader places. */
    add_node("n1", 4, 60000);
    cr_assert_eq(
        http(&b, "POST", "/v1/jobs", "name: x\nmodel: mlp\n", 19, NULL, NULL),
        201);
    wait_state("j1", "RUNNING");
    stop_sched(&fls, SIGKILL);
    for (int i = 0; i < 40 && !b_leads; i++) {
        sleep_ms(100);
        cr_assert_eq(http(&b, "GET", "/healthz", NULL, 0, NULL, &hb), 200);
        b_leads = json_is_true(json_object_get(hb, "leader"));
        json_decref(hb);
    }
    cr_assert_eq(b_leads, 1, "B took over within the lease and a retry");
    cr_assert_str_eq(S("GET flps:leader", NULL, NULL), "B");
    stop_sched(&b, SIGTERM);
    cr_assert_str_eq(S("EXISTS flps:leader", NULL, NULL), "0",
                     "a leader that stops hands the lease back");
}

Test(sched_daemon, requires_the_bearer_token_except_for_health_and_metrics)
{
    const char *const args[] = {"--token-file", "/tmp/flps-test-token", NULL};
    FILE *f = fopen("/tmp/flps-test-token", "w");
    json_t *j = NULL;

    cr_assert_not_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    start_sched(&fls, args);
    cr_assert_eq(http(&fls, "GET", "/v1/jobs", NULL, 0, NULL, &j), 401);
    json_decref(j);
    cr_assert_eq(http(&fls, "GET", "/v1/jobs", NULL, 0, "Bearer wrong", NULL),
                 401);
    cr_assert_eq(http(&fls, "GET", "/v1/jobs", NULL, 0, "Bearer s3cret", NULL),
                 200);
    cr_assert_eq(http(&fls, "GET", "/healthz", NULL, 0, NULL, NULL), 200);
    cr_assert_eq(http(&fls, "GET", "/metrics", NULL, 0, NULL, NULL), 200);
    unlink("/tmp/flps-test-token");
}

Test(sched_daemon, serves_events_logs_plan_nodes_and_metrics)
{
    json_t *j = NULL;
    char next[64];

    start_sched(&fls, NULL);
    add_node("n1", 4, 60000);
    cr_assert_eq(post("name: x\nmodel: mlp\n", NULL), 201);
    wait_state("j1", "RUNNING");
    cr_assert_eq(get("/v1/jobs/j1/events", &j), 200);
    cr_assert_eq(json_array_size(json_object_get(j, "events")), 2);
    json_decref(j);
    cr_assert_eq(get("/v1/jobs/j1/events?since=x", NULL), 400);
    cr_assert_eq(get("/v1/jobs/j9/events", NULL), 404);
    S("XADD flps:job:j1:logs * task worker-0 line %s", "hello", NULL);
    S("XADD flps:job:j1:logs * task server-0 line %s", "world", NULL);
    cr_assert_eq(get("/v1/jobs/j1/logs?limit=1", &j), 200);
    cr_assert_eq(json_array_size(json_object_get(j, "lines")), 1);
    cr_assert_str_eq(
        str(json_array_get(json_object_get(j, "lines"), 0), "line"), "hello");
    snprintf(next, sizeof(next), "/v1/jobs/j1/logs?after=%s", str(j, "next"));
    json_decref(j);
    cr_assert_eq(get(next, &j), 200);
    cr_assert_eq(json_array_size(json_object_get(j, "lines")), 1);
    cr_assert_str_eq(
        str(json_array_get(json_object_get(j, "lines"), 0), "task"),
        "server-0");
    json_decref(j);
    cr_assert_eq(get("/v1/jobs/j1/plan", &j), 404);
    cr_assert_str_eq(str(j, "error"), "no plan yet");
    json_decref(j);
    S("HSET flps:job:j1:plan version 3 plan %s",
      "{\"layers\":[],\"predicted_iteration_seconds\":0.5}", NULL);
    cr_assert_eq(get("/v1/jobs/j1/plan", &j), 200);
    cr_assert_eq(json_integer_value(json_object_get(j, "version")), 3);
    json_decref(j);
    cr_assert_eq(get("/v1/nodes", &j), 200);
    {
        json_t *n = json_array_get(json_object_get(j, "nodes"), 0);
        json_t *used = json_object_get(n, "used");

        cr_assert_str_eq(str(n, "name"), "n1");
        cr_assert_eq(json_integer_value(json_object_get(n, "cpus")), 4);
        cr_assert_eq(json_integer_value(json_object_get(used, "cpus")), 2);
        cr_assert_eq(json_integer_value(json_object_get(used, "memory")),
                     (1LL << 30) + (512LL << 20));
    }
    json_decref(j);
    {
        CURL *c = curl_easy_init();
        buf b = {NULL, 0};
        char url[512];

        snprintf(url, sizeof(url), "%s/metrics", fls.base);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        cr_assert_eq(curl_easy_perform(c), CURLE_OK);
        curl_easy_cleanup(c);
        cr_assert_not_null(strstr(b.p, "flsched_jobs{state=\"RUNNING\"} 1"),
                           "%s", b.p);
        cr_assert_not_null(strstr(b.p, "flsched_queue_length 0"));
        cr_assert_not_null(strstr(b.p, "flsched_nodes{state=\"READY\"} 1"));
        cr_assert_not_null(strstr(b.p, "flsched_placements_total 1"));
        cr_assert_not_null(strstr(b.p, "flsched_leader 1"));
        cr_assert_not_null(
            strstr(b.p, "flsched_api_requests_total{code=\"404\"} 2"), "%s",
            b.p);
        free(b.p);
    }
}

/* ---- compression: auto ---- */

/* A profile as flagent stores it from rank 0: fc1.weight is the last
 * gradient ready, so nothing hides it and the planner makes it sparse; the
 * small layers stay dense. */
static const char profile1[] =
    "{\"event\":\"profile\",\"iteration\":25,\"workers\":2,\"alpha\":0.0001,"
    "\"beta\":1e-09,\"layers\":["
    "{\"name\":\"fc1.weight\",\"numel\":200704,\"t_backward\":0.000312},"
    "{\"name\":\"fc1.bias\",\"numel\":256,\"t_backward\":0.000004},"
    "{\"name\":\"fc2.weight\",\"numel\":2560,\"t_backward\":0.00002},"
    "{\"name\":\"fc2.bias\",\"numel\":10,\"t_backward\":0.000001}]}";

/* The same layers measured again: a different profile. */
static const char profile2[] =
    "{\"event\":\"profile\",\"iteration\":25,\"workers\":2,\"alpha\":0.0002,"
    "\"beta\":2e-09,\"layers\":["
    "{\"name\":\"fc1.weight\",\"numel\":200704,\"t_backward\":0.000401},"
    "{\"name\":\"fc1.bias\",\"numel\":256,\"t_backward\":0.000005},"
    "{\"name\":\"fc2.weight\",\"numel\":2560,\"t_backward\":0.00003},"
    "{\"name\":\"fc2.bias\",\"numel\":10,\"t_backward\":0.000002}]}";

/* The plan of id once its version is want (about 5 s at most); the
 * caller decrefs. */
static json_t *wait_plan(const char *id, long long want)
{
    char path[64];
    long long last = 0;

    snprintf(path, sizeof(path), "/v1/jobs/%s/plan", id);
    for (int i = 0; i < 100; i++) {
        json_t *j = NULL;

        if (get(path, &j) == 200) {
            last = json_integer_value(json_object_get(j, "version"));
            if (last == want)
                return j;
        }
        json_decref(j);
        sleep_ms(50);
    }
    cr_assert_fail("job %s: plan version %lld, not %lld", id, last, want);
    return NULL;
}

/* The message of the last event of type in id's events, or "" (static). */
static const char *last_event(const char *id, const char *type, int *count)
{
    static char msg[512];
    char path[64];
    json_t *j = NULL, *e;
    size_t i;

    msg[0] = '\0';
    *count = 0;
    snprintf(path, sizeof(path), "/v1/jobs/%s/events", id);
    cr_assert_eq(get(path, &j), 200);
    json_array_foreach(json_object_get(j, "events"), i, e)
    {
        if (strcmp(str(e, "type"), type) == 0) {
            snprintf(msg, sizeof(msg), "%s", str(e, "message"));
            (*count)++;
        }
    }
    json_decref(j);
    return msg;
}

static void set_profile(const char *id, const char *profile)
{
    redisReply *r = NULL;

    cr_assert_eq(rconn_cmd(rc, &r,
                           "HSET flps:job:%s profile %s profile_attempt 0", id,
                           profile),
                 FLPS_OK);
    freeReplyObject(r);
}

Test(sched_daemon, plans_a_profile_of_an_auto_job_and_a_new_profile_again)
{
    static const char *const names[] = {"fc1.weight", "fc1.bias", "fc2.weight",
                                        "fc2.bias"};
    json_t *j = NULL, *layers, *l;
    const char *msg;
    int n = 0;
    size_t i;

    start_sched(&fls, NULL);
    add_node("n1", 8, 60000);
    cr_assert_eq(post("name: auto\nmodel: mlp\ncompression: auto\n", NULL),
                 201);
    cr_assert_eq(
        post("name: plain\nmodel: mlp\ncompression: topk:0.01\n", NULL), 201);
    wait_state("j1", "RUNNING");
    wait_state("j2", "RUNNING");
    cr_assert_eq(get("/v1/jobs/j1/plan", NULL), 404, "no profile, no plan");

    set_profile("j1", profile1);
    set_profile("j2", profile1);
    j = wait_plan("j1", 1);
    layers = json_object_get(j, "layers");
    cr_assert_eq(json_array_size(layers), 4);
    json_array_foreach(layers, i, l)
    {
        cr_assert_str_eq(str(l, "name"), names[i], "layout order");
        cr_assert(json_is_integer(json_object_get(l, "numel")));
        cr_assert(json_is_number(json_object_get(l, "density")));
    }
    cr_assert_str_eq(str(json_array_get(layers, 0), "codec"), "topk");
    cr_assert_str_eq(str(json_array_get(layers, 3), "codec"), "dense");
    cr_assert(
        json_is_number(json_object_get(j, "predicted_iteration_seconds")));
    cr_assert(json_is_number(json_object_get(j, "dense_iteration_seconds")));
    cr_assert_leq(
        json_number_value(json_object_get(j, "predicted_iteration_seconds")),
        json_number_value(json_object_get(j, "dense_iteration_seconds")));
    json_decref(j);
    cr_assert_neq(S("HGET flps:job:%s:plan created_at", "j1", NULL)[0], '\0');
    msg = last_event("j1", "plan", &n);
    cr_assert_eq(n, 1, "one event per plan");
    cr_assert_eq(strncmp(msg, "plan v1: 1 of 4 layers sparse, predicted ", 41),
                 0, "%s", msg);
    cr_assert_not_null(strstr(msg, " ms dense"), "%s", msg);

    /* Turns that see the same profile plan nothing more. */
    sleep_ms(600);
    last_event("j1", "plan", &n);
    cr_assert_eq(n, 1, "the same profile was planned again");
    cr_assert_str_eq(S("HGET flps:job:%s:plan version", "j1", NULL), "1");
    cr_assert_eq(get("/v1/jobs/j2/plan", NULL), 404,
                 "a job not asking for auto gets no plan");

    set_profile("j1", profile2);
    j = wait_plan("j1", 2);
    cr_assert_eq(json_array_size(json_object_get(j, "layers")), 4);
    json_decref(j);
    msg = last_event("j1", "plan", &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(strncmp(msg, "plan v2: ", 9), 0, "%s", msg);
}

Test(sched_daemon, a_malformed_profile_gives_an_event_and_no_plan)
{
    static const char empty[] =
        "{\"event\":\"profile\",\"iteration\":25,\"workers\":2,"
        "\"alpha\":0.0001,\"beta\":1e-09,\"layers\":[]}";
    json_t *j = NULL;
    const char *msg = "";
    int n = 0;

    start_sched(&fls, NULL);
    add_node("n1", 4, 60000);
    cr_assert_eq(post("name: auto\nmodel: mlp\ncompression: auto\n", NULL),
                 201);
    wait_state("j1", "RUNNING");
    set_profile("j1", empty);
    for (int i = 0; i < 100 && n == 0; i++) {
        sleep_ms(50);
        msg = last_event("j1", "plan_error", &n);
    }
    cr_assert_eq(n, 1, "no plan_error event");
    cr_assert_eq(strncmp(msg, "no plan from the workers' profile: ", 35), 0,
                 "%s", msg);
    cr_assert_gt(strlen(msg), 35, "the reason is given");
    cr_assert_eq(get("/v1/jobs/j1/plan", &j), 404);
    cr_assert_str_eq(str(j, "error"), "no plan yet");
    json_decref(j);
    sleep_ms(600);
    last_event("j1", "plan_error", &n);
    cr_assert_eq(n, 1, "the same profile was refused again");
    wait_state("j1", "RUNNING");

    /* A good profile afterwards is planned as version 1. */
    set_profile("j1", profile1);
    j = wait_plan("j1", 1);
    json_decref(j);
    wait_state("j1", "RUNNING");
}

static double mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

Test(sched_daemon, a_deeply_nested_body_is_refused_at_once_and_healthz_answers)
{
    size_t n = ((size_t)1 << 20) - 64;
    char *deep = malloc(n + 1), before[16384];
    json_t *j = NULL;
    double t0;

    cr_assert_not_null(deep);
    memset(deep, '[', n);
    deep[n] = '\0';
    start_sched(&fls, NULL);
    add_node("n1", 8, 30000);
    wait_leader(&fls);
    snprintf(before, sizeof(before), "%s", sorted("KEYS %s", "flps:*"));
    t0 = mono_s();
    cr_assert_eq(http(&fls, "POST", "/v1/jobs", deep, n, NULL, &j), 400);
    cr_assert_lt(mono_s() - t0, 2.0, "the refusal took %.2f s", mono_s() - t0);
    cr_assert_neq(strstr(str(j, "error"), "nests lists or mappings"), NULL,
                  "%s", str(j, "error"));
    cr_assert_eq(json_integer_value(json_object_get(j, "line")), 1);
    json_decref(j);
    t0 = mono_s();
    cr_assert_eq(get("/healthz", NULL), 200);
    cr_assert_lt(mono_s() - t0, 1.0);
    cr_assert_str_eq(sorted("KEYS %s", "flps:*"), before,
                     "a refused job leaves Redis as it was");
    free(deep);
}

Test(sched_daemon, an_unauthenticated_submission_is_refused_before_parsing)
{
    const char *const args[] = {"--token-file", "/tmp/flps-test-token2", NULL};
    FILE *f = fopen("/tmp/flps-test-token2", "w");
    json_t *j = NULL;

    cr_assert_not_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    start_sched(&fls, args);
    /* A broken body without the token is 401, not a parse error. */
    cr_assert_eq(http(&fls, "POST", "/v1/jobs", "[[[[", 4, NULL, &j), 401);
    json_decref(j);
    cr_assert_eq(http(&fls, "POST", "/v1/jobs", "[[[[", 4, "Bearer s3cret", &j),
                 400);
    json_decref(j);
    unlink("/tmp/flps-test-token2");
}

Test(sched_daemon, a_failed_tasks_error_line_ends_the_jobs_reason)
{
    json_t *j = NULL;

    start_sched(&fls, NULL);
    add_node("n1", 4, 30000);
    cr_assert_eq(post("name: f\nmodel: mlp\n", NULL), 201);
    wait_state("j1", "RUNNING");
    S("HSET flps:task:j1:0:worker-0 error %s", "flworker: out of memory", NULL);
    agent_exit("flps:task:j1:0:worker-0", 2, NULL);
    wait_state("j1", "FAILED");
    cr_assert_eq(get("/v1/jobs/j1", &j), 200);
    cr_assert_str_eq(str(j, "reason"), "worker-0 on n1 exited with status 2: "
                                       "flworker: out of memory");
    json_decref(j);
}

Test(sched_daemon, a_non_ascii_name_is_a_400_that_quotes_it_never_a_500)
{
    json_t *j = NULL;

    start_sched(&fls, NULL);
    add_node("n1", 8, 30000);
    cr_assert_eq(post("name: j\xc3\xb6\x62\nmodel: mlp\n", &j), 400);
    cr_assert_str_eq(str(j, "field"), "name");
    cr_assert_neq(
        strstr(str(j, "error"), "contains the non-ASCII character '\xc3\xb6'"),
        NULL, "%s", str(j, "error"));
    json_decref(j);
    /* An unknown key of non-ASCII bytes cut at 63 bytes is quoted too. */
    {
        char body[256];
        size_t n = 0;

        for (int i = 0; i < 40; i++)
            n += (size_t)snprintf(body + n, sizeof(body) - n, "\xc3\xb6");
        snprintf(body + n, sizeof(body) - n, ": 1\nname: a\nmodel: mlp\n");
        cr_assert_eq(post(body, &j), 400);
        cr_assert(json_is_string(json_object_get(j, "error")));
        cr_assert(json_is_string(json_object_get(j, "field")));
        json_decref(j);
    }
}

Test(sched_daemon, a_binary_or_non_utf8_body_is_a_400_that_says_so)
{
    static const char gz[] = "\x1f\x8b\x08\0\0\0\0\0\0\x03";
    json_t *j = NULL;

    start_sched(&fls, NULL);
    add_node("n1", 8, 30000);
    cr_assert_eq(http(&fls, "POST", "/v1/jobs", gz, sizeof(gz) - 1, NULL, &j),
                 400);
    cr_assert_str_eq(str(j, "error"), "the job file is binary, not YAML or "
                                      "JSON text (byte 0 is 0x1F)");
    cr_assert(json_is_null(json_object_get(j, "line")));
    json_decref(j);
    cr_assert_eq(post("name: a\nmodel: mlp\n# caf\xe9\n", &j), 400);
    cr_assert(strstr(str(j, "error"), "line 3, column 6: byte 24 (0xE9) is "
                                      "not UTF-8; the job file must be UTF-8 "
                                      "text") != NULL,
              "%s", str(j, "error"));
    cr_assert_eq(json_integer_value(json_object_get(j, "line")), 3);
    json_decref(j);
}

Test(sched_daemon, a_cpu_share_that_would_round_to_nothing_is_refused)
{
    char before[16384];
    json_t *j = NULL;

    start_sched(&fls, NULL);
    add_node("n1", 1, 30000);
    wait_leader(&fls);
    snprintf(before, sizeof(before), "%s", sorted("KEYS %s", "flps:*"));
    expect_refusal("name: a\nmodel: mlp\nworkers: 1000\n"
                   "cpus_per_worker: 0.0001\n",
                   400, "cpus_per_worker", 4);
    /* The smallest share counts: 1000 workers need 1 CPU, the server
     * another, and the node has 1. */
    cr_assert_eq(post("name: a\nmodel: mlp\nworkers: 1000\n"
                      "cpus_per_worker: 0.001\ncpus_per_server: 0.001\n"
                      "memory_per_worker: 1\nmemory_per_server: 1\n",
                      &j),
                 422);
    cr_assert_str_eq(str(j, "field"), "workers");
    json_decref(j);
    cr_assert_str_eq(sorted("KEYS %s", "flps:*"), before,
                     "a refused job leaves Redis as it was");
}

/* Run flsched with argv (NULL-terminated, after the binary); its exit
 * status, and its stderr in err. */
static int run_sched(const char *const *args, char *err, size_t len)
{
    int pfd[2], status = 0;
    char *argv[16];
    int a = 0;
    pid_t pid;
    size_t n = 0;
    ssize_t got;

    cr_assert_eq(pipe(pfd), 0);
    argv[a++] = (char *)FLPS_BIN_DIR "/flsched";
    for (int i = 0; args[i] != NULL && a < 15; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], STDERR_FILENO);
        close(pfd[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    while (n < len - 1 && (got = read(pfd[0], err + n, len - 1 - n)) > 0)
        n += (size_t)got;
    err[n] = '\0';
    close(pfd[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(sched_daemon, refuses_to_listen_on_every_interface_unless_asked)
{
    static const char *const wild[] = {"0.0.0.0:0", ":0", "*:0", "[::]:0"};
    const char *const any[] = {"--listen", "0.0.0.0:0", "--listen-any", NULL};
    char err[2048];
    json_t *j = NULL;

    for (size_t i = 0; i < sizeof(wild) / sizeof(wild[0]); i++) {
        const char *const args[] = {"--redis", srv.url, "--listen", wild[i],
                                    NULL};

        cr_assert_eq(run_sched(args, err, sizeof(err)), 2, "%s", wild[i]);
        cr_assert_neq(strstr(err, "listens on every interface"), NULL, "%s",
                      err);
        cr_assert_neq(strstr(err, "add --listen-any"), NULL, "%s", err);
    }
    cr_assert_str_eq(sorted("KEYS %s", "flps:*"), "",
                     "a refused start writes nothing");
    start_sched(&fls, any);
    cr_assert_eq(strncmp(fls.base, "http://0.0.0.0:", 15), 0, "%s", fls.base);
    cr_assert_eq(get("/healthz", &j), 200);
    json_decref(j);
}

/* ---- slow and many clients against the real daemon ---- */

static int dial_sched(const sched_proc *p)
{
    struct sockaddr_in a;
    const char *colon = strrchr(p->base, ':');
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_geq(fd, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* GET /healthz on a raw socket: the status answered (0: none) and, in
 * *reset, whether the connection was reset instead of closed. */
static int raw_healthz(const sched_proc *p, int *reset)
{
    static const char req[] =
        "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    char ans[1024];
    size_t len = 0;
    int fd = dial_sched(p), status = 0;

    *reset = 0;
    if (fd < 0)
        return 0;
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == sizeof(req) - 1) {
        for (;;) {
            struct pollfd pf = {fd, POLLIN, 0};
            ssize_t n;

            if (poll(&pf, 1, 10000) <= 0)
                break;
            n = recv(fd, ans + len, sizeof(ans) - 1 - len, 0);
            if (n < 0)
                *reset = 1;
            if (n <= 0 || (len += (size_t)n) == sizeof(ans) - 1)
                break;
        }
    }
    ans[len] = '\0';
    if (strncmp(ans, "HTTP/1.1 ", 9) == 0)
        status = atoi(ans + 9);
    close(fd);
    return status;
}

typedef struct par_req {
    pthread_barrier_t *go;
    int status, reset;
} par_req;

static void *par_main(void *arg)
{
    par_req *q = arg;

    pthread_barrier_wait(q->go);
    q->status = raw_healthz(&fls, &q->reset);
    return NULL;
}

Test(sched_daemon, slow_clients_do_not_hold_the_api_and_a_burst_is_all_answered,
     .timeout = 120)
{
    enum { SLOW = 64, BURST = 200 };
    int slow[SLOW], reset;
    static par_req q[BURST];
    pthread_t th[BURST];
    pthread_barrier_t go;
    json_t *j = NULL;
    double t0;

    start_sched(&fls, NULL);
    /* 64 clients that each sent part of a request and go on a byte at a
     * time: they held every connection slot for ever. */
    for (int i = 0; i < SLOW; i++) {
        slow[i] = dial_sched(&fls);
        cr_assert_geq(slow[i], 0);
        cr_assert_eq(
            send(slow[i], "GET /healthz HTTP/1.1\r\nX-A: ", 29, MSG_NOSIGNAL),
            29);
    }
    for (int k = 0; k < 3; k++) {
        sleep_ms(500);
        for (int i = 0; i < SLOW; i++)
            send(slow[i], "a", 1, MSG_NOSIGNAL);
    }
    t0 = mono_s();
    cr_assert_eq(get("/healthz", &j), 200);
    cr_assert_lt(mono_s() - t0, 2.0, "healthz took %.2f s", mono_s() - t0);
    json_decref(j);
    cr_assert_eq(raw_healthz(&fls, &reset), 200);
    /* 200 at once, beside the slow ones: every one gets an answer. */
    pthread_barrier_init(&go, NULL, BURST);
    for (int i = 0; i < BURST; i++) {
        q[i] = (par_req){&go, 0, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, par_main, &q[i]), 0);
    }
    for (int i = 0; i < BURST; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < BURST; i++) {
        cr_assert(q[i].status == 200 || q[i].status == 503,
                  "request %d got no HTTP answer (%d)", i, q[i].status);
        cr_assert_not(q[i].reset, "request %d was reset", i);
    }
    for (int i = 0; i < SLOW; i++)
        close(slow[i]);
    add_node("n1", 4, 30000);
    cr_assert_eq(post("name: f\nmodel: mlp\n", NULL), 201);
    wait_state("j1", "RUNNING");
    S("HSET flps:task:j1:0:worker-0 error %s", "flworker: out of memory", NULL);
    agent_exit("flps:task:j1:0:worker-0", 2, NULL);
    wait_state("j1", "FAILED");
    cr_assert_eq(get("/v1/jobs/j1", &j), 200);
    cr_assert_str_eq(str(j, "reason"), "worker-0 on n1 exited with status 2: "
                                       "flworker: out of memory");
    json_decref(j);
}

Test(sched_daemon, info_gives_its_version_redis_and_what_each_agent_published)
{
    json_t *o = NULL, *redis, *nodes, *n1, *n2, *facts;

    start_sched(&fls, NULL);
    add_node("n1", 4, 30000);
    add_node("n2", 2, 30000);
    S("HSET flps:node:%s:facts reported_at 1.5 clock_offset -0.25 "
      "dataset_dir /d dataset_missing x.gz rdma_devices 0 memlock -1",
      "n1", NULL);
    cr_assert_eq(get("/v1/info", &o), 200);
    cr_assert(json_is_string(json_object_get(o, "version")));
    cr_assert(json_is_number(json_object_get(o, "time")));
    redis = json_object_get(o, "redis");
    cr_assert(json_is_true(json_object_get(redis, "ok")));
    cr_assert_gt(strlen(str(redis, "version")), 0);
    cr_assert_lt(
        fabs(json_number_value(json_object_get(redis, "clock_offset"))), 0.5,
        "one machine, one clock");
    nodes = json_object_get(o, "nodes");
    cr_assert_eq(json_array_size(nodes), 2);
    n1 = json_array_get(nodes, 0);
    n2 = json_array_get(nodes, 1);
    cr_assert_str_eq(str(n1, "name"), "n1");
    cr_assert(json_is_true(json_object_get(n1, "alive")));
    facts = json_object_get(n1, "facts");
    cr_assert_eq(json_number_value(json_object_get(facts, "clock_offset")),
                 -0.25);
    cr_assert_eq(json_number_value(json_object_get(facts, "memlock")), -1);
    cr_assert_eq(json_number_value(json_object_get(facts, "rdma_devices")), 0);
    cr_assert_str_eq(str(facts, "dataset_missing"), "x.gz");
    cr_assert(json_is_null(json_object_get(n2, "facts")),
              "a node whose agent published nothing");
    json_decref(o);
    /* Redis gone: still an answer, saying so. */
    test_redis_stop(&srv);
    cr_assert_eq(get("/v1/info", &o), 200);
    redis = json_object_get(o, "redis");
    cr_assert(json_is_false(json_object_get(redis, "ok")));
    cr_assert(json_is_string(json_object_get(redis, "error")));
    cr_assert_null(json_object_get(o, "nodes"));
    json_decref(o);
}
