/* A shard's pushes and their aggregation: the checks a push must pass,
 * synchronous iterations (sum in rank order, dense or sparse, global
 * top-k) closed when every worker pushed, and asynchronous updates
 * applied as they come. Every update is logged before anyone hears of
 * it. */
#include "ps/shard_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "compress/codec.h"
#include "compress/topk.h"

/* Elements summed over every rank before moving on: a block of the update
 * (16 KiB) stays in L1 while each rank adds into it, so the update is
 * written to memory once, not once per rank. */
#define DENSE_BLOCK 4096u

/* 1 when x is Inf or NaN. A bit test rather than isfinite(): an integer
 * or-reduction the compiler vectorizes inside the loops that compute the
 * update, so the check costs no pass of its own. */
static inline uint32_t nonfinite_bit(float x)
{
    uint32_t b;

    memcpy(&b, &x, sizeof(b));
    return (b & 0x7f800000u) == 0x7f800000u;
}

/* Sum the dense pushes of p's iteration in rank order and scale them into
 * the update uval, in the payload itself: no accumulator of the part's
 * size. Per element the operations are those of adding each rank into a
 * zeroed accumulator and scaling that, so the results are the same bits.
 * Returns non-zero when some w + update is not finite (then, with apply,
 * p's values are untouched). The part's values are finite, so this also
 * catches a non-finite update. */
static uint32_t sum_dense(const ps_part *p, uint32_t W, float scale,
                          float *uval, float *w, int apply)
{
    uint32_t bad = 0;

    for (uint32_t lo = 0; lo < p->numel; lo += DENSE_BLOCK) {
        const uint32_t n =
            p->numel - lo < DENSE_BLOCK ? p->numel - lo : DENSE_BLOCK;
        float *u = uval + lo;
        const float *wl = w + lo;

        for (uint32_t r = 0; r < W; r++) {
            const float *v =
                (p->push[r].codec == PROTO_CODEC_ENCODED ? p->decoded[r]
                                                         : p->push[r].val) +
                lo;
            if (r == 0 && W == 1) {
                for (uint32_t i = 0; i < n; i++)
                    u[i] = -(scale * (0.0f + v[i]));
            } else if (r == 0) {
                for (uint32_t i = 0; i < n; i++)
                    u[i] = 0.0f + v[i];
            } else if (r + 1 < W) {
                for (uint32_t i = 0; i < n; i++)
                    u[i] += v[i];
            } else {
                for (uint32_t i = 0; i < n; i++)
                    u[i] = -(scale * (u[i] + v[i]));
            }
        }
        /* The block of the update is still in L1: check what it makes of
         * the part's values here rather than in a second pass. */
        for (uint32_t i = 0; i < n; i++)
            bad |= nonfinite_bit(wl[i] + u[i]);
    }
    /* A part of one block (apply is only asked for those) is applied
     * while it is still in L1; a larger one could have applied blocks by
     * the time a later one fails the check, and a float addition cannot
     * be undone exactly, so the caller applies it afterwards. */
    if (apply && bad == 0)
        for (uint32_t i = 0; i < p->numel; i++)
            w[i] += uval[i];
    return bad;
}

/* Sparse pushes from 4 or more workers are summed by scatter-add into a
 * dense scratch of at most this many elements (1 MiB, shared by every
 * part, so it stays in cache), a window of the part at a time: each push
 * is ascending, so a cursor per rank walks it window by window, every
 * index's sum is still taken in rank order, and the union comes out of a
 * first-touch bitmap ascending, with no sort. Fewer workers merge
 * (ps/merge.c): their tree is shallow. */
#define SCATTER_WINDOW (1u << 18)

/* Updates ahead to prefetch the part's values for. */
#define W_AHEAD 16

/* Does the scatter-add beat the merge for p? With few pushes the merge's
 * tree is shallow; with few pairs the bitmap's scan of numel / 64 words
 * would cost more than merging them. */
static int scatter_pays(const ps_shard *s, const ps_part *p, size_t pushed)
{
    return s->jc.workers >= 4 && p->numel / 64 <= pushed;
}

/* The zeroed dense scratch and the rank cursors, of a window for p; NULL
 * when they cannot be had (the caller merges instead: the same result). */
static float *scatter_scratch(ps_shard *s, const ps_part *p)
{
    const uint32_t want = p->numel < SCATTER_WINDOW ? p->numel : SCATTER_WINDOW;
    float *acc;
    uint64_t *bits;
    uint32_t *pos;

    if (want <= s->acc_cap)
        return s->acc;
    acc = flps_calloc(want, sizeof(*acc));
    bits = flps_calloc((size_t)want / 64 + 1, sizeof(*bits));
    pos = flps_malloc((size_t)s->jc.workers * sizeof(*pos));
    if (acc == NULL || bits == NULL || pos == NULL) {
        flps_free(acc);
        flps_free(bits);
        flps_free(pos);
        return NULL;
    }
    flps_free(s->acc);
    flps_free(s->bits);
    flps_free(s->pos);
    s->acc = acc;
    s->bits = bits;
    s->pos = pos;
    s->acc_cap = want;
    return acc;
}

/* Sum the W sparse pushes of p: the union of their indices ascending into
 * out_idx, each one's sum in rank order (from +0.0f) into out_sum, either
 * way bit-identical; returns the union's size. */
static uint32_t sum_sparse(ps_shard *s, const ps_part *p, size_t pushed,
                           uint32_t *out_idx, float *out_sum)
{
    const uint32_t W = s->jc.workers;
    float *acc = scatter_pays(s, p, pushed) ? scatter_scratch(s, p) : NULL;
    uint64_t *bits = s->bits;
    uint32_t *pos = s->pos, n = 0;

    if (acc == NULL)
        return ps_merge_sum(s->merge, p->push, W, out_idx, out_sum);
    memset(pos, 0, (size_t)W * sizeof(*pos));
    for (uint32_t lo = 0; lo < p->numel; lo += SCATTER_WINDOW) {
        const uint32_t hi =
            p->numel - lo < SCATTER_WINDOW ? p->numel : lo + SCATTER_WINDOW;
        int any = 0;

        for (uint32_t r = 0; r < W; r++) {
            const proto_msg *m = &p->push[r];
            uint32_t j = pos[r];
            for (; j < m->n && m->idx[j] < hi; j++) {
                const uint32_t i = m->idx[j] - lo;
                acc[i] += m->val[j];
                bits[i / 64] |= (uint64_t)1 << (i % 64);
            }
            any |= j != pos[r];
            pos[r] = j;
        }
        if (!any)
            continue;
        /* Emit and clear in one pass, so the scratch is zero again. */
        for (uint32_t w = 0; w <= (hi - lo - 1) / 64; w++) {
            uint64_t b = bits[w];
            if (b == 0)
                continue;
            bits[w] = 0;
            while (b != 0) {
                const uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(b);
                b &= b - 1;
                out_idx[n] = lo + i;
                out_sum[n++] = acc[i];
                acc[i] = 0.0f;
            }
        }
    }
    return n;
}

/* A sparse update's size varies from one iteration to the next: a new
 * reply buffer gets room for a little more, which saves regrowing. */
static size_t sparse_room(size_t len)
{
    return len + len / 4 + 4096;
}

/* Room for n entries in the shard's union scratch (gtopk). */
static flps_err grow_union(ps_shard *s, size_t n)
{
    size_t ci = s->u_cap, cs = s->u_cap;
    uint32_t *idx;
    float *sum;

    if (n <= s->u_cap)
        return FLPS_OK;
    idx = ps_shard_grow(s->u_idx, &ci, n, sizeof(*idx));
    if (idx == NULL)
        return FLPS_ENOMEM;
    s->u_idx = idx; /* larger than u_cap says: harmless if sum fails */
    sum = ps_shard_grow(s->u_sum, &cs, n, sizeof(*sum));
    if (sum == NULL)
        return FLPS_ENOMEM;
    s->u_sum = sum;
    s->u_cap = ci;
    return FLPS_OK;
}

/* The indices of rank r's push that the update u[0..nu) (ascending) did
 * not take, in push order, into rej; returns how many. Both lists are
 * ascending, so one pass over each. */
static uint32_t rejected_of(const proto_msg *m, const uint32_t *u, uint32_t nu,
                            uint32_t *rej)
{
    uint32_t nrej = 0, at = 0;

    for (uint32_t j = 0; j < m->n; j++) {
        const uint32_t i = m->idx[j];
        while (at < nu && u[at] < i)
            at++;
        if (at == nu || u[at] != i)
            rej[nrej++] = i;
    }
    return nrej;
}

/* Close the open iteration of p: sum the pushes in rank order (so the
 * result does not depend on arrival order), choose the update, apply it,
 * log it, answer every worker, reset. Sparse pushes are merged (their
 * indices are ascending), never scattered into a dense accumulator and
 * sorted; the update is built in a buffer from the part's reply pool.
 * FLPS_ENONFINITE (the update or the values it makes are Inf or NaN) and
 * FLPS_ENOMEM come before anything is logged or applied: the caller
 * refuses the iteration (refuse_iteration); a failed log append is fatal
 * (ps_shard_is_broken). */
/* What the sum of an iteration's pushes is multiplied by: lr / workers,
 * or in a weighted job lr / (the sum of the pushes' weights), 0 when that
 * is 0 (no weight: the iteration changes nothing). */
static float close_scale(const ps_shard *s, const ps_part *p)
{
    const uint32_t W = s->jc.workers;
    const double lr = proto_jobcfg_lr_at(&s->jc, p->iter);
    double total = 0;

    if (s->jc.mode != PROTO_MODE_WEIGHTED)
        return (float)(lr / (double)W);
    for (uint32_t r = 0; r < W; r++)
        total += p->push[r].weight;
    return total > 0 ? (float)(lr / total) : 0.0f;
}

static flps_err close_iteration(ps_shard *s, ps_part *p)
{
    const uint32_t W = s->jc.workers;
    const int dense = s->jc.agg == PROTO_AGG_DENSE;
    const int gtopk = s->jc.agg == PROTO_AGG_GTOPK;
    const float scale = close_scale(s, p);
    uint32_t nt, nu, bad = 0;
    int applied;
    size_t pushed = 0, cap;
    proto_buf *payload;
    uint32_t *uidx = NULL, *rej = NULL;
    float *uval;
    wal_record wr;
    flps_err rc;

    for (uint32_t r = 0; r < W; r++)
        pushed += p->push[r].n;
    /* Without a write-ahead log nothing has to be made durable between
     * computing the update and applying it: a dense update of one block is
     * applied as it is summed. */
    applied = dense && s->wal_fd < 0 && p->numel <= DENSE_BLOCK;
    if (dense) {
        payload = ps_shard_reply_buf(p, (size_t)p->numel * sizeof(float), 0);
        if (payload == NULL)
            return FLPS_ENOMEM;
        uval = proto_buf_data(payload);
        bad = sum_dense(p, W, scale, uval, p->w, applied);
        nt = nu = p->numel;
    } else if (!gtopk) {
        /* topk: the update is the union, merged straight into the payload:
         * indices in [0, cap), values in [cap, 2 cap) of its u32 slots. */
        cap = pushed < p->numel ? pushed : p->numel;
        payload = ps_shard_reply_buf(p, cap * 8, sparse_room(cap * 8));
        if (payload == NULL)
            return FLPS_ENOMEM;
        uidx = proto_buf_data(payload);
        uval = (float *)(uidx + cap);
        nt = nu = sum_sparse(s, p, pushed, uidx, uval);
        for (uint32_t j = 0; j < nu; j++) {
            uval[j] = -(scale * uval[j]);
            bad |= nonfinite_bit(p->w[uidx[j]] + uval[j]);
        }
    } else {
        /* k follows the job's density warm-up, computed from the
         * iteration exactly as every worker computes its own selection. */
        uint64_t k = (uint64_t)floor(
            codec_warmup_density(s->jc.density_start, s->jc.density,
                                 s->jc.density_warmup, p->iter) *
            (double)p->numel);
        size_t len;

        cap = pushed < p->numel ? pushed : p->numel;
        if (grow_union(s, cap + 1) != FLPS_OK)
            return FLPS_ENOMEM;
        nt = sum_sparse(s, p, pushed, s->u_idx, s->u_sum);
        if (k < 1)
            k = 1;
        nu = k < nt ? (uint32_t)k : nt;
        /* Global top-k over the union only: no dense scan. The candidates
         * are in ascending index order, so topk's tie rule (lower
         * position) is the lower index, and the chosen positions come
         * back ascending. The payload holds the update and then every
         * rank's rejected indices. */
        len = (size_t)nu * 8 + (nu < nt ? pushed * sizeof(uint32_t) : 0);
        payload = ps_shard_reply_buf(p, len, sparse_room(len));
        if (payload == NULL)
            return FLPS_ENOMEM;
        uidx = proto_buf_data(payload);
        uval = (float *)(uidx + nu);
        rej = uidx + 2 * (size_t)nu;
        if (nu < nt) {
            uint32_t *sel =
                ps_shard_grow(s->sel, &s->sel_cap, nu, sizeof(*s->sel));
            if (sel == NULL)
                return FLPS_ENOMEM;
            s->sel = sel;
            rc = topk_ctx_select(s->topk, s->u_sum, nt, nu, s->sel);
            if (rc != FLPS_OK)
                return rc;
            for (uint32_t j = 0; j < nu; j++) {
                uidx[j] = s->u_idx[s->sel[j]];
                uval[j] = -(scale * s->u_sum[s->sel[j]]);
                bad |= nonfinite_bit(p->w[uidx[j]] + uval[j]);
            }
        } else {
            for (uint32_t j = 0; j < nu; j++) {
                uidx[j] = s->u_idx[j];
                uval[j] = -(scale * s->u_sum[j]);
                bad |= nonfinite_bit(p->w[uidx[j]] + uval[j]);
            }
        }
    }
    /* Checked before anything is logged or applied: pushes of finite
     * values can still sum to Inf (two ranks of 3e38), and one non-finite
     * update would spread to every parameter it touches. */
    if (bad != 0)
        return FLPS_ENONFINITE;
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
    if (rc != FLPS_OK)
        return rc; /* the payload stays in the pool */
    /* Only a shard with a log is ever restored, which is when a push of
     * a closed iteration comes: without one, keeping costs for nothing. */
    if (s->wal_fd >= 0)
        (void)ps_part_keep_last(p, &wr); /* ENOMEM: a late push re-pulls */
    if (dense) {
        if (!applied)
            for (uint32_t i = 0; i < nu; i++)
                p->w[i] += uval[i];
    } else {
        /* The part's values are cold by now and the indices sparse enough
         * to skip lines: fetch a few updates ahead. */
        for (uint32_t j = 0; j < nu; j++) {
            if (j + W_AHEAD < nu)
                __builtin_prefetch(&p->w[uidx[j + W_AHEAD]], 1);
            p->w[uidx[j]] += uval[j];
        }
    }
    p->version++;
    s->stats.updates++;
    s->stats.elements_out += (uint64_t)nu * W;

    for (uint32_t r = 0; r < W; r++) {
        ps_reply rep;
        uint32_t nrej = 0;
        const proto_msg *m = &p->push[r];

        ps_shard_reply_init(s, &rep, PROTO_OP_UPDATE, r, p->id, p->iter,
                            p->version);
        if (nu < nt) {
            /* gtopk: rank r's rejected indices, in the payload after the
             * update and the ranks before r. */
            nrej = rejected_of(m, uidx, nu, rej);
            rep.msg.rej = rej;
            rej += nrej;
        }
        rep.msg.codec = dense ? PROTO_CODEC_DENSE : PROTO_CODEC_SPARSE;
        rep.msg.n = nu;
        rep.msg.idx = uidx;
        rep.msg.val = uval;
        rep.msg.nrej = nrej;
        rep.payload = payload;
        ps_shard_send(s, p->peer[r], &rep);
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

/* A push m for the iteration p closed last (m->iter + 1 == p->iter):
 * answer it with the update that closed it, as that iteration's pushes
 * were answered, with the indices of m that the update did not take (a
 * gtopk worker adds them back into its residual). Nothing is applied: the
 * update is in p already. A worker sends this when the update never
 * reached it (the shard was killed after logging it) or when it was
 * restarted at the lowest open iteration of the job while this part was
 * one ahead. */
static flps_err answer_closed(ps_shard *s, uint32_t peer, const ps_part *p,
                              const proto_msg *m)
{
    const int sparse = p->last_kind == WAL_ADD_SPARSE;
    const uint32_t pn = m->codec == PROTO_CODEC_SPARSE ? m->n : 0;
    proto_buf *b = proto_buf_create((size_t)p->last_n * 8 + (size_t)pn * 4 + 4);
    uint32_t *idx, *rej;
    float *val;
    ps_reply rep;

    if (b == NULL) {
        ps_shard_reply_error(s, peer, m, FLPS_ENOMEM, "out of memory");
        return FLPS_ENOMEM;
    }
    val = proto_buf_data(b);
    idx = (uint32_t *)(val + p->last_n);
    rej = idx + p->last_n;
    memcpy(val, p->last_val, (size_t)p->last_n * sizeof(*val));
    if (sparse)
        memcpy(idx, p->last_idx, (size_t)p->last_n * sizeof(*idx));
    ps_shard_reply_init(s, &rep, PROTO_OP_UPDATE, m->rank, p->id, m->iter,
                        p->last_version);
    rep.msg.codec = sparse ? PROTO_CODEC_SPARSE : PROTO_CODEC_DENSE;
    rep.msg.n = p->last_n;
    rep.msg.idx = sparse ? idx : NULL;
    rep.msg.val = val;
    if (sparse && pn > 0) {
        rep.msg.nrej = rejected_of(m, idx, p->last_n, rej);
        rep.msg.rej = rep.msg.nrej > 0 ? rej : NULL;
    }
    rep.payload = b;
    log_info("part %u: answered rank %u's push for closed iteration %llu "
             "with the update that closed it",
             p->id, m->rank, (unsigned long long)m->iter);
    ps_shard_send(s, peer, &rep);
    proto_buf_release(b);
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
        bad |= nonfinite_bit(p->w[dense ? j : m->idx[j]] + delta[j]);
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

/* The open iteration of p cannot close (its update is not finite, or no
 * memory to compute it): every rank that pushed it gets an ERROR, the
 * pushes are dropped, and the iteration stays open with the part's values
 * and version as they were, so the workers may push it again. Nothing was
 * logged. */
static void refuse_iteration(ps_shard *s, ps_part *p, flps_err why)
{
    for (uint32_t r = 0; r < s->jc.workers; r++) {
        if (p->rx[r] == NULL)
            continue;
        if (why == FLPS_ENONFINITE)
            ps_shard_reply_error(
                s, p->peer[r], &p->push[r], why,
                "the pushes of iteration %llu of part %u sum to an update "
                "that makes a parameter Inf or NaN; refused for every "
                "worker, nothing applied, the iteration stays open",
                (unsigned long long)p->iter, p->id);
        else
            ps_shard_reply_error(s, p->peer[r], &p->push[r], why,
                                 "cannot close iteration %llu of part %u: "
                                 "%s; nothing applied, the iteration stays "
                                 "open",
                                 (unsigned long long)p->iter, p->id,
                                 flps_strerror(why));
        transport_rx_release(p->rx[r]);
        p->rx[r] = NULL;
    }
    p->arrived = 0;
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
    if (s->jc.mode == PROTO_MODE_WEIGHTED && !m->has_weight) {
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "this job averages pushes by weight: a push "
                             "carries its weight (header key wt)");
        return FLPS_EPROTO;
    }
    if (!async && m->iter + 1 == p->iter && p->has_last)
        return answer_closed(s, peer, p, m);
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
        if (rc != FLPS_OK && ps_shard_is_broken(s)) {
            /* A full disk: the daemon cannot keep its promise of
             * durability, so it must not go on. */
            log_error("cannot close iteration %llu of part %u: %s",
                      (unsigned long long)p->iter, p->id, flps_strerror(rc));
            return rc;
        }
        if (rc != FLPS_OK) {
            refuse_iteration(s, p, rc);
            return rc;
        }
    }
    return FLPS_OK;
}

/* ---- pushes of several parts ---- */

/* A received message that several parts keep: views of it, each released
 * on its own; the message goes when the last does. The shard is one
 * thread: a plain count. */
typedef struct rx_share {
    transport_rx *rx;
    uint32_t refs;
} rx_share;

typedef struct rx_view {
    transport_rx base;
    rx_share *share;
} rx_view;

static void rx_share_drop(rx_share *sh)
{
    if (--sh->refs == 0) {
        transport_rx_release(sh->rx);
        flps_free(sh);
    }
}

static void rx_view_release(transport_rx *rx)
{
    rx_view *v = (rx_view *)rx;

    rx_share_drop(v->share);
    flps_free(v);
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

flps_err ps_agg_push_segs(ps_shard *s, transport_rx *rx, const proto_msg *m)
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
    sh = flps_malloc(sizeof(*sh));
    if (sh == NULL) {
        ps_shard_reply_error(s, peer, m, FLPS_ENOMEM, "out of memory");
        transport_rx_release(rx);
        return FLPS_ENOMEM;
    }
    sh->rx = rx;
    sh->refs = 1; /* ours, dropped at the end */
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
