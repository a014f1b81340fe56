/* The job hash's one table, and what it drives: the hash written at
 * submit, the hash read back, and the API's job JSON. */
#include "scheduler/sched_jobhash.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/numparse.h"
#include "scheduler/sched_store_int.h"

typedef enum {
    JF_STR,      /* char array, "" when absent */
    JF_STATE,    /* sched_state by name; a job without one is malformed */
    JF_U32,      /* uint32_t, decimal */
    JF_U64,      /* uint64_t, decimal */
    JF_TIME,     /* double seconds; 0 = not set, null in JSON */
    JF_REAL,     /* double */
    JF_MCPUS,    /* uint64_t thousandths of a CPU, decimal CPUs in Redis */
    JF_TEXT,     /* char *, owned, "" when absent */
    JF_TEXT_OPT, /* char *, owned, NULL when absent or empty */
    JF_SUMMARY,  /* JF_TEXT_OPT holding JSON, shown once SUCCEEDED */
    JF_PROGRESS, /* double with its bit in p_mask (table order) */
    JF_SECRET,   /* char *, owned: written at submit, never read back */
} jf_type;

typedef enum {
    JF_HIDDEN = 0, /* not in the API's JSON */
    JF_TOP,
    JF_RESOURCES,   /* under "resources" */
    JF_PROGRESS_OF, /* under "progress", present only when reported */
} jf_group;

typedef struct jf {
    const char *redis; /* the hash's field name */
    jf_type type;
    size_t off, size; /* where in sched_job, and how big */
    int at_submit;    /* written by sched_store_submit */
    jf_group group;
    const char *json; /* its name in the API's JSON */
} jf;

#define JF(redis, type, member, submit, group, json)                           \
    {                                                                          \
        redis, type, offsetof(sched_job, member),                              \
            sizeof(((sched_job *)0)->member), submit, group, json              \
    }

/* Hash field order is the order a submit writes; JSON keys come in table
 * order too, the "resources" and "progress" objects where their first
 * field is. p_* fields keep the order of sched_job's p_* list (p_mask). */
static const jf job_fields[] = {
    JF("id", JF_STR, id, 1, JF_TOP, "id"),
    JF("name", JF_STR, name, 1, JF_TOP, "name"),
    JF("state", JF_STATE, state, 1, JF_TOP, "state"),
    JF("priority", JF_U32, priority, 1, JF_TOP, "priority"),
    JF("seq", JF_U64, seq, 1, JF_HIDDEN, NULL),
    JF("submitted_at", JF_TIME, submitted_at, 1, JF_TOP, "submitted_at"),
    JF("started_at", JF_TIME, started_at, 0, JF_TOP, "started_at"),
    JF("finished_at", JF_TIME, finished_at, 0, JF_TOP, "finished_at"),
    JF("attempt", JF_U32, attempt, 1, JF_TOP, "attempt"),
    JF("restarts", JF_U32, restarts, 1, JF_TOP, "restarts"),
    JF("max_restarts", JF_U32, max_restarts, 1, JF_TOP, "max_restarts"),
    JF("reason", JF_STR, reason, 1, JF_TOP, "reason"),
    JF("spec", JF_TEXT, spec, 1, JF_HIDDEN, NULL),
    JF("workers", JF_U32, workers, 1, JF_TOP, "workers"),
    JF("servers", JF_U32, servers, 1, JF_TOP, "servers"),
    JF("iterations", JF_U64, iterations, 1, JF_TOP, "iterations"),
    JF("time_limit", JF_REAL, time_limit, 1, JF_TOP, "time_limit"),
    JF("cpus_per_worker", JF_MCPUS, per_worker.mcpus, 1, JF_RESOURCES,
       "cpus_per_worker"),
    JF("memory_per_worker", JF_U64, per_worker.memory, 1, JF_RESOURCES,
       "memory_per_worker"),
    JF("gpus_per_worker", JF_U64, per_worker.gpus, 1, JF_RESOURCES,
       "gpus_per_worker"),
    JF("cpus_per_server", JF_MCPUS, per_server.mcpus, 1, JF_RESOURCES,
       "cpus_per_server"),
    JF("memory_per_server", JF_U64, per_server.memory, 1, JF_RESOURCES,
       "memory_per_server"),
    JF("p_iteration", JF_PROGRESS, p_iteration, 0, JF_PROGRESS_OF, "iteration"),
    JF("p_loss", JF_PROGRESS, p_loss, 0, JF_PROGRESS_OF, "loss"),
    JF("p_test_accuracy", JF_PROGRESS, p_test_accuracy, 0, JF_PROGRESS_OF,
       "test_accuracy"),
    JF("p_bytes_sent", JF_PROGRESS, p_bytes_sent, 0, JF_PROGRESS_OF,
       "bytes_sent"),
    JF("p_dense_bytes", JF_PROGRESS, p_dense_bytes, 0, JF_PROGRESS_OF,
       "dense_bytes"),
    JF("p_elapsed", JF_PROGRESS, p_elapsed, 0, JF_PROGRESS_OF, "elapsed"),
    JF("summary", JF_SUMMARY, summary, 0, JF_TOP, "summary"),
    JF("profile", JF_TEXT_OPT, profile, 0, JF_HIDDEN, NULL),
    JF("transport", JF_STR, transport, 1, JF_TOP, "transport"),
    JF("compression", JF_STR, compression, 1, JF_HIDDEN, NULL),
    JF("transport_used", JF_STR, transport_used, 0, JF_TOP, "transport_used"),
    JF("placement", JF_STR, placement, 1, JF_HIDDEN, NULL),
    JF("credentials", JF_SECRET, credentials, 1, JF_HIDDEN, NULL),
};

#define JOB_NFIELDS (sizeof(job_fields) / sizeof(job_fields[0]))

/* The member a field describes, in j. */
#define JF_AT(j, f, T) ((T *)(void *)((char *)(j) + (f)->off))
#define JF_CAT(j, f, T)                                                        \
    ((const T *)(const void *)((const char *)(j) + (f)->off))

flps_err sched_jobhash_write(const sched_job *j, sched_jobhash_put_fn put,
                             void *arg)
{
    for (size_t i = 0; i < JOB_NFIELDS; i++) {
        const jf *f = &job_fields[i];
        char num[64];
        const char *v = num;
        flps_err rc;

        if (!f->at_submit)
            continue;
        switch (f->type) {
        case JF_STR:
            v = JF_CAT(j, f, char);
            break;
        case JF_STATE:
            v = sched_state_name(*JF_CAT(j, f, sched_state));
            break;
        case JF_U32:
            snprintf(num, sizeof(num), "%u", *JF_CAT(j, f, uint32_t));
            break;
        case JF_U64:
            snprintf(num, sizeof(num), "%llu",
                     (unsigned long long)*JF_CAT(j, f, uint64_t));
            break;
        case JF_TIME:
        case JF_REAL:
        case JF_PROGRESS:
            flps_format_double(num, sizeof(num), *JF_CAT(j, f, double));
            break;
        case JF_MCPUS:
            sched_store_fmt_mcpus(num, sizeof(num), *JF_CAT(j, f, uint64_t));
            break;
        case JF_TEXT:
        case JF_TEXT_OPT:
        case JF_SUMMARY:
        case JF_SECRET:
            v = *JF_CAT(j, f, char *);
            if (v == NULL)
                v = "";
            break;
        }
        rc = put(arg, f->redis, v, strlen(v));
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

flps_err sched_jobhash_read(const redisReply *r, sched_job *out)
{
    sched_job j;
    unsigned bit = 0;

    memset(&j, 0, sizeof(j));
    for (size_t i = 0; i < JOB_NFIELDS; i++) {
        const jf *f = &job_fields[i];
        const char *v = sched_store_hget(r, f->redis);
        int given = v != NULL && *v != '\0';

        switch (f->type) {
        case JF_STR:
            sched_store_copy(JF_AT(&j, f, char), f->size, v ? v : "",
                             v ? strlen(v) : 0);
            break;
        case JF_STATE:
            if (v == NULL || !sched_state_parse(v, JF_AT(&j, f, sched_state)))
                goto malformed;
            break;
        case JF_U32:
            *JF_AT(&j, f, uint32_t) = (uint32_t)sched_store_to_u64(v);
            break;
        case JF_U64:
            *JF_AT(&j, f, uint64_t) = sched_store_to_u64(v);
            break;
        case JF_TIME:
        case JF_REAL:
            *JF_AT(&j, f, double) = sched_store_to_double(v);
            break;
        case JF_MCPUS:
            *JF_AT(&j, f, uint64_t) = sched_res_mcpus(sched_store_to_double(v));
            break;
        case JF_PROGRESS:
            if (given) {
                *JF_AT(&j, f, double) = sched_store_to_double(v);
                j.p_mask |= 1u << bit;
                j.have_progress = 1;
            }
            bit++;
            break;
        case JF_TEXT:
            *JF_AT(&j, f, char *) = flps_strdup(v ? v : "");
            if (*JF_AT(&j, f, char *) == NULL)
                goto oom;
            break;
        case JF_SECRET:
            break; /* flsched never needs it back: not kept in memory */
        case JF_TEXT_OPT:
        case JF_SUMMARY:
            if (given) {
                *JF_AT(&j, f, char *) = flps_strdup(v);
                if (*JF_AT(&j, f, char *) == NULL)
                    goto oom;
            }
            break;
        }
    }
    *out = j;
    return FLPS_OK;
malformed:
    sched_job_fini(&j);
    return FLPS_EPROTO;
oom:
    sched_job_fini(&j);
    return FLPS_ENOMEM;
}

json_t *sched_json_number(double v)
{
    if (v == floor(v) && fabs(v) < 9e15)
        return json_integer((json_int_t)v);
    return json_real(v);
}

json_t *sched_json_cpus(uint64_t mcpus)
{
    return sched_json_number((double)mcpus / 1000.0);
}

json_t *sched_json_time(double t)
{
    return t > 0 ? json_real(t) : json_null();
}

/* The JSON value of field f of j; NULL when it is not shown. */
static json_t *field_json(const sched_job *j, const jf *f, unsigned bit)
{
    switch (f->type) {
    case JF_STR:
        return json_string(JF_CAT(j, f, char));
    case JF_STATE:
        return json_string(sched_state_name(*JF_CAT(j, f, sched_state)));
    case JF_U32:
        return json_integer(*JF_CAT(j, f, uint32_t));
    case JF_U64:
        return json_integer((json_int_t)*JF_CAT(j, f, uint64_t));
    case JF_TIME:
        return sched_json_time(*JF_CAT(j, f, double));
    case JF_REAL:
        return sched_json_number(*JF_CAT(j, f, double));
    case JF_MCPUS:
        return sched_json_cpus(*JF_CAT(j, f, uint64_t));
    case JF_PROGRESS:
        if (!(j->p_mask & (1u << bit)))
            return NULL;
        return sched_json_number(*JF_CAT(j, f, double));
    case JF_SUMMARY:
        /* A summary that is not JSON is left out rather than failing the
         * whole job object. */
        if (j->state != SCHED_SUCCEEDED || *JF_CAT(j, f, char *) == NULL)
            return NULL;
        return json_loads(*JF_CAT(j, f, char *), 0, NULL);
    case JF_TEXT:
    case JF_TEXT_OPT:
    case JF_SECRET: /* never shown */
        break;
    }
    return NULL;
}

json_t *sched_jobhash_json(const sched_job *j)
{
    static const char *const group_name[] = {
        [JF_RESOURCES] = "resources",
        [JF_PROGRESS_OF] = "progress",
    };
    json_t *o = json_object(), *group[JF_PROGRESS_OF + 1] = {NULL};
    unsigned bit = 0;

    if (o == NULL)
        return NULL;
    for (size_t i = 0; i < JOB_NFIELDS; i++) {
        const jf *f = &job_fields[i];
        json_t *v;

        if (f->group == JF_HIDDEN)
            continue;
        v = field_json(j, f, bit);
        if (f->type == JF_PROGRESS)
            bit++;
        if (v == NULL)
            continue;
        if (f->group == JF_TOP) {
            json_object_set_new(o, f->json, v);
            continue;
        }
        /* A group's object goes where its first shown field is; o holds
         * the reference, group[] borrows it. */
        if (group[f->group] == NULL) {
            group[f->group] = json_object();
            if (group[f->group] == NULL ||
                json_object_set_new(o, group_name[f->group], group[f->group]) !=
                    0) {
                json_decref(v);
                json_decref(o);
                return NULL;
            }
        }
        json_object_set_new(group[f->group], f->json, v);
    }
    return o;
}

void sched_jobhash_sum_progress(const sched_job *j, json_t *o)
{
    json_t *pr = json_object_get(o, "progress");
    double sent = 0, dense = 0;
    int any = 0;

    if (!json_is_object(pr))
        return;
    for (size_t i = 0; i < j->ntasks; i++) {
        const sched_task *t = &j->tasks[i];

        if (strcmp(t->role, "worker") != 0 || !t->have_bytes)
            continue;
        sent += t->p_bytes_sent;
        dense += t->p_dense_bytes;
        any = 1;
    }
    if (!any)
        return;
    json_object_set_new(pr, "bytes_sent", sched_json_number(sent));
    if (dense > 0)
        json_object_set_new(pr, "dense_bytes", sched_json_number(dense));
}
