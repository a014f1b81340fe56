/* Reading a ZeroMQ socket monitor (zmqmon.h). */
#include "proto/zmqmon.h"

#include <errno.h>
#include <string.h>
#include <zmq.h>

void *zmqmon_open(void *ctx, void *sock, const char *ep, int events)
{
    void *mon;
    int zero = 0;

    if (zmq_socket_monitor(sock, ep, events) != 0)
        return NULL;
    mon = zmq_socket(ctx, ZMQ_PAIR);
    if (mon == NULL)
        return NULL;
    if (zmq_setsockopt(mon, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(mon, ZMQ_RCVHWM, &zero, sizeof(zero)) != 0 ||
        zmq_connect(mon, ep) != 0) {
        const int e = zmq_errno();
        zmq_close(mon);
        errno = e;
        return NULL;
    }
    return mon;
}

int zmqmon_next(void *mon, uint16_t *event, uint32_t *value)
{
    zmq_msg_t ev;
    int more;

    *event = 0;
    *value = 0;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&ev);
        return 0;
    }
    /* libzmq 4's first frame: the event (u16) and its value (u32). */
    if (zmq_msg_size(&ev) >= 6) {
        memcpy(event, zmq_msg_data(&ev), 2);
        memcpy(value, (char *)zmq_msg_data(&ev) + 2, 4);
    }
    more = zmq_msg_more(&ev);
    zmq_msg_close(&ev);
    while (more) { /* the endpoint's address */
        zmq_msg_t a;
        zmq_msg_init(&a);
        if (zmq_msg_recv(&a, mon, 0) < 0) {
            zmq_msg_close(&a);
            break;
        }
        more = zmq_msg_more(&a);
        zmq_msg_close(&a);
    }
    return 1;
}
