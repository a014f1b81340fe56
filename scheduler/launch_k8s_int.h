/* The kubernetes launcher's pod cache, shared by launch_k8s.c (the turn,
 * on the loop's thread) and launch_k8s_watch.c (the watch thread). Not
 * for other modules. */
#ifndef FLPS_SCHED_LAUNCH_K8S_INT_H
#define FLPS_SCHED_LAUNCH_K8S_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "common/err.h"
#include "scheduler/k8s_api.h"
#include "scheduler/k8s_pod.h"

/* The pods of one flsched (its instance label), as the last list and the
 * watch events since say. lock guards pods, n, cap and synced; stop and
 * api belong to the thread. */
typedef struct k8s_cache {
    pthread_mutex_t lock;
    k8s_pod_view *pods;
    size_t n, cap;
    int synced; /* a list has been read: a pod absent is gone */
    char selector[256];
    k8s_api *api; /* the watch thread's own client */
    atomic_int stop;
    pthread_t thread;
    int started;
} k8s_cache;

/* A new zeroed element at the end of the array *arr of *n elements of
 * size bytes (room for *cap), grown when full; NULL without memory (the
 * array unchanged). */
void *k8s_push(void *arr, size_t *n, size_t *cap, size_t size);

/* Make the thread's client from cfg (its stop replaced by c->stop) and
 * start watching the pods that match selector. Errors: those of
 * k8s_api_create, FLPS_ESYS. */
flps_err k8s_cache_start(k8s_cache *c, const k8s_api_cfg *cfg,
                         const char *selector, char *err, size_t errlen);

/* Stop the thread (it ends within a second) and free the cache. */
void k8s_cache_stop(k8s_cache *c);

/* A copy of the pods (caller frees with flps_free) and whether a list
 * was read. */
flps_err k8s_cache_snapshot(k8s_cache *c, k8s_pod_view **out, size_t *n,
                            int *synced);

#endif
