/* Tests for rdma/wc_status.c: every completion status has its own message
 * that tells the cause, and the common failures say what to check. */
#include "rdma/wc_status.h"

#include <criterion/criterion.h>
#include <string.h>

Test(wc_status, every_status_has_a_distinct_helpful_message)
{
    for (int a = IBV_WC_SUCCESS; a <= IBV_WC_TM_RNDV_INCOMPLETE; a++) {
        const char *m = rdma_wc_status_message((enum ibv_wc_status)a);
        const char *n = rdma_wc_status_name((enum ibv_wc_status)a);
        cr_assert_not_null(m);
        cr_assert_gt(strlen(m), 20, "status %d: \"%s\" says too little", a, m);
        cr_assert(strstr(m, "unknown") == NULL, "status %d is unknown", a);
        cr_assert_eq(strncmp(n, "IBV_WC_", 7), 0, "%s", n);
        for (int b = IBV_WC_SUCCESS; b < a; b++) {
            cr_assert_str_neq(m, rdma_wc_status_message((enum ibv_wc_status)b),
                              "statuses %d and %d share a message", a, b);
            cr_assert_str_neq(n, rdma_wc_status_name((enum ibv_wc_status)b));
        }
    }
}

Test(wc_status, names_match_the_enum)
{
    cr_assert_str_eq(rdma_wc_status_name(IBV_WC_SUCCESS), "IBV_WC_SUCCESS");
    cr_assert_str_eq(rdma_wc_status_name(IBV_WC_RETRY_EXC_ERR),
                     "IBV_WC_RETRY_EXC_ERR");
    cr_assert_str_eq(rdma_wc_status_name(IBV_WC_TM_RNDV_INCOMPLETE),
                     "IBV_WC_TM_RNDV_INCOMPLETE");
}

Test(wc_status, the_common_failures_say_what_to_check)
{
    cr_assert(strstr(rdma_wc_status_message(IBV_WC_RETRY_EXC_ERR), "gone"));
    cr_assert(strstr(rdma_wc_status_message(IBV_WC_RNR_RETRY_EXC_ERR),
                     "receive buffer"));
    cr_assert(strstr(rdma_wc_status_message(IBV_WC_REM_ACCESS_ERR), "rkey"));
    cr_assert(
        strstr(rdma_wc_status_message(IBV_WC_WR_FLUSH_ERR), "first error"));
    cr_assert(strstr(rdma_wc_status_message(IBV_WC_FATAL_ERR), "ibv_devinfo"));
}

Test(wc_status, a_value_beyond_the_table_is_called_unknown)
{
    const char *m = rdma_wc_status_message((enum ibv_wc_status)999);
    cr_assert(strstr(m, "unknown") != NULL, "%s", m);
    cr_assert_str_eq(rdma_wc_status_name((enum ibv_wc_status)999),
                     "IBV_WC_UNKNOWN");
}
