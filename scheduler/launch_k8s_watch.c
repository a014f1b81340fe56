/* The kubernetes launcher's watch thread: list the pods, then watch them
 * from the list's resourceVersion with bookmarks, as an informer does;
 * list again when the API answers 410 Gone (the version is too old). */
#include "scheduler/launch_k8s_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"

/* How long one watch lasts before it is made again (the server's
 * timeoutSeconds). */
#define WATCH_TIMEOUT_S 300
/* Between failed attempts to reach the API. */
#define WATCH_RETRY_S 1

static void nap(k8s_cache *c, int seconds)
{
    for (int i = 0; i < seconds * 10 && !atomic_load(&c->stop); i++) {
        struct timespec ts = {0, 100000000L};

        nanosleep(&ts, NULL);
    }
}

void *k8s_push(void *arr, size_t *n, size_t *cap, size_t size)
{
    void **at = arr;
    char *e;

    if (*n == *cap) {
        size_t ncap = *cap ? 2 * *cap : 16;
        void *grown = flps_realloc(*at, ncap * size);

        if (grown == NULL)
            return NULL;
        *at = grown;
        *cap = ncap;
    }
    e = (char *)*at + (*n)++ * size;
    memset(e, 0, size);
    return e;
}

/* Insert or replace v (by name); the caller holds the lock. */
static void cache_put(k8s_cache *c, const k8s_pod_view *v)
{
    k8s_pod_view *slot = NULL;

    for (size_t i = 0; i < c->n && slot == NULL; i++)
        if (strcmp(c->pods[i].name, v->name) == 0)
            slot = &c->pods[i];
    if (slot == NULL)
        slot = k8s_push(&c->pods, &c->n, &c->cap, sizeof(*slot));
    if (slot == NULL)
        log_error("kubernetes: out of memory for the pod cache");
    else
        *slot = *v;
}

static void cache_drop(k8s_cache *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++) {
        if (strcmp(c->pods[i].name, name) == 0) {
            c->pods[i] = c->pods[--c->n];
            return;
        }
    }
}

/* What the watch loop keeps between events. */
typedef struct watch_state {
    k8s_cache *c;
    char rv[64];
    int gone; /* 410: list again */
} watch_state;

static void remember_version(watch_state *w, const json_t *obj)
{
    const char *rv = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));

    if (rv != NULL && rv[0] != '\0')
        snprintf(w->rv, sizeof(w->rv), "%s", rv);
}

static int on_event(void *arg, const char *type, json_t *obj)
{
    watch_state *w = arg;
    k8s_pod_view v;

    if (strcmp(type, "ERROR") == 0) {
        long code = (long)json_integer_value(json_object_get(obj, "code"));
        const char *m = json_string_value(json_object_get(obj, "message"));

        if (code == 410)
            w->gone = 1;
        else
            log_warn("kubernetes: the pod watch ended with an error: %ld %s",
                     code, m != NULL ? m : "");
        return 1;
    }
    remember_version(w, obj);
    if (strcmp(type, "BOOKMARK") == 0)
        return 0;
    if (k8s_pod_view_of(obj, &v) != FLPS_OK)
        return 0;
    pthread_mutex_lock(&w->c->lock);
    if (strcmp(type, "DELETED") == 0)
        cache_drop(w->c, v.name);
    else
        cache_put(w->c, &v);
    pthread_mutex_unlock(&w->c->lock);
    return 0;
}

/* List the pods into the cache; the list's version into w->rv. 1 on
 * success. */
static int relist(k8s_cache *c, watch_state *w)
{
    k8s_reply r;
    const json_t *item;
    size_t i;
    flps_err rc = k8s_api_list(c->api, K8S_PODS, c->selector, &r);

    if (rc != FLPS_OK || r.status != 200 || !json_is_object(r.body)) {
        log_warn("kubernetes: cannot list the pods: %s", k8s_api_error(c->api));
        k8s_reply_fini(&r);
        return 0;
    }
    pthread_mutex_lock(&c->lock);
    c->n = 0;
    json_array_foreach(json_object_get(r.body, "items"), i, item)
    {
        k8s_pod_view v;

        if (k8s_pod_view_of(item, &v) == FLPS_OK)
            cache_put(c, &v);
    }
    c->synced = 1;
    pthread_mutex_unlock(&c->lock);
    remember_version(w, r.body);
    k8s_reply_fini(&r);
    return 1;
}

static void *watch_main(void *arg)
{
    k8s_cache *c = arg;
    watch_state w;

    memset(&w, 0, sizeof(w));
    w.c = c;
    while (!atomic_load(&c->stop)) {
        long status = 0;
        flps_err rc;

        if (w.rv[0] == '\0' || w.gone) {
            w.gone = 0;
            if (!relist(c, &w)) {
                nap(c, WATCH_RETRY_S);
                continue;
            }
        }
        rc = k8s_api_watch(c->api, K8S_PODS, c->selector, w.rv, WATCH_TIMEOUT_S,
                           on_event, &w, &status);
        if (atomic_load(&c->stop))
            break;
        if (rc != FLPS_OK) {
            log_warn("kubernetes: %s; watching again", k8s_api_error(c->api));
            nap(c, WATCH_RETRY_S);
        } else if (status == 410) {
            w.gone = 1;
        } else if (status >= 400) {
            log_warn("kubernetes: %s; listing again", k8s_api_error(c->api));
            w.gone = 1;
            nap(c, WATCH_RETRY_S);
        }
    }
    return NULL;
}

flps_err k8s_cache_start(k8s_cache *c, const k8s_api_cfg *cfg,
                         const char *selector, char *err, size_t errlen)
{
    k8s_api_cfg mine = *cfg;
    flps_err rc;

    memset(c, 0, sizeof(*c));
    atomic_init(&c->stop, 0);
    snprintf(c->selector, sizeof(c->selector), "%s", selector);
    mine.stop = &c->stop;
    rc = k8s_api_create(&mine, &c->api, err, errlen);
    if (rc != FLPS_OK)
        return rc;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        k8s_api_destroy(c->api);
        return FLPS_ESYS;
    }
    if (pthread_create(&c->thread, NULL, watch_main, c) != 0) {
        pthread_mutex_destroy(&c->lock);
        k8s_api_destroy(c->api);
        return flps_errbuf_set(err, errlen, FLPS_ESYS,
                               "cannot start the pod watch thread");
    }
    c->started = 1;
    return FLPS_OK;
}

void k8s_cache_stop(k8s_cache *c)
{
    if (!c->started)
        return;
    atomic_store(&c->stop, 1);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->lock);
    k8s_api_destroy(c->api);
    flps_free(c->pods);
    c->started = 0;
}

flps_err k8s_cache_snapshot(k8s_cache *c, k8s_pod_view **out, size_t *n,
                            int *synced)
{
    k8s_pod_view *copy;

    pthread_mutex_lock(&c->lock);
    copy = flps_malloc((c->n + 1) * sizeof(*copy));
    if (copy != NULL) {
        if (c->n > 0) /* pods is NULL until the first pod */
            memcpy(copy, c->pods, c->n * sizeof(*copy));
        *n = c->n;
        *synced = c->synced;
    }
    pthread_mutex_unlock(&c->lock);
    if (copy == NULL)
        return FLPS_ENOMEM;
    *out = copy;
    return FLPS_OK;
}
