/* Gang placement of jobs on nodes, and the queue pass with backfill
 * (docs/scheduler.md, "Scheduling", step 4). Pure: no Redis, no clock, no
 * logging; the caller reads the state, passes it in and commits what comes
 * out, so every rule here is tested with exact expected placements. */
#ifndef FLPS_SCHED_PLACE_H
#define FLPS_SCHED_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* An amount of every resource: CPUs in thousandths (1.5 CPUs = 1500), so
 * sums never drift, memory in bytes, GPUs. */
typedef struct sched_res {
    uint64_t mcpus;
    uint64_t memory;
    uint64_t gpus;
} sched_res;

/* 1.5 -> 1500 thousandths, rounded to the nearest, except that a positive
 * amount below 0.001 gives 1 (never 0); zero, negative or non-finite
 * values give 0. */
uint64_t sched_res_mcpus(double cpus);

/* One node as placement sees it. Arrays of nodes are in name order: "first
 * node in name order" is the lowest index. */
typedef struct sched_pnode {
    sched_res cap;  /* what the node offers */
    sched_res used; /* needs of the tasks in its desired set (may exceed cap
                       after a node re-registers smaller: then nothing is
                       free) */
    int ready;      /* 0 (LOST): nothing new is placed there */
    int rdma;       /* its flagent reports an ACTIVE RDMA port */
} sched_pnode;

/* What a job needs. */
typedef struct sched_pjob {
    uint32_t servers;
    uint32_t workers;
    sched_res per_server;
    sched_res per_worker;
    double time_limit; /* seconds; 0 = no limit */
    uint32_t priority; /* for sched_place_order: higher first */
    uint64_t seq;      /* for sched_place_order: submission order */
    int need_rdma;     /* transport: rdma: only nodes with rdma set */
    /* servers: auto (as many servers as workers): server i on worker i's
     * node, the pairs spread over the nodes as servers are */
    int beside;
} sched_pjob;

/* Queue order: order[n] gets the indices of jobs[n] by priority (highest
 * first), then seq (lowest first). Never fails. */
void sched_place_order(const sched_pjob *jobs, size_t n, size_t *order);

/* A running job, for the head's reservation. */
typedef struct sched_prun {
    const sched_res *held; /* nnodes entries: what its tasks hold on each
                              node; borrowed for the call */
    double end;            /* started_at + time_limit; 0 = no limit */
} sched_prun;

typedef enum {
    SCHED_PLACE_NO = 0,   /* stays queued */
    SCHED_PLACE_IN_ORDER, /* placed in queue order (nothing ahead waits) */
    SCHED_PLACE_BACKFILL, /* placed past a head that waits */
} sched_place_how;

/* The outcome for one queued job. server_node and worker_node are the
 * caller's arrays (job.servers and job.workers entries) and receive node
 * indices when the job is placed; untouched otherwise. */
typedef struct sched_pdecision {
    sched_place_how how;
    uint32_t *server_node;
    uint32_t *worker_node;
} sched_pdecision;

/* The reservation made for the first job that did not fit (the head). */
typedef struct sched_preserve {
    int have;     /* 0: every job fit, or none could ever fit the READY nodes */
    size_t job;   /* its index in the queue */
    double start; /* when enough running jobs will have ended for it; 0 when
                     that is unknown (jobs without a time_limit hold what it
                     needs) */
} sched_preserve;

/* Place one job on free (nnodes entries, what each node has free; nodes
 * with ready == 0 are skipped, and so are nodes without rdma for a job
 * with need_rdma): servers spread (each to the ready node
 * with room holding the fewest servers of this job, ties by most free
 * CPUs, then name order), then workers packed (first node in name order
 * with room). All or nothing: on *placed = 1 the node indices are in
 * server_node[servers] and worker_node[workers] and the job's needs are
 * taken from free; on *placed = 0 nothing is written. Errors: FLPS_ENOMEM,
 * FLPS_EINVAL (NULL arguments). */
flps_err sched_place_gang(const sched_pnode *nodes, sched_res *free,
                          size_t nnodes, const sched_pjob *job,
                          uint32_t *server_node, uint32_t *worker_node,
                          int *placed);

/* Could job be placed on these nodes if they were all empty (ready or
 * not: a LOST node may come back)? *fits = 1 or 0. This is the check that
 * refuses a job at submit. Errors: FLPS_ENOMEM, FLPS_EINVAL. */
flps_err sched_place_fits_ever(const sched_pnode *nodes, size_t nnodes,
                               const sched_pjob *job, int *fits);

/* For a job that does not fit ever: the job file key to blame and a
 * one-line message saying what the nodes offer (into msg, cut to msglen).
 * *field is a static string: "transport" for a need_rdma job when no node
 * has rdma, else (counting only the nodes with rdma for such a job)
 * "cpus_per_worker", "memory_per_server", ... when one task is bigger than
 * every node, else "workers" (or "servers" when the servers alone do not
 * fit). */
void sched_place_explain(const sched_pnode *nodes, size_t nnodes,
                         const sched_pjob *job, const char **field, char *msg,
                         size_t msglen);

/* One pass over the queue (jobs in queue order: priority, then
 * submission). Jobs are placed in order while they fit. The first one that
 * does not fit, but would on the READY nodes if they were empty, becomes
 * the head and gets a reservation: the earliest time enough running jobs
 * end (from their `end`; a job already past it ends "now") and the nodes
 * it would take then. A job that could never fit the READY nodes is
 * skipped without a reservation. After the head, a job is backfilled only
 * if it fits now and either (a) it has a time_limit and now + time_limit
 * <= the reservation's start, or (b) it fits into what remains after the
 * head's reservation, node by node (the smaller of what is free now and
 * what will be free at the start after the head takes its share; when the
 * start is unknown, the head is reserved as if every running job had
 * ended). Decisions go to out[nqueue]; *reserve (may be NULL) describes
 * the head. Errors: FLPS_ENOMEM, FLPS_EINVAL; out may then be partly
 * written and must be ignored. */
flps_err sched_place_queue(const sched_pnode *nodes, size_t nnodes,
                           const sched_prun *running, size_t nrunning,
                           const sched_pjob *queue, size_t nqueue, double now,
                           sched_pdecision *out, sched_preserve *reserve);

#endif
