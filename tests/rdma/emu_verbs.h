/* An in-process emulated RDMA NIC behind the verbs seam (rdma/verbs.h), for
 * tests: one device "emu0" with port 1 ACTIVE, protection domains, memory
 * regions whose keys and bounds are checked on every access, RC queue
 * pairs connected by qp_num (modify_qp to RTR carries dest_qp_num), SEND /
 * RECV, RDMA WRITE and WRITE_WITH_IMM, completions through poll_cq.
 * Work requests are carried out when posted, so completions are in
 * order per queue pair as on hardware. It reaches only within one process.
 *
 * What it does as hardware would:
 *  - a SEND or WRITE_WITH_IMM that finds no posted RECV fails with
 *    IBV_WC_RNR_RETRY_EXC_ERR (the RNR retries are taken as exhausted at
 *    once, whatever rnr_retry says), and both queue pairs go to ERR;
 *  - a WRITE with a wrong rkey, into a region without REMOTE_WRITE, or out
 *    of its bounds fails with IBV_WC_REM_ACCESS_ERR; a local sge with a
 *    wrong lkey or out of bounds with IBV_WC_LOC_PROT_ERR; a SEND longer
 *    than the RECV's buffers with IBV_WC_REM_INV_REQ_ERR (the receiver
 *    sees IBV_WC_LOC_LEN_ERR);
 *  - a request to a queue pair that does not exist (destroyed, vanished,
 *    never created) fails with IBV_WC_RETRY_EXC_ERR;
 *  - a queue pair in ERR completes what is posted to it, and flushes its
 *    posted RECVs, with IBV_WC_WR_FLUSH_ERR.
 * Thread-safe: one lock guards the whole emulated NIC. */
#ifndef FLPS_TESTS_RDMA_EMU_VERBS_H
#define FLPS_TESTS_RDMA_EMU_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "rdma/verbs.h"

/* The table; its memlock_limit answers UINT64_MAX unless
 * rdma_emu_set_memlock_limit set one. */
const rdma_verbs *rdma_emu_verbs(void);

/* Forget the knobs (and the counts of what a test leaked), between tests.
 * Objects still alive are not freed. */
void rdma_emu_reset(void);

/* Registered regions / queue pairs / protection domains / completion
 * queues / open devices alive now: for leak checks. */
size_t rdma_emu_live_mrs(void);
size_t rdma_emu_live_qps(void);
size_t rdma_emu_live_pds(void);
size_t rdma_emu_live_cqs(void);
size_t rdma_emu_live_contexts(void);

/* Failure injection. */
/* on: ibv_get_device_list returns an empty list. */
void rdma_emu_set_no_device(int on);
/* on: port 1 is IBV_PORT_DOWN. */
void rdma_emu_set_port_down(int on);
/* The next reg_mr fails with errno err (ENOMEM: as when the memlock limit
 * is reached); 0 cancels. */
void rdma_emu_fail_next_reg_mr(int err);
/* The next create_qp fails with errno err; 0 cancels. */
void rdma_emu_fail_next_create_qp(int err);
/* What memlock_limit answers (UINT64_MAX: unlimited, the default). */
void rdma_emu_set_memlock_limit(uint64_t bytes);
/* Queue pair qpn vanishes, as when its process dies: requests to it fail
 * with IBV_WC_RETRY_EXC_ERR, and its own posted work is flushed with
 * IBV_WC_WR_FLUSH_ERR. Its owner may still destroy it. 0 on success, -1
 * when no such queue pair exists. */
int rdma_emu_vanish_qp(uint32_t qpn);
/* Every queue pair alive, in creation order (up to max): to pick one to
 * vanish. Returns how many exist. */
size_t rdma_emu_qp_numbers(uint32_t *qpns, size_t max);

#endif
