/* Finiteness checks of float arrays at memory speed. A loop that stops at
 * the first NaN or Inf (`if (!isfinite(x[i])) return`) cannot be
 * vectorised and costs a compare and a branch per element; these reduce
 * the absolute values' bits with an integer max over blocks (no fast-math
 * needed: for IEEE floats, |x| as an integer orders like |x|, and every
 * NaN and Inf is at or above the bits of Inf), and look inside a block
 * only when it holds one. */
#ifndef FLPS_COMMON_FINITE_H
#define FLPS_COMMON_FINITE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The bits of +Inf: |x|'s bits are at least this exactly when x is NaN or
 * Inf. */
#define FLPS_INF_BITS 0x7f800000u

/* The largest |x[i]| of x[0..n) as its bits (0 for n == 0); at least
 * FLPS_INF_BITS when one is NaN or Inf. One read pass, vectorised: with
 * the sign bit cleared the bits compare alike as signed integers, which
 * SSE2 compares directly. */
static inline uint32_t flps_max_abs_bits(const float *x, size_t n)
{
    int32_t mx = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        int32_t b;
        memcpy(&u, x + i, sizeof(u));
        b = (int32_t)(u & 0x7fffffffu);
        mx = b > mx ? b : mx;
    }
    return (uint32_t)mx;
}

/* Copy src[0..n) to dst (not overlapping) and return the largest |src[i]|
 * as flps_max_abs_bits does: the check rides on the copy, one read pass
 * instead of two. */
static inline uint32_t
flps_copy_max_abs_bits(float *restrict dst, const float *restrict src, size_t n)
{
    int32_t mx = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        int32_t b;
        memcpy(&u, src + i, sizeof(u));
        memcpy(dst + i, &u, sizeof(u));
        b = (int32_t)(u & 0x7fffffffu);
        mx = b > mx ? b : mx;
    }
    return (uint32_t)mx;
}

/* 1 when some value of x[0..n) is NaN or Inf: its exponent bits are all
 * set. An or-reduction of one compare per value, vectorised. */
static inline int flps_any_nonfinite(const float *x, size_t n)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof(u));
        bad |= (u & FLPS_INF_BITS) == FLPS_INF_BITS;
    }
    return bad != 0;
}

/* The index of the first NaN or Inf in x[0..n), or n when every value is
 * finite. Blocks of 1024 values (4 KiB, in L1 when a block must be looked
 * at again). */
static inline size_t flps_first_nonfinite(const float *x, size_t n)
{
    for (size_t at = 0; at < n; at += 1024) {
        const size_t len = n - at < 1024 ? n - at : 1024;
        if (!flps_any_nonfinite(x + at, len))
            continue;
        for (size_t i = at; i < at + len; i++) {
            uint32_t u;
            memcpy(&u, x + i, sizeof(u));
            if ((u & FLPS_INF_BITS) == FLPS_INF_BITS)
                return i;
        }
    }
    return n;
}

/* 1 when every value of x[0..n) is finite. */
static inline int flps_all_finite(const float *x, size_t n)
{
    return !flps_any_nonfinite(x, n);
}

#endif
