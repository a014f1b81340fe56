/* One-line logging to stderr: timestamp, level, component, message. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Process-wide logging settings: written once by flps_log_setup() before
 * threads start, read-only afterwards. */
static const char *log_component = "flps";
static flps_log_level log_min = FLPS_LOG_INFO;

void flps_log_setup(const char *component, flps_log_level min_level)
{
    const char *env = getenv("FLPS_LOG");

    if (component != NULL)
        log_component = component;
    log_min = min_level;
    if (env != NULL) {
        if (strcasecmp(env, "debug") == 0)
            log_min = FLPS_LOG_DEBUG;
        else if (strcasecmp(env, "warn") == 0)
            log_min = FLPS_LOG_WARN;
        else if (strcasecmp(env, "error") == 0)
            log_min = FLPS_LOG_ERROR;
    }
}

void flps_log(flps_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t len;
    int n;
    va_list ap;

    if (level < log_min)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(
        line, sizeof(line),
        "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s[%d]: ", tm.tm_year + 1900,
        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
        ts.tv_nsec / 1000000L, names[level & 3], log_component, (int)getpid());
    if (n < 0)
        return;
    len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    va_start(ap, fmt);
    n = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
    va_end(ap);
    if (n > 0)
        len +=
            (size_t)n < sizeof(line) - len ? (size_t)n : sizeof(line) - len - 1;
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write keeps lines from concurrent threads whole. */
    if (write(STDERR_FILENO, line, len) < 0)
        return;
}
