/* The C side of bench/bench_python.py: one worker on libflps.so pushing the
 * CNN's layout (conv1, conv2, fc1, fc2 with their biases) to a running
 * shard and waiting, iteration after iteration, timing only the flps calls.
 * Prints one JSON line: {"iters": N, "mean_s": ..., "median_s": ...,
 * "min_s": ...}, the seconds per iteration after K warm-up iterations.
 *
 * Usage: bench_client_loop --server ENDPOINT --job J [--compression SPEC]
 *                          [--iters N] [--warmup K]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_stats.h"
#include "bench/bench_util.h"
#include "common/clock.h"
#include "flps.h"

#define NT 8
#define MAX_ITERS 10000

/* The layout bench_python.py registers too, first layer first. */
static const char *const names[NT] = {
    "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
    "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};
static const size_t numels[NT] = {5 * 5 * 1 * 32, 32,   5 * 5 * 32 * 64, 64,
                                  3136 * 1024,    1024, 1024 * 10,       10};

typedef struct loop_opts {
    const char *server, *job, *compression;
    int iters, warmup;
} loop_opts;

static int parse(int argc, char **argv, loop_opts *o)
{
    char err[160];

    o->compression = "dense";
    o->iters = 20;
    o->warmup = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        int *num = NULL, lo = 0;
        if (strcmp(k, "--server") == 0)
            o->server = v;
        else if (strcmp(k, "--job") == 0)
            o->job = v;
        else if (strcmp(k, "--compression") == 0)
            o->compression = v;
        else if (strcmp(k, "--iters") == 0)
            num = &o->iters, lo = 1;
        else if (strcmp(k, "--warmup") == 0)
            num = &o->warmup;
        else
            return -1;
        if (num != NULL && flps_parse_int(k, v, lo, MAX_ITERS, num, err,
                                          sizeof(err)) != FLPS_OK) {
            fprintf(stderr, "bench_client_loop: %s\n", err);
            return -1;
        }
    }
    return (argc % 2 == 1 && o->server != NULL && o->job != NULL) ? 0 : -1;
}

static int fail(flps_client *c, const char *what, flps_err rc)
{
    fprintf(stderr, "bench_client_loop: %s: %s (%s)\n", what,
            c != NULL && *flps_client_last_error(c) ? flps_client_last_error(c)
                                                    : flps_strerror(rc),
            flps_errname(rc));
    return 1;
}

/* Push every tensor, last layer first, then wait: one iteration. */
static flps_err one_iteration(flps_client *c, float *const *grads, uint64_t it)
{
    flps_err rc = FLPS_OK;

    for (int t = NT - 1; t >= 0 && rc == FLPS_OK; t--)
        rc = flps_client_push(c, (uint32_t)t, grads[t], it);
    return rc == FLPS_OK ? flps_client_wait(c, it) : rc;
}

int main(int argc, char **argv)
{
    float *replica[NT] = {0}, *grads[NT] = {0};
    flps_tensor tensors[NT];
    flps_client_config cfg;
    flps_client *c = NULL;
    loop_opts o;
    double *times = NULL, sum = 0, best = 1e30;
    int status = 1;
    flps_err rc;

    memset(&o, 0, sizeof(o));
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: bench_client_loop --server ENDPOINT --job J "
                        "[--compression SPEC] [--iters N] [--warmup K]\n");
        return 2;
    }
    for (int t = 0; t < NT; t++) {
        replica[t] = calloc(numels[t], sizeof(float));
        grads[t] = malloc(numels[t] * sizeof(float));
        if (replica[t] == NULL || grads[t] == NULL) {
            fprintf(stderr, "bench_client_loop: out of memory\n");
            goto out;
        }
        bench_fill_gaussian(grads[t], numels[t], 7 + (uint64_t)t);
        tensors[t] = (flps_tensor){
            .name = names[t], .numel = numels[t], .data = replica[t]};
    }
    times = calloc((size_t)o.iters, sizeof(double));
    if (times == NULL)
        goto out;
    cfg = (flps_client_config){
        .job = o.job,
        .rank = 0,
        .workers = 1,
        .servers = &o.server,
        .nservers = 1,
        .tensors = tensors,
        .ntensors = NT,
        .compression = o.compression,
        .lr = 0.01,
        .iterations = (uint64_t)(o.warmup + o.iters),
        .deadline_ms = 60000,
    };
    rc = flps_client_create(&cfg, &c);
    if (rc != FLPS_OK) {
        status = fail(NULL, "cannot join the job", rc);
        goto out;
    }
    rc = flps_client_init(c);
    if (rc != FLPS_OK) {
        status = fail(c, "cannot fetch the initial model", rc);
        goto out;
    }
    for (int i = 0; i < o.warmup + o.iters; i++) {
        double t0 = flps_mono_s();
        rc = one_iteration(c, grads, (uint64_t)i);
        if (rc != FLPS_OK) {
            status = fail(c, "iteration failed", rc);
            goto out;
        }
        if (i >= o.warmup)
            times[i - o.warmup] = flps_mono_s() - t0;
    }
    for (int i = 0; i < o.iters; i++) {
        sum += times[i];
        if (times[i] < best)
            best = times[i];
    }
    printf("{\"iters\": %d, \"mean_s\": %.9f, \"median_s\": %.9f, "
           "\"min_s\": %.9f}\n",
           o.iters, sum / o.iters, bench_median(times, (size_t)o.iters), best);
    status = 0;
out:
    flps_client_destroy(c);
    free(times);
    for (int t = 0; t < NT; t++) {
        free(replica[t]);
        free(grads[t]);
    }
    return status;
}
