/* Tests for common/energy.c: GPU energy through the NVML stub (the
 * counter, the power-integral fallback, GPUs that cannot be read), CPU
 * packages through a fake powercap tree (wraparound included), absence
 * with its one line, and the meter's windows. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/energy.h"
#include "tests/fakes/fake_powercap.h"
#include "tests/fakes/nvml_stub_ctl.h"

/* One stub GPU drawing 400 W at its highest clock (100 idle + 300). */
#define ONE_GPU                                                                \
    "init ok\ndevices 1\nd0.clocks 1980,1830,1680,1530\nd0.mem 3201\n"

/* Virtual time, advanced by the tests. */
static double vtime;

static double vnow(void *arg)
{
    (void)arg;
    return vtime;
}

/* What a test reads: the stub with a state, an empty fake sysfs root
 * (add powercap zones to it), options on virtual time, and the handle. */
typedef struct rig {
    fake_sysfs s;
    stub_ctl c;
    energy_opts o;
    energy *e;
} rig;

static void rig_init(rig *r, const char *state)
{
    memset(r, 0, sizeof(*r));
    fake_sysfs_init(&r->s, 0);
    stub_init(&r->c, state);
    r->o.nvml_library = FLPS_NVML_STUB;
    r->o.sysfs_root = r->s.root;
    r->o.now = vnow;
    vtime = 1000.0;
}

/* Open with the options as the test left them. */
static void rig_open(rig *r)
{
    cr_assert_eq(energy_open(&r->o, &r->e, NULL, 0), FLPS_OK);
}

/* Device i's joules since open, read now. */
static double joules_now(rig *r, size_t i)
{
    double j[ENERGY_MAX_DEVICES];

    cr_assert_eq(energy_read(r->e, j, ENERGY_MAX_DEVICES), FLPS_OK);
    return j[i];
}

static void rig_fini(rig *r)
{
    energy_close(r->e);
    stub_fini(&r->c);
    fake_sysfs_fini(&r->s);
}

/* Advance virtual time and the stub's counters together. */
static void pass(double seconds)
{
    vtime += seconds;
    stub_advance(seconds);
}

Test(energy, absent_hardware_gives_no_device_and_one_line_saying_why)
{
    rig r;
    energy_meter m;
    char want[1024], buf[1024];

    rig_init(&r, "init ok\ndevices 1\n");
    r.o.nvml_library = "libflps-no-such-nvml.so.1";
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 0);
    snprintf(want, sizeof(want),
             "no NVML library (libflps-no-such-nvml.so.1 not found) and no "
             "RAPL domains under %s/class/powercap: energy is not reported",
             r.s.root);
    cr_assert_str_eq(energy_why(r.e), want);
    cr_assert_str_eq(energy_describe(r.e, buf, sizeof(buf)), want);
    energy_meter_init(&m, r.e, 1, 0.001);
    for (uint64_t it = 1; it < 50; it++) {
        vtime += 1;
        cr_assert_eq(energy_meter_tick(&m, it), 0, "no window without energy");
    }
    cr_assert_null(energy_meter_window(&m));
    rig_fini(&r);
}

Test(energy, this_machine_without_nvml_or_rapl_says_so_in_the_issues_words)
{
    energy *e = NULL;
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);

    if (nvml != NULL || access("/sys/class/powercap", F_OK) == 0) {
        if (nvml != NULL)
            dlclose(nvml);
        cr_skip_test("this machine has NVML or RAPL");
    }
    unsetenv("FLPS_NVML_LIBRARY");
    unsetenv("FLPS_SYSFS_ROOT");
    cr_assert_eq(energy_open(NULL, &e, NULL, 0), FLPS_OK);
    cr_assert_eq(energy_count(e), 0);
    cr_assert_str_eq(energy_why(e),
                     "no NVML library (libnvidia-ml.so.1 not found) and no "
                     "RAPL domains under /sys/class/powercap: energy is not "
                     "reported");
    energy_close(e);
}

Test(energy, a_driver_that_is_not_loaded_is_named_as_such)
{
    rig r;

    rig_init(&r, "init driver_not_loaded\ndevices 1\n");
    r.o.sources = ENERGY_SOURCE_GPU;
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 0);
    cr_assert(strstr(energy_why(r.e),
                     "is present but nvmlInit failed: Driver Not Loaded: "
                     "energy is not reported") != NULL,
              "%s", energy_why(r.e));
    cr_assert(strstr(energy_why(r.e), "RAPL") == NULL,
              "only the GPU was looked at: %s", energy_why(r.e));
    rig_fini(&r);
}

Test(energy, reads_a_gpus_energy_counter_in_joules_since_open)
{
    rig r;
    const energy_device *d;

    rig_init(&r, ONE_GPU "d0.energy_mj 123456789\n");
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 1);
    d = energy_device_at(r.e, 0);
    cr_assert_str_eq(d->name, "gpu0");
    cr_assert_str_eq(d->model, "Stub GPU 0");
    cr_assert_eq(d->kind, ENERGY_KIND_GPU);
    cr_assert_eq(d->method, ENERGY_METHOD_COUNTER);
    cr_assert_str_eq(energy_method_name(d->method), "counter");
    cr_assert(strstr(energy_why(r.e), "no RAPL domains under") != NULL,
              "the missing source is still named: %s", energy_why(r.e));
    cr_assert_float_eq(joules_now(&r, 0), 0.0, 1e-9,
                       "counted from open, not from boot");
    pass(2.0);
    cr_assert_float_eq(joules_now(&r, 0), 800.0, 1e-6, "400 W for 2 s");
    rig_fini(&r);
}

Test(energy, a_gpu_without_the_counter_integrates_its_power_and_says_so)
{
    rig r;
    double j[2];
    char buf[512];

    rig_init(&r, "init ok\ndevices 2\nd0.clocks 1980\nd1.clocks 1980\n"
                 "d1.counter 0\nd0.power 0\n");
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 2);
    cr_assert_eq(energy_device_at(r.e, 0)->method, ENERGY_METHOD_COUNTER,
                 "the counter needs no power reading");
    cr_assert_eq(energy_device_at(r.e, 1)->method,
                 ENERGY_METHOD_POWER_INTEGRAL);
    cr_assert_str_eq(energy_describe(r.e, buf, sizeof(buf)),
                     "gpu0 Stub GPU 0 (counter), gpu1 Stub GPU 1 "
                     "(power-integral)");
    pass(1.5);
    cr_assert_eq(energy_read(r.e, j, 2), FLPS_OK);
    cr_assert_float_eq(j[0], 600.0, 1e-6);
    cr_assert_float_eq(j[1], 600.0, 1e-6, "400 W read twice, over 1.5 s");
    rig_fini(&r);
}

Test(energy, gpus_that_cannot_be_read_are_left_out_and_named)
{
    rig r;

    rig_init(&r, "init ok\ndevices 3\nd0.clocks 1980\nd1.lost 1\n"
                 "d2.counter 0\nd2.power 0\n");
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 1);
    cr_assert_str_eq(energy_device_at(r.e, 0)->name, "gpu0");
    cr_assert(strstr(energy_why(r.e), "gpu1 cannot be opened: GPU is lost") !=
                  NULL,
              "%s", energy_why(r.e));
    cr_assert(strstr(energy_why(r.e),
                     "gpu2 (Stub GPU 2) reports neither an energy counter "
                     "nor its power (Not Supported)") != NULL,
              "%s", energy_why(r.e));
    rig_fini(&r);
}

Test(energy, a_gpu_lost_while_running_keeps_its_total)
{
    rig r;
    double j[1];

    rig_init(&r, ONE_GPU);
    rig_open(&r);
    pass(1.0);
    cr_assert_eq(energy_read(r.e, j, 1), FLPS_OK);
    cr_assert_float_eq(j[0], 400.0, 1e-6);
    stub_set(&r.c, "d0.lost", "1");
    cr_assert_eq(energy_read(r.e, j, 1), FLPS_OK);
    cr_assert_float_eq(j[0], 400.0, 1e-6, "the total stays");
    cr_assert_eq(energy_device_at(r.e, 0)->failed, 1);
    rig_fini(&r);
}

Test(energy, a_gpu_list_picks_gpus_by_index_or_uuid_and_refuses_others)
{
    rig r;
    energy *e = NULL;
    char err[256];

    rig_init(&r, "init ok\ndevices 2\nd0.clocks 1980\nd1.clocks 1980\n");
    r.o.gpus = "1";
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 1);
    cr_assert_str_eq(energy_device_at(r.e, 0)->name, "gpu1");
    energy_close(r.e);
    r.o.gpus = "GPU-stub-0";
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 1);
    cr_assert_str_eq(energy_device_at(r.e, 0)->name, "gpu0");
    r.o.gpus = "0,7";
    cr_assert_eq(energy_open(&r.o, &e, err, sizeof(err)), FLPS_EINVAL);
    cr_assert_null(e);
    cr_assert_str_eq(err, "GPU '7' is neither an index below 2 nor the UUID "
                          "of a GPU NVML lists");
    rig_fini(&r);
}

Test(energy, the_library_can_be_named_by_the_environment)
{
    rig r;

    rig_init(&r, ONE_GPU);
    r.o.nvml_library = NULL;
    setenv("FLPS_NVML_LIBRARY", FLPS_NVML_STUB, 1);
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 1);
    unsetenv("FLPS_NVML_LIBRARY");
    rig_fini(&r);
}

/* A node's powercap, read alone: two packages listed out of order, and
 * the zones that are not packages. */
static void two_packages(rig *r, uint64_t range)
{
    fake_powercap_zone(&r->s, "intel-rapl:1", "package-1", 5000000, range);
    fake_powercap_zone(&r->s, "intel-rapl:0", "package-0", 1000000, range);
    fake_powercap_zone(&r->s, "intel-rapl:0:0", "core", 700000, range);
    fake_powercap_zone(&r->s, "intel-rapl:2", "psys", 9000000, range);
    fake_powercap_zone(&r->s, "intel-rapl-mmio:0", "package-0", 1000000, range);
    r->o.sources = ENERGY_SOURCE_CPU;
}

Test(energy, reads_rapl_packages_in_order_and_nothing_else)
{
    rig r;
    double j[2];
    char buf[512];

    rig_init(&r, "init ok\ndevices 0\n");
    two_packages(&r, 262143328850ull);
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 2);
    cr_assert_str_eq(energy_describe(r.e, buf, sizeof(buf)),
                     "cpu-package0 package-0 (counter), cpu-package1 "
                     "package-1 (counter)");
    cr_assert_eq(energy_device_at(r.e, 1)->kind, ENERGY_KIND_CPU_PACKAGE);
    cr_assert_str_eq(energy_why(r.e), "");
    fake_powercap_set(&r.s, "intel-rapl:0", 1000000 + 2500000);
    fake_powercap_set(&r.s, "intel-rapl:1", 5000000 + 40000000);
    fake_powercap_set(&r.s, "intel-rapl:0:0", 99000000);
    cr_assert_eq(energy_read(r.e, j, 2), FLPS_OK);
    cr_assert_float_eq(j[0], 2.5, 1e-9);
    cr_assert_float_eq(j[1], 40.0, 1e-9);
    rig_fini(&r);
}

Test(energy, a_rapl_counter_that_wraps_counts_across_the_wrap)
{
    rig r;
    const uint64_t range = 262143328850ull;

    rig_init(&r, "init ok\ndevices 0\n");
    two_packages(&r, range);
    fake_powercap_set(&r.s, "intel-rapl:0", range - 1000000); /* 1 J left */
    rig_open(&r);
    fake_powercap_set(&r.s, "intel-rapl:0", 2000000);
    cr_assert_float_eq(joules_now(&r, 0), 3.0, 1e-9,
                       "1 J up to the wrap, 2 J after");
    fake_powercap_set(&r.s, "intel-rapl:0", 2500000);
    cr_assert_float_eq(joules_now(&r, 0), 3.5, 1e-9, "and on from there");
    rig_fini(&r);
}

Test(energy, an_unreadable_rapl_counter_is_named_not_counted)
{
    rig r;
    char dir[600];

    rig_init(&r, "init ok\ndevices 0\n");
    fake_powercap_zone(&r.s, "intel-rapl:0", "package-0", 1, 100);
    /* A directory where the counter is: reading it fails as an unreadable
     * file does (tests run as root, whom permissions do not stop). */
    snprintf(dir, sizeof(dir), "%s/class/powercap/intel-rapl:0/energy_uj",
             r.s.root);
    cr_assert_eq(unlink(dir), 0);
    fake_sysfs_mkdirs(dir);
    r.o.sources = ENERGY_SOURCE_CPU;
    rig_open(&r);
    cr_assert_eq(energy_count(r.e), 0);
    cr_assert(strstr(energy_why(r.e),
                     "intel-rapl:0/energy_uj is not readable") != NULL,
              "%s", energy_why(r.e));
    cr_assert(strstr(energy_why(r.e), ": energy is not reported") != NULL);
    rig_fini(&r);
}

/* 1/64 s per iteration: exact in binary, so windows close on the
 * iteration the arithmetic says. */
#define STEP (1.0 / 64)

Test(energy, the_meter_closes_a_window_after_n_iterations_and_the_time)
{
    rig r;
    energy_meter m;
    const energy_window *w;
    uint64_t closed_at = 0;

    /* Every read of the counter adds 1 J: a read per tick would show. */
    rig_init(&r, ONE_GPU "d0.per_call_mj 1000\n");
    rig_open(&r);
    energy_meter_init(&m, r.e, 10, 0.5);
    cr_assert_eq(energy_meter_tick(&m, 0), 0, "the first tick opens");
    for (uint64_t it = 1; it <= 40 && closed_at == 0; it++) {
        pass(STEP);
        if (energy_meter_tick(&m, it))
            closed_at = it;
    }
    cr_assert_eq(closed_at, 32, "0.5 s at 1/64 s per iteration");
    w = energy_meter_window(&m);
    cr_assert_not_null(w);
    cr_assert_eq(w->iter_from, 0);
    cr_assert_eq(w->iter_to, 32);
    cr_assert_float_eq(w->seconds, 0.5, 1e-12);
    cr_assert_float_eq(w->joules[0], 400.0 * 0.5 + 1.0, 1e-6,
                       "one read closed the window, none in between");
    cr_assert_float_eq(w->joules_gpu, w->joules[0], 1e-12);
    cr_assert_float_eq(w->joules_cpu, 0.0, 1e-12);
    cr_assert_float_eq(w->seconds_per_iter, STEP, 1e-12);
    cr_assert_float_eq(w->joules_per_iter, 201.0 / 32, 1e-9);
    cr_assert_float_eq(w->gpu_joules_per_iter, 201.0 / 32, 1e-9);
    rig_fini(&r);
}

Test(energy, the_meter_waits_for_n_iterations_however_long_they_take)
{
    rig r;
    energy_meter m;
    uint64_t closed_at = 0;

    rig_init(&r, ONE_GPU);
    rig_open(&r);
    energy_meter_init(&m, r.e, 10, 0.5);
    energy_meter_start(&m, 100);
    for (uint64_t it = 101; it <= 120 && closed_at == 0; it++) {
        pass(0.25);
        if (energy_meter_tick(&m, it))
            closed_at = it;
    }
    cr_assert_eq(closed_at, 110);
    cr_assert_float_eq(energy_meter_window(&m)->joules_per_iter, 100.0, 1e-6,
                       "400 W for 0.25 s an iteration");
    /* The next window opened where this one closed. */
    for (uint64_t it = 111; it <= 120; it++) {
        pass(0.125);
        cr_assert_eq(energy_meter_tick(&m, it), it == 120);
    }
    cr_assert_eq(energy_meter_window(&m)->iter_from, 110);
    cr_assert_float_eq(energy_meter_window(&m)->joules_per_iter, 50.0, 1e-6);
    rig_fini(&r);
}

Test(energy, the_meter_samples_a_power_only_gpu_within_the_window)
{
    rig r;
    energy_meter m;
    double t = 0;
    /* 400 W for 0.125 s, then the clock drops to 1530 MHz: 100 + 300 *
     * (1530/1980)^3 W for 0.375 s. The two ends alone would make it 20 J
     * more. */
    const double low = 100.0 + 300.0 * pow(1530.0 / 1980.0, 3);
    const double exact = 400.0 * 0.125 + low * 0.375;

    rig_init(&r, ONE_GPU "d0.counter 0\n");
    rig_open(&r);
    cr_assert_eq(energy_device_at(r.e, 0)->method,
                 ENERGY_METHOD_POWER_INTEGRAL);
    energy_meter_init(&m, r.e, 1, 0.5);
    energy_meter_start(&m, 0);
    for (uint64_t it = 1; it <= 32; it++) {
        vtime += STEP;
        t += STEP;
        if (t == 0.125)
            stub_set(&r.c, "d0.locked", "1530");
        if (energy_meter_tick(&m, it))
            break;
    }
    cr_assert_not_null(energy_meter_window(&m));
    /* The step falls between two samples one tick (1/64 s) past 0.05 s
     * apart: the trapezoid errs by half the step's power over that at
     * most (plus NVML's whole milliwatts: 0.25 mJ over 0.5 s). */
    cr_assert(fabs(energy_meter_window(&m)->joules[0] - exact) <=
                  (400.0 - low) * 0.0625 / 2 + 1e-3,
              "%f J against %f J", energy_meter_window(&m)->joules[0], exact);
    rig_fini(&r);
}

Test(energy, the_meter_on_the_real_clock_measures_watts_of_a_counter)
{
    rig r;
    energy_meter m;
    const energy_window *w = NULL;

    rig_init(&r, ONE_GPU "d0.realtime 1\n");
    r.o.now = NULL;
    rig_open(&r);
    energy_meter_init(&m, r.e, 5, 0.5);
    for (uint64_t it = 0; it < 1000 && w == NULL; it++) {
        usleep(10000);
        if (energy_meter_tick(&m, it))
            w = energy_meter_window(&m);
    }
    cr_assert_not_null(w);
    cr_assert_geq(w->seconds, 0.5);
    cr_assert_geq(w->iter_to - w->iter_from, 5);
    cr_assert(fabs(w->joules[0] / w->seconds - 400.0) < 400.0 * 0.15,
              "%f J in %f s", w->joules[0], w->seconds);
    rig_fini(&r);
}
