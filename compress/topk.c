/* Exact top-k selection by magnitude: a sampled threshold, one vectorised
 * filtering pass over the array, and a radix select on the few candidates.
 *
 * Every comparison works on keys: the IEEE-754 bits of a float with the
 * sign cleared. For finite values the key order is the order of |x| (zeros
 * of either sign share key 0, denormals sit below the normals), and NaN or
 * Inf have keys >= TOPK_KEY_INF, above every finite key. So a threshold
 * filter on keys also catches every non-finite element as a candidate, and
 * the finiteness check costs nothing extra in the pass over the data. */
#include "compress/topk.h"

#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TOPK_NO_AVX2)
#include <immintrin.h>
#define TOPK_HAVE_AVX2 1
#endif

#include "common/alloc.h"

#define TOPK_KEY_MASK 0x7fffffffu
#define TOPK_KEY_INF 0x7f800000u

/* Below this size, or above a density of 1/8, the sample and the candidate
 * buffer cost more than they save: radix passes over the whole array. */
#define TOPK_SAMPLE_MIN_N 65536u
#define TOPK_DENSE_DIV 8u
/* Sample 1% of the array, in runs of consecutive elements. */
#define TOPK_SAMPLE_DIV 100u
#define TOPK_SAMPLE_RUN 16u
/* The approximate (DGC) mode wants the sample rank of the threshold to be
 * at least this, so that the count lands within +-20% of k (the relative
 * spread of the count is about 1/sqrt(rank)). */
#define TOPK_APPROX_MIN_RANK 400u
/* The filtering pass examines up to this many elements per step. */
#define TOPK_BLOCK 32u
/* Candidate buffer: 2k plus this slack; a sample misjudging by more than
 * that makes the pass stop early and retry with a higher threshold. */
#define TOPK_CAND_SLACK 4096u
/* Threshold retries before the exact whole-array radix select. */
#define TOPK_MAX_SCANS 4

struct topk_ctx {
    uint32_t *samp; /* sampled keys */
    size_t samp_cap;
    uint32_t *cand; /* candidate indices, ascending */
    uint32_t *ckey; /* the candidates' keys, same order */
    size_t cand_cap;
};

/* Keys above hi are all selected; of the keys in [lo, hi], the first need
 * in index order are. */
typedef struct {
    uint32_t lo;
    uint32_t hi;
    size_t need;
} topk_band;

/* An error-feedback update of the array a that a selection runs on, not
 * yet made (see topk_ctx_select_fused): a[i] <- a[i] + (u[i] <- m * u[i] +
 * g[i]), or a[i] + g[i] when u is NULL. While pending, a holds the old
 * values: the sample computes the new ones on the fly and the first
 * filtering pass makes the update as it goes, so the layer is read and
 * written once. Everything else that reads a applies it first. */
typedef struct {
    float *a;
    float *u;
    const float *g;
    float m;
    int pending;
} topk_fuse;

/* The key of the 32-bit word at p (a float or an already computed key).
 * memcpy keeps the load free of aliasing questions; it compiles to a
 * plain load. */
__attribute__((always_inline)) static inline uint32_t topk_key_at(const void *p)
{
    uint32_t u;

    memcpy(&u, p, sizeof(u));
    return u & TOPK_KEY_MASK;
}

static inline uint32_t topk_key_of(float x)
{
    return topk_key_at(&x);
}

/* The new a[i] of a pending update, computed with the same operations in
 * the same order as the update itself (so bit for bit the same value). */
static inline float topk_fuse_value(const topk_fuse *f, size_t i)
{
    float v;

    if (f->u == NULL)
        return f->a[i] + f->g[i];
    v = f->m * f->u[i] + f->g[i];
    return f->a[i] + v;
}

/* Make the pending update of f (NULL: nothing pending) over a[0..n). */
static void topk_fuse_apply(topk_fuse *f, size_t n)
{
    float *restrict a, *restrict u;
    const float *restrict g;
    float m;

    if (f == NULL || !f->pending)
        return;
    a = f->a;
    u = f->u;
    g = f->g;
    m = f->m;
    if (u == NULL) {
        for (size_t i = 0; i < n; i++)
            a[i] = a[i] + g[i];
    } else {
        for (size_t i = 0; i < n; i++) {
            float v = m * u[i] + g[i];
            u[i] = v;
            a[i] = a[i] + v;
        }
    }
    f->pending = 0;
}

static int topk_all_finite(const float *a, size_t n)
{
    /* key + 2^23 carries into bit 31 exactly for keys >= TOPK_KEY_INF, so
     * an OR over the array tells whether any element is NaN or Inf. The
     * loop has no branch and vectorises. */
    uint32_t acc = 0;

    for (size_t i = 0; i < n; i++)
        acc |= topk_key_at(a + i) + 0x00800000u;
    return (acc & 0x80000000u) == 0;
}

/* Find the band of keys holding the r-th largest (1 <= r <= m) of the m
 * 32-bit words at src, by radix select over digits of 11, 11 and 9 bits:
 * at most three counting passes, no sorting, no extra memory.
 * levels == 3: an exact band for selection, which stops early when a
 * whole digit bin is selected (the band is then that bin, all taken).
 * levels < 3: for a threshold; lo is at most the r-th largest key and
 * within 2^9 of it (relative 6e-5), one counting pass cheaper. No early
 * stop there: a bin's low edge can sit far below its smallest key.
 * Errors: FLPS_ENONFINITE when a key is NaN or Inf. */
static flps_err topk_radix_band(const void *src, size_t m, size_t r,
                                unsigned levels, topk_band *out)
{
    static const unsigned shift[3] = {20, 9, 0};
    static const unsigned width[3] = {11, 11, 9};
    const unsigned char *p = src;
    uint32_t hist[2048];
    uint32_t prefix = 0;

    for (unsigned lv = 0; lv < levels; lv++) {
        unsigned nbins = 1u << width[lv];
        uint32_t dmask = nbins - 1;
        unsigned above = shift[lv] + width[lv];
        size_t cum = 0;
        unsigned b = nbins - 1;

        memset(hist, 0, nbins * sizeof(hist[0]));
        if (lv == 0) {
            for (size_t i = 0; i < m; i++)
                hist[topk_key_at(p + 4 * i) >> shift[0]]++;
            for (b = TOPK_KEY_INF >> shift[0]; b < nbins; b++)
                if (hist[b] != 0)
                    return FLPS_ENONFINITE;
            b = nbins - 1;
        } else {
            for (size_t i = 0; i < m; i++) {
                uint32_t key = topk_key_at(p + 4 * i);
                if ((key >> above) == prefix)
                    hist[(key >> shift[lv]) & dmask]++;
            }
        }
        /* The bins hold at least r keys in total, so this stops. */
        while (cum + hist[b] < r) {
            cum += hist[b];
            b--;
        }
        r -= cum;
        prefix = (prefix << width[lv]) | b;
        if ((levels == 3 && hist[b] == r) || lv + 1 == levels) {
            out->lo = prefix << shift[lv];
            out->hi = out->lo | ((1u << shift[lv]) - 1);
            out->need = r;
            return FLPS_OK;
        }
    }
    return FLPS_OK; /* not reached: the last level always returns */
}

/* Write the selected indices of a[0..n) per band, ascending. Returns the
 * number written. */
static size_t topk_emit_dense(const float *a, size_t n, const topk_band *bd,
                              uint32_t *idx)
{
    size_t o = 0, need = bd->need;

    for (size_t i = 0; i < n; i++) {
        uint32_t key = topk_key_at(a + i);
        if (key > bd->hi) {
            idx[o++] = (uint32_t)i;
        } else if (key >= bd->lo && need > 0) {
            idx[o++] = (uint32_t)i;
            need--;
        }
    }
    return o;
}

/* The same over the candidates cand/ckey[0..m). */
static size_t topk_emit_cand(const uint32_t *cand, const uint32_t *ckey,
                             size_t m, const topk_band *bd, uint32_t *idx)
{
    size_t o = 0, need = bd->need;

    for (size_t j = 0; j < m; j++) {
        if (ckey[j] > bd->hi) {
            idx[o++] = cand[j];
        } else if (ckey[j] >= bd->lo && need > 0) {
            idx[o++] = cand[j];
            need--;
        }
    }
    return o;
}

/* Exact selection over the whole array: three counting passes and one
 * output pass. The fallback for small arrays, high densities and inputs
 * whose sample misleads (heavy ties). 0 < k <= n. */
static flps_err topk_full(const float *a, size_t n, size_t k, uint32_t *idx,
                          unsigned *passes, topk_fuse *f)
{
    topk_band bd;
    flps_err rc;

    topk_fuse_apply(f, n);
    rc = topk_radix_band(a, n, k, 3, &bd);
    *passes += 4;
    if (rc != FLPS_OK)
        return rc;
    topk_emit_dense(a, n, &bd, idx);
    return FLPS_OK;
}

/* Append the candidates a SIMD step found: bit j of bits (nonzero) set
 * means a[i + j] is at or above the threshold. Returns the new count; the
 * caller has checked there is room for a whole step. */
/* Inlined also without optimisation: the AVX2 scans call it with the
 * upper YMM state in use, and a call there would run baseline code in
 * it. */
__attribute__((always_inline)) static inline size_t
topk_take_bits(const float *a, size_t i, uint32_t bits, uint32_t *cand,
               uint32_t *ckey, size_t c)
{
    do {
        unsigned j = (unsigned)__builtin_ctz(bits);
        cand[c] = (uint32_t)(i + j);
        ckey[c] = topk_key_at(a + i + j);
        c++;
        bits &= bits - 1;
    } while (bits != 0);
    return c;
}

/* Append to cand/ckey every i in [0, n) with key(a[i]) >= thr, ascending.
 * Returns how many, or SIZE_MAX when the buffers (cap entries) were about
 * to overflow: the threshold was too low. */
static size_t topk_scan_generic(const float *a, size_t n, uint32_t thr,
                                uint32_t *cand, uint32_t *ckey, size_t cap)
{
    size_t c = 0, i = 0;

#if defined(__SSE2__)
    /* Keys are below 2^31, so signed 32-bit compares order them. 16
     * compares fold into one 16-bit mask; with ~1% candidates most steps
     * end at the mask test. */
    const __m128i vmask = _mm_set1_epi32((int32_t)TOPK_KEY_MASK);
    const __m128i vthr = _mm_set1_epi32((int32_t)thr - 1);

    for (; i + 16 <= n; i += 16) {
        const __m128i *v = (const __m128i *)(const void *)(a + i);
        __m128i x0 = _mm_and_si128(_mm_loadu_si128(v), vmask);
        __m128i x1 = _mm_and_si128(_mm_loadu_si128(v + 1), vmask);
        __m128i x2 = _mm_and_si128(_mm_loadu_si128(v + 2), vmask);
        __m128i x3 = _mm_and_si128(_mm_loadu_si128(v + 3), vmask);
        __m128i m01 = _mm_packs_epi32(_mm_cmpgt_epi32(x0, vthr),
                                      _mm_cmpgt_epi32(x1, vthr));
        __m128i m23 = _mm_packs_epi32(_mm_cmpgt_epi32(x2, vthr),
                                      _mm_cmpgt_epi32(x3, vthr));
        unsigned bits = (unsigned)_mm_movemask_epi8(_mm_packs_epi16(m01, m23));

        if (bits == 0)
            continue;
        if (cap - c < 16)
            return SIZE_MAX;
        c = topk_take_bits(a, i, bits, cand, ckey, c);
    }
#endif
    for (; i < n; i++) {
        uint32_t key = topk_key_at(a + i);
        if (key >= thr) {
            if (c == cap)
                return SIZE_MAX;
            cand[c] = (uint32_t)i;
            ckey[c] = key;
            c++;
        }
    }
    return c;
}

#if defined(TOPK_HAVE_AVX2)
/* The whole blocks of topk_scan_generic with 32 elements per step, for
 * CPUs with AVX2 (chosen at run time: the library is built for baseline
 * x86-64). About 10% faster at 0.1% density, where the pass runs at memory
 * bandwidth. Writes how many elements it examined to *done; the caller
 * scans the rest. Every return clears the upper halves of the YMM
 * registers explicitly (GCC 12 left them dirty on some paths, and every
 * later SSE instruction then ran 1.6-3.7x slower); the SSE tail runs in
 * the caller, outside any AVX function. */
__attribute__((target("avx2"))) static size_t
topk_scan_avx2(const float *a, size_t n, uint32_t thr, uint32_t *cand,
               uint32_t *ckey, size_t cap, size_t *done)
{
    const __m256i vmask = _mm256_set1_epi32((int32_t)TOPK_KEY_MASK);
    const __m256i vthr = _mm256_set1_epi32((int32_t)thr - 1);
    /* The packs below interleave the 128-bit lanes; this puts the four
     * 32-bit groups of mask bytes back into element order. */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t c = 0, i = 0;

    for (; i + TOPK_BLOCK <= n; i += TOPK_BLOCK) {
        const __m256i *v = (const __m256i *)(const void *)(a + i);
        __m256i x0 = _mm256_and_si256(_mm256_loadu_si256(v), vmask);
        __m256i x1 = _mm256_and_si256(_mm256_loadu_si256(v + 1), vmask);
        __m256i x2 = _mm256_and_si256(_mm256_loadu_si256(v + 2), vmask);
        __m256i x3 = _mm256_and_si256(_mm256_loadu_si256(v + 3), vmask);
        __m256i m01 = _mm256_packs_epi32(_mm256_cmpgt_epi32(x0, vthr),
                                         _mm256_cmpgt_epi32(x1, vthr));
        __m256i m23 = _mm256_packs_epi32(_mm256_cmpgt_epi32(x2, vthr),
                                         _mm256_cmpgt_epi32(x3, vthr));
        __m256i m = _mm256_packs_epi16(m01, m23);
        uint32_t bits;

        if (_mm256_testz_si256(m, m))
            continue;
        if (cap - c < TOPK_BLOCK) {
            _mm256_zeroupper();
            return SIZE_MAX;
        }
        m = _mm256_permutevar8x32_epi32(m, order);
        bits = (uint32_t)_mm256_movemask_epi8(m);
        c = topk_take_bits(a, i, bits, cand, ckey, c);
    }
    *done = i;
    _mm256_zeroupper();
    return c;
}
#endif

static size_t topk_scan(const float *a, size_t n, uint32_t thr, uint32_t *cand,
                        uint32_t *ckey, size_t cap)
{
#if defined(TOPK_HAVE_AVX2)
    if (__builtin_cpu_supports("avx2")) {
        size_t i = 0, rest;
        size_t c = topk_scan_avx2(a, n, thr, cand, ckey, cap, &i);

        if (c == SIZE_MAX)
            return SIZE_MAX;
        rest =
            topk_scan_generic(a + i, n - i, thr, cand + c, ckey + c, cap - c);
        if (rest == SIZE_MAX)
            return SIZE_MAX;
        for (size_t j = c; j < c + rest; j++)
            cand[j] += (uint32_t)i;
        return c + rest;
    }
#endif
    return topk_scan_generic(a, n, thr, cand, ckey, cap);
}

/* One element of a pending update, made; returns the new a[i]. */
static inline float topk_fuse_step(topk_fuse *f, size_t i)
{
    float v;

    if (f->u == NULL) {
        f->a[i] = f->a[i] + f->g[i];
        return f->a[i];
    }
    v = f->m * f->u[i] + f->g[i];
    f->u[i] = v;
    f->a[i] = f->a[i] + v;
    return f->a[i];
}

/* topk_scan_generic over [i, n) of a pending update of f, making the
 * update as it goes: the same steps, so the same candidates and the same
 * overflow as the scan of the updated array would give. Appends to cand
 * and ckey from c on and returns the new count; where the scan would stop
 * on overflow it sets *full and carries on with the update alone. */
static size_t topk_fused_generic(topk_fuse *f, size_t i, size_t n, uint32_t thr,
                                 uint32_t *cand, uint32_t *ckey, size_t cap,
                                 size_t c, int *full)
{
#if defined(__SSE2__)
    const __m128i vmask = _mm_set1_epi32((int32_t)TOPK_KEY_MASK);
    const __m128i vthr = _mm_set1_epi32((int32_t)thr - 1);
    const __m128 vm = _mm_set1_ps(f->m);
    float *a = f->a, *u = f->u;
    const float *g = f->g;

    for (; i + 16 <= n; i += 16) {
        __m128i x[4], m01, m23;
        unsigned bits;

        for (int q = 0; q < 4; q++) {
            __m128 gv = _mm_loadu_ps(g + i + 4 * q);
            __m128 av = _mm_loadu_ps(a + i + 4 * q);
            if (u != NULL) {
                gv =
                    _mm_add_ps(_mm_mul_ps(vm, _mm_loadu_ps(u + i + 4 * q)), gv);
                _mm_storeu_ps(u + i + 4 * q, gv);
            }
            av = _mm_add_ps(av, gv);
            _mm_storeu_ps(a + i + 4 * q, av);
            x[q] = _mm_and_si128(_mm_castps_si128(av), vmask);
        }
        m01 = _mm_packs_epi32(_mm_cmpgt_epi32(x[0], vthr),
                              _mm_cmpgt_epi32(x[1], vthr));
        m23 = _mm_packs_epi32(_mm_cmpgt_epi32(x[2], vthr),
                              _mm_cmpgt_epi32(x[3], vthr));
        bits = (unsigned)_mm_movemask_epi8(_mm_packs_epi16(m01, m23));
        if (bits == 0 || *full)
            continue;
        if (cap - c < 16) {
            *full = 1;
            continue;
        }
        c = topk_take_bits(a, i, bits, cand, ckey, c);
    }
#endif
    for (; i < n; i++) {
        uint32_t key = topk_key_of(topk_fuse_step(f, i));
        if (key < thr || *full)
            continue;
        if (c == cap) {
            *full = 1;
            continue;
        }
        cand[c] = (uint32_t)i;
        ckey[c] = key;
        c++;
    }
    return c;
}

#if defined(TOPK_HAVE_AVX2)
/* The whole blocks of topk_fused_generic, 32 elements per step as in
 * topk_scan_avx2 (so the overflow happens where that scan's would). Writes
 * how far it got to *done. No FMA: the multiply and the add round
 * separately, as in the plain loop. */
__attribute__((target("avx2"))) static size_t
topk_fused_avx2(topk_fuse *f, size_t n, uint32_t thr, uint32_t *cand,
                uint32_t *ckey, size_t cap, int *full, size_t *done)
{
    const __m256i vmask = _mm256_set1_epi32((int32_t)TOPK_KEY_MASK);
    const __m256i vthr = _mm256_set1_epi32((int32_t)thr - 1);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256 vm = _mm256_set1_ps(f->m);
    float *a = f->a, *u = f->u;
    const float *g = f->g;
    size_t c = 0, i = 0;

    for (; i + TOPK_BLOCK <= n; i += TOPK_BLOCK) {
        __m256i x[4], m01, m23, m;
        uint32_t bits;

        for (int q = 0; q < 4; q++) {
            __m256 gv = _mm256_loadu_ps(g + i + 8 * q);
            __m256 av = _mm256_loadu_ps(a + i + 8 * q);
            if (u != NULL) {
                gv = _mm256_add_ps(
                    _mm256_mul_ps(vm, _mm256_loadu_ps(u + i + 8 * q)), gv);
                _mm256_storeu_ps(u + i + 8 * q, gv);
            }
            av = _mm256_add_ps(av, gv);
            _mm256_storeu_ps(a + i + 8 * q, av);
            x[q] = _mm256_and_si256(_mm256_castps_si256(av), vmask);
        }
        m01 = _mm256_packs_epi32(_mm256_cmpgt_epi32(x[0], vthr),
                                 _mm256_cmpgt_epi32(x[1], vthr));
        m23 = _mm256_packs_epi32(_mm256_cmpgt_epi32(x[2], vthr),
                                 _mm256_cmpgt_epi32(x[3], vthr));
        m = _mm256_packs_epi16(m01, m23);
        if (_mm256_testz_si256(m, m) || *full)
            continue;
        if (cap - c < TOPK_BLOCK) {
            *full = 1;
            continue;
        }
        m = _mm256_permutevar8x32_epi32(m, order);
        bits = (uint32_t)_mm256_movemask_epi8(m);
        c = topk_take_bits(a, i, bits, cand, ckey, c);
    }
    *done = i;
    _mm256_zeroupper();
    return c;
}
#endif

/* topk_scan of the array a pending update of f gives, making the update
 * over all of a[0..n) (also when the candidates overflow). */
static size_t topk_scan_fused(topk_fuse *f, size_t n, uint32_t thr,
                              uint32_t *cand, uint32_t *ckey, size_t cap)
{
    size_t c = 0, i = 0;
    int full = 0;

#if defined(TOPK_HAVE_AVX2)
    if (__builtin_cpu_supports("avx2"))
        c = topk_fused_avx2(f, n, thr, cand, ckey, cap, &full, &i);
#endif
    c = topk_fused_generic(f, i, n, thr, cand, ckey, cap, c, &full);
    f->pending = 0;
    return full ? SIZE_MAX : c;
}

/* A filtering pass over a, or the fused one while f's update is pending. */
static size_t topk_scan_src(topk_ctx *ctx, const float *a, size_t n,
                            uint32_t thr, size_t cap, topk_fuse *f)
{
    if (f != NULL && f->pending)
        return topk_scan_fused(f, n, thr, ctx->cand, ctx->ckey, cap);
    return topk_scan(a, n, thr, ctx->cand, ctx->ckey, cap);
}

/* Fill out[0..s) with keys of a: runs of TOPK_SAMPLE_RUN consecutive
 * elements at seeded random positions, one run in each of s / RUN equal
 * strata. Spread over the whole array (gradients vary by region) yet
 * immune to periodic structure that a fixed stride could alias with; and a
 * run costs one cache miss where single elements would cost one each,
 * which made the sample as slow as the filtering pass itself. */
static uint64_t topk_mix(uint64_t z)
{
    /* splitmix64's output function: a counter-based generator, so the
     * position of run j is a pure function of (seed, j). */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const float *topk_run_at(const float *a, uint64_t seed, size_t j,
                                uint64_t stride, size_t run)
{
    uint64_t z = topk_mix(seed + (j + 1) * 0x9e3779b97f4a7c15ull);
    size_t pos = j * stride + (((z >> 32) * (stride - run + 1)) >> 32);
    size_t skew = ((uintptr_t)(a + pos) & 63) / sizeof(*a);

    /* Start the run on a cache line: one miss instead of two. */
    if (run > 1 && skew <= pos)
        pos -= skew;
    return a + pos;
}

static void topk_sample(const float *a, size_t n, size_t s, uint64_t seed,
                        uint32_t *out, const topk_fuse *f)
{
    /* Runs are far apart, so each is a cache miss; prefetching a few runs
     * ahead keeps several misses in flight. */
    enum { AHEAD = 8 };
    size_t run = TOPK_SAMPLE_RUN, nruns;
    uint64_t stride;

    if (s % run != 0 || n / (s / run) < 2 * run)
        run = 1;
    nruns = s / run;
    stride = n / nruns;
    for (size_t j = 0; j < nruns; j++) {
        const float *p = topk_run_at(a, seed, j, stride, run);
        if (j + AHEAD < nruns) {
            const float *q = topk_run_at(a, seed, j + AHEAD, stride, run);
            __builtin_prefetch(q);
            if (f != NULL && f->pending) {
                __builtin_prefetch(f->g + (q - a));
                if (f->u != NULL)
                    __builtin_prefetch(f->u + (q - a));
            }
        }
        if (f != NULL && f->pending) {
            size_t at = (size_t)(p - a);
            for (size_t e = 0; e < run; e++)
                out[j * run + e] = topk_key_of(topk_fuse_value(f, at + e));
        } else {
            for (size_t e = 0; e < run; e++)
                out[j * run + e] = topk_key_at(p + e);
        }
    }
}

static flps_err topk_ctx_reserve(topk_ctx *ctx, size_t s, size_t cap)
{
    if (ctx->samp_cap < s) {
        uint32_t *p = flps_malloc(s * sizeof(*p));
        if (p == NULL)
            return FLPS_ENOMEM;
        flps_free(ctx->samp);
        ctx->samp = p;
        ctx->samp_cap = s;
    }
    if (ctx->cand_cap < cap) {
        uint32_t *c = flps_malloc(cap * sizeof(*c));
        uint32_t *k = flps_malloc(cap * sizeof(*k));
        if (c == NULL || k == NULL) {
            flps_free(c);
            flps_free(k);
            return FLPS_ENOMEM;
        }
        flps_free(ctx->cand);
        flps_free(ctx->ckey);
        ctx->cand = c;
        ctx->ckey = k;
        ctx->cand_cap = cap;
    }
    return FLPS_OK;
}

/* A key at most the sample's rank-th largest (1 <= rank <= s) and within
 * 2^9 of it: see topk_radix_band. */
static flps_err topk_sample_threshold(const topk_ctx *ctx, size_t s,
                                      size_t rank, uint32_t *thr)
{
    topk_band bd;
    flps_err rc = topk_radix_band(ctx->samp, s, rank, 2, &bd);

    if (rc != FLPS_OK)
        return rc;
    *thr = bd.lo;
    return FLPS_OK;
}

/* Exact top-k of the m >= k candidates in ctx into idx. */
static flps_err topk_pick(const topk_ctx *ctx, size_t m, size_t k,
                          uint32_t *idx)
{
    topk_band bd;
    flps_err rc = topk_radix_band(ctx->ckey, m, k, 3, &bd);

    if (rc != FLPS_OK)
        return rc;
    topk_emit_cand(ctx->cand, ctx->ckey, m, &bd, idx);
    return FLPS_OK;
}

static int topk_uses_sample(size_t n, size_t k)
{
    return n >= TOPK_SAMPLE_MIN_N && k <= n / TOPK_DENSE_DIV;
}

static flps_err topk_trivial(const float *a, size_t n, size_t k, uint32_t *idx,
                             unsigned *passes, topk_fuse *f)
{
    topk_fuse_apply(f, n);
    *passes += 1;
    if (!topk_all_finite(a, n))
        return FLPS_ENONFINITE;
    if (k == n)
        for (size_t i = 0; i < n; i++)
            idx[i] = (uint32_t)i;
    return FLPS_OK;
}

/* Exact selection; arguments already checked, 0 < k < n. */
static flps_err topk_exact(topk_ctx *ctx, const float *a, size_t n, size_t k,
                           uint32_t *idx, unsigned *passes, topk_fuse *f)
{
    size_t s = n / TOPK_SAMPLE_DIV / TOPK_SAMPLE_RUN * TOPK_SAMPLE_RUN;
    size_t cap = 2 * k + TOPK_CAND_SLACK;
    size_t lo_rank = 0, hi_rank = s + 1, rank;
    double r0 = (double)k * (double)s / (double)n;
    flps_err rc;

    if (!topk_uses_sample(n, k))
        return topk_full(a, n, k, idx, passes, f);
    rc = topk_ctx_reserve(ctx, s, cap);
    if (rc != FLPS_OK)
        return rc;
    topk_sample(a, n, s, 0x243f6a8885a308d3ull, ctx->samp, f);

    /* Aim three standard deviations of the sample count below the k-th
     * largest, so that one pass finds at least k candidates almost always
     * and about k(1 + 3/sqrt(r0)) of them. */
    rank = (size_t)ceil(r0 + 3.0 * sqrt(r0) + 1.0);
    if (rank > s)
        rank = s;
    for (int scan = 0; scan < TOPK_MAX_SCANS; scan++) {
        uint32_t thr;
        size_t c;

        if (rank <= lo_rank || rank >= hi_rank)
            break;
        rc = topk_sample_threshold(ctx, s, rank, &thr);
        if (rc != FLPS_OK)
            return rc;
        if (thr == 0)
            break; /* everything would be a candidate */
        c = topk_scan_src(ctx, a, n, thr, cap, f);
        *passes += 1;
        if (c == SIZE_MAX) {
            hi_rank = rank;
            rank = lo_rank + (rank - lo_rank) / 2;
        } else if (c < k) {
            lo_rank = rank;
            rank = hi_rank <= s ? rank + (hi_rank - rank) / 2 : 2 * rank + 8;
            if (rank > s)
                rank = s;
        } else {
            return topk_pick(ctx, c, k, idx);
        }
    }
    return topk_full(a, n, k, idx, passes, f);
}

static flps_err topk_check_args(const float *a, size_t n, size_t k,
                                const uint32_t *idx)
{
    if (k > n || (uint64_t)n >= (1ull << 32))
        return FLPS_EINVAL;
    if (n > 0 && (a == NULL || idx == NULL))
        return FLPS_EINVAL;
    return FLPS_OK;
}

flps_err topk_ctx_create(topk_ctx **out)
{
    topk_ctx *ctx;

    if (out == NULL)
        return FLPS_EINVAL;
    ctx = flps_calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return FLPS_ENOMEM;
    *out = ctx;
    return FLPS_OK;
}

void topk_ctx_destroy(topk_ctx *ctx)
{
    if (ctx == NULL)
        return;
    flps_free(ctx->samp);
    flps_free(ctx->cand);
    flps_free(ctx->ckey);
    flps_free(ctx);
}

flps_err topk_ctx_select(topk_ctx *ctx, const float *a, size_t n, size_t k,
                         uint32_t *idx)
{
    unsigned passes = 0;
    flps_err rc = topk_check_args(a, n, k, idx);

    if (rc != FLPS_OK)
        return rc;
    if (ctx == NULL)
        return FLPS_EINVAL;
    if (k == 0 || k == n)
        return topk_trivial(a, n, k, idx, &passes, NULL);
    return topk_exact(ctx, a, n, k, idx, &passes, NULL);
}

flps_err topk_select(const float *a, size_t n, size_t k, uint32_t *idx)
{
    topk_ctx ctx = {0};
    flps_err rc = topk_ctx_select(&ctx, a, n, k, idx);

    flps_free(ctx.samp);
    flps_free(ctx.cand);
    flps_free(ctx.ckey);
    return rc;
}

/* The sample size of the approximate selection, see topk_approx. */
static size_t topk_approx_sample(size_t n, size_t k)
{
    size_t s = n / TOPK_SAMPLE_DIV;

    /* A rank of TOPK_APPROX_MIN_RANK in the sample needs a sample of
     * TOPK_APPROX_MIN_RANK / density; when that is a large part of the
     * array, an exact selection costs no more. */
    if (s < TOPK_APPROX_MIN_RANK * (n / k))
        s = TOPK_APPROX_MIN_RANK * (n / k);
    return s / TOPK_SAMPLE_RUN * TOPK_SAMPLE_RUN;
}

/* topk_ctx_select_approx with arguments checked, over a or the array a
 * pending update of f gives. */
static flps_err topk_approx(topk_ctx *ctx, const float *a, size_t n, size_t k,
                            uint64_t seed, uint32_t *idx, size_t *count,
                            unsigned *passes, topk_fuse *f)
{
    size_t lo = k - k / 5, hi = k + k / 5;
    size_t s, cap, rank, c;
    unsigned np = 0;
    uint32_t thr;
    flps_err rc;

    if (k == 0 || k == n) {
        rc = topk_trivial(a, n, k, idx, &np, f);
        goto done;
    }
    s = topk_approx_sample(n, k);
    if (lo == hi || !topk_uses_sample(n, k) || s > n / 4) {
        rc = topk_exact(ctx, a, n, k, idx, &np, f);
        goto done;
    }
    cap = 2 * k + TOPK_CAND_SLACK;
    rc = topk_ctx_reserve(ctx, s, cap);
    if (rc != FLPS_OK)
        return rc;
    topk_sample(a, n, s, seed, ctx->samp, f);
    rank = (size_t)llround((double)k * (double)s / (double)n);
    if (rank < 1)
        rank = 1;
    rc = topk_sample_threshold(ctx, s, rank, &thr);
    if (rc != FLPS_OK)
        return rc;
    c = topk_scan_src(ctx, a, n, thr, cap, f);
    np = 1;
    if (c == SIZE_MAX || c < lo) {
        rc = topk_exact(ctx, a, n, k, idx, &np, f);
        goto done;
    }
    if (c > hi) {
        rc = topk_pick(ctx, c, k, idx);
        c = k;
    } else {
        /* Every NaN or Inf element is a candidate; see the top comment. */
        for (size_t j = 0; j < c; j++)
            if (ctx->ckey[j] >= TOPK_KEY_INF)
                return FLPS_ENONFINITE;
        memcpy(idx, ctx->cand, c * sizeof(*idx));
    }
    if (rc != FLPS_OK)
        return rc;
    *count = c;
    if (passes != NULL)
        *passes = np;
    return FLPS_OK;

done:
    if (rc != FLPS_OK)
        return rc;
    *count = k;
    if (passes != NULL)
        *passes = np;
    return FLPS_OK;
}

flps_err topk_ctx_select_approx(topk_ctx *ctx, const float *a, size_t n,
                                size_t k, uint64_t seed, uint32_t *idx,
                                size_t *count, unsigned *passes)
{
    flps_err rc = topk_check_args(a, n, k, idx);

    if (rc != FLPS_OK)
        return rc;
    if (ctx == NULL || count == NULL)
        return FLPS_EINVAL;
    return topk_approx(ctx, a, n, k, seed, idx, count, passes, NULL);
}

flps_err topk_ctx_select_fused(topk_ctx *ctx, float *a, float *u,
                               const float *g, float m, size_t n, size_t k,
                               int approx, uint64_t seed, uint32_t *idx,
                               size_t *count)
{
    topk_fuse f = {a, u, g, m, 1};
    unsigned passes = 0;
    flps_err rc = topk_check_args(a, n, k, idx);

    if (rc != FLPS_OK)
        return rc;
    if (ctx == NULL || count == NULL || (n > 0 && g == NULL))
        return FLPS_EINVAL;
    if (topk_uses_sample(n, k) && k > 0) {
        /* Every buffer the selection may need, before a moves: on
         * FLPS_ENOMEM nothing has changed. */
        size_t se = n / TOPK_SAMPLE_DIV / TOPK_SAMPLE_RUN * TOPK_SAMPLE_RUN;
        size_t sa = approx ? topk_approx_sample(n, k) : 0;
        rc = topk_ctx_reserve(ctx, se > sa ? se : sa, 2 * k + TOPK_CAND_SLACK);
        if (rc != FLPS_OK)
            return rc;
    }
    if (approx) {
        rc = topk_approx(ctx, a, n, k, seed, idx, count, &passes, &f);
    } else {
        rc = k == 0 || k == n ? topk_trivial(a, n, k, idx, &passes, &f)
                              : topk_exact(ctx, a, n, k, idx, &passes, &f);
        if (rc == FLPS_OK)
            *count = k;
    }
    topk_fuse_apply(&f, n); /* when the selection failed before making it */
    return rc;
}
