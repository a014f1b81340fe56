/* A stand-in for a GPU training program, run by flrun as a command: job's
 * worker in the energy tests: a libflps client of one small tensor whose
 * every iteration takes the time and the energy a GPU step would at the
 * clock the NVML stub (tests/fakes/nvml_stub.c) runs now. The step is
 * memory-bound down to KNEE_MHZ (its time does not change with the clock)
 * and compute-bound below (slower by a third of ITER_S per 30 MHz): time
 * ITER_S at or above the knee, slept. Energy: the stub's power at the
 * clock over the same time, added to its counter (flps_nvml_stub_advance)
 * and nothing else (the state has no realtime), so joules per iteration
 * follow the curve exactly while time per iteration is the real clock's.
 * At the end it prints its done event with what libflps metered
 * (services/event.h: event_done_energy), as flworker does. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "flps.h"
#include "services/event.h"

#define ITER_S 0.04     /* a step at or above the knee */
#define KNEE_MHZ 1650.0 /* below it the step is compute-bound */
#define NUMEL 16

typedef struct stub {
    int (*clock)(void *dev, int type, unsigned *mhz);
    void (*advance)(double seconds);
    void *dev;
    unsigned max;
} stub;

/* The stub the process's libflps opens ($FLPS_NVML_LIBRARY) and GPU 0. */
static int stub_open(stub *s)
{
    const char *path = getenv("FLPS_NVML_LIBRARY");
    void *h = path != NULL ? dlopen(path, RTLD_NOW) : NULL;
    int (*init)(void), (*by_index)(unsigned, void **);
    void *sym[4];

    if (h == NULL)
        return 0;
    sym[0] = dlsym(h, "nvmlInit_v2");
    sym[1] = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    sym[2] = dlsym(h, "nvmlDeviceGetClockInfo");
    sym[3] = dlsym(h, "flps_nvml_stub_advance");
    if (sym[0] == NULL || sym[1] == NULL || sym[2] == NULL || sym[3] == NULL)
        return 0;
    memcpy(&init, &sym[0], sizeof(init));
    memcpy(&by_index, &sym[1], sizeof(by_index));
    memcpy(&s->clock, &sym[2], sizeof(s->clock));
    memcpy(&s->advance, &sym[3], sizeof(s->advance));
    if (init() != 0 || by_index(0, &s->dev) != 0)
        return 0;
    /* Nothing is set yet: the GPU runs at its highest clock. */
    return s->clock(s->dev, 0, &s->max) == 0 && s->max > 0;
}

/* One step at the stub's clock now: its energy, then its time. */
static void step(const stub *s)
{
    unsigned mhz = s->max;
    double t;
    struct timespec ts;

    s->clock(s->dev, 0, &mhz);
    t = ITER_S;
    if (mhz < KNEE_MHZ)
        t *= 1 + (KNEE_MHZ - mhz) / 90.0;
    s->advance(t);
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static void print_done(flps_client *c, uint32_t rank, uint64_t iters, double t0)
{
    event ev = {.kind = EVENT_DONE};
    event_done *d = &ev.done;
    flps_client_stats st;
    flps_energy en;

    flps_client_get_stats(c, &st);
    d->rank = rank;
    d->iterations = iters;
    d->bytes_sent = st.bytes_sent;
    d->bytes_received = st.bytes_received;
    d->dense_bytes = st.dense_bytes;
    d->resends = st.resends;
    if (flps_client_energy(c, &en, sizeof(en)) == FLPS_OK)
        event_done_energy(d, &en);
    d->seconds = flps_mono_s() - t0;
    event_write(stdout, &ev);
}

int main(void)
{
    const char *servers[16], *iters_env = getenv("FLPS_ITERATIONS");
    char list[4096];
    float w[NUMEL] = {0}, g[NUMEL] = {0};
    flps_tensor t = {"w", NUMEL, w};
    flps_client_config cfg;
    flps_client *c = NULL;
    uint32_t n = 0;
    uint64_t iters = iters_env != NULL ? strtoull(iters_env, NULL, 10) : 0;
    double t0;
    stub s;

    if (!stub_open(&s) || getenv("FLPS_SERVERS") == NULL) {
        fprintf(stderr, "clock_worker: no NVML stub or no FLPS_SERVERS\n");
        return 1;
    }
    snprintf(list, sizeof(list), "%s", getenv("FLPS_SERVERS"));
    for (char *p = strtok(list, ","); p != NULL && n < 16;
         p = strtok(NULL, ","))
        servers[n++] = p;
    flps_client_config_init(&cfg);
    cfg.job = getenv("FLPS_JOB");
    cfg.rank = (uint32_t)atoi(getenv("FLPS_RANK"));
    cfg.workers = (uint32_t)atoi(getenv("FLPS_WORKERS"));
    cfg.servers = servers;
    cfg.nservers = n;
    cfg.tensors = &t;
    cfg.ntensors = 1;
    cfg.lr = 0.01;
    cfg.iterations = iters;
    /* gpu_clock and its record come from FLPS_GPU_CLOCK*: the client's. */
    if (flps_client_create_config(&cfg, &c) != FLPS_OK ||
        flps_client_init(c) != FLPS_OK)
        return 1;
    t0 = flps_mono_s();
    for (uint64_t it = 0; it < iters; it++) {
        if (flps_client_push(c, 0, g, it) != FLPS_OK)
            return 1;
        step(&s);
        if (flps_client_wait(c, it) != FLPS_OK)
            return 1;
    }
    print_done(c, cfg.rank, iters, t0);
    flps_client_destroy(c);
    return 0;
}
