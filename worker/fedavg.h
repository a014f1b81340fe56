/* Federated averaging arithmetic (ALGORITHMS.md, mode fedavg): which
 * clients take part in a round, and how a worker process turns its
 * clients' model deltas into the push that makes the shards' synchronous
 * aggregation apply the sample-weighted mean of the round's deltas.
 * No I/O, no client library: fedavg_loop.c drives the rounds. */
#ifndef FLPS_WORKER_FEDAVG_H
#define FLPS_WORKER_FEDAVG_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Clients in each round: ceil(fraction * clients), at least 1 and at most
 * clients (0 when clients is 0). */
uint32_t fedavg_round_size(uint32_t clients, double fraction);

/* The clients of round `round`: fedavg_round_size(clients, fraction)
 * distinct ids below clients, drawn without replacement from (seed, round)
 * and written to out in ascending order. Every worker process computes the
 * same sample. out holds at least fedavg_round_size(...) entries.
 * Errors: FLPS_EINVAL (out NULL, clients 0, fraction not in (0, 1]),
 * FLPS_ENOMEM. */
flps_err fedavg_sample(uint32_t clients, double fraction, uint64_t seed,
                       uint64_t round, uint32_t *out);

/* round_deadline's stragglers: slow[c] = 1 for the
 * fedavg_round_size(clients, fraction) clients drawn from seed (a draw of
 * its own, apart from every round's sample), 0 for the others; all 0 when
 * fraction is 0. The same on every worker process and in every round.
 * Errors: FLPS_EINVAL (slow NULL, clients 0, fraction not in [0, 1]),
 * FLPS_ENOMEM. */
flps_err fedavg_stragglers(uint32_t clients, double fraction, uint64_t seed,
                           uint8_t *slow);

/* acc[i] += weight * (local[i] - global[i]) for i < n: one client's delta,
 * weighted by its sample count. */
void fedavg_add_delta(float *acc, const float *local, const float *global,
                      size_t n, double weight);

/* Turn the weighted sum of a worker's deltas into its push: acc[i] *=
 * -workers / total, where total is the sum of the sample counts of all the
 * round's clients (on every worker). A shard registered with lr 1 applies
 * w += -(1 / workers) * sum over workers of the pushes, which is then
 * w + sum_i n_i * delta_i / total: the FedAvg update. */
void fedavg_scale_push(float *acc, size_t n, uint32_t workers, double total);

#endif
