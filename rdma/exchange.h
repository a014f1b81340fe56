/* The connection-exchange messages of the RDMA transport, sent over its
 * ZeroMQ channel: a connector's HELLO, the listener's ACCEPT or REFUSE.
 * They carry what each side needs to connect its queue pair to the
 * other's and to write into its buffers. Fixed little-endian layout;
 * decoding validates every field, since the channel is a network socket
 * anybody can reach. Parsing does no I/O. */
#ifndef FLPS_RDMA_EXCHANGE_H
#define FLPS_RDMA_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RDMA_XCH_MAGIC 0x44524c46u /* "FLRD" */
#define RDMA_XCH_VERSION 1
#define RDMA_XCH_TEXT_MAX 255
#define RDMA_XCH_MAX_CREDITS 4096
#define RDMA_XCH_MIN_SLOT 256
#define RDMA_XCH_MAX_SLOT ((uint32_t)64 << 20)
#define RDMA_XCH_MAX_LANDING ((uint64_t)1 << 40)
/* Bytes of a HELLO / ACCEPT; a REFUSE is RDMA_XCH_REFUSE_BYTES + text. */
#define RDMA_XCH_BYTES 92
#define RDMA_XCH_REFUSE_BYTES 10
#define RDMA_XCH_MAX_BYTES (RDMA_XCH_REFUSE_BYTES + RDMA_XCH_TEXT_MAX)

typedef enum {
    RDMA_XCH_HELLO = 1,  /* connector → listener */
    RDMA_XCH_ACCEPT = 2, /* listener → connector */
    RDMA_XCH_REFUSE = 3, /* listener → connector: text says why */
} rdma_xch_type;

typedef struct rdma_xch {
    rdma_xch_type type;
    uint32_t qp_num; /* 24 bits, not 0 */
    uint32_t psn;    /* 24 bits */
    uint16_t lid;
    uint8_t mtu; /* enum ibv_mtu, 1..5 */
    uint8_t gid_index;
    uint8_t gid[16];
    uint32_t credits;      /* receive slots posted for the other side */
    uint32_t slot_bytes;   /* bytes of each, a multiple of 8 */
    uint64_t landing_addr; /* region for large messages (0 with len 0) */
    uint64_t landing_len;
    uint32_t landing_rkey;
    uint32_t ctrl_rkey;
    uint64_t ctrl_addr;               /* 8-aligned block the credits go to */
    uint64_t max_message_bytes;       /* the largest message it accepts */
    uint64_t session;                 /* connector: which connection this is */
    char text[RDMA_XCH_TEXT_MAX + 1]; /* REFUSE */
} rdma_xch;

/* Write x into buf (cap bytes); *len: the bytes written. FLPS_EINVAL when
 * a field is out of its range (the same checks as decoding) or cap is too
 * small. */
flps_err rdma_xch_encode(const rdma_xch *x, unsigned char *buf, size_t cap,
                         size_t *len);

/* Decode and validate len bytes; FLPS_EPROTO, with one line in why that
 * says which field is wrong and what to do, for anything malformed. */
flps_err rdma_xch_decode(const void *buf, size_t len, rdma_xch *out, char *why,
                         size_t whylen);

#endif
