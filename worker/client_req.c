/* Request tracking: the sticky error, the message header and the requests
 * of a client, kept for a resend until answered (client_req.h). */
#include "worker/client_req.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

flps_err client_set_error(flps_client *c, flps_err err, const char *fmt, ...)
{
    va_list ap;

    if (c->err != FLPS_OK)
        return c->err; /* keep the first cause */
    c->err = err;
    va_start(ap, fmt);
    flps_errbuf_vset(c->errmsg, sizeof(c->errmsg), err, fmt, ap);
    va_end(ap);
    return err;
}

void client_msg_base(const flps_client *c, proto_msg *m, uint8_t op,
                     uint32_t part, uint64_t iter)
{
    memset(m, 0, sizeof(*m));
    m->op = op;
    snprintf(m->job, sizeof(m->job), "%s", c->job);
    m->rank = c->rank;
    m->part = part;
    m->iter = iter;
    if (op == PROTO_OP_PUSH && c->weighted) {
        m->has_weight = 1;
        m->weight = c->push_weight;
    }
    memcpy(m->auth, c->auth, sizeof(m->auth));
    m->cid = c->cid;
}

void creq_clear(creq *r)
{
    proto_buf_release(r->hdr);
    proto_buf_release(r->payload);
    memset(r, 0, sizeof(*r));
}

flps_err creq_build(creq *r, creq_kind kind, uint32_t shard,
                    const proto_msg *msg, proto_buf *payload)
{
    proto_frame pf[PROTO_MAX_FRAMES];
    void *hdr = NULL;
    size_t hdrlen = 0, nf = 0;
    flps_err rc = proto_msg_encode(msg, &hdr, &hdrlen, pf, &nf);

    if (rc != FLPS_OK)
        return rc;
    creq_clear(r);
    r->hdr = proto_buf_wrap(hdr, hdrlen);
    if (r->hdr == NULL) {
        free(hdr);
        return FLPS_ENOMEM;
    }
    r->kind = kind;
    r->shard = shard;
    r->iter = msg->iter;
    r->n = msg->n;
    r->payload = payload ? proto_buf_hold(payload) : NULL;
    if (kind == CREQ_PUSH && msg->codec == PROTO_CODEC_SPARSE) {
        r->sent_idx = msg->idx;
        r->sent_val = msg->val;
    }
    r->nframes = nf;
    for (size_t i = 0; i < nf; i++) {
        /* The header and the compact index frames lie in the encoder's
         * buffer, values in the payload; an empty frame needs neither. */
        proto_buf *b =
            pf[i].len == 0 || proto_buf_holds(r->hdr, pf[i].data, pf[i].len)
                ? r->hdr
                : payload;
        r->frames[i].buf = b;
        r->frames[i].off = pf[i].len == 0
                               ? 0
                               : (size_t)((const char *)pf[i].data -
                                          (const char *)proto_buf_data(b));
        r->frames[i].len = pf[i].len;
    }
    return FLPS_OK;
}

flps_err creq_send(flps_client *c, creq *r)
{
    flps_err rc = transport_send(c->t, r->shard, r->frames, r->nframes);

    if (rc != FLPS_OK)
        return client_set_error(c, rc, "cannot send to shard %u (%s): %s",
                                r->shard, c->endpoints[r->shard], c->t->errmsg);
    r->sent_at = flps_mono_s();
    if (r->first_sent == 0)
        r->first_sent = r->sent_at;
    return FLPS_OK;
}

/* ---- the window of dense pushes ---- */

#define NO_PART UINT32_MAX

flps_err creq_window_init(flps_client *c, uint32_t limit)
{
    c->win = flps_calloc(c->nshards, sizeof(*c->win));
    if (c->win == NULL)
        return FLPS_ENOMEM;
    for (uint32_t s = 0; s < c->nshards; s++)
        c->win[s].head = NO_PART;
    c->win_limit = limit;
    c->win_piece = 1;
    for (uint32_t i = 0; i < c->pm.nparts; i++)
        if (c->pm.parts[i].numel > c->win_piece)
            c->win_piece = c->pm.parts[i].numel;
    return FLPS_OK;
}

/* Whether w has room for a push of numel values. Under the even map
 * (c->piece): win_limit of the largest piece in values, and always one
 * push when none is in flight; under the map of parts placed largest
 * first (encrypted jobs), win_limit pushes, which measured faster there
 * (docs/benchmarks.md). */
static int window_has_room(const flps_client *c, const cwindow *w,
                           uint32_t numel)
{
    if (c->piece == 0)
        return w->inflight < c->win_limit;
    return w->inflight == 0 ||
           w->values + numel <= (uint64_t)c->win_limit * c->win_piece;
}

/* What r's frames take on the wire, as the transport counts them. */
static uint64_t wire_bytes(const creq *r)
{
    uint64_t n = 0;

    for (size_t f = 0; f < r->nframes; f++)
        n += transport_zmtp_frame_bytes(r->frames[f].len);
    return n;
}

/* Send part pi's built push into its shard's window. */
static flps_err window_send(flps_client *c, uint32_t pi)
{
    creq *r = &c->parts[pi].req;
    cwindow *w = &c->win[r->shard];

    r->windowed = 1;
    r->held = 0;
    w->inflight++;
    w->values += c->parts[pi].numel;
    w->moved = flps_mono_s();
    return creq_send(c, r);
}

/* Pass over the pushes at the head of w cleared while held; the first
 * held one, or NO_PART. */
static uint32_t window_head(flps_client *c, cwindow *w)
{
    while (w->head != NO_PART) {
        const creq *r = &c->parts[w->head].req;
        if (r->kind == CREQ_PUSH && r->held)
            return w->head;
        w->head = c->parts[w->head].held_next;
    }
    return NO_PART;
}

/* Send the first held push of w, room or not. Returns FLPS_OK with
 * nothing sent when none is held. */
static flps_err window_send_next(flps_client *c, cwindow *w)
{
    uint32_t pi = window_head(c, w);

    if (pi == NO_PART)
        return FLPS_OK;
    w->head = c->parts[pi].held_next;
    c->held_wire -= wire_bytes(&c->parts[pi].req);
    return window_send(c, pi);
}

/* Whether push a goes before push b: the earlier iteration, then the
 * lower part (an earlier layer of the model: the next forward pass reads
 * it first). */
static int push_before(const flps_client *c, uint32_t a, uint32_t b)
{
    uint64_t ia = c->parts[a].req.iter, ib = c->parts[b].req.iter;

    return ia != ib ? ia < ib : a < b;
}

/* Hold part pi's built push in w: in priority order (push_before) once
 * the caller waits layer by layer, else last; a stale link of pi itself
 * (a push cleared while held) is dropped first. */
static void window_hold(flps_client *c, cwindow *w, uint32_t pi)
{
    uint32_t prev = NO_PART, cur = w->head;

    while (cur != NO_PART) {
        uint32_t next = c->parts[cur].held_next;
        if (cur == pi) {
            if (prev == NO_PART)
                w->head = next;
            else
                c->parts[prev].held_next = next;
        } else if (c->layer_order && push_before(c, pi, cur)) {
            break;
        } else {
            prev = cur;
        }
        cur = next;
    }
    c->parts[pi].held_next = cur;
    if (prev == NO_PART)
        w->head = pi;
    else
        c->parts[prev].held_next = pi;
}

/* Whether held push pi goes before every push of its shard in flight.
 * Such a push is sent whatever the window holds: the shard may be
 * waiting for it from this worker while the pushes in flight wait for
 * other workers (who sent pi already), and without it the window would
 * wait on itself; it also puts the layers the next forward pass reads
 * first ahead of a large layer's pieces (client_req.h). */
static int below_inflight(const flps_client *c, uint32_t pi)
{
    uint32_t shard = c->parts[pi].shard;

    for (uint32_t q = 0; q < c->pm.nparts; q++) {
        const creq *r = &c->parts[q].req;
        if (q != pi && r->kind == CREQ_PUSH && r->shard == shard &&
            r->windowed && !r->held && push_before(c, q, pi))
            return 0;
    }
    return 1;
}

/* Send w's held pushes while the window has room, or (in layer order)
 * the first goes before everything in flight. */
static flps_err window_drain(flps_client *c, cwindow *w)
{
    flps_err rc = FLPS_OK;
    uint32_t pi;

    while (rc == FLPS_OK && (pi = window_head(c, w)) != NO_PART &&
           (window_has_room(c, w, c->parts[pi].numel) ||
            (c->layer_order && below_inflight(c, pi))))
        rc = window_send_next(c, w);
    return rc;
}

flps_err creq_send_windowed(flps_client *c, uint32_t pi)
{
    cpart *p = &c->parts[pi];
    cwindow *w = &c->win[p->shard];

    if (c->win_limit == 0)
        return creq_send(c, &p->req);
    if (window_has_room(c, w, p->numel) && window_head(c, w) == NO_PART)
        return window_send(c, pi);
    p->req.windowed = 1;
    p->req.held = 1;
    window_hold(c, w, pi);
    c->held_wire += wire_bytes(&p->req);
    return window_drain(c, w);
}

flps_err creq_window_answered(flps_client *c, uint32_t shard, uint32_t numel)
{
    cwindow *w = &c->win[shard];

    if (w->inflight > 0)
        w->inflight--;
    w->values = w->values > numel ? w->values - numel : 0;
    if (w->inflight == 0)
        w->values = 0;
    w->moved = flps_mono_s();
    return window_drain(c, w);
}

/* A window that has not moved for CREQ_WINDOW_STALL_S while pushes are
 * held sends one more (client_req.h says why). */
static flps_err check_stalls(flps_client *c, double now)
{
    for (uint32_t s = 0; c->win_limit > 0 && s < c->nshards; s++) {
        cwindow *w = &c->win[s];
        if (w->head != NO_PART && now - w->moved >= CREQ_WINDOW_STALL_S) {
            flps_err rc = window_send_next(c, w);
            if (rc != FLPS_OK)
                return rc;
        }
    }
    return FLPS_OK;
}

/* ---- retries and deadlines ---- */

/* Resend r if it waited too long; fail it past the deadline. A held push
 * was not sent: nothing runs for it yet. */
static flps_err check_timeouts(flps_client *c, creq *r, double now)
{
    if (r->kind == CREQ_NONE || r->held)
        return FLPS_OK;
    /* The deadline first: it holds whatever the retry interval. */
    if (now - r->first_sent >= c->deadline_s)
        return client_set_error(c, FLPS_ETIMEDOUT,
                                "shard %u (%s) did not answer within %.0f s; "
                                "is it running and reachable?",
                                r->shard, c->endpoints[r->shard],
                                c->deadline_s);
    if (now - r->sent_at < c->retry_s)
        return FLPS_OK;
    c->stats.resends++;
    log_warn("no answer from shard %u (%s) for %.1f s: sending again", r->shard,
             c->endpoints[r->shard], now - r->sent_at);
    if (r->joined) {
        /* The message carries its other members too: their answers are
         * due again from now (each is answered, or refused as a
         * duplicate, on its own). */
        flps_err rc = creq_send(c, r);
        for (uint32_t i = 0; i < c->pm.nparts && rc == FLPS_OK; i++) {
            creq *o = &c->parts[i].req;
            if (o != r && o->kind == CREQ_PUSH && o->hdr == r->hdr)
                o->sent_at = r->sent_at;
        }
        return rc;
    }
    return creq_send(c, r);
}

flps_err creq_sweep(flps_client *c, double now)
{
    flps_err rc;

    for (uint32_t s = 0; s < c->nshards; s++) {
        rc = check_timeouts(c, &c->shard_req[s], now);
        if (rc != FLPS_OK)
            return rc;
    }
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        rc = check_timeouts(c, &c->parts[i].req, now);
        if (rc != FLPS_OK)
            return rc;
    }
    return check_stalls(c, now);
}

int creq_any_pending(const flps_client *c)
{
    for (uint32_t s = 0; s < c->nshards; s++)
        if (c->shard_req[s].kind != CREQ_NONE)
            return 1;
    return creq_parts_pending(c, 0, c->pm.nparts);
}

int creq_parts_pending(const flps_client *c, uint32_t first, uint32_t last)
{
    for (uint32_t i = first; i < last; i++)
        if (c->parts[i].req.kind != CREQ_NONE)
            return 1;
    return 0;
}

flps_err creq_check_tensor_idle(flps_client *c, uint32_t tensor)
{
    const uint32_t last = client_tensor_end_part(c, tensor);

    for (uint32_t pi = c->pm.first_part[tensor]; pi < last; pi++)
        if (c->parts[pi].req.kind != CREQ_NONE)
            return client_set_error(c, FLPS_ESTATE,
                                    "tensor %s pushed again before the update "
                                    "of its previous push arrived (call "
                                    "flps_client_wait first)",
                                    c->tensors[tensor].name);
    return FLPS_OK;
}
