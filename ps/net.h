/* Glue between a shard and a transport: encode a reply and send it. */
#ifndef FLPS_PS_NET_H
#define FLPS_PS_NET_H

#include "proto/transport.h"
#include "ps/shard.h"

/* A ps_send_fn: arg is the transport. Logs (does not return) failures: a
 * worker that vanished is the only cause, and it re-sends on reconnect. */
void ps_net_send(void *arg, uint32_t peer, const ps_reply *reply);

#endif
