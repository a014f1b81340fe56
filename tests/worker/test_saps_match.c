/* The blossom matching: maximum weight against an exhaustive search on
 * thousands of small graphs (odd, disconnected, needing blossoms), errors,
 * and its speed at SAPS's largest size. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "worker/saps_match.h"

#define MAXN 20

/* The best matching weight of the vertices in mask, by dynamic
 * programming over subsets: the lowest vertex of the set is either left
 * out or matched to one of the others. memo[mask] < 0: not known yet. */
static int64_t best_weight(uint32_t n, const int64_t *w, uint32_t mask,
                           int64_t *memo)
{
    int64_t best;
    uint32_t i, rest;

    if (mask == 0)
        return 0;
    if (memo[mask] >= 0)
        return memo[mask];
    i = (uint32_t)__builtin_ctz(mask);
    rest = mask & ~(1u << i);
    best = best_weight(n, w, rest, memo);
    for (uint32_t j = i + 1; j < n; j++) {
        if (!(rest & (1u << j)) || w[i * n + j] <= 0)
            continue;
        int64_t c = w[i * n + j] + best_weight(n, w, rest & ~(1u << j), memo);
        if (c > best)
            best = c;
    }
    memo[mask] = best;
    return best;
}

static int64_t brute_force(uint32_t n, const int64_t *w)
{
    size_t states = (size_t)1 << n;
    int64_t *memo = malloc(states * sizeof(*memo));
    int64_t r;

    cr_assert_not_null(memo);
    memset(memo, 0xff, states * sizeof(*memo));
    r = best_weight(n, w, (uint32_t)(states - 1), memo);
    free(memo);
    return r;
}

/* mate must be a matching of w's edges; returns its weight. */
static int64_t matching_weight(uint32_t n, const int64_t *w,
                               const int32_t *mate)
{
    int64_t sum = 0;

    for (uint32_t i = 0; i < n; i++) {
        int32_t j = mate[i];

        if (j < 0)
            continue;
        cr_assert_lt((uint32_t)j, n);
        cr_assert_neq((uint32_t)j, i, "vertex %u matched to itself", i);
        cr_assert_eq(mate[j], (int32_t)i, "mate not symmetric at %u", i);
        cr_assert_gt(w[i * n + (uint32_t)j], 0, "%u-%d is no edge", i, j);
        if ((uint32_t)j > i)
            sum += w[i * n + (uint32_t)j];
    }
    return sum;
}

static void set_edge(int64_t *w, uint32_t n, uint32_t i, uint32_t j, int64_t x)
{
    w[i * n + j] = x;
    w[j * n + i] = x;
}

/* A random graph: each edge present with probability pct/100, weights in
 * 1..maxw (small maxw: many ties). */
static void random_graph(uint64_t *s, uint32_t n, unsigned pct, int64_t maxw,
                         int64_t *w)
{
    memset(w, 0, (size_t)n * n * sizeof(*w));
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            if (flps_splitmix64(s) % 100 < pct)
                set_edge(w, n, i, j,
                         1 + (int64_t)(flps_splitmix64(s) % (uint64_t)maxw));
}

static void assert_optimal(saps_match *m, uint32_t n, const int64_t *w,
                           const char *what, int c)
{
    int32_t mate[MAXN];
    int64_t got, want;

    cr_assert_eq(saps_match_solve(m, n, w, mate), FLPS_OK);
    got = matching_weight(n, w, mate);
    want = brute_force(n, w);
    cr_assert_eq(got, want, "%s case %d (n %u): weight %lld, best %lld", what,
                 c, n, (long long)got, (long long)want);
}

/* Random case c: n from 1 to 18 (mostly up to 10), edges at 20-100%
 * density, weights from 1..1 (only cardinality counts) to 1..2^40 (ties
 * rare), and every fifth case split into 2 or 3 parts with no edge
 * between them. */
static uint32_t random_case(uint64_t *s, int c, int64_t *w)
{
    static const unsigned dens[] = {20, 40, 60, 100};
    static const int64_t maxw[] = {1, 3, 10, 1000, 1LL << 40};
    uint32_t n = c < 4000 ? 1 + (uint32_t)c % 10 : 11 + (uint32_t)c % 8;
    uint32_t parts = c % 5 == 4 ? 2 + (uint32_t)c % 2 : 1;

    random_graph(s, n, dens[c % 4], maxw[(c / 4) % 5], w);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++)
            if (i % parts != j % parts)
                w[i * n + j] = 0;
    return n;
}

Test(saps_match, is_maximum_weight_on_thousands_of_random_graphs)
{
    saps_match *m = NULL;
    int64_t w[MAXN * MAXN];
    uint64_t s = 7;
    int c;

    cr_assert_eq(saps_match_create(MAXN, &m), FLPS_OK);
    for (c = 0; c < 4040; c++) {
        uint32_t n = random_case(&s, c, w);

        assert_optimal(m, n, w, "random", c);
    }
    cr_log_info("%d random graphs of 1..18 vertices (one in five "
                "disconnected) matched optimally",
                c);
    saps_match_destroy(m);
}

/* Odd cycles: graphs built so the optimum is found only through
 * blossoms - shrunk (S), expanded while labelled T, nested, relabelled
 * and expanded at the end of a stage. Each case: edges as u, v, weight
 * triples, ended by a 0 weight. */
#define CASE_INTS 40
static const int blossom_cases[][CASE_INTS] = {
    /* an S-blossom used for an augmentation */
    {1, 2, 8, 1, 3, 9, 2, 3, 10, 3, 4, 7},
    /* a T-blossom */
    {1, 2, 9, 1, 3, 8, 2, 3, 10, 1, 4, 5, 4, 5, 4, 1, 6, 3},
    /* nested S-blossoms */
    {1, 2, 9, 1, 3, 9, 2, 3, 10, 2, 4, 8, 3, 5, 8, 4, 5, 10, 5, 6, 6},
    /* nested S-blossom relabelled */
    {1,  2, 10, 1,  7, 10, 2,  3, 12, 3,  4, 20, 3, 5,
     20, 4, 5,  25, 5, 6,  10, 6, 7,  10, 7, 8,  8},
    /* nested S-blossom expanded */
    {1, 2, 8,  1, 3, 8,  2, 3, 10, 2, 4, 12, 3, 5, 12,
     4, 5, 14, 4, 6, 12, 5, 7, 12, 6, 7, 14, 7, 8, 12},
    /* S-blossom relabelled as T and expanded */
    {1, 2, 23, 1, 5, 22, 1, 6, 15, 2, 3, 25,
     3, 4, 22, 4, 5, 25, 4, 8, 14, 5, 7, 13},
    /* nested S-blossom relabelled as T and expanded */
    {1,  2, 19, 1,  3, 20, 1,  8, 8, 2, 3, 25, 2, 4,
     18, 3, 5,  18, 4, 5,  13, 4, 7, 7, 5, 6,  7},
    /* a nested T-blossom expanded */
    {1,  2, 45, 1,  7, 45, 2,  3, 50, 3,  4, 45, 4,  5, 95, 4,  6,  94, 5, 6,
     94, 6, 7,  50, 1, 8,  30, 3, 11, 35, 5, 9,  36, 7, 10, 26, 11, 12, 5},
    /* a nested blossom relabelled and expanded */
    {1,  2, 40, 1,  3, 40, 2,  3, 60, 2,  4, 55, 3,  5, 55, 4, 5,
     50, 1, 8,  15, 5, 7,  30, 7, 6,  10, 8, 10, 10, 4, 9,  30},
    /* two triangles joined by one edge, and a pentagon with pendants */
    {0, 1, 5, 1, 2, 5, 2, 0, 5, 2, 3, 1, 3, 4, 5, 4, 5, 5, 5, 3, 5},
    {0, 1, 4, 1, 2, 4, 2, 3, 4, 3, 4, 4, 4, 0, 4, 0, 5, 3, 2, 6, 3, 4, 7, 3},
};

/* w := the graph of edge triples e[0..len) (ended early by a 0 weight);
 * returns its vertex count. */
static uint32_t load_case(const int *e, int len, int64_t *w)
{
    uint32_t n = 0;

    for (int k = 0; k + 2 < len && e[k + 2] > 0; k += 3)
        for (int h = 0; h < 2; h++)
            n = (uint32_t)e[k + h] + 1 > n ? (uint32_t)e[k + h] + 1 : n;
    memset(w, 0, (size_t)n * n * sizeof(*w));
    for (int k = 0; k + 2 < len && e[k + 2] > 0; k += 3)
        set_edge(w, n, (uint32_t)e[k], (uint32_t)e[k + 1], e[k + 2]);
    return n;
}

Test(saps_match, is_maximum_weight_on_graphs_that_need_blossoms)
{
    saps_match *m = NULL;
    int64_t w[MAXN * MAXN];
    size_t ncases = sizeof(blossom_cases) / sizeof(blossom_cases[0]);

    cr_assert_eq(saps_match_create(MAXN, &m), FLPS_OK);
    for (size_t c = 0; c < ncases; c++) {
        uint32_t n = load_case(blossom_cases[c], CASE_INTS, w);

        assert_optimal(m, n, w, "blossom", (int)c);
    }
    /* A T-blossom expanded with its entry child in odd places: a
     * pentagon 1..5 with pendants, three weightings of two of them. */
    for (int var = 0; var < 3; var++) {
        static const int w48[] = {35, 26, 28}, w57[] = {26, 40, 26};
        int pent[] = {1, 2, 45, 1, 5, 45, 2, 3,  50, 3, 4, 45, 4, 5, 50,
                      1, 6, 30, 3, 9, 35, 9, 10, 5,  4, 8, 0,  5, 7, 0};
        uint32_t n;

        pent[26] = w48[var];
        pent[29] = w57[var];
        n = load_case(pent, (int)(sizeof(pent) / sizeof(pent[0])), w);
        assert_optimal(m, n, w, "pentagon", var);
    }
    /* Every odd cycle, alone and with a heavy chord or pendant. */
    for (uint32_t n = 3; n <= 13; n += 2) {
        memset(w, 0, sizeof(w));
        for (uint32_t i = 0; i < n; i++)
            set_edge(w, n, i, (i + 1) % n, 10 + i % 3);
        assert_optimal(m, n, w, "odd cycle", (int)n);
        set_edge(w, n, 0, n / 2, 25);
        assert_optimal(m, n, w, "odd cycle with chord", (int)n);
    }
    saps_match_destroy(m);
}

Test(saps_match, leaves_an_odd_vertex_out_and_ignores_non_edges)
{
    saps_match *m = NULL;
    int64_t w[5 * 5] = {0};
    int32_t mate[5];

    cr_assert_eq(saps_match_create(5, &m), FLPS_OK);
    /* A complete graph on 5: two pairs, one vertex alone. */
    for (uint32_t i = 0; i < 5; i++)
        for (uint32_t j = 0; j < 5; j++)
            w[i * 5 + j] = i == j ? 99 : 1;
    cr_assert_eq(saps_match_solve(m, 5, w, mate), FLPS_OK);
    cr_assert_eq(matching_weight(5, w, mate), 2);
    /* Negative and zero weights are no edges. */
    for (uint32_t i = 0; i < 25; i++)
        w[i] = -3;
    cr_assert_eq(saps_match_solve(m, 5, w, mate), FLPS_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(mate[i], -1);
    saps_match_destroy(m);
}

Test(saps_match, refuses_bad_input)
{
    saps_match *m = NULL;
    int64_t w[3 * 3] = {0, 1, 2, 1, 0, 3, 2, 3, 0};
    int32_t mate[3] = {7, 7, 7};

    cr_assert_eq(saps_match_create(0, &m), FLPS_EINVAL);
    cr_assert_eq(saps_match_create(SAPS_MATCH_MAX_VERTICES + 1, &m),
                 FLPS_EINVAL);
    cr_assert_eq(saps_match_create(3, NULL), FLPS_EINVAL);
    cr_assert_eq(saps_match_create(3, &m), FLPS_OK);
    cr_assert_eq(saps_match_solve(m, 4, w, mate), FLPS_EINVAL, "n > max_n");
    cr_assert_eq(saps_match_solve(m, 3, NULL, mate), FLPS_EINVAL);
    cr_assert_eq(saps_match_solve(m, 3, w, NULL), FLPS_EINVAL);
    w[1] = 5; /* w[0][1] != w[1][0] */
    cr_assert_eq(saps_match_solve(m, 3, w, mate), FLPS_EINVAL, "asymmetric");
    w[1] = 1;
    set_edge(w, 3, 0, 2, SAPS_MATCH_MAX_WEIGHT + 1);
    cr_assert_eq(saps_match_solve(m, 3, w, mate), FLPS_EINVAL, "too heavy");
    cr_assert_eq(mate[0], 7, "mate untouched on error");
    saps_match_destroy(m);
    saps_match_destroy(NULL);
}

Test(saps_match, fails_cleanly_when_memory_runs_out)
{
    saps_match *m = NULL;

    for (unsigned long k = 1; k <= 64; k++) {
        flps_alloc_fail_at(k);
        flps_err rc = saps_match_create(8, &m);
        flps_alloc_fail_at(0);
        if (rc == FLPS_OK) {
            saps_match_destroy(m);
            return;
        }
        cr_assert_eq(rc, FLPS_ENOMEM);
    }
    cr_assert_fail("create never succeeded");
}

static double thread_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A same-run yardstick for the matching's cost: n^3 additions and
 * comparisons over the weight matrix (one pass of Floyd-Warshall's
 * min-plus closure, the simplest cubic work on the same data), CPU time of
 * this thread, the best of three. The result is returned so that the
 * compiler keeps the loop. */
static int64_t cubic_pass(uint32_t n, const int64_t *w, double *ms)
{
    int64_t acc = 0;

    *ms = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = thread_ms();

        for (uint32_t k = 0; k < n; k++)
            for (uint32_t i = 0; i < n; i++) {
                int64_t ik = w[(size_t)i * n + k];

                for (uint32_t j = 0; j < n; j++) {
                    int64_t via = ik + w[(size_t)k * n + j];

                    acc = via > acc ? via : acc;
                }
            }
        if (thread_ms() - t0 < *ms)
            *ms = thread_ms() - t0;
    }
    return acc;
}

/* 256 vertices, every pair an edge of random weight: SAPS's largest job.
 * CPU time of this thread (not wall time, which a loaded machine
 * stretches), the best of three, against the cubic yardstick measured in
 * the same run (so a sanitizer build or a slow machine moves both): the
 * matching must cost no more than a few passes of plain cubic work. */
Test(saps_match, matches_256_vertices_well_within_a_round)
{
    const uint32_t n = 256;
    saps_match *m = NULL;
    int64_t *w = malloc((size_t)n * n * sizeof(*w));
    int32_t *mate = malloc(n * sizeof(*mate));
    uint64_t s = 5;
    double best = 1e9, cubic_ms;
    int64_t keep;
    int unmatched = 0;

    cr_assert(w != NULL && mate != NULL);
    cr_assert_eq(saps_match_create(n, &m), FLPS_OK);
    for (int rep = 0; rep < 3; rep++) {
        double t0;

        random_graph(&s, n, 100, 1 << 20, w);
        t0 = thread_ms();
        cr_assert_eq(saps_match_solve(m, n, w, mate), FLPS_OK);
        if (thread_ms() - t0 < best)
            best = thread_ms() - t0;
        for (uint32_t i = 0; i < n; i++)
            unmatched += mate[i] < 0;
    }
    keep = cubic_pass(n, w, &cubic_ms);
    saps_match_destroy(m);
    free(w);
    free(mate);
    cr_log_info("maximum-weight matching, 256 vertices, complete graph: "
                "%.2f ms CPU; %u^3 yardstick %.2f ms (%.2fx; max %lld)",
                best, n, cubic_ms, best / cubic_ms, (long long)keep);
    cr_assert_eq(unmatched, 0, "complete graph: all matched");
    cr_assert_lt(best, 4.0 * cubic_ms,
                 "matching %.2f ms against %.2f ms of plain cubic work", best,
                 cubic_ms);
}
