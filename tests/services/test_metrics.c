/* services/metrics and the registry under it (common/metrics): exact text
 * format, escaping, histograms, concurrency, validation, promtool's
 * verdict, and /metrics + /healthz over HTTP. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "services/metrics.h"

static metrics *new_reg(void)
{
    metrics *reg = NULL;

    cr_assert_eq(metrics_create(&reg), FLPS_OK);
    return reg;
}

static char *render(metrics *reg)
{
    char *text = NULL;
    size_t len = 0;

    cr_assert_eq(metrics_render(reg, &text, &len), FLPS_OK);
    cr_assert_eq(strlen(text), len);
    return text;
}

/* A registry with every kind of family, used by several tests. */
static metrics *small_registry(void)
{
    metrics *reg = new_reg();
    metrics_family *pushes, *rej, *parts, *close;
    const char *reason[] = {"reason"};
    const char *part[] = {"part"};
    const double bounds[] = {0.1, 1};

    cr_assert_eq(metrics_counter(reg, "flps_pushes_total", "Pushes accepted.",
                                 NULL, 0, &pushes),
                 FLPS_OK);
    cr_assert_eq(metrics_counter(reg, "flps_rejected_total",
                                 "Messages refused, by reason.", reason, 1,
                                 &rej),
                 FLPS_OK);
    cr_assert_eq(
        metrics_gauge(reg, "flps_parts_owned", "Parts owned.", NULL, 0, &parts),
        FLPS_OK);
    cr_assert_eq(metrics_histogram(reg, "flps_close_seconds",
                                   "First push to close.", part, 1, bounds, 2,
                                   &close),
                 FLPS_OK);
    cr_assert_eq(metrics_counter_add(pushes, NULL, 3), FLPS_OK);
    cr_assert_eq(metrics_counter_add(rej, (const char *[]){"FLPS_ELATE"}, 2),
                 FLPS_OK);
    cr_assert_eq(metrics_counter_set(rej, (const char *[]){"FLPS_EDUP"}, 1),
                 FLPS_OK);
    cr_assert_eq(metrics_gauge_set(parts, NULL, 12), FLPS_OK);
    cr_assert_eq(metrics_gauge_add(parts, NULL, -0.5), FLPS_OK);
    cr_assert_eq(metrics_histogram_observe(close, (const char *[]){"0"}, 0.05),
                 FLPS_OK);
    cr_assert_eq(metrics_histogram_observe(close, (const char *[]){"0"}, 0.5),
                 FLPS_OK);
    cr_assert_eq(metrics_histogram_observe(close, (const char *[]){"0"}, 7),
                 FLPS_OK);
    return reg;
}

Test(metrics, renders_a_small_registry_exactly)
{
    metrics *reg = small_registry();
    char *text = render(reg);

    /* _sum and _count keep the series' labels. */
    cr_assert_str_eq(text,
                     "# HELP flps_pushes_total Pushes accepted.\n"
                     "# TYPE flps_pushes_total counter\n"
                     "flps_pushes_total 3\n"
                     "# HELP flps_rejected_total Messages refused, by "
                     "reason.\n"
                     "# TYPE flps_rejected_total counter\n"
                     "flps_rejected_total{reason=\"FLPS_ELATE\"} 2\n"
                     "flps_rejected_total{reason=\"FLPS_EDUP\"} 1\n"
                     "# HELP flps_parts_owned Parts owned.\n"
                     "# TYPE flps_parts_owned gauge\n"
                     "flps_parts_owned 11.5\n"
                     "# HELP flps_close_seconds First push to close.\n"
                     "# TYPE flps_close_seconds histogram\n"
                     "flps_close_seconds_bucket{part=\"0\",le=\"0.1\"} 1\n"
                     "flps_close_seconds_bucket{part=\"0\",le=\"1\"} 2\n"
                     "flps_close_seconds_bucket{part=\"0\",le=\"+Inf\"} 3\n"
                     "flps_close_seconds_sum{part=\"0\"} 7.55\n"
                     "flps_close_seconds_count{part=\"0\"} 3\n");
    flps_free(text);
    metrics_destroy(reg);
}

/* A daemon's families as the tables of metrics_register_table hold them. */
typedef struct table_daemon {
    metrics_family *pushes, *rej, *parts, *close;
} table_daemon;

static const char *const table_reason[] = {"reason"};
static const char *const table_part[] = {"part"};
static const double table_bounds[] = {0.1, 1};

static const metrics_def table_defs[] = {
    {METRICS_COUNTER, "flps_pushes_total", METRICS_AT(table_daemon, pushes),
     "Pushes accepted."},
    {METRICS_COUNTER, "flps_rejected_total", METRICS_AT(table_daemon, rej),
     "Messages refused, by reason.", METRICS_LABELS(table_reason)},
    {METRICS_GAUGE, "flps_parts_owned", METRICS_AT(table_daemon, parts),
     "Parts owned."},
    {METRICS_HISTOGRAM, "flps_close_seconds", METRICS_AT(table_daemon, close),
     "First push to close.", METRICS_LABELS(table_part),
     METRICS_BOUNDS(table_bounds)},
};

Test(metrics, a_table_registers_the_same_families_as_the_calls_in_its_order)
{
    metrics *want = small_registry(), *reg = new_reg();
    table_daemon d;
    char *a, *b;

    memset(&d, 0, sizeof(d));
    cr_assert_eq(
        metrics_register_table(reg, table_defs, METRICS_NDEFS(table_defs), &d),
        FLPS_OK);
    cr_assert(d.pushes && d.rej && d.parts && d.close, "every handle written");
    cr_assert_eq(metrics_counter_add(d.pushes, NULL, 3), FLPS_OK);
    cr_assert_eq(metrics_counter_add(d.rej, (const char *[]){"FLPS_ELATE"}, 2),
                 FLPS_OK);
    cr_assert_eq(metrics_counter_set(d.rej, (const char *[]){"FLPS_EDUP"}, 1),
                 FLPS_OK);
    cr_assert_eq(metrics_gauge_set(d.parts, NULL, 11.5), FLPS_OK);
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(metrics_histogram_observe(d.close, (const char *[]){"0"},
                                               (double[]){0.05, 0.5, 7}[i]),
                     FLPS_OK);
    a = render(want);
    b = render(reg);
    cr_assert_str_eq(b, a);
    flps_free(a);
    flps_free(b);
    metrics_destroy(want);
    metrics_destroy(reg);
}

Test(metrics, a_table_stops_at_its_first_bad_row_and_says_so)
{
    static const metrics_def bad[] = {
        {METRICS_GAUGE, "flps_parts_owned", METRICS_AT(table_daemon, parts),
         "Parts owned."},
        {METRICS_COUNTER, "flps_pushes", METRICS_AT(table_daemon, pushes),
         "A counter without _total."},
        {METRICS_GAUGE, "flps_later", METRICS_AT(table_daemon, rej), "Later."},
    };
    metrics *reg = new_reg();
    table_daemon d;
    char *text;

    memset(&d, 0, sizeof(d));
    cr_assert_eq(metrics_register_table(reg, bad, 3, &d), FLPS_EINVAL);
    cr_assert_not_null(d.parts, "the rows before it are registered");
    cr_assert_null(d.pushes);
    cr_assert_null(d.rej, "no row after it is");
    text = render(reg);
    cr_assert_str_eq(text, "# HELP flps_parts_owned Parts owned.\n"
                           "# TYPE flps_parts_owned gauge\n"
                           "flps_parts_owned 0\n");
    flps_free(text);
    cr_assert_eq(metrics_register_table(NULL, bad, 1, &d), FLPS_EINVAL);
    cr_assert_eq(metrics_register_table(reg, bad, 1, NULL), FLPS_EINVAL);
    cr_assert_eq(metrics_register_table(reg, NULL, 0, &d), FLPS_OK);
    metrics_destroy(reg);
}

Test(metrics, an_empty_registry_renders_nothing)
{
    metrics *reg = new_reg();
    char *text = render(reg);

    cr_assert_str_eq(text, "");
    flps_free(text);
    metrics_destroy(reg);
    metrics_destroy(NULL);
}

Test(metrics, a_labelled_family_before_any_update_has_only_its_header)
{
    metrics *reg = new_reg();
    metrics_family *f;
    const char *l[] = {"a", "b"};
    char *text;

    cr_assert_eq(metrics_gauge(reg, "g", NULL, l, 2, &f), FLPS_OK);
    text = render(reg);
    cr_assert_str_eq(text, "# TYPE g gauge\n", "no HELP line without help");
    flps_free(text);
    cr_assert_eq(metrics_gauge_set(f, (const char *[]){"x", "y"}, 1e21),
                 FLPS_OK);
    cr_assert_eq(metrics_gauge_set(f, (const char *[]){"x", "z"}, 0.1),
                 FLPS_OK);
    cr_assert_eq(metrics_gauge_set(f, (const char *[]){"x", "y"}, -2), FLPS_OK,
                 "the same tuple updates its series");
    text = render(reg);
    cr_assert_str_eq(text, "# TYPE g gauge\n"
                           "g{a=\"x\",b=\"y\"} -2\n"
                           "g{a=\"x\",b=\"z\"} 0.1\n");
    flps_free(text);
    metrics_destroy(reg);
}

Test(metrics, escapes_label_values_and_help)
{
    metrics *reg = new_reg();
    metrics_family *f;
    const char *l[] = {"path"};
    char *text;

    cr_assert_eq(metrics_counter(reg, "odd_total",
                                 "Backslash \\ newline\nquote \" stays.", l, 1,
                                 &f),
                 FLPS_OK);
    cr_assert_eq(
        metrics_counter_add(f, (const char *[]){"C:\\dir\n\"q\" {x=1}"}, 1),
        FLPS_OK);
    text = render(reg);
    cr_assert_str_eq(
        text, "# HELP odd_total Backslash \\\\ newline\\nquote \" stays.\n"
              "# TYPE odd_total counter\n"
              "odd_total{path=\"C:\\\\dir\\n\\\"q\\\" {x=1}\"} 1\n");
    flps_free(text);
    metrics_destroy(reg);
}

/* The value of the line that starts with prefix, or -1. */
static double value_of(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

Test(metrics, histogram_buckets_are_cumulative_and_inf_equals_count)
{
    metrics *reg = new_reg();
    metrics_family *h;
    size_t nb;
    const double *b = metrics_seconds_buckets(&nb);
    const double obs[] = {0,    0.0005, 0.001, 0.001, 0.002, 0.3,  0.3,
                          0.99, 1,      2,     59.9,  60,    61,   1e9,
                          -1,   1e-9,   0.025, 0.026, 5,     10.01};
    const size_t nobs = sizeof(obs) / sizeof(obs[0]);
    double sum = 0, prev = 0;
    char *text, line[128], le[32];

    cr_assert_eq(metrics_histogram(reg, "lat_seconds", "x", NULL, 0, b, nb, &h),
                 FLPS_OK);
    for (size_t i = 0; i < nobs; i++) {
        cr_assert_eq(metrics_histogram_observe(h, NULL, obs[i]), FLPS_OK);
        sum += obs[i];
    }
    text = render(reg);
    for (size_t i = 0; i <= nb; i++) {
        size_t want = 0;
        double got;
        if (i < nb)
            snprintf(le, sizeof(le), "%g", b[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        snprintf(line, sizeof(line), "lat_seconds_bucket{le=\"%s\"}", le);
        /* le is inclusive: an observation equal to a bound counts in it. */
        for (size_t j = 0; j < nobs; j++)
            if (i == nb || obs[j] <= b[i])
                want++;
        got = value_of(text, line);
        cr_assert_eq(got, (double)want, "%s is %g, want %zu", line, got, want);
        cr_assert_geq(got, prev, "buckets are cumulative");
        prev = got;
    }
    cr_assert_eq(value_of(text, "lat_seconds_count"), (double)nobs);
    cr_assert_eq(prev, (double)nobs, "+Inf equals _count");
    cr_assert_eq(value_of(text, "lat_seconds_sum"), sum);
    cr_assert_eq(metrics_histogram_observe(h, NULL, NAN), FLPS_EINVAL);
    flps_free(text);
    metrics_destroy(reg);
}

typedef struct inc_arg {
    metrics_family *c, *lc, *h;
    int n;
    int id;
} inc_arg;

static void *incr(void *p)
{
    inc_arg *a = p;
    const char *even[] = {"even"}, *odd[] = {"odd"};

    for (int i = 0; i < a->n; i++) {
        metrics_counter_add(a->c, NULL, 1);
        metrics_counter_add(a->lc, (a->id % 2) ? odd : even, 2);
        metrics_histogram_observe(a->h, NULL, (double)(i % 3));
    }
    return NULL;
}

static void *render_loop(void *p)
{
    metrics *reg = p;

    for (int i = 0; i < 200; i++) {
        char *t;
        size_t n;
        if (metrics_render(reg, &t, &n) == FLPS_OK)
            flps_free(t);
    }
    return NULL;
}

Test(metrics, concurrent_increments_from_several_threads_sum_exactly)
{
    metrics *reg = new_reg();
    metrics_family *c, *lc, *h;
    const char *l[] = {"kind"};
    const double b[] = {0.5, 1.5};
    pthread_t th[8], rt;
    inc_arg a[8];
    const int n = 20000;
    char *text;

    cr_assert_eq(metrics_counter(reg, "n_total", "n", NULL, 0, &c), FLPS_OK);
    cr_assert_eq(metrics_counter(reg, "m_total", "m", l, 1, &lc), FLPS_OK);
    cr_assert_eq(metrics_histogram(reg, "h_seconds", "h", NULL, 0, b, 2, &h),
                 FLPS_OK);
    cr_assert_eq(pthread_create(&rt, NULL, render_loop, reg), 0);
    for (int i = 0; i < 8; i++) {
        a[i] = (inc_arg){c, lc, h, n, i};
        cr_assert_eq(pthread_create(&th[i], NULL, incr, &a[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    pthread_join(rt, NULL);
    text = render(reg);
    cr_assert_eq(value_of(text, "n_total"), 8.0 * n);
    cr_assert_eq(value_of(text, "m_total{kind=\"even\"}"), 4.0 * n * 2);
    cr_assert_eq(value_of(text, "m_total{kind=\"odd\"}"), 4.0 * n * 2);
    cr_assert_eq(value_of(text, "h_seconds_count"), 8.0 * n);
    cr_assert_eq(value_of(text, "h_seconds_bucket{le=\"+Inf\"}"), 8.0 * n);
    flps_free(text);
    metrics_destroy(reg);
}

Test(metrics, invalid_names_are_refused)
{
    metrics *reg = new_reg();
    metrics_family *f = (metrics_family *)0x1;
    const char *bad_names[] = {"",        "1abc",      "a-b", "a b",
                               "é_total", "x.y_total", NULL};
    const double b[] = {1, 2}, unsorted[] = {2, 1}, inf[] = {1, INFINITY};
    char *text;

    for (int i = 0; bad_names[i] != NULL; i++)
        cr_assert_eq(metrics_counter(reg, bad_names[i], "x", NULL, 0, &f),
                     FLPS_EINVAL, "'%s' accepted", bad_names[i]);
    cr_assert_eq(metrics_counter(reg, NULL, "x", NULL, 0, &f), FLPS_EINVAL);
    cr_assert_eq(metrics_counter(reg, "no_suffix", "x", NULL, 0, &f),
                 FLPS_EINVAL, "a counter's name ends in _total");
    cr_assert_eq(metrics_gauge(reg, "g", "x", (const char *[]){"__x"}, 1, &f),
                 FLPS_EINVAL, "__ is reserved");
    cr_assert_eq(metrics_gauge(reg, "g", "x", (const char *[]){"a:b"}, 1, &f),
                 FLPS_EINVAL, "no colon in label names");
    cr_assert_eq(metrics_gauge(reg, "g", "x", (const char *[]){"9"}, 1, &f),
                 FLPS_EINVAL);
    cr_assert_eq(
        metrics_gauge(reg, "g", "x", (const char *[]){"a", "a"}, 2, &f),
        FLPS_EINVAL, "a label name twice");
    cr_assert_eq(
        metrics_histogram(reg, "h", "x", (const char *[]){"le"}, 1, b, 2, &f),
        FLPS_EINVAL, "le belongs to the buckets");
    cr_assert_eq(metrics_histogram(reg, "h", "x", NULL, 0, unsorted, 2, &f),
                 FLPS_EINVAL);
    cr_assert_eq(metrics_histogram(reg, "h", "x", NULL, 0, inf, 2, &f),
                 FLPS_EINVAL);
    cr_assert_eq(f, (metrics_family *)0x1, "*out untouched on error");
    text = render(reg);
    cr_assert_str_eq(text, "", "nothing was registered");
    flps_free(text);

    cr_assert_eq(metrics_gauge(reg, "ns:g_1", "x", NULL, 0, &f), FLPS_OK,
                 "colons and digits are fine in metric names");
    cr_assert_eq(metrics_counter(reg, "ns:g_1", "x", NULL, 0, &f), FLPS_EINVAL,
                 "a name is registered once");
    metrics_destroy(reg);
}

Test(metrics, refused_updates_change_nothing)
{
    metrics *reg = small_registry();
    metrics_family *c, *g, *lc;
    const char *l[] = {"k"};
    char *text;

    cr_assert_eq(metrics_counter(reg, "c_total", NULL, NULL, 0, &c), FLPS_OK);
    cr_assert_eq(metrics_gauge(reg, "gg", NULL, NULL, 0, &g), FLPS_OK);
    cr_assert_eq(metrics_counter(reg, "lc_total", NULL, l, 1, &lc), FLPS_OK);
    cr_assert_eq(metrics_counter_add(c, NULL, 5), FLPS_OK);
    cr_assert_eq(metrics_counter_add(c, NULL, -1), FLPS_EINVAL);
    cr_assert_eq(metrics_counter_add(c, NULL, NAN), FLPS_EINVAL);
    cr_assert_eq(metrics_counter_add(c, NULL, INFINITY), FLPS_EINVAL);
    cr_assert_eq(metrics_counter_set(c, NULL, 4), FLPS_EINVAL,
                 "a counter never goes down");
    cr_assert_eq(metrics_counter_set(c, NULL, 5), FLPS_OK);
    cr_assert_eq(metrics_gauge_set(c, NULL, 1), FLPS_EINVAL, "wrong type");
    cr_assert_eq(metrics_histogram_observe(g, NULL, 1), FLPS_EINVAL);
    cr_assert_eq(metrics_gauge_set(g, NULL, NAN), FLPS_EINVAL);
    cr_assert_eq(metrics_counter_add(lc, NULL, 1), FLPS_EINVAL,
                 "label values are required");
    cr_assert_eq(metrics_counter_add(lc, (const char *[]){NULL}, 1),
                 FLPS_EINVAL);
    cr_assert_eq(metrics_counter_add(NULL, NULL, 1), FLPS_EINVAL);
    text = render(reg);
    cr_assert(strstr(text, "\nc_total 5\n") != NULL, "%s", text);
    cr_assert(strstr(text, "\ngg 0\n") != NULL, "%s", text);
    cr_assert(strstr(text, "# TYPE lc_total counter\n") != NULL &&
                  strstr(text, "lc_total{") == NULL,
              "no series was created: %s", text);
    flps_free(text);
    metrics_destroy(reg);
}

Test(metrics, every_allocation_failure_is_reported_cleanly)
{
    /* Fail the n-th allocation of a full build-update-render sequence for
     * every n until it succeeds: each failure is FLPS_ENOMEM, nothing
     * leaks (ASan), and the registry stays usable. */
    for (unsigned long n = 1;; n++) {
        metrics *reg = NULL;
        metrics_family *f = NULL, *h = NULL;
        const char *l[] = {"a"};
        const double b[] = {1};
        char *text = NULL;
        size_t len;
        int failed = 0;

        flps_alloc_fail_at(n);
        if (metrics_create(&reg) != FLPS_OK) {
            cr_assert_null(reg);
            continue;
        }
        failed |= metrics_counter(reg, "a_total", "a", l, 1, &f) != FLPS_OK;
        failed |=
            metrics_histogram(reg, "h_seconds", "h", l, 1, b, 1, &h) != FLPS_OK;
        if (f != NULL)
            failed |=
                metrics_counter_add(f, (const char *[]){"x"}, 1) != FLPS_OK;
        if (h != NULL)
            failed |= metrics_histogram_observe(h, (const char *[]){"x"},
                                                0.5) != FLPS_OK;
        if (metrics_render(reg, &text, &len) != FLPS_OK) {
            failed = 1;
            cr_assert_null(text);
        }
        flps_alloc_fail_at(0);
        flps_free(text);
        metrics_destroy(reg);
        if (!failed) {
            cr_assert_gt(n, 5, "the sequence allocates");
            break;
        }
        cr_assert_lt(n, 1000);
    }
}

static int have_promtool(void)
{
    return access("/usr/bin/promtool", X_OK) == 0;
}

/* Run `promtool check metrics` on text; returns its exit status. */
static int promtool_check(const char *text)
{
    FILE *p = popen("/usr/bin/promtool check metrics", "w");
    int st;

    cr_assert_not_null(p);
    fwrite(text, 1, strlen(text), p);
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(metrics, promtool_accepts_the_rendered_text)
{
    metrics *reg;
    metrics_family *f, *e;
    const char *l[] = {"path"};
    size_t nb;
    const double *b = metrics_seconds_buckets(&nb);
    char *text;

    if (!have_promtool())
        cr_skip_test("promtool is not installed (apt-get install prometheus)");
    reg = small_registry();
    cr_assert_eq(metrics_counter(reg, "odd_requests_total",
                                 "Escapes \\ and\nnewlines.", l, 1, &e),
                 FLPS_OK);
    cr_assert_eq(metrics_counter_add(e, (const char *[]){"a\"b\\c\nd"}, 1),
                 FLPS_OK);
    cr_assert_eq(metrics_histogram(reg, "req_duration_seconds", "Durations.",
                                   NULL, 0, b, nb, &f),
                 FLPS_OK);
    cr_assert_eq(metrics_histogram_observe(f, NULL, 0.2), FLPS_OK);
    text = render(reg);
    cr_assert_eq(promtool_check(text), 0, "promtool refused:\n%s", text);
    flps_free(text);
    metrics_destroy(reg);
}

Test(metrics, promtool_refuses_broken_text_so_the_check_means_something)
{
    if (!have_promtool())
        cr_skip_test("promtool is not installed (apt-get install prometheus)");
    cr_assert_neq(promtool_check("# TYPE x_total counter\nx_total{a=\"b} 1\n"),
                  0);
}

/* ---- over HTTP ---- */

typedef struct http_result {
    long status;
    char *body;
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

static void http_get(const char *bound, const char *method, const char *path,
                     http_result *r)
{
    CURL *c = curl_easy_init();
    char url[256];
    char *ct = NULL;
    CURLcode cc;

    memset(r, 0, sizeof(*r));
    snprintf(url, sizeof(url), "http://%s%s", bound, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (strcmp(method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    cc = curl_easy_perform(c);
    cr_assert_eq(cc, CURLE_OK, "%s: %s", url, curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(r->ctype, sizeof(r->ctype), "%s", ct ? ct : "");
    if (r->body == NULL)
        r->body = calloc(1, 1);
    curl_easy_cleanup(c);
}

Test(metrics, serve_answers_metrics_and_healthz_over_http)
{
    metrics *reg = small_registry();
    httpd *h = NULL;
    char bound[64], *text;
    http_result r;

    curl_global_init(CURL_GLOBAL_DEFAULT);
    cr_assert_eq(metrics_serve(reg, "127.0.0.1:0", &h, bound, sizeof(bound)),
                 FLPS_OK);
    http_get(bound, "GET", "/metrics", &r);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
    text = render(reg);
    cr_assert_str_eq(r.body, text, "the scrape is the rendered registry");
    flps_free(text);
    free(r.body);

    http_get(bound, "GET", "/healthz", &r);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.ctype, "application/json");
    cr_assert_str_eq(r.body, "{\"status\":\"ok\"}");
    free(r.body);

    http_get(bound, "GET", "/other", &r);
    cr_assert_eq(r.status, 404);
    free(r.body);
    http_get(bound, "DELETE", "/metrics", &r);
    cr_assert_eq(r.status, 405);
    free(r.body);

    if (have_promtool()) {
        http_get(bound, "GET", "/metrics", &r);
        cr_assert_eq(promtool_check(r.body), 0, "promtool refused the scrape");
        free(r.body);
    }
    httpd_stop(h);
    metrics_destroy(reg);
    curl_global_cleanup();
}

Test(metrics, route_leaves_other_paths_to_the_caller)
{
    metrics *reg = new_reg();
    httpd_request req = {"GET", "/v1/jobs", "", 0, NULL};
    httpd_response resp = {200, "application/json", NULL, 0, 0};

    cr_assert_eq(metrics_http_route(reg, &req, &resp), 0);
    cr_assert_null(resp.body, "resp untouched");
    req.path = "/healthz";
    cr_assert_eq(metrics_http_route(reg, &req, &resp), 1);
    cr_assert_str_eq(resp.body, "{\"status\":\"ok\"}");
    flps_free(resp.body);
    metrics_destroy(reg);
}
