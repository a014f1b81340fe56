/* libFuzzer target: the RDMA connection-exchange decoder (rdma_xch_decode)
 * on one message of the exchange channel, a ZeroMQ socket anybody can
 * reach. What must hold: an accepted HELLO or ACCEPT is within every range
 * the transport relies on (a 24-bit queue pair number above 0, a path MTU
 * code 1..5, 1..4096 credits, 8-aligned slots and regions that do not
 * wrap); an accepted REFUSE's text is printable and NUL-terminated; either
 * encodes back to exactly the bytes it came from; a refusal says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma/exchange.h"
#include "tests/fuzz/fuzz_target.h"

static void check_ranges(const rdma_xch *x)
{
    fuzz_require(x->qp_num >= 1 && x->qp_num <= 0xffffffu,
                 "a queue pair number outside 1..2^24-1");
    fuzz_require(x->psn <= 0xffffffu, "a packet sequence number over 24 bits");
    fuzz_require(x->mtu >= 1 && x->mtu <= 5, "a path MTU code outside 1..5");
    fuzz_require(x->credits >= 1 && x->credits <= RDMA_XCH_MAX_CREDITS,
                 "credits outside 1..4096");
    fuzz_require(x->slot_bytes >= RDMA_XCH_MIN_SLOT &&
                     x->slot_bytes <= RDMA_XCH_MAX_SLOT &&
                     x->slot_bytes % 8 == 0,
                 "a receive slot size out of range or not a multiple of 8");
    fuzz_require(x->landing_len <= RDMA_XCH_MAX_LANDING &&
                     x->landing_addr % 8 == 0 &&
                     (x->landing_len == 0 || x->landing_addr != 0) &&
                     x->landing_addr <= UINT64_MAX - x->landing_len,
                 "a large-message region that is unaligned, empty-addressed or "
                 "wraps");
    fuzz_require(x->ctrl_addr != 0 && x->ctrl_addr % 8 == 0,
                 "a credit block at 0 or unaligned");
    fuzz_require(x->max_message_bytes <= RDMA_XCH_MAX_LANDING,
                 "a largest message above 2^40");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char back[RDMA_XCH_MAX_BYTES];
    size_t blen = 0;
    rdma_xch x;
    char why[300];
    flps_err rc;

    why[0] = '\0';
    rc = rdma_xch_decode(data, size, &x, why, sizeof(why));
    if (rc != FLPS_OK) {
        fuzz_require(rc == FLPS_EPROTO, "an error other than EPROTO");
        fuzz_require(why[0] != '\0', "a refusal without a reason");
        return 0;
    }
    if (x.type == RDMA_XCH_REFUSE) {
        size_t tl = strnlen(x.text, sizeof(x.text));

        fuzz_require(tl < sizeof(x.text),
                     "a REFUSE text without its terminator");
        fuzz_require(size == RDMA_XCH_REFUSE_BYTES + tl,
                     "a REFUSE whose text is not the rest of the message");
        for (size_t i = 0; i < tl; i++)
            fuzz_require((unsigned char)x.text[i] >= 0x20 &&
                             (unsigned char)x.text[i] != 0x7f,
                         "a control character in a REFUSE text");
    } else {
        fuzz_require(x.type == RDMA_XCH_HELLO || x.type == RDMA_XCH_ACCEPT,
                     "an unknown message type accepted");
        fuzz_require(size == RDMA_XCH_BYTES,
                     "a HELLO or ACCEPT of another size");
        check_ranges(&x);
    }
    fuzz_require(rdma_xch_encode(&x, back, sizeof(back), &blen) == FLPS_OK,
                 "an accepted message does not encode");
    fuzz_require(blen == size && memcmp(back, data, size) == 0,
                 "an accepted message encodes to other bytes");
    return 0;
}
