/* The one description of the job hash flps:job:{id} (docs/redis-schema.md):
 * one table gives each field's Redis name, its type, where it lives in
 * sched_job and its name in the API's job JSON. It drives writing the hash
 * at submit, reading it back, and the job objects of GET /v1/jobs. A new
 * field is one line of the table in sched_jobhash.c. */
#ifndef FLPS_SCHED_JOBHASH_H
#define FLPS_SCHED_JOBHASH_H

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "scheduler/sched_store.h"

/* Receives one field of the hash: name and value borrowed for the call
 * (value len bytes, NUL-terminated). A non-OK return stops the walk. */
typedef flps_err (*sched_jobhash_put_fn)(void *arg, const char *field,
                                         const char *value, size_t len);

/* Call put for every field a submit writes, in table order, with the
 * value of j as the hash holds it ("1.5" CPUs, bytes, "%.17g"-short
 * reals). Returns what put returned first that was not FLPS_OK. */
flps_err sched_jobhash_write(const sched_job *j, sched_jobhash_put_fn put,
                             void *arg);

/* Read an HGETALL reply of the hash into *out (written only on FLPS_OK;
 * caller frees with sched_job_fini). Absent fields read as "" and 0;
 * tasks are left empty. Errors: FLPS_EPROTO (no valid state),
 * FLPS_ENOMEM. */
flps_err sched_jobhash_read(const redisReply *r, sched_job *out);

/* The job's fields as the API shows them (no "tasks"): a new object the
 * caller owns, NULL without memory. */
json_t *sched_jobhash_json(const sched_job *j);

/* Set o's progress.bytes_sent and dense_bytes (o: sched_jobhash_json's
 * object) to the sums over j's workers' last progress reports, so a
 * running job's "sent" counts every worker, as its summary does. Leaves o
 * as it is when no worker has reported bytes or o has no progress. */
void sched_jobhash_sum_progress(const sched_job *j, json_t *o);

/* JSON numbers as the API writes them: integral values as integers
 * (iteration 700, not 700.0), thousandths of a CPU as CPUs. New
 * references; NULL without memory. */
json_t *sched_json_number(double v);
json_t *sched_json_cpus(uint64_t mcpus);
/* A time as a JSON real, null when 0 (not set). */
json_t *sched_json_time(double t);

#endif
