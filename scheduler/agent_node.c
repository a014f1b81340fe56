/* The node agent: Redis, registration and heartbeat, the loop, and the
 * life cycle; the tasks' output, their starts and stops, and the plans
 * are in agent_report.c, agent_reconcile.c and agent_plan.c. */
#include "scheduler/agent_node.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
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
#include "scheduler/agent_node_impl.h"
#include "scheduler/rconn.h"
#include "services/fsutil.h"
#include "services/plural.h"

#define AGENT_REDIS_TIMEOUT_MS 1000

/* ---- Redis helpers ---- */

void agent_node_wall_text(char *buf, size_t len)
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

int agent_node_redis_cmd(agent_node *n, redisReply **r, const char *what,
                         int argc, const char **argv)
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
    agent_node_wall_text(now, sizeof(now));
    if (!agent_node_redis_cmd(n, NULL, "registering the node", 13, argv))
        return;
    n->registered = 1;
    n->next_heartbeat = flps_mono_s() + n->cfg.heartbeat;
    agent_metrics_heartbeat(n->metrics, flps_wall_s());
    n->metrics_published = 0; /* the hash may be new: say it again */
    agent_facts_publish(n);
    log_info("registered node %s%s: %g %s, %llu bytes of memory, %u %s, "
             "address %s, with Redis at %s (alive key TTL %lld ms)",
             n->cfg.name, why, n->cfg.cpus,
             plural_word(n->cfg.cpus, "cpu", "cpus"),
             (unsigned long long)n->cfg.memory, n->cfg.gpus,
             plural_word(n->cfg.gpus, "gpu", "gpus"), n->cfg.address,
             rconn_address(n->rc), n->ttl_ms);
}

static void node_heartbeat(agent_node *n)
{
    char now[32], ttl[32];
    const char *argv[] = {"EVAL",       heartbeat_lua, "2", n->node_key,
                          n->alive_key, ttl,           now};
    redisReply *r = NULL;

    snprintf(ttl, sizeof(ttl), "%lld", n->ttl_ms);
    agent_node_wall_text(now, sizeof(now));
    if (!agent_node_redis_cmd(n, &r, "heartbeat", 7, argv))
        return;
    n->next_heartbeat = flps_mono_s() + n->cfg.heartbeat;
    agent_metrics_heartbeat(n->metrics, flps_wall_s());
    agent_facts_publish(n);
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

agent_task *agent_node_task_find(agent_node *n, const char *key)
{
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        if (strcmp(t->key, key) == 0)
            return t;
    return NULL;
}

agent_task *agent_node_task_add(agent_node *n, const char *key)
{
    agent_task *t = flps_calloc(1, sizeof(*t));

    if (t == NULL) {
        log_error("out of memory for task %s", key);
        return NULL;
    }
    t->node = n;
    t->uid = (uid_t)-1;
    snprintf(t->key, sizeof(t->key), "%s", key);
    t->next = n->tasks;
    n->tasks = t;
    return t;
}

void agent_node_task_close(agent_task *t)
{
    if (t->p != NULL) {
        if (t->p->out_fd >= 0)
            close(t->p->out_fd);
        if (t->p->err_fd >= 0)
            close(t->p->err_fd);
        flps_free(t->p);
        t->p = NULL;
    }
    if (t->log != NULL) {
        fclose(t->log);
        t->log = NULL;
    }
}

void agent_node_task_free(agent_task *t)
{
    agent_node_task_close(t);
    flps_free(t->done);
    flps_free(t->profile);
    flps_free(t);
}

void agent_node_task_set_exited(agent_node *n, agent_task *t, int exit_code,
                                int sig)
{
    t->phase = AGENT_TASK_EXITED;
    t->exit_code = exit_code;
    t->exit_signal = sig;
    agent_node_wall_text(t->exited_at, sizeof(t->exited_at));
    t->exit_seq = ++n->exit_counter;
    t->report_exit = 1;
    agent_metrics_exited(n->metrics, t->id.role, exit_code, sig);
}

int agent_node_write_file(const char *path, const char *tmp, const char *data,
                          size_t len)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), e;

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

/* ---- The loop ---- */

static void try_reconnect(agent_node *n)
{
    double away = flps_mono_s() - n->down_since;
    flps_err e = rconn_ping(n->rc);

    if (e == FLPS_ECONFIG) {
        /* Wrong credentials do not get better by retrying. */
        log_error("stopping: %s", rconn_error(n->rc));
        n->fatal = e;
        return;
    }
    if (e != FLPS_OK) {
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

/* agent_uids_sweep's question: does job have a task on this node? */
static int job_is_here(void *arg, const char *job)
{
    const agent_node *n = arg;

    for (const agent_task *t = n->tasks; t != NULL; t = t->next)
        if (strcmp(t->id.job, job) == 0)
            return 1;
    return 0;
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
    agent_report_flush(n);
    if (n->redis_ok)
        agent_metrics_flush_node(n);
    if (n->redis_ok && now >= n->next_reconcile) {
        n->next_reconcile = now + AGENT_LOOP_MS / 1000.0;
        agent_reconcile_run(n);
        agent_report_flush(n);
        if (n->redis_ok && n->uids != NULL && !n->uids_swept) {
            /* The desired set is known: the uids taken back at start
             * whose jobs have no task here any more are released. */
            agent_uids_sweep(n->uids, job_is_here, n);
            n->uids_swept = 1;
        }
    }
    if (n->redis_ok)
        agent_plan_follow(n);
}

static void shut_down(agent_node *n, int sig)
{
    size_t live = count_live(n);

    log_info("signal %d: stopping %zu task(s)", sig, live);
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        agent_reconcile_stop(t, "flagent is stopping");
    while (count_live(n) > 0) {
        agent_report_pump(n, 100);
        agent_report_reap(n);
        agent_reconcile_kills(n);
    }
    if (!n->redis_ok) {
        n->next_retry = 0;
        try_reconnect(n);
    }
    if (n->redis_ok)
        agent_report_flush(n);
    log_info("stopped %zu task(s); exiting (the node becomes LOST when its "
             "alive key expires)",
             live);
}

flps_err agent_node_run(agent_node *n, volatile sig_atomic_t *stop)
{
    n->redis_ok = 1; /* until a call says otherwise */
    while (!*stop && n->fatal == FLPS_OK) {
        agent_report_reap(n);
        if (!n->redis_ok && flps_mono_s() >= n->next_retry)
            try_reconnect(n);
        if (n->redis_ok)
            sync_redis(n);
        agent_reconcile_kills(n);
        agent_metrics_tasks(n->metrics, n);
        agent_metrics_energy(n->metrics);
        agent_report_pump(n, AGENT_LOOP_MS);
    }
    shut_down(n, (int)*stop);
    return n->fatal;
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

/* Per-job uids (agent_uids.h): the work dir and checkpoint root are the
 * agent's, passable (0711) but not listable by the jobs, and every
 * directory above them and the programs' must let the job uids through. */
static flps_err open_uids(agent_node *n)
{
    const agent_config *cfg = &n->cfg;
    const char *need[] = {cfg->work_dir, cfg->ckpt_root, n->flps_bin};
    char blocker[PATH_MAX], errbuf[512];
    agent_uids_cfg uc;

    if (flps_mkdirs(cfg->ckpt_root) != 0) {
        log_error("cannot create the checkpoint root %s: %s", cfg->ckpt_root,
                  strerror(errno));
        return FLPS_ESYS;
    }
    if (chmod(cfg->work_dir, 0711) != 0 || chmod(cfg->ckpt_root, 0711) != 0) {
        log_error("cannot make %s and %s passable for the job uids: %s",
                  cfg->work_dir, cfg->ckpt_root, strerror(errno));
        return FLPS_ESYS;
    }
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        if (agent_uids_reachable(need[i], blocker, sizeof(blocker)))
            continue;
        log_error("each job's tasks run as a uid of their own (--job-uids), "
                  "which cannot reach %s: %s lets only its owner and group "
                  "through; chmod o+x %s, choose a directory others can "
                  "reach, or give --job-uids off (every task then runs as "
                  "flagent's user)",
                  need[i], blocker, blocker);
        return FLPS_EINVAL;
    }
    memset(&uc, 0, sizeof(uc));
    uc.dir = cfg->job_uids_dir;
    uc.first = cfg->job_uid_first;
    uc.last = cfg->job_uid_last;
    uc.cluster = rconn_address(n->rc);
    uc.work_dir = cfg->work_dir;
    uc.ckpt_root = cfg->ckpt_root;
    if (agent_uids_open(&uc, &n->uids, errbuf, sizeof(errbuf)) != FLPS_OK) {
        log_error("per-job uids: %s", errbuf);
        return FLPS_EINVAL;
    }
    log_info("each job's tasks run as a uid and gid of their own from "
             "%u-%u (records in %s)",
             cfg->job_uid_first, cfg->job_uid_last, cfg->job_uids_dir);
    return FLPS_OK;
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
    if (cfg->job_uids && geteuid() == 0) {
        rc = open_uids(n);
        if (rc != FLPS_OK) {
            rconn_destroy(n->rc);
            goto fail;
        }
    }
    if (cfg->metrics[0] != '\0') {
        rc = agent_metrics_create(cfg, &n->metrics, n->metrics_addr,
                                  sizeof(n->metrics_addr));
        if (rc != FLPS_OK) {
            log_error("cannot serve metrics on %s (%s); fix or drop "
                      "--metrics",
                      cfg->metrics, flps_strerror(rc));
            agent_uids_close(n->uids);
            rconn_destroy(n->rc);
            goto fail;
        }
        log_info("metrics on http://%s/metrics (health: /healthz)",
                 n->metrics_addr);
    }
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
            agent_clock_restore(n, t);
        }
        agent_node_task_free(t);
    }
    while (n->plans != NULL) {
        agent_plan *pl = n->plans;
        n->plans = pl->next;
        flps_free(pl);
    }
    agent_reconcile_forget_jobs(n, 1);
    agent_uids_close(n->uids);
    agent_metrics_destroy(n->metrics);
    rconn_destroy(n->rc);
    flps_free(n->pfds);
    flps_free(n->pfd_task);
    flps_free(n);
}
