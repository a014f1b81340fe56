/* The compression plans the node agent follows: a job's plan in Redis,
 * written into {work_dir}/{job}/plan.json for its workers on this node
 * whenever its version moves on (docs/flagent.md, "Plans"). */
#include "scheduler/agent_node_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "services/fsutil.h"

void agent_plan_path(const agent_node *n, const char *job, char *path,
                     size_t len)
{
    snprintf(path, len, "%s/%s/plan.json", n->cfg.work_dir, job);
}

agent_plan *agent_plan_find(agent_node *n, const char *job)
{
    agent_plan *pl;

    for (pl = n->plans; pl != NULL; pl = pl->next)
        if (strcmp(pl->job, job) == 0)
            return pl;
    pl = flps_calloc(1, sizeof(*pl));
    if (pl == NULL) {
        log_error("job %s: out of memory to follow its plan", job);
        return NULL;
    }
    snprintf(pl->job, sizeof(pl->job), "%s", job);
    pl->next = n->plans;
    n->plans = pl;
    return pl;
}

/* A version number as flsched writes it; 0 for anything else. */
static long long plan_version(const redisReply *r)
{
    int64_t v;

    if (r == NULL || r->type != REDIS_REPLY_STRING ||
        flps_parse_i64(NULL, r->str, 1, INT64_MAX, &v, NULL, 0) != FLPS_OK)
        return 0;
    return (long long)v;
}

void agent_plan_check(agent_node *n, agent_plan *pl)
{
    char key[128], path[PATH_MAX], tmp[PATH_MAX + 16];
    const char *hget_argv[] = {"HGET", key, "version"};
    const char *hmget_argv[] = {"HMGET", key, "version", "plan"};
    redisReply *r = NULL;
    long long v;
    uid_t uid;
    int e, entered;

    pl->next_check = flps_mono_s() + AGENT_PLAN_CHECK_S;
    snprintf(key, sizeof(key), "flps:job:%s:plan", pl->job);
    if (!agent_node_redis_cmd(n, &r, "reading the job's plan version", 3,
                              hget_argv))
        return;
    v = plan_version(r);
    freeReplyObject(r);
    if (v <= pl->written)
        return;
    if (!agent_node_redis_cmd(n, &r, "reading the job's plan", 4, hmget_argv))
        return;
    /* Version and plan from one read: the plan may have moved on since
     * the HGET. */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_STRING ||
        (v = plan_version(r->element[0])) <= pl->written) {
        freeReplyObject(r);
        return;
    }
    snprintf(tmp, sizeof(tmp), "%s/%s", n->cfg.work_dir, pl->job);
    agent_plan_path(n, pl->job, path, sizeof(path));
    /* In the job's directory, as the job when it has a uid: a link it
     * planted there leads nowhere it could not write itself. */
    uid = n->uids != NULL ? agent_uids_of(n->uids, pl->job) : (uid_t)-1;
    entered = uid != (uid_t)-1 && agent_uids_enter(uid) == 0;
    if (n->uids != NULL && !entered)
        e = EPERM;
    else if (flps_mkdirs(tmp) != 0)
        e = errno;
    else {
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        e = agent_node_write_file(path, tmp, r->element[1]->str,
                                  r->element[1]->len);
    }
    if (entered)
        agent_uids_leave();
    freeReplyObject(r);
    if (e != 0) {
        if (pl->failed != v)
            log_warn("job %s: cannot write plan v%lld to %s: %s; trying "
                     "again",
                     pl->job, v, path, strerror(e));
        pl->failed = v;
        return;
    }
    log_info("job %s: plan v%lld written to %s", pl->job, v, path);
    pl->written = v;
}

void agent_plan_follow(agent_node *n)
{
    double now = flps_mono_s();
    agent_plan **pp;

    for (agent_plan *pl = n->plans; pl != NULL; pl = pl->next)
        pl->live = 0;
    for (agent_task *t = n->tasks; t != NULL; t = t->next) {
        agent_plan *pl;

        if (t->id.role != AGENT_ROLE_WORKER || !t->desired ||
            (t->phase != AGENT_TASK_NEW && t->phase != AGENT_TASK_WAITING &&
             t->phase != AGENT_TASK_RUNNING))
            continue;
        pl = agent_plan_find(n, t->id.job);
        if (pl != NULL)
            pl->live = 1;
    }
    for (pp = &n->plans; *pp != NULL;) {
        agent_plan *pl = *pp;

        if (pl->live) {
            if (n->redis_ok && now >= pl->next_check)
                agent_plan_check(n, pl);
            pp = &pl->next;
            continue;
        }
        *pp = pl->next;
        flps_free(pl);
    }
}
