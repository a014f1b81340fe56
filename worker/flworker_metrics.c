/* flworker's metric families and their update from the training loop. */
#include "worker/flworker_metrics.h"

#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "services/httpd.h"
#include "services/metrics.h"
#include "services/metrics_proc.h"

/* Handles are written by create and then only read; values are guarded by
 * the registry's lock, so the training thread updates while the HTTP
 * thread renders. names and numel are read only by the training thread. */
struct flw_metrics {
    metrics *reg;
    httpd *http;
    metrics_family *iter, *iters, *bytes_out, *bytes_in, *dense, *pushes,
        *resends, *elems, *push_s, *wait_s, *compute, *comm, *loss, *acc,
        *tloss, *ratio, *density, *layer_ratio, *msgs_out, *msgs_in, *residual;
    char **names;
    size_t *numel, nlayers;
};

flps_err flw_metrics_create(const char *listen, model *mod, flw_metrics **out,
                            char *bound, size_t boundlen)
{
    static const char *const layer[] = {"layer"};
    size_t nlayers = model_num_tensors(mod);
    flw_metrics *m = flps_calloc(1, sizeof(*m));
    const double *b;
    size_t nb;
    flps_err rc = FLPS_ENOMEM;

    if (m == NULL)
        return FLPS_ENOMEM;
    m->names = flps_calloc(nlayers + 1, sizeof(*m->names));
    m->numel = flps_calloc(nlayers + 1, sizeof(*m->numel));
    if (m->names == NULL || m->numel == NULL)
        goto fail;
    m->nlayers = nlayers;
    for (size_t i = 0; i < nlayers; i++) {
        const model_tensor *t = model_tensor_at(mod, i);

        m->names[i] = flps_strdup(t->name);
        if (m->names[i] == NULL)
            goto fail;
        m->numel[i] = t->numel;
    }
    rc = metrics_create(&m->reg);
    if (rc != FLPS_OK)
        goto fail;
    b = metrics_seconds_buckets(&nb);
#define REG_(call)                                                             \
    do {                                                                       \
        rc = (call);                                                           \
        if (rc != FLPS_OK)                                                     \
            goto fail;                                                         \
    } while (0)
    REG_(metrics_gauge(m->reg, "flworker_iteration",
                       "Iterations finished (the next iteration to run).", NULL,
                       0, &m->iter));
    REG_(metrics_counter(m->reg, "flworker_iterations_total",
                         "Iterations this process finished.", NULL, 0,
                         &m->iters));
    REG_(metrics_counter(m->reg, "flworker_sent_bytes_total",
                         "Bytes sent to the shards (payload and framing).",
                         NULL, 0, &m->bytes_out));
    REG_(metrics_counter(m->reg, "flworker_received_bytes_total",
                         "Bytes received from the shards (payload and "
                         "framing).",
                         NULL, 0, &m->bytes_in));
    REG_(metrics_counter(m->reg, "flworker_dense_bytes_total",
                         "Bytes the sends would have been with dense pushes.",
                         NULL, 0, &m->dense));
    REG_(metrics_counter(m->reg, "flworker_push_messages_total",
                         "Push messages sent (first attempts, one per part).",
                         NULL, 0, &m->pushes));
    REG_(metrics_counter(m->reg, "flworker_resends_total",
                         "Requests sent again after a timeout.", NULL, 0,
                         &m->resends));
    REG_(metrics_counter(m->reg, "flworker_elements_sent_total",
                         "Index/value pairs (or dense values) pushed.", NULL, 0,
                         &m->elems));
    REG_(metrics_histogram(m->reg, "flworker_push_seconds",
                           "Time in one flps_client_push call (one layer).",
                           NULL, 0, b, nb, &m->push_s));
    REG_(metrics_histogram(m->reg, "flworker_wait_seconds",
                           "Time in flps_client_wait for an iteration's "
                           "updates.",
                           NULL, 0, b, nb, &m->wait_s));
    REG_(metrics_counter(m->reg, "flworker_compute_seconds_total",
                         "Iteration time spent computing (training step "
                         "minus pushes).",
                         NULL, 0, &m->compute));
    REG_(metrics_counter(m->reg, "flworker_communication_seconds_total",
                         "Iteration time spent in pushes and waiting for "
                         "updates.",
                         NULL, 0, &m->comm));
    REG_(metrics_gauge(m->reg, "flworker_loss",
                       "Training loss of the last iteration's batch.", NULL, 0,
                       &m->loss));
    REG_(metrics_gauge(m->reg, "flworker_test_accuracy",
                       "Accuracy (0..1) on the test set at the last "
                       "evaluation.",
                       NULL, 0, &m->acc));
    REG_(metrics_gauge(m->reg, "flworker_test_loss",
                       "Loss on the test set at the last evaluation.", NULL, 0,
                       &m->tloss));
    REG_(metrics_gauge(m->reg, "flworker_compression_ratio",
                       "Dense bytes over bytes sent, since the start.", NULL, 0,
                       &m->ratio));
    REG_(metrics_gauge(m->reg, "flworker_layer_density",
                       "Elements the layer's last push sent over the "
                       "layer's elements.",
                       layer, 1, &m->density));
    REG_(metrics_gauge(m->reg, "flworker_layer_compression_ratio",
                       "Dense bytes over bytes sent in the layer's last push.",
                       layer, 1, &m->layer_ratio));
    REG_(metrics_counter(m->reg, "flworker_messages_sent_total",
                         "Messages put on the wire (every kind, resends "
                         "included).",
                         NULL, 0, &m->msgs_out));
    REG_(metrics_counter(m->reg, "flworker_messages_received_total",
                         "Messages taken off the wire (updates, "
                         "acknowledgements, refusals).",
                         NULL, 0, &m->msgs_in));
    REG_(metrics_gauge(m->reg, "flworker_layer_residual_norm",
                       "L2 norm of the layer's error-feedback residual "
                       "(what its codec has not sent yet; 0 without error "
                       "feedback), at the last progress report.",
                       layer, 1, &m->residual));
    REG_(metrics_proc_register(m->reg, "flworker"));
    REG_(metrics_serve(m->reg, listen, &m->http, bound, boundlen));
#undef REG_
    *out = m;
    return FLPS_OK;

fail:
    metrics_destroy(m->reg);
    m->reg = NULL;
    flw_metrics_destroy(m);
    return rc;
}

void flw_metrics_destroy(flw_metrics *m)
{
    if (m == NULL)
        return;
    httpd_stop(m->http); /* first: no scrape may render a freed registry */
    metrics_destroy(m->reg);
    for (size_t i = 0; m->names != NULL && i < m->nlayers; i++)
        flps_free(m->names[i]);
    flps_free(m->names);
    flps_free(m->numel);
    flps_free(m);
}

void flw_metrics_push(flw_metrics *m, size_t layer, double seconds,
                      uint64_t elements, uint64_t bytes, uint64_t dense_bytes)
{
    metrics_histogram_observe(m->push_s, NULL, seconds);
    if (layer < m->nlayers && m->numel[layer] > 0) {
        const char *v[] = {m->names[layer]};

        metrics_gauge_set(m->density, v,
                          (double)elements / (double)m->numel[layer]);
        if (bytes > 0)
            metrics_gauge_set(m->layer_ratio, v,
                              (double)dense_bytes / (double)bytes);
    }
}

void flw_metrics_iteration(flw_metrics *m, uint64_t it, double compute_s,
                           double comm_s, double wait_s, double loss,
                           const flps_client_stats *st)
{
    metrics_gauge_set(m->iter, NULL, (double)(it + 1));
    metrics_counter_add(m->iters, NULL, 1);
    metrics_counter_add(m->compute, NULL, compute_s > 0 ? compute_s : 0);
    metrics_counter_add(m->comm, NULL, comm_s > 0 ? comm_s : 0);
    metrics_histogram_observe(m->wait_s, NULL, wait_s);
    metrics_gauge_set(m->loss, NULL, loss);
    /* The client's counters only grow, so set never goes down. */
    metrics_counter_set(m->bytes_out, NULL, (double)st->bytes_sent);
    metrics_counter_set(m->bytes_in, NULL, (double)st->bytes_received);
    metrics_counter_set(m->dense, NULL, (double)st->dense_bytes);
    metrics_counter_set(m->pushes, NULL, (double)st->pushes);
    metrics_counter_set(m->resends, NULL, (double)st->resends);
    metrics_counter_set(m->elems, NULL, (double)st->elements_sent);
    if (st->bytes_sent > 0)
        metrics_gauge_set(m->ratio, NULL,
                          (double)st->dense_bytes / (double)st->bytes_sent);
}

void flw_metrics_eval(flw_metrics *m, double accuracy, double loss)
{
    metrics_gauge_set(m->acc, NULL, accuracy);
    metrics_gauge_set(m->tloss, NULL, loss);
}

void flw_metrics_client(flw_metrics *m, const flps_client *c)
{
    uint64_t out = 0, in = 0;

    flps_client_get_messages(c, &out, &in);
    metrics_counter_set(m->msgs_out, NULL, (double)out);
    metrics_counter_set(m->msgs_in, NULL, (double)in);
    for (size_t i = 0; i < m->nlayers; i++) {
        const char *v[] = {m->names[i]};
        double norm = 0.0;
        if (flps_client_residual_norm(c, (uint32_t)i, &norm) == FLPS_OK)
            metrics_gauge_set(m->residual, v, norm);
    }
}
