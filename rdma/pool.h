/* The registered buffer pools of the RDMA transport: how big they are for
 * a job's largest message, whether the memlock limit allows them, and the
 * registered regions and slot pools themselves.
 *
 * Per connection each side registers: `credits` receive slots and as many
 * send slots of slot_bytes (headers and small messages go by SEND from a
 * send slot into a receive slot); when the largest message does not fit a
 * slot, a large-message region the peer writes into (RDMA WRITE WITH IMM)
 * and a staging region of the same size to write from; and a small
 * credit block. */
#ifndef FLPS_RDMA_POOL_H
#define FLPS_RDMA_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "rdma/verbs.h"

#define RDMA_SLOT_BYTES_MAX 32768
#define RDMA_SLOT_BYTES_MIN 1024
#define RDMA_CTRL_BYTES 64

typedef struct rdma_pool_plan {
    uint32_t credits;
    size_t slot_bytes;    /* one receive or send slot */
    size_t landing_bytes; /* large-message region, 0 when slots suffice */
    uint64_t peer_bytes;  /* registered per connection, everything */
} rdma_pool_plan;

/* The pools for messages of up to max_message_bytes (payload, any number
 * of frames) with credits slots each way. FLPS_EINVAL, with why, for 0
 * credits, more than RDMA_XCH_MAX_CREDITS or a size that overflows. */
flps_err rdma_pool_plan_make(size_t max_message_bytes, uint32_t credits,
                             rdma_pool_plan *out, char *why, size_t whylen);

/* May the process lock need more bytes, having locked `locked` already,
 * under limit (UINT64_MAX: unlimited)? FLPS_ENOMEM, with a line naming the
 * bytes needed, the limit and how to raise it, when not. */
flps_err rdma_pool_memlock_check(uint64_t locked, uint64_t need, uint64_t limit,
                                 char *why, size_t whylen);

/* One registered region: page-aligned memory and its MR. */
typedef struct rdma_region {
    unsigned char *addr;
    size_t len;
    struct ibv_mr *mr;
} rdma_region;

/* Allocate len bytes (zeroed) and register them with access. On error
 * nothing is left and why says what failed (for ENOMEM/EPERM from
 * reg_mr: the memlock limit and how to raise it). */
flps_err rdma_region_init(rdma_region *r, const rdma_verbs *v,
                          struct ibv_pd *pd, size_t len, int access, char *why,
                          size_t whylen);

/* Deregister (the memory stays, for frames still in use). */
void rdma_region_dereg(rdma_region *r, const rdma_verbs *v);

/* Deregister if still registered and free the memory. Idempotent. */
void rdma_region_fini(rdma_region *r, const rdma_verbs *v);

/* A pool of n equal slots in one registered region. */
typedef struct rdma_slots {
    rdma_region reg;
    size_t slot_bytes;
    uint32_t n;
    uint32_t *free; /* a stack of free slot numbers */
    uint32_t nfree;
} rdma_slots;

flps_err rdma_slots_init(rdma_slots *s, const rdma_verbs *v, struct ibv_pd *pd,
                         uint32_t n, size_t slot_bytes, int access, char *why,
                         size_t whylen);
void rdma_slots_fini(rdma_slots *s, const rdma_verbs *v);

static inline unsigned char *rdma_slots_addr(const rdma_slots *s, uint32_t i)
{
    return s->reg.addr + (size_t)i * s->slot_bytes;
}

/* Take a free slot; FLPS_ESTATE when none is free. */
flps_err rdma_slots_get(rdma_slots *s, uint32_t *slot);

/* Give back slot (taken with rdma_slots_get). */
void rdma_slots_put(rdma_slots *s, uint32_t slot);

#endif
