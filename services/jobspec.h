/* The job file (YAML): parsing, validation and defaults. flrun, flworker
 * and (later) flsubmit/flsched read the same file through this module. */
#ifndef FLPS_SERVICES_JOBSPEC_H
#define FLPS_SERVICES_JOBSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/strbuf.h"

typedef enum {
    JOBSPEC_MODEL_MLP = 0,
    JOBSPEC_MODEL_CNN,
} jobspec_model;

typedef enum {
    JOBSPEC_DATASET_FASHION_MNIST = 0,
    JOBSPEC_DATASET_SYNTHETIC,
} jobspec_dataset;

typedef enum {
    JOBSPEC_PARTITION_IID = 0,
    JOBSPEC_PARTITION_DIRICHLET,
} jobspec_partition;

typedef enum {
    JOBSPEC_MODE_SSGD = 0,
    JOBSPEC_MODE_ASYNC,
    JOBSPEC_MODE_SSP,
    JOBSPEC_MODE_FEDAVG,
} jobspec_mode;

/* Values match proto's codec ids on the wire. */
typedef enum {
    JOBSPEC_COMP_DENSE = 0,
    JOBSPEC_COMP_TOPK,
    JOBSPEC_COMP_GTOPK,
    JOBSPEC_COMP_RANDK,
    JOBSPEC_COMP_DGC,
    JOBSPEC_COMP_QSGD,
    JOBSPEC_COMP_FP16,
    JOBSPEC_COMP_AUTO,
    JOBSPEC_COMP_SIGN, /* 1 bit per element + a scale */
} jobspec_comp;

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

/* Where flworker computes (worker/backend.h; the names are the backends'
 * names). */
typedef enum {
    JOBSPEC_BACKEND_CPU = 0, /* OpenBLAS, always built */
    JOBSPEC_BACKEND_CUDA,    /* built only where the CUDA toolkit is found */
} jobspec_backend;

/* Room for command's (and env's) words: bytes, NULs included, and words. */
#define JOBSPEC_WORDS_BYTES 4096
#define JOBSPEC_WORDS_MAX 128

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
    X(FLPS_MODEL, "`model`")                                                   \
    X(FLPS_DATASET, "`dataset`")                                               \
    X(FLPS_DATA_DIR, "`data_dir` (the Fashion-MNIST IDX files)")               \
    X(FLPS_PARTITION, "`partition`")                                           \
    X(FLPS_MODE, "`mode`")                                                     \
    X(FLPS_EVAL_EVERY, "`eval_every`")                                         \
    X(FLPS_PART_SIZE, "`part_size`")                                           \
    X(FLPS_DENSITY_WARMUP, "`density_warmup` (only where the job has a "       \
                           "warm-up); flps.torch's DistributedOptimizer "      \
                           "follows it")                                       \
    X(FLPS_DENSITY_WARMUP_START, "`density_warmup_start` (only where the job " \
                                 "has a warm-up)")                             \
    X(FLPS_TRANSPORT, "the data plane the shards run, zmq or rdma "            \
                      "(`transport`, with auto decided by flsched or flrun); " \
                      "libflps's flps_client_create follows it")               \
    X(FLPS_DEADLINE_MS, "how long one wait on the shards may take before "     \
                        "the client gives up (120000 ms), so a job whose "     \
                        "peers never connect fails instead of hanging")        \
    X(FLPS_CREDENTIALS_FILE, "the job's credentials file (0600: its secret "   \
                             "and CURVE keys), which libflps reads; set by "   \
                             "flrun and flagent, never printed")               \
    X(FLPS_BUILD_DIR, "the flps build directory whose lib/ holds "             \
                      "libflps.so (where the launcher runs from a build)")     \
    X(FLPS_LIBRARY, "the path of libflps.so the package loads")

typedef struct jobspec {
    char name[64];           /* required; [A-Za-z0-9_.-], 1..63 chars */
    jobspec_model model;     /* required */
    jobspec_dataset dataset; /* default fashion-mnist */
    char data_dir[256];      /* default /usr/share/datasets/fashion-mnist */
    jobspec_partition partition;
    double dirichlet_alpha;          /* partition: dirichlet:A (A > 0) */
    uint32_t workers;                /* 1..1024, default 1 */
    uint32_t servers;                /* 1..256, default 1 */
    jobspec_mode mode;               /* default ssgd */
    uint32_t staleness;              /* ssp:S, S >= 0 */
    uint64_t iterations;             /* >= 1, default 1000 (ssgd/async/ssp) */
    uint32_t rounds;                 /* fedavg, default 10 */
    uint32_t local_steps;            /* fedavg, default 10 */
    double client_fraction;          /* fedavg, (0, 1], default 1 */
    uint32_t clients;                /* fedavg, 0..10000, default 0 = one
                                        per worker */
    double round_deadline;           /* fedavg, seconds, 0 = wait for every
                                        client; default 0 */
    double straggler_fraction;       /* fedavg, [0, 1]: clients simulated
                                        as slow, default 0 */
    double straggler_slowdown;       /* fedavg, >= 1: how much slower,
                                        default 10 */
    uint32_t batch_size;             /* 1..65536, default 32 */
    double lr;                       /* > 0, default 0.05 */
    double momentum;                 /* [0, 1), default 0.9 */
    jobspec_lr_schedule lr_schedule; /* default constant */
    jobspec_comp compression;        /* default dense */
    double density;                  /* topk/gtopk/randk/dgc: (0, 1] */
    uint32_t qsgd_bits;              /* qsgd:BITS, 1..8 */
    uint64_t density_warmup;         /* iterations of density warm-up, 0 =
                                        none; default 0 */
    double density_warmup_start;     /* the warm-up's start density, (0, 1];
                                        default 0.25 */
    jobspec_transport transport;     /* default zmq */
    uint64_t seed;                   /* default 1 */
    uint64_t eval_every;             /* iterations between test evaluations,
                                        0 = only at the end; default 100 */
    uint32_t part_size;              /* max elements per part, default 65536 */
    uint32_t overlap;                /* 1 (default): flworker pushes each
                                        layer as backprop reaches it and the
                                        next forward waits per layer; 0:
                                        push after the whole backward, wait
                                        for every layer (for comparison) */
    jobspec_backend backend;         /* default cpu: flworker's compute
                                        backend (--backend overrides) */
    double checkpoint_interval;      /* seconds, 0 = off; default 0 */
    uint32_t max_restarts;           /* default 0 (used by flsched) */
    uint32_t priority;               /* default 0 (used by flsched) */
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
    /* env: env_count "NAME=VALUE" entries added to the command's
     * environment, stored like command's words. */
    char env[JOBSPEC_WORDS_BYTES];
    uint32_t env_count;
} jobspec;

/* Point out[0..max) at the n words stored back to back in buf (a
 * jobspec's command or env); returns how many were written (at most max).
 * The pointers are borrowed from buf. */
size_t jobspec_words(const char *buf, uint32_t n, const char **out, size_t max);

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
 * (for fashion-mnist: the four IDX .gz files under data_dir). Errors name
 * the file. Returns FLPS_EIO when the file cannot be read (message with
 * strerror), FLPS_ECONFIG for a file over 1 MiB, any parse error (message
 * prefixed with the path) or a missing dataset file (message names the
 * file and how to install the dataset), FLPS_ENOMEM, FLPS_EINVAL for NULL
 * path or out. *out is written only on FLPS_OK. Blocks on file I/O. */
flps_err jobspec_load(const char *path, jobspec *out, char *errbuf,
                      size_t errlen);

/* Canonical text of the compression setting ("gtopk:0.01", "qsgd:4",
 * "dense"), which jobspec_parse reads back to the same setting. Always
 * NUL-terminates buf when len > 0 (cutting the text if it does not fit). */
void jobspec_comp_format(const jobspec *spec, char *buf, size_t len);

/* Names for enums, for logs and JSON ("mlp", "ssgd", ...): static strings,
 * never NULL; "unknown" for a value outside the enum. */
const char *jobspec_model_name(jobspec_model m);
/* The i-th of the four Fashion-MNIST files a data_dir holds
 * ("train-images-idx3-ubyte.gz", ...), NULL for i >= 4. */
const char *jobspec_fmnist_file(size_t i);
const char *jobspec_mode_name(jobspec_mode m);
const char *jobspec_comp_name(jobspec_comp c);
const char *jobspec_dataset_name(jobspec_dataset d);
const char *jobspec_partition_name(jobspec_partition p);
const char *jobspec_transport_name(jobspec_transport t);
const char *jobspec_backend_name(jobspec_backend b);
const char *jobspec_lr_schedule_name(jobspec_lr_schedule l);

/* Append to out the Markdown table of every key the parser accepts, one
 * row per key in the parser's order: "| key | type | default | accepted |"
 * where accepted is the text the parser's messages quote after
 * "expected". docs/job-file.md holds this table verbatim (a test compares
 * them). Returns FLPS_OK, FLPS_ENOMEM (sticky in out, as for every
 * flps_strbuf append) or FLPS_EINVAL for a NULL out. Ownership: out is the
 * caller's; the rows are appended to what it holds. */
flps_err jobspec_doc_table(flps_strbuf *out);

#endif
