/* Tests for rdma/verbs_real.c: the RDMA transport on the real libibverbs.
 * Where the machine has no RDMA device it must say so, with the fix; where
 * one with an active port exists (a NIC or soft-RoCE), a listener and a
 * connector in this process move messages through it; otherwise that test
 * says it skipped and why. */
#include "rdma/rdma.h"

#include <criterion/criterion.h>
#include <string.h>

#include "rdma/verbs.h"

static int device_count(void)
{
    const rdma_verbs *v = rdma_verbs_real();
    int n = 0;
    struct ibv_device **l = v->get_device_list(&n);

    if (l != NULL)
        v->free_device_list(l);
    return l == NULL ? 0 : n;
}

Test(verbs_real, without_a_device_says_so_and_how_to_fix_it)
{
    transport_rdma_options o;
    transport *t = NULL;
    char why[512];

    if (device_count() > 0)
        cr_skip_test("this machine has an RDMA device");
    transport_rdma_options_init(&o);
    cr_assert_eq(transport_rdma_create(&o, &t, why, sizeof(why)), FLPS_ECONFIG);
    cr_assert_null(t);
    cr_assert(strstr(why, "no RDMA device") != NULL, "%s", why);
    cr_assert(strstr(why, "transport: zmq") != NULL, "%s", why);
}

Test(verbs_real, the_memlock_limit_is_readable)
{
    uint64_t b = 0;

    cr_assert_eq(rdma_verbs_real()->memlock_limit(&b), 0);
    cr_assert_gt(b, 0);
}

Test(verbs_real, moves_messages_over_a_real_device, .timeout = 60)
{
    transport_rdma_options o;
    transport *srv = NULL, *cli = NULL;
    char why[512], bound[256];
    uint32_t to_srv;
    transport_rx *rx = NULL;
    proto_buf *b;
    transport_frame f[2];
    const size_t big = 4u << 20;

    transport_rdma_options_init(&o);
    o.max_message_bytes = big + 4096;
    o.credits = 8;
    if (transport_rdma_create(&o, &srv, why, sizeof(why)) != FLPS_OK)
        cr_skip_test("no usable RDMA device here: %s", why);
    cr_assert_eq(transport_rdma_create(&o, &cli, why, sizeof(why)), FLPS_OK,
                 "%s", why);
    cr_assert_eq(
        transport_listen(srv, "tcp://127.0.0.1:0", bound, sizeof(bound)),
        FLPS_OK, "%s", srv->errmsg);
    cr_assert_eq(transport_connect(cli, bound, &to_srv), FLPS_OK);
    b = proto_buf_create(big);
    memset(proto_buf_data(b), 0x5a, big);
    f[0] = (transport_frame){b, 0, 64};
    f[1] = (transport_frame){b, 0, big};
    cr_assert_eq(transport_send(cli, to_srv, f, 1), FLPS_OK);
    cr_assert_eq(transport_send(cli, to_srv, f, 2), FLPS_OK);
    proto_buf_release(b);
    cr_assert_eq(transport_recv(srv, 10000, &rx), FLPS_OK, "%s", srv->errmsg);
    cr_assert_eq(rx->nframes, 1);
    transport_rx_release(rx);
    cr_assert_eq(transport_recv(srv, 10000, &rx), FLPS_OK, "%s", srv->errmsg);
    cr_assert_eq(rx->nframes, 2);
    cr_assert_eq(rx->frames[1].len, big);
    cr_assert_eq(((const unsigned char *)rx->frames[1].data)[big - 1], 0x5a);
    transport_rx_release(rx);
    transport_destroy(cli);
    transport_destroy(srv);
}
