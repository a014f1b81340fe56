/* libflps's federated-learning calls (flps_fl_*): flworker's client
 * sampling and data partitions (worker/fedavg.c, worker/partition.c) for
 * a user's program, so both pick the same clients and samples. */
#include "flps.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "worker/fedavg.h"
#include "worker/partition.h"

/* Labels are bytes inside the partitioner. */
#define FL_CLASSES_MAX 256u

uint32_t flps_fl_round_size(uint32_t clients, double fraction)
{
    return fedavg_round_size(clients, fraction);
}

flps_err flps_fl_sample(uint64_t seed, uint64_t round, uint32_t clients,
                        double fraction, uint32_t *out, size_t cap)
{
    if (out == NULL || clients == 0 || !(fraction > 0) || fraction > 1 ||
        cap < fedavg_round_size(clients, fraction))
        return FLPS_EINVAL;
    return fedavg_sample(clients, fraction, seed, round, out);
}

flps_err flps_fl_stragglers(uint64_t seed, uint32_t clients, double fraction,
                            uint8_t *slow)
{
    return fedavg_stragglers(clients, fraction, seed, slow);
}

/* The word of spec and its parameter: "iid" gives kind 0, "dirichlet:A"
 * kind 1 with *alpha, "shards:N" kind 2 with *shards; -1 otherwise
 * (logged). */
static int fl_parse_spec(const char *spec, double *alpha, uint64_t *shards)
{
    char why[160];

    if (spec == NULL)
        return -1;
    if (strcmp(spec, "iid") == 0)
        return 0;
    if (strncmp(spec, "dirichlet:", 10) == 0 &&
        flps_parse_double("dirichlet:A", spec + 10, 0, 1e300, alpha, why,
                          sizeof(why)) == FLPS_OK &&
        *alpha > 0)
        return 1;
    if (strncmp(spec, "shards:", 7) == 0 &&
        flps_parse_u64("shards:N", spec + 7, 1, UINT32_MAX, shards, why,
                       sizeof(why)) == FLPS_OK)
        return 2;
    log_error("partition '%s' is none of iid, dirichlet:A (A > 0), "
              "shards:N (N >= 1)",
              spec);
    return -1;
}

/* labels as the partitioner's bytes; NULL when one is >= classes or no
 * memory (logged). */
static uint8_t *fl_labels(const uint32_t *labels, size_t n, uint32_t classes,
                          flps_err *rc)
{
    uint8_t *y = flps_malloc(n ? n : 1);

    *rc = FLPS_ENOMEM;
    if (y == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (labels[i] >= classes) {
            log_error("label %u of sample %zu is not below classes %u",
                      labels[i], i, classes);
            flps_free(y);
            *rc = FLPS_EINVAL;
            return NULL;
        }
        y[i] = (uint8_t)labels[i];
    }
    *rc = FLPS_OK;
    return y;
}

flps_err flps_fl_partition(const char *spec, const uint32_t *labels, size_t n,
                           uint32_t classes, uint32_t clients, uint64_t seed,
                           uint32_t *idx, size_t *off)
{
    double alpha = 0;
    uint64_t shards = 0;
    const int kind = fl_parse_spec(spec, &alpha, &shards);
    uint8_t *y = NULL;
    partition p;
    flps_err rc;

    if (kind < 0 || idx == NULL || off == NULL || clients == 0 || clients > n ||
        (uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return FLPS_EINVAL;
    if (kind > 0) {
        if (labels == NULL || classes == 0 || classes > FL_CLASSES_MAX) {
            log_error("partition %s needs labels of 1 to %u classes", spec,
                      FL_CLASSES_MAX);
            return FLPS_EINVAL;
        }
        y = fl_labels(labels, n, classes, &rc);
        if (y == NULL)
            return rc;
    }
    if (kind == 0)
        rc = partition_iid(n, clients, seed, &p);
    else if (kind == 1)
        rc = partition_dirichlet(y, n, classes, clients, alpha, seed, &p);
    else
        rc = partition_shards(y, n, classes, clients, (uint32_t)shards, seed,
                              &p);
    flps_free(y);
    if (rc != FLPS_OK)
        return rc;
    memcpy(idx, p.idx, n * sizeof(*idx));
    memcpy(off, p.off, ((size_t)clients + 1) * sizeof(*off));
    partition_fini(&p);
    return FLPS_OK;
}
