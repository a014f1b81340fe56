/* Clocks for timeouts and durations. */
#ifndef FLPS_COMMON_CLOCK_H
#define FLPS_COMMON_CLOCK_H

#include <stddef.h>

/* Seconds on the monotonic clock (for intervals; not wall time). */
double flps_mono_s(void);

/* Seconds since the Unix epoch, with sub-second precision. */
double flps_wall_s(void);

/* unix_s (seconds since the epoch) as "2026-12-04 05:00:00 UTC" into buf;
 * the number itself when it is no date. Never fails. */
void flps_utc_text(double unix_s, char *buf, size_t len);

#endif
