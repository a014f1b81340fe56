/* The split of a training set among clients: iid slices, the Dirichlet
 * label partition and label shards, with every draw from the project's
 * seeded splitmix64. Part of libflps (flps_fl_partition) as well as
 * flworker's, so a PyTorch program and flworker split alike. */
#include "worker/partition.h"

#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"

/* A draw that never gives every client its minimum is a job that cannot be
 * split this way (say 60,000 samples over 6,000 clients at alpha 0.01);
 * it must fail rather than loop for ever. */
#define PARTITION_MAX_DRAWS 1000
#define PARTITION_MIN_SAMPLES 10

/* Uniform in (0, 1): never 0, so log() and pow(u, 1/a) are finite. */
static double rng_open01(uint64_t *s)
{
    return ((double)(flps_splitmix64(s) >> 11) + 0.5) * 0x1p-53;
}

static size_t rng_below(uint64_t *s, size_t n)
{
    return (size_t)(flps_splitmix64(s) % n);
}

/* Uniform below bound without modulo bias (the iid permutation's draw,
 * kept as the worker split always made it). */
static uint64_t rng_below_exact(uint64_t *state, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound;
    uint64_t r;

    do
        r = flps_splitmix64(state);
    while (r < threshold);
    return r % bound;
}

/* Standard normal by Box-Muller (one of the pair; the other is dropped to
 * keep the generator's state the only state). */
static double rng_normal(uint64_t *s)
{
    double u1 = rng_open01(s), u2 = rng_open01(s);

    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Gamma(a, 1) by Marsaglia and Tsang; for a < 1 the boost
 * Gamma(a) = Gamma(a + 1) * U^(1/a). */
static double rng_gamma(uint64_t *s, double a)
{
    double boost = 1.0, d, c;

    if (a < 1.0) {
        boost = pow(rng_open01(s), 1.0 / a);
        a += 1.0;
    }
    d = a - 1.0 / 3.0;
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(s), v = 1.0 + c * x, u;

        if (v <= 0)
            continue;
        v = v * v * v;
        u = rng_open01(s);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return boost * d * v;
    }
}

void partition_shuffle(uint32_t *a, size_t n, uint64_t *s)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_below(s, i);
        uint32_t t = a[i - 1];

        a[i - 1] = a[j];
        a[j] = t;
    }
}

static flps_err partition_alloc(size_t n, uint32_t clients, partition *p)
{
    p->idx = flps_malloc((n ? n : 1) * sizeof(*p->idx));
    p->off = flps_calloc((size_t)clients + 1, sizeof(*p->off));
    if (p->idx == NULL || p->off == NULL) {
        flps_free(p->idx);
        flps_free(p->off);
        return FLPS_ENOMEM;
    }
    p->clients = clients;
    p->n = n;
    return FLPS_OK;
}

flps_err partition_permutation(size_t n, uint64_t seed, uint32_t **out)
{
    uint64_t rng = seed;
    uint32_t *perm;

    if (out == NULL || (uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return FLPS_EINVAL;
    perm = flps_malloc((n ? n : 1) * sizeof(*perm));
    if (perm == NULL)
        return FLPS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    /* Fisher-Yates: every rank runs the same shuffle from the same seed, so
     * slices of it partition one permutation without any communication. */
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below_exact(&rng, i);
        uint32_t t = perm[i - 1];

        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    *out = perm;
    return FLPS_OK;
}

flps_err partition_iid(size_t n, uint32_t clients, uint64_t seed,
                       partition *out)
{
    partition p;
    uint32_t *perm = NULL;
    flps_err rc;

    if (out == NULL || clients == 0 || clients > n ||
        (uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return FLPS_EINVAL;
    /* One worker's slice is the whole permutation the worker split cuts,
     * so cutting it the same way gives every client its slice with one
     * shuffle instead of one per client. */
    rc = partition_permutation(n, seed, &perm);
    if (rc != FLPS_OK)
        return rc;
    p.idx = perm;
    p.off = flps_calloc((size_t)clients + 1, sizeof(*p.off));
    if (p.off == NULL) {
        flps_free(perm);
        return FLPS_ENOMEM;
    }
    p.clients = clients;
    p.n = n;
    for (uint32_t c = 0; c < clients; c++)
        p.off[c + 1] = p.off[c] + n / clients + (c < n % clients);
    *out = p;
    return FLPS_OK;
}

/* One draw of the Dirichlet split: owner[i] = the client of sample i,
 * count[c] = samples of client c. byclass holds the indices grouped by
 * class (class k at cls_off[k] .. cls_off[k + 1]); work is as large. */
static void dirichlet_draw(const uint32_t *byclass, const size_t *cls_off,
                           size_t classes, uint32_t clients, double alpha,
                           double cap, uint64_t *s, uint32_t *work,
                           double *prop, uint32_t *owner, size_t *count)
{
    memset(count, 0, clients * sizeof(*count));
    for (size_t k = 0; k < classes; k++) {
        size_t len = cls_off[k + 1] - cls_off[k], start = 0;
        double sum = 0, cum = 0;

        memcpy(work, byclass + cls_off[k], len * sizeof(*work));
        partition_shuffle(work, len, s);
        for (uint32_t j = 0; j < clients; j++) {
            double g = rng_gamma(s, alpha);

            /* Drawn for every client, so the stream does not depend on
             * which clients are full. */
            prop[j] = (double)count[j] < cap ? g : 0.0;
            sum += prop[j];
        }
        for (uint32_t j = 0; j < clients; j++) {
            size_t end;

            /* Every client full, or every draw underflowed: spread the
             * class evenly rather than divide by zero. */
            cum += sum > 0 ? prop[j] / sum : 1.0 / clients;
            end = j + 1 == clients ? len : (size_t)floor(cum * (double)len);
            if (end > len)
                end = len;
            if (end < start)
                end = start;
            for (size_t i = start; i < end; i++)
                owner[work[i]] = j;
            count[j] += end - start;
            start = end;
        }
    }
}

/* Refuse a split the arguments cannot describe: FLPS_EINVAL, or FLPS_OK. */
static flps_err labels_check(const uint8_t *y, size_t n, size_t classes,
                             uint32_t clients, const partition *out)
{
    if (out == NULL || y == NULL || clients == 0 || clients > n ||
        classes == 0 || (uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return FLPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (y[i] >= classes)
            return FLPS_EINVAL;
    return FLPS_OK;
}

/* The indices 0..n-1 grouped by class into byclass (n entries), ascending
 * within each class, class k at cls_off[k] .. cls_off[k + 1] (classes + 1
 * entries, zeroed by the caller): a draw from them depends on the labels
 * only. */
static flps_err group_by_class(const uint8_t *y, size_t n, size_t classes,
                               uint32_t *byclass, size_t *cls_off)
{
    size_t *pos = flps_calloc(classes, sizeof(*pos));

    if (pos == NULL)
        return FLPS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        cls_off[y[i] + 1]++;
    for (size_t k = 0; k < classes; k++)
        cls_off[k + 1] += cls_off[k];
    for (size_t i = 0; i < n; i++)
        byclass[cls_off[y[i]] + pos[y[i]]++] = (uint32_t)i;
    flps_free(pos);
    return FLPS_OK;
}

/* The partition in which sample i belongs to client owner[i] (count[c]
 * samples of client c), each client's list in ascending index order and
 * then shuffled with *s. */
static flps_err from_owners(const uint32_t *owner, const size_t *count,
                            size_t n, uint32_t clients, uint64_t *s,
                            partition *out)
{
    size_t *fill = flps_calloc(clients, sizeof(*fill));
    partition p;
    flps_err rc = FLPS_ENOMEM;

    memset(&p, 0, sizeof(p));
    if (fill != NULL)
        rc = partition_alloc(n, clients, &p);
    if (rc == FLPS_OK) {
        for (uint32_t j = 0; j < clients; j++)
            p.off[j + 1] = p.off[j] + count[j];
        for (size_t i = 0; i < n; i++)
            p.idx[p.off[owner[i]] + fill[owner[i]]++] = (uint32_t)i;
        for (uint32_t j = 0; j < clients; j++)
            partition_shuffle(p.idx + p.off[j], count[j], s);
        *out = p;
    }
    flps_free(fill);
    return rc;
}

flps_err partition_dirichlet(const uint8_t *y, size_t n, size_t classes,
                             uint32_t clients, double alpha, uint64_t seed,
                             partition *out)
{
    uint64_t s = seed ^ 0xd1e1c4e7a1f0c0deull;
    uint32_t *byclass = NULL, *work = NULL, *owner = NULL;
    size_t *cls_off = NULL, *count = NULL;
    size_t need, draw;
    double *prop = NULL;
    flps_err rc = labels_check(y, n, classes, clients, out);

    if (rc != FLPS_OK || !(alpha > 0) || !isfinite(alpha))
        return FLPS_EINVAL;
    rc = FLPS_ENOMEM;
    byclass = flps_malloc(n * sizeof(*byclass));
    work = flps_malloc(n * sizeof(*work));
    owner = flps_malloc(n * sizeof(*owner));
    cls_off = flps_calloc(classes + 1, sizeof(*cls_off));
    count = flps_calloc(clients, sizeof(*count));
    prop = flps_calloc(clients, sizeof(*prop));
    if (byclass == NULL || work == NULL || owner == NULL || cls_off == NULL ||
        count == NULL || prop == NULL ||
        group_by_class(y, n, classes, byclass, cls_off) != FLPS_OK)
        goto out;
    need = n / clients < PARTITION_MIN_SAMPLES ? n / clients
                                               : PARTITION_MIN_SAMPLES;
    for (draw = 0; draw < PARTITION_MAX_DRAWS; draw++) {
        size_t least = SIZE_MAX;

        dirichlet_draw(byclass, cls_off, classes, clients, alpha,
                       (double)n / (double)clients, &s, work, prop, owner,
                       count);
        for (uint32_t j = 0; j < clients; j++)
            if (count[j] < least)
                least = count[j];
        if (least >= need)
            break;
    }
    rc = draw == PARTITION_MAX_DRAWS
             ? FLPS_ECONFIG
             : from_owners(owner, count, n, clients, &s, out);
out:
    flps_free(byclass);
    flps_free(work);
    flps_free(owner);
    flps_free(cls_off);
    flps_free(count);
    flps_free(prop);
    return rc;
}

flps_err partition_shards(const uint8_t *y, size_t n, size_t classes,
                          uint32_t clients, uint32_t per_client, uint64_t seed,
                          partition *out)
{
    uint64_t s = seed ^ 0x5348415244530000ull; /* "SHARDS" */
    uint32_t *byclass = NULL, *shard = NULL, *owner = NULL;
    size_t *cls_off = NULL, *count = NULL, nshards;
    flps_err rc = labels_check(y, n, classes, clients, out);

    if (rc != FLPS_OK || per_client == 0 || (uint64_t)clients * per_client > n)
        return FLPS_EINVAL;
    nshards = (size_t)clients * per_client;
    rc = FLPS_ENOMEM;
    byclass = flps_malloc(n * sizeof(*byclass));
    shard = flps_malloc(nshards * sizeof(*shard));
    owner = flps_malloc(n * sizeof(*owner));
    cls_off = flps_calloc(classes + 1, sizeof(*cls_off));
    count = flps_calloc(clients, sizeof(*count));
    if (byclass == NULL || shard == NULL || owner == NULL || cls_off == NULL ||
        count == NULL ||
        group_by_class(y, n, classes, byclass, cls_off) != FLPS_OK)
        goto out;
    /* Shard k is the k-th slice of the samples sorted by label (slices as
     * even as n allows), and client c gets the shards at positions
     * c * per_client .. (c + 1) * per_client - 1 of a shuffled order. */
    for (size_t k = 0; k < nshards; k++)
        shard[k] = (uint32_t)k;
    partition_shuffle(shard, nshards, &s);
    for (size_t k = 0; k < nshards; k++) {
        const uint32_t c = (uint32_t)(k / per_client);
        const size_t sh = shard[k];
        const size_t lo =
            sh * (n / nshards) + (sh < n % nshards ? sh : n % nshards);
        const size_t len = n / nshards + (sh < n % nshards);

        for (size_t i = lo; i < lo + len; i++)
            owner[byclass[i]] = c;
        count[c] += len;
    }
    rc = from_owners(owner, count, n, clients, &s, out);
out:
    flps_free(byclass);
    flps_free(shard);
    flps_free(owner);
    flps_free(cls_off);
    flps_free(count);
    return rc;
}

size_t partition_count(const partition *p, uint32_t c)
{
    return p != NULL && c < p->clients ? p->off[c + 1] - p->off[c] : 0;
}

double partition_skew(const partition *p, const uint8_t *y, size_t classes)
{
    double *global, *local, sum = 0;
    uint32_t used = 0;

    if (p == NULL || p->n == 0 || classes == 0)
        return 0;
    global = flps_calloc(classes, sizeof(*global));
    local = flps_calloc(classes, sizeof(*local));
    if (global == NULL || local == NULL) {
        flps_free(global);
        flps_free(local);
        return 0;
    }
    for (size_t i = 0; i < p->n; i++)
        global[y[p->idx[i]]] += 1.0 / (double)p->n;
    for (uint32_t c = 0; c < p->clients; c++) {
        size_t len = partition_count(p, c);
        double tv = 0;

        if (len == 0)
            continue;
        memset(local, 0, classes * sizeof(*local));
        for (size_t i = p->off[c]; i < p->off[c + 1]; i++)
            local[y[p->idx[i]]] += 1.0;
        for (size_t k = 0; k < classes; k++)
            tv += fabs(local[k] / (double)len - global[k]);
        sum += 0.5 * tv;
        used++;
    }
    flps_free(global);
    flps_free(local);
    return used ? sum / used : 0;
}

void partition_fini(partition *p)
{
    if (p == NULL)
        return;
    flps_free(p->idx);
    flps_free(p->off);
    memset(p, 0, sizeof(*p));
}
