/* The split of a training set among clients: iid and Dirichlet. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "worker/dataset.h"
#include "worker/partition.h"

#define N 6000
#define CLASSES 10

/* Labels of a balanced 10-class set in a seeded order. */
static void make_labels(uint8_t *y)
{
    uint64_t s = 99;

    for (size_t i = 0; i < N; i++)
        y[i] = (uint8_t)(i % CLASSES);
    for (size_t i = N; i > 1; i--) {
        size_t j = (size_t)(flps_splitmix64(&s) % i);
        uint8_t t = y[i - 1];
        y[i - 1] = y[j];
        y[j] = t;
    }
}

static void assert_covers_every_sample_once(const partition *p, size_t n)
{
    uint8_t *seen = calloc(n, 1);

    cr_assert_eq(p->n, n);
    cr_assert_eq(p->off[0], 0);
    cr_assert_eq(p->off[p->clients], n, "the lists hold n indices in all");
    for (size_t i = 0; i < n; i++) {
        cr_assert_lt(p->idx[i], n);
        cr_assert_eq(seen[p->idx[i]], 0, "index %u given twice", p->idx[i]);
        seen[p->idx[i]] = 1;
    }
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(seen[i], 1, "index %zu missing", i);
    free(seen);
}

Test(partition, dirichlet_gives_every_sample_to_exactly_one_client)
{
    uint8_t y[N];
    partition p;

    make_labels(y);
    cr_assert_eq(partition_dirichlet(y, N, CLASSES, 10, 0.5, 1, &p), FLPS_OK);
    cr_assert_eq(p.clients, 10);
    assert_covers_every_sample_once(&p, N);
    for (uint32_t c = 0; c < 10; c++)
        cr_assert_geq(partition_count(&p, c), 10, "client %u has %zu", c,
                      partition_count(&p, c));
    partition_fini(&p);
}

Test(partition, dirichlet_is_the_same_for_a_seed_and_differs_for_another)
{
    uint8_t y[N];
    partition a, b, c;

    make_labels(y);
    cr_assert_eq(partition_dirichlet(y, N, CLASSES, 20, 0.3, 7, &a), FLPS_OK);
    cr_assert_eq(partition_dirichlet(y, N, CLASSES, 20, 0.3, 7, &b), FLPS_OK);
    cr_assert_eq(partition_dirichlet(y, N, CLASSES, 20, 0.3, 8, &c), FLPS_OK);
    cr_assert_arr_eq(a.off, b.off, 21 * sizeof(size_t));
    cr_assert_arr_eq(a.idx, b.idx, N * sizeof(uint32_t));
    cr_assert(memcmp(a.off, c.off, 21 * sizeof(size_t)) != 0,
              "another seed gives other client sizes");
    partition_fini(&a);
    partition_fini(&b);
    partition_fini(&c);
}

Test(partition, smaller_alpha_gives_larger_skew)
{
    uint8_t y[N];
    const double alphas[] = {0.05, 0.1, 0.5, 2, 100};
    double prev = 2;
    partition p;

    make_labels(y);
    for (size_t i = 0; i < sizeof(alphas) / sizeof(alphas[0]); i++) {
        double skew;

        cr_assert_eq(partition_dirichlet(y, N, CLASSES, 10, alphas[i], 3, &p),
                     FLPS_OK);
        assert_covers_every_sample_once(&p, N);
        skew = partition_skew(&p, y, CLASSES);
        cr_log_info("alpha %g: skew %.4f", alphas[i], skew);
        cr_assert_lt(skew, prev, "alpha %g: skew %.4f not below %.4f",
                     alphas[i], skew, prev);
        prev = skew;
        partition_fini(&p);
    }
    cr_assert_lt(prev, 0.1, "alpha 100 is close to iid");
}

Test(partition, iid_has_little_skew_and_matches_the_worker_split)
{
    uint8_t y[N];
    partition p;
    uint32_t *slice = NULL;
    size_t len = 0;

    make_labels(y);
    cr_assert_eq(partition_iid(N, 7, 5, &p), FLPS_OK);
    assert_covers_every_sample_once(&p, N);
    cr_assert_lt(partition_skew(&p, y, CLASSES), 0.05);
    cr_assert_eq(dataset_split_iid(N, 7, 3, 5, &slice, &len), FLPS_OK);
    cr_assert_eq(partition_count(&p, 3), len);
    cr_assert_arr_eq(p.idx + p.off[3], slice, len * sizeof(uint32_t));
    free(slice);
    partition_fini(&p);
}

Test(partition, skew_of_clients_with_one_class_each_is_one_minus_its_share)
{
    /* Two classes, two clients, each client all of one class: each is at
     * distance 1/2 from the global 50/50 mix. */
    uint8_t y[] = {0, 0, 1, 1};
    uint32_t idx[] = {0, 1, 2, 3};
    size_t off[] = {0, 2, 4};
    partition p = {2, 4, idx, off};

    cr_assert_float_eq(partition_skew(&p, y, 2), 0.5, 1e-12);
}

Test(partition, refuses_impossible_splits)
{
    uint8_t y[N];
    partition p;

    make_labels(y);
    cr_assert_eq(partition_dirichlet(y, N, CLASSES, 0, 0.5, 1, &p),
                 FLPS_EINVAL);
    cr_assert_eq(partition_dirichlet(y, N, CLASSES, 10, 0, 1, &p), FLPS_EINVAL);
    cr_assert_eq(partition_dirichlet(y, N, 5, 10, 0.5, 1, &p), FLPS_EINVAL,
                 "labels beyond the classes");
    cr_assert_eq(partition_dirichlet(y, 10, CLASSES, 11, 0.5, 1, &p),
                 FLPS_EINVAL, "more clients than samples");
    cr_assert_eq(partition_iid(N, 0, 1, &p), FLPS_EINVAL);
    partition_fini(NULL);
}

/* How many classes client c holds. */
static unsigned classes_of(const partition *p, const uint8_t *y, uint32_t c)
{
    uint8_t seen[CLASSES] = {0};
    unsigned k = 0;

    for (size_t i = p->off[c]; i < p->off[c + 1]; i++)
        if (!seen[y[p->idx[i]]]++)
            k++;
    return k;
}

Test(partition, shards_give_every_client_its_shards_of_few_labels)
{
    uint8_t y[N];
    partition p;
    unsigned most = 0;

    make_labels(y);
    /* 100 clients of 2 shards: 200 shards of 30 samples, each within one
     * label (600 per label is 20 shards), so a client holds 1 or 2
     * labels. */
    cr_assert_eq(partition_shards(y, N, CLASSES, 100, 2, 1, &p), FLPS_OK);
    assert_covers_every_sample_once(&p, N);
    for (uint32_t c = 0; c < 100; c++) {
        unsigned k = classes_of(&p, y, c);

        cr_assert_eq(partition_count(&p, c), 60, "client %u has %zu", c,
                     partition_count(&p, c));
        cr_assert(k >= 1 && k <= 2, "client %u sees %u labels", c, k);
        most = k > most ? k : most;
    }
    cr_assert_eq(most, 2, "some client gets two labels");
    cr_assert_gt(partition_skew(&p, y, CLASSES), 0.8);
    partition_fini(&p);
}

Test(partition, shards_cut_an_uneven_count_as_evenly_as_it_goes)
{
    uint8_t y[N];
    partition p;
    size_t least = N, largest = 0;

    make_labels(y);
    /* 6000 samples over 7 * 3 = 21 shards: 285 or 286 each. */
    cr_assert_eq(partition_shards(y, N, CLASSES, 7, 3, 4, &p), FLPS_OK);
    assert_covers_every_sample_once(&p, N);
    for (uint32_t c = 0; c < 7; c++) {
        size_t n = partition_count(&p, c);
        least = n < least ? n : least;
        largest = n > largest ? n : largest;
    }
    cr_assert_geq(least, 3 * 285);
    cr_assert_leq(largest, 3 * 286);
    partition_fini(&p);
}

Test(partition, shards_are_the_same_for_a_seed_and_differ_for_another)
{
    uint8_t y[N];
    partition a, b, c;

    make_labels(y);
    cr_assert_eq(partition_shards(y, N, CLASSES, 10, 2, 7, &a), FLPS_OK);
    cr_assert_eq(partition_shards(y, N, CLASSES, 10, 2, 7, &b), FLPS_OK);
    cr_assert_eq(partition_shards(y, N, CLASSES, 10, 2, 8, &c), FLPS_OK);
    cr_assert_arr_eq(a.off, b.off, 11 * sizeof(size_t));
    cr_assert_arr_eq(a.idx, b.idx, N * sizeof(uint32_t));
    cr_assert(memcmp(a.idx, c.idx, N * sizeof(uint32_t)) != 0,
              "another seed deals other shards");
    partition_fini(&a);
    partition_fini(&b);
    partition_fini(&c);
}

Test(partition, shards_refuse_impossible_splits)
{
    uint8_t y[N];
    partition p;

    make_labels(y);
    cr_assert_eq(partition_shards(y, N, CLASSES, 10, 0, 1, &p), FLPS_EINVAL);
    cr_assert_eq(partition_shards(y, 10, CLASSES, 4, 3, 1, &p), FLPS_EINVAL,
                 "more shards than samples");
    cr_assert_eq(partition_shards(y, N, 5, 10, 2, 1, &p), FLPS_EINVAL,
                 "labels beyond the classes");
    cr_assert_eq(partition_shards(NULL, N, CLASSES, 10, 2, 1, &p), FLPS_EINVAL);
}

Test(partition, the_permutation_is_the_worker_splits_concatenated)
{
    uint32_t *perm = NULL, *slice = NULL;
    size_t len = 0, at = 0;

    cr_assert_eq(partition_permutation(1000, 42, &perm), FLPS_OK);
    for (uint32_t r = 0; r < 3; r++) {
        cr_assert_eq(dataset_split_iid(1000, 3, r, 42, &slice, &len), FLPS_OK);
        cr_assert_arr_eq(perm + at, slice, len * sizeof(uint32_t));
        at += len;
        free(slice);
    }
    cr_assert_eq(at, 1000);
    free(perm);
}
