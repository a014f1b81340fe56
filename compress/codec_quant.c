/* The quantising codecs: QSGD (stochastic rounding to 2^BITS - 1 levels of
 * a per-bucket norm) and sign (one bit per element and one scale). */
#include "compress/codec_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* LSB-first bit stream over a byte buffer. */
typedef struct {
    uint8_t *p;
    uint64_t acc;
    unsigned nacc;
} codec_bitw;

/* width <= 32. Stores 32 bits at a time (little-endian host). */
static inline void codec_bitw_put(codec_bitw *w, uint32_t v, unsigned width)
{
    w->acc |= (uint64_t)v << w->nacc;
    w->nacc += width;
    if (w->nacc >= 32) {
        uint32_t word = (uint32_t)w->acc;
        memcpy(w->p, &word, sizeof(word));
        w->p += 4;
        w->acc >>= 32;
        w->nacc -= 32;
    }
}

static inline void codec_bitw_flush(codec_bitw *w)
{
    while (w->nacc > 0) {
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nacc = w->nacc > 8 ? w->nacc - 8 : 0;
    }
    w->acc = 0;
}

typedef struct {
    const uint8_t *p, *end;
    uint64_t acc;
    unsigned nacc;
} codec_bitr;

/* width <= 32; the caller never reads past the codes the frame holds. */
static inline uint32_t codec_bitr_get(codec_bitr *r, unsigned width)
{
    uint32_t v;

    if (r->nacc < width) {
        if (r->end - r->p >= 4) {
            uint32_t word;
            memcpy(&word, r->p, sizeof(word));
            r->acc |= (uint64_t)word << r->nacc;
            r->p += 4;
            r->nacc += 32;
        } else {
            while (r->nacc < width) {
                r->acc |= (uint64_t)*r->p++ << r->nacc;
                r->nacc += 8;
            }
        }
    }
    v = (uint32_t)(r->acc & ((1u << width) - 1));
    r->acc >>= width;
    r->nacc -= width;
    return v;
}

/* The value of level l out of s: norm * (l / s) with l / s rounded first,
 * so the product never exceeds norm (and never overflows). Encoder and
 * decoder share this table. */
static void codec_qsgd_levels(unsigned s, float *lvl)
{
    for (unsigned l = 0; l <= s; l++)
        lvl[l] = (float)l / (float)s;
}

static size_t codec_qsgd_nbuckets(size_t n)
{
    return (n + CODEC_QSGD_BUCKET - 1) / CODEC_QSGD_BUCKET;
}

flps_err codec_qsgd_encode(codec *c, const float *a, size_t n, codec_msg *out)
{
    unsigned bits = c->spec.bits, s = (1u << bits) - 1;
    size_t nb = codec_qsgd_nbuckets(n);
    size_t b1 = (n * (bits + 1) + 7) / 8;
    uint64_t state = codec_stream(c);
    codec_bitw w;
    flps_err rc;

    if (!codec_all_finite(a, n))
        return FLPS_ENONFINITE;
    rc = codec_buf_reserve(c, 0, 4 * nb);
    if (rc == FLPS_OK)
        rc = codec_buf_reserve(c, 1, b1);
    if (rc != FLPS_OK)
        return rc;
    w.p = c->buf[1];
    w.acc = 0;
    w.nacc = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * CODEC_QSGD_BUCKET;
        size_t hi = lo + CODEC_QSGD_BUCKET < n ? lo + CODEC_QSGD_BUCKET : n;
        double ss[4] = {0.0, 0.0, 0.0, 0.0}, nd, scale;
        uint16_t code[CODEC_QSGD_BUCKET];
        float norm;
        size_t i;

        /* In double: a sum of squares of floats cannot overflow there.
         * Four partial sums for instruction-level parallelism. */
        for (i = lo; i + 4 <= hi; i += 4)
            for (unsigned j = 0; j < 4; j++)
                ss[j] += (double)a[i + j] * (double)a[i + j];
        for (; i < hi; i++)
            ss[0] += (double)a[i] * (double)a[i];
        nd = sqrt((ss[0] + ss[1]) + (ss[2] + ss[3]));
        if (nd > FLT_MAX)
            return FLPS_ERANGE;
        /* Rounding to nearest keeps norm >= max |a_i| (a float below the
         * exact norm), so every |a_i| / norm <= 1 and l <= s. */
        norm = (float)nd;
        memcpy(c->buf[0] + 4 * b, &norm, sizeof(norm));
        /* In double: s / norm overflows f32 for a denormal norm. */
        scale = norm > 0.0f ? (double)s / (double)norm : 0.0;
        for (i = lo; i < hi; i += 2) {
            /* l = floor(x) + (xi < frac(x)) with xi uniform on 2^-32
             * steps: E[l] = x up to 2^-32. One draw serves two elements. */
            uint64_t r = flps_splitmix64(&state);
            for (unsigned j = 0; j < 2 && i + j < hi; j++) {
                double x = (double)fabsf(a[i + j]) * scale;
                uint32_t l = (uint32_t)x;
                uint32_t t = (uint32_t)((x - (double)l) * 4294967296.0);
                uint32_t xi = (uint32_t)(r >> (32 * j));
                l += xi < t;
                if (l > s)
                    l = s;
                /* & not &&: the sign of a small level is a coin toss, and
                 * a branch on it mispredicts. */
                code[i + j - lo] =
                    (uint16_t)(l | (uint32_t)((l != 0) & (a[i + j] < 0.0f))
                                       << bits);
            }
        }
        for (i = lo; i < hi; i++)
            codec_bitw_put(&w, code[i - lo], bits + 1);
    }
    codec_bitw_flush(&w);
    codec_msg_set(c, 2, 4 * nb, b1, n, out);
    return FLPS_OK;
}

/* Validate that the bits after the last code in the last byte are zero. */
static int codec_padding_is_zero(const codec_frame *f, size_t nbits)
{
    if (nbits % 8 == 0 || f->len == 0)
        return 1;
    return (f->data[f->len - 1] >> (nbits % 8)) == 0;
}

flps_err codec_qsgd_decode(const codec_spec *spec, const codec_frame *fr,
                           float *acc, size_t n)
{
    unsigned bits = spec->bits, s = (1u << bits) - 1;
    size_t nb = codec_qsgd_nbuckets(n);
    float lvl[256];
    codec_bitr r;

    if (fr[0].len != 4 * nb || fr[1].len != (n * (bits + 1) + 7) / 8)
        return FLPS_EPROTO;
    for (size_t b = 0; b < nb; b++) {
        float norm = codec_load_f32(fr[0].data + 4 * b);
        if (!isfinite(norm))
            return FLPS_ENONFINITE;
        if (norm < 0.0f)
            return FLPS_EPROTO;
    }
    if (!codec_padding_is_zero(&fr[1], n * (bits + 1)))
        return FLPS_EPROTO;
    codec_qsgd_levels(s, lvl);
    r.p = fr[1].data;
    r.end = fr[1].data + fr[1].len;
    r.acc = 0;
    r.nacc = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * CODEC_QSGD_BUCKET;
        size_t hi = lo + CODEC_QSGD_BUCKET < n ? lo + CODEC_QSGD_BUCKET : n;
        float norm = codec_load_f32(fr[0].data + 4 * b);
        for (size_t i = lo; i < hi; i++) {
            uint32_t code = codec_bitr_get(&r, bits + 1);
            float v = norm * lvl[code & s];
            acc[i] += (code >> bits) ? -v : v;
        }
    }
    return FLPS_OK;
}

flps_err codec_sign_encode(codec *c, const float *a, size_t n, codec_msg *out)
{
    size_t b1 = (n + 7) / 8;
    double sum = 0.0;
    float scale;
    flps_err rc;

    if (!codec_all_finite(a, n))
        return FLPS_ENONFINITE;
    rc = codec_buf_reserve(c, 0, 4);
    if (rc == FLPS_OK)
        rc = codec_buf_reserve(c, 1, b1);
    if (rc != FLPS_OK)
        return rc;
    {
        double part[4] = {0.0, 0.0, 0.0, 0.0};
        size_t i;
        for (i = 0; i + 4 <= n; i += 4)
            for (unsigned j = 0; j < 4; j++)
                part[j] += fabs((double)a[i + j]);
        for (; i < n; i++)
            part[0] += fabs((double)a[i]);
        sum = (part[0] + part[1]) + (part[2] + part[3]);
    }
    scale = n > 0 ? (float)(sum / (double)n) : 0.0f;
    memcpy(c->buf[0], &scale, sizeof(scale));
    for (size_t i = 0; i < n; i += 8) {
        uint32_t byte = 0;
        for (unsigned j = 0; j < 8 && i + j < n; j++)
            byte |= (uint32_t)(a[i + j] < 0.0f) << j;
        c->buf[1][i / 8] = (uint8_t)byte;
    }
    codec_msg_set(c, 2, 4, b1, n, out);
    return FLPS_OK;
}

flps_err codec_sign_decode(const codec_spec *spec, const codec_frame *fr,
                           float *acc, size_t n)
{
    float scale;

    (void)spec;
    if (fr[0].len != 4 || fr[1].len != (n + 7) / 8)
        return FLPS_EPROTO;
    scale = codec_load_f32(fr[0].data);
    if (!isfinite(scale))
        return FLPS_ENONFINITE;
    if (scale < 0.0f || !codec_padding_is_zero(&fr[1], n))
        return FLPS_EPROTO;
    {
        /* +-scale by flipping the sign bit: no branch per element. */
        uint32_t sb;
        memcpy(&sb, &scale, sizeof(sb));
        for (size_t i = 0; i < n; i += 8) {
            uint32_t byte = fr[1].data[i / 8];
            for (unsigned j = 0; j < 8 && i + j < n; j++) {
                uint32_t vb = sb | ((byte >> j) & 1u) << 31;
                float v;
                memcpy(&v, &vb, sizeof(v));
                acc[i + j] += v;
            }
        }
    }
    return FLPS_OK;
}
