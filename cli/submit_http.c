/* flsubmit's HTTP client: libcurl requests to flsched, with failures put
 * into words an operator can act on. */
#include "cli/submit_http.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/strbuf.h"

struct submit_http {
    CURL *curl; /* reused, so consecutive polls share one connection */
    char *base_url;
    char *auth_header; /* "Authorization: Bearer T", or NULL */
    char *ca_file;     /* CURLOPT_CAINFO, or NULL for the system's CAs */
    long connect_timeout_ms, timeout_ms;
    char curl_err[CURL_ERROR_SIZE];
    /* Grown to fit: a message names the URL, the CA file and libcurl's
     * words, any of which may be long, and none of it is cut. */
    flps_strbuf last_error;
};

/* Replace the last error with a formatted message. */
#define set_error(h, ...)                                                      \
    (flps_strbuf_clear(&(h)->last_error),                                      \
     flps_strbuf_printf(&(h)->last_error, __VA_ARGS__))

flps_err submit_http_create(const submit_http_opts *opts, submit_http **out)
{
    flps_err rc = FLPS_ENOMEM;
    submit_http *h;
    size_t n;

    if (opts == NULL || opts->base_url == NULL || opts->base_url[0] == '\0')
        return FLPS_EINVAL;
    h = flps_calloc(1, sizeof(*h));
    if (h == NULL)
        return FLPS_ENOMEM;
    h->base_url = flps_strdup(opts->base_url);
    if (h->base_url == NULL)
        goto fail_h;
    n = strlen(h->base_url);
    while (n > 0 && h->base_url[n - 1] == '/')
        h->base_url[--n] = '\0';
    if (opts->ca_file != NULL && opts->ca_file[0] != '\0') {
        h->ca_file = flps_strdup(opts->ca_file);
        if (h->ca_file == NULL)
            goto fail_url;
    }
    if (opts->token != NULL && opts->token[0] != '\0') {
        n = strlen(opts->token) + sizeof("Authorization: Bearer ");
        h->auth_header = flps_malloc(n);
        if (h->auth_header == NULL)
            goto fail_ca;
        snprintf(h->auth_header, n, "Authorization: Bearer %s", opts->token);
    }
    h->connect_timeout_ms = opts->connect_timeout_ms > 0
                                ? opts->connect_timeout_ms
                                : SUBMIT_HTTP_CONNECT_TIMEOUT_MS;
    h->timeout_ms =
        opts->timeout_ms > 0 ? opts->timeout_ms : SUBMIT_HTTP_TIMEOUT_MS;
    h->curl = curl_easy_init();
    if (h->curl == NULL) {
        rc = FLPS_ESYS;
        goto fail_auth;
    }
    *out = h;
    return FLPS_OK;

fail_auth:
    flps_free(h->auth_header);
fail_ca:
    flps_free(h->ca_file);
fail_url:
    flps_free(h->base_url);
fail_h:
    flps_free(h);
    return rc;
}

void submit_http_destroy(submit_http *h)
{
    if (h == NULL)
        return;
    curl_easy_cleanup(h->curl);
    flps_strbuf_fini(&h->last_error);
    flps_free(h->auth_header);
    flps_free(h->ca_file);
    flps_free(h->base_url);
    flps_free(h);
}

void submit_reply_fini(submit_reply *r)
{
    flps_free(r->body);
    memset(r, 0, sizeof(*r));
}

const char *submit_http_last_error(const submit_http *h)
{
    if (flps_strbuf_error(&h->last_error) != FLPS_OK)
        return "out of memory";
    return h->last_error.data != NULL ? h->last_error.data : "";
}

const char *submit_http_base_url(const submit_http *h)
{
    return h->base_url;
}

flps_err submit_http_escape(const char *s, char **out)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *e = flps_malloc(3 * n + 1), *p = e;

    if (e == NULL)
        return FLPS_ENOMEM;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (isalnum(*c) || *c == '-' || *c == '.' || *c == '_' || *c == '~') {
            *p++ = (char)*c;
        } else {
            *p++ = '%';
            *p++ = hex[*c >> 4];
            *p++ = hex[*c & 15];
        }
    }
    *p = '\0';
    *out = e;
    return FLPS_OK;
}

/* The body being received. */
typedef struct recv_buf {
    flps_strbuf body;
    int too_big;
} recv_buf;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
    recv_buf *rb = arg;
    size_t n = size * nmemb;

    if (rb->body.len + n > SUBMIT_HTTP_MAX_REPLY) {
        rb->too_big = 1;
        return 0; /* makes libcurl stop with CURLE_WRITE_ERROR */
    }
    if (flps_strbuf_append(&rb->body, ptr, n) != FLPS_OK)
        return 0;
    return n;
}

/* Why a connection could not be made, in lower case: "connection
 * refused", "no route to host". */
static void connect_reason(CURL *curl, char *buf, size_t len)
{
    long os_errno = 0;

    curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
    if (os_errno != 0)
        snprintf(buf, len, "%s", strerror((int)os_errno));
    else
        snprintf(buf, len, "could not connect");
    if (buf[0] != '\0')
        buf[0] = (char)tolower((unsigned char)buf[0]);
}

/* Put a libcurl failure into words and a code. */
static flps_err describe_failure(submit_http *h, CURLcode cc,
                                 const recv_buf *rb, const char *method,
                                 const char *path)
{
    char reason[160];
    curl_off_t connect_us = 0;

    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        connect_reason(h->curl, reason, sizeof(reason));
        set_error(h, "cannot reach the scheduler at %s: %s", h->base_url,
                  reason);
        return FLPS_ECLOSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        set_error(h, "cannot reach the scheduler at %s: unknown host",
                  h->base_url);
        return FLPS_ECLOSED;
    case CURLE_OPERATION_TIMEDOUT:
        curl_easy_getinfo(h->curl, CURLINFO_CONNECT_TIME_T, &connect_us);
        if (connect_us == 0)
            set_error(h,
                      "cannot reach the scheduler at %s: no connection "
                      "within %.3g s",
                      h->base_url, (double)h->connect_timeout_ms / 1000);
        else
            set_error(h,
                      "the scheduler at %s did not answer %s %s within "
                      "%.3g s",
                      h->base_url, method, path, (double)h->timeout_ms / 1000);
        return FLPS_ETIMEDOUT;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        set_error(h,
                  "'%s' is not a scheduler URL (expected http://HOST:PORT or "
                  "https://HOST:PORT): %s",
                  h->base_url, h->curl_err[0] ? h->curl_err : "bad URL");
        return FLPS_EINVAL;
    case CURLE_PEER_FAILED_VERIFICATION:
        set_error(h,
                  "the scheduler at %s has a certificate this client cannot "
                  "verify (%s); %s",
                  h->base_url, h->curl_err[0] ? h->curl_err : "not trusted",
                  h->ca_file != NULL
                      ? "is --ca (FLPS_SCHEDULER_CA) the CA that signed "
                        "flsched's --tls-cert, and is the URL's host in that "
                        "certificate?"
                      : "set --ca FILE (or FLPS_SCHEDULER_CA) to the CA "
                        "certificate that signed flsched's --tls-cert");
        return FLPS_ECONFIG;
    case CURLE_SSL_CACERT_BADFILE:
        set_error(h,
                  "cannot use the CA file %s (--ca or FLPS_SCHEDULER_CA): %s",
                  h->ca_file ? h->ca_file : "(system default)",
                  h->curl_err[0] ? h->curl_err : "unreadable or not PEM");
        return FLPS_ECONFIG;
    case CURLE_SSL_CONNECT_ERROR:
        set_error(h,
                  "the TLS handshake with the scheduler at %s failed (%s); if "
                  "flsched serves plain HTTP (no --tls-cert), use an http:// "
                  "URL",
                  h->base_url,
                  h->curl_err[0] ? h->curl_err : curl_easy_strerror(cc));
        return FLPS_ECONFIG;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
        if (strncmp(h->base_url, "http://", 7) != 0)
            break;
        /* A TLS server drops a plain-text request without a word. So does
         * a scheduler that died mid-request, so this stays FLPS_EIO, which
         * watch retries through a restart. */
        set_error(h,
                  "the scheduler at %s closed the connection without an HTTP "
                  "answer to %s %s (%s); if flsched serves HTTPS (--tls-cert), "
                  "use an https:// URL with --ca FILE (or FLPS_SCHEDULER_CA)",
                  h->base_url, method, path,
                  h->curl_err[0] ? h->curl_err : curl_easy_strerror(cc));
        return FLPS_EIO;
    case CURLE_OUT_OF_MEMORY:
        set_error(h, "out of memory");
        return FLPS_ENOMEM;
    case CURLE_WRITE_ERROR:
        if (flps_strbuf_error(&rb->body) != FLPS_OK) {
            set_error(h, "out of memory");
            return FLPS_ENOMEM;
        }
        if (rb->too_big) {
            set_error(h, "the scheduler at %s sent more than %lu MiB for %s %s",
                      h->base_url, SUBMIT_HTTP_MAX_REPLY >> 20, method, path);
            return FLPS_EPROTO;
        }
        break;
    default:
        break;
    }
    set_error(h, "lost the connection to the scheduler at %s during %s %s: %s",
              h->base_url, method, path,
              h->curl_err[0] ? h->curl_err : curl_easy_strerror(cc));
    return FLPS_EIO;
}

flps_err submit_http_request(submit_http *h, const char *method,
                             const char *path, const void *body, size_t len,
                             submit_reply *out)
{
    /* "Expect:" turns off libcurl's 100-continue handshake, which costs a
     * round trip (or a one-second wait) on every submit. */
    const char *hdrs[] = {"Accept: application/json",
                          "Expect:", h->auth_header};
    flps_err rc = FLPS_ENOMEM;
    struct curl_slist *headers = NULL, *tmp;
    recv_buf rb = {FLPS_STRBUF_INIT, 0};
    char *url, *body_text;
    size_t n;
    CURLcode cc;
    long status = 0;

    flps_strbuf_clear(&h->last_error);
    h->curl_err[0] = '\0';
    n = strlen(h->base_url) + strlen(path) + 1;
    url = flps_malloc(n);
    if (url == NULL)
        goto fail;
    snprintf(url, n, "%s%s", h->base_url, path);
    for (size_t i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++) {
        if (hdrs[i] == NULL)
            continue;
        tmp = curl_slist_append(headers, hdrs[i]);
        if (tmp == NULL)
            goto fail_headers;
        headers = tmp;
    }
    if (body != NULL) {
        tmp = curl_slist_append(headers,
                                "Content-Type: application/octet-stream");
        if (tmp == NULL)
            goto fail_headers;
        headers = tmp;
    }

    curl_easy_reset(h->curl);
    curl_easy_setopt(h->curl, CURLOPT_URL, url);
    curl_easy_setopt(h->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT_MS, h->connect_timeout_ms);
    curl_easy_setopt(h->curl, CURLOPT_TIMEOUT_MS, h->timeout_ms);
    curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h->curl, CURLOPT_USERAGENT, "flsubmit");
    curl_easy_setopt(h->curl, CURLOPT_ERRORBUFFER, h->curl_err);
    curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &rb);
    /* libcurl verifies the peer and its host name by default; say so, so
     * no later change turns it off by accident. */
    curl_easy_setopt(h->curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h->curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (h->ca_file != NULL)
        curl_easy_setopt(h->curl, CURLOPT_CAINFO, h->ca_file);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h->curl, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h->curl, CURLOPT_POST, 1L);
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(body ? len : 0));
    } else {
        curl_easy_setopt(h->curl, CURLOPT_CUSTOMREQUEST, method);
        if (body != NULL) {
            curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE_LARGE,
                             (curl_off_t)len);
        }
    }
    cc = curl_easy_perform(h->curl);
    if (cc != CURLE_OK) {
        rc = describe_failure(h, cc, &rb, method, path);
        goto fail_body;
    }
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
    n = rb.body.len;
    body_text = flps_strbuf_take(&rb.body); /* "" for an empty body */
    if (body_text == NULL)
        goto fail_headers;
    curl_slist_free_all(headers);
    flps_free(url);
    out->status = status;
    out->body = body_text;
    out->len = n;
    return FLPS_OK;

fail_body:
    flps_strbuf_fini(&rb.body);
fail_headers:
    curl_slist_free_all(headers);
    flps_free(url);
fail:
    if (rc == FLPS_ENOMEM && h->last_error.len == 0)
        set_error(h, "out of memory");
    return rc;
}
