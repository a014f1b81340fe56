/* Job file parsing: the YAML walk, checks across keys, and reading the
 * file; each key and value is handed to jobspec_keys.c. */
#include "services/jobspec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "common/alloc.h"
#include "common/strbuf.h"
#include "services/jobspec_keys.h"
#include "services/textguard.h"

#define JP_U32_MAX_TEXT "4294967295"

/* Every refusal of a parse is FLPS_ECONFIG with one message, written by
 * the one error-buffer formatter. */
#define JP_FAIL(p, ...)                                                        \
    flps_errbuf_set((p)->errbuf, (p)->errlen, FLPS_ECONFIG, __VA_ARGS__)

/* Parse state: where the message goes, and the line each key was given on
 * (0 = not given) for duplicate detection and cross-field messages. */
typedef struct jp {
    char *errbuf;
    size_t errlen;
    unsigned long line[JOBSPEC_KEY_COUNT];
    /* Where the parse is (the line and key being read), reported with an
     * error so an API can point at it without parsing the message. */
    unsigned long at_line;
    char at_field[64];
} jp;

/* Set where the next error is about: line (0 = none) and field ("" =
 * none; cut to fit). */
static void jp_at(jp *p, unsigned long line, const char *field, size_t n)
{
    if (n >= sizeof(p->at_field))
        n = sizeof(p->at_field) - 1;
    p->at_line = line;
    memcpy(p->at_field, field, n);
    p->at_field[n] = '\0';
}

static void jp_at_key(jp *p, unsigned long line, jobspec_key key)
{
    jp_at(p, line, jobspec_key_name(key), strlen(jobspec_key_name(key)));
}

/* ---- Events ---------------------------------------------------------- */

static unsigned long jp_line(const yaml_mark_t *m)
{
    return (unsigned long)m->line + 1;
}

/* Next event; on a libyaml error, the message with line and column. */
static flps_err jp_next(jp *p, yaml_parser_t *yp, yaml_event_t *ev)
{
    if (yaml_parser_parse(yp, ev))
        return FLPS_OK;
    jp_at(p, yp->error == YAML_READER_ERROR ? 0 : jp_line(&yp->problem_mark),
          "", 0);
    switch (yp->error) {
    case YAML_MEMORY_ERROR:
        return flps_errbuf_set(p->errbuf, p->errlen, FLPS_ENOMEM,
                               "out of memory while parsing");
    case YAML_READER_ERROR:
        if (yp->problem_value != -1)
            return JP_FAIL(p, "byte %zu: %s (#%X); a job file is UTF-8 text",
                           yp->problem_offset,
                           yp->problem ? yp->problem : "unreadable input",
                           (unsigned)yp->problem_value);
        return JP_FAIL(p, "byte %zu: %s; a job file is UTF-8 text",
                       yp->problem_offset,
                       yp->problem ? yp->problem : "unreadable input");
    default:
        break;
    }
    if (yp->context != NULL)
        return JP_FAIL(p,
                       "line %lu, column %lu: YAML syntax error: %s (%s "
                       "on line %lu)",
                       jp_line(&yp->problem_mark),
                       (unsigned long)yp->problem_mark.column + 1,
                       yp->problem ? yp->problem : "invalid YAML", yp->context,
                       jp_line(&yp->context_mark));
    return JP_FAIL(p, "line %lu, column %lu: YAML syntax error: %s",
                   jp_line(&yp->problem_mark),
                   (unsigned long)yp->problem_mark.column + 1,
                   yp->problem ? yp->problem : "invalid YAML");
}

static const char *jp_node_kind(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    case YAML_ALIAS_EVENT:
        return "an alias";
    default:
        return "a single value";
    }
}

/* A plain empty scalar, "~" or "null": YAML's way of saying no value. */
static bool jp_is_null(const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;

    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

static flps_err jp_key_event(jp *p, const yaml_event_t *ev, jobspec_key *out)
{
    const char *k;
    size_t n;
    unsigned long line = jp_line(&ev->start_mark);
    char shown[JOBSPEC_SHOW_MAX + 4];
    char keys[1024];
    const char *near;
    jobspec_key key;

    jp_at(p, line, "", 0);
    jobspec_key_list(keys, sizeof(keys));
    if (ev->type != YAML_SCALAR_EVENT)
        return JP_FAIL(p,
                       "line %lu: a key must be a plain word; found %s; "
                       "accepted keys: %s",
                       line, jp_node_kind(ev), keys);
    k = (const char *)ev->data.scalar.value;
    n = ev->data.scalar.length;
    jp_at(p, line, k, strnlen(k, n));
    if (jobspec_key_find(k, n, &key) == FLPS_OK) {
        if (p->line[key] != 0)
            return JP_FAIL(p,
                           "line %lu: duplicate key '%s' (first given "
                           "on line %lu); give each key once",
                           line, jobspec_key_name(key), p->line[key]);
        p->line[key] = line;
        *out = key;
        return FLPS_OK;
    }
    jobspec_key_show(k, n, shown);
    near = strlen(k) == n ? jobspec_key_suggest(k) : NULL;
    if (near != NULL)
        return JP_FAIL(p,
                       "line %lu: unknown key '%s'; did you mean '%s'? "
                       "accepted keys: %s",
                       line, shown, near, keys);
    return JP_FAIL(p, "line %lu: unknown key '%s'; accepted keys: %s", line,
                   shown, keys);
}

static flps_err jp_value_event(jp *p, const yaml_event_t *ev, jobspec_key key,
                               jobspec *s)
{
    unsigned long line = jp_line(&ev->start_mark);
    const char *name = jobspec_key_name(key);
    char ex[JOBSPEC_EXPECT_MAX];

    jp_at_key(p, line, key);
    if (ev->type == YAML_ALIAS_EVENT)
        return JP_FAIL(p,
                       "line %lu: %s: aliases (*%s) are not supported; "
                       "write the value out; expected %s",
                       line, name, (const char *)ev->data.alias.anchor,
                       jobspec_key_expect(key, ex));
    if (ev->type != YAML_SCALAR_EVENT)
        return JP_FAIL(p,
                       "line %lu: %s: found %s where a single value "
                       "belongs; expected %s",
                       line, name, jp_node_kind(ev),
                       jobspec_key_expect(key, ex));
    if (jp_is_null(ev))
        return JP_FAIL(p, "line %lu: %s: no value given; expected %s", line,
                       name, jobspec_key_expect(key, ex));
    return jobspec_key_set(key, (const char *)ev->data.scalar.value,
                           ev->data.scalar.length, line, s, p->errbuf,
                           p->errlen);
}

/* Where the words of a list or mapping value gather as the YAML gives
 * them, back to back, each ended by a NUL. */
typedef struct jp_words {
    char buf[JOBSPEC_WORDS_BYTES + 2];
    size_t used, n;
} jp_words;

/* The single values up to the event end (a mapping's when pairs): a key
 * is followed by '=', a value or a list's item by sep; each NUL ends a
 * word. A list's item that is a mapping (a toleration) becomes one word:
 * JOBSPEC_ITEM_MAPPING, then its pairs, each ended by JOBSPEC_ITEM_SEP. */
static flps_err jp_values(jp *p, yaml_parser_t *yp, unsigned long line,
                          jobspec_key key, yaml_event_type_t end, char sep,
                          jp_words *w)
{
    const char *name = jobspec_key_name(key);
    int pairs = end == YAML_MAPPING_END_EVENT;
    char ex[JOBSPEC_EXPECT_MAX];
    size_t item = 0;

    for (;;) {
        yaml_event_t ev;
        const char *v;
        size_t len;
        flps_err rc = jp_next(p, yp, &ev);

        if (rc != FLPS_OK)
            return rc;
        if (ev.type == end) {
            yaml_event_delete(&ev);
            return FLPS_OK;
        }
        v = (const char *)ev.data.scalar.value;
        len = ev.type == YAML_SCALAR_EVENT ? ev.data.scalar.length : 0;
        if (!pairs && sep == '\0' && ev.type == YAML_MAPPING_START_EVENT &&
            jobspec_key_items_may_be_mappings(key)) {
            w->buf[w->used++] = JOBSPEC_ITEM_MAPPING;
            rc = jp_values(p, yp, line, key, YAML_MAPPING_END_EVENT,
                           JOBSPEC_ITEM_SEP, w);
            if (rc == FLPS_OK) {
                w->buf[w->used++] = '\0';
                w->n++;
            }
        } else if (ev.type != YAML_SCALAR_EVENT) {
            rc = JP_FAIL(p,
                         "line %lu: %s: found %s where a single value "
                         "belongs; expected %s",
                         jp_line(&ev.start_mark), name, jp_node_kind(&ev),
                         jobspec_key_expect(key, ex));
        } else if (strlen(v) != len) {
            rc = JP_FAIL(p, "line %lu: %s: a value contains a NUL character",
                         jp_line(&ev.start_mark), name);
        } else if (w->used + len + 3 > sizeof(w->buf)) {
            /* Room for this value's end, and an item's. */
            rc = JP_FAIL(p, "line %lu: %s: more than %d bytes; expected %s",
                         line, name, JOBSPEC_WORDS_BYTES - 1,
                         jobspec_key_expect(key, ex));
        } else if (pairs && item % 2 == 0 && memchr(v, '=', len) != NULL) {
            rc = JP_FAIL(p,
                         "line %lu: %s: '%.40s' is not a %s name; expected "
                         "%s",
                         jp_line(&ev.start_mark), name, v,
                         key == JOBSPEC_KEY_ENV ? "variable" : "key",
                         jobspec_key_expect(key, ex));
        } else {
            memcpy(w->buf + w->used, v, len);
            w->used += len;
            w->buf[w->used++] = pairs && item % 2 == 0 ? '=' : sep;
            w->n += w->buf[w->used - 1] == '\0';
            item++;
        }
        yaml_event_delete(&ev);
        if (rc != FLPS_OK)
            return rc;
    }
}

/* A list (command, tolerations) or a mapping (env, resources,
 * node_selector) given as one: its words to the key's setter. start is
 * the list's or mapping's start event. */
static flps_err jp_words_event(jp *p, yaml_parser_t *yp,
                               const yaml_event_t *start, jobspec_key key,
                               jobspec *s)
{
    unsigned long line = jp_line(&start->start_mark);
    yaml_event_type_t end = start->type == YAML_MAPPING_START_EVENT
                                ? YAML_MAPPING_END_EVENT
                                : YAML_SEQUENCE_END_EVENT;
    jp_words w;
    flps_err rc;

    w.used = w.n = 0;
    jp_at_key(p, line, key);
    rc = jp_values(p, yp, line, key, end, '\0', &w);
    if (rc != FLPS_OK)
        return rc;
    return jobspec_key_set_words(key, w.buf, w.n, line, s, p->errbuf,
                                 p->errlen);
}

/* Read and drop one event whose kind the structure already fixes (stream
 * and document start/end), then read the next one into *ev. */
static flps_err jp_skip_next(jp *p, yaml_parser_t *yp, yaml_event_t *ev)
{
    flps_err rc = jp_next(p, yp, ev);

    if (rc != FLPS_OK)
        return rc;
    yaml_event_delete(ev);
    return jp_next(p, yp, ev);
}

/* Walk the event stream: one document holding one flat mapping. */
static flps_err jp_walk(jp *p, yaml_parser_t *yp, jobspec *s)
{
    yaml_event_t ev;
    flps_err rc;
    jobspec_key key = JOBSPEC_KEY_NAME;
    unsigned long line;

    rc = jp_skip_next(p, yp, &ev); /* past the stream start */
    if (rc != FLPS_OK)
        return rc;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        jp_at(p, 0, "", 0);
        return JP_FAIL(p, "the job file is empty; expected a mapping of "
                          "keys to values such as 'name: my-job'");
    }
    yaml_event_delete(&ev); /* document start */

    rc = jp_next(p, yp, &ev);
    if (rc != FLPS_OK)
        return rc;
    line = jp_line(&ev.start_mark);
    if (ev.type == YAML_SCALAR_EVENT && jp_is_null(&ev)) {
        yaml_event_delete(&ev);
        jp_at(p, 0, "", 0);
        return JP_FAIL(p, "the job file is empty; expected a mapping of "
                          "keys to values such as 'name: my-job'");
    }
    jp_at(p, line, "", 0);
    if (ev.type != YAML_MAPPING_START_EVENT) {
        rc = JP_FAIL(p,
                     "line %lu: the job file must be a mapping of keys "
                     "to values such as 'name: my-job'; found %s",
                     line, jp_node_kind(&ev));
        yaml_event_delete(&ev);
        return rc;
    }
    yaml_event_delete(&ev);

    for (;;) {
        rc = jp_next(p, yp, &ev);
        if (rc != FLPS_OK)
            return rc;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        rc = jp_key_event(p, &ev, &key);
        yaml_event_delete(&ev);
        if (rc != FLPS_OK)
            return rc;
        rc = jp_next(p, yp, &ev);
        if (rc != FLPS_OK)
            return rc;
        if (jobspec_key_takes_words(key) &&
            ev.type == (jobspec_key_takes_mapping(key)
                            ? YAML_MAPPING_START_EVENT
                            : YAML_SEQUENCE_START_EVENT))
            rc = jp_words_event(p, yp, &ev, key, s);
        else
            rc = jp_value_event(p, &ev, key, s);
        yaml_event_delete(&ev);
        if (rc != FLPS_OK)
            return rc;
    }

    rc = jp_skip_next(p, yp, &ev); /* past the document end */
    if (rc != FLPS_OK)
        return rc;
    line = jp_line(&ev.start_mark);
    jp_at(p, line, "", 0);
    if (ev.type != YAML_STREAM_END_EVENT)
        rc = JP_FAIL(p,
                     "line %lu: a second YAML document; a job file holds "
                     "exactly one mapping",
                     line);
    yaml_event_delete(&ev);
    return rc;
}

/* density_warmup against the keys it depends on. Its default is 0, so a
 * warm-up always comes from the file and has a line. */
static flps_err jp_check_warmup(jp *p, const jobspec *s)
{
    const unsigned long wl = p->line[JOBSPEC_KEY_DENSITY_WARMUP];
    char comp[64];

    if (s->density_warmup == 0)
        return FLPS_OK;
    jp_at_key(p, wl, JOBSPEC_KEY_DENSITY_WARMUP);
    jobspec_comp_format(s, comp, sizeof(comp));
    if (s->compression != CODEC_TOPK && s->compression != CODEC_GTOPK &&
        s->compression != CODEC_DGC && s->compression != CODEC_AUTO)
        return JP_FAIL(p,
                       "line %lu: density_warmup: compression '%s' has no "
                       "selection density to warm up; use topk:D, gtopk:D, "
                       "dgc:D or auto, or leave density_warmup out",
                       wl, comp);
    if (s->mode != JOBSPEC_MODE_SSGD)
        return JP_FAIL(p,
                       "line %lu: density_warmup: mode '%s' does not follow a "
                       "warm-up (only ssgd does); leave density_warmup out "
                       "or use mode: ssgd",
                       wl, jobspec_mode_name(s->mode));
    if (s->density_warmup > s->iterations)
        return JP_FAIL(p,
                       "line %lu: density_warmup: %llu is more than "
                       "iterations (%llu); expected an integer from 0 to "
                       "%llu",
                       wl, (unsigned long long)s->density_warmup,
                       (unsigned long long)s->iterations,
                       (unsigned long long)s->iterations);
    if (s->compression != CODEC_AUTO &&
        !(s->density_warmup_start > s->density)) {
        unsigned long sl = p->line[JOBSPEC_KEY_DENSITY_WARMUP_START];
        jp_at_key(p, sl ? sl : wl, JOBSPEC_KEY_DENSITY_WARMUP_START);
        return JP_FAIL(p,
                       "line %lu: density_warmup_start: %g is not above the "
                       "density of compression '%s'; a warm-up starts denser "
                       "than its target: expected a number with %g < S <= 1",
                       sl ? sl : wl, s->density_warmup_start, comp, s->density);
    }
    return FLPS_OK;
}

/* resources: cpu, memory and nvidia.com/gpu are the workers' needs under
 * their Kubernetes names: given there and as cpus_per_worker (...) too,
 * which one counts would depend on the order of the lines. */
static flps_err jp_check_resources(jp *p, const jobspec *s)
{
    static const struct {
        uint32_t bit;
        jobspec_key key;
        const char *name;
    } twice[] = {
        {JOBSPEC_RES_CPU, JOBSPEC_KEY_CPUS_PER_WORKER, "cpu"},
        {JOBSPEC_RES_MEMORY, JOBSPEC_KEY_MEMORY_PER_WORKER, "memory"},
        {JOBSPEC_RES_GPU, JOBSPEC_KEY_GPUS_PER_WORKER, "nvidia.com/gpu"},
    };
    const unsigned long rl = p->line[JOBSPEC_KEY_RESOURCES];

    for (size_t i = 0; i < sizeof(twice) / sizeof(twice[0]); i++) {
        if (!(s->resources_set & twice[i].bit) || p->line[twice[i].key] == 0)
            continue;
        jp_at_key(p, rl, JOBSPEC_KEY_RESOURCES);
        return JP_FAIL(p,
                       "line %lu: resources: %s is what %s (line %lu) "
                       "gives; give the workers' need once, in one of them",
                       rl, twice[i].name, jobspec_key_name(twice[i].key),
                       p->line[twice[i].key]);
    }
    return FLPS_OK;
}

/* servers against the mode: a saps job keeps its model on the workers
 * and runs no shard (servers: 0, its default there); every other mode
 * needs one, or auto: a shard beside each worker, so that each host's
 * link carries what a ring allreduce's would (docs/job-file.md). */
static flps_err jp_check_servers(jp *p, jobspec *s)
{
    const unsigned long sl = p->line[JOBSPEC_KEY_SERVERS];

    jp_at_key(p, sl, JOBSPEC_KEY_SERVERS);
    /* auto, unless a later value (a launcher's flag) replaced it */
    if (s->servers != 0)
        s->servers_auto = 0;
    if (s->mode == JOBSPEC_MODE_SAPS) {
        if (s->servers_auto || (sl != 0 && s->servers > 0))
            return JP_FAIL(p,
                           "line %lu: servers: mode saps (line %lu) keeps "
                           "the model on the workers and runs no shard; "
                           "leave servers out or set it to 0",
                           sl, p->line[JOBSPEC_KEY_MODE]);
        s->servers = 0;
        return FLPS_OK;
    }
    if (s->servers_auto) {
        if (s->workers > 256)
            return JP_FAIL(p,
                           "line %lu: servers: auto puts a shard beside each "
                           "of the %u workers; a job has at most 256 servers",
                           sl, s->workers);
        s->servers = s->workers;
        return FLPS_OK;
    }
    if (s->servers == 0)
        return JP_FAIL(p,
                       "line %lu: servers: '0' is out of range for mode %s; "
                       "expected an integer from 1 to 256 (or auto: one "
                       "beside each worker; 0 for mode saps, which needs "
                       "none)",
                       sl, jobspec_mode_name(s->mode));
    return FLPS_OK;
}

/* What a saps job needs beside its own keys: two workers or more, no
 * codec of its own (saps_density is its compression) and, unless given,
 * one local step between exchanges. */
static flps_err jp_check_saps(jp *p, jobspec *s)
{
    const unsigned long ml = p->line[JOBSPEC_KEY_MODE];
    unsigned long line;

    if (p->line[JOBSPEC_KEY_LOCAL_STEPS] == 0)
        s->local_steps = 1;
    if (s->workers < 2) {
        line = p->line[JOBSPEC_KEY_WORKERS];
        jp_at_key(p, line, JOBSPEC_KEY_WORKERS);
        return JP_FAIL(p,
                       "line %lu: workers: mode saps (line %lu) exchanges "
                       "between workers; expected an integer from 2 to 256",
                       line, ml);
    }
    if (s->workers > 256) {
        line = p->line[JOBSPEC_KEY_WORKERS];
        jp_at_key(p, line, JOBSPEC_KEY_WORKERS);
        return JP_FAIL(p,
                       "line %lu: workers: %u are more than mode saps (line "
                       "%lu) pairs; expected an integer from 2 to 256",
                       line, s->workers, ml);
    }
    if (s->compression != CODEC_DENSE) {
        char comp[64];

        line = p->line[JOBSPEC_KEY_COMPRESSION];
        jp_at_key(p, line, JOBSPEC_KEY_COMPRESSION);
        jobspec_comp_format(s, comp, sizeof(comp));
        return JP_FAIL(p,
                       "line %lu: compression: mode saps (line %lu) sends "
                       "saps_density of the model's values, no codec's "
                       "selection; leave compression '%s' out and set "
                       "saps_density",
                       line, ml, comp);
    }
    return FLPS_OK;
}

/* The keys of federated averaging's clients and server: only mode fedavg
 * runs them, and the shards' optimizer takes a whole update, which gtopk's
 * global selection is not. */
static flps_err jp_check_fedavg(jp *p, const jobspec *s)
{
    static const jobspec_key fl_keys[] = {
        JOBSPEC_KEY_LOCAL_EPOCHS, JOBSPEC_KEY_PROX_MU,
        JOBSPEC_KEY_SERVER_OPTIMIZER, JOBSPEC_KEY_SERVER_LR};
    const int set[] = {s->local_epochs > 0, s->prox_mu > 0,
                       s->server_optimizer != JOBSPEC_SERVER_OPT_SGD,
                       s->server_lr != 1};
    char mode[32];

    jobspec_mode_format(s, mode, sizeof(mode));
    for (size_t i = 0; i < sizeof(fl_keys) / sizeof(fl_keys[0]); i++) {
        const unsigned long line = p->line[fl_keys[i]];

        if (!set[i] || s->mode == JOBSPEC_MODE_FEDAVG)
            continue;
        jp_at_key(p, line, fl_keys[i]);
        return JP_FAIL(p,
                       "line %lu: %s: only mode fedavg runs it, and this job's "
                       "mode is '%s'; leave %s out or use mode: fedavg",
                       line, jobspec_key_name(fl_keys[i]), mode,
                       jobspec_key_name(fl_keys[i]));
    }
    if (s->server_optimizer != JOBSPEC_SERVER_OPT_SGD &&
        s->compression == CODEC_GTOPK) {
        const unsigned long line = p->line[JOBSPEC_KEY_SERVER_OPTIMIZER];

        jp_at_key(p, line, JOBSPEC_KEY_SERVER_OPTIMIZER);
        return JP_FAIL(p,
                       "line %lu: server_optimizer: the shards' optimizer "
                       "steps on the whole averaged delta, and gtopk keeps "
                       "only its global top-k; use compression topk:D or "
                       "dgc:D with it, or server_optimizer: sgd",
                       line);
    }
    return FLPS_OK;
}

/* Checks that involve more than one key, once all are known. */
static flps_err jp_cross_check(jp *p, jobspec *s)
{
    static const jobspec_key required[] = {JOBSPEC_KEY_NAME, JOBSPEC_KEY_MODEL};
    char ex[JOBSPEC_EXPECT_MAX];
    flps_err rc;

    /* A command: job runs the user's own model: model: names flworker's. */
    if (s->command_argc > 0 && p->line[JOBSPEC_KEY_MODEL] == 0)
        s->model = JOBSPEC_MODEL_NONE;
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        jp_at_key(p, 0, required[i]);
        if (p->line[required[i]] == 0 &&
            !(required[i] == JOBSPEC_KEY_MODEL && s->command_argc > 0))
            return JP_FAIL(p, "missing required key '%s'; expected %s",
                           jobspec_key_name(required[i]),
                           jobspec_key_expect(required[i], ex));
    }
    /* rounds defaults to 10, so 0 can only come from the file. */
    jp_at_key(p, p->line[JOBSPEC_KEY_ROUNDS], JOBSPEC_KEY_ROUNDS);
    if (s->mode == JOBSPEC_MODE_FEDAVG && s->rounds == 0)
        return JP_FAIL(p,
                       "line %lu: rounds: '0' is out of range for mode "
                       "fedavg (line %lu); expected an integer from 1 "
                       "to " JP_U32_MAX_TEXT,
                       p->line[JOBSPEC_KEY_ROUNDS], p->line[JOBSPEC_KEY_MODE]);
    rc = jp_check_servers(p, s);
    if (rc != FLPS_OK)
        return rc;
    if (s->mode == JOBSPEC_MODE_SAPS) {
        rc = jp_check_saps(p, s);
        if (rc != FLPS_OK)
            return rc;
    }
    rc = jp_check_resources(p, s);
    if (rc != FLPS_OK)
        return rc;
    rc = jp_check_fedavg(p, s);
    if (rc != FLPS_OK)
        return rc;
    return jp_check_warmup(p, s);
}

/* Run libyaml over the whole text first: libyaml hands out a value before
 * it notices that the next line breaks the syntax ("model: mlp" then a
 * mis-indented "  workers: 4" reads as model 'mlp workers'), and the
 * syntax error is the message that helps. */
static flps_err jp_check_syntax(jp *p, const char *text, size_t len)
{
    yaml_parser_t yp;
    yaml_event_t ev;
    flps_err rc;
    bool done = false;
    int depth = 0;

    if (!yaml_parser_initialize(&yp)) {
        return flps_errbuf_set(p->errbuf, p->errlen, FLPS_ENOMEM,
                               "out of memory while parsing");
    }
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    while (!done) {
        rc = jp_next(p, &yp, &ev);
        if (rc != FLPS_OK)
            break;
        done = ev.type == YAML_STREAM_END_EVENT;
        if (ev.type == YAML_SEQUENCE_START_EVENT ||
            ev.type == YAML_MAPPING_START_EVENT)
            depth++;
        else if (ev.type == YAML_SEQUENCE_END_EVENT ||
                 ev.type == YAML_MAPPING_END_EVENT)
            depth--;
        /* The byte scan bounds it already; this is exact (the scan does
         * not follow single quotes) and stops libyaml early. */
        if (depth > JOBSPEC_MAX_DEPTH) {
            unsigned long line = jp_line(&ev.start_mark);

            jp_at(p, line, "", 0);
            rc = JP_FAIL(p,
                         "line %lu: lists or mappings nested more than %d "
                         "deep; a job file is one flat mapping of keys to "
                         "values",
                         line, JOBSPEC_MAX_DEPTH);
            done = true;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&yp);
    return rc;
}

/* Where the job says which data to read: the lines dataset: and data_dir:
 * were given on (0 when defaulted), so jobspec_load can point at them. */
typedef struct jp_data_lines {
    unsigned long dataset, data_dir;
} jp_data_lines;

/* jobspec_parse, also reporting where the data keys were given. */
static flps_err jp_parse(const char *text, size_t len, jobspec *out,
                         char *errbuf, size_t errlen, jp_data_lines *data,
                         jobspec_where *where)
{
    yaml_parser_t yp;
    jobspec spec;
    jp p;
    flps_err rc;

    if ((text == NULL && len > 0) || out == NULL)
        return FLPS_EINVAL;
    if (text == NULL)
        text = "";
    memset(&p, 0, sizeof(p));
    p.errbuf = errbuf;
    p.errlen = errlen;
    if (errbuf != NULL && errlen > 0)
        errbuf[0] = '\0';
    rc = textguard_check_at(text, len, JOBSPEC_MAX_FILE, JOBSPEC_MAX_DEPTH,
                            "the job file", errbuf, errlen, &p.at_line);
    if (rc != FLPS_OK)
        goto fail;
    rc = jp_check_syntax(&p, text, len);
    if (rc != FLPS_OK)
        goto fail;
    rc = jobspec_key_defaults(&spec, errbuf, errlen);
    if (rc != FLPS_OK)
        goto fail;
    if (!yaml_parser_initialize(&yp))
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "out of memory while parsing");
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    rc = jp_walk(&p, &yp, &spec);
    if (rc == FLPS_OK)
        rc = jp_cross_check(&p, &spec);
    yaml_parser_delete(&yp);
    if (rc != FLPS_OK)
        goto fail;
    for (int k = 0; k < JOBSPEC_KEY_COUNT; k++)
        if (p.line[k] != 0)
            spec.given[k / 64] |= (uint64_t)1 << (k % 64);
    *out = spec;
    data->dataset = p.line[JOBSPEC_KEY_DATASET];
    data->data_dir = p.line[JOBSPEC_KEY_DATA_DIR];
    return FLPS_OK;

fail:
    if (where != NULL && rc == FLPS_ECONFIG) {
        where->line = p.at_line;
        memcpy(where->field, p.at_field, sizeof(where->field));
    }
    return rc;
}

flps_err jobspec_parse(const char *text, size_t len, jobspec *out, char *errbuf,
                       size_t errlen)
{
    jp_data_lines data;

    return jp_parse(text, len, out, errbuf, errlen, &data, NULL);
}

flps_err jobspec_parse_where(const char *text, size_t len, jobspec *out,
                             char *errbuf, size_t errlen, jobspec_where *where)
{
    jp_data_lines data;

    return jp_parse(text, len, out, errbuf, errlen, &data, where);
}

/* ---- Files ----------------------------------------------------------- */

/* strerror is not thread-safe; the project builds with _GNU_SOURCE, which
 * selects the GNU strerror_r that returns the message. */
static const char *jp_strerror(int err, char *buf, size_t len)
{
#ifdef _GNU_SOURCE
    return strerror_r(err, buf, len);
#else
    if (strerror_r(err, buf, len) != 0)
        snprintf(buf, len, "error %d", err);
    return buf;
#endif
}

/* Reads rather than trusting st_size so pipes and /dev/fd paths work
 * too. */
flps_err jobspec_read_file(const char *path, char **text, size_t *len,
                           char *errbuf, size_t errlen)
{
    char ebuf[128];
    char chunk[4096];
    flps_strbuf buf;
    flps_err rc;
    struct stat st;
    size_t n;
    char *t;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                               "%s: cannot open the job file: %s", path,
                               jp_strerror(errno, ebuf, sizeof(ebuf)));
    flps_strbuf_init(&buf);
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (uintmax_t)st.st_size > JOBSPEC_MAX_FILE) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                             "%s: the job file is %jd bytes; job files over "
                             "1 MiB are refused",
                             path, (intmax_t)st.st_size);
        goto fail;
    }
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof(chunk));

        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                                 "%s: cannot read the job file: %s", path,
                                 jp_strerror(errno, ebuf, sizeof(ebuf)));
            goto fail;
        }
        if (got == 0)
            break;
        if (buf.len + (size_t)got > JOBSPEC_MAX_FILE) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                 "%s: the job file is over 1 MiB; job files "
                                 "over 1 MiB are refused",
                                 path);
            goto fail;
        }
        if (flps_strbuf_append(&buf, chunk, (size_t)got) != FLPS_OK)
            goto fail_nomem;
    }
    n = buf.len;
    t = flps_strbuf_take(&buf);
    if (t == NULL)
        goto fail_nomem;
    close(fd);
    *text = t;
    *len = n;
    return FLPS_OK;

fail_nomem:
    rc = flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                         "%s: out of memory reading the job file", path);
fail:
    flps_strbuf_fini(&buf);
    close(fd);
    return rc;
}

static const char *const jp_fmnist_files[] = {
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
};

const char *jobspec_fmnist_file(size_t i)
{
    return i < sizeof(jp_fmnist_files) / sizeof(jp_fmnist_files[0])
               ? jp_fmnist_files[i]
               : NULL;
}

/* Fail early, with the fix, rather than minutes later inside a worker. */
static flps_err jp_check_dataset(const char *path, const jobspec *s,
                                 unsigned long dd_line, char *errbuf,
                                 size_t errlen)
{
    char where[48];
    size_t dl = strlen(s->data_dir);
    const char *sep = (dl > 0 && s->data_dir[dl - 1] == '/') ? "" : "/";

    if (dd_line != 0)
        snprintf(where, sizeof(where), "line %lu: data_dir", dd_line);
    else
        snprintf(where, sizeof(where), "data_dir (default)");
    for (size_t i = 0; i < 4; i++) {
        char file[sizeof(s->data_dir) + 64];
        char ebuf[128];
        const char *why = NULL;
        struct stat st;

        snprintf(file, sizeof(file), "%s%s%s", s->data_dir, sep,
                 jp_fmnist_files[i]);
        if (stat(file, &st) != 0)
            why = jp_strerror(errno, ebuf, sizeof(ebuf));
        else if (!S_ISREG(st.st_mode))
            why = "not a regular file";
        else if (access(file, R_OK) != 0)
            why = jp_strerror(errno, ebuf, sizeof(ebuf));
        if (why == NULL)
            continue;
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "%s: %s: fashion-mnist file '%s' is missing (%s); "
            "data_dir must hold train-images-idx3-ubyte.gz, "
            "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz "
            "and t10k-labels-idx1-ubyte.gz; install them with "
            "`apt-get install dataset-fashion-mnist` or point "
            "data_dir at a copy",
            path, where, file, why);
    }
    return FLPS_OK;
}

flps_err jobspec_load_text(const char *name, const char *text, size_t len,
                           jobspec *out, char *errbuf, size_t errlen,
                           jobspec_where *where)
{
    char msg[1024];
    jp_data_lines data = {0, 0};
    jobspec spec;
    flps_err rc;

    if (name == NULL || out == NULL)
        return FLPS_EINVAL;
    rc = jp_parse(text, len, &spec, msg, sizeof(msg), &data, where);
    if (rc != FLPS_OK)
        return flps_errbuf_set(errbuf, errlen, rc, "%s: %s", name, msg);
    /* A command: job's program reads its own data, unless the job says
     * it reads flps's. */
    if (spec.dataset == JOBSPEC_DATASET_FASHION_MNIST &&
        (spec.command_argc == 0 || data.dataset != 0 || data.data_dir != 0)) {
        rc = jp_check_dataset(name, &spec, data.data_dir, errbuf, errlen);
        if (rc != FLPS_OK)
            return rc;
    }
    *out = spec;
    return FLPS_OK;
}

flps_err jobspec_load(const char *path, jobspec *out, char *errbuf,
                      size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    flps_err rc;

    if (path == NULL || out == NULL)
        return FLPS_EINVAL;
    rc = jobspec_read_file(path, &text, &len, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    rc = jobspec_load_text(path, text, len, out, errbuf, errlen, NULL);
    flps_free(text);
    return rc;
}
