/* The words of `transport:` in one table: the transports flps has a name
 * for, built here or not, and auto. The job-file parser's accepted words
 * (services/jobspec_keys.c), the factory (transports/select.c) and their
 * error messages all read it; which of them this build has is the
 * registry's business (transports/registry.h). */
#ifndef FLPS_TRANSPORTS_NAMES_H
#define FLPS_TRANSPORTS_NAMES_H

/* X(KIND, name, label, what, unbuilt): TRANSPORT_KIND_KIND, the job
 * file's word, the name log lines give it, what it is, and why a build
 * lacks it with the fix (NULL: every build has it). The order is the
 * enum's, which is also jobspec_transport's (services/jobspec.h). */
#define TRANSPORT_NAME_MAP(X)                                                  \
    X(ZMQ, "zmq", "ZeroMQ",                                                    \
      "ZeroMQ over TCP, encrypted with CURVE when the job has keys", NULL)     \
    X(RDMA, "rdma", "RDMA",                                                    \
      "RDMA reliable-connected queue pairs, set up over the ZeroMQ address",   \
      "this build has no RDMA support (libibverbs-dev and librdmacm-dev "      \
      "were not found when it was built); rebuild flps where they are "        \
      "installed, or set transport: zmq or auto")                              \
    X(AUTO, "auto", "auto",                                                    \
      "RDMA where this node has an ACTIVE RDMA port and the build has RDMA, "  \
      "ZeroMQ otherwise",                                                      \
      NULL)

typedef enum {
#define TRANSPORT_KIND_ENUM(kind, name, label, what, unbuilt)                  \
    TRANSPORT_KIND_##kind,
    TRANSPORT_NAME_MAP(TRANSPORT_KIND_ENUM)
#undef TRANSPORT_KIND_ENUM
} transport_kind;

#endif
