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
 * may be used from different threads. flps_strerror, flps_errname,
 * flps_version, flps_metrics_serve and flps_metrics_report may be called
 * from any thread at any time. */
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
#define FLPS_VERSION_MINOR 4
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
    /* ---- From 0.4. The fields above are the 0.3 layout, all that
     * flps_client_create, _create_with and _create_warmup read; those
     * below are read only by flps_client_create_config, and only where the
     * caller's size holds them (a struct from an older flps.h lacks the
     * newest fields, which then keep their defaults). New settings are
     * only ever appended here. ---- */
    size_t size;                 /* sizeof the caller's struct: written by
                                    flps_client_config_init, never by hand */
    const char *transport;       /* the data plane: "zmq", "rdma" or "auto" as
                                    for flps_client_create_with; NULL (the
                                    default): $FLPS_TRANSPORT, else "zmq" */
    uint64_t density_warmup;     /* iterations of the density warm-up of
                                    flps_client_create_warmup; 0 (the
                                    default): none */
    double density_warmup_start; /* its start density, 0 < S <= 1;
                                    default 0.25 */
    /* The GPUs' clock and energy (docs/energy.md): every NULL below takes
     * the launcher's environment variable named, else the default. */
    const char *gpu_clock;          /* "default" (leave it), "max", "auto"
                                       or a clock in MHz ("1410");
                                       $FLPS_GPU_CLOCK */
    const char *gpu_clock_slowdown; /* auto's bound: "5%" or "0.05";
                                       $FLPS_GPU_CLOCK_SLOWDOWN, else 5% */
    const char *gpu_clock_record;   /* a file where the changed clocks are
                                       recorded, for a supervisor to
                                       restore after a crash;
                                       $FLPS_GPU_CLOCK_RECORD, else none */
    const char *gpus;               /* the GPUs this process uses: NVML
                                       indices or UUIDs, comma-separated;
                                       $CUDA_VISIBLE_DEVICES, else every
                                       GPU */
    /* ---- Appended after 0.4.0 (older structs lack it: sgd). ---- */
    const char *server_optimizer; /* what the shards make of each
                                     iteration's update U before applying
                                     it (federated averaging's server
                                     side, docs/federated.md): "sgd" (or
                                     NULL, the default: U itself),
                                     "momentum:B" (0 <= B < 1: v <- B v + U,
                                     apply v; FedAvgM) or "adam" (FedAdam:
                                     lr times Adam's normalised step on U).
                                     Synchronous or weighted jobs, not
                                     gtopk; every worker must say the
                                     same. */
    /* ---- Appended after server_optimizer (older structs lack it: 0). */
    int push_window; /* dense pushes in flight to each shard (pieces of
                        16384 values sent, their update not yet back;
                        the next ones wait in order, sent from within
                        this client's later calls): 0 (the default)
                        takes $FLPS_PUSH_WINDOW (a number or "auto"),
                        else no bound; a negative value: no bound,
                        every piece sent at once;
                        FLPS_PUSH_WINDOW_AUTO: sized to the link by
                        flps_client_init (flworker and flps.torch use
                        it for dense jobs). A program that drives
                        several clients from one thread and waits for
                        them in turn keeps no bound: a held push moves
                        only while its own client is called */
} flps_client_config;

/* push_window: size each shard's window to the link. flps_client_init
 * measures the rate of a few whole-model pulls once (as
 * flps_client_measure_network does; all workers at once, so it is what
 * the layout gives each) and keeps about 2 ms of it in flight per shard,
 * at least one piece; no bound where that covers every piece of a shard
 * (fast links, where the CPU and not the queue limits). A non-empty
 * $FLPS_PUSH_WINDOW overrides it, as it does 0. */
#define FLPS_PUSH_WINDOW_AUTO 2147483647

typedef struct flps_client_stats {
    uint64_t bytes_sent;     /* put on the wire, message headers and
                                framing included (a push waiting in
                                its shard's window counts from the
                                push on) */
    uint64_t bytes_received; /* taken off the wire, likewise */
    uint64_t dense_bytes;    /* what bytes_sent would be had every push
                                been a dense f32 message */
    uint64_t pushes;         /* push messages sent (first attempts) */
    uint64_t resends;        /* requests sent again after a timeout */
    uint64_t elements_sent;  /* index/value pairs (or dense values) pushed */
} flps_client_stats;

/* The growable configuration (0.4). flps_client_config_init fills cfg
 * with the defaults and sets cfg->size to the size of the struct the
 * program was compiled with, so a newer library can tell which fields an
 * older program's struct has; set the fields after it, then call
 * flps_client_create_config:
 *
 *     flps_client_config cfg;
 *     flps_client_config_init(&cfg);
 *     cfg.job = "mnist"; cfg.rank = rank; cfg.workers = workers;
 *     cfg.servers = servers; cfg.nservers = nservers;
 *     cfg.tensors = tensors; cfg.ntensors = ntensors;
 *     cfg.compression = "topk:0.01"; cfg.lr = 0.1; cfg.iterations = 1000;
 *     rc = flps_client_create_config(&cfg, &client);
 *
 * Defaults: part_size 65536, async FLPS_MODE_SYNC, compression "dense",
 * retry_ms 2000, deadline_ms 300000, transport NULL, density_warmup 0,
 * density_warmup_start 0.25; everything else 0 or NULL. job, workers,
 * servers, nservers, tensors, ntensors and lr have no default: create
 * refuses the configuration until they are set.
 *
 * flps_client_config_init_size is the call behind it, for bindings that
 * cannot use the inline function (size: the struct's size as the caller
 * lays it out). Errors: FLPS_EINVAL (logged) for cfg NULL, or a size
 * smaller than a configuration with its size field or larger than this
 * library's struct; cfg is unchanged then. Writes size bytes of cfg. */
FLPS_API flps_err flps_client_config_init_size(flps_client_config *cfg,
                                               size_t size);

static inline flps_err flps_client_config_init(flps_client_config *cfg)
{
    return flps_client_config_init_size(cfg, sizeof(*cfg));
}

/* The constructor that reads the whole configuration (0.4): connects to
 * every shard on cfg->transport, registers the layout and settings, with
 * cfg->density_warmup's warm-up, and blocks as flps_client_create does.
 * cfg must come from flps_client_config_init (its size field tells which
 * fields it has). It is flps_client_create_warmup(cfg, cfg->transport,
 * cfg->density_warmup, cfg->density_warmup_start, out), and any setting
 * added later arrives as a field here, not as another constructor.
 * Errors: those of flps_client_create_warmup; FLPS_EINVAL (logged,
 * nothing connected) also for cfg NULL or a size this library cannot
 * read: 0 or too small (not made by flps_client_config_init), or larger
 * than this library's struct (a program built against a newer flps.h).
 * cfg and what it points to are borrowed for the call. Caller owns *out
 * on FLPS_OK. */
FLPS_API flps_err flps_client_create_config(const flps_client_config *cfg,
                                            flps_client **out);

/* The 0.x constructors, kept for programs written against them; each
 * reads only the 0.3 fields of cfg (up to deadline_ms; size and what
 * follows it are ignored) and takes the later settings as arguments.
 * flps_client_create_config does what they do and grows; new programs
 * use it.
 *
 * Connect to every shard and register the layout and job settings; blocks
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
 * FLPS_EINVAL for a name that is none of the three, FLPS_ECONFIG. Since
 * 0.4 the transport is also the field transport of
 * flps_client_create_config. */
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
 * (0, 1], an asynchronous job or a codec without a selection density.
 * Since 0.4 also the fields density_warmup and density_warmup_start of
 * flps_client_create_config. */
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

/* ---- Energy and the GPU clock (0.4) ----
 * The process's first live client reads the energy counters where the
 * hardware has them (NVML's total-energy counter of the GPUs it uses,
 * RAPL's of the node's CPU packages) over windows of at least 10
 * iterations and 0.5 s, and sets the GPUs' clock as gpu_clock says
 * (docs/energy.md). Nothing is estimated: where nothing reports energy,
 * devices is 0 and why says so. */

typedef struct flps_energy {
    uint32_t devices;            /* devices metered: 0 where none reports */
    uint32_t gpus;               /* of which GPUs */
    uint64_t iterations;         /* iterations in the windows measured so far */
    double seconds;              /* their duration */
    double joules;               /* what the devices used over them */
    double gpu_joules;           /* the GPUs' part */
    double cpu_joules;           /* the CPU packages' (node-wide: every process
                                    on the node reads the same packages) */
    double joules_per_iteration; /* joules / iterations; 0 before the
                                    first window */
    double gpu_joules_per_iteration;
    double cpu_joules_per_iteration;
    char method[32];        /* "counter", "power-integral" (a GPU without
                               the counter: its power reading integrated),
                               "counter+power-integral", or "" */
    char gpu_list[64];      /* the GPUs metered, NVML indices: "0,1" */
    char gpu_clock[16];     /* the setting: default, max, auto or MHz */
    uint32_t gpu_clock_mhz; /* the clock set on the GPUs (auto: its choice,
                               or the clock it measures while choosing);
                               0: the default clocks */
    int gpu_clock_chosen;   /* auto has made its choice (1 for the other
                               settings) */
    char why[512]; /* "" or one line: why nothing reports energy, why the
                      clock could not be set */
} flps_energy;

/* What c's process has metered so far, into out (size: sizeof(*out) as
 * the caller's flps.h lays it out; at most that many bytes are written,
 * so an older program's smaller struct gets its fields). A client that
 * does not meter (another client of the process does) reports 0 devices
 * and says why. Errors: FLPS_EINVAL for NULL c or out, or a size below
 * the first fields (offsetof gpu_clock). Thread-safety: as the client's
 * other calls. */
FLPS_API flps_err flps_client_energy(const flps_client *c, flps_energy *out,
                                     size_t size);

/* ---- Worker metrics (0.4) ----
 * A process that trains through libflps can serve the Prometheus metrics
 * flworker serves (docs/metrics.md): iterations, bytes and messages, push
 * and wait times, each layer's density, compression ratio and residual
 * norm, the loss and test accuracy, flworker_build_info and the process_*
 * families. Every client of the process feeds them as it pushes and waits
 * (an iteration ends at flps_client_wait, or at the first push of the next
 * one); the program adds what only it knows with flps_metrics_report. A
 * thread of the library's answers GET /metrics (text format 0.0.4) and
 * GET /healthz, one connection at a time, each bounded in size and time.
 *
 * The launcher asks for them: where FLPS_METRICS=HOST:PORT is in the
 * environment (flagent sets it for a command: job's workers, port 0), the
 * first client the process creates starts serving there and prints
 * "metrics on HOST:PORT" (the port bound) on stdout, which is how flagent
 * lists the process among Prometheus' targets. A program may start it
 * itself instead, before or after making its clients. One endpoint per
 * process. */

/* Serve this process's metrics on listen, "HOST:PORT" ("127.0.0.1:9100",
 * "[::1]:0", or ":9100" for every interface; port 0 picks a free one);
 * bound (when not NULL) gets the "HOST:PORT" bound. Prints nothing.
 * Errors (logged with the cause): FLPS_EINVAL (listen NULL or not
 * HOST:PORT, a host that does not resolve), FLPS_ESYS (the port is taken,
 * no thread), FLPS_ENOMEM, FLPS_ESTATE (the process serves already; bound
 * gets where). */
FLPS_API flps_err flps_metrics_serve(const char *listen, char *bound,
                                     size_t boundlen);

/* What only the program knows: the training loss of its last iteration
 * (flworker_loss), and the test accuracy (0..1) and loss of its last
 * evaluation (flworker_test_accuracy, flworker_test_loss). NaN leaves a
 * value as it was. Does nothing while the process serves no metrics.
 * Errors: FLPS_EINVAL for an infinite value (nothing changes). */
FLPS_API flps_err flps_metrics_report(double loss, double test_accuracy,
                                      double test_loss);

/* A federated-averaging round this process finished (flworker's mode
 * fedavg and flps.fl report each): round, its 1-based number
 * (flworker_fl_round), and the clients this process trained in it and how
 * many of them were late (added to flworker_fl_clients_total and
 * flworker_fl_late_clients_total). Does nothing while the process serves
 * no metrics. Errors: FLPS_EINVAL for late above clients (nothing
 * changes). */
FLPS_API flps_err flps_metrics_report_round(uint64_t round, uint32_t clients,
                                            uint32_t late);

/* Stop serving and drop the values (a later flps_metrics_serve starts from
 * zero). Call it while no other thread is inside an flps call (a program
 * that unloads libflps calls it first). Does nothing when not serving. */
FLPS_API void flps_metrics_stop(void);

/* ---- Federated learning: which clients train in a round, and which
 * samples each client holds (mode fedavg; docs/federated.md). flworker
 * calls these very functions, so a program that uses them with a job
 * file's seed, clients, client_fraction and partition picks the clients
 * and the samples flworker picks for that job file. No client needed; any
 * thread. ---- */

/* Clients in each round: ceil(fraction * clients), at least 1 and at most
 * clients (0 when clients is 0). */
FLPS_API uint32_t flps_fl_round_size(uint32_t clients, double fraction);

/* The clients of round `round` (0 first): flps_fl_round_size(clients,
 * fraction) distinct ids below clients, drawn without replacement from
 * (seed, round), ascending into out (room for cap ids). Errors:
 * FLPS_EINVAL (out NULL, clients 0, fraction not in (0, 1], cap below the
 * round's size), FLPS_ENOMEM; out is unchanged then. */
FLPS_API flps_err flps_fl_sample(uint64_t seed, uint64_t round,
                                 uint32_t clients, double fraction,
                                 uint32_t *out, size_t cap);

/* round_deadline's simulated stragglers (the job file's
 * straggler_fraction): slow[c] = 1 for the flps_fl_round_size(clients,
 * fraction) clients drawn from seed apart from every round's sample, 0 for
 * the others (all 0 for fraction 0). slow holds clients entries. Errors:
 * FLPS_EINVAL (slow NULL, clients 0, fraction not in [0, 1]),
 * FLPS_ENOMEM. */
FLPS_API flps_err flps_fl_stragglers(uint64_t seed, uint32_t clients,
                                     double fraction, uint8_t *slow);

/* Split n samples with labels[i] < classes among clients as the job
 * file's partition says: spec "iid" (labels may be NULL), "dirichlet:A"
 * (A > 0: per class, proportions from Dir(A); smaller A, fewer classes per
 * client; every client gets at least min(10, n / clients) samples) or
 * "shards:N" (N label shards per client, McMahan et al.); the same split
 * for the same arguments on every machine. Client c's sample indices go to
 * idx[off[c] .. off[c + 1]) (idx: n entries, off: clients + 1); every index
 * below n appears once. Errors (nothing written): FLPS_EINVAL (spec not
 * one of those, idx or off NULL, clients 0 or above n, n above 2^32,
 * labels NULL or one >= classes for a label split, classes 0 or above 256,
 * N * clients above n), FLPS_ECONFIG (no Dirichlet draw in 1000 gave every
 * client its minimum), FLPS_ENOMEM. */
FLPS_API flps_err flps_fl_partition(const char *spec, const uint32_t *labels,
                                    size_t n, uint32_t classes,
                                    uint32_t clients, uint64_t seed,
                                    uint32_t *idx, size_t *off);

/* ---- Decentralized training: SAPS-PSGD ----
 * No parameter server holds the model: each worker keeps its own, and in
 * every round exchanges the values under a random mask (drawn by every
 * worker alike from the job's seed and the round, so no index travels)
 * with one peer, both setting x[I] = (x_i[I] + x_j[I]) / 2; between rounds
 * each trains locally. The peers of a round are a matching every worker
 * computes alone from the measured bandwidth matrix, the seed and the
 * round (peer_selection: adaptive prefers fast links and keeps the gossip
 * graph connected over connectivity_window rounds; random and ring are the
 * paper's baselines). docs/algorithms.md, section 8, and docs/api.md.
 *
 * Each worker listens on its own endpoint and sends to the others', with
 * the job's credentials as the shards' connections have them ($FLPS_
 * CREDENTIALS_FILE: CURVE where the job has keys, the secret in every
 * message). flps_saps_create waits until every worker has joined (past
 * join_deadline_ms it goes on without those missing when most of the
 * job's workers did join), measures this worker's row of the bandwidth matrix
 * with a short probe (in rounds of disjoint pairs) and agrees on the whole
 * matrix with the others. Every sync_every rounds (and every bandwidth_reprobe
 * rounds, after a new probe) the workers agree on who is alive: a worker that
 * died is then left out of every later matching; before that, a peer that does
 * not answer within deadline_ms is skipped for the round (and not waited
 * for again until the agreement). */
typedef struct flps_saps flps_saps;

typedef struct flps_saps_config {
    size_t size;                /* flps_saps_config_init writes it */
    const char *job;            /* job id, 1..63 chars */
    uint32_t rank;              /* 0..workers-1 */
    uint32_t workers;           /* 2..256 */
    const char *peers;          /* every worker's endpoint, rank order,
                                   comma-separated ("tcp://10.0.0.1:7100,..."):
                                   this one listens on its own; NULL: $FLPS_PEERS */
    const flps_tensor *tensors; /* the model: borrowed until destroy; the
                                   rounds average into data */
    uint32_t ntensors;
    double density;               /* (0, 1]: the share of each tensor's
                                     entries exchanged per round, k =
                                     max(floor(density * numel), 1); 0.01 */
    const char *peer_selection;   /* "adaptive" (default), "random", "ring" */
    double bandwidth_threshold;   /* bytes/s >= 0: a link above it is fast;
                                     < 0 (the default, -1): auto (the widest
                                     gap of the measured links) */
    uint32_t connectivity_window; /* rounds, >= 2; 10 */
    uint64_t bandwidth_reprobe;   /* rounds between probes; 0 (default):
                                     only at create */
    uint64_t sync_every;          /* rounds between membership agreements;
                                     10 */
    uint64_t seed;                /* the job's shared seed; 1 */
    int deadline_ms;              /* how long a peer may take to answer
                                     (an exchange, a probe step, an
                                     agreement step); 10000 */
    int join_deadline_ms;         /* how long create waits for every worker
                                     (past it, the others go on without the
                                     missing if most answered);
                                     0 (default): $FLPS_DEADLINE_MS, else 120000 */
    size_t probe_bytes;           /* the probe's payload each way; 262144 */
    const char *transport; /* "zmq", "rdma", "auto"; NULL: $FLPS_TRANSPORT,
                              else "zmq" */
} flps_saps_config;

/* What one round did (flps_saps_round). */
typedef struct flps_saps_round_info {
    uint32_t peer;          /* this worker's peer, UINT32_MAX for none */
    int exchanged;          /* 1: the peer's values came and were averaged
                               in */
    int skipped;            /* 1: the peer did not answer in time */
    double peer_bandwidth;  /* bytes/s of the link to the peer (0: none) */
    int slow;               /* 1: that link is at or below the threshold */
    uint64_t bytes_sent;    /* this round's bytes on the wire (with an
                               agreement or probe at its start) */
    uint32_t alive;         /* workers alive in this round */
    uint64_t matching_hash; /* FNV-1a of the round's whole matching: the
                               same on every worker */
} flps_saps_round_info;

typedef struct flps_saps_stats {
    uint64_t rounds;         /* rounds run */
    uint64_t exchanges;      /* rounds whose peer's values came */
    uint64_t skipped;        /* rounds whose peer did not answer */
    uint64_t idle;           /* rounds without a peer */
    uint64_t slow_exchanges; /* exchanges over slow links */
    uint64_t bytes_sent;     /* all on the wire: exchanges, probes,
                                agreements, the final gather */
    uint64_t bytes_received;
    uint64_t exchange_bytes;  /* of bytes_sent, the exchanges' */
    uint64_t dense_bytes;     /* what the exchanges would have sent with
                                 density 1 */
    uint64_t probe_bytes;     /* of bytes_sent, the probes' */
    double probe_seconds;     /* spent probing */
    double wait_seconds;      /* spent waiting for peers' values */
    uint32_t dead;            /* workers known dead */
    uint64_t matching_digest; /* every round's matching_hash chained: the
                                 same on workers that ran the same rounds */
} flps_saps_stats;

/* The consensus at the end (flps_saps_consensus). */
typedef struct flps_saps_consensus_info {
    uint32_t coordinator; /* the lowest rank alive: it holds the average */
    uint32_t averaged;    /* models averaged (the coordinator's included) */
    double distance;      /* coordinator: mean ||x_i - xbar|| over them;
                             elsewhere 0 */
} flps_saps_consensus_info;

/* The defaults above into cfg, cfg->size set (as flps_client_config_init
 * does). Errors: FLPS_EINVAL (cfg NULL, a size this library cannot
 * read). */
FLPS_API flps_err flps_saps_config_init_size(flps_saps_config *cfg,
                                             size_t size);

static inline flps_err flps_saps_config_init(flps_saps_config *cfg)
{
    return flps_saps_config_init_size(cfg, sizeof(*cfg));
}

/* Join the job's other workers (blocks until all have, or the join
 * deadline), probe and agree on the bandwidth matrix. The tensors' values
 * are left as they are: start every worker from the same model (the same
 * seed). Errors (logged, naming the cause): FLPS_EINVAL (cfg), FLPS_ECONFIG
 * (credentials, transport, peer_selection), FLPS_ESYS (the endpoint cannot
 * be bound), FLPS_ETIMEDOUT (not most of the workers joined), FLPS_ESTATE
 * (this worker came after most of the others had gone on without it),
 * FLPS_ENOMEM. cfg and what it points to but tensors' data are borrowed
 * for the call. Caller owns *out on FLPS_OK. */
FLPS_API flps_err flps_saps_create(const flps_saps_config *cfg,
                                   flps_saps **out);

/* Round `round` (0, 1, 2, ... in order): at an agreement boundary first
 * the agreement (and the probe when due); then the round's matching, the
 * exchange with this worker's peer (send, wait up to deadline_ms for the
 * peer's values) and the average into the tensors. info may be NULL.
 * Errors: FLPS_EINVAL (a round out of order), FLPS_ESTATE (the others went
 * on without this worker: it must stop), the transport's, FLPS_ENOMEM;
 * all sticky (flps_saps_last_error). */
FLPS_API flps_err flps_saps_round(flps_saps *s, uint64_t round,
                                  flps_saps_round_info *info);

/* After the last round (`round` = rounds run): agree on who is alive,
 * then every alive worker sends its model to the coordinator (the lowest
 * rank alive), which writes their average into average (ntensors buffers
 * of the tensors' sizes; NULL: not wanted) and their consensus distance
 * into info. Workers that are not the coordinator only send. Blocks.
 * Errors: those of flps_saps_round. */
FLPS_API flps_err flps_saps_consensus(flps_saps *s, uint64_t round,
                                      float *const *average,
                                      flps_saps_consensus_info *info);

/* Whether worker w takes part (0 once it is known dead). */
FLPS_API int flps_saps_is_alive(const flps_saps *s, uint32_t w);

/* The bandwidth matrix in force (workers * workers bytes/s, row-major;
 * a dead worker's row 0) into bw, which holds n doubles (bw NULL: the
 * threshold alone), and the threshold into *threshold (may be NULL).
 * Errors: FLPS_EINVAL (s NULL, n below workers * workers). */
FLPS_API flps_err flps_saps_bandwidth(const flps_saps *s, double *bw, size_t n,
                                      double *threshold);

FLPS_API void flps_saps_get_stats(const flps_saps *s, flps_saps_stats *out);

/* The sticky error's message, "" if none; never NULL. */
FLPS_API const char *flps_saps_last_error(const flps_saps *s);

/* Closes the connections and frees everything. NULL does nothing. */
FLPS_API void flps_saps_destroy(flps_saps *s);

#ifdef __cplusplus
}
#endif

#endif
