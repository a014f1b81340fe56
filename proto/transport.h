/* The transport interface: a table of functions every transport (ZeroMQ,
 * RDMA) implements, so shards and clients never see which one runs.
 *
 * A transport is either a listener (a shard: many peers connect to it) or a
 * connector (a worker: it connects to every shard). Peers are small
 * integers: on a connector, the order of transport_connect calls; on a
 * listener, assigned on first contact and stable while that connection
 * lives. A transport is used by one thread at a time. */
#ifndef FLPS_PROTO_TRANSPORT_H
#define FLPS_PROTO_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/buf.h"
#include "proto/msg.h"

typedef struct transport transport;

/* One outgoing frame: len bytes at offset off of buf. */
typedef struct transport_frame {
    proto_buf *buf;
    size_t off;
    size_t len;
} transport_frame;

/* A received message: its frames (4-byte aligned), valid until
 * transport_rx_release. */
typedef struct transport_rx {
    uint32_t peer;
    size_t nframes;
    proto_frame frames[PROTO_MAX_FRAMES + 1];
    size_t wire_bytes; /* bytes this message took on the wire */
    void *impl;        /* the transport's own storage */
    void (*release)(struct transport_rx *rx);
} transport_rx;

typedef struct transport_stats {
    uint64_t bytes_sent; /* payload + framing put on the wire */
    uint64_t bytes_recv;
    uint64_t msgs_sent;
    uint64_t msgs_recv;
    uint64_t msgs_dropped; /* listener: not queued, the peer did not read */
    /* Listener: connections refused, each once, by why. */
    uint64_t conns_refused;        /* every slot held: max_peers */
    uint64_t conns_waiting_closed; /* to keep max_waiting */
    uint64_t conns_addr_closed;    /* to keep max_waiting_per_addr */
    /* ended before their first message: a handshake refused, timed out or
     * broken (a frame over the bound before it), a peer that gave up */
    uint64_t conns_not_admitted;
    /* listener with credentials: handshakes refused for their credentials
     * (not the job's CURVE key or secret) or their protocol (no CURVE, no
     * PLAIN), or that ended before they completed (closed by the peer,
     * timed out), each once; these connections are among
     * conns_not_admitted too (not the ones the gate closed) */
    uint64_t auth_refused;
} transport_stats;

/* What a listener bounds, so that peers which do not read, send huge
 * frames or open many connections cannot grow it without limit. A
 * connection is admitted when its first message comes (with credentials
 * set, only a member's can: the handshake checks them); before that it
 * waits, and what it sends is bounded by the transport's own frame bound
 * (ZeroMQ: TRANSPORT_ZMQ_WIRE_MAX bytes). */
typedef struct transport_limits {
    /* Messages queued for one peer; a reply beyond it is dropped, not
     * buffered (0: no limit). */
    int send_hwm;
    /* A frame of a message larger than this is refused (-1: no limit). */
    int64_t max_frame_bytes;
    /* Connections at once; a new one beyond it closes a waiting one, or is
     * closed itself when every slot is admitted (0: no limit). Also the
     * size of the table of peers. */
    uint32_t max_peers;
    /* Connections waiting at once (0: max_peers), and from one address
     * (0: no limit); a new one beyond either closes the quietest waiting
     * one (proto/conngate.h). The slots beyond max_waiting are members'. */
    uint32_t max_waiting;
    uint32_t max_waiting_per_addr;
    /* A handshake not finished within this many ms closes the connection
     * (0: ZeroMQ's own 30 s). */
    int handshake_ms;
    /* Each connection's kernel send and receive buffer in bytes
     * (SO_SNDBUF, SO_RCVBUF; 0: the kernel's autotuning). A bound on what
     * one connection keeps in flight either way: with shards beside the
     * workers, S - 1 connections send into each host's link at once, and
     * autotuned windows overflow a switch's queue there (8 % of segments
     * retransmitted at 100 Mbit/s, docs/benchmarks.md). Too small for a
     * link's bandwidth-delay product slows every connection: leave it 0
     * across long links. ZeroMQ only; RDMA ignores it. */
    int socket_buffer;
} transport_limits;

#define TRANSPORT_SEND_HWM_DEFAULT 4096
#define TRANSPORT_MAX_FRAME_DEFAULT (INT64_C(1) << 28) /* 256 MiB */
#define TRANSPORT_MAX_PEERS_DEFAULT 1024
#define TRANSPORT_MAX_WAITING_DEFAULT 256
#define TRANSPORT_MAX_WAITING_PER_ADDR_DEFAULT 64
#define TRANSPORT_HANDSHAKE_MS_DEFAULT 5000
/* Peer numbers of a listener: the slot in its table of peers in the low
 * bits, a count of the slot's reuses above, so the number of a peer that
 * left is not given to the next one for a long while. */
#define TRANSPORT_PEER_SLOT_BITS 16

typedef struct transport_vtable {
    const char *name;
    flps_err (*listen)(transport *t, const char *endpoint, char *bound,
                       size_t boundlen);
    flps_err (*connect)(transport *t, const char *endpoint, uint32_t *peer);
    flps_err (*send)(transport *t, uint32_t peer, const transport_frame *f,
                     size_t nframes);
    flps_err (*recv)(transport *t, int timeout_ms, transport_rx **rx);
    void (*destroy)(transport *t);
} transport_vtable;

struct transport {
    const transport_vtable *vt;
    transport_stats stats;
    char errmsg[256]; /* the last error, for logs */
    /* After transport_recv returned FLPS_EPROTO: the peer whose message
     * was refused, to answer it, or UINT32_MAX when it cannot be; after
     * FLPS_EAUTH (a connector): the peer that refused this end. */
    uint32_t refused_peer;
};

/* Bind to endpoint ("tcp://127.0.0.1:0" picks a free port); writes the
 * address actually bound into bound. */
static inline flps_err transport_listen(transport *t, const char *endpoint,
                                        char *bound, size_t boundlen)
{
    return t->vt->listen(t, endpoint, bound, boundlen);
}

/* Connect to a listener; returns its peer number. Does not block: the
 * connection is made (and remade after a loss) in the background. */
static inline flps_err transport_connect(transport *t, const char *endpoint,
                                         uint32_t *peer)
{
    return t->vt->connect(t, endpoint, peer);
}

/* Queue one message of nframes frames for peer. Does not block, but for
 * a ZeroMQ connector whose connection has no queue (its handshake was
 * just refused): it waits for the refusal to be known, for the handshake
 * deadline (TRANSPORT_HANDSHAKE_MS_DEFAULT) and 5 s at most.
 * Ownership: on FLPS_OK the transport holds its own reference to every
 * frame's buffer until sent; the caller keeps (and must release) its own.
 * On error nothing is queued. FLPS_ECLOSED: the peer is unknown/gone.
 * FLPS_EAUTH (connector): the peer refused this end's credentials in the
 * handshake (ZeroMQ; errmsg says what was wrong and what to do);
 * FLPS_ETIMEDOUT: no room came within that wait. */
static inline flps_err transport_send(transport *t, uint32_t peer,
                                      const transport_frame *f, size_t nframes)
{
    return t->vt->send(t, peer, f, nframes);
}

/* Wait up to timeout_ms (-1 = forever, 0 = poll) for one message.
 * FLPS_ETIMEDOUT when none came; FLPS_EPROTO for a message with too many
 * frames or from a peer the listener has no room for (dropped, counted;
 * errmsg says why, refused_peer whom to answer); FLPS_EAUTH (a ZeroMQ
 * connector), once per refusal: peer refused_peer refused this end's
 * handshake, so nothing sent to it is answered (errmsg says what was
 * wrong and what to do). Caller owns *rx on FLPS_OK. */
static inline flps_err transport_recv(transport *t, int timeout_ms,
                                      transport_rx **rx)
{
    return t->vt->recv(t, timeout_ms, rx);
}

static inline void transport_rx_release(transport_rx *rx)
{
    if (rx != NULL)
        rx->release(rx);
}

/* transport_destroy(NULL) does nothing. */
static inline void transport_destroy(transport *t)
{
    if (t != NULL)
        t->vt->destroy(t);
}

/* The ZeroMQ transport: ROUTER when listening, one DEALER per connection.
 * The ZMTP frame headers are counted in the byte statistics. */
flps_err transport_zmq_create(transport **out);

/* Set a ZeroMQ listener's limits (before transport_listen; a transport
 * that never calls it has the TRANSPORT_*_DEFAULT ones). Connectors have
 * none: a worker buffers what its shards send. FLPS_ESTATE after listen,
 * FLPS_EINVAL for max_peers above 2^16 - 1. */
flps_err transport_zmq_set_limits(transport *t, const transport_limits *lim);

struct flps_creds; /* proto/creds.h */

/* Authenticate every connection of a ZeroMQ transport in its handshake,
 * from a job's credentials: with its CURVE keys, CURVE (CurveZMQ: every
 * frame encrypted and authenticated); without them, PLAIN with the job's
 * secret as the password (authenticated, not encrypted: the secret is on
 * the wire as it is in every request). A listener (server non-zero) admits,
 * through its ZAP handler, only clients with the job's client public key
 * (CURVE) or secret (PLAIN): every other connection is refused in its
 * handshake, before any message of it is read, counted in
 * stats.auth_refused (so is one that ends before its handshake completed)
 * and logged at most once a minute with a count. A connector uses the
 * job's client key pair and the server's public key, or the secret. Call
 * before listen / the first connect; the keys and secret are copied (and
 * wiped at transport_destroy).
 * Errors: FLPS_ECONFIG with errbuf saying why when t is not a ZeroMQ
 * transport and c holds CURVE keys (RDMA: the secret still authenticates
 * every message, nothing is encrypted), or libzmq was built without CURVE
 * and c holds its keys; FLPS_EINVAL when c has no secret or its keys are not
 * valid; FLPS_ESTATE after listen/connect. A transport other than ZeroMQ
 * given a secret only: FLPS_OK, nothing set (its messages carry it). */
flps_err transport_set_credentials(transport *t, const struct flps_creds *c,
                                   int server, char *errbuf, size_t errlen);

/* The payload of one ZeroMQ part a connector sends: a larger frame goes as
 * several parts, so that a listener can refuse any frame larger than
 * TRANSPORT_ZMQ_WIRE_MAX before it knows who sent it (ZMQ_MAXMSGSIZE is
 * one bound per socket, and the handshake's frames are read under it).
 * 256 KiB: a dense piece (PARTMAP_DENSE_PIECE values) is one part, kept
 * without a copy; a frame cut into parts is copied once when put back
 * together, which cost a ZeroMQ round trip of 256 KiB frames 41% of its
 * throughput with 64 KiB parts and 80% with 8 KiB ones (loopback). */
#define TRANSPORT_ZMQ_PART_BYTES 262144
/* A listener's ZMQ_MAXMSGSIZE: a part with CURVE's framing (33 bytes), and
 * more than any handshake command (CURVE's INITIATE with a 255-byte
 * routing id, PLAIN's HELLO: about 550 bytes). Before its handshake, a
 * connection can make a listener hold no more than this. */
#define TRANSPORT_ZMQ_WIRE_MAX (TRANSPORT_ZMQ_PART_BYTES + 256)

/* Bytes a frame of len bytes takes on a ZMTP 3 wire as a connector sends
 * it: each part's flags+size header and payload. */
static inline size_t transport_zmtp_frame_bytes(size_t len)
{
    const size_t part = TRANSPORT_ZMQ_PART_BYTES;
    size_t n = len > part ? (len - 1) / part : 0; /* full parts first */
    size_t last = len - n * part;

    return len + n * 9 + (last < 256 ? 2 : 9);
}

#endif
