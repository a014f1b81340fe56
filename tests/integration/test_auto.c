/* compression: auto end to end: flrun hands rank 0's profile to the LAGS
 * planner, writes the plan where the workers watch for it, and the job
 * trains on Fashion-MNIST while sending far fewer bytes than dense. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runcmd.h"
#include "services/plan.h"

static void write_job(const char *path, const char *compression,
                      const char *dataset, unsigned iterations)
{
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f);
    fprintf(f,
            "name: auto-test\nmodel: mlp\ndataset: %s\n"
            "workers: 2\nservers: 2\niterations: %u\nbatch_size: 32\n"
            "lr: 0.05\nmomentum: 0.9\ncompression: %s\nseed: 3\n"
            "eval_every: 0\n",
            dataset, iterations, compression);
    fclose(f);
}

Test(flrun_auto, plans_from_the_profile_and_trains_with_a_fraction_of_the_bytes,
     .timeout = 300)
{
    char dir[] = "/tmp/flps-auto-XXXXXX", job[128], logs[128], path[160];
    char cmd[512], *text;
    run_result r;
    plan *p = NULL;
    size_t nsparse = 0;
    double acc, share;
    FILE *f;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    snprintf(path, sizeof(path), "%s/plan.json", logs);
    write_job(job, "auto", "fashion-mnist", 300);
    /* A plan left by an earlier run in the same log dir is not applied:
     * the workers would take this all-dense v9 and then ignore v1. */
    cr_assert_eq(mkdir(logs, 0755), 0);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"version\":9,\"layers\":["
          "{\"name\":\"fc1.weight\",\"numel\":200704,\"codec\":\"dense\","
          "\"density\":1},"
          "{\"name\":\"fc1.bias\",\"numel\":256,\"codec\":\"dense\","
          "\"density\":1},"
          "{\"name\":\"fc2.weight\",\"numel\":32768,\"codec\":\"dense\","
          "\"density\":1},"
          "{\"name\":\"fc2.bias\",\"numel\":128,\"codec\":\"dense\","
          "\"density\":1},"
          "{\"name\":\"fc3.weight\",\"numel\":1280,\"codec\":\"dense\","
          "\"density\":1},"
          "{\"name\":\"fc3.bias\",\"numel\":10,\"codec\":\"dense\","
          "\"density\":1}],"
          "\"predicted_iteration_seconds\":0.001,"
          "\"dense_iteration_seconds\":0.001}\n",
          f);
    fclose(f);

    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s %s", FLPS_BIN_DIR, logs,
             job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "no summary: %s", r.out);
    acc = num(r.summary, "test_accuracy");
    share = num(r.summary, "bytes_sent") / num(r.summary, "dense_bytes");
    cr_log_info("auto: accuracy %.4f, %.4f of the dense bytes", acc, share);
    cr_assert_geq(acc, 0.78, "learned too little: %.4f", acc);
    /* Only fc1.weight (85% of the MLP's elements; it hides behind nothing)
     * is sure to go sparse; the measured times decide fc2.weight, and an
     * auto job pushes a dense layer as index/value pairs, 8 bytes an
     * element: fc2.weight dense alone is about 0.28 of the dense bytes.
     * Measured: 0.05 to 0.27; at most about 0.30 with fc2.weight dense. */
    cr_assert_lt(share, 0.35, "sent %.4f of the dense bytes", share);
    cr_assert_not_null(strstr(r.err, "plan v1: "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "layers sparse, predicted iteration"),
                       "%s", r.err);

    text = slurp(path);
    cr_assert_eq(plan_parse(text, &p, NULL, 0), FLPS_OK, "%s: %s", path, text);
    cr_assert_eq(p->version, 1);
    cr_assert_eq(p->nlayers, 6, "the MLP's tensors");
    cr_assert_str_eq(p->layers[0].name, "fc1.weight", "layout order");
    cr_assert_eq(p->layers[0].kind, CODEC_TOPK,
                 "fc1.weight is big and hides behind nothing");
    for (size_t i = 0; i < p->nlayers; i++)
        nsparse += p->layers[i].kind != CODEC_DENSE;
    cr_assert_leq(p->predicted_iteration_seconds, p->dense_iteration_seconds);
    {
        char want[64];
        snprintf(want, sizeof(want), "plan v1: %zu of 6 layers sparse",
                 nsparse);
        cr_assert_not_null(strstr(r.err, want), "%s", r.err);
    }
    snprintf(path, sizeof(path), "%s/plan.json.tmp", logs);
    cr_assert_eq(access(path, F_OK), -1, "the temporary file was renamed");
    plan_free(p);
    free(text);
    run_free(&r);
}

Test(flrun_auto, a_job_with_one_codec_gets_no_plan_file)
{
    char dir[] = "/tmp/flps-noauto-XXXXXX", job[128], logs[128], path[160];
    char cmd[512];
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    write_job(job, "topk:0.01", "synthetic", 20);
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet --log-dir %s %s", FLPS_BIN_DIR,
             logs, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(path, sizeof(path), "%s/plan.json", logs);
    cr_assert_eq(access(path, F_OK), -1, "no plan for a topk job");
    cr_assert_null(strstr(r.err, "plan v"), "%s", r.err);
    run_free(&r);
}
