/* Benchmark of every codec: encode and decode throughput in GB/s of f32
 * input, against memcpy of the same array measured in the same run, on one
 * core. Prints progress, a table, and as its last line one JSON object.
 *
 * Usage: bench_codecs [--n N] [--rounds R]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "compress/codec.h"

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

    {
        double gb = (double)n * 4 / 1e9;
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
        printf("{\"n\":%zu,\"memcpy_seconds\":%.6f", n, memcpy_s);
        for (int s = 0; s < NSPECS; s++)
            printf(",\"%s\":{\"bytes\":%zu,\"encode_seconds\":%.6f,"
                   "\"decode_seconds\":%.6f}",
                   specs[s], bytes[s], enc_s[s], dec_s[s]);
        printf("}\n");
    }
    (void)sink;
    free(a);
    free(dst);
    free(acc);
    return 0;
}
