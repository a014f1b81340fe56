/* flsched's HTTP/JSON API (docs/scheduler.md, "HTTP API"), /healthz and
 * /metrics, as one httpd handler over its own Redis store. */
#ifndef FLPS_SCHED_API_H
#define FLPS_SCHED_API_H

#include "common/err.h"
#include "scheduler/sched_loop.h"
#include "services/httpd.h"
#include "services/metrics.h"

typedef struct sched_api sched_api;

typedef struct sched_api_cfg {
    const char *redis_url;
    const char *token;       /* bearer token required (copied); NULL: none */
    sched_loop_stats *stats; /* the loop's counters; borrowed until destroy */
    metrics *reg;            /* families are added here; borrowed */
    /* How jobs run (launch.h); NULL: the agents. Borrowed until destroy;
     * the API reads only what never changes (launch_places, the info). */
    const launch *launcher;
} sched_api_cfg;

/* Connect (a Redis connection of its own) and register the metric
 * families. Caller owns *out. Errors: FLPS_EINVAL, FLPS_ENOMEM. */
flps_err sched_api_create(const sched_api_cfg *cfg, sched_api **out);

/* Free a. Stop the httpd serving it first. NULL ok. */
void sched_api_destroy(sched_api *a);

/* The server that serves a, for what /v1/info says of its certificate
 * (h borrowed until destroy; NULL: none). Thread-safe. */
void sched_api_set_http(sched_api *a, httpd *h);

/* The httpd_handler (arg is the sched_api). Thread-safe: requests share
 * the Redis connection under one mutex. */
void sched_api_handle(void *arg, const httpd_request *req,
                      httpd_response *resp);

#endif
