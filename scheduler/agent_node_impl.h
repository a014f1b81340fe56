/* Internal to scheduler/agent_*.c: the node agent's state and the calls
 * its parts make of each other. agent_node.c holds Redis, registration,
 * the loop and the life cycle; agent_report.c what tasks print and how
 * they end; agent_reconcile.c starting and stopping tasks against the
 * desired set; agent_plan.c the compression plans followed into files.
 * Single-threaded like the agent: nothing here locks. Not for use outside
 * scheduler/agent_*.c. */
#ifndef FLPS_SCHED_AGENT_NODE_IMPL_H
#define FLPS_SCHED_AGENT_NODE_IMPL_H

#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/strbuf.h"
#include "scheduler/agent_config.h"
#include "scheduler/agent_metrics.h"
#include "scheduler/agent_node.h"
#include "scheduler/agent_task.h"
#include "scheduler/agent_uids.h"
#include "scheduler/rconn.h"
#include "services/jobspec.h"
#include "services/procs.h"

#define AGENT_LOOP_MS 200      /* the loop's period (docs/scheduler.md) */
#define AGENT_RETRY_S 1.0      /* between attempts to reach Redis */
#define AGENT_STOP_GRACE_S 10. /* SIGTERM, then SIGKILL after this */
#define AGENT_LOG_MAXLEN "10000"
#define AGENT_CKPT_INTERVAL "30"
#define AGENT_PLAN_CHECK_S 0.5 /* a job's plan version is read this often */
/* A saps job's workers wait this many times its peer_deadline (60 s by
 * default) for every worker's endpoint (agent_peers.c). */
#define AGENT_RENDEZVOUS_PER_DEADLINE 6.0

typedef enum {
    AGENT_TASK_NEW,      /* in the desired set, to be started */
    AGENT_TASK_WAITING,  /* a worker waiting for its servers' endpoints
                            (saps: its peers') */
    AGENT_TASK_STARTING, /* a server started, no endpoint printed yet */
    AGENT_TASK_RUNNING,
    AGENT_TASK_EXITED,  /* its process is gone (or never was: see exit_code) */
    AGENT_TASK_IGNORED, /* a key flagent cannot run; logged once */
} agent_task_phase;

typedef struct agent_task agent_task;

struct agent_task {
    agent_task *next;
    agent_node *node; /* for the line callbacks */
    char key[256];
    agent_task_id id;
    agent_task_phase phase;
    int desired; /* in the desired set at the last look */
    uint32_t servers;
    proc *p;   /* while it has a process (large: two line buffers) */
    uid_t uid; /* the job's uid its process runs as and its files are
                  written as (agent_uids.h); (uid_t)-1: the agent's own */
    FILE *log;
    char endpoint[256];
    /* saps: the endpoint this worker listens on for its peers (picked by
     * the agent), whether it is in the task hash, and since when. */
    char peer_endpoint[112];
    int peer_published;
    double peer_since;
    char metrics[128];  /* "HOST:PORT" its /metrics is on; "" until told */
    int report_metrics; /* metrics not yet in the task hash */
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
    /* This worker's bytes so far (its last progress event), so the job's
     * progress can count every worker as its summary does. */
    char sent[40], dense[40];
    int report_sent;
    int report_exit;
    int job_gone_logged; /* "the job's hash is gone" said */
    uint64_t exit_seq;
    int exit_code, exit_signal;
    char exited_at[32];
    char exit_error[400]; /* why flagent could not start it; "" if it ran */
    /* The last line of its stderr that says what went wrong
     * (agent_error_line): the failure's reason when it exits non-zero or
     * is killed. Its own stderr only, never what another process or its
     * stdout printed, and whole up to PROC_ERROR_LINE_MAX. */
    char last_error[PROC_ERROR_LINE_MAX];
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

/* A job with a task on this node, read from its hash once, when the first
 * of its tasks starts here, and kept while the node has a task of it
 * (agent_reconcile.c): its job file is parsed once per agent, not once per
 * task or start. */
typedef struct agent_job agent_job;

struct agent_job {
    agent_job *next;
    char id[AGENT_TASK_NAME_MAX + 1];
    uint32_t servers;
    char *text; /* the job file as flsched stored it (the workers'
                   job.yaml); NULL when the hash holds none */
    int parsed; /* spec holds text, parsed; 0: it does not parse, and
                   flworker says why when it reads it */
    jobspec spec;
};

struct agent_node {
    agent_config cfg;
    char flps_bin[PATH_MAX];
    char flworker_bin[PATH_MAX];
    char node_key[128], alive_key[128], tasks_key[128];
    long long ttl_ms;
    rconn *rc;
    int redis_ok;        /* the last Redis call worked */
    flps_err fatal;      /* FLPS_ECONFIG: Redis refused our credentials */
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
    agent_job *jobs;
    uint64_t exit_counter;
    struct pollfd *pfds;
    agent_task **pfd_task;
    size_t pfd_cap;
    agent_uids *uids;       /* per-job uids; NULL when off */
    int uids_swept;         /* the uids taken back at start that no task
                               came back for are released */
    agent_metrics *metrics; /* --metrics; NULL when off */
    char metrics_addr[128]; /* where it serves, "" when off */
    int metrics_published;  /* metrics_addr in the node hash since the
                               last registration */
};

/* ---- agent_node.c: what every part uses ---- */

/* The wall clock as flsched's hashes hold it: seconds with 3 decimals. */
void agent_node_wall_text(char *buf, size_t len);

/* Run one Redis command (argv borrowed for the call); what names the step
 * in a log line. 1 when it worked: *r (when r is not NULL) is the reply,
 * which the caller frees with freeReplyObject. 0 when Redis is away (the
 * agent waits for the next retry) or answered an error (logged). */
int agent_node_redis_cmd(agent_node *n, redisReply **r, const char *what,
                         int argc, const char **argv);

/* The task of key, or NULL. */
agent_task *agent_node_task_find(agent_node *n, const char *key);

/* A new task for key at the head of n's list; NULL when out of memory
 * (logged). n owns it. */
agent_task *agent_node_task_add(agent_node *n, const char *key);

/* Forget t's process after it was reaped: close its pipes and the task's
 * log file. Does nothing for what is already closed. */
void agent_node_task_close(agent_task *t);

/* Free t and close what agent_node_task_close does; its process must be
 * reaped. */
void agent_node_task_free(agent_task *t);

/* ---- agent_facts.c ---- */

/* Publish what `flsubmit doctor` checks of this node to
 * flps:node:{name}:facts (docs/flagent.md, "Node checks"): whether the
 * Fashion-MNIST files of --data-dir are there, the RDMA devices, the
 * memlock limit, and this clock's offset from Redis's. Called at each
 * registration and heartbeat; a failure is logged by the Redis layer
 * and retried at the next heartbeat. */
void agent_facts_publish(agent_node *n);

/* Mark t exited (or failed to start: exit_code -1, no process) and queue
 * its report, in the order exits happen. */
void agent_node_task_set_exited(agent_node *n, agent_task *t, int exit_code,
                                int sig);

/* Write len bytes to path through tmp renamed into place, so a reader
 * never sees half of it. 0 on success, else errno (tmp is removed). */
int agent_node_write_file(const char *path, const char *tmp, const char *data,
                          size_t len);

/* ---- agent_clock.c: the workers' GPU clocks ---- */

/* Where worker task t records the GPU clocks it changes: a file in its
 * attempt's directory (--gpu-clock-record, FLPS_GPU_CLOCK_RECORD). */
void agent_clock_record_path(const agent_node *n, const agent_task *t,
                             char *path, size_t len);

/* t (a worker) was reaped: restore the clocks its record names (one it
 * died before restoring), logged. Does nothing without a record. */
void agent_clock_restore(const agent_node *n, const agent_task *t);

/* ---- agent_report.c: output and reports ---- */

/* Append line to t's log file and, when Redis is there, to the job's log
 * stream (counted as dropped when not). */
void agent_report_line(agent_node *n, agent_task *t, const char *line);

/* Read what every child printed, waiting up to timeout_ms for something
 * to happen. */
void agent_report_pump(agent_node *n, int timeout_ms);

/* Reap the children that exited: read the rest of what they printed
 * first, so a worker's done event is stored before its exit is reported. */
void agent_report_reap(agent_node *n);

/* Store every queued report in Redis: states, progress, profiles and done
 * events, then exits in the order they happened. Stops at the first that
 * fails (kept for the next call). */
void agent_report_flush(agent_node *n);

/* ---- agent_plan.c: compression plans ---- */

/* Where the plan of job is written: {work_dir}/{job}/plan.json. */
void agent_plan_path(const agent_node *n, const char *job, char *path,
                     size_t len);

/* The plan n follows for job, made (not yet written) when new; NULL when
 * out of memory (logged). n owns it. */
agent_plan *agent_plan_find(agent_node *n, const char *job);

/* Look at the job's plan version (one HGET) and, when it is newer than
 * the file's, write the stored plan to the file. A file that cannot be
 * written is tried again at the next look, and said once per version. */
void agent_plan_check(agent_node *n, agent_plan *pl);

/* Follow the plan of every job with a worker task on this node (waiting
 * or running), each at most every AGENT_PLAN_CHECK_S; forget the others. */
void agent_plan_follow(agent_node *n);

/* ---- agent_report.c: reports into Redis ---- */

/* The Lua script every job-hash report of flagent (progress, eval,
 * profile) runs: KEYS the job hash; ARGV field/value pairs. It sets them
 * only if the hash exists and returns 1, else 0 without creating it: a
 * report that arrives after the job is gone must not leave a hash of
 * progress fields with no state. */
extern const char agent_job_report_lua[];

/* ---- agent_peers.c: the endpoints a worker starts with ---- */

/* The endpoints (hash field `field`) of count tasks of t's job and
 * attempt, `role`-0 to `role`-(count-1) ("server", "worker"), appended to
 * list in index order ("tcp://H:P,..."). 1: all there; 0: not yet, with
 * *missing the first task without one (UINT32_MAX when Redis is away);
 * -1: the task cannot run, why says so (an endpoint that is not
 * tcp://HOST:PORT, never passed on as an argument; out of memory). */
int agent_endpoints_get(agent_node *n, const agent_task *t, const char *role,
                        uint32_t count, const char *field, flps_strbuf *list,
                        uint32_t *missing, char *why, size_t len);

/* Worker t of saps job js: its endpoint picked and published (once), then
 * every worker's of its attempt read. 1: all there, appended to list in
 * rank order ("tcp://H:P,..."); 0: not yet (t is WAITING, or Redis is
 * away); -1: the task cannot run, why says so (no free port, a peer that
 * never registered within AGENT_RENDEZVOUS_PER_DEADLINE x peer_deadline
 * of this one's, or an endpoint that is none). */
int agent_peers_get(agent_node *n, agent_task *t, const jobspec *js,
                    flps_strbuf *list, char *why, size_t len);

/* ---- agent_reconcile.c: the desired set ---- */

/* Read the node's desired set: start what is new in it (once the earlier
 * attempts of its job are gone), SIGTERM what left it. */
void agent_reconcile_run(agent_node *n);

/* SIGTERM t's process (once); why goes in the log line. */
void agent_reconcile_stop(agent_task *t, const char *why);

/* SIGKILL what still runs AGENT_STOP_GRACE_S after its SIGTERM. */
void agent_reconcile_kills(agent_node *n);

/* Worker t waits for the endpoints of count of its job's tasks (whose:
 * "server(s)", ...): WAITING, said once in the log. */
void agent_reconcile_wait(agent_task *t, uint32_t count, const char *whose);

/* Forget the jobs read for tasks that are gone (every job when all). */
void agent_reconcile_forget_jobs(agent_node *n, int all);

#endif
