/* Plans for `compression: auto`: profile JSON in, LAGS plan JSON out, and
 * the plan parser its consumers share. */
#include "services/plan.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "compress/lags.h"

/* The largest integer the codecs take as an array length (n < 2^32). */
#define PLAN_NUMEL_MAX 0xffffffffull

/* jansson reports where it stopped, not which field it was reading. A
 * number too large for a double (how a NaN or Inf usually arrives) fails
 * the whole document, so find the key whose value ends at pos: walk back
 * over the value to a ':' and take the quoted key before it. Best effort;
 * key is "" when the text there is not `"key": value`. */
static void plan_key_before(const char *s, size_t pos, char *key, size_t len)
{
    size_t n = strlen(s), i = pos < n ? pos : n, end;

    key[0] = '\0';
    while (i > 0 && strchr(":,{}[]\"", s[i - 1]) == NULL)
        i--;
    if (i == 0 || s[i - 1] != ':')
        return;
    i--;
    while (i > 0 && isspace((unsigned char)s[i - 1]))
        i--;
    if (i == 0 || s[i - 1] != '"')
        return;
    end = --i;
    while (i > 0 && s[i - 1] != '"')
        i--;
    if (i == 0)
        return;
    snprintf(key, len, "%.*s", (int)(end - i), s + i);
}

/* The document text as a JSON object; what ("profile") starts the message
 * of a text that is no JSON, NULL for none (the caller's context names it). */
static json_t *plan_load(const char *what, const char *text, char *errbuf,
                         size_t errlen)
{
    json_error_t jerr;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    char key[64];

    if (o == NULL) {
        plan_key_before(text, (size_t)jerr.position, key, sizeof(key));
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "%s%s%s%snot valid JSON: %s (line %d, column %d)",
                        what ? what : "", what ? ": " : "", key,
                        key[0] ? ": " : "", jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "%s%sexpected a JSON object", what ? what : "",
                        what ? ": " : "");
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The JSON types a field may want. */
typedef enum {
    PLAN_INTEGER,
    PLAN_NUMBER, /* an integer or a real */
    PLAN_STRING,
    PLAN_ARRAY,
} plan_type;

/* Field getters: each names the field (path + key) when it is missing or of
 * the wrong type, and returns 0 then. */
static int plan_get(json_t *o, const char *path, const char *key,
                    plan_type want, json_t **out, char *errbuf, size_t errlen)
{
    static const char *const wants[] = {
        [PLAN_INTEGER] = "an integer",
        [PLAN_NUMBER] = "a number",
        [PLAN_STRING] = "a string",
        [PLAN_ARRAY] = "an array",
    };
    json_t *v = json_object_get(o, key);
    int ok;

    if (v == NULL) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO, "%s%s: missing", path,
                        key);
        return 0;
    }
    switch (want) {
    case PLAN_INTEGER:
        ok = json_is_integer(v);
        break;
    case PLAN_NUMBER:
        ok = json_is_number(v);
        break;
    case PLAN_STRING:
        ok = json_is_string(v);
        break;
    default:
        ok = json_is_array(v);
        break;
    }
    if (!ok) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO, "%s%s: expected %s", path,
                        key, wants[want]);
        return 0;
    }
    *out = v;
    return 1;
}

static int plan_get_int(json_t *o, const char *path, const char *key,
                        json_int_t min, json_int_t *out, char *errbuf,
                        size_t errlen)
{
    json_t *v;

    if (!plan_get(o, path, key, PLAN_INTEGER, &v, errbuf, errlen))
        return 0;
    if (json_integer_value(v) < min) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO, "%s%s: %lld is below %lld",
                        path, key, (long long)json_integer_value(v),
                        (long long)min);
        return 0;
    }
    *out = json_integer_value(v);
    return 1;
}

/* A finite number >= 0, or > 0 when positive is set. */
static int plan_get_time(json_t *o, const char *path, const char *key,
                         int positive, double *out, char *errbuf, size_t errlen)
{
    json_t *v;
    double x;

    if (!plan_get(o, path, key, PLAN_NUMBER, &v, errbuf, errlen))
        return 0;
    x = json_number_value(v);
    if (!isfinite(x) || x < 0.0 || (positive && x == 0.0)) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "%s%s: %g is not a finite number %s 0", path, key, x,
                        positive ? ">" : ">=");
        return 0;
    }
    *out = x;
    return 1;
}

static int plan_get_name(json_t *o, const char *path, const char **out,
                         char *errbuf, size_t errlen)
{
    json_t *v;
    size_t n;

    if (!plan_get(o, path, "name", PLAN_STRING, &v, errbuf, errlen))
        return 0;
    n = json_string_length(v);
    if (n == 0 || n > PLAN_NAME_MAX ||
        memchr(json_string_value(v), '\0', n) != NULL) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "%sname: expected 1 to %d bytes without NUL, got %zu",
                        path, PLAN_NAME_MAX, n);
        return 0;
    }
    *out = json_string_value(v);
    return 1;
}

static int plan_get_numel(json_t *o, const char *path, uint64_t *out,
                          char *errbuf, size_t errlen)
{
    json_int_t n;

    if (!plan_get_int(o, path, "numel", 1, &n, errbuf, errlen))
        return 0;
    if ((unsigned long long)n > PLAN_NUMEL_MAX) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "%snumel: %lld is 2^32 or more", path, (long long)n);
        return 0;
    }
    *out = (uint64_t)n;
    return 1;
}

/* names[0..n) are the names seen so far; the lists are short (one entry
 * per layer), so a linear scan is fine. */
static int plan_name_is_new(const char *const *names, size_t n,
                            const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return 0;
    return 1;
}

/* Layer i of a document's layers: an object with a name (1..PLAN_NAME_MAX
 * bytes, not among names[0..i)) and a numel; path gets "layers[i]." for
 * the caller's further fields. Returns the object, or NULL with a message. */
static json_t *plan_get_layer(json_t *layers, size_t i,
                              const char *const *names, char *path,
                              size_t pathlen, const char **name,
                              uint64_t *numel, char *errbuf, size_t errlen)
{
    json_t *l = json_array_get(layers, i);

    snprintf(path, pathlen, "layers[%zu].", i);
    if (!json_is_object(l)) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "layers[%zu]: expected an object", i);
        return NULL;
    }
    if (!plan_get_name(l, path, name, errbuf, errlen) ||
        !plan_get_numel(l, path, numel, errbuf, errlen))
        return NULL;
    if (!plan_name_is_new(names, i, *name)) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "%sname: \"%s\" appears twice", path, *name);
        return NULL;
    }
    return l;
}

/* The non-empty "layers" array of o, or NULL with a message. */
static json_t *plan_get_layers(json_t *o, char *errbuf, size_t errlen)
{
    json_t *v;

    if (!plan_get(o, "", "layers", PLAN_ARRAY, &v, errbuf, errlen))
        return NULL;
    if (json_array_size(v) == 0) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "layers: empty; a plan needs one layer");
        return NULL;
    }
    return v;
}

/* Validated profile, borrowing the names from the parsed document. */
typedef struct {
    lags_params params;
    size_t nl;
    const char **names;   /* layout order */
    lags_layer *backprop; /* backprop order: backprop[j] = layout nl-1-j */
} plan_profile;

static flps_err plan_profile_read(json_t *o, plan_profile *pp, char *errbuf,
                                  size_t errlen)
{
    json_t *ev, *layers;
    json_int_t iteration, workers;
    double total = 0.0;

    ev = json_object_get(o, "event");
    if (ev == NULL) {
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO, "event: missing");
    }
    if (!json_is_string(ev) || strcmp(json_string_value(ev), "profile") != 0) {
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "event: expected \"profile\"");
    }
    lags_params_default(&pp->params);
    if (!plan_get_int(o, "", "iteration", 0, &iteration, errbuf, errlen) ||
        !plan_get_int(o, "", "workers", 1, &workers, errbuf, errlen) ||
        !plan_get_time(o, "", "alpha", 1, &pp->params.alpha, errbuf, errlen) ||
        !plan_get_time(o, "", "beta", 1, &pp->params.beta, errbuf, errlen))
        return FLPS_EPROTO;
    if ((unsigned long long)workers > 0xffffffffull) {
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "workers: %lld is too many", (long long)workers);
    }
    pp->params.workers = (unsigned)workers;
    if ((layers = plan_get_layers(o, errbuf, errlen)) == NULL)
        return FLPS_EPROTO;
    pp->nl = json_array_size(layers);
    pp->names = flps_calloc(pp->nl, sizeof(*pp->names));
    pp->backprop = flps_calloc(pp->nl, sizeof(*pp->backprop));
    if (pp->names == NULL || pp->backprop == NULL)
        return FLPS_ENOMEM;
    for (size_t i = 0; i < pp->nl; i++) {
        lags_layer *bl = &pp->backprop[pp->nl - 1 - i];
        char path[48];
        uint64_t numel;
        json_t *l = plan_get_layer(layers, i, pp->names, path, sizeof(path),
                                   &pp->names[i], &numel, errbuf, errlen);

        if (l == NULL || !plan_get_time(l, path, "t_backward", 0,
                                        &bl->t_backward, errbuf, errlen))
            return FLPS_EPROTO;
        bl->numel = (size_t)numel;
        total += bl->t_backward;
    }
    if (!isfinite(total)) {
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "layers: the backward times add up to more than a double "
            "holds");
    }
    return FLPS_OK;
}

/* The plan document; NULL when out of memory. choice is in backprop order,
 * the document in layout order. */
static json_t *plan_build(const plan_profile *pp, const lags_choice *choice,
                          uint64_t version, double t_plan, double t_dense)
{
    json_t *doc = json_object(), *arr = json_array();

    if (doc == NULL || arr == NULL ||
        json_object_set_new(doc, "version", json_integer((json_int_t)version)))
        goto fail;
    if (json_object_set_new(doc, "layers", arr) != 0) {
        arr = NULL; /* json_object_set_new releases it on failure */
        goto fail;
    }
    for (size_t i = 0; i < pp->nl; i++) {
        const lags_choice *c = &choice[pp->nl - 1 - i];
        int dense = c->spec.kind == CODEC_DENSE;
        json_t *l = json_object();

        if (l == NULL || json_array_append_new(arr, l) != 0 ||
            json_object_set_new(l, "name", json_string(pp->names[i])) ||
            json_object_set_new(
                l, "numel",
                json_integer((json_int_t)pp->backprop[pp->nl - 1 - i].numel)) ||
            json_object_set_new(l, "codec",
                                json_string(codec_kind_name(
                                    dense ? CODEC_DENSE : CODEC_TOPK))) ||
            json_object_set_new(l, "density",
                                dense ? json_integer(1)
                                      : json_real(c->spec.density)))
            goto fail_doc;
    }
    if (json_object_set_new(doc, "predicted_iteration_seconds",
                            json_real(t_plan)) ||
        json_object_set_new(doc, "dense_iteration_seconds", json_real(t_dense)))
        goto fail_doc;
    return doc;

fail:
    json_decref(arr);
fail_doc:
    json_decref(doc);
    return NULL;
}

flps_err plan_from_profile(const char *profile_json, uint64_t version,
                           char **plan_json, char *errbuf, size_t errlen)
{
    plan_profile pp;
    lags_choice *choice = NULL, *dense = NULL;
    json_t *o, *doc = NULL;
    double t_plan, t_dense;
    char *text;
    flps_err rc;

    if (profile_json == NULL || plan_json == NULL) {
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "no profile or no place for the plan");
    }
    if (version > INT64_MAX) {
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "version %llu does not fit JSON's integers",
                               (unsigned long long)version);
    }
    memset(&pp, 0, sizeof(pp));
    if ((o = plan_load("profile", profile_json, errbuf, errlen)) == NULL)
        return FLPS_EPROTO;
    if ((rc = plan_profile_read(o, &pp, errbuf, errlen)) != FLPS_OK)
        goto out;
    rc = FLPS_ENOMEM;
    choice = flps_calloc(pp.nl, sizeof(*choice));
    dense = flps_calloc(pp.nl, sizeof(*dense));
    if (choice == NULL || dense == NULL)
        goto out;
    for (size_t j = 0; j < pp.nl; j++) {
        dense[j].spec.kind = CODEC_DENSE;
        dense[j].spec.density = 1.0;
    }
    /* Validated above, so the planner accepts the input. */
    if (lags_plan(pp.backprop, pp.nl, &pp.params, choice, &t_plan) != FLPS_OK ||
        lags_predict(pp.backprop, pp.nl, &pp.params, dense, &t_dense) !=
            FLPS_OK) {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "the planner refused the profile");
        rc = FLPS_EPROTO;
        goto out;
    }
    if (!isfinite(t_plan) || !isfinite(t_dense)) {
        /* Huge but finite inputs (1e300 s per byte) overflow the model. */
        flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "the profile's costs overflow the planner's model (alpha "
            "%g, beta %g)",
            pp.params.alpha, pp.params.beta);
        rc = FLPS_EPROTO;
        goto out;
    }
    if ((doc = plan_build(&pp, choice, version, t_plan, t_dense)) == NULL)
        goto out;
    text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER |
                               JSON_REAL_PRECISION(17));
    if (text == NULL)
        goto out;
    *plan_json = text;
    rc = FLPS_OK;

out:
    json_decref(doc);
    flps_free(dense);
    flps_free(choice);
    flps_free(pp.backprop);
    flps_free(pp.names);
    json_decref(o);
    if (rc == FLPS_ENOMEM)
        flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    return rc;
}

/* The codec and density of layer l (at path): "dense" with density 1, or
 * "topk" with a density in (0, 1]. */
static int plan_get_codec(json_t *l, const char *path, plan_layer *pl,
                          char *errbuf, size_t errlen)
{
    const char *dense = codec_kind_name(CODEC_DENSE);
    const char *topk = codec_kind_name(CODEC_TOPK);
    const char *name;
    json_t *v;

    if (!plan_get(l, path, "codec", PLAN_STRING, &v, errbuf, errlen))
        return 0;
    name = json_string_value(v);
    if (!plan_get(l, path, "density", PLAN_NUMBER, &v, errbuf, errlen))
        return 0;
    pl->density = json_number_value(v);
    if (strcmp(name, dense) == 0 && pl->density == 1.0) {
        pl->kind = CODEC_DENSE;
    } else if (strcmp(name, topk) == 0 && pl->density > 0.0 &&
               pl->density <= 1.0) {
        pl->kind = CODEC_TOPK;
    } else {
        flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                        "%scodec: \"%.32s\" with density %g; expected \"%s\" "
                        "with density 1 or \"%s\" with a density in (0, 1]",
                        path, name, pl->density, dense, topk);
        return 0;
    }
    return 1;
}

/* The plan in o, validated, into p (whose layers hold p->nlayers). */
static flps_err plan_read(json_t *o, json_t *layers, plan *p,
                          const char **names, char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < p->nlayers; i++) {
        plan_layer *pl = &p->layers[i];
        char path[48];
        json_t *l = plan_get_layer(layers, i, names, path, sizeof(path),
                                   &names[i], &pl->numel, errbuf, errlen);

        if (l == NULL || !plan_get_codec(l, path, pl, errbuf, errlen))
            return FLPS_EPROTO;
        snprintf(pl->name, sizeof(pl->name), "%s", names[i]);
    }
    if (!plan_get_time(o, "", "predicted_iteration_seconds", 0,
                       &p->predicted_iteration_seconds, errbuf, errlen) ||
        !plan_get_time(o, "", "dense_iteration_seconds", 0,
                       &p->dense_iteration_seconds, errbuf, errlen))
        return FLPS_EPROTO;
    return FLPS_OK;
}

flps_err plan_parse(const char *plan_json, plan **out, char *errbuf,
                    size_t errlen)
{
    flps_err rc = FLPS_EPROTO;
    json_t *o, *layers;
    json_int_t version;
    const char **names = NULL;
    plan *p = NULL;

    if (plan_json == NULL || out == NULL) {
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "no plan or no place for it");
    }
    if ((o = plan_load(NULL, plan_json, errbuf, errlen)) == NULL)
        return FLPS_EPROTO;
    if (!plan_get_int(o, "", "version", 0, &version, errbuf, errlen) ||
        (layers = plan_get_layers(o, errbuf, errlen)) == NULL)
        goto out;
    rc = FLPS_ENOMEM;
    p = flps_calloc(1, sizeof(*p));
    if (p == NULL)
        goto out;
    p->nlayers = json_array_size(layers);
    p->layers = flps_calloc(p->nlayers, sizeof(*p->layers));
    names = flps_calloc(p->nlayers, sizeof(*names));
    if (p->layers == NULL || names == NULL)
        goto out;
    p->version = (uint64_t)version;
    if ((rc = plan_read(o, layers, p, names, errbuf, errlen)) != FLPS_OK)
        goto out;
    *out = p;
    p = NULL;

out:
    if (rc == FLPS_ENOMEM)
        flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    flps_free(names);
    plan_free(p);
    json_decref(o);
    return rc;
}

codec_spec plan_layer_spec(const plan_layer *l)
{
    codec_spec s = {l->kind, l->kind == CODEC_DENSE ? 1.0 : l->density, 0};

    return s;
}

void plan_free(plan *p)
{
    if (p == NULL)
        return;
    flps_free(p->layers);
    flps_free(p);
}
