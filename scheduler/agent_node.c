/* The node agent: registration, heartbeat, and reconciliation of the
 * node's desired set against the processes it runs. */
#include "scheduler/agent_node.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "scheduler/agent_task.h"
#include "scheduler/rconn.h"
#include "services/fsutil.h"
#include "services/jobspec.h"
#include "services/procs.h"

#define AGENT_LOOP_MS 200      /* the loop's period (docs/scheduler.md) */
#define AGENT_RETRY_S 1.0      /* between attempts to reach Redis */
#define AGENT_STOP_GRACE_S 10. /* SIGTERM, then SIGKILL after this */
#define AGENT_REDIS_TIMEOUT_MS 1000
#define AGENT_LOG_MAXLEN "10000"
#define AGENT_CKPT_INTERVAL "30"
#define AGENT_PLAN_CHECK_S 0.5 /* a job's plan version is read this often */

typedef enum {
    TASK_NEW,      /* in the desired set, to be started */
    TASK_WAITING,  /* a worker waiting for its servers' endpoints */
    TASK_STARTING, /* a server started, no endpoint printed yet */
    TASK_RUNNING,
    TASK_EXITED,  /* its process is gone (or never was: see exit_code) */
    TASK_IGNORED, /* a key flagent cannot run; logged once */
} task_phase;

typedef struct agent_task agent_task;

struct agent_task {
    agent_task *next;
    agent_node *node; /* for the line callbacks */
    char key[256];
    agent_task_id id;
    task_phase phase;
    int desired; /* in the desired set at the last look */
    uint32_t servers;
    proc *p; /* while it has a process (large: two line buffers) */
    FILE *log;
    char endpoint[256];
    char started_at[32];
    pid_t pid;             /* of its process, kept after it exited */
    int waiting_logged;    /* "waiting for the endpoints" said */
    int older_wait_logged; /* "waiting for attempt N to stop" said */
    /* Reports not yet in Redis (kept while Redis is away). */
    int report_running;
    char *done; /* the worker's "done" event */
    int report_done;
    char *profile; /* rank 0's "profile" event */
    int report_profile;
    agent_event progress, eval;
    int report_progress, report_eval;
    int report_exit;
    uint64_t exit_seq;
    int exit_code, exit_signal;
    char exited_at[32];
    /* Stopping a task that left the desired set. */
    double term_sent; /* flps_mono_s() of the SIGTERM, 0 if none */
    int killed;
};

/* The compression plan of a job with a worker on this node, followed into
 * {work_dir}/{job}/plan.json (docs/flagent.md, "Plans"). */
typedef struct agent_plan agent_plan;

struct agent_plan {
    agent_plan *next;
    char job[64];
    long long written; /* the version in the file; 0: none written */
    long long failed;  /* the version that could not be written (logged) */
    double next_check; /* flps_mono_s() of the next look at the version */
    int live;          /* a worker of the job is on the node */
};

struct agent_node {
    agent_config cfg;
    char flps_bin[PATH_MAX];
    char flworker_bin[PATH_MAX];
    char node_key[128], alive_key[128], tasks_key[128];
    long long ttl_ms;
    rconn *rc;
    int redis_ok;        /* the last Redis call worked */
    int registered;      /* registered since Redis was last reached */
    int ever_registered; /* words the logs: "lost" vs "waiting" */
    double down_since;   /* flps_mono_s() when Redis went away */
    double next_retry;
    double next_heartbeat;
    double next_reconcile;
    unsigned long dropped_lines; /* output not sent while Redis was away */
    char last_warn[600];         /* the last error reply logged, and when */
    double last_warn_at;
    agent_task *tasks;
    agent_plan *plans;
    uint64_t exit_counter;
    struct pollfd *pfds;
    agent_task **pfd_task;
    size_t pfd_cap;
};

/* ---- Redis helpers ---- */

static void wall_text(char *buf, size_t len)
{
    snprintf(buf, len, "%.3f", flps_wall_s());
}

static size_t count_live(const agent_node *n)
{
    size_t k = 0;
    for (const agent_task *t = n->tasks; t != NULL; t = t->next)
        k += t->p != NULL;
    return k;
}

/* Note the result of a Redis call: 1 when it worked. A lost connection is
 * logged once (the heartbeat stops with it) and every Redis step waits for
 * the next retry; an error reply is logged and the caller moves on. */
static int redis_result(agent_node *n, flps_err err, const char *what)
{
    if (err == FLPS_OK)
        return 1;
    if (err != FLPS_EIO) {
        /* An error reply (LOADING, OOM, a key of the wrong type) fails
         * the step, which is retried on the next turn: say so once per
         * distinct error, or every 30 s while it lasts. */
        char msg[sizeof(n->last_warn)];
        double now = flps_mono_s();
        snprintf(msg, sizeof(msg), "%s: %s", what, rconn_error(n->rc));
        if (strcmp(msg, n->last_warn) != 0 || now - n->last_warn_at >= 30) {
            log_warn("%s", msg);
            memcpy(n->last_warn, msg, sizeof(msg));
            n->last_warn_at = now;
        }
        return 0;
    }
    if (n->redis_ok) {
        if (n->ever_registered)
            log_warn("heartbeat lost: %s; %zu task(s) keep running; "
                     "retrying every %.0f s",
                     rconn_error(n->rc), count_live(n), AGENT_RETRY_S);
        else
            log_warn("%s; waiting for it, retrying every %.0f s",
                     rconn_error(n->rc), AGENT_RETRY_S);
        n->down_since = flps_mono_s();
    }
    n->redis_ok = 0;
    n->registered = 0;
    n->next_retry = flps_mono_s() + AGENT_RETRY_S;
    return 0;
}

static int redis_cmd(agent_node *n, redisReply **r, const char *what, int argc,
                     const char **argv)
{
    redisReply *reply = NULL;
    flps_err err;

    if (!n->redis_ok)
        return 0;
    err = rconn_cmdv(n->rc, &reply, argc, argv, NULL);
    if (!redis_result(n, err, what))
        return 0;
    if (r != NULL)
        *r = reply;
    else
        freeReplyObject(reply);
    return 1;
}

/* ---- Registration and heartbeat ---- */

static const char register_lua[] =
    "redis.call('SADD', KEYS[1], ARGV[1])\n"
    "redis.call('HSET', KEYS[2], 'name', ARGV[1], 'address', ARGV[2],\n"
    "  'cpus', ARGV[3], 'memory', ARGV[4], 'gpus', ARGV[5],\n"
    "  'state', 'READY', 'registered_at', ARGV[6],\n"
    "  'last_heartbeat', ARGV[6])\n"
    "redis.call('SET', KEYS[3], '1', 'PX', ARGV[7])\n"
    "return 1\n";

/* Refresh the alive key and last_heartbeat; returns the node's state so a
 * node that was marked LOST or lost with Redis's data registers again. */
static const char heartbeat_lua[] =
    "redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])\n"
    "local st = redis.call('HGET', KEYS[1], 'state')\n"
    "if st then redis.call('HSET', KEYS[1], 'last_heartbeat', ARGV[2]) end\n"
    "return st\n";

static void node_register(agent_node *n, const char *why)
{
    char cpus[32], mem[32], gpus[16], now[32], ttl[32];
    const char *argv[] = {"EVAL",       register_lua,   "3",
                          "flps:nodes", n->node_key,    n->alive_key,
                          n->cfg.name,  n->cfg.address, cpus,
                          mem,          gpus,           now,
                          ttl};

    snprintf(cpus, sizeof(cpus), "%.10g", n->cfg.cpus);
    snprintf(mem, sizeof(mem), "%llu", (unsigned long long)n->cfg.memory);
    snprintf(gpus, sizeof(gpus), "%u", n->cfg.gpus);
    snprintf(ttl, sizeof(ttl), "%lld", n->ttl_ms);
    wall_text(now, sizeof(now));
    if (!redis_cmd(n, NULL, "registering the node", 13, argv))
        return;
    n->registered = 1;
    n->next_heartbeat = flps_mono_s() + n->cfg.heartbeat;
    log_info("registered node %s%s: %g cpus, %llu bytes of memory, %u gpus, "
             "address %s, with Redis at %s (alive key TTL %lld ms)",
             n->cfg.name, why, n->cfg.cpus, (unsigned long long)n->cfg.memory,
             n->cfg.gpus, n->cfg.address, rconn_address(n->rc), n->ttl_ms);
}

static void node_heartbeat(agent_node *n)
{
    char now[32], ttl[32];
    const char *argv[] = {"EVAL",       heartbeat_lua, "2", n->node_key,
                          n->alive_key, ttl,           now};
    redisReply *r = NULL;

    snprintf(ttl, sizeof(ttl), "%lld", n->ttl_ms);
    wall_text(now, sizeof(now));
    if (!redis_cmd(n, &r, "heartbeat", 7, argv))
        return;
    n->next_heartbeat = flps_mono_s() + n->cfg.heartbeat;
    if (r->type != REDIS_REPLY_STRING)
        node_register(n, " again (its hash was missing)");
    else if (strcmp(r->str, "READY") != 0) {
        char why[64];
        snprintf(why, sizeof(why), " again (it was %.20s)", r->str);
        node_register(n, why);
    }
    freeReplyObject(r);
}

/* ---- Task bookkeeping ---- */

static agent_task *task_find(agent_node *n, const char *key)
{
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        if (strcmp(t->key, key) == 0)
            return t;
    return NULL;
}

static agent_task *task_add(agent_node *n, const char *key)
{
    agent_task *t = flps_calloc(1, sizeof(*t));

    if (t == NULL) {
        log_error("out of memory for task %s", key);
        return NULL;
    }
    t->node = n;
    snprintf(t->key, sizeof(t->key), "%s", key);
    t->next = n->tasks;
    n->tasks = t;
    return t;
}

static void task_free(agent_task *t)
{
    if (t->p != NULL) {
        if (t->p->out_fd >= 0)
            close(t->p->out_fd);
        if (t->p->err_fd >= 0)
            close(t->p->err_fd);
        flps_free(t->p);
    }
    if (t->log != NULL)
        fclose(t->log);
    flps_free(t->done);
    flps_free(t->profile);
    flps_free(t);
}

/* Mark t exited (or failed to start: exit_code -1, no process) and queue
 * its report, in the order exits happen. */
static void task_set_exited(agent_node *n, agent_task *t, int exit_code,
                            int sig)
{
    t->phase = TASK_EXITED;
    t->exit_code = exit_code;
    t->exit_signal = sig;
    wall_text(t->exited_at, sizeof(t->exited_at));
    t->exit_seq = ++n->exit_counter;
    t->report_exit = 1;
}

/* ---- Output of the tasks ---- */

static void send_line(agent_node *n, agent_task *t, const char *line)
{
    char stream[128];
    const char *argv[] = {"XADD", stream, "MAXLEN",   "~",    AGENT_LOG_MAXLEN,
                          "*",    "task", t->id.name, "line", line};

    if (t->log != NULL)
        fprintf(t->log, "%s\n", line);
    if (!n->redis_ok) {
        n->dropped_lines++;
        return;
    }
    snprintf(stream, sizeof(stream), "flps:job:%s:logs", t->id.job);
    if (!redis_cmd(n, NULL, "adding a line to the job's logs", 10, argv))
        n->dropped_lines++;
}

static void on_stdout(void *arg, proc *p, const char *line)
{
    agent_task *t = arg;
    agent_node *n = t->node;
    agent_event ev;

    (void)p;
    send_line(n, t, line);
    if (t->id.role == AGENT_ROLE_SERVER) {
        if (t->phase == TASK_STARTING &&
            strncmp(line, "listening on ", 13) == 0) {
            snprintf(t->endpoint, sizeof(t->endpoint), "%s", line + 13);
            t->phase = TASK_RUNNING;
            t->report_running = 1;
            n->next_reconcile = 0; /* workers may wait for it */
            log_info("task %s: listening on %s", t->key, t->endpoint);
        }
        return;
    }
    agent_event_parse(line, &ev);
    if (ev.kind == AGENT_EVENT_DONE) {
        char *copy = flps_strdup(line);
        if (copy == NULL) {
            log_error("task %s: out of memory for its done event", t->key);
            return;
        }
        flps_free(t->done);
        t->done = copy;
        t->report_done = 1;
    } else if (t->id.index == 0 && ev.kind == AGENT_EVENT_PROFILE) {
        char *copy = flps_strdup(line);
        if (copy == NULL) {
            log_error("task %s: out of memory for its profile", t->key);
            return;
        }
        flps_free(t->profile);
        t->profile = copy;
        t->report_profile = 1;
    } else if (t->id.index == 0 && ev.kind == AGENT_EVENT_PROGRESS) {
        t->progress = ev;
        t->report_progress = 1;
    } else if (t->id.index == 0 && ev.kind == AGENT_EVENT_EVAL) {
        t->eval = ev;
        t->report_eval = 1;
    }
}

static void on_stderr(void *arg, proc *p, const char *line)
{
    agent_task *t = arg;

    (void)p;
    send_line(t->node, t, line);
}

/* Read what every child printed, waiting up to timeout_ms for something
 * to happen. */
static void pump(agent_node *n, int timeout_ms)
{
    size_t k = 0, need = 0;
    int ready;

    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        if (t->p != NULL)
            need += 2;
    if (need > n->pfd_cap) {
        struct pollfd *pf = flps_realloc(n->pfds, need * sizeof(*pf));
        agent_task **pt;
        if (pf == NULL)
            goto sleep;
        n->pfds = pf;
        pt = flps_realloc(n->pfd_task, need * sizeof(*pt));
        if (pt == NULL)
            goto sleep;
        n->pfd_task = pt;
        n->pfd_cap = need;
    }
    for (agent_task *t = n->tasks; t != NULL; t = t->next) {
        if (t->p == NULL)
            continue;
        if (t->p->out_fd >= 0) {
            n->pfds[k] = (struct pollfd){t->p->out_fd, POLLIN, 0};
            n->pfd_task[k++] = t;
        }
        if (t->p->err_fd >= 0) {
            n->pfds[k] = (struct pollfd){t->p->err_fd, POLLIN, 0};
            n->pfd_task[k++] = t;
        }
    }
    ready = poll(n->pfds, k, timeout_ms); /* k == 0 just sleeps */
    if (ready <= 0)
        return;
    for (size_t i = 0; i < k; i++) {
        agent_task *t = n->pfd_task[i];
        if (n->pfds[i].revents == 0)
            continue;
        if (n->pfds[i].fd == t->p->out_fd)
            proc_read_lines(t->p, on_stdout, t);
        else if (n->pfds[i].fd == t->p->err_fd)
            proc_read_err_lines(t->p, on_stderr, t);
    }
    return;
sleep:
    log_error("out of memory for the poll set");
    poll(NULL, 0, timeout_ms);
}

/* Reap the children that exited: read the rest of what they printed
 * first, so a worker's done event is stored before its exit is reported. */
static void reap(agent_node *n)
{
    for (agent_task *t = n->tasks; t != NULL; t = t->next) {
        int status, code, sig;
        char how[96];

        if (t->p == NULL || waitpid(t->p->pid, &status, WNOHANG) != t->p->pid)
            continue;
        /* Reads to the end of the pipe, or to what is there when a
         * grandchild still holds it. */
        proc_read_lines(t->p, on_stdout, t);
        proc_read_err_lines(t->p, on_stderr, t);
        agent_exit_fields(status, &code, &sig);
        if (sig != 0)
            snprintf(how, sizeof(how), "killed by signal %d (%s)", sig,
                     strsignal(sig));
        else
            snprintf(how, sizeof(how), "exited with status %d", code);
        log_info("task %s: pid %d %s", t->key, (int)t->p->pid, how);
        if (t->p->out_fd >= 0)
            close(t->p->out_fd);
        if (t->p->err_fd >= 0)
            close(t->p->err_fd);
        flps_free(t->p);
        t->p = NULL;
        if (t->log != NULL) {
            fclose(t->log);
            t->log = NULL;
        }
        task_set_exited(n, t, code, sig);
    }
}

/* ---- Reports ---- */

/* State EXITED and the queue entry for flsched, atomically: flsched never
 * sees the key on flps:exits before the hash says how the task ended. */
static const char exit_lua[] =
    "redis.call('HSET', KEYS[1], 'state', 'EXITED', 'exit_code', ARGV[1],\n"
    "  'signal', ARGV[2], 'exited_at', ARGV[3])\n"
    "redis.call('RPUSH', KEYS[2], KEYS[1])\n"
    "return 1\n";

static int hset_event(agent_node *n, const char *job, const agent_event *ev)
{
    char key[128];
    const char *argv[2 + 2 * AGENT_EVENT_MAX_FIELDS];
    int argc = 0;

    if (ev->nfields == 0)
        return 1;
    snprintf(key, sizeof(key), "flps:job:%s", job);
    argv[argc++] = "HSET";
    argv[argc++] = key;
    for (int i = 0; i < ev->nfields; i++) {
        argv[argc++] = ev->fields[i];
        argv[argc++] = ev->values[i];
    }
    return redis_cmd(n, NULL, "storing the job's progress", argc, argv);
}

/* Everything but the exit, which goes in exit order. 1 when all done. */
static int flush_task(agent_node *n, agent_task *t)
{
    if (t->report_running) {
        char pid[16];
        const char *argv[] = {
            "HSET", t->key,       "state",       "RUNNING",  "pid",
            pid,    "started_at", t->started_at, "endpoint", t->endpoint};
        snprintf(pid, sizeof(pid), "%d", (int)t->pid);
        if (!redis_cmd(n, NULL, "storing the task's state",
                       t->endpoint[0] ? 10 : 8, argv))
            return 0;
        t->report_running = 0;
    }
    if (t->report_progress) {
        if (!hset_event(n, t->id.job, &t->progress))
            return 0;
        t->report_progress = 0;
    }
    if (t->report_eval) {
        if (!hset_event(n, t->id.job, &t->eval))
            return 0;
        t->report_eval = 0;
    }
    if (t->report_profile) {
        char key[128], attempt[16];
        const char *argv[] = {
            "HSET", key, "profile", t->profile, "profile_attempt", attempt};
        snprintf(key, sizeof(key), "flps:job:%s", t->id.job);
        snprintf(attempt, sizeof(attempt), "%u", t->id.attempt);
        if (!redis_cmd(n, NULL, "storing the job's profile", 6, argv))
            return 0;
        t->report_profile = 0;
        log_info("task %s: profile stored in %s (attempt %u)", t->key, key,
                 t->id.attempt);
    }
    if (t->report_done) {
        const char *argv[] = {"HSET", t->key, "done", t->done};
        if (!redis_cmd(n, NULL, "storing the worker's done event", 4, argv))
            return 0;
        t->report_done = 0;
    }
    return 1;
}

static void flush_reports(agent_node *n)
{
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        if (!flush_task(n, t))
            return;
    for (;;) {
        agent_task *first = NULL;
        char code[16], sig[16];
        const char *argv[] = {"EVAL",       exit_lua, "2", NULL,
                              "flps:exits", code,     sig, NULL};

        for (agent_task *t = n->tasks; t != NULL; t = t->next)
            if (t->report_exit &&
                (first == NULL || t->exit_seq < first->exit_seq))
                first = t;
        if (first == NULL)
            return;
        argv[3] = first->key;
        argv[7] = first->exited_at;
        snprintf(code, sizeof(code), "%d", first->exit_code);
        snprintf(sig, sizeof(sig), "%d", first->exit_signal);
        if (!redis_cmd(n, NULL, "reporting the task's exit", 8, argv))
            return;
        first->report_exit = 0;
    }
}

/* ---- Starting tasks ---- */

static void task_fail(agent_node *n, agent_task *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The task cannot run: say why in the agent's log and the job's logs, and
 * report it as exited with exit_code -1 so flsched does not wait for it. */
static void task_fail(agent_node *n, agent_task *t, const char *fmt, ...)
{
    char msg[512], line[700];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_error("task %s: cannot start: %s", t->key, msg);
    snprintf(line, sizeof(line), "flagent: cannot start %s on node %s: %s",
             t->id.name, n->cfg.name, msg);
    send_line(n, t, line);
    task_set_exited(n, t, -1, 0);
}

/* The job's server count (job hash field servers, else from its spec) and
 * optionally a copy of its spec (caller frees). 1 when known, 0 when the
 * job cannot be run (task failed), -1 when Redis did not answer. */
static int job_info(agent_node *n, agent_task *t, uint32_t *servers,
                    char **spec_out)
{
    char key[128];
    const char *argv[] = {"HMGET", key, "servers", "spec"};
    redisReply *r = NULL;
    const char *sv = NULL, *spec = NULL;
    size_t speclen = 0;
    int ok = 0;

    snprintf(key, sizeof(key), "flps:job:%s", t->id.job);
    if (!redis_cmd(n, &r, "reading the job", 4, argv))
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING)
            sv = r->element[0]->str;
        if (r->element[1]->type == REDIS_REPLY_STRING) {
            spec = r->element[1]->str;
            speclen = r->element[1]->len;
        }
    }
    if (sv != NULL) {
        uint64_t v;
        /* The bounds of a job file's servers (services/jobspec.c). */
        if (flps_parse_u64("servers", sv, 1, 256, &v, NULL, 0) == FLPS_OK) {
            *servers = (uint32_t)v;
            ok = 1;
        }
    }
    if (!ok && spec != NULL) {
        jobspec js;
        if (jobspec_parse(spec, speclen, &js, NULL, 0) == FLPS_OK) {
            *servers = js.servers;
            ok = 1;
        }
    }
    if (!ok) {
        task_fail(n, t,
                  "job %s in Redis has neither a valid 'servers' field nor "
                  "a job file ('spec') that gives it",
                  t->id.job);
        freeReplyObject(r);
        return 0;
    }
    if (spec_out != NULL) {
        if (spec == NULL) {
            task_fail(n, t, "job %s in Redis has no job file ('spec')",
                      t->id.job);
            freeReplyObject(r);
            return 0;
        }
        *spec_out = flps_malloc(speclen + 1);
        if (*spec_out == NULL) {
            task_fail(n, t, "out of memory");
            freeReplyObject(r);
            return 0;
        }
        memcpy(*spec_out, spec, speclen);
        (*spec_out)[speclen] = '\0';
    }
    freeReplyObject(r);
    return 1;
}

/* Start the task's process; its output is read by pump(). */
static int task_spawn(agent_node *n, agent_task *t, char *const argv[])
{
    char dir[PATH_MAX], path[PATH_MAX + 64], name[100];
    proc_opts o;

    if (snprintf(dir, sizeof(dir), "%s/%s/attempt-%u", n->cfg.work_dir,
                 t->id.job, t->id.attempt) >= (int)sizeof(dir) ||
        flps_mkdirs(dir) != 0) {
        task_fail(n, t, "cannot create %s: %s", dir, strerror(errno));
        return 0;
    }
    snprintf(path, sizeof(path), "%s/%s.log", dir, t->id.name);
    t->log = fopen(path, "a");
    if (t->log == NULL)
        log_warn("task %s: cannot open %s: %s (output goes to Redis only)",
                 t->key, path, strerror(errno));
    else
        setvbuf(t->log, NULL, _IOLBF, 0);
    t->p = flps_malloc(sizeof(*t->p));
    if (t->p == NULL) {
        task_fail(n, t, "out of memory");
        return 0;
    }
    memset(&o, 0, sizeof(o));
    o.pipe_stderr = 1;
    o.own_group = 1;
    o.die_with_parent = 1;
    snprintf(name, sizeof(name), "%s/%s", t->id.job, t->id.name);
    if (proc_start_opts(t->p, name, argv, &o) != FLPS_OK) {
        flps_free(t->p);
        t->p = NULL;
        task_fail(n, t, "cannot start %s (see flagent's log)", argv[0]);
        return 0;
    }
    wall_text(t->started_at, sizeof(t->started_at));
    t->pid = t->p->pid;
    log_info("task %s: started %s, pid %d", t->key,
             strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0],
             (int)t->p->pid);
    return 1;
}

static void start_server(agent_node *n, agent_task *t)
{
    char shard[16], shards[16], listen_ep[96], ckpt[PATH_MAX];
    char *argv[16];
    int a = 0;

    if (job_info(n, t, &t->servers, NULL) != 1)
        return; /* -1: Redis is away and t stays new; 0: failed */
    if (t->id.index >= t->servers) {
        task_fail(n, t, "server index %u is not below the job's %u servers",
                  t->id.index, t->servers);
        return;
    }
    snprintf(shard, sizeof(shard), "%u", t->id.index);
    snprintf(shards, sizeof(shards), "%u", t->servers);
    snprintf(listen_ep, sizeof(listen_ep), "tcp://%s:0", n->cfg.address);
    snprintf(ckpt, sizeof(ckpt), "%s/%s/ckpt", n->cfg.ckpt_root, t->id.job);
    argv[a++] = n->flps_bin;
    argv[a++] = "--job";
    argv[a++] = t->id.job;
    argv[a++] = "--shard";
    argv[a++] = shard;
    argv[a++] = "--shards";
    argv[a++] = shards;
    argv[a++] = "--listen";
    argv[a++] = listen_ep;
    argv[a++] = "--checkpoint-dir";
    argv[a++] = ckpt;
    argv[a++] = "--checkpoint-interval";
    argv[a++] = AGENT_CKPT_INTERVAL;
    if (t->id.attempt > 0)
        argv[a++] = "--restore";
    argv[a] = NULL;
    if (task_spawn(n, t, argv))
        t->phase = TASK_STARTING;
}

/* Write len bytes to path through tmp renamed into place, so a reader
 * never sees half of it. 0 on success, else errno (tmp is removed). */
static int write_file_atomic(const char *path, const char *tmp,
                             const char *data, size_t len)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), e;

    if (fd >= 0 && write(fd, data, len) == (ssize_t)len && close(fd) == 0) {
        fd = -1;
        if (rename(tmp, path) == 0)
            return 0;
    }
    e = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return e;
}

/* Write the job file where the workers read it: a temporary file renamed
 * into place, so a worker starting meanwhile never reads half of it. */
static int write_job_file(agent_node *n, agent_task *t, const char *spec,
                          char *path, size_t len)
{
    char tmp[PATH_MAX + 64];
    int e;

    snprintf(tmp, sizeof(tmp), "%s/%s", n->cfg.work_dir, t->id.job);
    if (flps_mkdirs(tmp) != 0) {
        task_fail(n, t, "cannot create %s: %s", tmp, strerror(errno));
        return 0;
    }
    snprintf(path, len, "%s/%s/job.yaml", n->cfg.work_dir, t->id.job);
    snprintf(tmp, sizeof(tmp), "%s.%s.tmp", path, t->id.name);
    e = write_file_atomic(path, tmp, spec, strlen(spec));
    if (e != 0) {
        task_fail(n, t, "cannot write %s: %s", path, strerror(e));
        return 0;
    }
    return 1;
}

/* ---- Plans ---- */

static void plan_path(const agent_node *n, const char *job, char *path,
                      size_t len)
{
    snprintf(path, len, "%s/%s/plan.json", n->cfg.work_dir, job);
}

static agent_plan *plan_find(agent_node *n, const char *job)
{
    agent_plan *pl;

    for (pl = n->plans; pl != NULL; pl = pl->next)
        if (strcmp(pl->job, job) == 0)
            return pl;
    pl = flps_calloc(1, sizeof(*pl));
    if (pl == NULL) {
        log_error("job %s: out of memory to follow its plan", job);
        return NULL;
    }
    snprintf(pl->job, sizeof(pl->job), "%s", job);
    pl->next = n->plans;
    n->plans = pl;
    return pl;
}

/* A version number as flsched writes it; 0 for anything else. */
static long long plan_version(const redisReply *r)
{
    int64_t v;

    if (r == NULL || r->type != REDIS_REPLY_STRING ||
        flps_parse_i64(NULL, r->str, 1, INT64_MAX, &v, NULL, 0) != FLPS_OK)
        return 0;
    return (long long)v;
}

/* Look at the job's plan version (one HGET) and, when it is newer than
 * the file's, write the stored plan to the file. A file that cannot be
 * written is tried again at the next look, and said once per version. */
static void plan_check(agent_node *n, agent_plan *pl)
{
    char key[128], path[PATH_MAX], tmp[PATH_MAX + 16];
    const char *hget_argv[] = {"HGET", key, "version"};
    const char *hmget_argv[] = {"HMGET", key, "version", "plan"};
    redisReply *r = NULL;
    long long v;
    int e;

    pl->next_check = flps_mono_s() + AGENT_PLAN_CHECK_S;
    snprintf(key, sizeof(key), "flps:job:%s:plan", pl->job);
    if (!redis_cmd(n, &r, "reading the job's plan version", 3, hget_argv))
        return;
    v = plan_version(r);
    freeReplyObject(r);
    if (v <= pl->written)
        return;
    if (!redis_cmd(n, &r, "reading the job's plan", 4, hmget_argv))
        return;
    /* Version and plan from one read: the plan may have moved on since
     * the HGET. */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_STRING ||
        (v = plan_version(r->element[0])) <= pl->written) {
        freeReplyObject(r);
        return;
    }
    snprintf(tmp, sizeof(tmp), "%s/%s", n->cfg.work_dir, pl->job);
    plan_path(n, pl->job, path, sizeof(path));
    if (flps_mkdirs(tmp) != 0)
        e = errno;
    else {
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        e = write_file_atomic(path, tmp, r->element[1]->str,
                              r->element[1]->len);
    }
    freeReplyObject(r);
    if (e != 0) {
        if (pl->failed != v)
            log_warn("job %s: cannot write plan v%lld to %s: %s; trying "
                     "again",
                     pl->job, v, path, strerror(e));
        pl->failed = v;
        return;
    }
    log_info("job %s: plan v%lld written to %s", pl->job, v, path);
    pl->written = v;
}

/* Follow the plan of every job with a worker task on this node (waiting
 * or running), each at most every AGENT_PLAN_CHECK_S; forget the others. */
static void plans_follow(agent_node *n)
{
    double now = flps_mono_s();
    agent_plan **pp;

    for (agent_plan *pl = n->plans; pl != NULL; pl = pl->next)
        pl->live = 0;
    for (agent_task *t = n->tasks; t != NULL; t = t->next) {
        agent_plan *pl;

        if (t->id.role != AGENT_ROLE_WORKER || !t->desired ||
            (t->phase != TASK_NEW && t->phase != TASK_WAITING &&
             t->phase != TASK_RUNNING))
            continue;
        pl = plan_find(n, t->id.job);
        if (pl != NULL)
            pl->live = 1;
    }
    for (pp = &n->plans; *pp != NULL;) {
        agent_plan *pl = *pp;

        if (pl->live) {
            if (n->redis_ok && now >= pl->next_check)
                plan_check(n, pl);
            pp = &pl->next;
            continue;
        }
        *pp = pl->next;
        flps_free(pl);
    }
}

static void try_start_worker(agent_node *n, agent_task *t)
{
    char key[160], list[256 * 130], job_path[PATH_MAX], rank[16];
    char plan_file[PATH_MAX];
    char *spec = NULL;
    size_t used = 0;
    int rc;

    if (t->servers == 0 && job_info(n, t, &t->servers, NULL) != 1)
        return;
    list[0] = '\0';
    for (uint32_t i = 0; i < t->servers; i++) {
        const char *argv[] = {"HGET", key, "endpoint"};
        redisReply *r = NULL;
        snprintf(key, sizeof(key), "flps:task:%s:%u:server-%u", t->id.job,
                 t->id.attempt, i);
        if (!redis_cmd(n, &r, "reading a server's endpoint", 3, argv))
            return;
        if (r->type != REDIS_REPLY_STRING || r->len == 0 ||
            used + r->len + 2 > sizeof(list)) {
            freeReplyObject(r);
            t->phase = TASK_WAITING;
            if (!t->waiting_logged)
                log_info("task %s: waiting for the endpoints of the job's "
                         "%u server(s)",
                         t->key, t->servers);
            t->waiting_logged = 1;
            return;
        }
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
                                 i ? "," : "", r->str);
        freeReplyObject(r);
    }
    rc = job_info(n, t, &t->servers, &spec);
    if (rc != 1)
        return;
    if (write_job_file(n, t, spec, job_path, sizeof(job_path))) {
        char *argv[] = {
            n->flworker_bin, "--job", job_path,   "--rank",  rank,
            "--servers",     list,    "--job-id", t->id.job, "--plan",
            plan_file,       NULL};
        agent_plan *pl = plan_find(n, t->id.job);

        /* The plan file, when there is a plan, is there before the
         * worker's first iteration; without one the worker runs as the
         * job file says until a plan appears. */
        if (pl != NULL && pl->written == 0)
            plan_check(n, pl);
        plan_path(n, t->id.job, plan_file, sizeof(plan_file));
        snprintf(rank, sizeof(rank), "%u", t->id.index);
        if (task_spawn(n, t, argv)) {
            t->phase = TASK_RUNNING;
            t->report_running = 1;
        }
    }
    flps_free(spec);
}

/* ---- Reconciliation ---- */

static void task_stop(agent_task *t, const char *why)
{
    if (t->p == NULL || t->term_sent > 0)
        return;
    kill(t->p->pid, SIGTERM);
    t->term_sent = flps_mono_s();
    log_info("task %s: %s: SIGTERM to pid %d", t->key, why, (int)t->p->pid);
}

static void enforce_kills(agent_node *n)
{
    double now = flps_mono_s();

    for (agent_task *t = n->tasks; t != NULL; t = t->next) {
        if (t->p == NULL || t->term_sent == 0 || t->killed ||
            now - t->term_sent < AGENT_STOP_GRACE_S)
            continue;
        kill(t->p->pid, SIGKILL);
        t->killed = 1;
        log_warn("task %s: pid %d still runs %.0f s after SIGTERM: SIGKILL",
                 t->key, (int)t->p->pid, AGENT_STOP_GRACE_S);
    }
}

/* A key of the desired set this agent does not know yet. */
static void task_consider(agent_node *n, const char *key)
{
    const char *argv[] = {"HGET", key, "state"};
    redisReply *r = NULL;
    agent_task *t;
    char state[16] = "";

    if (!redis_cmd(n, &r, "reading a task", 3, argv))
        return;
    if (r->type == REDIS_REPLY_STRING)
        snprintf(state, sizeof(state), "%s", r->str);
    freeReplyObject(r);
    t = task_add(n, key);
    if (t == NULL)
        return;
    t->desired = 1;
    if (agent_task_key_parse(key, &t->id) != FLPS_OK) {
        t->phase = TASK_IGNORED;
        log_warn("task key %s in %s is not "
                 "flps:task:{job}:{attempt}:{server|worker}-{index}: ignored",
                 key, n->tasks_key);
        return;
    }
    if (strcmp(state, "EXITED") == 0) {
        t->phase = TASK_EXITED; /* ran before; never run twice */
        return;
    }
    if (strcmp(state, "RUNNING") == 0) {
        /* Its process belonged to an agent before this one and died with
         * it (children die with their agent). */
        log_warn("task %s: RUNNING in Redis but no process of this agent "
                 "runs it: reported as exited with exit_code -1",
                 key);
        task_set_exited(n, t, -1, 0);
        return;
    }
    t->phase = TASK_NEW; /* reconcile() starts it */
}

/* Whether a process of an earlier attempt of t's job still runs here. A
 * new attempt's server restores from the checkpoint directory the old
 * one writes its last checkpoint into when it stops, so it starts only
 * once the old processes are gone. */
static int older_attempt_runs(agent_node *n, agent_task *t)
{
    for (agent_task *u = n->tasks; u != NULL; u = u->next) {
        if (u->p == NULL || u->id.attempt >= t->id.attempt ||
            strcmp(u->id.job, t->id.job) != 0)
            continue;
        if (!t->older_wait_logged)
            log_info("task %s: waiting for attempt %u of job %s to stop "
                     "on this node",
                     t->key, u->id.attempt, t->id.job);
        t->older_wait_logged = 1;
        return 1;
    }
    return 0;
}

static void reconcile(agent_node *n)
{
    const char *argv[] = {"SMEMBERS", n->tasks_key};
    redisReply *r = NULL;
    agent_task **pp;

    if (!redis_cmd(n, &r, "reading the node's tasks", 2, argv))
        return;
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        t->desired = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *e = r->element[i];
        agent_task *t;
        if (e->type != REDIS_REPLY_STRING)
            continue;
        t = task_find(n, e->str);
        if (t != NULL)
            t->desired = 1;
        else
            task_consider(n, e->str);
        if (!n->redis_ok)
            break;
    }
    freeReplyObject(r);
    if (!n->redis_ok)
        return; /* a partial view: change nothing on it */
    /* Stops first: a restarted attempt must not start beside the old one
     * (its servers would share the checkpoint directory). */
    for (pp = &n->tasks; *pp != NULL;) {
        agent_task *t = *pp;
        if (t->desired || t->p != NULL || t->report_exit || t->report_running ||
            t->report_done || t->report_profile) {
            if (!t->desired)
                task_stop(t, "left the node's desired set");
            pp = &t->next;
            continue;
        }
        *pp = t->next; /* not running, nothing to report: forget it */
        task_free(t);
    }
    for (agent_task *t = n->tasks; t != NULL && n->redis_ok; t = t->next) {
        if (!t->desired || (t->phase != TASK_NEW && t->phase != TASK_WAITING))
            continue;
        if (older_attempt_runs(n, t))
            continue;
        if (t->phase == TASK_NEW && t->id.role == AGENT_ROLE_SERVER)
            start_server(n, t);
        else
            try_start_worker(n, t);
    }
}

/* ---- The loop ---- */

static void try_reconnect(agent_node *n)
{
    double away = flps_mono_s() - n->down_since;

    if (rconn_ping(n->rc) != FLPS_OK) {
        n->next_retry = flps_mono_s() + AGENT_RETRY_S;
        return;
    }
    n->redis_ok = 1;
    if (n->ever_registered)
        log_info("heartbeat restored: Redis at %s answers again after %.1f s",
                 rconn_address(n->rc), away);
    else
        log_info("Redis at %s answers after %.1f s of waiting",
                 rconn_address(n->rc), away);
    if (n->dropped_lines > 0) {
        log_warn("%lu output line(s) of tasks could not be sent to the "
                 "job logs in Redis meanwhile; they are in the task log "
                 "files under %s",
                 n->dropped_lines, n->cfg.work_dir);
        n->dropped_lines = 0;
    }
}

static void sync_redis(agent_node *n)
{
    double now = flps_mono_s();

    if (!n->registered) {
        node_register(n, n->ever_registered ? " again" : "");
        if (!n->registered)
            return;
        n->ever_registered = 1;
        n->next_reconcile = 0;
    } else if (now >= n->next_heartbeat) {
        node_heartbeat(n);
    }
    flush_reports(n);
    if (n->redis_ok && now >= n->next_reconcile) {
        n->next_reconcile = now + AGENT_LOOP_MS / 1000.0;
        reconcile(n);
        flush_reports(n);
    }
    if (n->redis_ok)
        plans_follow(n);
}

static void shut_down(agent_node *n, int sig)
{
    size_t live = count_live(n);

    log_info("signal %d: stopping %zu task(s)", sig, live);
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        task_stop(t, "flagent is stopping");
    while (count_live(n) > 0) {
        pump(n, 100);
        reap(n);
        enforce_kills(n);
    }
    if (!n->redis_ok) {
        n->next_retry = 0;
        try_reconnect(n);
    }
    if (n->redis_ok)
        flush_reports(n);
    log_info("stopped %zu task(s); exiting (the node becomes LOST when its "
             "alive key expires)",
             live);
}

flps_err agent_node_run(agent_node *n, volatile sig_atomic_t *stop)
{
    n->redis_ok = 1; /* until a call says otherwise */
    while (!*stop) {
        reap(n);
        if (!n->redis_ok && flps_mono_s() >= n->next_retry)
            try_reconnect(n);
        if (n->redis_ok)
            sync_redis(n);
        enforce_kills(n);
        pump(n, AGENT_LOOP_MS);
    }
    shut_down(n, (int)*stop);
    return FLPS_OK;
}

/* ---- Life cycle ---- */

static int dir_has_bins(const char *dir, char *flps_bin, char *worker_bin,
                        size_t len)
{
    return snprintf(flps_bin, len, "%s/flps", dir) < (int)len &&
           snprintf(worker_bin, len, "%s/flworker", dir) < (int)len &&
           access(flps_bin, X_OK) == 0 && access(worker_bin, X_OK) == 0;
}

flps_err agent_node_find_bins(char *dir, size_t len, char *errbuf,
                              size_t errlen)
{
    char self[PATH_MAX], a[PATH_MAX + 16], b[PATH_MAX + 16];
    const char *env = getenv("FLPS_BIN_DIR");
    ssize_t k;
    char *slash;

    if (env != NULL && env[0] != '\0') {
        if (dir_has_bins(env, a, b, sizeof(a)) &&
            snprintf(dir, len, "%s", env) < (int)len)
            return FLPS_OK;
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "FLPS_BIN_DIR=%s does not hold executable "
                               "flps and flworker",
                               env);
    }
    k = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (k > 0) {
        self[k] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            if (dir_has_bins(self, a, b, sizeof(a)) &&
                snprintf(dir, len, "%s", self) < (int)len)
                return FLPS_OK;
        }
    }
    return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                           "cannot find executable flps and flworker next "
                           "to flagent (%s); set FLPS_BIN_DIR to their "
                           "directory",
                           k > 0 ? self : "unknown directory");
}

flps_err agent_node_create(const agent_config *cfg, const char *bin_dir,
                           agent_node **out)
{
    agent_node *n = flps_calloc(1, sizeof(*n));
    flps_err rc;

    if (n == NULL)
        return FLPS_ENOMEM;
    n->cfg = *cfg;
    if (!dir_has_bins(bin_dir, n->flps_bin, n->flworker_bin,
                      sizeof(n->flps_bin))) {
        log_error("%s does not hold executable flps and flworker", bin_dir);
        rc = FLPS_EINVAL;
        goto fail;
    }
    if (flps_mkdirs(cfg->work_dir) != 0) {
        log_error("cannot create the work dir %s: %s", cfg->work_dir,
                  strerror(errno));
        rc = FLPS_ESYS;
        goto fail;
    }
    snprintf(n->node_key, sizeof(n->node_key), "flps:node:%s", cfg->name);
    snprintf(n->alive_key, sizeof(n->alive_key), "flps:node:%s:alive",
             cfg->name);
    snprintf(n->tasks_key, sizeof(n->tasks_key), "flps:node:%s:tasks",
             cfg->name);
    n->ttl_ms = agent_config_ttl_ms(cfg);
    rc = rconn_create(cfg->redis_url, AGENT_REDIS_TIMEOUT_MS, &n->rc);
    if (rc != FLPS_OK)
        goto fail;
    *out = n;
    return FLPS_OK;

fail:
    flps_free(n);
    return rc;
}

void agent_node_destroy(agent_node *n)
{
    if (n == NULL)
        return;
    while (n->tasks != NULL) {
        agent_task *t = n->tasks;
        n->tasks = t->next;
        if (t->p != NULL) {
            kill(t->p->pid, SIGKILL);
            waitpid(t->p->pid, NULL, 0);
        }
        task_free(t);
    }
    while (n->plans != NULL) {
        agent_plan *pl = n->plans;
        n->plans = pl->next;
        flps_free(pl);
    }
    rconn_destroy(n->rc);
    flps_free(n->pfds);
    flps_free(n->pfd_task);
    flps_free(n);
}
