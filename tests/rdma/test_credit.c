/* Tests for rdma/credit.c: a sender never has more credits than the
 * receiver posted buffers, stale updates are harmless and impossible ones
 * refused, and the receiver's updates come when due. */
#include "rdma/credit.h"

#include <criterion/criterion.h>

Test(credit, a_sender_stops_at_the_window)
{
    rdma_credit c;

    rdma_credit_init(&c, 3);
    cr_assert_eq(rdma_credit_available(&c), 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rdma_credit_take(&c), FLPS_OK);
    cr_assert_eq(rdma_credit_available(&c), 0);
    cr_assert_eq(rdma_credit_take(&c), FLPS_ESTATE);
    cr_assert_eq(c.sent, 3, "a refused take changes nothing");
}

Test(credit, returned_counts_are_cumulative_and_stale_ones_ignored)
{
    rdma_credit c;

    rdma_credit_init(&c, 2);
    rdma_credit_take(&c);
    rdma_credit_take(&c);
    cr_assert_eq(rdma_credit_return(&c, 2), FLPS_OK);
    cr_assert_eq(rdma_credit_available(&c), 2);
    cr_assert_eq(rdma_credit_return(&c, 1), FLPS_OK, "stale, not an error");
    cr_assert_eq(rdma_credit_available(&c), 2);
    cr_assert_eq(rdma_credit_return(&c, 2), FLPS_OK, "a repeat");
    cr_assert_eq(rdma_credit_available(&c), 2);
}

Test(credit, a_peer_cannot_return_what_it_was_never_sent)
{
    rdma_credit c;

    rdma_credit_init(&c, 4);
    rdma_credit_take(&c);
    cr_assert_eq(rdma_credit_return(&c, 2), FLPS_EPROTO);
    cr_assert_eq(rdma_credit_available(&c), 3, "nothing changed");
    cr_assert_eq(rdma_credit_return(&c, UINT64_MAX), FLPS_EPROTO);
}

Test(credit, a_window_of_zero_has_no_credit)
{
    rdma_credit c;

    rdma_credit_init(&c, 0);
    cr_assert_eq(rdma_credit_take(&c), FLPS_ESTATE);
}

Test(credit, a_long_run_never_exceeds_the_window)
{
    rdma_credit c;
    rdma_credit_rx r;
    uint64_t in_flight = 0;

    rdma_credit_init(&c, 8);
    rdma_credit_rx_init(&r, 8);
    for (int step = 0; step < 10000; step++) {
        if (step % 3 != 2 && rdma_credit_take(&c) == FLPS_OK)
            in_flight++;
        cr_assert_leq(in_flight, 8);
        if (step % 5 == 0 && in_flight > 0) { /* the receiver reads one */
            in_flight--;
            rdma_credit_rx_reposted(&r);
        }
        if (rdma_credit_rx_update_is_due(&r, step % 7 == 0))
            cr_assert_eq(rdma_credit_return(&c, rdma_credit_rx_advertise(&r)),
                         FLPS_OK);
    }
}

Test(credit, the_receiver_updates_at_half_the_window_or_when_idle)
{
    rdma_credit_rx r;

    rdma_credit_rx_init(&r, 8);
    cr_assert_eq(r.threshold, 4);
    cr_assert_not(rdma_credit_rx_update_is_due(&r, 1), "nothing to say");
    rdma_credit_rx_reposted(&r);
    cr_assert_not(rdma_credit_rx_update_is_due(&r, 0));
    cr_assert(rdma_credit_rx_update_is_due(&r, 1));
    for (int i = 0; i < 3; i++)
        rdma_credit_rx_reposted(&r);
    cr_assert(rdma_credit_rx_update_is_due(&r, 0));
    cr_assert_eq(rdma_credit_rx_advertise(&r), 4);
    cr_assert_not(rdma_credit_rx_update_is_due(&r, 1));
    rdma_credit_rx_init(&r, 1);
    cr_assert_eq(r.threshold, 1);
}
