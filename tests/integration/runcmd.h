/* Helpers for integration tests: run a command line, capture its output
 * and parse the JSON summary on its last stdout line. */
#ifndef FLPS_TESTS_RUNCMD_H
#define FLPS_TESTS_RUNCMD_H

#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "services/event.h"

typedef struct run_result {
    int status;      /* exit code */
    char *out;       /* stdout */
    char *err;       /* stderr */
    json_t *summary; /* the last stdout line, parsed */
} run_result;

static inline char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf;
    long n;

    if (f == NULL)
        return strdup("");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = '\0';
    fclose(f);
    return buf;
}

/* Run a shell command line with stdout and stderr captured. */
static inline void run_cmd(const char *cmd, run_result *r)
{
    char dir[] = "/tmp/flrun-test-XXXXXX", line[8192], out[64], err[64];
    char *last;
    int st;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(err, sizeof(err), "%s/err", dir);
    snprintf(line, sizeof(line), "%s >%s 2>%s", cmd, out, err);
    st = system(line);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r->out = slurp(out);
    r->err = slurp(err);
    r->summary = NULL;
    last = r->out + strlen(r->out);
    while (last > r->out && last[-1] == '\n')
        *--last = '\0';
    last = strrchr(r->out, '\n');
    last = last ? last + 1 : r->out;
    if (*last == '{')
        r->summary = json_loads(last, 0, NULL);
}

/* run_cmd for a job that must succeed: exit status 0 and the JSON
 * summary as the last line of stdout. */
static inline void run_to_summary(const char *cmd, run_result *r)
{
    run_cmd(cmd, r);
    cr_assert_eq(r->status, 0, "%s failed:\n%s", cmd, r->err);
    cr_assert_not_null(r->summary, "no JSON summary as the last line:\n%s",
                       r->out);
}

/* The next line of *pos that is an event line of type (services/event.h),
 * parsed (the caller decrefs it), or NULL when no line after *pos is one;
 * *pos moves past the line returned (NULL at the end). The line must keep
 * to the schema (docs/events.md), or the test fails saying why. */
static inline json_t *next_event(const char **pos, const char *type)
{
    while (*pos != NULL && **pos != '\0') {
        const char *p = *pos, *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char why[256];
        event ev;
        flps_err rc =
            event_read(p, len, EVENT_READ_STRICT, &ev, why, sizeof(why));
        int match = strcmp(event_kind_name(ev.kind), type) == 0;

        event_fini(&ev);
        *pos = nl ? nl + 1 : NULL;
        if (match) {
            cr_assert_eq(rc, FLPS_OK, "a %s line off the schema: %s: %.*s",
                         type, why, (int)len, p);
            return json_loadb(p, len, 0, NULL);
        }
    }
    return NULL;
}

static inline void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
    json_decref(r->summary);
}

static inline double num(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    cr_assert(json_is_number(v), "summary lacks %s", k);
    return json_number_value(v);
}

static inline void run_flrun_text(const char *dir, const char *text,
                                  run_result *r);

/* run_flrun_text in a fresh directory /tmp/flrun-job-XXXXXX, its name
 * copied to dir_out (PATH_MAX bytes) when that is not NULL. */
static inline void run_flrun_text_in_tmp(const char *text, run_result *r,
                                         char *dir_out)
{
    char dir[] = "/tmp/flrun-job-XXXXXX";

    cr_assert_not_null(mkdtemp(dir));
    run_flrun_text(dir, text, r);
    if (dir_out != NULL)
        snprintf(dir_out, PATH_MAX, "%s", dir);
}

/* run(optimizer, compression, r): one job, dense or sparse, run to its
 * summary. */
typedef void (*run_optimizer_job)(const char *optimizer, const char *comp,
                                  run_result *r);

/* torch.optim.Adam and AdamW (examples/torch's --optimizer adam, adamw),
 * each run dense and with gtopk:0.01: the dense run reaches dense_floor,
 * the sparse one comes within 1.5 points of its test accuracy with at most
 * 3% of its bytes; logged as `what` and the optimizer. */
static inline void assert_adam_keeps_dense_accuracy(const char *what,
                                                    run_optimizer_job run,
                                                    double dense_floor)
{
    static const char *const optimizers[] = {"adam", "adamw"};

    for (size_t i = 0; i < sizeof(optimizers) / sizeof(optimizers[0]); i++) {
        run_result dense, sparse;
        double acc_dense, acc_sparse, share;

        run(optimizers[i], "dense", &dense);
        run(optimizers[i], "gtopk:0.01", &sparse);
        acc_dense = num(dense.summary, "test_accuracy");
        acc_sparse = num(sparse.summary, "test_accuracy");
        share = num(sparse.summary, "bytes_sent") /
                num(dense.summary, "bytes_sent");
        cr_log_info("%s %s: dense %.4f (%.0f s), gtopk:0.01 %.4f (%.0f s) "
                    "at %.2f%% of the dense bytes",
                    what, optimizers[i], acc_dense,
                    num(dense.summary, "wall_seconds"), acc_sparse,
                    num(sparse.summary, "wall_seconds"), 100 * share);
        cr_assert_gt(acc_dense, dense_floor, "the dense run itself: %s",
                     dense.err);
        cr_assert_geq(acc_sparse, acc_dense - 0.015,
                      "%s %s: gtopk:0.01 %.4f is more than 1.5 points below "
                      "dense %.4f: %s",
                      what, optimizers[i], acc_sparse, acc_dense, sparse.err);
        cr_assert_leq(share, 0.03,
                      "%s %s: gtopk:0.01 sent %.2f%% of "
                      "dense's bytes",
                      what, optimizers[i], 100 * share);
        run_free(&dense);
        run_free(&sparse);
    }
}

/* Run examples/NAME with flrun --quiet to its summary: it must exit 0,
 * print the JSON summary last and have run 1,500 iterations. */
static inline void run_example(const char *name, run_result *r)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet %s/examples/%s", FLPS_BIN_DIR,
             FLPS_SOURCE_DIR, name);
    run_cmd(cmd, r);
    cr_assert_eq(r->status, 0, "flrun %s failed:\n%s", name, r->err);
    cr_assert_not_null(r->summary, "no JSON summary as the last line:\n%s",
                       r->out);
    cr_assert_eq(num(r->summary, "iterations"), 1500);
    cr_assert_gt(num(r->summary, "bytes_sent"), 0);
    cr_assert_gt(num(r->summary, "bytes_received"), 0);
    cr_assert_gt(num(r->summary, "wall_seconds"), 0);
}

/* Write the job file text as dir/job.yaml; its path into job (len
 * bytes). */
static inline void write_job_text(const char *dir, const char *text, char *job,
                                  size_t len)
{
    FILE *f;

    snprintf(job, len, "%s/job.yaml", dir);
    f = fopen(job, "w");
    cr_assert_not_null(f, "cannot write %s", job);
    fputs(text, f);
    fclose(f);
}

/* Write the job file text as dir/job.yaml and run flrun on it, its logs
 * in dir/logs. */
static inline void run_flrun_text(const char *dir, const char *text,
                                  run_result *r)
{
    char job[1024], cmd[3072];

    write_job_text(dir, text, job, sizeof(job));
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s/logs %s", FLPS_BIN_DIR,
             dir, job);
    run_cmd(cmd, r);
}

#endif
