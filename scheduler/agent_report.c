/* What the node agent's tasks print and how they end, to Redis: each
 * line to the job's log stream, a worker's events to the job and task
 * hashes, and exits to flps:exits in the order they happened. */
#include "scheduler/agent_node_impl.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "scheduler/agent_task.h"
#include "services/procs.h"

/* ---- Output of the tasks ---- */

void agent_report_line(agent_node *n, agent_task *t, const char *line)
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
    if (!agent_node_redis_cmd(n, NULL, "adding a line to the job's logs", 10,
                              argv))
        n->dropped_lines++;
}

/* Keep a copy of line in *slot (replacing what was there) until it is
 * reported, as the done and profile events are stored whole. 0 when out
 * of memory (logged, naming what); the slot is then unchanged. */
static int keep_line(agent_task *t, char **slot, const char *line,
                     const char *what)
{
    char *copy = flps_strdup(line);

    if (copy == NULL) {
        log_error("task %s: out of memory for %s", t->key, what);
        return 0;
    }
    flps_free(*slot);
    *slot = copy;
    return 1;
}

/* The bytes fields of a progress event, for the task hash. */
static void keep_bytes(agent_task *t, const agent_event *ev)
{
    for (int i = 0; i < ev->nfields; i++) {
        if (strcmp(ev->fields[i], "p_bytes_sent") == 0)
            snprintf(t->sent, sizeof(t->sent), "%s", ev->values[i]);
        else if (strcmp(ev->fields[i], "p_dense_bytes") == 0)
            snprintf(t->dense, sizeof(t->dense), "%s", ev->values[i]);
    }
    t->report_sent = t->sent[0] != '\0';
}

static void on_stdout(void *arg, proc *p, const char *line)
{
    agent_task *t = arg;
    agent_node *n = t->node;
    agent_event ev;

    (void)p;
    agent_report_line(n, t, line);
    if (agent_metrics_task_line(t, line))
        return;
    if (t->id.role == AGENT_ROLE_SERVER) {
        if (t->phase == AGENT_TASK_STARTING &&
            strncmp(line, "listening on ", 13) == 0) {
            snprintf(t->endpoint, sizeof(t->endpoint), "%s", line + 13);
            t->phase = AGENT_TASK_RUNNING;
            t->report_running = 1;
            n->next_reconcile = 0; /* workers may wait for it */
            log_info("task %s: listening on %s", t->key, t->endpoint);
        }
        return;
    }
    agent_event_parse(line, &ev);
    if (ev.kind == AGENT_EVENT_PROGRESS)
        keep_bytes(t, &ev);
    if (ev.kind == AGENT_EVENT_DONE) {
        if (keep_line(t, &t->done, line, "its done event"))
            t->report_done = 1;
    } else if (t->id.index == 0 && ev.kind == AGENT_EVENT_PROFILE) {
        if (keep_line(t, &t->profile, line, "its profile"))
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
    agent_report_line(t->node, t, line);
    agent_error_line(line, strlen(line), t->last_error, sizeof(t->last_error));
}

void agent_report_pump(agent_node *n, int timeout_ms)
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

void agent_report_reap(agent_node *n)
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
        agent_node_task_close(t);
        agent_clock_restore(n, t);
        agent_node_task_set_exited(n, t, code, sig);
    }
}

/* ---- Reports ---- */

/* State EXITED and the queue entry for flsched, atomically: flsched never
 * sees the key on flps:exits before the hash says how the task ended. */
static const char exit_lua[] =
    "redis.call('HSET', KEYS[1], 'state', 'EXITED', 'exit_code', ARGV[1],\n"
    "  'signal', ARGV[2], 'exited_at', ARGV[3], 'error', ARGV[4])\n"
    "redis.call('RPUSH', KEYS[2], KEYS[1])\n"
    "return 1\n";

const char agent_job_report_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV))\n"
    "return 1\n";

/* Set fields of t's job hash through agent_job_report_lua: 1 when done
 * (or when the job is gone: said once per task, and the report dropped),
 * 0 when Redis failed (kept for the next flush). */
static int report_to_job(agent_node *n, agent_task *t, const char *what,
                         int nargs, const char **args)
{
    char key[128];
    const char *argv[4 + 2 * AGENT_EVENT_MAX_FIELDS + 4];
    redisReply *r = NULL;
    int argc = 0, set;

    /* Callers pass an event's fields or the profile's four. */
    snprintf(key, sizeof(key), "flps:job:%s", t->id.job);
    argv[argc++] = "EVAL";
    argv[argc++] = agent_job_report_lua;
    argv[argc++] = "1";
    argv[argc++] = key;
    for (int i = 0; i < nargs; i++)
        argv[argc++] = args[i];
    if (!agent_node_redis_cmd(n, &r, what, argc, argv))
        return 0;
    set = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (!set && !t->job_gone_logged) {
        log_warn("task %s: job %s has no hash in Redis any more; its "
                 "reports are dropped, not written into a new one",
                 t->key, t->id.job);
        t->job_gone_logged = 1;
    }
    return 1;
}

static int hset_event(agent_node *n, agent_task *t, const agent_event *ev)
{
    const char *args[2 * AGENT_EVENT_MAX_FIELDS];
    int nargs = 0;

    if (ev->nfields == 0)
        return 1;
    for (int i = 0; i < ev->nfields; i++) {
        args[nargs++] = ev->fields[i];
        args[nargs++] = ev->values[i];
    }
    return report_to_job(n, t, "storing the job's progress", nargs, args);
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
        if (!agent_node_redis_cmd(n, NULL, "storing the task's state",
                                  t->endpoint[0] ? 10 : 8, argv))
            return 0;
        t->report_running = 0;
    }
    if (!agent_metrics_flush_task(n, t))
        return 0;
    if (t->report_progress) {
        if (!hset_event(n, t, &t->progress))
            return 0;
        t->report_progress = 0;
    }
    if (t->report_eval) {
        if (!hset_event(n, t, &t->eval))
            return 0;
        t->report_eval = 0;
    }
    if (t->report_sent) {
        const char *argv[] = {"HSET",          t->key,
                              "p_bytes_sent",  t->sent,
                              "p_dense_bytes", t->dense[0] ? t->dense : "0"};
        if (!agent_node_redis_cmd(n, NULL, "storing the worker's bytes", 6,
                                  argv))
            return 0;
        t->report_sent = 0;
    }
    if (t->report_profile) {
        char attempt[16];
        const char *args[] = {"profile", t->profile, "profile_attempt",
                              attempt};
        snprintf(attempt, sizeof(attempt), "%u", t->id.attempt);
        if (!report_to_job(n, t, "storing the job's profile", 4, args))
            return 0;
        t->report_profile = 0;
        if (!t->job_gone_logged)
            log_info("task %s: profile stored in flps:job:%s (attempt %u)",
                     t->key, t->id.job, t->id.attempt);
    }
    if (t->report_done) {
        const char *argv[] = {"HSET", t->key, "done", t->done};
        if (!agent_node_redis_cmd(n, NULL, "storing the worker's done event", 4,
                                  argv))
            return 0;
        t->report_done = 0;
    }
    return 1;
}

void agent_report_flush(agent_node *n)
{
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        if (!flush_task(n, t))
            return;
    for (;;) {
        agent_task *first = NULL;
        char code[16], sig[16];
        const char *argv[] = {"EVAL", exit_lua, "2",  NULL, "flps:exits",
                              code,   sig,      NULL, NULL};

        for (agent_task *t = n->tasks; t != NULL; t = t->next)
            if (t->report_exit &&
                (first == NULL || t->exit_seq < first->exit_seq))
                first = t;
        if (first == NULL)
            return;
        argv[3] = first->key;
        argv[7] = first->exited_at;
        /* Why flagent could not start it; else the last error line the
         * process itself wrote on its stderr (whole: a line read back from
         * the end of its log could be cut, or another stream's). A clean
         * exit has no error to tell. */
        argv[8] = first->exit_code == 0 && first->exit_signal == 0 ? ""
                  : first->exit_error[0] ? first->exit_error
                                         : first->last_error;
        snprintf(code, sizeof(code), "%d", first->exit_code);
        snprintf(sig, sizeof(sig), "%d", first->exit_signal);
        if (!agent_node_redis_cmd(n, NULL, "reporting the task's exit", 9,
                                  argv))
            return;
        first->report_exit = 0;
    }
}
