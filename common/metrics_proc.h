/* The families every flps daemon exports beside its own: PREFIX_build_info
 * and the process_* metrics of the Prometheus client conventions (CPU,
 * memory, start time, file descriptors), read from /proc at each scrape. */
#ifndef FLPS_COMMON_METRICS_PROC_H
#define FLPS_COMMON_METRICS_PROC_H

#include <stddef.h>

#include "common/err.h"
#include "common/metrics.h"

/* What /proc says about one process (see metrics_proc_parse_*). */
typedef struct metrics_proc_sample {
    double cpu_seconds;       /* user + system */
    double resident_bytes;    /* resident set */
    double virtual_bytes;     /* address space */
    double start_time;        /* Unix seconds */
    double open_fds, max_fds; /* max_fds: the soft RLIMIT_NOFILE */
} metrics_proc_sample;

/* Register PREFIX_build_info{version} (a gauge at 1; prefix is the daemon,
 * "flps", "flworker", ...) and process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_start_time_seconds, process_open_fds and process_max_fds in reg,
 * and make every render of reg refresh the process_* values first
 * (metrics_set_collect: it takes the registry's one collect slot).
 * Errors: FLPS_EINVAL (a prefix that makes no metric name), FLPS_ENOMEM. */
flps_err metrics_proc_register(metrics *reg, const char *prefix);

/* A daemon's families: its own table (metrics_register_table(reg, defs, n,
 * base), shown first), then metrics_proc_register(reg, prefix). The one
 * way every daemon fills its registry. Errors: those of the two calls. */
flps_err metrics_proc_register_daemon(metrics *reg, const char *prefix,
                                      const metrics_def *defs, size_t n,
                                      void *base);

/* From the text of /proc/self/stat: utime + stime in seconds (ticks per
 * second given) and the start time in clock ticks since boot. The command
 * name may hold spaces and parentheses; fields are counted after the last
 * ')'. FLPS_EPROTO on text that is not a stat line. No I/O. */
flps_err metrics_proc_parse_stat(const char *text, double ticks_per_s,
                                 double *cpu_seconds, double *start_ticks);

/* The "btime" (boot time, Unix seconds) of /proc/stat's text. FLPS_EPROTO
 * when absent. No I/O. */
flps_err metrics_proc_parse_btime(const char *text, double *btime);

/* Read the calling process's sample from /proc. A field that cannot be
 * read is 0, silently: /proc is there on every Linux the daemons run on,
 * and a scrape must not fail for one missing value. Never fails. */
void metrics_proc_read(metrics_proc_sample *out);

#endif
