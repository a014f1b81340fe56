/* Tests for ps/shard_agg.c beyond test_shard.c: both ways of summing
 * sparse pushes (the merge of large parts or few workers, the scatter-add
 * of small parts) give the bits a dense rank-order scatter-add gives, and
 * the update buffers come from a pool that never overwrites one a send
 * still holds. */
#include "ps/shard.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/codec.h"
#include "tests/support/rx_copy.h"

#define JOB "agg"
#define PEER(rank) (100u + (rank))
#define LR 0.1

/* ---- a shard of one part and what it sent ---- */

typedef struct update {
    uint32_t rank, n, nrej;
    uint32_t *idx, *rej;
    float *val;
    const void *payload; /* the buffer the update was sent from */
} update;

typedef struct rig {
    ps_shard *s;
    uint32_t W, numel;
    uint32_t hot; /* indices every push holds: 0 .. hot - 1 */
    uint8_t agg;
    update *u;
    size_t nu, cap;
    uint32_t errors;
    proto_buf *held;   /* a payload the "transport" still sends */
    int hold_next;     /* hold the next update's payload */
    int expect_errors; /* a test that wants a refusal: count it quietly */
} rig;

static void *dup_of(const void *p, size_t len)
{
    void *c = malloc(len ? len : 1);

    cr_assert_not_null(c);
    if (len)
        memcpy(c, p, len);
    return c;
}

static void on_send(void *arg, uint32_t peer, const ps_reply *rep)
{
    rig *g = arg;
    update *u;

    (void)peer;
    if (rep->msg.op == PROTO_OP_ERROR) {
        g->errors++;
        if (!g->expect_errors)
            cr_log_error("shard refused: %s", rep->msg.text);
        return;
    }
    if (rep->msg.op != PROTO_OP_UPDATE)
        return;
    if (g->hold_next) {
        g->held = proto_buf_hold(rep->payload);
        g->hold_next = 0;
    }
    if (g->nu == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 16;
        g->u = realloc(g->u, g->cap * sizeof(*g->u));
        cr_assert_not_null(g->u);
    }
    u = &g->u[g->nu++];
    u->rank = rep->msg.rank;
    u->n = rep->msg.n;
    u->nrej = rep->msg.nrej;
    u->idx = rep->msg.idx ? dup_of(rep->msg.idx, (size_t)u->n * 4) : NULL;
    u->val = dup_of(rep->msg.val, (size_t)u->n * 4);
    u->rej = dup_of(rep->msg.rej, (size_t)u->nrej * 4);
    u->payload = rep->payload ? proto_buf_data(rep->payload) : NULL;
}

static void clear_updates(rig *g)
{
    for (size_t i = 0; i < g->nu; i++) {
        free(g->u[i].idx);
        free(g->u[i].val);
        free(g->u[i].rej);
    }
    g->nu = 0;
}

static proto_msg msg_of(uint8_t op, uint32_t rank, uint64_t iter)
{
    proto_msg m;

    memset(&m, 0, sizeof(m));
    m.op = op;
    strcpy(m.job, JOB);
    m.rank = rank;
    m.iter = iter;
    return m;
}

static flps_err deliver(rig *g, uint32_t rank, const proto_msg *m)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen;
    void *hdr = NULL;
    transport_rx *rx = NULL;

    cr_assert_eq(proto_msg_encode(m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(transport_rx_copy(f, nf, PEER(rank), &rx), FLPS_OK);
    free(hdr);
    return ps_shard_handle(g->s, rx);
}

static rig *rig_start_warmup(uint32_t W, uint8_t agg, uint32_t numel,
                             double density, uint64_t warmup, double start);

static rig *rig_start(uint32_t W, uint8_t agg, uint32_t numel, double density)
{
    return rig_start_warmup(W, agg, numel, density, 0, 0);
}

/* A job whose density warms up over warmup iterations from start. */
static rig *rig_start_warmup(uint32_t W, uint8_t agg, uint32_t numel,
                             double density, uint64_t warmup, double start)
{
    rig *g = calloc(1, sizeof(*g));
    ps_shard_config c;
    proto_tensor t;
    float *zeros = calloc(numel, sizeof(float));

    cr_assert_not_null(g);
    cr_assert_not_null(zeros);
    g->W = W;
    g->numel = numel;
    g->hot = numel / 16;
    g->agg = agg;
    memset(&c, 0, sizeof(c));
    c.job = JOB;
    c.nshards = 1;
    c.send = on_send;
    c.send_arg = g;
    cr_assert_eq(ps_shard_create(&c, 0, &g->s), FLPS_OK);
    memset(&t, 0, sizeof(t));
    strcpy(t.name, "w");
    t.numel = numel;
    for (uint32_t r = 0; r < W; r++) {
        proto_msg m = msg_of(PROTO_OP_REGISTER, r, 0);
        m.cfg.nshards = 1;
        m.cfg.workers = W;
        m.cfg.part_size = numel;
        m.cfg.mode = PROTO_MODE_SSGD;
        m.cfg.agg = agg;
        m.cfg.density = density;
        m.cfg.density_warmup = warmup;
        m.cfg.density_start = start;
        m.cfg.lr = LR;
        strcpy(m.cfg.compression, agg == PROTO_AGG_DENSE ? "dense" : "topk");
        m.tensors = &t;
        m.ntensors = 1;
        cr_assert_eq(deliver(g, r, &m), FLPS_OK);
    }
    {
        proto_msg m = msg_of(PROTO_OP_INIT, 0, 0);
        m.codec = PROTO_CODEC_DENSE;
        m.n = numel;
        m.val = zeros;
        cr_assert_eq(deliver(g, 0, &m), FLPS_OK);
    }
    free(zeros);
    cr_assert_eq(g->errors, 0);
    return g;
}

static void rig_free(rig *g)
{
    proto_buf_release(g->held);
    ps_shard_destroy(g->s);
    clear_updates(g);
    free(g->u);
    free(g);
}

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Rank r's push: each index with probability touch (a shared hot set of
 * the first hot indices always), values of every magnitude and sign,
 * -0.0f among them, so any change in the order of the additions shows in
 * the bits. */
static uint32_t make_push(uint32_t numel, uint32_t hot, double touch,
                          uint64_t *seed, uint32_t *idx, float *val)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < numel; i++) {
        uint64_t x = rng(seed);
        if (i >= hot && (double)(x >> 11) * 0x1p-53 >= touch)
            continue;
        idx[n] = i;
        switch (x % 7) {
        case 0:
            val[n] = -0.0f;
            break;
        case 1:
            val[n] = 1e7f;
            break;
        case 2:
            val[n] = -1e7f;
            break;
        default:
            val[n] = (float)((int64_t)(x >> 40) - (1 << 23)) * 0x1p-20f;
            break;
        }
        n++;
    }
    return n;
}

/* The update a dense scatter-add in rank order gives: the accumulator
 * starts at +0.0f and every rank adds its values in rank order. */
typedef struct ref {
    uint32_t n;
    uint32_t *idx;
    float *val;
} ref;

static void reference(const rig *g, uint32_t **idx, float **val,
                      const uint32_t *n, ref *out)
{
    float *acc = calloc(g->numel, sizeof(float));
    uint8_t *touched = calloc(g->numel, 1);
    const float scale = (float)(LR / (double)g->W);

    cr_assert_not_null(acc);
    cr_assert_not_null(touched);
    out->idx = malloc((size_t)g->numel * 4);
    out->val = malloc((size_t)g->numel * 4);
    out->n = 0;
    for (uint32_t r = 0; r < g->W; r++) {
        for (uint32_t j = 0; j < n[r]; j++) {
            acc[idx[r][j]] += val[r][j];
            touched[idx[r][j]] = 1;
        }
    }
    for (uint32_t i = 0; i < g->numel; i++) {
        if (touched[i]) {
            out->idx[out->n] = i;
            out->val[out->n++] = -(scale * acc[i]);
        }
    }
    free(acc);
    free(touched);
}

static void ref_free(ref *r)
{
    free(r->idx);
    free(r->val);
}

/* Push one iteration of sparse contributions from every rank (in a
 * rotated arrival order) and check the topk update against the
 * reference, bit for bit. */
static void check_topk_iteration(rig *g, uint64_t it, double touch,
                                 uint64_t *seed)
{
    uint32_t **idx = calloc(g->W, sizeof(*idx)), *n = calloc(g->W, 4);
    float **val = calloc(g->W, sizeof(*val));
    ref want;

    for (uint32_t r = 0; r < g->W; r++) {
        idx[r] = malloc((size_t)g->numel * 4);
        val[r] = malloc((size_t)g->numel * 4);
        n[r] = make_push(g->numel, g->hot, touch, seed, idx[r], val[r]);
    }
    reference(g, idx, val, n, &want);
    clear_updates(g);
    for (uint32_t q = 0; q < g->W; q++) {
        uint32_t r = (q + (uint32_t)it) % g->W;
        proto_msg m = msg_of(PROTO_OP_PUSH, r, it);
        m.codec = PROTO_CODEC_SPARSE;
        m.n = n[r];
        m.idx = idx[r];
        m.val = val[r];
        cr_assert_eq(deliver(g, r, &m), FLPS_OK);
    }
    cr_assert_eq(g->errors, 0);
    cr_assert_eq(g->nu, g->W);
    for (size_t k = 0; k < g->nu; k++) {
        const update *u = &g->u[k];
        cr_assert_eq(u->n, want.n, "W=%u numel=%u: %u pairs, reference %u",
                     g->W, g->numel, u->n, want.n);
        cr_assert_eq(memcmp(u->idx, want.idx, (size_t)want.n * 4), 0,
                     "W=%u numel=%u: indices differ", g->W, g->numel);
        cr_assert_eq(memcmp(u->val, want.val, (size_t)want.n * 4), 0,
                     "W=%u numel=%u: values differ in their bits", g->W,
                     g->numel);
        cr_assert_eq(u->nrej, 0);
    }
    ref_free(&want);
    for (uint32_t r = 0; r < g->W; r++) {
        free(idx[r]);
        free(val[r]);
    }
    free(idx);
    free(val);
    free(n);
}

/* ---- tests ---- */

Test(shard_agg, small_parts_sum_like_a_rank_order_scatter_add_for_any_workers)
{
    /* numel 4096 with 4+ workers takes the scatter-add when enough is
     * pushed (always, with the hot set of 256), the merge otherwise;
     * fewer workers always merge. */
    const uint32_t Ws[] = {1, 2, 3, 4, 5, 8, 17};
    const double touches[] = {0.001, 0.05, 0.5, 1.0};
    uint64_t seed = 42;

    for (size_t wi = 0; wi < sizeof(Ws) / sizeof(Ws[0]); wi++) {
        rig *g = rig_start(Ws[wi], PROTO_AGG_TOPK, 4096, 1.0);
        for (uint64_t it = 0; it < 4; it++)
            check_topk_iteration(g, it, touches[it], &seed);
        rig_free(g);
    }
}

Test(shard_agg, large_parts_sum_like_a_rank_order_scatter_add)
{
    /* Parts beyond the scatter-add's window of 2^18 elements, the last
     * window 3 elements long: 5 and 33 workers scatter window by window;
     * with few pairs, and with 3 workers, they merge (33: a tree of 64
     * leaves, most of them empty). */
    const uint32_t Ws[] = {3, 5, 33};
    uint64_t seed = 7;

    for (size_t wi = 0; wi < sizeof(Ws) / sizeof(Ws[0]); wi++) {
        rig *g = rig_start(Ws[wi], PROTO_AGG_TOPK, (1u << 20) + 3, 1.0);
        check_topk_iteration(g, 0, 0.0005, &seed);
        check_topk_iteration(g, 1, 0.01, &seed);
        g->hot = 8; /* fewer pairs than numel / 64: the merge */
        check_topk_iteration(g, 2, 0.00005, &seed);
        check_topk_iteration(g, 3, 0.0, &seed);
        rig_free(g);
    }
}

Test(shard_agg, an_update_still_held_by_a_send_is_never_overwritten)
{
    rig *g = rig_start(2, PROTO_AGG_TOPK, 512, 1.0);
    uint64_t seed = 3;
    const void *first;
    float *copy;
    size_t len;

    /* The "transport" keeps iteration 0's payload (as ZeroMQ does until
     * the bytes are on the wire). */
    g->hold_next = 1;
    check_topk_iteration(g, 0, 0.5, &seed);
    cr_assert_not_null(g->held);
    first = proto_buf_data(g->held);
    len = proto_buf_len(g->held);
    copy = dup_of(first, len);
    for (uint64_t it = 1; it < 5; it++) {
        check_topk_iteration(g, it, 0.5, &seed);
        cr_assert_neq(g->u[0].payload, first,
                      "iteration %llu reused a buffer still being sent",
                      (unsigned long long)it);
        cr_assert_eq(memcmp(proto_buf_data(g->held), copy, len), 0,
                     "the held update changed under its send");
    }
    free(copy);
    rig_free(g);
}

Test(shard_agg, a_released_update_buffer_is_reused)
{
    rig *g = rig_start(3, PROTO_AGG_TOPK, 512, 1.0);
    uint64_t seed = 5;
    const void *prev = NULL;

    for (uint64_t it = 0; it < 6; it++) {
        check_topk_iteration(g, it, 0.3, &seed);
        for (size_t k = 0; k < g->nu; k++)
            cr_assert_eq(g->u[k].payload, g->u[0].payload,
                         "one payload for every worker's update");
        if (prev != NULL)
            cr_assert_eq(g->u[0].payload, prev,
                         "iteration %llu allocated a new update buffer",
                         (unsigned long long)it);
        prev = g->u[0].payload;
    }
    rig_free(g);
}

Test(shard_agg, dense_updates_are_the_rank_order_sum_bit_for_bit)
{
    const uint32_t Ws[] = {1, 2, 3, 6};
    const uint32_t numel = 10000; /* blocks of 4096 and a remainder */
    uint64_t seed = 11;

    for (size_t wi = 0; wi < sizeof(Ws) / sizeof(Ws[0]); wi++) {
        const uint32_t W = Ws[wi];
        rig *g = rig_start(W, PROTO_AGG_DENSE, numel, 1.0);
        float *v = malloc((size_t)W * numel * 4), *acc = calloc(numel, 4);
        uint32_t *tmp = malloc((size_t)numel * 4);
        const float scale = (float)(LR / (double)W);
        const void *prev = NULL;

        for (uint64_t it = 0; it < 3; it++) {
            for (uint32_t r = 0; r < W; r++) {
                uint32_t n =
                    make_push(numel, 0, 1.0, &seed, tmp, v + r * numel);
                cr_assert_eq(n, numel);
            }
            memset(acc, 0, (size_t)numel * 4);
            for (uint32_t r = 0; r < W; r++)
                for (uint32_t i = 0; i < numel; i++)
                    acc[i] += v[r * numel + i];
            for (uint32_t i = 0; i < numel; i++)
                acc[i] = -(scale * acc[i]);
            clear_updates(g);
            for (uint32_t q = 0; q < W; q++) {
                uint32_t r = W - 1 - q; /* arrival in reverse rank order */
                proto_msg m = msg_of(PROTO_OP_PUSH, r, it);
                m.codec = PROTO_CODEC_DENSE;
                m.n = numel;
                m.val = v + r * numel;
                cr_assert_eq(deliver(g, r, &m), FLPS_OK);
            }
            cr_assert_eq(g->nu, W);
            for (size_t k = 0; k < W; k++)
                cr_assert_eq(memcmp(g->u[k].val, acc, (size_t)numel * 4), 0,
                             "W=%u: dense update differs in its bits", W);
            if (prev != NULL)
                cr_assert_eq(g->u[0].payload, prev,
                             "a new dense update buffer per iteration");
            prev = g->u[0].payload;
        }
        free(v);
        free(acc);
        free(tmp);
        rig_free(g);
    }
}

Test(shard_agg, gtopk_rejects_exactly_what_the_update_did_not_take)
{
    /* Six workers on 4096 elements (scatter-add) and on a large part
     * (merge): every pushed index is either in the update or in its
     * rank's rejected list, in push order, never both. */
    const uint32_t numels[] = {4096, (1u << 20) + 1};
    uint64_t seed = 9;

    for (size_t ni = 0; ni < 2; ni++) {
        const uint32_t W = 6, numel = numels[ni];
        rig *g = rig_start(W, PROTO_AGG_GTOPK, numel, 0.002);
        uint32_t *idx[6], n[6];
        float *val[6];
        ref all;
        uint64_t k = (uint64_t)floor(0.002 * numel);

        for (uint32_t r = 0; r < W; r++) {
            idx[r] = malloc((size_t)numel * 4);
            val[r] = malloc((size_t)numel * 4);
            n[r] = make_push(numel, numel / 16, 0.004, &seed, idx[r], val[r]);
        }
        reference(g, idx, val, n, &all);
        cr_assert_gt(all.n, k, "the test needs a selection");
        for (uint32_t r = 0; r < W; r++) {
            proto_msg m = msg_of(PROTO_OP_PUSH, r, 0);
            m.codec = PROTO_CODEC_SPARSE;
            m.n = n[r];
            m.idx = idx[r];
            m.val = val[r];
            cr_assert_eq(deliver(g, r, &m), FLPS_OK);
        }
        cr_assert_eq(g->nu, W);
        for (size_t q = 0; q < W; q++) {
            const update *u = &g->u[q];
            uint32_t r = u->rank, at = 0, nrej = 0;
            cr_assert_eq(u->n, k);
            /* Each selected pair is one of the reference's, same bits. */
            for (uint32_t j = 0; j < u->n; j++) {
                while (at < all.n && all.idx[at] < u->idx[j])
                    at++;
                cr_assert(at < all.n && all.idx[at] == u->idx[j]);
                cr_assert_eq(memcmp(&all.val[at], &u->val[j], 4), 0);
            }
            at = 0;
            for (uint32_t j = 0; j < n[r]; j++) {
                while (at < u->n && u->idx[at] < idx[r][j])
                    at++;
                if (at == u->n || u->idx[at] != idx[r][j]) {
                    cr_assert_lt(nrej, u->nrej);
                    cr_assert_eq(u->rej[nrej], idx[r][j]);
                    nrej++;
                }
            }
            cr_assert_eq(nrej, u->nrej, "rank %u", r);
        }
        ref_free(&all);
        for (uint32_t r = 0; r < W; r++) {
            free(idx[r]);
            free(val[r]);
        }
        rig_free(g);
    }
}

Test(shard_agg, gtopk_keeps_the_k_of_the_density_warm_up_each_iteration)
{
    /* Every worker pushes every index, so the union is the whole part and
     * the update holds exactly the k of the iteration's density. */
    const uint32_t W = 2, numel = 4096;
    const uint64_t N = 12;
    rig *g = rig_start_warmup(W, PROTO_AGG_GTOPK, numel, 0.01, N, 0.25);
    uint32_t *idx = malloc((size_t)numel * 4);
    float *val = malloc((size_t)numel * 4);
    uint32_t prev = numel;

    cr_assert_not_null(idx);
    cr_assert_not_null(val);
    for (uint32_t i = 0; i < numel; i++)
        idx[i] = i;
    for (uint64_t t = 0; t < N + 4; t++) {
        codec_spec cs = {CODEC_GTOPK, codec_warmup_density(0.25, 0.01, N, t),
                         0};
        uint32_t want = (uint32_t)codec_count_for(&cs, numel);

        for (uint32_t i = 0; i < numel; i++)
            val[i] = 1e-3f * (float)(((i + 1) * 2654435761u) % 1000 + 1);
        clear_updates(g);
        for (uint32_t r = 0; r < W; r++) {
            proto_msg m = msg_of(PROTO_OP_PUSH, r, t);
            m.codec = PROTO_CODEC_SPARSE;
            m.n = numel;
            m.idx = idx;
            m.val = val;
            cr_assert_eq(deliver(g, r, &m), FLPS_OK);
        }
        cr_assert_eq(g->nu, W, "iteration %llu closed", (unsigned long long)t);
        for (uint32_t q = 0; q < W; q++) {
            cr_assert_eq(g->u[q].n, want, "iteration %llu: %u pairs, not %u",
                         (unsigned long long)t, g->u[q].n, want);
            cr_assert_eq(g->u[q].nrej, numel - want);
        }
        cr_assert_leq(want, prev, "k never grows");
        prev = want;
    }
    cr_assert_eq(prev, 40, "the target's k after the warm-up");
    {
        codec_spec c0 = {CODEC_GTOPK, codec_warmup_density(0.25, 0.01, N, 0),
                         0};
        cr_assert_eq(codec_count_for(&c0, numel), 1024, "the start's k");
    }
    free(idx);
    free(val);
    rig_free(g);
}

Test(shard_agg, a_worker_with_another_warm_up_is_refused)
{
    rig *g = rig_start_warmup(2, PROTO_AGG_GTOPK, 4096, 0.01, 12, 0.25);
    proto_tensor t;
    proto_msg m = msg_of(PROTO_OP_REGISTER, 1, 0);

    memset(&t, 0, sizeof(t));
    strcpy(t.name, "w");
    t.numel = 4096;
    m.cfg.nshards = 1;
    m.cfg.workers = 2;
    m.cfg.part_size = 4096;
    m.cfg.mode = PROTO_MODE_SSGD;
    m.cfg.agg = PROTO_AGG_GTOPK;
    m.cfg.density = 0.01;
    m.cfg.density_warmup = 13;
    m.cfg.density_start = 0.25;
    m.cfg.lr = LR;
    strcpy(m.cfg.compression, "topk");
    m.tensors = &t;
    m.ntensors = 1;
    g->expect_errors = 1;
    cr_assert_neq(deliver(g, 1, &m), FLPS_OK);
    cr_assert_eq(g->errors, 1, "the worker is told why");
    rig_free(g);
}
