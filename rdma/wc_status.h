/* What each completion status of libibverbs means for a user: the cause
 * and what to check, one line each. */
#ifndef FLPS_RDMA_WC_STATUS_H
#define FLPS_RDMA_WC_STATUS_H

#include <infiniband/verbs.h>

/* The message for st: never NULL, a static string; a value this build
 * does not know gets a message that says so. */
const char *rdma_wc_status_message(enum ibv_wc_status st);

/* The status' name ("IBV_WC_RETRY_EXC_ERR"); never NULL. */
const char *rdma_wc_status_name(enum ibv_wc_status st);

#endif
