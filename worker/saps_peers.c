/* SAPS peer selection: each round's matching of workers from the bandwidth
 * matrix, the shared seed, the round and the window of earlier rounds
 * (docs/algorithms.md, section 8). Every random choice is a hash of (seed,
 * round, link), never a generator's running state, so the result cannot
 * depend on which rounds a worker asked for before. */
#include "worker/saps_peers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "worker/saps_match.h"

/* The adaptive rule's edge weights, one integer per link: a fast link
 * outweighs any number of slow ones (W_FAST > n/2 * (W_PAIR + 2^16)), a
 * pair outweighs any difference of random parts (W_PAIR > n/2 * 2^16),
 * and the random part orders the rest. So the maximum-weight matching
 * has the most fast links possible, then the most pairs (all live workers
 * but one at most: every pair of workers is a link), then the largest
 * random weight. */
#define W_RANDOM_BITS 16
#define W_PAIR (INT64_C(1) << 24)
#define W_FAST (INT64_C(1) << 32)

/* Domains of the hash, so no two uses share a stream. */
enum { TAG_WEIGHT = 0x5a70, TAG_SHUFFLE = 0x5a71, TAG_MASK = 0x5a72 };

#define STATE_MAGIC 0x53415053u /* "SAPS" */
#define STATE_VERSION 1u
#define STATE_HEAD 24u     /* magic, version, n, window, next */
#define STATE_INFO 24u     /* per kept round: the info */
#define STATE_NONE 0xffffu /* no peer, in the state's u16s */

struct cand {
    int64_t key;
    uint16_t i, j;
};

struct saps_peers {
    uint8_t *arena; /* owns every array below but mw */
    saps_cfg cfg;
    uint32_t n;
    double *bw;          /* n*n link bandwidths, symmetric */
    uint64_t *dead_from; /* n: first round without the worker */
    uint64_t next;       /* the next round to compute */
    uint32_t rows;       /* rounds kept: window - 1 */
    uint32_t *hist;      /* rows*n: round r's mates in row r % rows */
    saps_round_info *hinfo;
    saps_match *mw;    /* the matching's workspace */
    int64_t *w;        /* n*n: the round's edge weights */
    int32_t *mate;     /* n: the matching's answer */
    uint32_t *uf;      /* n: union-find over the workers */
    uint32_t *freec;   /* n: per component, workers not yet linked */
    uint8_t *alive;    /* n: in the round being computed */
    uint8_t *busy;     /* n: taken by a forced link */
    uint32_t *order;   /* n: live workers, for random and ring */
    uint32_t *cur;     /* n: the round being computed */
    struct cand *cand; /* n(n-1)/2: links between components */
};

static const char *const select_names[] = {"adaptive", "random", "ring"};

flps_err saps_select_parse(const char *s, saps_select *out, char *errbuf,
                           size_t errlen)
{
    for (size_t i = 0; s != NULL && i < 3; i++) {
        if (strcmp(s, select_names[i]) == 0) {
            *out = (saps_select)i;
            return FLPS_OK;
        }
    }
    return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                           "peer_selection: '%s' is not one of adaptive, "
                           "random, ring",
                           s != NULL ? s : "");
}

const char *saps_select_name(saps_select s)
{
    return (unsigned)s < 3 ? select_names[s] : "?";
}

double saps_link_bandwidth(const double *bw, uint32_t n, uint32_t i, uint32_t j)
{
    double a = bw[(size_t)i * n + j], b = bw[(size_t)j * n + i];

    return a < b ? a : b;
}

static flps_err check_workers(uint32_t n, char *errbuf, size_t errlen)
{
    if (n < SAPS_MIN_WORKERS || n > SAPS_MAX_WORKERS)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: %u workers: expected %u to %u", n,
                               SAPS_MIN_WORKERS, SAPS_MAX_WORKERS);
    return FLPS_OK;
}

/* Every off-diagonal entry finite and >= 0. */
static flps_err check_matrix(const double *bw, uint32_t n, char *errbuf,
                             size_t errlen)
{
    if (bw == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: no bandwidth matrix");
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < n; j++) {
            double x = bw[(size_t)i * n + j];

            if (i != j && !(isfinite(x) && x >= 0))
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_EINVAL,
                    "saps: bandwidth[%u][%u] is %g: expected a finite "
                    "number of bytes/s >= 0",
                    i, j, x);
        }
    }
    return FLPS_OK;
}

static flps_err check_threshold(double t, char *errbuf, size_t errlen)
{
    if (!(isfinite(t) && t >= 0))
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: bandwidth_threshold %g: expected a "
                               "finite number of bytes/s >= 0",
                               t);
    return FLPS_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The n(n-1)/2 link bandwidths, sorted ascending, into *out (caller frees
 * with flps_free); *m their count. */
static flps_err sorted_links(const double *bw, uint32_t n, double **out,
                             size_t *m, char *errbuf, size_t errlen)
{
    flps_err rc = check_workers(n, errbuf, errlen);
    size_t k = 0;
    double *v;

    if (rc == FLPS_OK)
        rc = check_matrix(bw, n, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    *m = (size_t)n * (n - 1) / 2;
    v = flps_malloc(*m * sizeof(*v));
    if (v == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "saps: out of memory");
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            v[k++] = saps_link_bandwidth(bw, n, i, j);
    qsort(v, *m, sizeof(*v), cmp_double);
    *out = v;
    return FLPS_OK;
}

flps_err saps_threshold_quantile(const double *bw, uint32_t n, double q,
                                 double *out, char *errbuf, size_t errlen)
{
    double *v;
    size_t m;
    flps_err rc;

    if (out == NULL || !(q >= 0 && q <= 1))
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: quantile %g: expected 0 to 1", q);
    rc = sorted_links(bw, n, &v, &m, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    *out = v[(size_t)floor(q * (double)(m - 1))];
    flps_free(v);
    return FLPS_OK;
}

flps_err saps_threshold_auto(const double *bw, uint32_t n, double *out,
                             char *errbuf, size_t errlen)
{
    double *v, gap = 1;
    size_t m, at = 0;
    flps_err rc;

    if (out == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: nowhere to put the threshold");
    rc = sorted_links(bw, n, &v, &m, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    for (size_t k = 0; k + 1 < m; k++) {
        double r = v[k] > 0 ? v[k + 1] / v[k] : v[k + 1] > 0 ? INFINITY : 1;

        if (r > gap) {
            gap = r;
            at = k;
        }
    }
    if (gap < SAPS_AUTO_MIN_GAP)
        *out = v[0] / 2;
    else if (v[at] > 0)
        *out = sqrt(v[at] * v[at + 1]);
    else
        *out = v[at + 1] / 2;
    flps_free(v);
    return FLPS_OK;
}

static flps_err check_cfg(const saps_cfg *cfg, char *errbuf, size_t errlen)
{
    flps_err rc;

    if (cfg == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: no configuration");
    rc = check_workers(cfg->workers, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    if ((unsigned)cfg->select > SAPS_SELECT_RING)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: peer_selection %d unknown",
                               (int)cfg->select);
    if (cfg->window < 2)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: connectivity_window %u: expected at "
                               "least 2 rounds (one matching cannot "
                               "connect more than two workers)",
                               cfg->window);
    return check_threshold(cfg->threshold, errbuf, errlen);
}

static void set_matrix(saps_peers *p, const double *bw)
{
    uint32_t n = p->n;

    for (uint32_t i = 0; i < n; i++) {
        p->bw[(size_t)i * n + i] = 0;
        for (uint32_t j = i + 1; j < n; j++) {
            double b = saps_link_bandwidth(bw, n, i, j);

            p->bw[(size_t)i * n + j] = b;
            p->bw[(size_t)j * n + i] = b;
        }
    }
}

void saps_peers_destroy(saps_peers *p)
{
    if (p == NULL)
        return;
    saps_match_destroy(p->mw);
    flps_free(p->arena);
    flps_free(p);
}

/* Every array in one allocation, widest elements first so each stays
 * aligned: the n*n matrices, then the 8-byte and struct arrays, the
 * 4-byte ones, the bytes. */
static flps_err alloc_peers(saps_peers *p)
{
    size_t n = p->n, nn = n * n, ncand = n * (n - 1) / 2;
    size_t words = (size_t)p->rows * n + 5 * n; /* hist + 4 + mate */
    size_t bytes = nn * (sizeof(double) + sizeof(int64_t)) +
                   n * sizeof(uint64_t) + ncand * sizeof(struct cand) +
                   p->rows * sizeof(saps_round_info) + words * 4 + 2 * n;
    uint8_t *b = flps_calloc(1, bytes);

    if (b == NULL)
        return FLPS_ENOMEM;
    p->arena = b;
    p->bw = (double *)(void *)b;
    p->w = (int64_t *)(void *)(p->bw + nn);
    p->dead_from = (uint64_t *)(void *)(p->w + nn);
    p->cand = (struct cand *)(void *)(p->dead_from + n);
    p->hinfo = (saps_round_info *)(void *)(p->cand + ncand);
    p->hist = (uint32_t *)(void *)(p->hinfo + p->rows);
    p->uf = p->hist + (size_t)p->rows * n;
    p->freec = p->uf + n;
    p->order = p->freec + n;
    p->cur = p->order + n;
    p->mate = (int32_t *)(void *)(p->cur + n);
    p->alive = (uint8_t *)(void *)(p->mate + n);
    p->busy = p->alive + n;
    return saps_match_create(p->n, &p->mw);
}

flps_err saps_peers_create(const saps_cfg *cfg, const double *bw,
                           saps_peers **out, char *errbuf, size_t errlen)
{
    saps_peers *p;
    flps_err rc = check_cfg(cfg, errbuf, errlen);

    if (rc != FLPS_OK)
        return rc;
    rc = check_matrix(bw, cfg->workers, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    if (out == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: nowhere to put the selector");
    p = flps_calloc(1, sizeof(*p));
    if (p == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "saps: out of memory");
    p->cfg = *cfg;
    p->n = cfg->workers;
    p->rows = cfg->window - 1;
    if (alloc_peers(p) != FLPS_OK) {
        saps_peers_destroy(p);
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "saps: out of memory");
    }
    set_matrix(p, bw);
    for (uint32_t i = 0; i < p->n; i++)
        p->dead_from[i] = UINT64_MAX;
    for (size_t i = 0; i < (size_t)p->rows * p->n; i++)
        p->hist[i] = SAPS_NO_PEER;
    *out = p;
    return FLPS_OK;
}

flps_err saps_peers_set_bandwidth(saps_peers *p, const double *bw,
                                  double threshold, char *errbuf, size_t errlen)
{
    flps_err rc;

    if (p == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: no selector");
    rc = check_matrix(bw, p->n, errbuf, errlen);
    if (rc == FLPS_OK)
        rc = check_threshold(threshold, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    set_matrix(p, bw);
    p->cfg.threshold = threshold;
    return FLPS_OK;
}

flps_err saps_peers_set_dead(saps_peers *p, uint32_t w, uint64_t from,
                             char *errbuf, size_t errlen)
{
    if (p == NULL || w >= p->n)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: worker %u: expected one of 0..%u", w,
                               p != NULL ? p->n - 1 : 0);
    if (from < p->next)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESTATE,
                               "saps: worker %u dead from round %llu, but "
                               "rounds up to %llu are already computed",
                               w, (unsigned long long)from,
                               (unsigned long long)(p->next - 1));
    if (from < p->dead_from[w])
        p->dead_from[w] = from;
    return FLPS_OK;
}

bool saps_peers_is_alive(const saps_peers *p, uint32_t w, uint64_t r)
{
    return p != NULL && w < p->n && r < p->dead_from[w];
}

uint64_t saps_peers_next_round(const saps_peers *p)
{
    return p->next;
}

/* A counter-based hash: the same (seed, tag, round, x) gives the same 64
 * bits everywhere, whatever was drawn before. */
static uint64_t hash_step(uint64_t h, uint64_t x)
{
    uint64_t s = h ^ x;

    return flps_splitmix64(&s);
}

static uint64_t round_hash(uint64_t seed, uint64_t tag, uint64_t r, uint64_t x)
{
    return hash_step(hash_step(hash_step(seed, tag), r), x);
}

static bool is_fast(const saps_peers *p, uint32_t i, uint32_t j)
{
    return p->bw[(size_t)i * p->n + j] > p->cfg.threshold;
}

static void pair(uint32_t *mate, uint32_t i, uint32_t j)
{
    mate[i] = j;
    mate[j] = i;
}

static uint32_t uf_find(uint32_t *uf, uint32_t x)
{
    while (uf[x] != x) {
        uf[x] = uf[uf[x]];
        x = uf[x];
    }
    return x;
}

/* Joins the components of a and b; returns the new root. */
static uint32_t uf_join(uint32_t *uf, uint32_t a, uint32_t b)
{
    a = uf_find(uf, a);
    b = uf_find(uf, b);
    if (a != b)
        uf[b] = a;
    return a;
}

/* uf := the components of the live workers under the links used in the
 * kept rounds (the window's last window - 1 rounds). */
static void window_components(saps_peers *p)
{
    for (uint32_t i = 0; i < p->n; i++)
        p->uf[i] = i;
    for (uint32_t k = 0; k < p->rows; k++) {
        const uint32_t *row = p->hist + (size_t)k * p->n;

        for (uint32_t i = 0; i < p->n; i++)
            if (row[i] != SAPS_NO_PEER && p->alive[i] && p->alive[row[i]])
                uf_join(p->uf, i, row[i]);
    }
}

/* Whether the live workers form one component under uf. */
static bool is_connected(saps_peers *p)
{
    uint32_t root = SAPS_NO_PEER;

    for (uint32_t i = 0; i < p->n; i++) {
        if (!p->alive[i])
            continue;
        if (root == SAPS_NO_PEER)
            root = uf_find(p->uf, i);
        else if (uf_find(p->uf, i) != root)
            return false;
    }
    return true;
}

static void round_weights(saps_peers *p, uint64_t r)
{
    uint32_t n = p->n;

    for (uint32_t i = 0; i < n; i++) {
        p->w[(size_t)i * n + i] = 0;
        for (uint32_t j = i + 1; j < n; j++) {
            int64_t x = 0;

            if (p->alive[i] && p->alive[j]) {
                uint64_t h = round_hash(p->cfg.seed, TAG_WEIGHT, r,
                                        (uint64_t)i << 32 | j);

                x = W_PAIR + (int64_t)(h >> (64 - W_RANDOM_BITS));
                if (is_fast(p, i, j))
                    x += W_FAST;
            }
            p->w[(size_t)i * n + j] = x;
            p->w[(size_t)j * n + i] = x;
        }
    }
}

/* The maximum-weight matching of p->w into mate; workers it leaves
 * unmatched keep what mate held. */
static flps_err solve(saps_peers *p, uint32_t *mate)
{
    flps_err rc = saps_match_solve(p->mw, p->n, p->w, p->mate);

    if (rc != FLPS_OK)
        return rc;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->mate[i] >= 0)
            mate[i] = (uint32_t)p->mate[i];
    return FLPS_OK;
}

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;

    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    if (x->i != y->i)
        return x->i < y->i ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

/* The links between different components of the window, best first (by
 * the round's weights: fast before slow, then the random part). */
static size_t cross_links(saps_peers *p)
{
    size_t nc = 0;

    for (uint32_t i = 0; i < p->n; i++) {
        if (!p->alive[i])
            continue;
        for (uint32_t j = i + 1; j < p->n; j++) {
            if (!p->alive[j] || uf_find(p->uf, i) == uf_find(p->uf, j))
                continue;
            p->cand[nc].key = p->w[(size_t)i * p->n + j];
            p->cand[nc].i = (uint16_t)i;
            p->cand[nc].j = (uint16_t)j;
            nc++;
        }
    }
    qsort(p->cand, nc, sizeof(*p->cand), cmp_cand);
    return nc;
}

/* Forced round: link the window's k components into one with links of
 * this round's matching (so at most one per worker), taken best first.
 * A component with f workers not yet linked can take f links, and a tree
 * on k components with such bounds exists while every f >= 1 and the f
 * sum to at least 2(k - 1); joining two components that have one free
 * worker each would leave a component with none, so it waits until they
 * are the last two. Under that rule the greedy always finishes. When
 * even the bound fails (several workers died at once), it links what it
 * can. Returns the number of links forced; mate holds them. */
static uint32_t force_links(saps_peers *p, uint32_t *mate)
{
    uint32_t k = 0, live = 0, forced = 0;
    size_t nc;
    bool feasible, progress = true;

    window_components(p);
    memset(p->freec, 0, p->n * sizeof(*p->freec));
    for (uint32_t i = 0; i < p->n; i++) {
        if (!p->alive[i])
            continue;
        live++;
        if (p->freec[uf_find(p->uf, i)]++ == 0)
            k++;
    }
    feasible = 2 * (k - 1) <= live;
    nc = cross_links(p);
    memset(p->busy, 0, p->n);
    while (k > 1 && progress) {
        progress = false;
        for (size_t c = 0; c < nc && k > 1; c++) {
            uint32_t i = p->cand[c].i, j = p->cand[c].j, ri, rj, root;

            if (p->busy[i] || p->busy[j])
                continue;
            ri = uf_find(p->uf, i);
            rj = uf_find(p->uf, j);
            if (ri == rj ||
                (feasible && k > 2 && p->freec[ri] == 1 && p->freec[rj] == 1))
                continue;
            root = uf_join(p->uf, ri, rj);
            p->freec[root] = p->freec[ri] + p->freec[rj] - 2;
            p->busy[i] = p->busy[j] = 1;
            pair(mate, i, j);
            k--;
            forced++;
            progress = true;
        }
    }
    return forced;
}

static flps_err adaptive_round(saps_peers *p, uint64_t r, uint32_t *mate,
                               saps_round_info *info)
{
    flps_err rc;

    round_weights(p, r);
    rc = solve(p, mate);
    if (rc != FLPS_OK || r + 1 < p->cfg.window)
        return rc; /* no window of T rounds ends before round T - 1 */
    window_components(p);
    for (uint32_t i = 0; i < p->n; i++)
        if (mate[i] != SAPS_NO_PEER)
            uf_join(p->uf, i, mate[i]);
    if (is_connected(p))
        return FLPS_OK;
    /* The window ending here would fall apart: forced links first, then
     * the best matching of the workers they leave free. */
    for (uint32_t i = 0; i < p->n; i++)
        mate[i] = SAPS_NO_PEER;
    info->forced = force_links(p, mate);
    for (uint32_t i = 0; i < p->n; i++)
        if (p->busy[i])
            for (uint32_t j = 0; j < p->n; j++)
                p->w[(size_t)i * p->n + j] = p->w[(size_t)j * p->n + i] = 0;
    return solve(p, mate);
}

/* order[0..m) := the live workers in rank order; returns m. */
static uint32_t live_workers(saps_peers *p)
{
    uint32_t m = 0;

    for (uint32_t i = 0; i < p->n; i++)
        if (p->alive[i])
            p->order[m++] = i;
    return m;
}

static void random_round(saps_peers *p, uint64_t r, uint32_t *mate)
{
    uint32_t m = live_workers(p);
    uint64_t s = round_hash(p->cfg.seed, TAG_SHUFFLE, r, 0);

    for (uint32_t i = m; i > 1; i--) {
        uint32_t j = (uint32_t)(flps_splitmix64(&s) % i), t = p->order[i - 1];

        p->order[i - 1] = p->order[j];
        p->order[j] = t;
    }
    for (uint32_t i = 0; i + 1 < m; i += 2)
        pair(mate, p->order[i], p->order[i + 1]);
}

static void ring_round(saps_peers *p, uint64_t r, uint32_t *mate)
{
    uint32_t m = live_workers(p);

    for (uint32_t i = (uint32_t)(r % 2); i + 1 < m; i += 2)
        pair(mate, p->order[i], p->order[i + 1]);
    if (r % 2 == 1 && m % 2 == 0 && m >= 2)
        pair(mate, p->order[m - 1], p->order[0]);
}

static void describe(const saps_peers *p, const uint32_t *mate,
                     saps_round_info *info)
{
    info->pairs = info->slow_pairs = info->idle = 0;
    info->min_bw = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        uint32_t j = mate[i];
        double b;

        if (j == SAPS_NO_PEER) {
            info->idle += p->alive[i];
            continue;
        }
        if (j < i)
            continue;
        b = p->bw[(size_t)i * p->n + j];
        info->slow_pairs += !is_fast(p, i, j);
        if (info->pairs++ == 0 || b < info->min_bw)
            info->min_bw = b;
    }
}

/* Computes round p->next into its kept row. The adaptive rule reads every
 * kept row, this round's slot too (it holds the window's first round), so
 * the answer is built in p->cur and copied at the end. */
static flps_err compute_round(saps_peers *p)
{
    uint64_t r = p->next;
    saps_round_info info = {0};
    flps_err rc = FLPS_OK;

    for (uint32_t i = 0; i < p->n; i++) {
        p->alive[i] = r < p->dead_from[i];
        p->cur[i] = SAPS_NO_PEER;
    }
    if (p->cfg.select == SAPS_SELECT_RANDOM)
        random_round(p, r, p->cur);
    else if (p->cfg.select == SAPS_SELECT_RING)
        ring_round(p, r, p->cur);
    else
        rc = adaptive_round(p, r, p->cur, &info);
    if (rc != FLPS_OK)
        return rc;
    describe(p, p->cur, &info);
    memcpy(p->hist + (size_t)(r % p->rows) * p->n, p->cur,
           p->n * sizeof(*p->cur));
    p->hinfo[r % p->rows] = info;
    p->next++;
    return FLPS_OK;
}

flps_err saps_peers_round(saps_peers *p, uint64_t r, uint32_t *mate,
                          saps_round_info *info, char *errbuf, size_t errlen)
{
    if (p == NULL || mate == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: no selector or no mate array");
    if (r < p->next && p->next - r > p->rows)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESTATE,
                               "saps: round %llu is gone: only rounds from "
                               "%llu on are kept",
                               (unsigned long long)r,
                               (unsigned long long)(p->next - p->rows));
    while (p->next <= r) {
        flps_err rc = compute_round(p);

        if (rc != FLPS_OK)
            return flps_errbuf_set(errbuf, errlen, rc,
                                   "saps: round %llu: the matching failed "
                                   "(%s)",
                                   (unsigned long long)p->next,
                                   flps_strerror(rc));
    }
    memcpy(mate, p->hist + (size_t)(r % p->rows) * p->n, p->n * sizeof(*mate));
    if (info != NULL)
        *info = p->hinfo[r % p->rows];
    return FLPS_OK;
}

static void put_u32(uint8_t *b, uint32_t x)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(x >> (8 * i));
}

static void put_u64(uint8_t *b, uint64_t x)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(x >> (8 * i));
}

static uint32_t get_u32(const uint8_t *b)
{
    uint32_t x = 0;

    for (int i = 0; i < 4; i++)
        x |= (uint32_t)b[i] << (8 * i);
    return x;
}

static uint64_t get_u64(const uint8_t *b)
{
    uint64_t x = 0;

    for (int i = 0; i < 8; i++)
        x |= (uint64_t)b[i] << (8 * i);
    return x;
}

/* Per kept round: pairs, slow_pairs, idle, forced (u32 each), min_bw's
 * bits (u64), then n u16 mates. */
static size_t row_bytes(const saps_peers *p)
{
    return STATE_INFO + 2 * (size_t)p->n;
}

size_t saps_peers_state_size(const saps_peers *p)
{
    return STATE_HEAD + (size_t)p->rows * row_bytes(p);
}

flps_err saps_peers_state_save(const saps_peers *p, uint8_t *buf, size_t len)
{
    if (p == NULL || buf == NULL || len < saps_peers_state_size(p))
        return FLPS_EINVAL;
    put_u32(buf, STATE_MAGIC);
    put_u32(buf + 4, STATE_VERSION);
    put_u32(buf + 8, p->n);
    put_u32(buf + 12, p->cfg.window);
    put_u64(buf + 16, p->next);
    for (uint32_t k = 0; k < p->rows; k++) {
        uint8_t *b = buf + STATE_HEAD + k * row_bytes(p);
        const saps_round_info *in = &p->hinfo[k];
        uint64_t bits;

        memcpy(&bits, &in->min_bw, sizeof(bits));
        put_u32(b, in->pairs);
        put_u32(b + 4, in->slow_pairs);
        put_u32(b + 8, in->idle);
        put_u32(b + 12, in->forced);
        put_u64(b + 16, bits);
        for (uint32_t i = 0; i < p->n; i++) {
            uint32_t m = p->hist[(size_t)k * p->n + i];
            uint16_t v = m == SAPS_NO_PEER ? STATE_NONE : (uint16_t)m;

            b[STATE_INFO + 2 * i] = (uint8_t)v;
            b[STATE_INFO + 2 * i + 1] = (uint8_t)(v >> 8);
        }
    }
    return FLPS_OK;
}

static uint32_t state_mate(const uint8_t *row, uint32_t i)
{
    uint32_t v = row[STATE_INFO + 2 * i] | (uint32_t)row[STATE_INFO + 2 * i + 1]
                                               << 8;

    return v == STATE_NONE ? SAPS_NO_PEER : v;
}

/* Each kept row a matching: mates in range, symmetric, none to itself. */
static flps_err check_state_rows(const saps_peers *p, const uint8_t *buf,
                                 char *errbuf, size_t errlen)
{
    for (uint32_t k = 0; k < p->rows; k++) {
        const uint8_t *row = buf + STATE_HEAD + k * row_bytes(p);

        for (uint32_t i = 0; i < p->n; i++) {
            uint32_t m = state_mate(row, i);

            if (m == SAPS_NO_PEER)
                continue;
            if (m >= p->n || m == i || state_mate(row, m) != i)
                return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                                       "saps: state: kept round %u is no "
                                       "matching at worker %u",
                                       k, i);
        }
    }
    return FLPS_OK;
}

flps_err saps_peers_state_load(saps_peers *p, const uint8_t *buf, size_t len,
                               char *errbuf, size_t errlen)
{
    flps_err rc;

    if (p == NULL || buf == NULL || len != saps_peers_state_size(p))
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: state of %zu bytes: expected %zu", len,
                               p != NULL ? saps_peers_state_size(p) : 0);
    if (get_u32(buf) != STATE_MAGIC || get_u32(buf + 4) != STATE_VERSION ||
        get_u32(buf + 8) != p->n || get_u32(buf + 12) != p->cfg.window)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "saps: state is not of version %u for %u "
                               "workers and a window of %u",
                               STATE_VERSION, p->n, p->cfg.window);
    rc = check_state_rows(p, buf, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    p->next = get_u64(buf + 16);
    for (uint32_t k = 0; k < p->rows; k++) {
        const uint8_t *b = buf + STATE_HEAD + k * row_bytes(p);
        saps_round_info *in = &p->hinfo[k];
        uint64_t bits = get_u64(b + 16);

        in->pairs = get_u32(b);
        in->slow_pairs = get_u32(b + 4);
        in->idle = get_u32(b + 8);
        in->forced = get_u32(b + 12);
        memcpy(&in->min_bw, &bits, sizeof(bits));
        for (uint32_t i = 0; i < p->n; i++)
            p->hist[(size_t)k * p->n + i] = state_mate(b, i);
    }
    return FLPS_OK;
}

uint64_t saps_mask_seed(uint64_t seed, uint64_t r, uint32_t tensor)
{
    return round_hash(seed, TAG_MASK, r, tensor);
}

uint32_t saps_probe_rounds(uint32_t m)
{
    if (m < 2)
        return 0;
    return m % 2 == 0 ? m - 1 : m;
}

void saps_probe_pairs(uint32_t m, uint32_t k, uint32_t *mate)
{
    /* The circle method over an even number of seats: seat e - 1 stays,
     * the others turn one place a round; an odd m leaves the last seat
     * empty, and whoever faces it sits the round out. */
    const uint32_t e = m % 2 == 0 ? m : m + 1, turn = e - 1;

    for (uint32_t i = 0; i < m; i++)
        mate[i] = SAPS_NO_PEER;
    if (k >= saps_probe_rounds(m))
        return;
    if (turn < m)
        pair(mate, turn, k);
    for (uint32_t i = 1; i < e / 2; i++) {
        uint32_t a = (k + i) % turn, b = (k + turn - i) % turn;

        pair(mate, a, b);
    }
}
