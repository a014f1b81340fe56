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
    uint64_t msgs_dropped;  /* listener: not queued, the peer did not read */
    uint64_t conns_refused; /* listener: closed beyond max_peers */
    /* listener with CURVE: connections whose handshake failed (no CURVE,
     * or a client key other than the job's) */
    uint64_t auth_refused;
} transport_stats;

/* What a listener bounds, so that peers which do not read, send huge
 * frames or open many connections cannot grow it without limit. */
typedef struct transport_limits {
    /* Messages queued for one peer; a reply beyond it is dropped, not
     * buffered (0: no limit). */
    int send_hwm;
    /* A peer sending a larger frame is disconnected (-1: no limit). */
    int64_t max_frame_bytes;
    /* Connections at once; newer ones are closed as they come (0: no
     * limit). Also the size of the table of peers. */
    uint32_t max_peers;
} transport_limits;

#define TRANSPORT_SEND_HWM_DEFAULT 4096
#define TRANSPORT_MAX_FRAME_DEFAULT (INT64_C(1) << 28) /* 256 MiB */
#define TRANSPORT_MAX_PEERS_DEFAULT 1024
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
     * was refused, to answer it, or UINT32_MAX when it cannot be. */
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

/* Queue one message of nframes frames for peer. Never blocks.
 * Ownership: on FLPS_OK the transport holds its own reference to every
 * frame's buffer until sent; the caller keeps (and must release) its own.
 * On error nothing is queued. FLPS_ECLOSED: the peer is unknown/gone. */
static inline flps_err transport_send(transport *t, uint32_t peer,
                                      const transport_frame *f, size_t nframes)
{
    return t->vt->send(t, peer, f, nframes);
}

/* Wait up to timeout_ms (-1 = forever, 0 = poll) for one message.
 * FLPS_ETIMEDOUT when none came; FLPS_EPROTO for a message with too many
 * frames or from a peer the listener has no room for (dropped, counted;
 * errmsg says why, refused_peer whom to answer). Caller owns *rx on
 * FLPS_OK. */
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

/* A received message made from copies of frames (for tests, replays and
 * transports that do not own their buffers). Caller owns *out. */
flps_err transport_rx_copy(const proto_frame *frames, size_t nframes,
                           uint32_t peer, transport_rx **out);

/* The ZeroMQ transport: ROUTER when listening, one DEALER per connection.
 * The ZMTP frame headers are counted in the byte statistics. */
flps_err transport_zmq_create(transport **out);

/* Set a ZeroMQ listener's limits (before transport_listen; a transport
 * that never calls it has the TRANSPORT_*_DEFAULT ones). Connectors have
 * none: a worker buffers what its shards send. FLPS_ESTATE after listen,
 * FLPS_EINVAL for max_peers above 2^16 - 1. */
flps_err transport_zmq_set_limits(transport *t, const transport_limits *lim);

struct flps_creds; /* proto/creds.h */

/* Encrypt and authenticate a ZeroMQ transport with ZeroMQ CURVE, from a
 * job's credentials (which must hold the CURVE keys): a listener (server
 * non-zero) is the CURVE server with the job's server key pair and admits,
 * through its ZAP handler, only clients with the job's client public key
 * (every other connection is refused in its handshake, counted in
 * stats.auth_refused and logged at most once a minute with a count); a
 * connector uses the job's client key pair and the server's public key.
 * Call before listen / the first connect; the keys are copied.
 * Errors: FLPS_ECONFIG with errbuf saying why when t is not a ZeroMQ
 * transport (RDMA: the secret still authenticates every message, nothing
 * is encrypted) or libzmq was built without CURVE; FLPS_EINVAL when c has
 * no CURVE keys or they are not valid; FLPS_ESTATE after listen/connect. */
flps_err transport_set_curve(transport *t, const struct flps_creds *c,
                             int server, char *errbuf, size_t errlen);

/* Bytes a frame of len bytes takes on a ZMTP 3 wire (flags+size header). */
static inline size_t transport_zmtp_frame_bytes(size_t len)
{
    return len + (len < 256 ? 2 : 9);
}

#endif
