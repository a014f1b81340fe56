/* The ZeroMQ transport: ROUTER on a shard, one DEALER per shard on a worker.
 * This file: its life, its credentials and sending (zmq_impl.h says which
 * file does what). Payload frames are handed to ZeroMQ without copies
 * (zmq_msg_init_data with a release callback on the frame's proto_buf).
 *
 * A listener bounds what peers can make it hold (transport_limits): a send
 * high-water mark per peer with ROUTER_MANDATORY, so a reply to a peer
 * that does not read is dropped rather than buffered; connections, counted
 * and closed by proto/conngate.h; and every frame it reads at
 * TRANSPORT_ZMQ_WIRE_MAX bytes (ZMQ_MAXMSGSIZE). That one bound covers a
 * connection before its handshake is done, whose frames ZeroMQ reads
 * under the same option (a stranger's 200 MiB "greeting frame" was read
 * whole, 2 GB for 10 of them); so a connector sends a larger frame as
 * parts of TRANSPORT_ZMQ_PART_BYTES behind a part that gives the frames'
 * lengths, and the listener puts them back together, refusing a frame
 * larger than max_frame_bytes before it allocates it. With credentials
 * every connection is authenticated in its handshake (CURVE, or PLAIN with
 * the job's secret) by the listener's ZAP handler, so nothing of a
 * stranger's reaches a decoder. */
#include "proto/transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/creds.h"
#include "proto/zmq_impl.h"
#include "proto/zmqmon.h"

flps_err zt_fail(zt *z, const char *what)
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

flps_err zt_grow(zt *z)
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
    /* A connector polls each DEALER and its monitor (zmq_recv.c). */
    it = flps_realloc(z->items, 2 * (size_t)cap * sizeof(*it));
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
    if (lim->max_peers > ZT_SLOT_MASK || lim->send_hwm < 0 ||
        lim->handshake_ms < 0 || lim->socket_buffer < 0)
        return FLPS_EINVAL;
    z->lim = *lim;
    return FLPS_OK;
}

/* The listener's authentication: its ZAP handler, bound first (libzmq asks
 * it about every handshake of this context once it is bound), and CURVE's
 * server keys or PLAIN's server role on the ROUTER. */
static flps_err zt_listen_auth(zt *z)
{
    int one = 1, zero = 0;

    z->zap = zmq_socket(z->ctx, ZMQ_REP);
    if (z->zap == NULL ||
        zmq_setsockopt(z->zap, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_bind(z->zap, "inproc://zeromq.zap.01") != 0 ||
        zmq_setsockopt(z->router, ZMQ_ZAP_DOMAIN, "flps", 4) != 0)
        return zt_fail(z, "ZAP handler");
    if (z->curve &&
        (zmq_setsockopt(z->router, ZMQ_CURVE_SERVER, &one, sizeof(one)) ||
         zmq_setsockopt(z->router, ZMQ_CURVE_SECRETKEY, z->srv_sec,
                        sizeof(z->srv_sec))))
        return zt_fail(z, "CURVE set-up");
    if (z->plain &&
        zmq_setsockopt(z->router, ZMQ_PLAIN_SERVER, &one, sizeof(one)) != 0)
        return zt_fail(z, "PLAIN set-up");
    return FLPS_OK;
}

/* The socket monitor that tells the listener of connections (and the gate
 * that counts them). */
static flps_err zt_listen_monitor(zt *z)
{
    const conngate_limits gl = {z->lim.max_peers, z->lim.max_waiting,
                                z->lim.max_waiting_per_addr};
    char mon_ep[64];

    if (conngate_create(&gl, &z->gate) != FLPS_OK)
        return FLPS_ENOMEM;
    snprintf(mon_ep, sizeof(mon_ep), "inproc://flps-monitor-%p", (void *)z);
    /* A lost ACCEPTED or DISCONNECTED event would put the count of
     * connections off for good: the reader has no receive limit. */
    z->mon = zmqmon_open(z->ctx, z->router, mon_ep,
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    if (z->mon == NULL)
        return zt_fail(z, "socket monitor");
    return FLPS_OK;
}

static flps_err zt_listen(transport *t, const char *endpoint, char *bound,
                          size_t boundlen)
{
    zt *z = (zt *)t;
    int one = 1, hwm = z->lim.send_hwm, ivl = z->lim.handshake_ms;
    int sockbuf = z->lim.socket_buffer;
    /* A burst of new connections waits in the kernel, not refused there
     * (ZeroMQ's own backlog is 100), so the gate can choose among them.
     * Twice max_peers and at least 4096 (the kernel caps it at
     * net.core.somaxconn): a stranger holding and remaking max_peers
     * sockets and more must not fill the queue, or the kernel drops a
     * member's SYN and the member waits the 1 s of a retransmit (1 run
     * in 10 of the 1,100-socket test with a backlog of max_peers). */
    int backlog = z->lim.max_peers > 2048 ? (int)(2 * z->lim.max_peers) : 4096;
    const int64_t maxmsg = TRANSPORT_ZMQ_WIRE_MAX;
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
    /* Report unroutable peers instead of dropping silently, and with the
     * high-water mark, refuse (EAGAIN) a reply to a peer that does not
     * read instead of buffering it: zt_send drops it. The protocol keeps
     * a reading worker far below the mark (one request per part). Every
     * frame read, the handshake's included, at most maxmsg bytes. */
    if (zmq_setsockopt(z->router, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)) ||
        zmq_setsockopt(z->router, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
        zmq_setsockopt(z->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
        zmq_setsockopt(z->router, ZMQ_BACKLOG, &backlog, sizeof(backlog)) ||
        (ivl > 0 &&
         zmq_setsockopt(z->router, ZMQ_HANDSHAKE_IVL, &ivl, sizeof(ivl))) ||
        (sockbuf > 0 &&
         (zmq_setsockopt(z->router, ZMQ_SNDBUF, &sockbuf, sizeof(sockbuf)) ||
          zmq_setsockopt(z->router, ZMQ_RCVBUF, &sockbuf, sizeof(sockbuf))))) {
        rc = zt_fail(z, "zmq_setsockopt(ROUTER)");
        goto fail;
    }
    if (z->curve || z->plain) {
        rc = zt_listen_auth(z);
        if (rc != FLPS_OK)
            goto fail;
    }
    rc = zt_listen_monitor(z);
    if (rc != FLPS_OK)
        goto fail;
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
    conngate_destroy(z->gate);
    z->gate = NULL;
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

/* A connector's credentials on its new DEALER s. */
static flps_err zt_connect_auth(zt *z, void *s)
{
    if (z->curve && (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, z->srv_pub,
                                    sizeof(z->srv_pub)) != 0 ||
                     zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, z->cli_pub,
                                    sizeof(z->cli_pub)) != 0 ||
                     zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, z->cli_sec,
                                    sizeof(z->cli_sec)) != 0))
        return zt_fail(z, "zmq_setsockopt(CURVE)");
    if (z->plain && (zmq_setsockopt(s, ZMQ_PLAIN_USERNAME, ZT_PLAIN_USER,
                                    strlen(ZT_PLAIN_USER)) != 0 ||
                     zmq_setsockopt(s, ZMQ_PLAIN_PASSWORD, z->secret,
                                    strlen(z->secret)) != 0))
        return zt_fail(z, "zmq_setsockopt(PLAIN)");
    return FLPS_OK;
}

static flps_err zt_connect(transport *t, const char *endpoint, uint32_t *peer)
{
    zt *z = (zt *)t;
    void *s;
    zt_peer *p;
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
    if (rc == FLPS_OK)
        rc = zt_connect_auth(z, s);
    p = &z->peers[z->npeers];
    memset(p, 0, sizeof(*p));
    p->sock = s;
    /* The monitor before the connection: its first handshake is seen. */
    if (rc == FLPS_OK)
        rc = zt_conn_monitor(z, z->npeers);
    if (rc == FLPS_OK) {
        p->endpoint = flps_strdup(endpoint);
        if (p->endpoint == NULL)
            rc = FLPS_ENOMEM;
    }
    if (rc == FLPS_OK && zmq_connect(s, endpoint) != 0) {
        char what[300];
        snprintf(what, sizeof(what), "cannot connect to %s", endpoint);
        rc = zt_fail(z, what);
    }
    if (rc != FLPS_OK) {
        if (p->mon != NULL)
            zmq_close(p->mon);
        flps_free(p->endpoint);
        zmq_close(s);
        memset(p, 0, sizeof(*p));
        return rc;
    }
    for (int k = 0; k < 2; k++) {
        zmq_pollitem_t *it = &z->items[2 * z->npeers + k];
        it->socket = k == 0 ? s : p->mon;
        it->fd = 0;
        it->events = ZMQ_POLLIN;
        it->revents = 0;
    }
    *peer = z->npeers++;
    return FLPS_OK;
}

/* ZeroMQ calls this (from its I/O thread) when it is done with a frame. */
static void zt_frame_done(void *data, void *hint)
{
    (void)data;
    proto_buf_release(hint);
}

/* The code zt_send_part returns when a part sent with ZMQ_DONTWAIT found
 * no room (nothing queued); not an flps_err. */
#define ZT_AGAIN ((flps_err)1000)

/* Queue len bytes at base as one part (more: not the message's last),
 * referencing buf, or copied when buf is NULL. */
static flps_err zt_send_part(zt *z, void *s, proto_buf *buf,
                             unsigned char *base, size_t len, int flags)
{
    zmq_msg_t m;

    /* Small parts are cheaper to copy than to reference. */
    if (buf == NULL || len < 64) {
        if (zmq_msg_init_size(&m, len) != 0)
            return zt_fail(z, "zmq_msg_init_size");
        if (len > 0)
            memcpy(zmq_msg_data(&m), base, len);
    } else {
        proto_buf_hold(buf);
        if (zmq_msg_init_data(&m, base, len, zt_frame_done, buf) != 0) {
            proto_buf_release(buf);
            return zt_fail(z, "zmq_msg_init_data");
        }
    }
    if (zmq_msg_send(&m, s, flags) < 0) {
        const int e = zmq_errno();
        zmq_msg_close(&m);
        if (e == EAGAIN && (flags & ZMQ_DONTWAIT))
            return ZT_AGAIN;
        errno = e;
        return zt_fail(z, "zmq_msg_send");
    }
    z->base.stats.bytes_sent += zt_part_wire(len);
    return FLPS_OK;
}

/* A later part of a connector's message found no room: not expected (see
 * zt_send_first); said as an error, not as ZT_AGAIN. */
static flps_err zt_send_broken(zt *z, flps_err rc)
{
    if (rc != ZT_AGAIN)
        return rc;
    snprintf(z->base.errmsg, sizeof(z->base.errmsg),
             "zmq_msg_send: no room for a later part of a message");
    return FLPS_ESYS;
}

/* Whether a connector sends these frames cut (zmq_impl.h): one is larger
 * than a part, or the first starts as the header of a cut message does. */
static int zt_must_cut(const transport_frame *f, size_t nframes)
{
    for (size_t i = 0; i < nframes; i++)
        if (f[i].len > TRANSPORT_ZMQ_PART_BYTES)
            return 1;
    return f[0].len >= ZT_CUT_MAGIC_LEN &&
           memcmp((unsigned char *)proto_buf_data(f[0].buf) + f[0].off,
                  ZT_CUT_MAGIC, ZT_CUT_MAGIC_LEN) == 0;
}

/* The first part of a connector's message: sent without blocking; when
 * ZeroMQ has no room for it (with SNDHWM 0, only when the connection's
 * queue is gone, as after a refused handshake), wait for room while the
 * shard's refusal is not known, for zt_conn_send_wait_s at most. The
 * later parts then never wait: ZeroMQ takes a message whole once its
 * first part is in. */
static flps_err zt_send_first(zt *z, uint32_t peer, proto_buf *buf,
                              unsigned char *base, size_t len, int flags)
{
    const double until = flps_mono_s() + zt_conn_send_wait_s(z);

    for (;;) {
        flps_err rc = zt_conn_refusal(z, peer);
        if (rc == FLPS_OK)
            rc = zt_send_part(z, z->peers[peer].sock, buf, base, len,
                              flags | ZMQ_DONTWAIT);
        if (rc != ZT_AGAIN)
            return rc;
        rc = zt_conn_wait_send(z, peer, until);
        if (rc != FLPS_OK)
            return rc;
    }
}

/* The header part of a cut message: the magic, the count, the lengths. */
static flps_err zt_send_cut_head(zt *z, uint32_t peer, const transport_frame *f,
                                 size_t nframes)
{
    unsigned char head[ZT_CUT_HEAD + 8 * 64];
    const size_t len = ZT_CUT_HEAD + 8 * nframes;

    if (nframes > 64) {
        snprintf(z->base.errmsg, sizeof(z->base.errmsg),
                 "a message of %zu frames", nframes);
        return FLPS_EINVAL;
    }
    memcpy(head, ZT_CUT_MAGIC, ZT_CUT_MAGIC_LEN);
    for (int b = 0; b < 4; b++)
        head[ZT_CUT_MAGIC_LEN + b] = (unsigned char)(nframes >> (8 * b));
    for (size_t i = 0; i < nframes; i++)
        for (int b = 0; b < 8; b++)
            head[ZT_CUT_HEAD + 8 * i + b] =
                (unsigned char)((uint64_t)f[i].len >> (8 * b));
    return zt_send_first(z, peer, NULL, head, len, ZMQ_SNDMORE);
}

/* A connector's message: each frame as one part, or, cut, the header part
 * then each frame as parts of at most TRANSPORT_ZMQ_PART_BYTES (one empty
 * part for an empty frame). */
static flps_err zt_send_connector(zt *z, uint32_t peer,
                                  const transport_frame *f, size_t nframes)
{
    const size_t part = TRANSPORT_ZMQ_PART_BYTES;
    void *s = z->peers[peer].sock;
    flps_err rc;

    if (!zt_must_cut(f, nframes)) {
        for (size_t i = 0; i < nframes; i++) {
            unsigned char *base = proto_buf_data(f[i].buf);
            const int more = i + 1 < nframes ? ZMQ_SNDMORE : 0;
            rc = i == 0 ? zt_send_first(z, peer, f[i].buf, base + f[i].off,
                                        f[i].len, more)
                        : zt_send_part(z, s, f[i].buf, base + f[i].off,
                                       f[i].len, more | ZMQ_DONTWAIT);
            if (rc != FLPS_OK)
                return zt_send_broken(z, rc);
        }
        return FLPS_OK;
    }
    rc = zt_send_cut_head(z, peer, f, nframes);
    for (size_t i = 0; rc == FLPS_OK && i < nframes; i++) {
        unsigned char *base = (unsigned char *)proto_buf_data(f[i].buf);
        size_t at = 0;
        do {
            size_t n = f[i].len - at < part ? f[i].len - at : part;
            int last = i + 1 == nframes && at + n == f[i].len;
            rc = zt_send_part(z, s, f[i].buf, base + f[i].off + at, n,
                              (last ? 0 : ZMQ_SNDMORE) | ZMQ_DONTWAIT);
            at += n;
        } while (rc == FLPS_OK && at < f[i].len);
    }
    return zt_send_broken(z, rc);
}

/* A listener's reply to peer: its routing id, then the frames whole (a
 * connector reads them under no bound). */
static flps_err zt_send_listener(zt *z, uint32_t peer, const transport_frame *f,
                                 size_t nframes)
{
    const uint32_t slot = peer & ZT_SLOT_MASK;
    zt_peer *pp;

    if (slot >= z->npeers)
        return FLPS_ECLOSED;
    pp = &z->peers[slot];
    if (!pp->live || pp->gen != peer >> TRANSPORT_PEER_SLOT_BITS)
        return FLPS_ECLOSED;
    if (zmq_send(z->router, pp->id, pp->idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) <
        0) {
        /* Nothing was queued: a ROUTER discards a message whose first part
         * fails. EAGAIN: the peer's queue is at the high-water mark
         * because it does not read; the reply is dropped, which the
         * protocol survives (the client re-sends its request). */
        if (zmq_errno() == EAGAIN) {
            z->base.stats.msgs_dropped++;
            if (!pp->dropped)
                log_warn("peer %u does not read its replies (%d queued): "
                         "dropping what is sent to it until it does (logged "
                         "once per peer)",
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
    for (size_t i = 0; i < nframes; i++) {
        unsigned char *base = proto_buf_data(f[i].buf);
        flps_err rc =
            zt_send_part(z, z->router, f[i].buf, base + f[i].off, f[i].len,
                         (i + 1 < nframes ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
        if (rc != FLPS_OK)
            return zt_send_broken(z, rc);
    }
    return FLPS_OK;
}

static flps_err zt_send(transport *t, uint32_t peer, const transport_frame *f,
                        size_t nframes)
{
    zt *z = (zt *)t;
    flps_err rc;

    if (nframes == 0)
        return FLPS_ECLOSED;
    if (z->router != NULL) {
        rc = zt_send_listener(z, peer, f, nframes);
    } else {
        if (peer >= z->npeers)
            return FLPS_ECLOSED;
        rc = zt_send_connector(z, peer, f, nframes);
    }
    if (rc == FLPS_OK)
        t->stats.msgs_sent++;
    return rc;
}

void zt_free(zt *z)
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

static void zt_destroy(transport *t)
{
    zt *z = (zt *)t;

    if (z->mon != NULL)
        zmq_close(z->mon);
    if (z->zap != NULL)
        zmq_close(z->zap);
    if (z->router != NULL)
        zmq_close(z->router);
    conngate_destroy(z->gate);
    z->gate = NULL;
    explicit_bzero(z->srv_sec, sizeof(z->srv_sec));
    explicit_bzero(z->cli_sec, sizeof(z->cli_sec));
    explicit_bzero(z->secret, sizeof(z->secret));
    for (uint32_t i = 0; i < z->npeers && z->router == NULL; i++) {
        if (z->peers[i].mon != NULL)
            zmq_close(z->peers[i].mon);
        flps_free(z->peers[i].endpoint);
        if (z->peers[i].sock != NULL)
            zmq_close(z->peers[i].sock);
    }
    zmq_ctx_term(z->ctx);
    z->dead = 1;
    if (z->live == 0)
        zt_free(z);
}

static const transport_vtable zt_vtable;

/* CURVE's keys from c into z (c holds them). */
static flps_err zt_take_curve(zt *z, const flps_creds *c, int server,
                              char *errbuf, size_t errlen)
{
    if (!creds_have_curve())
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "the job's credentials hold CURVE keys but this libzmq was built "
            "without CURVE (zmq_has(\"curve\") is 0): the data plane cannot "
            "be encrypted; rebuild libzmq with libsodium, or drop the "
            "curve_* lines to run authenticated but not encrypted");
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

flps_err transport_set_credentials(transport *t, const flps_creds *c,
                                   int server, char *errbuf, size_t errlen)
{
    zt *z = (zt *)t;

    if (c == NULL || c->secret[0] == '\0')
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "the credentials hold no secret");
    if (t->vt != &zt_vtable) {
        if (!c->has_curve)
            return FLPS_OK; /* every message carries the secret */
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "the job's CURVE keys apply to the ZeroMQ transport only: the "
            "%s data plane is authenticated by the job's secret but not "
            "encrypted",
            t->vt->name);
    }
    if (z->router != NULL || z->npeers > 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESTATE,
                               "credentials are set before listen/connect");
    if (c->has_curve)
        return zt_take_curve(z, c, server, errbuf, errlen);
    /* No CURVE: PLAIN, the secret as the password. */
    snprintf(z->secret, sizeof(z->secret), "%s", c->secret);
    z->plain = 1;
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
    z->lim.max_waiting = TRANSPORT_MAX_WAITING_DEFAULT;
    z->lim.max_waiting_per_addr = TRANSPORT_MAX_WAITING_PER_ADDR_DEFAULT;
    z->lim.handshake_ms = TRANSPORT_HANDSHAKE_MS_DEFAULT;
    *out = &z->base;
    return FLPS_OK;
}
