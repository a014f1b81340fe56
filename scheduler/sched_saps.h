/* A saps job (decentralized SAPS-PSGD) under flsched: which of its
 * workers it goes on without, and its part of the summary, the fields
 * flrun's summary has (docs/algorithms.md, "SAPS-PSGD"). Pure functions
 * of the job as the store read it; no I/O. */
#ifndef FLPS_SCHED_SAPS_H
#define FLPS_SCHED_SAPS_H

#include <jansson.h>
#include <stdint.h>

#include "scheduler/sched_store.h"
#include "services/sapsfold.h"

/* Whether job's file says mode: saps. */
int sched_saps_is_saps(const sched_job *job);

/* Whether worker task t of job is lost: it ran and stopped otherwise
 * than with status 0 (killed, a status, or its agent lost it). A worker
 * its agent could not start is not lost but never began, and fails the
 * job (a rendezvous that never completed says why). */
int sched_saps_is_lost(const sched_task *t);

/* The workers of job lost so far (sched_saps_is_lost), when job is a saps
 * job that goes on without them: at least two others are left to
 * exchange. 0 otherwise (every such exit fails the job, as in any mode). */
uint32_t sched_saps_lost(const sched_job *job);

/* The saps fields into summary o, as flrun's summary has them, from
 * the fold of the workers' done events (services/sapsfold.h) and job's
 * lost workers (named in workers_lost with those a done event says
 * dead), and bandwidth_mbps: the coordinator's matrix as rows of MB/s. */
void sched_saps_summary(const sapsfold *f, const sched_job *job, json_t *o);

#endif
