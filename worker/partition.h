/* The split of a training set among the clients of a job: iid slices, the
 * non-IID Dirichlet label partition (ALGORITHMS.md) or label shards
 * (McMahan et al.), deterministic by seed so every worker process computes
 * the same split without talking. libflps exports it (flps_fl_partition,
 * worker/fl.c), so flworker and a user's program split alike. */
#ifndef FLPS_WORKER_PARTITION_H
#define FLPS_WORKER_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Client c holds the sample indices idx[off[c] .. off[c + 1]). Every index
 * of 0..n-1 appears exactly once over all clients. Owned by the partition;
 * free with partition_fini. */
typedef struct partition {
    uint32_t clients;
    size_t n;      /* samples in all */
    uint32_t *idx; /* n indices, client by client */
    size_t *off;   /* clients + 1 offsets */
} partition;

/* The permutation of 0..n-1 that seed gives (Fisher-Yates over splitmix64,
 * unbiased draws): *out (caller frees with flps_free) on FLPS_OK.
 * dataset_split_iid cuts the worker slices from it. Errors: FLPS_EINVAL
 * (out NULL, n over 2^32), FLPS_ENOMEM. */
flps_err partition_permutation(size_t n, uint64_t seed, uint32_t **out);

/* IID: client c gets the slice dataset_split_iid(n, clients, c, seed)
 * gives, so a job of one client per worker trains on exactly the data it
 * always did. Errors: FLPS_EINVAL (clients 0 or above n, n over 2^32,
 * out NULL), FLPS_ENOMEM. *out is written only on FLPS_OK. */
flps_err partition_iid(size_t n, uint32_t clients, uint64_t seed,
                       partition *out);

/* Dirichlet(alpha) over labels y[0..n) in [0, classes): per class, the
 * class's shuffled indices are cut among the clients at proportions drawn
 * from Dir(alpha * 1) (normalised Gamma(alpha) draws), skipping clients
 * that already hold n / clients samples; the whole draw is repeated until
 * every client holds at least min(10, n / clients) samples; each client's
 * list is shuffled at the end. Small alpha gives each client few classes.
 * Errors: FLPS_EINVAL (y NULL, clients 0 or above n, classes 0 or a label
 * >= classes, alpha not > 0 and finite, out NULL), FLPS_ECONFIG (no draw in
 * 1000 gave every client its minimum), FLPS_ENOMEM. *out is written only
 * on FLPS_OK. */
flps_err partition_dirichlet(const uint8_t *y, size_t n, size_t classes,
                             uint32_t clients, double alpha, uint64_t seed,
                             partition *out);

/* Label shards (McMahan et al., "pathological non-IID"): the samples
 * sorted by label (by index within a label) are cut into clients *
 * per_client slices as even as n allows, and each client gets per_client
 * of them drawn without replacement from seed; each client's list is then
 * shuffled. With per_client 2, most clients see two labels. Errors:
 * FLPS_EINVAL (y NULL, clients 0 or above n, classes 0 or a label >=
 * classes, per_client 0, clients * per_client above n, out NULL),
 * FLPS_ENOMEM. *out is written only on FLPS_OK. */
flps_err partition_shards(const uint8_t *y, size_t n, size_t classes,
                          uint32_t clients, uint32_t per_client, uint64_t seed,
                          partition *out);

/* Samples of client c (0 for c out of range or p NULL). */
size_t partition_count(const partition *p, uint32_t c);

/* The partition's skew: the mean over clients of the total-variation
 * distance 1/2 * sum_k |h_c(k) - h(k)| between the client's label
 * histogram h_c and the global one h (both normalised). 0 = every client
 * sees the global label mix. Clients without samples are left out of the
 * mean. Returns 0 for an empty partition (or when out of memory). */
double partition_skew(const partition *p, const uint8_t *y, size_t classes);

/* Shuffle a[0..n) (Fisher-Yates) with the splitmix64 generator state *s,
 * which it advances. */
void partition_shuffle(uint32_t *a, size_t n, uint64_t *s);

/* Frees what p owns; p may be zeroed or NULL. */
void partition_fini(partition *p);

#endif
