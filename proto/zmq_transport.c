/* The ZeroMQ transport: ROUTER on a shard, one DEALER per shard on a worker.
 * Payload frames are handed to ZeroMQ without copies (zmq_msg_init_data with
 * a release callback on the frame's proto_buf). Received frames stay in
 * ZeroMQ's own messages (a large one has its own 8-byte aligned block);
 * only small ones that sit unaligned in ZeroMQ's batch buffer are copied,
 * into room the reused receive record carries.
 *
 * A listener bounds what peers can make it hold (transport_limits): a send
 * high-water mark per peer with ROUTER_MANDATORY, so a reply to a peer
 * that does not read is dropped rather than buffered; ZMQ_MAXMSGSIZE; and
 * a cap on connections, counted from the socket monitor's ACCEPTED and
 * DISCONNECTED events (a connection beyond it is shut down at once). The
 * monitor also frees a peer's routing state when its connection goes:
 * each peer remembers the descriptor its first message came on
 * (ZMQ_SRCFD), and the monitor's events are read before every message,
 * so a descriptor reused by a new connection is never taken for the old
 * one. libzmq 4.3's ZMQ_ROUTER_NOTIFY would say the same, but it is a
 * draft option that the packaged library does not build. */
#include "proto/transport.h"

#include <errno.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/creds.h"

#define ZT_MAX_ID 256
/* Bytes of unaligned small frames a receive record holds itself (headers
 * are about a hundred; larger unaligned frames get their own copy). */
#define ZT_RX_ROOM 1024
/* Receive records kept for reuse: more than a shard holds at once is
 * rare, and each is about 1.5 KiB. */
#define ZT_RX_CACHE 64

#define ZT_SLOT_MASK ((1u << TRANSPORT_PEER_SLOT_BITS) - 1u)

typedef struct zt_peer {
    unsigned char id[ZT_MAX_ID]; /* ROUTER routing id */
    size_t idlen;
    void *sock; /* DEALER (connector) */
    /* Listener only. */
    int live;     /* the slot holds a peer */
    int fd;       /* the descriptor its messages come on, -1 unknown */
    uint32_t gen; /* reuses of the slot: the high bits of the peer number */
    int dropped;  /* a reply to it was dropped (logged once) */
} zt_peer;

typedef struct zt_rx zt_rx;

typedef struct zt {
    transport base;
    void *ctx;
    void *router; /* listener socket, or NULL */
    zt_peer *peers;
    uint32_t npeers, cap;  /* listener: slots in use or freed, allocated */
    transport_limits lim;  /* listener */
    void *mon;             /* listener: the PAIR reading the monitor */
    uint32_t conns;        /* listener: connections open now */
    double cap_logged;     /* when the connection cap was last logged */
    uint64_t cap_unlogged; /* connections refused since then */
    zmq_pollitem_t *items; /* connector: one per DEALER */
    uint32_t next_poll;    /* connector: fairness across DEALERs */
    /* Receive records: released ones wait in free_rx for the next
     * message. A record released after transport_destroy still needs z,
     * so z goes only when the last one is back (live == 0, dead). */
    zt_rx *free_rx;
    uint32_t nfree;
    uint32_t live; /* records handed out and not yet released */
    int dead;      /* transport_destroy was called */
    /* CURVE (transport_set_curve): the keys in Z85, and on a listener
     * the REP socket of its ZAP handler and the job's client key. */
    int curve;
    char srv_pub[CREDS_KEY_LEN + 1], srv_sec[CREDS_KEY_LEN + 1];
    char cli_pub[CREDS_KEY_LEN + 1], cli_sec[CREDS_KEY_LEN + 1];
    uint8_t cli_pub_bin[32];
    void *zap;
    double auth_logged;     /* when a refused handshake was last logged */
    uint64_t auth_unlogged; /* refused since then */
} zt;

struct zt_rx {
    transport_rx rx;
    zt *owner;
    zt_rx *next_free;
    zmq_msg_t parts[PROTO_MAX_FRAMES + 1];
    size_t nparts;
    void *copies[PROTO_MAX_FRAMES + 1]; /* realigned frames of their own */
    size_t room_used;
    alignas(16) unsigned char room[ZT_RX_ROOM]; /* small realigned frames */
};

static flps_err zt_fail(zt *z, const char *what)
{
    snprintf(z->base.errmsg, sizeof(z->base.errmsg), "%.200s: %s", what,
             zmq_strerror(zmq_errno()));
    return FLPS_ESYS;
}

static flps_err zt_set_common(zt *z, void *s)
{
    int zero = 0, one = 1, linger = 2000;

    /* HWM 0: a ROUTER silently drops messages past its high-water mark,
     * which would lose pushes; the protocol bounds what is in flight. */
    if (zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(s, ZMQ_TCP_KEEPALIVE, &one, sizeof(one)) != 0)
        return zt_fail(z, "zmq_setsockopt");
    return FLPS_OK;
}

static flps_err zt_grow(zt *z)
{
    uint32_t cap;
    zt_peer *p;
    zmq_pollitem_t *it;

    if (z->npeers < z->cap)
        return FLPS_OK;
    cap = z->cap ? z->cap * 2 : 8;
    p = flps_realloc(z->peers, cap * sizeof(*p));
    if (p == NULL)
        return FLPS_ENOMEM;
    z->peers = p;
    it = flps_realloc(z->items, cap * sizeof(*it));
    if (it == NULL)
        return FLPS_ENOMEM;
    z->items = it;
    z->cap = cap;
    return FLPS_OK;
}

flps_err transport_zmq_set_limits(transport *t, const transport_limits *lim)
{
    zt *z = (zt *)t;

    if (z->router != NULL || z->npeers > 0)
        return FLPS_ESTATE;
    if (lim->max_peers > ZT_SLOT_MASK || lim->send_hwm < 0)
        return FLPS_EINVAL;
    z->lim = *lim;
    return FLPS_OK;
}

static flps_err zt_listen(transport *t, const char *endpoint, char *bound,
                          size_t boundlen)
{
    zt *z = (zt *)t;
    int one = 1, hwm = z->lim.send_hwm, zero = 0;
    int64_t maxmsg = z->lim.max_frame_bytes;
    size_t len = boundlen;
    char mon_ep[64];
    flps_err rc;

    if (z->router != NULL || z->npeers > 0)
        return FLPS_ESTATE;
    z->router = zmq_socket(z->ctx, ZMQ_ROUTER);
    if (z->router == NULL)
        return zt_fail(z, "zmq_socket(ROUTER)");
    rc = zt_set_common(z, z->router);
    if (rc != FLPS_OK)
        goto fail;
    /* Report unroutable peers instead of dropping silently, and with the
     * high-water mark, refuse (EAGAIN) a reply to a peer that does not
     * read instead of buffering it: zt_send drops it. The protocol keeps
     * a reading worker far below the mark (one request per part). */
    if (zmq_setsockopt(z->router, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)) ||
        zmq_setsockopt(z->router, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
        zmq_setsockopt(z->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg))) {
        rc = zt_fail(z, "zmq_setsockopt(ROUTER)");
        goto fail;
    }
    if (z->curve) {
        int zero_linger = 0;
        /* The ZAP handler first: libzmq asks it about every CURVE
         * handshake of this context once it is bound. */
        z->zap = zmq_socket(z->ctx, ZMQ_REP);
        if (z->zap == NULL ||
            zmq_setsockopt(z->zap, ZMQ_LINGER, &zero_linger,
                           sizeof(zero_linger)) != 0 ||
            zmq_bind(z->zap, "inproc://zeromq.zap.01") != 0 ||
            zmq_setsockopt(z->router, ZMQ_CURVE_SERVER, &one, sizeof(one)) ||
            zmq_setsockopt(z->router, ZMQ_CURVE_SECRETKEY, z->srv_sec,
                           sizeof(z->srv_sec)) ||
            zmq_setsockopt(z->router, ZMQ_ZAP_DOMAIN, "flps", 4)) {
            rc = zt_fail(z, "CURVE set-up");
            goto fail;
        }
    }
    snprintf(mon_ep, sizeof(mon_ep), "inproc://flps-monitor-%p", (void *)z);
    if (zmq_socket_monitor(z->router, mon_ep,
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) {
        rc = zt_fail(z, "zmq_socket_monitor");
        goto fail;
    }
    z->mon = zmq_socket(z->ctx, ZMQ_PAIR);
    /* No receive limit: a lost ACCEPTED or DISCONNECTED event would put
     * the count of connections off for good. */
    if (z->mon == NULL ||
        zmq_setsockopt(z->mon, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(z->mon, ZMQ_RCVHWM, &zero, sizeof(zero)) != 0 ||
        zmq_connect(z->mon, mon_ep) != 0) {
        rc = zt_fail(z, "monitor socket");
        goto fail;
    }
    if (zmq_bind(z->router, endpoint) != 0) {
        char what[300];
        snprintf(what, sizeof(what), "cannot listen on %s", endpoint);
        rc = zt_fail(z, what);
        goto fail;
    }
    if (bound != NULL &&
        zmq_getsockopt(z->router, ZMQ_LAST_ENDPOINT, bound, &len) != 0) {
        rc = zt_fail(z, "zmq_getsockopt(LAST_ENDPOINT)");
        goto fail;
    }
    return FLPS_OK;
fail:
    if (z->mon != NULL)
        zmq_close(z->mon);
    z->mon = NULL;
    if (z->zap != NULL)
        zmq_close(z->zap);
    z->zap = NULL;
    zmq_close(z->router);
    z->router = NULL;
    return rc;
}

static flps_err zt_connect(transport *t, const char *endpoint, uint32_t *peer)
{
    zt *z = (zt *)t;
    void *s;
    flps_err rc;

    if (z->router != NULL)
        return FLPS_ESTATE;
    rc = zt_grow(z);
    if (rc != FLPS_OK)
        return rc;
    s = zmq_socket(z->ctx, ZMQ_DEALER);
    if (s == NULL)
        return zt_fail(z, "zmq_socket(DEALER)");
    rc = zt_set_common(z, s);
    if (rc == FLPS_OK && z->curve &&
        (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, z->srv_pub,
                        sizeof(z->srv_pub)) != 0 ||
         zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, z->cli_pub,
                        sizeof(z->cli_pub)) != 0 ||
         zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, z->cli_sec,
                        sizeof(z->cli_sec)) != 0))
        rc = zt_fail(z, "zmq_setsockopt(CURVE)");
    if (rc == FLPS_OK && zmq_connect(s, endpoint) != 0) {
        char what[300];
        snprintf(what, sizeof(what), "cannot connect to %s", endpoint);
        rc = zt_fail(z, what);
    }
    if (rc != FLPS_OK) {
        zmq_close(s);
        return rc;
    }
    memset(&z->peers[z->npeers], 0, sizeof(z->peers[0]));
    z->peers[z->npeers].sock = s;
    z->items[z->npeers].socket = s;
    z->items[z->npeers].fd = 0;
    z->items[z->npeers].events = ZMQ_POLLIN;
    z->items[z->npeers].revents = 0;
    *peer = z->npeers++;
    return FLPS_OK;
}

/* ZeroMQ calls this (from its I/O thread) when it is done with a frame. */
static void zt_frame_done(void *data, void *hint)
{
    (void)data;
    proto_buf_release(hint);
}

static flps_err zt_send(transport *t, uint32_t peer, const transport_frame *f,
                        size_t nframes)
{
    zt *z = (zt *)t;
    void *s;
    size_t wire = 0;
    int flags = 0;

    if (z->router != NULL) {
        const uint32_t slot = peer & ZT_SLOT_MASK;
        zt_peer *pp;

        if (slot >= z->npeers || nframes == 0)
            return FLPS_ECLOSED;
        pp = &z->peers[slot];
        if (!pp->live || pp->gen != peer >> TRANSPORT_PEER_SLOT_BITS)
            return FLPS_ECLOSED;
        s = z->router;
        flags = ZMQ_DONTWAIT;
        if (zmq_send(s, pp->id, pp->idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
            /* Nothing was queued: a ROUTER discards a message whose first
             * part fails. EAGAIN: the peer's queue is at the high-water
             * mark because it does not read; the reply is dropped, which
             * the protocol survives (the client re-sends its request). */
            if (zmq_errno() == EAGAIN) {
                t->stats.msgs_dropped++;
                if (!pp->dropped)
                    log_warn("peer %u does not read its replies (%d queued): "
                             "dropping what is sent to it until it does "
                             "(logged once per peer)",
                             peer, z->lim.send_hwm);
                pp->dropped = 1;
                snprintf(z->base.errmsg, sizeof(z->base.errmsg),
                         "peer %u does not read: reply dropped", peer);
                return FLPS_ECLOSED;
            }
            /* EHOSTUNREACH: the peer's connection is gone. */
            zt_fail(z, "zmq_send(routing id)");
            return FLPS_ECLOSED;
        }
    } else {
        if (peer >= z->npeers || nframes == 0)
            return FLPS_ECLOSED;
        s = z->peers[peer].sock;
    }
    for (size_t i = 0; i < nframes; i++) {
        zmq_msg_t m;
        int more = i + 1 < nframes ? ZMQ_SNDMORE : 0;
        unsigned char *base = proto_buf_data(f[i].buf);

        /* Small frames are cheaper to copy than to reference. */
        if (f[i].len < 64) {
            if (zmq_msg_init_size(&m, f[i].len) != 0)
                return zt_fail(z, "zmq_msg_init_size");
            memcpy(zmq_msg_data(&m), base + f[i].off, f[i].len);
        } else {
            proto_buf_hold(f[i].buf);
            if (zmq_msg_init_data(&m, base + f[i].off, f[i].len, zt_frame_done,
                                  f[i].buf) != 0) {
                proto_buf_release(f[i].buf);
                return zt_fail(z, "zmq_msg_init_data");
            }
        }
        /* With HWM 0 and a live socket, zmq_msg_send of a multipart
         * message only fails if the context is being terminated. */
        if (zmq_msg_send(&m, s, more | flags) < 0) {
            zmq_msg_close(&m);
            return zt_fail(z, "zmq_msg_send");
        }
        wire += transport_zmtp_frame_bytes(f[i].len);
    }
    t->stats.bytes_sent += wire;
    t->stats.msgs_sent++;
    return FLPS_OK;
}

static void zt_free(zt *z)
{
    while (z->free_rx != NULL) {
        zt_rx *n = z->free_rx->next_free;
        flps_free(z->free_rx);
        z->free_rx = n;
    }
    flps_free(z->peers);
    flps_free(z->items);
    flps_free(z);
}

static void zt_rx_release(transport_rx *rx)
{
    zt_rx *r = rx->impl;
    zt *z = r->owner;

    for (size_t i = 0; i < r->nparts; i++) {
        zmq_msg_close(&r->parts[i]);
        flps_free(r->copies[i]);
    }
    z->live--;
    if (!z->dead && z->nfree < ZT_RX_CACHE) {
        r->next_free = z->free_rx;
        z->free_rx = r;
        z->nfree++;
        return;
    }
    flps_free(r);
    if (z->dead && z->live == 0)
        zt_free(z);
}

/* A receive record, reused when one is free; NULL when out of memory. */
static zt_rx *zt_rx_get(zt *z)
{
    zt_rx *r = z->free_rx;

    if (r != NULL) {
        z->free_rx = r->next_free;
        z->nfree--;
    } else {
        r = flps_malloc(sizeof(*r));
        if (r == NULL)
            return NULL;
    }
    memset(&r->rx, 0, sizeof(r->rx));
    memset(r->copies, 0, sizeof(r->copies));
    r->owner = z;
    r->nparts = 0;
    r->room_used = 0;
    r->rx.impl = r;
    r->rx.release = zt_rx_release;
    z->live++;
    return r;
}

/* Where an unaligned frame of len bytes goes: the record's room while it
 * lasts, else a copy of its own (recorded in copies[i] to be freed). */
static void *zt_rx_realign(zt_rx *r, size_t i, size_t len)
{
    /* Keep the next frame in the room 16-byte aligned as well. */
    size_t need = (len + 15) & ~(size_t)15;

    if (need <= ZT_RX_ROOM - r->room_used) {
        void *d = r->room + r->room_used;
        r->room_used += need;
        return d;
    }
    r->copies[i] = flps_malloc(len);
    return r->copies[i];
}

static uint32_t zt_peer_number(const zt *z, uint32_t slot)
{
    return slot | (z->peers[slot].gen << TRANSPORT_PEER_SLOT_BITS);
}

/* Map a ROUTER routing id to a peer number, adding it if new (in a freed
 * slot first). fd: the descriptor the message came on. FLPS_EPROTO when
 * the table is full (z->lim.max_peers live peers). */
static flps_err zt_peer_of(zt *z, const void *id, size_t len, int fd,
                           uint32_t *peer)
{
    uint32_t slot = UINT32_MAX;
    flps_err rc;
    zt_peer *p;

    if (len > ZT_MAX_ID) {
        snprintf(z->base.errmsg, sizeof(z->base.errmsg),
                 "routing id of %zu bytes", len);
        return FLPS_EPROTO;
    }
    for (uint32_t i = 0; i < z->npeers; i++) {
        p = &z->peers[i];
        if (!p->live) {
            if (slot == UINT32_MAX)
                slot = i;
            continue;
        }
        if (p->idlen == len && memcmp(p->id, id, len) == 0) {
            *peer = zt_peer_number(z, i);
            return FLPS_OK;
        }
    }
    if (slot == UINT32_MAX) {
        if (z->npeers >= (z->lim.max_peers ? z->lim.max_peers : ZT_SLOT_MASK)) {
            snprintf(z->base.errmsg, sizeof(z->base.errmsg),
                     "the table of %u peers is full; message from a new "
                     "peer dropped",
                     z->npeers);
            return FLPS_EPROTO;
        }
        rc = zt_grow(z);
        if (rc != FLPS_OK)
            return rc;
        slot = z->npeers++;
        memset(&z->peers[slot], 0, sizeof(z->peers[slot]));
    }
    p = &z->peers[slot];
    memcpy(p->id, id, len);
    p->idlen = len;
    p->sock = NULL;
    p->live = 1;
    p->fd = fd;
    p->dropped = 0;
    *peer = zt_peer_number(z, slot);
    return FLPS_OK;
}

/* A connection was accepted: count it, and shut it down at once when it
 * is one more than the cap (its DISCONNECTED event uncounts it). */
static void zt_on_accepted(zt *z, int fd)
{
    double now;

    z->conns++;
    if (z->lim.max_peers == 0 || z->conns <= z->lim.max_peers)
        return;
    shutdown(fd, SHUT_RDWR);
    z->base.stats.conns_refused++;
    z->cap_unlogged++;
    now = flps_mono_s();
    if (z->cap_logged == 0 || now - z->cap_logged >= 60) {
        log_warn("connection limit of %u reached: closed %llu new "
                 "connection(s) since the last such line (flps "
                 "--max-connections)",
                 z->lim.max_peers, (unsigned long long)z->cap_unlogged);
        z->cap_logged = now;
        z->cap_unlogged = 0;
    }
}

/* A connection went: free the routing state of the peer that used it. */
static void zt_on_disconnected(zt *z, int fd)
{
    if (z->conns > 0)
        z->conns--;
    for (uint32_t i = 0; i < z->npeers; i++) {
        zt_peer *p = &z->peers[i];
        if (p->live && p->fd == fd) {
            p->live = 0;
            p->fd = -1;
            p->gen = (p->gen + 1) & (UINT32_MAX >> TRANSPORT_PEER_SLOT_BITS);
            break;
        }
    }
}

/* A connection failed its CURVE handshake: count it, and log it at most
 * once a minute with the count (a stranger may try very often). */
static void zt_on_auth_refused(zt *z, const char *why)
{
    double now = flps_mono_s();

    z->base.stats.auth_refused++;
    z->auth_unlogged++;
    if (z->auth_logged == 0 || now - z->auth_logged >= 60) {
        log_warn("refused %llu connection(s) in the CURVE handshake since "
                 "the last such line (the last: %s); only the job's members "
                 "are served",
                 (unsigned long long)z->auth_unlogged, why);
        z->auth_logged = now;
        z->auth_unlogged = 0;
    }
}

/* Answer one ZAP request (ZeroMQ RFC 27): admit a CURVE client whose
 * public key is the job's, refuse anything else. */
static void zt_serve_zap(zt *z)
{
    zmq_msg_t f[8];
    size_t n = 0;
    int more = 1, ok;
    const char *code;

    while (more && n < 8) {
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], z->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&f[n]);
            break;
        }
        more = zmq_msg_more(&f[n]);
        n++;
    }
    while (more) { /* more frames than a request has: drop them */
        zmq_msg_t sink;
        zmq_msg_init(&sink);
        if (zmq_msg_recv(&sink, z->zap, 0) < 0)
            more = 0;
        else
            more = zmq_msg_more(&sink);
        zmq_msg_close(&sink);
    }
    if (n < 2) {
        for (size_t i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
        return; /* nothing to answer: a REP then waits for a request */
    }
    ok = n == 7 && zmq_msg_size(&f[5]) == 5 &&
         memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
         zmq_msg_size(&f[6]) == 32 &&
         memcmp(zmq_msg_data(&f[6]), z->cli_pub_bin, 32) == 0;
    code = ok ? "200" : "400";
    zmq_send(z->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    zmq_send(z->zap, code, 3, ZMQ_SNDMORE);
    zmq_send(z->zap, ok ? "OK" : "not a member of the job",
             ok ? 2 : strlen("not a member of the job"), ZMQ_SNDMORE);
    zmq_send(z->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(z->zap, "", 0, 0);
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

/* Read every event the monitor has queued, without waiting. */
static void zt_drain_monitor(zt *z)
{
    for (;;) {
        zmq_msg_t ev;
        uint16_t event = 0;
        uint32_t value = 0;
        int more;

        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, z->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (char *)zmq_msg_data(&ev) + 2, 4);
        }
        more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        while (more) { /* the endpoint's address */
            zmq_msg_t a;
            zmq_msg_init(&a);
            if (zmq_msg_recv(&a, z->mon, 0) < 0) {
                zmq_msg_close(&a);
                return;
            }
            more = zmq_msg_more(&a);
            zmq_msg_close(&a);
        }
        if (event == ZMQ_EVENT_ACCEPTED)
            zt_on_accepted(z, (int)value);
        else if (event == ZMQ_EVENT_DISCONNECTED)
            zt_on_disconnected(z, (int)value);
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
                 event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                 event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
            zt_on_auth_refused(z, event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                                      ? "not the job's CURVE client key"
                                      : "no CURVE, or not this job's "
                                        "server key");
    }
}

/* Read the rest of a multipart message into r (the first part is there).
 * A message has at most PROTO_MAX_FRAMES frames either way: a listener's
 * first part is the routing id, a connector's is a frame. */
static flps_err zt_read_parts(zt *z, void *s, zt_rx *r, int *overflow)
{
    const size_t max = PROTO_MAX_FRAMES + (z->router != NULL ? 1 : 0);

    while (zmq_msg_more(&r->parts[r->nparts - 1])) {
        if (r->nparts == max) {
            zmq_msg_t sink;
            zmq_msg_init(&sink);
            zmq_msg_recv(&sink, s, 0);
            *overflow = 1;
            if (!zmq_msg_more(&sink)) {
                zmq_msg_close(&sink);
                break;
            }
            zmq_msg_close(&sink);
            continue;
        }
        zmq_msg_init(&r->parts[r->nparts]);
        if (zmq_msg_recv(&r->parts[r->nparts], s, 0) < 0) {
            zmq_msg_close(&r->parts[r->nparts]);
            return zt_fail(z, "zmq_msg_recv");
        }
        r->nparts++;
    }
    return FLPS_OK;
}

/* The descriptor a message came on (any frame of it may say; libzmq sets
 * it on the frames its decoder made, not always on the routing id). */
static int zt_srcfd(zt_rx *r)
{
    for (size_t i = r->nparts; i-- > 0;) {
        int fd = zmq_msg_get(&r->parts[i], ZMQ_SRCFD);
        if (fd >= 0)
            return fd;
    }
    return -1;
}

static flps_err zt_recv(transport *t, int timeout_ms, transport_rx **out)
{
    zt *z = (zt *)t;
    zt_rx *r;
    void *s = NULL;
    uint32_t peer = 0;
    size_t first = 0, wire = 0;
    int overflow = 0, n;
    flps_err rc;

    t->refused_peer = UINT32_MAX;
    if (z->router != NULL) {
        const double until = flps_mono_s() + timeout_ms / 1000.0;
        int wait = timeout_ms;
        for (;;) {
            zmq_pollitem_t it[3] = {{z->router, 0, ZMQ_POLLIN, 0},
                                    {z->mon, 0, ZMQ_POLLIN, 0},
                                    {z->zap, 0, ZMQ_POLLIN, 0}};
            n = zmq_poll(it, z->zap != NULL ? 3 : 2, wait);
            if (n < 0)
                break; /* before anything else can overwrite its errno */
            /* Handshakes wait for the ZAP handler's answer. */
            if (z->zap != NULL && (it[2].revents & ZMQ_POLLIN))
                zt_serve_zap(z);
            /* Before the message: a peer whose connection went is freed
             * before a new one can arrive on the same descriptor. */
            zt_drain_monitor(z);
            if (n <= 0 || (it[0].revents & ZMQ_POLLIN))
                break;
            if (timeout_ms >= 0) { /* only the monitor: wait on */
                const double left = until - flps_mono_s();
                if (left <= 0) {
                    n = 0;
                    break;
                }
                wait = (int)(left * 1000.0) + 1;
            }
        }
        s = z->router;
    } else {
        if (z->npeers == 0)
            return FLPS_ESTATE;
        n = zmq_poll(z->items, (int)z->npeers, timeout_ms);
    }
    if (n < 0) {
        if (zmq_errno() == EINTR)
            return FLPS_ETIMEDOUT;
        return zt_fail(z, "zmq_poll");
    }
    if (n == 0)
        return FLPS_ETIMEDOUT;
    if (s == NULL) {
        /* Round-robin so one busy shard cannot starve the others. */
        for (uint32_t k = 0; k < z->npeers; k++) {
            uint32_t i = (z->next_poll + k) % z->npeers;
            if (z->items[i].revents & ZMQ_POLLIN) {
                s = z->items[i].socket;
                peer = i;
                z->next_poll = i + 1;
                break;
            }
        }
        if (s == NULL)
            return FLPS_ETIMEDOUT;
    }
    r = zt_rx_get(z);
    if (r == NULL)
        return FLPS_ENOMEM;
    zmq_msg_init(&r->parts[0]);
    if (zmq_msg_recv(&r->parts[0], s, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&r->parts[0]);
        zt_rx_release(&r->rx);
        if (e == EAGAIN)
            return FLPS_ETIMEDOUT;
        errno = e;
        return zt_fail(z, "zmq_msg_recv");
    }
    r->nparts = 1;
    rc = zt_read_parts(z, s, r, &overflow);
    if (rc != FLPS_OK)
        goto fail;
    if (z->router != NULL) {
        rc = zt_peer_of(z, zmq_msg_data(&r->parts[0]),
                        zmq_msg_size(&r->parts[0]), zt_srcfd(r), &peer);
        if (rc != FLPS_OK)
            goto fail;
        first = 1;
    }
    for (size_t i = first; i < r->nparts; i++) {
        void *d = zmq_msg_data(&r->parts[i]);
        size_t len = zmq_msg_size(&r->parts[i]);
        /* Zero-copy receive can leave a frame at any offset of ZeroMQ's
         * batch buffer; frames of u32/f32 need 4-byte alignment. */
        if (((uintptr_t)d & 3u) != 0) {
            void *c = zt_rx_realign(r, i, len);
            if (c == NULL) {
                rc = FLPS_ENOMEM;
                goto fail;
            }
            memcpy(c, d, len);
            d = c;
        }
        r->rx.frames[i - first].data = d;
        r->rx.frames[i - first].len = len;
        wire += transport_zmtp_frame_bytes(len);
    }
    r->rx.nframes = r->nparts - first;
    r->rx.peer = peer;
    r->rx.wire_bytes = wire;
    t->stats.bytes_recv += wire;
    t->stats.msgs_recv++;
    if (overflow) {
        snprintf(t->errmsg, sizeof(t->errmsg),
                 "message with more than %d frames dropped", PROTO_MAX_FRAMES);
        t->refused_peer = peer;
        rc = FLPS_EPROTO;
        goto fail;
    }
    *out = &r->rx;
    return FLPS_OK;
fail:
    zt_rx_release(&r->rx);
    return rc;
}

static void zt_destroy(transport *t)
{
    zt *z = (zt *)t;

    if (z->mon != NULL)
        zmq_close(z->mon);
    if (z->zap != NULL)
        zmq_close(z->zap);
    if (z->router != NULL)
        zmq_close(z->router);
    explicit_bzero(z->srv_sec, sizeof(z->srv_sec));
    explicit_bzero(z->cli_sec, sizeof(z->cli_sec));
    for (uint32_t i = 0; i < z->npeers; i++)
        if (z->peers[i].sock != NULL)
            zmq_close(z->peers[i].sock);
    zmq_ctx_term(z->ctx);
    z->dead = 1;
    if (z->live == 0)
        zt_free(z);
}

static const transport_vtable zt_vtable;

flps_err transport_set_curve(transport *t, const flps_creds *c, int server,
                             char *errbuf, size_t errlen)
{
    zt *z = (zt *)t;

    if (t->vt != &zt_vtable)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "the job's CURVE keys apply to the ZeroMQ transport only: the "
            "%s data plane is authenticated by the job's secret but not "
            "encrypted",
            t->vt->name);
    if (!creds_have_curve())
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "the job's credentials hold CURVE keys but this libzmq was built "
            "without CURVE (zmq_has(\"curve\") is 0): the data plane cannot "
            "be encrypted; rebuild libzmq with libsodium, or drop the "
            "curve_* lines to run authenticated but not encrypted");
    if (c == NULL || !c->has_curve)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "the credentials hold no CURVE keys");
    if (z->router != NULL || z->npeers > 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESTATE,
                               "CURVE keys are set before listen/connect");
    if (zmq_z85_decode(z->cli_pub_bin, c->client_public) == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "curve_client_public is not a Z85 key");
    memcpy(z->srv_pub, c->server_public, sizeof(z->srv_pub));
    memcpy(z->cli_pub, c->client_public, sizeof(z->cli_pub));
    /* Each end keeps only the secret key it uses. */
    if (server)
        memcpy(z->srv_sec, c->server_secret, sizeof(z->srv_sec));
    else
        memcpy(z->cli_sec, c->client_secret, sizeof(z->cli_sec));
    z->curve = 1;
    return FLPS_OK;
}

static const transport_vtable zt_vtable = {
    .name = "zmq",
    .listen = zt_listen,
    .connect = zt_connect,
    .send = zt_send,
    .recv = zt_recv,
    .destroy = zt_destroy,
};

flps_err transport_zmq_create(transport **out)
{
    zt *z = flps_calloc(1, sizeof(*z));

    if (z == NULL)
        return FLPS_ENOMEM;
    z->ctx = zmq_ctx_new();
    if (z->ctx == NULL) {
        flps_free(z);
        return FLPS_ESYS;
    }
    z->base.vt = &zt_vtable;
    z->base.refused_peer = UINT32_MAX;
    z->lim.send_hwm = TRANSPORT_SEND_HWM_DEFAULT;
    z->lim.max_frame_bytes = TRANSPORT_MAX_FRAME_DEFAULT;
    z->lim.max_peers = TRANSPORT_MAX_PEERS_DEFAULT;
    *out = &z->base;
    return FLPS_OK;
}
