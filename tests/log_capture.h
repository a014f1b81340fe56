/* The log lines of the code under test, captured through the logger hook
 * (flps_set_logger in include/flps.h) for tests that check what was said,
 * and how often. Header-only: each test file that includes it has its own
 * buffer. Lines beyond the buffer are dropped. */
#ifndef FLPS_TESTS_LOG_CAPTURE_H
#define FLPS_TESTS_LOG_CAPTURE_H

#include <stdio.h>
#include <string.h>

#include "flps.h"

/* Every line captured since test_log_begin, each ending in '\n'. */
static char test_logged[16384];

static void test_log_keep(void *arg, flps_log_level level, const char *line)
{
    size_t n = strlen(test_logged);

    (void)arg;
    (void)level;
    snprintf(test_logged + n, sizeof(test_logged) - n, "%s\n", line);
}

/* Empty the buffer and send every log line there instead of stderr. */
static inline void test_log_begin(void)
{
    test_logged[0] = '\0';
    flps_set_logger(test_log_keep, NULL);
}

/* Log lines go to stderr again; the buffer keeps what was captured. */
static inline void test_log_end(void)
{
    flps_set_logger(NULL, NULL);
}

/* How many times needle occurs in what was captured. */
static inline int test_log_count(const char *needle)
{
    int n = 0;

    for (const char *p = test_logged; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

#endif
