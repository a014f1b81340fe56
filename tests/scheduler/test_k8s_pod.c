/* Tests for scheduler/k8s_pod.c: pod objects as the API sends them, read
 * into a task's state and the job's problems in plain words. */
#include "scheduler/k8s_pod.h"

#include <criterion/criterion.h>
#include <string.h>

/* A pod of flsched's with the given status (JSON text). */
static json_t *pod(const char *status)
{
    char text[4096];
    json_t *o;

    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
             "\"flps-j3-1-worker-0-2\",\"resourceVersion\":\"77\",\"labels\":"
             "{\"flps.io/job\":\"j3\",\"flps.io/attempt\":\"1\","
             "\"flps.io/role\":\"worker\",\"flps.io/index\":\"2\"}},"
             "\"spec\":{\"nodeName\":\"node-a\",\"containers\":[{\"name\":"
             "\"worker\",\"image\":\"reg/img:1\"}]},\"status\":%s}",
             status);
    o = json_loads(text, 0, NULL);
    cr_assert_not_null(o, "%s", text);
    return o;
}

static void view(const char *status, k8s_pod_view *v)
{
    json_t *o = pod(status);

    cr_assert_eq(k8s_pod_view_of(o, v), FLPS_OK);
    json_decref(o);
}

Test(k8s_pod, reads_who_the_pod_is_from_its_labels)
{
    k8s_pod_view v;

    view("{\"phase\":\"Pending\"}", &v);
    cr_assert_str_eq(v.name, "flps-j3-1-worker-0-2");
    cr_assert_str_eq(v.job, "j3");
    cr_assert_eq(v.attempt, 1);
    cr_assert_eq(v.server, 0);
    cr_assert(v.have_index);
    cr_assert_eq(v.index, 2);
    cr_assert_str_eq(v.resource_version, "77");
    cr_assert_eq(v.state, K8S_POD_PENDING);
    cr_assert_eq(v.problem, K8S_POD_OK);
}

Test(k8s_pod, a_pod_of_someone_else_is_not_read)
{
    json_t *o = json_loads("{\"metadata\":{\"name\":\"x\"}}", 0, NULL);
    k8s_pod_view v;

    cr_assert_eq(k8s_pod_view_of(o, &v), FLPS_EINVAL);
    json_decref(o);
}

Test(k8s_pod, unschedulable_says_what_the_scheduler_said)
{
    k8s_pod_view v;

    view("{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"PodScheduled\","
         "\"status\":\"False\",\"reason\":\"Unschedulable\",\"message\":"
         "\"0/3 nodes are available: 3 Insufficient nvidia.com/gpu.\"}]}",
         &v);
    cr_assert_eq(v.state, K8S_POD_PENDING);
    cr_assert_eq(v.problem, K8S_POD_UNSCHEDULABLE);
    cr_assert_str_eq(v.why, "cannot be scheduled (Unschedulable): 0/3 nodes "
                            "are available: 3 Insufficient nvidia.com/gpu.");
}

Test(k8s_pod, an_image_that_cannot_be_pulled_is_named)
{
    k8s_pod_view v;

    view("{\"phase\":\"Pending\",\"containerStatuses\":[{\"name\":\"worker\","
         "\"state\":{\"waiting\":{\"reason\":\"ImagePullBackOff\",\"message\":"
         "\"Back-off pulling image \\\"reg/img:1\\\"\"}}}]}",
         &v);
    cr_assert_eq(v.problem, K8S_POD_IMAGE_PULL);
    cr_assert_not_null(strstr(v.why, "cannot pull its image reg/img:1 "
                                     "(ImagePullBackOff)"),
                       "%s", v.why);
    view("{\"containerStatuses\":[{\"state\":{\"waiting\":{\"reason\":"
         "\"CreateContainerConfigError\",\"message\":\"secret not found\"}}}]}",
         &v);
    cr_assert_eq(v.problem, K8S_POD_CANNOT_START);
    cr_assert_str_eq(v.why, "cannot start its container "
                            "(CreateContainerConfigError): secret not found");
}

Test(k8s_pod, running_gives_the_start_time_and_address)
{
    k8s_pod_view v;

    view(
        "{\"phase\":\"Running\",\"podIP\":\"10.1.2.3\",\"containerStatuses\":"
        "[{\"state\":{\"running\":{\"startedAt\":\"2025-01-02T03:04:05Z\"}}}]}",
        &v);
    cr_assert_eq(v.state, K8S_POD_RUNNING);
    cr_assert_str_eq(v.ip, "10.1.2.3");
    cr_assert_str_eq(v.node, "node-a");
    cr_assert_float_eq(v.started_at, 1735787045.0, 1e-6);
}

/* A pod whose container terminated with code and reason: its view. */
static void terminated(int code, const char *reason, k8s_pod_view *v)
{
    char status[512];

    snprintf(status, sizeof(status),
             "{\"phase\":\"%s\",\"containerStatuses\":[{\"state\":{"
             "\"terminated\":{\"exitCode\":%d,\"reason\":\"%s\","
             "\"finishedAt\":\"2025-01-02T03:04:06.5Z\"}}}]}",
             code == 0 ? "Succeeded" : "Failed", code, reason);
    view(status, v);
}

Test(k8s_pod, an_exit_gives_its_code_and_a_kill_its_signal)
{
    static const struct {
        int code;
        const char *reason;
        int exit_code, signal;
    } exits[] = {
        {0, "Completed", 0, 0}, {2, "Error", 2, 0}, {137, "Error", -1, 9}};

    for (size_t i = 0; i < sizeof(exits) / sizeof(exits[0]); i++) {
        k8s_pod_view v;

        terminated(exits[i].code, exits[i].reason, &v);
        cr_assert(v.state == K8S_POD_EXITED && v.problem == K8S_POD_OK);
        cr_assert(v.exit_code == exits[i].exit_code &&
                      v.signal == exits[i].signal,
                  "exit code %d: %d, signal %d", exits[i].code, v.exit_code,
                  v.signal);
        cr_assert_float_eq(v.finished_at, 1735787046.5, 1e-6);
    }
}

Test(k8s_pod, oom_killed_and_evicted_are_put_in_plain_words)
{
    k8s_pod_view v;

    terminated(137, "OOMKilled", &v);
    cr_assert_eq(v.problem, K8S_POD_OOM_KILLED);
    cr_assert_str_eq(v.why, "was killed for using more memory than its limit "
                            "(OOMKilled); give the job more memory_per_worker");
    view("{\"phase\":\"Failed\",\"reason\":\"Evicted\",\"message\":\"The node "
         "was low on resource: memory.\"}",
         &v);
    cr_assert_eq(v.state, K8S_POD_EXITED, "an evicted pod has ended");
    cr_assert_eq(v.problem, K8S_POD_EVICTED);
    cr_assert_str_eq(v.why, "was evicted from node node-a: The node was low "
                            "on resource: memory.");
}

Test(k8s_pod, a_jobset_pod_takes_its_index_from_the_completion_index)
{
    json_t *o = json_loads(
        "{\"metadata\":{\"name\":\"flps-j3-0-server-0-1-x7k\",\"labels\":{"
        "\"flps.io/job\":\"j3\",\"flps.io/attempt\":\"0\",\"flps.io/role\":"
        "\"server\"},\"annotations\":{\"batch.kubernetes.io/"
        "job-completion-index\":\"1\"}},\"status\":{}}",
        0, NULL);
    k8s_pod_view v;

    cr_assert_eq(k8s_pod_view_of(o, &v), FLPS_OK);
    cr_assert(v.server);
    cr_assert(v.have_index);
    cr_assert_eq(v.index, 1);
    json_decref(o);
}

Test(k8s_pod, times_are_rfc3339_in_utc)
{
    cr_assert_float_eq(k8s_pod_time("1970-01-01T00:00:01.25Z"), 1.25, 1e-9);
    cr_assert_eq(k8s_pod_time("2025-01-02T03:04:05+01:00"), 0);
    cr_assert_eq(k8s_pod_time("yesterday"), 0);
    cr_assert_eq(k8s_pod_time(NULL), 0);
}
