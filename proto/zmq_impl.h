/* Internal to proto/zmq_*.c: the ZeroMQ transport's state and the calls
 * its files make of each other. One file per side:
 *   zmq_transport.c  life (create, listen, connect, destroy), credentials
 *                    (CURVE or PLAIN), and sending, with the parts a
 *                    connector cuts a large frame into
 *   zmq_recv.c       receiving: records, the table of peers, a listener's
 *                    admission of connections (socket monitor, ZAP
 *                    handler, proto/conngate.h) and the frames a
 *                    connector cut, put back together
 *   zmq_conn.c       a connector's handshakes: each DEALER's socket
 *                    monitor, a shard that refused this client's
 *                    credentials (FLPS_EAUTH), and the bounded wait of a
 *                    send that finds no connection to queue on
 * Not for use outside proto/zmq_*.c. */
#ifndef FLPS_PROTO_ZMQ_IMPL_H
#define FLPS_PROTO_ZMQ_IMPL_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "proto/conngate.h"
#include "proto/creds.h"
#include "proto/transport.h"

#define ZT_MAX_ID 256
/* Bytes of unaligned small frames a receive record holds itself (headers
 * are about a hundred; larger unaligned frames get their own copy). */
#define ZT_RX_ROOM 1024
/* Receive records kept for reuse: more than a shard holds at once is
 * rare, and each is about 1.5 KiB. */
#define ZT_RX_CACHE 64
#define ZT_SLOT_MASK ((1u << TRANSPORT_PEER_SLOT_BITS) - 1u)
/* PLAIN's user name; the password is the job's secret. */
#define ZT_PLAIN_USER "flps"

/* A message whose frames a connector cut into parts starts with a part
 * that says so: this magic (a first byte no MessagePack header has), the
 * count of frames (u32) and each frame's length (u64), little-endian.
 * One whose first frame would start with the magic is sent this way too,
 * so the two kinds are never confused. */
#define ZT_CUT_MAGIC "\0flpsZc\1"
#define ZT_CUT_MAGIC_LEN 8
#define ZT_CUT_HEAD (ZT_CUT_MAGIC_LEN + 4)

typedef struct zt_peer {
    unsigned char id[ZT_MAX_ID]; /* ROUTER routing id */
    size_t idlen;
    void *sock; /* DEALER (connector) */
    /* Connector only (zmq_conn.c). */
    void *mon;      /* the PAIR reading the DEALER's socket monitor */
    char *endpoint; /* where it connects, for messages */
    int refused;    /* ZT_HS_*: why the shard refused its handshake, or 0 */
    uint32_t code;  /* the refusal's event value (protocol error, status) */
    uint32_t cuts;  /* handshakes cut short in a row (no success between) */
    int reported;   /* transport_recv returned the refusal */
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
    conngate *gate;        /* listener: which connections it keeps */
    double cap_logged;     /* when a connection bound was last logged */
    uint64_t cap_unlogged; /* connections closed since then */
    zmq_pollitem_t *items; /* connector: one per DEALER */
    uint32_t next_poll;    /* connector: fairness across DEALERs */
    /* Receive records: released ones wait in free_rx for the next
     * message. A record released after transport_destroy still needs z,
     * so z goes only when the last one is back (live == 0, dead). */
    zt_rx *free_rx;
    uint32_t nfree;
    uint32_t live; /* records handed out and not yet released */
    int dead;      /* transport_destroy was called */
    /* Credentials (transport_set_credentials): CURVE's keys in Z85, or
     * PLAIN's secret; on a listener the REP socket of its ZAP handler. */
    int curve, plain;
    char srv_pub[CREDS_KEY_LEN + 1], srv_sec[CREDS_KEY_LEN + 1];
    char cli_pub[CREDS_KEY_LEN + 1], cli_sec[CREDS_KEY_LEN + 1];
    uint8_t cli_pub_bin[32];
    char secret[CREDS_SECRET_MAX + 1];
    void *zap;
    double auth_logged;     /* when a refused handshake was last logged */
    uint64_t auth_unlogged; /* refused since then */
    /* A HANDSHAKE_FAILED_NO_DETAIL event was read and the DISCONNECTED
     * that names its connection has not been yet (zmq_recv.c). */
    int cut_pending;
} zt;

struct zt_rx {
    transport_rx rx;
    zt *owner;
    zt_rx *next_free;
    /* The routing id (listener) and the frames that came as one part. */
    zmq_msg_t parts[PROTO_MAX_FRAMES + 1];
    size_t nparts;
    /* Per part slot: a realigned copy, or a frame put back together from
     * the parts it was cut into (then parts[i] is empty). */
    void *copies[PROTO_MAX_FRAMES + 1];
    size_t room_used;
    alignas(16) unsigned char room[ZT_RX_ROOM]; /* small realigned frames */
};

/* Bytes one part of len bytes takes on a ZMTP 3 wire. */
static inline size_t zt_part_wire(size_t len)
{
    return len + (len < 256 ? 2 : 9);
}

/* Set the transport's error message from zmq_errno; FLPS_ESYS. */
flps_err zt_fail(zt *z, const char *what);

/* Free z and its cached records (the last step of transport_destroy). */
void zt_free(zt *z);

/* Grow the table of peers (and poll items) by one if full. */
flps_err zt_grow(zt *z);

/* The receive function of the vtable (zmq_recv.c). */
flps_err zt_recv(transport *t, int timeout_ms, transport_rx **out);

/* Why a connector's handshake was refused (zt_peer.refused). */
enum {
    ZT_HS_OK = 0,
    ZT_HS_MECHANISM, /* the shard expects another mechanism */
    ZT_HS_PROTOCOL,  /* another protocol error (CURVE: not its key) */
    ZT_HS_AUTH,      /* its ZAP handler refused the credentials */
    ZT_HS_CUT        /* ZT_CUTS_REFUSED handshakes in a row cut short */
};
/* Handshakes cut short in a row (the shard closed them, as one does when
 * a CURVE client has another job's server key) that count as a refusal;
 * one that succeeds starts the count again. ZeroMQ reconnects every
 * 100 ms, so about half a second; a shard that restarts refuses the
 * connection itself, which is no handshake. */
#define ZT_CUTS_REFUSED 5

/* Watch the handshakes of connector peer (its DEALER is made): a socket
 * monitor on a unique inproc address and the PAIR that reads it. */
flps_err zt_conn_monitor(zt *z, uint32_t peer);

/* Read the events peer's monitor has queued, without waiting. */
void zt_conn_events(zt *z, uint32_t peer);

/* FLPS_EAUTH, errmsg saying what was wrong and what to do, when peer's
 * shard refused its handshake; else FLPS_OK. */
flps_err zt_conn_refusal(zt *z, uint32_t peer);

/* A send to peer found no room (EAGAIN: its connection's queue is gone,
 * as after a refused handshake): wait until it can send, or its handshake
 * is refused (FLPS_EAUTH), or until the mono clock reads until_s
 * (FLPS_ETIMEDOUT), each with errmsg. */
flps_err zt_conn_wait_send(zt *z, uint32_t peer, double until_s);

/* Seconds a send waits for room at most: the handshake's deadline and a
 * margin. */
double zt_conn_send_wait_s(const zt *z);

#endif
