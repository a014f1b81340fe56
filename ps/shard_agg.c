/* A shard's pushes: the checks a push must pass, asynchronous pushes
 * applied (and logged) as they come, synchronous ones held until every
 * rank pushed the part's iteration, which shard_close.c then closes, and
 * pushes of several parts, whose parts keep views of one message. */
#include "ps/shard_impl.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/quote.h"
#include "compress/codec.h"

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

static flps_err apply_async(ps_shard *s, uint32_t peer, ps_part *p,
                            const proto_msg *m)
{
    const float scale =
        (float)(proto_jobcfg_lr_at(&s->jc, m->iter) / (double)s->jc.workers);
    const int dense = m->codec != PROTO_CODEC_SPARSE;
    const float *vals =
        m->codec == PROTO_CODEC_ENCODED ? p->decoded[m->rank] : m->val;
    float *delta =
        ps_shard_grow(s->delta, &s->delta_cap, (size_t)m->n + 1, sizeof(float));
    wal_record wr;
    uint32_t bad = 0;
    flps_err rc;

    if (delta == NULL)
        return FLPS_ENOMEM;
    s->delta = delta;
    for (uint32_t j = 0; j < m->n; j++) {
        delta[j] = -(scale * vals[j]);
        bad |= ps_nonfinite_bit(p->w[dense ? j : m->idx[j]] + delta[j]);
    }
    /* A finite push can still overflow the values it is added to. */
    if (bad != 0)
        return FLPS_ENONFINITE;
    memset(&wr, 0, sizeof(wr));
    wr.kind = dense ? WAL_ADD_DENSE : WAL_ADD_SPARSE;
    wr.part = p->id;
    wr.rank = m->rank;
    /* Async parts have no open iteration: the record keeps the pushing
     * rank's next iteration, so a restored shard still refuses a repeated
     * push (replay_record). */
    wr.iter = m->iter + 1;
    wr.version = p->version + 1;
    wr.n = m->n;
    wr.idx = m->idx;
    wr.val = delta;
    rc = ps_shard_wal(s, &wr);
    if (rc == FLPS_OK) {
        ps_reply r;
        /* How far ahead of the slowest rank this push is (before it). */
        const uint64_t slow = ps_part_slowest(s, p);

        /* Out of memory here only costs the sparse pulls (full ones are
         * answered then). */
        if (p->touched == NULL) {
            p->touched = flps_malloc((size_t)p->numel * sizeof(*p->touched));
            for (uint32_t i = 0; p->touched != NULL && i < p->numel; i++)
                p->touched[i] = p->version;
        }
        if (m->iter > slow && m->iter - slow > s->stats.async_max_lead)
            s->stats.async_max_lead = m->iter - slow;
        for (uint32_t j = 0; j < m->n; j++)
            p->w[dense ? j : m->idx[j]] += delta[j];
        p->version++;
        for (uint32_t j = 0; p->touched != NULL && j < m->n; j++)
            p->touched[dense ? j : m->idx[j]] = p->version;
        p->last_async[m->rank] = m->iter + 1;
        s->stats.updates++;
        ps_shard_reply_init(s, &r, PROTO_OP_ACK, m->rank, m->part, m->iter,
                            p->version);
        snprintf(r.msg.text, sizeof(r.msg.text), "applied");
        r.msg.slowest = ps_part_slowest(s, p);
        s->cfg.send(s->cfg.send_arg, peer, &r);
    }
    return rc;
}

/* A codec-encoded push (fp16, qsgd, sign) must name the job's codec and
 * cover the whole part. */
static flps_err check_encoded(ps_shard *s, uint32_t peer, const ps_part *p,
                              const proto_msg *m, codec_spec *spec)
{
    if (s->jc.agg != PROTO_AGG_DENSE || strcmp(m->spec, s->jc.compression) ||
        codec_spec_parse(m->spec, spec) != FLPS_OK ||
        codec_kind_is_sparse(spec->kind)) {
        char got[PROTO_SPEC_MAX * 4 + 4];
        flps_quote_str(got, sizeof(got), m->spec, PROTO_SPEC_MAX);
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "push encoded as '%s' but the job's codec is '%s'",
                             got, s->jc.compression);
        return FLPS_EPROTO;
    }
    if (m->n != p->numel) {
        ps_shard_reply_error(
            s, peer, m, FLPS_EPROTO,
            "encoded push for part %u says %u elements; the part "
            "has %u",
            p->id, m->n, p->numel);
        return FLPS_EPROTO;
    }
    return FLPS_OK;
}

/* Decode an encoded push into its rank's dense buffer. Called only once
 * the push passed every other check: the buffer of a push already accepted
 * for this iteration is never overwritten. codec_decode validates
 * completely (frame sizes, values) before it writes. */
static flps_err decode_encoded(ps_shard *s, uint32_t peer, ps_part *p,
                               const proto_msg *m, const codec_spec *spec)
{
    codec_frame f[PROTO_ENC_MAX_FRAMES];
    float **slot = &p->decoded[m->rank];
    flps_err rc;

    if (*slot == NULL) {
        *slot = flps_malloc((size_t)p->numel * sizeof(float));
        if (*slot == NULL) {
            ps_shard_reply_error(s, peer, m, FLPS_ENOMEM, "out of memory");
            return FLPS_ENOMEM;
        }
    }
    for (uint32_t i = 0; i < m->nenc; i++) {
        f[i].data = m->enc[i].data;
        f[i].len = m->enc[i].len;
    }
    memset(*slot, 0, (size_t)p->numel * sizeof(float));
    rc = codec_decode(spec, f, m->nenc, *slot, p->numel);
    if (rc != FLPS_OK)
        ps_shard_reply_error(s, peer, m, rc,
                             "cannot decode the %s push for part %u", m->spec,
                             p->id);
    return rc;
}

/* What m carries against the job and the part: the job's codec and way of
 * aggregating, the part's size, indices inside it, a weight where the job
 * averages by weight. An encoded push's parsed codec goes to *spec. */
static flps_err check_shape(ps_shard *s, uint32_t peer, const ps_part *p,
                            const proto_msg *m, codec_spec *spec)
{
    const int want_sparse = s->jc.agg != PROTO_AGG_DENSE;
    flps_err rc;

    if (m->codec == PROTO_CODEC_ENCODED) {
        rc = check_encoded(s, peer, p, m, spec);
        if (rc != FLPS_OK)
            return rc;
    } else if ((m->codec == PROTO_CODEC_SPARSE) != want_sparse) {
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "this job aggregates %s pushes, got a %s one",
                             want_sparse ? "sparse" : "dense",
                             m->codec == PROTO_CODEC_SPARSE ? "sparse"
                                                            : "dense");
        return FLPS_EPROTO;
    }
    if (m->codec == PROTO_CODEC_DENSE && m->n != p->numel) {
        ps_shard_reply_error(
            s, peer, m, FLPS_EPROTO,
            "dense push for part %u has %u values; the part has %u", p->id,
            m->n, p->numel);
        return FLPS_EPROTO;
    }
    if (m->codec == PROTO_CODEC_SPARSE && m->n > 0 &&
        m->idx[m->n - 1] >= p->numel) {
        /* Indices are ascending (checked on decode): the last is the max. */
        ps_shard_reply_error(s, peer, m, FLPS_ERANGE,
                             "index %u is outside part %u of %u elements",
                             m->idx[m->n - 1], p->id, p->numel);
        return FLPS_ERANGE;
    }
    if (s->jc.mode == PROTO_MODE_WEIGHTED && !m->has_weight) {
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "this job averages pushes by weight: a push "
                             "carries its weight (header key wt)");
        return FLPS_EPROTO;
    }
    return FLPS_OK;
}

/* m's iteration against p's: sync, the open one and not yet pushed by the
 * rank; async, not below the rank's next. */
static flps_err check_iteration(ps_shard *s, uint32_t peer, const ps_part *p,
                                const proto_msg *m)
{
    const int async = s->jc.mode == PROTO_MODE_ASYNC;

    if (!async && m->iter < p->iter) {
        ps_shard_reply_error(s, peer, m, FLPS_ELATE,
                             "iteration %llu of part %u is closed (open: %llu)",
                             (unsigned long long)m->iter, p->id,
                             (unsigned long long)p->iter);
        return FLPS_ELATE;
    }
    if (!async && m->iter > p->iter) {
        ps_shard_reply_error(
            s, peer, m, FLPS_EFUTURE,
            "iteration %llu of part %u is not open yet (open: %llu)",
            (unsigned long long)m->iter, p->id, (unsigned long long)p->iter);
        return FLPS_EFUTURE;
    }
    /* Async parts have no open iteration: a repeat is a push below the
     * rank's next iteration. Sync: the rank's push is already held. */
    if (async ? m->iter < p->last_async[m->rank] : p->rx[m->rank] != NULL) {
        ps_shard_reply_error(s, peer, m, FLPS_EDUP,
                             "rank %u already pushed iteration %llu of part %u",
                             m->rank, (unsigned long long)m->iter, p->id);
        return FLPS_EDUP;
    }
    return FLPS_OK;
}

/* An async push: applied at once, or refused with nothing applied. */
static flps_err push_async(ps_shard *s, uint32_t peer, ps_part *p,
                           const proto_msg *m)
{
    flps_err rc = apply_async(s, peer, p, m);

    if (rc == FLPS_ENONFINITE) {
        ps_shard_reply_error(
            s, peer, m, rc,
            "rank %u's push to part %u would make a parameter Inf or "
            "NaN; nothing applied, the part keeps its values",
            m->rank, p->id);
        return rc;
    }
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, peer, m, rc, "cannot apply the push: %s",
                             flps_strerror(rc));
        return rc;
    }
    s->stats.pushes++;
    s->stats.elements_in += m->n;
    return FLPS_OK;
}

/* A sync push: held (p keeps rx) until every rank pushed the iteration,
 * whose last push closes it. */
static flps_err push_hold(ps_shard *s, transport_rx *rx, ps_part *p,
                          const proto_msg *m, int *kept)
{
    p->rx[m->rank] = rx;
    p->push[m->rank] = *m;
    p->peer[m->rank] = rx->peer;
    if (p->arrived == 0)
        p->first_push_s = flps_mono_s();
    p->arrived++;
    *kept = 1;
    s->stats.pushes++;
    s->stats.elements_in += m->n;
    if (p->arrived == s->jc.workers)
        return ps_close_iteration(s, p);
    return FLPS_OK;
}

flps_err ps_agg_push(ps_shard *s, transport_rx *rx, const proto_msg *m,
                     int *kept)
{
    const uint32_t peer = rx->peer;
    flps_err rc;
    ps_part *p = ps_shard_request_part(s, peer, m, 1, &rc);
    const int async = s->jc.mode == PROTO_MODE_ASYNC;
    codec_spec spec;

    if (p == NULL)
        return rc;
    rc = check_shape(s, peer, p, m, &spec);
    if (rc != FLPS_OK)
        return rc;
    if (!async && m->iter + 1 == p->iter && p->has_last)
        return ps_close_answer_late(s, peer, p, m);
    rc = check_iteration(s, peer, p, m);
    if (rc != FLPS_OK)
        return rc;
    if (m->codec == PROTO_CODEC_ENCODED) {
        rc = decode_encoded(s, peer, p, m, &spec);
        if (rc != FLPS_OK)
            return rc;
    }
    if (async)
        return push_async(s, peer, p, m);
    return push_hold(s, rx, p, m, kept);
}

/* ---- pushes of several parts ---- */

/* A received message that several parts keep: views of it, each released
 * on its own; the message goes when the last does, and with it the
 * indices its decoder expanded from compact frames, which the parts' held
 * pushes point into. The shard is one thread: a plain count. */
typedef struct rx_share {
    transport_rx *rx;
    uint32_t refs;
    uint32_t *expanded; /* taken from the decoded message; may be NULL */
} rx_share;

typedef struct rx_view {
    transport_rx base;
    rx_share *share;
} rx_view;

static void rx_share_drop(rx_share *sh)
{
    if (--sh->refs == 0) {
        transport_rx_release(sh->rx);
        flps_free(sh->expanded);
        flps_free(sh);
    }
}

static void rx_view_release(transport_rx *rx)
{
    rx_view *v = (rx_view *)rx;

    rx_share_drop(v->share);
    flps_free(v);
}

/* A share of rx holding our reference (refs 1), which takes what m owns
 * of its indices; NULL when out of memory (rx and m untouched). */
static rx_share *rx_share_new(transport_rx *rx, proto_msg *m)
{
    rx_share *sh = flps_malloc(sizeof(*sh));

    if (sh == NULL)
        return NULL;
    sh->rx = rx;
    sh->refs = 1;
    sh->expanded = proto_msg_take_expanded(m);
    return sh;
}

static transport_rx *rx_view_new(rx_share *sh)
{
    rx_view *v = flps_malloc(sizeof(*v));

    if (v == NULL)
        return NULL;
    v->base = *sh->rx;
    v->base.impl = NULL;
    v->base.release = rx_view_release;
    v->share = sh;
    sh->refs++;
    return &v->base;
}

flps_err ps_agg_push_segs(ps_shard *s, transport_rx *rx, proto_msg *m)
{
    const uint32_t peer = rx->peer;
    flps_err rc = FLPS_OK, last = FLPS_OK;
    rx_share *sh;
    size_t at = 0;

    if (s->configured && s->jc.agg == PROTO_AGG_DENSE) {
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "this job aggregates dense pushes, got a sparse "
                             "one of %u parts",
                             m->nsegs);
        transport_rx_release(rx);
        return FLPS_EPROTO;
    }
    /* The layout's checks for every segment before any is taken. */
    for (uint32_t g = 0; g < m->nsegs; g++) {
        proto_msg v;
        ps_part *p;
        proto_msg_seg_view(m, g, at, 0, &v);
        at += v.n;
        p = ps_shard_request_part(s, peer, &v, 1, &rc);
        if (p == NULL) {
            transport_rx_release(rx);
            return rc;
        }
        if (v.n > 0 && v.idx[v.n - 1] >= p->numel) {
            ps_shard_reply_error(s, peer, &v, FLPS_ERANGE,
                                 "index %u is outside part %u of %u elements",
                                 v.idx[v.n - 1], p->id, p->numel);
            transport_rx_release(rx);
            return FLPS_ERANGE;
        }
    }
    sh = rx_share_new(rx, m); /* our reference, dropped at the end */
    if (sh == NULL) {
        ps_shard_reply_error(s, peer, m, FLPS_ENOMEM, "out of memory");
        transport_rx_release(rx);
        return FLPS_ENOMEM;
    }
    s->defer++;
    at = 0;
    for (uint32_t g = 0; g < m->nsegs; g++) {
        proto_msg v;
        transport_rx *vr = rx_view_new(sh);
        int kept = 0;

        proto_msg_seg_view(m, g, at, 0, &v);
        at += v.n;
        if (vr == NULL) {
            ps_shard_reply_error(s, peer, &v, FLPS_ENOMEM, "out of memory");
            last = FLPS_ENOMEM;
            break;
        }
        rc = ps_agg_push(s, vr, &v, &kept);
        if (!kept)
            transport_rx_release(vr);
        if (rc != FLPS_OK)
            last = rc;
        if (ps_shard_is_broken(s))
            break; /* a close could not be logged: the daemon stops */
    }
    s->defer--;
    if (s->defer == 0)
        ps_shard_flush_replies(s);
    rx_share_drop(sh);
    return last;
}

flps_err ps_agg_push_msg(ps_shard *s, transport_rx *rx, proto_msg *m)
{
    rx_share *sh;
    transport_rx *vr = NULL;
    int kept = 0;
    flps_err rc;

    if (m->nsegs > 0)
        return ps_agg_push_segs(s, rx, m);
    if (m->expanded == NULL) {
        rc = ps_agg_push(s, rx, m, &kept);
        if (!kept)
            transport_rx_release(rx);
        return rc;
    }
    /* Indices expanded from compact frames: the held push points into
     * them, so they go with rx, in a share of one view. */
    sh = rx_share_new(rx, m);
    if (sh != NULL)
        vr = rx_view_new(sh);
    if (vr == NULL) {
        ps_shard_reply_error(s, rx->peer, m, FLPS_ENOMEM, "out of memory");
        if (sh != NULL)
            rx_share_drop(sh);
        else
            transport_rx_release(rx);
        return FLPS_ENOMEM;
    }
    rc = ps_agg_push(s, vr, m, &kept);
    if (!kept)
        transport_rx_release(vr);
    rx_share_drop(sh);
    return rc;
}
