/* The store's part for launchers that run jobs themselves (the kubernetes
 * launcher) and for the reports of their pods: which jobs have objects on
 * the cluster, the task hashes as the pods say, the pods' log lines, and
 * the events a worker reports through the API (docs/redis-schema.md).
 * Same contract as sched_store.h: one connection, not thread-safe, blocks
 * on Redis; FLPS_EIO/FLPS_EREMOTE with sched_store_error. */
#ifndef FLPS_SCHED_LAUNCH_STORE_H
#define FLPS_SCHED_LAUNCH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "scheduler/sched_store.h"

/* The set of job ids with objects on the cluster (flps:k8s:jobs). */
flps_err sched_store_launched(sched_store *st, char ***ids, size_t *n);
flps_err sched_store_launched_add(sched_store *st, const char *id);
flps_err sched_store_launched_remove(sched_store *st, const char *id);

/* The attempt whose objects exist (job hash field k8s_attempt), -1 when
 * none; set it (-1 removes the field). */
flps_err sched_store_launched_attempt(sched_store *st, const char *id,
                                      long *attempt);
flps_err sched_store_launched_set_attempt(sched_store *st, const char *id,
                                          long attempt);

/* The job's credentials text (its hash's credentials field) into *out
 * (caller wipes and frees); NULL when it has none. */
flps_err sched_store_job_credentials(sched_store *st, const char *id,
                                     char **out);

/* HSET of n field/value pairs (fv[2k], fv[2k+1]) on task key, only when
 * the task hash exists (a task gone with its job is not made again). */
flps_err sched_store_task_set(sched_store *st, const char *key,
                              const char *const *fv, size_t n);

/* One field of task key into buf ("" when absent). */
flps_err sched_store_task_get(sched_store *st, const char *key,
                              const char *field, char *buf, size_t len);

/* A task's process ended (as an agent reports it): state EXITED,
 * exit_code, signal, exited_at, error, then the key onto flps:exits for
 * the loop. */
flps_err sched_store_task_exit(sched_store *st, const char *key, long code,
                               long sig, double at, const char *error);

/* Append lines to the job's log stream with the task's name (XADD MAXLEN
 * ~ 10000, as flagent does). */
flps_err sched_store_log_append(sched_store *st, const char *id,
                                const char *task, const char *const *lines,
                                size_t n);

/* A RUNNING job at attempt waits for the cluster: set its reason to
 * waiting (when not NULL), or, with waiting NULL, clear the reason if it
 * is still was (what this launcher set). Nothing changes for a job that
 * moved on. *changed = 1 when written. */
flps_err sched_store_job_waiting(sched_store *st, const char *id,
                                 uint32_t attempt, const char *waiting,
                                 const char *was, int *changed);

/* n field/value pairs onto the job hash of a RUNNING job at attempt (a
 * worker's progress, eval and profile reports); *stored = 0 when the job
 * is not RUNNING at that attempt. */
flps_err sched_store_job_report(sched_store *st, const char *id,
                                uint32_t attempt, const char *const *fv,
                                size_t n, int *stored);

#endif
