/* Tests for scheduler/k8s_api.c against a scripted stand-in of the API
 * (services/httpd): REST paths, the bearer token, retries, watch events,
 * discovery, and the verb table. */
#include "scheduler/k8s_api.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "services/httpd.h"

#define MAXREQ 16

/* What the stand-in saw and what it answers, in order. */
typedef struct fake {
    pthread_mutex_t lock;
    int nreq;
    char method[MAXREQ][8];
    char path[MAXREQ][256];
    char auth[MAXREQ][128];
    char body[MAXREQ][512];
    char query[MAXREQ][6][64]; /* selected parameters, see on_request */
    int status[MAXREQ];
    const char *answer[MAXREQ];
    int nanswer;
} fake;

static const char *const watched[] = {"labelSelector",   "watch",
                                      "resourceVersion", "allowWatchBookmarks",
                                      "sinceTime",       "timestamps"};

static void on_request(void *arg, const httpd_request *req,
                       httpd_response *resp)
{
    fake *f = arg;
    int i, status = 200;
    const char *answer = "{}";

    pthread_mutex_lock(&f->lock);
    i = f->nreq < MAXREQ ? f->nreq++ : MAXREQ - 1;
    snprintf(f->method[i], sizeof(f->method[i]), "%s", req->method);
    snprintf(f->path[i], sizeof(f->path[i]), "%s", req->path);
    snprintf(f->auth[i], sizeof(f->auth[i]), "%s",
             httpd_header(req, "Authorization")
                 ? httpd_header(req, "Authorization")
                 : "");
    snprintf(f->body[i], sizeof(f->body[i]), "%s", req->body);
    for (size_t q = 0; q < 6; q++) {
        const char *v = httpd_query(req, watched[q]);

        snprintf(f->query[i][q], sizeof(f->query[i][q]), "%s", v ? v : "-");
    }
    if (i < f->nanswer) {
        status = f->status[i];
        answer = f->answer[i];
    }
    pthread_mutex_unlock(&f->lock);
    httpd_respond(resp, status, "application/json", answer, strlen(answer));
}

static fake F;
static httpd *H;
static char url[128], token_path[256], dir[128];
static k8s_api *A;

static void script(int status, const char *answer)
{
    F.status[F.nanswer] = status;
    F.answer[F.nanswer++] = answer;
}

static void write_token(const char *t)
{
    FILE *f = fopen(token_path, "w");

    cr_assert_not_null(f);
    fputs(t, f);
    fclose(f);
}

static void setup(void)
{
    char bound[64];
    k8s_api_cfg cfg;
    char err[256];

    curl_global_init(CURL_GLOBAL_DEFAULT);
    memset(&F, 0, sizeof(F));
    pthread_mutex_init(&F.lock, NULL);
    cr_assert_eq(httpd_start("127.0.0.1:0", 1 << 20, on_request, &F, &H, bound,
                             sizeof(bound)),
                 FLPS_OK);
    snprintf(url, sizeof(url), "http://%s", bound);
    snprintf(dir, sizeof(dir), "/tmp/flps-k8s-api-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(token_path, sizeof(token_path), "%s/token", dir);
    write_token("tok-1\n");
    memset(&cfg, 0, sizeof(cfg));
    cfg.server = url;
    cfg.token_file = token_path;
    cfg.ns = "ns1";
    cfg.retries = 2;
    cfg.backoff_ms = 10;
    cr_assert_eq(k8s_api_create(&cfg, &A, err, sizeof(err)), FLPS_OK, "%s",
                 err);
}

static void teardown(void)
{
    k8s_api_destroy(A);
    if (H != NULL)
        httpd_stop(H);
    unlink(token_path);
    rmdir(dir);
    pthread_mutex_destroy(&F.lock);
}

TestSuite(k8s_api, .init = setup, .fini = teardown);

Test(k8s_api, creates_a_pod_with_the_bearer_token_in_its_namespace)
{
    json_t *pod = json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "v1", "kind",
                            "Pod", "metadata", "name", "p1");
    k8s_reply r;

    script(201, "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\"}}");
    cr_assert_eq(k8s_api_create_object(A, K8S_PODS, pod, &r), FLPS_OK);
    cr_assert_eq(r.status, 201);
    cr_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(r.body, "metadata"), "name")),
                     "p1");
    cr_assert_str_eq(F.method[0], "POST");
    cr_assert_str_eq(F.path[0], "/api/v1/namespaces/ns1/pods");
    cr_assert_str_eq(F.auth[0], "Bearer tok-1");
    cr_assert_not_null(strstr(F.body[0], "\"name\":\"p1\""));
    k8s_reply_fini(&r);
    json_decref(pod);
}

Test(k8s_api, a_group_resource_lives_under_apis)
{
    json_t *js = json_pack("{s:s}", "kind", "JobSet");
    k8s_reply r;

    script(201, "{}");
    cr_assert_eq(k8s_api_create_object(A, K8S_JOBSETS, js, &r), FLPS_OK);
    cr_assert_str_eq(F.path[0],
                     "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns1/jobsets");
    k8s_reply_fini(&r);
    json_decref(js);
}

Test(k8s_api, retries_an_unavailable_api_and_gives_the_last_answer)
{
    json_t *s = json_pack("{s:s}", "kind", "Secret");
    k8s_reply r;

    script(503, "{\"kind\":\"Status\",\"message\":\"etcd is busy\"}");
    script(201, "{}");
    cr_assert_eq(k8s_api_create_object(A, K8S_SECRETS, s, &r), FLPS_OK);
    cr_assert_eq(r.status, 201);
    cr_assert_eq(F.nreq, 2);
    k8s_reply_fini(&r);
    script(503, "{}");
    script(503, "{}");
    script(503, "{\"kind\":\"Status\",\"message\":\"still busy\"}");
    cr_assert_eq(k8s_api_create_object(A, K8S_SECRETS, s, &r), FLPS_OK);
    cr_assert_eq(r.status, 503, "after 1 + 2 retries the last answer");
    cr_assert_eq(F.nreq, 5);
    cr_assert_str_eq(k8s_reply_message(&r), "still busy");
    cr_assert_not_null(strstr(k8s_api_error(A), "still busy"));
    k8s_reply_fini(&r);
    json_decref(s);
}

Test(k8s_api, a_refusal_is_not_retried_and_its_status_message_is_kept)
{
    json_t *p = json_pack("{s:s}", "kind", "Pod");
    k8s_reply r;

    script(409, "{\"kind\":\"Status\",\"reason\":\"AlreadyExists\","
                "\"message\":\"pods \\\"p1\\\" already exists\"}");
    cr_assert_eq(k8s_api_create_object(A, K8S_PODS, p, &r), FLPS_OK);
    cr_assert_eq(r.status, 409);
    cr_assert_eq(F.nreq, 1);
    cr_assert_str_eq(k8s_reply_message(&r), "pods \"p1\" already exists");
    k8s_reply_fini(&r);
    json_decref(p);
}

Test(k8s_api, lists_with_a_label_selector_and_deletes_with_propagation)
{
    k8s_reply r;

    script(200, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":"
                "\"42\"},\"items\":[]}");
    cr_assert_eq(k8s_api_list(A, K8S_PODS, "flps.io/job=j1,a=b", &r), FLPS_OK);
    cr_assert_str_eq(F.method[0], "GET");
    cr_assert_str_eq(F.query[0][0], "flps.io/job=j1,a=b");
    cr_assert_str_eq(
        json_string_value(json_object_get(json_object_get(r.body, "metadata"),
                                          "resourceVersion")),
        "42");
    k8s_reply_fini(&r);
    script(200, "{}");
    cr_assert_eq(k8s_api_delete(A, K8S_SERVICES, "flps-j1-0", "Background", &r),
                 FLPS_OK);
    cr_assert_str_eq(F.method[1], "DELETE");
    cr_assert_str_eq(F.path[1], "/api/v1/namespaces/ns1/services/flps-j1-0");
    cr_assert_not_null(
        strstr(F.body[1], "\"propagationPolicy\":\"Background\""), "%s",
        F.body[1]);
    k8s_reply_fini(&r);
}

Test(k8s_api, reads_a_pods_log_with_timestamps_since_a_time)
{
    k8s_reply r;

    script(200, "2025-01-02T03:04:05.1Z hello\n");
    cr_assert_eq(k8s_api_pod_log(A, "p1", "2025-01-02T03:04:05Z", &r), FLPS_OK);
    cr_assert_str_eq(F.path[0], "/api/v1/namespaces/ns1/pods/p1/log");
    cr_assert_str_eq(F.query[0][5], "true");
    cr_assert_str_eq(F.query[0][4], "2025-01-02T03:04:05Z");
    cr_assert_str_eq(r.text, "2025-01-02T03:04:05.1Z hello\n");
    k8s_reply_fini(&r);
}

Test(k8s_api, refuses_a_verb_that_is_not_in_the_table_without_asking)
{
    k8s_reply r;
    long status = 0;

    cr_assert_eq(k8s_api_get(A, K8S_SECRETS, "s", &r), FLPS_EINVAL);
    cr_assert_eq(k8s_api_list(A, K8S_SERVICES, NULL, &r), FLPS_EINVAL);
    cr_assert_eq(
        k8s_api_watch(A, K8S_JOBSETS, NULL, NULL, 5, NULL, NULL, &status),
        FLPS_EINVAL);
    cr_assert_eq(F.nreq, 0);
    cr_assert_not_null(strstr(k8s_api_error(A), "not in k8s_api.h's table"));
}

typedef struct seen {
    char types[8][16];
    char names[8][32];
    int n;
} seen;

static int on_event(void *arg, const char *type, json_t *obj)
{
    seen *s = arg;
    const char *name = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "name"));

    if (s->n < 8) {
        snprintf(s->types[s->n], sizeof(s->types[0]), "%s", type);
        snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name ? name : "");
        s->n++;
    }
    return 0;
}

Test(k8s_api, a_watch_hands_over_each_event_line_with_bookmarks)
{
    seen s = {.n = 0};
    long status = 0;

    script(200, "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\","
                "\"resourceVersion\":\"6\"}}}\n"
                "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{"
                "\"resourceVersion\":\"9\"}}}\n"
                "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":"
                "\"a\",\"resourceVersion\":\"10\"}}}");
    cr_assert_eq(
        k8s_api_watch(A, K8S_PODS, "x=y", "5", 30, on_event, &s, &status),
        FLPS_OK);
    cr_assert_eq(status, 200);
    cr_assert_eq(s.n, 3);
    cr_assert_str_eq(s.types[0], "ADDED");
    cr_assert_str_eq(s.types[1], "BOOKMARK");
    cr_assert_str_eq(s.types[2], "DELETED", "the last line needs no newline");
    cr_assert_str_eq(F.query[0][1], "true");
    cr_assert_str_eq(F.query[0][2], "5");
    cr_assert_str_eq(F.query[0][3], "true");
    cr_assert_str_eq(F.query[0][0], "x=y");
}

Test(k8s_api, a_watch_from_a_version_too_old_says_410)
{
    seen s = {.n = 0};
    long status = 0;

    script(200, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                "\"code\":410,\"reason\":\"Expired\"}}\n");
    cr_assert_eq(
        k8s_api_watch(A, K8S_PODS, NULL, "1", 30, on_event, &s, &status),
        FLPS_OK);
    cr_assert_eq(status, 410);
    cr_assert_str_eq(s.types[0], "ERROR");
}

Test(k8s_api, discovery_says_whether_jobset_is_installed)
{
    int has = -1;

    script(200, "{\"kind\":\"APIResourceList\"}");
    script(404, "{\"kind\":\"Status\",\"code\":404}");
    cr_assert_eq(k8s_api_has_group(A, "jobset.x-k8s.io", "v1alpha2", &has),
                 FLPS_OK);
    cr_assert_eq(has, 1);
    cr_assert_str_eq(F.path[0], "/apis/jobset.x-k8s.io/v1alpha2");
    cr_assert_eq(k8s_api_has_group(A, "jobset.x-k8s.io", "v1alpha2", &has),
                 FLPS_OK);
    cr_assert_eq(has, 0);
}

Test(k8s_api, reads_a_rotated_token_again)
{
    k8s_reply r;

    script(200, "{}");
    script(200, "{}");
    cr_assert_eq(k8s_api_list(A, K8S_PODS, NULL, &r), FLPS_OK);
    k8s_reply_fini(&r);
    sleep(1); /* a new mtime */
    write_token("tok-2\n");
    cr_assert_eq(k8s_api_list(A, K8S_PODS, NULL, &r), FLPS_OK);
    k8s_reply_fini(&r);
    cr_assert_str_eq(F.auth[0], "Bearer tok-1");
    cr_assert_str_eq(F.auth[1], "Bearer tok-2");
}

Test(k8s_api, an_api_that_does_not_answer_is_an_io_error)
{
    k8s_reply r;

    httpd_stop(H);
    H = NULL;
    cr_assert_eq(k8s_api_list(A, K8S_PODS, NULL, &r), FLPS_EIO);
    cr_assert_eq(r.status, 0);
    cr_assert_neq(k8s_api_error(A)[0], '\0');
    k8s_reply_fini(&r);
}

Test(k8s_api, the_table_names_every_resource_with_its_verbs)
{
    cr_assert_str_eq(k8s_resource_name(K8S_PODS_LOG), "pods/log");
    cr_assert_str_eq(k8s_resource_verbs(K8S_PODS_LOG), "get");
    cr_assert_str_eq(k8s_resource_group(K8S_PODGROUPS),
                     "scheduling.volcano.sh");
    cr_assert_str_eq(k8s_resource_version(K8S_JOBSETS), "v1alpha2");
}
