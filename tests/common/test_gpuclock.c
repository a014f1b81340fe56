/* Tests for common/gpuclock.c: gpu_clock's parser, setting clocks through
 * the NVML stub (locked, application, refused), restoring them (also from
 * the record after a worker crashed), and auto's choice on a synthetic
 * energy curve. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/energy.h"
#include "common/gpuclock.h"
#include "tests/fakes/fake_sysfs.h"
#include "tests/fakes/nvml_stub_ctl.h"

#define CLOCKS "1980,1830,1680,1530,1380,1230,1080,930"
#define GPU(i)                                                                 \
    "d" #i ".clocks " CLOCKS "\nd" #i ".mem 3201,1593\nd" #i ".idle_w 150\n"   \
    "d" #i ".dyn_w 400\n"
#define ONE_GPU "init ok\ndevices 1\n" GPU(0)

/* --- the job file's value -------------------------------------------- */

Test(gpuclock, parses_default_max_auto_and_a_clock_in_mhz)
{
    gpuclock_spec s;
    char buf[32];

    cr_assert_eq(gpuclock_parse("default", &s, NULL, 0), FLPS_OK);
    cr_assert_eq(s.mode, GPUCLOCK_DEFAULT);
    cr_assert_eq(gpuclock_parse("max", &s, NULL, 0), FLPS_OK);
    cr_assert_eq(s.mode, GPUCLOCK_MAX);
    cr_assert_str_eq(gpuclock_spec_format(&s, buf, sizeof(buf)), "max");
    cr_assert_eq(gpuclock_parse("auto", &s, NULL, 0), FLPS_OK);
    cr_assert_eq(s.mode, GPUCLOCK_AUTO);
    cr_assert_eq(gpuclock_parse("1410", &s, NULL, 0), FLPS_OK);
    cr_assert_eq(s.mode, GPUCLOCK_MHZ);
    cr_assert_eq(s.mhz, 1410);
    cr_assert_str_eq(gpuclock_spec_format(&s, buf, sizeof(buf)), "1410");
}

Test(gpuclock, refuses_other_values_and_says_what_is_accepted)
{
    gpuclock_spec s = {GPUCLOCK_MAX, 7};
    char err[256];

    cr_assert_eq(gpuclock_parse("fast", &s, err, sizeof(err)), FLPS_EINVAL);
    cr_assert_str_eq(err, "gpu_clock: 'fast' is not default, max, auto or a "
                          "clock in MHz (100 to 10000)");
    cr_assert_eq(gpuclock_parse("", &s, err, sizeof(err)), FLPS_EINVAL);
    cr_assert_eq(gpuclock_parse("Max", &s, err, sizeof(err)), FLPS_EINVAL);
    cr_assert_eq(gpuclock_parse("1410MHz", &s, err, sizeof(err)), FLPS_EINVAL);
    cr_assert(strstr(err, "gpu_clock: '1410MHz'") != NULL, "%s", err);
    cr_assert_eq(gpuclock_parse("50", &s, err, sizeof(err)), FLPS_EINVAL);
    cr_assert(strstr(err, "from 100 to 10000") != NULL, "%s", err);
    cr_assert_eq(gpuclock_parse(NULL, &s, err, sizeof(err)), FLPS_EINVAL);
    cr_assert_eq(s.mode, GPUCLOCK_MAX, "a refusal writes nothing");
    cr_assert_eq(s.mhz, 7);
}

Test(gpuclock, parses_the_slowdown_as_a_percentage_or_a_fraction)
{
    double v = -1;
    char err[256];

    cr_assert_eq(gpuclock_parse_slowdown("5%", &v, NULL, 0), FLPS_OK);
    cr_assert_float_eq(v, 0.05, 1e-12);
    cr_assert_eq(gpuclock_parse_slowdown("2.5%", &v, NULL, 0), FLPS_OK);
    cr_assert_float_eq(v, 0.025, 1e-12);
    cr_assert_eq(gpuclock_parse_slowdown("0.1", &v, NULL, 0), FLPS_OK);
    cr_assert_float_eq(v, 0.1, 1e-12);
    cr_assert_eq(gpuclock_parse_slowdown("0", &v, NULL, 0), FLPS_OK);
    cr_assert_float_eq(v, 0.0, 1e-12);
    v = -1;
    cr_assert_eq(gpuclock_parse_slowdown("5", &v, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_str_eq(err, "gpu_clock_slowdown: '5' is not a fraction below 1 "
                          "or a percentage below 100% (write 5% or 0.05)");
    cr_assert_eq(gpuclock_parse_slowdown("100%", &v, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(gpuclock_parse_slowdown("-1%", &v, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(gpuclock_parse_slowdown("%", &v, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(gpuclock_parse_slowdown("", &v, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(gpuclock_parse_slowdown(NULL, &v, NULL, 0), FLPS_EINVAL);
    cr_assert_float_eq(v, -1, 0, "a refusal writes nothing");
}

Test(gpuclock, the_nearest_supported_clock_takes_the_higher_on_a_tie)
{
    const unsigned mhz[] = {1980, 1830, 1680};

    cr_assert_eq(gpuclock_nearest(mhz, 3, 1700), 1680);
    cr_assert_eq(gpuclock_nearest(mhz, 3, 1755), 1830);
    cr_assert_eq(gpuclock_nearest(mhz, 3, 9999), 1980);
    cr_assert_eq(gpuclock_nearest(mhz, 3, 1), 1680);
    cr_assert_eq(gpuclock_nearest(mhz, 0, 1700), 0);
}

/* --- setting and restoring ------------------------------------------- */

/* What a test drives: the stub with a state, the record's path in the
 * stub's directory, and a handle opened on both. */
typedef struct rig {
    stub_ctl c;
    char record[400];
    char msg[512];
    gpuclock *g;
} rig;

static void rig_init(rig *r, const char *state)
{
    memset(r, 0, sizeof(*r));
    stub_init(&r->c, state);
    snprintf(r->record, sizeof(r->record), "%s/gpu_clock.record", r->c.dir);
}

static gpuclock *rig_open(rig *r)
{
    gpuclock_opts o = {FLPS_NVML_STUB, NULL, r->record};

    cr_assert_eq(gpuclock_open(&o, &r->g, NULL, 0), FLPS_OK);
    return r->g;
}

/* Close (restoring what is left) and check the record went with it. */
static void rig_close(rig *r)
{
    gpuclock_close(r->g);
    r->g = NULL;
    cr_assert_neq(access(r->record, F_OK), 0, "no record is left behind");
}

static void rig_fini(rig *r)
{
    if (r->g != NULL)
        rig_close(r);
    stub_fini(&r->c);
}

static char *slurp(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n;

    cr_assert_not_null(f, "%s is missing", path);
    n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

Test(gpuclock, sets_the_nearest_supported_clock_locked_and_restores_it)
{
    rig r;
    char text[512], want[512];
    const unsigned *mhz;
    size_t n;
    unsigned set = 0;

    rig_init(&r, ONE_GPU);
    rig_open(&r);
    cr_assert_eq(gpuclock_count(r.g), 1);
    cr_assert_eq(gpuclock_supported(r.g, &mhz, &n), FLPS_OK);
    cr_assert_eq(n, 8);
    cr_assert_eq(mhz[0], 1980);
    cr_assert_eq(mhz[7], 930);
    cr_assert_eq(gpuclock_set(r.g, 1400, &set, NULL, 0), FLPS_OK);
    cr_assert_eq(set, 1380);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 1380, 0);
    cr_assert_float_eq(stub_num(&r.c, "d0.app"), 0, 0);
    snprintf(want, sizeof(want),
             "flps-gpu-clock-record 1\npid %ld\n"
             "device 0 GPU-stub-0 locked 1380 3201\n",
             (long)getpid());
    cr_assert_str_eq(slurp(r.record, text, sizeof(text)), want);
    cr_assert_eq(gpuclock_restore(r.g, NULL, 0), FLPS_OK);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0);
    cr_assert_neq(access(r.record, F_OK), 0, "the record goes with the change");
    cr_assert_float_eq(stub_num(&r.c, "d0.resets"), 1, 0);
    rig_close(&r);
    cr_assert_float_eq(stub_num(&r.c, "d0.resets"), 1, 0,
                       "close had nothing left to restore");
    rig_fini(&r);
}

Test(gpuclock, falls_back_to_application_clocks_when_locking_is_refused)
{
    rig r;
    char text[512];
    unsigned set = 0;

    rig_init(&r, ONE_GPU "d0.locked_perm no_permission\n");
    rig_open(&r);
    cr_assert_eq(gpuclock_set(r.g, 1530, &set, NULL, 0), FLPS_OK);
    cr_assert_eq(set, 1530);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0);
    cr_assert_float_eq(stub_num(&r.c, "d0.app"), 1530, 0);
    cr_assert(strstr(slurp(r.record, text, sizeof(text)),
                     "device 0 GPU-stub-0 applications 1530 3201\n") != NULL,
              "at the highest memory clock: %s", text);
    rig_close(&r); /* a clean exit restores */
    cr_assert_float_eq(stub_num(&r.c, "d0.app"), 0, 0);
    rig_fini(&r);
}

Test(gpuclock, a_gpu_that_refuses_both_runs_at_default_with_one_message)
{
    rig r;

    rig_init(&r, ONE_GPU "d0.locked_perm no_permission\n"
                         "d0.app_perm no_permission\n");
    rig_open(&r);
    cr_assert_eq(gpuclock_set(r.g, 1530, NULL, r.msg, sizeof(r.msg)),
                 FLPS_ESTATE);
    cr_assert_str_eq(r.msg,
                     "gpu_clock: gpu0 (Stub GPU 0) refuses clock changes "
                     "(locked clocks: Insufficient Permissions; "
                     "applications clocks: Insufficient Permissions); "
                     "setting clocks needs root, or `nvidia-smi -acp "
                     "UNRESTRICTED` for application clocks: running at "
                     "the default clock");
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0);
    cr_assert_float_eq(stub_num(&r.c, "d0.app"), 0, 0);
    cr_assert_neq(access(r.record, F_OK), 0, "no record of nothing");
    rig_fini(&r);
}

Test(gpuclock, a_gpu_without_clock_control_says_not_supported)
{
    rig r;

    rig_init(&r, ONE_GPU "d0.locked_perm not_supported\n"
                         "d0.app_perm not_supported\n");
    rig_open(&r);
    cr_assert_eq(gpuclock_set(r.g, 1530, NULL, r.msg, sizeof(r.msg)),
                 FLPS_ESTATE);
    cr_assert(strstr(r.msg, "(locked clocks: Not Supported; applications "
                            "clocks: Not Supported): running at the default "
                            "clock") != NULL,
              "%s", r.msg);
    cr_assert(strstr(r.msg, "root") == NULL, "no permission hint: %s", r.msg);
    rig_fini(&r);
}

Test(gpuclock, without_nvml_a_clock_is_refused_with_the_reason)
{
    gpuclock_opts o = {0};
    gpuclock *g = NULL;
    gpuclock_spec max = {GPUCLOCK_MAX, 0};
    char msg[512];

    o.nvml_library = "libflps-no-such-nvml.so.1";
    cr_assert_eq(gpuclock_open(&o, &g, NULL, 0), FLPS_OK);
    cr_assert_eq(gpuclock_count(g), 0);
    cr_assert_eq(gpuclock_apply(g, &max, NULL, msg, sizeof(msg)), FLPS_ESTATE);
    cr_assert_str_eq(msg, "gpu_clock: no NVML library "
                          "(libflps-no-such-nvml.so.1 not found): running at "
                          "the default clock");
    gpuclock_close(g);
}

Test(gpuclock, apply_sets_max_leaves_default_alone_and_leaves_auto_to_auto)
{
    rig r;
    gpuclock_spec s = {GPUCLOCK_DEFAULT, 0};
    unsigned set = 99;

    rig_init(&r, ONE_GPU);
    rig_open(&r);
    cr_assert_eq(gpuclock_apply(r.g, &s, &set, NULL, 0), FLPS_OK);
    cr_assert_eq(set, 0);
    cr_assert_float_eq(stub_num(&r.c, "d0.sets"), 0, 0, "default sets nothing");
    cr_assert_neq(access(r.record, F_OK), 0);
    s.mode = GPUCLOCK_MAX;
    cr_assert_eq(gpuclock_apply(r.g, &s, &set, NULL, 0), FLPS_OK);
    cr_assert_eq(set, 1980);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 1980, 0);
    s.mode = GPUCLOCK_MHZ;
    s.mhz = 1100;
    cr_assert_eq(gpuclock_apply(r.g, &s, &set, NULL, 0), FLPS_OK);
    cr_assert_eq(set, 1080);
    s.mode = GPUCLOCK_AUTO;
    cr_assert_eq(gpuclock_apply(r.g, &s, &set, NULL, 0), FLPS_EINVAL);
    rig_close(&r);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0);
    rig_fini(&r);
}

Test(gpuclock, one_gpu_refusing_restores_the_others_all_or_nothing)
{
    rig r;

    rig_init(
        &r, "init ok\ndevices 2\n" GPU(0) GPU(
                1) "d1.locked_perm no_permission\nd1.app_perm not_supported\n");
    rig_open(&r);
    cr_assert_eq(gpuclock_count(r.g), 2);
    cr_assert_eq(gpuclock_set(r.g, 1530, NULL, r.msg, sizeof(r.msg)),
                 FLPS_ESTATE);
    cr_assert(strstr(r.msg, "gpu1 (Stub GPU 1) refuses clock changes") != NULL,
              "%s", r.msg);
    cr_assert_float_eq(stub_num(&r.c, "d0.sets"), 1, 0);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0, "gpu0 restored");
    rig_fini(&r);
}

Test(gpuclock, a_supervisor_restores_the_clocks_of_a_worker_that_crashed)
{
    rig r;
    char text[512];
    size_t restored = 99;
    pid_t pid;
    int status;

    rig_init(&r, "init ok\ndevices 2\n" GPU(0)
                     GPU(1) "d1.locked_perm no_permission\n");
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) { /* no Criterion assertion in the child */
        gpuclock_opts o = {FLPS_NVML_STUB, NULL, r.record};

        if (gpuclock_open(&o, &r.g, NULL, 0) != FLPS_OK ||
            gpuclock_set(r.g, 1530, NULL, NULL, 0) != FLPS_OK)
            _exit(1);
        _exit(0); /* a crash: nothing restored */
    }
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 1530, 0);
    cr_assert_float_eq(stub_num(&r.c, "d1.app"), 1530, 0);
    cr_assert(strstr(slurp(r.record, text, sizeof(text)),
                     "device 1 GPU-stub-1 applications 1530") != NULL,
              "%s", text);
    cr_assert_eq(gpuclock_restore_from_record(r.record, FLPS_NVML_STUB,
                                              &restored, r.msg, sizeof(r.msg)),
                 FLPS_OK, "%s", r.msg);
    cr_assert_eq(restored, 2);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0);
    cr_assert_float_eq(stub_num(&r.c, "d1.app"), 0, 0);
    cr_assert_neq(access(r.record, F_OK), 0, "the record is spent");
    cr_assert_eq(gpuclock_restore_from_record(r.record, FLPS_NVML_STUB,
                                              &restored, r.msg, sizeof(r.msg)),
                 FLPS_OK, "no record: nothing to do");
    cr_assert_eq(restored, 0);
    stub_fini(&r.c);
}

/* A GPU at 1530 MHz and the record of a worker that still runs (our
 * parent, the test runner). */
static void running_workers_record(rig *r)
{
    char text[256];

    rig_init(r, ONE_GPU "d0.locked 1530\n");
    snprintf(text, sizeof(text),
             "flps-gpu-clock-record 1\npid %ld\n"
             "device 0 GPU-stub-0 locked 1530 3201\n",
             (long)getppid());
    fake_sysfs_write(r->record, text);
}

Test(gpuclock, a_supervisor_leaves_the_record_of_a_running_worker)
{
    rig r;

    running_workers_record(&r);
    cr_assert_eq(gpuclock_restore_from_record(r.record, FLPS_NVML_STUB, NULL,
                                              r.msg, sizeof(r.msg)),
                 FLPS_ESTATE);
    cr_assert(strstr(r.msg, "which is still running") != NULL, "%s", r.msg);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 1530, 0);
    cr_assert_eq(access(r.record, F_OK), 0);
    stub_fini(&r.c);
}

Test(gpuclock, a_refused_restore_keeps_the_record_for_a_later_try)
{
    rig r;
    size_t restored = 99;

    rig_init(&r, ONE_GPU "d0.locked 1530\nd0.locked_perm no_permission\n");
    fake_sysfs_write(r.record, "flps-gpu-clock-record 1\npid 0\n"
                               "device 0 GPU-stub-0 locked 1530 3201\n");
    cr_assert_eq(gpuclock_restore_from_record(r.record, FLPS_NVML_STUB,
                                              &restored, r.msg, sizeof(r.msg)),
                 FLPS_ESYS);
    cr_assert_eq(restored, 0);
    cr_assert(strstr(r.msg, "gpu0 (GPU-stub-0): Insufficient Permissions; "
                            "the record stays") != NULL,
              "%s", r.msg);
    cr_assert_eq(access(r.record, F_OK), 0);
    stub_fini(&r.c);
}

Test(gpuclock, restore_finds_the_gpu_by_uuid_when_indices_moved)
{
    rig r;
    size_t restored = 0;

    rig_init(&r, "init ok\ndevices 2\n" GPU(0) GPU(1) "d1.locked 1530\n");
    /* Written when GPU-stub-1 was index 0. */
    fake_sysfs_write(r.record, "flps-gpu-clock-record 1\npid 0\n"
                               "device 0 GPU-stub-1 locked 1530 3201\n");
    cr_assert_eq(gpuclock_restore_from_record(r.record, FLPS_NVML_STUB,
                                              &restored, NULL, 0),
                 FLPS_OK);
    cr_assert_eq(restored, 1);
    cr_assert_float_eq(stub_num(&r.c, "d1.locked"), 0, 0);
    cr_assert_float_eq(stub_num(&r.c, "d0.resets"), 0, 0);
    stub_fini(&r.c);
}

Test(gpuclock, a_worker_restarted_in_the_same_place_restores_what_is_left)
{
    rig r;

    rig_init(&r, ONE_GPU "d0.locked 1530\n");
    fake_sysfs_write(r.record, "flps-gpu-clock-record 1\npid 0\n"
                               "device 0 GPU-stub-0 locked 1530 3201\n");
    rig_open(&r);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0);
    cr_assert_neq(access(r.record, F_OK), 0);
    rig_fini(&r);
}

Test(gpuclock, a_handle_that_changed_nothing_leaves_anothers_record)
{
    rig r;

    running_workers_record(&r);
    rig_open(&r);
    gpuclock_close(r.g);
    r.g = NULL;
    cr_assert_eq(access(r.record, F_OK), 0, "a running writer's record");
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 1530, 0);
    rig_fini(&r);
}

Test(gpuclock, the_record_reads_back_what_was_written_and_refuses_garbage)
{
    gpuclock_record r = {0}, back;
    char text[512], err[256];

    r.pid = 4242;
    r.ndev = 2;
    r.dev[0] = (gpuclock_record_dev){0, "GPU-a", GPUCLOCK_VIA_LOCKED, 1530, 0};
    r.dev[1] = (gpuclock_record_dev){
        3, "-", GPUCLOCK_VIA_LOCKED | GPUCLOCK_VIA_APPLICATIONS, 1380, 3201};
    cr_assert_eq(gpuclock_record_format(&r, text, sizeof(text)), strlen(text));
    cr_assert_str_eq(text, "flps-gpu-clock-record 1\npid 4242\n"
                           "device 0 GPU-a locked 1530 0\n"
                           "device 3 - locked+applications 1380 3201\n");
    cr_assert_eq(gpuclock_record_parse(text, &back, err, sizeof(err)), FLPS_OK,
                 "%s", err);
    cr_assert_eq(back.pid, 4242);
    cr_assert_eq(back.ndev, 2);
    cr_assert_str_eq(back.dev[1].uuid, "-");
    cr_assert_eq(back.dev[1].via,
                 GPUCLOCK_VIA_LOCKED | GPUCLOCK_VIA_APPLICATIONS);
    cr_assert_eq(back.dev[1].mem_mhz, 3201);
    cr_assert_eq(gpuclock_record_format(&r, text, 10) > 10, 1,
                 "the length the whole text needs");
    cr_assert_eq(gpuclock_record_parse("pid 1\n", &back, err, sizeof(err)),
                 FLPS_EPROTO);
    cr_assert(strstr(err, "line 1 ('pid 1') is not 'flps-gpu-clock-record "
                          "1'") != NULL,
              "%s", err);
    cr_assert_eq(gpuclock_record_parse("flps-gpu-clock-record 1\ndevice 0 x "
                                       "sideways 1 2\n",
                                       &back, err, sizeof(err)),
                 FLPS_EPROTO);
    cr_assert(strstr(err, "line 2") != NULL, "%s", err);
    cr_assert_eq(gpuclock_record_parse("", &back, err, sizeof(err)),
                 FLPS_EPROTO);
}

/* --- auto ------------------------------------------------------------ */

Test(gpuclock, auto_keeps_the_lowest_energy_within_the_slowdown)
{
    const gpuclock_sample s[] = {
        {1980, 0.0100, 5.50}, {1830, 0.0102, 4.77}, {1680, 0.0106, 4.15},
        {1530, 0.0109, 3.64}, {1380, 0.0113, 3.23},
    };
    size_t best = 99;

    cr_assert_eq(gpuclock_auto_choose(s, 5, 0.05, &best), FLPS_OK);
    cr_assert_eq(s[best].mhz, 1830, "1680 is 6% slower");
    cr_assert_eq(gpuclock_auto_choose(s, 5, 0.07, &best), FLPS_OK);
    cr_assert_eq(s[best].mhz, 1680);
    cr_assert_eq(gpuclock_auto_choose(s, 5, 0.0, &best), FLPS_OK);
    cr_assert_eq(s[best].mhz, 1980, "no slowdown: the fastest");
    cr_assert_eq(gpuclock_auto_choose(s, 5, 0.5, &best), FLPS_OK);
    cr_assert_eq(s[best].mhz, 1380);
    cr_assert_eq(gpuclock_auto_choose(s, 5, -0.1, &best), FLPS_EINVAL);
}

Test(gpuclock, auto_skips_invalid_samples_and_breaks_ties_upward)
{
    const gpuclock_sample s[] = {
        {1980, NAN, 1.0},   {1830, 0.01, 2.0}, {1680, 0.01, 2.0},
        {1530, 0.001, 0.0}, {1380, -1, 1.0},
    };
    const gpuclock_sample none[] = {{1980, 0, 0}, {1830, INFINITY, 1}};
    size_t best = 99;

    cr_assert_eq(gpuclock_auto_choose(s, 5, 0.05, &best), FLPS_OK);
    cr_assert_eq(s[best].mhz, 1830);
    best = 99;
    cr_assert_eq(gpuclock_auto_choose(none, 2, 0.05, &best), FLPS_EINVAL);
    cr_assert_eq(best, 99);
    cr_assert_eq(gpuclock_auto_choose(s, 0, 0.05, &best), FLPS_EINVAL);
}

Test(gpuclock, auto_tries_the_top_clock_and_steps_of_7_5_percent_below)
{
    const unsigned supported[] = {930,  1080, 1230, 1380, 1530,
                                  1680, 1830, 1980, 1980};
    unsigned h200[200], out[GPUCLOCK_AUTO_MAX];
    size_t n = 0;

    cr_assert_eq(gpuclock_auto_candidates(supported, 9, 5, out), 5);
    cr_assert_eq(out[0], 1980);
    cr_assert_eq(out[1], 1830);
    cr_assert_eq(out[2], 1680);
    cr_assert_eq(out[3], 1530);
    cr_assert_eq(out[4], 1380);
    for (unsigned f = 345; f <= 1980; f += 15)
        h200[n++] = f;
    cr_assert_eq(gpuclock_auto_candidates(h200, n, 3, out), 3);
    cr_assert_eq(out[0], 1980);
    cr_assert_eq(out[1], 1830);
    cr_assert_eq(out[2], 1680);
    cr_assert_eq(gpuclock_auto_candidates(supported, 1, 5, out), 1,
                 "one clock: one candidate");
    cr_assert_eq(gpuclock_auto_candidates(supported, 0, 5, out), 0);
}

Test(gpuclock, the_auto_walk_settles_measures_and_moves_on)
{
    const unsigned cand[] = {1980, 1530};
    gpuclock_auto a;
    unsigned mhz = 0;

    gpuclock_auto_init(&a, cand, 2, 0.05, 1, 2);
    cr_assert_eq(gpuclock_auto_begin(&a, &mhz), GPUCLOCK_AUTO_SET);
    cr_assert_eq(mhz, 1980);
    cr_assert_eq(gpuclock_auto_feed(&a, 99, 99, &mhz), GPUCLOCK_AUTO_WAIT,
                 "the settling window is discarded");
    cr_assert_eq(gpuclock_auto_feed(&a, 0.010, 5.0, &mhz), GPUCLOCK_AUTO_WAIT);
    cr_assert_eq(gpuclock_auto_feed(&a, 0.010, 6.0, &mhz), GPUCLOCK_AUTO_SET);
    cr_assert_eq(mhz, 1530);
    cr_assert_eq(gpuclock_auto_feed(&a, 99, 99, &mhz), GPUCLOCK_AUTO_WAIT);
    cr_assert_eq(gpuclock_auto_feed(&a, 0.0104, 4.0, &mhz), GPUCLOCK_AUTO_WAIT);
    cr_assert_eq(gpuclock_auto_feed(&a, 0.0104, 4.0, &mhz), GPUCLOCK_AUTO_DONE);
    cr_assert_eq(mhz, 1530);
    cr_assert_float_eq(a.samples[0].j_per_iter, 5.5, 1e-12, "the mean");
    cr_assert_eq(gpuclock_auto_feed(&a, 1, 1, &mhz), GPUCLOCK_AUTO_DONE);
    cr_assert_eq(mhz, 1530);
    gpuclock_auto_init(&a, cand, 0, 0.05, 1, 1);
    cr_assert_eq(gpuclock_auto_begin(&a, &mhz), GPUCLOCK_AUTO_DONE);
    cr_assert_eq(mhz, 0, "no candidate: the default");
}

/* The synthetic workload: 70% of an iteration does not scale with the
 * clock (memory, communication), 30% does; the stub's GPU draws 150 +
 * 400 * (f/1980)^3 W. Energy per iteration then falls with the clock while
 * time grows: 1830 MHz is 2.5% slower, 1680 5.4%, 1530 8.8%, 1380 13%. */
static double seconds_per_iter(unsigned mhz)
{
    return 0.01 * (0.7 + 0.3 * 1980.0 / mhz);
}

static double vtime;

static double vnow(void *arg)
{
    (void)arg;
    return vtime;
}

/* Train "iterations" on the stub under auto with this slowdown, as a
 * worker would: the meter's windows feed the walk, each SET changes the
 * clock and reopens the window. Returns the clock auto chose. */
static unsigned run_auto(double slowdown)
{
    rig r;
    fake_sysfs s;
    energy_opts eo = {0};
    energy *e = NULL;
    energy_meter m;
    gpuclock *g;
    gpuclock_auto a;
    const unsigned *supported;
    unsigned cand[GPUCLOCK_AUTO_MAX], mhz = 0, now_mhz = 1980;
    size_t n, ncand;
    gpuclock_auto_action act;
    uint64_t it;

    rig_init(&r, ONE_GPU);
    fake_sysfs_init(&s, 0);
    eo.nvml_library = FLPS_NVML_STUB;
    eo.sysfs_root = s.root;
    eo.now = vnow;
    cr_assert_eq(energy_open(&eo, &e, NULL, 0), FLPS_OK);
    g = rig_open(&r);
    cr_assert_eq(gpuclock_supported(g, &supported, &n), FLPS_OK);
    ncand =
        gpuclock_auto_candidates(supported, n, GPUCLOCK_AUTO_CANDIDATES, cand);
    cr_assert_eq(ncand, 5);
    gpuclock_auto_init(&a, cand, ncand, slowdown, 1, 1);
    act = gpuclock_auto_begin(&a, &mhz);
    energy_meter_init(&m, e, 10, 0.5);
    for (it = 0; it < 2000; it++) {
        const energy_window *w;

        if (act != GPUCLOCK_AUTO_WAIT) {
            cr_assert_eq(gpuclock_set(g, mhz, &now_mhz, NULL, 0), FLPS_OK);
            energy_meter_start(&m, it);
            if (act == GPUCLOCK_AUTO_DONE)
                break;
            act = GPUCLOCK_AUTO_WAIT;
        }
        vtime += seconds_per_iter(now_mhz);
        stub_advance(seconds_per_iter(now_mhz));
        if (!energy_meter_tick(&m, it + 1))
            continue;
        w = energy_meter_window(&m);
        act = gpuclock_auto_feed(&a, w->seconds_per_iter,
                                 w->gpu_joules_per_iter, &mhz);
    }
    cr_assert_eq(act, GPUCLOCK_AUTO_DONE,
                 "auto ends within the first "
                 "iterations");
    cr_assert_lt(it, 600, "%lu iterations", (unsigned long)it);
    cr_assert_eq(a.nsamples, 5);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), mhz, 0,
                       "the choice is set");
    gpuclock_close(g);
    cr_assert_float_eq(stub_num(&r.c, "d0.locked"), 0, 0, "and restored");
    energy_close(e);
    fake_sysfs_fini(&s);
    stub_fini(&r.c);
    return mhz;
}

Test(gpuclock, auto_picks_the_right_clock_on_a_synthetic_energy_curve)
{
    cr_assert_eq(run_auto(0.05), 1830, "1680 is 5.4% slower: too slow");
    cr_assert_eq(run_auto(0.10), 1530);
    cr_assert_eq(run_auto(0.15), 1380);
}
