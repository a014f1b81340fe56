/* A minimal HTTP/1.1 responder on a plain socket, for libflps's /metrics
 * (a training job links no HTTP library): one thread of its own accepts,
 * reads one request head, answers it and closes the connection, one
 * connection at a time. Every connection is bounded in size and time, so
 * a slow or greedy client delays the next scrape by at most
 * MINIHTTP_READ_S + MINIHTTP_WRITE_S and costs no memory beyond one head.
 * Meant for scrapes and health checks, not for an API: no bodies, no
 * keep-alive, no TLS. */
#ifndef FLPS_COMMON_MINIHTTP_H
#define FLPS_COMMON_MINIHTTP_H

#include <stddef.h>

#include "common/err.h"

/* The most bytes of a request head (request line and headers) read; a
 * longer one is answered 431. */
#define MINIHTTP_HEAD_MAX 8192
/* A connection must deliver its whole head within this many seconds of
 * being accepted (one byte at a time does not extend it): 408 otherwise. */
#define MINIHTTP_READ_S 2.0
/* ... and take the whole answer within this many seconds, or be closed. */
#define MINIHTTP_WRITE_S 5.0

typedef struct minihttp minihttp;

/* A parsed request line. */
typedef struct minihttp_request {
    char method[16];  /* "GET", "HEAD", ... as sent (upper-case letters) */
    char path[1024];  /* the target without its query ("?...") */
    int major, minor; /* HTTP/major.minor, one digit each */
} minihttp_request;

/* A handler's answer. The server sends body only for methods other than
 * HEAD, with Content-Length, Connection: close, and frees body. */
typedef struct minihttp_answer {
    int status;               /* 200, 404, ... */
    const char *content_type; /* static string */
    char *body;               /* flps_malloc'd; NULL: empty */
    size_t len;
} minihttp_answer;

/* Called on the server's thread for every well-formed request, one at a
 * time; out starts as 500 with no body. Must not call minihttp_stop. */
typedef void (*minihttp_handler)(void *arg, const minihttp_request *req,
                                 minihttp_answer *out);

/* Where the head at the start of buf ends: the offset just past its empty
 * line ("\r\n\r\n", or "\n\n" from a lenient client), or 0 when it has not
 * ended within len bytes. No I/O. */
size_t minihttp_head_end(const char *buf, size_t len);

/* Parse the request line of a head of len bytes (the text up to its
 * first line end): "METHOD SP TARGET SP HTTP/D.D", empty lines before it
 * skipped. METHOD is 1..15 upper-case letters; TARGET starts with '/' and
 * holds no space or control character, and its query is dropped. The
 * server answers a major version other than 1 with 505. No I/O; out is
 * written only on success.
 * Errors: FLPS_EPROTO (not such a line: answer 400), FLPS_ERANGE (a
 * method or target too long for out: answer 414). */
flps_err minihttp_parse(const char *head, size_t len, minihttp_request *out);

/* The head of an answer, "HTTP/1.1 STATUS REASON" with Content-Type,
 * Content-Length body_len and Connection: close (and Allow: GET, HEAD on a
 * 405), into buf. Returns its length, or 0 when it does not fit len. */
size_t minihttp_format_head(char *buf, size_t len, int status,
                            const char *content_type, size_t body_len);

/* Listen on listen ("HOST:PORT" as tcplisten_open reads it; PORT 0 picks
 * a free port) and answer every request with h(arg, ...) on a thread of
 * its own, started with every signal blocked (the host program's handlers
 * run on its own threads; a write to a closed connection raises no
 * SIGPIPE). bound gets the "HOST:PORT" bound (numeric). Errors, logged:
 * those of tcplisten_open (FLPS_EINVAL, FLPS_ESYS: the port is taken),
 * FLPS_ESYS (no thread or pipe), FLPS_ENOMEM. Caller owns *out
 * (minihttp_stop); arg is borrowed until minihttp_stop returns. */
flps_err minihttp_start(const char *listen, minihttp_handler h, void *arg,
                        minihttp **out, char *bound, size_t boundlen);

/* Stop: close the listening socket and any connection in progress, wait
 * for the thread (a handler running finishes first), free s. NULL does
 * nothing. Not from the handler. */
void minihttp_stop(minihttp *s);

#endif
