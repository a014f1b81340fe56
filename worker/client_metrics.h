/* libflps's worker metrics: the flworker_* families (their one table: every
 * name, type, help and label is written there and nowhere else), the
 * process's one endpoint that serves them over common/minihttp.h when the
 * launcher ($FLPS_METRICS) or the program (flps_metrics_serve) asks, and
 * what every client of the process adds to them as it pushes and waits.
 * So flworker, a Python program and any other libflps user export the same
 * series. The public calls are the flps_metrics_* of include/flps.h.
 *
 * Threading: the families live in one registry whose lock guards their
 * values (common/metrics.h), so clients on different threads update while
 * the HTTP thread renders; a client's own cmetrics is its caller's thread's
 * (client_internal.h). Every call below does nothing (and costs one atomic
 * load) while the process serves no metrics. */
#ifndef FLPS_WORKER_CLIENT_METRICS_H
#define FLPS_WORKER_CLIENT_METRICS_H

#include "worker/client_internal.h"

/* How often a client reads its layers' residual norms (one pass over the
 * model each) while metrics are served: at most once in this many
 * seconds, at the end of an iteration. */
#define CMETRICS_RESIDUAL_EVERY_S 5.0

/* A client was created: when $FLPS_METRICS holds "HOST:PORT" and the
 * process serves no metrics yet, start serving there and print "metrics on
 * HOST:PORT" on stdout (one write, flushed: the launcher reads it). A
 * failure is logged once per process and training goes on without
 * metrics. */
void client_metrics_from_env(void);

/* A push call's measurement: client_metrics_push_begin before the push's
 * work, client_metrics_push_end after it with its result. A push of a
 * later iteration than the last one finished first finishes the one
 * before it (for programs that wait layer by layer, never for the whole
 * model). Only a successful push is counted. */
typedef struct cmetrics_push {
    int on;
    double t0;
    flps_client_stats before;
} cmetrics_push;

void client_metrics_push_begin(flps_client *c, uint64_t iter, cmetrics_push *p);
void client_metrics_push_end(flps_client *c, const cmetrics_push *p,
                             uint32_t tensor, flps_err rc);

/* A wait call (whole: flps_client_wait, which finishes iteration iter;
 * else flps_client_wait_layer) that began at t0 (flps_mono_s(), or any
 * value while metrics are off) and returned rc. */
double client_metrics_now(void);
void client_metrics_wait_end(flps_client *c, double t0, uint64_t iter,
                             int whole, flps_err rc);

/* Energy device (its name: "gpu0", "cpu-package0") used joules more
 * (client_energy.c). */
void client_metrics_energy_add(const char *device, double joules);

/* c is about to be destroyed: add its last counts. */
void client_metrics_detach(flps_client *c);

/* A decentralized worker's round (flps_saps_round) and consensus
 * (flps_saps_consensus): the exchange's outcome, this round's bytes, the
 * peer's link bandwidth and the consensus distance. */
void client_metrics_saps_round(const flps_saps_round_info *info);
void client_metrics_saps_consensus(double distance);

/* The rendered families (as GET /metrics answers), for tests. FLPS_ESTATE
 * while the process serves no metrics; else metrics_render's. Caller owns
 * *text (flps_free). */
flps_err client_metrics_render(char **text, size_t *len);

#endif
