/* A ZeroMQ connector's handshakes (zmq_impl.h): each DEALER has a socket
 * monitor, read by the transport, that says when the shard refused this
 * client's handshake.
 *
 * A shard with credentials authenticates every connection in its
 * handshake (PLAIN with the job's secret, or CURVE). A client without
 * them, or with another job's, is refused there, and libzmq says so only
 * in monitor events: HANDSHAKE_FAILED_PROTOCOL (another mechanism; CURVE
 * with another server key) or _AUTH (the shard's ZAP handler refused the
 * credentials) end the connection for good, its queue with it, so a
 * blocking send would wait forever and an answer never comes. A shard
 * that closes the handshake (_NO_DETAIL) is retried by ZeroMQ; so many in
 * a row (ZT_CUTS_REFUSED) with none completed count as a refusal too. The
 * transport turns each into FLPS_EAUTH with what was wrong and what to
 * do: in transport_send to that shard, and once in transport_recv. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "proto/zmq_impl.h"
#include "proto/zmqmon.h"

flps_err zt_conn_monitor(zt *z, uint32_t peer)
{
    zt_peer *p = &z->peers[peer];
    char ep[80];

    snprintf(ep, sizeof(ep), "inproc://flps-conn-monitor-%p-%u", (void *)z,
             peer);
    p->mon = zmqmon_open(z->ctx, p->sock, ep,
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    return p->mon != NULL ? FLPS_OK : zt_fail(z, "socket monitor (DEALER)");
}

void zt_conn_events(zt *z, uint32_t peer)
{
    zt_peer *p = &z->peers[peer];
    uint16_t event;
    uint32_t value;

    while (p->mon != NULL && zmqmon_next(p->mon, &event, &value)) {
        if (p->refused != ZT_HS_OK && p->refused != ZT_HS_CUT)
            continue; /* that connection is over for good */
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            p->cuts = 0;
            p->refused = ZT_HS_OK;
            p->reported = 0;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            if (++p->cuts >= ZT_CUTS_REFUSED && p->refused == ZT_HS_OK) {
                p->refused = ZT_HS_CUT;
                p->code = p->cuts;
            }
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            p->refused = value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                             ? ZT_HS_MECHANISM
                             : ZT_HS_PROTOCOL;
            p->code = value;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            p->refused = ZT_HS_AUTH;
            p->code = value;
        }
    }
}

#define ZT_WHAT_TO_DO "set FLPS_CREDENTIALS_FILE to the job's credentials file"

/* What this client's handshake offers. */
static const char *zt_offer(const zt *z)
{
    return z->curve ? "CURVE keys (another job's server key?)"
                    : "secret (PLAIN)";
}

flps_err zt_conn_refusal(zt *z, uint32_t peer)
{
    zt_peer *p = &z->peers[peer];
    const char *ep = p->endpoint != NULL ? p->endpoint : "?";
    char *e = z->base.errmsg;
    const size_t n = sizeof(z->base.errmsg);

    zt_conn_events(z, peer);
    switch (p->refused) {
    case ZT_HS_OK:
        return FLPS_OK;
    case ZT_HS_MECHANISM:
        if (!z->curve && !z->plain)
            snprintf(e, n,
                     "the shard at %s refused this client's handshake: it "
                     "requires the job's credentials (PLAIN or CURVE) and "
                     "this client has none; " ZT_WHAT_TO_DO,
                     ep);
        else
            snprintf(e, n,
                     "the shard at %s refused this client's %s handshake: it "
                     "expects another mechanism, so these credentials are not "
                     "the job's; " ZT_WHAT_TO_DO,
                     ep, z->curve ? "CURVE" : "PLAIN");
        break;
    case ZT_HS_AUTH:
        snprintf(e, n,
                 "the shard at %s refused this client's %s (status %u): not "
                 "the job's, so not a member; " ZT_WHAT_TO_DO,
                 ep, z->curve ? "CURVE client key" : "secret (PLAIN)", p->code);
        break;
    case ZT_HS_PROTOCOL:
        snprintf(
            e, n,
            "the shard at %s refused this client's %s handshake (ZMTP "
            "error 0x%x): its credentials are not the job's; " ZT_WHAT_TO_DO,
            ep,
            z->curve   ? "CURVE"
            : z->plain ? "PLAIN"
                       : "",
            p->code);
        break;
    default: /* ZT_HS_CUT */
        if (!z->curve && !z->plain) {
            snprintf(e, n,
                     "the shard at %s closed %u handshakes in a row "
                     "unfinished: it requires the job's credentials (PLAIN "
                     "or CURVE) and this client has none; " ZT_WHAT_TO_DO,
                     ep, p->code);
            break;
        }
        snprintf(e, n,
                 "the shard at %s closed %u handshakes in a row unfinished: "
                 "it does not take this client's %s; " ZT_WHAT_TO_DO,
                 ep, p->code, zt_offer(z));
        break;
    }
    return FLPS_EAUTH;
}

double zt_conn_send_wait_s(const zt *z)
{
    const int hs = z->lim.handshake_ms > 0 ? z->lim.handshake_ms : 30000;

    return (hs + 5000) / 1000.0;
}

flps_err zt_conn_wait_send(zt *z, uint32_t peer, double until_s)
{
    zt_peer *p = &z->peers[peer];

    for (;;) {
        zmq_pollitem_t it[2] = {{p->sock, 0, ZMQ_POLLOUT, 0},
                                {p->mon, 0, ZMQ_POLLIN, 0}};
        const double left = until_s - flps_mono_s();
        flps_err rc = zt_conn_refusal(z, peer);
        int n;

        if (rc != FLPS_OK)
            return rc;
        if (left <= 0)
            break;
        n = zmq_poll(it, 2, (long)(left * 1000.0) + 1);
        if (n < 0 && zmq_errno() != EINTR)
            return zt_fail(z, "zmq_poll");
        if (n > 0 && (it[0].revents & ZMQ_POLLOUT))
            return FLPS_OK;
    }
    snprintf(z->base.errmsg, sizeof(z->base.errmsg),
             "could not send to the shard at %s for %.0f s: no connection to "
             "it completed its handshake (is it running and reachable?)",
             p->endpoint != NULL ? p->endpoint : "?", zt_conn_send_wait_s(z));
    return FLPS_ETIMEDOUT;
}
