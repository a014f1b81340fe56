/* The launcher interface and the agents launcher (launch.h). */
#include "scheduler/launch.h"

#include "common/alloc.h"

struct launch {
    const launch_ops *ops;
    void *impl;
    json_t *info; /* immutable after create */
};

/* flagent reads the desired sets the placement wrote: nothing to add. */
static const launch_ops agents_ops = {
    .name = "agents",
    .places = 1,
};

flps_err launch_create(const launch_ops *ops, void *impl, json_t *info,
                       launch **out)
{
    launch *l = flps_calloc(1, sizeof(*l));

    if (info == NULL)
        info = json_pack("{s:s}", "kind", ops->name);
    if (l == NULL || info == NULL) {
        flps_free(l);
        json_decref(info);
        if (ops->destroy != NULL)
            ops->destroy(impl);
        return FLPS_ENOMEM;
    }
    l->ops = ops;
    l->impl = impl;
    l->info = info;
    *out = l;
    return FLPS_OK;
}

flps_err launch_agents_create(launch **out)
{
    return launch_create(&agents_ops, NULL, NULL, out);
}

void launch_destroy(launch *l)
{
    if (l == NULL)
        return;
    if (l->ops->destroy != NULL)
        l->ops->destroy(l->impl);
    json_decref(l->info);
    flps_free(l);
}

const char *launch_name(const launch *l)
{
    return l != NULL ? l->ops->name : agents_ops.name;
}

int launch_places(const launch *l)
{
    return l == NULL || l->ops->places;
}

flps_err launch_turn(launch *l, sched_store *st, const char *leader_id,
                     double now)
{
    if (l == NULL || l->ops->turn == NULL)
        return FLPS_OK;
    return l->ops->turn(l->impl, st, leader_id, now);
}

flps_err launch_admitted(launch *l, sched_store *st, const char *id)
{
    if (l == NULL || l->ops->admitted == NULL)
        return FLPS_OK;
    return l->ops->admitted(l->impl, st, id);
}

flps_err launch_sweep(launch *l, sched_store *st, const sched_job *jobs,
                      size_t n)
{
    if (l == NULL || l->ops->sweep == NULL)
        return FLPS_OK;
    return l->ops->sweep(l->impl, st, jobs, n);
}

flps_err launch_running(launch *l, sched_store *st, char ***ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (l == NULL || l->ops->running == NULL)
        return FLPS_OK;
    return l->ops->running(l->impl, st, ids, n);
}

json_t *launch_info_json(const launch *l)
{
    if (l == NULL)
        return json_pack("{s:s}", "kind", agents_ops.name);
    /* A copy, not a reference: the API's thread must not touch the
     * count of an object the loop's thread may hold too. */
    return json_deep_copy(l->info);
}
