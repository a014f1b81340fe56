/* The Kubernetes API client of flsched's kubernetes launcher: REST paths,
 * the service account's token and CA, retries with backoff, watches. */
#include "scheduler/k8s_api.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/strbuf.h"

#define K8S_TIMEOUT_MS_DEFAULT 10000
#define K8S_RETRIES_DEFAULT 4
#define K8S_BACKOFF_MS_DEFAULT 200
#define K8S_BACKOFF_MS_MAX 5000
#define K8S_RETRY_AFTER_MAX_S 10
/* The longest answer read into memory (a list of a big job's pods, a log
 * since the last poll); beyond it the call fails rather than grow. */
#define K8S_BODY_MAX ((size_t)64 << 20)
/* A watch event is one line; no pod is this large. */
#define K8S_EVENT_MAX ((size_t)8 << 20)
/* A token file is re-read at most this often when its mtime is the same. */
#define K8S_TOKEN_RECHECK_S 60.0

typedef struct k8s_row {
    const char *group, *version, *name, *verbs;
} k8s_row;

static const k8s_row k8s_rows[K8S_RESOURCE_COUNT] = {
#define K8S_ROW_(e, group, version, name, verbs)                               \
    [e] = {group, version, name, verbs},
    K8S_RESOURCE_MAP(K8S_ROW_)
#undef K8S_ROW_
};

struct k8s_api {
    CURL *curl;
    char *server; /* without a trailing '/' */
    char *token_file, *ca_file;
    char ns[254];
    char *auth; /* "Authorization: Bearer TOKEN" */
    struct timespec token_mtime;
    double token_checked; /* flps_mono_s() of the last look */
    long timeout_ms, backoff_ms;
    int retries;
    const atomic_int *stop;
    char curl_err[CURL_ERROR_SIZE];
    char err[512];
};

const char *k8s_resource_name(k8s_resource r)
{
    return k8s_rows[r].name;
}

const char *k8s_resource_verbs(k8s_resource r)
{
    return k8s_rows[r].verbs;
}

const char *k8s_resource_group(k8s_resource r)
{
    return k8s_rows[r].group;
}

const char *k8s_resource_version(k8s_resource r)
{
    return k8s_rows[r].version;
}

/* Whether verb is a word of r's row. */
static int verb_allowed(k8s_resource r, const char *verb)
{
    const char *v = k8s_rows[r].verbs;
    size_t n = strlen(verb);

    while (*v != '\0') {
        size_t w = strcspn(v, " ");

        if (w == n && strncmp(v, verb, n) == 0)
            return 1;
        v += w;
        v += strspn(v, " ");
    }
    return 0;
}

static flps_err refuse_verb(k8s_api *a, k8s_resource r, const char *verb)
{
    snprintf(a->err, sizeof(a->err),
             "flsched does not %s %s: the verb is not in k8s_api.h's table "
             "(nor in the chart's Role)",
             verb, k8s_rows[r].name);
    return FLPS_EINVAL;
}

/* ---- Set-up ---- */

/* Free a string that held the token. */
static void free_wiped(char *s)
{
    if (s != NULL)
        explicit_bzero(s, strlen(s));
    flps_free(s);
}

/* The first line of a small file, without surrounding blanks. */
static flps_err read_first_line(const char *path, char *buf, size_t len,
                                char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    size_t n, s, e;

    if (f == NULL)
        return flps_errbuf_set(err, errlen, FLPS_ECONFIG, "cannot read %s: %s",
                               path, strerror(errno));
    n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    s = strspn(buf, " \t\r\n");
    e = s + strcspn(buf + s, "\r\n");
    while (e > s && (buf[e - 1] == ' ' || buf[e - 1] == '\t'))
        e--;
    memmove(buf, buf + s, e - s);
    buf[e - s] = '\0';
    if (buf[0] == '\0')
        return flps_errbuf_set(err, errlen, FLPS_ECONFIG, "%s is empty", path);
    return FLPS_OK;
}

/* Read the token again when its file changed (or once a minute): a
 * projected service-account token is rotated by the kubelet. */
static flps_err load_token(k8s_api *a, int force)
{
    char tok[4096], why[300];
    struct stat st;
    double now = flps_mono_s();
    flps_err rc;
    size_t n;
    char *h;

    if (stat(a->token_file, &st) != 0)
        return flps_errbuf_set(a->err, sizeof(a->err), FLPS_ECONFIG,
                               "cannot read the token %s: %s", a->token_file,
                               strerror(errno));
    if (!force && a->auth != NULL &&
        st.st_mtim.tv_sec == a->token_mtime.tv_sec &&
        st.st_mtim.tv_nsec == a->token_mtime.tv_nsec &&
        now - a->token_checked < K8S_TOKEN_RECHECK_S)
        return FLPS_OK;
    rc = read_first_line(a->token_file, tok, sizeof(tok), why, sizeof(why));
    if (rc != FLPS_OK)
        return flps_errbuf_set(a->err, sizeof(a->err), rc, "%s", why);
    n = strlen(tok) + sizeof("Authorization: Bearer ");
    h = flps_malloc(n);
    if (h == NULL) {
        explicit_bzero(tok, sizeof(tok));
        return FLPS_ENOMEM;
    }
    snprintf(h, n, "Authorization: Bearer %s", tok);
    explicit_bzero(tok, sizeof(tok));
    free_wiped(a->auth);
    a->auth = h;
    a->token_mtime = st.st_mtim;
    a->token_checked = now;
    return FLPS_OK;
}

/* The in-cluster address: KUBERNETES_SERVICE_HOST (IPv6 in brackets) and
 * KUBERNETES_SERVICE_PORT. */
static char *in_cluster_server(void)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    flps_strbuf b = FLPS_STRBUF_INIT;

    if (host == NULL || host[0] == '\0')
        return NULL;
    flps_strbuf_printf(&b,
                       strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s",
                       host, port && port[0] ? port : "443");
    return flps_strbuf_take(&b);
}

flps_err k8s_api_create(const k8s_api_cfg *cfg, k8s_api **out, char *err,
                        size_t errlen)
{
    k8s_api *a = cfg != NULL && out != NULL ? flps_calloc(1, sizeof(*a)) : NULL;
    flps_err rc = FLPS_ENOMEM;
    size_t n;

    if (a == NULL)
        return cfg != NULL && out != NULL ? FLPS_ENOMEM : FLPS_EINVAL;
    a->server = cfg->server ? flps_strdup(cfg->server) : in_cluster_server();
    if (a->server == NULL) {
        rc = cfg->server ? FLPS_ENOMEM
                         : flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                                           "no Kubernetes API: "
                                           "KUBERNETES_SERVICE_HOST is not "
                                           "set (not in a pod?); give "
                                           "--k8s-api URL");
        goto fail;
    }
    n = strlen(a->server);
    while (n > 0 && a->server[n - 1] == '/')
        a->server[--n] = '\0';
    a->token_file =
        flps_strdup(cfg->token_file ? cfg->token_file : K8S_SA_DIR "/token");
    a->ca_file =
        flps_strdup(cfg->ca_file ? cfg->ca_file : K8S_SA_DIR "/ca.crt");
    a->curl = curl_easy_init();
    if (a->token_file == NULL || a->ca_file == NULL || a->curl == NULL)
        goto fail;
    if (cfg->ns != NULL) {
        if (strlen(cfg->ns) >= sizeof(a->ns)) {
            rc = flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                                 "the namespace is too long");
            goto fail;
        }
        snprintf(a->ns, sizeof(a->ns), "%s", cfg->ns);
    } else {
        rc = read_first_line(K8S_SA_DIR "/namespace", a->ns, sizeof(a->ns), err,
                             errlen);
        if (rc != FLPS_OK)
            goto fail;
    }
    a->timeout_ms =
        cfg->timeout_ms > 0 ? cfg->timeout_ms : K8S_TIMEOUT_MS_DEFAULT;
    a->retries = cfg->retries > 0   ? cfg->retries
                 : cfg->retries < 0 ? 0
                                    : K8S_RETRIES_DEFAULT;
    a->backoff_ms =
        cfg->backoff_ms > 0 ? cfg->backoff_ms : K8S_BACKOFF_MS_DEFAULT;
    a->stop = cfg->stop;
    rc = load_token(a, 1);
    if (rc != FLPS_OK) {
        flps_errbuf_set(err, errlen, rc, "%s", a->err);
        goto fail;
    }
    *out = a;
    return FLPS_OK;

fail:
    k8s_api_destroy(a);
    return rc;
}

void k8s_api_destroy(k8s_api *a)
{
    if (a != NULL) {
        curl_easy_cleanup(a->curl); /* NULL is fine */
        free_wiped(a->auth);
        free_wiped(a->server);
        free_wiped(a->token_file);
        free_wiped(a->ca_file);
        flps_free(a);
    }
}

const char *k8s_api_namespace(const k8s_api *a)
{
    return a->ns;
}

const char *k8s_api_error(const k8s_api *a)
{
    return a->err;
}

void k8s_reply_fini(k8s_reply *r)
{
    if (r != NULL) {
        json_decref(r->body);
        flps_free(r->text);
        *r = (k8s_reply){0, NULL, NULL, 0};
    }
}

const char *k8s_reply_message(const k8s_reply *r)
{
    const char *m = json_string_value(json_object_get(r->body, "message"));

    if (m == NULL || m[0] == '\0')
        m = json_string_value(json_object_get(r->body, "reason"));
    return m != NULL ? m : "";
}

/* ---- Requests ---- */

/* The path of r in the namespace, with name and suffix when given. */
static flps_err resource_url(k8s_api *a, k8s_resource r, const char *name,
                             const char *query, flps_strbuf *url)
{
    const k8s_row *row = &k8s_rows[r];
    const char *slash = strchr(row->name, '/');
    size_t base = slash ? (size_t)(slash - row->name) : strlen(row->name);
    char *esc = NULL;

    flps_strbuf_printf(url, "%s", a->server);
    if (row->group[0] == '\0')
        flps_strbuf_printf(url, "/api/%s", row->version);
    else
        flps_strbuf_printf(url, "/apis/%s/%s", row->group, row->version);
    flps_strbuf_printf(url, "/namespaces/%s/%.*s", a->ns, (int)base, row->name);
    if (name != NULL) {
        esc = curl_easy_escape(a->curl, name, 0);
        if (esc == NULL)
            return FLPS_ENOMEM;
        flps_strbuf_printf(url, "/%s", esc);
        curl_free(esc);
        if (slash != NULL)
            flps_strbuf_printf(url, "%s", slash);
    }
    if (query != NULL && query[0] != '\0')
        flps_strbuf_printf(url, "?%s", query);
    return flps_strbuf_error(url);
}

/* "NAME=VALUE" appended to a query, VALUE escaped. */
static flps_err query_add(k8s_api *a, flps_strbuf *q, const char *name,
                          const char *value)
{
    char *esc = curl_easy_escape(a->curl, value, 0);

    if (esc == NULL)
        return FLPS_ENOMEM;
    flps_strbuf_printf(q, "%s%s=%s", q->len ? "&" : "", name, esc);
    curl_free(esc);
    return flps_strbuf_error(q);
}

/* What a transfer writes into: the whole body, or the lines of a watch. */
typedef struct k8s_sink {
    flps_strbuf body;
    int too_big;
    /* A watch: each complete line goes to fn. */
    k8s_watch_fn fn;
    void *arg;
    int stopped;       /* fn asked to end */
    long event_status; /* the code of an ERROR event's Status */
} k8s_sink;

/* One watch line: {"type": ..., "object": {...}}. */
static int sink_event(k8s_sink *s, const char *line, size_t n)
{
    json_t *ev = json_loadb(line, n, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *obj = json_object_get(ev, "object");
    int stop = 0;

    if (type != NULL && json_is_object(obj)) {
        if (strcmp(type, "ERROR") == 0)
            s->event_status =
                (long)json_integer_value(json_object_get(obj, "code"));
        stop = s->fn(s->arg, type, obj);
    }
    json_decref(ev);
    return stop;
}

static size_t sink_write(char *data, size_t size, size_t nmemb, void *arg)
{
    k8s_sink *s = arg;
    size_t n = size * nmemb;

    if (s->body.len + n > (s->fn ? K8S_EVENT_MAX : K8S_BODY_MAX)) {
        s->too_big = 1;
        return 0;
    }
    if (flps_strbuf_append(&s->body, data, n) != FLPS_OK)
        return 0;
    if (s->fn == NULL)
        return n;
    for (;;) {
        char *nl = memchr(s->body.data, '\n', s->body.len);
        size_t k;

        if (nl == NULL)
            break;
        k = (size_t)(nl - s->body.data);
        if (k > 0 && sink_event(s, s->body.data, k)) {
            s->stopped = 1;
            return 0;
        }
        memmove(s->body.data, nl + 1, s->body.len - k - 1);
        s->body.len -= k + 1;
        s->body.data[s->body.len] = '\0';
    }
    return n;
}

/* Retry-After in seconds (the API sends seconds), 0 when absent. */
static size_t header_seen(char *data, size_t size, size_t nmemb, void *arg)
{
    long *retry_after = arg;
    size_t n = size * nmemb;

    if (n > 12 && strncasecmp(data, "Retry-After:", 12) == 0)
        *retry_after = strtol(data + 12, NULL, 10);
    return n;
}

static int progress_stop(void *arg, curl_off_t a, curl_off_t b, curl_off_t c,
                         curl_off_t d)
{
    const atomic_int *stop = arg;

    (void)a;
    (void)b;
    (void)c;
    (void)d;
    return stop != NULL && atomic_load(stop) != 0;
}

static int stopping(const k8s_api *a)
{
    return a->stop != NULL && atomic_load(a->stop) != 0;
}

/* Sleep ms, in short steps so stop is seen. */
static void backoff_sleep(const k8s_api *a, long ms)
{
    while (ms > 0 && !stopping(a)) {
        long step = ms > 100 ? 100 : ms;
        struct timespec ts = {0, step * 1000000L};

        nanosleep(&ts, NULL);
        ms -= step;
    }
}

/* One transfer of method on url with body (may be NULL) into s; *status
 * the HTTP status, 0 when none came. timeout_s > 0: a watch's limit. */
static CURLcode transfer(k8s_api *a, const char *method, const char *url,
                         const char *body, const char *accept, k8s_sink *s,
                         long timeout_s, long *status, long *retry_after)
{
    struct curl_slist *h = NULL;
    CURLcode cc;
    CURL *c = a->curl;

    curl_easy_reset(c);
    h = curl_slist_append(h, a->auth);
    h = curl_slist_append(h, accept);
    if (body != NULL)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (h == NULL)
        return CURLE_OUT_OF_MEMORY;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body != NULL)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    else if (strcmp(method, "GET") == 0)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_seen);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, retry_after);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, a->curl_err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    if (timeout_s > 0) /* the server ends it; this is a backstop */
        curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s + 30);
    else
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, a->timeout_ms);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_stop);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)a->stop);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (strncmp(a->server, "https://", 8) == 0)
        curl_easy_setopt(c, CURLOPT_CAINFO, a->ca_file);
    a->curl_err[0] = '\0';
    *retry_after = 0;
    cc = curl_easy_perform(c);
    *status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    return cc;
}

static int status_is_retried(long status)
{
    return status == 429 || status == 500 || status == 502 || status == 503 ||
           status == 504;
}

/* method on url with the retries of the header's contract; the answer
 * into out. */
static flps_err request(k8s_api *a, const char *method, const char *url,
                        const char *body, k8s_reply *out)
{
    long wait = a->backoff_ms;
    flps_err rc;

    memset(out, 0, sizeof(*out));
    rc = load_token(a, 0);
    if (rc != FLPS_OK)
        return rc;
    for (int attempt = 0;; attempt++) {
        k8s_sink s = {FLPS_STRBUF_INIT, 0, NULL, NULL, 0, 0};
        long status = 0, retry_after = 0;
        CURLcode cc = transfer(a, method, url, body, "Accept: application/json",
                               &s, 0, &status, &retry_after);
        int retry;

        if (cc == CURLE_OK && !s.too_big) {
            out->status = status;
            out->len = s.body.len;
            out->text = flps_strbuf_take(&s.body);
            if (out->text == NULL)
                out->text = flps_strdup("");
            if (out->text == NULL)
                return FLPS_ENOMEM;
            out->body = json_loadb(out->text, out->len, 0, NULL);
            if (status >= 400)
                snprintf(a->err, sizeof(a->err), "%s %s: %ld: %s", method,
                         url + strlen(a->server), status,
                         k8s_reply_message(out));
            retry = status_is_retried(status);
        } else {
            snprintf(a->err, sizeof(a->err), "%s %s: %s", method,
                     url + strlen(a->server),
                     s.too_big        ? "the answer is too large"
                     : a->curl_err[0] ? a->curl_err
                                      : curl_easy_strerror(cc));
            retry = !s.too_big && cc != CURLE_OUT_OF_MEMORY;
        }
        flps_strbuf_fini(&s.body);
        if (!retry || attempt >= a->retries || stopping(a))
            return out->status != 0 ? FLPS_OK : FLPS_EIO;
        if (retry_after > 0)
            wait = (retry_after > K8S_RETRY_AFTER_MAX_S ? K8S_RETRY_AFTER_MAX_S
                                                        : retry_after) *
                   1000;
        k8s_reply_fini(out);
        backoff_sleep(a, wait);
        wait = wait * 2 > K8S_BACKOFF_MS_MAX ? K8S_BACKOFF_MS_MAX : wait * 2;
    }
}

/* Build the URL and run one verb on r. */
static flps_err verb_request(k8s_api *a, k8s_resource r, const char *verb,
                             const char *method, const char *name,
                             const char *query, const char *body,
                             k8s_reply *out)
{
    flps_strbuf url = FLPS_STRBUF_INIT;
    flps_err rc;

    memset(out, 0, sizeof(*out));
    if ((int)r < 0 || r >= K8S_RESOURCE_COUNT)
        return FLPS_EINVAL;
    if (!verb_allowed(r, verb))
        return refuse_verb(a, r, verb);
    rc = resource_url(a, r, name, query, &url);
    if (rc == FLPS_OK)
        rc = request(a, method, url.data, body, out);
    flps_strbuf_fini(&url);
    return rc;
}

flps_err k8s_api_create_object(k8s_api *a, k8s_resource r, const json_t *obj,
                               k8s_reply *out)
{
    char *body = json_dumps(obj, JSON_COMPACT);
    flps_err rc;

    if (body == NULL) {
        memset(out, 0, sizeof(*out));
        return FLPS_ENOMEM;
    }
    rc = verb_request(a, r, "create", "POST", NULL, NULL, body, out);
    /* The body may hold a Secret's data. */
    explicit_bzero(body, strlen(body));
    free(body);
    return rc;
}

flps_err k8s_api_get(k8s_api *a, k8s_resource r, const char *name,
                     k8s_reply *out)
{
    if (name == NULL)
        return FLPS_EINVAL;
    return verb_request(a, r, "get", "GET", name, NULL, NULL, out);
}

flps_err k8s_api_list(k8s_api *a, k8s_resource r, const char *selector,
                      k8s_reply *out)
{
    flps_strbuf q = FLPS_STRBUF_INIT;
    flps_err rc = FLPS_OK;

    if (selector != NULL)
        rc = query_add(a, &q, "labelSelector", selector);
    if (rc == FLPS_OK)
        rc = verb_request(a, r, "list", "GET", NULL, q.data, NULL, out);
    flps_strbuf_fini(&q);
    return rc;
}

flps_err k8s_api_delete(k8s_api *a, k8s_resource r, const char *name,
                        const char *propagation, k8s_reply *out)
{
    char body[160];

    if (name == NULL)
        return FLPS_EINVAL;
    if (propagation != NULL)
        snprintf(body, sizeof(body),
                 "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\","
                 "\"propagationPolicy\":\"%s\"}",
                 propagation);
    return verb_request(a, r, "delete", "DELETE", name, NULL,
                        propagation != NULL ? body : NULL, out);
}

flps_err k8s_api_pod_log(k8s_api *a, const char *pod, const char *since_time,
                         k8s_reply *out)
{
    flps_strbuf q = FLPS_STRBUF_INIT;
    flps_err rc;

    if (pod == NULL)
        return FLPS_EINVAL;
    rc = query_add(a, &q, "timestamps", "true");
    if (rc == FLPS_OK && since_time != NULL)
        rc = query_add(a, &q, "sinceTime", since_time);
    if (rc == FLPS_OK)
        rc =
            verb_request(a, K8S_PODS_LOG, "get", "GET", pod, q.data, NULL, out);
    flps_strbuf_fini(&q);
    return rc;
}

flps_err k8s_api_has_group(k8s_api *a, const char *group, const char *version,
                           int *has)
{
    flps_strbuf url = FLPS_STRBUF_INIT;
    k8s_reply r;
    flps_err rc;

    flps_strbuf_printf(&url, "%s/apis/%s/%s", a->server, group, version);
    rc = flps_strbuf_error(&url);
    if (rc == FLPS_OK)
        rc = request(a, "GET", url.data, NULL, &r);
    flps_strbuf_fini(&url);
    if (rc == FLPS_OK && r.status != 200 && r.status != 404)
        rc = FLPS_EIO; /* 403, 5xx: the answer says nothing of the CRD */
    if (rc == FLPS_OK)
        *has = r.status == 200;
    k8s_reply_fini(&r);
    return rc;
}

flps_err k8s_api_watch(k8s_api *a, k8s_resource r, const char *selector,
                       const char *resource_version, int timeout_s,
                       k8s_watch_fn fn, void *arg, long *status)
{
    flps_strbuf q = FLPS_STRBUF_INIT, url = FLPS_STRBUF_INIT;
    k8s_sink s = {FLPS_STRBUF_INIT, 0, fn, arg, 0, 0};
    char secs[24];
    long got = 0, retry_after = 0;
    CURLcode cc = CURLE_OK;
    flps_err rc;

    *status = 0;
    if ((int)r < 0 || r >= K8S_RESOURCE_COUNT || fn == NULL || timeout_s <= 0)
        return FLPS_EINVAL;
    if (!verb_allowed(r, "watch"))
        return refuse_verb(a, r, "watch");
    snprintf(secs, sizeof(secs), "%d", timeout_s);
    rc = query_add(a, &q, "watch", "true");
    if (rc == FLPS_OK)
        rc = query_add(a, &q, "allowWatchBookmarks", "true");
    if (rc == FLPS_OK)
        rc = query_add(a, &q, "timeoutSeconds", secs);
    if (rc == FLPS_OK && resource_version != NULL && resource_version[0])
        rc = query_add(a, &q, "resourceVersion", resource_version);
    if (rc == FLPS_OK && selector != NULL)
        rc = query_add(a, &q, "labelSelector", selector);
    if (rc == FLPS_OK)
        rc = resource_url(a, r, NULL, q.data, &url);
    if (rc == FLPS_OK)
        rc = load_token(a, 0);
    if (rc == FLPS_OK)
        cc = transfer(a, "GET", url.data, NULL, "Accept: application/json", &s,
                      timeout_s, &got, &retry_after);
    if (rc == FLPS_OK) {
        /* A last event without its newline, as the stream closed. */
        if (cc == CURLE_OK && s.body.len > 0 && got == 200 && !s.stopped)
            sink_event(&s, s.body.data, s.body.len);
        if (s.stopped || cc == CURLE_OK ||
            (cc == CURLE_OPERATION_TIMEDOUT && got == 200)) {
            *status = s.event_status ? s.event_status : got;
            if (got >= 400)
                snprintf(a->err, sizeof(a->err), "watch %s: %ld: %.200s",
                         k8s_rows[r].name, got, s.body.data ? s.body.data : "");
        } else {
            snprintf(a->err, sizeof(a->err), "watch %s: %s", k8s_rows[r].name,
                     a->curl_err[0] ? a->curl_err : curl_easy_strerror(cc));
            rc = FLPS_EIO;
        }
    }
    flps_strbuf_fini(&s.body);
    flps_strbuf_fini(&q);
    flps_strbuf_fini(&url);
    return rc;
}
