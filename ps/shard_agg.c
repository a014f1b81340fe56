/* A shard's pushes and their aggregation: the checks a push must pass,
 * synchronous iterations (sum in rank order, dense or sparse, global
 * top-k) closed when every worker pushed, and asynchronous updates
 * applied as they come. Every update is logged before anyone hears of
 * it. */
#include "ps/shard_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "compress/codec.h"
#include "compress/topk.h"

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y);
}

/* Sort n distinct indices below limit ascending in O(n): LSD radix passes
 * of 11 bits through tmp (room for n), as many as limit needs (two for
 * parts of up to 4M elements). A close then costs time in proportion to
 * what was pushed, never to the part's size. */
static void sort_indices(uint32_t *a, uint32_t *tmp, uint32_t n, uint32_t limit)
{
    enum { BITS = 11, BUCKETS = 1 << BITS };
    uint32_t count[BUCKETS], *src = a, *dst = tmp;
    unsigned passes = 1;

    if (n < 64) {
        qsort(a, n, sizeof(*a), cmp_u32);
        return;
    }
    while (passes < 3 && (uint64_t)(limit - 1) >> (BITS * passes) != 0)
        passes++;
    for (unsigned pass = 0; pass < passes; pass++) {
        const unsigned shift = pass * BITS;
        uint32_t sum = 0;

        memset(count, 0, sizeof(count));
        for (uint32_t i = 0; i < n; i++)
            count[(src[i] >> shift) & (BUCKETS - 1)]++;
        for (uint32_t b = 0; b < BUCKETS; b++) {
            uint32_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (uint32_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & (BUCKETS - 1)]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, (size_t)n * sizeof(*a));
}

/* Close the open iteration of p: sum the pushes in rank order (so the
 * result does not depend on arrival order), choose the update, apply it,
 * log it, answer every worker, reset. */
static flps_err close_iteration(ps_shard *s, ps_part *p)
{
    const uint32_t W = s->jc.workers;
    const int dense = s->jc.agg == PROTO_AGG_DENSE;
    const float scale =
        (float)(proto_jobcfg_lr_at(&s->jc, p->iter) / (double)W);
    uint32_t nt = 0, nu;
    proto_buf *payload;
    uint32_t *uidx;
    float *uval;
    wal_record wr;
    flps_err rc;

    if (dense) {
        for (uint32_t r = 0; r < W; r++) {
            const float *v = p->push[r].codec == PROTO_CODEC_ENCODED
                                 ? p->decoded[r]
                                 : p->push[r].val;
            for (uint32_t i = 0; i < p->numel; i++)
                p->acc[i] += v[i];
        }
        nu = p->numel;
    } else {
        for (uint32_t r = 0; r < W; r++) {
            const proto_msg *m = &p->push[r];
            for (uint32_t j = 0; j < m->n; j++) {
                uint32_t i = m->idx[j];
                if (!p->mark[i]) {
                    p->mark[i] = 1;
                    p->touched[nt++] = i;
                }
                p->acc[i] += m->val[j];
            }
        }
        sort_indices(p->touched, s->sel, nt, p->numel);
        nu = nt;
        if (s->jc.agg == PROTO_AGG_GTOPK) {
            uint64_t k = (uint64_t)floor(s->jc.density * (double)p->numel);
            if (k < 1)
                k = 1;
            if (k < nt)
                nu = (uint32_t)k;
        }
    }
    payload = proto_buf_create((size_t)nu * (dense ? 4 : 8));
    if (payload == NULL)
        return FLPS_ENOMEM;
    uidx = dense ? NULL : proto_buf_data(payload);
    uval = dense ? proto_buf_data(payload)
                 : (float *)((uint32_t *)proto_buf_data(payload) + nu);
    if (dense) {
        for (uint32_t i = 0; i < nu; i++)
            uval[i] = -(scale * p->acc[i]);
    } else if (nu == nt) {
        for (uint32_t j = 0; j < nu; j++) {
            uidx[j] = p->touched[j];
            uval[j] = -(scale * p->acc[p->touched[j]]);
        }
    } else {
        /* Global top-k over the touched entries only: no dense scan. The
         * candidates are in ascending index order, so topk's tie rule
         * (lower position) is the lower index. */
        for (uint32_t j = 0; j < nt; j++)
            s->gath[j] = p->acc[p->touched[j]];
        rc = topk_select(s->gath, nt, nu, s->sel);
        if (rc != FLPS_OK) {
            proto_buf_release(payload);
            return rc;
        }
        for (uint32_t j = 0; j < nu; j++) {
            uint32_t i = p->touched[s->sel[j]];
            uidx[j] = i;
            uval[j] = -(scale * p->acc[i]);
            p->mark[i] = 2;
        }
    }

    memset(&wr, 0, sizeof(wr));
    wr.kind = dense ? WAL_ADD_DENSE : WAL_ADD_SPARSE;
    wr.part = p->id;
    wr.iter = p->iter + 1;
    wr.version = p->version + 1;
    wr.n = nu;
    wr.idx = uidx;
    wr.val = uval;
    /* Durable before anyone hears of it: an update a worker has seen is
     * never lost by a shard crash. */
    rc = ps_shard_wal(s, &wr);
    if (rc != FLPS_OK) {
        proto_buf_release(payload);
        return rc;
    }
    if (dense) {
        for (uint32_t i = 0; i < nu; i++)
            p->w[i] += uval[i];
    } else {
        for (uint32_t j = 0; j < nu; j++)
            p->w[uidx[j]] += uval[j];
    }
    p->version++;
    s->stats.updates++;
    s->stats.elements_out += (uint64_t)nu * W;

    for (uint32_t r = 0; r < W; r++) {
        ps_reply rep;
        proto_buf *rej = NULL;
        uint32_t nrej = 0;
        const proto_msg *m = &p->push[r];

        ps_shard_reply_init(s, &rep, PROTO_OP_UPDATE, r, p->id, p->iter,
                            p->version);
        if (!dense && nu < nt) {
            rej = proto_buf_create((size_t)m->n * sizeof(uint32_t));
            if (rej != NULL) {
                uint32_t *ri = proto_buf_data(rej);
                for (uint32_t j = 0; j < m->n; j++)
                    if (p->mark[m->idx[j]] != 2)
                        ri[nrej++] = m->idx[j];
            } else {
                /* Without the list the worker keeps its values as sent;
                 * only their error feedback is lost. Log it loudly. */
                log_error("out of memory building rejected indices for rank "
                          "%u, part %u",
                          r, p->id);
            }
        }
        rep.msg.codec = dense ? PROTO_CODEC_DENSE : PROTO_CODEC_SPARSE;
        rep.msg.n = nu;
        rep.msg.idx = uidx;
        rep.msg.val = uval;
        rep.msg.nrej = nrej;
        rep.msg.rej = rej ? proto_buf_data(rej) : NULL;
        rep.payload = payload;
        rep.rej = rej;
        s->cfg.send(s->cfg.send_arg, p->peer[r], &rep);
        proto_buf_release(rej);
    }
    proto_buf_release(payload);

    /* Reset only what this iteration touched. */
    if (dense) {
        memset(p->acc, 0, (size_t)p->numel * sizeof(float));
    } else {
        for (uint32_t j = 0; j < nt; j++) {
            p->acc[p->touched[j]] = 0;
            p->mark[p->touched[j]] = 0;
        }
    }
    for (uint32_t r = 0; r < W; r++) {
        transport_rx_release(p->rx[r]);
        p->rx[r] = NULL;
    }
    p->arrived = 0;
    p->iter++;
    if (s->cfg.on_close != NULL)
        s->cfg.on_close(s->cfg.on_close_arg, flps_mono_s() - p->first_push_s);
    return FLPS_OK;
}

static flps_err apply_async(ps_shard *s, uint32_t peer, ps_part *p,
                            const proto_msg *m)
{
    const float scale =
        (float)(proto_jobcfg_lr_at(&s->jc, m->iter) / (double)s->jc.workers);
    const int dense = m->codec != PROTO_CODEC_SPARSE;
    const float *vals =
        m->codec == PROTO_CODEC_ENCODED ? p->decoded[m->rank] : m->val;
    float *delta = flps_malloc(((size_t)m->n + 1) * sizeof(float));
    wal_record wr;
    flps_err rc;

    if (delta == NULL)
        return FLPS_ENOMEM;
    for (uint32_t j = 0; j < m->n; j++)
        delta[j] = -(scale * vals[j]);
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
        for (uint32_t j = 0; j < m->n; j++)
            p->w[dense ? j : m->idx[j]] += delta[j];
        p->version++;
        p->last_async[m->rank] = m->iter + 1;
        s->stats.updates++;
        ps_shard_reply_ack(s, peer, m, 0, "applied", p->version);
    }
    flps_free(delta);
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
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "push encoded as '%s' but the job's codec is '%s'",
                             m->spec, s->jc.compression);
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

flps_err ps_agg_push(ps_shard *s, transport_rx *rx, const proto_msg *m,
                     int *kept)
{
    const uint32_t peer = rx->peer;
    flps_err rc;
    ps_part *p = ps_shard_request_part(s, peer, m, 1, &rc);
    const int async = s->jc.mode == PROTO_MODE_ASYNC;
    int want_sparse, encoded = m->codec == PROTO_CODEC_ENCODED;
    codec_spec spec;

    if (p == NULL)
        return rc;
    want_sparse = s->jc.agg != PROTO_AGG_DENSE;
    if (m->codec == PROTO_CODEC_ENCODED) {
        rc = check_encoded(s, peer, p, m, &spec);
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
    if (encoded) {
        rc = decode_encoded(s, peer, p, m, &spec);
        if (rc != FLPS_OK)
            return rc;
    }
    if (async) {
        rc = apply_async(s, peer, p, m);
        if (rc != FLPS_OK) {
            ps_shard_reply_error(s, peer, m, rc, "cannot apply the push");
            return rc;
        }
        s->stats.pushes++;
        s->stats.elements_in += m->n;
        return FLPS_OK;
    }
    p->rx[m->rank] = rx;
    p->push[m->rank] = *m;
    p->peer[m->rank] = peer;
    if (p->arrived == 0)
        p->first_push_s = flps_mono_s();
    p->arrived++;
    *kept = 1;
    s->stats.pushes++;
    s->stats.elements_in += m->n;
    if (p->arrived == s->jc.workers) {
        rc = close_iteration(s, p);
        if (rc != FLPS_OK) {
            /* A broken invariant or a full disk: the daemon cannot keep
             * its promise of durability, so it must not go on. */
            log_error("cannot close iteration %llu of part %u: %s",
                      (unsigned long long)p->iter, p->id, flps_strerror(rc));
            return rc;
        }
    }
    return FLPS_OK;
}
