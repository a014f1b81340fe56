/* The PyTorch CNN's acceptance (label cnn: about 50 minutes on 2 cores, so
 * scripts/test.sh runs it only with FLPS_CNN_ACCEPTANCE=1): the job files
 * of examples/torch/ as they are, run by flrun, and the global top-k job
 * submitted with flsubmit to a local cluster. Global top-k at 1% must come
 * within 1.5 points of the dense run's test accuracy with at most 3% of
 * its bytes, and the submitted job must reach SUCCEEDED with its accuracy
 * in `status --json`. The same bars hold for torch.optim.Adam and AdamW
 * (gradient mode's update exchange). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_fixture.h"
#include "runcmd.h"

/* The job files name `python3` and a path from the repository's root, as a
 * user runs them: run flrun there, with Debian's python3 (the one with
 * torch) first on the PATH. */
static void run_torch_example(const char *file, run_result *r)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd),
             "cd %s && PATH=/usr/bin:/bin:$PATH %s/flrun --log-dir "
             "$(mktemp -d /tmp/flrun-torch-cnn-XXXXXX) examples/torch/%s",
             FLPS_SOURCE_DIR, FLPS_BIN_DIR, file);
    run_cmd(cmd, r);
    cr_assert_eq(r->status, 0, "flrun %s failed:\n%s", file, r->err);
    cr_assert_not_null(r->summary, "no JSON summary from %s:\n%s", file,
                       r->out);
    cr_assert_eq(json_integer_value(json_object_get(r->summary, "iterations")),
                 1000, "%s", r->out);
}

/* examples/torch/cnn.py as the cnn-*.yaml jobs run it (4 workers, 1
 * server, 1000 iterations, batch 32), with torch.optim.<optimizer> at lr
 * 0.001 and compression comp. */
static void run_cnn_with(const char *optimizer, const char *comp, run_result *r)
{
    char text[1024];

    snprintf(text, sizeof(text),
             "name: torch-cnn-%s\nmodel: cnn\nworkers: 4\nservers: 1\n"
             "iterations: 1000\nbatch_size: 32\nlr: 0.001\n"
             "eval_every: 500\ncompression: %s\n"
             "command: [/usr/bin/python3, %s/examples/torch/cnn.py]\n"
             "env:\n  OMP_NUM_THREADS: '1'\n  FLPS_TORCH_OPTIMIZER: %s\n",
             optimizer, comp, FLPS_SOURCE_DIR, optimizer);
    run_flrun_text_in_tmp(text, r, NULL);
    cr_assert_eq(r->status, 0, "%s %s failed:\n%s", optimizer, comp, r->err);
    cr_assert_not_null(r->summary, "no JSON summary:\n%s", r->out);
    cr_assert_eq(num(r->summary, "iterations"), 1000, "%s", r->out);
}

/* Adam and AdamW with gtopk:0.01 come within 1.5 points of the same
 * optimizer dense, with at most 3% of its bytes. */
Test(training_torch_cnn,
     adam_and_adamw_with_gtopk_come_within_1_5_points_of_dense, .timeout = 5400)
{
    assert_adam_keeps_dense_accuracy("torch cnn, 4 workers,", run_cnn_with,
                                     0.85);
}

Test(training_torch_cnn,
     gtopk_comes_within_1_5_points_of_dense_by_flrun_and_by_flsubmit,
     .timeout = 5400)
{
    run_result dense, gtopk;
    double acc_dense, acc_gtopk, acc_sub, share;
    char yaml[1024];
    json_t *job, *sum;
    char *id;

    run_torch_example("cnn-dense.yaml", &dense);
    run_torch_example("cnn-gtopk.yaml", &gtopk);
    acc_dense = num(dense.summary, "test_accuracy");
    acc_gtopk = num(gtopk.summary, "test_accuracy");
    share = num(gtopk.summary, "bytes_sent") / num(dense.summary, "bytes_sent");
    cr_log_info("torch cnn, 4 workers, 1000 iterations: dense %.4f, "
                "gtopk:0.01 %.4f at %.2f%% of the dense bytes",
                acc_dense, acc_gtopk, 100 * share);
    cr_assert_gt(acc_dense, 0.85, "the dense run itself: %s", dense.err);
    cr_assert_geq(acc_gtopk, acc_dense - 0.015,
                  "gtopk:0.01 %.4f is more than 1.5 points below dense %.4f",
                  acc_gtopk, acc_dense);
    cr_assert_leq(share, 0.03, "gtopk:0.01 sent %.2f%% of dense's bytes",
                  100 * share);
    run_free(&dense);
    run_free(&gtopk);

    /* The same job through flsubmit: two agents of 2 CPUs each hold the
     * 4 workers and the server at half a CPU each. */
    cluster_setup("flps-torch-cnn", 0);
    snprintf(yaml, sizeof(yaml),
             "name: torch-cnn-gtopk\nmodel: cnn\nworkers: 4\nservers: 1\n"
             "iterations: 1000\nbatch_size: 32\nlr: 0.05\nmomentum: 0.9\n"
             "eval_every: 500\ncompression: gtopk:0.01\n"
             "cpus_per_worker: 0.5\ncpus_per_server: 0.5\n"
             "command: [/usr/bin/python3, %s/examples/torch/cnn.py]\n"
             "env:\n  OMP_NUM_THREADS: '1'\n",
             FLPS_SOURCE_DIR);
    id = submit(yaml);
    job = wait_state(id, "SUCCEEDED", 3000);
    sum = json_object_get(job, "summary");
    cr_assert_not_null(sum, "a finished job carries its summary");
    acc_sub = num(sum, "test_accuracy");
    cr_log_info("torch cnn gtopk:0.01 through flsubmit: %s SUCCEEDED, test "
                "accuracy %.4f",
                id, acc_sub);
    cr_assert_geq(acc_sub, acc_dense - 0.015,
                  "submitted gtopk:0.01 %.4f is more than 1.5 points below "
                  "dense %.4f",
                  acc_sub, acc_dense);
    json_decref(job);
    free(id);
    cluster_teardown();
}
