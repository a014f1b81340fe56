/* Small statistics and memory probes shared by bench_ps and
 * bench_aggregate: medians, peak resident memory, and a JSON line built
 * piece by piece. Header-only, like bench_util.h. */
#ifndef FLPS_BENCH_STATS_H
#define FLPS_BENCH_STATS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int bench_cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : (a > b);
}

/* Median of a[0..n) (mean of the middle two for even n); a is reordered.
 * 0 for n == 0. */
static inline double bench_median(double *a, size_t n)
{
    if (n == 0)
        return 0;
    qsort(a, n, sizeof(*a), bench_cmp_double);
    return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

/* Peak resident set (VmHWM) of process pid (0 = this one) in bytes, from
 * /proc; 0 when it cannot be read. */
static inline size_t bench_peak_rss(pid_t pid)
{
    char path[64], line[256];
    size_t kb = 0;
    FILE *f;

    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/status");
    else
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* From /proc/PID/stat of process pid (0 = this one): its minor page
 * faults and the CPU seconds it used (user + system, every thread) so
 * far. Returns 0, or -1 (both left 0) when it cannot be read. */
static inline int bench_proc_stat(pid_t pid, unsigned long long *minflt,
                                  double *cpu_s)
{
    char path[64], buf[1024], *p;
    unsigned long long flt = 0, ut = 0, st = 0;
    long tick = sysconf(_SC_CLK_TCK);
    size_t n;
    FILE *f;

    *minflt = 0;
    *cpu_s = 0;
    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/stat");
    else
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces: count fields from its ')'. After
     * it come state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt,
     * cminflt, majflt, cmajflt, utime, stime (clock ticks). */
    p = strrchr(buf, ')');
    if (p == NULL || tick <= 0 ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %llu %*u %*u %*u %llu %llu",
               &flt, &ut, &st) != 3)
        return -1;
    *minflt = flt;
    *cpu_s = (double)(ut + st) / (double)tick;
    return 0;
}

/* Minor page faults of process pid (0 = this one) so far; 0 when they
 * cannot be read. */
static inline unsigned long long bench_minor_faults(pid_t pid)
{
    unsigned long long flt;
    double cpu;

    bench_proc_stat(pid, &flt, &cpu);
    return flt;
}

/* CPU seconds (user + system) process pid (0 = this one) used so far; 0
 * when they cannot be read. */
static inline double bench_cpu_seconds(pid_t pid)
{
    unsigned long long flt;
    double cpu;

    bench_proc_stat(pid, &flt, &cpu);
    return cpu;
}

/* Reset the VmHWM of process pid (0 = this one) to its current RSS (Linux
 * >= 4.0); returns 0 on success, -1 when the kernel does not allow it. */
static inline int bench_reset_peak_rss(pid_t pid)
{
    char path[64];
    FILE *f;
    int ok;

    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/clear_refs");
    else
        snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
    f = fopen(path, "w");
    if (f == NULL)
        return -1;
    ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The last-line JSON object, appended to key by key. */
typedef struct bench_json {
    char buf[16384];
    size_t len;
} bench_json;

static inline void bench_json_raw(bench_json *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline void bench_json_raw(bench_json *j, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (j->len >= sizeof(j->buf))
        return;
    va_start(ap, fmt);
    n = vsnprintf(j->buf + j->len, sizeof(j->buf) - j->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        j->len += (size_t)n;
}

/* Add "key":value (value printed with %.6g; a non-finite value, which JSON
 * cannot hold, becomes null). */
static inline void bench_json_num(bench_json *j, const char *key, double v)
{
    bench_json_raw(j, "%s\"%s\":", j->len ? "," : "{", key);
    if (v == v && v - v == 0)
        bench_json_raw(j, "%.6g", v);
    else
        bench_json_raw(j, "null");
}

/* Add "key":literal (true, false, null, or a quoted string given with its
 * quotes). */
static inline void bench_json_lit(bench_json *j, const char *key,
                                  const char *lit)
{
    bench_json_raw(j, "%s\"%s\":%s", j->len ? "," : "{", key, lit);
}

/* Print the object (closing it) as one line. */
static inline void bench_json_print(bench_json *j)
{
    if (j->len == 0)
        bench_json_raw(j, "{");
    printf("%s}\n", j->buf);
    fflush(stdout);
}

#endif
