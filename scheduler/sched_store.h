/* flsched's state in Redis: every read and write of the keys of
 * docs/redis-schema.md goes through here. A job's state moves only in Lua
 * scripts (sched_scripts.h) that check its state and attempt and make the
 * whole change in one step, so two schedulers (or the API and the leader's
 * loop) can never both move it.
 *
 * A store is one Redis connection: not thread-safe; give each thread its
 * own or guard it with a lock. Every call may block on Redis for up to the
 * connection's timeout. Errors: FLPS_EIO (Redis unreachable) and
 * FLPS_EREMOTE (an error reply) with the message in sched_store_error,
 * FLPS_ENOMEM; FLPS_EPROTO when Redis holds something malformed. */
#ifndef FLPS_SCHED_STORE_H
#define FLPS_SCHED_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "scheduler/sched_place.h"
#include "services/jobspec.h"

typedef struct sched_store sched_store;

typedef enum {
    SCHED_QUEUED = 0,
    SCHED_RUNNING,
    SCHED_SUCCEEDED,
    SCHED_FAILED,
    SCHED_CANCELLED,
} sched_state;

/* "QUEUED", ...; "UNKNOWN" outside the enum. */
const char *sched_state_name(sched_state s);
/* 1 and *out on a known name, else 0. */
int sched_state_parse(const char *name, sched_state *out);

/* One task hash (flps:task:{id}:{attempt}:{role}-{index}). */
typedef struct sched_task {
    char key[160];
    char job[32];
    uint32_t attempt;
    char role[8]; /* "server" or "worker" */
    uint32_t index;
    char name[24]; /* "worker-2" */
    char node[64];
    char state[16]; /* ASSIGNED, RUNNING, EXITED */
    char endpoint[256];
    char metrics[128]; /* HOST:PORT of its /metrics; "" until flagent says */
    int exited;        /* exit_code or signal given */
    long exit_code;    /* -1 when the agent lost the process */
    long signal;       /* 0 when it exited by itself */
    double started_at; /* 0 = not given */
    double exited_at;
    char *done; /* the worker's final JSON event; NULL if none; owned */
    sched_res need;
    char error[1024]; /* a failed process's last error line (flagent keeps
                         it whole up to 1023 bytes), "" if none */
    int have_bytes;   /* p_bytes_sent given: the worker's last progress */
    double p_bytes_sent, p_dense_bytes;
} sched_task;

/* One job hash, with its tasks when asked for. Strings are "" when absent;
 * times are 0 when not set. */
typedef struct sched_job {
    char id[32];
    char name[64];
    sched_state state;
    uint32_t priority;
    uint64_t seq;
    double submitted_at, started_at, finished_at;
    uint32_t attempt, restarts, max_restarts;
    char reason[1280]; /* a task's failure and its whole error line */
    uint32_t workers, servers;
    uint64_t iterations;
    double time_limit;
    sched_res per_worker, per_server;
    /* progress (p_* fields), each with a flag saying it was given */
    int have_progress;
    double p_iteration, p_loss, p_test_accuracy, p_bytes_sent, p_dense_bytes,
        p_elapsed;
    unsigned p_mask;   /* bit i set: field i of the list above given */
    char *spec;        /* job file text; owned */
    char *summary;     /* JSON text or NULL; owned */
    char *profile;     /* rank 0's profile event (JSON text) or NULL; owned */
    char transport[8]; /* the job file's transport: zmq, rdma or auto ("" in
                          a hash written before the field existed) */
    /* The job file's compression as jobspec_comp_format writes it
     * ("gtopk:0.01", "auto"), so the loop needs no parse of the spec; ""
     * in a hash written before the field existed. */
    char compression[40];
    char transport_used[8]; /* what the placement chose: zmq or rdma; ""
                               until placed */
    /* "beside" for servers: auto (server i on worker i's node), else "";
     * "" in a hash written before the field existed. */
    char placement[8];
    /* The job's data-plane credentials as a credentials file's text
     * (proto/creds.h), made at submit and written to the hash then; owned.
     * Never read back from the hash nor shown by the API: only flagent
     * reads it, for the job's processes. NULL otherwise. */
    char *credentials;
    sched_task *tasks; /* current attempt's, by key; owned */
    size_t ntasks;
} sched_job;

/* Free what a sched_job or sched_task holds (not the struct itself). */
void sched_job_fini(sched_job *j);
void sched_task_fini(sched_task *t);
void sched_jobs_free(sched_job *jobs, size_t n);

/* A node as flsched sees it: its hash, whether the alive key exists, the
 * task keys in its desired set and what they use (derived). */
typedef struct sched_node {
    char name[64];
    char address[128];
    char metrics[128]; /* HOST:PORT of flagent's /metrics; "" if none */
    sched_res cap;
    char state[16]; /* READY, LOST ("" when the hash is missing) */
    double last_heartbeat, registered_at;
    int alive;
    sched_res used;
    char **tasks; /* task keys; owned */
    sched_res *task_need;
    size_t ntasks;
    uint32_t rdma_ports; /* ACTIVE RDMA ports its agent reports (facts) */
} sched_node;

void sched_nodes_free(sched_node *nodes, size_t n);

/* Connect to url (redis://...). The store never retries a command behind
 * the caller's back. Caller owns *out. */
flps_err sched_store_create(const char *url, int timeout_ms, sched_store **out);
void sched_store_destroy(sched_store *st);
const char *sched_store_error(const sched_store *st);
flps_err sched_store_ping(sched_store *st);

/* ---- Jobs ---- */

/* Write a new QUEUED job: id "j" + INCR of flps:seq:job, its hash, its
 * place in flps:jobs and flps:queue, and a "submitted" event, in one
 * script (so numbers have no gaps).
 * *out (may be NULL) receives the job as stored. */
flps_err sched_store_submit(sched_store *st, const jobspec *spec,
                            const char *text, size_t len, double now,
                            sched_job *out);

/* Read job id (with its current attempt's tasks when with_tasks). *found
 * = 0 when there is no such job (out untouched). */
flps_err sched_store_job(sched_store *st, const char *id, int with_tasks,
                         sched_job *out, int *found);

/* Every job in submission order, with tasks. Caller frees with
 * sched_jobs_free. */
flps_err sched_store_jobs(sched_store *st, sched_job **out, size_t *n);

/* The queued jobs, in flps:queue order (without tasks). */
flps_err sched_store_queue(sched_store *st, sched_job **out, size_t *n);

typedef enum {
    SCHED_CANCEL_DONE = 0,
    SCHED_CANCEL_NO_JOB,
    SCHED_CANCEL_FINISHED,
} sched_cancel_result;

/* Cancel: CANCELLED, out of the queue, its tasks out of the nodes'
 * desired sets, event; one transaction. *out (may be NULL) gets the job
 * after the change (or as it is when already finished). */
flps_err sched_store_cancel(sched_store *st, const char *id, double now,
                            sched_cancel_result *result, sched_job *out);

/* Append an event {"seq","time","type","message"} to the job's list
 * (seq from the job hash's event_seq, list capped at 1000). */
flps_err sched_store_event(sched_store *st, const char *id, double now,
                           const char *type, const char *message);

/* Events with seq > since, as JSON texts (caller frees each and the array
 * with flps_free). */
flps_err sched_store_events(sched_store *st, const char *id, long long since,
                            char ***out, size_t *n);

/* Log lines after stream id `after` (NULL or "" = from the start), at most
 * limit. ids/tasks/lines are parallel arrays (caller frees with
 * sched_strv_free each). */
flps_err sched_store_logs(sched_store *st, const char *id, const char *after,
                          long limit, char ***ids, char ***tasks, char ***lines,
                          size_t *n);
void sched_strv_free(char **v, size_t n);

/* The plan hash: *version and *plan (caller frees) or *found = 0. */
flps_err sched_store_plan(sched_store *st, const char *id, char **version,
                          char **plan, int *found);

/* What the plan hash says of the profiles seen: *version (0 when no plan)
 * and seen, the digest of the last profile the planner handled ("" when
 * none). */
flps_err sched_store_plan_seen(sched_store *st, const char *id,
                               uint64_t *version, char *seen, size_t seenlen);

/* Record the planner's answer to the profile with digest seen, in one
 * script that first checks the plan's version and flps:leader (which must
 * hold leader_id): with plan_json, version prev_version + 1, plan,
 * created_at; always profile_seen; and an event of type with message.
 * *committed = 0 when the plan moved past prev_version meanwhile or this
 * scheduler no longer leads: nothing was written. */
flps_err sched_store_plan_put(sched_store *st, const char *leader_id,
                              const char *id, uint64_t prev_version,
                              const char *plan_json, const char *seen,
                              double now, const char *type, const char *message,
                              int *committed);

/* ---- Leader's loop ---- */

/* Commit a placement of job (QUEUED, job->attempt): task hashes, the
 * nodes' desired sets, the job's tasks set, RUNNING, started_at, out of
 * the queue, a "placed" event, in one script that first checks the job
 * (QUEUED at job->attempt) and flps:leader (which must hold leader_id;
 * NULL: no check). server_nodes
 * and worker_nodes name the node of each task; job->transport_used, when
 * set, is written to the job hash and every task hash as the transport its
 * processes run (flagent passes it as --transport). *committed = 0 when the
 * job
 * changed meanwhile (cancelled) or this scheduler is no longer the leader:
 * nothing was written. */
flps_err sched_store_place(sched_store *st, const char *leader_id,
                           const sched_job *job,
                           const char *const *server_nodes,
                           const char *const *worker_nodes, double now,
                           int *committed);

/* LPOP flps:exits into key; *got = 0 when the list is empty. */
flps_err sched_store_pop_exit(sched_store *st, char *key, size_t keylen,
                              int *got);

/* Read one task hash; *found = 0 when it does not exist. */
flps_err sched_store_task(sched_store *st, const char *key, sched_task *out,
                          int *found);

/* RUNNING job id at attempt -> SUCCEEDED with summary (JSON text), its
 * tasks out of the desired sets. *done = 0 when the job was not RUNNING
 * at that attempt (nothing written). */
flps_err sched_store_succeed(sched_store *st, const char *id, uint32_t attempt,
                             const char *summary, double now, int *done);

typedef enum {
    SCHED_FAIL_IGNORED = 0, /* not RUNNING at that attempt */
    SCHED_FAIL_REQUEUED,    /* restarts < max_restarts: QUEUED again */
    SCHED_FAIL_FAILED,
} sched_fail_result;

/* A failure of job id at attempt: when restart is allowed and restarts <
 * max_restarts, restarts++ and attempt++, QUEUED with its original queue
 * score, the old tasks out of the desired sets and the job's tasks set
 * emptied; otherwise FAILED. reason is stored and put in the event. */
flps_err sched_store_fail(sched_store *st, const char *id, uint32_t attempt,
                          const char *reason, int allow_restart, double now,
                          sched_fail_result *result);

/* Every registered node (flps:nodes) in name order. */
flps_err sched_store_nodes(sched_store *st, sched_node **out, size_t *n);

/* READY node whose alive key is gone -> LOST (one script looks at both,
 * so a node that heartbeats meanwhile stays READY). *marked = 1 when it
 * changed. */
flps_err sched_store_node_lost(sched_store *st, const char *name, int *marked);

/* A LOST node whose alive key is back -> READY. */
flps_err sched_store_node_back(sched_store *st, const char *name, int *marked);

/* Give an alive key that has no TTL one of ttl_s seconds (a writer that
 * forgot EX must not keep a dead node READY for ever). */
flps_err sched_store_node_cap_ttl(sched_store *st, const char *name, int ttl_s);

/* ---- Leader lease (flps:leader) ---- */

/* Take the lease if free (SET NX PX) or renew it if it is already ours
 * (compare-and-renew script). *held = 1 when id holds it now. */
flps_err sched_store_lease(sched_store *st, const char *id, long lease_ms,
                           int *held);

/* Delete the lease if it is ours (compare-and-delete). */
flps_err sched_store_lease_release(sched_store *st, const char *id);

#endif
