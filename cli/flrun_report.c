/* flrun's reading of its workers' event lines (services/event.h): the
 * progress display on stderr, the plan of an auto job, and the summary
 * line on stdout. */
#include "cli/flrun.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "flps.h"
#include "services/event.h"
#include "services/plan.h"
#include "services/plural.h"

/* The characters of a word a worker names a setting with (a codec, a
 * mode, a backend, an optimizer's class): anything else is ignored, so it
 * cannot break the summary's JSON. */
#define WORD_CHARS                                                             \
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:"

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

void flrun_end_progress_line(run *r)
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

    flrun_end_progress_line(r);
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
    if (plan_parse(text, &p, err, sizeof(err)) != FLPS_OK) {
        /* only when out of memory */
        fprintf(stderr, "flrun: cannot read back the plan: %s\n", err);
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
                "plan v%llu: %zu of %zu %s sparse, predicted iteration "
                "%s vs %s dense\n",
                (unsigned long long)p->version, nsparse, p->nlayers,
                plural_word((double)p->nlayers, "layer", "layers"), tp, td);
    }
    plan_free(p);
    free(text);
}

/* The first per-layer report: the layers' names (copied) and their
 * byte counters. 0 when out of memory (the summary then has none). */
static int keep_layer_names(run *r, const event_done_layers *layers)
{
    size_t n = layers->n;

    r->layer_bytes = calloc(n, sizeof(*r->layer_bytes));
    r->layer_names = calloc(n, sizeof(*r->layer_names));
    if (r->layer_bytes == NULL || r->layer_names == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        r->layer_names[i] = strdup(layers->v[i].name);
        if (r->layer_names[i] == NULL)
            goto fail;
    }
    r->nlayers = n;
    return 1;
fail:
    for (size_t i = 0; r->layer_names != NULL && i < n; i++)
        free(r->layer_names[i]);
    free(r->layer_names);
    free(r->layer_bytes);
    r->layer_names = NULL;
    r->layer_bytes = NULL;
    return 0;
}

/* A worker's done event: its time split (computing, pushing, blocked on
 * the network) and its per-layer bytes, when it reports them (flworker
 * does; a command: job's program need not). */
static void on_done_timing(run *r, const event_done *d)
{
    /* 16 hex digits, as flworker prints it; anything else is no hash. */
    const char *hash = EVENT_HAS(d, done, model_hash) ? d->model_hash : NULL;
    size_t n = EVENT_HAS(d, done, layers) ? d->layers.n : 0;

    if (!EVENT_HAS(d, done, compute_seconds))
        return;
    if (hash != NULL &&
        (strlen(hash) != 16 || strspn(hash, "0123456789abcdef") != 16))
        hash = NULL;
    if (hash != NULL && r->model_hash[0] == '\0')
        snprintf(r->model_hash, sizeof(r->model_hash), "%s", hash);
    else if (hash == NULL || strcmp(hash, r->model_hash) != 0)
        r->hash_differs = 1;
    r->timed++;
    r->compute_s += d->compute_seconds;
    r->push_s += d->push_seconds;
    r->comm_wait_s += d->comm_wait_seconds;
    r->s_per_iter += d->seconds_per_iteration;
    if (n == 0 || (r->layer_bytes != NULL && n != r->nlayers))
        return;
    if (r->layer_bytes == NULL && !keep_layer_names(r, &d->layers))
        return;
    for (size_t i = 0; i < n; i++)
        r->layer_bytes[i] += d->layers.v[i].bytes_sent;
}

/* Fold the word one worker's done event names a setting with into have
 * (len bytes): the first one is kept, "mixed" once another differs. A
 * word that is empty, too long or has other characters than WORD_CHARS
 * is ignored. Returns 1 when v was taken. */
static int agree(char *have, size_t len, const char *v)
{
    if (v == NULL || v[0] == '\0' || strlen(v) >= len ||
        strspn(v, WORD_CHARS) != strlen(v))
        return 0;
    if (have[0] == '\0')
        snprintf(have, len, "%s", v);
    else if (strcmp(have, v) != 0)
        snprintf(have, len, "mixed");
    return 1;
}

/* What a worker's done event says it ran: the backend (flworker's), the
 * codec, the mode and the optimizer (flps.torch's). */
static void on_done_settings(run *r, const event_done *d)
{
    if (EVENT_HAS(d, done, backend))
        agree(r->backend, sizeof(r->backend), d->backend);
    if (EVENT_HAS(d, done, compression))
        r->said_compression += (uint32_t)agree(
            r->ran_compression, sizeof(r->ran_compression), d->compression);
    if (EVENT_HAS(d, done, mode))
        r->said_mode +=
            (uint32_t)agree(r->ran_mode, sizeof(r->ran_mode), d->mode);
    if (EVENT_HAS(d, done, optimizer))
        agree(r->ran_optimizer, sizeof(r->ran_optimizer), d->optimizer);
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
        const char *name = r->layer_names[i];
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

/* Progress: every worker's bytes (the display's "sent" counts them all,
 * as the summary does); rank 0's iteration, loss and accuracy. */
static void on_progress(run *r, size_t w, const event_progress *pr)
{
    r->rank_bytes[w][0] = pr->bytes_sent;
    r->rank_bytes[w][1] = pr->dense_bytes;
    r->last_sent = r->last_dense = 0;
    for (size_t k = 0; k < r->spec.workers; k++) {
        r->last_sent += r->rank_bytes[k][0];
        r->last_dense += r->rank_bytes[k][1];
    }
    if (w != 0)
        return;
    r->last_iter = pr->iter;
    r->last_loss = pr->loss;
    if (EVENT_HAS(pr, progress, accuracy)) {
        r->last_accuracy = pr->accuracy;
        r->have_last_accuracy = 1;
    }
    if (r->tty || r->total < 10 ||
        pr->iter % (r->total / 10 ? r->total / 10 : 1) == 0 ||
        pr->iter == r->total)
        show_progress(r);
}

/* An evaluation (one without a test accuracy says nothing). */
static void on_eval(run *r, const event_eval *e)
{
    if (!EVENT_HAS(e, eval, test_accuracy))
        return;
    r->test_accuracy = e->test_accuracy;
    r->test_loss = e->test_loss;
    r->have_accuracy = 1;
    /* A loss never reported is not a loss of 0. */
    r->have_test_loss = EVENT_HAS(e, eval, test_loss) ? 1 : 0;
    if (!r->quiet) {
        flrun_end_progress_line(r);
        fprintf(stderr, "iter %llu: test accuracy %.4f",
                (unsigned long long)e->iter, r->test_accuracy);
        if (r->have_test_loss)
            fprintf(stderr, ", test loss %.4f", r->test_loss);
        fputc('\n', stderr);
    }
}

/* Rank 0's split of the training set, for the summary. */
static void on_partition(run *r, const event_partition *pa)
{
    uint64_t *copy = NULL;

    if (!EVENT_HAS(pa, partition, samples))
        return;
    if (pa->samples.n > 0) {
        copy = malloc(pa->samples.n * sizeof(*copy));
        if (copy == NULL)
            return;
        memcpy(copy, pa->samples.v, pa->samples.n * sizeof(*copy));
    }
    free(r->samples);
    r->samples = copy;
    r->nsamples = pa->samples.n;
    r->have_samples = 1;
    r->skew = pa->skew;
}

static void on_done(run *r, size_t w, const event_done *d)
{
    if (EVENT_HAS(d, done, test_accuracy_last5)) {
        r->acc_last5 = d->test_accuracy_last5;
        r->have_last5 = 1;
    }
    if (EVENT_HAS(d, done, test_miou)) {
        r->miou = d->test_miou;
        r->have_miou = 1;
    }
    if (EVENT_HAS(d, done, test_miou_last5)) {
        r->miou_last5 = d->test_miou_last5;
        r->have_miou_last5 = 1;
    }
    r->have_late |= EVENT_HAS(d, done, late_clients);
    if (r->rank_done == NULL)
        r->rank_done = calloc(r->spec.workers, 1);
    if (r->rank_done != NULL && w < r->spec.workers) {
        if (r->rank_done[w])
            return; /* a second done event of a rank counts once */
        r->rank_done[w] = 1;
    }
    r->done++;
    jobenergy_add(&r->energy, "", d); /* one node: flrun's */
    on_done_timing(r, d);
    on_done_settings(r, d);
    r->late_clients += d->late_clients;
    r->client_rounds += d->client_rounds;
    r->bytes_sent += d->bytes_sent;
    r->bytes_received += d->bytes_received;
    r->dense_bytes += d->dense_bytes;
    r->warmup_bytes_sent += d->warmup_bytes_sent;
    /* A saps worker's: its exchanges, the matchings it computed (held
     * against the others'), the workers it knows dead, the consensus. */
    sapsfold_add(&r->saps, d, r->spec.workers);
}

int flrun_on_worker_line(void *arg, proc *p, const char *line)
{
    run *r = arg;
    size_t w = (size_t)(p - r->procs) - r->nservers;
    event ev;
    int is_event;

    /* A line that breaks the schema still gives what it has right (a
     * command: job's program may print fewer fields than flworker); one
     * that is no event is the caller's to show. */
    event_read(line, strlen(line), 0, &ev, NULL, 0);
    switch (ev.kind) {
    case EVENT_PROGRESS:
        on_progress(r, w, &ev.progress);
        break;
    case EVENT_EVAL:
        on_eval(r, &ev.eval);
        break;
    case EVENT_PROFILE:
        if (w == 0) /* rank 0 speaks for all */
            on_profile(r, line);
        break;
    case EVENT_PARTITION:
        if (w == 0)
            on_partition(r, &ev.partition);
        break;
    case EVENT_DONE:
        on_done(r, w, &ev.done);
        break;
    default:
        break;
    }
    is_event = ev.kind != EVENT_NONE;
    event_fini(&ev);
    return is_event;
}

/* A setting the workers ran, held against the job file: ran (what their
 * done events say; "" when none said it), job (the file's value as it
 * writes it) and whether the workers' differs from what the file gives
 * (services/jobspec.h: jobspec_ran_differs). */
typedef struct ran_setting {
    const char *key;
    const char *ran;
    uint32_t said;
    char job[64];
    int differs;
} ran_setting;

enum { RAN_COMPRESSION, RAN_MODE, RAN_N };

static void ran_settings(const run *r, ran_setting out[RAN_N])
{
    memset(out, 0, RAN_N * sizeof(*out));
    out[RAN_COMPRESSION].key = "compression";
    out[RAN_COMPRESSION].ran = r->ran_compression;
    out[RAN_COMPRESSION].said = r->said_compression;
    out[RAN_MODE].key = "mode";
    out[RAN_MODE].ran = r->ran_mode;
    out[RAN_MODE].said = r->said_mode;
    for (int i = 0; i < RAN_N; i++)
        out[i].differs = jobspec_ran_differs(&r->spec, out[i].key, out[i].ran,
                                             out[i].job, sizeof(out[i].job));
}

/* Every setting the workers ran other than the job file says, on stderr
 * whether quiet or not: such a run is not the job the file describes. */
static void warn_mismatches(const ran_setting st[RAN_N])
{
    for (int i = 0; i < RAN_N; i++) {
        if (!st[i].differs)
            continue;
        if (strcmp(st[i].ran, "mixed") == 0)
            fprintf(stderr,
                    "flrun: MISMATCH: the workers ran different %s settings "
                    "(the job file's is %s); this run is not the job the "
                    "file describes\n",
                    st[i].key, st[i].job);
        else
            fprintf(stderr,
                    "flrun: MISMATCH: the job file says %s: %s but the "
                    "workers ran %s; this run is not the job the file "
                    "describes\n",
                    st[i].key, st[i].job, st[i].ran);
    }
}

/* The results some worker did not report: the words of the summary's
 * not_reported list, into out (at most 2 + RAN_N); returns how many. A
 * setting counts where the job file gives it (one it leaves out has
 * nothing to hold the workers' against). */
static size_t gaps_of(const run *r, const ran_setting st[RAN_N],
                      const char *out[2 + RAN_N])
{
    size_t n = 0;

    if (!r->have_accuracy)
        out[n++] = "test_accuracy";
    if (r->done < r->spec.workers)
        out[n++] = "done";
    for (int i = 0; i < RAN_N; i++)
        if (st[i].said < r->spec.workers &&
            jobspec_is_given(&r->spec, st[i].key))
            out[n++] = st[i].key;
    return n;
}

/* The ranks that printed no done event, sep between them, on f. */
static void print_silent_ranks(FILE *f, const run *r, const char *sep)
{
    const char *s = "";

    for (uint32_t w = 0; w < r->spec.workers; w++) {
        if (r->rank_done != NULL && r->rank_done[w])
            continue;
        fprintf(f, "%s%u", s, w);
        s = sep;
    }
}

/* The summary's not_reported and ranks_not_reported fields, when a
 * result is missing (a worker that printed no done event leaves its
 * bytes out of the totals). */
static void print_gaps(const run *r, const ran_setting st[RAN_N])
{
    const char *gaps[2 + RAN_N];
    size_t n = gaps_of(r, st, gaps);

    if (n == 0)
        return;
    printf(",\"not_reported\":[");
    for (size_t i = 0; i < n; i++)
        printf("%s\"%s\"", i ? "," : "", gaps[i]);
    printf("]");
    if (r->done < r->spec.workers) {
        printf(",\"ranks_not_reported\":[");
        print_silent_ranks(stdout, r, ",");
        printf("]");
    }
}

/* Unless quiet: one line on stderr naming a test accuracy and done events
 * that never came. */
static void say_gaps(const run *r)
{
    if (r->quiet || (r->have_accuracy && r->done == r->spec.workers))
        return;
    fprintf(stderr, "flrun: not reported:");
    if (!r->have_accuracy)
        fprintf(stderr,
                " a test accuracy (rank 0 reports it with "
                "flps.report(test_accuracy=...))%s",
                r->done < r->spec.workers ? ";" : "");
    if (r->done < r->spec.workers) {
        fprintf(stderr, " the done event of rank ");
        print_silent_ranks(stderr, r, ", ");
        fprintf(stderr, " (the byte counts leave it out)");
    }
    fputc('\n', stderr);
}

/* The summary's "compression", "mode" (what the workers ran, where they
 * said it), "optimizer" and "mismatch" fields. */
static void print_ran(const run *r, const ran_setting st[RAN_N])
{
    const char *sep = "";
    int any = 0;

    for (int i = 0; i < RAN_N; i++) {
        if (st[i].ran[0] != '\0')
            printf(",\"%s\":\"%s\"", st[i].key, st[i].ran);
        any |= st[i].differs;
    }
    if (r->ran_optimizer[0] != '\0')
        printf(",\"optimizer\":\"%s\"", r->ran_optimizer);
    if (!any)
        return;
    printf(",\"mismatch\":[");
    for (int i = 0; i < RAN_N; i++)
        if (st[i].differs) {
            printf("%s\"%s: the job file says %s, the workers ran %s\"", sep,
                   st[i].key, st[i].job, st[i].ran);
            sep = ",";
        }
    printf("]");
}

/* The summary's energy: the job's joules per iteration (services/
 * jobenergy.h: what several workers read alike counts once), the parts of
 * the kinds of device metered, the method, and the GPU clock the workers
 * ran at; nothing where no worker measured energy. */
static void print_energy(const run *r)
{
    double total, gpu, cpu;
    int has_gpu, has_cpu;

    if (jobenergy_total(&r->energy, &total, &gpu, &cpu, &has_gpu, &has_cpu)) {
        printf(",\"joules_per_iteration\":%.6f", total);
        if (has_gpu)
            printf(",\"gpu_joules_per_iteration\":%.6f", gpu);
        if (has_cpu)
            printf(",\"cpu_joules_per_iteration\":%.6f", cpu);
        printf(",\"energy_method\":\"%s\"", r->energy.method);
    }
    if (r->energy.clock[0] != '\0')
        printf(",\"gpu_clock\":\"%s\"", r->energy.clock);
}

/* The energy for the one-line report: "3.21 J per iteration (GPUs 2.9,
 * CPU packages 0.31), gpu_clock 1830 MHz, ". */
static void say_energy(const run *r)
{
    double total, gpu, cpu;
    int has_gpu, has_cpu;

    if (jobenergy_total(&r->energy, &total, &gpu, &cpu, &has_gpu, &has_cpu)) {
        fprintf(stderr, "%.3g J per iteration", total);
        if (has_gpu && has_cpu)
            fprintf(stderr, " (GPUs %.3g, CPU packages %.3g)", gpu, cpu);
        else
            fprintf(stderr, " (%s)", has_gpu ? "GPUs" : "CPU packages");
        fprintf(stderr, ", ");
    }
    if (r->energy.clock[0] != '\0')
        fprintf(stderr, "gpu_clock %s%s, ", r->energy.clock,
                strcmp(r->energy.clock, "default") != 0 &&
                        strcmp(r->energy.clock, "mixed") != 0
                    ? " MHz"
                    : "");
}

/* The one-line report on stderr: the accuracy (or that none came), what
 * ran and the bytes. */
static void print_done_line(const run *r, const ran_setting st[RAN_N],
                            double wall)
{
    char acc[64];

    if (r->quiet)
        return;
    if (r->have_accuracy && r->saps.have_consensus_accuracy)
        snprintf(acc, sizeof(acc),
                 "test accuracy %.4f (the workers' average: %.4f)",
                 r->test_accuracy, r->saps.accuracy);
    else if (r->have_accuracy)
        snprintf(acc, sizeof(acc), "test accuracy %.4f", r->test_accuracy);
    else
        snprintf(acc, sizeof(acc), "test accuracy not reported");
    if (r->nlost > 0)
        fprintf(stderr,
                "flrun: %u of %u workers stopped during the job; mode saps "
                "went on without them (workers_lost in the summary)\n",
                r->nlost, r->spec.workers);
    fprintf(stderr, "flrun: done in %.1f s: %s; ", wall, acc);
    for (int i = 0; i < RAN_N; i++)
        if (st[i].ran[0] != '\0')
            fprintf(stderr, "%s %s, ", st[i].key, st[i].ran);
    say_energy(r);
    fprintf(stderr,
            "workers sent %llu bytes, %.2f%% of the %llu a dense run sends\n",
            (unsigned long long)r->bytes_sent,
            r->dense_bytes
                ? 100.0 * (double)r->bytes_sent / (double)r->dense_bytes
                : 0.0,
            (unsigned long long)r->dense_bytes);
}

/* A fedavg job's strategy, as the job file says it: the clients per
 * round, the server optimizer, FedProx's mu. */
static void print_strategy(const run *r)
{
    const uint32_t clients =
        r->spec.clients ? r->spec.clients : r->spec.workers;
    char sopt[64];

    jobspec_server_opt_format(&r->spec, sopt, sizeof(sopt));
    printf(",\"clients\":%u,\"clients_per_round\":%u,"
           "\"server_optimizer\":\"%s\",\"prox_mu\":%.17g",
           clients, flps_fl_round_size(clients, r->spec.client_fraction), sopt,
           r->spec.prox_mu);
}

/* A saps job's part of the summary: its rounds and exchanges, the share
 * of them over slow links, the bytes of the exchanges and probes, the
 * consensus, the workers lost (dead in a done event, or stopped under
 * flrun) and whether every worker computed the same matchings. */
static void print_saps(const run *r)
{
    const jobspec *sp = &r->spec;
    const char *sep = "";
    uint64_t rounds = (sp->iterations + sp->local_steps - 1) / sp->local_steps;

    printf(",\"rounds\":%llu,\"peer_selection\":\"%s\","
           "\"bandwidth_threshold\":%.6g,\"exchanges\":%llu,"
           "\"skipped_exchanges\":%llu,\"idle_rounds\":%llu,"
           "\"slow_exchanges\":%llu,\"slow_exchange_share\":%.4f,"
           "\"exchange_bytes\":%llu,\"probe_bytes\":%llu",
           (unsigned long long)rounds,
           jobspec_peer_selection_name(sp->peer_selection), r->saps.threshold,
           (unsigned long long)r->saps.exchanges,
           (unsigned long long)r->saps.skipped,
           (unsigned long long)r->saps.idle, (unsigned long long)r->saps.slow,
           r->saps.exchanges ? (double)r->saps.slow / (double)r->saps.exchanges
                             : 0.0,
           (unsigned long long)r->saps.exchange_bytes,
           (unsigned long long)r->saps.probe_bytes);
    if (r->saps.have_consensus_accuracy)
        printf(",\"consensus_accuracy\":%.4f", r->saps.accuracy);
    if (r->saps.have_consensus)
        printf(",\"consensus_distance\":%.6g,\"consensus_workers\":%llu",
               r->saps.distance, (unsigned long long)r->saps.averaged);
    printf(",\"workers_lost\":[");
    for (uint32_t w = 0; w < sp->workers; w++) {
        if ((r->lost == NULL || !r->lost[w]) &&
            (r->saps.dead == NULL || !r->saps.dead[w]))
            continue;
        printf("%s%u", sep, w);
        sep = ",";
    }
    printf("],\"matchings_agree\":%s",
           r->saps.said > 0 && !r->saps.digest_differs ? "true" : "false");
}

void flrun_print_summary(const run *r, double wall)
{
    ran_setting st[RAN_N];

    ran_settings(r, st);
    print_done_line(r, st, wall);
    say_gaps(r);
    warn_mismatches(st);
    if (r->have_accuracy)
        printf("{\"test_accuracy\":%.4f", r->test_accuracy);
    else
        printf("{\"test_accuracy\":null");
    printf(",\"iterations\":%llu,\"bytes_sent\":%llu,"
           "\"bytes_received\":%llu,\"dense_bytes\":%llu,"
           "\"wall_seconds\":%.3f,\"transport\":\"%s\","
           "\"data_plane\":\"%s\"",
           (unsigned long long)r->total, (unsigned long long)r->bytes_sent,
           (unsigned long long)r->bytes_received,
           (unsigned long long)r->dense_bytes, wall, r->transport,
           r->data_plane);
    print_ran(r, st);
    print_gaps(r, st);
    if (r->have_samples) {
        printf(",\"partition_skew\":%.6f,\"samples_per_client\":[", r->skew);
        for (size_t i = 0; i < r->nsamples; i++)
            printf("%s%llu", i ? "," : "", (unsigned long long)r->samples[i]);
        printf("]");
    }
    if (r->spec.density_warmup > 0)
        /* The warm-up's share of the bytes: what its denser start cost. */
        printf(",\"density_warmup\":%llu,\"density_warmup_start\":%.17g,"
               "\"warmup_bytes_sent\":%llu",
               (unsigned long long)r->spec.density_warmup,
               r->spec.density_warmup_start,
               (unsigned long long)r->warmup_bytes_sent);
    if (r->spec.mode == JOBSPEC_MODE_FEDAVG)
        printf(",\"rounds\":%u,\"test_accuracy_last5\":%.4f,"
               "\"bytes_per_round\":%.0f",
               r->spec.rounds, r->have_last5 ? r->acc_last5 : r->test_accuracy,
               (double)r->bytes_sent / (double)r->spec.rounds);
    if (r->spec.mode == JOBSPEC_MODE_FEDAVG)
        print_strategy(r);
    /* A client of a user's program can be late without a deadline: its
     * process died. */
    if (r->spec.mode == JOBSPEC_MODE_FEDAVG &&
        (r->spec.round_deadline > 0 || (r->have_late && r->late_clients > 0)))
        printf(",\"late_clients\":%llu,\"client_rounds\":%llu",
               (unsigned long long)r->late_clients,
               (unsigned long long)r->client_rounds);
    if (r->have_miou)
        printf(",\"test_miou\":%.4f", r->miou);
    if (r->have_miou_last5)
        printf(",\"test_miou_last5\":%.4f", r->miou_last5);
    if (r->spec.mode == JOBSPEC_MODE_SAPS)
        print_saps(r);
    if (r->backend[0] != '\0')
        printf(",\"backend\":\"%s\"", r->backend);
    print_energy(r);
    print_timing(r);
    printf("}\n");
    fflush(stdout);
}

void flrun_report_fini(run *r)
{
    for (size_t i = 0; r->layer_names != NULL && i < r->nlayers; i++)
        free(r->layer_names[i]);
    free(r->layer_names);
    free(r->layer_bytes);
    free(r->samples);
    free(r->rank_done);
    sapsfold_fini(&r->saps);
}
