/* The rounds of a fedavg job in one worker process: local SGD for each of
 * its sampled clients, then one synchronous push of their scaled, weighted
 * deltas through libflps (see worker/fedavg.h for the arithmetic). */
#ifndef FLPS_WORKER_FEDAVG_LOOP_H
#define FLPS_WORKER_FEDAVG_LOOP_H

#include <stdint.h>

#include "flps.h"
#include "services/jobspec.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/partition.h"

typedef struct fedavg_loop_args {
    const jobspec *spec; /* mode fedavg */
    uint32_t rank;       /* of spec->workers processes */
    const dataset *train, *test;
    const partition *part; /* one list per client; client c is played by
                              rank c % spec->workers */
    model *m;              /* its parameters are the local model */
    flps_client *client;   /* registered with lr 1, momentum 0 and the
                              global buffers below as its replica */
    float *const *global;  /* per tensor of m: the global model */
    uint64_t start_round;  /* the first round the shards have not closed */
    const char *backend;   /* the compute backend's name, for the done
                              line (worker/backend.h) */
} fedavg_loop_args;

/* Run rounds start_round .. spec->rounds - 1. Each round every process
 * computes the same client sample; for each of its own sampled clients it
 * starts from the global model, runs local_steps SGD steps (batch_size,
 * lr, momentum; velocity from zero) on the client's samples, and adds
 * n_c * (local - global) to its push; then every process pushes (zeros
 * when it has no client in the round) and waits for the round's update.
 * Events on stdout as JSON lines: rank 0 prints "progress" per round,
 * "eval" on the global model every eval_every rounds and in each of the
 * last five rounds, and every rank a "done" line (with the backend; rank 0's
 * with rounds, test_accuracy and test_accuracy_last5). Blocks for the whole
 * job. Errors: FLPS_ENOMEM, a failed training step (FLPS_ENONFINITE) or the
 * client's errors; logged with the round. */
flps_err fedavg_loop_run(const fedavg_loop_args *a);

#endif
