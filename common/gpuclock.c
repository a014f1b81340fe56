/* The GPU clock of a job: parsing gpu_clock, setting and restoring clocks
 * through NVML with an on-disk record, and auto's choice. */
#include "common/gpuclock.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/nvml_dl.h"
#include "common/readfile.h"

#define GPUCLOCK_MAGIC "flps-gpu-clock-record 1"
#define GPUCLOCK_PATH_MAX 512
#define GPUCLOCK_WHY_MAX 512
/* A record is a few lines per GPU; anything longer is not one. */
#define GPUCLOCK_RECORD_MAX 8192

/* --- the job file's value -------------------------------------------- */

flps_err gpuclock_parse(const char *text, gpuclock_spec *out, char *errbuf,
                        size_t errlen)
{
    gpuclock_spec s = {GPUCLOCK_DEFAULT, 0};
    uint64_t mhz;

    if (text == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "gpu_clock: no value");
    if (strcmp(text, "default") == 0)
        s.mode = GPUCLOCK_DEFAULT;
    else if (strcmp(text, "max") == 0)
        s.mode = GPUCLOCK_MAX;
    else if (strcmp(text, "auto") == 0)
        s.mode = GPUCLOCK_AUTO;
    else if (text[0] >= '0' && text[0] <= '9') {
        /* A number: the bounded parser says what is wrong with it. */
        if (flps_parse_u64("gpu_clock", text, GPUCLOCK_MHZ_MIN,
                           GPUCLOCK_MHZ_MAX, &mhz, errbuf, errlen) != FLPS_OK)
            return FLPS_EINVAL;
        s.mode = GPUCLOCK_MHZ;
        s.mhz = (unsigned)mhz;
    } else
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "gpu_clock: '%s' is not default, max, auto or "
                               "a clock in MHz (%u to %u)",
                               text, GPUCLOCK_MHZ_MIN, GPUCLOCK_MHZ_MAX);
    *out = s;
    return FLPS_OK;
}

flps_err gpuclock_parse_slowdown(const char *text, double *out, char *errbuf,
                                 size_t errlen)
{
    char num[64];
    size_t n = text ? strlen(text) : 0;
    double v;

    if (n > 0 && n < sizeof(num) && text[n - 1] == '%') {
        memcpy(num, text, n - 1);
        num[n - 1] = '\0';
        if (flps_parse_double(NULL, num, 0.0, 100.0, &v, NULL, 0) == FLPS_OK &&
            v < 100.0) {
            *out = v / 100.0;
            return FLPS_OK;
        }
    } else if (n > 0 &&
               flps_parse_double(NULL, text, 0.0, 1.0, &v, NULL, 0) ==
                   FLPS_OK &&
               v < 1.0) {
        *out = v;
        return FLPS_OK;
    }
    return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                           "gpu_clock_slowdown: '%s' is not a fraction below "
                           "1 or a percentage below 100%% (write 5%% or 0.05)",
                           text ? text : "");
}

char *gpuclock_spec_format(const gpuclock_spec *s, char *buf, size_t len)
{
    static const char *const names[] = {"default", "max", NULL, "auto"};

    if (s->mode == GPUCLOCK_MHZ)
        snprintf(buf, len, "%u", s->mhz);
    else
        snprintf(buf, len, "%s", names[s->mode]);
    return buf;
}

const char *gpuclock_via_name(unsigned via)
{
    switch (via & (GPUCLOCK_VIA_LOCKED | GPUCLOCK_VIA_APPLICATIONS)) {
    case GPUCLOCK_VIA_LOCKED:
        return "locked";
    case GPUCLOCK_VIA_APPLICATIONS:
        return "applications";
    case GPUCLOCK_VIA_LOCKED | GPUCLOCK_VIA_APPLICATIONS:
        return "locked+applications";
    default:
        return "none";
    }
}

/* --- the handle ------------------------------------------------------ */

typedef struct gpuclock_dev {
    unsigned index;
    nvmldl_dev h;
    char name[NVMLDL_NAME_MAX];
    char uuid[NVMLDL_UUID_MAX];
    unsigned clocks[GPUCLOCK_MAX_CLOCKS]; /* graphics, highest first */
    size_t nclocks;
    unsigned mem_mhz; /* the highest memory clock (0: unknown) */
    unsigned via;     /* what this handle changed (GPUCLOCK_VIA_*) */
    unsigned mhz;     /* the graphics clock set */
} gpuclock_dev;

struct gpuclock {
    nvmldl nvml;
    size_t n;
    gpuclock_dev dev[GPUCLOCK_MAX_DEVICES];
    char record[GPUCLOCK_PATH_MAX]; /* "" when no record is kept */
    int recorded;                   /* the record there is this handle's */
    char why[GPUCLOCK_WHY_MAX];
};

static int by_mhz_desc(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

    return (x < y) - (x > y);
}

/* Sort mhz[0..n) highest first and drop repeats; returns the new n. */
static size_t sort_unique(unsigned *mhz, size_t n)
{
    size_t k = 0;

    qsort(mhz, n, sizeof(*mhz), by_mhz_desc);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || mhz[k - 1] != mhz[i])
            mhz[k++] = mhz[i];
    return k;
}

/* The device's highest memory clock and the graphics clocks supported
 * with it (none when NVML cannot say: then only locked clocks, at the
 * value asked, can be tried). */
static void dev_clocks(const nvmldl *nv, gpuclock_dev *d)
{
    unsigned mem[GPUCLOCK_MAX_CLOCKS], count = GPUCLOCK_MAX_CLOCKS;

    if (nv->supported_memory_clocks == NULL ||
        nv->supported_graphics_clocks == NULL ||
        nv->supported_memory_clocks(d->h, &count, mem) != NVMLDL_SUCCESS ||
        count == 0)
        return;
    count = (unsigned)sort_unique(mem, count);
    d->mem_mhz = mem[0];
    count = GPUCLOCK_MAX_CLOCKS;
    if (nv->supported_graphics_clocks(d->h, d->mem_mhz, &count, d->clocks) !=
        NVMLDL_SUCCESS)
        return;
    d->nclocks = sort_unique(d->clocks, count);
}

static void dev_add(gpuclock *g, unsigned index)
{
    gpuclock_dev *d = &g->dev[g->n];
    nvmldl_ret r;

    memset(d, 0, sizeof(*d));
    d->index = index;
    r = g->nvml.device_by_index(index, &d->h);
    if (r != NVMLDL_SUCCESS) {
        size_t used = strlen(g->why);

        snprintf(g->why + used, sizeof(g->why) - used,
                 "%sgpu%u cannot be opened: %s", used ? "; " : "", index,
                 nvmldl_strerror(&g->nvml, r));
        return;
    }
    if (g->nvml.device_name(d->h, d->name, sizeof(d->name)) != NVMLDL_SUCCESS)
        snprintf(d->name, sizeof(d->name), "NVIDIA GPU");
    if (g->nvml.device_uuid == NULL ||
        g->nvml.device_uuid(d->h, d->uuid, sizeof(d->uuid)) != NVMLDL_SUCCESS ||
        d->uuid[0] == '\0' || strpbrk(d->uuid, " \t\n") != NULL)
        snprintf(d->uuid, sizeof(d->uuid), "-");
    dev_clocks(&g->nvml, d);
    g->n++;
}

/* A record already at path was left by a worker that crashed before its
 * supervisor restored it (a restart in the same directory): restore it
 * now, before this handle's record takes its place. */
static void record_adopt(const char *path, const char *nvml_library)
{
    char msg[GPUCLOCK_WHY_MAX + 256];
    size_t n = 0;

    if (access(path, F_OK) != 0)
        return;
    if (gpuclock_restore_from_record(path, nvml_library, &n, msg,
                                     sizeof(msg)) != FLPS_OK)
        log_warn("%s", msg);
    else if (n > 0)
        log_info("gpu_clock: restored the clocks a crashed run left set "
                 "(%s)",
                 path);
}

flps_err gpuclock_open(const gpuclock_opts *opts, gpuclock **out, char *errbuf,
                       size_t errlen)
{
    gpuclock_opts o = {0};
    unsigned idx[NVMLDL_MAX_GPUS];
    size_t count = 0;
    gpuclock *g;
    flps_err rc;

    if (opts != NULL)
        o = *opts;
    if (o.record_path != NULL && strlen(o.record_path) + 8 >= GPUCLOCK_PATH_MAX)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "the GPU clock record's path is longer than "
                               "%d characters",
                               GPUCLOCK_PATH_MAX - 9);
    g = flps_calloc(1, sizeof(*g));
    if (g == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    if (o.record_path != NULL) {
        snprintf(g->record, sizeof(g->record), "%s", o.record_path);
        record_adopt(g->record, o.nvml_library);
    }
    if (nvmldl_open(o.nvml_library, &g->nvml, g->why, sizeof(g->why)) !=
        FLPS_OK) {
        *out = g;
        return FLPS_OK;
    }
    rc = nvmldl_select(&g->nvml, o.gpus, idx, NVMLDL_MAX_GPUS, &count, errbuf,
                       errlen);
    if (rc == FLPS_EINVAL) {
        gpuclock_close(g);
        return rc;
    }
    if (rc != FLPS_OK)
        snprintf(g->why, sizeof(g->why), "%s", errbuf);
    for (size_t i = 0; i < count && g->n < GPUCLOCK_MAX_DEVICES; i++)
        dev_add(g, idx[i]);
    if (g->n == 0 && g->why[0] == '\0')
        snprintf(g->why, sizeof(g->why), "NVML (%s) lists no GPU",
                 g->nvml.path);
    *out = g;
    return FLPS_OK;
}

size_t gpuclock_count(const gpuclock *g)
{
    return g->n;
}

const char *gpuclock_why(const gpuclock *g)
{
    return g->why;
}

flps_err gpuclock_supported(const gpuclock *g, const unsigned **mhz, size_t *n)
{
    if (g->n == 0 || g->dev[0].nclocks == 0)
        return FLPS_ESTATE;
    *mhz = g->dev[0].clocks;
    *n = g->dev[0].nclocks;
    return FLPS_OK;
}

unsigned gpuclock_nearest(const unsigned *mhz, size_t n, unsigned want)
{
    unsigned best = 0, best_d = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned d = mhz[i] > want ? mhz[i] - want : want - mhz[i];

        if (best == 0 || d < best_d || (d == best_d && mhz[i] > best)) {
            best = mhz[i];
            best_d = d;
        }
    }
    return best;
}

/* --- the record ------------------------------------------------------ */

size_t gpuclock_record_format(const gpuclock_record *r, char *buf, size_t len)
{
    size_t need = 0;
    int w;

    w = snprintf(buf, len, "%s\npid %ld\n", GPUCLOCK_MAGIC, r->pid);
    need += (size_t)(w > 0 ? w : 0);
    for (size_t i = 0; i < r->ndev; i++) {
        const gpuclock_record_dev *d = &r->dev[i];

        w = snprintf(need < len ? buf + need : NULL,
                     need < len ? len - need : 0, "device %u %s %s %u %u\n",
                     d->index, d->uuid[0] ? d->uuid : "-",
                     gpuclock_via_name(d->via), d->mhz, d->mem_mhz);
        need += (size_t)(w > 0 ? w : 0);
    }
    return need;
}

static int via_parse(const char *word, unsigned *via)
{
    static const unsigned all[] = {
        GPUCLOCK_VIA_LOCKED, GPUCLOCK_VIA_APPLICATIONS,
        GPUCLOCK_VIA_LOCKED | GPUCLOCK_VIA_APPLICATIONS};

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(word, gpuclock_via_name(all[i])) == 0) {
            *via = all[i];
            return 1;
        }
    return 0;
}

/* One "device INDEX UUID VIA MHZ MEM" line into d: 1, or 0. */
static int record_device(const char *line, gpuclock_record_dev *d)
{
    char uuid[96], via[32];
    int used = 0;

    memset(d, 0, sizeof(*d));
    if (sscanf(line, "device %u %95s %31s %u %u%n", &d->index, uuid, via,
               &d->mhz, &d->mem_mhz, &used) != 5 ||
        line[used] != '\0' || !via_parse(via, &d->via))
        return 0;
    memcpy(d->uuid, uuid, sizeof(d->uuid));
    return 1;
}

flps_err gpuclock_record_parse(const char *text, gpuclock_record *out,
                               char *errbuf, size_t errlen)
{
    gpuclock_record r;
    const char *p = text;
    char line[256];
    unsigned lineno = 0;

    memset(&r, 0, sizeof(r));
    while (p != NULL && *p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        int used = 0;

        lineno++;
        if (n >= sizeof(line))
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "GPU clock record: line %u is too long",
                                   lineno);
        memcpy(line, p, n);
        line[n] = '\0';
        p = nl ? nl + 1 : NULL;
        if (lineno == 1 ? strcmp(line, GPUCLOCK_MAGIC) == 0
                        : (sscanf(line, "pid %ld%n", &r.pid, &used) == 1 &&
                           line[used] == '\0'))
            continue;
        if (lineno > 1 && r.ndev < GPUCLOCK_MAX_DEVICES &&
            record_device(line, &r.dev[r.ndev])) {
            r.ndev++;
            continue;
        }
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "GPU clock record: line %u ('%s') is not %s",
                               lineno, line,
                               lineno == 1 ? "'" GPUCLOCK_MAGIC "'"
                                           : "'pid N' or 'device INDEX "
                                             "UUID VIA MHZ MEMMHZ'");
    }
    if (lineno == 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "GPU clock record: empty");
    *out = r;
    return FLPS_OK;
}

/* Write the record of what g has changed, plus `also` on device i (the
 * change about to be tried), atomically: a temporary file renamed over
 * the old one, so a crash leaves either record whole. */
static flps_err record_write(gpuclock *g, size_t i, unsigned also, unsigned mhz)
{
    gpuclock_record r;
    char text[GPUCLOCK_RECORD_MAX], tmp[GPUCLOCK_PATH_MAX + 8];
    size_t len;
    FILE *f;
    int ok;

    if (g->record[0] == '\0')
        return FLPS_OK;
    memset(&r, 0, sizeof(r));
    r.pid = (long)getpid();
    for (size_t k = 0; k < g->n; k++) {
        const gpuclock_dev *d = &g->dev[k];
        unsigned via = d->via | (k == i ? also : 0);

        if (via == 0)
            continue;
        r.dev[r.ndev].index = d->index;
        snprintf(r.dev[r.ndev].uuid, sizeof(r.dev[0].uuid), "%s", d->uuid);
        r.dev[r.ndev].via = via;
        r.dev[r.ndev].mhz = k == i ? mhz : d->mhz;
        r.dev[r.ndev].mem_mhz = d->mem_mhz;
        r.ndev++;
    }
    if (r.ndev == 0) {
        /* Only our own record goes: one an earlier worker left is its
         * supervisor's to restore. */
        if (g->recorded && unlink(g->record) != 0 && errno != ENOENT)
            return FLPS_EIO;
        g->recorded = 0;
        return FLPS_OK;
    }
    len = gpuclock_record_format(&r, text, sizeof(text));
    snprintf(tmp, sizeof(tmp), "%s.tmp", g->record);
    f = fopen(tmp, "w");
    if (f == NULL) {
        log_error("gpu_clock: cannot write %s: %s", tmp, strerror(errno));
        return FLPS_EIO;
    }
    ok = fwrite(text, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, g->record) != 0) {
        log_error("gpu_clock: cannot write %s: %s", g->record, strerror(errno));
        unlink(tmp);
        return FLPS_EIO;
    }
    g->recorded = 1;
    return FLPS_OK;
}

/* --- setting --------------------------------------------------------- */

/* Reset the ways in via on h: NVMLDL_SUCCESS, or the first refusal. A way
 * the GPU does not support was never set, so NOT_SUPPORTED is success. */
static nvmldl_ret reset_dev(const nvmldl *nv, nvmldl_dev h, unsigned via)
{
    nvmldl_ret r = NVMLDL_SUCCESS, r2;

    if ((via & GPUCLOCK_VIA_LOCKED) && nv->reset_locked_clocks != NULL) {
        r2 = nv->reset_locked_clocks(h);
        if (r2 != NVMLDL_SUCCESS && r2 != NVMLDL_ERROR_NOT_SUPPORTED)
            r = r2;
    }
    if ((via & GPUCLOCK_VIA_APPLICATIONS) && nv->reset_app_clocks != NULL) {
        r2 = nv->reset_app_clocks(h);
        if (r2 != NVMLDL_SUCCESS && r2 != NVMLDL_ERROR_NOT_SUPPORTED &&
            r == NVMLDL_SUCCESS)
            r = r2;
    }
    return r;
}

/* Try one way of setting d to mhz, recording it first. */
static nvmldl_ret try_way(gpuclock *g, size_t i, unsigned way, unsigned mhz,
                          flps_err *rc)
{
    gpuclock_dev *d = &g->dev[i];
    nvmldl_ret r;

    if (way == GPUCLOCK_VIA_LOCKED
            ? g->nvml.set_locked_clocks == NULL
            : (g->nvml.set_app_clocks == NULL || d->mem_mhz == 0))
        return NVMLDL_ERROR_NOT_SUPPORTED;
    *rc = record_write(g, i, way, mhz);
    if (*rc != FLPS_OK)
        return NVMLDL_ERROR_UNKNOWN;
    r = way == GPUCLOCK_VIA_LOCKED
            ? g->nvml.set_locked_clocks(d->h, mhz, mhz)
            : g->nvml.set_app_clocks(d->h, d->mem_mhz, mhz);
    if (r == NVMLDL_SUCCESS) {
        d->via |= way;
        d->mhz = mhz;
    }
    return r;
}

/* Set device i: the way that worked before first (auto sets several
 * clocks in a row), else locked clocks, then application clocks. 1 when
 * set; 0 with the refusals in why, or with *rc set when the record could
 * not be written. */
static int set_dev(gpuclock *g, size_t i, unsigned mhz, flps_err *rc, char *why,
                   size_t whylen)
{
    gpuclock_dev *d = &g->dev[i];
    unsigned first = d->via == GPUCLOCK_VIA_APPLICATIONS
                         ? GPUCLOCK_VIA_APPLICATIONS
                         : GPUCLOCK_VIA_LOCKED;
    unsigned second = first ^ (GPUCLOCK_VIA_LOCKED | GPUCLOCK_VIA_APPLICATIONS);
    nvmldl_ret r1, r2;

    *rc = FLPS_OK;
    r1 = try_way(g, i, first, mhz, rc);
    if (r1 == NVMLDL_SUCCESS || *rc != FLPS_OK)
        return r1 == NVMLDL_SUCCESS;
    r2 = try_way(g, i, second, mhz, rc);
    if (r2 == NVMLDL_SUCCESS || *rc != FLPS_OK)
        return r2 == NVMLDL_SUCCESS;
    snprintf(
        why, whylen,
        "gpu%u (%s) refuses clock changes (%s clocks: %s; %s clocks: "
        "%s)%s",
        d->index, d->name, gpuclock_via_name(first),
        nvmldl_strerror(&g->nvml, r1), gpuclock_via_name(second),
        nvmldl_strerror(&g->nvml, r2),
        (r1 == NVMLDL_ERROR_NO_PERMISSION || r2 == NVMLDL_ERROR_NO_PERMISSION)
            ? "; setting clocks needs root, or `nvidia-smi -acp "
              "UNRESTRICTED` for application clocks"
            : "");
    return 0;
}

flps_err gpuclock_set(gpuclock *g, unsigned mhz, unsigned *set_mhz, char *msg,
                      size_t msglen)
{
    char why[GPUCLOCK_WHY_MAX + 128] = "";
    unsigned first = 0;
    flps_err rc = FLPS_OK;

    if (g->n == 0)
        return flps_errbuf_set(msg, msglen, FLPS_ESTATE,
                               "gpu_clock: %s: running at the default clock",
                               g->why);
    for (size_t i = 0; i < g->n; i++) {
        gpuclock_dev *d = &g->dev[i];
        unsigned want =
            d->nclocks ? gpuclock_nearest(d->clocks, d->nclocks, mhz) : mhz;

        if (!set_dev(g, i, want, &rc, why, sizeof(why)))
            break;
        if (i == 0)
            first = want;
    }
    if (rc == FLPS_OK && why[0] == '\0') {
        if (set_mhz != NULL)
            *set_mhz = first;
        return FLPS_OK;
    }
    /* All or nothing: a job runs at one clock on every GPU it has. */
    gpuclock_restore(g, NULL, 0);
    if (rc != FLPS_OK)
        return flps_errbuf_set(msg, msglen, rc,
                               "gpu_clock: the record %s cannot be written: "
                               "running at the default clock",
                               g->record);
    return flps_errbuf_set(msg, msglen, FLPS_ESTATE,
                           "gpu_clock: %s: running at the default clock", why);
}

flps_err gpuclock_apply(gpuclock *g, const gpuclock_spec *spec,
                        unsigned *set_mhz, char *msg, size_t msglen)
{
    const unsigned *mhz = NULL;
    size_t n = 0;

    switch (spec->mode) {
    case GPUCLOCK_DEFAULT:
        if (set_mhz != NULL)
            *set_mhz = 0;
        return FLPS_OK;
    case GPUCLOCK_MAX:
        if (g->n > 0 && gpuclock_supported(g, &mhz, &n) != FLPS_OK)
            return flps_errbuf_set(msg, msglen, FLPS_ESTATE,
                                   "gpu_clock: max: NVML lists no supported "
                                   "clock for gpu%u (%s): running at the "
                                   "default clock",
                                   g->dev[0].index, g->dev[0].name);
        return gpuclock_set(g, g->n > 0 ? mhz[0] : 0, set_mhz, msg, msglen);
    case GPUCLOCK_MHZ:
        return gpuclock_set(g, spec->mhz, set_mhz, msg, msglen);
    default:
        return flps_errbuf_set(msg, msglen, FLPS_EINVAL,
                               "gpu_clock: auto is walked by gpuclock_auto");
    }
}

flps_err gpuclock_restore(gpuclock *g, char *msg, size_t msglen)
{
    char why[GPUCLOCK_WHY_MAX] = "";

    for (size_t i = 0; i < g->n; i++) {
        gpuclock_dev *d = &g->dev[i];
        nvmldl_ret r;

        if (d->via == 0)
            continue;
        r = reset_dev(&g->nvml, d->h, d->via);
        if (r != NVMLDL_SUCCESS) {
            snprintf(why, sizeof(why),
                     "gpu_clock: resetting the %s clocks of gpu%u (%s) "
                     "failed: %s",
                     gpuclock_via_name(d->via), d->index, d->name,
                     nvmldl_strerror(&g->nvml, r));
            continue;
        }
        d->via = 0;
        d->mhz = 0;
    }
    if (why[0] != '\0')
        return flps_errbuf_set(msg, msglen, FLPS_ESYS, "%s%s%s", why,
                               g->record[0] ? "; the record stays at " : "",
                               g->record);
    record_write(g, g->n, 0, 0); /* nothing changed any more: removed */
    return FLPS_OK;
}

void gpuclock_close(gpuclock *g)
{
    char msg[GPUCLOCK_WHY_MAX + 128];

    if (g == NULL)
        return;
    if (gpuclock_restore(g, msg, sizeof(msg)) != FLPS_OK)
        log_error("%s", msg);
    nvmldl_close(&g->nvml);
    flps_free(g);
}

/* --- the supervisor's restore ---------------------------------------- */

static int process_is_running(long pid)
{
    if (pid <= 0 || pid == (long)getpid())
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

static nvmldl_ret record_reset(const nvmldl *nv, const gpuclock_record_dev *d)
{
    nvmldl_dev h;
    nvmldl_ret r = NVMLDL_ERROR_NOT_FOUND;

    /* By UUID first: the index of a GPU can change when the node's GPUs
     * change, its UUID cannot. */
    if (strcmp(d->uuid, "-") != 0 && nv->device_by_uuid != NULL)
        r = nv->device_by_uuid(d->uuid, &h);
    if (r != NVMLDL_SUCCESS && strcmp(d->uuid, "-") == 0)
        r = nv->device_by_index(d->index, &h);
    if (r != NVMLDL_SUCCESS)
        return r;
    return reset_dev(nv, h, d->via);
}

flps_err gpuclock_restore_from_record(const char *path,
                                      const char *nvml_library,
                                      size_t *restored, char *msg,
                                      size_t msglen)
{
    char text[GPUCLOCK_RECORD_MAX], why[GPUCLOCK_WHY_MAX] = "";
    gpuclock_record r;
    nvmldl nv;
    size_t done = 0;
    flps_err rc;

    if (restored != NULL)
        *restored = 0;
    if (!flps_read_file(path, text, sizeof(text))) {
        if (errno == ENOENT)
            return FLPS_OK;
        return flps_errbuf_set(msg, msglen, FLPS_EPROTO,
                               "gpu_clock: cannot read the record %s: %s", path,
                               strerror(errno));
    }
    rc = gpuclock_record_parse(text, &r, why, sizeof(why));
    if (rc != FLPS_OK)
        return flps_errbuf_set(msg, msglen, rc, "%s: %s", path, why);
    if (process_is_running(r.pid))
        return flps_errbuf_set(msg, msglen, FLPS_ESTATE,
                               "gpu_clock: %s belongs to process %ld, which "
                               "is still running",
                               path, r.pid);
    if (nvmldl_open(nvml_library, &nv, why, sizeof(why)) != FLPS_OK)
        return flps_errbuf_set(msg, msglen, FLPS_ESYS,
                               "gpu_clock: cannot restore the clocks in %s: "
                               "%s",
                               path, why);
    for (size_t i = 0; i < r.ndev; i++) {
        nvmldl_ret e = record_reset(&nv, &r.dev[i]);

        if (e == NVMLDL_SUCCESS)
            done++;
        else
            snprintf(why, sizeof(why), "gpu%u (%s): %s", r.dev[i].index,
                     r.dev[i].uuid, nvmldl_strerror(&nv, e));
    }
    nvmldl_close(&nv);
    if (restored != NULL)
        *restored = done;
    if (done < r.ndev)
        return flps_errbuf_set(msg, msglen, FLPS_ESYS,
                               "gpu_clock: restoring the clocks in %s "
                               "failed: %s; the record stays",
                               path, why);
    unlink(path);
    return FLPS_OK;
}

/* --- auto ------------------------------------------------------------ */

static int sample_ok(const gpuclock_sample *s)
{
    return isfinite(s->s_per_iter) && isfinite(s->j_per_iter) &&
           s->s_per_iter > 0 && s->j_per_iter > 0;
}

flps_err gpuclock_auto_choose(const gpuclock_sample *s, size_t n,
                              double slowdown, size_t *best)
{
    double fastest = INFINITY;
    size_t pick = n;

    if (!(slowdown >= 0))
        return FLPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (sample_ok(&s[i]) && s[i].s_per_iter < fastest)
            fastest = s[i].s_per_iter;
    for (size_t i = 0; i < n; i++) {
        if (!sample_ok(&s[i]) || s[i].s_per_iter > fastest * (1 + slowdown))
            continue;
        if (pick == n || s[i].j_per_iter < s[pick].j_per_iter ||
            (s[i].j_per_iter == s[pick].j_per_iter && s[i].mhz > s[pick].mhz))
            pick = i;
    }
    if (pick == n)
        return FLPS_EINVAL;
    *best = pick;
    return FLPS_OK;
}

size_t gpuclock_auto_candidates(const unsigned *supported, size_t n,
                                size_t want, unsigned *out)
{
    unsigned sorted[GPUCLOCK_MAX_CLOCKS];
    size_t m = n < GPUCLOCK_MAX_CLOCKS ? n : GPUCLOCK_MAX_CLOCKS, k = 0;

    if (m == 0 || want == 0)
        return 0;
    memcpy(sorted, supported, m * sizeof(*sorted));
    m = sort_unique(sorted, m);
    /* Steps of 7.5% of the highest, down to a tenth of it at most. */
    for (unsigned step = 0; step < 12 && k < want; step++) {
        double target = sorted[0] * (1.0 - 0.075 * step);
        unsigned c = gpuclock_nearest(sorted, m, (unsigned)lround(target));
        int seen = 0;

        for (size_t j = 0; j < k; j++)
            seen |= out[j] == c;
        if (!seen)
            out[k++] = c;
    }
    return k;
}

void gpuclock_auto_init(gpuclock_auto *a, const unsigned *cand, size_t n,
                        double slowdown, unsigned settle, unsigned measure)
{
    memset(a, 0, sizeof(*a));
    a->ncand = n < GPUCLOCK_AUTO_MAX ? n : GPUCLOCK_AUTO_MAX;
    memcpy(a->cand, cand, a->ncand * sizeof(*cand));
    a->slowdown = slowdown;
    a->settle = settle;
    a->measure = measure ? measure : 1;
}

gpuclock_auto_action gpuclock_auto_begin(gpuclock_auto *a, unsigned *mhz)
{
    if (a->ncand == 0) {
        a->done = 1;
        a->chosen = 0;
        *mhz = 0;
        return GPUCLOCK_AUTO_DONE;
    }
    *mhz = a->cand[0];
    return GPUCLOCK_AUTO_SET;
}

gpuclock_auto_action gpuclock_auto_feed(gpuclock_auto *a, double s_per_iter,
                                        double j_per_iter, unsigned *mhz)
{
    size_t best;

    if (a->done) {
        *mhz = a->chosen;
        return GPUCLOCK_AUTO_DONE;
    }
    if (++a->windows <= a->settle)
        return GPUCLOCK_AUTO_WAIT;
    a->sum_s += s_per_iter;
    a->sum_j += j_per_iter;
    if (a->windows - a->settle < a->measure)
        return GPUCLOCK_AUTO_WAIT;
    a->samples[a->nsamples].mhz = a->cand[a->cur];
    a->samples[a->nsamples].s_per_iter = a->sum_s / a->measure;
    a->samples[a->nsamples].j_per_iter = a->sum_j / a->measure;
    a->nsamples++;
    a->cur++;
    a->windows = 0;
    a->sum_s = a->sum_j = 0;
    if (a->cur < a->ncand) {
        *mhz = a->cand[a->cur];
        return GPUCLOCK_AUTO_SET;
    }
    a->done = 1;
    /* No valid sample (no energy measured at all): the default clock. */
    a->chosen = gpuclock_auto_choose(a->samples, a->nsamples, a->slowdown,
                                     &best) == FLPS_OK
                    ? a->samples[best].mhz
                    : 0;
    *mhz = a->chosen;
    return GPUCLOCK_AUTO_DONE;
}
