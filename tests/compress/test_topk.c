/* Tests for compress/topk.c: exact top-k against a stable-sort reference. */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "compress/topk.h"
#include "tests/compress/avx_asm.h"
#include "tests/compress/avx_state.h"

typedef struct {
    float mag;
    uint32_t idx;
} ref_pair;

static int ref_cmp_desc(const void *pa, const void *pb)
{
    const ref_pair *a = pa, *b = pb;

    if (a->mag != b->mag)
        return a->mag > b->mag ? -1 : 1;
    return a->idx < b->idx ? -1 : (a->idx > b->idx);
}

static int ref_cmp_u32(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    return a < b ? -1 : (a > b);
}

/* The contract, literally: the first k of a stable sort by descending
 * |a[i]|, then in ascending index order. */
static void ref_topk(const float *a, size_t n, size_t k, uint32_t *idx)
{
    ref_pair *p = malloc((n ? n : 1) * sizeof(*p));

    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) {
        p[i].mag = fabsf(a[i]);
        p[i].idx = (uint32_t)i;
    }
    qsort(p, n, sizeof(*p), ref_cmp_desc);
    for (size_t i = 0; i < k; i++)
        idx[i] = p[i].idx;
    qsort(idx, k, sizeof(*idx), ref_cmp_u32);
    free(p);
}

static uint64_t rng_state = 0x853c49e6748fea9bull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void)
{
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static float rng_gauss(void)
{
    double u1 = 1.0 - rng_unit(), u2 = rng_unit();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Select with both entry points and compare each with the reference. */
static void check_case(const float *a, size_t n, size_t k)
{
    uint32_t *want = malloc((k ? k : 1) * sizeof(*want));
    uint32_t *got = malloc((k ? k : 1) * sizeof(*got));
    topk_ctx *ctx = NULL;

    cr_assert_not_null(want);
    cr_assert_not_null(got);
    ref_topk(a, n, k, want);
    cr_assert_eq(topk_select(a, n, k, got), FLPS_OK, "n=%zu k=%zu", n, k);
    for (size_t i = 0; i < k; i++)
        cr_assert_eq(got[i], want[i], "n=%zu k=%zu: idx[%zu] is %u, want %u", n,
                     k, i, got[i], want[i]);
    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    memset(got, 0xff, (k ? k : 1) * sizeof(*got));
    cr_assert_eq(topk_ctx_select(ctx, a, n, k, got), FLPS_OK);
    cr_assert_arr_eq(got, want, k * sizeof(*got), "ctx n=%zu k=%zu", n, k);
    topk_ctx_destroy(ctx);
    free(want);
    free(got);
}

static float *gauss_array(size_t n)
{
    float *a = malloc((n ? n : 1) * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = rng_gauss();
    return a;
}

Test(topk, matches_the_stable_sort_reference_on_random_inputs)
{
    static const size_t sizes[] = {2,    3,    7,     16,    31,    33,    100,
                                   1000, 4097, 65535, 65536, 70001, 200000};

    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        float *a = gauss_array(n);
        size_t ks[] = {1,     2,         n / 1000, n / 100, n / 10,
                       n / 8, n / 8 + 1, n / 2,    n - 1};

        for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++)
            if (ks[j] <= n)
                check_case(a, n, ks[j]);
        free(a);
    }
}

Test(topk, matches_the_reference_on_values_spread_over_many_octaves)
{
    size_t n = 300000;
    float *a = malloc(n * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = rng_gauss() * ldexpf(1.0f, (int)(rng_next() % 200) - 140);
    check_case(a, n, 300);
    check_case(a, n, 3000);
    check_case(a, n, 30000);
    free(a);
}

Test(topk, matches_the_reference_when_values_come_from_a_small_set)
{
    static const float set[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f};
    static const size_t sizes[] = {10, 1000, 70000, 300000};

    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        float *a = malloc(n * sizeof(*a));

        cr_assert_not_null(a);
        for (size_t i = 0; i < n; i++)
            a[i] = set[rng_next() % (sizeof(set) / sizeof(set[0]))];
        check_case(a, n, 1);
        check_case(a, n, n / 1000 + 1);
        check_case(a, n, n / 100);
        check_case(a, n, n / 3);
        check_case(a, n, n - 1);
        free(a);
    }
}

Test(topk, takes_the_lowest_indices_when_all_values_are_equal)
{
    size_t n = 100000;
    float *a = malloc(n * sizeof(*a));
    uint32_t *idx = malloc(n * sizeof(*idx));

    cr_assert_not_null(a);
    cr_assert_not_null(idx);
    for (size_t i = 0; i < n; i++)
        a[i] = (i % 2) ? -0.25f : 0.25f;
    cr_assert_eq(topk_select(a, n, 777, idx), FLPS_OK);
    for (size_t i = 0; i < 777; i++)
        cr_assert_eq(idx[i], i);
    free(a);
    free(idx);
}

Test(topk, takes_every_nonzero_then_the_first_zeros_of_a_sparse_array)
{
    size_t n = 500000, nnz = 0;
    float *a = calloc(n, sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i += 997, nnz++)
        a[i] = (float)(i % 13) - 6.5f;
    check_case(a, n, nnz / 2);
    check_case(a, n, nnz + 1000);
    check_case(a, n, n / 20);
    free(a);
}

Test(topk, finds_large_values_that_the_sample_misses)
{
    /* Small noise everywhere and the whole top-k packed into one short
     * stretch: the sample sees almost none of them, so the first
     * threshold is far too high and must be lowered. */
    size_t n = 1000000;
    float *a = malloc(n * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = rng_gauss() * 1e-3f;
    for (size_t i = 400000; i < 400700; i++)
        a[i] = 10.0f + (float)(i % 7);
    check_case(a, n, 1000);
    check_case(a, n, 600);
    free(a);
}

Test(topk, stays_exact_when_the_sample_sees_only_large_values)
{
    /* The opposite: a sampled region full of large values makes the first
     * threshold far too low; the pass overflows and retries. */
    size_t n = 1000000;
    float *a = malloc(n * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = (i % 2) ? 3.0f + rng_gauss() * 1e-3f : rng_gauss();
    check_case(a, n, 100);
    check_case(a, n, 5000);
    free(a);
}

Test(topk, stays_exact_when_candidates_fill_the_buffer_near_the_end)
{
    /* The candidate buffer holds 2k + 4096 entries. Equal large values at
     * the end of the array, about that many, fill it while the last
     * partial vector step runs; every count must stay in bounds (the
     * sanitizer build checks) and exact. */
    size_t n = 131072 + 17, k = 100, cap = 2 * k + 4096;
    float *a = malloc(n * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t big = cap - 48; big <= cap + 8; big++) {
        for (size_t i = 0; i < n; i++)
            a[i] = i < n - big ? rng_gauss() * 1e-3f : -5.0f;
        check_case(a, n, k);
    }
    free(a);
}

Test(topk, returns_nothing_for_k_zero)
{
    float a[] = {3.0f, -1.0f, 2.0f};
    uint32_t idx[1] = {42};

    cr_assert_eq(topk_select(a, 3, 0, idx), FLPS_OK);
    cr_assert_eq(idx[0], 42, "k = 0 writes nothing");
    cr_assert_eq(topk_select(NULL, 0, 0, NULL), FLPS_OK,
                 "an empty array is fine");
}

Test(topk, returns_every_index_for_k_equal_to_n)
{
    size_t n = 100003;
    float *a = gauss_array(n);
    uint32_t *idx = malloc(n * sizeof(*idx));

    cr_assert_not_null(idx);
    cr_assert_eq(topk_select(a, n, n, idx), FLPS_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(idx[i], i);
    free(a);
    free(idx);
}

Test(topk, handles_a_single_element)
{
    float a[] = {-0.0f};
    uint32_t idx[1] = {42};

    cr_assert_eq(topk_select(a, 1, 1, idx), FLPS_OK);
    cr_assert_eq(idx[0], 0);
    a[0] = -5.0f;
    cr_assert_eq(topk_select(a, 1, 1, idx), FLPS_OK);
    cr_assert_eq(idx[0], 0);
}

Test(topk, orders_denormals_below_normals_and_negative_zero_with_zero)
{
    float a[] = {0.0f,    -0.0f,    1e-45f, -2e-45f, 1e-40f,
                 -1e-39f, 1.2e-38f, -0.0f,  3e-45f,  FLT_MIN};
    size_t n = sizeof(a) / sizeof(a[0]);
    uint32_t idx[10];

    for (size_t k = 0; k <= n; k++)
        check_case(a, n, k);
    cr_assert_eq(topk_select(a, n, 3, idx), FLPS_OK);
    cr_assert_eq(idx[0], 5);
    cr_assert_eq(idx[1], 6);
    cr_assert_eq(idx[2], 9);
    cr_assert_eq(topk_select(a, n, 9, idx), FLPS_OK);
    cr_assert_eq(idx[7], 8, "of the three zeros the last is left out");
    cr_assert_eq(idx[0], 0);
    cr_assert_eq(idx[1], 1);
}

Test(topk, ranks_negative_values_by_magnitude)
{
    float a[] = {-5.0f, 4.0f, -3.0f, 5.0f, -4.5f, 0.1f};
    uint32_t idx[3];

    cr_assert_eq(topk_select(a, 6, 3, idx), FLPS_OK);
    cr_assert_eq(idx[0], 0);
    cr_assert_eq(idx[1], 3);
    cr_assert_eq(idx[2], 4);
}

static void check_rejects(float bad, size_t n, size_t pos, size_t k)
{
    float *a = gauss_array(n);
    uint32_t *idx = malloc((k ? k : 1) * sizeof(*idx));
    topk_ctx *ctx = NULL;
    size_t count = 12345;

    cr_assert_not_null(idx);
    a[pos] = bad;
    cr_assert_eq(topk_select(a, n, k, idx), FLPS_ENONFINITE,
                 "n=%zu pos=%zu k=%zu", n, pos, k);
    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    cr_assert_eq(topk_ctx_select_approx(ctx, a, n, k, 7, idx, &count, NULL),
                 FLPS_ENONFINITE, "approx n=%zu pos=%zu k=%zu", n, pos, k);
    cr_assert_eq(count, 12345, "count is not written on error");
    topk_ctx_destroy(ctx);
    free(a);
    free(idx);
}

Test(topk, rejects_nan_and_infinity_wherever_they_are)
{
    static const size_t sizes[] = {1, 5, 40, 1000, 100000, 1000000};
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};

    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        size_t pos[] = {0, n / 3, (n / 2 + 1) % n, n - 1};
        size_t ks[] = {0, 1, n / 1000, n / 100, n / 2, n};

        for (size_t b = 0; b < 4; b++)
            for (size_t p = 0; p < 4; p++)
                for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++)
                    check_rejects(bad[b], n, pos[p], ks[j]);
    }
}

Test(topk, rejects_k_greater_than_n_and_null_pointers)
{
    float a[] = {1.0f, 2.0f};
    uint32_t idx[3];
    topk_ctx *ctx = NULL;

    cr_assert_eq(topk_select(a, 2, 3, idx), FLPS_EINVAL);
    cr_assert_eq(topk_select(NULL, 2, 1, idx), FLPS_EINVAL);
    cr_assert_eq(topk_select(a, 2, 1, NULL), FLPS_EINVAL);
    cr_assert_eq(topk_ctx_select(NULL, a, 2, 1, idx), FLPS_EINVAL);
    cr_assert_eq(topk_ctx_create(NULL), FLPS_EINVAL);
    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    cr_assert_eq(topk_ctx_select_approx(ctx, a, 2, 1, 0, idx, NULL, NULL),
                 FLPS_EINVAL);
    topk_ctx_destroy(ctx);
    topk_ctx_destroy(NULL);
}

Test(topk, matches_the_reference_around_sample_and_vector_boundaries)
{
    static const size_t sizes[] = {
        15, 16,    17,    31,    32,         33,         63,         64,
        65, 65535, 65536, 65537, 65536 + 31, 65536 + 32, 65536 + 33, 131071};

    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        float *a = gauss_array(n);
        size_t ks[] = {1, n / 8, n / 8 + 1, n / 8 - 1, n / 64, n - 1};

        for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++)
            if (ks[j] >= 1 && ks[j] <= n)
                check_case(a, n, ks[j]);
        free(a);
    }
}

Test(topk, matches_the_reference_on_two_million_elements)
{
    size_t n = 2000000;
    float *a = gauss_array(n);

    check_case(a, n, 2000);
    check_case(a, n, 20000);
    for (size_t i = 0; i < n; i++)
        a[i] = roundf(a[i] * 4.0f) / 4.0f; /* heavy ties */
    check_case(a, n, 2000);
    check_case(a, n, 20000);
    free(a);
}

Test(topk, reuses_one_context_across_sizes)
{
    topk_ctx *ctx = NULL;
    float *a = gauss_array(400000);
    uint32_t *want = malloc(40000 * sizeof(*want));
    uint32_t *got = malloc(40000 * sizeof(*got));
    static const size_t ns[] = {400000, 100, 70000, 400000, 65536};
    static const size_t ks[] = {40000, 3, 70, 400, 8192};

    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    for (size_t t = 0; t < 5; t++) {
        ref_topk(a, ns[t], ks[t], want);
        cr_assert_eq(topk_ctx_select(ctx, a, ns[t], ks[t], got), FLPS_OK);
        cr_assert_arr_eq(got, want, ks[t] * sizeof(*got));
    }
    topk_ctx_destroy(ctx);
    free(a);
    free(want);
    free(got);
}

Test(topk, reports_out_of_memory_and_recovers)
{
    size_t n = 200000, k = 200;
    float *a = gauss_array(n);
    uint32_t *want = malloc(k * sizeof(*want));
    uint32_t *got = malloc(k * sizeof(*got));
    topk_ctx *ctx = NULL;
    flps_err rc = FLPS_ENOMEM;

    ref_topk(a, n, k, want);
    for (unsigned long fail = 1; rc == FLPS_ENOMEM; fail++) {
        flps_alloc_fail_at(fail);
        rc = topk_select(a, n, k, got);
        flps_alloc_fail_at(0);
        cr_assert(rc == FLPS_OK || rc == FLPS_ENOMEM);
        cr_assert_lt(fail, 10);
    }
    cr_assert_arr_eq(got, want, k * sizeof(*got));
    flps_alloc_fail_at(1);
    cr_assert_eq(topk_ctx_create(&ctx), FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    cr_assert_null(ctx, "out-param untouched on error");
    free(a);
    free(want);
    free(got);
}

/* Every chosen |a| is at least every unchosen |a|. */
static void check_threshold_set(const float *a, size_t n, const uint32_t *idx,
                                size_t c)
{
    float minsel = INFINITY, maxrest = 0.0f;
    size_t j = 0;

    for (size_t i = 0; i < n; i++) {
        if (j < c && idx[j] == i) {
            if (j > 0)
                cr_assert_gt(idx[j], idx[j - 1], "ascending");
            minsel = fminf(minsel, fabsf(a[i]));
            j++;
        } else {
            maxrest = fmaxf(maxrest, fabsf(a[i]));
        }
    }
    cr_assert_eq(j, c, "indices in range and ascending");
    if (c > 0 && c < n)
        cr_assert_geq(minsel, maxrest);
}

Test(topk, approximate_selection_stays_within_a_fifth_of_k)
{
    static const size_t ns[] = {1000, 70000, 1000000, 3000000};
    static const double ds[] = {0.001, 0.01, 0.1};
    topk_ctx *ctx = NULL;

    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    for (size_t s = 0; s < 4; s++) {
        float *a = gauss_array(ns[s]);
        for (size_t d = 0; d < 3; d++) {
            size_t k = (size_t)(ds[d] * (double)ns[s]);
            uint32_t *idx = malloc((k + k / 5 + 1) * sizeof(*idx));
            for (uint64_t seed = 1; seed <= 4; seed++) {
                size_t count = 0;
                unsigned passes = 0;
                cr_assert_eq(topk_ctx_select_approx(ctx, a, ns[s], k, seed, idx,
                                                    &count, &passes),
                             FLPS_OK);
                cr_assert_geq(count, k - k / 5, "n=%zu k=%zu", ns[s], k);
                cr_assert_leq(count, k + k / 5, "n=%zu k=%zu", ns[s], k);
                check_threshold_set(a, ns[s], idx, count);
                if (ns[s] >= 1000000)
                    cr_assert_eq(passes, 1,
                                 "one pass: n=%zu k=%zu seed=%d count=%zu",
                                 ns[s], k, (int)seed, count);
            }
            free(idx);
        }
        free(a);
    }
    topk_ctx_destroy(ctx);
}

Test(topk, approximate_selection_is_deterministic_for_a_seed)
{
    size_t n = 1000000, k = 1000, c1 = 0, c2 = 0;
    float *a = gauss_array(n);
    uint32_t *i1 = malloc((k + k / 5) * sizeof(*i1));
    uint32_t *i2 = malloc((k + k / 5) * sizeof(*i2));
    topk_ctx *ctx = NULL;

    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    cr_assert_eq(topk_ctx_select_approx(ctx, a, n, k, 99, i1, &c1, NULL),
                 FLPS_OK);
    cr_assert_eq(topk_ctx_select_approx(ctx, a, n, k, 99, i2, &c2, NULL),
                 FLPS_OK);
    cr_assert_eq(c1, c2);
    cr_assert_arr_eq(i1, i2, c1 * sizeof(*i1));
    topk_ctx_destroy(ctx);
    free(a);
    free(i1);
    free(i2);
}

static void check_approx_on(const float *a, size_t n, size_t k)
{
    size_t count = 0;
    unsigned passes = 0;
    uint32_t *idx = malloc((k + k / 5) * sizeof(*idx));
    topk_ctx *ctx = NULL;

    cr_assert_not_null(idx);
    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    cr_assert_eq(topk_ctx_select_approx(ctx, a, n, k, 3, idx, &count, &passes),
                 FLPS_OK);
    cr_assert_geq(count, k - k / 5);
    cr_assert_leq(count, k + k / 5);
    check_threshold_set(a, n, idx, count);
    topk_ctx_destroy(ctx);
    free(idx);
}

Test(topk, approximate_selection_trims_a_threshold_set_swollen_by_ties)
{
    size_t n = 1000000;
    float *a = malloc(n * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = rng_gauss() * 1e-3f;
    for (size_t i = 0; i < n; i += n / 1500)
        a[i] = 2.0f; /* 1500 equal values where k = 1000 */
    check_approx_on(a, n, 1000);
    free(a);
}

Test(topk, approximate_selection_falls_back_when_the_threshold_set_overflows)
{
    size_t n = 1000000;
    float *a = malloc(n * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = (i % 10 == 0) ? 2.0f : rng_gauss() * 1e-3f;
    for (size_t i = 5; i < n; i += n / 700)
        a[i] = 3.0f; /* 700 above a plateau of 100000 */
    check_approx_on(a, n, 1000);
    free(a);
}

/* ---- the fused error-feedback form ---- */

/* topk_ctx_select_fused against the update loop written out followed by
 * the plain selection: the same a and u bit for bit, the same indices.
 * Both run on the same buffers (restored in between): the sample's runs
 * start on cache lines, so the approximate result depends on where a
 * lies. */
static void check_fused(size_t n, size_t k, float m, int approx)
{
    float *a = gauss_array(n), *u = gauss_array(n), *g = gauss_array(n);
    float *a0 = malloc(n * sizeof(*a0)), *u0 = malloc(n * sizeof(*u0));
    float *a1 = malloc(n * sizeof(*a1)), *u1 = malloc(n * sizeof(*u1));
    uint32_t *want = malloc((k + k / 5 + 1) * sizeof(*want));
    uint32_t *got = malloc((k + k / 5 + 1) * sizeof(*got));
    topk_ctx *c0 = NULL, *c1 = NULL;
    size_t nwant = k, ngot = 0;
    uint64_t seed = 99;

    cr_assert_not_null(a0);
    cr_assert_not_null(u0);
    cr_assert_not_null(a1);
    cr_assert_not_null(u1);
    cr_assert_not_null(want);
    cr_assert_not_null(got);
    memcpy(a0, a, n * sizeof(*a));
    memcpy(u0, u, n * sizeof(*u));
    cr_assert_eq(topk_ctx_create(&c0), FLPS_OK);
    cr_assert_eq(topk_ctx_create(&c1), FLPS_OK);
    cr_assert_eq(topk_ctx_select_fused(c1, a, m > 0.0f ? u : NULL, g, m, n, k,
                                       approx, seed, got, &ngot),
                 FLPS_OK, "n=%zu k=%zu", n, k);
    memcpy(a1, a, n * sizeof(*a));
    memcpy(u1, u, n * sizeof(*u));
    memcpy(a, a0, n * sizeof(*a));
    memcpy(u, u0, n * sizeof(*u));
    for (size_t i = 0; i < n; i++) {
        if (m > 0.0f) {
            float v = m * u[i] + g[i];
            u[i] = v;
            a[i] = a[i] + v;
        } else {
            a[i] = a[i] + g[i];
        }
    }
    if (approx)
        cr_assert_eq(
            topk_ctx_select_approx(c0, a, n, k, seed, want, &nwant, NULL),
            FLPS_OK);
    else
        cr_assert_eq(topk_ctx_select(c0, a, n, k, want), FLPS_OK);
    cr_assert_arr_eq(a1, a, n * sizeof(*a), "n=%zu k=%zu m=%g: a", n, k,
                     (double)m);
    cr_assert_arr_eq(u1, u, n * sizeof(*u), "n=%zu k=%zu: u", n, k);
    cr_assert_eq(ngot, nwant, "n=%zu k=%zu approx=%d", n, k, approx);
    cr_assert_arr_eq(got, want, nwant * sizeof(*got), "n=%zu k=%zu approx=%d",
                     n, k, approx);
    topk_ctx_destroy(c0);
    topk_ctx_destroy(c1);
    free(a);
    free(u);
    free(g);
    free(a0);
    free(u0);
    free(a1);
    free(u1);
    free(want);
    free(got);
}

Test(topk, fused_selection_updates_and_selects_as_the_loop_then_select_would)
{
    static const size_t ns[] = {1, 31, 1000, 65535, 65536 + 17, 300007};
    static const double dens[] = {0.0, 0.001, 0.01, 0.2, 1.0};

    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
            size_t k = (size_t)(dens[d] * (double)ns[i]);
            for (int approx = 0; approx < 2; approx++) {
                check_fused(ns[i], k, 0.9f, approx);
                check_fused(ns[i], k, 0.0f, approx);
            }
        }
}

Test(topk, fused_selection_reports_non_finite_results_after_updating)
{
    size_t n = 100000, cnt = 0;
    float *a = gauss_array(n), *u = gauss_array(n), *g = gauss_array(n);
    uint32_t idx[100];
    topk_ctx *ctx = NULL;

    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    g[77777] = INFINITY;
    cr_assert_eq(
        topk_ctx_select_fused(ctx, a, u, g, 0.5f, n, 100, 0, 0, idx, &cnt),
        FLPS_ENONFINITE);
    cr_assert_eq(cnt, 0, "count is written only on success");
    cr_assert(isinf(u[77777]), "the update is made all the same");
    cr_assert_eq(
        topk_ctx_select_fused(ctx, a, u, NULL, 0.5f, n, 100, 0, 0, idx, &cnt),
        FLPS_EINVAL);
    topk_ctx_destroy(ctx);
    free(a);
    free(u);
    free(g);
}

/* ---- the AVX state the selections leave behind ---- */

Test(topk, leaves_the_upper_ymm_state_clean_for_the_sse_code_after_it)
{
    static const size_t ns[] = {1000, 65536 + 5, 1000003};
    topk_ctx *ctx = NULL;
    uint32_t *idx = malloc(20000 * sizeof(*idx));
    float *g = gauss_array(1000003), *u = gauss_array(1000003);

    if (!avx_state_is_observable())
        cr_skip_test("the CPU does not report XINUSE");
    cr_assert_not_null(idx);
    cr_assert_eq(topk_ctx_create(&ctx), FLPS_OK);
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        size_t n = ns[i], k = n / 100, cnt = 0;
        float *a = gauss_array(n);
        avx_state_clear();
        cr_assert_eq(topk_ctx_select(ctx, a, n, k, idx), FLPS_OK);
        cr_assert_not(avx_state_is_dirty(), "topk_ctx_select n=%zu", n);
        avx_state_clear();
        cr_assert_eq(topk_select(a, n, k, idx), FLPS_OK);
        cr_assert_not(avx_state_is_dirty(), "topk_select n=%zu", n);
        avx_state_clear();
        cr_assert_eq(topk_ctx_select_approx(ctx, a, n, k, 5, idx, &cnt, NULL),
                     FLPS_OK);
        cr_assert_not(avx_state_is_dirty(), "approx n=%zu", n);
        avx_state_clear();
        cr_assert_eq(
            topk_ctx_select_fused(ctx, a, u, g, 0.9f, n, k, 0, 0, idx, &cnt),
            FLPS_OK);
        cr_assert_not(avx_state_is_dirty(), "fused n=%zu", n);
        /* The threshold set overflowing the candidate buffer returns
         * early from the AVX loop. */
        for (size_t j = 0; j < n; j++)
            a[j] = j % 3 == 0 ? 1.0f : a[j] * 1e-3f;
        avx_state_clear();
        cr_assert_eq(topk_ctx_select(ctx, a, n, k, idx), FLPS_OK);
        cr_assert_not(avx_state_is_dirty(), "overflow n=%zu", n);
        free(a);
    }
    topk_ctx_destroy(ctx);
    free(idx);
    free(g);
    free(u);
}

Test(topk, every_avx_path_clears_the_upper_ymm_state_before_it_leaves)
{
    static const char *const prefixes[] = {"topk_", NULL};
    avx_asm_result res;

    if (avx_asm_check(prefixes, &res) != 0)
        cr_skip_test("objdump cannot disassemble the test binary");
#if defined(__x86_64__) && !defined(TOPK_NO_AVX2)
    cr_assert_geq(res.functions, 2, "the AVX2 scans were found");
#endif
    cr_assert_eq(res.violations, 0, "%s", res.report);
}
