/* What a saps job's workers said in their done events (services/event.h),
 * folded as flrun's and flsched's summaries report it: the exchanges and
 * bytes summed, the matchings' digests held against each other, the
 * workers some event names dead, the coordinator's consensus and its
 * bandwidth matrix. One fold for both launchers. Not thread-safe. */
#ifndef FLPS_SERVICES_SAPSFOLD_H
#define FLPS_SERVICES_SAPSFOLD_H

#include <stddef.h>
#include <stdint.h>

#include "services/event.h"

typedef struct sapsfold {
    uint64_t exchanges, skipped, idle, slow, exchange_bytes, probe_bytes;
    double threshold, accuracy, distance;
    uint64_t averaged;
    int have_threshold;
    int have_consensus;          /* the coordinator's done event came */
    int have_consensus_accuracy; /* and evaluated the average */
    uint32_t said;               /* done events with a matching digest */
    char digest[24];             /* the first one */
    int digest_differs;
    unsigned char *dead; /* per worker: some done event names it dead;
                            owned, NULL before the first fold */
    uint64_t *bandwidth; /* the coordinator's matrix, bytes/s, workers x
                            workers; owned, NULL until one came */
} sapsfold;

/* Fold worker done event d of a job of workers workers into f (zeroed
 * memory to begin with). An event without the saps fields (no
 * exchanges) changes nothing. Out of memory, the dead workers or the
 * matrix are left out. */
void sapsfold_add(sapsfold *f, const event_done *d, uint32_t workers);

/* Free what f owns; f is zeroed. */
void sapsfold_fini(sapsfold *f);

#endif
