/* flagent's metric families, and the metrics addresses of its tasks on
 * their way to Redis. */
#include "scheduler/agent_metrics.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "scheduler/agent_node_impl.h"
#include "services/httpd.h"
#include "services/metrics.h"
#include "services/metrics_proc.h"

/* Handles are written by create and then only read; values are guarded by
 * the registry's lock (the agent's loop updates, an HTTP thread renders).
 * The agent's state itself is never read by the HTTP thread. */
struct agent_metrics {
    metrics *reg;
    httpd *http;
    metrics_family *started, *exited, *running, *heartbeat, *cpus, *memory,
        *gpus;
};

static const char *role_name(agent_role r)
{
    return r == AGENT_ROLE_SERVER ? "server" : "worker";
}

flps_err agent_metrics_create(const agent_config *cfg, agent_metrics **out,
                              char *bound, size_t boundlen)
{
    static const char *const role[] = {"role"};
    static const char *const role_outcome[] = {"role", "outcome"};
    agent_metrics *m = flps_calloc(1, sizeof(*m));
    flps_err rc;

    if (m == NULL)
        return FLPS_ENOMEM;
    rc = metrics_create(&m->reg);
    if (rc != FLPS_OK)
        goto fail;
#define REG_(call)                                                             \
    do {                                                                       \
        rc = (call);                                                           \
        if (rc != FLPS_OK)                                                     \
            goto fail;                                                         \
    } while (0)
    REG_(metrics_counter(m->reg, "flagent_processes_started_total",
                         "Task processes started, by role.", role, 1,
                         &m->started));
    REG_(metrics_counter(m->reg, "flagent_processes_exited_total",
                         "Task processes ended (or that could not start), by "
                         "role and outcome.",
                         role_outcome, 2, &m->exited));
    REG_(metrics_gauge(m->reg, "flagent_tasks_running",
                       "Tasks with a live process, by role.", role, 1,
                       &m->running));
    REG_(metrics_gauge(m->reg, "flagent_last_heartbeat_timestamp_seconds",
                       "Unix time of the last heartbeat (or registration) "
                       "Redis accepted; 0 before the first.",
                       NULL, 0, &m->heartbeat));
    REG_(metrics_gauge(m->reg, "flagent_node_cpus",
                       "CPUs this node offers to jobs.", NULL, 0, &m->cpus));
    REG_(metrics_gauge(m->reg, "flagent_node_memory_bytes",
                       "Memory this node offers to jobs, in bytes.", NULL, 0,
                       &m->memory));
    REG_(metrics_gauge(m->reg, "flagent_node_gpus",
                       "GPUs this node offers to jobs.", NULL, 0, &m->gpus));
    REG_(metrics_proc_register(m->reg, "flagent"));
#undef REG_
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
    *out = m;
    return FLPS_OK;

fail:
    metrics_destroy(m->reg);
    flps_free(m);
    return rc;
}

void agent_metrics_destroy(agent_metrics *m)
{
    if (m == NULL)
        return;
    httpd_stop(m->http); /* first: no scrape may render a freed registry */
    metrics_destroy(m->reg);
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
