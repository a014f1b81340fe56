/* flsched's training series (one set per job, from what the agents store
 * in the job hashes), its placement-latency histogram, and the Prometheus
 * HTTP service-discovery list of every daemon's /metrics
 * (GET /v1/metrics/targets; docs/metrics.md). */
#ifndef FLPS_SCHED_METRICS_H
#define FLPS_SCHED_METRICS_H

#include <stddef.h>

#include "common/err.h"
#include "scheduler/sched_loop.h"
#include "scheduler/sched_store.h"
#include "services/httpd.h"
#include "services/metrics.h"

typedef struct sched_metrics sched_metrics;

/* Register the families in reg (borrowed until destroy), flsched_build_info
 * and the process_* ones included, and have stats report each placement
 * to the histogram (sets stats->on_place; do it before the loop's first
 * step). Errors: FLPS_EINVAL, FLPS_ENOMEM. Caller owns *out. */
flps_err sched_metrics_create(metrics *reg, sched_loop_stats *stats,
                              sched_metrics **out);

/* Free m (not the registry). NULL ok. */
void sched_metrics_destroy(sched_metrics *m);

/* Set the per-job series from jobs[0..nj) and flsched_nodes_alive from
 * nodes[0..nn) (both borrowed for the call). Thread-safe. */
void sched_metrics_refresh(sched_metrics *m, const sched_job *jobs, size_t nj,
                           const sched_node *nodes, size_t nn);

/* The http_sd target list as JSON text: a group per task of a RUNNING
 * job's current attempt that is RUNNING and has told its metrics address
 * (labels job_id, job_name, role "server" or "worker", rank, node), and
 * one per READY node whose flagent serves metrics (role "agent", node).
 * Pure: no I/O. On FLPS_OK the caller owns *out (free()). FLPS_ENOMEM. */
flps_err sched_metrics_targets_json(const sched_job *jobs, size_t nj,
                                    const sched_node *nodes, size_t nn,
                                    char **out);

#endif
