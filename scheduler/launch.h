/* How flsched starts what it admits: one interface, two launchers.
 *
 * agents (bare metal, the local cluster): flsched places every task on a
 * registered node and flagent there runs it; the placement's desired sets
 * are the launch, so this launcher does nothing more (today's behaviour).
 *
 * kubernetes: the cluster places. flsched keeps the queue and the
 * priorities, admits queued jobs in that order, and the launcher creates
 * each admitted attempt's objects (launch_k8s.h), follows its pods into
 * the task hashes (states, exits, the pods' logs), and deletes everything
 * once the attempt ends.
 *
 * The leader's loop calls a launcher from its own thread only; the API
 * thread reads only launch_places and launch_info_json, which never
 * change after create. */
#ifndef FLPS_SCHED_LAUNCH_H
#define FLPS_SCHED_LAUNCH_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"
#include "scheduler/sched_store.h"

typedef struct launch launch;

typedef struct launch_ops {
    const char *name; /* "agents", "kubernetes" */
    /* 1: flsched places tasks on its registered nodes; 0: queued jobs are
     * admitted in queue order and the cluster places their pods. */
    int places;
    /* One turn of the leader's loop, after exits and placement. NULL:
     * nothing to do. Errors as sched_loop_step's (logged by the caller). */
    flps_err (*turn)(void *impl, sched_store *st, const char *leader_id,
                     double now);
    /* A job was admitted (committed RUNNING at its attempt). */
    flps_err (*admitted)(void *impl, sched_store *st, const char *id);
    /* Look at every job (the new leader's sweep): adopt RUNNING jobs that
     * have no objects yet. */
    flps_err (*sweep)(void *impl, sched_store *st, const sched_job *jobs,
                      size_t n);
    /* The ids of the jobs it runs (caller frees with sched_strv_free). */
    flps_err (*running)(void *impl, sched_store *st, char ***ids, size_t *n);
    void (*destroy)(void *impl);
} launch_ops;

/* Make a launcher of ops around impl (ownership of impl moves in on
 * FLPS_OK); info (may be NULL) is /v1/info's "launcher" object, consumed.
 * Errors: FLPS_ENOMEM (impl is then destroyed). */
flps_err launch_create(const launch_ops *ops, void *impl, json_t *info,
                       launch **out);

/* The agents launcher: flagent runs what the placement wrote. */
flps_err launch_agents_create(launch **out);

void launch_destroy(launch *l);

/* l may be NULL in each: the agents launcher. */
const char *launch_name(const launch *l);
int launch_places(const launch *l);
flps_err launch_turn(launch *l, sched_store *st, const char *leader_id,
                     double now);
flps_err launch_admitted(launch *l, sched_store *st, const char *id);
flps_err launch_sweep(launch *l, sched_store *st, const sched_job *jobs,
                      size_t n);
/* *ids NULL and *n 0 for a launcher that places on nodes. */
flps_err launch_running(launch *l, sched_store *st, char ***ids, size_t *n);

/* /v1/info's "launcher" object: {"kind": "agents"} or the kubernetes
 * launcher's (namespace, JobSet or Pods). A new reference, NULL without
 * memory. Thread-safe. */
json_t *launch_info_json(const launch *l);

#endif
