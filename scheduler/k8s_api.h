/* A client of the Kubernetes API for flsched's kubernetes launcher:
 * create, get, list, watch and delete of the few namespaced resources
 * flsched uses, over libcurl with JSON through jansson, with the pod's
 * service account (token and CA under
 * /var/run/secrets/kubernetes.io/serviceaccount) and retries with backoff.
 *
 * One client is one connection: not thread-safe; give each thread its
 * own. Every call blocks until the API answers or the retries are spent. */
#ifndef FLPS_SCHED_K8S_API_H
#define FLPS_SCHED_K8S_API_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>

#include "common/err.h"

/* The one table of what flsched asks of the Kubernetes API:
 * X(ENUM, "API group", "version", "resource", "verbs"). The chart's Role
 * grants exactly these verbs on exactly these resources
 * (tests/deploy/test_chart.sh reads this table), and every call below
 * checks that its verb is in its row, so code cannot use what the Role
 * does not grant. Discovery (GET /apis/GROUP/VERSION) needs no rule: every
 * authenticated account may read it. */
#define K8S_RESOURCE_MAP(X)                                                    \
    X(K8S_PODS, "", "v1", "pods", "create delete get list watch")              \
    X(K8S_PODS_LOG, "", "v1", "pods/log", "get")                               \
    X(K8S_SERVICES, "", "v1", "services", "create delete")                     \
    X(K8S_SECRETS, "", "v1", "secrets", "create delete")                       \
    X(K8S_JOBSETS, "jobset.x-k8s.io", "v1alpha2", "jobsets", "create delete")  \
    X(K8S_PODGROUPS, "scheduling.volcano.sh", "v1beta1", "podgroups",          \
      "create delete")

typedef enum {
#define K8S_RESOURCE_ENUM_(e, group, version, name, verbs) e,
    K8S_RESOURCE_MAP(K8S_RESOURCE_ENUM_)
#undef K8S_RESOURCE_ENUM_
        K8S_RESOURCE_COUNT
} k8s_resource;

/* Where the service account's files are in a pod. */
#define K8S_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct k8s_api_cfg {
    /* "https://HOST:PORT" (or http:// for a test's stand-in); NULL: the
     * in-cluster address from KUBERNETES_SERVICE_HOST and _PORT. */
    const char *server;
    const char *token_file; /* NULL: K8S_SA_DIR/token; re-read when it
                               changes (projected tokens rotate) */
    const char *ca_file;    /* NULL: K8S_SA_DIR/ca.crt (https only) */
    const char *ns;         /* NULL: K8S_SA_DIR/namespace */
    long timeout_ms;        /* one request, not a watch; 0: 10000 */
    int retries;            /* tries after the first; 0: 4, < 0: none */
    long backoff_ms;        /* first wait between tries, doubled each
                               time up to 5 s; 0: 200 */
    /* Non-zero makes a running call (a watch, a backoff) return soon with
     * FLPS_EIO; borrowed until destroy; NULL: none. */
    const atomic_int *stop;
} k8s_api_cfg;

typedef struct k8s_api k8s_api;

/* Read the token, the namespace and the address. Errors: FLPS_ECONFIG
 * with the reason in err (no in-cluster address and no server given, an
 * unreadable token or namespace file), FLPS_ENOMEM. Caller owns *out. */
flps_err k8s_api_create(const k8s_api_cfg *cfg, k8s_api **out, char *err,
                        size_t errlen);
void k8s_api_destroy(k8s_api *a);

/* The namespace every call works in (borrowed until destroy). */
const char *k8s_api_namespace(const k8s_api *a);

/* The last call's failure in words: "POST .../pods: 403 Forbidden:
 * pods is forbidden: ..." or the transport's error. */
const char *k8s_api_error(const k8s_api *a);

/* One answer of the API. */
typedef struct k8s_reply {
    long status;  /* HTTP status; 0 when no answer came */
    json_t *body; /* the JSON body (an object, a Status on errors), or
                     NULL; owned */
    char *text;   /* the raw body, NUL-terminated; owned */
    size_t len;
} k8s_reply;

void k8s_reply_fini(k8s_reply *r);

/* The Status message of an error answer ("pods \"x\" already exists"), or
 * its reason, or "" (borrowed from r). */
const char *k8s_reply_message(const k8s_reply *r);

/* Each call: FLPS_OK once the API answered (any status: the caller looks
 * at out->status), FLPS_EIO when it did not after the retries (or stop
 * was set), FLPS_EINVAL for a verb not in the resource's row or bad
 * arguments, FLPS_ENOMEM. Answers 429 and 5xx and transport failures are
 * retried with backoff (Retry-After honoured, at most 10 s), a create too:
 * its retry then answers 409 when the first one got through. *out is the
 * caller's to fini, also on errors. */

/* POST the object (its kind matching r). */
flps_err k8s_api_create_object(k8s_api *a, k8s_resource r, const json_t *obj,
                               k8s_reply *out);
flps_err k8s_api_get(k8s_api *a, k8s_resource r, const char *name,
                     k8s_reply *out);
/* selector: a label selector ("a=b,c") or NULL for all. The list's
 * metadata.resourceVersion is where a watch of the same takes over. */
flps_err k8s_api_list(k8s_api *a, k8s_resource r, const char *selector,
                      k8s_reply *out);
/* propagation: "Background", "Foreground", "Orphan", or NULL for the
 * resource's default. */
flps_err k8s_api_delete(k8s_api *a, k8s_resource r, const char *name,
                        const char *propagation, k8s_reply *out);
/* GET pods/NAME/log with timestamps=true (each line starts with its
 * RFC 3339 time and a blank), from since_time (RFC 3339, whole seconds)
 * when not NULL; the lines are in out->text. */
flps_err k8s_api_pod_log(k8s_api *a, const char *pod, const char *since_time,
                         k8s_reply *out);

/* Whether the API serves group/version (discovery: GET
 * /apis/GROUP/VERSION answers 200, 404 when the CRD is not installed).
 * *has written on FLPS_OK; FLPS_EIO when the API did not answer and the
 * caller cannot tell. */
flps_err k8s_api_has_group(k8s_api *a, const char *group, const char *version,
                           int *has);

/* One watch event: type "ADDED", "MODIFIED", "DELETED", "BOOKMARK" or
 * "ERROR" (object then a Status; 410 Gone: the resourceVersion is too
 * old, list again). object is borrowed for the call. Return non-zero to
 * end the watch. */
typedef int (*k8s_watch_fn)(void *arg, const char *type, json_t *object);

/* Watch r (selector as for list) from resource_version (a list's; NULL
 * or "" from now), with bookmarks, for at most timeout_s seconds (the
 * server's timeoutSeconds), calling fn for every event as it arrives. Ends
 * FLPS_OK when the server closes the stream, the time is up or fn asks to
 * stop (*status the HTTP status, 200, or the error's, e.g. 410), FLPS_EIO
 * when no answer came or stop was set. A watch is not retried: the caller
 * lists or watches again from the last resourceVersion it saw. */
flps_err k8s_api_watch(k8s_api *a, k8s_resource r, const char *selector,
                       const char *resource_version, int timeout_s,
                       k8s_watch_fn fn, void *arg, long *status);

/* The table's row of r: its resource name ("pods/log") and verbs, static
 * strings. */
const char *k8s_resource_name(k8s_resource r);
const char *k8s_resource_verbs(k8s_resource r);
const char *k8s_resource_group(k8s_resource r);
const char *k8s_resource_version(k8s_resource r);

#endif
