/* One-line logging: timestamp, level, component, message to stderr, or to
 * the logger a host program set with flps_set_logger (include/flps.h). */
#ifndef FLPS_COMMON_LOG_H
#define FLPS_COMMON_LOG_H

#include "flps.h" /* flps_log_level, flps_set_logger */

/* Set the lowest level printed (default INFO; FLPS_LOG=debug|warn|error in
 * the environment overrides it) and the component name printed on every
 * line (borrowed: pass a string literal or one that outlives the process).
 * Daemons call it once at start-up, before any thread logs; a library user
 * need not call it. */
void flps_log_setup(const char *component, flps_log_level min_level);

/* Log one line; control characters in the message (a newline in an id
 * read from Redis) and bytes that are not valid UTF-8 are written as
 * escapes (\n, \xNN), so a line is always one line of valid text.
 * Thread-safe (one write(2) per line on stderr; calls into a host's logger
 * are serialized). */
void flps_log(flps_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) flps_log(FLPS_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) flps_log(FLPS_LOG_INFO, __VA_ARGS__)
#define log_warn(...) flps_log(FLPS_LOG_WARN, __VA_ARGS__)
#define log_error(...) flps_log(FLPS_LOG_ERROR, __VA_ARGS__)

#endif
