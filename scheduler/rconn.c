/* A Redis connection with clear errors and reconnection. */
#include "scheduler/rconn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"

struct rconn {
    redisContext *ctx; /* NULL while disconnected */
    char host[256];
    int port;
    char password[256];
    int db;
    int timeout_ms;
    char addr[300];
    char err[512];
    int was_down; /* to log "reconnected" once */
};

flps_err rconn_parse_url(const char *url, char *host, size_t hostlen, int *port,
                         char *password, size_t pwlen, int *db, char *errbuf,
                         size_t errlen)
{
    const char *p, *at, *hostp, *colon, *slash, *end;
    long v;
    char *e;

    if (url == NULL || strncmp(url, "redis://", 8) != 0) {
        snprintf(errbuf, errlen,
                 "'%s' is not a Redis URL; expected "
                 "redis://[:PASSWORD@]HOST[:PORT][/DB]",
                 url ? url : "(null)");
        return FLPS_EINVAL;
    }
    p = url + 8;
    end = p + strlen(p);
    slash = strchr(p, '/');
    if (slash == NULL)
        slash = end;
    at = memchr(p, '@', (size_t)(slash - p));
    password[0] = '\0';
    hostp = p;
    if (at != NULL) {
        const char *pw = p;
        if (*pw == ':')
            pw++;
        if ((size_t)(at - pw) >= pwlen) {
            snprintf(errbuf, errlen,
                     "the password in the Redis URL is too "
                     "long");
            return FLPS_EINVAL;
        }
        memcpy(password, pw, (size_t)(at - pw));
        password[at - pw] = '\0';
        hostp = at + 1;
    }
    colon = memchr(hostp, ':', (size_t)(slash - hostp));
    {
        const char *hend = colon ? colon : slash;
        if (hend == hostp || (size_t)(hend - hostp) >= hostlen) {
            snprintf(errbuf, errlen, "the Redis URL '%s' has no host", url);
            return FLPS_EINVAL;
        }
        memcpy(host, hostp, (size_t)(hend - hostp));
        host[hend - hostp] = '\0';
    }
    *port = 6379;
    if (colon != NULL) {
        errno = 0;
        v = strtol(colon + 1, &e, 10);
        if (errno != 0 || e != slash || v < 1 || v > 65535) {
            snprintf(errbuf, errlen,
                     "the port in the Redis URL '%s' is not 1..65535", url);
            return FLPS_EINVAL;
        }
        *port = (int)v;
    }
    *db = 0;
    if (slash != end && slash[1] != '\0') {
        errno = 0;
        v = strtol(slash + 1, &e, 10);
        if (errno != 0 || *e != '\0' || v < 0 || v > 1000000) {
            snprintf(errbuf, errlen,
                     "the database in the Redis URL '%s' is not a number", url);
            return FLPS_EINVAL;
        }
        *db = (int)v;
    }
    return FLPS_OK;
}

static void rconn_drop(rconn *rc)
{
    if (rc->ctx != NULL) {
        redisFree(rc->ctx);
        rc->ctx = NULL;
    }
}

static flps_err rconn_fail(rconn *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static flps_err rconn_fail(rconn *rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rc->err, sizeof(rc->err), fmt, ap);
    va_end(ap);
    return FLPS_EIO;
}

static flps_err rconn_connect(rconn *rc)
{
    struct timeval tv = {rc->timeout_ms / 1000, (rc->timeout_ms % 1000) * 1000};
    redisReply *r;

    if (rc->ctx != NULL)
        return FLPS_OK;
    rc->ctx = redisConnectWithTimeout(rc->host, rc->port, tv);
    if (rc->ctx == NULL)
        return rconn_fail(rc, "redis at %s: out of memory", rc->addr);
    if (rc->ctx->err) {
        rconn_fail(rc,
                   "cannot reach Redis at %s: %s; is redis-server "
                   "running there?",
                   rc->addr, rc->ctx->errstr);
        rconn_drop(rc);
        rc->was_down = 1;
        return FLPS_EIO;
    }
    redisSetTimeout(rc->ctx, tv);
    redisEnableKeepAlive(rc->ctx);
    if (rc->password[0] != '\0') {
        r = redisCommand(rc->ctx, "AUTH %s", rc->password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            rconn_fail(rc, "Redis at %s refused the password: %s", rc->addr,
                       r ? r->str : rc->ctx->errstr);
            if (r)
                freeReplyObject(r);
            rconn_drop(rc);
            return FLPS_EIO;
        }
        freeReplyObject(r);
    }
    if (rc->db != 0) {
        r = redisCommand(rc->ctx, "SELECT %d", rc->db);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            rconn_fail(rc, "Redis at %s: cannot select database %d: %s",
                       rc->addr, rc->db, r ? r->str : rc->ctx->errstr);
            if (r)
                freeReplyObject(r);
            rconn_drop(rc);
            return FLPS_EIO;
        }
        freeReplyObject(r);
    }
    if (rc->was_down) {
        log_info("connected to Redis at %s", rc->addr);
        rc->was_down = 0;
    }
    rc->err[0] = '\0';
    return FLPS_OK;
}

flps_err rconn_create(const char *url, int timeout_ms, rconn **out)
{
    rconn *rc;
    char errbuf[256];
    flps_err rc_err;

    rc = flps_calloc(1, sizeof(*rc));
    if (rc == NULL)
        return FLPS_ENOMEM;
    rc_err = rconn_parse_url(url, rc->host, sizeof(rc->host), &rc->port,
                             rc->password, sizeof(rc->password), &rc->db,
                             errbuf, sizeof(errbuf));
    if (rc_err != FLPS_OK) {
        log_error("%s", errbuf);
        flps_free(rc);
        return rc_err;
    }
    rc->timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    snprintf(rc->addr, sizeof(rc->addr), "%s:%d", rc->host, rc->port);
    rc->was_down = 1;
    (void)rconn_connect(rc); /* errors surface on the first command */
    *out = rc;
    return FLPS_OK;
}

void rconn_destroy(rconn *rc)
{
    if (rc == NULL)
        return;
    rconn_drop(rc);
    flps_free(rc);
}

static flps_err rconn_check(rconn *rc, redisReply *r, redisReply **reply)
{
    if (r == NULL) {
        /* The context is unusable after an I/O error: reconnect next time. */
        rconn_fail(rc, "lost Redis at %s: %s", rc->addr,
                   rc->ctx ? rc->ctx->errstr : "no connection");
        rconn_drop(rc);
        rc->was_down = 1;
        return FLPS_EIO;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(rc->err, sizeof(rc->err), "Redis at %s replied: %s", rc->addr,
                 r->str);
        freeReplyObject(r);
        return FLPS_EREMOTE;
    }
    *reply = r;
    return FLPS_OK;
}

flps_err rconn_cmd(rconn *rc, redisReply **reply, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    flps_err err = rconn_connect(rc);

    if (err != FLPS_OK)
        return err;
    va_start(ap, fmt);
    r = redisvCommand(rc->ctx, fmt, ap);
    va_end(ap);
    return rconn_check(rc, r, reply);
}

flps_err rconn_cmdv(rconn *rc, redisReply **reply, int argc, const char **argv,
                    const size_t *argvlen)
{
    redisReply *r;
    flps_err err = rconn_connect(rc);

    if (err != FLPS_OK)
        return err;
    r = redisCommandArgv(rc->ctx, argc, argv, argvlen);
    return rconn_check(rc, r, reply);
}

flps_err rconn_ping(rconn *rc)
{
    redisReply *r = NULL;
    flps_err err = rconn_cmd(rc, &r, "PING");

    if (err == FLPS_OK)
        freeReplyObject(r);
    return err;
}

const char *rconn_address(const rconn *rc)
{
    return rc->addr;
}

const char *rconn_error(const rconn *rc)
{
    return rc->err;
}
