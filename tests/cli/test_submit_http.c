/* Tests of cli/submit_http.c against a real HTTP server on loopback. */
#include "cli/submit_http.h"

#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "fake_sched.h"

static submit_http *client(const char *url, const char *token)
{
    submit_http_opts o = {.base_url = url, .token = token};
    submit_http *h = NULL;

    cr_assert_eq(submit_http_create(&o, &h), FLPS_OK);
    return h;
}

Test(submit_http, a_get_returns_the_status_and_the_body)
{
    fake_sched fs;
    submit_reply r = {0};
    submit_http *h;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, "{\"jobs\": []}");
    h = client(fs.url, NULL);
    cr_assert_eq(submit_http_request(h, "GET", "/v1/jobs", NULL, 0, &r),
                 FLPS_OK);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.body, "{\"jobs\": []}");
    cr_assert_eq(r.len, strlen("{\"jobs\": []}"));
    cr_assert_str_eq(fake_req_at(&fs, 0).method, "GET");
    submit_reply_fini(&r);
    cr_assert_null(r.body, "fini zeroes the reply");
    submit_http_destroy(h);
    fake_stop(&fs);
}

Test(submit_http, a_post_sends_the_body_bytes_exactly)
{
    static const char body[] = "name: x\n\0binary\xff tail";
    fake_sched fs;
    submit_reply r = {0};
    submit_http *h;
    fake_req q;

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, "{\"id\": \"j1\"}");
    h = client(fs.url, NULL);
    cr_assert_eq(
        submit_http_request(h, "POST", "/v1/jobs", body, sizeof(body) - 1, &r),
        FLPS_OK);
    cr_assert_eq(r.status, 201);
    q = fake_req_at(&fs, 0);
    cr_assert_str_eq(q.method, "POST");
    cr_assert_eq(q.len, sizeof(body) - 1);
    cr_assert_eq(memcmp(q.body, body, q.len), 0);
    submit_reply_fini(&r);
    submit_http_destroy(h);
    fake_stop(&fs);
}

Test(submit_http, the_token_goes_in_a_bearer_header_and_none_without_one)
{
    fake_sched fs;
    submit_reply r = {0};
    submit_http *with, *without, *empty;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/nodes", 200, "{\"nodes\": []}");
    with = client(fs.url, "s3cret");
    without = client(fs.url, NULL);
    empty = client(fs.url, "");
    cr_assert_eq(submit_http_request(with, "GET", "/v1/nodes", NULL, 0, &r),
                 FLPS_OK);
    submit_reply_fini(&r);
    cr_assert_eq(submit_http_request(without, "GET", "/v1/nodes", NULL, 0, &r),
                 FLPS_OK);
    submit_reply_fini(&r);
    cr_assert_eq(submit_http_request(empty, "GET", "/v1/nodes", NULL, 0, &r),
                 FLPS_OK);
    submit_reply_fini(&r);
    cr_assert_str_eq(fake_req_at(&fs, 0).auth, "Bearer s3cret");
    cr_assert_str_eq(fake_req_at(&fs, 1).auth, "");
    cr_assert_str_eq(fake_req_at(&fs, 2).auth, "");
    submit_http_destroy(with);
    submit_http_destroy(without);
    submit_http_destroy(empty);
    fake_stop(&fs);
}

Test(submit_http, an_error_status_is_an_answer_not_a_failure)
{
    fake_sched fs;
    submit_reply r = {0};
    submit_http *h;

    fake_start(&fs);
    fake_route_add(&fs, "DELETE", "/v1/jobs/j1", 409,
                   "{\"error\": \"job j1 already SUCCEEDED\"}");
    h = client(fs.url, NULL);
    cr_assert_eq(submit_http_request(h, "DELETE", "/v1/jobs/j1", NULL, 0, &r),
                 FLPS_OK);
    cr_assert_eq(r.status, 409);
    cr_assert_str_eq(fake_req_at(&fs, 0).method, "DELETE");
    submit_reply_fini(&r);
    submit_http_destroy(h);
    fake_stop(&fs);
}

Test(submit_http, a_refused_connection_is_ECLOSED_and_says_why)
{
    char url[64];
    int fd;
    uint16_t port = fake_dead_port(&fd);
    submit_reply r = {0};
    submit_http *h;

    snprintf(url, sizeof(url), "http://127.0.0.1:%u", (unsigned)port);
    h = client(url, NULL);
    cr_assert_eq(submit_http_request(h, "GET", "/v1/jobs", NULL, 0, &r),
                 FLPS_ECLOSED);
    cr_assert_null(r.body, "the reply is untouched on error");
    {
        char want[128];

        snprintf(want, sizeof(want),
                 "cannot reach the scheduler at %s: connection refused", url);
        cr_assert_str_eq(submit_http_last_error(h), want);
    }
    submit_http_destroy(h);
    close(fd);
}

Test(submit_http, a_slow_answer_times_out_and_says_how_long_it_waited)
{
    submit_http_opts o = {.timeout_ms = 200};
    fake_sched fs;
    submit_reply r = {0};
    submit_http *h = NULL;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, "{}")->delay_ms = 1000;
    o.base_url = fs.url;
    cr_assert_eq(submit_http_create(&o, &h), FLPS_OK);
    cr_assert_eq(submit_http_request(h, "GET", "/v1/jobs", NULL, 0, &r),
                 FLPS_ETIMEDOUT);
    cr_assert(strstr(submit_http_last_error(h),
                     "did not answer GET /v1/jobs within 0.2 s") != NULL,
              "message: %s", submit_http_last_error(h));
    submit_http_destroy(h);
    fake_stop(&fs);
}

Test(submit_http, the_client_stays_usable_after_a_failed_request)
{
    submit_http_opts o = {.timeout_ms = 200};
    fake_sched fs;
    submit_reply r = {0};
    submit_http *h = NULL;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/slow", 200, "{}")->delay_ms = 1000;
    fake_route_add(&fs, "GET", "/healthz", 200, "{\"status\": \"ok\"}");
    o.base_url = fs.url;
    cr_assert_eq(submit_http_create(&o, &h), FLPS_OK);
    cr_assert_eq(submit_http_request(h, "GET", "/slow", NULL, 0, &r),
                 FLPS_ETIMEDOUT);
    cr_assert_eq(submit_http_request(h, "GET", "/healthz", NULL, 0, &r),
                 FLPS_OK);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(submit_http_last_error(h), "");
    submit_reply_fini(&r);
    submit_http_destroy(h);
    fake_stop(&fs);
}

Test(submit_http, a_trailing_slash_in_the_url_is_dropped)
{
    fake_sched fs;
    submit_reply r = {0};
    submit_http *h;
    char url[80];

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, "{\"jobs\": []}");
    snprintf(url, sizeof(url), "%s//", fs.url);
    h = client(url, NULL);
    cr_assert_str_eq(submit_http_base_url(h), fs.url);
    cr_assert_eq(submit_http_request(h, "GET", "/v1/jobs", NULL, 0, &r),
                 FLPS_OK);
    cr_assert_eq(r.status, 200);
    submit_reply_fini(&r);
    submit_http_destroy(h);
    fake_stop(&fs);
}

Test(submit_http, a_url_that_is_not_http_is_EINVAL)
{
    submit_reply r = {0};
    submit_http *h = client("ftp://127.0.0.1:21", NULL);

    cr_assert_eq(submit_http_request(h, "GET", "/v1/jobs", NULL, 0, &r),
                 FLPS_EINVAL);
    cr_assert(strstr(submit_http_last_error(h), "is not a scheduler URL") !=
              NULL);
    submit_http_destroy(h);
}

Test(submit_http, create_refuses_a_missing_url)
{
    submit_http_opts o = {0};
    submit_http *h = (submit_http *)&o;

    cr_assert_eq(submit_http_create(&o, &h), FLPS_EINVAL);
    o.base_url = "";
    cr_assert_eq(submit_http_create(&o, &h), FLPS_EINVAL);
    cr_assert_eq(submit_http_create(NULL, &h), FLPS_EINVAL);
    cr_assert_eq(h, (submit_http *)&o, "*out is untouched on error");
    submit_http_destroy(NULL);
}

Test(submit_http, create_fails_cleanly_whichever_allocation_fails)
{
    submit_http_opts o = {.base_url = "http://127.0.0.1:1", .token = "t"};

    for (unsigned long n = 1; n <= 3; n++) {
        submit_http *h = NULL;

        flps_alloc_fail_at(n);
        cr_assert_eq(submit_http_create(&o, &h), FLPS_ENOMEM, "allocation %lu",
                     n);
        flps_alloc_fail_at(0);
        cr_assert_null(h);
    }
}

Test(submit_http, escape_keeps_unreserved_characters_and_encodes_the_rest)
{
    char *out = NULL;

    cr_assert_eq(submit_http_escape("j42", &out), FLPS_OK);
    cr_assert_str_eq(out, "j42");
    flps_free(out);
    cr_assert_eq(submit_http_escape("a b/../c?d=1&e~_.-", &out), FLPS_OK);
    cr_assert_str_eq(out, "a%20b%2F..%2Fc%3Fd%3D1%26e~_.-");
    flps_free(out);
    cr_assert_eq(submit_http_escape("1764430000123-0", &out), FLPS_OK);
    cr_assert_str_eq(out, "1764430000123-0");
    flps_free(out);
}

Test(submit_http, a_long_url_is_named_whole_in_the_message)
{
    char url[1200], dir[1000];
    submit_reply r = {0};
    submit_http *h;
    int fd;
    uint16_t port = fake_dead_port(&fd);

    memset(dir, 'd', sizeof(dir) - 1);
    dir[sizeof(dir) - 1] = '\0';
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/%s", (unsigned)port, dir);
    h = client(url, NULL);
    cr_assert_eq(submit_http_request(h, "GET", "/v1/jobs", NULL, 0, &r),
                 FLPS_ECLOSED);
    cr_assert(strstr(submit_http_last_error(h), url) != NULL,
              "the whole URL (%zu bytes) in: %s", strlen(url),
              submit_http_last_error(h));
    cr_assert(strstr(submit_http_last_error(h), ": connection refused") != NULL,
              "and the reason after it: %s", submit_http_last_error(h));
    submit_http_destroy(h);
    close(fd);
}
