/* Tests for ps/shard.c: synchronous dense/topk/gtopk aggregation against
 * exact references, every refusal, init/pull, async mode, and the
 * write-ahead log + checkpoint restore after a simulated crash. */
#include "ps/shard.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "ps/persist.h"
#include "tests/log_capture.h"
#include "tests/support/msg_v2.h"
#include "tests/support/rx_copy.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS()                                                      \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,                        \
                 "memory leaked (see the LeakSanitizer report)")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define JOB "job"
#define PEER(rank) (100u + (rank))
#define MAXNUMEL 256
#define MAXPARTS 8

/* ---- capturing replies ---- */

/* One reply, copied out of the callback (its pointers are borrowed). */
typedef struct captured {
    uint32_t peer;
    proto_msg msg; /* idx/val/rej point at the copies below */
    uint32_t *idx;
    float *val;
    uint32_t *rej;
} captured;

typedef struct rig {
    ps_shard *s;
    captured *r;
    size_t n, cap;
    proto_jobcfg cfg;
    proto_tensor t[4];
    uint32_t nt;
    uint32_t nparts;
    char dir[64];       /* checkpoint directory, "" for none */
    int cut_corrupt;    /* restore with wal_truncate_at_corruption */
    uint64_t max_elems; /* max_model_elements, 0 for the default */
    double ckpt_every;  /* ckpt_request_interval_s, 0 for the default */
    /* Hold every reply's payload, as a transport still sending it does. */
    int hold;
    proto_buf *held[64];
    size_t nheld;
} rig;

static void *copy_of(const void *p, size_t len)
{
    void *c = malloc(len ? len : 1);

    cr_assert_not_null(c);
    if (len)
        memcpy(c, p, len);
    return c;
}

static void capture(void *arg, uint32_t peer, const ps_reply *rep)
{
    rig *g = arg;
    captured *c;
    const proto_msg *m = &rep->msg;

    /* Every reply must be a valid wire message. */
    {
        proto_frame f[PROTO_MAX_FRAMES];
        size_t nf, hlen;
        void *hdr = NULL;
        proto_msg d;
        char err[256] = "";
        flps_err rc;

        cr_assert_eq(proto_msg_encode(m, &hdr, &hlen, f, &nf), FLPS_OK);
        rc = proto_msg_decode(f, nf, &d, err, sizeof(err));
        /* Decoding expands compact indices (an allocation): a test that
         * makes the n-th allocation fail may hit this one, not the
         * shard's; the next attempt has no failure left to meet. */
        if (rc == FLPS_ENOMEM)
            rc = proto_msg_decode(f, nf, &d, err, sizeof(err));
        cr_assert_eq(rc, FLPS_OK, "the shard sent an invalid %s: %s",
                     proto_op_name(m->op), err);
        proto_msg_fini(&d);
        free(hdr);
    }
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->r = realloc(g->r, g->cap * sizeof(*g->r));
        cr_assert_not_null(g->r);
    }
    if (g->hold && rep->payload != NULL) {
        cr_assert_lt(g->nheld, 64);
        g->held[g->nheld++] = proto_buf_hold(rep->payload);
    }
    c = &g->r[g->n++];
    memset(c, 0, sizeof(*c));
    c->peer = peer;
    c->msg = *m;
    c->msg.tensors = NULL;
    c->msg.ntensors = 0;
    /* Always a buffer (also for 0 elements), so the tests may memcmp. */
    if (m->codec == PROTO_CODEC_SPARSE)
        c->idx = copy_of(m->idx, (size_t)m->n * sizeof(uint32_t));
    c->val = copy_of(m->val, (size_t)m->n * sizeof(float));
    c->rej = copy_of(m->rej, (size_t)m->nrej * sizeof(uint32_t));
    c->msg.idx = c->idx;
    c->msg.val = c->val;
    c->msg.rej = c->rej;
    c->msg.segs =
        m->nsegs ? copy_of(m->segs, m->nsegs * sizeof(*m->segs)) : NULL;
}

static void clear_replies(rig *g)
{
    for (size_t i = 0; i < g->n; i++) {
        free(g->r[i].idx);
        free(g->r[i].val);
        free(g->r[i].rej);
        free(g->r[i].msg.segs);
    }
    g->n = 0;
}

/* ---- the rig: a shard, its configuration, its replies ---- */

/* The default layout: tensors of 10, 7 and 3 elements in parts of 4 over 2
 * shards (see test_partmap.c for the hand computation). This is shard 0:
 * it owns p0 = t0[0,4), p2 = t0[8,10) and p3 = t1[0,4); shard 1 owns p1,
 * p4 and p5. */
static const uint32_t OWNED[3] = {0, 2, 3};
static const uint32_t OWNED_NUMEL[3] = {4, 2, 4};

static rig *rig_new(uint32_t workers, uint8_t agg, uint8_t mode)
{
    rig *g = calloc(1, sizeof(*g));

    cr_assert_not_null(g);
    g->cfg.shard = 0;
    g->cfg.nshards = 2;
    g->cfg.workers = workers;
    g->cfg.part_size = 4;
    g->cfg.mode = mode;
    g->cfg.agg = agg;
    g->cfg.density = 0.5;
    g->cfg.lr = 0.1;
    g->nt = 3;
    strcpy(g->t[0].name, "w0");
    g->t[0].numel = 10;
    strcpy(g->t[1].name, "w1");
    g->t[1].numel = 7;
    strcpy(g->t[2].name, "w2");
    g->t[2].numel = 3;
    g->nparts = 6;
    return g;
}

/* One tensor of numel elements in a single part, on a single shard. */
static rig *rig_one_part(uint32_t workers, uint8_t agg, uint32_t numel,
                         double density)
{
    rig *g = rig_new(workers, agg, PROTO_MODE_SSGD);

    g->cfg.nshards = 1;
    g->cfg.part_size = numel;
    g->cfg.density = density;
    g->nt = 1;
    g->t[0].numel = numel;
    g->nparts = 1;
    return g;
}

static flps_err rig_create(rig *g, int restore, ps_shard **out)
{
    ps_shard_config c;

    memset(&c, 0, sizeof(c));
    c.job = JOB;
    c.shard = g->cfg.shard;
    c.nshards = g->cfg.nshards;
    c.ckpt_dir = g->dir[0] ? g->dir : NULL;
    c.fsync_wal = 0;
    c.wal_truncate_at_corruption = g->cut_corrupt;
    c.max_model_elements = g->max_elems;
    c.ckpt_request_interval_s = g->ckpt_every;
    c.send = capture;
    c.send_arg = g;
    return ps_shard_create(&c, restore, out);
}

static void rig_start(rig *g)
{
    cr_assert_eq(rig_create(g, 0, &g->s), FLPS_OK);
}

/* The transport is done sending: drop the held payloads. */
static void rig_sent(rig *g)
{
    for (size_t i = 0; i < g->nheld; i++)
        proto_buf_release(g->held[i]);
    g->nheld = 0;
}

static void rig_free(rig *g)
{
    rig_sent(g);
    ps_shard_destroy(g->s);
    clear_replies(g);
    free(g->r);
    if (g->dir[0]) {
        char ck[256], wl[256], tmp[300];
        persist_paths(g->dir, g->cfg.shard, ck, wl, sizeof(ck));
        snprintf(tmp, sizeof(tmp), "%s.tmp", ck);
        unlink(ck);
        unlink(wl);
        unlink(tmp);
        rmdir(g->dir);
    }
    free(g);
}

static void rig_use_dir(rig *g)
{
    strcpy(g->dir, "/tmp/flps-shard-XXXXXX");
    cr_assert_not_null(mkdtemp(g->dir));
}

/* Encode m, wrap it as a received message from peer, hand it over. */
static flps_err deliver(rig *g, uint32_t peer, const proto_msg *m)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen;
    void *hdr = NULL;
    transport_rx *rx = NULL;

    cr_assert_eq(proto_msg_encode(m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(transport_rx_copy(f, nf, peer, &rx), FLPS_OK);
    free(hdr);
    return ps_shard_handle(g->s, rx);
}

static proto_msg base_msg(uint8_t op, uint32_t rank, uint32_t part,
                          uint64_t iter)
{
    proto_msg m;

    memset(&m, 0, sizeof(m));
    m.op = op;
    strcpy(m.job, JOB);
    m.rank = rank;
    m.part = part;
    m.iter = iter;
    return m;
}

static flps_err send_register_cfg(rig *g, uint32_t rank,
                                  const proto_jobcfg *cfg,
                                  const proto_tensor *t, uint32_t nt)
{
    proto_msg m = base_msg(PROTO_OP_REGISTER, rank, 0, 0);

    m.cfg = *cfg;
    m.tensors = (proto_tensor *)t;
    m.ntensors = nt;
    return deliver(g, PEER(rank), &m);
}

static const captured *last(const rig *g)
{
    cr_assert_gt(g->n, 0, "no reply");
    return &g->r[g->n - 1];
}

/* Register every rank; each gets REGISTER_OK. */
static void register_all(rig *g)
{
    for (uint32_t r = 0; r < g->cfg.workers; r++) {
        cr_assert_eq(send_register_cfg(g, r, &g->cfg, g->t, g->nt), FLPS_OK);
        cr_assert_eq(last(g)->msg.op, PROTO_OP_REGISTER_OK);
        cr_assert_eq(last(g)->msg.rank, r);
        cr_assert_eq(last(g)->peer, PEER(r));
    }
}

static float init_value(uint32_t part, uint32_t i)
{
    return (float)(part * 16 + i) * 0.125f - 1.0f;
}

static flps_err send_init(rig *g, uint32_t rank, uint32_t part, const float *v,
                          uint32_t n)
{
    proto_msg m = base_msg(PROTO_OP_INIT, rank, part, 0);

    m.codec = PROTO_CODEC_DENSE;
    m.n = n;
    m.val = v;
    return deliver(g, PEER(rank), &m);
}

static void init_part(rig *g, uint32_t part, uint32_t numel)
{
    float v[MAXNUMEL];

    for (uint32_t i = 0; i < numel; i++)
        v[i] = init_value(part, i);
    cr_assert_eq(send_init(g, 0, part, v, numel), FLPS_OK);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ACK);
    cr_assert_eq(last(g)->msg.status, 0);
}

static flps_err push_dense(rig *g, uint32_t rank, uint32_t part, uint64_t iter,
                           const float *v, uint32_t n)
{
    proto_msg m = base_msg(PROTO_OP_PUSH, rank, part, iter);

    m.codec = PROTO_CODEC_DENSE;
    m.n = n;
    m.val = v;
    return deliver(g, PEER(rank), &m);
}

static flps_err push_sparse(rig *g, uint32_t rank, uint32_t part, uint64_t iter,
                            const uint32_t *idx, const float *v, uint32_t n)
{
    proto_msg m = base_msg(PROTO_OP_PUSH, rank, part, iter);

    m.codec = PROTO_CODEC_SPARSE;
    m.n = n;
    m.idx = idx;
    m.val = v;
    return deliver(g, PEER(rank), &m);
}

/* The state of every part of the layout, as ps_shard_part shows it. */
typedef struct snap {
    int ok[MAXPARTS];
    uint32_t numel[MAXPARTS];
    uint64_t ver[MAXPARTS], iter[MAXPARTS];
    float v[MAXPARTS][MAXNUMEL];
} snap;

static void take_snap(const rig *g, snap *s)
{
    memset(s, 0, sizeof(*s));
    for (uint32_t p = 0; p < g->nparts; p++) {
        const float *v;
        s->ok[p] = ps_shard_part(g->s, p, &v, &s->numel[p], &s->ver[p],
                                 &s->iter[p]) == FLPS_OK;
        if (s->ok[p]) {
            cr_assert_leq(s->numel[p], MAXNUMEL);
            memcpy(s->v[p], v, s->numel[p] * sizeof(float));
        }
    }
}

static void assert_snap_eq(const rig *g, const snap *a, const snap *b)
{
    for (uint32_t p = 0; p < g->nparts; p++) {
        cr_assert_eq(a->ok[p], b->ok[p], "part %u", p);
        if (!a->ok[p])
            continue;
        cr_assert_eq(a->numel[p], b->numel[p], "part %u", p);
        cr_assert_eq(memcmp(a->v[p], b->v[p], a->numel[p] * sizeof(float)), 0,
                     "part %u values differ", p);
        cr_assert_eq(a->ver[p], b->ver[p], "part %u version", p);
        cr_assert_eq(a->iter[p], b->iter[p], "part %u iteration", p);
    }
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rand_grad(uint64_t *seed)
{
    return (float)((int64_t)(rng_next(seed) % 2001) - 1000) / 256.0f;
}

/* The shard's step size, computed the way the shard must. */
static float scale_of(const rig *g, uint64_t iter)
{
    return (float)(proto_jobcfg_lr_at(&g->cfg, iter) / (double)g->cfg.workers);
}

/* ---- synchronous dense aggregation ---- */

/* Run iterations of dense S-SGD on every owned part and check each update
 * against the reference: acc summed in rank order, delta = -(scale * acc),
 * w += delta. */
static void run_dense_sync(uint32_t W, int iterations)
{
    rig *g = rig_new(W, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    float w[3][MAXNUMEL];
    uint64_t seed = 1000 + W;

    rig_start(g);
    register_all(g);
    for (int k = 0; k < 3; k++) {
        init_part(g, OWNED[k], OWNED_NUMEL[k]);
        for (uint32_t i = 0; i < OWNED_NUMEL[k]; i++)
            w[k][i] = init_value(OWNED[k], i);
    }
    for (int it = 0; it < iterations; it++) {
        for (int k = 0; k < 3; k++) {
            const uint32_t part = OWNED[k], numel = OWNED_NUMEL[k];
            float grad[8][MAXNUMEL], acc[MAXNUMEL] = {0}, delta[MAXNUMEL];
            const float scale = scale_of(g, (uint64_t)it);
            const float *v;
            uint32_t n;
            uint64_t ver, iter;

            for (uint32_t r = 0; r < W; r++)
                for (uint32_t i = 0; i < numel; i++)
                    grad[r][i] = rand_grad(&seed);
            for (uint32_t r = 0; r < W; r++)
                for (uint32_t i = 0; i < numel; i++)
                    acc[i] += grad[r][i];
            for (uint32_t i = 0; i < numel; i++)
                delta[i] = -(scale * acc[i]);

            clear_replies(g);
            for (uint32_t r = 0; r < W; r++) {
                cr_assert_eq(
                    push_dense(g, r, part, (uint64_t)it, grad[r], numel),
                    FLPS_OK);
                if (r + 1 < W)
                    cr_assert_eq(g->n, 0,
                                 "no reply before every worker pushed");
            }
            cr_assert_eq(g->n, W, "one UPDATE per worker");
            for (uint32_t r = 0; r < W; r++) {
                const captured *c = &g->r[r];
                cr_assert_eq(c->msg.op, PROTO_OP_UPDATE);
                cr_assert_eq(c->peer, PEER(r));
                cr_assert_eq(c->msg.rank, r);
                cr_assert_eq(c->msg.part, part);
                cr_assert_eq(c->msg.iter, (uint64_t)it);
                cr_assert_eq(c->msg.version, (uint64_t)it + 2,
                             "INIT made version 1");
                cr_assert_eq(c->msg.codec, PROTO_CODEC_DENSE);
                cr_assert_eq(c->msg.n, numel);
                cr_assert_eq(c->msg.nrej, 0);
                cr_assert_eq(memcmp(c->val, delta, numel * sizeof(float)), 0,
                             "rank %u: delta differs from the reference", r);
            }
            for (uint32_t i = 0; i < numel; i++)
                w[k][i] += delta[i];
            cr_assert_eq(ps_shard_part(g->s, part, &v, &n, &ver, &iter),
                         FLPS_OK);
            cr_assert_eq(n, numel);
            cr_assert_eq(memcmp(v, w[k], numel * sizeof(float)), 0,
                         "part %u after iteration %d", part, it);
            cr_assert_eq(ver, (uint64_t)it + 2);
            cr_assert_eq(iter, (uint64_t)it + 1, "the next iteration opens");
        }
    }
    {
        const ps_shard_stats *st = ps_shard_stats_get(g->s);
        cr_assert_eq(st->pushes, (uint64_t)W * 3 * iterations);
        cr_assert_eq(st->updates, 3u * (uint64_t)iterations);
        cr_assert_eq(st->elements_in, (uint64_t)W * 10 * iterations);
        cr_assert_eq(st->elements_out, (uint64_t)W * 10 * iterations);
        for (int e = 0; e < FLPS_ERR_COUNT_; e++)
            cr_assert_eq(st->rejected[e], 0);
    }
    rig_free(g);
}

Test(shard, two_workers_dense_pushes_give_both_the_exact_update)
{
    run_dense_sync(2, 4);
}

Test(shard, three_workers_dense_pushes_give_all_the_exact_update)
{
    run_dense_sync(3, 4);
}

Test(shard, one_push_of_two_closes_nothing)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float gr[4] = {1, 2, 3, 4};
    snap a, b;

    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    take_snap(g, &a);
    clear_replies(g);
    cr_assert_eq(push_dense(g, 1, 0, 0, gr, 4), FLPS_OK);
    cr_assert_eq(g->n, 0, "a waiting push is not answered");
    take_snap(g, &b);
    assert_snap_eq(g, &a, &b);
    cr_assert_eq(ps_shard_stats_get(g->s)->pushes, 1);
    cr_assert_eq(ps_shard_stats_get(g->s)->updates, 0);
    rig_free(g); /* destroying the shard releases the waiting push */
}

Test(shard, register_ok_tells_the_lowest_open_iteration)
{
    rig *g = rig_new(1, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float gr[4] = {1, 2, 3, 4};

    rig_start(g);
    register_all(g);
    cr_assert_eq(last(g)->msg.iter, 0);
    init_part(g, 0, 4);
    init_part(g, 2, 2);
    init_part(g, 3, 4);
    cr_assert_eq(push_dense(g, 0, 0, 0, gr, 4), FLPS_OK);
    cr_assert_eq(push_dense(g, 0, 0, 1, gr, 4), FLPS_OK);
    cr_assert_eq(push_dense(g, 0, 3, 0, gr, 4), FLPS_OK);
    cr_assert_eq(send_register_cfg(g, 0, &g->cfg, g->t, g->nt), FLPS_OK);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_REGISTER_OK);
    cr_assert_eq(last(g)->msg.iter, 0, "part 2 is still at iteration 0");
    rig_free(g);
}

Test(shard, cosine_schedule_scales_each_iterations_update)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float g0[4] = {1, -2, 3, 0.5f}, g1[4] = {0.25f, 2, -1, 8};

    g->cfg.lr_schedule = PROTO_LR_COSINE;
    g->cfg.iterations = 3;
    g->cfg.lr = 0.3;
    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    for (uint64_t it = 0; it < 4; it++) {
        const float scale =
            (float)(proto_jobcfg_lr_at(&g->cfg, it) / (double)2);
        clear_replies(g);
        cr_assert_eq(push_dense(g, 0, 0, it, g0, 4), FLPS_OK);
        cr_assert_eq(push_dense(g, 1, 0, it, g1, 4), FLPS_OK);
        cr_assert_eq(g->n, 2);
        for (uint32_t i = 0; i < 4; i++)
            cr_assert_eq(g->r[0].val[i], -(scale * (g0[i] + g1[i])),
                         "iteration %llu element %u", (unsigned long long)it,
                         i);
    }
    cr_assert_eq(g->r[0].val[0], -0.0f, "the last step has lr 0");
    rig_free(g);
}

/* ---- refusals ---- */

/* Expect the last delivery to have been refused with err: the returned
 * code, an ERROR reply to peer carrying it, one more in rejected[err], and
 * no part changed. */
typedef struct refusal_ctx {
    snap before;
    uint64_t rejected[FLPS_ERR_COUNT_];
    size_t nreplies;
} refusal_ctx;

static void refusal_begin(rig *g, refusal_ctx *c)
{
    take_snap(g, &c->before);
    memcpy(c->rejected, ps_shard_stats_get(g->s)->rejected,
           sizeof(c->rejected));
    c->nreplies = g->n;
}

static void refusal_check(rig *g, refusal_ctx *c, flps_err got, flps_err want,
                          uint32_t peer, const char *needle)
{
    snap after;
    const ps_shard_stats *st = ps_shard_stats_get(g->s);

    cr_assert_eq(got, want, "returned %s, expected %s", flps_errname(got),
                 flps_errname(want));
    cr_assert_eq(g->n, c->nreplies + 1, "exactly one reply");
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ERROR);
    cr_assert_eq(last(g)->msg.status, (uint32_t)want);
    cr_assert_eq(last(g)->peer, peer);
    cr_assert_str_eq(last(g)->msg.job, JOB);
    cr_assert_neq(strstr(last(g)->msg.text, needle), NULL,
                  "reason lacks \"%s\": %s", needle, last(g)->msg.text);
    for (int e = 0; e < FLPS_ERR_COUNT_; e++)
        cr_assert_eq(st->rejected[e], c->rejected[e] + (e == (int)want),
                     "rejected[%s]", flps_errname((flps_err)e));
    take_snap(g, &after);
    assert_snap_eq(g, &c->before, &after);
}

static rig *rig_ready(uint32_t W, uint8_t agg)
{
    rig *g = rig_new(W, agg, PROTO_MODE_SSGD);

    rig_start(g);
    register_all(g);
    for (int k = 0; k < 3; k++)
        init_part(g, OWNED[k], OWNED_NUMEL[k]);
    return g;
}

Test(shard, a_second_push_of_a_rank_in_one_iteration_is_refused_and_ignored)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    const float g0[4] = {1, 2, 3, 4}, other[4] = {100, 100, 100, 100};
    const float g1[4] = {-1, 0.5f, 0, 2};
    refusal_ctx c;
    const float scale = scale_of(g, 0);

    cr_assert_eq(push_dense(g, 0, 0, 0, g0, 4), FLPS_OK);
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, other, 4), FLPS_EDUP, PEER(0),
                  "rank 0 already pushed iteration 0 of part 0");
    cr_assert_eq(ps_shard_stats_get(g->s)->pushes, 1);
    /* The first push counts; the refused one left no trace. */
    clear_replies(g);
    cr_assert_eq(push_dense(g, 1, 0, 0, g1, 4), FLPS_OK);
    cr_assert_eq(g->n, 2);
    for (uint32_t i = 0; i < 4; i++)
        cr_assert_eq(g->r[0].val[i], -(scale * (g0[i] + g1[i])));
    rig_free(g);
}

Test(shard, a_push_for_a_closed_iteration_is_late)
{
    rig *g = rig_ready(1, PROTO_AGG_DENSE);
    const float g0[4] = {1, 2, 3, 4};
    refusal_ctx c;

    cr_assert_eq(push_dense(g, 0, 0, 0, g0, 4), FLPS_OK);
    cr_assert_eq(push_dense(g, 0, 0, 1, g0, 4), FLPS_OK);
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, g0, 4), FLPS_ELATE, PEER(0),
                  "iteration 0 of part 0 is closed (open: 2)");
    rig_free(g);
}

Test(shard, a_push_for_a_future_iteration_is_refused)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    const float g0[4] = {1, 2, 3, 4};
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 1, 0, 1, g0, 4), FLPS_EFUTURE, PEER(1),
                  "iteration 1 of part 0 is not open yet (open: 0)");
    rig_free(g);
}

Test(shard, an_index_outside_the_part_is_out_of_range)
{
    rig *g = rig_ready(2, PROTO_AGG_TOPK);
    const uint32_t idx[2] = {0, 2}; /* part 2 has 2 elements */
    const float v[2] = {1, 1};
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, push_sparse(g, 0, 2, 0, idx, v, 2), FLPS_ERANGE,
                  PEER(0), "index 2 is outside part 2 of 2 elements");
    rig_free(g);
}

Test(shard, a_nan_value_is_refused_as_non_finite)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    float v[4] = {1, 2, NAN, 4};
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, v, 4), FLPS_ENONFINITE, PEER(0),
                  "value 2 is not finite");
    v[2] = -INFINITY;
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 1, 0, 0, v, 4), FLPS_ENONFINITE, PEER(1),
                  "not finite");
    rig_free(g);
}

Test(shard, a_message_for_another_job_is_refused)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    const float g0[4] = {1, 2, 3, 4};
    proto_msg m = base_msg(PROTO_OP_PUSH, 0, 0, 0);
    refusal_ctx c;

    strcpy(m.job, "other");
    m.codec = PROTO_CODEC_DENSE;
    m.n = 4;
    m.val = g0;
    refusal_begin(g, &c);
    refusal_check(g, &c, deliver(g, PEER(0), &m), FLPS_EJOB, PEER(0),
                  "this shard serves job 'job', not 'other'");
    rig_free(g);
}

/* A client of the version before (u32 index frames) cannot read this
 * shard's replies: its requests are refused at once, the refusal written
 * in its version, nothing changed. */
Test(shard, a_request_of_an_older_protocol_version_is_refused_in_that_version)
{
    rig *g = rig_ready(2, PROTO_AGG_TOPK);
    const uint32_t idx[2] = {1, 3};
    const float v[2] = {0.5f, -1.0f};
    proto_msg m = base_msg(PROTO_OP_PUSH, 0, 0, 0);
    proto_frame f[PROTO_MAX_FRAMES], ef[PROTO_MAX_FRAMES];
    size_t nf, hlen, enf, ehlen;
    void *hdr = NULL, *ehdr = NULL;
    transport_rx *rx = NULL;
    refusal_ctx c;
    proto_msg d;
    char err[256] = "";

    m.codec = PROTO_CODEC_SPARSE;
    m.n = 2;
    m.idx = idx;
    m.val = v;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert(msg_frames_as_version2(f, nf, 1, 0, idx, 2, NULL, 0));
    cr_assert_eq(transport_rx_copy(f, nf, PEER(0), &rx), FLPS_OK);
    free(hdr);
    refusal_begin(g, &c);
    refusal_check(g, &c, ps_shard_handle(g->s, rx), FLPS_EPROTO, PEER(0),
                  "this shard speaks flps protocol version 3 and the client "
                  "2: run the same flps release");
    /* the refusal goes out as version 2 writes it */
    cr_assert_eq(last(g)->msg.wire_version, 2);
    cr_assert_eq(proto_msg_encode(&last(g)->msg, &ehdr, &ehlen, ef, &enf),
                 FLPS_OK);
    cr_assert_eq(((unsigned char *)ehdr)[3], 2);
    cr_assert_eq(proto_msg_decode(ef, enf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.wire_version, 2);
    proto_msg_fini(&d);
    free(ehdr);
    rig_free(g);
}

Test(shard, a_rank_not_below_workers_is_invalid)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    const float g0[4] = {1, 2, 3, 4};
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 2, 0, 0, g0, 4), FLPS_EINVAL, PEER(2),
                  "rank 2 is not below workers=2");
    rig_free(g);
}

Test(shard, a_part_this_shard_does_not_hold_is_invalid)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    const float g0[4] = {1, 2, 3, 4};
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 1, 0, g0, 4), FLPS_EINVAL, PEER(0),
                  "part 1 is not held by shard 0");
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 6, 0, g0, 4), FLPS_EINVAL, PEER(0),
                  "part 6 is not held by shard 0");
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, UINT32_MAX, 0, g0, 4), FLPS_EINVAL,
                  PEER(0), "is not held");
    rig_free(g);
}

Test(shard, a_push_before_register_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float g0[4] = {1, 2, 3, 4};
    refusal_ctx c;

    rig_start(g);
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, g0, 4), FLPS_ESTATE, PEER(0),
                  "register first");
    cr_assert_eq(ps_shard_num_owned(g->s), 0);
    rig_free(g);
}

Test(shard, a_push_before_init_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float g0[4] = {1, 2, 3, 4};
    refusal_ctx c;

    rig_start(g);
    register_all(g);
    cr_assert_eq(ps_shard_num_owned(g->s), 3);
    init_part(g, 3, 4);
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, g0, 4), FLPS_ESTATE, PEER(0),
                  "part 0 has no initial values yet");
    rig_free(g);
}

Test(shard, pushes_of_the_wrong_codec_or_size_are_malformed)
{
    rig *g = rig_ready(2, PROTO_AGG_TOPK);
    const float g0[4] = {1, 2, 3, 4};
    const uint32_t idx[1] = {0};
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, g0, 4), FLPS_EPROTO, PEER(0),
                  "this job aggregates sparse pushes, got a dense one");
    rig_free(g);

    g = rig_ready(2, PROTO_AGG_DENSE);
    refusal_begin(g, &c);
    refusal_check(g, &c, push_sparse(g, 0, 0, 0, idx, g0, 1), FLPS_EPROTO,
                  PEER(0), "aggregates dense pushes, got a sparse one");
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, g0, 3), FLPS_EPROTO, PEER(0),
                  "dense push for part 0 has 3 values; the part has 4");
    rig_free(g);
}

Test(shard, a_register_with_another_layout_or_config_is_refused)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    proto_tensor t[4];
    proto_jobcfg cfg = g->cfg;
    refusal_ctx c;

    memcpy(t, g->t, sizeof(t));
    t[1].numel = 8;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &g->cfg, t, 3), FLPS_ELAYOUT,
                  PEER(1),
                  "tensor 1 is w1[8] on the worker but w1[7] in the job");
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &g->cfg, t, 2), FLPS_ELAYOUT,
                  PEER(1), "the worker's model has 2 tensors, the job's 3");
    memcpy(t, g->t, sizeof(t));
    strcpy(t[2].name, "bias");
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &g->cfg, t, 3), FLPS_ELAYOUT,
                  PEER(1), "tensor 2 is bias[3]");
    cfg.lr = 0.2;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &cfg, g->t, 3), FLPS_ELAYOUT,
                  PEER(1), "differ from the job's");
    cfg = g->cfg;
    cfg.iterations = 5;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &cfg, g->t, 3), FLPS_ELAYOUT,
                  PEER(1), "differ from the job's");
    /* A worker of another map: the piece of the even map, against the
     * job's map of parts placed largest first. */
    cfg = g->cfg;
    cfg.piece = 8192;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &cfg, g->t, 3), FLPS_ELAYOUT,
                  PEER(1),
                  "the worker cuts the model into pieces of 8192 values, the "
                  "job's other workers into 0 (the map of older versions)");
    rig_free(g);
}

Test(shard, a_register_for_another_shard_or_with_bad_settings_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    proto_jobcfg cfg = g->cfg;
    refusal_ctx c;

    rig_start(g);
    cfg.shard = 1;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &cfg, g->t, 3), FLPS_ECONFIG,
                  PEER(0), "this is shard 0 of 2");
    cfg = g->cfg;
    cfg.nshards = 3;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &cfg, g->t, 3), FLPS_ECONFIG,
                  PEER(0), "this is shard 0 of 2");
    cfg = g->cfg;
    cfg.workers = 0;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &cfg, g->t, 3), FLPS_ECONFIG,
                  PEER(0), "bad job configuration");
    cfg = g->cfg;
    cfg.lr = 0;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &cfg, g->t, 3), FLPS_ECONFIG,
                  PEER(0), "bad job configuration");
    cfg = g->cfg;
    cfg.density = 1.5;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &cfg, g->t, 3), FLPS_ECONFIG,
                  PEER(0), "bad job configuration");
    cr_assert_eq(ps_shard_num_owned(g->s), 0, "nothing was configured");
    register_all(g);
    cr_assert_eq(ps_shard_num_owned(g->s), 3);
    rig_free(g);
}

Test(shard, a_malformed_message_is_answered_and_counted)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    const unsigned char junk[5] = {0x93, 1, 2, 3, 0xc1};
    proto_frame f = {junk, sizeof(junk)};
    transport_rx *rx = NULL;
    refusal_ctx c;

    cr_assert_eq(transport_rx_copy(&f, 1, 77, &rx), FLPS_OK);
    refusal_begin(g, &c);
    refusal_check(g, &c, ps_shard_handle(g->s, rx), FLPS_EPROTO, 77,
                  "MessagePack");
    rig_free(g);
}

Test(shard, ops_a_shard_does_not_serve_are_refused)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    proto_msg m = base_msg(PROTO_OP_ACK, 0, 0, 0);
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, deliver(g, PEER(0), &m), FLPS_EPROTO, PEER(0),
                  "a shard does not accept ACK");
    m = base_msg(PROTO_OP_REGISTER_OK, 0, 0, 0);
    refusal_begin(g, &c);
    refusal_check(g, &c, deliver(g, PEER(0), &m), FLPS_EPROTO, PEER(0),
                  "a shard does not accept REGISTER_OK");
    rig_free(g);
}

Test(shard, checkpoint_without_a_directory_is_refused)
{
    rig *g = rig_ready(1, PROTO_AGG_DENSE);
    proto_msg m = base_msg(PROTO_OP_CHECKPOINT, 0, 0, 0);
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, deliver(g, PEER(0), &m), FLPS_ESTATE, PEER(0),
                  "checkpoint failed");
    cr_assert_eq(ps_shard_checkpoint(g->s), FLPS_ESTATE);
    rig_free(g);
}

Test(shard, create_refuses_bad_configurations)
{
    ps_shard_config c;
    ps_shard *s = (ps_shard *)&c;
    char longjob[PROTO_JOB_MAX + 2];

    memset(&c, 0, sizeof(c));
    c.job = JOB;
    c.shard = 0;
    c.nshards = 1;
    c.send = capture;
    cr_assert_eq(ps_shard_create(NULL, 0, &s), FLPS_EINVAL);
    c.nshards = 0;
    cr_assert_eq(ps_shard_create(&c, 0, &s), FLPS_EINVAL);
    c.nshards = 2;
    c.shard = 2;
    cr_assert_eq(ps_shard_create(&c, 0, &s), FLPS_EINVAL);
    c.shard = 0;
    c.send = NULL;
    cr_assert_eq(ps_shard_create(&c, 0, &s), FLPS_EINVAL);
    c.send = capture;
    c.job = "";
    cr_assert_eq(ps_shard_create(&c, 0, &s), FLPS_EINVAL);
    memset(longjob, 'j', sizeof(longjob) - 1);
    longjob[sizeof(longjob) - 1] = '\0';
    c.job = longjob;
    cr_assert_eq(ps_shard_create(&c, 0, &s), FLPS_EINVAL);
    cr_assert_eq(s, (ps_shard *)&c, "*out untouched");
    ps_shard_destroy(NULL);
}

/* ---- topk: the union of the sparse pushes ---- */

Test(shard, topk_sums_overlapping_sparse_pushes_over_their_union)
{
    rig *g = rig_one_part(3, PROTO_AGG_TOPK, 16, 0.25);
    const uint32_t i0[3] = {1, 5, 9}, i1[3] = {0, 5, 15},
                   i2[4] = {5, 9, 10, 15};
    const float v0[3] = {0.5f, 1.0f, -2.0f}, v1[3] = {3.0f, 0.25f, 1.0f},
                v2[4] = {-0.125f, 2.0f, 4.0f, -1.0f};
    const uint32_t want_idx[6] = {0, 1, 5, 9, 10, 15};
    float sum[6];
    float w0[16];
    const float *v;
    uint32_t n;
    uint64_t ver, iter;
    const float scale = scale_of(g, 0);

    /* In rank order: index 5 gets 1.0 + 0.25 - 0.125, index 9 gets
     * -2.0 + 2.0, index 15 gets 1.0 - 1.0. */
    sum[0] = 3.0f;
    sum[1] = 0.5f;
    sum[2] = (1.0f + 0.25f) + -0.125f;
    sum[3] = -2.0f + 2.0f;
    sum[4] = 4.0f;
    sum[5] = 1.0f + -1.0f;
    rig_start(g);
    register_all(g);
    init_part(g, 0, 16);
    for (uint32_t i = 0; i < 16; i++)
        w0[i] = init_value(0, i);
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 2, 0, 0, i2, v2, 4), FLPS_OK);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 3), FLPS_OK);
    cr_assert_eq(push_sparse(g, 1, 0, 0, i1, v1, 3), FLPS_OK);
    cr_assert_eq(g->n, 3);
    for (uint32_t r = 0; r < 3; r++) {
        const captured *c = &g->r[r];
        cr_assert_eq(c->msg.op, PROTO_OP_UPDATE);
        cr_assert_eq(c->peer, PEER(r), "replies go out in rank order");
        cr_assert_eq(c->msg.codec, PROTO_CODEC_SPARSE);
        cr_assert_eq(c->msg.n, 6, "every touched index, also zero sums");
        cr_assert_eq(memcmp(c->idx, want_idx, sizeof(want_idx)), 0);
        for (uint32_t j = 0; j < 6; j++)
            cr_assert_eq(c->val[j], -(scale * sum[j]), "index %u", want_idx[j]);
        cr_assert_eq(c->msg.nrej, 0, "topk takes everything");
    }
    for (uint32_t j = 0; j < 6; j++)
        w0[want_idx[j]] += -(scale * sum[j]);
    cr_assert_eq(ps_shard_part(g->s, 0, &v, &n, &ver, &iter), FLPS_OK);
    cr_assert_eq(memcmp(v, w0, sizeof(w0)), 0);
    cr_assert_eq(ver, 2);
    cr_assert_eq(iter, 1);

    /* The accumulator was cleared: the next iteration starts from zero. */
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 0, 0, 1, i0, v0, 3), FLPS_OK);
    cr_assert_eq(push_sparse(g, 1, 0, 1, NULL, NULL, 0), FLPS_OK);
    cr_assert_eq(push_sparse(g, 2, 0, 1, NULL, NULL, 0), FLPS_OK);
    cr_assert_eq(g->n, 3);
    cr_assert_eq(g->r[0].msg.n, 3);
    cr_assert_eq(memcmp(g->r[0].idx, i0, sizeof(i0)), 0);
    for (uint32_t j = 0; j < 3; j++)
        cr_assert_eq(g->r[0].val[j], -(scale_of(g, 1) * v0[j]));
    rig_free(g);
}

/* ---- weighted synchronous aggregation (FedAvg with a deadline) ---- */

/* A push of n values (pairs with idx, dense without) carrying weight. */
static flps_err push_weighted(rig *g, uint32_t rank, uint32_t part,
                              uint64_t iter, const uint32_t *idx,
                              const float *v, uint32_t n, double weight)
{
    proto_msg m = base_msg(PROTO_OP_PUSH, rank, part, iter);

    m.codec = idx != NULL ? PROTO_CODEC_SPARSE : PROTO_CODEC_DENSE;
    m.n = n;
    m.idx = idx;
    m.val = v;
    m.weight = weight;
    m.has_weight = 1;
    return deliver(g, PEER(rank), &m);
}

static flps_err push_dense_weighted(rig *g, uint32_t rank, uint32_t part,
                                    uint64_t iter, const float *v, uint32_t n,
                                    double weight)
{
    return push_weighted(g, rank, part, iter, NULL, v, n, weight);
}

static flps_err push_sparse_weighted(rig *g, uint32_t rank, uint32_t part,
                                     uint64_t iter, const uint32_t *idx,
                                     const float *v, uint32_t n, double weight)
{
    return push_weighted(g, rank, part, iter, idx, v, n, weight);
}

Test(shard, a_weighted_job_divides_the_sum_by_the_weights_not_the_workers)
{
    rig *g = rig_new(3, PROTO_AGG_DENSE, PROTO_MODE_WEIGHTED);
    /* Rank 1 had no client in time: it pushes zeros with weight 0. */
    const float p0[4] = {4, -8, 2, 1}, p1[4] = {0, 0, 0, 0},
                p2[4] = {2, 4, -6, 0.5f};
    const double wt[3] = {3, 0, 1};
    float want[4];
    const float *v;
    uint32_t n;
    uint64_t ver, iter;
    const float scale = (float)(g->cfg.lr / 4.0);

    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    clear_replies(g);
    cr_assert_eq(push_dense_weighted(g, 0, 0, 0, p0, 4, wt[0]), FLPS_OK);
    cr_assert_eq(push_dense_weighted(g, 1, 0, 0, p1, 4, wt[1]), FLPS_OK);
    cr_assert_eq(push_dense_weighted(g, 2, 0, 0, p2, 4, wt[2]), FLPS_OK);
    cr_assert_eq(g->n, 3, "one UPDATE per worker");
    for (uint32_t i = 0; i < 4; i++)
        want[i] =
            init_value(0, i) + -(scale * ((0.0f + p0[i]) + p1[i] + p2[i]));
    cr_assert_eq(ps_shard_part(g->s, 0, &v, &n, &ver, &iter), FLPS_OK);
    cr_assert_eq(memcmp(v, want, sizeof(want)), 0,
                 "w - lr * sum / (3 + 0 + 1)");

    /* Nobody in time: the weights sum to 0 and the part is unchanged. */
    memcpy(want, v, sizeof(want));
    clear_replies(g);
    for (uint32_t r = 0; r < 3; r++)
        cr_assert_eq(push_dense_weighted(g, r, 0, 1, p1, 4, 0), FLPS_OK);
    cr_assert_eq(g->n, 3);
    cr_assert_eq(ps_shard_part(g->s, 0, &v, &n, &ver, &iter), FLPS_OK);
    cr_assert_eq(memcmp(v, want, sizeof(want)), 0);
    cr_assert_eq(iter, 2, "the iteration closed all the same");
    rig_free(g);
}

/* Iterations of a weighted job with server optimizer opt on part 0 (4
 * elements), each checked against the optimizer's update rule computed
 * here: every rank's UPDATE is the dense step, and the part moves by it. */
static void run_server_optimizer(uint8_t agg, uint8_t opt, double beta)
{
    rig *g = rig_new(2, agg, PROTO_MODE_WEIGHTED);
    float w[4], v[4] = {0}, s2[4] = {0};
    uint64_t seed = 31;

    g->cfg.server_opt = opt;
    g->cfg.server_beta = beta;
    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    for (uint32_t i = 0; i < 4; i++)
        w[i] = init_value(0, i);
    for (uint64_t it = 0; it < 4; it++) {
        float p[2][4], u[4], step[4];
        const double wt[2] = {3, 1};
        /* Adam's moments take the update before the rate. */
        const float scale = (float)((opt == PROTO_SOPT_ADAM ? 1.0 : g->cfg.lr) /
                                    (wt[0] + wt[1]));
        const float *got;
        uint32_t n;
        uint64_t ver, iter;

        clear_replies(g);
        for (uint32_t r = 0; r < 2; r++) {
            for (uint32_t i = 0; i < 4; i++)
                p[r][i] = rand_grad(&seed);
            if (agg == PROTO_AGG_DENSE) {
                cr_assert_eq(push_dense_weighted(g, r, 0, it, p[r], 4, wt[r]),
                             FLPS_OK);
            } else {
                /* Elements 1 and 3 only: a sparse update. */
                const uint32_t idx[2] = {1, 3};
                const float val[2] = {p[r][1], p[r][3]};
                p[r][0] = p[r][2] = 0;
                cr_assert_eq(
                    push_sparse_weighted(g, r, 0, it, idx, val, 2, wt[r]),
                    FLPS_OK);
            }
        }
        for (uint32_t i = 0; i < 4; i++) {
            u[i] = -(scale * ((0.0f + p[0][i]) + p[1][i]));
            if (agg != PROTO_AGG_DENSE && (i == 0 || i == 2))
                u[i] = 0;
            if (opt == PROTO_SOPT_MOMENTUM) {
                v[i] = (float)beta * v[i] + u[i];
                step[i] = v[i];
            } else {
                v[i] = 0.9f * v[i] + (1.0f - 0.9f) * u[i];
                s2[i] = 0.99f * s2[i] + (1.0f - 0.99f) * u[i] * u[i];
                step[i] = (float)g->cfg.lr * v[i] / (sqrtf(s2[i]) + 1e-3f);
            }
            w[i] += step[i];
        }
        cr_assert_eq(g->n, 2, "one UPDATE per worker");
        for (uint32_t r = 0; r < 2; r++) {
            cr_assert_eq(g->r[r].msg.op, PROTO_OP_UPDATE);
            cr_assert_eq(g->r[r].msg.codec, PROTO_CODEC_DENSE,
                         "the optimizer's step is dense");
            cr_assert_eq(g->r[r].msg.n, 4);
            cr_assert_eq(memcmp(g->r[r].val, step, sizeof(step)), 0,
                         "iteration %llu: rank %u's update",
                         (unsigned long long)it, r);
        }
        cr_assert_eq(ps_shard_part(g->s, 0, &got, &n, &ver, &iter), FLPS_OK);
        cr_assert_eq(memcmp(got, w, sizeof(w)), 0, "iteration %llu",
                     (unsigned long long)it);
    }
    rig_free(g);
}

Test(shard, a_momentum_server_optimizer_applies_the_velocity_of_the_updates)
{
    run_server_optimizer(PROTO_AGG_DENSE, PROTO_SOPT_MOMENTUM, 0.9);
    run_server_optimizer(PROTO_AGG_TOPK, PROTO_SOPT_MOMENTUM, 0.5);
}

Test(shard, an_adam_server_optimizer_takes_lr_times_the_normalised_step)
{
    run_server_optimizer(PROTO_AGG_DENSE, PROTO_SOPT_ADAM, 0);
    run_server_optimizer(PROTO_AGG_TOPK, PROTO_SOPT_ADAM, 0);
}

Test(shard, a_server_optimizer_is_refused_where_it_cannot_run_or_differs)
{
    rig *g = rig_new(2, PROTO_AGG_GTOPK, PROTO_MODE_SSGD);
    proto_jobcfg cfg = g->cfg;
    refusal_ctx c;

    rig_start(g);
    cfg.server_opt = PROTO_SOPT_MOMENTUM;
    cfg.server_beta = 0.9;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &cfg, g->t, 3), FLPS_ECONFIG,
                  PEER(0), "not in an asynchronous job, nor with gtopk");
    cfg.agg = PROTO_AGG_DENSE;
    cfg.mode = PROTO_MODE_ASYNC;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &cfg, g->t, 3), FLPS_ECONFIG,
                  PEER(0), "not in an asynchronous job");
    cr_assert_eq(ps_shard_num_owned(g->s), 0, "nothing was configured");
    rig_free(g);

    g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    g->cfg.server_opt = PROTO_SOPT_MOMENTUM;
    g->cfg.server_beta = 0.9;
    rig_start(g);
    cr_assert_eq(send_register_cfg(g, 0, &g->cfg, g->t, 3), FLPS_OK);
    cfg = g->cfg;
    cfg.server_beta = 0.5;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &cfg, g->t, 3), FLPS_ELAYOUT,
                  PEER(1), "server optimizer");
    cfg.server_opt = PROTO_SOPT_SGD;
    cfg.server_beta = 0;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 1, &cfg, g->t, 3), FLPS_ELAYOUT,
                  PEER(1), "server optimizer");
    rig_free(g);
}

Test(shard, a_weighted_jobs_push_without_its_weight_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_WEIGHTED);
    const float gr[4] = {1, 2, 3, 4};
    snap a, b;

    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    take_snap(g, &a);
    clear_replies(g);
    cr_assert_eq(push_dense(g, 0, 0, 0, gr, 4), FLPS_EPROTO);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ERROR);
    cr_assert_not_null(strstr(last(g)->msg.text, "weight"), "%s",
                       last(g)->msg.text);
    /* The rank may push again, with its weight. */
    cr_assert_eq(push_dense_weighted(g, 0, 0, 0, gr, 4, 2), FLPS_OK);
    take_snap(g, &b);
    assert_snap_eq(g, &a, &b);
    rig_free(g);
}

Test(shard, an_iteration_where_nobody_sent_anything_still_closes)
{
    rig *g = rig_one_part(2, PROTO_AGG_GTOPK, 8, 0.25);
    snap a, b;

    rig_start(g);
    register_all(g);
    init_part(g, 0, 8);
    take_snap(g, &a);
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 0, 0, 0, NULL, NULL, 0), FLPS_OK);
    cr_assert_eq(push_sparse(g, 1, 0, 0, NULL, NULL, 0), FLPS_OK);
    cr_assert_eq(g->n, 2);
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_UPDATE);
    cr_assert_eq(g->r[0].msg.n, 0);
    cr_assert_eq(g->r[0].msg.nrej, 0);
    take_snap(g, &b);
    cr_assert_eq(memcmp(a.v[0], b.v[0], 8 * sizeof(float)), 0);
    cr_assert_eq(b.ver[0], a.ver[0] + 1, "an empty update is still one");
    cr_assert_eq(b.iter[0], 1);
    rig_free(g);
}

/* ---- gtopk against a brute-force reference ---- */

typedef struct gt_ref {
    uint32_t nsel;
    uint32_t sel[MAXNUMEL]; /* ascending */
    float delta[MAXNUMEL];  /* per selected index, same order */
} gt_ref;

/* The sums qsort's comparator ranks by (qsort has no context argument). */
static float ref_acc[MAXNUMEL];

static int cmp_by_magnitude(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    float ma = fabsf(ref_acc[a]), mb = fabsf(ref_acc[b]);

    if (ma != mb)
        return ma > mb ? -1 : 1;
    return a < b ? -1 : (a > b); /* ties: the lower index wins */
}

static int cmp_u32(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    return a < b ? -1 : (a > b);
}

static void gtopk_reference(uint32_t W, uint32_t numel, double density,
                            float scale, uint32_t idx[][MAXNUMEL],
                            float val[][MAXNUMEL], const uint32_t *n,
                            gt_ref *out)
{
    int touched[MAXNUMEL] = {0};
    uint32_t cand[MAXNUMEL], nc = 0;
    uint64_t k = (uint64_t)floor(density * (double)numel);

    if (k < 1)
        k = 1;
    memset(ref_acc, 0, sizeof(ref_acc));
    for (uint32_t r = 0; r < W; r++)
        for (uint32_t j = 0; j < n[r]; j++) {
            ref_acc[idx[r][j]] += val[r][j];
            touched[idx[r][j]] = 1;
        }
    for (uint32_t i = 0; i < numel; i++)
        if (touched[i])
            cand[nc++] = i;
    qsort(cand, nc, sizeof(*cand), cmp_by_magnitude);
    out->nsel = nc < k ? nc : (uint32_t)k;
    memcpy(out->sel, cand, out->nsel * sizeof(*cand));
    qsort(out->sel, out->nsel, sizeof(*out->sel), cmp_u32);
    for (uint32_t j = 0; j < out->nsel; j++)
        out->delta[j] = -(scale * ref_acc[out->sel[j]]);
}

static int ref_selects(const gt_ref *ref, uint32_t i)
{
    return bsearch(&i, ref->sel, ref->nsel, sizeof(i), cmp_u32) != NULL;
}

static void run_gtopk_random(uint32_t W, uint32_t numel, double density,
                             double touch, uint64_t seed)
{
    rig *g = rig_one_part(W, PROTO_AGG_GTOPK, numel, density);
    static const float pool[] = {-2.0f, -1.0f, -0.5f, 0.5f, 1.0f, 2.0f};
    float w[MAXNUMEL];

    rig_start(g);
    register_all(g);
    init_part(g, 0, numel);
    for (uint32_t i = 0; i < numel; i++)
        w[i] = init_value(0, i);
    for (uint64_t it = 0; it < 5; it++) {
        uint32_t idx[8][MAXNUMEL];
        float val[8][MAXNUMEL];
        uint32_t n[8];
        gt_ref ref;
        const float scale = scale_of(g, it);
        const float *v;
        uint32_t pn;
        uint64_t ver, pit;

        for (uint32_t r = 0; r < W; r++) {
            n[r] = 0;
            for (uint32_t i = 0; i < numel; i++) {
                if ((double)(rng_next(&seed) % 1000) < touch * 1000.0) {
                    idx[r][n[r]] = i;
                    val[r][n[r]] = pool[rng_next(&seed) % 6];
                    n[r]++;
                }
            }
        }
        gtopk_reference(W, numel, density, scale, idx, val, n, &ref);
        clear_replies(g);
        /* Arrival order varies too: a rotation of the ranks. */
        for (uint32_t q = 0; q < W; q++) {
            uint32_t r = (q + (uint32_t)it) % W;
            cr_assert_eq(push_sparse(g, r, 0, it, idx[r], val[r], n[r]),
                         FLPS_OK);
        }
        cr_assert_eq(g->n, W);
        for (uint32_t q = 0; q < W; q++) {
            const captured *c = &g->r[q];
            uint32_t r = c->msg.rank, nrej = 0;
            uint32_t rej[MAXNUMEL];

            cr_assert_eq(c->msg.op, PROTO_OP_UPDATE);
            cr_assert_eq(c->peer, PEER(r));
            cr_assert_eq(c->msg.iter, it);
            cr_assert_eq(c->msg.n, ref.nsel,
                         "W=%u numel=%u density=%g touch=%g it=%llu: %u "
                         "selected, reference %u",
                         W, numel, density, touch, (unsigned long long)it,
                         c->msg.n, ref.nsel);
            cr_assert_eq(memcmp(c->idx, ref.sel, ref.nsel * sizeof(uint32_t)),
                         0, "selected indices differ from the reference");
            cr_assert_eq(memcmp(c->val, ref.delta, ref.nsel * sizeof(float)), 0,
                         "update values differ from the reference");
            for (uint32_t j = 0; j < n[r]; j++)
                if (!ref_selects(&ref, idx[r][j]))
                    rej[nrej++] = idx[r][j];
            cr_assert_eq(c->msg.nrej, nrej,
                         "rank %u: %u rejected, reference %u", r, c->msg.nrej,
                         nrej);
            cr_assert_eq(memcmp(c->rej, rej, nrej * sizeof(uint32_t)), 0,
                         "rank %u: rejected indices differ", r);
        }
        for (uint32_t j = 0; j < ref.nsel; j++)
            w[ref.sel[j]] += ref.delta[j];
        cr_assert_eq(ps_shard_part(g->s, 0, &v, &pn, &ver, &pit), FLPS_OK);
        cr_assert_eq(memcmp(v, w, numel * sizeof(float)), 0,
                     "part values after iteration %llu",
                     (unsigned long long)it);
        cr_assert_eq(pit, it + 1);
    }
    rig_free(g);
}

Test(shard, gtopk_matches_a_brute_force_reference_with_ties)
{
    const uint32_t Ws[] = {1, 2, 3, 5};
    const double densities[] = {0.01, 0.1, 0.25, 0.5, 1.0};
    const double touches[] = {0.05, 0.3, 0.9};
    uint64_t seed = 2024;

    for (size_t a = 0; a < sizeof(Ws) / sizeof(Ws[0]); a++)
        for (size_t b = 0; b < sizeof(densities) / sizeof(densities[0]); b++)
            for (size_t c = 0; c < sizeof(touches) / sizeof(touches[0]); c++)
                run_gtopk_random(Ws[a], 64, densities[b], touches[c], seed++);
    run_gtopk_random(4, 200, 0.03, 0.5, 77);
    run_gtopk_random(3, 7, 0.2, 0.6, 78);
}

Test(shard, gtopk_breaks_magnitude_ties_toward_the_lower_index)
{
    rig *g = rig_one_part(2, PROTO_AGG_GTOPK, 10, 0.2); /* k = 2 */
    const uint32_t i0[3] = {2, 4, 7}, i1[3] = {1, 4, 8};
    const float v0[3] = {1.0f, 0.5f, -1.0f}, v1[3] = {-1.0f, 0.5f, 1.0f};
    const uint32_t rej0[2] = {4, 7}, rej1[2] = {4, 8};

    /* Sums: 1 -> -1, 2 -> 1, 4 -> 1, 7 -> -1, 8 -> 1: five ties at |1|,
     * so k = 2 takes indices 1 and 2. */
    rig_start(g);
    register_all(g);
    init_part(g, 0, 10);
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 1, 0, 0, i1, v1, 3), FLPS_OK);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 3), FLPS_OK);
    cr_assert_eq(g->n, 2);
    cr_assert_eq(g->r[0].msg.n, 2);
    cr_assert_eq(g->r[0].idx[0], 1);
    cr_assert_eq(g->r[0].idx[1], 2);
    cr_assert_eq(g->r[0].msg.rank, 0);
    cr_assert_eq(g->r[0].msg.nrej, 2);
    cr_assert_eq(memcmp(g->r[0].rej, rej0, sizeof(rej0)), 0);
    cr_assert_eq(g->r[1].msg.nrej, 2);
    cr_assert_eq(memcmp(g->r[1].rej, rej1, sizeof(rej1)), 0);
    rig_free(g);
}

/* ---- arrival order ---- */

Test(shard, arrival_order_does_not_change_the_result)
{
    /* Values whose float sum depends on the order of addition: rank order
     * gives (1e8 + 1) - 1e8 = 0, while 0, 2, 1 would give 1. */
    const float g[3][4] = {
        {1e8f, 1, 2, 3}, {1.0f, 1e8f, 0.25f, -7}, {-1e8f, -1e8f, 3, 1e-3f}};
    const uint32_t orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                   {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    snap first;
    float first_delta[4];

    for (int o = 0; o < 6; o++) {
        rig *rg = rig_ready(3, PROTO_AGG_DENSE);
        snap s;

        clear_replies(rg);
        for (int q = 0; q < 3; q++) {
            uint32_t r = orders[o][q];
            cr_assert_eq(push_dense(rg, r, 0, 0, g[r], 4), FLPS_OK);
        }
        cr_assert_eq(rg->n, 3);
        take_snap(rg, &s);
        if (o == 0) {
            first = s;
            memcpy(first_delta, rg->r[0].val, sizeof(first_delta));
            cr_assert_eq(first_delta[0], -0.0f, "(1e8 + 1) - 1e8 in float");
        } else {
            assert_snap_eq(rg, &first, &s);
            cr_assert_eq(memcmp(first_delta, rg->r[0].val, sizeof(first_delta)),
                         0, "order %d changed the update", o);
        }
        rig_free(rg);
    }
}

Test(shard, sparse_arrival_order_does_not_change_the_result)
{
    const uint32_t idx[3][2] = {{0, 3}, {0, 1}, {0, 3}};
    const float val[3][2] = {{1e8f, 1}, {1.0f, 2}, {-1e8f, 0.5f}};
    snap first;

    for (int o = 0; o < 3; o++) {
        rig *rg = rig_one_part(3, PROTO_AGG_GTOPK, 4, 0.5);
        snap s;

        rig_start(rg);
        register_all(rg);
        init_part(rg, 0, 4);
        for (int q = 0; q < 3; q++) {
            uint32_t r = (uint32_t)(q + o) % 3;
            cr_assert_eq(push_sparse(rg, r, 0, 0, idx[r], val[r], 2), FLPS_OK);
        }
        take_snap(rg, &s);
        if (o == 0)
            first = s;
        else
            assert_snap_eq(rg, &first, &s);
        rig_free(rg);
    }
}

/* ---- init and pull ---- */

Test(shard, the_first_init_wins_and_a_second_is_acknowledged_with_status_1)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float a[4] = {1, 2, 3, 4}, b[4] = {9, 9, 9, 9};
    snap before, after;

    rig_start(g);
    register_all(g);
    clear_replies(g);
    cr_assert_eq(send_init(g, 0, 0, a, 4), FLPS_OK);
    cr_assert_eq(g->n, 1);
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_ACK);
    cr_assert_eq(g->r[0].msg.status, 0);
    cr_assert_eq(g->r[0].msg.version, 1);
    cr_assert_eq(g->r[0].msg.part, 0);
    cr_assert_eq(g->r[0].peer, PEER(0));
    take_snap(g, &before);
    cr_assert_eq(memcmp(before.v[0], a, sizeof(a)), 0);
    cr_assert_eq(send_init(g, 1, 0, b, 4), FLPS_OK);
    cr_assert_eq(g->n, 2);
    cr_assert_eq(g->r[1].msg.op, PROTO_OP_ACK);
    cr_assert_eq(g->r[1].msg.status, 1, "already initialised");
    cr_assert_eq(g->r[1].msg.version, 1);
    cr_assert_eq(g->r[1].peer, PEER(1));
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);
    rig_free(g);
}

Test(shard, an_init_of_the_wrong_size_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float a[4] = {1, 2, 3, 4};
    refusal_ctx c;

    rig_start(g);
    register_all(g);
    refusal_begin(g, &c);
    refusal_check(g, &c, send_init(g, 0, 0, a, 3), FLPS_EPROTO, PEER(0),
                  "must be dense with 4 elements, got 3");
    refusal_begin(g, &c);
    refusal_check(g, &c, send_init(g, 0, 1, a, 4), FLPS_EINVAL, PEER(0),
                  "part 1 is not held by shard 0");
    rig_free(g);
}

Test(shard, a_pull_before_init_is_answered_when_init_arrives)
{
    rig *g = rig_new(3, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    const float a[4] = {1, -2, 3, -4};
    proto_msg pull;

    rig_start(g);
    register_all(g);
    clear_replies(g);
    pull = base_msg(PROTO_OP_PULL, 1, 0, 0);
    cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
    pull.rank = 2;
    cr_assert_eq(deliver(g, PEER(2), &pull), FLPS_OK);
    cr_assert_eq(g->n, 0, "a pull waits for the initial values");
    cr_assert_eq(send_init(g, 0, 0, a, 4), FLPS_OK);
    cr_assert_eq(g->n, 3, "the ACK and both waiting pulls");
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_ACK);
    for (int i = 1; i < 3; i++) {
        const captured *c = &g->r[i];
        cr_assert_eq(c->msg.op, PROTO_OP_PULL_REPLY);
        cr_assert_eq(c->peer, PEER(c->msg.rank));
        cr_assert_eq(c->msg.part, 0);
        cr_assert_eq(c->msg.version, 1);
        cr_assert_eq(c->msg.iter, 0);
        cr_assert_eq(c->msg.n, 4);
        cr_assert_eq(memcmp(c->val, a, sizeof(a)), 0);
    }
    cr_assert_neq(g->r[1].msg.rank, g->r[2].msg.rank);

    /* After init, a pull is answered at once with the current values. */
    clear_replies(g);
    pull.rank = 0;
    cr_assert_eq(deliver(g, PEER(0), &pull), FLPS_OK);
    cr_assert_eq(g->n, 1);
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_PULL_REPLY);
    cr_assert_eq(memcmp(g->r[0].val, a, sizeof(a)), 0);
    cr_assert_eq(ps_shard_stats_get(g->s)->pulls, 3);
    rig_free(g);
}

Test(shard, a_pull_shows_the_values_after_an_update)
{
    rig *g = rig_ready(1, PROTO_AGG_DENSE);
    const float gr[4] = {1, 2, 3, 4};
    proto_msg pull = base_msg(PROTO_OP_PULL, 0, 0, 0);
    snap s;

    cr_assert_eq(push_dense(g, 0, 0, 0, gr, 4), FLPS_OK);
    clear_replies(g);
    cr_assert_eq(deliver(g, PEER(0), &pull), FLPS_OK);
    take_snap(g, &s);
    cr_assert_eq(g->n, 1);
    cr_assert_eq(g->r[0].msg.version, 2);
    cr_assert_eq(g->r[0].msg.iter, 1);
    cr_assert_eq(memcmp(g->r[0].val, s.v[0], 4 * sizeof(float)), 0);
    rig_free(g);
}

Test(shard, destroying_a_shard_with_waiting_pulls_and_pushes_frees_them)
{
    rig *g = rig_new(2, PROTO_AGG_TOPK, PROTO_MODE_SSGD);
    proto_msg pull = base_msg(PROTO_OP_PULL, 1, 0, 0);
    const uint32_t idx[1] = {1};
    const float v[1] = {1};

    rig_start(g);
    register_all(g);
    cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
    init_part(g, 3, 4);
    cr_assert_eq(push_sparse(g, 0, 3, 0, idx, v, 1), FLPS_OK);
    rig_free(g);
    ASSERT_NO_LEAKS();
}

/* ---- asynchronous mode ---- */

Test(shard, async_applies_each_push_at_once_and_refuses_a_repeated_iteration)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_ASYNC);
    const float g0[4] = {1, 2, 3, 4}, g1[4] = {-0.5f, 0.25f, 8, 1};
    float w[4];
    const float scale = scale_of(g, 0);
    refusal_ctx c;
    snap s;

    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    for (uint32_t i = 0; i < 4; i++)
        w[i] = init_value(0, i);

    clear_replies(g);
    cr_assert_eq(push_dense(g, 0, 0, 0, g0, 4), FLPS_OK);
    cr_assert_eq(g->n, 1);
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_ACK);
    cr_assert_eq(g->r[0].msg.status, 0);
    cr_assert_eq(g->r[0].msg.version, 2);
    cr_assert_eq(g->r[0].peer, PEER(0));
    for (uint32_t i = 0; i < 4; i++)
        w[i] += -(scale * g0[i]);
    take_snap(g, &s);
    cr_assert_eq(memcmp(s.v[0], w, sizeof(w)), 0);
    cr_assert_eq(s.ver[0], 2);

    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 0, g1, 4), FLPS_EDUP, PEER(0),
                  "rank 0 already pushed iteration 0 of part 0");

    /* Another rank's iteration 0 is new; so is a later one of rank 0,
     * even one that skips ahead. */
    cr_assert_eq(push_dense(g, 1, 0, 0, g1, 4), FLPS_OK);
    cr_assert_eq(last(g)->msg.version, 3);
    for (uint32_t i = 0; i < 4; i++)
        w[i] += -(scale * g1[i]);
    cr_assert_eq(push_dense(g, 0, 0, 5, g1, 4), FLPS_OK);
    cr_assert_eq(last(g)->msg.version, 4);
    for (uint32_t i = 0; i < 4; i++)
        w[i] += -(scale_of(g, 5) * g1[i]);
    take_snap(g, &s);
    cr_assert_eq(memcmp(s.v[0], w, sizeof(w)), 0);
    refusal_begin(g, &c);
    refusal_check(g, &c, push_dense(g, 0, 0, 3, g1, 4), FLPS_EDUP, PEER(0),
                  "already pushed iteration 3");
    cr_assert_eq(ps_shard_stats_get(g->s)->updates, 3);
    rig_free(g);
}

/* Bounded staleness (ssp) rests on this: an async part's ACKs and pull
 * replies name the slowest rank's next iteration. */
Test(shard, async_acks_and_pulls_name_the_slowest_ranks_next_iteration)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_ASYNC);
    const float g0[4] = {1, 2, 3, 4};
    proto_msg pull = base_msg(PROTO_OP_PULL, 1, 0, 0);

    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    cr_assert_eq(push_dense(g, 0, 0, 0, g0, 4), FLPS_OK);
    cr_assert_eq(last(g)->msg.slowest, 0, "rank 1 has pushed nothing");
    cr_assert_eq(push_dense(g, 0, 0, 1, g0, 4), FLPS_OK);
    cr_assert_eq(last(g)->msg.slowest, 0);
    cr_assert_eq(push_dense(g, 1, 0, 0, g0, 4), FLPS_OK);
    cr_assert_eq(last(g)->msg.slowest, 1, "both ranks pushed iteration 0");
    cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_PULL_REPLY);
    cr_assert_eq(last(g)->msg.slowest, 1);
    cr_assert_eq(push_dense(g, 1, 0, 1, g0, 4), FLPS_OK);
    cr_assert_eq(last(g)->msg.slowest, 2);
    rig_free(g);
}

/* A pull naming the version the worker holds is answered with the
 * current values of only the elements changed since (issue: an async
 * sparse job pulled the whole model every iteration); a pull of version
 * 0, of a version the shard does not have, or one where most elements
 * changed, gets the whole part. */
Test(shard, async_pulls_naming_a_version_get_only_what_changed_since)
{
    rig *g = rig_one_part(2, PROTO_AGG_TOPK, 64, 0.1);
    const uint32_t i0[2] = {3, 40}, i1[1] = {40};
    const float v0[2] = {1, 2}, v1[1] = {4};
    proto_msg pull = base_msg(PROTO_OP_PULL, 1, 0, 0);
    const float *w;
    uint32_t numel;
    uint64_t ver, it, v_init;
    const captured *c;

    g->cfg.mode = PROTO_MODE_ASYNC;
    rig_start(g);
    register_all(g);
    init_part(g, 0, 64);
    cr_assert_eq(ps_shard_part(g->s, 0, &w, &numel, &v_init, &it), FLPS_OK);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 2), FLPS_OK);
    cr_assert_eq(push_sparse(g, 1, 0, 0, i1, v1, 1), FLPS_OK);
    cr_assert_eq(ps_shard_part(g->s, 0, &w, &numel, &ver, &it), FLPS_OK);
    cr_assert_eq(ver, v_init + 2);

    pull.version = v_init; /* held since init: elements 3 and 40 changed */
    cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
    c = last(g);
    cr_assert_eq(c->msg.op, PROTO_OP_PULL_REPLY);
    cr_assert_eq(c->msg.codec, PROTO_CODEC_SPARSE);
    cr_assert_eq(c->msg.n, 2);
    cr_assert_eq(c->msg.iter, v_init, "the reply names what it counts from");
    cr_assert_eq(c->msg.version, ver);
    cr_assert_eq(c->idx[0], 3);
    cr_assert_eq(c->idx[1], 40);
    cr_assert_eq(c->val[0], w[3], "current values, not deltas");
    cr_assert_eq(c->val[1], w[40]);

    pull.version = v_init + 1; /* only rank 1's push is new: element 40 */
    rig_sent(g);
    clear_replies(g);
    cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
    cr_assert_eq(last(g)->msg.codec, PROTO_CODEC_SPARSE);
    cr_assert_eq(last(g)->msg.n, 1);
    cr_assert_eq(last(g)->idx[0], 40);

    pull.version = ver; /* nothing changed */
    clear_replies(g);
    cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
    cr_assert_eq(last(g)->msg.codec, PROTO_CODEC_SPARSE);
    cr_assert_eq(last(g)->msg.n, 0);

    for (uint64_t bad = 0; bad <= 1; bad++) {
        pull.version = bad ? ver + 5 : 0; /* none / from the future */
        clear_replies(g);
        cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
        cr_assert_eq(last(g)->msg.codec, PROTO_CODEC_DENSE);
        cr_assert_eq(last(g)->msg.n, 64);
        cr_assert_eq(memcmp(last(g)->val, w, 64 * sizeof(float)), 0);
    }
    {
        /* A push changing most elements: the whole part again. */
        uint32_t many[40];
        float d[40];
        for (uint32_t i = 0; i < 40; i++) {
            many[i] = i;
            d[i] = 0.5f;
        }
        cr_assert_eq(push_sparse(g, 0, 0, 1, many, d, 40), FLPS_OK);
        pull.version = ver;
        clear_replies(g);
        cr_assert_eq(deliver(g, PEER(1), &pull), FLPS_OK);
        cr_assert_eq(last(g)->msg.codec, PROTO_CODEC_DENSE);
    }
    rig_free(g);
}

/* A synchronous part never answers sparsely: its replicas move by the
 * updates, and a pull is a full resynchronisation. */
Test(shard, sync_pulls_are_always_whole_parts)
{
    rig *g = rig_one_part(1, PROTO_AGG_TOPK, 16, 0.25);
    const uint32_t i0[1] = {5};
    const float v0[1] = {1};
    proto_msg pull = base_msg(PROTO_OP_PULL, 0, 0, 0);

    rig_start(g);
    register_all(g);
    init_part(g, 0, 16);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 1), FLPS_OK);
    pull.version = 1;
    cr_assert_eq(deliver(g, PEER(0), &pull), FLPS_OK);
    cr_assert_eq(last(g)->msg.codec, PROTO_CODEC_DENSE);
    cr_assert_eq(last(g)->msg.n, 16);
    rig_free(g);
}

Test(shard, async_sparse_pushes_touch_only_their_indices)
{
    rig *g = rig_new(2, PROTO_AGG_GTOPK, PROTO_MODE_ASYNC);
    const uint32_t idx[2] = {1, 3};
    const float v[2] = {2.0f, -4.0f};
    const float scale = scale_of(g, 0);
    float w[4];
    snap s;

    rig_start(g);
    register_all(g);
    init_part(g, 3, 4);
    for (uint32_t i = 0; i < 4; i++)
        w[i] = init_value(3, i);
    cr_assert_eq(push_sparse(g, 1, 3, 0, idx, v, 2), FLPS_OK);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ACK);
    w[1] += -(scale * v[0]);
    w[3] += -(scale * v[1]);
    take_snap(g, &s);
    cr_assert_eq(memcmp(s.v[3], w, sizeof(w)), 0);
    rig_free(g);
}

/* ---- durability ---- */

/* One synchronous dense iteration of every owned part, all ranks. */
static void iterate_all(rig *g, uint64_t it, uint64_t *seed)
{
    for (int k = 0; k < 3; k++) {
        for (uint32_t r = 0; r < g->cfg.workers; r++) {
            float v[MAXNUMEL];
            uint32_t idx[MAXNUMEL], n = 0;
            for (uint32_t i = 0; i < OWNED_NUMEL[k]; i++) {
                v[i] = rand_grad(seed);
                if (g->cfg.agg != PROTO_AGG_DENSE) {
                    if (rng_next(seed) % 2)
                        continue;
                    idx[n] = i;
                    v[n] = v[i];
                    n++;
                }
            }
            if (g->cfg.agg == PROTO_AGG_DENSE)
                cr_assert_eq(push_dense(g, r, OWNED[k], it, v, OWNED_NUMEL[k]),
                             FLPS_OK);
            else
                cr_assert_eq(push_sparse(g, r, OWNED[k], it, idx, v, n),
                             FLPS_OK);
        }
    }
}

/* A rig with a checkpoint directory, registered and initialised, whose
 * job has server optimizer opt (beta for momentum). */
static rig *durable_rig_sopt(uint8_t agg, uint8_t opt, double beta)
{
    rig *g = rig_new(2, agg, PROTO_MODE_SSGD);

    g->cfg.server_opt = opt;
    g->cfg.server_beta = beta;
    rig_use_dir(g);
    rig_start(g);
    register_all(g);
    for (int k = 0; k < 3; k++)
        init_part(g, OWNED[k], OWNED_NUMEL[k]);
    return g;
}

static rig *durable_rig(uint8_t agg)
{
    return durable_rig_sopt(agg, PROTO_SOPT_SGD, 0);
}

/* Simulate a crash (no checkpoint on the way out) and restart. */
static void crash_and_restore(rig *g)
{
    ps_shard_destroy(g->s);
    g->s = NULL;
    cr_assert_eq(rig_create(g, 1, &g->s), FLPS_OK);
}

static void run_crash_restore_sopt(uint8_t agg, uint8_t opt, double beta)
{
    rig *g = durable_rig_sopt(agg, opt, beta);
    uint64_t seed = 99;
    snap before, after;
    proto_msg ck = base_msg(PROTO_OP_CHECKPOINT, 0, 0, 0);

    for (uint64_t it = 0; it < 3; it++)
        iterate_all(g, it, &seed);
    take_snap(g, &before);
    cr_assert_eq(before.iter[0], 3);
    crash_and_restore(g);
    cr_assert_eq(ps_shard_num_owned(g->s), 3);
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);

    /* The restored shard carries on: workers re-register and push the
     * open iteration. */
    clear_replies(g);
    register_all(g);
    cr_assert_eq(last(g)->msg.iter, 3, "REGISTER_OK names the open one");
    iterate_all(g, 3, &seed);

    /* A checkpoint, more iterations, a crash: checkpoint + log. */
    clear_replies(g);
    cr_assert_eq(deliver(g, PEER(0), &ck), FLPS_OK);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ACK);
    cr_assert_str_eq(last(g)->msg.text, "checkpoint written");
    for (uint64_t it = 4; it < 7; it++)
        iterate_all(g, it, &seed);
    take_snap(g, &before);
    cr_assert_eq(before.iter[0], 7);
    crash_and_restore(g);
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);

    /* A checkpoint with an empty log after it restores alone. */
    cr_assert_eq(ps_shard_checkpoint(g->s), FLPS_OK);
    crash_and_restore(g);
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);
    rig_free(g);
}

static void run_crash_restore(uint8_t agg)
{
    run_crash_restore_sopt(agg, PROTO_SOPT_SGD, 0);
}

Test(shard, a_crashed_dense_shard_restores_every_part_bit_for_bit)
{
    run_crash_restore(PROTO_AGG_DENSE);
}

Test(shard, a_crashed_gtopk_shard_restores_every_part_bit_for_bit)
{
    run_crash_restore(PROTO_AGG_GTOPK);
}

Test(shard, a_restored_shard_continues_exactly_like_one_that_never_crashed)
{
    rig *a = durable_rig(PROTO_AGG_GTOPK), *b = durable_rig(PROTO_AGG_GTOPK);
    uint64_t sa = 5, sb = 5;
    snap x, y;

    for (uint64_t it = 0; it < 3; it++) {
        iterate_all(a, it, &sa);
        iterate_all(b, it, &sb);
    }
    crash_and_restore(b);
    for (uint64_t it = 3; it < 6; it++) {
        iterate_all(a, it, &sa);
        iterate_all(b, it, &sb);
    }
    take_snap(a, &x);
    take_snap(b, &y);
    assert_snap_eq(a, &x, &y);
    rig_free(a);
    rig_free(b);
}

Test(shard, a_crashed_shard_with_a_server_optimizer_restores_bit_for_bit)
{
    run_crash_restore_sopt(PROTO_AGG_DENSE, PROTO_SOPT_MOMENTUM, 0.9);
    run_crash_restore_sopt(PROTO_AGG_TOPK, PROTO_SOPT_ADAM, 0);
}

/* Two shards of one server-optimizer job run alike; b crashes after a
 * checkpoint and some iterations, and after another crash with only the
 * log: its optimizer state comes back, so the iterations after each
 * crash update both alike. */
static void run_sopt_continues(uint8_t agg, uint8_t opt, double beta)
{
    rig *a = durable_rig_sopt(agg, opt, beta),
        *b = durable_rig_sopt(agg, opt, beta);
    uint64_t sa = 7, sb = 7;
    snap x, y;

    for (uint64_t it = 0; it < 9; it++) {
        if (it == 2)
            cr_assert_eq(ps_shard_checkpoint(b->s), FLPS_OK);
        if (it == 4 || it == 7) {
            crash_and_restore(b);
            clear_replies(b);
            register_all(b);
        }
        iterate_all(a, it, &sa);
        iterate_all(b, it, &sb);
        take_snap(a, &x);
        take_snap(b, &y);
        assert_snap_eq(a, &x, &y);
    }
    rig_free(a);
    rig_free(b);
}

Test(shard,
     a_restored_server_optimizer_continues_exactly_like_one_that_never_crashed)
{
    run_sopt_continues(PROTO_AGG_DENSE, PROTO_SOPT_MOMENTUM, 0.5);
    run_sopt_continues(PROTO_AGG_DENSE, PROTO_SOPT_ADAM, 0);
    run_sopt_continues(PROTO_AGG_TOPK, PROTO_SOPT_MOMENTUM, 0.9);
}

Test(shard, a_crash_between_register_and_init_restores_the_layout)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    snap s;

    rig_use_dir(g);
    rig_start(g);
    register_all(g);
    init_part(g, 2, 2);
    crash_and_restore(g);
    cr_assert_eq(ps_shard_num_owned(g->s), 3);
    take_snap(g, &s);
    cr_assert(!s.ok[0] && s.ok[2] && !s.ok[3],
              "only the initialised part has values");
    cr_assert_eq(s.ver[2], 1);
    cr_assert_eq(s.v[2][1], init_value(2, 1));
    rig_free(g);
}

Test(shard, a_start_without_restore_is_empty)
{
    rig *g = durable_rig(PROTO_AGG_DENSE);
    uint64_t seed = 3;
    const float *v;
    uint32_t n;
    uint64_t ver, iter;

    iterate_all(g, 0, &seed);
    cr_assert_eq(ps_shard_checkpoint(g->s), FLPS_OK);
    iterate_all(g, 1, &seed);
    ps_shard_destroy(g->s);
    g->s = NULL;
    cr_assert_eq(rig_create(g, 0, &g->s), FLPS_OK);
    cr_assert_eq(ps_shard_num_owned(g->s), 0);
    cr_assert_eq(ps_shard_part(g->s, 0, &v, &n, &ver, &iter), FLPS_EINVAL);
    /* A new job registers from scratch: iteration 0 again. */
    clear_replies(g);
    register_all(g);
    cr_assert_eq(last(g)->msg.iter, 0);
    cr_assert_eq(ps_shard_part(g->s, 0, &v, &n, &ver, &iter), FLPS_EINVAL,
                 "no values until INIT");
    rig_free(g);
}

Test(shard, a_restore_without_any_files_starts_empty)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);

    rig_use_dir(g);
    cr_assert_eq(rig_create(g, 1, &g->s), FLPS_OK);
    cr_assert_eq(ps_shard_num_owned(g->s), 0);
    register_all(g);
    cr_assert_eq(ps_shard_num_owned(g->s), 3);
    rig_free(g);
}

static void ckpt_path_of(const rig *g, char *ck, char *wl)
{
    persist_paths(g->dir, g->cfg.shard, ck, wl, 256);
}

Test(shard, a_corrupt_checkpoint_makes_restore_fail)
{
    rig *g = durable_rig(PROTO_AGG_DENSE);
    uint64_t seed = 4;
    char ck[256], wl[256];
    ps_shard *s2 = (ps_shard *)g;
    struct stat st;

    iterate_all(g, 0, &seed);
    cr_assert_eq(ps_shard_checkpoint(g->s), FLPS_OK);
    ps_shard_destroy(g->s);
    g->s = NULL;
    ckpt_path_of(g, ck, wl);
    cr_assert_eq(stat(ck, &st), 0);
    for (off_t at = 0; at < st.st_size; at += st.st_size / 7 + 1) {
        int fd = open(ck, O_RDWR);
        unsigned char b;
        cr_assert_geq(fd, 0);
        cr_assert_eq(pread(fd, &b, 1, at), 1);
        b ^= 0x10;
        cr_assert_eq(pwrite(fd, &b, 1, at), 1);
        cr_assert_eq(rig_create(g, 1, &s2), FLPS_EPROTO, "byte %lld flipped",
                     (long long)at);
        cr_assert_eq(s2, (ps_shard *)g, "*out untouched");
        b ^= 0x10;
        cr_assert_eq(pwrite(fd, &b, 1, at), 1);
        close(fd);
    }
    cr_assert_eq(rig_create(g, 1, &g->s), FLPS_OK, "intact again");
    rig_free(g);
}

Test(shard, a_checkpoint_of_another_job_is_refused)
{
    rig *g = durable_rig(PROTO_AGG_DENSE);
    ps_shard_config c;
    ps_shard *s2 = NULL;

    ps_shard_destroy(g->s);
    g->s = NULL;
    memset(&c, 0, sizeof(c));
    c.job = "another";
    c.shard = 0;
    c.nshards = 2;
    c.ckpt_dir = g->dir;
    c.send = capture;
    c.send_arg = g;
    cr_assert_eq(ps_shard_create(&c, 1, &s2), FLPS_EJOB);
    cr_assert_null(s2);
    rig_free(g);
}

Test(shard, a_torn_log_tail_restores_everything_but_the_last_record)
{
    rig *g = durable_rig(PROTO_AGG_TOPK);
    uint64_t seed = 8;
    snap before_last, after;
    char ck[256], wl[256];
    struct stat st;

    for (uint64_t it = 0; it < 3; it++)
        iterate_all(g, it, &seed);
    /* The last part's last iteration is the log's last record. */
    for (int k = 0; k < 2; k++)
        for (uint32_t r = 0; r < 2; r++) {
            const uint32_t idx[1] = {1};
            const float v[1] = {3.0f};
            cr_assert_eq(push_sparse(g, r, OWNED[k], 3, idx, v, 1), FLPS_OK);
        }
    take_snap(g, &before_last);
    {
        const uint32_t idx[2] = {0, 3};
        const float v[2] = {1.0f, -1.0f};
        cr_assert_eq(push_sparse(g, 0, 3, 3, idx, v, 2), FLPS_OK);
        cr_assert_eq(push_sparse(g, 1, 3, 3, idx, v, 2), FLPS_OK);
    }
    ps_shard_destroy(g->s);
    g->s = NULL;
    ckpt_path_of(g, ck, wl);
    cr_assert_eq(stat(wl, &st), 0);
    cr_assert_eq(truncate(wl, st.st_size - 3), 0);
    cr_assert_eq(rig_create(g, 1, &g->s), FLPS_OK);
    take_snap(g, &after);
    assert_snap_eq(g, &before_last, &after);
    cr_assert_eq(after.iter[3], 3, "part 3's iteration 3 is open again");
    rig_free(g);
}

/* ---- allocation failures ---- */

Test(shard, register_survives_every_allocation_failing_in_turn)
{
    for (unsigned long n = 1;; n++) {
        rig *g = rig_new(2, PROTO_AGG_GTOPK, PROTO_MODE_SSGD);
        proto_msg m = base_msg(PROTO_OP_REGISTER, 0, 0, 0);
        proto_frame f[PROTO_MAX_FRAMES];
        size_t nf, hlen;
        void *hdr = NULL;
        transport_rx *rx = NULL;
        flps_err rc;

        rig_use_dir(g);
        rig_start(g);
        m.cfg = g->cfg;
        m.tensors = g->t;
        m.ntensors = g->nt;
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
        cr_assert_eq(transport_rx_copy(f, nf, PEER(0), &rx), FLPS_OK);
        free(hdr);
        flps_alloc_fail_at(n);
        rc = ps_shard_handle(g->s, rx);
        flps_alloc_fail_at(0);
        if (rc == FLPS_OK) {
            cr_assert_eq(last(g)->msg.op, PROTO_OP_REGISTER_OK);
            rig_free(g);
            ASSERT_NO_LEAKS();
            cr_assert_gt(n, 5, "registering allocates");
            break;
        }
        cr_assert_eq(rc, FLPS_ENOMEM, "allocation %lu: %s", n,
                     flps_errname(rc));
        cr_assert_eq(last(g)->msg.op, PROTO_OP_ERROR);
        cr_assert_eq(last(g)->msg.status, FLPS_ENOMEM);
        cr_assert_eq(ps_shard_num_owned(g->s), 0,
                     "allocation %lu: a failed register (%s) configures "
                     "nothing",
                     n, last(g)->msg.text);
        /* The shard is still usable. */
        clear_replies(g);
        register_all(g);
        init_part(g, 0, 4);
        rig_free(g);
        ASSERT_NO_LEAKS();
    }
}

Test(shard, create_and_restore_survive_every_allocation_failing_in_turn)
{
    rig *g = durable_rig(PROTO_AGG_DENSE);
    uint64_t seed = 12;
    snap want;

    iterate_all(g, 0, &seed);
    cr_assert_eq(ps_shard_checkpoint(g->s), FLPS_OK);
    iterate_all(g, 1, &seed);
    take_snap(g, &want);
    ps_shard_destroy(g->s);
    g->s = NULL;
    for (unsigned long n = 1;; n++) {
        ps_shard *s = NULL;
        flps_err rc;
        flps_alloc_fail_at(n);
        rc = rig_create(g, 1, &s);
        flps_alloc_fail_at(0);
        if (rc == FLPS_OK) {
            snap got;
            g->s = s;
            take_snap(g, &got);
            assert_snap_eq(g, &want, &got);
            break;
        }
        cr_assert_eq(rc, FLPS_ENOMEM, "allocation %lu: %s", n,
                     flps_errname(rc));
        cr_assert_null(s);
        ASSERT_NO_LEAKS();
    }
    rig_free(g);
    ASSERT_NO_LEAKS();
}

/* ---- regressions ---- */

Test(shard, a_register_whose_checkpoint_cannot_be_written_configures_nothing)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    char ck[256], wl[256];
    refusal_ctx c;

    rig_use_dir(g);
    rig_start(g);
    /* Take the directory away under the running shard. */
    ckpt_path_of(g, ck, wl);
    cr_assert_eq(unlink(wl), 0);
    cr_assert_eq(rmdir(g->dir), 0);
    for (int attempt = 0; attempt < 2; attempt++) {
        refusal_begin(g, &c);
        refusal_check(g, &c, send_register_cfg(g, 0, &g->cfg, g->t, g->nt),
                      FLPS_EIO, PEER(0), "cannot write a checkpoint");
        cr_assert_eq(ps_shard_num_owned(g->s), 0,
                     "attempt %d: the layout is dropped", attempt);
    }
    cr_assert_eq(mkdir(g->dir, 0700), 0);
    register_all(g);
    cr_assert_eq(ps_shard_num_owned(g->s), 3);
    cr_assert_eq(access(ck, F_OK), 0, "the retry wrote the checkpoint");
    rig_free(g);
}

Test(shard, a_checkpoint_whose_layout_does_not_decode_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    char ck[256], wl[256];
    ps_shard *s = NULL;
    /* A REGISTER header whose cfg has the 8 fields of older builds. */
    static const unsigned char old_meta[] = {
        0x8a, 0xa1, 'v',  0x01, 0xa2, 'o',  'p',  0x01, 0xa3, 'j',  'o',
        'b',  0xa3, 'j',  'o',  'b',  0xa4, 'r',  'a',  'n',  'k',  0x00,
        0xa4, 'p',  'a',  'r',  't',  0x00, 0xa4, 'i',  't',  'e',  'r',
        0x00, 0xa3, 'v',  'e',  'r',  0x00, 0xa4, 'd',  'a',  't',  'a',
        0x92, 0x00, 0x00, 0xa3, 'c',  'f',  'g',  0x98, 0x00, 0x02, 0x02,
        0x04, 0x00, 0x00, 0x01, 0x01, 0xa7, 't',  'e',  'n',  's',  'o',
        'r',  's',  0x91, 0x92, 0xa1, 'w',  0x0a};

    rig_use_dir(g);
    ckpt_path_of(g, ck, wl);
    cr_assert_eq(ckpt_write(ck, old_meta, sizeof(old_meta), NULL, 0), FLPS_OK);
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(rig_create(g, 1, &s), FLPS_EPROTO);
        cr_assert_null(s);
    }
    rig_free(g);
}

Test(shard, a_restored_async_shard_still_refuses_a_push_it_already_applied)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_ASYNC);
    const float g0[4] = {1, 2, 3, 4};
    proto_msg ck = base_msg(PROTO_OP_CHECKPOINT, 0, 0, 0);
    snap before, after;

    rig_use_dir(g);
    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    cr_assert_eq(push_dense(g, 0, 0, 0, g0, 4), FLPS_OK);

    /* Restored from the log alone. */
    take_snap(g, &before);
    crash_and_restore(g);
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);
    cr_assert_eq(push_dense(g, 0, 0, 0, g0, 4), FLPS_EDUP,
                 "the log lost which iteration rank 0 pushed");
    cr_assert_eq(push_dense(g, 1, 0, 0, g0, 4), FLPS_OK);

    /* Restored from a checkpoint (the log is truncated). */
    cr_assert_eq(deliver(g, PEER(0), &ck), FLPS_OK);
    crash_and_restore(g);
    cr_assert_eq(push_dense(g, 1, 0, 0, g0, 4), FLPS_EDUP,
                 "the checkpoint lost which iteration rank 1 pushed");
    cr_assert_eq(push_dense(g, 1, 0, 1, g0, 4), FLPS_OK);
    rig_free(g);
}

/* ---- pushes of several parts ---- */

/* Rank r's push of parts 0, 2 and 3 (shard 0's three) in one message:
 * part 0 gets index r, part 2 index 1, part 3 indices 0 and 3. */
static flps_err push_joined_from(rig *g, uint32_t peer, uint32_t rank,
                                 uint64_t iter, int bad)
{
    proto_msg m = base_msg(PROTO_OP_PUSH, rank, 0, iter);
    proto_seg segs[3] = {{0, 1, 0, 0}, {2, 1, 0, 0}, {3, 2, 0, 0}};
    uint32_t idx[4] = {rank, bad ? 2 : 1, 0, 3};
    float val[4] = {1.0f + (float)rank, 2.0f, -4.0f, 0.5f * (float)rank};

    m.codec = PROTO_CODEC_SPARSE;
    m.n = 4;
    m.idx = idx;
    m.val = val;
    m.nsegs = 3;
    m.segs = segs;
    return deliver(g, peer, &m);
}

static flps_err push_joined(rig *g, uint32_t rank, uint64_t iter, int bad)
{
    return push_joined_from(g, PEER(rank), rank, iter, bad);
}

Test(shard, a_push_of_several_parts_closes_each_and_each_worker_gets_one_update)
{
    rig *g = rig_new(2, PROTO_AGG_TOPK, PROTO_MODE_SSGD);
    const float scale = (float)(0.1 / 2);
    snap before, after;

    rig_start(g);
    register_all(g);
    for (uint32_t i = 0; i < 3; i++)
        init_part(g, OWNED[i], OWNED_NUMEL[i]);
    take_snap(g, &before);
    clear_replies(g);
    cr_assert_eq(push_joined(g, 0, 0, 0), FLPS_OK);
    cr_assert_eq(g->n, 0, "nothing closes with one worker of two");
    cr_assert_eq(push_joined(g, 1, 0, 0), FLPS_OK);
    cr_assert_eq(g->n, 2, "one UPDATE per worker for the three parts");
    for (uint32_t r = 0; r < 2; r++) {
        const captured *c = &g->r[r];
        const uint32_t want_idx[5] = {0, 1, 1, 0, 3};
        const float want_val[5] = {
            -(scale * 1.0f), -(scale * 2.0f), -(scale * (2.0f + 2.0f)),
            -(scale * (-4.0f + -4.0f)), -(scale * (0.0f + 0.5f))};
        cr_assert_eq(c->peer, PEER(r));
        cr_assert_eq(c->msg.op, PROTO_OP_UPDATE);
        cr_assert_eq(c->msg.nsegs, 3);
        cr_assert_eq(c->msg.n, 5);
        cr_assert_eq(c->msg.segs[0].part, 0);
        cr_assert_eq(c->msg.segs[0].n, 2, "part 0: the union of 0 and 1");
        cr_assert_eq(c->msg.segs[1].part, 2);
        cr_assert_eq(c->msg.segs[1].n, 1);
        cr_assert_eq(c->msg.segs[2].part, 3);
        cr_assert_eq(c->msg.segs[2].n, 2);
        for (uint32_t g2 = 0; g2 < 3; g2++)
            cr_assert_eq(c->msg.segs[g2].version, 2,
                         "init is version 1, this update 2");
        for (uint32_t j = 0; j < 5; j++) {
            cr_assert_eq(c->idx[j], want_idx[j], "pair %u", j);
            cr_assert_eq(c->val[j], want_val[j], "pair %u: %g vs %g", j,
                         (double)c->val[j], (double)want_val[j]);
        }
    }
    take_snap(g, &after);
    cr_assert_eq(after.iter[0], 1);
    cr_assert_eq(after.iter[2], 1);
    cr_assert_eq(after.iter[3], 1);
    cr_assert_eq(after.v[2][1], before.v[2][1] + -(scale * (2.0f + 2.0f)));
    rig_free(g);
}

/* One peer speaking as both ranks (found by tests/fuzz/fuzz_shard): the
 * held updates went out as one UPDATE naming every part twice, which no
 * decoder accepts. Each rank's updates must leave as a message of its
 * own, each a valid wire message (capture decodes every reply). */
Test(shard, one_peer_pushing_as_two_ranks_gets_a_valid_update_per_rank)
{
    rig *g = rig_new(2, PROTO_AGG_TOPK, PROTO_MODE_SSGD);

    rig_start(g);
    register_all(g);
    for (uint32_t i = 0; i < 3; i++)
        init_part(g, OWNED[i], OWNED_NUMEL[i]);
    clear_replies(g);
    cr_assert_eq(push_joined_from(g, PEER(1), 0, 0, 0), FLPS_OK);
    cr_assert_eq(push_joined_from(g, PEER(1), 1, 0, 0), FLPS_OK);
    cr_assert_eq(g->n, 2, "one UPDATE per rank");
    for (uint32_t r = 0; r < 2; r++) {
        cr_assert_eq(g->r[r].msg.op, PROTO_OP_UPDATE);
        cr_assert_eq(g->r[r].msg.nsegs, 3);
        cr_assert_eq(g->r[r].msg.n, 5);
    }
    cr_assert_neq(g->r[0].msg.rank, g->r[1].msg.rank);
    rig_free(g);
}

Test(shard, a_push_of_several_parts_with_one_bad_segment_is_refused_whole)
{
    rig *g = rig_new(2, PROTO_AGG_TOPK, PROTO_MODE_SSGD);
    snap before, after;

    rig_start(g);
    register_all(g);
    for (uint32_t i = 0; i < 3; i++)
        init_part(g, OWNED[i], OWNED_NUMEL[i]);
    take_snap(g, &before);
    clear_replies(g);
    /* index 2 of part 2, which has 2 elements */
    cr_assert_eq(push_joined(g, 0, 0, 1), FLPS_ERANGE);
    cr_assert_eq(g->n, 1, "one refusal");
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ERROR);
    cr_assert_eq(last(g)->msg.part, 2, "naming the bad segment's part");
    /* Nothing was taken: the good push is not a duplicate of anything. */
    clear_replies(g);
    cr_assert_eq(push_joined(g, 0, 0, 0), FLPS_OK);
    cr_assert_eq(g->n, 0);
    /* A re-sent message finds every part held: a duplicate each. */
    cr_assert_eq(push_joined(g, 0, 0, 0), FLPS_EDUP);
    cr_assert_eq(g->n, 3);
    for (uint32_t i = 0; i < 3; i++) {
        cr_assert_eq(g->r[i].msg.op, PROTO_OP_ERROR);
        cr_assert_eq(g->r[i].msg.status, FLPS_EDUP);
        cr_assert_eq(g->r[i].msg.part, OWNED[i]);
    }
    take_snap(g, &after);
    cr_assert_eq(memcmp(&before, &after, sizeof(before)), 0, "no part moved");
    /* The other worker's push still closes all three exactly once. */
    clear_replies(g);
    cr_assert_eq(push_joined(g, 1, 0, 0), FLPS_OK);
    cr_assert_eq(g->n, 2);
    rig_free(g);
    ASSERT_NO_LEAKS();
}

Test(shard, a_push_of_several_parts_into_a_dense_job_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);

    rig_start(g);
    register_all(g);
    for (uint32_t i = 0; i < 3; i++)
        init_part(g, OWNED[i], OWNED_NUMEL[i]);
    clear_replies(g);
    cr_assert_eq(push_joined(g, 0, 0, 0), FLPS_EPROTO);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ERROR);
    rig_free(g);
}

/* ---- issue 12: the write-ahead log after a torn or corrupt record ---- */

static off_t wal_size(const rig *g)
{
    char ck[256], wl[256];
    struct stat st;

    ckpt_path_of(g, ck, wl);
    cr_assert_eq(stat(wl, &st), 0);
    return st.st_size;
}

Test(shard, a_torn_last_record_is_cut_so_later_acknowledged_updates_survive)
{
    rig *a = durable_rig(PROTO_AGG_GTOPK), *b = durable_rig(PROTO_AGG_GTOPK);
    uint64_t sa = 5, sb = 5, retry_seed;
    char ck[256], wl[256];
    snap x, y;
    off_t good;

    for (uint64_t it = 0; it < 3; it++) {
        iterate_all(a, it, &sa);
        iterate_all(b, it, &sb);
    }
    take_snap(b, &x);
    good = wal_size(b);
    /* b dies 30 bytes into writing iteration 3's first record: that
     * iteration was never acknowledged. */
    retry_seed = sb;
    iterate_all(b, 3, &sb);
    ps_shard_destroy(b->s);
    b->s = NULL;
    ckpt_path_of(b, ck, wl);
    cr_assert_eq(truncate(wl, good + 30), 0);
    cr_assert_eq(rig_create(b, 1, &b->s), FLPS_OK);
    take_snap(b, &y);
    assert_snap_eq(b, &x, &y);
    cr_assert_eq(wal_size(b), good,
                 "the torn record is cut off before anything is appended");

    /* The workers push iteration 3 again, and more: all acknowledged. */
    clear_replies(b);
    register_all(b);
    sb = retry_seed;
    for (uint64_t it = 3; it < 6; it++) {
        iterate_all(a, it, &sa);
        iterate_all(b, it, &sb);
    }
    crash_and_restore(b);
    /* Exactly the updates of a shard that never crashed: every
     * acknowledged one, none applied twice. */
    take_snap(a, &x);
    take_snap(b, &y);
    cr_assert_eq(y.iter[0], 6);
    assert_snap_eq(a, &x, &y);
    rig_free(a);
    rig_free(b);
}

Test(shard, a_corrupt_record_before_intact_ones_stops_the_restore)
{
    rig *g = durable_rig(PROTO_AGG_DENSE);
    uint64_t seed = 8;
    char ck[256], wl[256], want[600];
    unsigned char byte;
    snap s0, got;
    off_t at, size;
    ps_shard *s = NULL;
    int fd;

    cr_assert_eq(ps_shard_checkpoint(g->s), FLPS_OK);
    iterate_all(g, 0, &seed);
    take_snap(g, &s0);
    at = wal_size(g);
    iterate_all(g, 1, &seed); /* three records, one per part */
    size = wal_size(g);
    ps_shard_destroy(g->s);
    g->s = NULL;
    /* Corrupt a value of iteration 1's first record; two intact records
     * (acknowledged updates) follow it. */
    ckpt_path_of(g, ck, wl);
    fd = open(wl, O_RDWR);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pread(fd, &byte, 1, at + 40), 1);
    byte ^= 0x10;
    cr_assert_eq(pwrite(fd, &byte, 1, at + 40), 1);
    close(fd);

    test_log_begin();
    cr_assert_eq(rig_create(g, 1, &s), FLPS_EPROTO);
    flps_set_logger(NULL, NULL);
    cr_assert_null(s);
    snprintf(want, sizeof(want),
             "write-ahead log %s: corrupt record at byte offset %lld, "
             "followed by 2 intact records",
             wl, (long long)at);
    cr_assert_not_null(strstr(test_logged, want), "logged: %s", test_logged);
    cr_assert_eq(wal_size(g), size, "a refused restore changes nothing");

    /* The operator accepts the loss. */
    g->cut_corrupt = 1;
    test_log_begin();
    cr_assert_eq(rig_create(g, 1, &g->s), FLPS_OK);
    flps_set_logger(NULL, NULL);
    snprintf(want, sizeof(want),
             "cut the log at the corrupt record at byte offset %lld, "
             "dropping %lld bytes (2 intact records after it are lost)",
             (long long)at, (long long)(size - at));
    cr_assert_not_null(strstr(test_logged, want), "logged: %s", test_logged);
    take_snap(g, &got);
    assert_snap_eq(g, &s0, &got);
    cr_assert_eq(wal_size(g), at);
    rig_free(g);
}

/* The update a gtopk part answered with: its entries, version and rank 0's
 * rejected indices. */
typedef struct answered {
    uint32_t n, nrej;
    uint64_t iter, version;
    uint32_t idx[8], rej[8];
    float val[8];
} answered;

static void take_answer(const captured *c, answered *a)
{
    cr_assert_eq(c->msg.op, PROTO_OP_UPDATE);
    cr_assert_leq(c->msg.n, 8);
    cr_assert_leq(c->msg.nrej, 8);
    memset(a, 0, sizeof(*a));
    a->n = c->msg.n;
    a->nrej = c->msg.nrej;
    a->iter = c->msg.iter;
    a->version = c->msg.version;
    memcpy(a->idx, c->idx, (size_t)a->n * sizeof(*a->idx));
    memcpy(a->val, c->val, (size_t)a->n * sizeof(*a->val));
    if (a->nrej > 0)
        memcpy(a->rej, c->rej, (size_t)a->nrej * sizeof(*a->rej));
}

static void assert_same_answer(const answered *a, const answered *b,
                               const char *when)
{
    cr_assert_eq(a->n, b->n, "%s: %u entries, first answered %u", when, b->n,
                 a->n);
    cr_assert_eq(a->nrej, b->nrej, "%s", when);
    cr_assert_eq(a->iter, b->iter, "%s", when);
    cr_assert_eq(a->version, b->version, "%s", when);
    cr_assert_eq(memcmp(a->idx, b->idx, sizeof(a->idx)), 0, "%s", when);
    cr_assert_eq(memcmp(a->val, b->val, sizeof(a->val)), 0, "%s", when);
    cr_assert_eq(memcmp(a->rej, b->rej, sizeof(a->rej)), 0, "%s", when);
}

Test(shard, a_push_of_the_iteration_closed_last_gets_its_update_again)
{
    rig *g = rig_one_part(2, PROTO_AGG_GTOPK, 10, 0.2); /* k = 2 */
    const uint32_t i0[3] = {2, 4, 7}, i1[3] = {1, 4, 8};
    const float v0[3] = {3.0f, 0.5f, -1.0f}, v1[3] = {-2.0f, 0.5f, 1.0f};
    proto_msg ck = base_msg(PROTO_OP_CHECKPOINT, 0, 0, 0);
    answered first, again;
    snap before, after;

    rig_use_dir(g);
    rig_start(g);
    register_all(g);
    init_part(g, 0, 10);
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 1, 0, 0, i1, v1, 3), FLPS_OK);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 3), FLPS_OK);
    cr_assert_eq(g->n, 2);
    take_answer(g->r[0].msg.rank == 0 ? &g->r[0] : &g->r[1], &first);
    cr_assert_eq(first.nrej, 2, "k = 2 of 5 indices: rank 0 loses 2");
    take_snap(g, &before);

    /* Rank 0 sends its push again (its update was lost): the same update,
     * rejected indices included, and nothing applied twice. */
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 3), FLPS_OK);
    cr_assert_eq(g->n, 1);
    cr_assert_eq(g->r[0].peer, PEER(0));
    take_answer(&g->r[0], &again);
    assert_same_answer(&first, &again, "answered again");
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);

    /* The same after a crash that only the log survives... */
    crash_and_restore(g);
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 3), FLPS_OK);
    cr_assert_eq(g->n, 1);
    take_answer(&g->r[0], &again);
    assert_same_answer(&first, &again, "after a restore from the log");

    /* ...and after a checkpoint, which empties the log, and a crash. */
    clear_replies(g);
    cr_assert_eq(deliver(g, PEER(0), &ck), FLPS_OK);
    crash_and_restore(g);
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 0, 0, 0, i0, v0, 3), FLPS_OK);
    cr_assert_eq(g->n, 1);
    take_answer(&g->r[0], &again);
    assert_same_answer(&first, &again, "after a checkpoint and a restore");
    /* A second restore reads the update written back after the
     * checkpoint once, not twice. */
    crash_and_restore(g);
    take_snap(g, &after);
    assert_snap_eq(g, &before, &after);
    rig_free(g);
}

/* ---- updates that are not finite (issue 12, finding 1) ---- */

/* Every rank pushed an iteration whose update is refused: each got one
 * ERROR (FLPS_ENONFINITE), it was counted once per rank, and nothing
 * changed (values, versions, the open iteration). */
static void assert_iteration_refused(rig *g, const refusal_ctx *c, uint32_t W)
{
    const ps_shard_stats *st = ps_shard_stats_get(g->s);
    snap after;

    cr_assert_eq(g->n, c->nreplies + W, "one ERROR per rank, %zu replies",
                 g->n - c->nreplies);
    for (uint32_t r = 0; r < W; r++) {
        const captured *e = &g->r[c->nreplies + r];
        cr_assert_eq(e->msg.op, PROTO_OP_ERROR);
        cr_assert_eq(e->msg.status, FLPS_ENONFINITE);
        cr_assert_neq(strstr(e->msg.text, "Inf or NaN"), NULL, "%s",
                      e->msg.text);
        cr_assert_neq(strstr(e->msg.text, "nothing applied"), NULL, "%s",
                      e->msg.text);
    }
    for (int e = 0; e < FLPS_ERR_COUNT_; e++)
        cr_assert_eq(st->rejected[e],
                     c->rejected[e] + (e == FLPS_ENONFINITE ? W : 0),
                     "rejected[%s]", flps_errname((flps_err)e));
    take_snap(g, &after);
    assert_snap_eq(g, &c->before, &after);
}

/* Two ranks of 3e38 each: finite pushes whose sum is Inf. */
static void huge_dense_iteration(rig *g, uint32_t part, uint32_t numel,
                                 uint64_t iter, float v)
{
    float h[MAXNUMEL];

    for (uint32_t i = 0; i < numel; i++)
        h[i] = i == 1 ? v : 0.25f;
    cr_assert_eq(push_dense(g, 0, part, iter, h, numel), FLPS_OK);
    (void)push_dense(g, 1, part, iter, h, numel);
}

static void run_dense_overflow(int durable)
{
    rig *g =
        durable ? durable_rig(PROTO_AGG_DENSE) : rig_ready(2, PROTO_AGG_DENSE);
    const float ok[4] = {1, 2, 3, 4};
    refusal_ctx c;
    snap s;

    refusal_begin(g, &c);
    huge_dense_iteration(g, 0, 4, 0, 3e38f);
    assert_iteration_refused(g, &c, 2);
    if (durable) {
        /* Nothing reached the log either. */
        crash_and_restore(g);
        take_snap(g, &s);
        assert_snap_eq(g, &c.before, &s);
        register_all(g);
    }
    /* The iteration stayed open: the same ranks push it again. */
    clear_replies(g);
    cr_assert_eq(push_dense(g, 0, 0, 0, ok, 4), FLPS_OK);
    cr_assert_eq(push_dense(g, 1, 0, 0, ok, 4), FLPS_OK);
    cr_assert_eq(g->n, 2);
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_UPDATE);
    cr_assert_eq(g->r[0].msg.iter, 0);
    cr_assert_eq(g->r[0].msg.version, 2, "the refused close made no version");
    take_snap(g, &s);
    cr_assert_eq(s.iter[0], 1);
    cr_assert_eq(s.v[0][0], init_value(0, 0) + -(scale_of(g, 0) * 2.0f));
    rig_free(g);
}

Test(shard, a_dense_iteration_summing_to_inf_is_refused_to_every_rank)
{
    run_dense_overflow(0);
}

Test(shard, a_logged_dense_iteration_summing_to_inf_logs_nothing)
{
    run_dense_overflow(1);
}

Test(shard, a_dense_update_that_overflows_the_values_is_refused)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    refusal_ctx c;
    snap s;

    /* lr 10 over 2 workers: each iteration adds -(5 * 3.2e37) = -1.6e38
     * to value 1, a finite update, until the third would take the value
     * past -FLT_MAX. */
    g->cfg.lr = 10;
    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    huge_dense_iteration(g, 0, 4, 0, 1.6e37f);
    huge_dense_iteration(g, 0, 4, 1, 1.6e37f);
    take_snap(g, &s);
    cr_assert(isfinite(s.v[0][1]) && s.v[0][1] < -3e38f, "%g",
              (double)s.v[0][1]);
    clear_replies(g);
    refusal_begin(g, &c);
    huge_dense_iteration(g, 0, 4, 2, 1.6e37f);
    assert_iteration_refused(g, &c, 2);
    rig_free(g);
}

static void run_sparse_overflow(uint8_t agg)
{
    rig *g = rig_ready(2, agg);
    const uint32_t idx[2] = {1, 3};
    const float big[2] = {0.5f, 3e38f}, ok[2] = {0.5f, 1.0f};
    refusal_ctx c;
    snap s;

    refusal_begin(g, &c);
    cr_assert_eq(push_sparse(g, 0, 0, 0, idx, big, 2), FLPS_OK);
    cr_assert_eq(push_sparse(g, 1, 0, 0, idx, big, 2), FLPS_ENONFINITE);
    assert_iteration_refused(g, &c, 2);
    clear_replies(g);
    cr_assert_eq(push_sparse(g, 0, 0, 0, idx, ok, 2), FLPS_OK);
    cr_assert_eq(push_sparse(g, 1, 0, 0, idx, ok, 2), FLPS_OK);
    cr_assert_eq(g->n, 2);
    cr_assert_eq(g->r[1].msg.op, PROTO_OP_UPDATE);
    take_snap(g, &s);
    cr_assert_eq(s.iter[0], 1);
    cr_assert_eq(s.ver[0], 2);
    rig_free(g);
}

Test(shard, a_topk_iteration_summing_to_inf_is_refused_to_every_rank)
{
    run_sparse_overflow(PROTO_AGG_TOPK);
}

Test(shard, a_gtopk_iteration_summing_to_inf_is_refused_to_every_rank)
{
    run_sparse_overflow(PROTO_AGG_GTOPK);
}

Test(shard, a_dense_part_of_several_blocks_is_unchanged_when_a_late_block_fails)
{
    enum { N = 3 * 4096 + 17 };
    rig *g = rig_one_part(2, PROTO_AGG_DENSE, N, 1.0);
    float *v = calloc(N, sizeof(float)), *before = malloc(N * sizeof(float));
    const float *w;
    uint32_t n;
    uint64_t ver, iter;

    cr_assert(v != NULL && before != NULL);
    rig_start(g);
    register_all(g);
    for (uint32_t i = 0; i < N; i++)
        v[i] = (float)i * 0.001f;
    cr_assert_eq(send_init(g, 0, 0, v, N), FLPS_OK);
    memcpy(before, v, N * sizeof(float));
    for (uint32_t i = 0; i < N; i++)
        v[i] = 1.0f;
    v[N - 3] = 3e38f; /* in the last block: the first three pass the check */
    clear_replies(g);
    cr_assert_eq(push_dense(g, 0, 0, 0, v, N), FLPS_OK);
    cr_assert_eq(push_dense(g, 1, 0, 0, v, N), FLPS_ENONFINITE);
    cr_assert_eq(g->n, 2);
    cr_assert_eq(g->r[0].msg.status, FLPS_ENONFINITE);
    cr_assert_eq(ps_shard_part(g->s, 0, &w, &n, &ver, &iter), FLPS_OK);
    cr_assert_eq(memcmp(w, before, N * sizeof(float)), 0,
                 "an earlier block was applied");
    cr_assert_eq(ver, 1);
    cr_assert_eq(iter, 0);
    free(v);
    free(before);
    rig_free(g);
}

static void run_async_overflow(uint8_t agg)
{
    rig *g = rig_new(2, agg, PROTO_MODE_ASYNC);
    const uint32_t idx[2] = {0, 1};
    float d[4] = {0.5f, 3.2e37f, 0, 0};
    refusal_ctx c;

    g->cfg.lr = 10; /* -(5 * 3.2e37) = -1.6e38 per push */
    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    /* The third push overflows value 1. */
    for (uint64_t it = 0; it < 3; it++) {
        flps_err rc, want = it < 2 ? FLPS_OK : FLPS_ENONFINITE;
        if (it == 2)
            refusal_begin(g, &c);
        rc = agg == PROTO_AGG_DENSE ? push_dense(g, 0, 0, it, d, 4)
                                    : push_sparse(g, 0, 0, it, idx, d, 2);
        if (it < 2) {
            cr_assert_eq(rc, want);
            cr_assert_eq(last(g)->msg.op, PROTO_OP_ACK);
        } else {
            refusal_check(g, &c, rc, want, PEER(0), "Inf or NaN");
        }
    }
    /* The refused push did not count as rank 0's iteration 2. */
    d[1] = 1.0f;
    cr_assert_eq(agg == PROTO_AGG_DENSE ? push_dense(g, 0, 0, 2, d, 4)
                                        : push_sparse(g, 0, 0, 2, idx, d, 2),
                 FLPS_OK);
    rig_free(g);
}

Test(shard, an_async_dense_push_that_overflows_the_values_is_refused)
{
    run_async_overflow(PROTO_AGG_DENSE);
}

Test(shard, an_async_sparse_push_that_overflows_the_values_is_refused)
{
    run_async_overflow(PROTO_AGG_TOPK);
}

Test(shard, a_push_of_several_parts_refuses_only_the_part_summing_to_inf)
{
    rig *g = rig_ready(2, PROTO_AGG_TOPK);
    proto_seg segs[2] = {{0, 1, 0, 0}, {2, 1, 0, 0}};
    uint32_t idx[2] = {1, 0};
    float val[2] = {3e38f, 1.0f};
    snap before, after;

    take_snap(g, &before);
    clear_replies(g);
    for (uint32_t r = 0; r < 2; r++) {
        proto_msg m = base_msg(PROTO_OP_PUSH, r, 0, 0);
        m.codec = PROTO_CODEC_SPARSE;
        m.n = 2;
        m.idx = idx;
        m.val = val;
        m.nsegs = 2;
        m.segs = segs;
        (void)deliver(g, PEER(r), &m);
    }
    /* Part 0: an ERROR to each rank; part 2: its update to each. */
    cr_assert_eq(g->n, 4);
    for (size_t i = 0; i < 4; i++) {
        const captured *c = &g->r[i];
        if (c->msg.op == PROTO_OP_ERROR) {
            cr_assert_eq(c->msg.status, FLPS_ENONFINITE);
            cr_assert_eq(c->msg.part, 0);
        } else {
            cr_assert_eq(c->msg.op, PROTO_OP_UPDATE);
            cr_assert_eq(c->msg.part, 2);
        }
    }
    take_snap(g, &after);
    cr_assert_eq(memcmp(after.v[0], before.v[0], sizeof(before.v[0])), 0);
    cr_assert_eq(after.iter[0], 0);
    cr_assert_eq(after.iter[2], 1);
    cr_assert_eq(ps_shard_stats_get(g->s)->rejected[FLPS_ENONFINITE], 2);
    rig_free(g);
}

/* ---- sizes and memory (issue 12, finding 2) ---- */

Test(shard, a_register_larger_than_the_model_limit_is_refused_before_allocating)
{
    rig *g = rig_new(1, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    proto_tensor huge[1];
    refusal_ctx c;

    rig_start(g);
    strcpy(huge[0].name, "huge");
    huge[0].numel = UINT32_MAX;
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &g->cfg, huge, 1),
                  FLPS_ECONFIG, PEER(0),
                  "the model has 4294967295 elements, more than this "
                  "shard's limit of 2147483648 (flps --max-model-elements)");
    cr_assert_eq(ps_shard_num_owned(g->s), 0);
    /* The legitimate client is still served. */
    register_all(g);
    cr_assert_eq(ps_shard_num_owned(g->s), 3);
    rig_free(g);
}

Test(shard, the_model_limit_is_the_configured_one_and_inclusive)
{
    rig *g = rig_new(1, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    refusal_ctx c;

    g->max_elems = 19; /* the layout has 10 + 7 + 3 = 20 */
    rig_start(g);
    refusal_begin(g, &c);
    refusal_check(g, &c, send_register_cfg(g, 0, &g->cfg, g->t, g->nt),
                  FLPS_ECONFIG, PEER(0), "limit of 19");
    ps_shard_destroy(g->s);
    g->max_elems = 20;
    rig_start(g);
    register_all(g);
    rig_free(g);
}

Test(shard, pulls_before_init_wait_once_per_rank_and_part)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    proto_msg m = base_msg(PROTO_OP_PULL, 1, 0, 0);

    rig_start(g);
    register_all(g);
    clear_replies(g);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(deliver(g, PEER(1), &m), FLPS_OK);
    cr_assert_eq(g->n, 0, "nothing to answer before INIT");
    {
        const float v[4] = {1, 2, 3, 4};
        cr_assert_eq(send_init(g, 0, 0, v, 4), FLPS_OK);
    }
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_ACK);
    cr_assert_eq(g->n, 2, "the INIT's ACK and one PULL_REPLY, not 1000");
    cr_assert_eq(g->r[1].msg.op, PROTO_OP_PULL_REPLY);
    cr_assert_eq(g->r[1].peer, PEER(1));
    rig_free(g);
}

Test(shard, out_of_memory_while_closing_an_iteration_is_answered_and_survived)
{
    const uint32_t idx[2] = {1, 3};
    const float v[2] = {0.5f, -1.0f};

    for (unsigned long n = 1;; n++) {
        rig *g = rig_ready(2, PROTO_AGG_GTOPK);
        proto_msg m = base_msg(PROTO_OP_PUSH, 1, 0, 0);
        proto_frame f[PROTO_MAX_FRAMES];
        size_t nf, hlen, before_n;
        void *hdr = NULL;
        transport_rx *rx = NULL;
        snap before, after;
        flps_err rc;

        cr_assert_eq(push_sparse(g, 0, 0, 0, idx, v, 2), FLPS_OK);
        m.codec = PROTO_CODEC_SPARSE;
        m.n = 2;
        m.idx = idx;
        m.val = v;
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
        cr_assert_eq(transport_rx_copy(f, nf, PEER(1), &rx), FLPS_OK);
        free(hdr);
        take_snap(g, &before);
        clear_replies(g);
        flps_alloc_fail_at(n);
        rc = ps_shard_handle(g->s, rx);
        flps_alloc_fail_at(0);
        cr_assert_eq(ps_shard_is_broken(g->s), 0);
        if (rc == FLPS_OK) {
            cr_assert_eq(g->n, 2);
            cr_assert_eq(last(g)->msg.op, PROTO_OP_UPDATE);
            rig_free(g);
            ASSERT_NO_LEAKS();
            break;
        }
        cr_assert_eq(rc, FLPS_ENOMEM, "allocation %lu: %s", n,
                     flps_errname(rc));
        cr_assert_geq(g->n, 1, "allocation %lu: no answer", n);
        for (size_t i = 0; i < g->n; i++) {
            cr_assert_eq(g->r[i].msg.op, PROTO_OP_ERROR);
            cr_assert_eq(g->r[i].msg.status, FLPS_ENOMEM);
        }
        take_snap(g, &after);
        assert_snap_eq(g, &before, &after);
        /* The shard carries on: the iteration closes when pushed again
         * (rank 0's push may still be held). */
        before_n = g->n;
        rc = push_sparse(g, 0, 0, 0, idx, v, 2);
        cr_assert(rc == FLPS_OK || rc == FLPS_EDUP, "%s", flps_errname(rc));
        cr_assert_eq(push_sparse(g, 1, 0, 0, idx, v, 2), FLPS_OK);
        cr_assert_eq(last(g)->msg.op, PROTO_OP_UPDATE);
        cr_assert_gt(g->n, before_n);
        take_snap(g, &after);
        cr_assert_eq(after.iter[0], 1);
        rig_free(g);
        ASSERT_NO_LEAKS();
    }
}

/* ---- checkpoint requests (issue 12, finding 3) ---- */

Test(shard, a_checkpoint_request_from_a_peer_that_never_registered_is_refused)
{
    rig *g = durable_rig(PROTO_AGG_DENSE);
    proto_msg ck = base_msg(PROTO_OP_CHECKPOINT, 0, 0, 0);
    const uint64_t written = ps_shard_stats_get(g->s)->checkpoints;
    refusal_ctx c;

    refusal_begin(g, &c);
    refusal_check(g, &c, deliver(g, 999, &ck), FLPS_ESTATE, 999,
                  "only a registered worker of job 'job' may ask for a "
                  "checkpoint");
    cr_assert_eq(ps_shard_stats_get(g->s)->checkpoints, written,
                 "nothing written");
    /* The member is served. */
    cr_assert_eq(deliver(g, PEER(1), &ck), FLPS_OK);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ACK);
    cr_assert_str_eq(last(g)->msg.text, "checkpoint written");
    cr_assert_eq(ps_shard_stats_get(g->s)->checkpoints, written + 1);
    rig_free(g);
}

Test(shard, a_checkpoint_flood_writes_one_checkpoint_per_interval)
{
    rig *g = rig_new(2, PROTO_AGG_DENSE, PROTO_MODE_SSGD);
    proto_msg ck = base_msg(PROTO_OP_CHECKPOINT, 0, 0, 0);
    uint64_t written;

    g->ckpt_every = 0.5;
    rig_use_dir(g);
    rig_start(g);
    register_all(g);
    init_part(g, 0, 4);
    written = ps_shard_stats_get(g->s)->checkpoints;
    cr_assert_eq(deliver(g, PEER(0), &ck), FLPS_OK);
    cr_assert_str_eq(last(g)->msg.text, "checkpoint written");
    for (int i = 0; i < 400; i++) {
        clear_replies(g);
        cr_assert_eq(deliver(g, PEER(i % 2), &ck), FLPS_OK);
        cr_assert_eq(g->n, 1);
        cr_assert_eq(last(g)->msg.op, PROTO_OP_ACK);
        cr_assert_eq(last(g)->msg.status, 1);
        cr_assert_neq(
            strstr(last(g)->msg.text, "checkpoint done recently (at "), NULL,
            "%s", last(g)->msg.text);
        cr_assert_neq(strstr(last(g)->msg.text, "at most one per 0.5 s"), NULL,
                      "%s", last(g)->msg.text);
    }
    cr_assert_eq(ps_shard_stats_get(g->s)->checkpoints, written + 1,
                 "401 requests, one checkpoint");
    usleep(600 * 1000);
    cr_assert_eq(deliver(g, PEER(1), &ck), FLPS_OK);
    cr_assert_str_eq(last(g)->msg.text, "checkpoint written");
    cr_assert_eq(ps_shard_stats_get(g->s)->checkpoints, written + 2);
    rig_free(g);
}

Test(
    shard,
    a_restored_shard_serves_the_checkpoint_of_a_worker_that_did_not_register_again)
{
    rig *g = durable_rig(PROTO_AGG_DENSE);
    proto_msg ck = base_msg(PROTO_OP_CHECKPOINT, 1, 0, 0);
    refusal_ctx c;

    crash_and_restore(g);
    clear_replies(g);
    cr_assert_eq(deliver(g, PEER(1), &ck), FLPS_OK);
    cr_assert_str_eq(last(g)->msg.text, "checkpoint written");
    /* Rank 1 is held now: another peer speaking as rank 1 is a stranger. */
    refusal_begin(g, &c);
    refusal_check(g, &c, deliver(g, 999, &ck), FLPS_ESTATE, 999,
                  "register first");
    rig_free(g);
}

/* ---- what peers can make a shard hold (issue 12, finding 4) ---- */

Test(shard, a_peer_is_sent_one_copy_of_a_part_at_a_time)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    proto_msg m = base_msg(PROTO_OP_PULL, 1, 0, 0);

    g->hold = 1;
    clear_replies(g);
    /* 300 PULLs of one part from a peer that does not read. */
    cr_assert_eq(deliver(g, PEER(1), &m), FLPS_OK);
    for (int i = 0; i < 299; i++)
        cr_assert_eq(deliver(g, PEER(1), &m), FLPS_EDUP);
    cr_assert_eq(g->n, 1, "one PULL_REPLY, then nothing");
    cr_assert_eq(g->r[0].msg.op, PROTO_OP_PULL_REPLY);
    cr_assert_eq(g->nheld, 1, "one copy of the part in flight");
    cr_assert_eq(ps_shard_stats_get(g->s)->rejected[FLPS_EDUP], 299);
    cr_assert_eq(ps_shard_stats_get(g->s)->pulls, 1);
    /* The legitimate client is still served meanwhile. */
    m.rank = 0;
    cr_assert_eq(deliver(g, PEER(0), &m), FLPS_OK);
    cr_assert_eq(g->n, 2);
    cr_assert_eq(last(g)->peer, PEER(0));
    /* Once the copy is sent, the peer may pull the part again. */
    rig_sent(g);
    m.rank = 1;
    cr_assert_eq(deliver(g, PEER(1), &m), FLPS_OK);
    cr_assert_eq(g->n, 3);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_PULL_REPLY);
    rig_free(g);
}

static int warn_lines;

static void count_warnings(void *arg, flps_log_level level, const char *line)
{
    (void)arg;
    (void)line;
    if (level >= FLPS_LOG_WARN)
        warn_lines++;
}

Test(shard, refusals_are_logged_a_few_times_per_reason_then_counted)
{
    rig *g = rig_ready(2, PROTO_AGG_DENSE);
    proto_msg other = base_msg(PROTO_OP_PUSH, 0, 0, 0);
    const float v[4] = {1, 2, 3, 4};

    strcpy(other.job, "other");
    other.codec = PROTO_CODEC_DENSE;
    other.n = 4;
    other.val = v;
    clear_replies(g);
    warn_lines = 0;
    flps_set_logger(count_warnings, NULL);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(deliver(g, PEER(0), &other), FLPS_EJOB);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(push_dense(g, 0, 0, 5, v, 4), FLPS_EFUTURE);
    flps_set_logger(NULL, NULL);
    cr_assert_eq(warn_lines, 10, "5 lines per reason, not %d", warn_lines);
    cr_assert_eq(g->n, 2000, "every refusal is still answered");
    cr_assert_eq(ps_shard_stats_get(g->s)->rejected[FLPS_EJOB], 1000);
    cr_assert_eq(ps_shard_stats_get(g->s)->rejected[FLPS_EFUTURE], 1000);
    rig_free(g);
}

Test(shard, a_message_the_transport_refused_is_answered_and_counted)
{
    rig *g = rig_ready(1, PROTO_AGG_DENSE);

    clear_replies(g);
    ps_shard_refuse(g->s, 77, FLPS_EPROTO,
                    "message with more than 4 frames dropped");
    cr_assert_eq(g->n, 1);
    cr_assert_eq(last(g)->peer, 77);
    cr_assert_eq(last(g)->msg.op, PROTO_OP_ERROR);
    cr_assert_eq(last(g)->msg.status, FLPS_EPROTO);
    cr_assert_neq(strstr(last(g)->msg.text, "more than 4 frames"), NULL, "%s",
                  last(g)->msg.text);
    cr_assert_eq(ps_shard_stats_get(g->s)->rejected[FLPS_EPROTO], 1);
    rig_free(g);
}
