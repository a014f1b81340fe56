/* The energy a client's process uses, metered at the client's iteration
 * boundaries, and the GPU clock the job asks for (auto: chosen from the
 * first iterations' windows). */
#include "worker/client_energy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/energy.h"
#include "common/gpuclock.h"
#include "common/log.h"
#include "worker/client_metrics.h"

#define CE_WHY_MAX 512

/* One client's meter and clock (the process's first live client's; the
 * others keep only why). Owned by the client, its thread only. */
struct cenergy {
    int owner; /* holds the process's claim */
    energy *e;
    energy_meter m;
    int ticking;        /* the meter has opened its first window */
    uint64_t last_done; /* the last boundary counted */
    /* The meter's first reading: totals count from there. */
    uint64_t from0;
    double t0, j0[ENERGY_MAX_DEVICES];
    double reported[ENERGY_MAX_DEVICES]; /* added to the metric so far */
    gpuclock *g;
    gpuclock_spec spec;
    double slowdown;
    gpuclock_auto a;
    int auto_on;  /* auto is measuring */
    unsigned mhz; /* the clock set now; 0: the default */
    int refused;  /* the GPUs refused: default clocks */
    char why[CE_WHY_MAX];
};

/* The process's claim on its energy: 1 while a client meters. One flag
 * for the process because the counters (and the clocks) are the
 * process's, whatever number of clients it makes; set and cleared with
 * atomic operations by the claiming client only. */
static atomic_int claimed;
/* Whether the process has logged what it meters (or why nothing): once,
 * so a program that makes a client per round says it once. */
static atomic_int said;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A child of fork() is another process: its first client meters its own
 * energy (the parent's client is not the child's to use). */
static void forget_in_child(void)
{
    atomic_store(&claimed, 0);
}

static void set_atfork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}

static const char *env_or(const char *v, const char *name)
{
    const char *e;

    if (v != NULL)
        return v;
    e = getenv(name);
    return e != NULL && e[0] != '\0' ? e : NULL;
}

/* The GPUs the process uses, as nvmldl_select takes them: the
 * configuration's, else CUDA_VISIBLE_DEVICES's (UUIDs name the same GPU
 * for CUDA and NVML; an index is CUDA's, which is NVML's only in PCI bus
 * order: said once), else NULL for every GPU. *none: the process sees no
 * GPU (CUDA_VISIBLE_DEVICES is empty or -1). */
static const char *gpus_of(const flps_client_config *cfg, int *none, int say)
{
    const char *v = cfg->gpus, *order;

    *none = 0;
    if (v != NULL)
        return v;
    v = getenv("CUDA_VISIBLE_DEVICES");
    if (v == NULL)
        return NULL;
    if (v[0] == '\0' || strcmp(v, "-1") == 0) {
        *none = 1;
        return NULL;
    }
    order = getenv("CUDA_DEVICE_ORDER");
    if (say && strstr(v, "GPU-") != v &&
        (order == NULL || strcmp(order, "PCI_BUS_ID") != 0))
        log_info("energy: CUDA_VISIBLE_DEVICES=%.64s names GPUs by CUDA's "
                 "index, taken as NVML's (the same GPUs when "
                 "CUDA_DEVICE_ORDER=PCI_BUS_ID; UUIDs are always right)",
                 v);
    return v;
}

/* The counters: the GPUs of gpus and the CPU packages. A GPU list NVML
 * does not know leaves the GPUs out, and why says so. */
static flps_err open_counters(cenergy *ce, const char *gpus, int no_gpu)
{
    energy_opts o = {0};
    char err[CE_WHY_MAX];
    flps_err rc;

    o.gpus = gpus;
    o.sources = no_gpu ? ENERGY_SOURCE_CPU : ENERGY_SOURCE_ALL;
    rc = energy_open(&o, &ce->e, err, sizeof(err));
    if (rc == FLPS_EINVAL) {
        snprintf(ce->why, sizeof(ce->why), "%s", err);
        o.sources = ENERGY_SOURCE_CPU;
        rc = energy_open(&o, &ce->e, err, sizeof(err));
    }
    if (rc != FLPS_OK)
        return rc;
    if (energy_count(ce->e) == 0 && ce->why[0] == '\0')
        snprintf(ce->why, sizeof(ce->why), "%s", energy_why(ce->e));
    energy_meter_init(&ce->m, ce->e, 0, 0);
    return FLPS_OK;
}

static size_t gpu_devices(const energy *e)
{
    size_t n = 0;

    for (size_t i = 0; i < energy_count(e); i++)
        n += energy_device_at(e, i)->kind == ENERGY_KIND_GPU;
    return n;
}

/* The clocks refused: the job runs at the default clock, said once. */
static void refuse(cenergy *ce, const char *msg)
{
    char line[CE_WHY_MAX];

    snprintf(line, sizeof(line), "%s", msg);
    log_warn("%s", line);
    snprintf(ce->why, sizeof(ce->why), "%s", line);
    ce->refused = 1;
    ce->auto_on = 0;
    ce->mhz = 0;
}

/* Set mhz (0: restore the default). 1 when it holds. */
static int set_clock(cenergy *ce, unsigned mhz)
{
    char msg[CE_WHY_MAX];
    unsigned got = 0;

    if (mhz == 0) {
        if (gpuclock_restore(ce->g, msg, sizeof(msg)) != FLPS_OK)
            log_warn("gpu_clock: %s", msg);
        ce->mhz = 0;
        return 1;
    }
    if (gpuclock_set(ce->g, mhz, &got, msg, sizeof(msg)) != FLPS_OK) {
        refuse(ce, msg);
        return 0;
    }
    ce->mhz = got;
    return 1;
}

/* auto: its candidates and the first of them. Needs the GPUs' energy. */
static void start_auto(cenergy *ce)
{
    unsigned cand[GPUCLOCK_AUTO_MAX], mhz = 0;
    const unsigned *supported;
    size_t n, ncand;
    char line[CE_WHY_MAX];

    if (gpu_devices(ce->e) == 0) {
        snprintf(line, sizeof(line),
                 "gpu_clock: auto measures the GPUs' energy, and %.400s: "
                 "running at the default clock",
                 ce->why[0] ? ce->why : "no GPU reports it");
        refuse(ce, line);
        return;
    }
    if (gpuclock_supported(ce->g, &supported, &n) != FLPS_OK) {
        refuse(ce, "gpu_clock: auto: NVML lists no supported clock for the "
                   "GPU: running at the default clock");
        return;
    }
    ncand =
        gpuclock_auto_candidates(supported, n, GPUCLOCK_AUTO_CANDIDATES, cand);
    /* Per clock one window is discarded (the change, the ramp) and one
     * measured. */
    gpuclock_auto_init(&ce->a, cand, ncand, ce->slowdown, 1, 1);
    ce->auto_on = gpuclock_auto_begin(&ce->a, &mhz) == GPUCLOCK_AUTO_SET;
    if (ce->auto_on && set_clock(ce, mhz))
        log_info("gpu_clock: auto tries %zu clocks from %u MHz down, within "
                 "%.3g%% of the fastest",
                 ncand, mhz, ce->slowdown * 100);
}

/* The clock: default leaves it; max and MHZ set it now; auto starts its
 * walk. A refusal is said once and the job runs on. */
static flps_err open_clock(cenergy *ce, const flps_client_config *cfg,
                           const char *gpus, int no_gpu)
{
    const char *clock = env_or(cfg->gpu_clock, "FLPS_GPU_CLOCK");
    const char *slow =
        env_or(cfg->gpu_clock_slowdown, "FLPS_GPU_CLOCK_SLOWDOWN");
    gpuclock_opts go = {0};
    char err[CE_WHY_MAX];
    unsigned got = 0;
    flps_err rc;

    ce->slowdown = GPUCLOCK_SLOWDOWN_DEFAULT;
    if ((clock != NULL &&
         gpuclock_parse(clock, &ce->spec, err, sizeof(err)) != FLPS_OK) ||
        (slow != NULL && gpuclock_parse_slowdown(slow, &ce->slowdown, err,
                                                 sizeof(err)) != FLPS_OK)) {
        log_error("%s%s", err,
                  cfg->gpu_clock == NULL ? " (from FLPS_GPU_CLOCK*)" : "");
        return FLPS_EINVAL;
    }
    if (ce->spec.mode == GPUCLOCK_DEFAULT)
        return FLPS_OK;
    if (no_gpu) {
        refuse(ce, "gpu_clock: this process sees no GPU "
                   "(CUDA_VISIBLE_DEVICES): running at the default clock");
        return FLPS_OK;
    }
    go.gpus = gpus;
    go.record_path = env_or(cfg->gpu_clock_record, "FLPS_GPU_CLOCK_RECORD");
    rc = gpuclock_open(&go, &ce->g, err, sizeof(err));
    if (rc == FLPS_EINVAL) {
        snprintf(ce->why, sizeof(ce->why), "gpu_clock: %.480s", err);
        refuse(ce, ce->why);
        return FLPS_OK;
    }
    if (rc != FLPS_OK)
        return rc;
    if (ce->spec.mode == GPUCLOCK_AUTO) {
        start_auto(ce);
        return FLPS_OK;
    }
    if (gpuclock_apply(ce->g, &ce->spec, &got, err, sizeof(err)) != FLPS_OK)
        refuse(ce, err);
    else
        ce->mhz = got;
    return FLPS_OK;
}

/* Once per process: what is metered, or the one line why nothing is. */
static void say_once(const cenergy *ce)
{
    char desc[1024];
    const char *why = ce->why[0] ? ce->why : energy_why(ce->e);

    if (atomic_exchange(&said, 1))
        return;
    if (energy_count(ce->e) == 0)
        log_info("energy: %s", why);
    else /* and what is missing: a GPU list NVML does not know, no RAPL */
        log_info("energy: metering %s%s%s",
                 energy_describe(ce->e, desc, sizeof(desc)), why[0] ? "; " : "",
                 why);
}

flps_err client_energy_open(flps_client *c, const flps_client_config *cfg)
{
    cenergy *ce = flps_calloc(1, sizeof(*ce));
    const char *gpus;
    int expected = 0, no_gpu = 0;
    flps_err rc;

    if (ce == NULL)
        return FLPS_ENOMEM;
    c->energy = ce;
    ce->spec.mode = GPUCLOCK_DEFAULT;
    pthread_once(&atfork_once, set_atfork);
    if (!atomic_compare_exchange_strong(&claimed, &expected, 1)) {
        snprintf(ce->why, sizeof(ce->why),
                 "another client of this process meters its energy");
        return FLPS_OK;
    }
    ce->owner = 1;
    gpus = gpus_of(cfg, &no_gpu, !atomic_load(&said));
    rc = open_counters(ce, gpus, no_gpu);
    if (rc != FLPS_OK)
        return rc; /* the client's destroy closes what was opened */
    say_once(ce);  /* before a refused clock's line takes why's place */
    return open_clock(ce, cfg, gpus, no_gpu);
}

/* The metric: what each device used since the last report (its series
 * from the first reading on, at 0). */
static void report_devices(cenergy *ce)
{
    for (size_t i = 0; i < energy_count(ce->e); i++) {
        double d = ce->m.j0[i] - ce->reported[i];

        client_metrics_energy_add(energy_device_at(ce->e, i)->name,
                                  d > 0 ? d : 0);
        ce->reported[i] = ce->m.j0[i];
    }
}

/* auto took a window: wait, or move to the next clock (the window that
 * opens there starts at it), or keep its choice. */
static void feed_auto(cenergy *ce, const energy_window *w, uint64_t done)
{
    unsigned mhz = 0;
    gpuclock_auto_action act = gpuclock_auto_feed(&ce->a, w->seconds_per_iter,
                                                  w->gpu_joules_per_iter, &mhz);

    if (act == GPUCLOCK_AUTO_WAIT)
        return;
    if (ce->a.nsamples > 0) {
        const gpuclock_sample *s = &ce->a.samples[ce->a.nsamples - 1];

        log_info("gpu_clock: auto measured %u MHz: %.4g s and %.4g J (GPUs) "
                 "per iteration",
                 s->mhz, s->s_per_iter, s->j_per_iter);
    }
    if (!set_clock(ce, mhz))
        return; /* refused mid-way: restored, said, default from now */
    energy_meter_start(&ce->m, done);
    if (act != GPUCLOCK_AUTO_DONE)
        return;
    ce->auto_on = 0;
    if (mhz == 0)
        log_warn("gpu_clock: auto measured no valid window: running at the "
                 "default clock");
    else
        log_info("gpu_clock: auto chose %u MHz (of %zu clocks measured, the "
                 "lowest energy per iteration within %.3g%% of the fastest)",
                 mhz, ce->a.nsamples, ce->slowdown * 100);
}

void client_energy_at(flps_client *c, uint64_t done)
{
    cenergy *ce = c->energy;

    if (ce == NULL || ce->e == NULL || energy_count(ce->e) == 0)
        return;
    if (ce->ticking && done <= ce->last_done)
        return;
    ce->last_done = done;
    if (!ce->ticking) {
        energy_meter_start(&ce->m, done);
        ce->ticking = 1;
        ce->from0 = done;
        ce->t0 = ce->m.t0;
        memcpy(ce->j0, ce->m.j0, sizeof(ce->j0));
        memcpy(ce->reported, ce->m.j0, sizeof(ce->reported));
        report_devices(ce);
        return;
    }
    if (!energy_meter_tick(&ce->m, done))
        return;
    report_devices(ce);
    if (ce->auto_on)
        feed_auto(ce, energy_meter_window(&ce->m), done);
}

void client_energy_close(flps_client *c)
{
    cenergy *ce = c->energy;

    if (ce == NULL)
        return;
    if (ce->auto_on)
        log_warn("gpu_clock: auto had measured %zu of %zu clocks when training "
                 "ended: no choice made (it needs about %zu windows of at "
                 "least %d iterations and %.1f s)",
                 ce->a.nsamples, ce->a.ncand, 2 * ce->a.ncand,
                 ENERGY_METER_MIN_ITERS, ENERGY_METER_MIN_SECONDS);
    gpuclock_close(ce->g); /* restores what was changed, and says a failure */
    energy_close(ce->e);
    if (ce->owner)
        atomic_store(&claimed, 0);
    flps_free(ce);
    c->energy = NULL;
}

/* The NVML indices of the GPUs metered, "0,1". */
static void gpu_list_of(const energy *e, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < energy_count(e) && used + 12 < len; i++) {
        const energy_device *d = energy_device_at(e, i);

        if (d->kind == ENERGY_KIND_GPU)
            used += (size_t)snprintf(out + used, len - used, "%s%u",
                                     used ? "," : "", d->index);
    }
}

/* "counter", "power-integral" or both, of the devices metered. */
static void method_of(const energy *e, char *out, size_t len)
{
    int has[2] = {0, 0};

    for (size_t i = 0; i < energy_count(e); i++)
        has[energy_device_at(e, i)->method == ENERGY_METHOD_POWER_INTEGRAL] = 1;
    snprintf(out, len, "%s%s%s", has[0] ? "counter" : "",
             has[0] && has[1] ? "+" : "", has[1] ? "power-integral" : "");
}

/* The totals from the meter's first reading to its last (every window,
 * and what lay between windows when auto restarted one). */
static void totals(const cenergy *ce, flps_energy *o)
{
    const energy *e = ce->e;

    o->devices = (uint32_t)energy_count(e);
    o->gpus = (uint32_t)gpu_devices(e);
    method_of(e, o->method, sizeof(o->method));
    gpu_list_of(e, o->gpu_list, sizeof(o->gpu_list));
    if (!ce->ticking || ce->m.from <= ce->from0)
        return;
    o->iterations = ce->m.from - ce->from0;
    o->seconds = ce->m.t0 - ce->t0;
    for (size_t i = 0; i < energy_count(e); i++) {
        double j = ce->m.j0[i] - ce->j0[i];

        if (energy_device_at(e, i)->kind == ENERGY_KIND_GPU)
            o->gpu_joules += j;
        else
            o->cpu_joules += j;
    }
    o->joules = o->gpu_joules + o->cpu_joules;
    o->joules_per_iteration = o->joules / (double)o->iterations;
    o->gpu_joules_per_iteration = o->gpu_joules / (double)o->iterations;
    o->cpu_joules_per_iteration = o->cpu_joules / (double)o->iterations;
}

flps_err flps_client_energy(const flps_client *c, flps_energy *out, size_t size)
{
    const cenergy *ce;
    flps_energy o;

    if (c == NULL || out == NULL || size < offsetof(flps_energy, gpu_clock))
        return FLPS_EINVAL;
    memset(&o, 0, sizeof(o));
    ce = c->energy;
    if (ce != NULL) {
        if (ce->e != NULL)
            totals(ce, &o);
        gpuclock_spec_format(&ce->spec, o.gpu_clock, sizeof(o.gpu_clock));
        o.gpu_clock_mhz = ce->mhz;
        o.gpu_clock_chosen = !ce->auto_on;
        snprintf(o.why, sizeof(o.why), "%s", ce->why);
    }
    memcpy(out, &o, size < sizeof(o) ? size : sizeof(o));
    return FLPS_OK;
}
