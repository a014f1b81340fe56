/* flsched's nodes in Redis: what they offer and use, LOST and back. */
#include "scheduler/sched_store.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "scheduler/sched_store_int.h"
#include "services/safeid.h"

void sched_nodes_free(sched_node *nodes, size_t n)
{
    if (nodes == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        sched_strv_free(nodes[i].tasks, nodes[i].ntasks);
        flps_free(nodes[i].task_need);
    }
    flps_free(nodes);
}

/* ---- Nodes ---- */

static int cmp_node(const void *a, const void *b)
{
    return strcmp(((const sched_node *)a)->name, ((const sched_node *)b)->name);
}

static flps_err load_node(sched_store *st, const char *name, sched_node *nd)
{
    redisReply *r = NULL, *t = NULL;
    flps_err rc;

    sched_store_copy(nd->name, sizeof(nd->name), name, strlen(name));
    rc = rconn_cmd(st->rc, &r, "HGETALL flps:node:%s", name);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    sched_store_hcopy(r, "address", nd->address, sizeof(nd->address));
    sched_store_hcopy(r, "metrics", nd->metrics, sizeof(nd->metrics));
    sched_store_hcopy(r, "state", nd->state, sizeof(nd->state));
    {
        const char *mem = sched_store_hget(r, "memory");
        uint64_t bytes = 0;

        /* Bytes as flagent writes them; a SIZE ("8Gi") is read too. */
        if (mem != NULL && jobspec_size_parse(mem, &bytes) == FLPS_OK)
            nd->cap.memory = bytes;
    }
    nd->cap.mcpus =
        sched_res_mcpus(sched_store_to_double(sched_store_hget(r, "cpus")));
    nd->cap.gpus = sched_store_to_u64(sched_store_hget(r, "gpus"));
    nd->last_heartbeat =
        sched_store_to_double(sched_store_hget(r, "last_heartbeat"));
    nd->registered_at =
        sched_store_to_double(sched_store_hget(r, "registered_at"));
    freeReplyObject(r);
    rc = rconn_cmd(st->rc, &r, "EXISTS flps:node:%s:alive", name);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    nd->alive = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    /* What the agent last published of its RDMA ports; a node whose facts
     * expired (its agent is gone) has none. */
    rc = rconn_cmd(st->rc, &r, "HGET flps:node:%s:facts rdma_active_ports",
                   name);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    nd->rdma_ports = (uint32_t)sched_store_to_u64(
        r->type == REDIS_REPLY_STRING ? r->str : NULL);
    freeReplyObject(r);
    rc = rconn_cmd(st->rc, &r, "SMEMBERS flps:node:%s:tasks", name);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    nd->tasks = flps_calloc(r->elements + 1, sizeof(*nd->tasks));
    nd->task_need = flps_calloc(r->elements + 1, sizeof(*nd->task_need));
    if (nd->tasks == NULL || nd->task_need == NULL) {
        freeReplyObject(r);
        return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        const char *key = r->element[i]->str;
        sched_res need;

        rc = rconn_cmd(st->rc, &t, "HMGET %s cpus memory gpus", key);
        if (rc != FLPS_OK) {
            freeReplyObject(r);
            return sched_store_rerr(st, rc);
        }
        need.mcpus = sched_res_mcpus(sched_store_to_double(
            t->element[0]->type == REDIS_REPLY_STRING ? t->element[0]->str
                                                      : NULL));
        need.memory = sched_store_to_u64(
            t->element[1]->type == REDIS_REPLY_STRING ? t->element[1]->str
                                                      : NULL);
        need.gpus = sched_store_to_u64(t->element[2]->type == REDIS_REPLY_STRING
                                           ? t->element[2]->str
                                           : NULL);
        freeReplyObject(t);
        nd->tasks[nd->ntasks] = flps_strdup(key);
        if (nd->tasks[nd->ntasks] == NULL) {
            freeReplyObject(r);
            return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
        }
        nd->task_need[nd->ntasks++] = need;
        nd->used.mcpus += need.mcpus;
        nd->used.memory += need.memory;
        nd->used.gpus += need.gpus;
    }
    freeReplyObject(r);
    return FLPS_OK;
}

/* A member of flps:nodes that no agent could have registered (flagent's
 * --name follows services/safeid.h) is left out: nothing is placed there,
 * and its name never reaches a key. Said at most once a minute. */
static int node_name_ok(sched_store *st, const char *name)
{
    double now = flps_mono_s();

    if (safeid_is_valid_str(name))
        return 1;
    if (st->bad_node_warned == 0 || now - st->bad_node_warned >= 60) {
        st->bad_node_warned = now;
        log_warn("node '%.80s' in flps:nodes is not a node name (" SAFEID_RULE
                 "): ignored",
                 name);
    }
    return 0;
}

flps_err sched_store_nodes(sched_store *st, sched_node **out, size_t *n)
{
    redisReply *r = NULL;
    sched_node *nodes = NULL;
    size_t k = 0;
    flps_err rc = rconn_cmd(st->rc, &r, "SMEMBERS flps:nodes");

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    nodes = flps_calloc(r->elements + 1, sizeof(*nodes));
    if (nodes == NULL) {
        freeReplyObject(r);
        return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        if (!node_name_ok(st, r->element[i]->str))
            continue;
        rc = load_node(st, r->element[i]->str, &nodes[k++]);
        if (rc != FLPS_OK)
            break;
    }
    freeReplyObject(r);
    if (rc != FLPS_OK) {
        sched_nodes_free(nodes, k);
        return rc;
    }
    qsort(nodes, k, sizeof(*nodes), cmp_node);
    *out = nodes;
    *n = k;
    return FLPS_OK;
}

/* Move node name from state `from` to `to` when its alive key exists
 * (want_alive = 1) or not (0), both looked at in the script's one step. */
static flps_err node_move(sched_store *st, const char *name, const char *from,
                          const char *to, int want_alive, int *marked)
{
    sched_cmd c = {0};
    long long moved = 0;
    flps_err rc;

    *marked = 0;
    sched_cmd_addf(&c, "flps:node:%s", name);
    sched_cmd_addf(&c, "flps:node:%s:alive", name);
    sched_cmd_add(&c, from);
    sched_cmd_add(&c, to);
    sched_cmd_add(&c, want_alive ? "1" : "0");
    rc = sched_store_eval_int(st, SCHED_SCRIPT_NODE_MOVE, 2, &c, &moved);
    if (rc != FLPS_OK)
        return rc;
    *marked = moved == 1;
    return FLPS_OK;
}

flps_err sched_store_node_lost(sched_store *st, const char *name, int *marked)
{
    return node_move(st, name, "READY", "LOST", 0, marked);
}

flps_err sched_store_node_back(sched_store *st, const char *name, int *marked)
{
    return node_move(st, name, "LOST", "READY", 1, marked);
}

flps_err sched_store_node_cap_ttl(sched_store *st, const char *name, int ttl_s)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "PTTL flps:node:%s:alive", name);
    int forever;

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    forever = r->type == REDIS_REPLY_INTEGER && r->integer == -1;
    freeReplyObject(r);
    if (!forever)
        return FLPS_OK;
    log_warn("node %s: its alive key has no TTL; giving it %d s", name, ttl_s);
    return sched_store_drop(
        st, rconn_cmd(st->rc, &r, "EXPIRE flps:node:%s:alive %d", name, ttl_s),
        &r);
}
