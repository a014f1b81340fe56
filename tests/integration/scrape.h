/* Helpers for integration tests of a daemon's /metrics: start flps with
 * --metrics, GET a path over HTTP (libcurl) and read one sample of the
 * text format. Header-only, like spawn.h. */
#ifndef FLPS_TESTS_SCRAPE_H
#define FLPS_TESTS_SCRAPE_H

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spawn.h"

/* Start flps with args (which hold --metrics) and wait for its
 * "listening on" line; then read the address of its metrics server from
 * the log line that names it. Returns 0 on success. */
static inline int test_shard_start_metrics(test_shard *s, const char *log_path,
                                           const char *const *args,
                                           char *mbound, size_t mlen)
{
    static const char needle[] = "metrics on http://";

    if (test_shard_start(s, log_path, args) != 0)
        return -1;
    /* The line comes just after the one on stdout. */
    for (int tries = 0; tries < 500; tries++) {
        char line[512];
        FILE *f = fopen(log_path, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            const char *at = strstr(line, needle);
            if (at != NULL) {
                at += sizeof(needle) - 1;
                snprintf(mbound, mlen, "%.*s", (int)strcspn(at, "/"), at);
                fclose(f);
                return 0;
            }
        }
        if (f != NULL)
            fclose(f);
        usleep(10 * 1000);
    }
    return -1;
}

typedef struct scrape {
    long status;
    char *body;
    size_t len;
} scrape;

static inline size_t scrape_on_data(char *p, size_t size, size_t n, void *arg)
{
    scrape *r = arg;
    char *nb = realloc(r->body, r->len + size * n + 1);

    if (nb == NULL)
        return 0;
    memcpy(nb + r->len, p, size * n);
    r->len += size * n;
    nb[r->len] = '\0';
    r->body = nb;
    return size * n;
}

static inline void scrape_get(const char *mbound, const char *path, scrape *r)
{
    CURL *c = curl_easy_init();
    char url[512];
    CURLcode cc;

    memset(r, 0, sizeof(*r));
    snprintf(url, sizeof(url), "http://%s%s", mbound, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, scrape_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    cc = curl_easy_perform(c);
    cr_assert_eq(cc, CURLE_OK, "%s: %s", url, curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->body == NULL)
        r->body = calloc(1, 1);
    curl_easy_cleanup(c);
}

/* The value of the sample line "name value", or -1 if absent. */
static inline double scrape_sample(const char *text, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

/* The value of flps_connections_refused_total{reason=why} in a scrape of
 * the shard's metrics at mbound, or -1 when absent. */
static inline double scrape_conns_refused(const char *mbound, const char *why)
{
    char name[128];
    scrape r;
    double v;

    snprintf(name, sizeof(name),
             "flps_connections_refused_total{reason=\"%s\"}", why);
    scrape_get(mbound, "/metrics", &r);
    cr_assert_eq(r.status, 200);
    v = scrape_sample(r.body, name);
    free(r.body);
    return v;
}

#endif
