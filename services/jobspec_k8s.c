/* The job file's Kubernetes keys (what flsched --launcher kubernetes
 * reads): the entries of resources, node_selector and tolerations, and
 * the names given as image, scheduler_name, queue and checkpoint_volume,
 * checked as the Kubernetes API server checks them, so a job the cluster
 * would refuse is refused at submit, with the line that says why. */
#include "services/jobspec_keys.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/numparse.h"

#define K8S_FAIL(...) flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG, __VA_ARGS__)

/* The longest label key prefix (a DNS subdomain) and name part. */
#define K8S_PREFIX_MAX 253
#define K8S_NAME_MAX 63

static bool k8s_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9');
}

static bool k8s_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A DNS-1123 subdomain: lower-case labels of [a-z0-9-] that start and end
 * alphanumeric, joined by '.', at most max bytes. */
static bool k8s_dns_subdomain(const char *s, size_t n, size_t max)
{
    size_t start = 0;

    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            if (!k8s_lower_alnum(s[i]) && s[i] != '-')
                return false;
            continue;
        }
        if (i == start || !k8s_lower_alnum(s[start]) ||
            !k8s_lower_alnum(s[i - 1]))
            return false;
        start = i + 1;
    }
    return true;
}

/* The name part of a label key or a label value: [A-Za-z0-9] at both ends,
 * [-A-Za-z0-9_.] between, at most 63 bytes. */
static bool k8s_qualified_part(const char *s, size_t n)
{
    if (n == 0 || n > K8S_NAME_MAX || !k8s_alnum(s[0]) || !k8s_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!k8s_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* A label key (and a resource name): [PREFIX/]NAME with PREFIX a DNS
 * subdomain. need_prefix: an extended resource's name must have one. */
static bool k8s_label_key(const char *s, size_t n, bool need_prefix)
{
    const char *slash = memchr(s, '/', n);

    if (slash == NULL)
        return !need_prefix && k8s_qualified_part(s, n);
    return k8s_dns_subdomain(s, (size_t)(slash - s), K8S_PREFIX_MAX) &&
           k8s_qualified_part(slash + 1, n - (size_t)(slash - s) - 1);
}

static bool k8s_label_value(const char *s, size_t n)
{
    return n == 0 || k8s_qualified_part(s, n);
}

const char *jobspec_k8s_check_text(jobspec_key key, const char *s)
{
    size_t n = strlen(s);

    switch (key) {
    case JOBSPEC_KEY_IMAGE:
        if (!k8s_alnum(s[0]))
            return "must start with a letter or digit";
        if (strchr(":/@", s[n - 1]) != NULL || strstr(s, "//") != NULL)
            return "is not an image reference";
        return NULL;
    case JOBSPEC_KEY_SCHEDULER_NAME:
    case JOBSPEC_KEY_CHECKPOINT_VOLUME:
        return k8s_dns_subdomain(s, n, K8S_NAME_MAX)
                   ? NULL
                   : "is not a DNS subdomain (lower-case letters, digits, "
                     "'-' and '.', a letter or digit at both ends of each "
                     "part)";
    case JOBSPEC_KEY_QUEUE:
        return k8s_label_value(s, n) ? NULL
                                     : "is not a label value (a letter or "
                                       "digit at both ends)";
    default:
        return NULL;
    }
}

/* ---- Entries ---------------------------------------------------------- */

/* Where the checked entries go before they replace the key's fields. */
typedef struct k8s_out {
    char buf[JOBSPEC_MAP_BYTES];
    size_t used;
    uint32_t n;
} k8s_out;

static bool k8s_put(k8s_out *o, const char *s, size_t n)
{
    if (o->used + n + 1 > sizeof(o->buf))
        return false;
    memcpy(o->buf + o->used, s, n);
    o->buf[o->used + n] = '\0';
    o->used += n + 1;
    o->n++;
    return true;
}

/* Whether the entry name (n bytes) is already in o, as "NAME=..." or as
 * a toleration's whole text. */
static bool k8s_has(const k8s_out *o, const char *name, size_t n)
{
    for (size_t at = 0, i = 0; i < o->n; i++) {
        const char *e = o->buf + at;

        if (strncmp(e, name, n) == 0 && (e[n] == '=' || e[n] == '\0'))
            return true;
        at += strlen(e) + 1;
    }
    return false;
}

/* A CPU count: a decimal number, or millicores ("500m"), at least 0.001. */
static bool k8s_cpus(const char *v, double *out)
{
    char num[48];
    size_t n = strlen(v);
    double scale = 1, d = 0;

    if (n > 0 && v[n - 1] == 'm') {
        n--;
        scale = 1000;
    }
    if (n == 0 || n >= sizeof(num) || strspn(v, "0123456789.") < n)
        return false;
    memcpy(num, v, n);
    num[n] = '\0';
    if (flps_parse_double(NULL, num, 0, 1e9, &d, NULL, 0) != FLPS_OK)
        return false;
    d /= scale;
    if (d < 0.001)
        return false;
    *out = d;
    return true;
}

static bool k8s_count(const char *v, uint64_t max, uint64_t *out)
{
    return v[0] != '\0' && strspn(v, "0123456789") == strlen(v) &&
           flps_parse_u64(NULL, v, 0, max, out, NULL, 0) == FLPS_OK;
}

/* One resources entry NAME=VALUE. The workers' cpu, memory and GPUs go to
 * their fields (set says which); every other, a device plugin's, is kept
 * for every pod. NULL, or what is wrong with it. */
static const char *k8s_resource(const char *name, size_t nl, const char *v,
                                jobspec *s, uint32_t *set, k8s_out *o)
{
    uint64_t u = 0;
    double d = 0;

    if (nl == 3 && memcmp(name, "cpu", 3) == 0) {
        if (!k8s_cpus(v, &d))
            return "is not a number of CPUs of at least 0.001 (or "
                   "millicores, e.g. 500m)";
        s->cpus_per_worker = d;
        *set |= JOBSPEC_RES_CPU;
        return NULL;
    }
    if (nl == 6 && memcmp(name, "memory", 6) == 0) {
        if (jobspec_size_parse(v, &u) != FLPS_OK || u == 0)
            return "is not a SIZE (bytes, or a number with K, M, G, T, Ki, "
                   "Mi, Gi or Ti)";
        s->memory_per_worker = u;
        *set |= JOBSPEC_RES_MEMORY;
        return NULL;
    }
    if (nl == 14 && memcmp(name, "nvidia.com/gpu", 14) == 0) {
        if (!k8s_count(v, 1024, &u))
            return "is not a number of GPUs from 0 to 1024";
        s->gpus_per_worker = (uint32_t)u;
        *set |= JOBSPEC_RES_GPU;
        return NULL;
    }
    if (!k8s_label_key(name, nl, true))
        return "is not a resource name: cpu, memory, or DOMAIN/NAME of a "
               "device plugin";
    if (!k8s_count(v, 1000000, &u))
        return "is not a device count (an integer from 0 to 1000000)";
    if (!k8s_put(o, name, strlen(name)))
        return "does not fit";
    return NULL;
}

/* One toleration, from its text KEY[=VALUE][:EFFECT] or its mapping
 * (JOBSPEC_ITEM_MAPPING, pairs), into *t. NULL, or what is wrong. */
static const char *k8s_toleration_text(const char *w, jobspec_toleration *t)
{
    const char *colon = strrchr(w, ':');
    const char *eq = strchr(w, '=');
    size_t kl;

    memset(t, 0, sizeof(*t));
    if (colon != NULL && eq != NULL && colon < eq)
        colon = NULL; /* a ':' inside the value is no effect */
    if (colon != NULL)
        snprintf(t->effect, sizeof(t->effect), "%s", colon + 1);
    kl = eq != NULL ? (size_t)(eq - w)
                    : (colon != NULL ? (size_t)(colon - w) : strlen(w));
    if (kl >= sizeof(t->key))
        return "has a key that is too long";
    memcpy(t->key, w, kl);
    t->key[kl] = '\0';
    if (eq != NULL) {
        size_t vl = colon != NULL ? (size_t)(colon - eq - 1) : strlen(eq + 1);

        if (vl >= sizeof(t->value))
            return "has a value that is too long";
        memcpy(t->value, eq + 1, vl);
        t->value[vl] = '\0';
        snprintf(t->op, sizeof(t->op), "Equal");
    } else {
        snprintf(t->op, sizeof(t->op), "Exists");
    }
    return NULL;
}

/* A toleration's text field of its mapping form: where it goes. */
static char *k8s_toleration_field(jobspec_toleration *t, const char *k,
                                  size_t kl, size_t *len)
{
    struct {
        const char *name;
        char *at;
        size_t len;
    } f[] = {{"key", t->key, sizeof(t->key)},
             {"operator", t->op, sizeof(t->op)},
             {"value", t->value, sizeof(t->value)},
             {"effect", t->effect, sizeof(t->effect)}};

    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (strlen(f[i].name) == kl && memcmp(k, f[i].name, kl) == 0) {
            *len = f[i].len;
            return f[i].at;
        }
    }
    return NULL;
}

static const char *k8s_toleration_map(const char *w, jobspec_toleration *t)
{
    const char *p = w + 1;

    memset(t, 0, sizeof(*t));
    while (*p != '\0') {
        const char *sep = strchr(p, JOBSPEC_ITEM_SEP);
        const char *eq = memchr(p, '=', sep ? (size_t)(sep - p) : strlen(p));
        size_t kl, vl, dlen = 0;
        char val[32], *dst;

        if (sep == NULL || eq == NULL)
            return "is a mapping that is cut short";
        kl = (size_t)(eq - p);
        vl = (size_t)(sep - eq - 1);
        dst = k8s_toleration_field(t, p, kl, &dlen);
        if (dst != NULL) {
            if (vl >= dlen)
                return "has a field that is too long";
            memcpy(dst, eq + 1, vl);
            dst[vl] = '\0';
        } else if (kl == 17 && memcmp(p, "tolerationSeconds", 17) == 0) {
            uint64_t u = 0;

            snprintf(val, sizeof(val), "%.*s", (int)(vl < 31 ? vl : 31),
                     eq + 1);
            if (vl >= sizeof(val) || !k8s_count(val, 1000000000, &u))
                return "has a tolerationSeconds that is not an integer from "
                       "0 to 1000000000";
            t->has_seconds = 1;
            t->seconds = (int64_t)u;
        } else {
            return "has a field other than key, operator, value, effect and "
                   "tolerationSeconds";
        }
        p = sep + 1;
    }
    if (t->op[0] == '\0')
        snprintf(t->op, sizeof(t->op), t->value[0] ? "Equal" : "Exists");
    return NULL;
}

/* Parse and check one toleration entry; its canonical text (OP, KEY,
 * VALUE, EFFECT, SECONDS joined by JOBSPEC_ITEM_SEP) into o. */
static const char *k8s_toleration(const char *w, k8s_out *o)
{
    static const char *const effects[] = {"", "NoSchedule", "PreferNoSchedule",
                                          "NoExecute"};
    jobspec_toleration t;
    const char *why = w[0] == JOBSPEC_ITEM_MAPPING ? k8s_toleration_map(w, &t)
                                                   : k8s_toleration_text(w, &t);
    bool effect_ok = false;
    char text[JOBSPEC_MAP_BYTES];
    int n;

    if (why != NULL)
        return why;
    for (size_t i = 0; i < sizeof(effects) / sizeof(effects[0]); i++)
        effect_ok |= strcmp(t.effect, effects[i]) == 0;
    if (!effect_ok)
        return "has an effect other than NoSchedule, PreferNoSchedule and "
               "NoExecute";
    if (strcmp(t.op, "Equal") != 0 && strcmp(t.op, "Exists") != 0)
        return "has an operator other than Equal and Exists";
    if (t.key[0] != '\0' && !k8s_label_key(t.key, strlen(t.key), false))
        return "has a key that is not a label key";
    if (t.key[0] == '\0' && strcmp(t.op, "Exists") != 0)
        return "has no key: only operator Exists may leave it out (every "
               "taint)";
    if (strcmp(t.op, "Exists") == 0 && t.value[0] != '\0')
        return "has a value with operator Exists";
    if (!k8s_label_value(t.value, strlen(t.value)))
        return "has a value that is not a label value";
    if (t.has_seconds && strcmp(t.effect, "NoExecute") != 0)
        return "has tolerationSeconds without effect NoExecute";
    n = snprintf(text, sizeof(text), "%s%c%s%c%s%c%s%c%lld", t.op,
                 JOBSPEC_ITEM_SEP, t.key, JOBSPEC_ITEM_SEP, t.value,
                 JOBSPEC_ITEM_SEP, t.effect, JOBSPEC_ITEM_SEP,
                 t.has_seconds ? (long long)t.seconds : -1LL);
    if (n < 0 || (size_t)n >= sizeof(text) || !k8s_put(o, text, (size_t)n))
        return "does not fit";
    return NULL;
}

flps_err jobspec_k8s_store(jobspec_key key, const char *name,
                           const char *expect, const char *words, size_t n,
                           size_t used, unsigned long line, jobspec *spec,
                           char *errbuf, size_t errlen)
{
    jobspec tmp = *spec; /* cpu & co. land in spec only on FLPS_OK */
    uint32_t set = 0;
    k8s_out o;
    const char *w = words;

    memset(&o, 0, sizeof(o));
    if (n > JOBSPEC_MAP_MAX)
        return K8S_FAIL("line %lu: %s: %zu entries are more than %d; "
                        "expected %s",
                        line, name, n, JOBSPEC_MAP_MAX, expect);
    for (size_t i = 0; i < n; i++, w += strlen(w) + 1) {
        char shown[JOBSPEC_SHOW_MAX + 4], entry[JOBSPEC_MAP_BYTES];
        const char *eq = strchr(w, '=');
        size_t nl = eq != NULL ? (size_t)(eq - w) : strlen(w);
        const char *why = NULL;

        if ((size_t)(w - words) >= used)
            break;
        jobspec_key_show(w[0] == JOBSPEC_ITEM_MAPPING ? "(a mapping)" : w,
                         w[0] == JOBSPEC_ITEM_MAPPING ? 11 : strlen(w), shown);
        if (key == JOBSPEC_KEY_TOLERATIONS) {
            why = k8s_toleration(w, &o);
        } else if (eq == NULL) {
            why = "is not NAME=VALUE";
        } else if (nl >= sizeof(entry)) {
            why = "does not fit";
        } else {
            memcpy(entry, w, nl);
            entry[nl] = '\0';
            if (k8s_has(&o, entry, nl) ||
                (key == JOBSPEC_KEY_RESOURCES &&
                 ((strcmp(entry, "cpu") == 0 && (set & JOBSPEC_RES_CPU)) ||
                  (strcmp(entry, "memory") == 0 &&
                   (set & JOBSPEC_RES_MEMORY)) ||
                  (strcmp(entry, "nvidia.com/gpu") == 0 &&
                   (set & JOBSPEC_RES_GPU)))))
                return K8S_FAIL("line %lu: %s: %s is given twice; give each "
                                "once",
                                line, name, entry);
            if (key == JOBSPEC_KEY_RESOURCES)
                why = k8s_resource(w, nl, eq + 1, &tmp, &set, &o);
            else if (!k8s_label_key(w, nl, false))
                why = "has a name that is not a label key ([PREFIX/]NAME, "
                      "a letter or digit at both ends of NAME)";
            else if (!k8s_label_value(eq + 1, strlen(eq + 1)))
                why = "has a value that is not a label value";
            else if (!k8s_put(&o, w, strlen(w)))
                why = "does not fit";
        }
        if (why != NULL)
            return K8S_FAIL("line %lu: %s: '%s' %s; expected %s", line, name,
                            shown, why, expect);
    }
    if (key == JOBSPEC_KEY_RESOURCES) {
        tmp.resources_set = set;
        memcpy(tmp.resources, o.buf, sizeof(o.buf));
        tmp.resources_count = o.n;
    } else if (key == JOBSPEC_KEY_NODE_SELECTOR) {
        memcpy(tmp.node_selector, o.buf, sizeof(o.buf));
        tmp.node_selector_count = o.n;
    } else {
        memcpy(tmp.tolerations, o.buf, sizeof(o.buf));
        tmp.tolerations_count = o.n;
    }
    *spec = tmp;
    return FLPS_OK;
}

/* ---- Reading them back ------------------------------------------------ */

flps_err jobspec_toleration_get(const jobspec *spec, uint32_t i,
                                jobspec_toleration *out)
{
    const char *w[JOBSPEC_MAP_MAX];
    char *f[5];
    char copy[JOBSPEC_MAP_BYTES];
    char *p;
    long long secs = -1;

    if (spec == NULL || out == NULL || i >= spec->tolerations_count ||
        jobspec_map_words(spec->tolerations, spec->tolerations_count, w,
                          JOBSPEC_MAP_MAX) <= i)
        return FLPS_EINVAL;
    snprintf(copy, sizeof(copy), "%s", w[i]);
    p = copy;
    for (int k = 0; k < 5; k++) {
        f[k] = p;
        p = strchr(p, JOBSPEC_ITEM_SEP);
        if (p == NULL && k < 4)
            return FLPS_EINVAL;
        if (p != NULL)
            *p++ = '\0';
    }
    memset(out, 0, sizeof(*out));
    snprintf(out->op, sizeof(out->op), "%.7s", f[0]);
    snprintf(out->key, sizeof(out->key), "%.319s", f[1]);
    snprintf(out->value, sizeof(out->value), "%.63s", f[2]);
    snprintf(out->effect, sizeof(out->effect), "%.23s", f[3]);
    sscanf(f[4], "%lld", &secs);
    out->has_seconds = secs >= 0;
    out->seconds = secs >= 0 ? secs : 0;
    return FLPS_OK;
}
