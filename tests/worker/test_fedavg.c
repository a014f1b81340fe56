/* Federated averaging arithmetic: client sampling and the scaled push. */
#include <criterion/criterion.h>
#include <string.h>

#include "worker/fedavg.h"

Test(fedavg, round_size_is_the_ceiling_of_the_fraction)
{
    cr_assert_eq(fedavg_round_size(100, 0.1), 10);
    cr_assert_eq(fedavg_round_size(10, 0.5), 5);
    cr_assert_eq(fedavg_round_size(10, 0.35), 4);
    cr_assert_eq(fedavg_round_size(10, 0.01), 1, "at least one client");
    cr_assert_eq(fedavg_round_size(7, 1), 7);
    cr_assert_eq(fedavg_round_size(0, 1), 0);
}

Test(fedavg, sample_is_distinct_ascending_and_the_same_for_a_round)
{
    uint32_t a[10], b[10], c[10];
    unsigned hits[100];

    memset(hits, 0, sizeof(hits));
    cr_assert_eq(fedavg_sample(100, 0.1, 1, 4, a), FLPS_OK);
    cr_assert_eq(fedavg_sample(100, 0.1, 1, 4, b), FLPS_OK);
    cr_assert_arr_eq(a, b, sizeof(a), "every worker draws the same sample");
    for (int i = 0; i < 10; i++) {
        cr_assert_lt(a[i], 100);
        if (i > 0)
            cr_assert_gt(a[i], a[i - 1], "ascending, no repeats");
    }
    cr_assert_eq(fedavg_sample(100, 0.1, 1, 5, c), FLPS_OK);
    cr_assert(memcmp(a, c, sizeof(a)) != 0, "another round, another sample");
    cr_assert_eq(fedavg_sample(100, 0.1, 2, 4, c), FLPS_OK);
    cr_assert(memcmp(a, c, sizeof(a)) != 0, "another seed, another sample");
    /* Over many rounds every client is drawn about as often. */
    for (uint64_t r = 0; r < 1000; r++) {
        cr_assert_eq(fedavg_sample(100, 0.1, 1, r, c), FLPS_OK);
        for (int i = 0; i < 10; i++)
            hits[c[i]]++;
    }
    for (int k = 0; k < 100; k++)
        cr_assert(hits[k] > 60 && hits[k] < 140, "client %d drawn %u times", k,
                  hits[k]);
}

Test(fedavg, sample_of_the_whole_population_is_everyone)
{
    uint32_t a[5];

    cr_assert_eq(fedavg_sample(5, 1, 3, 0, a), FLPS_OK);
    for (uint32_t i = 0; i < 5; i++)
        cr_assert_eq(a[i], i);
    cr_assert_eq(fedavg_sample(5, 0, 3, 0, a), FLPS_EINVAL);
    cr_assert_eq(fedavg_sample(0, 1, 3, 0, a), FLPS_EINVAL);
    cr_assert_eq(fedavg_sample(5, 1, 3, 0, NULL), FLPS_EINVAL);
}

/* What a synchronous shard registered with lr does with the round's pushes
 * (ps/shard_agg.c close_iteration): w += -(lr / W) * sum of the pushes. */
static void shard_apply(float *w, size_t n, const float *const *push,
                        uint32_t W, double lr)
{
    const float scale = (float)(lr / (double)W);

    for (size_t i = 0; i < n; i++) {
        float u = 0;
        for (uint32_t r = 0; r < W; r++)
            u += push[r][i];
        w[i] += -(scale * u);
    }
}

Test(fedavg, weights_clients_by_sample_count_exactly)
{
    /* Client 0 has 100 samples and moved the model by +4, client 1 has 300
     * and moved it by +8 and -2: the mean weighted by samples is
     * (100 * 4 + 300 * 8) / 400 = 7 and (100 * 4 - 300 * 2) / 400 = -0.5,
     * where the plain mean would be 6 and 1. */
    const float global[2] = {1, 1};
    const float local0[2] = {5, 5}, local1[2] = {9, -1};
    float one[2] = {0, 0}, w0[2] = {0, 0}, w1[2] = {0, 0};
    float w[2];
    const float *push1[1] = {one}, *push2[2] = {w0, w1};

    /* One worker process plays both clients. */
    fedavg_add_delta(one, local0, global, 2, 100);
    fedavg_add_delta(one, local1, global, 2, 300);
    fedavg_scale_push(one, 2, 1, 400);
    memcpy(w, global, sizeof(w));
    shard_apply(w, 2, push1, 1, 1.0);
    cr_assert_eq(w[0], 1 + 7.0f);
    cr_assert_eq(w[1], 1 - 0.5f);

    /* Two worker processes, one client each, through the same shard. */
    fedavg_add_delta(w0, local0, global, 2, 100);
    fedavg_add_delta(w1, local1, global, 2, 300);
    fedavg_scale_push(w0, 2, 2, 400);
    fedavg_scale_push(w1, 2, 2, 400);
    memcpy(w, global, sizeof(w));
    shard_apply(w, 2, push2, 2, 1.0);
    cr_assert_eq(w[0], 1 + 7.0f);
    cr_assert_eq(w[1], 1 - 0.5f);
}

Test(fedavg, a_worker_without_clients_pushes_zeros)
{
    float acc[3] = {0, 0, 0};

    fedavg_scale_push(acc, 3, 4, 1000);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(acc[i], 0.0f);
}

Test(fedavg, stragglers_are_a_fixed_share_drawn_apart_from_the_rounds)
{
    uint8_t a[100], b[100];
    uint32_t sample[30];
    unsigned n = 0, same = 0;

    cr_assert_eq(fedavg_stragglers(100, 0.3, 7, a), FLPS_OK);
    cr_assert_eq(fedavg_stragglers(100, 0.3, 7, b), FLPS_OK);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "the same in every process");
    for (int c = 0; c < 100; c++) {
        cr_assert(a[c] == 0 || a[c] == 1);
        n += a[c];
    }
    cr_assert_eq(n, 30, "ceil(0.3 * 100) clients");
    /* Not the clients of round 0 (or of any round: a draw of its own). */
    cr_assert_eq(fedavg_sample(100, 0.3, 7, 0, sample), FLPS_OK);
    for (int k = 0; k < 30; k++)
        same += a[sample[k]];
    cr_assert_lt(same, 30);
    cr_assert_eq(fedavg_stragglers(100, 0.3, 8, b), FLPS_OK);
    cr_assert_neq(memcmp(a, b, sizeof(a)), 0, "another seed, others");
    cr_assert_eq(fedavg_stragglers(100, 0, 7, b), FLPS_OK);
    for (int c = 0; c < 100; c++)
        cr_assert_eq(b[c], 0, "fraction 0: none");
    cr_assert_eq(fedavg_stragglers(100, 1.5, 7, b), FLPS_EINVAL);
    cr_assert_eq(fedavg_stragglers(0, 0.5, 7, b), FLPS_EINVAL);
    cr_assert_eq(fedavg_stragglers(100, 0.5, 7, NULL), FLPS_EINVAL);
}
