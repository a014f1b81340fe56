/* Layer-wise adaptive sparsification (LAGS): the planner's math. */
#include "compress/lags.h"

#include <math.h>

void lags_params_default(lags_params *p)
{
    p->workers = 1;
    p->alpha = 0.0;
    p->beta = 0.0;
    p->rho_min = 0.001;
    p->dense_below = 4096;
    p->per_shard = 0;
}

static int lags_time_ok(double t)
{
    return isfinite(t) && t >= 0.0;
}

static flps_err lags_check(const lags_layer *layers, size_t nl,
                           const lags_params *p)
{
    if (p == NULL || (nl > 0 && layers == NULL) || p->workers == 0 ||
        !lags_time_ok(p->alpha) || !lags_time_ok(p->beta) ||
        !(p->rho_min > 0.0 && p->rho_min <= 1.0))
        return FLPS_EINVAL;
    for (size_t j = 0; j < nl; j++)
        if (!lags_time_ok(layers[j].t_backward))
            return FLPS_EINVAL;
    return FLPS_OK;
}

double lags_comm_time(const lags_params *p, size_t bytes)
{
    double link = p->per_shard ? (double)p->workers : 1.0;

    return 2.0 * (p->alpha + link * (double)bytes * p->beta);
}

/* Cost of one layer sent with spec; 0 for an empty layer. */
static void lags_cost(const lags_params *p, size_t d, const codec_spec *spec,
                      lags_choice *c)
{
    c->spec = *spec;
    if (spec->kind == CODEC_DENSE) {
        c->k = d;
        c->bytes = 4 * d;
    } else {
        c->k = codec_count_for(spec, d);
        c->bytes = 8 * c->k;
    }
    c->t_comm = d == 0 ? 0.0 : lags_comm_time(p, c->bytes);
}

/* Wait-free backprop timeline: see lags.h. */
static double lags_timeline(const lags_layer *layers, size_t nl,
                            const lags_choice *plan)
{
    double ready = 0.0, link_free = 0.0;

    for (size_t j = 0; j < nl; j++) {
        ready += layers[j].t_backward;
        link_free = fmax(ready, link_free) + plan[j].t_comm;
    }
    return fmax(ready, link_free);
}

flps_err lags_plan(const lags_layer *layers, size_t nl, const lags_params *p,
                   lags_choice *out, double *t_iter)
{
    static const codec_spec dense = {CODEC_DENSE, 1.0, 0};
    double hide = 0.0;
    flps_err rc = lags_check(layers, nl, p);

    if (rc != FLPS_OK)
        return rc;
    if (nl > 0 && out == NULL)
        return FLPS_EINVAL;
    for (size_t j = 0; j < nl; j++)
        hide += layers[j].t_backward;
    for (size_t j = 0; j < nl; j++) {
        size_t d = layers[j].numel;
        double link = p->per_shard ? (double)p->workers : 1.0;
        double rho;

        hide -= layers[j].t_backward; /* what is still to run after j */
        if (hide < 0.0)
            hide = 0.0; /* rounding in the running sum */
        if (d < p->dense_below || d == 0 || p->beta == 0.0) {
            lags_cost(p, d, &dense, &out[j]);
            continue;
        }
        rho = (hide / 2.0 - p->alpha) / (link * 8.0 * (double)d * p->beta);
        if (!(rho > p->rho_min))
            rho = p->rho_min; /* cannot hide: send as little as allowed */
        if (rho >= 0.5) {
            /* 8 bytes a pair: top-k at density >= 1/2 sends no fewer
             * bytes than dense. */
            lags_cost(p, d, &dense, &out[j]);
        } else {
            codec_spec topk = {CODEC_TOPK, rho, 0};
            lags_cost(p, d, &topk, &out[j]);
            if (out[j].bytes >= 4 * d) /* k rounded up to 1 on a tiny d */
                lags_cost(p, d, &dense, &out[j]);
        }
    }
    if (t_iter != NULL)
        *t_iter = lags_timeline(layers, nl, out);
    return FLPS_OK;
}

flps_err lags_predict(const lags_layer *layers, size_t nl, const lags_params *p,
                      const lags_choice *plan, double *t_iter)
{
    double ready = 0.0, link_free = 0.0;
    flps_err rc = lags_check(layers, nl, p);

    if (rc != FLPS_OK)
        return rc;
    if ((nl > 0 && plan == NULL) || t_iter == NULL)
        return FLPS_EINVAL;
    for (size_t j = 0; j < nl; j++) {
        const codec_spec *s = &plan[j].spec;
        lags_choice c;
        if (s->kind != CODEC_DENSE &&
            (!codec_kind_is_sparse(s->kind) ||
             !(s->density > 0.0 && s->density <= 1.0)))
            return FLPS_EINVAL;
        lags_cost(p, layers[j].numel, s, &c);
        ready += layers[j].t_backward;
        link_free = fmax(ready, link_free) + c.t_comm;
    }
    *t_iter = fmax(ready, link_free);
    return FLPS_OK;
}
