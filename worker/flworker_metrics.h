/* flworker's /metrics: training progress, traffic from the client's
 * counters, push and wait latencies, and what each layer's pushes send. */
#ifndef FLPS_WORKER_FLWORKER_METRICS_H
#define FLPS_WORKER_FLWORKER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "flps.h"
#include "worker/model.h"

typedef struct flw_metrics flw_metrics;

/* Register flworker's families for m's tensors (their names and sizes are
 * copied; m is borrowed for the call) and serve them with /healthz on
 * listen ("HOST:PORT", see httpd_start); bound gets the address bound.
 * Errors as httpd_start (logged), FLPS_ENOMEM. Caller owns *out. */
flps_err flw_metrics_create(const char *listen, model *m, flw_metrics **out,
                            char *bound, size_t boundlen);

/* Stop serving (waits for a scrape in progress) and free m. NULL ok. */
void flw_metrics_destroy(flw_metrics *m);

/* One push of layer `layer`: it took seconds, sent elements of the
 * layer's numel (the achieved density) in bytes on the wire, where a dense
 * push would have taken dense_bytes. Call from the training thread. */
void flw_metrics_push(flw_metrics *m, size_t layer, double seconds,
                      uint64_t elements, uint64_t bytes, uint64_t dense_bytes);

/* One finished iteration: it, the loop's iteration (0-based), compute and
 * comm seconds (comm: inside push and wait; compute: the rest of the
 * step), wait_s the time in flps_client_wait alone, the step's loss, and
 * the client's counters now. */
void flw_metrics_iteration(flw_metrics *m, uint64_t it, double compute_s,
                           double comm_s, double wait_s, double loss,
                           const flps_client_stats *st);

/* The client's message counts and every layer's residual norm (one pass
 * over the model's residuals: call it now and then, e.g. with progress). */
void flw_metrics_client(flw_metrics *m, const flps_client *c);

/* A test evaluation's accuracy (0..1) and loss. */
void flw_metrics_eval(flw_metrics *m, double accuracy, double loss);

#endif
