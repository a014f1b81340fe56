/* Reconciliation: the node agent runs exactly the tasks of the node's
 * desired set. It starts what is new there (servers at once, workers once
 * their servers' endpoints are known, a saps job's once their peers' are),
 * fails what cannot run, and stops what left it. */
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
#include "services/plural.h"
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

/* The job's server count: the hash's servers field, else the job file's
 * (a hash from before the field). 1 when known. */
static int job_servers(const char *field, const agent_job *j, uint32_t *out)
{
    uint64_t v;

    /* The bounds of a job file's servers (services/jobspec_keys.c). */
    if (field != NULL &&
        flps_parse_u64("servers", field, 1, 256, &v, NULL, 0) == FLPS_OK) {
        *out = (uint32_t)v;
        return 1;
    }
    if (j->parsed) {
        *out = j->spec.servers;
        return 1;
    }
    return 0;
}

/* Read job id's hash (its servers field and job file) into a new agent_job,
 * parsing the job file there, once for all the job's tasks here. NULL
 * without memory; *has_servers says whether the server count is known. */
static agent_job *job_read(const redisReply *r, const char *id,
                           int *has_servers)
{
    const redisReply *sv = NULL, *text = NULL;
    agent_job *j = flps_calloc(1, sizeof(*j));

    if (j == NULL)
        return NULL;
    snprintf(j->id, sizeof(j->id), "%s", id);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING)
            sv = r->element[0];
        if (r->element[1]->type == REDIS_REPLY_STRING)
            text = r->element[1];
    }
    if (text != NULL) {
        j->text = flps_malloc(text->len + 1);
        if (j->text == NULL) {
            flps_free(j);
            return NULL;
        }
        memcpy(j->text, text->str, text->len);
        j->text[text->len] = '\0';
        j->parsed =
            jobspec_parse(j->text, text->len, &j->spec, NULL, 0) == FLPS_OK;
    }
    *has_servers = job_servers(sv != NULL ? sv->str : NULL, j, &j->servers);
    return j;
}

static void job_free(agent_job *j)
{
    if (j == NULL)
        return;
    flps_free(j->text);
    flps_free(j);
}

/* The job of task t: read from Redis for its first task here, then kept.
 * 1 with *out (borrowed from n), 0 when the job cannot be run (the task
 * failed), -1 when Redis did not answer. */
static int job_get(agent_node *n, agent_task *t, agent_job **out)
{
    char key[128];
    const char *argv[] = {"HMGET", key, "servers", "spec"};
    redisReply *r = NULL;
    agent_job *j;
    int has_servers = 0;

    for (j = n->jobs; j != NULL; j = j->next) {
        if (strcmp(j->id, t->id.job) == 0) {
            *out = j;
            return 1;
        }
    }
    snprintf(key, sizeof(key), "flps:job:%s", t->id.job);
    if (!agent_node_redis_cmd(n, &r, "reading the job", 4, argv))
        return -1;
    j = job_read(r, t->id.job, &has_servers);
    freeReplyObject(r);
    if (j == NULL) {
        task_fail(n, t, "out of memory");
        return 0;
    }
    if (!has_servers) {
        task_fail(n, t,
                  "job %s in Redis has neither a valid 'servers' field nor "
                  "a job file ('spec') that gives it",
                  t->id.job);
        job_free(j);
        return 0;
    }
    j->next = n->jobs;
    n->jobs = j;
    *out = j;
    return 1;
}

void agent_reconcile_forget_jobs(agent_node *n, int all)
{
    agent_job **pp = &n->jobs;

    while (*pp != NULL) {
        agent_job *j = *pp;
        const agent_task *t = NULL;

        for (t = all ? NULL : n->tasks; t != NULL; t = t->next)
            if (strcmp(t->id.job, j->id) == 0)
                break;
        if (t != NULL) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (n->uids != NULL)
            agent_uids_release(n->uids, j->id);
        job_free(j);
    }
}

/* Task t runs as its job's uid (agent_uids.h) when the agent gives jobs
 * uids of their own: held for the job here (idempotent), with the job's
 * directories (its checkpoint directory too for a server) made the
 * uid's. 1 when t->uid is set (or uids are off), 0 when the task failed. */
static int job_uid(agent_node *n, agent_task *t)
{
    char why[512];
    uid_t uid;

    if (n->uids == NULL)
        return 1;
    if (agent_uids_hold(n->uids, t->id.job, t->id.role == AGENT_ROLE_SERVER,
                        &uid, why, sizeof(why)) != FLPS_OK) {
        task_fail(n, t, "no uid for job %s: %s", t->id.job, why);
        return 0;
    }
    t->uid = uid;
    return 1;
}

/* Act on the job's files as the job (agent_uids_enter), when it has a
 * uid: what the agent makes there is the job's, and a link the job
 * planted in its directory cannot lead the agent's writes anywhere the
 * job could not write itself. 0 when the task failed. */
static int as_job(agent_node *n, agent_task *t)
{
    if (t->uid == (uid_t)-1 || agent_uids_enter(t->uid) == 0)
        return 1;
    task_fail(n, t, "cannot act as uid %u on the job's files",
              (unsigned)t->uid);
    return 0;
}

static void as_agent(const agent_task *t)
{
    if (t->uid != (uid_t)-1)
        agent_uids_leave();
}

/* "NAME=VALUE", flps_malloc'd; NULL without memory. */
static char *env_entry(const char *name, const char *value)
{
    size_t len = strlen(name) + strlen(value) + 2;
    char *e = flps_malloc(len);

    if (e != NULL)
        snprintf(e, len, "%s=%s", name, value);
    return e;
}

/* The environment of t's process: the agent's, with HOME and TMPDIR in
 * the job's own directory when it runs as the job's uid (the agent's are
 * not the job's to read or write). *out NULL when the agent's is used as
 * it is; else the caller frees it with workerenv_free. 0 without memory. */
static int task_env(const agent_node *n, const agent_task *t, char ***out)
{
    char dir[PATH_MAX];
    size_t k = 0, count = 0;
    char **env;

    *out = NULL;
    if (t->uid == (uid_t)-1)
        return 1;
    while (environ[count] != NULL)
        count++;
    env = flps_calloc(count + 3, sizeof(*env));
    if (env == NULL)
        return 0;
    snprintf(dir, sizeof(dir), "%s/%s", n->cfg.work_dir, t->id.job);
    for (size_t i = 0; i < count; i++) {
        if (strncmp(environ[i], "HOME=", 5) == 0 ||
            strncmp(environ[i], "TMPDIR=", 7) == 0)
            continue;
        if ((env[k++] = flps_strdup(environ[i])) == NULL)
            goto fail;
    }
    if ((env[k++] = env_entry("HOME", dir)) == NULL ||
        (env[k++] = env_entry("TMPDIR", dir)) == NULL)
        goto fail;
    *out = env;
    return 1;
fail:
    workerenv_free(env);
    return 0;
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

/* Start the task's process; its output is read by agent_report_pump().
 * envp NULL: the agent's environment, as task_env gives it. */
static int task_spawn(agent_node *n, agent_task *t, char *const argv[],
                      char *const *envp)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], name[100];
    char **own_env = NULL;
    proc_opts o;
    int made;

    if (!as_job(n, t))
        return 0;
    made = snprintf(dir, sizeof(dir), "%s/%s/attempt-%u", n->cfg.work_dir,
                    t->id.job, t->id.attempt) < (int)sizeof(dir) &&
           flps_mkdirs(dir) == 0;
    if (made) {
        snprintf(path, sizeof(path), "%s/%s.log", dir, t->id.name);
        t->log = open_log(path); /* read back for a failure's last line */
    }
    as_agent(t);
    if (!made) {
        task_fail(n, t, "cannot create %s: %s", dir, strerror(errno));
        return 0;
    }
    if (t->log == NULL)
        log_warn("task %s: cannot open %s: %s (output goes to Redis only)",
                 t->key, path, strerror(errno));
    else
        setvbuf(t->log, NULL, _IOLBF, 0);
    t->p = flps_malloc(sizeof(*t->p));
    if (t->p == NULL || (envp == NULL && !task_env(n, t, &own_env))) {
        flps_free(t->p);
        t->p = NULL;
        task_fail(n, t, "out of memory");
        return 0;
    }
    memset(&o, 0, sizeof(o));
    o.pipe_stderr = 1;
    o.own_group = 1;
    o.die_with_parent = 1;
    o.envp = envp != NULL ? envp : own_env;
    if (t->uid != (uid_t)-1) {
        /* In its own directory, as its own user (the agent stays root). */
        o.set_ids = 1;
        o.uid = t->uid;
        o.gid = (gid_t)t->uid;
        snprintf(dir, sizeof(dir), "%s/%s", n->cfg.work_dir, t->id.job);
        o.cwd = dir;
    }
    snprintf(name, sizeof(name), "%s/%s", t->id.job, t->id.name);
    if (proc_start_opts(t->p, name, argv, &o) != FLPS_OK) {
        workerenv_free(own_env);
        flps_free(t->p);
        t->p = NULL;
        task_fail(n, t, "cannot start %s (see flagent's log)", argv[0]);
        return 0;
    }
    workerenv_free(own_env);
    agent_node_wall_text(t->started_at, sizeof(t->started_at));
    t->pid = t->p->pid;
    agent_metrics_started(n->metrics, t->id.role);
    if (t->uid != (uid_t)-1)
        log_info("task %s: started %s, pid %d, uid %u", t->key,
                 strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0],
                 (int)t->p->pid, (unsigned)t->uid);
    else
        log_info("task %s: started %s, pid %d", t->key,
                 strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0],
                 (int)t->p->pid);
    return 1;
}

/* The shard's --checkpoint-interval: the job file's checkpoint_interval
 * (whole seconds, at least 1), or the agent's default when the job file
 * sets none (0): a scheduled job always keeps its log and checkpoints,
 * which its restarts restore. */
static void ckpt_interval_of(const agent_job *j, char *out, size_t len)
{
    if (j->parsed && j->spec.checkpoint_interval > 0)
        snprintf(out, len, "%.0f",
                 j->spec.checkpoint_interval < 1 ? 1
                                                 : j->spec.checkpoint_interval);
    else
        snprintf(out, len, "%s", AGENT_CKPT_INTERVAL);
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
    if (snprintf(out, len, "%s/%s.credentials", dir, t->id.name) >= (int)len) {
        task_fail(n, t, "the work directory's path is too long");
        out[0] = '\0';
        goto out;
    }
    if (!as_job(n, t)) {
        out[0] = '\0';
        goto out;
    }
    if (flps_mkdirs(dir) != 0) {
        as_agent(t);
        task_fail(n, t, "cannot create %s: %s", dir, strerror(errno));
        out[0] = '\0';
        goto out;
    }
    if (creds_parse(r->str, r->len, &c, why, sizeof(why)) != FLPS_OK ||
        creds_write(out, &c, 1, why, sizeof(why)) != FLPS_OK) {
        as_agent(t);
        creds_wipe(&c);
        task_fail(n, t, "%s", why);
        out[0] = '\0';
        goto out;
    }
    as_agent(t);
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
    agent_job *j = NULL;
    int a = 0;

    if (job_get(n, t, &j) != 1)
        return; /* -1: Redis is away and t stays new; 0: failed */
    if (!job_uid(n, t))
        return;
    t->servers = j->servers;
    if (task_credentials(n, t, creds, sizeof(creds)) < 0)
        return;
    ckpt_interval_of(j, interval, sizeof(interval));
    if (t->id.index >= t->servers) {
        task_fail(n, t, "server index %u is not below the job's %u %s",
                  t->id.index, t->servers,
                  plural_word(t->servers, "server", "servers"));
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

/* Start t's flworker (argv): in the environment task_spawn gives it, with
 * the job file's env: over it where the file (js, NULL where it did not
 * parse) has one. 1 when started. */
static int start_flworker(agent_node *n, agent_task *t, const jobspec *js,
                          char *const argv[])
{
    char **base = NULL, **env = NULL;
    int ok;

    if (js == NULL || js->env_count == 0)
        return task_spawn(n, t, argv, NULL);
    if (!task_env(n, t, &base) ||
        workerenv_build_flworker(js, base != NULL ? base : environ, &env) !=
            FLPS_OK) {
        workerenv_free(base);
        task_fail(n, t, "out of memory");
        return 0;
    }
    ok = task_spawn(n, t, argv, env);
    workerenv_free(env);
    workerenv_free(base);
    return ok;
}

/* Write the job file where the workers read it: a temporary file renamed
 * into place, so a worker starting meanwhile never reads half of it. */
static int write_job_file(agent_node *n, agent_task *t, const char *spec,
                          char *path, size_t len)
{
    char tmp[PATH_MAX + 64];
    int e = 0;

    snprintf(tmp, sizeof(tmp), "%s/%s", n->cfg.work_dir, t->id.job);
    snprintf(path, len, "%s/%s/job.yaml", n->cfg.work_dir, t->id.job);
    if (!as_job(n, t))
        return 0;
    if (flps_mkdirs(tmp) != 0) {
        e = errno;
        as_agent(t);
        task_fail(n, t, "cannot create %s: %s", tmp, strerror(e));
        return 0;
    }
    snprintf(tmp, sizeof(tmp), "%s.%s.tmp", path, t->id.name);
    e = agent_node_write_file(path, tmp, spec, strlen(spec));
    as_agent(t);
    if (e != 0) {
        task_fail(n, t, "cannot write %s: %s", path, strerror(e));
        return 0;
    }
    return 1;
}

/* Whether the job file has a command: (the user's program runs as the
 * workers). A file that does not parse runs flworker, which says why. */
static int job_has_command(const agent_job *j)
{
    return j->parsed && j->spec.command_argc > 0;
}

/* Start a command: job's worker: the user's program with the job's
 * FLPS_* variables (services/workerenv.h). 1 when started. */
static int start_command(agent_node *n, agent_task *t, const jobspec *js,
                         const char *servers, const char *peers,
                         const char *plan_file, const char *transport,
                         const char *creds, const char *mlisten,
                         const char *record)
{
    const char *words[JOBSPEC_WORDS_MAX + 1];
    char prog[PATH_MAX], bin_dir[PATH_MAX], err[512];
    char **env = NULL, **base = NULL;
    workerenv we;
    size_t nw;
    int ok;
    char *slash;

    nw = jobspec_words(js->command, js->command_argc, words, JOBSPEC_WORDS_MAX);
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
    we.peers = peers; /* FLPS_PEERS (saps): NULL otherwise */
    /* The file appears once flsched has planned the job; a program that
     * does not follow plans may ignore it. */
    we.plan_file = plan_file;
    we.bin_dir = slash != NULL ? bin_dir : NULL;
    we.transport = transport; /* FLPS_TRANSPORT: flsched's choice */
    we.credentials_file = creds[0] ? creds : NULL;
    /* libflps serves the program's worker metrics there and prints
     * "metrics on HOST:PORT", as flworker does with --metrics. */
    we.metrics = mlisten;
    we.gpu_clock_record = record; /* restored from after a crash */
    if (!task_env(n, t, &base) ||
        workerenv_build(js, &we, base != NULL ? base : environ, &env) !=
            FLPS_OK) {
        workerenv_free(base);
        task_fail(n, t, "out of memory");
        return 0;
    }
    workerenv_free(base);
    words[0] = prog;
    words[nw] = NULL;
    ok = task_spawn(n, t, (char *const *)words, env);
    workerenv_free(env);
    return ok;
}

static void try_start_worker(agent_node *n, agent_task *t)
{
    char job_path[PATH_MAX], rank[16], plan_file[PATH_MAX];
    char mlisten[96], transport[8], creds[PATH_MAX], record[PATH_MAX + 96];
    flps_strbuf list = FLPS_STRBUF_INIT;  /* the servers' endpoints */
    flps_strbuf peers = FLPS_STRBUF_INIT; /* saps: the workers' */
    agent_job *j = NULL;

    if (job_get(n, t, &j) != 1 || !job_uid(n, t))
        return;
    t->servers = j->servers;
    {
        char why[512];
        uint32_t missing;
        int got = agent_endpoints_get(n, t, "server", t->servers, "endpoint",
                                      &list, &missing, why, sizeof(why));

        if (got < 0)
            task_fail(n, t, "%s", why);
        else if (got == 0 && missing != UINT32_MAX)
            agent_reconcile_wait(t, t->servers, "server(s)");
        if (got <= 0)
            goto out;
    }
    if (j->text == NULL) {
        task_fail(n, t, "job %s in Redis has no job file ('spec')", t->id.job);
        goto out;
    }
    if (j->parsed && j->spec.mode == JOBSPEC_MODE_SAPS) {
        char why[512];
        int got = agent_peers_get(n, t, &j->spec, &peers, why, sizeof(why));

        if (got < 0)
            task_fail(n, t, "%s", why);
        if (got <= 0)
            goto out;
    }
    if (task_credentials(n, t, creds, sizeof(creds)) < 0)
        goto out;
    if (write_job_file(n, t, j->text, job_path, sizeof(job_path))) {
        char *argv[] = {n->flworker_bin,
                        "--job",
                        job_path,
                        "--rank",
                        rank,
                        "--servers",
                        list.data != NULL ? list.data : "",
                        "--job-id",
                        t->id.job,
                        "--plan",
                        plan_file,
                        "--metrics",
                        mlisten,
                        "--gpu-clock-record",
                        record,
                        NULL,
                        NULL,
                        NULL,
                        NULL,
                        NULL};
        agent_plan *pl = agent_plan_find(n, t->id.job);
        int a = 15;

        /* The plan file, when there is a plan, is there before the
         * worker's first iteration; without one the worker runs as the
         * job file says until a plan appears. */
        if (pl != NULL && pl->written == 0)
            agent_plan_check(n, pl);
        agent_plan_path(n, t->id.job, plan_file, sizeof(plan_file));
        agent_metrics_task_listen(n, mlisten, sizeof(mlisten));
        snprintf(rank, sizeof(rank), "%u", t->id.index);
        agent_clock_record_path(n, t, record, sizeof(record));
        task_transport(n, t, transport, sizeof(transport));
        if (transport[0] != '\0') {
            argv[a++] = "--transport";
            argv[a++] = transport;
        }
        if (creds[0] != '\0') {
            argv[a++] = "--credentials-file";
            argv[a++] = creds;
        }
        if (peers.data != NULL) { /* saps: no shards, the workers' own */
            argv[5] = "--peers";
            argv[6] = peers.data;
        }
        if (job_has_command(j)) {
            if (start_command(n, t, &j->spec,
                              list.data != NULL ? list.data : "", peers.data,
                              plan_file, transport[0] ? transport : NULL, creds,
                              mlisten, record)) {
                t->phase = AGENT_TASK_RUNNING;
                t->report_running = 1;
            }
        } else if (start_flworker(n, t, j->parsed ? &j->spec : NULL, argv)) {
            t->phase = AGENT_TASK_RUNNING;
            t->report_running = 1;
        }
    }
out:
    flps_strbuf_fini(&list);
    flps_strbuf_fini(&peers);
}

void agent_reconcile_wait(agent_task *t, uint32_t count, const char *whose)
{
    t->phase = AGENT_TASK_WAITING;
    if (!t->waiting_logged)
        log_info("task %s: waiting for the endpoints of the job's %u %s",
                 t->key, count, whose);
    t->waiting_logged = 1;
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
    agent_reconcile_forget_jobs(n, 0);
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
