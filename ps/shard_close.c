/* Closing a synchronous iteration of a part, once every rank pushed it,
 * as a sequence of steps: compute the update (sum the pushes in rank
 * order, dense or sparse, select gtopk's global top-k, scale, check that
 * it leaves every value finite), log it (shard_durable.c), apply it,
 * answer every rank (shard_reply.c), open the next iteration. Also the
 * answer to a late push of the iteration closed last, with the update
 * that closed it, and the refusal of an iteration that cannot close. */
#include "ps/shard_impl.h"

#include <math.h>
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
            bad |= ps_nonfinite_bit(wl[i] + u[i]);
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

/* What the sum of an iteration's pushes is multiplied by: lr / workers,
 * or in a weighted job lr / (the sum of the pushes' weights), 0 when that
 * is 0 (no weight: the iteration changes nothing). */
static float close_scale(const ps_shard *s, const ps_part *p)
{
    const uint32_t W = s->jc.workers;
    /* Adam's step is lr times a normalised one: its moments take the
     * update before the rate (ps_sopt_step applies it). */
    const double lr = s->jc.server_opt == PROTO_SOPT_ADAM
                          ? 1.0
                          : proto_jobcfg_lr_at(&s->jc, p->iter);
    double total = 0;

    if (s->jc.mode != PROTO_MODE_WEIGHTED)
        return (float)(lr / (double)W);
    for (uint32_t r = 0; r < W; r++)
        total += p->push[r].weight;
    return total > 0 ? (float)(lr / total) : 0.0f;
}

/* An iteration's update, computed but not yet logged or applied: n
 * entries, dense (idx NULL) or sparse (idx ascending), in payload, a
 * buffer from the part's reply pool that the pool keeps. When gtopk's
 * selection left pushed indices out, rej is the room after the update for
 * every rank's rejected ones; else NULL. */
typedef struct close_update {
    proto_buf *payload;
    int dense;
    uint32_t n;
    uint32_t *idx;
    float *val;
    uint32_t *rej;
    int applied; /* dense: already added to the part's values */
    /* With a server optimizer: the update before its step (in the shard's
     * raw_idx/raw_val; raw_idx NULL when dense), which is what the log
     * holds; the fields above are then the step's dense update. */
    int sopt;
    uint32_t raw_n;
    const uint32_t *raw_idx;
    const float *raw_val;
} close_update;

/* dense: the pushes summed in rank order and scaled, in the payload
 * itself. */
static flps_err update_dense(ps_shard *s, ps_part *p, float scale,
                             close_update *u)
{
    uint32_t bad;

    /* Without a write-ahead log nothing has to be made durable between
     * computing the update and applying it: a dense update of one block is
     * applied as it is summed. */
    u->applied = s->wal_fd < 0 && p->numel <= DENSE_BLOCK &&
                 s->jc.server_opt == PROTO_SOPT_SGD;
    u->payload = ps_shard_reply_buf(p, (size_t)p->numel * sizeof(float), 0);
    if (u->payload == NULL)
        return FLPS_ENOMEM;
    u->val = proto_buf_data(u->payload);
    u->n = p->numel;
    bad = sum_dense(p, s->jc.workers, scale, u->val, p->w, u->applied);
    return bad != 0 ? FLPS_ENONFINITE : FLPS_OK;
}

/* topk: the update is the union of the pushed indices, merged straight
 * into the payload: indices in [0, cap), values in [cap, 2 cap) of its
 * u32 slots. */
static flps_err update_topk(ps_shard *s, ps_part *p, size_t pushed, float scale,
                            close_update *u)
{
    const size_t cap = pushed < p->numel ? pushed : p->numel;
    uint32_t *uidx, nu, bad = 0;
    float *uval;

    u->payload = ps_shard_reply_buf(p, cap * 8, sparse_room(cap * 8));
    if (u->payload == NULL)
        return FLPS_ENOMEM;
    uidx = proto_buf_data(u->payload);
    uval = (float *)(uidx + cap);
    nu = sum_sparse(s, p, pushed, uidx, uval);
    for (uint32_t j = 0; j < nu; j++) {
        uval[j] = -(scale * uval[j]);
        bad |= ps_nonfinite_bit(p->w[uidx[j]] + uval[j]);
    }
    u->idx = uidx;
    u->val = uval;
    u->n = nu;
    return bad != 0 ? FLPS_ENONFINITE : FLPS_OK;
}

/* gtopk: the global top-k of the summed union, taken over the union only
 * (no dense scan). The candidates are in ascending index order, so topk's
 * tie rule (lower position) is the lower index, and the chosen positions
 * come back ascending. The payload holds the update and then every rank's
 * rejected indices. */
static flps_err update_gtopk(ps_shard *s, ps_part *p, size_t pushed,
                             float scale, close_update *u)
{
    /* k follows the job's density warm-up, computed from the
     * iteration exactly as every worker computes its own selection. */
    uint64_t k =
        (uint64_t)floor(codec_warmup_density(s->jc.density_start, s->jc.density,
                                             s->jc.density_warmup, p->iter) *
                        (double)p->numel);
    const size_t cap = pushed < p->numel ? pushed : p->numel;
    uint32_t *uidx, nt, nu, bad = 0;
    float *uval;
    size_t len;
    flps_err rc;

    if (grow_union(s, cap + 1) != FLPS_OK)
        return FLPS_ENOMEM;
    nt = sum_sparse(s, p, pushed, s->u_idx, s->u_sum);
    if (k < 1)
        k = 1;
    nu = k < nt ? (uint32_t)k : nt;
    len = (size_t)nu * 8 + (nu < nt ? pushed * sizeof(uint32_t) : 0);
    u->payload = ps_shard_reply_buf(p, len, sparse_room(len));
    if (u->payload == NULL)
        return FLPS_ENOMEM;
    uidx = proto_buf_data(u->payload);
    uval = (float *)(uidx + nu);
    if (nu < nt) {
        uint32_t *sel = ps_shard_grow(s->sel, &s->sel_cap, nu, sizeof(*s->sel));
        if (sel == NULL)
            return FLPS_ENOMEM;
        s->sel = sel;
        rc = topk_ctx_select(s->topk, s->u_sum, nt, nu, s->sel);
        if (rc != FLPS_OK)
            return rc;
        for (uint32_t j = 0; j < nu; j++) {
            uidx[j] = s->u_idx[s->sel[j]];
            uval[j] = -(scale * s->u_sum[s->sel[j]]);
            bad |= ps_nonfinite_bit(p->w[uidx[j]] + uval[j]);
        }
        u->rej = uidx + 2 * (size_t)nu;
    } else {
        for (uint32_t j = 0; j < nu; j++) {
            uidx[j] = s->u_idx[j];
            uval[j] = -(scale * s->u_sum[j]);
            bad |= ps_nonfinite_bit(p->w[uidx[j]] + uval[j]);
        }
    }
    u->idx = uidx;
    u->val = uval;
    u->n = nu;
    return bad != 0 ? FLPS_ENONFINITE : FLPS_OK;
}

/* Step 1: compute the update of p's open iteration into *u, in a buffer
 * from the part's reply pool. Sparse pushes are merged (their indices are
 * ascending), never scattered into a part-sized accumulator and sorted.
 * FLPS_ENONFINITE when the update, or a value it would make, is Inf or
 * NaN: pushes of finite values can still sum to Inf (two ranks of 3e38),
 * and one non-finite update would spread to every parameter it touches.
 * FLPS_ENOMEM when it cannot be computed. Either way nothing is applied
 * (a dense update of one block without a log is applied only when it
 * passes). */
static flps_err close_compute(ps_shard *s, ps_part *p, close_update *u)
{
    const float scale = close_scale(s, p);
    size_t pushed = 0;

    memset(u, 0, sizeof(*u));
    u->dense = s->jc.agg == PROTO_AGG_DENSE;
    for (uint32_t r = 0; r < s->jc.workers; r++)
        pushed += p->push[r].n;
    if (u->dense)
        return update_dense(s, p, scale, u);
    if (s->jc.agg != PROTO_AGG_GTOPK)
        return update_topk(s, p, pushed, scale, u);
    return update_gtopk(s, p, pushed, scale, u);
}

/* Step 1b, with a server optimizer: its step on u, which becomes the
 * dense update that applies it; the update before it moves to the
 * shard's raw scratch (for the log) and the state after it to sopt_next
 * (committed by close_apply). FLPS_ENONFINITE or FLPS_ENOMEM as for
 * step 1, with nothing changed. */
static flps_err close_sopt(ps_shard *s, ps_part *p, close_update *u)
{
    const size_t nstate = ps_sopt_nstate(&s->jc);
    size_t ci = s->raw_cap, cv = s->raw_cap;
    uint32_t *ri;
    float *rv, *next;

    ri = ps_shard_grow(s->raw_idx, &ci, (size_t)u->n + 1, sizeof(*ri));
    if (ri == NULL)
        return FLPS_ENOMEM;
    s->raw_idx = ri;
    rv = ps_shard_grow(s->raw_val, &cv, (size_t)u->n + 1, sizeof(*rv));
    if (rv == NULL)
        return FLPS_ENOMEM;
    s->raw_val = rv;
    s->raw_cap = ci < cv ? ci : cv;
    next = ps_shard_grow(s->sopt_next, &s->sopt_next_cap, nstate * p->numel,
                         sizeof(*next));
    if (next == NULL)
        return FLPS_ENOMEM;
    s->sopt_next = next;
    if (!u->dense)
        memcpy(ri, u->idx, (size_t)u->n * sizeof(*ri));
    memcpy(rv, u->val, (size_t)u->n * sizeof(*rv));
    u->sopt = 1;
    u->raw_n = u->n;
    u->raw_idx = u->dense ? NULL : ri;
    u->raw_val = rv;
    /* The raw update is copied out: the pool may hand back its buffer. */
    u->payload = ps_shard_reply_buf(p, (size_t)p->numel * sizeof(float), 0);
    if (u->payload == NULL)
        return FLPS_ENOMEM;
    u->dense = 1;
    u->idx = NULL;
    u->rej = NULL;
    u->applied = 0;
    u->n = p->numel;
    u->val = proto_buf_data(u->payload);
    return ps_sopt_step(&s->jc, p, p->iter, u->raw_idx, rv, u->raw_n, u->val,
                        next) != 0
               ? FLPS_ENONFINITE
               : FLPS_OK;
}

/* Step 2: log u as the update that closes p's iteration, durable before
 * anyone hears of it: an update a worker has seen is never lost by a shard
 * crash. With a server optimizer the log holds the update before its
 * step, so a replay takes the step again and restores its state too. On
 * failure the payload stays in the pool and the shard is broken
 * (ps_shard_is_broken). */
static flps_err close_log(ps_shard *s, ps_part *p, const close_update *u)
{
    wal_record wr, raw;

    memset(&wr, 0, sizeof(wr));
    wr.kind = u->dense ? WAL_ADD_DENSE : WAL_ADD_SPARSE;
    wr.part = p->id;
    wr.iter = p->iter + 1;
    wr.version = p->version + 1;
    wr.n = u->n;
    wr.idx = u->idx;
    wr.val = u->val;
    if (!u->sopt)
        return ps_shard_log_close(s, p, &wr, NULL);
    raw = wr;
    raw.kind = u->raw_idx != NULL ? WAL_OPT_SPARSE : WAL_OPT_DENSE;
    raw.n = u->raw_n;
    raw.idx = u->raw_idx;
    raw.val = u->raw_val;
    return ps_shard_log_close(s, p, &raw, &wr);
}

/* Step 3: add u to p's values; a new version. */
static void close_apply(ps_shard *s, ps_part *p, const close_update *u)
{
    const uint32_t nu = u->n;
    const uint32_t *uidx = u->idx;
    const float *uval = u->val;

    if (u->dense) {
        if (!u->applied)
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
    if (u->sopt)
        memcpy(p->sopt, s->sopt_next,
               ps_sopt_nstate(&s->jc) * p->numel * sizeof(float));
    p->version++;
    s->stats.updates++;
    s->stats.elements_out += (uint64_t)nu * s->jc.workers;
}

/* Step 4: answer every rank's push with the update, and gtopk's ranks
 * with the indices of their push it did not take. */
static void close_reply(ps_shard *s, ps_part *p, const close_update *u)
{
    uint32_t *rej = u->rej;

    for (uint32_t r = 0; r < s->jc.workers; r++) {
        ps_reply rep;
        uint32_t nrej = 0;
        const proto_msg *m = &p->push[r];

        ps_shard_reply_init(s, &rep, PROTO_OP_UPDATE, r, p->id, p->iter,
                            p->version);
        if (rej != NULL) {
            /* gtopk: rank r's rejected indices, in the payload after the
             * update and the ranks before r. */
            nrej = rejected_of(m, u->idx, u->n, rej);
            rep.msg.rej = rej;
            rej += nrej;
        }
        rep.msg.codec = u->dense ? PROTO_CODEC_DENSE : PROTO_CODEC_SPARSE;
        rep.msg.n = u->n;
        rep.msg.idx = u->idx;
        rep.msg.val = u->val;
        rep.msg.nrej = nrej;
        rep.payload = u->payload;
        ps_shard_send(s, p->peer[r], &rep);
    }
}

/* Step 5: drop the pushes and open the next iteration. */
static void close_reset(ps_shard *s, ps_part *p)
{
    for (uint32_t r = 0; r < s->jc.workers; r++) {
        transport_rx_release(p->rx[r]);
        p->rx[r] = NULL;
    }
    p->arrived = 0;
    p->iter++;
    if (s->cfg.on_close != NULL)
        s->cfg.on_close(s->cfg.on_close_arg, flps_mono_s() - p->first_push_s);
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

flps_err ps_close_iteration(ps_shard *s, ps_part *p)
{
    close_update u;
    flps_err rc = close_compute(s, p, &u);

    if (rc == FLPS_OK && s->jc.server_opt != PROTO_SOPT_SGD)
        rc = close_sopt(s, p, &u);
    if (rc == FLPS_OK)
        rc = close_log(s, p, &u);
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
    close_apply(s, p, &u);
    close_reply(s, p, &u);
    close_reset(s, p);
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
flps_err ps_close_answer_late(ps_shard *s, uint32_t peer, const ps_part *p,
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
