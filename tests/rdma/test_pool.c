/* Tests for rdma/pool.c: pools sized from the largest message, the
 * memlock check and its message, registered regions and slot pools on the
 * emulated NIC, and a failed registration explained. */
#include "rdma/pool.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "emu_verbs.h"
#include "rdma/frame.h"

Test(pool, small_messages_need_only_slots)
{
    rdma_pool_plan p;

    cr_assert_eq(rdma_pool_plan_make(4000, 8, &p, NULL, 0), FLPS_OK);
    cr_assert_eq(p.landing_bytes, 0);
    cr_assert_geq(p.slot_bytes,
                  4000 + rdma_frame_header_bytes(RDMA_FRAME_MAX) + 8 * 16);
    cr_assert_eq(p.slot_bytes % 8, 0);
    cr_assert_eq(p.peer_bytes, 2ull * 8 * p.slot_bytes + 2 * RDMA_CTRL_BYTES);
}

Test(pool, large_messages_get_a_region_that_holds_them)
{
    rdma_pool_plan p;
    const size_t big = (size_t)100 << 20;

    cr_assert_eq(rdma_pool_plan_make(big, 16, &p, NULL, 0), FLPS_OK);
    cr_assert_eq(p.slot_bytes, RDMA_SLOT_BYTES_MAX);
    cr_assert_geq(p.landing_bytes, big + rdma_frame_header_bytes(16) + 128);
    cr_assert_eq(p.landing_bytes % 4096, 0);
    cr_assert_eq(p.peer_bytes, 2ull * 16 * p.slot_bytes +
                                   2ull * p.landing_bytes +
                                   2 * RDMA_CTRL_BYTES);
}

Test(pool, refuses_zero_or_too_many_credits_and_absurd_sizes)
{
    rdma_pool_plan p;
    char why[200];

    cr_assert_eq(rdma_pool_plan_make(100, 0, &p, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert(strstr(why, "credits") != NULL, "%s", why);
    cr_assert_eq(rdma_pool_plan_make(100, 5000, &p, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_eq(rdma_pool_plan_make(SIZE_MAX, 4, &p, why, sizeof(why)),
                 FLPS_EINVAL);
}

Test(pool, the_memlock_check_passes_what_fits)
{
    cr_assert_eq(rdma_pool_memlock_check(0, 1 << 20, UINT64_MAX, NULL, 0),
                 FLPS_OK);
    cr_assert_eq(rdma_pool_memlock_check(1 << 20, 1 << 20, 2 << 20, NULL, 0),
                 FLPS_OK);
    cr_assert_eq(rdma_pool_memlock_check(UINT64_MAX - 1, 8, 1 << 30, NULL, 0),
                 FLPS_ENOMEM, "an overflowing sum is not small");
}

Test(pool, the_memlock_message_names_the_bytes_and_the_fixes)
{
    char why[1024];

    cr_assert_eq(
        rdma_pool_memlock_check(1 << 20, 3 << 20, 65536, why, sizeof(why)),
        FLPS_ENOMEM);
    cr_assert(strstr(why, "4194304 bytes (4.0 MiB)") != NULL, "%s", why);
    cr_assert(strstr(why, "65536 bytes (64.0 KiB)") != NULL, "%s", why);
    cr_assert(strstr(why, "ulimit -l 4096") != NULL, "%s", why);
    cr_assert(strstr(why, "ulimit -l unlimited") != NULL, "%s", why);
    cr_assert(strstr(why, "IPC_LOCK") != NULL, "%s", why);
    cr_assert(strstr(why, "agent.rdma.enabled=true") != NULL, "%s", why);
}

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void open_emu(void)
{
    const rdma_verbs *v = rdma_emu_verbs();
    struct ibv_device **l;
    int n;

    rdma_emu_reset();
    l = v->get_device_list(&n);
    cr_assert_eq(n, 1);
    ctx = v->open_device(l[0]);
    v->free_device_list(l);
    pd = v->alloc_pd(ctx);
}

static void close_emu(void)
{
    const rdma_verbs *v = rdma_emu_verbs();

    v->dealloc_pd(pd);
    v->close_device(ctx);
    cr_assert_eq(rdma_emu_live_mrs(), 0);
    cr_assert_eq(rdma_emu_live_pds(), 0);
}

Test(pool, a_region_is_registered_aligned_and_freed, .init = open_emu,
     .fini = close_emu)
{
    const rdma_verbs *v = rdma_emu_verbs();
    rdma_region r;

    cr_assert_eq(
        rdma_region_init(&r, v, pd, 5000, IBV_ACCESS_LOCAL_WRITE, NULL, 0),
        FLPS_OK);
    cr_assert_eq(rdma_emu_live_mrs(), 1);
    cr_assert_eq((uintptr_t)r.addr % 4096, 0);
    cr_assert_eq(r.len, 8192);
    cr_assert_eq(r.mr->addr, r.addr);
    cr_assert_eq(r.mr->length, r.len);
    cr_assert_eq(r.addr[4999], 0, "zeroed");
    rdma_region_fini(&r, v);
    rdma_region_fini(&r, v); /* idempotent */
    cr_assert_eq(rdma_emu_live_mrs(), 0);
}

Test(pool, a_failed_registration_says_to_raise_memlock, .init = open_emu,
     .fini = close_emu)
{
    const rdma_verbs *v = rdma_emu_verbs();
    rdma_region r;
    char why[512];

    rdma_emu_fail_next_reg_mr(ENOMEM);
    cr_assert_eq(rdma_region_init(&r, v, pd, 5000, 0, why, sizeof(why)),
                 FLPS_ENOMEM);
    cr_assert(strstr(why, "memlock") != NULL, "%s", why);
    cr_assert(strstr(why, "ulimit -l") != NULL, "%s", why);
    cr_assert(strstr(why, "IPC_LOCK") != NULL, "%s", why);
    cr_assert_null(r.addr);
    rdma_emu_fail_next_reg_mr(EINVAL);
    cr_assert_eq(rdma_region_init(&r, v, pd, 5000, 0, why, sizeof(why)),
                 FLPS_ESYS);
    cr_assert_eq(rdma_emu_live_mrs(), 0);
}

Test(pool, slots_are_handed_out_once_until_given_back, .init = open_emu,
     .fini = close_emu)
{
    const rdma_verbs *v = rdma_emu_verbs();
    rdma_slots s;
    uint32_t got[4], x;

    cr_assert_eq(rdma_slots_init(&s, v, pd, 4, 1024, 0, NULL, 0), FLPS_OK);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(rdma_slots_get(&s, &got[i]), FLPS_OK);
        for (int j = 0; j < i; j++)
            cr_assert_neq(got[i], got[j]);
        cr_assert_eq(rdma_slots_addr(&s, got[i]),
                     s.reg.addr + (size_t)got[i] * 1024);
    }
    cr_assert_eq(got[0], 0, "slot 0 first");
    cr_assert_eq(rdma_slots_get(&s, &x), FLPS_ESTATE);
    rdma_slots_put(&s, got[2]);
    cr_assert_eq(rdma_slots_get(&s, &x), FLPS_OK);
    cr_assert_eq(x, got[2]);
    rdma_slots_fini(&s, v);
    cr_assert_eq(rdma_emu_live_mrs(), 0);
    cr_assert_eq(rdma_slots_init(&s, v, pd, 0, 1024, 0, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(rdma_emu_live_mrs(), 0);
}
