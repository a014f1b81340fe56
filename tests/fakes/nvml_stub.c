/* A stand-in for libnvidia-ml.so.1, built only for the tests: the NVML
 * calls flps makes (common/nvml_dl.c), over GPUs described in a state
 * file, so energy reading, clock setting, refusals and restores run on a
 * machine without a GPU.
 *
 * $FLPS_NVML_STUB_STATE names the state file (unset: nvmlInit fails as
 * without a driver). It is text, one "key value" per line, read and
 * rewritten under flock by every call, so several processes (a worker
 * and the supervisor that restores its clocks) see one set of GPUs:
 *
 *   init ok | driver_not_loaded
 *   devices N
 *   dI.name / dI.uuid        the GPU's name and UUID
 *   dI.lost 1                every call on it: GPU_IS_LOST
 *   dI.counter 0|1           nvmlDeviceGetTotalEnergyConsumption exists
 *   dI.power 0|1             nvmlDeviceGetPowerUsage works
 *   dI.clocks 1980,1830,...  supported graphics clocks
 *   dI.mem 3201              supported memory clocks
 *   dI.locked_perm / dI.app_perm  ok | no_permission | not_supported
 *   dI.locked, dI.app        the clocks set now (0: none)
 *   dI.energy_mj             the counter (millijoules)
 *   dI.idle_w, dI.dyn_w      power: idle_w + dyn_w * (clock/max)^3
 *   dI.per_call_mj           added by every energy read
 *   dI.realtime 1            energy also advances with the wall clock
 *   dI.sets, dI.resets       how many set / reset calls succeeded
 *
 * flps_nvml_stub_advance(seconds) advances every GPU's counter by its
 * power at its current clock over that many (virtual) seconds. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define STUB_API __attribute__((visibility("default")))
#define STUB_MAX_DEV 8
#define STUB_MAX_CLOCKS 64

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct stub_dev {
    char name[96], uuid[96];
    int lost, counter, power, realtime;
    unsigned clocks[STUB_MAX_CLOCKS], nclocks;
    unsigned mem[8], nmem;
    char locked_perm[32], app_perm[32];
    unsigned locked, app, sets, resets;
    double energy_mj, idle_w, dyn_w, per_call_mj, last_t;
} stub_dev;

typedef struct stub {
    int fd;
    char init[32];
    unsigned ndev;
    stub_dev dev[STUB_MAX_DEV];
} stub;

static double wall_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void parse_list(const char *v, unsigned *out, unsigned *n, unsigned max)
{
    char *end;

    *n = 0;
    while (*v && *n < max) {
        out[(*n)++] = (unsigned)strtoul(v, &end, 10);
        if (end == v)
            break;
        v = *end == ',' ? end + 1 : end;
    }
}

static void set_key(stub *s, const char *key, const char *v)
{
    unsigned i;
    char field[64];
    stub_dev *d;

    if (strcmp(key, "init") == 0) {
        snprintf(s->init, sizeof(s->init), "%s", v);
        return;
    }
    if (strcmp(key, "devices") == 0) {
        s->ndev = (unsigned)atoi(v);
        if (s->ndev > STUB_MAX_DEV)
            s->ndev = STUB_MAX_DEV;
        return;
    }
    if (sscanf(key, "d%u.%63s", &i, field) != 2 || i >= STUB_MAX_DEV)
        return;
    d = &s->dev[i];
#define STR(f)                                                                 \
    if (strcmp(field, #f) == 0)                                                \
        snprintf(d->f, sizeof(d->f), "%s", v);
#define NUM(f)                                                                 \
    if (strcmp(field, #f) == 0)                                                \
        d->f = strtod(v, NULL);
    STR(name) STR(uuid) STR(locked_perm) STR(app_perm);
    NUM(lost) NUM(counter) NUM(power) NUM(realtime) NUM(locked) NUM(app);
    NUM(sets) NUM(resets) NUM(energy_mj) NUM(idle_w) NUM(dyn_w);
    NUM(per_call_mj) NUM(last_t);
#undef STR
#undef NUM
    if (strcmp(field, "clocks") == 0)
        parse_list(v, d->clocks, &d->nclocks, STUB_MAX_CLOCKS);
    if (strcmp(field, "mem") == 0)
        parse_list(v, d->mem, &d->nmem, 8);
}

static void defaults(stub *s)
{
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    snprintf(s->init, sizeof(s->init), "ok");
    for (unsigned i = 0; i < STUB_MAX_DEV; i++) {
        stub_dev *d = &s->dev[i];

        snprintf(d->name, sizeof(d->name), "Stub GPU %u", i);
        snprintf(d->uuid, sizeof(d->uuid), "GPU-stub-%u", i);
        d->counter = d->power = 1;
        snprintf(d->locked_perm, sizeof(d->locked_perm), "ok");
        snprintf(d->app_perm, sizeof(d->app_perm), "ok");
        d->idle_w = 100;
        d->dyn_w = 300;
    }
}

/* Open and lock the state, and read it: 0, or -1 (no state: no driver). */
static int load(stub *s)
{
    const char *path = getenv("FLPS_NVML_STUB_STATE");
    char buf[16384], *line, *save = NULL;
    ssize_t n;

    defaults(s);
    if (path == NULL || (s->fd = open(path, O_RDWR)) < 0)
        return -1;
    flock(s->fd, LOCK_EX);
    n = pread(s->fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    for (line = strtok_r(buf, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');

        if (sp == NULL)
            continue;
        *sp = '\0';
        set_key(s, line, sp + 1);
    }
    return 0;
}

static void unlock(stub *s)
{
    if (s->fd >= 0) {
        flock(s->fd, LOCK_UN);
        close(s->fd);
    }
    s->fd = -1;
}

static void put_list(FILE *f, unsigned i, const char *key, const unsigned *v,
                     unsigned n)
{
    fprintf(f, "d%u.%s ", i, key);
    for (unsigned k = 0; k < n; k++)
        fprintf(f, "%s%u", k ? "," : "", v[k]);
    fputc('\n', f);
}

/* Write the state back and unlock. */
static void save(stub *s)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    fprintf(f, "init %s\ndevices %u\n", s->init, s->ndev);
    for (unsigned i = 0; i < s->ndev; i++) {
        stub_dev *d = &s->dev[i];

        fprintf(f, "d%u.name %s\nd%u.uuid %s\n", i, d->name, i, d->uuid);
        fprintf(f, "d%u.lost %d\nd%u.counter %d\nd%u.power %d\n", i, d->lost, i,
                d->counter, i, d->power);
        fprintf(f, "d%u.realtime %d\n", i, d->realtime);
        put_list(f, i, "clocks", d->clocks, d->nclocks);
        put_list(f, i, "mem", d->mem, d->nmem);
        fprintf(f, "d%u.locked_perm %s\nd%u.app_perm %s\n", i, d->locked_perm,
                i, d->app_perm);
        fprintf(f, "d%u.locked %u\nd%u.app %u\nd%u.sets %u\nd%u.resets %u\n", i,
                d->locked, i, d->app, i, d->sets, i, d->resets);
        fprintf(f, "d%u.energy_mj %.6f\nd%u.idle_w %.6f\nd%u.dyn_w %.6f\n", i,
                d->energy_mj, i, d->idle_w, i, d->dyn_w);
        fprintf(f, "d%u.per_call_mj %.6f\nd%u.last_t %.6f\n", i, d->per_call_mj,
                i, d->last_t);
    }
    fclose(f);
    if (ftruncate(s->fd, 0) == 0 && pwrite(s->fd, text, len, 0) != (ssize_t)len)
        fprintf(stderr, "nvml_stub: cannot write the state\n");
    free(text);
    unlock(s);
}

static unsigned max_clock(const stub_dev *d)
{
    unsigned m = 0;

    for (unsigned k = 0; k < d->nclocks; k++)
        if (d->clocks[k] > m)
            m = d->clocks[k];
    return m ? m : 1000;
}

/* The clock the GPU runs at: the locked one, else the application one,
 * else the highest (it boosts). */
static unsigned effective(const stub_dev *d)
{
    return d->locked ? d->locked : d->app ? d->app : max_clock(d);
}

static double watts(const stub_dev *d)
{
    double f = (double)effective(d) / max_clock(d);

    return d->idle_w + d->dyn_w * f * f * f;
}

static void advance(stub_dev *d, double seconds)
{
    d->energy_mj += watts(d) * 1000.0 * seconds;
}

/* Look up a handle: the device, or NULL with *r set. */
static stub_dev *dev_of(stub *s, nvmlDevice_t h, int *r)
{
    uintptr_t i = (uintptr_t)h;

    if (i == 0 || i > s->ndev) {
        *r = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    if (s->dev[i - 1].lost) {
        *r = NVML_ERROR_GPU_IS_LOST;
        return NULL;
    }
    return &s->dev[i - 1];
}

static int perm(const char *p)
{
    if (strcmp(p, "no_permission") == 0)
        return NVML_ERROR_NO_PERMISSION;
    if (strcmp(p, "not_supported") == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* Every call below: load, act on one device, save if it changed. */
#define STUB_DEV(h)                                                            \
    stub s;                                                                    \
    int r = NVML_SUCCESS;                                                      \
    stub_dev *d;                                                               \
    if (load(&s) != 0) {                                                       \
        unlock(&s);                                                            \
        return NVML_ERROR_DRIVER_NOT_LOADED;                                   \
    }                                                                          \
    d = dev_of(&s, (h), &r);                                                   \
    if (d == NULL) {                                                           \
        unlock(&s);                                                            \
        return r;                                                              \
    }

STUB_API int nvmlInit_v2(void)
{
    stub s;
    int r = NVML_SUCCESS;

    if (load(&s) != 0 || strcmp(s.init, "ok") != 0)
        r = NVML_ERROR_DRIVER_NOT_LOADED;
    unlock(&s);
    return r;
}

STUB_API int nvmlShutdown(void)
{
    return NVML_SUCCESS;
}

STUB_API const char *nvmlErrorString(int r)
{
    switch (r) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    default:
        return "Unknown Error";
    }
}

STUB_API int nvmlDeviceGetCount_v2(unsigned *count)
{
    stub s;

    if (load(&s) != 0) {
        unlock(&s);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    *count = s.ndev;
    unlock(&s);
    return NVML_SUCCESS;
}

STUB_API int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h)
{
    STUB_DEV((nvmlDevice_t)(uintptr_t)(i + 1));
    (void)d;
    *h = (nvmlDevice_t)(uintptr_t)(i + 1);
    unlock(&s);
    return NVML_SUCCESS;
}

STUB_API int nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h)
{
    stub s;
    int r = NVML_ERROR_NOT_FOUND;

    if (load(&s) != 0) {
        unlock(&s);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    for (unsigned i = 0; i < s.ndev; i++)
        if (strcmp(s.dev[i].uuid, uuid) == 0) {
            r = s.dev[i].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
            *h = (nvmlDevice_t)(uintptr_t)(i + 1);
        }
    unlock(&s);
    return r;
}

STUB_API int nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned len)
{
    STUB_DEV(h);
    snprintf(name, len, "%s", d->name);
    unlock(&s);
    return NVML_SUCCESS;
}

STUB_API int nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned len)
{
    STUB_DEV(h);
    snprintf(uuid, len, "%s", d->uuid);
    unlock(&s);
    return NVML_SUCCESS;
}

/* Energy that accrues by itself: per call, and with the wall clock. */
static void accrue(stub_dev *d)
{
    double t = wall_now();

    d->energy_mj += d->per_call_mj;
    if (d->realtime && d->last_t > 0)
        advance(d, t - d->last_t);
    d->last_t = t;
}

STUB_API int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h,
                                                 unsigned long long *mj)
{
    STUB_DEV(h);
    if (!d->counter) {
        unlock(&s);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    accrue(d);
    *mj = (unsigned long long)llround(d->energy_mj);
    save(&s);
    return NVML_SUCCESS;
}

STUB_API int nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *mw)
{
    STUB_DEV(h);
    if (!d->power) {
        unlock(&s);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *mw = (unsigned)lround(watts(d) * 1000.0);
    unlock(&s);
    return NVML_SUCCESS;
}

STUB_API int nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *mhz)
{
    STUB_DEV(h);
    (void)type;
    *mhz = effective(d);
    unlock(&s);
    return NVML_SUCCESS;
}

static int copy_list(const unsigned *v, unsigned n, unsigned *count,
                     unsigned *out)
{
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(out, v, n * sizeof(*v));
    *count = n;
    return NVML_SUCCESS;
}

STUB_API int nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t h, unsigned *count,
                                                unsigned *mhz)
{
    STUB_DEV(h);
    r = copy_list(d->mem, d->nmem, count, mhz);
    unlock(&s);
    return r;
}

STUB_API int nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t h, unsigned mem,
                                                  unsigned *count,
                                                  unsigned *mhz)
{
    int found = 0;

    STUB_DEV(h);
    for (unsigned k = 0; k < d->nmem; k++)
        found |= d->mem[k] == mem;
    r = found ? copy_list(d->clocks, d->nclocks, count, mhz)
              : NVML_ERROR_NOT_FOUND;
    unlock(&s);
    return r;
}

/* May d run at graphics clock mhz: locked at any clock up to its
 * highest, application clocks only at a supported pair. */
static int clock_valid(const stub_dev *d, int app, unsigned mem, unsigned mhz)
{
    int mem_ok = 0, mhz_ok = 0;

    if (!app)
        return mhz <= max_clock(d);
    for (unsigned k = 0; k < d->nmem; k++)
        mem_ok |= d->mem[k] == mem;
    for (unsigned k = 0; k < d->nclocks; k++)
        mhz_ok |= d->clocks[k] == mhz;
    return mem_ok && mhz_ok;
}

/* Set (or with reset, clear) the locked or the application clock of h,
 * as the permissions the state gives allow. */
static int clock_change(nvmlDevice_t h, int app, unsigned mem, unsigned mhz,
                        int reset)
{
    STUB_DEV(h);
    r = perm(app ? d->app_perm : d->locked_perm);
    if (r == NVML_SUCCESS && !reset && !clock_valid(d, app, mem, mhz))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS) {
        unlock(&s);
        return r;
    }
    *(app ? &d->app : &d->locked) = reset ? 0 : mhz;
    *(reset ? &d->resets : &d->sets) += 1;
    save(&s);
    return NVML_SUCCESS;
}

STUB_API int nvmlDeviceSetGpuLockedClocks(nvmlDevice_t h, unsigned lo,
                                          unsigned hi)
{
    if (lo > hi)
        return NVML_ERROR_INVALID_ARGUMENT;
    return clock_change(h, 0, 0, hi, 0);
}

STUB_API int nvmlDeviceResetGpuLockedClocks(nvmlDevice_t h)
{
    return clock_change(h, 0, 0, 0, 1);
}

STUB_API int nvmlDeviceSetApplicationsClocks(nvmlDevice_t h, unsigned mem,
                                             unsigned mhz)
{
    return clock_change(h, 1, mem, mhz, 0);
}

STUB_API int nvmlDeviceResetApplicationsClocks(nvmlDevice_t h)
{
    return clock_change(h, 1, 0, 0, 1);
}

/* Not NVML: the tests' hand on virtual time. */
STUB_API void flps_nvml_stub_advance(double seconds)
{
    stub s;

    if (load(&s) != 0) {
        unlock(&s);
        return;
    }
    for (unsigned i = 0; i < s.ndev; i++)
        advance(&s.dev[i], seconds);
    save(&s);
}
