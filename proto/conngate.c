/* Which connections a listener keeps (conngate.h). */
#include "proto/conngate.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "common/alloc.h"

/* A ZMTP peer sends the 10 bytes of its signature as soon as it has
 * connected (the rest of its greeting waits for ours): a connection that
 * has received fewer has not even started a handshake. */
#define CG_SIGNATURE 10

enum { CG_WAITING, CG_ADMITTED, CG_CLOSING };
enum { CG_FULL, CG_WAIT, CG_ADDR };

typedef struct cg_conn {
    int fd;
    uint8_t state;
    uint8_t spoke; /* has received a signature's worth (cached) */
    uint8_t fresh; /* accepted since the last conngate_enforce */
    uint8_t stale; /* fd no longer its own: never closed by the gate */
    /* Its peer, from getpeername at accept: the address counted per
     * address, and the port that tells a reused descriptor apart. */
    uint16_t family;
    uint16_t port;
    uint8_t addr[16];
} cg_conn;

struct conngate {
    conngate_limits lim;
    cg_conn *c; /* in the order accepted */
    size_t n, cap;
    uint32_t live, waiting; /* not CG_CLOSING; of them CG_WAITING */
    conngate_stats stats;
};

flps_err conngate_create(const conngate_limits *lim, conngate **out)
{
    conngate *g = flps_calloc(1, sizeof(*g));

    if (g == NULL)
        return FLPS_ENOMEM;
    g->lim = *lim;
    *out = g;
    return FLPS_OK;
}

void conngate_destroy(conngate *g)
{
    if (g == NULL)
        return;
    flps_free(g->c);
    flps_free(g);
}

/* The peer of fd into c; 0 when it has none (already gone). */
static int cg_peer(int fd, cg_conn *c)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    memset(&ss, 0, sizeof(ss));
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    c->family = ss.ss_family;
    memset(c->addr, 0, sizeof(c->addr));
    c->port = 0;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        memcpy(c->addr, &a->sin_addr, sizeof(a->sin_addr));
        c->port = a->sin_port;
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        memcpy(c->addr, &a->sin6_addr, sizeof(a->sin6_addr));
        c->port = a->sin6_port;
    }
    return 1;
}

static int cg_same_addr(const cg_conn *a, const cg_conn *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, 16) == 0;
}

static size_t cg_find(const conngate *g, int fd)
{
    for (size_t i = g->n; i-- > 0;)
        if (g->c[i].fd == fd)
            return i;
    return SIZE_MAX;
}

/* Forget entry i, counting it as not admitted if it was waiting; returns
 * 1 when it was. */
static int cg_remove(conngate *g, size_t i)
{
    cg_conn *c = &g->c[i];
    int not_admitted = 0;

    if (c->state != CG_CLOSING) {
        g->live--;
        if (c->state == CG_WAITING) {
            g->waiting--;
            g->stats.not_admitted++;
            not_admitted = 1;
        }
    }
    memmove(c, c + 1, (g->n - i - 1) * sizeof(*c));
    g->n--;
    return not_admitted;
}

flps_err conngate_accepted(conngate *g, int fd)
{
    size_t i = cg_find(g, fd);
    cg_conn *c;

    if (i != SIZE_MAX) /* its DISCONNECTED never came: it is gone */
        (void)cg_remove(g, i);
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        cg_conn *nc = flps_realloc(g->c, cap * sizeof(*nc));
        if (nc == NULL) {
            shutdown(fd, SHUT_RDWR);
            g->stats.closed_full++;
            return FLPS_ENOMEM;
        }
        g->c = nc;
        g->cap = cap;
    }
    c = &g->c[g->n++];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->state = CG_WAITING;
    c->fresh = 1;
    /* Gone already: its DISCONNECTED is on the way, and the descriptor
     * may be another connection's by the time the gate would close it. */
    c->stale = !cg_peer(fd, c);
    g->live++;
    g->waiting++;
    return FLPS_OK;
}

void conngate_message(conngate *g, int fd)
{
    size_t i = cg_find(g, fd);

    if (i == SIZE_MAX || g->c[i].state != CG_WAITING)
        return;
    g->c[i].state = CG_ADMITTED;
    g->waiting--;
}

int conngate_closed(conngate *g, int fd)
{
    size_t i = cg_find(g, fd);

    return i != SIZE_MAX ? cg_remove(g, i) : 0;
}

/* Whether fd has received fewer bytes than a signature (0 when unknown:
 * not TCP). */
static int cg_is_quiet(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) +
                  sizeof(ti.tcpi_bytes_received))
        return 0;
    return ti.tcpi_bytes_received < CG_SIGNATURE;
}

/* The waiting connection to close (of addr's address when addr is not
 * NULL): the oldest that is quiet, else the oldest; SIZE_MAX if none. */
static size_t cg_pick(conngate *g, const cg_conn *addr)
{
    size_t oldest = SIZE_MAX;

    for (size_t i = 0; i < g->n; i++) {
        cg_conn *c = &g->c[i];
        if (c->state != CG_WAITING || c->stale ||
            (addr != NULL && !cg_same_addr(c, addr)))
            continue;
        if (!c->spoke) {
            if (cg_is_quiet(c->fd))
                return i;
            c->spoke = 1; /* bytes only ever grow */
        }
        if (oldest == SIZE_MAX)
            oldest = i;
    }
    return oldest;
}

/* Close entry i for reason why, unless its descriptor has become another
 * connection's (then it is only marked, and counted when it closes). */
static void cg_close(conngate *g, size_t i, int why)
{
    cg_conn *c = &g->c[i];
    cg_conn now;

    memset(&now, 0, sizeof(now));
    if (!cg_peer(c->fd, &now) ||
        (now.family == c->family && now.port == c->port &&
         cg_same_addr(&now, c))) {
        /* Gone already (no peer) or still itself: either way it is
         * refused here. */
        shutdown(c->fd, SHUT_RDWR);
        c->state = CG_CLOSING;
        g->live--;
        g->waiting--;
        if (why == CG_FULL)
            g->stats.closed_full++;
        else if (why == CG_WAIT)
            g->stats.closed_waiting++;
        else
            g->stats.closed_addr++;
        return;
    }
    c->stale = 1;
}

/* Waiting connections from the address of entry at. */
static uint32_t cg_waiting_from(const conngate *g, const cg_conn *at)
{
    uint32_t k = 0;

    for (size_t i = 0; i < g->n; i++)
        k += g->c[i].state == CG_WAITING && cg_same_addr(&g->c[i], at);
    return k;
}

/* One connection to close and why, or SIZE_MAX when every bound holds. */
static size_t cg_next(conngate *g, int *why)
{
    const conngate_limits *l = &g->lim;

    if (l->max_conns > 0 && g->live > l->max_conns) {
        *why = CG_FULL;
        return cg_pick(g, NULL);
    }
    if (l->max_waiting > 0 && g->waiting > l->max_waiting) {
        *why = CG_WAIT;
        return cg_pick(g, NULL);
    }
    if (l->max_waiting_per_addr == 0)
        return SIZE_MAX;
    /* Only a new connection can put its address over the bound. */
    for (size_t i = 0; i < g->n; i++) {
        cg_conn *c = &g->c[i];
        if (!c->fresh)
            continue;
        if (c->state == CG_WAITING &&
            cg_waiting_from(g, c) > l->max_waiting_per_addr) {
            cg_conn addr = *c;
            *why = CG_ADDR;
            return cg_pick(g, &addr);
        }
        c->fresh = 0;
    }
    return SIZE_MAX;
}

size_t conngate_enforce(conngate *g)
{
    size_t closed = 0;

    for (;;) {
        int why = CG_FULL;
        size_t i = cg_next(g, &why);
        cg_conn *c;

        if (i == SIZE_MAX)
            break;
        c = &g->c[i];
        cg_close(g, i, why);
        if (c->state == CG_CLOSING)
            closed++;
    }
    for (size_t i = 0; i < g->n; i++)
        g->c[i].fresh = 0;
    return closed;
}

void conngate_counts(const conngate *g, uint32_t *live, uint32_t *waiting)
{
    *live = g->live;
    *waiting = g->waiting;
}

const conngate_stats *conngate_stats_get(const conngate *g)
{
    return &g->stats;
}
