/* common/minihttp: the request-line parser without I/O, and the server
 * over real sockets: answers as HTTP/1.1 says (curl agrees), and the
 * bounds a slow, greedy or rude client meets. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/minihttp.h"

/* ---- the parser ---- */

static flps_err parse(const char *head, minihttp_request *r)
{
    return minihttp_parse(head, strlen(head), r);
}

Test(minihttp, parses_a_request_line_and_drops_the_query)
{
    minihttp_request r;

    cr_assert_eq(parse("GET /metrics?x=1&y HTTP/1.1\r\nHost: a\r\n\r\n", &r),
                 FLPS_OK);
    cr_assert_str_eq(r.method, "GET");
    cr_assert_str_eq(r.path, "/metrics");
    cr_assert_eq(r.major, 1);
    cr_assert_eq(r.minor, 1);
    cr_assert_eq(parse("\r\n\r\nHEAD /healthz HTTP/1.0\n\n", &r), FLPS_OK,
                 "empty lines before the request line are skipped");
    cr_assert_str_eq(r.method, "HEAD");
    cr_assert_str_eq(r.path, "/healthz");
    cr_assert_eq(r.minor, 0);
    cr_assert_eq(parse("GET / HTTP/2.0\r\n\r\n", &r), FLPS_OK);
    cr_assert_eq(r.major, 2, "the server, not the parser, refuses it");
}

Test(minihttp, refuses_what_is_not_a_request_line_and_leaves_out_alone)
{
    static const char *const bad[] = {
        "GET /metrics\r\n\r\n",
        "get / HTTP/1.1\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1 x\r\n\r\n",
        "GET  / HTTP/1.1\r\n\r\n",
        "GET /a\tb HTTP/1.1\r\n\r\n",
        "GET /?a\x01 HTTP/1.1\r\n\r\n",
        "GET / HTTP/x.1\r\n\r\n",
        "GET / HTTP/1.10\r\n\r\n",
        "GET / FTP/1.1\r\n\r\n",
        "\r\n\r\n",
        "",
        "G3T / HTTP/1.1\r\n\r\n",
    };
    minihttp_request r;

    memset(&r, 0x5a, sizeof(r));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(parse(bad[i], &r), FLPS_EPROTO, "accepted %s", bad[i]);
    cr_assert_eq(r.method[0], 0x5a, "out is written only on success");
}

Test(minihttp, a_method_or_target_too_long_is_a_range_error)
{
    char head[2100];
    minihttp_request r;

    cr_assert_eq(parse("ABCDEFGHIJKLMNOP / HTTP/1.1\r\n\r\n", &r), FLPS_ERANGE);
    memset(head, 'a', sizeof(head));
    memcpy(head, "GET /", 5);
    snprintf(head + 1500, sizeof(head) - 1500, " HTTP/1.1\r\n\r\n");
    cr_assert_eq(parse(head, &r), FLPS_ERANGE);
    /* A long query is dropped, not refused. */
    memcpy(head, "GET /?", 6);
    cr_assert_eq(parse(head, &r), FLPS_OK);
    cr_assert_str_eq(r.path, "/");
}

Test(minihttp, finds_where_a_head_ends)
{
    const char *a = "GET / HTTP/1.1\r\nA: b\r\n\r\nbody";

    cr_assert_eq(minihttp_head_end(a, strlen(a)), strlen(a) - 4);
    cr_assert_eq(minihttp_head_end("GET / HTTP/1.0\n\n", 16), 16);
    cr_assert_eq(minihttp_head_end("GET / HTTP/1.1\r\nA: b\r\n", 22), 0);
    cr_assert_eq(minihttp_head_end("GET / HTTP/1.1\r\n\r", 17), 0);
    cr_assert_eq(minihttp_head_end("", 0), 0);
}

Test(minihttp, formats_an_answer_head)
{
    char b[256];
    size_t n = minihttp_format_head(b, sizeof(b), 405, "application/json", 7);

    cr_assert_eq(n, strlen(b));
    cr_assert_str_eq(b, "HTTP/1.1 405 Method Not Allowed\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: 7\r\nAllow: GET, HEAD\r\n"
                        "Connection: close\r\n\r\n");
    cr_assert_eq(minihttp_format_head(b, 20, 200, "text/plain", 1), 0,
                 "too small a buffer");
}

/* ---- the server ---- */

/* The test handler: "METHOD PATH" as text; /big answers 4 MiB. */
static void echo(void *arg, const minihttp_request *req, minihttp_answer *out)
{
    int *calls = arg;
    size_t n = strcmp(req->path, "/big") == 0 ? (size_t)4 << 20 : 64;

    (*calls)++;
    out->status = strcmp(req->path, "/missing") == 0 ? 404 : 200;
    out->content_type = "text/plain";
    out->body = flps_malloc(n);
    cr_assert_not_null(out->body);
    memset(out->body, '.', n);
    out->len = (size_t)snprintf(out->body, n, "%s %s", req->method, req->path);
    if (n > 64)
        out->len = n;
}

typedef struct server {
    minihttp *s;
    char bound[64];
    int port;
    int calls;
} server;

static void start(server *sv)
{
    memset(sv, 0, sizeof(*sv));
    cr_assert_eq(minihttp_start("127.0.0.1:0", echo, &sv->calls, &sv->s,
                                sv->bound, sizeof(sv->bound)),
                 FLPS_OK);
    sv->port = atoi(strrchr(sv->bound, ':') + 1);
    cr_assert_gt(sv->port, 0);
}

static int dial(const server *sv)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)sv->port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void send_text(int fd, const char *t, size_t n)
{
    cr_assert_eq(send(fd, t, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Everything the server sends until it closes (up to 10 s); caller frees.
 * *len gets its length. */
static char *read_all(int fd, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    double end = flps_mono_s() + 10;

    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t k;

        cr_assert_gt(poll(&p, 1, 1000), -1);
        cr_assert_lt(flps_mono_s(), end, "the server never closed");
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        if (n == cap)
            b = realloc(b, (cap *= 2) + 1);
        k = recv(fd, b + n, cap - n, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    b[n] = '\0';
    *len = n;
    return b;
}

/* One request's whole exchange: the answer's text (caller frees). */
static char *exchange(const server *sv, const char *req)
{
    int fd = dial(sv);
    size_t n;
    char *a;

    send_text(fd, req, strlen(req));
    a = read_all(fd, &n);
    close(fd);
    return a;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    while (d != NULL && readdir(d) != NULL)
        n++;
    if (d != NULL)
        closedir(d);
    return n;
}

Test(minihttp, answers_one_request_and_closes_the_connection)
{
    server sv;
    char *a;

    start(&sv);
    a = exchange(&sv, "GET /metrics?q HTTP/1.1\r\nHost: x\r\n\r\n");
    cr_assert_str_eq(a, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                        "Content-Length: 12\r\nConnection: close\r\n\r\n"
                        "GET /metrics");
    free(a);
    a = exchange(&sv, "HEAD /x HTTP/1.0\r\n\r\n");
    cr_assert_str_eq(a,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     "Content-Length: 7\r\nConnection: close\r\n\r\n",
                     "HEAD: the GET's length, no body");
    free(a);
    a = exchange(&sv, "GET /missing HTTP/1.1\r\n\r\n");
    cr_assert(strncmp(a, "HTTP/1.1 404 Not Found\r\n", 24) == 0, "%s", a);
    free(a);
    cr_assert_eq(sv.calls, 3);
    minihttp_stop(sv.s);
}

Test(minihttp, refuses_bad_requests_without_calling_the_handler)
{
    static const struct {
        const char *req, *status;
    } cases[] = {
        {"BREW /pot HTCPCP/1.0\r\n\r\n", "HTTP/1.1 400 "},
        {"GET / HTTP/2.0\r\n\r\n", "HTTP/1.1 505 "},
        {"ABCDEFGHIJKLMNOPQRS / HTTP/1.1\r\n\r\n", "HTTP/1.1 414 "},
    };
    server sv;

    start(&sv);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *a = exchange(&sv, cases[i].req);

        cr_assert(strncmp(a, cases[i].status, strlen(cases[i].status)) == 0,
                  "%s got %s", cases[i].req, a);
        cr_assert_not_null(strstr(a, "Connection: close\r\n"));
        free(a);
    }
    cr_assert_eq(sv.calls, 0);
    minihttp_stop(sv.s);
}

Test(minihttp, a_head_over_the_limit_gets_431_and_no_more_is_read)
{
    char big[MINIHTTP_HEAD_MAX + 100];
    server sv;
    size_t n;
    char *a;
    int fd;

    start(&sv);
    memset(big, 'x', sizeof(big));
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    fd = dial(&sv);
    send_text(fd, big, MINIHTTP_HEAD_MAX);
    a = read_all(fd, &n);
    close(fd);
    cr_assert(strncmp(a, "HTTP/1.1 431 ", 13) == 0, "%s", a);
    free(a);
    cr_assert_eq(sv.calls, 0);
    minihttp_stop(sv.s);
}

Test(minihttp, a_silent_client_gets_408_at_the_deadline_and_the_next_is_served)
{
    server sv;
    double t0;
    size_t n;
    char *a;
    int slow, next;

    start(&sv);
    t0 = flps_mono_s();
    slow = dial(&sv);
    send_text(slow, "GET /", 5); /* and nothing more: a trickle */
    next = dial(&sv);
    send_text(next, "GET /next HTTP/1.1\r\n\r\n", 22);
    a = read_all(slow, &n);
    cr_assert(strncmp(a, "HTTP/1.1 408 ", 13) == 0, "%s", a);
    cr_assert_geq(flps_mono_s() - t0, MINIHTTP_READ_S - 0.1);
    free(a);
    a = read_all(next, &n);
    cr_assert_not_null(strstr(a, "\r\n\r\nGET /next"), "%s", a);
    cr_assert_lt(flps_mono_s() - t0, MINIHTTP_READ_S + 2,
                 "the queued client waited only for the slow one's deadline");
    free(a);
    close(slow);
    close(next);
    minihttp_stop(sv.s);
}

Test(minihttp, rude_clients_leave_it_serving_without_leaking)
{
    server sv;
    int before, fd;
    char *a;

    start(&sv);
    /* Warm up (the first connection may open descriptors of its own). */
    free(exchange(&sv, "GET / HTTP/1.1\r\n\r\n"));
    usleep(400 * 1000); /* its end closed (after MINIHTTP_LINGER_S at most) */
    before = open_fds();
    for (int i = 0; i < 100; i++) {
        fd = dial(&sv);
        if (i % 3 == 0) { /* gone before it asked */
            close(fd);
            continue;
        }
        if (i % 3 == 1) { /* asks for 4 MiB and leaves without reading */
            send_text(fd, "GET /big HTTP/1.1\r\n\r\n", 21);
            close(fd);
            continue;
        }
        /* a body the server never reads: the answer still arrives */
        send_text(fd, "POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 44);
        {
            size_t n;
            char *r = read_all(fd, &n);
            cr_assert_not_null(strstr(r, "\r\n\r\nPOST /p"), "%s", r);
            free(r);
        }
        close(fd);
    }
    a = exchange(&sv, "GET /still HTTP/1.1\r\n\r\n");
    cr_assert_not_null(strstr(a, "GET /still"), "%s", a);
    free(a);
    /* The server closes its end once it saw ours close: give it a moment. */
    for (int i = 0; i < 100 && open_fds() != before; i++)
        usleep(10 * 1000);
    cr_assert_eq(open_fds(), before, "a connection was not closed");
    minihttp_stop(sv.s);
}

Test(minihttp, stop_returns_at_once_with_a_slow_client_connected)
{
    server sv;
    double t0;
    int fd;

    start(&sv);
    fd = dial(&sv);
    send_text(fd, "GET", 3);
    usleep(100 * 1000); /* the server is in that connection now */
    t0 = flps_mono_s();
    minihttp_stop(sv.s);
    cr_assert_lt(flps_mono_s() - t0, 0.5);
    close(fd);
}

Test(minihttp, a_taken_port_or_a_bad_address_is_refused)
{
    server sv;
    minihttp *s = NULL;
    int calls = 0;

    start(&sv);
    cr_assert_eq(minihttp_start(sv.bound, echo, &calls, &s, NULL, 0),
                 FLPS_ESYS);
    cr_assert_eq(minihttp_start("nonsense", echo, &calls, &s, NULL, 0),
                 FLPS_EINVAL);
    cr_assert_eq(minihttp_start("[::1:0", echo, &calls, &s, NULL, 0),
                 FLPS_EINVAL);
    cr_assert_null(s);
    minihttp_stop(sv.s);
    minihttp_stop(NULL);
}

static size_t sink(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    *(size_t *)arg += size * n;
    return size * n;
}

Test(minihttp, curl_reads_its_answers)
{
    char url[128];
    server sv;
    CURL *c;
    long code = 0;
    size_t got = 0;
    curl_off_t cl = -1;

    start(&sv);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    c = curl_easy_init();
    snprintf(url, sizeof(url), "http://%s/big", sv.bound);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    cr_assert_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
    cr_assert_eq(code, 200);
    cr_assert_eq(got, (size_t)4 << 20);
    cr_assert_eq(cl, (curl_off_t)4 << 20);
    /* Keep-alive asked, close answered: curl reconnects for the next. */
    snprintf(url, sizeof(url), "http://%s/missing", sv.bound);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    cr_assert_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    cr_assert_eq(code, 404);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    cr_assert_eq(sv.calls, 2);
    minihttp_stop(sv.s);
}
