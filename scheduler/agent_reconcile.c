/* Reconciliation: the node agent runs exactly the tasks of the node's
 * desired set. It starts what is new there (servers at once, workers once
 * their servers' endpoints are known), fails what cannot run, and stops
 * what left it. */
#include "scheduler/agent_node_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/strbuf.h"
#include "proto/creds.h"
#include "services/fsutil.h"
#include "services/jobspec.h"
#include "services/procs.h"
#include "services/safeid.h"
#include "services/workerenv.h"

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
    flps_errbuf_vset(msg, sizeof(msg), FLPS_ESTATE, fmt, ap);
    va_end(ap);
    log_error("task %s: cannot start: %s", t->key, msg);
    snprintf(line, sizeof(line), "flagent: cannot start %s on node %s: %s",
             t->id.name, n->cfg.name, msg);
    agent_report_line(n, t, line);
    snprintf(t->exit_error, sizeof(t->exit_error),
             "flagent could not start it: %.*s",
             (int)sizeof(t->exit_error) - 32, msg);
    agent_node_task_set_exited(n, t, -1, 0);
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
    if (!agent_node_redis_cmd(n, &r, "reading the job", 4, argv))
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

/* A task's log, readable only by the agent's user (it holds what the job
 * prints); NULL with errno on failure. */
static FILE *open_log(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    FILE *f;

    if (fd < 0)
        return NULL;
    f = fdopen(fd, "a+");
    if (f == NULL)
        close(fd);
    return f;
}

/* Start the task's process; its output is read by agent_report_pump(). */
static int task_spawn(agent_node *n, agent_task *t, char *const argv[],
                      char *const *envp)
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
    t->log = open_log(path); /* read back for a failure's last line */
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
    o.envp = envp;
    snprintf(name, sizeof(name), "%s/%s", t->id.job, t->id.name);
    if (proc_start_opts(t->p, name, argv, &o) != FLPS_OK) {
        flps_free(t->p);
        t->p = NULL;
        task_fail(n, t, "cannot start %s (see flagent's log)", argv[0]);
        return 0;
    }
    agent_node_wall_text(t->started_at, sizeof(t->started_at));
    t->pid = t->p->pid;
    agent_metrics_started(n->metrics, t->id.role);
    log_info("task %s: started %s, pid %d", t->key,
             strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0],
             (int)t->p->pid);
    return 1;
}

/* The shard's --checkpoint-interval: the job file's checkpoint_interval
 * (whole seconds, at least 1), or the agent's default when the job file
 * sets none (0): a scheduled job always keeps its log and checkpoints,
 * which its restarts restore. */
static void ckpt_interval_of(agent_node *n, const agent_task *t, char *out,
                             size_t len)
{
    char key[128];
    const char *argv[] = {"HGET", key, "spec"};
    redisReply *r = NULL;
    jobspec js;

    snprintf(key, sizeof(key), "flps:job:%s", t->id.job);
    if (agent_node_redis_cmd(n, &r, "reading the job file", 3, argv) &&
        r->type == REDIS_REPLY_STRING &&
        jobspec_parse(r->str, r->len, &js, NULL, 0) == FLPS_OK &&
        js.checkpoint_interval > 0)
        snprintf(out, len, "%.0f",
                 js.checkpoint_interval < 1 ? 1 : js.checkpoint_interval);
    else
        snprintf(out, len, "%s", AGENT_CKPT_INTERVAL);
    if (r != NULL)
        freeReplyObject(r);
}

/* The transport flsched chose for the task's job (the task hash's
 * transport field), into out: "zmq" or "rdma", or "" when it chose none
 * (a flsched from before the field) and the processes read the job file. */
static void task_transport(agent_node *n, const agent_task *t, char *out,
                           size_t len)
{
    const char *argv[] = {"HGET", t->key, "transport"};
    redisReply *r = NULL;

    out[0] = '\0';
    if (!agent_node_redis_cmd(n, &r, "reading the task's transport", 3, argv))
        return;
    /* Only the words a process accepts become an argument. */
    if (r->type == REDIS_REPLY_STRING &&
        (strcmp(r->str, "zmq") == 0 || strcmp(r->str, "rdma") == 0))
        snprintf(out, len, "%s", r->str);
    freeReplyObject(r);
}

/* The job's credentials (its hash's credentials field, made by flsched
 * at submit) in a 0600 file of the job's work directory, one per task so
 * two tasks of a job never write the same file; its path into out, for
 * this task's processes only. 1: written; 0: the job has none (submitted
 * to a flsched from before them), out is "" and the processes run
 * unauthenticated; -1: Redis is away (t stays new) or the task failed. */
static int task_credentials(agent_node *n, agent_task *t, char *out, size_t len)
{
    char key[128], dir[PATH_MAX], why[256];
    const char *argv[] = {"HGET", key, "credentials"};
    redisReply *r = NULL;
    flps_creds c;
    int ok = -1;

    out[0] = '\0';
    snprintf(key, sizeof(key), "flps:job:%s", t->id.job);
    if (!agent_node_redis_cmd(n, &r, "reading the job's credentials", 3, argv))
        return -1;
    if (r->type != REDIS_REPLY_STRING || r->len == 0) {
        log_warn("task %s: job %s has no credentials in Redis; its data "
                 "plane runs unauthenticated",
                 t->key, t->id.job);
        ok = 0;
        goto out;
    }
    /* Checked before it becomes a file the processes trust: a value
     * written by anything but flsched must not pass for credentials. */
    if (creds_parse(r->str, r->len, &c, why, sizeof(why)) != FLPS_OK) {
        task_fail(n, t, "the job's credentials in Redis are malformed (%s)",
                  why);
        goto out;
    }
    creds_wipe(&c);
    snprintf(dir, sizeof(dir), "%s/%s", n->cfg.work_dir, t->id.job);
    if (flps_mkdirs(dir) != 0) {
        task_fail(n, t, "cannot create %s: %s", dir, strerror(errno));
        goto out;
    }
    if (snprintf(out, len, "%s/%s.credentials", dir, t->id.name) >= (int)len) {
        task_fail(n, t, "the work directory's path is too long");
        out[0] = '\0';
        goto out;
    }
    if (creds_parse(r->str, r->len, &c, why, sizeof(why)) != FLPS_OK ||
        creds_write(out, &c, 1, why, sizeof(why)) != FLPS_OK) {
        creds_wipe(&c);
        task_fail(n, t, "%s", why);
        out[0] = '\0';
        goto out;
    }
    creds_wipe(&c);
    ok = 1;
out:
    if (r->str != NULL) /* a nil reply (no credentials) has none */
        explicit_bzero(r->str, r->len);
    freeReplyObject(r);
    return ok;
}

static void start_server(agent_node *n, agent_task *t)
{
    char shard[16], shards[16], listen_ep[96], ckpt[PATH_MAX], mlisten[96];
    char interval[32], transport[8], creds[PATH_MAX];
    char *argv[22];
    int a = 0;

    if (job_info(n, t, &t->servers, NULL) != 1)
        return; /* -1: Redis is away and t stays new; 0: failed */
    if (task_credentials(n, t, creds, sizeof(creds)) < 0)
        return;
    ckpt_interval_of(n, t, interval, sizeof(interval));
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
    argv[a++] = interval;
    agent_metrics_task_listen(n, mlisten, sizeof(mlisten));
    argv[a++] = "--metrics";
    argv[a++] = mlisten;
    if (t->id.attempt > 0)
        argv[a++] = "--restore";
    task_transport(n, t, transport, sizeof(transport));
    if (transport[0] != '\0') {
        argv[a++] = "--transport";
        argv[a++] = transport;
    }
    if (creds[0] != '\0') { /* the file's path; the secret stays in it */
        argv[a++] = "--credentials-file";
        argv[a++] = creds;
    }
    argv[a] = NULL;
    if (task_spawn(n, t, argv, NULL))
        t->phase = AGENT_TASK_STARTING;
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
    e = agent_node_write_file(path, tmp, spec, strlen(spec));
    if (e != 0) {
        task_fail(n, t, "cannot write %s: %s", path, strerror(e));
        return 0;
    }
    return 1;
}

/* Whether the job file has a command: (the user's program runs as the
 * workers). A file that does not parse runs flworker, which says why. */
static int spec_has_command(const char *spec)
{
    jobspec js;

    return spec != NULL &&
           jobspec_parse(spec, strlen(spec), &js, NULL, 0) == FLPS_OK &&
           js.command_argc > 0;
}

/* Start a command: job's worker: the user's program with the job's
 * FLPS_* variables (services/workerenv.h). 1 when started. */
static int start_command(agent_node *n, agent_task *t, const char *spec,
                         const char *servers, const char *plan_file,
                         const char *transport, const char *creds)
{
    jobspec js;
    const char *words[JOBSPEC_WORDS_MAX + 1];
    char prog[PATH_MAX], bin_dir[PATH_MAX], err[512];
    char **env = NULL;
    workerenv we;
    size_t nw;
    int ok;
    char *slash;

    if (jobspec_parse(spec, strlen(spec), &js, err, sizeof(err)) != FLPS_OK) {
        task_fail(n, t, "the job file does not parse: %s", err);
        return 0;
    }
    nw = jobspec_words(js.command, js.command_argc, words, JOBSPEC_WORDS_MAX);
    if (workerenv_find_program(words[0], environ, prog, sizeof(prog), err,
                               sizeof(err)) != FLPS_OK) {
        task_fail(n, t, "%s", err);
        return 0;
    }
    snprintf(bin_dir, sizeof(bin_dir), "%s", n->flworker_bin);
    slash = strrchr(bin_dir, '/');
    if (slash != NULL)
        *slash = '\0';
    memset(&we, 0, sizeof(we));
    we.job = t->id.job;
    we.rank = t->id.index;
    we.servers = servers;
    /* The file appears once flsched has planned the job; a program that
     * does not follow plans may ignore it. */
    we.plan_file = plan_file;
    we.bin_dir = slash != NULL ? bin_dir : NULL;
    we.transport = transport; /* FLPS_TRANSPORT: flsched's choice */
    we.credentials_file = creds[0] ? creds : NULL;
    if (workerenv_build(&js, &we, environ, &env) != FLPS_OK) {
        task_fail(n, t, "out of memory");
        return 0;
    }
    words[0] = prog;
    words[nw] = NULL;
    ok = task_spawn(n, t, (char *const *)words, env);
    workerenv_free(env);
    return ok;
}

static void try_start_worker(agent_node *n, agent_task *t)
{
    char key[160], job_path[PATH_MAX], rank[16], plan_file[PATH_MAX];
    char mlisten[96], transport[8], creds[PATH_MAX];
    flps_strbuf list = FLPS_STRBUF_INIT; /* the servers' endpoints */
    char *spec = NULL;

    if (t->servers == 0 && job_info(n, t, &t->servers, NULL) != 1)
        return;
    for (uint32_t i = 0; i < t->servers; i++) {
        const char *argv[] = {"HGET", key, "endpoint"};
        redisReply *r = NULL;
        snprintf(key, sizeof(key), "flps:task:%s:%u:server-%u", t->id.job,
                 t->id.attempt, i);
        if (!agent_node_redis_cmd(n, &r, "reading a server's endpoint", 3,
                                  argv))
            goto out;
        if (r->type != REDIS_REPLY_STRING || r->len == 0) {
            freeReplyObject(r);
            t->phase = AGENT_TASK_WAITING;
            if (!t->waiting_logged)
                log_info("task %s: waiting for the endpoints of the job's "
                         "%u server(s)",
                         t->key, t->servers);
            t->waiting_logged = 1;
            goto out;
        }
        if (!agent_task_endpoint_is_valid(r->str)) {
            /* It becomes the worker's argument: never pass on what a
             * server could not have printed. */
            freeReplyObject(r);
            task_fail(n, t,
                      "the endpoint of server %u in Redis (%s) is not "
                      "tcp://HOST:PORT; the task is refused",
                      i, key);
            goto out;
        }
        flps_strbuf_printf(&list, "%s%s", i ? "," : "", r->str);
        freeReplyObject(r);
    }
    if (flps_strbuf_error(&list) != FLPS_OK) {
        task_fail(n, t, "out of memory");
        goto out;
    }
    if (job_info(n, t, &t->servers, &spec) != 1)
        goto out;
    if (task_credentials(n, t, creds, sizeof(creds)) < 0)
        goto out;
    if (write_job_file(n, t, spec, job_path, sizeof(job_path))) {
        char *argv[] = {n->flworker_bin,
                        "--job",
                        job_path,
                        "--rank",
                        rank,
                        "--servers",
                        list.data,
                        "--job-id",
                        t->id.job,
                        "--plan",
                        plan_file,
                        "--metrics",
                        mlisten,
                        NULL,
                        NULL,
                        NULL,
                        NULL,
                        NULL};
        agent_plan *pl = agent_plan_find(n, t->id.job);

        /* The plan file, when there is a plan, is there before the
         * worker's first iteration; without one the worker runs as the
         * job file says until a plan appears. */
        if (pl != NULL && pl->written == 0)
            agent_plan_check(n, pl);
        agent_plan_path(n, t->id.job, plan_file, sizeof(plan_file));
        agent_metrics_task_listen(n, mlisten, sizeof(mlisten));
        snprintf(rank, sizeof(rank), "%u", t->id.index);
        task_transport(n, t, transport, sizeof(transport));
        if (transport[0] != '\0') {
            argv[13] = "--transport";
            argv[14] = transport;
        }
        if (creds[0] != '\0') {
            int at = transport[0] != '\0' ? 15 : 13;
            argv[at] = "--credentials-file";
            argv[at + 1] = creds;
        }
        if (spec_has_command(spec)) {
            if (start_command(n, t, spec, list.data, plan_file,
                              transport[0] ? transport : NULL, creds)) {
                t->phase = AGENT_TASK_RUNNING;
                t->report_running = 1;
            }
        } else if (task_spawn(n, t, argv, NULL)) {
            t->phase = AGENT_TASK_RUNNING;
            t->report_running = 1;
        }
    }
out:
    flps_free(spec);
    flps_strbuf_fini(&list);
}

/* ---- Reconciliation ---- */

void agent_reconcile_stop(agent_task *t, const char *why)
{
    if (t->p == NULL || t->term_sent > 0)
        return;
    kill(t->p->pid, SIGTERM);
    t->term_sent = flps_mono_s();
    log_info("task %s: %s: SIGTERM to pid %d", t->key, why, (int)t->p->pid);
}

void agent_reconcile_kills(agent_node *n)
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

/* A key of the desired set that names no task this agent may run (a job
 * id such as ".." would become a directory and an argument): logged once,
 * as the task stays known while it is in the set, and, when the key is in
 * the task namespace, reported as exited with exit_code -1 so flsched
 * does not wait for it. Never run. */
static void task_refuse(agent_node *n, agent_task *t)
{
    int report = strncmp(t->key, "flps:task:", 10) == 0;

    t->phase = AGENT_TASK_IGNORED;
    log_warn("task key %s in %s is not "
             "flps:task:{job}:{attempt}:{server|worker}-{index} with a job id "
             "of " SAFEID_RULE ": refused%s",
             t->key, n->tasks_key, report ? ", reported as exited" : "");
    if (report)
        agent_node_task_set_exited(n, t, -1, 0);
}

/* A key of the desired set this agent does not know yet. */
static void task_consider(agent_node *n, const char *key)
{
    const char *argv[] = {"HGET", key, "state"};
    redisReply *r = NULL;
    agent_task *t;
    char state[16] = "";

    if (!agent_node_redis_cmd(n, &r, "reading a task", 3, argv))
        return;
    if (r->type == REDIS_REPLY_STRING)
        snprintf(state, sizeof(state), "%s", r->str);
    freeReplyObject(r);
    t = agent_node_task_add(n, key);
    if (t == NULL)
        return;
    t->desired = 1;
    if (agent_task_key_parse(key, &t->id) != FLPS_OK) {
        task_refuse(n, t);
        return;
    }
    if (strcmp(state, "EXITED") == 0) {
        t->phase = AGENT_TASK_EXITED; /* ran before; never run twice */
        return;
    }
    if (strcmp(state, "RUNNING") == 0) {
        /* Its process belonged to an agent before this one and died with
         * it (children die with their agent). */
        log_warn("task %s: RUNNING in Redis but no process of this agent "
                 "runs it: reported as exited with exit_code -1",
                 key);
        agent_node_task_set_exited(n, t, -1, 0);
        return;
    }
    t->phase = AGENT_TASK_NEW; /* agent_reconcile_run() starts it */
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

void agent_reconcile_run(agent_node *n)
{
    const char *argv[] = {"SMEMBERS", n->tasks_key};
    redisReply *r = NULL;
    agent_task **pp;

    if (!agent_node_redis_cmd(n, &r, "reading the node's tasks", 2, argv))
        return;
    for (agent_task *t = n->tasks; t != NULL; t = t->next)
        t->desired = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *e = r->element[i];
        agent_task *t;
        if (e->type != REDIS_REPLY_STRING)
            continue;
        t = agent_node_task_find(n, e->str);
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
                agent_reconcile_stop(t, "left the node's desired set");
            pp = &t->next;
            continue;
        }
        *pp = t->next; /* not running, nothing to report: forget it */
        agent_node_task_free(t);
    }
    for (agent_task *t = n->tasks; t != NULL && n->redis_ok; t = t->next) {
        if (!t->desired ||
            (t->phase != AGENT_TASK_NEW && t->phase != AGENT_TASK_WAITING))
            continue;
        if (older_attempt_runs(n, t))
            continue;
        if (t->phase == AGENT_TASK_NEW && t->id.role == AGENT_ROLE_SERVER)
            start_server(n, t);
        else
            try_start_worker(n, t);
    }
}
