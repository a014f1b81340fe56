/* Which connections a listener keeps. A connection is admitted when a
 * message comes on it: a listener with credentials authenticates every
 * connection in its handshake (CURVE, or PLAIN with the job's secret), so
 * a message means a member. Admitted connections are never closed to make
 * room. The others (waiting: in their handshake, or idle after it) are
 * bounded three ways: all connections, connections waiting at once, and
 * connections waiting from one address. A new connection beyond a bound
 * closes a waiting one: the oldest that has not even sent the 10 bytes of
 * a ZMTP signature (a ZeroMQ peer sends them as it connects), else the
 * oldest. So strangers holding idle sockets never
 * lock a member out: a member's new connection pushes the idlest stranger
 * out, and the slots beyond max_waiting can only ever be held by members.
 *
 * The gate learns of connections from the socket monitor's ACCEPTED and
 * DISCONNECTED events (their value is the descriptor) and of messages
 * from ZMQ_SRCFD. It closes a connection with shutdown(2) on that
 * descriptor, which the transport's I/O thread then sees as a closed
 * connection; before it does, it checks with getpeername(2) that the
 * descriptor still is the connection it was told of (a descriptor can be
 * reused before its DISCONNECTED event is read). Not thread-safe: the
 * transport's thread owns it. */
#ifndef FLPS_PROTO_CONNGATE_H
#define FLPS_PROTO_CONNGATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct conngate conngate;

typedef struct conngate_limits {
    uint32_t max_conns;   /* every connection (0: no limit) */
    uint32_t max_waiting; /* not admitted yet, at once (0: max_conns) */
    uint32_t max_waiting_per_addr; /* ... from one address (0: no limit) */
} conngate_limits;

/* Connections refused, each counted once, by why. */
typedef struct conngate_stats {
    uint64_t closed_full;    /* every slot held by admitted connections */
    uint64_t closed_waiting; /* to keep max_waiting */
    uint64_t closed_addr;    /* to keep max_waiting_per_addr */
    /* Ended before its first message, not closed by the gate: a handshake
     * refused, timed out or broken (a frame over ZMQ_MAXMSGSIZE), or a
     * peer that gave up. */
    uint64_t not_admitted;
} conngate_stats;

/* A gate with these limits (copied). FLPS_ENOMEM. Caller owns *out
 * (conngate_destroy). */
flps_err conngate_create(const conngate_limits *lim, conngate **out);

/* NULL is ignored. Closes nothing. */
void conngate_destroy(conngate *g);

/* A connection was accepted on fd: it waits. Call conngate_enforce once
 * every event queued has been given to the gate. FLPS_ENOMEM: the gate
 * could not remember it, and has closed it. */
flps_err conngate_accepted(conngate *g, int fd);

/* A message came on fd: its connection is admitted (nothing if unknown or
 * admitted already). */
void conngate_message(conngate *g, int fd);

/* The connection on fd is gone. Returns 1 when it was counted now as
 * not admitted (it was waiting, and the gate had not closed it), else 0
 * (admitted, closed by the gate, or unknown). */
int conngate_closed(conngate *g, int fd);

/* Close waiting connections until every bound holds (see the top);
 * returns how many were closed. */
size_t conngate_enforce(conngate *g);

/* Connections known now: all, and those waiting (closed ones whose
 * DISCONNECTED has not come yet are not counted). */
void conngate_counts(const conngate *g, uint32_t *live, uint32_t *waiting);

/* The refusals so far (borrowed; valid until conngate_destroy). */
const conngate_stats *conngate_stats_get(const conngate *g);

#endif
