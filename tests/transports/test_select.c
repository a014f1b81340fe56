/* Tests for transports/select.c: what transport: zmq | rdma | auto
 * makes on a node with no RDMA device (this machine, or a fake sysfs
 * without one) and on a fake node with an ACTIVE port, and that rdma fails
 * at once with the cause and the fix where it cannot run. */
#include <criterion/criterion.h>

#include <string.h>

#include "common/clock.h"
#include "tests/fakes/fake_sysfs.h"
#include "transports/select.h"

/* A ZeroMQ transport that works: it binds and reports the address. */
static void assert_zmq_listens(transport *t)
{
    char bound[128];

    cr_assert_str_eq(t->vt->name, "zmq");
    cr_assert_eq(transport_listen(t, "tcp://127.0.0.1:0", bound, sizeof(bound)),
                 FLPS_OK, "%s", t->errmsg);
    cr_assert(strncmp(bound, "tcp://127.0.0.1:", 16) == 0, "%s", bound);
}

Test(transport_select, names_and_parses_the_three_kinds)
{
    transport_kind k = TRANSPORT_KIND_ZMQ;

    cr_assert_eq(transport_kind_parse("rdma", &k), 1);
    cr_assert_eq(k, TRANSPORT_KIND_RDMA);
    cr_assert_eq(transport_kind_parse("auto", &k), 1);
    cr_assert_eq(k, TRANSPORT_KIND_AUTO);
    cr_assert_eq(transport_kind_parse("zmq", &k), 1);
    cr_assert_eq(k, TRANSPORT_KIND_ZMQ);
    cr_assert_eq(transport_kind_parse("tcp", &k), 0);
    cr_assert_eq(transport_kind_parse(NULL, &k), 0);
    cr_assert_str_eq(transport_kind_name(TRANSPORT_KIND_AUTO), "auto");
    cr_assert_str_eq(transport_kind_name((transport_kind)9), "unknown");
}

Test(transport_select, one_table_lists_describes_and_builds_the_kinds)
{
    char buf[64];

    cr_assert_str_eq(transport_kind_choices(buf, sizeof(buf)),
                     "zmq, rdma or auto");
    cr_assert_str_eq(transport_kind_choices(buf, 8), "zmq, rd", "cut to len");
    cr_assert(strstr(transport_kind_what(TRANSPORT_KIND_RDMA), "RDMA") != NULL);
    cr_assert_str_eq(transport_kind_what((transport_kind)9), "unknown");
    cr_assert_eq(transport_is_built(TRANSPORT_KIND_ZMQ), 1, "always built");
    cr_assert_eq(transport_is_built(TRANSPORT_KIND_AUTO), 1,
                 "auto can always fall back to ZeroMQ");
    cr_assert_eq(transport_is_built((transport_kind)9), 0);
}

Test(transport_select, zmq_makes_zeromq_with_the_listeners_limits)
{
    transport_limits lim = {16, 1 << 20, 70000, 0, 0, 0, 0};
    transport_select o = {.kind = TRANSPORT_KIND_ZMQ};
    transport_kind chosen = TRANSPORT_KIND_RDMA;
    transport *t = NULL;
    char why[512];

    cr_assert_eq(transport_create_for(&o, &t, &chosen, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(chosen, TRANSPORT_KIND_ZMQ);
    cr_assert_str_eq(why, "", "nothing to report for zmq");
    assert_zmq_listens(t);
    transport_destroy(t);

    /* The limits reach the transport: ZeroMQ refuses 70000 peers. */
    o.listener = 1;
    o.limits = &lim;
    t = NULL;
    cr_assert_eq(transport_create_for(&o, &t, NULL, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_null(t);
    cr_assert(strstr(why, "limits") != NULL, "%s", why);
}

Test(transport_select, rdma_on_a_node_without_a_device_fails_at_once)
{
    fake_sysfs s;
    transport_select o = {.kind = TRANSPORT_KIND_RDMA};
    transport *t = NULL;
    char why[768];
    double t0;

    fake_sysfs_init(&s, 1);
    o.sysfs_root = s.root;
    t0 = flps_mono_s();
    cr_assert_eq(transport_create_for(&o, &t, NULL, why, sizeof(why)),
                 FLPS_ECONFIG);
    cr_assert_lt(flps_mono_s() - t0, 5.0, "no waiting on anything");
    cr_assert_null(t, "nothing is made");
    cr_assert(
        strncmp(why, "transport: rdma: no RDMA device on this node (", 46) == 0,
        "%s", why);
    cr_assert(strstr(why, "class/infiniband is empty); run on nodes with "
                          "RDMA NICs (check with ibv_devinfo), or set "
                          "transport: zmq or auto") != NULL,
              "%s", why);
    fake_sysfs_fini(&s);
}

Test(transport_select, rdma_on_ports_that_are_down_names_them)
{
    fake_sysfs s;
    transport_select o = {.kind = TRANSPORT_KIND_RDMA};
    transport *t = NULL;
    char why[768];

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "mlx5_0", 1, "1: DOWN\n", "InfiniBand\n", 1);
    o.sysfs_root = s.root;
    cr_assert_eq(transport_create_for(&o, &t, NULL, why, sizeof(why)),
                 FLPS_ECONFIG);
    cr_assert(strstr(why, "transport: rdma: no RDMA port is ACTIVE on this "
                          "node (mlx5_0 port 1 DOWN") != NULL,
              "%s", why);
    fake_sysfs_fini(&s);
}

Test(transport_select, rdma_with_an_active_port_needs_a_build_with_rdma)
{
    fake_sysfs s;
    transport_select o = {.kind = TRANSPORT_KIND_RDMA};
    transport *t = NULL;
    char why[768];
    flps_err rc;

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
    o.sysfs_root = s.root;
    rc = transport_create_for(&o, &t, NULL, why, sizeof(why));
    if (transport_is_built(TRANSPORT_KIND_RDMA)) {
        /* The fake sysfs has a port; libibverbs finds no device behind it
         * on this machine, and the transport says so in its own words. */
        if (rc == FLPS_OK) {
            transport_destroy(t);
            cr_skip_test("this machine has a real RDMA device");
        }
        cr_assert_neq(rc, FLPS_OK);
        cr_assert(strncmp(why, "transport: rdma: ", 17) == 0, "%s", why);
    } else {
        cr_assert_eq(rc, FLPS_ECONFIG);
        cr_assert_str_eq(why, "transport: rdma: this build has no RDMA support "
                              "(libibverbs-dev and librdmacm-dev were not "
                              "found when it was built); rebuild flps where "
                              "they are installed, or set transport: zmq or "
                              "auto");
    }
    cr_assert_null(t);
    fake_sysfs_fini(&s);
}

Test(transport_select, auto_without_a_device_falls_back_to_zeromq_and_says_why)
{
    fake_sysfs s;
    transport_select o = {.kind = TRANSPORT_KIND_AUTO};
    transport_kind chosen = TRANSPORT_KIND_RDMA;
    transport *t = NULL;
    char why[768];

    fake_sysfs_init(&s, 0);
    o.sysfs_root = s.root;
    cr_assert_eq(transport_create_for(&o, &t, &chosen, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(chosen, TRANSPORT_KIND_ZMQ);
    cr_assert(strncmp(why,
                      "transport: auto: ZeroMQ, because no RDMA device on "
                      "this node (",
                      62) == 0,
              "%s", why);
    cr_assert(strstr(why, "does not exist)") != NULL, "%s", why);
    cr_assert_null(strstr(why, "or set transport"),
                   "auto has applied the fix already: %s", why);
    assert_zmq_listens(t);
    transport_destroy(t);
    fake_sysfs_fini(&s);
}

Test(transport_select, auto_with_an_active_port_takes_rdma_only_where_it_runs)
{
    fake_sysfs s;
    transport_select o = {.kind = TRANSPORT_KIND_AUTO};
    transport_kind chosen = TRANSPORT_KIND_ZMQ;
    transport *t = NULL;
    char why[768];

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
    o.sysfs_root = s.root;
    cr_assert_eq(transport_create_for(&o, &t, &chosen, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    if (chosen == TRANSPORT_KIND_RDMA) {
        cr_assert(strstr(why, "transport: auto: RDMA, because this node has "
                              "an ACTIVE RDMA port (mlx5_0:1)") != NULL,
                  "%s", why);
    } else {
        /* No build support, or no real device behind the fake sysfs: the
         * job still runs, on ZeroMQ, and the line says why. */
        cr_assert(strncmp(why, "transport: auto: ZeroMQ, because ", 33) == 0,
                  "%s", why);
        if (!transport_is_built(TRANSPORT_KIND_RDMA))
            cr_assert(strstr(why, "this build has no RDMA support") != NULL,
                      "%s", why);
        assert_zmq_listens(t);
    }
    transport_destroy(t);
    fake_sysfs_fini(&s);
}

Test(transport_select, refuses_missing_arguments_and_unknown_kinds)
{
    transport_select o = {.kind = (transport_kind)7};
    transport *t = NULL;
    char why[256];

    cr_assert_eq(transport_create_for(NULL, &t, NULL, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_eq(transport_create_for(&o, NULL, NULL, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_eq(transport_create_for(&o, &t, NULL, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert(strstr(why, "use zmq, rdma or auto") != NULL, "%s", why);
    cr_assert_null(t);
}

Test(transport_select, resolve_decides_as_create_would_without_making_anything)
{
    fake_sysfs none, one;
    transport_select o = {.kind = TRANSPORT_KIND_AUTO};
    transport_kind chosen = TRANSPORT_KIND_RDMA;
    char why[768];

    fake_sysfs_init(&none, 1);
    fake_sysfs_init(&one, 1);
    fake_sysfs_port(&one, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 2);

    o.sysfs_root = none.root;
    cr_assert_eq(transport_resolve(&o, &chosen, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(chosen, TRANSPORT_KIND_ZMQ);
    cr_assert(strstr(why, "transport: auto: ZeroMQ, because no RDMA device") ==
                  why,
              "%s", why);

    o.kind = TRANSPORT_KIND_RDMA;
    cr_assert_eq(transport_resolve(&o, &chosen, why, sizeof(why)),
                 FLPS_ECONFIG);
    cr_assert(strstr(why, "transport: rdma: no RDMA device") == why, "%s", why);

    o.sysfs_root = one.root;
    o.kind = TRANSPORT_KIND_AUTO;
    cr_assert_eq(transport_resolve(&o, &chosen, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(chosen,
                 transport_is_built(TRANSPORT_KIND_RDMA) ? TRANSPORT_KIND_RDMA
                                                         : TRANSPORT_KIND_ZMQ,
                 "%s", why);
    o.kind = TRANSPORT_KIND_RDMA;
    cr_assert_eq(transport_resolve(&o, &chosen, why, sizeof(why)),
                 transport_is_built(TRANSPORT_KIND_RDMA) ? FLPS_OK
                                                         : FLPS_ECONFIG,
                 "%s", why);

    o.kind = TRANSPORT_KIND_ZMQ;
    cr_assert_eq(transport_resolve(&o, &chosen, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(chosen, TRANSPORT_KIND_ZMQ);
    cr_assert_str_eq(why, "");
    fake_sysfs_fini(&none);
    fake_sysfs_fini(&one);
}
