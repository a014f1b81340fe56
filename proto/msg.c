/* Wire messages: MessagePack header + raw little-endian frames. */
#include "proto/msg.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/finite.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error                                                                         \
    "flps frames are little-endian and sent as-is; big-endian hosts are not supported"
#endif

const char *proto_op_name(uint8_t op)
{
    static const char *names[] = {
        "?",    "REGISTER",   "REGISTER_OK", "INIT", "PUSH",  "UPDATE",
        "PULL", "PULL_REPLY", "CHECKPOINT",  "ACK",  "ERROR",
    };
    return op <= PROTO_OP_MAX_ ? names[op] : "?";
}

static void pack_key(msgpack_packer *pk, const char *key)
{
    size_t n = strlen(key);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, key, n);
}

static void pack_str(msgpack_packer *pk, const char *key, const char *val)
{
    size_t n = strlen(val);
    pack_key(pk, key);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, val, n);
}

static void pack_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
    pack_key(pk, key);
    msgpack_pack_uint64(pk, v);
}

static int op_has_values(uint8_t op)
{
    return op == PROTO_OP_PUSH || op == PROTO_OP_INIT ||
           op == PROTO_OP_UPDATE || op == PROTO_OP_PULL_REPLY;
}

flps_err proto_msg_encode(const proto_msg *msg, void **hdr, size_t *hdrlen,
                          proto_frame frames[PROTO_MAX_FRAMES], size_t *nframes)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t nkeys = 8, nf = 1;
    int values = op_has_values(msg->op);
    int sparse = values && msg->codec == PROTO_CODEC_SPARSE;
    int encoded = values && msg->codec == PROTO_CODEC_ENCODED;

    if (msg->op < 1 || msg->op > PROTO_OP_MAX_ ||
        strlen(msg->job) > PROTO_JOB_MAX)
        return FLPS_EINVAL;
    if (values && msg->codec > PROTO_CODEC_ENCODED)
        return FLPS_EINVAL;
    if (encoded && (msg->op != PROTO_OP_PUSH || msg->nenc < 1 ||
                    msg->nenc > PROTO_ENC_MAX_FRAMES || msg->spec[0] == '\0' ||
                    strlen(msg->spec) > PROTO_SPEC_MAX))
        return FLPS_EINVAL;
    if (strlen(msg->cfg.compression) > PROTO_SPEC_MAX)
        return FLPS_EINVAL;
    if (sparse && msg->op != PROTO_OP_PUSH && msg->op != PROTO_OP_UPDATE &&
        msg->op != PROTO_OP_PULL_REPLY)
        return FLPS_EINVAL;
    if (msg->nsegs > 0) {
        uint64_t tn = 0, tr = 0;
        if (!sparse || msg->nsegs > PROTO_MAX_SEGS || msg->segs == NULL)
            return FLPS_EINVAL;
        for (uint32_t i = 0; i < msg->nsegs; i++) {
            tn += msg->segs[i].n;
            tr += msg->segs[i].nrej;
        }
        if (tn != msg->n || (msg->op == PROTO_OP_UPDATE && tr != msg->nrej))
            return FLPS_EINVAL;
        nkeys++;
    }
    if (msg->op == PROTO_OP_UPDATE || encoded)
        nkeys++;
    if (msg->op == PROTO_OP_ERROR || msg->op == PROTO_OP_ACK)
        nkeys += 2;
    if (msg->op == PROTO_OP_REGISTER)
        nkeys += 2;
    if (msg->slowest != 0)
        nkeys++;
    if (msg->op == PROTO_OP_PUSH && msg->has_weight) {
        if (!isfinite(msg->weight) || msg->weight < 0 ||
            msg->weight > PROTO_WEIGHT_MAX)
            return FLPS_EINVAL;
        nkeys++;
    }
    if (msg->auth[0] != '\0')
        nkeys++;
    if (msg->cid != 0)
        nkeys++;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, nkeys);
    pack_u64(&pk, "v", PROTO_VERSION);
    pack_u64(&pk, "op", msg->op);
    pack_str(&pk, "job", msg->job);
    pack_u64(&pk, "rank", msg->rank);
    pack_u64(&pk, "part", msg->part);
    pack_u64(&pk, "iter", msg->iter);
    pack_u64(&pk, "ver", msg->version);
    pack_key(&pk, "data");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint64(&pk, values ? msg->codec : 0);
    msgpack_pack_uint64(&pk, values ? msg->n : 0);
    if (msg->op == PROTO_OP_UPDATE)
        pack_u64(&pk, "nrej", msg->nrej);
    if (encoded)
        pack_str(&pk, "spec", msg->spec);
    if (msg->nsegs > 0) {
        const int upd = msg->op == PROTO_OP_UPDATE;
        pack_key(&pk, "segs");
        msgpack_pack_array(&pk, msg->nsegs);
        for (uint32_t i = 0; i < msg->nsegs; i++) {
            const proto_seg *g = &msg->segs[i];
            msgpack_pack_array(&pk, upd ? 4 : 2);
            msgpack_pack_uint32(&pk, g->part);
            msgpack_pack_uint32(&pk, g->n);
            if (upd) {
                msgpack_pack_uint32(&pk, g->nrej);
                msgpack_pack_uint64(&pk, g->version);
            }
        }
    }
    if (msg->op == PROTO_OP_ERROR || msg->op == PROTO_OP_ACK) {
        pack_u64(&pk, "status", msg->status);
        pack_str(&pk, "text", msg->text);
    }
    if (msg->slowest != 0)
        pack_u64(&pk, "slow", msg->slowest);
    if (msg->op == PROTO_OP_PUSH && msg->has_weight) {
        pack_key(&pk, "wt");
        msgpack_pack_double(&pk, msg->weight);
    }
    if (msg->auth[0] != '\0')
        pack_str(&pk, "auth", msg->auth);
    if (msg->cid != 0)
        pack_u64(&pk, "cid", msg->cid);
    if (msg->op == PROTO_OP_REGISTER) {
        const proto_jobcfg *c = &msg->cfg;
        pack_key(&pk, "cfg");
        msgpack_pack_array(&pk, c->density_warmup > 0 ? 13 : 11);
        msgpack_pack_uint64(&pk, c->shard);
        msgpack_pack_uint64(&pk, c->nshards);
        msgpack_pack_uint64(&pk, c->workers);
        msgpack_pack_uint64(&pk, c->part_size);
        msgpack_pack_uint64(&pk, c->mode);
        msgpack_pack_uint64(&pk, c->agg);
        msgpack_pack_double(&pk, c->density);
        msgpack_pack_double(&pk, c->lr);
        msgpack_pack_uint64(&pk, c->lr_schedule);
        msgpack_pack_uint64(&pk, c->iterations);
        {
            size_t cl = strlen(c->compression);
            msgpack_pack_str(&pk, cl);
            msgpack_pack_str_body(&pk, c->compression, cl);
        }
        if (c->density_warmup > 0) {
            msgpack_pack_uint64(&pk, c->density_warmup);
            msgpack_pack_double(&pk, c->density_start);
        }
        pack_key(&pk, "tensors");
        msgpack_pack_array(&pk, msg->ntensors);
        for (uint32_t i = 0; i < msg->ntensors; i++) {
            size_t len = strnlen(msg->tensors[i].name, PROTO_NAME_MAX + 1);
            if (len > PROTO_NAME_MAX) {
                msgpack_sbuffer_destroy(&sb);
                return FLPS_EINVAL;
            }
            msgpack_pack_array(&pk, 2);
            msgpack_pack_str(&pk, len);
            msgpack_pack_str_body(&pk, msg->tensors[i].name, len);
            msgpack_pack_uint64(&pk, msg->tensors[i].numel);
        }
    }
    if (sb.data == NULL)
        return FLPS_ENOMEM;

    frames[0].data = sb.data;
    frames[0].len = sb.size;
    if (encoded) {
        for (uint32_t i = 0; i < msg->nenc; i++)
            frames[nf++] = msg->enc[i];
    } else if (values) {
        if (sparse) {
            frames[nf].data = msg->idx;
            frames[nf++].len = (size_t)msg->n * sizeof(uint32_t);
        }
        frames[nf].data = msg->val;
        frames[nf++].len = (size_t)msg->n * sizeof(float);
        if (msg->op == PROTO_OP_UPDATE) {
            frames[nf].data = msg->rej;
            frames[nf++].len = (size_t)msg->nrej * sizeof(uint32_t);
        }
    }
    *hdr = sb.data; /* the sbuffer's storage is malloc'd; caller frees */
    *hdrlen = sb.size;
    *nframes = nf;
    return FLPS_OK;
}

double proto_jobcfg_lr_at(const proto_jobcfg *cfg, uint64_t t)
{
    if (cfg->lr_schedule == PROTO_LR_COSINE && cfg->iterations > 0) {
        double x =
            t >= cfg->iterations ? 1.0 : (double)t / (double)cfg->iterations;
        return cfg->lr * 0.5 * (1.0 + cos(M_PI * x));
    }
    return cfg->lr;
}

/* ---- decoding ---- */

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

static int decode_cfg(const msgpack_object *o, proto_jobcfg *c)
{
    const msgpack_object *a;
    uint32_t mode, agg, sched;

    if (o->type != MSGPACK_OBJECT_ARRAY ||
        (o->via.array.size != 11 && o->via.array.size != 13))
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
    if (o->via.array.size == 13 &&
        (!obj_u64(&a[11], &c->density_warmup) ||
         !obj_f64(&a[12], &c->density_start) || c->density_warmup == 0 ||
         !(c->density_start > 0) || c->density_start > 1))
        return 0;
    c->lr_schedule = (uint8_t)sched;
    c->mode = (uint8_t)mode;
    c->agg = (uint8_t)agg;
    return 1;
}

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
            m->tensors[i].numel == 0 || m->tensors[i].numel > UINT32_MAX) {
            flps_free(m->tensors);
            m->tensors = NULL;
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "tensor %u is not a [name, numel] pair with "
                                   "0 < numel < 2^32",
                                   i);
        }
    }
    m->ntensors = n;
    return FLPS_OK;
}

/* The segs array: [part, n] (PUSH) or [part, n, nrej, version] (UPDATE)
 * per segment; the arity is checked against the op once it is known
 * (*arity: 2 or 4, the same for every entry). */
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
        if (!ok) {
            flps_free(m->segs);
            m->segs = NULL;
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "segment %u is not [part, n] or [part, n, "
                                   "nrej, version] like the others",
                                   i);
        }
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

static flps_err decode_header(const proto_frame *f, proto_msg *m, char *errbuf,
                              size_t errlen)
{
    msgpack_unpacked up;
    size_t off = 0;
    unsigned seen = 0, arity = 0;
    flps_err rc = FLPS_EPROTO;
    const msgpack_object *map;

    if (f->len > PROTO_HEADER_MAX || !mp_is_sane(f->data, f->len))
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "header is not one MessagePack object: malformed, a "
            "declared length beyond its %zu bytes, or over %u bytes",
            f->len, PROTO_HEADER_MAX);
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, f->data, f->len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != f->len) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "header is not one MessagePack object");
        goto out;
    }
    map = &up.data;
    if (map->type != MSGPACK_OBJECT_MAP) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "header is not a MessagePack map");
        goto out;
    }
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        const msgpack_object *v = &map->via.map.ptr[i].val;
        uint64_t x = 0;
        unsigned bit = 0;
        int ok = 1;

        if (key_is(k, "v")) {
            bit = F_V;
            ok = obj_u64(v, &x);
            if (ok && x != PROTO_VERSION) {
                rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                     "protocol version %llu is not supported "
                                     "(this build speaks %u)",
                                     (unsigned long long)x, PROTO_VERSION);
                goto out;
            }
        } else if (key_is(k, "op")) {
            bit = F_OP;
            ok = obj_u64(v, &x);
            if (ok && (x < 1 || x > PROTO_OP_MAX_)) {
                rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                     "unknown op %llu", (unsigned long long)x);
                goto out;
            }
            m->op = (uint8_t)x;
        } else if (key_is(k, "job")) {
            bit = F_JOB;
            ok = obj_str(v, m->job, sizeof(m->job));
        } else if (key_is(k, "rank")) {
            bit = F_RANK;
            ok = obj_u32(v, &m->rank);
        } else if (key_is(k, "part")) {
            bit = F_PART;
            ok = obj_u32(v, &m->part);
        } else if (key_is(k, "iter")) {
            bit = F_ITER;
            ok = obj_u64(v, &m->iter);
        } else if (key_is(k, "ver")) {
            bit = F_VER;
            ok = obj_u64(v, &m->version);
        } else if (key_is(k, "data")) {
            uint32_t codec;
            bit = F_DATA;
            ok = v->type == MSGPACK_OBJECT_ARRAY && v->via.array.size == 2 &&
                 obj_u32(&v->via.array.ptr[0], &codec) &&
                 obj_u32(&v->via.array.ptr[1], &m->n) &&
                 codec <= PROTO_CODEC_ENCODED;
            if (ok)
                m->codec = (uint8_t)codec;
        } else if (key_is(k, "nrej")) {
            bit = F_NREJ;
            ok = obj_u32(v, &m->nrej);
        } else if (key_is(k, "spec")) {
            bit = F_SPEC;
            ok = obj_str(v, m->spec, sizeof(m->spec)) && m->spec[0] != '\0';
        } else if (key_is(k, "status")) {
            bit = F_STATUS;
            ok = obj_u32(v, &m->status);
        } else if (key_is(k, "text")) {
            bit = F_TEXT;
            ok = obj_str(v, m->text, sizeof(m->text));
        } else if (key_is(k, "cfg")) {
            bit = F_CFG;
            ok = decode_cfg(v, &m->cfg);
        } else if (key_is(k, "segs")) {
            bit = F_SEGS;
            if (seen & F_SEGS) {
                ok = 0;
            } else {
                rc = decode_segs(v, m, &arity, errbuf, errlen);
                if (rc != FLPS_OK)
                    goto out;
            }
        } else if (key_is(k, "slow")) {
            bit = F_SLOW;
            ok = obj_u64(v, &m->slowest);
        } else if (key_is(k, "wt")) {
            bit = F_WT;
            ok = obj_f64(v, &m->weight) && m->weight >= 0 &&
                 m->weight <= PROTO_WEIGHT_MAX;
            m->has_weight = 1;
        } else if (key_is(k, "auth")) {
            bit = F_AUTH;
            ok = obj_str(v, m->auth, sizeof(m->auth));
        } else if (key_is(k, "cid")) {
            bit = F_CID;
            ok = obj_u64(v, &m->cid);
        } else if (key_is(k, "tensors")) {
            bit = F_TENSORS;
            if (seen & F_TENSORS) {
                ok = 0;
            } else {
                rc = decode_tensors(v, m, errbuf, errlen);
                if (rc != FLPS_OK)
                    goto out;
            }
        } else {
            continue; /* unknown keys are allowed within a version */
        }
        if (!ok || (seen & bit)) {
            char key[32] = "?";
            if (k->type == MSGPACK_OBJECT_STR && k->via.str.size < sizeof(key))
                snprintf(key, sizeof(key), "%.*s", (int)k->via.str.size,
                         k->via.str.ptr);
            rc = flps_errbuf_set(
                errbuf, errlen, FLPS_EPROTO, "header field '%s' is %s", key,
                ok ? "repeated" : "of the wrong type or range");
            goto out;
        }
        seen |= bit;
    }
    if ((seen & F_BASE) != F_BASE) {
        rc = flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "header lacks a required field (v, op, job, rank, part, "
            "iter, ver, data)");
        goto out;
    }
    if ((m->op == PROTO_OP_UPDATE && !(seen & F_NREJ)) ||
        ((m->op == PROTO_OP_ERROR || m->op == PROTO_OP_ACK) &&
         (seen & (F_STATUS | F_TEXT)) != (F_STATUS | F_TEXT)) ||
        (m->op == PROTO_OP_REGISTER &&
         (seen & (F_CFG | F_TENSORS)) != (F_CFG | F_TENSORS)) ||
        (m->codec == PROTO_CODEC_ENCODED && !(seen & F_SPEC))) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "%s header lacks its op-specific fields",
                             proto_op_name(m->op));
        goto out;
    }
    if ((seen & F_WT) && m->op != PROTO_OP_PUSH) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "only a PUSH carries a weight (wt)");
        goto out;
    }
    if ((seen & F_SEGS) &&
        ((m->op != PROTO_OP_PUSH && m->op != PROTO_OP_UPDATE) ||
         m->codec != PROTO_CODEC_SPARSE ||
         arity != (m->op == PROTO_OP_UPDATE ? 4u : 2u))) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "only a sparse PUSH ([part, n]) or UPDATE "
                             "([part, n, nrej, version]) carries segs");
        goto out;
    }
    rc = FLPS_OK;
out:
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

static int is_aligned4(const void *p)
{
    return ((uintptr_t)p & 3u) == 0;
}

/* Does f hold exactly n 4-byte elements (indices or floats), aligned so
 * the message can point into it? An empty frame may lie anywhere. */
static int frame_holds4(const proto_frame *f, uint32_t n)
{
    return f->len == (size_t)n * 4 && (n == 0 || is_aligned4(f->data));
}

/* Indices strictly ascending (within each segment), segments in strictly
 * ascending part order whose counts add up to n and nrej. */
static flps_err check_segs(const proto_msg *m, char *errbuf, size_t errlen)
{
    const uint32_t nsegs = m->nsegs > 0 ? m->nsegs : 1;
    uint64_t at = 0, rej = 0;

    for (uint32_t g = 0; g < nsegs; g++) {
        const uint64_t n = m->nsegs > 0 ? m->segs[g].n : m->n;
        const uint32_t *idx = m->idx + at;
        if (m->nsegs > 0 && g > 0 && m->segs[g].part <= m->segs[g - 1].part)
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "segment %u is for part %u, not after "
                                   "part %u",
                                   g, m->segs[g].part, m->segs[g - 1].part);
        if (n > (uint64_t)m->n - at)
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "segments hold more than the %u pairs "
                                   "of the message",
                                   m->n);
        for (uint32_t i = 1; i < n; i++) {
            if (idx[i] <= idx[i - 1])
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_EPROTO,
                    "indices are not strictly ascending at position %llu "
                    "(%u after %u)",
                    (unsigned long long)(at + i), idx[i], idx[i - 1]);
        }
        at += n;
        if (m->nsegs > 0)
            rej += m->segs[g].nrej;
    }
    if (at != m->n ||
        (m->nsegs > 0 && m->op == PROTO_OP_UPDATE && rej != m->nrej) ||
        (m->nsegs > 0 && m->op == PROTO_OP_PUSH && rej != 0))
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "the segments' counts do not add up to the "
                               "message's (%u pairs, %u rejected)",
                               m->n, m->nrej);
    return FLPS_OK;
}

void proto_msg_seg_view(const proto_msg *m, uint32_t i, size_t off_pairs,
                        size_t off_rej, proto_msg *out)
{
    const proto_seg *g = &m->segs[i];

    *out = *m;
    out->nsegs = 0;
    out->segs = NULL;
    out->tensors = NULL;
    out->ntensors = 0;
    out->part = g->part;
    out->n = g->n;
    out->idx = m->idx + off_pairs;
    out->val = m->val + off_pairs;
    out->nrej = g->nrej;
    out->rej = m->rej != NULL ? m->rej + off_rej : NULL;
    if (m->op == PROTO_OP_UPDATE)
        out->version = g->version;
}

flps_err proto_msg_decode(const proto_frame *frames, size_t nframes,
                          proto_msg *out, char *errbuf, size_t errlen)
{
    return proto_msg_decode_ex(frames, nframes, 0, out, errbuf, errlen);
}

flps_err proto_msg_decode_ex(const proto_frame *frames, size_t nframes,
                             unsigned flags, proto_msg *out, char *errbuf,
                             size_t errlen)
{
    proto_msg m;
    flps_err rc;
    size_t want, nf = 1;
    int values, sparse;

    memset(&m, 0, sizeof(m));
    if (nframes < 1 || frames == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "message has no header frame");
    rc = decode_header(&frames[0], &m, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    values = op_has_values(m.op);
    sparse = values && m.codec == PROTO_CODEC_SPARSE;
    if (!values && m.n != 0) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                             "%s carries no values but says n=%u",
                             proto_op_name(m.op), m.n);
        goto bad;
    }
    if (sparse && m.op != PROTO_OP_PUSH && m.op != PROTO_OP_UPDATE &&
        m.op != PROTO_OP_PULL_REPLY) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO, "%s cannot be sparse",
                             proto_op_name(m.op));
        goto bad;
    }
    if (values && m.codec == PROTO_CODEC_ENCODED) {
        /* The codec's own decoder (in the shard) checks the frames' sizes
         * and content against the spec and the part. */
        if (m.op != PROTO_OP_PUSH) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                 "%s cannot be codec-encoded",
                                 proto_op_name(m.op));
            goto bad;
        }
        if (nframes < 2 || nframes > 1 + PROTO_ENC_MAX_FRAMES) {
            rc =
                flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                "encoded PUSH has %zu frames; expected 2 to %d",
                                nframes, 1 + PROTO_ENC_MAX_FRAMES);
            goto bad;
        }
        m.nenc = (uint32_t)(nframes - 1);
        for (uint32_t i = 0; i < m.nenc; i++)
            m.enc[i] = frames[1 + i];
        *out = m;
        return FLPS_OK;
    }
    want = 1 + (values ? 1 : 0) + (sparse ? 1 : 0) +
           (m.op == PROTO_OP_UPDATE ? 1 : 0);
    if (nframes != want) {
        rc = flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO, "%s %s has %zu frames; expected %zu",
            proto_op_name(m.op), sparse ? "sparse" : "dense", nframes, want);
        goto bad;
    }
    if (values) {
        if (sparse) {
            const proto_frame *fi = &frames[nf++];
            if (!frame_holds4(fi, m.n)) {
                rc = flps_errbuf_set(
                    errbuf, errlen, FLPS_EPROTO,
                    "index frame has %zu bytes; expected %zu (n=%u)", fi->len,
                    (size_t)m.n * sizeof(uint32_t), m.n);
                goto bad;
            }
            m.idx = fi->data;
            rc = check_segs(&m, errbuf, errlen);
            if (rc != FLPS_OK)
                goto bad;
        }
        {
            const proto_frame *fv = &frames[nf++];
            const int unchecked =
                m.op == PROTO_OP_UPDATE && !sparse &&
                (flags & PROTO_DECODE_UPDATE_VALUES_UNCHECKED) != 0;
            if (!frame_holds4(fv, m.n)) {
                rc = flps_errbuf_set(
                    errbuf, errlen, FLPS_EPROTO,
                    "value frame has %zu bytes; expected %zu (n=%u)", fv->len,
                    (size_t)m.n * sizeof(float), m.n);
                goto bad;
            }
            m.val = fv->data;
            if (!unchecked) {
                const size_t bad_at = flps_first_nonfinite(m.val, m.n);
                if (bad_at < m.n) {
                    rc = flps_errbuf_set(errbuf, errlen, FLPS_ENONFINITE,
                                         "value %zu is not finite", bad_at);
                    goto bad;
                }
            }
        }
        if (m.op == PROTO_OP_UPDATE) {
            const proto_frame *fr = &frames[nf++];
            if (!frame_holds4(fr, m.nrej)) {
                rc = flps_errbuf_set(
                    errbuf, errlen, FLPS_EPROTO,
                    "rejected-index frame has %zu bytes; expected %zu", fr->len,
                    (size_t)m.nrej * sizeof(uint32_t));
                goto bad;
            }
            m.rej = fr->data;
        }
    }
    *out = m;
    return FLPS_OK;
bad:
    proto_msg_fini(&m);
    return rc;
}

void proto_msg_fini(proto_msg *msg)
{
    if (msg == NULL)
        return;
    flps_free(msg->tensors);
    msg->tensors = NULL;
    msg->ntensors = 0;
    flps_free(msg->segs);
    msg->segs = NULL;
    msg->nsegs = 0;
}
