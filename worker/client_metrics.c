/* The flworker_* families, the process's endpoint that serves them, and
 * what each client's pushes and waits add to them. */
#include "worker/client_metrics.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_proc.h"
#include "common/minihttp.h"

/* The process's endpoint: its registry, the families' handles (written
 * once before it is published, then only read) and the server. */
typedef struct exporter {
    metrics *reg;
    minihttp *http;
    char bound[128];
    metrics_family *iter, *iters, *bytes_out, *bytes_in, *dense, *pushes,
        *resends, *elems, *push_s, *wait_s, *compute, *comm, *loss, *acc,
        *tloss, *ratio, *density, *layer_ratio, *msgs_out, *msgs_in, *residual,
        *saps_rounds, *saps_bytes, *saps_bw, *saps_dist, *energy, *fl_round,
        *fl_clients, *fl_late;
} exporter;

/* The one endpoint of the process, NULL while none serves: libflps's only
 * global state beside the logger hook, because a process is one scrape
 * target (the launcher hands it one address) whatever number of clients
 * it makes. Published (release) by flps_metrics_serve once complete and
 * read (acquire) by every update; serve_lock serializes serving and
 * stopping, and guards env_tried. */
static _Atomic(exporter *) the_exporter;
static pthread_mutex_t serve_lock = PTHREAD_MUTEX_INITIALIZER;
static int env_tried; /* $FLPS_METRICS was acted on (or failed) */

static const char *const layer_label[] = {"layer"};
static const char *const result_label[] = {"result"};
static const char *const device_label[] = {"device"};

/* Every family, in the order /metrics shows them. */
static const metrics_def cm_defs[] = {
    {METRICS_GAUGE, "flworker_iteration", METRICS_AT(exporter, iter),
     "Iterations finished (the next iteration to run)."},
    {METRICS_COUNTER, "flworker_iterations_total", METRICS_AT(exporter, iters),
     "Iterations this process finished."},
    {METRICS_COUNTER, "flworker_sent_bytes_total",
     METRICS_AT(exporter, bytes_out),
     "Bytes sent to the shards, or a saps job's to its peers (payload and "
     "framing)."},
    {METRICS_COUNTER, "flworker_received_bytes_total",
     METRICS_AT(exporter, bytes_in),
     "Bytes received from the shards (payload and framing)."},
    {METRICS_COUNTER, "flworker_dense_bytes_total", METRICS_AT(exporter, dense),
     "Bytes the sends would have been with dense pushes."},
    {METRICS_COUNTER, "flworker_push_messages_total",
     METRICS_AT(exporter, pushes),
     "Push messages sent (first attempts, one per part)."},
    {METRICS_COUNTER, "flworker_resends_total", METRICS_AT(exporter, resends),
     "Requests sent again after a timeout."},
    {METRICS_COUNTER, "flworker_elements_sent_total",
     METRICS_AT(exporter, elems),
     "Index/value pairs (or dense values) pushed."},
    {METRICS_HISTOGRAM, "flworker_push_seconds", METRICS_AT(exporter, push_s),
     "Time in one flps_client_push (or _push_pairs) call: one layer."},
    {METRICS_HISTOGRAM, "flworker_wait_seconds", METRICS_AT(exporter, wait_s),
     "Time in flps_client_wait (and _wait_layer) for an iteration's "
     "updates."},
    {METRICS_COUNTER, "flworker_compute_seconds_total",
     METRICS_AT(exporter, compute),
     "Iteration time outside the pushes and waits (the program's own "
     "computation)."},
    {METRICS_COUNTER, "flworker_communication_seconds_total",
     METRICS_AT(exporter, comm),
     "Iteration time spent in pushes and waiting for updates."},
    {METRICS_GAUGE, "flworker_loss", METRICS_AT(exporter, loss),
     "Training loss of the last iteration's batch."},
    {METRICS_GAUGE, "flworker_test_accuracy", METRICS_AT(exporter, acc),
     "Accuracy (0..1) on the test set at the last evaluation."},
    {METRICS_GAUGE, "flworker_test_loss", METRICS_AT(exporter, tloss),
     "Loss on the test set at the last evaluation."},
    {METRICS_GAUGE, "flworker_compression_ratio", METRICS_AT(exporter, ratio),
     "Dense bytes over bytes sent, since the start."},
    {METRICS_GAUGE, "flworker_layer_density", METRICS_AT(exporter, density),
     "Elements the layer's last push sent over the layer's elements.",
     METRICS_LABELS(layer_label)},
    {METRICS_GAUGE, "flworker_layer_compression_ratio",
     METRICS_AT(exporter, layer_ratio),
     "Dense bytes over bytes sent in the layer's last push.",
     METRICS_LABELS(layer_label)},
    {METRICS_COUNTER, "flworker_messages_sent_total",
     METRICS_AT(exporter, msgs_out),
     "Messages put on the wire (every kind, resends included)."},
    {METRICS_COUNTER, "flworker_messages_received_total",
     METRICS_AT(exporter, msgs_in),
     "Messages taken off the wire (updates, acknowledgements, refusals)."},
    {METRICS_GAUGE, "flworker_layer_residual_norm",
     METRICS_AT(exporter, residual),
     "L2 norm of the layer's error-feedback residual (what its codec has "
     "not sent yet; 0 without error feedback), read at most every 5 s.",
     METRICS_LABELS(layer_label)},
    {METRICS_COUNTER, "flworker_saps_rounds_total",
     METRICS_AT(exporter, saps_rounds),
     "Decentralized (saps) rounds, by what the exchange did: exchanged, "
     "skipped (the peer did not answer in time) or idle (no peer).",
     METRICS_LABELS(result_label)},
    {METRICS_GAUGE, "flworker_saps_round_bytes",
     METRICS_AT(exporter, saps_bytes),
     "Bytes the last saps round put on the wire (its exchange, and an "
     "agreement or probe at its start)."},
    {METRICS_GAUGE, "flworker_saps_peer_bandwidth_bytes",
     METRICS_AT(exporter, saps_bw),
     "Measured bandwidth (bytes per second) of the link to the last saps "
     "round's peer; 0 without a peer."},
    {METRICS_GAUGE, "flworker_saps_consensus_distance",
     METRICS_AT(exporter, saps_dist),
     "Mean L2 distance of the workers' models to their average at the end "
     "(the coordinator of a saps job only)."},
    {METRICS_COUNTER, "flworker_energy_joules_total",
     METRICS_AT(exporter, energy),
     "Energy the device used while this process trained, read where the "
     "hardware reports it (GPUs: NVML; CPU packages, node-wide: RAPL) at "
     "the end of each window of iterations; no series where nothing "
     "reports energy.",
     METRICS_LABELS(device_label)},
    {METRICS_GAUGE, "flworker_fl_round", METRICS_AT(exporter, fl_round),
     "Federated averaging: rounds this process finished."},
    {METRICS_COUNTER, "flworker_fl_clients_total",
     METRICS_AT(exporter, fl_clients),
     "Federated averaging: client rounds this process trained (late ones "
     "included)."},
    {METRICS_COUNTER, "flworker_fl_late_clients_total",
     METRICS_AT(exporter, fl_late),
     "Federated averaging: client rounds left out as late (past the "
     "deadline, or a client process that died)."},
};

static exporter *current(void)
{
    return atomic_load_explicit(&the_exporter, memory_order_acquire);
}

/* ---- the endpoint ---- */

/* On the server's thread: /metrics and /healthz, else 404. */
static void on_request(void *arg, const minihttp_request *req,
                       minihttp_answer *out)
{
    exporter *ex = arg;
    metrics_answer a;

    if (!metrics_route(ex->reg, req->method, req->path, &a))
        metrics_route_other(&a);
    out->status = a.status;
    out->content_type = a.content_type;
    out->body = a.body;
    out->len = a.len;
}

static void exporter_free(exporter *ex)
{
    if (ex == NULL)
        return;
    minihttp_stop(ex->http); /* first: no scrape may render a freed registry */
    metrics_destroy(ex->reg);
    flps_free(ex);
}

/* A new exporter serving on where. Errors logged (tcplisten's lines name
 * the cause). */
static flps_err exporter_create(const char *where, exporter **out)
{
    exporter *ex = flps_calloc(1, sizeof(*ex));
    flps_err rc;

    if (ex == NULL)
        return FLPS_ENOMEM;
    rc = metrics_create(&ex->reg);
    if (rc == FLPS_OK)
        rc = metrics_register_table(ex->reg, cm_defs, METRICS_NDEFS(cm_defs),
                                    ex);
    if (rc == FLPS_OK)
        rc = metrics_proc_register(ex->reg, "flworker");
    /* Every result's series from the start, at 0, as the unlabelled ones. */
    for (int i = 0; rc == FLPS_OK && i < 3; i++) {
        static const char *const results[] = {"exchanged", "skipped", "idle"};
        const char *v[1] = {results[i]};

        rc = metrics_counter_add(ex->saps_rounds, v, 0);
    }
    if (rc == FLPS_OK)
        rc = minihttp_start(where, on_request, ex, &ex->http, ex->bound,
                            sizeof(ex->bound));
    if (rc != FLPS_OK) {
        exporter_free(ex);
        return rc;
    }
    *out = ex;
    return FLPS_OK;
}

/* A child of fork() has no server thread: it must not feed (nor stop) the
 * parent's copy, whose lock may have been held at the fork. */
static void forget_in_child(void)
{
    atomic_store_explicit(&the_exporter, NULL, memory_order_release);
}

/* Serve on where with serve_lock held. */
static flps_err serve_locked(const char *where, char *bound, size_t boundlen)
{
    static int atfork_set;
    exporter *ex = current();
    flps_err rc;

    if (ex != NULL) {
        if (bound != NULL && boundlen > 0)
            snprintf(bound, boundlen, "%s", ex->bound);
        return FLPS_ESTATE;
    }
    rc = exporter_create(where, &ex);
    if (rc != FLPS_OK)
        return rc;
    if (!atfork_set && pthread_atfork(NULL, NULL, forget_in_child) == 0)
        atfork_set = 1;
    log_info("metrics on http://%s/metrics (health: /healthz)", ex->bound);
    if (bound != NULL && boundlen > 0)
        snprintf(bound, boundlen, "%s", ex->bound);
    atomic_store_explicit(&the_exporter, ex, memory_order_release);
    return FLPS_OK;
}

flps_err flps_metrics_serve(const char *where, char *bound, size_t boundlen)
{
    flps_err rc;

    if (where == NULL) {
        log_error("flps_metrics_serve: no address; give HOST:PORT, e.g. "
                  "127.0.0.1:0");
        return FLPS_EINVAL;
    }
    pthread_mutex_lock(&serve_lock);
    rc = serve_locked(where, bound, boundlen);
    pthread_mutex_unlock(&serve_lock);
    return rc;
}

void flps_metrics_stop(void)
{
    exporter *ex;

    pthread_mutex_lock(&serve_lock);
    ex = atomic_exchange_explicit(&the_exporter, NULL, memory_order_acq_rel);
    pthread_mutex_unlock(&serve_lock);
    exporter_free(ex);
}

flps_err flps_metrics_report(double loss, double test_accuracy,
                             double test_loss)
{
    exporter *ex = current();

    if (isinf(loss) || isinf(test_accuracy) || isinf(test_loss))
        return FLPS_EINVAL;
    if (ex == NULL)
        return FLPS_OK;
    if (!isnan(loss))
        metrics_gauge_set(ex->loss, NULL, loss);
    if (!isnan(test_accuracy))
        metrics_gauge_set(ex->acc, NULL, test_accuracy);
    if (!isnan(test_loss))
        metrics_gauge_set(ex->tloss, NULL, test_loss);
    return FLPS_OK;
}

flps_err flps_metrics_report_round(uint64_t round, uint32_t clients,
                                   uint32_t late)
{
    exporter *ex = current();

    if (late > clients)
        return FLPS_EINVAL;
    if (ex == NULL)
        return FLPS_OK;
    metrics_gauge_set(ex->fl_round, NULL, (double)round);
    metrics_counter_add(ex->fl_clients, NULL, (double)clients);
    metrics_counter_add(ex->fl_late, NULL, (double)late);
    return FLPS_OK;
}

flps_err client_metrics_render(char **text, size_t *len)
{
    exporter *ex = current();

    return ex != NULL ? metrics_render(ex->reg, text, len) : FLPS_ESTATE;
}

/* "metrics on HOST:PORT" for the launcher: one write(2) of the whole line,
 * which no stdio buffer of the program holds back. */
static void announce(const char *bound)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "metrics on %s\n", bound);

    if (n > 0 && (size_t)n < sizeof(line))
        while (write(STDOUT_FILENO, line, (size_t)n) < 0 && errno == EINTR)
            ;
}

void client_metrics_from_env(void)
{
    const char *where = getenv("FLPS_METRICS");
    char bound[128];

    if (where == NULL || where[0] == '\0' || current() != NULL)
        return;
    pthread_mutex_lock(&serve_lock);
    if (!env_tried) {
        env_tried = 1;
        if (serve_locked(where, bound, sizeof(bound)) == FLPS_OK)
            announce(bound);
        else
            log_warn("cannot serve metrics on %.100s (FLPS_METRICS): "
                     "training goes on without them",
                     where);
    }
    pthread_mutex_unlock(&serve_lock);
}

/* ---- what clients add ---- */

double client_metrics_now(void)
{
    return current() != NULL ? flps_mono_s() : 0.0;
}

/* The client's counters as flps_client_get_stats and _get_messages tell
 * them, added to the process's since the last call. */
static void add_counters(exporter *ex, flps_client *c)
{
    cmetrics *m = &c->metrics;
    flps_client_stats st;
    uint64_t out = 0, in = 0;

    flps_client_get_stats(c, &st);
    flps_client_get_messages(c, &out, &in);
    /* The client's counts only grow, so the differences are >= 0. */
    metrics_counter_add(ex->bytes_out, NULL,
                        (double)(st.bytes_sent - m->added.bytes_sent));
    metrics_counter_add(ex->bytes_in, NULL,
                        (double)(st.bytes_received - m->added.bytes_received));
    metrics_counter_add(ex->dense, NULL,
                        (double)(st.dense_bytes - m->added.dense_bytes));
    metrics_counter_add(ex->pushes, NULL,
                        (double)(st.pushes - m->added.pushes));
    metrics_counter_add(ex->resends, NULL,
                        (double)(st.resends - m->added.resends));
    metrics_counter_add(ex->elems, NULL,
                        (double)(st.elements_sent - m->added.elements_sent));
    metrics_counter_add(ex->msgs_out, NULL, (double)(out - m->msgs_out));
    metrics_counter_add(ex->msgs_in, NULL, (double)(in - m->msgs_in));
    if (st.bytes_sent > 0)
        metrics_gauge_set(ex->ratio, NULL,
                          (double)st.dense_bytes / (double)st.bytes_sent);
    m->added = st;
    m->msgs_out = out;
    m->msgs_in = in;
}

/* Every layer's residual norm, but for layers pushed as pairs: their
 * residual is the caller's (the client's own stays unused). */
static void set_residuals(exporter *ex, const flps_client *c)
{
    for (uint32_t i = 0; i < c->ntensors; i++) {
        const ctensor *t = &c->tensors[i];
        const char *v[] = {t->name};
        double norm = 0.0;

        if (t->pairs != NULL)
            continue;
        if (flps_client_residual_norm(c, i, &norm) == FLPS_OK)
            metrics_gauge_set(ex->residual, v, norm);
    }
}

/* The first push or wait counted: the clock of the first iteration starts,
 * at iter (a client that resumes starts where the shards are). */
static void start(cmetrics *m, uint64_t iter, double now)
{
    if (m->started)
        return;
    m->started = 1;
    m->next_iter = iter;
    m->mark = now;
}

/* Iteration iter is finished (once: a later call for it does nothing). */
static void finish(exporter *ex, flps_client *c, uint64_t iter, double now)
{
    cmetrics *m = &c->metrics;
    double comm = m->push_s + m->wait_s, compute = now - m->mark - comm;

    if (iter < m->next_iter)
        return;
    metrics_gauge_set(ex->iter, NULL, (double)(iter + 1));
    metrics_counter_add(ex->iters, NULL, 1);
    metrics_counter_add(ex->compute, NULL, compute > 0 ? compute : 0);
    metrics_counter_add(ex->comm, NULL, comm);
    metrics_histogram_observe(ex->wait_s, NULL, m->wait_s);
    add_counters(ex, c);
    if (m->residual_at == 0 ||
        now - m->residual_at >= CMETRICS_RESIDUAL_EVERY_S) {
        set_residuals(ex, c);
        m->residual_at = now;
    }
    m->next_iter = iter + 1;
    m->mark = now;
    m->push_s = m->wait_s = 0;
}

void client_metrics_push_begin(flps_client *c, uint64_t iter, cmetrics_push *p)
{
    exporter *ex = current();
    cmetrics *m = &c->metrics;

    p->on = ex != NULL;
    if (!p->on)
        return;
    p->t0 = flps_mono_s();
    start(m, iter, p->t0);
    /* A push of iteration iter means iter - 1 is done, for a program that
     * never waits for the whole model (its forward waits layer by layer). */
    if (iter > m->next_iter)
        finish(ex, c, iter - 1, p->t0);
    flps_client_get_stats(c, &p->before);
}

void client_metrics_push_end(flps_client *c, const cmetrics_push *p,
                             uint32_t tensor, flps_err rc)
{
    exporter *ex = current();
    flps_client_stats st;
    const ctensor *t;
    uint64_t bytes;
    double dt;

    if (!p->on || ex == NULL || rc != FLPS_OK)
        return;
    dt = flps_mono_s() - p->t0;
    c->metrics.push_s += dt;
    metrics_histogram_observe(ex->push_s, NULL, dt);
    flps_client_get_stats(c, &st);
    t = &c->tensors[tensor];
    if (t->numel > 0) {
        const char *v[] = {t->name};

        metrics_gauge_set(ex->density, v,
                          (double)(st.elements_sent - p->before.elements_sent) /
                              (double)t->numel);
        /* Only this push sends during the call (resends happen in the
         * waits), so the differences are this layer's. */
        bytes = st.bytes_sent - p->before.bytes_sent;
        if (bytes > 0)
            metrics_gauge_set(ex->layer_ratio, v,
                              (double)(st.dense_bytes - p->before.dense_bytes) /
                                  (double)bytes);
    }
}

void client_metrics_wait_end(flps_client *c, double t0, uint64_t iter,
                             int whole, flps_err rc)
{
    exporter *ex = current();
    double now;

    if (ex == NULL || rc != FLPS_OK || t0 == 0)
        return;
    now = flps_mono_s();
    start(&c->metrics, iter, t0);
    c->metrics.wait_s += now - t0;
    if (whole)
        finish(ex, c, iter, now);
}

void client_metrics_energy_add(const char *device, double joules)
{
    exporter *ex = current();
    const char *v[] = {device};

    if (ex != NULL)
        metrics_counter_add(ex->energy, v, joules);
}

void client_metrics_detach(flps_client *c)
{
    exporter *ex = current();

    if (ex != NULL && c->t != NULL)
        add_counters(ex, c);
}

/* ---- what decentralized rounds add ---- */

void client_metrics_saps_round(const flps_saps_round_info *info)
{
    exporter *ex = current();
    const char *v[1];

    if (ex == NULL)
        return;
    v[0] = info->exchanged ? "exchanged" : info->skipped ? "skipped" : "idle";
    metrics_counter_add(ex->saps_rounds, v, 1);
    metrics_gauge_set(ex->saps_bytes, NULL, (double)info->bytes_sent);
    metrics_gauge_set(ex->saps_bw, NULL, info->peer_bandwidth);
    metrics_counter_add(ex->bytes_out, NULL, (double)info->bytes_sent);
}

void client_metrics_saps_consensus(double distance)
{
    exporter *ex = current();

    if (ex != NULL)
        metrics_gauge_set(ex->saps_dist, NULL, distance);
}
