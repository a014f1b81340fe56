/* The kinds of transport the conformance suite and the in-process
 * training test run against, in one table: ZeroMQ always; the RDMA
 * transport over the emulated NIC (tests/rdma/emu_verbs.h) when the build
 * has the RDMA transport; the RDMA transport over the real verbs only where
 * one can be made (a device with an active port, enough memlock). A kind
 * that cannot run says why (skip), for the test to report it skipped.
 * Only for tests: every function here is static. */
#ifndef FLPS_TESTS_PROTO_TRANSPORT_KINDS_H
#define FLPS_TESTS_PROTO_TRANSPORT_KINDS_H

#include <stdint.h>
#include <stdio.h>

#include "proto/transport.h"

#ifdef FLPS_HAVE_RDMA
#include "rdma/rdma.h"
#include "tests/rdma/emu_verbs.h"
#endif

/* What a test asks of the transports it creates. */
typedef struct conf_opts {
    transport_limits lim;     /* the listener's */
    size_t max_message_bytes; /* the largest message the test sends */
    uint32_t credits;         /* RDMA receive slots per peer (0: default) */
} conf_opts;

typedef struct conf_kind {
    const char *name;
    /* Create a listener (listener != 0, with o->lim) or a connector; on
     * error why holds the transport's reason. */
    flps_err (*create)(const conf_opts *o, int listener, transport **out,
                       char *why, size_t len);
    /* Why this kind cannot run here, or NULL when it can. */
    const char *(*skip)(char *why, size_t len);
    /* How many objects of the NIC are alive (registered memory regions,
     * queue pairs, ...), described in what; NULL: nothing to count. For
     * the leak check after every transport was destroyed. */
    size_t (*live)(char *what, size_t len);
    void (*reset)(void); /* before every test, or NULL */
    /* The NIC's queue pairs alive, in creation order, and a way to make
     * one vanish as when its process dies (NULL: the kind has none; a
     * process that dies closes its sockets, which transport_destroy
     * does as well). */
    size_t (*qp_numbers)(uint32_t *qpns, size_t max);
    int (*vanish_qp)(uint32_t qpn);
} conf_kind;

static flps_err zmq_create(const conf_opts *o, int listener, transport **out,
                           char *why, size_t len)
{
    transport *t = NULL;
    flps_err rc = transport_zmq_create(&t);

    if (rc != FLPS_OK) {
        snprintf(why, len, "transport_zmq_create: %s", flps_strerror(rc));
        return rc;
    }
    if (listener) {
        rc = transport_zmq_set_limits(t, &o->lim);
        if (rc != FLPS_OK) {
            snprintf(why, len, "transport_zmq_set_limits: %s",
                     flps_strerror(rc));
            transport_destroy(t);
            return rc;
        }
    }
    *out = t;
    return FLPS_OK;
}

#ifdef FLPS_HAVE_RDMA
static flps_err rdma_create_with(const rdma_verbs *v, const conf_opts *o,
                                 int listener, transport **out, char *why,
                                 size_t len)
{
    transport_rdma_options ro;

    transport_rdma_options_init(&ro);
    ro.verbs = v;
    ro.max_message_bytes = o->max_message_bytes;
    ro.credits = o->credits;
    ro.timeout_ms = 5000;
    if (listener)
        ro.limits = o->lim;
    return transport_rdma_create(&ro, out, why, len);
}

static flps_err emu_create(const conf_opts *o, int listener, transport **out,
                           char *why, size_t len)
{
    return rdma_create_with(rdma_emu_verbs(), o, listener, out, why, len);
}

static flps_err real_create(const conf_opts *o, int listener, transport **out,
                            char *why, size_t len)
{
    return rdma_create_with(rdma_verbs_real(), o, listener, out, why, len);
}

/* Everything of the emulated NIC that is still alive. */
static size_t emu_live(char *what, size_t len)
{
    size_t mrs = rdma_emu_live_mrs(), qps = rdma_emu_live_qps();
    size_t pds = rdma_emu_live_pds(), cqs = rdma_emu_live_cqs();
    size_t ctxs = rdma_emu_live_contexts();

    snprintf(what, len,
             "%zu registered memory regions, %zu queue pairs, %zu "
             "protection domains, %zu completion queues, %zu open devices",
             mrs, qps, pds, cqs, ctxs);
    return mrs + qps + pds + cqs + ctxs;
}

/* The real verbs run only where the transport can be made: the reason it
 * cannot (no device, port down, memlock) is the skip's. */
static const char *real_skip(char *why, size_t len)
{
    conf_opts o = {{0, -1, 0, 0, 0, 0, 0}, 1u << 20, 0};
    transport *t = NULL;
    char reason[768] = "";

    if (real_create(&o, 0, &t, reason, sizeof(reason)) == FLPS_OK) {
        transport_destroy(t);
        return NULL;
    }
    snprintf(why, len, "no usable RDMA device here: %s", reason);
    return why;
}
#else
static const char *no_rdma_skip(char *why, size_t len)
{
    snprintf(why, len,
             "this build has no RDMA transport (libibverbs and "
             "librdmacm were not found when CMake ran)");
    return why;
}
#endif

enum { KIND_ZMQ, KIND_RDMA_EMU, KIND_RDMA_REAL };

static const conf_kind kinds[] = {
    [KIND_ZMQ] = {"zmq", zmq_create, NULL, NULL, NULL, NULL, NULL},
#ifdef FLPS_HAVE_RDMA
    [KIND_RDMA_EMU] = {"rdma-emu", emu_create, NULL, emu_live, rdma_emu_reset,
                       rdma_emu_qp_numbers, rdma_emu_vanish_qp},
    [KIND_RDMA_REAL] = {"rdma-real", real_create, real_skip, NULL, NULL, NULL,
                        NULL},
#else
    [KIND_RDMA_EMU] = {"rdma-emu", NULL, no_rdma_skip, NULL, NULL, NULL, NULL},
    [KIND_RDMA_REAL] = {"rdma-real", NULL, no_rdma_skip, NULL, NULL, NULL,
                        NULL},
#endif
};

#endif
