/* The shard daemon's metric families and their update from the main loop. */
#include "ps/metrics_shard.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/metrics_proc.h"
#include "services/httpd.h"
#include "services/metrics.h"

/* The family handles are written once by ps_metrics_create and then only
 * read; the values behind them are guarded by the registry's own lock, so
 * the main loop updates while the HTTP thread renders. */
struct ps_metrics {
    metrics *reg;
    httpd *http;
    metrics_family *pushes, *updates, *pulls, *rejected;
    metrics_family *bytes_in, *bytes_out, *msgs_in, *msgs_out;
    metrics_family *checkpoints, *elems_in, *elems_out;
    metrics_family *parts, *close, *handshakes, *conns_refused;
};

static const char *const reason_label[] = {"reason"};

/* flps_connections_refused_total's reasons, in the order
 * ps_metrics_update reads them from transport_stats. */
static const char *const conn_reasons[] = {"connection_limit",
                                           "unauthenticated_limit",
                                           "address_limit", "not_admitted"};

/* Every family, in the order /metrics shows them. */
static const metrics_def ps_metric_defs[] = {
    {METRICS_COUNTER, "flps_pushes_total", METRICS_AT(ps_metrics, pushes),
     "Pushes accepted (sync: stored for the open iteration; async: "
     "applied)."},
    {METRICS_COUNTER, "flps_updates_total", METRICS_AT(ps_metrics, updates),
     "Updates applied to a part: iterations closed (sync) or pushes "
     "applied (async)."},
    {METRICS_COUNTER, "flps_pulls_total", METRICS_AT(ps_metrics, pulls),
     "Pulls answered."},
    {METRICS_COUNTER, "flps_received_bytes_total",
     METRICS_AT(ps_metrics, bytes_in),
     "Bytes received on the wire (payload and framing)."},
    {METRICS_COUNTER, "flps_sent_bytes_total",
     METRICS_AT(ps_metrics, bytes_out),
     "Bytes sent on the wire (payload and framing)."},
    {METRICS_COUNTER, "flps_received_messages_total",
     METRICS_AT(ps_metrics, msgs_in), "Messages received."},
    {METRICS_COUNTER, "flps_sent_messages_total",
     METRICS_AT(ps_metrics, msgs_out), "Messages sent."},
    {METRICS_COUNTER, "flps_checkpoints_total",
     METRICS_AT(ps_metrics, checkpoints), "Checkpoints written."},
    {METRICS_COUNTER, "flps_elements_received_total",
     METRICS_AT(ps_metrics, elems_in),
     "Index/value pairs received in accepted pushes."},
    {METRICS_COUNTER, "flps_elements_sent_total",
     METRICS_AT(ps_metrics, elems_out),
     "Index/value pairs sent in updates (counted once per worker)."},
    {METRICS_COUNTER, "flps_handshakes_refused_total",
     METRICS_AT(ps_metrics, handshakes),
     "Connections refused in the handshake for their credentials (not the "
     "job's CURVE key or secret) or protocol (no CURVE or PLAIN), or ended "
     "before it completed."},
    {METRICS_COUNTER, "flps_connections_refused_total",
     METRICS_AT(ps_metrics, conns_refused),
     "Connections not served, each once, by why: connection_limit (every "
     "slot held by authenticated ones), unauthenticated_limit and "
     "address_limit (closed to make room), not_admitted (ended before their "
     "first message: handshake refused, timed out or broken).",
     METRICS_LABELS(reason_label)},
    {METRICS_COUNTER, "flps_rejected_total", METRICS_AT(ps_metrics, rejected),
     "Messages refused, by the error code they were answered with.",
     METRICS_LABELS(reason_label)},
    {METRICS_GAUGE, "flps_parts_owned", METRICS_AT(ps_metrics, parts),
     "Parts of the model this shard owns (0 before the first "
     "registration)."},
    {METRICS_HISTOGRAM, "flps_iteration_close_seconds",
     METRICS_AT(ps_metrics, close),
     "Time from the first push of a synchronous iteration of a part to its "
     "close."},
};

flps_err ps_metrics_create(const char *listen, ps_metrics **out, char *bound,
                           size_t boundlen)
{
    ps_metrics *m = flps_calloc(1, sizeof(*m));
    flps_err rc;

    if (m == NULL)
        return FLPS_ENOMEM;
    rc = metrics_create(&m->reg);
    if (rc != FLPS_OK)
        goto fail_m;
    rc = metrics_proc_register_daemon(m->reg, "flps", ps_metric_defs,
                                      METRICS_NDEFS(ps_metric_defs), m);
    if (rc == FLPS_OK)
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
    {
        const uint64_t n[] = {ts->conns_refused, ts->conns_waiting_closed,
                              ts->conns_addr_closed, ts->conns_not_admitted};
        for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
            const char *v[] = {conn_reasons[i]};
            metrics_counter_set(m->conns_refused, v, (double)n[i]);
        }
    }
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
