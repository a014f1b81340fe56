/* The ZeroMQ transport's entry in the registry: proto's ZeroMQ transport
 * with a listener's limits. Every build has it. */
#include "transports/registry.h"

static flps_err zmq_make(const transport_select *o, const rdma_probe *node,
                         transport **out, char *why, size_t whylen)
{
    transport *t = NULL;
    flps_err rc = transport_zmq_create(&t);

    (void)node;
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

const transport_entry transport_entry_zmq = {"zmq", zmq_make};
