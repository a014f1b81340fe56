/* What flsched reads from one of its pods: the pod object of the
 * Kubernetes API reduced to the task's state, and the conditions that
 * matter to a job (Unschedulable, ImagePullBackOff, OOMKilled, Evicted,
 * ...) put in plain words. Pure: no I/O, tested on the objects the API
 * sends. */
#ifndef FLPS_SCHED_K8S_POD_H
#define FLPS_SCHED_K8S_POD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef enum {
    K8S_POD_PENDING = 0, /* not scheduled, or its container not started */
    K8S_POD_RUNNING,     /* the container runs */
    K8S_POD_EXITED,      /* the container ended, or the pod failed */
} k8s_pod_state;

/* What holds a pending pod, or what ended a pod, as the job sees it:
 * X(ENUM, "its event type"). */
#define K8S_POD_PROBLEM_MAP(X)                                                 \
    X(K8S_POD_OK, "")                                                          \
    /* PodScheduled False, reason Unschedulable */                             \
    X(K8S_POD_UNSCHEDULABLE, "unschedulable")                                  \
    /* ErrImagePull, ImagePullBackOff: may pass */                             \
    X(K8S_POD_IMAGE_PULL, "image_pull")                                        \
    /* InvalidImageName, CreateContainerConfigError, CreateContainerError,     \
     * RunContainerError: will not pass */                                     \
    X(K8S_POD_CANNOT_START, "cannot_start")                                    \
    /* terminated, reason OOMKilled */                                         \
    X(K8S_POD_OOM_KILLED, "oom_killed")                                        \
    /* status.reason Evicted (or Preempting) */                                \
    X(K8S_POD_EVICTED, "evicted")

typedef enum {
#define K8S_POD_PROBLEM_ENUM_(e, type) e,
    K8S_POD_PROBLEM_MAP(K8S_POD_PROBLEM_ENUM_)
#undef K8S_POD_PROBLEM_ENUM_
} k8s_pod_problem;

/* The job event type of a problem ("unschedulable"; "" for none): a static
 * string. */
const char *k8s_pod_problem_type(k8s_pod_problem p);

typedef struct k8s_pod_view {
    char name[128];
    char job[64]; /* its flps.io/job label */
    uint32_t attempt;
    int server;     /* flps.io/role server */
    uint32_t index; /* its rank: flps.io/index, or the completion index */
    int have_index;
    char resource_version[32];
    k8s_pod_state state;
    k8s_pod_problem problem;
    char node[128];                 /* spec.nodeName, "" until scheduled */
    char ip[64];                    /* status.podIP */
    double started_at, finished_at; /* the container's, 0 = not known */
    int exit_code; /* terminated: the container's exit code, or -1 */
    int signal;    /* terminated by a signal (exit code 128 + N), else 0 */
    char why[400]; /* the problem in plain words ("" when none) */
} k8s_pod_view;

/* Read pod (a v1 Pod object) into *out. FLPS_EINVAL when it is not a pod
 * of flsched's (no name or no flps.io/job label); *out is then partly
 * written. */
flps_err k8s_pod_view_of(const json_t *pod, k8s_pod_view *out);

/* An RFC 3339 time ("2025-01-02T03:04:05Z", "...05.123456789Z") as Unix
 * seconds; 0 when it is not one. */
double k8s_pod_time(const char *s);

#endif
