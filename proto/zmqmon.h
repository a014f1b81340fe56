/* Reading a ZeroMQ socket monitor (zmq_socket_monitor): one event at a
 * time, without waiting. The listeners of both transports (ZeroMQ's and
 * RDMA's exchange channel) learn of their connections this way. */
#ifndef FLPS_PROTO_ZMQMON_H
#define FLPS_PROTO_ZMQMON_H

#include <stdint.h>

/* Monitor sock's events (a ZMQ_EVENT_* mask) at the inproc address ep
 * (unique in ctx): the PAIR that reads them, with no receive limit (a
 * lost event would put its reader's counts off, and ZeroMQ's I/O thread
 * would wait for room), or NULL (zmq_errno says why). */
void *zmqmon_open(void *ctx, void *sock, const char *ep, int events);

/* The next event queued on mon (the PAIR socket connected to a monitor's
 * endpoint), read whole without waiting: 1 with its type and value (for
 * ACCEPTED and DISCONNECTED, the connection's descriptor), 0 when none is
 * queued. */
int zmqmon_next(void *mon, uint16_t *event, uint32_t *value);

#endif
