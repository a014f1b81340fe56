/* Joining, the bandwidth probe and the agreement on who is alive, for
 * decentralized training (peer_sync.h). */
#include "worker/peer_sync.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "worker/saps_peers.h"

/* The probe's steps with one partner, in a message's step field: probe
 * round k's step s is k * PROBE_STEPS + s. */
enum { PROBE_HELLO, PROBE_RTT, PROBE_DATA, PROBE_STEPS };

/* The round of the joining hellos. */
#define JOIN_ROUND 0

flps_err peer_sync_join(peer_net *net, uint32_t rank, uint32_t workers,
                        double deadline, uint8_t *present, char *errbuf,
                        size_t errlen)
{
    flps_err rc = FLPS_OK;
    uint32_t missing = 0, first = 0;

    for (uint32_t j = 0; present != NULL && j < workers; j++)
        present[j] = j == rank;

    for (uint32_t j = 0; j < workers && rc == FLPS_OK; j++)
        if (j != rank)
            rc = peer_net_send(net, j, PEER_HELLO, JOIN_ROUND, 0, NULL, 0);
    if (rc != FLPS_OK)
        return flps_errbuf_set(errbuf, errlen, rc,
                               "cannot greet the other workers: %s",
                               flps_strerror(rc));
    for (uint32_t j = 0; j < workers; j++) {
        peer_msg *m = NULL;

        if (j == rank)
            continue;
        rc = peer_net_take(net, PEER_HELLO, JOIN_ROUND, 0, j, deadline, &m);
        if (rc == FLPS_ETIMEDOUT) {
            if (missing++ == 0)
                first = j;
            continue;
        }
        if (rc != FLPS_OK)
            return flps_errbuf_set(errbuf, errlen, rc,
                                   "waiting for the other workers: %s",
                                   flps_strerror(rc));
        peer_msg_free(m);
        if (present != NULL)
            present[j] = 1;
    }
    if (missing > 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ETIMEDOUT,
                               "%u of the job's %u other workers never "
                               "answered (worker %u among them): is every "
                               "worker started, and can each reach the "
                               "others' endpoints?",
                               missing, workers - 1, first);
    return FLPS_OK;
}

/* Send one probe message of step `step` to p and take p's of the same
 * step within timeout_s. 1 when it came. */
static int probe_step(peer_net *net, uint32_t p, peer_kind kind, uint64_t round,
                      uint64_t step, const float *val, size_t n,
                      double timeout_s, flps_err *rc)
{
    peer_msg *m = NULL;

    *rc = peer_net_send(net, p, kind, round, step, val, n);
    if (*rc != FLPS_OK)
        return 0;
    *rc =
        peer_net_take(net, kind, round, step, p, flps_mono_s() + timeout_s, &m);
    if (*rc == FLPS_ETIMEDOUT) {
        *rc = FLPS_OK;
        return 0;
    }
    peer_msg_free(m);
    return *rc == FLPS_OK;
}

/* probe_step of kind, then an ACK each way for the same step: *secs is
 * the time from sending until the partner's ACK came. 1 when it did. */
static int probe_timed(peer_net *net, uint32_t p, peer_kind kind,
                       uint64_t round, uint64_t step, const float *val,
                       size_t n, double timeout_s, double *secs, flps_err *rc)
{
    const double t0 = flps_mono_s();

    if (!probe_step(net, p, kind, round, step, val, n, timeout_s, rc) ||
        !probe_step(net, p, PEER_ACK, round, step, NULL, 0, timeout_s, rc))
        return 0;
    *secs = flps_mono_s() - t0;
    return 1;
}

/* The bandwidth to partner p in bytes per second (0 when it does not
 * answer): a hello each way; a timed round trip (a PING answered with an
 * ACK); then data each way at once, each side answering the other's with
 * an ACK, timed from sending until the partner's ACK, less the round
 * trip (at most half of it). */
static flps_err probe_partner(peer_net *net, uint32_t p, uint64_t round,
                              uint32_t k, const float *data, size_t n,
                              double timeout_s, double *bw)
{
    const uint64_t base = (uint64_t)k * PROBE_STEPS;
    double rtt, took;
    flps_err rc;

    *bw = 0;
    if (!probe_step(net, p, PEER_PING, round, base + PROBE_HELLO, NULL, 0,
                    timeout_s, &rc))
        return rc;
    /* The round trip: our PING out, theirs in and answered, our ACK in. */
    if (!probe_timed(net, p, PEER_PING, round, base + PROBE_RTT, NULL, 0,
                     timeout_s, &rtt, &rc))
        return rc;
    /* The data each way. */
    if (!probe_timed(net, p, PEER_DATA, round, base + PROBE_DATA, data, n,
                     timeout_s, &took, &rc))
        return rc;
    /* Less the round trip, but at most half the transfer's time: on a
     * loaded machine one round trip can be a scheduling delay of
     * milliseconds, longer than the data took on a fast link, and the
     * link would look arbitrarily fast (bench/cluster saw 10 GB/s on a
     * 1 Gbit/s link, which moved the auto threshold above every link). */
    took = took - rtt > took / 2 ? took - rtt : took / 2;
    /* A transfer faster than the clock can tell is a fast link. */
    if (took < 1e-6)
        took = 1e-6;
    *bw = (double)(n * sizeof(float)) / took;
    return FLPS_OK;
}

flps_err peer_sync_probe(peer_net *net, uint32_t rank, uint32_t workers,
                         const uint8_t *alive, uint64_t round, size_t bytes,
                         double timeout_s, double *row)
{
    const size_t n = bytes / sizeof(float) > 0 ? bytes / sizeof(float) : 1;
    uint32_t *slot = flps_calloc(workers, sizeof(*slot));
    uint32_t *mate = flps_calloc(workers, sizeof(*mate));
    float *data = flps_calloc(n, sizeof(float));
    uint32_t m = 0, me = 0;
    flps_err rc = FLPS_ENOMEM;

    if (slot == NULL || mate == NULL || data == NULL)
        goto out;
    for (uint32_t j = 0; j < workers; j++) {
        row[j] = 0;
        if (!alive[j])
            continue;
        if (j == rank)
            me = m;
        slot[m++] = j;
    }
    rc = FLPS_OK;
    for (uint32_t k = 0; k < saps_probe_rounds(m) && rc == FLPS_OK; k++) {
        saps_probe_pairs(m, k, mate);
        if (mate[me] == SAPS_NO_PEER)
            continue;
        rc = probe_partner(net, slot[mate[me]], round, k, data, n, timeout_s,
                           &row[slot[mate[me]]]);
    }
    /* A partner's late answers are not waited for again. */
    peer_net_forget(net, PEER_PING, round + 1);
    peer_net_forget(net, PEER_DATA, round + 1);
    peer_net_forget(net, PEER_ACK, round + 1);
out:
    flps_free(slot);
    flps_free(mate);
    flps_free(data);
    return rc;
}

/* What a worker knows in the agreement: msg[j] = 1 for every worker heard
 * from (directly or through another), then (with rows) their rows. */
typedef struct flood {
    uint32_t n;
    int with_rows;
    float *msg; /* n, + n * n with rows */
    size_t len;
} flood;

/* Merge a received message (its length checked) into f. */
static void flood_merge(flood *f, const peer_msg *m)
{
    for (uint32_t k = 0; k < f->n; k++) {
        if (m->val[k] == 0 || f->msg[k] != 0)
            continue;
        f->msg[k] = 1;
        if (f->with_rows)
            memcpy(f->msg + f->n + (size_t)k * f->n,
                   m->val + f->n + (size_t)k * f->n, f->n * sizeof(float));
    }
}

/* Step `step`: send what f holds to every worker in `to`, then merge what
 * those in `from` send within timeout_s. *heard_me counts the messages
 * that had this worker, *heard those received. */
static flps_err flood_step(peer_net *net, uint32_t rank, uint64_t round,
                           uint64_t step, const uint8_t *to,
                           const uint8_t *from, double timeout_s, flood *f,
                           uint32_t *heard, uint32_t *heard_me)
{
    double deadline;
    flps_err rc = FLPS_OK;

    for (uint32_t j = 0; j < f->n && rc == FLPS_OK; j++)
        if (j != rank && to[j])
            rc = peer_net_send(net, j, PEER_FLOOD, round, step, f->msg, f->len);
    deadline = flps_mono_s() + timeout_s;
    for (uint32_t j = 0; j < f->n && rc == FLPS_OK; j++) {
        peer_msg *m = NULL;

        if (j == rank || !from[j])
            continue;
        rc = peer_net_take(net, PEER_FLOOD, round, step, j, deadline, &m);
        if (rc == FLPS_ETIMEDOUT) {
            rc = FLPS_OK;
            continue;
        }
        if (rc != FLPS_OK)
            break;
        /* A message of another length is another agreement's; a member
         * cannot send one but a broken one: ignore it. */
        if (m->n == f->len) {
            (*heard)++;
            *heard_me += m->val[rank] != 0;
            flood_merge(f, m);
        }
        peer_msg_free(m);
    }
    return rc;
}

flps_err peer_sync_agree(peer_net *net, uint32_t rank, uint32_t workers,
                         uint64_t round, double timeout_s, uint8_t *alive,
                         double *rows, char *errbuf, size_t errlen)
{
    flood f = {.n = workers, .with_rows = rows != NULL};
    uint8_t *after1 = flps_calloc(workers, 1);
    uint32_t heard = 0, heard_me = 0, ignored = 0;
    flps_err rc = FLPS_ENOMEM;

    f.len = workers + (f.with_rows ? (size_t)workers * workers : 0);
    f.msg = flps_calloc(f.len, sizeof(float));
    if (after1 == NULL || f.msg == NULL)
        goto out;
    f.msg[rank] = 1;
    if (f.with_rows)
        for (uint32_t j = 0; j < workers; j++)
            f.msg[workers + (size_t)rank * workers + j] =
                (float)rows[(size_t)rank * workers + j];
    /* Step 1: each worker's own news; step 2: what each heard, so a
     * worker that died while sending step 1 is known to all or none. */
    rc = flood_step(net, rank, round, 1, alive, alive, timeout_s, &f, &ignored,
                    &ignored);
    for (uint32_t j = 0; j < workers && rc == FLPS_OK; j++)
        after1[j] = f.msg[j] != 0;
    if (rc == FLPS_OK)
        rc = flood_step(net, rank, round, 2, alive, after1, timeout_s, &f,
                        &heard, &heard_me);
    if (rc != FLPS_OK)
        goto out;
    if (heard > 0 && heard_me == 0) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ESTATE,
                             "the other workers went on without this one at "
                             "round %llu: it reached their membership check "
                             "more than %.3g s after them",
                             (unsigned long long)round, timeout_s);
        goto out;
    }
    for (uint32_t j = 0; j < workers; j++) {
        alive[j] = f.msg[j] != 0;
        for (uint32_t k = 0; f.with_rows && k < workers; k++)
            rows[(size_t)j * workers + k] =
                alive[j] ? (double)f.msg[workers + (size_t)j * workers + k]
                         : 0.0;
    }
    peer_net_forget(net, PEER_FLOOD, round + 1);
out:
    flps_free(after1);
    flps_free(f.msg);
    return rc;
}
