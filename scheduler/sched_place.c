/* Gang placement and the queue pass with backfill: pure functions over
 * arrays the caller fills. */
#include "scheduler/sched_place.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "services/plural.h"

uint64_t sched_res_mcpus(double cpus)
{
    if (!isfinite(cpus) || cpus <= 0)
        return 0;
    if (cpus >= 1e15)
        return (uint64_t)1e18;
    /* A positive amount is never nothing: 0.0001 CPUs per worker rounded
     * to 0 and placed 1000 workers on a 1-CPU node. */
    if (cpus < 0.001)
        return 1;
    return (uint64_t)llround(cpus * 1000.0);
}

static int res_fits(const sched_res *need, const sched_res *have)
{
    return need->mcpus <= have->mcpus && need->memory <= have->memory &&
           need->gpus <= have->gpus;
}

static uint64_t sub_sat(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static void res_sub(sched_res *r, const sched_res *d)
{
    r->mcpus = sub_sat(r->mcpus, d->mcpus);
    r->memory = sub_sat(r->memory, d->memory);
    r->gpus = sub_sat(r->gpus, d->gpus);
}

static void res_add(sched_res *r, const sched_res *d)
{
    r->mcpus += d->mcpus;
    r->memory += d->memory;
    r->gpus += d->gpus;
}

static void res_min(sched_res *r, const sched_res *o)
{
    if (o->mcpus < r->mcpus)
        r->mcpus = o->mcpus;
    if (o->memory < r->memory)
        r->memory = o->memory;
    if (o->gpus < r->gpus)
        r->gpus = o->gpus;
}

/* May job have a task on node n at all (RDMA jobs only where RDMA is)? */
static int node_serves(const sched_pnode *n, const sched_pjob *job)
{
    return n->ready && (!job->need_rdma || n->rdma);
}

static sched_res node_free(const sched_pnode *n)
{
    sched_res f = {0, 0, 0};

    if (n->ready) {
        f = n->cap;
        res_sub(&f, &n->used);
    }
    return f;
}

/* What a worker and the server beside it need together. */
static sched_res pair_need(const sched_pjob *job)
{
    sched_res need = job->per_worker;

    res_add(&need, &job->per_server);
    return need;
}

/* servers: auto: worker i and server i on one node, each pair on the node
 * with the fewest pairs so far that holds it (the most free CPU among
 * equals), so every node with a worker has its shard beside it and the
 * pairs spread over the nodes as servers do. */
static int place_pairs(const sched_pnode *nodes, size_t nnodes,
                       const sched_pjob *job, uint32_t *server_node,
                       uint32_t *worker_node, sched_res *scratch,
                       uint32_t *npairs)
{
    const sched_res need = pair_need(job);

    for (uint32_t w = 0; w < job->workers; w++) {
        size_t best = nnodes;

        for (size_t i = 0; i < nnodes; i++) {
            if (!node_serves(&nodes[i], job) || !res_fits(&need, &scratch[i]))
                continue;
            if (best == nnodes || npairs[i] < npairs[best] ||
                (npairs[i] == npairs[best] &&
                 scratch[i].mcpus > scratch[best].mcpus))
                best = i;
        }
        if (best == nnodes)
            return 0;
        res_sub(&scratch[best], &need);
        npairs[best]++;
        server_node[w] = worker_node[w] = (uint32_t)best;
    }
    return 1;
}

/* The greedy rules of docs/scheduler.md on scratch copies, so a job that
 * does not fit leaves free untouched. nsrv is nnodes counters of scratch. */
static int place_on(const sched_pnode *nodes, sched_res *free, size_t nnodes,
                    const sched_pjob *job, uint32_t *server_node,
                    uint32_t *worker_node, sched_res *scratch, uint32_t *nsrv)
{
    memcpy(scratch, free, nnodes * sizeof(*scratch));
    memset(nsrv, 0, nnodes * sizeof(*nsrv));
    if (job->beside && job->servers == job->workers) {
        if (!place_pairs(nodes, nnodes, job, server_node, worker_node, scratch,
                         nsrv))
            return 0;
        memcpy(free, scratch, nnodes * sizeof(*free));
        return 1;
    }
    for (uint32_t s = 0; s < job->servers; s++) {
        size_t best = nnodes;

        for (size_t i = 0; i < nnodes; i++) {
            if (!node_serves(&nodes[i], job) ||
                !res_fits(&job->per_server, &scratch[i]))
                continue;
            if (best == nnodes || nsrv[i] < nsrv[best] ||
                (nsrv[i] == nsrv[best] &&
                 scratch[i].mcpus > scratch[best].mcpus))
                best = i;
        }
        if (best == nnodes)
            return 0;
        res_sub(&scratch[best], &job->per_server);
        nsrv[best]++;
        server_node[s] = (uint32_t)best;
    }
    for (uint32_t w = 0; w < job->workers; w++) {
        size_t i;

        for (i = 0; i < nnodes; i++)
            if (node_serves(&nodes[i], job) &&
                res_fits(&job->per_worker, &scratch[i]))
                break;
        if (i == nnodes)
            return 0;
        res_sub(&scratch[i], &job->per_worker);
        worker_node[w] = (uint32_t)i;
    }
    memcpy(free, scratch, nnodes * sizeof(*free));
    return 1;
}

/* Scratch for place_on, and arrays for the servers and workers of the
 * largest job, allocated once per call. */
typedef struct place_tmp {
    sched_res *scratch;
    uint32_t *nsrv;
    uint32_t *srv;
    uint32_t *wrk;
} place_tmp;

static flps_err tmp_init(place_tmp *t, size_t nnodes, uint32_t maxs,
                         uint32_t maxw)
{
    memset(t, 0, sizeof(*t));
    t->scratch = flps_calloc(nnodes ? nnodes : 1, sizeof(*t->scratch));
    t->nsrv = flps_calloc(nnodes ? nnodes : 1, sizeof(*t->nsrv));
    t->srv = flps_calloc(maxs ? maxs : 1, sizeof(*t->srv));
    t->wrk = flps_calloc(maxw ? maxw : 1, sizeof(*t->wrk));
    if (t->scratch == NULL || t->nsrv == NULL || t->srv == NULL ||
        t->wrk == NULL)
        return FLPS_ENOMEM;
    return FLPS_OK;
}

static void tmp_fini(place_tmp *t)
{
    flps_free(t->scratch);
    flps_free(t->nsrv);
    flps_free(t->srv);
    flps_free(t->wrk);
}

flps_err sched_place_gang(const sched_pnode *nodes, sched_res *free,
                          size_t nnodes, const sched_pjob *job,
                          uint32_t *server_node, uint32_t *worker_node,
                          int *placed)
{
    place_tmp t;
    flps_err rc;

    if ((nodes == NULL && nnodes > 0) || (free == NULL && nnodes > 0) ||
        job == NULL || (server_node == NULL && job->servers > 0) ||
        (worker_node == NULL && job->workers > 0) || placed == NULL)
        return FLPS_EINVAL;
    rc = tmp_init(&t, nnodes, job->servers, job->workers);
    if (rc == FLPS_OK) {
        if (place_on(nodes, free, nnodes, job, t.srv, t.wrk, t.scratch,
                     t.nsrv)) {
            memcpy(server_node, t.srv, job->servers * sizeof(*t.srv));
            memcpy(worker_node, t.wrk, job->workers * sizeof(*t.wrk));
            *placed = 1;
        } else {
            *placed = 0;
        }
    }
    tmp_fini(&t);
    return rc;
}

flps_err sched_place_fits_ever(const sched_pnode *nodes, size_t nnodes,
                               const sched_pjob *job, int *fits)
{
    sched_pnode *empty = NULL;
    sched_res *free = NULL;
    place_tmp t;
    flps_err rc;

    if ((nodes == NULL && nnodes > 0) || job == NULL || fits == NULL)
        return FLPS_EINVAL;
    rc = tmp_init(&t, nnodes, job->servers, job->workers);
    if (rc != FLPS_OK)
        goto out;
    empty = flps_calloc(nnodes ? nnodes : 1, sizeof(*empty));
    free = flps_calloc(nnodes ? nnodes : 1, sizeof(*free));
    if (empty == NULL || free == NULL) {
        rc = FLPS_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nnodes; i++) {
        empty[i].cap = nodes[i].cap;
        empty[i].ready = 1;
        empty[i].rdma = nodes[i].rdma;
        free[i] = nodes[i].cap;
    }
    *fits = place_on(empty, free, nnodes, job, t.srv, t.wrk, t.scratch, t.nsrv);
out:
    flps_free(empty);
    flps_free(free);
    tmp_fini(&t);
    return rc;
}

static void format_size(uint64_t b, char *buf, size_t len)
{
    static const char *const units[] = {"Ki", "Mi", "Gi", "Ti"};
    const char *unit = NULL;
    double v = (double)b;

    for (size_t i = 0; i < 4 && v >= 1024; i++) {
        v /= 1024;
        unit = units[i];
    }
    if (unit == NULL)
        snprintf(buf, len, "%llu bytes", (unsigned long long)b);
    else
        snprintf(buf, len, "%.4g%s", v, unit);
}

void sched_place_explain(const sched_pnode *nodes, size_t nnodes,
                         const sched_pjob *job, const char **field, char *msg,
                         size_t msglen)
{
    sched_res max = {0, 0, 0}, total = {0, 0, 0}, need = {0, 0, 0};
    sched_res srv_need = {0, 0, 0};
    char a[32], b[32];
    size_t nrdma = 0, nserve = nnodes;

    for (size_t i = 0; i < nnodes; i++)
        nrdma += nodes[i].rdma != 0;
    if (job->need_rdma && nnodes > 0 && nrdma == 0) {
        *field = "transport";
        char none[64];

        if (nnodes == 1)
            snprintf(none, sizeof(none),
                     "the only registered node reports "
                     "no");
        else
            snprintf(none, sizeof(none),
                     "none of the %zu registered nodes reports an", nnodes);
        snprintf(msg, msglen,
                 "transport: rdma: %s ACTIVE RDMA port (see flsubmit nodes "
                 "and flsubmit doctor --job FILE); run it where the nodes "
                 "have RDMA NICs, or set transport: zmq or auto",
                 none);
        return;
    }
    if (job->need_rdma)
        nserve = nrdma;
    for (size_t i = 0; i < nnodes; i++) {
        const sched_res *c = &nodes[i].cap;

        if (job->need_rdma && !nodes[i].rdma)
            continue;

        if (c->mcpus > max.mcpus)
            max.mcpus = c->mcpus;
        if (c->memory > max.memory)
            max.memory = c->memory;
        if (c->gpus > max.gpus)
            max.gpus = c->gpus;
        res_add(&total, c);
    }
    if (nnodes == 0) {
        *field = "workers";
        snprintf(msg, msglen,
                 "no node is registered, so no job can ever be placed; start "
                 "flagent on the nodes first");
        return;
    }
    /* One task bigger than every node: name that task's key. */
    struct {
        uint64_t need, max;
        const char *key;
        int mem;
    } one[] = {
        {job->per_worker.mcpus, max.mcpus, "cpus_per_worker", 0},
        {job->per_worker.memory, max.memory, "memory_per_worker", 1},
        {job->per_worker.gpus, max.gpus, "gpus_per_worker", 2},
        {job->per_server.mcpus, max.mcpus, "cpus_per_server", 0},
        {job->per_server.memory, max.memory, "memory_per_server", 1},
    };
    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
        const int worker = i < 3;

        if ((worker ? job->workers : job->servers) == 0 ||
            one[i].need <= one[i].max)
            continue;
        *field = one[i].key;
        if (one[i].mem == 0)
            snprintf(msg, msglen,
                     "one %s needs %.3f %s; the largest node has %.3f",
                     worker ? "worker" : "server", (double)one[i].need / 1000,
                     plural_word((double)one[i].need / 1000, "CPU", "CPUs"),
                     (double)one[i].max / 1000);
        else if (one[i].mem == 1) {
            format_size(one[i].need, a, sizeof(a));
            format_size(one[i].max, b, sizeof(b));
            snprintf(msg, msglen,
                     "one %s needs %s of memory; the largest node has %s",
                     worker ? "worker" : "server", a, b);
        } else
            snprintf(
                msg, msglen, "one %s needs %llu %s; the largest node has %llu",
                worker ? "worker" : "server", (unsigned long long)one[i].need,
                plural_word((double)one[i].need, "GPU", "GPUs"),
                (unsigned long long)one[i].max);
        return;
    }
    if (job->beside && job->servers == job->workers && job->workers > 0) {
        const sched_res pair = pair_need(job);

        if (!res_fits(&pair, &max)) {
            format_size(pair.memory, a, sizeof(a));
            format_size(max.memory, b, sizeof(b));
            *field = "servers";
            snprintf(msg, msglen,
                     "servers: auto puts each worker's server on its node, "
                     "and a worker with its server needs %.3f %s and %s of "
                     "memory; the largest node has %.3f and %s (give "
                     "servers a number to place them apart)",
                     (double)pair.mcpus / 1000,
                     plural_word((double)pair.mcpus / 1000, "CPU", "CPUs"), a,
                     (double)max.mcpus / 1000, b);
            return;
        }
    }
    for (uint32_t s = 0; s < job->servers; s++)
        res_add(&srv_need, &job->per_server);
    need = srv_need;
    for (uint32_t w = 0; w < job->workers; w++)
        res_add(&need, &job->per_worker);
    *field = res_fits(&srv_need, &total) ? "workers" : "servers";
    format_size(need.memory, a, sizeof(a));
    format_size(total.memory, b, sizeof(b));
    snprintf(msg, msglen,
             "%u %s and %u %s need %.3f %s, %s of memory and %llu %s in "
             "all, which the %zu registered %s%s (%.3f %s, %s, %llu %s "
             "together) can never hold",
             job->servers, plural_word(job->servers, "server", "servers"),
             job->workers, plural_word(job->workers, "worker", "workers"),
             (double)need.mcpus / 1000,
             plural_word((double)need.mcpus / 1000, "CPU", "CPUs"), a,
             (unsigned long long)need.gpus,
             plural_word((double)need.gpus, "GPU", "GPUs"), nserve,
             plural_word((double)nserve, "node", "nodes"),
             job->need_rdma ? " with an ACTIVE RDMA port" : "",
             (double)total.mcpus / 1000,
             plural_word((double)total.mcpus / 1000, "CPU", "CPUs"), b,
             (unsigned long long)total.gpus,
             plural_word((double)total.gpus, "GPU", "GPUs"));
}

/* Insertion sort: queues are short and the order must be stable. */
void sched_place_order(const sched_pjob *jobs, size_t n, size_t *order)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = i;

        while (k > 0) {
            const sched_pjob *a = &jobs[order[k - 1]], *b = &jobs[i];

            if (a->priority > b->priority ||
                (a->priority == b->priority && a->seq <= b->seq))
                break;
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
}

/* What a placed job takes from each node (into alloc[nnodes], zeroed
 * first). */
static void job_alloc(const sched_pjob *job, const uint32_t *server_node,
                      const uint32_t *worker_node, sched_res *alloc,
                      size_t nnodes)
{
    memset(alloc, 0, nnodes * sizeof(*alloc));
    for (uint32_t s = 0; s < job->servers; s++)
        res_add(&alloc[server_node[s]], &job->per_server);
    for (uint32_t w = 0; w < job->workers; w++)
        res_add(&alloc[worker_node[w]], &job->per_worker);
}

static int cmp_end(const void *a, const void *b)
{
    const sched_prun *x = *(const sched_prun *const *)a;
    const sched_prun *y = *(const sched_prun *const *)b;

    return (x->end > y->end) - (x->end < y->end);
}

/* The head's reservation: after_head[i] = what node i will have free at
 * the start once the head took its share; *start as in sched_preserve. */
static flps_err reserve_head(const sched_pnode *nodes, size_t nnodes,
                             const sched_prun *running, size_t nrunning,
                             const sched_pjob *head, const sched_res *free_now,
                             double now, place_tmp *t, sched_res *after_head,
                             double *start)
{
    const sched_prun **order = NULL;
    size_t nlimited = 0;

    *start = 0;
    order = flps_calloc(nrunning ? nrunning : 1, sizeof(*order));
    if (order == NULL)
        return FLPS_ENOMEM;
    for (size_t r = 0; r < nrunning; r++)
        if (running[r].end > 0)
            order[nlimited++] = &running[r];
    qsort(order, nlimited, sizeof(*order), cmp_end);
    memcpy(after_head, free_now, nnodes * sizeof(*after_head));
    for (size_t k = 0; k < nlimited; k++) {
        for (size_t i = 0; i < nnodes; i++)
            if (nodes[i].ready)
                res_add(&after_head[i], &order[k]->held[i]);
        /* Several jobs ending at the same time free their share together. */
        if (k + 1 < nlimited && order[k + 1]->end == order[k]->end)
            continue;
        if (place_on(nodes, after_head, nnodes, head, t->srv, t->wrk,
                     t->scratch, t->nsrv)) {
            *start = order[k]->end > now ? order[k]->end : now;
            flps_free(order);
            return FLPS_OK;
        }
    }
    flps_free(order);
    /* Jobs without a time_limit hold what the head needs: reserve it as
     * if everything had ended, and allow backfill only around it. */
    for (size_t i = 0; i < nnodes; i++)
        after_head[i] = nodes[i].ready ? nodes[i].cap : (sched_res){0, 0, 0};
    if (!place_on(nodes, after_head, nnodes, head, t->srv, t->wrk, t->scratch,
                  t->nsrv))
        memset(after_head, 0, nnodes * sizeof(*after_head));
    return FLPS_OK;
}

flps_err sched_place_queue(const sched_pnode *nodes, size_t nnodes,
                           const sched_prun *running, size_t nrunning,
                           const sched_pjob *queue, size_t nqueue, double now,
                           sched_pdecision *out, sched_preserve *reserve)
{
    sched_res *free_now = NULL, *after_head = NULL, *rem = NULL;
    sched_res *alloc = NULL, *full = NULL;
    uint32_t maxs = 0, maxw = 0;
    sched_preserve res = {0, 0, 0};
    place_tmp t;
    flps_err rc;

    if ((nodes == NULL && nnodes > 0) || (running == NULL && nrunning > 0) ||
        (queue == NULL && nqueue > 0) || (out == NULL && nqueue > 0))
        return FLPS_EINVAL;
    for (size_t j = 0; j < nqueue; j++) {
        if (queue[j].servers > maxs)
            maxs = queue[j].servers;
        if (queue[j].workers > maxw)
            maxw = queue[j].workers;
    }
    rc = tmp_init(&t, nnodes, maxs, maxw);
    if (rc != FLPS_OK)
        goto out;
    free_now = flps_calloc(nnodes ? nnodes : 1, sizeof(*free_now));
    after_head = flps_calloc(nnodes ? nnodes : 1, sizeof(*after_head));
    rem = flps_calloc(nnodes ? nnodes : 1, sizeof(*rem));
    alloc = flps_calloc(nnodes ? nnodes : 1, sizeof(*alloc));
    full = flps_calloc(nnodes ? nnodes : 1, sizeof(*full));
    if (!free_now || !after_head || !rem || !alloc || !full) {
        rc = FLPS_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nnodes; i++)
        free_now[i] = node_free(&nodes[i]);

    for (size_t j = 0; j < nqueue; j++) {
        const sched_pjob *job = &queue[j];
        sched_pdecision *d = &out[j];

        d->how = SCHED_PLACE_NO;
        if (!res.have) {
            if (place_on(nodes, free_now, nnodes, job, t.srv, t.wrk, t.scratch,
                         t.nsrv)) {
                memcpy(d->server_node, t.srv, job->servers * sizeof(*t.srv));
                memcpy(d->worker_node, t.wrk, job->workers * sizeof(*t.wrk));
                d->how = SCHED_PLACE_IN_ORDER;
                continue;
            }
            /* A job the READY nodes could never hold must not block the
             * queue while its nodes are away. */
            for (size_t i = 0; i < nnodes; i++)
                full[i] = nodes[i].ready ? nodes[i].cap : (sched_res){0, 0, 0};
            if (!place_on(nodes, full, nnodes, job, t.srv, t.wrk, t.scratch,
                          t.nsrv))
                continue;
            rc = reserve_head(nodes, nnodes, running, nrunning, job, free_now,
                              now, &t, after_head, &res.start);
            if (rc != FLPS_OK)
                goto out;
            res.have = 1;
            res.job = j;
            continue;
        }
        /* Backfill: (a) ends before the head starts, on what is free now. */
        if (job->time_limit > 0 && res.start > 0 &&
            now + job->time_limit <= res.start) {
            if (place_on(nodes, free_now, nnodes, job, t.srv, t.wrk, t.scratch,
                         t.nsrv)) {
                memcpy(d->server_node, t.srv, job->servers * sizeof(*t.srv));
                memcpy(d->worker_node, t.wrk, job->workers * sizeof(*t.wrk));
                d->how = SCHED_PLACE_BACKFILL;
            }
            continue;
        }
        /* (b) into what remains beside the head's reservation. */
        for (size_t i = 0; i < nnodes; i++) {
            rem[i] = free_now[i];
            res_min(&rem[i], &after_head[i]);
        }
        if (!place_on(nodes, rem, nnodes, job, t.srv, t.wrk, t.scratch, t.nsrv))
            continue;
        memcpy(d->server_node, t.srv, job->servers * sizeof(*t.srv));
        memcpy(d->worker_node, t.wrk, job->workers * sizeof(*t.wrk));
        d->how = SCHED_PLACE_BACKFILL;
        job_alloc(job, t.srv, t.wrk, alloc, nnodes);
        for (size_t i = 0; i < nnodes; i++) {
            res_sub(&free_now[i], &alloc[i]);
            res_sub(&after_head[i], &alloc[i]);
        }
    }
    if (reserve != NULL)
        *reserve = res;
out:
    flps_free(free_now);
    flps_free(after_head);
    flps_free(rem);
    flps_free(alloc);
    flps_free(full);
    tmp_fini(&t);
    return rc;
}
