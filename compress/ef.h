/* Error feedback with momentum correction for one layer: the residual r of
 * what a biased codec did not send, and the local velocity u, exactly as in
 * ALGORITHMS.md "Error feedback and momentum correction". */
#ifndef FLPS_COMPRESS_EF_H
#define FLPS_COMPRESS_EF_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "compress/codec.h"

typedef struct ef ef;

/* State for a layer of n elements (n < 2^32) with momentum in [0, 1);
 * r and u start at zero. Caller owns *out (ef_destroy).
 * Errors: FLPS_EINVAL (momentum out of range, n too large, out NULL),
 * FLPS_ENOMEM. */
flps_err ef_create(size_t n, float momentum, ef **out);

/* As ef_create, with steps made in place: only r (and u) are allocated,
 * two arrays of n floats (one without momentum) where ef_create keeps four
 * (two). For the kinds that send exact values (dense, topk, gtopk, dgc:
 * codec_kind_sends_exact_values) the update happens inside the codec's own
 * pass; for the quantising ones (fp16, qsgd, sign) the step rules out
 * every failure of the encode first (checks and the codec's buffers
 * reserved), then updates r and u and encodes r. spec is the codec the
 * state is for; any codec ef_step accepts may be used with it later.
 * Errors: as ef_create, and FLPS_EINVAL for a NULL spec or one that
 * ef_step refuses (randk, qsgd below 4 bits). */
flps_err ef_create_for(const codec_spec *spec, size_t n, float momentum,
                       ef **out);

/* Free e. NULL does nothing. */
void ef_destroy(ef *e);

/* One step with the gradient g[0..n):
 *   u <- m*u + g                       (only when m > 0)
 *   a <- r + u   (r + g when m = 0)
 *   *msg <- encode(a) with c
 *   r <- a - decode(*msg): for topk, gtopk and dgc that is a with the sent
 *        indices S zeroed, exactly; for qsgd, sign and fp16 it is the
 *        quantisation error; for dense it is zero
 *   u[S] <- 0 for sparse codecs when m > 0 and d * round(1 / (1 - m)) is
 *        below 1 for gtopk, 1/8 for topk and dgc, d the codec's density
 *        (momentum factor masking where an element waits long enough
 *        between sends that its velocity is stale: with m = 0.9, gtopk
 *        below 0.1, topk and dgc below 0.0125; the dense-valued codecs
 *        send every element and keep u)
 * So sum(sent) + r == sum(accumulated) up to float rounding, where the
 * accumulated quantity is g (m = 0) or u after its update (m > 0).
 * *msg is borrowed from c until its next encode (or, after
 * codec_set_output, from that buffer). On error r, u and *msg are
 * unchanged. An output set on c is cleared by every step, successful or
 * not.
 * For dense, topk, gtopk and dgc the step is one fused pass
 * (codec_encode_fused) after a read-only check of g: no scratch memory,
 * results bit for bit those of the loop above followed by codec_encode.
 * The quantising codecs (fp16, qsgd, sign) work in scratch arrays and swap
 * them in on success on an ef from ef_create, in place on one from
 * ef_create_for (see there); the results are the same.
 * Error feedback needs a codec whose error is smaller than its input.
 * Refused with FLPS_EINVAL: randk (unbiased through its n/k scaling; its
 * residual would be -(n/k - 1) a on S) and qsgd with BITS < 4 (at 512 per
 * bucket the rounding error exceeds the signal: measured, the residual
 * grows 10x every few dozen steps with BITS = 3). Use those without
 * error feedback.
 * Errors: FLPS_EINVAL (NULL arguments, a refused codec), FLPS_ENONFINITE (g
 * holds NaN or Inf, or a overflows), and codec_encode's errors. Not thread-safe
 * on one e; never allocates. */
flps_err ef_step(ef *e, codec *c, const float *g, codec_msg *msg);

/* Put values back into the residual, r[idx[j]] += val[j]: for gtopk, the
 * pushed values the shard did not take. Validates everything first: on
 * error r is unchanged.
 * Errors: FLPS_EINVAL (NULL with m > 0), FLPS_ERANGE (an index >= n),
 * FLPS_ENONFINITE (a NaN or Inf value). */
flps_err ef_add_back(ef *e, const uint32_t *idx, const float *val, size_t m);

/* Zero r and u (e.g. after a full pull when a worker rejoins). */
void ef_reset(ef *e);

size_t ef_size(const ef *e);

/* sqrt(sum r[i]^2), summed in double. */
double ef_residual_norm(const ef *e);

/* Borrowed views, valid until the next ef_step or ef_destroy. The velocity
 * is NULL when the momentum is 0. */
const float *ef_residual(const ef *e);
const float *ef_velocity(const ef *e);

#endif
