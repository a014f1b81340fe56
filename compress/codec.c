/* The codec interface: spec parsing, the codec object and dispatch to the
 * per-kind encoders (codec_dense.c, codec_sparse.c, codec_quant.c). */
#include "compress/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/numparse.h"
#include "compress/codec_impl.h"

/* Each codec's encoder and decoder, by kind; CODEC_AUTO has none. Names
 * and parameters are CODEC_KIND_MAP's. */
typedef struct {
    flps_err (*encode)(codec *c, const float *a, size_t n, codec_msg *out);
    flps_err (*decode)(const codec_spec *spec, const codec_frame *fr,
                       float *acc, size_t n);
} codec_ops;

static const codec_ops codec_table[CODEC_KIND_COUNT] = {
    [CODEC_DENSE] = {codec_dense_encode, codec_dense_decode},
    [CODEC_TOPK] = {codec_sparse_encode, codec_sparse_decode},
    [CODEC_GTOPK] = {codec_sparse_encode, codec_sparse_decode},
    [CODEC_RANDK] = {codec_sparse_encode, codec_sparse_decode},
    [CODEC_DGC] = {codec_sparse_encode, codec_sparse_decode},
    [CODEC_QSGD] = {codec_qsgd_encode, codec_qsgd_decode},
    [CODEC_FP16] = {codec_fp16_encode, codec_fp16_decode},
    [CODEC_SIGN] = {codec_sign_encode, codec_sign_decode},
};

static const char *const codec_names[CODEC_KIND_COUNT] = {
#define X(kind, value, name, param, values) [kind] = name,
    CODEC_KIND_MAP(X)
#undef X
};

static const codec_param codec_params[CODEC_KIND_COUNT] = {
#define X(kind, value, name, param, values) [kind] = CODEC_PARAM_##param,
    CODEC_KIND_MAP(X)
#undef X
};

#define CODEC_VALUES_EXACT 1
#define CODEC_VALUES_CODED 0
static const unsigned char codec_exact[CODEC_KIND_COUNT] = {
#define X(kind, value, name, param, values) [kind] = CODEC_VALUES_##values,
    CODEC_KIND_MAP(X)
#undef X
};

/* How messages write each parameter after a name. */
#define CODEC_PARAM_TEXT_NONE ""
#define CODEC_PARAM_TEXT_DENSITY ":D"
#define CODEC_PARAM_TEXT_BITS ":BITS"

/* codec_kind_list's text, made by the preprocessor with a separator before
 * every name; codec_kind_list skips the first. */
static const char codec_list[] =
#define X(kind, value, name, param, values) ", " name CODEC_PARAM_TEXT_##param
    CODEC_KIND_MAP(X)
#undef X
    ;

#define X(kind, value, name, param, values) +1
_Static_assert(0 CODEC_KIND_MAP(X) == CODEC_KIND_COUNT,
               "CODEC_KIND_COUNT counts CODEC_KIND_MAP");
#undef X

const char *codec_kind_name(codec_kind kind)
{
    return (unsigned)kind < CODEC_KIND_COUNT ? codec_names[kind] : "unknown";
}

codec_param codec_kind_param(codec_kind kind)
{
    return (unsigned)kind < CODEC_KIND_COUNT ? codec_params[kind]
                                             : CODEC_PARAM_NONE;
}

const char *codec_kind_list(void)
{
    return codec_list + 2;
}

static int codec_spec_is_valid(const codec_spec *spec)
{
    if (spec == NULL || (unsigned)spec->kind >= CODEC_KIND_COUNT ||
        codec_table[spec->kind].encode == NULL)
        return 0;
    switch (codec_params[spec->kind]) {
    case CODEC_PARAM_DENSITY:
        return spec->density > 0.0 && spec->density <= 1.0;
    case CODEC_PARAM_BITS:
        return spec->bits >= 1 && spec->bits <= 8;
    case CODEC_PARAM_NONE:
        break;
    }
    return 1;
}

/* s as a name of the map and its parameter, auto only when allowed. */
static flps_err codec_parse(const char *s, int allow_auto, codec_spec *out)
{
    const char *colon;
    size_t namelen;

    if (s == NULL || out == NULL)
        return FLPS_EINVAL;
    colon = strchr(s, ':');
    namelen = colon ? (size_t)(colon - s) : strlen(s);
    for (unsigned k = 0; k < CODEC_KIND_COUNT; k++) {
        codec_spec spec = {(codec_kind)k, 0.0, 0};
        codec_param param = codec_params[k];

        if (strlen(codec_names[k]) != namelen ||
            strncmp(codec_names[k], s, namelen) != 0)
            continue;
        if ((param == CODEC_PARAM_NONE) != (colon == NULL))
            return FLPS_EINVAL;
        if (param == CODEC_PARAM_DENSITY) {
            /* The spec allows no sign, though the parser would. The lower
             * bound is exclusive: codec_spec_is_valid refuses 0. */
            if (colon[1] != '.' && (colon[1] < '0' || colon[1] > '9'))
                return FLPS_EINVAL;
            if (flps_parse_double(NULL, colon + 1, 0.0, 1.0, &spec.density,
                                  NULL, 0) != FLPS_OK)
                return FLPS_EINVAL;
        } else if (param == CODEC_PARAM_BITS) {
            uint64_t v;
            if (flps_parse_u64(NULL, colon + 1, 1, 8, &v, NULL, 0) != FLPS_OK)
                return FLPS_EINVAL;
            spec.bits = (unsigned)v;
        }
        if (!(allow_auto && spec.kind == CODEC_AUTO) &&
            !codec_spec_is_valid(&spec))
            return FLPS_EINVAL;
        *out = spec;
        return FLPS_OK;
    }
    return FLPS_EINVAL;
}

flps_err codec_spec_parse(const char *s, codec_spec *out)
{
    return codec_parse(s, 0, out);
}

flps_err codec_setting_parse(const char *s, codec_spec *out)
{
    return codec_parse(s, 1, out);
}

void codec_msg_set(codec *c, size_t nframes, size_t len0, size_t len1,
                   size_t count, codec_msg *out)
{
    memset(out, 0, sizeof(*out));
    out->frames[0].data = c->buf[0];
    out->frames[0].len = len0;
    if (nframes > 1) {
        out->frames[1].data = c->buf[1];
        out->frames[1].len = len1;
    } else {
        len1 = 0;
    }
    out->nframes = nframes;
    out->bytes = len0 + len1;
    out->count = count;
}

flps_err codec_spec_format(const codec_spec *spec, char *buf, size_t len)
{
    const char *name;
    int w;

    if (!codec_spec_is_valid(spec) || buf == NULL)
        return FLPS_EINVAL;
    name = codec_names[spec->kind];
    switch (codec_params[spec->kind]) {
    case CODEC_PARAM_DENSITY:
        w = snprintf(buf, len, "%s:%.17g", name, spec->density);
        break;
    case CODEC_PARAM_BITS:
        w = snprintf(buf, len, "%s:%u", name, spec->bits);
        break;
    default:
        w = snprintf(buf, len, "%s", name);
        break;
    }
    if (w < 0 || (size_t)w >= len)
        return FLPS_EINVAL;
    return FLPS_OK;
}

int codec_kind_is_sparse(codec_kind kind)
{
    return codec_kind_param(kind) == CODEC_PARAM_DENSITY;
}

int codec_kind_sends_exact_values(codec_kind kind)
{
    return (unsigned)kind < CODEC_KIND_COUNT && codec_exact[kind];
}

size_t codec_count_for(const codec_spec *spec, size_t n)
{
    double k;

    if (!codec_kind_is_sparse(spec->kind))
        return n;
    if (n == 0)
        return 0;
    k = floor(spec->density * (double)n);
    if (k < 1.0)
        return 1;
    return k >= (double)n ? n : (size_t)k;
}

double codec_warmup_density(double start, double target, uint64_t warmup,
                            uint64_t t)
{
    double d;

    if (warmup == 0 || t >= warmup || !(start > target))
        return target;
    if (t == 0)
        return start;
    /* One pow of the same operands on every process: the ratio and the
     * exponent are formed the same way everywhere. Clamped so rounding
     * can never step outside [target, start]. */
    d = start * pow(target / start, (double)t / (double)warmup);
    if (d > start)
        d = start;
    if (d < target)
        d = target;
    return d;
}

size_t codec_nframes(const codec_spec *spec)
{
    switch (spec->kind) {
    case CODEC_DENSE:
    case CODEC_FP16:
        return 1;
    default:
        return 2;
    }
}

size_t codec_max_bytes(const codec_spec *spec, size_t n)
{
    size_t k;

    switch (spec->kind) {
    case CODEC_DENSE:
        return 4 * n;
    case CODEC_FP16:
        return 2 * n;
    case CODEC_QSGD:
        return 4 * ((n + CODEC_QSGD_BUCKET - 1) / CODEC_QSGD_BUCKET) +
               (n * (spec->bits + 1) + 7) / 8;
    case CODEC_SIGN:
        return 4 + (n + 7) / 8;
    default:
        k = codec_count_for(spec, n);
        if (spec->kind == CODEC_DGC)
            k += k / 5;
        return 8 * k;
    }
}

flps_err codec_create(const codec_spec *spec, uint64_t seed, codec **out)
{
    codec *c;
    flps_err rc;

    if (!codec_spec_is_valid(spec) || out == NULL)
        return FLPS_EINVAL;
    c = flps_calloc(1, sizeof(*c));
    if (c == NULL)
        return FLPS_ENOMEM;
    c->spec = *spec;
    c->seed = seed;
    if (spec->kind == CODEC_TOPK || spec->kind == CODEC_GTOPK ||
        spec->kind == CODEC_DGC) {
        rc = topk_ctx_create(&c->topk);
        if (rc != FLPS_OK) {
            flps_free(c);
            return rc;
        }
    }
    *out = c;
    return FLPS_OK;
}

void codec_destroy(codec *c)
{
    if (c == NULL)
        return;
    topk_ctx_destroy(c->topk);
    for (unsigned f = 0; f < CODEC_MAX_FRAMES; f++)
        flps_free(c->buf[f]);
    flps_free(c->bitmap);
    flps_free(c);
}

const codec_spec *codec_get_spec(const codec *c)
{
    return &c->spec;
}

flps_err codec_set_density(codec *c, double density)
{
    if (c == NULL || codec_params[c->spec.kind] != CODEC_PARAM_DENSITY ||
        !(density > 0.0 && density <= 1.0))
        return FLPS_EINVAL;
    c->spec.density = density;
    return FLPS_OK;
}

flps_err codec_set_output(codec *c, void *dst, size_t cap)
{
    if (c == NULL)
        return FLPS_EINVAL;
    c->out = dst;
    c->out_cap = dst != NULL ? cap : 0;
    return FLPS_OK;
}

/* Point the frame buffers at the caller's output for one encode, if one
 * was set; codec_output_end puts the codec's own back. */
static void codec_output_begin(codec *c)
{
    if (c->out == NULL)
        return;
    for (unsigned f = 0; f < CODEC_MAX_FRAMES; f++) {
        c->own_buf[f] = c->buf[f];
        c->own_cap[f] = c->cap[f];
    }
    c->out_used = 0;
    c->out_active = 1;
}

static void codec_output_end(codec *c)
{
    if (!c->out_active)
        return;
    for (unsigned f = 0; f < CODEC_MAX_FRAMES; f++) {
        c->buf[f] = c->own_buf[f];
        c->cap[f] = c->own_cap[f];
    }
    c->out_active = 0;
    c->out = NULL;
    c->out_cap = 0;
}

flps_err codec_encode(codec *c, const float *a, size_t n, codec_msg *out)
{
    flps_err rc;

    if (c == NULL)
        return FLPS_EINVAL;
    if (out == NULL || (n > 0 && a == NULL) || (uint64_t)n >= (1ull << 32)) {
        c->out = NULL;
        return FLPS_EINVAL;
    }
    codec_output_begin(c);
    rc = codec_table[c->spec.kind].encode(c, a, n, out);
    codec_output_end(c);
    c->out = NULL;
    if (rc == FLPS_OK)
        c->encodes++;
    return rc;
}

flps_err codec_reserve(codec *c, size_t n)
{
    size_t len[CODEC_MAX_FRAMES] = {0, 0}, k;
    flps_err rc = FLPS_OK;

    if (c == NULL || (uint64_t)n >= (1ull << 32))
        return FLPS_EINVAL;
    switch (c->spec.kind) {
    case CODEC_DENSE:
        len[0] = 4 * n;
        break;
    case CODEC_FP16:
        len[0] = 2 * n;
        break;
    case CODEC_QSGD:
        len[0] = 4 * ((n + CODEC_QSGD_BUCKET - 1) / CODEC_QSGD_BUCKET);
        len[1] = (n * (c->spec.bits + 1) + 7) / 8;
        break;
    case CODEC_SIGN:
        len[0] = 4;
        len[1] = (n + 7) / 8;
        break;
    default:
        k = codec_count_for(&c->spec, n);
        if (c->spec.kind == CODEC_DGC)
            k += k / 5;
        len[0] = len[1] = 4 * k;
        break;
    }
    if (c->out != NULL)
        return len[0] + len[1] <= c->out_cap ? FLPS_OK : FLPS_EINVAL;
    for (unsigned f = 0; f < codec_nframes(&c->spec) && rc == FLPS_OK; f++)
        rc = codec_buf_reserve(c, f, len[f]);
    return rc;
}

flps_err codec_encode_fused(codec *c, float *r, float *u, const float *g,
                            float m, size_t n, codec_msg *out)
{
    flps_err rc;

    if (c == NULL || out == NULL ||
        (n > 0 && ((r == NULL && c->spec.kind != CODEC_DENSE) || g == NULL)) ||
        (uint64_t)n >= (1ull << 32) ||
        !codec_kind_sends_exact_values(c->spec.kind)) {
        if (c != NULL)
            c->out = NULL;
        return FLPS_EINVAL;
    }
    codec_output_begin(c);
    if (c->spec.kind == CODEC_DENSE)
        rc = codec_dense_encode_fused(c, r, u, g, m, n, out);
    else
        rc = codec_sparse_encode_fused(c, r, u, g, m, n, out);
    codec_output_end(c);
    c->out = NULL;
    if (rc == FLPS_OK)
        c->encodes++;
    return rc;
}

flps_err codec_decode(const codec_spec *spec, const codec_frame *frames,
                      size_t nframes, float *acc, size_t n)
{
    if (!codec_spec_is_valid(spec) || (nframes > 0 && frames == NULL) ||
        (n > 0 && acc == NULL) || (uint64_t)n >= (1ull << 32))
        return FLPS_EINVAL;
    if (nframes != codec_nframes(spec))
        return FLPS_EPROTO;
    for (size_t f = 0; f < nframes; f++)
        if (frames[f].len > 0 && frames[f].data == NULL)
            return FLPS_EINVAL;
    return codec_table[spec->kind].decode(spec, frames, acc, n);
}

flps_err codec_buf_reserve(codec *c, unsigned f, size_t bytes)
{
    uint8_t *p;

    if (c->out_active) {
        /* Frames one after another in the caller's buffer. */
        if (f == 0)
            c->out_used = 0;
        if (bytes > c->out_cap - c->out_used)
            return FLPS_EINVAL;
        c->buf[f] = c->out + c->out_used;
        c->cap[f] = bytes;
        c->out_used += bytes;
        return FLPS_OK;
    }
    if (c->cap[f] >= bytes && c->buf[f] != NULL)
        return FLPS_OK;
    /* A fresh buffer, not realloc: the old contents are dead, so copying
     * them would be wasted work. */
    p = flps_malloc(bytes);
    if (p == NULL)
        return FLPS_ENOMEM;
    flps_free(c->buf[f]);
    c->buf[f] = p;
    c->cap[f] = bytes;
    return FLPS_OK;
}

uint64_t codec_stream(const codec *c)
{
    uint64_t s = c->seed ^ (0xd1b54a32d192ed03ull * (c->encodes + 1));

    return flps_splitmix64(&s);
}

int codec_all_finite(const float *a, size_t n)
{
    /* The IEEE bits of |x| plus 2^23 carry into bit 31 exactly when x is
     * NaN or Inf; one OR over the array, no branch, vectorises. */
    uint32_t acc = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, a + i, sizeof(u));
        acc |= (u & 0x7fffffffu) + 0x00800000u;
    }
    return (acc & 0x80000000u) == 0;
}
