/* The sparse codecs: (index, value) pairs chosen by exact top-k (topk,
 * gtopk), a sampled threshold (dgc) or uniformly at random (randk). */
#include "compress/codec_impl.h"

#include <string.h>

#include "common/alloc.h"

/* Uniform in [0, range), range >= 1, without the bias of a plain
 * multiply-shift (Lemire's method with rejection). */
static uint32_t codec_uniform(uint64_t *state, uint32_t range)
{
    uint64_t m = (flps_splitmix64(state) >> 32) * range;
    uint32_t low = (uint32_t)m;

    if (low < range) {
        uint32_t t = (uint32_t)(-range) % range;
        while (low < t) {
            m = (flps_splitmix64(state) >> 32) * range;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void codec_randk_indices(size_t n, size_t k, uint64_t seed, uint64_t *bitmap,
                         uint32_t *idx)
{
    size_t words = (n + 63) / 64, o = 0;
    uint64_t state = seed;

    if (k == 0)
        return;
    memset(bitmap, 0, words * sizeof(*bitmap));
    for (size_t j = n - k; j < n; j++) {
        size_t t = codec_uniform(&state, (uint32_t)(j + 1));
        if (bitmap[t / 64] >> (t % 64) & 1u)
            t = j;
        bitmap[t / 64] |= 1ull << (t % 64);
    }
    for (size_t w = 0; w < words; w++)
        for (uint64_t b = bitmap[w]; b != 0; b &= b - 1)
            idx[o++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
}

/* randk's k indices of [0, n) for seed, into idx (the codec's bitmap as
 * the scratch). */
static flps_err codec_randk_pick(codec *c, size_t n, size_t k, uint64_t seed,
                                 uint32_t *idx)
{
    size_t words = (n + 63) / 64;

    if (k == 0)
        return FLPS_OK;
    if (c->bitmap_words < words) {
        uint64_t *p = flps_malloc(words * sizeof(*p));
        if (p == NULL)
            return FLPS_ENOMEM;
        flps_free(c->bitmap);
        c->bitmap = p;
        c->bitmap_words = words;
    }
    codec_randk_indices(n, k, seed, c->bitmap, idx);
    return FLPS_OK;
}

/* Room for the selection of n elements (k of them; dgc's approximate
 * count may reach k + k/5) in the codec's index and value buffers. */
static flps_err sparse_room(codec *c, size_t n, size_t *k, uint32_t **idx,
                            float **val)
{
    size_t cap = codec_count_for(&c->spec, n);
    flps_err rc;

    *k = cap;
    if (c->spec.kind == CODEC_DGC)
        cap += cap / 5;
    rc = codec_buf_reserve(c, 0, 4 * cap);
    if (rc == FLPS_OK)
        rc = codec_buf_reserve(c, 1, 4 * cap);
    if (rc != FLPS_OK)
        return rc;
    *idx = (uint32_t *)(void *)c->buf[0];
    *val = (float *)(void *)c->buf[1];
    return FLPS_OK;
}

flps_err codec_sparse_encode(codec *c, const float *a, size_t n, codec_msg *out)
{
    size_t k, m;
    float scale = 1.0f;
    uint32_t *idx;
    float *val;
    flps_err rc = sparse_room(c, n, &k, &idx, &val);

    if (rc != FLPS_OK)
        return rc;
    m = k;
    switch (c->spec.kind) {
    case CODEC_DGC:
        rc = topk_ctx_select_approx(c->topk, a, n, k, codec_stream(c), idx, &m,
                                    NULL);
        break;
    case CODEC_RANDK:
        if (!codec_all_finite(a, n))
            return FLPS_ENONFINITE;
        rc = codec_randk_pick(c, n, k, codec_stream(c), idx);
        /* Each index is sent with probability k/n: scale by n/k so that
         * the decoded array is unbiased. */
        if (k > 0)
            scale = (float)((double)n / (double)k);
        break;
    default:
        rc = topk_ctx_select(c->topk, a, n, k, idx);
        break;
    }
    if (rc != FLPS_OK)
        return rc;
    for (size_t j = 0; j < m; j++)
        val[j] = a[idx[j]] * scale;
    codec_msg_set(c, 2, 4 * m, 4 * m, m, out);
    out->idx = idx;
    return FLPS_OK;
}

flps_err codec_sparse_encode_fused(codec *c, float *r, float *u, const float *g,
                                   float m, size_t n, codec_msg *out)
{
    size_t k, cnt = 0;
    uint32_t *idx;
    float *val;
    flps_err rc = sparse_room(c, n, &k, &idx, &val);

    if (rc != FLPS_OK)
        return rc;
    /* The same selection (and for dgc the same random stream) as
     * codec_sparse_encode on the updated array. */
    rc = topk_ctx_select_fused(c->topk, r, u, g, m, n, k,
                               c->spec.kind == CODEC_DGC, codec_stream(c), idx,
                               &cnt);
    if (rc != FLPS_OK)
        return rc;
    for (size_t j = 0; j < cnt; j++) {
        val[j] = r[idx[j]];
        r[idx[j]] = 0.0f;
    }
    codec_msg_set(c, 2, 4 * cnt, 4 * cnt, cnt, out);
    out->idx = idx;
    return FLPS_OK;
}

flps_err codec_sparse_decode(const codec_spec *spec, const codec_frame *fr,
                             float *acc, size_t n)
{
    size_t k = codec_count_for(spec, n), m = fr[0].len / 4;
    const uint8_t *pi = fr[0].data, *pv = fr[1].data;

    if (fr[0].len % 4 != 0 || fr[1].len != fr[0].len)
        return FLPS_EPROTO;
    if (spec->kind == CODEC_DGC ? (m < k - k / 5 || m > k + k / 5) : m != k)
        return FLPS_EPROTO;
    for (size_t j = 0; j < m; j++) {
        uint32_t i = codec_load_u32(pi + 4 * j);
        uint32_t v = codec_load_u32(pv + 4 * j);
        if (i >= n)
            return FLPS_ERANGE;
        if (j > 0 && i <= codec_load_u32(pi + 4 * (j - 1)))
            return FLPS_EPROTO;
        if ((v & 0x7f800000u) == 0x7f800000u)
            return FLPS_ENONFINITE;
    }
    for (size_t j = 0; j < m; j++)
        acc[codec_load_u32(pi + 4 * j)] += codec_load_f32(pv + 4 * j);
    return FLPS_OK;
}
