/* Error feedback with momentum correction for one layer. */
#include "compress/ef.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/finite.h"

struct ef {
    size_t n;
    float m;
    float *r;  /* residual */
    float *u;  /* velocity; NULL when m == 0 */
    float *a;  /* scratch for quantising codecs: the array encoded, then the
                  next residual; NULL when made for an exact codec */
    float *u2; /* scratch: the next velocity; NULL with a or when m == 0 */
    /* Upper bounds of |r| and |u| (INFINITY: unknown), so that a step can
     * know its sums cannot overflow before it updates r and u in place. */
    double rmax, umax;
    /* r holds +0.0f everywhere (fresh, reset, or after a dense step): a
     * dense step need not read or write it. */
    int r_zero;
};

/* The bounds grow by this factor per float operation: a rounding moves a
 * result by at most 2^-24 of itself, plus FLT_MIN for subnormals. */
#define EF_ROUND (1.0 + 0x1p-20)

static flps_err ef_alloc(size_t n, float momentum, int scratch, ef **out)
{
    size_t bytes = (n ? n : 1) * sizeof(float);
    ef *e;

    if (out == NULL || !(momentum >= 0.0f && momentum < 1.0f) ||
        (uint64_t)n >= (1ull << 32))
        return FLPS_EINVAL;
    e = flps_calloc(1, sizeof(*e));
    if (e == NULL)
        return FLPS_ENOMEM;
    e->n = n;
    e->m = momentum;
    e->r_zero = 1;
    e->r = flps_calloc(1, bytes);
    if (e->r == NULL)
        goto fail;
    if (scratch) {
        e->a = flps_malloc(bytes);
        if (e->a == NULL)
            goto fail;
    }
    if (momentum > 0.0f) {
        e->u = flps_calloc(1, bytes);
        if (e->u == NULL)
            goto fail;
        if (scratch) {
            e->u2 = flps_malloc(bytes);
            if (e->u2 == NULL)
                goto fail;
        }
    }
    *out = e;
    return FLPS_OK;

fail:
    ef_destroy(e);
    return FLPS_ENOMEM;
}

flps_err ef_create(size_t n, float momentum, ef **out)
{
    return ef_alloc(n, momentum, 1, out);
}

static int ef_codec_is_contractive(const codec_spec *spec);

flps_err ef_create_for(const codec_spec *spec, size_t n, float momentum,
                       ef **out)
{
    if (spec == NULL || !ef_codec_is_contractive(spec))
        return FLPS_EINVAL;
    return ef_alloc(n, momentum, 0, out);
}

void ef_destroy(ef *e)
{
    if (e == NULL)
        return;
    flps_free(e->r);
    flps_free(e->u);
    flps_free(e->a);
    flps_free(e->u2);
    flps_free(e);
}

/* See ef.h: the residual stays bounded only when the codec's error is
 * smaller than its input. */
static int ef_codec_is_contractive(const codec_spec *spec)
{
    if (spec->kind == CODEC_RANDK)
        return 0;
    return spec->kind != CODEC_QSGD || spec->bits >= 4;
}

/* The largest |g[i]| into *out, or 0 when g holds a NaN or Inf. One
 * branch-free pass over the IEEE bits, which vectorises. */
static int ef_max_abs(const float *g, size_t n, float *out)
{
    const uint32_t mx = flps_max_abs_bits(g, n);
    float f;

    if (mx >= FLPS_INF_BITS)
        return 0;
    memcpy(&f, &mx, sizeof(f));
    *out = f;
    return 1;
}

/* 1 when r + (m * u + g) is finite everywhere: the step's sums computed
 * as it will compute them, without writing anything. */
static int ef_update_is_finite(const ef *e, const float *g)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < e->n; i++) {
        float x =
            e->u != NULL ? e->r[i] + (e->m * e->u[i] + g[i]) : e->r[i] + g[i];
        uint32_t bits;
        memcpy(&bits, &x, sizeof(bits));
        bad |= (bits & 0x7fffffffu) + 0x00800000u;
    }
    return (bad & 0x80000000u) == 0;
}

/* Momentum factor masking (u[S] <- 0 on the sent indices) for a sparse
 * step: only where an element waits longer between sends than the
 * momentum remembers, by a margin that depends on how the elements are
 * chosen. At density d an element is sent every 1/d steps on average;
 * momentum m remembers about H = 1/(1 - m) steps (rounded: 10 for 0.9).
 *   topk, dgc: each worker's selection is applied whole, so everything
 *     sent plus r is exactly SGD with momentum's displacement, delayed;
 *     dropping the velocity of a sent element cuts the rest of its
 *     momentum. Masked only where an element waits more than eight
 *     horizons (d * H < 1/8: below 0.0125 with m = 0.9).
 *   gtopk: the shards take only the global top-k of the sum and the rest
 *     goes back into r (ef_add_back); masked where it waits longer than
 *     one horizon (d * H < 1: below 0.1 with m = 0.9).
 * Measured on the Fashion-MNIST MLP and the PyTorch CNN at densities 0.01
 * to 0.1, masked and not (docs/benchmarks.md, "Momentum factor masking by
 * density"): unmasked topk ended 0.4-3 points higher from 0.02 up, masked
 * gtopk 0.2-0.9 points higher and better early at 0.01-0.05. */
#define EF_MASK_WAIT_TOPK 8.0

static int ef_masks(const ef *e, const codec_spec *spec)
{
    double h, bound;

    if (e->u == NULL)
        return 0;
    h = floor(1.0 / (1.0 - (double)e->m) + 0.5);
    bound = spec->kind == CODEC_GTOPK ? 1.0 : 1.0 / EF_MASK_WAIT_TOPK;
    return spec->density * h < bound;
}

/* The step for codecs that send exact values, in place: r and u are
 * updated in the codec's own pass over the layer (codec_encode_fused), so
 * the layer is read twice (g alone for the check, then g, r and u) and
 * written once, and no scratch arrays are needed. Failure atomicity comes
 * from checking before anything moves: g for NaN and Inf, and the bounds
 * for an overflow of the sums; only when the bounds cannot rule one out
 * is the update computed once more without writing. */
static flps_err ef_step_exact(ef *e, codec *c, const float *g, codec_msg *msg)
{
    const codec_spec *spec = codec_get_spec(c);
    double ub, ab;
    codec_msg out;
    float gmax = 0.0f;
    flps_err rc;

    if (!ef_max_abs(g, e->n, &gmax))
        return FLPS_ENONFINITE;
    ub = e->u != NULL ? ((double)e->m * e->umax + gmax) * EF_ROUND + FLT_MIN
                      : (double)gmax;
    ab = (e->rmax + ub) * EF_ROUND + FLT_MIN;
    if (!(ab < (double)FLT_MAX) && !ef_update_is_finite(e, g))
        return FLPS_ENONFINITE;
    rc = codec_encode_fused(
        c, spec->kind == CODEC_DENSE && e->r_zero ? NULL : e->r, e->u, g, e->m,
        e->n, &out);
    if (rc != FLPS_OK)
        return rc; /* FLPS_ENOMEM or FLPS_EINVAL: nothing moved */
    e->umax = e->u != NULL ? ub : 0.0;
    if (spec->kind == CODEC_DENSE) {
        e->rmax = 0.0;
        e->r_zero = 1;
    } else {
        e->r_zero = 0;
        /* Every element kept is no larger than every element sent (an
         * exact top-k, or dgc's threshold set). */
        const float *val = (const float *)(const void *)out.frames[1].data;
        double kept = ab;
        for (size_t j = 0; j < out.count; j++)
            if (fabs((double)val[j]) < kept)
                kept = fabs((double)val[j]);
        e->rmax = kept;
        if (ef_masks(e, spec))
            for (size_t j = 0; j < out.count; j++)
                e->u[out.idx[j]] = 0.0f;
    }
    *msg = out;
    return FLPS_OK;
}

/* What codec_encode of r + (m * u + g) would refuse, found without
 * writing anything: FLPS_ENONFINITE for a NaN or Inf, FLPS_ERANGE for a
 * qsgd bucket norm beyond f32 (computed exactly as codec_qsgd_encode
 * computes it), else FLPS_OK. */
static flps_err ef_check_quantised(const ef *e, const float *g,
                                   const codec_spec *spec)
{
    if (!ef_update_is_finite(e, g))
        return FLPS_ENONFINITE;
    if (spec->kind != CODEC_QSGD)
        return FLPS_OK; /* fp16 saturates; sign's mean cannot overflow */
    for (size_t lo = 0; lo < e->n; lo += CODEC_QSGD_BUCKET) {
        size_t hi =
            lo + CODEC_QSGD_BUCKET < e->n ? lo + CODEC_QSGD_BUCKET : e->n;
        double ss[4] = {0.0, 0.0, 0.0, 0.0};
        size_t i;
        for (i = lo; i + 4 <= hi; i += 4)
            for (unsigned j = 0; j < 4; j++) {
                size_t q = i + j;
                float x = e->u != NULL ? e->r[q] + (e->m * e->u[q] + g[q])
                                       : e->r[q] + g[q];
                ss[j] += (double)x * (double)x;
            }
        for (; i < hi; i++) {
            float x = e->u != NULL ? e->r[i] + (e->m * e->u[i] + g[i])
                                   : e->r[i] + g[i];
            ss[0] += (double)x * (double)x;
        }
        if (sqrt((ss[0] + ss[1]) + (ss[2] + ss[3])) > FLT_MAX)
            return FLPS_ERANGE;
    }
    return FLPS_OK;
}

/* The step for the quantising codecs (fp16, qsgd, sign) on an ef made by
 * ef_create_for, in place: everything that could make the encode fail
 * is ruled out first (g checked, the bounds or else a read-only check of
 * the sums and of qsgd's norms, the codec's buffers reserved), then r and
 * u are updated, r is encoded and r <- r - decode(msg) as in the scratch
 * step. The same float operations in the same order as that step. */
static flps_err ef_step_quantised(ef *e, codec *c, const float *g,
                                  codec_msg *msg)
{
    const codec_spec *spec = codec_get_spec(c);
    /* A qsgd norm is at most sqrt(512) < 32 times the bucket's largest
     * element. */
    double limit =
        spec->kind == CODEC_QSGD ? (double)FLT_MAX / 32.0 : (double)FLT_MAX;
    float *restrict r = e->r, *restrict u = e->u;
    size_t n = e->n;
    double ub, ab, rmax = 0.0;
    float gmax = 0.0f;
    codec_msg out;
    flps_err rc;

    if (!ef_max_abs(g, n, &gmax))
        return FLPS_ENONFINITE;
    ub = u != NULL ? ((double)e->m * e->umax + gmax) * EF_ROUND + FLT_MIN
                   : (double)gmax;
    ab = (e->rmax + ub) * EF_ROUND + FLT_MIN;
    if (!(ab < limit)) {
        rc = ef_check_quantised(e, g, spec);
        if (rc != FLPS_OK)
            return rc;
    }
    rc = codec_reserve(c, n);
    if (rc != FLPS_OK)
        return rc;
    if (u != NULL) {
        for (size_t i = 0; i < n; i++) {
            float v = e->m * u[i] + g[i];
            u[i] = v;
            r[i] = r[i] + v;
        }
    } else {
        for (size_t i = 0; i < n; i++)
            r[i] = r[i] + g[i];
    }
    rc = codec_encode(c, r, n, &out);
    if (rc != FLPS_OK)
        return rc; /* not expected: ruled out above */
    for (size_t i = 0; i < n; i++)
        r[i] = -r[i];
    rc = codec_decode(spec, out.frames, out.nframes, r, n);
    if (rc != FLPS_OK)
        return rc; /* not expected: we just encoded it */
    for (size_t i = 0; i < n; i++) {
        double v;
        r[i] = -r[i];
        v = fabs((double)r[i]);
        rmax = v > rmax ? v : rmax;
    }
    e->rmax = rmax;
    e->umax = u != NULL ? ub : 0.0;
    *msg = out;
    return FLPS_OK;
}

static flps_err ef_step_any(ef *e, codec *c, const float *g, codec_msg *msg);

flps_err ef_step(ef *e, codec *c, const float *g, codec_msg *msg)
{
    flps_err rc = ef_step_any(e, c, g, msg);

    /* An output set with codec_set_output lasts for one encode, also when
     * the step failed before it encoded. */
    if (c != NULL)
        codec_set_output(c, NULL, 0);
    return rc;
}

static flps_err ef_step_any(ef *e, codec *c, const float *g, codec_msg *msg)
{
    const codec_spec *spec;
    codec_msg out;
    size_t n;
    flps_err rc;

    if (e == NULL || c == NULL || msg == NULL || (e->n > 0 && g == NULL))
        return FLPS_EINVAL;
    n = e->n;
    spec = codec_get_spec(c);
    if (!ef_codec_is_contractive(spec))
        return FLPS_EINVAL;
    if (codec_kind_sends_exact_values(spec->kind))
        return ef_step_exact(e, c, g, msg);
    if (e->a == NULL)
        return ef_step_quantised(e, c, g, msg);
    /* Work in the scratch buffers and swap them in only on success, so a
     * failed step (a NaN in g) leaves the state as it was. */
    if (e->m > 0.0f) {
        for (size_t i = 0; i < n; i++) {
            e->u2[i] = e->m * e->u[i] + g[i];
            e->a[i] = e->r[i] + e->u2[i];
        }
    } else {
        for (size_t i = 0; i < n; i++)
            e->a[i] = e->r[i] + g[i];
    }
    rc = codec_encode(c, e->a, n, &out);
    if (rc != FLPS_OK)
        return rc;
    {
        /* r = a - decode(msg), computed in place as -((-a) + decode):
         * IEEE rounding is symmetric in sign, so this is exactly the same
         * float as a - decode, without a second scratch array. */
        for (size_t i = 0; i < n; i++)
            e->a[i] = -e->a[i];
        rc = codec_decode(spec, out.frames, out.nframes, e->a, n);
        if (rc != FLPS_OK)
            return rc; /* not expected: we just encoded it */
        for (size_t i = 0; i < n; i++)
            e->a[i] = -e->a[i];
    }
    {
        float *t = e->r;
        e->r = e->a;
        e->a = t;
    }
    if (e->m > 0.0f) {
        float *t = e->u;
        e->u = e->u2;
        e->u2 = t;
    }
    /* Not tracked through a quantisation: the next exact step checks. */
    e->rmax = e->umax = INFINITY;
    e->r_zero = 0;
    *msg = out;
    return FLPS_OK;
}

flps_err ef_add_back(ef *e, const uint32_t *idx, const float *val, size_t m)
{
    if (e == NULL || (m > 0 && (idx == NULL || val == NULL)))
        return FLPS_EINVAL;
    for (size_t j = 0; j < m; j++) {
        if (idx[j] >= e->n)
            return FLPS_ERANGE;
        if (!isfinite(val[j]))
            return FLPS_ENONFINITE;
    }
    if (m > 0)
        e->r_zero = 0;
    for (size_t j = 0; j < m; j++) {
        double v;
        e->r[idx[j]] += val[j];
        v = fabs((double)e->r[idx[j]]);
        e->rmax = v > e->rmax || v != v ? v : e->rmax;
    }
    if (!(e->rmax < INFINITY))
        e->rmax = INFINITY;
    return FLPS_OK;
}

void ef_reset(ef *e)
{
    memset(e->r, 0, e->n * sizeof(*e->r));
    if (e->u != NULL)
        memset(e->u, 0, e->n * sizeof(*e->u));
    e->rmax = e->umax = 0.0;
    e->r_zero = 1;
}

size_t ef_size(const ef *e)
{
    return e->n;
}

double ef_residual_norm(const ef *e)
{
    double ss[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i;

    if (e->r_zero)
        return 0.0;
    for (i = 0; i + 4 <= e->n; i += 4)
        for (unsigned j = 0; j < 4; j++)
            ss[j] += (double)e->r[i + j] * (double)e->r[i + j];
    for (; i < e->n; i++)
        ss[0] += (double)e->r[i] * (double)e->r[i];
    return sqrt((ss[0] + ss[1]) + (ss[2] + ss[3]));
}

const float *ef_residual(const ef *e)
{
    return e->r;
}

const float *ef_velocity(const ef *e)
{
    return e->u;
}
