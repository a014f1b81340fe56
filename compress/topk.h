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

#endif
