/* Error feedback with momentum correction for one layer. */
#include "compress/ef.h"

#include <math.h>
#include <string.h>

#include "common/alloc.h"

struct ef {
    size_t n;
    float m;
    float *r;  /* residual */
    float *u;  /* velocity; NULL when m == 0 */
    float *a;  /* scratch: the array encoded, then the next residual */
    float *u2; /* scratch: the next velocity; NULL when m == 0 */
};

flps_err ef_create(size_t n, float momentum, ef **out)
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
    e->r = flps_calloc(1, bytes);
    e->a = flps_malloc(bytes);
    if (e->r == NULL || e->a == NULL)
        goto fail;
    if (momentum > 0.0f) {
        e->u = flps_calloc(1, bytes);
        e->u2 = flps_malloc(bytes);
        if (e->u == NULL || e->u2 == NULL)
            goto fail;
    }
    *out = e;
    return FLPS_OK;

fail:
    ef_destroy(e);
    return FLPS_ENOMEM;
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

static int ef_sends_exact_values(codec_kind kind)
{
    return kind == CODEC_TOPK || kind == CODEC_GTOPK || kind == CODEC_DGC;
}

flps_err ef_step(ef *e, codec *c, const float *g, codec_msg *msg)
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
    if (ef_sends_exact_values(spec->kind)) {
        /* The values sent are a[S] themselves: r = a with S zeroed. */
        for (size_t j = 0; j < out.count; j++)
            e->a[out.idx[j]] = 0.0f;
    } else {
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
        if (out.idx != NULL)
            for (size_t j = 0; j < out.count; j++)
                e->u[out.idx[j]] = 0.0f;
    }
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
    for (size_t j = 0; j < m; j++)
        e->r[idx[j]] += val[j];
    return FLPS_OK;
}

void ef_reset(ef *e)
{
    memset(e->r, 0, e->n * sizeof(*e->r));
    if (e->u != NULL)
        memset(e->u, 0, e->n * sizeof(*e->u));
}

size_t ef_size(const ef *e)
{
    return e->n;
}

const float *ef_residual(const ef *e)
{
    return e->r;
}

const float *ef_velocity(const ef *e)
{
    return e->u;
}
