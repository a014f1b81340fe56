/* Tests for rdma/exchange.c: HELLO, ACCEPT and REFUSE round-trip, and a
 * malformed or hostile exchange message is refused with a line that says
 * which field is wrong. */
#include "rdma/exchange.h"

#include <criterion/criterion.h>
#include <string.h>

static rdma_xch hello(void)
{
    rdma_xch x;

    memset(&x, 0, sizeof(x));
    x.type = RDMA_XCH_HELLO;
    x.qp_num = 0x123456;
    x.psn = 0xabcdef;
    x.lid = 7;
    x.mtu = 5;
    x.gid_index = 3;
    for (int i = 0; i < 16; i++)
        x.gid[i] = (uint8_t)(i * 9);
    x.credits = 16;
    x.slot_bytes = 32768;
    x.landing_addr = 0x7f0000001000ull;
    x.landing_len = 101 << 20;
    x.landing_rkey = 0xdeadbeef;
    x.ctrl_rkey = 0x1234;
    x.ctrl_addr = 0x7f0000100000ull;
    x.max_message_bytes = 100 << 20;
    x.session = 0x0102030405060708ull;
    return x;
}

static flps_err decode(const unsigned char *b, size_t n, rdma_xch *x, char *why)
{
    return rdma_xch_decode(b, n, x, why, 300);
}

Test(exchange, hello_and_accept_round_trip)
{
    unsigned char b[RDMA_XCH_MAX_BYTES];
    rdma_xch x = hello(), y;
    size_t n;
    char why[300];

    cr_assert_eq(rdma_xch_encode(&x, b, sizeof(b), &n), FLPS_OK);
    cr_assert_eq(n, RDMA_XCH_BYTES);
    cr_assert_eq(decode(b, n, &y, why), FLPS_OK, "%s", why);
    cr_assert_eq(memcmp(&x, &y, sizeof(x)), 0);
    x.type = RDMA_XCH_ACCEPT;
    x.landing_len = 0;
    x.landing_addr = 0;
    cr_assert_eq(rdma_xch_encode(&x, b, sizeof(b), &n), FLPS_OK);
    cr_assert_eq(decode(b, n, &y, why), FLPS_OK, "%s", why);
    cr_assert_eq(y.type, RDMA_XCH_ACCEPT);
    cr_assert_eq(y.landing_len, 0);
}

Test(exchange, refuse_carries_its_text)
{
    unsigned char b[RDMA_XCH_MAX_BYTES];
    rdma_xch x, y;
    size_t n;
    char why[300];

    memset(&x, 0, sizeof(x));
    x.type = RDMA_XCH_REFUSE;
    strcpy(x.text, "the RDMA listener has no room for another peer");
    cr_assert_eq(rdma_xch_encode(&x, b, sizeof(b), &n), FLPS_OK);
    cr_assert_eq(decode(b, n, &y, why), FLPS_OK, "%s", why);
    cr_assert_str_eq(y.text, x.text);
    b[12] = '\n';
    cr_assert_eq(decode(b, n, &y, why), FLPS_EPROTO);
    cr_assert(strstr(why, "control character") != NULL, "%s", why);
    cr_assert_eq(decode(b, n - 1, &y, why), FLPS_EPROTO, "text length");
}

Test(exchange, every_truncation_is_refused)
{
    unsigned char b[RDMA_XCH_MAX_BYTES];
    rdma_xch x = hello(), y;
    size_t n;
    char why[300];

    cr_assert_eq(rdma_xch_encode(&x, b, sizeof(b), &n), FLPS_OK);
    for (size_t k = 0; k < n; k++)
        cr_assert_eq(decode(b, k, &y, why), FLPS_EPROTO, "%zu bytes", k);
    cr_assert_eq(decode(b, n + 1, &y, why), FLPS_EPROTO);
}

Test(exchange, a_stranger_is_told_it_is_not_an_rdma_peer)
{
    rdma_xch y;
    char why[300];

    cr_assert_eq(
        decode((const unsigned char *)"GET / HTTP/1.1\r\n", 16, &y, why),
        FLPS_EPROTO);
    cr_assert(strstr(why, "not an flps RDMA exchange message") != NULL, "%s",
              why);
    cr_assert(strstr(why, "same transport") != NULL, "%s", why);
}

Test(exchange, another_version_is_told_to_match)
{
    unsigned char b[RDMA_XCH_MAX_BYTES];
    rdma_xch x = hello(), y;
    size_t n;
    char why[300];

    rdma_xch_encode(&x, b, sizeof(b), &n);
    b[4] = 2;
    cr_assert_eq(decode(b, n, &y, why), FLPS_EPROTO);
    cr_assert(strstr(why, "same flps version") != NULL, "%s", why);
    b[4] = 1;
    b[6] = 9;
    cr_assert_eq(decode(b, n, &y, why), FLPS_EPROTO);
    cr_assert(strstr(why, "type 9") != NULL, "%s", why);
}

/* A HELLO with one field changed must be refused, naming the field. */
static void refused(void (*edit)(rdma_xch *), const char *word)
{
    unsigned char b[RDMA_XCH_MAX_BYTES];
    rdma_xch x = hello(), y;
    size_t n;
    char why[300];

    rdma_xch_encode(&x, b, sizeof(b), &n);
    edit(&x);
    cr_assert_eq(rdma_xch_encode(&x, b, sizeof(b), &n), FLPS_EINVAL,
                 "encoding checks the same ranges");
    /* Write the bad field by hand: encode refuses it. */
    x.type = RDMA_XCH_HELLO;
    {
        rdma_xch good = hello();
        rdma_xch_encode(&good, b, sizeof(b), &n);
    }
    b[8] = (uint8_t)x.qp_num, b[9] = (uint8_t)(x.qp_num >> 8);
    b[10] = (uint8_t)(x.qp_num >> 16), b[11] = (uint8_t)(x.qp_num >> 24);
    for (int i = 0; i < 4; i++) {
        b[12 + i] = (uint8_t)(x.psn >> (8 * i));
        b[36 + i] = (uint8_t)(x.credits >> (8 * i));
        b[40 + i] = (uint8_t)(x.slot_bytes >> (8 * i));
    }
    b[18] = x.mtu;
    for (int i = 0; i < 8; i++) {
        b[44 + i] = (uint8_t)(x.landing_addr >> (8 * i));
        b[52 + i] = (uint8_t)(x.landing_len >> (8 * i));
        b[68 + i] = (uint8_t)(x.ctrl_addr >> (8 * i));
        b[76 + i] = (uint8_t)(x.max_message_bytes >> (8 * i));
    }
    cr_assert_eq(decode(b, n, &y, why), FLPS_EPROTO);
    cr_assert(strstr(why, word) != NULL, "\"%s\" does not name %s", why, word);
}

static void qp0(rdma_xch *x)
{
    x->qp_num = 0;
}
static void qpbig(rdma_xch *x)
{
    x->qp_num = 1u << 24;
}
static void psnbig(rdma_xch *x)
{
    x->psn = 1u << 24;
}
static void mtu0(rdma_xch *x)
{
    x->mtu = 0;
}
static void mtu6(rdma_xch *x)
{
    x->mtu = 6;
}
static void cred0(rdma_xch *x)
{
    x->credits = 0;
}
static void credbig(rdma_xch *x)
{
    x->credits = RDMA_XCH_MAX_CREDITS + 1;
}
static void slotodd(rdma_xch *x)
{
    x->slot_bytes = 1001;
}
static void slotbig(rdma_xch *x)
{
    x->slot_bytes = RDMA_XCH_MAX_SLOT + 8;
}
static void landnull(rdma_xch *x)
{
    x->landing_addr = 0;
}
static void landwrap(rdma_xch *x)
{
    x->landing_addr = UINT64_MAX - 7;
}
static void landbig(rdma_xch *x)
{
    x->landing_len = RDMA_XCH_MAX_LANDING + 1;
}
static void ctrl0(rdma_xch *x)
{
    x->ctrl_addr = 0;
}
static void ctrlodd(rdma_xch *x)
{
    x->ctrl_addr = 0x1003;
}
static void maxbig(rdma_xch *x)
{
    x->max_message_bytes = UINT64_MAX;
}

Test(exchange, every_field_out_of_range_is_refused_by_name)
{
    refused(qp0, "queue pair number");
    refused(qpbig, "queue pair number");
    refused(psnbig, "packet sequence number");
    refused(mtu0, "MTU");
    refused(mtu6, "MTU");
    refused(cred0, "credits");
    refused(credbig, "credits");
    refused(slotodd, "slot");
    refused(slotbig, "slot");
    refused(landnull, "large-message region");
    refused(landwrap, "large-message region");
    refused(landbig, "large-message region");
    refused(ctrl0, "credit block");
    refused(ctrlodd, "credit block");
    refused(maxbig, "largest message");
}

Test(exchange, flipped_bytes_never_pass_unchecked)
{
    unsigned char b[RDMA_XCH_MAX_BYTES], c[RDMA_XCH_MAX_BYTES];
    rdma_xch x = hello(), y;
    size_t n;
    char why[300];

    rdma_xch_encode(&x, b, sizeof(b), &n);
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(c, b, n);
            c[i] ^= (unsigned char)(1u << bit);
            if (decode(c, n, &y, why) == FLPS_OK) {
                cr_assert(y.qp_num > 0 && y.qp_num <= 0xffffff);
                cr_assert(y.credits >= 1 && y.credits <= RDMA_XCH_MAX_CREDITS);
                cr_assert_eq(y.slot_bytes % 8, 0);
                cr_assert(y.mtu >= 1 && y.mtu <= 5);
            }
        }
}
