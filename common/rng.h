/* splitmix64: the small seeded generator behind every reproducible choice
 * in flps (initial weights, data shuffles, sampled codecs). Bit for bit the
 * same on every platform, unlike rand(). */
#ifndef FLPS_COMMON_RNG_H
#define FLPS_COMMON_RNG_H

#include <stdint.h>

/* Advance *state and return the next 64 random bits. */
static inline uint64_t flps_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
