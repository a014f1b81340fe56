/* The shard daemon's metric families and their update from the main loop. */
#include "ps/metrics_shard.h"

#include "common/alloc.h"
#include "common/log.h"
#include "services/httpd.h"
#include "services/metrics.h"
#include "services/metrics_proc.h"

/* The family handles are written once by ps_metrics_create and then only
 * read; the values behind them are guarded by the registry's own lock, so
 * the main loop updates while the HTTP thread renders. */
struct ps_metrics {
    metrics *reg;
    httpd *http;
    metrics_family *pushes, *updates, *pulls, *rejected;
    metrics_family *bytes_in, *bytes_out, *msgs_in, *msgs_out;
    metrics_family *checkpoints, *elems_in, *elems_out;
    metrics_family *parts, *close, *handshakes;
};

typedef struct ps_metric_def {
    const char *name;
    const char *help;
    size_t off; /* offset of the handle in ps_metrics */
} ps_metric_def;

#define PS_METRIC_(field, name, help)                                          \
    {                                                                          \
        name, help, offsetof(ps_metrics, field)                                \
    }

static const ps_metric_def counters[] = {
    PS_METRIC_(pushes, "flps_pushes_total",
               "Pushes accepted (sync: stored for the open iteration; async: "
               "applied)."),
    PS_METRIC_(updates, "flps_updates_total",
               "Updates applied to a part: iterations closed (sync) or pushes "
               "applied (async)."),
    PS_METRIC_(pulls, "flps_pulls_total", "Pulls answered."),
    PS_METRIC_(bytes_in, "flps_received_bytes_total",
               "Bytes received on the wire (payload and framing)."),
    PS_METRIC_(bytes_out, "flps_sent_bytes_total",
               "Bytes sent on the wire (payload and framing)."),
    PS_METRIC_(msgs_in, "flps_received_messages_total", "Messages received."),
    PS_METRIC_(msgs_out, "flps_sent_messages_total", "Messages sent."),
    PS_METRIC_(checkpoints, "flps_checkpoints_total", "Checkpoints written."),
    PS_METRIC_(elems_in, "flps_elements_received_total",
               "Index/value pairs received in accepted pushes."),
    PS_METRIC_(elems_out, "flps_elements_sent_total",
               "Index/value pairs sent in updates (counted once per worker)."),
    PS_METRIC_(handshakes, "flps_handshakes_refused_total",
               "Connections refused in the CURVE handshake (no CURVE, or not "
               "the job's client key); 0 without CURVE."),
};

flps_err ps_metrics_create(const char *listen, ps_metrics **out, char *bound,
                           size_t boundlen)
{
    static const char *reason[] = {"reason"};
    ps_metrics *m = flps_calloc(1, sizeof(*m));
    const double *b;
    size_t nb;
    flps_err rc;

    if (m == NULL)
        return FLPS_ENOMEM;
    rc = metrics_create(&m->reg);
    if (rc != FLPS_OK)
        goto fail_m;
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
        metrics_family **f = (metrics_family **)((char *)m + counters[i].off);
        rc = metrics_counter(m->reg, counters[i].name, counters[i].help, NULL,
                             0, f);
        if (rc != FLPS_OK)
            goto fail_reg;
    }
    rc = metrics_counter(m->reg, "flps_rejected_total",
                         "Messages refused, by the error code they were "
                         "answered with.",
                         reason, 1, &m->rejected);
    if (rc != FLPS_OK)
        goto fail_reg;
    rc = metrics_gauge(m->reg, "flps_parts_owned",
                       "Parts of the model this shard owns (0 before the "
                       "first registration).",
                       NULL, 0, &m->parts);
    if (rc != FLPS_OK)
        goto fail_reg;
    b = metrics_seconds_buckets(&nb);
    rc = metrics_histogram(m->reg, "flps_iteration_close_seconds",
                           "Time from the first push of a synchronous "
                           "iteration of a part to its close.",
                           NULL, 0, b, nb, &m->close);
    if (rc != FLPS_OK)
        goto fail_reg;
    rc = metrics_proc_register(m->reg, "flps");
    if (rc != FLPS_OK)
        goto fail_reg;
    rc = metrics_serve(m->reg, listen, &m->http, bound, boundlen);
    if (rc != FLPS_OK)
        goto fail_reg;
    *out = m;
    return FLPS_OK;

fail_reg:
    metrics_destroy(m->reg);
fail_m:
    flps_free(m);
    return rc;
}

void ps_metrics_destroy(ps_metrics *m)
{
    if (m == NULL)
        return;
    httpd_stop(m->http); /* first: no scrape may render a freed registry */
    metrics_destroy(m->reg);
    flps_free(m);
}

static void set(metrics_family *f, uint64_t v)
{
    /* The sources only grow within a process, so set never goes down. */
    metrics_counter_set(f, NULL, (double)v);
}

void ps_metrics_update(ps_metrics *m, const ps_shard_stats *st,
                       const transport_stats *ts, uint32_t parts_owned)
{
    set(m->pushes, st->pushes);
    set(m->updates, st->updates);
    set(m->pulls, st->pulls);
    set(m->checkpoints, st->checkpoints);
    set(m->elems_in, st->elements_in);
    set(m->elems_out, st->elements_out);
    set(m->bytes_in, ts->bytes_recv);
    set(m->bytes_out, ts->bytes_sent);
    set(m->msgs_in, ts->msgs_recv);
    set(m->msgs_out, ts->msgs_sent);
    set(m->handshakes, ts->auth_refused);
    /* Every reason from the start, zeros included, so a rate() works from
     * the first scrape. FLPS_OK is never a refusal. */
    for (int e = FLPS_OK + 1; e < FLPS_ERR_COUNT_; e++) {
        const char *v[] = {flps_errname((flps_err)e)};
        metrics_counter_set(m->rejected, v, (double)st->rejected[e]);
    }
    metrics_gauge_set(m->parts, NULL, (double)parts_owned);
}

void ps_metrics_on_close(void *arg, double seconds)
{
    ps_metrics *m = arg;

    metrics_histogram_observe(m->close, NULL, seconds);
}
