/* Received messages made from copies of frames, for tests, fuzz targets
 * and benchmarks that drive a shard or a client without a transport. Not
 * part of libflps. */
#ifndef FLPS_TESTS_SUPPORT_RX_COPY_H
#define FLPS_TESTS_SUPPORT_RX_COPY_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/msg.h"
#include "proto/transport.h"

/* A received message made from copies of frames (as a transport would
 * hand it over, with the ZMTP frame bytes counted as wire bytes).
 * FLPS_EINVAL for more than PROTO_MAX_FRAMES + 1 frames, FLPS_ENOMEM.
 * Caller owns *out on FLPS_OK (transport_rx_release frees it). */
flps_err transport_rx_copy(const proto_frame *frames, size_t nframes,
                           uint32_t peer, transport_rx **out);

#endif
