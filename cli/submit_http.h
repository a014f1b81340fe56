/* flsubmit's HTTP client for flsched's API (libcurl): one request at a
 * time, with a bearer token, connect and request timeouts, and a message
 * that says what went wrong when the scheduler cannot be talked to. */
#ifndef FLPS_CLI_SUBMIT_HTTP_H
#define FLPS_CLI_SUBMIT_HTTP_H

#include <stddef.h>

#include "common/err.h"

#define SUBMIT_HTTP_CONNECT_TIMEOUT_MS 5000L
#define SUBMIT_HTTP_TIMEOUT_MS 30000L
/* A reply larger than this is refused (FLPS_EPROTO): no answer of the API
 * comes near it, and it bounds what a broken server can make us hold. */
#define SUBMIT_HTTP_MAX_REPLY (64UL << 20)

typedef struct submit_http submit_http;

typedef struct submit_http_opts {
    const char *base_url;    /* "http://host:port" or "https://host:port", a
                                trailing '/' is fine */
    const char *ca_file;     /* https: the CA certificates (PEM) that verify
                                the scheduler's certificate; NULL: the
                                system's CAs */
    const char *token;       /* sent as "Authorization: Bearer T"; NULL or
                                "" sends no header */
    long connect_timeout_ms; /* 0 = SUBMIT_HTTP_CONNECT_TIMEOUT_MS */
    long timeout_ms;         /* whole request; 0 = SUBMIT_HTTP_TIMEOUT_MS */
} submit_http_opts;

/* An HTTP answer: any status code, the body NUL-terminated (body[len] ==
 * '\0'; the body itself may hold NULs). */
typedef struct submit_reply {
    long status;
    char *body;
    size_t len;
} submit_reply;

/* Make a client. Copies what opts points to. Errors: FLPS_EINVAL (no
 * base_url), FLPS_ENOMEM, FLPS_ESYS (libcurl could not start).
 * Ownership: on FLPS_OK the caller owns *out (submit_http_destroy). */
flps_err submit_http_create(const submit_http_opts *opts, submit_http **out);

/* Free the client; NULL does nothing. */
void submit_http_destroy(submit_http *h);

/* Send METHOD base_url+path (path starts with '/', query included) with
 * body (len bytes, may be NULL for none) and wait for the answer. Any
 * status code counts as an answer: the caller decides what 404 means.
 * Blocks up to the timeouts. Errors (the message through
 * submit_http_last_error):
 *   FLPS_ECLOSED   the scheduler cannot be reached (connection refused,
 *                  unknown host, no route): "cannot reach the scheduler at
 *                  URL: connection refused"
 *   FLPS_ETIMEDOUT no connection within the connect timeout, or no full
 *                  answer within the request timeout
 *   FLPS_EIO       the connection broke or the answer was not HTTP
 *   FLPS_EPROTO    an answer over SUBMIT_HTTP_MAX_REPLY
 *   FLPS_EINVAL    a URL libcurl refuses (bad scheme, bad syntax)
 *   FLPS_ECONFIG   TLS failed: the scheduler's certificate does not verify
 *                  with the CA (the message says to set --ca or
 *                  FLPS_SCHEDULER_CA), the CA file cannot be used, or an
 *                  https:// URL to a plain-HTTP scheduler
 * (An http:// URL to an HTTPS scheduler gets no HTTP answer: FLPS_EIO, with
 * a message that says to use https:// and --ca.)
 *   FLPS_ENOMEM
 * The client stays usable after an error (watch retries through a
 * scheduler restart), so the error is the last one, not a sticky one.
 * Ownership: on FLPS_OK the caller owns out->body (submit_reply_fini). */
flps_err submit_http_request(submit_http *h, const char *method,
                             const char *path, const void *body, size_t len,
                             submit_reply *out);

/* Free what a reply holds and zero it; safe on a zeroed reply. */
void submit_reply_fini(submit_reply *r);

/* The message of the last failed request ("" if none). Borrowed until the
 * next request or submit_http_destroy. */
const char *submit_http_last_error(const submit_http *h);

/* The base URL requests go to, without a trailing '/'. Borrowed like
 * submit_http_last_error. */
const char *submit_http_base_url(const submit_http *h);

/* s percent-encoded for use as one path segment or query value ("j 4/x" ->
 * "j%204%2Fx"). Errors: FLPS_ENOMEM. Ownership: on FLPS_OK the caller owns
 * *out (flps_free). */
flps_err submit_http_escape(const char *s, char **out);

#endif
