/* Internal to ps/shard*.c: the shard's state, which file owns which of it,
 * and the calls the files make of each other. One file per layer:
 *   shard.c          life (create, restore, destroy) and the message switch,
 *                    with the credentials check
 *   shard_layout.c   REGISTER, the layout and the parts this shard owns
 *   shard_pull.c     INIT and PULL
 *   shard_agg.c      PUSH: its checks, async pushes, pushes of several parts
 *   shard_close.c    closing a synchronous iteration, step by step
 *   shard_durable.c  the write-ahead log, checkpoints, CHECKPOINT, restore
 *   shard_reply.c    replies, refusals and the buffers replies are built in
 * "Owns" below means: the one file that writes the field (others read it),
 * or the files named with it. Not for use outside ps/shard*.c. */
#ifndef FLPS_PS_SHARD_IMPL_H
#define FLPS_PS_SHARD_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
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

/* One part this shard owns. shard_layout.c makes and frees it. */
typedef struct ps_part {
    /* shard_layout.c, set when the part is made. */
    uint32_t id;
    uint32_t numel;
    /* The values and their version, changed only by an applied update:
     * shard_pull.c (INIT), shard_close.c (a closed iteration), shard_agg.c
     * (an async push), shard_durable.c (restore). */
    float *w;
    uint64_t version; /* bumped by every applied update */
    uint64_t iter;    /* sync: the open iteration (shard_close.c, restore);
                         async: unused */
    int initialized;  /* shard_pull.c (INIT), shard_durable.c (restore) */
    /* shard_agg.c holds the open iteration's pushes, shard_close.c drops
     * them when it closes or refuses the iteration. */
    uint32_t arrived;
    /* CLOCK_MONOTONIC seconds when the open iteration's first push
     * arrived, for cfg.on_close (the close-latency histogram). */
    double first_push_s;
    transport_rx **rx; /* per rank: the waiting push, or NULL */
    proto_msg *push;   /* per rank: its decoded header (points into rx) */
    uint32_t *peer;    /* per rank: where to send the update */
    float **decoded;   /* per rank: a codec-encoded push (fp16, qsgd, sign),
                          decoded for dense aggregation; made on first use */
    /* shard_layout.c makes it, shard_close.c and shard_durable.c (restore)
     * write it: the server optimizer's state (ps_sopt_nstate floats per
     * element: momentum's velocity, Adam's two moments one after the
     * other), NULL for sgd. */
    float *sopt;
    /* shard_reply.c: update payloads, reused once the transport is done
     * with them (ps_shard_reply_buf); NULL where empty. */
    proto_buf *reply[PS_REPLY_POOL];
    /* shard_agg.c (async pushes), shard_durable.c (restore): per rank,
     * last iteration applied + 1. */
    uint64_t *last_async;
    /* shard_agg.c: async, per element, the part's version when it last
     * changed, so a pull naming the version a worker holds is answered
     * with only what changed since. Made at the first async push, filled
     * with the version then (every element "changed" up to it); NULL
     * before, and in synchronous jobs. */
    uint64_t *touched;
    ps_pull_wait *pulls; /* shard_pull.c: pulls waiting for initial values */
    /* shard_durable.c: sync, the update that closed iteration iter - 1, as
     * logged (a copy), so a push for that iteration is answered with it
     * (a worker that missed it, or one restarted at the lowest open
     * iteration of the job: docs/design.md, "Rejoining after a crash").
     * Rebuilt on restore from the log, where every checkpoint writes it
     * again. last_n is valid only while has_last. */
    int has_last;
    uint8_t last_kind;     /* WAL_ADD_SPARSE or WAL_ADD_DENSE */
    uint32_t last_n;       /* entries */
    uint64_t last_version; /* the part's version after it */
    uint32_t *last_idx;    /* sparse: ascending, part-relative */
    float *last_val;
    size_t last_cap; /* entries of last_idx and last_val */
    /* shard_pull.c adds, shard_reply.c forgets those sent: pull replies
     * maybe still being sent. */
    ps_pull_out *out;
    uint32_t nout, out_cap;
} ps_part;

/* A sparse UPDATE held back while a message of several parts is handled,
 * to go out with the others for the same peer as one message. */
typedef struct ps_held_reply {
    uint32_t peer;
    ps_reply rep; /* holds its payload and rej */
} ps_held_reply;

struct ps_shard {
    /* shard.c, set at create. */
    ps_shard_config cfg;
    char job[PROTO_JOB_MAX + 1];
    /* Counters: each file counts what it does. */
    ps_shard_stats stats;
    /* shard_durable.c: the files. */
    char ckpt_path[4096];
    char wal_path[4096];
    int wal_fd;
    int broken;   /* a log append failed: see ps_shard_is_broken */
    int restored; /* the layout came from a checkpoint, not a REGISTER */
    double ckpt_req_mono; /* when a requested checkpoint was last written */
    time_t ckpt_req_wall; /* the same, as wall-clock time for the reply */
    int ckpt_req_done;    /* whether there was one */
    /* shard_layout.c: the layout, set by the first REGISTER or a restore
     * and kept until destroy. */
    int configured;
    proto_jobcfg jc;
    uint32_t ntensors;
    proto_tensor *tensors;
    partmap pm;
    ps_part **parts; /* by part id; NULL where another shard owns it */
    uint32_t nowned;
    /* Per rank: 1 + the peer that last spoke as that rank in an accepted
     * REGISTER or request (0: none yet), so only members of the job may
     * ask for checkpoints. workers entries, with the layout. Written by
     * shard_layout.c, and by shard_durable.c after a restore. */
    uint32_t *member;
    /* With cfg.secret, per rank: the client instance (cid) the rank is
     * bound to, 0 while unbound. workers entries, with the layout.
     * Written by shard_layout.c (REGISTER) and shard.c (first request
     * after a restore). */
    uint64_t *owner;
    /* shard_close.c's scratch for closing an iteration (merge and topk
     * made with the layout, the rest grown to the largest use): they hold
     * what is being aggregated, never a part's worth unless that much was
     * pushed. shard_layout.c frees them with the layout. */
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
    float *delta;     /* shard_agg.c, async: the update of one push */
    size_t delta_cap; /* entries of delta */
    /* shard_close.c, a server optimizer's close: the update before it (as
     * logged) and the state after it, until the close commits it. */
    uint32_t *raw_idx;
    float *raw_val;
    size_t raw_cap; /* entries of raw_idx and raw_val */
    float *sopt_next;
    size_t sopt_next_cap; /* floats of sopt_next */
    /* shard_reply.c: set (by shard_agg.c) while a push of several parts
     * is handled; its sparse UPDATE replies wait in held and leave as one
     * message per peer. */
    int defer;
    ps_held_reply *held;
    size_t nheld, held_cap;
    /* shard_reply.c: refusals logged per reason in the current minute
     * (the first PS_REFUSAL_LOG_BURST; then counted and summed up in one
     * line). */
    double log_since[FLPS_ERR_COUNT_];
    uint32_t log_count[FLPS_ERR_COUNT_];
    uint64_t log_quiet[FLPS_ERR_COUNT_];
};

/* 1 when x is Inf or NaN. A bit test rather than isfinite(): an integer
 * or-reduction the compiler vectorizes inside the loops that compute an
 * update, so the check costs no pass of its own. */
static inline uint32_t ps_nonfinite_bit(float x)
{
    uint32_t b;

    memcpy(&b, &x, sizeof(b));
    return (b & 0x7f800000u) == 0x7f800000u;
}

/* ---- shard_layout.c ---- */

/* Handle a REGISTER m from peer: the first one (checked against the
 * shard's limits) sets the layout and writes a first checkpoint; every
 * later one must match it. Binds the rank to peer (and, with a secret, to
 * m's client). Returns the refusal's code (answered and counted) or
 * FLPS_OK (answered with REGISTER_OK). */
flps_err ps_shard_on_register(ps_shard *s, uint32_t peer, const proto_msg *m);

/* Set the layout: the partition map of tensors t[0..nt) for job config c,
 * the parts this shard owns (values zero, uninitialised), membership, and
 * the close's merge and top-k. On error nothing is set. */
flps_err ps_layout_configure(ps_shard *s, const proto_jobcfg *c,
                             const proto_tensor *t, uint32_t nt);

/* Free the layout, the parts and every scratch buffer sized by them; the
 * shard is unconfigured again. */
void ps_layout_drop(ps_shard *s);

/* The owned part m names (initialised, if need_init), or NULL after
 * answering the refusal, whose code is then in *err. Marks peer as a
 * member speaking as m's rank. */
ps_part *ps_shard_request_part(ps_shard *s, uint32_t peer, const proto_msg *m,
                               int need_init, flps_err *err);

/* ---- shard_pull.c ---- */

/* Handle an INIT m from peer: the part's initial values, logged, then
 * sent to the pulls that waited for them. Returns the refusal's code or
 * FLPS_OK (answered with an ACK). */
flps_err ps_shard_on_init(ps_shard *s, uint32_t peer, const proto_msg *m);

/* Handle a PULL m from peer: the part's values (or, async, what changed
 * since the version m names), or a wait for its initial values. Returns
 * the refusal's code, FLPS_EDUP for a PULL ignored while the last reply
 * to peer is still being sent, or FLPS_OK. */
flps_err ps_shard_on_pull(ps_shard *s, uint32_t peer, const proto_msg *m);

/* ---- shard_agg.c ---- */

/* Async parts: the slowest rank's next iteration on p (the lowest of
 * last_async), sent in ACKs and pull replies for bounded staleness. 0 for
 * a part of a synchronous job. */
uint64_t ps_part_slowest(const ps_shard *s, const ps_part *p);

/* Handle a PUSH m decoded from rx: check it, then apply it (async) or
 * hold it until every worker pushed the part's iteration (sync), which
 * closes the iteration (ps_close_iteration) and sends the update to every
 * worker. *kept is set when the shard keeps rx (released when the
 * iteration closes). Returns the refusal's code (answered and counted) or
 * FLPS_OK, or the close's failure. */
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
flps_err ps_agg_push_segs(ps_shard *s, transport_rx *rx, proto_msg *m);

/* Handle any PUSH m decoded from rx: ps_agg_push_segs for one of several
 * parts, else ps_agg_push. Takes rx, and the indices m expanded from
 * compact frames (m->expanded), which go when the last part holding the
 * push releases rx. Returns what those return. */
flps_err ps_agg_push_msg(ps_shard *s, transport_rx *rx, proto_msg *m);

/* ---- shard_close.c ---- */

/* Close the open iteration of p, every rank's push held: compute the
 * update (the pushes summed in rank order, so the result does not depend
 * on arrival order; gtopk's selection; scaled), log it, apply it, answer
 * every rank with it, and open the next iteration. An update that is not
 * finite (FLPS_ENONFINITE) or cannot be computed (FLPS_ENOMEM) is refused
 * to every rank of the iteration, which stays open with nothing applied
 * or logged. A failed log append is logged and returned with the shard
 * broken (ps_shard_is_broken): the daemon must stop. */
flps_err ps_close_iteration(ps_shard *s, ps_part *p);

/* Answer m, a push for the iteration p closed last (m->iter + 1 ==
 * p->iter, p->has_last), with the update that closed it and the indices
 * of m it did not take. Nothing is applied. Returns FLPS_OK, or
 * FLPS_ENOMEM (answered with an ERROR). */
flps_err ps_close_answer_late(ps_shard *s, uint32_t peer, const ps_part *p,
                              const proto_msg *m);

/* Scratch buf of *cap elements of elem bytes, grown to hold at least n:
 * returns buf itself when it is large enough, else a new buffer (buf is
 * freed, *cap updated, contents not kept), or NULL when out of memory
 * (buf and *cap unchanged; the caller still owns buf). */
void *ps_shard_grow(void *buf, size_t *cap, size_t n, size_t elem);

/* ---- shard_sopt.c ---- */

/* Floats of server-optimizer state per element of a part: 0 (sgd), 1
 * (momentum) or 2 (adam). */
uint32_t ps_sopt_nstate(const proto_jobcfg *jc);

/* One server-optimizer step of p for iteration iter: from the update u
 * (dense when idx is NULL, n == p->numel; else n pairs, idx ascending)
 * and p->sopt, the update to add to p->w into out (numel floats) and the
 * state after the step into next (nstate * numel), neither touching p.
 * Returns non-zero when some p->w + out is not finite. jc must have a
 * server optimizer other than sgd. */
uint32_t ps_sopt_step(const proto_jobcfg *jc, const ps_part *p, uint64_t iter,
                      const uint32_t *idx, const float *u, uint32_t n,
                      float *out, float *next);

/* ---- shard_durable.c ---- */

/* Set s's file paths from cfg.ckpt_dir and open the write-ahead log: with
 * restore, after restoring the layout and parts from the checkpoint there
 * and replaying the log onto them (a missing checkpoint: the shard starts
 * empty); without, after removing an old log. Errors: those of the
 * restore (logged) and of wal_open; the caller destroys s. */
flps_err ps_shard_open_files(ps_shard *s, int restore);

/* Append r to the write-ahead log, when there is one. Errors: those of
 * wal_append; the caller must not acknowledge what failed, and the shard
 * is broken from then on (ps_shard_is_broken). */
flps_err ps_shard_wal(ps_shard *s, const wal_record *r);

/* Log r, the update that closes p's open iteration (ps_shard_wal), and
 * keep it (or, when not NULL, keep: what a server optimizer made of r) as
 * p's last update to answer a late push with. Errors: those of
 * ps_shard_wal. */
flps_err ps_shard_log_close(ps_shard *s, ps_part *p, const wal_record *r,
                            const wal_record *keep);

/* Handle a CHECKPOINT request m from peer: only members of the job may
 * ask, at most once per ckpt_request_interval_s (a sooner one is answered
 * with an ACK of status 1 naming the last). Returns the refusal's code or
 * FLPS_OK. */
flps_err ps_shard_on_checkpoint(ps_shard *s, uint32_t peer, const proto_msg *m);

/* ---- shard_reply.c ---- */

/* Start a reply: every header field the callers set alike, no payload. */
void ps_shard_reply_init(const ps_shard *s, ps_reply *r, proto_op op,
                         uint32_t rank, uint32_t part, uint64_t iter,
                         uint64_t version);

/* Refuse req (NULL: a message that did not decode) from peer: count it
 * under err, log it, and answer an ERROR with the formatted text (made
 * valid UTF-8 without control characters: quote a peer's values with
 * flps_quote as well, so they cannot be mistaken for the shard's words). */
void ps_shard_reply_error(ps_shard *s, uint32_t peer, const proto_msg *req,
                          flps_err err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* As ps_shard_reply_error for a request not known to be a member's yet
 * (it did not decode, or lacks the job's secret): with a secret, the
 * reply's header names the request's job (none when req is NULL), not
 * this shard's, so a refusal tells a stranger nothing of the shard. (A
 * shard without one serves whoever knows its job.) */
void ps_shard_refuse_stranger(ps_shard *s, uint32_t peer, const proto_msg *req,
                              flps_err err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Answer req with an ACK carrying status, text and version. */
void ps_shard_reply_ack(ps_shard *s, uint32_t peer, const proto_msg *req,
                        uint32_t status, const char *text, uint64_t version);

/* Whether to log a refusal for err now: the first PS_REFUSAL_LOG_BURST of
 * a minute, then one line with the count when the next minute's first
 * comes. Counts the ones it holds back. */
int ps_shard_refusal_log_ok(ps_shard *s, flps_err err);

/* A buffer of at least len bytes for an update of p, from p's pool: one
 * that nobody else holds any more, else a new one of room bytes (at least
 * len: room to spare for updates that vary in size) that takes a slot (the
 * transport keeps its own references to a buffer it still sends). The
 * pool keeps the reference: the caller sends from it and never releases
 * it. At most one idle buffer stays, and none much larger than room, so
 * the pool holds about one update's worth. NULL when out of memory. */
proto_buf *ps_shard_reply_buf(ps_part *p, size_t len, size_t room);

/* Forget the pull replies of p the transport is done with; returns whether
 * one to peer is still being sent. */
int ps_part_pull_in_flight(ps_part *p, uint32_t peer);

/* Send rep to peer through the configured callback, or hold it while
 * s->defer is set and it is a sparse UPDATE (ps_shard_flush_replies sends
 * it with the others of its peer). */
void ps_shard_send(ps_shard *s, uint32_t peer, const ps_reply *rep);

/* Send what ps_shard_send held: one UPDATE per (peer, iteration) carrying
 * every part's update as segments, or the reply itself when it is alone.
 * Drops the held references. */
void ps_shard_flush_replies(ps_shard *s);

/* Drop what ps_shard_send holds without sending it, and its list. */
void ps_shard_drop_held(ps_shard *s);

#endif
