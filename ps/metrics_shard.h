/* The shard daemon's /metrics: its families, filled from the shard and
 * transport counters by the main loop, served on an HTTP thread. */
#ifndef FLPS_PS_METRICS_SHARD_H
#define FLPS_PS_METRICS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/transport.h"
#include "ps/shard.h"

typedef struct ps_metrics ps_metrics;

/* Register flps's metric families and serve them with /healthz on listen
 * ("HOST:PORT", see httpd_start); bound gets the address bound. Errors as
 * httpd_start (logged), FLPS_ENOMEM. Caller owns *out. */
flps_err ps_metrics_create(const char *listen, ps_metrics **out, char *bound,
                           size_t boundlen);

/* Stop serving (waits for a scrape in progress) and free m. NULL is
 * ignored. */
void ps_metrics_destroy(ps_metrics *m);

/* Copy the counters into the registry. Call from the thread that owns the
 * shard and the transport (the HTTP thread never reads them); st and ts
 * are borrowed for the call. */
void ps_metrics_update(ps_metrics *m, const ps_shard_stats *st,
                       const transport_stats *ts, uint32_t parts_owned);

/* A ps_shard_config.on_close callback (arg is the ps_metrics): counts one
 * iteration close in flps_iteration_close_seconds. */
void ps_metrics_on_close(void *arg, double seconds);

#endif
