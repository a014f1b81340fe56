/* Exact maximum-weight matching in a general graph (Edmonds' blossom
 * algorithm in its primal-dual form, O(n^3) on a dense weight matrix): the
 * matching step of SAPS peer selection (worker/saps_peers.h). */
#ifndef FLPS_WORKER_SAPS_MATCH_H
#define FLPS_WORKER_SAPS_MATCH_H

#include <stdint.h>

#include "common/err.h"

/* The most vertices a workspace takes (the ids of vertices and blossoms
 * are kept in 16 bits). */
#define SAPS_MATCH_MAX_VERTICES 1024u

/* The largest edge weight accepted: the dual variables stay below four
 * times it, far inside int64_t. */
#define SAPS_MATCH_MAX_WEIGHT (INT64_C(1) << 52)

/* A workspace for graphs of up to max_n vertices: about 4·(2·max_n)^2
 * bytes plus 6·max_n^2, allocated once so a solve allocates nothing. */
typedef struct saps_match saps_match;

/* Errors: FLPS_EINVAL (max_n 0 or above SAPS_MATCH_MAX_VERTICES, out
 * NULL), FLPS_ENOMEM. *out is written only on FLPS_OK; caller owns it. */
flps_err saps_match_create(uint32_t max_n, saps_match **out);

/* Frees m; NULL does nothing. */
void saps_match_destroy(saps_match *m);

/* A matching of largest total weight of the graph on vertices 0..n-1
 * whose edge {i, j} has weight w[i*n + j] when that is > 0 (<= 0: no
 * edge; the diagonal is ignored). w must be symmetric. mate[i] = the
 * vertex matched to i, or -1. Not necessarily of largest cardinality:
 * give every edge a large constant bonus for that. The result is a pure
 * function of (n, w): ties between optimal matchings are broken the same
 * way on every machine. w is borrowed for the call.
 * Errors: FLPS_EINVAL (n above the workspace's max_n, w or mate NULL, w
 * not symmetric, a weight above SAPS_MATCH_MAX_WEIGHT); mate is then
 * untouched. */
flps_err saps_match_solve(saps_match *m, uint32_t n, const int64_t *w,
                          int32_t *mate);

#endif
