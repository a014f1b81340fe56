/* Density warm-up end to end: two flworker ranks on two real flps shards
 * push, iteration by iteration, the number of pairs the schedule gives
 * (codec_warmup_density), so their bytes per iteration fall as it says
 * and settle at the target's once the warm-up is over. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compress/codec.h"
#include "runcmd.h"
#include "spawn.h"

#define ITERS 40
#define WARMUP 30
#define START 0.5

static const size_t mlp_numel[] = {200704, 256, 32768, 128, 1280, 10};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* rm -r of a directory this test made under /tmp. */
static void remove_dir(const char *dir)
{
    char cmd[256];

    cr_assert(strncmp(dir, "/tmp/flps-warmup", 16) == 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The pairs one worker pushes in iteration t: each layer's k of the
 * iteration's density. */
static double pairs_at(double target, uint64_t t)
{
    double d = codec_warmup_density(START, target, WARMUP, t);
    codec_spec cs = {CODEC_TOPK, d, 0};
    size_t k = 0;

    for (size_t i = 0; i < sizeof(mlp_numel) / sizeof(mlp_numel[0]); i++)
        k += codec_count_for(&cs, mlp_numel[i]);
    return (double)k;
}

/* What a pair may take on the wire beyond 5 bytes (its f32 value and a
 * one-byte index gap), over a whole push of the model: a gap of 128 or
 * more takes a second byte, and a part of n elements has at most n / 128
 * such gaps, n / 16384 of three bytes, and so on (proto/msg.h). */
static double index_bytes_beyond_one(void)
{
    double e = 0;

    for (size_t i = 0; i < sizeof(mlp_numel) / sizeof(mlp_numel[0]); i++)
        for (double g = 128; g <= (double)mlp_numel[i]; g *= 128)
            e += floor((double)mlp_numel[i] / g);
    return e;
}

/* bytes_sent and elements_sent after each iteration, from the progress
 * lines (one per iteration: the job has fewer than 100). */
static void sent_per_iteration(const char *out, double *sent, double *elems)
{
    const char *p = out;
    json_t *j;
    int n = 0;

    while ((j = next_event(&p, "progress")) != NULL) {
        json_int_t it = json_integer_value(json_object_get(j, "iter"));
        cr_assert(it >= 1 && it <= ITERS);
        sent[it - 1] =
            (double)json_integer_value(json_object_get(j, "bytes_sent"));
        elems[it - 1] =
            (double)json_integer_value(json_object_get(j, "elements_sent"));
        n++;
        json_decref(j);
    }
    cr_assert_eq(n, ITERS, "a progress line per iteration: %d", n);
}

static void run_job(const char *comp, double target)
{
    char dir[] = "/tmp/flps-warmup-XXXXXX", job[160], text[512], cmd[2048];
    char logs[2][160], out1[200];
    test_shard s[2];
    run_result r;
    double sent[2][ITERS], elems[2][ITERS];
    const double extra = index_bytes_beyond_one();
    char *o1;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/warm.yaml", dir);
    snprintf(text, sizeof(text),
             "name: warm\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
             "servers: 2\niterations: %d\neval_every: 0\ncompression: %s\n"
             "density_warmup: %d\ndensity_warmup_start: %g\n",
             ITERS, comp, WARMUP, START);
    write_file(job, text);
    for (int i = 0; i < 2; i++) {
        char shard[4];
        const char *args[] = {"--job",    "warm", "--shard", shard,
                              "--shards", "2",    NULL};
        snprintf(shard, sizeof(shard), "%d", i);
        snprintf(logs[i], sizeof(logs[i]), "%s/shard%d.log", dir, i);
        cr_assert_eq(test_shard_start(&s[i], logs[i], args), 0);
    }
    snprintf(out1, sizeof(out1), "%s/rank1.out", dir);
    /* Both ranks at once: the shards close an iteration only when both
     * pushed it. Rank 1's stdout goes to a file, rank 0's is captured. */
    snprintf(cmd, sizeof(cmd),
             "(%s/flworker --job %s --rank 1 --servers %s,%s >%s 2>&1 & "
             "%s/flworker --job %s --rank 0 --servers %s,%s; st=$?; wait $! "
             "|| st=1; exit $st)",
             FLPS_BIN_DIR, job, s[0].endpoint, s[1].endpoint, out1,
             FLPS_BIN_DIR, job, s[0].endpoint, s[1].endpoint);
    run_cmd(cmd, &r);
    cr_assert_eq(test_shard_stop(&s[0], SIGTERM), 0);
    cr_assert_eq(test_shard_stop(&s[1], SIGTERM), 0);
    cr_assert_eq(r.status, 0, "flworker failed:\n%s", r.err);
    o1 = slurp(out1);
    sent_per_iteration(r.out, sent[0], elems[0]);
    sent_per_iteration(o1, sent[1], elems[1]);
    free(o1);

    for (int w = 0; w < 2; w++) {
        /* Per iteration from iteration 1 on (iteration 0's line also
         * holds the start-up messages): the pairs the schedule gives,
         * exactly. The messages' headers are the same every iteration but
         * for a few varint bytes, and a pair takes 5 bytes on the wire
         * (its value, an index gap of a byte) and at most `extra` more
         * over the whole push, so after the warm-up b(t) = H + 5 pairs(t)
         * + e(t), 0 <= e <= extra, bounds H, and every earlier iteration
         * must carry its schedule's pairs at 5 bytes each, give or take
         * that. */
        double last = sent[w][ITERS - 1] - sent[w][ITERS - 2];
        double h = last - 5.0 * pairs_at(target, ITERS - 1);
        double prev = INFINITY;

        cr_assert_gt(h, 0, "headers take some bytes");
        for (uint64_t t = 1; t < ITERS; t++) {
            double b = sent[w][t] - sent[w][t - 1];
            double want = h + 5.0 * pairs_at(target, t);
            cr_assert_eq(elems[w][t] - elems[w][t - 1], pairs_at(target, t),
                         "%s rank %d iteration %llu: %.0f pairs, the "
                         "schedule says %.0f",
                         comp, w, (unsigned long long)t,
                         elems[w][t] - elems[w][t - 1], pairs_at(target, t));
            cr_assert_lt(fabs(b - want), 0.01 * want + 256 + extra,
                         "%s rank %d iteration %llu: %.0f bytes, the "
                         "schedule says %.0f",
                         comp, w, (unsigned long long)t, b, want);
            cr_assert_leq(b, prev + 64 + extra,
                          "%s rank %d: bytes rose at %llu", comp, w,
                          (unsigned long long)t);
            prev = b;
        }
        /* The first warm iterations carry about START / target times the
         * pairs of the last ones. */
        cr_assert_gt(sent[w][1] - sent[w][0], 20.0 * last,
                     "%s rank %d: %.0f vs %.0f", comp, w,
                     sent[w][1] - sent[w][0], last);
        /* Same schedule on both ranks: the same pairs, and the same
         * bytes to a few header bytes (the ranks' ids differ) and what
         * their own selections' index gaps take. */
        if (w == 1)
            for (int t = 1; t < ITERS; t++) {
                cr_assert_eq(elems[1][t] - elems[1][t - 1],
                             elems[0][t] - elems[0][t - 1],
                             "ranks' pairs differ at %d", t);
                cr_assert_lt(fabs((sent[1][t] - sent[1][t - 1]) -
                                  (sent[0][t] - sent[0][t - 1])),
                             64 + extra, "ranks differ at %d", t);
            }
    }
    {
        char *log0 = slurp(logs[0]);
        cr_assert_not_null(strstr(log0, "density warm-up from 0.5 to 0.01 "
                                        "over 30 iterations"),
                           "%s", log0);
        free(log0);
    }
    run_free(&r);
    {
        const char *names[] = {"warm.yaml", "rank1.out", "shard0.log",
                               "shard1.log"};
        for (size_t i = 0; i < 4; i++) {
            char p[200];
            snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
            unlink(p);
        }
        rmdir(dir);
    }
}

Test(warmup, gtopk_bytes_per_iteration_follow_the_schedule, .timeout = 300)
{
    run_job("gtopk:0.01", 0.01);
}

Test(warmup, topk_bytes_per_iteration_follow_the_schedule, .timeout = 300)
{
    run_job("topk:0.01", 0.01);
}

Test(warmup, flruns_summary_reports_the_warm_up_and_its_bytes, .timeout = 300)
{
    char dir[] = "/tmp/flps-warmupr-XXXXXX", job[160], cmd[1024];
    run_result r;
    double sent, warm;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/warmr.yaml", dir);
    write_file(job, "name: warmr\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
                    "servers: 2\niterations: 40\neval_every: 0\n"
                    "compression: gtopk:0.01\ndensity_warmup: 30\n"
                    "density_warmup_start: 0.5\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet --log-dir %s/logs %s",
             FLPS_BIN_DIR, dir, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "flrun failed:\n%s", r.err);
    cr_assert_not_null(r.summary, "no summary:\n%s", r.out);
    cr_assert_eq(num(r.summary, "density_warmup"), 30);
    cr_assert_eq(num(r.summary, "density_warmup_start"), 0.5);
    sent = num(r.summary, "bytes_sent");
    warm = num(r.summary, "warmup_bytes_sent");
    /* The 30 warm iterations carry most of the bytes (they start at 50
     * times the target's pairs), the 10 after them the rest. */
    cr_assert_gt(warm, 0.9 * sent, "%.0f of %.0f", warm, sent);
    cr_assert_lt(warm, sent);
    run_free(&r);
    remove_dir(dir);
}

Test(warmup, a_job_file_with_a_warm_up_flworker_cannot_run_starts_nothing)
{
    char dir[] = "/tmp/flps-warmupb-XXXXXX", job[160], cmd[1024];
    run_result r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/warmb.yaml", dir);
    write_file(job, "name: warmb\nmodel: mlp\ndataset: synthetic\n"
                    "iterations: 40\ncompression: fp16\ndensity_warmup: 10\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet --log-dir %s/logs %s",
             FLPS_BIN_DIR, dir, job);
    run_cmd(cmd, &r);
    cr_assert_neq(r.status, 0);
    cr_assert_not_null(strstr(r.err, "line 6: density_warmup: compression "
                                     "'fp16' has no selection density"),
                       "%s", r.err);
    run_free(&r);
    remove_dir(dir);
}
