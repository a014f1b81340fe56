/* The RDMA transport: proto/transport.h over libibverbs reliable-connected
 * queue pairs, with the connection set-up exchanged over a ZeroMQ channel
 * on the same tcp:// endpoint. Built when libibverbs and librdmacm are
 * found, and then made through the transport registry
 * (transports/entry_rdma.c). docs/rdma.md says how it works. */
#ifndef FLPS_RDMA_RDMA_H
#define FLPS_RDMA_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/transport.h"

typedef struct rdma_verbs rdma_verbs;    /* rdma/verbs.h: the seam, one table */
const rdma_verbs *rdma_verbs_real(void); /* rdma/verbs_real.c: libibverbs */

typedef struct transport_rdma_options {
    const rdma_verbs *verbs;  /* NULL: rdma_verbs_real() */
    const char *device;       /* NULL: the first device with an active port */
    uint8_t port;             /* 0: its first active port */
    size_t max_message_bytes; /* the job's largest message: sizes the pools */
    uint32_t credits;         /* receive slots per peer (0: a default) */
    int timeout_ms;           /* bound on every wait on a peer (0: default) */
    transport_limits limits;  /* as for ZeroMQ (proto/transport.h) */
} transport_rdma_options;

/* The defaults: real verbs, first active device and port, 64 MiB
 * messages, RDMA_CREDITS_DEFAULT credits, RDMA_TIMEOUT_MS_DEFAULT, the
 * TRANSPORT_*_DEFAULT limits. */
void transport_rdma_options_init(transport_rdma_options *o);

#define RDMA_CREDITS_DEFAULT 16
#define RDMA_TIMEOUT_MS_DEFAULT 10000
#define RDMA_MAX_MESSAGE_DEFAULT ((size_t)64 << 20)

/* Creates the transport; on error nothing is left allocated and why holds
 * one clear line naming the cause and the fix (no device, port down,
 * memlock too low: the bytes needed and `ulimit -l` / IPC_LOCK / the Helm
 * value, ...). why may be NULL. */
flps_err transport_rdma_create(const transport_rdma_options *o, transport **out,
                               char *why, size_t whylen);

#endif
