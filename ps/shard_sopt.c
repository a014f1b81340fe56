/* The server optimizer of a synchronous job (proto_server_opt; docs/
 * algorithms.md, "Server optimizers"): what the shards make of an
 * iteration's update U before applying it. FedAvgM keeps a velocity,
 * FedAdam two moments, per element of the part; one function computes a
 * step from (state, U), so a close and a replay of the log compute the
 * same bits. */
#include "ps/shard_impl.h"

#include <math.h>

/* FedAdam's constants (Reddi et al., "Adaptive Federated Optimization"):
 * the moments' decay and the adaptivity tau that bounds the step where
 * the second moment is small. */
#define SOPT_ADAM_BETA1 0.9f
#define SOPT_ADAM_BETA2 0.99f
#define SOPT_ADAM_TAU 1e-3f

uint32_t ps_sopt_nstate(const proto_jobcfg *jc)
{
    switch (jc->server_opt) {
    case PROTO_SOPT_MOMENTUM:
        return 1;
    case PROTO_SOPT_ADAM:
        return 2;
    default:
        return 0;
    }
}

uint32_t ps_sopt_step(const proto_jobcfg *jc, const ps_part *p, uint64_t iter,
                      const uint32_t *idx, const float *u, uint32_t n,
                      float *out, float *next)
{
    const uint32_t numel = p->numel;
    const float beta = (float)jc->server_beta;
    const float lr = (float)proto_jobcfg_lr_at(jc, iter);
    const float *v = p->sopt, *s2 = p->sopt + numel;
    float *nv = next, *ns2 = next + numel;
    uint32_t bad = 0, at = 0;

    for (uint32_t i = 0; i < numel; i++) {
        float g = 0.0f;

        /* U is dense (idx NULL, n == numel) or its pairs ascending. */
        if (idx == NULL)
            g = u[i];
        else if (at < n && idx[at] == i)
            g = u[at++];
        if (jc->server_opt == PROTO_SOPT_MOMENTUM) {
            nv[i] = beta * v[i] + g;
            out[i] = nv[i];
        } else {
            nv[i] = SOPT_ADAM_BETA1 * v[i] + (1.0f - SOPT_ADAM_BETA1) * g;
            ns2[i] = SOPT_ADAM_BETA2 * s2[i] + (1.0f - SOPT_ADAM_BETA2) * g * g;
            out[i] = lr * nv[i] / (sqrtf(ns2[i]) + SOPT_ADAM_TAU);
        }
        bad |= ps_nonfinite_bit(p->w[i] + out[i]);
    }
    return bad;
}
