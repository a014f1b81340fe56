/* Tests for proto/conngate.c on real loopback TCP connections: admitted
 * connections keep their slots, a new one beyond a bound closes the
 * quietest waiting one, per address, and every refusal is counted once. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/conngate.h"

#define MAXC 16

typedef struct net {
    int lsn;
    struct sockaddr_in at;
    int cli[MAXC], srv[MAXC];
    int n;
    conngate *g; /* the gate under test, with the limits net_open got */
} net;

static void net_open(net *t, uint32_t conns, uint32_t waiting,
                     uint32_t per_addr)
{
    conngate_limits lim = {conns, waiting, per_addr};
    socklen_t len = sizeof(t->at);

    memset(t, 0, sizeof(*t));
    cr_assert_eq(conngate_create(&lim, &t->g), FLPS_OK);
    t->lsn = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(t->lsn, 0);
    t->at.sin_family = AF_INET;
    t->at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(t->lsn, (struct sockaddr *)&t->at, sizeof(t->at)), 0);
    cr_assert_eq(listen(t->lsn, 64), 0);
    cr_assert_eq(getsockname(t->lsn, (struct sockaddr *)&t->at, &len), 0);
}

/* A new connection from local address from (host order); the index. */
static int net_connect(net *t, uint32_t from)
{
    struct sockaddr_in me;
    int i = t->n++;

    cr_assert_lt(i, MAXC);
    t->cli[i] = socket(AF_INET, SOCK_STREAM, 0);
    memset(&me, 0, sizeof(me));
    me.sin_family = AF_INET;
    me.sin_addr.s_addr = htonl(from);
    cr_assert_eq(bind(t->cli[i], (struct sockaddr *)&me, sizeof(me)), 0);
    cr_assert_eq(connect(t->cli[i], (struct sockaddr *)&t->at, sizeof(t->at)),
                 0);
    t->srv[i] = accept(t->lsn, NULL, NULL);
    cr_assert_geq(t->srv[i], 0);
    return i;
}

/* A new connection from from, given to the gate; its index. */
static int net_accept(net *t, uint32_t from)
{
    int i = net_connect(t, from);

    cr_assert_eq(conngate_accepted(t->g, t->srv[i]), FLPS_OK);
    return i;
}

/* Client i sends a greeting's worth of bytes, and the server side has
 * them. */
static void net_greet(net *t, int i)
{
    char b[64];
    int avail = 0;

    memset(b, 0, sizeof(b));
    cr_assert_eq(write(t->cli[i], b, sizeof(b)), (ssize_t)sizeof(b));
    for (int k = 0; k < 1000 && avail < 64; k++) {
        ioctl(t->srv[i], FIONREAD, &avail);
        if (avail < 64)
            usleep(1000);
    }
    cr_assert_geq(avail, 64);
}

/* Whether client i's connection was shut down by the server side. */
static int net_was_closed(net *t, int i)
{
    struct pollfd p = {t->cli[i], POLLIN, 0};
    char b[8];

    if (poll(&p, 1, 200) <= 0)
        return 0;
    return read(t->cli[i], b, sizeof(b)) == 0;
}

static void net_close(net *t)
{
    conngate_destroy(t->g);
    for (int i = 0; i < t->n; i++) {
        close(t->cli[i]);
        close(t->srv[i]);
    }
    close(t->lsn);
}

Test(conngate, a_connection_beyond_the_cap_closes_the_quietest_waiting_one)
{
    net t;
    int a, b, c, d;

    net_open(&t, 3, 0, 0);
    a = net_accept(&t, INADDR_LOOPBACK);
    b = net_accept(&t, INADDR_LOOPBACK);
    c = net_accept(&t, INADDR_LOOPBACK);
    cr_assert_eq(conngate_enforce(t.g), 0);
    conngate_message(t.g, t.srv[a]); /* a member */
    net_greet(&t, c);                /* c has started a handshake */
    d = net_accept(&t, INADDR_LOOPBACK);
    cr_assert_eq(conngate_enforce(t.g), 1);
    cr_assert(net_was_closed(&t, b), "the quiet one goes");
    cr_assert(!net_was_closed(&t, a));
    cr_assert(!net_was_closed(&t, c));
    cr_assert(!net_was_closed(&t, d));
    cr_assert_eq(conngate_stats_get(t.g)->closed_full, 1);
    /* Its DISCONNECTED does not count it a second time. */
    conngate_closed(t.g, t.srv[b]);
    cr_assert_eq(conngate_stats_get(t.g)->not_admitted, 0);
    net_close(&t);
}

Test(conngate, admitted_connections_are_never_closed_to_make_room)
{
    net t;
    uint32_t live, waiting;

    net_open(&t, 2, 0, 0);
    for (int i = 0; i < 2; i++)
        conngate_message(t.g, t.srv[net_accept(&t, INADDR_LOOPBACK)]);
    net_accept(&t, INADDR_LOOPBACK);
    cr_assert_eq(conngate_enforce(t.g), 1);
    cr_assert(net_was_closed(&t, 2), "the new one is refused");
    cr_assert(!net_was_closed(&t, 0));
    cr_assert(!net_was_closed(&t, 1));
    conngate_counts(t.g, &live, &waiting);
    cr_assert_eq(live, 2);
    cr_assert_eq(waiting, 0);
    cr_assert_eq(conngate_stats_get(t.g)->closed_full, 1);
    net_close(&t);
}

Test(conngate, one_address_cannot_crowd_out_another)
{
    net t;
    const uint32_t one = INADDR_LOOPBACK, two = INADDR_LOOPBACK + 1;
    int other;

    net_open(&t, 0, 0, 2);
    other = net_accept(&t, two);
    for (int i = 0; i < 6; i++) {
        net_accept(&t, one);
        conngate_enforce(t.g);
    }
    /* 127.0.0.1 keeps its 2 newest; 127.0.0.2's one is untouched. */
    for (int i = 1; i <= 4; i++)
        cr_assert(net_was_closed(&t, i), "connection %d stays", i);
    cr_assert(!net_was_closed(&t, 5));
    cr_assert(!net_was_closed(&t, 6));
    cr_assert(!net_was_closed(&t, other));
    cr_assert_eq(conngate_stats_get(t.g)->closed_addr, 4);
    net_close(&t);
}

Test(conngate, waiting_connections_are_bounded_and_members_are_not_waiting)
{
    net t;

    net_open(&t, 0, 2, 0);
    for (int i = 0; i < 3; i++)
        conngate_message(t.g, t.srv[net_accept(&t, INADDR_LOOPBACK)]);
    /* Three members, and then three waiting: the oldest waiting goes. */
    for (int i = 3; i < 6; i++)
        net_accept(&t, INADDR_LOOPBACK);
    cr_assert_eq(conngate_enforce(t.g), 1);
    cr_assert(net_was_closed(&t, 3));
    for (int i = 0; i < 6; i++)
        if (i != 3)
            cr_assert(!net_was_closed(&t, i), "connection %d", i);
    cr_assert_eq(conngate_stats_get(t.g)->closed_waiting, 1);
    net_close(&t);
}

Test(conngate, a_waiting_connection_that_ends_is_counted_not_admitted_once)
{
    net t;

    net_open(&t, 0, 0, 0);
    /* One admitted, one not; both end, and the first twice. */
    conngate_message(t.g, t.srv[net_accept(&t, INADDR_LOOPBACK)]);
    net_accept(&t, INADDR_LOOPBACK);
    for (int i = 0; i < 3; i++)
        conngate_closed(t.g, t.srv[i == 2 ? 0 : i]);
    cr_assert_eq(conngate_stats_get(t.g)->not_admitted, 1);
    net_close(&t);
}

/* The transport counts a handshake cut short as refused only for a
 * connection the gate counted as not admitted, so it must be told which. */
Test(conngate, closing_says_whether_the_connection_was_counted_not_admitted)
{
    net t;
    int member, waiting, closed;

    net_open(&t, 0, 2, 0);
    member = net_accept(&t, INADDR_LOOPBACK);
    conngate_message(t.g, t.srv[member]);
    waiting = net_accept(&t, INADDR_LOOPBACK);
    net_greet(&t, waiting);
    closed = net_accept(&t, INADDR_LOOPBACK);
    (void)net_accept(&t, INADDR_LOOPBACK); /* three waiting, two allowed */
    cr_assert_eq(conngate_enforce(t.g), 1);
    cr_assert(net_was_closed(&t, closed), "the quiet one goes");
    cr_assert_eq(conngate_closed(t.g, t.srv[closed]), 0, "closed by the gate");
    cr_assert_eq(conngate_closed(t.g, t.srv[member]), 0, "admitted");
    cr_assert_eq(conngate_closed(t.g, t.srv[waiting]), 1, "waiting");
    cr_assert_eq(conngate_closed(t.g, t.srv[waiting]), 0, "no longer known");
    cr_assert_eq(conngate_stats_get(t.g)->not_admitted, 1);
    cr_assert_eq(conngate_stats_get(t.g)->closed_waiting, 1);
    net_close(&t);
}

Test(conngate, a_descriptor_taken_by_a_new_connection_is_not_closed)
{
    net t;

    net_open(&t, 1, 0, 0);
    net_accept(&t, INADDR_LOOPBACK);
    net_connect(&t, INADDR_LOOPBACK);
    /* Connection 0 closes and its descriptor becomes connection 1's
     * before the gate hears of either. */
    cr_assert_eq(dup2(t.srv[1], t.srv[0]), t.srv[0]);
    net_accept(&t, INADDR_LOOPBACK);
    /* Over the cap of 1: the oldest waiting is the stale entry, which is
     * left alone; the next is connection 2. */
    cr_assert_eq(conngate_enforce(t.g), 1);
    cr_assert(!net_was_closed(&t, 1), "another connection's descriptor");
    cr_assert(net_was_closed(&t, 2));
    net_close(&t);
}
