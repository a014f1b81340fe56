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

/* The key of the 32-bit word at p (a float or an already computed key).
 * memcpy keeps the load free of aliasing questions; it compiles to a
 * plain load. */
static inline uint32_t topk_key_at(const void *p)
{
    uint32_t u;

    memcpy(&u, p, sizeof(u));
    return u & TOPK_KEY_MASK;
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
                          unsigned *passes)
{
    topk_band bd;
    flps_err rc = topk_radix_band(a, n, k, 3, &bd);

    *passes += 4;
    if (rc != FLPS_OK)
        return rc;
    topk_emit_dense(a, n, &bd, idx);
    return FLPS_OK;
}

/* Append the candidates a SIMD step found: bit j of bits (nonzero) set
 * means a[i + j] is at or above the threshold. Returns the new count; the
 * caller has checked there is room for a whole step. */
static inline size_t topk_take_bits(const float *a, size_t i, uint32_t bits,
                                    uint32_t *cand, uint32_t *ckey, size_t c)
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
/* topk_scan_generic with 32 elements per step, for CPUs with AVX2 (chosen
 * at run time: the library is built for baseline x86-64). About 10%
 * faster at 0.1% density, where the pass runs at memory bandwidth. */
__attribute__((target("avx2"))) static size_t
topk_scan_avx2(const float *a, size_t n, uint32_t thr, uint32_t *cand,
               uint32_t *ckey, size_t cap)
{
    const __m256i vmask = _mm256_set1_epi32((int32_t)TOPK_KEY_MASK);
    const __m256i vthr = _mm256_set1_epi32((int32_t)thr - 1);
    /* The packs below interleave the 128-bit lanes; this puts the four
     * 32-bit groups of mask bytes back into element order. */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t c = 0, i = 0, rest;

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
        if (cap - c < TOPK_BLOCK)
            return SIZE_MAX;
        m = _mm256_permutevar8x32_epi32(m, order);
        bits = (uint32_t)_mm256_movemask_epi8(m);
        c = topk_take_bits(a, i, bits, cand, ckey, c);
    }
    rest = topk_scan_generic(a + i, n - i, thr, cand + c, ckey + c, cap - c);
    if (rest == SIZE_MAX)
        return SIZE_MAX;
    for (size_t j = c; j < c + rest; j++)
        cand[j] += (uint32_t)i;
    return c + rest;
}
#endif

static size_t topk_scan(const float *a, size_t n, uint32_t thr, uint32_t *cand,
                        uint32_t *ckey, size_t cap)
{
#if defined(TOPK_HAVE_AVX2)
    if (__builtin_cpu_supports("avx2"))
        return topk_scan_avx2(a, n, thr, cand, ckey, cap);
#endif
    return topk_scan_generic(a, n, thr, cand, ckey, cap);
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
                        uint32_t *out)
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
        if (j + AHEAD < nruns)
            __builtin_prefetch(topk_run_at(a, seed, j + AHEAD, stride, run));
        for (size_t e = 0; e < run; e++)
            out[j * run + e] = topk_key_at(p + e);
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
                             unsigned *passes)
{
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
                           uint32_t *idx, unsigned *passes)
{
    size_t s = n / TOPK_SAMPLE_DIV / TOPK_SAMPLE_RUN * TOPK_SAMPLE_RUN;
    size_t cap = 2 * k + TOPK_CAND_SLACK;
    size_t lo_rank = 0, hi_rank = s + 1, rank;
    double r0 = (double)k * (double)s / (double)n;
    flps_err rc;

    if (!topk_uses_sample(n, k))
        return topk_full(a, n, k, idx, passes);
    rc = topk_ctx_reserve(ctx, s, cap);
    if (rc != FLPS_OK)
        return rc;
    topk_sample(a, n, s, 0x243f6a8885a308d3ull, ctx->samp);

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
        c = topk_scan(a, n, thr, ctx->cand, ctx->ckey, cap);
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
    return topk_full(a, n, k, idx, passes);
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
        return topk_trivial(a, n, k, idx, &passes);
    return topk_exact(ctx, a, n, k, idx, &passes);
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

flps_err topk_ctx_select_approx(topk_ctx *ctx, const float *a, size_t n,
                                size_t k, uint64_t seed, uint32_t *idx,
                                size_t *count, unsigned *passes)
{
    size_t lo = k - k / 5, hi = k + k / 5;
    size_t s, cap, rank, c;
    unsigned np = 0;
    uint32_t thr;
    flps_err rc = topk_check_args(a, n, k, idx);

    if (rc != FLPS_OK)
        return rc;
    if (ctx == NULL || count == NULL)
        return FLPS_EINVAL;
    if (k == 0 || k == n) {
        rc = topk_trivial(a, n, k, idx, &np);
        goto done;
    }
    /* A rank of TOPK_APPROX_MIN_RANK in the sample needs a sample of
     * TOPK_APPROX_MIN_RANK / density; when that is a large part of the
     * array, an exact selection costs no more. */
    s = n / TOPK_SAMPLE_DIV;
    if (s < TOPK_APPROX_MIN_RANK * (n / k))
        s = TOPK_APPROX_MIN_RANK * (n / k);
    s = s / TOPK_SAMPLE_RUN * TOPK_SAMPLE_RUN;
    if (lo == hi || !topk_uses_sample(n, k) || s > n / 4) {
        rc = topk_exact(ctx, a, n, k, idx, &np);
        goto done;
    }
    cap = 2 * k + TOPK_CAND_SLACK;
    rc = topk_ctx_reserve(ctx, s, cap);
    if (rc != FLPS_OK)
        return rc;
    topk_sample(a, n, s, seed, ctx->samp);
    rank = (size_t)llround((double)k * (double)s / (double)n);
    if (rank < 1)
        rank = 1;
    rc = topk_sample_threshold(ctx, s, rank, &thr);
    if (rc != FLPS_OK)
        return rc;
    c = topk_scan(a, n, thr, ctx->cand, ctx->ckey, cap);
    np = 1;
    if (c == SIZE_MAX || c < lo) {
        rc = topk_exact(ctx, a, n, k, idx, &np);
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
