/* A small embedded HTTP/1.1 server (libmicrohttpd) for /metrics, /healthz
 * and the scheduler's JSON API: one handler callback sees every request. */
#ifndef FLPS_SERVICES_HTTPD_H
#define FLPS_SERVICES_HTTPD_H

#include <stddef.h>

#include "common/err.h"

typedef struct httpd httpd;

/* One request, borrowed for the handler call. */
typedef struct httpd_request {
    const char *method; /* "GET", "POST", "DELETE", ... */
    const char *path;   /* "/v1/jobs/j3" (no query), percent-decoded */
    const char *body;   /* NUL-terminated copy of the body ("" if none) */
    size_t body_len;
    void *impl; /* for httpd_query / httpd_header */
} httpd_request;

/* The handler's answer. The server fills the defaults before the call. */
typedef struct httpd_response {
    int status;            /* default 200 */
    char content_type[64]; /* default "application/json" */
    char *body;            /* flps_malloc'd; the server frees it (NULL ok) */
    size_t body_len;
    int proven; /* default 0; the handler sets 1 when the request proved
                   the client may use the service (a valid token): its
                   address is then an established client's for
                   HTTPD_ESTABLISHED_S (see httpd_limits) */
} httpd_response;

/* Called on one of the server's threads, possibly on several at once: must
 * be thread-safe. May block (each connection has its own thread), but
 * httpd_stop waits for it. */
typedef void (*httpd_handler)(void *arg, const httpd_request *req,
                              httpd_response *resp);

/* What a slow or greedy client may hold. A connection must deliver each
 * whole request (headers and body) within request_deadline_s of opening
 * (or of its previous answer, when kept alive): one byte at a time does
 * not extend it. Past it the server answers 408 and closes the connection
 * (logged at most once a second, with a count). A new connection must
 * deliver its first request's headers, the TLS handshake included, within
 * header_deadline_s (a stalled handshake is closed then).
 * A connection that has sat HTTPD_STALE_S without a whole request (or,
 * kept alive, without its next one) is stale, and gives its slot up to a
 * newcomer: when a client address holds per_client_stale stale
 * connections, its oldest one is closed for each new one it opens; and
 * while soft_conns connections are open, a new one takes the slot of the
 * oldest stale connection (one that never completed a request first).
 * Only when none is stale is the newcomer answered 503 with Retry-After: 1
 * and closed, instead of being reset, unless its address is an
 * established client's (a handler proved it within HTTPD_ESTABLISHED_S):
 * that one takes the slot of the oldest connection that has not completed
 * a request, so established clients are served while strangers are
 * throttled. soft_conns must be below the server's hard cap of 512
 * connections (one thread each). Closed connections are logged at most
 * once a second with a count. */
typedef struct httpd_limits {
    double request_deadline_s;     /* > 0 */
    unsigned int soft_conns;       /* 1..511 */
    double header_deadline_s;      /* 0: HTTPD_HEADER_DEADLINE_S, or
                                      request_deadline_s when shorter */
    unsigned int per_client_stale; /* 0: HTTPD_PER_CLIENT_STALE */
} httpd_limits;

#define HTTPD_REQUEST_DEADLINE_S 10.0
#define HTTPD_SOFT_CONNS 256
#define HTTPD_HEADER_DEADLINE_S 5.0
#define HTTPD_PER_CLIENT_STALE 32
#define HTTPD_STALE_S 1.0
#define HTTPD_ESTABLISHED_S 600.0

/* The defaults: HTTPD_REQUEST_DEADLINE_S, HTTPD_SOFT_CONNS,
 * HTTPD_HEADER_DEADLINE_S and HTTPD_PER_CLIENT_STALE. Static. */
const httpd_limits *httpd_default_limits(void);

/* Listen on listen, "HOST:PORT" ("127.0.0.1:9100", "[::1]:0", ":9100" or
 * "*:9100" for every interface; PORT 0 picks a free port) and serve every
 * request with h(arg, ...). If bound is not NULL it gets the "HOST:PORT"
 * actually bound (numeric host). Requests whose body is over max_body bytes get
 * 413 without calling the handler. Slow clients are bounded as httpd_limits
 * says, with httpd_default_limits(). Logs "http: listening on HOST:PORT", or
 * why it could not (FLPS_ESYS, e.g. the port is taken). FLPS_EINVAL: listen is
 * not HOST:PORT or HOST does not resolve. Caller owns *out (httpd_stop);
 * arg is borrowed until httpd_stop returns. */
flps_err httpd_start(const char *listen, size_t max_body, httpd_handler h,
                     void *arg, httpd **out, char *bound, size_t boundlen);

/* Whether listen ("HOST:PORT" as for httpd_start) names every interface:
 * an empty HOST, "*", or an address that resolves to 0.0.0.0 or ::. 0 for
 * anything else, including text httpd_start would refuse. May resolve a
 * host name (blocks). */
int httpd_listen_is_any(const char *listen);

/* httpd_start with limits other than the defaults (lim is copied).
 * FLPS_EINVAL also for limits outside the ranges above. */
flps_err httpd_start_limits(const char *listen, size_t max_body,
                            const httpd_limits *lim, httpd_handler h, void *arg,
                            httpd **out, char *bound, size_t boundlen);

/* TLS for the server: its certificate (the chain, leaf first) and private
 * key, both PEM, as httpd_tls_load read them, and where from. */
typedef struct httpd_tls {
    char *cert_pem;  /* flps_malloc'd, NUL-terminated */
    char *key_pem;   /* flps_malloc'd; httpd_tls_fini wipes it */
    char *cert_path; /* flps_malloc'd: the server reads them again when */
    char *key_path;  /* they change; NULL: never reloaded */
} httpd_tls;

/* What the certificate served says (its leaf), for logs and /v1/info. */
typedef struct httpd_cert_info {
    double not_before, not_after; /* Unix seconds */
    char subject[256];            /* its common name, "" if none */
    char names[512];              /* "DNS:a, IP:1.2.3.4", "" if none */
    int host_ok;           /* names the host the server listens on (1 when that
                              is every interface: nothing to check) */
    double loaded;         /* Unix seconds it was (re)loaded */
    unsigned long reloads; /* renewed certificates served since start */
} httpd_cert_info;

/* Whether this libmicrohttpd can serve HTTPS (it is built with GnuTLS). */
int httpd_tls_supported(void);

/* Read the certificate from cert_path and the key from key_path into *out.
 * The key file must not be readable or writable by group or others:
 * FLPS_ECONFIG ("chmod 600 FILE"), as for a file that is no PEM text or is
 * over 1 MiB. (One exception: a key owned by root, read by a process that
 * is not root, may be readable by its group, mode 0440 or 0640, as a
 * Kubernetes Secret volume with fsGroup gives it.) FLPS_EIO: a file cannot be
 * read. FLPS_ECONFIG also when libmicrohttpd has no TLS (httpd_tls_supported).
 * The message is in errbuf (file names, never key bytes). Ownership: on FLPS_OK
 * the caller owns what *out holds (httpd_tls_fini); on error *out is zeroed. */
flps_err httpd_tls_load(const char *cert_path, const char *key_path,
                        httpd_tls *out, char *errbuf, size_t errlen);

/* Free what tls holds (the key wiped first) and zero it; a zeroed one is
 * fine. */
void httpd_tls_fini(httpd_tls *tls);

/* httpd_start_limits serving HTTPS only when tls is not NULL (its PEM is
 * copied; tls is borrowed for the call). A client speaking plain HTTP to
 * it gets no HTTP answer: the handshake fails and the connection closes.
 * A certificate or key that GnuTLS refuses is FLPS_ESYS, with its message
 * logged. Logs "http: listening on HOST:PORT (https)", and what the
 * certificate is for and until when: an error line when it has expired or
 * is not valid yet, a warning when it expires within 30 days (then once a
 * day) or does not name the host listened on. Within a second of
 * tls->cert_path or tls->key_path changing (a renewed certificate), the
 * server serves the new pair from the next handshake on, and no
 * connection is closed (httpd_tls_reload does it at once). */
flps_err httpd_start_tls(const char *listen, size_t max_body,
                         const httpd_limits *lim, const httpd_tls *tls,
                         httpd_handler h, void *arg, httpd **out, char *bound,
                         size_t boundlen);

/* Whether h serves HTTPS; when so, *out says what its certificate is.
 * Thread-safe. */
int httpd_tls_info(httpd *h, httpd_cert_info *out);

/* Read the certificate and key files again now (flsched does on SIGHUP).
 * A pair that cannot be read or does not belong together is logged and
 * the one served kept: FLPS_EIO or FLPS_ECONFIG. FLPS_EINVAL when h
 * serves plain HTTP or has no paths. Thread-safe; blocks on file I/O. */
flps_err httpd_tls_reload(httpd *h);

/* Stop listening, close every connection and wait for running handlers,
 * then free h. NULL is ignored. Do not call from a handler. */
void httpd_stop(httpd *h);

/* Value of query parameter key ("" for "?key" without a value), NULL if
 * absent. Borrowed for the handler call. */
const char *httpd_query(const httpd_request *req, const char *key);

/* Value of request header name, compared case-insensitively; NULL if
 * absent. Borrowed for the handler call. */
const char *httpd_header(const httpd_request *req, const char *name);

/* Set resp->status and replace resp->body with the printf-formatted text
 * (the old body is freed). FLPS_ENOMEM leaves resp unchanged. */
flps_err httpd_respond_printf(httpd_response *resp, int status, const char *fmt,
                              ...) __attribute__((format(printf, 3, 4)));

/* Set status, content type and body (copied) in one call. FLPS_EINVAL if
 * content_type does not fit; FLPS_ENOMEM; resp unchanged on error. */
flps_err httpd_respond(httpd_response *resp, int status,
                       const char *content_type, const char *body,
                       size_t body_len);

#endif
