/* The split of a training set among clients: iid slices and the Dirichlet
 * label partition, with Gamma draws from the project's seeded splitmix64. */
#include "worker/partition.h"

#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "worker/dataset.h"

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

flps_err partition_iid(size_t n, uint32_t clients, uint64_t seed,
                       partition *out)
{
    partition p;
    uint32_t *perm = NULL;
    size_t len = 0;
    flps_err rc;

    if (out == NULL || clients == 0 || clients > n ||
        (uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return FLPS_EINVAL;
    /* One worker's slice is the whole permutation the worker split cuts,
     * so cutting it the same way gives every client its slice with one
     * shuffle instead of one per client. */
    rc = dataset_split_iid(n, 1, 0, seed, &perm, &len);
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

flps_err partition_dirichlet(const uint8_t *y, size_t n, size_t classes,
                             uint32_t clients, double alpha, uint64_t seed,
                             partition *out)
{
    uint64_t s = seed ^ 0xd1e1c4e7a1f0c0deull;
    uint32_t *byclass = NULL, *work = NULL, *owner = NULL;
    size_t *cls_off = NULL, *count = NULL, *fill = NULL, *pos = NULL;
    size_t need, draw;
    double *prop = NULL;
    partition p;
    flps_err rc = FLPS_ENOMEM;

    if (out == NULL || y == NULL || clients == 0 || clients > n ||
        classes == 0 || !(alpha > 0) || !isfinite(alpha) ||
        (uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return FLPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (y[i] >= classes)
            return FLPS_EINVAL;
    memset(&p, 0, sizeof(p));
    byclass = flps_malloc(n * sizeof(*byclass));
    work = flps_malloc(n * sizeof(*work));
    owner = flps_malloc(n * sizeof(*owner));
    cls_off = flps_calloc(classes + 1, sizeof(*cls_off));
    count = flps_calloc(clients, sizeof(*count));
    fill = flps_calloc(clients, sizeof(*fill));
    prop = flps_calloc(clients, sizeof(*prop));
    if (byclass == NULL || work == NULL || owner == NULL || cls_off == NULL ||
        count == NULL || fill == NULL || prop == NULL)
        goto out;
    /* Group the indices by class, ascending within each class, so the
     * draw depends on the labels only. */
    for (size_t i = 0; i < n; i++)
        cls_off[y[i] + 1]++;
    for (size_t k = 0; k < classes; k++)
        cls_off[k + 1] += cls_off[k];
    pos = flps_calloc(classes, sizeof(*pos));
    if (pos == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        byclass[cls_off[y[i]] + pos[y[i]]++] = (uint32_t)i;
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
    if (draw == PARTITION_MAX_DRAWS) {
        rc = FLPS_ECONFIG;
        goto out;
    }
    rc = partition_alloc(n, clients, &p);
    if (rc != FLPS_OK)
        goto out;
    for (uint32_t j = 0; j < clients; j++)
        p.off[j + 1] = p.off[j] + count[j];
    for (size_t i = 0; i < n; i++)
        p.idx[p.off[owner[i]] + fill[owner[i]]++] = (uint32_t)i;
    for (uint32_t j = 0; j < clients; j++)
        partition_shuffle(p.idx + p.off[j], count[j], &s);
    *out = p;
    rc = FLPS_OK;
out:
    flps_free(byclass);
    flps_free(work);
    flps_free(owner);
    flps_free(cls_off);
    flps_free(count);
    flps_free(fill);
    flps_free(prop);
    flps_free(pos);
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
