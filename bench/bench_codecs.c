/* Benchmark of every codec: encode and decode throughput in GB/s of f32
 * input, against memcpy of the same array measured in the same run, on one
 * core. Then the worker's push of a 25M-float layer (issue 13's bars): the
 * encode path of worker/client_push.c driven through compress/ (no client, no
 * transport: a push is error feedback with momentum, the selection and the
 * per-part payloads for topk:0.004; the per-part payloads written from the
 * gradient and the velocity for dense), against a memcpy of the layer.
 * Prints progress, a table, and as its last line one JSON object.
 *
 * Usage: bench_codecs [--n N] [--rounds R]
 */
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "compress/codec.h"
#include "compress/ef.h"

/* The worker-push cases: the layer of issue 13 in the client's default
 * parts. */
#define PUSH_N 25000000u
#define PUSH_PART 65536u
#define PUSH_SPEC "topk:0.004"
#define PUSH_MOMENTUM 0.9f

typedef struct {
    double memcpy_s, topk_s, dense_s; /* medians */
    double dense_reused_s; /* the same into payloads kept from the last
                              push but one: the encode path alone */
    double topk_copies, dense_copies; /* what the push path keeps between
                                         pushes, in layers of 4n bytes */
} push_times;

static int cmp_double(const void *pa, const void *pb)
{
    double x = *(const double *)pa, y = *(const double *)pb;
    return x < y ? -1 : (x > y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A sparse push as flps_client_push makes it: ef_step, then per part a
 * payload of part-relative indices and values (proto_buf_create there,
 * malloc here). The payloads go to the caller, who frees them as the
 * replies would. */
static int push_topk(ef *e, codec *c, const float *g, size_t n, void **bufs)
{
    codec_msg m;
    const float *val;
    size_t j = 0, np = (n + PUSH_PART - 1) / PUSH_PART;

    if (ef_step(e, c, g, &m) != FLPS_OK)
        return -1;
    val = (const float *)(const void *)m.frames[1].data;
    for (size_t p = 0; p < np; p++) {
        size_t end = (p + 1) * PUSH_PART, lo = j;
        uint32_t *ix;
        float *v;
        while (j < m.count && m.idx[j] < end)
            j++;
        ix = malloc((j - lo) * 8 + 64);
        if (ix == NULL)
            return -1;
        v = (float *)(ix + (j - lo));
        for (size_t q = lo; q < j; q++) {
            ix[q - lo] = (uint32_t)(m.idx[q] - p * PUSH_PART);
            v[q - lo] = val[q];
        }
        bufs[p] = ix;
    }
    return 0;
}

/* A dense push as flps_client_push makes it: every part's payload written
 * from the gradient and the velocity (the previous payload), then the
 * previous payloads dropped and the new ones kept as the velocity. */
static int push_dense(const float *g, size_t n, void **vel, void **next)
{
    size_t np = (n + PUSH_PART - 1) / PUSH_PART;

    for (size_t p = 0; p < np; p++) {
        size_t len = p + 1 < np ? PUSH_PART : n - p * PUSH_PART;
        next[p] = malloc(len * 4 + 64);
        if (next[p] == NULL ||
            codec_dense_encode_into(g + p * PUSH_PART, vel[p], PUSH_MOMENTUM,
                                    len, next[p]) != FLPS_OK)
            return -1;
    }
    for (size_t p = 0; p < np; p++) {
        free(vel[p]);
        vel[p] = next[p];
    }
    return 0;
}

/* push_dense with the payload buffers kept: the velocity in one set, the
 * new payloads written into the other (as a pool of buffers the transport
 * has released would give them), then the sets swap. What is left of the
 * push when its payloads cost no fresh memory. */
static void push_dense_reused(const float *g, size_t n, float **vel,
                              float **next)
{
    size_t np = (n + PUSH_PART - 1) / PUSH_PART;

    for (size_t p = 0; p < np; p++) {
        size_t len = p + 1 < np ? PUSH_PART : n - p * PUSH_PART;
        float *t;
        (void)codec_dense_encode_into(g + p * PUSH_PART, vel[p], PUSH_MOMENTUM,
                                      len, next[p]);
        t = vel[p];
        vel[p] = next[p];
        next[p] = t;
    }
}

/* Bytes of heap in use, mmapped blocks included. */
static size_t bench_heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();

    return mi.uordblks + mi.hblkhd;
}

static int bench_push(int rounds, push_times *out)
{
    size_t n = PUSH_N, np = (n + PUSH_PART - 1) / PUSH_PART;
    float *g = malloc(n * sizeof(*g)), *dst = malloc(n * sizeof(*dst));
    void **bufs = calloc(np, sizeof(*bufs)), **vel = calloc(np, sizeof(*vel));
    void **next = calloc(np, sizeof(*next));
    double *mc = calloc((size_t)rounds, sizeof(double));
    double *tk = calloc((size_t)rounds, sizeof(double));
    double *de = calloc((size_t)rounds, sizeof(double));
    double *dr = calloc((size_t)rounds, sizeof(double));
    float **rv = calloc(np, sizeof(*rv)), **rn = calloc(np, sizeof(*rn));
    codec_spec spec;
    codec *c = NULL;
    ef *e = NULL;
    volatile float sink = 0.0f;
    size_t held0 = bench_heap_in_use(), held1, held2;
    int rc = -1;

    if (g == NULL || dst == NULL || bufs == NULL || vel == NULL ||
        next == NULL || mc == NULL || tk == NULL || de == NULL || dr == NULL ||
        rv == NULL || rn == NULL ||
        codec_spec_parse(PUSH_SPEC, &spec) != FLPS_OK ||
        codec_create(&spec, 1, &c) != FLPS_OK ||
        ef_create_for(&spec, n, PUSH_MOMENTUM, &e) != FLPS_OK)
        goto out;
    bench_fill_gaussian(g, n, 7);
    memset(dst, 0, n * sizeof(*dst));
    /* One unmeasured push of each: the residual, velocity and heap reach
     * their steady state (first-touch page faults). Between pushes, what
     * the push path keeps for the layer: for topk the ef, the codec and
     * the selection buffers; for dense the payloads kept as the velocity.
     * (held0 was taken after the gradient and the memcpy target had been
     * allocated.) */
    if (push_topk(e, c, g, n, bufs) != 0)
        goto out;
    for (size_t p = 0; p < np; p++) {
        free(bufs[p]);
        bufs[p] = NULL;
    }
    held1 = bench_heap_in_use();
    if (push_dense(g, n, vel, next) != 0)
        goto out;
    held2 = bench_heap_in_use();
    out->topk_copies = (double)(held1 - held0) / (4.0 * (double)n);
    out->dense_copies = (double)(held2 - held1) / (4.0 * (double)n);
    for (size_t p = 0; p < np; p++) {
        rv[p] = calloc(PUSH_PART, sizeof(float));
        rn[p] = calloc(PUSH_PART, sizeof(float));
        if (rv[p] == NULL || rn[p] == NULL)
            goto out;
    }
    push_dense_reused(g, n, rv, rn);

    for (int r = 0; r < rounds; r++) {
        double t0 = flps_mono_s(), t1;

        memcpy(dst, g, n * sizeof(*g));
        t1 = flps_mono_s();
        sink += dst[(size_t)r];
        mc[r] = t1 - t0;
        t0 = flps_mono_s();
        if (push_topk(e, c, g, n, bufs) != 0)
            goto out;
        t1 = flps_mono_s();
        tk[r] = t1 - t0;
        for (size_t p = 0; p < np; p++) {
            free(bufs[p]);
            bufs[p] = NULL;
        }
        t0 = flps_mono_s();
        if (push_dense(g, n, vel, next) != 0)
            goto out;
        t1 = flps_mono_s();
        de[r] = t1 - t0;
        t0 = flps_mono_s();
        push_dense_reused(g, n, rv, rn);
        t1 = flps_mono_s();
        dr[r] = t1 - t0;
        printf("progress: push round %d/%d: memcpy %.2f ms, topk %.2f ms, "
               "dense %.2f ms, dense into kept payloads %.2f ms\n",
               r + 1, rounds, mc[r] * 1e3, tk[r] * 1e3, de[r] * 1e3,
               dr[r] * 1e3);
        fflush(stdout);
    }
    out->memcpy_s = median(mc, rounds);
    out->topk_s = median(tk, rounds);
    out->dense_s = median(de, rounds);
    out->dense_reused_s = median(dr, rounds);
    rc = 0;
out:
    (void)sink;
    for (size_t p = 0; bufs != NULL && p < np; p++)
        free(bufs[p]);
    for (size_t p = 0; vel != NULL && p < np; p++)
        free(vel[p]);
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(dst);
    free(bufs);
    free(vel);
    free(next);
    free(mc);
    free(tk);
    free(de);
    free(dr);
    for (size_t p = 0; rv != NULL && rn != NULL && p < np; p++) {
        free(rv[p]);
        free(rn[p]);
    }
    free(rv);
    free(rn);
    return rc;
}

int main(int argc, char **argv)
{
    static const char *const specs[] = {
        "dense",     "fp16",     "topk:0.001", "topk:0.01", "randk:0.01",
        "dgc:0.001", "dgc:0.01", "qsgd:4",     "qsgd:8",    "sign"};
    enum { NSPECS = sizeof(specs) / sizeof(specs[0]) };
    double enc_s[NSPECS], dec_s[NSPECS], memcpy_s = 1e30;
    size_t bytes[NSPECS];
    size_t n = 4u << 20;
    int rounds = 7;
    float *a, *dst, *acc;
    uint64_t seed = 42;
    volatile float sink = 0.0f;
    push_times push;

    if (bench_args(argc, argv, "bench_codecs", &n, &rounds) != 0)
        return 2;
    a = malloc(n * sizeof(*a));
    dst = malloc(n * sizeof(*dst));
    acc = malloc(n * sizeof(*acc));
    if (a == NULL || dst == NULL || acc == NULL) {
        fprintf(stderr, "bench_codecs: out of memory\n");
        return 1;
    }
    bench_fill_gaussian(a, n, seed);
    memset(dst, 0, n * sizeof(*dst));
    memset(acc, 0, n * sizeof(*acc));
    printf("bench_codecs: n=%zu floats (%.1f MB), Gaussian, best of %d "
           "rounds, one core\n",
           n, (double)n * 4 / 1e6, rounds);
    fflush(stdout);

    for (int s = 0; s < NSPECS; s++) {
        codec_spec spec;
        codec *c = NULL;

        enc_s[s] = dec_s[s] = 1e30;
        if (codec_spec_parse(specs[s], &spec) != FLPS_OK ||
            codec_create(&spec, 1, &c) != FLPS_OK) {
            fprintf(stderr, "bench_codecs: cannot create %s\n", specs[s]);
            return 1;
        }
        for (int r = 0; r < rounds; r++) {
            codec_msg msg;
            double t0, t1, t2, t3;

            /* memcpy in every round, next to the codec, so both see the
             * same machine load. */
            t0 = flps_mono_s();
            memcpy(dst, a, n * sizeof(*a));
            t1 = flps_mono_s();
            sink += dst[(size_t)r % n];
            if (t1 - t0 < memcpy_s)
                memcpy_s = t1 - t0;
            t1 = flps_mono_s();
            if (codec_encode(c, a, n, &msg) != FLPS_OK) {
                fprintf(stderr, "bench_codecs: %s encode failed\n", specs[s]);
                return 1;
            }
            t2 = flps_mono_s();
            if (codec_decode(&spec, msg.frames, msg.nframes, acc, n) !=
                FLPS_OK) {
                fprintf(stderr, "bench_codecs: %s decode failed\n", specs[s]);
                return 1;
            }
            t3 = flps_mono_s();
            bytes[s] = msg.bytes;
            if (t2 - t1 < enc_s[s])
                enc_s[s] = t2 - t1;
            if (t3 - t2 < dec_s[s])
                dec_s[s] = t3 - t2;
        }
        printf("progress: %s done\n", specs[s]);
        fflush(stdout);
        codec_destroy(c);
    }

    free(dst);
    free(acc);
    dst = acc = NULL;
    if (bench_push(rounds, &push) != 0) {
        fprintf(stderr, "bench_codecs: the worker push failed\n");
        return 1;
    }

    {
        double gb = (double)n * 4 / 1e9;
        double rt = push.topk_s / push.memcpy_s,
               rd = push.dense_s / push.memcpy_s,
               rr = push.dense_reused_s / push.memcpy_s;
        printf("\nmemcpy: %.3f ms, %.2f GB/s\n", memcpy_s * 1e3, gb / memcpy_s);
        printf("%-11s %12s %8s %10s %10s %9s %9s %9s %12s\n", "codec", "bytes",
               "ratio", "enc_ms", "dec_ms", "enc_GB/s", "dec_GB/s", "e+d_GB/s",
               "(e+d)/memcpy");
        for (int s = 0; s < NSPECS; s++) {
            double ed = enc_s[s] + dec_s[s];
            printf("%-11s %12zu %8.1f %10.3f %10.3f %9.2f %9.2f %9.2f "
                   "%12.2f\n",
                   specs[s], bytes[s], (double)n * 4 / (double)bytes[s],
                   enc_s[s] * 1e3, dec_s[s] * 1e3, gb / enc_s[s], gb / dec_s[s],
                   gb / ed, ed / memcpy_s);
        }
        printf("(GB/s of f32 input; ratio = input bytes / encoded bytes)\n");
        printf("\nworker push of %u floats in parts of %u, momentum %g, "
               "measured through compress/ (ef_step or "
               "codec_dense_encode_into, and the per-part payloads; no "
               "client, no transport), medians of %d:\n",
               PUSH_N, PUSH_PART, (double)PUSH_MOMENTUM, rounds);
        printf("  memcpy of the layer %.2f ms\n", push.memcpy_s * 1e3);
        printf("  %s push %.2f ms = %.2fx memcpy (bar <= 4) %s\n", PUSH_SPEC,
               push.topk_s * 1e3, rt, rt <= 4 ? "ok" : "MISSED");
        printf("  dense push %.2f ms = %.2fx memcpy (bar <= 2) %s\n",
               push.dense_s * 1e3, rd, rd <= 2 ? "ok" : "MISSED");
        printf("  dense push into kept payloads %.2f ms = %.2fx memcpy (the "
               "rest is fresh payload memory: page faults)\n",
               push.dense_reused_s * 1e3, rr);
        printf("  kept between pushes, in copies of the layer: topk %.3f "
               "(residual, velocity, selection buffers), dense %.3f (the "
               "payloads as the velocity); the worker adds its replica and "
               "gradient\n",
               push.topk_copies, push.dense_copies);
        printf("{\"n\":%zu,\"memcpy_seconds\":%.6f", n, memcpy_s);
        for (int s = 0; s < NSPECS; s++)
            printf(",\"%s\":{\"bytes\":%zu,\"encode_seconds\":%.6f,"
                   "\"decode_seconds\":%.6f}",
                   specs[s], bytes[s], enc_s[s], dec_s[s]);
        printf(",\"worker_push\":{\"n\":%u,\"measured\":\"compress/ encode "
               "path and payloads, no transport\",\"memcpy_seconds\":%.6f,"
               "\"topk_seconds\":%.6f,\"dense_seconds\":%.6f,"
               "\"dense_kept_payloads_seconds\":%.6f,"
               "\"library_copies_topk\":%.3f,\"library_copies_dense\":%.3f}",
               PUSH_N, push.memcpy_s, push.topk_s, push.dense_s,
               push.dense_reused_s, push.topk_copies, push.dense_copies);
        printf(",\"worker_push_25M_topk_over_memcpy\":%.3f,"
               "\"worker_push_dense_over_memcpy\":%.3f,"
               "\"worker_push_dense_kept_payloads_over_memcpy\":%.3f}\n",
               rt, rd, rr);
    }
    (void)sink;
    free(a);
    return 0;
}
