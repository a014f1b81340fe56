/* flsched's per-job series, placement latency and the target list. */
#include "scheduler/sched_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/metrics_proc.h"

/* Handles are written by create and then only read; values are guarded by
 * the registry's lock. */
struct sched_metrics {
    metrics_family *iter, *loss, *acc, *bytes, *dense, *state, *place, *alive;
};

/* p_mask bits, in the order of sched_job's p_* list. */
enum {
    P_ITERATION = 1u << 0,
    P_LOSS = 1u << 1,
    P_ACCURACY = 1u << 2,
    P_BYTES = 1u << 3,
    P_DENSE = 1u << 4,
};

static void on_place(void *arg, double seconds)
{
    sched_metrics *m = arg;

    metrics_histogram_observe(m->place, NULL, seconds < 0 ? 0 : seconds);
}

static const char *const job_labels[] = {"job_id", "job_name"};
static const char *const job_state_labels[] = {"job_id", "job_name", "state"};
static const double wait_bounds[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                     5,    10,   30,  60,   300, 900, 3600};

/* Every family, in the order /metrics shows them. */
static const metrics_def sched_metric_defs[] = {
    {METRICS_GAUGE, "flsched_job_iteration", METRICS_AT(sched_metrics, iter),
     "Iterations rank 0 of the job reported done.", METRICS_LABELS(job_labels)},
    {METRICS_GAUGE, "flsched_job_loss", METRICS_AT(sched_metrics, loss),
     "Training loss rank 0 last reported (mean since its previous report).",
     METRICS_LABELS(job_labels)},
    {METRICS_GAUGE, "flsched_job_test_accuracy", METRICS_AT(sched_metrics, acc),
     "Test accuracy (0..1) at rank 0's last evaluation.",
     METRICS_LABELS(job_labels)},
    {METRICS_GAUGE, "flsched_job_sent_bytes", METRICS_AT(sched_metrics, bytes),
     "Bytes rank 0 sent in the job's current attempt, as last reported.",
     METRICS_LABELS(job_labels)},
    {METRICS_GAUGE, "flsched_job_dense_bytes", METRICS_AT(sched_metrics, dense),
     "What flsched_job_sent_bytes would be with dense pushes.",
     METRICS_LABELS(job_labels)},
    {METRICS_GAUGE, "flsched_job_state", METRICS_AT(sched_metrics, state),
     "1 for the job's current state, 0 for the others.",
     METRICS_LABELS(job_state_labels)},
    {METRICS_HISTOGRAM, "flsched_placement_wait_seconds",
     METRICS_AT(sched_metrics, place),
     "Time from a job's submission to each of its placements (a restart's "
     "includes the earlier attempts).",
     METRICS_BOUNDS(wait_bounds)},
    {METRICS_GAUGE, "flsched_nodes_alive", METRICS_AT(sched_metrics, alive),
     "Registered nodes whose alive key exists."},
};

flps_err sched_metrics_create(metrics *reg, sched_loop_stats *stats,
                              sched_metrics **out)
{
    sched_metrics *m = flps_calloc(1, sizeof(*m));
    flps_err rc;

    if (m == NULL)
        return FLPS_ENOMEM;
    rc = metrics_proc_register_daemon(reg, "flsched", sched_metric_defs,
                                      METRICS_NDEFS(sched_metric_defs), m);
    if (rc != FLPS_OK) {
        flps_free(m);
        return rc;
    }
    stats->on_place_arg = m;
    stats->on_place = on_place;
    *out = m;
    return FLPS_OK;
}

void sched_metrics_destroy(sched_metrics *m)
{
    flps_free(m);
}

void sched_metrics_refresh(sched_metrics *m, const sched_job *jobs, size_t nj,
                           const sched_node *nodes, size_t nn)
{
    double alive = 0;

    for (size_t i = 0; i < nj; i++) {
        const sched_job *j = &jobs[i];
        const char *v[] = {j->id, j->name, NULL};

        if (j->p_mask & P_ITERATION)
            metrics_gauge_set(m->iter, v, j->p_iteration);
        if (j->p_mask & P_LOSS)
            metrics_gauge_set(m->loss, v, j->p_loss);
        if (j->p_mask & P_ACCURACY)
            metrics_gauge_set(m->acc, v, j->p_test_accuracy);
        if (j->p_mask & P_BYTES)
            metrics_gauge_set(m->bytes, v, j->p_bytes_sent);
        if (j->p_mask & P_DENSE)
            metrics_gauge_set(m->dense, v, j->p_dense_bytes);
        for (int s = SCHED_QUEUED; s <= SCHED_CANCELLED; s++) {
            v[2] = sched_state_name((sched_state)s);
            metrics_gauge_set(m->state, v, j->state == (sched_state)s);
        }
    }
    for (size_t i = 0; i < nn; i++)
        alive += nodes[i].alive != 0;
    metrics_gauge_set(m->alive, NULL, alive);
}

/* Append {"targets":[addr],"labels":labels} (labels consumed). */
static int add_group(json_t *arr, const char *addr, json_t *labels)
{
    json_t *g;

    if (labels == NULL)
        return 0;
    g = json_pack("{s:[s],s:o}", "targets", addr, "labels", labels);
    return g != NULL && json_array_append_new(arr, g) == 0;
}

flps_err sched_metrics_targets_json(const sched_job *jobs, size_t nj,
                                    const sched_node *nodes, size_t nn,
                                    char **out)
{
    json_t *arr = json_array();
    char *text;
    int ok = arr != NULL;

    for (size_t i = 0; ok && i < nj; i++) {
        const sched_job *j = &jobs[i];

        if (j->state != SCHED_RUNNING)
            continue;
        for (size_t k = 0; ok && k < j->ntasks; k++) {
            const sched_task *t = &j->tasks[k];
            char rank[16];

            if (t->metrics[0] == '\0' || strcmp(t->state, "RUNNING") != 0 ||
                t->attempt != j->attempt)
                continue;
            snprintf(rank, sizeof(rank), "%u", t->index);
            ok = add_group(arr, t->metrics,
                           json_pack("{s:s,s:s,s:s,s:s,s:s}", "job_id", j->id,
                                     "job_name", j->name, "role", t->role,
                                     "rank", rank, "node", t->node));
        }
    }
    for (size_t i = 0; ok && i < nn; i++) {
        const sched_node *n = &nodes[i];

        if (n->metrics[0] == '\0' || strcmp(n->state, "READY") != 0)
            continue;
        ok =
            add_group(arr, n->metrics,
                      json_pack("{s:s,s:s}", "role", "agent", "node", n->name));
    }
    text = ok ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    if (text == NULL)
        return FLPS_ENOMEM;
    *out = text;
    return FLPS_OK;
}
