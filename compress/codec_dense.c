/* The dense codecs: f32 as is, and IEEE binary16. */
#include "compress/codec_impl.h"

#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CODEC_HAVE_F16C 1
#endif

#include "common/alloc.h"

flps_err codec_dense_encode(codec *c, const float *a, size_t n, codec_msg *out)
{
    flps_err rc;

    if (!codec_all_finite(a, n))
        return FLPS_ENONFINITE;
    rc = codec_buf_reserve(c, 0, 4 * n);
    if (rc != FLPS_OK)
        return rc;
    if (n > 0)
        memcpy(c->buf[0], a, 4 * n);
    codec_msg_set(c, 1, 4 * n, 0, n, out);
    return FLPS_OK;
}

flps_err codec_dense_encode_fused(codec *c, float *r, float *u, const float *g,
                                  float m, size_t n, codec_msg *out)
{
    float *restrict d, *restrict rr = r, *restrict uu = u;
    const float *restrict gg = g;
    uint32_t bad = 0; /* as codec_all_finite, over what is sent */
    flps_err rc = codec_buf_reserve(c, 0, 4 * n);

    if (rc != FLPS_OK)
        return rc;
    d = (float *)(void *)c->buf[0];
    if (rr == NULL) {
        /* A residual known to be +0.0f: the same values (0.0f + v, so a
         * -0.0f still comes out +0.0f), without reading or writing it. */
        for (size_t i = 0; i < n; i++) {
            float v = uu != NULL ? m * uu[i] + gg[i] : gg[i], x = 0.0f + v;
            uint32_t bits;
            if (uu != NULL)
                uu[i] = v;
            d[i] = x;
            memcpy(&bits, &x, sizeof(bits));
            bad |= (bits & 0x7fffffffu) + 0x00800000u;
        }
    } else if (uu != NULL) {
        for (size_t i = 0; i < n; i++) {
            float v = m * uu[i] + gg[i], x = rr[i] + v;
            uint32_t bits;
            uu[i] = v;
            d[i] = x;
            rr[i] = 0.0f;
            memcpy(&bits, &x, sizeof(bits));
            bad |= (bits & 0x7fffffffu) + 0x00800000u;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float x = rr[i] + gg[i];
            uint32_t bits;
            d[i] = x;
            rr[i] = 0.0f;
            memcpy(&bits, &x, sizeof(bits));
            bad |= (bits & 0x7fffffffu) + 0x00800000u;
        }
    }
    if (bad & 0x80000000u)
        return FLPS_ENONFINITE;
    codec_msg_set(c, 1, 4 * n, 0, n, out);
    return FLPS_OK;
}

flps_err codec_dense_encode_into(const float *g, const float *v, float m,
                                 size_t n, void *dst)
{
    unsigned char *d = dst;
    uint32_t bad = 0;

    if (n > 0 && (g == NULL || dst == NULL))
        return FLPS_EINVAL;
    /* memcpy for the stores keeps any alignment of dst legal; they compile
     * to plain vector stores. */
    if (v == NULL) {
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, g + i, sizeof(bits));
            memcpy(d + 4 * i, &bits, sizeof(bits));
            bad |= (bits & 0x7fffffffu) + 0x00800000u;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float x = m * v[i] + g[i];
            uint32_t bits;
            memcpy(&bits, &x, sizeof(bits));
            memcpy(d + 4 * i, &bits, sizeof(bits));
            bad |= (bits & 0x7fffffffu) + 0x00800000u;
        }
    }
    return (bad & 0x80000000u) ? FLPS_ENONFINITE : FLPS_OK;
}

flps_err codec_dense_decode(const codec_spec *spec, const codec_frame *fr,
                            float *acc, size_t n)
{
    const uint8_t *p = fr[0].data;

    (void)spec;
    if (fr[0].len != 4 * n)
        return FLPS_EPROTO;
    {
        uint32_t bad = 0; /* as codec_all_finite, on unaligned bytes */
        for (size_t i = 0; i < n; i++)
            bad |= (codec_load_u32(p + 4 * i) & 0x7fffffffu) + 0x00800000u;
        if (bad & 0x80000000u)
            return FLPS_ENONFINITE;
    }
    for (size_t i = 0; i < n; i++)
        acc[i] += codec_load_f32(p + 4 * i);
    return FLPS_OK;
}

uint16_t codec_f32_to_f16(float x)
{
    uint32_t u, sign, mag;

    memcpy(&u, &x, sizeof(u));
    sign = (u >> 16) & 0x8000u;
    mag = u & 0x7fffffffu;
    if (mag >= 0x477ff000u) /* rounds to 65520 or beyond: saturate */
        return (uint16_t)(sign | 0x7bffu);
    if (mag >= 0x38800000u) { /* normal in binary16 (>= 2^-14) */
        /* Rebias the exponent (127 -> 15) and round the 13 dropped
         * mantissa bits to nearest even; a carry into the exponent is the
         * correct result. */
        uint32_t h = (mag - 0x38000000u) >> 13;
        uint32_t rest = mag & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    if (mag < 0x33000000u) /* below half the smallest subnormal: zero */
        return (uint16_t)sign;
    {
        /* Subnormal in binary16: value = m * 2^-24 with m < 1024. */
        uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* in 14..24 for e in 102..112 */
        uint32_t h = m >> shift, rest = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rest > half || (rest == half && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
}

float codec_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    float f;

    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else {
        /* Subnormal: m * 2^-24, exact in f32. */
        f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    memcpy(&f, &u, sizeof(f));
    return f;
}

#if defined(CODEC_HAVE_F16C)
/* The F16C conversions (chosen at run time; the library is built for
 * baseline x86-64): the same round-to-nearest-even results as the portable
 * code, which the tests check, about 20x faster. Both clear the upper YMM
 * state before their scalar tails (see docs/compress.md, "AVX state"). Clamping
 * first gives the saturation: everything at or beyond 65504 becomes 65504. */
__attribute__((target("avx,f16c"))) static void
codec_f16_pack_f16c(const float *a, size_t n, uint16_t *h)
{
    const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(a + i), lo), hi);
        _mm_storeu_si128((__m128i *)(void *)(h + i),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    }
    /* Explicit (GCC inserts none without optimisation): the tail calls
     * baseline code. */
    _mm256_zeroupper();
    for (; i < n; i++)
        h[i] = codec_f32_to_f16(a[i]);
}

__attribute__((target("avx,f16c"))) static void
codec_f16_add_f16c(const uint8_t *p, size_t n, float *acc)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_cvtph_ps(h));
        _mm256_storeu_ps(acc + i, v);
    }
    _mm256_zeroupper();
    for (; i < n; i++)
        acc[i] += codec_f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
}

/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
 * does not know "f16c". */
static int codec_has_f16c(void)
{
    unsigned a, b, c, d;

    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) &&
           (c & bit_F16C) != 0;
}
#endif

flps_err codec_fp16_encode(codec *c, const float *a, size_t n, codec_msg *out)
{
    flps_err rc;
    uint16_t *h;

    if (!codec_all_finite(a, n))
        return FLPS_ENONFINITE;
    rc = codec_buf_reserve(c, 0, 2 * n);
    if (rc != FLPS_OK)
        return rc;
    h = (uint16_t *)(void *)c->buf[0];
#if defined(CODEC_HAVE_F16C)
    if (codec_has_f16c())
        codec_f16_pack_f16c(a, n, h);
    else
#endif
        for (size_t i = 0; i < n; i++)
            h[i] = codec_f32_to_f16(a[i]);
    codec_msg_set(c, 1, 2 * n, 0, n, out);
    return FLPS_OK;
}

flps_err codec_fp16_decode(const codec_spec *spec, const codec_frame *fr,
                           float *acc, size_t n)
{
    const uint8_t *p = fr[0].data;

    (void)spec;
    if (fr[0].len != 2 * n)
        return FLPS_EPROTO;
    {
        /* An all-ones exponent (Inf, NaN) plus one carries into bit 7 of
         * the high byte; one OR over the frame, no branch. */
        unsigned bad = 0;
        for (size_t i = 0; i < n; i++)
            bad |= (p[2 * i + 1] & 0x7cu) + 0x04u;
        if (bad & 0x80u)
            return FLPS_ENONFINITE;
    }
#if defined(CODEC_HAVE_F16C)
    if (codec_has_f16c()) {
        codec_f16_add_f16c(p, n, acc);
        return FLPS_OK;
    }
#endif
    for (size_t i = 0; i < n; i++)
        acc[i] += codec_f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
    return FLPS_OK;
}
