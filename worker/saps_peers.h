/* SAPS-PSGD peer selection: which worker exchanges its model with which in
 * each round of decentralized training. Every worker computes the same
 * matching alone, from the same inputs (the bandwidth matrix, the seed,
 * the round and the matchings of the rounds before), so no coordinator
 * sits in the per-round loop. The rules are in docs/algorithms.md,
 * section 8.
 *
 * Units: bandwidth in bytes per second. The link i-j has the bandwidth
 * min(bw[i][j], bw[j][i]): an exchange sends both ways and waits for the
 * slower direction. Every pair of workers can reach each other; 0 is a
 * valid (the slowest) measurement.
 *
 * Not thread-safe: one saps_peers per thread (each worker holds its own;
 * they agree because they are computed alike, not because they share). */
#ifndef FLPS_WORKER_SAPS_PEERS_H
#define FLPS_WORKER_SAPS_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define SAPS_MIN_WORKERS 2u
#define SAPS_MAX_WORKERS 256u
/* mate[i] of a worker without a peer in the round (dead, or left over). */
#define SAPS_NO_PEER UINT32_MAX
/* `bandwidth_threshold: auto` splits the links at their widest gap only
 * when it is at least this ratio (see saps_threshold_auto). */
#define SAPS_AUTO_MIN_GAP 2.0

typedef enum saps_select {
    /* The paper's rule: fast links (bandwidth > threshold) first, random
     * among them, connectivity forced within every window of rounds. */
    SAPS_SELECT_ADAPTIVE = 0,
    /* A uniformly random perfect matching of the live workers each round,
     * bandwidth ignored. */
    SAPS_SELECT_RANDOM,
    /* Ring pairs: even rounds (0,1),(2,3),...; odd rounds (1,2),(3,4),...
     * and (n-1,0), over the live workers in rank order. */
    SAPS_SELECT_RING,
} saps_select;

/* "adaptive", "random", "ring" -> *out. Errors: FLPS_EINVAL (anything
 * else, with errbuf naming the choices); *out is written only on FLPS_OK. */
flps_err saps_select_parse(const char *s, saps_select *out, char *errbuf,
                           size_t errlen);

/* The name saps_select_parse takes; "?" for a value out of range. */
const char *saps_select_name(saps_select s);

typedef struct saps_cfg {
    uint32_t workers;   /* n, SAPS_MIN_WORKERS..SAPS_MAX_WORKERS */
    saps_select select; /* peer_selection */
    double threshold;   /* bandwidth_threshold, bytes/s, finite, >= 0: a
                           link is fast when its bandwidth is above it */
    uint32_t window;    /* connectivity_window T, rounds, >= 2 */
    uint64_t seed;      /* the job's shared seed */
} saps_cfg;

/* What a round's matching is made of (for metrics and the summary). */
typedef struct saps_round_info {
    uint32_t pairs;      /* exchanging pairs */
    uint32_t slow_pairs; /* of them, over links at or below the threshold */
    uint32_t idle;       /* live workers without a peer (0, or 1 when the
                            live count is odd) */
    uint32_t forced;     /* links the connectivity rule put in (adaptive
                            only; 0 in an unforced round) */
    double min_bw;       /* the slowest pair's link bandwidth; 0 when no
                            pair */
} saps_round_info;

typedef struct saps_peers saps_peers;

/* The link bandwidth of i-j from a measured matrix bw (n*n, row-major):
 * min(bw[i*n+j], bw[j*n+i]). The caller checks i, j < n. */
double saps_link_bandwidth(const double *bw, uint32_t n, uint32_t i,
                           uint32_t j);

/* The q-quantile of the n(n-1)/2 link bandwidths (i < j, as
 * saps_link_bandwidth gives them): the sorted value at index
 * floor(q * (m - 1)) of m, a measured value, no interpolation; with "fast
 * = above the threshold", at most a share 1 - q of the links is fast.
 * Errors: FLPS_EINVAL (n out of range, bw or out NULL, an entry NaN,
 * infinite or negative, q outside [0, 1]), FLPS_ENOMEM. *out is written
 * only on FLPS_OK. */
flps_err saps_threshold_quantile(const double *bw, uint32_t n, double q,
                                 double *out, char *errbuf, size_t errlen);

/* The `auto` threshold: the link bandwidths sorted, the widest gap
 * between neighbours as a ratio (hi / lo); when it is at least
 * SAPS_AUTO_MIN_GAP, the threshold is the geometric mean of its two ends
 * (every link above the gap fast, every one below slow; a gap from 0 puts
 * the threshold at half its upper end); otherwise the network counts as
 * even and the threshold is half the slowest link, so every link is fast.
 * Not a fixed quantile: the share of fast links depends on the network
 * (a quarter when half the hosts are slow, a half when half the links
 * are, all of them on an even network), and a fixed quantile lands inside
 * one of the groups, where measurement noise decides (docs/algorithms.md).
 * Errors as for saps_threshold_quantile. */
flps_err saps_threshold_auto(const double *bw, uint32_t n, double *out,
                             char *errbuf, size_t errlen);

/* A peer selector for cfg and the measured matrix bw (n*n bytes/s,
 * row-major; the diagonal is ignored; copied). Starts at round 0, all
 * workers alive. Errors: FLPS_EINVAL with errbuf saying which (workers out
 * of range, threshold NaN, infinite or negative, window < 2, select
 * unknown, bw NULL or an entry NaN, infinite or negative, out NULL),
 * FLPS_ENOMEM. Caller owns *out (saps_peers_destroy), written only on
 * FLPS_OK. About 3 MB for 256 workers, 50 KB for 32. */
flps_err saps_peers_create(const saps_cfg *cfg, const double *bw,
                           saps_peers **out, char *errbuf, size_t errlen);

/* Frees p; NULL does nothing. */
void saps_peers_destroy(saps_peers *p);

/* A re-measured matrix and threshold (bytes/s; recompute an `auto` one
 * with saps_threshold_auto), in force from the next round computed.
 * Every worker must call it between the same two rounds. Errors:
 * FLPS_EINVAL (as for create; nothing changes). */
flps_err saps_peers_set_bandwidth(saps_peers *p, const double *bw,
                                  double threshold, char *errbuf,
                                  size_t errlen);

/* Worker w is dead from round `from` on: no matching of that round or
 * later includes it. Marking a dead worker again keeps the earlier round.
 * Every worker must mark the same death from the same round. Errors:
 * FLPS_EINVAL (w out of range), FLPS_ESTATE (round `from` is already
 * computed: saps_peers_next_round() > from). */
flps_err saps_peers_set_dead(saps_peers *p, uint32_t w, uint64_t from,
                             char *errbuf, size_t errlen);

/* Whether w takes part in round r (false for w out of range). */
bool saps_peers_is_alive(const saps_peers *p, uint32_t w, uint64_t r);

/* Round r's matching: mate[i] = i's peer, or SAPS_NO_PEER; mate has n
 * entries. info (may be NULL) says what the matching is made of. Rounds
 * are computed in order: r >= saps_peers_next_round() computes every
 * round up to r (a fresh selector asked for round r replays rounds
 * 0..r-1, which is how a restarted worker catches up when the matrix and
 * the deaths are the ones of the original run); the last window - 1
 * rounds stay readable. The result depends only on the inputs named at
 * the top of this file, never on which rounds were asked for before.
 * Allocates nothing: about 3 ms of CPU for 256 workers, 8 ms in a
 * forced round. Errors: FLPS_EINVAL (mate NULL), FLPS_ESTATE (r older than
 * the rounds kept, or a broken invariant of the matching); mate and info
 * are untouched then. */
flps_err saps_peers_round(saps_peers *p, uint64_t r, uint32_t *mate,
                          saps_round_info *info, char *errbuf, size_t errlen);

/* The next round saps_peers_round would compute. */
uint64_t saps_peers_next_round(const saps_peers *p);

/* The selector's state as bytes, for a checkpoint or for a worker that
 * joins late: the next round and the kept rounds' matchings (the window),
 * little-endian. Restored with saps_peers_state_load into a selector
 * created with the same cfg, it continues exactly as this one would; the
 * matrix and the deaths are inputs the caller restores itself. */
size_t saps_peers_state_size(const saps_peers *p);

/* Writes saps_peers_state_size(p) bytes. Errors: FLPS_EINVAL (buf NULL
 * or len too small). */
flps_err saps_peers_state_save(const saps_peers *p, uint8_t *buf, size_t len);

/* Errors: FLPS_EINVAL (buf NULL, wrong size, version, worker count or
 * window, a mate out of range or not symmetric); p is unchanged then. */
flps_err saps_peers_state_load(saps_peers *p, const uint8_t *buf, size_t len,
                               char *errbuf, size_t errlen);

/* ---- What else every worker derives alike ---- */

/* The seed of round r's random-k mask of tensor t for the job's seed: a
 * counter-based hash, so both workers of a pair (and every other worker)
 * draw the same mask (codec_randk_indices) without sending an index. */
uint64_t saps_mask_seed(uint64_t seed, uint64_t r, uint32_t tensor);

/* The bandwidth probe's schedule: rounds of disjoint pairs that together
 * pair every two of m workers exactly once (the circle method): m - 1
 * rounds for an even m, m for an odd one (each worker idle in one of
 * them); 0 for m < 2. */
uint32_t saps_probe_rounds(uint32_t m);

/* Probe round k's pairs of slots 0..m-1: mate[i] = i's partner, or
 * SAPS_NO_PEER when i is idle (and for every slot when k is not below
 * saps_probe_rounds(m)). mate has m entries. */
void saps_probe_pairs(uint32_t m, uint32_t k, uint32_t *mate);

#endif
