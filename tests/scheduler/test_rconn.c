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

/* A Redis restart between two commands costs no failed command: the
 * closed connection is found before the next command is sent (it used to
 * fail with "lost Redis", and flsched answered one 503). */
Test(rconn, the_first_command_after_a_restart_succeeds_and_runs_once)
{
    test_redis srv;
    rconn *rc = NULL;
    redisReply *r = NULL;

    cr_assert_eq(test_redis_start_aof(&srv), 0);
    cr_assert_eq(rconn_create(srv.url, 1000, &rc), FLPS_OK);
    cr_assert_eq(rconn_cmd(rc, &r, "INCR n"), FLPS_OK, "%s", rconn_error(rc));
    freeReplyObject(r);
    {
        /* The append-only file is fsynced every second. */
        struct timespec ts = {1, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(test_redis_kill_and_restart(&srv, 1), 0);
    cr_assert_eq(rconn_cmd(rc, &r, "INCR n"), FLPS_OK,
                 "the first command after the restart failed: %s",
                 rconn_error(rc));
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    cr_assert_eq(r->integer, 2, "INCR ran once on the restarted server");
    freeReplyObject(r);
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

Test(rconn, never_shows_a_password_in_a_url_it_prints)
{
    char out[256];

    rconn_redact_url("redis://:s3cret@10.1.2.3:6380/2", out, sizeof(out));
    cr_assert_str_eq(out, "redis://:***@10.1.2.3:6380/2");
    rconn_redact_url("redis://alice:s3cret@h:1", out, sizeof(out));
    cr_assert_str_eq(out, "redis://alice:***@h:1", "the user stays");
    rconn_redact_url("redis://h:1/0", out, sizeof(out));
    cr_assert_str_eq(out, "redis://h:1/0");
    rconn_redact_url("http://:s3cret@h", out, sizeof(out));
    cr_assert_null(strstr(out, "s3cret"), "%s", out);
}

/* A connection made with url and the current environment: the code of
 * its PING, and its message. */
static flps_err ping_as(const char *url, char *why, size_t len)
{
    rconn *rc = NULL;
    flps_err e = rconn_create(url, 1000, &rc);

    if (e != FLPS_OK)
        return e;
    e = rconn_ping(rc);
    snprintf(why, len, "%s", rconn_error(rc));
    rconn_destroy(rc);
    return e;
}

Test(rconn, authenticates_from_a_file_the_environment_or_an_acl_user)
{
    test_redis srv;
    rconn *admin = NULL;
    redisReply *r = NULL;
    char url[128], why[512], pwfile[] = "/tmp/flps-rconn-pw-XXXXXX";
    int fd;

    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    cr_assert_eq(rconn_create(srv.url, 1000, &admin), FLPS_OK);
    cr_assert_eq(rconn_cmd(admin, &r,
                           "ACL SETUSER alice on >wonder ~* &* "
                           "+@all"),
                 FLPS_OK, "%s", rconn_error(admin));
    freeReplyObject(r);
    cr_assert_eq(rconn_cmd(admin, &r, "CONFIG SET requirepass s3cret"),
                 FLPS_OK);
    freeReplyObject(r);
    rconn_destroy(admin);
    unsetenv("FLPS_REDIS_PASSWORD_FILE");
    unsetenv("FLPS_REDIS_PASSWORD");
    unsetenv("FLPS_REDIS_USER");

    /* No password at all: refused at once, with what to set. */
    cr_assert_eq(ping_as(srv.url, why, sizeof(why)), FLPS_ECONFIG, "%s", why);
    cr_assert_not_null(strstr(why, "FLPS_REDIS_PASSWORD_FILE"), "%s", why);

    /* From the environment, for every connection of the process (flsched
     * has two). */
    setenv("FLPS_REDIS_PASSWORD", "s3cret", 1);
    cr_assert_eq(ping_as(srv.url, why, sizeof(why)), FLPS_OK, "%s", why);
    cr_assert_eq(ping_as(srv.url, why, sizeof(why)), FLPS_OK, "%s", why);
    unsetenv("FLPS_REDIS_PASSWORD");

    /* From a file (first line; the newline is not part of it). */
    fd = mkstemp(pwfile);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "s3cret\n", 7), 7);
    close(fd);
    setenv("FLPS_REDIS_PASSWORD_FILE", pwfile, 1);
    cr_assert_eq(ping_as(srv.url, why, sizeof(why)), FLPS_OK, "%s", why);
    unsetenv("FLPS_REDIS_PASSWORD_FILE");
    unlink(pwfile);

    /* A wrong password is a configuration error, and not printed. */
    snprintf(url, sizeof(url), "redis://:wrongpw@127.0.0.1:%d", srv.port);
    cr_assert_eq(ping_as(url, why, sizeof(why)), FLPS_ECONFIG, "%s", why);
    cr_assert_not_null(strstr(why, "refused the credentials"), "%s", why);
    cr_assert_null(strstr(why, "wrongpw"), "%s", why);

    /* An ACL user and its password, from the URL. */
    snprintf(url, sizeof(url), "redis://alice:wonder@127.0.0.1:%d", srv.port);
    cr_assert_eq(ping_as(url, why, sizeof(why)), FLPS_OK, "%s", why);
    snprintf(url, sizeof(url), "redis://alice:s3cret@127.0.0.1:%d", srv.port);
    cr_assert_eq(ping_as(url, why, sizeof(why)), FLPS_ECONFIG, "%s", why);
    cr_assert_not_null(strstr(why, "alice"), "%s", why);
    test_redis_stop(&srv);
}
