/* Tests for the client (worker/client*.c) over a fake transport: no
 * sockets, no shard processes (but for the metrics endpoint the last tests
 * start on loopback). The fake records every message the client
 * sends (decoded with proto/msg.h) and answers like a shard unless a test
 * scripts another reply, so each test checks exactly what went on the wire
 * and what the client did with the answers. */
#include "worker/client_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "compress/codec.h"
#include "proto/buf.h"
#include "proto/msg.h"
#include "proto/partmap.h"
#include "tests/fakes/fake_powercap.h"
#include "tests/fakes/nvml_stub_ctl.h"
#include "tests/support/rx_copy.h"
#include "worker/client_metrics.h"
#include "worker/client_req.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS()                                                      \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,                        \
                 "memory leaked (see the LeakSanitizer report)")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define JOB "job"
#define NSHARDS 2
#define NTENSORS 3
#define MAXNUMEL 10

/* ---- the fake network ---- */

/* One message the client sent: a copy of its frames and its decoding
 * (whose pointers point into the copy). */
typedef struct sent {
    uint32_t peer;
    transport_rx *rx;
    proto_msg msg;
} sent;

typedef struct fake_net fake_net;

/* A test's script: sees every message the client sends and returns 1 when
 * it handled it (answered with fake_reply, or dropped it), 0 to let the
 * fake shard answer as a real one would. */
typedef int (*fake_script)(fake_net *n, const sent *s);

struct fake_net {
    sent *log;
    size_t nlog, cap;
    transport_rx **queue; /* replies waiting for transport_recv */
    size_t qhead, qlen, qcap;
    fake_script script;
    int counter; /* for scripts */
    uint32_t npeers;
    int destroyed;        /* times the transport was destroyed */
    uint64_t resume_iter; /* what REGISTER_OK says */
    const partmap *pm;    /* the layout, for PULL_REPLY */
    size_t nsends;        /* messages the client sent (log: per part) */
    size_t njoined;       /* of them, pushes of several parts */
    /* Per shard: pushes the client sent, updates it took off the queue,
     * and the most pushes it had sent unanswered at once (the window). */
    uint32_t pushes_to[NSHARDS], updates_taken[NSHARDS],
        most_unanswered[NSHARDS];
};

typedef struct fake_transport {
    transport base;
    fake_net *net;
} fake_transport;

static fake_net *net_of(transport *t)
{
    return ((fake_transport *)t)->net;
}

/* Queue msg as a reply from peer, encoded exactly as a shard sends it. */
static void fake_reply(fake_net *n, uint32_t peer, const proto_msg *msg)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    transport_rx *rx = NULL;

    cr_assert_eq(proto_msg_encode(msg, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(transport_rx_copy(f, nf, peer, &rx), FLPS_OK);
    free(hdr);
    if (n->qlen == n->qcap) {
        n->qcap = n->qcap ? 2 * n->qcap : 16;
        n->queue = realloc(n->queue, n->qcap * sizeof(*n->queue));
        cr_assert_not_null(n->queue);
    }
    n->queue[n->qhead + n->qlen++] = rx;
}

static void reply_base(proto_msg *r, uint8_t op, const proto_msg *req)
{
    memset(r, 0, sizeof(*r));
    r->op = op;
    snprintf(r->job, sizeof(r->job), "%s", JOB);
    r->rank = req->rank;
    r->part = req->part;
    r->iter = req->iter;
}

/* What a shard answers when nothing is scripted: registration accepted,
 * init and checkpoint acknowledged, a pull answered with the fake model
 * (element j of part p of tensor t is 100 t + offset + j), a push answered
 * with an empty update. */
static void fake_shard_answer(fake_net *n, const sent *s)
{
    const proto_msg *q = &s->msg;
    float vals[64];
    proto_msg r;

    switch (q->op) {
    case PROTO_OP_REGISTER:
        reply_base(&r, PROTO_OP_REGISTER_OK, q);
        r.iter = n->resume_iter;
        break;
    case PROTO_OP_INIT:
    case PROTO_OP_CHECKPOINT:
        reply_base(&r, PROTO_OP_ACK, q);
        break;
    case PROTO_OP_PULL: {
        const partmap_part *p = &n->pm->parts[q->part];
        reply_base(&r, PROTO_OP_PULL_REPLY, q);
        cr_assert_leq(p->numel, 64);
        for (uint32_t j = 0; j < p->numel; j++)
            vals[j] = (float)(100 * p->tensor + p->offset + j);
        r.codec = PROTO_CODEC_DENSE;
        r.n = p->numel;
        r.val = vals;
        break;
    }
    case PROTO_OP_PUSH:
        reply_base(&r, PROTO_OP_UPDATE, q);
        if (q->codec == PROTO_CODEC_DENSE) {
            cr_assert_leq(q->n, 64);
            memset(vals, 0, sizeof(vals));
            r.codec = PROTO_CODEC_DENSE;
            r.n = q->n;
            r.val = vals;
        } else {
            r.codec = PROTO_CODEC_SPARSE;
        }
        break;
    default:
        cr_assert_fail("the client sent an unexpected %s",
                       proto_op_name(q->op));
        return;
    }
    fake_reply(n, s->peer, &r);
}

static flps_err fake_listen(transport *t, const char *endpoint, char *bound,
                            size_t boundlen)
{
    (void)t;
    (void)endpoint;
    (void)bound;
    (void)boundlen;
    return FLPS_EINVAL; /* a client never listens */
}

static flps_err fake_connect(transport *t, const char *endpoint, uint32_t *peer)
{
    fake_net *n = net_of(t);

    cr_assert_not_null(endpoint);
    *peer = n->npeers++;
    return FLPS_OK;
}

static void fake_take(fake_net *n, uint32_t peer, const proto_frame *pf,
                      size_t nframes);

/* A push of several parts is logged (and answered) as the one-part pushes
 * of its segments, as a real shard handles it: the tests look at parts. */
static flps_err fake_send(transport *t, uint32_t peer, const transport_frame *f,
                          size_t nframes)
{
    fake_net *n = net_of(t);
    proto_frame pf[PROTO_MAX_FRAMES + 1];
    char why[256] = "";
    proto_msg m;

    if (peer >= n->npeers)
        return FLPS_ECLOSED;
    cr_assert_leq(nframes, PROTO_MAX_FRAMES);
    for (size_t i = 0; i < nframes; i++) {
        pf[i].data = (const char *)proto_buf_data(f[i].buf) + f[i].off;
        pf[i].len = f[i].len;
        t->stats.bytes_sent += transport_zmtp_frame_bytes(f[i].len);
    }
    t->stats.msgs_sent++;
    n->nsends++;
    cr_assert_eq(proto_msg_decode(pf, nframes, &m, why, sizeof(why)), FLPS_OK,
                 "the client sent an invalid message: %s", why);
    if (m.nsegs == 0) {
        proto_msg_fini(&m);
        fake_take(n, peer, pf, nframes);
        return FLPS_OK;
    }
    cr_assert_eq(m.op, PROTO_OP_PUSH);
    n->njoined++;
    {
        size_t at = 0;
        for (uint32_t g = 0; g < m.nsegs; g++) {
            proto_msg v;
            proto_frame vf[PROTO_MAX_FRAMES];
            void *hdr = NULL;
            size_t hl, nf;
            proto_msg_seg_view(&m, g, at, 0, &v);
            at += v.n;
            cr_assert_eq(proto_msg_encode(&v, &hdr, &hl, vf, &nf), FLPS_OK);
            fake_take(n, peer, vf, nf);
            free(hdr);
        }
    }
    proto_msg_fini(&m);
    return FLPS_OK;
}

static void fake_take(fake_net *n, uint32_t peer, const proto_frame *pf,
                      size_t nframes)
{
    char why[256] = "";
    sent *s;

    if (n->nlog == n->cap) {
        n->cap = n->cap ? 2 * n->cap : 64;
        n->log = realloc(n->log, n->cap * sizeof(*n->log));
        cr_assert_not_null(n->log);
    }
    s = &n->log[n->nlog];
    memset(s, 0, sizeof(*s));
    s->peer = peer;
    cr_assert_eq(transport_rx_copy(pf, nframes, peer, &s->rx), FLPS_OK);
    cr_assert_eq(proto_msg_decode(s->rx->frames, s->rx->nframes, &s->msg, why,
                                  sizeof(why)),
                 FLPS_OK, "the client sent an invalid message: %s", why);
    n->nlog++;
    if (s->msg.op == PROTO_OP_PUSH && peer < NSHARDS) {
        uint32_t open = ++n->pushes_to[peer] - n->updates_taken[peer];
        if (open > n->most_unanswered[peer])
            n->most_unanswered[peer] = open;
    }
    if (n->script == NULL || !n->script(n, s))
        fake_shard_answer(n, s);
}

static flps_err fake_recv(transport *t, int timeout_ms, transport_rx **rx)
{
    fake_net *n = net_of(t);

    if (n->qlen == 0) {
        /* Let time pass a little, as a real wait would, so retry and
         * deadline clocks move without spinning hard. */
        struct timespec ts = {0, 1000000};
        if (timeout_ms != 0)
            nanosleep(&ts, NULL);
        return FLPS_ETIMEDOUT;
    }
    *rx = n->queue[n->qhead++];
    n->qlen--;
    if (n->qlen == 0)
        n->qhead = 0;
    {
        proto_msg m;
        if ((*rx)->peer < NSHARDS &&
            proto_msg_decode((*rx)->frames, (*rx)->nframes, &m, NULL, 0) ==
                FLPS_OK) {
            n->updates_taken[(*rx)->peer] += m.op == PROTO_OP_UPDATE;
            proto_msg_fini(&m);
        }
    }
    t->stats.bytes_recv += (*rx)->wire_bytes;
    t->stats.msgs_recv++;
    return FLPS_OK;
}

static void fake_destroy(transport *t)
{
    net_of(t)->destroyed++;
    free(t);
}

static const transport_vtable fake_vt = {
    .name = "fake",
    .listen = fake_listen,
    .connect = fake_connect,
    .send = fake_send,
    .recv = fake_recv,
    .destroy = fake_destroy,
};

static transport *fake_transport_new(fake_net *n)
{
    fake_transport *ft = calloc(1, sizeof(*ft));

    cr_assert_not_null(ft);
    ft->base.vt = &fake_vt;
    ft->net = n;
    return &ft->base;
}

/* The index of the first message at or after `from` of op for part (any
 * part when part is UINT32_MAX), or SIZE_MAX. */
static size_t find_sent(const fake_net *n, size_t from, uint8_t op,
                        uint32_t part)
{
    for (size_t i = from; i < n->nlog; i++)
        if (n->log[i].msg.op == op &&
            (part == UINT32_MAX || n->log[i].msg.part == part))
            return i;
    return SIZE_MAX;
}

static size_t count_sent(const fake_net *n, size_t from, uint8_t op)
{
    size_t k = 0;

    for (size_t i = from; i < n->nlog; i++)
        k += n->log[i].msg.op == op;
    return k;
}

/* ---- the rig: a client over the fake, with a three-tensor model ---- */

/* Tensors of 10, 7 and 3 elements in parts of 4 over 2 shards (the layout
 * of tests/proto/test_partmap.c): p0 = w0[0,4) on shard 0, p1 = w0[4,8) on
 * 1, p2 = w0[8,10) on 0, p3 = w1[0,4) on 0, p4 = w1[4,7) on 1, p5 = w2 on
 * 1. The tests take the map from partmap_build and check this against it
 * where it matters. */
static const uint64_t NUMEL[NTENSORS] = {10, 7, 3};
static const char *const NAMES[NTENSORS] = {"w0", "w1", "w2"};

typedef struct rig {
    fake_net net;
    transport *t; /* ours until the client takes it */
    float w[NTENSORS][MAXNUMEL];
    flps_tensor tensors[NTENSORS];
    const char *servers[NSHARDS];
    flps_client_config cfg;
    flps_client *c;
    partmap pm;
} rig;

static rig *rig_new(const char *compression)
{
    rig *g = calloc(1, sizeof(*g));

    cr_assert_not_null(g);
    for (uint32_t i = 0; i < NTENSORS; i++) {
        g->tensors[i].name = NAMES[i];
        g->tensors[i].numel = NUMEL[i];
        g->tensors[i].data = g->w[i];
    }
    g->servers[0] = "tcp://fake-0:1";
    g->servers[1] = "tcp://fake-1:1";
    cr_assert_eq(flps_client_config_init(&g->cfg), FLPS_OK);
    g->cfg.job = JOB;
    g->cfg.rank = 0;
    g->cfg.workers = 1;
    g->cfg.servers = g->servers;
    g->cfg.nservers = NSHARDS;
    g->cfg.tensors = g->tensors;
    g->cfg.ntensors = NTENSORS;
    g->cfg.part_size = 4;
    g->cfg.compression = compression;
    g->cfg.lr = 0.1;
    g->cfg.iterations = 10;
    g->cfg.momentum = 0;
    g->cfg.retry_ms = 60000; /* no resends unless a test asks for them */
    g->cfg.deadline_ms = 60000;
    /* Dense values summed element by element: the even map, with the
     * part size as its piece (no CURVE: PARTMAP_CLEAR_PIECE, above 4);
     * other codecs: parts placed largest first. */
    if (strcmp(compression, "dense") == 0 || strcmp(compression, "fp16") == 0)
        cr_assert_eq(partmap_build_even(NUMEL, NTENSORS, NSHARDS, 4, &g->pm),
                     FLPS_OK);
    else
        cr_assert_eq(partmap_build(NUMEL, NTENSORS, NSHARDS, 4, &g->pm),
                     FLPS_OK);
    g->net.pm = &g->pm;
    g->t = fake_transport_new(&g->net);
    return g;
}

static flps_err rig_create(rig *g)
{
    flps_err rc = flps_client_create_on(&g->cfg, g->t, &g->c);

    if (rc == FLPS_OK)
        g->t = NULL; /* the client owns it now */
    return rc;
}

static void rig_start(rig *g)
{
    cr_assert_eq(rig_create(g), FLPS_OK);
    cr_assert_eq(flps_client_init(g->c), FLPS_OK);
}

static void rig_free(rig *g)
{
    int owned_by_client = g->c != NULL;

    flps_client_destroy(g->c);
    transport_destroy(g->t);
    cr_assert_eq(g->net.destroyed, 1, "the transport is destroyed once, by %s",
                 owned_by_client ? "the client" : "its caller");
    for (size_t i = 0; i < g->net.nlog; i++) {
        proto_msg_fini(&g->net.log[i].msg);
        transport_rx_release(g->net.log[i].rx);
    }
    for (size_t i = 0; i < g->net.qlen; i++)
        transport_rx_release(g->net.queue[g->net.qhead + i]);
    free(g->net.log);
    free(g->net.queue);
    partmap_fini(&g->pm);
    free(g);
    ASSERT_NO_LEAKS();
}

/* A gradient of tensor 0 whose top 5 (density 0.5 of 10) are unambiguous:
 * big values at 1, 3, 5, 8 and 9, small distinct ones elsewhere. */
static const float G0[MAXNUMEL] = {0.1f, 10.0f, 0.2f, -9.0f, 0.3f,
                                   8.0f, 0.4f,  0.5f, 7.0f,  -6.0f};

static const float ZERO[MAXNUMEL];

static void push_all(rig *g, const float *g0, uint64_t iter)
{
    cr_assert_eq(flps_client_push(g->c, 0, g0, iter), FLPS_OK);
    cr_assert_eq(flps_client_push(g->c, 1, ZERO, iter), FLPS_OK);
    cr_assert_eq(flps_client_push(g->c, 2, ZERO, iter), FLPS_OK);
}

/* ---- a logger that keeps the lines ---- */

typedef struct logbuf {
    char text[4096];
} logbuf;

static void keep_line(void *arg, flps_log_level level, const char *line)
{
    logbuf *b = arg;
    size_t len = strlen(b->text);

    (void)level;
    snprintf(b->text + len, sizeof(b->text) - len, "%s\n", line);
}

/* ---- registration ---- */

Test(client, registration_goes_to_every_shard_with_the_layout_and_settings)
{
    rig *g = rig_new("topk:0.5");

    g->cfg.workers = 3;
    g->cfg.rank = 2;
    g->net.resume_iter = 7;
    cr_assert_eq(rig_create(g), FLPS_OK);
    cr_assert_eq(g->net.nlog, NSHARDS, "one REGISTER per shard, nothing else");
    for (uint32_t s = 0; s < NSHARDS; s++) {
        const proto_msg *m = &g->net.log[s].msg;
        cr_assert_eq(g->net.log[s].peer, s);
        cr_assert_eq(m->op, PROTO_OP_REGISTER);
        cr_assert_str_eq(m->job, JOB);
        cr_assert_eq(m->rank, 2);
        cr_assert_eq(m->cfg.shard, s, "each shard is told which one it is");
        cr_assert_eq(m->cfg.nshards, NSHARDS);
        cr_assert_eq(m->cfg.workers, 3);
        cr_assert_eq(m->cfg.part_size, 4);
        cr_assert_eq(m->cfg.mode, PROTO_MODE_SSGD);
        cr_assert_eq(m->cfg.agg, PROTO_AGG_TOPK);
        cr_assert_float_eq(m->cfg.density, 0.5, 1e-12);
        cr_assert_float_eq(m->cfg.lr, 0.1, 1e-12);
        cr_assert_eq(m->cfg.iterations, 10);
        cr_assert_str_eq(m->cfg.compression, "topk:0.5");
        cr_assert_eq(m->ntensors, NTENSORS);
        for (uint32_t i = 0; i < NTENSORS; i++) {
            cr_assert_str_eq(m->tensors[i].name, NAMES[i]);
            cr_assert_eq(m->tensors[i].numel, NUMEL[i]);
        }
    }
    cr_assert_eq(flps_client_resume_iteration(g->c), 7,
                 "the resume iteration comes from REGISTER_OK");
    cr_assert_str_eq(flps_client_last_error(g->c), "");
    rig_free(g);
}

/* Shard 1 refuses the registration, shard 0 accepts it. */
static int refuse_on_shard_1(fake_net *n, const sent *s)
{
    proto_msg r;

    if (s->msg.op != PROTO_OP_REGISTER || s->peer != 1)
        return 0;
    reply_base(&r, PROTO_OP_ERROR, &s->msg);
    r.status = FLPS_ELAYOUT;
    snprintf(r.text, sizeof(r.text), "tensor w1 has 8 elements here");
    fake_reply(n, s->peer, &r);
    return 1;
}

Test(client, a_shards_refusal_fails_create_with_its_reason)
{
    rig *g = rig_new("topk:0.5");
    logbuf lb = {""};

    g->net.script = refuse_on_shard_1;
    flps_set_logger(keep_line, &lb);
    cr_assert_eq(rig_create(g), FLPS_ELAYOUT,
                 "create returns the code the shard refused with");
    flps_set_logger(NULL, NULL);
    cr_assert_null(g->c, "*out is written only on success");
    cr_assert_eq(g->net.destroyed, 0,
                 "on error the caller keeps the transport");
    cr_assert_not_null(strstr(lb.text, "tensor w1 has 8 elements here"),
                       "the shard's reason is logged: %s", lb.text);
    cr_assert_not_null(strstr(lb.text, "refused the registration"), "%s",
                       lb.text);
    rig_free(g);
}

Test(client, a_bad_configuration_is_refused_before_anything_is_sent)
{
    rig *g = rig_new("topk:0.5");

    g->cfg.lr = 0;
    cr_assert_eq(rig_create(g), FLPS_EINVAL);
    g->cfg.lr = 0.1;
    g->cfg.rank = 1; /* of 1 worker */
    cr_assert_eq(rig_create(g), FLPS_EINVAL);
    g->cfg.rank = 0;
    g->cfg.compression = "zip:9";
    cr_assert_eq(rig_create(g), FLPS_ECONFIG);
    cr_assert_eq(g->net.nlog, 0);
    cr_assert_eq(g->net.destroyed, 0);
    cr_assert_eq(flps_client_create_on(&g->cfg, NULL, &g->c), FLPS_EINVAL);
    rig_free(g);
}

/* ---- pushes split by part ---- */

Test(client, a_dense_push_is_split_into_parts_sent_to_their_owners)
{
    rig *g = rig_new("dense");
    float grad[MAXNUMEL];
    size_t mark;
    uint32_t first = g->pm.first_part[0], last = g->pm.first_part[1];

    /* The hand computation of the even map agrees with partmap.h: of the
     * 20 elements, shard 0 owns the first 10 (all of w0), cut in the
     * fewest pieces of at most 4, within one of each other: 4, 3, 3. */
    cr_assert_eq(last - first, 3, "10 elements in pieces of 4 are 3 parts");
    cr_assert_eq(g->pm.parts[first].shard, 0);
    cr_assert_eq(g->pm.parts[first + 1].shard, 0);
    cr_assert_eq(g->pm.parts[first + 2].shard, 0);
    cr_assert_eq(g->pm.parts[first].numel, 4);
    cr_assert_eq(g->pm.parts[first + 1].numel, 3);
    cr_assert_eq(g->pm.parts[first + 2].numel, 3);
    cr_assert_eq(g->pm.parts[g->pm.first_part[1]].shard, 1);

    rig_start(g);
    for (uint32_t i = 0; i < MAXNUMEL; i++)
        grad[i] = (float)i + 1.0f;
    mark = g->net.nlog;
    cr_assert_eq(flps_client_push(g->c, 0, grad, 0), FLPS_OK);
    cr_assert_eq(g->net.nlog - mark, 3, "one push per part of the tensor");
    for (uint32_t pi = first; pi < last; pi++) {
        const partmap_part *pp = &g->pm.parts[pi];
        size_t k = find_sent(&g->net, mark, PROTO_OP_PUSH, pi);
        const proto_msg *m;
        cr_assert_neq(k, SIZE_MAX, "part %u was pushed", pi);
        m = &g->net.log[k].msg;
        cr_assert_eq(g->net.log[k].peer, pp->shard, "part %u goes to shard %u",
                     pi, pp->shard);
        cr_assert_eq(m->iter, 0);
        cr_assert_eq(m->codec, PROTO_CODEC_DENSE);
        cr_assert_eq(m->n, pp->numel);
        for (uint32_t j = 0; j < m->n; j++)
            cr_assert_eq(m->val[j], grad[pp->offset + j]);
    }
    cr_assert_eq(flps_client_push(g->c, 1, grad, 0), FLPS_OK);
    cr_assert_eq(flps_client_push(g->c, 2, grad, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    rig_free(g);
}

Test(client, a_sparse_selection_is_split_by_part_with_part_relative_indices)
{
    rig *g = rig_new("topk:0.5");
    static const uint32_t want_idx[3][2] = {{1, 3}, {1, 0}, {0, 1}};
    static const float want_val[3][2] = {{10, -9}, {8, 0}, {7, -6}};
    static const uint32_t want_n[3] = {2, 1, 2};
    float g1[MAXNUMEL] = {5, -4, 3, 0.1f, 0.2f, 0.3f, 0.01f};
    uint32_t first = g->pm.first_part[0];
    size_t mark;

    rig_start(g);
    mark = g->net.nlog;
    cr_assert_eq(flps_client_push(g->c, 0, G0, 0), FLPS_OK);
    for (uint32_t q = 0; q < 3; q++) {
        size_t k = find_sent(&g->net, mark, PROTO_OP_PUSH, first + q);
        const proto_msg *m;
        cr_assert_neq(k, SIZE_MAX);
        m = &g->net.log[k].msg;
        cr_assert_eq(g->net.log[k].peer, g->pm.parts[first + q].shard);
        cr_assert_eq(m->codec, PROTO_CODEC_SPARSE);
        cr_assert_eq(m->n, want_n[q], "part %u carries %u pairs", first + q,
                     want_n[q]);
        for (uint32_t j = 0; j < m->n; j++) {
            cr_assert_eq(m->idx[j], want_idx[q][j]);
            cr_assert_eq(m->val[j], want_val[q][j]);
        }
    }
    /* w1's top 3 all lie in its first part: its second part still gets a
     * push, of no pairs, so the shard hears from every worker. */
    mark = g->net.nlog;
    cr_assert_eq(flps_client_push(g->c, 1, g1, 0), FLPS_OK);
    cr_assert_eq(g->net.nlog - mark, 2);
    cr_assert_eq(g->net.log[mark].msg.part, g->pm.first_part[1]);
    cr_assert_eq(g->net.log[mark].msg.n, 3);
    cr_assert_eq(g->net.log[mark + 1].msg.part, g->pm.first_part[1] + 1);
    cr_assert_eq(g->net.log[mark + 1].peer,
                 g->pm.parts[g->pm.first_part[1] + 1].shard);
    cr_assert_eq(g->net.log[mark + 1].msg.n, 0);
    cr_assert_eq(flps_client_push(g->c, 2, ZERO, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    rig_free(g);
}

/* ---- updates ---- */

/* The update of part 1 (w0[4,8)) moves two of its elements. */
static int update_part_1(fake_net *n, const sent *s)
{
    static const uint32_t idx[] = {0, 3};
    static const float val[] = {-0.5f, 0.25f};
    proto_msg r;

    if (s->msg.op != PROTO_OP_PUSH || s->msg.part != 1)
        return 0;
    reply_base(&r, PROTO_OP_UPDATE, &s->msg);
    r.codec = PROTO_CODEC_SPARSE;
    r.n = 2;
    r.idx = idx;
    r.val = val;
    fake_reply(n, s->peer, &r);
    return 1;
}

Test(client, a_replys_sparse_update_is_added_into_the_replica)
{
    rig *g = rig_new("topk:0.5");

    rig_start(g);
    /* init pulled the fake model into the replica. */
    for (uint32_t t = 0; t < NTENSORS; t++)
        for (uint32_t j = 0; j < NUMEL[t]; j++)
            cr_assert_eq(g->w[t][j], (float)(100 * t + j), "w%u[%u] after init",
                         t, j);
    g->net.script = update_part_1;
    push_all(g, G0, 0);
    cr_assert_eq(g->w[0][4], 4.0f, "nothing changes before the wait");
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    for (uint32_t j = 0; j < MAXNUMEL; j++) {
        float want = (float)j;
        if (j == 4)
            want -= 0.5f;
        if (j == 7)
            want += 0.25f;
        cr_assert_eq(g->w[0][j], want, "w0[%u] = %g, want %g", j, g->w[0][j],
                     want);
    }
    for (uint32_t j = 0; j < NUMEL[1]; j++)
        cr_assert_eq(g->w[1][j], (float)(100 + j),
                     "an empty update is a no-op");
    rig_free(g);
}

/* gtopk: the shard takes part of what was pushed and returns the rest:
 * in part 0 (w0[0,4), sent 1 and 3) it takes 1 and rejects 3; in part 2
 * (w0[8,10), sent 0 and 1) it takes 0 and rejects 1; part 1 is taken
 * whole. */
static int gtopk_reject(fake_net *n, const sent *s)
{
    static const uint32_t take[] = {1, 0};
    static const float upd[] = {-1.0f, -0.7f};
    static const uint32_t rej0[] = {3};
    static const uint32_t rej2[] = {1};
    proto_msg r;

    if (s->msg.op != PROTO_OP_PUSH || s->msg.iter != 0 ||
        (s->msg.part != 0 && s->msg.part != 2))
        return 0;
    reply_base(&r, PROTO_OP_UPDATE, &s->msg);
    r.codec = PROTO_CODEC_SPARSE;
    r.n = 1;
    r.idx = s->msg.part == 0 ? &take[0] : &take[1];
    r.val = s->msg.part == 0 ? &upd[0] : &upd[1];
    r.nrej = 1;
    r.rej = s->msg.part == 0 ? rej0 : rej2;
    fake_reply(n, s->peer, &r);
    return 1;
}

static int pair_of(const proto_msg *m, uint32_t idx, float *val)
{
    for (uint32_t j = 0; j < m->n; j++)
        if (m->idx[j] == idx) {
            *val = m->val[j];
            return 1;
        }
    return 0;
}

Test(client, gtopk_rejected_values_go_back_into_the_residual)
{
    rig *g = rig_new("gtopk:0.5");
    size_t mark, k0, k1, k2;
    float v;

    rig_start(g);
    g->net.script = gtopk_reject;
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_eq(g->w[0][1], 1.0f - 1.0f, "the taken part is applied");
    cr_assert_eq(g->w[0][8], 8.0f - 0.7f);

    /* A zero gradient: all iteration 1 sends is the residual, where the
     * rejected values (w0[3] = -9, w0[9] = -6) now lead. */
    mark = g->net.nlog;
    push_all(g, ZERO, 1);
    k0 = find_sent(&g->net, mark, PROTO_OP_PUSH, 0);
    k1 = find_sent(&g->net, mark, PROTO_OP_PUSH, 1);
    k2 = find_sent(&g->net, mark, PROTO_OP_PUSH, 2);
    cr_assert(k0 != SIZE_MAX && k1 != SIZE_MAX && k2 != SIZE_MAX);
    cr_assert(pair_of(&g->net.log[k0].msg, 3, &v),
              "the rejected w0[3] is pushed again");
    cr_assert_eq(v, -9.0f, "with its value as first sent");
    cr_assert(pair_of(&g->net.log[k2].msg, 1, &v),
              "the rejected w0[9] is pushed again");
    cr_assert_eq(v, -6.0f);
    cr_assert_not(pair_of(&g->net.log[k0].msg, 1, &v),
                  "what the shard took is not sent twice");
    cr_assert_not(pair_of(&g->net.log[k1].msg, 1, &v));
    cr_assert_not(pair_of(&g->net.log[k2].msg, 0, &v));
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    rig_free(g);
}

/* ---- resend ---- */

/* The first push of part 1 is lost; later ones are answered. */
static int lose_first_push_of_part_1(fake_net *n, const sent *s)
{
    if (s->msg.op != PROTO_OP_PUSH || s->msg.part != 1)
        return 0;
    return n->counter++ == 0;
}

Test(client, an_unanswered_push_is_sent_again_unchanged)
{
    rig *g = rig_new("topk:0.5");
    flps_client_stats st;
    const transport_rx *a, *b;
    size_t mark, k1, k2;

    g->cfg.retry_ms = 30;
    g->cfg.deadline_ms = 10000;
    rig_start(g);
    g->net.script = lose_first_push_of_part_1;
    mark = g->net.nlog;
    flps_set_logger(keep_line, &(logbuf){""}); /* keep the warning quiet */
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    flps_set_logger(NULL, NULL);
    k1 = find_sent(&g->net, mark, PROTO_OP_PUSH, 1);
    cr_assert_neq(k1, SIZE_MAX);
    k2 = find_sent(&g->net, k1 + 1, PROTO_OP_PUSH, 1);
    cr_assert_neq(k2, SIZE_MAX, "the lost push was sent again");
    cr_assert_eq(find_sent(&g->net, k2 + 1, PROTO_OP_PUSH, 1), SIZE_MAX,
                 "and only once, as it was answered");
    a = g->net.log[k1].rx;
    b = g->net.log[k2].rx;
    cr_assert_eq(a->nframes, b->nframes);
    for (size_t f = 0; f < a->nframes; f++) {
        cr_assert_eq(a->frames[f].len, b->frames[f].len);
        cr_assert_eq(
            memcmp(a->frames[f].data, b->frames[f].data, a->frames[f].len), 0,
            "frame %zu of the resend is the same bytes", f);
    }
    flps_client_get_stats(g->c, &st);
    cr_assert_eq(st.resends, 1);
    /* Six parts in five messages: w0's parts 0 and 2 (both on shard 0)
     * travel together. */
    cr_assert_eq(st.pushes, 5, "pushes count messages, first sends only");
    cr_assert_eq(count_sent(&g->net, mark, PROTO_OP_PUSH), 7);
    rig_free(g);
}

/* ---- sticky and non-sticky errors ---- */

static int drop_pushes(fake_net *n, const sent *s)
{
    (void)n;
    return s->msg.op == PROTO_OP_PUSH;
}

/* Every call on a broken client fails at once with code, sending
 * nothing, and the message stays. */
static void assert_sticky(rig *g, flps_err code)
{
    char before[512];
    size_t mark = g->net.nlog;
    double alpha, beta;

    snprintf(before, sizeof(before), "%s", flps_client_last_error(g->c));
    cr_assert_neq(before[0], '\0', "a sticky error has a message");
    cr_assert_eq(flps_client_push(g->c, 0, G0, 1), code);
    cr_assert_eq(flps_client_wait(g->c, 0), code);
    cr_assert_eq(flps_client_pull(g->c), code);
    cr_assert_eq(flps_client_init(g->c), code);
    cr_assert_eq(flps_client_checkpoint(g->c), code);
    cr_assert_eq(flps_client_measure_network(g->c, &alpha, &beta), code);
    cr_assert_eq(flps_client_set_layer_codec(g->c, 0, "dense"), code);
    cr_assert_eq(g->net.nlog, mark, "a broken client sends nothing");
    cr_assert_str_eq(flps_client_last_error(g->c), before,
                     "the first cause is kept");
}

/* Start g with a deadline of 150 ms, push every tensor to shards that
 * answer no push, and see the wait time out naming it; the log in lb. */
static void push_into_silence(rig *g, logbuf *lb)
{
    g->cfg.retry_ms = 20;
    g->cfg.deadline_ms = 150;
    rig_start(g);
    g->net.script = drop_pushes;
    flps_set_logger(keep_line, lb);
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_ETIMEDOUT);
    flps_set_logger(NULL, NULL);
    cr_assert_not_null(strstr(flps_client_last_error(g->c), "did not answer"),
                       "%s", flps_client_last_error(g->c));
}

Test(client, a_push_nobody_answers_times_out_and_the_error_sticks)
{
    rig *g = rig_new("topk:0.5");
    logbuf lb = {""};

    push_into_silence(g, &lb);
    cr_assert_not_null(strstr(lb.text, "sending again"),
                       "resends are logged: %s", lb.text);
    assert_sticky(g, FLPS_ETIMEDOUT);
    rig_free(g);
}

/* The dense update of part 1 carries a NaN. */
static int nan_update_part_1(fake_net *n, const sent *s)
{
    float val[64];
    proto_msg r;

    if (s->msg.op != PROTO_OP_PUSH || s->msg.part != 1)
        return 0;
    cr_assert_leq(s->msg.n, 64);
    memset(val, 0, sizeof(val));
    val[s->msg.n - 1] = NAN;
    reply_base(&r, PROTO_OP_UPDATE, &s->msg);
    r.codec = PROTO_CODEC_DENSE;
    r.n = s->msg.n;
    r.val = val;
    fake_reply(n, s->peer, &r);
    return 1;
}

/* A dense update's values are checked as they are applied (the decode
 * leaves them to that pass): a NaN from a shard is a protocol violation
 * that names the shard and part and sticks. */
Test(client, a_non_finite_dense_update_ends_the_client)
{
    rig *g = rig_new("dense");

    rig_start(g);
    g->net.script = nan_update_part_1;
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_EPROTO);
    cr_assert_not_null(strstr(flps_client_last_error(g->c), "NaN or Inf"), "%s",
                       flps_client_last_error(g->c));
    cr_assert_not_null(strstr(flps_client_last_error(g->c), "part 1"), "%s",
                       flps_client_last_error(g->c));
    assert_sticky(g, FLPS_EPROTO);
    rig_free(g);
}

/* Shard 0 refuses the push of part 2 as if it served another job. */
static int refuse_part_2(fake_net *n, const sent *s)
{
    proto_msg r;

    if (s->msg.op != PROTO_OP_PUSH || s->msg.part != 2)
        return 0;
    reply_base(&r, PROTO_OP_ERROR, &s->msg);
    r.status = FLPS_EJOB;
    snprintf(r.text, sizeof(r.text), "this shard serves job other");
    fake_reply(n, s->peer, &r);
    return 1;
}

Test(client, a_refused_push_makes_every_later_call_fail_with_its_reason)
{
    rig *g = rig_new("topk:0.5");

    rig_start(g);
    g->net.script = refuse_part_2;
    flps_set_logger(keep_line, &(logbuf){""});
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_EJOB);
    flps_set_logger(NULL, NULL);
    cr_assert_not_null(
        strstr(flps_client_last_error(g->c), "this shard serves job other"),
        "%s", flps_client_last_error(g->c));
    assert_sticky(g, FLPS_EJOB);
    rig_free(g);
}

Test(client, bad_arguments_and_non_finite_gradients_are_not_sticky)
{
    rig *g = rig_new("topk:0.5");
    float bad[MAXNUMEL];
    double alpha = -1;
    size_t mark, k;

    g->cfg.momentum = 0.9;
    rig_start(g);
    for (uint32_t j = 0; j < MAXNUMEL; j++)
        bad[j] = 5.0f * G0[j];
    bad[MAXNUMEL - 1] = NAN;
    mark = g->net.nlog;
    cr_assert_eq(flps_client_push(g->c, NTENSORS, G0, 0), FLPS_EINVAL);
    cr_assert_eq(flps_client_push(g->c, 0, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(flps_client_push(g->c, 0, bad, 0), FLPS_ENONFINITE);
    bad[MAXNUMEL - 1] = INFINITY;
    cr_assert_eq(flps_client_push(g->c, 0, bad, 0), FLPS_ENONFINITE);
    cr_assert_eq(flps_client_measure_network(g->c, &alpha, NULL), FLPS_EINVAL);
    cr_assert_eq(alpha, -1, "outputs are written only on success");
    cr_assert_eq(flps_client_set_layer_codec(g->c, 0, "dense"), FLPS_ESTATE,
                 "only auto jobs change codecs");
    cr_assert_eq(g->net.nlog, mark, "nothing was sent");
    cr_assert_str_eq(flps_client_last_error(g->c), "");

    /* The client carries on, and the refused gradient moved no velocity
     * or residual: the first real push sends exactly G0's top 5. */
    push_all(g, G0, 0);
    k = find_sent(&g->net, mark, PROTO_OP_PUSH, 0);
    cr_assert_neq(k, SIZE_MAX);
    cr_assert_eq(g->net.log[k].msg.n, 2);
    cr_assert_eq(g->net.log[k].msg.val[0], 10.0f);
    cr_assert_eq(g->net.log[k].msg.val[1], -9.0f);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_str_eq(flps_client_last_error(g->c), "");
    rig_free(g);
}

Test(client, pushing_a_tensor_again_before_its_update_is_a_sticky_state_error)
{
    rig *g = rig_new("topk:0.5");

    rig_start(g);
    g->net.script = drop_pushes;
    cr_assert_eq(flps_client_push(g->c, 0, G0, 0), FLPS_OK);
    cr_assert_eq(flps_client_push(g->c, 0, G0, 1), FLPS_ESTATE);
    cr_assert_not_null(
        strstr(flps_client_last_error(g->c), "flps_client_wait first"));
    assert_sticky(g, FLPS_ESTATE);
    rig_free(g);
}

Test(client, destroy_of_null_does_nothing)
{
    flps_client_destroy(NULL);
}

/* ---- the dense push path ---- */

/* The dense push of part pi sent since log entry mark, checked to carry
 * the whole part. */
static const proto_msg *dense_push_sent(const rig *g, size_t mark, uint32_t pi)
{
    size_t k = find_sent(&g->net, mark, PROTO_OP_PUSH, pi);
    const proto_msg *msg;

    cr_assert_neq(k, SIZE_MAX, "part %u was pushed", pi);
    msg = &g->net.log[k].msg;
    cr_assert_eq(msg->codec, PROTO_CODEC_DENSE);
    cr_assert_eq(msg->n, g->pm.parts[pi].numel);
    return msg;
}

Test(client,
     a_dense_push_with_momentum_sends_the_velocity_and_a_nan_moves_it_not)
{
    rig *g = rig_new("dense");
    float g1[MAXNUMEL], g2[MAXNUMEL], bad[MAXNUMEL];
    const float m = 0.9f;
    uint32_t first = g->pm.first_part[0], last = g->pm.first_part[1];
    size_t mark;

    g->cfg.momentum = 0.9;
    rig_start(g);
    for (uint32_t j = 0; j < MAXNUMEL; j++) {
        g1[j] = (float)j - 4.5f;
        g2[j] = 0.25f * (float)(j * j) - 1.0f;
        bad[j] = g2[j];
    }
    push_all(g, g1, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);

    /* A NaN in the last part: no part of the layer is sent. */
    bad[MAXNUMEL - 1] = NAN;
    mark = g->net.nlog;
    cr_assert_eq(flps_client_push(g->c, 0, bad, 1), FLPS_ENONFINITE);
    cr_assert_eq(g->net.nlog, mark, "nothing was sent");
    cr_assert_str_eq(flps_client_last_error(g->c), "", "not sticky");

    /* The next good push sends m * v + g with v the first push's values,
     * as the old error-feedback path computed it. */
    mark = g->net.nlog;
    push_all(g, g2, 1);
    for (uint32_t pi = first; pi < last; pi++) {
        const partmap_part *pp = &g->pm.parts[pi];
        const proto_msg *msg = dense_push_sent(g, mark, pi);
        for (uint32_t j = 0; j < msg->n; j++) {
            float want = m * g1[pp->offset + j] + g2[pp->offset + j];
            cr_assert(msg->val[j] == want, "part %u [%u]: %g, want %g", pi, j,
                      (double)msg->val[j], (double)want);
        }
    }
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    rig_free(g);
}

/* Without momentum the finiteness check rides on the copy into the
 * payloads: a NaN or Inf in any part, the first or the last, still sends
 * no part, and the next good push sends its own gradient exactly. */
Test(client, a_dense_push_without_momentum_sends_no_part_of_a_non_finite_grad)
{
    rig *g = rig_new("dense");
    float g1[MAXNUMEL], bad[MAXNUMEL];
    const float poison[] = {NAN, INFINITY, -INFINITY};
    uint32_t first = g->pm.first_part[0], last = g->pm.first_part[1];
    size_t mark;

    cr_assert_gt(last - first, 1, "the layer spans several parts");
    rig_start(g);
    for (uint32_t j = 0; j < MAXNUMEL; j++) {
        g1[j] = 0.5f * (float)j - 3.0f;
        bad[j] = -g1[j];
    }
    for (size_t v = 0; v < sizeof(poison) / sizeof(poison[0]); v++) {
        const uint32_t at[] = {0, MAXNUMEL - 1};
        for (size_t a = 0; a < 2; a++) {
            const float keep = bad[at[a]];
            bad[at[a]] = poison[v];
            mark = g->net.nlog;
            cr_assert_eq(flps_client_push(g->c, 0, bad, 0), FLPS_ENONFINITE,
                         "%g at %u", (double)poison[v], at[a]);
            cr_assert_eq(g->net.nlog, mark, "nothing was sent");
            cr_assert_str_eq(flps_client_last_error(g->c), "", "not sticky");
            bad[at[a]] = keep;
        }
    }
    mark = g->net.nlog;
    push_all(g, g1, 0);
    for (uint32_t pi = first; pi < last; pi++) {
        const partmap_part *pp = &g->pm.parts[pi];
        const proto_msg *msg = dense_push_sent(g, mark, pi);
        cr_assert(memcmp(msg->val, g1 + pp->offset, pp->numel * 4) == 0,
                  "part %u carries the good gradient", pi);
    }
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    rig_free(g);
}

/* The velocity is updated in place; finite gradients that would make it
 * overflow (m * v + g beyond FLT_MAX) send nothing and leave it as it
 * was, in every part. */
Test(client, a_dense_push_whose_velocity_would_overflow_moves_nothing)
{
    rig *g = rig_new("dense");
    float big[MAXNUMEL], zero[MAXNUMEL];
    uint32_t first = g->pm.first_part[0], last = g->pm.first_part[1];
    size_t mark;

    g->cfg.momentum = 0.9;
    rig_start(g);
    for (uint32_t j = 0; j < MAXNUMEL; j++) {
        big[j] = j == MAXNUMEL - 1 ? 3e38f : 1.0f;
        zero[j] = 0.0f;
    }
    push_all(g, big, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    mark = g->net.nlog;
    cr_assert_eq(flps_client_push(g->c, 0, big, 1), FLPS_ENONFINITE);
    cr_assert_eq(g->net.nlog, mark, "nothing was sent");
    cr_assert_str_eq(flps_client_last_error(g->c), "", "not sticky");
    /* The next push sends 0.9 * v: v is the first push's values. */
    mark = g->net.nlog;
    push_all(g, zero, 1);
    for (uint32_t pi = first; pi < last; pi++) {
        const partmap_part *pp = &g->pm.parts[pi];
        size_t k = find_sent(&g->net, mark, PROTO_OP_PUSH, pi);
        cr_assert_neq(k, SIZE_MAX);
        for (uint32_t j = 0; j < g->net.log[k].msg.n; j++)
            cr_assert(
                g->net.log[k].msg.val[j] == 0.9f * big[pp->offset + j] + 0.0f,
                "part %u [%u]: %g", pi, j, (double)g->net.log[k].msg.val[j]);
    }
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    rig_free(g);
}

Test(client, a_dense_push_without_momentum_sends_the_gradient_unchanged)
{
    rig *g = rig_new("dense");
    float g1[MAXNUMEL];
    size_t mark, k;

    rig_start(g);
    for (uint32_t j = 0; j < MAXNUMEL; j++)
        g1[j] = 1.0f / ((float)j + 3.0f);
    for (uint64_t it = 0; it < 2; it++) {
        mark = g->net.nlog;
        push_all(g, g1, it);
        k = find_sent(&g->net, mark, PROTO_OP_PUSH, g->pm.first_part[0] + 1);
        cr_assert_neq(k, SIZE_MAX);
        for (uint32_t j = 0; j < g->net.log[k].msg.n; j++)
            cr_assert(g->net.log[k].msg.val[j] == g1[4 + j],
                      "no residual, no velocity: iteration %llu [%u]",
                      (unsigned long long)it, j);
        cr_assert_eq(flps_client_wait(g->c, it), FLPS_OK);
    }
    rig_free(g);
}

/* spec (at density 0.5) pushed twice with momentum m: part 0's message of
 * the second push, whose sent elements hold 10 and -9 in G0 (the fake
 * shard rejects nothing, so gtopk's residual moves as topk's). */
static void second_sparse_push(const char *spec, double m, float want1,
                               float want3)
{
    rig *g = rig_new(spec);
    size_t mark, k;

    g->cfg.momentum = m;
    rig_start(g);
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    mark = g->net.nlog;
    push_all(g, G0, 1);
    k = find_sent(&g->net, mark, PROTO_OP_PUSH, g->pm.first_part[0]);
    cr_assert_neq(k, SIZE_MAX);
    {
        const proto_msg *msg = &g->net.log[k].msg;
        cr_assert_eq(msg->n, 2);
        cr_assert_eq(msg->idx[0], 1);
        cr_assert_eq(msg->idx[1], 3);
        cr_assert_eq(msg->val[0], want1, "m = %g: %g", m, (double)msg->val[0]);
        cr_assert_eq(msg->val[1], want3, "m = %g: %g", m, (double)msg->val[1]);
    }
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    rig_free(g);
}

/* m = 0.25 remembers about one step, so at density 0.5 an element waits
 * longer between sends than that, and gtopk masks its velocity when sent
 * (compress/ef.h): the five sent elements have velocity and residual 0,
 * so a = G0 there; the five kept have r = G0 and u = G0, so a = G0 +
 * (0.25 G0 + G0) = 2.25 G0 (at most 1.125). The sent five lead again. */
Test(client, a_sparse_push_with_momentum_masks_the_sent_velocity)
{
    second_sparse_push("gtopk:0.5", 0.25, 10.0f, -9.0f);
}

/* m = 0.5 remembers about two steps, as long as density 0.5 makes an
 * element wait: the velocity of the sent elements is kept, and they send
 * 0.5 G0 + G0 = 1.5 G0. */
Test(client, a_sparse_push_keeps_the_velocity_within_the_momentums_memory)
{
    second_sparse_push("topk:0.5", 0.5, 15.0f, -13.5f);
    second_sparse_push("gtopk:0.5", 0.5, 15.0f, -13.5f);
}

/* topk masks only where an element waits more than eight horizons: with m
 * = 0.25 the sent elements keep their velocity, 0.25 G0 + G0 = 1.25 G0,
 * where gtopk (above) masks it. */
Test(client, a_topk_push_keeps_the_velocity_where_gtopk_masks_it)
{
    second_sparse_push("topk:0.5", 0.25, 12.5f, -11.25f);
}

/* ---- pushes of several parts ---- */

/* A sparse push sends each shard the parts it holds of the layer in one
 * message: w0's parts 0 and 2 both live on shard 0. */
Test(client, the_parts_one_shard_holds_of_a_sparse_push_travel_together)
{
    rig *g = rig_new("topk:0.5");
    size_t mark, joined;

    rig_start(g);
    cr_assert_eq(g->pm.parts[0].shard, g->pm.parts[2].shard);
    cr_assert_neq(g->pm.parts[0].shard, g->pm.parts[1].shard);
    mark = g->net.nsends;
    joined = g->net.njoined;
    cr_assert_eq(flps_client_push(g->c, 0, G0, 0), FLPS_OK);
    cr_assert_eq(g->net.nsends - mark, 2, "one message per shard");
    cr_assert_eq(g->net.njoined - joined, 1);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    rig_free(g);
}

/* Shard 0 answers w0's parts 0 and 2 with one UPDATE of two segments. */
static int joined_update(fake_net *n, const sent *s)
{
    static const uint32_t idx[] = {1, 0};
    static const float val[] = {-0.5f, 0.25f};
    proto_seg segs[2] = {{0, 1, 0, 1}, {2, 1, 0, 1}};
    proto_msg r;

    if (s->msg.op != PROTO_OP_PUSH || (s->msg.part != 0 && s->msg.part != 2))
        return 0;
    if (s->msg.part == 0)
        return 1; /* answered with part 2's */
    reply_base(&r, PROTO_OP_UPDATE, &s->msg);
    r.part = 0;
    r.codec = PROTO_CODEC_SPARSE;
    r.n = 2;
    r.idx = idx;
    r.val = val;
    r.nsegs = 2;
    r.segs = segs;
    fake_reply(n, s->peer, &r);
    return 1;
}

Test(client, an_update_of_several_parts_is_applied_part_by_part)
{
    rig *g = rig_new("topk:0.5");

    rig_start(g);
    g->net.script = joined_update;
    cr_assert_eq(flps_client_push(g->c, 0, G0, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_eq(g->w[0][1], 1.0f - 0.5f, "part 0, element 1");
    cr_assert_eq(g->w[0][8], 8.0f + 0.25f, "part 2, element 0");
    cr_assert_eq(g->w[0][9], 9.0f);
    cr_assert_eq(g->w[0][4], 4.0f, "part 1 had an empty update");
    rig_free(g);
}

/* ---- stale answers ---- */

/* When part 1 is pushed for iteration 1, a late refusal of a resend of
 * its iteration-0 push arrives first (closed: FLPS_ELATE; then a
 * duplicate), then the real update. */
static int stale_refusals_for_part_1(fake_net *n, const sent *s)
{
    proto_msg r;

    if (s->msg.op != PROTO_OP_PUSH || s->msg.part != 1 || s->msg.iter != 1)
        return 0;
    reply_base(&r, PROTO_OP_ERROR, &s->msg);
    r.iter = 0;
    r.status = FLPS_ELATE;
    snprintf(r.text, sizeof(r.text), "iteration 0 of part 1 is closed");
    fake_reply(n, s->peer, &r);
    r.status = FLPS_EDUP;
    snprintf(r.text, sizeof(r.text), "rank 0 already pushed iteration 0");
    fake_reply(n, s->peer, &r);
    return 0; /* and the fake shard answers the push itself */
}

Test(client, a_late_refusal_of_an_earlier_iteration_is_ignored)
{
    rig *g = rig_new("topk:0.5");
    size_t mark;

    rig_start(g);
    g->net.script = stale_refusals_for_part_1;
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    mark = g->net.nlog;
    push_all(g, G0, 1);
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK, "%s",
                 flps_client_last_error(g->c));
    cr_assert_eq(count_sent(&g->net, mark, PROTO_OP_PULL), 0,
                 "no pull for a refusal meant for another iteration");
    cr_assert_str_eq(flps_client_last_error(g->c), "");
    rig_free(g);
}

/* ---- monitoring ---- */

/* The residual norm is that of what top-k did not send, per layer; the
 * message counts follow what went over the (fake) wire. */
Test(client, residual_norms_and_message_counts_follow_the_pushes)
{
    rig *g = rig_new("topk:0.5");
    double norm = -1, want = 0;
    uint64_t sent0, recv0, sent1, recv1;
    size_t mark;
    int chosen[MAXNUMEL] = {0};

    rig_start(g);
    cr_assert_eq(flps_client_residual_norm(g->c, 0, &norm), FLPS_OK);
    cr_assert_eq(norm, 0.0, "nothing kept before the first push");
    cr_assert_eq(flps_client_residual_norm(g->c, NTENSORS, &norm), FLPS_EINVAL);
    cr_assert_eq(flps_client_residual_norm(g->c, 0, NULL), FLPS_EINVAL);
    flps_client_get_messages(g->c, &sent0, &recv0);
    mark = g->net.nsends;
    cr_assert_eq(flps_client_push(g->c, 0, G0, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    flps_client_get_messages(g->c, &sent1, NULL);
    flps_client_get_messages(g->c, NULL, &recv1);
    cr_assert_eq(sent1 - sent0, g->net.nsends - mark);
    cr_assert_eq(recv1 - recv0, 3, "one update per part of w0");
    /* topk:0.5 of w0's 10 sends the 5 largest |g|; the rest is kept. */
    for (int q = 0; q < 5; q++) {
        int best = -1;
        for (int i = 0; i < (int)NUMEL[0]; i++)
            if (!chosen[i] && (best < 0 || fabsf(G0[i]) > fabsf(G0[best])))
                best = i;
        chosen[best] = 1;
    }
    for (int i = 0; i < (int)NUMEL[0]; i++)
        if (!chosen[i])
            want += (double)G0[i] * (double)G0[i];
    cr_assert_eq(flps_client_residual_norm(g->c, 0, &norm), FLPS_OK);
    cr_assert_float_eq(norm, sqrt(want), 1e-6, "%g vs %g", norm, sqrt(want));
    cr_assert_gt(norm, 0.0);
    cr_assert_eq(flps_client_residual_norm(g->c, 1, &norm), FLPS_OK);
    cr_assert_eq(norm, 0.0, "w1 was not pushed");
    rig_free(g);
}

/* ---- waiting layer by layer ---- */

/* A dense update of `val` for every element of push q. */
static void reply_dense_update(fake_net *n, const sent *s, float val)
{
    float vals[64];
    proto_msg r;

    cr_assert_leq(s->msg.n, 64);
    for (uint32_t j = 0; j < s->msg.n; j++)
        vals[j] = val;
    reply_base(&r, PROTO_OP_UPDATE, &s->msg);
    r.codec = PROTO_CODEC_DENSE;
    r.n = s->msg.n;
    r.val = vals;
    fake_reply(n, s->peer, &r);
}

/* Tensor 0's pushes are answered at once with +0.5 everywhere; the later
 * tensors' pushes are held (the test answers them itself). */
static int answer_tensor_0_only(fake_net *n, const sent *s)
{
    if (s->msg.op != PROTO_OP_PUSH)
        return 0;
    if (n->pm->parts[s->msg.part].tensor == 0)
        reply_dense_update(n, s, 0.5f);
    return 1;
}

Test(client, waiting_for_one_layer_applies_its_update_and_leaves_the_others)
{
    rig *g = rig_new("dense");
    size_t mark;

    rig_start(g);
    g->net.script = answer_tensor_0_only;
    mark = g->net.nlog;
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait_layer(g->c, 0, 0), FLPS_OK,
                 "tensor 0's updates are in: %s", flps_client_last_error(g->c));
    for (uint32_t j = 0; j < NUMEL[0]; j++)
        cr_assert_eq(g->w[0][j], (float)j + 0.5f, "w0[%u] has its update", j);
    for (uint32_t j = 0; j < NUMEL[1]; j++)
        cr_assert_eq(g->w[1][j], (float)(100 + j), "w1 still waits");
    /* Tensor 0 may go on to the next iteration while 1 and 2 are still
     * outstanding for this one. */
    cr_assert_eq(flps_client_push(g->c, 0, G0, 1), FLPS_OK, "%s",
                 flps_client_last_error(g->c));
    /* Now the shard answers the held pushes of iteration 0. */
    for (size_t i = mark; i < g->net.nlog; i++) {
        const sent *s = &g->net.log[i];
        if (s->msg.op == PROTO_OP_PUSH && s->msg.iter == 0 &&
            g->pm.parts[s->msg.part].tensor != 0)
            reply_dense_update(&g->net, s, 0.25f);
    }
    cr_assert_eq(flps_client_wait_layer(g->c, 1, 0), FLPS_OK);
    for (uint32_t j = 0; j < NUMEL[1]; j++)
        cr_assert_eq(g->w[1][j], (float)(100 + j) + 0.25f, "w1[%u]", j);
    /* Tensor 2's reply came with them: nothing is left to wait for. */
    mark = g->net.nlog;
    cr_assert_eq(flps_client_wait_layer(g->c, 2, 0), FLPS_OK);
    for (uint32_t j = 0; j < NUMEL[2]; j++)
        cr_assert_eq(g->w[2][j], (float)(200 + j) + 0.25f, "w2[%u]", j);
    cr_assert_eq(flps_client_wait_layer(g->c, 0, 1), FLPS_OK);
    for (uint32_t j = 0; j < NUMEL[0]; j++)
        cr_assert_eq(g->w[0][j], (float)j + 1.0f, "w0[%u]: two updates", j);
    cr_assert_eq(g->net.nlog, mark, "waiting sends nothing");
    /* A tensor with nothing outstanding returns at once. */
    cr_assert_eq(flps_client_wait_layer(g->c, 1, 1), FLPS_OK);
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    rig_free(g);
}

Test(client, waiting_for_a_layer_of_another_iteration_is_a_sticky_state_error)
{
    rig *g = rig_new("dense");

    rig_start(g);
    g->net.script = drop_pushes;
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait_layer(g->c, 1, 1), FLPS_ESTATE);
    cr_assert_not_null(
        strstr(flps_client_last_error(g->c), "pushed for iteration 0"), "%s",
        flps_client_last_error(g->c));
    assert_sticky(g, FLPS_ESTATE);
    rig_free(g);
}

Test(client, wait_layer_refuses_a_bad_tensor_and_an_async_client_unsticky)
{
    rig *g = rig_new("dense");

    rig_start(g);
    cr_assert_eq(flps_client_wait_layer(g->c, NTENSORS, 0), FLPS_EINVAL);
    cr_assert_eq(flps_client_wait_layer(NULL, 0, 0), FLPS_EINVAL);
    cr_assert_str_eq(flps_client_last_error(g->c), "", "not sticky");
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    rig_free(g);

    g = rig_new("dense");
    g->cfg.async = 1;
    rig_start(g);
    cr_assert_eq(flps_client_wait_layer(g->c, 0, 0), FLPS_ESTATE,
                 "an async wait pulls the whole model");
    cr_assert_str_eq(flps_client_last_error(g->c), "", "not sticky");
    cr_assert_eq(flps_client_push(g->c, 0, G0, 0), FLPS_OK, "still usable");
}

/* ---- density warm-up ---- */

static flps_err rig_create_warmup(rig *g, uint64_t n, double start)
{
    g->cfg.density_warmup = n;
    g->cfg.density_warmup_start = start;
    return rig_create(g);
}

/* Pairs the pushes from log entry mark on carry for tensor 0. */
static uint32_t pairs_of_tensor0(const rig *g, size_t mark)
{
    uint32_t n = 0;

    for (size_t k = mark; k < g->net.nlog; k++) {
        const proto_msg *m = &g->net.log[k].msg;
        if (m->op == PROTO_OP_PUSH && m->part < g->pm.first_part[1])
            n += m->n;
    }
    return n;
}

Test(client, a_density_warm_up_is_registered_and_followed_push_by_push)
{
    rig *g = rig_new("gtopk:0.1");
    const uint64_t N = 4;

    cr_assert_eq(rig_create_warmup(g, N, 1.0), FLPS_OK);
    for (uint32_t s = 0; s < NSHARDS; s++) {
        cr_assert_eq(g->net.log[s].msg.cfg.density_warmup, N);
        cr_assert_eq(g->net.log[s].msg.cfg.density_start, 1.0);
        cr_assert_float_eq(g->net.log[s].msg.cfg.density, 0.1, 1e-12);
    }
    cr_assert_eq(flps_client_init(g->c), FLPS_OK);
    /* Tensor 0 has 10 elements: k = floor(d(t) * 10), d from 1 to 0.1. */
    for (uint64_t t = 0; t < N + 2; t++) {
        size_t mark = g->net.nlog;
        codec_spec cs = {CODEC_GTOPK, codec_warmup_density(1.0, 0.1, N, t), 0};

        push_all(g, G0, t);
        cr_assert_eq(pairs_of_tensor0(g, mark), codec_count_for(&cs, 10),
                     "iteration %llu", (unsigned long long)t);
        cr_assert_eq(flps_client_wait(g->c, t), FLPS_OK);
    }
    cr_assert_eq(codec_count_for(&(codec_spec){CODEC_GTOPK, 1.0, 0}, 10), 10);
    rig_free(g);
}

Test(client, a_density_warm_up_is_refused_where_it_cannot_apply)
{
    static const char *const bad_codecs[] = {"dense", "fp16", "randk:0.1",
                                             "qsgd:4", "sign"};
    rig *g;

    for (size_t i = 0; i < sizeof(bad_codecs) / sizeof(bad_codecs[0]); i++) {
        g = rig_new(bad_codecs[i]);
        cr_assert_eq(rig_create_warmup(g, 10, 0.25), FLPS_EINVAL, "%s",
                     bad_codecs[i]);
        cr_assert_eq(g->net.nlog, 0, "nothing is sent");
        rig_free(g);
    }
    g = rig_new("topk:0.01");
    cr_assert_eq(rig_create_warmup(g, 10, 0), FLPS_EINVAL);
    cr_assert_eq(rig_create_warmup(g, 10, 1.5), FLPS_EINVAL);
    cr_assert_eq(rig_create_warmup(g, 10, NAN), FLPS_EINVAL);
    g->cfg.async = 1;
    cr_assert_eq(rig_create_warmup(g, 10, 0.25), FLPS_EINVAL);
    cr_assert_eq(g->net.nlog, 0);
    /* No warm-up is plain create, for any codec and mode. */
    cr_assert_eq(rig_create_warmup(g, 0, 0), FLPS_OK);
    cr_assert_eq(g->net.log[0].msg.cfg.density_warmup, 0);
    rig_free(g);
    g = rig_new("auto");
    cr_assert_eq(rig_create_warmup(g, 10, 0.25), FLPS_OK, "auto warms up");
    rig_free(g);
}

/* ---- the growable configuration ---- */

Test(client_config, init_sets_the_size_and_the_defaults)
{
    flps_client_config cfg;

    memset(&cfg, 0xab, sizeof(cfg));
    cr_assert_eq(flps_client_config_init(&cfg), FLPS_OK);
    cr_assert_eq(cfg.size, sizeof(cfg));
    cr_assert_eq(cfg.part_size, 65536);
    cr_assert_eq(cfg.async, FLPS_MODE_SYNC);
    cr_assert_str_eq(cfg.compression, "dense");
    cr_assert_eq(cfg.retry_ms, 2000);
    cr_assert_eq(cfg.deadline_ms, 300000);
    cr_assert_null(cfg.transport, "NULL: $FLPS_TRANSPORT, else zmq");
    cr_assert_eq(cfg.density_warmup, 0, "no warm-up");
    cr_assert_eq(cfg.density_warmup_start, 0.25);
    /* What has no default stays unset, and create refuses it so. */
    cr_assert_null(cfg.job);
    cr_assert_eq(cfg.rank, 0);
    cr_assert_eq(cfg.workers, 0);
    cr_assert_null(cfg.servers);
    cr_assert_eq(cfg.nservers, 0);
    cr_assert_null(cfg.tensors);
    cr_assert_eq(cfg.ntensors, 0);
    cr_assert_eq(cfg.lr, 0);
    cr_assert_eq(cfg.lr_cosine, 0);
    cr_assert_eq(cfg.iterations, 0);
    cr_assert_eq(cfg.momentum, 0);
    cr_assert_eq(flps_client_config_init(NULL), FLPS_EINVAL);
}

Test(client_config, init_of_an_older_smaller_struct_writes_only_its_bytes)
{
    /* A struct from an older flps.h that ends after transport. */
    const size_t older = offsetof(flps_client_config, density_warmup);
    union {
        flps_client_config cfg;
        unsigned char bytes[sizeof(flps_client_config)];
    } u;

    memset(u.bytes, 0xab, sizeof(u.bytes));
    cr_assert_eq(flps_client_config_init_size(&u.cfg, older), FLPS_OK);
    cr_assert_eq(u.cfg.size, older);
    cr_assert_null(u.cfg.transport);
    cr_assert_str_eq(u.cfg.compression, "dense");
    for (size_t i = older; i < sizeof(u.bytes); i++)
        cr_assert_eq(u.bytes[i], 0xab, "byte %zu is past the caller's struct",
                     i);
}

Test(client_config, init_refuses_a_size_it_does_not_know_and_writes_nothing)
{
    flps_client_config cfg;
    logbuf lb = {""};

    memset(&cfg, 0, sizeof(cfg));
    flps_set_logger(keep_line, &lb);
    cr_assert_eq(flps_client_config_init_size(&cfg, sizeof(cfg) + 8),
                 FLPS_EINVAL);
    cr_assert_eq(
        flps_client_config_init_size(&cfg, offsetof(flps_client_config, size)),
        FLPS_EINVAL, "a struct without the size field");
    flps_set_logger(NULL, NULL);
    cr_assert_eq(cfg.size, 0, "nothing written");
    cr_assert_null(cfg.compression, "nothing written");
    cr_assert_not_null(strstr(lb.text, "newer flps.h"), "%s", lb.text);
}

Test(client, a_struct_from_an_older_header_gets_defaults_for_what_it_lacks)
{
    rig *g = rig_new("dense");
    const size_t older = offsetof(flps_client_config, density_warmup);
    unsigned char *exact = malloc(older);

    /* Past the caller's struct lies a warm-up a dense job refuses: read, it
     * would fail create. The struct is copied into a buffer of exactly its
     * size, so a read past it is an error under AddressSanitizer too. */
    cr_assert_not_null(exact);
    g->cfg.density_warmup = 10;
    g->cfg.density_warmup_start = NAN;
    g->cfg.size = older;
    memcpy(exact, &g->cfg, older);
    cr_assert_eq(
        flps_client_create_on((const flps_client_config *)exact, g->t, &g->c),
        FLPS_OK);
    g->t = NULL;
    for (uint32_t s = 0; s < NSHARDS; s++)
        cr_assert_eq(g->net.log[s].msg.cfg.density_warmup, 0,
                     "the missing fields keep their defaults");
    free(exact);
    rig_free(g);
}

Test(client, a_configuration_from_a_newer_header_is_refused_clearly)
{
    rig *g = rig_new("dense");
    logbuf lb = {""};

    g->cfg.size = sizeof(g->cfg) + 8;
    flps_set_logger(keep_line, &lb);
    cr_assert_eq(rig_create(g), FLPS_EINVAL);
    cr_assert_eq(flps_client_create_config(&g->cfg, &g->c), FLPS_EINVAL);
    flps_set_logger(NULL, NULL);
    cr_assert_null(g->c);
    cr_assert_eq(g->net.nlog, 0, "nothing is sent");
    cr_assert_not_null(strstr(lb.text, "newer flps.h"), "%s", lb.text);
    cr_assert_not_null(strstr(lb.text, "flps_client_create_config"),
                       "the log names the call: %s", lb.text);
    rig_free(g);
}

Test(client, a_configuration_not_made_by_init_is_refused)
{
    rig *g = rig_new("dense");
    logbuf lb = {""};

    flps_set_logger(keep_line, &lb);
    g->cfg.size = 0;
    cr_assert_eq(rig_create(g), FLPS_EINVAL);
    g->cfg.size = offsetof(flps_client_config, size);
    cr_assert_eq(rig_create(g), FLPS_EINVAL);
    cr_assert_eq(flps_client_create_config(NULL, &g->c), FLPS_EINVAL);
    flps_set_logger(NULL, NULL);
    cr_assert_eq(g->net.nlog, 0, "nothing is sent");
    cr_assert_not_null(strstr(lb.text, "make it with flps_client_config_init"),
                       "%s", lb.text);
    rig_free(g);
}

Test(client_config, create_config_reads_the_transport_and_the_warm_up)
{
    rig *g = rig_new("topk:0.1");
    flps_client *c = NULL;
    logbuf lb = {""};

    /* Both are refused before a transport is made: nothing connects. */
    flps_set_logger(keep_line, &lb);
    g->cfg.transport = "infiniband";
    cr_assert_eq(flps_client_create_config(&g->cfg, &c), FLPS_EINVAL);
    cr_assert_not_null(strstr(lb.text, "'infiniband' is not a transport;"),
                       "%s", lb.text);
    cr_assert_null(strstr(lb.text, "from FLPS_TRANSPORT"), "%s", lb.text);
    g->cfg.transport = NULL;
    g->cfg.density_warmup = 10;
    g->cfg.density_warmup_start = 1.5;
    cr_assert_eq(flps_client_create_config(&g->cfg, &c), FLPS_EINVAL);
    flps_set_logger(NULL, NULL);
    cr_assert_not_null(strstr(lb.text, "start density 1.5 is out of range"),
                       "%s", lb.text);
    cr_assert_null(c);
    rig_free(g);
}

Test(client_config, the_0_x_constructors_read_only_the_fields_of_0_3)
{
    rig *g = rig_new("dense");
    const size_t v03 = offsetof(flps_client_config, size);
    unsigned char *exact = malloc(v03);
    flps_client *c = NULL;
    logbuf lb = {""};

    /* A 0.3 program's struct, exactly its size: the configuration is read
     * and accepted (the call gets as far as the transport's name). */
    cr_assert_not_null(exact);
    memcpy(exact, &g->cfg, v03);
    flps_set_logger(keep_line, &lb);
    cr_assert_eq(flps_client_create_with((const flps_client_config *)exact,
                                         "infiniband", &c),
                 FLPS_EINVAL);
    cr_assert_not_null(strstr(lb.text, "'infiniband' is not a transport;"),
                       "%s", lb.text);
    /* The fields after size are not theirs: the arguments decide. */
    lb.text[0] = '\0';
    g->cfg.transport = "zmq";
    g->cfg.density_warmup = 10;
    g->cfg.density_warmup_start = NAN; /* a dense job refuses a warm-up */
    cr_assert_eq(flps_client_create_warmup(&g->cfg, "infiniband", 0, 0, &c),
                 FLPS_EINVAL);
    flps_set_logger(NULL, NULL);
    cr_assert_not_null(strstr(lb.text, "'infiniband' is not a transport;"),
                       "%s", lb.text);
    cr_assert_null(strstr(lb.text, "warm-up"), "%s", lb.text);
    cr_assert_null(c);
    free(exact);
    rig_free(g);
}

/* ---- the worker metrics the clients feed (client_metrics.c) ---- */

/* The process's families as GET /metrics shows them (caller frees). */
static char *scrape_text(void)
{
    char *text = NULL;
    size_t len = 0;

    cr_assert_eq(client_metrics_render(&text, &len), FLPS_OK);
    return text;
}

/* The value of the line "SERIES VALUE" of text; NAN when there is none. */
static double series_value(const char *text, const char *series)
{
    size_t n = strlen(series);

    for (const char *line = text; *line != '\0';) {
        const char *nl = strchr(line, '\n');

        if (strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    return NAN;
}

/* One series' value in a scrape now. */
static double scraped(const char *series)
{
    char *text = scrape_text();
    double v = series_value(text, series);

    flps_free(text);
    return v;
}

static void serve_metrics_here(void)
{
    char bound[128] = "";

    cr_assert_eq(flps_metrics_serve("127.0.0.1:0", bound, sizeof(bound)),
                 FLPS_OK);
    cr_assert(strncmp(bound, "127.0.0.1:", 10) == 0, "%s", bound);
}

Test(client_metrics, pushes_and_waits_feed_the_series_flworker_serves)
{
    rig *g = rig_new("topk:0.5");
    flps_client_stats st;
    uint64_t msgs = 0;
    char *text;

    serve_metrics_here();
    rig_start(g);
    for (uint64_t it = 0; it < 2; it++) {
        push_all(g, G0, it);
        cr_assert_eq(flps_client_wait(g->c, it), FLPS_OK);
    }
    cr_assert_eq(flps_metrics_report(0.5, 0.875, NAN), FLPS_OK);
    text = scrape_text();
    flps_client_get_stats(g->c, &st);
    flps_client_get_messages(g->c, &msgs, NULL);
    cr_assert_eq(series_value(text, "flworker_iteration"), 2);
    cr_assert_eq(series_value(text, "flworker_iterations_total"), 2);
    cr_assert_eq(series_value(text, "flworker_push_seconds_count"), 6,
                 "one observation per push");
    cr_assert_eq(series_value(text, "flworker_wait_seconds_count"), 2,
                 "one per iteration");
    cr_assert_eq(series_value(text, "flworker_sent_bytes_total"),
                 (double)st.bytes_sent, "%s", text);
    cr_assert_eq(series_value(text, "flworker_dense_bytes_total"),
                 (double)st.dense_bytes);
    cr_assert_eq(series_value(text, "flworker_elements_sent_total"),
                 (double)st.elements_sent);
    cr_assert_eq(series_value(text, "flworker_push_messages_total"),
                 (double)st.pushes);
    cr_assert_eq(series_value(text, "flworker_messages_sent_total"),
                 (double)msgs);
    cr_assert_eq(series_value(text, "flworker_layer_density{layer=\"w0\"}"),
                 0.5, "topk:0.5 of w0's 10 elements");
    cr_assert_gt(
        series_value(text, "flworker_layer_compression_ratio{layer=\"w0\"}"),
        0);
    cr_assert_gt(
        series_value(text, "flworker_layer_residual_norm{layer=\"w0\"}"), 0,
        "what topk kept back");
    cr_assert_eq(series_value(text, "flworker_loss"), 0.5);
    cr_assert_eq(series_value(text, "flworker_test_accuracy"), 0.875);
    cr_assert_eq(series_value(text, "flworker_test_loss"), 0,
                 "NaN leaves a value as it was");
    cr_assert_geq(series_value(text, "flworker_compute_seconds_total"), 0);
    cr_assert_gt(series_value(text, "flworker_communication_seconds_total"), 0);
    cr_assert_not_null(strstr(text, "flworker_build_info{version=\""));
    cr_assert_gt(series_value(text, "process_open_fds"), 2);
    flps_free(text);
    cr_assert_eq(flps_metrics_report(INFINITY, NAN, NAN), FLPS_EINVAL);
    rig_free(g);
    flps_metrics_stop();
}

Test(client_metrics, nothing_is_counted_while_nothing_serves)
{
    rig *g = rig_new("dense");
    char *text = NULL;
    size_t len;

    rig_start(g);
    cr_assert_eq(client_metrics_render(&text, &len), FLPS_ESTATE);
    cr_assert_eq(flps_metrics_report(1, 1, 1), FLPS_OK, "dropped, no error");
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    serve_metrics_here();
    cr_assert_eq(scraped("flworker_iterations_total"), 0);
    cr_assert_eq(scraped("flworker_loss"), 0);
    /* From now on it counts; the bytes from before come with the next. */
    push_all(g, G0, 1);
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    cr_assert_eq(scraped("flworker_iterations_total"), 1);
    cr_assert_eq(scraped("flworker_iteration"), 2);
    rig_free(g);
    flps_metrics_stop();
}

Test(client_metrics,
     a_program_waiting_layer_by_layer_ends_an_iteration_at_its_next_push)
{
    rig *g = rig_new("dense");

    serve_metrics_here();
    rig_start(g);
    push_all(g, G0, 0);
    for (uint32_t i = 0; i < NTENSORS; i++)
        cr_assert_eq(flps_client_wait_layer(g->c, i, 0), FLPS_OK);
    cr_assert_eq(scraped("flworker_iterations_total"), 0);
    push_all(g, G0, 1);
    cr_assert_eq(scraped("flworker_iterations_total"), 1);
    cr_assert_eq(scraped("flworker_iteration"), 1);
    cr_assert_eq(scraped("flworker_wait_seconds_count"), 1,
                 "the layer waits of iteration 0, once");
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
    cr_assert_eq(scraped("flworker_iterations_total"), 2,
                 "a second wait for the same iteration ends nothing");
    rig_free(g);
    flps_metrics_stop();
}

Test(client_metrics, a_resumed_client_counts_from_where_the_shards_are)
{
    rig *g = rig_new("dense");

    serve_metrics_here();
    g->net.resume_iter = 7;
    rig_start(g);
    push_all(g, G0, 7);
    cr_assert_eq(flps_client_wait(g->c, 7), FLPS_OK);
    cr_assert_eq(scraped("flworker_iteration"), 8);
    cr_assert_eq(scraped("flworker_iterations_total"), 1);
    rig_free(g);
    flps_metrics_stop();
}

Test(client_metrics, a_destroyed_clients_last_bytes_are_counted)
{
    rig *g = rig_new("dense");
    flps_client_stats st;

    serve_metrics_here();
    rig_start(g);
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_eq(flps_client_checkpoint(g->c), FLPS_OK); /* after the wait */
    flps_client_get_stats(g->c, &st);
    rig_free(g); /* destroys the client */
    cr_assert_eq(scraped("flworker_sent_bytes_total"), (double)st.bytes_sent);
    flps_metrics_stop();
}

Test(client_metrics, serving_twice_is_refused_naming_where_and_stop_starts_over)
{
    char first[128], again[128] = "";

    cr_assert_eq(flps_metrics_serve("127.0.0.1:0", first, sizeof(first)),
                 FLPS_OK);
    cr_assert_eq(flps_metrics_serve("127.0.0.1:0", again, sizeof(again)),
                 FLPS_ESTATE);
    cr_assert_str_eq(again, first);
    cr_assert_eq(flps_metrics_report(0.25, NAN, NAN), FLPS_OK);
    flps_metrics_stop();
    flps_metrics_stop(); /* nothing left to stop */
    cr_assert_eq(flps_metrics_serve(NULL, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(flps_metrics_serve("no-port", NULL, 0), FLPS_EINVAL);
    serve_metrics_here();
    cr_assert_eq(scraped("flworker_loss"), 0, "from zero");
    flps_metrics_stop();
}

Test(client_metrics,
     flps_metrics_in_the_environment_serves_from_the_first_client)
{
    rig *g = rig_new("dense"), *h;
    int pfd[2], saved = dup(STDOUT_FILENO);
    char out[256] = "", bound[128];
    ssize_t n;

    cr_assert_eq(pipe(pfd), 0);
    setenv("FLPS_METRICS", "127.0.0.1:0", 1);
    dup2(pfd[1], STDOUT_FILENO); /* the line goes to the launcher's pipe */
    rig_start(g);
    h = rig_new("dense");
    rig_start(h); /* a second client: the same endpoint, no second line */
    dup2(saved, STDOUT_FILENO);
    close(pfd[1]);
    n = read(pfd[0], out, sizeof(out) - 1);
    close(pfd[0]);
    close(saved);
    cr_assert_gt(n, 0);
    out[n] = '\0';
    cr_assert_eq(flps_metrics_serve("127.0.0.1:0", bound, sizeof(bound)),
                 FLPS_ESTATE);
    {
        char want[160];
        snprintf(want, sizeof(want), "metrics on %s\n", bound);
        cr_assert_str_eq(out, want, "exactly one line, naming the port bound");
    }
    rig_free(h);
    rig_free(g);
    unsetenv("FLPS_METRICS");
    flps_metrics_stop();
}

/* ---- energy and the GPU clock (client_energy.c) ---- */

#define STUB_GPU                                                               \
    "init ok\ndevices 1\nd0.clocks 1980,1830,1680,1530,1380\n"                 \
    "d0.mem 3201\nd0.per_call_mj 500\n"

/* A node for the client's energy: the NVML stub (with state, or none:
 * no library at all) and a powercap tree with package 0 (or none). */
typedef struct node {
    stub_ctl c;
    int have_stub;
    fake_sysfs s;
} node;

static void node_init(node *nd, const char *stub_state, int package)
{
    memset(nd, 0, sizeof(*nd));
    if (stub_state != NULL) {
        stub_init(&nd->c, stub_state);
        nd->have_stub = 1;
        setenv("FLPS_NVML_LIBRARY", FLPS_NVML_STUB, 1);
    } else {
        setenv("FLPS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    }
    fake_sysfs_init(&nd->s, 0);
    if (package)
        fake_powercap_zone(&nd->s, "intel-rapl:0", "package-0",
                           262143000000ULL - 1500000, 262143000000ULL);
    setenv("FLPS_SYSFS_ROOT", nd->s.root, 1);
}

static void node_fini(node *nd)
{
    if (nd->have_stub)
        stub_fini(&nd->c);
    fake_sysfs_fini(&nd->s);
    unsetenv("FLPS_NVML_LIBRARY");
    unsetenv("FLPS_SYSFS_ROOT");
}

static flps_energy energy_now(const rig *g)
{
    flps_energy e;

    cr_assert_eq(flps_client_energy(g->c, &e, sizeof(e)), FLPS_OK);
    return e;
}

Test(client_energy, where_nothing_reports_energy_one_line_says_why)
{
    rig *g = rig_new("dense"), *h = rig_new("dense");
    logbuf lb = {""};
    node nd;
    flps_energy e;
    char *text;

    node_init(&nd, NULL, 0);
    serve_metrics_here();
    flps_set_logger(keep_line, &lb);
    rig_start(g);
    push_all(g, ZERO, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    e = energy_now(g);
    cr_assert_eq(e.devices, 0);
    cr_assert_eq(e.iterations, 0);
    cr_assert_str_eq(e.gpu_clock, "default");
    cr_assert_not_null(strstr(e.why, "no NVML library"), "%s", e.why);
    cr_assert_not_null(strstr(e.why, ": energy is not reported"), "%s", e.why);
    rig_free(g);
    rig_start(h); /* the next client says nothing again */
    flps_set_logger(NULL, NULL);
    cr_assert_not_null(strstr(lb.text, "energy: no NVML library"), "%s",
                       lb.text);
    cr_assert_null(strstr(strstr(lb.text, "energy: no") + 1, "energy: no"),
                   "said once per process: %s", lb.text);
    text = scrape_text();
    cr_assert_null(strstr(text, "flworker_energy_joules_total{"),
                   "no series without a device: %s", text);
    flps_free(text);
    rig_free(h);
    flps_metrics_stop();
    node_fini(&nd);
}

/* Iterations from..to-1 of g, each a little over 50 ms, the package's
 * counter advancing 1 J per iteration (wrapping on the way). */
static void train(rig *g, node *nd, uint64_t from, uint64_t to)
{
    static uint64_t uj = 262143000000ULL - 1500000;

    for (uint64_t it = from; it < to; it++) {
        push_all(g, ZERO, it);
        usleep(50000);
        uj = (uj + 1000000) % 262143000000ULL;
        fake_powercap_set(&nd->s, "intel-rapl:0", uj);
        cr_assert_eq(flps_client_wait(g->c, it), FLPS_OK);
    }
}

Test(client_energy, the_first_client_meters_gpus_and_packages_over_windows)
{
    rig *g = rig_new("dense"), *h = rig_new("dense");
    node nd;
    flps_energy e;
    char *text;

    node_init(&nd, STUB_GPU, 1);
    serve_metrics_here();
    rig_start(g);
    rig_start(h);
    train(g, &nd, 0, 25);
    e = energy_now(g);
    cr_assert_eq(e.devices, 2, "%s", e.why);
    cr_assert_eq(e.gpus, 1);
    cr_assert_str_eq(e.method, "counter");
    cr_assert_geq(e.iterations, 10, "at least one window");
    cr_assert_leq(e.iterations, 25);
    cr_assert_float_eq(e.cpu_joules_per_iteration, 1.0, 1e-6,
                       "1 J per iteration, across the counter's wrap");
    cr_assert_gt(e.gpu_joules, 0);
    cr_assert_float_eq(e.joules, e.gpu_joules + e.cpu_joules, 1e-9);
    cr_assert_float_eq(e.joules_per_iteration, e.joules / (double)e.iterations,
                       1e-9);
    cr_assert_geq(e.seconds, 0.5);
    text = scrape_text();
    cr_assert_float_eq(
        series_value(text,
                     "flworker_energy_joules_total{device=\"cpu-package0\"}"),
        e.cpu_joules, 1e-6, "%s", text);
    cr_assert_gt(
        series_value(text, "flworker_energy_joules_total{device=\"gpu0\"}"), 0);
    flps_free(text);
    e = energy_now(h);
    cr_assert_eq(e.devices, 0, "a second client of the process meters none");
    cr_assert_str_eq(e.why, "another client of this process meters its energy");
    rig_free(h);
    rig_free(g);
    flps_metrics_stop();
    node_fini(&nd);
}

Test(client_energy, a_process_that_sees_no_gpu_meters_only_the_packages)
{
    rig *g = rig_new("dense");
    node nd;
    flps_energy e;

    node_init(&nd, STUB_GPU, 1);
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    g->cfg.gpu_clock = "max";
    rig_start(g);
    e = energy_now(g);
    cr_assert_eq(e.devices, 1);
    cr_assert_eq(e.gpus, 0);
    cr_assert_eq(e.gpu_clock_mhz, 0);
    cr_assert_not_null(strstr(e.why, "sees no GPU"), "%s", e.why);
    cr_assert_float_eq(stub_num(&nd.c, "d0.sets"), 0, 0, "no clock touched");
    rig_free(g);
    unsetenv("CUDA_VISIBLE_DEVICES");
    node_fini(&nd);
}

Test(client_energy, gpu_clock_is_set_recorded_and_restored_at_destroy)
{
    rig *g = rig_new("dense");
    node nd;
    flps_energy e;
    char record[400];

    node_init(&nd, STUB_GPU, 0);
    snprintf(record, sizeof(record), "%s/gpu_clock.rank0", nd.c.dir);
    g->cfg.gpu_clock = "1500";
    g->cfg.gpu_clock_record = record;
    rig_start(g);
    e = energy_now(g);
    cr_assert_str_eq(e.gpu_clock, "1500");
    cr_assert_eq(e.gpu_clock_mhz, 1530, "the supported clock nearest");
    cr_assert_eq(e.gpu_clock_chosen, 1);
    cr_assert_float_eq(stub_num(&nd.c, "d0.locked"), 1530, 0);
    cr_assert_eq(access(record, F_OK), 0, "recorded before it changed");
    rig_free(g);
    cr_assert_float_eq(stub_num(&nd.c, "d0.locked"), 0, 0, "restored");
    cr_assert_neq(access(record, F_OK), 0, "and the record removed");
    node_fini(&nd);
}

Test(client_energy, gpus_that_refuse_the_clock_run_at_default_said_once)
{
    rig *g = rig_new("dense");
    logbuf lb = {""};
    node nd;
    flps_energy e;

    node_init(&nd,
              STUB_GPU "d0.locked_perm no_permission\n"
                       "d0.app_perm no_permission\n",
              0);
    setenv("FLPS_GPU_CLOCK", "max", 1);
    flps_set_logger(keep_line, &lb);
    rig_start(g);
    push_all(g, ZERO, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    flps_set_logger(NULL, NULL);
    e = energy_now(g);
    cr_assert_str_eq(e.gpu_clock, "max", "from FLPS_GPU_CLOCK");
    cr_assert_eq(e.gpu_clock_mhz, 0, "the default clock");
    cr_assert_not_null(strstr(e.why, "refuses clock changes"), "%s", e.why);
    cr_assert_not_null(strstr(lb.text, "refuses clock changes"), "%s", lb.text);
    cr_assert_null(strstr(strstr(lb.text, "refuses") + 1, "refuses"),
                   "once: %s", lb.text);
    cr_assert_eq(e.devices, 1, "the energy is metered all the same");
    rig_free(g);
    unsetenv("FLPS_GPU_CLOCK");
    node_fini(&nd);
}

/* rig_create with the library's log lines kept in lb. */
static flps_err rig_create_logged(rig *g, logbuf *lb)
{
    flps_err rc;

    flps_set_logger(keep_line, lb);
    rc = rig_create(g);
    flps_set_logger(NULL, NULL);
    return rc;
}

Test(client_energy, a_gpu_clock_that_does_not_parse_fails_create)
{
    node nd;
    logbuf lb = {""};
    flps_energy e;
    rig *g;

    node_init(&nd, STUB_GPU, 0);
    g = rig_new("dense");
    g->cfg.gpu_clock = "fast";
    cr_assert_eq(rig_create_logged(g, &lb), FLPS_EINVAL);
    cr_assert_not_null(strstr(lb.text, "gpu_clock: 'fast' is not default"),
                       "%s", lb.text);
    cr_assert_eq(flps_client_energy(NULL, &e, sizeof(e)), FLPS_EINVAL);
    rig_free(g);
    /* The claim went with the failed client: the next one meters. */
    g = rig_new("dense");
    rig_start(g);
    cr_assert_eq(energy_now(g).devices, 1);
    rig_free(g);
    node_fini(&nd);
}

Test(client_metrics, a_federated_round_feeds_the_fl_series)
{
    serve_metrics_here();
    cr_assert_eq(flps_metrics_report_round(1, 3, 1), FLPS_OK);
    cr_assert_eq(flps_metrics_report_round(2, 2, 0), FLPS_OK);
    cr_assert_eq(flps_metrics_report_round(3, 1, 2), FLPS_EINVAL,
                 "more late clients than clients");
    cr_assert_eq(scraped("flworker_fl_round"), 2);
    cr_assert_eq(scraped("flworker_fl_clients_total"), 5);
    cr_assert_eq(scraped("flworker_fl_late_clients_total"), 1);
    flps_metrics_stop();
    cr_assert_eq(flps_metrics_report_round(4, 1, 0), FLPS_OK,
                 "nothing to feed without an endpoint");
}

/* ---- the window of dense pushes in flight per shard ---- */

/* Tensors 0, 1 and 2 pushed dense: parts 0, 1, 2 go to shard 0 and 3, 4,
 * 5 to shard 1 (the rig's even map). */
static rig *window_rig(int window)
{
    rig *g = rig_new("dense");

    g->cfg.push_window = window;
    cr_assert_eq(g->pm.nparts, 6);
    for (uint32_t i = 0; i < 6; i++)
        cr_assert_eq(g->pm.parts[i].shard, i < 3 ? 0 : 1);
    return g;
}

Test(client_window, at_most_w_pushes_per_shard_are_unanswered_and_all_arrive)
{
    for (int w = 1; w <= 3; w++) {
        rig *g = window_rig(w);
        size_t mark;
        flps_client_stats held, after;
        rig_start(g);
        mark = g->net.nlog;
        push_all(g, G0, 0);
        flps_client_get_stats(g->c, &held);
        cr_assert_eq(count_sent(&g->net, mark, PROTO_OP_PUSH),
                     (size_t)(w < 3 ? 2 * w : 6),
                     "window %d: %d pushes per shard sent, the rest held", w,
                     w);
        cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
        cr_assert_eq(count_sent(&g->net, mark, PROTO_OP_PUSH), 6,
                     "every part pushed once");
        for (uint32_t s = 0; s < NSHARDS; s++)
            cr_assert_leq(g->net.most_unanswered[s], (uint32_t)w,
                          "window %d: shard %u had %u unanswered", w, s,
                          g->net.most_unanswered[s]);
        /* A second iteration goes the same way. */
        push_all(g, G0, 1);
        cr_assert_eq(flps_client_wait(g->c, 1), FLPS_OK);
        for (uint32_t s = 0; s < NSHARDS; s++)
            cr_assert_leq(g->net.most_unanswered[s], (uint32_t)w);
        /* A held push counted its bytes when pushed: the bytes after
         * the wait are those after the pushes (the fake answers at once,
         * so nothing was sent again). */
        flps_client_get_stats(g->c, &after);
        cr_assert_gt(after.bytes_sent, held.bytes_sent);
        cr_assert_eq(after.resends, 0);
        rig_free(g);
    }
}

/* The dense rig on the even map in pieces of piece, under a window of
 * window pieces (not started). */
static rig *even_window_rig(uint32_t piece, int window)
{
    rig *g = rig_new("dense");

    g->cfg.part_size = piece;
    g->cfg.push_window = window;
    partmap_fini(&g->pm);
    cr_assert_eq(partmap_build_even(NUMEL, NTENSORS, NSHARDS, piece, &g->pm),
                 FLPS_OK);
    return g;
}

Test(client_window, small_pieces_ride_beside_each_other_within_one_piece)
{
    /* Pieces of 5: shard 0 gets w0 as 5 and 5 values, shard 1 w1 as 4
     * and 3, then w2's 3. A window of two pieces is 10 values in flight. */
    rig *g = even_window_rig(5, 2);

    cr_assert_eq(g->pm.nparts, 5);
    cr_assert_eq(g->pm.parts[2].numel, 4);
    rig_start(g);
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), 5);
    /* 5 + 5 fills the window. */
    cr_assert_eq(g->net.most_unanswered[0], 2);
    /* 4 + 3 + 3 is 10 values too: three pushes, where a window that
     * counted pushes would hold the third back for a round trip. */
    cr_assert_eq(g->net.most_unanswered[1], 3,
                 "the small pieces each waited a round trip");
    rig_free(g);
}

Test(client_window, held_pushes_count_their_bytes_when_pushed)
{
    rig *a = window_rig(1), *b = window_rig(-1);
    flps_client_stats sa, sb;

    rig_start(a);
    rig_start(b);
    push_all(a, G0, 0);
    push_all(b, G0, 0);
    cr_assert_lt(count_sent(&a->net, 0, PROTO_OP_PUSH),
                 count_sent(&b->net, 0, PROTO_OP_PUSH), "a holds, b does not");
    flps_client_get_stats(a->c, &sa);
    flps_client_get_stats(b->c, &sb);
    cr_assert_eq(sa.bytes_sent, sb.bytes_sent,
                 "each push's bytes are its own, sent or held");
    cr_assert_eq(sa.dense_bytes, sb.dense_bytes);
    cr_assert_eq(flps_client_wait(a->c, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(b->c, 0), FLPS_OK);
    flps_client_get_stats(a->c, &sa);
    flps_client_get_stats(b->c, &sb);
    cr_assert_eq(sa.bytes_sent, sb.bytes_sent);
    cr_assert_eq(sa.pushes, sb.pushes);
    rig_free(a);
    rig_free(b);
}

Test(client_window, a_negative_window_sends_every_push_at_once)
{
    rig *g = window_rig(-1);

    rig_start(g);
    g->net.script = drop_pushes; /* nothing is answered */
    push_all(g, G0, 0);
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), 6);
    cr_assert_eq(g->net.most_unanswered[0], 3);
    rig_free(g);
}

/* Pulls that take 2 ms each: the link init measures for an automatic
 * window moves about 10 kB/s (the rig's model is 120 bytes in 6 parts),
 * so WINDOW_LINK_S of it is under one piece. */
static int slow_pulls(fake_net *n, const sent *s)
{
    struct timespec ts = {0, 2000000};

    (void)n;
    if (s->msg.op == PROTO_OP_PULL)
        nanosleep(&ts, NULL);
    return 0;
}

Test(client_window, auto_sizes_the_window_to_a_slow_link_at_init)
{
    rig *g = window_rig(FLPS_PUSH_WINDOW_AUTO);
    size_t mark;

    cr_assert_eq(rig_create(g), FLPS_OK);
    g->net.script = slow_pulls;
    cr_assert_eq(flps_client_init(g->c), FLPS_OK);
    g->net.script = NULL;
    cr_assert_gt(count_sent(&g->net, 0, PROTO_OP_PULL), 6,
                 "init measured the link with pulls beyond the first");
    mark = g->net.nlog;
    push_all(g, G0, 0);
    cr_assert_eq(count_sent(&g->net, mark, PROTO_OP_PUSH), 2,
                 "one piece per shard in flight on a slow link");
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_eq(count_sent(&g->net, mark, PROTO_OP_PUSH), 6);
    for (uint32_t sh = 0; sh < NSHARDS; sh++)
        cr_assert_leq(g->net.most_unanswered[sh], 1);
    rig_free(g);
}

Test(client_window, auto_is_no_bound_on_a_link_that_holds_every_piece)
{
    rig *g = window_rig(FLPS_PUSH_WINDOW_AUTO);

    rig_start(g); /* the fake answers at once: a fast link */
    g->net.script = drop_pushes;
    push_all(g, G0, 0);
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), 6,
                 "every piece sent at once");
    rig_free(g);
}

Test(client_window, flps_push_window_auto_in_the_environment_sizes_it_too)
{
    rig *g = window_rig(0);
    size_t mark;

    cr_assert_eq(setenv("FLPS_PUSH_WINDOW", "auto", 1), 0);
    cr_assert_eq(rig_create(g), FLPS_OK);
    g->net.script = slow_pulls;
    cr_assert_eq(flps_client_init(g->c), FLPS_OK);
    g->net.script = drop_pushes;
    mark = g->net.nlog;
    push_all(g, G0, 0);
    cr_assert_eq(count_sent(&g->net, mark, PROTO_OP_PUSH), 2);
    rig_free(g);
    unsetenv("FLPS_PUSH_WINDOW");
}

Test(client_window, flps_push_window_in_the_environment_overrides_auto)
{
    rig *g = window_rig(FLPS_PUSH_WINDOW_AUTO);

    cr_assert_eq(setenv("FLPS_PUSH_WINDOW", "-1", 1), 0);
    rig_start(g);
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PULL), 6,
                 "no measuring pulls: init's own, one per part");
    g->net.script = drop_pushes;
    push_all(g, G0, 0);
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), 6,
                 "every piece sent at once, as the variable says");
    rig_free(g);
    unsetenv("FLPS_PUSH_WINDOW");
}

/* A slow shard 0: its first push is answered only when sent again. */
static int slow_first_push_to_shard_0(fake_net *n, const sent *s)
{
    if (s->msg.op != PROTO_OP_PUSH || s->peer != 0)
        return 0;
    return n->counter++ == 0;
}

Test(client_window, a_slow_shard_delays_its_held_pushes_and_nothing_else)
{
    rig *g = window_rig(1);

    g->cfg.retry_ms = 40;
    g->cfg.deadline_ms = 10000;
    rig_start(g);
    g->net.script = slow_first_push_to_shard_0;
    flps_set_logger(keep_line, &(logbuf){""}); /* the resend's warning */
    push_all(g, G0, 0);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    flps_set_logger(NULL, NULL);
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), 7,
                 "six parts, the slow one twice");
    cr_assert_leq(g->net.most_unanswered[0], 2,
                  "the window's push and its resend, nothing held");
    cr_assert_leq(g->net.most_unanswered[1], 1);
    rig_free(g);
}

Test(client_window, a_dead_shard_times_out_and_its_held_pushes_are_never_sent)
{
    rig *g = window_rig(1);
    logbuf lb = {""};

    push_into_silence(g, &lb);
    cr_assert_eq(find_sent(&g->net, 0, PROTO_OP_PUSH, 2), SIZE_MAX,
                 "part 2 waited behind part 0 on shard 0");
    assert_sticky(g, FLPS_ETIMEDOUT);
    rig_free(g);
}

/* Another worker pushed shard 0's parts in another order: the update of
 * part 0 comes only once part 2 is in too, and part 2 waits behind part 0
 * in a window of one. */
static int part_0_closes_with_part_2(fake_net *n, const sent *s)
{
    if (s->msg.op != PROTO_OP_PUSH)
        return 0;
    if (s->msg.part == 0) {
        n->counter = (int)(s - n->log); /* answered later */
        return 1;
    }
    if (s->msg.part == 2)
        fake_shard_answer(n, &n->log[n->counter]);
    return 0;
}

Test(client_window, a_window_waiting_on_itself_moves_after_a_stall)
{
    rig *g = window_rig(1);
    double t0;

    rig_start(g);
    g->net.script = part_0_closes_with_part_2;
    push_all(g, G0, 0);
    t0 = flps_mono_s();
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_geq(flps_mono_s() - t0, CREQ_WINDOW_STALL_S * 0.9,
                  "part 2 went when the window had not moved for a while");
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), 6);
    rig_free(g);
}

/* Backprop's order under a window of one piece, pieces of 2: w2 (parts
 * of shard 1 after w1's) is pushed first, then w1, then w0. The first
 * push of w2 is answered only once w1's last piece is in: a window that
 * kept push order would send w2's second piece next and wait on itself. */
static uint32_t w1_last, w2_first;

static int w2_waits_for_w1(fake_net *n, const sent *s)
{
    if (s->msg.op != PROTO_OP_PUSH)
        return 0;
    if (s->msg.part == w2_first && n->counter < 0) {
        n->counter = (int)(s - n->log); /* answered later */
        return 1;
    }
    if (s->msg.part == w1_last && n->counter >= 0)
        fake_shard_answer(n, &n->log[n->counter]);
    return 0;
}

/* The rig of pieces of 2 under a window of one piece, started, with the
 * script above. */
static rig *pieces_of_2_rig(void)
{
    rig *g = even_window_rig(2, 1);

    /* Shard 0: w0 in 5 pieces; shard 1: w1 in 4 (2, 2, 2, 1), w2 in 2. */
    w1_last = g->pm.first_part[2] - 1;
    w2_first = g->pm.first_part[2];
    cr_assert_eq(g->pm.parts[g->pm.first_part[1]].shard, 1);
    cr_assert_eq(w1_last - g->pm.first_part[1], 3);
    cr_assert_eq(g->pm.parts[w2_first].shard, 1);
    cr_assert_eq(g->pm.nparts, w2_first + 2);
    rig_start(g);
    g->net.counter = -1;
    g->net.script = w2_waits_for_w1;
    return g;
}

static void push_backwards(rig *g)
{
    for (int t = NTENSORS - 1; t >= 0; t--)
        cr_assert_eq(flps_client_push(g->c, (uint32_t)t, t ? ZERO : G0, 0),
                     FLPS_OK);
}

Test(client_window, held_pushes_go_in_layer_order_and_a_lower_one_passes)
{
    rig *g = pieces_of_2_rig();
    double t0;

    /* A caller that waits layer by layer (nothing is outstanding yet). */
    cr_assert_eq(flps_client_wait_layer(g->c, 0, 0), FLPS_OK);
    t0 = flps_mono_s();
    push_backwards(g);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_lt(flps_mono_s() - t0, CREQ_WINDOW_STALL_S * 0.9,
                 "no stall: w1's pieces went past w2's");
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), g->pm.nparts,
                 "every piece once");
    for (uint32_t pi = g->pm.first_part[1]; pi <= w1_last; pi++)
        cr_assert_lt(find_sent(&g->net, 0, PROTO_OP_PUSH, pi),
                     find_sent(&g->net, 0, PROTO_OP_PUSH, w2_first + 1),
                     "w1's piece %u went before w2's second, held earlier", pi);
    cr_assert_eq(g->net.most_unanswered[1], 2,
                 "w1's first piece went beside w2's unanswered first one");
    rig_free(g);
}

Test(client_window, without_waits_per_layer_held_pushes_keep_push_order)
{
    rig *g = pieces_of_2_rig();
    double t0 = flps_mono_s();

    push_backwards(g);
    cr_assert_eq(flps_client_wait(g->c, 0), FLPS_OK);
    cr_assert_eq(count_sent(&g->net, 0, PROTO_OP_PUSH), g->pm.nparts);
    cr_assert_lt(find_sent(&g->net, 0, PROTO_OP_PUSH, w2_first + 1),
                 find_sent(&g->net, 0, PROTO_OP_PUSH, g->pm.first_part[1]),
                 "w2's second piece, pushed first, went first");
    /* This script's shard answers out of push order, which real workers
     * pushing alike never make it do: the window waited on itself and
     * the stall rule moved it. */
    cr_assert_geq(flps_mono_s() - t0, CREQ_WINDOW_STALL_S * 0.9);
    rig_free(g);
}
