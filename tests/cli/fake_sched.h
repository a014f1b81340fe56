/* A tiny fake of flsched's HTTP API for the flsubmit tests: a real
 * libmicrohttpd server on 127.0.0.1 (port 0) that answers canned replies
 * per method and path and records every request it got. */
#ifndef FLPS_TESTS_CLI_FAKE_SCHED_H
#define FLPS_TESTS_CLI_FAKE_SCHED_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FAKE_MAX_ROUTES 16
#define FAKE_MAX_SEQ 16
#define FAKE_MAX_REQS 128

/* One canned answer: replies[0], replies[1], ... for successive requests,
 * the last one repeated. */
typedef struct fake_route {
    char method[8];
    char path[256];             /* without the query */
    int status;                 /* of every reply, unless statuses[k] */
    int statuses[FAKE_MAX_SEQ]; /* non-zero: the status of reply k */
    const char *replies[FAKE_MAX_SEQ];
    size_t nreplies, served;
    unsigned delay_ms; /* wait this long before answering */
} fake_route;

typedef struct fake_req {
    char method[8];
    char path[256];
    char query[512]; /* "k=v&k=v" in the order given */
    char auth[256];  /* the Authorization header, "" if none */
    char *body;
    size_t len;
} fake_req;

typedef struct fake_sched {
    struct MHD_Daemon *daemon;
    uint16_t port;
    char url[64];
    pthread_mutex_t lock; /* guards routes' served, reqs, nreqs */
    fake_route routes[FAKE_MAX_ROUTES];
    size_t nroutes;
    fake_req reqs[FAKE_MAX_REQS];
    size_t nreqs;
} fake_sched;

/* Answer method path with status, then each reply in turn (NULL ends the
 * list; the last repeats). Call before the first request. */
static inline fake_route *fake_route_seq(fake_sched *fs, const char *method,
                                         const char *path, int status, ...)
{
    fake_route *r = &fs->routes[fs->nroutes++];
    va_list ap;
    const char *s;

    cr_assert(fs->nroutes <= FAKE_MAX_ROUTES);
    snprintf(r->method, sizeof(r->method), "%s", method);
    snprintf(r->path, sizeof(r->path), "%s", path);
    r->status = status;
    va_start(ap, status);
    while ((s = va_arg(ap, const char *)) != NULL && r->nreplies < FAKE_MAX_SEQ)
        r->replies[r->nreplies++] = s;
    va_end(ap);
    return r;
}

static inline fake_route *fake_route_add(fake_sched *fs, const char *method,
                                         const char *path, int status,
                                         const char *reply)
{
    return fake_route_seq(fs, method, path, status, reply, (const char *)NULL);
}

typedef struct fake_conn {
    char *body;
    size_t len;
} fake_conn;

static enum MHD_Result fake_query_it(void *arg, enum MHD_ValueKind kind,
                                     const char *key, const char *value)
{
    fake_req *q = arg;
    size_t n = strlen(q->query);

    (void)kind;
    snprintf(q->query + n, sizeof(q->query) - n, "%s%s=%s", n ? "&" : "", key,
             value ? value : "");
    return MHD_YES;
}

static enum MHD_Result fake_handler(void *cls, struct MHD_Connection *conn,
                                    const char *url, const char *method,
                                    const char *version,
                                    const char *upload_data,
                                    size_t *upload_size, void **con_cls)
{
    fake_sched *fs = cls;
    fake_conn *fc = *con_cls;
    fake_route *route = NULL;
    struct MHD_Response *resp;
    const char *auth, *reply = "{\"error\": \"no route in the fake\"}";
    int status = 404;
    unsigned delay = 0;
    enum MHD_Result ret;

    (void)version;
    if (fc == NULL) {
        fc = calloc(1, sizeof(*fc));
        *con_cls = fc;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        fc->body = realloc(fc->body, fc->len + *upload_size + 1);
        memcpy(fc->body + fc->len, upload_data, *upload_size);
        fc->len += *upload_size;
        fc->body[fc->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&fs->lock);
    if (fs->nreqs < FAKE_MAX_REQS) {
        fake_req *q = &fs->reqs[fs->nreqs++];

        snprintf(q->method, sizeof(q->method), "%s", method);
        snprintf(q->path, sizeof(q->path), "%s", url);
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, fake_query_it,
                                  q);
        auth =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
        snprintf(q->auth, sizeof(q->auth), "%s", auth ? auth : "");
        q->body = fc->body;
        q->len = fc->len;
        fc->body = NULL;
    }
    for (size_t i = 0; i < fs->nroutes; i++)
        if (strcmp(fs->routes[i].method, method) == 0 &&
            strcmp(fs->routes[i].path, url) == 0)
            route = &fs->routes[i];
    if (route != NULL) {
        size_t k = route->served < route->nreplies ? route->served
                                                   : route->nreplies - 1;

        route->served++;
        reply = route->replies[k];
        status = route->statuses[k] ? route->statuses[k] : route->status;
        delay = route->delay_ms;
    }
    pthread_mutex_unlock(&fs->lock);
    if (delay)
        usleep(delay * 1000u);
    resp = MHD_create_response_from_buffer(strlen(reply), (void *)reply,
                                           MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    ret = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void fake_completed(void *cls, struct MHD_Connection *conn,
                           void **con_cls, enum MHD_RequestTerminationCode toe)
{
    fake_conn *fc = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (fc != NULL) {
        free(fc->body);
        free(fc);
        *con_cls = NULL;
    }
}

/* Keep paths and query values as sent, so tests see the client's escaping
 * (libmicrohttpd would decode "%2F" into "/"). */
static size_t fake_no_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* Start the fake on 127.0.0.1 at a port the kernel picks. */
static inline void fake_start(fake_sched *fs)
{
    struct sockaddr_in sin;
    const union MHD_DaemonInfo *info;

    memset(fs, 0, sizeof(*fs));
    pthread_mutex_init(&fs->lock, NULL);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = 0;
    fs->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, fake_handler, fs, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&sin, MHD_OPTION_NOTIFY_COMPLETED, fake_completed,
        fs, MHD_OPTION_UNESCAPE_CALLBACK, fake_no_unescape, NULL,
        MHD_OPTION_END);
    cr_assert_not_null(fs->daemon, "the fake scheduler starts");
    info = MHD_get_daemon_info(fs->daemon, MHD_DAEMON_INFO_BIND_PORT);
    cr_assert_not_null(info);
    fs->port = info->port;
    snprintf(fs->url, sizeof(fs->url), "http://127.0.0.1:%u",
             (unsigned)fs->port);
}

static inline void fake_stop(fake_sched *fs)
{
    MHD_stop_daemon(fs->daemon);
    for (size_t i = 0; i < fs->nreqs; i++)
        free(fs->reqs[i].body);
    pthread_mutex_destroy(&fs->lock);
}

/* How many requests arrived so far (a snapshot). */
static inline size_t fake_nreqs(fake_sched *fs)
{
    size_t n;

    pthread_mutex_lock(&fs->lock);
    n = fs->nreqs;
    pthread_mutex_unlock(&fs->lock);
    return n;
}

/* A copy of request i (body not copied: valid until fake_stop). */
static inline fake_req fake_req_at(fake_sched *fs, size_t i)
{
    fake_req q;

    pthread_mutex_lock(&fs->lock);
    cr_assert_lt(i, fs->nreqs, "request %zu arrived", i);
    q = fs->reqs[i];
    pthread_mutex_unlock(&fs->lock);
    return q;
}

/* A loopback port that refuses connections: bound, never listening, so
 * nothing else can take it while the test runs. Close *fd afterwards. */
static inline uint16_t fake_dead_port(int *fd)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);

    *fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(*fd, 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(*fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    cr_assert_eq(getsockname(*fd, (struct sockaddr *)&sin, &len), 0);
    return ntohs(sin.sin_port);
}

#endif
