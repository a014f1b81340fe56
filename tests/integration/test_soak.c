/* The soak test: 32 clients push sparse gradients to 2 real flps shards
 * (asynchronous mode, top-k at 1%, write-ahead log on) for a bounded time.
 * Afterwards the shards' parameters must equal the exact sum of everything
 * acknowledged, bit for bit, and the shards' memory must be flat.
 *
 * Exactness: every gradient is a few dyadic values (multiples of 1/4) at
 * positions no more numerous than the codec's k per part, so top-k with
 * error feedback sends exactly them (the residual stays zero), and with
 * lr = workers the shard's scale lr/workers is 1: every sum is exact in
 * float whatever the order of the pushes, and the reference is the plain
 * sum of what each client pushed and saw acknowledged.
 *
 * FLPS_SOAK_SECONDS sets how long the clients push (default 20). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flps.h"
#include "spawn.h"

#define NC 32
#define NT 2
#define PART 16384
#define DENSITY 0.01
/* Nonzeros per part and push: below k = floor(0.01 * 16384) = 163, and
 * below k of the smallest part (the last part of t1). */
#define NNZ 40

static const size_t numel[NT] = {98304, 40000};

typedef struct client {
    int rank;
    const char *const *servers;
    double seconds;
    float *data[NT];
    /* The exact sum of every gradient this client pushed whose push the
     * shards acknowledged (flps_client_wait returned FLPS_OK). */
    float *sent[NT];
    uint64_t iterations;
    flps_err err;
    char why[256];
} client;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));

    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Rank r's gradient of tensor t at iteration it: NNZ values in each part,
 * each a nonzero multiple of 1/4 in [-2, 2]. */
static void gradient(int r, int t, uint64_t it, float *g)
{
    uint64_t s = ((uint64_t)r << 40) ^ ((uint64_t)t << 32) ^ it;

    memset(g, 0, numel[t] * sizeof(float));
    for (size_t lo = 0; lo < numel[t]; lo += PART) {
        size_t len = numel[t] - lo < PART ? numel[t] - lo : PART;
        for (int j = 0; j < NNZ; j++) {
            size_t at = lo + splitmix(&s) % len;
            int q = (int)(splitmix(&s) % 8) + 1; /* 1..8 quarters */
            g[at] = (splitmix(&s) & 1 ? 0.25f : -0.25f) * (float)q;
        }
    }
}

static flps_client_config config(client *c, flps_tensor *t)
{
    flps_client_config cfg;

    for (int k = 0; k < NT; k++) {
        t[k].name = k == 0 ? "w0" : "w1";
        t[k].numel = numel[k];
        t[k].data = c->data[k];
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = "soak";
    cfg.rank = (uint32_t)c->rank;
    cfg.workers = NC;
    cfg.servers = c->servers;
    cfg.nservers = 2;
    cfg.tensors = t;
    cfg.ntensors = NT;
    cfg.part_size = PART;
    cfg.async = 1;
    cfg.compression = "topk:0.01";
    cfg.lr = NC; /* the shard's scale lr / workers is exactly 1 */
    cfg.iterations = 1000000;
    cfg.momentum = 0;
    cfg.deadline_ms = 60000;
    return cfg;
}

static void *client_main(void *arg)
{
    client *c = arg;
    flps_tensor t[NT];
    flps_client_config cfg = config(c, t);
    flps_client *fc = NULL;
    float *g[NT];
    double end;

    for (int k = 0; k < NT; k++)
        g[k] = malloc(numel[k] * sizeof(float));
    c->err = flps_client_create(&cfg, &fc);
    if (c->err == FLPS_OK)
        c->err = flps_client_init(fc);
    end = now_s() + c->seconds;
    for (uint64_t it = 0; c->err == FLPS_OK && now_s() < end; it++) {
        for (int k = 0; k < NT && c->err == FLPS_OK; k++) {
            gradient(c->rank, k, it, g[k]);
            c->err = flps_client_push(fc, (uint32_t)k, g[k], it);
        }
        if (c->err == FLPS_OK)
            c->err = flps_client_wait(fc, it);
        if (c->err != FLPS_OK)
            break;
        /* Acknowledged: the shards applied every part of it. */
        for (int k = 0; k < NT; k++)
            for (size_t i = 0; i < numel[k]; i++)
                c->sent[k][i] += g[k][i];
        c->iterations++;
    }
    if (c->err != FLPS_OK && fc != NULL)
        snprintf(c->why, sizeof(c->why), "%s", flps_client_last_error(fc));
    flps_client_destroy(fc);
    for (int k = 0; k < NT; k++)
        free(g[k]);
    return NULL;
}

/* Resident memory of pid in KiB, from /proc. */
static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

Test(soak, thirty_two_clients_leave_the_exact_sum_and_flat_shard_memory,
     .timeout = 300)
{
    const char *env = getenv("FLPS_SOAK_SECONDS");
    const double seconds = env != NULL ? atof(env) : 20.0;
    char dir[] = "/tmp/flps-soak-XXXXXX", ck[96], log[2][96];
    test_shard sh[2];
    const char *servers[2];
    static client cl[NC];
    pthread_t th[NC];
    long rss_early[2], rss_late[2];
    uint64_t total = 0, least = UINT64_MAX;
    double t0;

    cr_assert_gt(seconds, 0, "FLPS_SOAK_SECONDS must be a positive number");
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer keeps freed memory in a quarantine of 256 MiB, which
     * would look like growth: the shards run with a small one. */
    {
        const char *old = getenv("ASAN_OPTIONS");
        char opts[512];

        snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=1",
                 old != NULL ? old : "", old != NULL && *old ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
    }
#endif
    cr_assert_not_null(mkdtemp(dir));
    snprintf(ck, sizeof(ck), "%s/ckpt", dir);
    for (int i = 0; i < 2; i++) {
        char idx[4];
        const char *a[] = {"--job",    "soak", "--shard",          idx,
                           "--shards", "2",    "--checkpoint-dir", ck,
                           NULL};

        snprintf(idx, sizeof(idx), "%d", i);
        snprintf(log[i], sizeof(log[i]), "%s/s%d.log", dir, i);
        cr_assert_eq(test_shard_start(&sh[i], log[i], a), 0,
                     "shard %d did not start; see %s", i, log[i]);
        servers[i] = sh[i].endpoint;
    }
    for (int r = 0; r < NC; r++) {
        cl[r].rank = r;
        cl[r].servers = servers;
        cl[r].seconds = seconds;
        for (int k = 0; k < NT; k++) {
            /* Rank 0's replica holds the initial model: zeros. */
            cl[r].data[k] = calloc(numel[k], sizeof(float));
            cl[r].sent[k] = calloc(numel[k], sizeof(float));
            cr_assert(cl[r].data[k] != NULL && cl[r].sent[k] != NULL);
        }
        cr_assert_eq(pthread_create(&th[r], NULL, client_main, &cl[r]), 0);
    }
    /* Memory once every client is pushing (a third in), and at the end. */
    t0 = now_s();
    while (now_s() - t0 < seconds / 3)
        usleep(100000);
    for (int i = 0; i < 2; i++)
        rss_early[i] = rss_kib(sh[i].pid);
    for (int r = 0; r < NC; r++)
        pthread_join(th[r], NULL);
    for (int i = 0; i < 2; i++)
        rss_late[i] = rss_kib(sh[i].pid);

    for (int r = 0; r < NC; r++) {
        cr_assert_eq(cl[r].err, FLPS_OK, "client %d: %s (%s)", r,
                     flps_strerror(cl[r].err), cl[r].why);
        total += cl[r].iterations;
        if (cl[r].iterations < least)
            least = cl[r].iterations;
    }
    cr_assert_gt(least, 2,
                 "every client pushed more than twice (the least "
                 "pushed %llu times)",
                 (unsigned long long)least);

    /* The shards' model, through a new client's pull, against the exact
     * sum: w = 0 - 1 * (sum of every acknowledged gradient). */
    {
        client probe;
        flps_tensor t[NT];
        flps_client_config cfg;
        flps_client *fc = NULL;
        size_t wrong = 0, nonzero = 0;

        memset(&probe, 0, sizeof(probe));
        probe.rank = 1;
        probe.servers = servers;
        for (int k = 0; k < NT; k++)
            probe.data[k] = calloc(numel[k], sizeof(float));
        cfg = config(&probe, t);
        cr_assert_eq(flps_client_create(&cfg, &fc), FLPS_OK);
        cr_assert_eq(flps_client_pull(fc), FLPS_OK, "%s",
                     flps_client_last_error(fc));
        for (int k = 0; k < NT; k++)
            for (size_t i = 0; i < numel[k]; i++) {
                float want = 0;
                for (int r = 0; r < NC; r++)
                    want += cl[r].sent[k][i];
                want = 0.0f - want;
                nonzero += want != 0;
                if (probe.data[k][i] != want && wrong++ < 5)
                    cr_log_error("tensor %d element %zu: %a, the exact sum "
                                 "of the acknowledged pushes is %a",
                                 k, i, (double)probe.data[k][i], (double)want);
            }
        cr_assert_eq(wrong, 0,
                     "%zu parameters differ from the exact sum of what "
                     "was acknowledged",
                     wrong);
        cr_assert_gt(nonzero, 1000, "the pushes moved the model");
        flps_client_destroy(fc);
        for (int k = 0; k < NT; k++)
            free(probe.data[k]);
    }
    /* Flat: from a third in to the end the shards grew by at most 8 MiB
     * or 10%, while they applied thousands of pushes. */
    for (int i = 0; i < 2; i++) {
        long allowed = rss_early[i] / 10 > 8192 ? rss_early[i] / 10 : 8192;
        cr_assert_gt(rss_early[i], 0);
        cr_assert_leq(rss_late[i] - rss_early[i], allowed,
                      "shard %d grew from %ld KiB to %ld KiB during the "
                      "soak",
                      i, rss_early[i], rss_late[i]);
    }
    fprintf(stderr,
            "soak: %d clients, %.0f s, %llu acknowledged pushes of 2 "
            "tensors; shard memory %ld -> %ld KiB and %ld -> %ld KiB\n",
            NC, seconds, (unsigned long long)total, rss_early[0], rss_late[0],
            rss_early[1], rss_late[1]);
    for (int r = 0; r < NC; r++)
        for (int k = 0; k < NT; k++) {
            free(cl[r].data[k]);
            free(cl[r].sent[k]);
        }
    for (int i = 0; i < 2; i++)
        cr_assert(WIFEXITED(test_shard_stop(&sh[i], SIGTERM)),
                  "shard %d did not stop cleanly; see %s", i, log[i]);
}
