/* One-line logging to stderr: timestamp, level, component, message. */
#ifndef FLPS_COMMON_LOG_H
#define FLPS_COMMON_LOG_H

typedef enum {
    FLPS_LOG_DEBUG = 0,
    FLPS_LOG_INFO = 1,
    FLPS_LOG_WARN = 2,
    FLPS_LOG_ERROR = 3,
} flps_log_level;

/* Set the lowest level printed (default INFO; FLPS_LOG=debug in the
 * environment lowers it) and the component name printed on every line
 * (borrowed: pass a string literal or one that outlives the process).
 * Call once at start-up, before any thread logs. */
void flps_log_setup(const char *component, flps_log_level min_level);

/* Print one line. Thread-safe (one write(2) per line). */
void flps_log(flps_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) flps_log(FLPS_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) flps_log(FLPS_LOG_INFO, __VA_ARGS__)
#define log_warn(...) flps_log(FLPS_LOG_WARN, __VA_ARGS__)
#define log_error(...) flps_log(FLPS_LOG_ERROR, __VA_ARGS__)

#endif
