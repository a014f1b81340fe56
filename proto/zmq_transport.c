/* The ZeroMQ transport: ROUTER on a shard, one DEALER per shard on a worker.
 * Payload frames are handed to ZeroMQ without copies (zmq_msg_init_data with
 * a release callback on the frame's proto_buf). Received frames stay in
 * ZeroMQ's own messages (a large one has its own 8-byte aligned block);
 * only small ones that sit unaligned in ZeroMQ's batch buffer are copied,
 * into room the reused receive record carries. */
#include "proto/transport.h"

#include <errno.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/log.h"

#define ZT_MAX_ID 256
/* Bytes of unaligned small frames a receive record holds itself (headers
 * are about a hundred; larger unaligned frames get their own copy). */
#define ZT_RX_ROOM 1024
/* Receive records kept for reuse: more than a shard holds at once is
 * rare, and each is about 1.5 KiB. */
#define ZT_RX_CACHE 64

typedef struct zt_peer {
    unsigned char id[ZT_MAX_ID]; /* ROUTER routing id */
    size_t idlen;
    void *sock; /* DEALER (connector) */
} zt_peer;

typedef struct zt_rx zt_rx;

typedef struct zt {
    transport base;
    void *ctx;
    void *router; /* listener socket, or NULL */
    zt_peer *peers;
    uint32_t npeers, cap;
    zmq_pollitem_t *items; /* connector: one per DEALER */
    uint32_t next_poll;    /* connector: fairness across DEALERs */
    /* Receive records: released ones wait in free_rx for the next
     * message. A record released after transport_destroy still needs z,
     * so z goes only when the last one is back (live == 0, dead). */
    zt_rx *free_rx;
    uint32_t nfree;
    uint32_t live; /* records handed out and not yet released */
    int dead;      /* transport_destroy was called */
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

static flps_err zt_listen(transport *t, const char *endpoint, char *bound,
                          size_t boundlen)
{
    zt *z = (zt *)t;
    int one = 1;
    size_t len = boundlen;
    flps_err rc;

    if (z->router != NULL || z->npeers > 0)
        return FLPS_ESTATE;
    z->router = zmq_socket(z->ctx, ZMQ_ROUTER);
    if (z->router == NULL)
        return zt_fail(z, "zmq_socket(ROUTER)");
    rc = zt_set_common(z, z->router);
    if (rc != FLPS_OK)
        goto fail;
    /* Report unroutable peers instead of dropping silently. */
    if (zmq_setsockopt(z->router, ZMQ_ROUTER_MANDATORY, &one, sizeof(one))) {
        rc = zt_fail(z, "zmq_setsockopt(ROUTER_MANDATORY)");
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

    if (peer >= z->npeers || nframes == 0)
        return FLPS_ECLOSED;
    if (z->router != NULL) {
        s = z->router;
        if (zmq_send(s, z->peers[peer].id, z->peers[peer].idlen, ZMQ_SNDMORE) <
            0) {
            /* EHOSTUNREACH: the peer's connection is gone. Nothing was
             * queued: a ROUTER discards a message whose first part fails. */
            zt_fail(z, "zmq_send(routing id)");
            return FLPS_ECLOSED;
        }
    } else {
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
        if (zmq_msg_send(&m, s, more) < 0) {
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

/* Map a ROUTER routing id to a peer number, adding it if new. */
static flps_err zt_peer_of(zt *z, const void *id, size_t len, uint32_t *peer)
{
    flps_err rc;

    if (len > ZT_MAX_ID)
        return FLPS_EPROTO;
    for (uint32_t i = 0; i < z->npeers; i++) {
        if (z->peers[i].idlen == len && memcmp(z->peers[i].id, id, len) == 0) {
            *peer = i;
            return FLPS_OK;
        }
    }
    rc = zt_grow(z);
    if (rc != FLPS_OK)
        return rc;
    memcpy(z->peers[z->npeers].id, id, len);
    z->peers[z->npeers].idlen = len;
    z->peers[z->npeers].sock = NULL;
    *peer = z->npeers++;
    return FLPS_OK;
}

/* Read the rest of a multipart message into r (the first part is there). */
static flps_err zt_read_parts(zt *z, void *s, zt_rx *r, int *overflow)
{
    while (zmq_msg_more(&r->parts[r->nparts - 1])) {
        if (r->nparts == PROTO_MAX_FRAMES + 1) {
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

static flps_err zt_recv(transport *t, int timeout_ms, transport_rx **out)
{
    zt *z = (zt *)t;
    zt_rx *r;
    void *s = NULL;
    uint32_t peer = 0;
    size_t first = 0, wire = 0;
    int overflow = 0, n;
    flps_err rc;

    if (z->router != NULL) {
        zmq_pollitem_t it = {z->router, 0, ZMQ_POLLIN, 0};
        n = zmq_poll(&it, 1, timeout_ms);
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
                        zmq_msg_size(&r->parts[0]), &peer);
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

    if (z->router != NULL)
        zmq_close(z->router);
    for (uint32_t i = 0; i < z->npeers; i++)
        if (z->peers[i].sock != NULL)
            zmq_close(z->peers[i].sock);
    zmq_ctx_term(z->ctx);
    z->dead = 1;
    if (z->live == 0)
        zt_free(z);
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
    *out = &z->base;
    return FLPS_OK;
}
