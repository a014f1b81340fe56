/* The transport conformance suite: one set of behaviours that every
 * implementation of proto/transport.h must have, written once and run
 * against every kind of transport in kinds[] (ZeroMQ always; the RDMA
 * transport over the emulated NIC when the build has it; over the real
 * verbs only where a device with an active port exists). A kind that
 * cannot run here skips each of its tests and says why.
 *
 * Every transport is driven by its own thread, as in a real job (a shard's
 * loop, a worker's client): a transport is used by one thread at a time
 * and may make progress only inside its calls. Threads other than the
 * test's own never assert (Criterion's asserts jump out of the test);
 * they write the first failure into their fail[] for the test to report. */
#include "proto/transport.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/proto/transport_kinds.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define CONF_LEAKS() __lsan_do_recoverable_leak_check()
#else
#define CONF_LEAKS() 0
#endif

/* The longest any single wait may take before the test calls it a hang
 * (each test also has a Criterion timeout). Not a timing assertion: a
 * healthy transport answers in milliseconds. */
#define WAIT_MS 20000
#define FAILLEN 512
#define LISTENER_FROM 0x80000000u /* "from" of what the listener sends */

/* Run one behaviour against one kind, then check that nothing it made is
 * left: registered memory, queue pairs, heap (under LeakSanitizer). */
static void conf_run(int kind, void (*body)(const conf_kind *k))
{
    const conf_kind *k = &kinds[kind];
    char why[1024];

    if (k->skip != NULL && k->skip(why, sizeof(why)) != NULL) {
        /* stderr, not cr_log_warn: a warning makes Criterion 2.4 exit 1
         * even though every test that ran passed. */
        fprintf(stderr, "%s: skipped: %s\n", k->name, why);
        cr_skip_test("%s: %s", k->name, why);
    }
    if (k->reset != NULL)
        k->reset();
    body(k);
    if (k->live != NULL) {
        char what[512];
        cr_assert_eq(k->live(what, sizeof(what)), 0,
                     "%s: alive after every transport was destroyed: %s",
                     k->name, what);
    }
    cr_assert_eq(CONF_LEAKS(), 0,
                 "%s: memory leaked (see the LeakSanitizer report)", k->name);
}

/* One behaviour, one Criterion test per kind: suites conformance_zmq,
 * conformance_rdma_emu, conformance_rdma_real. */
#define CONFORMANCE(test, timeout_s)                                           \
    static void test(const conf_kind *k);                                      \
    Test(conformance_zmq, test, .timeout = (timeout_s))                        \
    {                                                                          \
        conf_run(KIND_ZMQ, test);                                              \
    }                                                                          \
    Test(conformance_rdma_emu, test, .timeout = (timeout_s))                   \
    {                                                                          \
        conf_run(KIND_RDMA_EMU, test);                                         \
    }                                                                          \
    Test(conformance_rdma_real, test, .timeout = (timeout_s))                  \
    {                                                                          \
        conf_run(KIND_RDMA_REAL, test);                                        \
    }                                                                          \
    static void test(const conf_kind *k)

/* ---- messages ---- */

static int failf(char *fail, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Keep the first failure; returns 0 so checks can `return failf(...)`. */
static int failf(char *fail, const char *fmt, ...)
{
    va_list ap;

    if (fail[0] != '\0')
        return 0;
    va_start(ap, fmt);
    vsnprintf(fail, FAILLEN, fmt, ap);
    va_end(ap);
    return 0;
}

/* Byte j of frame i of message m: a pattern any misplacement breaks. */
static unsigned char pattern(uint32_t m, size_t i, size_t j)
{
    return (unsigned char)(m * 131u + i * 31u + j * 7u + (j >> 8) +
                           (j >> 16) * 3u);
}

/* A buffer of off + len bytes holding pattern(m, i, .) from off. */
static proto_buf *pattern_buf(uint32_t m, size_t i, size_t len, size_t off)
{
    proto_buf *b = proto_buf_create(off + len);
    unsigned char *d;

    if (b == NULL)
        return NULL;
    d = proto_buf_data(b);
    memset(d, 0xEE, off);
    for (size_t j = 0; j < len; j++)
        d[off + j] = pattern(m, i, j);
    return b;
}

/* Send message m of nf frames, frame i len[i] bytes of pattern(m, i, .)
 * placed at offset off of its own buffer. */
static flps_err send_pattern(transport *t, uint32_t peer, uint32_t m,
                             const size_t *len, size_t nf, size_t off)
{
    transport_frame f[PROTO_MAX_FRAMES + 2];
    flps_err rc = FLPS_ENOMEM;
    size_t made;

    for (made = 0; made < nf; made++) {
        f[made].buf = pattern_buf(m, made, len[made], off);
        if (f[made].buf == NULL)
            goto out;
        f[made].off = off;
        f[made].len = len[made];
    }
    rc = transport_send(t, peer, f, nf);
out:
    for (size_t i = 0; i < made; i++)
        proto_buf_release(f[i].buf);
    return rc;
}

/* Does rx hold message m of these frames, each 4-byte aligned? */
static int check_pattern(const transport_rx *rx, uint32_t m, const size_t *len,
                         size_t nf, char *fail)
{
    if (rx->nframes != nf)
        return failf(fail, "message %u: %zu frames, expected %zu", m,
                     rx->nframes, nf);
    for (size_t i = 0; i < nf; i++) {
        const unsigned char *d = rx->frames[i].data;
        if (rx->frames[i].len != len[i])
            return failf(fail, "message %u frame %zu: %zu bytes, expected %zu",
                         m, i, rx->frames[i].len, len[i]);
        if (len[i] > 0 && ((uintptr_t)d & 3u) != 0)
            return failf(fail,
                         "message %u frame %zu (%zu bytes) is not "
                         "4-byte aligned",
                         m, i, len[i]);
        for (size_t j = 0; j < len[i]; j++)
            if (d[j] != pattern(m, i, j))
                return failf(fail,
                             "message %u frame %zu byte %zu: %u, expected %u",
                             m, i, j, d[j], pattern(m, i, j));
    }
    return 1;
}

/* Frame 0 of a numbered message; frame 1 is its payload. */
typedef struct conf_hdr {
    uint32_t from, seq, tag, pad;
} conf_hdr;

enum { TAG_DATA = 1, TAG_HELLO, TAG_END };

/* Payload length and pattern of a numbered message: they vary with the
 * sender and the number, across ZeroMQ's 64-byte copy threshold. */
static size_t numbered_len(uint32_t from, uint32_t seq)
{
    return (from * 7u + seq * 37u) % 513u;
}

static uint32_t numbered_m(uint32_t from, uint32_t seq)
{
    return from * 2654435761u ^ seq;
}

static flps_err send_numbered(transport *t, uint32_t peer, uint32_t from,
                              uint32_t seq, uint32_t tag)
{
    transport_frame f[2];
    conf_hdr h = {from, seq, tag, 0};
    size_t plen = numbered_len(from, seq);
    flps_err rc;

    f[0].buf = proto_buf_create(sizeof(h));
    f[1].buf = pattern_buf(numbered_m(from, seq), 1, plen, 0);
    if (f[0].buf == NULL || f[1].buf == NULL) {
        proto_buf_release(f[0].buf);
        proto_buf_release(f[1].buf);
        return FLPS_ENOMEM;
    }
    memcpy(proto_buf_data(f[0].buf), &h, sizeof(h));
    f[0].off = f[1].off = 0;
    f[0].len = sizeof(h);
    f[1].len = plen;
    rc = transport_send(t, peer, f, 2);
    proto_buf_release(f[0].buf);
    proto_buf_release(f[1].buf);
    return rc;
}

/* Read the header of a numbered message and check its payload. */
static int check_numbered(const transport_rx *rx, conf_hdr *h, char *fail)
{
    size_t plen;
    const unsigned char *d;
    uint32_t m;

    if (rx->nframes != 2 || rx->frames[0].len != sizeof(*h))
        return failf(fail,
                     "a numbered message came as %zu frames, frame 0 "
                     "of %zu bytes",
                     rx->nframes, rx->nframes ? rx->frames[0].len : 0);
    memcpy(h, rx->frames[0].data, sizeof(*h));
    plen = numbered_len(h->from, h->seq);
    m = numbered_m(h->from, h->seq);
    if (rx->frames[1].len != plen)
        return failf(fail,
                     "message %u from %#x: payload of %zu bytes, "
                     "expected %zu",
                     h->seq, h->from, rx->frames[1].len, plen);
    d = rx->frames[1].data;
    for (size_t j = 0; j < plen; j++)
        if (d[j] != pattern(m, 1, j))
            return failf(fail, "message %u from %#x: payload byte %zu differs",
                         h->seq, h->from, j);
    return 1;
}

/* Wait up to WAIT_MS for one message (a receive may return early). */
static flps_err recv_wait(transport *t, transport_rx **rx)
{
    const double until = flps_mono_s() + WAIT_MS / 1000.0;
    flps_err rc;

    do
        rc = transport_recv(t, 200, rx);
    while (rc == FLPS_ETIMEDOUT && flps_mono_s() < until);
    return rc;
}

/* ---- listeners and connectors ---- */

static void opts_default(conf_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->lim.send_hwm = TRANSPORT_SEND_HWM_DEFAULT;
    o->lim.max_frame_bytes = TRANSPORT_MAX_FRAME_DEFAULT;
    o->lim.max_peers = TRANSPORT_MAX_PEERS_DEFAULT;
    o->max_message_bytes = 1u << 20;
    o->credits = 0;
}

static transport *listener_open(const conf_kind *k, const conf_opts *o,
                                char *bound, size_t len)
{
    transport *t = NULL;
    char why[256] = "";

    cr_assert_eq(k->create(o, 1, &t, why, sizeof(why)), FLPS_OK,
                 "%s: cannot create a listener: %s", k->name, why);
    cr_assert_eq(transport_listen(t, "tcp://127.0.0.1:0", bound, len), FLPS_OK,
                 "%s: listen: %s", k->name, t->errmsg);
    cr_assert_eq(strncmp(bound, "tcp://", 6), 0,
                 "%s: listen wrote \"%s\", not a tcp:// address", k->name,
                 bound);
    return t;
}

/* A connector, run by its own thread. */
typedef struct conn {
    const conf_kind *k;
    const conf_opts *o;
    const char *bound;
    uint32_t id;
    transport *t;
    uint32_t to_srv;
    pthread_t th;
    char fail[FAILLEN];
    /* What particular tests exchange with the thread. */
    atomic_int go;
    atomic_int done;
    uint32_t *seqs; /* back-pressure: what it received */
    uint32_t nseqs;
    uint32_t *sent; /* back-pressure: what its sends accepted */
    uint32_t nsent;
} conn;

static int conn_open(conn *c)
{
    char why[256] = "";
    flps_err rc = c->k->create(c->o, 0, &c->t, why, sizeof(why));

    if (rc != FLPS_OK)
        return failf(c->fail, "connector %u: cannot create: %s", c->id, why);
    rc = transport_connect(c->t, c->bound, &c->to_srv);
    if (rc != FLPS_OK)
        return failf(c->fail, "connector %u: connect to %s: %s (%s)", c->id,
                     c->bound, flps_strerror(rc), c->t->errmsg);
    return 1;
}

static void conn_close(conn *c)
{
    transport_destroy(c->t);
    c->t = NULL;
}

static void conns_start(conn *c, size_t n, const conf_kind *k,
                        const conf_opts *o, const char *bound,
                        void *(*fn)(void *))
{
    for (size_t i = 0; i < n; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].k = k;
        c[i].o = o;
        c[i].bound = bound;
        c[i].id = (uint32_t)i;
        atomic_init(&c[i].go, 0);
        atomic_init(&c[i].done, 0);
        cr_assert_eq(pthread_create(&c[i].th, NULL, fn, &c[i]), 0);
    }
}

/* Join the connectors; then report the listener's failure (lfail) or
 * the first connector's. */
static void conns_join(conn *c, size_t n, const conf_kind *k, const char *lfail)
{
    for (size_t i = 0; i < n; i++)
        pthread_join(c[i].th, NULL);
    cr_assert_eq(lfail[0], '\0', "%s: listener: %s", k->name, lfail);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(c[i].fail[0], '\0', "%s: connector %zu: %s", k->name, i,
                     c[i].fail);
}

/* ---- ordering ---- */

#define ORDER_PEERS 4
#define ORDER_MSGS 5000

/* Messages a connector has unanswered at most: well below a connector's
 * queue (an RDMA connector bounds its own at the high-water mark, where
 * ZeroMQ's has none), so what is tested here is the order, not a burst;
 * a slow receiver is the back-pressure test's. */
#define ORDER_WINDOW 512

/* Send ORDER_MSGS numbered messages, at most ORDER_WINDOW ahead of the
 * replies, and read every reply, each in the order it was sent. */
static void *order_peer(void *arg)
{
    conn *c = arg;
    uint32_t sent = 0, got = 0;

    if (!conn_open(c))
        return NULL;
    while (got < ORDER_MSGS) {
        transport_rx *rx;
        conf_hdr h;
        flps_err rc;

        while (sent < ORDER_MSGS && sent - got < ORDER_WINDOW) {
            rc = send_numbered(c->t, c->to_srv, c->id, sent, TAG_DATA);
            if (rc != FLPS_OK) {
                failf(c->fail,
                      "send of message %u (%u unanswered) to a reading "
                      "listener: %s (%s)",
                      sent, sent - got, flps_strerror(rc), c->t->errmsg);
                goto out;
            }
            sent++;
        }
        rc = recv_wait(c->t, &rx);
        if (rc != FLPS_OK) {
            failf(c->fail, "reply %u of %u: %s (%s)", got, ORDER_MSGS,
                  flps_strerror(rc), c->t->errmsg);
            goto out;
        }
        if (check_numbered(rx, &h, c->fail) &&
            (h.from != (LISTENER_FROM | c->id) || h.seq != got))
            failf(c->fail, "reply %u: got message %u for connector %#x", got,
                  h.seq, h.from);
        if (rx->peer != c->to_srv)
            failf(c->fail, "reply from peer %u, the listener is %u", rx->peer,
                  c->to_srv);
        transport_rx_release(rx);
        if (c->fail[0] != '\0')
            goto out;
        got++;
    }
out:
    conn_close(c);
    return NULL;
}

CONFORMANCE(keeps_every_peers_messages_in_order_both_ways, 240)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c[ORDER_PEERS];
    uint32_t next[ORDER_PEERS] = {0}, peer_of[ORDER_PEERS];
    transport *l;

    opts_default(&o);
    o.lim.send_hwm = 0; /* every reply must be queued, none dropped */
    l = listener_open(k, &o, bound, sizeof(bound));
    conns_start(c, ORDER_PEERS, k, &o, bound, order_peer);
    for (uint32_t n = 0; n < ORDER_PEERS * ORDER_MSGS && !fail[0]; n++) {
        transport_rx *rx;
        conf_hdr h;
        flps_err rc = recv_wait(l, &rx);
        if (rc != FLPS_OK) {
            failf(fail, "message %u of %u: %s (%s)", n,
                  ORDER_PEERS * ORDER_MSGS, flps_strerror(rc), l->errmsg);
            break;
        }
        if (check_numbered(rx, &h, fail)) {
            if (h.from >= ORDER_PEERS)
                failf(fail, "a message from connector %u", h.from);
            else if (h.seq != next[h.from])
                failf(fail, "connector %u: message %u came when %u was next",
                      h.from, h.seq, next[h.from]);
            else if (h.seq > 0 && peer_of[h.from] != rx->peer)
                failf(fail, "connector %u was peer %u, now peer %u", h.from,
                      peer_of[h.from], rx->peer);
        }
        if (!fail[0]) {
            peer_of[h.from] = rx->peer;
            next[h.from]++;
            /* Answer at once, as a shard does, while others still send. */
            rc = send_numbered(l, rx->peer, LISTENER_FROM | h.from, h.seq,
                               TAG_DATA);
            if (rc != FLPS_OK)
                failf(fail, "reply %u to connector %u: %s (%s)", h.seq, h.from,
                      flps_strerror(rc), l->errmsg);
        }
        transport_rx_release(rx);
    }
    conns_join(c, ORDER_PEERS, k, fail);
    cr_assert_eq(l->stats.msgs_recv, ORDER_PEERS * ORDER_MSGS);
    cr_assert_eq(l->stats.msgs_sent, ORDER_PEERS * ORDER_MSGS);
    cr_assert_eq(l->stats.msgs_dropped, 0);
    transport_destroy(l);
}

/* ---- multipart frames ---- */

/* Frame lengths: empty, tiny, odd, around 4 KiB and 1 MiB. */
static const size_t shape_len[] = {0,    1,    3,     4,        4095,
                                   4096, 4097, 65537, 1u << 20, (1u << 20) + 1};
#define NSHAPE_LEN (sizeof(shape_len) / sizeof(shape_len[0]))
#define NSHAPES (PROTO_MAX_FRAMES * NSHAPE_LEN)

/* Shape s: its frame count and lengths, and the offset of the frames in
 * their buffers (the transport must send from off, not from 0). */
static size_t shape_of(size_t s, size_t *len, size_t *off)
{
    size_t nf = 1 + s / NSHAPE_LEN, r = s % NSHAPE_LEN;

    for (size_t i = 0; i < nf; i++)
        len[i] = shape_len[(r + i * 3) % NSHAPE_LEN];
    *off = (s % 3) * 5;
    return nf;
}

/* Send every shape, then receive every shape back. */
static void *shapes_peer(void *arg)
{
    conn *c = arg;
    size_t len[PROTO_MAX_FRAMES], off;

    if (!conn_open(c))
        return NULL;
    for (size_t s = 0; s < NSHAPES; s++) {
        size_t nf = shape_of(s, len, &off);
        flps_err rc = send_pattern(c->t, c->to_srv, (uint32_t)s, len, nf, off);
        if (rc != FLPS_OK) {
            failf(c->fail, "send of shape %zu (%zu frames): %s (%s)", s, nf,
                  flps_strerror(rc), c->t->errmsg);
            goto out;
        }
    }
    for (size_t s = 0; s < NSHAPES; s++) {
        size_t nf = shape_of(s, len, &off);
        transport_rx *rx;
        flps_err rc = recv_wait(c->t, &rx);
        if (rc != FLPS_OK) {
            failf(c->fail, "shape %zu back: %s (%s)", s, flps_strerror(rc),
                  c->t->errmsg);
            goto out;
        }
        check_pattern(rx, (uint32_t)(1000 + s), len, nf, c->fail);
        transport_rx_release(rx);
        if (c->fail[0])
            goto out;
    }
out:
    conn_close(c);
    return NULL;
}

CONFORMANCE(delivers_multipart_messages_of_every_frame_count_and_size, 240)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c;
    transport *l;
    size_t len[PROTO_MAX_FRAMES], off;

    opts_default(&o);
    o.max_message_bytes = PROTO_MAX_FRAMES * ((1u << 20) + 64);
    l = listener_open(k, &o, bound, sizeof(bound));
    conns_start(&c, 1, k, &o, bound, shapes_peer);
    for (size_t s = 0; s < NSHAPES && !fail[0]; s++) {
        size_t nf = shape_of(s, len, &off);
        transport_rx *rx;
        flps_err rc = recv_wait(l, &rx);
        if (rc != FLPS_OK) {
            failf(fail, "shape %zu: %s (%s)", s, flps_strerror(rc), l->errmsg);
            break;
        }
        if (check_pattern(rx, (uint32_t)s, len, nf, fail)) {
            /* The same shape back, from other offsets. */
            rc = send_pattern(l, rx->peer, (uint32_t)(1000 + s), len, nf,
                              off + 3);
            if (rc != FLPS_OK)
                failf(fail, "shape %zu back: %s (%s)", s, flps_strerror(rc),
                      l->errmsg);
        }
        transport_rx_release(rx);
    }
    conns_join(&c, 1, k, fail);
    transport_destroy(l);
}

/* A message of no frames, or of more than a message may have
 * (PROTO_MAX_FRAMES, what proto messages use): refused at the send, or
 * dropped by the receiver with FLPS_EPROTO (a listener naming the sender
 * to answer), and the next message still comes. Both ways. */
static void *frames_peer(void *arg)
{
    conn *c = arg;
    const size_t five[] = {4, 4, 4, 4, 4};
    transport_frame none;
    transport_rx *rx;
    conf_hdr h;
    flps_err rc;

    if (!conn_open(c))
        goto out;
    memset(&none, 0, sizeof(none));
    rc = transport_send(c->t, c->to_srv, &none, 0);
    if (rc == FLPS_OK)
        failf(c->fail, "a message of no frames was accepted");
    rc = send_pattern(c->t, c->to_srv, 1, five, PROTO_MAX_FRAMES + 1, 0);
    atomic_store(&c->done, rc == FLPS_OK ? 2 : 1);
    rc = send_numbered(c->t, c->to_srv, 0, 7, TAG_DATA);
    if (rc != FLPS_OK) {
        failf(c->fail, "send after a refused message: %s", flps_strerror(rc));
        goto out;
    }
    /* The listener's answer (to the refused message or to the good one). */
    rc = recv_wait(c->t, &rx);
    if (rc != FLPS_OK) {
        failf(c->fail, "no answer: %s (%s)", flps_strerror(rc), c->t->errmsg);
        goto out;
    }
    transport_rx_release(rx);
    /* Now the listener's own message of too many frames, then a good one. */
    while (atomic_load(&c->go) < 1)
        usleep(1000);
    if (atomic_load(&c->go) == 2) {
        rc = recv_wait(c->t, &rx);
        if (rc == FLPS_OK) {
            failf(c->fail, "a message of %zu frames was received", rx->nframes);
            transport_rx_release(rx);
            goto out;
        }
        if (rc != FLPS_EPROTO) {
            failf(c->fail,
                  "a message of too many frames: %s, expected "
                  "FLPS_EPROTO",
                  flps_strerror(rc));
            goto out;
        }
    }
    rc = recv_wait(c->t, &rx);
    if (rc != FLPS_OK) {
        failf(c->fail, "the message after a refused one: %s (%s)",
              flps_strerror(rc), c->t->errmsg);
        goto out;
    }
    if (check_numbered(rx, &h, c->fail) && h.seq != 8)
        failf(c->fail, "message %u came, expected 8", h.seq);
    transport_rx_release(rx);
out:
    conn_close(c);
    if (atomic_load(&c->done) == 0)
        atomic_store(&c->done, 3);
    return NULL;
}

CONFORMANCE(refuses_messages_of_no_frames_or_too_many_both_ways, 120)
{
    const size_t five[] = {4, 4, 4, 4, 4};
    conf_opts o;
    char bound[256];
    conn c;
    transport *l;
    transport_rx *rx = NULL;
    conf_hdr h;
    char fail[FAILLEN] = "";
    uint32_t peer;
    int sent_five;
    flps_err rc;

    opts_default(&o);
    l = listener_open(k, &o, bound, sizeof(bound));
    conns_start(&c, 1, k, &o, bound, frames_peer);
    while (atomic_load(&c.done) == 0)
        usleep(1000);
    cr_assert_neq(atomic_load(&c.done), 3, "%s: connector: %s", k->name,
                  c.fail);
    sent_five = atomic_load(&c.done) == 2;
    if (sent_five) {
        rc = recv_wait(l, &rx);
        cr_assert_eq(rc, FLPS_EPROTO,
                     "%s: a message of %d frames was received: %s", k->name,
                     PROTO_MAX_FRAMES + 1, flps_strerror(rc));
        cr_assert_neq(l->refused_peer, UINT32_MAX,
                      "%s: the refusal names no peer to answer", k->name);
        cr_assert_eq(
            send_numbered(l, l->refused_peer, LISTENER_FROM, 0, TAG_DATA),
            FLPS_OK, "%s: answer to the refused peer: %s", k->name, l->errmsg);
    }
    cr_assert_eq(recv_wait(l, &rx), FLPS_OK, "%s: %s", k->name, l->errmsg);
    cr_assert(check_numbered(rx, &h, fail), "%s: %s", k->name, fail);
    cr_assert_eq(h.seq, 7);
    peer = rx->peer;
    transport_rx_release(rx);
    if (!sent_five)
        cr_assert_eq(send_numbered(l, peer, LISTENER_FROM, 0, TAG_DATA),
                     FLPS_OK);
    rc = send_pattern(l, peer, 2, five, PROTO_MAX_FRAMES + 1, 0);
    atomic_store(&c.go, rc == FLPS_OK ? 2 : 1);
    cr_assert_eq(send_numbered(l, peer, LISTENER_FROM, 8, TAG_DATA), FLPS_OK,
                 "%s: %s", k->name, l->errmsg);
    conns_join(&c, 1, k, fail);
    transport_destroy(l);
}

/* ---- large messages ---- */

static const size_t large_len[] = {(32u << 20) + 3, 100000000};
#define NLARGE (sizeof(large_len) / sizeof(large_len[0]))

static void *large_peer(void *arg)
{
    conn *c = arg;

    if (!conn_open(c))
        return NULL;
    for (size_t s = 0; s < NLARGE && !c->fail[0]; s++) {
        const size_t len[2] = {16, large_len[s]};
        transport_rx *rx;
        flps_err rc = send_pattern(c->t, c->to_srv, (uint32_t)s, len, 2, 0);
        if (rc != FLPS_OK) {
            failf(c->fail, "send of %zu bytes: %s (%s)", len[1],
                  flps_strerror(rc), c->t->errmsg);
            break;
        }
        rc = recv_wait(c->t, &rx);
        if (rc != FLPS_OK) {
            failf(c->fail, "%zu bytes back: %s (%s)", len[1], flps_strerror(rc),
                  c->t->errmsg);
            break;
        }
        check_pattern(rx, (uint32_t)(100 + s), len, 2, c->fail);
        transport_rx_release(rx);
    }
    conn_close(c);
    return NULL;
}

CONFORMANCE(carries_messages_up_to_100_MB_intact_both_ways, 300)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c;
    transport *l;

    opts_default(&o);
    o.max_message_bytes = 100000000 + 64;
    o.credits = 2;
    l = listener_open(k, &o, bound, sizeof(bound));
    conns_start(&c, 1, k, &o, bound, large_peer);
    for (size_t s = 0; s < NLARGE && !fail[0]; s++) {
        const size_t len[2] = {16, large_len[s]};
        transport_rx *rx;
        flps_err rc = recv_wait(l, &rx);
        if (rc != FLPS_OK) {
            failf(fail, "%zu bytes: %s (%s)", len[1], flps_strerror(rc),
                  l->errmsg);
            break;
        }
        if (check_pattern(rx, (uint32_t)s, len, 2, fail)) {
            uint32_t peer = rx->peer;
            /* Free the received copy before making the answer. */
            transport_rx_release(rx);
            rx = NULL;
            rc = send_pattern(l, peer, (uint32_t)(100 + s), len, 2, 0);
            if (rc != FLPS_OK)
                failf(fail, "%zu bytes back: %s (%s)", len[1],
                      flps_strerror(rc), l->errmsg);
        }
        transport_rx_release(rx);
    }
    conns_join(&c, 1, k, fail);
    transport_destroy(l);
}

/* ---- many peers ---- */

#define MANY_PEERS 24
#define MANY_ROUNDS 20

/* Rounds of one message and its reply: each reply must be this
 * connector's. */
static void *many_peer(void *arg)
{
    conn *c = arg;

    if (!conn_open(c))
        return NULL;
    for (uint32_t r = 0; r < MANY_ROUNDS && !c->fail[0]; r++) {
        transport_rx *rx;
        conf_hdr h;
        flps_err rc = send_numbered(c->t, c->to_srv, c->id, r, TAG_DATA);
        if (rc != FLPS_OK) {
            failf(c->fail, "send of round %u: %s (%s)", r, flps_strerror(rc),
                  c->t->errmsg);
            break;
        }
        rc = recv_wait(c->t, &rx);
        if (rc != FLPS_OK) {
            failf(c->fail, "reply of round %u: %s (%s)", r, flps_strerror(rc),
                  c->t->errmsg);
            break;
        }
        if (check_numbered(rx, &h, c->fail) &&
            (h.from != (LISTENER_FROM | c->id) || h.seq != r))
            failf(c->fail,
                  "round %u: got the reply of round %u meant for "
                  "connector %u",
                  r, h.seq, h.from & ~LISTENER_FROM);
        transport_rx_release(rx);
    }
    conn_close(c);
    return NULL;
}

CONFORMANCE(routes_each_reply_to_its_own_one_of_many_peers, 240)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c[MANY_PEERS];
    uint32_t peer_of[MANY_PEERS], seen[MANY_PEERS] = {0};
    transport *l;

    opts_default(&o);
    l = listener_open(k, &o, bound, sizeof(bound));
    conns_start(c, MANY_PEERS, k, &o, bound, many_peer);
    for (uint32_t n = 0; n < MANY_PEERS * MANY_ROUNDS && !fail[0]; n++) {
        transport_rx *rx;
        conf_hdr h;
        flps_err rc = recv_wait(l, &rx);
        if (rc != FLPS_OK) {
            failf(fail, "message %u of %u: %s (%s)", n,
                  MANY_PEERS * MANY_ROUNDS, flps_strerror(rc), l->errmsg);
            break;
        }
        if (check_numbered(rx, &h, fail)) {
            if (h.from >= MANY_PEERS) {
                failf(fail, "a message from connector %u", h.from);
            } else {
                if (seen[h.from]++ == 0) {
                    peer_of[h.from] = rx->peer;
                    for (uint32_t j = 0; j < MANY_PEERS; j++)
                        if (j != h.from && seen[j] && peer_of[j] == rx->peer)
                            failf(fail,
                                  "connectors %u and %u are both peer "
                                  "%u",
                                  j, h.from, rx->peer);
                } else if (peer_of[h.from] != rx->peer) {
                    failf(fail, "connector %u was peer %u, now %u", h.from,
                          peer_of[h.from], rx->peer);
                }
                rc = send_numbered(l, rx->peer, LISTENER_FROM | h.from, h.seq,
                                   TAG_DATA);
                if (rc != FLPS_OK)
                    failf(fail, "reply to connector %u: %s (%s)", h.from,
                          flps_strerror(rc), l->errmsg);
            }
        }
        transport_rx_release(rx);
    }
    conns_join(c, MANY_PEERS, k, fail);
    for (uint32_t j = 0; j < MANY_PEERS; j++)
        cr_assert_eq(seen[j], MANY_ROUNDS);
    transport_destroy(l);
}

/* ---- a peer disappearing ---- */

#define VANISH_PEERS 3
#define VANISH_ROUNDS 50
#define VANISHER 1

/* A hello and its answer; then connector VANISHER goes, and the others
 * carry on for VANISH_ROUNDS rounds. Then (go == 2) the listener is gone:
 * sends and receives must fail or time out, never hang. */
static void *vanish_peer(void *arg)
{
    conn *c = arg;
    transport_rx *rx;
    conf_hdr h;
    flps_err rc;

    if (!conn_open(c))
        return NULL;
    for (uint32_t r = 0; r <= (c->id == VANISHER ? 0 : VANISH_ROUNDS); r++) {
        rc = send_numbered(c->t, c->to_srv, c->id, r, TAG_DATA);
        if (rc != FLPS_OK) {
            failf(c->fail, "send of round %u: %s (%s)", r, flps_strerror(rc),
                  c->t->errmsg);
            goto out;
        }
        rc = recv_wait(c->t, &rx);
        if (rc != FLPS_OK) {
            failf(c->fail, "reply of round %u: %s (%s)", r, flps_strerror(rc),
                  c->t->errmsg);
            goto out;
        }
        if (check_numbered(rx, &h, c->fail) && h.seq != r)
            failf(c->fail, "round %u: reply of round %u", r, h.seq);
        transport_rx_release(rx);
        if (c->fail[0])
            goto out;
    }
    if (c->id == VANISHER)
        goto out; /* gone without a word */
    atomic_store(&c->done, 1);
    while (atomic_load(&c->go) != 2)
        usleep(1000);
    /* The listener is gone. */
    for (uint32_t r = 0; r < 3; r++) {
        rc = send_numbered(c->t, c->to_srv, c->id, 1000 + r, TAG_DATA);
        if (rc != FLPS_OK && rc != FLPS_ECLOSED)
            failf(c->fail,
                  "send to a listener that is gone: %s, expected "
                  "success (queued) or FLPS_ECLOSED",
                  flps_strerror(rc));
        rc = transport_recv(c->t, 300, &rx);
        if (rc == FLPS_OK) {
            failf(c->fail, "a message from a listener that is gone");
            transport_rx_release(rx);
        } else if (rc != FLPS_ETIMEDOUT && rc != FLPS_ECLOSED) {
            failf(c->fail,
                  "receive from a listener that is gone: %s, "
                  "expected FLPS_ETIMEDOUT or FLPS_ECLOSED",
                  flps_strerror(rc));
        }
    }
out:
    conn_close(c);
    return NULL;
}

CONFORMANCE(a_peer_that_vanishes_fails_its_sends_and_the_others_go_on, 240)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c[VANISH_PEERS];
    uint32_t peer_of[VANISH_PEERS], served = 0;
    transport *l;
    double until;
    flps_err rc = FLPS_OK;

    opts_default(&o);
    l = listener_open(k, &o, bound, sizeof(bound));
    conns_start(c, VANISH_PEERS, k, &o, bound, vanish_peer);
    /* Serve every round of those that stay and the vanisher's hello. */
    while (served < VANISH_PEERS + (VANISH_PEERS - 1) * VANISH_ROUNDS &&
           !fail[0]) {
        transport_rx *rx;
        conf_hdr h;
        rc = recv_wait(l, &rx);
        if (rc != FLPS_OK) {
            failf(fail, "after %u messages: %s (%s)", served, flps_strerror(rc),
                  l->errmsg);
            break;
        }
        if (check_numbered(rx, &h, fail) && h.from < VANISH_PEERS) {
            peer_of[h.from] = rx->peer;
            rc = send_numbered(l, rx->peer, LISTENER_FROM | h.from, h.seq,
                               TAG_DATA);
            if (rc != FLPS_OK && h.from != VANISHER)
                failf(fail, "reply to connector %u, still there: %s (%s)",
                      h.from, flps_strerror(rc), l->errmsg);
            served++;
        }
        transport_rx_release(rx);
    }
    cr_assert_eq(fail[0], '\0', "%s: listener: %s", k->name, fail);
    pthread_join(c[VANISHER].th, NULL);
    cr_assert_eq(c[VANISHER].fail[0], '\0', "%s: %s", k->name,
                 c[VANISHER].fail);
    /* Sending to the peer that went must come to fail, not hang. */
    until = flps_mono_s() + 2 * WAIT_MS / 1000.0;
    do {
        transport_rx *rx;
        flps_err r2 = transport_recv(l, 20, &rx);
        if (r2 == FLPS_OK)
            transport_rx_release(rx);
        rc = send_numbered(l, peer_of[VANISHER], LISTENER_FROM, 0, TAG_DATA);
    } while (rc == FLPS_OK && flps_mono_s() < until);
    cr_assert_neq(rc, FLPS_OK,
                  "%s: sends to a peer that vanished still succeed after %d "
                  "s",
                  k->name, 2 * WAIT_MS / 1000);
    cr_assert_eq(rc, FLPS_ECLOSED, "%s: a send to a vanished peer: %s", k->name,
                 flps_strerror(rc));
    for (uint32_t i = 0; i < VANISH_PEERS; i++)
        if (i != VANISHER)
            while (!atomic_load(&c[i].done) && !c[i].fail[0])
                usleep(1000);
    /* Now the listener goes. */
    transport_destroy(l);
    for (uint32_t i = 0; i < VANISH_PEERS; i++)
        atomic_store(&c[i].go, 2);
    for (uint32_t i = 0; i < VANISH_PEERS; i++)
        if (i != VANISHER)
            pthread_join(c[i].th, NULL);
    for (uint32_t i = 0; i < VANISH_PEERS; i++)
        cr_assert_eq(c[i].fail[0], '\0', "%s: connector %u: %s", k->name, i,
                     c[i].fail);
}

CONFORMANCE(a_listener_that_never_was_is_a_timeout_not_a_hang, 120)
{
    conf_opts o;
    char bound[256];
    transport *l, *t = NULL;
    transport_rx *rx;
    uint32_t peer;
    char why[256] = "";
    flps_err rc;

    /* An address that was a listener's and is free now. */
    opts_default(&o);
    l = listener_open(k, &o, bound, sizeof(bound));
    transport_destroy(l);
    cr_assert_eq(k->create(&o, 0, &t, why, sizeof(why)), FLPS_OK, "%s: %s",
                 k->name, why);
    rc = transport_connect(t, bound, &peer);
    if (rc == FLPS_OK) {
        rc = send_numbered(t, peer, 0, 0, TAG_DATA);
        cr_assert(rc == FLPS_OK || rc == FLPS_ECLOSED, "%s: send to nobody: %s",
                  k->name, flps_strerror(rc));
        for (int i = 0; i < 3; i++) {
            rc = transport_recv(t, 300, &rx);
            cr_assert(rc == FLPS_ETIMEDOUT || rc == FLPS_ECLOSED,
                      "%s: receive from nobody: %s", k->name,
                      flps_strerror(rc));
        }
    } else {
        cr_assert_neq(t->errmsg[0], '\0',
                      "%s: connect failed (%s) and says nothing of why",
                      k->name, flps_strerror(rc));
    }
    transport_destroy(t);
}

/* A peer whose process dies says nothing: over RDMA its queue pair just
 * stops answering (the emulated NIC makes it vanish), over ZeroMQ its
 * sockets close as transport_destroy closes them. The listener must find
 * out (its sends to that peer fail) and serve the others meanwhile. */
static void *dier_peer(void *arg)
{
    conn *c = arg;
    transport_rx *rx;
    conf_hdr h;
    flps_err rc;

    if (!conn_open(c))
        goto out;
    rc = send_numbered(c->t, c->to_srv, c->id, 0, TAG_DATA);
    if (rc == FLPS_OK)
        rc = recv_wait(c->t, &rx);
    if (rc != FLPS_OK) {
        failf(c->fail, "hello: %s (%s)", flps_strerror(rc), c->t->errmsg);
        goto out;
    }
    check_numbered(rx, &h, c->fail);
    transport_rx_release(rx);
    atomic_store(&c->done, 1);
    /* go 1: die (destroy, where the NIC cannot vanish it); go 2: the
     * dead process's resources are reclaimed. */
    while (atomic_load(&c->go) < 1)
        usleep(1000);
    if (c->k->vanish_qp == NULL)
        conn_close(c);
    while (atomic_load(&c->go) < 2)
        usleep(1000);
out:
    conn_close(c);
    atomic_store(&c->done, 2);
    return NULL;
}

/* Receive one message (up to WAIT_MS) and answer it; returns 1 when it
 * was from connector 1 (its peer number in *dier), 0 otherwise. */
static int serve_dier(transport *l, char *fail, uint32_t *dier)
{
    transport_rx *rx;
    conf_hdr h;
    int from_dier = 0;
    flps_err rc = transport_recv(l, 20, &rx);

    if (rc == FLPS_ETIMEDOUT)
        return 0;
    if (rc != FLPS_OK)
        return failf(fail, "receive: %s (%s)", flps_strerror(rc), l->errmsg);
    if (check_numbered(rx, &h, fail)) {
        from_dier = h.from == 1;
        if (from_dier)
            *dier = rx->peer;
        rc =
            send_numbered(l, rx->peer, LISTENER_FROM | h.from, h.seq, TAG_DATA);
        if (rc != FLPS_OK && !from_dier)
            failf(fail, "reply to connector %u: %s (%s)", h.from,
                  flps_strerror(rc), l->errmsg);
    }
    transport_rx_release(rx);
    return from_dier;
}

CONFORMANCE(a_peer_whose_process_dies_is_found_out_and_the_others_go_on, 240)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c[2]; /* c[0] stays, c[1] dies */
    uint32_t before[64], after[64], nbefore = 0, nafter = 0, dier = 0;
    transport *l;
    double until;
    flps_err rc = FLPS_OK;

    opts_default(&o);
    l = listener_open(k, &o, bound, sizeof(bound));
    /* The one that stays: VANISH_ROUNDS + 1 rounds. */
    conns_start(&c[0], 1, k, &o, bound, vanish_peer);
    (void)serve_dier(l, fail, &dier);
    /* The one that dies; its queue pairs are the ones made meanwhile. */
    if (k->qp_numbers != NULL)
        nbefore = (uint32_t)k->qp_numbers(before, 64);
    memset(&c[1], 0, sizeof(c[1]));
    c[1].k = k;
    c[1].o = &o;
    c[1].bound = bound;
    c[1].id = 1;
    atomic_init(&c[1].go, 0);
    atomic_init(&c[1].done, 0);
    cr_assert_eq(pthread_create(&c[1].th, NULL, dier_peer, &c[1]), 0);
    while (!fail[0] && !serve_dier(l, fail, &dier))
        ;
    while (!fail[0] && atomic_load(&c[1].done) < 1)
        usleep(1000);
    if (!fail[0] && k->qp_numbers != NULL) {
        nafter = (uint32_t)k->qp_numbers(after, 64);
        /* The first queue pair made since: the dying one's own end. */
        for (uint32_t i = 0; i < nafter; i++) {
            int old = 0;
            for (uint32_t j = 0; j < nbefore; j++)
                old |= after[i] == before[j];
            if (!old) {
                cr_assert_eq(k->vanish_qp(after[i]), 0);
                break;
            }
        }
    }
    atomic_store(&c[1].go, 1);
    /* The listener must come to refuse sends to it, never hang, while it
     * serves the one that stays. */
    until = flps_mono_s() + 2 * WAIT_MS / 1000.0;
    while (!fail[0]) {
        uint32_t again;
        if (serve_dier(l, fail, &again))
            failf(fail, "a message from the peer that died");
        if (rc == FLPS_OK)
            rc = send_numbered(l, dier, LISTENER_FROM | 1, 1, TAG_DATA);
        if ((rc != FLPS_OK && atomic_load(&c[0].done)) || flps_mono_s() > until)
            break;
    }
    cr_assert_eq(fail[0], '\0', "%s: listener: %s", k->name, fail);
    cr_assert_neq(rc, FLPS_OK,
                  "%s: sends to a peer whose process died still succeed "
                  "after %d s",
                  k->name, 2 * WAIT_MS / 1000);
    cr_assert_eq(rc, FLPS_ECLOSED, "%s: a send to a dead peer: %s", k->name,
                 flps_strerror(rc));
    cr_assert(atomic_load(&c[0].done), "%s: the one that stays was not served",
              k->name);
    atomic_store(&c[1].go, 2);
    pthread_join(c[1].th, NULL);
    transport_destroy(l);
    atomic_store(&c[0].go, 2);
    pthread_join(c[0].th, NULL);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(c[i].fail[0], '\0', "%s: connector %d: %s", k->name, i,
                     c[i].fail);
}

/* ---- back-pressure ---- */

#define BP_HWM 16
#define BP_MSGS 2000
#define BP_FRAME (64u << 10)

/* Frames of a back-pressure message: a header and one shared payload
 * buffer, so what the transport holds of it can be counted. */
static flps_err bp_send(transport *t, uint32_t peer, uint32_t seq, uint32_t tag,
                        proto_buf *payload)
{
    transport_frame f[2];
    conf_hdr h = {0, seq, tag, 0};
    flps_err rc;

    f[0].buf = proto_buf_create(sizeof(h));
    if (f[0].buf == NULL)
        return FLPS_ENOMEM;
    memcpy(proto_buf_data(f[0].buf), &h, sizeof(h));
    f[0].off = 0;
    f[0].len = sizeof(h);
    f[1].buf = payload;
    f[1].off = 0;
    f[1].len = proto_buf_len(payload);
    rc = transport_send(t, peer, f, 2);
    proto_buf_release(f[0].buf);
    return rc;
}

/* Read back-pressure messages until the end one; their numbers into
 * seqs (BP_MSGS room), checking the payload's first and last bytes. */
static uint32_t bp_read(transport *t, uint32_t *seqs, char *fail)
{
    uint32_t n = 0;

    for (;;) {
        transport_rx *rx;
        conf_hdr h;
        flps_err rc = recv_wait(t, &rx);
        if (rc != FLPS_OK) {
            failf(fail, "after %u messages: %s (%s)", n, flps_strerror(rc),
                  t->errmsg);
            return n;
        }
        if (rx->nframes != 2 || rx->frames[0].len != sizeof(h) ||
            rx->frames[1].len != BP_FRAME) {
            failf(fail, "a back-pressure message of %zu frames", rx->nframes);
            transport_rx_release(rx);
            return n;
        }
        memcpy(&h, rx->frames[0].data, sizeof(h));
        if (((const unsigned char *)rx->frames[1].data)[BP_FRAME - 1] !=
            pattern(9, 1, BP_FRAME - 1))
            failf(fail, "message %u: payload differs", h.seq);
        transport_rx_release(rx);
        if (h.tag == TAG_END)
            return n;
        if (n == BP_MSGS) {
            failf(fail, "more than the %u messages sent", BP_MSGS);
            return n;
        }
        seqs[n++] = h.seq;
    }
}

static void *bp_peer(void *arg)
{
    conn *c = arg;
    proto_buf *b = NULL;
    flps_err rc;

    if (!conn_open(c))
        goto out;
    /* Phase 1: hello, then read nothing until told to (go == 1). */
    b = pattern_buf(9, 1, BP_FRAME, 0);
    if (b == NULL) {
        failf(c->fail, "out of memory");
        goto out;
    }
    rc = bp_send(c->t, c->to_srv, 0, TAG_HELLO, b);
    if (rc != FLPS_OK) {
        failf(c->fail, "hello: %s (%s)", flps_strerror(rc), c->t->errmsg);
        goto out;
    }
    while (atomic_load(&c->go) < 1)
        usleep(1000);
    c->nseqs = bp_read(c->t, c->seqs, c->fail);
    atomic_store(&c->done, 1);
    if (c->fail[0])
        goto out;
    /* Phase 2: send as fast as it can to a listener that does not read;
     * record what was accepted. */
    for (uint32_t s = 0; s < BP_MSGS; s++) {
        rc = bp_send(c->t, c->to_srv, s, TAG_DATA, b);
        if (rc == FLPS_OK) {
            c->sent[c->nsent++] = s;
        } else if (rc != FLPS_ECLOSED) {
            failf(c->fail, "send %u to a slow listener: %s (%s)", s,
                  flps_strerror(rc), c->t->errmsg);
            goto out;
        }
    }
    /* Now the listener reads; the end message must get through. */
    atomic_store(&c->done, 2);
    {
        const double until = flps_mono_s() + WAIT_MS / 1000.0;
        do {
            transport_rx *rx;
            rc = bp_send(c->t, c->to_srv, BP_MSGS, TAG_END, b);
            if (rc == FLPS_OK)
                break;
            if (transport_recv(c->t, 10, &rx) == FLPS_OK)
                transport_rx_release(rx);
        } while (flps_mono_s() < until);
        if (rc != FLPS_OK)
            failf(c->fail, "the end message: %s (%s)", flps_strerror(rc),
                  c->t->errmsg);
    }
out:
    atomic_store(&c->done, 3);
    /* Stay until the listener has read it all (go == 3). */
    while (atomic_load(&c->go) < 3)
        usleep(1000);
    conn_close(c);
    if (b != NULL && proto_buf_refs(b) != 1)
        failf(c->fail, "%zu references to the payload left after destroy",
              proto_buf_refs(b) - 1);
    proto_buf_release(b);
    return NULL;
}

CONFORMANCE(a_slow_receiver_bounds_what_is_queued_and_loses_nothing_accepted,
            240)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c;
    transport *l;
    transport_rx *rx;
    proto_buf *b = pattern_buf(9, 1, BP_FRAME, 0);
    uint32_t peer, naccepted = 0, dropped = 0, ngot;
    uint32_t *accepted = calloc(BP_MSGS, sizeof(uint32_t));
    uint32_t *got = calloc(BP_MSGS, sizeof(uint32_t));
    uint32_t *cseqs = calloc(BP_MSGS, sizeof(uint32_t));
    uint32_t *csent = calloc(BP_MSGS, sizeof(uint32_t));
    flps_err rc;

    cr_assert(b && accepted && got && cseqs && csent);
    opts_default(&o);
    o.lim.send_hwm = BP_HWM;
    o.credits = 8;
    l = listener_open(k, &o, bound, sizeof(bound));
    memset(&c, 0, sizeof(c));
    c.k = k;
    c.o = &o;
    c.bound = bound;
    c.seqs = cseqs;
    c.sent = csent;
    atomic_init(&c.go, 0);
    atomic_init(&c.done, 0);
    cr_assert_eq(pthread_create(&c.th, NULL, bp_peer, &c), 0);
    rc = recv_wait(l, &rx);
    if (rc != FLPS_OK) {
        atomic_store(&c.go, 3);
        pthread_join(c.th, NULL);
        cr_assert_fail("%s: hello: %s (%s); connector: %s", k->name,
                       flps_strerror(rc), l->errmsg, c.fail);
    }
    peer = rx->peer;
    transport_rx_release(rx);

    /* Listener to a connector that does not read: each send is queued
     * (accepted) or dropped at the high-water mark (counted by the
     * transport); it never blocks, and what is held stays bounded. */
    for (uint32_t s = 0; s < BP_MSGS && !fail[0]; s++) {
        uint64_t before = l->stats.msgs_dropped;
        rc = bp_send(l, peer, s, TAG_DATA, b);
        if (rc == FLPS_OK) {
            accepted[naccepted++] = s;
        } else if (rc != FLPS_ECLOSED) {
            failf(fail, "send %u: %s (%s)", s, flps_strerror(rc), l->errmsg);
        } else if (l->stats.msgs_dropped != before + 1) {
            failf(fail, "send %u refused (%s) but not counted as dropped", s,
                  l->errmsg);
        } else {
            dropped++;
        }
        if (proto_buf_refs(b) > 1 + BP_HWM + 2 * (size_t)o.credits)
            failf(fail,
                  "after send %u the listener holds %zu references to "
                  "the payload; its high-water mark is %d",
                  s, proto_buf_refs(b) - 1, BP_HWM);
    }
    if (!fail[0] && l->stats.msgs_dropped != dropped)
        failf(fail, "%u sends dropped, %llu counted", dropped,
              (unsigned long long)l->stats.msgs_dropped);
    cr_log_info("%s: %u of %u sends to a connector that did not read were "
                "accepted, %u dropped at the high-water mark of %d",
                k->name, naccepted, BP_MSGS, dropped, BP_HWM);
    /* The end message must get through: let the connector read. */
    atomic_store(&c.go, 1);
    rc = FLPS_ECLOSED;
    for (uint32_t i = 0; i < 20000 && rc != FLPS_OK && !fail[0]; i++) {
        rc = bp_send(l, peer, BP_MSGS, TAG_END, b);
        if (rc != FLPS_OK)
            usleep(1000);
    }
    if (!fail[0] && rc != FLPS_OK)
        failf(fail, "the end message: %s (%s)", flps_strerror(rc), l->errmsg);
    while (atomic_load(&c.done) < 2 && !fail[0] && !c.fail[0])
        usleep(1000);
    if (!fail[0] && !c.fail[0]) {
        /* What the connector read is exactly what was accepted. */
        if (c.nseqs != naccepted)
            failf(fail, "%u sends accepted, the connector received %u",
                  naccepted, c.nseqs);
        for (uint32_t i = 0; i < naccepted && !fail[0]; i++)
            if (c.seqs[i] != accepted[i])
                failf(fail, "the connector's message %u is %u, expected %u", i,
                      c.seqs[i], accepted[i]);
        /* Connector to a listener that did not read while it sent: read
         * it all now. */
        ngot = bp_read(l, got, fail);
        if (!fail[0] && ngot != c.nsent)
            failf(fail,
                  "the connector had %u sends accepted, the listener "
                  "received %u",
                  c.nsent, ngot);
        for (uint32_t i = 0; i < ngot && !fail[0]; i++)
            if (got[i] != c.sent[i])
                failf(fail, "received message %u is %u, expected %u", i, got[i],
                      c.sent[i]);
    }
    atomic_store(&c.go, 3);
    pthread_join(c.th, NULL);
    transport_destroy(l);
    cr_assert_eq(fail[0], '\0', "%s: listener: %s", k->name, fail);
    cr_assert_eq(c.fail[0], '\0', "%s: connector: %s", k->name, c.fail);
    cr_assert_eq(proto_buf_refs(b), 1,
                 "%s: %zu references to the payload left after destroy",
                 k->name, proto_buf_refs(b) - 1);
    proto_buf_release(b);
    free(accepted);
    free(got);
    free(cseqs);
    free(csent);
}

/* ---- nothing left behind ---- */

#define LEAK_PEERS 4
#define LEAK_MSGS 50

/* Send LEAK_MSGS messages from one held buffer, read a few replies, and
 * go with the rest still in flight: every reference the transport took
 * must be back after its destroy. */
static void *leak_peer(void *arg)
{
    conn *c = arg;
    proto_buf *b = pattern_buf(9, 1, 8192, 0);

    if (b == NULL) {
        failf(c->fail, "out of memory");
        return NULL;
    }
    if (!conn_open(c))
        goto out;
    for (uint32_t s = 0; s < LEAK_MSGS; s++) {
        flps_err rc = bp_send(c->t, c->to_srv, s, TAG_DATA, b);
        if (rc != FLPS_OK) {
            failf(c->fail, "send %u: %s (%s)", s, flps_strerror(rc),
                  c->t->errmsg);
            goto out;
        }
    }
    atomic_store(&c->done, 1);
    while (atomic_load(&c->go) < 1)
        usleep(1000);
    for (int i = 0; i < 5; i++) {
        transport_rx *rx;
        if (transport_recv(c->t, 100, &rx) == FLPS_OK)
            transport_rx_release(rx);
    }
out:
    conn_close(c);
    if (proto_buf_refs(b) != 1)
        failf(c->fail, "%zu references to a sent buffer left after destroy",
              proto_buf_refs(b) - 1);
    proto_buf_release(b);
    return NULL;
}

CONFORMANCE(leaves_nothing_registered_or_referenced_when_destroyed_mid_flight,
            120)
{
    conf_opts o;
    char bound[256], fail[FAILLEN] = "";
    conn c[LEAK_PEERS];
    transport *l;
    proto_buf *lb = pattern_buf(9, 1, 8192, 0);

    cr_assert_not_null(lb);
    opts_default(&o);
    l = listener_open(k, &o, bound, sizeof(bound));
    conns_start(c, LEAK_PEERS, k, &o, bound, leak_peer);
    for (int i = 0; i < LEAK_PEERS; i++)
        while (!atomic_load(&c[i].done) && !c[i].fail[0])
            usleep(1000);
    /* Half of what was sent is read and answered; the rest stays queued. */
    for (uint32_t n = 0; n < LEAK_PEERS * LEAK_MSGS / 2 && !fail[0]; n++) {
        transport_rx *rx;
        flps_err rc = recv_wait(l, &rx);
        if (rc != FLPS_OK) {
            failf(fail, "message %u: %s (%s)", n, flps_strerror(rc), l->errmsg);
            break;
        }
        rc = bp_send(l, rx->peer, n, TAG_DATA, lb);
        if (rc != FLPS_OK && rc != FLPS_ECLOSED)
            failf(fail, "reply %u: %s (%s)", n, flps_strerror(rc), l->errmsg);
        transport_rx_release(rx);
    }
    for (int i = 0; i < LEAK_PEERS; i++)
        atomic_store(&c[i].go, 1);
    conns_join(c, LEAK_PEERS, k, fail);
    transport_destroy(l);
    cr_assert_eq(proto_buf_refs(lb), 1,
                 "%s: %zu references to a sent buffer left after destroy",
                 k->name, proto_buf_refs(lb) - 1);
    proto_buf_release(lb);
}
