/* Layer-wise adaptive sparsification (LAGS): the planner's math, as pure
 * functions. Given per-layer sizes and backward times and the network's
 * alpha-beta costs, choose per layer dense or top-k and a density so that
 * each layer's communication hides behind the backward computation still
 * to run (ALGORITHMS.md, "Layer-wise adaptive sparsification").
 *
 * Layers are given in BACKPROP order: layers[0] is the first gradient
 * ready (the model's last layer, L), layers[nl - 1] the last one ready
 * (the model's first layer). Reverse the layout order before calling.
 *
 * Cost model (the parameter-server form, per worker): one layer costs
 *   t_comm = 2 (alpha + bytes * beta)      (push, then the reply)
 * with bytes = 8 per selected pair (u32 index + f32 value) for top-k and 4
 * per element for dense; with per_shard set, the shard's link carries all
 * P workers' bytes: t_comm = 2 (alpha + P * bytes * beta). A zero-element
 * layer costs nothing. Communication goes out one layer at a time in
 * backprop order (wait-free backprop): layer j starts at
 * max(its gradient is ready, layer j-1 has finished). The predicted
 * iteration time is max(sum of t_b, when the last layer has finished);
 * the forward pass and the time to select top-k are not modelled.
 */
#ifndef FLPS_COMPRESS_LAGS_H
#define FLPS_COMPRESS_LAGS_H

#include <stddef.h>

#include "common/err.h"
#include "compress/codec.h"

typedef struct {
    size_t numel;      /* d_l, elements */
    double t_backward; /* t_b(l), seconds of backward compute */
} lags_layer;

typedef struct {
    unsigned workers;   /* P >= 1 */
    double alpha;       /* seconds per message, >= 0 */
    double beta;        /* seconds per byte, >= 0 */
    double rho_min;     /* lowest density, in (0, 1]; default 0.001 */
    size_t dense_below; /* layers with fewer elements go dense; 4096 */
    int per_shard;      /* 0: per-worker cost (default); 1: shard link */
} lags_params;

/* One layer's plan: spec.kind is CODEC_DENSE (density 1) or CODEC_TOPK.
 * k: elements sent; bytes: per push; t_comm: the model's cost. */
typedef struct {
    codec_spec spec;
    size_t k;
    size_t bytes;
    double t_comm;
} lags_choice;

/* Defaults: P = 1, alpha = beta = 0, rho_min = 0.001, dense_below = 4096,
 * per-worker cost. */
void lags_params_default(lags_params *p);

/* The model's cost of sending bytes in one push (see the top comment). */
double lags_comm_time(const lags_params *p, size_t bytes);

/* Plan nl layers (backprop order) into out[0..nl). For layer j:
 *   t_hide = t_b(j+1) + ... + t_b(nl-1)   (backward still to run)
 *   rho = (t_hide / 2 - alpha) / (8 d beta)   (P * 8 d beta per shard)
 * clamped to [rho_min, 1]; dense when d < dense_below, when beta = 0, or
 * when top-k would not send fewer bytes than dense (rho >= 1/2). Every
 * layer therefore costs at most what it costs dense, so the plan's
 * predicted time is never worse than all-dense. Writes the predicted
 * iteration time to *t_iter (if not NULL).
 * Errors: FLPS_EINVAL (NULL with nl > 0, workers 0, a negative or
 * non-finite time or cost, rho_min outside (0, 1]); out and *t_iter are
 * written only on FLPS_OK. Thread-safe, no allocation. */
flps_err lags_plan(const lags_layer *layers, size_t nl, const lags_params *p,
                   lags_choice *out, double *t_iter);

/* Predicted iteration time of any plan (e.g. all-dense) under the model.
 * plan[j].spec gives each layer's codec: CODEC_DENSE, or a sparse kind
 * sending codec_count_for pairs; the other fields are ignored.
 * Errors: as lags_plan, and FLPS_EINVAL for a codec that is neither. */
flps_err lags_predict(const lags_layer *layers, size_t nl, const lags_params *p,
                      const lags_choice *plan, double *t_iter);

#endif
