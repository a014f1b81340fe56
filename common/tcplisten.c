/* A listening TCP socket from "HOST:PORT" text. */
#include "common/tcplisten.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/numparse.h"

flps_err tcplisten_split(const char *where, char *host, size_t hostlen,
                         char *port, size_t portlen)
{
    const char *colon, *hs = where, *he;
    uint64_t portnum;
    size_t n;

    if (where == NULL || host == NULL || port == NULL)
        return FLPS_EINVAL;
    if (where[0] == '[') {
        he = strchr(where, ']');
        if (he == NULL || he[1] != ':')
            return FLPS_EINVAL;
        hs = where + 1;
        colon = he + 1;
    } else {
        colon = strrchr(where, ':');
        if (colon == NULL)
            return FLPS_EINVAL;
        he = colon;
        if (memchr(where, ':', (size_t)(colon - where)) != NULL)
            return FLPS_EINVAL; /* an IPv6 address needs brackets */
    }
    n = (size_t)(he - hs);
    if (n >= hostlen)
        return FLPS_EINVAL;
    if (n == 0 || (n == 1 && hs[0] == '*'))
        snprintf(host, hostlen, "%s", "0.0.0.0");
    else
        snprintf(host, hostlen, "%.*s", (int)n, hs);
    n = strlen(colon + 1);
    if (n >= portlen || n > 5 ||
        flps_parse_u64(NULL, colon + 1, 0, 65535, &portnum, NULL, 0) != FLPS_OK)
        return FLPS_EINVAL;
    snprintf(port, portlen, "%s", colon + 1);
    return FLPS_OK;
}

int tcplisten_is_any(const char *where)
{
    char host[256], port[8];
    struct addrinfo hints, *res = NULL;
    int any = 0;

    if (where == NULL || tcplisten_split(where, host, sizeof(host), port,
                                         sizeof(port)) != FLPS_OK)
        return 0;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    /* Resolved as tcplisten_open will: "0", "0.0.0.0", "::" and "[::0]" are
     * all the wildcard address. */
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            const struct sockaddr_in *a = (const void *)ai->ai_addr;
            any |= a->sin_addr.s_addr == htonl(INADDR_ANY);
        } else if (ai->ai_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const void *)ai->ai_addr;
            any |= IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr);
        }
    }
    freeaddrinfo(res);
    return any;
}

static const char *bind_hint(int err)
{
    switch (err) {
    case EADDRINUSE:
        return "another process holds that port: stop it or choose another "
               "port (port 0 picks a free one)";
    case EADDRNOTAVAIL:
        return "the host is not an address of this machine: use one of its "
               "addresses, 127.0.0.1, or 0.0.0.0 for every interface";
    case EACCES:
        return "ports below 1024 need privileges: use a higher port";
    default:
        return "check the address";
    }
}

flps_err tcplisten_open(const char *where, int backlog, int *fd_out,
                        char *bound, size_t boundlen)
{
    char host[256], port[8], hostbuf[INET6_ADDRSTRLEN];
    struct addrinfo hints, *res = NULL, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = -1, err = 0, one = 1, gai;

    if (tcplisten_split(where, host, sizeof(host), port, sizeof(port)) !=
        FLPS_OK) {
        log_error("http: cannot listen on '%s': want HOST:PORT, e.g. "
                  "127.0.0.1:9100, [::1]:9100 or :9100",
                  where);
        return FLPS_EINVAL;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        log_error("http: cannot listen on %s: host '%s' does not resolve: %s",
                  where, host, gai_strerror(gai));
        return FLPS_EINVAL;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        /* Lets a restarted daemon rebind while old connections sit in
         * TIME_WAIT; a port another socket listens on still fails. */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, backlog) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        log_error("http: cannot listen on %s: %s; %s", where, strerror(err),
                  bind_hint(err));
        return FLPS_ESYS;
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        err = errno;
        log_error("http: getsockname on %s failed: %s", where, strerror(err));
        close(fd);
        return FLPS_ESYS;
    }
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, hostbuf, sizeof(hostbuf));
        snprintf(bound, boundlen, "[%s]:%u", hostbuf,
                 (unsigned)ntohs(a->sin6_port));
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, hostbuf, sizeof(hostbuf));
        snprintf(bound, boundlen, "%s:%u", hostbuf,
                 (unsigned)ntohs(a->sin_port));
    }
    *fd_out = fd;
    return FLPS_OK;
}
