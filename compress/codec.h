/* Gradient codecs behind one interface: a spec string names the codec, an
 * encoder turns a float array into a few byte frames, and a stateless
 * decoder validates frames and scatter-adds them into a dense array.
 *
 * Specs and wire frames (all little-endian; k = max(floor(D * n), 1),
 * capped at n; m = the number of pairs actually sent):
 *   dense       f32[n]
 *   fp16        f16[n]  (IEEE binary16, round to nearest even; magnitudes
 *               beyond 65504 saturate to +-65504)
 *   topk:D      u32 idx[k], f32 val[k]     exact top-k by |a|, ascending
 *   gtopk:D     as topk:D (the shard does the global part)
 *   randk:D     u32 idx[k], f32 val[k]     k distinct indices drawn
 *               uniformly (seeded), values a[i] * n / k (unbiased)
 *   dgc:D       u32 idx[m], f32 val[m]     sampled threshold, one pass;
 *               k - k/5 <= m <= k + k/5
 *   qsgd:BITS   f32 norm[ceil(n / 512)], then n codes of BITS + 1 bits
 *               packed LSB first (bit 0..BITS-1 the level l, bit BITS the
 *               sign), zero padding to a byte; value = norm * l / (2^BITS-1)
 *               with stochastic rounding (unbiased); BITS in 1..8
 *   sign        f32 scale (mean |a|), then n bits LSB first, 1 = negative;
 *               value = +-scale
 * Sparse frames carry strictly ascending indices.
 */
#ifndef FLPS_COMPRESS_CODEC_H
#define FLPS_COMPRESS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* What follows a codec's name in a spec: nothing, ":D" (a density in
 * (0, 1]) or ":BITS" (1..8). */
typedef enum {
    CODEC_PARAM_NONE = 0,
    CODEC_PARAM_DENSITY,
    CODEC_PARAM_BITS,
} codec_param;

/* Every name a compression setting can hold, once: X(KIND, value, "name",
 * PARAM, VALUES) with PARAM one of NONE, DENSITY, BITS (codec_param) and
 * VALUES EXACT where the kind's messages carry values of the encoded array
 * exactly (codec_kind_sends_exact_values), else CODED. This one
 * table makes codec_kind, the names codec_spec_parse reads and
 * codec_spec_format writes, the job file's words for compression:
 * (services/jobspec_keys.c, and so docs/job-file.md) and the lists that
 * messages quote; the order is the order they list the names in. A
 * kind's value is pinned: never reused or moved (no message carries it;
 * specs travel as text, "topk:0.01").
 * CODEC_AUTO is a setting, not a codec: compression "auto" has the
 * scheduler's planner choose dense or topk per layer (libflps starts each
 * layer on one, docs/compress.md). codec_spec_parse, codec_create and the
 * other calls on a codec_spec refuse it; codec_setting_parse reads it. */
#define CODEC_KIND_MAP(X)                                                      \
    X(CODEC_DENSE, 0, "dense", NONE, EXACT)                                    \
    X(CODEC_TOPK, 1, "topk", DENSITY, EXACT)                                   \
    X(CODEC_GTOPK, 2, "gtopk", DENSITY, EXACT)                                 \
    X(CODEC_RANDK, 3, "randk", DENSITY, CODED)                                 \
    X(CODEC_DGC, 4, "dgc", DENSITY, EXACT)                                     \
    X(CODEC_QSGD, 5, "qsgd", BITS, CODED)                                      \
    X(CODEC_FP16, 6, "fp16", NONE, CODED)                                      \
    X(CODEC_SIGN, 7, "sign", NONE, CODED)                                      \
    X(CODEC_AUTO, 8, "auto", NONE, CODED)

typedef enum {
#define CODEC_KIND_ENUM_(kind, value, name, param, values) kind = value,
    CODEC_KIND_MAP(CODEC_KIND_ENUM_)
#undef CODEC_KIND_ENUM_
} codec_kind;

/* The kinds of CODEC_KIND_MAP, CODEC_AUTO included. */
#define CODEC_KIND_COUNT 9

#define CODEC_MAX_FRAMES 2
#define CODEC_QSGD_BUCKET 512

/* A parsed spec; a small value type. density is used by the sparse kinds
 * (0 < density <= 1), bits by qsgd (1..8). */
typedef struct {
    codec_kind kind;
    double density;
    unsigned bits;
} codec_spec;

/* One frame: len bytes at data, borrowed. Decoders accept any alignment. */
typedef struct {
    const uint8_t *data;
    size_t len;
} codec_frame;

/* An encoded array. Everything in it is borrowed from the codec until the
 * next codec_encode on it or codec_destroy. */
typedef struct {
    codec_frame frames[CODEC_MAX_FRAMES];
    size_t nframes;
    size_t bytes;        /* sum of the frame lengths */
    size_t count;        /* elements sent: m for sparse codecs, else n */
    const uint32_t *idx; /* sparse codecs: the count indices sent,
                            ascending; NULL for the others */
} codec_msg;

typedef struct codec codec;

/* Parse a codec's spec: its name, followed by ":D" for the kinds whose
 * parameter is a density (D a decimal in (0, 1]) and ":BITS" for those
 * whose parameter is a bit width (an integer in 1..8), nothing else
 * ("dense", "topk:0.01", "qsgd:4"). Errors: FLPS_EINVAL (NULL, malformed,
 * or "auto"; *out untouched). */
flps_err codec_spec_parse(const char *s, codec_spec *out);

/* codec_spec_parse, and "auto" as well (kind CODEC_AUTO, density 0, bits
 * 0): what a compression setting may say. Errors as codec_spec_parse. */
flps_err codec_setting_parse(const char *s, codec_spec *out);

/* The kind's name ("topk"), a static string; "unknown" for a value outside
 * CODEC_KIND_MAP. */
const char *codec_kind_name(codec_kind kind);

/* What follows the kind's name in a spec; CODEC_PARAM_NONE outside the
 * map. */
codec_param codec_kind_param(codec_kind kind);

/* Every name of CODEC_KIND_MAP as a spec would give it, in the map's
 * order, ", "-separated: "dense, topk:D, gtopk:D, randk:D, dgc:D,
 * qsgd:BITS, fp16, sign, auto" (for messages). A static string. */
const char *codec_kind_list(void);

/* Write the canonical spec string ("topk:0.01", "%.17g" for D) to buf.
 * Errors: FLPS_EINVAL (bad spec, or len too small). */
flps_err codec_spec_format(const codec_spec *spec, char *buf, size_t len);

/* Whether the kind sends (index, value) pairs: the kinds whose parameter
 * is a density. */
int codec_kind_is_sparse(codec_kind kind);

/* The k of a sparse spec for an array of n (0 for n = 0); n otherwise. */
size_t codec_count_for(const codec_spec *spec, size_t n);

/* The k distinct indices of [0, n) that randk draws from seed, every
 * k-subset equally likely (Floyd's algorithm on a bitmap), written
 * ascending into idx[0..k). A pure function of (n, k, seed): SAPS-PSGD's
 * workers draw the same mask from a shared seed this way, so no index
 * travels. bitmap is the caller's scratch of (n + 63) / 64 words. k <= n
 * < 2^32. O(k + n/64). */
void codec_randk_indices(size_t n, size_t k, uint64_t seed, uint64_t *bitmap,
                         uint32_t *idx);

/* Density warm-up (Deep Gradient Compression): the density of iteration t
 * when it decays exponentially from start at t = 0 to target at t =
 * warmup, start * (target / start)^(t / warmup), and is target from
 * t = warmup on. Exact at both ends (start at t = 0, target for t >=
 * warmup), never above start nor below target, and non-increasing in t.
 * warmup 0, or a start at or below target, gives target for every t.
 * Pure and deterministic: every worker and shard that calls it with the
 * same arguments gets the same double, which is what lets the workers'
 * selections and a gtopk shard's global k follow one schedule. Arguments
 * are not checked (callers validate 0 < target, start <= 1). */
double codec_warmup_density(double start, double target, uint64_t warmup,
                            uint64_t t);

/* Number of frames the spec's messages always have. */
size_t codec_nframes(const codec_spec *spec);

/* Upper bound of codec_msg.bytes for an array of n. */
size_t codec_max_bytes(const codec_spec *spec, size_t n);

/* Create an encoder. seed drives randk, dgc and qsgd: every encode draws
 * from the stream (seed, number of previous encodes), so a run is
 * reproducible. Caller owns *out (codec_destroy).
 * Errors: FLPS_EINVAL (bad spec or out NULL), FLPS_ENOMEM. */
flps_err codec_create(const codec_spec *spec, uint64_t seed, codec **out);

/* Free c and its buffers. NULL does nothing. */
void codec_destroy(codec *c);

const codec_spec *codec_get_spec(const codec *c);

/* Set the density of a sparse codec (topk, gtopk, randk, dgc) from its
 * next encode on, e.g. for a density warm-up; buffers grow as needed.
 * Errors: FLPS_EINVAL (c NULL, a kind without a density, density outside
 * (0, 1]); the codec is then unchanged. */
flps_err codec_set_density(codec *c, double density);

/* Encode a[0..n) into *out (frames borrowed from c, see codec_msg).
 * Buffers grow to the largest n seen and are reused, so steady-state
 * encodes do not allocate.
 * Errors: FLPS_EINVAL (NULL, n >= 2^32), FLPS_ENONFINITE (a NaN or Inf in
 * a: nothing is encoded), FLPS_ERANGE (qsgd: a bucket norm or the sign
 * scale overflows f32), FLPS_ENOMEM. *out is written only on FLPS_OK.
 * Not thread-safe on one codec; separate codecs are independent. */
flps_err codec_encode(codec *c, const float *a, size_t n, codec_msg *out);

/* Make the next encode on c (codec_encode, codec_encode_fused, or the one
 * inside ef_step) write its frames into dst instead of c's own buffers:
 * frame 0 at dst, each later frame right after the one before, so for the
 * dense-valued kinds the message is dst[0..bytes) as one block. cap is
 * dst's size; codec_max_bytes(spec, n) always suffices. For a caller whose
 * payload is the message: no copy from the codec's buffer. The setting
 * lasts for one encode, successful or not; dst NULL clears it (do so when
 * no encode ran, e.g. ef_step refused a NaN first). dst is borrowed until
 * that encode returns, and the message's frames then point into it.
 * Errors: FLPS_EINVAL (c NULL). */
flps_err codec_set_output(codec *c, void *dst, size_t cap);

/* Make c's frame buffers hold what an encode of n elements writes, so that
 * the next codec_encode of n elements allocates nothing and cannot fail
 * with FLPS_ENOMEM (error feedback reserves before it updates its state in
 * place). The sparse kinds' selection buffers are not included
 * (codec_encode_fused reserves those itself). With an output set
 * (codec_set_output) it reserves nothing and checks that the caller's
 * buffer holds the frames.
 * Errors: FLPS_EINVAL (NULL, n >= 2^32), FLPS_ENOMEM. */
flps_err codec_reserve(codec *c, size_t n);

/* Whether the kind's messages carry values of the encoded array exactly:
 * dense (every element), topk, gtopk and dgc (the elements sent). For
 * these, what error feedback keeps is the array with the sent elements
 * zeroed, and the encode can make the update itself
 * (codec_encode_fused). */
int codec_kind_sends_exact_values(codec_kind kind);

/* Error feedback's update fused with the encode, for the kinds of
 * codec_kind_sends_exact_values. With a[i] = r[i] + (u[i] <- m * u[i] +
 * g[i]) (a[i] = r[i] + g[i] when u is NULL), encode a into *out as
 * codec_encode(c, a, n, out) would, and leave in r what the message did not
 * carry: a with the sent indices zeroed (all zeros for dense). The layer
 * is read and written once (sparse kinds: a sample and one filtering pass
 * that makes the update; dense: one pass writing the frame and clearing
 * r), with the same float operations in the same order as the loop
 * written out. u is updated everywhere, not masked: that is the caller's
 * choice. r, u and g must not overlap; *out is borrowed as for
 * codec_encode. For dense, r may be NULL: a residual known to hold +0.0f
 * everywhere, neither read nor written (the message is the same).
 * Errors: FLPS_EINVAL (NULL arguments, n >= 2^32, a kind that quantises;
 * nothing changes), FLPS_ENOMEM (nothing changes), FLPS_ENONFINITE (a holds
 * a NaN or Inf: r and u are updated all the same and *out is not written;
 * a caller that must keep them checks its inputs first, as ef_step does).
 * Not thread-safe on one codec. */
flps_err codec_encode_fused(codec *c, float *r, float *u, const float *g,
                            float m, size_t n, codec_msg *out);

/* The dense frame of m * v[i] + g[i] (g[i] when v is NULL), written
 * straight into dst (4n bytes, any alignment): for a caller that owns its
 * payload buffer and keeps plain momentum, which the lossless codec needs
 * instead of error feedback (its residual would always be zero). One pass,
 * the finiteness check folded in; the same float operations as the loop
 * written out. v and dst may be the same array (an update in place); g
 * must not overlap them.
 * Errors: FLPS_EINVAL (NULL with n > 0), FLPS_ENONFINITE (a NaN or Inf in
 * the result; dst is then unspecified). Thread-safe; never allocates. */
flps_err codec_dense_encode_into(const float *g, const float *v, float m,
                                 size_t n, void *dst);

/* Validate nframes frames of a message for an array of n elements encoded
 * per spec, then add the decoded values into acc[0..n) (scatter-add for
 * sparse codecs). Validation is complete before acc is touched: on error
 * acc is unchanged.
 * Errors: FLPS_EINVAL (NULL arguments, bad spec), FLPS_EPROTO (wrong frame
 * count or size, sparse indices not strictly ascending, a count outside
 * what the spec allows, a negative norm or scale, non-zero padding bits),
 * FLPS_ERANGE (an index >= n), FLPS_ENONFINITE (a value, norm or scale is
 * NaN or Inf). Thread-safe; never allocates. */
flps_err codec_decode(const codec_spec *spec, const codec_frame *frames,
                      size_t nframes, float *acc, size_t n);

#endif
