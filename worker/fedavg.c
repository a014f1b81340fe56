/* Federated averaging arithmetic: client sampling and the scaled push. */
#include "worker/fedavg.h"

#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"

uint32_t fedavg_round_size(uint32_t clients, double fraction)
{
    double want;

    if (clients == 0)
        return 0;
    /* 0.1 * 100 must give 10, not 11: a rounding error of the product is
     * not a client. */
    want = ceil(fraction * (double)clients - 1e-9);
    if (!(want >= 1))
        return 1;
    return want >= (double)clients ? clients : (uint32_t)want;
}

flps_err fedavg_sample(uint32_t clients, double fraction, uint64_t seed,
                       uint64_t round, uint32_t *out)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull ^ (round + 0x5fedab5ull);
    uint32_t m, *ids;
    uint8_t *taken;

    if (out == NULL || clients == 0 || !(fraction > 0) || fraction > 1)
        return FLPS_EINVAL;
    m = fedavg_round_size(clients, fraction);
    ids = flps_malloc((size_t)clients * sizeof(*ids));
    taken = flps_calloc(clients, 1);
    if (ids == NULL || taken == NULL) {
        flps_free(ids);
        flps_free(taken);
        return FLPS_ENOMEM;
    }
    (void)flps_splitmix64(&s); /* decorrelate neighbouring rounds */
    for (uint32_t i = 0; i < clients; i++)
        ids[i] = i;
    /* The first m steps of a Fisher-Yates shuffle: a uniform sample
     * without replacement. */
    for (uint32_t i = 0; i < m; i++) {
        uint32_t j = i + (uint32_t)(flps_splitmix64(&s) % (clients - i));
        uint32_t t = ids[i];

        ids[i] = ids[j];
        ids[j] = t;
        taken[ids[i]] = 1;
    }
    for (uint32_t c = 0, k = 0; c < clients; c++)
        if (taken[c])
            out[k++] = c;
    flps_free(ids);
    flps_free(taken);
    return FLPS_OK;
}

void fedavg_add_delta(float *acc, const float *local, const float *global,
                      size_t n, double weight)
{
    const float w = (float)weight;

    for (size_t i = 0; i < n; i++)
        acc[i] += w * (local[i] - global[i]);
}

void fedavg_scale_push(float *acc, size_t n, uint32_t workers, double total)
{
    const double f = -(double)workers;

    /* Divide in double rather than multiply by a rounded 1 / total: a
     * weighted sum that total divides evenly comes out exact. */
    for (size_t i = 0; i < n; i++)
        acc[i] = (float)(f * (double)acc[i] / total);
}

flps_err fedavg_stragglers(uint32_t clients, double fraction, uint64_t seed,
                           uint8_t *slow)
{
    uint32_t n, *ids;
    flps_err rc;

    if (slow == NULL || clients == 0 || !(fraction >= 0 && fraction <= 1))
        return FLPS_EINVAL;
    memset(slow, 0, clients);
    if (fraction == 0)
        return FLPS_OK;
    n = fedavg_round_size(clients, fraction);
    ids = flps_malloc((size_t)n * sizeof(uint32_t));
    if (ids == NULL)
        return FLPS_ENOMEM;
    /* "STRAGGLE" apart the seed, the last round number apart the rounds. */
    rc = fedavg_sample(clients, fraction, seed ^ 0x5354524147474c45ull,
                       UINT64_MAX, ids);
    for (uint32_t k = 0; rc == FLPS_OK && k < n; k++)
        slow[ids[k]] = 1;
    flps_free(ids);
    return rc;
}
