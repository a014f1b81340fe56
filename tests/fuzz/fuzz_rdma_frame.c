/* libFuzzer target: the RDMA transport's frame decoder (rdma_frame_decode)
 * on a receive slot's bytes. The first input byte picks the frame limit
 * (odd: none; even: 8 times half of it); the rest is the message, in a
 * buffer of exactly its length, 8-aligned as a slot is. What must hold: an
 * accepted message's frames lie inside it, in order, 8-aligned, within the
 * limit, and take exactly its length; encoded again with the same credit
 * counts they give the same bytes (padding zeroed) and decode to the same
 * view; an out-of-range refusal names a frame really over the limit; every
 * refusal says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/buf.h"
#include "rdma/frame.h"
#include "tests/fuzz/fuzz_target.h"

/* The frames of v lie in msg[0, len): in order, 8-aligned after the
 * header, within max, and the padded total is len. */
static void check_view(const rdma_frame_view *v, const unsigned char *msg,
                       size_t len, int64_t max)
{
    size_t lens[RDMA_FRAME_MAX], total = 0,
                                 next = rdma_frame_header_bytes(v->nframes);

    fuzz_require(v->nframes <= RDMA_FRAME_MAX,
                 "more frames than a message holds");
    for (size_t i = 0; i < v->nframes; i++) {
        const unsigned char *d = v->frames[i].data;

        fuzz_require(
            d >= msg + next && d <= msg + len &&
                v->frames[i].len <= (size_t)(msg + len - d),
            "a frame outside the message or before the end of the last");
        fuzz_require((size_t)(d - msg) % 8 == 0, "a frame not 8-aligned");
        fuzz_require(max < 0 || v->frames[i].len <= (uint64_t)max,
                     "a frame over the limit accepted");
        next = (size_t)(d - msg) + v->frames[i].len;
        lens[i] = v->frames[i].len;
    }
    fuzz_require(rdma_frame_size(lens, v->nframes, &total) == FLPS_OK &&
                     total == len,
                 "the frames do not take the message's length");
}

/* Encode v's frames (borrowed from the message in whole) again: the same
 * bytes with the padding zeroed, and the same view when decoded. */
static void roundtrip(const rdma_frame_view *v, const unsigned char *msg,
                      size_t len, proto_buf *whole)
{
    transport_frame f[RDMA_FRAME_MAX];
    unsigned char *out = malloc(len), *want = malloc(len);
    rdma_frame_view back;
    size_t used = 0;

    if (out == NULL || want == NULL) {
        free(out);
        free(want);
        return;
    }
    memcpy(want, msg, len);
    for (size_t i = 0; i < v->nframes; i++) {
        size_t off = (size_t)((const unsigned char *)v->frames[i].data - msg),
               end = off + v->frames[i].len;

        f[i].buf = whole;
        f[i].off = off;
        f[i].len = v->frames[i].len;
        memset(want + end, 0, ((end + 7) & ~(size_t)7) - end);
    }
    fuzz_require(rdma_frame_encode(f, v->nframes, v->credits, v->freed, out,
                                   len, &used) == FLPS_OK,
                 "an accepted message does not encode in its own length");
    fuzz_require(used == len && memcmp(out, want, len) == 0,
                 "a re-encoded message differs beyond its padding");
    fuzz_require(rdma_frame_decode(out, used, -1, &back, NULL, 0) == FLPS_OK,
                 "a re-encoded message does not decode");
    fuzz_require(back.nframes == v->nframes && back.credits == v->credits &&
                     back.freed == v->freed,
                 "a re-encoded message decodes to other counts");
    for (size_t i = 0; i < v->nframes; i++)
        fuzz_require(back.frames[i].len == v->frames[i].len &&
                         memcmp(back.frames[i].data, v->frames[i].data,
                                v->frames[i].len) == 0,
                     "a re-encoded frame differs");
    free(want);
    free(out);
}

/* Whether the header (complete as far as its count says) names a frame
 * over max: what an out-of-range refusal must be about. */
static int header_has_frame_over(const unsigned char *msg, size_t len,
                                 int64_t max)
{
    uint32_t nf;

    if (max < 0 || len < rdma_frame_header_bytes(0))
        return 0;
    memcpy(&nf, msg + 4, 4);
    for (uint32_t i = 0;
         i < nf && i < RDMA_FRAME_MAX && rdma_frame_header_bytes(i + 1) <= len;
         i++) {
        uint64_t fl;

        memcpy(&fl, msg + 24 + 8 * i, 8);
        if (fl > (uint64_t)max)
            return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t max;
    size_t len;
    unsigned char *msg;
    proto_buf *whole;
    rdma_frame_view v;
    char why[256];
    flps_err rc;

    if (size == 0)
        return 0;
    max = data[0] & 1 ? -1 : (int64_t)(data[0] >> 1) * 8;
    len = size - 1;
    /* malloc's alignment is at least 8, as a receive slot's is. */
    msg = malloc(len ? len : 1);
    if (msg == NULL)
        return 0;
    memcpy(msg, data + 1, len);
    whole = proto_buf_wrap(msg, len);
    if (whole == NULL) {
        free(msg);
        return 0;
    }
    why[0] = '\0';
    rc = rdma_frame_decode(msg, len, max, &v, why, sizeof(why));
    if (rc == FLPS_OK) {
        check_view(&v, msg, len, max);
        roundtrip(&v, msg, len, whole);
    } else {
        fuzz_require(rc == FLPS_EPROTO || rc == FLPS_ERANGE,
                     "an error other than EPROTO/ERANGE");
        fuzz_require(why[0] != '\0', "a refusal without a reason");
        fuzz_require(rc != FLPS_ERANGE || header_has_frame_over(msg, len, max),
                     "out of range, but no frame is over the limit");
    }
    proto_buf_release(whole);
    return 0;
}
