/* Tests for proto/zmq_conn.c: a ZeroMQ connector whose handshake the
 * listener refuses (no credentials, another mechanism, another secret or
 * key) learns so within seconds: transport_recv returns FLPS_EAUTH once,
 * with what was wrong and what to do, and transport_send to that peer
 * returns FLPS_EAUTH instead of blocking forever. A member, and a
 * connector with nothing to connect to, are not refused. */
#include "proto/transport.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "proto/creds.h"

/* A refusal is known within this (the handshake is local). */
#define REFUSED_WITHIN_S 5.0

/* Send one 8-byte message from t to peer: its transport_send result. */
static flps_err send_one(transport *t, uint32_t peer)
{
    proto_buf *b = proto_buf_create(8);
    transport_frame f;
    flps_err rc;

    cr_assert_not_null(b);
    memset(proto_buf_data(b), 7, 8);
    f.buf = b;
    f.off = 0;
    f.len = 8;
    rc = transport_send(t, peer, &f, 1);
    proto_buf_release(b);
    return rc;
}

/* A ZeroMQ transport with credentials c (NULL: none), as a listener
 * (server) or a connector. */
static transport *with_creds(const flps_creds *c, int server)
{
    transport *t;
    char why[256];

    cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
    if (c != NULL)
        cr_assert_eq(transport_set_credentials(t, c, server, why, sizeof(why)),
                     FLPS_OK, "%s", why);
    return t;
}

/* A listener with credentials srv on loopback; its address in bound. */
static transport *listener(const flps_creds *srv, char *bound, size_t len)
{
    transport *t = with_creds(srv, 1);

    cr_assert_eq(transport_listen(t, "tcp://127.0.0.1:0", bound, len), FLPS_OK,
                 "%s", t->errmsg);
    return t;
}

static transport *connector(const flps_creds *cli, const char *bound,
                            uint32_t *peer)
{
    transport *t = with_creds(cli, 0);

    cr_assert_eq(transport_connect(t, bound, peer), FLPS_OK, "%s", t->errmsg);
    return t;
}

/* Serve srv (its ZAP handler answers handshakes in its receive loop) and
 * read cli until cli says something other than a timeout, for
 * REFUSED_WITHIN_S at most: what it said. The listener must get nothing. */
static flps_err cli_result(transport *srv, transport *cli)
{
    const double until = flps_mono_s() + REFUSED_WITHIN_S;
    flps_err rc = FLPS_ETIMEDOUT;

    while (rc == FLPS_ETIMEDOUT && flps_mono_s() < until) {
        transport_rx *rx = NULL;
        flps_err s = transport_recv(srv, 10, &rx);
        transport_rx_release(rx);
        cr_assert_eq(s, FLPS_ETIMEDOUT, "the listener got %s", flps_errname(s));
        rx = NULL;
        rc = transport_recv(cli, 10, &rx);
        transport_rx_release(rx);
    }
    return rc;
}

/* A connector with credentials cli (NULL: none) to a listener with srv is
 * refused: FLPS_EAUTH from recv within seconds (once: not again), whose
 * message holds want and says what to do; from send (before, if it knew
 * already, and after, at once). */
static void expect_refused(const flps_creds *srv, const flps_creds *cli,
                           const char *want)
{
    char bound[256];
    transport *s = listener(srv, bound, sizeof(bound));
    uint32_t peer;
    transport *c = connector(cli, bound, &peer);
    flps_err rc = send_one(c, peer);
    double t0;

    cr_assert(rc == FLPS_OK || rc == FLPS_EAUTH, "%s: %s", flps_errname(rc),
              c->errmsg);
    rc = cli_result(s, c);
    cr_assert_eq(rc, FLPS_EAUTH, "%s: %s", flps_errname(rc), c->errmsg);
    cr_assert_neq(strstr(c->errmsg, want), NULL, "%s", c->errmsg);
    cr_assert_neq(strstr(c->errmsg, "FLPS_CREDENTIALS_FILE"), NULL, "%s",
                  c->errmsg);
    cr_assert_neq(strstr(c->errmsg, bound), NULL, "%s", c->errmsg);
    t0 = flps_mono_s();
    for (int i = 0; i < 3; i++)
        cr_assert_eq(send_one(c, peer), FLPS_EAUTH);
    cr_assert_lt(flps_mono_s() - t0, 1.0, "a refused send waited");
    {
        transport_rx *rx = NULL;
        flps_err r2 = transport_recv(c, 100, &rx);
        cr_assert_eq(r2, FLPS_ETIMEDOUT, "the refusal said twice: %s: %s",
                     flps_errname(r2), c->errmsg);
    }
    transport_destroy(c);
    transport_destroy(s);
}

static flps_creds secret_creds(char hexdigit)
{
    flps_creds c;

    memset(&c, 0, sizeof(c));
    memset(c.secret, hexdigit, 64);
    return c;
}

static flps_creds curve_creds(void)
{
    flps_creds c;
    char why[256];

    cr_assert_eq(creds_generate(1, &c, why, sizeof(why)), FLPS_OK, "%s", why);
    return c;
}

Test(zmq_refused, plain_a_connector_without_credentials_gets_eauth)
{
    const flps_creds job = secret_creds('a');

    expect_refused(&job, NULL, "this client has none");
}

Test(zmq_refused, plain_a_connector_with_another_secret_gets_eauth)
{
    const flps_creds job = secret_creds('a'), other = secret_creds('b');

    expect_refused(&job, &other, "secret (PLAIN)");
}

/* A CURVE job's listener refuses each of: no credentials, a secret only
 * (PLAIN), another client key, another job's server key (which it cannot
 * even read: it closes each try). */
Test(zmq_refused, curve_every_connector_without_the_jobs_keys_gets_eauth)
{
    flps_creds job, plain, other_client, other_job;

    if (!creds_have_curve())
        cr_skip_test("this libzmq has no CURVE");
    job = curve_creds();
    plain = secret_creds('c');
    other_client = curve_creds();
    memcpy(other_client.server_public, job.server_public,
           sizeof(job.server_public));
    other_job = curve_creds();
    expect_refused(&job, NULL, "this client has none");
    expect_refused(&job, &plain, "PLAIN");
    expect_refused(&job, &other_client, "CURVE client key");
    expect_refused(&job, &other_job, "CURVE");
}

Test(zmq_refused, a_member_and_a_connector_to_nowhere_are_not_refused)
{
    const flps_creds job = secret_creds('a');
    char bound[256];
    transport *s = listener(&job, bound, sizeof(bound)), *c, *nowhere;
    uint32_t peer, p2;
    transport_rx *rx = NULL;
    flps_err rc = FLPS_ETIMEDOUT;

    c = connector(&job, bound, &peer);
    cr_assert_eq(send_one(c, peer), FLPS_OK, "%s", c->errmsg);
    for (int i = 0; i < 500 && rc == FLPS_ETIMEDOUT; i++)
        rc = transport_recv(s, 10, &rx);
    cr_assert_eq(rc, FLPS_OK, "%s", s->errmsg);
    transport_rx_release(rx);
    cr_assert_eq(transport_recv(c, 200, &rx), FLPS_ETIMEDOUT);
    transport_destroy(c);
    transport_destroy(s);

    /* Nothing listens there: the message waits for a connection. */
    nowhere = connector(&job, "tcp://127.0.0.1:9", &p2);
    cr_assert_eq(send_one(nowhere, p2), FLPS_OK, "%s", nowhere->errmsg);
    cr_assert_eq(transport_recv(nowhere, 500, &rx), FLPS_ETIMEDOUT);
    transport_destroy(nowhere);
}
