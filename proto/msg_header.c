/* The decoder of a wire message's MessagePack header: a walk that checks
 * every declared length before msgpack-c allocates by it, then one table
 * of the header's keys, each with its decoder, then the keys each op
 * needs. The frames after the header are proto/msg.c's. */
#include "proto/msg_header.h"

#include <math.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"

static int obj_u64(const msgpack_object *o, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return 0;
    *v = o->via.u64;
    return 1;
}

static int obj_u32(const msgpack_object *o, uint32_t *v)
{
    uint64_t x;
    if (!obj_u64(o, &x) || x > UINT32_MAX)
        return 0;
    *v = (uint32_t)x;
    return 1;
}

static int obj_f64(const msgpack_object *o, double *v)
{
    if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32)
        *v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *v = (double)o->via.u64;
    else
        return 0;
    return isfinite(*v);
}

static int obj_str(const msgpack_object *o, char *buf, size_t cap)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
        return 0;
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    return memchr(buf, '\0', o->via.str.size) == NULL;
}

static int key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, name, n) == 0;
}

/* The server optimizer of a 15- or 16-field cfg (sgd otherwise): a known
 * one, not sgd in 15 fields (sgd is sent as 11 or 13), beta in [0, 1) and
 * 0 but for momentum; and the piece of a 16-field one, not 0. */
static int decode_cfg_tail(const msgpack_object *o, proto_jobcfg *c)
{
    const msgpack_object *a = o->via.array.ptr;
    uint32_t opt;

    c->server_opt = PROTO_SOPT_SGD;
    c->server_beta = 0;
    c->piece = 0;
    if (o->via.array.size < 15)
        return 1;
    if (o->via.array.size == 16 &&
        (!obj_u32(&a[15], &c->piece) || c->piece == 0))
        return 0;
    if (!obj_u32(&a[13], &opt) || !obj_f64(&a[14], &c->server_beta) ||
        (opt == PROTO_SOPT_SGD && o->via.array.size == 15) ||
        opt > PROTO_SOPT_ADAM || !(c->server_beta >= 0 && c->server_beta < 1) ||
        (opt != PROTO_SOPT_MOMENTUM && c->server_beta != 0))
        return 0;
    c->server_opt = (uint8_t)opt;
    return 1;
}

static int decode_cfg(const msgpack_object *o, proto_jobcfg *c)
{
    const msgpack_object *a;
    uint32_t mode, agg, sched;

    if (o->type != MSGPACK_OBJECT_ARRAY ||
        (o->via.array.size != 11 && o->via.array.size != 13 &&
         o->via.array.size != 15 && o->via.array.size != 16))
        return 0;
    a = o->via.array.ptr;
    if (!obj_u32(&a[0], &c->shard) || !obj_u32(&a[1], &c->nshards) ||
        !obj_u32(&a[2], &c->workers) || !obj_u32(&a[3], &c->part_size) ||
        !obj_u32(&a[4], &mode) || !obj_u32(&a[5], &agg) ||
        !obj_f64(&a[6], &c->density) || !obj_f64(&a[7], &c->lr) ||
        !obj_u32(&a[8], &sched) || !obj_u64(&a[9], &c->iterations) ||
        !obj_str(&a[10], c->compression, sizeof(c->compression)))
        return 0;
    if (mode > PROTO_MODE_WEIGHTED || agg > PROTO_AGG_GTOPK ||
        sched > PROTO_LR_COSINE)
        return 0;
    c->density_warmup = 0;
    c->density_start = 0;
    if (o->via.array.size >= 13 &&
        (!obj_u64(&a[11], &c->density_warmup) ||
         !obj_f64(&a[12], &c->density_start) ||
         (c->density_warmup == 0) !=
             (o->via.array.size >= 15 && c->density_start == 0) ||
         (c->density_warmup > 0 &&
          (!(c->density_start > 0) || c->density_start > 1))))
        return 0;
    if (!decode_cfg_tail(o, c))
        return 0;
    c->lr_schedule = (uint8_t)sched;
    c->mode = (uint8_t)mode;
    c->agg = (uint8_t)agg;
    return 1;
}

/* The tensors array: [name, numel] per tensor, into m->tensors. On error
 * m->tensors may stay allocated: proto_msg_header_decode frees it. */
static flps_err decode_tensors(const msgpack_object *o, proto_msg *m,
                               char *errbuf, size_t errlen)
{
    uint32_t n;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 ||
        o->via.array.size > PROTO_MAX_TENSORS)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "tensors must be an array of 1..%d [name, numel] pairs",
            PROTO_MAX_TENSORS);
    n = o->via.array.size;
    m->tensors = flps_calloc(n, sizeof(*m->tensors));
    if (m->tensors == NULL)
        return FLPS_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *t = &o->via.array.ptr[i];
        if (t->type != MSGPACK_OBJECT_ARRAY || t->via.array.size != 2 ||
            !obj_str(&t->via.array.ptr[0], m->tensors[i].name,
                     sizeof(m->tensors[i].name)) ||
            !obj_u64(&t->via.array.ptr[1], &m->tensors[i].numel) ||
            m->tensors[i].numel == 0 || m->tensors[i].numel > UINT32_MAX)
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "tensor %u is not a [name, numel] pair with "
                                   "0 < numel < 2^32",
                                   i);
    }
    m->ntensors = n;
    return FLPS_OK;
}

/* The segs array: [part, n] (PUSH) or [part, n, nrej, version] (UPDATE)
 * per segment, into m->segs; the arity is checked against the op once it
 * is known (*arity: 2 or 4, the same for every entry). On error m->segs
 * may stay allocated: proto_msg_header_decode frees it. */
static flps_err decode_segs(const msgpack_object *o, proto_msg *m,
                            unsigned *arity, char *errbuf, size_t errlen)
{
    uint32_t n;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 ||
        o->via.array.size > PROTO_MAX_SEGS)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "segs must be an array of 1..%d segments",
                               PROTO_MAX_SEGS);
    n = o->via.array.size;
    m->segs = flps_calloc(n, sizeof(*m->segs));
    if (m->segs == NULL)
        return FLPS_ENOMEM;
    *arity = 0;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        const msgpack_object *a = e->via.array.ptr;
        proto_seg *g = &m->segs[i];
        int ok = e->type == MSGPACK_OBJECT_ARRAY &&
                 (e->via.array.size == 2 || e->via.array.size == 4) &&
                 (*arity == 0 || *arity == e->via.array.size);
        if (ok) {
            *arity = e->via.array.size;
            ok = obj_u32(&a[0], &g->part) && obj_u32(&a[1], &g->n) &&
                 (*arity == 2 ||
                  (obj_u32(&a[2], &g->nrej) && obj_u64(&a[3], &g->version)));
        }
        if (!ok)
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "segment %u is not [part, n] or [part, n, "
                                   "nrej, version] like the others",
                                   i);
    }
    m->nsegs = n;
    return FLPS_OK;
}

/* Required header fields, as bits. */
enum {
    F_V = 1 << 0,
    F_OP = 1 << 1,
    F_JOB = 1 << 2,
    F_RANK = 1 << 3,
    F_PART = 1 << 4,
    F_ITER = 1 << 5,
    F_VER = 1 << 6,
    F_DATA = 1 << 7,
    F_NREJ = 1 << 8,
    F_STATUS = 1 << 9,
    F_TEXT = 1 << 10,
    F_CFG = 1 << 11,
    F_TENSORS = 1 << 12,
    F_SPEC = 1 << 13,
    F_SEGS = 1 << 14,
    F_SLOW = 1 << 15,
    F_WT = 1 << 16,
    F_AUTH = 1 << 17,
    F_CID = 1 << 18,
    F_BASE = F_V | F_OP | F_JOB | F_RANK | F_PART | F_ITER | F_VER | F_DATA,
};

#define PROTO_HEADER_MAX (1u << 20)

static uint64_t be_read(const unsigned char *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Walk one MessagePack object without building it and check that every
 * declared length fits in the bytes that are there. msgpack-c reserves
 * room for an array or map of the declared size before reading its
 * elements, so five hostile bytes could otherwise ask for 100 GiB. Every
 * element takes at least one byte, so a count of pending objects larger
 * than the bytes left is a lie. Returns 1 when well-formed. */
static int mp_is_sane(const unsigned char *p, size_t len)
{
    size_t pos = 0;
    uint64_t pending = 1;

    while (pending > 0) {
        unsigned char b;
        uint64_t skip = 0, items = 0;

        if (pos >= len)
            return 0;
        b = p[pos++];
        pending--;
        if (b <= 0x7f || b >= 0xe0 || (b >= 0xc2 && b <= 0xc3) || b == 0xc0) {
            /* fixint, nil, bool: the byte itself */
        } else if (b >= 0x80 && b <= 0x8f) {
            items = 2u * (b & 0x0f);
        } else if (b >= 0x90 && b <= 0x9f) {
            items = b & 0x0f;
        } else if (b >= 0xa0 && b <= 0xbf) {
            skip = b & 0x1f;
        } else {
            static const unsigned char lenbytes[] = {
                [0xc4 - 0xc4] = 1, [0xc5 - 0xc4] = 2, [0xc6 - 0xc4] = 4,
                [0xc7 - 0xc4] = 1, [0xc8 - 0xc4] = 2, [0xc9 - 0xc4] = 4,
                [0xd9 - 0xc4] = 1, [0xda - 0xc4] = 2, [0xdb - 0xc4] = 4,
                [0xdc - 0xc4] = 2, [0xdd - 0xc4] = 4, [0xde - 0xc4] = 2,
                [0xdf - 0xc4] = 4,
            };
            unsigned n;
            uint64_t v;

            switch (b) {
            case 0xca:
                skip = 4;
                break;
            case 0xcb:
                skip = 8;
                break;
            case 0xcc:
            case 0xd0:
                skip = 1;
                break;
            case 0xcd:
            case 0xd1:
                skip = 2;
                break;
            case 0xce:
            case 0xd2:
                skip = 4;
                break;
            case 0xcf:
            case 0xd3:
                skip = 8;
                break;
            case 0xd4:
                skip = 2;
                break;
            case 0xd5:
                skip = 3;
                break;
            case 0xd6:
                skip = 5;
                break;
            case 0xd7:
                skip = 9;
                break;
            case 0xd8:
                skip = 17;
                break;
            case 0xc1:
                return 0; /* never used */
            default:
                n = lenbytes[b - 0xc4];
                if (n == 0 || len - pos < n)
                    return 0;
                v = be_read(p + pos, n);
                pos += n;
                if (b >= 0xdc && b <= 0xdd)
                    items = v;
                else if (b >= 0xde)
                    items = 2 * v;
                else if (b >= 0xc7 && b <= 0xc9)
                    skip = v + 1; /* the ext type byte, then the data */
                else
                    skip = v;
                break;
            }
        }
        if (skip > len - pos)
            return 0;
        pos += (size_t)skip;
        pending += items;
        if (pending > len - pos)
            return 0;
    }
    return 1;
}

/* ---- the header's keys ---- */

/* What a key's decoder made of its value. */
typedef enum {
    KEY_OK,      /* taken into the message */
    KEY_BAD,     /* of the wrong type or range */
    KEY_REFUSED, /* refused with its own reason: hdr_state.rc, errbuf */
} key_result;

/* A header being decoded: the message its keys fill in, the keys seen so
 * far (F_* bits), the arity of its segments, and where a refusal's reason
 * goes. */
typedef struct hdr_state {
    proto_msg *m;
    unsigned seen;
    unsigned arity;
    flps_err rc;
    char *errbuf;
    size_t errlen;
} hdr_state;

static key_result key_ok_if(int ok)
{
    return ok ? KEY_OK : KEY_BAD;
}

/* The result of a decoder that returns flps_err with its own reason. */
static key_result key_refused_unless_ok(hdr_state *st, flps_err rc)
{
    st->rc = rc;
    return rc == FLPS_OK ? KEY_OK : KEY_REFUSED;
}

static key_result key_v(hdr_state *st, const msgpack_object *v)
{
    uint64_t x = 0;

    if (!obj_u64(v, &x))
        return KEY_BAD;
    if (x < PROTO_VERSION_MIN || x > PROTO_VERSION)
        return key_refused_unless_ok(
            st, flps_errbuf_set(st->errbuf, st->errlen, FLPS_EPROTO,
                                "protocol version %llu is not supported "
                                "(this build speaks %u and reads %u to %u): "
                                "run the same flps release everywhere",
                                (unsigned long long)x, PROTO_VERSION,
                                PROTO_VERSION_MIN, PROTO_VERSION));
    st->m->wire_version = (uint32_t)x;
    return KEY_OK;
}

static key_result key_op(hdr_state *st, const msgpack_object *v)
{
    uint64_t x = 0;

    if (!obj_u64(v, &x))
        return KEY_BAD;
    if (x < 1 || x > PROTO_OP_MAX_)
        return key_refused_unless_ok(
            st, flps_errbuf_set(st->errbuf, st->errlen, FLPS_EPROTO,
                                "unknown op %llu", (unsigned long long)x));
    st->m->op = (uint8_t)x;
    return KEY_OK;
}

/* data: [codec, n]. */
static key_result key_data(hdr_state *st, const msgpack_object *v)
{
    uint32_t codec;

    if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 2 ||
        !obj_u32(&v->via.array.ptr[0], &codec) ||
        !obj_u32(&v->via.array.ptr[1], &st->m->n) ||
        codec > PROTO_CODEC_ENCODED)
        return KEY_BAD;
    st->m->codec = (uint8_t)codec;
    return KEY_OK;
}

static key_result key_spec(hdr_state *st, const msgpack_object *v)
{
    return key_ok_if(obj_str(v, st->m->spec, sizeof(st->m->spec)) &&
                     st->m->spec[0] != '\0');
}

static key_result key_cfg(hdr_state *st, const msgpack_object *v)
{
    return key_ok_if(decode_cfg(v, &st->m->cfg));
}

static key_result key_segs(hdr_state *st, const msgpack_object *v)
{
    return key_refused_unless_ok(
        st, decode_segs(v, st->m, &st->arity, st->errbuf, st->errlen));
}

static key_result key_wt(hdr_state *st, const msgpack_object *v)
{
    const int ok = obj_f64(v, &st->m->weight) && st->m->weight >= 0 &&
                   st->m->weight <= PROTO_WEIGHT_MAX;

    st->m->has_weight = 1;
    return key_ok_if(ok);
}

static key_result key_tensors(hdr_state *st, const msgpack_object *v)
{
    return key_refused_unless_ok(
        st, decode_tensors(v, st->m, st->errbuf, st->errlen));
}

/* How a key's value is read: a scalar or string into its field of the
 * message, or by a decoder of its own. */
typedef enum { AS_U32, AS_U64, AS_STR, AS_DECODER } key_kind;

/* Keys that allocate: a second one is refused before it is decoded, so
 * the first one's allocation is not lost. */
#define KEY_ALLOCATES 1u

#define FIELD(f) offsetof(proto_msg, f), sizeof(((proto_msg *)0)->f)

/* Every key a header of this version may carry; others are skipped. */
static const struct hdr_key {
    const char *name;
    unsigned bit;
    key_kind kind;
    size_t off, size; /* AS_U32, AS_U64, AS_STR: the field */
    key_result (*decode)(hdr_state *st, const msgpack_object *v);
    unsigned flags;
} hdr_keys[] = {
    {"v", F_V, AS_DECODER, 0, 0, key_v, 0},
    {"op", F_OP, AS_DECODER, 0, 0, key_op, 0},
    {"job", F_JOB, AS_STR, FIELD(job), NULL, 0},
    {"rank", F_RANK, AS_U32, FIELD(rank), NULL, 0},
    {"part", F_PART, AS_U32, FIELD(part), NULL, 0},
    {"iter", F_ITER, AS_U64, FIELD(iter), NULL, 0},
    {"ver", F_VER, AS_U64, FIELD(version), NULL, 0},
    {"data", F_DATA, AS_DECODER, 0, 0, key_data, 0},
    {"nrej", F_NREJ, AS_U32, FIELD(nrej), NULL, 0},
    {"spec", F_SPEC, AS_DECODER, 0, 0, key_spec, 0},
    {"status", F_STATUS, AS_U32, FIELD(status), NULL, 0},
    {"text", F_TEXT, AS_STR, FIELD(text), NULL, 0},
    {"cfg", F_CFG, AS_DECODER, 0, 0, key_cfg, 0},
    {"segs", F_SEGS, AS_DECODER, 0, 0, key_segs, KEY_ALLOCATES},
    {"slow", F_SLOW, AS_U64, FIELD(slowest), NULL, 0},
    {"wt", F_WT, AS_DECODER, 0, 0, key_wt, 0},
    {"auth", F_AUTH, AS_STR, FIELD(auth), NULL, 0},
    {"cid", F_CID, AS_U64, FIELD(cid), NULL, 0},
    {"tensors", F_TENSORS, AS_DECODER, 0, 0, key_tensors, KEY_ALLOCATES},
};

static const struct hdr_key *hdr_key_find(const msgpack_object *k)
{
    for (size_t i = 0; i < sizeof(hdr_keys) / sizeof(hdr_keys[0]); i++)
        if (key_is(k, hdr_keys[i].name))
            return &hdr_keys[i];
    return NULL;
}

/* Read v, the value of key, into st->m. */
static key_result key_read(hdr_state *st, const struct hdr_key *key,
                           const msgpack_object *v)
{
    char *field = (char *)st->m + key->off;

    if ((key->flags & KEY_ALLOCATES) && (st->seen & key->bit))
        return KEY_BAD;
    switch (key->kind) {
    case AS_U32:
        return key_ok_if(obj_u32(v, (uint32_t *)(void *)field));
    case AS_U64:
        return key_ok_if(obj_u64(v, (uint64_t *)(void *)field));
    case AS_STR:
        return key_ok_if(obj_str(v, field, key->size));
    default:
        return key->decode(st, v);
    }
}

/* Decode every known key of the header map into st->m. Unknown keys are
 * allowed within a version; a known one must be of its type and range,
 * and appear once. */
static flps_err decode_keys(const msgpack_object *map, hdr_state *st)
{
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        const struct hdr_key *key = hdr_key_find(k);
        key_result r;

        if (key == NULL)
            continue;
        r = key_read(st, key, &map->via.map.ptr[i].val);
        if (r == KEY_REFUSED)
            return st->rc;
        if (r == KEY_OK && !(st->seen & key->bit)) {
            st->seen |= key->bit;
            continue;
        }
        /* The key's own name, never the peer's bytes. */
        return flps_errbuf_set(
            st->errbuf, st->errlen, FLPS_EPROTO, "header field '%s' is %s",
            key->name, r == KEY_OK ? "repeated" : "of the wrong type or range");
    }
    return FLPS_OK;
}

/* The keys a message must carry: the base ones, those its op needs, and
 * no key its op or codec cannot have. */
static flps_err check_keys(const proto_msg *m, const hdr_state *st,
                           char *errbuf, size_t errlen)
{
    const unsigned seen = st->seen;

    if ((seen & F_BASE) != F_BASE)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "header lacks a required field (v, op, job, rank, part, "
            "iter, ver, data)");
    if ((m->op == PROTO_OP_UPDATE && !(seen & F_NREJ)) ||
        ((m->op == PROTO_OP_ERROR || m->op == PROTO_OP_ACK) &&
         (seen & (F_STATUS | F_TEXT)) != (F_STATUS | F_TEXT)) ||
        (m->op == PROTO_OP_REGISTER &&
         (seen & (F_CFG | F_TENSORS)) != (F_CFG | F_TENSORS)) ||
        (m->codec == PROTO_CODEC_ENCODED && !(seen & F_SPEC)))
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "%s header lacks its op-specific fields",
                               proto_op_name(m->op));
    if ((seen & F_WT) && m->op != PROTO_OP_PUSH)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "only a PUSH carries a weight (wt)");
    if ((seen & F_SEGS) &&
        ((m->op != PROTO_OP_PUSH && m->op != PROTO_OP_UPDATE) ||
         m->codec != PROTO_CODEC_SPARSE ||
         st->arity != (m->op == PROTO_OP_UPDATE ? 4u : 2u)))
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "only a sparse PUSH ([part, n]) or UPDATE "
                               "([part, n, nrej, version]) carries segs");
    return FLPS_OK;
}

flps_err proto_msg_header_decode(const proto_frame *f, proto_msg *m,
                                 char *errbuf, size_t errlen)
{
    msgpack_unpacked up;
    size_t off = 0;
    hdr_state st = {m, 0, 0, FLPS_OK, errbuf, errlen};
    flps_err rc;

    if (f->len > PROTO_HEADER_MAX || !mp_is_sane(f->data, f->len))
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "header is not one MessagePack object: malformed, a "
            "declared length beyond its %zu bytes, or over %u bytes",
            f->len, PROTO_HEADER_MAX);
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, f->data, f->len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != f->len)
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "header is not one MessagePack object");
    else if (up.data.type != MSGPACK_OBJECT_MAP)
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "header is not a MessagePack map");
    else
        rc = decode_keys(&up.data, &st);
    if (rc == FLPS_OK)
        rc = check_keys(m, &st, errbuf, errlen);
    if (rc != FLPS_OK) {
        flps_free(m->tensors);
        m->tensors = NULL;
        flps_free(m->segs);
        m->segs = NULL;
        m->nsegs = 0;
    }
    msgpack_unpacked_destroy(&up);
    return rc;
}
