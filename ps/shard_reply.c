/* A shard's replies: the common header, refusals (an ERROR, counted and
 * logged at a bounded rate) and acknowledgements; the buffers a part's
 * replies are built in (its pool, and the pull replies the transport may
 * still be sending); and the sparse UPDATEs of a push of several parts,
 * held and sent as one message per peer. */
#include "ps/shard_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/quote.h"

void ps_shard_reply_init(const ps_shard *s, ps_reply *r, proto_op op,
                         uint32_t rank, uint32_t part, uint64_t iter,
                         uint64_t version)
{
    memset(r, 0, sizeof(*r));
    r->msg.op = op;
    snprintf(r->msg.job, sizeof(r->msg.job), "%s", s->job);
    r->msg.rank = rank;
    r->msg.part = part;
    r->msg.iter = iter;
    r->msg.version = version;
}

/* Refusals each reason logs per minute before it only counts them. */
#define PS_REFUSAL_LOG_BURST 5

/* Whether to log a refusal for err: the first PS_REFUSAL_LOG_BURST of a
 * minute, then one line with the count when the next minute's first
 * comes (200k refused messages logged 35 MB). */
int ps_shard_refusal_log_ok(ps_shard *s, flps_err err)
{
    const double now = flps_mono_s();

    if (s->log_count[err] == 0 || now - s->log_since[err] >= 60) {
        if (s->log_quiet[err] > 0)
            log_warn("%llu more refusals for %s in the last minute were not "
                     "logged",
                     (unsigned long long)s->log_quiet[err], flps_errname(err));
        s->log_since[err] = now;
        s->log_count[err] = 0;
        s->log_quiet[err] = 0;
    }
    if (s->log_count[err] < PS_REFUSAL_LOG_BURST) {
        s->log_count[err]++;
        return 1;
    }
    s->log_quiet[err]++;
    return 0;
}

void ps_shard_refuse(ps_shard *s, uint32_t peer, flps_err err, const char *text)
{
    ps_shard_refuse_stranger(s, peer, NULL, err, "%s", text);
}

void ps_shard_count_dropped(ps_shard *s, const char *why)
{
    s->stats.rejected[FLPS_EPROTO]++;
    if (ps_shard_refusal_log_ok(s, FLPS_EPROTO))
        log_warn("dropped a message: %s", why);
}

/* Refuse req with the text fmt makes, its header naming job. */
static void reply_error(ps_shard *s, uint32_t peer, const proto_msg *req,
                        const char *job, flps_err err, const char *fmt,
                        va_list ap)
{
    char text[sizeof(((proto_msg *)0)->text)];
    ps_reply r;
    size_t n;

    ps_shard_reply_init(s, &r, PROTO_OP_ERROR, req ? req->rank : 0,
                        req ? req->part : 0, req ? req->iter : 0, 0);
    snprintf(r.msg.job, sizeof(r.msg.job), "%s", job);
    /* In the version the request came in: an older peer reads the
     * refusal (an ERROR has no index frames, the same in every version). */
    r.msg.wire_version = req ? req->wire_version : 0;
    r.msg.status = err;
    flps_errbuf_vset(text, sizeof(text), err, fmt, ap);
    /* Valid UTF-8 without control characters whatever a value put in it
     * (values from a peer are quoted where they are put in, too). */
    n = flps_text_clean(r.msg.text, 0, sizeof(r.msg.text), 1, text);
    r.msg.text[n] = '\0';
    s->stats.rejected[err]++;
    if (ps_shard_refusal_log_ok(s, err))
        log_warn("refused %s from peer %u (rank %u, part %u, iteration %llu): "
                 "%s: %s",
                 req ? proto_op_name(req->op) : "message", peer,
                 req ? req->rank : 0, req ? req->part : 0,
                 req ? (unsigned long long)req->iter : 0ULL, flps_errname(err),
                 r.msg.text);
    s->cfg.send(s->cfg.send_arg, peer, &r);
}

void ps_shard_reply_error(ps_shard *s, uint32_t peer, const proto_msg *req,
                          flps_err err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    reply_error(s, peer, req, s->job, err, fmt, ap);
    va_end(ap);
}

void ps_shard_refuse_stranger(ps_shard *s, uint32_t peer, const proto_msg *req,
                              flps_err err, const char *fmt, ...)
{
    va_list ap;

    /* Without a secret the shard serves whoever knows its job. */
    va_start(ap, fmt);
    reply_error(s, peer, req,
                s->cfg.secret == NULL ? s->job
                : req != NULL         ? req->job
                                      : "",
                err, fmt, ap);
    va_end(ap);
}

void ps_shard_reply_ack(ps_shard *s, uint32_t peer, const proto_msg *req,
                        uint32_t status, const char *text, uint64_t version)
{
    ps_reply r;

    ps_shard_reply_init(s, &r, PROTO_OP_ACK, req->rank, req->part, req->iter,
                        version);
    r.msg.status = status;
    snprintf(r.msg.text, sizeof(r.msg.text), "%s", text);
    s->cfg.send(s->cfg.send_arg, peer, &r);
}

/* Forget the pull replies of p the transport is done with; returns whether
 * one to peer is still being sent. A buffer is done when no references
 * are left but the part's own: this list's and the reply pool's. */
int ps_part_pull_in_flight(ps_part *p, uint32_t peer)
{
    int busy = 0;
    uint32_t k = 0;

    for (uint32_t i = 0; i < p->nout; i++) {
        proto_buf *b = p->out[i].buf;
        size_t ours = 1;
        for (int j = 0; j < PS_REPLY_POOL; j++)
            ours += p->reply[j] == b;
        if (proto_buf_refs(b) <= ours) {
            proto_buf_release(b);
            continue;
        }
        busy |= p->out[i].peer == peer;
        p->out[k++] = p->out[i];
    }
    p->nout = k;
    return busy;
}

proto_buf *ps_shard_reply_buf(ps_part *p, size_t len, size_t room)
{
    proto_buf *b;
    int pick = -1, slot = -1;

    if (room < len)
        room = len;
    /* Pull replies the transport is done with give their pooled buffers
     * back first: kept until the part's next pull, they held a copy of
     * the part and made every update take a fresh buffer. */
    if (p->nout > 0)
        (void)ps_part_pull_in_flight(p, UINT32_MAX);
    for (int i = 0; i < PS_REPLY_POOL; i++) {
        proto_buf *c = p->reply[i];
        /* A buffer much larger than asked for is dropped, so a part whose
         * updates shrink does not keep its largest. */
        if (c != NULL && proto_buf_is_unique(c) && proto_buf_len(c) >= len &&
            proto_buf_len(c) <= 2 * room) {
            pick = i;
            break;
        }
    }
    /* Keep one idle buffer: release the others nobody sends any more. */
    for (int i = 0; i < PS_REPLY_POOL; i++) {
        if (i != pick && p->reply[i] != NULL &&
            proto_buf_is_unique(p->reply[i])) {
            proto_buf_release(p->reply[i]);
            p->reply[i] = NULL;
        }
    }
    if (pick >= 0)
        return p->reply[pick];
    b = proto_buf_create(room);
    if (b == NULL)
        return NULL;
    for (int i = 0; i < PS_REPLY_POOL && slot < 0; i++)
        if (p->reply[i] == NULL)
            slot = i;
    if (slot < 0) {
        /* Every slot still in flight: drop the pool's reference to one;
         * the transport frees it when sent. */
        slot = 0;
        proto_buf_release(p->reply[0]);
    }
    p->reply[slot] = b;
    return b;
}

void ps_shard_send(ps_shard *s, uint32_t peer, const ps_reply *rep)
{
    if (s->defer && rep->msg.op == PROTO_OP_UPDATE &&
        rep->msg.codec == PROTO_CODEC_SPARSE) {
        if (s->nheld == s->held_cap) {
            size_t cap = s->held_cap ? 2 * s->held_cap : 64;
            ps_held_reply *h = flps_realloc(s->held, cap * sizeof(*h));
            if (h == NULL)
                goto now; /* it goes alone */
            s->held = h;
            s->held_cap = cap;
        }
        s->held[s->nheld].peer = peer;
        s->held[s->nheld].rep = *rep;
        proto_buf_hold(rep->payload);
        if (rep->rej != NULL)
            proto_buf_hold(rep->rej);
        s->nheld++;
        return;
    }
now:
    s->cfg.send(s->cfg.send_arg, peer, rep);
}

static int cmp_held(const void *pa, const void *pb)
{
    const ps_held_reply *a = pa, *b = pb;

    if (a->peer != b->peer)
        return a->peer < b->peer ? -1 : 1;
    if (a->rep.msg.iter != b->rep.msg.iter)
        return a->rep.msg.iter < b->rep.msg.iter ? -1 : 1;
    if (a->rep.msg.rank != b->rep.msg.rank)
        return a->rep.msg.rank < b->rep.msg.rank ? -1 : 1;
    return a->rep.msg.part < b->rep.msg.part
               ? -1
               : (a->rep.msg.part > b->rep.msg.part);
}

/* Send held[lo, hi) (one peer, one iteration, one rank, ascending parts:
 * one peer speaking as two ranks must not get one UPDATE naming a part
 * twice, which its decoder refuses; found by tests/fuzz/fuzz_shard) as one
 * UPDATE whose segments are the parts' updates, copied into one payload.
 * Out of memory: each goes alone. */
static void send_joined(ps_shard *s, const ps_held_reply *h, size_t cnt)
{
    size_t n = 0, nrej = 0;
    proto_seg *segs = flps_malloc(cnt * sizeof(*segs));
    proto_buf *b;
    uint32_t *idx, *rej;
    float *val;
    ps_reply r;

    for (size_t i = 0; i < cnt; i++) {
        n += h[i].rep.msg.n;
        nrej += h[i].rep.msg.nrej;
    }
    b = segs != NULL && n <= UINT32_MAX && nrej <= UINT32_MAX
            ? proto_buf_create(n * 8 + nrej * 4 + 4)
            : NULL;
    if (b == NULL) {
        flps_free(segs);
        for (size_t i = 0; i < cnt; i++)
            s->cfg.send(s->cfg.send_arg, h[i].peer, &h[i].rep);
        return;
    }
    idx = proto_buf_data(b);
    val = (float *)(idx + n);
    rej = (uint32_t *)(val + n);
    n = nrej = 0;
    for (size_t i = 0; i < cnt; i++) {
        const proto_msg *m = &h[i].rep.msg;
        memcpy(idx + n, m->idx, (size_t)m->n * sizeof(*idx));
        memcpy(val + n, m->val, (size_t)m->n * sizeof(*val));
        if (m->nrej > 0)
            memcpy(rej + nrej, m->rej, (size_t)m->nrej * sizeof(*rej));
        segs[i].part = m->part;
        segs[i].n = m->n;
        segs[i].nrej = m->nrej;
        segs[i].version = m->version;
        n += m->n;
        nrej += m->nrej;
    }
    r = h[0].rep;
    r.msg.n = (uint32_t)n;
    r.msg.idx = idx;
    r.msg.val = val;
    r.msg.nrej = (uint32_t)nrej;
    r.msg.rej = rej;
    r.msg.nsegs = (uint32_t)cnt;
    r.msg.segs = segs;
    r.payload = b;
    r.rej = NULL;
    s->cfg.send(s->cfg.send_arg, h[0].peer, &r);
    proto_buf_release(b);
    flps_free(segs);
}

void ps_shard_flush_replies(ps_shard *s)
{
    size_t lo = 0;

    if (s->nheld == 0)
        return; /* held may still be NULL */
    qsort(s->held, s->nheld, sizeof(*s->held), cmp_held);
    while (lo < s->nheld) {
        size_t hi = lo + 1;
        while (hi < s->nheld && s->held[hi].peer == s->held[lo].peer &&
               s->held[hi].rep.msg.iter == s->held[lo].rep.msg.iter &&
               s->held[hi].rep.msg.rank == s->held[lo].rep.msg.rank)
            hi++;
        if (hi - lo == 1)
            s->cfg.send(s->cfg.send_arg, s->held[lo].peer, &s->held[lo].rep);
        else
            send_joined(s, &s->held[lo], hi - lo);
        lo = hi;
    }
    for (size_t i = 0; i < s->nheld; i++) {
        proto_buf_release(s->held[i].rep.payload);
        proto_buf_release(s->held[i].rep.rej);
    }
    s->nheld = 0;
}

void ps_shard_drop_held(ps_shard *s)
{
    for (size_t i = 0; i < s->nheld; i++) {
        proto_buf_release(s->held[i].rep.payload);
        proto_buf_release(s->held[i].rep.rej);
    }
    s->nheld = 0;
    flps_free(s->held);
    s->held = NULL;
    s->held_cap = 0;
}
