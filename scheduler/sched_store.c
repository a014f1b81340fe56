/* flsched's Redis store: the connection, the helpers its modules share,
 * events, logs, plans and the leader lease (jobs in sched_jobs.c, nodes in
 * sched_nodes.c). */
#include "scheduler/sched_store.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/strbuf.h"
#include "scheduler/sched_store_int.h"

/* ---- Small helpers ---- */

/* The rconn's message for a failed command. */
flps_err sched_store_rerr(sched_store *st, flps_err rc)
{
    if (rc == FLPS_ENOMEM)
        return sched_store_seterr(st, rc, "out of memory");
    return sched_store_seterr(st, rc, "%s", rconn_error(st->rc));
}

void sched_store_copy(char *dst, size_t len, const char *src, size_t n)
{
    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* A field another writer garbled reads as 0 rather than stopping the
 * scheduler: the job or node stays visible and the log of the writer is
 * where to look. */
double sched_store_to_double(const char *s)
{
    double v = 0;

    if (s == NULL ||
        flps_parse_double(NULL, s, -DBL_MAX, DBL_MAX, &v, NULL, 0) != FLPS_OK)
        return 0;
    return v;
}

uint64_t sched_store_to_u64(const char *s)
{
    uint64_t v = 0;

    if (s == NULL ||
        flps_parse_u64(NULL, s, 0, UINT64_MAX, &v, NULL, 0) != FLPS_OK)
        return 0;
    return v;
}

void sched_store_fmt_mcpus(char *buf, size_t len, uint64_t mcpus)
{
    flps_format_double(buf, len, (double)mcpus / 1000.0);
}

void sched_strv_free(char **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        flps_free(v[i]);
    flps_free(v);
}

char *sched_store_dup(const char *s, size_t n)
{
    char *d = flps_malloc(n + 1);

    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* ---- Argument vectors ----
 * Commands with many or binary arguments are built here: each argument is
 * copied, so callers may pass stack buffers. */

void sched_cmd_addb(sched_cmd *c, const char *s, size_t n)
{
    if (c->oom)
        return;
    if (c->argc == c->cap) {
        int ncap = c->cap ? c->cap * 2 : 16;
        char **nv = flps_realloc(c->argv, (size_t)ncap * sizeof(*nv));
        size_t *nl;

        if (nv == NULL) {
            c->oom = 1;
            return;
        }
        c->argv = nv;
        nl = flps_realloc(c->len, (size_t)ncap * sizeof(*nl));
        if (nl == NULL) {
            c->oom = 1;
            return;
        }
        c->len = nl;
        c->cap = ncap;
    }
    c->argv[c->argc] = sched_store_dup(s, n);
    if (c->argv[c->argc] == NULL) {
        c->oom = 1;
        return;
    }
    c->len[c->argc++] = n;
}

void sched_cmd_add(sched_cmd *c, const char *s)
{
    sched_cmd_addb(c, s, strlen(s));
}

void sched_cmd_addf(sched_cmd *c, const char *fmt, ...)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    va_list ap;
    flps_err rc;

    va_start(ap, fmt);
    rc = flps_strbuf_vprintf(&b, fmt, ap);
    va_end(ap);
    if (rc != FLPS_OK)
        c->oom = 1;
    else
        sched_cmd_addb(c, b.data, b.len);
    flps_strbuf_fini(&b);
}

void sched_cmd_free(sched_cmd *c)
{
    for (int i = 0; i < c->argc; i++)
        flps_free(c->argv[i]);
    flps_free(c->argv);
    flps_free(c->len);
    memset(c, 0, sizeof(*c));
}

flps_err sched_store_drop(sched_store *st, flps_err rc, redisReply **rp)
{
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    freeReplyObject(*rp);
    return FLPS_OK;
}

flps_err sched_store_eval(sched_store *st, sched_script s, int nkeys,
                          sched_cmd *c, redisReply **reply)
{
    redisReply *r = NULL;
    flps_err rc;

    if (c->oom) {
        sched_cmd_free(c);
        return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
    }
    rc = rconn_script_run(st->rc, &r, st->script[s], nkeys, c->argc,
                          (const char **)c->argv, c->len);
    sched_cmd_free(c);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    if (reply != NULL)
        *reply = r;
    else
        freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_eval_int(sched_store *st, sched_script s, int nkeys,
                              sched_cmd *c, long long *out)
{
    redisReply *r = NULL;
    flps_err rc = sched_store_eval(st, s, nkeys, c, &r);

    if (rc != FLPS_OK)
        return rc;
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return sched_store_seterr(st, FLPS_EPROTO,
                                  "Redis at %s: a script gave no integer",
                                  rconn_address(st->rc));
    }
    *out = r->integer;
    freeReplyObject(r);
    return FLPS_OK;
}

/* Value of field in an HGETALL reply, or NULL. */
const char *sched_store_hget(const redisReply *r, const char *field)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[i]->str, field) == 0 &&
            r->element[i + 1]->type == REDIS_REPLY_STRING)
            return r->element[i + 1]->str;
    return NULL;
}

void sched_store_hcopy(const redisReply *r, const char *field, char *dst,
                       size_t len)
{
    const char *v = sched_store_hget(r, field);

    sched_store_copy(dst, len, v ? v : "", v ? strlen(v) : 0);
}

/* ---- Keys ---- */

void sched_store_job_key(char *buf, size_t len, const char *id)
{
    snprintf(buf, len, "flps:job:%s", id);
}

void sched_store_task_key(char *buf, size_t len, const char *id,
                          uint32_t attempt, const char *role, uint32_t index)
{
    snprintf(buf, len, "flps:task:%s:%u:%s-%u", id, attempt, role, index);
}

/* ---- Events ---- */

flps_err sched_cmd_add_event_text(sched_cmd *c, double now, const char *type,
                                  const char *message)
{
    json_t *o;
    char *text;

    o = json_pack("{s:f,s:s,s:s}", "time", now, "type", type, "message",
                  message);
    if (o == NULL)
        return FLPS_ENOMEM;
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (text == NULL)
        return FLPS_ENOMEM;
    sched_cmd_add(c, text);
    free(text); /* jansson's allocator */
    return FLPS_OK;
}

flps_err sched_cmd_add_event(sched_cmd *c, double now, const char *type,
                             const char *message)
{
    flps_err rc = sched_cmd_add_event_text(c, now, type, message);

    if (rc == FLPS_OK)
        sched_cmd_addf(c, "%d", STORE_EVENTS_MAX);
    return rc;
}

flps_err sched_store_event(sched_store *st, const char *id, double now,
                           const char *type, const char *message)
{
    sched_cmd c = {0};
    char jk[64];

    sched_store_job_key(jk, sizeof(jk), id);
    sched_cmd_add(&c, jk);
    sched_cmd_addf(&c, "%s:events", jk);
    if (sched_cmd_add_event(&c, now, type, message) != FLPS_OK)
        c.oom = 1;
    return sched_store_eval(st, SCHED_SCRIPT_EVENT, 2, &c, NULL);
}

/* ---- Create ---- */

flps_err sched_store_create(const char *url, int timeout_ms, sched_store **out)
{
    sched_store *st;
    flps_err rc;

    if (url == NULL || out == NULL)
        return FLPS_EINVAL;
    st = flps_calloc(1, sizeof(*st));
    if (st == NULL)
        return FLPS_ENOMEM;
    rc = rconn_create(url, timeout_ms, &st->rc);
    if (rc != FLPS_OK) {
        flps_free(st);
        return rc;
    }
    for (int s = 0; s < SCHED_SCRIPT_COUNT; s++) {
        rc = rconn_script_add(st->rc, sched_script_lua((sched_script)s),
                              &st->script[s]);
        if (rc != FLPS_OK) {
            log_error("%s", rconn_error(st->rc));
            sched_store_destroy(st);
            return rc;
        }
    }
    *out = st;
    return FLPS_OK;
}

void sched_store_destroy(sched_store *st)
{
    if (st == NULL)
        return;
    rconn_destroy(st->rc);
    flps_free(st);
}

const char *sched_store_error(const sched_store *st)
{
    return st->err;
}

flps_err sched_store_ping(sched_store *st)
{
    flps_err rc = rconn_ping(st->rc);

    return rc == FLPS_OK ? rc : sched_store_rerr(st, rc);
}

/* ---- Events, logs, plan ---- */

flps_err sched_store_events(sched_store *st, const char *id, long long since,
                            char ***out, size_t *n)
{
    redisReply *r = NULL;
    char **v = NULL;
    size_t k = 0;
    flps_err rc;

    rc = rconn_cmd(st->rc, &r, "LRANGE flps:job:%s:events 0 -1", id);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    v = flps_calloc(r->elements + 1, sizeof(*v));
    if (v == NULL) {
        freeReplyObject(r);
        return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->elements; i++) {
        json_t *e = json_loadb(r->element[i]->str, r->element[i]->len, 0, NULL);
        json_int_t seq = e ? json_integer_value(json_object_get(e, "seq")) : 0;

        json_decref(e);
        if (seq <= since)
            continue;
        v[k] = sched_store_dup(r->element[i]->str, r->element[i]->len);
        if (v[k] == NULL) {
            freeReplyObject(r);
            sched_strv_free(v, k);
            return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
        }
        k++;
    }
    freeReplyObject(r);
    *out = v;
    *n = k;
    return FLPS_OK;
}

flps_err sched_store_logs(sched_store *st, const char *id, const char *after,
                          long limit, char ***ids, char ***tasks, char ***lines,
                          size_t *n)
{
    redisReply *r = NULL;
    char start[80];
    char **vi = NULL, **vt = NULL, **vl = NULL;
    size_t k = 0;
    flps_err rc;

    if (after == NULL || *after == '\0')
        snprintf(start, sizeof(start), "-");
    else
        snprintf(start, sizeof(start), "(%s", after);
    rc = rconn_cmd(st->rc, &r, "XRANGE flps:job:%s:logs %s + COUNT %ld", id,
                   start, limit);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    vi = flps_calloc(r->elements + 1, sizeof(*vi));
    vt = flps_calloc(r->elements + 1, sizeof(*vt));
    vl = flps_calloc(r->elements + 1, sizeof(*vl));
    if (vi == NULL || vt == NULL || vl == NULL)
        goto oom;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        const redisReply *f;
        const char *task = "", *line = "";

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
            continue;
        f = e->element[1];
        for (size_t j = 0; j + 1 < f->elements; j += 2) {
            if (strcmp(f->element[j]->str, "task") == 0)
                task = f->element[j + 1]->str;
            else if (strcmp(f->element[j]->str, "line") == 0)
                line = f->element[j + 1]->str;
        }
        vi[k] = flps_strdup(e->element[0]->str);
        vt[k] = flps_strdup(task);
        vl[k] = flps_strdup(line);
        k++;
        if (vi[k - 1] == NULL || vt[k - 1] == NULL || vl[k - 1] == NULL)
            goto oom;
    }
    freeReplyObject(r);
    *ids = vi;
    *tasks = vt;
    *lines = vl;
    *n = k;
    return FLPS_OK;
oom:
    freeReplyObject(r);
    sched_strv_free(vi, k);
    sched_strv_free(vt, k);
    sched_strv_free(vl, k);
    return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
}

flps_err sched_store_plan(sched_store *st, const char *id, char **version,
                          char **plan, int *found)
{
    redisReply *r = NULL;
    flps_err rc =
        rconn_cmd(st->rc, &r, "HMGET flps:job:%s:plan version plan", id);

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    *found = r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING;
    if (*found) {
        *version = flps_strdup(r->element[0]->type == REDIS_REPLY_STRING
                                   ? r->element[0]->str
                                   : "0");
        *plan = flps_strdup(r->element[1]->str);
        if (*version == NULL || *plan == NULL) {
            flps_free(*version);
            flps_free(*plan);
            freeReplyObject(r);
            return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
        }
    }
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_plan_seen(sched_store *st, const char *id,
                               uint64_t *version, char *seen, size_t seenlen)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r,
                            "HMGET flps:job:%s:plan version profile_seen", id);

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        return sched_store_seterr(st, FLPS_EPROTO,
                                  "Redis answered HMGET oddly");
    }
    *version = r->element[0]->type == REDIS_REPLY_STRING
                   ? sched_store_to_u64(r->element[0]->str)
                   : 0;
    if (r->element[1]->type == REDIS_REPLY_STRING)
        sched_store_copy(seen, seenlen, r->element[1]->str, r->element[1]->len);
    else
        sched_store_copy(seen, seenlen, "", 0);
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_plan_put(sched_store *st, const char *leader_id,
                              const char *id, uint64_t prev_version,
                              const char *plan_json, const char *seen,
                              double now, const char *type, const char *message,
                              int *committed)
{
    char jk[64], num[64];
    sched_cmd c = {0};
    long long done = 0;
    flps_err rc;

    *committed = 0;
    sched_store_job_key(jk, sizeof(jk), id);
    flps_format_double(num, sizeof(num), now);
    sched_cmd_add(&c, "flps:leader");
    sched_cmd_addf(&c, "%s:plan", jk);
    sched_cmd_add(&c, jk);
    sched_cmd_addf(&c, "%s:events", jk);
    sched_cmd_add(&c, leader_id);
    sched_cmd_addf(&c, "%llu", (unsigned long long)prev_version);
    if (plan_json != NULL)
        sched_cmd_addf(&c, "%llu", (unsigned long long)prev_version + 1);
    else
        sched_cmd_add(&c, "");
    sched_cmd_add(&c, plan_json != NULL ? plan_json : "");
    sched_cmd_add(&c, num);
    sched_cmd_add(&c, seen);
    if (sched_cmd_add_event(&c, now, type, message) != FLPS_OK)
        c.oom = 1;
    rc = sched_store_eval_int(st, SCHED_SCRIPT_PLAN_PUT, 4, &c, &done);
    if (rc != FLPS_OK)
        return rc;
    *committed = done == 1;
    return FLPS_OK;
}

/* ---- Lease ---- */

flps_err sched_store_lease(sched_store *st, const char *id, long lease_ms,
                           int *held)
{
    redisReply *r = NULL;
    flps_err rc;

    rc = rconn_cmd(st->rc, &r, "SET flps:leader %s NX PX %ld", id, lease_ms);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    *held = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (*held)
        return FLPS_OK;
    {
        sched_cmd c = {0};
        long long renewed = 0;

        sched_cmd_add(&c, "flps:leader");
        sched_cmd_add(&c, id);
        sched_cmd_addf(&c, "%ld", lease_ms);
        rc =
            sched_store_eval_int(st, SCHED_SCRIPT_LEASE_RENEW, 1, &c, &renewed);
        if (rc != FLPS_OK)
            return rc;
        *held = renewed == 1;
    }
    return FLPS_OK;
}

flps_err sched_store_lease_release(sched_store *st, const char *id)
{
    sched_cmd c = {0};

    sched_cmd_add(&c, "flps:leader");
    sched_cmd_add(&c, id);
    return sched_store_eval(st, SCHED_SCRIPT_LEASE_RELEASE, 1, &c, NULL);
}
