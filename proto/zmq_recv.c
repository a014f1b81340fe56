/* The ZeroMQ transport's receiving side (zmq_impl.h): records, the table
 * of peers, a listener's admission of connections, and frames put back
 * together from the parts a connector cut them into.
 *
 * Received frames stay in ZeroMQ's own messages (a large one has its own
 * 8-byte aligned block); only small ones that sit unaligned in ZeroMQ's
 * batch buffer are copied, into room the reused receive record carries,
 * and a frame that came in parts is copied once into a block of its own.
 *
 * The socket monitor's ACCEPTED and DISCONNECTED events feed the
 * connection gate (proto/conngate.h), which closes connections beyond the
 * bounds, and free a peer's routing state when its connection goes: each
 * peer remembers the descriptor its first message came on (ZMQ_SRCFD),
 * and the monitor's events are read before every message, so a descriptor
 * reused by a new connection is never taken for the old one. libzmq 4.3's
 * ZMQ_ROUTER_NOTIFY would say the same, but it is a draft option that the
 * packaged library does not build; for the same reason its monitor events
 * of a handshake name no connection (their value is a code), so a
 * connection counts as admitted when its first message comes.
 *
 * With credentials, every handshake that fails is counted as refused,
 * once (without them no handshake authenticates anything, so a connection
 * that ends early is only not admitted). libzmq reports a failed
 * handshake with one event: HANDSHAKE_FAILED_PROTOCOL or _AUTH when it
 * refuses it, _NO_DETAIL when the connection ends before the handshake
 * completed (the peer closed it, or its deadline passed). The last is
 * what a client without the job's mechanism often causes: it reads the
 * shard's greeting, refuses it itself and closes before the shard has
 * read its own. _NO_DETAIL names no connection either, but libzmq sends
 * it and then the DISCONNECTED of its connection in one call on the
 * context's one I/O thread, so it is matched to that DISCONNECTED; a
 * connection the gate closed is not counted as a refused handshake (the
 * gate counted it already). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/zmq_impl.h"
#include "proto/zmqmon.h"

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

/* A connection went: free the routing state of the peer that used it. */
static void zt_on_disconnected(zt *z, int fd)
{
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

/* The handshake's name in log lines. */
static const char *zt_mechanism(const zt *z)
{
    return z->curve ? "CURVE " : z->plain ? "PLAIN " : "";
}

/* Why a handshake failed: the monitor event that said so. */
enum { ZT_REFUSED_PROTOCOL, ZT_REFUSED_CREDENTIALS, ZT_REFUSED_CUT };

/* A connection's handshake was refused: count it, and log it at most once
 * a minute with the count (a stranger may try very often). */
static void zt_on_auth_refused(zt *z, int reason)
{
    double now = flps_mono_s();
    const char *why = reason == ZT_REFUSED_CUT
                          ? "closed before its handshake completed"
                      : reason == ZT_REFUSED_CREDENTIALS
                          ? (z->curve ? "not the job's CURVE client key"
                                      : "not the job's secret")
                      : z->curve ? "no CURVE, or not this job's server key"
                      : z->plain ? "no PLAIN credentials"
                                 : "not ZMTP 3";

    z->base.stats.auth_refused++;
    z->auth_unlogged++;
    if (z->auth_logged == 0 || now - z->auth_logged >= 60) {
        log_warn("refused %llu connection(s) in the %shandshake since the "
                 "last such line (the last: %s)%s",
                 (unsigned long long)z->auth_unlogged, zt_mechanism(z), why,
                 z->curve || z->plain ? "; only the job's members are served"
                                      : "");
        z->auth_logged = now;
        z->auth_unlogged = 0;
    }
}

/* The gate closed connections: copy its counts, and log at most once a
 * minute with how many. */
static void zt_on_gate_closed(zt *z, size_t closed)
{
    const conngate_stats *gs = conngate_stats_get(z->gate);
    double now;

    z->base.stats.conns_refused = gs->closed_full;
    z->base.stats.conns_waiting_closed = gs->closed_waiting;
    z->base.stats.conns_addr_closed = gs->closed_addr;
    z->base.stats.conns_not_admitted = gs->not_admitted;
    if (closed == 0)
        return;
    z->cap_unlogged += closed;
    now = flps_mono_s();
    if (z->cap_logged == 0 || now - z->cap_logged >= 60) {
        char per_addr[64] = "";
        if (z->lim.max_waiting_per_addr > 0)
            snprintf(per_addr, sizeof(per_addr), ", %u from one address",
                     z->lim.max_waiting_per_addr);
        log_warn("closed %llu connection(s) since the last such line to stay "
                 "within %u connections, %u of them not yet authenticated%s "
                 "(flps --max-connections, --max-unauthenticated, "
                 "--max-unauthenticated-per-address); authenticated "
                 "connections keep their slots",
                 (unsigned long long)z->cap_unlogged, z->lim.max_peers,
                 z->lim.max_waiting ? z->lim.max_waiting : z->lim.max_peers,
                 per_addr);
        z->cap_logged = now;
        z->cap_unlogged = 0;
    }
}

/* Whether a ZAP request's credentials (frames 5 on: the mechanism, then
 * CURVE's key or PLAIN's user name and password) are the job's. */
static int zt_zap_admits(const zt *z, const zmq_msg_t *f, size_t n)
{
    if (z->curve)
        return n == 7 && zmq_msg_size(&f[5]) == 5 &&
               memcmp(zmq_msg_data((zmq_msg_t *)&f[5]), "CURVE", 5) == 0 &&
               zmq_msg_size(&f[6]) == 32 &&
               memcmp(zmq_msg_data((zmq_msg_t *)&f[6]), z->cli_pub_bin, 32) ==
                   0;
    if (z->plain && n == 8 && zmq_msg_size(&f[5]) == 5 &&
        memcmp(zmq_msg_data((zmq_msg_t *)&f[5]), "PLAIN", 5) == 0 &&
        zmq_msg_size(&f[6]) == strlen(ZT_PLAIN_USER) &&
        memcmp(zmq_msg_data((zmq_msg_t *)&f[6]), ZT_PLAIN_USER,
               strlen(ZT_PLAIN_USER)) == 0 &&
        zmq_msg_size(&f[7]) <= CREDS_SECRET_MAX) {
        char pw[CREDS_SECRET_MAX + 1];
        int ok;
        memcpy(pw, zmq_msg_data((zmq_msg_t *)&f[7]), zmq_msg_size(&f[7]));
        pw[zmq_msg_size(&f[7])] = '\0';
        ok = strlen(pw) == zmq_msg_size(&f[7]) &&
             creds_secret_equal(z->secret, pw);
        explicit_bzero(pw, sizeof(pw));
        return ok;
    }
    return 0;
}

/* Answer one ZAP request (ZeroMQ RFC 27): admit a client with the job's
 * CURVE key or secret, refuse anything else. */
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
    ok = zt_zap_admits(z, f, n);
    code = ok ? "200" : "400";
    zmq_send(z->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    zmq_send(z->zap, code, 3, ZMQ_SNDMORE);
    zmq_send(z->zap, ok ? "OK" : "not a member of the job",
             ok ? 2 : strlen("not a member of the job"), ZMQ_SNDMORE);
    zmq_send(z->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(z->zap, "", 0, 0);
    for (size_t i = 0; i < n; i++) {
        /* PLAIN's password is the job's secret. */
        if (zmq_msg_size(&f[i]) > 0)
            explicit_bzero(zmq_msg_data(&f[i]), zmq_msg_size(&f[i]));
        zmq_msg_close(&f[i]);
    }
}

/* Events read at most per call: a stranger who makes a new connection
 * for every one closed keeps the monitor busy, and messages (a member's
 * REGISTER, a ZAP request) must still be served between. */
#define ZT_EVENTS_PER_DRAIN 1024

/* Read the events the monitor has queued, without waiting, then let the
 * gate close what is beyond its bounds: the events first, so that a
 * descriptor closed and reused within them is known as the new
 * connection's before anything is closed. */
static void zt_drain_monitor(zt *z)
{
    uint16_t event;
    uint32_t value;
    int accepted = 0;

    for (int n = 0;
         n < ZT_EVENTS_PER_DRAIN && zmqmon_next(z->mon, &event, &value); n++) {
        if (event == ZMQ_EVENT_ACCEPTED) {
            conngate_accepted(z->gate, (int)value);
            accepted = 1;
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            /* The connection a _NO_DETAIL just before was about (see
             * the top): refused if it never got in, and the gate did
             * not close it. */
            if (conngate_closed(z->gate, (int)value) && z->cut_pending &&
                (z->curve || z->plain))
                zt_on_auth_refused(z, ZT_REFUSED_CUT);
            z->cut_pending = 0;
            zt_on_disconnected(z, (int)value);
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            z->cut_pending = 1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                   event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            zt_on_auth_refused(z, event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                                      ? ZT_REFUSED_CREDENTIALS
                                      : ZT_REFUSED_PROTOCOL);
        }
    }
    zt_on_gate_closed(z, accepted ? conngate_enforce(z->gate) : 0);
}

/* Wait up to timeout_ms for a message on the listener, serving the ZAP
 * handler and the monitor meanwhile. >0: one is there; 0: none; <0:
 * zmq_poll failed (zmq_errno says why). */
static int zt_listener_wait(zt *z, int timeout_ms)
{
    const double until = flps_mono_s() + timeout_ms / 1000.0;
    int wait = timeout_ms, n;

    for (;;) {
        zmq_pollitem_t it[3] = {{z->router, 0, ZMQ_POLLIN, 0},
                                {z->mon, 0, ZMQ_POLLIN, 0},
                                {z->zap, 0, ZMQ_POLLIN, 0}};
        n = zmq_poll(it, z->zap != NULL ? 3 : 2, wait);
        if (n < 0)
            return n; /* before anything else can overwrite its errno */
        /* Handshakes wait for the ZAP handler's answer. */
        if (z->zap != NULL && (it[2].revents & ZMQ_POLLIN))
            zt_serve_zap(z);
        /* Before the message: a peer whose connection went is freed
         * before a new one can arrive on the same descriptor. */
        zt_drain_monitor(z);
        if (n == 0 || (it[0].revents & ZMQ_POLLIN))
            return n;
        if (timeout_ms >= 0) { /* only the monitor: wait on */
            const double left = until - flps_mono_s();
            if (left <= 0)
                return 0;
            wait = (int)(left * 1000.0) + 1;
        }
    }
}

/* A connector peer whose refused handshake transport_recv has not said
 * yet, or UINT32_MAX. */
static uint32_t zt_unreported_refusal(const zt *z)
{
    for (uint32_t i = 0; i < z->npeers; i++)
        if (z->peers[i].refused != ZT_HS_OK && !z->peers[i].reported)
            return i;
    return UINT32_MAX;
}

/* Wait up to timeout_ms for a message on a connector's DEALERs, reading
 * their monitors meanwhile (zmq_conn.c). >0: one is there; 0: none; <0:
 * zmq_poll failed (zmq_errno says why). *refused: a peer whose shard
 * refused its handshake, not said yet (then the return is 0), or
 * UINT32_MAX. */
static int zt_connector_wait(zt *z, int timeout_ms, uint32_t *refused)
{
    const double until = flps_mono_s() + timeout_ms / 1000.0;
    const int nitems = 2 * (int)z->npeers;
    int wait = timeout_ms, n;

    for (;;) {
        int msgs = 0;
        *refused = zt_unreported_refusal(z);
        if (*refused != UINT32_MAX)
            return 0;
        n = zmq_poll(z->items, nitems, wait);
        if (n < 0)
            return n;
        for (uint32_t i = 0; i < z->npeers; i++) {
            if (z->items[2 * i + 1].revents & ZMQ_POLLIN)
                zt_conn_events(z, i);
            if (z->items[2 * i].revents & ZMQ_POLLIN)
                msgs++;
        }
        if (msgs > 0)
            return msgs;
        *refused = zt_unreported_refusal(z);
        if (n == 0 || *refused != UINT32_MAX)
            return 0;
        if (timeout_ms >= 0) { /* only the monitors: wait on */
            const double left = until - flps_mono_s();
            if (left <= 0)
                return 0;
            wait = (int)(left * 1000.0) + 1;
        }
    }
}

/* Read and drop the rest of a multipart message. */
static void zt_drain(void *s, int more)
{
    while (more) {
        zmq_msg_t sink;
        zmq_msg_init(&sink);
        if (zmq_msg_recv(&sink, s, 0) < 0)
            more = 0;
        else
            more = zmq_msg_more(&sink);
        zmq_msg_close(&sink);
    }
}

/* Read the rest of a multipart message into r (the first part is there),
 * one part per frame. A message has at most PROTO_MAX_FRAMES frames
 * either way: a listener's first part is the routing id, a connector's is
 * a frame. *refuse says why one is refused (more frames, a frame over the
 * limit). */
static flps_err zt_read_parts(zt *z, void *s, zt_rx *r, const char **refuse)
{
    const size_t max = PROTO_MAX_FRAMES + (z->router != NULL ? 1 : 0);

    while (zmq_msg_more(&r->parts[r->nparts - 1])) {
        if (r->nparts == max) {
            zt_drain(s, 1);
            *refuse = "frames";
            break;
        }
        zmq_msg_init(&r->parts[r->nparts]);
        if (zmq_msg_recv(&r->parts[r->nparts], s, 0) < 0) {
            zmq_msg_close(&r->parts[r->nparts]);
            return zt_fail(z, "zmq_msg_recv");
        }
        z->base.stats.bytes_recv +=
            zt_part_wire(zmq_msg_size(&r->parts[r->nparts]));
        r->nparts++;
    }
    for (size_t i = 1; z->router != NULL && i < r->nparts; i++)
        if (z->lim.max_frame_bytes >= 0 &&
            zmq_msg_size(&r->parts[i]) > (size_t)z->lim.max_frame_bytes)
            *refuse = "size";
    return FLPS_OK;
}

/* Whether part h starts as the header part of a cut message. */
static int zt_is_cut_head(const zmq_msg_t *h)
{
    return zmq_msg_size(h) >= ZT_CUT_MAGIC_LEN &&
           memcmp(zmq_msg_data((zmq_msg_t *)h), ZT_CUT_MAGIC,
                  ZT_CUT_MAGIC_LEN) == 0;
}

/* The lengths the header part h of a cut message gives (zmq_impl.h) into
 * len[] (the first PROTO_MAX_FRAMES of them), their count into *n; 0 when
 * it is malformed. */
static int zt_cut_head(const zmq_msg_t *h, uint64_t *len, size_t *n)
{
    const unsigned char *p = zmq_msg_data((zmq_msg_t *)h);
    const size_t size = zmq_msg_size(h);
    uint32_t k = 0;

    if (size < ZT_CUT_HEAD)
        return 0;
    for (int b = 0; b < 4; b++)
        k |= (uint32_t)p[ZT_CUT_MAGIC_LEN + b] << (8 * b);
    if (k == 0 || size != ZT_CUT_HEAD + 8 * (size_t)k)
        return 0;
    *n = k;
    for (uint32_t i = 0; i < k && i < PROTO_MAX_FRAMES; i++) {
        len[i] = 0;
        for (int b = 0; b < 8; b++)
            len[i] |= (uint64_t)p[ZT_CUT_HEAD + 8 * i + b] << (8 * b);
    }
    return 1;
}

/* Read one part of a cut message into m; its more flag into *more. */
static flps_err zt_read_one(zt *z, zmq_msg_t *m, int *more)
{
    zmq_msg_init(m);
    if (zmq_msg_recv(m, z->router, 0) < 0) {
        zmq_msg_close(m);
        return zt_fail(z, "zmq_msg_recv");
    }
    z->base.stats.bytes_recv += zt_part_wire(zmq_msg_size(m));
    *more = zmq_msg_more(m);
    return FLPS_OK;
}

/* Frame i of a cut message, len bytes, into part slot `slot` of r: as its
 * one part when it came as one, else copied together from its parts. */
static flps_err zt_read_cut_frame(zt *z, zt_rx *r, size_t slot, uint64_t len,
                                  int *more, const char **refuse)
{
    zmq_msg_t *m = &r->parts[slot];
    size_t got;
    unsigned char *buf;
    flps_err rc;

    if (!*more) {
        *refuse = "cut";
        return FLPS_OK;
    }
    rc = zt_read_one(z, m, more);
    if (rc != FLPS_OK)
        return rc;
    r->nparts = slot + 1;
    got = zmq_msg_size(m);
    if (got == len)
        return FLPS_OK;
    if (got > len || got == 0) {
        *refuse = "cut";
        return FLPS_OK;
    }
    buf = flps_malloc(len);
    if (buf == NULL)
        return FLPS_ENOMEM;
    r->copies[slot] = buf;
    memcpy(buf, zmq_msg_data(m), got);
    zmq_msg_close(m);
    zmq_msg_init(m);
    while (got < len && *more) {
        zmq_msg_t p;
        size_t n;
        rc = zt_read_one(z, &p, more);
        if (rc != FLPS_OK)
            return rc;
        n = zmq_msg_size(&p);
        if (n == 0 || n > len - got) {
            zmq_msg_close(&p);
            *refuse = "cut";
            return FLPS_OK;
        }
        memcpy(buf + got, zmq_msg_data(&p), n);
        got += n;
        zmq_msg_close(&p);
    }
    if (got < len) {
        *refuse = "cut";
        return FLPS_OK;
    }
    r->rx.frames[slot - 1].data = buf;
    r->rx.frames[slot - 1].len = len;
    return FLPS_OK;
}

/* The rest of a cut message whose header part is r->parts[1]: the frames
 * it gives, each checked against max_frame_bytes before it is read. */
static flps_err zt_read_cut(zt *z, zt_rx *r, const char **refuse)
{
    uint64_t len[PROTO_MAX_FRAMES];
    size_t n = 0;
    int more = zmq_msg_more(&r->parts[1]);
    int kind = zt_cut_head(&r->parts[1], len, &n);
    flps_err rc = FLPS_OK;

    zmq_msg_close(&r->parts[1]);
    r->nparts = 1;
    if (!kind || n > PROTO_MAX_FRAMES) {
        *refuse = !kind ? "cut" : "frames";
        zt_drain(z->router, more);
        return FLPS_OK;
    }
    for (size_t i = 0; i < n; i++)
        if (z->lim.max_frame_bytes >= 0 &&
            len[i] > (uint64_t)z->lim.max_frame_bytes) {
            *refuse = "size";
            zt_drain(z->router, more);
            return FLPS_OK;
        }
    for (size_t i = 0; rc == FLPS_OK && *refuse == NULL && i < n; i++)
        rc = zt_read_cut_frame(z, r, 1 + i, len[i], &more, refuse);
    if (rc == FLPS_OK && more) {
        zt_drain(z->router, more);
        if (*refuse == NULL)
            *refuse = "cut";
    }
    return rc;
}

/* The descriptor a message came on (any part of it may say; libzmq sets
 * it on the parts its decoder made, not always on the routing id). */
static int zt_srcfd(zt_rx *r)
{
    for (size_t i = r->nparts; i-- > 0;) {
        int fd = zmq_msg_get(&r->parts[i], ZMQ_SRCFD);
        if (fd >= 0)
            return fd;
    }
    return -1;
}

/* The rest of a listener's message after its routing id (r->parts[0]):
 * its frames, whole or cut, and the descriptor it came on. */
static flps_err zt_read_listener(zt *z, zt_rx *r, const char **refuse, int *fd)
{
    flps_err rc;

    *fd = -1;
    if (!zmq_msg_more(&r->parts[0]))
        return FLPS_OK;
    zmq_msg_init(&r->parts[1]);
    if (zmq_msg_recv(&r->parts[1], z->router, 0) < 0) {
        zmq_msg_close(&r->parts[1]);
        return zt_fail(z, "zmq_msg_recv");
    }
    r->nparts = 2;
    *fd = zt_srcfd(r);
    z->base.stats.bytes_recv += zt_part_wire(zmq_msg_size(&r->parts[1]));
    if (zt_is_cut_head(&r->parts[1]))
        return zt_read_cut(z, r, refuse);
    rc = zt_read_parts(z, z->router, r, refuse);
    if (*fd < 0)
        *fd = zt_srcfd(r);
    return rc;
}

/* Why a message was refused, in the transport's error message. */
static void zt_refusal(zt *z, const char *why)
{
    if (strcmp(why, "frames") == 0)
        snprintf(z->base.errmsg, sizeof(z->base.errmsg),
                 "message with more than %d frames dropped", PROTO_MAX_FRAMES);
    else if (strcmp(why, "size") == 0)
        snprintf(z->base.errmsg, sizeof(z->base.errmsg),
                 "message with a frame larger than this listener's limit of "
                 "%lld bytes dropped (flps --max-message-bytes)",
                 (long long)z->lim.max_frame_bytes);
    else
        snprintf(z->base.errmsg, sizeof(z->base.errmsg),
                 "message whose frames do not add up to the lengths its "
                 "first part gives dropped");
}

/* Point r's frames (part slots first..nparts) at their bytes, realigning
 * what is not 4-byte aligned. A slot with a copy already is a frame put
 * together from parts, whose place the reader has set. */
static flps_err zt_map_frames(zt_rx *r, size_t first)
{
    for (size_t i = first; i < r->nparts; i++) {
        void *d = zmq_msg_data(&r->parts[i]);
        size_t len = zmq_msg_size(&r->parts[i]);

        if (r->copies[i] != NULL)
            continue;
        /* Zero-copy receive can leave a frame at any offset of ZeroMQ's
         * batch buffer; frames of u32/f32 need 4-byte alignment. */
        if (((uintptr_t)d & 3u) != 0) {
            void *c = zt_rx_realign(r, i, len);
            if (c == NULL)
                return FLPS_ENOMEM;
            memcpy(c, d, len);
            d = c;
        }
        r->rx.frames[i - first].data = d;
        r->rx.frames[i - first].len = len;
    }
    r->rx.nframes = r->nparts - first;
    return FLPS_OK;
}

/* Wait for a message and take its first part into r->parts[0]: s is the
 * socket it is on, *peer the connector's peer it came from. */
static flps_err zt_recv_first(zt *z, int timeout_ms, zt_rx **out, void **s,
                              uint32_t *peer)
{
    uint32_t refused = UINT32_MAX;
    zt_rx *r;
    int n;

    *s = NULL;
    if (z->router != NULL) {
        n = zt_listener_wait(z, timeout_ms);
        *s = z->router;
    } else {
        if (z->npeers == 0)
            return FLPS_ESTATE;
        n = zt_connector_wait(z, timeout_ms, &refused);
    }
    if (refused != UINT32_MAX) {
        z->peers[refused].reported = 1;
        z->base.refused_peer = refused;
        return zt_conn_refusal(z, refused);
    }
    if (n < 0) {
        if (zmq_errno() == EINTR)
            return FLPS_ETIMEDOUT;
        return zt_fail(z, "zmq_poll");
    }
    if (n == 0)
        return FLPS_ETIMEDOUT;
    if (*s == NULL) {
        /* Round-robin so one busy shard cannot starve the others. */
        for (uint32_t k = 0; k < z->npeers; k++) {
            uint32_t i = (z->next_poll + k) % z->npeers;
            if (z->items[2 * i].revents & ZMQ_POLLIN) {
                *s = z->items[2 * i].socket;
                *peer = i;
                z->next_poll = i + 1;
                break;
            }
        }
        if (*s == NULL)
            return FLPS_ETIMEDOUT;
    }
    r = zt_rx_get(z);
    if (r == NULL)
        return FLPS_ENOMEM;
    zmq_msg_init(&r->parts[0]);
    if (zmq_msg_recv(&r->parts[0], *s, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&r->parts[0]);
        zt_rx_release(&r->rx);
        if (e == EAGAIN)
            return FLPS_ETIMEDOUT;
        errno = e;
        return zt_fail(z, "zmq_msg_recv");
    }
    r->nparts = 1;
    *out = r;
    return FLPS_OK;
}

flps_err zt_recv(transport *t, int timeout_ms, transport_rx **out)
{
    zt *z = (zt *)t;
    zt_rx *r = NULL;
    void *s;
    uint32_t peer = 0;
    const char *refuse = NULL;
    uint64_t before;
    int fd = -1;
    flps_err rc;

    t->refused_peer = UINT32_MAX;
    rc = zt_recv_first(z, timeout_ms, &r, &s, &peer);
    if (rc != FLPS_OK)
        return rc;
    before = t->stats.bytes_recv;
    if (z->router != NULL) {
        rc = zt_read_listener(z, r, &refuse, &fd);
        if (rc == FLPS_OK) {
            /* A message came on it: past its handshake, so a member's. */
            conngate_message(z->gate, fd);
            rc = zt_peer_of(z, zmq_msg_data(&r->parts[0]),
                            zmq_msg_size(&r->parts[0]), fd, &peer);
        }
    } else {
        t->stats.bytes_recv += zt_part_wire(zmq_msg_size(&r->parts[0]));
        rc = zt_read_parts(z, s, r, &refuse);
    }
    if (rc == FLPS_OK)
        rc = zt_map_frames(r, z->router != NULL ? 1 : 0);
    if (rc != FLPS_OK)
        goto fail;
    r->rx.peer = peer;
    r->rx.wire_bytes = (size_t)(t->stats.bytes_recv - before);
    t->stats.msgs_recv++;
    if (refuse != NULL) {
        zt_refusal(z, refuse);
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
