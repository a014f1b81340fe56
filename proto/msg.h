/* Wire messages: a MessagePack header frame followed by raw little-endian
 * binary frames. Encoding, decoding and context-free validation; no I/O. */
#ifndef FLPS_PROTO_MSG_H
#define FLPS_PROTO_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* 2: pushes and updates may carry several parts (segs).
 * 3: index frames (a sparse message's indices, an UPDATE's rejected ones)
 *    are compact: per segment, LEB128 varints of the gaps between
 *    consecutive indices (docs/protocol.md), not u32 each.
 * A decoder reads versions PROTO_VERSION_MIN..PROTO_VERSION, each in its
 * own layout (a checkpoint's meta block written by an older build, an
 * older shard's refusal); an encoder writes PROTO_VERSION only, which an
 * older peer refuses by its version. */
#define PROTO_VERSION 3u
#define PROTO_VERSION_MIN 2u
#define PROTO_MAX_FRAMES 4
#define PROTO_JOB_MAX 63
#define PROTO_NAME_MAX 127
#define PROTO_MAX_TENSORS 4096
#define PROTO_ERRMSG_MAX 255
/* The job's secret a request carries (hex digits, proto/creds.h). */
#define PROTO_AUTH_MAX 128
/* Parts one sparse PUSH or UPDATE may carry. */
#define PROTO_MAX_SEGS 65536
/* Pairs libflps puts in one push of several parts (256 KiB): small parts
 * of a shard travel together, a large selection still goes in pieces that
 * pipeline. */
#define PROTO_JOINED_PAIRS 32768u

typedef enum {
    PROTO_OP_REGISTER = 1,    /* worker -> shard: layout + job config */
    PROTO_OP_REGISTER_OK = 2, /* shard -> worker */
    PROTO_OP_INIT = 3,        /* rank 0 -> shard: initial values of a part */
    PROTO_OP_PUSH = 4,       /* worker -> shard: contribution to (part, iter) */
    PROTO_OP_UPDATE = 5,     /* shard -> worker: the update of (part, iter) */
    PROTO_OP_PULL = 6,       /* worker -> shard: send me the whole part */
    PROTO_OP_PULL_REPLY = 7, /* shard -> worker: the part's values */
    PROTO_OP_CHECKPOINT = 8, /* anyone -> shard: write a checkpoint now */
    PROTO_OP_ACK = 9,        /* shard -> worker: done (init, checkpoint) */
    PROTO_OP_ERROR = 10,     /* shard -> worker: refused; status + text */
    /* worker -> worker (decentralized SAPS-PSGD, worker/peer_net.h): dense
     * values of one kind of peer message; part says the kind, iter the
     * round, version the step within it. Never sent to a shard. */
    PROTO_OP_PEER = 11,
    PROTO_OP_MAX_ = 11,
} proto_op;

/* How the values of a PUSH/UPDATE/INIT are laid out. */
typedef enum {
    PROTO_CODEC_DENSE = 0,   /* frames: values f32[n], n = the part's size */
    PROTO_CODEC_SPARSE = 1,  /* frames: indices (strictly ascending; compact
                                from version 3, u32[n] before), values
                                f32[n] */
    PROTO_CODEC_ENCODED = 2, /* PUSH only: 1..2 frames as the codec named by
                                the header's spec (compress/codec.h) makes
                                them for the part's n elements; the shard
                                decodes and validates them */
} proto_codec;

#define PROTO_SPEC_MAX 31
#define PROTO_ENC_MAX_FRAMES 2

/* How a shard turns the pushes of an iteration into an update. */
typedef enum {
    PROTO_AGG_DENSE = 0, /* dense pushes, dense update */
    PROTO_AGG_TOPK = 1,  /* union of the sparse pushes */
    PROTO_AGG_GTOPK = 2, /* global top-k of the summed sparse pushes */
} proto_agg;

/* Learning rate over the iterations: lr_at(t) = lr * factor(t). */
typedef enum {
    PROTO_LR_CONSTANT = 0,
    PROTO_LR_COSINE = 1, /* (1 + cos(pi * t / iterations)) / 2 */
} proto_lr_schedule;

typedef enum {
    PROTO_MODE_SSGD = 0,  /* synchronous: one update per iteration */
    PROTO_MODE_ASYNC = 1, /* apply every push at once */
    /* Synchronous, sample-weighted (FedAvg with a round deadline): every
     * PUSH carries its weight (header key "wt") and the update is
     * -lr_at(t) * sum(pushes) / sum(weights) instead of / workers; an
     * iteration whose weights sum to 0 changes nothing. */
    PROTO_MODE_WEIGHTED = 2,
} proto_mode;

/* What the shards do with a synchronous iteration's update U (the scaled
 * sum of the pushes) before applying it (docs/algorithms.md, "Server
 * optimizers"): apply U (sgd); keep v <- beta * v + U and apply v
 * (momentum, FedAvgM); or Adam's step on U (adam, FedAdam). Values are
 * pinned: they go on the wire. */
typedef enum {
    PROTO_SOPT_SGD = 0,
    PROTO_SOPT_MOMENTUM = 1,
    PROTO_SOPT_ADAM = 2,
} proto_server_opt;

/* The largest weight a PUSH may carry. */
#define PROTO_WEIGHT_MAX 1e15

/* One frame of an encoded message. */
typedef struct proto_frame {
    const void *data;
    size_t len;
} proto_frame;

/* The job configuration every worker sends with REGISTER; all must agree. */
typedef struct proto_jobcfg {
    uint32_t shard; /* which shard this message is for */
    uint32_t nshards;
    uint32_t workers;
    uint32_t part_size;
    uint8_t mode;   /* proto_mode */
    uint8_t agg;    /* proto_agg */
    double density; /* gtopk: k = max(floor(density * numel), 1) */
    double lr;
    uint8_t lr_schedule;                  /* proto_lr_schedule */
    uint64_t iterations;                  /* the schedule's length */
    char compression[PROTO_SPEC_MAX + 1]; /* the workers' codec spec */
    /* Density warm-up (codec_warmup_density): over the first
     * density_warmup iterations the density decays from density_start to
     * density; gtopk's k of iteration t follows it. 0 = none (and
     * density_start is then 0). Sent only when density_warmup > 0, so a
     * REGISTER without it reads as no warm-up. */
    uint64_t density_warmup;
    double density_start;
    /* The server optimizer (proto_server_opt) and momentum's beta in
     * [0, 1) (0 for the others). Sent only when server_opt is not sgd, so
     * a REGISTER without them reads as sgd. */
    uint8_t server_opt;
    double server_beta;
    /* The even map (partmap_build_even) with pieces of at most this many
     * values, for dense jobs whose codec sums element by element; 0: the
     * map of parts placed largest first (partmap_build_pieces), as every
     * REGISTER before it had. Sent only when not 0, as a 16th field after
     * the four above (which are then sent as they are, sgd included). */
    uint32_t piece;
} proto_jobcfg;

/* The learning rate of iteration t under cfg's schedule. */
double proto_jobcfg_lr_at(const proto_jobcfg *cfg, uint64_t t);

typedef struct proto_tensor {
    char name[PROTO_NAME_MAX + 1];
    uint64_t numel;
} proto_tensor;

/* One part of a message that carries several (a sparse PUSH or UPDATE
 * with segs): its pairs are n consecutive entries of the message's idx and
 * val frames, after those of the segments before it; its indices are
 * relative to its part and strictly ascending. */
typedef struct proto_seg {
    uint32_t part;
    uint32_t n;
    uint32_t nrej;    /* UPDATE: its entries of the rejected-index frame */
    uint64_t version; /* UPDATE: the part's version after the update */
} proto_seg;

/* A decoded message. Pointers into frames are borrowed from the buffers
 * given to proto_msg_decode and valid while those are. The tensor list of
 * a REGISTER is owned by the message: free with proto_msg_fini(). */
typedef struct proto_msg {
    uint8_t op;
    char job[PROTO_JOB_MAX + 1];
    uint32_t rank;
    uint32_t part;
    uint64_t iter;
    uint64_t version;
    uint8_t codec;                 /* proto_codec */
    uint32_t n;                    /* elements in idx/val */
    const uint32_t *idx;           /* SPARSE: n indices */
    const float *val;              /* n values */
    char spec[PROTO_SPEC_MAX + 1]; /* ENCODED: the codec spec */
    uint32_t nenc;                 /* ENCODED: payload frames (1..2) */
    proto_frame enc[PROTO_ENC_MAX_FRAMES];
    uint32_t nrej;       /* UPDATE (gtopk): indices of this worker's push */
    const uint32_t *rej; /* that the update did not take */
    uint32_t status;     /* ERROR: an flps_err; ACK: op-specific flag */
    /* ACK of an async push and PULL_REPLY of an async part: the slowest
     * rank's next iteration on the part (every rank has pushed the
     * iterations below it), for bounded staleness (ssp). The optional
     * header key "slow"; 0 when absent. */
    uint64_t slowest;
    /* PUSH of a weighted job (PROTO_MODE_WEIGHTED): this push's weight,
     * finite, in [0, PROTO_WEIGHT_MAX]; header key "wt", present when
     * has_weight. */
    double weight;
    uint8_t has_weight;
    char text[PROTO_ERRMSG_MAX + 1]; /* ERROR: human message */
    /* Requests of a client holding the job's credentials: the job's
     * secret (optional header key "auth"; "" when absent) and the
     * client's random instance id (key "cid"; 0 when absent), to which a
     * shard binds the rank that registered with it. */
    char auth[PROTO_AUTH_MAX + 1];
    uint64_t cid;
    proto_jobcfg cfg;  /* REGISTER */
    uint32_t ntensors; /* REGISTER */
    proto_tensor *tensors;
    /* A sparse PUSH or UPDATE of several parts: nsegs (>= 1) segments in
     * ascending part order; part is then the first one's, n and nrej the
     * totals, version unused. 0: one part, as the fields above say. */
    uint32_t nsegs;
    proto_seg *segs; /* decoded: owned by the message; encoding: borrowed */
    /* Decoded: the protocol version the sender wrote
     * (PROTO_VERSION_MIN..PROTO_VERSION). Encoding: 0 or PROTO_VERSION
     * writes PROTO_VERSION; an older one that decoders read is written
     * for a message without index frames (a shard's ERROR answering an
     * older peer in the version it reads), while one with index frames
     * (sparse, or an UPDATE) is written in PROTO_VERSION, whose content
     * is the same. Another value is FLPS_EINVAL. */
    uint32_t wire_version;
    /* Decoded from compact index frames (version 3): the n indices then
     * the nrej rejected ones, which idx and rej point into. Owned by the
     * message (proto_msg_fini frees it) until proto_msg_take_expanded;
     * NULL when the message has none (idx and rej then point into the
     * frames, or nowhere). */
    uint32_t *expanded;
} proto_msg;

/* Take the storage m's idx and rej point into when they were expanded
 * from compact frames (NULL otherwise): the caller owns it (flps_free)
 * and may keep using idx and rej of m and of its copies after
 * proto_msg_fini(m), until it frees it. For a holder that keeps a
 * message past its handler (a shard holding a push until the iteration
 * closes). */
uint32_t *proto_msg_take_expanded(proto_msg *m);

/* The view of segment i of a message with segs as a one-part message
 * (nsegs 0; idx, val and rej pointing at the segment's entries; owning
 * nothing: expanded NULL). off_pairs
 * and off_rej are the entries of the segments before i: callers walking
 * the segments in order keep them as running sums. */
void proto_msg_seg_view(const proto_msg *m, uint32_t i, size_t off_pairs,
                        size_t off_rej, proto_msg *out);

/* Encode msg's header into *hdr (caller owns, free with free()) and fill
 * frames[0..*nframes) with the header followed by the payload frames. The
 * header frame and the index frames (compact: idx of a sparse message,
 * rej of an UPDATE) lie in the *hdrlen bytes at *hdr, the header first;
 * the value frame points at msg->val (borrowed, not copied). A caller
 * mapping frames to buffers tells them apart by address. Indices must be
 * strictly ascending (within each segment, for a message with segs), as
 * the decoder requires: FLPS_EINVAL otherwise. The frame layout per op:
 *   PUSH/INIT DENSE: hdr, val      PUSH SPARSE: hdr, idx, val
 *   PUSH ENCODED: hdr, enc[0..nenc)
 *   UPDATE DENSE: hdr, val, rej    UPDATE SPARSE: hdr, idx, val, rej
 *   PULL_REPLY DENSE: hdr, val     PULL_REPLY SPARSE: hdr, idx, val
 *   others: hdr
 * A sparse PULL_REPLY (an async part's answer to a PULL naming the
 * version the worker holds) carries the current values of the elements
 * that changed since that version.
 * A message with segs (sparse PUSH or UPDATE only) has the same frames,
 * holding every segment's entries one after another; n and nrej must be
 * the segments' totals (FLPS_EINVAL otherwise).
 * Errors: FLPS_EINVAL (unknown op, too long strings), FLPS_ENOMEM. */
flps_err proto_msg_encode(const proto_msg *msg, void **hdr, size_t *hdrlen,
                          proto_frame frames[PROTO_MAX_FRAMES],
                          size_t *nframes);

/* Decode and validate nframes frames into *out: version, known op, the
 * fields each op requires, frame count and sizes matching n, finite values,
 * strictly ascending indices and rejected indices (within each segment,
 * for a message with segs; whose parts must be strictly ascending and
 * whose counts must add up to n and nrej), compact index frames read to
 * their last byte and no further, every varint in its shortest form and
 * every index below 2^32. Index ranges depend on the part and are
 * checked by the shard. Frames of u32 or f32 whose data is not 4-byte
 * aligned are rejected with FLPS_EPROTO (transports deliver aligned
 * buffers); compact index frames may lie anywhere. Indices of compact
 * frames are expanded into out->expanded (allocated: at most 4 bytes per
 * byte of those frames).
 * On error returns FLPS_EPROTO (or FLPS_ENONFINITE for NaN/Inf values,
 * FLPS_ENOMEM) and writes a reason into errbuf; *out untouched. */
flps_err proto_msg_decode(const proto_frame *frames, size_t nframes,
                          proto_msg *out, char *errbuf, size_t errlen);

/* Flags of proto_msg_decode_ex. */
enum {
    /* The values of a DENSE UPDATE are not scanned for NaN and Inf: the
     * caller checks them in the pass that uses them (a worker applying
     * its update: one pass over the values, not two). Everything else is
     * checked as by proto_msg_decode. */
    PROTO_DECODE_UPDATE_VALUES_UNCHECKED = 1u << 0,
};

/* proto_msg_decode with flags (PROTO_DECODE_*). */
flps_err proto_msg_decode_ex(const proto_frame *frames, size_t nframes,
                             unsigned flags, proto_msg *out, char *errbuf,
                             size_t errlen);

/* Frees what a decoded message owns (the tensor list, the segments, the
 * expanded indices). */
void proto_msg_fini(proto_msg *msg);

const char *proto_op_name(uint8_t op);

#endif
