/* The peer-to-peer transport of decentralized training (SAPS-PSGD): this
 * worker's endpoint, which every other worker of the job sends to, a
 * connection to each of theirs, the job's credentials on both (ZeroMQ
 * CURVE where the job has keys, and the job's secret in every message, as
 * the shards' connections have them), and an inbox that keeps what
 * arrives before it is asked for. Every message is a PROTO_OP_PEER of
 * dense f32 values whose part names its kind, iter its round and version
 * its step within the round; nothing is ever answered on the wire, each
 * side sends what the protocol above (worker/peer_saps.c) says it sends.
 *
 * A sender's rank is what its message says, checked against the job's
 * secret and bound to the sender's random client id on first contact: a
 * member that speaks as another rank later is refused, as a shard refuses
 * it. Refused and malformed messages are dropped, counted and logged at
 * most once a minute.
 *
 * Not thread-safe: one thread uses a peer_net at a time. */
#ifndef FLPS_WORKER_PEER_NET_H
#define FLPS_WORKER_PEER_NET_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "transports/names.h"

/* The kinds of peer message (the header's part). */
typedef enum peer_kind {
    PEER_HELLO = 0,  /* joining: every worker to every other, once */
    PEER_VALUES = 1, /* a round's exchange: the values under the mask */
    PEER_PING = 2,   /* bandwidth probe: a small message each way */
    PEER_DATA = 3,   /* bandwidth probe: the payload */
    PEER_ACK = 4,    /* bandwidth probe: the payload arrived */
    PEER_FLOOD = 5,  /* membership (and matrix) agreement, per step */
    PEER_MODEL = 6,  /* the whole model, to the coordinator at the end */
    PEER_KIND_COUNT
} peer_kind;

/* peer_net_wait's `from` for a message of any sender. */
#define PEER_ANY UINT32_MAX

typedef struct peer_net peer_net;

typedef struct peer_net_cfg {
    const char *job; /* the job id (1..PROTO_JOB_MAX chars) */
    uint32_t rank, workers;
    /* Every worker's endpoint ("tcp://HOST:PORT"), rank order: this one
     * listens on endpoints[rank] and connects to the others. Borrowed for
     * the call. */
    const char *const *endpoints;
    transport_kind kind; /* zmq, rdma or auto */
    /* The largest message this worker receives (values, header aside):
     * sizes the RDMA transport's pools and bounds the inbox. */
    size_t max_values;
} peer_net_cfg;

typedef struct peer_net_stats {
    uint64_t bytes_sent, bytes_received; /* on the wire, framing included */
    uint64_t msgs_sent, msgs_received;
    uint64_t refused;      /* messages dropped: malformed, not a member, ... */
    uint64_t auth_refused; /* connections refused in their handshake: not
                              the job's CURVE key or secret */
} peer_net_stats;

/* Listen on endpoints[rank] and connect to every other endpoint, with
 * the credentials named by $FLPS_CREDENTIALS_FILE (none: neither CURVE
 * nor a secret, as for a shard without credentials). Does not wait for
 * the others (peer_net_send queues until they listen).
 * Errors: FLPS_EINVAL (cfg or its fields out of range), FLPS_ECONFIG (the
 * credentials file, a transport this node cannot run), FLPS_ESYS (the
 * endpoint cannot be bound), FLPS_ENOMEM; errbuf says which. Caller owns
 * *out on FLPS_OK (peer_net_destroy). */
flps_err peer_net_create(const peer_net_cfg *cfg, peer_net **out, char *errbuf,
                         size_t errlen);

/* Closes both transports (lingering at most 2 s for what is queued) and
 * frees the inbox. NULL does nothing. */
void peer_net_destroy(peer_net *n);

/* The transport actually running ("zmq" or "rdma"). */
const char *peer_net_transport(const peer_net *n);

/* Queue a message of kind, round and step with the n values val (copied)
 * for worker `to`. Never blocks. Errors: FLPS_EINVAL (to is this worker
 * or out of range, kind out of range, n over 2^32 - 1), FLPS_ENOMEM,
 * FLPS_ECLOSED (the transport refused it). */
flps_err peer_net_send(peer_net *n, uint32_t to, peer_kind kind, uint64_t round,
                       uint64_t step, const float *val, size_t nval);

/* A message taken from the inbox: the caller owns it (peer_msg_free). */
typedef struct peer_msg {
    uint32_t from;
    peer_kind kind;
    uint64_t round, step;
    size_t n;
    float *val;            /* n values, finite (the decoder checked) */
    struct peer_msg *next; /* the inbox's list */
} peer_msg;

void peer_msg_free(peer_msg *m);

/* Take the first message of kind, round and step from `from` (PEER_ANY:
 * anyone) out of the inbox, receiving until it is there or the monotonic
 * clock passes deadline (flps_mono_s() seconds; a deadline already past
 * still takes what has arrived). Messages for other kinds, rounds or steps
 * stay in the inbox. Errors: FLPS_ETIMEDOUT, FLPS_ENOMEM, the transport's
 * (FLPS_ESYS). *out is written only on FLPS_OK; caller owns it. */
flps_err peer_net_take(peer_net *n, peer_kind kind, uint64_t round,
                       uint64_t step, uint32_t from, double deadline,
                       peer_msg **out);

/* Drop what the inbox holds of kind for rounds before `round` (values of
 * a round given up on that came late). */
void peer_net_forget(peer_net *n, peer_kind kind, uint64_t round);

void peer_net_get_stats(const peer_net *n, peer_net_stats *out);

#endif
