/* flagent against a real redis-server, running real flps and flworker
 * processes: the desired state is written into Redis as flsched would
 * write it, and the test reads back what the agent reports. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_fixture.h"
#include "scheduler/rconn.h"

/* 2 workers and 1 server on the synthetic data set: about a second. */
static const char quick_job[] = "name: agent-test\n"
                                "model: mlp\n"
                                "dataset: synthetic\n"
                                "workers: 2\n"
                                "servers: 1\n"
                                "iterations: 30\n"
                                "batch_size: 16\n"
                                "eval_every: 0\n";

/* The same job, long enough to be running whenever the test looks. */
static const char long_job[] = "name: agent-long\n"
                               "model: mlp\n"
                               "dataset: synthetic\n"
                               "workers: 2\n"
                               "servers: 1\n"
                               "iterations: 10000000\n"
                               "batch_size: 16\n"
                               "eval_every: 0\n";

typedef struct fixture {
    int used; /* fx_init ran and fx_fini did not */
    test_redis srv;
    rconn *rc;
    pid_t agent;
    char dir[64];
    char log[128];
    char work[128];
    char bin_dir[128]; /* FLPS_BIN_DIR for flagent, "" to leave it */
} fixture;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#define WAIT_UNTIL(cond, secs)                                                 \
    do {                                                                       \
        double until_ = now_s() + (secs);                                      \
        while (!(cond) && now_s() < until_)                                    \
            sleep_ms(50);                                                      \
    } while (0)

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf;
    long n;

    if (f == NULL)
        return strdup("");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = '\0';
    fclose(f);
    return buf;
}

static int count_in_file(const char *path, const char *needle)
{
    char *text = slurp(path), *p = text;
    int k = 0;

    while ((p = strstr(p, needle)) != NULL) {
        k++;
        p += strlen(needle);
    }
    free(text);
    return k;
}

/* Fail with the agent's log attached: most failures are explained there. */
static void fail_with_log(fixture *fx, const char *fmt, ...)
{
    char msg[1024];
    char *log = slurp(fx->log);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cr_log_error("flagent's log:\n%s", log);
    free(log);
    cr_assert_fail("%s", msg);
}

#define CHECK(fx, cond, ...)                                                   \
    do {                                                                       \
        if (!(cond))                                                           \
            fail_with_log((fx), __VA_ARGS__);                                  \
    } while (0)

/* ---- Redis ---- */

/* HGET into buf; 1 when the field exists. */
static int hget(fixture *fx, const char *key, const char *field, char *buf,
                size_t len)
{
    redisReply *r = NULL;
    int found = 0;

    if (rconn_cmd(fx->rc, &r, "HGET %s %s", key, field) != FLPS_OK)
        return 0;
    if (r->type == REDIS_REPLY_STRING) {
        snprintf(buf, len, "%s", r->str);
        found = 1;
    }
    freeReplyObject(r);
    return found;
}

static int hget_is(fixture *fx, const char *key, const char *field,
                   const char *want)
{
    char buf[4096];
    return hget(fx, key, field, buf, sizeof(buf)) && strcmp(buf, want) == 0;
}

static long long integer_cmd(fixture *fx, const char *fmt, const char *key)
{
    redisReply *r = NULL;
    long long v = -99;

    if (rconn_cmd(fx->rc, &r, fmt, key) != FLPS_OK)
        return -99;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Check a command worked and free its reply (*r is read after the call:
 * the reply must not be an argument evaluated before it). */
static void must(fixture *fx, flps_err err, redisReply **r)
{
    cr_assert_eq(err, FLPS_OK, "Redis: %s", rconn_error(fx->rc));
    freeReplyObject(*r);
    *r = NULL;
}

/* Whether the job's log stream has a line of task holding text. */
static int logs_have(fixture *fx, const char *job, const char *task,
                     const char *text)
{
    redisReply *r = NULL;
    char key[128];
    int found = 0;

    snprintf(key, sizeof(key), "flps:job:%s:logs", job);
    if (rconn_cmd(fx->rc, &r, "XRANGE %s - +", key) != FLPS_OK)
        return 0;
    for (size_t i = 0; i < r->elements && !found; i++) {
        redisReply *f = r->element[i]->element[1];
        found = f->elements == 4 && strcmp(f->element[1]->str, task) == 0 &&
                strstr(f->element[3]->str, text) != NULL;
    }
    freeReplyObject(r);
    return found;
}

/* The job hash and the task hashes of one attempt, all on node n1, and
 * the desired set listing them: what a placement by flsched writes. */
static void place_job(fixture *fx, const char *id, const char *spec,
                      int servers, int workers)
{
    redisReply *r = NULL;
    char key[128], tasks[64];

    snprintf(key, sizeof(key), "flps:job:%s", id);
    must(fx,
         rconn_cmd(fx->rc, &r,
                   "HSET %s id %s name agent-test state RUNNING attempt 0 "
                   "servers %d workers %d spec %s",
                   key, id, servers, workers, spec),
         &r);
    snprintf(tasks, sizeof(tasks), "flps:job:%s:tasks", id);
    for (int i = 0; i < servers + workers; i++) {
        const char *role = i < servers ? "server" : "worker";
        int index = i < servers ? i : i - servers;
        snprintf(key, sizeof(key), "flps:task:%s:0:%s-%d", id, role, index);
        must(fx,
             rconn_cmd(fx->rc, &r,
                       "HSET %s job %s attempt 0 role %s index %d node n1 "
                       "state ASSIGNED",
                       key, id, role, index),
             &r);
        must(fx, rconn_cmd(fx->rc, &r, "SADD %s %s", tasks, key), &r);
        must(fx, rconn_cmd(fx->rc, &r, "SADD flps:node:n1:tasks %s", key), &r);
    }
}

static void task_key(char *buf, size_t len, const char *job, const char *t)
{
    snprintf(buf, len, "flps:task:%s:0:%s", job, t);
}

/* ---- flagent ---- */

static pid_t spawn(const char *log, const char *bin_dir, char *const argv[])
{
    pid_t pid = fork();

    if (pid == 0) {
        if (bin_dir[0] != '\0')
            setenv("FLPS_BIN_DIR", bin_dir, 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void agent_start_url(fixture *fx, const char *url, const char *hb)
{
    char *argv[] = {FLPS_BIN_DIR "/flagent",
                    "--redis",
                    (char *)url,
                    "--name",
                    "n1",
                    "--cpus",
                    "8",
                    "--memory",
                    "16Gi",
                    "--gpus",
                    "2",
                    "--work-dir",
                    fx->work,
                    "--heartbeat",
                    (char *)hb,
                    NULL};

    fx->agent = spawn(fx->log, fx->bin_dir, argv);
    cr_assert_gt(fx->agent, 0);
}

static void agent_start(fixture *fx, const char *hb)
{
    agent_start_url(fx, fx->srv.url, hb);
}

static int agent_registered(fixture *fx)
{
    return integer_cmd(fx, "SISMEMBER flps:nodes %s", "n1") == 1 &&
           hget_is(fx, "flps:node:n1", "state", "READY");
}

/* Stop flagent with sig; its exit status, or -1 if it did not end within
 * secs seconds (it is then killed). */
static int agent_stop(fixture *fx, int sig, double secs)
{
    int status = -1;
    double until = now_s() + secs;

    if (fx->agent <= 0)
        return -1;
    kill(fx->agent, sig);
    while (now_s() < until) {
        if (waitpid(fx->agent, &status, WNOHANG) == fx->agent) {
            fx->agent = 0;
            return status;
        }
        sleep_ms(50);
    }
    kill(fx->agent, SIGKILL);
    waitpid(fx->agent, NULL, 0);
    fx->agent = 0;
    return -1;
}

static void fx_init(fixture *fx, int with_redis)
{
    memset(fx, 0, sizeof(*fx));
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/flagent-test-XXXXXX");
    cr_assert_not_null(mkdtemp(fx->dir));
    /* Passable: as root, each job's tasks run as a uid of their own. */
    cr_assert_eq(chmod(fx->dir, 0711), 0);
    snprintf(fx->log, sizeof(fx->log), "%s/flagent.log", fx->dir);
    snprintf(fx->work, sizeof(fx->work), "%s/work", fx->dir);
    fx->used = 1;
    if (with_redis) {
        cr_assert_eq(test_redis_start(&fx->srv), 0,
                     "redis-server did not start");
        cr_assert_eq(rconn_create(fx->srv.url, 2000, &fx->rc), FLPS_OK);
    }
}

static void fx_fini(fixture *fx)
{
    char cmdline[160], *report = NULL;

    if (!fx->used)
        return;
    fx->used = 0;
    if (fx->srv.pid > 0)
        kill(fx->srv.pid, SIGCONT); /* in case a test stopped it */
    if (fx->agent > 0)
        agent_stop(fx, SIGTERM, 15);
    /* In the sanitizer build, flagent's reports land in its log. */
    if (count_in_file(fx->log, "Sanitizer") > 0 ||
        count_in_file(fx->log, "runtime error:") > 0)
        report = slurp(fx->log);
    rconn_destroy(fx->rc);
    test_redis_stop(&fx->srv);
    snprintf(cmdline, sizeof(cmdline), "rm -rf %s %s", fx->dir, fx->srv.dir);
    if (system(cmdline) != 0)
        cr_log_warn("could not remove %s", fx->dir);
    if (report != NULL) {
        cr_log_error("flagent's log:\n%s", report);
        free(report);
        cr_assert_fail("a sanitizer report in flagent's log");
    }
}

static int pid_runs(int pid)
{
    char path[64], stat[512] = "";
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    if (fgets(stat, sizeof(stat), f) == NULL)
        stat[0] = '\0';
    fclose(f);
    /* "PID (comm) S ...": a zombie does not run. */
    return stat[0] != '\0' && strstr(stat, ") Z ") == NULL;
}

/* ---- Tests ---- */

/* One fixture per test process (Criterion runs each test in its own):
 * the suite's fini cleans up after a failed assertion too, so no agent,
 * flps or redis-server outlives its test. */
static fixture fx;

static void fx_teardown(void)
{
    fx_fini(&fx);
}

TestSuite(agent, .fini = fx_teardown);

Test(agent, registers_its_node_and_keeps_it_alive)
{
    char buf[64], first[64];
    long long pttl;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    CHECK(&fx, agent_registered(&fx), "the node did not register");
    cr_assert(hget_is(&fx, "flps:node:n1", "name", "n1"));
    cr_assert(hget_is(&fx, "flps:node:n1", "address", "127.0.0.1"));
    cr_assert(hget_is(&fx, "flps:node:n1", "cpus", "8"));
    cr_assert(hget_is(&fx, "flps:node:n1", "memory", "17179869184"));
    cr_assert(hget_is(&fx, "flps:node:n1", "gpus", "2"));
    cr_assert(hget(&fx, "flps:node:n1", "registered_at", buf, sizeof(buf)));
    cr_assert_gt(atof(buf), 1.7e9, "registered_at is Unix seconds: %s", buf);
    cr_assert(
        hget(&fx, "flps:node:n1", "last_heartbeat", first, sizeof(first)));
    {
        redisReply *r = NULL;
        cr_assert_eq(rconn_cmd(fx.rc, &r, "GET flps:node:n1:alive"), FLPS_OK);
        cr_assert_str_eq(r->str, "1");
        freeReplyObject(r);
    }
    pttl = integer_cmd(&fx, "PTTL %s", "flps:node:n1:alive");
    cr_assert(pttl > 1000 && pttl <= 2000,
              "the alive key lives 2 heartbeats (2000 ms), has %lld", pttl);
    /* What flsubmit doctor checks of the node. */
    cr_assert(
        hget(&fx, "flps:node:n1:facts", "clock_offset", buf, sizeof(buf)));
    cr_assert_lt(fabs(atof(buf)), 0.5, "one clock, offset %s", buf);
    cr_assert(hget_is(&fx, "flps:node:n1:facts", "dataset_dir",
                      "/usr/share/datasets/fashion-mnist"));
    cr_assert(
        hget(&fx, "flps:node:n1:facts", "rdma_devices", buf, sizeof(buf)));
    cr_assert(hget(&fx, "flps:node:n1:facts", "memlock", buf, sizeof(buf)) &&
              (atoll(buf) == -1 || atoll(buf) > 0));
    pttl = integer_cmd(&fx, "PTTL %s", "flps:node:n1:facts");
    cr_assert(pttl > 0 && pttl <= 4000, "the facts expire with the agent");
    /* Heartbeats move last_heartbeat and keep the key alive. */
    WAIT_UNTIL(hget(&fx, "flps:node:n1", "last_heartbeat", buf, sizeof(buf)) &&
                   strcmp(buf, first) != 0,
               3);
    cr_assert_gt(atof(buf), atof(first), "no heartbeat in 3 s");
    sleep_ms(3500);
    pttl = integer_cmd(&fx, "PTTL %s", "flps:node:n1:alive");
    CHECK(&fx, pttl > 0, "the alive key expired while flagent ran");
    CHECK(&fx, count_in_file(fx.log, "registered node n1") == 1,
          "expected one 'registered node n1' line");
    cr_assert_eq(agent_stop(&fx, SIGTERM, 15), 0, "flagent did not exit 0");
    fx_fini(&fx);
}

Test(agent, runs_servers_then_workers_and_reports_what_they_did, .timeout = 120)
{
    char s0[64], w0[64], w1[64], buf[4096], ep[256];
    redisReply *r = NULL;
    json_t *done;
    double t0, t1;
    int saw_listening = 0, saw_done = 0, saw_stderr = 0;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j1", quick_job, 1, 2);
    task_key(s0, sizeof(s0), "j1", "server-0");
    task_key(w0, sizeof(w0), "j1", "worker-0");
    task_key(w1, sizeof(w1), "j1", "worker-1");

    WAIT_UNTIL(hget_is(&fx, w0, "state", "EXITED") &&
                   hget_is(&fx, w1, "state", "EXITED"),
               60);
    CHECK(&fx,
          hget_is(&fx, w0, "state", "EXITED") &&
              hget_is(&fx, w1, "state", "EXITED"),
          "the workers did not finish within 60 s");

    /* The server: running, with the endpoint it printed. */
    cr_assert(hget_is(&fx, s0, "state", "RUNNING"));
    cr_assert(hget(&fx, s0, "endpoint", ep, sizeof(ep)));
    cr_assert_eq(strncmp(ep, "tcp://127.0.0.1:", 16), 0, "endpoint %s", ep);
    cr_assert(hget(&fx, s0, "pid", buf, sizeof(buf)) && atoi(buf) > 0);
    cr_assert(pid_runs(atoi(buf)), "flps is not running");
    cr_assert(hget(&fx, s0, "started_at", buf, sizeof(buf)) &&
              atof(buf) > 1.7e9);

    /* The workers: exit 0, pid and times, and their done events. */
    for (int i = 0; i < 2; i++) {
        const char *k = i ? w1 : w0;
        cr_assert(hget_is(&fx, k, "exit_code", "0"), "%s exit_code", k);
        cr_assert(hget_is(&fx, k, "signal", "0"), "%s signal", k);
        cr_assert(hget(&fx, k, "pid", buf, sizeof(buf)) && atoi(buf) > 0);
        cr_assert(hget(&fx, k, "started_at", buf, sizeof(buf)));
        t0 = atof(buf);
        cr_assert(hget(&fx, k, "exited_at", buf, sizeof(buf)));
        t1 = atof(buf);
        cr_assert(t0 > 1.7e9 && t1 >= t0, "%s ran from %f to %f", k, t0, t1);
        cr_assert(hget(&fx, k, "done", buf, sizeof(buf)), "%s: no done", k);
        done = json_loads(buf, 0, NULL);
        cr_assert_not_null(done, "done is not JSON: %s", buf);
        cr_assert_str_eq(json_string_value(json_object_get(done, "event")),
                         "done");
        cr_assert_eq(json_integer_value(json_object_get(done, "rank")), i);
        cr_assert_eq(json_integer_value(json_object_get(done, "iterations")),
                     30);
        cr_assert_gt(json_integer_value(json_object_get(done, "bytes_sent")),
                     0);
        json_decref(done);
    }

    /* Exits are queued in the order the processes ended. */
    cr_assert_eq(rconn_cmd(fx.rc, &r, "LRANGE flps:exits 0 -1"), FLPS_OK);
    cr_assert_eq(r->elements, 2, "flps:exits has %zu entries", r->elements);
    {
        char a[64], b[64];
        hget(&fx, r->element[0]->str, "exited_at", a, sizeof(a));
        hget(&fx, r->element[1]->str, "exited_at", b, sizeof(b));
        cr_assert(strcmp(r->element[0]->str, r->element[1]->str) != 0);
        cr_assert(strcmp(r->element[0]->str, w0) == 0 ||
                  strcmp(r->element[0]->str, w1) == 0);
        cr_assert(strcmp(r->element[1]->str, w0) == 0 ||
                  strcmp(r->element[1]->str, w1) == 0);
        cr_assert_leq(atof(a), atof(b), "exits out of order: %s then %s", a, b);
    }
    freeReplyObject(r);

    /* Every worker's bytes in its task hash, so the job's "sent" counts
     * them all. */
    cr_assert(hget(&fx, w0, "p_bytes_sent", buf, sizeof(buf)) &&
              atoll(buf) > 0);
    cr_assert(hget(&fx, w1, "p_bytes_sent", buf, sizeof(buf)) && atoll(buf) > 0,
              "worker-1 reports its bytes too");
    cr_assert(hget(&fx, w1, "p_dense_bytes", buf, sizeof(buf)) &&
              atoll(buf) > 0);
    /* A successful exit has no error line. */
    cr_assert(!hget(&fx, w0, "error", buf, sizeof(buf)) || buf[0] == '\0');

    /* Rank 0's progress in the job hash. */
    cr_assert(hget_is(&fx, "flps:job:j1", "p_iteration", "30"));
    cr_assert(hget(&fx, "flps:job:j1", "p_loss", buf, sizeof(buf)));
    cr_assert(hget(&fx, "flps:job:j1", "p_bytes_sent", buf, sizeof(buf)) &&
              atoll(buf) > 0);
    cr_assert(hget(&fx, "flps:job:j1", "p_dense_bytes", buf, sizeof(buf)) &&
              atoll(buf) > 0);
    cr_assert(hget(&fx, "flps:job:j1", "p_elapsed", buf, sizeof(buf)));
    cr_assert(hget(&fx, "flps:job:j1", "p_test_accuracy", buf, sizeof(buf)));
    cr_assert(atof(buf) >= 0 && atof(buf) <= 1, "accuracy %s", buf);

    /* Every line is in the job's log stream, stdout and stderr. */
    cr_assert_eq(rconn_cmd(fx.rc, &r, "XRANGE flps:job:j1:logs - +"), FLPS_OK);
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *f = r->element[i]->element[1];
        cr_assert_eq(f->elements, 4);
        cr_assert_str_eq(f->element[0]->str, "task");
        cr_assert_str_eq(f->element[2]->str, "line");
        if (strcmp(f->element[1]->str, "server-0") == 0 &&
            strncmp(f->element[3]->str, "listening on ", 13) == 0)
            saw_listening = strcmp(f->element[3]->str + 13, ep) == 0;
        if (strcmp(f->element[1]->str, "worker-1") == 0 &&
            strstr(f->element[3]->str, "\"event\":\"done\"") != NULL)
            saw_done = 1;
        if (strcmp(f->element[1]->str, "worker-0") == 0 &&
            strstr(f->element[3]->str, "INFO") != NULL)
            saw_stderr = 1;
    }
    freeReplyObject(r);
    cr_assert(saw_listening, "no 'listening on' line of server-0");
    cr_assert(saw_done, "no done event of worker-1");
    cr_assert(saw_stderr, "no stderr line of worker-0");
    snprintf(buf, sizeof(buf), "%s/j1/job.yaml", fx.work);
    {
        char *text = slurp(buf);
        cr_assert_str_eq(text, quick_job, "job.yaml differs from the spec");
        free(text);
    }
    snprintf(buf, sizeof(buf), "%s/j1/attempt-0/worker-0.log", fx.work);
    cr_assert_gt(count_in_file(buf, "\"event\":\"progress\""), 0,
                 "no task log file");
    CHECK(&fx, count_in_file(fx.log, "started flworker, pid") == 2,
          "expected two 'started flworker' log lines");
    CHECK(&fx, count_in_file(fx.log, "exited with status 0") == 2,
          "expected two 'exited with status 0' log lines");

    /* The job ends: its server leaves the desired set and is stopped. */
    must(&fx, rconn_cmd(fx.rc, &r, "SREM flps:node:n1:tasks %s", s0), &r);
    WAIT_UNTIL(hget_is(&fx, s0, "state", "EXITED"), 15);
    CHECK(&fx, hget_is(&fx, s0, "state", "EXITED"), "the server still runs");
    cr_assert(hget_is(&fx, s0, "exit_code", "0"), "flps exits 0 on SIGTERM");
    cr_assert_eq(rconn_cmd(fx.rc, &r, "LINDEX flps:exits 2"), FLPS_OK);
    cr_assert_str_eq(r->str, s0);
    freeReplyObject(r);
    cr_assert_eq(agent_stop(&fx, SIGTERM, 15), 0);
    fx_fini(&fx);
}

Test(agent, stops_a_task_that_leaves_the_desired_set_and_its_children_on_exit,
     .timeout = 120)
{
    char s0[64], w0[64], w1[64], buf[64];
    int pids[3];
    redisReply *r = NULL;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j2", long_job, 1, 2);
    task_key(s0, sizeof(s0), "j2", "server-0");
    task_key(w0, sizeof(w0), "j2", "worker-0");
    task_key(w1, sizeof(w1), "j2", "worker-1");
    WAIT_UNTIL(logs_have(&fx, "j2", "worker-1", "\"event\":\"start\""), 60);
    CHECK(&fx, hget_is(&fx, w1, "state", "RUNNING"), "worker-1 not running");
    for (int i = 0; i < 3; i++) {
        cr_assert(hget(&fx,
                       i == 0   ? s0
                       : i == 1 ? w0
                                : w1,
                       "pid", buf, sizeof(buf)));
        pids[i] = atoi(buf);
        cr_assert(pid_runs(pids[i]));
    }

    must(&fx, rconn_cmd(fx.rc, &r, "SREM flps:node:n1:tasks %s", w1), &r);
    WAIT_UNTIL(hget_is(&fx, w1, "state", "EXITED"), 15);
    CHECK(&fx, hget_is(&fx, w1, "state", "EXITED"), "worker-1 still runs");
    cr_assert(hget_is(&fx, w1, "signal", "15"), "stopped with SIGTERM");
    cr_assert(hget_is(&fx, w1, "exit_code", "-1"));
    cr_assert(!pid_runs(pids[2]));
    cr_assert_eq(rconn_cmd(fx.rc, &r, "LRANGE flps:exits 0 -1"), FLPS_OK);
    cr_assert_eq(r->elements, 1);
    cr_assert_str_eq(r->element[0]->str, w1);
    freeReplyObject(r);
    CHECK(&fx, count_in_file(fx.log, "left the node's desired set") == 1,
          "no log line for the stop");
    CHECK(&fx, count_in_file(fx.log, "killed by signal 15") == 1,
          "no log line for the exit");
    cr_assert(pid_runs(pids[0]) && pid_runs(pids[1]), "the other tasks go on");

    /* SIGTERM to flagent stops the rest and reports their exits. */
    cr_assert_eq(agent_stop(&fx, SIGTERM, 15), 0, "flagent did not exit 0");
    cr_assert(!pid_runs(pids[0]) && !pid_runs(pids[1]));
    cr_assert(hget_is(&fx, s0, "state", "EXITED"));
    cr_assert(hget_is(&fx, w0, "state", "EXITED"));
    cr_assert_eq(integer_cmd(&fx, "LLEN %s", "flps:exits"), 3);
    cr_assert_gt(integer_cmd(&fx, "PTTL %s", "flps:node:n1:alive"), 0,
                 "the node is left to expire");
    fx_fini(&fx);
}

Test(agent, reports_a_worker_whose_job_file_is_broken, .timeout = 60)
{
    char w0[64];
    redisReply *r = NULL;
    int saw_error = 0;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j3", "name: broken\nmodel: [mlp\n", 1, 1);
    task_key(w0, sizeof(w0), "j3", "worker-0");
    WAIT_UNTIL(hget_is(&fx, w0, "state", "EXITED"), 30);
    CHECK(&fx, hget_is(&fx, w0, "state", "EXITED"), "worker-0 not reported");
    cr_assert(hget_is(&fx, w0, "exit_code", "2"), "flworker exits 2");
    cr_assert(hget_is(&fx, w0, "signal", "0"));
    cr_assert_eq(rconn_cmd(fx.rc, &r, "LRANGE flps:exits 0 -1"), FLPS_OK);
    cr_assert_eq(r->elements, 1);
    cr_assert_str_eq(r->element[0]->str, w0);
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(fx.rc, &r, "XRANGE flps:job:j3:logs - +"), FLPS_OK);
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *f = r->element[i]->element[1];
        if (strcmp(f->element[1]->str, "worker-0") == 0 &&
            strstr(f->element[3]->str, "job.yaml") != NULL)
            saw_error = 1;
    }
    freeReplyObject(r);
    cr_assert(saw_error, "flworker's error about job.yaml is not in the logs");
    {
        char err[512];

        /* The failing process's last error line, for the job's reason,
         * without the time and level of flworker's log prefix. */
        cr_assert(hget(&fx, w0, "error", err, sizeof(err)),
                  "no error line in the task hash");
        cr_assert(strstr(err, "job.yaml") != NULL, "error: %s", err);
        cr_assert(strstr(err, " ERROR ") == NULL, "error: %s", err);
    }
    CHECK(&fx, count_in_file(fx.log, "exited with status 2") == 1,
          "no log line for the failed worker");
    fx_fini(&fx);
}

Test(agent, reports_a_task_left_running_by_an_earlier_agent, .timeout = 30)
{
    redisReply *r = NULL;
    const char *k = "flps:task:j4:0:worker-0";

    fx_init(&fx, 1);
    must(&fx,
         rconn_cmd(fx.rc, &r,
                   "HSET %s job j4 attempt 0 role worker index 0 node n1 "
                   "state RUNNING pid 999999",
                   k),
         &r);
    must(&fx, rconn_cmd(fx.rc, &r, "SADD flps:node:n1:tasks %s", k), &r);
    /* An EXITED task is never run again. */
    must(&fx,
         rconn_cmd(fx.rc, &r,
                   "HSET flps:task:j4:0:worker-1 state EXITED exit_code 0"),
         &r);
    must(
        &fx,
        rconn_cmd(fx.rc, &r, "SADD flps:node:n1:tasks flps:task:j4:0:worker-1"),
        &r);
    agent_start(&fx, "1");
    WAIT_UNTIL(hget_is(&fx, k, "state", "EXITED"), 10);
    CHECK(&fx, hget_is(&fx, k, "state", "EXITED"), "not reported");
    cr_assert(hget_is(&fx, k, "exit_code", "-1"));
    cr_assert_eq(rconn_cmd(fx.rc, &r, "LRANGE flps:exits 0 -1"), FLPS_OK);
    cr_assert_eq(r->elements, 1);
    cr_assert_str_eq(r->element[0]->str, k);
    freeReplyObject(r);
    sleep_ms(600);
    cr_assert_eq(integer_cmd(&fx, "LLEN %s", "flps:exits"), 1, "reported once");
    cr_assert(hget_is(&fx, "flps:task:j4:0:worker-1", "exit_code", "0"));
    CHECK(&fx, count_in_file(fx.log, "started") == 0, "something was started");
    fx_fini(&fx);
}

Test(agent, a_killed_agent_lets_its_alive_key_expire_and_its_children_die,
     .timeout = 60)
{
    char s0[64], buf[64];
    double killed, gone;
    int pid;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j5", long_job, 1, 0);
    task_key(s0, sizeof(s0), "j5", "server-0");
    WAIT_UNTIL(hget_is(&fx, s0, "state", "RUNNING"), 15);
    CHECK(&fx, hget(&fx, s0, "pid", buf, sizeof(buf)), "flps did not start");
    pid = atoi(buf);

    kill(fx.agent, SIGKILL);
    waitpid(fx.agent, NULL, 0);
    fx.agent = 0;
    killed = now_s();
    cr_assert_gt(integer_cmd(&fx, "PTTL %s", "flps:node:n1:alive"), 0);
    WAIT_UNTIL(integer_cmd(&fx, "EXISTS %s", "flps:node:n1:alive") == 0, 10);
    gone = now_s() - killed;
    /* TTL 2 heartbeats (2 s) from the last heartbeat, which was before the
     * kill: gone within two heartbeat periods, plus Redis's active expiry
     * (10 runs a second) and this loop's polling. */
    cr_assert_eq(integer_cmd(&fx, "EXISTS %s", "flps:node:n1:alive"), 0);
    cr_assert_leq(gone, 2.0 + 0.5, "the alive key lived %.1f s", gone);
    WAIT_UNTIL(!pid_runs(pid), 5);
    cr_assert(!pid_runs(pid), "flps outlived its agent");
    fx_fini(&fx);
}

Test(agent, waits_for_redis_and_registers_when_it_comes, .timeout = 60)
{
    char url[64];
    int port = test_free_port(), status;

    fx_init(&fx, 0);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    agent_start_url(&fx, url, "1");
    sleep_ms(2500);
    cr_assert_eq(waitpid(fx.agent, &status, WNOHANG), 0,
                 "flagent gave up without Redis");
    CHECK(&fx, count_in_file(fx.log, "waiting for it") == 1,
          "expected one line saying it waits for Redis");
    cr_assert_eq(test_redis_start_on(&fx.srv, port), 0);
    cr_assert_eq(rconn_create(fx.srv.url, 2000, &fx.rc), FLPS_OK);
    WAIT_UNTIL(agent_registered(&fx), 10);
    CHECK(&fx, agent_registered(&fx), "did not register once Redis came");
    cr_assert_gt(integer_cmd(&fx, "PTTL %s", "flps:node:n1:alive"), 0);
    CHECK(&fx, count_in_file(fx.log, "waiting for it") == 1,
          "the wait is logged once");
    fx_fini(&fx);
}

Test(agent, keeps_its_tasks_running_while_redis_is_away, .timeout = 120)
{
    char w0[64], buf[64];
    int pid;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j6", long_job, 1, 2);
    task_key(w0, sizeof(w0), "j6", "worker-0");
    WAIT_UNTIL(logs_have(&fx, "j6", "worker-0", "\"event\":\"start\""), 60);
    CHECK(&fx, hget(&fx, w0, "pid", buf, sizeof(buf)), "worker-0 no pid");
    pid = atoi(buf);

    kill(fx.srv.pid, SIGSTOP); /* Redis stops answering */
    WAIT_UNTIL(count_in_file(fx.log, "heartbeat lost") > 0, 10);
    CHECK(&fx, count_in_file(fx.log, "heartbeat lost") == 1,
          "expected one 'heartbeat lost' line");
    sleep_ms(3000);
    cr_assert(pid_runs(pid), "worker-0 stopped while Redis was away");
    CHECK(&fx, count_in_file(fx.log, "heartbeat lost") == 1,
          "'heartbeat lost' is logged once");
    kill(fx.srv.pid, SIGCONT);
    WAIT_UNTIL(count_in_file(fx.log, "heartbeat restored") > 0, 10);
    CHECK(&fx, count_in_file(fx.log, "heartbeat restored") == 1,
          "expected one 'heartbeat restored' line");
    WAIT_UNTIL(integer_cmd(&fx, "EXISTS %s", "flps:node:n1:alive") == 1, 5);
    cr_assert_eq(integer_cmd(&fx, "EXISTS %s", "flps:node:n1:alive"), 1);
    cr_assert(pid_runs(pid));
    cr_assert(hget_is(&fx, w0, "state", "RUNNING"));
    cr_assert_eq(integer_cmd(&fx, "LLEN %s", "flps:exits"), 0);
    fx_fini(&fx);
}

/* Run flagent with these arguments; exit status and stderr. */
static int run_flagent(char *const args[], const char *env_bin_dir, char *err,
                       size_t errlen)
{
    char path[] = "/tmp/flagent-flags-XXXXXX";
    char *argv[24];
    int a = 0, fd = mkstemp(path), status;
    pid_t pid;
    char *text;

    argv[a++] = FLPS_BIN_DIR "/flagent";
    for (int i = 0; args[i] != NULL && a < 23; i++)
        argv[a++] = args[i];
    argv[a] = NULL;
    pid = fork();
    if (pid == 0) {
        if (env_bin_dir != NULL)
            setenv("FLPS_BIN_DIR", env_bin_dir, 1);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd);
    waitpid(pid, &status, 0);
    text = slurp(path);
    snprintf(err, errlen, "%s", text);
    free(text);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(agent, bad_flags_give_a_clear_error_and_exit_2)
{
    static const struct {
        const char *args[16];
        const char *says;
    } cases[] = {
        {{NULL}, "--redis is required"},
        {{"--redis", "redis://127.0.0.1:1", "--cpus", "4", "--memory", "1Gi",
          "--gpus", "0", NULL},
         "--name is required"},
        {{"--redis", "redis://127.0.0.1:1", "--name", "n1", "--cpus", "4",
          "--memory", "12Q", "--gpus", "0", NULL},
         "--memory: '12Q' is not a size"},
        {{"--redis", "redis://127.0.0.1:1", "--name", "n1", "--cpus", "four",
          "--memory", "1Gi", "--gpus", "0", NULL},
         "--cpus: 'four'"},
        {{"--redis", "http://127.0.0.1:1", "--name", "n1", "--cpus", "4",
          "--memory", "1Gi", "--gpus", "0", NULL},
         "--redis: 'http://127.0.0.1:1' is not a Redis URL"},
        {{"--redis", "redis://127.0.0.1:1", "--name", "n1", "--cpus", "4",
          "--memory", "1Gi", "--gpus", "0", "--heartbeat", "0", NULL},
         "--heartbeat: '0'"},
        {{"--redis", "redis://127.0.0.1:1", "--name", "n1", "--cpus", "4",
          "--memory", "1Gi", "--gpus", "0", "--tasks", "3", NULL},
         "unknown option '--tasks'"},
    };
    char *argv[] = {"--redis",  "redis://127.0.0.1:1",
                    "--name",   "n1",
                    "--cpus",   "4",
                    "--memory", "1Gi",
                    "--gpus",   "0",
                    NULL};
    char err[4096];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int st =
            run_flagent((char *const *)cases[i].args, NULL, err, sizeof(err));
        cr_assert_eq(st, 2, "case %zu exited %d: %s", i, st, err);
        cr_assert_not_null(strstr(err, cases[i].says),
                           "case %zu: '%s' lacks '%s'", i, err, cases[i].says);
        cr_assert_not_null(strstr(err, "usage: flagent"), "case %zu: no usage",
                           i);
    }
    cr_assert_eq(run_flagent(argv, "/nonexistent", err, sizeof(err)), 2);
    cr_assert_not_null(strstr(err, "FLPS_BIN_DIR=/nonexistent"), "%s", err);
    {
        char *help[] = {"--help", NULL};
        cr_assert_eq(run_flagent(help, NULL, err, sizeof(err)), 0);
    }
}

/* A stand-in for flps that ignores SIGTERM, and a flworker that is never
 * started: flagent takes both from FLPS_BIN_DIR. */
static void fake_bins(fixture *fxt)
{
    char path[192];
    FILE *f;

    snprintf(fxt->bin_dir, sizeof(fxt->bin_dir), "%s/bin", fxt->dir);
    cr_assert_eq(mkdir(fxt->bin_dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/flps", fxt->bin_dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\n"
          "trap 'echo ignoring SIGTERM >&2' TERM\n"
          "echo 'listening on tcp://127.0.0.1:9'\n"
          "while :; do sleep 0.1; done\n",
          f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/flworker", fxt->bin_dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\nexit 0\n", f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
}

Test(agent, kills_a_task_that_ignores_sigterm_after_10_seconds, .timeout = 60)
{
    char s0[64];
    redisReply *r = NULL;
    double t0, took;

    fx_init(&fx, 1);
    fake_bins(&fx);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j7", quick_job, 1, 0);
    task_key(s0, sizeof(s0), "j7", "server-0");
    WAIT_UNTIL(hget_is(&fx, s0, "state", "RUNNING"), 10);
    CHECK(&fx, hget_is(&fx, s0, "endpoint", "tcp://127.0.0.1:9"),
          "the fake server did not run");
    must(&fx, rconn_cmd(fx.rc, &r, "SREM flps:node:n1:tasks %s", s0), &r);
    t0 = now_s();
    WAIT_UNTIL(hget_is(&fx, s0, "state", "EXITED"), 20);
    took = now_s() - t0;
    CHECK(&fx, hget_is(&fx, s0, "state", "EXITED"), "never killed");
    cr_assert(hget_is(&fx, s0, "signal", "9"), "ended by SIGKILL");
    cr_assert(took >= 9.5 && took < 13, "SIGKILL after %.1f s", took);
    cr_assert(logs_have(&fx, "j7", "server-0", "ignoring SIGTERM"));
    CHECK(&fx, count_in_file(fx.log, "SIGKILL") == 1, "no SIGKILL line");
    fx_fini(&fx);
}

Test(agent, fails_a_task_whose_job_has_no_job_file, .timeout = 30)
{
    char w0[64];
    redisReply *r = NULL;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    task_key(w0, sizeof(w0), "j8", "worker-0");
    must(&fx, rconn_cmd(fx.rc, &r, "HSET flps:job:j8 id j8 workers 1"), &r);
    must(&fx,
         rconn_cmd(fx.rc, &r, "HSET %s job j8 attempt 0 state ASSIGNED", w0),
         &r);
    must(&fx, rconn_cmd(fx.rc, &r, "SADD flps:node:n1:tasks %s", w0), &r);
    WAIT_UNTIL(hget_is(&fx, w0, "state", "EXITED"), 10);
    CHECK(&fx, hget_is(&fx, w0, "state", "EXITED"), "not reported");
    cr_assert(hget_is(&fx, w0, "exit_code", "-1"));
    cr_assert_eq(integer_cmd(&fx, "LLEN %s", "flps:exits"), 1);
    cr_assert(logs_have(&fx, "j8", "worker-0", "flagent: cannot start"));
    {
        char err[512];

        cr_assert(hget(&fx, w0, "error", err, sizeof(err)));
        cr_assert(strncmp(err, "flagent could not start it: ", 28) == 0,
                  "error: %s", err);
    }
    CHECK(&fx, count_in_file(fx.log, "cannot start") == 1,
          "one line saying why");
    fx_fini(&fx);
}

Test(agent, starts_a_restarted_attempt_after_the_old_one_stopped, .timeout = 60)
{
    const char *old_key = "flps:task:j9:0:server-0";
    const char *new_key = "flps:task:j9:1:server-0";
    char old_exit[64], new_start[64];
    redisReply *r = NULL;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j9", long_job, 1, 0);
    WAIT_UNTIL(hget_is(&fx, old_key, "state", "RUNNING"), 15);
    CHECK(&fx, hget_is(&fx, old_key, "state", "RUNNING"), "no attempt 0");

    /* What flsched does on a restart, in one transaction. */
    must(&fx,
         rconn_cmd(fx.rc, &r,
                   "HSET %s job j9 attempt 1 role server index 0 node n1 "
                   "state ASSIGNED",
                   new_key),
         &r);
    must(&fx, rconn_cmd(fx.rc, &r, "MULTI"), &r);
    must(&fx, rconn_cmd(fx.rc, &r, "SREM flps:node:n1:tasks %s", old_key), &r);
    must(&fx, rconn_cmd(fx.rc, &r, "SADD flps:node:n1:tasks %s", new_key), &r);
    must(&fx, rconn_cmd(fx.rc, &r, "EXEC"), &r);

    WAIT_UNTIL(hget_is(&fx, new_key, "state", "RUNNING"), 15);
    CHECK(&fx, hget_is(&fx, new_key, "state", "RUNNING"), "no attempt 1");
    cr_assert(hget_is(&fx, old_key, "state", "EXITED"));
    cr_assert(hget(&fx, old_key, "exited_at", old_exit, sizeof(old_exit)));
    cr_assert(hget(&fx, new_key, "started_at", new_start, sizeof(new_start)));
    cr_assert_geq(atof(new_start), atof(old_exit),
                  "attempt 1 started at %s, before attempt 0 ended at %s",
                  new_start, old_exit);
    /* --restore: flps says what it restored (here: nothing yet). */
    cr_assert(logs_have(&fx, "j9", "server-0", "no checkpoint at") ||
                  logs_have(&fx, "j9", "server-0", "restored"),
              "attempt 1's server did not start with --restore");
    CHECK(&fx, count_in_file(fx.log, "waiting for attempt 0 of job j9") == 1,
          "no line saying attempt 1 waits");
    fx_fini(&fx);
}

/* A profile as flworker's rank 0 prints it. */
static const char profile_line[] =
    "{\"event\":\"profile\",\"iteration\":25,\"workers\":2,\"alpha\":0.0001,"
    "\"beta\":1e-09,\"layers\":[{\"name\":\"fc1.weight\",\"numel\":200704,"
    "\"t_backward\":0.000312},{\"name\":\"fc1.bias\",\"numel\":256,"
    "\"t_backward\":0.000004}]}";

/* Stand-ins from FLPS_BIN_DIR: an flps that listens, and an flworker that
 * says its command line on stderr, prints the profile (rank 0) and runs
 * until stopped. */
static void plan_bins(fixture *fxt)
{
    char path[192];
    FILE *f;

    snprintf(fxt->bin_dir, sizeof(fxt->bin_dir), "%s/bin", fxt->dir);
    cr_assert_eq(mkdir(fxt->bin_dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/flps", fxt->bin_dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\n"
          "echo 'listening on tcp://127.0.0.1:9'\n"
          "exec sleep 1000\n",
          f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/flworker", fxt->bin_dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "#!/bin/sh\n"
            "echo \"args: $*\" >&2\n"
            "case \" $* \" in *' --rank 0 '*) echo '%s' ;; esac\n"
            "exec sleep 1000\n",
            profile_line);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
}

/* Whether path holds exactly want. */
static int file_is(const char *path, const char *want)
{
    char *got = slurp(path);
    int same = got != NULL && strcmp(got, want) == 0;

    free(got);
    return same;
}

Test(agent, stores_the_profile_and_follows_the_plan_into_the_plan_file,
     .timeout = 60)
{
    static const char v1[] =
        "{\"version\":1,\"layers\":[{\"name\":\"fc1.weight\",\"numel\":200704,"
        "\"codec\":\"topk\",\"density\":0.01}],"
        "\"predicted_iteration_seconds\":0.001,"
        "\"dense_iteration_seconds\":0.002}";
    static const char v2[] =
        "{\"version\":2,\"layers\":[{\"name\":\"fc1.weight\",\"numel\":200704,"
        "\"codec\":\"dense\",\"density\":1}],"
        "\"predicted_iteration_seconds\":0.002,"
        "\"dense_iteration_seconds\":0.002}";
    char w0[64], w1[64], plan[192], args[256];
    redisReply *r = NULL;

    fx_init(&fx, 1);
    plan_bins(&fx);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j5", quick_job, 1, 2);
    task_key(w0, sizeof(w0), "j5", "worker-0");
    task_key(w1, sizeof(w1), "j5", "worker-1");
    WAIT_UNTIL(hget_is(&fx, w0, "state", "RUNNING") &&
                   hget_is(&fx, w1, "state", "RUNNING"),
               10);
    CHECK(&fx, hget_is(&fx, w1, "state", "RUNNING"), "workers not started");

    /* Every worker gets --plan, before any plan exists. */
    snprintf(plan, sizeof(plan), "%s/j5/plan.json", fx.work);
    snprintf(args, sizeof(args), "--job-id j5 --plan %s", plan);
    WAIT_UNTIL(logs_have(&fx, "j5", "worker-0", args) &&
                   logs_have(&fx, "j5", "worker-1", args),
               10);
    CHECK(&fx, logs_have(&fx, "j5", "worker-0", args), "worker-0 lacks %s",
          args);
    CHECK(&fx, logs_have(&fx, "j5", "worker-1", args), "worker-1 lacks %s",
          args);
    cr_assert_eq(access(plan, F_OK), -1, "no plan yet, no file");

    /* Rank 0's profile lands in the job hash as printed. */
    WAIT_UNTIL(hget_is(&fx, "flps:job:j5", "profile", profile_line), 10);
    CHECK(&fx, hget_is(&fx, "flps:job:j5", "profile", profile_line),
          "profile not stored");
    cr_assert(hget_is(&fx, "flps:job:j5", "profile_attempt", "0"));

    /* A stored plan goes to the file; a newer version replaces it. */
    must(&fx,
         rconn_cmd(fx.rc, &r, "HSET flps:job:j5:plan version 1 plan %s", v1),
         &r);
    WAIT_UNTIL(file_is(plan, v1), 5);
    CHECK(&fx, file_is(plan, v1), "plan v1 not written to %s", plan);
    must(&fx,
         rconn_cmd(fx.rc, &r, "HSET flps:job:j5:plan version 2 plan %s", v2),
         &r);
    WAIT_UNTIL(file_is(plan, v2), 5);
    CHECK(&fx, file_is(plan, v2), "plan v2 did not replace v1");
    sleep_ms(1200); /* two more looks at the version: nothing rewritten */
    CHECK(&fx,
          count_in_file(fx.log, "plan v1 written") == 1 &&
              count_in_file(fx.log, "plan v2 written") == 1,
          "one log line per plan written");
    fx_fini(&fx);
}

Test(agent, writes_an_existing_plan_before_the_worker_starts, .timeout = 30)
{
    static const char v3[] = "{\"version\":3,\"layers\":[]}";
    char plan[192], w0[64];
    redisReply *r = NULL;

    fx_init(&fx, 1);
    plan_bins(&fx);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    must(&fx,
         rconn_cmd(fx.rc, &r, "HSET flps:job:j6:plan version 3 plan %s", v3),
         &r);
    place_job(&fx, "j6", quick_job, 1, 1);
    task_key(w0, sizeof(w0), "j6", "worker-0");
    WAIT_UNTIL(hget_is(&fx, w0, "state", "RUNNING"), 10);
    CHECK(&fx, hget_is(&fx, w0, "state", "RUNNING"), "worker not started");
    snprintf(plan, sizeof(plan), "%s/j6/plan.json", fx.work);
    cr_assert(file_is(plan, v3), "the plan was not there at the start");
    CHECK(&fx, count_in_file(fx.log, "plan v3 written") == 1,
          "one log line for the plan");
    fx_fini(&fx);
}

/* quick_job with two servers: each worker is given both endpoints. */
static const char two_server_job[] = "name: agent-test\n"
                                     "model: mlp\n"
                                     "dataset: synthetic\n"
                                     "workers: 2\n"
                                     "servers: 2\n"
                                     "iterations: 30\n"
                                     "batch_size: 16\n"
                                     "eval_every: 0\n";

/* Whether every one of the n task keys has field set to want. */
static int all_have(fixture *f, char keys[][64], int n, const char *field,
                    const char *want)
{
    for (int i = 0; i < n; i++)
        if (!hget_is(f, keys[i], field, want))
            return 0;
    return 1;
}

Test(agent, gives_the_workers_the_endpoints_of_every_server, .timeout = 120)
{
    char s[2][64], w[2][64];

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j10", two_server_job, 2, 2);
    task_key(s[0], sizeof(s[0]), "j10", "server-0");
    task_key(s[1], sizeof(s[1]), "j10", "server-1");
    task_key(w[0], sizeof(w[0]), "j10", "worker-0");
    task_key(w[1], sizeof(w[1]), "j10", "worker-1");
    WAIT_UNTIL(all_have(&fx, w, 2, "state", "EXITED"), 60);
    CHECK(&fx, all_have(&fx, w, 2, "state", "EXITED"),
          "the workers did not finish within 60 s");
    cr_assert(all_have(&fx, s, 2, "state", "RUNNING"));
    CHECK(&fx, all_have(&fx, w, 2, "exit_code", "0"),
          "a worker failed: it did not reach both servers");
    fx_fini(&fx);
}

/* Names in fx->dir, sorted and space-separated. */
static void list_dir(const char *dir, char *out, size_t len)
{
    char cmd[256];
    FILE *p;
    size_t n;

    snprintf(cmd, sizeof(cmd), "ls -A %s | sort | tr '\\n' ' '", dir);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    pclose(p);
}

Test(agent, refuses_a_job_id_that_would_leave_the_work_directory, .timeout = 30)
{
    char s0[64], w0[64], names[512];
    redisReply *r = NULL;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "..", quick_job, 1, 1);
    task_key(s0, sizeof(s0), "..", "server-0");
    task_key(w0, sizeof(w0), "..", "worker-0");
    WAIT_UNTIL(hget_is(&fx, s0, "state", "EXITED") &&
                   hget_is(&fx, w0, "state", "EXITED"),
               10);
    CHECK(&fx, hget_is(&fx, s0, "exit_code", "-1"), "server-0 not reported");
    cr_assert(hget_is(&fx, w0, "exit_code", "-1"), "worker-0 not reported");
    sleep_ms(600); /* a few more loops: still refused once */
    cr_assert_eq(integer_cmd(&fx, "LLEN %s", "flps:exits"), 2,
                 "each refused task is reported once");
    CHECK(&fx, count_in_file(fx.log, ": refused, reported as exited") == 2,
          "not logged once per task");
    CHECK(&fx, count_in_file(fx.log, "started") == 0, "something was started");
    /* Nothing was written beside the work directory (where "work/.."
     * points) nor inside it. */
    list_dir(fx.dir, names, sizeof(names));
    cr_assert_str_eq(names, "flagent.log work ");
    list_dir(fx.work, names, sizeof(names));
    cr_assert_str_eq(names, "");
    cr_assert_eq(rconn_cmd(fx.rc, &r, "EXISTS flps:job:..:logs"), FLPS_OK);
    cr_assert_eq(r->integer, 0, "no log stream for the refused job");
    freeReplyObject(r);
    fx_fini(&fx);
}

Test(agent, escapes_a_newline_in_a_task_key_in_its_log, .timeout = 30)
{
    redisReply *r = NULL;
    const char *k = "flps:task:j1\n2026-01-01T00:00:00Z ERROR forged:0:"
                    "worker-0";

    fx_init(&fx, 1);
    must(&fx, rconn_cmd(fx.rc, &r, "SADD flps:node:n1:tasks %s", k), &r);
    agent_start(&fx, "1");
    WAIT_UNTIL(count_in_file(fx.log, "forged") > 0, 10);
    CHECK(&fx,
          count_in_file(fx.log, "j1\\n2026-01-01T00:00:00Z ERROR forged") == 1,
          "the key is not logged escaped");
    CHECK(&fx,
          count_in_file(fx.log, "\n2026-01-01T00:00:00Z ERROR forged") == 0,
          "the key's newline forged a line");
    fx_fini(&fx);
}

Test(agent, refuses_a_worker_whose_server_endpoint_is_not_an_endpoint,
     .timeout = 30)
{
    redisReply *r = NULL;
    const char *w0 = "flps:task:j11:0:worker-0";

    fx_init(&fx, 1);
    must(&fx,
         rconn_cmd(fx.rc, &r,
                   "HSET flps:job:j11 id j11 name x state RUNNING attempt 0 "
                   "servers 1 workers 1 spec %s",
                   quick_job),
         &r);
    must(&fx,
         rconn_cmd(fx.rc, &r,
                   "HSET flps:task:j11:0:server-0 state RUNNING endpoint %s",
                   "tcp://127.0.0.1:5 --job /etc/passwd"),
         &r);
    must(&fx,
         rconn_cmd(fx.rc, &r,
                   "HSET %s job j11 attempt 0 role worker index 0 node n1 "
                   "state ASSIGNED",
                   w0),
         &r);
    must(&fx, rconn_cmd(fx.rc, &r, "SADD flps:node:n1:tasks %s", w0), &r);
    agent_start(&fx, "1");
    WAIT_UNTIL(hget_is(&fx, w0, "state", "EXITED"), 10);
    CHECK(&fx, hget_is(&fx, w0, "exit_code", "-1"), "worker-0 not refused");
    CHECK(&fx, count_in_file(fx.log, "is not tcp://HOST:PORT") == 1,
          "the refusal is not logged once");
    CHECK(&fx, count_in_file(fx.log, "started") == 0, "something was started");
    cr_assert(logs_have(&fx, "j11", "worker-0", "is not tcp://HOST:PORT"),
              "the refusal is not in the job's logs");
    fx_fini(&fx);
}

static unsigned mode_of(const char *path)
{
    struct stat st;

    if (stat(path, &st) != 0)
        return 0;
    return (unsigned)(st.st_mode & 07777);
}

Test(agent, creates_job_files_logs_and_checkpoints_private, .timeout = 120)
{
    char w[2][64], p[256];
    mode_t old = umask(022); /* inherited by flagent */

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    umask(old);
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j20", quick_job, 1, 2);
    task_key(w[0], sizeof(w[0]), "j20", "worker-0");
    task_key(w[1], sizeof(w[1]), "j20", "worker-1");
    WAIT_UNTIL(all_have(&fx, w, 2, "state", "EXITED"), 60);
    CHECK(&fx, all_have(&fx, w, 2, "exit_code", "0"), "the job did not run");
    snprintf(p, sizeof(p), "%s/j20", fx.work);
    cr_assert_eq(mode_of(p), 0700, "%s: %o", p, mode_of(p));
    snprintf(p, sizeof(p), "%s/j20/attempt-0", fx.work);
    cr_assert_eq(mode_of(p), 0700, "%s: %o", p, mode_of(p));
    snprintf(p, sizeof(p), "%s/j20/job.yaml", fx.work);
    cr_assert_eq(mode_of(p), 0600, "%s: %o", p, mode_of(p));
    snprintf(p, sizeof(p), "%s/j20/attempt-0/worker-0.log", fx.work);
    cr_assert_eq(mode_of(p), 0600, "%s: %o", p, mode_of(p));
    snprintf(p, sizeof(p), "%s/j20/attempt-0/server-0.log", fx.work);
    cr_assert_eq(mode_of(p), 0600, "%s: %o", p, mode_of(p));
    snprintf(p, sizeof(p), "%s/j20/ckpt", fx.work);
    cr_assert_eq(mode_of(p), 0700, "%s: %o", p, mode_of(p));
    fx_fini(&fx);
}

/* An flps that says its command line, then listens until stopped. */
static void args_bins(fixture *fxt)
{
    char path[192];
    FILE *f;

    snprintf(fxt->bin_dir, sizeof(fxt->bin_dir), "%s/bin", fxt->dir);
    cr_assert_eq(mkdir(fxt->bin_dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/flps", fxt->bin_dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\n"
          "echo \"args: $*\" >&2\n"
          "echo 'listening on tcp://127.0.0.1:9'\n"
          "exec sleep 1000\n",
          f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/flworker", fxt->bin_dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\nexec sleep 1000\n", f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
}

Test(agent, gives_a_shard_the_job_files_checkpoint_interval, .timeout = 60)
{
    static const char every7[] = "name: agent-ckpt\n"
                                 "model: mlp\n"
                                 "dataset: synthetic\n"
                                 "workers: 1\n"
                                 "servers: 1\n"
                                 "iterations: 30\n"
                                 "checkpoint_interval: 7\n";

    fx_init(&fx, 1);
    args_bins(&fx);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j21", every7, 1, 1);
    place_job(&fx, "j22", quick_job, 1, 1);
    WAIT_UNTIL(logs_have(&fx, "j21", "server-0", "args: ") &&
                   logs_have(&fx, "j22", "server-0", "args: "),
               10);
    CHECK(&fx, logs_have(&fx, "j21", "server-0", "--checkpoint-interval 7 "),
          "the shard of a job with checkpoint_interval: 7 did not get "
          "--checkpoint-interval 7");
    CHECK(&fx, !logs_have(&fx, "j21", "server-0", "--checkpoint-interval 30"),
          "the job file's interval was overridden");
    /* No checkpoint_interval in the job file: the agent's 30 s. */
    CHECK(&fx, logs_have(&fx, "j22", "server-0", "--checkpoint-interval 30 "),
          "a job without checkpoint_interval did not get the default 30 s");
    fx_fini(&fx);
}

Test(agent, runs_a_command_jobs_program_and_reports_its_last_error_line,
     .timeout = 60)
{
    char spec[1024], w0[64], w1[64], path[192], err[256] = "";
    char *env;

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    /* Where the program writes: any job uid may (sticky, as /tmp). */
    snprintf(path, sizeof(path), "%s/out", fx.dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    cr_assert_eq(chmod(path, 01777), 0);
    snprintf(spec, sizeof(spec),
             "name: agent-cmd\nmodel: mlp\nworkers: 2\niterations: 3\n"
             "command: [/bin/sh, -c, 'env > %s/out/env-$FLPS_RANK; "
             "if [ $FLPS_RANK = 1 ]; then echo RuntimeError: out of data "
             ">&2; echo >&2; exit 3; fi; echo "
             "\"{\\\"event\\\":\\\"done\\\",\\\"rank\\\":0}\"']\n"
             "env:\n  MY_SETTING: on\n",
             fx.dir);
    place_job(&fx, "j20", spec, 1, 2);
    task_key(w0, sizeof(w0), "j20", "worker-0");
    task_key(w1, sizeof(w1), "j20", "worker-1");
    WAIT_UNTIL(hget_is(&fx, w0, "state", "EXITED") &&
                   hget_is(&fx, w1, "state", "EXITED"),
               30);
    CHECK(&fx, hget_is(&fx, w1, "state", "EXITED"), "worker-1 not reported");
    cr_assert(hget_is(&fx, w0, "exit_code", "0"));
    cr_assert(hget_is(&fx, w0, "error", ""), "a clean exit has no error");
    cr_assert(hget_is(&fx, w1, "exit_code", "3"));
    hget(&fx, w1, "error", err, sizeof(err));
    cr_assert_str_eq(err, "RuntimeError: out of data");
    snprintf(path, sizeof(path), "%s/out/env-0", fx.dir);
    env = slurp(path);
    cr_assert_not_null(env, "the program did not run");
    cr_assert_not_null(strstr(env, "FLPS_JOB=j20\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_RANK=0\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_WORKERS=2\n"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_SERVERS=tcp://"), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_PLAN_FILE="), "%s", env);
    cr_assert_not_null(strstr(env, "FLPS_ITERATIONS=3\n"), "%s", env);
    cr_assert_not_null(strstr(env, "MY_SETTING=on\n"), "%s", env);
    free(env);
    fx_fini(&fx);
}

/* A worker killed by SIGKILL after its error, some of flps's chatter on
 * stderr and a progress line longer than the 4 KiB a log tail holds: the
 * reason is the line the process itself wrote on stderr, whole, never a
 * cut piece of its stdout (issue 22, finding 12: "killed by signal 9:
 * ons":6000,"loss":...}"). */
Test(agent, a_killed_workers_reason_is_its_own_last_error_line_whole,
     .timeout = 60)
{
    char spec[1024], w0[64], err[2048] = "", want[800];

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    snprintf(spec, sizeof(spec),
             "name: agent-kill\nmodel: mlp\nworkers: 1\niterations: 3\n"
             "command: [/bin/sh, -c, 'printf \"RuntimeError: %%0700d\\n\" 0 "
             ">&2; echo \"2026-12-01T10:48:59.117Z INFO  flworker/0[1]: still "
             "here\" >&2; printf "
             "\"{\\\"event\\\":\\\"progress\\\",\\\"iter\\\":6000,"
             "\\\"loss\\\":%%05000d}\\n\" 0; kill -9 $$']\n");
    place_job(&fx, "j23", spec, 1, 1);
    task_key(w0, sizeof(w0), "j23", "worker-0");
    WAIT_UNTIL(hget_is(&fx, w0, "state", "EXITED"), 30);
    CHECK(&fx, hget_is(&fx, w0, "state", "EXITED"), "worker-0 not reported");
    cr_assert(hget_is(&fx, w0, "signal", "9"));
    hget(&fx, w0, "error", err, sizeof(err));
    snprintf(want, sizeof(want), "RuntimeError: %0700d", 0);
    cr_assert_str_eq(err, want);
    fx_fini(&fx);
}

/* ---- RDMA: the facts and the transport flsched chose ---- */

Test(agent, publishes_its_rdma_ports_and_passes_the_chosen_transport,
     .timeout = 60)
{
    char sys[128], path[256], buf[512], w0[64], s0[64];
    FILE *f;
    redisReply *r = NULL;
    const char *dirs[] = {"/class",
                          "/class/infiniband",
                          "/class/infiniband/mlx5_0",
                          "/class/infiniband/mlx5_0/ports",
                          "/class/infiniband/mlx5_0/ports/1",
                          "/class/infiniband/mlx5_0/ports/1/gids"};

    fx_init(&fx, 1);
    /* A node with one ACTIVE InfiniBand port, as sysfs shows it. */
    snprintf(sys, sizeof(sys), "%s/sys", fx.dir);
    cr_assert_eq(mkdir(sys, 0755), 0);
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(path, sizeof(path), "%s%s", sys, dirs[i]);
        cr_assert_eq(mkdir(path, 0755), 0, "%s", path);
    }
    snprintf(path, sizeof(path), "%s%s/state", sys, dirs[4]);
    f = fopen(path, "w");
    fputs("4: ACTIVE\n", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s%s/link_layer", sys, dirs[4]);
    f = fopen(path, "w");
    fputs("InfiniBand\n", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s%s/0", sys, dirs[5]);
    f = fopen(path, "w");
    fputs("fe80:0000:0000:0000:0202:c9ff:fe00:0001\n", f);
    fclose(f);
    cr_assert_eq(setenv("FLPS_SYSFS_ROOT", sys, 1), 0); /* the agent's too */

    /* Stand-ins that say their command lines. */
    plan_bins(&fx);
    snprintf(path, sizeof(path), "%s/flps", fx.bin_dir);
    f = fopen(path, "w");
    fputs("#!/bin/sh\necho \"args: $*\" >&2\n"
          "echo 'listening on tcp://127.0.0.1:9'\nexec sleep 1000\n",
          f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);

    /* flsched chose rdma for j9: every task hash says so. */
    place_job(&fx, "j9", quick_job, 1, 2);
    task_key(w0, sizeof(w0), "j9", "worker-0");
    task_key(s0, sizeof(s0), "j9", "server-0");
    must(&fx, rconn_cmd(fx.rc, &r, "HSET %s transport rdma", s0), &r);
    must(&fx, rconn_cmd(fx.rc, &r, "HSET %s transport rdma", w0), &r);
    task_key(w0, sizeof(w0), "j9", "worker-1");
    must(&fx, rconn_cmd(fx.rc, &r, "HSET %s transport rdma", w0), &r);
    agent_start(&fx, "1");
    unsetenv("FLPS_SYSFS_ROOT");
    WAIT_UNTIL(agent_registered(&fx), 10);
    CHECK(&fx, agent_registered(&fx), "the node did not register");
    cr_assert(hget_is(&fx, "flps:node:n1:facts", "rdma_devices", "1"));
    cr_assert(hget_is(&fx, "flps:node:n1:facts", "rdma_active_ports", "1"));
    cr_assert(hget_is(&fx, "flps:node:n1:facts", "rdma_ports", "mlx5_0:1"));
    cr_assert(hget(&fx, "flps:node:n1:facts", "rdma_detail", buf, sizeof(buf)));
    cr_assert_str_eq(buf, "mlx5_0 port 1 ACTIVE InfiniBand 1 GID");

    WAIT_UNTIL(logs_have(&fx, "j9", "server-0", "--transport rdma") &&
                   logs_have(&fx, "j9", "worker-1", "--transport rdma"),
               15);
    CHECK(&fx, logs_have(&fx, "j9", "server-0", "--transport rdma"),
          "the shard was not told the transport");
    CHECK(&fx, logs_have(&fx, "j9", "worker-0", "--transport rdma"),
          "worker-0 was not told the transport");
    CHECK(&fx, logs_have(&fx, "j9", "worker-1", "--transport rdma"),
          "worker-1 was not told the transport");
}

static const char saps_job[] = "name: agent-saps\n"
                               "model: mlp\n"
                               "dataset: synthetic\n"
                               "workers: 3\n"
                               "mode: saps\n"
                               "iterations: 30\n"
                               "batch_size: 16\n"
                               "eval_every: 0\n";

Test(agent, gives_a_saps_jobs_workers_each_others_endpoints, .timeout = 120)
{
    char w[3][64], ep[3][96], done[4096];

    fx_init(&fx, 1);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    place_job(&fx, "j30", saps_job, 0, 3);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "worker-%d", i);
        task_key(w[i], sizeof(w[i]), "j30", name);
    }
    WAIT_UNTIL(all_have(&fx, w, 3, "state", "EXITED"), 90);
    CHECK(&fx, all_have(&fx, w, 3, "state", "EXITED"),
          "the saps workers did not finish within 90 s");
    CHECK(&fx, all_have(&fx, w, 3, "exit_code", "0"),
          "a saps worker failed: it did not reach its peers");
    for (int i = 0; i < 3; i++) {
        cr_assert(hget(&fx, w[i], "peer_endpoint", ep[i], sizeof(ep[i])),
                  "worker %d published no endpoint", i);
        cr_assert(strncmp(ep[i], "tcp://127.0.0.1:", 16) == 0, "%s", ep[i]);
        for (int k = 0; k < i; k++)
            cr_assert_str_neq(ep[i], ep[k], "two workers on one port");
        cr_assert(hget(&fx, w[i], "done", done, sizeof(done)));
        cr_assert(strstr(done, "\"mode\":\"saps\"") != NULL, "%s", done);
    }
    /* Each took its own place in the list: rank 2 of the three. */
    cr_assert(logs_have(&fx, "j30", "worker-2", "saps: rank 2 of 3"));
    fx_fini(&fx);
}

Test(agent, fails_a_saps_worker_whose_peer_never_registers, .timeout = 60)
{
    static const char job[] = "name: agent-saps\nmodel: mlp\n"
                              "dataset: synthetic\nworkers: 2\nmode: saps\n"
                              "iterations: 30\npeer_deadline: 0.5\n";
    char w0[64], w1[64], err[1024];
    redisReply *r = NULL;

    fx_init(&fx, 1);
    place_job(&fx, "j31", job, 0, 2);
    task_key(w0, sizeof(w0), "j31", "worker-0");
    task_key(w1, sizeof(w1), "j31", "worker-1");
    /* worker-1's node never runs it: it never registers an endpoint. */
    must(&fx, rconn_cmd(fx.rc, &r, "SREM flps:node:n1:tasks %s", w1), &r);
    agent_start(&fx, "1");
    WAIT_UNTIL(agent_registered(&fx), 10);
    WAIT_UNTIL(hget_is(&fx, w0, "state", "EXITED"), 20);
    CHECK(&fx, hget_is(&fx, w0, "state", "EXITED"),
          "worker-0 still waits after 3 s (6 x peer_deadline) and more");
    cr_assert(hget_is(&fx, w0, "exit_code", "-1"));
    cr_assert(hget(&fx, w0, "error", err, sizeof(err)));
    cr_assert(strstr(err, "worker-1 of the job never registered its "
                          "endpoint") != NULL,
              "error: %s", err);
    cr_assert(strstr(err, "within 3 s") != NULL, "error: %s", err);
    cr_assert(!hget(&fx, w1, "peer_endpoint", err, sizeof(err)));
    fx_fini(&fx);
}
