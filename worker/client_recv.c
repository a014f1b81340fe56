/* Receiving: replies matched to their requests and applied to the replica
 * (client_recv.h). */
#include "worker/client_recv.h"

#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "worker/client_pairs.h"
#include "worker/client_req.h"

/* gtopk: what the shard did not take goes back into the residual. Both
 * lists are ascending: one merge walk finds the values we sent. */
static void add_back_rejected(flps_client *c, cpart *p, const proto_msg *m)
{
    const uint32_t *sent = p->req.sent_idx;
    const float *vals = p->req.sent_val;
    uint32_t *idx = flps_malloc((size_t)m->nrej * sizeof(uint32_t));
    float *val = flps_malloc((size_t)m->nrej * sizeof(float));
    uint32_t j = 0, n = 0;

    if (idx == NULL || val == NULL) {
        log_error("out of memory returning %u rejected values of part %u to "
                  "the residual",
                  m->nrej, m->part);
        goto out;
    }
    for (uint32_t q = 0; q < m->nrej; q++) {
        while (j < p->req.n && sent[j] < m->rej[q])
            j++;
        if (j < p->req.n && sent[j] == m->rej[q]) {
            idx[n] = (uint32_t)(p->offset + sent[j]);
            val[n++] = vals[j];
        }
    }
    if (ef_add_back(c->tensors[p->tensor].ef, idx, val, n) != FLPS_OK)
        log_error("part %u: the shard's rejected indices do not fit the "
                  "layer",
                  m->part);
out:
    flps_free(idx);
    flps_free(val);
}

/* Apply update m to the replica. A dense update's values were not
 * scanned when decoded (PROTO_DECODE_UPDATE_VALUES_UNCHECKED): they are
 * checked in the same pass, and a NaN or Inf is a shard's protocol
 * violation that ends the client (the replica is no longer the model). */
static flps_err apply_update(flps_client *c, cpart *p, const proto_msg *m)
{
    ctensor *t = &c->tensors[p->tensor];
    float *w = t->data + p->offset;

    if (m->codec == PROTO_CODEC_DENSE) {
        uint32_t bad = 0;
        for (uint32_t i = 0; i < m->n; i++) {
            uint32_t bits;
            memcpy(&bits, &m->val[i], sizeof(bits));
            bad |= (bits & 0x7fffffffu) + 0x00800000u;
            w[i] += m->val[i];
        }
        if (bad & 0x80000000u)
            return client_set_error(
                c, FLPS_EPROTO,
                "shard %u sent NaN or Inf in its update of part %u; this "
                "worker's replica is no longer the model: restart the worker "
                "(it pulls the model again)",
                p->shard, (unsigned)(p - c->parts));
    } else {
        for (uint32_t j = 0; j < m->n; j++)
            w[m->idx[j]] += m->val[j];
    }
    if (m->nrej > 0 && t->pairs != NULL && cpairs_is_live(t->pairs))
        cpairs_mark_rejected(t->pairs, p->offset, m);
    else if (m->nrej > 0 && p->req.sent_idx != NULL && t->ef != NULL)
        add_back_rejected(c, p, m);
    return FLPS_OK;
}

/* The request reply m from peer answers, or NULL when it names no part of
 * that shard. A registration, a checkpoint's ack and an error while a
 * shard request is open and m's part waits for nothing answer the shard's
 * request (*pp NULL); everything else answers its part's (*pp the part). */
static creq *reply_target(flps_client *c, uint32_t peer, const proto_msg *m,
                          cpart **pp)
{
    const creq *sr = &c->shard_req[peer];

    *pp = NULL;
    if (m->op == PROTO_OP_REGISTER_OK ||
        (m->op == PROTO_OP_ACK && sr->kind == CREQ_CHECKPOINT) ||
        (m->op == PROTO_OP_ERROR && sr->kind != CREQ_NONE &&
         (m->part >= c->pm.nparts || c->parts[m->part].req.kind == CREQ_NONE)))
        return &c->shard_req[peer];
    if (m->part >= c->pm.nparts || c->parts[m->part].shard != peer)
        return NULL;
    *pp = &c->parts[m->part];
    return &(*pp)->req;
}

/* The handlers of one reply m to request r (of part p, NULL for a shard's
 * request) return 0 when m answers nothing r waits for (it is ignored) and
 * 1 when handled, with a refusal or violation in *rc. */

static int on_register_ok(flps_client *c, creq *r, const proto_msg *m)
{
    if (r->kind != CREQ_REGISTER)
        return 0;
    /* The lowest open iteration over the shards: a shard restarted from
     * its log may be one behind the others, and those answer the pushes
     * of iterations they closed with the update they applied
     * (docs/design.md, "Rejoining after a crash"). */
    if (!c->resume_known || m->iter < c->resume_iter)
        c->resume_iter = m->iter;
    c->resume_known = 1;
    creq_clear(r);
    return 1;
}

static int on_ack(const flps_client *c, creq *r, const proto_msg *m)
{
    if (r->kind == CREQ_CHECKPOINT || r->kind == CREQ_INIT ||
        (r->kind == CREQ_PUSH && c->async && m->iter == r->iter)) {
        creq_clear(r);
        return 1;
    }
    return 0;
}

static int on_pull_reply(flps_client *c, cpart *p, creq *r, const proto_msg *m)
{
    if (r->kind != CREQ_PULL || p == NULL)
        return 0;
    if (m->codec == PROTO_CODEC_SPARSE) {
        float *dst = c->tensors[p->tensor].data + p->offset;
        /* The changes after version m->iter: they bring the replica up to
         * m->version only if it holds m->iter or later (a late answer to
         * an older pull may not). */
        if (!c->async || p->held_version == 0 || m->iter > p->held_version ||
            (m->n > 0 && m->idx[m->n - 1] >= p->numel))
            return 0;
        for (uint32_t j = 0; j < m->n; j++)
            dst[m->idx[j]] = m->val[j];
    } else if (m->n == p->numel) {
        memcpy(c->tensors[p->tensor].data + p->offset, m->val,
               (size_t)m->n * sizeof(float));
        p->have_iter = m->iter;
    } else {
        return 0;
    }
    p->held_version = m->version;
    p->slowest = m->slowest;
    creq_clear(r);
    return 1;
}

/* m may be changed: an update the replica has from a pull keeps only its
 * rejected indices. */
static int on_update(flps_client *c, uint32_t peer, cpart *p, creq *r,
                     proto_msg *m, flps_err *rc)
{
    if (r->kind != CREQ_PUSH || c->async || m->iter != r->iter)
        return 0; /* a duplicate answer to a re-sent push */
    if ((m->codec == PROTO_CODEC_DENSE && m->n != p->numel) ||
        (m->codec == PROTO_CODEC_SPARSE && m->n > 0 &&
         m->idx[m->n - 1] >= p->numel)) {
        *rc = client_set_error(c, FLPS_EPROTO,
                               "shard %u sent an update that does not fit "
                               "part %u",
                               peer, m->part);
        return 1;
    }
    if (m->iter < p->have_iter) {
        /* Pulled with it: only the rejected indices count. */
        m->n = 0;
        m->codec = PROTO_CODEC_SPARSE;
    }
    *rc = apply_update(c, p, m);
    if (m->iter + 1 > p->have_iter)
        p->have_iter = m->iter + 1;
    creq_clear(r);
    return 1;
}

/* A push whose iteration closed without its update reaching us (the shard
 * restarted in between): recover by pulling the part. */
static flps_err repull_part(flps_client *c, cpart *p, creq *r,
                            const proto_msg *m)
{
    proto_msg pm;
    flps_err rc;

    log_warn("part %u: iteration %llu closed without our update; "
             "pulling the part",
             m->part, (unsigned long long)m->iter);
    client_msg_base(c, &pm, PROTO_OP_PULL, m->part, m->iter);
    rc = creq_build(r, CREQ_PULL, p->shard, &pm, NULL);
    if (rc == FLPS_OK)
        rc = creq_send(c, r);
    if (rc != FLPS_OK)
        rc = client_set_error(c, rc, "cannot re-pull part %u", m->part);
    return rc;
}

static int on_error(flps_client *c, uint32_t peer, cpart *p, creq *r,
                    const proto_msg *m, flps_err *rc)
{
    if (r->kind == CREQ_PUSH && m->iter != r->iter)
        return 0; /* the answer to a resend of an earlier iteration */
    if (r->kind == CREQ_PUSH && m->status == FLPS_EDUP) {
        /* The shard has our push from an earlier send: keep waiting for
         * the update, without re-sending for a while. */
        r->sent_at = flps_mono_s();
        return 1;
    }
    if (r->kind == CREQ_PUSH && m->status == FLPS_ELATE && p != NULL) {
        *rc = repull_part(c, p, r, m);
        return 1;
    }
    if (r->kind == CREQ_INIT && m->status == FLPS_ESTATE)
        return 1; /* not registered yet after a restart: resend later */
    *rc = client_set_error(
        c, m->status < FLPS_ERR_COUNT_ ? (flps_err)m->status : FLPS_EREMOTE,
        "shard %u (%s) refused %s: %s", peer, c->endpoints[peer],
        r->kind == CREQ_PUSH       ? "a push"
        : r->kind == CREQ_REGISTER ? "the registration"
        : r->kind == CREQ_PULL     ? "a pull"
        : r->kind == CREQ_INIT     ? "the initial values"
                                   : "a request",
        m->text);
    creq_clear(r);
    return 1;
}

/* One part's reply m (decoded; what it owns is freed here). */
static flps_err on_part_reply(flps_client *c, const transport_rx *rx,
                              proto_msg m)
{
    cpart *p;
    creq *r = reply_target(c, rx->peer, &m, &p);
    flps_err rc = FLPS_OK;
    int handled = 0, in_window;

    /* A held push was not sent: nothing answers it yet. */
    if (r != NULL && r->held)
        r = NULL;
    in_window = r != NULL && r->kind == CREQ_PUSH && r->windowed;
    if (r != NULL && r->kind != CREQ_NONE) {
        switch (m.op) {
        case PROTO_OP_REGISTER_OK:
            handled = on_register_ok(c, r, &m);
            break;
        case PROTO_OP_ACK:
            handled = on_ack(c, r, &m);
            break;
        case PROTO_OP_PULL_REPLY:
            handled = on_pull_reply(c, p, r, &m);
            break;
        case PROTO_OP_UPDATE:
            handled = on_update(c, rx->peer, p, r, &m, &rc);
            break;
        case PROTO_OP_ERROR:
            handled = on_error(c, rx->peer, p, r, &m, &rc);
            break;
        default:
            break;
        }
    }
    if (!handled)
        log_debug("ignoring %s for part %u from shard %u", proto_op_name(m.op),
                  m.part, rx->peer);
    /* Answered (or turned into a pull): its room in the window is free. */
    if (in_window && !(r->kind == CREQ_PUSH && r->windowed)) {
        flps_err wrc = creq_window_answered(c, rx->peer, p->numel);
        if (rc == FLPS_OK)
            rc = wrc;
    }
    proto_msg_fini(&m);
    return rc;
}

/* Handle one reply; returns an error only for a refusal that ends the
 * request (stored as the sticky error). An UPDATE of several parts is
 * handled part by part. */
static flps_err on_reply(flps_client *c, const transport_rx *rx)
{
    proto_msg m;
    char why[256];
    flps_err rc = proto_msg_decode_ex(rx->frames, rx->nframes,
                                      PROTO_DECODE_UPDATE_VALUES_UNCHECKED, &m,
                                      why, sizeof(why));

    if (rc != FLPS_OK) {
        log_warn("ignoring a malformed reply from shard %u: %s", rx->peer, why);
        return FLPS_OK;
    }
    if (m.nsegs == 0)
        return on_part_reply(c, rx, m); /* owns m's allocations */
    {
        size_t at = 0, atr = 0;
        for (uint32_t g = 0; g < m.nsegs && rc == FLPS_OK; g++) {
            proto_msg v;
            proto_msg_seg_view(&m, g, at, atr, &v);
            at += v.n;
            atr += v.nrej;
            rc = on_part_reply(c, rx, v);
        }
    }
    proto_msg_fini(&m);
    return rc;
}

flps_err client_recv_once(flps_client *c)
{
    transport_rx *rx = NULL;
    flps_err rc = transport_recv(c->t, 100, &rx);

    if (rc == FLPS_OK) {
        rc = on_reply(c, rx);
        transport_rx_release(rx);
        if (rc != FLPS_OK)
            return rc;
    } else if (rc == FLPS_EAUTH) {
        /* A shard refused this client's handshake: nothing sent to it is
         * answered; the transport says what was wrong and what to do. */
        return client_set_error(c, rc, "%s", c->t->errmsg);
    } else if (rc != FLPS_ETIMEDOUT && rc != FLPS_EPROTO) {
        return client_set_error(c, rc, "receive failed: %s", c->t->errmsg);
    }
    return creq_sweep(c, flps_mono_s());
}

flps_err client_recv_drain(flps_client *c)
{
    while (creq_any_pending(c)) {
        flps_err rc = client_recv_once(c);
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}
