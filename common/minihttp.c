/* A minimal HTTP/1.1 responder: one request per connection, one connection
 * at a time, on a thread of its own. */
#include "common/minihttp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/tcplisten.h"

#define MINIHTTP_BACKLOG 64
/* After the answer, what the client still sends (a body we never read) is
 * drained this long before the close, so the close does not reset the
 * connection and destroy the answer in flight. */
#define MINIHTTP_LINGER_S 0.2
/* Out of descriptors: wait this long before accepting again. */
#define MINIHTTP_BACKOFF_MS 100

/* Everything is written by minihttp_start before the thread starts and
 * only read afterwards; the thread alone touches the connection. */
struct minihttp {
    int lfd;     /* listening, non-blocking */
    int wake[2]; /* a byte on wake[1] stops the thread */
    pthread_t thread;
    minihttp_handler handler;
    void *arg;
};

/* ---- parsing (no I/O) ---- */

size_t minihttp_head_end(const char *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

static int is_ctl(char c)
{
    return (unsigned char)c < 0x20 || c == 0x7f;
}

/* The token of s[at..) up to a space, as [*tok, *tok + *n); at moves past
 * it. 0 when the line ends (or len does) before a space. */
static int next_token(const char *s, size_t len, size_t *at, const char **tok,
                      size_t *n)
{
    size_t i = *at;

    while (i < len && s[i] != ' ' && s[i] != '\r' && s[i] != '\n')
        i++;
    *tok = s + *at;
    *n = i - *at;
    if (i >= len || s[i] != ' ' || *n == 0)
        return 0;
    *at = i + 1;
    return 1;
}

flps_err minihttp_parse(const char *head, size_t len, minihttp_request *out)
{
    minihttp_request r;
    const char *m, *t, *v;
    size_t at = 0, mn, tn, vn, qn;

    while (at < len && (head[at] == '\r' || head[at] == '\n'))
        at++;
    if (!next_token(head, len, &at, &m, &mn) ||
        !next_token(head, len, &at, &t, &tn))
        return FLPS_EPROTO;
    v = head + at;
    for (vn = 0;
         at + vn < len && head[at + vn] != '\r' && head[at + vn] != '\n'; vn++)
        ;
    if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' ||
        v[6] != '.' || v[7] < '0' || v[7] > '9')
        return FLPS_EPROTO;
    for (size_t i = 0; i < mn; i++)
        if (m[i] < 'A' || m[i] > 'Z')
            return FLPS_EPROTO;
    if (t[0] != '/')
        return FLPS_EPROTO;
    for (qn = 0; qn < tn && t[qn] != '?'; qn++)
        if (is_ctl(t[qn]))
            return FLPS_EPROTO;
    for (size_t i = qn; i < tn; i++)
        if (is_ctl(t[i]))
            return FLPS_EPROTO;
    if (mn >= sizeof(r.method) || qn >= sizeof(r.path))
        return FLPS_ERANGE;
    memcpy(r.method, m, mn);
    r.method[mn] = '\0';
    memcpy(r.path, t, qn);
    r.path[qn] = '\0';
    r.major = v[5] - '0';
    r.minor = v[7] - '0';
    *out = r;
    return FLPS_OK;
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return status < 500 ? "Client Error" : "Internal Server Error";
    }
}

size_t minihttp_format_head(char *buf, size_t len, int status,
                            const char *content_type, size_t body_len)
{
    int n = snprintf(buf, len,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
                     status, reason(status), content_type, body_len,
                     status == 405 ? "Allow: GET, HEAD\r\n" : "");

    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

/* ---- one connection ---- */

/* Wait until fd is ready for events or the deadline; 1 ready, 0 not (the
 * deadline passed, the server is stopping, or the connection failed). */
static int wait_for(minihttp *s, int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd p[2] = {{fd, events, 0}, {s->wake[0], POLLIN, 0}};
        double left = deadline - flps_mono_s();
        int rc;

        if (left <= 0)
            return 0;
        rc = poll(p, 2, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0 || (p[1].revents & POLLIN))
            return 0;
        if (p[0].revents & (events | POLLHUP | POLLERR))
            return 1;
    }
}

/* Send all of buf by the deadline. 1 when sent. */
static int send_all(minihttp *s, int fd, const char *buf, size_t len,
                    double deadline)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_for(s, fd, POLLOUT, deadline))
                return 0;
        } else {
            return 0;
        }
    }
    return 1;
}

/* Send a's head (and body unless head_only), then drain what the client
 * still sends for a moment, so the close that follows is not a reset. */
static void answer(minihttp *s, int fd, const minihttp_answer *a, int head_only)
{
    char head[256];
    double deadline = flps_mono_s() + MINIHTTP_WRITE_S;
    size_t hn = minihttp_format_head(head, sizeof(head), a->status,
                                     a->content_type, a->len);
    char sink[512];

    if (hn == 0 || !send_all(s, fd, head, hn, deadline) ||
        (!head_only && a->len > 0 &&
         !send_all(s, fd, a->body, a->len, deadline)))
        return;
    shutdown(fd, SHUT_WR);
    deadline = flps_mono_s() + MINIHTTP_LINGER_S;
    while (wait_for(s, fd, POLLIN, deadline) &&
           recv(fd, sink, sizeof(sink), 0) > 0)
        ;
}

/* A static answer of the server itself (an error). */
static void answer_error(minihttp *s, int fd, int status, const char *json)
{
    minihttp_answer a = {status, "application/json", (char *)json,
                         strlen(json)};

    answer(s, fd, &a, 0);
}

/* Read one request head from fd (or give up), answer it. */
static void serve_connection(minihttp *s, int fd)
{
    char head[MINIHTTP_HEAD_MAX];
    double deadline = flps_mono_s() + MINIHTTP_READ_S;
    size_t len = 0, end = 0;
    minihttp_request req;
    minihttp_answer a = {500, "application/json", NULL, 0};
    flps_err rc;

    while (end == 0) {
        ssize_t n;

        if (len == sizeof(head)) {
            answer_error(s, fd, 431, "{\"error\":\"request head too large\"}");
            return;
        }
        if (!wait_for(s, fd, POLLIN, deadline)) {
            if (flps_mono_s() >= deadline)
                answer_error(s, fd, 408, "{\"error\":\"request timeout\"}");
            return;
        }
        n = recv(fd, head + len, sizeof(head) - len, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN &&
                       errno != EWOULDBLOCK))
            return; /* closed or failed before a whole head */
        if (n > 0) {
            len += (size_t)n;
            end = minihttp_head_end(head, len);
        }
    }
    rc = minihttp_parse(head, end, &req);
    if (rc == FLPS_ERANGE) {
        answer_error(s, fd, 414, "{\"error\":\"request target too long\"}");
        return;
    }
    if (rc != FLPS_OK) {
        answer_error(s, fd, 400, "{\"error\":\"bad request\"}");
        return;
    }
    if (req.major != 1) {
        answer_error(s, fd, 505, "{\"error\":\"HTTP/1.x only\"}");
        return;
    }
    s->handler(s->arg, &req, &a);
    answer(s, fd, &a, strcmp(req.method, "HEAD") == 0);
    flps_free(a.body);
}

/* ---- the thread ---- */

static void *serve(void *arg)
{
    minihttp *s = arg;

    for (;;) {
        struct pollfd p[2] = {{s->lfd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
        int fd;

        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_error("metrics http: poll failed: %s; no more scrapes",
                      strerror(errno));
            break;
        }
        if (p[1].revents & POLLIN)
            break;
        fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM)
                poll(&p[1], 1, MINIHTTP_BACKOFF_MS); /* the wake pipe */
            continue; /* EAGAIN, ECONNABORTED, EINTR: the next one */
        }
        serve_connection(s, fd);
        close(fd);
    }
    return NULL;
}

/* Start the thread with every signal blocked (restored for the caller). */
static int start_thread(minihttp *s)
{
    sigset_t all, old;
    int rc;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&s->thread, NULL, serve, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

flps_err minihttp_start(const char *where, minihttp_handler h, void *arg,
                        minihttp **out, char *bound, size_t boundlen)
{
    minihttp *s;
    flps_err rc;
    int e;

    if (where == NULL || h == NULL || out == NULL)
        return FLPS_EINVAL;
    s = flps_calloc(1, sizeof(*s));
    if (s == NULL)
        return FLPS_ENOMEM;
    s->handler = h;
    s->arg = arg;
    s->wake[0] = s->wake[1] = -1;
    rc = tcplisten_open(where, MINIHTTP_BACKLOG, &s->lfd, bound, boundlen);
    if (rc != FLPS_OK) {
        flps_free(s);
        return rc;
    }
    if (fcntl(s->lfd, F_SETFL, fcntl(s->lfd, F_GETFL) | O_NONBLOCK) != 0 ||
        pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        log_error("metrics http: cannot set up the server: %s",
                  strerror(errno));
        goto fail;
    }
    e = start_thread(s);
    if (e != 0) {
        log_error("metrics http: cannot start its thread: %s", strerror(e));
        goto fail;
    }
    *out = s;
    return FLPS_OK;

fail:
    if (s->wake[0] >= 0) {
        close(s->wake[0]);
        close(s->wake[1]);
    }
    close(s->lfd);
    flps_free(s);
    return FLPS_ESYS;
}

void minihttp_stop(minihttp *s)
{
    char b = 1;

    if (s == NULL)
        return;
    while (write(s->wake[1], &b, 1) < 0 && errno == EINTR)
        ;
    pthread_join(s->thread, NULL);
    close(s->wake[0]);
    close(s->wake[1]);
    close(s->lfd);
    flps_free(s);
}
