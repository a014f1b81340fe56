/* The RDMA transport (rdma.h): proto/transport.h over reliable-connected
 * queue pairs, one per peer, with the connection set-up exchanged over a
 * ZeroMQ channel on the peer's tcp:// endpoint (ROUTER on a listener, one
 * DEALER per connection on a connector).
 *
 * Per peer each side registers (pool.h): receive slots posted for the
 * peer, send slots, a large-message region the peer writes into, a
 * staging region to write from, and a credit block. A message that fits a
 * slot goes by SEND; a larger one by one RDMA WRITE WITH IMM of the whole
 * framed message (frame.h) from staging into the peer's large-message
 * region, where the receiver uses its frames in place until it releases
 * them. Both take one of the receiver's posted RECVs: a sender never posts
 * more than the receiver's credits (credit.h). The receiver returns
 * credits piggybacked on its own messages or by an RDMA WRITE of its
 * counts into the sender's credit block, which takes no RECV, so credit
 * updates can never deadlock against each other.
 *
 * Nothing waits without a bound: a connection whose exchange is not
 * answered, or whose peer keeps no credits for us, within timeout_ms is
 * dropped with a message; a queue pair error completion or a disconnect of
 * the exchange channel (seen through a ZeroMQ socket monitor) drops it at
 * once. A connector then makes the connection again in the background, as
 * ZeroMQ does; a listener frees the peer's slot.
 *
 * The receive side polls a peer's receive completions only while fewer
 * than RT_RXQ_MAX messages wait to be read, so a slow reader stops
 * reposting buffers, and its senders run out of credits: back-pressure. */
#include "rdma/rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/zmqmon.h"
#include "rdma/credit.h"
#include "rdma/exchange.h"
#include "rdma/frame.h"
#include "rdma/gid.h"
#include "rdma/pool.h"
#include "rdma/verbs.h"
#include "rdma/wc_status.h"

#define RT_SLOT_MASK ((1u << TRANSPORT_PEER_SLOT_BITS) - 1u)
#define RT_MAX_ID 256
#define RT_RXQ_MAX 256
#define RT_POLL_BATCH 32
#define RT_GID_SCAN 32
/* Send work requests beyond the credits: a credit write and a large
 * message may be in flight beside the SENDs. */
#define RT_SQ_EXTRA 4
#define RT_BACKOFF_MIN_S 0.05
#define RT_BACKOFF_MAX_S 1.0

enum { RT_WR_EAGER = 1, RT_WR_LARGE = 2, RT_WR_CTRL = 3 };

typedef enum {
    RT_FREE = 0,   /* listener slot not in use */
    RT_CONNECTING, /* connector: HELLO sent, no ACCEPT yet */
    RT_UP,         /* queue pair connected */
    RT_DOWN,       /* connector: lost, made again after a back-off */
} rt_state;

/* The credit block: the peer writes its counts into `in`; `out` is the
 * snapshot of ours being written to the peer. */
typedef struct rt_ctrl {
    uint64_t in_reposted, in_freed;
    uint64_t pad[2];
    uint64_t out_reposted, out_freed;
} rt_ctrl;

typedef struct rt_msg {
    struct rt_msg *next;
    size_t nframes;
    size_t total; /* framed bytes */
    transport_frame f[RDMA_FRAME_MAX];
} rt_msg;

typedef struct rt rt;
typedef struct rt_rx rt_rx;

typedef struct rt_peer {
    rt_state state;
    uint32_t gen; /* listener: reuses of the slot; connector: attempts */
    /* The exchange channel. */
    void *sock; /* connector: DEALER */
    void *mon;  /* connector: its monitor */
    char endpoint[256];
    unsigned char id[RT_MAX_ID]; /* listener: ROUTER routing id */
    size_t idlen;
    int fd;           /* listener: the descriptor the HELLO came on */
    uint32_t fdconn;  /* ... and which connection on it (rt.fdconn) */
    uint64_t session; /* connector: this attempt */
    double since;     /* when the current wait began */
    double backoff;   /* connector: seconds before the next attempt */
    /* Verbs. */
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    rdma_slots rslots, sslots;
    rdma_region landing, staging, ctrl;
    uint32_t psn;
    int registered; /* the pools above exist */
    rdma_xch remote;
    uint32_t sq_out; /* send work requests not completed */
    uint32_t sq_max;
    rdma_credit cred;   /* the peer's receive slots */
    rdma_credit lcred;  /* the peer's large-message region */
    rdma_credit_rx crx; /* our receive slots */
    uint64_t freed;     /* our region: large messages released */
    uint64_t freed_adv; /* ... the count last sent */
    rt_rx *landing_rx;  /* the message in our region, NULL when free */
    int staging_busy, ctrl_busy;
    rt_msg *qhead, *qtail;
    uint32_t qlen;
    int dropped_logged;
    /* Connector: the last attempt was refused (by the listener, or for
     * want of resources here): sends fail with why until one succeeds. */
    int refused;
    char why[200]; /* why it went down */
} rt_peer;

struct rt_rx {
    transport_rx rx;
    rt *owner;
    rt_rx *next;
    void *copy; /* a SEND's bytes, copied out of the slot */
    void *own;  /* a region left by a peer that went (freed at release) */
    uint32_t slot, gen;
    int large;
    flps_err err; /* FLPS_EPROTO: refused, why says why */
    char why[200];
};

struct rt {
    transport base;
    const rdma_verbs *v;
    transport_limits lim;
    int timeout_ms;
    size_t max_message;
    rdma_pool_plan plan;
    /* The device. */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    uint8_t port;
    uint16_t lid;
    uint8_t mtu;
    int roce;
    uint8_t gid[16];
    uint8_t gid_index;
    int gid_tbl_len;
    char devname[64];
    uint64_t memlock;
    uint64_t locked; /* bytes this transport has registered */
    /* ZeroMQ. */
    void *zctx;
    void *router, *rmon; /* listener */
    /* Listener: per descriptor, the connections accepted on it (<< 1)
     * and whether the last is open (bit 0), from the monitor's events.
     * A descriptor is reused as soon as a connection closes, and the
     * monitor's events come apart from the HELLOs: this tells a closed
     * connection's DISCONNECTED from the one now on its number. */
    uint32_t *fdconn;
    size_t nfdconn;
    rt_peer **peers;
    uint32_t npeers, cap;
    uint32_t next_poll;
    rt_rx *rxq_head, *rxq_tail;
    uint32_t rxq_len;
    uint32_t live; /* messages handed out, not released */
    int dead;
    uint64_t seq;
    double refuse_logged; /* listener: when a refusal was last logged */
    uint64_t refusals;    /* ... and how many since */
    /* The progress thread moves messages while the user's thread does
     * other work, as ZeroMQ's I/O thread does: lock guards every field
     * above but the constants set at creation (and base.stats, written
     * under it, read by the user without it); cond is signalled when a
     * message is queued for recv. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int started, stop;
};

/* --- small helpers ----------------------------------------------------- */

static flps_err rt_err(rt *t, flps_err rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static flps_err rt_err(rt *t, flps_err rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    flps_errbuf_vset(t->base.errmsg, sizeof(t->base.errmsg), rc, fmt, ap);
    va_end(ap);
    return rc;
}

static uint64_t rt_random(rt *t)
{
    /* Not secret: it only tells connection attempts and PSNs apart. */
    uint64_t x = (uint64_t)(flps_wall_s() * 1e9) ^ (uintptr_t)t ^
                 (++t->seq * 0x9e3779b97f4a7c15ull);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint32_t rt_peer_number(const rt *t, uint32_t slot)
{
    if (t->router == NULL)
        return slot;
    return slot | (t->peers[slot]->gen << TRANSPORT_PEER_SLOT_BITS);
}

static size_t rt_peer_limit(const rt_peer *p)
{
    if (p->remote.landing_len > 0)
        return p->remote.landing_len;
    return p->remote.slot_bytes;
}

/* --- messages ---------------------------------------------------------- */

static void rt_msg_free(rt_msg *m)
{
    for (size_t i = 0; i < m->nframes; i++)
        proto_buf_release(m->f[i].buf);
    flps_free(m);
}

static void rt_queue_drop(rt_peer *p)
{
    while (p->qhead != NULL) {
        rt_msg *m = p->qhead;
        p->qhead = m->next;
        rt_msg_free(m);
    }
    p->qtail = NULL;
    p->qlen = 0;
}

static void rt_rxq_push(rt *t, rt_rx *r)
{
    r->next = NULL;
    if (t->rxq_tail != NULL)
        t->rxq_tail->next = r;
    else
        t->rxq_head = r;
    t->rxq_tail = r;
    t->rxq_len++;
}

static void rt_free(rt *t)
{
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    flps_free(t->peers);
    flps_free(t->fdconn);
    flps_free(t);
}

static void rt_rx_free(rt_rx *r)
{
    free(r->copy);
    free(r->own);
    flps_free(r);
}

/* Release a message, the lock held (or the transport dead). */
static void rt_rx_release_locked(rt *t, rt_rx *r)
{
    if (r->large && !t->dead && r->slot < t->npeers) {
        rt_peer *p = t->peers[r->slot];
        if (p != NULL && p->gen == r->gen && p->landing_rx == r) {
            p->landing_rx = NULL;
            p->freed++;
        }
    }
    rt_rx_free(r);
    t->live--;
}

static void rt_rx_release(transport_rx *rx)
{
    rt_rx *r = rx->impl;
    rt *t = r->owner;

    /* After transport_destroy there is no lock and no other thread. */
    if (t->dead) {
        rt_rx_release_locked(t, r);
        if (t->live == 0)
            rt_free(t);
        return;
    }
    pthread_mutex_lock(&t->lock);
    rt_rx_release_locked(t, r);
    pthread_mutex_unlock(&t->lock);
}

/* --- peers: verbs resources --------------------------------------------- */

/* Free the peer's queue pair and pools; a message still using its
 * large-message region keeps that memory (freed at its release). */
static void rt_peer_teardown(rt *t, rt_peer *p)
{
    const rdma_verbs *v = t->v;

    if (p->qp != NULL)
        v->destroy_qp(p->qp);
    p->qp = NULL;
    if (p->scq != NULL)
        v->destroy_cq(p->scq);
    if (p->rcq != NULL)
        v->destroy_cq(p->rcq);
    p->scq = p->rcq = NULL;
    if (p->registered) {
        rdma_slots_fini(&p->rslots, v);
        rdma_slots_fini(&p->sslots, v);
        rdma_region_fini(&p->staging, v);
        rdma_region_fini(&p->ctrl, v);
        if (p->landing_rx != NULL) {
            rdma_region_dereg(&p->landing, v);
            p->landing_rx->own = p->landing.addr;
            p->landing_rx->large = 0;
            p->landing_rx = NULL;
            memset(&p->landing, 0, sizeof(p->landing));
        } else {
            rdma_region_fini(&p->landing, v);
        }
        t->locked -= t->plan.peer_bytes;
        p->registered = 0;
    }
    p->sq_out = 0;
    p->staging_busy = p->ctrl_busy = 0;
}

/* Make the peer's completion queues, queue pair (in INIT) and pools. */
static flps_err rt_peer_setup(rt *t, rt_peer *p, char *why, size_t whylen)
{
    const rdma_verbs *v = t->v;
    const rdma_pool_plan *pl = &t->plan;
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr qa;
    const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    flps_err rc;

    rc = rdma_pool_memlock_check(t->locked, pl->peer_bytes, t->memlock, why,
                                 whylen);
    if (rc != FLPS_OK)
        return rc;
    p->sq_max = pl->credits + RT_SQ_EXTRA;
    p->scq = v->create_cq(t->ctx, (int)p->sq_max, NULL, NULL, 0);
    p->rcq = v->create_cq(t->ctx, (int)pl->credits, NULL, NULL, 0);
    if (p->scq == NULL || p->rcq == NULL) {
        rc = flps_errbuf_set(why, whylen, FLPS_ESYS,
                             "ibv_create_cq on %s failed: %s", t->devname,
                             strerror(errno));
        goto fail;
    }
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = p->scq;
    ia.recv_cq = p->rcq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = p->sq_max;
    ia.cap.max_recv_wr = pl->credits;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    p->qp = v->create_qp(t->pd, &ia);
    if (p->qp == NULL) {
        rc = flps_errbuf_set(why, whylen, FLPS_ESYS,
                             "ibv_create_qp on %s failed: %s", t->devname,
                             strerror(errno));
        goto fail;
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    qa.pkey_index = 0;
    qa.port_num = t->port;
    qa.qp_access_flags = rw;
    if (v->modify_qp(p->qp, &qa,
                     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                         IBV_QP_ACCESS_FLAGS) != 0) {
        rc = flps_errbuf_set(why, whylen, FLPS_ESYS,
                             "moving the queue pair to INIT failed on %s "
                             "port %u",
                             t->devname, t->port);
        goto fail;
    }
    rc = rdma_slots_init(&p->rslots, v, t->pd, pl->credits, pl->slot_bytes,
                         IBV_ACCESS_LOCAL_WRITE, why, whylen);
    if (rc != FLPS_OK)
        goto fail;
    rc = rdma_slots_init(&p->sslots, v, t->pd, pl->credits, pl->slot_bytes, 0,
                         why, whylen);
    if (rc != FLPS_OK)
        goto fail_r;
    rc = rdma_region_init(&p->ctrl, v, t->pd, sizeof(rt_ctrl), rw, why, whylen);
    if (rc != FLPS_OK)
        goto fail_s;
    if (pl->landing_bytes > 0) {
        rc = rdma_region_init(&p->landing, v, t->pd, pl->landing_bytes, rw, why,
                              whylen);
        if (rc != FLPS_OK)
            goto fail_c;
        rc = rdma_region_init(&p->staging, v, t->pd, pl->landing_bytes, 0, why,
                              whylen);
        if (rc != FLPS_OK)
            goto fail_l;
    }
    p->registered = 1;
    t->locked += pl->peer_bytes;
    p->psn = (uint32_t)rt_random(t) & 0xffffffu;
    rdma_credit_rx_init(&p->crx, pl->credits);
    p->freed = p->freed_adv = 0;
    return FLPS_OK;
fail_l:
    rdma_region_fini(&p->landing, v);
fail_c:
    rdma_region_fini(&p->ctrl, v);
fail_s:
    rdma_slots_fini(&p->sslots, v);
fail_r:
    rdma_slots_fini(&p->rslots, v);
fail:
    rt_peer_teardown(t, p);
    return rc;
}

/* What this side tells the other in HELLO / ACCEPT. */
static void rt_local_xch(const rt *t, const rt_peer *p, rdma_xch_type type,
                         uint64_t session, rdma_xch *x)
{
    memset(x, 0, sizeof(*x));
    x->type = type;
    x->qp_num = p->qp->qp_num;
    x->psn = p->psn;
    x->lid = t->lid;
    x->mtu = t->mtu;
    memcpy(x->gid, t->gid, 16);
    x->gid_index = t->gid_index;
    x->credits = t->plan.credits;
    x->slot_bytes = (uint32_t)t->plan.slot_bytes;
    if (p->landing.mr != NULL) {
        x->landing_addr = (uint64_t)(uintptr_t)p->landing.addr;
        x->landing_len = p->landing.len;
        x->landing_rkey = p->landing.mr->rkey;
    }
    x->ctrl_addr = (uint64_t)(uintptr_t)p->ctrl.addr;
    x->ctrl_rkey = p->ctrl.mr->rkey;
    x->max_message_bytes = t->max_message;
    x->session = session;
}

static flps_err rt_post_recv(rt *t, rt_peer *p, uint32_t slot)
{
    struct ibv_sge sge;
    struct ibv_recv_wr wr, *bad = NULL;

    sge.addr = (uint64_t)(uintptr_t)rdma_slots_addr(&p->rslots, slot);
    sge.length = (uint32_t)p->rslots.slot_bytes;
    sge.lkey = p->rslots.reg.mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return t->v->post_recv(p->qp, &wr, &bad) == 0 ? FLPS_OK : FLPS_ESYS;
}

/* Connect the queue pair to the remote one (RTR, RTS) and post every
 * receive slot. */
static flps_err rt_peer_connect(rt *t, rt_peer *p, const rdma_xch *r, char *why,
                                size_t whylen)
{
    struct ibv_qp_attr qa;
    int mask;

    p->remote = *r;
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTR;
    qa.path_mtu = (enum ibv_mtu)(r->mtu < t->mtu ? r->mtu : t->mtu);
    qa.dest_qp_num = r->qp_num;
    qa.rq_psn = r->psn;
    qa.max_dest_rd_atomic = 1;
    qa.min_rnr_timer = 12;
    qa.ah_attr.dlid = r->lid;
    qa.ah_attr.port_num = t->port;
    if (t->roce) {
        qa.ah_attr.is_global = 1;
        memcpy(qa.ah_attr.grh.dgid.raw, r->gid, 16);
        qa.ah_attr.grh.sgid_index = t->gid_index;
        qa.ah_attr.grh.hop_limit = 64;
    }
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (t->v->modify_qp(p->qp, &qa, mask) != 0)
        return flps_errbuf_set(why, whylen, FLPS_ESYS,
                               "moving the queue pair to RTR (toward remote "
                               "QP %u, LID %u) failed: the address is not "
                               "reachable from %s port %u (for RoCE: GID "
                               "index %u here, %u there must reach each "
                               "other; see `ibv_devinfo -v`)",
                               r->qp_num, r->lid, t->devname, t->port,
                               t->gid_index, r->gid_index);
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTS;
    qa.timeout = 14;
    qa.retry_cnt = 7;
    /* 6, not 7 (infinite): credits keep RECVs posted, so an RNR is a
     * bug that must surface as an error, not a stall. */
    qa.rnr_retry = 6;
    qa.sq_psn = p->psn;
    qa.max_rd_atomic = 1;
    mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    if (t->v->modify_qp(p->qp, &qa, mask) != 0)
        return flps_errbuf_set(why, whylen, FLPS_ESYS,
                               "moving the queue pair to RTS failed");
    for (uint32_t i = 0; i < p->rslots.n; i++)
        if (rt_post_recv(t, p, i) != FLPS_OK)
            return flps_errbuf_set(why, whylen, FLPS_ESYS,
                                   "posting receive buffers failed");
    rdma_credit_init(&p->cred, r->credits);
    rdma_credit_init(&p->lcred, r->landing_len > 0 ? 1 : 0);
    p->state = RT_UP;
    p->since = flps_mono_s();
    p->backoff = RT_BACKOFF_MIN_S;
    return FLPS_OK;
}

/* --- the exchange channel ---------------------------------------------- */

static flps_err rt_send_xch(rt *t, rt_peer *p, const rdma_xch *x)
{
    unsigned char buf[RDMA_XCH_MAX_BYTES];
    size_t len = 0;
    void *s = t->router != NULL ? t->router : p->sock;

    if (rdma_xch_encode(x, buf, sizeof(buf), &len) != FLPS_OK)
        return FLPS_EINVAL;
    if (t->router != NULL &&
        zmq_send(s, p->id, p->idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return FLPS_ECLOSED;
    if (zmq_send(s, buf, len, ZMQ_DONTWAIT) < 0)
        return FLPS_ECLOSED;
    return FLPS_OK;
}

static void rt_refuse(rt *t, const void *id, size_t idlen, const char *text)
{
    rt_peer tmp;
    rdma_xch x;

    memset(&x, 0, sizeof(x));
    x.type = RDMA_XCH_REFUSE;
    snprintf(x.text, sizeof(x.text), "%.255s", text);
    for (char *c = x.text; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    memcpy(tmp.id, id, idlen);
    tmp.idlen = idlen;
    rt_send_xch(t, &tmp, &x);
}

/* The peer is gone (why says why). A listener frees its slot; a
 * connector makes the connection again after a back-off. */
static void rt_peer_fail(rt *t, uint32_t slot, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void rt_peer_fail(rt *t, uint32_t slot, const char *fmt, ...)
{
    rt_peer *p = t->peers[slot];
    char why[sizeof(p->why)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    /* A connector retrying against the same refusal says it once. */
    if (strcmp(why, p->why) != 0 || t->router != NULL)
        log_warn("RDMA %s: peer %u (%s) lost: %s", t->devname,
                 rt_peer_number(t, slot),
                 t->router != NULL ? "connector" : p->endpoint, why);
    memcpy(p->why, why, sizeof(why));
    rt_peer_teardown(t, p);
    if (t->router != NULL) {
        rt_queue_drop(p);
        p->state = RT_FREE;
        p->idlen = 0;
        p->fd = -1;
        p->gen = (p->gen + 1) & (UINT32_MAX >> TRANSPORT_PEER_SLOT_BITS);
    } else {
        p->state = RT_DOWN;
        p->gen++;
        p->since = flps_mono_s();
    }
}

/* Connector: start an attempt (a new queue pair and a HELLO). */
static void rt_connector_attempt(rt *t, uint32_t slot)
{
    rt_peer *p = t->peers[slot];
    char why[300];
    rdma_xch x;

    p->since = flps_mono_s();
    if (rt_peer_setup(t, p, why, sizeof(why)) != FLPS_OK) {
        if (strncmp(p->why, why, sizeof(p->why) - 1) != 0)
            log_error("RDMA connection to %s: %s", p->endpoint, why);
        snprintf(p->why, sizeof(p->why), "%.199s", why);
        p->refused = 1;
        p->state = RT_DOWN;
        return;
    }
    p->session = rt_random(t);
    rt_local_xch(t, p, RDMA_XCH_HELLO, p->session, &x);
    if (rt_send_xch(t, p, &x) != FLPS_OK) {
        rt_peer_teardown(t, p);
        p->state = RT_DOWN;
        return;
    }
    p->state = RT_CONNECTING;
}

static flps_err rt_grow(rt *t)
{
    rt_peer **np;
    uint32_t cap;

    if (t->npeers < t->cap)
        return FLPS_OK;
    cap = t->cap ? t->cap * 2 : 8;
    np = flps_realloc(t->peers, cap * sizeof(*np));
    if (np == NULL)
        return FLPS_ENOMEM;
    t->peers = np;
    t->cap = cap;
    return FLPS_OK;
}

/* The descriptor a message came on (any part of it may say). */
static int rt_srcfd(zmq_msg_t *parts, int n)
{
    for (int i = n; i-- > 0;) {
        int fd = zmq_msg_get(&parts[i], ZMQ_SRCFD);
        if (fd >= 0)
            return fd;
    }
    return -1;
}

/* Log a refusal, at most once a minute (a refused connector tries again
 * every second), with the count of those not logged. */
static void rt_refuse_logged(rt *t, const char *what, const char *why)
{
    const double now = flps_mono_s();

    t->refusals++;
    if (t->refuse_logged != 0 && now - t->refuse_logged < 60)
        return;
    log_warn("%s: %s (%llu refusal(s) since the last such line)", what, why,
             (unsigned long long)t->refusals);
    t->refuse_logged = now;
    t->refusals = 0;
}

static void rt_listener_monitor(rt *t);
static uint32_t *rt_fdconn(rt *t, uint32_t fd);

/* Listener: a HELLO (or garbage) from routing id `id`. */
static void rt_on_hello(rt *t, const void *id, size_t idlen, int fd,
                        const void *data, size_t len)
{
    char why[300];
    rdma_xch x, mine;
    uint32_t slot = UINT32_MAX;
    uint32_t limit, conn = 0;
    uint32_t *c;
    rt_peer *p;

    /* The events of this HELLO's connection are queued by now (ZeroMQ
     * reports an accept before it reads from the connection): take them,
     * and with them any earlier connection's close on this descriptor. */
    rt_listener_monitor(t);
    c = fd >= 0 ? rt_fdconn(t, (uint32_t)fd) : NULL;
    if (c != NULL && *c != 0) {
        if ((*c & 1u) == 0)
            return; /* that connection has closed already */
        conn = *c;
    }
    memset(&x, 0, sizeof(x));
    if (rdma_xch_decode(data, len, &x, why, sizeof(why)) != FLPS_OK ||
        x.type != RDMA_XCH_HELLO) {
        if (x.type != 0 && x.type != RDMA_XCH_HELLO)
            snprintf(why, sizeof(why),
                     "a listener takes only HELLO exchange messages, not "
                     "type %d",
                     (int)x.type);
        rt_refuse_logged(t, "RDMA exchange message refused", why);
        rt_refuse(t, id, idlen, why);
        return;
    }
    /* The same connector again (it lost its connection and made a new
     * one): the old connection goes first. */
    for (uint32_t i = 0; i < t->npeers; i++) {
        p = t->peers[i];
        if (p->state != RT_FREE && p->idlen == idlen &&
            memcmp(p->id, id, idlen) == 0) {
            rt_peer_fail(t, i, "the connector connected again");
            slot = i;
            break;
        }
    }
    for (uint32_t i = 0; slot == UINT32_MAX && i < t->npeers; i++)
        if (t->peers[i]->state == RT_FREE)
            slot = i;
    limit = t->lim.max_peers ? t->lim.max_peers : RT_SLOT_MASK;
    if (slot == UINT32_MAX) {
        if (t->npeers >= limit || rt_grow(t) != FLPS_OK ||
            (t->peers[t->npeers] = flps_calloc(1, sizeof(rt_peer))) == NULL) {
            snprintf(why, sizeof(why),
                     "the RDMA listener has no room for another peer "
                     "(max_peers %u)",
                     limit);
            t->base.stats.conns_refused++;
            rt_refuse_logged(t, "RDMA connection refused", why);
            rt_refuse(t, id, idlen, why);
            return;
        }
        slot = t->npeers++;
        t->peers[slot]->fd = -1;
    }
    p = t->peers[slot];
    memcpy(p->id, id, idlen);
    p->idlen = idlen;
    p->fd = fd;
    p->fdconn = conn;
    if (rt_peer_setup(t, p, why, sizeof(why)) != FLPS_OK ||
        rt_peer_connect(t, p, &x, why, sizeof(why)) != FLPS_OK) {
        rt_refuse_logged(t, "RDMA connection refused", why);
        rt_refuse(t, id, idlen, why);
        rt_peer_teardown(t, p);
        p->state = RT_FREE;
        p->idlen = 0;
        return;
    }
    rt_local_xch(t, p, RDMA_XCH_ACCEPT, x.session, &mine);
    if (rt_send_xch(t, p, &mine) != FLPS_OK)
        rt_peer_fail(t, slot, "the exchange reply could not be sent");
}

/* Listener: read every exchange message and monitor event waiting. */
static void rt_listener_exchange(rt *t)
{
    for (;;) {
        zmq_msg_t parts[3];
        int n = 0, more = 1;

        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, t->router, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < 3)
                parts[n++] = m;
            else
                zmq_msg_close(&m);
        }
        if (n == 0)
            break;
        if (n == 2)
            rt_on_hello(t, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]),
                        rt_srcfd(parts, n), zmq_msg_data(&parts[1]),
                        zmq_msg_size(&parts[1]));
        else if (n > 0 && zmq_msg_size(&parts[0]) <= RT_MAX_ID)
            rt_refuse(t, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]),
                      "an RDMA exchange message is one frame");
        for (int i = 0; i < n; i++)
            zmq_msg_close(&parts[i]);
    }
}

#define RT_FDCONN_MAX (1u << 20) /* descriptors tracked */

/* The entry of descriptor fd, grown to hold it; NULL past the limit or
 * without memory (its connections are then told apart by number only). */
static uint32_t *rt_fdconn(rt *t, uint32_t fd)
{
    if (fd >= RT_FDCONN_MAX)
        return NULL;
    if (fd >= t->nfdconn) {
        size_t n = t->nfdconn ? t->nfdconn : 64;
        uint32_t *nt;
        while (n <= fd)
            n *= 2;
        nt = flps_realloc(t->fdconn, n * sizeof(*nt));
        if (nt == NULL)
            return NULL;
        memset(nt + t->nfdconn, 0, (n - t->nfdconn) * sizeof(*nt));
        t->fdconn = nt;
        t->nfdconn = n;
    }
    return &t->fdconn[fd];
}

/* Listener: the monitor's events, in the order the connections had them.
 * A DISCONNECTED fails only the peer whose HELLO came on that connection,
 * not one whose connection has since been given the same descriptor. */
static void rt_listener_monitor(rt *t)
{
    uint16_t ev;
    uint32_t fd;

    while (zmqmon_next(t->rmon, &ev, &fd)) {
        uint32_t *c = rt_fdconn(t, fd);
        if (ev == ZMQ_EVENT_ACCEPTED) {
            if (c != NULL)
                *c = (((*c >> 1) + 1) << 1) | 1u;
            continue;
        }
        if (ev != ZMQ_EVENT_DISCONNECTED)
            continue;
        for (uint32_t i = 0; i < t->npeers; i++) {
            rt_peer *p = t->peers[i];
            if (p->state != RT_FREE && p->fd == (int)fd &&
                (c == NULL || p->fdconn == 0 || p->fdconn == *c))
                rt_peer_fail(t, i,
                             "its exchange channel closed: the process "
                             "went away");
        }
        if (c != NULL)
            *c &= ~1u;
    }
}

/* Connector: exchange messages and monitor events of peer slot. */
static void rt_connector_exchange(rt *t, uint32_t slot)
{
    rt_peer *p = t->peers[slot];
    unsigned char buf[RDMA_XCH_MAX_BYTES + 1];
    uint16_t ev;
    uint32_t val;
    int n;

    while (zmqmon_next(p->mon, &ev, &val))
        if (ev == ZMQ_EVENT_DISCONNECTED && p->state != RT_DOWN)
            rt_peer_fail(t, slot,
                         "its exchange channel closed: the listener went "
                         "away");
    while ((n = zmq_recv(p->sock, buf, sizeof(buf), ZMQ_DONTWAIT)) >= 0) {
        char why[300];
        rdma_xch x;

        if ((size_t)n > sizeof(buf) ||
            rdma_xch_decode(buf, (size_t)n, &x, why, sizeof(why)) != FLPS_OK) {
            if ((size_t)n > sizeof(buf))
                snprintf(why, sizeof(why), "exchange message too long");
            log_warn("RDMA exchange from %s refused: %s", p->endpoint, why);
            continue;
        }
        if (x.type == RDMA_XCH_REFUSE) {
            if (p->state == RT_CONNECTING) {
                rt_peer_fail(t, slot, "the listener refused: %s", x.text);
                p->refused = 1;
            }
            continue;
        }
        if (x.type != RDMA_XCH_ACCEPT || p->state != RT_CONNECTING ||
            x.session != p->session)
            continue; /* stale: an answer to an earlier attempt */
        if (rt_peer_connect(t, p, &x, why, sizeof(why)) != FLPS_OK)
            rt_peer_fail(t, slot, "%s", why);
        else
            p->refused = 0;
    }
}

/* --- the data path ------------------------------------------------------ */

static flps_err rt_post_send(rt *t, rt_peer *p, int kind, uint32_t slot,
                             enum ibv_wr_opcode op, void *addr, size_t len,
                             uint32_t lkey, uint64_t raddr, uint32_t rkey,
                             uint32_t imm)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad = NULL;

    sge.addr = (uint64_t)(uintptr_t)addr;
    sge.length = (uint32_t)len;
    sge.lkey = lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = ((uint64_t)kind << 32) | slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (t->v->post_send(p->qp, &wr, &bad) != 0)
        return FLPS_ESYS;
    p->sq_out++;
    return FLPS_OK;
}

/* Post what the credits allow of the peer's queue, and a credit update
 * when one is due. */
static void rt_flush(rt *t, uint32_t slot)
{
    rt_peer *p = t->peers[slot];

    while (p->state == RT_UP && p->qhead != NULL) {
        rt_msg *m = p->qhead;
        const size_t eager_max = p->remote.slot_bytes < p->sslots.slot_bytes
                                     ? p->remote.slot_bytes
                                     : p->sslots.slot_bytes;
        int large = m->total > eager_max;
        size_t used = 0;
        uint32_t s = 0;

        if (large && (p->staging.addr == NULL || m->total > p->staging.len ||
                      m->total > p->remote.landing_len)) {
            /* Checked at send against what is known then; a peer that
             * came back with smaller buffers cannot take it. */
            log_warn("RDMA: message of %zu bytes dropped: peer %u accepts "
                     "at most %zu (its max_message_bytes)",
                     m->total, rt_peer_number(t, slot), rt_peer_limit(p));
            t->base.stats.msgs_dropped++;
            p->qhead = m->next;
            if (p->qhead == NULL)
                p->qtail = NULL;
            p->qlen--;
            rt_msg_free(m);
            continue;
        }
        if (rdma_credit_available(&p->cred) == 0 || p->sq_out >= p->sq_max)
            break;
        if (large && (p->staging_busy || rdma_credit_available(&p->lcred) == 0))
            break;
        if (!large && p->sslots.nfree == 0)
            break;
        if (large) {
            rdma_frame_encode(m->f, m->nframes,
                              rdma_credit_rx_advertise(&p->crx), p->freed,
                              p->staging.addr, p->staging.len, &used);
            if (rt_post_send(t, p, RT_WR_LARGE, 0, IBV_WR_RDMA_WRITE_WITH_IMM,
                             p->staging.addr, used, p->staging.mr->lkey,
                             p->remote.landing_addr, p->remote.landing_rkey,
                             (uint32_t)(used / 8)) != FLPS_OK) {
                rt_peer_fail(t, slot, "ibv_post_send failed: %s",
                             strerror(errno));
                return;
            }
            p->staging_busy = 1;
            rdma_credit_take(&p->lcred);
        } else {
            rdma_slots_get(&p->sslots, &s);
            rdma_frame_encode(
                m->f, m->nframes, rdma_credit_rx_advertise(&p->crx), p->freed,
                rdma_slots_addr(&p->sslots, s), p->sslots.slot_bytes, &used);
            if (rt_post_send(t, p, RT_WR_EAGER, s, IBV_WR_SEND,
                             rdma_slots_addr(&p->sslots, s), used,
                             p->sslots.reg.mr->lkey, 0, 0, 0) != FLPS_OK) {
                rdma_slots_put(&p->sslots, s);
                rt_peer_fail(t, slot, "ibv_post_send failed: %s",
                             strerror(errno));
                return;
            }
        }
        p->freed_adv = p->freed;
        rdma_credit_take(&p->cred);
        p->qhead = m->next;
        if (p->qhead == NULL)
            p->qtail = NULL;
        p->qlen--;
        p->since = flps_mono_s();
        rt_msg_free(m);
    }
    if (p->state == RT_UP && !p->ctrl_busy && p->sq_out < p->sq_max &&
        (rdma_credit_rx_update_is_due(&p->crx, p->qhead == NULL) ||
         p->freed != p->freed_adv)) {
        rt_ctrl *c = (rt_ctrl *)p->ctrl.addr;
        c->out_reposted = rdma_credit_rx_advertise(&p->crx);
        c->out_freed = p->freed;
        p->freed_adv = p->freed;
        if (rt_post_send(t, p, RT_WR_CTRL, 0, IBV_WR_RDMA_WRITE,
                         &c->out_reposted, 16, p->ctrl.mr->lkey,
                         p->remote.ctrl_addr, p->remote.ctrl_rkey,
                         0) != FLPS_OK) {
            rt_peer_fail(t, slot, "ibv_post_send failed: %s", strerror(errno));
            return;
        }
        p->ctrl_busy = 1;
    }
}

/* Take the credits the peer gave back (piggybacked or written). */
static int rt_take_credits(rt *t, uint32_t slot, uint64_t reposted,
                           uint64_t freed)
{
    rt_peer *p = t->peers[slot];

    if (rdma_credit_return(&p->cred, reposted) != FLPS_OK ||
        rdma_credit_return(&p->lcred, freed) != FLPS_OK) {
        rt_peer_fail(t, slot,
                     "it returned more credits than it was sent "
                     "messages: a broken or hostile peer");
        return -1;
    }
    return 0;
}

/* One receive completion of slot's queue pair. */
static void rt_on_recv(rt *t, uint32_t slot, const struct ibv_wc *wc)
{
    rt_peer *p = t->peers[slot];
    uint32_t rs = (uint32_t)wc->wr_id;
    const void *src;
    size_t len;
    rdma_frame_view view;
    rt_rx *r;
    flps_err rc;

    if (rs >= p->rslots.n) {
        rt_peer_fail(t, slot, "a completion for receive slot %u", rs);
        return;
    }
    r = flps_calloc(1, sizeof(*r));
    if (r == NULL) {
        rt_peer_fail(t, slot, "out of memory for a received message");
        return;
    }
    r->owner = t;
    r->slot = slot;
    r->gen = p->gen;
    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        len = (size_t)ntohl(wc->imm_data) * 8;
        if (p->landing.addr == NULL || len > p->landing.len ||
            p->landing_rx != NULL) {
            rt_rx_free(r);
            rt_peer_fail(t, slot,
                         "it wrote a large message of %zu bytes without "
                         "the credit for it",
                         len);
            return;
        }
        src = p->landing.addr;
        r->large = 1;
    } else {
        len = wc->byte_len;
        if (len > p->rslots.slot_bytes) {
            rt_rx_free(r);
            rt_peer_fail(t, slot, "a receive of %zu bytes", len);
            return;
        }
        /* Copied out so the slot goes back to the sender at once. */
        r->copy = malloc(len > 0 ? len : 1);
        if (r->copy == NULL) {
            rt_rx_free(r);
            rt_peer_fail(t, slot, "out of memory for a received message");
            return;
        }
        memcpy(r->copy, rdma_slots_addr(&p->rslots, rs), len);
        src = r->copy;
    }
    if (rt_post_recv(t, p, rs) != FLPS_OK) {
        rt_rx_free(r);
        rt_peer_fail(t, slot, "posting a receive buffer failed");
        return;
    }
    rdma_credit_rx_reposted(&p->crx);
    rc = rdma_frame_decode(src, len, t->lim.max_frame_bytes, &view, r->why,
                           sizeof(r->why));
    if (rc == FLPS_ERANGE || (rc != FLPS_OK && r->large)) {
        char why[200];
        snprintf(why, sizeof(why), "%s", r->why);
        rt_rx_free(r);
        rt_peer_fail(t, slot, "%s", why);
        return;
    }
    if (rc == FLPS_OK &&
        rt_take_credits(t, slot, view.credits, view.freed) != 0) {
        rt_rx_free(r);
        return;
    }
    if (r->large)
        p->landing_rx = r;
    r->rx.impl = r;
    r->rx.release = rt_rx_release;
    r->rx.peer = rt_peer_number(t, slot);
    r->rx.wire_bytes = len;
    if (rc != FLPS_OK) {
        r->err = FLPS_EPROTO;
    } else if (view.nframes > PROTO_MAX_FRAMES) {
        r->err = FLPS_EPROTO;
        snprintf(r->why, sizeof(r->why),
                 "message with more than %d frames dropped", PROTO_MAX_FRAMES);
    } else {
        r->rx.nframes = view.nframes;
        for (size_t i = 0; i < view.nframes; i++)
            r->rx.frames[i] = view.frames[i];
    }
    rt_rxq_push(t, r);
}

/* Poll the peer's completions, read its credit block, post what waits.
 * Returns whether anything happened. */
static int rt_progress_peer(rt *t, uint32_t slot)
{
    rt_peer *p = t->peers[slot];
    struct ibv_wc wc[RT_POLL_BATCH];
    int n, did = 0;
    double now;

    if (t->router == NULL) {
        rt_connector_exchange(t, slot);
        if (p->state == RT_DOWN && flps_mono_s() - p->since >= p->backoff) {
            p->backoff = p->backoff * 2 > RT_BACKOFF_MAX_S ? RT_BACKOFF_MAX_S
                                                           : p->backoff * 2;
            rt_connector_attempt(t, slot);
        }
    }
    if (p->state == RT_CONNECTING &&
        flps_mono_s() - p->since > t->timeout_ms / 1000.0) {
        rt_peer_fail(t, slot,
                     "no answer to the RDMA exchange from %s within %d ms: "
                     "is the listener running there with transport rdma?",
                     p->endpoint, t->timeout_ms);
        return 1;
    }
    if (p->state != RT_UP)
        return 0;
    while ((n = t->v->poll_cq(p->scq, RT_POLL_BATCH, wc)) > 0) {
        did = 1;
        for (int i = 0; i < n; i++) {
            int kind = (int)(wc[i].wr_id >> 32);
            if (wc[i].status != IBV_WC_SUCCESS) {
                rt_peer_fail(t, slot, "%s (%s)",
                             rdma_wc_status_message(wc[i].status),
                             rdma_wc_status_name(wc[i].status));
                return 1;
            }
            p->sq_out--;
            if (kind == RT_WR_EAGER)
                rdma_slots_put(&p->sslots, (uint32_t)wc[i].wr_id);
            else if (kind == RT_WR_LARGE)
                p->staging_busy = 0;
            else
                p->ctrl_busy = 0;
        }
    }
    if (n < 0) {
        rt_peer_fail(t, slot, "ibv_poll_cq failed");
        return 1;
    }
    while (t->rxq_len < RT_RXQ_MAX &&
           (n = t->v->poll_cq(p->rcq, RT_POLL_BATCH, wc)) > 0) {
        did = 1;
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                rt_peer_fail(t, slot, "%s (%s)",
                             rdma_wc_status_message(wc[i].status),
                             rdma_wc_status_name(wc[i].status));
                return 1;
            }
            rt_on_recv(t, slot, &wc[i]);
            if (p->state != RT_UP)
                return 1;
        }
    }
    {
        const rt_ctrl *c = (const rt_ctrl *)p->ctrl.addr;
        uint64_t rep = __atomic_load_n(&c->in_reposted, __ATOMIC_ACQUIRE);
        uint64_t fr = __atomic_load_n(&c->in_freed, __ATOMIC_ACQUIRE);
        if (rt_take_credits(t, slot, rep, fr) != 0)
            return 1;
    }
    rt_flush(t, slot);
    if (p->state != RT_UP)
        return 1;
    now = flps_mono_s();
    if (p->qhead == NULL)
        p->since = now;
    else if (now - p->since > t->timeout_ms / 1000.0) {
        rt_peer_fail(t, slot,
                     "it has not taken a message for %d ms (%u waiting): "
                     "it stopped reading or is gone",
                     t->timeout_ms, p->qlen);
        return 1;
    }
    return did;
}

static int rt_progress(rt *t)
{
    int did = 0;

    if (t->router != NULL) {
        rt_listener_monitor(t);
        rt_listener_exchange(t);
    }
    for (uint32_t k = 0; k < t->npeers; k++) {
        uint32_t i = (t->next_poll + k) % t->npeers;
        if (t->peers[i]->state != RT_FREE)
            did |= rt_progress_peer(t, i);
    }
    if (t->npeers > 0)
        t->next_poll = (t->next_poll + 1) % t->npeers;
    return did;
}

/* The progress thread: polls while there is work, then sleeps a little
 * longer each idle round, up to a millisecond. */
static void *rt_thread_main(void *arg)
{
    rt *t = arg;
    unsigned idle = 0;

    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        uint32_t before = t->rxq_len;
        int did = rt_progress(t);
        if (t->rxq_len > before)
            pthread_cond_broadcast(&t->cond);
        pthread_mutex_unlock(&t->lock);
        idle = did ? 0 : idle + 1;
        if (idle == 0) {
            sched_yield();
        } else if (idle < 32) {
            sched_yield();
        } else {
            long us = idle < 64 ? 50 : idle < 128 ? 200 : 1000;
            struct timespec ts = {0, us * 1000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* Start the progress thread once there is something to do (lock held). */
static flps_err rt_start(rt *t)
{
    if (t->started)
        return FLPS_OK;
    if (pthread_create(&t->thread, NULL, rt_thread_main, t) != 0)
        return rt_err(t, FLPS_ESYS, "cannot start the RDMA progress thread");
    t->started = 1;
    return FLPS_OK;
}

/* --- the vtable --------------------------------------------------------- */

static flps_err rt_listen_locked(rt *t, const char *endpoint, char *bound,
                                 size_t boundlen);

static flps_err rt_listen(transport *base, const char *endpoint, char *bound,
                          size_t boundlen)
{
    rt *t = (rt *)base;
    flps_err rc;

    pthread_mutex_lock(&t->lock);
    rc = rt_listen_locked(t, endpoint, bound, boundlen);
    if (rc == FLPS_OK)
        rc = rt_start(t);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

static flps_err rt_listen_locked(rt *t, const char *endpoint, char *bound,
                                 size_t boundlen)
{
    const int64_t xch_max = 4096;
    int zero = 0;
    size_t len = boundlen;
    char mon_ep[64];

    if (t->router != NULL || t->npeers > 0)
        return FLPS_ESTATE;
    t->router = zmq_socket(t->zctx, ZMQ_ROUTER);
    if (t->router == NULL)
        return rt_err(t, FLPS_ESYS, "zmq_socket: %s",
                      zmq_strerror(zmq_errno()));
    zmq_setsockopt(t->router, ZMQ_LINGER, &zero, sizeof(zero));
    /* Exchange messages are a few hundred bytes: no frame a stranger sends
     * the channel, its handshake's included, may cost more. */
    zmq_setsockopt(t->router, ZMQ_MAXMSGSIZE, &xch_max, sizeof(xch_max));
    snprintf(mon_ep, sizeof(mon_ep), "inproc://flps-rdma-monitor-%p",
             (void *)t);
    if (zmq_socket_monitor(t->router, mon_ep,
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0 ||
        (t->rmon = zmq_socket(t->zctx, ZMQ_PAIR)) == NULL ||
        zmq_setsockopt(t->rmon, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(t->rmon, ZMQ_RCVHWM, &zero, sizeof(zero)) != 0 ||
        zmq_connect(t->rmon, mon_ep) != 0) {
        rt_err(t, FLPS_ESYS, "the exchange channel's monitor: %s",
               zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (zmq_bind(t->router, endpoint) != 0) {
        rt_err(t, FLPS_ESYS, "cannot listen on %s for the RDMA exchange: %s",
               endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (bound != NULL &&
        zmq_getsockopt(t->router, ZMQ_LAST_ENDPOINT, bound, &len) != 0) {
        rt_err(t, FLPS_ESYS, "zmq_getsockopt(LAST_ENDPOINT): %s",
               zmq_strerror(zmq_errno()));
        goto fail;
    }
    return FLPS_OK;
fail:
    if (t->rmon != NULL)
        zmq_close(t->rmon);
    t->rmon = NULL;
    zmq_close(t->router);
    t->router = NULL;
    return FLPS_ESYS;
}

static flps_err rt_connect_locked(rt *t, const char *endpoint, uint32_t *peer);

static flps_err rt_connect(transport *base, const char *endpoint,
                           uint32_t *peer)
{
    rt *t = (rt *)base;
    flps_err rc;

    pthread_mutex_lock(&t->lock);
    rc = rt_connect_locked(t, endpoint, peer);
    if (rc == FLPS_OK)
        rc = rt_start(t);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

static flps_err rt_connect_locked(rt *t, const char *endpoint, uint32_t *peer)
{
    rt_peer *p;
    int zero = 0;
    char mon_ep[96];

    if (t->router != NULL)
        return FLPS_ESTATE;
    if (strlen(endpoint) >= sizeof(p->endpoint))
        return rt_err(t, FLPS_EINVAL, "endpoint of %zu characters",
                      strlen(endpoint));
    if (t->npeers >= RT_SLOT_MASK || rt_grow(t) != FLPS_OK)
        return FLPS_ENOMEM;
    p = flps_calloc(1, sizeof(*p));
    if (p == NULL)
        return FLPS_ENOMEM;
    snprintf(p->endpoint, sizeof(p->endpoint), "%s", endpoint);
    p->fd = -1;
    p->sock = zmq_socket(t->zctx, ZMQ_DEALER);
    snprintf(mon_ep, sizeof(mon_ep), "inproc://flps-rdma-monitor-%p-%u",
             (void *)t, t->npeers);
    if (p->sock == NULL ||
        zmq_setsockopt(p->sock, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_socket_monitor(p->sock, mon_ep, ZMQ_EVENT_DISCONNECTED) != 0 ||
        (p->mon = zmq_socket(t->zctx, ZMQ_PAIR)) == NULL ||
        zmq_setsockopt(p->mon, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_connect(p->mon, mon_ep) != 0) {
        rt_err(t, FLPS_ESYS, "the exchange channel to %s: %s", endpoint,
               zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (zmq_connect(p->sock, endpoint) != 0) {
        rt_err(t, FLPS_ESYS, "cannot connect to %s for the RDMA exchange: %s",
               endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    p->backoff = RT_BACKOFF_MIN_S;
    t->peers[t->npeers] = p;
    *peer = t->npeers++;
    /* Non-blocking: the HELLO waits in ZeroMQ until the channel is up;
     * the answer is read by the next send or recv. */
    rt_connector_attempt(t, *peer);
    return FLPS_OK;
fail:
    if (p->mon != NULL)
        zmq_close(p->mon);
    if (p->sock != NULL)
        zmq_close(p->sock);
    flps_free(p);
    return FLPS_ESYS;
}

static flps_err rt_send_locked(rt *t, uint32_t peer, const transport_frame *f,
                               size_t nframes);

static flps_err rt_send(transport *base, uint32_t peer,
                        const transport_frame *f, size_t nframes)
{
    rt *t = (rt *)base;
    flps_err rc;

    pthread_mutex_lock(&t->lock);
    rc = rt_send_locked(t, peer, f, nframes);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

static flps_err rt_send_locked(rt *t, uint32_t peer, const transport_frame *f,
                               size_t nframes)
{
    const uint32_t slot = t->router != NULL ? peer & RT_SLOT_MASK : peer;
    size_t lens[RDMA_FRAME_MAX], total = 0;
    uint32_t hwm;
    rt_peer *p;
    rt_msg *m;

    if (slot >= t->npeers || nframes == 0)
        return FLPS_ECLOSED;
    p = t->peers[slot];
    if (t->router != NULL) {
        if (p->state == RT_FREE || p->gen != peer >> TRANSPORT_PEER_SLOT_BITS)
            return rt_err(t, FLPS_ECLOSED, "peer %u is gone%s%s", peer,
                          p->why[0] ? ": " : "", p->why);
    }
    if (nframes > RDMA_FRAME_MAX)
        return rt_err(t, FLPS_EINVAL,
                      "a message of %zu frames: the RDMA transport carries "
                      "at most %d",
                      nframes, RDMA_FRAME_MAX);
    for (size_t i = 0; i < nframes; i++)
        lens[i] = f[i].len;
    if (rdma_frame_size(lens, nframes, &total) != FLPS_OK ||
        total > (t->plan.landing_bytes ? t->plan.landing_bytes
                                       : t->plan.slot_bytes) ||
        (p->state == RT_UP && total > rt_peer_limit(p)))
        return rt_err(t, FLPS_EINVAL,
                      "a message of %zu bytes (framed) is larger than the "
                      "RDMA pools allow (max_message_bytes %zu here%s): "
                      "raise max_message_bytes on both ends",
                      total, t->max_message,
                      p->state == RT_UP ? ", or smaller at the peer" : "");
    hwm = t->lim.send_hwm > 0 ? (uint32_t)t->lim.send_hwm
                              : TRANSPORT_SEND_HWM_DEFAULT;
    rt_progress_peer(t, slot);
    if (t->router != NULL && p->state == RT_FREE)
        return rt_err(t, FLPS_ECLOSED, "peer %u is gone: %s", peer, p->why);
    /* A refusal is a configuration problem, not a lost connection: say it
     * rather than queue (the connection is still tried in the
     * background, and sends work again once it is made). */
    if (t->router == NULL && p->refused && p->state != RT_UP)
        return rt_err(t, FLPS_ECLOSED, "RDMA connection to %s refused: %s",
                      p->endpoint, p->why);
    if (p->qlen >= hwm) {
        t->base.stats.msgs_dropped++;
        if (!p->dropped_logged)
            log_warn("RDMA peer %u does not take its messages (%u queued): "
                     "dropping what is sent to it until it does (logged "
                     "once per peer)",
                     peer, p->qlen);
        p->dropped_logged = 1;
        return rt_err(t, FLPS_ECLOSED,
                      "peer %u does not read: message "
                      "dropped",
                      peer);
    }
    m = flps_malloc(sizeof(*m));
    if (m == NULL)
        return FLPS_ENOMEM;
    m->next = NULL;
    m->nframes = nframes;
    m->total = total;
    for (size_t i = 0; i < nframes; i++) {
        m->f[i] = f[i];
        proto_buf_hold(f[i].buf);
    }
    if (p->qtail != NULL)
        p->qtail->next = m;
    else
        p->qhead = m;
    if (p->qhead == m)
        p->since = flps_mono_s();
    p->qtail = m;
    p->qlen++;
    t->base.stats.bytes_sent += total;
    t->base.stats.msgs_sent++;
    rt_flush(t, slot);
    return FLPS_OK;
}

static flps_err rt_recv(transport *base, int timeout_ms, transport_rx **out)
{
    rt *t = (rt *)base;
    const double until = flps_mono_s() + timeout_ms / 1000.0;
    flps_err rc = FLPS_ETIMEDOUT;
    unsigned spins = 0;

    pthread_mutex_lock(&t->lock);
    t->base.refused_peer = UINT32_MAX;
    if (t->router == NULL && t->npeers == 0) {
        pthread_mutex_unlock(&t->lock);
        return FLPS_ESTATE;
    }
    for (;;) {
        double left;
        struct timespec ts;

        rt_progress(t);
        if (t->rxq_head != NULL) {
            rt_rx *r = t->rxq_head;
            t->rxq_head = r->next;
            if (t->rxq_head == NULL)
                t->rxq_tail = NULL;
            t->rxq_len--;
            t->live++;
            t->base.stats.bytes_recv += r->rx.wire_bytes;
            t->base.stats.msgs_recv++;
            if (r->err != FLPS_OK) {
                rc = r->err;
                snprintf(t->base.errmsg, sizeof(t->base.errmsg), "%s", r->why);
                t->base.refused_peer = r->rx.peer;
                rt_rx_release_locked(t, r);
                break;
            }
            *out = &r->rx;
            rc = FLPS_OK;
            break;
        }
        left = until - flps_mono_s();
        if (timeout_ms == 0 || (timeout_ms > 0 && left <= 0))
            break;
        /* Spin a little first (RDMA latency is microseconds), letting
         * the progress thread in; then wait for its signal, waking at
         * least every millisecond to poll as well. */
        if (spins++ < 100) {
            pthread_mutex_unlock(&t->lock);
            sched_yield();
            pthread_mutex_lock(&t->lock);
            continue;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&t->cond, &t->lock, &ts);
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

static void rt_destroy(transport *base)
{
    rt *t = (rt *)base;

    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_mutex_unlock(&t->lock);
    if (t->started)
        pthread_join(t->thread, NULL);
    for (uint32_t i = 0; i < t->npeers; i++) {
        rt_peer *p = t->peers[i];
        rt_peer_teardown(t, p);
        rt_queue_drop(p);
        if (p->mon != NULL)
            zmq_close(p->mon);
        if (p->sock != NULL)
            zmq_close(p->sock);
        flps_free(p);
    }
    t->npeers = 0;
    while (t->rxq_head != NULL) {
        rt_rx *r = t->rxq_head;
        t->rxq_head = r->next;
        rt_rx_free(r);
    }
    if (t->rmon != NULL)
        zmq_close(t->rmon);
    if (t->router != NULL)
        zmq_close(t->router);
    zmq_ctx_term(t->zctx);
    t->v->dealloc_pd(t->pd);
    t->v->close_device(t->ctx);
    t->dead = 1;
    if (t->live == 0)
        rt_free(t);
}

static const transport_vtable rt_vtable = {
    .name = "rdma",
    .listen = rt_listen,
    .connect = rt_connect,
    .send = rt_send,
    .recv = rt_recv,
    .destroy = rt_destroy,
};

/* --- creation ----------------------------------------------------------- */

void transport_rdma_options_init(transport_rdma_options *o)
{
    memset(o, 0, sizeof(*o));
    o->max_message_bytes = RDMA_MAX_MESSAGE_DEFAULT;
    o->credits = RDMA_CREDITS_DEFAULT;
    o->timeout_ms = RDMA_TIMEOUT_MS_DEFAULT;
    o->limits.send_hwm = TRANSPORT_SEND_HWM_DEFAULT;
    o->limits.max_frame_bytes = TRANSPORT_MAX_FRAME_DEFAULT;
    o->limits.max_peers = TRANSPORT_MAX_PEERS_DEFAULT;
}

static const char *rt_port_state(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_DOWN:
        return "DOWN";
    case IBV_PORT_INIT:
        return "INIT (no subnet manager has configured it)";
    case IBV_PORT_ARMED:
        return "ARMED";
    case IBV_PORT_ACTIVE:
        return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
        return "ACTIVE_DEFER";
    default:
        return "NOP";
    }
}

/* Open the device (o->device or the first one with an active port) and
 * pick its port. */
static flps_err rt_open_device(rt *t, const transport_rdma_options *o,
                               char *why, size_t whylen)
{
    const rdma_verbs *v = t->v;
    struct ibv_device **list;
    int num = 0;
    char names[160] = "", last[400] = "";
    flps_err rc = FLPS_ECONFIG;

    list = v->get_device_list(&num);
    if (list == NULL || num <= 0) {
        if (list != NULL)
            v->free_device_list(list);
        return flps_errbuf_set(
            why, whylen, FLPS_ECONFIG,
            "no RDMA device: ibv_get_device_list found none (%s); load the "
            "adapter's driver and check with `ibv_devinfo`, create a "
            "soft-RoCE device with `rdma link add rxe0 type rxe netdev "
            "IFACE`, or run the job with transport: zmq",
            list == NULL ? (errno == ENOSYS ? "the kernel has no RDMA "
                                              "support: no ib_uverbs module"
                                            : strerror(errno))
                         : "an empty list");
    }
    for (int i = 0; i < num && t->ctx == NULL; i++) {
        const char *name = v->get_device_name(list[i]);
        struct ibv_context *ctx;
        int nports;

        if (strlen(names) + strlen(name) + 3 < sizeof(names)) {
            if (names[0])
                strcat(names, ", ");
            strcat(names, name);
        }
        if (o->device != NULL && strcmp(o->device, name) != 0)
            continue;
        ctx = v->open_device(list[i]);
        if (ctx == NULL) {
            snprintf(last, sizeof(last), "cannot open RDMA device %s: %s", name,
                     strerror(errno));
            continue;
        }
        nports = v->port_count(ctx);
        for (int port = 1; port <= nports; port++) {
            struct ibv_port_attr pa;
            if (o->port != 0 && port != o->port)
                continue;
            if (v->query_port(ctx, (uint8_t)port, &pa) != 0) {
                snprintf(last, sizeof(last),
                         "cannot query port %d of RDMA device %s", port, name);
                continue;
            }
            if (pa.state != IBV_PORT_ACTIVE) {
                snprintf(last, sizeof(last),
                         "port %d of RDMA device %s is %s: check its cable "
                         "and switch (`ibv_devinfo -d %s` shows the port "
                         "state; an InfiniBand port needs a subnet manager, "
                         "a RoCE port an up network interface)",
                         port, name, rt_port_state(pa.state), name);
                continue;
            }
            t->ctx = ctx;
            t->port = (uint8_t)port;
            t->lid = pa.lid;
            t->mtu = (uint8_t)pa.active_mtu;
            t->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
            t->gid_tbl_len = pa.gid_tbl_len;
            snprintf(t->devname, sizeof(t->devname), "%s", name);
            break;
        }
        if (t->ctx == NULL) {
            if (last[0] == '\0')
                snprintf(last, sizeof(last),
                         "RDMA device %s has no port %u (it has %d)", name,
                         o->port, nports);
            v->close_device(ctx);
        }
    }
    v->free_device_list(list);
    if (t->ctx != NULL)
        return FLPS_OK;
    if (last[0] != '\0')
        return flps_errbuf_set(why, whylen, rc,
                               "%s; or run the job with "
                               "transport: zmq",
                               last);
    return flps_errbuf_set(why, whylen, rc,
                           "no RDMA device named %s (present: %s): give one "
                           "of those, or none for the first with an active "
                           "port",
                           o->device, names);
}

flps_err transport_rdma_create(const transport_rdma_options *opt,
                               transport **out, char *why, size_t whylen)
{
    transport_rdma_options o;
    union ibv_gid gid;
    rt *t;
    flps_err rc;

    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (opt == NULL)
        transport_rdma_options_init(&o);
    else
        o = *opt;
    if (o.verbs == NULL)
        o.verbs = rdma_verbs_real();
    if (o.credits == 0)
        o.credits = RDMA_CREDITS_DEFAULT;
    if (o.timeout_ms <= 0)
        o.timeout_ms = RDMA_TIMEOUT_MS_DEFAULT;
    if (o.max_message_bytes == 0)
        o.max_message_bytes = RDMA_MAX_MESSAGE_DEFAULT;
    if (o.limits.max_peers > RT_SLOT_MASK || o.limits.send_hwm < 0)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "RDMA limits: max_peers %u (at most %u), "
                               "send_hwm %d (not negative)",
                               o.limits.max_peers, RT_SLOT_MASK,
                               o.limits.send_hwm);
    t = flps_calloc(1, sizeof(*t));
    if (t == NULL)
        return flps_errbuf_set(why, whylen, FLPS_ENOMEM, "out of memory");
    t->base.vt = &rt_vtable;
    t->base.refused_peer = UINT32_MAX;
    t->v = o.verbs;
    t->lim = o.limits;
    t->timeout_ms = o.timeout_ms;
    t->max_message = o.max_message_bytes;
    rc = rdma_pool_plan_make(o.max_message_bytes, o.credits, &t->plan, why,
                             whylen);
    if (rc != FLPS_OK)
        goto fail;
    if (t->v->memlock_limit(&t->memlock) != 0)
        t->memlock = UINT64_MAX; /* unknown: registration will say */
    rc = rt_open_device(t, &o, why, whylen);
    if (rc != FLPS_OK)
        goto fail;
    /* Before any registration: one connection's pools must fit. */
    rc =
        rdma_pool_memlock_check(0, t->plan.peer_bytes, t->memlock, why, whylen);
    if (rc != FLPS_OK)
        goto fail_dev;
    if (t->roce) {
        /* RoCE addresses by GID: pick the entry that routes. */
        union ibv_gid tbl[RT_GID_SCAN];
        int n = t->gid_tbl_len < RT_GID_SCAN ? t->gid_tbl_len : RT_GID_SCAN;
        for (int i = 0; i < n; i++)
            if (t->v->query_gid(t->ctx, t->port, i, &tbl[i]) != 0)
                memset(&tbl[i], 0, sizeof(tbl[i]));
        t->gid_index = (uint8_t)rdma_gid_pick(tbl, n);
    }
    if (t->v->query_gid(t->ctx, t->port, t->gid_index, &gid) == 0)
        memcpy(t->gid, gid.raw, 16);
    t->pd = t->v->alloc_pd(t->ctx);
    if (t->pd == NULL) {
        rc = flps_errbuf_set(why, whylen, FLPS_ESYS,
                             "ibv_alloc_pd on %s failed: %s", t->devname,
                             strerror(errno));
        goto fail_dev;
    }
    t->zctx = zmq_ctx_new();
    if (t->zctx == NULL) {
        rc = flps_errbuf_set(why, whylen, FLPS_ESYS, "zmq_ctx_new failed");
        goto fail_pd;
    }
    if (pthread_mutex_init(&t->lock, NULL) != 0) {
        rc = flps_errbuf_set(why, whylen, FLPS_ESYS, "pthread_mutex_init");
        goto fail_zmq;
    }
    if (pthread_cond_init(&t->cond, NULL) != 0) {
        rc = flps_errbuf_set(why, whylen, FLPS_ESYS, "pthread_cond_init");
        goto fail_lock;
    }
    *out = &t->base;
    return FLPS_OK;
fail_lock:
    pthread_mutex_destroy(&t->lock);
fail_zmq:
    zmq_ctx_term(t->zctx);
fail_pd:
    t->v->dealloc_pd(t->pd);
fail_dev:
    t->v->close_device(t->ctx);
fail:
    flps_free(t);
    return rc;
}
