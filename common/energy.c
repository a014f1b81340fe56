/* Energy counters of GPUs (NVML) and CPU packages (RAPL), and joules per
 * iteration over windows. */
#include "common/energy.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/nvml_dl.h"
#include "common/readfile.h"

#define ENERGY_PATH_MAX 512
#define ENERGY_WHY_MAX 512

/* How one device is read: an NVML handle, or a RAPL file. */
typedef struct energy_src {
    nvmldl_dev gpu;
    char path[ENERGY_PATH_MAX]; /* RAPL: the energy_uj file */
    uint64_t range;             /* RAPL: max_energy_range_uj (0: unknown) */
    uint64_t raw;               /* the counter's last value (mJ or uJ) */
    double joules;              /* since energy_open */
    double watts, at;           /* power-integral: the last sample, when */
} energy_src;

struct energy {
    double (*now)(void *);
    void *now_arg;
    nvmldl nvml; /* open while a GPU device exists */
    size_t n;
    energy_device dev[ENERGY_MAX_DEVICES];
    energy_src src[ENERGY_MAX_DEVICES];
    char why_gpu[ENERGY_WHY_MAX]; /* "" or why GPUs are missing */
    char why_cpu[ENERGY_WHY_MAX];
    char why[2 * ENERGY_WHY_MAX + 64];
};

static double energy_mono(void *arg)
{
    (void)arg;
    return flps_mono_s();
}

double energy_now(const energy *e)
{
    return e->now(e->now_arg);
}

const char *energy_method_name(energy_method m)
{
    return m == ENERGY_METHOD_COUNTER ? "counter" : "power-integral";
}

/* Append "; text" (or text) to a why line. */
static void why_add(char *why, size_t len, const char *text)
{
    size_t used = strlen(why), n;

    if (used > 0 && used + 2 < len) {
        memcpy(why + used, "; ", 2);
        used += 2;
    }
    n = strlen(text);
    if (n > len - 1 - used)
        n = len - 1 - used; /* a long note is cut, not dropped */
    memcpy(why + used, text, n);
    why[used + n] = '\0';
}

/* --- GPUs ------------------------------------------------------------ */

/* Which way GPU d is read, with its first reading: 0 when it can be read
 * neither way (note in why). */
static int gpu_first_reading(energy *e, energy_src *s, energy_device *d)
{
    unsigned long long mj;
    unsigned mw;
    nvmldl_ret r = NVMLDL_ERROR_NOT_SUPPORTED;
    char note[ENERGY_WHY_MAX];

    if (e->nvml.total_energy != NULL)
        r = e->nvml.total_energy(s->gpu, &mj);
    if (r == NVMLDL_SUCCESS) {
        d->method = ENERGY_METHOD_COUNTER;
        s->raw = mj;
        return 1;
    }
    /* Only a GPU without the counter falls back to its power reading:
     * where the counter exists it is the measurement. */
    if (r == NVMLDL_ERROR_NOT_SUPPORTED && e->nvml.power_usage != NULL &&
        e->nvml.power_usage(s->gpu, &mw) == NVMLDL_SUCCESS) {
        d->method = ENERGY_METHOD_POWER_INTEGRAL;
        s->watts = mw / 1000.0;
        s->at = energy_now(e);
        return 1;
    }
    snprintf(note, sizeof(note),
             "%s (%s) reports neither an energy counter nor its power (%s)",
             d->name, d->model, nvmldl_strerror(&e->nvml, r));
    why_add(e->why_gpu, sizeof(e->why_gpu), note);
    return 0;
}

static void gpu_add(energy *e, unsigned index)
{
    energy_device *d = &e->dev[e->n];
    energy_src *s = &e->src[e->n];
    nvmldl_ret r;
    char note[ENERGY_WHY_MAX];

    memset(d, 0, sizeof(*d));
    memset(s, 0, sizeof(*s));
    d->kind = ENERGY_KIND_GPU;
    d->index = index;
    snprintf(d->name, sizeof(d->name), "gpu%u", index);
    r = e->nvml.device_by_index(index, &s->gpu);
    if (r != NVMLDL_SUCCESS) {
        snprintf(note, sizeof(note), "%s cannot be opened: %s", d->name,
                 nvmldl_strerror(&e->nvml, r));
        why_add(e->why_gpu, sizeof(e->why_gpu), note);
        return;
    }
    if (e->nvml.device_name(s->gpu, d->model, sizeof(d->model)) !=
        NVMLDL_SUCCESS)
        snprintf(d->model, sizeof(d->model), "NVIDIA GPU");
    if (gpu_first_reading(e, s, d))
        e->n++;
}

static flps_err gpu_open(energy *e, const energy_opts *o, char *errbuf,
                         size_t errlen)
{
    unsigned idx[NVMLDL_MAX_GPUS];
    size_t count = 0, before = e->n;
    flps_err rc;

    if (nvmldl_open(o->nvml_library, &e->nvml, e->why_gpu,
                    sizeof(e->why_gpu)) != FLPS_OK)
        return FLPS_OK; /* why_gpu says which way it is absent */
    rc = nvmldl_select(&e->nvml, o->gpus, idx, NVMLDL_MAX_GPUS, &count, errbuf,
                       errlen);
    if (rc == FLPS_EINVAL)
        return rc; /* a configuration naming a GPU that is not there */
    if (rc != FLPS_OK)
        snprintf(e->why_gpu, sizeof(e->why_gpu), "%s", errbuf);
    else if (count == 0)
        snprintf(e->why_gpu, sizeof(e->why_gpu), "NVML (%s) lists no GPU",
                 e->nvml.path);
    for (size_t i = 0; i < count && e->n < ENERGY_MAX_DEVICES; i++)
        gpu_add(e, idx[i]);
    if (e->n == before)
        nvmldl_close(&e->nvml);
    return FLPS_OK;
}

static int gpu_read(energy *e, size_t i)
{
    energy_src *s = &e->src[i];
    unsigned long long mj;
    unsigned mw;
    double t;

    if (e->dev[i].method == ENERGY_METHOD_COUNTER) {
        if (e->nvml.total_energy(s->gpu, &mj) != NVMLDL_SUCCESS)
            return 0;
        /* The counter only grows while the driver stays loaded; a smaller
         * value means it was reloaded, and that interval is lost rather
         * than guessed. */
        if (mj >= s->raw)
            s->joules += (double)(mj - s->raw) / 1e3;
        s->raw = mj;
        return 1;
    }
    if (e->nvml.power_usage(s->gpu, &mw) != NVMLDL_SUCCESS)
        return 0;
    t = energy_now(e);
    /* The trapezoid between two readings: the samples are NVML's power
     * readings, and the integral is over our own sampling times. */
    s->joules += (s->watts + mw / 1000.0) / 2.0 * (t - s->at);
    s->watts = mw / 1000.0;
    s->at = t;
    return 1;
}

/* --- CPU packages (RAPL) --------------------------------------------- */

/* "intel-rapl:N", a top-level RAPL zone (its sub-zones, core, uncore and
 * dram, are "intel-rapl:N:M" and part of the package's count; the
 * intel-rapl-mmio zones repeat package 0). */
static int rapl_zone(const char *name, unsigned *n)
{
    const char *p = name + strlen("intel-rapl:");

    if (strncmp(name, "intel-rapl:", strlen("intel-rapl:")) != 0 || *p < '0' ||
        *p > '9')
        return 0;
    *n = (unsigned)strtoul(p, NULL, 10);
    return strspn(p, "0123456789") == strlen(p);
}

static int by_number(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

    return (x > y) - (x < y);
}

/* Add the package zone dir (its domain name in word) when readable: 1, or
 * 0 with the reason in why_cpu. */
#define RAPL_DIR_MAX (ENERGY_PATH_MAX - 16)

static int rapl_add(energy *e, const char *dir, const char *word)
{
    energy_device *d = &e->dev[e->n];
    energy_src *s = &e->src[e->n];
    char path[ENERGY_PATH_MAX + 32];
    char note[ENERGY_WHY_MAX + 64];
    unsigned pkg = (unsigned)strtoul(word + strlen("package-"), NULL, 10);

    memset(d, 0, sizeof(*d));
    memset(s, 0, sizeof(*s));
    snprintf(s->path, sizeof(s->path), "%s/energy_uj", dir);
    if (!flps_read_u64(s->path, &s->raw)) {
        snprintf(note, sizeof(note), "%s is not readable (%s%s)", s->path,
                 strerror(errno),
                 errno == EACCES ? "; RAPL's counters are root-only since "
                                   "Linux 5.10"
                                 : "");
        why_add(e->why_cpu, sizeof(e->why_cpu), note);
        return 0;
    }
    snprintf(path, sizeof(path), "%s/max_energy_range_uj", dir);
    if (!flps_read_u64(path, &s->range))
        s->range = 0;
    d->kind = ENERGY_KIND_CPU_PACKAGE;
    d->method = ENERGY_METHOD_COUNTER;
    d->index = pkg;
    snprintf(d->name, sizeof(d->name), "cpu-package%u", pkg);
    snprintf(d->model, sizeof(d->model), "%s", word);
    e->n++;
    return 1;
}

static void rapl_open(energy *e, const char *root)
{
    char base[ENERGY_PATH_MAX / 2], dir[RAPL_DIR_MAX], path[600];
    char word[64];
    unsigned zones[ENERGY_MAX_DEVICES];
    size_t nzones = 0, before = e->n;
    DIR *d;
    struct dirent *ent;

    snprintf(base, sizeof(base), "%s/class/powercap", root);
    d = opendir(base);
    if (d == NULL) {
        snprintf(e->why_cpu, sizeof(e->why_cpu), "no RAPL domains under %s",
                 base);
        return;
    }
    while ((ent = readdir(d)) != NULL && nzones < ENERGY_MAX_DEVICES)
        if (rapl_zone(ent->d_name, &zones[nzones]))
            nzones++;
    closedir(d);
    /* In package order, whatever order the directory lists them in. */
    qsort(zones, nzones, sizeof(zones[0]), by_number);
    for (size_t i = 0; i < nzones && e->n < ENERGY_MAX_DEVICES; i++) {
        snprintf(dir, sizeof(dir), "%s/intel-rapl:%u", base, zones[i]);
        snprintf(path, sizeof(path), "%s/name", dir);
        flps_read_line(path, word, sizeof(word));
        /* Packages only: psys (the platform, on laptops) overlaps them. */
        if (strncmp(word, "package-", strlen("package-")) == 0)
            rapl_add(e, dir, word);
    }
    if (e->n == before && e->why_cpu[0] == '\0')
        snprintf(e->why_cpu, sizeof(e->why_cpu), "no RAPL domains under %s",
                 base);
}

static int rapl_read(energy_src *s)
{
    uint64_t uj;

    if (!flps_read_u64(s->path, &uj))
        return 0;
    if (uj >= s->raw)
        s->joules += (double)(uj - s->raw) / 1e6;
    else if (s->range > 0 && s->raw <= s->range)
        /* Wrapped once since the last read: up to the range, then from
         * zero. Reads must come more often than a wrap (minutes at full
         * power: about 14 on a 300 W package with a 262 kJ range). */
        s->joules += (double)(s->range - s->raw + uj) / 1e6;
    s->raw = uj;
    return 1;
}

/* --- the handle ------------------------------------------------------ */

static void why_compose(energy *e, unsigned sources)
{
    const char *g = (sources & ENERGY_SOURCE_GPU) ? e->why_gpu : "";
    const char *c = (sources & ENERGY_SOURCE_CPU) ? e->why_cpu : "";
    const char *and = (g[0] && c[0]) ? " and " : "";

    if (e->n == 0)
        snprintf(e->why, sizeof(e->why), "%s%s%s: energy is not reported", g,
                 and, c);
    else
        snprintf(e->why, sizeof(e->why), "%s%s%s", g, g[0] && c[0] ? "; " : "",
                 c);
}

flps_err energy_open(const energy_opts *opts, energy **out, char *errbuf,
                     size_t errlen)
{
    energy_opts o = {0};
    const char *root;
    energy *e;
    flps_err rc;

    if (opts != NULL)
        o = *opts;
    e = flps_calloc(1, sizeof(*e));
    if (e == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    e->now = o.now ? o.now : energy_mono;
    e->now_arg = o.now_arg;
    if (o.sources == 0)
        o.sources = ENERGY_SOURCE_ALL;
    if (o.sources & ENERGY_SOURCE_GPU) {
        rc = gpu_open(e, &o, errbuf, errlen);
        if (rc != FLPS_OK) {
            energy_close(e);
            return rc;
        }
    }
    if (o.sources & ENERGY_SOURCE_CPU) {
        root = o.sysfs_root;
        if (root == NULL || root[0] == '\0')
            root = getenv(ENERGY_SYSFS_ENV);
        if (root == NULL || root[0] == '\0')
            root = ENERGY_SYSFS_DEFAULT;
        rapl_open(e, root);
    }
    why_compose(e, o.sources);
    *out = e;
    return FLPS_OK;
}

void energy_close(energy *e)
{
    if (e == NULL)
        return;
    nvmldl_close(&e->nvml);
    flps_free(e);
}

size_t energy_count(const energy *e)
{
    return e->n;
}

const energy_device *energy_device_at(const energy *e, size_t i)
{
    return i < e->n ? &e->dev[i] : NULL;
}

const char *energy_why(const energy *e)
{
    return e->why;
}

char *energy_describe(const energy *e, char *buf, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    if (e->n == 0) {
        snprintf(buf, len, "%s", e->why);
        return buf;
    }
    for (size_t i = 0; i < e->n && used + 1 < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s %s (%s)", i ? ", " : "",
                         e->dev[i].name, e->dev[i].model,
                         energy_method_name(e->dev[i].method));

        if (w < 0)
            break;
        used += (size_t)w;
    }
    return buf;
}

flps_err energy_read(energy *e, double *joules, size_t n)
{
    if (joules == NULL && n > 0)
        return FLPS_EINVAL;
    for (size_t i = 0; i < e->n; i++) {
        energy_device *d = &e->dev[i];
        int ok =
            d->kind == ENERGY_KIND_GPU ? gpu_read(e, i) : rapl_read(&e->src[i]);

        if (!ok && !d->failed)
            log_warn("energy: reading %s (%s) failed; its total stays at "
                     "%.3f J",
                     d->name, d->model, e->src[i].joules);
        d->failed = !ok;
        if (i < n)
            joules[i] = e->src[i].joules;
    }
    return FLPS_OK;
}

void energy_sample(energy *e)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->dev[i].method == ENERGY_METHOD_POWER_INTEGRAL)
            e->dev[i].failed = !gpu_read(e, i);
}

/* --- the meter ------------------------------------------------------- */

void energy_meter_init(energy_meter *m, energy *e, uint64_t min_iters,
                       double min_seconds)
{
    memset(m, 0, sizeof(*m));
    m->e = e;
    m->min_iters = min_iters ? min_iters : ENERGY_METER_MIN_ITERS;
    m->min_seconds = min_seconds > 0 ? min_seconds : ENERGY_METER_MIN_SECONDS;
}

void energy_meter_start(energy_meter *m, uint64_t iter)
{
    energy_read(m->e, m->j0, ENERGY_MAX_DEVICES);
    m->t0 = energy_now(m->e);
    m->last_sample = m->t0;
    m->from = iter;
    m->open = 1;
}

static void meter_close(energy_meter *m, uint64_t iter, double t)
{
    energy_window *w = &m->last;
    double j1[ENERGY_MAX_DEVICES];
    double iters = (double)(iter - m->from);

    energy_read(m->e, j1, ENERGY_MAX_DEVICES);
    memset(w, 0, sizeof(*w));
    w->iter_from = m->from;
    w->iter_to = iter;
    w->seconds = t - m->t0;
    w->ndev = m->e->n;
    for (size_t i = 0; i < w->ndev; i++) {
        w->joules[i] = j1[i] - m->j0[i];
        if (m->e->dev[i].kind == ENERGY_KIND_GPU)
            w->joules_gpu += w->joules[i];
        else
            w->joules_cpu += w->joules[i];
        m->j0[i] = j1[i];
    }
    w->joules_total = w->joules_gpu + w->joules_cpu;
    w->seconds_per_iter = w->seconds / iters;
    w->joules_per_iter = w->joules_total / iters;
    w->gpu_joules_per_iter = w->joules_gpu / iters;
    m->windows++;
    m->from = iter;
    m->t0 = t;
    m->last_sample = t;
}

int energy_meter_tick(energy_meter *m, uint64_t iter)
{
    double t;

    if (m->e->n == 0)
        return 0;
    if (!m->open || iter < m->from) {
        energy_meter_start(m, iter);
        return 0;
    }
    t = energy_now(m->e);
    if (iter - m->from >= m->min_iters && t - m->t0 >= m->min_seconds) {
        meter_close(m, iter, t);
        return 1;
    }
    if (t - m->last_sample >= ENERGY_POWER_SAMPLE_SECONDS) {
        energy_sample(m->e);
        m->last_sample = t;
    }
    return 0;
}

const energy_window *energy_meter_window(const energy_meter *m)
{
    return m->windows > 0 ? &m->last : NULL;
}
