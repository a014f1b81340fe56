/* The rendezvous of a saps job's workers: each worker's agent picks the
 * port its worker will listen on, publishes the endpoint in the task's
 * hash, and starts the worker once every worker of the attempt has one,
 * with the whole list in rank order (flworker's --peers, a program's
 * FLPS_PEERS), as flrun gives it on one machine. */
#include "scheduler/agent_node_impl.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/tcplisten.h"

/* A free port on the agent's address: bound, then closed for the worker
 * to bind. It lies outside the kernel's ephemeral range
 * (tcplisten_open_handoff), so no process's port-0 bind (the worker's
 * own metrics port among them) or outgoing connection takes it in
 * between; a process binding that very number still could, and the
 * worker then fails to listen and says so. 1 with t->peer_endpoint. */
static int pick_endpoint(agent_node *n, agent_task *t, char *why, size_t len)
{
    char bound[96];
    int fd = -1;

    if (tcplisten_open_handoff(n->cfg.address, 1, &fd, bound, sizeof(bound)) !=
        FLPS_OK) {
        snprintf(why, len, "no free port on %s for the worker to listen on",
                 n->cfg.address);
        return 0;
    }
    close(fd);
    snprintf(t->peer_endpoint, sizeof(t->peer_endpoint), "tcp://%s", bound);
    return 1;
}

/* This worker's endpoint into its task hash: picked once per task, so a
 * retry after Redis was away publishes the same one. 1 when published. */
static int publish(agent_node *n, agent_task *t, char *why, size_t len,
                   int *failed)
{
    const char *argv[] = {"HSET", t->key, "peer_endpoint", t->peer_endpoint};

    if (t->peer_endpoint[0] == '\0' && !pick_endpoint(n, t, why, len)) {
        *failed = 1;
        return 0;
    }
    if (t->peer_published)
        return 1;
    if (!agent_node_redis_cmd(n, NULL, "publishing the worker's endpoint", 4,
                              argv))
        return 0;
    t->peer_published = 1;
    t->peer_since = flps_mono_s();
    log_info("task %s: listens for its peers on %s", t->key, t->peer_endpoint);
    return 1;
}

int agent_endpoints_get(agent_node *n, const agent_task *t, const char *role,
                        uint32_t count, const char *field, flps_strbuf *list,
                        uint32_t *missing, char *why, size_t len)
{
    char key[160], what[64];

    snprintf(what, sizeof(what), "reading a %s's endpoint", role);
    for (uint32_t i = 0; i < count; i++) {
        const char *argv[] = {"HGET", key, field};
        redisReply *r = NULL;
        int ok;

        snprintf(key, sizeof(key), "flps:task:%s:%u:%s-%u", t->id.job,
                 t->id.attempt, role, i);
        *missing = UINT32_MAX;
        if (!agent_node_redis_cmd(n, &r, what, 3, argv))
            return 0;
        if (r->type != REDIS_REPLY_STRING || r->len == 0) {
            freeReplyObject(r);
            *missing = i;
            return 0;
        }
        /* It becomes the worker's argument: never pass on what a server
         * or an agent could not have written. */
        ok = agent_task_endpoint_is_valid(r->str);
        if (ok)
            flps_strbuf_printf(list, "%s%s", i ? "," : "", r->str);
        else
            snprintf(why, len,
                     "the endpoint of %s %u in Redis (%s) is not "
                     "tcp://HOST:PORT; the task is refused",
                     role, i, key);
        freeReplyObject(r);
        if (!ok)
            return -1;
    }
    if (flps_strbuf_error(list) != FLPS_OK) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    return 1;
}

int agent_peers_get(agent_node *n, agent_task *t, const jobspec *js,
                    flps_strbuf *list, char *why, size_t len)
{
    double deadline = AGENT_RENDEZVOUS_PER_DEADLINE * js->peer_deadline;
    uint32_t missing;
    int failed = 0, got;

    if (!publish(n, t, why, len, &failed))
        return failed ? -1 : 0;
    got = agent_endpoints_get(n, t, "worker", js->workers, "peer_endpoint",
                              list, &missing, why, len);
    if (got != 0 || missing == UINT32_MAX)
        return got;
    if (flps_mono_s() - t->peer_since > deadline) {
        snprintf(why, len,
                 "worker-%u of the job never registered its endpoint "
                 "(flps:task:%s:%u:worker-%u, field peer_endpoint) within "
                 "%.0f s (%g x peer_deadline); mode saps starts only when "
                 "every worker has one",
                 missing, t->id.job, t->id.attempt, missing, deadline,
                 AGENT_RENDEZVOUS_PER_DEADLINE);
        return -1;
    }
    agent_reconcile_wait(t, js->workers, "workers (mode saps)");
    return 0;
}
