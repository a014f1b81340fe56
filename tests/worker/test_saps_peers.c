/* SAPS peer selection: the same matching on every worker, the forced
 * connectivity window, adaptivity to slow links, dead and left-over
 * workers, the random and ring comparisons, restarts, bad input. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "worker/saps_peers.h"

#define FAST 1.25e8 /* 1 Gbit/s in bytes/s */
#define SLOW 6.25e6 /* 50 Mbit/s */

static double uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(flps_splitmix64(s) >> 11) * 0x1p-53;
}

/* A measured-looking matrix: link i-j fast or slow as fast_link says,
 * each direction measured with +-10% noise (so the matrix is not
 * symmetric and the minimum rule matters). */
static void make_matrix(uint64_t *s, uint32_t n, double *bw,
                        bool (*fast_link)(uint32_t, uint32_t, uint64_t *))
{
    for (uint32_t i = 0; i < n; i++) {
        bw[(size_t)i * n + i] = 0;
        for (uint32_t j = i + 1; j < n; j++) {
            double base = fast_link(i, j, s) ? FAST : SLOW;

            bw[(size_t)i * n + j] = base * uniform(s, 0.9, 1.1);
            bw[(size_t)j * n + i] = base * uniform(s, 0.9, 1.1);
        }
    }
}

static bool half_fast(uint32_t i, uint32_t j, uint64_t *s)
{
    (void)i, (void)j;
    return flps_splitmix64(s) % 2 == 0;
}

/* Half the links slow, but the pairs (2i, 2i+1) fast, so the fast links
 * alone always hold a perfect matching. */
static bool half_fast_with_pairs(uint32_t i, uint32_t j, uint64_t *s)
{
    bool coin = flps_splitmix64(s) % 2 == 0;

    return (i / 2 == j / 2) || coin;
}

static uint32_t g_clusters = 2;

/* Fast inside clusters (rank mod clusters), slow between: the fast links
 * alone never connect the workers. */
static bool clustered(uint32_t i, uint32_t j, uint64_t *s)
{
    (void)s;
    return i % g_clusters == j % g_clusters;
}

/* Half the hosts at 1 Gbit/s, half at 50 Mbit/s; a link runs at its
 * slower host's rate (the heterogeneous network). */
static bool fast_hosts(uint32_t i, uint32_t j, uint64_t *s)
{
    (void)s;
    return i % 2 == 0 && j % 2 == 0;
}

static saps_peers *make_peers(uint32_t n, saps_select sel, uint32_t window,
                              uint64_t seed, const double *bw)
{
    saps_cfg cfg = {.workers = n,
                    .select = sel,
                    .threshold = (FAST * 0.9 + SLOW * 1.1) / 2,
                    .window = window,
                    .seed = seed};
    saps_peers *p = NULL;
    char err[256] = "";

    cr_assert_eq(saps_peers_create(&cfg, bw, &p, err, sizeof(err)), FLPS_OK,
                 "%s", err);
    return p;
}

static void round_of(saps_peers *p, uint64_t r, uint32_t *mate,
                     saps_round_info *info)
{
    char err[256] = "";

    cr_assert_eq(saps_peers_round(p, r, mate, info, err, sizeof(err)), FLPS_OK,
                 "round %llu: %s", (unsigned long long)r, err);
}

/* mate is a matching of the workers alive in round r. */
static void assert_matching(const saps_peers *p, uint32_t n, uint64_t r,
                            const uint32_t *mate)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = mate[i];

        if (j == SAPS_NO_PEER)
            continue;
        cr_assert_lt(j, n, "round %llu", (unsigned long long)r);
        cr_assert_neq(j, i);
        cr_assert_eq(mate[j], i, "round %llu: %u-%u not mutual",
                     (unsigned long long)r, i, j);
        cr_assert(saps_peers_is_alive(p, i, r),
                  "round %llu: dead worker %u matched", (unsigned long long)r,
                  i);
    }
}

struct view {
    saps_peers *p;
    int style; /* 0: every round; 1: every round, then re-read the one
                  before; 2: only rounds 9, 19, 29, ... (computing the
                  ones between on the way) */
};

/* Runs W selectors of the same job over 1,000 rounds with a new random
 * matrix every 100 rounds and a death at round 600, each asking for
 * rounds in its own pattern, one of them rebuilt from another's state at
 * round 500: every round's matching must be the same in all. */
static void same_everywhere(uint32_t n, saps_select sel, uint32_t window,
                            int nviews)
{
    enum { ROUNDS = 1000 };
    double *bw = malloc((size_t)n * n * sizeof(*bw));
    uint32_t *ref = malloc(n * sizeof(*ref)), *got = malloc(n * sizeof(*got));
    struct view v[8];
    uint64_t s = 1000 + n;
    char err[256];

    cr_assert_leq(nviews, 8);
    make_matrix(&s, n, bw, half_fast);
    for (int k = 0; k < nviews; k++) {
        v[k].p = make_peers(n, sel, window, 42, bw);
        v[k].style = k % 3;
    }
    for (uint64_t r = 0; r < ROUNDS; r++) {
        if (r % 100 == 0 && r > 0) {
            double t;

            make_matrix(&s, n, bw, half_fast);
            cr_assert_eq(saps_threshold_auto(bw, n, &t, err, sizeof(err)),
                         FLPS_OK);
            for (int k = 0; k < nviews; k++)
                cr_assert_eq(
                    saps_peers_set_bandwidth(v[k].p, bw, t, err, sizeof(err)),
                    FLPS_OK, "%s", err);
        }
        if (r == 550)
            for (int k = 0; k < nviews; k++)
                cr_assert_eq(
                    saps_peers_set_dead(v[k].p, 3, 600, err, sizeof(err)),
                    FLPS_OK, "%s", err);
        if (r == 500 && nviews > 1) {
            /* The last view restarts from view 0's state. */
            size_t len = saps_peers_state_size(v[0].p);
            uint8_t *st = malloc(len);
            double t = 0;

            cr_assert_eq(saps_peers_state_save(v[0].p, st, len), FLPS_OK);
            saps_peers_destroy(v[nviews - 1].p);
            v[nviews - 1].p = make_peers(n, sel, window, 42, bw);
            cr_assert_eq(saps_threshold_auto(bw, n, &t, err, sizeof(err)),
                         FLPS_OK);
            cr_assert_eq(
                saps_peers_set_bandwidth(v[nviews - 1].p, bw, t, err, 256),
                FLPS_OK);
            cr_assert_eq(saps_peers_state_load(v[nviews - 1].p, st, len, err,
                                               sizeof(err)),
                         FLPS_OK, "%s", err);
            free(st);
        }
        round_of(v[0].p, r, ref, NULL);
        assert_matching(v[0].p, n, r, ref);
        if (r >= 600)
            cr_assert_eq(ref[3], SAPS_NO_PEER, "dead worker 3 matched");
        for (int k = 1; k < nviews; k++) {
            if (v[k].style == 2 && r % 10 != 9)
                continue;
            round_of(v[k].p, r, got, NULL);
            cr_assert_arr_eq(ref, got, n * sizeof(*ref),
                             "view %d differs in round %llu", k,
                             (unsigned long long)r);
            if (v[k].style == 1 && r > 0 && window > 2)
                round_of(v[k].p, r - 1, got, NULL);
        }
    }
    for (int k = 0; k < nviews; k++)
        saps_peers_destroy(v[k].p);
    free(bw);
    free(ref);
    free(got);
}

Test(saps_peers, every_worker_computes_the_same_matching_in_every_round)
{
    same_everywhere(8, SAPS_SELECT_ADAPTIVE, 4, 8);
    same_everywhere(13, SAPS_SELECT_ADAPTIVE, 3, 4);
    same_everywhere(32, SAPS_SELECT_ADAPTIVE, 10, 3);
    same_everywhere(9, SAPS_SELECT_RANDOM, 2, 3);
    same_everywhere(10, SAPS_SELECT_RING, 2, 3);
}

Test(saps_peers, the_seed_and_the_round_change_the_matching)
{
    uint32_t n = 16, a[16], b[16];
    double bw[16 * 16];
    uint64_t s = 3;
    saps_peers *p, *q;
    int differ_seed = 0, differ_round = 0;

    make_matrix(&s, n, bw, half_fast_with_pairs);
    p = make_peers(n, SAPS_SELECT_ADAPTIVE, 5, 1, bw);
    q = make_peers(n, SAPS_SELECT_ADAPTIVE, 5, 2, bw);
    for (uint64_t r = 0; r < 50; r++) {
        round_of(p, r, a, NULL);
        round_of(q, r, b, NULL);
        differ_seed += memcmp(a, b, sizeof(a)) != 0;
        if (r > 0) {
            round_of(p, r - 1, b, NULL);
            differ_round += memcmp(a, b, sizeof(a)) != 0;
        }
    }
    cr_assert_gt(differ_seed, 40, "%d of 50 rounds differ by seed",
                 differ_seed);
    cr_assert_gt(differ_round, 40, "%d of 49 rounds differ from the last",
                 differ_round);
    saps_peers_destroy(p);
    saps_peers_destroy(q);
}

/* Whether the union of rows[0..count) (each a matching) connects the
 * workers alive in round r. */
static bool union_connected(const saps_peers *p, uint32_t n, uint64_t r,
                            uint32_t *const *rows, uint32_t count)
{
    uint32_t comp[SAPS_MAX_WORKERS], first = SAPS_NO_PEER;
    bool changed = true;

    for (uint32_t i = 0; i < n; i++)
        comp[i] = i;
    while (changed) { /* label propagation: small n, fine */
        changed = false;
        for (uint32_t k = 0; k < count; k++)
            for (uint32_t i = 0; i < n; i++) {
                uint32_t j = rows[k][i];

                if (j == SAPS_NO_PEER || !saps_peers_is_alive(p, i, r) ||
                    !saps_peers_is_alive(p, j, r))
                    continue;
                if (comp[j] < comp[i]) {
                    comp[i] = comp[j];
                    changed = true;
                }
            }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!saps_peers_is_alive(p, i, r))
            continue;
        if (first == SAPS_NO_PEER)
            first = comp[i];
        else if (comp[i] != first)
            return false;
    }
    return true;
}

/* Over `rounds` rounds: every window of T consecutive rounds (ending at
 * T-1 or later) has a connected union of used links. Returns the rounds
 * with forced links and adds the slow and all pairs to *slow, *pairs. */
static uint32_t check_windows(saps_peers *p, uint32_t n, uint32_t window,
                              uint64_t rounds, uint64_t *slow, uint64_t *pairs)
{
    uint32_t *rows[64], forced = 0;

    cr_assert_leq(window, 64);
    for (uint32_t k = 0; k < window; k++)
        rows[k] = malloc(n * sizeof(uint32_t));
    for (uint64_t r = 0; r < rounds; r++) {
        saps_round_info info;

        round_of(p, r, rows[r % window], &info);
        assert_matching(p, n, r, rows[r % window]);
        forced += info.forced > 0;
        *slow += info.slow_pairs;
        *pairs += info.pairs;
        if (r + 1 >= window)
            cr_assert(union_connected(p, n, r, rows, window),
                      "n %u, T %u: rounds %llu..%llu leave the workers "
                      "apart",
                      n, window, (unsigned long long)(r + 1 - window),
                      (unsigned long long)r);
    }
    for (uint32_t k = 0; k < window; k++)
        free(rows[k]);
    return forced;
}

Test(saps_peers, forced_links_keep_every_window_of_t_rounds_connected)
{
    static const uint32_t ns[] = {4, 6, 9, 16, 25, 33};
    static const uint32_t ts[] = {2, 3, 5, 10};
    uint64_t s = 77, slow = 0, pairs = 0;
    uint32_t forced = 0, cases = 0;
    double *bw = malloc(33 * 33 * sizeof(*bw));

    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
        for (size_t b = 0; b < sizeof(ts) / sizeof(ts[0]); b++)
            for (uint32_t c = 2; c <= 4; c++) {
                uint32_t n = ns[a];
                saps_peers *p;

                g_clusters = c;
                make_matrix(&s, n, bw, clustered);
                p = make_peers(n, SAPS_SELECT_ADAPTIVE, ts[b], s, bw);
                forced += check_windows(p, n, ts[b], 200, &slow, &pairs);
                saps_peers_destroy(p);
                cases++;
            }
    cr_log_info("%u clustered matrices (fast links never connect the "
                "workers), 200 rounds each: %u forced rounds, %.1f%% of "
                "pairs over slow links",
                cases, forced, 100.0 * (double)slow / (double)pairs);
    cr_assert_gt(forced, 0, "the fast links alone are disconnected");
    free(bw);
}

Test(saps_peers, windows_stay_connected_on_random_matrices_and_after_deaths)
{
    uint64_t s = 5, slow = 0, pairs = 0;
    double bw[20 * 20];
    char err[256];

    g_clusters = 3;
    for (int rep = 0; rep < 40; rep++) {
        uint32_t n = 5 + (uint32_t)rep % 16, t = 2 + (uint32_t)rep % 6;
        saps_peers *p;

        make_matrix(&s, n, bw, rep % 2 ? half_fast : clustered);
        p = make_peers(n, SAPS_SELECT_ADAPTIVE, t, (uint64_t)rep, bw);
        /* One death, then a second one, each announced ahead. */
        cr_assert_eq(saps_peers_set_dead(p, (uint32_t)rep % n, 50, err, 256),
                     FLPS_OK);
        cr_assert_eq(
            saps_peers_set_dead(p, ((uint32_t)rep + 1) % n, 120, err, 256),
            FLPS_OK);
        check_windows(p, n, t, 200, &slow, &pairs);
        saps_peers_destroy(p);
    }
}

/* Half the links slow, and the fast ones alone hold perfect matchings:
 * a slow link is used only in a round the connectivity rule forced. */
Test(saps_peers, slow_links_are_used_only_when_forced)
{
    const uint32_t n = 16;
    double bw[16 * 16];
    uint32_t mate[16];
    uint64_t s = 9, slow[3] = {0}, pairs[3] = {0};
    uint32_t forced_rounds = 0;

    for (int rep = 0; rep < 10; rep++) {
        saps_peers *p[3];

        make_matrix(&s, n, bw, half_fast_with_pairs);
        for (int k = 0; k < 3; k++)
            p[k] = make_peers(n, (saps_select)k, 6, (uint64_t)rep, bw);
        for (uint64_t r = 0; r < 300; r++) {
            saps_round_info info;

            for (int k = 0; k < 3; k++) {
                round_of(p[k], r, mate, &info);
                slow[k] += info.slow_pairs;
                pairs[k] += info.pairs;
                cr_assert_eq(info.pairs, n / 2);
                if (k == SAPS_SELECT_ADAPTIVE) {
                    forced_rounds += info.forced > 0;
                    if (info.forced == 0)
                        cr_assert_eq(info.slow_pairs, 0,
                                     "round %llu: %u slow pairs, none "
                                     "forced",
                                     (unsigned long long)r, info.slow_pairs);
                }
            }
        }
        for (int k = 0; k < 3; k++)
            saps_peers_destroy(p[k]);
    }
    cr_log_info("half the links slow: exchanges over slow links: adaptive "
                "%.2f%% (%u forced rounds of 3000), random %.1f%%, ring "
                "%.1f%%",
                100.0 * (double)slow[0] / (double)pairs[0], forced_rounds,
                100.0 * (double)slow[1] / (double)pairs[1],
                100.0 * (double)slow[2] / (double)pairs[2]);
    cr_assert_lt((double)slow[0] / (double)pairs[0], 0.05);
    cr_assert_gt((double)slow[1] / (double)pairs[1], 0.3);
}

/* The network: 8 hosts, half at 1 Gbit/s, half at 50 Mbit/s, the
 * threshold `auto`. The slow hosts have only slow links, so they pair
 * among themselves; the fast ones always pair over fast links. */
Test(saps_peers, fast_hosts_pair_over_fast_links_with_an_auto_threshold)
{
    const uint32_t n = 8;
    double bw[8 * 8], t;
    uint32_t mate[8];
    uint64_t s = 21, slow[2] = {0}, pairs[2] = {0};
    char err[256];

    make_matrix(&s, n, bw, fast_hosts);
    cr_assert_eq(saps_threshold_auto(bw, n, &t, err, sizeof(err)), FLPS_OK);
    cr_assert(t > SLOW * 1.1 && t < FAST * 0.9, "auto threshold %g", t);
    for (int k = 0; k < 2; k++) {
        saps_cfg cfg = {n, (saps_select)k, t, 10, 7};
        saps_peers *p = NULL;

        cr_assert_eq(saps_peers_create(&cfg, bw, &p, err, sizeof(err)),
                     FLPS_OK);
        for (uint64_t r = 0; r < 1000; r++) {
            saps_round_info info;

            round_of(p, r, mate, &info);
            slow[k] += info.slow_pairs;
            pairs[k] += info.pairs;
            if (k == 0 && info.forced == 0)
                for (uint32_t i = 0; i < n; i += 2)
                    cr_assert_eq(mate[i] % 2, 0,
                                 "round %llu: fast host %u paired with "
                                 "slow host %u",
                                 (unsigned long long)r, i, mate[i]);
        }
        saps_peers_destroy(p);
    }
    cr_log_info("4 of 8 hosts slow: exchanges over slow links: adaptive "
                "%.1f%%, random %.1f%%",
                100.0 * (double)slow[0] / (double)pairs[0],
                100.0 * (double)slow[1] / (double)pairs[1]);
    cr_assert_lt(slow[0], slow[1]);
}

Test(saps_peers, dead_workers_are_never_matched)
{
    const uint32_t n = 10;
    double bw[10 * 10];
    uint32_t mate[10];
    uint64_t s = 31;
    char err[256];

    make_matrix(&s, n, bw, half_fast);
    for (int k = 0; k < 3; k++) {
        saps_peers *p = make_peers(n, (saps_select)k, 3, 5, bw);

        cr_assert_eq(saps_peers_set_dead(p, 2, 20, err, 256), FLPS_OK);
        cr_assert_eq(saps_peers_set_dead(p, 5, 20, err, 256), FLPS_OK);
        cr_assert_eq(saps_peers_set_dead(p, 7, 40, err, 256), FLPS_OK);
        cr_assert_eq(saps_peers_set_dead(p, 7, 60, err, 256), FLPS_OK,
                     "a later round keeps the earlier one");
        for (uint64_t r = 0; r < 100; r++) {
            saps_round_info info;
            uint32_t live = r < 20 ? 10 : r < 40 ? 8 : 7;

            round_of(p, r, mate, &info);
            assert_matching(p, n, r, mate);
            cr_assert_eq(info.pairs, live / 2, "%s round %llu",
                         saps_select_name((saps_select)k),
                         (unsigned long long)r);
            cr_assert_eq(info.idle, live % 2);
            if (r >= 20)
                cr_assert(mate[2] == SAPS_NO_PEER && mate[5] == SAPS_NO_PEER);
            if (r >= 40)
                cr_assert_eq(mate[7], SAPS_NO_PEER);
        }
        cr_assert(!saps_peers_is_alive(p, 7, 40));
        cr_assert(saps_peers_is_alive(p, 7, 39));
        cr_assert_eq(saps_peers_set_dead(p, 1, 50, err, sizeof(err)),
                     FLPS_ESTATE, "round 50 is already computed");
        cr_assert(strstr(err, "already computed") != NULL, "%s", err);
        saps_peers_destroy(p);
    }
}

Test(saps_peers, an_odd_count_leaves_exactly_one_worker_out_in_turn)
{
    const uint32_t n = 9;
    double bw[9 * 9];
    uint32_t mate[9];
    uint64_t s = 41;

    make_matrix(&s, n, bw, half_fast);
    for (int k = 0; k < 3; k++) {
        saps_peers *p = make_peers(n, (saps_select)k, 4, 5, bw);
        uint32_t idle_count[9] = {0};

        for (uint64_t r = 0; r < 900; r++) {
            saps_round_info info;
            uint32_t out = 0;

            round_of(p, r, mate, &info);
            assert_matching(p, n, r, mate);
            for (uint32_t i = 0; i < n; i++)
                if (mate[i] == SAPS_NO_PEER) {
                    out++;
                    idle_count[i]++;
                }
            cr_assert_eq(out, 1, "%s round %llu: %u left out",
                         saps_select_name((saps_select)k),
                         (unsigned long long)r, out);
            cr_assert_eq(info.idle, 1);
            cr_assert_eq(info.pairs, 4);
        }
        /* Ring leaves out n-1 and 0 by turns; the others anyone. */
        for (uint32_t i = 0; i < n; i++)
            if (k != SAPS_SELECT_RING)
                cr_assert_gt(idle_count[i], 20,
                             "%s: worker %u left out %u "
                             "times of 900",
                             saps_select_name((saps_select)k), i,
                             idle_count[i]);
        saps_peers_destroy(p);
    }
}

Test(saps_peers, ring_pairs_neighbours_by_the_round_parity)
{
    double bw[6 * 6];
    uint32_t mate[6];
    uint64_t s = 1;
    char err[256];
    saps_peers *p;

    make_matrix(&s, 6, bw, half_fast);
    p = make_peers(6, SAPS_SELECT_RING, 2, 5, bw);
    round_of(p, 0, mate, NULL);
    cr_assert_arr_eq(mate, ((uint32_t[]){1, 0, 3, 2, 5, 4}), sizeof(mate));
    round_of(p, 1, mate, NULL);
    cr_assert_arr_eq(mate, ((uint32_t[]){5, 2, 1, 4, 3, 0}), sizeof(mate));
    /* Worker 2 dead: the ring closes over the live ones 0 1 3 4 5. */
    cr_assert_eq(saps_peers_set_dead(p, 2, 2, err, sizeof(err)), FLPS_OK);
    round_of(p, 2, mate, NULL);
    cr_assert_arr_eq(mate,
                     ((uint32_t[]){1, 0, SAPS_NO_PEER, 4, 3, SAPS_NO_PEER}),
                     sizeof(mate));
    round_of(p, 3, mate, NULL);
    cr_assert_arr_eq(mate,
                     ((uint32_t[]){SAPS_NO_PEER, 3, SAPS_NO_PEER, 1, 5, 4}),
                     sizeof(mate));
    saps_peers_destroy(p);
}

Test(saps_peers, random_matchings_use_every_link_alike)
{
    const uint32_t n = 6;
    double bw[6 * 6];
    uint32_t mate[6], count[6][6] = {{0}};
    uint64_t s = 2;
    saps_peers *p;

    make_matrix(&s, n, bw, half_fast);
    p = make_peers(n, SAPS_SELECT_RANDOM, 2, 9, bw);
    for (uint64_t r = 0; r < 15000; r++) {
        round_of(p, r, mate, NULL);
        for (uint32_t i = 0; i < n; i++)
            count[i][mate[i]]++;
    }
    /* Each of the 15 links is in 1/5 of all perfect matchings. */
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            cr_assert(count[i][j] > 2800 && count[i][j] < 3200,
                      "link %u-%u used %u times of 15000", i, j, count[i][j]);
    saps_peers_destroy(p);
}

Test(saps_peers, a_restarted_worker_catches_up_by_replay_or_by_state)
{
    const uint32_t n = 12;
    double bw[12 * 12];
    uint32_t a[12], b[12];
    uint64_t s = 8;
    saps_peers *p, *replay, *loaded;
    uint8_t *st;
    size_t len;
    char err[256];

    make_matrix(&s, n, bw, clustered);
    p = make_peers(n, SAPS_SELECT_ADAPTIVE, 4, 3, bw);
    replay = make_peers(n, SAPS_SELECT_ADAPTIVE, 4, 3, bw);
    loaded = make_peers(n, SAPS_SELECT_ADAPTIVE, 4, 3, bw);
    round_of(p, 149, a, NULL);
    len = saps_peers_state_size(p);
    st = malloc(len);
    cr_assert_eq(saps_peers_state_save(p, st, len), FLPS_OK);
    cr_assert_eq(saps_peers_state_load(loaded, st, len, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_eq(saps_peers_next_round(loaded), 150);
    round_of(loaded, 148, b, NULL);
    round_of(p, 148, a, NULL);
    cr_assert_arr_eq(a, b, sizeof(a), "kept rounds travel with the state");
    round_of(p, 300, a, NULL);
    round_of(replay, 300, b, NULL);
    cr_assert_arr_eq(a, b, sizeof(a), "replayed from round 0");
    round_of(loaded, 300, b, NULL);
    cr_assert_arr_eq(a, b, sizeof(a), "continued from the state");
    cr_assert_eq(saps_peers_round(p, 296, a, NULL, err, sizeof(err)),
                 FLPS_ESTATE, "only window - 1 = 3 rounds are kept");
    /* A corrupt state is refused and changes nothing. */
    st[len - 1] ^= 0x01;
    cr_assert_eq(saps_peers_state_load(loaded, st, len, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_eq(saps_peers_state_load(loaded, st, len - 1, err, 256),
                 FLPS_EINVAL);
    cr_assert_eq(saps_peers_state_save(p, st, len - 1), FLPS_EINVAL);
    cr_assert_eq(saps_peers_next_round(loaded), 301);
    free(st);
    saps_peers_destroy(p);
    saps_peers_destroy(replay);
    saps_peers_destroy(loaded);
}

Test(saps_peers, the_quantile_threshold_is_the_lower_neighbour_link)
{
    /* Links (min of both directions): 0-1 1, 0-2 2, 0-3 3, 1-2 4, 1-3 5,
     * 2-3 6; bw[1][0] = 9 but the link is 1. */
    double bw[16] = {0, 1, 2, 3, 9, 0, 4, 5, 2, 4, 0, 6, 3, 5, 6, 0};
    double t;
    char err[256];

    cr_assert_eq(saps_threshold_quantile(bw, 4, 0.5, &t, err, 256), FLPS_OK);
    cr_assert_eq(t, 3, "6 links: index floor(0.5 * 5) = 2 of 1..6");
    cr_assert_eq(saps_threshold_quantile(bw, 4, 0, &t, err, 256), FLPS_OK);
    cr_assert_eq(t, 1);
    cr_assert_eq(saps_threshold_quantile(bw, 4, 1, &t, err, 256), FLPS_OK);
    cr_assert_eq(t, 6);
    cr_assert_eq(saps_link_bandwidth(bw, 4, 1, 0), 1);
    cr_assert_eq(saps_threshold_quantile(bw, 4, 1.5, &t, err, 256),
                 FLPS_EINVAL);
    cr_assert_eq(saps_threshold_quantile(bw, 4, NAN, &t, err, 256),
                 FLPS_EINVAL);
    bw[7] = -1;
    cr_assert_eq(saps_threshold_quantile(bw, 4, 0.5, &t, err, 256),
                 FLPS_EINVAL);
}

/* Asserts that the links above t are exactly those of fast_link, and
 * returns how many of the others are above it. */
static uint32_t count_wrong(const double *bw, uint32_t n, double t,
                            bool (*fast_link)(uint32_t, uint32_t, uint64_t *))
{
    uint32_t right = 0, wrong = 0, want = 0;

    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++) {
            want += fast_link(i, j, NULL);
            if (saps_link_bandwidth(bw, n, i, j) > t) {
                if (fast_link(i, j, NULL))
                    right++;
                else
                    wrong++;
            }
        }
    cr_assert_eq(right, want, "%u of the %u fast links above %g", right, want,
                 t);
    return wrong;
}

static bool half_fast_fixed(uint32_t i, uint32_t j, uint64_t *s)
{
    (void)s;
    return (i * 7 + j * 3) % 2 == 0;
}

static bool all_fast(uint32_t i, uint32_t j, uint64_t *s)
{
    (void)i, (void)j, (void)s;
    return true;
}

/* The auto threshold separates the fast links from the slow ones however
 * many of them there are, where a fixed quantile (the median) lands
 * inside one group and lets noise decide. */
Test(saps_peers, the_auto_threshold_splits_at_the_widest_gap)
{
    const uint32_t n = 16;
    double bw[16 * 16], t, q;
    uint32_t wrong;
    uint64_t s = 12;
    char err[256];

    make_matrix(&s, n, bw, fast_hosts); /* a quarter of the links fast */
    cr_assert_eq(saps_threshold_auto(bw, n, &t, err, 256), FLPS_OK);
    cr_assert_eq(count_wrong(bw, n, t, fast_hosts), 0);
    cr_assert_eq(saps_threshold_quantile(bw, n, 0.5, &q, err, 256), FLPS_OK);
    wrong = count_wrong(bw, n, q, fast_hosts);
    cr_assert_gt(wrong, 20, "the median counts %u slow links fast", wrong);
    make_matrix(&s, n, bw, half_fast_fixed); /* half the links fast */
    cr_assert_eq(saps_threshold_auto(bw, n, &t, err, 256), FLPS_OK);
    cr_assert_eq(count_wrong(bw, n, t, half_fast_fixed), 0);
    make_matrix(&s, n, bw, all_fast); /* an even network, +-10% noise */
    cr_assert_eq(saps_threshold_auto(bw, n, &t, err, 256), FLPS_OK);
    cr_assert_eq(count_wrong(bw, n, t, all_fast), 0);
    bw[1] = 0; /* link 0-1 measured at 0 one way: slow, the rest fast */
    cr_assert_eq(saps_threshold_auto(bw, n, &t, err, 256), FLPS_OK);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            cr_assert_eq(saps_link_bandwidth(bw, n, i, j) > t, i != 0 || j != 1,
                         "link %u-%u", i, j);
    cr_assert_eq(saps_threshold_auto(bw, n, NULL, err, 256), FLPS_EINVAL);
    cr_assert_eq(saps_threshold_auto(bw, 1, &t, err, 256), FLPS_EINVAL);
}

static void assert_refused(const saps_cfg *cfg, const double *bw,
                           const char *needle)
{
    saps_peers *p = NULL;
    char err[256] = "";

    cr_assert_eq(saps_peers_create(cfg, bw, &p, err, sizeof(err)), FLPS_EINVAL,
                 "accepted: %s", needle);
    cr_assert_null(p);
    cr_assert(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err,
              needle);
}

Test(saps_peers, refuses_bad_input_with_a_message)
{
    double bw[4 * 4] = {0};
    saps_cfg good = {4, SAPS_SELECT_ADAPTIVE, 100, 5, 1}, c;
    saps_peers *p = NULL;
    saps_select sel;
    uint32_t mate[4];
    char err[256];

    for (int i = 0; i < 16; i++)
        bw[i] = 1000;
    c = good, c.workers = 1;
    assert_refused(&c, bw, "1 workers: expected 2 to 256");
    c = good, c.workers = 257;
    assert_refused(&c, bw, "257 workers");
    c = good, c.window = 0;
    assert_refused(&c, bw, "connectivity_window 0");
    c = good, c.window = 1;
    assert_refused(&c, bw, "connectivity_window 1");
    c = good, c.threshold = NAN;
    assert_refused(&c, bw, "bandwidth_threshold nan");
    c = good, c.threshold = -1;
    assert_refused(&c, bw, "bandwidth_threshold -1");
    c = good, c.select = (saps_select)7;
    assert_refused(&c, bw, "peer_selection 7");
    assert_refused(&good, NULL, "no bandwidth matrix");
    bw[1 * 4 + 2] = NAN;
    assert_refused(&good, bw, "bandwidth[1][2] is nan");
    bw[1 * 4 + 2] = -5;
    assert_refused(&good, bw, "bandwidth[1][2] is -5");
    bw[1 * 4 + 2] = INFINITY;
    assert_refused(&good, bw, "bandwidth[1][2] is inf");
    bw[1 * 4 + 2] = 1000;
    bw[2 * 4 + 2] = NAN; /* the diagonal is ignored */
    cr_assert_eq(saps_peers_create(&good, bw, NULL, err, 256), FLPS_EINVAL);
    cr_assert_eq(saps_peers_create(&good, bw, &p, err, 256), FLPS_OK, "%s",
                 err);
    bw[0 * 4 + 3] = NAN;
    cr_assert_eq(saps_peers_set_bandwidth(p, bw, 10, err, 256), FLPS_EINVAL);
    bw[0 * 4 + 3] = 1000;
    cr_assert_eq(saps_peers_set_bandwidth(p, bw, -3, err, 256), FLPS_EINVAL);
    cr_assert_eq(saps_peers_set_dead(p, 4, 0, err, 256), FLPS_EINVAL);
    cr_assert(strstr(err, "worker 4") != NULL, "%s", err);
    cr_assert_eq(saps_peers_round(p, 0, NULL, NULL, err, 256), FLPS_EINVAL);
    cr_assert_eq(saps_peers_round(p, 0, mate, NULL, err, 256), FLPS_OK);
    cr_assert_eq(saps_select_parse("adaptive", &sel, err, 256), FLPS_OK);
    cr_assert_eq(sel, SAPS_SELECT_ADAPTIVE);
    cr_assert_eq(saps_select_parse("ring", &sel, err, 256), FLPS_OK);
    cr_assert_eq(sel, SAPS_SELECT_RING);
    cr_assert_eq(saps_select_parse("best", &sel, err, 256), FLPS_EINVAL);
    cr_assert(strstr(err, "'best' is not one of") != NULL, "%s", err);
    cr_assert_str_eq(saps_select_name(SAPS_SELECT_RANDOM), "random");
    saps_peers_destroy(p);
    saps_peers_destroy(NULL);
}

Test(saps_peers, fails_cleanly_when_memory_runs_out)
{
    double bw[5 * 5] = {0};
    saps_cfg cfg = {5, SAPS_SELECT_ADAPTIVE, 1, 3, 1};
    char err[256];

    for (unsigned long k = 1; k <= 200; k++) {
        saps_peers *p = NULL;
        flps_err rc;

        flps_alloc_fail_at(k);
        rc = saps_peers_create(&cfg, bw, &p, err, sizeof(err));
        flps_alloc_fail_at(0);
        if (rc == FLPS_OK) {
            saps_peers_destroy(p);
            return;
        }
        cr_assert_eq(rc, FLPS_ENOMEM);
        cr_assert_null(p);
    }
    cr_assert_fail("create never succeeded");
}

/* CPU milliseconds of this process (the test runs alone in it), which a
 * loaded machine stretches less than wall time. */
static double cpu_ms(void)
{
    return 1e3 * (double)clock() / CLOCKS_PER_SEC;
}

/* 256 workers in 4 clusters (so rounds are forced too): every round pairs
 * everyone. The slowest of 12 rounds' CPU time is logged, not asserted: the
 * project keeps absolute timings out of tests (a sanitizer build at -O0 on
 * a loaded machine is many times slower than a release one, where a round
 * takes about 3 ms and a forced one about 8 ms). */
Test(saps_peers, a_round_of_256_workers_pairs_everyone_forced_or_not)
{
    const uint32_t n = 256;
    double *bw = malloc((size_t)n * n * sizeof(*bw));
    uint32_t mate[256];
    uint64_t s = 4;
    double worst = 0, worst_forced = 0;
    unsigned nforced = 0;
    saps_peers *p;

    g_clusters = 4;
    make_matrix(&s, n, bw, clustered);
    p = make_peers(n, SAPS_SELECT_ADAPTIVE, 3, 1, bw);
    for (uint64_t r = 0; r < 12; r++) {
        saps_round_info info;
        double t0 = cpu_ms(), ms;

        round_of(p, r, mate, &info);
        ms = cpu_ms() - t0;
        nforced += info.forced > 0;
        if (info.forced > 0 && ms > worst_forced)
            worst_forced = ms;
        else if (info.forced == 0 && ms > worst)
            worst = ms;
        cr_assert_eq(info.pairs, n / 2);
    }
    cr_log_info("256 workers: slowest round %.1f ms CPU, slowest forced "
                "round %.1f ms",
                worst, worst_forced);
    cr_assert_gt(nforced, 0, "4 clusters force some rounds");
    saps_peers_destroy(p);
    free(bw);
}
