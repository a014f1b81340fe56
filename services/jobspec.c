/* Job file parsing: YAML (or JSON) text to a validated struct jobspec. */
#include "services/jobspec.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "common/alloc.h"

/* A job file is a short list of settings; anything bigger is a mistake
 * (a dataset or a log passed by accident) and is refused before parsing. */
#define JOBSPEC_MAX_FILE ((size_t)1 << 20)

#define JOBSPEC_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

/* Longest value quoted back in a message; longer ones end in "...". */
#define JP_SHOW_MAX 40

#define JP_U32_MAX_TEXT "4294967295"
#define JP_U64_MAX_TEXT "18446744073709551615"
#define JP_SIZE_TEXT                                                           \
    "a size in bytes, or a number with a suffix K, M, G, T (powers of "        \
    "1000) or Ki, Mi, Gi, Ti (powers of 1024), e.g. 512Mi"
#define JP_CODECS_TEXT                                                         \
    "dense, topk:D, gtopk:D, randk:D, dgc:D, qsgd:BITS, fp16, sign, auto"

/* Every key: its enum id, its spelling, and what it accepts (quoted in
 * messages; docs/job-file.md says the same in prose). One table so the
 * three never drift apart. */
#define JP_KEYS(X)                                                             \
    X(NAME, "name", "a name of 1 to 63 characters from A-Z a-z 0-9 _ . -")     \
    X(MODEL, "model", "one of mlp, cnn")                                       \
    X(DATASET, "dataset", "one of fashion-mnist, synthetic")                   \
    X(DATA_DIR, "data_dir", "a directory path of 1 to 255 bytes")              \
    X(PARTITION, "partition", "one of iid, dirichlet:A with A > 0")            \
    X(WORKERS, "workers", "an integer from 1 to 1024")                         \
    X(SERVERS, "servers", "an integer from 1 to 256")                          \
    X(MODE, "mode", "one of ssgd, async, ssp:S, fedavg (S an integer >= 0)")   \
    X(ITERATIONS, "iterations", "an integer from 1 to " JP_U64_MAX_TEXT)       \
    X(ROUNDS, "rounds",                                                        \
      "an integer from 0 to " JP_U32_MAX_TEXT " (fedavg needs at least 1)")    \
    X(LOCAL_STEPS, "local_steps", "an integer from 1 to " JP_U32_MAX_TEXT)     \
    X(CLIENT_FRACTION, "client_fraction", "a number with 0 < F <= 1")          \
    X(BATCH_SIZE, "batch_size", "an integer from 1 to 65536")                  \
    X(LR, "lr", "a number > 0")                                                \
    X(MOMENTUM, "momentum", "a number with 0 <= M < 1")                        \
    X(LR_SCHEDULE, "lr_schedule", "one of constant, cosine")                   \
    X(COMPRESSION, "compression",                                              \
      "one of " JP_CODECS_TEXT " (0 < D <= 1, BITS from 1 to 8)")              \
    X(TRANSPORT, "transport", "one of zmq, rdma")                              \
    X(SEED, "seed", "an integer from 0 to " JP_U64_MAX_TEXT)                   \
    X(EVAL_EVERY, "eval_every",                                                \
      "an integer from 0 to " JP_U64_MAX_TEXT " (0 = only at the end)")        \
    X(PART_SIZE, "part_size", "an integer from 1 to " JP_U32_MAX_TEXT)         \
    X(CHECKPOINT_INTERVAL, "checkpoint_interval",                              \
      "a number of seconds >= 0 (0 = off)")                                    \
    X(MAX_RESTARTS, "max_restarts", "an integer from 0 to " JP_U32_MAX_TEXT)   \
    X(PRIORITY, "priority", "an integer from 0 to " JP_U32_MAX_TEXT)           \
    X(CPUS_PER_WORKER, "cpus_per_worker", "a number of CPUs > 0")              \
    X(MEMORY_PER_WORKER, "memory_per_worker", JP_SIZE_TEXT)                    \
    X(GPUS_PER_WORKER, "gpus_per_worker", "an integer from 0 to 1024")         \
    X(CPUS_PER_SERVER, "cpus_per_server", "a number of CPUs > 0")              \
    X(MEMORY_PER_SERVER, "memory_per_server", JP_SIZE_TEXT)                    \
    X(TIME_LIMIT, "time_limit", "a number of seconds >= 0 (0 = no limit)")

typedef enum {
#define JP_KEY_ENUM_(id, name, expect) JP_KEY_##id,
    JP_KEYS(JP_KEY_ENUM_)
#undef JP_KEY_ENUM_
        JP_KEY_COUNT
} jp_key;

static const char *const jp_key_names[JP_KEY_COUNT] = {
#define JP_KEY_NAME_(id, name, expect) name,
    JP_KEYS(JP_KEY_NAME_)
#undef JP_KEY_NAME_
};

static const char *const jp_key_expect[JP_KEY_COUNT] = {
#define JP_KEY_EXPECT_(id, name, expect) expect,
    JP_KEYS(JP_KEY_EXPECT_)
#undef JP_KEY_EXPECT_
};

#define JP_ACCEPTED_KEYS                                                       \
    "name, model, dataset, data_dir, partition, workers, servers, mode, "      \
    "iterations, rounds, local_steps, client_fraction, batch_size, lr, "       \
    "momentum, lr_schedule, compression, transport, seed, eval_every, "        \
    "part_size, "                                                              \
    "checkpoint_interval, max_restarts, priority, cpus_per_worker, "           \
    "memory_per_worker, gpus_per_worker, cpus_per_server, "                    \
    "memory_per_server, time_limit"

/* Parse state: where the message goes, and the line each key was given on
 * (0 = not given) for duplicate detection and cross-field messages. */
typedef struct jp {
    char *errbuf;
    size_t errlen;
    unsigned long line[JP_KEY_COUNT];
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

static void jp_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (buf == NULL || len == 0)
        return;
    vsnprintf(buf, len, fmt, ap);
}

static void jp_format(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void jp_format(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    jp_vformat(buf, len, fmt, ap);
    va_end(ap);
}

static flps_err jp_fail(jp *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Record the one message for this parse; always returns FLPS_ECONFIG. */
static flps_err jp_fail(jp *p, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    jp_vformat(p->errbuf, p->errlen, fmt, ap);
    va_end(ap);
    return FLPS_ECONFIG;
}

/* Copy a value for quoting in a message: control bytes become '?' so a
 * stray newline or escape sequence cannot break the one-line message, and
 * long values are cut. */
static void jp_show(const char *v, size_t n, char out[JP_SHOW_MAX + 4])
{
    size_t i;
    size_t m = n > JP_SHOW_MAX ? JP_SHOW_MAX : n;

    for (i = 0; i < m; i++) {
        unsigned char c = (unsigned char)v[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (n > JP_SHOW_MAX) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
}

static char jp_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* Edit distance with adjacent transpositions counted as one edit (optimal
 * string alignment), case-insensitive: "wrokers" and "Workers" are both
 * one edit from "workers". Inputs longer than 32 bytes are never close to
 * a key, so they get a large distance. */
static size_t jp_distance(const char *a, const char *b)
{
    enum { MAXL = 32 };
    size_t la = strlen(a), lb = strlen(b);
    size_t d[MAXL + 1][MAXL + 1];

    if (la > MAXL || lb > MAXL)
        return (size_t)-1;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = jp_lower(a[i - 1]) != jp_lower(b[j - 1]);
            size_t best = d[i - 1][j] + 1;

            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && jp_lower(a[i - 1]) == jp_lower(b[j - 2]) &&
                jp_lower(a[i - 2]) == jp_lower(b[j - 1]) &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

/* The candidate closest to word, if close enough to be a likely typo:
 * one edit for short names, two for longer ones. NULL otherwise. */
static const char *jp_closest(const char *word, const char *const *cands,
                              size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;

    for (size_t i = 0; i < n; i++) {
        size_t d = jp_distance(word, cands[i]);
        size_t limit = strlen(cands[i]) <= 4 ? 1 : 2;

        if (d <= limit && d < best_d) {
            best = cands[i];
            best_d = d;
        }
    }
    return best;
}

/* ---- Numbers ----------------------------------------------------------
 * Strict: decimal digits only for integers, plain decimal notation for
 * reals. YAML 1.1 would read 0x10, 0o17, 1_000 or .inf as numbers; a job
 * file that relies on those is more likely a typo than intent. */

typedef enum {
    JP_NUM_OK = 0,
    JP_NUM_SYNTAX,    /* not a number at all, or trailing garbage */
    JP_NUM_NEGATIVE,  /* a negative integer */
    JP_NUM_NONFINITE, /* nan, inf */
    JP_NUM_RANGE,     /* does not fit the type */
} jp_num;

static jp_num jp_parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v;

    if (s[0] == '-' && s[1] >= '0' && s[1] <= '9')
        return JP_NUM_NEGATIVE;
    /* strtoull skips spaces and accepts a sign; neither belongs here. */
    if (!(s[0] >= '0' && s[0] <= '9'))
        return JP_NUM_SYNTAX;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (*end != '\0')
        return JP_NUM_SYNTAX;
    if (errno == ERANGE)
        return JP_NUM_RANGE;
    *out = (uint64_t)v;
    return JP_NUM_OK;
}

static bool jp_is_nonfinite_word(const char *s)
{
    char w[16];
    size_t n = 0;

    if (*s == '+' || *s == '-')
        s++;
    if (*s == '.')
        s++;
    for (; *s != '\0' && n + 1 < sizeof(w); s++)
        w[n++] = jp_lower(*s);
    w[n] = '\0';
    return *s == '\0' && (strcmp(w, "nan") == 0 || strcmp(w, "inf") == 0 ||
                          strcmp(w, "infinity") == 0);
}

/* strtod follows LC_NUMERIC; the daemons never call setlocale, so the
 * decimal point is '.' as in every job file. */
static jp_num jp_parse_real(const char *s, double *out)
{
    char *end = NULL;
    double v;

    if (jp_is_nonfinite_word(s))
        return JP_NUM_NONFINITE;
    /* Refuse what strtod would take but a person would not write: leading
     * spaces, hex floats, "nan(...)". */
    if (s[0] == '\0' || strspn(s, "0123456789+-.eE") != strlen(s))
        return JP_NUM_SYNTAX;
    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end != '\0')
        return JP_NUM_SYNTAX;
    if (errno == ERANGE || !isfinite(v))
        return JP_NUM_RANGE;
    *out = v;
    return JP_NUM_OK;
}

static const char *jp_num_problem(jp_num st, bool integer)
{
    switch (st) {
    case JP_NUM_SYNTAX:
        return integer ? "is not an integer" : "is not a number";
    case JP_NUM_NEGATIVE:
        return "is negative";
    case JP_NUM_NONFINITE:
        return "is not a finite number";
    case JP_NUM_RANGE:
    case JP_NUM_OK:
        break;
    }
    return "is out of range";
}

/* ---- Values ---------------------------------------------------------- */

/* A value as handed to the setters: text, its line, and the key. */
typedef struct jp_val {
    const char *s;
    size_t n;
    unsigned long line;
    jp_key key;
} jp_val;

static flps_err jp_bad(jp *p, const jp_val *v, const char *problem)
{
    char shown[JP_SHOW_MAX + 4];

    jp_show(v->s, v->n, shown);
    return jp_fail(p, "line %lu: %s: '%s' %s; expected %s", v->line,
                   jp_key_names[v->key], shown, problem, jp_key_expect[v->key]);
}

static flps_err jp_uint(jp *p, const jp_val *v, uint64_t lo, uint64_t hi,
                        uint64_t *out)
{
    uint64_t x = 0;
    jp_num st = jp_parse_u64(v->s, &x);

    if (st == JP_NUM_OK && (x < lo || x > hi))
        st = JP_NUM_RANGE;
    if (st != JP_NUM_OK)
        return jp_bad(p, v, jp_num_problem(st, true));
    *out = x;
    return FLPS_OK;
}

static flps_err jp_u32(jp *p, const jp_val *v, uint32_t lo, uint32_t hi,
                       uint32_t *out)
{
    uint64_t x = 0;
    flps_err rc = jp_uint(p, v, lo, hi, &x);

    if (rc == FLPS_OK)
        *out = (uint32_t)x;
    return rc;
}

/* A real number; ok_range is the caller's bounds check on the value. */
static flps_err jp_real(jp *p, const jp_val *v, bool (*ok_range)(double),
                        double *out)
{
    double x = 0;
    jp_num st = jp_parse_real(v->s, &x);

    if (st == JP_NUM_OK && !ok_range(x))
        st = JP_NUM_RANGE;
    if (st != JP_NUM_OK)
        return jp_bad(p, v, jp_num_problem(st, false));
    *out = x;
    return FLPS_OK;
}

static bool jp_positive(double x)
{
    return x > 0;
}

static bool jp_non_negative(double x)
{
    return x >= 0;
}

static bool jp_fraction(double x)
{
    return x > 0 && x <= 1;
}

static bool jp_momentum(double x)
{
    return x >= 0 && x < 1;
}

/* SIZE: decimal digits, optionally a fraction, and a suffix; without a
 * suffix the value is a whole number of bytes. Fractions of a byte are cut
 * off ("1.5K" is 1500). */
static jp_num jp_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"K", 1000ULL},
        {"M", 1000000ULL},
        {"G", 1000000000ULL},
        {"T", 1000000000000ULL},
        {"Ki", 1ULL << 10},
        {"Mi", 1ULL << 20},
        {"Gi", 1ULL << 30},
        {"Ti", 1ULL << 40},
    };
    size_t nint = strspn(s, "0123456789");
    size_t nfrac = 0;
    const char *suffix;
    uint64_t whole = 0;
    char *end = NULL;

    if (s[0] == '-' && s[1] >= '0' && s[1] <= '9')
        return JP_NUM_NEGATIVE;
    if (nint == 0)
        return JP_NUM_SYNTAX;
    suffix = s + nint;
    if (*suffix == '.') {
        nfrac = strspn(suffix + 1, "0123456789");
        if (nfrac == 0)
            return JP_NUM_SYNTAX;
        suffix += 1 + nfrac;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        long double frac = 0, scale = 1;

        if (strcmp(suffix, units[i].suffix) != 0)
            continue;
        if (i == 0 && nfrac > 0)
            return JP_NUM_SYNTAX; /* bytes are whole */
        errno = 0;
        whole = strtoull(s, &end, 10);
        if (errno == ERANGE || whole > UINT64_MAX / units[i].mult)
            return JP_NUM_RANGE;
        for (size_t k = 0; k < nfrac && k < 18; k++) {
            scale *= 10;
            frac = frac * 10 + (long double)(s[nint + 1 + k] - '0');
        }
        frac = frac / scale * (long double)units[i].mult;
        if ((long double)(UINT64_MAX - whole * units[i].mult) < frac)
            return JP_NUM_RANGE;
        *out = whole * units[i].mult + (uint64_t)frac;
        return JP_NUM_OK;
    }
    return JP_NUM_SYNTAX;
}

flps_err jobspec_size_parse(const char *text, uint64_t *out)
{
    uint64_t v = 0;

    if (text == NULL || out == NULL)
        return FLPS_EINVAL;
    if (jp_parse_size(text, &v) != JP_NUM_OK)
        return FLPS_EINVAL;
    *out = v;
    return FLPS_OK;
}

static flps_err jp_size(jp *p, const jp_val *v, uint64_t *out)
{
    uint64_t x = 0;
    jp_num st = jp_parse_size(v->s, &x);

    if (st == JP_NUM_SYNTAX)
        return jp_bad(p, v, "is not a size");
    if (st != JP_NUM_OK)
        return jp_bad(p, v, jp_num_problem(st, true));
    *out = x;
    return FLPS_OK;
}

/* Index of v in names (exact match); otherwise a message that suggests
 * the closest name when there is one. */
static flps_err jp_choice(jp *p, const jp_val *v, const char *const *names,
                          size_t n, int *out)
{
    char shown[JP_SHOW_MAX + 4];
    const char *near;

    for (size_t i = 0; i < n; i++) {
        if (strcmp(v->s, names[i]) == 0) {
            *out = (int)i;
            return FLPS_OK;
        }
    }
    jp_show(v->s, v->n, shown);
    near = jp_closest(v->s, names, n);
    if (near != NULL)
        return jp_fail(p,
                       "line %lu: %s: '%s' is not accepted; expected "
                       "%s; did you mean '%s'?",
                       v->line, jp_key_names[v->key], shown,
                       jp_key_expect[v->key], near);
    return jp_bad(p, v, "is not accepted");
}

/* Split "word:param" at the first ':' into word (cut to wlen-1 bytes) and
 * param (NULL when there is no ':'). */
static const char *jp_split(const char *s, char *word, size_t wlen)
{
    const char *colon = strchr(s, ':');
    size_t n = colon != NULL ? (size_t)(colon - s) : strlen(s);

    if (n >= wlen)
        n = wlen - 1;
    memcpy(word, s, n);
    word[n] = '\0';
    return colon != NULL ? colon + 1 : NULL;
}

/* Message for a bad parameter of a "word:param" value, e.g.
 * "'topk:2' has density 2 out of range; expected topk:D with 0 < D <= 1". */
static flps_err jp_bad_param(jp *p, const jp_val *v, const char *what,
                             const char *param, jp_num st, const char *expect)
{
    char shown[JP_SHOW_MAX + 4];
    char pshown[JP_SHOW_MAX + 4];

    jp_show(v->s, v->n, shown);
    jp_show(param, strlen(param), pshown);
    if (st == JP_NUM_RANGE || st == JP_NUM_OK)
        return jp_fail(p,
                       "line %lu: %s: '%s' has %s %s out of range; "
                       "expected %s",
                       v->line, jp_key_names[v->key], shown, what, pshown,
                       expect);
    return jp_fail(p, "line %lu: %s: '%s' has %s '%s' which %s; expected %s",
                   v->line, jp_key_names[v->key], shown, what, pshown,
                   jp_num_problem(st, strcmp(what, "density") != 0 &&
                                          strcmp(what, "alpha") != 0),
                   expect);
}

static flps_err jp_no_param(jp *p, const jp_val *v, const char *word)
{
    char shown[JP_SHOW_MAX + 4];

    jp_show(v->s, v->n, shown);
    return jp_fail(p, "line %lu: %s: '%s': %s takes no parameter; expected %s",
                   v->line, jp_key_names[v->key], shown, word,
                   jp_key_expect[v->key]);
}

static flps_err jp_needs_param(jp *p, const jp_val *v, const char *what,
                               const char *expect)
{
    char shown[JP_SHOW_MAX + 4];

    jp_show(v->s, v->n, shown);
    return jp_fail(p, "line %lu: %s: '%s' needs %s; expected %s", v->line,
                   jp_key_names[v->key], shown, what, expect);
}

/* Message for a value whose word (before ':') is unknown; the suggestion,
 * when there is one, keeps the parameter: "gtop:0.01" -> "gtopk:0.01". */
static flps_err jp_bad_word(jp *p, const jp_val *v, const char *word,
                            const char *const *words, size_t n,
                            const char *what)
{
    char shown[JP_SHOW_MAX + 4];
    char fix[JP_SHOW_MAX + 24];
    const char *near = jp_closest(word, words, n);
    const char *colon = strchr(v->s, ':');

    jp_show(v->s, v->n, shown);
    if (near == NULL)
        return jp_fail(p, "line %lu: %s: '%s' is not %s; expected %s", v->line,
                       jp_key_names[v->key], shown, what,
                       jp_key_expect[v->key]);
    if (colon != NULL) {
        char pshown[JP_SHOW_MAX + 4];

        jp_show(colon, strlen(colon), pshown);
        jp_format(fix, sizeof(fix), "%s%s", near, pshown);
    } else {
        jp_format(fix, sizeof(fix), "%s", near);
    }
    return jp_fail(p,
                   "line %lu: %s: '%s' is not %s; expected %s; did you "
                   "mean '%s'?",
                   v->line, jp_key_names[v->key], shown, what,
                   jp_key_expect[v->key], fix);
}

static flps_err jp_set_name(jp *p, const jp_val *v, jobspec *s)
{
    size_t ok = strspn(v->s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "abcdefghijklmnopqrstuvwxyz0123456789_.-");

    if (v->n == 0)
        return jp_bad(p, v, "is empty");
    if (v->n >= sizeof(s->name))
        return jp_bad(p, v, "is too long");
    if (ok != v->n) {
        char c = v->s[ok];
        char shown[JP_SHOW_MAX + 4];

        jp_show(v->s, v->n, shown);
        if ((unsigned char)c < 0x20 || c == 0x7f)
            return jp_bad(p, v, "contains a control character");
        return jp_fail(p, "line %lu: name: '%s' contains '%c'; expected %s",
                       v->line, shown, c, jp_key_expect[JP_KEY_NAME]);
    }
    memcpy(s->name, v->s, v->n + 1);
    return FLPS_OK;
}

static flps_err jp_set_data_dir(jp *p, const jp_val *v, jobspec *s)
{
    if (v->n == 0)
        return jp_bad(p, v, "is empty");
    if (v->n >= sizeof(s->data_dir))
        return jp_bad(p, v, "is too long");
    memcpy(s->data_dir, v->s, v->n + 1);
    return FLPS_OK;
}

static flps_err jp_set_partition(jp *p, const jp_val *v, jobspec *s)
{
    static const char *const words[] = {"iid", "dirichlet"};
    static const char expect[] = "dirichlet:A with A > 0";
    char word[16];
    const char *param = jp_split(v->s, word, sizeof(word));
    double a = 0;
    jp_num st;

    if (strcmp(word, "iid") == 0) {
        if (param != NULL)
            return jp_no_param(p, v, "iid");
        s->partition = JOBSPEC_PARTITION_IID;
        s->dirichlet_alpha = 0;
        return FLPS_OK;
    }
    if (strcmp(word, "dirichlet") != 0)
        return jp_bad_word(p, v, word, words, 2, "a partition");
    if (param == NULL)
        return jp_needs_param(p, v, "a concentration alpha", expect);
    st = jp_parse_real(param, &a);
    if (st == JP_NUM_OK && !(a > 0))
        st = JP_NUM_RANGE;
    if (st != JP_NUM_OK)
        return jp_bad_param(p, v, "alpha", param, st, expect);
    s->partition = JOBSPEC_PARTITION_DIRICHLET;
    s->dirichlet_alpha = a;
    return FLPS_OK;
}

static flps_err jp_set_mode(jp *p, const jp_val *v, jobspec *s)
{
    static const char *const words[] = {"ssgd", "async", "ssp", "fedavg"};
    static const jobspec_mode modes[] = {JOBSPEC_MODE_SSGD, JOBSPEC_MODE_ASYNC,
                                         JOBSPEC_MODE_SSP, JOBSPEC_MODE_FEDAVG};
    static const char expect[] =
        "ssp:S with S an integer from 0 to " JP_U32_MAX_TEXT;
    char word[16];
    const char *param = jp_split(v->s, word, sizeof(word));
    uint64_t stale = 0;
    jp_num st;
    size_t i;

    for (i = 0; i < 4; i++)
        if (strcmp(word, words[i]) == 0)
            break;
    if (i == 4)
        return jp_bad_word(p, v, word, words, 4, "a mode");
    if (modes[i] != JOBSPEC_MODE_SSP) {
        if (param != NULL)
            return jp_no_param(p, v, words[i]);
        s->mode = modes[i];
        s->staleness = 0;
        return FLPS_OK;
    }
    if (param == NULL)
        return jp_needs_param(p, v, "a staleness bound", expect);
    st = jp_parse_u64(param, &stale);
    if (st == JP_NUM_OK && stale > UINT32_MAX)
        st = JP_NUM_RANGE;
    if (st != JP_NUM_OK)
        return jp_bad_param(p, v, "staleness", param, st, expect);
    s->mode = JOBSPEC_MODE_SSP;
    s->staleness = (uint32_t)stale;
    return FLPS_OK;
}

enum { JP_PARAM_NONE, JP_PARAM_DENSITY, JP_PARAM_BITS };

static const struct {
    const char *name;
    jobspec_comp comp;
    int param;
} jp_codecs[] = {
    {"dense", JOBSPEC_COMP_DENSE, JP_PARAM_NONE},
    {"topk", JOBSPEC_COMP_TOPK, JP_PARAM_DENSITY},
    {"gtopk", JOBSPEC_COMP_GTOPK, JP_PARAM_DENSITY},
    {"randk", JOBSPEC_COMP_RANDK, JP_PARAM_DENSITY},
    {"dgc", JOBSPEC_COMP_DGC, JP_PARAM_DENSITY},
    {"qsgd", JOBSPEC_COMP_QSGD, JP_PARAM_BITS},
    {"fp16", JOBSPEC_COMP_FP16, JP_PARAM_NONE},
    {"sign", JOBSPEC_COMP_SIGN, JP_PARAM_NONE},
    {"auto", JOBSPEC_COMP_AUTO, JP_PARAM_NONE},
};

#define JP_NCODECS (sizeof(jp_codecs) / sizeof(jp_codecs[0]))

static flps_err jp_set_compression(jp *p, const jp_val *v, jobspec *s)
{
    const char *names[JP_NCODECS];
    char word[16];
    char expect[64];
    const char *param = jp_split(v->s, word, sizeof(word));
    size_t i;

    for (i = 0; i < JP_NCODECS; i++) {
        names[i] = jp_codecs[i].name;
        if (strcmp(word, names[i]) == 0)
            break;
    }
    if (i == JP_NCODECS)
        return jp_bad_word(p, v, word, names, JP_NCODECS, "a codec");
    if (jp_codecs[i].param == JP_PARAM_NONE) {
        if (param != NULL)
            return jp_no_param(p, v, word);
        s->compression = jp_codecs[i].comp;
        s->density = 1.0;
        s->qsgd_bits = 0;
        return FLPS_OK;
    }
    if (jp_codecs[i].param == JP_PARAM_DENSITY) {
        double d = 0;
        jp_num st;

        jp_format(expect, sizeof(expect), "%s:D with 0 < D <= 1", word);
        if (param == NULL)
            return jp_needs_param(p, v, "a density", expect);
        st = jp_parse_real(param, &d);
        if (st == JP_NUM_OK && !jp_fraction(d))
            st = JP_NUM_RANGE;
        if (st != JP_NUM_OK)
            return jp_bad_param(p, v, "density", param, st, expect);
        s->compression = jp_codecs[i].comp;
        s->density = d;
        s->qsgd_bits = 0;
        return FLPS_OK;
    } else {
        uint64_t bits = 0;
        jp_num st;

        jp_format(expect, sizeof(expect), "%s:BITS with BITS from 1 to 8",
                  word);
        if (param == NULL)
            return jp_needs_param(p, v, "a bit width", expect);
        st = jp_parse_u64(param, &bits);
        if (st == JP_NUM_OK && (bits < 1 || bits > 8))
            st = JP_NUM_RANGE;
        if (st != JP_NUM_OK)
            return jp_bad_param(p, v, "bits", param, st, expect);
        s->compression = jp_codecs[i].comp;
        s->density = 1.0;
        s->qsgd_bits = (uint32_t)bits;
        return FLPS_OK;
    }
}

static flps_err jp_set(jp *p, const jp_val *v, jobspec *s)
{
    static const char *const models[] = {"mlp", "cnn"};
    static const char *const datasets[] = {"fashion-mnist", "synthetic"};
    static const char *const transports[] = {"zmq", "rdma"};
    static const char *const schedules[] = {"constant", "cosine"};
    flps_err rc = FLPS_OK;
    int idx = 0;

    switch (v->key) {
    case JP_KEY_NAME:
        return jp_set_name(p, v, s);
    case JP_KEY_MODEL:
        rc = jp_choice(p, v, models, 2, &idx);
        if (rc == FLPS_OK)
            s->model = idx == 0 ? JOBSPEC_MODEL_MLP : JOBSPEC_MODEL_CNN;
        return rc;
    case JP_KEY_DATASET:
        rc = jp_choice(p, v, datasets, 2, &idx);
        if (rc == FLPS_OK)
            s->dataset = idx == 0 ? JOBSPEC_DATASET_FASHION_MNIST
                                  : JOBSPEC_DATASET_SYNTHETIC;
        return rc;
    case JP_KEY_DATA_DIR:
        return jp_set_data_dir(p, v, s);
    case JP_KEY_PARTITION:
        return jp_set_partition(p, v, s);
    case JP_KEY_WORKERS:
        return jp_u32(p, v, 1, 1024, &s->workers);
    case JP_KEY_SERVERS:
        return jp_u32(p, v, 1, 256, &s->servers);
    case JP_KEY_MODE:
        return jp_set_mode(p, v, s);
    case JP_KEY_ITERATIONS:
        return jp_uint(p, v, 1, UINT64_MAX, &s->iterations);
    case JP_KEY_ROUNDS:
        return jp_u32(p, v, 0, UINT32_MAX, &s->rounds);
    case JP_KEY_LOCAL_STEPS:
        return jp_u32(p, v, 1, UINT32_MAX, &s->local_steps);
    case JP_KEY_CLIENT_FRACTION:
        return jp_real(p, v, jp_fraction, &s->client_fraction);
    case JP_KEY_BATCH_SIZE:
        return jp_u32(p, v, 1, 65536, &s->batch_size);
    case JP_KEY_LR:
        return jp_real(p, v, jp_positive, &s->lr);
    case JP_KEY_MOMENTUM:
        return jp_real(p, v, jp_momentum, &s->momentum);
    case JP_KEY_LR_SCHEDULE:
        rc = jp_choice(p, v, schedules, 2, &idx);
        if (rc == FLPS_OK)
            s->lr_schedule = idx == 0 ? JOBSPEC_LR_CONSTANT : JOBSPEC_LR_COSINE;
        return rc;
    case JP_KEY_COMPRESSION:
        return jp_set_compression(p, v, s);
    case JP_KEY_TRANSPORT:
        rc = jp_choice(p, v, transports, 2, &idx);
        if (rc == FLPS_OK)
            s->transport =
                idx == 0 ? JOBSPEC_TRANSPORT_ZMQ : JOBSPEC_TRANSPORT_RDMA;
        return rc;
    case JP_KEY_SEED:
        return jp_uint(p, v, 0, UINT64_MAX, &s->seed);
    case JP_KEY_EVAL_EVERY:
        return jp_uint(p, v, 0, UINT64_MAX, &s->eval_every);
    case JP_KEY_PART_SIZE:
        return jp_u32(p, v, 1, UINT32_MAX, &s->part_size);
    case JP_KEY_CHECKPOINT_INTERVAL:
        return jp_real(p, v, jp_non_negative, &s->checkpoint_interval);
    case JP_KEY_MAX_RESTARTS:
        return jp_u32(p, v, 0, UINT32_MAX, &s->max_restarts);
    case JP_KEY_PRIORITY:
        return jp_u32(p, v, 0, UINT32_MAX, &s->priority);
    case JP_KEY_CPUS_PER_WORKER:
        return jp_real(p, v, jp_positive, &s->cpus_per_worker);
    case JP_KEY_MEMORY_PER_WORKER:
        return jp_size(p, v, &s->memory_per_worker);
    case JP_KEY_GPUS_PER_WORKER:
        return jp_u32(p, v, 0, 1024, &s->gpus_per_worker);
    case JP_KEY_CPUS_PER_SERVER:
        return jp_real(p, v, jp_positive, &s->cpus_per_server);
    case JP_KEY_MEMORY_PER_SERVER:
        return jp_size(p, v, &s->memory_per_server);
    case JP_KEY_TIME_LIMIT:
        return jp_real(p, v, jp_non_negative, &s->time_limit);
    case JP_KEY_COUNT:
        break;
    }
    return jp_fail(p, "line %lu: internal error: no setter for key %d", v->line,
                   (int)v->key);
}

static void jp_defaults(jobspec *s)
{
    memset(s, 0, sizeof(*s));
    s->model = JOBSPEC_MODEL_MLP; /* required; overwritten by the file */
    s->dataset = JOBSPEC_DATASET_FASHION_MNIST;
    memcpy(s->data_dir, JOBSPEC_DEFAULT_DATA_DIR,
           sizeof(JOBSPEC_DEFAULT_DATA_DIR));
    s->partition = JOBSPEC_PARTITION_IID;
    s->dirichlet_alpha = 0;
    s->workers = 1;
    s->servers = 1;
    s->mode = JOBSPEC_MODE_SSGD;
    s->staleness = 0;
    s->iterations = 1000;
    s->rounds = 10;
    s->local_steps = 10;
    s->client_fraction = 1.0;
    s->batch_size = 32;
    s->lr = 0.05;
    s->momentum = 0.9;
    s->lr_schedule = JOBSPEC_LR_CONSTANT;
    s->compression = JOBSPEC_COMP_DENSE;
    s->density = 1.0;
    s->qsgd_bits = 0;
    s->transport = JOBSPEC_TRANSPORT_ZMQ;
    s->seed = 1;
    s->eval_every = 100;
    s->part_size = 65536;
    s->checkpoint_interval = 0;
    s->max_restarts = 0;
    s->priority = 0;
    s->cpus_per_worker = 1;
    s->memory_per_worker = (uint64_t)1 << 30;
    s->gpus_per_worker = 0;
    s->cpus_per_server = 1;
    s->memory_per_server = (uint64_t)512 << 20;
    s->time_limit = 0;
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
        jp_format(p->errbuf, p->errlen, "out of memory while parsing");
        return FLPS_ENOMEM;
    case YAML_READER_ERROR:
        if (yp->problem_value != -1)
            return jp_fail(p, "byte %zu: %s (#%X); a job file is UTF-8 text",
                           yp->problem_offset,
                           yp->problem ? yp->problem : "unreadable input",
                           (unsigned)yp->problem_value);
        return jp_fail(p, "byte %zu: %s; a job file is UTF-8 text",
                       yp->problem_offset,
                       yp->problem ? yp->problem : "unreadable input");
    default:
        break;
    }
    if (yp->context != NULL)
        return jp_fail(p,
                       "line %lu, column %lu: YAML syntax error: %s (%s "
                       "on line %lu)",
                       jp_line(&yp->problem_mark),
                       (unsigned long)yp->problem_mark.column + 1,
                       yp->problem ? yp->problem : "invalid YAML", yp->context,
                       jp_line(&yp->context_mark));
    return jp_fail(p, "line %lu, column %lu: YAML syntax error: %s",
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

static flps_err jp_key_event(jp *p, const yaml_event_t *ev, jp_key *out)
{
    const char *k;
    size_t n;
    unsigned long line = jp_line(&ev->start_mark);
    char shown[JP_SHOW_MAX + 4];
    const char *near;

    jp_at(p, line, "", 0);
    if (ev->type != YAML_SCALAR_EVENT)
        return jp_fail(p,
                       "line %lu: a key must be a plain word; found %s; "
                       "accepted keys: " JP_ACCEPTED_KEYS,
                       line, jp_node_kind(ev));
    k = (const char *)ev->data.scalar.value;
    n = ev->data.scalar.length;
    jp_at(p, line, k, strnlen(k, n));
    for (int i = 0; i < JP_KEY_COUNT; i++) {
        if (strlen(jp_key_names[i]) != n || memcmp(k, jp_key_names[i], n))
            continue;
        if (p->line[i] != 0)
            return jp_fail(p,
                           "line %lu: duplicate key '%s' (first given "
                           "on line %lu); give each key once",
                           line, jp_key_names[i], p->line[i]);
        p->line[i] = line;
        *out = (jp_key)i;
        return FLPS_OK;
    }
    jp_show(k, n, shown);
    near = strlen(k) == n ? jp_closest(k, jp_key_names, JP_KEY_COUNT) : NULL;
    if (near != NULL)
        return jp_fail(p,
                       "line %lu: unknown key '%s'; did you mean '%s'? "
                       "accepted keys: " JP_ACCEPTED_KEYS,
                       line, shown, near);
    return jp_fail(
        p, "line %lu: unknown key '%s'; accepted keys: " JP_ACCEPTED_KEYS, line,
        shown);
}

static flps_err jp_value_event(jp *p, const yaml_event_t *ev, jp_key key,
                               jobspec *s)
{
    unsigned long line = jp_line(&ev->start_mark);
    jp_val v;

    jp_at(p, line, jp_key_names[key], strlen(jp_key_names[key]));
    if (ev->type == YAML_ALIAS_EVENT)
        return jp_fail(p,
                       "line %lu: %s: aliases (*%s) are not supported; "
                       "write the value out; expected %s",
                       line, jp_key_names[key],
                       (const char *)ev->data.alias.anchor, jp_key_expect[key]);
    if (ev->type != YAML_SCALAR_EVENT)
        return jp_fail(p,
                       "line %lu: %s: found %s where a single value "
                       "belongs; expected %s",
                       line, jp_key_names[key], jp_node_kind(ev),
                       jp_key_expect[key]);
    if (jp_is_null(ev))
        return jp_fail(p, "line %lu: %s: no value given; expected %s", line,
                       jp_key_names[key], jp_key_expect[key]);
    v.s = (const char *)ev->data.scalar.value;
    v.n = ev->data.scalar.length;
    v.line = line;
    v.key = key;
    /* A "\0" escape in a quoted string would silently cut the value. */
    if (strlen(v.s) != v.n)
        return jp_bad(p, &v, "contains a NUL character");
    return jp_set(p, &v, s);
}

/* Walk the event stream: one document holding one flat mapping. */
static flps_err jp_walk(jp *p, yaml_parser_t *yp, jobspec *s)
{
    yaml_event_t ev;
    flps_err rc;
    jp_key key = JP_KEY_NAME;
    unsigned long line;

    rc = jp_next(p, yp, &ev); /* stream start */
    if (rc != FLPS_OK)
        return rc;
    yaml_event_delete(&ev);
    rc = jp_next(p, yp, &ev);
    if (rc != FLPS_OK)
        return rc;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        jp_at(p, 0, "", 0);
        return jp_fail(p, "the job file is empty; expected a mapping of "
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
        return jp_fail(p, "the job file is empty; expected a mapping of "
                          "keys to values such as 'name: my-job'");
    }
    jp_at(p, line, "", 0);
    if (ev.type != YAML_MAPPING_START_EVENT) {
        rc = jp_fail(p,
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
        rc = jp_value_event(p, &ev, key, s);
        yaml_event_delete(&ev);
        if (rc != FLPS_OK)
            return rc;
    }

    rc = jp_next(p, yp, &ev); /* document end */
    if (rc != FLPS_OK)
        return rc;
    yaml_event_delete(&ev);
    rc = jp_next(p, yp, &ev);
    if (rc != FLPS_OK)
        return rc;
    line = jp_line(&ev.start_mark);
    jp_at(p, line, "", 0);
    if (ev.type != YAML_STREAM_END_EVENT)
        rc = jp_fail(p,
                     "line %lu: a second YAML document; a job file holds "
                     "exactly one mapping",
                     line);
    yaml_event_delete(&ev);
    return rc;
}

/* Checks that involve more than one key, once all are known. */
static flps_err jp_cross_check(jp *p, const jobspec *s)
{
    jp_at(p, 0, "name", 4);
    if (p->line[JP_KEY_NAME] == 0)
        return jp_fail(p, "missing required key 'name'; expected %s",
                       jp_key_expect[JP_KEY_NAME]);
    jp_at(p, 0, "model", 5);
    if (p->line[JP_KEY_MODEL] == 0)
        return jp_fail(p, "missing required key 'model'; expected %s",
                       jp_key_expect[JP_KEY_MODEL]);
    /* rounds defaults to 10, so 0 can only come from the file. */
    jp_at(p, p->line[JP_KEY_ROUNDS], "rounds", 6);
    if (s->mode == JOBSPEC_MODE_FEDAVG && s->rounds == 0)
        return jp_fail(p,
                       "line %lu: rounds: '0' is out of range for mode "
                       "fedavg (line %lu); expected an integer from 1 "
                       "to " JP_U32_MAX_TEXT,
                       p->line[JP_KEY_ROUNDS], p->line[JP_KEY_MODE]);
    return FLPS_OK;
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

    if (!yaml_parser_initialize(&yp)) {
        jp_format(p->errbuf, p->errlen, "out of memory while parsing");
        return FLPS_ENOMEM;
    }
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    while (!done) {
        rc = jp_next(p, &yp, &ev);
        if (rc != FLPS_OK)
            break;
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&yp);
    return rc;
}

/* jobspec_parse, also reporting the line data_dir was given on (0 when
 * defaulted) so jobspec_load can point at it. */
static flps_err jp_parse(const char *text, size_t len, jobspec *out,
                         char *errbuf, size_t errlen,
                         unsigned long *data_dir_line, jobspec_where *where)
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
    rc = jp_check_syntax(&p, text, len);
    if (rc != FLPS_OK)
        goto fail;
    jp_defaults(&spec);
    if (!yaml_parser_initialize(&yp)) {
        jp_format(errbuf, errlen, "out of memory while parsing");
        return FLPS_ENOMEM;
    }
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    rc = jp_walk(&p, &yp, &spec);
    if (rc == FLPS_OK)
        rc = jp_cross_check(&p, &spec);
    yaml_parser_delete(&yp);
    if (rc != FLPS_OK)
        goto fail;
    *out = spec;
    *data_dir_line = p.line[JP_KEY_DATA_DIR];
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
    unsigned long dd_line = 0;

    return jp_parse(text, len, out, errbuf, errlen, &dd_line, NULL);
}

flps_err jobspec_parse_where(const char *text, size_t len, jobspec *out,
                             char *errbuf, size_t errlen, jobspec_where *where)
{
    unsigned long dd_line = 0;

    return jp_parse(text, len, out, errbuf, errlen, &dd_line, where);
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

/* Read the whole file, refusing more than JOBSPEC_MAX_FILE bytes. Reads
 * rather than trusting st_size so pipes and /dev/fd paths work too. */
static flps_err jp_read_file(const char *path, char **text, size_t *len,
                             char *errbuf, size_t errlen)
{
    char ebuf[128];
    char *buf = NULL;
    size_t cap = 0, n = 0;
    flps_err rc = FLPS_EIO;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        jp_format(errbuf, errlen, "%s: cannot open the job file: %s", path,
                  jp_strerror(errno, ebuf, sizeof(ebuf)));
        return FLPS_EIO;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (uintmax_t)st.st_size > JOBSPEC_MAX_FILE) {
        jp_format(errbuf, errlen,
                  "%s: the job file is %jd bytes; job files over 1 MiB are "
                  "refused",
                  path, (intmax_t)st.st_size);
        rc = FLPS_ECONFIG;
        goto fail;
    }
    for (;;) {
        ssize_t got;

        if (n == cap) {
            size_t ncap = cap == 0 ? 4096 : cap * 2;
            char *nbuf;

            if (ncap > JOBSPEC_MAX_FILE + 1)
                ncap = JOBSPEC_MAX_FILE + 1;
            nbuf = flps_realloc(buf, ncap);
            if (nbuf == NULL) {
                jp_format(errbuf, errlen,
                          "%s: out of memory reading the "
                          "job file",
                          path);
                rc = FLPS_ENOMEM;
                goto fail;
            }
            buf = nbuf;
            cap = ncap;
        }
        got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            jp_format(errbuf, errlen, "%s: cannot read the job file: %s", path,
                      jp_strerror(errno, ebuf, sizeof(ebuf)));
            goto fail;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > JOBSPEC_MAX_FILE) {
            jp_format(errbuf, errlen,
                      "%s: the job file is over 1 MiB; job files over 1 MiB "
                      "are refused",
                      path);
            rc = FLPS_ECONFIG;
            goto fail;
        }
    }
    close(fd);
    *text = buf;
    *len = n;
    return FLPS_OK;

fail:
    flps_free(buf);
    close(fd);
    return rc;
}

static const char *const jp_fmnist_files[] = {
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
};

/* Fail early, with the fix, rather than minutes later inside a worker. */
static flps_err jp_check_dataset(const char *path, const jobspec *s,
                                 unsigned long dd_line, char *errbuf,
                                 size_t errlen)
{
    char where[48];
    size_t dl = strlen(s->data_dir);
    const char *sep = (dl > 0 && s->data_dir[dl - 1] == '/') ? "" : "/";

    if (dd_line != 0)
        jp_format(where, sizeof(where), "line %lu: data_dir", dd_line);
    else
        jp_format(where, sizeof(where), "data_dir (default)");
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
        jp_format(errbuf, errlen,
                  "%s: %s: fashion-mnist file '%s' is missing (%s); "
                  "data_dir must hold train-images-idx3-ubyte.gz, "
                  "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz "
                  "and t10k-labels-idx1-ubyte.gz; install them with "
                  "`apt-get install dataset-fashion-mnist` or point "
                  "data_dir at a copy",
                  path, where, file, why);
        return FLPS_ECONFIG;
    }
    return FLPS_OK;
}

flps_err jobspec_load(const char *path, jobspec *out, char *errbuf,
                      size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    char msg[1024];
    unsigned long dd_line = 0;
    jobspec spec;
    flps_err rc;

    if (path == NULL || out == NULL)
        return FLPS_EINVAL;
    rc = jp_read_file(path, &text, &len, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    rc = jp_parse(text, len, &spec, msg, sizeof(msg), &dd_line, NULL);
    if (rc != FLPS_OK) {
        jp_format(errbuf, errlen, "%s: %s", path, msg);
        goto out;
    }
    if (spec.dataset == JOBSPEC_DATASET_FASHION_MNIST) {
        rc = jp_check_dataset(path, &spec, dd_line, errbuf, errlen);
        if (rc != FLPS_OK)
            goto out;
    }
    *out = spec;
out:
    flps_free(text);
    return rc;
}

/* ---- Names ----------------------------------------------------------- */

/* Shortest decimal text that reads back as the same double, so 0.01
 * prints as "0.01" rather than "0.01000000000000000021". */
static void jp_format_real(double x, char *buf, size_t len)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

void jobspec_comp_format(const jobspec *spec, char *buf, size_t len)
{
    char num[32];

    if (buf == NULL || len == 0)
        return;
    if (spec == NULL) {
        buf[0] = '\0';
        return;
    }
    switch (spec->compression) {
    case JOBSPEC_COMP_TOPK:
    case JOBSPEC_COMP_GTOPK:
    case JOBSPEC_COMP_RANDK:
    case JOBSPEC_COMP_DGC:
        jp_format_real(spec->density, num, sizeof(num));
        snprintf(buf, len, "%s:%s", jobspec_comp_name(spec->compression), num);
        return;
    case JOBSPEC_COMP_QSGD:
        snprintf(buf, len, "qsgd:%u", (unsigned)spec->qsgd_bits);
        return;
    default:
        snprintf(buf, len, "%s", jobspec_comp_name(spec->compression));
        return;
    }
}

const char *jobspec_model_name(jobspec_model m)
{
    switch (m) {
    case JOBSPEC_MODEL_MLP:
        return "mlp";
    case JOBSPEC_MODEL_CNN:
        return "cnn";
    }
    return "unknown";
}

const char *jobspec_mode_name(jobspec_mode m)
{
    switch (m) {
    case JOBSPEC_MODE_SSGD:
        return "ssgd";
    case JOBSPEC_MODE_ASYNC:
        return "async";
    case JOBSPEC_MODE_SSP:
        return "ssp";
    case JOBSPEC_MODE_FEDAVG:
        return "fedavg";
    }
    return "unknown";
}

const char *jobspec_comp_name(jobspec_comp c)
{
    for (size_t i = 0; i < JP_NCODECS; i++)
        if (jp_codecs[i].comp == c)
            return jp_codecs[i].name;
    return "unknown";
}

const char *jobspec_dataset_name(jobspec_dataset d)
{
    switch (d) {
    case JOBSPEC_DATASET_FASHION_MNIST:
        return "fashion-mnist";
    case JOBSPEC_DATASET_SYNTHETIC:
        return "synthetic";
    }
    return "unknown";
}

const char *jobspec_partition_name(jobspec_partition p)
{
    switch (p) {
    case JOBSPEC_PARTITION_IID:
        return "iid";
    case JOBSPEC_PARTITION_DIRICHLET:
        return "dirichlet";
    }
    return "unknown";
}

const char *jobspec_transport_name(jobspec_transport t)
{
    switch (t) {
    case JOBSPEC_TRANSPORT_ZMQ:
        return "zmq";
    case JOBSPEC_TRANSPORT_RDMA:
        return "rdma";
    }
    return "unknown";
}

const char *jobspec_lr_schedule_name(jobspec_lr_schedule l)
{
    switch (l) {
    case JOBSPEC_LR_CONSTANT:
        return "constant";
    case JOBSPEC_LR_COSINE:
        return "cosine";
    }
    return "unknown";
}
