/* Tests for common/finite.h: the blocked finiteness checks find every NaN
 * and Inf wherever it sits, and nothing in finite values. */
#include "common/finite.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#define N 5000

static float *ramp(void)
{
    float *x = malloc(N * sizeof(float));

    cr_assert_not_null(x);
    for (size_t i = 0; i < N; i++)
        x[i] = (i % 2 ? -1.0f : 1.0f) * (float)i * 1e-3f;
    return x;
}

Test(finite, finite_values_of_every_kind_pass)
{
    float x[] = {0.0f,    -0.0f, FLT_MIN / 4, -FLT_MIN / 4,
                 FLT_MIN, 1.0f,  -FLT_MAX,    FLT_MAX};
    const size_t n = sizeof(x) / sizeof(x[0]);

    cr_assert_eq(flps_first_nonfinite(x, n), n);
    cr_assert(flps_all_finite(x, n));
    cr_assert_eq(flps_first_nonfinite(x, 0), 0, "an empty array is finite");
    cr_assert(flps_all_finite(x, 0));
    cr_assert_eq(flps_max_abs_bits(x, n), 0x7f7fffffu, "FLT_MAX's bits");
}

Test(finite, each_nan_and_inf_is_found_at_its_index_across_block_edges)
{
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    const size_t at[] = {0, 1, 1022, 1023, 1024, 1025, 2047, 2048, 4095, N - 1};
    float *x = ramp();

    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
        for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
            const float keep = x[at[k]];
            x[at[k]] = bad[b];
            cr_assert_eq(flps_first_nonfinite(x, N), at[k],
                         "value %zu of kind %zu", at[k], b);
            cr_assert(!flps_all_finite(x, N));
            cr_assert_geq(flps_max_abs_bits(x, N), FLPS_INF_BITS);
            /* Only the part before it: finite. */
            cr_assert_eq(flps_first_nonfinite(x, at[k]), at[k]);
            x[at[k]] = keep;
        }
    cr_assert_eq(flps_first_nonfinite(x, N), N);
    free(x);
}

Test(finite, the_first_of_several_is_reported)
{
    float *x = ramp();

    x[3000] = INFINITY;
    x[1500] = NAN;
    x[1501] = NAN;
    cr_assert_eq(flps_first_nonfinite(x, N), 1500);
    free(x);
}

Test(finite, the_largest_magnitude_is_reported_as_its_bits)
{
    float *x = ramp();
    uint32_t want;
    const float big = -4999e-3f;

    memcpy(&want, &big, sizeof(want));
    want &= 0x7fffffffu;
    cr_assert_eq(flps_max_abs_bits(x, N), want);
    free(x);
}

Test(finite, any_nonfinite_says_whether_one_is_there)
{
    float *x = ramp();

    cr_assert(!flps_any_nonfinite(x, N));
    x[N / 2] = -INFINITY;
    cr_assert(flps_any_nonfinite(x, N));
    cr_assert(!flps_any_nonfinite(x, N / 2));
    free(x);
}
