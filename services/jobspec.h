/* The job file (YAML): parsing, validation and defaults. flrun, flworker
 * and (later) flsubmit/flsched read the same file through this module. */
#ifndef FLPS_SERVICES_JOBSPEC_H
#define FLPS_SERVICES_JOBSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/strbuf.h"
#include "compress/codec.h"

/* flworker's models. A command: job may leave model: out: it runs the
 * user's own model, and then holds JOBSPEC_MODEL_NONE ("none"). */
typedef enum {
    JOBSPEC_MODEL_MLP = 0,
    JOBSPEC_MODEL_CNN,
    JOBSPEC_MODEL_NONE,
} jobspec_model;

typedef enum {
    JOBSPEC_DATASET_FASHION_MNIST = 0,
    JOBSPEC_DATASET_SYNTHETIC,
} jobspec_dataset;

typedef enum {
    JOBSPEC_PARTITION_IID = 0,
    JOBSPEC_PARTITION_DIRICHLET,
    JOBSPEC_PARTITION_SHARDS, /* shards:N, N label shards per client */
} jobspec_partition;

/* What the shards do with a fedavg round's averaged delta (docs/
 * algorithms.md, "Server optimizers"): add it (sgd, plain FedAvg), add a
 * momentum of it (momentum:B, FedAvgM) or take an Adam step along it
 * (adam, FedAdam). Values are pinned (they go on the wire as proto's
 * server optimizer ids). */
typedef enum {
    JOBSPEC_SERVER_OPT_SGD = 0,
    JOBSPEC_SERVER_OPT_MOMENTUM = 1,
    JOBSPEC_SERVER_OPT_ADAM = 2,
} jobspec_server_opt;

/* Every mode of the job file's mode:, once: X(VALUE, value, "name",
 * PARAM), PARAM NONE or STALENESS (ssp:S). It makes the enum, the job
 * file's words (services/jobspec_keys.c, so docs/job-file.md and the
 * messages) and jobspec_mode_name. Values are pinned. How a mode runs on
 * the shards (proto/msg.h's proto_mode, libflps's FLPS_MODE_*) is not a
 * column here: it is the worker's to say (flworker's flw_client_mode;
 * a command: job's program through its own client), and fedavg's depends
 * on round_deadline, not on the mode alone: ssp is async with a bound,
 * fedavg is ssgd over rounds, weighted when it has a round_deadline. */
#define JOBSPEC_MODE_MAP(X)                                                    \
    X(JOBSPEC_MODE_SSGD, 0, "ssgd", NONE)                                      \
    X(JOBSPEC_MODE_ASYNC, 1, "async", NONE)                                    \
    X(JOBSPEC_MODE_SSP, 2, "ssp", STALENESS)                                   \
    X(JOBSPEC_MODE_FEDAVG, 3, "fedavg", NONE)                                  \
    X(JOBSPEC_MODE_SAPS, 4, "saps", NONE)

typedef enum {
#define JOBSPEC_MODE_ENUM_(mode, value, name, param) mode = value,
    JOBSPEC_MODE_MAP(JOBSPEC_MODE_ENUM_)
#undef JOBSPEC_MODE_ENUM_
} jobspec_mode;

/* How a saps job picks each round's peers (worker/saps_peers.h's
 * saps_select, by the same names). */
typedef enum {
    JOBSPEC_PEERS_ADAPTIVE = 0,
    JOBSPEC_PEERS_RANDOM,
    JOBSPEC_PEERS_RING,
} jobspec_peer_selection;

/* Learning-rate schedule over the job's iterations (values match proto's
 * schedule ids on the wire). */
typedef enum {
    JOBSPEC_LR_CONSTANT = 0, /* lr throughout */
    JOBSPEC_LR_COSINE = 1,   /* lr * (1 + cos(pi * t / iterations)) / 2 */
} jobspec_lr_schedule;

typedef enum {
    JOBSPEC_TRANSPORT_ZMQ = 0,
    JOBSPEC_TRANSPORT_RDMA,
    JOBSPEC_TRANSPORT_AUTO, /* RDMA where every node of the job has an
                               ACTIVE port, ZeroMQ otherwise */
} jobspec_transport;

/* Every compute backend flps knows, built into this flworker or not,
 * once: X(VALUE, value, "name", "what gets it built"). It makes the enum,
 * the job file's words for backend: and worker/backend.c's list of the
 * backends that exist (which of them this build has is the
 * CMake-generated registry's to say, worker/backend_list.h). The names are
 * the backends' own (worker_backend.name). Values are pinned. */
#define JOBSPEC_BACKEND_MAP(X)                                                 \
    X(JOBSPEC_BACKEND_CPU, 0, "cpu", "it is always built")                     \
    X(JOBSPEC_BACKEND_CUDA, 1, "cuda",                                         \
      "build flps where the CUDA toolkit is installed so cmake finds it")

/* Where flworker computes (worker/backend.h). */
typedef enum {
#define JOBSPEC_BACKEND_ENUM_(backend, value, name, how) backend = value,
    JOBSPEC_BACKEND_MAP(JOBSPEC_BACKEND_ENUM_)
#undef JOBSPEC_BACKEND_ENUM_
} jobspec_backend;

/* Room for command's (and env's) words: bytes, NULs included, and words. */
#define JOBSPEC_WORDS_BYTES 4096
#define JOBSPEC_WORDS_MAX 128

/* Room for the entries of resources, node_selector and tolerations (the
 * keys a Kubernetes launcher reads): bytes, NULs included, and entries. */
#define JOBSPEC_MAP_BYTES 1024
#define JOBSPEC_MAP_MAX 32

/* Which of the workers' needs resources: gave (jobspec.resources_set). */
#define JOBSPEC_RES_CPU 1u
#define JOBSPEC_RES_MEMORY 2u
#define JOBSPEC_RES_GPU 4u

/* The variables flrun and flagent set for every worker a command: job
 * runs, with what each holds: X(NAME, "what it holds"). docs/job-file.md
 * lists them; env: may not set them. */
#define JOBSPEC_WORKER_ENV(X)                                                  \
    X(FLPS_JOB, "the job's id (its name under flrun)")                         \
    X(FLPS_RANK, "this worker's rank, 0 .. FLPS_WORKERS-1")                    \
    X(FLPS_WORKERS, "the job's number of workers (`workers`)")                 \
    X(FLPS_SERVERS, "the shards' endpoints, shard 0 first, comma-separated")   \
    X(FLPS_PLAN_FILE, "the compression plan file to watch (only where the "    \
                      "job has a plan: `compression: auto`, or under "         \
                      "flagent)")                                              \
    X(FLPS_ITERATIONS, "`iterations`")                                         \
    X(FLPS_COMPRESSION, "`compression` as the job file gives it, e.g. "        \
                        "gtopk:0.01")                                          \
    X(FLPS_LR, "`lr`")                                                         \
    X(FLPS_MOMENTUM, "`momentum`")                                             \
    X(FLPS_LR_SCHEDULE, "`lr_schedule`")                                       \
    X(FLPS_BATCH, "`batch_size`")                                              \
    X(FLPS_SEED, "`seed`")                                                     \
    X(FLPS_MODEL, "`model` (only where the job gives one)")                    \
    X(FLPS_DATASET, "`dataset`")                                               \
    X(FLPS_DATA_DIR, "`data_dir` (the Fashion-MNIST IDX files)")               \
    X(FLPS_PARTITION, "`partition`")                                           \
    X(FLPS_MODE, "`mode` (ssgd, async, ssp:S, fedavg or saps)")                \
    X(FLPS_ROUNDS, "`rounds` (read by flps.fl, as the ten below)")             \
    X(FLPS_CLIENTS, "`clients`, 0 replaced by `workers`")                      \
    X(FLPS_CLIENT_FRACTION, "`client_fraction`")                               \
    X(FLPS_LOCAL_STEPS, "`local_steps` (saps: the steps between exchanges)")   \
    X(FLPS_LOCAL_EPOCHS, "`local_epochs`")                                     \
    X(FLPS_ROUND_DEADLINE, "`round_deadline`, with FLPS_STRAGGLER_FRACTION "   \
                           "and FLPS_STRAGGLER_SLOWDOWN")                      \
    X(FLPS_STRAGGLER_FRACTION, "`straggler_fraction`")                         \
    X(FLPS_STRAGGLER_SLOWDOWN, "`straggler_slowdown`")                         \
    X(FLPS_PROX_MU, "`prox_mu`")                                               \
    X(FLPS_SERVER_OPTIMIZER, "`server_optimizer` (sgd, momentum:B or adam)")   \
    X(FLPS_SERVER_LR, "`server_lr`")                                           \
    X(FLPS_EVAL_EVERY, "`eval_every`")                                         \
    X(FLPS_PART_SIZE, "`part_size`")                                           \
    X(FLPS_OVERLAP, "`overlap`: `true` or `false`")                            \
    X(FLPS_JOB_KEYS, "the keys the job file gives (not left to their "         \
                     "defaults), comma-separated: flps.torch and "             \
                     "flps.connect follow those and refuse an argument "       \
                     "that contradicts one")                                   \
    X(FLPS_DENSITY_WARMUP, "`density_warmup` (only where the job has a "       \
                           "warm-up); flps.torch's DistributedOptimizer "      \
                           "follows it")                                       \
    X(FLPS_DENSITY_WARMUP_START, "`density_warmup_start` (only where the job " \
                                 "has a warm-up)")                             \
    X(FLPS_TRANSPORT, "the data plane the shards run, zmq or rdma "            \
                      "(`transport`, with auto decided by flsched or flrun); " \
                      "libflps's flps_client_create follows it")               \
    X(FLPS_PEERS, "saps: every worker's endpoint, rank order, "                \
                  "comma-separated: this worker listens on its own and "       \
                  "exchanges with the others' (flps_saps_create reads it)")    \
    X(FLPS_SAPS_DENSITY, "saps: `saps_density`")                               \
    X(FLPS_PEER_SELECTION, "saps: `peer_selection`")                           \
    X(FLPS_BANDWIDTH_THRESHOLD, "saps: `bandwidth_threshold` in bytes/s, "     \
                                "or auto")                                     \
    X(FLPS_CONNECTIVITY_WINDOW, "saps: `connectivity_window`")                 \
    X(FLPS_BANDWIDTH_REPROBE, "saps: `bandwidth_reprobe`")                     \
    X(FLPS_PEER_DEADLINE, "saps: `peer_deadline` in seconds")                  \
    X(FLPS_DEADLINE_MS, "how long one wait on the shards may take before "     \
                        "the client gives up (120000 ms), so a job whose "     \
                        "peers never connect fails instead of hanging")        \
    X(FLPS_CREDENTIALS_FILE, "the job's credentials file (0600: its secret "   \
                             "and CURVE keys), which libflps reads; set by "   \
                             "flrun and flagent, never printed")               \
    X(FLPS_METRICS, "HOST:PORT (port 0: a free one) where libflps serves "     \
                    "the worker's Prometheus metrics, set by flagent; the "    \
                    "process prints `metrics on HOST:PORT` (docs/metrics.md)") \
    X(FLPS_GPU_CLOCK, "`gpu_clock` (default, max, MHZ or auto): the clock "    \
                      "libflps's client sets on the GPUs it meters "           \
                      "(docs/energy.md)")                                      \
    X(FLPS_GPU_CLOCK_SLOWDOWN, "`gpu_clock_slowdown` (auto's bound)")          \
    X(FLPS_GPU_CLOCK_RECORD, "where the client records the clocks it "         \
                             "changed, so the launcher restores them after "   \
                             "a crash")                                        \
    X(FLPS_BUILD_DIR, "the flps build directory whose lib/ holds "             \
                      "libflps.so (where the launcher runs from a build)")     \
    X(FLPS_LIBRARY, "the path of libflps.so the package loads")

/* 64-bit words of jobspec.given: room for 128 keys. */
#define JOBSPEC_GIVEN_WORDS 2

typedef struct jobspec {
    char name[64];           /* required; [A-Za-z0-9_.-], 1..63 chars */
    jobspec_model model;     /* required, unless command: is given */
    jobspec_dataset dataset; /* default fashion-mnist */
    char data_dir[256];      /* default /usr/share/datasets/fashion-mnist */
    jobspec_partition partition;
    double dirichlet_alpha;    /* partition: dirichlet:A (A > 0) */
    uint32_t partition_shards; /* partition: shards:N (N >= 1) */
    uint32_t workers;          /* 1..1024, default 1 */
    uint32_t servers;          /* 1..256, default 1; saps: 0 (no
                                  shard holds its model) */
    jobspec_mode mode;         /* default ssgd */
    uint32_t staleness;        /* ssp:S, S >= 0 */
    uint64_t iterations;       /* >= 1, default 1000 (ssgd/async/ssp) */
    uint32_t rounds;           /* fedavg, default 10 */
    uint32_t local_steps;      /* fedavg, default 10; saps: SGD steps
                                  between exchanges, default 1 */
    double client_fraction;    /* fedavg, (0, 1], default 1 */
    uint32_t clients;          /* fedavg, 0..10000, default 0 = one
                                  per worker */
    double round_deadline;     /* fedavg, seconds, 0 = wait for every
                                  client; default 0 */
    double straggler_fraction; /* fedavg, [0, 1]: clients simulated
                                  as slow, default 0 */
    double straggler_slowdown; /* fedavg, >= 1: how much slower,
                                  default 10 */
    uint32_t local_epochs;     /* fedavg: passes over a client's
                                  samples per round instead of
                                  local_steps; 0 (default) = use
                                  local_steps */
    double prox_mu;            /* fedavg: FedProx's proximal weight,
                                  >= 0, default 0 (plain FedAvg) */
    jobspec_server_opt server_optimizer; /* fedavg, default sgd */
    double server_momentum;              /* momentum:B, [0, 1); else 0 */
    double server_lr;                    /* fedavg: the server's step on the
                                            averaged delta, > 0, default 1 */
    double saps_density;                 /* saps: (0, 1], the share of the model
                                            exchanged per round, default 0.01 */
    jobspec_peer_selection peer_selection; /* saps, default adaptive */
    double bandwidth_threshold;            /* saps: bytes/s >= 0, or -1 for auto
                                              (the default) */
    uint32_t connectivity_window;          /* saps: rounds >= 2, default 10 */
    uint64_t bandwidth_reprobe;            /* saps: rounds between probes, 0 =
                                              only at the start (default) */
    double peer_deadline;                  /* saps: seconds a peer may take to
                                              answer, default 10 */
    uint32_t batch_size;                   /* 1..65536, default 32 */
    double lr;                             /* > 0, default 0.05 */
    double momentum;                       /* [0, 1), default 0.9 */
    jobspec_lr_schedule lr_schedule;       /* default constant */
    codec_kind compression;      /* default dense; CODEC_AUTO for auto */
    double density;              /* topk/gtopk/randk/dgc: (0, 1] */
    uint32_t qsgd_bits;          /* qsgd:BITS, 1..8 */
    uint64_t density_warmup;     /* iterations of density warm-up, 0 =
                                    none; default 0 */
    double density_warmup_start; /* the warm-up's start density, (0, 1];
                                    default 0.25 */
    jobspec_transport transport; /* default zmq */
    uint64_t seed;               /* default 1 */
    uint64_t eval_every;         /* iterations between test evaluations,
                                    0 = only at the end; default 100 */
    uint32_t part_size;          /* max elements per part, default 65536 */
    uint32_t encryption;         /* 1 (default): the data plane is
                                    encrypted (CURVE) where the transport
                                    and libzmq can; 0: authenticated by
                                    the job's secret only */
    uint32_t overlap;            /* 1 (default): flworker pushes each
                                    layer as backprop reaches it and the
                                    next forward waits per layer; 0:
                                    push after the whole backward, wait
                                    for every layer (for comparison) */
    jobspec_backend backend;     /* default cpu: flworker's compute
                                    backend (--backend overrides) */
    char gpu_clock[16];          /* default | max | MHZ | auto, as
                                    gpuclock_spec_format writes it
                                    (common/gpuclock.h); default default */
    char gpu_clock_slowdown[16]; /* auto's bound, as written: "5%" or
                                    "0.05"; default 5% */
    double checkpoint_interval;  /* seconds, 0 = off; default 0 */
    uint32_t max_restarts;       /* default 0 (used by flsched) */
    uint32_t priority;           /* default 0 (used by flsched) */
    /* What one task needs of a node (used by flsched's placement). */
    double cpus_per_worker;     /* > 0, default 1 */
    uint64_t memory_per_worker; /* bytes, default 1Gi */
    uint32_t gpus_per_worker;   /* 0..1024, default 0 */
    double cpus_per_server;     /* > 0, default 1 */
    uint64_t memory_per_server; /* bytes, default 512Mi */
    double time_limit;          /* seconds the job may run, 0 = no limit */
    /* command: the user's program, run once per rank as the job's workers
     * instead of flworker: command_argc words (0 = flworker), each
     * NUL-terminated, back to back; read them with jobspec_words. */
    char command[JOBSPEC_WORDS_BYTES];
    uint32_t command_argc;
    /* env: env_count "NAME=VALUE" entries added to the workers'
     * environment (the command's, or flworker's: workerenv.h), stored
     * like command's words. */
    char env[JOBSPEC_WORDS_BYTES];
    uint32_t env_count;
    /* Which keys the job says rather than leaves to their defaults: bit k
     * for the k-th key of the parser's table (the docs' order), set by the
     * parse for every key in the file and by jobspec_give for a launcher's
     * option that stands for one. Read it with jobspec_is_given. */
    uint64_t given[JOBSPEC_GIVEN_WORDS];
    /* What a Kubernetes launcher (flsched --launcher kubernetes) reads;
     * flrun and flagent ignore them. Text fields are "" when not given. */
    char image[256];         /* the pods' image; "" = the scheduler's */
    char scheduler_name[64]; /* the pods' schedulerName (e.g. volcano) */
    char queue[64];          /* a Kueue LocalQueue: kueue.x-k8s.io/queue-name */
    char checkpoint_volume[64]; /* a PersistentVolumeClaim for the shards'
                                   checkpoints; "" = the scheduler's */
    /* resources: the extended resources every pod of the job asks for
     * ("NAME=COUNT", e.g. "rdma/hca_shared_devices_a=1"), stored like
     * env's entries; cpu, memory and nvidia.com/gpu set cpus_per_worker,
     * memory_per_worker and gpus_per_worker instead (resources_set says
     * which, JOBSPEC_RES_*). */
    char resources[JOBSPEC_MAP_BYTES];
    uint32_t resources_count;
    uint32_t resources_set;
    /* node_selector: "LABEL=VALUE" entries. */
    char node_selector[JOBSPEC_MAP_BYTES];
    uint32_t node_selector_count;
    /* tolerations: one entry each, read with jobspec_toleration_get. */
    char tolerations[JOBSPEC_MAP_BYTES];
    uint32_t tolerations_count;
    /* servers: auto: one shard beside each worker (servers = workers, and
     * shard I is placed with worker I where a launcher places them). */
    uint8_t servers_auto;
} jobspec;

/* Point out[0..max) at the n words stored back to back in buf (a
 * jobspec's command or env); returns how many were written (at most max).
 * The pointers are borrowed from buf. */
size_t jobspec_words(const char *buf, uint32_t n, const char **out, size_t max);

/* The same for the entries of resources, node_selector or tolerations
 * (buffers of JOBSPEC_MAP_BYTES). */
size_t jobspec_map_words(const char *buf, uint32_t n, const char **out,
                         size_t max);

/* One toleration of a job file, as Kubernetes' Toleration has it. */
typedef struct jobspec_toleration {
    char key[320];   /* "" with operator Exists: every taint */
    char op[8];      /* "Equal" or "Exists" */
    char value[64];  /* "" for Exists */
    char effect[24]; /* NoSchedule, PreferNoSchedule, NoExecute or "" */
    int has_seconds; /* tolerationSeconds given (NoExecute only) */
    int64_t seconds; /* tolerationSeconds */
} jobspec_toleration;

/* The i-th toleration of spec into *out: FLPS_OK, or FLPS_EINVAL when i
 * is not below tolerations_count (or an argument is NULL). */
flps_err jobspec_toleration_get(const jobspec *spec, uint32_t i,
                                jobspec_toleration *out);

/* Whether name is a variable the launcher (flrun, flagent) sets for a
 * command's workers, which env: may not set. */
int jobspec_env_is_reserved(const char *name, size_t len);

/* Where a refused job file went wrong, for an API that points at it. */
typedef struct jobspec_where {
    unsigned long line; /* 1-based; 0 when the error has no line (a
                           missing key, an empty file, bad UTF-8) */
    char field[64];     /* the key the error is about, as written in the
                           file for an unknown key (cut to 63 bytes); ""
                           when the error is not about one key (YAML
                           syntax, not a mapping) */
} jobspec_where;

/* Parse and validate a job file held in memory (YAML; JSON is YAML too).
 * On error returns FLPS_ECONFIG and writes into errbuf one message that
 * names the line, the key, what was wrong and what is accepted, e.g.
 * "line 7: compression: 'gtop:0.01' is not a codec; expected one of dense,
 * topk:D, gtopk:D, randk:D, dgc:D, qsgd:BITS, fp16, sign, auto".
 * *out is written only on FLPS_OK. Never does I/O.
 * Keys left out take the defaults above. When the codec takes no density,
 * density is 1; qsgd_bits is 0 unless the codec is qsgd; dirichlet_alpha
 * is 0 for iid and staleness 0 unless the mode is ssp. rounds, local_steps
 * and client_fraction are accepted in every mode but used only by fedavg,
 * which needs rounds >= 1. Integers are decimal digits only; reals are
 * plain decimals (no nan, inf or hex).
 * Text over 1 MiB, or with lists or mappings nested more than 8 deep, is
 * refused before it is parsed (FLPS_ECONFIG), so parsing untrusted text
 * takes time linear in its size.
 * Returns FLPS_OK, FLPS_ECONFIG (message in errbuf), FLPS_ENOMEM, or
 * FLPS_EINVAL when text (with len > 0) or out is NULL. errbuf may be NULL
 * or errlen 0; the message is then dropped; a long one is cut to errlen. */
flps_err jobspec_parse(const char *text, size_t len, jobspec *out, char *errbuf,
                       size_t errlen);

/* jobspec_parse, and on FLPS_ECONFIG also *where (when not NULL): the line
 * and key of the error. *where is not written on other results. */
flps_err jobspec_parse_where(const char *text, size_t len, jobspec *out,
                             char *errbuf, size_t errlen, jobspec_where *where);

/* Parse a SIZE: bytes ("1048576") or a number with a suffix K, M, G, T
 * (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024), e.g. "512Mi",
 * "1.5G"; a fraction of a byte is cut off. FLPS_EINVAL for anything else
 * (also for a size over 2^64 - 1 and for NULL arguments); *out is written
 * only on FLPS_OK. */
flps_err jobspec_size_parse(const char *text, uint64_t *out);

/* Read FILE and parse it as above; also checks that the dataset files exist
 * (for fashion-mnist: the four IDX .gz files under data_dir; for a
 * command: job only where the file names dataset: or data_dir:). Errors name
 * the file. Returns FLPS_EIO when the file cannot be read (message with
 * strerror), FLPS_ECONFIG for a file over 1 MiB, any parse error (message
 * prefixed with the path) or a missing dataset file (message names the
 * file and how to install the dataset), FLPS_ENOMEM, FLPS_EINVAL for NULL
 * path or out. *out is written only on FLPS_OK. Blocks on file I/O. */
flps_err jobspec_load(const char *path, jobspec *out, char *errbuf,
                      size_t errlen);

/* The text of job file path, whole: FLPS_OK with *text (NUL-terminated;
 * caller owns, flps_free) and *len; FLPS_EIO when it cannot be read,
 * FLPS_ECONFIG over 1 MiB, FLPS_ENOMEM, each with a message naming path
 * in errbuf. Blocks on file I/O. */
flps_err jobspec_read_file(const char *path, char **text, size_t *len,
                           char *errbuf, size_t errlen);

/* jobspec_load for a job file's text already in memory (a launcher's
 * job built from a file and flags, services/jobspec_flags.h): the same
 * checks, messages prefixed with name (borrowed, as the path would be).
 * On FLPS_ECONFIG from the parse also *where (when not NULL), as
 * jobspec_parse_where gives it. The dataset files are checked for
 * flworker's jobs, and for a command: job only where the text names
 * dataset: or data_dir: (the program may read its own data). */
flps_err jobspec_load_text(const char *name, const char *text, size_t len,
                           jobspec *out, char *errbuf, size_t errlen,
                           jobspec_where *where);

/* Canonical text of the compression setting ("gtopk:0.01", "qsgd:4",
 * "dense"), which jobspec_parse reads back to the same setting. Always
 * NUL-terminates buf when len > 0 (cutting the text if it does not fit). */
void jobspec_comp_format(const jobspec *spec, char *buf, size_t len);

/* Text of the mode setting as a job file writes it ("ssgd", "async",
 * "ssp:4", "fedavg"). Always NUL-terminates buf when len > 0. */
void jobspec_mode_format(const jobspec *spec, char *buf, size_t len);

/* Text of the partition ("iid", "dirichlet:0.5", "shards:2") and of the
 * server optimizer ("sgd", "momentum:0.9", "adam") as a job file writes
 * them, which libflps (flps_fl_partition, the client's server_optimizer)
 * and jobspec_parse read back to the same setting. Always NUL-terminate
 * buf when len > 0. */
void jobspec_partition_format(const jobspec *spec, char *buf, size_t len);
void jobspec_server_opt_format(const jobspec *spec, char *buf, size_t len);

/* Whether spec gives key (its name as a job file writes it, "compression")
 * rather than leaving it to its default; 0 for a name that is no key. */
int jobspec_is_given(const jobspec *spec, const char *key);

/* Mark key as given: for a launcher's option that sets spec's field in
 * place of the file (flrun --compression). FLPS_EINVAL (spec unchanged)
 * for a NULL argument or a name that is no key. */
flps_err jobspec_give(jobspec *spec, const char *key);

/* Whether workers that say they ran `ran` for key ("compression" or
 * "mode", as their done events name them) ran other than spec says: 1
 * when ran is "mixed" (they ran different ones), or spec gives the key and
 * ran is another setting ("gtopk:0.010" is "gtopk:0.01"); 0 otherwise (a
 * key spec leaves to its default is the program's to choose), and for ran
 * NULL or "" and other keys. Writes spec's value as a job file writes it
 * into job (len bytes) when len > 0. */
int jobspec_ran_differs(const jobspec *spec, const char *key, const char *ran,
                        char *job, size_t len);

/* The given keys, in the table's order, comma-separated ("lr,compression")
 * into buf ("" for none). Always NUL-terminates buf when len > 0 (cutting
 * the list if it does not fit). */
void jobspec_given_format(const jobspec *spec, char *buf, size_t len);

/* Names for enums, for logs and JSON ("mlp", "ssgd", ...): static strings,
 * never NULL; "unknown" for a value outside the enum. compression's are
 * codec_kind_name's (compress/codec.h). */
const char *jobspec_model_name(jobspec_model m);
/* The i-th of the four Fashion-MNIST files a data_dir holds
 * ("train-images-idx3-ubyte.gz", ...), NULL for i >= 4. */
const char *jobspec_fmnist_file(size_t i);
const char *jobspec_mode_name(jobspec_mode m);
const char *jobspec_dataset_name(jobspec_dataset d);
const char *jobspec_partition_name(jobspec_partition p);
const char *jobspec_transport_name(jobspec_transport t);
const char *jobspec_backend_name(jobspec_backend b);
const char *jobspec_lr_schedule_name(jobspec_lr_schedule l);
const char *jobspec_peer_selection_name(jobspec_peer_selection p);

/* Append to out the Markdown table of every key the parser accepts, one
 * row per key in the parser's order: "| key | type | default | accepted |"
 * where accepted is the text the parser's messages quote after
 * "expected". docs/job-file.md holds this table verbatim (a test compares
 * them). Returns FLPS_OK, FLPS_ENOMEM (sticky in out, as for every
 * flps_strbuf append) or FLPS_EINVAL for a NULL out. Ownership: out is the
 * caller's; the rows are appended to what it holds. */
flps_err jobspec_doc_table(flps_strbuf *out);

#endif
