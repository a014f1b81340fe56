/* Glue between a shard and a transport: encode a reply and send it. */
#include "ps/net.h"

#include <stdlib.h>

#include "common/log.h"

void ps_net_send(void *arg, uint32_t peer, const ps_reply *reply)
{
    transport *t = arg;
    proto_frame pf[PROTO_MAX_FRAMES];
    transport_frame tf[PROTO_MAX_FRAMES];
    void *hdr = NULL;
    size_t hdrlen = 0, nf = 0;
    proto_buf *hb;
    flps_err rc;

    rc = proto_msg_encode(&reply->msg, &hdr, &hdrlen, pf, &nf);
    if (rc != FLPS_OK) {
        log_error("cannot encode %s reply: %s", proto_op_name(reply->msg.op),
                  flps_strerror(rc));
        return;
    }
    hb = proto_buf_wrap(hdr, hdrlen);
    if (hb == NULL) {
        free(hdr);
        log_error("out of memory sending a reply to peer %u", peer);
        return;
    }
    for (size_t i = 0; i < nf; i++) {
        /* The header and the compact index frames lie in the encoder's
         * buffer, values in the reply's payload (or rej buffer); an empty
         * frame needs no buffer of its own. */
        proto_buf *b = hb;
        if (pf[i].len > 0 && !proto_buf_holds(hb, pf[i].data, pf[i].len))
            b = proto_buf_holds(reply->rej, pf[i].data, pf[i].len)
                    ? reply->rej
                    : reply->payload;
        tf[i].buf = b;
        tf[i].off = pf[i].len == 0 ? 0
                                   : (size_t)((const char *)pf[i].data -
                                              (const char *)proto_buf_data(b));
        tf[i].len = pf[i].len;
    }
    rc = transport_send(t, peer, tf, nf);
    if (rc != FLPS_OK)
        log_warn("cannot send %s to peer %u: %s (%s)",
                 proto_op_name(reply->msg.op), peer, flps_strerror(rc),
                 t->errmsg);
    proto_buf_release(hb);
}
