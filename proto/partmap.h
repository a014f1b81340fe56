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

/* The piece of a dense-aggregated job on the wire: 16384 f32 values,
 * 64 KiB. A part placed on a shard is sent, aggregated and answered in
 * pieces of at most this many elements, so one huge part is pipelined like
 * many small ones and no message needs a buffer of the part's size. A
 * shard closes a piece, and sends its update, as soon as every worker's
 * copy of it is in: with pieces a quarter of the default part, updates of
 * a shard's first pieces flow back while its later ones still arrive (the
 * MLP's largest part is 4 pieces), so both directions of a link carry data
 * at once (docs/benchmarks.md, issue 23). The sum of each element does
 * not depend on the cut: the results are the same bits. Sparse jobs keep
 * whole parts: their pushes are small, and gtopk selects over the part. */
#define PARTMAP_DENSE_PIECE 16384u

/* The piece of the even map (partmap_build_even), which dense and fp16
 * jobs use when their data plane is not encrypted: 4096 values, 16 KiB.
 * On bandwidth-limited links a finer piece closes the pipeline's bubbles
 * and keeps the shared queues short, and the even map sends every host
 * the same bytes (docs/benchmarks.md, MLP on 4 hosts: at 100 Mbit/s
 * 0.121 s per iteration against 0.128 with 8192 and 0.131 with 8192 cut
 * with a small tail; at 1 Gbit/s within noise of 8192). Under CURVE,
 * whose every message costs CPU, the even map in 4096 measured 1.3x the
 * map below at 1 Gbit/s on 2 cores (though 0.83x at 100 Mbit/s), so
 * encrypted jobs keep parts placed largest first in pieces of
 * PARTMAP_DENSE_PIECE. */
#define PARTMAP_CLEAR_PIECE 4096u

/* A large model's even map grows its piece (partmap_clear_piece) so that
 * no shard takes more than this many pieces a step, up to
 * PARTMAP_DENSE_PIECE: every message costs ZeroMQ's I/O thread and the
 * kernel a few syscalls whatever its size (ZeroMQ moves at most 8 KiB
 * through its batch buffer per call), which the PyTorch CNN's 3.3M values
 * in pieces of 4096 paid 800 times a step per worker, about 630,000
 * syscalls a second on 4 hosts. Pieces of 16384 took 0.244-0.249 s per
 * iteration at 1 Gbit/s against 0.255-0.256 (docs/benchmarks.md); past 64
 * pieces a shard, a finer cut shortens the pipeline's fill and drain by
 * less than 2%. */
#define PARTMAP_CLEAR_PIECES_PER_SHARD 64u

/* The piece of codecs that scale their values per piece (qsgd, sign):
 * 65536 values, as before dense pieces were cut smaller, since a smaller
 * piece would change their arithmetic. */
#define PARTMAP_CODED_PIECE 65536u

/* The piece size a job uses: PARTMAP_DENSE_PIECE for dense aggregation
 * (dense values, fp16), part_size otherwise. */
static inline uint32_t partmap_piece_size(int dense_agg, uint32_t part_size)
{
    return dense_agg && part_size > PARTMAP_DENSE_PIECE ? PARTMAP_DENSE_PIECE
                                                        : part_size;
}

/* The piece size of a job: partmap_piece_size when its codec sums element
 * by element (elementwise: dense, fp16) or the job is not dense-aggregated,
 * else (qsgd, sign) at most PARTMAP_CODED_PIECE. */
static inline uint32_t partmap_job_piece_size(int dense_agg, int elementwise,
                                              uint32_t part_size)
{
    if (!dense_agg || elementwise)
        return partmap_piece_size(dense_agg, part_size);
    return part_size > PARTMAP_CODED_PIECE ? PARTMAP_CODED_PIECE : part_size;
}

/* As partmap_build, then every part cut into pieces of at most piece
 * elements that stay on its shard: the placement is that of part_size,
 * and the map's parts (ids, messages, aggregation) are the pieces.
 * piece >= part_size gives partmap_build's map. FLPS_EINVAL for piece 0. */
flps_err partmap_build_pieces(const uint64_t *numel, uint32_t ntensors,
                              uint32_t nshards, uint32_t part_size,
                              uint32_t piece, partmap *out);

/* The even map of a dense job whose pieces sum element by element: the
 * model's elements, tensor after tensor, cut into nshards runs of equal
 * length (within one element), shard s owning run s, as the chunks of a
 * ring allreduce; each tensor's share of a run cut into the fewest parts
 * of at most piece elements, within one element of each other, ordered
 * by (tensor, offset). Every shard then sends and
 * receives the same bytes, where placing whole parts largest first can
 * leave one shard a part's worth heavier (the MLP's: 2.9%), and a
 * synchronous step waits for the heaviest. FLPS_EINVAL for no tensors, a
 * zero-size tensor, nshards or piece 0, or more than 2^32-1 parts;
 * FLPS_ENOMEM. */
flps_err partmap_build_even(const uint64_t *numel, uint32_t ntensors,
                            uint32_t nshards, uint32_t piece, partmap *out);

/* The piece of the even map for a model of ntensors tensors of numel
 * elements over nshards shards, with parts of at most part_size:
 * PARTMAP_CLEAR_PIECE, or the smallest multiple of it that cuts each
 * shard's run into at most PARTMAP_CLEAR_PIECES_PER_SHARD pieces, up to
 * PARTMAP_DENSE_PIECE; never more than part_size. Every worker computes
 * it from the same layout and sends it in REGISTER. */
uint32_t partmap_clear_piece(const uint64_t *numel, uint32_t ntensors,
                             uint32_t nshards, uint32_t part_size);

void partmap_fini(partmap *pm);

#endif
