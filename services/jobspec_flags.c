/* The job file's keys as command-line flags, and the job text a file and
 * flags make together. The flags come from the key table
 * (jobspec_keys.c), so a key added there is a flag at once. */
#include "services/jobspec_flags.h"

#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "common/alloc.h"
#include "services/jobspec_keys.h"
#include "services/textguard.h"

_Static_assert(JOBSPEC_KEY_COUNT <= JOBSPEC_FLAGS_KEYS,
               "room for a flag per key");

/* Whether key is a flag: command comes after "--"; env's NAME=VALUE
 * words stay the job file's. */
static int jf_is_flag(jobspec_key key)
{
    return !jobspec_key_takes_words(key);
}

void jobspec_flags_init(jobspec_flags *f)
{
    memset(f, 0, sizeof(*f));
    for (int k = 0; k < JOBSPEC_KEY_COUNT; k++) {
        const char *name = jobspec_key_name((jobspec_key)k);
        size_t i;

        for (i = 0; name[i] != '\0' && i + 1 < sizeof(f->names[k]); i++)
            f->names[k][i] = name[i] == '_' ? '-' : name[i];
        f->names[k][i] = '\0';
    }
}

size_t jobspec_flags_options(jobspec_flags *f, struct option *opts, size_t max)
{
    size_t n = 0;

    for (int k = 0; k < JOBSPEC_KEY_COUNT; k++) {
        if (!jf_is_flag((jobspec_key)k))
            continue;
        if (n == max)
            return 0;
        opts[n].name = f->names[k];
        opts[n].has_arg = required_argument;
        opts[n].flag = NULL;
        opts[n].val = JOBSPEC_FLAGS_VAL + k;
        n++;
    }
    return n;
}

int jobspec_flags_split(jobspec_flags *f, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            f->command = argv + i + 1;
            f->command_argc = (size_t)(argc - i - 1);
            return i;
        }
    }
    return argc;
}

/* msg with its "line L: KEY: " start (as the key table writes a value's
 * message) replaced by lead. */
static void jf_relead(const char *msg, unsigned long line, const char *key,
                      const char *lead, char *out, size_t len)
{
    char start[96];
    const char *at;
    int n = snprintf(start, sizeof(start), "line %lu: ", line);

    at = strstr(msg, start);
    if (at == NULL) {
        snprintf(out, len, "%s%s", lead, msg);
        return;
    }
    at += n;
    if (strncmp(at, key, strlen(key)) == 0 && at[strlen(key)] == ':' &&
        at[strlen(key) + 1] == ' ')
        at += strlen(key) + 2;
    snprintf(out, len, "%s%s", lead, at);
}

/* The code point at s (of n bytes) when it starts a well-formed UTF-8
 * sequence, its length in *used; -1 otherwise. */
static long jf_utf8(const unsigned char *s, size_t n, size_t *used)
{
    static const long min[] = {0, 0, 0x80, 0x800, 0x10000};
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xe0) == 0xc0 ? 2
                 : (s[0] & 0xf0) == 0xe0 ? 3
                 : (s[0] & 0xf8) == 0xf0 ? 4
                                         : 0;
    long cp;

    if (len == 0 || len > n)
        return -1;
    cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *used = len;
    return cp;
}

/* Whether libyaml takes cp as it is inside a double-quoted scalar: it
 * refuses what YAML does not print and folds its line breaks. */
static int jf_plain_char(long cp)
{
    if (cp == '"' || cp == '\\')
        return 0;
    return (cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0x2027) ||
           (cp >= 0x202a && cp <= 0xd7ff) ||
           (cp >= 0xe000 && cp <= 0xfffd && cp != 0xfeff) || cp >= 0x10000;
}

/* s as a YAML double-quoted scalar that reads back as s. 0 when s is not
 * UTF-8 (nothing is appended then). */
static int jf_quote(flps_strbuf *b, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), used;

    for (size_t i = 0; i < n; i += used)
        if (jf_utf8(u + i, n - i, &used) < 0)
            return 0;
    flps_strbuf_puts(b, "\"");
    for (size_t i = 0; i < n; i += used) {
        long cp = jf_utf8(u + i, n - i, &used);

        if (jf_plain_char(cp))
            flps_strbuf_append(b, u + i, used);
        else if (cp == '"' || cp == '\\')
            flps_strbuf_printf(b, "\\%c", (char)cp);
        else
            flps_strbuf_printf(b, "\\u%04lx", cp); /* none above 0xffff */
    }
    flps_strbuf_puts(b, "\"");
    return 1;
}

static int jf_is_utf8(const char *s)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    int ok = jf_quote(&b, s);

    flps_strbuf_fini(&b);
    return ok;
}

int jobspec_flags_take(jobspec_flags *f, int c, const char *arg, char *errbuf,
                       size_t errlen)
{
    char msg[1024], lead[48];
    jobspec scratch;
    jobspec_key key;

    if (c == 'n')
        key = JOBSPEC_KEY_WORKERS;
    else if (c == 's')
        key = JOBSPEC_KEY_SERVERS;
    else if (c >= JOBSPEC_FLAGS_VAL &&
             c < JOBSPEC_FLAGS_VAL + JOBSPEC_KEY_COUNT &&
             jf_is_flag((jobspec_key)(c - JOBSPEC_FLAGS_VAL)))
        key = (jobspec_key)(c - JOBSPEC_FLAGS_VAL);
    else
        return 0;
    snprintf(lead, sizeof(lead), "--%s: ", f->names[key]);
    if (!jf_is_utf8(arg)) {
        flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                        "%sthe value is not UTF-8 text", lead);
        return -1;
    }
    /* The key's own check, as the job file's value would get it. */
    if (jobspec_key_defaults(&scratch, NULL, 0) != FLPS_OK ||
        jobspec_key_set(key, arg, strlen(arg), 0, &scratch, msg, sizeof(msg)) !=
            FLPS_OK) {
        char out[1100];

        jf_relead(msg, 0, jobspec_key_name(key), lead, out, sizeof(out));
        flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG, "%s", out);
        return -1;
    }
    f->value[key] = arg;
    return 1;
}

int jobspec_flags_given(const jobspec_flags *f)
{
    for (int k = 0; k < JOBSPEC_KEY_COUNT; k++)
        if (f->value[k] != NULL)
            return 1;
    return f->command_argc > 0;
}

flps_err jobspec_flags_refuse_word(const char *word, int missing, char *errbuf,
                                   size_t errlen)
{
    int n = (int)strcspn(word, "=");
    jobspec_key key;

    if (missing)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%.*s needs a value", n, word);
    if (strncmp(word, "--command", (size_t)n) == 0 && n == 9)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--command: the program and its arguments go "
                               "after '--' (-n 2 -- python3 train.py)");
    if (strncmp(word, "--env", (size_t)n) == 0 && n == 5)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--env: a job's environment is given in a job "
                               "file (env: {NAME: VALUE})");
    if (n > 2 && strncmp(word, "--", 2) == 0 &&
        memchr(word, '_', (size_t)n) != NULL &&
        jobspec_key_find(word + 2, (size_t)n - 2, &key) == FLPS_OK &&
        jf_is_flag(key)) {
        char dashed[32];
        size_t i;

        for (i = 0; (int)i < n - 2 && i + 1 < sizeof(dashed); i++)
            dashed[i] = word[2 + i] == '_' ? '-' : word[2 + i];
        dashed[i] = '\0';
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%.*s is spelled --%s: a flag has '-' where "
                               "its key has '_'",
                               n, word, dashed);
    }
    return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                           "%.*s is not a flag of a job: give -n WORKERS, -s "
                           "SERVERS or --KEY VALUE for a job-file key, then "
                           "-- and the program",
                           n, word);
}

flps_err jobspec_flags_operands(const jobspec_flags *f, int argc, int nargs,
                                char *const *argv, int first, const char **file,
                                char *errbuf, size_t errlen)
{
    const char *w = first < nargs ? argv[first] : NULL;
    size_t n = w != NULL ? strlen(w) : 0;

    if (nargs - first > 1)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "'%s' after the job file %s: a program and "
                               "its arguments go after --, e.g. -n 2 -- "
                               "python3 train.py",
                               argv[first + 1], w);
    if (n > 3 && strcmp(w + n - 3, ".py") == 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "'%s': the program and its arguments go after "
                               "'--' (-n 2 -- python3 %s)",
                               w, w);
    if (nargs < argc && f->command_argc == 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "nothing after --; give the program each "
                               "worker runs, e.g. -n 2 -- python3 train.py");
    *file = w;
    return FLPS_OK;
}

/* ---- The job file's mapping ----------------------------------------- */

/* Where the file says what: each key's value (from the ':' after the key
 * to the value's end), and where keys it lacks go. */
typedef struct jf_scan {
    int mapping;          /* the text is one mapping we can edit */
    int flow;             /* written {...}: keys go before the '}' */
    int empty;            /* a flow mapping with no key yet */
    size_t insert;        /* where keys the file lacks go */
    unsigned long indent; /* the column of the first key */
    int has[JOBSPEC_KEY_COUNT];
    size_t vstart[JOBSPEC_KEY_COUNT]; /* the ':' */
    size_t vend[JOBSPEC_KEY_COUNT];
    /* libyaml's marks count characters, not bytes: where the last mark
     * turned into a byte offset was, to go on from there. */
    size_t at_index, at_byte;
} jf_scan;

/* The byte offset of libyaml's mark index in text (UTF-8, as libyaml
 * checked: each character one index, a leading byte order mark none).
 * Marks come in text order, so the walk goes on from the last one. */
static size_t jf_byte(jf_scan *sc, const char *text, size_t len, size_t index)
{
    if (index < sc->at_index || sc->at_byte == 0) {
        sc->at_index = 0;
        sc->at_byte = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
    }
    for (; sc->at_index < index && sc->at_byte < len; sc->at_index++) {
        sc->at_byte++;
        while (sc->at_byte < len &&
               ((unsigned char)text[sc->at_byte] & 0xc0) == 0x80)
            sc->at_byte++;
    }
    return sc->at_byte;
}

/* The next event of yp into *ev; 0 at a syntax error. */
static int jf_next(yaml_parser_t *yp, yaml_event_t *ev)
{
    return yaml_parser_parse(yp, ev) != 0;
}

/* Past the node that ev starts (a collection's events up to its end):
 * where the node's text ends, or 0 at a syntax error. */
static int jf_skip_node(yaml_parser_t *yp, const yaml_event_t *ev, size_t *end)
{
    int depth;
    yaml_event_t e;

    *end = ev->end_mark.index;
    if (ev->type != YAML_SEQUENCE_START_EVENT &&
        ev->type != YAML_MAPPING_START_EVENT)
        return 1;
    for (depth = 1; depth > 0; yaml_event_delete(&e)) {
        if (!jf_next(yp, &e))
            return 0;
        depth += (e.type == YAML_SEQUENCE_START_EVENT ||
                  e.type == YAML_MAPPING_START_EVENT) -
                 (e.type == YAML_SEQUENCE_END_EVENT ||
                  e.type == YAML_MAPPING_END_EVENT);
        *end = e.end_mark.index;
    }
    return 1;
}

/* One "key: value" pair of the mapping, the key's event in *key. 0 when
 * the pair is not one we can edit (the parser will say why). */
static int jf_scan_pair(yaml_parser_t *yp, const char *text, size_t len,
                        const yaml_event_t *key, jf_scan *sc)
{
    yaml_event_t v;
    size_t colon, start, end;
    jobspec_key k;
    int ok, known;

    if (key->type != YAML_SCALAR_EVENT)
        return 0;
    known = jobspec_key_find((const char *)key->data.scalar.value,
                             key->data.scalar.length, &k) == FLPS_OK;
    if (!jf_next(yp, &v))
        return 0;
    start = v.start_mark.index;
    ok = jf_skip_node(yp, &v, &end);
    yaml_event_delete(&v);
    colon = jf_byte(sc, text, len, key->end_mark.index);
    start = jf_byte(sc, text, len, start);
    end = jf_byte(sc, text, len, end);
    /* The ':' between the key and its value; none (a key with no value)
     * leaves the text to the parser's message. */
    while (colon < start && colon < len && text[colon] != ':')
        colon++;
    if (!ok || colon >= start || colon >= len)
        return 0;
    if (known && !sc->has[k]) {
        sc->has[k] = 1;
        sc->vstart[k] = colon;
        sc->vend[k] = end > colon ? end : colon + 1;
    }
    return 1;
}

/* Read the file's one mapping into *sc; sc->mapping stays 0 for anything
 * else (empty, not a mapping, a syntax error, a second document). */
static void jf_scan_text(const char *text, size_t len, jf_scan *sc)
{
    yaml_parser_t yp;
    yaml_event_t ev;
    int step = 0, ok = 1, first = 1;

    memset(sc, 0, sizeof(*sc));
    if (textguard_check(text, len, JOBSPEC_MAX_FILE, JOBSPEC_MAX_DEPTH, "",
                        NULL, 0) != FLPS_OK ||
        !yaml_parser_initialize(&yp))
        return;
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    /* stream start, document start, mapping start, pairs, mapping end,
     * document end, stream end. */
    while (ok && jf_next(&yp, &ev)) {
        switch (step) {
        case 0:
            ok = ev.type == YAML_STREAM_START_EVENT;
            break;
        case 1:
            ok = ev.type == YAML_DOCUMENT_START_EVENT;
            break;
        case 2:
            ok = ev.type == YAML_MAPPING_START_EVENT;
            sc->flow = ev.data.mapping_start.style == YAML_FLOW_MAPPING_STYLE;
            sc->empty = 1;
            break;
        case 3:
            if (ev.type == YAML_MAPPING_END_EVENT) {
                sc->insert = jf_byte(sc, text, len, ev.start_mark.index);
                break;
            }
            if (first)
                sc->indent = (unsigned long)ev.start_mark.column;
            first = 0;
            sc->empty = 0;
            ok = jf_scan_pair(&yp, text, len, &ev, sc);
            step--; /* another pair, or the end */
            break;
        case 4:
            ok = ev.type == YAML_DOCUMENT_END_EVENT;
            if (!sc->flow)
                sc->insert = ev.data.document_end.implicit
                                 ? len
                                 : jf_byte(sc, text, len, ev.start_mark.index);
            break;
        default:
            ok = ev.type == YAML_STREAM_END_EVENT;
            sc->mapping = ok;
            break;
        }
        yaml_event_delete(&ev);
        if (step++ == 5)
            break;
    }
    yaml_parser_delete(&yp);
    if (!ok)
        sc->mapping = 0;
}

/* ---- The job text ---------------------------------------------------- */

/* The text being built and its line count so far. */
typedef struct jf_out {
    flps_strbuf b;
    unsigned long newlines;
} jf_out;

static void jf_put(jf_out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        o->newlines += s[i] == '\n';
    flps_strbuf_append(&o->b, s, n);
}

/* What key's flag (or the command) says, as YAML: a quoted string, or
 * for command a flow list of them. */
static void jf_put_value(jf_out *o, const jobspec_flags *f, jobspec_key key)
{
    if (key == JOBSPEC_KEY_COMMAND) {
        flps_strbuf_puts(&o->b, "[");
        for (size_t i = 0; i < f->command_argc; i++) {
            if (i > 0)
                flps_strbuf_puts(&o->b, ", ");
            jf_quote(&o->b, f->command[i]);
        }
        flps_strbuf_puts(&o->b, "]");
    } else {
        jf_quote(&o->b, f->value[key]);
    }
}

/* The value of key's flag, or the command. NULL when neither says. */
static int jf_says(const jobspec_flags *f, jobspec_key key)
{
    return key == JOBSPEC_KEY_COMMAND ? f->command_argc > 0
                                      : f->value[key] != NULL;
}

/* A name for a job said on the command line alone: the script a Python
 * program runs (its module for -m), else the program, else the model,
 * cut to what a name may hold. */
static void jf_default_name(const jobspec_flags *f, char *out, size_t len)
{
    const char *src =
        f->value[JOBSPEC_KEY_MODEL] ? f->value[JOBSPEC_KEY_MODEL] : "job";
    const char *slash, *dot;
    size_t n = 0, cut;

    if (f->command_argc > 0) {
        src = f->command[0];
        slash = strrchr(src, '/');
        if (strncmp(slash ? slash + 1 : src, "python", 6) == 0) {
            for (size_t i = 1; i < f->command_argc; i++) {
                if (strcmp(f->command[i], "-m") == 0 &&
                    i + 1 < f->command_argc) {
                    src = strrchr(f->command[i + 1], '.')
                              ? strrchr(f->command[i + 1], '.') + 1
                              : f->command[i + 1];
                    break;
                }
                if (strcmp(f->command[i], "-c") == 0)
                    break; /* code, not a file: the program's name */
                if (f->command[i][0] != '-') {
                    src = f->command[i];
                    break;
                }
            }
        }
    }
    slash = strrchr(src, '/');
    src = slash ? slash + 1 : src;
    dot = strrchr(src, '.');
    cut = dot != NULL && dot != src ? (size_t)(dot - src) : strlen(src);
    for (size_t i = 0; i < cut && n + 1 < len && n < 63; i++) {
        char c = src[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9');

        if (n == 0 && !alnum)
            continue; /* a name starts with a letter or digit */
        if (!alnum && c != '_' && c != '-' && c != '.')
            c = '-';
        if (c == '.' && out[n - 1] == '.')
            continue; /* never ".." */
        out[n++] = c;
    }
    out[n] = '\0';
    if (n == 0)
        snprintf(out, len, "job");
}

/* Append "key: value" for every key the flags say that the file does not
 * give (sc NULL: no file), at the mapping's end, recording the lines. */
static void jf_put_added(jf_out *o, jobspec_flags *f, const jf_scan *sc,
                         const char *text)
{
    int flow = sc != NULL && sc->flow;
    int need_comma = flow && !sc->empty;
    char name[64];

    if (sc == NULL && f->value[JOBSPEC_KEY_NAME] == NULL) {
        jf_default_name(f, name, sizeof(name));
        jf_put(o, "name: ", 6);
        jf_quote(&o->b, name);
        jf_put(o, "\n", 1);
    }
    if (flow) {
        /* A trailing comma is YAML too: "{a: 1, }". */
        size_t i = sc->insert;
        while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t' ||
                         text[i - 1] == '\n' || text[i - 1] == '\r'))
            i--;
        if (i > 0 && (text[i - 1] == ',' || text[i - 1] == '{'))
            need_comma = 0;
    } else if (o->b.len > 0 && o->b.data[o->b.len - 1] != '\n') {
        jf_put(o, "\n", 1);
    }
    for (int k = 0; k < JOBSPEC_KEY_COUNT; k++) {
        const char *key = jobspec_key_name((jobspec_key)k);

        if (!jf_says(f, (jobspec_key)k) || (sc != NULL && sc->has[k]))
            continue;
        if (need_comma)
            jf_put(o, ", ", 2);
        for (unsigned long c = 0; !flow && sc != NULL && c < sc->indent; c++)
            jf_put(o, " ", 1);
        f->line[k] = o->newlines + 1;
        jf_put(o, key, strlen(key));
        jf_put(o, ": ", 2);
        jf_put_value(o, f, (jobspec_key)k);
        if (!flow)
            jf_put(o, "\n", 1);
        need_comma = flow;
    }
}

/* The file's text with the flags' values in place of its own, keys it
 * lacks added: every line of the file keeps its number. */
static void jf_put_merged(jf_out *o, jobspec_flags *f, const jf_scan *sc,
                          const char *text, size_t len)
{
    size_t pos = 0;

    for (;;) {
        int next = -1;

        /* The file's next value a flag replaces, in text order. */
        for (int k = 0; k < JOBSPEC_KEY_COUNT; k++)
            if (sc->has[k] && jf_says(f, (jobspec_key)k) &&
                sc->vstart[k] >= pos &&
                (next < 0 || sc->vstart[k] < sc->vstart[next]))
                next = k;
        if (next < 0)
            break;
        jf_put(o, text + pos, sc->vstart[next] - pos);
        f->line[next] = o->newlines + 1;
        jf_put(o, ": ", 2);
        jf_put_value(o, f, (jobspec_key)next);
        /* The lines the file's value took stay lines. */
        for (size_t i = sc->vstart[next]; i < sc->vend[next]; i++)
            if (text[i] == '\n')
                jf_put(o, "\n", 1);
        pos = sc->vend[next];
    }
    jf_put(o, text + pos, sc->insert - pos);
    jf_put_added(o, f, sc, text);
    jf_put(o, text + sc->insert, len - sc->insert);
}

/* The command after "--" checked as command: would be. */
static flps_err jf_check_command(const jobspec_flags *f, char *errbuf,
                                 size_t errlen)
{
    flps_strbuf words = FLPS_STRBUF_INIT;
    char msg[1024], out[1100];
    jobspec scratch;
    flps_err rc = FLPS_OK;

    for (size_t i = 0; i < f->command_argc; i++) {
        if (!jf_is_utf8(f->command[i])) {
            flps_strbuf_fini(&words);
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "the command after --: word %zu is not "
                                   "UTF-8 text",
                                   i + 1);
        }
        flps_strbuf_append(&words, f->command[i], strlen(f->command[i]) + 1);
    }
    if (flps_strbuf_error(&words) != FLPS_OK)
        rc = FLPS_ENOMEM;
    else if (jobspec_key_defaults(&scratch, NULL, 0) != FLPS_OK ||
             jobspec_key_set_words(JOBSPEC_KEY_COMMAND, words.data,
                                   f->command_argc, 0, &scratch, msg,
                                   sizeof(msg)) != FLPS_OK) {
        jf_relead(msg, 0, "command", "the command after --: ", out,
                  sizeof(out));
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG, "%s", out);
    }
    flps_strbuf_fini(&words);
    return rc;
}

flps_err jobspec_flags_text(jobspec_flags *f, const char *file_text, size_t len,
                            char **out, size_t *outlen, char *errbuf,
                            size_t errlen)
{
    jf_out o = {FLPS_STRBUF_INIT, 0};
    jf_scan sc;
    flps_err rc;
    size_t n;

    if (f == NULL || out == NULL || outlen == NULL ||
        (file_text == NULL && len > 0))
        return FLPS_EINVAL;
    memset(f->line, 0, sizeof(f->line));
    if (f->command_argc > 0 &&
        (rc = jf_check_command(f, errbuf, errlen)) != FLPS_OK)
        return rc;
    if (file_text == NULL) {
        jf_put_added(&o, f, NULL, "");
    } else {
        jf_scan_text(file_text, len, &sc);
        if (sc.mapping) {
            jf_put_merged(&o, f, &sc, file_text, len);
        } else {
            jobspec spec;

            /* The parser's message says what is wrong with the file; a
             * file it takes must never lose the flags unsaid. */
            if (jobspec_flags_given(f) &&
                jobspec_parse(file_text, len, &spec, NULL, 0) == FLPS_OK)
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "the job file's mapping cannot take "
                                       "the flags; give these keys in the "
                                       "file instead");
            jf_put(&o, file_text, len);
        }
    }
    if (flps_strbuf_error(&o.b) != FLPS_OK) {
        flps_strbuf_fini(&o.b);
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "out of memory for the job text");
    }
    n = o.b.len;
    *out = flps_strbuf_take(&o.b);
    if (*out == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "out of memory for the job text");
    *outlen = n;
    return FLPS_OK;
}

int jobspec_flags_explain(const jobspec_flags *f, const jobspec_where *where,
                          const char *msg, char *out, size_t len)
{
    char lead[48];

    for (int k = 0; where != NULL && k < JOBSPEC_KEY_COUNT; k++) {
        const char *key = jobspec_key_name((jobspec_key)k);

        if (f->line[k] == 0 || f->line[k] != where->line ||
            strcmp(where->field, key) != 0)
            continue;
        if (k == JOBSPEC_KEY_COMMAND)
            snprintf(lead, sizeof(lead), "the command after --: ");
        else
            snprintf(lead, sizeof(lead), "--%s: ", f->names[k]);
        jf_relead(msg, where->line, key, lead, out, len);
        return 1;
    }
    snprintf(out, len, "%s", msg);
    return 0;
}

flps_err jobspec_flags_help(flps_strbuf *out)
{
    size_t col = 0;

    for (int k = 0; k < JOBSPEC_KEY_COUNT; k++) {
        char word[48];
        const char *key = jobspec_key_name((jobspec_key)k);
        size_t n;

        if (!jf_is_flag((jobspec_key)k))
            continue;
        if (k == JOBSPEC_KEY_WORKERS || k == JOBSPEC_KEY_SERVERS)
            snprintf(word, sizeof(word), "-%c/--%s N",
                     k == JOBSPEC_KEY_WORKERS ? 'n' : 's', key);
        else
            snprintf(word, sizeof(word), "--%s", key);
        for (char *c = word; *c != '\0'; c++)
            if (*c == '_')
                *c = '-';
        n = strlen(word);
        if (col > 0 && col + 2 + n + 1 > 78) { /* room for the "," */
            flps_strbuf_puts(out, ",\n");
            col = 0;
        } else if (col > 0) {
            flps_strbuf_puts(out, ", ");
            col += 2;
        }
        if (col == 0) {
            flps_strbuf_puts(out, "  ");
            col = 2;
        }
        flps_strbuf_puts(out, word);
        col += n;
    }
    flps_strbuf_puts(out, "\n");
    return flps_strbuf_error(out);
}
