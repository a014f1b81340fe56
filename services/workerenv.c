/* The environment and program of a command: job's workers. */
#include "services/workerenv.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"

/* The repository's python/ dir, for a launcher that runs from a build. */
#ifndef FLPS_SOURCE_PYTHON_DIR
#define FLPS_SOURCE_PYTHON_DIR ""
#endif

#define WE_DEFAULT_DEADLINE_MS 120000

typedef struct we_list {
    char **v;
    size_t n, cap;
    int failed;
} we_list;

static void we_add(we_list *l, const char *name, const char *value)
{
    size_t len;
    char *e;

    if (l->failed)
        return;
    if (l->n + 2 > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = flps_realloc(l->v, cap * sizeof(*v));

        if (v == NULL) {
            l->failed = 1;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    len = strlen(name) + strlen(value) + 2;
    e = flps_malloc(len);
    if (e == NULL) {
        l->failed = 1;
        return;
    }
    snprintf(e, len, "%s=%s", name, value);
    l->v[l->n++] = e;
    l->v[l->n] = NULL;
}

static void we_add_entry(we_list *l, const char *entry)
{
    const char *eq = strchr(entry, '=');
    char name[256];

    if (eq == NULL || (size_t)(eq - entry) >= sizeof(name))
        return;
    memcpy(name, entry, (size_t)(eq - entry));
    name[eq - entry] = '\0';
    we_add(l, name, eq + 1);
}

/* entry ("NAME=VALUE") in l in place of an earlier entry of NAME: an
 * env: word over an inherited variable (getenv takes the first of two,
 * so appending would leave the launcher's value in force). */
static void we_put_entry(we_list *l, const char *entry)
{
    const char *eq = strchr(entry, '=');
    size_t nl;

    if (eq == NULL || l->failed)
        return;
    nl = (size_t)(eq - entry) + 1; /* "NAME=" */
    for (size_t i = 0; i < l->n; i++) {
        char *e;

        if (strncmp(l->v[i], entry, nl) != 0)
            continue;
        e = flps_strdup(entry);
        if (e == NULL) {
            l->failed = 1;
            return;
        }
        flps_free(l->v[i]);
        l->v[i] = e;
        return;
    }
    we_add_entry(l, entry);
}

/* A fedavg job's rounds, clients and strategy, for flps.fl (set in every
 * mode, as FLPS_ITERATIONS is). Each is a double, printed with "%.17g":
 * integers print as integers, and every value reads back as the same
 * double. */
static void we_add_fedavg(we_list *l, const jobspec *spec)
{
    const struct {
        const char *name;
        double v;
    } keys[] = {
        {"FLPS_ROUNDS", spec->rounds},
        {"FLPS_CLIENTS", spec->clients ? spec->clients : spec->workers},
        {"FLPS_CLIENT_FRACTION", spec->client_fraction},
        {"FLPS_LOCAL_STEPS", spec->local_steps},
        {"FLPS_LOCAL_EPOCHS", spec->local_epochs},
        {"FLPS_ROUND_DEADLINE", spec->round_deadline},
        {"FLPS_STRAGGLER_FRACTION", spec->straggler_fraction},
        {"FLPS_STRAGGLER_SLOWDOWN", spec->straggler_slowdown},
        {"FLPS_PROX_MU", spec->prox_mu},
        {"FLPS_SERVER_LR", spec->server_lr},
    };
    char num[64];

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        snprintf(num, sizeof(num), "%.17g", keys[i].v);
        we_add(l, keys[i].name, num);
    }
    jobspec_server_opt_format(spec, num, sizeof(num));
    we_add(l, "FLPS_SERVER_OPTIMIZER", num);
}

static int we_is(const char *entry, const char *name)
{
    size_t n = strlen(name);

    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

const char *workerenv_get(char *const *env, const char *name)
{
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        if (we_is(env[i], name))
            return env[i] + strlen(name) + 1;
    return NULL;
}

static int we_file_exists(const char *dir, const char *rel)
{
    char path[PATH_MAX];

    return snprintf(path, sizeof(path), "%s/%s", dir, rel) <
               (int)sizeof(path) &&
           access(path, R_OK) == 0;
}

void workerenv_free(char **env)
{
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        flps_free(env[i]);
    flps_free(env);
}

/* A saps job's peers ("" where there are none) and keys (the FLPS_* of
 * JOBSPEC_WORKER_ENV marked saps), set for every job as the other keys
 * are; reals as "%.17g", which reads back as the same double. */
static void we_add_saps(we_list *l, const jobspec *spec, const workerenv *w)
{
    char num[64];

    we_add(l, "FLPS_PEERS", w->peers != NULL ? w->peers : "");
    snprintf(num, sizeof(num), "%.17g", spec->saps_density);
    we_add(l, "FLPS_SAPS_DENSITY", num);
    we_add(l, "FLPS_PEER_SELECTION",
           jobspec_peer_selection_name(spec->peer_selection));
    if (spec->bandwidth_threshold < 0)
        snprintf(num, sizeof(num), "auto");
    else
        snprintf(num, sizeof(num), "%.17g", spec->bandwidth_threshold);
    we_add(l, "FLPS_BANDWIDTH_THRESHOLD", num);
    snprintf(num, sizeof(num), "%u", spec->connectivity_window);
    we_add(l, "FLPS_CONNECTIVITY_WINDOW", num);
    snprintf(num, sizeof(num), "%llu",
             (unsigned long long)spec->bandwidth_reprobe);
    we_add(l, "FLPS_BANDWIDTH_REPROBE", num);
    /* FLPS_LOCAL_STEPS, the SGD steps between exchanges: we_add_fedavg. */
    snprintf(num, sizeof(num), "%.17g", spec->peer_deadline);
    we_add(l, "FLPS_PEER_DEADLINE", num);
}

flps_err workerenv_build(const jobspec *spec, const workerenv *w,
                         char *const *base, char ***out)
{
    we_list l = {NULL, 0, 0, 0};
    const char *words[JOBSPEC_WORDS_MAX];
    const char *pydir, *pp_user = NULL, *pp_base;
    char num[64], comp[64], up[PATH_MAX], build[PATH_MAX], keys[1024];
    char lib[PATH_MAX + 32];
    char pythonpath[3 * PATH_MAX];
    size_t n;
    int have_lib = 0;

    if (spec == NULL || w == NULL || out == NULL || w->job == NULL ||
        w->servers == NULL)
        return FLPS_EINVAL;
    for (size_t i = 0; base != NULL && base[i] != NULL; i++) {
        const char *eq = strchr(base[i], '=');

        if (eq == NULL ||
            jobspec_env_is_reserved(base[i], (size_t)(eq - base[i])) ||
            we_is(base[i], "PYTHONPATH"))
            continue;
        we_add_entry(&l, base[i]);
    }
    n = jobspec_words(spec->env, spec->env_count, words, JOBSPEC_WORDS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (we_is(words[i], "PYTHONPATH"))
            pp_user = words[i] + strlen("PYTHONPATH=");
        else
            we_put_entry(&l, words[i]);
    }
    /* Python block-buffers stdout into a pipe: the launcher would see a
     * program's print() lines only when it exits. */
    if (workerenv_get(l.v, "PYTHONUNBUFFERED") == NULL)
        we_add(&l, "PYTHONUNBUFFERED", "1");
    we_add(&l, "FLPS_JOB", w->job);
    snprintf(num, sizeof(num), "%u", w->rank);
    we_add(&l, "FLPS_RANK", num);
    snprintf(num, sizeof(num), "%u", spec->workers);
    we_add(&l, "FLPS_WORKERS", num);
    we_add(&l, "FLPS_SERVERS", w->servers);
    if (w->plan_file != NULL && w->plan_file[0] != '\0')
        we_add(&l, "FLPS_PLAN_FILE", w->plan_file);
    snprintf(num, sizeof(num), "%llu", (unsigned long long)spec->iterations);
    we_add(&l, "FLPS_ITERATIONS", num);
    jobspec_comp_format(spec, comp, sizeof(comp));
    we_add(&l, "FLPS_COMPRESSION", comp);
    snprintf(num, sizeof(num), "%.17g", spec->lr);
    we_add(&l, "FLPS_LR", num);
    snprintf(num, sizeof(num), "%.17g", spec->momentum);
    we_add(&l, "FLPS_MOMENTUM", num);
    we_add(&l, "FLPS_LR_SCHEDULE", jobspec_lr_schedule_name(spec->lr_schedule));
    snprintf(num, sizeof(num), "%u", spec->batch_size);
    we_add(&l, "FLPS_BATCH", num);
    snprintf(num, sizeof(num), "%llu", (unsigned long long)spec->seed);
    we_add(&l, "FLPS_SEED", num);
    if (spec->model != JOBSPEC_MODEL_NONE)
        we_add(&l, "FLPS_MODEL", jobspec_model_name(spec->model));
    we_add(&l, "FLPS_DATASET", jobspec_dataset_name(spec->dataset));
    we_add(&l, "FLPS_DATA_DIR", spec->data_dir);
    jobspec_partition_format(spec, num, sizeof(num));
    we_add(&l, "FLPS_PARTITION", num);
    jobspec_mode_format(spec, num, sizeof(num));
    we_add(&l, "FLPS_MODE", num);
    we_add_fedavg(&l, spec);
    snprintf(num, sizeof(num), "%llu", (unsigned long long)spec->eval_every);
    we_add(&l, "FLPS_EVAL_EVERY", num);
    snprintf(num, sizeof(num), "%u", spec->part_size);
    we_add(&l, "FLPS_PART_SIZE", num);
    we_add(&l, "FLPS_OVERLAP", spec->overlap ? "true" : "false");
    /* Which of the values above the job says and which are defaults: a
     * program follows the former and may choose the latter itself. */
    jobspec_given_format(spec, keys, sizeof(keys));
    we_add(&l, "FLPS_JOB_KEYS", keys);
    if (spec->density_warmup > 0) {
        /* flps.torch passes them to flps_client_create_warmup; "%.17g"
         * reads back as the same double, which the shards compare. */
        snprintf(num, sizeof(num), "%llu",
                 (unsigned long long)spec->density_warmup);
        we_add(&l, "FLPS_DENSITY_WARMUP", num);
        snprintf(num, sizeof(num), "%.17g", spec->density_warmup_start);
        we_add(&l, "FLPS_DENSITY_WARMUP_START", num);
    }
    we_add_saps(&l, spec, w);
    snprintf(num, sizeof(num), "%llu",
             (unsigned long long)(w->deadline_ms ? w->deadline_ms
                                                 : WE_DEFAULT_DEADLINE_MS));
    we_add(&l, "FLPS_DEADLINE_MS", num);
    we_add(&l, "FLPS_TRANSPORT",
           w->transport != NULL ? w->transport
                                : jobspec_transport_name(spec->transport));
    if (w->credentials_file != NULL && w->credentials_file[0] != '\0')
        we_add(&l, "FLPS_CREDENTIALS_FILE", w->credentials_file);
    if (w->metrics != NULL && w->metrics[0] != '\0')
        we_add(&l, "FLPS_METRICS", w->metrics);
    /* The client of the program's libflps sets the clock and meters the
     * energy (docs/energy.md). */
    we_add(&l, "FLPS_GPU_CLOCK", spec->gpu_clock);
    we_add(&l, "FLPS_GPU_CLOCK_SLOWDOWN", spec->gpu_clock_slowdown);
    if (w->gpu_clock_record != NULL && w->gpu_clock_record[0] != '\0')
        we_add(&l, "FLPS_GPU_CLOCK_RECORD", w->gpu_clock_record);

    /* libflps: the launcher's own build (or install) first, so the
     * program talks to the shards with the same library version. */
    if (w->bin_dir != NULL &&
        snprintf(up, sizeof(up), "%s/..", w->bin_dir) < (int)sizeof(up) &&
        realpath(up, build) != NULL &&
        we_file_exists(build, "lib/libflps.so")) {
        snprintf(lib, sizeof(lib), "%s/lib/libflps.so", build);
        we_add(&l, "FLPS_BUILD_DIR", build);
        we_add(&l, "FLPS_LIBRARY", lib);
        have_lib = 1;
    }
    if (!have_lib) {
        const char *v = workerenv_get(base, "FLPS_BUILD_DIR");

        if (v != NULL)
            we_add(&l, "FLPS_BUILD_DIR", v);
        if ((v = workerenv_get(base, "FLPS_LIBRARY")) != NULL)
            we_add(&l, "FLPS_LIBRARY", v);
    }
    pydir = workerenv_get(base, "FLPS_PYTHON_DIR");
    if (pydir == NULL && FLPS_SOURCE_PYTHON_DIR[0] != '\0' &&
        we_file_exists(FLPS_SOURCE_PYTHON_DIR, "flps/__init__.py"))
        pydir = FLPS_SOURCE_PYTHON_DIR;
    pp_base = workerenv_get(base, "PYTHONPATH");
    snprintf(pythonpath, sizeof(pythonpath), "%s%s%s%s%s", pydir ? pydir : "",
             pydir && (pp_user || pp_base) ? ":" : "", pp_user ? pp_user : "",
             pp_user && pp_base ? ":" : "", pp_base ? pp_base : "");
    if (pythonpath[0] != '\0')
        we_add(&l, "PYTHONPATH", pythonpath);
    if (l.failed || l.v == NULL) {
        workerenv_free(l.v);
        return FLPS_ENOMEM;
    }
    *out = l.v;
    return FLPS_OK;
}

flps_err workerenv_build_flworker(const jobspec *spec, char *const *base,
                                  char ***out)
{
    we_list l = {NULL, 0, 0, 0};
    const char *words[JOBSPEC_WORDS_MAX];
    size_t n;

    if (spec == NULL || out == NULL)
        return FLPS_EINVAL;
    for (size_t i = 0; base != NULL && base[i] != NULL; i++)
        we_add_entry(&l, base[i]);
    n = jobspec_words(spec->env, spec->env_count, words, JOBSPEC_WORDS_MAX);
    for (size_t i = 0; i < n; i++)
        we_put_entry(&l, words[i]);
    if (!l.failed && l.v == NULL)
        l.v = flps_calloc(1, sizeof(*l.v)); /* no variable at all */
    if (l.failed || l.v == NULL) {
        workerenv_free(l.v);
        return FLPS_ENOMEM;
    }
    *out = l.v;
    return FLPS_OK;
}

flps_err workerenv_find_program(const char *prog, char *const *env, char *out,
                                size_t len, char *errbuf, size_t errlen)
{
    const char *path, *p;

    if (prog == NULL || out == NULL || len == 0)
        return FLPS_EINVAL;
    if (strchr(prog, '/') != NULL) {
        if (access(prog, X_OK) != 0)
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "command: %s is not an executable file; "
                                   "give the program's path or a name found "
                                   "in PATH",
                                   prog);
        snprintf(out, len, "%s", prog);
        return FLPS_OK;
    }
    path = workerenv_get(env, "PATH");
    if (path == NULL)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (p = path;;) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);

        if (dl > 0 &&
            snprintf(out, len, "%.*s/%s", (int)dl, p, prog) < (int)len &&
            access(out, X_OK) == 0)
            return FLPS_OK;
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    out[0] = '\0';
    return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                           "command: no program '%s' in PATH (%s); install "
                           "it or give its full path",
                           prog, path);
}
