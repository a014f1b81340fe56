/* One-line logging: timestamp, level, component, message to stderr, or to
 * the logger a host program set. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/quote.h"

/* Process-wide logging settings. component and the minimum level are
 * written by flps_log_setup() before threads start; a library user that
 * never calls it gets FLPS_LOG read once, before its first line (reading
 * it again after a setup changes nothing: the environment wins in both). The
 * host's logger (fn, arg) is guarded by log_lock, which is also held while
 * the host's function runs, so a host never sees two calls at once and a
 * logger replaced by flps_set_logger is never called afterwards. */
static const char *log_component = "flps";
static flps_log_level log_min = FLPS_LOG_INFO;
static pthread_once_t log_env_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static flps_logger_fn log_fn;
static void *log_arg;

static void log_read_env(void)
{
    const char *env = getenv("FLPS_LOG");

    if (env == NULL)
        return;
    if (strcasecmp(env, "debug") == 0)
        log_min = FLPS_LOG_DEBUG;
    else if (strcasecmp(env, "info") == 0)
        log_min = FLPS_LOG_INFO;
    else if (strcasecmp(env, "warn") == 0)
        log_min = FLPS_LOG_WARN;
    else if (strcasecmp(env, "error") == 0)
        log_min = FLPS_LOG_ERROR;
}

void flps_log_setup(const char *component, flps_log_level min_level)
{
    if (component != NULL)
        log_component = component;
    log_min = min_level;
    log_read_env(); /* the environment overrides the daemon's default */
}

FLPS_API void flps_set_logger(flps_logger_fn fn, void *arg)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_arg = fn != NULL ? arg : NULL;
    pthread_mutex_unlock(&log_lock);
}

/* Append at most what fits, keeping room for the newline. */
static size_t log_fit(size_t len, int n, size_t cap)
{
    if (n <= 0)
        return len;
    return len + (size_t)n < cap - 1 ? len + (size_t)n : cap - 2;
}

void flps_log(flps_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char line[1024], msg[1024];
    struct timespec ts;
    struct tm tm;
    size_t len, msg_at;
    int n;
    va_list ap;

    pthread_once(&log_env_once, log_read_env);
    if (level < log_min)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(
        line, sizeof(line),
        "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s[%d]: ", tm.tm_year + 1900,
        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
        ts.tv_nsec / 1000000L, names[level & 3], log_component, (int)getpid());
    len = msg_at = log_fit(0, n, sizeof(line));
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        msg[0] = '\0';
    /* Control characters as escapes (\n, \xNN): a logged id or name
     * that holds a newline could otherwise forge a line of its own; and
     * bytes that are not UTF-8 too, so a line is always valid text. Keeps
     * room for the newline. */
    len = flps_text_clean(line, len, sizeof(line), 2, msg);
    pthread_mutex_lock(&log_lock);
    if (log_fn != NULL) {
        line[len] = '\0';
        log_fn(log_arg, level, line + msg_at);
        pthread_mutex_unlock(&log_lock);
        return;
    }
    pthread_mutex_unlock(&log_lock);
    line[len++] = '\n';
    /* One write keeps lines from concurrent threads whole. */
    if (write(STDERR_FILENO, line, len) < 0)
        return;
}
