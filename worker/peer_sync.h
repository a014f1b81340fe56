/* What the workers of a decentralized job agree on outside the rounds'
 * exchanges, over worker/peer_net.h: that every worker has joined, the
 * bandwidth matrix (each worker measures its row with a short probe of
 * its peers, in rounds of disjoint pairs), and who is still alive. The
 * agreement is flooding (FloodSet): in each of two steps every worker
 * sends all it knows to every other and merges what it receives within
 * the deadline; with at most one worker dying during the agreement and
 * every living worker arriving within the deadline of the others, all of
 * them end with the same set of workers heard from (and the same rows),
 * which is the set alive from then on. docs/algorithms.md, section 8,
 * gives the argument and its limits.
 *
 * Every call blocks up to the deadlines named; none is thread-safe (the
 * peer_net's thread). */
#ifndef FLPS_WORKER_PEER_SYNC_H
#define FLPS_WORKER_PEER_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/peer_net.h"

/* Send a hello to every other worker and wait until each has sent its
 * own, or the monotonic clock passes deadline. present (workers entries,
 * may be NULL) gets 1 for this worker and each whose hello came, 0 for
 * the others. Errors: FLPS_ETIMEDOUT (errbuf names the workers missing;
 * present is set), the transport's. */
flps_err peer_sync_join(peer_net *net, uint32_t rank, uint32_t workers,
                        double deadline, uint8_t *present, char *errbuf,
                        size_t errlen);

/* This worker's row of the bandwidth matrix (row[j], bytes per second to
 * worker j; row[rank] and the rows' dead entries 0), measured among the
 * workers with alive[j] set, which must be the same set on every one of
 * them: round `round`'s probe (its messages are tagged with it), in
 * saps_probe_rounds rounds of disjoint pairs. With each partner: a hello
 * each way, a small round trip timed, then `bytes` each way at once, the
 * time until the partner says it has them, less the round trip. A
 * partner that does not answer within timeout_s seconds of a step gets
 * 0. *seconds (may be NULL) gets the time the probe took. Errors: the
 * transport's, FLPS_ENOMEM. */
flps_err peer_sync_probe(peer_net *net, uint32_t rank, uint32_t workers,
                         const uint8_t *alive, uint64_t round, size_t bytes,
                         double timeout_s, double *row);

/* The agreement of boundary `round`: alive[] holds on entry the workers
 * alive before it (this one among them) and on FLPS_OK those heard from,
 * the same on every worker that took part (see the top). With rows (not
 * NULL, workers * workers): rows[rank] holds this worker's row on entry;
 * on FLPS_OK every alive worker's row is filled in (a dead one's is 0).
 * Each step waits at most timeout_s seconds for the others. Errors:
 * FLPS_ESTATE when the others went on without this worker (it came after
 * their deadline: errbuf says so; it must stop), the transport's,
 * FLPS_ENOMEM; alive and rows are then unspecified. */
flps_err peer_sync_agree(peer_net *net, uint32_t rank, uint32_t workers,
                         uint64_t round, double timeout_s, uint8_t *alive,
                         double *rows, char *errbuf, size_t errlen);

#endif
