/* Internal to compress/codec*.c: the codec object, its buffers and the
 * per-kind encoders and decoders. Not for use outside compress/. */
#ifndef FLPS_COMPRESS_CODEC_IMPL_H
#define FLPS_COMPRESS_CODEC_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "compress/codec.h"
#include "compress/topk.h"

/* Frames are little-endian and the codecs copy arrays as they lie in
 * memory; a big-endian port needs byte swaps here first. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "codec frames assume a little-endian host");

struct codec {
    codec_spec spec;
    uint64_t seed;
    uint64_t encodes; /* encodes so far: picks the random stream */
    topk_ctx *topk;   /* topk, gtopk, dgc */
    uint8_t *buf[CODEC_MAX_FRAMES];
    size_t cap[CODEC_MAX_FRAMES];
    uint64_t *bitmap; /* randk: chosen indices as bits */
    size_t bitmap_words;
    /* codec_set_output: the caller's buffer for the next encode's frames.
     * During that encode buf/cap point into it (own_buf/own_cap keep the
     * codec's buffers) and codec_buf_reserve places the frames one after
     * another. */
    uint8_t *out;
    size_t out_cap, out_used;
    int out_active;
    uint8_t *own_buf[CODEC_MAX_FRAMES];
    size_t own_cap[CODEC_MAX_FRAMES];
};

/* Make frame buffer f of c hold at least bytes (frames in increasing f).
 * While an encode writes into the caller's buffer (codec_set_output),
 * frame f is placed there after the frames before it.
 * Errors: FLPS_ENOMEM; FLPS_EINVAL when the caller's buffer is too small. */
flps_err codec_buf_reserve(codec *c, unsigned f, size_t bytes);

/* Point *out (cleared first) at c's frame buffers: frame 0 of len0 bytes
 * and, when nframes is 2, frame 1 of len1 bytes; count elements sent. The
 * encoders all end this way, so the bytes total is summed in one place. */
void codec_msg_set(codec *c, size_t nframes, size_t len0, size_t len1,
                   size_t count, codec_msg *out);

/* The random stream for the coming encode: a function of (seed, number of
 * encodes so far); codec_encode advances the count on success. */
uint64_t codec_stream(const codec *c);

/* 1 when a[0..n) holds no NaN or Inf. */
int codec_all_finite(const float *a, size_t n);

/* Unaligned little-endian loads from frames. */
static inline uint32_t codec_load_u32(const uint8_t *p)
{
    uint32_t v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
}

static inline float codec_load_f32(const uint8_t *p)
{
    float v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
}

/* Per kind; the contracts are those of codec_encode and codec_decode with
 * arguments already checked. */
flps_err codec_dense_encode(codec *c, const float *a, size_t n, codec_msg *out);
flps_err codec_dense_decode(const codec_spec *spec, const codec_frame *fr,
                            float *acc, size_t n);
flps_err codec_fp16_encode(codec *c, const float *a, size_t n, codec_msg *out);
flps_err codec_fp16_decode(const codec_spec *spec, const codec_frame *fr,
                           float *acc, size_t n);
flps_err codec_sparse_encode(codec *c, const float *a, size_t n,
                             codec_msg *out);
flps_err codec_sparse_decode(const codec_spec *spec, const codec_frame *fr,
                             float *acc, size_t n);
flps_err codec_dense_encode_fused(codec *c, float *r, float *u, const float *g,
                                  float m, size_t n, codec_msg *out);
flps_err codec_sparse_encode_fused(codec *c, float *r, float *u, const float *g,
                                   float m, size_t n, codec_msg *out);
flps_err codec_qsgd_encode(codec *c, const float *a, size_t n, codec_msg *out);
flps_err codec_qsgd_decode(const codec_spec *spec, const codec_frame *fr,
                           float *acc, size_t n);
flps_err codec_sign_encode(codec *c, const float *a, size_t n, codec_msg *out);
flps_err codec_sign_decode(const codec_spec *spec, const codec_frame *fr,
                           float *acc, size_t n);

/* IEEE binary16 conversions (round to nearest even; saturating). */
uint16_t codec_f32_to_f16(float x);
float codec_f16_to_f32(uint16_t h);

#endif
