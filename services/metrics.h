/* The registry of common/metrics.h served by the daemons' HTTP server
 * (services/httpd.h): /metrics and /healthz on an endpoint of their own,
 * or routed by a daemon's API handler. */
#ifndef FLPS_SERVICES_METRICS_H
#define FLPS_SERVICES_METRICS_H

#include <stddef.h>

#include "common/err.h"
#include "common/metrics.h"
#include "services/httpd.h"

/* Put the rendered registry into resp as a 200 in the Prometheus text
 * format. Errors: FLPS_ENOMEM (resp untouched). Thread-safe. */
flps_err metrics_respond(metrics *reg, httpd_response *resp);

/* Answer GET /metrics (the rendered registry) and GET /healthz
 * ({"status":"ok"}) into resp as metrics_route says; another method on
 * those paths gets 405. Returns 1 if the path was one of the two (resp
 * filled), 0 otherwise (resp untouched), so a daemon with its own routes
 * can try this first. Thread-safe. */
int metrics_http_route(metrics *reg, const httpd_request *req,
                       httpd_response *resp);

/* An httpd_handler (arg is the registry): metrics_http_route, else 404. */
void metrics_http_handler(void *arg, const httpd_request *req,
                          httpd_response *resp);

/* Start an HTTP server on listen ("HOST:PORT", see httpd_start) serving
 * /metrics and /healthz from reg, which is borrowed until httpd_stop(*out)
 * returns. Errors as httpd_start. Caller owns *out. */
flps_err metrics_serve(metrics *reg, const char *listen, httpd **out,
                       char *bound, size_t boundlen);

#endif
