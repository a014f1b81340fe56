/* Tests for scheduler/agent_report.c against a real redis-server: the
 * script flagent's progress, eval and profile reports run never creates a
 * job hash that is not there. */
#include "scheduler/agent_node_impl.h"

#include <criterion/criterion.h>
#include <string.h>

#include "redis_fixture.h"
#include "scheduler/rconn.h"

static test_redis srv;
static rconn *rc;

static void setup(void)
{
    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    cr_assert_eq(rconn_create(srv.url, 2000, &rc), FLPS_OK);
}

static void teardown(void)
{
    rconn_destroy(rc);
    test_redis_stop(&srv);
}

TestSuite(agent_report, .init = setup, .fini = teardown);

/* Run the report script on key with two field/value pairs; its reply. */
static long long report(const char *key, const char *f1, const char *v1,
                        const char *f2, const char *v2)
{
    const char *argv[] = {"EVAL", agent_job_report_lua, "1", key, f1, v1, f2,
                          v2};
    redisReply *r = NULL;
    long long v;

    cr_assert_eq(rconn_cmdv(rc, &r, 8, argv, NULL), FLPS_OK, "%s",
                 rconn_error(rc));
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

static long long integer(const char *cmd)
{
    redisReply *r = NULL;
    long long v;

    cr_assert_eq(rconn_cmd(rc, &r, cmd), FLPS_OK, "%s", rconn_error(rc));
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s", cmd);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

static char *string(const char *cmd)
{
    static char out[256];
    redisReply *r = NULL;

    cr_assert_eq(rconn_cmd(rc, &r, cmd), FLPS_OK, "%s", rconn_error(rc));
    snprintf(out, sizeof(out), "%s",
             r->type == REDIS_REPLY_STRING ? r->str : "(not a string)");
    freeReplyObject(r);
    return out;
}

Test(agent_report, a_report_sets_the_fields_of_a_job_that_exists)
{
    redisReply *r = NULL;

    cr_assert_eq(rconn_cmd(rc, &r, "HSET flps:job:j1 state RUNNING attempt 0"),
                 FLPS_OK);
    freeReplyObject(r);
    cr_assert_eq(report("flps:job:j1", "p_iteration", "30", "p_loss", "0.5"),
                 1);
    cr_assert_str_eq(string("HGET flps:job:j1 p_iteration"), "30");
    cr_assert_str_eq(string("HGET flps:job:j1 p_loss"), "0.5");
    cr_assert_str_eq(string("HGET flps:job:j1 state"), "RUNNING",
                     "the other fields stay");
    cr_assert_eq(integer("HLEN flps:job:j1"), 4);
}

Test(agent_report, a_late_report_never_creates_the_hash_of_a_job_that_is_gone)
{
    cr_assert_eq(report("flps:job:j7", "p_iteration", "30", "p_loss", "0.5"),
                 0);
    cr_assert_eq(integer("EXISTS flps:job:j7"), 0);
    cr_assert_eq(report("flps:job:j7", "profile", "{\"event\":\"profile\"}",
                        "profile_attempt", "0"),
                 0);
    cr_assert_eq(integer("EXISTS flps:job:j7"), 0);
    cr_assert_eq(integer("DBSIZE"), 0, "nothing written anywhere");
}
