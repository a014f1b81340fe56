/* A Prometheus metrics registry (counters, gauges, histograms with labels)
 * rendered in the text exposition format 0.0.4, and what its endpoints
 * /metrics and /healthz answer, whichever HTTP server carries them (the
 * daemons' services/httpd.h through services/metrics.h, libflps's own
 * common/minihttp.h). No I/O. */
#ifndef FLPS_COMMON_METRICS_H
#define FLPS_COMMON_METRICS_H

#include <stddef.h>

#include "common/err.h"

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

typedef enum {
    METRICS_COUNTER,
    METRICS_GAUGE,
    METRICS_HISTOGRAM,
} metrics_type;

/* One row of a daemon's table of families, written
 *   {METRICS_GAUGE, "name", METRICS_AT(daemon_struct, member), "help",
 *    METRICS_LABELS(names), METRICS_BOUNDS(b)}
 * (labels and bounds only where there are some): what metrics_counter,
 * metrics_gauge and metrics_histogram take, and where the family's handle
 * goes, the metrics_family * member at offset in the daemon's struct.
 * bounds NULL: a histogram gets metrics_seconds_buckets; the other types
 * ignore bounds. */
typedef struct metrics_def {
    metrics_type type;
    const char *name;
    size_t offset;
    const char *help;
    const char *const *labels;
    size_t nlabels;
    const double *bounds;
    size_t nbounds;
} metrics_def;

#define METRICS_AT(type, member) .offset = offsetof(type, member)
#define METRICS_LABELS(names)                                                  \
    .labels = (names), .nlabels = sizeof(names) / sizeof((names)[0])
#define METRICS_BOUNDS(b) .bounds = (b), .nbounds = sizeof(b) / sizeof((b)[0])
#define METRICS_NDEFS(defs) (sizeof(defs) / sizeof((defs)[0]))

/* Register the n families of defs in their order (which is the order they
 * render in), writing each one's handle into base at its offset. Stops at
 * the first error (as metrics_counter's: FLPS_EINVAL, FLPS_ENOMEM), which
 * it returns; the families registered before it stay in reg, whose
 * metrics_destroy frees them. FLPS_EINVAL also for NULL reg or base.
 * Ownership: the handles are borrowed from reg; defs and base are borrowed
 * for the call. */
flps_err metrics_register_table(metrics *reg, const metrics_def *defs, size_t n,
                                void *base);

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

/* Content type of the endpoints' JSON answers. */
#define METRICS_JSON_TYPE "application/json"

/* One answer of the endpoints. body is NUL-terminated (or NULL after an
 * allocation failure, len 0 then); content_type is a static string. */
typedef struct metrics_answer {
    int status;
    const char *content_type;
    char *body; /* caller owns (flps_free) */
    size_t len;
} metrics_answer;

/* What method on path answers: GET or HEAD of /metrics: 200, the rendered
 * registry (METRICS_CONTENT_TYPE; 500 when it cannot be rendered, out of
 * memory, logged); of /healthz: 200 {"status":"ok"}; any other method on
 * either: 405. Returns 1 with *out filled (caller owns out->body), or 0
 * for any other path (*out untouched), so a server with its own routes
 * tries this first. HEAD gets the GET's answer: the server leaves the body
 * out. Thread-safe. */
int metrics_route(metrics *reg, const char *method, const char *path,
                  metrics_answer *out);

/* The answer of a path metrics_route does not serve: 404 naming the two
 * paths (caller owns out->body). */
void metrics_route_other(metrics_answer *out);

#endif
