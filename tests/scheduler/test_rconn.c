/* The Redis connection against a real redis-server: URL parsing, commands,
 * clear errors when Redis is away, and reconnection when it is back. */
#include <criterion/criterion.h>
#include <string.h>

#include "redis_fixture.h"
#include "scheduler/rconn.h"

Test(rconn, parses_a_full_url)
{
    char host[64], pw[64], err[256];
    int port, db;

    cr_assert_eq(rconn_parse_url("redis://:s3cret@10.1.2.3:6380/2", host,
                                 sizeof(host), &port, pw, sizeof(pw), &db, err,
                                 sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_str_eq(host, "10.1.2.3");
    cr_assert_eq(port, 6380);
    cr_assert_str_eq(pw, "s3cret");
    cr_assert_eq(db, 2);
    cr_assert_eq(rconn_parse_url("redis://localhost", host, sizeof(host), &port,
                                 pw, sizeof(pw), &db, err, sizeof(err)),
                 FLPS_OK);
    cr_assert_str_eq(host, "localhost");
    cr_assert_eq(port, 6379);
    cr_assert_eq(db, 0);
    cr_assert_str_empty(pw);
}

Test(rconn, refuses_malformed_urls_with_a_reason)
{
    const char *bad[] = {
        "http://x",      "redis://",    "redis://h:0", "redis://h:99999",
        "redis://h:12x", "redis://h/x", NULL};
    char host[64], pw[64], err[256];
    int port, db;

    for (int i = 0; bad[i] != NULL; i++) {
        err[0] = '\0';
        cr_assert_eq(rconn_parse_url(bad[i], host, sizeof(host), &port, pw,
                                     sizeof(pw), &db, err, sizeof(err)),
                     FLPS_EINVAL, "%s was accepted", bad[i]);
        cr_assert_neq(err[0], '\0', "no reason for %s", bad[i]);
    }
}

Test(rconn, runs_commands_and_reports_error_replies)
{
    test_redis srv;
    rconn *rc = NULL;
    redisReply *r = NULL;

    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    cr_assert_eq(rconn_create(srv.url, 1000, &rc), FLPS_OK);
    cr_assert_eq(rconn_cmd(rc, &r, "SET %s %b", "k", "v\0w", (size_t)3),
                 FLPS_OK, "%s", rconn_error(rc));
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(rc, &r, "GET k"), FLPS_OK);
    cr_assert_eq(r->len, 3);
    cr_assert_eq(memcmp(r->str, "v\0w", 3), 0);
    freeReplyObject(r);
    r = NULL;
    cr_assert_eq(rconn_cmd(rc, &r, "INCR k"), FLPS_EREMOTE);
    cr_assert_null(r);
    cr_assert_not_null(strstr(rconn_error(rc), "not an integer"), "%s",
                       rconn_error(rc));
    rconn_destroy(rc);
    test_redis_stop(&srv);
}

Test(rconn, says_where_redis_is_missing_and_reconnects_when_it_is_back)
{
    test_redis srv;
    rconn *rc = NULL;
    char url[64];
    int port = test_free_port();

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    cr_assert_eq(rconn_create(url, 500, &rc), FLPS_OK,
                 "an unreachable server is reported by commands, not create");
    cr_assert_eq(rconn_ping(rc), FLPS_EIO);
    cr_assert_not_null(strstr(rconn_error(rc), "cannot reach Redis"), "%s",
                       rconn_error(rc));
    cr_assert_not_null(strstr(rconn_error(rc), url + 8), "%s", rconn_error(rc));
    rconn_destroy(rc);

    cr_assert_eq(test_redis_start(&srv), 0);
    cr_assert_eq(rconn_create(srv.url, 500, &rc), FLPS_OK);
    cr_assert_eq(rconn_ping(rc), FLPS_OK);
    port = srv.port;
    test_redis_stop(&srv);
    cr_assert_eq(rconn_ping(rc), FLPS_EIO, "a lost server is an I/O error");
    cr_assert_eq(test_redis_start_on(&srv, port), 0);
    cr_assert_eq(rconn_ping(rc), FLPS_OK, "no reconnect: %s", rconn_error(rc));
    rconn_destroy(rc);
    test_redis_stop(&srv);
}

Test(rconn, loads_scripts_at_connect_and_again_after_a_script_flush)
{
    static const char lua[] = "return redis.call('INCR', KEYS[1])\n";
    test_redis srv;
    rconn *rc = NULL;
    redisReply *r = NULL;
    const char *argv[] = {"counter"};
    char url[64];
    int id = -1, port = test_free_port();

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    cr_assert_eq(rconn_create(url, 500, &rc), FLPS_OK);
    cr_assert_eq(rconn_script_add(rc, lua, &id), FLPS_OK,
                 "registering needs no server");
    cr_assert_eq(rconn_script_run(rc, &r, id, 1, 1, argv, NULL), FLPS_EIO);
    cr_assert_eq(test_redis_start_on(&srv, port), 0);
    cr_assert_eq(rconn_ping(rc), FLPS_OK, "%s", rconn_error(rc));
    cr_assert_eq(rconn_cmd(rc, &r, "INFO commandstats"), FLPS_OK);
    cr_assert_not_null(strstr(r->str, "cmdstat_script"),
                       "the connect loads the script: %s", r->str);
    freeReplyObject(r);
    cr_assert_eq(rconn_script_run(rc, &r, id, 1, 1, argv, NULL), FLPS_OK, "%s",
                 rconn_error(rc));
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    cr_assert_eq(r->integer, 1);
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(rc, &r, "SCRIPT FLUSH"), FLPS_OK);
    freeReplyObject(r);
    cr_assert_eq(rconn_script_run(rc, &r, id, 1, 1, argv, NULL), FLPS_OK,
                 "NOSCRIPT must load the script again: %s", rconn_error(rc));
    cr_assert_eq(r->integer, 2, "the refused call ran nothing, the retry once");
    freeReplyObject(r);
    cr_assert_eq(rconn_script_run(rc, &r, id + 1, 0, 0, NULL, NULL),
                 FLPS_EINVAL);
    rconn_destroy(rc);
    test_redis_stop(&srv);
}
