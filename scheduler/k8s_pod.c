/* One of flsched's pods as its task sees it (no I/O). */
#include "scheduler/k8s_pod.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler/k8s_manifest.h"

const char *k8s_pod_problem_type(k8s_pod_problem p)
{
    switch (p) {
#define K8S_POD_PROBLEM_CASE_(e, type)                                         \
    case e:                                                                    \
        return type;
        K8S_POD_PROBLEM_MAP(K8S_POD_PROBLEM_CASE_)
#undef K8S_POD_PROBLEM_CASE_
    }
    return "";
}

static const char *str_at(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));

    return s != NULL ? s : "";
}

double k8s_pod_time(const char *s)
{
    struct tm tm;
    const char *rest;
    double frac = 0;

    if (s == NULL || s[0] == '\0')
        return 0;
    memset(&tm, 0, sizeof(tm));
    rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (rest == NULL)
        return 0;
    if (*rest == '.') {
        double scale = 0.1;

        for (rest++; *rest >= '0' && *rest <= '9'; rest++, scale /= 10)
            frac += (*rest - '0') * scale;
    }
    if (*rest != 'Z')
        return 0; /* the API writes UTC */
    return (double)timegm(&tm) + frac;
}

/* The first container's status (flsched's pods have one). */
static const json_t *container_status(const json_t *status)
{
    return json_array_get(json_object_get(status, "containerStatuses"), 0);
}

/* PodScheduled False with reason Unschedulable: the scheduler's message
 * ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."). */
static int unschedulable(const json_t *status, k8s_pod_view *v)
{
    size_t i;
    const json_t *c;

    json_array_foreach(json_object_get(status, "conditions"), i, c)
    {
        if (strcmp(str_at(c, "type"), "PodScheduled") == 0 &&
            strcmp(str_at(c, "status"), "False") == 0 &&
            strcmp(str_at(c, "reason"), "Unschedulable") == 0) {
            snprintf(v->why, sizeof(v->why),
                     "cannot be scheduled (Unschedulable): %s",
                     str_at(c, "message")[0] ? str_at(c, "message")
                                             : "no node fits it");
            return 1;
        }
    }
    return 0;
}

/* A waiting container: what keeps it from starting. */
static void waiting(const json_t *state, const json_t *pod, k8s_pod_view *v)
{
    const json_t *w = json_object_get(state, "waiting");
    const char *r = str_at(w, "reason"), *m = str_at(w, "message");
    const json_t *c = json_array_get(
        json_object_get(json_object_get(pod, "spec"), "containers"), 0);

    if (strcmp(r, "ErrImagePull") == 0 || strcmp(r, "ImagePullBackOff") == 0) {
        v->problem = K8S_POD_IMAGE_PULL;
        snprintf(v->why, sizeof(v->why), "cannot pull its image %s (%s)%s%s",
                 str_at(c, "image"), r, m[0] ? ": " : "", m);
    } else if (strcmp(r, "InvalidImageName") == 0 ||
               strcmp(r, "CreateContainerConfigError") == 0 ||
               strcmp(r, "CreateContainerError") == 0 ||
               strcmp(r, "RunContainerError") == 0) {
        v->problem = K8S_POD_CANNOT_START;
        snprintf(v->why, sizeof(v->why), "cannot start its container (%s)%s%s",
                 r, m[0] ? ": " : "", m);
    }
}

/* A terminated container: its exit, and what it says when it was killed
 * for memory. */
static void terminated(const json_t *t, k8s_pod_view *v)
{
    json_int_t code = json_integer_value(json_object_get(t, "exitCode"));
    json_int_t sig = json_integer_value(json_object_get(t, "signal"));
    const char *r = str_at(t, "reason");

    v->state = K8S_POD_EXITED;
    v->finished_at = k8s_pod_time(str_at(t, "finishedAt"));
    v->exit_code = (int)code;
    /* The runtime reports a signal as 128 + N (a shell's convention). */
    if (sig > 0)
        v->signal = (int)sig;
    else if (code > 128 && code <= 128 + 64)
        v->signal = (int)(code - 128);
    if (v->signal != 0)
        v->exit_code = -1;
    if (strcmp(r, "OOMKilled") == 0) {
        v->problem = K8S_POD_OOM_KILLED;
        snprintf(v->why, sizeof(v->why),
                 "was killed for using more memory than its limit "
                 "(OOMKilled); give the job more memory_per_%s",
                 v->server ? "server" : "worker");
    }
}

flps_err k8s_pod_view_of(const json_t *pod, k8s_pod_view *v)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *labels = json_object_get(meta, "labels");
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *status = json_object_get(pod, "status");
    const json_t *cs = container_status(status);
    const json_t *state = json_object_get(cs, "state");
    const char *index, *phase = str_at(status, "phase");
    const char *reason = str_at(status, "reason");

    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "%s", str_at(meta, "name"));
    snprintf(v->job, sizeof(v->job), "%s", str_at(labels, K8S_LABEL_JOB));
    if (v->name[0] == '\0' || v->job[0] == '\0')
        return FLPS_EINVAL;
    v->attempt = (uint32_t)strtoul(str_at(labels, K8S_LABEL_ATTEMPT), NULL, 10);
    v->server = strcmp(str_at(labels, K8S_LABEL_ROLE), "server") == 0;
    index = str_at(labels, K8S_LABEL_INDEX);
    if (index[0] == '\0')
        index =
            str_at(json_object_get(meta, "annotations"), K8S_COMPLETION_INDEX);
    v->have_index = index[0] >= '0' && index[0] <= '9';
    v->index = (uint32_t)strtoul(index, NULL, 10);
    snprintf(v->resource_version, sizeof(v->resource_version), "%s",
             str_at(meta, "resourceVersion"));
    snprintf(v->node, sizeof(v->node), "%s", str_at(spec, "nodeName"));
    snprintf(v->ip, sizeof(v->ip), "%s", str_at(status, "podIP"));
    v->exit_code = -1;
    if (json_object_get(state, "running") != NULL) {
        v->state = K8S_POD_RUNNING;
        v->started_at = k8s_pod_time(
            str_at(json_object_get(state, "running"), "startedAt"));
    } else if (json_object_get(state, "terminated") != NULL) {
        terminated(json_object_get(state, "terminated"), v);
    } else if (json_object_get(state, "waiting") != NULL) {
        waiting(state, pod, v);
    }
    if (v->state != K8S_POD_EXITED &&
        (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
        /* Evicted (or preempted) before its container reported an end. */
        v->state = K8S_POD_EXITED;
        v->finished_at = k8s_pod_time(str_at(status, "startTime"));
    }
    if (strcmp(reason, "Evicted") == 0 || strcmp(reason, "Preempting") == 0) {
        v->problem = K8S_POD_EVICTED;
        snprintf(v->why, sizeof(v->why), "was evicted from node %s%s%s",
                 v->node[0] ? v->node : "?",
                 str_at(status, "message")[0] ? ": " : "",
                 str_at(status, "message"));
    }
    if (v->state == K8S_POD_PENDING && v->problem == K8S_POD_OK &&
        unschedulable(status, v))
        v->problem = K8S_POD_UNSCHEDULABLE;
    return FLPS_OK;
}
