/* PREFIX_build_info and the process_* families, refreshed from /proc at
 * every render of the registry. */
#include "common/metrics_proc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/alloc.h"
#include "flps.h"

/* The families the collect callback sets; owned by the registry (through
 * metrics_set_collect), handles borrowed from it. */
typedef struct proc_families {
    metrics_family *cpu, *rss, *vsz, *start, *fds, *max_fds;
} proc_families;

flps_err metrics_proc_parse_stat(const char *text, double ticks_per_s,
                                 double *cpu_seconds, double *start_ticks)
{
    const char *p = strrchr(text, ')');
    double utime = 0, stime = 0, start = 0;
    int field = 2; /* the ')' closes field 2, comm */

    if (p == NULL || ticks_per_s <= 0)
        return FLPS_EPROTO;
    p++;
    /* Fields 14 and 15 are utime and stime, 22 is starttime (proc(5)). */
    while (*p != '\0' && field < 22) {
        char *end;
        double v;

        while (*p == ' ')
            p++;
        if (*p == '\0' || *p == '\n')
            break;
        field++;
        v = strtod(p, &end);
        if (end == p) { /* the state letter, field 3 */
            while (*p != ' ' && *p != '\0')
                p++;
            continue;
        }
        if (field == 14)
            utime = v;
        else if (field == 15)
            stime = v;
        else if (field == 22)
            start = v;
        p = end;
    }
    if (field < 22)
        return FLPS_EPROTO;
    *cpu_seconds = (utime + stime) / ticks_per_s;
    *start_ticks = start;
    return FLPS_OK;
}

flps_err metrics_proc_parse_btime(const char *text, double *btime)
{
    const char *p = strstr(text, "btime ");

    while (p != NULL && p != text && p[-1] != '\n')
        p = strstr(p + 1, "btime ");
    if (p == NULL)
        return FLPS_EPROTO;
    *btime = strtod(p + 6, NULL);
    return FLPS_OK;
}

/* The first len - 1 bytes of path, NUL-terminated; 0 on error. */
static int read_text(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL)
        return 0;
    n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

void metrics_proc_read(metrics_proc_sample *out)
{
    /* /proc/stat lists every CPU before btime: 64 KiB holds a large host's. */
    static const size_t statlen = 65536;
    char buf[1024], *stat = flps_malloc(statlen);
    double ticks = (double)sysconf(_SC_CLK_TCK);
    double page = (double)sysconf(_SC_PAGESIZE);
    double cpu = 0, start = 0, btime = 0, vsz = 0, rss = 0;
    struct rlimit rl;
    DIR *d;

    memset(out, 0, sizeof(*out));
    if (read_text("/proc/self/stat", buf, sizeof(buf)) &&
        metrics_proc_parse_stat(buf, ticks, &cpu, &start) == FLPS_OK) {
        out->cpu_seconds = cpu;
        if (stat != NULL && read_text("/proc/stat", stat, statlen) &&
            metrics_proc_parse_btime(stat, &btime) == FLPS_OK)
            out->start_time = btime + start / ticks;
    }
    flps_free(stat);
    if (read_text("/proc/self/statm", buf, sizeof(buf)) &&
        sscanf(buf, "%lf %lf", &vsz, &rss) == 2) {
        out->virtual_bytes = vsz * page;
        out->resident_bytes = rss * page;
    }
    d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *e;
        double n = 0;

        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.')
                n++;
        closedir(d);
        out->open_fds = n - 1; /* the directory's own descriptor */
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        out->max_fds = (double)rl.rlim_cur;
}

static void collect(void *arg)
{
    proc_families *pf = arg;
    metrics_proc_sample s;

    metrics_proc_read(&s);
    /* A counter never goes down; CPU time read from /proc does not either,
     * so set refuses nothing here. */
    metrics_counter_set(pf->cpu, NULL, s.cpu_seconds);
    metrics_gauge_set(pf->rss, NULL, s.resident_bytes);
    metrics_gauge_set(pf->vsz, NULL, s.virtual_bytes);
    metrics_gauge_set(pf->start, NULL, s.start_time);
    metrics_gauge_set(pf->fds, NULL, s.open_fds);
    metrics_gauge_set(pf->max_fds, NULL, s.max_fds);
}

/* The process_* families, in the order /metrics shows them: the names
 * and help texts of the Prometheus client libraries. */
static const metrics_def proc_defs[] = {
    {METRICS_COUNTER, "process_cpu_seconds_total",
     METRICS_AT(proc_families, cpu),
     "User and system CPU time spent in seconds."},
    {METRICS_GAUGE, "process_resident_memory_bytes",
     METRICS_AT(proc_families, rss), "Resident memory size in bytes."},
    {METRICS_GAUGE, "process_virtual_memory_bytes",
     METRICS_AT(proc_families, vsz), "Virtual memory size in bytes."},
    {METRICS_GAUGE, "process_start_time_seconds",
     METRICS_AT(proc_families, start),
     "Start time of the process since the Unix epoch in seconds."},
    {METRICS_GAUGE, "process_open_fds", METRICS_AT(proc_families, fds),
     "Number of open file descriptors."},
    {METRICS_GAUGE, "process_max_fds", METRICS_AT(proc_families, max_fds),
     "Maximum number of open file descriptors."},
};

flps_err metrics_proc_register(metrics *reg, const char *prefix)
{
    static const char *const version[] = {"version"};
    const char *v[] = {flps_version()};
    proc_families *pf;
    metrics_family *info;
    char name[128], help[160];
    flps_err rc;

    if (reg == NULL || prefix == NULL ||
        (size_t)snprintf(name, sizeof(name), "%s_build_info", prefix) >=
            sizeof(name))
        return FLPS_EINVAL;
    snprintf(help, sizeof(help),
             "Always 1; the version label is the %s build running.", prefix);
    rc = metrics_gauge(reg, name, help, version, 1, &info);
    if (rc == FLPS_OK)
        rc = metrics_gauge_set(info, v, 1);
    if (rc != FLPS_OK)
        return rc;
    pf = flps_calloc(1, sizeof(*pf));
    if (pf == NULL)
        return FLPS_ENOMEM;
    rc = metrics_register_table(reg, proc_defs, METRICS_NDEFS(proc_defs), pf);
    if (rc != FLPS_OK) {
        flps_free(pf);
        return rc;
    }
    metrics_set_collect(reg, collect, pf, flps_free);
    return FLPS_OK;
}

flps_err metrics_proc_register_daemon(metrics *reg, const char *prefix,
                                      const metrics_def *defs, size_t n,
                                      void *base)
{
    flps_err rc = metrics_register_table(reg, defs, n, base);

    return rc == FLPS_OK ? metrics_proc_register(reg, prefix) : rc;
}
