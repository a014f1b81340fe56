/* Helpers for integration tests: run a command line, capture its output
 * and parse the JSON summary on its last stdout line. */
#ifndef FLPS_TESTS_RUNCMD_H
#define FLPS_TESTS_RUNCMD_H

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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

/* The next line of *pos that is a JSON object whose "event" is type,
 * parsed (the caller decrefs it), or NULL when no line after *pos is one;
 * *pos moves past the line returned (NULL at the end). */
static inline json_t *next_event(const char **pos, const char *type)
{
    while (*pos != NULL && **pos != '\0') {
        const char *p = *pos, *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        json_t *j = json_loadb(p, len, 0, NULL);
        const char *ev =
            j ? json_string_value(json_object_get(j, "event")) : NULL;

        *pos = nl ? nl + 1 : NULL;
        if (ev != NULL && strcmp(ev, type) == 0)
            return j;
        json_decref(j);
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

#endif
