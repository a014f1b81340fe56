/* Redis over TLS: our socket and OpenSSL session, hiredis's RESP. */
#include "scheduler/rtls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/read.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"

#define RTLS_READ_CHUNK 16384

struct rtls {
    int fd; /* non-blocking; every wait is a poll with a deadline */
    SSL_CTX *ctx;
    SSL *ssl;
    redisReader *reader;
    int timeout_ms;
    char addr[300];
};

/* What OpenSSL says went wrong, or fallback. */
static const char *ssl_reason(char *buf, size_t len, const char *fallback)
{
    unsigned long e = ERR_get_error();

    if (e == 0) {
        snprintf(buf, len, "%s", fallback);
        return buf;
    }
    ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

/* Wait until fd is ready for events, at most until deadline (flps_mono_s);
 * 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - flps_mono_s();
        struct pollfd p = {fd, events, 0};
        int r;

        if (left <= 0)
            return 0;
        r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0)
            return 1;
        if (r == 0)
            continue; /* the deadline is checked above */
        if (errno != EINTR)
            return -1;
    }
}

/* A TCP connection to host:port within the deadline, non-blocking. */
static flps_err tcp_connect(const char *host, int port, double deadline,
                            int *out, char *errbuf, size_t errlen)
{
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[8];
    int fd = -1, err = 0, gai, one = 1;

    snprintf(portstr, sizeof(portstr), "%d", port);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                               "cannot resolve %s: %s", host,
                               gai_strerror(gai));
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        socklen_t sl = sizeof(err);

        fd = socket(ai->ai_family,
                    ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        err = errno;
        if (err == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, deadline);

            err = w == 0 ? ETIMEDOUT : errno;
            if (w == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) == 0 &&
                err == 0)
                break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_EIO, "%s",
                               strerror(err ? err : ECONNREFUSED));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    *out = fd;
    return FLPS_OK;
}

/* A client context that verifies the server with ca_file's CAs. */
static flps_err make_ctx(const char *ca_file, SSL_CTX **out, char *errbuf,
                         size_t errlen)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (ctx == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "cannot make a TLS context: %s",
                               ssl_reason(why, sizeof(why), "out of memory"));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* A write that is partly done is retried with the same buffer; the
     * buffer of a retry may move (ours is the caller's, and is kept). */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (ca_file != NULL && ca_file[0] != '\0') {
        if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
            SSL_CTX_free(ctx);
            return flps_errbuf_set(
                errbuf, errlen, FLPS_ECONFIG,
                "cannot load the CA certificates from %s (FLPS_REDIS_CA or "
                "--redis-ca): %s; give a readable PEM file",
                ca_file, ssl_reason(why, sizeof(why), "not PEM"));
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        SSL_CTX_free(ctx);
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "cannot load the system's CA certificates; "
                               "set FLPS_REDIS_CA (or --redis-ca) to the CA "
                               "that signed Redis's certificate");
    }
    *out = ctx;
    return FLPS_OK;
}

/* Ask the handshake to check that the certificate names host. */
static flps_err expect_name(SSL *ssl, const char *host, char *errbuf,
                            size_t errlen)
{
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    unsigned char ip[16];
    int ok;

    if (inet_pton(AF_INET, host, ip) == 1 ||
        inet_pton(AF_INET6, host, ip) == 1) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(vp, host);
    } else {
        X509_VERIFY_PARAM_set_hostflags(vp,
                                        X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = X509_VERIFY_PARAM_set1_host(vp, host, 0) == 1 &&
             SSL_set_tlsext_host_name(ssl, host) == 1;
    }
    if (ok != 1)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "cannot set the TLS server name %s", host);
    return FLPS_OK;
}

/* Drive one OpenSSL call that may want to read or write until it is done
 * or the deadline passes; r is its return value. 1: done; 0: want more
 * (wait happened, call again); -1: failed (*ssl_err set). */
static int step(rtls *t, int r, double deadline, int *ssl_err)
{
    int e, w;

    if (r > 0)
        return 1;
    e = SSL_get_error(t->ssl, r);
    *ssl_err = e;
    if (e == SSL_ERROR_WANT_READ)
        w = wait_fd(t->fd, POLLIN, deadline);
    else if (e == SSL_ERROR_WANT_WRITE)
        w = wait_fd(t->fd, POLLOUT, deadline);
    else
        return -1;
    if (w == 0)
        *ssl_err = -ETIMEDOUT;
    return w == 1 ? 0 : -1;
}

static flps_err handshake(rtls *t, double deadline, const char *ca_file,
                          char *errbuf, size_t errlen)
{
    char why[256];
    int e = 0, s;
    long v;

    while ((s = step(t, SSL_connect(t->ssl), deadline, &e)) == 0)
        ;
    if (s == 1)
        return FLPS_OK;
    v = SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "the certificate of Redis at %s does not verify: %s; %s", t->addr,
            X509_verify_cert_error_string(v),
            ca_file != NULL && ca_file[0] != '\0'
                ? "is FLPS_REDIS_CA (--redis-ca) the CA that signed Redis's "
                  "tls-cert-file, and does that certificate name the URL's "
                  "host?"
                : "set FLPS_REDIS_CA (or --redis-ca) to the CA certificate "
                  "that signed Redis's tls-cert-file");
    if (e == -ETIMEDOUT)
        return flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                               "no TLS handshake with %s within %d ms; is it "
                               "Redis's tls-port?",
                               t->addr, t->timeout_ms);
    return flps_errbuf_set(
        errbuf, errlen, FLPS_EIO,
        "the TLS handshake with %s failed: %s; is that Redis's tls-port "
        "(a rediss:// URL needs one; a plain port takes redis://)?",
        t->addr, ssl_reason(why, sizeof(why), "the server closed it"));
}

flps_err rtls_connect(const char *host, int port, const char *ca_file,
                      int timeout_ms, rtls **out, char *errbuf, size_t errlen)
{
    double deadline = flps_mono_s() + timeout_ms / 1000.0;
    char why[256];
    flps_err rc;
    rtls *t;

    ERR_clear_error();
    t = flps_calloc(1, sizeof(*t));
    if (t == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    t->fd = -1;
    t->timeout_ms = timeout_ms;
    snprintf(t->addr, sizeof(t->addr), "%s:%d", host, port);
    rc = make_ctx(ca_file, &t->ctx, errbuf, errlen);
    if (rc != FLPS_OK)
        goto fail;
    rc = tcp_connect(host, port, deadline, &t->fd, why, sizeof(why));
    if (rc != FLPS_OK) {
        flps_errbuf_set(errbuf, errlen, rc,
                        "cannot reach Redis at %s: %s; is redis-server "
                        "running there, with that port as its tls-port?",
                        t->addr, why);
        goto fail;
    }
    rc = FLPS_ENOMEM;
    t->ssl = SSL_new(t->ctx);
    t->reader = redisReaderCreate();
    if (t->ssl == NULL || t->reader == NULL || SSL_set_fd(t->ssl, t->fd) != 1) {
        flps_errbuf_set(errbuf, errlen, rc, "out of memory");
        goto fail;
    }
    rc = expect_name(t->ssl, host, errbuf, errlen);
    if (rc == FLPS_OK)
        rc = handshake(t, deadline, ca_file, errbuf, errlen);
    if (rc != FLPS_OK)
        goto fail;
    *out = t;
    return FLPS_OK;

fail:
    if (t->ssl != NULL) {
        SSL_free(t->ssl);
        t->ssl = NULL; /* no close_notify on a session never made */
    }
    rtls_close(t);
    ERR_clear_error();
    return rc;
}

void rtls_close(rtls *t)
{
    if (t == NULL)
        return;
    if (t->ssl != NULL) {
        /* One try at close_notify; the socket is non-blocking and closing
         * anyway, so nothing is waited for. */
        (void)SSL_shutdown(t->ssl);
        SSL_free(t->ssl);
    }
    if (t->ctx != NULL)
        SSL_CTX_free(t->ctx);
    if (t->reader != NULL)
        redisReaderFree(t->reader);
    if (t->fd >= 0)
        close(t->fd);
    ERR_clear_error();
    flps_free(t);
}

/* OpenSSL writes with write(2): a peer that closed would raise SIGPIPE,
 * which kills a process that does not ignore it. Block it for the write
 * and take back one that became pending. */
typedef struct pipe_guard {
    sigset_t old;
    int was_pending;
} pipe_guard;

static void pipe_block(pipe_guard *g)
{
    sigset_t block, pending;

    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &g->old);
}

static void pipe_unblock(pipe_guard *g)
{
    sigset_t pending, only;
    struct timespec zero = {0, 0};

    sigpending(&pending);
    if (!g->was_pending && sigismember(&pending, SIGPIPE)) {
        sigemptyset(&only);
        sigaddset(&only, SIGPIPE);
        while (sigtimedwait(&only, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static flps_err io_error(rtls *t, int e, const char *what, char *errbuf,
                         size_t errlen)
{
    char why[256];

    if (e == -ETIMEDOUT)
        return flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                               "no %s from %s within %d ms", what, t->addr,
                               t->timeout_ms);
    if (e == SSL_ERROR_ZERO_RETURN)
        return flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                               "%s closed the connection", t->addr);
    if (e == SSL_ERROR_SYSCALL)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EIO, "the connection to %s broke: %s", t->addr,
            errno != 0 ? strerror(errno) : "closed by the server");
    return flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                           "TLS error on the connection to %s: %s", t->addr,
                           ssl_reason(why, sizeof(why), "unknown"));
}

static flps_err send_all(rtls *t, const char *cmd, size_t len, char *errbuf,
                         size_t errlen)
{
    double deadline = flps_mono_s() + t->timeout_ms / 1000.0;
    pipe_guard g;
    size_t off = 0;
    int e = 0, s = 1;

    pipe_block(&g);
    while (off < len) {
        size_t n = len - off > (size_t)1 << 30 ? (size_t)1 << 30 : len - off;
        int r;

        errno = 0;
        r = SSL_write(t->ssl, cmd + off, (int)n);
        s = step(t, r, deadline, &e);
        if (s < 0)
            break;
        if (s == 1)
            off += (size_t)r;
    }
    pipe_unblock(&g);
    if (off < len)
        return io_error(t, e, "room to send", errbuf, errlen);
    return FLPS_OK;
}

flps_err rtls_command(rtls *t, const char *cmd, size_t len, redisReply **reply,
                      char *errbuf, size_t errlen)
{
    double deadline;
    char buf[RTLS_READ_CHUNK];
    void *r = NULL;
    flps_err rc;

    ERR_clear_error();
    rc = send_all(t, cmd, len, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    deadline = flps_mono_s() + t->timeout_ms / 1000.0;
    for (;;) {
        int n, e = 0, s;

        if (redisReaderGetReply(t->reader, &r) != REDIS_OK)
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "%s sent what is not a Redis reply: %s",
                                   t->addr, t->reader->errstr);
        if (r != NULL)
            break;
        errno = 0;
        n = SSL_read(t->ssl, buf, sizeof(buf));
        s = step(t, n, deadline, &e);
        if (s < 0)
            return io_error(t, e, "reply", errbuf, errlen);
        if (s == 1 && redisReaderFeed(t->reader, buf, (size_t)n) != REDIS_OK)
            return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                                   "out of memory");
    }
    *reply = r;
    return FLPS_OK;
}

int rtls_closed_by_server(rtls *t)
{
    struct pollfd p = {t->fd, POLLIN | POLLRDHUP, 0};
    char c;
    int r, e;

    if (SSL_pending(t->ssl) > 0)
        return 1; /* bytes nobody asked for: out of step, start afresh */
    if (poll(&p, 1, 0) != 1)
        return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR))
        return 1;
    /* Readable: TLS 1.3 session tickets arrive after the handshake and
     * are no sign of a close. Let OpenSSL take what is there. */
    ERR_clear_error();
    r = SSL_peek(t->ssl, &c, 1);
    if (r > 0)
        return 1;
    e = SSL_get_error(t->ssl, r);
    ERR_clear_error();
    return e != SSL_ERROR_WANT_READ;
}
