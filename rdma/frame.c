/* Framing of multipart messages into registered buffers (frame.h). */
#include "rdma/frame.h"

#include <string.h>

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static void put64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8); /* little-endian hosts only: RDMA peers match */
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

flps_err rdma_frame_size(const size_t *lens, size_t n, size_t *total)
{
    size_t t;

    if (n > RDMA_FRAME_MAX)
        return FLPS_EINVAL;
    t = rdma_frame_header_bytes(n);
    for (size_t i = 0; i < n; i++) {
        if (lens[i] > SIZE_MAX / 2 || t > SIZE_MAX / 2 - lens[i])
            return FLPS_EINVAL;
        t = align8(t + lens[i]);
    }
    *total = t;
    return FLPS_OK;
}

flps_err rdma_frame_encode(const transport_frame *f, size_t n, uint64_t credits,
                           uint64_t freed, void *dst, size_t cap, size_t *used)
{
    unsigned char *p = dst;
    size_t lens[RDMA_FRAME_MAX], total, off;
    uint32_t tag = RDMA_FRAME_TAG, nf = (uint32_t)n;

    if (n > RDMA_FRAME_MAX)
        return FLPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        lens[i] = f[i].len;
    if (rdma_frame_size(lens, n, &total) != FLPS_OK || total > cap)
        return FLPS_EINVAL;
    memcpy(p, &tag, 4);
    memcpy(p + 4, &nf, 4);
    put64(p + 8, credits);
    put64(p + 16, freed);
    off = rdma_frame_header_bytes(n);
    for (size_t i = 0; i < n; i++) {
        put64(p + 24 + 8 * i, lens[i]);
        if (lens[i] > 0)
            memcpy(p + off,
                   (const unsigned char *)proto_buf_data(f[i].buf) + f[i].off,
                   lens[i]);
        /* Zero the padding: nothing of the process' memory leaks out. */
        memset(p + off + lens[i], 0, align8(off + lens[i]) - off - lens[i]);
        off = align8(off + lens[i]);
    }
    *used = total;
    return FLPS_OK;
}

flps_err rdma_frame_decode(const void *src, size_t len, int64_t max_frame_bytes,
                           rdma_frame_view *out, char *why, size_t whylen)
{
    const unsigned char *p = src;
    uint32_t tag, nf;
    size_t off;

    if (len < rdma_frame_header_bytes(0))
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA message of %zu bytes is shorter than "
                               "its header",
                               len);
    memcpy(&tag, p, 4);
    memcpy(&nf, p + 4, 4);
    if (tag != RDMA_FRAME_TAG)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA message with tag 0x%08x, not an flps "
                               "message",
                               tag);
    if (nf > RDMA_FRAME_MAX)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA message of %u frames (at most %d)", nf,
                               RDMA_FRAME_MAX);
    off = rdma_frame_header_bytes(nf);
    if (off > len)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA message of %zu bytes is shorter than "
                               "its header of %u frames",
                               len, nf);
    out->nframes = nf;
    out->credits = get64(p + 8);
    out->freed = get64(p + 16);
    for (uint32_t i = 0; i < nf; i++) {
        uint64_t fl = get64(p + 24 + 8 * i);
        if (fl > len - off)
            return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                                   "RDMA frame %u says %llu bytes, the "
                                   "message has %zu left",
                                   i, (unsigned long long)fl, len - off);
        if (max_frame_bytes >= 0 && fl > (uint64_t)max_frame_bytes)
            return flps_errbuf_set(why, whylen, FLPS_ERANGE,
                                   "RDMA frame of %llu bytes is over the "
                                   "limit of %lld",
                                   (unsigned long long)fl,
                                   (long long)max_frame_bytes);
        out->frames[i].data = p + off;
        out->frames[i].len = (size_t)fl;
        off = align8(off + (size_t)fl);
        if (off > len && i + 1 < nf)
            return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                                   "RDMA message of %zu bytes is shorter "
                                   "than its frames",
                                   len);
    }
    if (off != len)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA message of %zu bytes whose frames "
                               "take %zu",
                               len, off);
    return FLPS_OK;
}
