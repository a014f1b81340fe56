/* The calls that block on the shards: init (rank 0's initial model, then
 * a pull), pull, wait (for an iteration's updates; in async mode a pull of
 * what changed, and with bounded staleness the wait for the slowest
 * worker), wait_layer (one layer's updates, so the next forward pass
 * overlaps the later layers' replies), checkpoint, and the network
 * measurement of auto jobs. Each sends its requests (client_req.h) and
 * receives until they are answered (client_recv.h). Not thread-safe: the
 * caller's thread only (client_internal.h). */
#include "worker/client_internal.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "worker/client_energy.h"
#include "worker/client_metrics.h"
#include "worker/client_recv.h"
#include "worker/client_req.h"

/* Pull every part; with since, name the version the replica holds so an
 * async shard answers with only what changed after it. */
static flps_err send_pulls_since(flps_client *c, int since)
{
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        proto_msg m;
        flps_err rc;
        client_msg_base(c, &m, PROTO_OP_PULL, i, 0);
        if (since)
            m.version = c->parts[i].held_version;
        rc = creq_build(&c->parts[i].req, CREQ_PULL, c->parts[i].shard, &m,
                        NULL);
        if (rc == FLPS_OK)
            rc = creq_send(c, &c->parts[i].req);
        if (rc != FLPS_OK)
            return client_set_error(c, rc, "cannot pull part %u", i);
    }
    return client_recv_drain(c);
}

static flps_err send_pulls(flps_client *c)
{
    return send_pulls_since(c, 0);
}

flps_err flps_client_pull(flps_client *c)
{
    if (c->err != FLPS_OK)
        return c->err;
    return send_pulls(c);
}

/* What FLPS_PUSH_WINDOW_AUTO keeps in flight per shard: this long at the
 * rate measured, in whole pieces (at least one). A shard's S - 1
 * connections from other hosts share one link each way, and every worker
 * measures at once, so the rate is about what the layout gives each host.
 * Chosen on bench/cluster's emulated links (docs/benchmarks.md, "Flow
 * control of dense pushes"): one piece at 100 Mbit/s, where two
 * overflowed the 20 ms queue; four or more at 1 Gbit/s, where one left
 * the link idle between a piece and its update. Under the even map
 * (c->piece), whose pieces are a quarter of those: 1 ms, so one piece of
 * 4096 values at 100 Mbit/s, where two (or one of 8192) measured 4-9%
 * slower: the more waits in the shared queue, the later each update. */
#define WINDOW_LINK_S 0.002
#define WINDOW_LINK_EVEN_S 0.001

/* Size the window of dense pushes to the link (c->win_auto): measure it
 * with a few pulls (nothing else is outstanding after init), keep
 * WINDOW_LINK_S (WINDOW_LINK_EVEN_S) of it in flight per shard, at least one
 * piece, and no bound where that covers every piece a shard has. */
static flps_err size_window_to_link(flps_client *c)
{
    uint32_t piece = 1, most = 0, *count;
    double alpha, beta, fit, link_s;
    flps_err rc;

    count = flps_calloc(c->nshards, sizeof(*count));
    if (count == NULL)
        return client_set_error(c, FLPS_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        if (c->parts[i].numel > piece)
            piece = c->parts[i].numel;
        if (++count[c->parts[i].shard] > most)
            most = count[c->parts[i].shard];
    }
    flps_free(count);
    rc = flps_client_measure_network(c, &alpha, &beta);
    if (rc != FLPS_OK)
        return rc;
    link_s = c->piece > 0 ? WINDOW_LINK_EVEN_S : WINDOW_LINK_S;
    fit = link_s / beta / (4.0 * piece);
    c->win_limit = fit < 1 ? 1 : fit >= most ? 0 : (uint32_t)fit;
    if (c->win_limit == 0)
        log_info("push window: no bound (the link measured %.1f MB/s: "
                 "%.0f ms of it holds all %u pieces of a shard)",
                 1e-6 / beta, link_s * 1e3, most);
    else
        log_info("push window: %u piece%s of %u values per shard (the "
                 "link measured %.1f MB/s; %.0f ms of it in flight)",
                 c->win_limit, c->win_limit == 1 ? "" : "s", piece, 1e-6 / beta,
                 link_s * 1e3);
    return FLPS_OK;
}

flps_err flps_client_init(flps_client *c)
{
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (c->rank == 0) {
        for (uint32_t i = 0; i < c->pm.nparts; i++) {
            cpart *p = &c->parts[i];
            proto_buf *b = proto_buf_create((size_t)p->numel * 4);
            proto_msg m;
            if (b == NULL)
                return client_set_error(c, FLPS_ENOMEM, "out of memory");
            memcpy(proto_buf_data(b), c->tensors[p->tensor].data + p->offset,
                   (size_t)p->numel * 4);
            client_msg_base(c, &m, PROTO_OP_INIT, i, 0);
            m.codec = PROTO_CODEC_DENSE;
            m.n = p->numel;
            m.val = proto_buf_data(b);
            rc = creq_build(&p->req, CREQ_INIT, p->shard, &m, b);
            proto_buf_release(b);
            if (rc == FLPS_OK)
                rc = creq_send(c, &p->req);
            if (rc != FLPS_OK)
                return client_set_error(c, rc, "cannot send initial values");
        }
        if (client_recv_drain(c) != FLPS_OK)
            return c->err;
    }
    rc = send_pulls(c);
    if (rc == FLPS_OK && c->win_auto)
        rc = size_window_to_link(c);
    return rc;
}

flps_err flps_client_checkpoint(flps_client *c)
{
    if (c->err != FLPS_OK)
        return c->err;
    for (uint32_t s = 0; s < c->nshards; s++) {
        proto_msg m;
        flps_err rc;
        client_msg_base(c, &m, PROTO_OP_CHECKPOINT, 0, 0);
        rc = creq_build(&c->shard_req[s], CREQ_CHECKPOINT, s, &m, NULL);
        if (rc == FLPS_OK)
            rc = creq_send(c, &c->shard_req[s]);
        if (rc != FLPS_OK)
            return client_set_error(c, rc,
                                    "cannot ask shard %u for a checkpoint", s);
    }
    return client_recv_drain(c);
}

/* The slowest rank's next iteration over every part, as the last pulls
 * said. */
static uint64_t slowest_of(const flps_client *c)
{
    uint64_t lo = UINT64_MAX;

    for (uint32_t i = 0; i < c->pm.nparts; i++)
        if (c->parts[i].slowest < lo)
            lo = c->parts[i].slowest;
    return lo;
}

/* Bounded staleness: this worker starts iteration iter + 1 only once the
 * slowest rank has pushed every iteration below iter + 1 - staleness;
 * until then it pulls again (the model it will compute on gets fresher
 * too). Bounded by the request deadline: a rank that never comes is an
 * error naming how far behind it is. */
static flps_err wait_for_slowest(flps_client *c, uint64_t iter)
{
    const uint64_t next = iter + 1;
    double t0 = flps_mono_s();
    long pause_us = 500;
    flps_err rc;

    while (next > slowest_of(c) + c->staleness) {
        struct timespec ts;

        if (flps_mono_s() - t0 >= c->deadline_s)
            return client_set_error(
                c, FLPS_ETIMEDOUT,
                "ssp: waited %.0f s for the slowest worker, "
                "which is at iteration %llu, %llu behind this "
                "one (staleness %u)",
                c->deadline_s, (unsigned long long)slowest_of(c),
                (unsigned long long)(next - slowest_of(c)), c->staleness);
        ts.tv_sec = 0;
        ts.tv_nsec = pause_us * 1000L;
        nanosleep(&ts, NULL);
        if (pause_us < 20000)
            pause_us *= 2;
        rc = send_pulls_since(c, 1);
        if (rc != FLPS_OK)
            return rc;
    }
    c->stale_wait_s += flps_mono_s() - t0;
    return FLPS_OK;
}

flps_err flps_client_set_staleness(flps_client *c, uint32_t staleness)
{
    if (c == NULL)
        return FLPS_EINVAL;
    if (!c->async)
        return FLPS_ESTATE; /* not sticky: the client is unchanged */
    c->staleness = staleness;
    return FLPS_OK;
}

double flps_client_stale_wait_seconds(const flps_client *c)
{
    return c != NULL ? c->stale_wait_s : 0;
}

/* The first part of [first, last) pushed for an iteration other than
 * iter, or last when there is none: a wait for iter cannot serve it. */
static uint32_t pushed_for_another(const flps_client *c, uint32_t first,
                                   uint32_t last, uint64_t iter)
{
    for (uint32_t i = first; i < last; i++)
        if (c->parts[i].req.kind == CREQ_PUSH && c->parts[i].req.iter != iter)
            return i;
    return last;
}

static flps_err wait_all(flps_client *c, uint64_t iter)
{
    uint32_t other;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    other = pushed_for_another(c, 0, c->pm.nparts, iter);
    if (other < c->pm.nparts)
        return client_set_error(
            c, FLPS_ESTATE,
            "waiting for iteration %llu but part %u was pushed for "
            "iteration %llu",
            (unsigned long long)iter, other,
            (unsigned long long)c->parts[other].req.iter);
    rc = client_recv_drain(c);
    if (rc != FLPS_OK || !c->async)
        return rc;
    rc = send_pulls_since(c, 1);
    if (rc != FLPS_OK || c->staleness == UINT32_MAX)
        return rc;
    return wait_for_slowest(c, iter);
}

flps_err flps_client_wait(flps_client *c, uint64_t iter)
{
    double t0 = client_metrics_now();
    flps_err rc = wait_all(c, iter);

    client_metrics_wait_end(c, t0, iter, 1, rc);
    if (rc == FLPS_OK)
        client_energy_at(c, iter + 1);
    return rc;
}

static flps_err wait_layer(flps_client *c, uint32_t tensor, uint64_t iter)
{
    uint32_t first, last, other;
    flps_err rc = FLPS_OK;

    if (c->err != FLPS_OK)
        return c->err;
    if (c->async)
        return FLPS_ESTATE; /* not sticky: async waits pull the model */
    first = c->pm.first_part[tensor];
    last = client_tensor_end_part(c, tensor);
    other = pushed_for_another(c, first, last, iter);
    if (other < last)
        return client_set_error(
            c, FLPS_ESTATE,
            "waiting for layer %s of iteration %llu but part %u was pushed "
            "for iteration %llu",
            c->tensors[tensor].name, (unsigned long long)iter, other,
            (unsigned long long)c->parts[other].req.iter);
    /* Other layers' replies that come first are applied on the way. */
    while (rc == FLPS_OK && creq_parts_pending(c, first, last))
        rc = client_recv_once(c);
    return rc;
}

flps_err flps_client_wait_layer(flps_client *c, uint32_t tensor, uint64_t iter)
{
    double t0;
    flps_err rc;

    if (c == NULL || tensor >= c->ntensors)
        return FLPS_EINVAL;
    c->layer_order = 1;
    t0 = client_metrics_now();
    rc = wait_layer(c, tensor, iter);
    client_metrics_wait_end(c, t0, iter, 0, rc);
    return rc;
}

/* Send one PULL of part pi and wait for it; nothing else is outstanding. */
static flps_err pull_part(flps_client *c, uint32_t pi)
{
    proto_msg m;
    flps_err rc;

    client_msg_base(c, &m, PROTO_OP_PULL, pi, 0);
    rc = creq_build(&c->parts[pi].req, CREQ_PULL, c->parts[pi].shard, &m, NULL);
    if (rc == FLPS_OK)
        rc = creq_send(c, &c->parts[pi].req);
    if (rc != FLPS_OK)
        return client_set_error(c, rc, "cannot pull part %u", pi);
    return client_recv_drain(c);
}

flps_err flps_client_measure_network(flps_client *c, double *alpha,
                                     double *beta)
{
    double rtt = INFINITY, full = INFINITY, a, b, bytes = 0;
    uint32_t small = 0;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (alpha == NULL || beta == NULL)
        return FLPS_EINVAL;
    if (creq_any_pending(c))
        return FLPS_ESTATE;
    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        bytes += 4.0 * c->parts[i].numel;
        if (c->parts[i].numel < c->parts[small].numel)
            small = i;
    }
    /* Shortest of several: the first request may pay for connection
     * set-up and cold caches, later ones for a busy scheduler. */
    for (int k = 0; k < 5; k++) {
        double t0 = flps_mono_s();
        rc = pull_part(c, small);
        if (rc != FLPS_OK)
            return rc;
        rtt = fmin(rtt, flps_mono_s() - t0);
    }
    for (int k = 0; k < 3; k++) {
        double t0 = flps_mono_s();
        rc = send_pulls(c);
        if (rc != FLPS_OK)
            return rc;
        full = fmin(full, flps_mono_s() - t0);
    }
    /* A clock that did not move (or a loopback faster than its
     * resolution) must still give positive numbers. */
    a = rtt > 0 ? rtt / 2 : 1e-9;
    b = (full - 2 * a > 0 ? full - 2 * a : full) / bytes;
    if (!(b > 0))
        b = 1e-12;
    *alpha = a;
    *beta = b;
    return FLPS_OK;
}
