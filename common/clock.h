/* Clocks for timeouts and durations. */
#ifndef FLPS_COMMON_CLOCK_H
#define FLPS_COMMON_CLOCK_H

/* Seconds on the monotonic clock (for intervals; not wall time). */
double flps_mono_s(void);

/* Seconds since the Unix epoch, with sub-second precision. */
double flps_wall_s(void);

#endif
