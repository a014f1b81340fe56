/* transports/select.c where the RDMA transport is built: over the
 * emulated NIC (with a fake sysfs showing its device emu0, as the probe
 * reads sysfs), transport: auto takes RDMA and a shard and a client made by
 * the factory talk over it; where the transport cannot be made (a port
 * down, a memlock limit too low) rdma fails with the transport's own
 * reason and auto falls back to ZeroMQ saying it. */
#include <criterion/criterion.h>

#include <string.h>

#include "emu_verbs.h"
#include "tests/fakes/fake_sysfs.h"
#include "transports/select.h"

#define WAIT_MS 10000

static fake_sysfs sys;

static void setup(void)
{
    rdma_emu_reset();
    fake_sysfs_init(&sys, 1);
    fake_sysfs_port(&sys, "emu0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
}

static void teardown(void)
{
    fake_sysfs_fini(&sys);
    rdma_emu_reset();
}

TestSuite(transport_select_rdma, .init = setup, .fini = teardown);

static transport_select sel(transport_kind kind)
{
    transport_select o = {.kind = kind};

    o.verbs = rdma_emu_verbs();
    o.sysfs_root = sys.root;
    o.max_message_bytes = 1 << 16;
    return o;
}

Test(transport_select_rdma, auto_takes_rdma_and_the_two_ends_talk_over_it)
{
    transport_select lo = sel(TRANSPORT_KIND_AUTO),
                     co = sel(TRANSPORT_KIND_RDMA);
    transport_limits lim = {64, 1 << 20, 16, 0, 0, 0, 0};
    transport_kind chosen = TRANSPORT_KIND_ZMQ;
    transport *srv = NULL, *cli = NULL;
    transport_rx *rx = NULL;
    transport_frame f;
    char why[768], bound[256];
    uint32_t peer;
    proto_buf *b;

    cr_assert(transport_is_built(TRANSPORT_KIND_RDMA));
    lo.listener = 1;
    lo.limits = &lim;
    cr_assert_eq(transport_create_for(&lo, &srv, &chosen, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(chosen, TRANSPORT_KIND_RDMA);
    cr_assert_str_eq(srv->vt->name, "rdma");
    cr_assert_str_eq(why, "transport: auto: RDMA, because this node has an "
                          "ACTIVE RDMA port (emu0:1)");
    cr_assert_eq(
        transport_listen(srv, "tcp://127.0.0.1:0", bound, sizeof(bound)),
        FLPS_OK, "%s", srv->errmsg);
    cr_assert_eq(transport_create_for(&co, &cli, &chosen, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(chosen, TRANSPORT_KIND_RDMA);
    cr_assert_str_eq(why, "", "rdma as asked: nothing to say");
    cr_assert_eq(transport_connect(cli, bound, &peer), FLPS_OK, "%s",
                 cli->errmsg);
    b = proto_buf_create(100);
    cr_assert_not_null(b);
    memset(proto_buf_data(b), 0x5a, 100);
    f.buf = b;
    f.off = 0;
    f.len = 100;
    cr_assert_eq(transport_send(cli, peer, &f, 1), FLPS_OK, "%s", cli->errmsg);
    proto_buf_release(b);
    cr_assert_eq(transport_recv(srv, WAIT_MS, &rx), FLPS_OK, "%s", srv->errmsg);
    cr_assert_eq(rx->nframes, 1);
    cr_assert_eq(rx->frames[0].len, 100);
    cr_assert_eq(((const unsigned char *)rx->frames[0].data)[99], 0x5a);
    transport_rx_release(rx);
    transport_destroy(cli);
    transport_destroy(srv);
    cr_assert_eq(rdma_emu_live_mrs(), 0, "no registered memory left");
    cr_assert_eq(rdma_emu_live_qps(), 0);
}

Test(transport_select_rdma,
     a_port_the_nic_says_is_down_fails_rdma_and_auto_falls_back)
{
    transport_select o = sel(TRANSPORT_KIND_RDMA);
    transport_kind chosen = TRANSPORT_KIND_RDMA;
    transport *t = NULL;
    char why[768];

    /* sysfs said ACTIVE a moment ago; the NIC now says DOWN. */
    rdma_emu_set_port_down(1);
    cr_assert_neq(transport_create_for(&o, &t, NULL, why, sizeof(why)),
                  FLPS_OK);
    cr_assert_null(t);
    cr_assert(strncmp(why, "transport: rdma: ", 17) == 0, "%s", why);
    cr_assert_eq(rdma_emu_live_contexts(), 0, "nothing left open");

    o.kind = TRANSPORT_KIND_AUTO;
    cr_assert_eq(transport_create_for(&o, &t, &chosen, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(chosen, TRANSPORT_KIND_ZMQ);
    cr_assert_str_eq(t->vt->name, "zmq");
    cr_assert(strncmp(why, "transport: auto: ZeroMQ, because ", 33) == 0, "%s",
              why);
    transport_destroy(t);
}

Test(transport_select_rdma, a_memlock_limit_too_low_is_said_with_the_numbers)
{
    transport_select o = sel(TRANSPORT_KIND_RDMA);
    transport *t = NULL;
    char why[1024];

    rdma_emu_set_memlock_limit(4096);
    cr_assert_neq(transport_create_for(&o, &t, NULL, why, sizeof(why)),
                  FLPS_OK);
    cr_assert_null(t);
    cr_assert(strncmp(why, "transport: rdma: ", 17) == 0, "%s", why);
    cr_assert(strstr(why, "ulimit -l") != NULL, "the fix: %s", why);
    cr_assert_eq(rdma_emu_live_mrs(), 0);
}
