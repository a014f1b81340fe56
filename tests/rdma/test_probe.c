/* Tests for rdma/probe.c: devices, port states, link layers and GIDs read
 * from a fake sysfs, the memlock limit, and the messages that say why RDMA
 * cannot run on a node. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "rdma/probe.h"
#include "tests/fakes/fake_sysfs.h"

Test(rdma_probe, a_node_without_the_infiniband_class_has_no_device)
{
    fake_sysfs s;
    rdma_probe p;
    char why[512];

    fake_sysfs_init(&s, 0);
    cr_assert_eq(rdma_probe_run(s.root, &p), FLPS_OK);
    cr_assert_eq(p.ndevs, 0);
    cr_assert_eq(p.ib_dir_present, 0);
    cr_assert_eq(rdma_probe_active_ports(&p), 0);
    cr_assert_eq(rdma_probe_first_active(&p, NULL, NULL), 0);
    cr_assert_eq(rdma_probe_usable(&p, 0, why, sizeof(why)), 0);
    cr_assert(strstr(why, "no RDMA device on this node") != NULL, "%s", why);
    cr_assert(strstr(why, "/class/infiniband does not exist") != NULL, "%s",
              why);
    cr_assert(strstr(why, "ibv_devinfo") != NULL, "the fix: %s", why);
    cr_assert(strstr(why, "transport: zmq or auto") != NULL, "%s", why);
    fake_sysfs_fini(&s);
}

Test(rdma_probe, an_empty_infiniband_class_says_it_is_empty)
{
    fake_sysfs s;
    rdma_probe p;
    char why[512];

    fake_sysfs_init(&s, 1);
    cr_assert_eq(rdma_probe_run(s.root, &p), FLPS_OK);
    cr_assert_eq(p.ib_dir_present, 1);
    cr_assert_eq(p.ndevs, 0);
    cr_assert_eq(rdma_probe_usable(&p, 0, why, sizeof(why)), 0);
    cr_assert(strstr(why, "/class/infiniband is empty") != NULL, "%s", why);
    fake_sysfs_fini(&s);
}

Test(rdma_probe, reads_devices_ports_states_link_layers_and_gids_in_order)
{
    fake_sysfs s;
    rdma_probe p;
    const char *dev = NULL;
    uint8_t port = 0;
    char buf[512];

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "mlx5_1", 1, "4: ACTIVE\n", "Ethernet\n", 3);
    fake_sysfs_port(&s, "mlx5_0", 2, "4: ACTIVE\n", "InfiniBand\n", 1);
    fake_sysfs_port(&s, "mlx5_0", 1, "1: DOWN\n", "InfiniBand\n", 0);
    cr_assert_eq(rdma_probe_run(s.root, &p), FLPS_OK);
    cr_assert_eq(p.ndevs, 2);
    cr_assert_str_eq(p.devs[0].name, "mlx5_0", "devices by name");
    cr_assert_eq(p.devs[0].nports, 2);
    cr_assert_eq(p.devs[0].ports[0].num, 1, "ports by number");
    cr_assert_eq(p.devs[0].ports[0].active, 0);
    cr_assert_str_eq(p.devs[0].ports[0].state, "DOWN");
    cr_assert_eq(p.devs[0].ports[1].active, 1);
    cr_assert_str_eq(p.devs[0].ports[1].link_layer, "InfiniBand");
    cr_assert_eq(p.devs[0].ports[1].gids, 1, "zero GIDs are empty slots");
    cr_assert_eq(p.devs[1].ports[0].gids, 3);
    cr_assert_str_eq(p.devs[1].ports[0].link_layer, "Ethernet");
    cr_assert_eq(rdma_probe_active_ports(&p), 2);
    cr_assert_eq(rdma_probe_first_active(&p, &dev, &port), 1);
    cr_assert_str_eq(dev, "mlx5_0");
    cr_assert_eq(port, 2);
    cr_assert_str_eq(rdma_probe_active_list(&p, buf, sizeof(buf)),
                     "mlx5_0:2,mlx5_1:1");
    rdma_probe_describe(&p, buf, sizeof(buf));
    cr_assert_str_eq(buf, "mlx5_0 port 1 DOWN InfiniBand 0 GIDs; mlx5_0 port "
                          "2 ACTIVE InfiniBand 1 GID; mlx5_1 port 1 ACTIVE "
                          "Ethernet 3 GIDs");
    cr_assert_eq(rdma_probe_usable(&p, 0, buf, sizeof(buf)), 1, "%s", buf);
    cr_assert_str_eq(buf, "");
    fake_sysfs_fini(&s);
}

Test(rdma_probe, ports_that_are_all_down_name_each_port_and_the_checks)
{
    fake_sysfs s;
    rdma_probe p;
    char why[1024];

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "mlx4_0", 1, "1: DOWN\n", "InfiniBand\n", 1);
    fake_sysfs_port(&s, "mlx4_0", 2, "2: INIT\n", "InfiniBand\n", 1);
    cr_assert_eq(rdma_probe_run(s.root, &p), FLPS_OK);
    cr_assert_eq(rdma_probe_active_ports(&p), 0);
    cr_assert_eq(rdma_probe_usable(&p, 0, why, sizeof(why)), 0);
    cr_assert(strstr(why, "no RDMA port is ACTIVE on this node") != NULL, "%s",
              why);
    cr_assert(strstr(why, "mlx4_0 port 1 DOWN") != NULL, "%s", why);
    cr_assert(strstr(why, "mlx4_0 port 2 INIT") != NULL, "%s", why);
    cr_assert(strstr(why, "subnet manager") != NULL, "%s", why);
    fake_sysfs_fini(&s);
}

Test(rdma_probe, an_active_roce_port_without_a_gid_asks_for_an_address)
{
    fake_sysfs s;
    rdma_probe p;
    char why[1024];

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "rxe0", 1, "4: ACTIVE\n", "Ethernet\n", 0);
    cr_assert_eq(rdma_probe_run(s.root, &p), FLPS_OK);
    cr_assert_eq(rdma_probe_active_ports(&p), 1);
    cr_assert_eq(rdma_probe_usable(&p, 0, why, sizeof(why)), 0);
    cr_assert(strstr(why, "no RDMA port with an address") != NULL, "%s", why);
    cr_assert(strstr(why, "IP address") != NULL, "%s", why);
    fake_sysfs_fini(&s);
}

Test(rdma_probe, a_memlock_limit_below_the_need_says_both_numbers_and_how)
{
    fake_sysfs s;
    rdma_probe p;
    char why[1024];

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
    cr_assert_eq(rdma_probe_run(s.root, &p), FLPS_OK);
    p.memlock = 8 << 20; /* what many distributions set */
    cr_assert_eq(rdma_probe_usable(&p, 64ULL << 20, why, sizeof(why)), 0);
    cr_assert(strstr(why, "the memlock limit is 8 MiB") != NULL, "%s", why);
    cr_assert(strstr(why, "at least 64 MiB (67108864 bytes)") != NULL, "%s",
              why);
    cr_assert(strstr(why, "ulimit -l") != NULL, "%s", why);
    cr_assert(strstr(why, "IPC_LOCK") != NULL, "%s", why);
    cr_assert(strstr(why, "agent.rdma.enabled") != NULL, "the Helm value: %s",
              why);
    p.memlock = -1;
    cr_assert_eq(rdma_probe_usable(&p, 64ULL << 20, why, sizeof(why)), 1,
                 "unlimited is enough: %s", why);
    p.memlock = 64 << 20;
    cr_assert_eq(rdma_probe_usable(&p, 64ULL << 20, why, sizeof(why)), 1);
    fake_sysfs_fini(&s);
}

Test(rdma_probe, reads_this_processes_memlock_limit)
{
    struct rlimit rl;
    rdma_probe p;

    cr_assert_eq(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
    cr_assert_eq(rdma_probe_run("/nonexistent-flps-root", &p), FLPS_OK);
    if (rl.rlim_cur == RLIM_INFINITY)
        cr_assert_eq(p.memlock, -1);
    else
        cr_assert_eq(p.memlock, (int64_t)rl.rlim_cur);
}

Test(rdma_probe, the_environment_names_the_root_when_none_is_given)
{
    fake_sysfs s;
    rdma_probe p;

    fake_sysfs_init(&s, 1);
    fake_sysfs_port(&s, "mlx5_0", 1, "4: ACTIVE\n", "InfiniBand\n", 1);
    cr_assert_eq(setenv(RDMA_PROBE_SYSFS_ENV, s.root, 1), 0);
    cr_assert_eq(rdma_probe_run(NULL, &p), FLPS_OK);
    cr_assert_eq(p.ndevs, 1);
    cr_assert_eq(unsetenv(RDMA_PROBE_SYSFS_ENV), 0);
    cr_assert_eq(rdma_probe_run(NULL, &p), FLPS_OK);
    cr_assert_str_eq(p.ib_dir, "/sys/class/infiniband");
    fake_sysfs_fini(&s);
}

Test(rdma_probe, refuses_null_and_a_root_too_long_for_its_paths)
{
    char root[1000];
    rdma_probe p;

    cr_assert_eq(rdma_probe_run("/", NULL), FLPS_EINVAL);
    memset(root, 'a', sizeof(root) - 1);
    root[0] = '/';
    root[sizeof(root) - 1] = '\0';
    cr_assert_eq(rdma_probe_run(root, &p), FLPS_EINVAL);
}

Test(rdma_probe, formats_byte_counts_as_people_read_them)
{
    char b[32];

    cr_assert_str_eq(rdma_probe_format_bytes(-1, b, sizeof(b)), "unlimited");
    cr_assert_str_eq(rdma_probe_format_bytes(65536, b, sizeof(b)), "64 KiB");
    cr_assert_str_eq(rdma_probe_format_bytes(8 << 20, b, sizeof(b)), "8 MiB");
    cr_assert_str_eq(rdma_probe_format_bytes(1536, b, sizeof(b)), "1.5 KiB");
    cr_assert_str_eq(rdma_probe_format_bytes(100, b, sizeof(b)), "100 bytes");
}
