/* For the compress tests: whether code left the upper halves of the YMM
 * registers in use, read from the processor itself. XGETBV with ECX = 1
 * returns XINUSE, the state components not in their initial
 * configuration; bit 2 is the upper halves of YMM0-15. vzeroupper puts
 * them back, and an AVX function that returns without it makes every
 * later SSE instruction pay for the dirty state (1.6-3.7x on the loops of
 * this library, measured). */
#ifndef FLPS_TESTS_COMPRESS_AVX_STATE_H
#define FLPS_TESTS_COMPRESS_AVX_STATE_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* 1 when the CPU has AVX and XGETBV reports XINUSE. */
static inline int avx_state_is_observable(void)
{
    unsigned a, b, c, d;

    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_AVX) || !(c & bit_OSXSAVE))
        return 0;
    if (__get_cpuid_max(0, NULL) < 0xd)
        return 0;
    __cpuid_count(0xd, 1, a, b, c, d);
    return (a >> 2) & 1; /* XGETBV with ECX = 1 */
}

/* Bring the upper halves to their initial state (only after
 * avx_state_is_observable). */
static inline void avx_state_clear(void)
{
    __asm__ volatile("vzeroupper" ::: "memory");
}

/* 1 when the upper halves are in use (only after
 * avx_state_is_observable). */
static inline int avx_state_is_dirty(void)
{
    uint32_t lo, hi;

    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1) : "memory");
    (void)hi;
    return (lo >> 2) & 1;
}
#else
static inline int avx_state_is_observable(void)
{
    return 0;
}
static inline void avx_state_clear(void)
{
}
static inline int avx_state_is_dirty(void)
{
    return 0;
}
#endif

#endif
