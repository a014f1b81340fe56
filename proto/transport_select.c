/* The one factory for ZeroMQ or RDMA: what `transport: zmq | rdma | auto`
 * makes on this node. */
#include "proto/transport_select.h"

#include <stdio.h>
#include <string.h>

#include "rdma/probe.h"
#if FLPS_HAVE_RDMA
#include "rdma/rdma.h"
#endif

#define NO_RDMA_BUILD                                                          \
    "this build has no RDMA support (libibverbs-dev and librdmacm-dev were "   \
    "not found when it was built); rebuild flps where they are installed, "    \
    "or set transport: zmq or auto"

const char *transport_kind_name(transport_kind k)
{
    switch (k) {
    case TRANSPORT_KIND_ZMQ:
        return "zmq";
    case TRANSPORT_KIND_RDMA:
        return "rdma";
    case TRANSPORT_KIND_AUTO:
        return "auto";
    }
    return "unknown";
}

int transport_kind_parse(const char *name, transport_kind *out)
{
    static const transport_kind all[] = {
        TRANSPORT_KIND_ZMQ, TRANSPORT_KIND_RDMA, TRANSPORT_KIND_AUTO};

    for (size_t i = 0; name != NULL && i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(name, transport_kind_name(all[i])) == 0) {
            if (out != NULL)
                *out = all[i];
            return 1;
        }
    return 0;
}

int transport_have_rdma(void)
{
#if FLPS_HAVE_RDMA
    return 1;
#else
    return 0;
#endif
}

static flps_err make_zmq(const transport_select *o, transport **out, char *why,
                         size_t whylen)
{
    transport *t = NULL;
    flps_err rc = transport_zmq_create(&t);

    if (rc != FLPS_OK)
        return flps_errbuf_set(why, whylen, rc,
                               "cannot create the ZeroMQ transport: %s",
                               flps_strerror(rc));
    if (o->listener && o->limits != NULL) {
        rc = transport_zmq_set_limits(t, o->limits);
        if (rc != FLPS_OK) {
            flps_errbuf_set(why, whylen, rc,
                            "cannot set the transport's limits: %s",
                            t->errmsg[0] ? t->errmsg : flps_strerror(rc));
            transport_destroy(t);
            return rc;
        }
    }
    *out = t;
    return FLPS_OK;
}

/* The RDMA transport on a node the probe found fit; why gets the
 * transport's own reason on error. */
static flps_err make_rdma(const transport_select *o, const rdma_probe *p,
                          transport **out, char *why, size_t whylen)
{
#if FLPS_HAVE_RDMA
    transport_rdma_options ro;
    const char *dev = NULL;
    uint8_t port = 0;

    transport_rdma_options_init(&ro);
    if (o->verbs != NULL)
        ro.verbs = o->verbs;
    /* The probe and libibverbs read the same sysfs; naming the port the
     * probe saw ACTIVE keeps the choice the log reports. */
    if (rdma_probe_first_active(p, &dev, &port)) {
        ro.device = dev;
        ro.port = port;
    }
    if (o->max_message_bytes > 0)
        ro.max_message_bytes = o->max_message_bytes;
    if (o->listener && o->limits != NULL)
        ro.limits = *o->limits;
    return transport_rdma_create(&ro, out, why, whylen);
#else
    (void)o;
    (void)p;
    (void)out;
    return flps_errbuf_set(why, whylen, FLPS_ECONFIG, "%s", NO_RDMA_BUILD);
#endif
}

/* Could RDMA run here? FLPS_OK, or FLPS_ECONFIG with the cause and the fix
 * in reason. p receives the node's probe. */
static flps_err rdma_feasible(const transport_select *o, rdma_probe *p,
                              char *reason, size_t len)
{
    flps_err rc = rdma_probe_run(o->sysfs_root, p);

    reason[0] = '\0';
    if (rc != FLPS_OK)
        return flps_errbuf_set(reason, len, rc, "the sysfs root is too long");
    if (!rdma_probe_usable(p, 0, reason, len))
        return FLPS_ECONFIG;
    if (!transport_have_rdma())
        return flps_errbuf_set(reason, len, FLPS_ECONFIG, "%s", NO_RDMA_BUILD);
    return FLPS_OK;
}

/* auto's line for a fallback: the cause, without its fix (auto has
 * applied it already). */
static void auto_zmq_line(char *reason, char *why, size_t whylen)
{
    if (strstr(reason, "; ") != NULL)
        *strstr(reason, "; ") = '\0';
    flps_errbuf_set(why, whylen, FLPS_OK, "transport: auto: ZeroMQ, because %s",
                    reason);
}

static void auto_rdma_line(const rdma_probe *p, char *why, size_t whylen)
{
    char ports[256];

    flps_errbuf_set(why, whylen, FLPS_OK,
                    "transport: auto: RDMA, because this node has an ACTIVE "
                    "RDMA port (%s)",
                    rdma_probe_active_list(p, ports, sizeof(ports)));
}

static flps_err check_kind(const transport_select *o, char *why, size_t whylen)
{
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (o == NULL)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "transport: no options given");
    if (o->kind != TRANSPORT_KIND_ZMQ && o->kind != TRANSPORT_KIND_RDMA &&
        o->kind != TRANSPORT_KIND_AUTO)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "transport: unknown kind %d; use zmq, rdma "
                               "or auto",
                               (int)o->kind);
    return FLPS_OK;
}

flps_err transport_resolve(const transport_select *o, transport_kind *chosen,
                           char *why, size_t whylen)
{
    char reason[768];
    rdma_probe p;
    flps_err rc = check_kind(o, why, whylen);

    if (rc != FLPS_OK)
        return rc;
    if (o->kind == TRANSPORT_KIND_ZMQ) {
        if (chosen != NULL)
            *chosen = TRANSPORT_KIND_ZMQ;
        return FLPS_OK;
    }
    rc = rdma_feasible(o, &p, reason, sizeof(reason));
    if (rc != FLPS_OK && o->kind == TRANSPORT_KIND_RDMA)
        return flps_errbuf_set(why, whylen, rc, "transport: rdma: %s", reason);
    if (o->kind == TRANSPORT_KIND_AUTO) {
        if (rc == FLPS_OK)
            auto_rdma_line(&p, why, whylen);
        else
            auto_zmq_line(reason, why, whylen);
    }
    if (chosen != NULL)
        *chosen = rc == FLPS_OK ? TRANSPORT_KIND_RDMA : TRANSPORT_KIND_ZMQ;
    return FLPS_OK;
}

flps_err transport_create_for(const transport_select *o, transport **out,
                              transport_kind *chosen, char *why, size_t whylen)
{
    char reason[768];
    rdma_probe p;
    transport *t = NULL;
    flps_err rc = check_kind(o, why, whylen);

    if (rc != FLPS_OK)
        return rc;
    if (out == NULL)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "transport: nowhere to put it");
    if (o->kind == TRANSPORT_KIND_ZMQ) {
        rc = make_zmq(o, &t, why, whylen);
        goto done;
    }
    rc = rdma_feasible(o, &p, reason, sizeof(reason));
    if (rc == FLPS_OK)
        rc = make_rdma(o, &p, &t, reason, sizeof(reason));
    if (rc == FLPS_OK) {
        if (o->kind == TRANSPORT_KIND_AUTO)
            auto_rdma_line(&p, why, whylen);
        goto done;
    }
    if (o->kind == TRANSPORT_KIND_RDMA)
        return flps_errbuf_set(why, whylen, rc, "transport: rdma: %s", reason);
    rc = make_zmq(o, &t, why, whylen);
    if (rc != FLPS_OK)
        return rc;
    auto_zmq_line(reason, why, whylen);
    *out = t;
    if (chosen != NULL)
        *chosen = TRANSPORT_KIND_ZMQ;
    return FLPS_OK;
done:
    if (rc != FLPS_OK)
        return rc;
    *out = t;
    if (chosen != NULL)
        *chosen = o->kind == TRANSPORT_KIND_ZMQ ? TRANSPORT_KIND_ZMQ
                                                : TRANSPORT_KIND_RDMA;
    return FLPS_OK;
}
