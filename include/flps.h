/* flps client library: connect a training process to the parameter-server
 * shards of a job, push compressed gradients with error feedback, and keep
 * a local replica of the model up to date with the shards' sparse updates.
 *
 * The library never aborts and never exits: every call returns an flps_err,
 * and a client that hit an error keeps it (flps_client_last_error) and
 * fails every later call fast. One client is used by one thread. */
#ifndef FLPS_H
#define FLPS_H

#include <stddef.h>
#include <stdint.h>

#include "flps_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flps_client flps_client;

/* One tensor of the model. data is the worker's replica: borrowed until
 * flps_client_destroy; the client overwrites it on init/pull and adds the
 * shards' updates into it. */
typedef struct flps_tensor {
    const char *name;
    size_t numel;
    float *data;
} flps_tensor;

typedef struct flps_client_config {
    const char *job; /* job id, 1..63 chars */
    uint32_t rank;   /* 0..workers-1 */
    uint32_t workers;
    const char *const *servers; /* shard endpoints, shard i = servers[i] */
    uint32_t nservers;
    const flps_tensor *tensors; /* the model layout, first layer first */
    uint32_t ntensors;
    uint32_t part_size;      /* max elements per part; 0 = 65536 */
    int async;               /* 0: synchronous S-SGD; 1: asynchronous */
    const char *compression; /* "dense", "fp16", "topk:D", "gtopk:D",
                                "randk:D", "dgc:D", "qsgd:BITS", "sign"
                                or "auto" (a codec per layer, see
                                flps_client_set_layer_codec) */
    double lr;               /* > 0 */
    int lr_cosine;           /* 0: constant lr; 1: cosine decay of lr to
                                0 over `iterations` (applied by the
                                shards at each iteration) */
    uint64_t iterations;     /* the schedule's length */
    double momentum;         /* [0, 1): worker-side momentum (correction) */
    int retry_ms;            /* resend an unanswered request after this;
                                0 = 2000 */
    int deadline_ms;         /* give up on a request after this;
                                0 = 300000 */
} flps_client_config;

typedef struct flps_client_stats {
    uint64_t bytes_sent;     /* put on the wire, message headers and
                                framing included */
    uint64_t bytes_received; /* taken off the wire, likewise */
    uint64_t dense_bytes;    /* what bytes_sent would be had every push
                                been a dense f32 message */
    uint64_t pushes;         /* push messages sent (first attempts) */
    uint64_t resends;        /* requests sent again after a timeout */
    uint64_t elements_sent;  /* index/value pairs (or dense values) pushed */
} flps_client_stats;

/* Connect to every shard and register the layout and job settings; blocks
 * until every shard accepted them (or the deadline). A shard that refuses
 * (another layout, other settings) makes this fail with its reason.
 * Caller owns *out on FLPS_OK. */
flps_err flps_client_create(const flps_client_config *cfg, flps_client **out);

/* Start of training: rank 0 offers its tensors' values as the initial
 * model (a shard restored from a checkpoint keeps its own); then every rank
 * pulls the model into its replica. Blocks. */
flps_err flps_client_init(flps_client *c);

/* Push the gradient of tensor `tensor` for iteration iter: momentum,
 * error feedback and the compression are applied, and the selection goes
 * to the owning shards at once (call it as each layer's gradient is ready;
 * sending overlaps the rest of backprop). grad is borrowed for the call.
 * Each tensor is pushed once per iteration. */
flps_err flps_client_push(flps_client *c, uint32_t tensor, const float *grad,
                          uint64_t iter);

/* Wait until every part pushed for iter has its update and apply them to
 * the replica (async mode: until the pushes are applied, then pull the
 * model). Resends unanswered requests; blocks up to the deadline. */
flps_err flps_client_wait(flps_client *c, uint64_t iter);

/* Replace the replica with the shards' current model. Blocks. */
flps_err flps_client_pull(flps_client *c);

/* Auto jobs (compression "auto") only: the codec of one tensor from its
 * next push on. spec is "dense" (every element sent as an index/value
 * pair; the error-feedback residual is flushed and stays zero, momentum
 * is plain heavy-ball) or "topk:D" (exact top-k of density D in (0, 1]
 * with error feedback and momentum correction). The tensor's residual and
 * velocity are kept across a change: only the codec is swapped. Every push
 * of an auto job is sparse (the shards aggregate the union of the pairs),
 * so workers may use different codecs for a layer without breaking the
 * aggregation. Before any call, a tensor of at least 4096 elements starts
 * as "topk:0.01" and a smaller one as "dense".
 * Errors: FLPS_ESTATE (not an auto job), FLPS_EINVAL (tensor out of range,
 * spec NULL or neither dense nor topk:D), FLPS_ENOMEM; none of them is
 * sticky, and on error the old codec stays. spec is borrowed for the call. */
flps_err flps_client_set_layer_codec(flps_client *c, uint32_t tensor,
                                     const char *spec);

/* Measure the network to the shards, for a cost model: *alpha (seconds) =
 * half the shortest round trip of 5 pulls of the smallest part (a small
 * request), *beta (seconds per byte) = (shortest of 3 full pulls - 2 *
 * alpha) / (4 * parameters), or the full pull time / bytes when that is
 * not positive. The pulls replace the replica with the shards' model, as
 * flps_client_pull does, so call it where a pull is harmless (right after
 * flps_client_init). Blocks. Errors: FLPS_ESTATE (a push is still waiting
 * for its update), and flps_client_pull's errors. Both outputs are written
 * only on FLPS_OK and are > 0 then. */
flps_err flps_client_measure_network(flps_client *c, double *alpha,
                                     double *beta);

/* Ask every shard to write a checkpoint now. Blocks. */
flps_err flps_client_checkpoint(flps_client *c);

/* The first iteration the shards have not closed yet (after create). */
uint64_t flps_client_resume_iteration(const flps_client *c);

void flps_client_get_stats(const flps_client *c, flps_client_stats *out);

/* The sticky error message, "" if none. Never NULL; valid until the next
 * call on c. */
const char *flps_client_last_error(const flps_client *c);

/* Close connections and free everything. NULL does nothing. */
void flps_client_destroy(flps_client *c);

#ifdef __cplusplus
}
#endif

#endif
