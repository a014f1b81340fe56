/* Pushes of pairs the caller selected, and the mask of what the shards
 * took (client_pairs.h). */
#include "worker/client_pairs.h"

#include <string.h>

#include "common/alloc.h"
#include "common/finite.h"
#include "worker/client_energy.h"
#include "worker/client_metrics.h"
#include "worker/client_req.h"
#include "worker/client_send.h"

/* A tensor's last flps_client_push_pairs. The arrays grow to the largest
 * push seen and are kept. key and key2 are the sort's scratch: a refused
 * push is sorted and checked there, so the last push's pairs and mask
 * stay as they were. */
struct cpairs {
    size_t cap;    /* elements of every array below */
    size_t n;      /* pairs of the last push */
    int live;      /* the tensor's last push was a push of pairs */
    uint32_t *idx; /* the pairs, ascending by index (tensor coordinates) */
    float *val;
    uint32_t *pos;        /* pos[s]: the caller's position of sorted pair s */
    uint8_t *taken;       /* by the caller's position */
    uint64_t *key, *key2; /* index << 32 | the caller's position */
};

static void free_arrays(cpairs *pr)
{
    flps_free(pr->idx);
    flps_free(pr->val);
    flps_free(pr->pos);
    flps_free(pr->taken);
    flps_free(pr->key);
    flps_free(pr->key2);
}

void cpairs_destroy(cpairs *pr)
{
    if (pr == NULL)
        return;
    free_arrays(pr);
    flps_free(pr);
}

int cpairs_is_live(const cpairs *pr)
{
    return pr->live;
}

void cpairs_forget(cpairs *pr)
{
    pr->live = 0;
}

/* Room for n pairs in *prp (made on first use); FLPS_ENOMEM leaves what
 * was there. */
static flps_err pairs_reserve(cpairs **prp, size_t n)
{
    cpairs *pr = *prp;
    void *a[6];
    const size_t sz[6] = {sizeof(uint32_t), sizeof(float),    sizeof(uint32_t),
                          sizeof(uint8_t),  sizeof(uint64_t), sizeof(uint64_t)};

    if (pr == NULL) {
        pr = flps_calloc(1, sizeof(*pr));
        if (pr == NULL)
            return FLPS_ENOMEM;
        *prp = pr;
    }
    if (n <= pr->cap)
        return FLPS_OK;
    for (int i = 0; i < 6; i++) {
        a[i] = flps_malloc(n * sz[i]);
        if (a[i] == NULL) {
            while (i-- > 0)
                flps_free(a[i]);
            return FLPS_ENOMEM;
        }
    }
    /* The live pairs move along: their update may still be on its way. */
    if (pr->n > 0) {
        memcpy(a[0], pr->idx, pr->n * sz[0]);
        memcpy(a[1], pr->val, pr->n * sz[1]);
        memcpy(a[2], pr->pos, pr->n * sz[2]);
        memcpy(a[3], pr->taken, pr->n * sz[3]);
    }
    free_arrays(pr);
    pr->idx = a[0];
    pr->val = a[1];
    pr->pos = a[2];
    pr->taken = a[3];
    pr->key = a[4];
    pr->key2 = a[5];
    pr->cap = n;
    return FLPS_OK;
}

/* Sort key[0..n) by its upper 32 bits (the index), stably: an LSD radix
 * sort of 4 byte-wide passes through key2, skipped when the caller's pairs
 * are ascending already (as a GPU selection sorted before the copy is).
 * Returns the sorted array (key or key2). */
static uint64_t *pairs_sort(uint64_t *key, uint64_t *key2, size_t n)
{
    size_t i;

    for (i = 1; i < n; i++)
        if (key[i - 1] > key[i])
            break;
    if (i >= n)
        return key;
    for (int shift = 32; shift < 64; shift += 8) {
        size_t count[256] = {0}, at = 0;
        for (i = 0; i < n; i++)
            count[(key[i] >> shift) & 0xff]++;
        for (int d = 0; d < 256; d++) {
            size_t here = count[d];
            count[d] = at;
            at += here;
        }
        for (i = 0; i < n; i++)
            key2[count[(key[i] >> shift) & 0xff]++] = key[i];
        {
            uint64_t *tmp = key;
            key = key2;
            key2 = tmp;
        }
    }
    return key; /* 4 passes: back in the array it started in */
}

void cpairs_mark_rejected(cpairs *pr, uint64_t offset, const proto_msg *m)
{
    for (uint32_t q = 0; q < m->nrej; q++) {
        uint64_t want = offset + m->rej[q];
        size_t lo = 0, hi = pr->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (pr->idx[mid] < want)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < pr->n && pr->idx[lo] == want)
            pr->taken[pr->pos[lo]] = 0;
    }
}

static flps_err push_pairs(flps_client *c, uint32_t tensor, const uint32_t *idx,
                           const float *val, size_t n, uint64_t iter)
{
    ctensor *t;
    cpairs *pr;
    uint32_t first, last;
    uint64_t *sorted;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (tensor >= c->ntensors || (n > 0 && (idx == NULL || val == NULL)))
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    if (n > t->numel)
        return FLPS_EINVAL;
    if (!c->sparse)
        return FLPS_ESTATE; /* the shards take dense values only */
    first = c->pm.first_part[tensor];
    last = client_tensor_end_part(c, tensor);
    rc = creq_check_tensor_idle(c, tensor);
    if (rc != FLPS_OK)
        return rc;
    if (!flps_all_finite(val, n))
        return FLPS_ENONFINITE;
    for (size_t j = 0; j < n; j++)
        if (idx[j] >= t->numel)
            return FLPS_ERANGE;
    rc = pairs_reserve(&t->pairs, n);
    if (rc != FLPS_OK)
        return client_set_error(c, rc, "out of memory for a push of %s",
                                t->name);
    pr = t->pairs;
    for (size_t j = 0; j < n; j++)
        pr->key[j] = (uint64_t)idx[j] << 32 | j;
    sorted = pairs_sort(pr->key, pr->key2, n);
    for (size_t s = 1; s < n; s++)
        if (sorted[s] >> 32 == sorted[s - 1] >> 32)
            return FLPS_EINVAL; /* an index twice */
    /* Accepted: from here the pairs replace the last push's. */
    for (size_t s = 0; s < n; s++) {
        uint32_t j = (uint32_t)sorted[s];
        pr->idx[s] = (uint32_t)(sorted[s] >> 32);
        pr->val[s] = val[j];
        pr->pos[s] = j;
        pr->taken[s] = 1;
    }
    pr->n = n;
    pr->live = 1;
    client_send_split(c, first, last, pr->idx, n);
    return client_send_selection(c, first, last, iter, pr->idx, pr->val);
}

flps_err flps_client_push_pairs(flps_client *c, uint32_t tensor,
                                const uint32_t *idx, const float *val, size_t n,
                                uint64_t iter)
{
    cmetrics_push mp;
    flps_err rc;

    if (c == NULL)
        return FLPS_EINVAL;
    client_energy_at(c, iter); /* the iterations before iter are done */
    client_metrics_push_begin(c, iter, &mp);
    rc = push_pairs(c, tensor, idx, val, n, iter);
    client_metrics_push_end(c, &mp, tensor, rc);
    return rc;
}

flps_err flps_client_pairs_taken(const flps_client *c, uint32_t tensor,
                                 uint8_t *taken, size_t n)
{
    const ctensor *t;
    const cpairs *pr;
    uint32_t first, last;

    if (c == NULL || tensor >= c->ntensors || (taken == NULL && n > 0))
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    pr = t->pairs;
    if (pr == NULL || !pr->live)
        return FLPS_ESTATE;
    first = c->pm.first_part[tensor];
    last = client_tensor_end_part(c, tensor);
    for (uint32_t pi = first; pi < last; pi++)
        if (c->parts[pi].req.kind == CREQ_PUSH)
            return FLPS_ESTATE;
    if (n != pr->n)
        return FLPS_EINVAL;
    if (n > 0)
        memcpy(taken, pr->taken, n);
    return FLPS_OK;
}
