/* What every benchmark in bench/ needs: a monotonic clock, seeded
 * gradient-like data, and the common --n / --rounds arguments. */
#ifndef FLPS_BENCH_UTIL_H
#define FLPS_BENCH_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
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
 * Returns 0, or 2 after printing usage for a bad command line. */
static inline int bench_args(int argc, char **argv, const char *name, size_t *n,
                             int *rounds)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            *n = (size_t)strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            *rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--n N] [--rounds R]\n", argv[0]);
            return 2;
        }
    }
    if (*n < 1000 || *n >= (1ull << 32) || *rounds < 1) {
        fprintf(stderr, "%s: need 1000 <= n < 2^32, rounds >= 1\n", name);
        return 2;
    }
    return 0;
}

#endif
