/* Tests for rdma/frame.c: multipart messages laid out into one buffer and
 * read back in place, 8-byte aligned, with every malformed layout and a
 * frame over the limit refused. */
#include "rdma/frame.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static void make_frames(transport_frame *f, const size_t *len, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char *d;
        f[i].buf = proto_buf_create(len[i] + 8);
        f[i].off = 3; /* frames need not start at their buffer */
        f[i].len = len[i];
        d = proto_buf_data(f[i].buf);
        for (size_t j = 0; j < len[i] + 8; j++)
            d[j] = (unsigned char)(i * 17 + j);
    }
}

static void free_frames(transport_frame *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        proto_buf_release(f[i].buf);
}

Test(frame, round_trips_every_frame_count_in_place)
{
    for (size_t n = 0; n <= RDMA_FRAME_MAX; n++) {
        size_t len[RDMA_FRAME_MAX], total, used;
        transport_frame f[RDMA_FRAME_MAX];
        rdma_frame_view v;
        void *buf;
        char why[200];

        for (size_t i = 0; i < n; i++)
            len[i] = (i * 37) % 13 + (i == 2 ? 70000 : 0);
        make_frames(f, len, n);
        cr_assert_eq(rdma_frame_size(len, n, &total), FLPS_OK);
        cr_assert_eq(total % 8, 0);
        buf = aligned_alloc(8, total + 64);
        cr_assert_eq(rdma_frame_encode(f, n, 11, 22, buf, total + 64, &used),
                     FLPS_OK);
        cr_assert_eq(used, total);
        cr_assert_eq(rdma_frame_decode(buf, used, -1, &v, why, sizeof(why)),
                     FLPS_OK, "%s", why);
        cr_assert_eq(v.nframes, n);
        cr_assert_eq(v.credits, 11);
        cr_assert_eq(v.freed, 22);
        for (size_t i = 0; i < n; i++) {
            cr_assert_eq(v.frames[i].len, len[i]);
            cr_assert_eq((uintptr_t)v.frames[i].data % 8, 0);
            cr_assert_eq(memcmp(v.frames[i].data,
                                (unsigned char *)proto_buf_data(f[i].buf) + 3,
                                len[i]),
                         0, "frame %zu of %zu", i, n);
            /* In place: the frame is inside the buffer. */
            cr_assert((const unsigned char *)v.frames[i].data >=
                          (unsigned char *)buf &&
                      (const unsigned char *)v.frames[i].data + len[i] <=
                          (unsigned char *)buf + used);
        }
        free(buf);
        free_frames(f, n);
    }
}

Test(frame, pads_with_zeros)
{
    size_t len[] = {3}, used;
    transport_frame f[1];
    unsigned char buf[64];

    make_frames(f, len, 1);
    memset(buf, 0xee, sizeof(buf));
    cr_assert_eq(rdma_frame_encode(f, 1, 0, 0, buf, sizeof(buf), &used),
                 FLPS_OK);
    cr_assert_eq(used, 40);
    for (size_t i = 35; i < 40; i++)
        cr_assert_eq(buf[i], 0, "padding byte %zu", i);
    free_frames(f, 1);
}

Test(frame, refuses_too_many_frames_and_a_small_buffer)
{
    size_t len[RDMA_FRAME_MAX + 1] = {0}, total, used;
    transport_frame f[2];
    unsigned char buf[64];
    size_t two[] = {8, 8};

    cr_assert_eq(rdma_frame_size(len, RDMA_FRAME_MAX + 1, &total), FLPS_EINVAL);
    len[0] = SIZE_MAX - 4;
    cr_assert_eq(rdma_frame_size(len, 1, &total), FLPS_EINVAL);
    make_frames(f, two, 2);
    cr_assert_eq(rdma_frame_encode(f, 2, 0, 0, buf, 40, &used), FLPS_EINVAL);
    free_frames(f, 2);
}

static uint64_t *encoded(size_t *used)
{
    static uint64_t buf[64];
    size_t len[] = {10, 20};
    transport_frame f[2];

    make_frames(f, len, 2);
    cr_assert_eq(rdma_frame_encode(f, 2, 1, 2, buf, sizeof(buf), used),
                 FLPS_OK);
    free_frames(f, 2);
    return buf;
}

Test(frame, refuses_every_malformed_layout)
{
    size_t used;
    uint64_t *b = encoded(&used);
    rdma_frame_view v;
    char why[200];
    unsigned char *p = (unsigned char *)b;

    /* Every truncation. */
    for (size_t n = 0; n < used; n++)
        cr_assert_eq(rdma_frame_decode(b, n, -1, &v, why, sizeof(why)),
                     FLPS_EPROTO, "%zu bytes", n);
    /* Trailing bytes. */
    cr_assert_eq(rdma_frame_decode(b, used + 8, -1, &v, why, sizeof(why)),
                 FLPS_EPROTO);
    b = encoded(&used);
    p[0] ^= 1; /* the tag */
    cr_assert_eq(rdma_frame_decode(b, used, -1, &v, why, sizeof(why)),
                 FLPS_EPROTO);
    cr_assert(strstr(why, "tag") != NULL, "%s", why);
    b = encoded(&used);
    p[4] = RDMA_FRAME_MAX + 1; /* the count */
    cr_assert_eq(rdma_frame_decode(b, used, -1, &v, why, sizeof(why)),
                 FLPS_EPROTO);
    b = encoded(&used);
    b[3] = UINT64_MAX; /* frame 0's length */
    cr_assert_eq(rdma_frame_decode(b, used, -1, &v, why, sizeof(why)),
                 FLPS_EPROTO);
    b = encoded(&used);
    b[4] = 1000; /* frame 1's length beyond the message */
    cr_assert_eq(rdma_frame_decode(b, used, -1, &v, why, sizeof(why)),
                 FLPS_EPROTO);
}

Test(frame, a_frame_over_the_limit_is_out_of_range)
{
    size_t used;
    uint64_t *b = encoded(&used);
    rdma_frame_view v;
    char why[200];

    cr_assert_eq(rdma_frame_decode(b, used, 20, &v, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(rdma_frame_decode(b, used, 19, &v, why, sizeof(why)),
                 FLPS_ERANGE);
    cr_assert(strstr(why, "limit of 19") != NULL, "%s", why);
}

Test(frame, random_bytes_never_decode_out_of_bounds)
{
    uint64_t buf[32];
    rdma_frame_view v;
    unsigned s = 7;

    for (int round = 0; round < 20000; round++) {
        size_t len = (size_t)(round % 33) * 8;
        unsigned char *p = (unsigned char *)buf;
        for (size_t i = 0; i < sizeof(buf); i++) {
            s = s * 1103515245u + 12345u;
            p[i] = (unsigned char)(s >> 16);
        }
        p[0] = 'F', p[1] = 'M', p[2] = '0', p[3] = '1';
        p[4] = (unsigned char)(round % 5);
        p[5] = p[6] = p[7] = 0;
        for (int i = 0; i < 4; i++)
            buf[3 + i] %= 64;
        if (rdma_frame_decode(buf, len, -1, &v, NULL, 0) == FLPS_OK)
            for (size_t i = 0; i < v.nframes; i++)
                cr_assert((const unsigned char *)v.frames[i].data +
                              v.frames[i].len <=
                          p + len);
    }
}
