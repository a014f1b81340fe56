/* Benchmark of the data path: push + update round trips between worker
 * processes (libflps) and one real flps shard on loopback, against the raw
 * ZeroMQ round trip of the same bytes measured in the same run; the
 * worker's push alone against a memcpy of the layer; and the peak memory
 * of worker and shard as copies of the dense model. Prints a line per
 * case and, as its last line, one JSON object (docs/benchmarks-ps.md).
 *
 * Usage: bench_ps [--quick] [--cases A,B,..] [--workers 1,2,4] [--rounds R]
 *                 [--momentum M] [--timeout S] [--flps PATH] [--keep-logs]
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_net.h"
#include "bench/bench_stats.h"
#include "bench/bench_util.h"
#include "common/numparse.h"
#include "flps.h"

#define RAW_CHUNK ((size_t)256 * 1024)
#define MAX_WORKERS 16
#define MAX_ITERS 64
#define TOPK_SPEC "topk:0.004"
#define TOPK_DENSITY 0.004

typedef enum {
    CASE_DENSE, /* compression "dense": f32 values, dense aggregation */
    CASE_TOPK,  /* topk:0.004 over one layer: 0.4% of it as pairs */
    CASE_PAIRS, /* "auto" with the layer set to "dense": every element is
                   an index/value pair */
} case_kind;

typedef struct bcase {
    const char *name; /* the JSON key prefix */
    case_kind kind;
    size_t numel; /* full size; --quick divides by 10 */
    int onepart;  /* part_size = numel: the whole tensor in one part */
    int iters;    /* measured iterations per batch (full size) */
} bcase;

static const bcase CASES[] = {
    {"dense_4MB", CASE_DENSE, 1000000, 0, 20},
    {"dense_4MB_onepart", CASE_DENSE, 1000000, 1, 20},
    {"dense_40MB", CASE_DENSE, 10000000, 0, 5},
    {"dense_40MB_onepart", CASE_DENSE, 10000000, 1, 5},
    {"dense_100MB", CASE_DENSE, 25000000, 0, 3},
    {"dense_100MB_onepart", CASE_DENSE, 25000000, 1, 3},
    {"sparse_100k", CASE_TOPK, 25000000, 0, 5},
    {"sparse_10M", CASE_PAIRS, 10000000, 0, 3},
};
#define NCASES (sizeof(CASES) / sizeof(CASES[0]))

typedef struct opts {
    int quick;
    int selected[NCASES];
    int workers[MAX_WORKERS];
    int nworkers;
    int rounds;
    double momentum;
    double timeout_s;
    int keep_logs;
    char flps[PATH_MAX];
    char logdir[64];
} opts;

/* ---- the worker process ---- */

enum { WCMD_RUN = 1, WCMD_MEMCPY = 2, WCMD_QUIT = 3 };

typedef struct wcmd {
    int op;
    int n;
} wcmd;

/* A worker's answer to a command (and, with n = 0, its "ready"): then
 * RUN: n x {t_start, t_pushed, t_updated}; MEMCPY: n x seconds. */
typedef struct wres {
    int status; /* 0 ok, else err says why */
    int n;
    uint64_t elements, bytes_sent, bytes_recv, pushes, resends; /* per batch */
    uint64_t peak_rss; /* VmHWM over the batch (reset at its start) */
    uint64_t minflt;   /* minor page faults during the batch */
    int peak_reset_ok;
    char err[384];
} wres;

typedef struct wargs {
    const bcase *c;
    size_t numel;
    uint32_t rank, workers;
    const char *endpoint;
    const char *job;
    double momentum;
    int timeout_ms;
    int cmd_fd, res_fd;
} wargs;

static void worker_reply_error(int fd, const char *fmt, const char *a,
                               const char *b)
{
    wres r;

    memset(&r, 0, sizeof(r));
    r.status = 1;
    snprintf(r.err, sizeof(r.err), fmt, a, b);
    bench_write_full(fd, &r, sizeof(r));
}

/* One training process: its replica and gradient, its client, and
 * commands from the parent until QUIT. Never returns. */
static void worker_main(const wargs *a)
{
    const size_t n = a->numel;
    float *replica = malloc(n * sizeof(float));
    float *grad = malloc(n * sizeof(float));
    double times[3 * (MAX_ITERS + 1)];
    const char *server = a->endpoint;
    flps_tensor t;
    flps_client_config cfg;
    flps_client_stats st0, st1;
    flps_client *c = NULL;
    uint64_t iter;
    flps_err rc;
    wres r;

    if (replica == NULL || grad == NULL) {
        worker_reply_error(a->res_fd, "%s%s", "out of memory", "");
        _exit(1);
    }
    memset(replica, 0, n * sizeof(float));
    /* Gradient-like values, a different draw per rank, small enough that
     * the model stays finite for any number of iterations. */
    bench_fill_gaussian(grad, n, 1000 + a->rank);
    for (size_t i = 0; i < n; i++)
        grad[i] *= 1e-3f;
    t.name = "layer0";
    t.numel = n;
    t.data = replica;
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = a->job;
    cfg.rank = a->rank;
    cfg.workers = a->workers;
    cfg.servers = &server;
    cfg.nservers = 1;
    cfg.tensors = &t;
    cfg.ntensors = 1;
    cfg.part_size = a->c->onepart ? (uint32_t)n : 0;
    cfg.compression = a->c->kind == CASE_DENSE  ? "dense"
                      : a->c->kind == CASE_TOPK ? TOPK_SPEC
                                                : "auto";
    cfg.lr = 0.01;
    cfg.momentum = a->momentum;
    /* A resend would double the bytes of an iteration and spoil the
     * measurement: retry only after the deadline would almost be up. */
    cfg.retry_ms = a->timeout_ms;
    cfg.deadline_ms = a->timeout_ms;
    rc = flps_client_create(&cfg, &c);
    if (rc != FLPS_OK) {
        worker_reply_error(a->res_fd, "flps_client_create: %s%s",
                           flps_strerror(rc),
                           " (see the shard's log in the log directory)");
        _exit(1);
    }
    if (a->c->kind == CASE_PAIRS &&
        (rc = flps_client_set_layer_codec(c, 0, "dense")) != FLPS_OK) {
        worker_reply_error(a->res_fd, "flps_client_set_layer_codec: %s%s",
                           flps_strerror(rc), "");
        _exit(1);
    }
    rc = flps_client_init(c);
    if (rc != FLPS_OK) {
        worker_reply_error(a->res_fd, "flps_client_init: %s: %s",
                           flps_strerror(rc), flps_client_last_error(c));
        _exit(1);
    }
    iter = flps_client_resume_iteration(c);
    memset(&r, 0, sizeof(r));
    r.peak_reset_ok = bench_reset_peak_rss(0) == 0;
    if (bench_write_full(a->res_fd, &r, sizeof(r)) != 0)
        _exit(1);

    for (;;) {
        wcmd cmd;
        const char *why;

        /* The parent bounds its own waits; a parent gone closes the pipe
         * (and PR_SET_PDEATHSIG kills us anyway). */
        if (bench_read_full(a->cmd_fd, &cmd, sizeof(cmd), 1e9, &why) != 0 ||
            cmd.op == WCMD_QUIT || cmd.n < 0 || cmd.n > MAX_ITERS + 1)
            break;
        memset(&r, 0, sizeof(r));
        r.n = cmd.n;
        if (cmd.op == WCMD_RUN) {
            unsigned long long f0 = bench_minor_faults(0);
            r.peak_reset_ok = bench_reset_peak_rss(0) == 0;
            flps_client_get_stats(c, &st0);
            for (int i = 0; i < cmd.n && r.status == 0; i++) {
                times[3 * i] = flps_mono_s();
                rc = flps_client_push(c, 0, grad, iter);
                times[3 * i + 1] = flps_mono_s();
                if (rc == FLPS_OK)
                    rc = flps_client_wait(c, iter);
                times[3 * i + 2] = flps_mono_s();
                iter++;
                if (rc != FLPS_OK) {
                    r.status = 1;
                    snprintf(r.err, sizeof(r.err), "rank %u: %s: %s", a->rank,
                             flps_strerror(rc), flps_client_last_error(c));
                }
            }
            flps_client_get_stats(c, &st1);
            r.elements = st1.elements_sent - st0.elements_sent;
            r.bytes_sent = st1.bytes_sent - st0.bytes_sent;
            r.bytes_recv = st1.bytes_received - st0.bytes_received;
            r.pushes = st1.pushes - st0.pushes;
            r.resends = st1.resends - st0.resends;
            r.peak_rss = bench_peak_rss(0);
            r.minflt = bench_minor_faults(0) - f0;
        } else if (cmd.op == WCMD_MEMCPY) {
            /* The yardstick for the push: one copy of the layer, into a
             * buffer faulted in beforehand, freed after (above the mmap
             * threshold, so it leaves the RSS for the next RUN). */
            float *dst = malloc(n * sizeof(float));
            volatile float sink = 0;
            if (dst == NULL) {
                r.status = 1;
                snprintf(r.err, sizeof(r.err), "out of memory");
            } else {
                memset(dst, 0, n * sizeof(float));
                for (int i = 0; i < cmd.n; i++) {
                    double t0 = flps_mono_s();
                    memcpy(dst, grad, n * sizeof(float));
                    times[i] = flps_mono_s() - t0;
                    sink += dst[(size_t)i % n];
                }
                free(dst);
            }
            (void)sink;
        }
        if (bench_write_full(a->res_fd, &r, sizeof(r)) != 0 ||
            bench_write_full(a->res_fd, times,
                             (size_t)r.n * (cmd.op == WCMD_RUN ? 3 : 1) *
                                 sizeof(double)) != 0 ||
            r.status != 0)
            break;
    }
    flps_client_destroy(c);
    free(replica);
    free(grad);
    _exit(0);
}

/* ---- the parent: one case ---- */

typedef struct worker_proc {
    pid_t pid;
    int cmd_fd, res_fd;
} worker_proc;

typedef struct case_result {
    int ok;
    double iter_s;                        /* median push + update span */
    double push_s;                        /* median push alone (rank 0) */
    double raw_one_s, raw_chunk_s, raw_s; /* one message, 256 KiB, best */
    double memcpy_s;                      /* W = 1 only */
    size_t raw_bytes;
    double model_bytes;                 /* the dense model: 4 * numel */
    double worker_peak, shard_peak;     /* bytes */
    double worker_faults, shard_faults; /* minor faults per iteration */
    /* CPU seconds per iteration (user + system, every thread): flps's
     * shard and workers together, and the raw baseline's mode that was
     * faster (both its ends are threads of this process). */
    double cpu_s, raw_cpu_s;
    int peak_reset_ok;
    /* Per iteration of rank 0. */
    double elements, bytes_sent, bytes_recv, pushes;
    uint64_t resends;
} case_result;

static size_t case_numel(const opts *o, const bcase *c)
{
    return o->quick ? c->numel / 10 : c->numel;
}

static int case_iters(const opts *o, const bcase *c)
{
    int n = o->quick ? (c->iters < 4 ? c->iters : 4) : c->iters;
    return n < MAX_ITERS ? n : MAX_ITERS;
}

static size_t case_pairs(const bcase *c, size_t numel)
{
    if (c->kind == CASE_TOPK) {
        size_t k = (size_t)floor(TOPK_DENSITY * (double)numel);
        return k > 0 ? k : 1;
    }
    return numel;
}

/* The bytes one worker pushes (and gets back) per iteration, from the
 * case alone: dense f32 values, or (u32 index, f32 value) pairs. */
static size_t case_raw_bytes(const bcase *c, size_t numel)
{
    return c->kind == CASE_DENSE ? numel * 4 : case_pairs(c, numel) * 8;
}

static int workers_send(worker_proc *w, int W, int op, int n)
{
    wcmd cmd = {op, n};

    for (int r = 0; r < W; r++)
        if (bench_write_full(w[r].cmd_fd, &cmd, sizeof(cmd)) != 0) {
            fprintf(stderr, "bench_ps: worker %d is gone\n", r);
            return -1;
        }
    return 0;
}

/* Read every worker's answer (header and times) within timeout_s. */
static int workers_collect(const opts *o, worker_proc *w, int W, wres *res,
                           double times[][3 * (MAX_ITERS + 1)], int per)
{
    for (int r = 0; r < W; r++) {
        const char *why = "?";
        if (bench_read_full(w[r].res_fd, &res[r], sizeof(res[r]), o->timeout_s,
                            &why) != 0) {
            fprintf(stderr,
                    "bench_ps: worker %d did not answer (%s within %.0f s); "
                    "logs in %s\n",
                    r, why, o->timeout_s, o->logdir);
            return -1;
        }
        if (res[r].status != 0) {
            fprintf(stderr, "bench_ps: worker %d failed: %s\n", r, res[r].err);
            return -1;
        }
        if (res[r].n > 0 &&
            bench_read_full(w[r].res_fd, times[r],
                            (size_t)res[r].n * per * sizeof(double),
                            o->timeout_s, &why) != 0) {
            fprintf(stderr, "bench_ps: worker %d: truncated answer (%s)\n", r,
                    why);
            return -1;
        }
    }
    return 0;
}

/* A worker is a fresh process image (fork, then exec of this executable
 * with --worker-internal): a forked copy of this process would carry the
 * parent's resident heap (the raw baseline's buffers) in its RSS. */
static pid_t start_worker(const wargs *a, worker_proc *wp)
{
    int cmd[2], res[2];
    pid_t pid;

    if (pipe(cmd) != 0)
        return -1;
    if (pipe(res) != 0) {
        close(cmd[0]);
        close(cmd[1]);
        return -1;
    }
    /* Our ends stay out of every later child. */
    fcntl(cmd[1], F_SETFD, FD_CLOEXEC);
    fcntl(res[0], F_SETFD, FD_CLOEXEC);
    pid = fork();
    if (pid < 0) {
        close(cmd[0]);
        close(cmd[1]);
        close(res[0]);
        close(res[1]);
        return -1;
    }
    if (pid == 0) {
        char ci[16], nb[32], rk[16], wk[16], mo[32], to[16], cf[16], rf[16];
        char *argv[14] = {"bench_ps",
                          "--worker-internal",
                          ci,
                          nb,
                          rk,
                          wk,
                          (char *)a->endpoint,
                          (char *)a->job,
                          mo,
                          to,
                          cf,
                          rf,
                          NULL};
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        snprintf(ci, sizeof(ci), "%d", (int)(a->c - CASES));
        snprintf(nb, sizeof(nb), "%zu", a->numel);
        snprintf(rk, sizeof(rk), "%u", a->rank);
        snprintf(wk, sizeof(wk), "%u", a->workers);
        snprintf(mo, sizeof(mo), "%.17g", a->momentum);
        snprintf(to, sizeof(to), "%d", a->timeout_ms);
        snprintf(cf, sizeof(cf), "%d", cmd[0]);
        snprintf(rf, sizeof(rf), "%d", res[1]);
        execv("/proc/self/exe", argv);
        worker_reply_error(res[1], "cannot run /proc/self/exe: %s%s",
                           strerror(errno), "");
        _exit(127);
    }
    close(cmd[0]);
    close(res[1]);
    bench_child_add(pid);
    wp->pid = pid;
    wp->cmd_fd = cmd[1];
    wp->res_fd = res[0];
    return pid;
}

/* The worker side of --worker-internal CASE NUMEL RANK WORKERS ENDPOINT
 * JOB MOMENTUM TIMEOUT_MS CMD_FD RES_FD (only start_worker calls it). */
static int worker_entry(int argc, char **argv)
{
    wargs a;
    int ci;

    if (argc != 12)
        return 2;
    memset(&a, 0, sizeof(a));
    ci = atoi(argv[2]);
    if (ci < 0 || (size_t)ci >= NCASES)
        return 2;
    a.c = &CASES[ci];
    a.numel = (size_t)strtoull(argv[3], NULL, 10);
    a.rank = (uint32_t)strtoul(argv[4], NULL, 10);
    a.workers = (uint32_t)strtoul(argv[5], NULL, 10);
    a.endpoint = argv[6];
    a.job = argv[7];
    a.momentum = strtod(argv[8], NULL);
    a.timeout_ms = atoi(argv[9]);
    a.cmd_fd = atoi(argv[10]);
    a.res_fd = atoi(argv[11]);
    if (a.numel == 0 || a.workers == 0 || a.rank >= a.workers)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    worker_main(&a);
    return 0;
}

/* Run the raw baseline `iters + 1` times (the first is dropped) into
 * acc; returns 0 or -1 (message printed). */
static int raw_batch(const opts *o, size_t bytes, size_t chunk, int W,
                     int iters, double *acc, int *nacc, double *cpu, int *ncpu)
{
    double span[MAX_ITERS + 1], c;
    char err[300];

    if (bench_raw_run(bytes, chunk, W, iters + 1, (int)(o->timeout_s * 1000),
                      span, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench_ps: %s\n", err);
        return -1;
    }
    for (int i = 1; i <= iters; i++)
        acc[(*nacc)++] = span[i];
    if (!isnan(c))
        cpu[(*ncpu)++] = c;
    return 0;
}

/* CPU seconds the shard and the W workers used so far. */
static double flps_cpu_now(pid_t shard, const worker_proc *w, int W)
{
    double t = bench_cpu_seconds(shard);

    for (int r = 0; r < W; r++)
        t += bench_cpu_seconds(w[r].pid);
    return t;
}

static int run_case(const opts *o, const bcase *c, int W, case_result *out)
{
    static double times[MAX_WORKERS][3 * (MAX_ITERS + 1)];
    const size_t numel = case_numel(o, c);
    const int iters = case_iters(o, c);
    const size_t nmax = (size_t)o->rounds * MAX_ITERS;
    double *span = calloc(nmax, sizeof(double));
    double *push = calloc(nmax, sizeof(double));
    double *raw1 = calloc(nmax, sizeof(double));
    double *rawc = calloc(nmax, sizeof(double));
    double *mc = calloc(nmax, sizeof(double));
    /* CPU per iteration of each batch: flps, raw one message, raw pieces. */
    double cpu[3][64];
    int ncpu[3] = {0, 0, 0};
    int nspan = 0, nraw1 = 0, nrawc = 0, nmc = 0, nw = 0, rc = -1;
    char job[64], log[128], endpoint[256] = "", err[512], shards[] = "1",
                            shard[] = "0";
    char *argv[8];
    worker_proc w[MAX_WORKERS];
    wres res[MAX_WORKERS];
    pid_t shard_pid;
    unsigned long long shard_faults0 = 0;
    double worker_faults = 0;
    wargs a;

    memset(out, 0, sizeof(*out));
    out->raw_bytes = case_raw_bytes(c, numel);
    out->model_bytes = (double)numel * 4;
    if (span == NULL || push == NULL || raw1 == NULL || rawc == NULL ||
        mc == NULL) {
        fprintf(stderr, "bench_ps: out of memory\n");
        goto out_free;
    }
    snprintf(job, sizeof(job), "bench-%s-%dw", c->name, W);
    snprintf(log, sizeof(log), "%s/%s-%dw.flps.log", o->logdir, c->name, W);
    argv[0] = (char *)o->flps;
    argv[1] = "--job";
    argv[2] = job;
    argv[3] = "--shard";
    argv[4] = shard;
    argv[5] = "--shards";
    argv[6] = shards;
    argv[7] = NULL;
    shard_pid = bench_spawn_ready(o->flps, argv, log, "listening on ", endpoint,
                                  sizeof(endpoint), 20, err, sizeof(err));
    if (shard_pid < 0) {
        fprintf(stderr, "bench_ps: the flps shard did not start: %s\n", err);
        goto out_free;
    }

    memset(&a, 0, sizeof(a));
    a.c = c;
    a.numel = numel;
    a.workers = (uint32_t)W;
    a.endpoint = endpoint;
    a.job = job;
    a.momentum = o->momentum;
    a.timeout_ms = (int)(o->timeout_s * 1000);
    for (nw = 0; nw < W; nw++) {
        a.rank = (uint32_t)nw;
        if (start_worker(&a, &w[nw]) < 0) {
            fprintf(stderr, "bench_ps: cannot start worker %d: %s\n", nw,
                    strerror(errno));
            goto out_stop;
        }
    }
    /* Ready: registered and initialised (rank 0's values pulled by all). */
    if (workers_collect(o, w, W, res, times, 3) != 0)
        goto out_stop;
    out->peak_reset_ok = res[0].peak_reset_ok;
    /* Warm-up: connections, caches, the first allocations. */
    if (workers_send(w, W, WCMD_RUN, 2) != 0 ||
        workers_collect(o, w, W, res, times, 3) != 0)
        goto out_stop;
    if (bench_reset_peak_rss(shard_pid) != 0)
        out->peak_reset_ok = 0;
    shard_faults0 = bench_minor_faults(shard_pid);

    /* Rounds of flps, raw one message, raw 256 KiB pieces and memcpy,
     * interleaved so that noise from the rest of the machine hits them
     * alike. The first iteration of every batch is dropped (its workers
     * start it at slightly different times). */
    for (int round = 0; round < o->rounds; round++) {
        double cpu0 = flps_cpu_now(shard_pid, w, W);
        if (workers_send(w, W, WCMD_RUN, iters + 1) != 0 ||
            workers_collect(o, w, W, res, times, 3) != 0)
            goto out_stop;
        if (round < 64)
            cpu[0][ncpu[0]++] =
                (flps_cpu_now(shard_pid, w, W) - cpu0) / (iters + 1);
        for (int i = 1; i <= iters; i++) {
            double t0 = times[0][3 * i], t2 = times[0][3 * i + 2];
            for (int r = 1; r < W; r++) {
                if (times[r][3 * i] < t0)
                    t0 = times[r][3 * i];
                if (times[r][3 * i + 2] > t2)
                    t2 = times[r][3 * i + 2];
            }
            span[nspan] = t2 - t0;
            push[nspan++] = times[0][3 * i + 1] - times[0][3 * i];
        }
        for (int r = 0; r < W; r++) {
            if ((double)res[r].peak_rss > out->worker_peak)
                out->worker_peak = (double)res[r].peak_rss;
            out->resends += res[r].resends;
        }
        worker_faults += (double)res[0].minflt;
        out->elements = (double)res[0].elements / (iters + 1);
        out->bytes_sent = (double)res[0].bytes_sent / (iters + 1);
        out->bytes_recv = (double)res[0].bytes_recv / (iters + 1);
        out->pushes = (double)res[0].pushes / (iters + 1);

        if (raw_batch(o, out->raw_bytes, out->raw_bytes, W, iters, raw1, &nraw1,
                      cpu[1], &ncpu[1]) != 0 ||
            raw_batch(o, out->raw_bytes, RAW_CHUNK, W, iters, rawc, &nrawc,
                      cpu[2], &ncpu[2]) != 0)
            goto out_stop;
        if (W == 1) {
            if (workers_send(w, 1, WCMD_MEMCPY, iters) != 0 ||
                workers_collect(o, w, 1, res, times, 1) != 0)
                goto out_stop;
            for (int i = 0; i < iters; i++)
                mc[nmc++] = times[0][i];
        }
    }
    out->shard_peak = (double)bench_peak_rss(shard_pid);
    /* The shard is idle during the raw and memcpy batches: its faults
     * are those of the flps iterations. */
    out->shard_faults =
        (double)(bench_minor_faults(shard_pid) - shard_faults0) /
        (o->rounds * (iters + 1));
    out->worker_faults = worker_faults / (o->rounds * (iters + 1));
    out->iter_s = bench_median(span, (size_t)nspan);
    out->push_s = bench_median(push, (size_t)nspan);
    out->raw_one_s = bench_median(raw1, (size_t)nraw1);
    out->raw_chunk_s = bench_median(rawc, (size_t)nrawc);
    out->raw_s = fmin(out->raw_one_s, out->raw_chunk_s);
    out->cpu_s = bench_median(cpu[0], (size_t)ncpu[0]);
    out->raw_cpu_s =
        bench_median(cpu[out->raw_one_s <= out->raw_chunk_s ? 1 : 2],
                     (size_t)ncpu[out->raw_one_s <= out->raw_chunk_s ? 1 : 2]);
    out->memcpy_s = nmc > 0 ? bench_median(mc, (size_t)nmc) : NAN;
    out->ok = 1;
    rc = 0;

out_stop:
    if (rc == 0)
        workers_send(w, nw, WCMD_QUIT, 0);
    for (int r = 0; r < nw; r++) {
        /* A worker that quits destroys its client (closing sockets);
         * one that is stuck is killed after a while. */
        bench_child_stop(w[r].pid, rc == 0 ? 0 : SIGKILL, 30);
        close(w[r].cmd_fd);
        close(w[r].res_fd);
    }
    bench_child_stop(shard_pid, SIGTERM, 10);
out_free:
    free(span);
    free(push);
    free(raw1);
    free(rawc);
    free(mc);
    return rc;
}

/* ---- reporting ---- */

static long ncores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

static void case_key(char *buf, size_t len, const bcase *c, int W,
                     const char *what)
{
    if (W == 1)
        snprintf(buf, len, "%s_%s", c->name, what);
    else
        snprintf(buf, len, "%s_%dw_%s", c->name, W, what);
}

static void report(const opts *o, const bcase *c, int W, const case_result *r,
                   bench_json *j)
{
    const size_t numel = case_numel(o, c);
    const double model = (double)numel * 4;
    char key[96];

    printf("%-20s %dw: flps %8.2f ms (push %7.2f ms) | raw %7.2f ms "
           "(one msg %7.2f, 256 KiB in flight %7.2f) | flps/raw %5.2fx\n",
           c->name, W, r->iter_s * 1e3, r->push_s * 1e3, r->raw_s * 1e3,
           r->raw_one_s * 1e3, r->raw_chunk_s * 1e3, r->iter_s / r->raw_s);
    printf("%-20s     %.3g MB each way in the raw trip; per iteration rank 0 "
           "pushed %.0f %s in %.0f messages, %.2f MB on the wire, received "
           "%.2f MB%s\n",
           "", (double)r->raw_bytes / 1e6, r->elements,
           c->kind == CASE_DENSE ? "values" : "pairs", r->pushes,
           r->bytes_sent / 1e6, r->bytes_recv / 1e6,
           r->resends ? " (RESENDS: timing disturbed)" : "");
    printf("%-20s     minor page faults per iteration: worker (rank 0) %.0f, "
           "shard %.0f\n",
           "", r->worker_faults, r->shard_faults);
    /* On a machine of N cores an iteration that needs C CPU seconds takes
     * at least C / N: what flps's own work costs against the bar. */
    printf("%-20s     CPU per iteration (user + system, all threads): flps "
           "%.2f ms (%.2f cores busy), raw %.2f ms (%.2f cores busy); on %ld "
           "cores flps's CPU alone needs >= %.2f ms = %.2fx raw\n",
           "", r->cpu_s * 1e3, r->cpu_s / r->iter_s, r->raw_cpu_s * 1e3,
           r->raw_cpu_s / r->raw_s, ncores(), r->cpu_s / ncores() * 1e3,
           r->cpu_s / ncores() / r->raw_s);
    if (W == 1)
        /* The memcpy's GB/s shows when other processes took the memory
         * bandwidth (the ratio then flatters the push). */
        printf("%-20s     push %.2f ms = %.2fx a memcpy of the %.3g MB layer "
               "(%.2f ms, %.1f GB/s); peak RSS worker %.0f MB = %.2f model "
               "copies, shard %.0f MB = %.2f copies\n",
               "", r->push_s * 1e3, r->push_s / r->memcpy_s, model / 1e6,
               r->memcpy_s * 1e3, model / r->memcpy_s / 1e9,
               r->worker_peak / 1e6, r->worker_peak / model,
               r->shard_peak / 1e6, r->shard_peak / model);
    fflush(stdout);

    case_key(key, sizeof(key), c, W, "iter_seconds");
    bench_json_num(j, key, r->iter_s);
    case_key(key, sizeof(key), c, W, "raw_seconds");
    bench_json_num(j, key, r->raw_s);
    case_key(key, sizeof(key), c, W, "over_raw");
    bench_json_num(j, key, r->iter_s / r->raw_s);
    case_key(key, sizeof(key), c, W, "push_seconds");
    bench_json_num(j, key, r->push_s);
    if (W == 1) {
        case_key(key, sizeof(key), c, W, "push_over_memcpy");
        bench_json_num(j, key, r->push_s / r->memcpy_s);
    }
    case_key(key, sizeof(key), c, W, "cpu_seconds");
    bench_json_num(j, key, r->cpu_s);
    case_key(key, sizeof(key), c, W, "raw_cpu_seconds");
    bench_json_num(j, key, r->raw_cpu_s);
    case_key(key, sizeof(key), c, W, "cpu_floor_over_raw");
    bench_json_num(j, key, r->cpu_s / ncores() / r->raw_s);
    case_key(key, sizeof(key), c, W, "worker_faults_per_iter");
    bench_json_num(j, key, r->worker_faults);
    case_key(key, sizeof(key), c, W, "shard_faults_per_iter");
    bench_json_num(j, key, r->shard_faults);
    case_key(key, sizeof(key), c, W, "worker_copies");
    bench_json_num(j, key, r->worker_peak / model);
    case_key(key, sizeof(key), c, W, "shard_copies");
    bench_json_num(j, key, r->shard_peak / model);

    /* The headline names of issue 13. */
    if (W == 1 && c->kind == CASE_TOPK) {
        bench_json_num(j, "worker_push_25M_topk_seconds", r->push_s);
        bench_json_num(j, "memcpy_25M_seconds", r->memcpy_s);
        bench_json_num(j, "worker_push_25M_topk_over_memcpy",
                       r->push_s / r->memcpy_s);
    }
    if (W == 1 && strcmp(c->name, "dense_100MB") == 0) {
        bench_json_num(j, "worker_push_dense_seconds", r->push_s);
        bench_json_num(j, "worker_push_dense_over_memcpy",
                       r->push_s / r->memcpy_s);
        bench_json_num(j, "worker_copies_dense", r->worker_peak / model);
        bench_json_num(j, "shard_copies_dense", r->shard_peak / model);
    }
    if (W == 1 && strcmp(c->name, "dense_100MB_onepart") == 0) {
        bench_json_num(j, "worker_copies_dense_onepart",
                       r->worker_peak / model);
        bench_json_num(j, "shard_copies_dense_onepart", r->shard_peak / model);
    }
}

/* Issue 13's targets, for the one-worker cases that ran. */
static void print_target(const case_result *one, const char *name,
                         const char *what, double limit)
{
    for (size_t i = 0; i < NCASES; i++) {
        const case_result *r = &one[i];
        double v;
        if (!r->ok || strcmp(CASES[i].name, name) != 0)
            continue;
        if (strcmp(what, "over_raw") == 0)
            v = r->iter_s / r->raw_s;
        else if (strcmp(what, "push_over_memcpy") == 0)
            v = r->push_s / r->memcpy_s;
        else if (strcmp(what, "worker_copies") == 0)
            v = r->worker_peak / r->model_bytes;
        else
            v = r->shard_peak / r->model_bytes;
        printf("  %-22s %-17s %6.2f  %s %.1f: %s\n", name, what, v,
               limit > 0 ? "<=" : "~", limit > 0 ? limit : -limit,
               limit < 0    ? "(plus what is in flight)"
               : v <= limit ? "ok"
                            : "MISSED");
    }
}

static void print_targets(const case_result *one, int quick)
{
    printf("issue 13 targets (one worker)%s:\n",
           quick ? " -- QUICK sizes, indicative only" : "");
    print_target(one, "dense_4MB", "over_raw", 1.2);
    print_target(one, "dense_4MB_onepart", "over_raw", 1.2);
    print_target(one, "dense_40MB", "over_raw", 1.3);
    print_target(one, "dense_40MB_onepart", "over_raw", 1.3);
    print_target(one, "dense_100MB", "over_raw", 1.3);
    print_target(one, "dense_100MB_onepart", "over_raw", 1.3);
    print_target(one, "sparse_10M", "over_raw", 2);
    print_target(one, "sparse_100k", "push_over_memcpy", 4);
    print_target(one, "dense_100MB", "push_over_memcpy", 2);
    print_target(one, "dense_100MB", "worker_copies", 4);
    print_target(one, "dense_100MB", "shard_copies", -2);
    fflush(stdout);
}

/* Check what went on the wire against what the case means to send. */
static int check_wire(const opts *o, const bcase *c, const case_result *r)
{
    const size_t numel = case_numel(o, c);
    const double want = (double)case_pairs(c, numel);

    if (c->kind == CASE_DENSE)
        return r->elements == (double)numel;
    /* Pairs: the count, and at least 5 bytes of payload for each (its
     * index a varint gap of one byte or more, its f32 value). */
    return r->elements == want && r->bytes_sent >= 5 * want;
}

/* Remove the log directory and the files in it (it holds no others). */
static void remove_logs(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX];

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- command line ---- */

static int parse_list(const char *s, int *out, int max, int *n)
{
    char buf[256], *save = NULL, *tok;

    snprintf(buf, sizeof(buf), "%s", s);
    *n = 0;
    for (tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        int v;
        if (*n == max || flps_parse_int("--workers", tok, 1, MAX_WORKERS, &v,
                                        NULL, 0) != FLPS_OK)
            return -1;
        out[(*n)++] = v;
    }
    return *n > 0 ? 0 : -1;
}

static int select_cases(const char *s, opts *o)
{
    char buf[512], *save = NULL, *tok;

    snprintf(buf, sizeof(buf), "%s", s);
    memset(o->selected, 0, sizeof(o->selected));
    for (tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < NCASES; i++)
            if (strcmp(tok, CASES[i].name) == 0)
                break;
        if (i == NCASES) {
            fprintf(stderr, "bench_ps: unknown case '%s'; the cases:", tok);
            for (i = 0; i < NCASES; i++)
                fprintf(stderr, " %s", CASES[i].name);
            fprintf(stderr, "\n");
            return -1;
        }
        o->selected[i] = 1;
    }
    return 0;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--quick] [--cases A,B,..] [--workers 1,2,4] "
            "[--rounds R]\n"
            "       [--momentum M] [--timeout S] [--flps PATH] [--keep-logs]\n"
            "  --quick      sizes / 10, 1 and 2 workers, 2 rounds (a smoke "
            "run)\n"
            "  --cases      any of:",
            argv0);
    for (size_t i = 0; i < NCASES; i++)
        fprintf(stderr, " %s", CASES[i].name);
    fprintf(stderr, "\n  --flps       the shard binary (default: flps next to "
                    "this executable)\n");
}

static int parse_args(int argc, char **argv, opts *o)
{
    const char *cases = NULL, *workers = NULL;
    char err[200];

    memset(o, 0, sizeof(*o));
    o->rounds = 0;
    o->momentum = 0.9;
    o->timeout_s = 120;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--quick") == 0) {
            o->quick = 1;
        } else if (strcmp(argv[i], "--keep-logs") == 0) {
            o->keep_logs = 1;
        } else if (v != NULL && strcmp(argv[i], "--cases") == 0) {
            cases = v;
            i++;
        } else if (v != NULL && strcmp(argv[i], "--workers") == 0) {
            workers = v;
            i++;
        } else if (v != NULL && strcmp(argv[i], "--flps") == 0) {
            snprintf(o->flps, sizeof(o->flps), "%s", v);
            i++;
        } else if (v != NULL && strcmp(argv[i], "--rounds") == 0) {
            if (flps_parse_int("--rounds", v, 1, 50, &o->rounds, err,
                               sizeof(err)) != FLPS_OK) {
                fprintf(stderr, "bench_ps: %s\n", err);
                return 2;
            }
            i++;
        } else if (v != NULL && strcmp(argv[i], "--momentum") == 0) {
            if (flps_parse_double("--momentum", v, 0, 0.999, &o->momentum, err,
                                  sizeof(err)) != FLPS_OK) {
                fprintf(stderr, "bench_ps: %s\n", err);
                return 2;
            }
            i++;
        } else if (v != NULL && strcmp(argv[i], "--timeout") == 0) {
            if (flps_parse_double("--timeout", v, 1, 3600, &o->timeout_s, err,
                                  sizeof(err)) != FLPS_OK) {
                fprintf(stderr, "bench_ps: %s\n", err);
                return 2;
            }
            i++;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (o->rounds == 0)
        o->rounds = o->quick ? 2 : 3;
    for (size_t i = 0; i < NCASES; i++)
        o->selected[i] = 1;
    if (cases != NULL && select_cases(cases, o) != 0)
        return 2;
    if (workers == NULL)
        workers = o->quick ? "1,2" : "1,2,4";
    if (parse_list(workers, o->workers, MAX_WORKERS, &o->nworkers) != 0) {
        fprintf(stderr, "bench_ps: --workers wants a list of 1..%d\n",
                MAX_WORKERS);
        return 2;
    }
    if (o->flps[0] == '\0') {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        char *slash;
        if (n <= 0) {
            fprintf(stderr, "bench_ps: cannot find my own executable; pass "
                            "--flps PATH\n");
            return 2;
        }
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL)
            *slash = '\0';
        snprintf(o->flps, sizeof(o->flps), "%.*s/flps", PATH_MAX - 8, self);
    }
    if (access(o->flps, X_OK) != 0) {
        fprintf(stderr,
                "bench_ps: no flps shard binary at %s (%s); build it with "
                "`cmake --build build --target flps_shard` or pass --flps "
                "PATH\n",
                o->flps, strerror(errno));
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    bench_json j;
    int rc, failed = 0, wire_ok = 1;
    int reset_ok = 1;
    double load[3] = {0, 0, 0};
    static case_result one[NCASES]; /* the one-worker results */

    if (argc > 1 && strcmp(argv[1], "--worker-internal") == 0)
        return worker_entry(argc, argv);
    rc = parse_args(argc, argv, &o);
    char lit[32];

    if (rc != 0)
        return rc;
    bench_children_setup();
    snprintf(o.logdir, sizeof(o.logdir), "/tmp/flps-bench-ps-XXXXXX");
    if (mkdtemp(o.logdir) == NULL) {
        fprintf(stderr, "bench_ps: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    memset(&j, 0, sizeof(j));
    if (getloadavg(load, 3) < 0)
        load[0] = NAN;
    printf("bench_ps: one flps shard (%s) on loopback, workers as separate "
           "processes; medians of %d rounds; momentum %g%s; load average "
           "%.2f; logs in %s\n",
           o.flps, o.rounds, o.momentum, o.quick ? "; QUICK: sizes / 10" : "",
           load[0], o.logdir);
    fflush(stdout);

    for (size_t i = 0; i < NCASES && !failed; i++) {
        const bcase *c = &CASES[i];
        if (!o.selected[i])
            continue;
        for (int k = 0; k < o.nworkers && !failed; k++) {
            case_result r;
            int W = o.workers[k];
            printf("progress: %s with %d worker%s (%zu floats, %d x %d "
                   "iterations)\n",
                   c->name, W, W > 1 ? "s" : "", case_numel(&o, c), o.rounds,
                   case_iters(&o, c));
            fflush(stdout);
            if (run_case(&o, c, W, &r) != 0) {
                failed = 1;
                break;
            }
            if (!check_wire(&o, c, &r)) {
                printf("WARNING: %s: rank 0 pushed %.0f elements / %.0f "
                       "bytes per iteration, not what the case means to "
                       "send\n",
                       c->name, r.elements, r.bytes_sent);
                wire_ok = 0;
            }
            if (!r.peak_reset_ok)
                reset_ok = 0;
            report(&o, c, W, &r, &j);
            if (W == 1)
                one[i] = r;
        }
    }
    if (failed) {
        fprintf(stderr, "bench_ps: FAILED; the logs are kept in %s\n",
                o.logdir);
        return 1;
    }
    print_targets(one, o.quick);
    if (!reset_ok)
        printf("note: the kernel did not let me reset peak RSS; the peaks "
               "include start-up (init and pull)\n");
    if (getloadavg(load, 3) < 0)
        load[0] = NAN;
    bench_json_lit(&j, "quick", o.quick ? "true" : "false");
    bench_json_lit(&j, "wire_checked", wire_ok ? "true" : "false");
    bench_json_num(&j, "momentum", o.momentum);
    bench_json_num(&j, "load_average", load[0]);
    bench_json_num(&j, "cores", (double)ncores());
    snprintf(lit, sizeof(lit), "%d", o.rounds);
    bench_json_lit(&j, "rounds", lit);
    if (!o.keep_logs)
        remove_logs(o.logdir);
    bench_json_print(&j);
    return wire_ok ? 0 : 1;
}
