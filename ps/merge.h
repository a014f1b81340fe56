/* The sum of sparse contributions whose indices are already ascending (a
 * validated push is): a P-way merge that yields the union of the indices
 * in ascending order without sorting it and without a dense accumulator,
 * each index's sum taken over the contributions in their given (rank)
 * order. */
#ifndef FLPS_PS_MERGE_H
#define FLPS_PS_MERGE_H

#include <stdint.h>

#include "common/err.h"
#include "proto/msg.h"

/* The most contributions one merge takes (a job's largest worker count). */
#define PS_MERGE_MAX_SRC 65536u

typedef struct ps_merge ps_merge;

/* A merger for up to max_src contributions (1..PS_MERGE_MAX_SRC); its
 * scratch is sized once here, so a merge allocates nothing.
 * Errors: FLPS_EINVAL, FLPS_ENOMEM. Caller owns *out. */
flps_err ps_merge_create(uint32_t max_src, ps_merge **out);

/* ps_merge_destroy(NULL) does nothing. */
void ps_merge_destroy(ps_merge *m);

/* Merge src[0..nsrc) (nsrc <= max_src): each src[r].idx holds src[r].n
 * strictly ascending indices, src[r].val their values (what
 * proto_msg_decode guarantees of a sparse message). Writes the union of
 * the indices ascending to out_idx and each one's sum to out_sum, and
 * returns how many there are. A sum is 0.0f + v_a + v_b + ... over the
 * contributions holding that index in increasing r, the same operations in
 * the same order as a scatter-add of src[0], then src[1], ... into a
 * zeroed dense accumulator, so the results are bit-identical to one.
 * out_idx and out_sum must each hold the sum of the src[r].n (or the size
 * of the union, if the caller knows it). Not thread-safe: one merge at a
 * time per ps_merge. */
uint32_t ps_merge_sum(ps_merge *m, const proto_msg *src, uint32_t nsrc,
                      uint32_t *out_idx, float *out_sum);

#endif
