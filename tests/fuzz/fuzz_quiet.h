/* The fuzz targets' logging: every line dropped (refusals are the normal
 * case under fuzzing, and writing them would be most of the time spent). */
#ifndef FLPS_TESTS_FUZZ_QUIET_H
#define FLPS_TESTS_FUZZ_QUIET_H

#include "flps.h"

static void fuzz_drop_line(void *arg, flps_log_level level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

static void fuzz_quiet(void)
{
    flps_set_logger(fuzz_drop_line, NULL);
}

#endif
