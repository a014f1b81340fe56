/* Redis over TLS for rconn: hiredis 0.14 has no TLS, so this module owns
 * the socket and the OpenSSL session, and hiredis keeps the protocol (the
 * caller formats commands with redisFormatCommand*, and replies are parsed
 * here with a redisReader). Every wait is bounded by the timeout. */
#ifndef FLPS_SCHED_RTLS_H
#define FLPS_SCHED_RTLS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "common/err.h"

typedef struct rtls rtls;

/* Connect to host:port (TCP, then a TLS 1.2+ handshake) within timeout_ms
 * and verify the server: its certificate must chain to a CA of ca_file
 * (PEM; NULL or "": the system's CAs) and name host (a DNS name, or an IP
 * address in its subjectAltName). Errors, with the message in errbuf:
 *   FLPS_EIO      host cannot be reached, or the handshake broke (e.g. the
 *                 port is not a TLS port); retrying may help
 *   FLPS_ECONFIG  the certificate does not verify, or ca_file cannot be
 *                 loaded: retrying cannot help
 *   FLPS_ENOMEM
 * Ownership: on FLPS_OK the caller owns *out (rtls_close). Not
 * thread-safe: one thread per connection. */
flps_err rtls_connect(const char *host, int port, const char *ca_file,
                      int timeout_ms, rtls **out, char *errbuf, size_t errlen);

/* Close the session (a TLS close_notify, not waited for) and free t. NULL
 * is ignored. */
void rtls_close(rtls *t);

/* Send len bytes of one formatted command and read its one reply, within
 * the timeout (each of the send and the reply). On FLPS_OK *reply is the
 * reply (caller frees with freeReplyObject), a Redis error reply included.
 * Errors: FLPS_EIO (the connection broke, closed or timed out: do not use
 * t again), FLPS_EPROTO (not RESP), FLPS_ENOMEM; message in errbuf. Blocks
 * up to twice the timeout. SIGPIPE is not raised. */
flps_err rtls_command(rtls *t, const char *cmd, size_t len, redisReply **reply,
                      char *errbuf, size_t errlen);

/* Whether the server closed the connection while it was idle (between a
 * reply and the next command nothing but TLS housekeeping may arrive).
 * Never blocks. */
int rtls_closed_by_server(rtls *t);

#endif
