/* The fold of a saps job's done events, for flrun's and flsched's
 * summaries. */
#include "services/sapsfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fold_dead(sapsfold *f, const event_done *d, uint32_t workers)
{
    if (f->dead == NULL)
        f->dead = calloc(workers ? workers : 1, 1);
    for (size_t i = 0; f->dead != NULL && EVENT_HAS(d, done, dead_workers) &&
                       i < d->dead_workers.n;
         i++)
        if (d->dead_workers.v[i] < workers)
            f->dead[d->dead_workers.v[i]] = 1;
}

/* The coordinator's: a command: job's program (flps.saps) may not
 * evaluate the average model. */
static void fold_consensus(sapsfold *f, const event_done *d, uint32_t workers)
{
    size_t n = (size_t)workers * workers;

    if (EVENT_HAS(d, done, consensus_workers)) {
        f->have_consensus = 1;
        f->distance = d->consensus_distance;
        f->averaged = d->consensus_workers;
    }
    if (EVENT_HAS(d, done, consensus_accuracy)) {
        f->have_consensus_accuracy = 1;
        f->accuracy = d->consensus_accuracy;
    }
    if (EVENT_HAS(d, done, bandwidth) && n > 0 && d->bandwidth.n == n &&
        f->bandwidth == NULL) {
        f->bandwidth = malloc(n * sizeof(*f->bandwidth));
        if (f->bandwidth != NULL)
            memcpy(f->bandwidth, d->bandwidth.v, n * sizeof(*f->bandwidth));
    }
}

void sapsfold_add(sapsfold *f, const event_done *d, uint32_t workers)
{
    const char *dg =
        EVENT_HAS(d, done, matching_digest) ? d->matching_digest : NULL;

    if (!EVENT_HAS(d, done, exchanges))
        return;
    f->exchanges += d->exchanges;
    f->skipped += d->skipped_exchanges;
    f->idle += d->idle_rounds;
    f->slow += d->slow_exchanges;
    f->exchange_bytes += d->exchange_bytes;
    f->probe_bytes += d->probe_bytes;
    if (EVENT_HAS(d, done, bandwidth_threshold)) {
        f->threshold = d->bandwidth_threshold;
        f->have_threshold = 1;
    }
    if (dg != NULL && strlen(dg) == 16 &&
        strspn(dg, "0123456789abcdef") == 16) {
        if (f->said++ == 0)
            snprintf(f->digest, sizeof(f->digest), "%s", dg);
        else if (strcmp(dg, f->digest) != 0)
            f->digest_differs = 1;
    }
    fold_dead(f, d, workers);
    fold_consensus(f, d, workers);
}

void sapsfold_fini(sapsfold *f)
{
    free(f->dead);
    free(f->bandwidth);
    memset(f, 0, sizeof(*f));
}
