/* Acceptance of issue 9 (FedAvg), run with flrun on Fashion-MNIST: the
 * example job (10 clients on a Dirichlet(0.5) split, half of them per
 * round, 30 rounds of 20 local steps) reaches 0.78 as the mean of its last
 * five rounds' evaluations; top-k deltas at density 0.01 stay within 3
 * points of it; 100 clients at a tenth per round train too; and the result
 * does not depend on how many worker processes play the clients; a
 * round_deadline leaves exactly the late clients out. */
#include <criterion/criterion.h>

#include "runcmd.h"
#include "worker/fedavg.h"

#define EXAMPLE FLPS_SOURCE_DIR "/examples/fmnist-mlp-fedavg.yaml"

static char paths[4][64];

static const char *variant_path(int slot)
{
    return paths[slot];
}

/* The example with each "from" line replaced by its "to" line, written to a
 * new file; returns its path (static storage per slot). */
static const char *variant(int slot, const char *const *from,
                           const char *const *to, int n)
{
    char *text = slurp(EXAMPLE), dir[] = "/tmp/flrun-fedavg-XXXXXX";
    FILE *f;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(paths[slot], sizeof(paths[slot]), "%s/job.yaml", dir);
    for (int i = 0; i < n; i++) {
        char *at = strstr(text, from[i]), *next;
        size_t head, fl = strlen(from[i]), tl = strlen(to[i]);

        cr_assert_not_null(at, "the example has no '%s'", from[i]);
        head = (size_t)(at - text);
        next = malloc(strlen(text) - fl + tl + 1);
        memcpy(next, text, head);
        memcpy(next + head, to[i], tl);
        strcpy(next + head + tl, at + fl);
        free(text);
        text = next;
    }
    f = fopen(paths[slot], "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    free(text);
    return paths[slot];
}

/* The job file variant() last wrote in slot. */
static const char *variant_path(int slot);

static void run_job(const char *path, run_result *r)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet %s", FLPS_BIN_DIR, path);
    run_cmd(cmd, r);
    cr_assert_eq(r->status, 0, "flrun %s failed:\n%s", path, r->err);
    cr_assert_not_null(r->summary, "no JSON summary as the last line:\n%s",
                       r->out);
    cr_assert_eq(num(r->summary, "rounds"), 30);
    cr_assert_float_eq(num(r->summary, "bytes_per_round"),
                       num(r->summary, "bytes_sent") / 30, 1.0);
}

/* samples_per_client has one count per client and they add up to the
 * training set. */
static void assert_samples(json_t *summary, size_t clients)
{
    json_t *s = json_object_get(summary, "samples_per_client"), *v;
    size_t i;
    double total = 0;

    cr_assert(json_is_array(s), "summary lacks samples_per_client");
    cr_assert_eq(json_array_size(s), clients);
    json_array_foreach(s, i, v)
    {
        cr_assert_geq(json_integer_value(v), 10, "client %zu", i);
        total += (double)json_integer_value(v);
    }
    cr_assert_eq(total, 60000);
}

Test(flrun_fedavg, non_iid_clients_reach_078_and_topk_deltas_stay_within_3,
     .timeout = 900)
{
    static const char *const topk_from[] = {"compression: dense"};
    static const char *const topk_to[] = {"compression: topk:0.01"};
    run_result dense, topk;
    double acc_dense, acc;

    run_job(EXAMPLE, &dense);
    acc_dense = num(dense.summary, "test_accuracy_last5");
    cr_log_info("dense deltas: last-5 accuracy %.4f, skew %.3f, %.0f bytes "
                "per round",
                acc_dense, num(dense.summary, "partition_skew"),
                num(dense.summary, "bytes_per_round"));
    cr_assert_geq(acc_dense, 0.78, "last-5 accuracy %.4f < 0.78", acc_dense);
    /* Dirichlet(0.5) over 10 clients is far from iid (iid gives ~0.01). */
    cr_assert_gt(num(dense.summary, "partition_skew"), 0.3);
    assert_samples(dense.summary, 10);

    run_job(variant(0, topk_from, topk_to, 1), &topk);
    acc = num(topk.summary, "test_accuracy_last5");
    cr_log_info("topk:0.01 deltas: last-5 accuracy %.4f, %.0f bytes per "
                "round",
                acc, num(topk.summary, "bytes_per_round"));
    cr_assert_geq(acc, acc_dense - 0.03, "topk %.4f vs dense %.4f", acc,
                  acc_dense);
    cr_assert_leq(num(topk.summary, "bytes_sent"),
                  0.05 * num(dense.summary, "bytes_sent"));
    cr_assert_eq(num(topk.summary, "partition_skew"),
                 num(dense.summary, "partition_skew"),
                 "the split depends on the seed only");
    run_free(&dense);
    run_free(&topk);
}

Test(flrun_fedavg, a_hundred_clients_at_a_tenth_per_round_train, .timeout = 600)
{
    static const char *const from[] = {"clients: 10", "client_fraction: 0.5"};
    static const char *const to[] = {"clients: 100", "client_fraction: 0.1"};
    run_result r;
    double acc;

    run_job(variant(1, from, to, 2), &r);
    acc = num(r.summary, "test_accuracy_last5");
    cr_log_info("100 clients: last-5 accuracy %.4f", acc);
    cr_assert_geq(acc, 0.78, "last-5 accuracy %.4f < 0.78", acc);
    assert_samples(r.summary, 100);
    run_free(&r);
}

Test(flrun_fedavg, the_result_does_not_depend_on_the_number_of_workers,
     .timeout = 600)
{
    static const char *const from[] = {"workers: 2"};
    static const char *const to1[] = {"workers: 1"};
    static const char *const to5[] = {"workers: 5"};
    run_result one, five;

    /* Each client's sample, data order and local steps come from the seed
     * alone; only the order of float sums differs. */
    run_job(variant(2, from, to1, 1), &one);
    run_job(variant(3, from, to5, 1), &five);
    cr_log_info("1 worker: %.4f, 5 workers: %.4f",
                num(one.summary, "test_accuracy_last5"),
                num(five.summary, "test_accuracy_last5"));
    cr_assert_float_eq(num(one.summary, "test_accuracy_last5"),
                       num(five.summary, "test_accuracy_last5"), 0.005);
    cr_assert_lt(num(one.summary, "bytes_sent"),
                 num(five.summary, "bytes_sent"),
                 "every worker process pushes once a round");
    run_free(&one);
    run_free(&five);
}

/* The example for 10 rounds with extra (deadline) lines; its summary. */
static void run_deadline(int slot, const char *extra, run_result *r)
{
    char to[256], cmd[1024];
    const char *to_[] = {to};
    static const char *const from[] = {"rounds: 30"};
    const char *job;

    snprintf(to, sizeof(to), "rounds: 10\n%s", extra);
    job = variant(slot, from, to_, 1);
    /* The logs next to the job file (flrun makes the directory). */
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet --log-dir %.*s/logs %s",
             FLPS_BIN_DIR, (int)(strrchr(job, '/') - job), job, job);
    run_cmd(cmd, r);
    cr_assert_eq(r->status, 0, "flrun failed:\n%s", r->err);
    cr_assert_not_null(r->summary, "no JSON summary:\n%s", r->out);
    cr_assert_eq(num(r->summary, "rounds"), 10);
}

Test(flrun_fedavg, a_round_every_client_misses_changes_nothing, .timeout = 600)
{
    run_result r;

    /* No client trains in a nanosecond: every round is left empty. */
    run_deadline(0, "round_deadline: 0.000000001", &r);
    cr_assert_eq(num(r.summary, "client_rounds"), 10 * 5);
    cr_assert_eq(num(r.summary, "late_clients"), 10 * 5, "every one late");
    /* The model never moved from its initial values: each of the last five
     * evaluations is the same, that of an untrained model. */
    cr_assert_eq(num(r.summary, "test_accuracy_last5"),
                 num(r.summary, "test_accuracy"));
    cr_assert_lt(num(r.summary, "test_accuracy"), 0.3);
    {
        /* Each worker process says which of its clients were late. */
        char path[128];
        char *log0, *log1;
        const char *job = variant_path(0);

        snprintf(path, sizeof(path), "%.*s/logs/flworker-0.log",
                 (int)(strrchr(job, '/') - job), job);
        log0 = slurp(path);
        path[strlen(path) - 5] = '1';
        log1 = slurp(path);
        cr_assert_not_null(strstr(log0, "missed the 1e-09 s round_deadline "
                                        "and were left out"),
                           "%s", log0);
        cr_assert_not_null(strstr(log1, "were left out"), "%s", log1);
        free(log0);
        free(log1);
    }
    run_free(&r);
}

Test(flrun_fedavg, stragglers_past_the_deadline_are_left_out_and_the_rest_train,
     .timeout = 600)
{
    run_result fast, slow;
    uint8_t straggler[10];
    uint32_t sample[5];
    unsigned want_late = 0;

    /* A generous deadline with no stragglers: nobody is late, and the
     * weighted mean trains as the pre-scaled one does. */
    run_deadline(1, "round_deadline: 60", &fast);
    cr_assert_eq(num(fast.summary, "late_clients"), 0);
    cr_assert_eq(num(fast.summary, "client_rounds"), 10 * 5);
    cr_assert_geq(num(fast.summary, "test_accuracy_last5"), 0.7);

    /* Three clients a million times slower: exactly their draws are late
     * (the others train in well under the minute). */
    run_deadline(2,
                 "round_deadline: 60\nstraggler_fraction: 0.3\n"
                 "straggler_slowdown: 1000000",
                 &slow);
    cr_assert_eq(fedavg_stragglers(10, 0.3, 1, straggler), FLPS_OK);
    for (uint64_t r = 0; r < 10; r++) {
        cr_assert_eq(fedavg_sample(10, 0.5, 1, r, sample), FLPS_OK);
        for (int k = 0; k < 5; k++)
            want_late += straggler[sample[k]];
    }
    cr_assert_gt(want_late, 0);
    cr_assert_eq(num(slow.summary, "late_clients"), want_late);
    cr_assert_eq(num(slow.summary, "client_rounds"), 10 * 5);
    cr_log_info("deadline, no stragglers: %.4f; %u late client-rounds: %.4f",
                num(fast.summary, "test_accuracy_last5"), want_late,
                num(slow.summary, "test_accuracy_last5"));
    /* Their deltas are gone, so the result is not that of the full run. */
    cr_assert_neq(num(slow.summary, "test_accuracy"),
                  num(fast.summary, "test_accuracy"));
    cr_assert_geq(num(slow.summary, "test_accuracy_last5"), 0.5);
    run_free(&fast);
    run_free(&slow);
}
