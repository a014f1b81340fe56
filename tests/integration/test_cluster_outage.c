/* Redis outages under a running job on the local cluster (redis-server
 * with its append-only file, flsched, two flagents with 1 s heartbeats,
 * so their alive keys live 2 s): Redis stopped and started again on its
 * port after 1, 3, 4, 5, 10 and 20 s, and paused (SIGSTOP) for 1.5, 3 and 5
 * s. An outage of the store is not a node failure: the job, allowed no
 * restart, keeps its first attempt and SUCCEEDS, no node is ever LOST and
 * no event says one was (issue 22, finding 3: 4 of 5 outages of 3-5 s
 * failed such a job). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_fixture.h"

static void setup(void)
{
    cluster_setup("flps-outage", 1);
}

static void teardown(void)
{
    if (cl.redis.pid > 0)
        kill(cl.redis.pid, SIGCONT);
    cluster_teardown();
}

TestSuite(cluster_outage, .init = setup, .fini = teardown, .timeout = 400);

/* A redis-cli command on the cluster's Redis. */
static const char *rcli(const char *args)
{
    return test_redis_cli(&cl.redis, NULL, args);
}

/* Stopped (SIGTERM: it writes its append-only file) and started again on
 * its port and data after seconds. */
static void stop_redis_for(double seconds)
{
    cr_assert_eq(kill(cl.redis.pid, SIGTERM), 0);
    waitpid(cl.redis.pid, NULL, 0);
    cl.redis.pid = 0;
    sleep_ms((long)(seconds * 1000));
    cr_assert_eq(test_redis_exec(&cl.redis, 1), 0,
                 "redis-server did not start again on port %d", cl.redis.port);
}

/* Paused: the process is there, answers nothing, and lets keys expire. */
static void pause_redis_for(double seconds)
{
    cr_assert_eq(kill(cl.redis.pid, SIGSTOP), 0);
    sleep_ms((long)(seconds * 1000));
    cr_assert_eq(kill(cl.redis.pid, SIGCONT), 0);
}

/* Both nodes READY with their alive keys: the agents are back. */
static void wait_nodes_back(void)
{
    for (int i = 0; i < 100; i++) {
        if (strcmp(rcli("EXISTS flps:node:n1:alive flps:node:n2:alive"), "2") ==
            0)
            return;
        sleep_ms(100);
    }
    cr_assert_fail("the agents did not register again within 10 s");
}

Test(cluster_outage, redis_outages_of_1_to_20_s_change_no_jobs_state)
{
    static const double stops[] = {1, 3, 4, 5, 10, 20};
    static const double pauses[] = {1.5, 3, 5};
    char yaml[512], flag[128], summary[400], key[400], job[128], n1[32];
    char n2[32];
    json_t *j;
    char *id;

    /* Tasks on both nodes that run until told to stop. */
    snprintf(flag, sizeof(flag), "%s/go", cl.dir);
    snprintf(yaml, sizeof(yaml),
             "name: outage\nmodel: mlp\nworkers: 2\nservers: 2\n"
             "max_restarts: 0\n"
             "command: [/bin/sh, -c, 'while [ ! -e %s ]; do sleep 0.2; "
             "done']\n",
             flag);
    id = submit(yaml);
    json_decref(wait_state(id, "RUNNING", 60));
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
        stop_redis_for(stops[i]);
        wait_nodes_back();
        sleep_ms(3000); /* a turn of flsched past its grace */
        snprintf(key, sizeof(key), "HGET flps:job:%s state", id);
        cr_assert_str_eq(rcli(key), "RUNNING", "after %.0f s without Redis",
                         stops[i]);
    }
    for (size_t i = 0; i < sizeof(pauses) / sizeof(pauses[0]); i++) {
        pause_redis_for(pauses[i]);
        wait_nodes_back();
        sleep_ms(3000);
        snprintf(key, sizeof(key), "HGET flps:job:%s state", id);
        cr_assert_str_eq(rcli(key), "RUNNING", "after Redis paused %.1f s",
                         pauses[i]);
    }
    sleep_ms(7000); /* every grace over */
    cr_assert_eq(close(open(flag, O_WRONLY | O_CREAT, 0644)), 0);
    j = wait_state(id, "SUCCEEDED", 60);
    json_decref(j);
    snprintf(key, sizeof(key), "HMGET flps:job:%s state attempt restarts", id);
    snprintf(job, sizeof(job), "%.100s", rcli(key));
    snprintf(n1, sizeof(n1), "%.20s", rcli("HGET flps:node:n1 state"));
    snprintf(n2, sizeof(n2), "%.20s", rcli("HGET flps:node:n2 state"));
    snprintf(summary, sizeof(summary), "%s %s %s", job, n1, n2);
    /* The job's state, attempt and restarts, and both nodes' states. */
    cr_assert_str_eq(summary, "SUCCEEDED\n0\n0 READY READY");
    snprintf(key, sizeof(key), "LRANGE flps:job:%s:events 0 -1", id);
    cr_assert_null(strstr(rcli(key), "node_lost"), "a node was lost: %s",
                   rcli(key));
    free(id);
}
