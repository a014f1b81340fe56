/* Receiving: each reply of a shard matched to the request it answers
 * (client_req.h) and applied: registration (the resume iteration), acks,
 * pulled values and updates added into the replica, what a gtopk shard
 * did not take given back to the residual (or the caller's pair mask,
 * client_pairs.h), and refusals turned into the sticky error. A malformed
 * reply or one that answers nothing outstanding is logged and ignored.
 * Not thread-safe: the caller's thread only (client_internal.h). */
#ifndef FLPS_WORKER_CLIENT_RECV_H
#define FLPS_WORKER_CLIENT_RECV_H

#include "worker/client_internal.h"

/* Receive and handle at most one reply (waiting up to 100 ms for it),
 * then resend or fail what waited too long (creq_sweep). Blocks up to
 * 100 ms. Errors (sticky): a shard's refusal, a protocol violation, the
 * transport's, FLPS_ETIMEDOUT past a request's deadline. */
flps_err client_recv_once(flps_client *c);

/* client_recv_once until nothing is outstanding. Blocks up to the
 * deadline. Errors: those of client_recv_once. */
flps_err client_recv_drain(flps_client *c);

#endif
