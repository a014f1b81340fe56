/* A listening TCP socket from "HOST:PORT" text: the one parser of the
 * listen addresses every HTTP endpoint of flps takes (the daemons' servers
 * and libflps's metrics responder), and the socket bound to it. */
#ifndef FLPS_COMMON_TCPLISTEN_H
#define FLPS_COMMON_TCPLISTEN_H

#include <stddef.h>

#include "common/err.h"

/* Split where, "HOST:PORT", "[V6]:PORT", ":PORT" or "*:PORT" (the last two
 * mean every interface: host becomes "0.0.0.0"), into host and port (the
 * port's digits, 0..65535). No I/O. FLPS_EINVAL for anything else (an IPv6
 * address without brackets, a port that is not a number in range, a host
 * longer than hostlen - 1); host and port are then unspecified. */
flps_err tcplisten_split(const char *where, char *host, size_t hostlen,
                         char *port, size_t portlen);

/* Whether where names every interface: an empty HOST, "*", or an address
 * that resolves to 0.0.0.0 or ::. 0 for anything else, including text
 * tcplisten_split refuses. May resolve a host name (blocks). */
int tcplisten_is_any(const char *where);

/* Bind a TCP socket to the first address of where (as tcplisten_split
 * reads it; PORT 0 picks a free port) that works and listen on it with the
 * given backlog. On FLPS_OK *fd is the socket (close-on-exec, blocking;
 * caller owns it) and bound gets the "HOST:PORT" actually bound, numeric
 * ("[V6]:PORT" for IPv6). Errors, logged with the cause and a hint (for a
 * taken port: "http: cannot listen on HOST:PORT: Address already in use;
 * another process holds that port: ..."): FLPS_EINVAL (where is not
 * HOST:PORT, or HOST does not resolve), FLPS_ESYS (socket, bind, listen).
 * Blocks while HOST resolves. */
flps_err tcplisten_open(const char *where, int backlog, int *fd, char *bound,
                        size_t boundlen);

/* The ports tcplisten_open_handoff draws from, given the kernel's
 * ephemeral range [lo, hi] (net.ipv4.ip_local_port_range): those above
 * it, or, when fewer than 256 are, those from 1024 below it. 1 with
 * [*first, *last]; 0 when neither side has 256 ports. */
int tcplisten_handoff_range(unsigned lo, unsigned hi, unsigned *first,
                            unsigned *last);

/* A listening socket on host (an address as tcplisten_open's HOST,
 * "[V6]" bracketed) for a port that is handed to another process, which
 * binds it after this one is closed (a saps worker's peer endpoint, picked
 * by flrun or flagent). The port lies outside the kernel's ephemeral range
 * (tcplisten_handoff_range of /proc/sys/net/ipv4/ip_local_port_range): no
 * bind to port 0 and no outgoing connection of any process on the machine
 * is given such a port, so between the close and the other process's bind
 * only a process that binds that very number can take it. Ports are tried
 * quietly from a random start; when none is free (or the range cannot be
 * read and the default 32768-60999 leaves none), port 0 as
 * tcplisten_open picks it. Results as tcplisten_open's. */
flps_err tcplisten_open_handoff(const char *host, int backlog, int *fd,
                                char *bound, size_t boundlen);

#endif
