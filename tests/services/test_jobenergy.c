/* Tests for services/jobenergy.c: a job's joules per iteration from its
 * workers' done events, what several workers read alike counted once. */
#include "services/jobenergy.h"

#include <criterion/criterion.h>
#include <string.h>

/* A done event as the reader gives it: line parsed (event_fini after). */
static void done_of(const char *line, event *ev)
{
    char why[160];

    cr_assert_eq(
        event_read(line, strlen(line), EVENT_READ_STRICT, ev, why, sizeof(why)),
        FLPS_OK, "%s: %s", line, why);
    cr_assert_eq(ev->kind, EVENT_DONE);
}

static void add(jobenergy *j, const char *node, const char *fields)
{
    char line[512];
    event ev;

    snprintf(line, sizeof(line),
             "{\"event\":\"done\",\"rank\":0,\"iterations\":10,"
             "\"bytes_sent\":1,\"bytes_received\":1,\"dense_bytes\":1,"
             "\"resends\":0%s,\"seconds\":1}",
             fields);
    done_of(line, &ev);
    jobenergy_add(j, node, &ev.done);
    event_fini(&ev);
}

#define GPU(jpi, gpus)                                                         \
    ",\"joules_per_iteration\":" #jpi ",\"gpu_joules_per_iteration\":" #jpi    \
    ",\"energy_method\":\"counter\",\"energy_gpus\":\"" gpus "\""

Test(jobenergy, gpus_of_different_workers_add_up_and_shared_ones_count_once)
{
    jobenergy j = {0};
    double total, gpu, cpu;
    int hg, hc;

    add(&j, "n1", GPU(10, "0") ",\"gpu_clock_mhz\":1830");
    add(&j, "n1", GPU(12, "1") ",\"gpu_clock_mhz\":1830");
    add(&j, "n2", GPU(20, "0,1") ",\"gpu_clock_mhz\":1830");
    add(&j, "n2", GPU(22, "0,1") ",\"gpu_clock_mhz\":1830");
    cr_assert_eq(jobenergy_total(&j, &total, &gpu, &cpu, &hg, &hc), 1);
    cr_assert_float_eq(gpu, 10 + 12 + 21, 1e-9,
                       "n2's two workers both read GPUs 0 and 1: once");
    cr_assert_eq(hg, 1);
    cr_assert_eq(hc, 0, "no package was metered");
    cr_assert_float_eq(total, gpu, 1e-9);
    cr_assert_str_eq(j.method, "counter");
    cr_assert_str_eq(j.clock, "1830");
}

Test(jobenergy, cpu_packages_count_once_per_node)
{
    jobenergy j = {0};
    double total, gpu, cpu;
    int hg, hc;

    add(&j, "n1",
        ",\"joules_per_iteration\":4,\"cpu_joules_per_iteration\":4,"
        "\"energy_method\":\"counter\"");
    add(&j, "n1",
        ",\"joules_per_iteration\":6,\"cpu_joules_per_iteration\":6,"
        "\"energy_method\":\"counter\"");
    add(&j, "n2",
        ",\"joules_per_iteration\":3,\"cpu_joules_per_iteration\":3,"
        "\"energy_method\":\"power-integral\"");
    cr_assert_eq(jobenergy_total(&j, &total, &gpu, &cpu, &hg, &hc), 1);
    cr_assert_float_eq(cpu, 5 + 3, 1e-9, "n1's mean, then n2's");
    cr_assert_eq(hg, 0);
    cr_assert_eq(hc, 1);
    cr_assert_str_eq(j.method, "mixed");
    cr_assert_str_eq(j.clock, "", "no worker named a clock");
}

Test(jobenergy, clocks_fold_to_one_word_and_nothing_measured_is_no_total)
{
    jobenergy j = {0};
    double total = -1, gpu = -1, cpu = -1;

    add(&j, "", ",\"gpu_clock_mhz\":0");
    cr_assert_str_eq(j.clock, "default");
    add(&j, "", ",\"gpu_clock_mhz\":1410");
    cr_assert_str_eq(j.clock, "mixed");
    add(&j, "", "");
    cr_assert_eq(jobenergy_total(&j, &total, &gpu, &cpu, NULL, NULL), 0);
    cr_assert_eq(total, -1, "nothing written");
    add(&j, "", ",\"joules_per_iteration\":1,\"energy_method\":\"x\\\"y\"");
    cr_assert_str_eq(j.method, "", "a word a worker never writes is dropped");
}
