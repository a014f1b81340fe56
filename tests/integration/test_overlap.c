/* Measured overlap (issue 9): flworker with overlap on (each layer pushed
 * as backprop reaches it, the next forward waiting per layer) and off
 * (push after the whole backward, wait for every layer) does the same
 * arithmetic, so the same seed ends with the same model bit for bit. Real
 * jobs under flrun on loopback; no timing is asserted (the machine is
 * shared), only what the summaries say the runs did. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <unistd.h>

#include "runcmd.h"

/* Run the job `body` (YAML without overlap:) with overlap: ov. */
static void run_overlap(const char *dir, const char *body, const char *ov,
                        run_result *r)
{
    char job[256], cmd[1024];
    FILE *f;

    snprintf(job, sizeof(job), "%s/job-%s.yaml", dir, ov);
    f = fopen(job, "w");
    cr_assert_not_null(f);
    fprintf(f, "%soverlap: %s\n", body, ov);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet %s", FLPS_BIN_DIR, job);
    run_cmd(cmd, r);
    cr_assert_eq(r->status, 0, "flrun (overlap: %s) failed:\n%s", ov, r->err);
    cr_assert_not_null(r->summary, "no JSON summary as the last line:\n%s",
                       r->out);
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    cr_assert_not_null(s, "summary lacks %s", k);
    return s;
}

/* The same seed with overlap on and off: the same model at the end (every
 * worker's replica too), the same loss and accuracy, every layer sending
 * the same bytes; and the summary splits each run's time. */
static void check_same_results(const char *body, size_t nlayers)
{
    char dir[] = "/tmp/flps-overlap-XXXXXX", rm[64];
    run_result on, off;
    json_t *lon, *loff;
    const char *name;
    json_t *v;
    double layer_sum = 0;

    cr_assert_not_null(mkdtemp(dir));
    run_overlap(dir, body, "true", &on);
    run_overlap(dir, body, "false", &off);
    cr_assert(json_is_true(json_object_get(on.summary, "overlap")));
    cr_assert(json_is_false(json_object_get(off.summary, "overlap")));
    cr_assert(json_is_true(json_object_get(on.summary, "replicas_identical")),
              "every worker ends with the same replica (overlap on)");
    cr_assert(json_is_true(json_object_get(off.summary, "replicas_identical")));
    cr_assert_str_eq(str(on.summary, "model_hash"),
                     str(off.summary, "model_hash"),
                     "overlap changes when, not what: the same model");
    cr_assert_eq(num(on.summary, "test_accuracy"),
                 num(off.summary, "test_accuracy"));
    lon = json_object_get(on.summary, "layer_bytes_sent");
    loff = json_object_get(off.summary, "layer_bytes_sent");
    cr_assert_eq(json_object_size(lon), nlayers, "one entry per tensor");
    json_object_foreach(lon, name, v)
    {
        cr_assert_eq(json_integer_value(v),
                     json_integer_value(json_object_get(loff, name)),
                     "layer %s sends the same bytes on and off", name);
        cr_assert_gt(json_integer_value(v), 0, "layer %s pushed", name);
        layer_sum += (double)json_integer_value(v);
    }
    cr_assert_leq(layer_sum, num(on.summary, "bytes_sent"),
                  "the pushes are part of what was sent");
    cr_assert_gt(num(on.summary, "compute_seconds"), 0);
    cr_assert_geq(num(on.summary, "comm_wait_seconds"), 0);
    cr_assert_gt(num(on.summary, "push_seconds"), 0);
    cr_assert_gt(num(off.summary, "compute_seconds"), 0);
    cr_assert_gt(num(on.summary, "seconds_per_iteration"), 0);
    /* The split is of the loop's time (each worker's mean). */
    cr_assert_leq(num(off.summary, "compute_seconds") +
                      num(off.summary, "push_seconds") +
                      num(off.summary, "comm_wait_seconds"),
                  num(off.summary, "seconds_per_iteration") *
                          num(off.summary, "iterations") +
                      0.01);
    run_free(&on);
    run_free(&off);
    snprintf(rm, sizeof(rm), "rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
}

/* The MLP on two shards with gtopk (the shards' rejected values go back
 * into each worker's residual: the order of that matters too) and
 * evaluations mid-run (each waits for every layer first). */
Test(overlap, the_mlp_gives_the_same_model_bit_for_bit_on_and_off,
     .timeout = 600)
{
    check_same_results("name: ovl-mlp\nmodel: mlp\ndataset: synthetic\n"
                       "workers: 2\nservers: 2\niterations: 40\n"
                       "batch_size: 32\nlr: 0.05\ncompression: gtopk:0.05\n"
                       "seed: 5\neval_every: 15\n",
                       6);
}

/* The CNN, dense with momentum: every layer's update in full. */
Test(overlap, the_cnn_gives_the_same_model_bit_for_bit_on_and_off,
     .timeout = 600)
{
    check_same_results("name: ovl-cnn\nmodel: cnn\ndataset: synthetic\n"
                       "workers: 2\nservers: 1\niterations: 8\n"
                       "batch_size: 16\nlr: 0.03\nmomentum: 0.9\n"
                       "compression: dense\nseed: 3\neval_every: 5\n",
                       8);
}
