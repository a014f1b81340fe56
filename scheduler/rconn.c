/* A Redis connection with clear errors and reconnection. */
#include "scheduler/rconn.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "scheduler/rtls.h"

/* Enough for every script flsched and flagent run; a fixed table keeps a
 * script's id stable for the connection's life. */
#define RCONN_SCRIPTS_MAX 32

/* A registered Lua script: its text (borrowed) and the SHA1 Redis gave
 * for it ("" until loaded on this connection's current server). */
typedef struct rconn_script {
    const char *lua;
    char sha[41];
} rconn_script;

/* One of ctx (redis://: hiredis's own socket) and tls (rediss://: our TLS
 * socket, hiredis's protocol) is set while connected. */
struct rconn {
    redisContext *ctx;  /* NULL while disconnected */
    rtls *tls;          /* NULL while disconnected */
    int use_tls;        /* a rediss:// URL */
    char ca_file[1024]; /* FLPS_REDIS_CA; "" for the system's CAs */
    char tls_err[512];  /* why the last TLS command failed */
    char host[256];
    int port;
    char user[128];
    char password[256];
    int db;
    int timeout_ms;
    char addr[300];
    char err[512];
    int was_down; /* to log "reconnected" once */
    rconn_script scripts[RCONN_SCRIPTS_MAX];
    int nscripts;
};

/* The length of url's scheme and "://" (8 or 9), 0 for anything but
 * redis:// and rediss://. */
static size_t url_prefix(const char *url)
{
    if (url == NULL)
        return 0;
    if (strncmp(url, "redis://", 8) == 0)
        return 8;
    if (strncmp(url, "rediss://", 9) == 0)
        return 9;
    return 0;
}

int rconn_url_is_tls(const char *url)
{
    return url_prefix(url) == 9;
}

void rconn_redact_url(const char *url, char *out, size_t len)
{
    const char *p, *at, *slash, *colon;
    size_t pre = url_prefix(url);

    if (len == 0)
        return;
    if (pre == 0) {
        /* Not a URL we can take apart: show none of it. */
        snprintf(out, len, "%s", url == NULL ? "(null)" : "(not a redis URL)");
        return;
    }
    p = url + pre;
    slash = strchr(p, '/');
    at = memchr(p, '@', slash ? (size_t)(slash - p) : strlen(p));
    if (at == NULL) {
        snprintf(out, len, "%s", url);
        return;
    }
    colon = memchr(p, ':', (size_t)(at - p));
    /* Keep the user name (not a secret), hide everything after it. */
    snprintf(out, len, "%.*s%.*s:***@%s", (int)pre, url,
             colon ? (int)(colon - p) : (int)(at - p), p, at + 1);
}

flps_err rconn_parse_url(const char *url, char *host, size_t hostlen, int *port,
                         char *password, size_t pwlen, int *db, char *errbuf,
                         size_t errlen)
{
    const char *p, *at, *hostp, *colon, *slash, *end;
    char shown[512];

    if (url_prefix(url) == 0) {
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "'%s' is not a Redis URL; expected "
                               "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] "
                               "(rediss:// for TLS)",
                               url ? url : "(null)");
    }
    p = url + url_prefix(url);
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
            return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                                   "the password in the Redis URL is too "
                                   "long");
        }
        memcpy(password, pw, (size_t)(at - pw));
        password[at - pw] = '\0';
        hostp = at + 1;
    }
    colon = memchr(hostp, ':', (size_t)(slash - hostp));
    {
        const char *hend = colon ? colon : slash;
        if (hend == hostp || (size_t)(hend - hostp) >= hostlen) {
            return flps_errbuf_set(
                errbuf, errlen, FLPS_EINVAL, "the Redis URL '%s' has no host",
                (rconn_redact_url(url, shown, sizeof(shown)), shown));
        }
        memcpy(host, hostp, (size_t)(hend - hostp));
        host[hend - hostp] = '\0';
    }
    *port = 6379;
    if (colon != NULL) {
        /* The port ends at the '/' (or the end): parse a copy. */
        char num[16];
        size_t n = (size_t)(slash - colon - 1);

        if (n >= sizeof(num) ||
            (memcpy(num, colon + 1, n), num[n] = '\0',
             flps_parse_int(NULL, num, 1, 65535, port, NULL, 0)) != FLPS_OK)
            return flps_errbuf_set(
                errbuf, errlen, FLPS_EINVAL,
                "the port in the Redis URL '%s' is not 1..65535",
                (rconn_redact_url(url, shown, sizeof(shown)), shown));
    }
    *db = 0;
    if (slash != end && slash[1] != '\0' &&
        flps_parse_int(NULL, slash + 1, 0, 1000000, db, NULL, 0) != FLPS_OK)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EINVAL,
            "the database in the Redis URL '%s' is not a number",
            (rconn_redact_url(url, shown, sizeof(shown)), shown));
    return FLPS_OK;
}

static void rconn_drop(rconn *rc)
{
    if (rc->ctx != NULL) {
        redisFree(rc->ctx);
        rc->ctx = NULL;
    }
    rtls_close(rc->tls);
    rc->tls = NULL;
}

static int rconn_is_up(const rconn *rc)
{
    return rc->ctx != NULL || rc->tls != NULL;
}

/* Why the last command on the connection failed. */
static const char *rconn_ioerr(const rconn *rc)
{
    if (rc->use_tls)
        return rc->tls_err[0] ? rc->tls_err : "no connection";
    return rc->ctx ? rc->ctx->errstr : "no connection";
}

/* One formatted command over TLS; NULL when it failed (why: tls_err).
 * Takes cmd (redisFreeCommand). */
static redisReply *rconn_tls_send(rconn *rc, char *cmd, int len)
{
    redisReply *r = NULL;

    if (len < 0 || cmd == NULL) {
        snprintf(rc->tls_err, sizeof(rc->tls_err),
                 "cannot format the command (out of memory)");
        return NULL;
    }
    if (rc->tls == NULL)
        snprintf(rc->tls_err, sizeof(rc->tls_err), "no connection");
    else if (rtls_command(rc->tls, cmd, (size_t)len, &r, rc->tls_err,
                          sizeof(rc->tls_err)) != FLPS_OK)
        r = NULL;
    redisFreeCommand(cmd);
    return r;
}

/* redisvCommand / redisCommandArgv on whichever connection is up: NULL
 * on a connection failure, as hiredis. */
static redisReply *rconn_vcommand(rconn *rc, const char *fmt, va_list ap)
{
    char *cmd = NULL;
    int len;

    if (!rc->use_tls)
        return redisvCommand(rc->ctx, fmt, ap);
    len = redisvFormatCommand(&cmd, fmt, ap);
    return rconn_tls_send(rc, cmd, len);
}

static redisReply *rconn_command(rconn *rc, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = rconn_vcommand(rc, fmt, ap);
    va_end(ap);
    return r;
}

static redisReply *rconn_argv(rconn *rc, int argc, const char **argv,
                              const size_t *argvlen)
{
    char *cmd = NULL;
    int len;

    if (!rc->use_tls)
        return redisCommandArgv(rc->ctx, argc, argv, argvlen);
    len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    return rconn_tls_send(rc, cmd, len);
}

/* The sticky message of a connection failure; evaluates to FLPS_EIO. */
#define rconn_fail(rc, ...)                                                    \
    flps_errbuf_set((rc)->err, sizeof((rc)->err), FLPS_EIO, __VA_ARGS__)

static flps_err rconn_check(rconn *rc, redisReply *r, redisReply **reply);

/* SCRIPT LOAD script i on the connected server and keep its SHA1. */
static flps_err rconn_load(rconn *rc, int i)
{
    rconn_script *s = &rc->scripts[i];
    redisReply *r = NULL;
    flps_err err;

    s->sha[0] = '\0';
    err = rconn_check(rc, rconn_command(rc, "SCRIPT LOAD %s", s->lua), &r);
    if (err != FLPS_OK)
        return err;
    if (r->type != REDIS_REPLY_STRING || r->len != sizeof(s->sha) - 1) {
        freeReplyObject(r);
        return flps_errbuf_set(rc->err, sizeof(rc->err), FLPS_EPROTO,
                               "Redis at %s answered SCRIPT LOAD oddly",
                               rc->addr);
    }
    memcpy(s->sha, r->str, r->len + 1);
    freeReplyObject(r);
    return FLPS_OK;
}

/* Whether the server closed the connection while it sat idle (a Redis
 * restart): between a reply and the next command nothing may arrive, so
 * a readable or hung-up socket is a closed one. Found before a command is
 * sent, so reconnecting then cannot run any command twice; without it the
 * first command after a restart failed ("lost Redis") and only the next
 * one reconnected. */
static int rconn_closed_by_server(const rconn *rc)
{
    struct pollfd p = {rc->ctx ? rc->ctx->fd : -1, POLLIN | POLLRDHUP, 0};

    if (rc->tls != NULL)
        return rtls_closed_by_server(rc->tls);

    if (rc->ctx->fd < 0 || poll(&p, 1, 0) != 1)
        return 0;
    return (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

static flps_err rconn_connect(rconn *rc)
{
    struct timeval tv = {rc->timeout_ms / 1000, (rc->timeout_ms % 1000) * 1000};
    redisReply *r;

    if (rconn_is_up(rc) && rconn_closed_by_server(rc)) {
        log_warn("Redis at %s closed the connection; reconnecting", rc->addr);
        rconn_drop(rc);
        rc->was_down = 1;
    }
    if (rconn_is_up(rc))
        return FLPS_OK;
    if (rc->use_tls) {
        char why[512];
        flps_err e = rtls_connect(rc->host, rc->port, rc->ca_file,
                                  rc->timeout_ms, &rc->tls, why, sizeof(why));

        if (e != FLPS_OK) {
            rc->was_down = 1;
            /* A certificate that does not verify stays so: like wrong
             * credentials, a daemon stops with the reason. */
            return flps_errbuf_set(rc->err, sizeof(rc->err),
                                   e == FLPS_ECONFIG ? FLPS_ECONFIG : FLPS_EIO,
                                   "Redis over TLS: %s", why);
        }
    } else {
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
    }
    if (rc->password[0] != '\0') {
        if (rc->user[0] != '\0')
            r = rconn_command(rc, "AUTH %s %s", rc->user, rc->password);
        else
            r = rconn_command(rc, "AUTH %s", rc->password);
        if (r == NULL) {
            rconn_fail(rc, "Redis at %s: %s", rc->addr, rconn_ioerr(rc));
            rconn_drop(rc);
            return FLPS_EIO;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            /* Wrong credentials stay wrong: say so once and for all. */
            flps_errbuf_set(rc->err, sizeof(rc->err), FLPS_ECONFIG,
                            "Redis at %s refused the credentials%s%s: %s; "
                            "check the password (FLPS_REDIS_PASSWORD_FILE, "
                            "FLPS_REDIS_PASSWORD or the --redis URL)%s",
                            rc->addr, rc->user[0] ? " of user " : "", rc->user,
                            r->str, rc->user[0] ? " and the ACL user" : "");
            freeReplyObject(r);
            rconn_drop(rc);
            return FLPS_ECONFIG;
        }
        freeReplyObject(r);
    } else {
        /* No password given: a server that wants one says NOAUTH on the
         * first command; PING tells now, with a message that says what
         * to set. */
        r = rconn_command(rc, "PING");
        if (r != NULL && r->type == REDIS_REPLY_ERROR &&
            strncmp(r->str, "NOAUTH", 6) == 0) {
            flps_errbuf_set(rc->err, sizeof(rc->err), FLPS_ECONFIG,
                            "Redis at %s needs a password: %s; set "
                            "FLPS_REDIS_PASSWORD_FILE (or "
                            "FLPS_REDIS_PASSWORD, or --redis "
                            "redis://:PASSWORD@HOST:PORT)",
                            rc->addr, r->str);
            freeReplyObject(r);
            rconn_drop(rc);
            return FLPS_ECONFIG;
        }
        if (r == NULL) {
            rconn_fail(rc, "Redis at %s: %s", rc->addr, rconn_ioerr(rc));
            rconn_drop(rc);
            return FLPS_EIO;
        }
        freeReplyObject(r);
    }
    if (rc->db != 0) {
        r = rconn_command(rc, "SELECT %d", rc->db);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            rconn_fail(rc, "Redis at %s: cannot select database %d: %s",
                       rc->addr, rc->db, r ? r->str : rconn_ioerr(rc));
            if (r)
                freeReplyObject(r);
            rconn_drop(rc);
            return FLPS_EIO;
        }
        freeReplyObject(r);
    }
    /* A new server (or a restarted one) has none of our scripts: load them
     * all now, so the first EVALSHA of each finds it. One that Redis
     * refuses keeps no SHA1 and reports why when it is run. */
    for (int i = 0; i < rc->nscripts; i++) {
        flps_err err = rconn_load(rc, i);

        if (err == FLPS_EIO)
            return err; /* rconn_check dropped the connection */
        if (err != FLPS_OK)
            log_error("%s", rc->err);
    }
    if (rc->was_down) {
        log_info("connected to Redis at %s", rc->addr);
        rc->was_down = 0;
    }
    rc->err[0] = '\0';
    return FLPS_OK;
}

/* "USER:PASS" from the URL's user part, or the password from the
 * environment when the URL has none (see rconn.h). */
static flps_err rconn_credentials(rconn *rc, const char *url)
{
    const char *file = getenv("FLPS_REDIS_PASSWORD_FILE");
    const char *env = getenv("FLPS_REDIS_PASSWORD");
    const char *user = getenv("FLPS_REDIS_USER");
    char *colon;

    if (rc->password[0] != '\0') {
        /* rconn_parse_url drops a leading ':'; any other colon splits an
         * ACL user from its password. */
        colon = url[url_prefix(url)] == ':' ? NULL : strchr(rc->password, ':');
        if (colon != NULL) {
            size_t n = (size_t)(colon - rc->password);
            if (n >= sizeof(rc->user))
                n = sizeof(rc->user) - 1;
            memcpy(rc->user, rc->password, n);
            rc->user[n] = '\0';
            memmove(rc->password, colon + 1, strlen(colon + 1) + 1);
        }
        return FLPS_OK;
    }
    if (file != NULL && file[0] != '\0') {
        FILE *f = fopen(file, "r");
        if (f == NULL || fgets(rc->password, sizeof(rc->password), f) == NULL) {
            log_error("cannot read the Redis password from %s "
                      "(FLPS_REDIS_PASSWORD_FILE): %s",
                      file, f == NULL ? strerror(errno) : "empty file");
            if (f != NULL)
                fclose(f);
            return FLPS_EIO;
        }
        fclose(f);
        rc->password[strcspn(rc->password, "\r\n")] = '\0';
    } else if (env != NULL) {
        snprintf(rc->password, sizeof(rc->password), "%s", env);
    }
    if (rc->password[0] != '\0' && user != NULL)
        snprintf(rc->user, sizeof(rc->user), "%s", user);
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
    rc_err = rconn_credentials(rc, url);
    if (rc_err != FLPS_OK) {
        flps_free(rc);
        return rc_err;
    }
    rc->timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    rc->use_tls = rconn_url_is_tls(url);
    if (rc->use_tls) {
        const char *ca = getenv("FLPS_REDIS_CA");

        if (ca != NULL && strlen(ca) >= sizeof(rc->ca_file)) {
            log_error("FLPS_REDIS_CA is longer than %zu bytes",
                      sizeof(rc->ca_file) - 1);
            flps_free(rc);
            return FLPS_EINVAL;
        }
        snprintf(rc->ca_file, sizeof(rc->ca_file), "%s", ca ? ca : "");
    }
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
        rconn_fail(rc, "lost Redis at %s: %s", rc->addr, rconn_ioerr(rc));
        rconn_drop(rc);
        rc->was_down = 1;
        return FLPS_EIO;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        flps_errbuf_set(rc->err, sizeof(rc->err), FLPS_EREMOTE,
                        "Redis at %s replied: %s", rc->addr, r->str);
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
    r = rconn_vcommand(rc, fmt, ap);
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
    r = rconn_argv(rc, argc, argv, argvlen);
    return rconn_check(rc, r, reply);
}

flps_err rconn_script_add(rconn *rc, const char *lua, int *id)
{
    int i;

    if (lua == NULL || id == NULL)
        return FLPS_EINVAL;
    if (rc->nscripts == RCONN_SCRIPTS_MAX)
        return flps_errbuf_set(rc->err, sizeof(rc->err), FLPS_EINVAL,
                               "more than %d Lua scripts on one connection",
                               RCONN_SCRIPTS_MAX);
    i = rc->nscripts++;
    rc->scripts[i].lua = lua;
    rc->scripts[i].sha[0] = '\0';
    /* Loaded now when connected, else at the connect that comes first. A
     * failure here is no error: the first run loads it again and says. */
    if (rconn_is_up(rc))
        (void)rconn_load(rc, i);
    *id = i;
    return FLPS_OK;
}

/* Whether r is Redis saying it does not know the SHA1 (a restart, SCRIPT
 * FLUSH or a failover emptied its script cache). */
static int rconn_is_noscript(const redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_ERROR &&
           strncmp(r->str, "NOSCRIPT", 8) == 0;
}

flps_err rconn_script_run(rconn *rc, redisReply **reply, int id, int nkeys,
                          int argc, const char **argv, const size_t *argvlen)
{
    const char **av;
    size_t *al;
    char nk[16];
    redisReply *r = NULL;
    flps_err err;

    if (id < 0 || id >= rc->nscripts || nkeys < 0 || nkeys > argc)
        return FLPS_EINVAL;
    err = rconn_connect(rc);
    if (err != FLPS_OK)
        return err;
    if (rc->scripts[id].sha[0] == '\0') {
        err = rconn_load(rc, id);
        if (err != FLPS_OK)
            return err;
    }
    av = flps_malloc((size_t)(argc + 3) * sizeof(*av));
    al = flps_malloc((size_t)(argc + 3) * sizeof(*al));
    if (av == NULL || al == NULL) {
        flps_free(av);
        flps_free(al);
        return FLPS_ENOMEM;
    }
    snprintf(nk, sizeof(nk), "%d", nkeys);
    av[0] = "EVALSHA";
    av[1] = rc->scripts[id].sha;
    av[2] = nk;
    for (int i = 0; i < argc; i++) {
        av[i + 3] = argv[i];
        al[i + 3] = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
    }
    for (int i = 0; i < 3; i++)
        al[i] = strlen(av[i]);
    r = rconn_argv(rc, argc + 3, av, al);
    /* NOSCRIPT means the script did not run, so running it again after
     * loading it cannot do its work twice. */
    if (rconn_is_noscript(r)) {
        freeReplyObject(r);
        r = NULL;
        err = rconn_load(rc, id);
        if (err == FLPS_OK)
            r = rconn_argv(rc, argc + 3, av, al);
    }
    flps_free(av);
    flps_free(al);
    if (err != FLPS_OK)
        return err;
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
