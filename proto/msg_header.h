/* Internal to proto/msg*.c: the decoder of a message's MessagePack header
 * (proto/msg_header.c), which proto/msg.c's decoder runs before it takes
 * the frames that follow. Not for use outside proto/msg*.c. */
#ifndef FLPS_PROTO_MSG_HEADER_H
#define FLPS_PROTO_MSG_HEADER_H

#include <stddef.h>

#include "common/err.h"
#include "proto/msg.h"

/* Decode the header frame f into m: every field the header carries, and
 * its tensor list and segments, which m then owns (proto_msg_fini frees
 * them). Checks the header alone: one MessagePack map of at most 1 MiB
 * whose declared lengths fit its bytes, this protocol version, every
 * known key of its type and range and present once (unknown keys are
 * skipped), the keys its op needs, and none its op or codec cannot have.
 * Errors: FLPS_EPROTO with the reason in errbuf, FLPS_ENOMEM; on error m
 * owns nothing (its other fields may have been written). */
flps_err proto_msg_header_decode(const proto_frame *f, proto_msg *m,
                                 char *errbuf, size_t errlen);

#endif
