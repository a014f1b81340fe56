/* Embedded HTTP server on libmicrohttpd: one handler for every request. */
#include "services/httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
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
#include "common/tcplisten.h"
#include "services/httpd_cert.h"

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
 * being reset by MHD at the cap. Deadlines alone still let one client that
 * reconnects as fast as it is closed keep every slot (300 slow connections
 * answered every other request 503 for a minute): a connection that has
 * sat a second without a whole request gives its slot up to a newcomer,
 * and an address proven by a handler may take the slot of any connection
 * still waiting for its first request (httpd.h). */
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

#define HTTPD_KNOWN 64          /* established addresses remembered */
#define HTTPD_KNOWN_MIN_AGE 0.1 /* what an established client may evict */

/* A client's address without its port: what "one client" means. */
typedef struct httpd_addr {
    int family; /* AF_INET, AF_INET6; 0: unknown */
    unsigned char bytes[16];
} httpd_addr;

/* One open connection, as the watchdog sees it. */
typedef struct httpd_conn {
    int in_use;
    int fd;
    int over;        /* opened above the soft limit: answered 503 */
    int answering;   /* a response is queued: the deadline is off */
    int reaped;      /* the watchdog shut the socket down */
    int headers;     /* its first request's headers are in */
    int served;      /* it completed a request (kept alive since) */
    double deadline; /* flps_mono_s() by which the request must be in */
    double waiting;  /* flps_mono_s() since which it waits for a request */
    httpd_addr addr;
    struct httpd *owner; /* for the certificate callback */
} httpd_conn;

/* An address a handler proved (httpd_response.proven), and when. */
typedef struct httpd_known {
    httpd_addr addr;
    double at;
} httpd_known;

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
    int tls;          /* serving HTTPS */
    httpd_cert *cert; /* what it serves (TLS only; thread-safe itself) */
    char bound[128];
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t watchdog;
    int stopping;
    httpd_conn conns[HTTPD_MAX_CONNS];
    size_t nconns;  /* in use, reaped ones included until closed */
    size_t nreaped; /* of which shut down, not closed yet */
    httpd_known known[HTTPD_KNOWN];
    unsigned long reaped, busy, evicted; /* not yet logged */
    double last_reap_log, last_busy_log, last_evict_log;
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

/* The client address of conn (family 0 when MHD does not say). */
static void conn_addr(struct MHD_Connection *conn, httpd_addr *out)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;

    memset(out, 0, sizeof(*out));
    if (sa != NULL && sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)sa;
        out->family = AF_INET;
        memcpy(out->bytes, &a->sin_addr, sizeof(a->sin_addr));
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)sa;
        out->family = AF_INET6;
        memcpy(out->bytes, &a->sin6_addr, sizeof(a->sin6_addr));
    }
}

static int addr_eq(const httpd_addr *a, const httpd_addr *b)
{
    return a->family != 0 && a->family == b->family &&
           memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

/* ---- Who gives a slot up (h->lock held for all of these) ---- */

/* Whether c has sat HTTPD_STALE_S without a whole request. */
static int conn_is_stale(const httpd_conn *c, double now)
{
    return c->in_use && !c->answering && !c->reaped &&
           now - c->waiting >= HTTPD_STALE_S;
}

/* Shut c's socket down: MHD's thread then closes the connection. */
static void conn_shut(httpd *h, httpd_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    c->reaped = 1;
    h->nreaped++;
}

/* The oldest stale connection, of addr when it is not NULL: one that
 * never completed a request before one kept alive. NULL when none. */
static httpd_conn *oldest_stale(httpd *h, const httpd_addr *addr, double now)
{
    httpd_conn *best = NULL;

    for (size_t i = 0; i < HTTPD_MAX_CONNS; i++) {
        httpd_conn *c = &h->conns[i];

        if (!conn_is_stale(c, now) ||
            (addr != NULL && !addr_eq(&c->addr, addr)))
            continue;
        if (best == NULL || c->served < best->served ||
            (c->served == best->served && c->waiting < best->waiting))
            best = c;
    }
    return best;
}

static size_t count_stale(const httpd *h, const httpd_addr *addr, double now)
{
    size_t n = 0;

    for (size_t i = 0; i < HTTPD_MAX_CONNS; i++)
        n += conn_is_stale(&h->conns[i], now) &&
             addr_eq(&h->conns[i].addr, addr);
    return n;
}

/* Whether a handler proved addr within HTTPD_ESTABLISHED_S. */
static int addr_is_known(const httpd *h, const httpd_addr *addr, double now)
{
    for (size_t i = 0; i < HTTPD_KNOWN; i++)
        if (addr_eq(&h->known[i].addr, addr) &&
            now - h->known[i].at < HTTPD_ESTABLISHED_S)
            return 1;
    return 0;
}

static void remember_proven(httpd *h, const httpd_addr *addr, double now)
{
    httpd_known *slot = &h->known[0];

    if (addr->family == 0)
        return;
    for (size_t i = 0; i < HTTPD_KNOWN; i++) {
        if (addr_eq(&h->known[i].addr, addr)) {
            slot = &h->known[i];
            break;
        }
        if (h->known[i].at < slot->at)
            slot = &h->known[i]; /* the longest unproven, or a free one */
    }
    slot->addr = *addr;
    slot->at = now;
}

/* For an established newcomer: the oldest connection of a stranger still
 * waiting for its first request; NULL when none. */
static httpd_conn *oldest_stranger(httpd *h, double now)
{
    httpd_conn *best = NULL;

    for (size_t i = 0; i < HTTPD_MAX_CONNS; i++) {
        httpd_conn *c = &h->conns[i];

        if (!c->in_use || c->answering || c->reaped || c->served ||
            now - c->waiting < HTTPD_KNOWN_MIN_AGE ||
            addr_is_known(h, &c->addr, now))
            continue;
        if (best == NULL || c->waiting < best->waiting)
            best = c;
    }
    return best;
}

/* Make room for a new connection from addr: its address's oldest stale
 * connection goes when it holds per_client_stale of them; at the soft
 * limit the oldest stale one goes, else for an established client the
 * oldest stranger's. 1 when there is room. */
static int admit(httpd *h, const httpd_addr *addr, double now)
{
    httpd_conn *victim;

    if (addr->family != 0 &&
        count_stale(h, addr, now) >= h->lim.per_client_stale) {
        conn_shut(h, oldest_stale(h, addr, now));
        h->evicted++;
    }
    if (h->nconns - h->nreaped < h->lim.soft_conns)
        return 1;
    victim = oldest_stale(h, NULL, now);
    if (victim == NULL && addr_is_known(h, addr, now))
        victim = oldest_stranger(h, now);
    if (victim == NULL)
        return 0;
    conn_shut(h, victim);
    h->evicted++;
    return 1;
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
        if (c != NULL && !c->over) {
            /* The headers (and a handshake) are in: the rest of the
             * request has the request deadline from the start. */
            pthread_mutex_lock(&h->lock);
            c->headers = 1;
            if (c->deadline < c->waiting + h->lim.request_deadline_s)
                c->deadline = c->waiting + h->lim.request_deadline_s;
            pthread_mutex_unlock(&h->lock);
        }
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
    if (resp.proven) {
        httpd_conn *c = conn_slot(conn);

        pthread_mutex_lock(&h->lock);
        if (c != NULL)
            remember_proven(h, &c->addr, flps_mono_s());
        pthread_mutex_unlock(&h->lock);
    }
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
        c->served = 1;
        c->waiting = flps_mono_s();
        c->deadline = c->waiting + h->lim.request_deadline_s;
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
    httpd_addr addr;

    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        conn_addr(conn, &addr);
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
            int over = !admit(h, &addr, now);

            memset(c, 0, sizeof(*c));
            c->in_use = 1;
            c->owner = h;
            c->fd = ci->connect_fd;
            c->addr = addr;
            c->over = over;
            c->waiting = now;
            /* One over the limit is answered at once or not at all; the
             * others have the header deadline (their handshake too). */
            c->deadline = now + (c->over ? 1.0 : h->lim.header_deadline_s);
            h->nconns++;
        }
        *socket_context = c; /* NULL: answered 503 (no slot) */
    } else if (c != NULL) {
        if (c->reaped)
            h->nreaped--;
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
    double next_cert = flps_mono_s() + 1.0;

    pthread_mutex_lock(&h->lock);
    while (!h->stopping) {
        struct timespec ts;
        double now = flps_mono_s();
        unsigned long n = 0, evicted = 0;

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
            conn_shut(h, c);
            h->reaped++;
        }
        if (h->reaped > 0 && now - h->last_reap_log >= HTTPD_REAP_LOG_S) {
            n = h->reaped;
            h->reaped = 0;
            h->last_reap_log = now;
        }
        if (h->evicted > 0 && now - h->last_evict_log >= HTTPD_REAP_LOG_S) {
            evicted = h->evicted;
            h->evicted = 0;
            h->last_evict_log = now;
        }
        if (n > 0 || evicted > 0) {
            pthread_mutex_unlock(&h->lock);
            if (n > 0)
                log_warn("http: closed %lu connection(s) that had not sent "
                         "a whole request within its deadline (%.1f s, the "
                         "first one's headers %.1f s)",
                         n, h->lim.request_deadline_s,
                         h->lim.header_deadline_s);
            if (evicted > 0)
                log_warn("http: closed %lu connection(s) that had sent no "
                         "whole request for %.0f s to make room for new "
                         "ones",
                         evicted, HTTPD_STALE_S);
            pthread_mutex_lock(&h->lock);
        }
        if (h->cert != NULL && now >= next_cert) {
            /* A renewed certificate on disk, and the expiry warning. */
            next_cert = now + 1.0;
            pthread_mutex_unlock(&h->lock);
            httpd_cert_tick(h->cert);
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

int httpd_listen_is_any(const char *where)
{
    return tcplisten_is_any(where);
}

const httpd_limits *httpd_default_limits(void)
{
    static const httpd_limits def = {
        .request_deadline_s = HTTPD_REQUEST_DEADLINE_S,
        .soft_conns = HTTPD_SOFT_CONNS,
        .header_deadline_s = HTTPD_HEADER_DEADLINE_S,
        .per_client_stale = HTTPD_PER_CLIENT_STALE,
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
    flps_free(tls->cert_path);
    flps_free(tls->key_path);
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
    httpd_tls t = {NULL, NULL, NULL, NULL};
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
    if (rc == FLPS_OK && ((t.cert_path = flps_strdup(cert_path)) == NULL ||
                          (t.key_path = flps_strdup(key_path)) == NULL))
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    if (rc != FLPS_OK) {
        httpd_tls_fini(&t);
        return rc;
    }
    *out = t;
    return FLPS_OK;
}

/* libmicrohttpd's certificate callback (GnuTLS's retrieve function): the
 * certificate served now, so a renewed one is used from the next
 * handshake on while the connections open keep theirs. MHD makes the
 * connection the session's pointer. */
static int on_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_dn,
                   int nreqs, const gnutls_pk_algorithm_t *pk_algos,
                   int pk_algos_length, gnutls_pcert_st **pcert,
                   unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    struct MHD_Connection *conn = gnutls_session_get_ptr(session);
    httpd_conn *c = conn != NULL ? conn_slot(conn) : NULL;

    (void)req_ca_dn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    if (c == NULL || c->owner == NULL || c->owner->cert == NULL)
        return -1; /* no slot: the handshake fails */
    httpd_cert_current(c->owner->cert, pcert, pcert_length, pkey);
    return 0;
}

int httpd_tls_info(httpd *h, httpd_cert_info *out)
{
    if (h == NULL || h->cert == NULL)
        return 0;
    httpd_cert_info_get(h->cert, out);
    return 1;
}

flps_err httpd_tls_reload(httpd *h)
{
    if (h == NULL || h->cert == NULL)
        return FLPS_EINVAL;
    return httpd_cert_reload(h->cert, 1);
}

flps_err httpd_start_tls(const char *where, size_t max_body,
                         const httpd_limits *lim, const httpd_tls *tls,
                         httpd_handler h, void *arg, httpd **out, char *bound,
                         size_t boundlen)
{
    struct MHD_OptionItem tls_opts[3];
    char host[256], port[8];
    unsigned int flags = MHD_USE_ERROR_LOG | MHD_USE_POLL_INTERNAL_THREAD |
                         MHD_USE_THREAD_PER_CONNECTION;
    httpd *d;
    int fd = -1;
    flps_err rc;

    if (where == NULL || h == NULL || out == NULL || lim == NULL ||
        !(lim->request_deadline_s > 0) || lim->soft_conns == 0 ||
        lim->soft_conns >= HTTPD_MAX_CONNS || !(lim->header_deadline_s >= 0) ||
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
    /* Zero: the defaults; a header deadline never past the request's. */
    if (d->lim.header_deadline_s == 0)
        d->lim.header_deadline_s = HTTPD_HEADER_DEADLINE_S;
    if (d->lim.header_deadline_s > d->lim.request_deadline_s)
        d->lim.header_deadline_s = d->lim.request_deadline_s;
    if (d->lim.per_client_stale == 0)
        d->lim.per_client_stale = HTTPD_PER_CLIENT_STALE;
    memset(tls_opts, 0, sizeof(tls_opts));
    tls_opts[0].option = MHD_OPTION_END;
    if (tls != NULL) {
        d->tls = 1;
        if (tcplisten_split(where, host, sizeof(host), port, sizeof(port)) !=
            FLPS_OK)
            host[0] = '\0';
        rc = httpd_cert_create(tls, host, &d->cert);
        if (rc != FLPS_OK) {
            flps_free(d);
            return rc;
        }
        flags |= MHD_USE_TLS;
        tls_opts[0].option = MHD_OPTION_HTTPS_CERT_CALLBACK;
        tls_opts[0].ptr_value = (void *)on_cert;
        tls_opts[1].option = MHD_OPTION_HTTPS_PRIORITIES;
        tls_opts[1].ptr_value = (void *)HTTPD_TLS_PRIORITIES;
        tls_opts[2].option = MHD_OPTION_END;
    }
    rc = tcplisten_open(where, HTTPD_BACKLOG, &fd, d->bound, sizeof(d->bound));
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
    httpd_cert_destroy(d->cert);
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
    httpd_cert_destroy(h->cert);
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
