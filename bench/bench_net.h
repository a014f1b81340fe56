/* What bench_ps needs around the system under test: child processes that
 * are always cleaned up (the flps shard, the worker processes), bounded
 * reads from pipes, and the raw ZeroMQ baseline (a DEALER/ROUTER round
 * trip of the same bytes, with nothing of flps in it). Header-only. */
#ifndef FLPS_BENCH_NET_H
#define FLPS_BENCH_NET_H

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"

/* ---- child processes ---- */

#define BENCH_MAX_CHILDREN 16

/* The children to kill on any exit: written only by the main thread, read
 * by the exit and signal handlers (which may run at any point), hence
 * volatile sig_atomic_t slots. The one piece of process-wide mutable state
 * here: cleanup must reach it from a signal handler. */
static volatile sig_atomic_t bench_child_pids[BENCH_MAX_CHILDREN];

static void bench_kill_children(void)
{
    for (int i = 0; i < BENCH_MAX_CHILDREN; i++)
        if (bench_child_pids[i] > 0)
            kill((pid_t)bench_child_pids[i], SIGKILL);
}

static void bench_on_signal(int sig)
{
    bench_kill_children();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Kill every registered child at exit and on SIGINT/SIGTERM/SIGHUP. */
static inline void bench_children_setup(void)
{
    atexit(bench_kill_children);
    signal(SIGINT, bench_on_signal);
    signal(SIGTERM, bench_on_signal);
    signal(SIGHUP, bench_on_signal);
    signal(SIGPIPE, SIG_IGN);
}

static inline void bench_child_add(pid_t pid)
{
    for (int i = 0; i < BENCH_MAX_CHILDREN; i++)
        if (bench_child_pids[i] <= 0) {
            bench_child_pids[i] = pid;
            return;
        }
}

/* Reap pid, waiting up to timeout_s, then SIGKILL it (after sig, if sig
 * is not 0, was sent first). Returns its wait status, or -1. */
static inline int bench_child_stop(pid_t pid, int sig, double timeout_s)
{
    int status = -1;
    double end = flps_mono_s() + timeout_s;

    if (pid <= 0)
        return -1;
    if (sig != 0)
        kill(pid, sig);
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            break;
        if (flps_mono_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(2000);
    }
    for (int i = 0; i < BENCH_MAX_CHILDREN; i++)
        if (bench_child_pids[i] == pid)
            bench_child_pids[i] = 0;
    return status;
}

/* Read exactly len bytes from fd within timeout_s. Returns 0, or -1 with
 * a reason in why ("timed out", "closed"). */
static inline int bench_read_full(int fd, void *buf, size_t len,
                                  double timeout_s, const char **why)
{
    char *p = buf;
    double end = flps_mono_s() + timeout_s;

    while (len > 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        double left = end - flps_mono_s();
        ssize_t n;
        int r;

        if (left <= 0) {
            *why = "timed out";
            return -1;
        }
        r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue; /* the deadline check above ends it */
        n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *why = "closed";
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline int bench_write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The last non-empty line of the file at path (for error messages), or
 * "(empty)". */
static inline void bench_last_line(const char *path, char *out, size_t len)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    size_t n = 0;
    char *end, *start;

    snprintf(out, len, "(empty)");
    if (f == NULL)
        return;
    if (fseek(f, -(long)(sizeof(buf) - 1), SEEK_END) != 0)
        rewind(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    end = buf + n;
    while (end > buf && (end[-1] == '\n' || end[-1] == '\r'))
        *--end = '\0';
    if (end == buf)
        return;
    start = strrchr(buf, '\n');
    start = start ? start + 1 : buf;
    n = strlen(start) < len ? strlen(start) : len - 1;
    memcpy(out, start, n);
    out[n] = '\0';
}

/* Start path with argv (argv[0] included, NULL-terminated), stderr to
 * log_path, and wait up to timeout_s for a stdout line starting with
 * prefix; the rest of it goes to ready. The child dies with this process
 * (PR_SET_PDEATHSIG) and is registered for cleanup. Returns its pid, or
 * -1 with a reason in err (the child is then killed and reaped). */
static inline pid_t bench_spawn_ready(const char *path, char *const *argv,
                                      const char *log_path, const char *prefix,
                                      char *ready, size_t readylen,
                                      double timeout_s, char *err,
                                      size_t errlen)
{
    int pfd[2];
    pid_t pid;
    char line[512];
    size_t used = 0;
    double end = flps_mono_s() + timeout_s;

    if (pipe(pfd) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pfd[1], STDOUT_FILENO);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        close(pfd[0]);
        execv(path, argv);
        fprintf(stderr, "cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    bench_child_add(pid);
    /* Byte by byte: a short line, read once per start. */
    for (;;) {
        const char *why = NULL;
        char ch;
        double left = end - flps_mono_s();
        if (left <= 0 || bench_read_full(pfd[0], &ch, 1, left, &why) != 0) {
            char last[160];
            bench_last_line(log_path, last, sizeof(last));
            if (why != NULL && strcmp(why, "closed") == 0)
                snprintf(err, errlen,
                         "%.120s exited (or closed stdout) before printing "
                         "'%.20s...'; its log %.100s ends: %.120s",
                         path, prefix, log_path, last);
            else
                snprintf(err, errlen,
                         "%.120s did not print '%.20s...' within %.0f s; its "
                         "log %.100s ends: %.120s",
                         path, prefix, timeout_s, log_path, last);
            break;
        }
        if (ch != '\n') {
            if (used + 1 < sizeof(line))
                line[used++] = ch;
            continue;
        }
        line[used] = '\0';
        used = 0;
        if (strncmp(line, prefix, strlen(prefix)) == 0) {
            const char *rest = line + strlen(prefix);
            size_t n = strlen(rest) < readylen ? strlen(rest) : readylen - 1;
            memcpy(ready, rest, n);
            ready[n] = '\0';
            /* flps prints nothing more to stdout without --metrics, and
             * ignores SIGPIPE if it did. */
            close(pfd[0]);
            return pid;
        }
    }
    close(pfd[0]);
    bench_child_stop(pid, SIGKILL, 5);
    return -1;
}

/* ---- the raw ZeroMQ baseline ---- */

/* W DEALER clients (threads, each with its own context, like separate
 * processes) and one ROUTER server. Per iteration every client sends
 * `bytes` bytes as messages of `chunk` bytes, all in flight (chunk ==
 * bytes: one message), and receives `bytes` back in the same pieces; the
 * server answers piece i to every client once piece i of every client
 * arrived (for one client, a plain echo). Sends are zero-copy from
 * buffers allocated and touched once; receives are ZeroMQ's own. No
 * payload is looked at: this is what the network stack and ZeroMQ cost. */
typedef struct bench_raw {
    size_t bytes, chunk;
    int clients, iters;
    int timeout_ms;
    double *t0, *t1; /* [iters * clients]: start and end of each trip */
    /* Set by the threads. */
    char endpoint[128];      /* written by the server before `ready` */
    pthread_barrier_t ready; /* server + caller: endpoint known */
    pthread_barrier_t iter;  /* the clients, at each iteration */
    atomic_int failed;       /* set once by whoever fails first */
    char err[256];           /* guarded by lock */
    pthread_mutex_t lock;
    /* This process's CPU seconds (every thread: the clients, the server
     * and their ZeroMQ I/O threads) at the start of iteration 1 and once
     * every client finished the last; written by client 0. */
    double cpu_start, cpu_end;
} bench_raw;

/* CPU seconds (user + system, all threads) this process used so far. */
static inline double bench_raw_cpu_now(void)
{
    struct rusage u;

    if (getrusage(RUSAGE_SELF, &u) != 0)
        return 0;
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

typedef struct bench_raw_client {
    bench_raw *r;
    int id;
} bench_raw_client;

static void bench_raw_fail(bench_raw *r, const char *what)
{
    pthread_mutex_lock(&r->lock);
    if (!r->failed)
        snprintf(r->err, sizeof(r->err), "raw ZeroMQ baseline: %s: %s", what,
                 zmq_strerror(zmq_errno()));
    r->failed = 1;
    pthread_mutex_unlock(&r->lock);
}

/* linger: the server's must outlast its last replies (zmq_ctx_term would
 * drop them otherwise); a client has nothing left to send at the end. */
static int bench_raw_sockopts(void *s, int timeout_ms, int linger)
{
    int zero = 0;

    return zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero)) != 0 ||
           zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero)) != 0 ||
           zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
           zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms)) !=
               0 ||
           zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout_ms, sizeof(timeout_ms)) !=
               0;
}

static size_t bench_raw_pieces(const bench_raw *r)
{
    return (r->bytes + r->chunk - 1) / r->chunk;
}

static size_t bench_raw_piece_len(const bench_raw *r, size_t i)
{
    size_t off = i * r->chunk;
    return r->bytes - off < r->chunk ? r->bytes - off : r->chunk;
}

/* Zero-copy send of len bytes at data (which outlives the context). */
static int bench_raw_send(void *s, void *data, size_t len, int flags)
{
    zmq_msg_t m;

    if (zmq_msg_init_data(&m, data, len, NULL, NULL) != 0)
        return -1;
    if (zmq_msg_send(&m, s, flags) < 0) {
        zmq_msg_close(&m);
        return -1;
    }
    return 0;
}

/* Receive one frame (into ZeroMQ's own memory); its size in *len. */
static int bench_raw_recv(void *s, size_t *len)
{
    zmq_msg_t m;
    int rc;

    zmq_msg_init(&m);
    rc = zmq_msg_recv(&m, s, 0);
    if (rc >= 0)
        *len = zmq_msg_size(&m);
    zmq_msg_close(&m);
    return rc < 0 ? -1 : 0;
}

static void *bench_raw_server(void *arg)
{
    bench_raw *r = arg;
    void *ctx = zmq_ctx_new(), *s = NULL;
    const size_t pieces = bench_raw_pieces(r);
    const int W = r->clients;
    size_t *count = calloc((size_t)W, sizeof(size_t));
    char *buf = malloc(r->chunk);
    size_t len = sizeof(r->endpoint);

    if (ctx == NULL || count == NULL || buf == NULL) {
        bench_raw_fail(r, "server set-up");
        goto out_ready;
    }
    memset(buf, 0x5a, r->chunk);
    s = zmq_socket(ctx, ZMQ_ROUTER);
    if (s == NULL || bench_raw_sockopts(s, r->timeout_ms, r->timeout_ms) ||
        zmq_bind(s, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, r->endpoint, &len) != 0)
        bench_raw_fail(r, "server socket");
out_ready:
    pthread_barrier_wait(&r->ready); /* endpoint known (or failed) */
    /* Each client's routing id is one byte, its number + 1 (ids starting
     * with a zero byte are ZeroMQ's own). A hello from each, answered, so
     * the connections are up before anything is timed. */
    for (int k = 0; k < W && !r->failed; k++) {
        unsigned char id;
        size_t n;
        if (zmq_recv(s, &id, 1, 0) != 1 || bench_raw_recv(s, &n) != 0 ||
            zmq_send(s, &id, 1, ZMQ_SNDMORE) != 1 ||
            zmq_send(s, "h", 1, 0) != 1)
            bench_raw_fail(r, "server hello");
    }
    for (int it = 0; it < r->iters && !r->failed; it++) {
        size_t replied = 0;
        memset(count, 0, (size_t)W * sizeof(size_t));
        while (replied < pieces && !r->failed) {
            unsigned char id = 0;
            size_t n = 0, min;
            if (zmq_recv(s, &id, 1, 0) != 1 || id < 1 || id > W ||
                bench_raw_recv(s, &n) != 0) {
                bench_raw_fail(r, "server receive");
                break;
            }
            count[id - 1]++;
            min = count[0];
            for (int k = 1; k < W; k++)
                if (count[k] < min)
                    min = count[k];
            for (; replied < min && !r->failed; replied++) {
                for (int k = 0; k < W; k++) {
                    unsigned char to = (unsigned char)(k + 1);
                    if (zmq_send(s, &to, 1, ZMQ_SNDMORE) != 1 ||
                        bench_raw_send(s, buf, bench_raw_piece_len(r, replied),
                                       0) != 0) {
                        bench_raw_fail(r, "server send");
                        break;
                    }
                }
            }
        }
    }
    if (s != NULL)
        zmq_close(s);
    if (ctx != NULL)
        zmq_ctx_term(ctx);
    free(buf);
    free(count);
    return NULL;
}

static void *bench_raw_client_main(void *arg)
{
    bench_raw_client *cl = arg;
    bench_raw *r = cl->r;
    const size_t pieces = bench_raw_pieces(r);
    void *ctx = zmq_ctx_new(), *s = NULL;
    char *buf = malloc(r->bytes);
    unsigned char id = (unsigned char)(cl->id + 1);
    char hello;
    int ok = ctx != NULL && buf != NULL && !r->failed;

    if (ok) {
        memset(buf, 0xa5, r->bytes);
        s = zmq_socket(ctx, ZMQ_DEALER);
        ok = s != NULL && !bench_raw_sockopts(s, r->timeout_ms, 0) &&
             zmq_setsockopt(s, ZMQ_ROUTING_ID, &id, 1) == 0 &&
             zmq_connect(s, r->endpoint) == 0 && zmq_send(s, "h", 1, 0) == 1 &&
             zmq_recv(s, &hello, 1, 0) == 1;
    }
    if (!ok)
        bench_raw_fail(r, "client set-up");
    for (int it = 0; it < r->iters; it++) {
        double t0;
        /* Every client starts an iteration together; a failed one still
         * takes part in the barriers so nobody waits forever. */
        pthread_barrier_wait(&r->iter);
        if (cl->id == 0 && it == 1)
            r->cpu_start = bench_raw_cpu_now();
        if (r->failed)
            continue;
        t0 = flps_mono_s();
        for (size_t i = 0; i < pieces; i++)
            if (bench_raw_send(s, buf + i * r->chunk, bench_raw_piece_len(r, i),
                               0) != 0) {
                bench_raw_fail(r, "client send");
                break;
            }
        for (size_t i = 0; i < pieces && !r->failed; i++) {
            size_t n;
            if (bench_raw_recv(s, &n) != 0 || n != bench_raw_piece_len(r, i)) {
                bench_raw_fail(r, "client receive");
                break;
            }
        }
        r->t0[(size_t)it * r->clients + cl->id] = t0;
        r->t1[(size_t)it * r->clients + cl->id] = flps_mono_s();
    }
    pthread_barrier_wait(&r->iter); /* every client received everything */
    if (cl->id == 0)
        r->cpu_end = bench_raw_cpu_now();
    if (s != NULL)
        zmq_close(s);
    if (ctx != NULL)
        zmq_ctx_term(ctx);
    free(buf);
    return NULL;
}

/* Run the baseline; on success fills span[0..iters) with each iteration's
 * span (first start to last end over the clients), *cpu_per_iter (if not
 * NULL) with the CPU seconds the whole trip took per iteration over
 * iterations 1..iters-1 (every thread on both ends; NAN for iters < 2),
 * and returns 0; else -1 with the reason in err. Every receive is bounded
 * by timeout_ms. */
static inline int bench_raw_run(size_t bytes, size_t chunk, int clients,
                                int iters, int timeout_ms, double *span,
                                double *cpu_per_iter, char *err, size_t errlen)
{
    bench_raw r;
    pthread_t srv, th[64];
    bench_raw_client cl[64];
    int rc = 0;

    if (clients < 1 || clients > 64 || iters < 1 || bytes == 0 || chunk == 0) {
        snprintf(err, errlen, "raw baseline: bad arguments");
        return -1;
    }
    memset(&r, 0, sizeof(r));
    r.bytes = bytes;
    r.chunk = chunk < bytes ? chunk : bytes;
    r.clients = clients;
    r.iters = iters;
    r.timeout_ms = timeout_ms;
    r.t0 = calloc((size_t)iters * clients, sizeof(double));
    r.t1 = calloc((size_t)iters * clients, sizeof(double));
    pthread_mutex_init(&r.lock, NULL);
    pthread_barrier_init(&r.ready, NULL, 2);
    pthread_barrier_init(&r.iter, NULL, (unsigned)clients);
    if (r.t0 == NULL || r.t1 == NULL ||
        pthread_create(&srv, NULL, bench_raw_server, &r) != 0) {
        /* Cannot happen short of a broken system. */
        fprintf(stderr, "bench: out of memory or threads for the raw "
                        "baseline\n");
        exit(1);
    }
    pthread_barrier_wait(&r.ready);
    for (int c = 0; c < clients; c++) {
        cl[c].r = &r;
        cl[c].id = c;
        if (pthread_create(&th[c], NULL, bench_raw_client_main, &cl[c]) != 0) {
            /* Cannot happen short of a broken system; the barrier would
             * then never fill, so give up loudly. */
            fprintf(stderr, "bench: cannot start raw baseline clients\n");
            exit(1);
        }
    }
    for (int c = 0; c < clients; c++)
        pthread_join(th[c], NULL);
    pthread_join(srv, NULL);
    if (r.failed) {
        snprintf(err, errlen, "%s", r.err);
        rc = -1;
    } else {
        for (int it = 0; it < iters; it++) {
            double a = r.t0[(size_t)it * clients],
                   b = r.t1[(size_t)it * clients];
            for (int c = 1; c < clients; c++) {
                if (r.t0[(size_t)it * clients + c] < a)
                    a = r.t0[(size_t)it * clients + c];
                if (r.t1[(size_t)it * clients + c] > b)
                    b = r.t1[(size_t)it * clients + c];
            }
            span[it] = b - a;
        }
        if (cpu_per_iter != NULL)
            *cpu_per_iter =
                iters < 2 ? NAN : (r.cpu_end - r.cpu_start) / (iters - 1);
    }
    pthread_barrier_destroy(&r.ready);
    pthread_barrier_destroy(&r.iter);
    pthread_mutex_destroy(&r.lock);
    free(r.t0);
    free(r.t1);
    return rc;
}

#endif
