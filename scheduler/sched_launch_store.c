/* The store's part for the kubernetes launcher and its pods' reports
 * (sched_launch_store.h). */
#include "scheduler/sched_launch_store.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/numparse.h"
#include "scheduler/sched_store_int.h"

#define LAUNCHED_KEY "flps:k8s:jobs"
/* As flagent caps a job's log stream. */
#define LOG_MAXLEN "10000"

/* Both checked and changed in one step: a cancel or a failure between a
 * read and a write must win. */
static const char waiting_lua[] =
    "local v = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'reason')\n"
    "if v[1] ~= 'RUNNING' or v[2] ~= ARGV[1] then return 0 end\n"
    "if ARGV[2] == '1' then\n"
    "  if v[3] == ARGV[3] then return 0 end\n"
    "  redis.call('HSET', KEYS[1], 'reason', ARGV[3])\n"
    "  return 1\n"
    "end\n"
    "if v[3] ~= ARGV[3] then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'reason', '')\n"
    "return 1\n";

static const char report_lua[] =
    "local v = redis.call('HMGET', KEYS[1], 'state', 'attempt')\n"
    "if v[1] ~= 'RUNNING' or v[2] ~= ARGV[1] then return 0 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV, 2))\n"
    "return 1\n";

static const char task_set_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV))\n"
    "return 1\n";

/* EVAL of a script this file owns, with c's arguments (keys first). */
static flps_err eval_text(sched_store *st, const char *lua, int nkeys,
                          sched_cmd *c, long long *out)
{
    sched_cmd e = {0};
    redisReply *r = NULL;
    flps_err rc;

    sched_cmd_add(&e, "EVAL");
    sched_cmd_add(&e, lua);
    sched_cmd_addf(&e, "%d", nkeys);
    for (int i = 0; i < c->argc; i++)
        sched_cmd_addb(&e, c->argv[i], c->len[i]);
    e.oom |= c->oom;
    sched_cmd_free(c);
    if (e.oom) {
        sched_cmd_free(&e);
        return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
    }
    rc = rconn_cmdv(st->rc, &r, e.argc, (const char **)e.argv, e.len);
    sched_cmd_free(&e);
    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    if (out != NULL)
        *out = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_launched(sched_store *st, char ***ids, size_t *n)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "SMEMBERS " LAUNCHED_KEY);
    char **v;
    size_t k = 0;

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    v = flps_calloc(r->elements + 1, sizeof(*v));
    for (size_t i = 0; v != NULL && i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_STRING)
            continue;
        v[k] = sched_store_dup(r->element[i]->str, r->element[i]->len);
        if (v[k] == NULL) {
            sched_strv_free(v, k);
            v = NULL;
            break;
        }
        k++;
    }
    freeReplyObject(r);
    if (v == NULL)
        return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
    *ids = v;
    *n = k;
    return FLPS_OK;
}

flps_err sched_store_launched_add(sched_store *st, const char *id)
{
    redisReply *r = NULL;

    return sched_store_drop(
        st, rconn_cmd(st->rc, &r, "SADD " LAUNCHED_KEY " %s", id), &r);
}

flps_err sched_store_launched_remove(sched_store *st, const char *id)
{
    redisReply *r = NULL;

    return sched_store_drop(
        st, rconn_cmd(st->rc, &r, "SREM " LAUNCHED_KEY " %s", id), &r);
}

flps_err sched_store_launched_attempt(sched_store *st, const char *id,
                                      long *attempt)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "HGET flps:job:%s k8s_attempt", id);

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    *attempt = r->type == REDIS_REPLY_STRING && r->len > 0
                   ? (long)sched_store_to_u64(r->str)
                   : -1;
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_launched_set_attempt(sched_store *st, const char *id,
                                          long attempt)
{
    redisReply *r = NULL;
    flps_err rc;

    if (attempt < 0)
        rc = rconn_cmd(st->rc, &r, "HDEL flps:job:%s k8s_attempt", id);
    else
        rc = rconn_cmd(st->rc, &r, "HSET flps:job:%s k8s_attempt %ld", id,
                       attempt);
    return sched_store_drop(st, rc, &r);
}

flps_err sched_store_job_credentials(sched_store *st, const char *id,
                                     char **out)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "HGET flps:job:%s credentials", id);

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    *out = NULL;
    if (r->type == REDIS_REPLY_STRING && r->len > 0) {
        *out = sched_store_dup(r->str, r->len);
        explicit_bzero(r->str, r->len);
        if (*out == NULL) {
            freeReplyObject(r);
            return sched_store_seterr(st, FLPS_ENOMEM, "out of memory");
        }
    }
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_task_set(sched_store *st, const char *key,
                              const char *const *fv, size_t n)
{
    sched_cmd c = {0};

    if (n == 0)
        return FLPS_OK;
    sched_cmd_add(&c, key);
    for (size_t i = 0; i < 2 * n; i++)
        sched_cmd_add(&c, fv[i]);
    return eval_text(st, task_set_lua, 1, &c, NULL);
}

flps_err sched_store_task_get(sched_store *st, const char *key,
                              const char *field, char *buf, size_t len)
{
    redisReply *r = NULL;
    flps_err rc = rconn_cmd(st->rc, &r, "HGET %s %s", key, field);

    if (rc != FLPS_OK)
        return sched_store_rerr(st, rc);
    buf[0] = '\0';
    if (r->type == REDIS_REPLY_STRING)
        sched_store_copy(buf, len, r->str, r->len);
    freeReplyObject(r);
    return FLPS_OK;
}

flps_err sched_store_task_exit(sched_store *st, const char *key, long code,
                               long sig, double at, const char *error)
{
    char when[64];
    redisReply *r = NULL;
    flps_err rc;

    flps_format_double(when, sizeof(when), at);
    /* The hash first: the loop that pops the key reads it at once. Both
     * run on the loop's own thread, so nothing pops in between. */
    rc = rconn_cmd(st->rc, &r,
                   "HSET %s state EXITED exit_code %ld signal %ld exited_at "
                   "%s error %s",
                   key, code, sig, when, error ? error : "");
    rc = sched_store_drop(st, rc, &r);
    if (rc != FLPS_OK)
        return rc;
    return sched_store_drop(
        st, rconn_cmd(st->rc, &r, "RPUSH flps:exits %s", key), &r);
}

flps_err sched_store_log_append(sched_store *st, const char *id,
                                const char *task, const char *const *lines,
                                size_t n)
{
    char stream[96];
    flps_err rc = FLPS_OK;

    snprintf(stream, sizeof(stream), "flps:job:%s:logs", id);
    for (size_t i = 0; i < n && rc == FLPS_OK; i++) {
        redisReply *r = NULL;

        rc = sched_store_drop(st,
                              rconn_cmd(st->rc, &r,
                                        "XADD %s MAXLEN ~ " LOG_MAXLEN
                                        " * task %s line %s",
                                        stream, task, lines[i]),
                              &r);
    }
    return rc;
}

flps_err sched_store_job_waiting(sched_store *st, const char *id,
                                 uint32_t attempt, const char *waiting,
                                 const char *was, int *changed)
{
    sched_cmd c = {0};
    char jk[64];
    long long res = 0;
    flps_err rc;

    sched_store_job_key(jk, sizeof(jk), id);
    sched_cmd_add(&c, jk);
    sched_cmd_addf(&c, "%u", attempt);
    sched_cmd_add(&c, waiting != NULL ? "1" : "0");
    sched_cmd_add(&c, waiting != NULL ? waiting : (was ? was : ""));
    rc = eval_text(st, waiting_lua, 1, &c, &res);
    if (rc == FLPS_OK)
        *changed = res == 1;
    return rc;
}

flps_err sched_store_job_report(sched_store *st, const char *id,
                                uint32_t attempt, const char *const *fv,
                                size_t n, int *stored)
{
    sched_cmd c = {0};
    char jk[64];
    long long res = 0;
    flps_err rc;

    *stored = 0;
    if (n == 0)
        return FLPS_OK;
    sched_store_job_key(jk, sizeof(jk), id);
    sched_cmd_add(&c, jk);
    sched_cmd_addf(&c, "%u", attempt);
    for (size_t i = 0; i < 2 * n; i++)
        sched_cmd_add(&c, fv[i]);
    rc = eval_text(st, report_lua, 1, &c, &res);
    if (rc == FLPS_OK)
        *stored = res == 1;
    return rc;
}
