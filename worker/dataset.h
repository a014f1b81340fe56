/* Datasets for the training runtime: Fashion-MNIST from IDX .gz files,
 * a synthetic one for tests, and the split of a training set by worker. */
#ifndef FLPS_WORKER_DATASET_H
#define FLPS_WORKER_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct dataset {
    size_t n;       /* number of samples */
    size_t dim;     /* features per sample (784 for Fashion-MNIST) */
    size_t classes; /* 10 */
    float *x;       /* n * dim, row-major, normalised (see below); owned */
    uint8_t *y;     /* n labels in [0, classes); owned */
} dataset;

/* Load the Fashion-MNIST split from dir ("train" reads
 * train-images-idx3-ubyte.gz + train-labels-idx1-ubyte.gz, "test" reads
 * t10k-*). Pixels become (p/255 - 0.2860) / 0.3530 (the training set's mean
 * and std). Validates magic numbers, sizes and labels; errors name the file
 * and what was wrong (logged) and return FLPS_EIO / FLPS_EPROTO. */
flps_err dataset_load_fmnist(const char *dir, const char *split, dataset *out);

/* A deterministic synthetic classification set (Gaussian clusters, one per
 * class) with n samples, dim features, classes classes, seeded. */
flps_err dataset_synthetic(size_t n, size_t dim, size_t classes, uint64_t seed,
                           dataset *out);

/* Frees what ds owns; ds may be zeroed or NULL. */
void dataset_fini(dataset *ds);

/* Sample s of ds into slot b of a batch: its features into x + b * dim,
 * its label into y[b]. */
void dataset_copy_sample(const dataset *ds, size_t s, float *x, uint8_t *y,
                         size_t b);

/* IID split: shuffle 0..n-1 with seed, give worker `rank` of `workers` the
 * rank-th contiguous slice of the permutation (sizes differ by at most 1).
 * *idx is caller-owned (free with free()); *count its length. */
flps_err dataset_split_iid(size_t n, uint32_t workers, uint32_t rank,
                           uint64_t seed, uint32_t **idx, size_t *count);

#endif
