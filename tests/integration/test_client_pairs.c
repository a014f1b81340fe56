/* flps_client_push_pairs against real flps shards: pairs the caller
 * selected (top-k with its own error feedback, as a GPU worker does) must
 * train exactly as flps_client_push's own selection does, the taken mask
 * must be the pushed pairs the shards' update kept, and bad pairs are
 * refused with nothing sent. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flps.h"
#include "spawn.h"

#define NT 2
#define NW 3
#define MAXN 40
/* Part size 8 over 2 shards: t0 = 40 -> 5 parts, t1 = 13 -> 8 + 5. */
static const size_t numel[NT] = {40, 13};
static const char *const names[NT] = {"fc.weight", "fc.bias"};

typedef struct worker {
    float data[NT][MAXN];
    flps_tensor tensors[NT];
    flps_client *c;
} worker;

/* The shards a test started and has not stopped yet: a failed assertion
 * ends the test at once, and the suite's fini stops what it left. */
static pid_t running[8];

static void track(pid_t pid, pid_t replace)
{
    for (size_t i = 0; i < sizeof(running) / sizeof(running[0]); i++)
        if (running[i] == replace) {
            running[i] = pid;
            return;
        }
}

static void stop_leftovers(void)
{
    for (size_t i = 0; i < sizeof(running) / sizeof(running[0]); i++)
        if (running[i] > 0) {
            test_shard s = {.pid = running[i]};
            test_shard_stop(&s, SIGKILL);
            running[i] = 0;
        }
}

TestSuite(client_pairs, .fini = stop_leftovers);

static void start_shards(test_shard *s, const char *job, char *dir)
{
    char log[200], idx[16];

    cr_assert_not_null(mkdtemp(dir));
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--job",    job, "--shard", idx,
                              "--shards", "2", NULL};
        snprintf(idx, sizeof(idx), "%d", i);
        snprintf(log, sizeof(log), "%s/s%d.log", dir, i);
        cr_assert_eq(test_shard_start(&s[i], log, args), 0,
                     "shard %d of %s did not start", i, job);
        track(s[i].pid, 0);
    }
}

static void stop_shards(test_shard *s)
{
    for (int i = 0; i < 2; i++) {
        track(0, s[i].pid);
        cr_assert_eq(test_shard_stop(&s[i], SIGTERM), 0);
    }
}

/* Worker rank of job on shards s; rank 0 offers init(t, i) as the model. */
static void worker_init(worker *w, const char *job, uint32_t rank,
                        const test_shard *s, const char *compression,
                        float (*init)(int, size_t))
{
    flps_client_config cfg;
    const char *servers[2] = {s[0].endpoint, s[1].endpoint};

    memset(w, 0, sizeof(*w));
    for (int t = 0; t < NT; t++) {
        for (size_t i = 0; i < numel[t]; i++)
            w->data[t][i] = rank == 0 ? init(t, i) : -999.0f;
        w->tensors[t].name = names[t];
        w->tensors[t].numel = numel[t];
        w->tensors[t].data = w->data[t];
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = job;
    cfg.rank = rank;
    cfg.workers = NW;
    cfg.servers = servers;
    cfg.nservers = 2;
    cfg.tensors = w->tensors;
    cfg.ntensors = NT;
    cfg.part_size = 8;
    cfg.compression = compression;
    cfg.lr = 0.5;
    cfg.retry_ms = 300;
    cfg.deadline_ms = 20000;
    cr_assert_eq(flps_client_create(&cfg, &w->c), FLPS_OK,
                 "rank %u of %s could not register", rank, job);
}

static void start_job(worker *w, const char *job, const test_shard *s,
                      const char *compression, float (*init)(int, size_t))
{
    for (uint32_t r = 0; r < NW; r++)
        worker_init(&w[r], job, r, s, compression, init);
    for (int r = 0; r < NW; r++)
        cr_assert_eq(flps_client_init(w[r].c), FLPS_OK, "%s",
                     flps_client_last_error(w[r].c));
}

static void stop_job(worker *w)
{
    for (int r = 0; r < NW; r++)
        flps_client_destroy(w[r].c);
}

static float init_mixed(int t, size_t i)
{
    return sinf((float)(t * 50 + (int)i)) * 0.1f;
}

static float init_zero(int t, size_t i)
{
    (void)t;
    (void)i;
    return 0.0f;
}

/* Gradients of no pattern, both signs: no two |a| tie in practice. */
static float grad_mixed(int r, uint64_t it, int t, size_t i)
{
    return sinf((float)(r * 131 + (int)it * 17 + t * 7) + (float)i * 1.37f) *
           (1.0f + 0.1f * (float)i);
}

/* Positive, so every sum a shard forms is non-zero: an update's indices
 * are exactly the elements of the replica that change. */
static float grad_positive(int r, uint64_t it, int t, size_t i)
{
    return 0.25f + fabsf(grad_mixed(r, it, t, i));
}

/* The k largest |a| of a[0..n), ties to the lower index (libflps's rule),
 * listed in descending index order (not the order libflps sends). */
static size_t select_topk(const float *a, size_t n, size_t k, uint32_t *idx)
{
    int chosen[MAXN] = {0};
    size_t m = 0;

    for (size_t q = 0; q < k; q++) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (!chosen[i] && (best == n || fabsf(a[i]) > fabsf(a[best])))
                best = i;
        chosen[best] = 1;
    }
    for (size_t i = n; i-- > 0;)
        if (chosen[i])
            idx[m++] = (uint32_t)i;
    return m;
}

/* The caller's side of error feedback for one worker: residual r per
 * layer, the pairs of its last push. */
typedef struct caller {
    float r[NT][MAXN];
    uint32_t idx[NT][MAXN];
    float val[NT][MAXN];
    size_t n[NT];
} caller;

/* Select top-k of r + g into the caller's pairs and push them. */
static void push_selected(worker *w, caller *cl, int r, uint64_t it,
                          float (*grad)(int, uint64_t, int, size_t),
                          double density)
{
    for (int t = NT - 1; t >= 0; t--) {
        float a[MAXN];
        size_t k = (size_t)floor(density * (double)numel[t]);
        if (k < 1)
            k = 1;
        for (size_t i = 0; i < numel[t]; i++)
            a[i] = cl->r[t][i] + grad(r, it, t, i);
        cl->n[t] = select_topk(a, numel[t], k, cl->idx[t]);
        for (size_t i = 0; i < numel[t]; i++)
            cl->r[t][i] = a[i];
        for (size_t j = 0; j < cl->n[t]; j++) {
            cl->val[t][j] = a[cl->idx[t][j]];
            cl->r[t][cl->idx[t][j]] = 0;
        }
        cr_assert_eq(flps_client_push_pairs(w->c, (uint32_t)t, cl->idx[t],
                                            cl->val[t], cl->n[t], it),
                     FLPS_OK, "%s", flps_client_last_error(w->c));
    }
}

/* After the wait: what the shards did not take goes back into r; returns
 * how many pairs that was. */
static size_t add_back(worker *w, caller *cl, uint8_t taken[NT][MAXN])
{
    size_t back = 0;

    for (int t = 0; t < NT; t++) {
        cr_assert_eq(
            flps_client_pairs_taken(w->c, (uint32_t)t, taken[t], cl->n[t]),
            FLPS_OK);
        for (size_t j = 0; j < cl->n[t]; j++)
            if (!taken[t][j]) {
                cl->r[t][cl->idx[t][j]] += cl->val[t][j];
                back++;
            }
    }
    return back;
}

static void same_training_as_libflps_topk(const char *compression,
                                          double density, const char *tag)
{
    char dir_a[] = "/tmp/flps-pairs-XXXXXX", dir_b[] = "/tmp/flps-pairs-XXXXXX";
    char job_a[32], job_b[32];
    test_shard sa[2], sb[2];
    worker *a = calloc(NW, sizeof(*a)), *b = calloc(NW, sizeof(*b));
    caller *cl = calloc(NW, sizeof(*cl));
    size_t back = 0;

    cr_assert(a != NULL && b != NULL && cl != NULL);
    snprintf(job_a, sizeof(job_a), "own-%s", tag);
    snprintf(job_b, sizeof(job_b), "pairs-%s", tag);
    start_shards(sa, job_a, dir_a);
    start_shards(sb, job_b, dir_b);
    start_job(a, job_a, sa, compression, init_mixed);
    start_job(b, job_b, sb, compression, init_mixed);
    for (uint64_t it = 0; it < 8; it++) {
        uint8_t taken[NT][MAXN];
        for (int r = 0; r < NW; r++) {
            for (int t = NT - 1; t >= 0; t--) {
                float g[MAXN];
                for (size_t i = 0; i < numel[t]; i++)
                    g[i] = grad_mixed(r, it, t, i);
                cr_assert_eq(flps_client_push(a[r].c, (uint32_t)t, g, it),
                             FLPS_OK, "%s", flps_client_last_error(a[r].c));
            }
            push_selected(&b[r], &cl[r], r, it, grad_mixed, density);
        }
        for (int r = 0; r < NW; r++) {
            cr_assert_eq(flps_client_wait(a[r].c, it), FLPS_OK, "%s",
                         flps_client_last_error(a[r].c));
            cr_assert_eq(flps_client_wait(b[r].c, it), FLPS_OK, "%s",
                         flps_client_last_error(b[r].c));
            back += add_back(&b[r], &cl[r], taken);
        }
        for (int r = 0; r < NW; r++)
            for (int t = 0; t < NT; t++)
                for (size_t i = 0; i < numel[t]; i++)
                    cr_assert_eq(memcmp(&a[r].data[t][i], &b[r].data[t][i],
                                        sizeof(float)),
                                 0,
                                 "%s iteration %llu rank %d tensor %d "
                                 "element %zu: own top-k %.9g, pairs %.9g",
                                 compression, (unsigned long long)it, r, t, i,
                                 (double)a[r].data[t][i],
                                 (double)b[r].data[t][i]);
    }
    if (strncmp(compression, "gtopk", 5) == 0)
        cr_assert_gt(back, 0,
                     "gtopk must have left pairs out (the test "
                     "would check nothing of the mask)");
    else
        cr_assert_eq(back, 0, "topk takes every pushed pair");
    {
        /* The caller's residual is the one libflps keeps on its own. */
        for (int r = 0; r < NW; r++)
            for (uint32_t t = 0; t < NT; t++) {
                double own = 0, ss = 0;
                cr_assert_eq(flps_client_residual_norm(a[r].c, t, &own),
                             FLPS_OK);
                for (size_t i = 0; i < numel[t]; i++)
                    ss += (double)cl[r].r[t][i] * cl[r].r[t][i];
                cr_assert_float_eq(sqrt(ss), own, 1e-5 * (1 + own),
                                   "rank %d tensor %u residual %g vs %g", r, t,
                                   sqrt(ss), own);
            }
    }
    stop_job(a);
    stop_job(b);
    stop_shards(sa);
    stop_shards(sb);
    free(a);
    free(b);
    free(cl);
}

Test(client_pairs,
     pairs_of_libflps_own_topk_selection_give_bit_identical_updates_for_topk,
     .timeout = 90)
{
    same_training_as_libflps_topk("topk:0.25", 0.25, "topk");
}

Test(client_pairs,
     pairs_of_libflps_own_topk_selection_give_bit_identical_updates_for_gtopk,
     .timeout = 90)
{
    same_training_as_libflps_topk("gtopk:0.25", 0.25, "gtopk");
}

Test(client_pairs,
     the_pairs_not_taken_are_the_pushed_pairs_minus_the_updates_indices,
     .timeout = 90)
{
    char dir[] = "/tmp/flps-pairs-XXXXXX";
    test_shard s[2];
    worker *w = calloc(NW, sizeof(*w));
    caller *cl = calloc(NW, sizeof(*cl));
    size_t rejected = 0, taken_total = 0;

    cr_assert(w != NULL && cl != NULL);
    start_shards(s, "pairs-mask", dir);
    start_job(w, "pairs-mask", s, "gtopk:0.25", init_zero);
    for (uint64_t it = 0; it < 5; it++) {
        float before[NT][MAXN];
        int pushed[NT][MAXN] = {{0}};
        memcpy(before, w[0].data, sizeof(before));
        for (int r = 0; r < NW; r++) {
            push_selected(&w[r], &cl[r], r, it, grad_positive, 0.25);
            for (int t = 0; t < NT; t++)
                for (size_t j = 0; j < cl[r].n[t]; j++)
                    pushed[t][cl[r].idx[t][j]] = 1;
        }
        for (int r = 0; r < NW; r++) {
            uint8_t taken[NT][MAXN];
            cr_assert_eq(flps_client_wait(w[r].c, it), FLPS_OK, "%s",
                         flps_client_last_error(w[r].c));
            for (int t = 0; t < NT; t++) {
                cr_assert_eq(flps_client_pairs_taken(w[r].c, (uint32_t)t,
                                                     taken[t], cl[r].n[t]),
                             FLPS_OK);
                for (size_t j = 0; j < cl[r].n[t]; j++) {
                    uint32_t i = cl[r].idx[t][j];
                    int in_update = w[0].data[t][i] != before[t][i];
                    cr_assert_eq(taken[t][j], in_update,
                                 "iteration %llu rank %d tensor %d pair %zu "
                                 "(element %u): taken %d, in the update %d",
                                 (unsigned long long)it, r, t, j, i,
                                 taken[t][j], in_update);
                    rejected += !taken[t][j];
                    taken_total += taken[t][j];
                }
            }
            add_back(&w[r], &cl[r], taken);
        }
        /* The update holds nothing nobody pushed, and at most the k of
         * each part (8 elements -> k = 2; t1's part of 5 -> 1). */
        for (int t = 0; t < NT; t++) {
            size_t changed = 0;
            for (size_t i = 0; i < numel[t]; i++) {
                int ch = w[0].data[t][i] != before[t][i];
                cr_assert(!ch || pushed[t][i],
                          "element %zu of tensor %d changed unpushed", i, t);
                changed += ch;
            }
            cr_assert_leq(changed, t == 0 ? 5 * 2 : 2 + 1);
            cr_assert_gt(changed, 0);
        }
    }
    cr_assert_gt(rejected, 0);
    cr_assert_gt(taken_total, 0);
    stop_job(w);
    stop_shards(s);
    free(w);
    free(cl);
}

Test(client_pairs, bad_pairs_are_refused_with_nothing_sent_and_nothing_sticky,
     .timeout = 90)
{
    char dir[] = "/tmp/flps-pairs-XXXXXX", dir2[] = "/tmp/flps-pairs-XXXXXX";
    test_shard s[2], s2[2];
    worker *w = calloc(NW, sizeof(*w));
    uint32_t idx[MAXN + 1];
    float val[MAXN + 1];
    uint8_t taken[MAXN + 1];
    flps_client_stats st0, st1;

    cr_assert_not_null(w);
    for (size_t j = 0; j <= MAXN; j++) {
        idx[j] = (uint32_t)(MAXN - 1 - j % MAXN);
        val[j] = 0.5f;
    }
    start_shards(s, "pairs-bad", dir);
    start_job(w, "pairs-bad", s, "gtopk:0.25", init_zero);
    flps_client_get_stats(w[0].c, &st0);
    {
        uint32_t out[2] = {3, 40}, dup[3] = {5, 9, 5}, one[1] = {2};
        float nan[2] = {1.0f, NAN}, inf[1] = {INFINITY};
        flps_client *c = w[0].c;
        cr_assert_eq(flps_client_push_pairs(c, 0, out, val, 2, 0), FLPS_ERANGE,
                     "index 40 of a tensor of 40");
        cr_assert_eq(flps_client_push_pairs(c, 0, dup, val, 3, 0), FLPS_EINVAL,
                     "index 5 twice");
        cr_assert_eq(flps_client_push_pairs(c, 0, idx, nan, 2, 0),
                     FLPS_ENONFINITE);
        cr_assert_eq(flps_client_push_pairs(c, 1, one, inf, 1, 0),
                     FLPS_ENONFINITE);
        cr_assert_eq(flps_client_push_pairs(c, 0, idx, val, MAXN + 1, 0),
                     FLPS_EINVAL, "41 pairs for 40 elements");
        cr_assert_eq(flps_client_push_pairs(c, 0, NULL, val, 1, 0),
                     FLPS_EINVAL);
        cr_assert_eq(flps_client_push_pairs(c, 0, idx, NULL, 1, 0),
                     FLPS_EINVAL);
        cr_assert_eq(flps_client_push_pairs(c, NT, one, val, 1, 0),
                     FLPS_EINVAL);
        cr_assert_eq(flps_client_pairs_taken(c, 0, taken, 0), FLPS_ESTATE,
                     "nothing pushed as pairs yet");
        cr_assert_str_eq(flps_client_last_error(c), "", "none is sticky");
        flps_client_get_stats(c, &st1);
        cr_assert_eq(st1.pushes, st0.pushes, "a refused push sends nothing");
        cr_assert_eq(st1.bytes_sent, st0.bytes_sent);
    }
    /* Iteration 0 goes on as if nothing happened: every element of t0 in
     * any order (it may exceed k), nothing of t1. */
    for (int r = 0; r < NW; r++) {
        cr_assert_eq(flps_client_push_pairs(w[r].c, 0, idx, val, MAXN, 0),
                     FLPS_OK, "%s", flps_client_last_error(w[r].c));
        cr_assert_eq(flps_client_push_pairs(w[r].c, 1, NULL, NULL, 0, 0),
                     FLPS_OK, "%s", flps_client_last_error(w[r].c));
    }
    cr_assert_eq(flps_client_pairs_taken(w[0].c, 0, taken, MAXN), FLPS_ESTATE,
                 "the update has not arrived");
    for (int r = 0; r < NW; r++)
        cr_assert_eq(flps_client_wait(w[r].c, 0), FLPS_OK, "%s",
                     flps_client_last_error(w[r].c));
    {
        size_t kept = 0;
        uint8_t again[MAXN];
        uint32_t dup[2] = {1, 1};
        cr_assert_eq(flps_client_pairs_taken(w[0].c, 0, taken, MAXN - 1),
                     FLPS_EINVAL, "n is not the pushed count");
        cr_assert_eq(flps_client_pairs_taken(w[0].c, 0, NULL, MAXN),
                     FLPS_EINVAL);
        cr_assert_eq(flps_client_pairs_taken(w[0].c, 0, taken, MAXN), FLPS_OK);
        for (size_t j = 0; j < MAXN; j++)
            kept += taken[j];
        /* All equal sums: gtopk keeps k = 2 of each of the 5 parts. */
        cr_assert_eq(kept, 10);
        cr_assert_eq(flps_client_pairs_taken(w[0].c, 1, NULL, 0), FLPS_OK);
        /* A refused push keeps the last push's mask. */
        cr_assert_eq(flps_client_push_pairs(w[0].c, 0, dup, val, 2, 1),
                     FLPS_EINVAL);
        cr_assert_eq(flps_client_pairs_taken(w[0].c, 0, again, MAXN), FLPS_OK);
        cr_assert_arr_eq(again, taken, MAXN);
    }
    /* After a push of the gradient the tensor has no pairs to tell of. */
    {
        float g[MAXN] = {0};
        for (int r = 0; r < NW; r++)
            for (int t = NT - 1; t >= 0; t--)
                cr_assert_eq(flps_client_push(w[r].c, (uint32_t)t, g, 1),
                             FLPS_OK);
        for (int r = 0; r < NW; r++)
            cr_assert_eq(flps_client_wait(w[r].c, 1), FLPS_OK);
        cr_assert_eq(flps_client_pairs_taken(w[0].c, 0, taken, MAXN),
                     FLPS_ESTATE);
    }
    stop_job(w);
    stop_shards(s);

    /* A job whose shards add dense values takes no pairs. */
    start_shards(s2, "pairs-dense", dir2);
    start_job(w, "pairs-dense", s2, "fp16", init_zero);
    cr_assert_eq(flps_client_push_pairs(w[0].c, 0, idx, val, 2, 0),
                 FLPS_ESTATE);
    cr_assert_str_eq(flps_client_last_error(w[0].c), "", "not sticky");
    stop_job(w);
    stop_shards(s2);
    free(w);
}
