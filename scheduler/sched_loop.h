/* The leader's loop of docs/scheduler.md: the lease, exits, nodes,
 * failures, placement. One step does one turn; flsched calls it every
 * 200 ms, tests call it directly with the times they choose. */
#ifndef FLPS_SCHED_LOOP_H
#define FLPS_SCHED_LOOP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "scheduler/launch.h"
#include "scheduler/sched_store.h"

typedef struct sched_loop sched_loop;

typedef struct sched_loop_cfg {
    const char *id; /* this scheduler's name in flps:leader (copied) */
    long lease_ms;  /* lease length; renewed every lease_ms / 3 */
    int node_ttl_s; /* TTL given to alive keys found without one */
    /* Seconds after Redis was last unreachable (or stalled a turn for a
     * second or more) during which no READY node is judged LOST: the
     * agents' alive keys expired while they could not refresh them, and
     * they register again within a few heartbeats. 0: node_ttl_s. */
    double store_grace_s;
    /* How admitted jobs run (scheduler/launch.h); NULL: the agents.
     * Borrowed until destroy; used by the loop's thread only. */
    launch *launcher;
} sched_loop_cfg;

/* Counters read by /metrics from other threads (atomics, no lock). */
typedef struct sched_loop_stats {
    atomic_int leader;           /* 1 while this scheduler leads */
    atomic_ulong placements;     /* jobs placed */
    atomic_ulong backfills;      /* of which backfilled */
    atomic_ulong failures;       /* task or node failures handled */
    atomic_ulong restarts;       /* jobs sent back to the queue */
    atomic_ulong jobs_failed;    /* jobs that ended FAILED */
    atomic_ulong jobs_succeeded; /* jobs that ended SUCCEEDED */
    atomic_ulong nodes_lost;     /* READY -> LOST */
    /* Called on the loop's thread for each job placed with the seconds
     * it waited since it was queued; NULL: nobody listens. Set before the
     * first step, then only read. */
    void (*on_place)(void *arg, double seconds);
    void *on_place_arg;
} sched_loop_stats;

/* st is borrowed until destroy and used only by the loop's thread.
 * Caller owns *out. Errors: FLPS_EINVAL, FLPS_ENOMEM. */
flps_err sched_loop_create(sched_store *st, const sched_loop_cfg *cfg,
                           sched_loop **out);

/* Give up the lease if held (compare-and-delete) and free l. NULL ok. */
void sched_loop_destroy(sched_loop *l);

/* One turn at wall time now (Unix seconds, as stored in Redis) and
 * monotonic time mono (for the lease timers): try for or renew the lease
 * when due; when leading, handle exits, lost nodes (none within the
 * store grace after Redis was away), time limits and failures, then
 * place what fits. Redis errors are logged and returned
 * (FLPS_EIO, FLPS_EREMOTE ...); the next step starts over from Redis. A
 * leader that cannot renew its lease within lease_ms stops leading. */
flps_err sched_loop_step(sched_loop *l, double now, double mono);

/* Whether this scheduler holds the lease (as of its last step). */
int sched_loop_is_leader(const sched_loop *l);

/* The counters (borrowed until destroy; safe to read from any thread). */
sched_loop_stats *sched_loop_stats_of(sched_loop *l);

/* The summary of a finished job, as flrun prints it: test_accuracy (rank
 * 0's `done`, null if absent), iterations, bytes_sent / bytes_received /
 * dense_bytes summed over the workers' `done` events, wall_seconds from
 * started_at to the last worker's exited_at, reals in their shortest
 * form; then where there is something to say: compression, mode and
 * optimizer as the workers' `done` events name them ("mixed" when they
 * differ), mismatch (each setting they ran other than the job file gives)
 * and not_reported (test_accuracy, done, or a setting the file gives that
 * some worker did not name); joules_per_iteration (and its GPU and CPU
 * package parts, each group of devices counted once: services/
 * jobenergy.h, packages by the task's node), energy_method and gpu_clock
 * where the workers metered energy or set a clock. Caller frees *out
 * (flps_free).
 * Errors: FLPS_ENOMEM. */
flps_err sched_loop_summary(const sched_job *job, char **out);

#endif
