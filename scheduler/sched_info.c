/* flsched's /v1/info: the scheduler, its Redis and the nodes' checks. */
#include "scheduler/sched_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "flps.h"
#include "scheduler/sched_jobhash.h"
#include "scheduler/sched_store_int.h"

/* "redis_version:7.0.15" out of INFO server, into buf. */
static void redis_version(const char *info, char *buf, size_t len)
{
    const char *p = strstr(info, "redis_version:");
    size_t n;

    buf[0] = '\0';
    if (p == NULL)
        return;
    p += strlen("redis_version:");
    n = strcspn(p, "\r\n");
    sched_store_copy(buf, len, p, n);
}

/* The Redis part: version, and flsched's clock minus Redis's (read around
 * TIME, so off by at most half the round trip). */
static json_t *redis_json(sched_store *st, int *ok)
{
    redisReply *r = NULL;
    char version[64];
    double before, after, redis_now;
    flps_err rc = rconn_cmd(st->rc, &r, "INFO server");

    *ok = 0;
    if (rc != FLPS_OK) {
        sched_store_rerr(st, rc);
        return json_pack("{s:b,s:s}", "ok", 0, "error", st->err);
    }
    redis_version(r->type == REDIS_REPLY_STRING ? r->str : "", version,
                  sizeof(version));
    freeReplyObject(r);
    before = flps_wall_s();
    rc = rconn_cmd(st->rc, &r, "TIME");
    after = flps_wall_s();
    if (rc != FLPS_OK) {
        sched_store_rerr(st, rc);
        return json_pack("{s:b,s:s}", "ok", 0, "error", st->err);
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return json_pack("{s:b,s:s}", "ok", 0, "error",
                         "Redis answered TIME with something else than "
                         "two numbers");
    }
    redis_now = strtod(r->element[0]->str, NULL) +
                strtod(r->element[1]->str, NULL) / 1e6;
    freeReplyObject(r);
    *ok = 1;
    return json_pack("{s:b,s:s,s:f}", "ok", 1, "version", version,
                     "clock_offset", (before + after) / 2 - redis_now);
}

/* flps:node:{name}:facts as an object of numbers and strings, or null
 * when the agent publishes none (an older flagent, or a dead one whose
 * key expired). */
static json_t *facts_json(sched_store *st, const char *name)
{
    static const char *const numeric[] = {"reported_at", "clock_offset",
                                          "rdma_devices", "memlock",
                                          "rdma_active_ports"};
    redisReply *r = NULL;
    json_t *o;
    flps_err rc = rconn_cmd(st->rc, &r, "HGETALL flps:node:%s:facts", name);

    if (rc != FLPS_OK) {
        sched_store_rerr(st, rc);
        return json_null();
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        freeReplyObject(r);
        return json_null();
    }
    o = json_object();
    for (size_t i = 0; o != NULL && i + 1 < r->elements; i += 2) {
        const char *k = r->element[i]->str, *v = r->element[i + 1]->str;
        int is_num = 0;

        if (k == NULL || v == NULL)
            continue;
        for (size_t j = 0; j < sizeof(numeric) / sizeof(numeric[0]); j++)
            is_num |= strcmp(k, numeric[j]) == 0;
        json_object_set_new(
            o, k, is_num ? json_real(strtod(v, NULL)) : json_string(v));
    }
    freeReplyObject(r);
    return o;
}

static json_t *nodes_json(sched_store *st)
{
    sched_node *nodes = NULL;
    size_t n = 0;
    json_t *arr;

    if (sched_store_nodes(st, &nodes, &n) != FLPS_OK)
        return json_array();
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        const sched_node *nd = &nodes[i];

        json_array_append_new(
            arr, json_pack("{s:s,s:s,s:b,s:o,s:I,s:I,s:o}", "name", nd->name,
                           "state", nd->state[0] ? nd->state : "LOST", "alive",
                           nd->alive, "cpus", sched_json_cpus(nd->cap.mcpus),
                           "memory", (json_int_t)nd->cap.memory, "gpus",
                           (json_int_t)nd->cap.gpus, "facts",
                           facts_json(st, nd->name)));
    }
    sched_nodes_free(nodes, n);
    return arr;
}

/* The API's certificate: whom it names and when it is valid. */
static json_t *tls_json(const httpd_cert_info *c)
{
    return json_pack("{s:s,s:s,s:f,s:f,s:b,s:f,s:I}", "subject", c->subject,
                     "names", c->names, "not_before", c->not_before,
                     "not_after", c->not_after, "names_listen_host", c->host_ok,
                     "loaded", c->loaded, "reloads", (json_int_t)c->reloads);
}

json_t *sched_info_json(sched_store *st, const httpd_cert_info *tls)
{
    int ok = 0;
    json_t *redis = redis_json(st, &ok);
    json_t *o = json_pack("{s:s,s:f,s:o}", "version", flps_version(), "time",
                          flps_wall_s(), "redis", redis ? redis : json_null());

    if (o != NULL && tls != NULL)
        json_object_set_new(o, "tls", tls_json(tls));
    if (o != NULL && ok)
        json_object_set_new(o, "nodes", nodes_json(st));
    return o;
}
