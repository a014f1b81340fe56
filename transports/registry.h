/* The transports this build has. Each registers through one entry_NAME.c
 * in this folder that adapts the factory's options to that transport's
 * constructor; CMake compiles the ones it builds (zmq always, rdma where
 * libibverbs and librdmacm are found) and lists them in the generated
 * transports/transport_list.h, as worker/backend_list.h lists the compute
 * backends. The factory (select.c) finds a transport here by name and so
 * never names a transport's own code, nor asks how the build was made. */
#ifndef FLPS_TRANSPORTS_REGISTRY_H
#define FLPS_TRANSPORTS_REGISTRY_H

#include <stddef.h>

#include "common/err.h"
#include "proto/transport.h"
#include "rdma/probe.h"
#include "transports/select.h"

typedef struct transport_entry {
    const char *name; /* a word of TRANSPORT_NAME_MAP */
    /* Make the transport o asks for, on the node node describes (the
     * probe's reading, borrowed for the call; NULL when the factory did
     * not read it, as for kind zmq). On error why holds the transport's
     * own reason and nothing is left. Caller owns *out on FLPS_OK. */
    flps_err (*create)(const transport_select *o, const rdma_probe *node,
                       transport **out, char *why, size_t whylen);
} transport_entry;

/* This build's entry called name, or NULL when it has none (a transport
 * not built, an unknown name, NULL). */
const transport_entry *transport_registry_find(const char *name);

#endif
