/* Credit accounting of the RDMA transport: a sender never posts more
 * messages than the receiver has receive buffers for.
 *
 * The sender starts with the window the receiver advertised in the
 * exchange; each message takes one credit. The receiver counts the
 * buffers it posted again after use (a cumulative count) and returns it
 * piggybacked on its own messages or in an explicit credit update; the
 * sender's credits are window + returned - sent. Cumulative counts make a
 * lost or repeated update harmless (the larger one wins), and a peer
 * cannot grant what it was never sent. The same accounting guards the
 * receiver's large-message region (a window of one). No I/O, no locks. */
#ifndef FLPS_RDMA_CREDIT_H
#define FLPS_RDMA_CREDIT_H

#include <stdint.h>

#include "common/err.h"

/* The sender's side. */
typedef struct rdma_credit {
    uint32_t window;   /* buffers the receiver posted at the start */
    uint64_t sent;     /* messages sent that took one */
    uint64_t returned; /* the receiver's count of buffers posted again */
} rdma_credit;

void rdma_credit_init(rdma_credit *c, uint32_t window);

/* Credits left: how many more messages may be posted now. */
uint32_t rdma_credit_available(const rdma_credit *c);

/* Take one credit; FLPS_ESTATE when none is left (nothing changes). */
flps_err rdma_credit_take(rdma_credit *c);

/* The receiver says it has posted `returned` buffers again in all. A
 * smaller count than one already seen is stale and ignored; one above
 * what was sent is impossible: FLPS_EPROTO (a broken or hostile peer),
 * nothing changes. */
flps_err rdma_credit_return(rdma_credit *c, uint64_t returned);

/* The receiver's side: when to tell the sender. */
typedef struct rdma_credit_rx {
    uint64_t reposted;   /* buffers posted again after a message */
    uint64_t advertised; /* the count the sender was last told */
    uint32_t threshold;  /* unadvertised buffers that make an update due */
} rdma_credit_rx;

/* threshold: half the window (at least 1), so a sender that keeps
 * sending never waits for credits while an update is in flight. */
void rdma_credit_rx_init(rdma_credit_rx *r, uint32_t window);

/* One buffer was posted again. */
void rdma_credit_rx_reposted(rdma_credit_rx *r);

/* Is an explicit update due? When the unadvertised count reached the
 * threshold, or when idle (nothing to piggyback it on) and it is not 0. */
int rdma_credit_rx_update_is_due(const rdma_credit_rx *r, int idle);

/* The value to send (piggybacked or explicit); marks it advertised. */
uint64_t rdma_credit_rx_advertise(rdma_credit_rx *r);

#endif
