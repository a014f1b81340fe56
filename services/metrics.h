/* A Prometheus metrics registry (counters, gauges, histograms with labels)
 * rendered in the text exposition format 0.0.4, and the HTTP glue that
 * serves it on /metrics next to /healthz. */
#ifndef FLPS_SERVICES_METRICS_H
#define FLPS_SERVICES_METRICS_H

#include <stddef.h>

#include "common/err.h"
#include "services/httpd.h"

/* Thread-safety: one mutex per registry guards every family and series in
 * it; each update and each render takes it once. Updates are a lookup of
 * the label values among the family's series plus an add, so any thread
 * may update while another renders. */
typedef struct metrics metrics;

/* One metric family (name, type, label names). Borrowed from the registry:
 * valid until metrics_destroy. */
typedef struct metrics_family metrics_family;

/* Content type of metrics_render's output. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Create an empty registry. Caller owns *out (metrics_destroy). */
flps_err metrics_create(metrics **out);

/* Free the registry and its families. NULL is ignored. Stop any httpd
 * serving it first. */
void metrics_destroy(metrics *reg);

/* Register a family. name must match [a-zA-Z_:][a-zA-Z0-9_:]* and be new in
 * the registry; a counter's name must end in "_total". help is one line of
 * text (escaped on output; NULL: no HELP line). labels names the nlabels
 * label names, each matching [a-zA-Z_][a-zA-Z0-9_]*, not starting with
 * "__", all different (borrowed for the call; NULL when nlabels is 0).
 * A family without labels has its one series from the start (value 0);
 * a labelled one gets a series per label-value tuple at its first update.
 * FLPS_EINVAL (logged with the reason) on any invalid argument;
 * FLPS_ENOMEM. *out is borrowed from reg. */
flps_err metrics_counter(metrics *reg, const char *name, const char *help,
                         const char *const *labels, size_t nlabels,
                         metrics_family **out);
flps_err metrics_gauge(metrics *reg, const char *name, const char *help,
                       const char *const *labels, size_t nlabels,
                       metrics_family **out);

/* As above, for a histogram with the nbounds finite, strictly increasing
 * upper bounds (copied; "+Inf" is implicit). "le" is not a valid label
 * name here. Renders name_bucket{le=...} (cumulative), name_sum and
 * name_count. */
flps_err metrics_histogram(metrics *reg, const char *name, const char *help,
                           const char *const *labels, size_t nlabels,
                           const double *bounds, size_t nbounds,
                           metrics_family **out);

/* Bucket bounds in seconds suited to durations from 1 ms to 1 min
 * (a static array; never NULL). */
const double *metrics_seconds_buckets(size_t *n);

/* Updates. values gives the family's label values in the order of its
 * label names (NULL when it has none); any string is allowed (escaped on
 * output), NULL is not. FLPS_EINVAL: wrong family type, a NULL value, or
 * v not allowed as said below; FLPS_ENOMEM creating a new series. Nothing
 * changes on error. Thread-safe. */

/* Add v (finite, >= 0) to a counter. */
flps_err metrics_counter_add(metrics_family *f, const char *const *values,
                             double v);
/* Set a counter that mirrors a monotonic count kept elsewhere; v may not
 * be below the current value (a counter never goes down). */
flps_err metrics_counter_set(metrics_family *f, const char *const *values,
                             double v);
/* Set / add to a gauge (any finite value). */
flps_err metrics_gauge_set(metrics_family *f, const char *const *values,
                           double v);
flps_err metrics_gauge_add(metrics_family *f, const char *const *values,
                           double v);
/* Count one observation of v (not NaN) in a histogram. */
flps_err metrics_histogram_observe(metrics_family *f, const char *const *values,
                                   double v);

/* A function that brings families up to date just before a render (values
 * read on demand, such as the process's CPU time). Called on the rendering
 * thread, without the registry's lock held, so it may update families. */
typedef void (*metrics_collect_fn)(void *arg);

/* Have every metrics_render call fn(arg) first; NULL removes it. One per
 * registry (a second call replaces the first, freeing its arg). Not
 * thread-safe: set it before the registry is served. Ownership: the
 * registry owns arg and calls free_arg(arg) (when not NULL) on replacement
 * and in metrics_destroy. */
void metrics_set_collect(metrics *reg, metrics_collect_fn fn, void *arg,
                         void (*free_arg)(void *arg));

/* Render every family, in registration order, series in creation order,
 * as Prometheus text format 0.0.4 (METRICS_CONTENT_TYPE). On FLPS_OK the
 * caller owns *text (NUL-terminated, flps_free) and *len is its length;
 * FLPS_ENOMEM leaves both untouched. Thread-safe. */
flps_err metrics_render(metrics *reg, char **text, size_t *len);

/* Put the rendered registry into resp as a 200 in the Prometheus text
 * format. Errors: FLPS_ENOMEM (resp untouched). Thread-safe. */
flps_err metrics_respond(metrics *reg, httpd_response *resp);

/* Answer GET /metrics (the rendered registry) and GET /healthz
 * ({"status":"ok"}) into resp; another method on those paths gets 405.
 * Returns 1 if the path was one of the two (resp filled), 0 otherwise
 * (resp untouched), so a daemon with its own routes can try this first.
 * Thread-safe. */
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
