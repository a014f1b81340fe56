/* Pushes of pairs the caller selected (flps_client_push_pairs,
 * flps_client_pairs_taken): each tensor keeps its last push's pairs sorted
 * by index, with the caller's order and the mask of the pairs the shards
 * took, which the receiving layer (client_recv.c) clears for what a gtopk
 * shard refused. Sends through client_send.h.
 * Not thread-safe: the caller's thread only (client_internal.h). */
#ifndef FLPS_WORKER_CLIENT_PAIRS_H
#define FLPS_WORKER_CLIENT_PAIRS_H

#include "worker/client_internal.h"

/* Free pr and its arrays. NULL does nothing. */
void cpairs_destroy(cpairs *pr);

/* Whether the tensor's last push was a push of pairs (its rejections go to
 * the caller's mask, not to the client's own residual). pr not NULL. */
int cpairs_is_live(const cpairs *pr);

/* The tensor was pushed by flps_client_push: from now on its rejections
 * go to the client's residual. pr not NULL. */
void cpairs_forget(cpairs *pr);

/* An update's rejected indices m->rej (part-relative, of the part at
 * offset): those pairs were not taken. */
void cpairs_mark_rejected(cpairs *pr, uint64_t offset, const proto_msg *m);

#endif
