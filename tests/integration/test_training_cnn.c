/* Acceptance of the CNN examples as issue 9 demands, run with flrun:
 * dense reaches 0.90 test accuracy at 1,500 iterations and gtopk at
 * density 0.01 stays within 1.5 points of it at most 3% of the dense
 * bytes, and gtopk at 0.001 with a density warm-up within 1 point of
 * dense. About 30-60 minutes on 2 cores, so it has its own label (cnn)
 * and scripts/test.sh runs it only with FLPS_CNN_ACCEPTANCE=1. */
#include <criterion/criterion.h>

#include "runcmd.h"

/* The CNN (issue 9): dense reaches 0.90 at 1,500 iterations (PyTorch on
 * the same set-up: 0.905-0.908), and gtopk at density 0.01 stays within
 * 1.5 points of it while sending at most 3% of the dense bytes. */
Test(flrun, the_cnn_reaches_90_percent_and_gtopk_keeps_up_with_3_percent,
     .timeout = 5400)
{
    run_result dense, gtopk, warm;
    double acc_dense, acc;

    run_example("fmnist-cnn-dense.yaml", &dense);
    acc_dense = num(dense.summary, "test_accuracy");
    cr_log_info("cnn dense: accuracy %.4f, %.0f bytes sent, %.0f s", acc_dense,
                num(dense.summary, "bytes_sent"),
                num(dense.summary, "wall_seconds"));
    cr_assert_geq(acc_dense, 0.90, "cnn dense accuracy %.4f < 0.90", acc_dense);

    run_example("fmnist-cnn-gtopk.yaml", &gtopk);
    acc = num(gtopk.summary, "test_accuracy");
    cr_log_info("cnn gtopk: accuracy %.4f, %.4f of dense bytes, %.0f s", acc,
                num(gtopk.summary, "bytes_sent") /
                    num(gtopk.summary, "dense_bytes"),
                num(gtopk.summary, "wall_seconds"));
    cr_assert_geq(acc, acc_dense - 0.015, "cnn gtopk %.4f vs dense %.4f", acc,
                  acc_dense);
    cr_assert_leq(num(gtopk.summary, "bytes_sent"),
                  0.03 * num(gtopk.summary, "dense_bytes"));

    /* gtopk at 0.001 with a density warm-up: within 1 point of dense
     * (PyTorch's own gtopk at 0.001 loses 1.6-1.8). */
    run_example("fmnist-cnn-gtopk-warmup.yaml", &warm);
    acc = num(warm.summary, "test_accuracy");
    cr_log_info(
        "cnn gtopk:0.001 with warm-up: accuracy %.4f, %.5f of dense "
        "bytes, %.0f s",
        acc, num(warm.summary, "bytes_sent") / num(warm.summary, "dense_bytes"),
        num(warm.summary, "wall_seconds"));
    cr_assert_geq(acc, acc_dense - 0.01, "cnn gtopk warm-up %.4f vs dense %.4f",
                  acc, acc_dense);
    run_free(&dense);
    run_free(&gtopk);
    run_free(&warm);
}
