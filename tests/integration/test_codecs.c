/* Every codec end to end: flrun trains the Fashion-MNIST MLP for a short
 * job with each compression setting through real shards, and each run
 * must learn and send about the bytes its encoding promises. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "runcmd.h"

typedef struct codec_case {
    const char *spec;
    double min_accuracy; /* after 300 iterations */
    double max_share;    /* bytes_sent / dense_bytes */
} codec_case;

static void run_codec(const codec_case *cc)
{
    char dir[] = "/tmp/flps-codec-XXXXXX", job[128], cmd[512];
    run_result r;
    FILE *f;
    double acc, share;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    f = fopen(job, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "name: codec-test\nmodel: mlp\ndataset: fashion-mnist\n"
            "workers: 2\nservers: 2\niterations: 300\nbatch_size: 32\n"
            "lr: 0.05\nmomentum: 0.9\ncompression: %s\nseed: 3\n"
            "eval_every: 0\n",
            cc->spec);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet %s", FLPS_BIN_DIR, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s failed:\n%s", cc->spec, r.err);
    cr_assert_not_null(r.summary, "%s: no summary", cc->spec);
    acc = num(r.summary, "test_accuracy");
    share = num(r.summary, "bytes_sent") / num(r.summary, "dense_bytes");
    cr_log_info("%-10s accuracy %.4f, %.4f of the dense bytes", cc->spec, acc,
                share);
    cr_assert_geq(acc, cc->min_accuracy, "%s learned too little: %.4f",
                  cc->spec, acc);
    cr_assert_leq(share, cc->max_share, "%s sent %.4f of the dense bytes",
                  cc->spec, share);
    run_free(&r);
}

/* Bounds: the payload of each encoding relative to f32 (fp16 1/2, qsgd:B
 * (B+1)/32 plus a norm per 512, sign 1/32 plus a scale, sparse 8 bytes per
 * selected pair) plus headers, and accuracies these short runs clear with
 * a margin (dense reaches about 0.84 here). */
static const codec_case cases[] = {
    {"dense", 0.80, 1.0001},    {"fp16", 0.80, 0.51},
    {"qsgd:4", 0.80, 0.17},     {"qsgd:2", 0.78, 0.11},
    {"sign", 0.70, 0.045},      {"topk:0.01", 0.78, 0.03},
    {"gtopk:0.01", 0.78, 0.03}, {"randk:0.05", 0.75, 0.12},
    {"dgc:0.01", 0.78, 0.03},
};

Test(codecs, every_codec_trains_through_real_shards_within_its_byte_budget,
     .timeout = 900)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_codec(&cases[i]);
}
