/* Received messages built from copies of frames. */
#include "tests/support/rx_copy.h"

#include <string.h>

#include "common/alloc.h"

typedef struct rx_copy {
    transport_rx rx;
    void *data[PROTO_MAX_FRAMES + 1];
} rx_copy;

static void rx_copy_release(transport_rx *rx)
{
    rx_copy *c = rx->impl;

    for (size_t i = 0; i < rx->nframes; i++)
        flps_free(c->data[i]);
    flps_free(c);
}

flps_err transport_rx_copy(const proto_frame *frames, size_t nframes,
                           uint32_t peer, transport_rx **out)
{
    rx_copy *c;

    if (nframes > PROTO_MAX_FRAMES + 1)
        return FLPS_EINVAL;
    c = flps_calloc(1, sizeof(*c));
    if (c == NULL)
        return FLPS_ENOMEM;
    c->rx.impl = c;
    c->rx.release = rx_copy_release;
    c->rx.peer = peer;
    for (size_t i = 0; i < nframes; i++) {
        c->data[i] = flps_malloc(frames[i].len);
        if (c->data[i] == NULL) {
            rx_copy_release(&c->rx);
            return FLPS_ENOMEM;
        }
        /* An empty frame may have a NULL data pointer (an encoded push
         * of n = 0 elements), which memcpy must not be given. */
        if (frames[i].len > 0)
            memcpy(c->data[i], frames[i].data, frames[i].len);
        c->rx.frames[i].data = c->data[i];
        c->rx.frames[i].len = frames[i].len;
        c->rx.wire_bytes += transport_zmtp_frame_bytes(frames[i].len);
        c->rx.nframes = i + 1;
    }
    *out = &c->rx;
    return FLPS_OK;
}
