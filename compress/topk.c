/* Exact top-k selection by magnitude.
 * PLACEHOLDER reference implementation (sort-based); the fast one replaces
 * it. */
#include "compress/topk.h"

#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"

typedef struct {
    float mag;
    uint32_t idx;
} topk_pair;

static int topk_cmp_desc(const void *pa, const void *pb)
{
    const topk_pair *a = pa, *b = pb;

    if (a->mag != b->mag)
        return a->mag > b->mag ? -1 : 1;
    return a->idx < b->idx ? -1 : (a->idx > b->idx);
}

static int topk_cmp_u32(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    return a < b ? -1 : (a > b);
}

flps_err topk_select(const float *a, size_t n, size_t k, uint32_t *idx)
{
    topk_pair *p;

    if (k > n || n >= (1ull << 32) || (n > 0 && (a == NULL || idx == NULL)))
        return FLPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return FLPS_ENONFINITE;
    if (k == 0)
        return FLPS_OK;
    p = flps_malloc(n * sizeof(*p));
    if (p == NULL)
        return FLPS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        p[i].mag = fabsf(a[i]);
        p[i].idx = (uint32_t)i;
    }
    qsort(p, n, sizeof(*p), topk_cmp_desc);
    for (size_t i = 0; i < k; i++)
        idx[i] = p[i].idx;
    qsort(idx, k, sizeof(*idx), topk_cmp_u32);
    flps_free(p);
    return FLPS_OK;
}
