/* Tests for the density warm-up of compress/codec.c
 * (codec_warmup_density, codec_set_density): the schedule's ends, its
 * shape and its determinism, and a codec that follows it. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compress/codec.h"

Test(codec_warmup, starts_at_the_start_and_ends_exactly_at_the_target)
{
    cr_assert_eq(codec_warmup_density(0.25, 0.001, 300, 0), 0.25);
    cr_assert_eq(codec_warmup_density(0.25, 0.001, 300, 300), 0.001);
    cr_assert_eq(codec_warmup_density(0.25, 0.001, 300, 301), 0.001);
    cr_assert_eq(codec_warmup_density(0.25, 0.001, 300, UINT64_MAX), 0.001);
    cr_assert_eq(codec_warmup_density(1.0, 0.01, 1, 0), 1.0);
    cr_assert_eq(codec_warmup_density(1.0, 0.01, 1, 1), 0.01);
}

Test(codec_warmup, decays_exponentially_between_the_ends)
{
    /* Halfway in the exponent is the geometric mean of the ends. */
    double mid = codec_warmup_density(0.25, 0.0025, 100, 50);
    cr_assert_float_eq(mid, 0.025, 1e-15, "%.17g", mid);
    /* Each step multiplies by the same factor. */
    for (uint64_t t = 1; t < 100; t++) {
        double r = codec_warmup_density(0.25, 0.0025, 100, t) /
                   codec_warmup_density(0.25, 0.0025, 100, t - 1);
        cr_assert_float_eq(r, pow(0.01, 0.01), 1e-12, "step %llu",
                           (unsigned long long)t);
    }
}

Test(codec_warmup, never_rises_and_stays_within_its_ends)
{
    const double starts[] = {1.0, 0.5, 0.25, 0.1};
    const double targets[] = {0.001, 0.01, 0.0999, 1e-6};
    const uint64_t lens[] = {1, 7, 100, 300, 1000, 100000};

    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t l = 0; l < 6; l++) {
                double s = starts[a], g = targets[b], prev = s;
                uint64_t n = lens[l];
                for (uint64_t t = 0; t <= n + 2; t++) {
                    double d = codec_warmup_density(s, g, n, t);
                    cr_assert_leq(d, prev, "%g -> %g over %llu rises at %llu",
                                  s, g, (unsigned long long)n,
                                  (unsigned long long)t);
                    cr_assert_leq(d, s);
                    cr_assert_geq(d, g);
                    prev = d;
                }
            }
}

Test(codec_warmup, is_the_target_without_a_warm_up_or_below_the_start)
{
    cr_assert_eq(codec_warmup_density(0.25, 0.01, 0, 0), 0.01);
    cr_assert_eq(codec_warmup_density(0.25, 0.01, 0, 5), 0.01);
    /* A target at or above the start has nothing to warm up. */
    cr_assert_eq(codec_warmup_density(0.25, 0.5, 100, 0), 0.5);
    cr_assert_eq(codec_warmup_density(0.25, 0.25, 100, 10), 0.25);
    cr_assert_eq(codec_warmup_density(0.25, 1.0, 100, 99), 1.0);
}

/* What a rank would compute: the schedule over a job, written out. */
static void schedule_of(double s, double g, uint64_t n, double *out)
{
    for (uint64_t t = 0; t <= n; t++)
        out[t] = codec_warmup_density(s, g, n, t);
}

Test(codec_warmup, gives_every_rank_the_same_bits_and_k)
{
    /* Ranks are separate processes computing the same function; here
     * separate calls (in another order) must give identical doubles, and
     * so identical k for every layer size. */
    enum { N = 300 };
    double a[N + 1], b[N + 1];
    const size_t sizes[] = {200704, 256, 32768, 128, 1280, 10, 65536};

    schedule_of(0.25, 0.001, N, a);
    for (uint64_t t = N + 1; t-- > 0;)
        b[t] = codec_warmup_density(0.25, 0.001, N, t);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
    for (uint64_t t = 0; t <= N; t++)
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            codec_spec x = {CODEC_GTOPK, a[t], 0}, y = {CODEC_GTOPK, b[t], 0};
            cr_assert_eq(codec_count_for(&x, sizes[i]),
                         codec_count_for(&y, sizes[i]));
        }
}

Test(codec_warmup, a_codec_selects_at_the_density_it_is_set_to)
{
    enum { n = 10000 };
    codec_spec sp;
    codec *c = NULL;
    float *a = malloc(n * sizeof(float));
    codec_msg m;

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = (float)((i * 7919) % n) - 5000.0f;
    cr_assert_eq(codec_spec_parse("topk:0.001", &sp), FLPS_OK);
    cr_assert_eq(codec_create(&sp, 1, &c), FLPS_OK);
    cr_assert_eq(codec_encode(c, a, n, &m), FLPS_OK);
    cr_assert_eq(m.count, 10);
    cr_assert_eq(codec_set_density(c, 0.25), FLPS_OK);
    cr_assert_eq(codec_get_spec(c)->density, 0.25);
    cr_assert_eq(codec_encode(c, a, n, &m), FLPS_OK);
    cr_assert_eq(m.count, 2500);
    cr_assert_eq(m.bytes, 2500 * 8);
    cr_assert_eq(codec_set_density(c, 0.001), FLPS_OK);
    cr_assert_eq(codec_encode(c, a, n, &m), FLPS_OK);
    cr_assert_eq(m.count, 10);
    codec_destroy(c);
    free(a);
}

Test(codec_warmup, refuses_a_density_out_of_range_or_for_a_dense_codec)
{
    codec_spec sp;
    codec *c = NULL;

    cr_assert_eq(codec_set_density(NULL, 0.5), FLPS_EINVAL);
    cr_assert_eq(codec_spec_parse("gtopk:0.01", &sp), FLPS_OK);
    cr_assert_eq(codec_create(&sp, 1, &c), FLPS_OK);
    cr_assert_eq(codec_set_density(c, 0), FLPS_EINVAL);
    cr_assert_eq(codec_set_density(c, 1.5), FLPS_EINVAL);
    cr_assert_eq(codec_set_density(c, NAN), FLPS_EINVAL);
    cr_assert_eq(codec_get_spec(c)->density, 0.01, "unchanged on error");
    codec_destroy(c);
    cr_assert_eq(codec_spec_parse("qsgd:4", &sp), FLPS_OK);
    cr_assert_eq(codec_create(&sp, 1, &c), FLPS_OK);
    cr_assert_eq(codec_set_density(c, 0.5), FLPS_EINVAL);
    codec_destroy(c);
}
