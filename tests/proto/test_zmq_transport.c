/* Tests for proto/zmq_transport.c: multipart messages over loopback both
 * ways with every received frame 4-byte aligned, small unaligned frames
 * realigned inside the reused receive record or on their own, large ones
 * left in ZeroMQ's message, and records that outlive their transport. */
#include "proto/transport.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS()                                                      \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,                        \
                 "memory leaked (see the LeakSanitizer report)")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define WAIT_MS 10000

typedef struct pair {
    transport *srv, *cli;
    uint32_t to_srv; /* the connector's peer number of the listener */
} pair;

static void pair_open(pair *p)
{
    char bound[256];

    memset(p, 0, sizeof(*p));
    cr_assert_eq(transport_zmq_create(&p->srv), FLPS_OK);
    cr_assert_eq(transport_zmq_create(&p->cli), FLPS_OK);
    cr_assert_eq(
        transport_listen(p->srv, "tcp://127.0.0.1:0", bound, sizeof(bound)),
        FLPS_OK, "%s", p->srv->errmsg);
    cr_assert_eq(transport_connect(p->cli, bound, &p->to_srv), FLPS_OK, "%s",
                 p->cli->errmsg);
}

static void pair_close(pair *p)
{
    transport_destroy(p->cli);
    transport_destroy(p->srv);
}

/* Byte j of frame i of message m: a pattern any misplacement breaks. */
static unsigned char pattern(unsigned m, size_t i, size_t j)
{
    return (unsigned char)(m * 131u + i * 31u + j * 7u + (j >> 8));
}

/* Send one message of nf frames of the given lengths from t to peer. */
static void send_msg(transport *t, uint32_t peer, unsigned m, const size_t *len,
                     size_t nf)
{
    transport_frame f[PROTO_MAX_FRAMES + 1];

    cr_assert_leq(nf, PROTO_MAX_FRAMES + 1);
    for (size_t i = 0; i < nf; i++) {
        proto_buf *b = proto_buf_create(len[i]);
        unsigned char *d = proto_buf_data(b);
        cr_assert_not_null(b);
        for (size_t j = 0; j < len[i]; j++)
            d[j] = pattern(m, i, j);
        f[i].buf = b;
        f[i].off = 0;
        f[i].len = len[i];
    }
    cr_assert_eq(transport_send(t, peer, f, nf), FLPS_OK, "%s", t->errmsg);
    for (size_t i = 0; i < nf; i++)
        proto_buf_release(f[i].buf);
}

/* Receive one message on t and check it is message m with these frames,
 * each 4-byte aligned. Returns it (caller releases). */
static transport_rx *recv_msg(transport *t, unsigned m, const size_t *len,
                              size_t nf)
{
    transport_rx *rx = NULL;

    cr_assert_eq(transport_recv(t, WAIT_MS, &rx), FLPS_OK, "%s", t->errmsg);
    cr_assert_eq(rx->nframes, nf);
    for (size_t i = 0; i < nf; i++) {
        const unsigned char *d = rx->frames[i].data;
        cr_assert_eq(rx->frames[i].len, len[i], "message %u frame %zu", m, i);
        cr_assert_eq((uintptr_t)d & 3u, 0,
                     "message %u frame %zu (%zu bytes) is not aligned", m, i,
                     len[i]);
        for (size_t j = 0; j < len[i]; j++)
            if (d[j] != pattern(m, i, j))
                cr_assert_fail("message %u frame %zu byte %zu differs", m, i,
                               j);
    }
    return rx;
}

Test(zmq_transport, delivers_multipart_messages_both_ways_with_aligned_frames)
{
    /* Odd lengths put the small frames at odd offsets of ZeroMQ's batch
     * buffer; 20000 bytes is beyond it and gets its own block. */
    const size_t len[] = {37, 101, 6, 20000};
    pair p;
    transport_rx *rx;
    uint32_t peer;

    pair_open(&p);
    send_msg(p.cli, p.to_srv, 1, len, 4);
    rx = recv_msg(p.srv, 1, len, 4);
    peer = rx->peer;
    transport_rx_release(rx);
    send_msg(p.srv, peer, 2, len, 4);
    rx = recv_msg(p.cli, 2, len, 4);
    cr_assert_eq(rx->peer, p.to_srv);
    transport_rx_release(rx);
    cr_assert_eq(p.srv->stats.msgs_recv, 1);
    cr_assert_eq(p.cli->stats.msgs_recv, 1);
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport, realigns_small_frames_beyond_the_records_own_room)
{
    /* Three unaligned frames of 700 bytes: the first fits the record's
     * room, the others need copies of their own. */
    const size_t len[] = {3, 701, 699, 701};
    pair p;

    pair_open(&p);
    for (unsigned m = 0; m < 5; m++) {
        send_msg(p.cli, p.to_srv, m, len, 4);
        transport_rx_release(recv_msg(p.srv, m, len, 4));
    }
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport, reused_receive_records_carry_no_frames_of_earlier_messages)
{
    /* Many messages of changing shapes through the same few records, some
     * held while others arrive (as a shard holds pushes). */
    pair p;
    transport_rx *held[8];

    pair_open(&p);
    for (unsigned m = 0; m < 200; m++) {
        size_t nf = 1 + m % 4, len[4];
        for (size_t i = 0; i < nf; i++)
            len[i] = (m * 13 + i * 101) % (i == 3 ? 30000 : 900) + 1;
        send_msg(p.cli, p.to_srv, m, len, nf);
        held[m % 8] = recv_msg(p.srv, m, len, nf);
        if (m % 8 == 7)
            for (int h = 0; h < 8; h++)
                transport_rx_release(held[h]);
    }
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport, a_received_message_outlives_its_transport)
{
    const size_t len[] = {5, 64, 9000};
    pair p;
    transport_rx *rx, *rx2;

    pair_open(&p);
    send_msg(p.cli, p.to_srv, 7, len, 3);
    send_msg(p.cli, p.to_srv, 8, len, 3);
    rx = recv_msg(p.srv, 7, len, 3);
    rx2 = recv_msg(p.srv, 8, len, 3);
    transport_rx_release(rx2); /* one back in the cache before destroy */
    pair_close(&p);
    /* Still readable, and its release frees what the transport left. */
    cr_assert_eq(((const unsigned char *)rx->frames[2].data)[8999],
                 pattern(7, 2, 8999));
    transport_rx_release(rx);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport, drops_a_message_with_too_many_frames)
{
    const size_t len[] = {4, 4, 4, 4, 4, 4};
    const size_t ok[] = {8};
    pair p;
    transport_rx *rx = NULL;

    pair_open(&p);
    /* PROTO_MAX_FRAMES + 1 is the most a message may have (the ROUTER's
     * routing id aside). */
    {
        transport_frame f[6];
        for (int i = 0; i < 6; i++) {
            f[i].buf = proto_buf_create(len[i]);
            memset(proto_buf_data(f[i].buf), 0, len[i]);
            f[i].off = 0;
            f[i].len = len[i];
        }
        cr_assert_eq(transport_send(p.cli, p.to_srv, f, 6), FLPS_OK);
        for (int i = 0; i < 6; i++)
            proto_buf_release(f[i].buf);
    }
    send_msg(p.cli, p.to_srv, 3, ok, 1);
    cr_assert_eq(transport_recv(p.srv, WAIT_MS, &rx), FLPS_EPROTO);
    transport_rx_release(recv_msg(p.srv, 3, ok, 1));
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

/* ---- a listener's limits (issue 12, finding 4) ---- */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

static void pair_open_limited(pair *p, const transport_limits *lim, char *bound,
                              size_t len)
{
    memset(p, 0, sizeof(*p));
    cr_assert_eq(transport_zmq_create(&p->srv), FLPS_OK);
    cr_assert_eq(transport_zmq_set_limits(p->srv, lim), FLPS_OK);
    cr_assert_eq(transport_listen(p->srv, "tcp://127.0.0.1:0", bound, len),
                 FLPS_OK, "%s", p->srv->errmsg);
    cr_assert_eq(transport_zmq_create(&p->cli), FLPS_OK);
    cr_assert_eq(transport_connect(p->cli, bound, &p->to_srv), FLPS_OK);
}

/* The client says hello; returns the listener's peer number for it. */
static uint32_t hello(pair *p, transport *cli, uint32_t to_srv)
{
    const size_t one[] = {8};
    transport_rx *rx;
    uint32_t peer;

    send_msg(cli, to_srv, 1, one, 1);
    rx = recv_msg(p->srv, 1, one, 1);
    peer = rx->peer;
    transport_rx_release(rx);
    return peer;
}

Test(zmq_transport,
     replies_to_a_peer_that_does_not_read_are_dropped_not_buffered)
{
    const transport_limits lim = {16, TRANSPORT_MAX_FRAME_DEFAULT, 64, 0, 0, 0,
                                  0};
    const size_t big = 1u << 20;
    char bound[256];
    pair p;
    proto_buf *b;
    transport_frame f;
    uint32_t peer, accepted = 0;
    transport *reader;
    uint32_t to_reader;
    void *zctx, *deaf;
    int hwm1 = 1, rbuf = 65536;
    transport_rx *rx;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    /* A peer that does not read at all: a DEALER whose ZeroMQ takes one
     * message in and leaves the rest in TCP. */
    zctx = zmq_ctx_new();
    deaf = zmq_socket(zctx, ZMQ_DEALER);
    cr_assert_eq(zmq_setsockopt(deaf, ZMQ_RCVHWM, &hwm1, sizeof(hwm1)), 0);
    cr_assert_eq(zmq_setsockopt(deaf, ZMQ_RCVBUF, &rbuf, sizeof(rbuf)), 0);
    cr_assert_eq(zmq_connect(deaf, bound), 0);
    cr_assert_eq(zmq_send(deaf, "hello", 5, 0), 5);
    cr_assert_eq(transport_recv(p.srv, WAIT_MS, &rx), FLPS_OK);
    peer = rx->peer;
    transport_rx_release(rx);
    b = proto_buf_create(big);
    memset(proto_buf_data(b), 7, big);
    f.buf = b;
    f.off = 0;
    f.len = big;
    /* 1000 MiB to a client that never reads. */
    for (int i = 0; i < 1000; i++) {
        flps_err rc = transport_send(p.srv, peer, &f, 1);
        cr_assert(rc == FLPS_OK || rc == FLPS_ECLOSED, "%s", flps_errname(rc));
        accepted += rc == FLPS_OK;
        if (rc != FLPS_OK)
            usleep(1000); /* let the I/O thread take what it can */
    }
    cr_assert_eq(p.srv->stats.msgs_dropped, 1000u - accepted);
    cr_assert_lt(accepted, 48u,
                 "accepted %u MiB for a peer that does not "
                 "read",
                 accepted);
    usleep(100 * 1000);
    /* What the transport still holds: at most the high-water mark and the
     * one message its I/O thread is writing (the kernel has copies of the
     * rest). */
    cr_assert_leq(proto_buf_refs(b), 1u + 16u + 2u, "%zu references",
                  proto_buf_refs(b));
    /* The legitimate client is still served. */
    cr_assert_eq(transport_zmq_create(&reader), FLPS_OK);
    cr_assert_eq(transport_connect(reader, bound, &to_reader), FLPS_OK);
    {
        const size_t one[] = {8};
        uint32_t rp = hello(&p, reader, to_reader);
        send_msg(p.srv, rp, 2, one, 1);
        transport_rx_release(recv_msg(reader, 2, one, 1));
    }
    proto_buf_release(b);
    transport_destroy(reader);
    zmq_close(deaf);
    zmq_ctx_term(zctx);
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport, a_message_with_too_many_frames_names_its_peer_to_answer)
{
    const size_t len[] = {4, 4, 4, 4, 4, 4};
    const size_t ok[] = {8};
    pair p;
    transport_rx *rx = NULL;
    uint32_t peer;

    pair_open(&p);
    peer = hello(&p, p.cli, p.to_srv);
    {
        transport_frame f[6];
        for (int i = 0; i < 6; i++) {
            f[i].buf = proto_buf_create(len[i]);
            memset(proto_buf_data(f[i].buf), 0, len[i]);
            f[i].off = 0;
            f[i].len = len[i];
        }
        cr_assert_eq(transport_send(p.cli, p.to_srv, f, 6), FLPS_OK);
        for (int i = 0; i < 6; i++)
            proto_buf_release(f[i].buf);
    }
    cr_assert_eq(transport_recv(p.srv, WAIT_MS, &rx), FLPS_EPROTO);
    cr_assert_eq(p.srv->refused_peer, peer);
    cr_assert_neq(strstr(p.srv->errmsg, "more than 4 frames"), NULL, "%s",
                  p.srv->errmsg);
    /* The answer reaches the sender. */
    send_msg(p.srv, p.srv->refused_peer, 4, ok, 1);
    transport_rx_release(recv_msg(p.cli, 4, ok, 1));
    pair_close(&p);
}

/* Receive for up to ms, counting messages (released at once). */
static int drain_for(transport *t, int ms)
{
    int n = 0;
    transport_rx *rx;

    for (int i = 0; i < ms / 10; i++) {
        while (transport_recv(t, 10, &rx) == FLPS_OK) {
            transport_rx_release(rx);
            n++;
        }
    }
    return n;
}

Test(zmq_transport, connections_beyond_the_cap_are_closed_and_the_first_served)
{
    const transport_limits lim = {64, TRANSPORT_MAX_FRAME_DEFAULT, 4, 0, 0, 0,
                                  0};
    const size_t one[] = {8};
    char bound[256];
    pair p;
    uint32_t peer;
    int raw[20];
    struct sockaddr_in a;
    const char *port;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    peer = hello(&p, p.cli, p.to_srv);
    port = strrchr(bound, ':');
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(port + 1));
    a.sin_addr.s_addr = htonl(0x7f000001);
    /* 20 idle connections that never speak ZMTP. */
    for (int i = 0; i < 20; i++) {
        raw[i] = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert_geq(raw[i], 0);
        cr_assert_eq(connect(raw[i], (struct sockaddr *)&a, sizeof(a)), 0);
    }
    (void)drain_for(p.srv, 300);
    cr_assert_eq(p.srv->stats.conns_refused, 17,
                 "4 connections allowed, the client's and 3 idle ones");
    /* The client that came first is still served, both ways. */
    send_msg(p.srv, peer, 5, one, 1);
    transport_rx_release(recv_msg(p.cli, 5, one, 1));
    cr_assert_eq(hello(&p, p.cli, p.to_srv), peer);
    for (int i = 0; i < 20; i++)
        close(raw[i]);
    pair_close(&p);
}

Test(zmq_transport, a_peer_that_disconnects_leaves_no_routing_state)
{
    const transport_limits lim = {64, TRANSPORT_MAX_FRAME_DEFAULT, 2, 0, 0, 0,
                                  0};
    const size_t one[] = {8};
    char bound[256];
    pair p;
    uint32_t first;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    first = hello(&p, p.cli, p.to_srv);
    /* 50 clients one after the other through a table of 2 peers: each
     * one's slot is freed when it goes, or the third would be refused. */
    for (int i = 0; i < 50; i++) {
        transport *c;
        uint32_t to, peer;
        cr_assert_eq(transport_zmq_create(&c), FLPS_OK);
        cr_assert_eq(transport_connect(c, bound, &to), FLPS_OK);
        peer = hello(&p, c, to);
        cr_assert_neq(peer, first);
        send_msg(p.srv, peer, 6, one, 1);
        transport_rx_release(recv_msg(c, 6, one, 1));
        transport_destroy(c);
        /* A reply to a peer that left is refused, not queued. */
        for (int k = 0; k < 100; k++) {
            transport_rx *rx;
            if (transport_recv(p.srv, 10, &rx) == FLPS_OK)
                transport_rx_release(rx);
            if (p.srv->stats.conns_refused == 0) {
                transport_frame f = {NULL, 0, 0};
                proto_buf *b = proto_buf_create(8);
                f.buf = b;
                f.len = 8;
                flps_err rc = transport_send(p.srv, peer, &f, 1);
                proto_buf_release(b);
                if (rc == FLPS_ECLOSED)
                    break;
            }
        }
    }
    cr_assert_eq(p.srv->stats.conns_refused, 0);
    send_msg(p.srv, first, 7, one, 1);
    transport_rx_release(recv_msg(p.cli, 7, one, 1));
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

#include <signal.h>
#include <sys/time.h>

static void on_alarm(int sig)
{
    (void)sig;
}

Test(zmq_transport, a_signal_during_a_listeners_wait_is_a_timeout_not_an_error)
{
    pair p;
    transport_rx *rx = NULL;
    struct sigaction sa, old;
    struct itimerval tv = {{0, 0}, {0, 100 * 1000}};

    pair_open(&p);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART: the poll is interrupted */
    cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);
    cr_assert_eq(setitimer(ITIMER_REAL, &tv, NULL), 0);
    /* A daemon's SIGTERM arrives like this: its loop must see a timeout
     * and check its stop flag, not a failed receive. */
    cr_assert_eq(transport_recv(p.srv, 5000, &rx), FLPS_ETIMEDOUT, "%s",
                 p.srv->errmsg);
    sigaction(SIGALRM, &old, NULL);
    pair_close(&p);
}

/* ---- frames larger than a part, and the bound before a handshake
 * (issue 22, finding 1) ---- */

Test(zmq_transport, frames_larger_than_a_part_arrive_whole_and_aligned)
{
    const size_t len[] = {TRANSPORT_ZMQ_PART_BYTES + 1, 0,
                          TRANSPORT_ZMQ_PART_BYTES, (3u << 20) + 5};
    const size_t back[] = {(2u << 20) + 3};
    pair p;
    uint32_t peer;

    pair_open(&p);
    peer = hello(&p, p.cli, p.to_srv);
    for (unsigned m = 10; m < 13; m++) {
        send_msg(p.cli, p.to_srv, m, len, 4);
        transport_rx_release(recv_msg(p.srv, m, len, 4));
    }
    /* A listener sends whole frames; its connector takes them so. */
    send_msg(p.srv, peer, 13, back, 1);
    transport_rx_release(recv_msg(p.cli, 13, back, 1));
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport, a_first_frame_that_starts_like_a_cut_message_arrives_as_is)
{
    static const unsigned char magic[8] = {0, 'f', 'l', 'p', 's', 'Z', 'c', 1};
    pair p;
    transport_frame f;
    transport_rx *rx = NULL;

    pair_open(&p);
    (void)hello(&p, p.cli, p.to_srv);
    f.buf = proto_buf_create(20);
    memset(proto_buf_data(f.buf), 0, 20);
    memcpy(proto_buf_data(f.buf), magic, sizeof(magic));
    ((unsigned char *)proto_buf_data(f.buf))[8] = 1; /* "one frame" */
    f.off = 0;
    f.len = 20;
    cr_assert_eq(transport_send(p.cli, p.to_srv, &f, 1), FLPS_OK);
    cr_assert_eq(transport_recv(p.srv, WAIT_MS, &rx), FLPS_OK, "%s",
                 p.srv->errmsg);
    cr_assert_eq(rx->nframes, 1);
    cr_assert_eq(rx->frames[0].len, 20);
    cr_assert_eq(memcmp(rx->frames[0].data, proto_buf_data(f.buf), 20), 0);
    transport_rx_release(rx);
    proto_buf_release(f.buf);
    pair_close(&p);
}

Test(zmq_transport,
     a_frame_over_the_limit_is_refused_unread_and_its_peer_answered)
{
    const transport_limits lim = {64, 100000, 8, 0, 0, 0, 0};
    const size_t big[] = {16, 100001};
    const size_t ok[] = {8};
    char bound[256];
    pair p;
    uint32_t peer;
    transport_rx *rx = NULL;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    peer = hello(&p, p.cli, p.to_srv);
    send_msg(p.cli, p.to_srv, 20, big, 2);
    cr_assert_eq(transport_recv(p.srv, WAIT_MS, &rx), FLPS_EPROTO);
    cr_assert_eq(p.srv->refused_peer, peer);
    cr_assert_neq(strstr(p.srv->errmsg, "limit of 100000 bytes"), NULL, "%s",
                  p.srv->errmsg);
    send_msg(p.srv, peer, 21, ok, 1);
    transport_rx_release(recv_msg(p.cli, 21, ok, 1));
    /* The connection is still served. */
    cr_assert_eq(hello(&p, p.cli, p.to_srv), peer);
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport,
     bounded_socket_buffers_still_carry_a_message_larger_than_them)
{
    const transport_limits lim = {64,  TRANSPORT_MAX_FRAME_DEFAULT, 8, 0, 0, 0,
                                  4096};
    const size_t big[] = {16, 1u << 20};
    char bound[256];
    pair p;
    uint32_t peer;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    peer = hello(&p, p.cli, p.to_srv);
    /* Both ways: the buffers bound what is in flight, not what is sent. */
    send_msg(p.cli, p.to_srv, 22, big, 2);
    transport_rx_release(recv_msg(p.srv, 22, big, 2));
    send_msg(p.srv, peer, 23, big, 2);
    transport_rx_release(recv_msg(p.cli, 23, big, 2));
    pair_close(&p);
    ASSERT_NO_LEAKS();
}

Test(zmq_transport, a_negative_socket_buffer_is_refused)
{
    transport_limits lim = {64, TRANSPORT_MAX_FRAME_DEFAULT, 8, 0, 0, 0, -1};
    transport *t = NULL;

    cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
    cr_assert_eq(transport_zmq_set_limits(t, &lim), FLPS_EINVAL);
    lim.socket_buffer = 0;
    cr_assert_eq(transport_zmq_set_limits(t, &lim), FLPS_OK);
    transport_destroy(t);
}

/* A raw ZeroMQ DEALER (no limit of its own) on the listener at bound. */
static void *raw_dealer(void **ctx, const char *bound)
{
    void *s;
    int zero = 0;

    *ctx = zmq_ctx_new();
    s = zmq_socket(*ctx, ZMQ_DEALER);
    cr_assert_not_null(s);
    cr_assert_eq(zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero)), 0);
    cr_assert_eq(zmq_connect(s, bound), 0);
    return s;
}

Test(zmq_transport, a_part_beyond_the_wire_bound_closes_its_connection_unread)
{
    const transport_limits lim = {64, TRANSPORT_MAX_FRAME_DEFAULT, 8, 0, 0, 0,
                                  0};
    const size_t big = TRANSPORT_ZMQ_WIRE_MAX + 1;
    char bound[256];
    pair p;
    void *zctx, *raw;
    char *junk = calloc(1, big);
    transport_rx *rx = NULL;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    (void)hello(&p, p.cli, p.to_srv);
    raw = raw_dealer(&zctx, bound);
    cr_assert_eq(zmq_send(raw, junk, big, 0), (int)big);
    /* Nothing arrives, and the connection ends before its first message:
     * counted as not admitted. */
    for (int i = 0; i < 100 && p.srv->stats.conns_not_admitted == 0; i++)
        cr_assert_eq(transport_recv(p.srv, 20, &rx), FLPS_ETIMEDOUT);
    cr_assert_geq(p.srv->stats.conns_not_admitted, 1);
    cr_assert_eq(p.srv->stats.msgs_recv, 1, "only the hello");
    zmq_close(raw);
    zmq_ctx_term(zctx);
    free(junk);
    pair_close(&p);
}

Test(zmq_transport, a_cut_message_whose_parts_do_not_add_up_is_refused)
{
    static const unsigned char head[20] = {0, 'f', 'l', 'p', 's', 'Z', 'c',
                                           1, 1,   0,   0,   0,   100, 0,
                                           0, 0,   0,   0,   0,   0};
    char bound[256], part[50] = {0};
    const transport_limits lim = {64, TRANSPORT_MAX_FRAME_DEFAULT, 8, 0, 0, 0,
                                  0};
    pair p;
    void *zctx, *raw;
    transport_rx *rx = NULL;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    raw = raw_dealer(&zctx, bound);
    /* One frame of 100 bytes, said the header; 50 came. */
    cr_assert_eq(zmq_send(raw, head, sizeof(head), ZMQ_SNDMORE),
                 (int)sizeof(head));
    cr_assert_eq(zmq_send(raw, part, sizeof(part), 0), (int)sizeof(part));
    cr_assert_eq(transport_recv(p.srv, WAIT_MS, &rx), FLPS_EPROTO);
    cr_assert_neq(strstr(p.srv->errmsg, "do not add up"), NULL, "%s",
                  p.srv->errmsg);
    /* And 150: one part too many. */
    cr_assert_eq(zmq_send(raw, head, sizeof(head), ZMQ_SNDMORE),
                 (int)sizeof(head));
    cr_assert_eq(zmq_send(raw, part, sizeof(part), ZMQ_SNDMORE),
                 (int)sizeof(part));
    cr_assert_eq(zmq_send(raw, part, sizeof(part), ZMQ_SNDMORE),
                 (int)sizeof(part));
    cr_assert_eq(zmq_send(raw, part, sizeof(part), 0), (int)sizeof(part));
    cr_assert_eq(transport_recv(p.srv, WAIT_MS, &rx), FLPS_EPROTO);
    zmq_close(raw);
    zmq_ctx_term(zctx);
    /* The listener reads on. */
    (void)hello(&p, p.cli, p.to_srv);
    pair_close(&p);
}

/* ---- handshakes that fail: each counted once as refused ---- */

#include "proto/creds.h"

#define PAIR_SECRET                                                            \
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* A listener and a connector that authenticate with the job's secret
 * (PLAIN), the listener with limits lim. */
static void pair_open_secret(pair *p, const transport_limits *lim, char *bound,
                             size_t len)
{
    flps_creds c;
    char why[256];

    memset(p, 0, sizeof(*p));
    memset(&c, 0, sizeof(c));
    snprintf(c.secret, sizeof(c.secret), "%s", PAIR_SECRET);
    cr_assert_eq(transport_zmq_create(&p->srv), FLPS_OK);
    cr_assert_eq(transport_zmq_set_limits(p->srv, lim), FLPS_OK);
    cr_assert_eq(transport_set_credentials(p->srv, &c, 1, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(transport_listen(p->srv, "tcp://127.0.0.1:0", bound, len),
                 FLPS_OK, "%s", p->srv->errmsg);
    cr_assert_eq(transport_zmq_create(&p->cli), FLPS_OK);
    cr_assert_eq(transport_set_credentials(p->cli, &c, 0, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(transport_connect(p->cli, bound, &p->to_srv), FLPS_OK);
}

/* A plain TCP connection to the listener at bound. */
static int raw_tcp(const char *bound)
{
    const char *port = strrchr(bound, ':');
    const struct sockaddr_in a = {
        .sin_family = AF_INET,
        .sin_port = htons((uint16_t)atoi(port != NULL ? port + 1 : "0")),
        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_not_null(port, "%s", bound);
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, (const struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Serve t until it has counted want connections not admitted (or 10 s),
 * then a little longer for the events still on their way. */
static void not_admitted_reaching(transport *t, uint64_t want)
{
    for (int i = 0; i < 1000 && t->stats.conns_not_admitted < want; i++)
        (void)drain_for(t, 10);
    cr_assert_eq(t->stats.conns_not_admitted, want);
    (void)drain_for(t, 200);
}

Test(zmq_transport, a_handshake_cut_short_is_a_refused_handshake_counted_once)
{
    /* One connection waiting per address: a second one closes the first. */
    const transport_limits lim = {64, TRANSPORT_MAX_FRAME_DEFAULT, 8, 0, 1, 0,
                                  0};
    static const unsigned char signature[10] = {0xff, 0, 0, 0, 0,
                                                0,    0, 0, 1, 0x7f};
    char bound[256];
    pair p;
    int quiet, spoke, closed;

    pair_open_secret(&p, &lim, bound, sizeof(bound));
    (void)hello(&p, p.cli, p.to_srv); /* a member: admitted */

    /* A stranger that closes in the middle of its greeting, as one without
     * the job's mechanism does when it has read the shard's. */
    spoke = raw_tcp(bound);
    cr_assert_eq(write(spoke, signature, sizeof(signature)),
                 (ssize_t)sizeof(signature));
    (void)drain_for(p.srv, 100);
    close(spoke);
    not_admitted_reaching(p.srv, 1);
    cr_assert_eq(p.srv->stats.auth_refused, 1);

    /* One that closes without a word. */
    quiet = raw_tcp(bound);
    (void)drain_for(p.srv, 100);
    close(quiet);
    not_admitted_reaching(p.srv, 2);
    cr_assert_eq(p.srv->stats.auth_refused, 2);

    /* One the gate closes to make room: counted by the gate, not as a
     * refused handshake; the one it made room for is, when it ends. */
    closed = raw_tcp(bound);
    (void)drain_for(p.srv, 100);
    quiet = raw_tcp(bound);
    for (int i = 0; i < 1000 && p.srv->stats.conns_addr_closed == 0; i++)
        (void)drain_for(p.srv, 10);
    cr_assert_eq(p.srv->stats.conns_addr_closed, 1);
    close(quiet);
    close(closed);
    not_admitted_reaching(p.srv, 3);
    cr_assert_eq(p.srv->stats.auth_refused, 3);
    cr_assert_eq(p.srv->stats.conns_addr_closed, 1);

    /* The member is still served. */
    (void)hello(&p, p.cli, p.to_srv);
    cr_assert_eq(p.srv->stats.auth_refused, 3);
    pair_close(&p);
}

Test(zmq_transport,
     without_credentials_a_connection_that_ends_is_only_unadmitted)
{
    const transport_limits lim = {64, TRANSPORT_MAX_FRAME_DEFAULT, 8, 0, 0, 0,
                                  0};
    char bound[256];
    pair p;
    int quiet;

    pair_open_limited(&p, &lim, bound, sizeof(bound));
    (void)hello(&p, p.cli, p.to_srv);
    quiet = raw_tcp(bound);
    (void)drain_for(p.srv, 100);
    close(quiet);
    not_admitted_reaching(p.srv, 1);
    cr_assert_eq(p.srv->stats.auth_refused, 0, "nothing to authenticate");
    pair_close(&p);
}
