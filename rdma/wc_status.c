/* The completion-status table: one row per enum ibv_wc_status value. */
#include "rdma/wc_status.h"

#include <stddef.h>

#define RDMA_WC_MAP(X)                                                         \
    X(IBV_WC_SUCCESS, "the work request completed")                            \
    X(IBV_WC_LOC_LEN_ERR,                                                      \
      "a message was longer than the receive buffer posted for it: the "       \
      "peers disagree on the buffer size (run the same flps version on both)") \
    X(IBV_WC_LOC_QP_OP_ERR,                                                    \
      "the local queue pair refused the request (too many scatter/gather "     \
      "entries or inline data too long): a bug in flps, please report it")     \
    X(IBV_WC_LOC_EEC_OP_ERR,                                                   \
      "local end-to-end context error (RD transport, which flps does not "     \
      "use): a driver problem")                                                \
    X(IBV_WC_LOC_PROT_ERR,                                                     \
      "a local buffer was not inside a region registered in this protection "  \
      "domain (wrong lkey or bounds): a bug in flps, please report it")        \
    X(IBV_WC_WR_FLUSH_ERR,                                                     \
      "the request was flushed because the queue pair had already failed: "    \
      "see the first error of this connection")                                \
    X(IBV_WC_MW_BIND_ERR,                                                      \
      "a memory window bind failed (flps binds none): a driver problem")       \
    X(IBV_WC_BAD_RESP_ERR,                                                     \
      "the peer sent an unexpected transport-layer response: check that both " \
      "ends use the same RDMA link layer and firmware")                        \
    X(IBV_WC_LOC_ACCESS_ERR,                                                   \
      "a local protection error on incoming data (the receive region lacks "   \
      "local write access): a bug in flps, please report it")                  \
    X(IBV_WC_REM_INV_REQ_ERR,                                                  \
      "the peer found the request invalid (a message longer than its "         \
      "receive buffer, or an operation its queue pair does not allow): run "   \
      "the same flps version on both ends")                                    \
    X(IBV_WC_REM_ACCESS_ERR,                                                   \
      "the peer refused an RDMA write (wrong rkey, or outside its registered " \
      "buffer): the exchanged buffer keys are stale, the peer restarted or "   \
      "its memory was deregistered")                                           \
    X(IBV_WC_REM_OP_ERR,                                                       \
      "the peer could not complete the operation (its receive queue or "       \
      "memory failed): see the peer's log")                                    \
    X(IBV_WC_RETRY_EXC_ERR,                                                    \
      "the peer did not acknowledge within the transport retries: it is gone " \
      "(process exited, node down) or unreachable (link down, wrong GID/LID, " \
      "RoCE needs the same subnet and a lossless or at least working path)")   \
    X(IBV_WC_RNR_RETRY_EXC_ERR,                                                \
      "the peer had no receive buffer posted (receiver not ready) after all "  \
      "retries: it stopped reading, or credit accounting was violated")        \
    X(IBV_WC_LOC_RDD_VIOL_ERR,                                                 \
      "local reliable-datagram domain violation (RD, which flps does not "     \
      "use): a driver problem")                                                \
    X(IBV_WC_REM_INV_RD_REQ_ERR,                                               \
      "the peer found an RDMA read request invalid: its buffer keys or "       \
      "bounds do not match")                                                   \
    X(IBV_WC_REM_ABORT_ERR,                                                    \
      "the peer aborted the operation: see the peer's log")                    \
    X(IBV_WC_INV_EECN_ERR,                                                     \
      "invalid end-to-end context number (RD, unused by flps): a driver "      \
      "problem")                                                               \
    X(IBV_WC_INV_EEC_STATE_ERR,                                                \
      "invalid end-to-end context state (RD, unused by flps): a driver "       \
      "problem")                                                               \
    X(IBV_WC_FATAL_ERR,                                                        \
      "the adapter reported a fatal error: check dmesg and `ibv_devinfo`; "    \
      "the device may need a reset or a firmware update")                      \
    X(IBV_WC_RESP_TIMEOUT_ERR,                                                 \
      "the peer's response timed out: it is overloaded, gone or the path "     \
      "drops packets")                                                         \
    X(IBV_WC_GENERAL_ERR,                                                      \
      "the adapter reported a general error: check dmesg and the driver "      \
      "version")                                                               \
    X(IBV_WC_TM_ERR,                                                           \
      "a tag-matching operation failed (flps uses none): a driver problem")    \
    X(IBV_WC_TM_RNDV_INCOMPLETE,                                               \
      "a tag-matching rendezvous did not complete (flps uses none): a driver " \
      "problem")

static const struct {
    const char *name;
    const char *msg;
} rdma_wc_table[] = {
#define X(code, msg) [code] = {#code, msg},
    RDMA_WC_MAP(X)
#undef X
};

#define RDMA_WC_COUNT (sizeof(rdma_wc_table) / sizeof(rdma_wc_table[0]))

const char *rdma_wc_status_message(enum ibv_wc_status st)
{
    if ((size_t)st >= RDMA_WC_COUNT || rdma_wc_table[st].msg == NULL)
        return "an unknown completion status (newer than this build of "
               "flps): check the driver's documentation";
    return rdma_wc_table[st].msg;
}

const char *rdma_wc_status_name(enum ibv_wc_status st)
{
    if ((size_t)st >= RDMA_WC_COUNT || rdma_wc_table[st].name == NULL)
        return "IBV_WC_UNKNOWN";
    return rdma_wc_table[st].name;
}
