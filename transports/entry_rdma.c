/* The RDMA transport's entry in the registry, compiled only where CMake
 * builds rdma/ (libibverbs and librdmacm found). */
#include "transports/registry.h"

#include "rdma/rdma.h"

/* The RDMA transport on a node the probe found fit; why gets the
 * transport's own reason on error. */
static flps_err rdma_make(const transport_select *o, const rdma_probe *node,
                          transport **out, char *why, size_t whylen)
{
    transport_rdma_options ro;
    const char *dev = NULL;
    uint8_t port = 0;

    transport_rdma_options_init(&ro);
    if (o->verbs != NULL)
        ro.verbs = o->verbs;
    /* The probe and libibverbs read the same sysfs; naming the port the
     * probe saw ACTIVE keeps the choice the log reports. */
    if (node != NULL && rdma_probe_first_active(node, &dev, &port)) {
        ro.device = dev;
        ro.port = port;
    }
    if (o->max_message_bytes > 0)
        ro.max_message_bytes = o->max_message_bytes;
    if (o->listener && o->limits != NULL)
        ro.limits = *o->limits;
    return transport_rdma_create(&ro, out, why, whylen);
}

const transport_entry transport_entry_rdma = {"rdma", rdma_make};
