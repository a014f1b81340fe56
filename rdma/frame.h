/* Framing of a multipart message into one registered buffer: a small
 * header (the frame count and lengths, and the credits piggybacked on
 * it), then each frame at an 8-byte aligned offset, so received frames
 * can be used in place. The same layout goes into a receive slot by SEND
 * or into the receiver's large-message region by RDMA WRITE WITH IMM.
 * Parsing does no I/O. */
#ifndef FLPS_RDMA_FRAME_H
#define FLPS_RDMA_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/msg.h"
#include "proto/transport.h"

/* Frames one message may carry on the wire. A receiver refuses more than
 * PROTO_MAX_FRAMES + 1 as the ZeroMQ transport does, but still reads
 * them so the connection goes on. */
#define RDMA_FRAME_MAX 16
#define RDMA_FRAME_TAG 0x31304d46u /* "FM01" */

/* Header bytes for n frames. */
static inline size_t rdma_frame_header_bytes(size_t n)
{
    return 24 + 8 * n;
}

/* Bytes the message of n frames of lens takes in a buffer (header,
 * frames, padding); FLPS_EINVAL for more than RDMA_FRAME_MAX frames or a
 * size that overflows. */
flps_err rdma_frame_size(const size_t *lens, size_t n, size_t *total);

/* Lay out the frames into dst (cap bytes) with the piggybacked credit
 * counts; *used: the bytes written. FLPS_EINVAL when it does not fit. */
flps_err rdma_frame_encode(const transport_frame *f, size_t n, uint64_t credits,
                           uint64_t freed, void *dst, size_t cap, size_t *used);

/* A decoded message: frames point into the buffer given to decode. */
typedef struct rdma_frame_view {
    size_t nframes;
    proto_frame frames[RDMA_FRAME_MAX];
    uint64_t credits; /* the sender's count of our messages it took */
    uint64_t freed;   /* ... and of our large messages it released */
} rdma_frame_view;

/* Decode len bytes at src (8-aligned) and check them: the tag, the frame
 * count, every length against what is there and against max_frame_bytes
 * (-1: no limit), the total equal to len. FLPS_EPROTO with why on any
 * violation; FLPS_ERANGE when only a frame is over max_frame_bytes. */
flps_err rdma_frame_decode(const void *src, size_t len, int64_t max_frame_bytes,
                           rdma_frame_view *out, char *why, size_t whylen);

#endif
