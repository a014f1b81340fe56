/* Acceptance: the example jobs on Fashion-MNIST, run with flrun, train as
 * well as issue 2 demands: dense reaches 0.85, topk and gtopk at density
 * 0.01 stay within 1.5 points of it while sending at most 3% of the bytes
 * a dense run sends; gtopk at 0.001 with a density warm-up stays within 1
 * point of dense at 0.6% of the bytes (issue 9). The CNN's acceptance is
 * test_training_cnn.c. */
#include <criterion/criterion.h>

#include "runcmd.h"

/* One test runs all three jobs so the sparse runs compare against the
 * dense run of the same build. */
Test(flrun, sparse_jobs_train_as_well_as_dense_with_3_percent_of_the_bytes,
     .timeout = 1200)
{
    run_result dense, gtopk, topk, warm;
    double acc_dense, acc;

    run_example("fmnist-mlp-dense.yaml", &dense);
    acc_dense = num(dense.summary, "test_accuracy");
    cr_log_info("dense: accuracy %.4f, %.0f bytes sent", acc_dense,
                num(dense.summary, "bytes_sent"));
    cr_assert_geq(acc_dense, 0.85, "dense accuracy %.4f < 0.85", acc_dense);
    cr_assert_geq(num(dense.summary, "bytes_sent"),
                  num(dense.summary, "dense_bytes"),
                  "a dense run sends at least dense_bytes");

    run_example("fmnist-mlp-gtopk.yaml", &gtopk);
    acc = num(gtopk.summary, "test_accuracy");
    cr_log_info("gtopk: accuracy %.4f, %.4f of dense bytes", acc,
                num(gtopk.summary, "bytes_sent") /
                    num(gtopk.summary, "dense_bytes"));
    cr_assert_geq(acc, acc_dense - 0.015, "gtopk %.4f vs dense %.4f", acc,
                  acc_dense);
    cr_assert_leq(num(gtopk.summary, "bytes_sent"),
                  0.03 * num(gtopk.summary, "dense_bytes"));

    run_example("fmnist-mlp-topk.yaml", &topk);
    acc = num(topk.summary, "test_accuracy");
    cr_log_info("topk: accuracy %.4f, %.4f of dense bytes", acc,
                num(topk.summary, "bytes_sent") /
                    num(topk.summary, "dense_bytes"));
    cr_assert_geq(acc, acc_dense - 0.015, "topk %.4f vs dense %.4f", acc,
                  acc_dense);
    cr_assert_leq(num(topk.summary, "bytes_sent"),
                  0.03 * num(topk.summary, "dense_bytes"));

    /* Issue 9: gtopk at 0.1% with a density warm-up stays within 1 point
     * of dense at no more than 0.6% of its bytes. */
    run_example("fmnist-mlp-gtopk-warmup.yaml", &warm);
    acc = num(warm.summary, "test_accuracy");
    cr_log_info("gtopk:0.001 with warm-up: accuracy %.4f, %.5f of dense "
                "bytes",
                acc,
                num(warm.summary, "bytes_sent") /
                    num(warm.summary, "dense_bytes"));
    cr_assert_geq(acc, acc_dense - 0.01, "gtopk warm-up %.4f vs dense %.4f",
                  acc, acc_dense);
    cr_assert_leq(num(warm.summary, "bytes_sent"),
                  0.006 * num(warm.summary, "dense_bytes"));
    cr_assert_gt(num(warm.summary, "warmup_bytes_sent"), 0);

    /* The dense run's dense_bytes is what it really sent, give or take
     * the control messages: the two ratios are measured alike. */
    cr_assert_lt(num(dense.summary, "bytes_sent") -
                     num(dense.summary, "dense_bytes"),
                 0.001 * num(dense.summary, "dense_bytes"));
    run_free(&dense);
    run_free(&gtopk);
    run_free(&topk);
    run_free(&warm);
}
