/* common/metrics_proc: /proc parsing without I/O, and the families a
 * registry gains, refreshed at every render. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/metrics.h"
#include "common/metrics_proc.h"
#include "flps.h"

/* A stat line whose command holds a space and a ')' (proc(5) fields:
 * utime 14 = 250, stime 15 = 50, starttime 22 = 12345). */
static const char stat_line[] =
    "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 "
    "20 0 3 0 12345 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 "
    "0 17 1 0 0 0 0 0\n";

Test(metrics_proc, parses_cpu_and_start_after_the_last_parenthesis)
{
    double cpu = -1, start = -1;

    cr_assert_eq(metrics_proc_parse_stat(stat_line, 100, &cpu, &start),
                 FLPS_OK);
    cr_assert_float_eq(cpu, 3.0, 1e-12, "(250 + 50) / 100 ticks: %g", cpu);
    cr_assert_float_eq(start, 12345, 1e-12);
}

Test(metrics_proc, refuses_a_stat_line_that_is_cut_short)
{
    double cpu = -1, start = -1;

    cr_assert_eq(metrics_proc_parse_stat("12 (x) S 1 2 3", 100, &cpu, &start),
                 FLPS_EPROTO);
    cr_assert_eq(metrics_proc_parse_stat("no parenthesis", 100, &cpu, &start),
                 FLPS_EPROTO);
    cr_assert_eq(cpu, -1, "outputs are written only on success");
}

Test(metrics_proc, finds_btime_only_at_the_start_of_a_line)
{
    double bt = -1;

    cr_assert_eq(metrics_proc_parse_btime("cpu 1 2 3\nxbtime 5\nbtime "
                                          "1700000000\nprocesses 9\n",
                                          &bt),
                 FLPS_OK);
    cr_assert_float_eq(bt, 1700000000, 1e-6);
    cr_assert_eq(metrics_proc_parse_btime("cpu 1\nxbtime 5\n", &bt),
                 FLPS_EPROTO);
}

Test(metrics_proc, reads_this_process_plausibly)
{
    metrics_proc_sample s;
    double now = (double)time(NULL);

    metrics_proc_read(&s);
    cr_assert_gt(s.resident_bytes, 100000);
    cr_assert_geq(s.virtual_bytes, s.resident_bytes);
    cr_assert_geq(s.open_fds, 3, "stdin, stdout and stderr at least");
    cr_assert(s.start_time > now - 3600 && s.start_time <= now + 1,
              "started %g s ago", now - s.start_time);
}

/* The value of the sample line "series value", or -1. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

Test(metrics_proc, a_registry_renders_build_info_and_fresh_process_values)
{
    metrics *reg = NULL;
    char *t1 = NULL, *t2 = NULL, series[96];
    size_t len;
    volatile double x = 0;

    cr_assert_eq(metrics_create(&reg), FLPS_OK);
    cr_assert_eq(metrics_proc_register(reg, "flworker"), FLPS_OK);
    cr_assert_eq(metrics_render(reg, &t1, &len), FLPS_OK);
    snprintf(series, sizeof(series), "flworker_build_info{version=\"%s\"}",
             flps_version());
    cr_assert_eq(sample(t1, series), 1, "%s", t1);
    cr_assert_gt(sample(t1, "process_resident_memory_bytes"), 0);
    cr_assert_gt(sample(t1, "process_open_fds"), 0);
    cr_assert_not_null(strstr(t1, "# TYPE process_cpu_seconds_total counter"));
    /* Burn CPU: the next render must show more of it. */
    for (long i = 0;
         i < 200000000L && sample(t1, "process_cpu_seconds_total") + 0.05 >
                               (double)clock() / CLOCKS_PER_SEC;
         i++)
        x += sqrt((double)i);
    cr_assert_eq(metrics_render(reg, &t2, &len), FLPS_OK);
    cr_assert_gt(sample(t2, "process_cpu_seconds_total"),
                 sample(t1, "process_cpu_seconds_total"),
                 "the collect hook did not run at render");
    flps_free(t1);
    flps_free(t2);
    metrics_destroy(reg);
}

Test(metrics_proc, a_daemon_registers_its_table_first_then_the_process_families)
{
    typedef struct {
        metrics_family *runs;
    } daemon_fams;
    static const metrics_def defs[] = {
        {METRICS_COUNTER, "fld_runs_total", METRICS_AT(daemon_fams, runs),
         "Runs."},
    };
    daemon_fams fams = {NULL};
    metrics *reg = NULL;
    char *text = NULL;
    size_t len;

    cr_assert_eq(metrics_create(&reg), FLPS_OK);
    cr_assert_eq(metrics_proc_register_daemon(reg, "fld", defs,
                                              METRICS_NDEFS(defs), &fams),
                 FLPS_OK);
    cr_assert_not_null(fams.runs, "the table's handle is filled in");
    cr_assert_eq(metrics_counter_add(fams.runs, NULL, 2), FLPS_OK);
    cr_assert_eq(metrics_render(reg, &text, &len), FLPS_OK);
    cr_assert_eq(sample(text, "fld_runs_total"), 2, "%s", text);
    cr_assert_gt(sample(text, "process_open_fds"), 0, "%s", text);
    cr_assert_not_null(strstr(text, "fld_build_info"), "%s", text);
    cr_assert(strstr(text, "fld_runs_total") < strstr(text, "fld_build_info"),
              "the daemon's own families come first: %s", text);
    flps_free(text);
    metrics_destroy(reg);
}

Test(metrics_proc, refuses_a_prefix_that_makes_no_metric_name)
{
    metrics *reg = NULL;

    cr_assert_eq(metrics_create(&reg), FLPS_OK);
    cr_assert_eq(metrics_proc_register(reg, "9bad"), FLPS_EINVAL);
    metrics_destroy(reg);
}
