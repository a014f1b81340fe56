/* Energy read where the hardware reports it: GPUs through NVML (the
 * total-energy counter, millijoules since the driver loaded; Volta and
 * newer), CPU packages through RAPL under /sys/class/powercap
 * (microjoules, wrapping at max_energy_range_uj). Joules are counted from
 * energy_open on, per device, and measured over windows of iterations by
 * the meter below: NVML refreshes its readings every 20-100 ms, so a short
 * step is never measured on its own.
 *
 * Where a GPU lacks the counter (before Volta) its power reading is
 * integrated over our own samples instead, and the device says so (method
 * "power-integral"); where nothing reports energy there are no devices and
 * one line says why. Nothing here estimates energy from anything else.
 *
 * One module for flworker, libflps's clients and flagent (node totals).
 * Not thread-safe: one thread uses an energy handle and its meters. */
#ifndef FLPS_COMMON_ENERGY_H
#define FLPS_COMMON_ENERGY_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define ENERGY_MAX_DEVICES 16
#define ENERGY_NAME_MAX 32
#define ENERGY_MODEL_MAX 96
/* The environment variable naming a fake sysfs root (tests; the same one
 * the RDMA probe reads), and the default. */
#define ENERGY_SYSFS_ENV "FLPS_SYSFS_ROOT"
#define ENERGY_SYSFS_DEFAULT "/sys"
/* The meter's defaults: a window closes once both have passed. */
#define ENERGY_METER_MIN_ITERS 10
#define ENERGY_METER_MIN_SECONDS 0.5
/* How often a power-integral device is sampled while a meter ticks:
 * about NVML's refresh period, so samples are distinct readings. */
#define ENERGY_POWER_SAMPLE_SECONDS 0.05

typedef enum {
    ENERGY_KIND_GPU,
    ENERGY_KIND_CPU_PACKAGE,
} energy_kind;

typedef enum {
    ENERGY_METHOD_COUNTER,        /* the hardware's energy counter */
    ENERGY_METHOD_POWER_INTEGRAL, /* NVML's power reading over our samples */
} energy_method;

/* Which sources energy_open looks at (energy_opts.sources). */
#define ENERGY_SOURCE_GPU 1u
#define ENERGY_SOURCE_CPU 2u
#define ENERGY_SOURCE_ALL (ENERGY_SOURCE_GPU | ENERGY_SOURCE_CPU)

typedef struct energy_device {
    char name[ENERGY_NAME_MAX];   /* "gpu0", "cpu-package0": metric labels */
    char model[ENERGY_MODEL_MAX]; /* "NVIDIA H200", RAPL's "package-0" */
    energy_kind kind;
    energy_method method;
    unsigned index; /* NVML's device index, or the RAPL package number */
    int failed;     /* a read failed: the total stays where it was */
} energy_device;

typedef struct energy_opts {
    /* NVML library: NULL or "": $FLPS_NVML_LIBRARY or libnvidia-ml.so.1 */
    const char *nvml_library;
    /* sysfs root: NULL or "": $FLPS_SYSFS_ROOT or /sys */
    const char *sysfs_root;
    /* GPUs (nvmldl_select's words): NULL: every GPU NVML lists */
    const char *gpus;
    unsigned sources; /* ENERGY_SOURCE_*; 0 means ALL */
    /* The clock the totals and windows are timed by (seconds, monotonic);
     * NULL: flps_mono_s. Tests give a virtual one. */
    double (*now)(void *arg);
    void *now_arg;
} energy_opts;

typedef struct energy energy;

/* Look for devices and take the first reading of each. opts NULL: the
 * defaults. Absent hardware is no error: energy_count is 0 and energy_why
 * says why. Errors: FLPS_ENOMEM; FLPS_EINVAL (a GPU list naming no GPU
 * NVML has, said in errbuf). Ownership: caller owns *out
 * (energy_close). Does I/O (sysfs, NVML). */
flps_err energy_open(const energy_opts *opts, energy **out, char *errbuf,
                     size_t errlen);

/* Release NVML and the handle. NULL: nothing. */
void energy_close(energy *e);

size_t energy_count(const energy *e);

/* Device i (< energy_count), borrowed until energy_close. */
const energy_device *energy_device_at(const energy *e, size_t i);

/* Why a source has no device, one line: "" when every source looked at
 * has devices; with none at all, e.g. "no NVML library (libnvidia-ml.so.1
 * not found) and no RAPL domains under /sys/class/powercap: energy is not
 * reported". Borrowed until energy_close. */
const char *energy_why(const energy *e);

/* "gpu0 NVIDIA H200 (counter), cpu-package0 package-0 (counter)", or
 * energy_why's line when there is no device, into buf. Returns buf. */
char *energy_describe(const energy *e, char *buf, size_t len);

/* "counter" or "power-integral". */
const char *energy_method_name(energy_method m);

/* The clock energy is timed by (opts.now), in seconds. */
double energy_now(const energy *e);

/* Read every device now: joules[i] (for i < n, n at most energy_count) is
 * device i's energy since energy_open. A device whose read fails keeps
 * its last total and is marked failed (logged once). Call it at iteration
 * boundaries, not per short step. Errors: FLPS_EINVAL (joules NULL with
 * n > 0). Does I/O. */
flps_err energy_read(energy *e, double *joules, size_t n);

/* Take one power sample of every power-integral device (nothing for the
 * others): their joules are the integral of these samples, so a caller
 * reading totals rarely samples in between. The meter does it itself. */
void energy_sample(energy *e);

/* One complete window of iterations. */
typedef struct energy_window {
    uint64_t iter_from, iter_to; /* iterations (iter_from, iter_to] */
    double seconds;              /* the window's duration */
    size_t ndev;
    double joules[ENERGY_MAX_DEVICES]; /* per device, as energy_device_at */
    double joules_gpu, joules_cpu;     /* sums by kind */
    double joules_total;
    double seconds_per_iter;
    double joules_per_iter; /* joules_total / iterations */
    double gpu_joules_per_iter;
} energy_window;

/* Joules per iteration over windows: a window closes at the first
 * iteration boundary where at least min_iters iterations AND min_seconds
 * have passed since it opened, and the next opens there. Caller's memory
 * (energy_meter_init); the energy handle is borrowed for the meter's
 * life. */
typedef struct energy_meter {
    energy *e;
    uint64_t min_iters;
    double min_seconds;
    int open;      /* a window is open */
    uint64_t from; /* the iteration it opened after */
    double t0;     /* when */
    double j0[ENERGY_MAX_DEVICES];
    double last_sample;
    uint64_t windows;   /* windows closed so far */
    energy_window last; /* valid when windows > 0 */
} energy_meter;

/* min_iters 0: ENERGY_METER_MIN_ITERS; min_seconds <= 0:
 * ENERGY_METER_MIN_SECONDS. No window is open until the first tick (or
 * energy_meter_start). */
void energy_meter_init(energy_meter *m, energy *e, uint64_t min_iters,
                       double min_seconds);

/* Open a window now, after iteration iter (discarding an open one): at the
 * start of training, and after a clock change so no window mixes two
 * clocks. Reads every device. */
void energy_meter_start(energy_meter *m, uint64_t iter);

/* Iteration iter has just finished. Opens the first window; samples
 * power-integral devices every ENERGY_POWER_SAMPLE_SECONDS; reads the
 * counters only when the window is due. Returns 1 when a window closed
 * here (energy_meter_window gives it), else 0; always 0 without devices. */
int energy_meter_tick(energy_meter *m, uint64_t iter);

/* The last complete window, or NULL before the first. Borrowed until the
 * next tick. */
const energy_window *energy_meter_window(const energy_meter *m);

#endif
