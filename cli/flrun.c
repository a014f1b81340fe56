/* flrun: run one whole job on this machine, no Redis needed: starts the
 * job's parameter servers and workers on free loopback ports, shows the
 * progress, stops everything cleanly, and prints one JSON summary as its
 * last line. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cliver.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/creds.h"
#include "proto/transport_select.h"
#include "services/jobspec.h"
#include "services/plan.h"
#include "services/procs.h"
#include "services/workerenv.h"

#define RUN_MAX_PROCS 1300

extern char **environ;

/* Set by the signal handler, read by the main loop (process-wide by
 * nature). */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

typedef struct run {
    jobspec spec;
    proc *procs; /* servers first, then workers */
    size_t nprocs, nservers;
    char endpoints[256][128];
    int tty, quiet;
    double t0;
    /* From the workers' events. */
    uint32_t done;
    uint64_t bytes_sent, bytes_received, dense_bytes;
    uint64_t late_clients, client_rounds; /* fedavg with round_deadline */
    uint64_t warmup_bytes_sent; /* through the density warm-up's end */
    double test_accuracy, test_loss;
    int have_accuracy;
    uint64_t last_iter;
    double last_loss;
    uint64_t last_sent, last_dense; /* summed over the workers */
    uint64_t (*rank_bytes)[2];      /* each worker's last sent, dense */
    double last_accuracy; /* training accuracy, when the worker gives it */
    int have_last_accuracy;
    int need_newline;
    /* Iterations, or rounds for fedavg (the shards close one synchronous
     * iteration a round): what progress counts to and the summary says. */
    uint64_t total;
    /* Rank 0's report of the data split: samples is a JSON array (owned). */
    json_t *samples;
    double skew;
    /* fedavg: rank 0's mean of the last five rounds' evaluations. */
    double acc_last5;
    int have_last5;
    /* compression: auto: the plan file the workers watch (empty
     * otherwise) and the version written to it (0 = none yet). */
    char plan_path[PATH_MAX + 16];
    uint64_t plan_version;
    uint32_t server_restarts; /* shards restarted from their checkpoints */
    /* What the shards and workers run: transport: rdma, or auto decided
     * on this machine ("zmq" or "rdma"). */
    const char *transport;
    const char *data_plane; /* what the credentials protect, for the summary */
    /* flworker's time split, summed over the workers that report it, and
     * the bytes each layer's pushes sent, summed over all workers
     * (layer_names owned, from the first report). */
    uint32_t timed;
    double compute_s, push_s, comm_wait_s, s_per_iter;
    json_t *layer_names;
    uint64_t *layer_bytes;
    size_t nlayers;
    /* The workers' hashes of their replicas at the end: the first one
     * reported, and whether every other was the same. */
    char model_hash[24];
    int hash_differs;
    /* The compute backend the workers' done events name (flworker's;
     * empty when none does, "mixed" when they differ). */
    char backend[16];
} run;

static void human_bytes(double b, char *buf, size_t len)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (b >= 1000 && i < 4) {
        b /= 1000;
        i++;
    }
    snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void show_progress(run *r)
{
    char sent[32];
    double el = flps_mono_s() - r->t0;
    double frac = r->total ? (double)r->last_iter / (double)r->total : 0;
    double eta = frac > 0 ? el / frac - el : 0;
    int width = 24, fill = (int)(frac * width);
    char bar[32], acc[32];

    if (r->quiet)
        return;
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    human_bytes((double)r->last_sent, sent, sizeof(sent));
    if (r->have_last_accuracy)
        snprintf(acc, sizeof(acc), "  acc %.4f", r->last_accuracy);
    else
        acc[0] = '\0';
    if (r->tty) {
        fprintf(stderr,
                "\r[%s] iter %llu/%llu  loss %.4f%s  sent %s (%.2f%% of "
                "dense)  %.0fs, eta %.0fs ",
                bar, (unsigned long long)r->last_iter,
                (unsigned long long)r->total, r->last_loss, acc, sent,
                r->last_dense
                    ? 100.0 * (double)r->last_sent / (double)r->last_dense
                    : 0.0,
                el, eta);
        r->need_newline = 1;
    } else {
        fprintf(stderr,
                "iter %llu/%llu  loss %.4f%s  sent %s (%.2f%% of dense)  "
                "%.1fs\n",
                (unsigned long long)r->last_iter, (unsigned long long)r->total,
                r->last_loss, acc, sent,
                r->last_dense
                    ? 100.0 * (double)r->last_sent / (double)r->last_dense
                    : 0.0,
                el);
    }
}

static void end_progress_line(run *r)
{
    if (r->need_newline) {
        fputc('\n', stderr);
        r->need_newline = 0;
    }
}

/* "1.23 ms" or "1.23 s". */
static void human_seconds(double s, char *buf, size_t len)
{
    if (s < 1.0)
        snprintf(buf, len, "%.3g ms", s * 1e3);
    else
        snprintf(buf, len, "%.3g s", s);
}

/* Write text to path so that a reader sees the old file or the new one,
 * never a part: a temporary file beside it, then rename. */
static int write_atomically(const char *path, const char *text)
{
    char tmp[PATH_MAX + 32];
    FILE *f;
    int ok, fd;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    /* 0600: the job's files are its owner's alone. */
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    f = fdopen(fd, "w");
    if (f == NULL) {
        close(fd);
        return 0;
    }
    ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return 0;
    }
    return 1;
}

/* Rank 0's profile arrived: plan it and hand the plan to the workers
 * through the file they watch. A refused profile leaves the job running
 * with the codecs it has (dense) and says why. */
static void on_profile(run *r, const char *line)
{
    char err[512], tp[32], td[32];
    char *text = NULL;
    plan *p = NULL;
    size_t nsparse = 0;

    end_progress_line(r);
    if (r->plan_path[0] == '\0' || r->plan_version != 0)
        return; /* not an auto job, or planned already */
    if (plan_from_profile(line, 1, &text, err, sizeof(err)) != FLPS_OK) {
        fprintf(stderr,
                "flrun: cannot plan from flworker rank 0's profile: %s; the "
                "job goes on with dense layers\n",
                err);
        r->plan_version = 1; /* do not try again */
        return;
    }
    r->plan_version = 1;
    if (plan_parse(text, &p) != FLPS_OK) { /* only when out of memory */
        fprintf(stderr, "flrun: cannot read back the plan: %s\n", text);
        free(text);
        return;
    }
    if (!write_atomically(r->plan_path, text)) {
        fprintf(stderr,
                "flrun: cannot write %s: %s; the job goes on with "
                "dense layers\n",
                r->plan_path, strerror(errno));
    } else if (!r->quiet) {
        for (size_t i = 0; i < p->nlayers; i++)
            nsparse += p->layers[i].kind != CODEC_DENSE;
        human_seconds(p->predicted_iteration_seconds, tp, sizeof(tp));
        human_seconds(p->dense_iteration_seconds, td, sizeof(td));
        fprintf(stderr,
                "plan v%llu: %zu of %zu layers sparse, predicted iteration "
                "%s vs %s dense\n",
                (unsigned long long)p->version, nsparse, p->nlayers, tp, td);
    }
    plan_free(p);
    free(text);
}

static uint64_t json_u64(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

/* A worker's done event: its time split (computing, pushing, blocked on
 * the network) and its per-layer bytes, when it reports them (flworker
 * does; a command: job's program need not). */
static void on_done_timing(run *r, json_t *o)
{
    json_t *layers = json_object_get(o, "layers");
    size_t n = json_array_size(layers);

    const char *hash = json_string_value(json_object_get(o, "model_hash"));

    if (!json_is_number(json_object_get(o, "compute_seconds")))
        return;
    /* 16 hex digits, as flworker prints it; anything else is no hash. */
    if (hash != NULL &&
        (strlen(hash) != 16 || strspn(hash, "0123456789abcdef") != 16))
        hash = NULL;
    if (hash != NULL && r->model_hash[0] == '\0')
        snprintf(r->model_hash, sizeof(r->model_hash), "%s", hash);
    else if (hash == NULL || strcmp(hash, r->model_hash) != 0)
        r->hash_differs = 1;
    r->timed++;
    r->compute_s += json_number_value(json_object_get(o, "compute_seconds"));
    r->push_s += json_number_value(json_object_get(o, "push_seconds"));
    r->comm_wait_s +=
        json_number_value(json_object_get(o, "comm_wait_seconds"));
    r->s_per_iter +=
        json_number_value(json_object_get(o, "seconds_per_iteration"));
    if (n == 0 || (r->layer_bytes != NULL && n != r->nlayers))
        return;
    if (r->layer_bytes == NULL) {
        r->layer_bytes = calloc(n, sizeof(*r->layer_bytes));
        r->layer_names = json_array();
        if (r->layer_bytes == NULL || r->layer_names == NULL) {
            free(r->layer_bytes);
            r->layer_bytes = NULL;
            json_decref(r->layer_names);
            r->layer_names = NULL;
            return;
        }
        r->nlayers = n;
        for (size_t i = 0; i < n; i++) {
            json_t *name = json_object_get(json_array_get(layers, i), "name");
            json_array_append(r->layer_names,
                              json_is_string(name) ? name : json_null());
        }
    }
    for (size_t i = 0; i < n; i++)
        r->layer_bytes[i] += json_u64(json_array_get(layers, i), "bytes_sent");
}

/* A worker's done event's backend: a short lower-case name as flworker
 * prints it (anything else is ignored, so it cannot break the JSON). */
static void on_done_backend(run *r, json_t *o)
{
    const char *b = json_string_value(json_object_get(o, "backend"));

    if (b == NULL || b[0] == '\0' || strlen(b) >= sizeof(r->backend) ||
        strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(b))
        return;
    if (r->backend[0] == '\0')
        snprintf(r->backend, sizeof(r->backend), "%s", b);
    else if (strcmp(r->backend, b) != 0)
        snprintf(r->backend, sizeof(r->backend), "mixed");
}

/* The summary's time split: means over the workers that reported one,
 * and each layer's push bytes over all of them. */
static void print_timing(const run *r)
{
    if (r->timed == 0)
        return;
    printf(",\"overlap\":%s,\"compute_seconds\":%.3f,\"push_seconds\":%.3f,"
           "\"comm_wait_seconds\":%.3f,\"seconds_per_iteration\":%.6f",
           r->spec.overlap ? "true" : "false", r->compute_s / r->timed,
           r->push_s / r->timed, r->comm_wait_s / r->timed,
           r->s_per_iter / r->timed);
    /* Synchronous workers end with the same replica, bit for bit. */
    if (r->model_hash[0] != '\0')
        printf(
            ",\"model_hash\":\"%s\",\"replicas_identical\":%s", r->model_hash,
            r->hash_differs || r->timed != r->spec.workers ? "false" : "true");
    if (r->layer_bytes == NULL)
        return;
    printf(",\"layer_bytes_sent\":{");
    for (size_t i = 0; i < r->nlayers; i++) {
        const char *name = json_string_value(json_array_get(r->layer_names, i));
        /* A tensor name as flworker's models spell them, else a stand-in
         * that cannot break the JSON. */
        if (name == NULL || strlen(name) > 64 ||
            strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                         "0123456789._-") != strlen(name))
            name = "?";
        printf("%s\"%s\":%llu", i ? "," : "", name,
               (unsigned long long)r->layer_bytes[i]);
    }
    printf("}");
}

/* One line a worker printed on stdout: a JSON event. */
static void on_worker_line(void *arg, proc *p, const char *line)
{
    run *r = arg;
    json_error_t jerr;
    json_t *o = json_loads(line, 0, &jerr);
    const char *ev;

    if (o == NULL || !json_is_object(o)) {
        json_decref(o);
        return; /* not an event; the log has the details */
    }
    ev = json_string_value(json_object_get(o, "event"));
    if (ev == NULL) {
        json_decref(o);
        return;
    }
    if (strcmp(ev, "progress") == 0) {
        uint64_t it = json_u64(o, "iter");
        size_t w = (size_t)(p - r->procs) - r->nservers;

        /* "sent" counts every worker, as the summary does; the iteration
         * and loss are rank 0's. */
        r->rank_bytes[w][0] = json_u64(o, "bytes_sent");
        r->rank_bytes[w][1] = json_u64(o, "dense_bytes");
        r->last_sent = r->last_dense = 0;
        for (size_t k = 0; k < r->spec.workers; k++) {
            r->last_sent += r->rank_bytes[k][0];
            r->last_dense += r->rank_bytes[k][1];
        }
        if (w != 0) {
            json_decref(o);
            return;
        }
        r->last_iter = it;
        r->last_loss = json_number_value(json_object_get(o, "loss"));
        if (json_is_number(json_object_get(o, "accuracy"))) {
            r->last_accuracy =
                json_number_value(json_object_get(o, "accuracy"));
            r->have_last_accuracy = 1;
        }
        if (r->tty || r->total < 10 ||
            it % (r->total / 10 ? r->total / 10 : 1) == 0 || it == r->total)
            show_progress(r);
    } else if (strcmp(ev, "eval") == 0) {
        r->test_accuracy =
            json_number_value(json_object_get(o, "test_accuracy"));
        r->test_loss = json_number_value(json_object_get(o, "test_loss"));
        r->have_accuracy = 1;
        if (!r->quiet) {
            end_progress_line(r);
            fprintf(stderr, "iter %llu: test accuracy %.4f, test loss %.4f\n",
                    (unsigned long long)json_u64(o, "iter"), r->test_accuracy,
                    r->test_loss);
        }
    } else if (strcmp(ev, "profile") == 0) {
        if (p == &r->procs[r->nservers]) /* rank 0 speaks for all */
            on_profile(r, line);
    } else if (strcmp(ev, "partition") == 0) {
        json_t *samples = json_object_get(o, "samples");

        if (p == &r->procs[r->nservers] && json_is_array(samples)) {
            json_decref(r->samples);
            r->samples = json_incref(samples);
            r->skew = json_number_value(json_object_get(o, "skew"));
        }
    } else if (strcmp(ev, "done") == 0) {
        json_t *last5 = json_object_get(o, "test_accuracy_last5");

        if (json_is_number(last5)) {
            r->acc_last5 = json_number_value(last5);
            r->have_last5 = 1;
        }
        r->done++;
        on_done_timing(r, o);
        on_done_backend(r, o);
        r->late_clients += json_u64(o, "late_clients");
        r->client_rounds += json_u64(o, "client_rounds");
        r->bytes_sent += json_u64(o, "bytes_sent");
        r->bytes_received += json_u64(o, "bytes_received");
        r->dense_bytes += json_u64(o, "dense_bytes");
        r->warmup_bytes_sent += json_u64(o, "warmup_bytes_sent");
    }
    json_decref(o);
}

/* A server prints one line: "listening on ENDPOINT". */
static void on_server_line(void *arg, proc *p, const char *line)
{
    run *r = arg;
    size_t i = (size_t)(p - r->procs);

    if (strncmp(line, "listening on ", 13) == 0 && i < r->nservers)
        snprintf(r->endpoints[i], sizeof(r->endpoints[i]), "%s", line + 13);
}

/* Start shard i: on a free port, or with restore on the port it had
 * (the workers' connections find it again there) from the checkpoint
 * directory. */
static flps_err start_server(run *r, uint32_t i, char *flps_bin, char *ckptdir,
                             const char *logdir, int restore)
{
    char shard[16], shards[16], interval[32], name[64], log[PATH_MAX + 32];
    char *args[20];
    int a = 0;

    snprintf(shard, sizeof(shard), "%u", i);
    snprintf(shards, sizeof(shards), "%u", r->spec.servers);
    snprintf(interval, sizeof(interval), "%.0f",
             r->spec.checkpoint_interval < 1 ? 1 : r->spec.checkpoint_interval);
    snprintf(name, sizeof(name), "flps shard %u", i);
    snprintf(log, sizeof(log), "%s/flps-%u.log", logdir, i);
    args[a++] = flps_bin;
    args[a++] = "--job";
    args[a++] = r->spec.name;
    args[a++] = "--shard";
    args[a++] = shard;
    args[a++] = "--shards";
    args[a++] = shards;
    args[a++] = "--listen";
    args[a++] = restore ? r->endpoints[i] : "tcp://127.0.0.1:0";
    args[a++] = "--transport";
    args[a++] = (char *)r->transport;
    if (r->spec.checkpoint_interval > 0) {
        args[a++] = "--checkpoint-dir";
        args[a++] = ckptdir;
        args[a++] = "--checkpoint-interval";
        args[a++] = interval;
        if (restore)
            args[a++] = "--restore";
    }
    args[a] = NULL;
    return proc_start(&r->procs[i], name, args, log);
}

/* A shard that died while the job runs is started again from its
 * checkpoint and log when the job keeps them (checkpoint_interval), at
 * most FLRUN_SERVER_RESTARTS times in all; the workers resend what it had
 * not answered and go on. Returns 1 when restarted. */
#define FLRUN_SERVER_RESTARTS 3
static int restart_server(run *r, uint32_t i, char *flps_bin, char *ckptdir,
                          const char *logdir)
{
    char how[96];

    if (r->spec.checkpoint_interval <= 0 ||
        r->server_restarts >= FLRUN_SERVER_RESTARTS)
        return 0;
    end_progress_line(r);
    proc_describe(r->procs[i].status, how, sizeof(how));
    fprintf(stderr,
            "flrun: %s (pid %d) stopped unexpectedly: %s; restarting it "
            "from its checkpoint on %s (restart %u of at most %d)\n",
            r->procs[i].name, (int)r->procs[i].pid, how, r->endpoints[i],
            r->server_restarts + 1, FLRUN_SERVER_RESTARTS);
    if (start_server(r, i, flps_bin, ckptdir, logdir, 1) != FLPS_OK)
        return 0;
    r->server_restarts++;
    return 1;
}

/* The last line of a log that is not blank: the program's last error
 * (for Python, the exception after its traceback). Empty when none. */
static void last_error_line(const char *path, char *out, size_t len)
{
    char line[1024];
    FILE *f = fopen(path, "r");

    out[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        size_t n = strlen(line);

        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
                         line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = '\0';
        if (n > 0)
            snprintf(out, len, "%s", line);
    }
    fclose(f);
}

static void report_death(run *r, proc *p)
{
    char how[96], reason[1024];

    end_progress_line(r);
    proc_describe(p->status, how, sizeof(how));
    fprintf(stderr,
            "flrun: %s (pid %d) stopped unexpectedly: %s; last lines "
            "of %s:\n",
            p->name, (int)p->pid, how, p->log_path);
    proc_print_tail(p->log_path, 12);
    last_error_line(p->log_path, reason, sizeof(reason));
    fprintf(stderr, "flrun: job %s failed: %s %s: %s\n", r->spec.name, p->name,
            how, reason[0] ? reason : "it printed no error");
}

/* The job's credentials: a new secret (and CURVE keys when libzmq has
 * them and the job runs over ZeroMQ) in a 0600 file of the run directory,
 * named to every process through FLPS_CREDENTIALS_FILE (inherited): the
 * shards then serve only this job's workers. Never on a command line. */
static int make_credentials(run *r, const char *logdir)
{
    char path[PATH_MAX + 32], why[512];
    flps_creds c;
    /* CURVE where it can run: over ZeroMQ, with a libzmq that has it. */
    int curve = strcmp(r->transport, "zmq") == 0 && creds_have_curve();

    snprintf(path, sizeof(path), "%s/credentials", logdir);
    if (creds_generate(curve, &c, why, sizeof(why)) != FLPS_OK ||
        creds_write(path, &c, 1, why, sizeof(why)) != FLPS_OK) {
        creds_wipe(&c);
        fprintf(stderr, "flrun: %s\nnothing was started.\n", why);
        return -1;
    }
    r->data_plane = c.has_curve ? "authenticated+curve" : "authenticated";
    if (!c.has_curve && !r->quiet)
        fprintf(stderr,
                "flrun: the data plane is authenticated but not "
                "encrypted (%s)\n",
                strcmp(r->transport, "zmq") != 0
                    ? "CURVE applies to ZeroMQ only"
                    : "this libzmq has no CURVE");
    creds_wipe(&c);
    if (setenv(CREDS_ENV, path, 1) != 0) {
        fprintf(stderr, "flrun: cannot set %s\n", CREDS_ENV);
        return -1;
    }
    return 0;
}

static int find_bin(const char *name, char *out, size_t len)
{
    const char *env = getenv("FLPS_BIN_DIR");
    char self[PATH_MAX];
    ssize_t n;

    if (env != NULL) {
        return snprintf(out, len, "%s/%s", env, name) < (int)len &&
               access(out, X_OK) == 0;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        char *slash;
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            if (snprintf(out, len, "%s/%s", self, name) < (int)len &&
                access(out, X_OK) == 0)
                return 1;
        }
    }
    return 0;
}

/* Start rank w of a command: job: the user's program (prog, resolved)
 * with the job's FLPS_* variables; stdout piped for its events, stderr to
 * its log. */
static flps_err start_command(run *r, uint32_t w, const char *prog,
                              const char *servers, const char *logdir)
{
    const char *words[JOBSPEC_WORDS_MAX + 1];
    char name[64], log[PATH_MAX + 32], bin_dir[PATH_MAX] = "";
    char **env = NULL;
    size_t n = jobspec_words(r->spec.command, r->spec.command_argc, words,
                             JOBSPEC_WORDS_MAX);
    workerenv we;
    proc_opts o;
    flps_err rc;
    const char *dl = getenv("FLPS_DEADLINE_MS");

    if (find_bin("flps", bin_dir, sizeof(bin_dir)))
        *strrchr(bin_dir, '/') = '\0';
    memset(&we, 0, sizeof(we));
    we.job = r->spec.name;
    we.rank = w;
    we.servers = servers;
    we.plan_file = r->plan_path;
    we.bin_dir = bin_dir[0] ? bin_dir : NULL;
    /* A test (or a slow machine) may shorten (lengthen) the waits. */
    we.deadline_ms = dl != NULL ? strtoull(dl, NULL, 10) : 0;
    we.transport = r->transport;
    we.credentials_file = getenv(CREDS_ENV);
    if (workerenv_build(&r->spec, &we, environ, &env) != FLPS_OK) {
        fprintf(stderr, "flrun: out of memory\n");
        return FLPS_ENOMEM;
    }
    words[0] = prog;
    words[n] = NULL;
    snprintf(name, sizeof(name), "worker rank %u (%.32s)", w,
             strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog);
    snprintf(log, sizeof(log), "%s/worker-%u.log", logdir, w);
    memset(&o, 0, sizeof(o));
    o.log_path = log;
    o.envp = env;
    rc = proc_start_opts(&r->procs[r->nprocs], name, (char *const *)words, &o);
    workerenv_free(env);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flrun [--log-dir DIR] [--quiet] JOB.yaml\n"
            "Runs the job's servers and workers on this machine (loopback),\n"
            "shows progress on stderr and prints a JSON summary as the last\n"
            "line of stdout. Logs of every process go to --log-dir (default:\n"
            "a new directory under $TMPDIR or /tmp).\n");
}

/* Poll every open stdout pipe once, for up to timeout_ms. */
static void pump(run *r, int timeout_ms)
{
    struct pollfd fds[RUN_MAX_PROCS];
    size_t map[RUN_MAX_PROCS], n = 0;

    for (size_t i = 0; i < r->nprocs; i++) {
        if (r->procs[i].out_fd >= 0) {
            fds[n].fd = r->procs[i].out_fd;
            fds[n].events = POLLIN;
            fds[n].revents = 0;
            map[n++] = i;
        }
    }
    if (n == 0) {
        struct timespec ts = {0, (long)timeout_ms * 1000000L};
        nanosleep(&ts, NULL);
        return;
    }
    if (poll(fds, n, timeout_ms) <= 0)
        return;
    for (size_t k = 0; k < n; k++) {
        proc *p = &r->procs[map[k]];
        if (fds[k].revents == 0)
            continue;
        proc_read_lines(
            p, map[k] < r->nservers ? on_server_line : on_worker_line, r);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"log-dir", required_argument, NULL, 'l'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char errbuf[1024], flps_bin[PATH_MAX], worker_bin[PATH_MAX];
    char logdir[PATH_MAX] = "", ckptdir[PATH_MAX + 16], comp[64];
    char servers_arg[256 * 130];
    const char *job_path, *tmp;
    run r;
    struct sigaction sa;
    int c, status = 1;
    double wall;

    if (flps_cli_version(argc, argv, "flrun"))
        return 0;
    memset(&r, 0, sizeof(r));
    while ((c = getopt_long(argc, argv, "hq", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            snprintf(logdir, sizeof(logdir), "%s", optarg);
            break;
        case 'q':
            r.quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind + 1 != argc) {
        usage(stderr);
        return 2;
    }
    job_path = argv[optind];
    flps_log_setup("flrun", FLPS_LOG_INFO);
    if (jobspec_load(job_path, &r.spec, errbuf, sizeof(errbuf)) != FLPS_OK) {
        fprintf(stderr, "flrun: %s\nnothing was started.\n", errbuf);
        return 2;
    }
    {
        /* transport: rdma that cannot run here stops now, before any
         * process starts or anything waits; auto is decided once for the
         * whole job (every process runs on this machine) and said. */
        transport_select sel = {.kind = TRANSPORT_KIND_ZMQ};
        transport_kind chosen = TRANSPORT_KIND_ZMQ;

        transport_kind_parse(jobspec_transport_name(r.spec.transport),
                             &sel.kind);
        if (transport_resolve(&sel, &chosen, errbuf, sizeof(errbuf)) !=
            FLPS_OK) {
            fprintf(stderr, "flrun: %s: %s\nnothing was started.\n", job_path,
                    errbuf);
            return 2;
        }
        if (errbuf[0] != '\0')
            fprintf(stderr, "flrun: %s\n", errbuf);
        r.transport = transport_kind_name(chosen);
    }
    if (r.spec.servers > 256 ||
        r.spec.workers + r.spec.servers > RUN_MAX_PROCS) {
        fprintf(stderr,
                "flrun: %u servers and %u workers are more than one "
                "machine runs; use flsubmit on a cluster\n",
                r.spec.servers, r.spec.workers);
        return 2;
    }
    if (!find_bin("flps", flps_bin, sizeof(flps_bin)) ||
        (r.spec.command_argc == 0 &&
         !find_bin("flworker", worker_bin, sizeof(worker_bin)))) {
        fprintf(stderr, "flrun: cannot find the flps and flworker binaries "
                        "next to flrun (or in $FLPS_BIN_DIR)\n");
        return 2;
    }
    if (r.spec.command_argc > 0) {
        const char *prog[1];

        jobspec_words(r.spec.command, 1, prog, 1);
        if (workerenv_find_program(prog[0], environ, worker_bin,
                                   sizeof(worker_bin), errbuf,
                                   sizeof(errbuf)) != FLPS_OK) {
            fprintf(stderr, "flrun: %s: %s\nnothing was started.\n", job_path,
                    errbuf);
            return 2;
        }
    }
    if (logdir[0] == '\0') {
        tmp = getenv("TMPDIR");
        snprintf(logdir, sizeof(logdir), "%s/flrun-%s-XXXXXX",
                 tmp ? tmp : "/tmp", r.spec.name);
        if (mkdtemp(logdir) == NULL) {
            fprintf(stderr, "flrun: cannot create a log directory: %s\n",
                    strerror(errno));
            return 1;
        }
    } else if (mkdir(logdir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "flrun: cannot create %s: %s\n", logdir,
                strerror(errno));
        return 1;
    }
    snprintf(ckptdir, sizeof(ckptdir), "%s/checkpoints", logdir);
    if (make_credentials(&r, logdir) != 0)
        return 1;
    if (r.spec.compression == JOBSPEC_COMP_AUTO) {
        /* The workers start dense and apply the plan once this file
         * appears; one left by an earlier run in the same --log-dir would
         * be applied before this job's profile is in. */
        snprintf(r.plan_path, sizeof(r.plan_path), "%s/plan.json", logdir);
        if (unlink(r.plan_path) != 0 && errno != ENOENT) {
            fprintf(stderr, "flrun: cannot remove the old %s: %s\n",
                    r.plan_path, strerror(errno));
            return 1;
        }
    }
    r.tty = isatty(STDERR_FILENO);
    r.total =
        r.spec.mode == JOBSPEC_MODE_FEDAVG ? r.spec.rounds : r.spec.iterations;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    r.procs = calloc(r.spec.servers + r.spec.workers, sizeof(*r.procs));
    r.rank_bytes = calloc(r.spec.workers, sizeof(*r.rank_bytes));
    if (r.procs == NULL || r.rank_bytes == NULL) {
        free(r.procs);
        free(r.rank_bytes);
        fprintf(stderr, "flrun: out of memory\n");
        return 1;
    }
    jobspec_comp_format(&r.spec, comp, sizeof(comp));
    if (!r.quiet)
        fprintf(stderr,
                "flrun: job %s: %s on %s, %u workers, %u servers, mode %s, "
                "compression %s, %llu %s; logs in %s\n",
                r.spec.name, jobspec_model_name(r.spec.model),
                jobspec_dataset_name(r.spec.dataset), r.spec.workers,
                r.spec.servers, jobspec_mode_name(r.spec.mode), comp,
                (unsigned long long)r.total,
                r.spec.mode == JOBSPEC_MODE_FEDAVG ? "rounds" : "iterations",
                logdir);
    r.t0 = flps_mono_s();

    /* Servers first; each reports the port it bound. */
    for (uint32_t i = 0; i < r.spec.servers; i++) {
        if (start_server(&r, i, flps_bin, ckptdir, logdir, 0) != FLPS_OK)
            goto stop;
        r.nprocs++;
        r.nservers++;
    }
    for (;;) {
        uint32_t ready = 0;
        proc *dead;
        for (uint32_t i = 0; i < r.nservers; i++)
            ready += r.endpoints[i][0] != '\0';
        if (ready == r.nservers)
            break;
        if (interrupted)
            goto stop;
        if ((dead = proc_reap(r.procs, r.nprocs)) != NULL) {
            report_death(&r, dead);
            goto stop;
        }
        if (flps_mono_s() - r.t0 > 30) {
            fprintf(stderr,
                    "flrun: the servers did not report their ports "
                    "within 30 s; see %s\n",
                    logdir);
            goto stop;
        }
        pump(&r, 100);
    }
    servers_arg[0] = '\0';
    for (uint32_t i = 0; i < r.nservers; i++) {
        strcat(servers_arg, r.endpoints[i]);
        if (i + 1 < r.nservers)
            strcat(servers_arg, ",");
    }
    for (uint32_t w = 0; r.spec.command_argc > 0 && w < r.spec.workers; w++) {
        if (start_command(&r, w, worker_bin, servers_arg, logdir) != FLPS_OK)
            goto stop;
        r.nprocs++;
    }
    for (uint32_t w = 0; r.spec.command_argc == 0 && w < r.spec.workers; w++) {
        char rank[16], name[64], log[PATH_MAX + 32];
        char *args[] = {worker_bin,  "--job",       (char *)job_path,
                        "--rank",    rank,          "--servers",
                        servers_arg, "--transport", (char *)r.transport,
                        NULL,        NULL,          NULL};
        snprintf(rank, sizeof(rank), "%u", w);
        if (r.plan_path[0] != '\0') {
            args[9] = "--plan";
            args[10] = r.plan_path;
        }
        snprintf(name, sizeof(name), "flworker rank %u", w);
        snprintf(log, sizeof(log), "%s/flworker-%u.log", logdir, w);
        if (proc_start(&r.procs[r.nprocs], name, args, log) != FLPS_OK)
            goto stop;
        r.nprocs++;
    }

    /* Run until every worker has finished. */
    for (;;) {
        proc *p;
        uint32_t finished = 0;
        pump(&r, 100);
        while ((p = proc_reap(r.procs, r.nprocs)) != NULL) {
            size_t idx = (size_t)(p - r.procs);
            /* Drain what it printed before judging its exit. */
            while (
                p->out_fd >= 0 &&
                proc_read_lines(
                    p, idx < r.nservers ? on_server_line : on_worker_line, &r))
                pump(&r, 10);
            if (interrupted)
                goto stop;
            if (idx < r.nservers &&
                restart_server(&r, (uint32_t)idx, flps_bin, ckptdir, logdir))
                continue;
            if (idx < r.nservers || !WIFEXITED(p->status) ||
                WEXITSTATUS(p->status) != 0) {
                report_death(&r, p);
                goto stop;
            }
        }
        for (size_t i = r.nservers; i < r.nprocs; i++)
            finished += r.procs[i].exited && r.procs[i].out_fd < 0;
        if (finished == r.spec.workers)
            break;
        if (interrupted)
            goto stop;
        if (r.spec.time_limit > 0 && flps_mono_s() - r.t0 > r.spec.time_limit) {
            end_progress_line(&r);
            fprintf(stderr,
                    "flrun: job %s failed: it ran past its time_limit of "
                    "%.0f s; raise time_limit or make the job shorter\n",
                    r.spec.name, r.spec.time_limit);
            goto stop;
        }
    }
    end_progress_line(&r);
    proc_stop_all(r.procs, r.nprocs, 10000);
    wall = flps_mono_s() - r.t0;
    if (r.done != r.spec.workers || !r.have_accuracy) {
        fprintf(stderr,
                "flrun: %u of %u workers reported their results%s; see "
                "%s\n",
                r.done, r.spec.workers,
                r.spec.command_argc == 0 ? ""
                : r.have_accuracy
                    ? " (each rank's program reports through flps.report)"
                    : " and none a test accuracy (rank 0's program reports "
                      "it with flps.report(test_accuracy=...))",
                logdir);
        json_decref(r.samples);
        json_decref(r.layer_names);
        free(r.layer_bytes);
        free(r.procs);
        return 1;
    }
    if (!r.quiet)
        fprintf(stderr,
                "flrun: done in %.1f s: test accuracy %.4f; workers sent %llu "
                "bytes, %.2f%% of the %llu a dense run sends\n",
                wall, r.test_accuracy, (unsigned long long)r.bytes_sent,
                r.dense_bytes
                    ? 100.0 * (double)r.bytes_sent / (double)r.dense_bytes
                    : 0.0,
                (unsigned long long)r.dense_bytes);
    printf("{\"test_accuracy\":%.4f,\"iterations\":%llu,\"bytes_sent\":%llu,"
           "\"bytes_received\":%llu,\"dense_bytes\":%llu,"
           "\"wall_seconds\":%.3f,\"transport\":\"%s\","
           "\"data_plane\":\"%s\"",
           r.test_accuracy, (unsigned long long)r.total,
           (unsigned long long)r.bytes_sent,
           (unsigned long long)r.bytes_received,
           (unsigned long long)r.dense_bytes, wall, r.transport, r.data_plane);
    if (r.samples != NULL) {
        char *samples = json_dumps(r.samples, JSON_COMPACT);

        printf(",\"partition_skew\":%.6f,\"samples_per_client\":%s", r.skew,
               samples ? samples : "[]");
        free(samples);
    }
    if (r.spec.density_warmup > 0)
        /* The warm-up's share of the bytes: what its denser start cost. */
        printf(",\"density_warmup\":%llu,\"density_warmup_start\":%.17g,"
               "\"warmup_bytes_sent\":%llu",
               (unsigned long long)r.spec.density_warmup,
               r.spec.density_warmup_start,
               (unsigned long long)r.warmup_bytes_sent);
    if (r.spec.mode == JOBSPEC_MODE_FEDAVG)
        printf(",\"rounds\":%u,\"test_accuracy_last5\":%.4f,"
               "\"bytes_per_round\":%.0f",
               r.spec.rounds, r.have_last5 ? r.acc_last5 : r.test_accuracy,
               (double)r.bytes_sent / (double)r.spec.rounds);
    if (r.spec.mode == JOBSPEC_MODE_FEDAVG && r.spec.round_deadline > 0)
        printf(",\"late_clients\":%llu,\"client_rounds\":%llu",
               (unsigned long long)r.late_clients,
               (unsigned long long)r.client_rounds);
    if (r.backend[0] != '\0')
        printf(",\"backend\":\"%s\"", r.backend);
    print_timing(&r);
    printf("}\n");
    fflush(stdout);
    json_decref(r.samples);
    json_decref(r.layer_names);
    free(r.layer_bytes);
    free(r.procs);
    free(r.rank_bytes);
    return 0;

stop:
    end_progress_line(&r);
    if (interrupted)
        fprintf(stderr, "flrun: interrupted; stopping %zu processes\n",
                r.nprocs);
    else
        fprintf(stderr, "flrun: stopping the job; logs are in %s\n", logdir);
    proc_stop_all(r.procs, r.nprocs, 5000);
    json_decref(r.samples);
    json_decref(r.layer_names);
    free(r.layer_bytes);
    free(r.procs);
    free(r.rank_bytes);
    status = interrupted ? 130 : 1;
    return status;
}
