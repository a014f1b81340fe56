/* The Redis connection over TLS (rediss://, scheduler/rtls.c) against a
 * real redis-server serving TLS only: commands, binary and large values,
 * scripts and passwords; the server's certificate verified (a wrong CA, no
 * CA, a host the certificate does not name, a plain port: each a clear
 * error within the timeout); and reconnection after a restart. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "redis_tls_fixture.h"
#include "scheduler/rconn.h"

static test_redis_tls srv;

static void start(const char *password)
{
    cr_assert_eq(test_redis_tls_start(&srv, password), 0,
                 "redis-server with TLS did not start (is the openssl CLI "
                 "installed? scripts/deps.sh)");
    setenv("FLPS_REDIS_CA", srv.ca, 1);
}

static void stop(void)
{
    unsetenv("FLPS_REDIS_CA");
    unsetenv("FLPS_REDIS_PASSWORD");
    test_redis_tls_stop(&srv);
}

TestSuite(rconn_tls, .fini = stop, .timeout = 60);

Test(rconn_tls, parses_rediss_urls_and_hides_their_passwords)
{
    char host[64], pw[64], err[256], shown[128];
    int port, db;

    cr_assert_eq(rconn_parse_url("rediss://:s3cret@10.1.2.3:6380/2", host,
                                 sizeof(host), &port, pw, sizeof(pw), &db, err,
                                 sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_str_eq(host, "10.1.2.3");
    cr_assert_eq(port, 6380);
    cr_assert_str_eq(pw, "s3cret");
    cr_assert(rconn_url_is_tls("rediss://h"));
    cr_assert(!rconn_url_is_tls("redis://h"));
    rconn_redact_url("rediss://app:s3cret@h:6380", shown, sizeof(shown));
    cr_assert_str_eq(shown, "rediss://app:***@h:6380");
    cr_assert_eq(rconn_parse_url("redisss://h", host, sizeof(host), &port, pw,
                                 sizeof(pw), &db, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert(strstr(err, "rediss://") != NULL, "%s", err);
}

Test(rconn_tls, runs_commands_scripts_and_large_values_over_tls)
{
    static const char lua[] = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
    const size_t big_len = 3u << 20; /* many TLS records each way */
    char *big = malloc(big_len);
    const char *argv[] = {"SET", "big", big};
    size_t argvlen[] = {3, 3, big_len};
    const char *sargv[] = {"n", "5"};
    rconn *rc = NULL;
    redisReply *r = NULL;
    int id;

    start("");
    for (size_t i = 0; i < big_len; i++)
        big[i] = (char)(i * 7 + (i >> 11));
    cr_assert_eq(rconn_create(srv.r.url, 2000, &rc), FLPS_OK);
    cr_assert_eq(rconn_cmd(rc, &r, "SET %s %b", "k", "v\0w", (size_t)3),
                 FLPS_OK, "%s", rconn_error(rc));
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(rc, &r, "GET k"), FLPS_OK, "%s", rconn_error(rc));
    cr_assert_eq(r->len, 3);
    cr_assert_eq(memcmp(r->str, "v\0w", 3), 0);
    freeReplyObject(r);

    cr_assert_eq(rconn_cmdv(rc, &r, 3, argv, argvlen), FLPS_OK, "%s",
                 rconn_error(rc));
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(rc, &r, "GET big"), FLPS_OK, "%s", rconn_error(rc));
    cr_assert_eq((size_t)r->len, big_len);
    cr_assert_eq(memcmp(r->str, big, big_len), 0, "3 MiB came back intact");
    freeReplyObject(r);

    cr_assert_eq(rconn_cmd(rc, &r, "LPUSH"), FLPS_EREMOTE);
    cr_assert(strstr(rconn_error(rc), "wrong number of arguments") != NULL,
              "%s", rconn_error(rc));

    cr_assert_eq(rconn_script_add(rc, lua, &id), FLPS_OK);
    cr_assert_eq(rconn_script_run(rc, &r, id, 1, 2, sargv, NULL), FLPS_OK, "%s",
                 rconn_error(rc));
    cr_assert_eq(r->integer, 5);
    freeReplyObject(r);
    rconn_destroy(rc);
    free(big);
}

Test(rconn_tls, authenticates_over_tls_and_refuses_a_wrong_password)
{
    char url[128];
    rconn *rc = NULL;

    start("tls-pass-0123");
    snprintf(url, sizeof(url), "rediss://:tls-pass-0123@127.0.0.1:%d",
             srv.r.port);
    cr_assert_eq(rconn_create(url, 2000, &rc), FLPS_OK);
    cr_assert_eq(rconn_ping(rc), FLPS_OK, "%s", rconn_error(rc));
    rconn_destroy(rc);

    setenv("FLPS_REDIS_PASSWORD", "not-it-Qx7", 1);
    cr_assert_eq(rconn_create(srv.r.url, 2000, &rc), FLPS_OK);
    cr_assert_eq(rconn_ping(rc), FLPS_ECONFIG);
    cr_assert(strstr(rconn_error(rc), "refused the credentials") != NULL, "%s",
              rconn_error(rc));
    cr_assert(strstr(rconn_error(rc), "Qx7") == NULL,
              "no password in the message");
    rconn_destroy(rc);
}

/* rconn_ping of url fails with want and a message holding each of the
 * parts; within the connection's timeout, with margin. */
static void expect_refusal(const char *url, flps_err want, const char *part1,
                           const char *part2)
{
    rconn *rc = NULL;
    double t0 = flps_mono_s(), took;
    flps_err got;

    cr_assert_eq(rconn_create(url, 1000, &rc), FLPS_OK);
    got = rconn_ping(rc);
    took = flps_mono_s() - t0;
    cr_assert_eq(got, want, "%s: %s (%s)", url, flps_strerror(got),
                 rconn_error(rc));
    cr_assert(strstr(rconn_error(rc), part1) != NULL, "%s", rconn_error(rc));
    cr_assert(part2 == NULL || strstr(rconn_error(rc), part2) != NULL, "%s",
              rconn_error(rc));
    /* Two tries (at create and at the ping), each bounded by 1 s: no hang. */
    cr_assert_lt(took, 20.0, "took %.1f s", took);
    /* It stays refused, with the same reason. */
    cr_assert_eq(rconn_ping(rc), want);
    rconn_destroy(rc);
}

Test(rconn_tls, a_wrong_ca_is_a_clear_error_that_says_what_to_set)
{
    start("");
    setenv("FLPS_REDIS_CA", srv.other_ca, 1);
    expect_refusal(srv.r.url, FLPS_ECONFIG, "does not verify",
                   "is FLPS_REDIS_CA (--redis-ca) the CA");
    unsetenv("FLPS_REDIS_CA");
    /* The system's CAs do not know the test CA either. */
    expect_refusal(srv.r.url, FLPS_ECONFIG, "does not verify",
                   "set FLPS_REDIS_CA (or --redis-ca)");
    setenv("FLPS_REDIS_CA", "/nonexistent/ca.pem", 1);
    expect_refusal(srv.r.url, FLPS_ECONFIG,
                   "cannot load the CA certificates from /nonexistent/ca.pem",
                   NULL);
}

Test(rconn_tls, a_host_the_certificate_does_not_name_is_refused)
{
    char url[64];

    start("");
    /* The same server, reached at an address its certificate lacks. */
    snprintf(url, sizeof(url), "rediss://127.0.0.2:%d", srv.r.port);
    expect_refusal(url, FLPS_ECONFIG, "does not verify", "mismatch");
}

Test(rconn_tls, rediss_to_a_plain_port_fails_within_the_timeout)
{
    test_redis plain;
    char url[64];

    cr_assert_eq(test_redis_start(&plain), 0);
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", plain.port);
    expect_refusal(url, FLPS_EIO, "tls-port", NULL);
    test_redis_stop(&plain);
}

Test(rconn_tls, reconnects_after_a_redis_restart_over_tls)
{
    rconn *rc = NULL;
    redisReply *r = NULL;
    flps_err err;
    int ok = 0;

    start("");
    cr_assert_eq(rconn_create(srv.r.url, 2000, &rc), FLPS_OK);
    cr_assert_eq(rconn_cmd(rc, &r, "INCR n"), FLPS_OK, "%s", rconn_error(rc));
    freeReplyObject(r);

    /* Idle across the restart: the closed session is noticed before the
     * next command, which then runs once on the new server. */
    cr_assert_eq(test_redis_tls_restart(&srv), 0);
    cr_assert_eq(rconn_cmd(rc, &r, "INCR n"), FLPS_OK,
                 "the first command after the restart failed: %s",
                 rconn_error(rc));
    cr_assert_eq(r->integer, 1, "INCR ran once on the new (empty) server");
    freeReplyObject(r);

    /* Down: commands fail with a reason; back: they work again. */
    kill(srv.r.pid, SIGKILL);
    waitpid(srv.r.pid, NULL, 0);
    srv.r.pid = 0;
    err = rconn_ping(rc);
    cr_assert_eq(err, FLPS_EIO, "%s", flps_strerror(err));
    cr_assert(strstr(rconn_error(rc), "127.0.0.1") != NULL, "%s",
              rconn_error(rc));
    cr_assert_eq(test_redis_tls_exec(&srv), 0);
    for (int i = 0; i < 3 && !ok; i++)
        ok = rconn_ping(rc) == FLPS_OK;
    cr_assert(ok, "no reconnect: %s", rconn_error(rc));
    cr_assert_eq(rconn_cmd(rc, &r, "INCR n"), FLPS_OK, "%s", rconn_error(rc));
    cr_assert_eq(r->integer, 1);
    freeReplyObject(r);
    rconn_destroy(rc);
}
