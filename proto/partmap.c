/* The partition map: parts of tensors, assigned to shards. */
#include "proto/partmap.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

typedef struct {
    uint32_t numel;
    uint32_t id;
} part_order;

static int cmp_largest_first(const void *pa, const void *pb)
{
    const part_order *a = pa, *b = pb;

    if (a->numel != b->numel)
        return a->numel > b->numel ? -1 : 1;
    return a->id < b->id ? -1 : (a->id > b->id);
}

/* An empty map of nparts parts (zeroed) over nshards and ntensors.
 * FLPS_ENOMEM leaves *pm empty. */
static flps_err partmap_alloc(partmap *pm, uint32_t nparts, uint32_t nshards,
                              uint32_t ntensors)
{
    memset(pm, 0, sizeof(*pm));
    pm->nparts = nparts;
    pm->nshards = nshards;
    pm->ntensors = ntensors;
    pm->parts = flps_calloc(nparts, sizeof(*pm->parts));
    pm->shard_load = flps_calloc(nshards, sizeof(*pm->shard_load));
    pm->first_part = flps_calloc(ntensors, sizeof(*pm->first_part));
    if (pm->parts == NULL || pm->shard_load == NULL || pm->first_part == NULL) {
        partmap_fini(pm);
        return FLPS_ENOMEM;
    }
    return FLPS_OK;
}

flps_err partmap_build(const uint64_t *numel, uint32_t ntensors,
                       uint32_t nshards, uint32_t part_size, partmap *out)
{
    partmap pm;
    part_order *order = NULL;
    uint64_t total = 0;
    uint32_t p = 0;

    if (numel == NULL || ntensors == 0 || nshards == 0 || part_size == 0)
        return FLPS_EINVAL;
    for (uint32_t t = 0; t < ntensors; t++) {
        if (numel[t] == 0)
            return FLPS_EINVAL;
        total += (numel[t] + part_size - 1) / part_size;
        if (total > UINT32_MAX)
            return FLPS_EINVAL;
    }
    if (partmap_alloc(&pm, (uint32_t)total, nshards, ntensors) != FLPS_OK)
        return FLPS_ENOMEM;
    order = flps_calloc(pm.nparts, sizeof(*order));
    if (order == NULL) {
        partmap_fini(&pm);
        return FLPS_ENOMEM;
    }
    for (uint32_t t = 0; t < ntensors; t++) {
        pm.first_part[t] = p;
        for (uint64_t off = 0; off < numel[t]; off += part_size) {
            uint64_t left = numel[t] - off;
            pm.parts[p].tensor = t;
            pm.parts[p].offset = off;
            pm.parts[p].numel = (uint32_t)(left < part_size ? left : part_size);
            order[p].numel = pm.parts[p].numel;
            order[p].id = p;
            p++;
        }
    }
    qsort(order, pm.nparts, sizeof(*order), cmp_largest_first);
    for (uint32_t i = 0; i < pm.nparts; i++) {
        uint32_t best = 0;
        for (uint32_t s = 1; s < nshards; s++)
            if (pm.shard_load[s] < pm.shard_load[best])
                best = s;
        pm.parts[order[i].id].shard = best;
        pm.shard_load[best] += order[i].numel;
    }
    flps_free(order);
    *out = pm;
    return FLPS_OK;
}

flps_err partmap_build_pieces(const uint64_t *numel, uint32_t ntensors,
                              uint32_t nshards, uint32_t part_size,
                              uint32_t piece, partmap *out)
{
    partmap pm;
    partmap_part *pieces;
    uint64_t total = 0;
    uint32_t q = 0;
    flps_err rc;

    if (piece == 0)
        return FLPS_EINVAL;
    rc = partmap_build(numel, ntensors, nshards, part_size, &pm);
    if (rc != FLPS_OK || piece >= part_size) {
        if (rc == FLPS_OK)
            *out = pm;
        return rc;
    }
    for (uint32_t i = 0; i < pm.nparts; i++)
        total += (pm.parts[i].numel + (uint64_t)piece - 1) / piece;
    if (total > UINT32_MAX) {
        partmap_fini(&pm);
        return FLPS_EINVAL;
    }
    pieces = flps_calloc((size_t)total, sizeof(*pieces));
    if (pieces == NULL) {
        partmap_fini(&pm);
        return FLPS_ENOMEM;
    }
    /* Parts are ordered by (tensor, offset), and so are their pieces. */
    for (uint32_t i = 0; i < pm.nparts; i++) {
        const partmap_part *src = &pm.parts[i];
        if (src->offset == 0)
            pm.first_part[src->tensor] = q;
        for (uint32_t off = 0; off < src->numel; off += piece) {
            uint32_t left = src->numel - off;
            pieces[q].tensor = src->tensor;
            pieces[q].offset = src->offset + off;
            pieces[q].numel = left < piece ? left : piece;
            pieces[q].shard = src->shard;
            q++;
        }
    }
    flps_free(pm.parts);
    pm.parts = pieces;
    pm.nparts = (uint32_t)total;
    *out = pm;
    return FLPS_OK;
}

/* floor(s * total / nshards) without overflow (s < nshards < 2^32). */
static uint64_t even_start(uint64_t total, uint32_t nshards, uint32_t s)
{
    return s * (total / nshards) + s * (total % nshards) / nshards;
}

/* The even map's parts into pm (counting only, into *n, when pm is
 * NULL): runs walked in flat order, so the owning shard only advances. */
static flps_err even_cut(const uint64_t *numel, uint32_t ntensors,
                         uint32_t nshards, uint32_t piece, uint64_t total,
                         partmap *pm, uint64_t *n)
{
    uint64_t base = 0;
    uint32_t s = 0;

    *n = 0;
    for (uint32_t t = 0; t < ntensors; t++) {
        if (pm != NULL)
            pm->first_part[t] = (uint32_t)*n;
        for (uint64_t at = base; at < base + numel[t];) {
            uint64_t end, len, cnt;
            while (s + 1 < nshards && even_start(total, nshards, s + 1) <= at)
                s++;
            end = s + 1 < nshards ? even_start(total, nshards, s + 1) : total;
            if (end > base + numel[t])
                end = base + numel[t];
            /* The fewest pieces of at most piece values, within one
             * value of each other: no small tail, whose push would cost
             * a round trip of its own at the end of every step. */
            len = end - at;
            cnt = (len + piece - 1) / piece;
            for (uint64_t k = 0; k < cnt; k++) {
                uint64_t size = len / cnt + (k < len % cnt);
                if (*n >= UINT32_MAX)
                    return FLPS_EINVAL;
                if (pm != NULL) {
                    partmap_part *p = &pm->parts[*n];
                    p->tensor = t;
                    p->offset = at - base;
                    p->numel = (uint32_t)size;
                    p->shard = s;
                    pm->shard_load[s] += p->numel;
                }
                (*n)++;
                at += size;
            }
        }
        base += numel[t];
    }
    return FLPS_OK;
}

uint32_t partmap_clear_piece(const uint64_t *numel, uint32_t ntensors,
                             uint32_t nshards, uint32_t part_size)
{
    const uint64_t step = PARTMAP_CLEAR_PIECE;
    uint64_t total = 0, run, piece;

    for (uint32_t t = 0; t < ntensors; t++)
        total += numel[t];
    run = total / (nshards > 0 ? nshards : 1);
    piece = (run + PARTMAP_CLEAR_PIECES_PER_SHARD - 1) /
            PARTMAP_CLEAR_PIECES_PER_SHARD;
    piece = (piece + step - 1) / step * step;
    if (piece < PARTMAP_CLEAR_PIECE)
        piece = PARTMAP_CLEAR_PIECE;
    if (piece > PARTMAP_DENSE_PIECE)
        piece = PARTMAP_DENSE_PIECE;
    return part_size < piece ? part_size : (uint32_t)piece;
}

flps_err partmap_build_even(const uint64_t *numel, uint32_t ntensors,
                            uint32_t nshards, uint32_t piece, partmap *out)
{
    partmap pm;
    uint64_t total = 0, n = 0;
    flps_err rc;

    if (numel == NULL || ntensors == 0 || nshards == 0 || piece == 0)
        return FLPS_EINVAL;
    for (uint32_t t = 0; t < ntensors; t++) {
        if (numel[t] == 0 || numel[t] > UINT64_MAX / 2 - total)
            return FLPS_EINVAL;
        total += numel[t];
    }
    rc = even_cut(numel, ntensors, nshards, piece, total, NULL, &n);
    if (rc != FLPS_OK)
        return rc;
    if (partmap_alloc(&pm, (uint32_t)n, nshards, ntensors) != FLPS_OK)
        return FLPS_ENOMEM;
    rc = even_cut(numel, ntensors, nshards, piece, total, &pm, &n);
    if (rc != FLPS_OK) {
        partmap_fini(&pm);
        return rc;
    }
    *out = pm;
    return FLPS_OK;
}

void partmap_fini(partmap *pm)
{
    if (pm == NULL)
        return;
    flps_free(pm->parts);
    flps_free(pm->shard_load);
    flps_free(pm->first_part);
    memset(pm, 0, sizeof(*pm));
}
