/* flsubmit's human output: the scheduler's JSON turned into tables,
 * progress lines and summaries, without I/O. */
#include "cli/submit_render.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/numparse.h"
#include "common/strbuf.h"
#include "services/plural.h"
#include "services/tasklog.h"

/* The renderers append to an flps_strbuf without checking each call: its
 * first failed allocation sticks, and the result is tested once here. */
static flps_err sb_finish(flps_strbuf *b, char **out)
{
    char *s = flps_strbuf_take(b);

    if (s == NULL)
        return FLPS_ENOMEM;
    *out = s;
    return FLPS_OK;
}

/* Accessors that accept what a Redis-backed API may send: numbers as JSON
 * numbers or as decimal strings (Redis hashes store strings), and null for
 * "not yet". They return 1 and write *out only when the value is usable. */
static int get_num(const json_t *o, const char *key, double *out)
{
    json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    const char *s;
    double d;

    if (json_is_number(v)) {
        d = json_number_value(v);
    } else if (json_is_string(v)) {
        s = json_string_value(v);
        if (flps_parse_double(NULL, s, -DBL_MAX, DBL_MAX, &d, NULL, 0) !=
            FLPS_OK)
            return 0;
    } else {
        return 0;
    }
    if (!isfinite(d))
        return 0;
    *out = d;
    return 1;
}

static const char *get_str(const json_t *o, const char *key)
{
    json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;

    return json_is_string(v) ? json_string_value(v) : NULL;
}

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
    const char *s = get_str(o, key);

    return s != NULL && *s != '\0' ? s : dflt;
}

static void fmt_units(double v, const char *const *units, int nunits,
                      double step, int drop_zero, char *buf, size_t len)
{
    int i = 0;
    int n;

    if (len == 0)
        return;
    if (!isfinite(v) || v < 0) {
        snprintf(buf, len, "-");
        return;
    }
    /* Compare against the rounded value, so 999.96 kB prints as 1.0 MB
     * rather than 1000.0 kB. */
    while (i + 1 < nunits && (i == 0 ? v : round(v * 10) / 10) >= step) {
        v /= step;
        i++;
    }
    if (i == 0) {
        snprintf(buf, len, "%.0f %s", v, units[0]);
        return;
    }
    n = snprintf(buf, len, "%.1f", v);
    if (drop_zero && n >= 2 && (size_t)n < len && buf[n - 1] == '0' &&
        buf[n - 2] == '.')
        n -= 2;
    if (n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " %s", units[i]);
}

void submit_render_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};

    fmt_units(bytes, units, 6, 1000, 0, buf, len);
}

void submit_render_bytes_iec(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};

    fmt_units(bytes, units, 6, 1024, 1, buf, len);
}

void submit_render_duration(double seconds, char *buf, size_t len)
{
    double r;
    unsigned long long s;

    if (len == 0)
        return;
    if (!isfinite(seconds) || seconds < 0 || seconds > 1e15) {
        snprintf(buf, len, "-");
        return;
    }
    r = round(seconds);
    s = (unsigned long long)r;
    if (s < 60)
        snprintf(buf, len, "%llus", s);
    else if (s < 3600)
        snprintf(buf, len, "%llum%02llus", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, len, "%lluh%02llum", s / 3600, s % 3600 / 60);
    else
        snprintf(buf, len, "%llud%02lluh", s / 86400, s % 86400 / 3600);
}

int submit_render_state_is_final(const char *state)
{
    return state != NULL &&
           (strcmp(state, "SUCCEEDED") == 0 || strcmp(state, "FAILED") == 0 ||
            strcmp(state, "CANCELLED") == 0);
}

/* The numbers a progress line shows, with a flag for each that was sent. */
typedef struct prog {
    int has_total, has_iter, has_loss, has_acc, has_sent, has_dense;
    int has_elapsed;
    double total, iter, loss, acc, sent, dense, elapsed;
} prog;

static void prog_read(const json_t *job, prog *p)
{
    json_t *pr = json_object_get(job, "progress");
    json_t *sum = json_object_get(job, "summary");

    memset(p, 0, sizeof(*p));
    p->has_total = get_num(job, "iterations", &p->total) && p->total > 0;
    p->has_iter = get_num(pr, "iteration", &p->iter);
    p->has_loss = get_num(pr, "loss", &p->loss);
    p->has_acc = get_num(pr, "test_accuracy", &p->acc);
    p->has_sent = get_num(pr, "bytes_sent", &p->sent);
    p->has_dense = get_num(pr, "dense_bytes", &p->dense) && p->dense > 0;
    p->has_elapsed = get_num(pr, "elapsed", &p->elapsed);
    /* Once finished, the summary is the authority: the scheduler wrote it
     * from every worker's done event. */
    if (json_is_object(sum)) {
        double v;

        if (get_num(sum, "iterations", &v)) {
            p->iter = v;
            p->has_iter = 1;
        }
        if (get_num(sum, "test_accuracy", &v)) {
            p->acc = v;
            p->has_acc = 1;
        }
        if (get_num(sum, "bytes_sent", &v)) {
            p->sent = v;
            p->has_sent = 1;
        }
        if (get_num(sum, "dense_bytes", &v) && v > 0) {
            p->dense = v;
            p->has_dense = 1;
        }
        if (get_num(sum, "wall_seconds", &v)) {
            p->elapsed = v;
            p->has_elapsed = 1;
        }
    }
}

static double prog_fraction(const prog *p)
{
    double f;

    if (!p->has_total || !p->has_iter || p->iter <= 0)
        return 0;
    f = p->iter / p->total;
    return f > 1 ? 1 : f;
}

double submit_render_fraction(const json_t *job)
{
    prog p;

    prog_read(job, &p);
    return prog_fraction(&p);
}

/* How a progress body is laid out. */
enum {
    PROG_LIVE = 1,    /* add the ETA and the restarts (meaningless once the
                         job has ended) */
    PROG_COMPACT = 2, /* for a narrow terminal: a short bar, no "iter" and
                         "of dense" words, the ETA before the bytes */
};

static void sb_eta(flps_strbuf *b, const prog *p, double frac, const char *sep)
{
    char eta[32];

    if (frac >= 1)
        submit_render_duration(0, eta, sizeof(eta));
    else if (p->has_elapsed && p->has_total && p->has_iter && p->iter > 0)
        submit_render_duration(p->elapsed * (p->total - p->iter) / p->iter, eta,
                               sizeof(eta));
    else
        snprintf(eta, sizeof(eta), "-");
    flps_strbuf_printf(b, "%sETA %s", sep, eta);
}

/* "[####....]  50.0%  iter 750/1500  loss ...  ETA 8s": the part of the
 * progress line after the state. */
static void sb_progress_body(flps_strbuf *b, const json_t *job, int how)
{
    int compact = how & PROG_COMPACT, live = how & PROG_LIVE;
    const char *sep = compact ? " " : "  ";
    int width = compact ? SUBMIT_RENDER_BAR_WIDTH / 2 : SUBMIT_RENDER_BAR_WIDTH;
    char bar[SUBMIT_RENDER_BAR_WIDTH + 1], sent[32];
    double frac, restarts, max_restarts;
    int fill;
    prog p;

    prog_read(job, &p);
    frac = prog_fraction(&p);
    fill = (int)floor(frac * width);
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    flps_strbuf_printf(b, "[%s] %5.1f%%%s%s", bar, frac * 100, sep,
                       compact ? "" : "iter ");
    if (p.has_iter)
        flps_strbuf_printf(b, "%.0f", p.iter);
    else
        flps_strbuf_printf(b, "-");
    if (p.has_total)
        flps_strbuf_printf(b, "/%.0f", p.total);
    else
        flps_strbuf_printf(b, "/?");
    if (p.has_loss)
        flps_strbuf_printf(b, "%sloss %.4f", sep, p.loss);
    else
        flps_strbuf_printf(b, "%sloss -", sep);
    if (p.has_acc)
        flps_strbuf_printf(b, "%sacc %.2f%%", sep, p.acc * 100);
    else
        flps_strbuf_printf(b, "%sacc -", sep);
    if (live && compact)
        sb_eta(b, &p, frac, sep);
    if (p.has_sent) {
        submit_render_bytes(p.sent, sent, sizeof(sent));
        flps_strbuf_printf(b, "%ssent %s", sep, sent);
        if (p.has_dense)
            flps_strbuf_printf(b, compact ? " (%.2f%%)" : " (%.2f%% of dense)",
                               100 * p.sent / p.dense);
    } else {
        flps_strbuf_printf(b, "%ssent -", sep);
    }
    if (!live)
        return;
    if (!compact)
        sb_eta(b, &p, frac, sep);
    if (get_num(job, "restarts", &restarts) && restarts > 0) {
        flps_strbuf_printf(b, "%srestarts %.0f", sep, restarts);
        if (get_num(job, "max_restarts", &max_restarts))
            flps_strbuf_printf(b, "/%.0f", max_restarts);
    }
}

flps_err submit_render_progress(const json_t *job, int width, char **out)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    if (!json_is_object(job))
        return FLPS_EINVAL;
    flps_strbuf_printf(&b, "%-10s ", str_or(job, "state", "?"));
    sb_progress_body(&b, job, PROG_LIVE);
    if (!b.failed && width > 0 && b.len > (size_t)width - 1) {
        /* Too wide: the compact layout keeps the ETA on screen; what still
         * does not fit is cut, since a wrapped line breaks the redraw. */
        flps_strbuf_clear(&b);
        sb_progress_body(&b, job, PROG_LIVE | PROG_COMPACT);
        if (!b.failed && b.len > (size_t)width - 1) {
            b.len = (size_t)width - 1;
            b.data[b.len] = '\0';
        }
    }
    return sb_finish(&b, out);
}

/* "Job j42 (name) FAILED: reason" */
static void sb_title(flps_strbuf *b, const json_t *job)
{
    const char *reason = str_or(job, "reason", NULL);

    flps_strbuf_printf(b, "Job %s (%s) %s", str_or(job, "id", "?"),
                       str_or(job, "name", "?"), str_or(job, "state", "?"));
    if (reason != NULL)
        flps_strbuf_printf(b, ": %s", reason);
}

/* Append the distinct nodes job's tasks run on, in the order the tasks
 * name them: first before the first, sep between the others. Returns how
 * many. */
static size_t job_nodes(const json_t *job, flps_strbuf *b, const char *first,
                        const char *sep)
{
    json_t *tasks = json_object_get(job, "tasks"), *task;
    size_t i, j, n = 0;
    const char *node;

    json_array_foreach(tasks, i, task)
    {
        int seen = 0;

        node = get_str(task, "node");
        if (node == NULL || *node == '\0')
            continue;
        for (j = 0; j < i && !seen; j++)
            seen = get_str(json_array_get(tasks, j), "node") != NULL &&
                   strcmp(get_str(json_array_get(tasks, j), "node"), node) == 0;
        if (!seen)
            flps_strbuf_printf(b, "%s%s", n++ ? sep : first, node);
    }
    return n;
}

flps_err submit_render_state_line(const json_t *job, char **out)
{
    const char *state, *reason;
    double x, y, restarts = 0;
    flps_strbuf b = FLPS_STRBUF_INIT;

    if (!json_is_object(job))
        return FLPS_EINVAL;
    state = str_or(job, "state", "?");
    if (submit_render_state_is_final(state)) {
        sb_title(&b, job);
        return sb_finish(&b, out);
    }
    flps_strbuf_printf(&b, "%-10s ", state);
    reason = str_or(job, "reason", NULL);
    get_num(job, "restarts", &restarts);
    if (strcmp(state, "QUEUED") == 0 && restarts > 0 && reason != NULL) {
        flps_strbuf_printf(&b, "restart %.0f", restarts);
        if (get_num(job, "max_restarts", &x))
            flps_strbuf_printf(&b, "/%.0f", x);
        flps_strbuf_printf(&b, ": %s", reason);
    } else if (strcmp(state, "QUEUED") == 0) {
        if (get_num(job, "workers", &x) && get_num(job, "servers", &y))
            flps_strbuf_printf(&b,
                               "waiting for %.0f %s and %.0f %s to be placed",
                               x, plural_word(x, "worker", "workers"), y,
                               plural_word(y, "server", "servers"));
        else
            flps_strbuf_printf(&b, "waiting to be placed");
    } else if (strcmp(state, "RUNNING") == 0) {
        flps_strbuf_printf(&b, "attempt %.0f",
                           get_num(job, "attempt", &x) ? x : 0.0);
        job_nodes(job, &b, " on ", ", ");
    }
    return sb_finish(&b, out);
}

/* "  key              value\n" lines of the summary and status views. */
#define KV_FMT "  %-16s %s\n"

/* What the workers ran (their done events' words, "mixed" where they
 * differ), each setting they ran other than the job file gives, and what
 * they did not report: the summary's compression, mode, optimizer,
 * mismatch and not_reported. */
static void sb_summary_ran(flps_strbuf *b, const json_t *sum)
{
    static const char *const keys[] = {"compression", "mode", "optimizer"};
    json_t *list = json_object_get(sum, "mismatch");
    json_t *v;
    size_t i;

    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (get_str(sum, keys[i]) != NULL)
            flps_strbuf_printf(b, KV_FMT, keys[i], get_str(sum, keys[i]));
    json_array_foreach(list, i, v)
    {
        if (json_is_string(v))
            flps_strbuf_printf(b, KV_FMT, "MISMATCH", json_string_value(v));
    }
    list = json_object_get(sum, "not_reported");
    if (json_array_size(list) == 0)
        return;
    flps_strbuf_printf(b, "  %-16s ", "not reported");
    json_array_foreach(list, i, v)
    {
        if (json_is_string(v))
            flps_strbuf_printf(b, "%s%s", i ? ", " : "", json_string_value(v));
    }
    flps_strbuf_printf(b, "\n");
}

/* A saps job's bandwidth matrix (the summary's bandwidth_mbps: rows of
 * MB/s the workers measured), compact: one row per worker, "-" on the
 * diagonal. */
static void sb_bandwidth(flps_strbuf *b, const json_t *rows)
{
    size_t n = json_array_size(rows), i, j;
    json_t *row, *v;

    if (n == 0)
        return;
    flps_strbuf_printf(b, "  %-16s ", "bandwidth MB/s");
    for (j = 0; j < n; j++)
        flps_strbuf_printf(b, "%7zu", j);
    flps_strbuf_printf(b, "\n");
    json_array_foreach(rows, i, row)
    {
        flps_strbuf_printf(b, "  %16zu ", i);
        json_array_foreach(row, j, v)
        {
            if (i == j)
                flps_strbuf_printf(b, "%7s", "-");
            else
                flps_strbuf_printf(b, "%7.1f", json_number_value(v));
        }
        flps_strbuf_printf(b, "\n");
    }
}

/* A saps job's consensus, exchanges and lost workers (the summary's
 * fields that flrun's has too), then its bandwidth matrix. */
static void sb_summary_saps(flps_strbuf *b, const json_t *sum)
{
    json_t *lost = json_object_get(sum, "workers_lost"), *v;
    double x, y;
    size_t i;

    if (get_num(sum, "consensus_accuracy", &x))
        flps_strbuf_printf(b, "  %-16s %.2f%% (the workers' average model)\n",
                           "consensus acc.", x * 100);
    if (get_num(sum, "consensus_distance", &x) &&
        get_num(sum, "consensus_workers", &y))
        flps_strbuf_printf(b, "  %-16s %.4g (mean over %.0f workers)\n",
                           "consensus dist.", x, y);
    if (get_num(sum, "exchanges", &x) &&
        get_num(sum, "slow_exchange_share", &y))
        flps_strbuf_printf(b, "  %-16s %.0f, %.1f%% over slow links\n",
                           "exchanges", x, 100 * y);
    if (json_array_size(lost) > 0) {
        flps_strbuf_printf(b, "  %-16s ", "workers lost");
        json_array_foreach(lost, i, v) flps_strbuf_printf(
            b, "%s%lld", i ? ", " : "", (long long)json_integer_value(v));
        flps_strbuf_printf(b, " (the others went on)\n");
    }
    sb_bandwidth(b, json_object_get(sum, "bandwidth_mbps"));
}

static void sb_summary_fields(flps_strbuf *b, const json_t *sum)
{
    const char *s;
    char v1[32], v2[32];
    double x, dense;

    if (get_num(sum, "iterations", &x))
        flps_strbuf_printf(b, "  %-16s %.0f\n", "iterations", x);
    if (get_num(sum, "test_accuracy", &x))
        flps_strbuf_printf(b, "  %-16s %.2f%%\n", "test accuracy", x * 100);
    else if (json_is_null(json_object_get(sum, "test_accuracy")))
        /* A job whose program reported none: not 0%. */
        flps_strbuf_printf(b, KV_FMT, "test accuracy", "not reported");
    sb_summary_ran(b, sum);
    if (get_num(sum, "bytes_sent", &x)) {
        submit_render_bytes(x, v1, sizeof(v1));
        if (get_num(sum, "dense_bytes", &dense) && dense > 0) {
            submit_render_bytes(dense, v2, sizeof(v2));
            flps_strbuf_printf(b, "  %-16s %s (%.2f%% of dense %s)\n",
                               "bytes sent", v1, 100 * x / dense, v2);
        } else {
            flps_strbuf_printf(b, KV_FMT, "bytes sent", v1);
        }
    }
    if (get_num(sum, "bytes_received", &x)) {
        submit_render_bytes(x, v1, sizeof(v1));
        flps_strbuf_printf(b, KV_FMT, "bytes received", v1);
    }
    if (get_num(sum, "joules_per_iteration", &x))
        /* What several workers read alike counted once (jobenergy.h). */
        flps_strbuf_printf(b, "  %-16s %.3g J/iteration\n", "energy", x);
    if ((s = get_str(sum, "gpu_clock")) != NULL)
        flps_strbuf_printf(b, "  %-16s %s%s\n", "gpu clock", s,
                           s[0] >= '0' && s[0] <= '9' ? " MHz" : "");
    if (get_num(sum, "wall_seconds", &x)) {
        if (x < 60)
            snprintf(v1, sizeof(v1), "%.1fs", x);
        else
            submit_render_duration(x, v1, sizeof(v1));
        flps_strbuf_printf(b, KV_FMT, "wall time", v1);
    }
    sb_summary_saps(b, sum);
}

flps_err submit_render_summary(const json_t *job, char **out)
{
    json_t *sum;
    double restarts, max_restarts, t0, t1;
    char dur[32];
    flps_strbuf b = FLPS_STRBUF_INIT;

    if (!json_is_object(job))
        return FLPS_EINVAL;
    sum = json_object_get(job, "summary");
    sb_title(&b, job);
    flps_strbuf_printf(&b, "\n");
    if (get_num(job, "restarts", &restarts) && restarts > 0) {
        flps_strbuf_printf(&b, "  %-16s %.0f", "restarts", restarts);
        if (get_num(job, "max_restarts", &max_restarts))
            flps_strbuf_printf(&b, "/%.0f", max_restarts);
        flps_strbuf_printf(&b, "\n");
    }
    if (json_is_object(sum)) {
        sb_summary_fields(&b, sum);
    } else {
        if (json_is_object(json_object_get(job, "progress"))) {
            flps_strbuf_printf(&b, "  %-16s ", "last progress");
            sb_progress_body(&b, job, 0);
            flps_strbuf_printf(&b, "\n");
        }
        if (get_num(job, "started_at", &t0) &&
            get_num(job, "finished_at", &t1) && t1 >= t0) {
            submit_render_duration(t1 - t0, dur, sizeof(dur));
            flps_strbuf_printf(&b, KV_FMT, "ran for", dur);
        }
    }
    return sb_finish(&b, out);
}

/* A table of text cells, printed with columns as wide as their widest
 * cell, three spaces apart, and no trailing spaces (kubectl's layout).
 * Each cell is a copy as long as its text: a long job name or endpoint
 * is shown whole. */
#define TABLE_MAX_COLS 16

typedef struct table {
    int ncols;
    size_t nrows, cap;
    char *(*cells)[TABLE_MAX_COLS]; /* owned, each cell too */
    int oom;
} table;

/* Add row[0..ncols) (NULL cells show as "-"). */
static void table_add_row(table *t, const char *const *row)
{
    if (t->oom)
        return;
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        void *p = flps_realloc(t->cells, cap * sizeof(*t->cells));

        if (p == NULL) {
            t->oom = 1;
            return;
        }
        t->cells = p;
        t->cap = cap;
    }
    memset(t->cells[t->nrows], 0, sizeof(*t->cells));
    for (int c = 0; c < t->ncols; c++) {
        t->cells[t->nrows][c] = flps_strdup(row[c] != NULL ? row[c] : "-");
        if (t->cells[t->nrows][c] == NULL)
            t->oom = 1;
    }
    t->nrows++; /* counted even when a cell failed: table_fini frees it */
}

static void table_add(table *t, ...)
{
    const char *row[TABLE_MAX_COLS];
    va_list ap;

    va_start(ap, t);
    for (int c = 0; c < t->ncols; c++)
        row[c] = va_arg(ap, const char *);
    va_end(ap);
    table_add_row(t, row);
}

static void table_print(table *t, flps_strbuf *b, const char *indent)
{
    size_t w[TABLE_MAX_COLS] = {0};

    if (t->oom) {
        b->failed = 1; /* the table's failure is the text's */
        return;
    }
    for (size_t r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++)
            if (strlen(t->cells[r][c]) > w[c])
                w[c] = strlen(t->cells[r][c]);
    for (size_t r = 0; r < t->nrows; r++) {
        flps_strbuf_printf(b, "%s", indent);
        for (int c = 0; c < t->ncols; c++) {
            if (c + 1 < t->ncols)
                flps_strbuf_printf(b, "%-*s   ", (int)w[c], t->cells[r][c]);
            else
                flps_strbuf_printf(b, "%s\n", t->cells[r][c]);
        }
    }
}

static void table_fini(table *t)
{
    for (size_t r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++)
            flps_free(t->cells[r][c]);
    flps_free(t->cells);
}

/* A count field of o as a cell: "4", or "-" when it is missing. */
static void count_cell(const json_t *o, const char *key, char *buf, size_t len)
{
    double x;

    if (get_num(o, key, &x))
        snprintf(buf, len, "%.0f", x);
    else
        snprintf(buf, len, "-");
}

/* The -o wide cells of a job row: WORKERS SERVERS PRIORITY TRANSPORT SENT
 * NODES, into row[at..at+6); the texts they point to live in w. */
typedef struct jobs_wide {
    char workers[24], servers[24], priority[24], sent[48];
    flps_strbuf nodes;
} jobs_wide;

static void jobs_wide_cells(jobs_wide *w, const json_t *job, const prog *p,
                            const char **row, int at)
{
    const char *tr = get_str(job, "transport_used");

    count_cell(job, "workers", w->workers, sizeof(w->workers));
    count_cell(job, "servers", w->servers, sizeof(w->servers));
    count_cell(job, "priority", w->priority, sizeof(w->priority));
    snprintf(w->sent, sizeof(w->sent), "-");
    if (p->has_sent) {
        submit_render_bytes(p->sent, w->sent, sizeof(w->sent));
        if (p->has_dense)
            snprintf(w->sent + strlen(w->sent),
                     sizeof(w->sent) - strlen(w->sent), " (%.2f%%)",
                     100 * p->sent / p->dense);
    }
    if (job_nodes(job, &w->nodes, "", ",") == 0)
        flps_strbuf_puts(&w->nodes, "-");
    row[at] = w->workers;
    row[at + 1] = w->servers;
    row[at + 2] = w->priority;
    row[at + 3] =
        tr != NULL && *tr != '\0' ? tr : str_or(job, "transport", "-");
    row[at + 4] = w->sent;
    row[at + 5] = w->nodes.data;
}

static flps_err render_jobs(const json_t *jobs, double now, int wide,
                            char **out)
{
    static const char *const head[] = {
        "ID",        "NAME", "STATE",   "PROGRESS", "ACCURACY",
        "RESTARTS",  "AGE",  "WORKERS", "SERVERS",  "PRIORITY",
        "TRANSPORT", "SENT", "NODES"};
    table t = {.ncols = wide ? 13 : 7};
    flps_strbuf b = FLPS_STRBUF_INIT;
    size_t i;
    json_t *job;

    if (!json_is_array(jobs))
        return FLPS_EINVAL;
    if (json_array_size(jobs) == 0) {
        flps_strbuf_printf(&b, "No jobs.\n");
        return sb_finish(&b, out);
    }
    table_add_row(&t, head);
    json_array_foreach(jobs, i, job)
    {
        char progress[48] = "-", acc[16] = "-", restarts[32] = "-",
             age[16] = "-";
        double x, y;
        prog p;

        prog_read(job, &p);
        if (p.has_iter && p.has_total)
            snprintf(progress, sizeof(progress), "%.0f/%.0f", p.iter, p.total);
        else if (p.has_total)
            snprintf(progress, sizeof(progress), "0/%.0f", p.total);
        if (p.has_acc)
            snprintf(acc, sizeof(acc), "%.2f%%", p.acc * 100);
        if (get_num(job, "restarts", &x)) {
            if (get_num(job, "max_restarts", &y))
                snprintf(restarts, sizeof(restarts), "%.0f/%.0f", x, y);
            else
                snprintf(restarts, sizeof(restarts), "%.0f", x);
        }
        if (get_num(job, "submitted_at", &x))
            submit_render_duration(now - x, age, sizeof(age));
        {
            const char *row[TABLE_MAX_COLS] = {str_or(job, "id", "?"),
                                               str_or(job, "name", "-"),
                                               str_or(job, "state", "?"),
                                               progress,
                                               acc,
                                               restarts,
                                               age};
            jobs_wide w = {.nodes = FLPS_STRBUF_INIT};

            if (wide)
                jobs_wide_cells(&w, job, &p, row, 7);
            if (flps_strbuf_error(&w.nodes) != FLPS_OK)
                t.oom = 1;
            table_add_row(&t, row);
            flps_strbuf_fini(&w.nodes);
        }
    }
    table_print(&t, &b, "");
    table_fini(&t);
    return sb_finish(&b, out);
}

flps_err submit_render_jobs(const json_t *jobs, double now, char **out)
{
    return render_jobs(jobs, now, 0, out);
}

flps_err submit_render_jobs_wide(const json_t *jobs, double now, char **out)
{
    return render_jobs(jobs, now, 1, out);
}

static void fmt_time(const json_t *o, const char *key, char *buf, size_t len)
{
    struct tm tm;
    double x;
    time_t t;

    if (!get_num(o, key, &x) || x <= 0 || x > 1e12) {
        snprintf(buf, len, "-");
        return;
    }
    t = (time_t)x;
    if (gmtime_r(&t, &tm) == NULL ||
        strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(buf, len, "-");
}

/* "1 CPU, 512 MiB, 0 GPUs": the resources one task of a kind needs, from
 * the job's resources object; gpus_key NULL leaves GPUs out. */
static void sb_task_needs(flps_strbuf *b, const json_t *res,
                          const char *cpus_key, const char *mem_key,
                          const char *gpus_key)
{
    char mem[24];
    double x;

    if (get_num(res, cpus_key, &x))
        flps_strbuf_printf(b, "%g %s", x, plural_word(x, "CPU", "CPUs"));
    else
        flps_strbuf_puts(b, "? CPUs");
    if (get_num(res, mem_key, &x))
        submit_render_bytes_iec(x, mem, sizeof(mem));
    else
        snprintf(mem, sizeof(mem), "?");
    flps_strbuf_printf(b, ", %s", mem);
    if (gpus_key != NULL && get_num(res, gpus_key, &x))
        flps_strbuf_printf(b, ", %g %s", x, plural_word(x, "GPU", "GPUs"));
}

/* status -o wide's lines: the transport asked for and used, what each
 * task needs, the time limit. */
static void sb_status_wide(flps_strbuf *b, const json_t *job)
{
    const json_t *res = json_object_get(job, "resources");
    const char *used = get_str(job, "transport_used");
    char limit[24];
    double x;

    flps_strbuf_printf(b, "%-12s %s",
                       "Transport:", str_or(job, "transport", "-"));
    if (used != NULL && *used != '\0')
        flps_strbuf_printf(b, " (ran %s)", used);
    flps_strbuf_puts(b, "\n");
    if (json_is_object(res)) {
        flps_strbuf_printf(b, "%-12s per worker ", "Resources:");
        sb_task_needs(b, res, "cpus_per_worker", "memory_per_worker",
                      "gpus_per_worker");
        flps_strbuf_puts(b, "; per server ");
        sb_task_needs(b, res, "cpus_per_server", "memory_per_server", NULL);
        flps_strbuf_puts(b, "\n");
    }
    if (get_num(job, "time_limit", &x) && x > 0)
        submit_render_duration(x, limit, sizeof(limit));
    else
        snprintf(limit, sizeof(limit), "none");
    flps_strbuf_printf(b, "%-12s %s\n", "Time limit:", limit);
}

/* A task's EXIT cell: its exit code, "signal N", or "-" while it runs. */
static void exit_cell(const json_t *task, char *buf, size_t len)
{
    double x;

    if (get_num(task, "signal", &x) && x > 0)
        snprintf(buf, len, "signal %.0f", x);
    else if (get_num(task, "exit_code", &x))
        snprintf(buf, len, "%.0f", x);
    else
        snprintf(buf, len, "-");
}

static flps_err render_status(const json_t *job, int wide, char **out)
{
    json_t *tasks, *task, *sum;
    char when[48];
    const char *reason;
    double x, y;
    size_t i;
    flps_strbuf b = FLPS_STRBUF_INIT;
    table t = {.ncols = wide ? 5 : 4};

    if (!json_is_object(job))
        return FLPS_EINVAL;
    flps_strbuf_printf(&b, "%-12s %s\n", "ID:", str_or(job, "id", "?"));
    flps_strbuf_printf(&b, "%-12s %s\n", "Name:", str_or(job, "name", "-"));
    flps_strbuf_printf(&b, "%-12s %s\n", "State:", str_or(job, "state", "?"));
    reason = str_or(job, "reason", NULL);
    if (reason != NULL)
        flps_strbuf_printf(&b, "%-12s %s\n", "Reason:", reason);
    if (get_num(job, "priority", &x))
        flps_strbuf_printf(&b, "%-12s %.0f\n", "Priority:", x);
    fmt_time(job, "submitted_at", when, sizeof(when));
    flps_strbuf_printf(&b, "%-12s %s\n", "Submitted:", when);
    fmt_time(job, "started_at", when, sizeof(when));
    flps_strbuf_printf(&b, "%-12s %s\n", "Started:", when);
    fmt_time(job, "finished_at", when, sizeof(when));
    flps_strbuf_printf(&b, "%-12s %s\n", "Finished:", when);
    if (get_num(job, "attempt", &x))
        flps_strbuf_printf(&b, "%-12s %.0f\n", "Attempt:", x);
    if (get_num(job, "restarts", &x)) {
        flps_strbuf_printf(&b, "%-12s %.0f", "Restarts:", x);
        if (get_num(job, "max_restarts", &y))
            flps_strbuf_printf(&b, " of %.0f allowed", y);
        flps_strbuf_printf(&b, "\n");
    }
    if (get_num(job, "workers", &x) && get_num(job, "servers", &y))
        flps_strbuf_printf(&b, "%-12s %.0f %s, %.0f %s\n", "Tasks:", x,
                           plural_word(x, "worker", "workers"), y,
                           plural_word(y, "server", "servers"));
    if (wide)
        sb_status_wide(&b, job);
    flps_strbuf_printf(&b, "%-12s ", "Progress:");
    sb_progress_body(
        &b, job,
        submit_render_state_is_final(get_str(job, "state")) ? 0 : PROG_LIVE);
    flps_strbuf_printf(&b, "\n");
    sum = json_object_get(job, "summary");
    if (json_is_object(sum)) {
        flps_strbuf_printf(&b, "Summary:\n");
        sb_summary_fields(&b, sum);
    }
    tasks = json_object_get(job, "tasks");
    if (json_is_array(tasks) && json_array_size(tasks) > 0) {
        flps_strbuf_printf(&b, "Placement:\n");
        table_add(&t, "TASK", "NODE", "STATE", "ENDPOINT", "EXIT");
        json_array_foreach(tasks, i, task)
        {
            char code[32];

            exit_cell(task, code, sizeof(code));
            table_add(&t, str_or(task, "task", "?"), str_or(task, "node", "-"),
                      str_or(task, "state", "-"), str_or(task, "endpoint", "-"),
                      code);
        }
        table_print(&t, &b, "  ");
    }
    table_fini(&t);
    return sb_finish(&b, out);
}

flps_err submit_render_status(const json_t *job, char **out)
{
    return render_status(job, 0, out);
}

flps_err submit_render_status_wide(const json_t *job, char **out)
{
    return render_status(job, 1, out);
}

/* "used/total" with the given formatter for both numbers. */
static void fmt_used(const json_t *node, const char *key, int memory, char *buf,
                     size_t len)
{
    json_t *used = json_object_get(node, "used");
    char u[24], tot[24];
    double x;

    if (!get_num(used, key, &x))
        snprintf(u, sizeof(u), "?");
    else if (memory)
        submit_render_bytes_iec(x, u, sizeof(u));
    else
        snprintf(u, sizeof(u), "%g", x);
    if (!get_num(node, key, &x))
        snprintf(tot, sizeof(tot), "?");
    else if (memory)
        submit_render_bytes_iec(x, tot, sizeof(tot));
    else
        snprintf(tot, sizeof(tot), "%g", x);
    snprintf(buf, len, "%s/%s", u, tot);
}

/* What is left of a node's resource key: total - used, "?" when either
 * is missing. */
static void fmt_free(const json_t *node, const char *key, int memory, char *buf,
                     size_t len)
{
    double total, used;

    if (!get_num(node, key, &total) ||
        !get_num(json_object_get(node, "used"), key, &used))
        snprintf(buf, len, "?");
    else if (memory)
        submit_render_bytes_iec(total > used ? total - used : 0, buf, len);
    else
        snprintf(buf, len, "%g", total > used ? total - used : 0);
}

static flps_err render_nodes(const json_t *nodes, double now, int wide,
                             char **out)
{
    static const char *const head[] = {
        "NAME",        "ADDRESS",   "STATE",         "CPUS",
        "MEMORY",      "GPUS",      "HEARTBEAT",     "FREE-CPUS",
        "FREE-MEMORY", "FREE-GPUS", "LAST-HEARTBEAT"};
    table t = {.ncols = wide ? 11 : 7};
    flps_strbuf b = FLPS_STRBUF_INIT;
    size_t i;
    json_t *node;

    if (!json_is_array(nodes))
        return FLPS_EINVAL;
    if (json_array_size(nodes) == 0) {
        flps_strbuf_printf(&b, "No nodes registered.\n");
        return sb_finish(&b, out);
    }
    table_add_row(&t, head);
    json_array_foreach(nodes, i, node)
    {
        char cpus[56], mem[56], gpus[56], ago[24], hb[32] = "-";
        char fcpus[32], fmem[32], fgpus[32], when[48];
        const char *row[TABLE_MAX_COLS];
        double x;

        fmt_used(node, "cpus", 0, cpus, sizeof(cpus));
        fmt_used(node, "memory", 1, mem, sizeof(mem));
        fmt_used(node, "gpus", 0, gpus, sizeof(gpus));
        if (get_num(node, "last_heartbeat", &x)) {
            submit_render_duration(now > x ? now - x : 0, ago, sizeof(ago));
            snprintf(hb, sizeof(hb), "%s ago", ago);
        }
        fmt_free(node, "cpus", 0, fcpus, sizeof(fcpus));
        fmt_free(node, "memory", 1, fmem, sizeof(fmem));
        fmt_free(node, "gpus", 0, fgpus, sizeof(fgpus));
        fmt_time(node, "last_heartbeat", when, sizeof(when));
        row[0] = str_or(node, "name", "?");
        row[1] = str_or(node, "address", "-");
        row[2] = str_or(node, "state", "?");
        row[3] = cpus;
        row[4] = mem;
        row[5] = gpus;
        row[6] = hb;
        row[7] = fcpus;
        row[8] = fmem;
        row[9] = fgpus;
        row[10] = when;
        table_add_row(&t, row);
    }
    table_print(&t, &b, "");
    table_fini(&t);
    return sb_finish(&b, out);
}

flps_err submit_render_nodes(const json_t *nodes, double now, char **out)
{
    return render_nodes(nodes, now, 0, out);
}

flps_err submit_render_nodes_wide(const json_t *nodes, double now, char **out)
{
    return render_nodes(nodes, now, 1, out);
}

flps_err submit_render_plan(const json_t *plan, const char *id, char **out)
{
    table t = {.ncols = 4};
    flps_strbuf b = FLPS_STRBUF_INIT;
    json_t *layers, *layer;
    double x;
    size_t i;

    if (!json_is_object(plan))
        return FLPS_EINVAL;
    flps_strbuf_printf(&b, "Plan for %s", id);
    if (get_num(plan, "version", &x))
        flps_strbuf_printf(&b, " (version %.0f)", x);
    if (get_num(plan, "predicted_iteration_seconds", &x))
        flps_strbuf_printf(&b, ": predicted %.3f s per iteration", x);
    flps_strbuf_printf(&b, "\n");
    layers = json_object_get(plan, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0) {
        flps_strbuf_printf(&b, "No layers.\n");
        return sb_finish(&b, out);
    }
    table_add(&t, "LAYER", "NUMEL", "CODEC", "DENSITY");
    json_array_foreach(layers, i, layer)
    {
        char numel[32] = "-", density[32] = "-";

        if (get_num(layer, "numel", &x))
            snprintf(numel, sizeof(numel), "%.0f", x);
        if (get_num(layer, "density", &x))
            snprintf(density, sizeof(density), "%.2f%%", x * 100);
        table_add(&t, str_or(layer, "name", "?"), numel,
                  str_or(layer, "codec", "-"), density);
    }
    table_print(&t, &b, "");
    table_fini(&t);
    return sb_finish(&b, out);
}

flps_err submit_render_log_line(const json_t *line, char **out)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    const char *text;

    if (!json_is_object(line))
        return FLPS_EINVAL;
    text = get_str(line, "line");
    /* As flrun shows its processes' lines (services/tasklog.h). */
    flps_strbuf_printf(&b, TASKLOG_LINE_FMT, str_or(line, "task", "?"),
                       text != NULL ? text : "");
    return sb_finish(&b, out);
}

flps_err submit_render_error_body(const char *body, size_t len, char **out)
{
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *msg = get_str(o, "error"), *field;
    flps_strbuf b = FLPS_STRBUF_INIT;
    double line;
    flps_err rc;

    if (msg == NULL) {
        json_decref(o);
        return FLPS_EPROTO;
    }
    flps_strbuf_printf(&b, "%s", msg);
    if (strncmp(msg, "line ", 5) != 0) {
        field = get_str(o, "field");
        if (get_num(o, "line", &line) && line > 0 && field != NULL)
            flps_strbuf_printf(&b, " (line %.0f, field %s)", line, field);
        else if (get_num(o, "line", &line) && line > 0)
            flps_strbuf_printf(&b, " (line %.0f)", line);
        else if (field != NULL)
            flps_strbuf_printf(&b, " (field %s)", field);
    }
    rc = sb_finish(&b, out);
    json_decref(o);
    return rc;
}
