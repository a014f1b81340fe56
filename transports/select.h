/* Which transport a shard or a client runs: the one factory that makes
 * ZeroMQ or RDMA from a job's `transport: zmq | rdma | auto`, with the
 * node's RDMA probe (rdma/probe.h) deciding auto and refusing rdma at once,
 * with a message that names the cause and the fix, where it cannot run.
 * It makes transports only through the registry (transports/registry.h),
 * so it works the same in a build without the RDMA transport. */
#ifndef FLPS_TRANSPORTS_SELECT_H
#define FLPS_TRANSPORTS_SELECT_H

#include <stddef.h>

#include "common/err.h"
#include "proto/transport.h"
#include "transports/names.h"

/* "zmq", "rdma", "auto" (transports/names.h); "unknown" outside the
 * enum. */
const char *transport_kind_name(transport_kind k);

/* What the kind is, one phrase from the names table (for help texts);
 * "unknown" outside the enum. */
const char *transport_kind_what(transport_kind k);

/* 1 and *out (may be NULL) for a word of the names table; 0 for anything
 * else (NULL included). */
int transport_kind_parse(const char *name, transport_kind *out);

/* Every word of the names table as a sentence lists them ("zmq, rdma or
 * auto"), into buf (cut to len). Returns buf. */
char *transport_kind_choices(char *buf, size_t len);

/* 1 when this build can make kind: zmq and auto always, rdma when the RDMA
 * transport was built (libibverbs and librdmacm were found). */
int transport_is_built(transport_kind k);

struct rdma_verbs; /* rdma/verbs.h */

typedef struct transport_select {
    transport_kind kind;
    const struct rdma_verbs *verbs; /* for tests (the emulated NIC); NULL:
                                       libibverbs */
    const char *sysfs_root;   /* for tests; NULL: $FLPS_SYSFS_ROOT or /sys */
    size_t max_message_bytes; /* RDMA: sizes the registered pools (0: the
                                 transport's default) */
    const transport_limits *limits; /* NULL: the defaults; a connector
                                       ignores them */
    int listener;                   /* 1: limits apply (a shard) */
} transport_select;

/* Make the transport o asks for. kind zmq: ZeroMQ. kind rdma: the RDMA
 * transport, or FLPS_ECONFIG at once (nothing started, nothing waited for)
 * when this node has no ACTIVE RDMA port or this build has no RDMA
 * support, with why saying which and what to do, prefixed "transport:
 * rdma: ". kind auto: RDMA when this node has an ACTIVE port with a GID
 * and the build has it and the RDMA transport can be made, ZeroMQ
 * otherwise; why then holds one line saying which was chosen and why, for
 * the caller to log ("transport: auto: ZeroMQ, because no RDMA device on
 * this node (...)"). *chosen (may be NULL) gets the kind made.
 * Errors: FLPS_EINVAL (NULL o or out), FLPS_ECONFIG (above), the
 * transports' own (FLPS_ENOMEM, FLPS_ESYS, ...), with why set.
 * Ownership: caller owns *out on FLPS_OK; on error nothing is left. */
flps_err transport_create_for(const transport_select *o, transport **out,
                              transport_kind *chosen, char *why, size_t whylen);

/* What transport_create_for would choose, without making anything (flrun
 * decides before it starts a process): zmq gives zmq; rdma gives rdma, or
 * FLPS_ECONFIG and why as transport_create_for says it; auto gives rdma
 * where the node and build can run it, else zmq, with why saying which and
 * why. A transport that then fails to be made is the caller's to report.
 * Errors: FLPS_EINVAL (NULL o, unknown kind), FLPS_ECONFIG. */
flps_err transport_resolve(const transport_select *o, transport_kind *chosen,
                           char *why, size_t whylen);

#endif
