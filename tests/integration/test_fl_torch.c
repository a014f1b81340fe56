/* flps.fl, a PyTorch program as a fedavg job's clients (issue 24), under
 * flrun: one job file run by flworker (the built-in mlp) and by the
 * PyTorch MLP of examples/torch/fl samples the same clients every round
 * and splits the data alike; a client killed mid-round is a late client,
 * not a failed job. (The same under flsched: test_cluster_torch.c.) */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flps.h"
#include "runcmd.h"

/* The keys both runs share: examples/fmnist-mlp-fedavg.yaml's, shortened. */
#define FL_KEYS                                                                \
    "partition: dirichlet:0.5\nworkers: 2\nservers: 1\nmode: fedavg\n"         \
    "clients: 10\nclient_fraction: 0.5\nrounds: %d\nlocal_steps: 2\n"          \
    "batch_size: 32\nlr: 0.05\nmomentum: 0.9\nseed: %d\neval_every: 0\n"

#define ROUNDS 6

/* Rank 0's round_clients of every round, from its events (flrun keeps
 * them beside its log): sample[r][k]. */
static void round_clients(const char *log, uint32_t sample[ROUNDS][5])
{
    char *text = slurp(log);
    const char *p = text;
    json_t *j;
    int n = 0;

    while ((j = next_event(&p, "progress")) != NULL) {
        json_t *ids = json_object_get(j, "round_clients");
        json_int_t it = json_integer_value(json_object_get(j, "iter"));

        cr_assert(it >= 1 && it <= ROUNDS, "round %lld", (long long)it);
        cr_assert_eq(json_array_size(ids), 5, "%s: round %lld", log,
                     (long long)it);
        for (size_t k = 0; k < 5; k++)
            sample[it - 1][k] =
                (uint32_t)json_integer_value(json_array_get(ids, k));
        json_decref(j);
        n++;
    }
    cr_assert_eq(n, ROUNDS, "%s: a progress line per round, %d", log, n);
    free(text);
}

static void run_in(const char *tag, const char *text, run_result *r, char *dir,
                   size_t len)
{
    snprintf(dir, len, "/tmp/flps-fl-%s-XXXXXX", tag);
    cr_assert_not_null(mkdtemp(dir));
    run_flrun_text(dir, text, r);
    cr_assert_eq(r->status, 0, "flrun (%s) failed:\n%s", tag, r->err);
    cr_assert_not_null(r->summary, "no summary:\n%s", r->out);
}

Test(fl_torch, c_and_python_clients_of_one_job_file_sample_the_same_clients,
     .timeout = 600)
{
    char text[2048], cdir[64], pdir[64], log[128];
    uint32_t c_sample[ROUNDS][5], py_sample[ROUNDS][5], want[5];
    run_result c, py;

    snprintf(text, sizeof(text), "name: c-fl\nmodel: mlp\n" FL_KEYS, ROUNDS, 5);
    run_in("c", text, &c, cdir, sizeof(cdir));
    snprintf(text, sizeof(text),
             "name: py-fl\n" FL_KEYS
             "command: [/usr/bin/python3, %s/examples/torch/fl/mlp.py,"
             " --test-samples, '500']\nenv:\n  OMP_NUM_THREADS: '1'\n",
             ROUNDS, 5, FLPS_SOURCE_DIR);
    run_in("py", text, &py, pdir, sizeof(pdir));
    snprintf(log, sizeof(log), "%s/logs/flworker-0.events", cdir);
    round_clients(log, c_sample);
    snprintf(log, sizeof(log), "%s/logs/worker-0.events", pdir);
    round_clients(log, py_sample);
    for (int r = 0; r < ROUNDS; r++) {
        cr_assert_eq(flps_fl_sample(5, (uint64_t)r, 10, 0.5, want, 5), FLPS_OK);
        cr_assert_arr_eq(c_sample[r], want, sizeof(want),
                         "flworker's round %d is libflps's sample", r);
        cr_assert_arr_eq(py_sample[r], c_sample[r], sizeof(want),
                         "round %d: the Python clients are flworker's", r);
    }
    /* The same split of the training set, by the same labels. */
    cr_assert(json_equal(json_object_get(c.summary, "samples_per_client"),
                         json_object_get(py.summary, "samples_per_client")),
              "the clients' sample counts differ");
    cr_assert_eq(num(c.summary, "partition_skew"),
                 num(py.summary, "partition_skew"));
    cr_assert_str_eq(json_string_value(json_object_get(py.summary, "mode")),
                     "fedavg", "the program's done events say what ran");
    run_free(&c);
    run_free(&py);
}

/* fl_user.py (tests/integration) as a job of 6 clients, half per round,
 * with the env line extra. */
static void killer_job(char *text, size_t len, const char *extra)
{
    snprintf(text, len,
             "name: fl-kill\nworkers: 2\nservers: 1\nmode: fedavg\n"
             "clients: 6\nclient_fraction: 0.5\nrounds: 4\nlocal_steps: 5\n"
             "batch_size: 32\nlr: 0.1\nmomentum: 0.9\nseed: 3\n"
             "eval_every: 2\n"
             "command: [/usr/bin/python3, %s/tests/integration/fl_user.py]\n"
             "env:\n  OMP_NUM_THREADS: '1'\n%s",
             FLPS_SOURCE_DIR, extra);
}

Test(fl_torch, a_client_killed_mid_round_is_late_and_the_job_succeeds,
     .timeout = 600)
{
    char text[2048], dir[64];
    uint32_t sample[3];
    run_result r;

    /* Round 3 (0 first) samples client 1, which kills its own process in
     * its first local step. */
    cr_assert_eq(flps_fl_sample(3, 3, 6, 0.5, sample, 3), FLPS_OK);
    cr_assert(sample[0] == 1 || sample[1] == 1 || sample[2] == 1);
    killer_job(text, sizeof(text), "  FL_KILL: '1:3'\n");
    run_in("kill", text, &r, dir, sizeof(dir));
    cr_assert_eq(num(r.summary, "late_clients"), 1, "%s", r.out);
    cr_assert_eq(num(r.summary, "client_rounds"), 4 * 3);
    cr_assert_eq(num(r.summary, "rounds"), 4);
    cr_assert_not_null(strstr(r.err, "1 (its process died of signal 9)"),
                       "the worker says which client was late:\n%s", r.err);
    cr_assert_gt(num(r.summary, "test_accuracy"), 0.5);
    run_free(&r);
}
