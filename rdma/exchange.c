/* Encoding and validation of the connection-exchange messages. */
#include "rdma/exchange.h"

#include <string.h>

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* The range checks shared by encoding and decoding. */
static flps_err xch_check(const rdma_xch *x, char *why, size_t whylen)
{
    if (x->qp_num == 0 || x->qp_num > 0xffffffu)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "queue pair number %u is not a 24-bit "
                               "number above 0",
                               x->qp_num);
    if (x->psn > 0xffffffu)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "packet sequence number %u is not 24 bits",
                               x->psn);
    if (x->mtu < 1 || x->mtu > 5)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "path MTU code %u is not 1..5 (256..4096 "
                               "bytes)",
                               x->mtu);
    if (x->credits < 1 || x->credits > RDMA_XCH_MAX_CREDITS)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "%u receive credits is not 1..%d", x->credits,
                               RDMA_XCH_MAX_CREDITS);
    if (x->slot_bytes < RDMA_XCH_MIN_SLOT ||
        x->slot_bytes > RDMA_XCH_MAX_SLOT || x->slot_bytes % 8 != 0)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "receive slot of %u bytes is not a multiple "
                               "of 8 in %d..%u",
                               x->slot_bytes, RDMA_XCH_MIN_SLOT,
                               RDMA_XCH_MAX_SLOT);
    if (x->landing_len > RDMA_XCH_MAX_LANDING ||
        (x->landing_len > 0 && x->landing_addr == 0) ||
        x->landing_addr % 8 != 0 ||
        x->landing_addr > UINT64_MAX - x->landing_len)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "large-message region of %llu bytes at "
                               "0x%llx is not a valid, 8-aligned region",
                               (unsigned long long)x->landing_len,
                               (unsigned long long)x->landing_addr);
    if (x->ctrl_addr == 0 || x->ctrl_addr % 8 != 0)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "credit block at 0x%llx is not 8-aligned",
                               (unsigned long long)x->ctrl_addr);
    if (x->max_message_bytes > RDMA_XCH_MAX_LANDING)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "largest message of %llu bytes is above "
                               "2^40",
                               (unsigned long long)x->max_message_bytes);
    return FLPS_OK;
}

flps_err rdma_xch_encode(const rdma_xch *x, unsigned char *buf, size_t cap,
                         size_t *len)
{
    size_t n;

    if (x->type == RDMA_XCH_REFUSE) {
        size_t tl = strnlen(x->text, sizeof(x->text));
        n = RDMA_XCH_REFUSE_BYTES + tl;
        if (tl > RDMA_XCH_TEXT_MAX || cap < n)
            return FLPS_EINVAL;
        put32(buf, RDMA_XCH_MAGIC);
        put16(buf + 4, RDMA_XCH_VERSION);
        put16(buf + 6, (uint16_t)x->type);
        put16(buf + 8, (uint16_t)tl);
        memcpy(buf + 10, x->text, tl);
        *len = n;
        return FLPS_OK;
    }
    if ((x->type != RDMA_XCH_HELLO && x->type != RDMA_XCH_ACCEPT) ||
        cap < RDMA_XCH_BYTES || xch_check(x, NULL, 0) != FLPS_OK)
        return FLPS_EINVAL;
    put32(buf, RDMA_XCH_MAGIC);
    put16(buf + 4, RDMA_XCH_VERSION);
    put16(buf + 6, (uint16_t)x->type);
    put32(buf + 8, x->qp_num);
    put32(buf + 12, x->psn);
    put16(buf + 16, x->lid);
    buf[18] = x->mtu;
    buf[19] = x->gid_index;
    memcpy(buf + 20, x->gid, 16);
    put32(buf + 36, x->credits);
    put32(buf + 40, x->slot_bytes);
    put64(buf + 44, x->landing_addr);
    put64(buf + 52, x->landing_len);
    put32(buf + 60, x->landing_rkey);
    put32(buf + 64, x->ctrl_rkey);
    put64(buf + 68, x->ctrl_addr);
    put64(buf + 76, x->max_message_bytes);
    put64(buf + 84, x->session);
    *len = RDMA_XCH_BYTES;
    return FLPS_OK;
}

flps_err rdma_xch_decode(const void *data, size_t len, rdma_xch *out, char *why,
                         size_t whylen)
{
    const unsigned char *p = data;
    rdma_xch x;
    uint32_t magic;
    uint16_t version, type;
    flps_err rc;

    memset(&x, 0, sizeof(x));
    if (len < 8)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA exchange message of %zu bytes is too "
                               "short to be one",
                               len);
    magic = get32(p);
    version = get16(p + 4);
    type = get16(p + 6);
    if (magic != RDMA_XCH_MAGIC)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "not an flps RDMA exchange message (magic "
                               "0x%08x): the peer does not run the RDMA "
                               "transport; give every process of the job "
                               "the same transport",
                               magic);
    if (version != RDMA_XCH_VERSION)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA exchange version %u, this build speaks "
                               "%d: run the same flps version on every node",
                               version, RDMA_XCH_VERSION);
    if (type == RDMA_XCH_REFUSE) {
        size_t tl;
        if (len < RDMA_XCH_REFUSE_BYTES)
            return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                                   "RDMA REFUSE message of %zu bytes is "
                                   "truncated",
                                   len);
        tl = get16(p + 8);
        if (tl > RDMA_XCH_TEXT_MAX || len != RDMA_XCH_REFUSE_BYTES + tl)
            return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                                   "RDMA REFUSE message of %zu bytes says "
                                   "its text has %zu",
                                   len, tl);
        for (size_t i = 0; i < tl; i++)
            if (p[10 + i] < 0x20 || p[10 + i] == 0x7f)
                return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                                       "RDMA REFUSE text holds control "
                                       "character 0x%02x",
                                       p[10 + i]);
        x.type = RDMA_XCH_REFUSE;
        memcpy(x.text, p + 10, tl);
        x.text[tl] = '\0';
        *out = x;
        return FLPS_OK;
    }
    if (type != RDMA_XCH_HELLO && type != RDMA_XCH_ACCEPT)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "unknown RDMA exchange message type %u", type);
    if (len != RDMA_XCH_BYTES)
        return flps_errbuf_set(why, whylen, FLPS_EPROTO,
                               "RDMA %s message of %zu bytes, expected %d",
                               type == RDMA_XCH_HELLO ? "HELLO" : "ACCEPT", len,
                               RDMA_XCH_BYTES);
    x.type = (rdma_xch_type)type;
    x.qp_num = get32(p + 8);
    x.psn = get32(p + 12);
    x.lid = get16(p + 16);
    x.mtu = p[18];
    x.gid_index = p[19];
    memcpy(x.gid, p + 20, 16);
    x.credits = get32(p + 36);
    x.slot_bytes = get32(p + 40);
    x.landing_addr = get64(p + 44);
    x.landing_len = get64(p + 52);
    x.landing_rkey = get32(p + 60);
    x.ctrl_rkey = get32(p + 64);
    x.ctrl_addr = get64(p + 68);
    x.max_message_bytes = get64(p + 76);
    x.session = get64(p + 84);
    rc = xch_check(&x, why, whylen);
    if (rc != FLPS_OK)
        return rc;
    *out = x;
    return FLPS_OK;
}
