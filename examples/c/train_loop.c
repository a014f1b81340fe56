/* train_loop: a whole training job on libflps in one small program.
 *
 * It fits a linear least-squares model y = x.w + b to synthetic data made
 * from a seed with known true weights, pushing each layer's gradient to the
 * flps shards (compressed with top-k and error feedback, or dense) and
 * applying the shards' updates to its replica, then checks the learned
 * weights against the true ones. Only include/flps.h is used.
 *
 * Build against an installed libflps:
 *   cc train_loop.c $(pkg-config --cflags --libs flps) -lm
 * or with CMake: find_package(flps REQUIRED) and
 *   target_link_libraries(train_loop PRIVATE flps::flps)
 * (see CMakeLists.txt beside this file).
 *
 * Run against two shards of job "example" (flps --job example --shard I
 * --shards 2 prints the endpoint it listens on):
 *   ./train_loop --servers tcp://127.0.0.1:5555,tcp://127.0.0.1:5556
 * With W workers, start W copies with --workers W and --rank 0..W-1.
 * Exit status: 0 when the weights are within the tolerance, else 1. */
#include <flps.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURES 32 /* the weight layer "w" */
#define SAMPLES 512 /* per worker */
#define BATCH 32    /* per iteration */
#define MAX_SERVERS 16

typedef struct options {
    const char *servers[MAX_SERVERS];
    uint32_t nservers;
    char server_list[1024]; /* --servers, cut at the commas */
    const char *job;
    const char *compression;
    uint32_t rank, workers;
    uint64_t iterations, seed;
    double lr, tolerance;
} options;

/* ---- synthetic data ---- */

/* splitmix64: a tiny, good generator, so every worker can rebuild the same
 * true weights from the seed without a library. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float next_unit(uint64_t *s)
{
    return (float)((double)(next_u64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

typedef struct dataset {
    float x[SAMPLES][FEATURES];
    float y[SAMPLES];
    float true_w[FEATURES];
    float true_b;
} dataset;

/* The true weights depend on the seed only; the samples also on the rank,
 * so each worker holds its own slice of the data. */
static void make_data(dataset *d, uint64_t seed, uint32_t rank)
{
    uint64_t s = seed;

    for (int j = 0; j < FEATURES; j++)
        d->true_w[j] = next_unit(&s);
    d->true_b = 0.5f * next_unit(&s);
    s = seed ^ (0x5851f42d4c957f2dull * (rank + 1));
    for (int i = 0; i < SAMPLES; i++) {
        double y = d->true_b;
        for (int j = 0; j < FEATURES; j++) {
            d->x[i][j] = next_unit(&s);
            y += (double)d->x[i][j] * d->true_w[j];
        }
        d->y[i] = (float)y;
    }
}

/* ---- the model ---- */

static double predict(const float *w, float b, const float *x)
{
    double p = b;

    for (int j = 0; j < FEATURES; j++)
        p += (double)w[j] * x[j];
    return p;
}

/* Mean squared error / 2 over the worker's whole slice. */
static double loss(const dataset *d, const float *w, float b)
{
    double sum = 0;

    for (int i = 0; i < SAMPLES; i++) {
        double e = predict(w, b, d->x[i]) - d->y[i];
        sum += e * e;
    }
    return sum / (2.0 * SAMPLES);
}

/* Gradient of the batch loss starting at sample `first`. */
static void gradient(const dataset *d, const float *w, float b, int first,
                     float *gw, float *gb)
{
    double acc[FEATURES] = {0}, accb = 0;

    for (int k = 0; k < BATCH; k++) {
        const int i = (first + k) % SAMPLES;
        const double e = predict(w, b, d->x[i]) - d->y[i];
        for (int j = 0; j < FEATURES; j++)
            acc[j] += e * d->x[i][j];
        accb += e;
    }
    for (int j = 0; j < FEATURES; j++)
        gw[j] = (float)(acc[j] / BATCH);
    *gb = (float)(accb / BATCH);
}

/* ---- the library's hooks ---- */

/* Route the library's log lines to stderr with our own prefix, dropping
 * debug lines: a host program decides where they go. */
static void log_line(void *arg, flps_log_level level, const char *line)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    const char *who = arg;

    if (level >= FLPS_LOG_INFO && level <= FLPS_LOG_ERROR)
        fprintf(stderr, "[%s] flps %s: %s\n", who, names[level], line);
}

/* The header this program was compiled with and the library it runs with
 * must agree on the major version (the soname changes with it). */
static int check_version(void)
{
    int major = -1, minor = -1, patch = -1;
    const char *v = flps_version();

    printf("flps header %d.%d.%d, library %s\n", FLPS_VERSION_MAJOR,
           FLPS_VERSION_MINOR, FLPS_VERSION_PATCH, v);
    if (sscanf(v, "%d.%d.%d", &major, &minor, &patch) != 3 ||
        major != FLPS_VERSION_MAJOR) {
        fprintf(stderr, "train_loop: built for flps %d.x, loaded %s\n",
                FLPS_VERSION_MAJOR, v);
        return 0;
    }
    if (minor < FLPS_VERSION_MINOR)
        fprintf(stderr, "train_loop: the library is older than the header; "
                        "newer calls may be missing\n");
    return 1;
}

/* ---- command line ---- */

static void usage(void)
{
    fprintf(stderr,
            "usage: train_loop --servers EP[,EP...] [--rank R] [--workers W]\n"
            "                  [--job NAME] [--compression topk:0.1|dense]\n"
            "                  [--iterations N] [--seed S] [--lr LR]\n"
            "                  [--tolerance T]\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s == NULL || *s == '\0' || *s == '-')
        return 0;
    v = strtoull(s, &end, 10);
    if (*end != '\0')
        return 0;
    *out = v;
    return 1;
}

static int parse_double(const char *s, double *out)
{
    char *end;

    if (s == NULL || *s == '\0')
        return 0;
    *out = strtod(s, &end);
    return *end == '\0' && isfinite(*out) && *out > 0;
}

static int split_servers(options *o, const char *list)
{
    char *p;

    if (list == NULL || strlen(list) >= sizeof(o->server_list))
        return 0;
    strcpy(o->server_list, list);
    o->nservers = 0;
    for (p = strtok(o->server_list, ","); p != NULL; p = strtok(NULL, ",")) {
        if (o->nservers == MAX_SERVERS)
            return 0;
        o->servers[o->nservers++] = p;
    }
    return o->nservers > 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof(*o));
    o->job = "example";
    o->compression = "topk:0.1";
    o->workers = 1;
    o->iterations = 400;
    o->seed = 1;
    o->lr = 0.1;
    o->tolerance = 0.01;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n = 0;
        int ok;
        if (strcmp(a, "--servers") == 0) {
            ok = split_servers(o, v);
        } else if (strcmp(a, "--rank") == 0) {
            ok = parse_u64(v, &n) && n < UINT32_MAX;
            o->rank = (uint32_t)n;
        } else if (strcmp(a, "--workers") == 0) {
            ok = parse_u64(v, &n) && n > 0 && n < UINT32_MAX;
            o->workers = (uint32_t)n;
        } else if (strcmp(a, "--job") == 0) {
            ok = v != NULL;
            o->job = v;
        } else if (strcmp(a, "--compression") == 0) {
            ok = v != NULL;
            o->compression = v;
        } else if (strcmp(a, "--iterations") == 0) {
            ok = parse_u64(v, &o->iterations) && o->iterations > 0;
        } else if (strcmp(a, "--seed") == 0) {
            ok = parse_u64(v, &o->seed);
        } else if (strcmp(a, "--lr") == 0) {
            ok = parse_double(v, &o->lr);
        } else if (strcmp(a, "--tolerance") == 0) {
            ok = parse_double(v, &o->tolerance);
        } else {
            ok = 0;
        }
        if (!ok) {
            fprintf(stderr, "train_loop: bad or missing value for %s\n", a);
            return 0;
        }
        i++; /* every option takes a value */
    }
    if (o->nservers == 0 || o->rank >= o->workers) {
        fprintf(stderr, "train_loop: --servers is required and --rank must "
                        "be below --workers\n");
        return 0;
    }
    return 1;
}

/* ---- training ---- */

static int fail(flps_client *c, const char *what, flps_err rc)
{
    fprintf(stderr, "train_loop: %s: %s (%s)%s%s\n", what, flps_strerror(rc),
            flps_errname(rc), c ? ": " : "",
            c ? flps_client_last_error(c) : "");
    flps_client_destroy(c);
    return 1;
}

int main(int argc, char **argv)
{
    static dataset data;            /* 64 KiB: not on the stack */
    float w[FEATURES] = {0}, b = 0; /* the replica, rank 0's initial model */
    float gw[FEATURES], gb;
    char who[32];
    options o;
    flps_client *c = NULL;
    flps_client_stats st;
    flps_err rc;
    double err = 0;

    if (!parse_args(argc, argv, &o)) {
        usage();
        return 1;
    }
    if (!check_version())
        return 1;
    snprintf(who, sizeof(who), "rank %u", o.rank);
    flps_set_logger(log_line, who);
    make_data(&data, o.seed, o.rank);

    /* The layout: two tensors, pushed last layer first each iteration.
     * Small parts spread even this small model over every shard. */
    flps_tensor tensors[2] = {
        {.name = "w", .numel = FEATURES, .data = w},
        {.name = "b", .numel = 1, .data = &b},
    };
    flps_client_config cfg;

    /* The configuration starts from the library's defaults (init also
     * records the struct's size, so a newer libflps reads it right); set
     * what this job needs, and settings added later need no new call. */
    rc = flps_client_config_init(&cfg);
    if (rc != FLPS_OK)
        return fail(NULL, "cannot make the configuration", rc);
    cfg.job = o.job;
    cfg.rank = o.rank;
    cfg.workers = o.workers;
    cfg.servers = o.servers;
    cfg.nservers = o.nservers;
    cfg.tensors = tensors;
    cfg.ntensors = 2;
    cfg.part_size = 8;
    cfg.compression = o.compression;
    cfg.lr = o.lr;
    cfg.iterations = o.iterations;
    cfg.momentum = 0.5;
    cfg.deadline_ms = 30000;
    rc = flps_client_create_config(&cfg, &c);
    if (rc != FLPS_OK)
        return fail(NULL, "cannot join the job", rc);
    rc = flps_client_init(c);
    if (rc != FLPS_OK)
        return fail(c, "cannot fetch the initial model", rc);
    printf("rank %u of %u, %u shards, compression %s, initial loss %.6f\n",
           o.rank, o.workers, o.nservers, o.compression, loss(&data, w, b));

    /* A restarted worker carries on where the shards are. */
    for (uint64_t it = flps_client_resume_iteration(c); it < o.iterations;
         it++) {
        gradient(&data, w, b, (int)((it * BATCH) % SAMPLES), gw, &gb);
        rc = flps_client_push(c, 1, &gb, it);
        if (rc == FLPS_OK)
            rc = flps_client_push(c, 0, gw, it);
        if (rc == FLPS_OK)
            rc = flps_client_wait(c, it); /* the update is in w and b now */
        if (rc != FLPS_OK)
            return fail(c, "training step failed", rc);
        if (it % 50 == 0 || it + 1 == o.iterations)
            printf("iteration %llu loss %.6f\n", (unsigned long long)it,
                   loss(&data, w, b));
    }

    flps_client_get_stats(c, &st);
    printf("sent %llu bytes (%.1f%% of dense), %llu resends\n",
           (unsigned long long)st.bytes_sent,
           st.dense_bytes ? 100.0 * st.bytes_sent / st.dense_bytes : 100.0,
           (unsigned long long)st.resends);
    flps_client_destroy(c);
    flps_set_logger(NULL, NULL); /* who is about to go out of scope */

    for (int j = 0; j < FEATURES; j++)
        err = fmax(err, fabs((double)w[j] - data.true_w[j]));
    err = fmax(err, fabs((double)b - data.true_b));
    printf("weight error %.6f (tolerance %g): %s\n", err, o.tolerance,
           err <= o.tolerance ? "ok" : "too large");
    return err <= o.tolerance ? 0 : 1;
}
