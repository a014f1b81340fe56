/* The local cluster of the control-plane tests, for real: redis-server,
 * flsched and two flagents on loopback (2 CPUs and 4 GiB each, one shared
 * checkpoint directory as shared storage would be), driven with flsubmit.
 * Included by one test file each (every function is static); the file
 * names its suite and calls cluster_setup/cluster_teardown from it. */
#ifndef FLPS_TESTS_CLUSTER_FIXTURE_H
#define FLPS_TESTS_CLUSTER_FIXTURE_H

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../scheduler/redis_fixture.h"
#include "runcmd.h"
#include "spawn.h"

#define HEARTBEAT_S 1

typedef struct cluster {
    test_redis redis;
    char dir[64];
    char api[160]; /* http://127.0.0.1:PORT */
    pid_t sched;
    pid_t agent[2];
} cluster;

static cluster cl;

static inline void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline void start_sched(void)
{
    char log[128], bound[128];
    const char *args[] = {"--redis",    cl.redis.url, "--listen", "127.0.0.1:0",
                          "--lease-ms", "2000",       NULL};

    snprintf(log, sizeof(log), "%s/flsched.log", cl.dir);
    cl.sched =
        test_spawn("flsched", args, log, "listening on ", bound, sizeof(bound));
    cr_assert_gt(cl.sched, 0, "flsched did not start; see %s", log);
    snprintf(cl.api, sizeof(cl.api), "http://%s", bound);
}

static inline void start_agent(int i)
{
    char log[128], name[16], work[128], hb[16], ckpt[128];
    const char *args[] = {"--redis",     cl.redis.url, "--name",
                          name,          "--cpus",     "2",
                          "--memory",    "4Gi",        "--gpus",
                          "0",           "--work-dir", work,
                          "--heartbeat", hb,           "--checkpoint-root",
                          ckpt,          NULL};

    snprintf(name, sizeof(name), "n%d", i + 1);
    snprintf(log, sizeof(log), "%s/flagent-%s.log", cl.dir, name);
    snprintf(work, sizeof(work), "%s/%s", cl.dir, name);
    snprintf(hb, sizeof(hb), "%d", HEARTBEAT_S);
    /* One checkpoint directory for both nodes, as shared storage would
     * be: a job restarted on the other node restores. */
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints", cl.dir);
    cl.agent[i] = test_spawn("flagent", args, log, NULL, NULL, 0);
    cr_assert_gt(cl.agent[i], 0);
}

static inline void stop(pid_t *pid, int sig)
{
    if (*pid > 0) {
        kill(*pid, sig);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

/* Run flsubmit OPTS ARGS against the cluster into *r (caller frees with
 * run_free); it must exit want_status. */
static inline void flsubmit_run(const char *opts, const char *args,
                                int want_status, run_result *r)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "FLPS_SCHEDULER=%s %s/flsubmit %s %s", cl.api,
             FLPS_BIN_DIR, opts, args);
    run_cmd(cmd, r);
    cr_assert_eq(r->status, want_status, "flsubmit %s exited %d:\n%s%s", args,
                 r->status, r->out, r->err);
}

/* Run flsubmit against the cluster; returns its parsed --json output. */
static inline json_t *flsubmit_json(const char *args, int want_status)
{
    run_result r;
    json_t *o;

    flsubmit_run("--json", args, want_status, &r);
    o = r.summary ? json_incref(r.summary) : NULL;
    run_free(&r);
    return o;
}

/* Run flsubmit against the cluster (exit 0); returns what it printed for
 * people on stdout (caller frees). */
static inline char *flsubmit_text(const char *args)
{
    run_result r;
    char *out;

    flsubmit_run("", args, 0, &r);
    out = strdup(r.out);
    run_free(&r);
    cr_assert_not_null(out);
    return out;
}

static inline char *submit(const char *yaml)
{
    char path[160], args[200];
    FILE *f;
    json_t *o;
    char *id;
    static int n;

    snprintf(path, sizeof(path), "%s/job%d.yaml", cl.dir, n++);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(yaml, f);
    fclose(f);
    snprintf(args, sizeof(args), "submit %s", path);
    o = flsubmit_json(args, 0);
    cr_assert_not_null(o, "submit printed no JSON");
    id = strdup(json_string_value(json_object_get(o, "id")));
    json_decref(o);
    return id;
}

static inline json_t *status(const char *id)
{
    char args[64];
    snprintf(args, sizeof(args), "status %s", id);
    return flsubmit_json(args, 0);
}

static inline const char *state_of(json_t *job)
{
    return json_string_value(json_object_get(job, "state"));
}

static inline double num_of(json_t *job, const char *k)
{
    json_t *v = json_object_get(job, k);
    return json_is_number(v) ? json_number_value(v) : -1;
}

/* Poll until the job reaches state (or fail after timeout_s). */
static inline json_t *wait_state(const char *id, const char *want,
                                 int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++) {
        json_t *j = status(id);
        if (strcmp(state_of(j), want) == 0)
            return j;
        if (strcmp(want, "RUNNING") != 0 &&
            (strcmp(state_of(j), "FAILED") == 0 ||
             strcmp(state_of(j), "CANCELLED") == 0))
            cr_assert_fail("job %s ended %s waiting for %s: %s", id,
                           state_of(j), want,
                           json_string_value(json_object_get(j, "reason")));
        json_decref(j);
        sleep_ms(200);
    }
    cr_assert_fail("job %s did not reach %s within %d s", id, want, timeout_s);
    return NULL;
}

/* Poll until the job reports at least min_iter iterations done. */
static inline void wait_progress(const char *id, double min_iter, int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++) {
        json_t *j = status(id);
        json_t *it =
            json_object_get(json_object_get(j, "progress"), "iteration");
        int done = json_is_number(it) && json_number_value(it) >= min_iter;
        json_decref(j);
        if (done)
            return;
        sleep_ms(200);
    }
    cr_assert_fail("job %s did not reach iteration %.0f within %d s", id,
                   min_iter, timeout_s);
}

/* The highest start_iteration a worker of the job announced in its log
 * ({"event":"start",...} lines, streamed by the agents). */
static inline double resumed_at(const char *id)
{
    char cmd[512];
    run_result r;
    double best = -1;
    char *line, *save = NULL;

    /* --events: the event lines are hidden from people otherwise. */
    snprintf(cmd, sizeof(cmd),
             "FLPS_SCHEDULER=%s %s/flsubmit --json logs --events %s", cl.api,
             FLPS_BIN_DIR, id);
    run_cmd(cmd, &r);
    for (line = strtok_r(r.out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *o = json_loads(line, 0, NULL), *ev;
        const char *text = json_string_value(json_object_get(o, "line"));
        ev = text ? json_loads(text, 0, NULL) : NULL;
        if (ev != NULL &&
            json_is_number(json_object_get(ev, "start_iteration")))
            best =
                fmax(best,
                     json_number_value(json_object_get(ev, "start_iteration")));
        json_decref(ev);
        json_decref(o);
    }
    run_free(&r);
    return best;
}

/* Redis (with its append-only file when aof), flsched, both agents, and
 * both nodes READY; the cluster's files go under /tmp/PREFIX-XXXXXX. */
static inline void cluster_setup(const char *prefix, int aof)
{
    memset(&cl, 0, sizeof(cl));
    snprintf(cl.dir, sizeof(cl.dir), "/tmp/%s-XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(cl.dir));
    /* Passable: as root, each job's tasks run as a uid of their own. */
    cr_assert_eq(chmod(cl.dir, 0711), 0);
    cr_assert_eq(aof ? test_redis_start_aof(&cl.redis)
                     : test_redis_start(&cl.redis),
                 0, "redis-server did not start");
    start_sched();
    start_agent(0);
    start_agent(1);
    for (int i = 0; i < 50; i++) {
        json_t *o = flsubmit_json("nodes", 0);
        json_t *nodes = json_object_get(o, "nodes");
        size_t n = json_array_size(nodes);
        json_decref(o);
        if (n == 2)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("the agents did not register");
}

static inline void cluster_teardown(void)
{
    stop(&cl.agent[0], SIGTERM);
    stop(&cl.agent[1], SIGTERM);
    stop(&cl.sched, SIGTERM);
    test_redis_stop(&cl.redis);
}

#endif
