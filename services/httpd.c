/* Embedded HTTP server on libmicrohttpd: one handler for every request. */
#include "services/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/strbuf.h"

/* Threading: MHD's internal polling thread accepts, then each connection
 * gets its own thread (MHD_USE_THREAD_PER_CONNECTION). Our traffic is a
 * control plane (a scrape every few seconds, a few API calls), so threads
 * are cheap, and a handler that blocks (the scheduler talks to Redis) then
 * stalls only its own client, which a fixed thread pool would not give us.
 * HTTPD_MAX_CONNS bounds the threads. poll() rather than select() because
 * daemons hold many other descriptors (ZeroMQ) and may pass FD_SETSIZE.
 *
 * Slow clients: MHD's own timeout restarts on every byte, so a client that
 * sends one byte every few seconds would hold its thread for ever and 64
 * of them took every slot. Each connection therefore gets a deadline for
 * its whole request (headers and body), which a watchdog thread enforces
 * with a 408 and a shutdown of the socket; and above a soft limit, well
 * below MHD's hard cap, a connection is answered 503 at once instead of
 * being reset by MHD at the cap. */
#define HTTPD_MAX_CONNS 512
#define HTTPD_IDLE_TIMEOUT_S 60
#define HTTPD_BACKLOG 512
#define HTTPD_TOO_LARGE 413
#define HTTPD_WATCH_MS 100
#define HTTPD_REAP_LOG_S 1.0 /* at most one "closed slow clients" line */
#define HTTPD_PEM_MAX ((size_t)1 << 20)
#define HTTPD_MHD_LOG_BURST 5 /* libmicrohttpd lines per second */
/* TLS 1.2 and 1.3 only, GnuTLS's NORMAL choice of ciphers within them. */
#define HTTPD_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

/* One open connection, as the watchdog sees it. */
typedef struct httpd_conn {
    int in_use;
    int fd;
    int over;        /* opened above the soft limit: answered 503 */
    int answering;   /* a response is queued: the deadline is off */
    int reaped;      /* the watchdog shut the socket down */
    double deadline; /* flps_mono_s() by which the request must be in */
} httpd_conn;

/* The fields above lock are written by httpd_start before MHD starts its
 * threads and only read afterwards (until httpd_stop has joined them), so
 * connection threads read them without a lock. lock guards conns, nconns,
 * stopping and the reap counters. */
struct httpd {
    struct MHD_Daemon *mhd;
    httpd_handler handler;
    void *arg;
    size_t max_body;
    httpd_limits lim;
    int tls;                  /* serving HTTPS */
    char *cert_pem, *key_pem; /* copies MHD reads at start (TLS only) */
    char bound[128];
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t watchdog;
    int stopping;
    httpd_conn conns[HTTPD_MAX_CONNS];
    size_t nconns;
    unsigned long reaped, busy; /* not yet logged */
    double last_reap_log, last_busy_log;
    double mhd_log_window; /* on_mhd_log's rate limit */
    unsigned mhd_log_lines;
    unsigned long mhd_log_dropped;
};

/* One request's state; owned by the connection's thread, which is the only
 * one that touches it (MHD calls on_request and on_completed there). */
typedef struct httpd_req_state {
    flps_strbuf body; /* all zero (as calloc leaves it) is empty */
    int too_large;    /* over max_body: the rest is discarded, then 413 */
} httpd_req_state;

/* libmicrohttpd's messages. A client can cause one per connection (under
 * TLS, every plain-text request makes "received handshake message out of
 * context"), so at most HTTPD_MHD_LOG_BURST lines a second are logged and
 * the next line says how many were not. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    httpd *h = cls;
    char line[512];
    size_t n;
    unsigned long dropped = 0;
    double now = flps_mono_s();

    pthread_mutex_lock(&h->lock);
    if (now - h->mhd_log_window >= 1.0) {
        h->mhd_log_window = now;
        h->mhd_log_lines = 0;
    }
    if (h->mhd_log_lines >= HTTPD_MHD_LOG_BURST) {
        h->mhd_log_dropped++;
        pthread_mutex_unlock(&h->lock);
        return;
    }
    h->mhd_log_lines++;
    dropped = h->mhd_log_dropped;
    h->mhd_log_dropped = 0;
    pthread_mutex_unlock(&h->lock);
    flps_errbuf_vset(line, sizeof(line), FLPS_EREMOTE, fmt, ap);
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (dropped > 0)
        log_warn("http: %s (and %lu more such messages not logged)", line,
                 dropped);
    else
        log_warn("http: %s", line);
}

/* The watchdog's record of conn (NULL when it has none). */
static httpd_conn *conn_slot(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci != NULL ? ci->socket_context : NULL;
}

/* A response is about to be queued on conn: the request is in, so its
 * deadline no longer applies (the handler may take its time). */
static void conn_answering(httpd *h, struct MHD_Connection *conn)
{
    httpd_conn *c = conn_slot(conn);

    if (c == NULL)
        return;
    pthread_mutex_lock(&h->lock);
    c->answering = 1;
    pthread_mutex_unlock(&h->lock);
}

static enum MHD_Result queue(struct MHD_Connection *conn, int status,
                             const char *content_type, char *body, size_t len)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (body != NULL && len > 0) {
        /* The body moves to MHD, which frees it after sending. */
        r = MHD_create_response_from_buffer_with_free_callback(len, body,
                                                               flps_free);
        if (r == NULL)
            flps_free(body);
    } else {
        flps_free(body);
        r = MHD_create_response_from_buffer(0, (void *)"",
                                            MHD_RESPMEM_PERSISTENT);
    }
    if (r == NULL)
        return MHD_NO; /* MHD closes the connection */
    if (content_type != NULL && content_type[0] != '\0')
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    ret = MHD_queue_response(conn, (unsigned int)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result queue_const(struct MHD_Connection *conn, int status,
                                   const char *json)
{
    char *b = flps_strdup(json);

    return queue(conn, status, "application/json", b, b ? strlen(b) : 0);
}

static enum MHD_Result too_large(httpd *h, struct MHD_Connection *conn,
                                 const char *url)
{
    log_warn("http: refused a body over %zu bytes for %s", h->max_body, url);
    return queue_const(conn, HTTPD_TOO_LARGE,
                       "{\"error\":\"request body too large\"}");
}

/* Above the soft limit of connections: a short 503 that tells the client
 * to come back, then MHD closes the connection. Logged at most once a
 * second (with the count), as a flood is what causes it. */
static enum MHD_Result busy(httpd *h, struct MHD_Connection *conn)
{
    static const char msg[] = "{\"error\":\"the server is busy (too many "
                              "open connections); retry in a second\"}";
    struct MHD_Response *r;
    enum MHD_Result ret;
    unsigned long n = 0;
    double now = flps_mono_s();

    pthread_mutex_lock(&h->lock);
    h->busy++;
    if (now - h->last_busy_log >= HTTPD_REAP_LOG_S) {
        n = h->busy;
        h->busy = 0;
        h->last_busy_log = now;
    }
    pthread_mutex_unlock(&h->lock);
    if (n > 0)
        log_warn("http: answered 503 to %lu connection(s) over the limit of "
                 "%u open connections",
                 n, h->lim.soft_conns);
    r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg,
                                        MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(conn, MHD_HTTP_SERVICE_UNAVAILABLE, r);
    MHD_destroy_response(r);
    return ret;
}

/* Append a chunk of the body, or mark the request too large. A failed
 * allocation sticks in the buffer and is answered with 500 at the end. */
static void append_body(httpd *h, httpd_req_state *rs, const char *data,
                        size_t n)
{
    if (rs->too_large || flps_strbuf_error(&rs->body) != FLPS_OK)
        return;
    if (n > h->max_body - rs->body.len) {
        rs->too_large = 1;
        flps_strbuf_fini(&rs->body);
        return;
    }
    flps_strbuf_append(&rs->body, data, n);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    httpd *h = cls;
    httpd_req_state *rs = *con_cls;
    httpd_request req;
    httpd_response resp;

    (void)version;
    if (rs == NULL) {
        /* First call: headers only. Refuse a declared oversize body now,
         * before the client sends it (MHD answers instead of sending
         * "100 Continue" and closes the connection afterwards). */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     "Content-Length");
        httpd_conn *c = conn_slot(conn);

        rs = flps_calloc(1, sizeof(*rs));
        if (rs == NULL)
            return MHD_NO;
        *con_cls = rs;
        if (c == NULL || c->over) {
            conn_answering(h, conn);
            return busy(h, conn);
        }
        if (cl != NULL) {
            uint64_t v;
            /* A malformed length is left to MHD, which refuses it. */
            if (flps_parse_u64("Content-Length", cl, 0, UINT64_MAX, &v, NULL,
                               0) == FLPS_OK &&
                v > h->max_body) {
                rs->too_large = 1;
                conn_answering(h, conn);
                return too_large(h, conn, url);
            }
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        append_body(h, rs, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    conn_answering(h, conn);
    if (rs->too_large)
        return too_large(h, conn, url);
    if (flps_strbuf_error(&rs->body) != FLPS_OK) {
        log_error("http: out of memory reading the body for %s %s", method,
                  url);
        return queue_const(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                           "{\"error\":\"out of memory\"}");
    }

    req.method = method;
    req.path = url;
    req.body = rs->body.data ? rs->body.data : "";
    req.body_len = rs->body.len;
    req.impl = conn;
    memset(&resp, 0, sizeof(resp));
    resp.status = 200;
    snprintf(resp.content_type, sizeof(resp.content_type), "%s",
             "application/json");
    h->handler(h->arg, &req, &resp);
    if (resp.status < 100 || resp.status > 999) {
        log_error("http: the handler for %s %s set status %d; answering 500",
                  method, url, resp.status);
        flps_free(resp.body);
        return queue_const(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                           "{\"error\":\"internal error\"}");
    }
    resp.content_type[sizeof(resp.content_type) - 1] = '\0';
    return queue(conn, resp.status, resp.content_type, resp.body,
                 resp.body_len);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    httpd_req_state *rs = *con_cls;
    httpd *h = cls;
    httpd_conn *c = conn_slot(conn);

    (void)toe;
    if (c != NULL) {
        /* A kept-alive connection has as long for its next request. */
        pthread_mutex_lock(&h->lock);
        c->answering = 0;
        c->deadline = flps_mono_s() + h->lim.request_deadline_s;
        pthread_mutex_unlock(&h->lock);
    }
    if (rs != NULL) {
        flps_strbuf_fini(&rs->body);
        flps_free(rs);
        *con_cls = NULL;
    }
}

/* MHD opens and closes connections: keep the watchdog's table. CLOSED
 * comes before MHD closes the descriptor (and under h->lock here), so the
 * watchdog never shuts down a descriptor that was reused meanwhile. */
static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    httpd *h = cls;
    httpd_conn *c = *socket_context;

    pthread_mutex_lock(&h->lock);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        double now = flps_mono_s();

        c = NULL;
        for (size_t i = 0; i < HTTPD_MAX_CONNS && ci != NULL; i++) {
            if (!h->conns[i].in_use) {
                c = &h->conns[i];
                break;
            }
        }
        if (c != NULL) {
            memset(c, 0, sizeof(*c));
            c->in_use = 1;
            c->fd = ci->connect_fd;
            c->over = h->nconns >= h->lim.soft_conns;
            /* One over the limit is answered at once or not at all. */
            c->deadline = now + (c->over ? 1.0 : h->lim.request_deadline_s);
            h->nconns++;
        }
        *socket_context = c; /* NULL: answered 503 (no slot) */
    } else if (c != NULL) {
        c->in_use = 0;
        h->nconns--;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&h->lock);
}

/* Shut down every connection past its deadline whose request is not in.
 * The 408 is written here because MHD is only reading on that socket; the
 * shutdown then wakes MHD's thread, which closes the connection. */
static void *watchdog_main(void *arg)
{
    static const char r408[] =
        "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nContent-Length: 59\r\n\r\n"
        "{\"error\":\"the request was not sent in time; send it whole\"}";
    httpd *h = arg;

    pthread_mutex_lock(&h->lock);
    while (!h->stopping) {
        struct timespec ts;
        double now = flps_mono_s();
        unsigned long n = 0;

        for (size_t i = 0; i < HTTPD_MAX_CONNS; i++) {
            httpd_conn *c = &h->conns[i];

            if (!c->in_use || c->answering || c->reaped || now < c->deadline)
                continue;
            /* Under TLS a plain-text 408 would be garbage to the client
             * (and the session is MHD's): just close. */
            if (!h->tls && send(c->fd, r408, sizeof(r408) - 1,
                                MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                /* The client is gone or not reading: just close. */
            }
            shutdown(c->fd, SHUT_RDWR);
            c->reaped = 1;
            h->reaped++;
        }
        if (h->reaped > 0 && now - h->last_reap_log >= HTTPD_REAP_LOG_S) {
            n = h->reaped;
            h->reaped = 0;
            h->last_reap_log = now;
        }
        if (n > 0) {
            pthread_mutex_unlock(&h->lock);
            log_warn("http: closed %lu connection(s) that had not sent a "
                     "whole request within %.1f s",
                     n, h->lim.request_deadline_s);
            pthread_mutex_lock(&h->lock);
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += HTTPD_WATCH_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->wake, &h->lock, &ts);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

static void watchdog_stop(httpd *h)
{
    pthread_mutex_lock(&h->lock);
    h->stopping = 1;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->watchdog, NULL);
}

/* Split "HOST:PORT" / "[V6]:PORT" / ":PORT" into host and port. */
static flps_err split_listen(const char *where, char *host, size_t hostlen,
                             char *port, size_t portlen)
{
    const char *colon, *hs = where, *he;
    uint64_t portnum;
    size_t n;

    if (where[0] == '[') {
        he = strchr(where, ']');
        if (he == NULL || he[1] != ':')
            return FLPS_EINVAL;
        hs = where + 1;
        colon = he + 1;
    } else {
        colon = strrchr(where, ':');
        if (colon == NULL)
            return FLPS_EINVAL;
        he = colon;
        if (memchr(where, ':', (size_t)(colon - where)) != NULL)
            return FLPS_EINVAL; /* an IPv6 address needs brackets */
    }
    n = (size_t)(he - hs);
    if (n >= hostlen)
        return FLPS_EINVAL;
    if (n == 0 || (n == 1 && hs[0] == '*'))
        snprintf(host, hostlen, "%s", "0.0.0.0");
    else
        snprintf(host, hostlen, "%.*s", (int)n, hs);
    n = strlen(colon + 1);
    if (n >= portlen || n > 5 ||
        flps_parse_u64(NULL, colon + 1, 0, 65535, &portnum, NULL, 0) != FLPS_OK)
        return FLPS_EINVAL;
    snprintf(port, portlen, "%s", colon + 1);
    return FLPS_OK;
}

int httpd_listen_is_any(const char *where)
{
    char host[256], port[8];
    struct addrinfo hints, *res = NULL;
    int any = 0;

    if (where == NULL ||
        split_listen(where, host, sizeof(host), port, sizeof(port)) != FLPS_OK)
        return 0;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    /* Resolved as httpd_start will: "0", "0.0.0.0", "::" and "[::0]" are
     * all the wildcard address. */
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            const struct sockaddr_in *a = (const void *)ai->ai_addr;
            any |= a->sin_addr.s_addr == htonl(INADDR_ANY);
        } else if (ai->ai_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const void *)ai->ai_addr;
            any |= IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr);
        }
    }
    freeaddrinfo(res);
    return any;
}

static const char *bind_hint(int err)
{
    switch (err) {
    case EADDRINUSE:
        return "another process holds that port: stop it or choose another "
               "port (port 0 picks a free one)";
    case EADDRNOTAVAIL:
        return "the host is not an address of this machine: use one of its "
               "addresses, 127.0.0.1, or 0.0.0.0 for every interface";
    case EACCES:
        return "ports below 1024 need privileges: use a higher port";
    default:
        return "check the address";
    }
}

/* Bind and listen on the first address of host:port that works. */
static flps_err open_listener(const char *where, int *fd_out, char *bound,
                              size_t boundlen)
{
    char host[256], port[8], hostbuf[INET6_ADDRSTRLEN];
    struct addrinfo hints, *res = NULL, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = -1, err = 0, one = 1, gai;

    if (split_listen(where, host, sizeof(host), port, sizeof(port)) !=
        FLPS_OK) {
        log_error("http: cannot listen on '%s': want HOST:PORT, e.g. "
                  "127.0.0.1:9100, [::1]:9100 or :9100",
                  where);
        return FLPS_EINVAL;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        log_error("http: cannot listen on %s: host '%s' does not resolve: %s",
                  where, host, gai_strerror(gai));
        return FLPS_EINVAL;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        /* Lets a restarted daemon rebind while old connections sit in
         * TIME_WAIT; a port another socket listens on still fails. */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, HTTPD_BACKLOG) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        log_error("http: cannot listen on %s: %s; %s", where, strerror(err),
                  bind_hint(err));
        return FLPS_ESYS;
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        err = errno;
        log_error("http: getsockname on %s failed: %s", where, strerror(err));
        close(fd);
        return FLPS_ESYS;
    }
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, hostbuf, sizeof(hostbuf));
        snprintf(bound, boundlen, "[%s]:%u", hostbuf,
                 (unsigned)ntohs(a->sin6_port));
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, hostbuf, sizeof(hostbuf));
        snprintf(bound, boundlen, "%s:%u", hostbuf,
                 (unsigned)ntohs(a->sin_port));
    }
    *fd_out = fd;
    return FLPS_OK;
}

const httpd_limits *httpd_default_limits(void)
{
    static const httpd_limits def = {
        .request_deadline_s = HTTPD_REQUEST_DEADLINE_S,
        .soft_conns = HTTPD_SOFT_CONNS,
    };

    return &def;
}

flps_err httpd_start(const char *where, size_t max_body, httpd_handler h,
                     void *arg, httpd **out, char *bound, size_t boundlen)
{
    return httpd_start_limits(where, max_body, httpd_default_limits(), h, arg,
                              out, bound, boundlen);
}

flps_err httpd_start_limits(const char *where, size_t max_body,
                            const httpd_limits *lim, httpd_handler h, void *arg,
                            httpd **out, char *bound, size_t boundlen)
{
    return httpd_start_tls(where, max_body, lim, NULL, h, arg, out, bound,
                           boundlen);
}

int httpd_tls_supported(void)
{
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

/* The wipe cannot be optimised away: the buffer is read through a
 * volatile pointer. */
static void wipe(char *p)
{
    volatile char *v = p;

    if (p == NULL)
        return;
    while (*v != '\0')
        *v++ = '\0';
}

void httpd_tls_fini(httpd_tls *tls)
{
    if (tls == NULL)
        return;
    wipe(tls->key_pem);
    flps_free(tls->key_pem);
    flps_free(tls->cert_pem);
    memset(tls, 0, sizeof(*tls));
}

/* Read path (a PEM file) whole into *out. what names it in messages
 * ("--tls-cert"). A key must be private to its owner. */
static flps_err read_pem(const char *what, const char *path, int is_key,
                         char **out, char *errbuf, size_t errlen)
{
    struct stat st;
    char *buf;
    size_t n = 0;
    ssize_t got;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_EIO, "%s %s: %s", what,
                               path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s %s is not a regular file", what, path);
    }
    /* Checked on the descriptor read, so a file swapped after the check
     * is not the one read. Our own key must be ours alone; a key root
     * owns may also be readable by its group (not writable), which is
     * how a Kubernetes Secret volume with fsGroup hands it to a non-root
     * container (PostgreSQL allows the same). Others: never. */
    if (is_key &&
        ((st.st_mode & S_IRWXO) != 0 ||
         (st.st_mode & (S_IWGRP | S_IXGRP)) != 0 ||
         ((st.st_mode & S_IRGRP) != 0 && (st.st_uid != 0 || geteuid() == 0)))) {
        close(fd);
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "%s %s can be read or written by group or others (mode %04o): "
            "a private key must be private; chmod 600 %s (or 400)",
            what, path, (unsigned)(st.st_mode & 07777), path);
    }
    if ((size_t)st.st_size > HTTPD_PEM_MAX) {
        close(fd);
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s %s is over %zu bytes: not a PEM file", what,
                               path, HTTPD_PEM_MAX);
    }
    buf = flps_malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    }
    while (n < (size_t)st.st_size &&
           (got = read(fd, buf + n, (size_t)st.st_size - n)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            buf[n] = '\0';
            wipe(buf);
            flps_free(buf);
            return flps_errbuf_set(errbuf, errlen, FLPS_EIO, "%s %s: %s", what,
                                   path, strerror(e));
        }
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    if (strlen(buf) != n || strstr(buf, "-----BEGIN ") == NULL) {
        wipe(buf);
        flps_free(buf);
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s %s holds no PEM text (-----BEGIN ...)", what,
                               path);
    }
    *out = buf;
    return FLPS_OK;
}

flps_err httpd_tls_load(const char *cert_path, const char *key_path,
                        httpd_tls *out, char *errbuf, size_t errlen)
{
    httpd_tls t = {NULL, NULL};
    flps_err rc;

    memset(out, 0, sizeof(*out));
    if (cert_path == NULL || key_path == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "TLS needs both a certificate and a key");
    if (!httpd_tls_supported())
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "this libmicrohttpd is built without TLS "
                               "(GnuTLS), so it cannot serve HTTPS; install "
                               "one with TLS or serve plain HTTP");
    rc = read_pem("--tls-cert", cert_path, 0, &t.cert_pem, errbuf, errlen);
    if (rc == FLPS_OK)
        rc = read_pem("--tls-key", key_path, 1, &t.key_pem, errbuf, errlen);
    if (rc != FLPS_OK) {
        httpd_tls_fini(&t);
        return rc;
    }
    *out = t;
    return FLPS_OK;
}

static void free_pems(httpd *d)
{
    wipe(d->key_pem);
    flps_free(d->key_pem);
    flps_free(d->cert_pem);
}

flps_err httpd_start_tls(const char *where, size_t max_body,
                         const httpd_limits *lim, const httpd_tls *tls,
                         httpd_handler h, void *arg, httpd **out, char *bound,
                         size_t boundlen)
{
    struct MHD_OptionItem tls_opts[4];
    unsigned int flags = MHD_USE_ERROR_LOG | MHD_USE_POLL_INTERNAL_THREAD |
                         MHD_USE_THREAD_PER_CONNECTION;
    httpd *d;
    int fd = -1;
    flps_err rc;

    if (where == NULL || h == NULL || out == NULL || lim == NULL ||
        !(lim->request_deadline_s > 0) || lim->soft_conns == 0 ||
        lim->soft_conns >= HTTPD_MAX_CONNS ||
        (tls != NULL && (tls->cert_pem == NULL || tls->key_pem == NULL)))
        return FLPS_EINVAL;
    if (tls != NULL && !httpd_tls_supported()) {
        log_error("http: cannot serve HTTPS: this libmicrohttpd is built "
                  "without TLS (GnuTLS)");
        return FLPS_ECONFIG;
    }
    d = flps_calloc(1, sizeof(*d));
    if (d == NULL)
        return FLPS_ENOMEM;
    d->handler = h;
    d->arg = arg;
    d->max_body = max_body;
    d->lim = *lim;
    memset(tls_opts, 0, sizeof(tls_opts));
    tls_opts[0].option = MHD_OPTION_END;
    if (tls != NULL) {
        d->tls = 1;
        d->cert_pem = flps_strdup(tls->cert_pem);
        d->key_pem = flps_strdup(tls->key_pem);
        if (d->cert_pem == NULL || d->key_pem == NULL) {
            rc = FLPS_ENOMEM;
            goto fail_pems;
        }
        flags |= MHD_USE_TLS;
        tls_opts[0].option = MHD_OPTION_HTTPS_MEM_CERT;
        tls_opts[0].ptr_value = d->cert_pem;
        tls_opts[1].option = MHD_OPTION_HTTPS_MEM_KEY;
        tls_opts[1].ptr_value = d->key_pem;
        tls_opts[2].option = MHD_OPTION_HTTPS_PRIORITIES;
        tls_opts[2].ptr_value = (void *)HTTPD_TLS_PRIORITIES;
        tls_opts[3].option = MHD_OPTION_END;
    }
    rc = open_listener(where, &fd, d->bound, sizeof(d->bound));
    if (rc != FLPS_OK)
        goto fail_pems;
    rc = FLPS_ESYS;
    if (pthread_mutex_init(&d->lock, NULL) != 0)
        goto fail_fd;
    if (pthread_cond_init(&d->wake, NULL) != 0)
        goto fail_lock;
    if (pthread_create(&d->watchdog, NULL, watchdog_main, d) != 0) {
        log_error("http: cannot start the connection watchdog thread");
        goto fail_cond;
    }
    d->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, d, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, d, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, d,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, d,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)HTTPD_MAX_CONNS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTPD_IDLE_TIMEOUT_S,
        MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (d->mhd == NULL) {
        log_error("http: cannot start the server on %s (libmicrohttpd "
                  "refused%s; see its message above)",
                  d->bound,
                  d->tls ? ": check that --tls-cert and --tls-key are a "
                           "certificate and its private key"
                         : "");
        goto fail_watchdog;
    }
    /* GnuTLS has its own copies now: ours are wiped and freed at stop. */
    log_info("http: listening on %s%s", d->bound, d->tls ? " (https)" : "");
    if (bound != NULL && boundlen > 0)
        snprintf(bound, boundlen, "%s", d->bound);
    *out = d;
    return FLPS_OK;

fail_watchdog:
    watchdog_stop(d);
fail_cond:
    pthread_cond_destroy(&d->wake);
fail_lock:
    pthread_mutex_destroy(&d->lock);
fail_fd:
    close(fd);
fail_pems:
    free_pems(d);
    flps_free(d);
    return rc;
}

void httpd_stop(httpd *h)
{
    if (h == NULL)
        return;
    /* Joins the polling thread and every connection thread, so no handler
     * runs after this; MHD closes the listening socket we gave it. Then no
     * connection is left for the watchdog. */
    MHD_stop_daemon(h->mhd);
    watchdog_stop(h);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->lock);
    free_pems(h);
    flps_free(h);
}

const char *httpd_query(const httpd_request *req, const char *key)
{
    const char *v = NULL;
    size_t vlen = 0;

    if (req == NULL || req->impl == NULL || key == NULL)
        return NULL;
    if (MHD_lookup_connection_value_n(req->impl, MHD_GET_ARGUMENT_KIND, key,
                                      strlen(key), &v, &vlen) != MHD_YES)
        return NULL;
    return v != NULL ? v : "";
}

const char *httpd_header(const httpd_request *req, const char *name)
{
    if (req == NULL || req->impl == NULL || name == NULL)
        return NULL;
    return MHD_lookup_connection_value(req->impl, MHD_HEADER_KIND, name);
}

flps_err httpd_respond_printf(httpd_response *resp, int status, const char *fmt,
                              ...)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    va_list ap;
    flps_err rc;
    size_t n;
    char *body;

    va_start(ap, fmt);
    rc = flps_strbuf_vprintf(&b, fmt, ap);
    va_end(ap);
    if (rc != FLPS_OK) {
        flps_strbuf_fini(&b);
        return rc;
    }
    n = b.len;
    body = flps_strbuf_take(&b);
    if (body == NULL)
        return FLPS_ENOMEM;
    flps_free(resp->body);
    resp->body = body;
    resp->body_len = n;
    resp->status = status;
    return FLPS_OK;
}

flps_err httpd_respond(httpd_response *resp, int status,
                       const char *content_type, const char *body,
                       size_t body_len)
{
    char *b;

    if (content_type != NULL &&
        strlen(content_type) >= sizeof(resp->content_type))
        return FLPS_EINVAL;
    b = flps_malloc(body_len + 1);
    if (b == NULL)
        return FLPS_ENOMEM;
    if (body_len > 0)
        memcpy(b, body, body_len);
    b[body_len] = '\0';
    flps_free(resp->body);
    resp->body = b;
    resp->body_len = body_len;
    resp->status = status;
    if (content_type != NULL)
        snprintf(resp->content_type, sizeof(resp->content_type), "%s",
                 content_type);
    return FLPS_OK;
}
