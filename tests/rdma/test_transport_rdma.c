/* Tests for rdma/transport_rdma.c over the emulated NIC (emu_verbs.h): one
 * listener and a few connectors, multipart and 100 MB messages, order past
 * the credits, a slow reader, a peer that vanishes, a listener that goes,
 * refused and hostile exchanges, the set-up failures (no device, port
 * down, memlock) and no registered memory or queue pair left behind. */
#include "rdma/rdma.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "emu_verbs.h"
#include "rdma/exchange.h"

#define WAIT_MS 10000

static void setup(void)
{
    rdma_emu_reset();
}

static void check_no_leaks(void)
{
    cr_assert_eq(rdma_emu_live_mrs(), 0, "registered regions left: %zu",
                 rdma_emu_live_mrs());
    cr_assert_eq(rdma_emu_live_qps(), 0, "queue pairs left: %zu",
                 rdma_emu_live_qps());
    cr_assert_eq(rdma_emu_live_cqs(), 0);
    cr_assert_eq(rdma_emu_live_pds(), 0);
    cr_assert_eq(rdma_emu_live_contexts(), 0);
}

static transport *make(size_t max_message, uint32_t credits)
{
    transport_rdma_options o;
    transport *t = NULL;
    char why[512];

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    o.max_message_bytes = max_message;
    o.credits = credits;
    o.timeout_ms = 5000;
    cr_assert_eq(transport_rdma_create(&o, &t, why, sizeof(why)), FLPS_OK, "%s",
                 why);
    return t;
}

static transport *make_listener(size_t max_message, uint32_t credits,
                                char *bound, size_t boundlen)
{
    transport *t = make(max_message, credits);
    cr_assert_eq(transport_listen(t, "tcp://127.0.0.1:0", bound, boundlen),
                 FLPS_OK, "%s", t->errmsg);
    return t;
}

static unsigned char pattern(unsigned m, size_t i, size_t j)
{
    return (unsigned char)(m * 131u + i * 31u + j * 7u + (j >> 8));
}

static flps_err send_msg(transport *t, uint32_t peer, unsigned m,
                         const size_t *len, size_t nf)
{
    transport_frame f[16];
    flps_err rc;

    for (size_t i = 0; i < nf; i++) {
        proto_buf *b = proto_buf_create(len[i] ? len[i] : 1);
        unsigned char *d = proto_buf_data(b);
        cr_assert_not_null(b);
        for (size_t j = 0; j < len[i]; j++)
            d[j] = pattern(m, i, j);
        f[i].buf = b;
        f[i].off = 0;
        f[i].len = len[i];
    }
    rc = transport_send(t, peer, f, nf);
    for (size_t i = 0; i < nf; i++)
        proto_buf_release(f[i].buf);
    return rc;
}

static transport_rx *recv_msg(transport *t, unsigned m, const size_t *len,
                              size_t nf)
{
    transport_rx *rx = NULL;
    flps_err rc = transport_recv(t, WAIT_MS, &rx);

    cr_assert_eq(rc, FLPS_OK, "recv of message %u: %s (%s)", m,
                 flps_strerror(rc), t->errmsg);
    cr_assert_eq(rx->nframes, nf, "message %u: %zu frames, expected %zu", m,
                 rx->nframes, nf);
    for (size_t i = 0; i < nf; i++) {
        const unsigned char *d = rx->frames[i].data;
        cr_assert_eq(rx->frames[i].len, len[i]);
        cr_assert_eq((uintptr_t)d & 3u, 0, "frame %zu is not 4-byte aligned",
                     i);
        for (size_t j = 0; j < len[i]; j++)
            if (d[j] != pattern(m, i, j))
                cr_assert_fail("message %u frame %zu byte %zu is %u, "
                               "expected %u",
                               m, i, j, d[j], pattern(m, i, j));
    }
    return rx;
}

TestSuite(transport_rdma, .init = setup);

Test(transport_rdma, carries_a_multipart_message_each_way)
{
    char bound[256];
    transport *srv = make_listener(1 << 20, 8, bound, sizeof(bound));
    transport *cli = make(1 << 20, 8);
    const size_t len[] = {90, 0, 5000, 3};
    uint32_t to_srv;
    transport_rx *rx;

    cr_assert_str_eq(srv->vt->name, "rdma");
    cr_assert_eq(strncmp(bound, "tcp://127.0.0.1:", 16), 0, "%s", bound);
    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK, "%s",
                 cli->errmsg);
    cr_assert_eq(to_srv, 0);
    /* Sent before the exchange is done: queued, then delivered. */
    cr_assert_eq(send_msg(cli, to_srv, 1, len, 4), FLPS_OK, "%s", cli->errmsg);
    rx = recv_msg(srv, 1, len, 4);
    cr_assert_eq(send_msg(srv, rx->peer, 2, len, 3), FLPS_OK, "%s",
                 srv->errmsg);
    transport_rx_release(rx);
    rx = recv_msg(cli, 2, len, 3);
    cr_assert_eq(rx->peer, to_srv);
    transport_rx_release(rx);
    cr_assert_eq(cli->stats.msgs_sent, 1);
    cr_assert_eq(srv->stats.msgs_recv, 1);
    cr_assert_eq(cli->stats.bytes_sent, srv->stats.bytes_recv);
    cr_assert_gt(cli->stats.bytes_sent, 90 + 5000 + 3);
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, keeps_order_far_past_the_credits)
{
    char bound[256];
    transport *srv = make_listener(1 << 16, 4, bound, sizeof(bound));
    transport *cli = make(1 << 16, 4);
    uint32_t to_srv;
    const unsigned n = 500;

    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    for (unsigned m = 0; m < n; m++) {
        size_t len[] = {16, 100 + m % 7};
        cr_assert_eq(send_msg(cli, to_srv, m, len, 2), FLPS_OK, "%u: %s", m,
                     cli->errmsg);
    }
    /* The connector's thread is not in a call: its progress thread keeps
     * sending as credits come back. */
    for (unsigned m = 0; m < n; m++) {
        size_t len[] = {16, 100 + m % 7};
        transport_rx_release(recv_msg(srv, m, len, 2));
    }
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, serves_a_few_connectors_with_distinct_peers)
{
    char bound[256];
    enum { NC = 4, NM = 40 };
    transport *srv = make_listener(1 << 18, 8, bound, sizeof(bound));
    transport *cli[NC];
    uint32_t to_srv[NC], seen_peer[NC];
    unsigned next[NC] = {0};

    for (int c = 0; c < NC; c++) {
        cli[c] = make(1 << 18, 8);
        cr_assert_eq(transport_connect(cli[c], bound, &to_srv[c]), FLPS_OK);
        seen_peer[c] = UINT32_MAX;
    }
    for (unsigned m = 0; m < NM; m++)
        for (int c = 0; c < NC; c++) {
            /* Frame 0 says who sent it; frame 1 is large every 10th. */
            size_t len[] = {4, m % 10 == 0 ? 100000 : 300};
            cr_assert_eq(send_msg(cli[c], to_srv[c], m * NC + c, len, 2),
                         FLPS_OK, "%s", cli[c]->errmsg);
        }
    for (unsigned k = 0; k < NC * NM; k++) {
        transport_rx *rx = NULL;
        int c = -1;
        cr_assert_eq(transport_recv(srv, WAIT_MS, &rx), FLPS_OK, "%s",
                     srv->errmsg);
        for (int i = 0; i < NC; i++) {
            unsigned m = next[i] * NC + i;
            if (((const unsigned char *)rx->frames[0].data)[0] ==
                    pattern(m, 0, 0) &&
                ((const unsigned char *)rx->frames[0].data)[1] ==
                    pattern(m, 0, 1) &&
                (seen_peer[i] == UINT32_MAX || seen_peer[i] == rx->peer))
                c = i;
        }
        cr_assert_geq(c, 0, "message %u is nobody's next one", k);
        if (seen_peer[c] == UINT32_MAX)
            seen_peer[c] = rx->peer;
        cr_assert_eq(rx->peer, seen_peer[c]);
        {
            const size_t len[] = {4, next[c] % 10 == 0 ? 100000 : 300};
            unsigned m = next[c] * NC + c;
            transport_rx_release(rx);
            (void)len;
            (void)m;
        }
        next[c]++;
    }
    for (int i = 0; i < NC; i++) {
        cr_assert_eq(next[i], NM);
        for (int j = 0; j < i; j++)
            cr_assert_neq(seen_peer[i], seen_peer[j]);
    }
    /* Replies reach the right connector. */
    for (int c = 0; c < NC; c++) {
        size_t len[] = {8};
        cr_assert_eq(send_msg(srv, seen_peer[c], 7000 + c, len, 1), FLPS_OK,
                     "%s", srv->errmsg);
    }
    for (int c = 0; c < NC; c++) {
        size_t len[] = {8};
        transport_rx_release(recv_msg(cli[c], 7000 + c, len, 1));
        transport_destroy(cli[c]);
    }
    transport_destroy(srv);
    check_no_leaks();
}

/* A connector that goes frees its descriptor, and the next connection
 * is given the same number: the close the listener hears of later must
 * not take the newcomer with it (it did, now and then, when the close
 * and the newcomer's HELLO came in the same progress round). */
Test(transport_rdma, a_closed_connection_does_not_take_its_successor)
{
    char bound[256];
    enum { ROUNDS = 60 };
    transport *srv = make_listener(1 << 16, 8, bound, sizeof(bound));

    for (unsigned r = 0; r < ROUNDS; r++) {
        transport *cli = make(1 << 16, 8);
        uint32_t to_srv;
        transport_rx *rx = NULL;
        size_t len[] = {16};
        flps_err rc;

        cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
        cr_assert_eq(send_msg(cli, to_srv, r, len, 1), FLPS_OK, "round %u: %s",
                     r, cli->errmsg);
        rx = recv_msg(srv, r, len, 1);
        rc = send_msg(srv, rx->peer, 1000 + r, len, 1);
        cr_assert_eq(rc, FLPS_OK, "round %u: the reply: %s (%s)", r,
                     flps_strerror(rc), srv->errmsg);
        transport_rx_release(rx);
        transport_rx_release(recv_msg(cli, 1000 + r, len, 1));
        transport_destroy(cli);
    }
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, moves_a_100_mb_message_by_rdma_write, .timeout = 120)
{
    char bound[256];
    const size_t big = (size_t)100 << 20;
    transport *srv = make_listener(big + 4096, 4, bound, sizeof(bound));
    transport *cli = make(big + 4096, 4);
    const size_t len[] = {120, big};
    uint32_t to_srv;
    transport_rx *rx;

    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 3, len, 2), FLPS_OK, "%s", cli->errmsg);
    cr_assert_eq(send_msg(cli, to_srv, 4, len, 1), FLPS_OK);
    rx = recv_msg(srv, 3, len, 2);
    cr_assert_geq(rx->wire_bytes, big);
    transport_rx_release(rx);
    transport_rx_release(recv_msg(srv, 4, len, 1));
    /* A message larger than the pools is refused at send, whole. */
    {
        const size_t huge[] = {big + 8192};
        cr_assert_eq(send_msg(cli, to_srv, 5, huge, 1), FLPS_EINVAL);
        cr_assert(strstr(cli->errmsg, "max_message_bytes") != NULL, "%s",
                  cli->errmsg);
    }
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, a_received_message_outlives_its_transport)
{
    char bound[256];
    transport *srv = make_listener(1 << 20, 4, bound, sizeof(bound));
    transport *cli = make(1 << 20, 4);
    const size_t small[] = {64}, large[] = {16, 500000};
    transport_rx *a, *b;
    uint32_t to_srv;

    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 1, small, 1), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 2, large, 2), FLPS_OK);
    a = recv_msg(srv, 1, small, 1);
    b = recv_msg(srv, 2, large, 2);
    transport_destroy(srv);
    transport_destroy(cli);
    check_no_leaks(); /* deregistered, though the memory is still read */
    cr_assert_eq(((const unsigned char *)b->frames[1].data)[499999],
                 pattern(2, 1, 499999));
    transport_rx_release(a);
    transport_rx_release(b);
}

Test(transport_rdma, a_slow_reader_loses_nothing)
{
    char bound[256];
    transport *srv = make_listener(1 << 20, 2, bound, sizeof(bound));
    transport *cli = make(1 << 20, 2);
    uint32_t to_srv;
    const unsigned n = 60;

    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    for (unsigned m = 0; m < n; m++) {
        size_t len[] = {m % 3 == 0 ? 200000 : 1000};
        cr_assert_eq(send_msg(cli, to_srv, m, len, 1), FLPS_OK);
    }
    for (unsigned m = 0; m < n; m++) {
        size_t len[] = {m % 3 == 0 ? 200000 : 1000};
        transport_rx *rx = recv_msg(srv, m, len, 1);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL); /* a slow reader */
        transport_rx_release(rx);
    }
    cr_assert_eq(srv->stats.msgs_recv, n);
    cr_assert_eq(cli->stats.msgs_dropped, 0);
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, a_vanished_peer_gives_an_error_not_a_hang)
{
    char bound[256];
    transport *srv = make_listener(1 << 16, 4, bound, sizeof(bound));
    transport *a = make(1 << 16, 4), *b = make(1 << 16, 4);
    const size_t len[] = {32};
    uint32_t to_a, to_b, pa, pb, qpn[8];
    transport_rx *rx;
    flps_err rc = FLPS_OK;

    cr_assert_eq(transport_connect(a, bound, &to_a), FLPS_OK);
    cr_assert_eq(send_msg(a, to_a, 1, len, 1), FLPS_OK);
    rx = recv_msg(srv, 1, len, 1);
    pa = rx->peer;
    transport_rx_release(rx);
    /* a's queue pair is the first one made; the listener's for it next. */
    cr_assert_eq(rdma_emu_qp_numbers(qpn, 8), 2);
    cr_assert_eq(transport_connect(b, bound, &to_b), FLPS_OK);
    cr_assert_eq(send_msg(b, to_b, 2, len, 1), FLPS_OK);
    rx = recv_msg(srv, 2, len, 1);
    pb = rx->peer;
    transport_rx_release(rx);
    cr_assert_neq(pa, pb);
    cr_assert_eq(rdma_emu_vanish_qp(qpn[0]), 0);
    /* The listener learns it on its next send to a: the send after the
     * failure is refused with the cause. */
    for (int i = 0; i < 1000 && rc == FLPS_OK; i++) {
        rc = send_msg(srv, pa, 3, len, 1);
        if (rc == FLPS_OK) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    cr_assert_eq(rc, FLPS_ECLOSED, "%s", flps_strerror(rc));
    cr_assert(strstr(srv->errmsg, "gone") != NULL, "%s", srv->errmsg);
    cr_assert(strstr(srv->errmsg, "did not acknowledge") != NULL, "%s",
              srv->errmsg);
    /* b is served on. */
    cr_assert_eq(send_msg(srv, pb, 4, len, 1), FLPS_OK, "%s", srv->errmsg);
    transport_rx_release(recv_msg(b, 4, len, 1));
    /* a's own receive times out; it does not hang. */
    cr_assert_eq(transport_recv(a, 50, &rx), FLPS_ETIMEDOUT);
    transport_destroy(a);
    transport_destroy(b);
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, a_connector_survives_its_listener_going)
{
    char bound[256];
    transport *srv = make_listener(1 << 16, 4, bound, sizeof(bound));
    transport *cli = make(1 << 16, 4);
    const size_t len[] = {32};
    uint32_t to_srv;
    transport_rx *rx;

    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 1, len, 1), FLPS_OK);
    transport_rx_release(recv_msg(srv, 1, len, 1));
    transport_destroy(srv);
    /* Sends are queued for a new connection, receives time out. */
    for (int i = 0; i < 20; i++)
        cr_assert_eq(send_msg(cli, to_srv, 2, len, 1), FLPS_OK, "%s",
                     cli->errmsg);
    cr_assert_eq(transport_recv(cli, 100, &rx), FLPS_ETIMEDOUT);
    transport_destroy(cli);
    check_no_leaks();
}

Test(transport_rdma, refuses_connections_beyond_max_peers)
{
    char bound[256], why[512];
    transport_rdma_options o;
    transport *srv = NULL, *a = make(4096, 4), *b = make(4096, 4);
    const size_t len[] = {8};
    uint32_t to_a, to_b;
    transport_rx *rx;

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    o.max_message_bytes = 4096;
    o.limits.max_peers = 1;
    cr_assert_eq(transport_rdma_create(&o, &srv, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(
        transport_listen(srv, "tcp://127.0.0.1:0", bound, sizeof(bound)),
        FLPS_OK);
    cr_assert_eq(transport_connect(a, bound, &to_a), FLPS_OK);
    cr_assert_eq(send_msg(a, to_a, 1, len, 1), FLPS_OK);
    transport_rx_release(recv_msg(srv, 1, len, 1));
    cr_assert_eq(transport_connect(b, bound, &to_b), FLPS_OK);
    cr_assert_eq(send_msg(b, to_b, 2, len, 1), FLPS_OK);
    cr_assert_eq(transport_recv(srv, 300, &rx), FLPS_ETIMEDOUT);
    cr_assert_geq(srv->stats.conns_refused, 1);
    /* b is told why. */
    cr_assert_eq(send_msg(b, to_b, 3, len, 1), FLPS_ECLOSED);
    cr_assert(strstr(b->errmsg, "no room for another peer (max_peers 1)") !=
                  NULL,
              "%s", b->errmsg);
    transport_destroy(a);
    transport_destroy(b);
    transport_destroy(srv);
    check_no_leaks();
}

/* A raw ZeroMQ peer sends the listener what it likes. */
static void raw_exchange(const char *bound, const void *msg, size_t len,
                         char *reply, size_t replylen)
{
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int t = WAIT_MS, zero = 0, n;
    unsigned char buf[RDMA_XCH_MAX_BYTES + 1];
    rdma_xch x;
    char why[300];

    zmq_setsockopt(s, ZMQ_RCVTIMEO, &t, sizeof(t));
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    cr_assert_eq(zmq_connect(s, bound), 0);
    cr_assert_eq(zmq_send(s, msg, len, 0), (int)len);
    n = zmq_recv(s, buf, sizeof(buf), 0);
    cr_assert_gt(n, 0, "no answer: %s", zmq_strerror(zmq_errno()));
    cr_assert_eq(rdma_xch_decode(buf, (size_t)n, &x, why, sizeof(why)), FLPS_OK,
                 "%s", why);
    cr_assert_eq(x.type, RDMA_XCH_REFUSE);
    snprintf(reply, replylen, "%s", x.text);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

Test(transport_rdma, refuses_a_hostile_exchange_and_serves_on)
{
    char bound[256], reply[300];
    transport *srv = make_listener(4096, 4, bound, sizeof(bound));
    transport *cli = make(4096, 4);
    unsigned char hello[RDMA_XCH_BYTES];
    rdma_xch x;
    size_t n;
    const size_t len[] = {8};
    uint32_t to_srv;

    raw_exchange(bound, "GET / HTTP/1.1\r\n", 16, reply, sizeof(reply));
    cr_assert(strstr(reply, "not an flps RDMA exchange message") != NULL, "%s",
              reply);
    /* A well-formed HELLO that points its credit block at nothing. */
    memset(&x, 0, sizeof(x));
    x.type = RDMA_XCH_HELLO;
    x.qp_num = 77;
    x.mtu = 5;
    x.credits = 4;
    x.slot_bytes = 4096;
    x.ctrl_addr = 8;
    cr_assert_eq(rdma_xch_encode(&x, hello, sizeof(hello), &n), FLPS_OK);
    hello[36] = 0xff; /* credits: 255 + ... far beyond the limit */
    hello[37] = 0xff;
    raw_exchange(bound, hello, n, reply, sizeof(reply));
    cr_assert(strstr(reply, "credits") != NULL, "%s", reply);
    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 1, len, 1), FLPS_OK);
    transport_rx_release(recv_msg(srv, 1, len, 1));
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

static void create_fails(transport_rdma_options *o, char *why, size_t len)
{
    transport *t = NULL;
    flps_err rc = transport_rdma_create(o, &t, why, len);

    cr_assert_neq(rc, FLPS_OK);
    cr_assert_null(t);
    check_no_leaks();
}

Test(transport_rdma, says_there_is_no_device_and_what_to_do)
{
    transport_rdma_options o;
    char why[512];

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    rdma_emu_set_no_device(1);
    create_fails(&o, why, sizeof(why));
    cr_assert(strstr(why, "no RDMA device") != NULL, "%s", why);
    cr_assert(strstr(why, "ibv_devinfo") != NULL, "%s", why);
    cr_assert(strstr(why, "rdma link add rxe0 type rxe") != NULL, "%s", why);
    cr_assert(strstr(why, "transport: zmq") != NULL, "%s", why);
}

Test(transport_rdma, says_the_port_is_down_and_what_to_check)
{
    transport_rdma_options o;
    char why[512];

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    rdma_emu_set_port_down(1);
    create_fails(&o, why, sizeof(why));
    cr_assert(strstr(why, "port 1 of RDMA device emu0 is DOWN") != NULL, "%s",
              why);
    cr_assert(strstr(why, "ibv_devinfo -d emu0") != NULL, "%s", why);
}

Test(transport_rdma, names_an_unknown_device_and_those_present)
{
    transport_rdma_options o;
    char why[512];

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    o.device = "mlx5_9";
    create_fails(&o, why, sizeof(why));
    cr_assert(strstr(why, "no RDMA device named mlx5_9 (present: emu0)") !=
                  NULL,
              "%s", why);
}

Test(transport_rdma, says_how_much_memlock_the_pools_need)
{
    transport_rdma_options o;
    char why[1024];

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    o.max_message_bytes = (size_t)64 << 20;
    rdma_emu_set_memlock_limit(8u << 20);
    create_fails(&o, why, sizeof(why));
    cr_assert(strstr(why, "locked memory") != NULL, "%s", why);
    cr_assert(strstr(why, "8388608 bytes") != NULL, "%s", why);
    /* The example of docs/rdma.md: 16 credits and 64 MiB messages. */
    cr_assert(strstr(why, "need 135274624 bytes (129.0 MiB)") != NULL, "%s",
              why);
    cr_assert(strstr(why, "ulimit -l 132105") != NULL, "%s", why);
    cr_assert(strstr(why, "ulimit -l") != NULL, "%s", why);
    cr_assert(strstr(why, "IPC_LOCK") != NULL, "%s", why);
    cr_assert(strstr(why, "agent.rdma.enabled") != NULL, "%s", why);
}

Test(transport_rdma, a_failed_registration_is_said_then_retried)
{
    char bound[256];
    transport *srv = make_listener(4096, 4, bound, sizeof(bound));
    transport *cli = make(4096, 4);
    const size_t len[] = {8};
    uint32_t to_srv;
    flps_err rc;
    int i;

    /* The connector registers its pools in transport_connect. */
    rdma_emu_fail_next_reg_mr(ENOMEM);
    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 1, len, 1), FLPS_ECLOSED);
    cr_assert(strstr(cli->errmsg, "refused") != NULL, "%s", cli->errmsg);
    cr_assert(strstr(cli->errmsg, "memlock") != NULL, "%s", cli->errmsg);
    cr_assert(strstr(cli->errmsg, "ulimit -l") != NULL, "%s", cli->errmsg);
    /* Tried again in the background: sends work once it succeeds. */
    for (i = 0; i < 300; i++) {
        rc = send_msg(cli, to_srv, 2, len, 1);
        if (rc == FLPS_OK)
            break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(rc, FLPS_OK, "%s", cli->errmsg);
    transport_rx_release(recv_msg(srv, 2, len, 1));
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, refuses_a_message_larger_than_the_peer_takes)
{
    char bound[256];
    transport *srv = make_listener(4096, 4, bound, sizeof(bound));
    transport *cli = make(1 << 20, 4);
    const size_t small[] = {3000}, big[] = {100000};
    uint32_t to_srv;

    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 1, small, 1), FLPS_OK);
    transport_rx_release(recv_msg(srv, 1, small, 1));
    cr_assert_eq(send_msg(cli, to_srv, 2, big, 1), FLPS_EINVAL);
    cr_assert(strstr(cli->errmsg, "smaller at the peer") != NULL, "%s",
              cli->errmsg);
    cr_assert_eq(send_msg(cli, to_srv, 3, small, 1), FLPS_OK);
    transport_rx_release(recv_msg(srv, 3, small, 1));
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

Test(transport_rdma, drops_a_peer_that_sends_a_frame_over_the_limit)
{
    char bound[256], why[512];
    transport_rdma_options o;
    transport *srv = NULL, *cli = make(1 << 16, 4);
    const size_t over[] = {2000}, ok[] = {500};
    uint32_t to_srv;
    transport_rx *rx;

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    o.max_message_bytes = 1 << 16;
    o.limits.max_frame_bytes = 1000;
    cr_assert_eq(transport_rdma_create(&o, &srv, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(
        transport_listen(srv, "tcp://127.0.0.1:0", bound, sizeof(bound)),
        FLPS_OK);
    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 1, ok, 1), FLPS_OK);
    transport_rx_release(recv_msg(srv, 1, ok, 1));
    cr_assert_eq(send_msg(cli, to_srv, 2, over, 1), FLPS_OK);
    cr_assert_eq(transport_recv(srv, 300, &rx), FLPS_ETIMEDOUT,
                 "the frame over the limit is not delivered");
    /* The connector finds its connection gone and makes a new one. */
    cr_assert_eq(send_msg(cli, to_srv, 3, ok, 1), FLPS_OK);
    for (int i = 0; i < 50; i++) {
        flps_err rc = transport_recv(srv, 100, &rx);
        if (rc == FLPS_OK) {
            transport_rx_release(rx);
            break;
        }
        /* A message sent into the lost connection is lost, as with
         * ZeroMQ: send again until one arrives. */
        cr_assert_eq(send_msg(cli, to_srv, 3, ok, 1), FLPS_OK);
        cr_assert_lt(i, 49, "no message after the reconnection");
    }
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}

/* Shards and clients on threads of one process, as the training test runs
 * them: each client sends NR requests to each shard and waits for every
 * reply; a shard echoes what it gets. */
enum { TH_SHARDS = 2, TH_CLIENTS = 4, TH_ROUNDS = 200 };

typedef struct th_shard {
    transport *t;
    char bound[256];
    volatile int stop;
    unsigned served;
} th_shard;

static void *th_shard_main(void *arg)
{
    th_shard *s = arg;

    while (!s->stop) {
        transport_rx *rx = NULL;
        transport_frame f[2];
        proto_buf *b;
        if (transport_recv(s->t, 20, &rx) != FLPS_OK)
            continue;
        b = proto_buf_create(rx->frames[0].len + rx->frames[1].len);
        memcpy(proto_buf_data(b), rx->frames[0].data, rx->frames[0].len);
        memcpy((char *)proto_buf_data(b) + rx->frames[0].len,
               rx->frames[1].data, rx->frames[1].len);
        f[0] = (transport_frame){b, 0, rx->frames[0].len};
        f[1] = (transport_frame){b, rx->frames[0].len, rx->frames[1].len};
        if (transport_send(s->t, rx->peer, f, 2) == FLPS_OK)
            s->served++;
        proto_buf_release(b);
        transport_rx_release(rx);
    }
    return NULL;
}

typedef struct th_client {
    th_shard *shards;
    int id;
    int failed;
    char why[256];
} th_client;

static void *th_client_main(void *arg)
{
    th_client *c = arg;
    transport *t = NULL;
    transport_rdma_options o;
    uint32_t peer[TH_SHARDS];

    transport_rdma_options_init(&o);
    o.verbs = rdma_emu_verbs();
    o.max_message_bytes = 1 << 20;
    o.credits = 4;
    if (transport_rdma_create(&o, &t, c->why, sizeof(c->why)) != FLPS_OK) {
        c->failed = 1;
        return NULL;
    }
    for (int s = 0; s < TH_SHARDS; s++)
        transport_connect(t, c->shards[s].bound, &peer[s]);
    for (unsigned r = 0; r < TH_ROUNDS && !c->failed; r++) {
        uint32_t got = 0;
        for (int s = 0; s < TH_SHARDS; s++) {
            /* Frame 0: who and which round; frame 1 large now and then. */
            size_t big = r % 50 == 7 ? 300000 : 200 + r;
            proto_buf *b = proto_buf_create(8 + big);
            uint32_t *w = proto_buf_data(b);
            transport_frame f[2] = {{b, 0, 8}, {b, 8, big}};
            w[0] = (uint32_t)c->id;
            w[1] = r;
            memset((char *)w + 8, (int)(r & 0xff), big);
            if (transport_send(t, peer[s], f, 2) != FLPS_OK) {
                snprintf(c->why, sizeof(c->why), "send: %.240s", t->errmsg);
                c->failed = 1;
            }
            proto_buf_release(b);
        }
        while (!c->failed && got != (1u << TH_SHARDS) - 1) {
            transport_rx *rx = NULL;
            const uint32_t *w;
            if (transport_recv(t, WAIT_MS, &rx) != FLPS_OK) {
                snprintf(c->why, sizeof(c->why), "no reply in round %u", r);
                c->failed = 1;
                break;
            }
            w = rx->frames[0].data;
            if (rx->nframes != 2 || w[0] != (uint32_t)c->id || w[1] != r ||
                ((const unsigned char *)rx->frames[1].data)[0] != (r & 0xff)) {
                snprintf(c->why, sizeof(c->why), "wrong reply in round %u", r);
                c->failed = 1;
            }
            got |= 1u << rx->peer;
            transport_rx_release(rx);
        }
    }
    transport_destroy(t);
    return NULL;
}

Test(transport_rdma, shards_and_clients_on_threads_of_one_process,
     .timeout = 120)
{
    th_shard shards[TH_SHARDS];
    th_client clients[TH_CLIENTS];
    pthread_t st[TH_SHARDS], ct[TH_CLIENTS];

    for (int s = 0; s < TH_SHARDS; s++) {
        memset(&shards[s], 0, sizeof(shards[s]));
        shards[s].t =
            make_listener(1 << 20, 4, shards[s].bound, sizeof(shards[s].bound));
        pthread_create(&st[s], NULL, th_shard_main, &shards[s]);
    }
    for (int c = 0; c < TH_CLIENTS; c++) {
        memset(&clients[c], 0, sizeof(clients[c]));
        clients[c].shards = shards;
        clients[c].id = c;
        pthread_create(&ct[c], NULL, th_client_main, &clients[c]);
    }
    for (int c = 0; c < TH_CLIENTS; c++)
        pthread_join(ct[c], NULL);
    for (int s = 0; s < TH_SHARDS; s++) {
        shards[s].stop = 1;
        pthread_join(st[s], NULL);
    }
    for (int c = 0; c < TH_CLIENTS; c++)
        cr_assert_not(clients[c].failed, "client %d: %s", c, clients[c].why);
    for (int s = 0; s < TH_SHARDS; s++) {
        cr_assert_eq(shards[s].served, TH_CLIENTS * TH_ROUNDS);
        transport_destroy(shards[s].t);
    }
    check_no_leaks();
}

Test(transport_rdma, connects_over_a_roce_port_by_its_routable_gid)
{
    char bound[256];
    transport *srv, *cli;
    const size_t len[] = {64, 200000};
    uint32_t to_srv;

    rdma_emu_set_roce(1);
    srv = make_listener(1 << 20, 4, bound, sizeof(bound));
    cli = make(1 << 20, 4);
    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    cr_assert_eq(send_msg(cli, to_srv, 1, len, 2), FLPS_OK, "%s", cli->errmsg);
    transport_rx_release(recv_msg(srv, 1, len, 2));
    cr_assert_eq(rdma_emu_last_sgid_index(), 2, "the RoCE v2 IPv4 entry");
    transport_destroy(cli);
    transport_destroy(srv);
    check_no_leaks();
}
