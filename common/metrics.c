/* Prometheus registry, text-format renderer, and the answers of /metrics
 * and /healthz. */
#include "common/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/strbuf.h"

/* One label-value tuple of a family. */
typedef struct metrics_series {
    char **values;     /* nlabels copies */
    double value;      /* counter, gauge */
    uint64_t *buckets; /* histogram: per bucket, not cumulative; the last
                          is +Inf */
    double sum;
    uint64_t count;
    struct metrics_series *next;
} metrics_series;

struct metrics_family {
    metrics *reg;
    /* Fixed at registration, then read-only: */
    metrics_type type;
    char *name;
    char *help; /* NULL: no HELP line */
    char **labels;
    size_t nlabels;
    double *bounds;
    size_t nbounds;
    /* Guarded by reg->lock: the list and every series' values. */
    metrics_series *series;
    metrics_series **series_tail;
    struct metrics_family *next;
};

struct metrics {
    /* Guards the family list, each family's series list and each series'
     * numbers. One lock keeps a render consistent (a histogram's buckets,
     * sum and count always agree) at the cost of contention, which at the
     * rates we update (per message, per loop) is negligible. */
    pthread_mutex_t lock;
    metrics_family *families;
    metrics_family **families_tail;
    /* Called at the start of every render, before the lock is taken (it
     * updates families itself); set once before the registry is served. */
    metrics_collect_fn collect;
    void *collect_arg;
    void (*collect_free)(void *arg);
};

static const double seconds_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,  0.1,    0.25,  0.5,  1,
                                         2.5,   5,      10,    30,   60};

const double *metrics_seconds_buckets(size_t *n)
{
    *n = sizeof(seconds_buckets) / sizeof(seconds_buckets[0]);
    return seconds_buckets;
}

flps_err metrics_create(metrics **out)
{
    metrics *reg = flps_calloc(1, sizeof(*reg));

    if (reg == NULL)
        return FLPS_ENOMEM;
    if (pthread_mutex_init(&reg->lock, NULL) != 0) {
        flps_free(reg);
        return FLPS_ESYS;
    }
    reg->families_tail = &reg->families;
    *out = reg;
    return FLPS_OK;
}

static void series_free(metrics_series *s, size_t nlabels)
{
    if (s == NULL)
        return;
    for (size_t i = 0; s->values != NULL && i < nlabels; i++)
        flps_free(s->values[i]);
    flps_free(s->values);
    flps_free(s->buckets);
    flps_free(s);
}

static void family_free(metrics_family *f)
{
    metrics_series *s, *next;

    if (f == NULL)
        return;
    for (s = f->series; s != NULL; s = next) {
        next = s->next;
        series_free(s, f->nlabels);
    }
    for (size_t i = 0; f->labels != NULL && i < f->nlabels; i++)
        flps_free(f->labels[i]);
    flps_free(f->labels);
    flps_free(f->bounds);
    flps_free(f->help);
    flps_free(f->name);
    flps_free(f);
}

void metrics_destroy(metrics *reg)
{
    metrics_family *f, *next;

    if (reg == NULL)
        return;
    for (f = reg->families; f != NULL; f = next) {
        next = f->next;
        family_free(f);
    }
    if (reg->collect_free != NULL)
        reg->collect_free(reg->collect_arg);
    pthread_mutex_destroy(&reg->lock);
    flps_free(reg);
}

/* ---- registration ---- */

static int is_name_char(char c, int first, int colon_ok)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        return 1;
    if (colon_ok && c == ':')
        return 1;
    return !first && c >= '0' && c <= '9';
}

static int valid_name(const char *s, int colon_ok)
{
    if (s == NULL || s[0] == '\0')
        return 0;
    for (size_t i = 0; s[i] != '\0'; i++)
        if (!is_name_char(s[i], i == 0, colon_ok))
            return 0;
    return 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static metrics_series *series_new(const metrics_family *f,
                                  const char *const *values)
{
    metrics_series *s = flps_calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    if (f->nlabels > 0) {
        s->values = flps_calloc(f->nlabels, sizeof(*s->values));
        if (s->values == NULL)
            goto fail;
        for (size_t i = 0; i < f->nlabels; i++) {
            s->values[i] = flps_strdup(values[i]);
            if (s->values[i] == NULL)
                goto fail;
        }
    }
    if (f->type == METRICS_HISTOGRAM) {
        s->buckets = flps_calloc(f->nbounds + 1, sizeof(*s->buckets));
        if (s->buckets == NULL)
            goto fail;
    }
    return s;

fail:
    series_free(s, f->nlabels);
    return NULL;
}

/* Check a family's arguments; logs why one is refused. */
static flps_err check_family(metrics *reg, metrics_type type, const char *name,
                             const char *const *labels, size_t nlabels,
                             const double *bounds, size_t nbounds)
{
    if (reg == NULL)
        return FLPS_EINVAL;
    if (!valid_name(name, 1)) {
        log_warn("metrics: refused metric name '%s': it must match "
                 "[a-zA-Z_:][a-zA-Z0-9_:]*",
                 name ? name : "(null)");
        return FLPS_EINVAL;
    }
    if (type == METRICS_COUNTER && !ends_with(name, "_total")) {
        log_warn("metrics: refused counter '%s': counter names end in "
                 "_total",
                 name);
        return FLPS_EINVAL;
    }
    if (nlabels > 0 && labels == NULL)
        return FLPS_EINVAL;
    for (size_t i = 0; i < nlabels; i++) {
        if (!valid_name(labels[i], 0) || strncmp(labels[i], "__", 2) == 0 ||
            (type == METRICS_HISTOGRAM && strcmp(labels[i], "le") == 0)) {
            log_warn("metrics: refused label name '%s' of %s: it must match "
                     "[a-zA-Z_][a-zA-Z0-9_]*, not start with __, and not be "
                     "le on a histogram",
                     labels[i] ? labels[i] : "(null)", name);
            return FLPS_EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[i], labels[j]) == 0) {
                log_warn("metrics: label name '%s' appears twice in %s",
                         labels[i], name);
                return FLPS_EINVAL;
            }
    }
    if (nbounds > 0 && bounds == NULL)
        return FLPS_EINVAL;
    for (size_t i = 0; i < nbounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
            log_warn("metrics: the bucket bounds of %s must be finite and "
                     "strictly increasing",
                     name);
            return FLPS_EINVAL;
        }
    return FLPS_OK;
}

static flps_err add_family(metrics *reg, metrics_type type, const char *name,
                           const char *help, const char *const *labels,
                           size_t nlabels, const double *bounds, size_t nbounds,
                           metrics_family **out)
{
    metrics_family *f, *g;
    flps_err rc;

    rc = check_family(reg, type, name, labels, nlabels, bounds, nbounds);
    if (rc != FLPS_OK)
        return rc;
    f = flps_calloc(1, sizeof(*f));
    if (f == NULL)
        return FLPS_ENOMEM;
    f->reg = reg;
    f->type = type;
    f->nlabels = nlabels;
    f->nbounds = nbounds;
    f->series_tail = &f->series;
    f->name = flps_strdup(name);
    if (f->name == NULL)
        goto fail;
    if (help != NULL && (f->help = flps_strdup(help)) == NULL)
        goto fail;
    if (nlabels > 0) {
        f->labels = flps_calloc(nlabels, sizeof(*f->labels));
        if (f->labels == NULL)
            goto fail;
        for (size_t i = 0; i < nlabels; i++)
            if ((f->labels[i] = flps_strdup(labels[i])) == NULL)
                goto fail;
    }
    if (nbounds > 0) {
        f->bounds = flps_malloc(nbounds * sizeof(*f->bounds));
        if (f->bounds == NULL)
            goto fail;
        memcpy(f->bounds, bounds, nbounds * sizeof(*f->bounds));
    }
    if (nlabels == 0) {
        /* A family without labels shows 0 before its first update. */
        f->series = series_new(f, NULL);
        if (f->series == NULL)
            goto fail;
        f->series_tail = &f->series->next;
    }

    pthread_mutex_lock(&reg->lock);
    for (g = reg->families; g != NULL; g = g->next)
        if (strcmp(g->name, name) == 0)
            break;
    if (g == NULL) {
        *reg->families_tail = f;
        reg->families_tail = &f->next;
    }
    pthread_mutex_unlock(&reg->lock);
    if (g != NULL) {
        log_warn("metrics: a metric named %s is already registered", name);
        family_free(f);
        return FLPS_EINVAL;
    }
    *out = f;
    return FLPS_OK;

fail:
    family_free(f);
    return FLPS_ENOMEM;
}

flps_err metrics_counter(metrics *reg, const char *name, const char *help,
                         const char *const *labels, size_t nlabels,
                         metrics_family **out)
{
    return add_family(reg, METRICS_COUNTER, name, help, labels, nlabels, NULL,
                      0, out);
}

flps_err metrics_gauge(metrics *reg, const char *name, const char *help,
                       const char *const *labels, size_t nlabels,
                       metrics_family **out)
{
    return add_family(reg, METRICS_GAUGE, name, help, labels, nlabels, NULL, 0,
                      out);
}

flps_err metrics_histogram(metrics *reg, const char *name, const char *help,
                           const char *const *labels, size_t nlabels,
                           const double *bounds, size_t nbounds,
                           metrics_family **out)
{
    return add_family(reg, METRICS_HISTOGRAM, name, help, labels, nlabels,
                      bounds, nbounds, out);
}

flps_err metrics_register_table(metrics *reg, const metrics_def *defs, size_t n,
                                void *base)
{
    if (reg == NULL || (defs == NULL && n > 0) || base == NULL)
        return FLPS_EINVAL;
    for (size_t i = 0; i < n; i++) {
        const metrics_def *d = &defs[i];
        const double *bounds = d->bounds;
        size_t nbounds = d->nbounds;
        metrics_family *f = NULL;
        flps_err rc;

        if (d->type == METRICS_HISTOGRAM && bounds == NULL)
            bounds = metrics_seconds_buckets(&nbounds);
        else if (d->type != METRICS_HISTOGRAM)
            nbounds = 0;
        rc = add_family(reg, d->type, d->name, d->help, d->labels, d->nlabels,
                        bounds, nbounds, &f);
        if (rc != FLPS_OK)
            return rc;
        memcpy((char *)base + d->offset, &f, sizeof(f));
    }
    return FLPS_OK;
}

/* ---- updates ---- */

/* The series for values, created if new. Called with the lock held. */
static metrics_series *series_get(metrics_family *f, const char *const *values)
{
    metrics_series *s;

    for (s = f->series; s != NULL; s = s->next) {
        size_t i = 0;
        while (i < f->nlabels && strcmp(s->values[i], values[i]) == 0)
            i++;
        if (i == f->nlabels)
            return s;
    }
    s = series_new(f, values);
    if (s == NULL)
        return NULL;
    *f->series_tail = s;
    f->series_tail = &s->next;
    return s;
}

typedef enum { OP_ADD, OP_SET, OP_OBSERVE } metrics_op;

static flps_err update(metrics_family *f, metrics_type type, metrics_op op,
                       const char *const *values, double v)
{
    metrics_series *s;
    flps_err rc = FLPS_OK;

    if (f == NULL || f->type != type)
        return FLPS_EINVAL;
    if (f->nlabels > 0) {
        if (values == NULL)
            return FLPS_EINVAL;
        for (size_t i = 0; i < f->nlabels; i++)
            if (values[i] == NULL)
                return FLPS_EINVAL;
    }
    if (type == METRICS_HISTOGRAM ? isnan(v) : !isfinite(v))
        return FLPS_EINVAL;
    if (type == METRICS_COUNTER && op == OP_ADD && v < 0)
        return FLPS_EINVAL;

    pthread_mutex_lock(&f->reg->lock);
    s = series_get(f, values);
    if (s == NULL) {
        rc = FLPS_ENOMEM;
    } else if (op == OP_OBSERVE) {
        size_t b = 0;
        while (b < f->nbounds && v > f->bounds[b])
            b++;
        s->buckets[b]++;
        s->sum += v;
        s->count++;
    } else if (op == OP_ADD) {
        s->value += v;
    } else if (type == METRICS_COUNTER && v < s->value) {
        rc = FLPS_EINVAL;
    } else {
        s->value = v;
    }
    pthread_mutex_unlock(&f->reg->lock);
    return rc;
}

flps_err metrics_counter_add(metrics_family *f, const char *const *values,
                             double v)
{
    return update(f, METRICS_COUNTER, OP_ADD, values, v);
}

flps_err metrics_counter_set(metrics_family *f, const char *const *values,
                             double v)
{
    return update(f, METRICS_COUNTER, OP_SET, values, v);
}

flps_err metrics_gauge_set(metrics_family *f, const char *const *values,
                           double v)
{
    return update(f, METRICS_GAUGE, OP_SET, values, v);
}

flps_err metrics_gauge_add(metrics_family *f, const char *const *values,
                           double v)
{
    return update(f, METRICS_GAUGE, OP_ADD, values, v);
}

flps_err metrics_histogram_observe(metrics_family *f, const char *const *values,
                                   double v)
{
    return update(f, METRICS_HISTOGRAM, OP_OBSERVE, values, v);
}

/* ---- rendering ---- */

/* The text grows in an flps_strbuf: its first failed allocation sticks,
 * so the renderers append without checking and metrics_render checks once. */

/* Escape for a HELP line (\\ and \n) or a label value (also \"). */
static void sb_escaped(flps_strbuf *b, const char *s, int quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            flps_strbuf_append(b, "\\\\", 2);
        else if (*s == '\n')
            flps_strbuf_append(b, "\\n", 2);
        else if (quote && *s == '"')
            flps_strbuf_append(b, "\\\"", 2);
        else
            flps_strbuf_append(b, s, 1);
    }
}

/* The shortest text that reads back as v (Go's ParseFloat accepts it). */
static void format_value(double v, char *out, size_t n)
{
    if (isnan(v)) {
        snprintf(out, n, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, n, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* Whole numbers (most counters) read best without an exponent. */
    flps_format_double(out, n, v);
}

static void sb_value(flps_strbuf *b, double v)
{
    char t[40];

    format_value(v, t, sizeof(t));
    flps_strbuf_puts(b, t);
}

static void sb_u64(flps_strbuf *b, uint64_t v)
{
    flps_strbuf_printf(b, "%llu", (unsigned long long)v);
}

/* name{l1="v1",...,le="x"} with le (NULL: none) last. */
static void sb_series_name(flps_strbuf *b, const metrics_family *f,
                           const metrics_series *s, const char *suffix,
                           const char *le)
{
    flps_strbuf_puts(b, f->name);
    flps_strbuf_puts(b, suffix);
    if (f->nlabels == 0 && le == NULL)
        return;
    flps_strbuf_append(b, "{", 1);
    for (size_t i = 0; i < f->nlabels; i++) {
        if (i > 0)
            flps_strbuf_append(b, ",", 1);
        flps_strbuf_puts(b, f->labels[i]);
        flps_strbuf_append(b, "=\"", 2);
        sb_escaped(b, s->values[i], 1);
        flps_strbuf_append(b, "\"", 1);
    }
    if (le != NULL) {
        if (f->nlabels > 0)
            flps_strbuf_append(b, ",", 1);
        flps_strbuf_puts(b, "le=\"");
        flps_strbuf_puts(b, le);
        flps_strbuf_append(b, "\"", 1);
    }
    flps_strbuf_append(b, "}", 1);
}

static void render_family(flps_strbuf *b, const metrics_family *f)
{
    static const char *type_names[] = {"counter", "gauge", "histogram"};

    if (f->help != NULL) {
        flps_strbuf_puts(b, "# HELP ");
        flps_strbuf_puts(b, f->name);
        flps_strbuf_append(b, " ", 1);
        sb_escaped(b, f->help, 0);
        flps_strbuf_append(b, "\n", 1);
    }
    flps_strbuf_puts(b, "# TYPE ");
    flps_strbuf_puts(b, f->name);
    flps_strbuf_append(b, " ", 1);
    flps_strbuf_puts(b, type_names[f->type]);
    flps_strbuf_append(b, "\n", 1);
    for (const metrics_series *s = f->series; s != NULL; s = s->next) {
        if (f->type != METRICS_HISTOGRAM) {
            sb_series_name(b, f, s, "", NULL);
            flps_strbuf_append(b, " ", 1);
            sb_value(b, s->value);
            flps_strbuf_append(b, "\n", 1);
            continue;
        }
        uint64_t cum = 0;
        for (size_t i = 0; i <= f->nbounds; i++) {
            char le[40];
            if (i < f->nbounds)
                format_value(f->bounds[i], le, sizeof(le));
            else
                snprintf(le, sizeof(le), "+Inf");
            cum += s->buckets[i];
            sb_series_name(b, f, s, "_bucket", le);
            flps_strbuf_append(b, " ", 1);
            sb_u64(b, cum);
            flps_strbuf_append(b, "\n", 1);
        }
        sb_series_name(b, f, s, "_sum", NULL);
        flps_strbuf_append(b, " ", 1);
        sb_value(b, s->sum);
        flps_strbuf_append(b, "\n", 1);
        sb_series_name(b, f, s, "_count", NULL);
        flps_strbuf_append(b, " ", 1);
        sb_u64(b, s->count);
        flps_strbuf_append(b, "\n", 1);
    }
}

void metrics_set_collect(metrics *reg, metrics_collect_fn fn, void *arg,
                         void (*free_arg)(void *arg))
{
    if (reg->collect_free != NULL)
        reg->collect_free(reg->collect_arg);
    reg->collect = fn;
    reg->collect_arg = arg;
    reg->collect_free = free_arg;
}

flps_err metrics_render(metrics *reg, char **text, size_t *len)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    size_t n;
    char *s;

    if (reg == NULL || text == NULL || len == NULL)
        return FLPS_EINVAL;
    if (reg->collect != NULL)
        reg->collect(reg->collect_arg);
    pthread_mutex_lock(&reg->lock);
    for (const metrics_family *f = reg->families; f != NULL; f = f->next)
        render_family(&b, f);
    pthread_mutex_unlock(&reg->lock);
    n = b.len;
    s = flps_strbuf_take(&b); /* an empty registry is "" not NULL */
    if (s == NULL)
        return FLPS_ENOMEM;
    *text = s;
    *len = n;
    return FLPS_OK;
}

/* ---- the endpoints ---- */

static int is_get(const char *method)
{
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

static void answer_text(metrics_answer *out, int status, const char *ctype,
                        const char *text)
{
    out->status = status;
    out->content_type = ctype;
    out->body = flps_strdup(text);
    out->len = out->body != NULL ? strlen(text) : 0;
}

int metrics_route(metrics *reg, const char *method, const char *path,
                  metrics_answer *out)
{
    if (strcmp(path, "/metrics") != 0 && strcmp(path, "/healthz") != 0)
        return 0;
    if (!is_get(method)) {
        answer_text(out, 405, METRICS_JSON_TYPE,
                    "{\"error\":\"method not allowed\"}");
        return 1;
    }
    if (strcmp(path, "/healthz") == 0) {
        answer_text(out, 200, METRICS_JSON_TYPE, "{\"status\":\"ok\"}");
        return 1;
    }
    out->status = 200;
    out->content_type = METRICS_CONTENT_TYPE;
    if (metrics_render(reg, &out->body, &out->len) != FLPS_OK) {
        log_error("metrics: out of memory rendering /metrics");
        answer_text(out, 500, METRICS_JSON_TYPE,
                    "{\"error\":\"out of memory\"}");
    }
    return 1;
}

void metrics_route_other(metrics_answer *out)
{
    answer_text(out, 404, METRICS_JSON_TYPE,
                "{\"error\":\"not found; try /metrics or /healthz\"}");
}
