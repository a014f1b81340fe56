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

#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/rng.h"

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

/* Bind and listen on the first address of res that works, without a
 * word: the socket, or -1 with *err the last errno. */
static int listen_first(const struct addrinfo *res, int backlog, int *err)
{
    int one = 1;

    *err = 0;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                        ai->ai_protocol);
        if (fd < 0) {
            *err = errno;
            continue;
        }
        /* Lets a restarted daemon rebind while old connections sit in
         * TIME_WAIT; a port another socket listens on still fails. */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, backlog) == 0)
            return fd;
        *err = errno;
        close(fd);
    }
    return -1;
}

static int resolve(const char *host, const char *port, struct addrinfo **res)
{
    struct addrinfo hints;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    return getaddrinfo(host, port, &hints, res);
}

/* "HOST:PORT" of the socket fd is bound to, numeric, into bound. errno
 * when getsockname fails, else 0. */
static int bound_name(int fd, char *bound, size_t boundlen)
{
    char hostbuf[INET6_ADDRSTRLEN];
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return errno;
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
    return 0;
}

flps_err tcplisten_open(const char *where, int backlog, int *fd_out,
                        char *bound, size_t boundlen)
{
    char host[256], port[8];
    struct addrinfo *res = NULL;
    int fd, err = 0, gai;

    if (tcplisten_split(where, host, sizeof(host), port, sizeof(port)) !=
        FLPS_OK) {
        log_error("http: cannot listen on '%s': want HOST:PORT, e.g. "
                  "127.0.0.1:9100, [::1]:9100 or :9100",
                  where);
        return FLPS_EINVAL;
    }
    gai = resolve(host, port, &res);
    if (gai != 0) {
        log_error("http: cannot listen on %s: host '%s' does not resolve: %s",
                  where, host, gai_strerror(gai));
        return FLPS_EINVAL;
    }
    fd = listen_first(res, backlog, &err);
    freeaddrinfo(res);
    if (fd < 0) {
        log_error("http: cannot listen on %s: %s; %s", where, strerror(err),
                  bind_hint(err));
        return FLPS_ESYS;
    }
    err = bound_name(fd, bound, boundlen);
    if (err != 0) {
        log_error("http: getsockname on %s failed: %s", where, strerror(err));
        close(fd);
        return FLPS_ESYS;
    }
    *fd_out = fd;
    return FLPS_OK;
}

/* At least this many ports on a side of the ephemeral range, or it is
 * not used. */
#define HANDOFF_MIN_PORTS 256u
/* Ports tried before port 0. */
#define HANDOFF_TRIES 64

int tcplisten_handoff_range(unsigned lo, unsigned hi, unsigned *first,
                            unsigned *last)
{
    if (lo > hi || hi > 65535)
        return 0;
    if (65535 - hi >= HANDOFF_MIN_PORTS) {
        *first = hi + 1;
        *last = 65535;
        return 1;
    }
    if (lo > 1024 && lo - 1024 >= HANDOFF_MIN_PORTS) {
        *first = 1024;
        *last = lo - 1;
        return 1;
    }
    return 0;
}

/* The kernel's ephemeral port range, or Linux's default. */
static void ephemeral_range(unsigned *lo, unsigned *hi)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    *lo = 32768;
    *hi = 60999;
    if (f == NULL)
        return;
    if (fscanf(f, "%u %u", lo, hi) != 2) {
        *lo = 32768;
        *hi = 60999;
    }
    fclose(f);
}

flps_err tcplisten_open_handoff(const char *host, int backlog, int *fd_out,
                                char *bound, size_t boundlen)
{
    char where[300];
    unsigned lo, hi, first, last;

    ephemeral_range(&lo, &hi);
    if (host != NULL && strlen(host) < 256 &&
        tcplisten_handoff_range(lo, hi, &first, &last)) {
        uint64_t st =
            (uint64_t)getpid() << 32 ^ (uint64_t)(flps_mono_s() * 1e9);
        unsigned span = last - first + 1;

        for (int i = 0; i < HANDOFF_TRIES; i++) {
            char port[8];
            struct addrinfo *res = NULL;
            int fd, err;

            snprintf(port, sizeof(port), "%u",
                     first + (unsigned)(flps_splitmix64(&st) % span));
            if (resolve(host, port, &res) != 0)
                break; /* tcplisten_open below says why */
            fd = listen_first(res, backlog, &err);
            freeaddrinfo(res);
            if (fd >= 0 && bound_name(fd, bound, boundlen) == 0) {
                *fd_out = fd;
                return FLPS_OK;
            }
            if (fd >= 0)
                close(fd);
            if (err != EADDRINUSE && err != EACCES)
                break; /* not the port's fault: port 0 will say */
        }
    }
    snprintf(where, sizeof(where), "%s:0", host != NULL ? host : "");
    return tcplisten_open(where, backlog, fd_out, bound, boundlen);
}
