/* The job file's keys: one table row per key and all that is read from
 * it (value parsing, defaults, the accepted-values texts, enum names and
 * the docs table). jobspec.c walks the YAML and hands each value here. */
#include "services/jobspec_keys.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpuclock.h"
#include "common/numparse.h"
#include "services/safeid.h"
#include "transports/names.h"

#define JP_U32_MAX_TEXT "4294967295"
#define JP_SIZE_TEXT                                                           \
    "a size in bytes, or a number with a suffix K, M, G, T (powers of "        \
    "1000) or Ki, Mi, Gi, Ti (powers of 1024), e.g. 512Mi"

/* Where a value's message goes. */
typedef struct jp {
    char *errbuf;
    size_t errlen;
} jp;

/* Every refusal of a value is FLPS_ECONFIG with one message, written by
 * the one error-buffer formatter. */
#define JP_FAIL(p, ...)                                                        \
    flps_errbuf_set((p)->errbuf, (p)->errlen, FLPS_ECONFIG, __VA_ARGS__)

/* ---- The key table ----------------------------------------------------
 * One row per key drives the parsing, the defaults, the "expected ..."
 * part of every message, the list of accepted keys, the enum names and
 * the table in docs/job-file.md, so none of them can drift apart. */

typedef enum {
    JP_TEXT,       /* a name from the row's bytes (chars) */
    JP_PATH,       /* any text */
    JP_WORD,       /* one of words[], stored as its index (the enum value) */
    JP_WORD_PARAM, /* "word" or "word:param"; words[i] takes params[i] */
    JP_UINT,       /* decimal digits in [umin, umax] */
    JP_REAL,       /* a plain decimal within range */
    JP_SIZE,       /* a SIZE (jobspec_size_parse) in bytes */
    JP_RATE,       /* "auto" (stored as -1) or a SIZE per second (a double) */
    JP_ARGV,       /* a list of words, or one text split like a shell */
    JP_ENV,        /* a mapping NAME: VALUE, or text of NAME=VALUE words */
    JP_MAP,        /* a mapping NAME: VALUE of Kubernetes names (or text of
                      NAME=VALUE words), checked by jobspec_k8s.c */
    JP_LIST,       /* a list of entries, each text or a mapping (or text of
                      entries), checked by jobspec_k8s.c */
} jp_type;

/* Bounds of a real: {lo, hi, lo_open, hi_open}; an open end excludes its
 * value. */
typedef struct jp_range {
    double lo, hi;
    bool lo_open, hi_open;
} jp_range;

/* The parameter after "word:", and the field it goes to. Every word of a
 * key that takes none leaves the field at neutral. */
typedef struct jp_param {
    jp_type type; /* JP_UINT or JP_REAL */
    size_t offset, size;
    double neutral;
    const char *what;   /* "density": "'topk:2' has density 2 out of range" */
    const char *needs;  /* "a density": "'topk' needs a density" */
    const char *suffix; /* how a list of the words writes it: ":D" */
    const char *expect; /* after the word: ":D with 0 < D <= 1" */
    uint64_t umin, umax;
    jp_range range;
} jp_param;

typedef struct jp_keydef {
    const char *name; /* the key as written, also the field's name */
    jp_type type;
    size_t offset, size; /* the field in struct jobspec */
    const char *def;     /* default, as the file would say it; NULL =
                            required */
    const char *expect;  /* what is accepted; NULL: built from the
                            words (with their parameters' suffix) or
                            the integer range, and the note */
    const char *note;    /* JP_UINT, JP_WORD_PARAM: said after the
                            built text, in parentheses */
    uint64_t umin, umax; /* JP_UINT */
    bool zero_later;     /* JP_UINT: 0 is taken too, and checked
                            against the other keys (jobspec.c) */
    jp_range range;      /* JP_REAL */
    const char *chars;   /* JP_TEXT */
    /* JP_TEXT: the value's own parser (after chars): writes the stored
     * text into out (len bytes) and returns NULL, or returns what is
     * wrong ("is not ..."). NULL: stored as written. */
    const char *(*canon)(const char *v, char *out, size_t len);
    const char *const *words; /* JP_WORD, JP_WORD_PARAM: by enum value */
    size_t nwords;
    const char *kind;              /* JP_WORD_PARAM: "is not a codec" */
    const jp_param *const *params; /* JP_WORD_PARAM: by enum value */
    bool empty_ok;                 /* JP_TEXT: "" is a value (none given) */
    bool auto_ok; /* JP_UINT: "auto" is a value, stored as 0 (umin is 1);
                     jobspec.c resolves it once every key is read */
} jp_keydef;

#define JP_OFFSET_SIZE(f)                                                      \
    .offset = offsetof(jobspec, f), .size = sizeof(((jobspec *)0)->f)
/* A row's key is spelled once: as the field's name. */
#define JP_ROW(f, t, dflt)                                                     \
    .name = #f, .type = (t), JP_OFFSET_SIZE(f), .def = (dflt)
#define JP_WORDS(a) .words = (a), .nwords = sizeof(a) / sizeof((a)[0])

/* Enum fields are stored as 32-bit values, like the integer fields. */
_Static_assert(sizeof(jobspec_model) == sizeof(uint32_t) &&
                   sizeof(jobspec_dataset) == sizeof(uint32_t) &&
                   sizeof(jobspec_partition) == sizeof(uint32_t) &&
                   sizeof(jobspec_mode) == sizeof(uint32_t) &&
                   sizeof(codec_kind) == sizeof(uint32_t) &&
                   sizeof(jobspec_lr_schedule) == sizeof(uint32_t) &&
                   sizeof(jobspec_transport) == sizeof(uint32_t) &&
                   sizeof(jobspec_backend) == sizeof(uint32_t) &&
                   sizeof(jobspec_server_opt) == sizeof(uint32_t) &&
                   sizeof(jobspec_peer_selection) == sizeof(uint32_t),
               "enum fields are 32 bits");

static const char *const jp_models[] = {"mlp", "cnn"};
static const char *const jp_datasets[] = {"fashion-mnist", "synthetic"};
static const char *const jp_partitions[] = {"iid", "dirichlet", "shards"};
/* By jobspec_server_opt value. */
static const char *const jp_server_opts[] = {"sgd", "momentum", "adam"};
/* The word lists of the name tables (jobspec.h, compress/codec.h), by
 * enum value. */
static const char *const jp_modes[] = {
#define X(mode, value, name, param) [value] = name,
    JOBSPEC_MODE_MAP(X)
#undef X
};
static const char *const jp_schedules[] = {"constant", "cosine"};
/* By jobspec_peer_selection value: saps_select's names. */
static const char *const jp_peer_selections[] = {"adaptive", "random", "ring"};
/* By jobspec_transport value, which is also transport_kind: the words of
 * the one table of transport names. */
static const char *const jp_transports[] = {
#define JP_TRANSPORT(kind, name, label, what, unbuilt) name,
    TRANSPORT_NAME_MAP(JP_TRANSPORT)
#undef JP_TRANSPORT
};
_Static_assert((int)JOBSPEC_TRANSPORT_ZMQ == (int)TRANSPORT_KIND_ZMQ &&
                   (int)JOBSPEC_TRANSPORT_RDMA == (int)TRANSPORT_KIND_RDMA &&
                   (int)JOBSPEC_TRANSPORT_AUTO == (int)TRANSPORT_KIND_AUTO,
               "jobspec_transport is transport_kind");
/* overlap, encryption: stored as the index, so false is 0. */
static const char *const jp_bools[] = {"false", "true"};
static const char *const jp_backends[] = {
#define X(backend, value, name, how) [value] = name,
    JOBSPEC_BACKEND_MAP(X)
#undef X
};
static const char *const jp_codecs[] = {
#define X(kind, value, name, param, values) [value] = name,
    CODEC_KIND_MAP(X)
#undef X
};

static const jp_param jp_alpha = {
    .type = JP_REAL,
    JP_OFFSET_SIZE(dirichlet_alpha),
    .neutral = 0,
    .what = "alpha",
    .needs = "a concentration alpha",
    .suffix = ":A",
    .expect = ":A with A > 0",
    .range = {0, INFINITY, true, false},
};
static const jp_param jp_shards = {
    .type = JP_UINT,
    JP_OFFSET_SIZE(partition_shards),
    .neutral = 0,
    .what = "shards per client",
    .needs = "a number of shards per client",
    .suffix = ":N",
    .expect = ":N with N an integer from 1 to " JP_U32_MAX_TEXT,
    .umin = 1,
    .umax = UINT32_MAX,
};
static const jp_param jp_server_beta = {
    .type = JP_REAL,
    JP_OFFSET_SIZE(server_momentum),
    .neutral = 0,
    .what = "momentum",
    .needs = "a momentum B",
    .suffix = ":B",
    .expect = ":B with 0 <= B < 1",
    .range = {0, 1, false, true},
};
static const jp_param jp_staleness = {
    .type = JP_UINT,
    JP_OFFSET_SIZE(staleness),
    .neutral = 0,
    .what = "staleness",
    .needs = "a staleness bound",
    .suffix = ":S",
    .expect = ":S with S an integer from 0 to " JP_U32_MAX_TEXT,
    .umin = 0,
    .umax = UINT32_MAX,
};
static const jp_param jp_density = {
    .type = JP_REAL,
    JP_OFFSET_SIZE(density),
    .neutral = 1,
    .what = "density",
    .needs = "a density",
    .suffix = ":D",
    .expect = ":D with 0 < D <= 1",
    .range = {0, 1, true, false},
};
static const jp_param jp_bits = {
    .type = JP_UINT,
    JP_OFFSET_SIZE(qsgd_bits),
    .neutral = 0,
    .what = "bits",
    .needs = "a bit width",
    .suffix = ":BITS",
    .expect = ":BITS with BITS from 1 to 8",
    .umin = 1,
    .umax = 8,
};

/* The parameter of each word, by the PARAM column of the name tables. */
#define JP_PARAM_NONE NULL
#define JP_PARAM_STALENESS (&jp_staleness)
#define JP_PARAM_DENSITY (&jp_density)
#define JP_PARAM_BITS (&jp_bits)

static const jp_param *const jp_partition_params[] = {NULL, &jp_alpha,
                                                      &jp_shards};
static const jp_param *const jp_server_opt_params[] = {NULL, &jp_server_beta,
                                                       NULL};
static const jp_param *const jp_mode_params[] = {
#define X(mode, value, name, param) [value] = JP_PARAM_##param,
    JOBSPEC_MODE_MAP(X)
#undef X
};
static const jp_param *const jp_codec_params[] = {
#define X(kind, value, name, param, values) [value] = JP_PARAM_##param,
    CODEC_KIND_MAP(X)
#undef X
};
_Static_assert(sizeof(jp_codecs) / sizeof(jp_codecs[0]) == CODEC_KIND_COUNT &&
                   sizeof(jp_codec_params) / sizeof(jp_codec_params[0]) ==
                       CODEC_KIND_COUNT,
               "a word and a parameter for every codec kind");

/* Placement counts CPUs in thousandths (scheduler/sched_place.h): less
 * than one would round to nothing and a job of any size would fit. */
#define JP_CPUS_TEXT                                                           \
    "a number of CPUs > 0 (at least 0.001: the scheduler counts thousandths)"

#define JP_SECONDS(note) "a number of seconds >= 0 (" note ")"

/* gpu_clock and gpu_clock_slowdown: common/gpuclock.h parses them (the
 * worker's libflps reads them back from FLPS_GPU_CLOCK*), so the job file
 * refuses what the worker would. */
static const char *jp_gpu_clock(const char *v, char *out, size_t len)
{
    gpuclock_spec g;

    if (gpuclock_parse(v, &g, NULL, 0) != FLPS_OK)
        return "is not default, max, auto or a clock in MHz";
    gpuclock_spec_format(&g, out, len);
    return NULL;
}

static const char *jp_gpu_slowdown(const char *v, char *out, size_t len)
{
    double f;

    if (gpuclock_parse_slowdown(v, &f, NULL, 0) != FLPS_OK)
        return "is not a percentage below 100% or a fraction below 1";
    snprintf(out, len, "%s", v);
    return NULL;
}

/* What the Kubernetes keys' entries accept (jobspec_k8s.c checks them). */
#define JP_RESOURCES_TEXT                                                      \
    "a mapping of each worker pod's cpu (a number), memory (a SIZE), "         \
    "nvidia.com/gpu and DOMAIN/NAME devices (every pod's; integers); at "      \
    "most 32"
#define JP_SELECTOR_TEXT "a mapping of node LABEL: VALUE; at most 32"
#define JP_SCHEDULER_TEXT                                                      \
    "a scheduler name (a DNS subdomain of at most 63 characters, e.g. "        \
    "volcano); empty: the cluster's default"
#define JP_QUEUE_TEXT                                                          \
    "a Kueue LocalQueue name (a label value of at most 63 characters); "       \
    "empty: none"
#define JP_CLAIM_TEXT                                                          \
    "a PersistentVolumeClaim name (a DNS subdomain of at most 63 "             \
    "characters); empty: the scheduler's"
#define JP_DNS_CHARS "abcdefghijklmnopqrstuvwxyz0123456789-."
#define JP_LABEL_CHARS                                                         \
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
#define JP_TOLERATIONS_TEXT                                                    \
    "a list of KEY[=VALUE][:EFFECT], or of mappings of key, operator "         \
    "(Equal, Exists), value, effect (NoSchedule, PreferNoSchedule, "           \
    "NoExecute), tolerationSeconds; at most 32"

static const jp_keydef jp_keys[JOBSPEC_KEY_COUNT] = {
    [JOBSPEC_KEY_NAME] = {JP_ROW(name, JP_TEXT, NULL),
                          .expect = "a name of " SAFEID_RULE,
                          .chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "abcdefghijklmnopqrstuvwxyz0123456789_.-"},
    [JOBSPEC_KEY_MODEL] = {JP_ROW(model, JP_WORD, NULL),
                           .note = "a command: job may leave it out",
                           JP_WORDS(jp_models)},
    [JOBSPEC_KEY_DATASET] = {JP_ROW(dataset, JP_WORD, "fashion-mnist"),
                             JP_WORDS(jp_datasets)},
    [JOBSPEC_KEY_DATA_DIR] = {JP_ROW(data_dir, JP_PATH,
                                     "/usr/share/datasets/fashion-mnist"),
                              .expect = "a directory path of 1 to 255 bytes"},
    [JOBSPEC_KEY_PARTITION] = {JP_ROW(partition, JP_WORD_PARAM, "iid"),
                               .expect = "one of iid, dirichlet:A with A > 0, "
                                         "shards:N with N >= 1",
                               JP_WORDS(jp_partitions), .kind = "a partition",
                               .params = jp_partition_params},
    [JOBSPEC_KEY_WORKERS] = {JP_ROW(workers, JP_UINT, "1"), .umin = 1,
                             .umax = 1024},
    /* auto is stored as 0 with servers_auto set; a plain 0 is for mode
     * saps, checked once the mode is known (jobspec.c). */
    [JOBSPEC_KEY_SERVERS] = {JP_ROW(servers, JP_UINT, "1"), .umin = 1,
                             .umax = 256, .auto_ok = true, .zero_later = true,
                             .note = "or auto: one beside each worker; 0 for "
                                     "mode saps, which needs none"},
    [JOBSPEC_KEY_MODE] = {JP_ROW(mode, JP_WORD_PARAM, "ssgd"),
                          .note = "S an integer >= 0", JP_WORDS(jp_modes),
                          .kind = "a mode", .params = jp_mode_params},
    [JOBSPEC_KEY_ITERATIONS] = {JP_ROW(iterations, JP_UINT, "1000"), .umin = 1,
                                .umax = UINT64_MAX},
    /* fedavg's need for a round is checked once the mode is known. */
    [JOBSPEC_KEY_ROUNDS] = {JP_ROW(rounds, JP_UINT, "10"),
                            .note = "fedavg needs at least 1", .umin = 0,
                            .umax = UINT32_MAX},
    [JOBSPEC_KEY_LOCAL_STEPS] = {JP_ROW(local_steps, JP_UINT, "10"),
                                 .note = "saps: 1 when not given", .umin = 1,
                                 .umax = UINT32_MAX},
    [JOBSPEC_KEY_CLIENT_FRACTION] = {JP_ROW(client_fraction, JP_REAL, "1"),
                                     .expect = "a number with 0 < F <= 1",
                                     .range = {0, 1, true, false}},
    [JOBSPEC_KEY_CLIENTS] = {JP_ROW(clients, JP_UINT, "0"),
                             .note = "0 = one per worker", .umin = 0,
                             .umax = 10000},
    [JOBSPEC_KEY_ROUND_DEADLINE] = {JP_ROW(round_deadline, JP_REAL, "0"),
                                    .expect =
                                        JP_SECONDS("0 = wait for every client"),
                                    .range = {0, INFINITY, false, false}},
    [JOBSPEC_KEY_STRAGGLER_FRACTION] =
        {JP_ROW(straggler_fraction, JP_REAL, "0"),
         .expect = "a number with 0 <= F <= 1 (0 = no stragglers)",
         .range = {0, 1, false, false}},
    [JOBSPEC_KEY_STRAGGLER_SLOWDOWN] =
        {JP_ROW(straggler_slowdown, JP_REAL, "10"),
         .expect = "a number >= 1 (how many times slower a straggler is)",
         .range = {1, 1e9, false, false}},
    [JOBSPEC_KEY_SAPS_DENSITY] = {JP_ROW(saps_density, JP_REAL, "0.01"),
                                  .expect = "a number with 0 < D <= 1 (the "
                                            "share of each tensor a saps "
                                            "round exchanges)",
                                  .range = {0, 1, true, false}},
    [JOBSPEC_KEY_PEER_SELECTION] = {JP_ROW(peer_selection, JP_WORD, "adaptive"),
                                    JP_WORDS(jp_peer_selections)},
    [JOBSPEC_KEY_BANDWIDTH_THRESHOLD] =
        {JP_ROW(bandwidth_threshold, JP_RATE, "auto"),
         .expect = "auto (split the measured links at their widest gap), or "
                   "bytes per second: " JP_SIZE_TEXT},
    [JOBSPEC_KEY_CONNECTIVITY_WINDOW] = {JP_ROW(connectivity_window, JP_UINT,
                                                "10"),
                                         .umin = 2, .umax = UINT32_MAX},
    [JOBSPEC_KEY_BANDWIDTH_REPROBE] = {JP_ROW(bandwidth_reprobe, JP_UINT, "0"),
                                       .note = "0 = only at the start",
                                       .umin = 0, .umax = UINT64_MAX},
    [JOBSPEC_KEY_PEER_DEADLINE] = {JP_ROW(peer_deadline, JP_REAL, "10"),
                                   .expect = "a number of seconds > 0 (how "
                                             "long a saps peer may take to "
                                             "answer)",
                                   .range = {0, 86400, true, false}},
    [JOBSPEC_KEY_BATCH_SIZE] = {JP_ROW(batch_size, JP_UINT, "32"), .umin = 1,
                                .umax = 65536},
    [JOBSPEC_KEY_LR] = {JP_ROW(lr, JP_REAL, "0.05"), .expect = "a number > 0",
                        .range = {0, INFINITY, true, false}},
    [JOBSPEC_KEY_MOMENTUM] = {JP_ROW(momentum, JP_REAL, "0.9"),
                              .expect = "a number with 0 <= M < 1",
                              .range = {0, 1, false, true}},
    [JOBSPEC_KEY_LR_SCHEDULE] = {JP_ROW(lr_schedule, JP_WORD, "constant"),
                                 JP_WORDS(jp_schedules)},
    [JOBSPEC_KEY_COMPRESSION] = {JP_ROW(compression, JP_WORD_PARAM, "dense"),
                                 .note = "0 < D <= 1, BITS from 1 to 8",
                                 JP_WORDS(jp_codecs), .kind = "a codec",
                                 .params = jp_codec_params},
    /* Which codecs and modes take a warm-up is checked once all keys are
     * known (jp_cross_check). */
    [JOBSPEC_KEY_DENSITY_WARMUP] = {JP_ROW(density_warmup, JP_UINT, "0"),
                                    .note = "0 = none; at most iterations; "
                                            "ssgd with topk, gtopk, dgc or "
                                            "auto",
                                    .umin = 0, .umax = UINT64_MAX},
    [JOBSPEC_KEY_DENSITY_WARMUP_START] =
        {JP_ROW(density_warmup_start, JP_REAL, "0.25"),
         .expect = "a number with 0 < S <= 1, above the codec's density",
         .range = {0, 1, true, false}},
    [JOBSPEC_KEY_TRANSPORT] = {JP_ROW(transport, JP_WORD, "zmq"),
                               JP_WORDS(jp_transports)},
    [JOBSPEC_KEY_SEED] = {JP_ROW(seed, JP_UINT, "1"), .umin = 0,
                          .umax = UINT64_MAX},
    [JOBSPEC_KEY_EVAL_EVERY] = {JP_ROW(eval_every, JP_UINT, "100"),
                                .note = "0 = only at the end", .umin = 0,
                                .umax = UINT64_MAX},
    [JOBSPEC_KEY_PART_SIZE] = {JP_ROW(part_size, JP_UINT, "65536"), .umin = 1,
                               .umax = UINT32_MAX},
    [JOBSPEC_KEY_OVERLAP] = {JP_ROW(overlap, JP_WORD, "true"),
                             JP_WORDS(jp_bools)},
    /* Whether this flworker has the backend is flworker's to say. */
    [JOBSPEC_KEY_BACKEND] = {JP_ROW(backend, JP_WORD, "cpu"),
                             JP_WORDS(jp_backends)},
    [JOBSPEC_KEY_GPU_CLOCK] = {JP_ROW(gpu_clock, JP_TEXT, "default"),
                               .expect = "default (leave it), max, auto "
                                         "(measured: docs/energy.md) or a "
                                         "clock in MHz from 100 to 10000",
                               .chars = "abcdefghijklmnopqrstuvwxyz"
                                        "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                               .canon = jp_gpu_clock},
    [JOBSPEC_KEY_GPU_CLOCK_SLOWDOWN] =
        {JP_ROW(gpu_clock_slowdown, JP_TEXT, "5%"),
         .expect = "a percentage (5%) or a fraction (0.05) from 0 up to 1: "
                   "how much slower than the fastest clock auto may run",
         .chars = "0123456789.%", .canon = jp_gpu_slowdown},
    [JOBSPEC_KEY_CHECKPOINT_INTERVAL] =
        {JP_ROW(checkpoint_interval, JP_REAL, "0"),
         .expect = JP_SECONDS("0 = off"), .range = {0, INFINITY, false, false}},
    [JOBSPEC_KEY_MAX_RESTARTS] = {JP_ROW(max_restarts, JP_UINT, "0"), .umin = 0,
                                  .umax = UINT32_MAX},
    [JOBSPEC_KEY_PRIORITY] = {JP_ROW(priority, JP_UINT, "0"), .umin = 0,
                              .umax = UINT32_MAX},
    [JOBSPEC_KEY_CPUS_PER_WORKER] = {JP_ROW(cpus_per_worker, JP_REAL, "1"),
                                     .expect = JP_CPUS_TEXT,
                                     .range = {0.001, INFINITY, false, false}},
    [JOBSPEC_KEY_MEMORY_PER_WORKER] = {JP_ROW(memory_per_worker, JP_SIZE,
                                              "1Gi"),
                                       .expect = JP_SIZE_TEXT},
    [JOBSPEC_KEY_GPUS_PER_WORKER] = {JP_ROW(gpus_per_worker, JP_UINT, "0"),
                                     .umin = 0, .umax = 1024},
    [JOBSPEC_KEY_CPUS_PER_SERVER] = {JP_ROW(cpus_per_server, JP_REAL, "1"),
                                     .expect = JP_CPUS_TEXT,
                                     .range = {0.001, INFINITY, false, false}},
    [JOBSPEC_KEY_MEMORY_PER_SERVER] = {JP_ROW(memory_per_server, JP_SIZE,
                                              "512Mi"),
                                       .expect = JP_SIZE_TEXT},
    [JOBSPEC_KEY_TIME_LIMIT] = {JP_ROW(time_limit, JP_REAL, "0"),
                                .expect = JP_SECONDS("0 = no limit"),
                                .range = {0, INFINITY, false, false}},
    /* The defaults of these two are only the docs' text: no command, no
     * variables (the zeroed fields). */
    [JOBSPEC_KEY_COMMAND] = {JP_ROW(command, JP_ARGV, "[]"),
                             .expect = "a list of strings (program first) or "
                                       "one string split into words like a "
                                       "shell would, without running one; at "
                                       "most 128 words of 4095 bytes in all; "
                                       "[] runs flworker"},
    [JOBSPEC_KEY_ENV] = {JP_ROW(env, JP_ENV, "{}"),
                         .expect = "a mapping of NAME: VALUE (NAME of A-Z a-z "
                                   "0-9 _, not starting with a digit, not one "
                                   "the launcher sets), or one string of "
                                   "NAME=VALUE words; at most 128 of 4095 "
                                   "bytes in all"},
    /* What a Kubernetes launcher reads (docs/deploy.md); their names and
     * entries are checked by jobspec_k8s.c as the API server would. */
    [JOBSPEC_KEY_IMAGE] = {JP_ROW(image, JP_TEXT, ""),
                           .expect = "a container image reference "
                                     "([REGISTRY/]NAME[:TAG][@DIGEST]) of at "
                                     "most 255 characters from A-Z a-z 0-9 "
                                     ". _ - / : @; empty: the scheduler's "
                                     "image",
                           .chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "abcdefghijklmnopqrstuvwxyz0123456789"
                                    "._-/:@",
                           .empty_ok = true},
    [JOBSPEC_KEY_RESOURCES] = {JP_ROW(resources, JP_MAP, "{}"),
                               .expect = JP_RESOURCES_TEXT},
    [JOBSPEC_KEY_NODE_SELECTOR] = {JP_ROW(node_selector, JP_MAP, "{}"),
                                   .expect = JP_SELECTOR_TEXT},
    [JOBSPEC_KEY_TOLERATIONS] = {JP_ROW(tolerations, JP_LIST, "[]"),
                                 .expect = JP_TOLERATIONS_TEXT},
    [JOBSPEC_KEY_SCHEDULER_NAME] = {JP_ROW(scheduler_name, JP_TEXT, ""),
                                    .expect = JP_SCHEDULER_TEXT,
                                    .chars = JP_DNS_CHARS, .empty_ok = true},
    [JOBSPEC_KEY_QUEUE] = {JP_ROW(queue, JP_TEXT, ""), .expect = JP_QUEUE_TEXT,
                           .chars = JP_LABEL_CHARS, .empty_ok = true},
    [JOBSPEC_KEY_CHECKPOINT_VOLUME] = {JP_ROW(checkpoint_volume, JP_TEXT, ""),
                                       .expect = JP_CLAIM_TEXT,
                                       .chars = JP_DNS_CHARS, .empty_ok = true},
    /* Which keys need mode fedavg is checked once all keys are known
     * (jp_check_fedavg). */
    [JOBSPEC_KEY_LOCAL_EPOCHS] = {JP_ROW(local_epochs, JP_UINT, "0"),
                                  .note = "0 = local_steps; else passes over "
                                          "a client's samples per round",
                                  .umin = 0, .umax = 1000000},
    [JOBSPEC_KEY_PROX_MU] = {JP_ROW(prox_mu, JP_REAL, "0"),
                             .expect = "a number >= 0 (FedProx's mu; 0 = "
                                       "plain FedAvg)",
                             .range = {0, 1e6, false, false}},
    [JOBSPEC_KEY_SERVER_OPTIMIZER] =
        {JP_ROW(server_optimizer, JP_WORD_PARAM, "sgd"), .note = "0 <= B < 1",
         JP_WORDS(jp_server_opts), .kind = "a server optimizer",
         .params = jp_server_opt_params},
    [JOBSPEC_KEY_SERVER_LR] = {JP_ROW(server_lr, JP_REAL, "1"),
                               .expect = "a number > 0 (the server's step "
                                         "on the averaged delta)",
                               .range = {0, 1e6, true, false}},
    [JOBSPEC_KEY_ENCRYPTION] = {JP_ROW(encryption, JP_WORD, "true"),
                                JP_WORDS(jp_bools)},
};

/* What a key accepts, as quoted after "expected": the row's text, or one
 * built from its words or its integer range. Returns buf or the row's
 * static text. */
const char *jobspec_key_expect(jobspec_key key, char buf[JOBSPEC_EXPECT_MAX])
{
    const jp_keydef *k = &jp_keys[key];
    size_t n = 0;

    if (k->expect != NULL)
        return k->expect;
    if (k->type == JP_UINT) {
        snprintf(buf, JOBSPEC_EXPECT_MAX, "an integer from %llu to %llu%s%s%s",
                 (unsigned long long)k->umin, (unsigned long long)k->umax,
                 k->note ? " (" : "", k->note ? k->note : "",
                 k->note ? ")" : "");
        return buf;
    }
    buf[0] = '\0';
    for (size_t i = 0; i < k->nwords && n < JOBSPEC_EXPECT_MAX; i++) {
        const jp_param *pp = k->type == JP_WORD_PARAM ? k->params[i] : NULL;

        n += (size_t)snprintf(buf + n, JOBSPEC_EXPECT_MAX - n, "%s%s%s",
                              i == 0 ? "one of " : ", ", k->words[i],
                              pp != NULL ? pp->suffix : "");
    }
    if (k->note != NULL && n < JOBSPEC_EXPECT_MAX)
        snprintf(buf + n, JOBSPEC_EXPECT_MAX - n, " (%s)", k->note);
    return buf;
}

/* Every key, comma-separated, for "accepted keys: ...". */
const char *jobspec_key_list(char *buf, size_t len)
{
    size_t n = 0;

    buf[0] = '\0';
    for (int i = 0; i < JOBSPEC_KEY_COUNT && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i == 0 ? "" : ", ",
                              jp_keys[i].name);
    return buf;
}

/* Copy a value for quoting in a message: control bytes become '?' so a
 * stray newline or escape sequence cannot break the one-line message, and
 * long values are cut. */
void jobspec_key_show(const char *v, size_t n, char out[JOBSPEC_SHOW_MAX + 4])
{
    size_t i;
    size_t m = n > JOBSPEC_SHOW_MAX ? JOBSPEC_SHOW_MAX : n;

    /* Never cut a UTF-8 character in two. */
    while (m < n && m > 0 && ((unsigned char)v[m] & 0xc0) == 0x80)
        m--;

    for (i = 0; i < m; i++) {
        unsigned char c = (unsigned char)v[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (n > JOBSPEC_SHOW_MAX) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
}

static char jp_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* Edit distance with adjacent transpositions counted as one edit (optimal
 * string alignment), case-insensitive: "wrokers" and "Workers" are both
 * one edit from "workers". Inputs longer than 32 bytes are never close to
 * a key, so they get a large distance. */
static size_t jp_distance(const char *a, const char *b)
{
    enum { MAXL = 32 };
    size_t la = strlen(a), lb = strlen(b);
    size_t d[MAXL + 1][MAXL + 1];

    if (la > MAXL || lb > MAXL)
        return (size_t)-1;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = jp_lower(a[i - 1]) != jp_lower(b[j - 1]);
            size_t best = d[i - 1][j] + 1;

            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && jp_lower(a[i - 1]) == jp_lower(b[j - 2]) &&
                jp_lower(a[i - 2]) == jp_lower(b[j - 1]) &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

/* The candidate closest to word, if close enough to be a likely typo:
 * one edit for short names, two for longer ones. NULL otherwise. */
static const char *jp_closest(const char *word, const char *const *cands,
                              size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;

    for (size_t i = 0; i < n; i++) {
        size_t d = jp_distance(word, cands[i]);
        size_t limit = strlen(cands[i]) <= 4 ? 1 : 2;

        if (d <= limit && d < best_d) {
            best = cands[i];
            best_d = d;
        }
    }
    return best;
}

/* ---- Numbers ----------------------------------------------------------
 * Strict: decimal digits only for integers, plain decimal notation for
 * reals. YAML 1.1 would read 0x10, 0o17, 1_000 or .inf as numbers; a job
 * file that relies on those is more likely a typo than intent. */

typedef enum {
    JP_NUM_OK = 0,
    JP_NUM_SYNTAX,    /* not a number at all, or trailing garbage */
    JP_NUM_NEGATIVE,  /* a negative integer */
    JP_NUM_NONFINITE, /* nan, inf */
    JP_NUM_RANGE,     /* does not fit the type */
} jp_num;

/* Decimal digits only, through the one bounded number parser; a refusal
 * is then sorted into the kinds the messages tell apart. */
static jp_num jp_parse_u64(const char *s, uint64_t *out)
{
    if (flps_parse_u64(NULL, s, 0, UINT64_MAX, out, NULL, 0) == FLPS_OK)
        return JP_NUM_OK;
    if (s[0] == '-' && s[1] >= '0' && s[1] <= '9')
        return JP_NUM_NEGATIVE;
    /* Only digits, yet refused: more than 64 bits. */
    if (s[0] != '\0' && strspn(s, "0123456789") == strlen(s))
        return JP_NUM_RANGE;
    return JP_NUM_SYNTAX;
}

static bool jp_is_nonfinite_word(const char *s)
{
    char w[16];
    size_t n = 0;

    if (*s == '+' || *s == '-')
        s++;
    if (*s == '.')
        s++;
    for (; *s != '\0' && n + 1 < sizeof(w); s++)
        w[n++] = jp_lower(*s);
    w[n] = '\0';
    return *s == '\0' && (strcmp(w, "nan") == 0 || strcmp(w, "inf") == 0 ||
                          strcmp(w, "infinity") == 0);
}

/* strtod follows LC_NUMERIC; the daemons never call setlocale, so the
 * decimal point is '.' as in every job file. Not flps_parse_double: it
 * reads "0x1p3" and an underflow ("1e-400") as numbers, which a job file
 * has always refused, and the bounds here may be open. */
static jp_num jp_parse_real(const char *s, double *out)
{
    char *end = NULL;
    double v;

    if (jp_is_nonfinite_word(s))
        return JP_NUM_NONFINITE;
    /* Refuse what strtod would take but a person would not write: leading
     * spaces, hex floats, "nan(...)". */
    if (s[0] == '\0' || strspn(s, "0123456789+-.eE") != strlen(s))
        return JP_NUM_SYNTAX;
    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end != '\0')
        return JP_NUM_SYNTAX;
    if (errno == ERANGE || !isfinite(v))
        return JP_NUM_RANGE;
    *out = v;
    return JP_NUM_OK;
}

static const char *jp_num_problem(jp_num st, bool integer)
{
    switch (st) {
    case JP_NUM_SYNTAX:
        return integer ? "is not an integer" : "is not a number";
    case JP_NUM_NEGATIVE:
        return "is negative";
    case JP_NUM_NONFINITE:
        return "is not a finite number";
    case JP_NUM_RANGE:
    case JP_NUM_OK:
        break;
    }
    return "is out of range";
}

/* SIZE: decimal digits, optionally a fraction, and a suffix; without a
 * suffix the value is a whole number of bytes. Fractions of a byte are cut
 * off ("1.5K" is 1500). */
static jp_num jp_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"K", 1000ULL},
        {"M", 1000000ULL},
        {"G", 1000000000ULL},
        {"T", 1000000000000ULL},
        {"Ki", 1ULL << 10},
        {"Mi", 1ULL << 20},
        {"Gi", 1ULL << 30},
        {"Ti", 1ULL << 40},
    };
    size_t nint = strspn(s, "0123456789");
    size_t nfrac = 0;
    const char *suffix;
    uint64_t whole = 0;
    char *end = NULL;

    if (s[0] == '-' && s[1] >= '0' && s[1] <= '9')
        return JP_NUM_NEGATIVE;
    if (nint == 0)
        return JP_NUM_SYNTAX;
    suffix = s + nint;
    if (*suffix == '.') {
        nfrac = strspn(suffix + 1, "0123456789");
        if (nfrac == 0)
            return JP_NUM_SYNTAX;
        suffix += 1 + nfrac;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        long double frac = 0, scale = 1;

        if (strcmp(suffix, units[i].suffix) != 0)
            continue;
        if (i == 0 && nfrac > 0)
            return JP_NUM_SYNTAX; /* bytes are whole */
        errno = 0;
        whole = strtoull(s, &end, 10);
        if (errno == ERANGE || whole > UINT64_MAX / units[i].mult)
            return JP_NUM_RANGE;
        for (size_t k = 0; k < nfrac && k < 18; k++) {
            scale *= 10;
            frac = frac * 10 + (long double)(s[nint + 1 + k] - '0');
        }
        frac = frac / scale * (long double)units[i].mult;
        if ((long double)(UINT64_MAX - whole * units[i].mult) < frac)
            return JP_NUM_RANGE;
        *out = whole * units[i].mult + (uint64_t)frac;
        return JP_NUM_OK;
    }
    return JP_NUM_SYNTAX;
}

flps_err jobspec_size_parse(const char *text, uint64_t *out)
{
    uint64_t v = 0;

    if (text == NULL || out == NULL)
        return FLPS_EINVAL;
    if (jp_parse_size(text, &v) != JP_NUM_OK)
        return FLPS_EINVAL;
    *out = v;
    return FLPS_OK;
}

/* ---- Values ---------------------------------------------------------- */

/* A value as handed to the setters: text, its line, and the key. */
typedef struct jp_val {
    const char *s;
    size_t n;
    unsigned long line;
    jobspec_key key;
} jp_val;

static flps_err jp_bad(jp *p, const jp_val *v, const char *problem)
{
    char shown[JOBSPEC_SHOW_MAX + 4];
    char ex[JOBSPEC_EXPECT_MAX];

    jobspec_key_show(v->s, v->n, shown);
    return JP_FAIL(p, "line %lu: %s: '%s' %s; expected %s", v->line,
                   jp_keys[v->key].name, shown, problem,
                   jobspec_key_expect(v->key, ex));
}

static bool jp_in_range(double x, const jp_range *r)
{
    bool lo_ok = r->lo_open ? x > r->lo : x >= r->lo;
    bool hi_ok = r->hi_open ? x < r->hi : x <= r->hi;

    return lo_ok && hi_ok;
}

/* Integer fields are 32 or 64 bits (enums are 32, see above). */
static void jp_store_uint(jobspec *s, size_t offset, size_t size, uint64_t x)
{
    char *field = (char *)s + offset;

    if (size == sizeof(uint32_t)) {
        uint32_t v = (uint32_t)x;
        memcpy(field, &v, sizeof(v));
    } else {
        memcpy(field, &x, sizeof(x));
    }
}

static void jp_store_real(jobspec *s, size_t offset, double x)
{
    memcpy((char *)s + offset, &x, sizeof(x));
}

static flps_err jp_set_text(jp *p, const jp_val *v, jobspec *s)
{
    const jp_keydef *k = &jp_keys[v->key];
    size_t ok = k->chars != NULL ? strspn(v->s, k->chars) : v->n;

    if (v->n == 0 && !k->empty_ok)
        return jp_bad(p, v, "is empty");
    if (v->n >= k->size)
        return jp_bad(p, v, "is too long");
    if (ok != v->n) {
        char c = v->s[ok];
        char shown[JOBSPEC_SHOW_MAX + 4];
        char ex[JOBSPEC_EXPECT_MAX];

        jobspec_key_show(v->s, v->n, shown);
        if ((unsigned char)c < 0x20 || c == 0x7f)
            return jp_bad(p, v, "contains a control character");
        if ((unsigned char)c >= 0x80) {
            /* libyaml passed only UTF-8: quote the whole character, as a
             * lone byte would make the message (and a JSON answer holding
             * it) invalid UTF-8. */
            size_t cl = (unsigned char)c >= 0xf0   ? 4
                        : (unsigned char)c >= 0xe0 ? 3
                                                   : 2;

            if (cl > v->n - ok)
                cl = v->n - ok;
            return JP_FAIL(p,
                           "line %lu: %s: '%s' contains the non-ASCII "
                           "character '%.*s'; expected %s",
                           v->line, k->name, shown, (int)cl, v->s + ok,
                           jobspec_key_expect(v->key, ex));
        }
        return JP_FAIL(p, "line %lu: %s: '%s' contains '%c'; expected %s",
                       v->line, k->name, shown, c,
                       jobspec_key_expect(v->key, ex));
    }
    /* The name becomes part of paths and keys (services/safeid.h). */
    if (v->key == JOBSPEC_KEY_NAME && !safeid_is_valid(v->s, v->n))
        return jp_bad(p, v,
                      "must start with a letter or digit and hold no '..'");
    if (v->n > 0 && v->key != JOBSPEC_KEY_NAME) {
        const char *why = jobspec_k8s_check_text(v->key, v->s);

        if (why != NULL)
            return jp_bad(p, v, why);
    }
    if (k->canon != NULL) {
        char out[64];
        const char *why = k->canon(v->s, out, sizeof(out));

        if (why != NULL)
            return jp_bad(p, v, why);
        snprintf((char *)s + k->offset, k->size, "%s", out);
        return FLPS_OK;
    }
    memcpy((char *)s + k->offset, v->s, v->n + 1);
    return FLPS_OK;
}

/* One of the row's words (exact match); otherwise a message that suggests
 * the closest word when there is one. */
static flps_err jp_set_word(jp *p, const jp_val *v, jobspec *s)
{
    const jp_keydef *k = &jp_keys[v->key];
    char shown[JOBSPEC_SHOW_MAX + 4];
    char ex[JOBSPEC_EXPECT_MAX];
    const char *near;

    for (size_t i = 0; i < k->nwords; i++) {
        if (strcmp(v->s, k->words[i]) == 0) {
            jp_store_uint(s, k->offset, k->size, i);
            return FLPS_OK;
        }
    }
    jobspec_key_show(v->s, v->n, shown);
    near = jp_closest(v->s, k->words, k->nwords);
    if (near != NULL)
        return JP_FAIL(p,
                       "line %lu: %s: '%s' is not accepted; expected "
                       "%s; did you mean '%s'?",
                       v->line, k->name, shown, jobspec_key_expect(v->key, ex),
                       near);
    return jp_bad(p, v, "is not accepted");
}

/* Split "word:param" at the first ':' into word (cut to wlen-1 bytes) and
 * param (NULL when there is no ':'). */
static const char *jp_split(const char *s, char *word, size_t wlen)
{
    const char *colon = strchr(s, ':');
    size_t n = colon != NULL ? (size_t)(colon - s) : strlen(s);

    if (n >= wlen)
        n = wlen - 1;
    memcpy(word, s, n);
    word[n] = '\0';
    return colon != NULL ? colon + 1 : NULL;
}

/* Message for a bad parameter of a "word:param" value, e.g.
 * "'topk:2' has density 2 out of range; expected topk:D with 0 < D <= 1". */
static flps_err jp_bad_param(jp *p, const jp_val *v, const jp_param *pp,
                             const char *param, jp_num st, const char *expect)
{
    char shown[JOBSPEC_SHOW_MAX + 4];
    char pshown[JOBSPEC_SHOW_MAX + 4];
    const char *key = jp_keys[v->key].name;

    jobspec_key_show(v->s, v->n, shown);
    jobspec_key_show(param, strlen(param), pshown);
    if (st == JP_NUM_RANGE || st == JP_NUM_OK)
        return JP_FAIL(p,
                       "line %lu: %s: '%s' has %s %s out of range; "
                       "expected %s",
                       v->line, key, shown, pp->what, pshown, expect);
    return JP_FAIL(p, "line %lu: %s: '%s' has %s '%s' which %s; expected %s",
                   v->line, key, shown, pp->what, pshown,
                   jp_num_problem(st, pp->type == JP_UINT), expect);
}

/* Message for a value whose word (before ':') is unknown; the suggestion,
 * when there is one, keeps the parameter: "gtop:0.01" -> "gtopk:0.01". */
static flps_err jp_bad_word(jp *p, const jp_val *v, const char *word)
{
    const jp_keydef *k = &jp_keys[v->key];
    char shown[JOBSPEC_SHOW_MAX + 4];
    char pshown[JOBSPEC_SHOW_MAX + 4] = "";
    char ex[JOBSPEC_EXPECT_MAX];
    const char *expect = jobspec_key_expect(v->key, ex);
    const char *near = jp_closest(word, k->words, k->nwords);
    const char *colon = strchr(v->s, ':');

    jobspec_key_show(v->s, v->n, shown);
    if (near == NULL)
        return JP_FAIL(p, "line %lu: %s: '%s' is not %s; expected %s", v->line,
                       k->name, shown, k->kind, expect);
    if (colon != NULL)
        jobspec_key_show(colon, strlen(colon), pshown);
    return JP_FAIL(p,
                   "line %lu: %s: '%s' is not %s; expected %s; did you "
                   "mean '%s%s'?",
                   v->line, k->name, shown, k->kind, expect, near, pshown);
}

/* "word" or "word:param": the word sets the enum field, its parameter (if
 * it takes one) its own field; the key's other parameter fields go back
 * to neutral, so "dense" after "topk:0.1" leaves no density behind. */
static flps_err jp_set_word_param(jp *p, const jp_val *v, jobspec *s)
{
    const jp_keydef *k = &jp_keys[v->key];
    char word[16];
    char expect[64];
    char shown[JOBSPEC_SHOW_MAX + 4];
    const char *param = jp_split(v->s, word, sizeof(word));
    const jp_param *pp;
    uint64_t u = 0;
    double d = 0;
    jp_num st;
    size_t i;

    for (i = 0; i < k->nwords; i++)
        if (strcmp(word, k->words[i]) == 0)
            break;
    if (i == k->nwords)
        return jp_bad_word(p, v, word);
    pp = k->params[i];
    jobspec_key_show(v->s, v->n, shown);
    if (pp == NULL && param != NULL) {
        char ex[JOBSPEC_EXPECT_MAX];

        return JP_FAIL(p,
                       "line %lu: %s: '%s': %s takes no parameter; "
                       "expected %s",
                       v->line, k->name, shown, word,
                       jobspec_key_expect(v->key, ex));
    }
    if (pp != NULL) {
        snprintf(expect, sizeof(expect), "%s%s", word, pp->expect);
        if (param == NULL)
            return JP_FAIL(p, "line %lu: %s: '%s' needs %s; expected %s",
                           v->line, k->name, shown, pp->needs, expect);
        if (pp->type == JP_UINT) {
            st = jp_parse_u64(param, &u);
            if (st == JP_NUM_OK && (u < pp->umin || u > pp->umax))
                st = JP_NUM_RANGE;
        } else {
            st = jp_parse_real(param, &d);
            if (st == JP_NUM_OK && !jp_in_range(d, &pp->range))
                st = JP_NUM_RANGE;
        }
        if (st != JP_NUM_OK)
            return jp_bad_param(p, v, pp, param, st, expect);
    }
    for (size_t j = 0; j < k->nwords; j++) {
        const jp_param *q = k->params[j];

        if (q == NULL)
            continue;
        if (q->type == JP_UINT)
            jp_store_uint(s, q->offset, q->size, (uint64_t)q->neutral);
        else
            jp_store_real(s, q->offset, q->neutral);
    }
    jp_store_uint(s, k->offset, k->size, i);
    if (pp != NULL && pp->type == JP_UINT)
        jp_store_uint(s, pp->offset, pp->size, u);
    else if (pp != NULL)
        jp_store_real(s, pp->offset, d);
    return FLPS_OK;
}

/* ---- Words: command and env ------------------------------------------
 * Both are stored as words back to back in a fixed buffer so a jobspec
 * stays a plain value that can be copied. */

static const char *const jp_reserved_env[] = {
#define X(name, what) #name,
    JOBSPEC_WORKER_ENV(X)
#undef X
};

int jobspec_env_is_reserved(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(jp_reserved_env) / sizeof(*jp_reserved_env);
         i++)
        if (strlen(jp_reserved_env[i]) == len &&
            memcmp(jp_reserved_env[i], name, len) == 0)
            return 1;
    return 0;
}

/* The words stored back to back in buf, a buffer of bytes. */
static size_t jp_words_of(const char *buf, size_t bytes, uint32_t n,
                          const char **out, size_t max)
{
    size_t k = 0, at = 0;

    if (buf == NULL || out == NULL)
        return 0;
    while (k < n && k < max && at < bytes) {
        out[k++] = buf + at;
        at += strnlen(buf + at, bytes - at) + 1;
    }
    return k;
}

size_t jobspec_words(const char *buf, uint32_t n, const char **out, size_t max)
{
    return jp_words_of(buf, JOBSPEC_WORDS_BYTES, n, out, max);
}

size_t jobspec_map_words(const char *buf, uint32_t n, const char **out,
                         size_t max)
{
    return jp_words_of(buf, JOBSPEC_MAP_BYTES, n, out, max);
}

int jobspec_key_takes_words(jobspec_key key)
{
    jp_type t = jp_keys[key].type;

    return t == JP_ARGV || t == JP_ENV || t == JP_MAP || t == JP_LIST;
}

int jobspec_key_takes_mapping(jobspec_key key)
{
    return jp_keys[key].type == JP_ENV || jp_keys[key].type == JP_MAP;
}

int jobspec_key_items_may_be_mappings(jobspec_key key)
{
    return jp_keys[key].type == JP_LIST;
}

/* Split text like a POSIX shell splits words, without expanding anything:
 * blanks separate words; '...' is literal; "..." is literal except for
 * \\ \" \$ \` and a backslash-newline; a backslash elsewhere quotes the
 * next byte. The words go back to back into out (NUL-terminated each).
 * Returns NULL, or what was wrong. */
static const char *jp_shell_split(const char *s, char *out, size_t outlen,
                                  size_t *nwords, size_t *used)
{
    size_t o = 0, n = 0;

    for (;;) {
        int in_word = 0;

        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        if (*s == '\0')
            break;
        while (*s != '\0' && *s != ' ' && *s != '\t' && *s != '\n' &&
               *s != '\r') {
            char c = *s++;

            in_word = 1;
            if (c == '\'') {
                while (*s != '\0' && *s != '\'') {
                    if (o + 1 >= outlen)
                        return "is too long";
                    out[o++] = *s++;
                }
                if (*s == '\0')
                    return "has a ' without its closing '";
                s++;
                continue;
            }
            if (c == '"') {
                while (*s != '\0' && *s != '"') {
                    c = *s++;
                    if (c == '\\' && (*s == '\\' || *s == '"' || *s == '$' ||
                                      *s == '`' || *s == '\n')) {
                        if (*s++ == '\n')
                            continue;
                        c = s[-1];
                    }
                    if (o + 1 >= outlen)
                        return "is too long";
                    out[o++] = c;
                }
                if (*s == '\0')
                    return "has a \" without its closing \"";
                s++;
                continue;
            }
            if (c == '\\') {
                if (*s == '\0')
                    return "ends in a lone backslash";
                c = *s++;
            }
            if (o + 1 >= outlen)
                return "is too long";
            out[o++] = c;
        }
        if (in_word) {
            if (o + 1 > outlen)
                return "is too long";
            out[o++] = '\0';
            if (++n > JOBSPEC_WORDS_MAX)
                return "has more than 128 words";
        }
    }
    *nwords = n;
    *used = o;
    return NULL;
}

/* Check the words of command or env and store them. */
static flps_err jp_store_words(jp *p, const jp_val *v, const char *words,
                               size_t n, size_t used, jobspec *s)
{
    const jp_keydef *k = &jp_keys[v->key];
    char ex[JOBSPEC_EXPECT_MAX];
    const char *w = words;

    if (k->type == JP_MAP || k->type == JP_LIST)
        return jobspec_k8s_store(v->key, k->name,
                                 jobspec_key_expect(v->key, ex), words, n, used,
                                 v->line, s, p->errbuf, p->errlen);
    if (n > JOBSPEC_WORDS_MAX)
        return JP_FAIL(p,
                       "line %lu: %s: %zu words are more than 128; "
                       "expected %s",
                       v->line, k->name, n, jobspec_key_expect(v->key, ex));
    if (used > JOBSPEC_WORDS_BYTES)
        return JP_FAIL(p,
                       "line %lu: %s: %zu bytes are more than 4095; "
                       "expected %s",
                       v->line, k->name, used - n,
                       jobspec_key_expect(v->key, ex));
    for (size_t i = 0; i < n; i++, w += strlen(w) + 1) {
        char shown[JOBSPEC_SHOW_MAX + 4];
        const char *eq = strchr(w, '=');
        size_t nl = eq ? (size_t)(eq - w) : strlen(w);

        if (k->type == JP_ARGV) {
            if (i == 0 && w[0] == '\0')
                return JP_FAIL(p,
                               "line %lu: %s: the program (the first "
                               "word) is empty; expected %s",
                               v->line, k->name,
                               jobspec_key_expect(v->key, ex));
            continue;
        }
        jobspec_key_show(w, nl, shown);
        if (eq == NULL || nl == 0 ||
            strspn(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "abcdefghijklmnopqrstuvwxyz"
                      "0123456789_") != nl ||
            (w[0] >= '0' && w[0] <= '9'))
            return JP_FAIL(p,
                           "line %lu: %s: '%s' is not a variable name; "
                           "expected %s",
                           v->line, k->name, shown,
                           jobspec_key_expect(v->key, ex));
        if (jobspec_env_is_reserved(w, nl))
            return JP_FAIL(p,
                           "line %lu: %s: %s is set by the launcher for "
                           "every worker (see docs/job-file.md); leave it "
                           "out of env",
                           v->line, k->name, shown);
        for (size_t j = 0; j < i; j++) {
            const char *prev = words;

            for (size_t m = 0; m < j; m++)
                prev += strlen(prev) + 1;
            if (strncmp(prev, w, nl + 1) == 0)
                return JP_FAIL(p,
                               "line %lu: %s: %s is given twice; give "
                               "each variable once",
                               v->line, k->name, shown);
        }
    }
    if (k->type == JP_ARGV) {
        memset(s->command, 0, sizeof(s->command));
        memcpy(s->command, words, used);
        s->command_argc = (uint32_t)n;
    } else {
        memset(s->env, 0, sizeof(s->env));
        memcpy(s->env, words, used);
        s->env_count = (uint32_t)n;
    }
    return FLPS_OK;
}

/* A single value for command or env: split like a shell would. */
static flps_err jp_set_words_text(jp *p, const jp_val *v, jobspec *s)
{
    char buf[JOBSPEC_WORDS_BYTES];
    size_t n = 0, used = 0;
    const char *why = jp_shell_split(v->s, buf, sizeof(buf), &n, &used);

    if (why != NULL)
        return jp_bad(p, v, why);
    return jp_store_words(p, v, buf, n, used, s);
}

flps_err jobspec_key_set_words(jobspec_key key, const char *words, size_t n,
                               unsigned long line, jobspec *spec, char *errbuf,
                               size_t errlen)
{
    jp p = {errbuf, errlen};
    jp_val v = {"", 0, line, key};
    size_t used = 0;

    if (!jobspec_key_takes_words(key) || (words == NULL && n > 0) ||
        spec == NULL)
        return FLPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        used += strlen(words + used) + 1;
    return jp_store_words(&p, &v, words, n, used, spec);
}

static flps_err jp_set(jp *p, const jp_val *v, jobspec *s)
{
    const jp_keydef *k = &jp_keys[v->key];
    uint64_t u = 0;
    double d = 0;
    jp_num st;

    switch (k->type) {
    case JP_TEXT:
    case JP_PATH:
        return jp_set_text(p, v, s);
    case JP_WORD:
        return jp_set_word(p, v, s);
    case JP_WORD_PARAM:
        return jp_set_word_param(p, v, s);
    case JP_ARGV:
    case JP_ENV:
    case JP_MAP:
    case JP_LIST:
        return jp_set_words_text(p, v, s);
    case JP_UINT:
        if (k->auto_ok && v->n == 4 && memcmp(v->s, "auto", 4) == 0) {
            jp_store_uint(s, k->offset, k->size, 0);
            /* servers (the one auto_ok key): told apart from a plain 0,
             * which mode saps takes. */
            s->servers_auto = 1;
            return FLPS_OK;
        }
        st = jp_parse_u64(v->s, &u);
        if (st == JP_NUM_OK && (u < k->umin || u > k->umax) &&
            !(u == 0 && k->zero_later))
            st = JP_NUM_RANGE;
        if (st != JP_NUM_OK)
            return jp_bad(p, v, jp_num_problem(st, true));
        jp_store_uint(s, k->offset, k->size, u);
        return FLPS_OK;
    case JP_REAL:
        st = jp_parse_real(v->s, &d);
        if (st == JP_NUM_OK && !jp_in_range(d, &k->range))
            st = JP_NUM_RANGE;
        if (st != JP_NUM_OK)
            return jp_bad(p, v, jp_num_problem(st, false));
        jp_store_real(s, k->offset, d);
        return FLPS_OK;
    case JP_SIZE:
    case JP_RATE:
        if (k->type == JP_RATE && strcmp(v->s, "auto") == 0) {
            jp_store_real(s, k->offset, -1.0);
            return FLPS_OK;
        }
        st = jp_parse_size(v->s, &u);
        if (st == JP_NUM_SYNTAX)
            return jp_bad(p, v, "is not a size");
        if (st != JP_NUM_OK)
            return jp_bad(p, v, jp_num_problem(st, true));
        if (k->type == JP_RATE)
            jp_store_real(s, k->offset, (double)u);
        else
            jp_store_uint(s, k->offset, k->size, u);
        return FLPS_OK;
    }
    return JP_FAIL(p, "line %lu: internal error: no setter for key %s", v->line,
                   k->name);
}

/* The defaults are the rows' default texts, read by the same setters as
 * the file, so what the docs say is what a job gets. A default the setter
 * refuses is a bug in the table; its message says which. */
static flps_err jp_defaults(jp *p, jobspec *s)
{
    memset(s, 0, sizeof(*s)); /* model is required; 0 until the file says */
    for (int i = 0; i < JOBSPEC_KEY_COUNT; i++) {
        const jp_keydef *k = &jp_keys[i];
        jp_val v = {k->def, 0, 0, (jobspec_key)i};
        flps_err rc;

        if (k->def == NULL || jobspec_key_takes_words((jobspec_key)i))
            continue;
        v.n = strlen(k->def);
        rc = jp_set(p, &v, s);
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

const char *jobspec_key_name(jobspec_key key)
{
    return jp_keys[key].name;
}

flps_err jobspec_key_find(const char *s, size_t n, jobspec_key *out)
{
    for (int i = 0; i < JOBSPEC_KEY_COUNT; i++) {
        if (strlen(jp_keys[i].name) == n &&
            memcmp(s, jp_keys[i].name, n) == 0) {
            *out = (jobspec_key)i;
            return FLPS_OK;
        }
    }
    return FLPS_EINVAL;
}

const char *jobspec_key_suggest(const char *word)
{
    const char *names[JOBSPEC_KEY_COUNT];

    for (int i = 0; i < JOBSPEC_KEY_COUNT; i++)
        names[i] = jp_keys[i].name;
    return jp_closest(word, names, JOBSPEC_KEY_COUNT);
}

flps_err jobspec_key_set(jobspec_key key, const char *s, size_t n,
                         unsigned long line, jobspec *spec, char *errbuf,
                         size_t errlen)
{
    jp p = {errbuf, errlen};
    jp_val v = {s, n, line, key};

    /* A "\0" escape in a quoted string would silently cut the value. */
    if (strlen(s) != n)
        return jp_bad(&p, &v, "contains a NUL character");
    return jp_set(&p, &v, spec);
}

flps_err jobspec_key_defaults(jobspec *spec, char *errbuf, size_t errlen)
{
    jp p = {errbuf, errlen};

    return jp_defaults(&p, spec);
}

/* ---- Names ----------------------------------------------------------- */

/* The word of an enum value of a word key; "unknown" outside the enum. */
static const char *jp_word_name(jobspec_key key, unsigned value)
{
    const jp_keydef *k = &jp_keys[key];

    return value < k->nwords ? k->words[value] : "unknown";
}

void jobspec_comp_format(const jobspec *spec, char *buf, size_t len)
{
    char num[32];

    if (buf == NULL || len == 0)
        return;
    if (spec == NULL) {
        buf[0] = '\0';
        return;
    }
    /* The shortest text that reads back to the same density: what a
     * person would write, unlike codec_spec_format's %.17g. */
    switch (codec_kind_param(spec->compression)) {
    case CODEC_PARAM_DENSITY:
        flps_format_double(num, sizeof(num), spec->density);
        snprintf(buf, len, "%s:%s", codec_kind_name(spec->compression), num);
        break;
    case CODEC_PARAM_BITS:
        snprintf(buf, len, "%s:%u", codec_kind_name(spec->compression),
                 (unsigned)spec->qsgd_bits);
        break;
    case CODEC_PARAM_NONE:
        snprintf(buf, len, "%s", codec_kind_name(spec->compression));
        break;
    }
}

/* jobspec.given has a bit per key. */
_Static_assert(JOBSPEC_KEY_COUNT <= 64 * JOBSPEC_GIVEN_WORDS,
               "jobspec.given has a bit per key: raise JOBSPEC_GIVEN_WORDS");

/* Whether spec gives the k-th key. */
static int jp_given_bit(const jobspec *spec, int k)
{
    return (spec->given[k / 64] >> (k % 64) & 1u) != 0;
}

void jobspec_mode_format(const jobspec *spec, char *buf, size_t len)
{
    if (buf == NULL || len == 0)
        return;
    if (spec == NULL)
        buf[0] = '\0';
    else if (spec->mode == JOBSPEC_MODE_SSP)
        snprintf(buf, len, "%s:%u", jobspec_mode_name(spec->mode),
                 (unsigned)spec->staleness);
    else
        snprintf(buf, len, "%s", jobspec_mode_name(spec->mode));
}

void jobspec_partition_format(const jobspec *spec, char *buf, size_t len)
{
    char num[32];

    if (buf == NULL || len == 0)
        return;
    if (spec == NULL) {
        buf[0] = '\0';
    } else if (spec->partition == JOBSPEC_PARTITION_DIRICHLET) {
        flps_format_double(num, sizeof(num), spec->dirichlet_alpha);
        snprintf(buf, len, "dirichlet:%s", num);
    } else if (spec->partition == JOBSPEC_PARTITION_SHARDS) {
        snprintf(buf, len, "shards:%u", (unsigned)spec->partition_shards);
    } else {
        snprintf(buf, len, "%s", jobspec_partition_name(spec->partition));
    }
}

void jobspec_server_opt_format(const jobspec *spec, char *buf, size_t len)
{
    char num[32];

    if (buf == NULL || len == 0)
        return;
    if (spec == NULL) {
        buf[0] = '\0';
    } else if (spec->server_optimizer == JOBSPEC_SERVER_OPT_MOMENTUM) {
        flps_format_double(num, sizeof(num), spec->server_momentum);
        snprintf(buf, len, "momentum:%s", num);
    } else {
        snprintf(buf, len, "%s",
                 jp_word_name(JOBSPEC_KEY_SERVER_OPTIMIZER,
                              (unsigned)spec->server_optimizer));
    }
}

int jobspec_is_given(const jobspec *spec, const char *key)
{
    jobspec_key k;

    return spec != NULL && key != NULL &&
           jobspec_key_find(key, strlen(key), &k) == FLPS_OK &&
           jp_given_bit(spec, (int)k);
}

flps_err jobspec_give(jobspec *spec, const char *key)
{
    jobspec_key k;

    if (spec == NULL || key == NULL ||
        jobspec_key_find(key, strlen(key), &k) != FLPS_OK)
        return FLPS_EINVAL;
    spec->given[k / 64] |= (uint64_t)1 << (k % 64);
    return FLPS_OK;
}

int jobspec_ran_differs(const jobspec *spec, const char *key, const char *ran,
                        char *job, size_t len)
{
    char own[64];
    codec_spec x, y;
    int is_comp = key != NULL && strcmp(key, "compression") == 0;
    int same;

    if (job == NULL || len == 0) {
        job = own;
        len = sizeof(own);
    }
    job[0] = '\0';
    if (spec == NULL || (!is_comp && (key == NULL || strcmp(key, "mode"))))
        return 0;
    if (is_comp)
        jobspec_comp_format(spec, job, len);
    else
        jobspec_mode_format(spec, job, len);
    if (ran == NULL || ran[0] == '\0')
        return 0;
    if (strcmp(ran, "mixed") == 0)
        return 1;
    if (is_comp && codec_setting_parse(ran, &x) == FLPS_OK &&
        codec_setting_parse(job, &y) == FLPS_OK)
        same = x.kind == y.kind && x.density == y.density && x.bits == y.bits;
    else
        same = strcmp(ran, job) == 0;
    return jobspec_is_given(spec, key) && !same;
}

void jobspec_given_format(const jobspec *spec, char *buf, size_t len)
{
    size_t at = 0;

    if (buf == NULL || len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; spec != NULL && i < JOBSPEC_KEY_COUNT; i++) {
        int n;

        if (!jp_given_bit(spec, i))
            continue;
        n = snprintf(buf + at, len - at, "%s%s", at ? "," : "",
                     jp_keys[i].name);
        if (n < 0 || (size_t)n >= len - at) {
            buf[at] = '\0'; /* a key is listed whole or not at all */
            return;
        }
        at += (size_t)n;
    }
}

const char *jobspec_model_name(jobspec_model m)
{
    /* Not a word of the file: a command: job that gives no model. */
    if (m == JOBSPEC_MODEL_NONE)
        return "none";
    return jp_word_name(JOBSPEC_KEY_MODEL, (unsigned)m);
}

const char *jobspec_mode_name(jobspec_mode m)
{
    return jp_word_name(JOBSPEC_KEY_MODE, (unsigned)m);
}

const char *jobspec_dataset_name(jobspec_dataset d)
{
    return jp_word_name(JOBSPEC_KEY_DATASET, (unsigned)d);
}

const char *jobspec_partition_name(jobspec_partition p)
{
    return jp_word_name(JOBSPEC_KEY_PARTITION, (unsigned)p);
}

const char *jobspec_transport_name(jobspec_transport t)
{
    return jp_word_name(JOBSPEC_KEY_TRANSPORT, (unsigned)t);
}

const char *jobspec_backend_name(jobspec_backend b)
{
    return jp_word_name(JOBSPEC_KEY_BACKEND, (unsigned)b);
}

const char *jobspec_lr_schedule_name(jobspec_lr_schedule l)
{
    return jp_word_name(JOBSPEC_KEY_LR_SCHEDULE, (unsigned)l);
}

const char *jobspec_peer_selection_name(jobspec_peer_selection p)
{
    return jp_word_name(JOBSPEC_KEY_PEER_SELECTION, (unsigned)p);
}

/* ---- Documentation --------------------------------------------------- */

static const char *jp_type_text(const jp_keydef *k)
{
    const char *param = NULL;

    switch (k->type) {
    case JP_TEXT:
        return "text";
    case JP_PATH:
        return "path";
    case JP_WORD:
        return "word";
    case JP_UINT:
        return "integer";
    case JP_REAL:
        return "number";
    case JP_SIZE:
        return "size";
    case JP_RATE:
        return "size or auto";
    case JP_ARGV:
        return "list or text";
    case JP_ENV:
    case JP_MAP:
        return "mapping or text";
    case JP_LIST:
        return "list or text";
    case JP_WORD_PARAM:
        break;
    }
    /* word[:integer], word[:number], or word[:param] when words differ. */
    for (size_t i = 0; i < k->nwords; i++) {
        const jp_param *pp = k->params[i];
        const char *t;

        if (pp == NULL)
            continue;
        t = pp->type == JP_UINT ? "word[:integer]" : "word[:number]";
        if (param != NULL && strcmp(param, t) != 0)
            return "word[:param]";
        param = t;
    }
    return param != NULL ? param : "word";
}

/* Markdown text of a cell: '|' would end the cell early. */
static void jp_doc_cell(flps_strbuf *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '|')
            flps_strbuf_puts(out, "\\|");
        else
            flps_strbuf_append(out, s, 1);
    }
}

flps_err jobspec_doc_table(flps_strbuf *out)
{
    if (out == NULL)
        return FLPS_EINVAL;
    flps_strbuf_puts(out, "| key | type | default | accepted |\n"
                          "|---|---|---|---|\n");
    for (int i = 0; i < JOBSPEC_KEY_COUNT; i++) {
        const jp_keydef *k = &jp_keys[i];
        char ex[JOBSPEC_EXPECT_MAX];
        bool number = k->type == JP_UINT || k->type == JP_REAL;

        flps_strbuf_printf(out, "| `%s` | %s | ", k->name, jp_type_text(k));
        /* An empty default (no image, no queue) is an empty cell. */
        if (k->def == NULL)
            flps_strbuf_puts(out, "required");
        else if (k->def[0] != '\0')
            flps_strbuf_printf(out, number ? "%s" : "`%s`", k->def);
        flps_strbuf_puts(out, " | ");
        jp_doc_cell(out, jobspec_key_expect((jobspec_key)i, ex));
        flps_strbuf_puts(out, " |\n");
    }
    return flps_strbuf_error(out);
}
