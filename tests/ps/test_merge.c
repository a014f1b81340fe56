/* Tests for ps/merge.c: the P-way merge of ascending sparse contributions
 * against a dense scatter-add in rank order, bit for bit, and its limits. */
#include "ps/merge.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Merge P random contributions over numel indices and compare with the
 * scatter-add into a zeroed accumulator, in the bits. */
static void check_against_scatter_add(uint32_t P, uint32_t numel, double touch,
                                      uint64_t *seed)
{
    proto_msg *src = calloc(P, sizeof(*src));
    uint32_t **idx = calloc(P, sizeof(*idx)), *out_idx, nref = 0, n;
    float **val = calloc(P, sizeof(*val)), *acc, *out_sum;
    uint8_t *touched;
    size_t total = 0;
    ps_merge *m = NULL;

    cr_assert_eq(ps_merge_create(P, &m), FLPS_OK);
    acc = calloc(numel, sizeof(float));
    touched = calloc(numel, 1);
    for (uint32_t r = 0; r < P; r++) {
        idx[r] = malloc((size_t)numel * 4 + 4);
        val[r] = malloc((size_t)numel * 4 + 4);
        for (uint32_t i = 0; i < numel; i++) {
            uint64_t x = rng(seed);
            if ((double)(x >> 11) * 0x1p-53 >= touch)
                continue;
            idx[r][src[r].n] = i;
            /* Large and small magnitudes and -0.0f: the order of the
             * additions shows in the result. */
            val[r][src[r].n++] = x % 5 == 0   ? -0.0f
                                 : x % 5 == 1 ? 3e7f * (x % 2 ? 1 : -1)
                                              : (float)(x >> 44) * 1e-3f - 1e3f;
        }
        src[r].idx = idx[r];
        src[r].val = val[r];
        total += src[r].n;
        for (uint32_t j = 0; j < src[r].n; j++) {
            acc[idx[r][j]] += val[r][j];
            touched[idx[r][j]] = 1;
        }
    }
    out_idx = malloc(total * 4 + 4);
    out_sum = malloc(total * 4 + 4);
    n = ps_merge_sum(m, src, P, out_idx, out_sum);
    for (uint32_t i = 0; i < numel; i++) {
        if (!touched[i])
            continue;
        cr_assert_lt(nref, n, "P=%u: the merge lost index %u", P, i);
        cr_assert_eq(out_idx[nref], i, "P=%u: position %u", P, nref);
        cr_assert_eq(memcmp(&out_sum[nref], &acc[i], 4), 0,
                     "P=%u: index %u sums to %a, the scatter-add to %a", P, i,
                     (double)out_sum[nref], (double)acc[i]);
        nref++;
    }
    cr_assert_eq(n, nref, "P=%u: %u merged, %u in the union", P, n, nref);
    for (uint32_t r = 0; r < P; r++) {
        free(idx[r]);
        free(val[r]);
    }
    free(idx);
    free(val);
    free(src);
    free(acc);
    free(touched);
    free(out_idx);
    free(out_sum);
    ps_merge_destroy(m);
}

Test(ps_merge, sums_like_a_rank_order_scatter_add_for_every_count)
{
    uint64_t seed = 1;

    for (uint32_t P = 1; P <= 40; P++)
        check_against_scatter_add(P, 3000, P % 3 == 0 ? 0.02 : 0.4, &seed);
    check_against_scatter_add(300, 2000, 0.05, &seed);
}

Test(ps_merge, takes_equal_indices_in_contribution_order)
{
    /* 1e8 + 1 - 1e8 is 0 in floats, 1e8 - 1e8 + 1 is 1: only the rank
     * order gives the first. */
    const uint32_t i0[] = {5}, i1[] = {5}, i2[] = {5};
    const float v0[] = {1e8f}, v1[] = {1.0f}, v2[] = {-1e8f};
    proto_msg src[3];
    uint32_t idx[3];
    float sum[3];
    ps_merge *m = NULL;

    memset(src, 0, sizeof(src));
    src[0].idx = i0, src[0].val = v0, src[0].n = 1;
    src[1].idx = i1, src[1].val = v1, src[1].n = 1;
    src[2].idx = i2, src[2].val = v2, src[2].n = 1;
    cr_assert_eq(ps_merge_create(3, &m), FLPS_OK);
    cr_assert_eq(ps_merge_sum(m, src, 3, idx, sum), 1);
    cr_assert_eq(idx[0], 5);
    cr_assert_eq(sum[0], 0.0f);
    /* The other way round, the same operands give 1. */
    src[1].val = v2, src[2].val = v1;
    cr_assert_eq(ps_merge_sum(m, src, 3, idx, sum), 1);
    cr_assert_eq(sum[0], 1.0f);
    ps_merge_destroy(m);
}

Test(ps_merge, a_lone_negative_zero_sums_to_positive_zero)
{
    /* As in a zeroed accumulator: +0.0f + -0.0f is +0.0f. */
    const uint32_t i0[] = {0, 9};
    const float v0[] = {-0.0f, -0.0f};
    proto_msg src[2];
    uint32_t idx[4];
    float sum[4];
    ps_merge *m = NULL;

    memset(src, 0, sizeof(src));
    src[0].idx = i0, src[0].val = v0, src[0].n = 2;
    cr_assert_eq(ps_merge_create(2, &m), FLPS_OK);
    for (uint32_t P = 1; P <= 2; P++) {
        cr_assert_eq(ps_merge_sum(m, src, P, idx, sum), 2);
        cr_assert_eq(idx[1], 9);
        cr_assert(!signbit(sum[0]) && !signbit(sum[1]),
                  "P=%u: a -0.0f came through", P);
    }
    ps_merge_destroy(m);
}

Test(ps_merge, merges_empty_contributions_to_nothing)
{
    proto_msg src[5];
    uint32_t idx[1];
    float sum[1];
    ps_merge *m = NULL;

    memset(src, 0, sizeof(src));
    cr_assert_eq(ps_merge_create(5, &m), FLPS_OK);
    cr_assert_eq(ps_merge_sum(m, src, 0, idx, sum), 0);
    cr_assert_eq(ps_merge_sum(m, src, 1, idx, sum), 0);
    cr_assert_eq(ps_merge_sum(m, src, 5, idx, sum), 0);
    ps_merge_destroy(m);
}

/* Empty contributions carry no arrays (NULL, as a decoded push with no
 * pairs has): beside full ones they add nothing (fuzz_shard found the
 * NULL + 0 this once computed, undefined behaviour under clang's UBSan). */
Test(ps_merge, skips_empty_contributions_without_arrays_beside_full_ones)
{
    proto_msg src[3];
    uint32_t a_idx[2] = {1, 4}, c_idx[1] = {4}, idx[3];
    float a_val[2] = {1.0f, 2.0f}, c_val[1] = {0.5f}, sum[3];
    ps_merge *m = NULL;

    memset(src, 0, sizeof(src));
    src[0].n = 2;
    src[0].idx = a_idx;
    src[0].val = a_val;
    src[2].n = 1;
    src[2].idx = c_idx;
    src[2].val = c_val;
    cr_assert_eq(ps_merge_create(3, &m), FLPS_OK);
    cr_assert_eq(ps_merge_sum(m, src, 3, idx, sum), 2);
    cr_assert_eq(idx[0], 1);
    cr_assert_float_eq(sum[0], 1.0f, 0);
    cr_assert_eq(idx[1], 4);
    cr_assert_float_eq(sum[1], 2.5f, 0);
    ps_merge_destroy(m);
}

Test(ps_merge, refuses_impossible_sizes_and_survives_allocation_failure)
{
    ps_merge *m = NULL;

    cr_assert_eq(ps_merge_create(0, &m), FLPS_EINVAL);
    cr_assert_eq(ps_merge_create(PS_MERGE_MAX_SRC + 1, &m), FLPS_EINVAL);
    cr_assert_eq(ps_merge_create(4, NULL), FLPS_EINVAL);
    cr_assert_null(m);
    for (unsigned long n = 1;; n++) {
        flps_err rc;
        flps_alloc_fail_at(n);
        rc = ps_merge_create(PS_MERGE_MAX_SRC, &m);
        flps_alloc_fail_at(0);
        if (rc == FLPS_OK)
            break;
        cr_assert_eq(rc, FLPS_ENOMEM);
        cr_assert_null(m);
    }
    ps_merge_destroy(m);
    ps_merge_destroy(NULL);
}
