/* libflps's federated-learning calls (worker/fl.c): the very sample and
 * split flworker computes, behind the public API. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "flps.h"
#include "worker/fedavg.h"
#include "worker/partition.h"

#define N 2000

static void make_labels(uint32_t *y32, uint8_t *y8)
{
    for (size_t i = 0; i < N; i++) {
        y32[i] = (uint32_t)((i * 7919u) % 10u);
        y8[i] = (uint8_t)y32[i];
    }
}

Test(fl, sample_is_fedavg_sample_for_every_round)
{
    uint32_t a[5], b[5];

    cr_assert_eq(flps_fl_round_size(10, 0.5), 5);
    for (uint64_t r = 0; r < 30; r++) {
        cr_assert_eq(flps_fl_sample(1, r, 10, 0.5, a, 5), FLPS_OK);
        cr_assert_eq(fedavg_sample(10, 0.5, 1, r, b), FLPS_OK);
        cr_assert_arr_eq(a, b, sizeof(a), "round %llu", (unsigned long long)r);
    }
}

Test(fl, sample_refuses_too_little_room_and_writes_nothing)
{
    uint32_t a[5] = {7, 7, 7, 7, 7};

    cr_assert_eq(flps_fl_sample(1, 0, 10, 0.5, a, 4), FLPS_EINVAL);
    cr_assert_eq(a[0], 7);
    cr_assert_eq(flps_fl_sample(1, 0, 10, 0, a, 5), FLPS_EINVAL);
    cr_assert_eq(flps_fl_sample(1, 0, 0, 0.5, a, 5), FLPS_EINVAL);
    cr_assert_eq(flps_fl_sample(1, 0, 10, 0.5, NULL, 5), FLPS_EINVAL);
}

Test(fl, stragglers_are_fedavg_stragglers)
{
    uint8_t a[40], b[40];

    cr_assert_eq(flps_fl_stragglers(3, 40, 0.25, a), FLPS_OK);
    cr_assert_eq(fedavg_stragglers(40, 0.25, 3, b), FLPS_OK);
    cr_assert_arr_eq(a, b, sizeof(a));
}

/* spec through the API equals the partitioner's own split. */
static void assert_same_split(const char *spec, const partition *p,
                              const uint32_t *y32, uint32_t clients)
{
    uint32_t *idx = malloc(N * sizeof(*idx));
    size_t *off = malloc((clients + 1) * sizeof(*off));

    cr_assert_eq(flps_fl_partition(spec, y32, N, 10, clients, 5, idx, off),
                 FLPS_OK, "%s", spec);
    cr_assert_arr_eq(off, p->off, (clients + 1) * sizeof(*off), "%s", spec);
    cr_assert_arr_eq(idx, p->idx, N * sizeof(*idx), "%s", spec);
    free(idx);
    free(off);
}

Test(fl, partition_is_flworkers_split_for_each_spec)
{
    uint32_t y32[N];
    uint8_t y8[N];
    partition p;

    make_labels(y32, y8);
    cr_assert_eq(partition_iid(N, 10, 5, &p), FLPS_OK);
    assert_same_split("iid", &p, y32, 10);
    partition_fini(&p);
    cr_assert_eq(partition_dirichlet(y8, N, 10, 10, 0.5, 5, &p), FLPS_OK);
    assert_same_split("dirichlet:0.5", &p, y32, 10);
    partition_fini(&p);
    cr_assert_eq(partition_shards(y8, N, 10, 10, 2, 5, &p), FLPS_OK);
    assert_same_split("shards:2", &p, y32, 10);
    partition_fini(&p);
}

Test(fl, partition_refuses_what_it_cannot_split)
{
    uint32_t y32[N], idx[N];
    uint8_t y8[N];
    size_t off[11] = {0};

    make_labels(y32, y8);
    cr_assert_eq(flps_fl_partition("dirichlet", y32, N, 10, 10, 1, idx, off),
                 FLPS_EINVAL);
    cr_assert_eq(flps_fl_partition("dirichlet:-1", y32, N, 10, 10, 1, idx, off),
                 FLPS_EINVAL);
    cr_assert_eq(flps_fl_partition("shards:0", y32, N, 10, 10, 1, idx, off),
                 FLPS_EINVAL);
    cr_assert_eq(flps_fl_partition("kmeans", y32, N, 10, 10, 1, idx, off),
                 FLPS_EINVAL);
    cr_assert_eq(
        flps_fl_partition("dirichlet:0.5", NULL, N, 10, 10, 1, idx, off),
        FLPS_EINVAL, "a label split needs labels");
    cr_assert_eq(flps_fl_partition("dirichlet:0.5", y32, N, 9, 10, 1, idx, off),
                 FLPS_EINVAL, "a label beyond the classes");
    cr_assert_eq(
        flps_fl_partition("dirichlet:0.5", y32, N, 300, 10, 1, idx, off),
        FLPS_EINVAL, "more classes than a byte holds");
    cr_assert_eq(off[10], 0, "nothing written");
    cr_assert_eq(flps_fl_partition("iid", NULL, N, 0, 10, 1, idx, off), FLPS_OK,
                 "iid needs no labels");
    cr_assert_eq(off[10], N);
}
