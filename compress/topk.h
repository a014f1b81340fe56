/* Exact top-k selection by magnitude, the kernel under every sparse codec
 * and the server side of gtopk. */
#ifndef FLPS_COMPRESS_TOPK_H
#define FLPS_COMPRESS_TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Select the k elements of a[0..n) with the largest |a[i]|; ties go to the
 * lower index, so the result is exactly the first k of a stable sort by
 * descending magnitude. Writes the k chosen indices to idx in ascending
 * index order. 0 <= k <= n; n < 2^32.
 * Errors: FLPS_EINVAL (k > n, n >= 2^32, NULL with n > 0),
 *         FLPS_ENONFINITE (a NaN or Inf in a; idx is then unspecified),
 *         FLPS_ENOMEM.
 * Thread-safe; allocates scratch memory internally (use topk_ctx for
 * repeated calls without allocation). */
flps_err topk_select(const float *a, size_t n, size_t k, uint32_t *idx);

/* Reusable scratch memory for repeated selections. Its buffers grow to the
 * largest call seen and are kept until topk_ctx_destroy, so a steady stream
 * of same-sized calls allocates nothing after the first.
 * Not thread-safe: one context per thread. */
typedef struct topk_ctx topk_ctx;

/* Create an empty context. Caller owns *out (topk_ctx_destroy).
 * Errors: FLPS_EINVAL (out NULL), FLPS_ENOMEM. */
flps_err topk_ctx_create(topk_ctx **out);

/* Free ctx and its buffers. NULL does nothing. */
void topk_ctx_destroy(topk_ctx *ctx);

/* topk_select with ctx's scratch memory; same contract and errors. */
flps_err topk_ctx_select(topk_ctx *ctx, const float *a, size_t n, size_t k,
                         uint32_t *idx);

/* Approximate selection, as Deep Gradient Compression does it: a threshold
 * from a seeded random sample of |a|, one filtering pass, and the indices
 * above the threshold. Writes between k - k/5 and k + k/5 indices (integer
 * division; k itself when k < 5) to idx in ascending order and their number
 * to *count; idx must hold k + k/5 entries. Every chosen |a[i]| is >= every
 * |a[j]| not chosen (a threshold set, ties at the threshold may split by
 * index). The result depends on seed only through the sample, and a call
 * with the same arguments gives the same result. When the sample misjudges
 * badly (count outside the band) it falls back to extra passes, so the
 * band always holds; *passes (if not NULL) tells how many passes over a
 * were made, 1 in the common case.
 * Errors: as topk_select, and FLPS_EINVAL when count is NULL. On error
 * *count and *passes are not written and idx is unspecified. */
flps_err topk_ctx_select_approx(topk_ctx *ctx, const float *a, size_t n,
                                size_t k, uint64_t seed, uint32_t *idx,
                                size_t *count, unsigned *passes);

/* Error feedback's update fused with a selection: for every i,
 * u[i] <- m * u[i] + g[i] (when u is not NULL) and a[i] <- a[i] + u[i]
 * (a[i] + g[i] without u), in place, then select from the updated a as
 * topk_ctx_select (approx 0; *count = k) or topk_ctx_select_approx (approx
 * 1, with seed) would on it, with the same result. One pass over the
 * arrays in the common case: the sample computes the new values on the
 * fly and the filtering pass makes the update as it goes. The update uses
 * the same float operations in the same order as that loop written out
 * (no FMA), so a and u end bit for bit as the loop leaves them. a, u and g
 * must not overlap.
 * Errors: FLPS_EINVAL (as topk_ctx_select; g or count NULL; nothing
 * changes), FLPS_ENOMEM (nothing changes: the buffers are reserved before
 * the update), FLPS_ENONFINITE (the updated a holds a NaN or Inf; a and u
 * are updated all the same, so a caller that must keep them checks its
 * inputs first). On error *count is not written and idx is unspecified. */
flps_err topk_ctx_select_fused(topk_ctx *ctx, float *a, float *u,
                               const float *g, float m, size_t n, size_t k,
                               int approx, uint64_t seed, uint32_t *idx,
                               size_t *count);

#endif
