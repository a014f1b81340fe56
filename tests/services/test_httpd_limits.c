/* services/httpd under slow and greedy clients: raw sockets on loopback
 * that send a byte at a time or open many connections at once. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "services/httpd.h"
#include "tests/flood.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* /slow sleeps 50 ms so that parallel requests overlap; all answer 200. */
static void handler(void *arg, const httpd_request *req, httpd_response *resp)
{
    (void)arg;
    if (strcmp(req->path, "/slow") == 0)
        sleep_ms(50);
    httpd_respond_printf(resp, 200, "{\"status\":\"ok\"}");
}

static httpd *start(const httpd_limits *lim, char *bound)
{
    httpd *h = NULL;

    cr_assert_eq(httpd_start_limits("127.0.0.1:0", 4096, lim, handler, NULL, &h,
                                    bound, 64),
                 FLPS_OK);
    return h;
}

static int dial(const char *bound)
{
    struct sockaddr_in a;
    const char *colon = strrchr(bound, ':');
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_geq(fd, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Read until EOF or timeout_s; the bytes go to buf (NUL-terminated).
 * Returns 0 at EOF, -1 on timeout, or the errno of a failed recv (e.g.
 * ECONNRESET). */
static int read_all(int fd, char *buf, size_t cap, double timeout_s)
{
    size_t len = 0;
    double end = now_s() + timeout_s;

    buf[0] = '\0';
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((end - now_s()) * 1000);
        ssize_t n;

        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n < 0)
            return errno;
        if (n == 0)
            return 0;
        len += (size_t)n;
        buf[len] = '\0';
        if (len == cap - 1)
            return 0;
    }
}

/* One whole GET; status code answered (0: no HTTP answer), *err the
 * read's result. */
static int get_once(const char *bound, const char *path, int *err)
{
    char req[128], buf[1024];
    int fd = dial(bound), status = 0;

    *err = -2;
    if (fd < 0)
        return 0;
    snprintf(req, sizeof(req),
             "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", path);
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req)) {
        *err = read_all(fd, buf, sizeof(buf), 10);
        if (strncmp(buf, "HTTP/1.1 ", 9) == 0)
            status = atoi(buf + 9);
    }
    close(fd);
    return status;
}

/* ---- slow clients ---- */

typedef struct loris {
    const char *bound;
    int fd;
    int period_ms;
    atomic_int *stop;
    int got_408;  /* the server answered 408 */
    int closed;   /* and closed the connection */
    double ended; /* now_s() when it saw the end */
} loris;

/* Open a request and send it one byte per period, for ever: the classic
 * slow-loris. Stops when the server closes the connection. */
static void *loris_main(void *arg)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n"
                              "X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    loris *l = arg;
    char buf[512];
    size_t off = 0;

    while (!atomic_load(l->stop)) {
        struct pollfd p = {l->fd, POLLIN, 0};

        if (send(l->fd, req + off % (sizeof(req) - 1), 1, MSG_NOSIGNAL) < 0)
            break;
        off++;
        if (poll(&p, 1, l->period_ms) > 0) {
            int rc = read_all(l->fd, buf, sizeof(buf), 5);

            l->got_408 = strncmp(buf, "HTTP/1.1 408", 12) == 0;
            l->closed = rc == 0 || rc == ECONNRESET;
            l->ended = now_s();
            break;
        }
    }
    return NULL;
}

static void start_loris(loris *ls, pthread_t *th, int n, const char *bound,
                        int period_ms, atomic_int *stop)
{
    for (int i = 0; i < n; i++) {
        ls[i] = (loris){bound, dial(bound), period_ms, stop, 0, 0, 0};
        cr_assert_geq(ls[i].fd, 0, "slow client %d could not connect", i);
        cr_assert_eq(pthread_create(&th[i], NULL, loris_main, &ls[i]), 0);
    }
}

static void stop_loris(loris *ls, pthread_t *th, int n, atomic_int *stop)
{
    atomic_store(stop, 1);
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        close(ls[i].fd);
    }
}

TestSuite(httpd_limits, .timeout = 120);

Test(httpd_limits, sixty_four_slow_clients_do_not_delay_healthz)
{
    char bound[64];
    httpd *h = start(httpd_default_limits(), bound);
    loris ls[64];
    pthread_t th[64];
    atomic_int stop = 0;
    double t0;
    int err, status;

    start_loris(ls, th, 64, bound, 1000, &stop);
    sleep_ms(1500); /* every slow client holds its connection */
    t0 = now_s();
    status = get_once(bound, "/healthz", &err);
    cr_assert_eq(status, 200, "healthz answered %d (read: %d)", status, err);
    cr_assert_lt(now_s() - t0, 2.0, "healthz took %.2f s", now_s() - t0);
    stop_loris(ls, th, 64, &stop);
    httpd_stop(h);
}

Test(httpd_limits, a_request_sent_a_byte_at_a_time_is_cut_at_its_deadline)
{
    httpd_limits lim = {1.0, 256, 0, 0};
    char bound[64];
    httpd *h = start(&lim, bound);
    loris ls[8];
    pthread_t th[8];
    atomic_int stop = 0;
    double t0 = now_s();

    /* A byte every 100 ms resets any idle timeout; the deadline holds. */
    start_loris(ls, th, 8, bound, 100, &stop);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 8; i++) {
        cr_assert(ls[i].got_408, "slow client %d got no 408", i);
        cr_assert(ls[i].closed, "slow client %d was not closed", i);
        cr_assert_lt(ls[i].ended - t0, 2.5,
                     "slow client %d was cut after %.2f s", i,
                     ls[i].ended - t0);
        close(ls[i].fd);
    }
    httpd_stop(h);
}

Test(httpd_limits, the_deadline_frees_the_slots_slow_clients_took)
{
    httpd_limits lim = {1.5, 16, 0, 0};
    char bound[64];
    httpd *h = start(&lim, bound);
    loris ls[16];
    pthread_t th[16];
    atomic_int stop = 0;
    int err, status;
    double t0;

    start_loris(ls, th, 16, bound, 200, &stop);
    sleep_ms(300);
    /* Every slot taken: answered 503 at once, not left hanging. */
    t0 = now_s();
    status = get_once(bound, "/healthz", &err);
    cr_assert_eq(status, 503, "answered %d (read: %d)", status, err);
    cr_assert_lt(now_s() - t0, 1.0);
    /* Past the deadline the slow clients are gone and healthz is served. */
    sleep_ms(1700);
    status = get_once(bound, "/healthz", &err);
    cr_assert_eq(status, 200, "answered %d (read: %d)", status, err);
    stop_loris(ls, th, 16, &stop);
    httpd_stop(h);
}

/* ---- many connections at once ---- */

typedef struct burst {
    const char *bound;
    pthread_barrier_t *go;
    int status;
    int err;
} burst;

static void *burst_main(void *arg)
{
    burst *b = arg;

    pthread_barrier_wait(b->go);
    b->status = get_once(b->bound, "/slow", &b->err);
    return NULL;
}

/* 200 requests at once; counts of 200 and 503 answers. Every request must
 * get an HTTP answer and see a clean close, never a reset. */
static void run_burst(const char *bound, int *n200, int *n503)
{
    enum { N = 200 };
    static burst b[N];
    pthread_t th[N];
    pthread_barrier_t go;

    *n200 = *n503 = 0;
    pthread_barrier_init(&go, NULL, N);
    for (int i = 0; i < N; i++) {
        b[i] = (burst){bound, &go, 0, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, burst_main, &b[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < N; i++) {
        cr_assert(b[i].status == 200 || b[i].status == 503,
                  "request %d got no HTTP answer (status %d, read %d: %s)", i,
                  b[i].status, b[i].err,
                  b[i].err > 0 ? strerror(b[i].err) : "-");
        cr_assert_eq(b[i].err, 0, "request %d did not end cleanly: %d", i,
                     b[i].err);
        *n200 += b[i].status == 200;
        *n503 += b[i].status == 503;
    }
}

Test(httpd_limits, two_hundred_parallel_requests_are_all_served)
{
    char bound[64];
    httpd *h = start(httpd_default_limits(), bound);
    int n200, n503;

    run_burst(bound, &n200, &n503);
    cr_assert_eq(n200, 200, "%d of 200 served, %d answered 503", n200, n503);
    httpd_stop(h);
}

Test(httpd_limits, over_the_soft_limit_requests_get_503_not_a_reset)
{
    httpd_limits lim = {10.0, 8, 0, 0};
    char bound[64];
    httpd *h = start(&lim, bound);
    int n200, n503;

    run_burst(bound, &n200, &n503);
    cr_assert_eq(n200 + n503, 200);
    cr_assert_gt(n503, 0, "no request was over the limit of 8");
    cr_assert_gt(n200, 0, "no request was served");
    httpd_stop(h);
}

Test(httpd_limits, limits_out_of_range_are_refused)
{
    httpd_limits zero = {0, 8, 0, 0}, none = {1.0, 0, 0, 0},
                 big = {1.0, 512, 0, 0};
    httpd *h = NULL;

    cr_assert_eq(
        httpd_start_limits("127.0.0.1:0", 1, &zero, handler, NULL, &h, NULL, 0),
        FLPS_EINVAL);
    cr_assert_eq(
        httpd_start_limits("127.0.0.1:0", 1, &none, handler, NULL, &h, NULL, 0),
        FLPS_EINVAL);
    cr_assert_eq(
        httpd_start_limits("127.0.0.1:0", 1, &big, handler, NULL, &h, NULL, 0),
        FLPS_EINVAL);
    cr_assert_null(h);
}

/* ---- a flood of slow clients that reconnect ---- */

/* /v1 answers 200 and proves the client (an established one) when it
 * sends the token "good", as flsched's API does with its bearer token. */
static void proving_handler(void *arg, const httpd_request *req,
                            httpd_response *resp)
{
    const char *auth = httpd_header(req, "Authorization");

    (void)arg;
    resp->proven = auth != NULL && strcmp(auth, "Bearer good") == 0;
    httpd_respond_printf(resp, resp->proven ? 200 : 401, "{}");
}

/* One GET /v1 with the token; the status (0: no answer). */
static int proven_get(const char *bound)
{
    static const char req[] = "GET /v1 HTTP/1.1\r\nHost: t\r\nAuthorization: "
                              "Bearer good\r\nConnection: close\r\n\r\n";
    char buf[1024];
    int fd = dial(bound), status = 0;

    if (fd < 0)
        return 0;
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == sizeof(req) - 1 &&
        read_all(fd, buf, sizeof(buf), 10) == 0 &&
        strncmp(buf, "HTTP/1.1 ", 9) == 0)
        status = atoi(buf + 9);
    close(fd);
    return status;
}

Test(httpd_limits, established_clients_are_served_while_300_slow_ones_reconnect,
     .timeout = 60)
{
    char bound[64];
    httpd *h = NULL;
    flood f;
    pthread_t th;
    atomic_int stop = 0;
    int served = 0;

    cr_assert_eq(httpd_start("127.0.0.1:0", 4096, proving_handler, NULL, &h,
                             bound, sizeof(bound)),
                 FLPS_OK);
    cr_assert_eq(proven_get(bound), 200, "the client's first request");
    f = (flood){bound, "GET /v1 HTTP/1.1\r\nX-A: ", &stop, 0};
    cr_assert_eq(pthread_create(&th, NULL, flood_main, &f), 0);
    sleep_ms(2000); /* the flood holds every slot it can */
    /* 30 requests over 6 s, each on a new connection. */
    for (int i = 0; i < 30; i++) {
        served += proven_get(bound) == 200;
        sleep_ms(200);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    cr_assert_gt(f.connects, FLOOD_CONNS, "the flood never reconnected");
    cr_assert_eq(served, 30, "%d of 30 requests served under the flood",
                 served);
    httpd_stop(h);
}
