/* flrun runs examples/torch/mlp.py (PyTorch through python/flps) as a
 * command: job's workers: the job trains, its progress is on the screen
 * and its accuracy and bytes in the summary, as flworker's are; Adam and
 * AdamW with a sparse codec keep the accuracy of the same optimizer dense. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runcmd.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* Run a 2-worker, 1-server PyTorch job of `iterations` whose file adds
 * the lines `keys` and runs `command` (a flow list); its logs go to
 * dir/logs (dir: a fresh directory, PATH_MAX bytes, written when not
 * NULL). */
static void run_torch_job(const char *name, int iterations, const char *keys,
                          const char *command, run_result *r, char *dir_out)
{
    char dir[] = "/tmp/flrun-torch-XXXXXX", text[2048];

    cr_assert_not_null(mkdtemp(dir));
    snprintf(text, sizeof(text),
             "name: %s\nmodel: mlp\nworkers: 2\nservers: 1\n"
             "iterations: %d\n%scommand: %s\n"
             "env:\n  OMP_NUM_THREADS: '1'\n",
             name, iterations, keys, command);
    run_flrun_text(dir, text, r);
    if (dir_out != NULL)
        snprintf(dir_out, PATH_MAX, "%s", dir);
}

/* Run the torch MLP as a 2-worker, 1-server job of `iterations` with
 * compression comp, lr (the job file's), its further lines `extra`,
 * test_samples test images and mlp.py's further arguments `args` (", --flag,
 * value" items of the command's list, or ""); its logs go to dir/logs (dir_out
 * as run_torch_job's). */
static void run_mlp_job(const char *name, const char *comp, const char *lr,
                        int iterations, const char *extra,
                        const char *test_samples, const char *args,
                        run_result *r, char *dir_out)
{
    char keys[512], command[512];

    snprintf(keys, sizeof(keys),
             "batch_size: 32\nlr: %s\neval_every: %d\ncompression: %s\n%s", lr,
             iterations / 2, comp, extra);
    snprintf(command, sizeof(command),
             "[/usr/bin/python3, %s/examples/torch/mlp.py, --test-samples, "
             "'%s'%s]",
             FLPS_SOURCE_DIR, test_samples, args);
    run_torch_job(name, iterations, keys, command, r, dir_out);
}

/* The 300-iteration MLP job with compression comp. */
static void run_mlp(const char *name, const char *comp, run_result *r)
{
    run_mlp_job(name, comp, "0.05", 300, "", "2000", "", r, NULL);
}

Test(training_torch, the_torch_mlp_trains_as_a_command_job, .timeout = 600)
{
    run_result r;
    double acc;
    json_int_t sent, dense;

    run_mlp("torch-mlp", "dense", &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    acc = json_real_value(json_object_get(r.summary, "test_accuracy"));
    sent = json_integer_value(json_object_get(r.summary, "bytes_sent"));
    dense = json_integer_value(json_object_get(r.summary, "dense_bytes"));
    cr_log_info("torch mlp dense: test accuracy %.4f, sent %lld of %lld "
                "dense bytes",
                acc, (long long)sent, (long long)dense);
    /* Plain PyTorch (mlp.py --local) reaches 0.80 in 300 iterations. */
    cr_assert_gt(acc, 0.72, "test accuracy %.4f: %s", acc, r.err);
    cr_assert_eq(json_integer_value(json_object_get(r.summary, "iterations")),
                 300);
    /* 235146 parameters, 4 bytes each, 300 pushes by each of 2 workers. */
    cr_assert_gt(sent, 2LL * 300 * 235146 * 4, "%s", r.out);
    cr_assert_eq(sent, dense, "dense sends what dense would: %s", r.out);
    cr_assert_not_null(strstr(r.err, "iter 150/300  loss "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "iter 300/300  loss "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "iter 150: test accuracy "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "flrun: done in "), "%s", r.err);
    run_free(&r);
}

Test(training_torch, the_torch_mlp_with_gtopk_sends_a_few_percent_of_dense,
     .timeout = 600)
{
    run_result r;
    double acc, share;

    run_mlp("torch-mlp-gtopk", "gtopk:0.01", &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    acc = json_real_value(json_object_get(r.summary, "test_accuracy"));
    share =
        (double)json_integer_value(json_object_get(r.summary, "bytes_sent")) /
        (double)json_integer_value(json_object_get(r.summary, "dense_bytes"));
    cr_log_info("torch mlp gtopk:0.01: test accuracy %.4f, %.2f%% of dense",
                acc, 100 * share);
    cr_assert_lt(share, 0.03, "%.4f of dense: %s", share, r.out);
    cr_assert_gt(acc, 0.6, "test accuracy %.4f: %s", acc, r.err);
    run_free(&r);
}

Test(
    training_torch,
    compression_auto_profiles_the_torch_program_and_its_workers_follow_the_plan,
    .timeout = 600)
{
    char dir[] = "/tmp/flrun-torchauto-XXXXXX", job[160], cmd[1024];
    char text[1400], path[200];
    run_result r;
    double acc;

    /* Rank 0's package prints the profile after 25 iterations; flrun
     * plans it with LAGS and writes FLPS_PLAN_FILE; every rank applies
     * the plan and prints its plan event (kept by tee for the test). */
    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(text, sizeof(text),
             "name: torch-mlp-auto\nmodel: mlp\nworkers: 2\nservers: 1\n"
             "iterations: 120\nbatch_size: 32\nlr: 0.05\neval_every: 120\n"
             "compression: auto\n"
             "command: [/bin/sh, -c, '/usr/bin/python3 "
             "%s/examples/torch/mlp.py --test-samples 1000 | tee "
             "\"$OUT_DIR/out-$FLPS_RANK\"']\n"
             "env:\n  OMP_NUM_THREADS: '1'\n  OUT_DIR: %s\n",
             FLPS_SOURCE_DIR, dir);
    write_file(job, text);
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s/logs %s", FLPS_BIN_DIR,
             dir, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    cr_assert_not_null(strstr(r.err, "plan v1: "),
                       "flrun planned the program's profile: %s", r.err);
    cr_assert_null(strstr(r.err, "cannot plan"), "%s", r.err);
    for (int rank = 0; rank < 2; rank++) {
        char *out;
        snprintf(path, sizeof(path), "%s/out-%d", dir, rank);
        out = slurp(path);
        cr_assert_not_null(out, "no output of rank %d", rank);
        cr_assert_not_null(strstr(out, "\"event\":\"plan\",\"version\":1"),
                           "rank %d applied the plan: %s", rank, out);
        if (rank == 0)
            cr_assert_not_null(strstr(out, "{\"event\":\"profile\","
                                           "\"iteration\":25,"),
                               "%s", out);
        free(out);
    }
    acc = json_real_value(json_object_get(r.summary, "test_accuracy"));
    cr_log_info("torch mlp auto: test accuracy %.4f after 120 iterations", acc);
    cr_assert_gt(acc, 0.5, "test accuracy %.4f: %s", acc, r.err);
    run_free(&r);
}

Test(training_torch, the_job_files_density_warm_up_reaches_the_torch_program,
     .timeout = 600)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    run_result r;
    double acc, share;
    json_int_t warm, sent;
    char *log;

    /* flrun hands density_warmup to the program as FLPS_DENSITY_WARMUP;
     * flps.torch's clients register it with the shard, which logs it and
     * cuts gtopk to its schedule. (eval_every: 50, half the run.) */
    run_mlp_job("torch-mlp-warm", "gtopk:0.01", "0.05", 100,
                "density_warmup: 50\n", "1000", "", &r, dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    cr_assert_eq(
        json_integer_value(json_object_get(r.summary, "density_warmup")), 50);
    warm = json_integer_value(json_object_get(r.summary, "warmup_bytes_sent"));
    sent = json_integer_value(json_object_get(r.summary, "bytes_sent"));
    /* flps.report's done events carry it, as flworker's do: the first 50
     * iterations are the denser ones. */
    cr_assert_gt(warm, sent / 2, "%s", r.out);
    cr_assert_lt(warm, sent, "%s", r.out);
    snprintf(path, sizeof(path), "%s/logs/flps-0.log", dir);
    log = slurp(path);
    cr_assert_not_null(strstr(log, "density warm-up from 0.25 to 0.01 over 50 "
                                   "iterations"),
                       "the shard follows the program's warm-up: %s", log);
    free(log);
    acc = json_real_value(json_object_get(r.summary, "test_accuracy"));
    share =
        (double)json_integer_value(json_object_get(r.summary, "bytes_sent")) /
        (double)json_integer_value(json_object_get(r.summary, "dense_bytes"));
    cr_log_info("torch mlp gtopk:0.01, 50 of 100 iterations warming up from "
                "0.25: test accuracy %.4f, %.2f%% of dense",
                acc, 100 * share);
    /* Pairs are 8 bytes to dense's 4: gtopk:0.01 alone sends about 2% of
     * dense (under 3% in the test above); the warm-up's mean density over
     * its 50 iterations is 0.25 (0.04 - 1) / ln 0.04 = 0.075, so the run
     * sends about 2 (0.075 + 0.01) / 2 = 8.5% of dense. */
    cr_assert_gt(share, 0.06, "%.4f of dense: the warm-up sends more: %s",
                 share, r.out);
    cr_assert_lt(share, 0.12, "%.4f of dense: %s", share, r.out);
    cr_assert_gt(acc, 0.4, "test accuracy %.4f: %s", acc, r.err);
    run_free(&r);
}

/* The MLP with torch.optim.<optimizer> at the job file's lr 0.001 (the
 * optimizer follows it) and compression comp, 1000 iterations, tested on
 * all 10,000 test images. */
static void run_mlp_with(const char *optimizer, const char *comp, run_result *r)
{
    char name[64], args[128];

    snprintf(args, sizeof(args), ", --optimizer, %s", optimizer);
    snprintf(name, sizeof(name), "torch-mlp-%s", optimizer);
    run_mlp_job(name, comp, "0.001", 1000, "", "10000", args, r, NULL);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert_not_null(r->summary, "%s", r->out);
}

/* Gradient mode's update exchange (each worker's steps sent as top-k pairs
 * with error feedback) keeps Adam and AdamW at the accuracy of the same
 * optimizer dense: the same seed, 1000 iterations each. */
Test(training_torch, adam_and_adamw_with_gtopk_come_within_1_5_points_of_dense,
     .timeout = 1500)
{
    assert_adam_keeps_dense_accuracy("torch mlp", run_mlp_with, 0.8);
}

Test(training_torch, a_job_whose_peer_never_connects_fails_within_the_deadline,
     .timeout = 300)
{
    char dir[] = "/tmp/flrun-torchhang-XXXXXX", job[128], cmd[1024];
    char text[1024];
    run_result r;

    /* Rank 1 never joins: rank 0's first wait gives up after
     * FLPS_DEADLINE_MS and its error is the job's reason. */
    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(text, sizeof(text),
             "name: torch-hang\nmodel: mlp\nworkers: 2\niterations: 5\n"
             "command: [/bin/sh, -c, 'if [ $FLPS_RANK = 1 ]; then exec sleep "
             "299; fi; exec /usr/bin/python3 %s/examples/torch/mlp.py "
             "--test-samples 100']\n",
             FLPS_SOURCE_DIR);
    write_file(job, text);
    snprintf(cmd, sizeof(cmd), "FLPS_DEADLINE_MS=3000 %s/flrun %s",
             FLPS_BIN_DIR, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "flrun: job torch-hang failed: worker "
                                     "rank 0 (sh) exit status 1: "
                                     "flps.errors.TimedOutError: "),
                       "%s", r.err);
    cr_assert_not_null(strstr(r.err, "did not answer within 3 s"), "%s", r.err);
    cr_assert_eq(system("pgrep -f '[s]leep 299' >/dev/null"), 256,
                 "the rank that never joined was stopped");
    run_free(&r);
}

/* A new user's program (tests/integration/torch_user.py, written from
 * docs/python.md alone: Adam, no compression argument, no flps.report) as
 * a 200-iteration job whose file adds `keys`, with the program's extra
 * arguments `args` (", --flag, value"); its logs go to dir/logs (dir:
 * PATH_MAX bytes). */
static void run_user_job(const char *name, const char *keys, const char *args,
                         run_result *r, char *dir_out)
{
    char command[512];

    snprintf(command, sizeof(command),
             "[/usr/bin/python3, %s/tests/integration/torch_user.py%s]",
             FLPS_SOURCE_DIR, args);
    run_torch_job(name, 200, keys, command, r, dir_out);
}

Test(training_torch,
     the_job_files_compression_is_what_a_users_adam_program_runs,
     .timeout = 600)
{
    char dir[PATH_MAX];
    run_result r;
    double share;
    json_t *gaps;

    run_user_job("user-gtopk", "compression: gtopk:0.01\n", "", &r, dir);
    cr_assert_eq(r.status, 0, "no flps.report, and the job succeeds: %s",
                 r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    share =
        (double)json_integer_value(json_object_get(r.summary, "bytes_sent")) /
        (double)json_integer_value(json_object_get(r.summary, "dense_bytes"));
    cr_log_info("a user's Adam program under gtopk:0.01: %.2f%% of dense",
                100 * share);
    cr_assert_leq(share, 0.03, "%.4f of dense: %s", share, r.out);
    cr_assert_str_eq(
        json_string_value(json_object_get(r.summary, "compression")),
        "gtopk:0.01", "what the workers ran: %s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(r.summary, "mode")),
                     "ssgd");
    cr_assert_str_eq(json_string_value(json_object_get(r.summary, "optimizer")),
                     "Adam");
    cr_assert_null(json_object_get(r.summary, "mismatch"), "%s", r.out);
    cr_assert(json_is_null(json_object_get(r.summary, "test_accuracy")));
    gaps = json_object_get(r.summary, "not_reported");
    cr_assert_str_eq(json_string_value(json_array_get(gaps, 0)),
                     "test_accuracy", "%s", r.out);
    cr_assert_eq(json_array_size(gaps), 1, "every rank's done came: %s", r.out);
    cr_assert_not_null(strstr(r.err, "flrun: not reported: a test accuracy"),
                       "%s", r.err);
    cr_assert_null(strstr(r.err, "MISMATCH"), "%s", r.err);
    run_free(&r);
}

Test(training_torch, the_job_files_async_mode_is_what_a_users_program_runs,
     .timeout = 600)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    unsigned long long pushes = 0, updates = 0;
    const char *served;
    char *log;
    run_result r;

    run_user_job("user-async", "mode: async\n", "", &r, dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(r.summary, "mode")),
                     "async", "%s", r.out);
    /* Synchronous, the shard would close one update per iteration of
     * both workers' pushes (2000 pushes, 1000 updates); asynchronous, it
     * applies every push as it comes. */
    snprintf(path, sizeof(path), "%s/logs/flps-0.log", dir);
    log = slurp(path);
    served = strstr(log, "served ");
    cr_assert_not_null(served, "%s", log);
    cr_assert_eq(
        sscanf(served, "served %llu pushes, %llu updates", &pushes, &updates),
        2, "%s", served);
    cr_log_info("a user's Adam program under mode: async: %llu pushes, %llu "
                "updates",
                pushes, updates);
    cr_assert_gt(pushes, 0);
    cr_assert_eq(updates, pushes, "%s", log);
    cr_assert_not_null(strstr(log, "async: a push was at most"), "%s", log);
    free(log);
    run_free(&r);
}

Test(training_torch, an_argument_that_contradicts_the_job_file_fails_the_job,
     .timeout = 600)
{
    char dir[PATH_MAX];
    run_result r;

    run_user_job("user-contra", "compression: gtopk:0.01\n",
                 ", --compression, dense", &r, dir);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(
        strstr(r.err, "flps.errors.ConfigError: compression='dense' "
                      "contradicts the job file's compression: gtopk:0.01 "
                      "(FLPS_COMPRESSION); drop the argument or change the "
                      "job file"),
        "%s", r.err);
    run_free(&r);
}
