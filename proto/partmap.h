/* The partition map: how a model's tensors are cut into parts and which
 * shard owns each part. A pure function of (layout, shard count, part
 * size), so every worker and shard computes the same map. */
#ifndef FLPS_PROTO_PARTMAP_H
#define FLPS_PROTO_PARTMAP_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct partmap_part {
    uint32_t tensor; /* index into the layout */
    uint64_t offset; /* first element within the tensor */
    uint32_t numel;  /* 1..part_size elements */
    uint32_t shard;  /* owner */
} partmap_part;

typedef struct partmap {
    uint32_t nparts;
    partmap_part *parts; /* ordered by (tensor, offset); part id = index */
    uint32_t nshards;
    uint64_t *shard_load; /* elements owned per shard */
    uint32_t ntensors;
    uint32_t *first_part; /* per tensor: id of its first part */
} partmap;

/* Cut every tensor of numel[0..ntensors) into parts of at most part_size
 * elements (the last part of a tensor may be smaller), then assign parts to
 * shards largest first (ties: lower part id) onto the least-loaded shard
 * (ties: lower shard id). Errors: FLPS_EINVAL (no tensors, a zero-size
 * tensor, nshards or part_size 0), FLPS_ENOMEM. Caller owns *out: release
 * with partmap_fini(). */
flps_err partmap_build(const uint64_t *numel, uint32_t ntensors,
                       uint32_t nshards, uint32_t part_size, partmap *out);

void partmap_fini(partmap *pm);

#endif
