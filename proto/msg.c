/* Wire messages: MessagePack header + raw little-endian frames. */
#include "proto/msg.h"

#include <math.h>
#include <msgpack.h>
#include <string.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/finite.h"
#include "proto/msg_header.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error                                                                         \
    "flps frames are little-endian and sent as-is; big-endian hosts are not supported"
#endif

const char *proto_op_name(uint8_t op)
{
    static const char *names[] = {
        "?",    "REGISTER",   "REGISTER_OK", "INIT", "PUSH",  "UPDATE",
        "PULL", "PULL_REPLY", "CHECKPOINT",  "ACK",  "ERROR", "PEER",
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
           op == PROTO_OP_UPDATE || op == PROTO_OP_PULL_REPLY ||
           op == PROTO_OP_PEER;
}

/* Check msg against what the wire can carry, and count the keys its
 * header map will have: the eight every message has, and each optional
 * one it writes. FLPS_EINVAL for a message that cannot be encoded. */
static flps_err encode_check(const proto_msg *msg, size_t *nkeys)
{
    size_t n = 8;
    const int values = op_has_values(msg->op);
    const int sparse = values && msg->codec == PROTO_CODEC_SPARSE;
    const int encoded = values && msg->codec == PROTO_CODEC_ENCODED;

    if (msg->op < 1 || msg->op > PROTO_OP_MAX_ ||
        strlen(msg->job) > PROTO_JOB_MAX)
        return FLPS_EINVAL;
    if (msg->wire_version != 0 && (msg->wire_version < PROTO_VERSION_MIN ||
                                   msg->wire_version > PROTO_VERSION))
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
        n++;
    }
    if (msg->op == PROTO_OP_UPDATE || encoded)
        n++;
    if (msg->op == PROTO_OP_ERROR || msg->op == PROTO_OP_ACK)
        n += 2;
    if (msg->op == PROTO_OP_REGISTER)
        n += 2;
    if (msg->slowest != 0)
        n++;
    if (msg->op == PROTO_OP_PUSH && msg->has_weight) {
        if (!isfinite(msg->weight) || msg->weight < 0 ||
            msg->weight > PROTO_WEIGHT_MAX)
            return FLPS_EINVAL;
        n++;
    }
    if (msg->auth[0] != '\0')
        n++;
    if (msg->cid != 0)
        n++;
    *nkeys = n;
    return FLPS_OK;
}

/* The version msg is written in (proto_msg.wire_version): an older one
 * only for a message without index frames. */
static uint32_t wire_version_of(const proto_msg *msg)
{
    const int idx_frames =
        msg->op == PROTO_OP_UPDATE ||
        (op_has_values(msg->op) && msg->codec == PROTO_CODEC_SPARSE);

    return msg->wire_version == 0 || idx_frames ? PROTO_VERSION
                                                : msg->wire_version;
}

/* The keys every message has: v, op, job, rank, part, iter, ver, data. */
static void pack_base(msgpack_packer *pk, const proto_msg *msg)
{
    const int values = op_has_values(msg->op);

    pack_u64(pk, "v", wire_version_of(msg));
    pack_u64(pk, "op", msg->op);
    pack_str(pk, "job", msg->job);
    pack_u64(pk, "rank", msg->rank);
    pack_u64(pk, "part", msg->part);
    pack_u64(pk, "iter", msg->iter);
    pack_u64(pk, "ver", msg->version);
    pack_key(pk, "data");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, values ? msg->codec : 0);
    msgpack_pack_uint64(pk, values ? msg->n : 0);
}

/* segs: [part, n] per segment of a PUSH, [part, n, nrej, version] of an
 * UPDATE. */
static void pack_segs(msgpack_packer *pk, const proto_msg *msg)
{
    const int upd = msg->op == PROTO_OP_UPDATE;

    pack_key(pk, "segs");
    msgpack_pack_array(pk, msg->nsegs);
    for (uint32_t i = 0; i < msg->nsegs; i++) {
        const proto_seg *g = &msg->segs[i];
        msgpack_pack_array(pk, upd ? 4 : 2);
        msgpack_pack_uint32(pk, g->part);
        msgpack_pack_uint32(pk, g->n);
        if (upd) {
            msgpack_pack_uint32(pk, g->nrej);
            msgpack_pack_uint64(pk, g->version);
        }
    }
}

/* The optional keys, in their wire order, each where msg has it: nrej,
 * spec, segs, status and text, slow, wt, auth, cid. */
static void pack_optional(msgpack_packer *pk, const proto_msg *msg)
{
    if (msg->op == PROTO_OP_UPDATE)
        pack_u64(pk, "nrej", msg->nrej);
    if (op_has_values(msg->op) && msg->codec == PROTO_CODEC_ENCODED)
        pack_str(pk, "spec", msg->spec);
    if (msg->nsegs > 0)
        pack_segs(pk, msg);
    if (msg->op == PROTO_OP_ERROR || msg->op == PROTO_OP_ACK) {
        pack_u64(pk, "status", msg->status);
        pack_str(pk, "text", msg->text);
    }
    if (msg->slowest != 0)
        pack_u64(pk, "slow", msg->slowest);
    if (msg->op == PROTO_OP_PUSH && msg->has_weight) {
        pack_key(pk, "wt");
        msgpack_pack_double(pk, msg->weight);
    }
    if (msg->auth[0] != '\0')
        pack_str(pk, "auth", msg->auth);
    if (msg->cid != 0)
        pack_u64(pk, "cid", msg->cid);
}

/* A REGISTER's cfg array: 11 fields, 13 with a density warm-up, 15 with
 * a server optimizer (the warm-up's two then 0 when there is none), 16
 * with a piece (the four before it then as they are). */
static void pack_cfg(msgpack_packer *pk, const proto_jobcfg *c)
{
    const size_t cl = strlen(c->compression);
    const int piece = c->piece > 0;
    const int sopt = c->server_opt != PROTO_SOPT_SGD || piece;

    pack_key(pk, "cfg");
    msgpack_pack_array(pk, piece                   ? 16
                           : sopt                  ? 15
                           : c->density_warmup > 0 ? 13
                                                   : 11);
    msgpack_pack_uint64(pk, c->shard);
    msgpack_pack_uint64(pk, c->nshards);
    msgpack_pack_uint64(pk, c->workers);
    msgpack_pack_uint64(pk, c->part_size);
    msgpack_pack_uint64(pk, c->mode);
    msgpack_pack_uint64(pk, c->agg);
    msgpack_pack_double(pk, c->density);
    msgpack_pack_double(pk, c->lr);
    msgpack_pack_uint64(pk, c->lr_schedule);
    msgpack_pack_uint64(pk, c->iterations);
    msgpack_pack_str(pk, cl);
    msgpack_pack_str_body(pk, c->compression, cl);
    if (c->density_warmup > 0 || sopt) {
        msgpack_pack_uint64(pk, c->density_warmup);
        msgpack_pack_double(pk, c->density_start);
    }
    if (sopt) {
        msgpack_pack_uint64(pk, c->server_opt);
        msgpack_pack_double(pk, c->server_beta);
    }
    if (piece)
        msgpack_pack_uint64(pk, c->piece);
}

/* A REGISTER's tensors: [name, numel] pairs. FLPS_EINVAL for a name
 * longer than PROTO_NAME_MAX (one without its terminator). */
static flps_err pack_tensors(msgpack_packer *pk, const proto_msg *msg)
{
    pack_key(pk, "tensors");
    msgpack_pack_array(pk, msg->ntensors);
    for (uint32_t i = 0; i < msg->ntensors; i++) {
        size_t len = strnlen(msg->tensors[i].name, PROTO_NAME_MAX + 1);
        if (len > PROTO_NAME_MAX)
            return FLPS_EINVAL;
        msgpack_pack_array(pk, 2);
        msgpack_pack_str(pk, len);
        msgpack_pack_str_body(pk, msg->tensors[i].name, len);
        msgpack_pack_uint64(pk, msg->tensors[i].numel);
    }
    return FLPS_OK;
}

/* ---- compact index frames (version 3) ----
 * An index list of a message is one run of strictly ascending indices per
 * segment (one segment when the message has no segs). On the wire, each
 * run is its indices' gaps as LEB128 varints (7 bits a byte, the low
 * ones first, the high bit set on every byte but the last): the first
 * index itself, then idx[i] - idx[i-1] - 1. At 1% density a gap is about
 * 100, one or two bytes instead of four. */

/* Which index list: a message's pairs (idx) or an UPDATE's rejected
 * ones (rej). */
typedef enum { IDX_PAIRS, IDX_REJ } idx_list;

static uint32_t run_count(const proto_msg *m, idx_list which, uint32_t g)
{
    if (m->nsegs == 0)
        return which == IDX_PAIRS ? m->n : m->nrej;
    return which == IDX_PAIRS ? m->segs[g].n : m->segs[g].nrej;
}

static size_t varint_len(uint32_t v)
{
    size_t n = 1;

    while (v >= 0x80u) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *varint_put(uint8_t *p, uint32_t v)
{
    while (v >= 0x80u) {
        *p++ = (uint8_t)(v | 0x80u);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* The bytes the compact frame of m's list takes; FLPS_EINVAL for indices
 * that are not strictly ascending within a run, or a list of entries
 * without data. */
static flps_err gaps_measure(const proto_msg *m, idx_list which, size_t *len)
{
    const uint32_t *idx = which == IDX_PAIRS ? m->idx : m->rej;
    const uint32_t nruns = m->nsegs > 0 ? m->nsegs : 1;
    size_t at = 0, bytes = 0;

    for (uint32_t g = 0; g < nruns; g++) {
        const uint32_t n = run_count(m, which, g);
        if (n > 0 && idx == NULL)
            return FLPS_EINVAL;
        for (uint32_t i = 0; i < n; i++, at++) {
            if (i > 0 && idx[at] <= idx[at - 1])
                return FLPS_EINVAL;
            bytes += varint_len(i == 0 ? idx[at] : idx[at] - idx[at - 1] - 1);
        }
    }
    *len = bytes;
    return FLPS_OK;
}

/* Write the compact frame of m's list at out (gaps_measure's bytes). */
static void gaps_write(const proto_msg *m, idx_list which, uint8_t *out)
{
    const uint32_t *idx = which == IDX_PAIRS ? m->idx : m->rej;
    const uint32_t nruns = m->nsegs > 0 ? m->nsegs : 1;
    size_t at = 0;

    for (uint32_t g = 0; g < nruns; g++) {
        const uint32_t n = run_count(m, which, g);
        for (uint32_t i = 0; i < n; i++, at++)
            out = varint_put(out, i == 0 ? idx[at] : idx[at] - idx[at - 1] - 1);
    }
}

/* Read the compact frame f of m's list into out (run_count entries per
 * run): every varint within the frame, at most 5 bytes, in its shortest
 * form, every index below 2^32, and the frame read to its last byte. */
static flps_err gaps_read(const proto_msg *m, idx_list which,
                          const proto_frame *f, uint32_t *out, char *errbuf,
                          size_t errlen)
{
    const char *what = which == IDX_PAIRS ? "index" : "rejected-index";
    const uint8_t *p = f->data;
    const uint32_t nruns = m->nsegs > 0 ? m->nsegs : 1;
    const size_t total = which == IDX_PAIRS ? m->n : m->nrej;
    size_t pos = 0, at = 0;

    for (uint32_t g = 0; g < nruns; g++) {
        const uint32_t n = run_count(m, which, g);
        uint64_t next = 0; /* the lowest index the next gap may give */
        if (n > total - at)
            return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                   "segments hold more than the %zu entries "
                                   "of the %s frame",
                                   total, what);
        for (uint32_t i = 0; i < n; i++, at++) {
            uint64_t v = 0;
            unsigned len = 0;
            uint8_t b;
            do {
                if (pos == f->len || len == 5)
                    return flps_errbuf_set(
                        errbuf, errlen, FLPS_EPROTO,
                        "%s frame: entry %zu is cut off or longer than 5 "
                        "bytes",
                        what, at);
                b = p[pos++];
                v |= (uint64_t)(b & 0x7fu) << (7 * len++);
            } while (b & 0x80u);
            if (len > 1 && b == 0)
                return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                       "%s frame: entry %zu is not in its "
                                       "shortest form",
                                       what, at);
            next += v;
            if (next > UINT32_MAX)
                return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                                       "%s frame: entry %zu of segment %u "
                                       "is past 2^32 - 1",
                                       what, at, g);
            out[at] = (uint32_t)next;
            next++;
        }
    }
    if (pos != f->len)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "%s frame has %zu bytes after its %zu entries",
                               what, f->len - pos, at);
    return FLPS_OK;
}

/* The frames after the header: an encoded push's own, else indices (when
 * sparse: at idx), values and rejected indices (an UPDATE: at rej), the
 * values pointing into msg. Returns how many frames there are in all,
 * the header's included. */
static size_t encode_frames(const proto_msg *msg, const uint8_t *idx,
                            size_t idxlen, const uint8_t *rej, size_t rejlen,
                            proto_frame frames[PROTO_MAX_FRAMES])
{
    size_t nf = 1;

    if (!op_has_values(msg->op))
        return nf;
    if (msg->codec == PROTO_CODEC_ENCODED) {
        for (uint32_t i = 0; i < msg->nenc; i++)
            frames[nf++] = msg->enc[i];
        return nf;
    }
    if (msg->codec == PROTO_CODEC_SPARSE) {
        frames[nf].data = idxlen > 0 ? idx : NULL;
        frames[nf++].len = idxlen;
    }
    frames[nf].data = msg->val;
    frames[nf++].len = (size_t)msg->n * sizeof(float);
    if (msg->op == PROTO_OP_UPDATE) {
        frames[nf].data = rejlen > 0 ? rej : NULL;
        frames[nf++].len = rejlen;
    }
    return nf;
}

/* The header of msg into a new buffer (malloc'd: the caller frees it with
 * free()) of *len bytes. */
static flps_err encode_header(const proto_msg *msg, size_t nkeys, char **out,
                              size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, nkeys);
    pack_base(&pk, msg);
    pack_optional(&pk, msg);
    if (msg->op == PROTO_OP_REGISTER) {
        flps_err rc;
        pack_cfg(&pk, &msg->cfg);
        rc = pack_tensors(&pk, msg);
        if (rc != FLPS_OK) {
            msgpack_sbuffer_destroy(&sb);
            return rc;
        }
    }
    if (sb.data == NULL)
        return FLPS_ENOMEM;
    *out = sb.data; /* the sbuffer's storage is malloc'd */
    *len = sb.size;
    return FLPS_OK;
}

flps_err proto_msg_encode(const proto_msg *msg, void **hdr, size_t *hdrlen,
                          proto_frame frames[PROTO_MAX_FRAMES], size_t *nframes)
{
    const int values = op_has_values(msg->op);
    size_t nkeys = 0, hlen = 0, idxlen = 0, rejlen = 0;
    char *h = NULL;
    flps_err rc = encode_check(msg, &nkeys);

    if (rc == FLPS_OK && values && msg->codec == PROTO_CODEC_SPARSE)
        rc = gaps_measure(msg, IDX_PAIRS, &idxlen);
    if (rc == FLPS_OK && msg->op == PROTO_OP_UPDATE)
        rc = gaps_measure(msg, IDX_REJ, &rejlen);
    if (rc == FLPS_OK)
        rc = encode_header(msg, nkeys, &h, &hlen);
    if (rc != FLPS_OK)
        return rc;
    if (idxlen + rejlen > 0) {
        /* The index frames after the header, in its buffer: one buffer
         * for what the encoder makes, as before. */
        char *grown = realloc(h, hlen + idxlen + rejlen);
        if (grown == NULL) {
            free(h);
            return FLPS_ENOMEM;
        }
        h = grown;
        if (idxlen > 0)
            gaps_write(msg, IDX_PAIRS, (uint8_t *)h + hlen);
        if (rejlen > 0)
            gaps_write(msg, IDX_REJ, (uint8_t *)h + hlen + idxlen);
    }
    frames[0].data = h;
    frames[0].len = hlen;
    *nframes =
        encode_frames(msg, (const uint8_t *)h + hlen, idxlen,
                      (const uint8_t *)h + hlen + idxlen, rejlen, frames);
    *hdr = h;
    *hdrlen = hlen + idxlen + rejlen;
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

/* ---- decoding: the frames (the header: proto/msg_header.c) ---- */

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
 * ascending part order whose counts add up to n and nrej. m->idx is
 * indexed, never offset: a message of no pairs may have no index data at
 * all (NULL), and NULL + 0 is undefined. */
static flps_err check_segs(const proto_msg *m, char *errbuf, size_t errlen)
{
    const uint32_t nsegs = m->nsegs > 0 ? m->nsegs : 1;
    const uint32_t *idx = m->idx;
    uint64_t at = 0, rej = 0;

    for (uint32_t g = 0; g < nsegs; g++) {
        const uint64_t n = m->nsegs > 0 ? m->segs[g].n : m->n;
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
        for (uint64_t i = at + 1; i < at + n; i++) {
            if (idx[i] <= idx[i - 1])
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_EPROTO,
                    "indices are not strictly ascending at position %llu "
                    "(%u after %u)",
                    (unsigned long long)i, idx[i], idx[i - 1]);
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
    out->expanded = NULL;
    out->part = g->part;
    out->n = g->n;
    /* A message of no pairs may have NULL frames (NULL + 0 is undefined). */
    out->idx = m->idx != NULL ? m->idx + off_pairs : NULL;
    out->val = m->val != NULL ? m->val + off_pairs : NULL;
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

/* Whether m's op may carry what its header says: values only where the
 * op has them, sparse ones only in a PUSH, UPDATE or PULL_REPLY. */
static flps_err check_op_values(const proto_msg *m, char *errbuf, size_t errlen)
{
    const int values = op_has_values(m->op);

    if (!values && m->n != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "%s carries no values but says n=%u",
                               proto_op_name(m->op), m->n);
    if (values && m->codec == PROTO_CODEC_SPARSE && m->op != PROTO_OP_PUSH &&
        m->op != PROTO_OP_UPDATE && m->op != PROTO_OP_PULL_REPLY)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "%s cannot be sparse", proto_op_name(m->op));
    return FLPS_OK;
}

/* A codec-encoded PUSH: its frames after the header are the codec's,
 * whose own decoder (in the shard) checks their sizes and content against
 * the spec and the part. */
static flps_err take_encoded(proto_msg *m, const proto_frame *frames,
                             size_t nframes, char *errbuf, size_t errlen)
{
    if (m->op != PROTO_OP_PUSH)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "%s cannot be codec-encoded",
                               proto_op_name(m->op));
    if (nframes < 2 || nframes > 1 + PROTO_ENC_MAX_FRAMES)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "encoded PUSH has %zu frames; expected 2 to %d",
                               nframes, 1 + PROTO_ENC_MAX_FRAMES);
    m->nenc = (uint32_t)(nframes - 1);
    for (uint32_t i = 0; i < m->nenc; i++)
        m->enc[i] = frames[1 + i];
    return FLPS_OK;
}

/* Version 3: the compact index frames of m (fi when sparse, fr of an
 * UPDATE) expanded into m->expanded, idx first. Every entry takes a byte
 * at least: counts above the frames' bytes are refused before anything
 * is allocated. */
static flps_err expand_indices(proto_msg *m, const proto_frame *fi,
                               const proto_frame *fr, char *errbuf,
                               size_t errlen)
{
    const uint64_t n = fi != NULL ? m->n : 0, nrej = fr != NULL ? m->nrej : 0;
    flps_err rc = FLPS_OK;

    if (fi != NULL && fi->len < n)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "index frame has %zu bytes; %u indices take "
                               "at least as many",
                               fi->len, m->n);
    if (fr != NULL && fr->len < nrej)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "rejected-index frame has %zu bytes; %u "
                               "indices take at least as many",
                               fr->len, m->nrej);
    if (n + nrej == 0)
        return FLPS_OK;
    m->expanded = flps_malloc((size_t)(n + nrej) * sizeof(uint32_t));
    if (m->expanded == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM,
                               "out of memory for %llu indices",
                               (unsigned long long)(n + nrej));
    if (fi != NULL) {
        rc = gaps_read(m, IDX_PAIRS, fi, m->expanded, errbuf, errlen);
        m->idx = m->expanded;
    }
    if (rc == FLPS_OK && fr != NULL) {
        rc = gaps_read(m, IDX_REJ, fr, m->expanded + n, errbuf, errlen);
        m->rej = m->expanded + n;
    }
    return rc;
}

/* Version 2: a sparse message's index frame, n u32 in place. */
static flps_err take_indices(proto_msg *m, const proto_frame *fi, char *errbuf,
                             size_t errlen)
{
    if (!frame_holds4(fi, m->n))
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "index frame has %zu bytes; expected %zu (n=%u)",
                               fi->len, (size_t)m->n * sizeof(uint32_t), m->n);
    m->idx = fi->data;
    return FLPS_OK;
}

/* The value frame: n finite floats, but for a dense UPDATE decoded with
 * PROTO_DECODE_UPDATE_VALUES_UNCHECKED. */
static flps_err take_values(proto_msg *m, const proto_frame *fv, unsigned flags,
                            char *errbuf, size_t errlen)
{
    const int unchecked = m->op == PROTO_OP_UPDATE &&
                          m->codec != PROTO_CODEC_SPARSE &&
                          (flags & PROTO_DECODE_UPDATE_VALUES_UNCHECKED) != 0;
    size_t bad_at;

    if (!frame_holds4(fv, m->n))
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "value frame has %zu bytes; expected %zu (n=%u)",
                               fv->len, (size_t)m->n * sizeof(float), m->n);
    m->val = fv->data;
    if (unchecked)
        return FLPS_OK;
    bad_at = flps_first_nonfinite(m->val, m->n);
    if (bad_at < m->n)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENONFINITE,
                               "value %zu is not finite", bad_at);
    return FLPS_OK;
}

/* Version 2: an UPDATE's rejected-index frame, nrej u32 in place. */
static flps_err take_rejected(proto_msg *m, const proto_frame *fr, char *errbuf,
                              size_t errlen)
{
    if (!frame_holds4(fr, m->nrej))
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO,
            "rejected-index frame has %zu bytes; expected %zu", fr->len,
            (size_t)m->nrej * sizeof(uint32_t));
    m->rej = fr->data;
    return FLPS_OK;
}

/* An UPDATE's rejected indices strictly ascending within each segment
 * (rej indexed, never offset, as idx in check_segs; the counts are
 * checked there). A compact frame (version 3) cannot say otherwise; an
 * older one can. */
static flps_err check_rejected(const proto_msg *m, char *errbuf, size_t errlen)
{
    const uint32_t nsegs = m->nsegs > 0 ? m->nsegs : 1;
    uint64_t at = 0;

    for (uint32_t g = 0; g < nsegs; g++) {
        const uint64_t n = m->nsegs > 0 ? m->segs[g].nrej : m->nrej;
        for (uint64_t i = at + 1; i < at + n && i < m->nrej; i++)
            if (m->rej[i] <= m->rej[i - 1])
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_EPROTO,
                    "rejected indices are not strictly ascending at "
                    "position %llu (%u after %u)",
                    (unsigned long long)i, m->rej[i], m->rej[i - 1]);
        at += n;
    }
    return FLPS_OK;
}

/* The frames after the header of a message that is not codec-encoded:
 * as many as its op and codec make (indices when sparse, values, an
 * UPDATE's rejected indices), each of the size the header says; index
 * frames as the message's version lays them out. */
static flps_err take_frames(proto_msg *m, const proto_frame *frames,
                            size_t nframes, unsigned flags, char *errbuf,
                            size_t errlen)
{
    const int values = op_has_values(m->op);
    const int sparse = values && m->codec == PROTO_CODEC_SPARSE;
    const int update = m->op == PROTO_OP_UPDATE;
    const size_t want =
        1 + (values ? 1 : 0) + (sparse ? 1 : 0) + (update ? 1 : 0);
    const proto_frame *fi = sparse ? &frames[1] : NULL;
    const proto_frame *fv = &frames[sparse ? 2 : 1];
    const proto_frame *fr = update ? &frames[want - 1] : NULL;
    flps_err rc = FLPS_OK;

    if (nframes != want)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_EPROTO, "%s %s has %zu frames; expected %zu",
            proto_op_name(m->op), sparse ? "sparse" : "dense", nframes, want);
    if (!values)
        return FLPS_OK;
    if (m->wire_version >= 3)
        rc = expand_indices(m, fi, fr, errbuf, errlen);
    else if (sparse)
        rc = take_indices(m, fi, errbuf, errlen);
    if (rc == FLPS_OK && sparse)
        rc = check_segs(m, errbuf, errlen);
    if (rc == FLPS_OK)
        rc = take_values(m, fv, flags, errbuf, errlen);
    if (rc == FLPS_OK && update && m->wire_version < 3)
        rc = take_rejected(m, fr, errbuf, errlen);
    if (rc == FLPS_OK && update)
        rc = check_rejected(m, errbuf, errlen);
    return rc;
}

flps_err proto_msg_decode_ex(const proto_frame *frames, size_t nframes,
                             unsigned flags, proto_msg *out, char *errbuf,
                             size_t errlen)
{
    proto_msg m;
    flps_err rc;

    memset(&m, 0, sizeof(m));
    if (nframes < 1 || frames == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_EPROTO,
                               "message has no header frame");
    rc = proto_msg_header_decode(&frames[0], &m, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    rc = check_op_values(&m, errbuf, errlen);
    if (rc == FLPS_OK && op_has_values(m.op) && m.codec == PROTO_CODEC_ENCODED)
        rc = take_encoded(&m, frames, nframes, errbuf, errlen);
    else if (rc == FLPS_OK)
        rc = take_frames(&m, frames, nframes, flags, errbuf, errlen);
    if (rc != FLPS_OK) {
        proto_msg_fini(&m);
        return rc;
    }
    *out = m;
    return FLPS_OK;
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
    flps_free(msg->expanded);
    msg->expanded = NULL;
}

uint32_t *proto_msg_take_expanded(proto_msg *m)
{
    uint32_t *e = m->expanded;

    m->expanded = NULL;
    return e;
}
