/* Energy and the GPU clock through flrun, on the NVML stub
 * (tests/fakes/nvml_stub.c) and a fake powercap tree: gpu_clock: auto
 * picks the right clock of a synthetic curve and the summary names it;
 * flworker meters the stub's GPU and the summary has joules per
 * iteration; a GPU that refuses clocks leaves the job at the default,
 * said once; where nothing reports energy one line says why and no
 * summary, event or metric carries any. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runcmd.h"
#include "tests/fakes/fake_sysfs.h"
#include "tests/fakes/nvml_stub_ctl.h"

/* The stub's GPU: idle 150 W + 400 W * (clock / 1980)^3. */
#define GPU0                                                                   \
    "init ok\ndevices 1\nd0.clocks 1980,1830,1680,1530,1380\n"                 \
    "d0.mem 3201\nd0.idle_w 150\nd0.dyn_w 400\n"

typedef struct rig {
    stub_ctl c;
    fake_sysfs s; /* an empty sysfs: no RAPL here, whatever the host has */
    char job[400];
} rig;

static void rig_init(rig *r, const char *state)
{
    stub_init(&r->c, state);
    fake_sysfs_init(&r->s, 0);
    setenv("FLPS_NVML_LIBRARY", FLPS_NVML_STUB, 1);
    setenv("FLPS_SYSFS_ROOT", r->s.root, 1);
    snprintf(r->job, sizeof(r->job), "%s/job.yaml", r->c.dir);
}

static void rig_fini(rig *r)
{
    stub_fini(&r->c);
    fake_sysfs_fini(&r->s);
    unsetenv("FLPS_NVML_LIBRARY");
    unsetenv("FLPS_SYSFS_ROOT");
}

/* flrun on text as the job file, to its summary. */
static void run_job(rig *r, const char *text, run_result *out)
{
    char cmd[1200];
    FILE *f = fopen(r->job, "w");

    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s/logs %s", FLPS_BIN_DIR,
             r->c.dir, r->job);
    run_to_summary(cmd, out);
}

static const char *str_of(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v != NULL ? v : "";
}

/* How often needle is in hay. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* The program's iteration (tests/integration/clock_worker.c) takes 40 ms
 * at 1650 MHz and above (memory-bound) and longer below (2.3 times at
 * 1530, 4 times at 1380), drawing the stub's power at its clock (550,
 * 466, 394, 335, 285 W at the five clocks auto tries). Joules per
 * iteration: 22, 18.6, 15.8, 31, 46: the right clock is 1680 MHz, the
 * lowest before the knee, by 15% of energy or more, deterministic (the
 * energy is the stub's, per step); the time per iteration is real, and
 * on a loaded machine noisy, so gpu_clock_slowdown is 50%: the three
 * clocks above the knee are within it and the two below far outside. */
Test(energy, auto_picks_the_right_clock_and_the_summary_names_it,
     .timeout = 300)
{
    rig r;
    run_result res;
    char text[1024];

    rig_init(&r, GPU0);
    snprintf(text, sizeof(text),
             "name: clocks\nworkers: 1\nservers: 1\niterations: 160\n"
             "gpu_clock: auto\ngpu_clock_slowdown: 50%%\n"
             "command: [%s/tests/clock_worker]\n",
             FLPS_BIN_DIR "/..");
    run_job(&r, text, &res);
    cr_assert_str_eq(str_of(res.summary, "gpu_clock"), "1680",
                     "auto's choice in the summary: %s\n%s", res.out, res.err);
    cr_assert_not_null(strstr(res.err, "gpu_clock 1680 MHz"), "%s", res.err);
    cr_assert_not_null(strstr(res.err, "auto chose 1680 MHz"), "%s", res.err);
    cr_assert_gt(json_real_value(
                     json_object_get(res.summary, "gpu_joules_per_iteration")),
                 0);
    cr_assert_str_eq(str_of(res.summary, "energy_method"), "counter");
    cr_assert_null(json_object_get(res.summary, "cpu_joules_per_iteration"),
                   "no package here: none claimed");
    cr_assert_geq(stub_num(&r.c, "d0.sets"), 5, "every candidate was set");
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0,
                       "the clock is restored when the worker exits");
    run_free(&res);
    rig_fini(&r);
}

Test(energy, flworker_meters_the_gpu_and_the_summary_has_joules_per_iteration,
     .timeout = 300)
{
    rig r;
    run_result res;

    rig_init(&r, GPU0 "d0.realtime 1\n");
    run_job(&r,
            "name: metered\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
            "iterations: 300\nbatch_size: 8\neval_every: 0\n",
            &res);
    cr_assert_gt(
        json_real_value(json_object_get(res.summary, "joules_per_iteration")),
        0, "%s", res.out);
    cr_assert_float_eq(
        json_real_value(json_object_get(res.summary, "joules_per_iteration")),
        json_real_value(
            json_object_get(res.summary, "gpu_joules_per_iteration")),
        1e-6, "only a GPU here");
    cr_assert_str_eq(str_of(res.summary, "gpu_clock"), "default",
                     "metered, clocks left alone");
    cr_assert_float_eq(stub_num(&r.c, "d0.sets"), 0, 0);
    cr_assert_eq(count_of(res.err, "energy: metering gpu0 Stub GPU 0 "
                                   "(counter)"),
                 2,
                 "each worker's process meters (the same GPU: counted "
                 "once in the summary): %s",
                 res.err);
    run_free(&res);
    rig_fini(&r);
}

Test(energy, gpus_that_refuse_clocks_leave_the_job_at_default_said_once,
     .timeout = 300)
{
    rig r;
    run_result res;

    rig_init(&r, GPU0 "d0.realtime 1\nd0.locked_perm no_permission\n"
                      "d0.app_perm no_permission\n");
    run_job(&r,
            "name: refused\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"
            "iterations: 30\nbatch_size: 8\neval_every: 0\ngpu_clock: max\n",
            &res);
    cr_assert_eq(count_of(res.err, "refuses clock changes"), 1, "%s", res.err);
    cr_assert_not_null(strstr(res.err, "running at the default clock"), "%s",
                       res.err);
    cr_assert_str_eq(str_of(res.summary, "gpu_clock"), "default");
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0);
    run_free(&res);
    rig_fini(&r);
}

Test(energy, where_nothing_reports_energy_one_line_says_why_and_none_shows,
     .timeout = 300)
{
    rig r;
    run_result res;

    rig_init(&r, GPU0);
    setenv("FLPS_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    run_job(&r,
            "name: dark\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"
            "iterations: 30\nbatch_size: 8\neval_every: 0\n",
            &res);
    cr_assert_eq(count_of(res.err, "energy: no NVML library "
                                   "(/nonexistent/libnvidia-ml.so.1 not "
                                   "found) and no RAPL domains under "),
                 1, "%s", res.err);
    cr_assert_not_null(strstr(res.err, ": energy is not reported"), "%s",
                       res.err);
    cr_assert_null(json_object_get(res.summary, "joules_per_iteration"), "%s",
                   res.out);
    cr_assert_null(json_object_get(res.summary, "gpu_clock"));
    cr_assert_null(strstr(res.out, "joules"), "no event carries any: %s",
                   res.out);
    cr_assert_null(strstr(res.err, " J per iteration"), "%s", res.err);
    run_free(&res);
    rig_fini(&r);
}
