/* scheduler/sched_metrics: the http_sd target list from jobs and nodes,
 * and the per-job series, without Redis. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "scheduler/sched_metrics.h"

static void task(sched_task *t, const char *job, uint32_t attempt,
                 const char *role, uint32_t index, const char *state,
                 const char *addr)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->job, sizeof(t->job), "%s", job);
    t->attempt = attempt;
    snprintf(t->role, sizeof(t->role), "%s", role);
    t->index = index;
    snprintf(t->node, sizeof(t->node), "n1");
    snprintf(t->state, sizeof(t->state), "%s", state);
    snprintf(t->metrics, sizeof(t->metrics), "%s", addr);
}

static json_t *targets(const sched_job *jobs, size_t nj,
                       const sched_node *nodes, size_t nn)
{
    char *text = NULL;
    json_t *o;

    cr_assert_eq(sched_metrics_targets_json(jobs, nj, nodes, nn, &text),
                 FLPS_OK);
    o = json_loads(text, 0, NULL);
    cr_assert(json_is_array(o), "not an array: %s", text);
    free(text);
    return o;
}

Test(sched_metrics, lists_running_tasks_of_the_current_attempt_and_ready_agents)
{
    sched_task t[5];
    sched_job jobs[2];
    sched_node nodes[2];
    json_t *arr, *g, *l;

    memset(jobs, 0, sizeof(jobs));
    memset(nodes, 0, sizeof(nodes));
    task(&t[0], "j1", 1, "server", 0, "RUNNING", "10.0.0.1:9100");
    task(&t[1], "j1", 1, "worker", 3, "RUNNING", "10.0.0.1:9101");
    task(&t[2], "j1", 1, "worker", 4, "RUNNING", ""); /* not told yet */
    task(&t[3], "j1", 0, "worker", 0, "RUNNING", "10.0.0.1:9000"); /* old */
    task(&t[4], "j1", 1, "worker", 5, "EXITED", "10.0.0.1:9102");
    snprintf(jobs[0].id, sizeof(jobs[0].id), "j1");
    snprintf(jobs[0].name, sizeof(jobs[0].name), "mnist");
    jobs[0].state = SCHED_RUNNING;
    jobs[0].attempt = 1;
    jobs[0].tasks = t;
    jobs[0].ntasks = 5;
    /* A finished job's tasks are never listed, whatever they say. */
    snprintf(jobs[1].id, sizeof(jobs[1].id), "j2");
    jobs[1].state = SCHED_SUCCEEDED;
    jobs[1].tasks = t;
    jobs[1].ntasks = 2;
    snprintf(nodes[0].name, sizeof(nodes[0].name), "n1");
    snprintf(nodes[0].state, sizeof(nodes[0].state), "READY");
    snprintf(nodes[0].metrics, sizeof(nodes[0].metrics), "10.0.0.1:9200");
    snprintf(nodes[1].name, sizeof(nodes[1].name), "n2");
    snprintf(nodes[1].state, sizeof(nodes[1].state), "LOST");
    snprintf(nodes[1].metrics, sizeof(nodes[1].metrics), "10.0.0.2:9200");

    arr = targets(jobs, 2, nodes, 2);
    cr_assert_eq(json_array_size(arr), 3, "%s", json_dumps(arr, JSON_COMPACT));
    g = json_array_get(arr, 1);
    cr_assert_str_eq(
        json_string_value(json_array_get(json_object_get(g, "targets"), 0)),
        "10.0.0.1:9101");
    l = json_object_get(g, "labels");
    cr_assert_str_eq(json_string_value(json_object_get(l, "job_id")), "j1");
    cr_assert_str_eq(json_string_value(json_object_get(l, "job_name")),
                     "mnist");
    cr_assert_str_eq(json_string_value(json_object_get(l, "role")), "worker");
    cr_assert_str_eq(json_string_value(json_object_get(l, "rank")), "3",
                     "labels are strings, as http_sd requires");
    cr_assert_str_eq(json_string_value(json_object_get(l, "node")), "n1");
    g = json_array_get(arr, 2);
    l = json_object_get(g, "labels");
    cr_assert_str_eq(json_string_value(json_object_get(l, "role")), "agent");
    cr_assert_str_eq(json_string_value(json_object_get(l, "node")), "n1");
    json_decref(arr);
}

Test(sched_metrics, an_empty_cluster_is_an_empty_list)
{
    json_t *arr = targets(NULL, 0, NULL, 0);

    cr_assert_eq(json_array_size(arr), 0);
    json_decref(arr);
}

/* The value of the sample line "series value", or -1. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

static void placed(void (*fn)(void *, double), void *arg, double s)
{
    fn(arg, s);
}

Test(sched_metrics, per_job_series_follow_the_job_hash_and_placements_count)
{
    metrics *reg = NULL;
    sched_metrics *m = NULL;
    sched_loop_stats stats;
    sched_job j;
    sched_node n;
    char *text = NULL;
    size_t len;

    memset(&stats, 0, sizeof(stats));
    memset(&j, 0, sizeof(j));
    memset(&n, 0, sizeof(n));
    cr_assert_eq(metrics_create(&reg), FLPS_OK);
    cr_assert_eq(sched_metrics_create(reg, &stats, &m), FLPS_OK);
    cr_assert_not_null(stats.on_place, "placements must reach the histogram");
    placed(stats.on_place, stats.on_place_arg, 0.3);
    snprintf(j.id, sizeof(j.id), "j7");
    snprintf(j.name, sizeof(j.name), "cifar");
    j.state = SCHED_RUNNING;
    j.p_iteration = 400;
    j.p_test_accuracy = 0.8125;
    j.p_bytes_sent = 123456;
    j.p_mask = 1u << 0 | 1u << 2 | 1u << 3; /* no loss reported yet */
    n.alive = 1;
    sched_metrics_refresh(m, &j, 1, &n, 1);
    cr_assert_eq(metrics_render(reg, &text, &len), FLPS_OK);
    cr_assert_eq(sample(text, "flsched_job_iteration{job_id=\"j7\",job_name="
                              "\"cifar\"}"),
                 400);
    cr_assert_eq(sample(text, "flsched_job_test_accuracy{job_id=\"j7\","
                              "job_name=\"cifar\"}"),
                 0.8125);
    cr_assert_eq(sample(text, "flsched_job_sent_bytes{job_id=\"j7\",job_name="
                              "\"cifar\"}"),
                 123456);
    cr_assert_null(strstr(text, "flsched_job_loss{"),
                   "a value never reported has no series");
    cr_assert_eq(sample(text, "flsched_job_state{job_id=\"j7\",job_name="
                              "\"cifar\",state=\"RUNNING\"}"),
                 1);
    cr_assert_eq(sample(text, "flsched_job_state{job_id=\"j7\",job_name="
                              "\"cifar\",state=\"QUEUED\"}"),
                 0);
    cr_assert_eq(sample(text, "flsched_placement_wait_seconds_count"), 1);
    cr_assert_eq(
        sample(text, "flsched_placement_wait_seconds_bucket{le=\"0.25\"}"), 0);
    cr_assert_eq(
        sample(text, "flsched_placement_wait_seconds_bucket{le=\"0.5\"}"), 1);
    cr_assert_eq(sample(text, "flsched_nodes_alive"), 1);
    flps_free(text);
    sched_metrics_destroy(m);
    metrics_destroy(reg);
}
