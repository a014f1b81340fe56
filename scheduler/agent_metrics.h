/* flagent's /metrics (its own: processes started and exited, tasks
 * running, heartbeats, the node's resources) and the metrics addresses of
 * the processes it starts, published in their task hashes for flsched's
 * target list (docs/metrics.md). Internal to scheduler/agent_*.c. */
#ifndef FLPS_SCHED_AGENT_METRICS_H
#define FLPS_SCHED_AGENT_METRICS_H

#include <stddef.h>

#include "common/err.h"
#include "scheduler/agent_config.h"
#include "scheduler/agent_task.h"

typedef struct agent_metrics agent_metrics;
typedef struct agent_node agent_node;
typedef struct agent_task agent_task;

/* Register flagent's families (the node's resources from cfg) and serve
 * them with /healthz on cfg->metrics; bound gets the address bound.
 * Errors as httpd_start (logged), FLPS_ENOMEM. Caller owns *out. */
flps_err agent_metrics_create(const agent_config *cfg, agent_metrics **out,
                              char *bound, size_t boundlen);

/* Stop serving and free m. NULL ok. */
void agent_metrics_destroy(agent_metrics *m);

/* Updates from the agent's loop; each does nothing when m is NULL. */
void agent_metrics_started(agent_metrics *m, agent_role role);
/* exit_code and sig as agent_exit_fields gives them; a task that could
 * not start has exit_code -1 and sig 0. */
void agent_metrics_exited(agent_metrics *m, agent_role role, int exit_code,
                          int sig);
void agent_metrics_heartbeat(agent_metrics *m, double wall);
/* Read the node's energy counters (at most every 10 s) into
 * flagent_node_energy_joules_total. */
void agent_metrics_energy(agent_metrics *m);
/* Count the tasks with a live process, by role. */
void agent_metrics_tasks(agent_metrics *m, const agent_node *n);

/* The "--metrics HOST:0" a task gets: the node's address, a free port
 * (the process prints "metrics on HOST:PORT"). */
void agent_metrics_task_listen(const agent_node *n, char *buf, size_t len);

/* A line a task printed: 1 when it was "metrics on HOST:PORT" (kept in t
 * and queued for its task hash), else 0. */
int agent_metrics_task_line(agent_task *t, const char *line);

/* Store a queued metrics address in t's task hash (field "metrics"), and
 * the agent's own in the node hash once after each registration. 1 when
 * done or nothing to do, 0 when Redis failed (kept for the next flush). */
int agent_metrics_flush_task(agent_node *n, agent_task *t);
int agent_metrics_flush_node(agent_node *n);

#endif
