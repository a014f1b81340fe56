/* flps.fl's acceptance (issue 24; label cnn: each job file is 30 rounds,
 * minutes on 2 cores, so scripts/test.sh runs them only on request): the
 * job files of examples/torch/fl/ as they are, run by flrun from the
 * repository's root. The PyTorch MLP's FedAvg reaches a last-5 test
 * accuracy of 0.80 and samples flworker's clients in every round of the
 * same job; top-k at 1% comes within 2 points of it at no more than 5% of
 * its rounds' bytes; federated segmentation reaches 90% of the mean IoU of
 * the same model trained centrally for the same sample-steps. The numbers
 * are in docs/federated.md. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runcmd.h"

#define ROUNDS 30
#define PER_ROUND 5

/* flrun FILE (from examples/) at the repository's root with Debian's
 * python3 first on the PATH, its logs in a new directory (copied to dir). */
static void run_fl_example(const char *file, run_result *r, char *dir,
                           size_t len)
{
    char cmd[1024];

    snprintf(dir, len, "/tmp/flrun-fl-cnn-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "cd %s && PATH=/usr/bin:/bin:$PATH %s/flrun --log-dir %s/logs "
             "examples/%s",
             FLPS_SOURCE_DIR, FLPS_BIN_DIR, dir, file);
    run_cmd(cmd, r);
    cr_assert_eq(r->status, 0, "flrun %s failed:\n%s", file, r->err);
    cr_assert_not_null(r->summary, "no JSON summary from %s:\n%s", file,
                       r->out);
    cr_assert_eq(num(r->summary, "rounds"), ROUNDS, "%s", r->out);
}

/* The round_clients of every round of a log and the sum of its
 * round_bytes. */
static double round_log(const char *log, uint32_t sample[ROUNDS][PER_ROUND])
{
    char *text = slurp(log);
    const char *p = text;
    double bytes = 0;
    json_t *j;
    int n = 0;

    while ((j = next_event(&p, "progress")) != NULL) {
        json_t *ids = json_object_get(j, "round_clients");
        json_int_t it = json_integer_value(json_object_get(j, "iter"));

        cr_assert(it >= 1 && it <= ROUNDS, "%s: round %lld", log,
                  (long long)it);
        cr_assert_eq(json_array_size(ids), PER_ROUND);
        for (size_t k = 0; k < PER_ROUND; k++)
            sample[it - 1][k] =
                (uint32_t)json_integer_value(json_array_get(ids, k));
        bytes += num(j, "round_bytes");
        json_decref(j);
        n++;
    }
    cr_assert_eq(n, ROUNDS, "%s: a progress line per round, %d", log, n);
    free(text);
    return bytes;
}

Test(fl_torch_cnn,
     the_torch_mlp_as_clients_samples_flworkers_clients_and_reaches_0_80,
     .timeout = 5400)
{
    char cdir[64], ddir[64], log[128];
    uint32_t c_sample[ROUNDS][PER_ROUND], d_sample[ROUNDS][PER_ROUND];
    double acc_c, acc_d;
    run_result c, dense;

    run_fl_example("fmnist-mlp-fedavg.yaml", &c, cdir, sizeof(cdir));
    run_fl_example("torch/fl/mlp-fedavg.yaml", &dense, ddir, sizeof(ddir));
    snprintf(log, sizeof(log), "%s/logs/flworker-0.events", cdir);
    (void)round_log(log, c_sample);
    snprintf(log, sizeof(log), "%s/logs/worker-0.events", ddir);
    (void)round_log(log, d_sample);
    for (int r = 0; r < ROUNDS; r++)
        cr_assert_arr_eq(d_sample[r], c_sample[r], sizeof(c_sample[r]),
                         "round %d: the Python clients are flworker's", r);
    acc_c = num(c.summary, "test_accuracy_last5");
    acc_d = num(dense.summary, "test_accuracy_last5");
    cr_log_info("fedavg, 30 rounds, last-5 test accuracy: flworker %.4f, "
                "torch %.4f",
                acc_c, acc_d);
    cr_assert_geq(acc_d, 0.80, "%s", dense.err);
    run_free(&c);
    run_free(&dense);
}

Test(fl_torch_cnn, topk_deltas_come_within_2_points_of_dense_at_5_percent,
     .timeout = 5400)
{
    char ddir[64], tdir[64], log[128];
    uint32_t d_sample[ROUNDS][PER_ROUND], t_sample[ROUNDS][PER_ROUND];
    double acc_d, acc_t, share;
    run_result dense, topk;

    run_fl_example("torch/fl/mlp-fedavg.yaml", &dense, ddir, sizeof(ddir));
    run_fl_example("torch/fl/mlp-topk.yaml", &topk, tdir, sizeof(tdir));
    snprintf(log, sizeof(log), "%s/logs/worker-0.events", ddir);
    share = round_log(log, d_sample);
    snprintf(log, sizeof(log), "%s/logs/worker-0.events", tdir);
    share = round_log(log, t_sample) / share;
    acc_d = num(dense.summary, "test_accuracy_last5");
    acc_t = num(topk.summary, "test_accuracy_last5");
    cr_log_info("torch fedavg: dense %.4f, topk:0.01 %.4f at %.2f%% of the "
                "rounds' bytes",
                acc_d, acc_t, 100 * share);
    /* Rank 0's rounds (rank 1's are alike: its clients, its pairs); the
     * initial model's upload, the same in both, is no round's. */
    cr_assert(share <= 0.05 && acc_t >= acc_d - 0.02,
              "topk:0.01: %.4f against dense's %.4f at %.2f%% of its bytes",
              acc_t, acc_d, 100 * share);
    run_free(&dense);
    run_free(&topk);
}

Test(fl_torch_cnn, federated_segmentation_reaches_90_percent_of_central_miou,
     .timeout = 5400)
{
    char dir[64], cmd[1024];
    double fed, central;
    run_result f, c;

    run_fl_example("torch/fl/seg-fedavg.yaml", &f, dir, sizeof(dir));
    fed = num(f.summary, "test_miou_last5");
    snprintf(cmd, sizeof(cmd),
             "cd %s && /usr/bin/python3 examples/torch/fl/segmentation.py "
             "--central --job examples/torch/fl/seg-fedavg.yaml",
             FLPS_SOURCE_DIR);
    run_to_summary(cmd, &c);
    central = num(c.summary, "test_miou_last5");
    cr_log_info("segmentation, mean IoU of the last 5 rounds: federated "
                "%.4f, central %.4f (%.1f%%)",
                fed, central, 100 * fed / central);
    cr_assert_geq(fed, 0.9 * central,
                  "federated mean IoU %.4f is below 90%% of central %.4f", fed,
                  central);
    run_free(&f);
    run_free(&c);
}
