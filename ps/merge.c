/* The sum of P ascending sparse contributions by a P-way merge (a loser
 * tree), in place of a scatter-add into a dense accumulator followed by a
 * sort of the touched indices. */
#include "ps/merge.h"

#include <assert.h>
#include <string.h>

#include "common/alloc.h"

/* A key orders (index, contribution): the index above RANK_BITS bits of
 * contribution number, so equal indices leave the tree in contribution
 * order, which is what makes every sum the rank-order sum. */
#define RANK_BITS 16
#define KEY_DONE UINT64_MAX /* an exhausted contribution */
#define PREFETCH_AHEAD 32   /* elements: two cache lines */

struct ps_merge {
    uint32_t max_src;
    uint32_t max_leaves; /* max_src rounded up to a power of two */
    /* Loser tree: node i in [1, leaves) holds the key that lost the match
     * played there; node 0 is unused. */
    uint64_t *tree;
    uint64_t *win;        /* [2 * leaves]: winners while building */
    const uint32_t **cur; /* per contribution: its next index */
    const uint32_t **end;
    const float **val; /* per contribution: the value of *cur */
};

flps_err ps_merge_create(uint32_t max_src, ps_merge **out)
{
    ps_merge *m;
    uint32_t leaves = 1;

    if (max_src == 0 || max_src > PS_MERGE_MAX_SRC || out == NULL)
        return FLPS_EINVAL;
    while (leaves < max_src)
        leaves *= 2;
    m = flps_calloc(1, sizeof(*m));
    if (m == NULL)
        return FLPS_ENOMEM;
    m->max_src = max_src;
    m->max_leaves = leaves;
    m->tree = flps_malloc((size_t)leaves * sizeof(*m->tree));
    m->win = flps_malloc((size_t)2 * leaves * sizeof(*m->win));
    m->cur = flps_malloc((size_t)leaves * sizeof(*m->cur));
    m->end = flps_malloc((size_t)leaves * sizeof(*m->end));
    m->val = flps_malloc((size_t)leaves * sizeof(*m->val));
    if (m->tree == NULL || m->win == NULL || m->cur == NULL || m->end == NULL ||
        m->val == NULL) {
        ps_merge_destroy(m);
        return FLPS_ENOMEM;
    }
    *out = m;
    return FLPS_OK;
}

void ps_merge_destroy(ps_merge *m)
{
    if (m == NULL)
        return;
    flps_free(m->tree);
    flps_free(m->win);
    flps_free(m->cur);
    flps_free(m->end);
    flps_free(m->val);
    flps_free(m);
}

static uint64_t key_of(const ps_merge *m, uint32_t r)
{
    if (m->cur[r] == m->end[r])
        return KEY_DONE;
    return (uint64_t)*m->cur[r] << RANK_BITS | r;
}

/* One contribution needs no merge; its sums still start from +0.0f, as a
 * zeroed accumulator's do (a pushed -0.0f becomes +0.0f). */
static uint32_t copy_one(const proto_msg *src, uint32_t *out_idx,
                         float *out_sum)
{
    if (src->n > 0)
        memcpy(out_idx, src->idx, (size_t)src->n * sizeof(*out_idx));
    for (uint32_t j = 0; j < src->n; j++)
        out_sum[j] = 0.0f + src->val[j];
    return src->n;
}

uint32_t ps_merge_sum(ps_merge *m, const proto_msg *src, uint32_t nsrc,
                      uint32_t *out_idx, float *out_sum)
{
    uint32_t leaves = 1, n = 0, at;
    uint64_t k;
    float sum;

    assert(nsrc <= m->max_src);
    if (nsrc == 0)
        return 0;
    if (nsrc == 1)
        return copy_one(src, out_idx, out_sum);
    while (leaves < nsrc)
        leaves *= 2;
    for (uint32_t r = 0; r < leaves; r++) {
        if (r < nsrc) {
            /* An empty source may have no array: NULL + 0 is undefined
             * (found by fuzz_shard), so its cursor starts at its end. */
            m->cur[r] = src[r].idx;
            m->end[r] = src[r].n > 0 ? src[r].idx + src[r].n : src[r].idx;
            m->val[r] = src[r].val;
        } else {
            m->cur[r] = m->end[r] = NULL;
        }
        m->win[leaves + r] = key_of(m, r);
    }
    for (uint32_t i = leaves - 1; i > 0; i--) {
        uint64_t a = m->win[2 * i], b = m->win[2 * i + 1];
        m->win[i] = a < b ? a : b;
        m->tree[i] = a < b ? b : a;
    }
    k = m->win[1];
    if (k == KEY_DONE)
        return 0;
    at = (uint32_t)(k >> RANK_BITS);
    sum = 0.0f;
    while (k != KEY_DONE) {
        const uint32_t r = (uint32_t)(k & ((1u << RANK_BITS) - 1));
        const uint32_t i = (uint32_t)(k >> RANK_BITS);
        const float v = *m->val[r]++;

        if (i != at) {
            out_idx[n] = at;
            out_sum[n++] = sum;
            at = i;
            sum = 0.0f;
        }
        sum += v;
        m->cur[r]++;
        /* Many short streams defeat the hardware prefetcher: ask for each
         * contribution's data a few lines ahead (reads past the end are
         * harmless hints). */
        __builtin_prefetch(m->cur[r] + PREFETCH_AHEAD);
        __builtin_prefetch(m->val[r] + PREFETCH_AHEAD);
        /* Replay r's matches from its leaf up with its next key; each node
         * keeps the loser, the winner goes on up. Branch-free: which side
         * wins is data, and mispredicting it would cost more than both. */
        k = key_of(m, r);
        for (uint32_t node = (leaves + r) >> 1; node > 0; node >>= 1) {
            const uint64_t t = m->tree[node];
            const uint64_t lo = t < k ? t : k;
            m->tree[node] = t < k ? k : t;
            k = lo;
        }
    }
    out_idx[n] = at;
    out_sum[n++] = sum;
    return n;
}
