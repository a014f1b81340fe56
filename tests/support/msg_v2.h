/* Messages as protocol version 2 wrote them (u32 index frames), made from
 * what proto_msg_encode writes, for tests and fuzz seeds of the
 * decoder's and the shard's handling of older peers. Not part of
 * libflps. */
#ifndef FLPS_TESTS_SUPPORT_MSG_V2_H
#define FLPS_TESTS_SUPPORT_MSG_V2_H

#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"

/* Make the nf frames f of a message proto_msg_encode wrote (version 3)
 * the frames version 2 wrote: the header's version patched to 2 in place
 * (the encoder writes "v" first: a fixmap, fixstr "v", fixint 3; the
 * header lies in the encoder's buffer, which the caller owns) and its
 * index frames, f[1] when sparse and f[nf - 1] of an update, pointing at
 * the n indices idx and the nrej indices rej, u32 each (borrowed, as
 * they are: ascending or not). Returns 0 when the header does not start
 * with version 3 (nothing changed), else 1. */
int msg_frames_as_version2(proto_frame *f, size_t nf, int sparse, int update,
                           const uint32_t *idx, uint32_t n, const uint32_t *rej,
                           uint32_t nrej);

#endif
