/* flagent's metric families, and the metrics addresses of its tasks on
 * their way to Redis. */
#include "scheduler/agent_metrics.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/energy.h"
#include "common/log.h"
#include "common/metrics_proc.h"
#include "scheduler/agent_node_impl.h"
#include "services/httpd.h"
#include "services/metrics.h"

/* Handles are written by create and then only read; values are guarded by
 * the registry's lock (the agent's loop updates, an HTTP thread renders).
 * The agent's state itself is never read by the HTTP thread. */
struct agent_metrics {
    metrics *reg;
    httpd *http;
    metrics_family *started, *exited, *running, *heartbeat, *cpus, *memory,
        *gpus, *energy;
    /* The node's energy counters (the agent's loop only). */
    energy *e;
    double energy_at, energy_sent[ENERGY_MAX_DEVICES];
};

/* The node's counters are read this often: RAPL's wrap in minutes at
 * full power (docs/energy.md), and a scrape interval is 15 s. */
#define AGENT_ENERGY_EVERY_S 10.0

static const char *role_name(agent_role r)
{
    return r == AGENT_ROLE_SERVER ? "server" : "worker";
}

static const char *const role_label[] = {"role"};
static const char *const device_label[] = {"device"};
static const char *const role_outcome_labels[] = {"role", "outcome"};

/* Every family, in the order /metrics shows them. */
static const metrics_def agent_metric_defs[] = {
    {METRICS_COUNTER, "flagent_processes_started_total",
     METRICS_AT(agent_metrics, started), "Task processes started, by role.",
     METRICS_LABELS(role_label)},
    {METRICS_COUNTER, "flagent_processes_exited_total",
     METRICS_AT(agent_metrics, exited),
     "Task processes ended (or that could not start), by role and outcome.",
     METRICS_LABELS(role_outcome_labels)},
    {METRICS_GAUGE, "flagent_tasks_running", METRICS_AT(agent_metrics, running),
     "Tasks with a live process, by role.", METRICS_LABELS(role_label)},
    {METRICS_GAUGE, "flagent_last_heartbeat_timestamp_seconds",
     METRICS_AT(agent_metrics, heartbeat),
     "Unix time of the last heartbeat (or registration) Redis accepted; 0 "
     "before the first."},
    {METRICS_GAUGE, "flagent_node_cpus", METRICS_AT(agent_metrics, cpus),
     "CPUs this node offers to jobs."},
    {METRICS_GAUGE, "flagent_node_memory_bytes",
     METRICS_AT(agent_metrics, memory),
     "Memory this node offers to jobs, in bytes."},
    {METRICS_GAUGE, "flagent_node_gpus", METRICS_AT(agent_metrics, gpus),
     "GPUs this node offers to jobs."},
    {METRICS_COUNTER, "flagent_node_energy_joules_total",
     METRICS_AT(agent_metrics, energy),
     "Energy the node's device used since flagent started, read where the "
     "hardware reports it (GPUs: NVML, CPU packages: RAPL) every 10 s; no "
     "series where nothing reports energy.",
     METRICS_LABELS(device_label)},
};

/* The node's energy counters (every GPU and CPU package), said in one
 * line; none is no error: the series stay absent. */
static void open_energy(agent_metrics *m)
{
    char desc[1024];

    if (energy_open(NULL, &m->e, desc, sizeof(desc)) != FLPS_OK) {
        log_warn("energy: %s: node energy is not reported", desc);
        m->e = NULL;
        return;
    }
    log_info("energy: %s", energy_count(m->e) > 0
                               ? energy_describe(m->e, desc, sizeof(desc))
                               : energy_why(m->e));
    if (energy_count(m->e) > 0)
        agent_metrics_energy(m); /* the series from the start, at 0 */
}

flps_err agent_metrics_create(const agent_config *cfg, agent_metrics **out,
                              char *bound, size_t boundlen)
{
    agent_metrics *m = flps_calloc(1, sizeof(*m));
    flps_err rc;

    if (m == NULL)
        return FLPS_ENOMEM;
    rc = metrics_create(&m->reg);
    if (rc == FLPS_OK)
        rc = metrics_proc_register_daemon(m->reg, "flagent", agent_metric_defs,
                                          METRICS_NDEFS(agent_metric_defs), m);
    if (rc != FLPS_OK)
        goto fail;
    metrics_gauge_set(m->cpus, NULL, cfg->cpus);
    metrics_gauge_set(m->memory, NULL, (double)cfg->memory);
    metrics_gauge_set(m->gpus, NULL, (double)cfg->gpus);
    for (int r = AGENT_ROLE_SERVER; r <= AGENT_ROLE_WORKER; r++) {
        /* Every series from the start, so rate() and sums work at once. */
        static const char *const outcomes[] = {"succeeded", "failed",
                                               "signaled"};
        const char *v[] = {role_name((agent_role)r), NULL};

        metrics_counter_add(m->started, v, 0);
        metrics_gauge_set(m->running, v, 0);
        for (size_t i = 0; i < 3; i++) {
            v[1] = outcomes[i];
            metrics_counter_add(m->exited, v, 0);
        }
    }
    rc = metrics_serve(m->reg, cfg->metrics, &m->http, bound, boundlen);
    if (rc != FLPS_OK)
        goto fail;
    open_energy(m);
    *out = m;
    return FLPS_OK;

fail:
    metrics_destroy(m->reg);
    flps_free(m);
    return rc;
}

void agent_metrics_energy(agent_metrics *m)
{
    double j[ENERGY_MAX_DEVICES], now = flps_mono_s();

    if (m == NULL || m->e == NULL || now - m->energy_at < AGENT_ENERGY_EVERY_S)
        return;
    m->energy_at = now;
    energy_read(m->e, j, ENERGY_MAX_DEVICES);
    for (size_t i = 0; i < energy_count(m->e); i++) {
        const char *v[] = {energy_device_at(m->e, i)->name};

        metrics_counter_add(m->energy, v, j[i] - m->energy_sent[i]);
        m->energy_sent[i] = j[i];
    }
}

void agent_metrics_destroy(agent_metrics *m)
{
    if (m == NULL)
        return;
    httpd_stop(m->http); /* first: no scrape may render a freed registry */
    metrics_destroy(m->reg);
    energy_close(m->e);
    flps_free(m);
}

void agent_metrics_started(agent_metrics *m, agent_role role)
{
    const char *v[] = {role_name(role)};

    if (m != NULL)
        metrics_counter_add(m->started, v, 1);
}

void agent_metrics_exited(agent_metrics *m, agent_role role, int exit_code,
                          int sig)
{
    const char *v[] = {role_name(role), sig != 0         ? "signaled"
                                        : exit_code == 0 ? "succeeded"
                                                         : "failed"};

    if (m != NULL)
        metrics_counter_add(m->exited, v, 1);
}

void agent_metrics_heartbeat(agent_metrics *m, double wall)
{
    if (m != NULL)
        metrics_gauge_set(m->heartbeat, NULL, wall);
}

void agent_metrics_tasks(agent_metrics *m, const agent_node *n)
{
    double count[2] = {0, 0};

    if (m == NULL)
        return;
    for (const agent_task *t = n->tasks; t != NULL; t = t->next)
        if (t->p != NULL)
            count[t->id.role == AGENT_ROLE_SERVER ? 0 : 1]++;
    metrics_gauge_set(m->running, (const char *[]){"server"}, count[0]);
    metrics_gauge_set(m->running, (const char *[]){"worker"}, count[1]);
}

void agent_metrics_task_listen(const agent_node *n, char *buf, size_t len)
{
    snprintf(buf, len, "%s:0", n->cfg.address);
}

int agent_metrics_task_line(agent_task *t, const char *line)
{
    if (strncmp(line, "metrics on ", 11) != 0 || t->metrics[0] != '\0')
        return 0;
    snprintf(t->metrics, sizeof(t->metrics), "%s", line + 11);
    t->report_metrics = 1;
    log_info("task %s: metrics on %s", t->key, t->metrics);
    return 1;
}

int agent_metrics_flush_task(agent_node *n, agent_task *t)
{
    const char *argv[] = {"HSET", t->key, "metrics", t->metrics};

    if (!t->report_metrics)
        return 1;
    if (!agent_node_redis_cmd(n, NULL, "storing the task's metrics address", 4,
                              argv))
        return 0;
    t->report_metrics = 0;
    return 1;
}

int agent_metrics_flush_node(agent_node *n)
{
    const char *argv[] = {"HSET", n->node_key, "metrics", n->metrics_addr};

    if (n->metrics_addr[0] == '\0' || n->metrics_published)
        return 1;
    if (!agent_node_redis_cmd(n, NULL, "storing the node's metrics address", 4,
                              argv))
        return 0;
    n->metrics_published = 1;
    return 1;
}
