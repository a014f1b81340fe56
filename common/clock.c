/* Clocks for timeouts and durations. */
#include "common/clock.h"

#include <stdio.h>
#include <time.h>

double flps_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double flps_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void flps_utc_text(double unix_s, char *buf, size_t len)
{
    time_t s = (time_t)unix_s;
    struct tm tm;

    if (gmtime_r(&s, &tm) == NULL ||
        strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(buf, len, "%.0f", unix_s);
}
