/* What every benchmark in bench/ needs: a monotonic clock, seeded
 * gradient-like data, and the common --n / --rounds arguments. */
#ifndef FLPS_BENCH_UTIL_H
#define FLPS_BENCH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/numparse.h"
#include "common/rng.h"

/* Gradient-like data: standard Gaussian (Box-Muller), seeded. */
static inline void bench_fill_gaussian(float *a, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        double u1 = 1.0 - (double)(flps_splitmix64(&seed) >> 11) * 0x1p-53;
        double u2 = (double)(flps_splitmix64(&seed) >> 11) * 0x1p-53;
        a[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

/* Parse [--n N] [--rounds R] into *n and *rounds (defaults as given).
 * Returns 0, or 2 after printing usage or what was wrong with a value. The
 * codecs take arrays of fewer than 2^32 elements. */
static inline int bench_args(int argc, char **argv, const char *name, size_t *n,
                             int *rounds)
{
    char err[160];
    uint64_t v;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            if (flps_parse_u64("--n", argv[++i], 1000, 0xffffffffull, &v, err,
                               sizeof(err)) != FLPS_OK)
                goto bad_value;
            *n = (size_t)v;
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            if (flps_parse_int("--rounds", argv[++i], 1, 1000000, rounds, err,
                               sizeof(err)) != FLPS_OK)
                goto bad_value;
        } else {
            fprintf(stderr, "usage: %s [--n N] [--rounds R]\n", argv[0]);
            return 2;
        }
    }
    return 0;
bad_value:
    fprintf(stderr, "%s: %s\n", name, err);
    return 2;
}

#endif
