/* Acceptance of issue 25 (SAPS-PSGD) on Fashion-MNIST with flrun: the MLP
 * on 8 workers with IID data, decentralized at density 0.01, ends within
 * 2 points of the dense parameter-server run of the same model, workers
 * and iterations (measured in the same test), both as rank 0's own model
 * and as the average of the workers' models, while each worker sends at
 * most 3% of the bytes a dense worker sends; and every worker computed the
 * same matchings. docs/benchmarks.md has the numbers. */
#include <criterion/criterion.h>

#include "runcmd.h"

/* The two jobs: the same model, data, workers, batch and iterations; the
 * PS dense at the examples' lr, SAPS at its own (examples/
 * fmnist-mlp-saps.yaml: at density 0.01 a lower lr keeps the models
 * close enough to average). */
#define COMMON                                                                 \
    "model: mlp\ndataset: fashion-mnist\npartition: iid\nworkers: 8\n"         \
    "iterations: 3000\nbatch_size: 32\nmomentum: 0.9\nlr_schedule: cosine\n"   \
    "seed: 1\neval_every: 0\n"

static void run_job(const char *text, run_result *r)
{
    char dir[] = "/tmp/flrun-saps-train-XXXXXX";

    cr_assert_not_null(mkdtemp(dir));
    run_flrun_text(dir, text, r);
    cr_assert_eq(r->status, 0, "flrun failed:\n%s", r->err);
    cr_assert_not_null(r->summary, "no summary:\n%s", r->out);
}

Test(
    flrun_saps_training,
    saps_at_density_001_ends_within_2_points_of_dense_with_3_percent_of_the_bytes,
    .timeout = 1500)
{
    run_result dense, saps;
    double acc_dense, acc0, acc_avg, ratio;

    run_job("name: ps-dense\n" COMMON "servers: 2\nmode: ssgd\nlr: 0.05\n"
            "compression: dense\n",
            &dense);
    acc_dense = num(dense.summary, "test_accuracy");
    run_job("name: saps\n" COMMON "mode: saps\nsaps_density: 0.01\nlr: 0.02\n",
            &saps);
    acc0 = num(saps.summary, "test_accuracy");
    acc_avg = num(saps.summary, "consensus_accuracy");
    ratio = num(saps.summary, "bytes_sent") / num(dense.summary, "bytes_sent");
    cr_log_info("PS dense %.4f; saps rank 0 %.4f, average of the workers "
                "%.4f (consensus distance %.4g); saps sent %.4f of the "
                "dense run's bytes (%.0f and %.0f bytes)",
                acc_dense, acc0, acc_avg,
                num(saps.summary, "consensus_distance"), ratio,
                num(saps.summary, "bytes_sent"),
                num(dense.summary, "bytes_sent"));
    cr_assert_geq(acc_avg, acc_dense - 0.02, "average %.4f vs dense %.4f",
                  acc_avg, acc_dense);
    cr_assert_geq(acc0, acc_dense - 0.02, "rank 0 %.4f vs dense %.4f", acc0,
                  acc_dense);
    /* Both ran 8 workers: the totals compare as the per-worker bytes. */
    cr_assert_leq(ratio, 0.03, "saps sent %.4f of dense's bytes", ratio);
    cr_assert(json_is_true(json_object_get(saps.summary, "matchings_agree")));
    cr_assert_eq(num(saps.summary, "consensus_workers"), 8);
    run_free(&dense);
    run_free(&saps);
}
