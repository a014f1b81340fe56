/* One parameter-server shard: owned parts, registration, init and pull,
 * and durability; pushes and their aggregation are in shard_agg.c. */
#include "ps/shard.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/creds.h"
#include "proto/partmap.h"
#include "ps/persist.h"
#include "ps/shard_impl.h"

/* ---- replies ---- */

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
static int refusal_log_ok(ps_shard *s, flps_err err)
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
    ps_shard_reply_error(s, peer, NULL, err, "%s", text);
}

void ps_shard_count_dropped(ps_shard *s, const char *why)
{
    s->stats.rejected[FLPS_EPROTO]++;
    if (refusal_log_ok(s, FLPS_EPROTO))
        log_warn("dropped a message: %s", why);
}

void ps_shard_reply_error(ps_shard *s, uint32_t peer, const proto_msg *req,
                          flps_err err, const char *fmt, ...)
{
    ps_reply r;
    va_list ap;

    ps_shard_reply_init(s, &r, PROTO_OP_ERROR, req ? req->rank : 0,
                        req ? req->part : 0, req ? req->iter : 0, 0);
    r.msg.status = err;
    va_start(ap, fmt);
    flps_errbuf_vset(r.msg.text, sizeof(r.msg.text), err, fmt, ap);
    va_end(ap);
    s->stats.rejected[err]++;
    if (refusal_log_ok(s, err))
        log_warn("refused %s from peer %u (rank %u, part %u, iteration %llu): "
                 "%s: %s",
                 req ? proto_op_name(req->op) : "message", peer,
                 req ? req->rank : 0, req ? req->part : 0,
                 req ? (unsigned long long)req->iter : 0ULL, flps_errname(err),
                 r.msg.text);
    s->cfg.send(s->cfg.send_arg, peer, &r);
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
static int pull_in_flight(ps_part *p, uint32_t peer)
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

int ps_shard_is_async(const ps_shard *s)
{
    return s->configured && s->jc.mode == PROTO_MODE_ASYNC;
}

uint64_t ps_part_slowest(const ps_shard *s, const ps_part *p)
{
    uint64_t lo = UINT64_MAX;

    if (s->jc.mode != PROTO_MODE_ASYNC || p->last_async == NULL)
        return 0;
    for (uint32_t r = 0; r < s->jc.workers; r++)
        if (p->last_async[r] < lo)
            lo = p->last_async[r];
    return lo == UINT64_MAX ? 0 : lo;
}

/* The elements of p that changed after version since, when a pull naming
 * since can be answered with them in fewer bytes than the whole part
 * (8 bytes a pair against 4 an element); -1 when it cannot (no tracking,
 * since 0 or from the future, or too many changed). */
static int64_t changed_since(const ps_part *p, uint64_t since)
{
    uint64_t n = 0;
    const uint64_t most = p->numel / 2;

    if (p->touched == NULL || since == 0 || since > p->version)
        return -1;
    for (uint32_t i = 0; i < p->numel; i++) {
        n += p->touched[i] > since;
        if (n > most)
            return -1;
    }
    return (int64_t)n;
}

/* Answer a PULL of p with the current values of the elements changed
 * after version since. */
static flps_err reply_changed(ps_shard *s, uint32_t peer, uint32_t rank,
                              ps_part *p, uint64_t since, uint32_t n)
{
    ps_reply r;
    proto_buf *b = ps_shard_reply_buf(p, (size_t)n * 8 + 4, 0);
    uint32_t *idx;
    float *val;
    uint32_t k = 0;

    if (b == NULL)
        return FLPS_ENOMEM;
    idx = proto_buf_data(b);
    val = (float *)(idx + n);
    for (uint32_t i = 0; i < p->numel && k < n; i++) {
        if (p->touched[i] > since) {
            idx[k] = i;
            val[k] = p->w[i];
            k++;
        }
    }
    p->out[p->nout].peer = peer;
    p->out[p->nout].buf = proto_buf_hold(b);
    p->nout++;
    /* iter names the version the changes are counted from (an async part
     * has no open iteration): the worker applies them only onto that
     * version or a later one. */
    ps_shard_reply_init(s, &r, PROTO_OP_PULL_REPLY, rank, p->id, since,
                        p->version);
    r.msg.codec = PROTO_CODEC_SPARSE;
    r.msg.n = n;
    r.msg.idx = idx;
    r.msg.val = val;
    r.msg.slowest = ps_part_slowest(s, p);
    r.payload = b;
    s->stats.pulls++;
    s->cfg.send(s->cfg.send_arg, peer, &r);
    return FLPS_OK;
}

static flps_err reply_values(ps_shard *s, uint32_t peer, uint32_t rank,
                             ps_part *p, uint64_t since)
{
    ps_reply r;
    proto_buf *b;
    int64_t changed;

    (void)pull_in_flight(p, peer); /* done buffers back to the pool */
    if (p->nout == p->out_cap) {
        uint32_t cap = p->out_cap ? 2 * p->out_cap : 4;
        ps_pull_out *o = flps_realloc(p->out, cap * sizeof(*o));
        if (o == NULL)
            return FLPS_ENOMEM;
        p->out = o;
        p->out_cap = cap;
    }
    changed = changed_since(p, since);
    if (changed >= 0)
        return reply_changed(s, peer, rank, p, since, (uint32_t)changed);
    b = ps_shard_reply_buf(p, (size_t)p->numel * sizeof(float), 0);
    if (b == NULL)
        return FLPS_ENOMEM;
    p->out[p->nout].peer = peer;
    p->out[p->nout].buf = proto_buf_hold(b);
    p->nout++;
    /* A copy: the part keeps changing while the transport sends. It comes
     * from the part's pool, which keeps its reference. */
    memcpy(proto_buf_data(b), p->w, (size_t)p->numel * sizeof(float));
    ps_shard_reply_init(s, &r, PROTO_OP_PULL_REPLY, rank, p->id, p->iter,
                        p->version);
    r.msg.codec = PROTO_CODEC_DENSE;
    r.msg.n = p->numel;
    r.msg.val = proto_buf_data(b);
    r.msg.slowest = ps_part_slowest(s, p);
    r.payload = b;
    s->stats.pulls++;
    s->cfg.send(s->cfg.send_arg, peer, &r);
    return FLPS_OK;
}

/* ---- replies of several parts ---- */

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

/* ---- parts and layout ---- */

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
        (void)pull_in_flight(p, UINT32_MAX);
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

void *ps_shard_grow(void *buf, size_t *cap, size_t n, size_t elem)
{
    void *b;
    size_t want;

    if (n <= *cap && buf != NULL)
        return buf;
    want = n + n / 4 + 1;
    b = flps_malloc(want * elem);
    if (b == NULL)
        return NULL;
    flps_free(buf);
    *cap = want;
    return b;
}

static void part_destroy(ps_part *p, uint32_t workers)
{
    if (p == NULL)
        return;
    for (uint32_t r = 0; p->rx != NULL && r < workers; r++)
        transport_rx_release(p->rx[r]);
    while (p->pulls != NULL) {
        ps_pull_wait *n = p->pulls->next;
        flps_free(p->pulls);
        p->pulls = n;
    }
    for (uint32_t i = 0; i < p->nout; i++)
        proto_buf_release(p->out[i].buf);
    flps_free(p->out);
    for (uint32_t r = 0; p->decoded != NULL && r < workers; r++)
        flps_free(p->decoded[r]);
    flps_free(p->decoded);
    flps_free(p->w);
    flps_free(p->rx);
    flps_free(p->push);
    flps_free(p->peer);
    for (int i = 0; i < PS_REPLY_POOL; i++)
        proto_buf_release(p->reply[i]);
    flps_free(p->last_async);
    flps_free(p->touched);
    flps_free(p->last_idx);
    flps_free(p->last_val);
    flps_free(p);
}

static flps_err part_create(uint32_t id, uint32_t numel, uint32_t workers,
                            ps_part **out)
{
    ps_part *p = flps_calloc(1, sizeof(*p));

    if (p == NULL)
        return FLPS_ENOMEM;
    p->id = id;
    p->numel = numel;
    p->w = flps_calloc(numel, sizeof(float));
    p->rx = flps_calloc(workers, sizeof(*p->rx));
    p->push = flps_calloc(workers, sizeof(*p->push));
    p->peer = flps_calloc(workers, sizeof(*p->peer));
    p->decoded = flps_calloc(workers, sizeof(*p->decoded));
    p->last_async = flps_calloc(workers, sizeof(*p->last_async));
    if (p->w == NULL || p->rx == NULL || p->push == NULL || p->peer == NULL ||
        p->last_async == NULL || p->decoded == NULL) {
        part_destroy(p, workers);
        return FLPS_ENOMEM;
    }
    *out = p;
    return FLPS_OK;
}

static void shard_drop_layout(ps_shard *s)
{
    if (s->parts != NULL)
        for (uint32_t i = 0; i < s->pm.nparts; i++)
            part_destroy(s->parts[i], s->jc.workers);
    flps_free(s->parts);
    s->parts = NULL;
    flps_free(s->member);
    s->member = NULL;
    flps_free(s->owner);
    s->owner = NULL;
    partmap_fini(&s->pm);
    flps_free(s->tensors);
    s->tensors = NULL;
    s->ntensors = 0;
    s->nowned = 0;
    s->configured = 0;
    ps_merge_destroy(s->merge);
    flps_free(s->acc);
    flps_free(s->bits);
    flps_free(s->pos);
    s->acc = NULL;
    s->bits = NULL;
    s->pos = NULL;
    s->acc_cap = 0;
    topk_ctx_destroy(s->topk);
    flps_free(s->u_idx);
    flps_free(s->u_sum);
    flps_free(s->sel);
    flps_free(s->delta);
    s->merge = NULL;
    s->topk = NULL;
    s->u_idx = NULL;
    s->u_sum = NULL;
    s->sel = NULL;
    s->delta = NULL;
    s->u_cap = s->sel_cap = s->delta_cap = 0;
}

/* Check a job configuration on its own; writes a reason on failure. */
static flps_err jobcfg_check(const ps_shard *s, const proto_jobcfg *c,
                             char *why, size_t len)
{
    if (c->shard != s->cfg.shard || c->nshards != s->cfg.nshards) {
        snprintf(why, len,
                 "this is shard %u of %u, the worker thinks it is shard %u "
                 "of %u",
                 s->cfg.shard, s->cfg.nshards, c->shard, c->nshards);
        return FLPS_ECONFIG;
    }
    if (c->workers == 0 || c->workers > 65536 || c->part_size == 0 ||
        !(c->lr > 0) || !isfinite(c->lr) || !(c->density > 0) ||
        c->density > 1) {
        snprintf(why, len,
                 "bad job configuration (workers %u, part_size %u, lr %g, "
                 "density %g)",
                 c->workers, c->part_size, c->lr, c->density);
        return FLPS_ECONFIG;
    }
    return FLPS_OK;
}

static flps_err shard_configure(ps_shard *s, const proto_jobcfg *c,
                                const proto_tensor *t, uint32_t nt)
{
    uint64_t *numel = flps_malloc(nt * sizeof(*numel));
    flps_err rc;

    if (numel == NULL)
        return FLPS_ENOMEM;
    for (uint32_t i = 0; i < nt; i++)
        numel[i] = t[i].numel;
    rc = partmap_build_pieces(
        numel, nt, c->nshards, c->part_size,
        partmap_piece_size(c->agg == PROTO_AGG_DENSE, c->part_size), &s->pm);
    flps_free(numel);
    if (rc != FLPS_OK)
        return rc;
    s->jc = *c;
    s->tensors = flps_malloc(nt * sizeof(*t));
    s->parts = flps_calloc(s->pm.nparts, sizeof(*s->parts));
    if (s->tensors == NULL || s->parts == NULL) {
        rc = FLPS_ENOMEM;
        goto fail;
    }
    memcpy(s->tensors, t, nt * sizeof(*t));
    s->ntensors = nt;
    for (uint32_t i = 0; i < s->pm.nparts; i++) {
        if (s->pm.parts[i].shard != s->cfg.shard)
            continue;
        rc = part_create(i, s->pm.parts[i].numel, c->workers, &s->parts[i]);
        if (rc != FLPS_OK)
            goto fail;
        s->nowned++;
    }
    s->member = flps_calloc(c->workers, sizeof(*s->member));
    s->owner = flps_calloc(c->workers, sizeof(*s->owner));
    if (s->member == NULL || s->owner == NULL) {
        rc = FLPS_ENOMEM;
        goto fail;
    }
    rc = ps_merge_create(c->workers, &s->merge);
    if (rc != FLPS_OK)
        goto fail;
    rc = topk_ctx_create(&s->topk);
    if (rc != FLPS_OK)
        goto fail;
    s->configured = 1;
    return FLPS_OK;
fail:
    shard_drop_layout(s);
    return rc;
}

/* Compare a worker's layout and configuration with the registered ones. */
static flps_err layout_compare(const ps_shard *s, const proto_msg *m, char *why,
                               size_t len)
{
    const proto_jobcfg *a = &s->jc, *b = &m->cfg;

    if (m->ntensors != s->ntensors) {
        snprintf(why, len, "the worker's model has %u tensors, the job's %u",
                 m->ntensors, s->ntensors);
        return FLPS_ELAYOUT;
    }
    for (uint32_t i = 0; i < m->ntensors; i++) {
        if (strcmp(m->tensors[i].name, s->tensors[i].name) != 0 ||
            m->tensors[i].numel != s->tensors[i].numel) {
            snprintf(
                why, len,
                "tensor %u is %s[%llu] on the worker but %s[%llu] in "
                "the job",
                i, m->tensors[i].name, (unsigned long long)m->tensors[i].numel,
                s->tensors[i].name, (unsigned long long)s->tensors[i].numel);
            return FLPS_ELAYOUT;
        }
    }
    if (a->workers != b->workers || a->part_size != b->part_size ||
        a->mode != b->mode || a->agg != b->agg || a->density != b->density ||
        a->lr != b->lr || a->lr_schedule != b->lr_schedule ||
        a->iterations != b->iterations ||
        strcmp(a->compression, b->compression) != 0) {
        snprintf(why, len,
                 "the worker's job settings (workers %u, part_size %u, mode "
                 "%u, aggregation %u, density %g, lr %g, schedule %u over "
                 "%llu) differ from the job's (%u, %u, %u, %u, %g, %g, %u "
                 "over %llu)",
                 b->workers, b->part_size, b->mode, b->agg, b->density, b->lr,
                 b->lr_schedule, (unsigned long long)b->iterations, a->workers,
                 a->part_size, a->mode, a->agg, a->density, a->lr,
                 a->lr_schedule, (unsigned long long)a->iterations);
        return FLPS_ELAYOUT;
    }
    if (a->density_warmup != b->density_warmup ||
        a->density_start != b->density_start) {
        /* Every worker and the shard must follow one schedule of k. */
        snprintf(why, len,
                 "the worker's density warm-up (%llu iterations from %g) "
                 "differs from the job's (%llu from %g)",
                 (unsigned long long)b->density_warmup, b->density_start,
                 (unsigned long long)a->density_warmup, a->density_start);
        return FLPS_ELAYOUT;
    }
    return FLPS_OK;
}

/* The checkpoint's meta block is a REGISTER message: layout + config. */
static flps_err shard_encode_meta(const ps_shard *s, void **meta, size_t *len)
{
    proto_msg m;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_REGISTER;
    snprintf(m.job, sizeof(m.job), "%s", s->job);
    m.cfg = s->jc;
    m.ntensors = s->ntensors;
    m.tensors = s->tensors;
    return proto_msg_encode(&m, meta, len, f, &nf);
}

flps_err ps_part_keep_last(ps_part *p, const wal_record *r)
{
    if (r->n > p->last_cap || p->last_val == NULL) {
        size_t cap = r->n > 0 ? r->n : 1;
        uint32_t *idx = flps_malloc(cap * sizeof(*idx));
        float *val = flps_malloc(cap * sizeof(*val));
        if (idx == NULL || val == NULL) {
            flps_free(idx);
            flps_free(val);
            p->has_last = 0;
            return FLPS_ENOMEM;
        }
        flps_free(p->last_idx);
        flps_free(p->last_val);
        p->last_idx = idx;
        p->last_val = val;
        p->last_cap = cap;
    }
    if (r->kind == WAL_ADD_SPARSE)
        memcpy(p->last_idx, r->idx, (size_t)r->n * sizeof(*p->last_idx));
    memcpy(p->last_val, r->val, (size_t)r->n * sizeof(*p->last_val));
    p->last_kind = r->kind;
    p->last_n = r->n;
    p->last_version = r->version;
    p->has_last = 1;
    return FLPS_OK;
}

flps_err ps_shard_wal(ps_shard *s, const wal_record *r)
{
    flps_err rc;

    if (s->wal_fd < 0)
        return FLPS_OK;
    rc = wal_append(s->wal_fd, r, s->cfg.fsync_wal);
    /* A record that may be half written: nothing more can be appended
     * safely, and nothing acknowledged may be lost, so the daemon stops. */
    if (rc != FLPS_OK)
        s->broken = 1;
    return rc;
}

int ps_shard_is_broken(const ps_shard *s)
{
    return s->broken;
}

/* ---- registration, init, pull ---- */

/* A layout's total size against the shard's limit, before anything is
 * sized by it: each tensor is below 2^32 (decode) and there are at most
 * PROTO_MAX_TENSORS, so the sum cannot overflow. */
static flps_err layout_check_size(const ps_shard *s, const proto_msg *m,
                                  char *why, size_t len)
{
    const uint64_t max = s->cfg.max_model_elements
                             ? s->cfg.max_model_elements
                             : PS_MAX_MODEL_ELEMENTS_DEFAULT;
    uint64_t total = 0;

    for (uint32_t i = 0; i < m->ntensors; i++)
        total += m->tensors[i].numel;
    if (total > max) {
        snprintf(why, len,
                 "the model has %llu elements, more than this shard's limit "
                 "of %llu (flps --max-model-elements)",
                 (unsigned long long)total, (unsigned long long)max);
        return FLPS_ECONFIG;
    }
    return FLPS_OK;
}

static flps_err on_register(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    char why[PROTO_ERRMSG_MAX + 1];
    ps_reply r;
    uint64_t min_iter = UINT64_MAX;
    flps_err rc = jobcfg_check(s, &m->cfg, why, sizeof(why));

    if (rc == FLPS_OK)
        rc = layout_check_size(s, m, why, sizeof(why));
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, peer, m, rc, "%s", why);
        return rc;
    }
    if (!s->configured) {
        rc = shard_configure(s, &m->cfg, m->tensors, m->ntensors);
        if (rc != FLPS_OK) {
            ps_shard_reply_error(s, peer, m, rc,
                                 "cannot build the partition map: %s",
                                 flps_strerror(rc));
            return rc;
        }
        log_info(
            "job %s registered by rank %u: %u tensors, %u parts, %u "
            "owned by shard %u (%llu elements), %u workers",
            s->job, m->rank, s->ntensors, s->pm.nparts, s->nowned, s->cfg.shard,
            (unsigned long long)s->pm.shard_load[s->cfg.shard], s->jc.workers);
        if (s->jc.density_warmup > 0)
            log_info("job %s: density warm-up from %g to %g over %llu "
                     "iterations",
                     s->job, s->jc.density_start, s->jc.density,
                     (unsigned long long)s->jc.density_warmup);
        /* A first checkpoint holds the layout, so the log written from now
         * on can be replayed even if the shard dies before the next one. */
        if (s->cfg.ckpt_dir != NULL) {
            rc = ps_shard_checkpoint(s);
            if (rc != FLPS_OK) {
                /* Unconfigure, or a retried REGISTER would be accepted with
                 * no checkpoint holding the layout. */
                shard_drop_layout(s);
                ps_shard_reply_error(s, peer, m, rc,
                                     "cannot write a checkpoint: %s",
                                     flps_strerror(rc));
                return rc;
            }
        }
    } else {
        rc = layout_compare(s, m, why, sizeof(why));
        if (rc != FLPS_OK) {
            ps_shard_reply_error(s, peer, m, rc, "%s", why);
            return rc;
        }
    }
    if (m->rank >= s->jc.workers) {
        ps_shard_reply_error(s, peer, m, FLPS_EINVAL,
                             "rank %u is not below workers=%u", m->rank,
                             s->jc.workers);
        return FLPS_EINVAL;
    }
    s->member[m->rank] = peer + 1;
    if (s->cfg.secret != NULL && s->owner[m->rank] != m->cid) {
        if (s->owner[m->rank] != 0)
            log_info("rank %u of job %s taken over by a new client (peer %u): "
                     "a restarted worker registered it again",
                     m->rank, s->job, peer);
        s->owner[m->rank] = m->cid;
    }
    for (uint32_t i = 0; i < s->pm.nparts; i++)
        if (s->parts[i] != NULL && s->parts[i]->iter < min_iter)
            min_iter = s->parts[i]->iter;
    ps_shard_reply_init(s, &r, PROTO_OP_REGISTER_OK, m->rank, 0,
                        min_iter == UINT64_MAX ? 0 : min_iter, 0);
    s->cfg.send(s->cfg.send_arg, peer, &r);
    return FLPS_OK;
}

ps_part *ps_shard_request_part(ps_shard *s, uint32_t peer, const proto_msg *m,
                               int need_init, flps_err *err)
{
    ps_part *p;

    if (!s->configured) {
        *err = FLPS_ESTATE;
        ps_shard_reply_error(
            s, peer, m, *err,
            "the shard has no model layout yet; register first");
        return NULL;
    }
    if (m->part >= s->pm.nparts || s->parts[m->part] == NULL) {
        *err = FLPS_EINVAL;
        ps_shard_reply_error(s, peer, m, *err,
                             "part %u is not held by shard %u", m->part,
                             s->cfg.shard);
        return NULL;
    }
    if (m->rank >= s->jc.workers) {
        *err = FLPS_EINVAL;
        ps_shard_reply_error(s, peer, m, *err,
                             "rank %u is not below workers=%u", m->rank,
                             s->jc.workers);
        return NULL;
    }
    p = s->parts[m->part];
    s->member[m->rank] = peer + 1;
    if (need_init && !p->initialized) {
        *err = FLPS_ESTATE;
        ps_shard_reply_error(
            s, peer, m, *err,
            "part %u has no initial values yet; rank 0 sends them", m->part);
        return NULL;
    }
    return p;
}

static flps_err on_init(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    flps_err rc;
    ps_part *p = ps_shard_request_part(s, peer, m, 0, &rc);
    wal_record wr;

    if (p == NULL)
        return rc;
    if (m->codec != PROTO_CODEC_DENSE || m->n != p->numel) {
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "initial values of part %u must be dense with %u "
                             "elements, got %u",
                             p->id, p->numel, m->n);
        return FLPS_EPROTO;
    }
    if (p->initialized) {
        /* Restored from a checkpoint, or another worker was first. */
        ps_shard_reply_ack(s, peer, m, 1,
                           "already initialised; pull the values", p->version);
        return FLPS_OK;
    }
    memset(&wr, 0, sizeof(wr));
    wr.kind = WAL_SET;
    wr.part = p->id;
    wr.iter = p->iter;
    wr.version = p->version + 1;
    wr.n = m->n;
    wr.val = m->val;
    rc = ps_shard_wal(s, &wr);
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, peer, m, rc, "cannot log the initial values");
        return rc;
    }
    memcpy(p->w, m->val, (size_t)p->numel * sizeof(float));
    p->version++;
    p->initialized = 1;
    ps_shard_reply_ack(s, peer, m, 0, "initialised", p->version);
    while (p->pulls != NULL) {
        ps_pull_wait *w = p->pulls;
        p->pulls = w->next;
        reply_values(s, w->peer, w->rank, p, 0);
        flps_free(w);
    }
    return FLPS_OK;
}

static flps_err on_pull(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    flps_err rc;
    ps_part *p = ps_shard_request_part(s, peer, m, 0, &rc);

    if (p == NULL)
        return rc;
    if (!p->initialized) {
        ps_pull_wait *w;
        /* One waiting pull per rank and part: a rank that pulls again
         * (a resend) moves its wait to the newer peer, so PULLs sent
         * before INIT cannot grow the list without bound. */
        for (w = p->pulls; w != NULL; w = w->next) {
            if (w->rank == m->rank) {
                w->peer = peer;
                return FLPS_OK;
            }
        }
        w = flps_malloc(sizeof(*w));
        if (w == NULL) {
            ps_shard_reply_error(s, peer, m, FLPS_ENOMEM, "out of memory");
            return FLPS_ENOMEM;
        }
        w->peer = peer;
        w->rank = m->rank;
        w->next = p->pulls;
        p->pulls = w;
        return FLPS_OK;
    }
    if (pull_in_flight(p, peer)) {
        /* The copy sent for its last PULL of this part is still on its
         * way (a resend, or a peer that does not read): that copy is the
         * answer. No ERROR either: a client would take it as a failure. */
        s->stats.rejected[FLPS_EDUP]++;
        if (refusal_log_ok(s, FLPS_EDUP))
            log_warn("ignored a PULL of part %u from peer %u: the reply to "
                     "its last one is still being sent",
                     p->id, peer);
        return FLPS_EDUP;
    }
    rc = reply_values(s, peer, m->rank, p, m->version);
    if (rc != FLPS_OK)
        ps_shard_reply_error(s, peer, m, rc, "cannot build the reply: %s",
                             flps_strerror(rc));
    return rc;
}

static int peer_is_member(const ps_shard *s, uint32_t peer)
{
    for (uint32_t r = 0; s->member != NULL && r < s->jc.workers; r++)
        if (s->member[r] == peer + 1)
            return 1;
    return 0;
}

/* A checkpoint writes and fsyncs the whole shard: only members of the job
 * may ask, and at most once per ckpt_request_interval_s (a flood wrote
 * 400 checkpoints, 1.6 GB, in 2 s). */
static flps_err on_checkpoint(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    const double every = s->cfg.ckpt_request_interval_s == 0
                             ? PS_CKPT_REQUEST_INTERVAL_DEFAULT
                             : s->cfg.ckpt_request_interval_s;
    double now = flps_mono_s();
    flps_err rc;

    /* A restored shard has not heard from its workers yet, and a client
     * does not register again after a shard restart: the first peer to
     * speak as a rank that nobody holds becomes its member. */
    if (s->configured && s->restored && m->rank < s->jc.workers &&
        s->member[m->rank] == 0)
        s->member[m->rank] = peer + 1;
    if (s->configured && !peer_is_member(s, peer)) {
        ps_shard_reply_error(s, peer, m, FLPS_ESTATE,
                             "only a registered worker of job '%s' may ask "
                             "for a checkpoint; register first",
                             s->job);
        return FLPS_ESTATE;
    }
    if (s->ckpt_req_done && every > 0 && now - s->ckpt_req_mono < every) {
        char text[PROTO_ERRMSG_MAX + 1], when[32];
        struct tm tm;
        gmtime_r(&s->ckpt_req_wall, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(text, sizeof(text),
                 "checkpoint done recently (at %s, %.1f s ago; at most one "
                 "per %g s); not written again",
                 when, now - s->ckpt_req_mono, every);
        ps_shard_reply_ack(s, peer, m, 1, text, 0);
        return FLPS_OK;
    }
    rc = ps_shard_checkpoint(s);
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, peer, m, rc, "checkpoint failed: %s",
                             flps_strerror(rc));
        return rc;
    }
    s->ckpt_req_done = 1;
    s->ckpt_req_mono = now;
    s->ckpt_req_wall = time(NULL);
    ps_shard_reply_ack(s, peer, m, 0, "checkpoint written", 0);
    return FLPS_OK;
}

/* With a secret: m must carry it, and, but for a REGISTER (which binds
 * the rank when it is accepted), come from the client instance its rank
 * is bound to; a rank nobody holds yet (after a restore: clients do not
 * register again) is bound to the first member that speaks as it.
 * Refusals are answered and counted under FLPS_EAUTH; nothing changes. */
static flps_err check_member(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    if (!creds_secret_equal(s->cfg.secret, m->auth)) {
        ps_shard_reply_error(
            s, peer, m, FLPS_EAUTH,
            m->auth[0] != '\0'
                ? "wrong credentials for job '%s': not a member of the job"
                : "job '%s' serves only its members: start the client "
                  "with the job's credentials (FLPS_CREDENTIALS_FILE)",
            s->job);
        return FLPS_EAUTH;
    }
    if (m->cid == 0) {
        ps_shard_reply_error(s, peer, m, FLPS_EAUTH,
                             "request without a client id (cid) refused: "
                             "job '%s' binds every rank to its client",
                             s->job);
        return FLPS_EAUTH;
    }
    if (m->op == PROTO_OP_REGISTER || !s->configured ||
        m->rank >= s->jc.workers)
        return FLPS_OK; /* the handlers check the rest */
    if (s->owner[m->rank] == 0) {
        s->owner[m->rank] = m->cid;
    } else if (s->owner[m->rank] != m->cid) {
        ps_shard_reply_error(s, peer, m, FLPS_EAUTH,
                             "rank %u of job '%s' is bound to another client; "
                             "a worker speaks only as the rank it registered",
                             m->rank, s->job);
        return FLPS_EAUTH;
    }
    return FLPS_OK;
}

flps_err ps_shard_handle(ps_shard *s, transport_rx *rx)
{
    proto_msg m;
    char why[256];
    flps_err rc;
    int kept = 0;

    rc = proto_msg_decode(rx->frames, rx->nframes, &m, why, sizeof(why));
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, rx->peer, NULL, rc, "%s", why);
        transport_rx_release(rx);
        return rc;
    }
    if (strcmp(m.job, s->job) != 0) {
        ps_shard_reply_error(s, rx->peer, &m, FLPS_EJOB,
                             "this shard serves job '%s', not '%s'", s->job,
                             m.job);
        rc = FLPS_EJOB;
        goto out;
    }
    if (s->cfg.secret != NULL) {
        rc = check_member(s, rx->peer, &m);
        if (rc != FLPS_OK)
            goto out;
    }
    switch (m.op) {
    case PROTO_OP_REGISTER:
        rc = on_register(s, rx->peer, &m);
        break;
    case PROTO_OP_INIT:
        rc = on_init(s, rx->peer, &m);
        break;
    case PROTO_OP_PULL:
        rc = on_pull(s, rx->peer, &m);
        break;
    case PROTO_OP_PUSH:
        if (m.nsegs > 0) {
            rc = ps_agg_push_segs(s, rx, &m);
            kept = 1; /* taken */
        } else {
            rc = ps_agg_push(s, rx, &m, &kept);
        }
        break;
    case PROTO_OP_CHECKPOINT:
        rc = on_checkpoint(s, rx->peer, &m);
        break;
    default:
        ps_shard_reply_error(s, rx->peer, &m, FLPS_EPROTO,
                             "a shard does not accept %s", proto_op_name(m.op));
        rc = FLPS_EPROTO;
        break;
    }
out:
    proto_msg_fini(&m);
    if (!kept)
        transport_rx_release(rx);
    return rc;
}

/* ---- durability ---- */

flps_err ps_shard_checkpoint(ps_shard *s)
{
    ckpt_part *cp;
    void *meta = NULL;
    size_t metalen = 0;
    uint32_t n = 0;
    flps_err rc;

    if (!s->configured || s->cfg.ckpt_dir == NULL)
        return FLPS_ESTATE;
    rc = shard_encode_meta(s, &meta, &metalen);
    if (rc != FLPS_OK)
        return rc;
    cp = flps_calloc(s->nowned, sizeof(*cp));
    if (cp == NULL) {
        free(meta);
        return FLPS_ENOMEM;
    }
    for (uint32_t i = 0; i < s->pm.nparts; i++) {
        ps_part *p = s->parts[i];
        if (p == NULL || !p->initialized)
            continue;
        cp[n].id = p->id;
        cp[n].numel = p->numel;
        cp[n].version = p->version;
        cp[n].iter = p->iter;
        cp[n].values = p->w;
        if (s->jc.mode == PROTO_MODE_ASYNC) {
            cp[n].nranks = s->jc.workers;
            cp[n].rank_iters = p->last_async;
        }
        n++;
    }
    rc = ckpt_write(s->ckpt_path, meta, metalen, cp, n);
    free(meta);
    flps_free(cp);
    if (rc == FLPS_OK && s->wal_fd >= 0)
        rc = wal_truncate(s->wal_fd);
    /* The checkpoint holds the values but not how the last iteration of
     * each part changed them: that update goes back into the emptied log
     * (its version is the checkpoint's, so a restore does not apply it
     * again, only keeps it to answer a late push of that iteration). */
    for (uint32_t i = 0; rc == FLPS_OK && s->wal_fd >= 0 && i < s->pm.nparts;
         i++) {
        const ps_part *p = s->parts[i];
        wal_record wr;
        if (p == NULL || !p->has_last || p->last_version != p->version)
            continue;
        memset(&wr, 0, sizeof(wr));
        wr.kind = p->last_kind;
        wr.part = p->id;
        wr.iter = p->iter;
        wr.version = p->version;
        wr.n = p->last_n;
        wr.idx = p->last_kind == WAL_ADD_SPARSE ? p->last_idx : NULL;
        wr.val = p->last_val;
        rc = ps_shard_wal(s, &wr);
    }
    if (rc == FLPS_OK) {
        s->stats.checkpoints++;
        log_info("checkpoint written: %s (%u parts)", s->ckpt_path, n);
    }
    return rc;
}

static flps_err restore_part(void *arg, const ckpt_part *cp)
{
    ps_shard *s = arg;
    ps_part *p;

    if (cp->id >= s->pm.nparts || s->parts[cp->id] == NULL ||
        s->parts[cp->id]->numel != cp->numel) {
        log_error("checkpoint holds part %u (%u elements) which this shard "
                  "does not own with that size",
                  cp->id, cp->numel);
        return FLPS_EPROTO;
    }
    p = s->parts[cp->id];
    if (cp->nranks != 0 && cp->nranks != s->jc.workers) {
        log_error("checkpoint holds iterations of %u ranks for part %u; the "
                  "job has %u workers",
                  cp->nranks, cp->id, s->jc.workers);
        return FLPS_EPROTO;
    }
    if (cp->nranks != 0)
        memcpy(p->last_async, cp->rank_iters,
               (size_t)cp->nranks * sizeof(*p->last_async));
    memcpy(p->w, cp->values, (size_t)cp->numel * sizeof(float));
    p->version = cp->version;
    p->iter = cp->iter;
    p->initialized = 1;
    return FLPS_OK;
}

static flps_err replay_record(void *arg, const wal_record *r)
{
    ps_shard *s = arg;
    ps_part *p;

    if (r->part >= s->pm.nparts || s->parts[r->part] == NULL) {
        log_error("write-ahead log names part %u, not owned here", r->part);
        return FLPS_EPROTO;
    }
    p = s->parts[r->part];
    /* Records the checkpoint already contains (a crash between writing the
     * checkpoint and truncating the log) are skipped by version; the one
     * that made the checkpoint's version (written again after it) is kept
     * as the part's last update. */
    if (r->version <= p->version) {
        if (r->version == p->version && s->jc.mode != PROTO_MODE_ASYNC &&
            r->kind != WAL_SET && r->iter == p->iter)
            (void)ps_part_keep_last(p, r); /* ENOMEM: only less to replay */
        return FLPS_OK;
    }
    if (r->version != p->version + 1 ||
        (r->kind != WAL_ADD_SPARSE && r->n != p->numel)) {
        log_error("write-ahead log record for part %u does not follow "
                  "version %llu",
                  p->id, (unsigned long long)p->version);
        return FLPS_EPROTO;
    }
    if (r->kind == WAL_SET) {
        memcpy(p->w, r->val, (size_t)p->numel * sizeof(float));
        p->initialized = 1;
    } else if (r->kind == WAL_ADD_DENSE) {
        for (uint32_t i = 0; i < p->numel; i++)
            p->w[i] += r->val[i];
    } else {
        for (uint32_t j = 0; j < r->n; j++) {
            if (r->idx[j] >= p->numel)
                return FLPS_EPROTO;
            p->w[r->idx[j]] += r->val[j];
        }
    }
    p->version = r->version;
    if (s->jc.mode == PROTO_MODE_ASYNC) {
        if (r->rank < s->jc.workers && r->iter > p->last_async[r->rank])
            p->last_async[r->rank] = r->iter;
    } else {
        p->iter = r->iter;
        if (r->kind == WAL_SET)
            p->has_last = 0;
        else
            (void)ps_part_keep_last(p, r);
    }
    return FLPS_OK;
}

/* A torn tail is always cut off before the log is appended to again. */
static unsigned wal_flags(const ps_shard_config *cfg)
{
    return WAL_RESTORE_REPAIR |
           (cfg->wal_truncate_at_corruption ? WAL_RESTORE_TRUNCATE_AT_CORRUPTION
                                            : 0u);
}

static flps_err meta_only(void *arg, const ckpt_part *cp)
{
    (void)arg;
    (void)cp;
    return FLPS_OK;
}

flps_err ps_shard_create(const ps_shard_config *cfg, int restore,
                         ps_shard **out)
{
    ps_shard *s;
    flps_err rc;

    if (cfg == NULL || cfg->job == NULL || cfg->send == NULL ||
        cfg->nshards == 0 || cfg->shard >= cfg->nshards ||
        strlen(cfg->job) > PROTO_JOB_MAX || strlen(cfg->job) == 0)
        return FLPS_EINVAL;
    s = flps_calloc(1, sizeof(*s));
    if (s == NULL)
        return FLPS_ENOMEM;
    s->cfg = *cfg;
    s->wal_fd = -1;
    snprintf(s->job, sizeof(s->job), "%s", cfg->job);
    if (cfg->ckpt_dir != NULL) {
        persist_paths(cfg->ckpt_dir, cfg->shard, s->ckpt_path, s->wal_path,
                      sizeof(s->ckpt_path));
        if (restore) {
            void *meta = NULL;
            size_t metalen = 0;
            int missing = 0;

            rc = ckpt_read(s->ckpt_path, &meta, &metalen, meta_only, NULL,
                           &missing);
            if (rc == FLPS_OK) {
                proto_msg m;
                proto_frame f = {meta, metalen};
                char why[256];
                uint64_t nrec = 0;

                /* decode leaves m untouched on error, and the fini below
                 * runs either way. */
                memset(&m, 0, sizeof(m));
                rc = proto_msg_decode(&f, 1, &m, why, sizeof(why));
                if (rc == FLPS_OK && m.op != PROTO_OP_REGISTER)
                    rc = FLPS_EPROTO;
                if (rc == FLPS_OK && strcmp(m.job, s->job) != 0) {
                    log_error("checkpoint %s belongs to job '%s', not '%s'",
                              s->ckpt_path, m.job, s->job);
                    rc = FLPS_EJOB;
                }
                if (rc == FLPS_OK)
                    rc = shard_configure(s, &m.cfg, m.tensors, m.ntensors);
                proto_msg_fini(&m);
                free(meta);
                if (rc == FLPS_OK)
                    rc = ckpt_read(s->ckpt_path, &meta, &metalen, restore_part,
                                   s, &missing);
                if (rc == FLPS_OK) {
                    wal_restore_info wi = {0};
                    free(meta);
                    rc = wal_restore(s->wal_path, wal_flags(cfg), replay_record,
                                     s, &wi);
                    nrec = wi.records;
                }
                if (rc != FLPS_OK)
                    goto fail;
                s->restored = 1;
                log_info("restored %u parts from %s and %llu log records "
                         "from %s",
                         s->nowned, s->ckpt_path, (unsigned long long)nrec,
                         s->wal_path);
            } else if (missing) {
                log_info("no checkpoint at %s: starting empty", s->ckpt_path);
            } else {
                goto fail;
            }
        } else {
            /* A fresh start must not replay somebody else's old log. */
            unlink(s->wal_path);
        }
        rc = wal_open(s->wal_path, &s->wal_fd);
        if (rc != FLPS_OK)
            goto fail;
    }
    *out = s;
    return FLPS_OK;
fail:
    ps_shard_destroy(s);
    return rc;
}

void ps_shard_destroy(ps_shard *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nheld; i++) {
        proto_buf_release(s->held[i].rep.payload);
        proto_buf_release(s->held[i].rep.rej);
    }
    flps_free(s->held);
    shard_drop_layout(s);
    if (s->wal_fd >= 0)
        close(s->wal_fd);
    flps_free(s);
}

const ps_shard_stats *ps_shard_stats_get(const ps_shard *s)
{
    return &s->stats;
}

flps_err ps_shard_part(const ps_shard *s, uint32_t part, const float **values,
                       uint32_t *numel, uint64_t *version, uint64_t *iter)
{
    const ps_part *p;

    if (!s->configured || part >= s->pm.nparts || s->parts[part] == NULL ||
        !s->parts[part]->initialized)
        return FLPS_EINVAL;
    p = s->parts[part];
    *values = p->w;
    *numel = p->numel;
    *version = p->version;
    *iter = p->iter;
    return FLPS_OK;
}

uint32_t ps_shard_num_owned(const ps_shard *s)
{
    return s->nowned;
}
