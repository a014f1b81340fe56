/* services/httpd: real HTTP over loopback with libcurl as the client. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "services/httpd.h"

/* ---- a small libcurl client ---- */

typedef struct http_result {
    long status;
    char *body; /* malloc'd, NUL-terminated */
    size_t len;
    char ctype[128];
} http_result;

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    http_result *r = arg;
    char *nb = realloc(r->body, r->len + size * n + 1);

    if (nb == NULL)
        return 0;
    memcpy(nb + r->len, p, size * n);
    r->len += size * n;
    nb[r->len] = '\0';
    r->body = nb;
    return size * n;
}

typedef struct chunked_src {
    const char *data;
    size_t len, off;
} chunked_src;

static size_t on_read(char *p, size_t size, size_t n, void *arg)
{
    chunked_src *s = arg;
    size_t k = size * n;

    if (k > s->len - s->off)
        k = s->len - s->off;
    memcpy(p, s->data + s->off, k);
    s->off += k;
    return k;
}

/* Send method to http://bound/path with body (NULL: none) and headers;
 * chunked sends the body with Transfer-Encoding: chunked (no length).
 * Returns the curl code; fills r (caller frees r->body). */
static CURLcode http_do_ex(const char *bound, const char *method,
                           const char *path, const char *body, size_t len,
                           const char *const *headers, int chunked,
                           http_result *r)
{
    CURL *c = curl_easy_init();
    struct curl_slist *hl = NULL;
    char url[512];
    chunked_src src = {body, len, 0};
    char *ct = NULL;
    CURLcode cc;

    memset(r, 0, sizeof(*r));
    cr_assert_not_null(c);
    snprintf(url, sizeof(url), "http://%s%s", bound, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    for (int i = 0; headers != NULL && headers[i] != NULL; i++)
        hl = curl_slist_append(hl, headers[i]);
    if (chunked) {
        hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, &src);
    } else if (body != NULL) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(r->ctype, sizeof(r->ctype), "%s", ct ? ct : "");
    }
    if (r->body == NULL)
        r->body = calloc(1, 1);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return cc;
}

static void http_do(const char *bound, const char *method, const char *path,
                    const char *body, size_t len, const char *const *headers,
                    http_result *r)
{
    CURLcode cc = http_do_ex(bound, method, path, body, len, headers, 0, r);
    cr_assert_eq(cc, CURLE_OK, "%s %s: %s", method, path,
                 curl_easy_strerror(cc));
}

/* ---- the handler under test ---- */

typedef struct echo_state {
    atomic_int calls;
    atomic_int running; /* handlers inside /slow right now */
    atomic_int max_running;
    atomic_int finished_slow;
} echo_state;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* /echo answers the body back as text/plain; /info describes the request
 * as JSON; /slow sleeps 300 ms; /nothing leaves the defaults; /bad sets an
 * impossible status; anything else is 404. */
static void echo_handler(void *arg, const httpd_request *req,
                         httpd_response *resp)
{
    echo_state *st = arg;
    const char *q, *hv, *flag;

    atomic_fetch_add(&st->calls, 1);
    if (strcmp(req->path, "/echo") == 0) {
        cr_assert_eq(
            httpd_respond(resp, 200, "text/plain", req->body, req->body_len),
            FLPS_OK);
        cr_assert_eq(req->body[req->body_len], '\0',
                     "the body is NUL-terminated");
    } else if (strcmp(req->path, "/info") == 0) {
        q = httpd_query(req, "a");
        hv = httpd_header(req, "x-flps-test");
        flag = httpd_query(req, "flag");
        httpd_respond_printf(
            resp, 200,
            "{\"method\":\"%s\",\"path\":\"%s\",\"a\":\"%s\",\"h\":\"%s\","
            "\"flag\":\"%s\",\"missing\":%s,\"len\":%zu}",
            req->method, req->path, q ? q : "(null)", hv ? hv : "(null)",
            flag ? flag : "(null)",
            httpd_query(req, "zz") == NULL ? "true" : "false", req->body_len);
    } else if (strcmp(req->path, "/slow") == 0) {
        int now = atomic_fetch_add(&st->running, 1) + 1;
        int prev = atomic_load(&st->max_running);
        while (now > prev &&
               !atomic_compare_exchange_weak(&st->max_running, &prev, now))
            ;
        sleep_ms(300);
        atomic_fetch_sub(&st->running, 1);
        atomic_fetch_add(&st->finished_slow, 1);
        httpd_respond_printf(resp, 200, "{\"slept\":300}");
    } else if (strcmp(req->path, "/nothing") == 0) {
        /* defaults */
    } else if (strcmp(req->path, "/bad") == 0) {
        resp->status = 42;
    } else {
        httpd_respond_printf(resp, 404, "{\"error\":\"no route %s\"}",
                             req->path);
    }
}

static httpd *start(echo_state *st, size_t max_body, char *bound)
{
    httpd *h = NULL;

    cr_assert_eq(
        httpd_start("127.0.0.1:0", max_body, echo_handler, st, &h, bound, 64),
        FLPS_OK);
    cr_assert_not_null(h);
    return h;
}

static void setup(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void)
{
    curl_global_cleanup();
}

TestSuite(httpd, .init = setup, .fini = teardown, .timeout = 60);

Test(httpd, binds_port_zero_to_a_free_port_and_reports_it)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);

    cr_assert_eq(strncmp(bound, "127.0.0.1:", 10), 0, "bound is %s", bound);
    cr_assert_gt(atoi(bound + 10), 0, "a real port, not 0: %s", bound);
    httpd_stop(h);
}

Test(httpd, get_with_query_and_headers_reaches_the_handler)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    const char *hdrs[] = {"X-Flps-Test: hello world", NULL};
    http_result r;

    http_do(bound, "GET", "/info?a=1%202&flag&b=x", NULL, 0, hdrs, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.ctype, "application/json");
    cr_assert_str_eq(r.body,
                     "{\"method\":\"GET\",\"path\":\"/info\",\"a\":\"1 2\","
                     "\"h\":\"hello world\",\"flag\":\"\",\"missing\":true,"
                     "\"len\":0}");
    free(r.body);
    httpd_stop(h);
}

Test(httpd, delete_method_reaches_the_handler)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    http_result r;

    http_do(bound, "DELETE", "/info", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"method\":\"DELETE\"") != NULL, "%s", r.body);
    free(r.body);
    httpd_stop(h);
}

Test(httpd, post_body_arrives_intact)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    const char body[] = "{\"job\":\"j3\",\"workers\":4}";
    http_result r;

    http_do(bound, "POST", "/echo", body, strlen(body), NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.ctype, "text/plain");
    cr_assert_eq(r.len, strlen(body));
    cr_assert_str_eq(r.body, body);
    free(r.body);
    httpd_stop(h);
}

Test(httpd, a_one_mebibyte_binary_body_arrives_intact)
{
    echo_state st = {0};
    char bound[64];
    const size_t n = 1u << 20;
    httpd *h = start(&st, n, bound);
    char *body = malloc(n);
    http_result r;

    cr_assert_not_null(body);
    /* Every byte value, NULs included: the length, not strlen, counts. */
    for (size_t i = 0; i < n; i++)
        body[i] = (char)((i * 131u + (i >> 9)) & 0xff);
    http_do(bound, "POST", "/echo", body, n, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, n, "got %zu bytes back", r.len);
    cr_assert_eq(memcmp(r.body, body, n), 0, "the body came back changed");
    free(r.body);

    /* The same bytes, chunked (no Content-Length), exactly at the cap. */
    cr_assert_eq(http_do_ex(bound, "POST", "/echo", body, n, NULL, 1, &r),
                 CURLE_OK);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, n);
    cr_assert_eq(memcmp(r.body, body, n), 0);
    free(r.body);
    free(body);
    httpd_stop(h);
}

Test(httpd, an_empty_post_body_is_an_empty_string)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    http_result r;

    http_do(bound, "POST", "/info", "", 0, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"method\":\"POST\"") != NULL, "%s", r.body);
    cr_assert(strstr(r.body, "\"len\":0") != NULL, "%s", r.body);
    free(r.body);
    http_do(bound, "POST", "/echo", "", 0, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, 0);
    free(r.body);
    httpd_stop(h);
}

Test(httpd, a_body_over_max_body_gets_413_without_calling_the_handler)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 100, bound);
    char body[101];
    http_result r;

    memset(body, 'x', sizeof(body));
    http_do(bound, "POST", "/echo", body, sizeof(body), NULL, &r);
    cr_assert_eq(r.status, 413, "declared length over the cap");
    free(r.body);
    cr_assert_eq(
        http_do_ex(bound, "POST", "/echo", body, sizeof(body), NULL, 1, &r),
        CURLE_OK);
    cr_assert_eq(r.status, 413, "chunked body that grows over the cap");
    free(r.body);
    cr_assert_eq(atomic_load(&st.calls), 0, "the handler never ran");

    /* Exactly max_body is allowed. */
    http_do(bound, "POST", "/echo", body, 100, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, 100);
    free(r.body);
    httpd_stop(h);
}

Test(httpd, the_handler_can_answer_404)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    http_result r;

    http_do(bound, "GET", "/v1/nope", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 404);
    cr_assert_str_eq(r.body, "{\"error\":\"no route /v1/nope\"}");
    cr_assert_str_eq(r.ctype, "application/json");
    free(r.body);
    httpd_stop(h);
}

Test(httpd, a_handler_that_sets_nothing_answers_200_empty_json)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    http_result r;

    http_do(bound, "GET", "/nothing", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, 0);
    cr_assert_str_eq(r.ctype, "application/json");
    free(r.body);
    http_do(bound, "GET", "/bad", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 500, "an impossible status becomes 500");
    free(r.body);
    httpd_stop(h);
}

typedef struct client_arg {
    const char *bound;
    const char *path;
    int n;
    int ok;
} client_arg;

static void *client_thread(void *p)
{
    client_arg *a = p;
    http_result r;

    for (int i = 0; i < a->n; i++) {
        if (http_do_ex(a->bound, "GET", a->path, NULL, 0, NULL, 0, &r) ==
                CURLE_OK &&
            r.status == 200)
            a->ok++;
        free(r.body);
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

Test(httpd, concurrent_requests_are_all_answered)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    pthread_t th[8];
    client_arg a[8];

    for (int i = 0; i < 8; i++) {
        a[i] = (client_arg){bound, "/info?a=x", 25, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, client_thread, &a[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(a[i].ok, 25, "client %d got %d of 25", i, a[i].ok);
    }
    cr_assert_eq(atomic_load(&st.calls), 200);
    httpd_stop(h);
}

Test(httpd, a_slow_handler_does_not_hold_up_other_connections)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    pthread_t th[6];
    client_arg a[6];
    double t0 = now_s(), dt;

    for (int i = 0; i < 6; i++) {
        a[i] = (client_arg){bound, "/slow", 1, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, client_thread, &a[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(a[i].ok, 1);
    }
    dt = now_s() - t0;
    cr_assert_gt(atomic_load(&st.max_running), 1, "handlers ran one at a time");
    cr_assert_lt(dt, 6 * 0.3, "6 sleeps of 0.3 s took %.2f s", dt);
    httpd_stop(h);
}

Test(httpd, stop_while_idle_returns_at_once)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    double t0 = now_s();

    httpd_stop(h);
    cr_assert_lt(now_s() - t0, 2.0);
    httpd_stop(NULL);
}

Test(httpd, stop_waits_for_a_running_handler)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = start(&st, 1024, bound);
    pthread_t th;
    client_arg a = {bound, "/slow", 1, 0};

    cr_assert_eq(pthread_create(&th, NULL, client_thread, &a), 0);
    while (atomic_load(&st.running) == 0)
        sleep_ms(5);
    httpd_stop(h);
    cr_assert_eq(atomic_load(&st.finished_slow), 1,
                 "httpd_stop returned while a handler was running");
    pthread_join(th, NULL);
}

Test(httpd, stop_closes_an_idle_keep_alive_connection)
{
    echo_state st = {0};
    char bound[64], url[128];
    httpd *h = start(&st, 1024, bound);
    CURL *c = curl_easy_init();
    http_result r = {0};
    double t0;

    /* The handle keeps its connection open after the transfer. */
    snprintf(url, sizeof(url), "http://%s/info", bound);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    cr_assert_eq(curl_easy_perform(c), CURLE_OK);
    t0 = now_s();
    httpd_stop(h);
    cr_assert_lt(now_s() - t0, 5.0, "stop hung on an idle connection");
    curl_easy_cleanup(c);
    free(r.body);
}

Test(httpd, a_taken_port_is_a_clear_error)
{
    echo_state st = {0};
    char bound[64], bound2[64] = "untouched";
    httpd *h = start(&st, 1024, bound), *h2 = (httpd *)0x1;

    cr_assert_eq(httpd_start(bound, 1024, echo_handler, &st, &h2, bound2,
                             sizeof(bound2)),
                 FLPS_ESYS);
    cr_assert_eq(h2, (httpd *)0x1, "*out untouched on error");
    cr_assert_str_eq(bound2, "untouched");
    httpd_stop(h);
}

Test(httpd, a_malformed_listen_address_is_refused)
{
    echo_state st = {0};
    httpd *h = NULL;
    const char *bad[] = {"127.0.0.1",
                         "127.0.0.1:",
                         "127.0.0.1:x",
                         "127.0.0.1:99999",
                         "::1:80",
                         "[::1]80",
                         "no.such.host.invalid:80",
                         NULL};

    for (int i = 0; bad[i] != NULL; i++)
        cr_assert_eq(httpd_start(bad[i], 10, echo_handler, &st, &h, NULL, 0),
                     FLPS_EINVAL, "'%s' accepted", bad[i]);
    cr_assert_null(h);
    cr_assert_eq(httpd_start(NULL, 10, echo_handler, &st, &h, NULL, 0),
                 FLPS_EINVAL);
    cr_assert_eq(httpd_start("127.0.0.1:0", 10, NULL, &st, &h, NULL, 0),
                 FLPS_EINVAL);
}

Test(httpd, an_empty_host_listens_on_every_interface)
{
    echo_state st = {0};
    char bound[64], local[96];
    httpd *h = NULL;
    http_result r;

    cr_assert_eq(
        httpd_start(":0", 10, echo_handler, &st, &h, bound, sizeof(bound)),
        FLPS_OK);
    cr_assert_eq(strncmp(bound, "0.0.0.0:", 8), 0, "%s", bound);
    snprintf(local, sizeof(local), "127.0.0.1:%s", bound + 8);
    http_do(local, "GET", "/nothing", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 200);
    free(r.body);
    httpd_stop(h);
}

Test(httpd, respond_printf_replaces_the_body_and_status)
{
    httpd_response resp = {200, "application/json", NULL, 0, 0};

    cr_assert_eq(httpd_respond_printf(&resp, 201, "{\"id\":%d}", 7), FLPS_OK);
    cr_assert_eq(resp.status, 201);
    cr_assert_str_eq(resp.body, "{\"id\":7}");
    cr_assert_eq(resp.body_len, 8);
    cr_assert_eq(httpd_respond_printf(&resp, 409, "%s", "taken"), FLPS_OK);
    cr_assert_str_eq(resp.body, "taken");
    flps_alloc_fail_at(1);
    cr_assert_eq(httpd_respond_printf(&resp, 500, "x"), FLPS_ENOMEM);
    cr_assert_eq(resp.status, 409, "unchanged on error");
    cr_assert_str_eq(resp.body, "taken");
    cr_assert_eq(httpd_respond(&resp, 200, "text/plain", "ab", 2), FLPS_OK);
    cr_assert_str_eq(resp.content_type, "text/plain");
    cr_assert_str_eq(resp.body, "ab");
    cr_assert_eq(httpd_respond(&resp, 200,
                               "text/plain; a-very-long-parameter=that-"
                               "does-not-fit-in-sixty-four-bytes",
                               "x", 1),
                 FLPS_EINVAL);
    cr_assert_str_eq(resp.body, "ab");
    flps_free(resp.body);
}

static int count_fds(void)
{
    int n = 0;
    char path[64];

    for (int fd = 0; fd < 1024; fd++) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        if (access(path, F_OK) == 0)
            n++;
    }
    return n;
}

Test(httpd, stop_releases_the_port_and_every_descriptor)
{
    echo_state st = {0};
    char bound[64], again[64];
    int before = count_fds();
    httpd *h = start(&st, 1024, bound);
    http_result r;

    http_do(bound, "GET", "/nothing", NULL, 0, NULL, &r);
    free(r.body);
    httpd_stop(h);
    cr_assert_eq(count_fds(), before, "a descriptor leaked");
    cr_assert_eq(
        httpd_start(bound, 1024, echo_handler, &st, &h, again, sizeof(again)),
        FLPS_OK, "the port is free again after stop");
    cr_assert_str_eq(again, bound);
    httpd_stop(h);
}

Test(httpd, tells_a_listen_address_on_every_interface)
{
    cr_assert(httpd_listen_is_any("0.0.0.0:8080"));
    cr_assert(httpd_listen_is_any(":8080"));
    cr_assert(httpd_listen_is_any("*:8080"));
    cr_assert(httpd_listen_is_any("[::]:8080"));
    cr_assert(httpd_listen_is_any("[::0]:0"));
    cr_assert(httpd_listen_is_any("0:80"), "0 is 0.0.0.0 to the resolver");
    cr_assert_not(httpd_listen_is_any("127.0.0.1:8080"));
    cr_assert_not(httpd_listen_is_any("[::1]:8080"));
    cr_assert_not(httpd_listen_is_any("localhost:8080"));
    cr_assert_not(httpd_listen_is_any("0.0.0.0"), "not HOST:PORT");
    cr_assert_not(httpd_listen_is_any(NULL));
}

Test(httpd, a_star_host_listens_on_every_interface)
{
    echo_state st = {0};
    char bound[64];
    httpd *h = NULL;

    cr_assert_eq(
        httpd_start("*:0", 1024, echo_handler, &st, &h, bound, sizeof(bound)),
        FLPS_OK);
    cr_assert_eq(strncmp(bound, "0.0.0.0:", 8), 0, "bound %s", bound);
    httpd_stop(h);
}
