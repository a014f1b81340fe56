/* The worker event lines: writer, reader and docs table, all driven by the
 * field tables made from services/event_schema.h. */
#include "services/event.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "common/alloc.h"

typedef enum {
    TY_U64,
    TY_F3,
    TY_F4,
    TY_F5,
    TY_F6,
    TY_G9,
    TY_BOOL,
    TY_STR,
    TY_U64S,
    TY_DONE_LAYERS,
    TY_PROFILE_LAYERS,
} field_type;

#define NEED_REQ 1
#define NEED_OPT 0

typedef struct field_desc {
    const char *name;
    field_type type;
    int required;
    size_t offset; /* in its struct */
    const char *doc;
} field_desc;

/* One struct of the schema: an event's or an array item's. */
typedef struct object_desc {
    const field_desc *fields;
    size_t nfields;
    size_t size;       /* of the struct */
    size_t has_offset; /* of its has */
} object_desc;

#define FIELD_DESC_(e, f, type, need, doc)                                     \
    {#f, TY_##type, NEED_##need, offsetof(event_##e, f), doc},
#define OBJECT_DESC_(e)                                                        \
    static const field_desc e##_fields[] = {EVENT_FIELDS_##e(FIELD_DESC_, e)}; \
    static const object_desc e##_desc = {                                      \
        e##_fields, sizeof(e##_fields) / sizeof(e##_fields[0]),                \
        sizeof(event_##e), offsetof(event_##e, has)};                          \
    _Static_assert(EVENT_NFIELDS_##e <= 64, "has is 64 bits")

OBJECT_DESC_(done_layer);
OBJECT_DESC_(profile_layer);
#define KIND_DESC_(K, e, writers, readers, doc) OBJECT_DESC_(e);
EVENT_KINDS(KIND_DESC_)
#undef KIND_DESC_

typedef struct kind_desc {
    const char *name;
    const object_desc *obj;
    size_t offset; /* of its member in struct event */
    const char *writers, *readers, *doc;
} kind_desc;

/* Indexed by event_kind - 1. */
static const kind_desc kinds[] = {
#define KIND_ROW_(K, e, writers, readers, doc)                                 \
    {#e, &e##_desc, offsetof(event, e), writers, readers, doc},
    EVENT_KINDS(KIND_ROW_)
#undef KIND_ROW_
};

#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static const kind_desc *kind_of(event_kind kind)
{
    if (kind <= EVENT_NONE || kind >= EVENT_UNKNOWN)
        return NULL;
    return &kinds[kind - 1];
}

const char *event_kind_name(event_kind kind)
{
    const kind_desc *k = kind_of(kind);

    return k != NULL ? k->name : "";
}

static uint64_t *has_of(const object_desc *d, void *base)
{
    return (uint64_t *)((char *)base + d->has_offset);
}

/* The item table of an array-of-objects type; NULL for other types. */
static const object_desc *item_desc(field_type type)
{
    if (type == TY_DONE_LAYERS)
        return &done_layer_desc;
    if (type == TY_PROFILE_LAYERS)
        return &profile_layer_desc;
    return NULL;
}

/* The items of array field p (of an array type) and their count. */
static void *array_items(field_type type, const void *p, size_t *n)
{
    switch (type) {
    case TY_U64S:
        *n = ((const event_u64s *)p)->n;
        return ((const event_u64s *)p)->v;
    case TY_DONE_LAYERS:
        *n = ((const event_done_layers *)p)->n;
        return ((const event_done_layers *)p)->v;
    case TY_PROFILE_LAYERS:
        *n = ((const event_profile_layers *)p)->n;
        return ((const event_profile_layers *)p)->v;
    default:
        *n = 0;
        return NULL;
    }
}

static void array_set(field_type type, void *p, void *items, size_t n)
{
    switch (type) {
    case TY_U64S:
        ((event_u64s *)p)->v = items;
        ((event_u64s *)p)->n = n;
        break;
    case TY_DONE_LAYERS:
        ((event_done_layers *)p)->v = items;
        ((event_done_layers *)p)->n = n;
        break;
    case TY_PROFILE_LAYERS:
        ((event_profile_layers *)p)->v = items;
        ((event_profile_layers *)p)->n = n;
        break;
    default:
        break;
    }
}

/* Whether values of type are numbers read as doubles. */
static int is_real(field_type type)
{
    return type >= TY_F3 && type <= TY_G9;
}

/* ---- Writer ---- */

/* A JSON string: '"', '\\' and control characters escaped as json_dumps
 * does; other bytes as they are (UTF-8). */
static void write_string(FILE *f, const char *s)
{
    /* The characters with a short escape, and their letters. */
    static const char shorts[] = "\"\\\b\f\n\r\t", letters[] = "\"\\bfnrt";

    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        const char *e = strchr(shorts, *p);

        if (e != NULL)
            fprintf(f, "\\%c", letters[e - shorts]);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* A number with fmt; null when it is not finite (JSON has no NaN). */
static void write_real(FILE *f, const char *fmt, double v)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

static void write_object(FILE *f, const object_desc *d, const void *base,
                         int first);

static void write_value(FILE *f, field_type type, const void *p)
{
    static const char *const real_format[] = {[TY_F3] = "%.3f",
                                              [TY_F4] = "%.4f",
                                              [TY_F5] = "%.5f",
                                              [TY_F6] = "%.6f",
                                              [TY_G9] = "%.9g"};

    if (is_real(type)) {
        write_real(f, real_format[type], *(const double *)p);
        return;
    }
    switch (type) {
    case TY_U64:
        fprintf(f, "%" PRIu64, *(const uint64_t *)p);
        break;
    case TY_BOOL:
        fputs(*(const int *)p ? "true" : "false", f);
        break;
    case TY_STR:
        if (*(const char *const *)p != NULL)
            write_string(f, *(const char *const *)p);
        else
            fputs("null", f);
        break;
    case TY_U64S: {
        const event_u64s *a = p;

        fputc('[', f);
        for (size_t i = 0; i < a->n; i++)
            fprintf(f, "%s%" PRIu64, i ? "," : "", a->v[i]);
        fputc(']', f);
        break;
    }
    case TY_DONE_LAYERS:
    case TY_PROFILE_LAYERS: {
        const object_desc *d = item_desc(type);
        size_t n;
        const char *items = array_items(type, p, &n);

        fputc('[', f);
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ",{" : "{", f);
            write_object(f, d, items + i * d->size, 1);
            fputc('}', f);
        }
        fputc(']', f);
        break;
    }
    default: /* the reals, above */
        break;
    }
}

/* The fields of base (without braces): the REQ ones and those whose has
 * bit is set, each after a ',' unless first. */
static void write_object(FILE *f, const object_desc *d, const void *base,
                         int first)
{
    uint64_t has = *has_of(d, (void *)base);

    for (size_t i = 0; i < d->nfields; i++) {
        const field_desc *fd = &d->fields[i];

        if (!fd->required && !((has >> i) & 1u))
            continue;
        fprintf(f, "%s\"%s\":", first ? "" : ",", fd->name);
        first = 0;
        write_value(f, fd->type, (const char *)base + fd->offset);
    }
}

flps_err event_write(FILE *f, const event *ev)
{
    const kind_desc *k = kind_of(ev->kind);

    if (k == NULL)
        return FLPS_EINVAL;
    fprintf(f, "{\"event\":\"%s\"", k->name);
    write_object(f, k->obj, (const char *)ev + k->offset, 0);
    fputs("}\n", f);
    return fflush(f) == 0 && !ferror(f) ? FLPS_OK : FLPS_EIO;
}

/* ---- Reader ---- */

/* What a read found wrong: the first problem is told, every one counts. */
typedef struct problems {
    char *why;
    size_t whylen;
    int n;
    int nomem;
} problems;

/* Count a problem of the read; the first one's message goes to why. */
#define problem(pr, ...)                                                       \
    do {                                                                       \
        if ((pr)->n++ == 0)                                                    \
            flps_errbuf_set((pr)->why, (pr)->whylen, FLPS_EINVAL,              \
                            __VA_ARGS__);                                      \
    } while (0)

/* What v is, for "wants X, not Y". */
static const char *json_what(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return json_integer_value(v) < 0 ? "a negative number" : "a number";
    case JSON_REAL:
        return "a number with a fraction or exponent";
    case JSON_TRUE:
    case JSON_FALSE:
        return "true or false";
    default:
        return "null";
    }
}

static int is_u64(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0;
}

static int decode_object(problems *pr, const object_desc *d, json_t *obj,
                         void *base, const char *path, unsigned flags, int top);
static void free_arrays(const object_desc *d, void *base);

/* The items of arr into a fresh array set on array field p; 0 when one
 * is wrong (told; nothing kept). */
static int decode_items(problems *pr, field_type type, json_t *arr, void *p,
                        const char *path, unsigned flags)
{
    size_t nitems = json_array_size(arr);
    const object_desc *d = item_desc(type);
    char *items = NULL, ipath[160];

    if (nitems > 0) {
        items = type == TY_U64S ? flps_calloc(nitems, sizeof(uint64_t))
                                : flps_calloc(nitems, d->size);
        if (items == NULL) {
            pr->nomem = 1;
            return 0;
        }
    }
    for (size_t i = 0; i < nitems; i++) {
        json_t *it = json_array_get(arr, i);

        /* A path that does not fit is cut, as the message may be. */
        flps_errbuf_set(ipath, sizeof(ipath), FLPS_OK, "%s[%zu]", path, i);
        if (type == TY_U64S) {
            if (!is_u64(it)) {
                problem(pr, "%s: wants a whole number >= 0, not %s", ipath,
                        json_what(it));
                goto bad;
            }
            ((uint64_t *)items)[i] = (uint64_t)json_integer_value(it);
        } else if (!json_is_object(it)) {
            problem(pr, "%s: wants an object, not %s", ipath, json_what(it));
            goto bad;
        } else if (!decode_object(pr, d, it, items + i * d->size, ipath, flags,
                                  0)) {
            goto bad;
        }
    }
    array_set(type, p, items, nitems);
    return 1;
bad:
    for (size_t k = 0; d != NULL && k < nitems; k++)
        free_arrays(d, items + k * d->size); /* calloc'd: empty ones too */
    flps_free(items);
    return 0;
}

/* Field fd of value v into p; 0 (with a problem told) when v is not of
 * its type. */
static int decode_value(problems *pr, const field_desc *fd, json_t *v, void *p,
                        const char *path, unsigned flags)
{
    char fpath[160];
    const char *want = NULL;

    flps_errbuf_set(fpath, sizeof(fpath), FLPS_OK, "%s.%s", path, fd->name);
    if (is_real(fd->type)) {
        if (!json_is_number(v))
            want = "a number";
        else
            *(double *)p = json_number_value(v);
    }
    switch (fd->type) {
    case TY_U64:
        if (!is_u64(v))
            want = "a whole number >= 0";
        else
            *(uint64_t *)p = (uint64_t)json_integer_value(v);
        break;
    case TY_BOOL:
        if (!json_is_boolean(v))
            want = "true or false";
        else
            *(int *)p = json_is_true(v);
        break;
    case TY_STR:
        if (!json_is_string(v))
            want = "a string";
        else
            *(const char **)p = json_string_value(v);
        break;
    case TY_U64S:
    case TY_DONE_LAYERS:
    case TY_PROFILE_LAYERS:
        if (!json_is_array(v))
            want = fd->type == TY_U64S ? "an array of whole numbers >= 0"
                                       : "an array of objects";
        else
            return decode_items(pr, fd->type, v, p, fpath, flags);
        break;
    default: /* the reals, above */
        break;
    }
    if (want != NULL) {
        problem(pr, "%s: wants %s, not %s", fpath, want, json_what(v));
        return 0;
    }
    return 1;
}

/* The fields of obj that have their type into base (has bits set); 1 when
 * nothing was wrong. top: obj is the line's, whose "event" is no field. */
static int decode_object(problems *pr, const object_desc *d, json_t *obj,
                         void *base, const char *path, unsigned flags, int top)
{
    uint64_t *has = has_of(d, base);
    int before = pr->n;
    const char *key;
    json_t *v;

    for (size_t i = 0; i < d->nfields; i++) {
        const field_desc *fd = &d->fields[i];

        v = json_object_get(obj, fd->name);
        if (v == NULL || json_is_null(v)) {
            if (fd->required)
                problem(pr, "%s: lacks %s", path, fd->name);
            continue;
        }
        if (decode_value(pr, fd, v, (char *)base + fd->offset, path, flags))
            *has |= (uint64_t)1 << i;
        if (pr->nomem)
            return 0;
    }
    if (flags & EVENT_READ_STRICT) {
        json_object_foreach(obj, key, v)
        {
            size_t i = 0;

            while (i < d->nfields && strcmp(d->fields[i].name, key) != 0)
                i++;
            if (i == d->nfields && !(top && strcmp(key, "event") == 0))
                problem(pr, "%s: unknown field \"%s\"", path, key);
        }
    }
    return pr->n == before;
}

static void free_arrays(const object_desc *d, void *base)
{
    for (size_t i = 0; i < d->nfields; i++) {
        const field_desc *fd = &d->fields[i];
        void *p = (char *)base + fd->offset;
        const object_desc *id = item_desc(fd->type);
        size_t n;
        char *items = array_items(fd->type, p, &n);

        for (size_t k = 0; id != NULL && k < n; k++)
            free_arrays(id, items + k * id->size);
        flps_free(items);
    }
}

void event_done_energy(event_done *d, const flps_energy *e)
{
    if (e->devices > 0 && e->iterations > 0) {
        d->joules_per_iteration = e->joules_per_iteration;
        d->energy_iterations = e->iterations;
        d->energy_method = e->method;
        EVENT_SET(d, done, joules_per_iteration);
        EVENT_SET(d, done, energy_iterations);
        EVENT_SET(d, done, energy_method);
    }
    /* Each part only where a device of its kind was metered: a package
     * nobody reads is no package using 0 J. */
    if (e->gpus > 0 && e->iterations > 0) {
        d->gpu_joules_per_iteration = e->gpu_joules_per_iteration;
        d->energy_gpus = e->gpu_list;
        EVENT_SET(d, done, gpu_joules_per_iteration);
        EVENT_SET(d, done, energy_gpus);
    }
    if (e->devices > e->gpus && e->iterations > 0) {
        d->cpu_joules_per_iteration = e->cpu_joules_per_iteration;
        EVENT_SET(d, done, cpu_joules_per_iteration);
    }
    /* auto cut short by the job's end chose nothing: no clock to name. */
    if (e->gpu_clock_chosen &&
        (e->gpus > 0 ||
         (e->gpu_clock[0] != '\0' && strcmp(e->gpu_clock, "default") != 0))) {
        d->gpu_clock_mhz = e->gpu_clock_mhz;
        EVENT_SET(d, done, gpu_clock_mhz);
    }
}

void event_fini(event *ev)
{
    const kind_desc *k;

    if (ev == NULL)
        return;
    k = kind_of(ev->kind);
    /* Only a read event owns its arrays; a writer's are its caller's. */
    if (k != NULL && ev->json_ != NULL)
        free_arrays(k->obj, (char *)ev + k->offset);
    json_decref(ev->json_);
    memset(ev, 0, sizeof(*ev));
}

/* The line as a JSON object with a string "event", or NULL (why told). */
static json_t *load_line(const char *line, size_t len, problems *pr,
                         const char **name)
{
    json_error_t jerr;
    json_t *o;

    if (len == 0 || line[0] != '{') {
        problem(pr, "not an event line: it does not start with '{'");
        return NULL;
    }
    o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            pr->nomem = 1;
        problem(pr, "not an event line: not JSON (column %d: %s)", jerr.column,
                jerr.text);
        return NULL;
    }
    *name = json_string_value(json_object_get(o, "event"));
    if (!json_is_object(o) || *name == NULL) {
        problem(pr, "not an event line: no string \"event\"");
        json_decref(o);
        return NULL;
    }
    return o;
}

flps_err event_read(const char *line, size_t len, unsigned flags, event *out,
                    char *why, size_t whylen)
{
    problems pr = {why, whylen, 0, 0};
    const char *name = NULL;
    const kind_desc *k = NULL;
    json_t *o;

    memset(out, 0, sizeof(*out));
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    o = load_line(line, len, &pr, &name);
    if (o == NULL)
        return pr.nomem ? FLPS_ENOMEM : FLPS_EPROTO;
    for (size_t i = 0; i < NKINDS && k == NULL; i++)
        if (strcmp(kinds[i].name, name) == 0)
            k = &kinds[i];
    if (k == NULL) {
        out->kind = EVENT_UNKNOWN;
        if (flags & EVENT_READ_STRICT)
            problem(&pr, "unknown event \"%s\"", name);
        json_decref(o);
        return pr.n > 0 ? FLPS_EINVAL : FLPS_OK;
    }
    out->kind = (event_kind)(k - kinds + 1);
    out->json_ = o; /* the strings point into it */
    decode_object(&pr, k->obj, o, (char *)out + k->offset, k->name, flags, 1);
    if (pr.nomem) {
        event_fini(out);
        return FLPS_ENOMEM;
    }
    return pr.n > 0 ? FLPS_EINVAL : FLPS_OK;
}

/* ---- Docs ---- */

static const char *type_doc(field_type t)
{
    static const char *const names[] = {
        [TY_U64] = "whole number",
        [TY_F3] = "number, 3 decimals",
        [TY_F4] = "number, 4 decimals",
        [TY_F5] = "number, 5 decimals",
        [TY_F6] = "number, 6 decimals",
        [TY_G9] = "number, 9 digits",
        [TY_BOOL] = "true/false",
        [TY_STR] = "string",
        [TY_U64S] = "array of whole numbers",
        [TY_DONE_LAYERS] = "array of objects",
        [TY_PROFILE_LAYERS] = "array of objects",
    };
    return names[t];
}

static void doc_fields(flps_strbuf *b, const char *ev, const char *prefix,
                       const object_desc *d)
{
    for (size_t i = 0; i < d->nfields; i++) {
        const field_desc *fd = &d->fields[i];
        const object_desc *id = item_desc(fd->type);

        flps_strbuf_printf(b, "| %s | `%s%s` | %s | %s | %s |\n", ev, prefix,
                           fd->name, type_doc(fd->type),
                           fd->required ? "yes" : "", fd->doc);
        if (id != NULL) {
            char sub[64];

            snprintf(sub, sizeof(sub), "%s%s[].", prefix, fd->name);
            doc_fields(b, ev, sub, id);
        }
    }
}

flps_err event_doc_table(flps_strbuf *b)
{
    flps_strbuf_puts(b, "| event | written by | read by | what it says |\n"
                        "|---|---|---|---|\n");
    for (size_t i = 0; i < NKINDS; i++)
        flps_strbuf_printf(b, "| `%s` | %s | %s | %s |\n", kinds[i].name,
                           kinds[i].writers, kinds[i].readers, kinds[i].doc);
    flps_strbuf_puts(b, "\n| event | field | type | required | what it says |\n"
                        "|---|---|---|---|---|\n");
    for (size_t i = 0; i < NKINDS; i++)
        doc_fields(b, kinds[i].name, "", kinds[i].obj);
    return flps_strbuf_error(b);
}
