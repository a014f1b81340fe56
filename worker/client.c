/* flps client library: registration, init/pull, compressed pushes with
 * error feedback, and the sparse updates applied to the local replica.
 *
 * Every request to a shard is tracked per part (one outstanding request per
 * part) or per shard (registration), kept with its encoded frames so it can
 * be re-sent unchanged after a timeout: a shard that restarts from its
 * checkpoint loses nothing it acknowledged, and the client carries on. */
#include "worker/client_internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/finite.h"
#include "common/log.h"
#include "compress/codec.h"
#include "compress/ef.h"
#include "proto/creds.h"
#include "proto/msg.h"
#include "proto/partmap.h"
#include "proto/transport.h"
#include "proto/transport_select.h"

typedef enum {
    CREQ_NONE = 0,
    CREQ_REGISTER,
    CREQ_INIT,
    CREQ_PULL,
    CREQ_PUSH,
    CREQ_CHECKPOINT,
} creq_kind;

/* One outstanding request and what is needed to send it again. */
typedef struct creq {
    creq_kind kind;
    uint32_t shard;
    uint64_t iter;
    proto_buf *hdr;
    proto_buf *payload; /* PUSH: idx (part-relative) then values; INIT */
    transport_frame frames[PROTO_MAX_FRAMES];
    size_t nframes;
    uint32_t n; /* PUSH: pairs (sparse) or values (dense) */
    /* A sparse PUSH: this part's pairs as sent (into payload), for gtopk's
     * rejected values. */
    const uint32_t *sent_idx;
    const float *sent_val;
    /* A PUSH of several parts: every member's request shares hdr, payload
     * and frames, and is answered on its own; a resend sends the whole
     * message once. */
    int joined;
    double sent_at; /* seconds, monotonic */
    double first_sent;
    int acked; /* async push: applied, waiting for nothing */
} creq;

typedef struct cpart {
    uint32_t tensor;
    uint64_t offset;
    uint32_t numel;
    uint32_t shard;
    creq req;
    /* Dense-valued codecs (fp16, qsgd, sign) encode part by part. */
    codec *cd;
    ef *ef;
    /* The dense codec needs neither: each push writes its payload straight
     * from the gradient. With momentum the last payload is the velocity
     * (it holds m * v + g as sent), so vel keeps a reference to it and the
     * next push updates it in place. */
    proto_buf *vel;
    /* The last payload (without momentum, or of a sparse push), kept to be
     * written again once nobody else holds it (the transport sent it and
     * its request was answered): no fresh buffer, and so no page faults,
     * per push. */
    proto_buf *spare;
    /* Sync: the iteration open when the replica's values of this part were
     * last pulled or updated. An update of an earlier iteration (a shard
     * one ahead answering the push of a worker restarted at the job's
     * lowest open iteration) is in the pulled values already: it is not
     * added again. */
    uint64_t have_iter;
    /* Async: the slowest rank's next iteration on this part, from its last
     * pull reply (bounded staleness). */
    uint64_t slowest;
    /* Async: the part's version the replica holds (0: not known), named
     * in the pulls of flps_client_wait so the shard answers with only
     * what changed since. */
    uint64_t held_version;
} cpart;

typedef struct ctensor {
    char name[PROTO_NAME_MAX + 1];
    size_t numel;
    float *data;
    /* Sparse codecs (topk, gtopk, randk, dgc) select over the whole layer. */
    codec *cd;
    /* The density cd selects at after the warm-up (topk, gtopk, dgc, an
     * auto layer's topk:D); 0 for a layer without one. */
    double target;
    ef *ef;          /* error feedback + momentum correction */
    float *velocity; /* plain momentum, for codecs without error feedback */
    double vel_max;  /* dense codec: max |velocity| after the last push */
    struct cpairs *pairs; /* flps_client_push_pairs: the last push's pairs */
} ctensor;

struct flps_client {
    char job[PROTO_JOB_MAX + 1];
    /* The job's secret from its credentials file ("" without one) and
     * this client's random instance id, sent in every request: a shard
     * with credentials serves only its members and binds our rank to
     * cid. */
    char auth[PROTO_AUTH_MAX + 1];
    uint64_t cid;
    uint32_t rank, workers, nshards, ntensors;
    int async;
    proto_agg agg;
    codec_spec spec;
    char spec_text[PROTO_SPEC_MAX + 1];
    int sparse;  /* the codec selects (per layer) rather than encodes all */
    int is_auto; /* "auto": a codec per layer (dense or topk:D), every push
                    sparse */
    int use_ef;  /* the codec is biased: keep an error-feedback residual
                    (never for the lossless dense codec) */
    double density, lr, momentum;
    /* Density warm-up (flps_client_create_warmup): the iterations and the
     * start density; 0 iterations = none. */
    uint64_t density_warmup;
    double density_start;
    int lr_cosine;
    uint64_t iterations;
    double retry_s, deadline_s;
    /* Async: the most iterations this worker may be ahead of the slowest
     * (flps_client_set_staleness); UINT32_MAX: no bound. */
    uint32_t staleness;
    double stale_wait_s; /* time spent waiting for the slowest */
    /* FLPS_MODE_WEIGHTED: every push carries push_weight. */
    int weighted;
    double push_weight;
    uint32_t part_size;
    transport *t;
    char **endpoints;
    ctensor *tensors;
    partmap pm;
    cpart *parts;
    /* A push's selection per part: pairs [sel_lo, sel_hi) of the layer's
     * list; sel_pis the parts of one message being built. */
    uint32_t *sel_lo, *sel_hi, *sel_pis;
    size_t push_hdr_bytes; /* a one-part push's header, for dense_bytes */
    creq *shard_req;       /* per shard: REGISTER / CHECKPOINT */
    uint64_t resume_iter;
    int resume_known; /* a REGISTER_OK set resume_iter */
    flps_client_stats stats;
    uint64_t push_wire_bytes;  /* what pushes took on the wire (first sends) */
    uint64_t dense_wire_bytes; /* what they would have taken dense */
    flps_err err;              /* sticky */
    char errmsg[512];
};

static flps_err set_error(flps_client *c, flps_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static flps_err set_error(flps_client *c, flps_err err, const char *fmt, ...)
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

/* The parts of tensor: [c->pm.first_part[tensor], tensor_end_part). */
static uint32_t tensor_end_part(const flps_client *c, uint32_t tensor)
{
    return tensor + 1 < c->ntensors ? c->pm.first_part[tensor + 1]
                                    : c->pm.nparts;
}

/* A tensor is pushed again only once the update of its previous push
 * arrived: sticky FLPS_ESTATE otherwise. */
static flps_err check_tensor_idle(flps_client *c, uint32_t tensor)
{
    const uint32_t last = tensor_end_part(c, tensor);

    for (uint32_t pi = c->pm.first_part[tensor]; pi < last; pi++)
        if (c->parts[pi].req.kind != CREQ_NONE)
            return set_error(c, FLPS_ESTATE,
                             "tensor %s pushed again before the update of "
                             "its previous push arrived (call "
                             "flps_client_wait first)",
                             c->tensors[tensor].name);
    return FLPS_OK;
}

void flps_client_get_messages(const flps_client *c, uint64_t *sent,
                              uint64_t *received)
{
    if (sent != NULL)
        *sent = c->t->stats.msgs_sent;
    if (received != NULL)
        *received = c->t->stats.msgs_recv;
}

flps_err flps_client_residual_norm(const flps_client *c, uint32_t tensor,
                                   double *norm)
{
    const ctensor *t;
    double ss = 0.0;

    if (c == NULL || tensor >= c->ntensors || norm == NULL)
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    if (t->ef != NULL) {
        double v = ef_residual_norm(t->ef);
        ss = v * v;
    } else {
        /* Dense-valued codecs keep a residual per part. */
        uint32_t first = c->pm.first_part[tensor],
                 last = tensor_end_part(c, tensor);
        for (uint32_t pi = first; pi < last; pi++)
            if (c->parts[pi].ef != NULL) {
                double v = ef_residual_norm(c->parts[pi].ef);
                ss += v * v;
            }
    }
    *norm = sqrt(ss);
    return FLPS_OK;
}

const char *flps_client_last_error(const flps_client *c)
{
    return c->errmsg;
}

void flps_client_get_stats(const flps_client *c, flps_client_stats *out)
{
    *out = c->stats;
    out->bytes_sent = c->t->stats.bytes_sent;
    out->bytes_received = c->t->stats.bytes_recv;
    /* A dense run sends the same control messages and re-sends; only the
     * pushes differ. */
    out->dense_bytes =
        out->bytes_sent - c->push_wire_bytes + c->dense_wire_bytes;
}

uint64_t flps_client_resume_iteration(const flps_client *c)
{
    return c->resume_iter;
}

static void creq_clear(creq *r)
{
    proto_buf_release(r->hdr);
    proto_buf_release(r->payload);
    memset(r, 0, sizeof(*r));
}

/* Encode msg (whose idx/val point into payload, if any) as request r. */
static flps_err creq_build(creq *r, creq_kind kind, uint32_t shard,
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
    r->frames[0].buf = r->hdr;
    r->frames[0].off = 0;
    r->frames[0].len = hdrlen;
    for (size_t i = 1; i < nf; i++) {
        r->frames[i].buf = payload;
        r->frames[i].off = (size_t)((const char *)pf[i].data -
                                    (const char *)proto_buf_data(payload));
        r->frames[i].len = pf[i].len;
    }
    return FLPS_OK;
}

static flps_err creq_send(flps_client *c, creq *r)
{
    flps_err rc = transport_send(c->t, r->shard, r->frames, r->nframes);

    if (rc != FLPS_OK)
        return set_error(c, rc, "cannot send to shard %u (%s): %s", r->shard,
                         c->endpoints[r->shard], c->t->errmsg);
    r->sent_at = flps_mono_s();
    if (r->first_sent == 0)
        r->first_sent = r->sent_at;
    return FLPS_OK;
}

static void msg_base(const flps_client *c, proto_msg *m, uint8_t op,
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

/* ---- receiving ---- */

struct cpairs;
static int pairs_are_live(const struct cpairs *pr);
static void pairs_forget(struct cpairs *pr);
static void pairs_mark_rejected(struct cpairs *pr, uint64_t offset,
                                const proto_msg *m);

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
            return set_error(c, FLPS_EPROTO,
                             "shard %u sent NaN or Inf in its update of part "
                             "%u; this worker's replica is no longer the "
                             "model: restart the worker (it pulls the model "
                             "again)",
                             p->shard, (unsigned)(p - c->parts));
    } else {
        for (uint32_t j = 0; j < m->n; j++)
            w[m->idx[j]] += m->val[j];
    }
    if (m->nrej > 0 && t->pairs != NULL && pairs_are_live(t->pairs))
        pairs_mark_rejected(t->pairs, p->offset, m);
    else if (m->nrej > 0 && p->req.sent_idx != NULL && t->ef != NULL)
        add_back_rejected(c, p, m);
    return FLPS_OK;
}

static flps_err on_part_reply(flps_client *c, const transport_rx *rx,
                              proto_msg m);

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

/* One part's reply m (decoded; what it owns is freed here). */
static flps_err on_part_reply(flps_client *c, const transport_rx *rx,
                              proto_msg m)
{
    cpart *p = NULL;
    creq *r;
    flps_err rc = FLPS_OK;
    if (m.op == PROTO_OP_REGISTER_OK ||
        (m.op == PROTO_OP_ACK &&
         c->shard_req[rx->peer].kind == CREQ_CHECKPOINT) ||
        (m.op == PROTO_OP_ERROR && c->shard_req[rx->peer].kind != CREQ_NONE &&
         (m.part >= c->pm.nparts || c->parts[m.part].req.kind == CREQ_NONE))) {
        r = &c->shard_req[rx->peer];
    } else {
        if (m.part >= c->pm.nparts || c->parts[m.part].shard != rx->peer)
            goto ignore;
        p = &c->parts[m.part];
        r = &p->req;
    }
    if (r->kind == CREQ_NONE)
        goto ignore;

    switch (m.op) {
    case PROTO_OP_REGISTER_OK:
        if (r->kind != CREQ_REGISTER)
            goto ignore;
        /* The lowest open iteration over the shards: a shard restarted
         * from its log may be one behind the others, and those answer the
         * pushes of iterations they closed with the update they applied
         * (docs/design.md, "Rejoining after a crash"). */
        if (!c->resume_known || m.iter < c->resume_iter)
            c->resume_iter = m.iter;
        c->resume_known = 1;
        creq_clear(r);
        break;
    case PROTO_OP_ACK:
        if (r->kind == CREQ_CHECKPOINT) {
            creq_clear(r);
        } else if (r->kind == CREQ_INIT) {
            creq_clear(r);
        } else if (r->kind == CREQ_PUSH && c->async && m.iter == r->iter) {
            creq_clear(r);
        } else {
            goto ignore;
        }
        break;
    case PROTO_OP_PULL_REPLY:
        if (r->kind != CREQ_PULL || p == NULL)
            goto ignore;
        if (m.codec == PROTO_CODEC_SPARSE) {
            float *dst = c->tensors[p->tensor].data + p->offset;
            /* The changes after version m.iter: they bring the replica up
             * to m.version only if it holds m.iter or later (a late answer
             * to an older pull may not). */
            if (!c->async || p->held_version == 0 || m.iter > p->held_version ||
                (m.n > 0 && m.idx[m.n - 1] >= p->numel))
                goto ignore;
            for (uint32_t j = 0; j < m.n; j++)
                dst[m.idx[j]] = m.val[j];
        } else if (m.n == p->numel) {
            memcpy(c->tensors[p->tensor].data + p->offset, m.val,
                   (size_t)m.n * sizeof(float));
            p->have_iter = m.iter;
        } else {
            goto ignore;
        }
        p->held_version = m.version;
        p->slowest = m.slowest;
        creq_clear(r);
        break;
    case PROTO_OP_UPDATE:
        if (r->kind != CREQ_PUSH || c->async || m.iter != r->iter)
            goto ignore; /* a duplicate answer to a re-sent push */
        if ((m.codec == PROTO_CODEC_DENSE && m.n != p->numel) ||
            (m.codec == PROTO_CODEC_SPARSE && m.n > 0 &&
             m.idx[m.n - 1] >= p->numel)) {
            rc = set_error(c, FLPS_EPROTO,
                           "shard %u sent an update that does not fit part "
                           "%u",
                           rx->peer, m.part);
            break;
        }
        if (m.iter < p->have_iter) {
            /* Pulled with it: only the rejected indices count. */
            m.n = 0;
            m.codec = PROTO_CODEC_SPARSE;
        }
        rc = apply_update(c, p, &m);
        if (m.iter + 1 > p->have_iter)
            p->have_iter = m.iter + 1;
        creq_clear(r);
        break;
    case PROTO_OP_ERROR:
        if (r->kind == CREQ_PUSH && m.iter != r->iter)
            goto ignore; /* the answer to a resend of an earlier iteration */
        if (r->kind == CREQ_PUSH && m.status == FLPS_EDUP) {
            /* The shard has our push from an earlier send: keep waiting
             * for the update, without re-sending for a while. */
            r->sent_at = flps_mono_s();
            break;
        }
        if (r->kind == CREQ_PUSH && m.status == FLPS_ELATE && p != NULL) {
            /* The iteration closed but its update never reached us (the
             * shard restarted in between): recover by pulling the part. */
            proto_msg pm;
            log_warn("part %u: iteration %llu closed without our update; "
                     "pulling the part",
                     m.part, (unsigned long long)m.iter);
            msg_base(c, &pm, PROTO_OP_PULL, m.part, m.iter);
            rc = creq_build(r, CREQ_PULL, p->shard, &pm, NULL);
            if (rc == FLPS_OK)
                rc = creq_send(c, r);
            if (rc != FLPS_OK)
                rc = set_error(c, rc, "cannot re-pull part %u", m.part);
            break;
        }
        if (r->kind == CREQ_INIT && m.status == FLPS_ESTATE) {
            break; /* not registered yet after a restart: resend later */
        }
        rc = set_error(
            c, m.status < FLPS_ERR_COUNT_ ? (flps_err)m.status : FLPS_EREMOTE,
            "shard %u (%s) refused %s: %s", rx->peer, c->endpoints[rx->peer],
            r->kind == CREQ_PUSH       ? "a push"
            : r->kind == CREQ_REGISTER ? "the registration"
            : r->kind == CREQ_PULL     ? "a pull"
            : r->kind == CREQ_INIT     ? "the initial values"
                                       : "a request",
            m.text);
        creq_clear(r);
        break;
    default:
        goto ignore;
    }
    proto_msg_fini(&m);
    return rc;
ignore:
    log_debug("ignoring %s for part %u from shard %u", proto_op_name(m.op),
              m.part, rx->peer);
    proto_msg_fini(&m);
    return FLPS_OK;
}

static int any_pending(const flps_client *c)
{
    for (uint32_t s = 0; s < c->nshards; s++)
        if (c->shard_req[s].kind != CREQ_NONE)
            return 1;
    for (uint32_t i = 0; i < c->pm.nparts; i++)
        if (c->parts[i].req.kind != CREQ_NONE)
            return 1;
    return 0;
}

/* Resend what waited too long; fail what waited past the deadline. */
static flps_err check_timeouts(flps_client *c, creq *r, double now)
{
    if (r->kind == CREQ_NONE)
        return FLPS_OK;
    /* The deadline first: it holds whatever the retry interval. */
    if (now - r->first_sent >= c->deadline_s)
        return set_error(c, FLPS_ETIMEDOUT,
                         "shard %u (%s) did not answer within %.0f s; is it "
                         "running and reachable?",
                         r->shard, c->endpoints[r->shard], c->deadline_s);
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

/* Receive and handle at most one reply (waiting up to 100 ms for it),
 * then resend or fail what waited too long. */
static flps_err drain_once(flps_client *c)
{
    transport_rx *rx = NULL;
    double now;
    flps_err rc = transport_recv(c->t, 100, &rx);

    if (rc == FLPS_OK) {
        rc = on_reply(c, rx);
        transport_rx_release(rx);
        if (rc != FLPS_OK)
            return rc;
    } else if (rc != FLPS_ETIMEDOUT && rc != FLPS_EPROTO) {
        return set_error(c, rc, "receive failed: %s", c->t->errmsg);
    }
    now = flps_mono_s();
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
    return FLPS_OK;
}

/* Receive and handle replies until nothing is outstanding. */
static flps_err drain(flps_client *c)
{
    while (any_pending(c)) {
        flps_err rc = drain_once(c);
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

/* Whether a part of [first, last) still waits for an answer. */
static int parts_pending(const flps_client *c, uint32_t first, uint32_t last)
{
    for (uint32_t i = first; i < last; i++)
        if (c->parts[i].req.kind != CREQ_NONE)
            return 1;
    return 0;
}

/* ---- set-up ---- */

/* Auto jobs start each layer on this codec until a plan says otherwise:
 * below AUTO_DENSE_BELOW elements the per-message latency dominates and
 * top-k would save little. */
#define AUTO_DENSE_BELOW 4096
#define AUTO_INITIAL_TOPK "topk:0.01"

static flps_err parse_compression(flps_client *c, const char *text)
{
    if (text == NULL)
        text = "dense";
    if (strcmp(text, "auto") == 0) {
        /* Every push is a list of pairs (a dense layer sends all of them),
         * so the shards aggregate the union and never cut it: density 1. */
        c->is_auto = 1;
        c->sparse = 1;
        c->use_ef = 1;
        c->density = 1.0;
        c->agg = PROTO_AGG_TOPK;
        c->spec.kind = CODEC_DENSE;
        snprintf(c->spec_text, sizeof(c->spec_text), "auto");
        return FLPS_OK;
    }
    if (codec_spec_parse(text, &c->spec) != FLPS_OK)
        return set_error(c, FLPS_ECONFIG,
                         "compression '%s' is not a codec; use dense, fp16, "
                         "topk:D, gtopk:D, randk:D, dgc:D, qsgd:BITS or sign",
                         text);
    codec_spec_format(&c->spec, c->spec_text, sizeof(c->spec_text));
    c->sparse = codec_kind_is_sparse(c->spec.kind);
    c->density = c->sparse ? c->spec.density : 1.0;
    c->agg = c->spec.kind == CODEC_GTOPK ? PROTO_AGG_GTOPK
             : c->sparse                 ? PROTO_AGG_TOPK
                                         : PROTO_AGG_DENSE;
    /* randk is unbiased by its scaling and qsgd below 4 bits by its
     * stochastic rounding; error feedback on them lets the residual grow
     * without bound (compress/ef.h), so they run without it. dense is
     * lossless: its residual would be zero after every push. */
    c->use_ef = !(c->spec.kind == CODEC_RANDK || c->spec.kind == CODEC_DENSE ||
                  (c->spec.kind == CODEC_QSGD && c->spec.bits < 4));
    return FLPS_OK;
}

/* One codec of spec (and its error feedback or plain velocity) for n
 * elements. */
static flps_err make_coder(flps_client *c, const codec_spec *spec, size_t n,
                           uint64_t seed, codec **cd, ef **e, float **velocity)
{
    flps_err rc = codec_create(spec, seed, cd);

    if (rc != FLPS_OK)
        return rc;
    if (c->use_ef)
        return ef_create_for(spec, n, (float)c->momentum, e);
    *velocity = flps_calloc(n, sizeof(float));
    return *velocity ? FLPS_OK : FLPS_ENOMEM;
}

static uint64_t layer_seed(const flps_client *c, uint32_t tensor)
{
    return ((uint64_t)c->rank << 32) ^ ((uint64_t)tensor << 8);
}

static void pairs_destroy(struct cpairs *pr);

static flps_err client_setup(flps_client *c, const flps_client_config *cfg)
{
    uint64_t *numel;
    flps_err rc;

    c->tensors = flps_calloc(cfg->ntensors, sizeof(*c->tensors));
    numel = flps_calloc(cfg->ntensors, sizeof(*numel));
    if (c->tensors == NULL || numel == NULL) {
        flps_free(numel);
        return FLPS_ENOMEM;
    }
    c->ntensors = cfg->ntensors;
    for (uint32_t i = 0; i < cfg->ntensors; i++) {
        const flps_tensor *src = &cfg->tensors[i];
        ctensor *t = &c->tensors[i];
        if (src->name == NULL || strlen(src->name) > PROTO_NAME_MAX ||
            src->numel == 0 || src->numel > UINT32_MAX || src->data == NULL) {
            flps_free(numel);
            return set_error(c, FLPS_EINVAL,
                             "tensor %u needs a name of 1..%d chars, "
                             "0 < numel < 2^32 and data",
                             i, PROTO_NAME_MAX);
        }
        snprintf(t->name, sizeof(t->name), "%s", src->name);
        t->numel = src->numel;
        t->data = src->data;
        numel[i] = src->numel;
        if (c->sparse) {
            codec_spec ls = c->spec;
            if (c->is_auto && codec_spec_parse(t->numel >= AUTO_DENSE_BELOW
                                                   ? AUTO_INITIAL_TOPK
                                                   : "dense",
                                               &ls) != FLPS_OK) {
                flps_free(numel);
                return FLPS_EINVAL;
            }
            /* Seeds differ by rank and layer so random codecs do not pick
             * the same indices on every worker. */
            rc = make_coder(c, &ls, t->numel, layer_seed(c, i), &t->cd, &t->ef,
                            &t->velocity);
            if (rc != FLPS_OK) {
                flps_free(numel);
                return rc;
            }
            if (ls.kind == CODEC_TOPK || ls.kind == CODEC_GTOPK ||
                ls.kind == CODEC_DGC)
                t->target = ls.density;
        }
    }
    rc = partmap_build_pieces(
        numel, c->ntensors, c->nshards, c->part_size,
        partmap_piece_size(c->agg == PROTO_AGG_DENSE, c->part_size), &c->pm);
    flps_free(numel);
    if (rc != FLPS_OK)
        return rc;
    c->parts = flps_calloc(c->pm.nparts, sizeof(*c->parts));
    c->shard_req = flps_calloc(c->nshards, sizeof(*c->shard_req));
    c->sel_lo = flps_calloc(c->pm.nparts, sizeof(*c->sel_lo));
    c->sel_hi = flps_calloc(c->pm.nparts, sizeof(*c->sel_hi));
    c->sel_pis = flps_calloc(c->pm.nparts, sizeof(*c->sel_pis));
    if (c->parts == NULL || c->shard_req == NULL || c->sel_lo == NULL ||
        c->sel_hi == NULL || c->sel_pis == NULL)
        return FLPS_ENOMEM;
    {
        /* The largest part id and an iteration of 5 bytes: within a few
         * bytes of every one-part push's header. */
        proto_msg m;
        void *hdr = NULL;
        size_t nf;
        proto_frame pf[PROTO_MAX_FRAMES];
        msg_base(c, &m, PROTO_OP_PUSH, c->pm.nparts - 1, UINT32_MAX);
        m.codec = PROTO_CODEC_DENSE;
        if (proto_msg_encode(&m, &hdr, &c->push_hdr_bytes, pf, &nf) != FLPS_OK)
            return FLPS_ENOMEM;
        free(hdr);
    }
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        cpart *p = &c->parts[i];
        p->tensor = c->pm.parts[i].tensor;
        p->offset = c->pm.parts[i].offset;
        p->numel = c->pm.parts[i].numel;
        p->shard = c->pm.parts[i].shard;
        if (!c->sparse && c->spec.kind != CODEC_DENSE) {
            float *unused = NULL;
            rc =
                make_coder(c, &c->spec, p->numel, ((uint64_t)c->rank << 32) ^ i,
                           &p->cd, &p->ef, &unused);
            /* Dense-valued codecs without error feedback keep their
             * velocity per tensor (allocated below). */
            flps_free(unused);
            if (rc != FLPS_OK)
                return rc;
        }
    }
    if (!c->sparse && !c->use_ef && c->spec.kind != CODEC_DENSE) {
        for (uint32_t i = 0; i < c->ntensors; i++) {
            c->tensors[i].velocity =
                flps_calloc(c->tensors[i].numel, sizeof(float));
            if (c->tensors[i].velocity == NULL)
                return FLPS_ENOMEM;
        }
    }
    return FLPS_OK;
}

static flps_err client_register(flps_client *c)
{
    proto_tensor *pt = flps_calloc(c->ntensors, sizeof(*pt));
    flps_err rc = FLPS_OK;

    if (pt == NULL)
        return FLPS_ENOMEM;
    for (uint32_t i = 0; i < c->ntensors; i++) {
        snprintf(pt[i].name, sizeof(pt[i].name), "%s", c->tensors[i].name);
        pt[i].numel = c->tensors[i].numel;
    }
    for (uint32_t s = 0; s < c->nshards && rc == FLPS_OK; s++) {
        proto_msg m;
        msg_base(c, &m, PROTO_OP_REGISTER, 0, 0);
        m.cfg.shard = s;
        m.cfg.nshards = c->nshards;
        m.cfg.workers = c->workers;
        m.cfg.part_size = c->part_size;
        m.cfg.mode = c->async      ? PROTO_MODE_ASYNC
                     : c->weighted ? PROTO_MODE_WEIGHTED
                                   : PROTO_MODE_SSGD;
        m.cfg.agg = (uint8_t)c->agg;
        m.cfg.density = c->density;
        snprintf(m.cfg.compression, sizeof(m.cfg.compression), "%s",
                 c->spec_text);
        m.cfg.lr = c->lr;
        m.cfg.lr_schedule = c->lr_cosine ? PROTO_LR_COSINE : PROTO_LR_CONSTANT;
        m.cfg.iterations = c->iterations;
        m.cfg.density_warmup = c->density_warmup;
        m.cfg.density_start = c->density_warmup > 0 ? c->density_start : 0;
        m.ntensors = c->ntensors;
        m.tensors = pt;
        rc = creq_build(&c->shard_req[s], CREQ_REGISTER, s, &m, NULL);
        if (rc == FLPS_OK)
            rc = creq_send(c, &c->shard_req[s]);
    }
    flps_free(pt);
    if (rc != FLPS_OK)
        return set_error(c, rc, "cannot register with the shards: %s",
                         flps_strerror(rc));
    return drain(c);
}

/* What create checks before it allocates anything. */
static int config_is_valid(const flps_client_config *cfg)
{
    return cfg != NULL && cfg->job != NULL && strlen(cfg->job) > 0 &&
           strlen(cfg->job) <= PROTO_JOB_MAX && cfg->workers > 0 &&
           cfg->rank < cfg->workers && cfg->nservers > 0 &&
           cfg->servers != NULL && cfg->ntensors > 0 &&
           cfg->ntensors <= PROTO_MAX_TENSORS && cfg->tensors != NULL &&
           cfg->lr > 0 && isfinite(cfg->lr) && cfg->momentum >= 0 &&
           cfg->momentum < 1;
}

flps_err flps_client_create(const flps_client_config *cfg, flps_client **out)
{
    return flps_client_create_with(cfg, NULL, out);
}

/* The largest message this client sends one shard: every element of the
 * model as an index/value pair, and room for the header. It sizes the
 * RDMA transport's registered buffers. */
static size_t largest_message(const flps_client_config *cfg)
{
    size_t n = 0;

    for (uint32_t i = 0; i < cfg->ntensors; i++)
        n += cfg->tensors[i].numel;
    return n * 8 + 65536;
}

/* A density warm-up: iterations (0 = none) and the start density. */
typedef struct warmup_cfg {
    uint64_t iterations;
    double start;
} warmup_cfg;

static flps_err create_on(const flps_client_config *cfg, transport *t,
                          const warmup_cfg *w, flps_client **out);

/* Whether w can apply to cfg (checked before anything is made; the log
 * line says why not). */
static int warmup_is_valid(const flps_client_config *cfg, const warmup_cfg *w)
{
    codec_spec cs;
    const char *comp = cfg->compression ? cfg->compression : "dense";

    if (w == NULL || w->iterations == 0)
        return 1;
    if (!(w->start > 0) || w->start > 1) {
        log_error("density warm-up: start density %g is out of range; "
                  "expected 0 < start <= 1",
                  w->start);
        return 0;
    }
    if (cfg->async) {
        log_error("density warm-up: only synchronous jobs follow a "
                  "warm-up (async = 0); leave it out for async and ssp");
        return 0;
    }
    if (strcmp(comp, "auto") != 0 &&
        (codec_spec_parse(comp, &cs) != FLPS_OK ||
         (cs.kind != CODEC_TOPK && cs.kind != CODEC_GTOPK &&
          cs.kind != CODEC_DGC))) {
        log_error("density warm-up: compression '%.64s' has no selection "
                  "density to warm up; use topk:D, gtopk:D, dgc:D or auto",
                  comp);
        return 0;
    }
    return 1;
}

static flps_err create_with(const flps_client_config *cfg,
                            const char *transport_name, const warmup_cfg *w,
                            flps_client **out);

flps_err flps_client_create_with(const flps_client_config *cfg,
                                 const char *transport_name, flps_client **out)
{
    return create_with(cfg, transport_name, NULL, out);
}

flps_err flps_client_create_warmup(const flps_client_config *cfg,
                                   const char *transport_name,
                                   uint64_t warmup_iterations,
                                   double start_density, flps_client **out)
{
    warmup_cfg w = {warmup_iterations, start_density};

    return create_with(cfg, transport_name, &w, out);
}

flps_err flps_client_create_on_warmup(const flps_client_config *cfg,
                                      transport *t, uint64_t warmup_iterations,
                                      double start_density, flps_client **out)
{
    warmup_cfg w = {warmup_iterations, start_density};

    return create_on(cfg, t, &w, out);
}

static flps_err create_with(const flps_client_config *cfg,
                            const char *transport_name, const warmup_cfg *w,
                            flps_client **out)
{
    transport_select sel = {.kind = TRANSPORT_KIND_ZMQ};
    const char *name = transport_name;
    transport *t = NULL;
    char why[1024];
    flps_err rc;

    /* Checked before the ZeroMQ context exists, so a bad configuration
     * costs nothing and is always FLPS_EINVAL. */
    if (out == NULL || !config_is_valid(cfg) || !warmup_is_valid(cfg, w))
        return FLPS_EINVAL;
    if (name == NULL)
        name = getenv("FLPS_TRANSPORT");
    if (name != NULL && name[0] != '\0' &&
        !transport_kind_parse(name, &sel.kind)) {
        log_error("transport: '%.64s'%s is not a transport; use zmq, rdma or "
                  "auto",
                  name, transport_name == NULL ? " (from FLPS_TRANSPORT)" : "");
        return FLPS_EINVAL;
    }
    sel.max_message_bytes = largest_message(cfg);
    rc = transport_create_for(&sel, &t, NULL, why, sizeof(why));
    if (rc != FLPS_OK) {
        log_error("%s", why); /* the caller has no client to ask */
        return rc;
    }
    if (why[0] != '\0')
        log_info("%s", why);
    rc = create_on(cfg, t, w, out);
    if (rc != FLPS_OK)
        transport_destroy(t);
    return rc;
}

/* The job's credentials from $FLPS_CREDENTIALS_FILE, when it names a
 * file (which must then load): the secret for every request, and the
 * CURVE keys for a ZeroMQ transport (before it connects). */
static flps_err client_credentials(flps_client *c, transport *t)
{
    flps_creds cr;
    char why[512];
    int found = 0;
    flps_err rc = creds_load_env(&cr, &found, why, sizeof(why));

    if (rc != FLPS_OK) {
        log_error("%s", why);
        return rc;
    }
    if (!found)
        return FLPS_OK;
    rc = creds_instance_id(&c->cid);
    if (rc != FLPS_OK) {
        log_error("cannot make a client id: no randomness (getrandom)");
        goto out;
    }
    snprintf(c->auth, sizeof(c->auth), "%s", cr.secret);
    if (cr.has_curve) {
        /* Before the first connect: every DEALER encrypts. */
        rc = transport_set_curve(t, &cr, 0, why, sizeof(why));
        if (rc == FLPS_ECONFIG && strcmp(t->vt->name, "zmq") != 0) {
            log_warn("%s", why); /* RDMA: the secret still authenticates */
            rc = FLPS_OK;
        } else if (rc != FLPS_OK) {
            log_error("%s", why);
        }
    }
out:
    creds_wipe(&cr);
    return rc;
}

flps_err flps_client_create_on(const flps_client_config *cfg, transport *t,
                               flps_client **out)
{
    return create_on(cfg, t, NULL, out);
}

static flps_err create_on(const flps_client_config *cfg, transport *t,
                          const warmup_cfg *w, flps_client **out)
{
    flps_client *c;
    flps_err rc;

    if (out == NULL || t == NULL || !config_is_valid(cfg) ||
        !warmup_is_valid(cfg, w))
        return FLPS_EINVAL;
    c = flps_calloc(1, sizeof(*c));
    if (c == NULL)
        return FLPS_ENOMEM;
    snprintf(c->job, sizeof(c->job), "%s", cfg->job);
    c->rank = cfg->rank;
    c->workers = cfg->workers;
    c->nshards = cfg->nservers;
    c->weighted = cfg->async == FLPS_MODE_WEIGHTED;
    c->async = cfg->async != 0 && !c->weighted;
    c->push_weight = 1;
    c->lr = cfg->lr;
    c->momentum = cfg->momentum;
    c->lr_cosine = cfg->lr_cosine != 0;
    c->iterations = cfg->iterations;
    c->part_size = cfg->part_size ? cfg->part_size : 65536;
    c->retry_s = (cfg->retry_ms > 0 ? cfg->retry_ms : 2000) / 1000.0;
    c->deadline_s = (cfg->deadline_ms > 0 ? cfg->deadline_ms : 300000) / 1000.0;
    c->staleness = UINT32_MAX;
    if (w != NULL && w->iterations > 0) {
        c->density_warmup = w->iterations;
        c->density_start = w->start;
    }
    rc = parse_compression(c, cfg->compression);
    if (rc != FLPS_OK) {
        log_error("%s", c->errmsg); /* the caller has no client to ask */
        goto fail;
    }
    c->endpoints = flps_calloc(c->nshards, sizeof(*c->endpoints));
    if (c->endpoints == NULL) {
        rc = FLPS_ENOMEM;
        goto fail;
    }
    rc = client_setup(c, cfg);
    if (rc != FLPS_OK) {
        log_error("cannot set up the client: %s",
                  c->errmsg[0] ? c->errmsg : flps_strerror(rc));
        goto fail;
    }
    rc = client_credentials(c, t);
    if (rc != FLPS_OK)
        goto fail;
    c->t = t;
    for (uint32_t s = 0; s < c->nshards; s++) {
        uint32_t peer;
        c->endpoints[s] = flps_strdup(cfg->servers[s] ? cfg->servers[s] : "");
        if (c->endpoints[s] == NULL) {
            rc = FLPS_ENOMEM;
            goto fail;
        }
        rc = transport_connect(c->t, c->endpoints[s], &peer);
        if (rc != FLPS_OK) {
            log_error("%s", c->t->errmsg);
            goto fail;
        }
    }
    rc = client_register(c);
    if (rc != FLPS_OK) {
        log_error("%s", c->errmsg);
        goto fail;
    }
    *out = c;
    return FLPS_OK;
fail:
    c->t = NULL; /* the caller keeps the transport on error */
    flps_client_destroy(c);
    return rc;
}

void flps_client_destroy(flps_client *c)
{
    if (c == NULL)
        return;
    for (uint32_t i = 0; c->parts != NULL && i < c->pm.nparts; i++) {
        creq_clear(&c->parts[i].req);
        codec_destroy(c->parts[i].cd);
        ef_destroy(c->parts[i].ef);
        proto_buf_release(c->parts[i].vel);
        proto_buf_release(c->parts[i].spare);
    }
    for (uint32_t s = 0; c->shard_req != NULL && s < c->nshards; s++)
        creq_clear(&c->shard_req[s]);
    transport_destroy(c->t);
    for (uint32_t i = 0; c->tensors != NULL && i < c->ntensors; i++) {
        codec_destroy(c->tensors[i].cd);
        ef_destroy(c->tensors[i].ef);
        flps_free(c->tensors[i].velocity);
        pairs_destroy(c->tensors[i].pairs);
    }
    for (uint32_t s = 0; c->endpoints != NULL && s < c->nshards; s++)
        flps_free(c->endpoints[s]);
    flps_free(c->endpoints);
    flps_free(c->tensors);
    flps_free(c->parts);
    flps_free(c->shard_req);
    flps_free(c->sel_lo);
    flps_free(c->sel_hi);
    flps_free(c->sel_pis);
    partmap_fini(&c->pm);
    explicit_bzero(c->auth, sizeof(c->auth));
    flps_free(c);
}

/* ---- init, pull, checkpoint ---- */

/* Pull every part; with since, name the version the replica holds so an
 * async shard answers with only what changed after it. */
static flps_err send_pulls_since(flps_client *c, int since)
{
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        proto_msg m;
        flps_err rc;
        msg_base(c, &m, PROTO_OP_PULL, i, 0);
        if (since)
            m.version = c->parts[i].held_version;
        rc = creq_build(&c->parts[i].req, CREQ_PULL, c->parts[i].shard, &m,
                        NULL);
        if (rc == FLPS_OK)
            rc = creq_send(c, &c->parts[i].req);
        if (rc != FLPS_OK)
            return set_error(c, rc, "cannot pull part %u", i);
    }
    return drain(c);
}

static flps_err send_pulls(flps_client *c)
{
    return send_pulls_since(c, 0);
}

flps_err flps_client_pull(flps_client *c)
{
    if (c->err != FLPS_OK)
        return c->err;
    return send_pulls(c);
}

flps_err flps_client_init(flps_client *c)
{
    if (c->err != FLPS_OK)
        return c->err;
    if (c->rank == 0) {
        for (uint32_t i = 0; i < c->pm.nparts; i++) {
            cpart *p = &c->parts[i];
            proto_buf *b = proto_buf_create((size_t)p->numel * 4);
            proto_msg m;
            flps_err rc;
            if (b == NULL)
                return set_error(c, FLPS_ENOMEM, "out of memory");
            memcpy(proto_buf_data(b), c->tensors[p->tensor].data + p->offset,
                   (size_t)p->numel * 4);
            msg_base(c, &m, PROTO_OP_INIT, i, 0);
            m.codec = PROTO_CODEC_DENSE;
            m.n = p->numel;
            m.val = proto_buf_data(b);
            rc = creq_build(&p->req, CREQ_INIT, p->shard, &m, b);
            proto_buf_release(b);
            if (rc == FLPS_OK)
                rc = creq_send(c, &p->req);
            if (rc != FLPS_OK)
                return set_error(c, rc, "cannot send initial values");
        }
        if (drain(c) != FLPS_OK)
            return c->err;
    }
    return send_pulls(c);
}

flps_err flps_client_checkpoint(flps_client *c)
{
    if (c->err != FLPS_OK)
        return c->err;
    for (uint32_t s = 0; s < c->nshards; s++) {
        proto_msg m;
        flps_err rc;
        msg_base(c, &m, PROTO_OP_CHECKPOINT, 0, 0);
        rc = creq_build(&c->shard_req[s], CREQ_CHECKPOINT, s, &m, NULL);
        if (rc == FLPS_OK)
            rc = creq_send(c, &c->shard_req[s]);
        if (rc != FLPS_OK)
            return set_error(c, rc, "cannot ask shard %u for a checkpoint", s);
    }
    return drain(c);
}

/* ---- push ---- */

/* Queue the push built in msg/b for part pi and account for its bytes. */
static flps_err send_push(flps_client *c, uint32_t pi, proto_msg *m,
                          proto_buf *b, uint32_t count)
{
    cpart *p = &c->parts[pi];
    flps_err rc = creq_build(&p->req, CREQ_PUSH, p->shard, m, b);

    proto_buf_release(b);
    if (rc == FLPS_OK)
        rc = creq_send(c, &p->req);
    if (rc != FLPS_OK)
        return set_error(c, rc, "cannot push part %u: %s", pi,
                         flps_strerror(rc));
    c->stats.pushes++;
    c->stats.elements_sent += count;
    for (size_t f = 0; f < p->req.nframes; f++)
        c->push_wire_bytes += transport_zmtp_frame_bytes(p->req.frames[f].len);
    /* The same push sent dense: the header (a dense header is the same
     * size or smaller) and one frame of f32 values. */
    c->dense_wire_bytes +=
        transport_zmtp_frame_bytes(proto_buf_len(p->req.hdr)) +
        transport_zmtp_frame_bytes((size_t)p->numel * 4);
    return FLPS_OK;
}

/* A payload of at least need bytes for a sparse push whose request lives
 * in part p. The payload of p's last push comes back once the transport
 * sent it and its update arrived: written again when it fits (and is not
 * far too large), so pushes of a steady size fault in no fresh pages. A
 * new one gets a quarter more room for selections that vary. p keeps a
 * reference for next time; the caller owns the one returned. NULL when
 * out of memory. */
static proto_buf *sparse_payload(cpart *p, size_t need)
{
    proto_buf *b;

    if (p->spare != NULL && proto_buf_is_unique(p->spare) &&
        proto_buf_len(p->spare) >= need &&
        proto_buf_len(p->spare) <= 2 * need + 65536) {
        b = p->spare;
        p->spare = NULL;
    } else {
        b = proto_buf_create(need + need / 4 + 64);
    }
    if (b == NULL)
        return NULL;
    proto_buf_release(p->spare);
    p->spare = proto_buf_hold(b);
    return b;
}

/* Push the pairs [lo, hi) of a layer's selection (tensor coordinates) to
 * the shard of part pi. idx NULL: every element, index j for val[j]. */
static flps_err push_sparse(flps_client *c, uint32_t pi, uint64_t iter,
                            const uint32_t *idx, const float *val, uint32_t lo,
                            uint32_t hi)
{
    cpart *p = &c->parts[pi];
    uint32_t n = hi - lo;
    proto_buf *b = sparse_payload(p, (size_t)n * 8);
    uint32_t *ix;
    float *v;
    proto_msg m;

    if (b == NULL)
        return set_error(c, FLPS_ENOMEM, "out of memory");
    ix = proto_buf_data(b);
    v = (float *)(ix + n);
    for (uint32_t j = 0; j < n; j++) {
        ix[j] = (uint32_t)((idx ? idx[lo + j] : lo + j) - p->offset);
        v[j] = val[lo + j];
    }
    msg_base(c, &m, PROTO_OP_PUSH, pi, iter);
    m.codec = PROTO_CODEC_SPARSE;
    m.n = n;
    m.idx = ix;
    m.val = v;
    return send_push(c, pi, &m, b, n);
}

/* dst[i] = m * v[i] + g[i] (v may be dst itself: each element is read
 * before it is written); returns max |dst| as max_abs_bits does. */
static uint32_t momentum_into(const float *g, const float *v, float m, size_t n,
                              float *dst)
{
    uint32_t mx = 0;

    for (size_t i = 0; i < n; i++) {
        float x = m * v[i] + g[i];
        uint32_t b;
        memcpy(&b, &x, sizeof(b));
        dst[i] = x;
        b &= 0x7fffffffu;
        mx = b > mx ? b : mx;
    }
    return mx;
}

static float bits_to_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}

/* Push parts[pis[0..cnt)] (all of one shard, ascending) as one message
 * of segments: their pairs [sel_lo, sel_hi) of the layer's selection
 * (tensor coordinates; idx NULL: every element) one after another, indices
 * relative to each part. Every part gets its own request sharing the
 * message, answered on its own. */
static flps_err push_joined(flps_client *c, const uint32_t *pis, uint32_t cnt,
                            uint64_t iter, const uint32_t *idx,
                            const float *val)
{
    cpart *p0 = &c->parts[pis[0]];
    size_t total = 0, at = 0;
    proto_seg *segs = flps_malloc((size_t)cnt * sizeof(*segs));
    proto_buf *b = NULL;
    uint32_t *ix;
    float *v;
    proto_msg m;
    creq *r0;
    flps_err rc;

    if (segs == NULL)
        return set_error(c, FLPS_ENOMEM, "out of memory");
    for (uint32_t k = 0; k < cnt; k++)
        total += c->sel_hi[pis[k]] - c->sel_lo[pis[k]];
    /* The first member keeps the payload for next time. */
    b = sparse_payload(p0, total * 8);
    if (b == NULL) {
        flps_free(segs);
        return set_error(c, FLPS_ENOMEM, "out of memory");
    }
    ix = proto_buf_data(b);
    v = (float *)(ix + total);
    for (uint32_t k = 0; k < cnt; k++) {
        const cpart *p = &c->parts[pis[k]];
        const uint32_t lo = c->sel_lo[pis[k]], hi = c->sel_hi[pis[k]];
        for (uint32_t j = lo; j < hi; j++) {
            ix[at + j - lo] = (uint32_t)((idx ? idx[j] : j) - p->offset);
            v[at + j - lo] = val[j];
        }
        segs[k].part = pis[k];
        segs[k].n = hi - lo;
        segs[k].nrej = 0;
        segs[k].version = 0;
        at += hi - lo;
    }
    msg_base(c, &m, PROTO_OP_PUSH, pis[0], iter);
    m.codec = PROTO_CODEC_SPARSE;
    m.n = (uint32_t)total;
    m.idx = ix;
    m.val = v;
    m.nsegs = cnt;
    m.segs = segs;
    r0 = &p0->req;
    rc = creq_build(r0, CREQ_PUSH, p0->shard, &m, b);
    proto_buf_release(b);
    flps_free(segs);
    if (rc != FLPS_OK)
        return set_error(c, rc, "cannot push %u parts to shard %u: %s", cnt,
                         p0->shard, flps_strerror(rc));
    r0->joined = 1;
    r0->n = c->sel_hi[pis[0]] - c->sel_lo[pis[0]];
    at = r0->n;
    for (uint32_t k = 1; k < cnt; k++) {
        creq *r = &c->parts[pis[k]].req;
        creq_clear(r);
        *r = *r0;
        r->hdr = proto_buf_hold(r0->hdr);
        r->payload = proto_buf_hold(r0->payload);
        r->n = c->sel_hi[pis[k]] - c->sel_lo[pis[k]];
        r->sent_idx = ix + at;
        r->sent_val = v + at;
        at += r->n;
    }
    rc = creq_send(c, r0);
    if (rc != FLPS_OK)
        return rc;
    for (uint32_t k = 1; k < cnt; k++) {
        creq *r = &c->parts[pis[k]].req;
        r->sent_at = r0->sent_at;
        r->first_sent = r0->first_sent;
    }
    c->stats.pushes++;
    c->stats.elements_sent += total;
    for (size_t f = 0; f < r0->nframes; f++)
        c->push_wire_bytes += transport_zmtp_frame_bytes(r0->frames[f].len);
    /* The same parts sent dense: one message each, a header like a
     * one-part push's and the part's f32 values. */
    for (uint32_t k = 0; k < cnt; k++)
        c->dense_wire_bytes +=
            transport_zmtp_frame_bytes(c->push_hdr_bytes) +
            transport_zmtp_frame_bytes((size_t)c->parts[pis[k]].numel * 4);
    return FLPS_OK;
}

/* Push a layer's selection, parts [first, last) with their pairs
 * [sel_lo, sel_hi): per shard, its parts together in messages of up to
 * PROTO_JOINED_PAIRS pairs (a part alone when it is larger or the shard has
 * no other). */
static flps_err push_selection(flps_client *c, uint32_t first, uint32_t last,
                               uint64_t iter, const uint32_t *idx,
                               const float *val)
{
    for (uint32_t sh = 0; sh < c->nshards; sh++) {
        uint32_t cnt = 0, pairs = 0;
        flps_err rc = FLPS_OK;
        for (uint32_t pi = first; pi <= last; pi++) {
            uint32_t np = 0;
            if (pi < last) {
                if (c->parts[pi].shard != sh)
                    continue;
                np = c->sel_hi[pi] - c->sel_lo[pi];
            }
            /* Flush the group before a part that would overflow it, and
             * at the end. */
            if (cnt > 0 && (pi == last || pairs + np > PROTO_JOINED_PAIRS)) {
                if (cnt == 1)
                    rc = push_sparse(c, c->sel_pis[0], iter, idx, val,
                                     c->sel_lo[c->sel_pis[0]],
                                     c->sel_hi[c->sel_pis[0]]);
                else
                    rc = push_joined(c, c->sel_pis, cnt, iter, idx, val);
                if (rc != FLPS_OK)
                    return rc;
                cnt = pairs = 0;
            }
            if (pi < last) {
                c->sel_pis[cnt++] = pi;
                pairs += np;
            }
        }
    }
    return FLPS_OK;
}

/* Push the layer's parts with the dense codec: no error feedback and no
 * codec buffer. The gradient is checked first (one read pass): a NaN or
 * Inf anywhere sends nothing and moves no velocity (FLPS_ENONFINITE, not
 * sticky). Then each part is written and queued at once, so the first
 * parts travel while the later ones are computed. With momentum the
 * payload is the velocity itself (it holds m * v + g as sent), updated in
 * place once the transport and the update are done with it: one copy of
 * the layer, not two. Finite inputs cannot make it overflow unless
 * m * max|v| + max|g| comes near FLT_MAX; then (and when the transport
 * still holds the last payload) the new velocity goes into a fresh buffer
 * and a part that would overflow stops the push before it is sent. */
static flps_err push_dense(flps_client *c, ctensor *t, uint32_t first,
                           uint32_t last, const float *grad, uint64_t iter)
{
    const float mom = (float)c->momentum;
    const uint32_t gbits = flps_max_abs_bits(grad, t->numel);
    int in_place;

    if (gbits >= FLPS_INF_BITS)
        return FLPS_ENONFINITE;
    /* 1 % of slack covers the rounding of m * v + g. */
    in_place =
        mom == 0.0f ||
        ((double)mom * t->vel_max + (double)bits_to_float(gbits)) * 1.01 <
            (double)FLT_MAX;
    if (!in_place) {
        /* Rare: find an overflow before anything moves. */
        for (uint32_t pi = first; pi < last; pi++) {
            const cpart *p = &c->parts[pi];
            const float *v = p->vel ? proto_buf_data(p->vel) : NULL;
            for (uint32_t i = 0; v != NULL && i < p->numel; i++)
                if (!isfinite(mom * v[i] + grad[p->offset + i]))
                    return FLPS_ENONFINITE;
        }
    }
    {
        double vmax = 0.0;
        for (uint32_t pi = first; pi < last; pi++) {
            cpart *p = &c->parts[pi];
            const size_t len = (size_t)p->numel * 4;
            proto_buf **keep = mom > 0.0f ? &p->vel : &p->spare;
            proto_buf *b = NULL;

            if (*keep != NULL && proto_buf_is_unique(*keep))
                b = proto_buf_hold(*keep);
            else
                b = proto_buf_create(len);
            if (b == NULL)
                return set_error(c, FLPS_ENOMEM,
                                 "out of memory for a push of %s", t->name);
            if (mom > 0.0f) {
                const float *v = p->vel ? proto_buf_data(p->vel) : NULL;
                uint32_t vb;
                if (v == NULL) {
                    memcpy(proto_buf_data(b), grad + p->offset, len);
                    vb = flps_max_abs_bits(grad + p->offset, p->numel);
                } else {
                    vb = momentum_into(grad + p->offset, v, mom, p->numel,
                                       proto_buf_data(b));
                }
                if ((double)bits_to_float(vb) > vmax)
                    vmax = (double)bits_to_float(vb);
            } else {
                memcpy(proto_buf_data(b), grad + p->offset, len);
            }
            if (*keep != b) {
                proto_buf_release(*keep);
                *keep = proto_buf_hold(b);
            }
            proto_buf_release(b);
        }
        t->vel_max = vmax;
    }
    /* Queued once every part is written: on a machine with few cores the
     * transport's thread copying the first parts out would otherwise
     * compete with the loop above for the core and the memory bus (the
     * push took 2.8x a memcpy of the layer that way, 1.4x this way). */
    for (uint32_t pi = first; pi < last; pi++) {
        cpart *p = &c->parts[pi];
        proto_buf *b = proto_buf_hold(mom > 0.0f ? p->vel : p->spare);
        proto_msg m;
        flps_err rc;

        msg_base(c, &m, PROTO_OP_PUSH, pi, iter);
        m.codec = PROTO_CODEC_DENSE;
        m.n = p->numel;
        m.val = proto_buf_data(b);
        rc = send_push(c, pi, &m, b, p->numel); /* takes our b */
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

/* Push a part encoded by fp16, qsgd or sign: the codec wrote its frames
 * straight into the payload b (codec_set_output), one after another. */
static flps_err push_encoded(flps_client *c, uint32_t pi, uint64_t iter,
                             const codec_msg *cm, proto_buf *b)
{
    cpart *p = &c->parts[pi];
    proto_msg m;

    msg_base(c, &m, PROTO_OP_PUSH, pi, iter);
    m.n = p->numel;
    m.codec = PROTO_CODEC_ENCODED;
    snprintf(m.spec, sizeof(m.spec), "%s", c->spec_text);
    m.nenc = (uint32_t)cm->nframes;
    for (size_t f = 0; f < cm->nframes; f++) {
        m.enc[f].data = cm->frames[f].data;
        m.enc[f].len = cm->frames[f].len;
    }
    return send_push(c, pi, &m, b, p->numel);
}

/* Encode n elements of gradient g: through error feedback when the codec
 * is biased, else with plain momentum in velocity. */
static flps_err encode_grad(flps_client *c, codec *cd, ef *e, float *velocity,
                            const float *g, size_t n, codec_msg *out)
{
    const float m = (float)c->momentum;

    if (e != NULL)
        return ef_step(e, cd, g, out);
    for (size_t i = 0; i < n; i++)
        velocity[i] = m * velocity[i] + g[i];
    return codec_encode(cd, velocity, n, out);
}

static flps_err push_grad(flps_client *c, uint32_t tensor, const float *grad,
                          uint64_t iter)
{
    ctensor *t;
    uint32_t first, last;
    codec_msg cm;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (tensor >= c->ntensors || grad == NULL)
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    first = c->pm.first_part[tensor];
    last = tensor_end_part(c, tensor);
    rc = check_tensor_idle(c, tensor);
    if (rc != FLPS_OK)
        return rc;
    /* A NaN or Inf changes nothing (no part is sent, no residual or
     * velocity moves) and the call can be repeated with a good gradient.
     * The dense codec and error feedback check as they go, before anything
     * moves (ef_step: FLPS_ENONFINITE with nothing changed); the paths
     * that encode part by part or update a plain velocity first check up
     * front. */
    if (c->spec.kind == CODEC_DENSE && !c->is_auto)
        return push_dense(c, t, first, last, grad, iter);
    if ((!c->sparse || t->ef == NULL) && !flps_all_finite(grad, t->numel))
        return FLPS_ENONFINITE;

    if (!c->sparse) {
        for (uint32_t pi = first; pi < last; pi++) {
            cpart *p = &c->parts[pi];
            float *vel = t->velocity ? t->velocity + p->offset : NULL;
            size_t cap = codec_max_bytes(&c->spec, p->numel);
            proto_buf *b = proto_buf_create(cap);
            if (b == NULL)
                return set_error(c, FLPS_ENOMEM, "out of memory");
            codec_set_output(p->cd, proto_buf_data(b), cap);
            rc = encode_grad(c, p->cd, p->ef, vel, grad + p->offset, p->numel,
                             &cm);
            codec_set_output(p->cd, NULL, 0); /* when nothing was encoded */
            if (rc != FLPS_OK) {
                proto_buf_release(b);
                return set_error(c, rc, "cannot encode part %u of %s: %s", pi,
                                 t->name, flps_strerror(rc));
            }
            rc = push_encoded(c, pi, iter, &cm, b); /* takes b */
            if (rc != FLPS_OK)
                return rc;
        }
        return FLPS_OK;
    }
    /* The density of this iteration under the warm-up: a pure function of
     * iter, so every worker (and a gtopk shard) takes the same. */
    if (c->density_warmup > 0 && t->target > 0)
        codec_set_density(t->cd,
                          codec_warmup_density(c->density_start, t->target,
                                               c->density_warmup, iter));
    /* Layer-wise selection, split by part: indices are ascending, parts of
     * a tensor are consecutive ranges. */
    rc = encode_grad(c, t->cd, t->ef, t->velocity, grad, t->numel, &cm);
    if (rc == FLPS_ENONFINITE && t->ef != NULL)
        return rc; /* ef_step moved nothing */
    if (rc != FLPS_OK)
        return set_error(c, rc, "cannot encode layer %s: %s", t->name,
                         flps_strerror(rc));
    if (cm.idx == NULL) {
        /* A dense layer of an auto job: every element, as pairs, so the
         * shard's union aggregation takes it like any other push. */
        const float *vals = (const float *)cm.frames[0].data;
        for (uint32_t pi = first; pi < last; pi++) {
            c->sel_lo[pi] = (uint32_t)c->parts[pi].offset;
            c->sel_hi[pi] =
                (uint32_t)(c->parts[pi].offset + c->parts[pi].numel);
        }
        return push_selection(c, first, last, iter, NULL, vals);
    }
    {
        const float *vals = (const float *)cm.frames[1].data;
        uint32_t j = 0, count = (uint32_t)cm.count;
        for (uint32_t pi = first; pi < last; pi++) {
            uint64_t end = c->parts[pi].offset + c->parts[pi].numel;
            c->sel_lo[pi] = j;
            while (j < count && cm.idx[j] < end)
                j++;
            c->sel_hi[pi] = j;
        }
        return push_selection(c, first, last, iter, cm.idx, vals);
    }
}

flps_err flps_client_push(flps_client *c, uint32_t tensor, const float *grad,
                          uint64_t iter)
{
    flps_err rc = push_grad(c, tensor, grad, iter);

    /* From now on a rejection of this tensor goes to the client's own
     * residual, not to the caller's mask. No reply is handled before
     * flps_client_wait, so this is in time. */
    if (rc == FLPS_OK && c->tensors[tensor].pairs != NULL)
        pairs_forget(c->tensors[tensor].pairs);
    return rc;
}

/* ---- pushes of pairs selected by the caller ---- */

/* A tensor's last flps_client_push_pairs. The arrays grow to the largest
 * push seen and are kept. key and key2 are the sort's scratch: a refused
 * push is sorted and checked there, so the last push's pairs and mask
 * stay as they were. */
struct cpairs {
    size_t cap;    /* elements of every array below */
    size_t n;      /* pairs of the last push */
    int live;      /* the tensor's last push was a push of pairs */
    uint32_t *idx; /* the pairs, ascending by index (tensor coordinates) */
    float *val;
    uint32_t *pos;        /* pos[s]: the caller's position of sorted pair s */
    uint8_t *taken;       /* by the caller's position */
    uint64_t *key, *key2; /* index << 32 | the caller's position */
};

static void pairs_destroy(struct cpairs *pr)
{
    if (pr == NULL)
        return;
    flps_free(pr->idx);
    flps_free(pr->val);
    flps_free(pr->pos);
    flps_free(pr->taken);
    flps_free(pr->key);
    flps_free(pr->key2);
    flps_free(pr);
}

static int pairs_are_live(const struct cpairs *pr)
{
    return pr->live;
}

static void pairs_forget(struct cpairs *pr)
{
    pr->live = 0;
}

/* Room for n pairs in *prp (made on first use); FLPS_ENOMEM leaves what
 * was there. */
static flps_err pairs_reserve(struct cpairs **prp, size_t n)
{
    struct cpairs *pr = *prp;
    void *a[6];
    const size_t sz[6] = {sizeof(uint32_t), sizeof(float),    sizeof(uint32_t),
                          sizeof(uint8_t),  sizeof(uint64_t), sizeof(uint64_t)};

    if (pr == NULL) {
        pr = flps_calloc(1, sizeof(*pr));
        if (pr == NULL)
            return FLPS_ENOMEM;
        *prp = pr;
    }
    if (n <= pr->cap)
        return FLPS_OK;
    for (int i = 0; i < 6; i++) {
        a[i] = flps_malloc(n * sz[i]);
        if (a[i] == NULL) {
            while (i-- > 0)
                flps_free(a[i]);
            return FLPS_ENOMEM;
        }
    }
    /* The live pairs move along: their update may still be on its way. */
    if (pr->n > 0) {
        memcpy(a[0], pr->idx, pr->n * sz[0]);
        memcpy(a[1], pr->val, pr->n * sz[1]);
        memcpy(a[2], pr->pos, pr->n * sz[2]);
        memcpy(a[3], pr->taken, pr->n * sz[3]);
    }
    flps_free(pr->idx);
    flps_free(pr->val);
    flps_free(pr->pos);
    flps_free(pr->taken);
    flps_free(pr->key);
    flps_free(pr->key2);
    pr->idx = a[0];
    pr->val = a[1];
    pr->pos = a[2];
    pr->taken = a[3];
    pr->key = a[4];
    pr->key2 = a[5];
    pr->cap = n;
    return FLPS_OK;
}

/* Sort key[0..n) by its upper 32 bits (the index), stably: an LSD radix
 * sort of 4 byte-wide passes through key2, skipped when the caller's pairs
 * are ascending already (as a GPU selection sorted before the copy is).
 * Returns the sorted array (key or key2). */
static uint64_t *pairs_sort(uint64_t *key, uint64_t *key2, size_t n)
{
    size_t i;

    for (i = 1; i < n; i++)
        if (key[i - 1] > key[i])
            break;
    if (i >= n)
        return key;
    for (int shift = 32; shift < 64; shift += 8) {
        size_t count[256] = {0}, at = 0;
        for (i = 0; i < n; i++)
            count[(key[i] >> shift) & 0xff]++;
        for (int d = 0; d < 256; d++) {
            size_t here = count[d];
            count[d] = at;
            at += here;
        }
        for (i = 0; i < n; i++)
            key2[count[(key[i] >> shift) & 0xff]++] = key[i];
        {
            uint64_t *tmp = key;
            key = key2;
            key2 = tmp;
        }
    }
    return key; /* 4 passes: back in the array it started in */
}

/* An update's rejected indices (part-relative, of the part at offset):
 * those pairs were not taken. */
static void pairs_mark_rejected(struct cpairs *pr, uint64_t offset,
                                const proto_msg *m)
{
    for (uint32_t q = 0; q < m->nrej; q++) {
        uint64_t want = offset + m->rej[q];
        size_t lo = 0, hi = pr->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (pr->idx[mid] < want)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < pr->n && pr->idx[lo] == want)
            pr->taken[pr->pos[lo]] = 0;
    }
}

flps_err flps_client_push_pairs(flps_client *c, uint32_t tensor,
                                const uint32_t *idx, const float *val, size_t n,
                                uint64_t iter)
{
    ctensor *t;
    struct cpairs *pr;
    uint32_t first, last;
    uint64_t *sorted;
    flps_err rc;

    if (c == NULL)
        return FLPS_EINVAL;
    if (c->err != FLPS_OK)
        return c->err;
    if (tensor >= c->ntensors || (n > 0 && (idx == NULL || val == NULL)))
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    if (n > t->numel)
        return FLPS_EINVAL;
    if (!c->sparse)
        return FLPS_ESTATE; /* the shards take dense values only */
    first = c->pm.first_part[tensor];
    last = tensor_end_part(c, tensor);
    rc = check_tensor_idle(c, tensor);
    if (rc != FLPS_OK)
        return rc;
    if (!flps_all_finite(val, n))
        return FLPS_ENONFINITE;
    for (size_t j = 0; j < n; j++)
        if (idx[j] >= t->numel)
            return FLPS_ERANGE;
    rc = pairs_reserve(&t->pairs, n);
    if (rc != FLPS_OK)
        return set_error(c, rc, "out of memory for a push of %s", t->name);
    pr = t->pairs;
    for (size_t j = 0; j < n; j++)
        pr->key[j] = (uint64_t)idx[j] << 32 | j;
    sorted = pairs_sort(pr->key, pr->key2, n);
    for (size_t s = 1; s < n; s++)
        if (sorted[s] >> 32 == sorted[s - 1] >> 32)
            return FLPS_EINVAL; /* an index twice */
    /* Accepted: from here the pairs replace the last push's. */
    for (size_t s = 0; s < n; s++) {
        uint32_t j = (uint32_t)sorted[s];
        pr->idx[s] = (uint32_t)(sorted[s] >> 32);
        pr->val[s] = val[j];
        pr->pos[s] = j;
        pr->taken[s] = 1;
    }
    pr->n = n;
    pr->live = 1;
    {
        uint32_t j = 0;
        for (uint32_t pi = first; pi < last; pi++) {
            uint64_t end = c->parts[pi].offset + c->parts[pi].numel;
            c->sel_lo[pi] = j;
            while (j < n && pr->idx[j] < end)
                j++;
            c->sel_hi[pi] = j;
        }
    }
    return push_selection(c, first, last, iter, pr->idx, pr->val);
}

flps_err flps_client_pairs_taken(const flps_client *c, uint32_t tensor,
                                 uint8_t *taken, size_t n)
{
    const ctensor *t;
    const struct cpairs *pr;
    uint32_t first, last;

    if (c == NULL || tensor >= c->ntensors || (taken == NULL && n > 0))
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    pr = t->pairs;
    if (pr == NULL || !pr->live)
        return FLPS_ESTATE;
    first = c->pm.first_part[tensor];
    last = tensor_end_part(c, tensor);
    for (uint32_t pi = first; pi < last; pi++)
        if (c->parts[pi].req.kind == CREQ_PUSH)
            return FLPS_ESTATE;
    if (n != pr->n)
        return FLPS_EINVAL;
    if (n > 0)
        memcpy(taken, pr->taken, n);
    return FLPS_OK;
}

/* The slowest rank's next iteration over every part, as the last pulls
 * said. */
static uint64_t slowest_of(const flps_client *c)
{
    uint64_t lo = UINT64_MAX;

    for (uint32_t i = 0; i < c->pm.nparts; i++)
        if (c->parts[i].slowest < lo)
            lo = c->parts[i].slowest;
    return lo;
}

/* Bounded staleness: this worker starts iteration iter + 1 only once the
 * slowest rank has pushed every iteration below iter + 1 - staleness;
 * until then it pulls again (the model it will compute on gets fresher
 * too). Bounded by the request deadline: a rank that never comes is an
 * error naming how far behind it is. */
static flps_err wait_for_slowest(flps_client *c, uint64_t iter)
{
    const uint64_t next = iter + 1;
    double t0 = flps_mono_s();
    long pause_us = 500;
    flps_err rc;

    while (next > slowest_of(c) + c->staleness) {
        struct timespec ts;

        if (flps_mono_s() - t0 >= c->deadline_s)
            return set_error(c, FLPS_ETIMEDOUT,
                             "ssp: waited %.0f s for the slowest worker, "
                             "which is at iteration %llu, %llu behind this "
                             "one (staleness %u)",
                             c->deadline_s, (unsigned long long)slowest_of(c),
                             (unsigned long long)(next - slowest_of(c)),
                             c->staleness);
        ts.tv_sec = 0;
        ts.tv_nsec = pause_us * 1000L;
        nanosleep(&ts, NULL);
        if (pause_us < 20000)
            pause_us *= 2;
        rc = send_pulls_since(c, 1);
        if (rc != FLPS_OK)
            return rc;
    }
    c->stale_wait_s += flps_mono_s() - t0;
    return FLPS_OK;
}

flps_err flps_client_set_staleness(flps_client *c, uint32_t staleness)
{
    if (c == NULL)
        return FLPS_EINVAL;
    if (!c->async)
        return FLPS_ESTATE; /* not sticky: the client is unchanged */
    c->staleness = staleness;
    return FLPS_OK;
}

flps_err flps_client_set_push_weight(flps_client *c, double weight)
{
    if (c == NULL || !isfinite(weight) || weight < 0 ||
        weight > PROTO_WEIGHT_MAX)
        return FLPS_EINVAL;
    if (!c->weighted)
        return FLPS_ESTATE; /* not sticky: the client is unchanged */
    c->push_weight = weight;
    return FLPS_OK;
}

double flps_client_stale_wait_seconds(const flps_client *c)
{
    return c != NULL ? c->stale_wait_s : 0;
}

flps_err flps_client_wait(flps_client *c, uint64_t iter)
{
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        const creq *r = &c->parts[i].req;
        if (r->kind == CREQ_PUSH && r->iter != iter)
            return set_error(c, FLPS_ESTATE,
                             "waiting for iteration %llu but part %u was "
                             "pushed for iteration %llu",
                             (unsigned long long)iter, i,
                             (unsigned long long)r->iter);
    }
    rc = drain(c);
    if (rc != FLPS_OK || !c->async)
        return rc;
    rc = send_pulls_since(c, 1);
    if (rc != FLPS_OK || c->staleness == UINT32_MAX)
        return rc;
    return wait_for_slowest(c, iter);
}

flps_err flps_client_wait_layer(flps_client *c, uint32_t tensor, uint64_t iter)
{
    uint32_t first, last;
    flps_err rc = FLPS_OK;

    if (c == NULL || tensor >= c->ntensors)
        return FLPS_EINVAL;
    if (c->err != FLPS_OK)
        return c->err;
    if (c->async)
        return FLPS_ESTATE; /* not sticky: async waits pull the model */
    first = c->pm.first_part[tensor];
    last = tensor_end_part(c, tensor);
    for (uint32_t i = first; i < last; i++) {
        const creq *r = &c->parts[i].req;
        if (r->kind == CREQ_PUSH && r->iter != iter)
            return set_error(c, FLPS_ESTATE,
                             "waiting for layer %s of iteration %llu but "
                             "part %u was pushed for iteration %llu",
                             c->tensors[tensor].name, (unsigned long long)iter,
                             i, (unsigned long long)r->iter);
    }
    /* Other layers' replies that come first are applied on the way. */
    while (rc == FLPS_OK && parts_pending(c, first, last))
        rc = drain_once(c);
    return rc;
}

/* ---- auto jobs ---- */

flps_err flps_client_set_layer_codec(flps_client *c, uint32_t tensor,
                                     const char *spec)
{
    codec_spec cs;
    codec *cd = NULL;
    ctensor *t;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (!c->is_auto)
        return FLPS_ESTATE;
    if (tensor >= c->ntensors || spec == NULL ||
        codec_spec_parse(spec, &cs) != FLPS_OK ||
        (cs.kind != CODEC_DENSE && cs.kind != CODEC_TOPK))
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    /* The residual and velocity stay: a layer turning dense flushes its
     * residual in its next push, one turning sparse starts from zero. The
     * encoded message of an outstanding push lives in its request's
     * payload, not in the codec, so the swap is safe at any time. */
    rc = codec_create(&cs, layer_seed(c, tensor), &cd);
    if (rc != FLPS_OK)
        return rc;
    codec_destroy(t->cd);
    t->cd = cd;
    t->target = cs.kind == CODEC_TOPK ? cs.density : 0;
    return FLPS_OK;
}

/* Send one PULL of part pi and wait for it; nothing else is outstanding. */
static flps_err pull_part(flps_client *c, uint32_t pi)
{
    proto_msg m;
    flps_err rc;

    msg_base(c, &m, PROTO_OP_PULL, pi, 0);
    rc = creq_build(&c->parts[pi].req, CREQ_PULL, c->parts[pi].shard, &m, NULL);
    if (rc == FLPS_OK)
        rc = creq_send(c, &c->parts[pi].req);
    if (rc != FLPS_OK)
        return set_error(c, rc, "cannot pull part %u", pi);
    return drain(c);
}

flps_err flps_client_measure_network(flps_client *c, double *alpha,
                                     double *beta)
{
    double rtt = INFINITY, full = INFINITY, a, b, bytes = 0;
    uint32_t small = 0;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (alpha == NULL || beta == NULL)
        return FLPS_EINVAL;
    if (any_pending(c))
        return FLPS_ESTATE;
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        bytes += 4.0 * c->parts[i].numel;
        if (c->parts[i].numel < c->parts[small].numel)
            small = i;
    }
    /* Shortest of several: the first request may pay for connection
     * set-up and cold caches, later ones for a busy scheduler. */
    for (int k = 0; k < 5; k++) {
        double t0 = flps_mono_s();
        rc = pull_part(c, small);
        if (rc != FLPS_OK)
            return rc;
        rtt = fmin(rtt, flps_mono_s() - t0);
    }
    for (int k = 0; k < 3; k++) {
        double t0 = flps_mono_s();
        rc = send_pulls(c);
        if (rc != FLPS_OK)
            return rc;
        full = fmin(full, flps_mono_s() - t0);
    }
    /* A clock that did not move (or a loopback faster than its
     * resolution) must still give positive numbers. */
    a = rtt > 0 ? rtt / 2 : 1e-9;
    b = (full - 2 * a > 0 ? full - 2 * a : full) / bytes;
    if (!(b > 0))
        b = 1e-12;
    *alpha = a;
    *beta = b;
    return FLPS_OK;
}
