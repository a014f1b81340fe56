/* flps client library: connect a training process to the parameter-server
 * shards of a job, push compressed gradients with error feedback, and keep
 * a local replica of the model up to date with the shards' sparse updates.
 *
 * This is the one installed header of libflps; every call declared here
 * (and nothing else) is exported from libflps.so. The library never aborts
 * and never exits: every fallible call returns an flps_err. docs/api.md is
 * the full guide (lifecycle, threading, ownership, every call's errors).
 *
 * Threading: one client is used by one thread at a time; different clients
 * may be used from different threads. flps_strerror, flps_errname and
 * flps_version may be called from any thread at any time. */
#ifndef FLPS_H
#define FLPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the calls exported from libflps.so (everything else is built with
 * -fvisibility=hidden and stays internal). */
#if defined(__GNUC__) || defined(__clang__)
#define FLPS_API __attribute__((visibility("default")))
#else
#define FLPS_API
#endif

/* The library's version: these macros are the one place it is written
 * (the build reads them for the soname, flps.pc and the CMake package).
 * flps_version() is the version of the library actually loaded, as
 * "MAJOR.MINOR.PATCH"; compare it with the macros to catch a header and
 * library that do not match. The soname changes with MAJOR. */
#define FLPS_VERSION_MAJOR 0
#define FLPS_VERSION_MINOR 3
#define FLPS_VERSION_PATCH 0

FLPS_API const char *flps_version(void);

/* Error codes: one table makes the enum, the messages and the names. The
 * numbers are pinned: a code keeps its number in every release (bindings
 * may hard-code them); new codes only ever get new numbers at the end.
 *
 * Sticky errors. A client that fails a call for a cause that breaks it
 * (the network, a shard's refusal, out of memory, a protocol violation,
 * a call out of order: FLPS_ENOMEM, FLPS_EPROTO, FLPS_ETIMEDOUT, FLPS_ESYS,
 * FLPS_ELATE, FLPS_EDUP, FLPS_EFUTURE, FLPS_EJOB, FLPS_ELAYOUT,
 * FLPS_ESTATE, FLPS_EIO, FLPS_ECONFIG, FLPS_EREMOTE, FLPS_ECLOSED,
 * FLPS_EAUTH) keeps
 * the first such error: every later call returns the same code at once and
 * flps_client_last_error says what happened; destroy the client and make a
 * new one. Not sticky (the client is unchanged and the call may be made
 * again): FLPS_EINVAL for a bad argument, FLPS_ENONFINITE for a gradient
 * holding NaN or Inf (nothing was sent), and every error of
 * flps_client_set_layer_codec, flps_client_set_staleness and
 * flps_client_set_push_weight, the FLPS_ESTATE of
 * flps_client_measure_network and of flps_client_wait_layer on an
 * asynchronous client, and the errors that flps_client_push_pairs and
 * flps_client_pairs_taken name as not sticky. */
#define FLPS_ERR_MAP(X)                                                        \
    X(FLPS_OK, 0, "success")                                                   \
    X(FLPS_ENOMEM, 1, "out of memory")                                         \
    X(FLPS_EINVAL, 2, "invalid argument")                                      \
    X(FLPS_EPROTO, 3, "malformed message")                                     \
    X(FLPS_ETIMEDOUT, 4, "timed out")                                          \
    X(FLPS_ESYS, 5, "system call failed")                                      \
    X(FLPS_ERANGE, 6, "index out of range")                                    \
    X(FLPS_ENONFINITE, 7, "non-finite value (NaN or Inf)")                     \
    X(FLPS_ELATE, 8, "push for an iteration that is already closed")           \
    X(FLPS_EDUP, 9, "second push of the same worker in one iteration")         \
    X(FLPS_EFUTURE, 10, "push for an iteration that has not opened yet")       \
    X(FLPS_EJOB, 11, "wrong job id")                                           \
    X(FLPS_ELAYOUT, 12, "model layout does not match the one registered")      \
    X(FLPS_ESTATE, 13, "operation not allowed in the current state")           \
    X(FLPS_EIO, 14, "file input/output failed")                                \
    X(FLPS_ECONFIG, 15, "invalid configuration")                               \
    X(FLPS_EREMOTE, 16, "the server replied with an error")                    \
    X(FLPS_ECLOSED, 17, "connection closed")                                   \
    X(FLPS_EAUTH, 18, "not a member of the job (credentials refused)")

typedef enum {
#define FLPS_ERR_ENUM_(code, num, msg) code = num,
    FLPS_ERR_MAP(FLPS_ERR_ENUM_)
#undef FLPS_ERR_ENUM_
} flps_err;

/* Human message for err ("unknown error" for a number not in the table);
 * never NULL, a static string. */
FLPS_API const char *flps_strerror(flps_err err);

/* Symbolic name ("FLPS_EINVAL") for err; never NULL, a static string. */
FLPS_API const char *flps_errname(flps_err err);

/* Logging. The library logs a line for events a person should hear of
 * (a shard that cannot be reached, a resent request, a refusal); by default
 * each goes to stderr with a timestamp. A host program routes or silences
 * them with a logger: fn is called with the line's level and its text
 * (no timestamp, no newline; borrowed for the call) from whichever thread
 * logged, one call per line, never concurrently with itself for one
 * process (calls are serialized). flps_set_logger(NULL, NULL) restores the
 * default; a function that does nothing silences the library. Lines below
 * FLPS_LOG_INFO are dropped unless FLPS_LOG=debug is in the environment.
 * Thread-safe: may be called at any time; a line already being written
 * goes to the logger it started with. */
typedef enum {
    FLPS_LOG_DEBUG = 0,
    FLPS_LOG_INFO = 1,
    FLPS_LOG_WARN = 2,
    FLPS_LOG_ERROR = 3,
} flps_log_level;

typedef void (*flps_logger_fn)(void *arg, flps_log_level level,
                               const char *line);

FLPS_API void flps_set_logger(flps_logger_fn fn, void *arg);

typedef struct flps_client flps_client;

/* One tensor of the model. data is the worker's replica: borrowed until
 * flps_client_destroy; the client overwrites it on init/pull and adds the
 * shards' updates into it. */
typedef struct flps_tensor {
    const char *name;
    size_t numel;
    float *data;
} flps_tensor;

/* The values of flps_client_config.async. */
#define FLPS_MODE_SYNC 0
#define FLPS_MODE_ASYNC 1
#define FLPS_MODE_WEIGHTED 2

typedef struct flps_client_config {
    const char *job; /* job id, 1..63 chars */
    uint32_t rank;   /* 0..workers-1 */
    uint32_t workers;
    const char *const *servers; /* shard endpoints, shard i = servers[i] */
    uint32_t nservers;
    const flps_tensor *tensors; /* the model layout, first layer first */
    uint32_t ntensors;
    uint32_t part_size;      /* max elements per part; 0 = 65536 */
    int async;               /* FLPS_MODE_SYNC (0): synchronous S-SGD;
                                FLPS_MODE_ASYNC (1): asynchronous;
                                FLPS_MODE_WEIGHTED (2): synchronous, the
                                shards divide each iteration's summed
                                pushes by the sum of their weights
                                (flps_client_set_push_weight) instead of
                                by workers */
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
FLPS_API flps_err flps_client_create(const flps_client_config *cfg,
                                     flps_client **out);

/* flps_client_create on the data plane transport names (a new call rather
 * than a field of flps_client_config, so programs built against an older
 * flps.h keep working): "zmq" (ZeroMQ over TCP), "rdma" (RDMA queue pairs;
 * fails at once with FLPS_ECONFIG, nothing connected, when this node has
 * no ACTIVE RDMA port or the library was built without libibverbs, and the
 * log line names the cause and the fix) or "auto" (RDMA where this node
 * can run it, ZeroMQ otherwise; one log line says which and why). NULL:
 * $FLPS_TRANSPORT when set (flsched and flrun set it for a job's own
 * programs), else "zmq"; flps_client_create is this call with NULL. The
 * shards must run the same transport: under flsched and flrun they are
 * started with the job's choice. Errors: those of flps_client_create,
 * FLPS_EINVAL for a name that is none of the three, FLPS_ECONFIG. */
FLPS_API flps_err flps_client_create_with(const flps_client_config *cfg,
                                          const char *transport,
                                          flps_client **out);

/* flps_client_create_with and a density warm-up (Deep Gradient
 * Compression): over the first warmup_iterations iterations each layer's
 * selection density decays exponentially from start_density to its codec's
 * density, density(t) = start * (target / start)^(t / warmup_iterations),
 * and stays at the target from then on; a layer whose target is at or
 * above start_density keeps its target. The density of a push is a pure
 * function of its iteration, so every worker selects the same fraction,
 * and the shards (told at registration, which every worker's must match)
 * cut a gtopk sum to the same schedule's k. It applies to topk:D, gtopk:D,
 * dgc:D and the topk:D layers of an auto job (their plan's densities are
 * the targets); the job must be synchronous (async = 0). warmup_iterations
 * 0 is flps_client_create_with. Errors: those of flps_client_create_with;
 * FLPS_EINVAL (logged, naming the cause) for a start density outside
 * (0, 1], an asynchronous job or a codec without a selection density. */
FLPS_API flps_err flps_client_create_warmup(const flps_client_config *cfg,
                                            const char *transport,
                                            uint64_t warmup_iterations,
                                            double start_density,
                                            flps_client **out);

/* Start of training: rank 0 offers its tensors' values as the initial
 * model (a shard restored from a checkpoint keeps its own); then every rank
 * pulls the model into its replica. Blocks. */
FLPS_API flps_err flps_client_init(flps_client *c);

/* Push the gradient of tensor `tensor` for iteration iter: momentum,
 * error feedback and the compression are applied, and the selection goes
 * to the owning shards at once (call it as each layer's gradient is ready;
 * sending overlaps the rest of backprop). grad is borrowed for the call.
 * Each tensor is pushed once per iteration. */
FLPS_API flps_err flps_client_push(flps_client *c, uint32_t tensor,
                                   const float *grad, uint64_t iter);

/* Push tensor `tensor`'s already-selected pairs for iteration iter: the
 * values val[j] at element indices idx[j], j < n, in any order. For workers
 * whose gradient lives elsewhere (a GPU): the caller runs the selection
 * with its own error feedback and momentum where the tensor is and hands
 * over only the pairs; the client applies neither to them (the config's
 * momentum and the tensor's residual are left alone) and sends them split
 * by part, as flps_client_push sends its own selection. Only for jobs whose
 * shards aggregate pairs: compression topk:D, gtopk:D, dgc:D, randk:D or
 * auto. n may be 0 (the shards still need this worker's push), and n may
 * exceed the codec's k: the shards add up whatever is pushed (gtopk then
 * keeps the k largest sums of each part). After flps_client_wait(iter),
 * flps_client_pairs_taken tells which pairs the shards did not take.
 * idx and val are borrowed for the call (copied before it returns).
 * Errors, none sticky and nothing sent: FLPS_EINVAL (tensor out of range,
 * n larger than the tensor, idx or val NULL with n > 0, an index given
 * twice), FLPS_ERANGE (an index >= the tensor's numel), FLPS_ENONFINITE
 * (a value NaN or Inf), FLPS_ESTATE (the job's shards aggregate dense
 * values: dense, fp16, qsgd:BITS, sign). Sticky: those of
 * flps_client_push (FLPS_ESTATE for a tensor pushed again before its
 * update arrived, FLPS_ENOMEM, the transport's). */
FLPS_API flps_err flps_client_push_pairs(flps_client *c, uint32_t tensor,
                                         const uint32_t *idx, const float *val,
                                         size_t n, uint64_t iter);

/* After flps_client_wait of a flps_client_push_pairs of tensor `tensor`:
 * taken[j] = 1 when pair j of that push (the caller's order) went into the
 * shards' update, 0 when the shards did not take it (gtopk: not among its
 * part's k largest sums). The caller adds the pairs with taken[j] = 0 back
 * into its residual (r[idx[j]] += val[j]), as flps_client_push's own error
 * feedback does, so no value is lost. topk, dgc, randk and auto take every
 * pair; so does an asynchronous job. n must be the n of that push.
 * Errors, none sticky, taken unchanged: FLPS_EINVAL (tensor out of range,
 * taken NULL with n > 0, n not the pushed count), FLPS_ESTATE (the
 * tensor's last push was not flps_client_push_pairs, or its update has not
 * arrived: call flps_client_wait first). taken is written only on
 * FLPS_OK. */
FLPS_API flps_err flps_client_pairs_taken(const flps_client *c, uint32_t tensor,
                                          uint8_t *taken, size_t n);

/* Wait until every part pushed for iter has its update and apply them to
 * the replica (async mode: until the pushes are applied, then pull the
 * model). Resends unanswered requests; blocks up to the deadline. */
FLPS_API flps_err flps_client_wait(flps_client *c, uint64_t iter);

/* Synchronous clients: wait until every part of tensor `tensor` pushed
 * for iter has its update and apply it to that tensor's replica; replies
 * for other tensors that arrive first are applied too, and their pushes
 * stay outstanding otherwise. Call it just before the next forward pass
 * first reads the tensor, so that pass waits only for the layers it has
 * reached while later layers' updates are still on the wire (call
 * flps_client_wait, or this for every tensor, before anything reads the
 * whole model). A tensor with nothing outstanding returns at once; a
 * tensor may be pushed again (for iter + 1) once this returned for it.
 * Resends unanswered requests; blocks up to the deadline.
 * Errors: FLPS_EINVAL (c NULL, tensor out of range) and FLPS_ESTATE for an
 * asynchronous client (use flps_client_wait), neither sticky; FLPS_ESTATE
 * (sticky) when a part of the tensor was pushed for another iteration;
 * flps_client_wait's errors. */
FLPS_API flps_err flps_client_wait_layer(flps_client *c, uint32_t tensor,
                                         uint64_t iter);

/* Replace the replica with the shards' current model. Blocks. */
FLPS_API flps_err flps_client_pull(flps_client *c);

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
FLPS_API flps_err flps_client_set_layer_codec(flps_client *c, uint32_t tensor,
                                              const char *spec);

/* Bounded staleness (SSP) for an asynchronous client (async = 1): from
 * now on flps_client_wait(iter) returns only once the slowest worker has
 * pushed every iteration below iter + 1 - staleness, so this worker never
 * computes more than `staleness` iterations ahead of it; meanwhile it
 * pulls the model again. The shards apply pushes as they come and tell
 * the slowest worker's iteration in their pull replies. 0 waits for every
 * worker's previous iteration; UINT32_MAX (the default) is plain async.
 * A wait longer than the request deadline fails with FLPS_ETIMEDOUT
 * naming how far behind the slowest worker is. Errors: FLPS_EINVAL (c
 * NULL), FLPS_ESTATE (a synchronous client); neither is sticky. */
FLPS_API flps_err flps_client_set_staleness(flps_client *c, uint32_t staleness);

/* The weight of this worker's next pushes in a weighted job (async =
 * FLPS_MODE_WEIGHTED), until set again; 1 until first set. The shards
 * apply -lr * (sum of the iteration's pushes) / (sum of their weights),
 * so a worker that pushes w_i * g_i with weight w_i gets the weighted mean
 * of the g_i: FedAvg's sample-weighted average, where a worker whose
 * clients all missed the round's deadline pushes zeros with weight 0 (an
 * iteration whose weights sum to 0 changes nothing). Errors: FLPS_EINVAL
 * (c NULL; weight negative, not finite or above 1e15), FLPS_ESTATE (not a
 * weighted client); neither is sticky. */
FLPS_API flps_err flps_client_set_push_weight(flps_client *c, double weight);

/* Seconds flps_client_wait spent waiting for the slowest worker (above). */
FLPS_API double flps_client_stale_wait_seconds(const flps_client *c);

/* Measure the network to the shards, for a cost model: *alpha (seconds) =
 * half the shortest round trip of 5 pulls of the smallest part (a small
 * request), *beta (seconds per byte) = (shortest of 3 full pulls - 2 *
 * alpha) / (4 * parameters), or the full pull time / bytes when that is
 * not positive. The pulls replace the replica with the shards' model, as
 * flps_client_pull does, so call it where a pull is harmless (right after
 * flps_client_init). Blocks. Errors: FLPS_ESTATE (a push is still waiting
 * for its update), and flps_client_pull's errors. Both outputs are written
 * only on FLPS_OK and are > 0 then. */
FLPS_API flps_err flps_client_measure_network(flps_client *c, double *alpha,
                                              double *beta);

/* Ask every shard to write a checkpoint now. Blocks. */
FLPS_API flps_err flps_client_checkpoint(flps_client *c);

/* The lowest iteration that some part of the model has not closed yet,
 * over all the shards (after create): where the training loop starts. A
 * part one iteration ahead (its shard closed it before a crash) answers
 * that iteration's push with the update it applied then. */
FLPS_API uint64_t flps_client_resume_iteration(const flps_client *c);

FLPS_API void flps_client_get_stats(const flps_client *c,
                                    flps_client_stats *out);

/* Messages put on and taken off the wire, every kind (requests, resends,
 * replies), since create. Either pointer may be NULL. */
FLPS_API void flps_client_get_messages(const flps_client *c, uint64_t *sent,
                                       uint64_t *received);

/* The L2 norm of layer tensor's error-feedback residual: what its codec has
 * not sent yet (0 for codecs without error feedback). One pass over the
 * layer: for monitoring now and then, not every push.
 * Errors: FLPS_EINVAL (tensor out of range, norm NULL). */
FLPS_API flps_err flps_client_residual_norm(const flps_client *c,
                                            uint32_t tensor, double *norm);

/* The sticky error message, "" if none. Never NULL; valid until the next
 * call on c. */
FLPS_API const char *flps_client_last_error(const flps_client *c);

/* Close connections and free everything. NULL does nothing. */
FLPS_API void flps_client_destroy(flps_client *c);

#ifdef __cplusplus
}
#endif

#endif
