/* Internal to ps/shard*.c: the shard's state and the calls its two
 * files make of each other. shard.c holds the layout, registration,
 * init/pull, the message switch and durability; shard_agg.c the pushes
 * and their aggregation (synchronous iterations and asynchronous
 * updates). Not for use outside ps/shard*.c. */
#ifndef FLPS_PS_SHARD_IMPL_H
#define FLPS_PS_SHARD_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "compress/topk.h"
#include "proto/msg.h"
#include "proto/partmap.h"
#include "proto/transport.h"
#include "ps/merge.h"
#include "ps/persist.h"
#include "ps/shard.h"

typedef struct ps_pull_wait {
    uint32_t peer;
    uint32_t rank;
    struct ps_pull_wait *next;
} ps_pull_wait;

/* A pull reply the transport may still be sending: the part keeps a
 * reference to its buffer, so a peer is sent one copy of a part at a
 * time however many PULLs it sends without reading. */
typedef struct ps_pull_out {
    uint32_t peer;
    proto_buf *buf;
} ps_pull_out;

/* Reply buffers a part keeps: one is enough while each update is sent
 * before the next iteration closes (a synchronous worker pushes again only
 * after it received the update); the second covers a close that comes
 * while the transport still sends the previous update. */
#define PS_REPLY_POOL 2

typedef struct ps_part {
    uint32_t id;
    uint32_t numel;
    float *w;
    uint64_t version; /* bumped by every applied update */
    uint64_t iter;    /* sync: the open iteration; async: unused */
    int initialized;
    /* Synchronous aggregation of the open iteration. */
    uint32_t arrived;
    /* CLOCK_MONOTONIC seconds when the open iteration's first push
     * arrived, for cfg.on_close (the close-latency histogram). */
    double first_push_s;
    transport_rx **rx; /* per rank: the waiting push, or NULL */
    proto_msg *push;   /* per rank: its decoded header (points into rx) */
    uint32_t *peer;    /* per rank: where to send the update */
    float **decoded;   /* per rank: a codec-encoded push (fp16, qsgd, sign),
                          decoded for dense aggregation; made on first use */
    /* Update payloads, reused once the transport is done with them
     * (ps_shard_reply_buf); NULL where empty. */
    proto_buf *reply[PS_REPLY_POOL];
    uint64_t *last_async; /* async: per rank, last iteration applied + 1 */
    /* Async: per element, the part's version when it last changed, so a
     * pull naming the version a worker holds is answered with only what
     * changed since. Made at the first async push, filled with the
     * version then (every element "changed" up to it); NULL before, and
     * in synchronous jobs. */
    uint64_t *touched;
    ps_pull_wait *pulls; /* pulls waiting for initial values */
    /* Sync: the update that closed iteration iter - 1, as logged (a copy),
     * so a push for that iteration is answered with it (a worker that
     * missed it, or one restarted at the lowest open iteration of the
     * job: docs/design.md, "Rejoining after a crash"). Rebuilt on restore
     * from the log, where every checkpoint writes it again. last_n is
     * valid only while has_last. */
    int has_last;
    uint8_t last_kind;     /* WAL_ADD_SPARSE or WAL_ADD_DENSE */
    uint32_t last_n;       /* entries */
    uint64_t last_version; /* the part's version after it */
    uint32_t *last_idx;    /* sparse: ascending, part-relative */
    float *last_val;
    size_t last_cap;  /* entries of last_idx and last_val */
    ps_pull_out *out; /* pull replies maybe still being sent */
    uint32_t nout, out_cap;
} ps_part;

/* A sparse UPDATE held back while a message of several parts is handled,
 * to go out with the others for the same peer as one message. */
typedef struct ps_held_reply {
    uint32_t peer;
    ps_reply rep; /* holds its payload and rej */
} ps_held_reply;

struct ps_shard {
    ps_shard_config cfg;
    char job[PROTO_JOB_MAX + 1];
    char ckpt_path[4096];
    char wal_path[4096];
    int wal_fd;
    int configured;
    proto_jobcfg jc;
    uint32_t ntensors;
    proto_tensor *tensors;
    partmap pm;
    ps_part **parts; /* by part id; NULL where another shard owns it */
    uint32_t nowned;
    /* Scratch for closing an iteration and applying an async push, grown
     * to the largest use (they hold what is being aggregated, never a
     * part's worth unless that much was pushed). */
    ps_merge *merge;  /* the P-way merge of sparse pushes */
    float *acc;       /* the scatter-add's window: zero but while summing */
    uint64_t *bits;   /* its first-touch bitmap, zero but while summing */
    uint32_t *pos;    /* per rank: the next pair of its push to scatter */
    size_t acc_cap;   /* elements of acc (bits: acc_cap / 64 + 1 words) */
    topk_ctx *topk;   /* gtopk's selection */
    uint32_t *u_idx;  /* gtopk: the union of the pushed indices */
    float *u_sum;     /* gtopk: their sums */
    size_t u_cap;     /* entries of u_idx and u_sum */
    uint32_t *sel;    /* gtopk: the selected positions in the union */
    size_t sel_cap;   /* entries of sel */
    float *delta;     /* async: the update of one push */
    size_t delta_cap; /* entries of delta */
    /* Set while a push of several parts is handled: its sparse UPDATE
     * replies wait in held and leave as one message per peer. */
    int defer;
    ps_held_reply *held;
    size_t nheld, held_cap;
    int broken; /* a log append failed: see ps_shard_is_broken */
    /* Refusals logged per reason in the current minute (the first
     * PS_REFUSAL_LOG_BURST; then counted and summed up in one line). */
    double log_since[FLPS_ERR_COUNT_];
    uint32_t log_count[FLPS_ERR_COUNT_];
    uint64_t log_quiet[FLPS_ERR_COUNT_];
    /* Per rank: 1 + the peer that last spoke as that rank in an accepted
     * REGISTER or request (0: none yet), so only members of the job may
     * ask for checkpoints. workers entries, with the layout. */
    uint32_t *member;
    /* With cfg.secret, per rank: the client instance (cid) the rank is
     * bound to, 0 while unbound. workers entries, with the layout. */
    uint64_t *owner;
    int restored; /* the layout came from a checkpoint, not a REGISTER */
    double ckpt_req_mono; /* when a requested checkpoint was last written */
    time_t ckpt_req_wall; /* the same, as wall-clock time for the reply */
    int ckpt_req_done;    /* whether there was one */
    ps_shard_stats stats;
};

/* ---- shard.c ---- */

/* Async parts: the slowest rank's next iteration on p (the lowest of
 * last_async), sent in ACKs and pull replies for bounded staleness. 0 for
 * a part of a synchronous job. */
uint64_t ps_part_slowest(const ps_shard *s, const ps_part *p);

/* Start a reply: every header field the callers set alike, no payload. */
void ps_shard_reply_init(const ps_shard *s, ps_reply *r, proto_op op,
                         uint32_t rank, uint32_t part, uint64_t iter,
                         uint64_t version);

/* Refuse req (NULL: a message that did not decode) from peer: count it
 * under err, log it, and answer an ERROR with the formatted text. */
void ps_shard_reply_error(ps_shard *s, uint32_t peer, const proto_msg *req,
                          flps_err err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Answer req with an ACK carrying status, text and version. */
void ps_shard_reply_ack(ps_shard *s, uint32_t peer, const proto_msg *req,
                        uint32_t status, const char *text, uint64_t version);

/* The owned part m names (initialised, if need_init), or NULL after
 * answering the refusal, whose code is then in *err. */
ps_part *ps_shard_request_part(ps_shard *s, uint32_t peer, const proto_msg *m,
                               int need_init, flps_err *err);

/* A buffer of at least len bytes for an update of p, from p's pool: one
 * that nobody else holds any more, else a new one of room bytes (at least
 * len: room to spare for updates that vary in size) that takes a slot (the
 * transport keeps its own references to a buffer it still sends). The
 * pool keeps the reference: the caller sends from it and never releases
 * it. At most one idle buffer stays, and none much larger than room, so
 * the pool holds about one update's worth. NULL when out of memory. */
proto_buf *ps_shard_reply_buf(ps_part *p, size_t len, size_t room);

/* Scratch buf of *cap elements of elem bytes, grown to hold at least n:
 * returns buf itself when it is large enough, else a new buffer (buf is
 * freed, *cap updated, contents not kept), or NULL when out of memory
 * (buf and *cap unchanged; the caller still owns buf). */
void *ps_shard_grow(void *buf, size_t *cap, size_t n, size_t elem);

/* Send rep to peer through the configured callback, or hold it while
 * s->defer is set and it is a sparse UPDATE (ps_shard_flush_replies sends
 * it with the others of its peer). */
void ps_shard_send(ps_shard *s, uint32_t peer, const ps_reply *rep);

/* Send what ps_shard_send held: one UPDATE per (peer, iteration) carrying
 * every part's update as segments, or the reply itself when it is alone.
 * Drops the held references. */
void ps_shard_flush_replies(ps_shard *s);

/* Keep r (a synchronous close, already logged) as p's last update;
 * FLPS_ENOMEM leaves p without one (a later push for that iteration is
 * refused as late, and the worker pulls the part). */
flps_err ps_part_keep_last(ps_part *p, const wal_record *r);

/* Append r to the write-ahead log, when there is one. Errors: those of
 * wal_append; the caller must not acknowledge what failed, and the shard
 * is broken from then on (ps_shard_is_broken). */
flps_err ps_shard_wal(ps_shard *s, const wal_record *r);

/* ---- shard_agg.c ---- */

/* Handle a PUSH m decoded from rx: check it, then apply it (async) or
 * hold it until every worker pushed the part's iteration (sync), which
 * closes the iteration and sends the update to every worker. *kept is
 * set when the shard keeps rx (released when the iteration closes).
 * Returns the refusal's code (answered and counted) or FLPS_OK. A close
 * whose update is not finite (FLPS_ENONFINITE) or cannot be computed
 * (FLPS_ENOMEM) is refused to every rank of the iteration, which stays
 * open with nothing applied. When ps_shard_is_broken is set afterwards
 * the update could not be logged: the daemon must stop. */
flps_err ps_agg_push(ps_shard *s, transport_rx *rx, const proto_msg *m,
                     int *kept);

/* Handle a sparse PUSH of several parts (m->nsegs > 0): every segment is
 * checked against the layout first (part held, initialised, rank, index
 * range), and a message with one bad segment is refused whole; then each
 * segment is handled as ps_agg_push handles a push of one part (its
 * iteration checks and refusals are its own: a re-sent message finds some
 * parts already held), the parts keeping views of rx. Updates the
 * segments close go out as one message per peer. Takes rx. Stops at the
 * first close that breaks the shard (ps_shard_is_broken); returns the
 * last refusal's or failure's code, else FLPS_OK. */
flps_err ps_agg_push_segs(ps_shard *s, transport_rx *rx, const proto_msg *m);

#endif
