/* The GPU clocks of flagent's workers (gpu_clock:): where each records
 * what it changed, and the restore flagent does once a worker is reaped,
 * so a worker killed mid-job does not leave its GPUs at its clock. */
#include "scheduler/agent_node_impl.h"

#include <stdio.h>

#include "common/gpuclock.h"
#include "common/log.h"

void agent_clock_record_path(const agent_node *n, const agent_task *t,
                             char *path, size_t len)
{
    /* The attempt's directory, which task_spawn makes. */
    snprintf(path, len, "%s/%s/attempt-%u/gpu_clock.rank%u", n->cfg.work_dir,
             t->id.job, t->id.attempt, t->id.index);
}

void agent_clock_restore(const agent_node *n, const agent_task *t)
{
    char path[PATH_MAX + 96], msg[512];
    size_t restored = 0;

    if (t->id.role != AGENT_ROLE_WORKER)
        return;
    agent_clock_record_path(n, t, path, sizeof(path));
    /* No record (the usual case: the worker changed nothing, or restored
     * and removed it) is no error and opens no library. */
    if (gpuclock_restore_from_record(path, NULL, &restored, msg, sizeof(msg)) !=
        FLPS_OK)
        log_warn("task %s: %s", t->key, msg);
    else if (restored > 0)
        log_info("task %s: restored the GPU clocks it left set (%zu GPUs)",
                 t->key, restored);
}
