/* Tests for proto/msg.c: round trips of every op, every validation rule,
 * and decoding of random garbage. */
#include "proto/msg.h"

#include <criterion/criterion.h>
#include <math.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "tests/support/msg_v2.h"

#define ERRLEN 512

/* ---- helpers ---- */

/* Encode msg, decode the frames into *out; both must succeed. */
static void round_trip(const proto_msg *msg, proto_msg *out, size_t want_frames)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    char err[ERRLEN] = "";

    cr_assert_eq(proto_msg_encode(msg, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(nf, want_frames, "%s encodes to %zu frames, expected %zu",
                 proto_op_name(msg->op), nf, want_frames);
    cr_assert_eq(f[0].data, hdr);
    {
        /* The header, then the compact index frames, in hdr. */
        size_t in_hdr = f[0].len;
        for (size_t i = 1; i < nf; i++)
            if (f[i].len > 0 && (const char *)f[i].data >= (char *)hdr &&
                (const char *)f[i].data < (char *)hdr + hlen)
                in_hdr += f[i].len;
        cr_assert_eq(in_hdr, hlen);
    }
    memset(out, 0, sizeof(*out));
    cr_assert_eq(proto_msg_decode(f, nf, out, err, sizeof(err)), FLPS_OK,
                 "decode of %s failed: %s", proto_op_name(msg->op), err);
    free(hdr);
}

static void assert_common_equal(const proto_msg *a, const proto_msg *b)
{
    cr_assert_eq(a->op, b->op);
    cr_assert_str_eq(a->job, b->job);
    cr_assert_eq(a->rank, b->rank);
    cr_assert_eq(a->part, b->part);
    cr_assert_eq(a->iter, b->iter);
    cr_assert_eq(a->version, b->version);
}

/* A hand-made header, for the messages proto_msg_encode refuses to make. */
typedef struct hdr_spec {
    uint64_t v, op, rank, part, iter, ver, codec, n, nrej, status;
    const char *job;
    const char *text;
    uint64_t numel0;        /* REGISTER: numel of the single tensor */
    uint64_t lr_schedule;   /* REGISTER: cfg's schedule */
    const char *omit;       /* leave this key out */
    const char *dup;        /* write this key twice */
    const char *wrong_type; /* write this key's value as an array */
    int not_a_map;          /* write an array instead of the map */
    int trailing;           /* one byte after the map */
} hdr_spec;

static hdr_spec spec_for(uint64_t op)
{
    hdr_spec s;

    memset(&s, 0, sizeof(s));
    s.v = PROTO_VERSION;
    s.op = op;
    s.job = "job";
    s.text = "";
    s.rank = 1;
    s.part = 2;
    s.iter = 3;
    s.ver = 4;
    s.numel0 = 10;
    return s;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* Pack the "cfg" value exactly as proto_msg_encode writes it (so the
 * hand-made headers follow the config's format as it grows): shard 0 of 1,
 * 2 workers, part_size 4, gtopk, density 0.5, lr 0.1, 100 iterations. */
static void pack_real_cfg(msgpack_packer *pk, uint64_t lr_schedule)
{
    proto_msg m;
    proto_tensor t;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen, off = 0;
    void *hdr = NULL;
    msgpack_unpacked up;
    int found = 0;

    memset(&m, 0, sizeof(m));
    memset(&t, 0, sizeof(t));
    strcpy(t.name, "w");
    t.numel = 10;
    m.op = PROTO_OP_REGISTER;
    strcpy(m.job, "job");
    m.cfg.nshards = 1;
    m.cfg.workers = 2;
    m.cfg.part_size = 4;
    m.cfg.agg = PROTO_AGG_GTOPK;
    m.cfg.density = 0.5;
    m.cfg.lr = 0.1;
    m.cfg.lr_schedule = (uint8_t)lr_schedule;
    m.cfg.iterations = 100;
    m.ntensors = 1;
    m.tensors = &t;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    msgpack_unpacked_init(&up);
    cr_assert_eq(msgpack_unpack_next(&up, hdr, hlen, &off),
                 MSGPACK_UNPACK_SUCCESS);
    for (uint32_t i = 0; i < up.data.via.map.size; i++) {
        const msgpack_object_kv *kv = &up.data.via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 3 &&
            memcmp(kv->key.via.str.ptr, "cfg", 3) == 0) {
            msgpack_pack_object(pk, kv->val);
            found = 1;
        }
    }
    cr_assert(found, "the encoder wrote no cfg");
    msgpack_unpacked_destroy(&up);
    free(hdr);
}

static void put_value(msgpack_packer *pk, const char *key, const hdr_spec *s)
{
    if (s->wrong_type != NULL && strcmp(key, s->wrong_type) == 0) {
        /* Every field's type differs from a one-element array of nil,
         * including the array-valued ones (they want other sizes). */
        msgpack_pack_array(pk, 1);
        msgpack_pack_nil(pk);
        return;
    }
    if (strcmp(key, "v") == 0) {
        msgpack_pack_uint64(pk, s->v);
    } else if (strcmp(key, "op") == 0) {
        msgpack_pack_uint64(pk, s->op);
    } else if (strcmp(key, "job") == 0) {
        pk_str(pk, s->job);
    } else if (strcmp(key, "rank") == 0) {
        msgpack_pack_uint64(pk, s->rank);
    } else if (strcmp(key, "part") == 0) {
        msgpack_pack_uint64(pk, s->part);
    } else if (strcmp(key, "iter") == 0) {
        msgpack_pack_uint64(pk, s->iter);
    } else if (strcmp(key, "ver") == 0) {
        msgpack_pack_uint64(pk, s->ver);
    } else if (strcmp(key, "data") == 0) {
        msgpack_pack_array(pk, 2);
        msgpack_pack_uint64(pk, s->codec);
        msgpack_pack_uint64(pk, s->n);
    } else if (strcmp(key, "nrej") == 0) {
        msgpack_pack_uint64(pk, s->nrej);
    } else if (strcmp(key, "status") == 0) {
        msgpack_pack_uint64(pk, s->status);
    } else if (strcmp(key, "text") == 0) {
        pk_str(pk, s->text);
    } else if (strcmp(key, "cfg") == 0) {
        pack_real_cfg(pk, s->lr_schedule);
    } else if (strcmp(key, "tensors") == 0) {
        msgpack_pack_array(pk, 1);
        msgpack_pack_array(pk, 2);
        pk_str(pk, "w");
        msgpack_pack_uint64(pk, s->numel0);
    }
}

/* Build the header frame described by s; caller frees *out with free(). */
static size_t build_hdr(const hdr_spec *s, char **out)
{
    const char *keys[20];
    size_t nk = 0, nout = 0;
    const char *base[] = {"v",    "op",   "job", "rank",
                          "part", "iter", "ver", "data"};
    const char *all[20];
    msgpack_sbuffer sb;
    msgpack_packer pk;

    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        keys[nk++] = base[i];
    if (s->op == PROTO_OP_UPDATE)
        keys[nk++] = "nrej";
    if (s->op == PROTO_OP_ERROR || s->op == PROTO_OP_ACK) {
        keys[nk++] = "status";
        keys[nk++] = "text";
    }
    if (s->op == PROTO_OP_REGISTER) {
        keys[nk++] = "cfg";
        keys[nk++] = "tensors";
    }
    for (size_t i = 0; i < nk; i++) {
        if (s->omit != NULL && strcmp(keys[i], s->omit) == 0)
            continue;
        all[nout++] = keys[i];
        if (s->dup != NULL && strcmp(keys[i], s->dup) == 0)
            all[nout++] = keys[i];
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (s->not_a_map)
        msgpack_pack_array(&pk, nout * 2);
    else
        msgpack_pack_map(&pk, nout);
    for (size_t i = 0; i < nout; i++) {
        pk_str(&pk, all[i]);
        put_value(&pk, all[i], s);
    }
    if (s->trailing)
        msgpack_pack_nil(&pk);
    *out = sb.data;
    return sb.size;
}

static const uint32_t idx3[3] = {1, 5, 9};
static const float val3[3] = {0.5f, -1.25f, 3.0f};

/* Decode frames that must be refused with want: *out untouched and the
 * message contains needle. */
static void expect_refused(const proto_frame *f, size_t nf, flps_err want,
                           const char *needle)
{
    proto_msg out, sentinel;
    char err[ERRLEN] = "";
    flps_err rc;

    memset(&out, 0xA5, sizeof(out));
    memcpy(&sentinel, &out, sizeof(out));
    rc = proto_msg_decode(f, nf, &out, err, sizeof(err));
    cr_assert_eq(rc, want, "got %s (%s), expected %s", flps_errname(rc), err,
                 flps_errname(want));
    cr_assert_eq(memcmp(&out, &sentinel, sizeof(out)), 0,
                 "a refused message must leave *out untouched");
    cr_assert_neq(strstr(err, needle), NULL, "reason lacks \"%s\": %s", needle,
                  err);
}

/* Build the header for s, followed by payload frames, and expect refusal. */
static void expect_hdr_refused(const hdr_spec *s, const proto_frame *payload,
                               size_t npayload, flps_err want,
                               const char *needle)
{
    proto_frame f[PROTO_MAX_FRAMES + 1];
    char *hdr = NULL;

    f[0].len = build_hdr(s, &hdr);
    f[0].data = hdr;
    for (size_t i = 0; i < npayload; i++)
        f[1 + i] = payload[i];
    expect_refused(f, 1 + npayload, want, needle);
    free(hdr);
}

/* Encode a valid sparse PUSH of idx3/val3; frames point at idx/val. */
static void *encode_sparse_push(const uint32_t *idx, const float *val,
                                uint32_t n, proto_frame f[PROTO_MAX_FRAMES],
                                size_t *nf)
{
    proto_msg m;
    void *hdr = NULL;
    size_t hlen;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PUSH;
    strcpy(m.job, "job");
    m.rank = 1;
    m.part = 2;
    m.iter = 3;
    m.codec = PROTO_CODEC_SPARSE;
    m.n = n;
    m.idx = idx;
    m.val = val;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, nf), FLPS_OK);
    return hdr;
}

/* *m: a sparse op message of job "job" with n pairs at idx and val and,
 * for an UPDATE, nrej rejected indices at rej. */
static void sparse_of(proto_msg *m, uint8_t op, const uint32_t *idx,
                      const float *val, uint32_t n, const uint32_t *rej,
                      uint32_t nrej)
{
    *m = (proto_msg){.op = op, .codec = PROTO_CODEC_SPARSE, .n = n};
    strcpy(m->job, "job");
    m->idx = idx;
    m->val = val;
    m->nrej = nrej;
    m->rej = rej;
}

/* A sparse UPDATE of idx3/val3 with nrej rejected indices at rej,
 * encoded into f; returns the header buffer (caller frees). */
static void *encode_update3(const uint32_t *rej, uint32_t nrej,
                            proto_frame f[PROTO_MAX_FRAMES], size_t *nf)
{
    proto_msg m;
    void *hdr = NULL;
    size_t hlen = 0;

    sparse_of(&m, PROTO_OP_UPDATE, idx3, val3, 3, rej, nrej);
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, nf), FLPS_OK);
    cr_assert_eq(*nf, 4);
    return hdr;
}

/* msg_frames_as_version2, which must find the encoder's version 3. */
static void as_version2(proto_frame *f, size_t nf, int sparse, int update,
                        const uint32_t *idx, uint32_t n, const uint32_t *rej,
                        uint32_t nrej)
{
    cr_assert(msg_frames_as_version2(f, nf, sparse, update, idx, n, rej, nrej),
              "the header does not start with v = 3");
}

/* Encode a valid sparse PUSH of n pairs, then make it a version 2 one
 * carrying idx as they are (ascending or not). */
static void *encode_v2_sparse_push(const uint32_t *idx, const float *val,
                                   uint32_t n, proto_frame f[PROTO_MAX_FRAMES],
                                   size_t *nf)
{
    static const uint32_t up[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    void *hdr;

    cr_assert_leq(n, 8);
    hdr = encode_sparse_push(up, val, n, f, nf);
    as_version2(f, *nf, 1, 0, idx, n, NULL, 0);
    return hdr;
}

/* ---- round trips ---- */

Test(msg, register_round_trips_with_its_config_and_tensors)
{
    proto_tensor t[3];
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    memset(t, 0, sizeof(t));
    strcpy(t[0].name, "fc1.weight");
    t[0].numel = 784u * 256u;
    strcpy(t[1].name, "fc1.bias");
    t[1].numel = 256;
    memset(t[2].name, 'n', PROTO_NAME_MAX); /* the longest name */
    t[2].numel = UINT32_MAX;
    m.op = PROTO_OP_REGISTER;
    strcpy(m.job, "mnist-mlp");
    m.rank = 3;
    m.part = 0;
    m.iter = 0;
    m.version = 0;
    m.cfg.shard = 1;
    m.cfg.nshards = 4;
    m.cfg.workers = 8;
    m.cfg.part_size = 4096;
    m.cfg.mode = PROTO_MODE_ASYNC;
    m.cfg.agg = PROTO_AGG_GTOPK;
    m.cfg.density = 0.01;
    m.cfg.lr = 0.1;
    m.cfg.lr_schedule = PROTO_LR_COSINE;
    m.cfg.iterations = 600;
    m.ntensors = 3;
    m.tensors = t;

    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.cfg.shard, 1);
    cr_assert_eq(d.cfg.nshards, 4);
    cr_assert_eq(d.cfg.workers, 8);
    cr_assert_eq(d.cfg.part_size, 4096);
    cr_assert_eq(d.cfg.mode, PROTO_MODE_ASYNC);
    cr_assert_eq(d.cfg.agg, PROTO_AGG_GTOPK);
    cr_assert_eq(d.cfg.density, 0.01, "doubles travel exactly");
    cr_assert_eq(d.cfg.lr, 0.1);
    cr_assert_eq(d.cfg.lr_schedule, PROTO_LR_COSINE);
    cr_assert_eq(d.cfg.iterations, 600);
    cr_assert_eq(d.ntensors, 3);
    cr_assert_neq(d.tensors, t, "the decoded list is the message's own");
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(d.tensors[i].name, t[i].name);
        cr_assert_eq(d.tensors[i].numel, t[i].numel);
    }
    cr_assert_eq(d.n, 0);
    cr_assert_null(d.idx);
    cr_assert_null(d.val);
    proto_msg_fini(&d);
    cr_assert_null(d.tensors);
    cr_assert_eq(d.ntensors, 0);
}

static void register_of(proto_msg *m, proto_tensor *t)
{
    memset(m, 0, sizeof(*m));
    memset(t, 0, sizeof(*t));
    strcpy(t->name, "w");
    t->numel = 100;
    m->op = PROTO_OP_REGISTER;
    strcpy(m->job, "warm");
    m->cfg.nshards = 1;
    m->cfg.workers = 2;
    m->cfg.part_size = 100;
    m->cfg.agg = PROTO_AGG_GTOPK;
    m->cfg.density = 0.001;
    m->cfg.lr = 0.1;
    m->cfg.iterations = 1500;
    m->ntensors = 1;
    m->tensors = t;
}

Test(msg, register_carries_the_density_warm_up)
{
    proto_tensor t;
    proto_msg m, d;

    register_of(&m, &t);
    m.cfg.density_warmup = 300;
    m.cfg.density_start = 0.25;
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.density_warmup, 300);
    cr_assert_eq(d.cfg.density_start, 0.25);
    cr_assert_eq(d.cfg.density, 0.001);
    proto_msg_fini(&d);

    /* Without a warm-up the config is the one older builds send. */
    register_of(&m, &t);
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.density_warmup, 0);
    cr_assert_eq(d.cfg.density_start, 0);
    proto_msg_fini(&d);
}

Test(msg, register_refuses_a_warm_up_without_a_valid_start)
{
    const double bad[] = {0, -0.5, 1.5};
    proto_tensor t;

    for (size_t i = 0; i < 3; i++) {
        proto_msg m, d;
        proto_frame f[PROTO_MAX_FRAMES];
        size_t nf = 0, hlen = 0;
        void *hdr = NULL;
        char err[ERRLEN] = "";

        register_of(&m, &t);
        m.cfg.density_warmup = 10;
        m.cfg.density_start = bad[i];
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
        memset(&d, 0, sizeof(d));
        cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_EPROTO,
                     "start %g", bad[i]);
        free(hdr);
    }
}

Test(msg, register_carries_the_server_optimizer_with_or_without_a_warm_up)
{
    proto_tensor t;
    proto_msg m, d;

    register_of(&m, &t);
    m.cfg.agg = PROTO_AGG_TOPK;
    m.cfg.server_opt = PROTO_SOPT_MOMENTUM;
    m.cfg.server_beta = 0.9;
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.server_opt, PROTO_SOPT_MOMENTUM);
    cr_assert_eq(d.cfg.server_beta, 0.9);
    cr_assert_eq(d.cfg.density_warmup, 0, "no warm-up came with it");
    cr_assert_eq(d.cfg.density_start, 0);
    proto_msg_fini(&d);

    register_of(&m, &t);
    m.cfg.agg = PROTO_AGG_TOPK;
    m.cfg.server_opt = PROTO_SOPT_ADAM;
    m.cfg.density_warmup = 30;
    m.cfg.density_start = 0.5;
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.server_opt, PROTO_SOPT_ADAM);
    cr_assert_eq(d.cfg.server_beta, 0);
    cr_assert_eq(d.cfg.density_warmup, 30);
    cr_assert_eq(d.cfg.density_start, 0.5);
    proto_msg_fini(&d);

    /* sgd is the config older builds send, and reads as sgd. */
    register_of(&m, &t);
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.server_opt, PROTO_SOPT_SGD);
    cr_assert_eq(d.cfg.server_beta, 0);
    proto_msg_fini(&d);
}

Test(msg, register_carries_the_piece_of_the_even_map)
{
    proto_tensor t;
    proto_msg m, d;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    char err[ERRLEN] = "";

    register_of(&m, &t);
    m.cfg.piece = 8192;
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.piece, 8192);
    cr_assert_eq(d.cfg.server_opt, PROTO_SOPT_SGD, "sgd travels with it");
    cr_assert_eq(d.cfg.density_warmup, 0);
    proto_msg_fini(&d);

    /* With a warm-up and a server optimizer beside it. */
    register_of(&m, &t);
    m.cfg.piece = 4096;
    m.cfg.server_opt = PROTO_SOPT_MOMENTUM;
    m.cfg.server_beta = 0.5;
    m.cfg.density_warmup = 20;
    m.cfg.density_start = 0.25;
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.piece, 4096);
    cr_assert_eq(d.cfg.server_opt, PROTO_SOPT_MOMENTUM);
    cr_assert_eq(d.cfg.server_beta, 0.5);
    cr_assert_eq(d.cfg.density_warmup, 20);
    cr_assert_eq(d.cfg.density_start, 0.25);
    proto_msg_fini(&d);

    /* None is the config older builds send, and reads as none. */
    register_of(&m, &t);
    round_trip(&m, &d, 1);
    cr_assert_eq(d.cfg.piece, 0);
    proto_msg_fini(&d);

    /* A 16-field config whose piece is 0 is no message of ours: encode
     * one by hand (a piece of 1, its byte then patched to 0). */
    register_of(&m, &t);
    m.cfg.piece = 1;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    {
        unsigned char *b = hdr;
        size_t at = SIZE_MAX;
        /* The piece is the last field of cfg, right before "tensors". */
        for (size_t i = 0; i + 8 <= hlen; i++)
            if (memcmp(b + i, "\xa7tensors", 8) == 0) {
                at = i - 1;
                break;
            }
        cr_assert_neq(at, SIZE_MAX);
        cr_assert_eq(b[at], 1, "the piece is a positive fixint");
        b[at] = 0;
    }
    memset(&d, 0, sizeof(d));
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_EPROTO);
    free(hdr);
}

Test(msg, register_refuses_an_unknown_server_optimizer_or_beta)
{
    const struct {
        uint8_t opt;
        double beta;
    } bad[] = {{3, 0},
               {PROTO_SOPT_MOMENTUM, 1},
               {PROTO_SOPT_MOMENTUM, -0.1},
               {PROTO_SOPT_ADAM, 0.5}};
    proto_tensor t;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        proto_msg m, d;
        proto_frame f[PROTO_MAX_FRAMES];
        size_t nf = 0, hlen = 0;
        void *hdr = NULL;
        char err[ERRLEN] = "";

        register_of(&m, &t);
        m.cfg.server_opt = bad[i].opt;
        m.cfg.server_beta = bad[i].beta;
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
        memset(&d, 0, sizeof(d));
        cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_EPROTO,
                     "optimizer %u, beta %g", bad[i].opt, bad[i].beta);
        free(hdr);
    }
}

Test(msg, dense_init_round_trips_with_its_values)
{
    float v[5] = {1.0f, -2.5f, 0.0f, 1e-30f, 3.4e38f};
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_INIT;
    strcpy(m.job, "j");
    m.rank = 0;
    m.part = 7;
    m.iter = 0;
    m.version = 0;
    m.codec = PROTO_CODEC_DENSE;
    m.n = 5;
    m.val = v;
    round_trip(&m, &d, 2);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.codec, PROTO_CODEC_DENSE);
    cr_assert_eq(d.n, 5);
    cr_assert_null(d.idx);
    cr_assert_eq(memcmp(d.val, v, sizeof(v)), 0);
    proto_msg_fini(&d);
}

/* A worker's message to another (decentralized training): dense values,
 * its kind, round and step in part, iter and version, and the job's
 * credentials. */
Test(msg, a_peer_message_round_trips_and_is_never_sparse)
{
    float v[3] = {0.5f, -1.0f, 2.0f};
    proto_frame pl[2] = {{idx3, sizeof(idx3)}, {val3, sizeof(val3)}};
    hdr_spec s = spec_for(PROTO_OP_PEER);
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PEER;
    strcpy(m.job, "j");
    m.rank = 3;
    m.part = 1;
    m.iter = 12345;
    m.version = 2;
    m.codec = PROTO_CODEC_DENSE;
    m.n = 3;
    m.val = v;
    strcpy(m.auth, "00112233445566778899aabbccddeeff");
    m.cid = 9;
    round_trip(&m, &d, 2);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.n, 3);
    cr_assert_eq(memcmp(d.val, v, sizeof(v)), 0);
    cr_assert_str_eq(d.auth, m.auth);
    cr_assert_eq(d.cid, 9);
    cr_assert_str_eq(proto_op_name(PROTO_OP_PEER), "PEER");
    proto_msg_fini(&d);
    s.codec = PROTO_CODEC_SPARSE;
    s.n = 3;
    expect_hdr_refused(&s, pl, 2, FLPS_EPROTO, "PEER cannot be sparse");
}

/* The optional "slow" key: present only when set, read back exactly, and
 * absent from a message that never had it. */
Test(msg, the_slowest_iteration_round_trips_and_defaults_to_zero)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_ACK;
    strcpy(m.job, "j");
    m.iter = 9;
    m.slowest = UINT64_C(1) << 40;
    snprintf(m.text, sizeof(m.text), "applied");
    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.slowest, UINT64_C(1) << 40);
    proto_msg_fini(&d);
    m.slowest = 0;
    round_trip(&m, &d, 1);
    cr_assert_eq(d.slowest, 0);
    proto_msg_fini(&d);
}

Test(msg, a_push_weight_round_trips_and_is_refused_out_of_range)
{
    proto_msg m, d;
    const float v[2] = {1, -1};
    void *hdr = NULL;
    size_t hlen, nf;
    proto_frame f[PROTO_MAX_FRAMES];

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PUSH;
    strcpy(m.job, "j");
    m.codec = PROTO_CODEC_DENSE;
    m.n = 2;
    m.val = v;
    m.has_weight = 1;
    m.weight = 6000.5;
    round_trip(&m, &d, 2);
    cr_assert_eq(d.has_weight, 1);
    cr_assert_eq(d.weight, 6000.5);
    proto_msg_fini(&d);
    m.weight = 0; /* a worker with no client in time */
    round_trip(&m, &d, 2);
    cr_assert_eq(d.has_weight, 1);
    cr_assert_eq(d.weight, 0.0);
    proto_msg_fini(&d);
    m.has_weight = 0;
    round_trip(&m, &d, 2);
    cr_assert_eq(d.has_weight, 0, "absent unless given");
    proto_msg_fini(&d);
    m.has_weight = 1;
    m.weight = -1;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.weight = NAN;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.weight = PROTO_WEIGHT_MAX * 2;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
}

Test(msg, a_weight_on_anything_but_a_push_is_malformed)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    proto_frame f[1];
    proto_msg d;
    char err[ERRLEN] = "";
    static const char *const keys[] = {"v",    "op",   "job", "rank",
                                       "part", "iter", "ver"};
    const uint64_t vals[] = {PROTO_VERSION, PROTO_OP_PULL, 0, 0, 0, 0, 0};

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    for (int i = 0; i < 7; i++) {
        msgpack_pack_str(&pk, strlen(keys[i]));
        msgpack_pack_str_body(&pk, keys[i], strlen(keys[i]));
        if (i == 2) {
            msgpack_pack_str(&pk, 1);
            msgpack_pack_str_body(&pk, "j", 1);
        } else {
            msgpack_pack_uint64(&pk, vals[i]);
        }
    }
    msgpack_pack_str(&pk, 4);
    msgpack_pack_str_body(&pk, "data", 4);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint64(&pk, 0);
    msgpack_pack_uint64(&pk, 0);
    msgpack_pack_str(&pk, 2);
    msgpack_pack_str_body(&pk, "wt", 2);
    msgpack_pack_double(&pk, 1.0);
    f[0].data = sb.data;
    f[0].len = sb.size;
    memset(&d, 0, sizeof(d));
    cr_assert_eq(proto_msg_decode(f, 1, &d, err, sizeof(err)), FLPS_EPROTO);
    cr_assert_not_null(strstr(err, "weight"), "%s", err);
    msgpack_sbuffer_destroy(&sb);
}

Test(msg, sparse_push_round_trips_with_indices_and_values)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PUSH;
    strcpy(m.job, "job-1");
    m.rank = 65535;
    m.part = UINT32_MAX;
    m.iter = UINT64_MAX;
    m.version = 12345678901234ull;
    m.codec = PROTO_CODEC_SPARSE;
    m.n = 3;
    m.idx = idx3;
    m.val = val3;
    round_trip(&m, &d, 3);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.codec, PROTO_CODEC_SPARSE);
    cr_assert_eq(d.n, 3);
    cr_assert_eq(memcmp(d.idx, idx3, sizeof(idx3)), 0);
    cr_assert_eq(memcmp(d.val, val3, sizeof(val3)), 0);
    proto_msg_fini(&d);
}

Test(msg, dense_push_round_trips_with_its_values)
{
    float v[4] = {0.25f, -0.5f, 8.0f, -0.0f};
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PUSH;
    strcpy(m.job, "job");
    m.rank = 2;
    m.part = 1;
    m.iter = 99;
    m.codec = PROTO_CODEC_DENSE;
    m.n = 4;
    m.val = v;
    round_trip(&m, &d, 2);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.codec, PROTO_CODEC_DENSE);
    cr_assert_eq(d.n, 4);
    cr_assert_eq(memcmp(d.val, v, sizeof(v)), 0);
    proto_msg_fini(&d);
}

Test(msg, sparse_push_with_no_elements_round_trips)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PUSH;
    strcpy(m.job, "job");
    m.codec = PROTO_CODEC_SPARSE;
    round_trip(&m, &d, 3);
    cr_assert_eq(d.n, 0);
    cr_assert_eq(d.codec, PROTO_CODEC_SPARSE);
    proto_msg_fini(&d);
}

/* An encoder gives the frames of a sparse PUSH of no pairs NULL data (a
 * worker that selected nothing for a part), and so may a transport: the
 * decoder and the segment views must index such a frame, never offset it
 * (NULL + 0 is undefined: clang's -fsanitize=pointer-overflow stopped
 * fuzz_msg on it). Fails under a clang sanitizer build without the fix. */
Test(msg, a_sparse_push_of_no_pairs_in_frames_without_data_decodes)
{
    proto_seg segs[2] = {{3, 0, 0, 0}, {7, 0, 0, 0}};
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    proto_msg m, d, v;
    char err[ERRLEN] = "";

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PUSH;
    strcpy(m.job, "job");
    m.codec = PROTO_CODEC_SPARSE;
    for (int joined = 0; joined < 2; joined++) {
        m.nsegs = joined ? 2 : 0;
        m.segs = joined ? segs : NULL;
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
        cr_assert_eq(nf, 3);
        cr_assert_null(f[1].data, "the index frame of no pairs has no data");
        cr_assert_null(f[2].data, "the value frame of no pairs has no data");
        cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK,
                     "%s", err);
        cr_assert_eq(d.n, 0);
        cr_assert_eq(d.nsegs, m.nsegs);
        for (uint32_t g = 0; g < d.nsegs; g++) {
            proto_msg_seg_view(&d, g, 0, 0, &v);
            cr_assert_eq(v.part, segs[g].part);
            cr_assert_eq(v.n, 0);
            cr_assert_null(v.idx);
            cr_assert_null(v.val);
        }
        proto_msg_fini(&d);
        free(hdr);
    }
}

Test(msg, sparse_update_round_trips_with_its_rejected_indices)
{
    const uint32_t rej[2] = {0, 7};
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_UPDATE;
    strcpy(m.job, "job");
    m.rank = 1;
    m.part = 4;
    m.iter = 17;
    m.version = 18;
    m.codec = PROTO_CODEC_SPARSE;
    m.n = 3;
    m.idx = idx3;
    m.val = val3;
    m.nrej = 2;
    m.rej = rej;
    round_trip(&m, &d, 4);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.codec, PROTO_CODEC_SPARSE);
    cr_assert_eq(d.n, 3);
    cr_assert_eq(memcmp(d.idx, idx3, sizeof(idx3)), 0);
    cr_assert_eq(memcmp(d.val, val3, sizeof(val3)), 0);
    cr_assert_eq(d.nrej, 2);
    cr_assert_eq(memcmp(d.rej, rej, sizeof(rej)), 0);
    proto_msg_fini(&d);
}

Test(msg, dense_update_round_trips_with_an_empty_rejected_list)
{
    float v[3] = {-0.1f, 0.2f, -0.3f};
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_UPDATE;
    strcpy(m.job, "job");
    m.rank = 0;
    m.part = 0;
    m.iter = 1;
    m.version = 2;
    m.codec = PROTO_CODEC_DENSE;
    m.n = 3;
    m.val = v;
    round_trip(&m, &d, 3);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.codec, PROTO_CODEC_DENSE);
    cr_assert_eq(d.n, 3);
    cr_assert_eq(memcmp(d.val, v, sizeof(v)), 0);
    cr_assert_eq(d.nrej, 0);
    proto_msg_fini(&d);
}

Test(msg, pull_round_trips_without_frames)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PULL;
    strcpy(m.job, "job");
    m.rank = 5;
    m.part = 6;
    m.iter = 7;
    m.version = 8;
    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.n, 0);
    cr_assert_null(d.val);
    proto_msg_fini(&d);
}

Test(msg, pull_reply_round_trips_with_the_part_values)
{
    float v[6] = {1, 2, 3, 4, 5, 6};
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PULL_REPLY;
    strcpy(m.job, "job");
    m.rank = 1;
    m.part = 3;
    m.iter = 40;
    m.version = 41;
    m.codec = PROTO_CODEC_DENSE;
    m.n = 6;
    m.val = v;
    round_trip(&m, &d, 2);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.n, 6);
    cr_assert_eq(memcmp(d.val, v, sizeof(v)), 0);
    proto_msg_fini(&d);
}

Test(msg, ack_round_trips_with_status_and_text)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_ACK;
    strcpy(m.job, "job");
    m.rank = 0;
    m.part = 2;
    m.iter = 0;
    m.version = 1;
    m.status = 1;
    strcpy(m.text, "already initialised; pull the values");
    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.status, 1);
    cr_assert_str_eq(d.text, m.text);
    proto_msg_fini(&d);
}

Test(msg, error_round_trips_with_status_and_the_longest_text)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_ERROR;
    strcpy(m.job, "job");
    m.rank = 1;
    m.part = 2;
    m.iter = 3;
    m.status = FLPS_EDUP;
    memset(m.text, 'x', PROTO_ERRMSG_MAX);
    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.status, FLPS_EDUP);
    cr_assert_str_eq(d.text, m.text);
    proto_msg_fini(&d);
}

Test(msg, checkpoint_and_register_ok_round_trip)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_CHECKPOINT;
    memset(m.job, 'j', PROTO_JOB_MAX); /* the longest job */
    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    proto_msg_fini(&d);

    m.op = PROTO_OP_REGISTER_OK;
    m.iter = 12;
    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    proto_msg_fini(&d);
}

Test(msg, the_credentials_round_trip_and_default_to_none)
{
    proto_msg m, d;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PULL;
    strcpy(m.job, "j");
    memset(m.auth, 'a', PROTO_AUTH_MAX);
    m.cid = UINT64_MAX;
    round_trip(&m, &d, 1);
    assert_common_equal(&m, &d);
    cr_assert_str_eq(d.auth, m.auth);
    cr_assert_eq(d.cid, UINT64_MAX);
    proto_msg_fini(&d);
    memset(m.auth, 0, sizeof(m.auth));
    m.cid = 0;
    round_trip(&m, &d, 1);
    cr_assert_str_eq(d.auth, "");
    cr_assert_eq(d.cid, 0);
    proto_msg_fini(&d);
}

Test(msg, a_too_long_or_mistyped_secret_is_refused)
{
    for (int k = 0; k < 2; k++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        proto_frame f;
        proto_msg d;
        char err[ERRLEN] = "", big[PROTO_AUTH_MAX + 2];

        memset(big, 'b', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 9);
        pk_str(&pk, "v");
        msgpack_pack_uint64(&pk, PROTO_VERSION);
        pk_str(&pk, "op");
        msgpack_pack_uint64(&pk, PROTO_OP_PULL);
        pk_str(&pk, "job");
        pk_str(&pk, "job");
        pk_str(&pk, "rank");
        msgpack_pack_uint64(&pk, 1);
        pk_str(&pk, "part");
        msgpack_pack_uint64(&pk, 2);
        pk_str(&pk, "iter");
        msgpack_pack_uint64(&pk, 3);
        pk_str(&pk, "ver");
        msgpack_pack_uint64(&pk, 4);
        pk_str(&pk, "data");
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint64(&pk, 0);
        msgpack_pack_uint64(&pk, 0);
        pk_str(&pk, "auth");
        if (k == 0)
            pk_str(&pk, big); /* one character too many */
        else
            msgpack_pack_uint64(&pk, 7);
        f.data = sb.data;
        f.len = sb.size;
        cr_assert_eq(proto_msg_decode(&f, 1, &d, err, sizeof(err)),
                     FLPS_EPROTO);
        cr_assert_neq(strstr(err, "'auth'"), NULL, "%s", err);
        msgpack_sbuffer_destroy(&sb);
    }
}

Test(msg, unknown_keys_in_the_header_are_ignored)
{
    proto_frame f;
    proto_msg d;
    char *hdr = NULL, err[ERRLEN] = "";
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    pk_str(&pk, "future");
    msgpack_pack_true(&pk);
    pk_str(&pk, "v");
    msgpack_pack_uint64(&pk, PROTO_VERSION);
    pk_str(&pk, "op");
    msgpack_pack_uint64(&pk, PROTO_OP_PULL);
    pk_str(&pk, "job");
    pk_str(&pk, "job");
    pk_str(&pk, "rank");
    msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "part");
    msgpack_pack_uint64(&pk, 2);
    pk_str(&pk, "iter");
    msgpack_pack_uint64(&pk, 3);
    pk_str(&pk, "ver");
    msgpack_pack_uint64(&pk, 4);
    pk_str(&pk, "data");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint64(&pk, 0);
    msgpack_pack_uint64(&pk, 0);
    hdr = sb.data;
    f.data = hdr;
    f.len = sb.size;
    cr_assert_eq(proto_msg_decode(&f, 1, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.op, PROTO_OP_PULL);
    cr_assert_eq(d.rank, 1);
    cr_assert_eq(d.part, 2);
    cr_assert_eq(d.iter, 3);
    cr_assert_eq(d.version, 4);
    proto_msg_fini(&d);
    free(hdr);
}

/* ---- encode refusals ---- */

Test(msg, encode_refuses_unknown_ops_sparse_init_and_unknown_codecs)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 77, hlen = 77;
    void *hdr = (void *)&nf;
    proto_msg m;

    memset(&m, 0, sizeof(m));
    m.op = 0;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.op = PROTO_OP_MAX_ + 1;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);

    /* The longest job encodes (a longer one does not fit the struct; the
     * decoder's refusal of one is tested below). */
    m.op = PROTO_OP_PULL;
    memset(m.job, 'j', PROTO_JOB_MAX);
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    free(hdr);
    hdr = (void *)&nf;
    nf = 77;
    hlen = 77;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_INIT;
    m.codec = PROTO_CODEC_SPARSE;
    m.n = 3;
    m.idx = idx3;
    m.val = val3;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.op = PROTO_OP_PUSH;
    m.codec = PROTO_CODEC_ENCODED; /* without a spec and frames */
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.codec = PROTO_CODEC_ENCODED + 1;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    cr_assert_eq(hdr, (void *)&nf, "a refused encode writes nothing");
    cr_assert_eq(nf, 77);
    cr_assert_eq(hlen, 77);
}

Test(msg, encode_refuses_a_tensor_name_without_a_terminator)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    proto_tensor t;
    proto_msg m;

    memset(&m, 0, sizeof(m));
    memset(&t, 'n', sizeof(t.name)); /* 128 bytes of name: too long */
    t.numel = 4;
    m.op = PROTO_OP_REGISTER;
    strcpy(m.job, "job");
    m.ntensors = 1;
    m.tensors = &t;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    cr_assert_null(hdr);
}

/* ---- decode refusals ---- */

Test(msg, refuses_another_protocol_version)
{
    hdr_spec s = spec_for(PROTO_OP_PULL);

    s.v = PROTO_VERSION + 1;
    {
        char want[64];
        snprintf(want, sizeof(want), "version %u is not supported",
                 PROTO_VERSION + 1);
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, want);
    }
    s.v = 0;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "version 0");
}

Test(msg, refuses_an_unknown_op)
{
    hdr_spec s = spec_for(0);

    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "unknown op 0");
    s.op = PROTO_OP_MAX_ + 1;
    {
        char want[32];
        snprintf(want, sizeof(want), "unknown op %d", PROTO_OP_MAX_ + 1);
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, want);
    }
    s.op = 256 + PROTO_OP_PULL; /* would be PULL if truncated to a byte */
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "unknown op 262");
}

Test(msg, refuses_a_header_missing_any_required_field)
{
    const char *base[] = {"v",    "op",   "job", "rank",
                          "part", "iter", "ver", "data"};

    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
        hdr_spec s = spec_for(PROTO_OP_PULL);
        s.omit = base[i];
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "lacks a required field");
    }
}

Test(msg, refuses_a_header_missing_an_op_specific_field)
{
    struct {
        uint64_t op;
        const char *key;
    } cases[] = {
        {PROTO_OP_UPDATE, "nrej"},      {PROTO_OP_ERROR, "status"},
        {PROTO_OP_ERROR, "text"},       {PROTO_OP_ACK, "status"},
        {PROTO_OP_ACK, "text"},         {PROTO_OP_REGISTER, "cfg"},
        {PROTO_OP_REGISTER, "tensors"},
    };
    float v = 1.0f;
    proto_frame upd[2] = {{&v, 4}, {NULL, 0}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hdr_spec s = spec_for(cases[i].op);
        char needle[64];
        int update = cases[i].op == PROTO_OP_UPDATE;
        s.omit = cases[i].key;
        s.n = update ? 1 : 0;
        snprintf(needle, sizeof(needle), "%s header lacks its op-specific",
                 proto_op_name((uint8_t)cases[i].op));
        expect_hdr_refused(&s, update ? upd : NULL, update ? 2 : 0, FLPS_EPROTO,
                           needle);
    }
}

Test(msg, refuses_every_field_of_the_wrong_type)
{
    const char *keys[] = {"v",    "op",  "job",    "rank", "part",
                          "iter", "ver", "data",   "nrej", "status",
                          "text", "cfg", "tensors"};

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        hdr_spec s;
        char needle[64];
        const char *k = keys[i];
        uint64_t op = PROTO_OP_PULL;

        if (strcmp(k, "nrej") == 0)
            op = PROTO_OP_UPDATE;
        else if (strcmp(k, "status") == 0 || strcmp(k, "text") == 0)
            op = PROTO_OP_ERROR;
        else if (strcmp(k, "cfg") == 0 || strcmp(k, "tensors") == 0)
            op = PROTO_OP_REGISTER;
        s = spec_for(op);
        s.wrong_type = k;
        if (strcmp(k, "tensors") == 0) {
            expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                               "tensor 0 is not a [name, numel] pair");
            continue;
        }
        snprintf(needle, sizeof(needle),
                 "header field '%s' is of the wrong type", k);
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, needle);
    }
}

Test(msg, refuses_values_out_of_their_range)
{
    hdr_spec s = spec_for(PROTO_OP_PULL);

    s.rank = (uint64_t)UINT32_MAX + 1;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                       "header field 'rank' is of the wrong type or range");
    s = spec_for(PROTO_OP_PULL);
    s.part = UINT64_MAX;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "'part'");
    s = spec_for(PROTO_OP_PUSH);
    s.codec = PROTO_CODEC_ENCODED + 1;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "'data'");
}

Test(msg, refuses_an_unknown_learning_rate_schedule)
{
    hdr_spec s = spec_for(PROTO_OP_REGISTER);
    char *hdr = NULL, err[ERRLEN] = "";
    proto_frame f;
    proto_msg d;

    s.lr_schedule = PROTO_LR_COSINE;
    f.len = build_hdr(&s, &hdr);
    f.data = hdr;
    cr_assert_eq(proto_msg_decode(&f, 1, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.cfg.lr_schedule, PROTO_LR_COSINE);
    cr_assert_eq(d.cfg.iterations, 100);
    proto_msg_fini(&d);
    free(hdr);
    s.lr_schedule = PROTO_LR_COSINE + 1;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                       "header field 'cfg' is of the wrong type or range");
}

Test(msg, learning_rate_follows_the_schedule)
{
    proto_jobcfg c;

    memset(&c, 0, sizeof(c));
    c.lr = 0.25;
    c.iterations = 100;
    c.lr_schedule = PROTO_LR_CONSTANT;
    cr_assert_eq(proto_jobcfg_lr_at(&c, 0), 0.25);
    cr_assert_eq(proto_jobcfg_lr_at(&c, 1000), 0.25);
    c.lr_schedule = PROTO_LR_COSINE;
    cr_assert_eq(proto_jobcfg_lr_at(&c, 0), 0.25, "starts at lr");
    cr_assert_float_eq(proto_jobcfg_lr_at(&c, 50), 0.125, 1e-15,
                       "half of lr half way");
    cr_assert_eq(proto_jobcfg_lr_at(&c, 100), 0.0, "zero at the end");
    cr_assert_eq(proto_jobcfg_lr_at(&c, 5000), 0.0, "and after it");
    cr_assert_float_eq(proto_jobcfg_lr_at(&c, 25),
                       0.25 * 0.5 * (1.0 + cos(M_PI * 0.25)), 1e-15);
    c.iterations = 0;
    cr_assert_eq(proto_jobcfg_lr_at(&c, 7), 0.25, "no length: constant");
}

Test(msg, refuses_a_repeated_field)
{
    const char *keys[] = {"v",    "op",   "job", "rank",
                          "part", "iter", "ver", "data"};

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        hdr_spec s = spec_for(PROTO_OP_PULL);
        char needle[64];
        s.dup = keys[i];
        snprintf(needle, sizeof(needle), "header field '%s' is repeated",
                 keys[i]);
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, needle);
    }
    {
        hdr_spec s = spec_for(PROTO_OP_REGISTER);
        s.dup = "tensors";
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                           "header field 'tensors' is");
        s.dup = "cfg";
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                           "header field 'cfg' is repeated");
    }
}

Test(msg, refuses_trailing_garbage_after_the_header_map)
{
    hdr_spec s = spec_for(PROTO_OP_PULL);

    s.trailing = 1;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                       "header is not one MessagePack object");
}

Test(msg, refuses_a_header_that_is_not_a_map)
{
    hdr_spec s = spec_for(PROTO_OP_PULL);
    const unsigned char one = 0x01;
    proto_frame f = {&one, 1};

    s.not_a_map = 1;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                       "header is not a MessagePack map");
    expect_refused(&f, 1, FLPS_EPROTO, "not a MessagePack map");
}

Test(msg, refuses_an_empty_or_truncated_header)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;
    void *hdr = encode_sparse_push(idx3, val3, 3, f, &nf);
    proto_frame empty = {"", 0};

    expect_refused(&empty, 1, FLPS_EPROTO, "not one MessagePack object");
    f[0].len -= 1;
    expect_refused(f, nf, FLPS_EPROTO, "not one MessagePack object");
    expect_refused(f, 0, FLPS_EPROTO, "no header frame");
    expect_refused(NULL, 1, FLPS_EPROTO, "no header frame");
    free(hdr);
}

Test(msg, refuses_the_wrong_number_of_frames)
{
    proto_frame f[PROTO_MAX_FRAMES + 1];
    size_t nf;
    void *hdr = encode_sparse_push(idx3, val3, 3, f, &nf);

    cr_assert_eq(nf, 3);
    expect_refused(f, 2, FLPS_EPROTO, "PUSH sparse has 2 frames; expected 3");
    f[3] = f[2];
    expect_refused(f, 4, FLPS_EPROTO, "has 4 frames; expected 3");
    free(hdr);

    {
        hdr_spec s = spec_for(PROTO_OP_PULL);
        proto_frame extra = {val3, 0};
        expect_hdr_refused(&s, &extra, 1, FLPS_EPROTO,
                           "PULL dense has 2 frames; expected 1");
    }
    {
        /* A dense UPDATE needs its (possibly empty) rejected-index frame. */
        hdr_spec s = spec_for(PROTO_OP_UPDATE);
        proto_frame vals = {val3, sizeof(val3)};
        s.n = 3;
        expect_hdr_refused(&s, &vals, 1, FLPS_EPROTO,
                           "UPDATE dense has 2 frames; expected 3");
    }
}

Test(msg, refuses_an_index_frame_of_the_wrong_size)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;
    void *hdr = encode_v2_sparse_push(idx3, val3, 3, f, &nf);

    f[1].len = 8;
    expect_refused(f, nf, FLPS_EPROTO, "index frame has 8 bytes; expected 12");
    f[1].len = 13;
    expect_refused(f, nf, FLPS_EPROTO, "index frame has 13 bytes");
    free(hdr);
}

Test(msg, refuses_a_value_frame_of_the_wrong_size)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;
    void *hdr = encode_sparse_push(idx3, val3, 3, f, &nf);

    f[2].len = 16;
    expect_refused(f, nf, FLPS_EPROTO, "value frame has 16 bytes; expected 12");
    f[2].len = 0;
    expect_refused(f, nf, FLPS_EPROTO, "value frame has 0 bytes");
    free(hdr);
}

Test(msg, refuses_a_rejected_index_frame_of_the_wrong_size)
{
    hdr_spec s = spec_for(PROTO_OP_UPDATE);
    proto_frame pl[3] = {{idx3, sizeof(idx3)}, {val3, sizeof(val3)}, {idx3, 4}};

    s.v = 2; /* u32 each */
    s.codec = PROTO_CODEC_SPARSE;
    s.n = 3;
    s.nrej = 2;
    expect_hdr_refused(&s, pl, 3, FLPS_EPROTO,
                       "rejected-index frame has 4 bytes; expected 8");
}

Test(msg, refuses_unaligned_frames)
{
    /* Valid contents one byte past an aligned address. */
    uint32_t store[8];
    unsigned char *raw = (unsigned char *)store;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;
    /* u32 indices (version 2); compact ones may lie anywhere */
    void *hdr = encode_v2_sparse_push(idx3, val3, 3, f, &nf);

    memcpy(raw + 1, idx3, sizeof(idx3));
    f[1].data = raw + 1;
    expect_refused(f, nf, FLPS_EPROTO, "index frame");
    f[1].data = idx3;
    memcpy(raw + 1, val3, sizeof(val3));
    f[2].data = raw + 1;
    expect_refused(f, nf, FLPS_EPROTO, "value frame");
    free(hdr);

    {
        hdr_spec s = spec_for(PROTO_OP_UPDATE);
        proto_frame pl[3] = {
            {idx3, sizeof(idx3)}, {val3, sizeof(val3)}, {raw + 1, 8}};
        memcpy(raw + 1, idx3, 8);
        s.v = 2;
        s.codec = PROTO_CODEC_SPARSE;
        s.n = 3;
        s.nrej = 2;
        expect_hdr_refused(&s, pl, 3, FLPS_EPROTO, "rejected-index frame");
    }
}

Test(msg, refuses_indices_that_are_not_strictly_ascending)
{
    const uint32_t down[3] = {1, 9, 5};
    const uint32_t dup[3] = {1, 5, 5};
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;
    /* Version 2's u32 indices can say so; compact ones cannot (below). */
    void *hdr = encode_v2_sparse_push(down, val3, 3, f, &nf);

    expect_refused(f, nf, FLPS_EPROTO,
                   "not strictly ascending at position 2 (5 after 9)");
    free(hdr);
    hdr = encode_v2_sparse_push(dup, val3, 3, f, &nf);
    expect_refused(f, nf, FLPS_EPROTO,
                   "not strictly ascending at position 2 (5 after 5)");
    free(hdr);
}

Test(msg, encode_refuses_indices_that_are_not_strictly_ascending)
{
    const uint32_t down[3] = {1, 9, 5}, dup[3] = {1, 5, 5};
    const uint32_t *bad[2] = {down, dup};
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    proto_msg m;

    for (int i = 0; i < 2; i++) {
        sparse_of(&m, PROTO_OP_PUSH, bad[i], val3, 3, NULL, 0);
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
        cr_assert_null(hdr);
        /* and an UPDATE's rejected indices alike */
        m.op = PROTO_OP_UPDATE;
        m.idx = idx3;
        m.nrej = 3;
        m.rej = bad[i];
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
        cr_assert_null(hdr);
    }
}

Test(msg, refuses_nan_and_infinite_values)
{
    const float bad[4] = {NAN, INFINITY, -INFINITY, -NAN};

    for (int i = 0; i < 4; i++) {
        float v[3] = {1.0f, 2.0f, 3.0f};
        proto_frame f[PROTO_MAX_FRAMES];
        size_t nf;
        void *hdr;

        v[i % 3] = bad[i];
        hdr = encode_sparse_push(idx3, v, 3, f, &nf);
        {
            char needle[32];
            snprintf(needle, sizeof(needle), "value %d is not finite", i % 3);
            expect_refused(f, nf, FLPS_ENONFINITE, needle);
        }
        free(hdr);
    }
    {
        /* Dense values, and the values of an UPDATE, are checked too. */
        float v[2] = {0.0f, INFINITY};
        hdr_spec s = spec_for(PROTO_OP_INIT);
        proto_frame pl[2] = {{v, sizeof(v)}, {NULL, 0}};
        s.n = 2;
        expect_hdr_refused(&s, pl, 1, FLPS_ENONFINITE, "value 1 is not finite");
        s = spec_for(PROTO_OP_UPDATE);
        s.n = 2;
        expect_hdr_refused(&s, pl, 2, FLPS_ENONFINITE, "value 1 is not finite");
    }
}

Test(msg, refuses_a_valueless_op_that_says_it_carries_values)
{
    uint64_t ops[] = {PROTO_OP_REGISTER, PROTO_OP_REGISTER_OK,
                      PROTO_OP_PULL,     PROTO_OP_CHECKPOINT,
                      PROTO_OP_ACK,      PROTO_OP_ERROR};

    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        hdr_spec s = spec_for(ops[i]);
        char needle[64];
        s.n = 3;
        snprintf(needle, sizeof(needle), "%s carries no values but says n=3",
                 proto_op_name((uint8_t)ops[i]));
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, needle);
    }
}

Test(msg, refuses_sparse_init)
{
    proto_frame pl[2] = {{idx3, sizeof(idx3)}, {val3, sizeof(val3)}};
    hdr_spec s = spec_for(PROTO_OP_INIT);

    s.codec = PROTO_CODEC_SPARSE;
    s.n = 3;
    expect_hdr_refused(&s, pl, 2, FLPS_EPROTO, "INIT cannot be sparse");
}

/* An async part answers a pull naming the version the worker holds with
 * the elements changed since: a sparse PULL_REPLY, held to the rules of
 * every sparse message (ascending indices, matching frames). */
Test(msg, a_sparse_pull_reply_round_trips_and_keeps_the_sparse_rules)
{
    const uint32_t idx[3] = {2, 9, 40}, bad[3] = {9, 2, 40};
    const float val[3] = {0.5f, -1.0f, 3.0f};
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    proto_msg m, d;
    char err[256];

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PULL_REPLY;
    strcpy(m.job, "j");
    m.part = 4;
    m.iter = 17;    /* the version the changes count from */
    m.version = 23; /* the part's version now */
    m.codec = PROTO_CODEC_SPARSE;
    m.n = 3;
    m.idx = idx;
    m.val = val;
    round_trip(&m, &d, 3);
    assert_common_equal(&m, &d);
    cr_assert_eq(d.codec, PROTO_CODEC_SPARSE);
    cr_assert_eq(memcmp(d.idx, idx, sizeof(idx)), 0);
    cr_assert_eq(memcmp(d.val, val, sizeof(val)), 0);
    proto_msg_fini(&d);
    m.idx = bad;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.idx = idx; /* then carry bad as version 2's u32 indices */
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    as_version2(f, nf, 1, 0, bad, 3, NULL, 0);
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_EPROTO);
    cr_assert_not_null(strstr(err, "strictly ascending"), "%s", err);
    free(hdr);
}

Test(msg, refuses_tensors_with_no_elements_or_more_than_2_to_the_32)
{
    hdr_spec s = spec_for(PROTO_OP_REGISTER);

    s.numel0 = 0;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                       "tensor 0 is not a [name, numel] pair");
    s.numel0 = (uint64_t)UINT32_MAX + 1;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "0 < numel < 2^32");
}

Test(msg, refuses_an_empty_tensor_list)
{
    proto_msg m;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen;
    void *hdr = NULL;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_REGISTER;
    strcpy(m.job, "job");
    m.ntensors = 0;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    expect_refused(f, nf, FLPS_EPROTO, "tensors must be an array of 1..4096");
    free(hdr);
}

Test(msg, refuses_a_job_string_that_is_too_long)
{
    char longjob[PROTO_JOB_MAX + 2];
    hdr_spec s = spec_for(PROTO_OP_PULL);

    memset(longjob, 'j', PROTO_JOB_MAX + 1);
    longjob[PROTO_JOB_MAX + 1] = '\0';
    s.job = longjob;
    expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO,
                       "header field 'job' is of the wrong type or range");
    longjob[PROTO_JOB_MAX] = '\0'; /* the maximum is fine */
    {
        proto_frame f;
        char *hdr = NULL, err[ERRLEN] = "";
        proto_msg d;
        f.len = build_hdr(&s, &hdr);
        f.data = hdr;
        cr_assert_eq(proto_msg_decode(&f, 1, &d, err, sizeof(err)), FLPS_OK,
                     "%s", err);
        cr_assert_str_eq(d.job, longjob);
        free(hdr);
    }
}

Test(msg, refuses_a_job_string_with_an_embedded_nul)
{
    hdr_spec s = spec_for(PROTO_OP_PULL);
    char *hdr = NULL;
    proto_frame f;
    unsigned char *p;

    s.job = "abc";
    f.len = build_hdr(&s, &hdr);
    f.data = hdr;
    /* Find the job's bytes ("abc" after the fixstr marker 0xa3) and put a
     * NUL in the middle. */
    p = memmem(hdr, f.len,
               "\xa3"
               "abc",
               4);
    cr_assert_not_null(p);
    p[2] = '\0';
    expect_refused(&f, 1, FLPS_EPROTO, "'job'");
    free(hdr);
}

Test(msg, decode_fails_cleanly_when_the_tensor_list_cannot_be_allocated)
{
    hdr_spec s = spec_for(PROTO_OP_REGISTER);
    char *hdr = NULL;
    proto_frame f;
    proto_msg out, sentinel;
    char err[ERRLEN] = "";
    flps_err rc;

    f.len = build_hdr(&s, &hdr);
    f.data = hdr;
    memset(&out, 0xA5, sizeof(out));
    memcpy(&sentinel, &out, sizeof(out));
    flps_alloc_fail_at(1);
    rc = proto_msg_decode(&f, 1, &out, err, sizeof(err));
    flps_alloc_fail_at(0);
    cr_assert_eq(rc, FLPS_ENOMEM);
    cr_assert_eq(memcmp(&out, &sentinel, sizeof(out)), 0);
    free(hdr);
}

Test(msg, errbuf_may_be_null_or_tiny)
{
    hdr_spec s = spec_for(0);
    char *hdr = NULL;
    proto_frame f;
    proto_msg out;
    char tiny[4] = "zzz";

    f.len = build_hdr(&s, &hdr);
    f.data = hdr;
    cr_assert_eq(proto_msg_decode(&f, 1, &out, NULL, 0), FLPS_EPROTO);
    cr_assert_eq(proto_msg_decode(&f, 1, &out, tiny, sizeof(tiny)),
                 FLPS_EPROTO);
    cr_assert_str_eq(tiny, "unk", "the reason is cut to the buffer");
    free(hdr);
}

/* ---- garbage ---- */

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64: deterministic, good enough for fuzzing inputs. */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void check_decode_survives(const proto_frame *f, size_t nf)
{
    proto_msg out;
    char err[ERRLEN];
    flps_err rc = proto_msg_decode(f, nf, &out, err, sizeof(err));

    cr_assert(rc == FLPS_OK || rc == FLPS_EPROTO || rc == FLPS_ENONFINITE,
              "decode returned %s", flps_errname(rc));
    if (rc == FLPS_OK)
        proto_msg_fini(&out);
}

Test(msg, random_garbage_never_crashes_the_decoder)
{
    uint64_t seed = 0x5eed;
    uint32_t buf[64]; /* aligned storage */
    unsigned char *b = (unsigned char *)buf;
    int ok = 0;

    for (int i = 0; i < 5000; i++) {
        size_t len = rng_next(&seed) % sizeof(buf);
        proto_frame f[3];
        for (size_t j = 0; j < len; j++)
            b[j] = (unsigned char)rng_next(&seed);
        /* Some buffers start as a small map, so parsing gets further. */
        if (len > 0 && i % 4 == 0)
            b[0] = (unsigned char)(0x80 | (rng_next(&seed) % 16));
        f[0].data = b;
        f[0].len = len;
        f[1].data = buf;
        f[1].len = (rng_next(&seed) % 4) * 4;
        f[2] = f[1];
        check_decode_survives(f, 1 + i % 3);
        ok++;
    }
    cr_assert_eq(ok, 5000);
}

Test(msg, random_mutations_of_a_valid_header_never_crash_the_decoder)
{
    uint64_t seed = 42;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, n_ok = 0;
    void *hdr = encode_sparse_push(idx3, val3, 3, f, &nf);
    size_t hlen = f[0].len;
    uint32_t mut[64];
    unsigned char *mb = (unsigned char *)mut;

    cr_assert(hlen + 8 <= sizeof(mut));
    for (int i = 0; i < 20000; i++) {
        size_t len = hlen;
        int edits = 1 + (int)(rng_next(&seed) % 4);
        proto_frame g[PROTO_MAX_FRAMES];

        memcpy(mb, hdr, hlen);
        for (int e = 0; e < edits; e++) {
            uint64_t r = rng_next(&seed);
            size_t pos = len ? (size_t)(r >> 8) % len : 0;
            switch (r % 4) {
            case 0: /* flip bits */
                mb[pos] ^= (unsigned char)(1u << ((r >> 40) % 8));
                break;
            case 1: /* random byte */
                mb[pos] = (unsigned char)(r >> 48);
                break;
            case 2: /* truncate */
                len = pos;
                break;
            default: /* an interesting byte */
            {
                static const unsigned char interesting[] = {
                    0x00, 0x7f, 0x80, 0x8f, 0x90, 0xa0, 0xc0, 0xc1,
                    0xcb, 0xcf, 0xd3, 0xdc, 0xdd, 0xde, 0xdf, 0xff};
                mb[pos] = interesting[(r >> 32) % sizeof(interesting)];
            } break;
            }
        }
        memcpy(g, f, sizeof(g));
        g[0].data = mb;
        g[0].len = len;
        {
            proto_msg out;
            char err[ERRLEN];
            flps_err rc = proto_msg_decode(g, nf, &out, err, sizeof(err));
            cr_assert(rc == FLPS_OK || rc == FLPS_EPROTO,
                      "mutation %d: decode returned %s", i, flps_errname(rc));
            if (rc == FLPS_OK) {
                n_ok++;
                proto_msg_fini(&out);
            }
        }
    }
    /* Mutations that hit e.g. the rank's value still decode. */
    cr_assert_gt(n_ok, 0);
    free(hdr);
}

Test(msg, an_encoded_push_round_trips_with_its_spec_and_frames)
{
    static const unsigned char norms[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const unsigned char codes[5] = {9, 8, 7, 6, 5};
    proto_msg m, d;
    proto_frame f[PROTO_MAX_FRAMES];
    void *hdr = NULL;
    size_t hlen = 0, nf = 0;
    char err[ERRLEN] = "";

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PUSH;
    snprintf(m.job, sizeof(m.job), "j");
    m.part = 3;
    m.iter = 9;
    m.codec = PROTO_CODEC_ENCODED;
    m.n = 1000;
    snprintf(m.spec, sizeof(m.spec), "qsgd:4");
    m.nenc = 2;
    m.enc[0].data = norms;
    m.enc[0].len = sizeof(norms);
    m.enc[1].data = codes;
    m.enc[1].len = sizeof(codes);
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(nf, 3, "header + the codec's two frames");
    cr_assert_eq(f[1].data, (const void *)norms, "frames are not copied");
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.codec, PROTO_CODEC_ENCODED);
    cr_assert_str_eq(d.spec, "qsgd:4");
    cr_assert_eq(d.n, 1000);
    cr_assert_eq(d.nenc, 2);
    cr_assert_eq(d.enc[1].len, sizeof(codes));
    cr_assert_eq(memcmp(d.enc[1].data, codes, sizeof(codes)), 0);
    /* One frame too many, or none at all, is refused. */
    f[3] = f[2];
    cr_assert_eq(proto_msg_decode(f, 4, &d, err, sizeof(err)), FLPS_EPROTO);
    cr_assert_eq(proto_msg_decode(f, 1, &d, err, sizeof(err)), FLPS_EPROTO);
    free(hdr);
}

Test(msg, only_a_push_may_be_codec_encoded)
{
    static const unsigned char bytes[4] = {0};
    proto_msg m;
    proto_frame f[PROTO_MAX_FRAMES];
    void *hdr = (void *)&m;
    size_t hlen = 0, nf = 0;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_INIT;
    snprintf(m.job, sizeof(m.job), "j");
    m.codec = PROTO_CODEC_ENCODED;
    m.n = 1;
    snprintf(m.spec, sizeof(m.spec), "fp16");
    m.nenc = 1;
    m.enc[0].data = bytes;
    m.enc[0].len = 2;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.op = PROTO_OP_PUSH;
    m.spec[0] = '\0';
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL,
                 "an encoded push names its codec");
}

Test(msg, a_header_declaring_more_elements_than_it_has_bytes_is_refused)
{
    /* An array32 of 4 billion elements in five bytes, a map16 of 65535
     * pairs in three, and a str32 longer than the frame: refused before
     * msgpack-c would reserve memory for them. */
    static const unsigned char arr[] = {0xdd, 0xff, 0xff, 0xff, 0xf0};
    static const unsigned char map[] = {0xde, 0xff, 0xff};
    static const unsigned char str[] = {0x81, 0xa1, 'v', 0xdb, 0, 0, 1, 0};
    const unsigned char *bad[] = {arr, map, str};
    const size_t len[] = {sizeof(arr), sizeof(map), sizeof(str)};
    char err[ERRLEN];
    proto_msg d;

    for (int i = 0; i < 3; i++) {
        proto_frame f = {bad[i], len[i]};
        err[0] = '\0';
        cr_assert_eq(proto_msg_decode(&f, 1, &d, err, sizeof(err)), FLPS_EPROTO,
                     "case %d", i);
        cr_assert_not_null(strstr(err, "declared length"), "case %d: %s", i,
                           err);
    }
}

/* A dense UPDATE's values may be left for the caller to check
 * (PROTO_DECODE_UPDATE_VALUES_UNCHECKED); every other check still holds,
 * and a push's or a sparse update's values are still scanned. */
Test(msg, update_values_unchecked_only_for_dense_updates)
{
    float val[3] = {1.0f, NAN, 2.0f};
    uint32_t idx[3] = {0, 4, 9};
    proto_msg m, out;
    proto_frame f[PROTO_MAX_FRAMES];
    void *hdr;
    size_t hl, nf;
    char why[128];

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_UPDATE;
    strcpy(m.job, "j");
    m.codec = PROTO_CODEC_DENSE;
    m.n = 3;
    m.val = val;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hl, f, &nf), FLPS_OK);
    cr_assert_eq(proto_msg_decode(f, nf, &out, why, sizeof(why)),
                 FLPS_ENONFINITE);
    cr_assert_eq(proto_msg_decode_ex(f, nf,
                                     PROTO_DECODE_UPDATE_VALUES_UNCHECKED, &out,
                                     why, sizeof(why)),
                 FLPS_OK);
    cr_assert_eq(out.n, 3);
    cr_assert(isnan(out.val[1]));
    /* the frame sizes are still checked */
    f[1].len -= 4;
    cr_assert_eq(proto_msg_decode_ex(f, nf,
                                     PROTO_DECODE_UPDATE_VALUES_UNCHECKED, &out,
                                     why, sizeof(why)),
                 FLPS_EPROTO);
    free(hdr);

    m.codec = PROTO_CODEC_SPARSE;
    m.idx = idx;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hl, f, &nf), FLPS_OK);
    cr_assert_eq(proto_msg_decode_ex(f, nf,
                                     PROTO_DECODE_UPDATE_VALUES_UNCHECKED, &out,
                                     why, sizeof(why)),
                 FLPS_ENONFINITE);
    free(hdr);

    m.op = PROTO_OP_PUSH;
    m.codec = PROTO_CODEC_DENSE;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hl, f, &nf), FLPS_OK);
    cr_assert_eq(proto_msg_decode_ex(f, nf,
                                     PROTO_DECODE_UPDATE_VALUES_UNCHECKED, &out,
                                     why, sizeof(why)),
                 FLPS_ENONFINITE);
    free(hdr);
}

/* ---- messages of several parts ---- */

static flps_err roundtrip_segs(uint8_t op, uint8_t codec, proto_seg *segs,
                               uint32_t nsegs, const uint32_t *idx,
                               const float *val, uint32_t n, proto_msg *out,
                               char *why, size_t whylen)
{
    proto_msg m;
    proto_frame f[PROTO_MAX_FRAMES];
    void *hdr = NULL;
    size_t hl, nf;
    flps_err rc;

    memset(&m, 0, sizeof(m));
    m.op = op;
    strcpy(m.job, "j");
    m.codec = codec;
    m.n = n;
    m.idx = idx;
    m.val = val;
    m.nsegs = nsegs;
    m.segs = segs;
    for (uint32_t i = 0; i < nsegs; i++)
        m.nrej += segs[i].nrej;
    m.rej = m.nrej ? idx : NULL;
    rc = proto_msg_encode(&m, &hdr, &hl, f, &nf);
    if (rc != FLPS_OK)
        return rc;
    rc = proto_msg_decode(f, nf, out, why, whylen);
    free(hdr);
    return rc;
}

Test(msg, segments_round_trip_and_each_has_its_own_ascending_indices)
{
    /* part 3: indices 0, 5; part 7: indices 1, 2, 9 (restarting at 1) */
    const uint32_t idx[5] = {0, 5, 1, 2, 9};
    const float val[5] = {1, 2, 3, 4, 5};
    proto_seg segs[2] = {{3, 2, 0, 0}, {7, 3, 0, 0}};
    proto_msg out, v;
    char why[160];

    cr_assert_eq(roundtrip_segs(PROTO_OP_PUSH, PROTO_CODEC_SPARSE, segs, 2, idx,
                                val, 5, &out, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(out.nsegs, 2);
    cr_assert_eq(out.segs[1].part, 7);
    proto_msg_seg_view(&out, 1, 2, 0, &v);
    cr_assert_eq(v.part, 7);
    cr_assert_eq(v.n, 3);
    cr_assert_eq(v.idx[0], 1);
    cr_assert_eq(v.val[2], 5.0f);
    cr_assert_eq(v.nsegs, 0);
    proto_msg_fini(&out);
    cr_assert_null(out.segs);
}

Test(msg, segments_that_do_not_add_up_or_go_backwards_are_refused)
{
    const uint32_t idx[5] = {0, 5, 1, 2, 9};
    const float val[5] = {1, 2, 3, 4, 5};
    proto_seg back[2] = {{7, 2, 0, 0}, {3, 3, 0, 0}};
    proto_seg split[2] = {{3, 3, 0, 0}, {7, 2, 0, 0}}; /* 0 5 1: descends */
    proto_seg short_[2] = {{3, 2, 0, 0}, {7, 2, 0, 0}};
    proto_msg out;
    char why[160];

    cr_assert_eq(roundtrip_segs(PROTO_OP_PUSH, PROTO_CODEC_SPARSE, back, 2, idx,
                                val, 5, &out, why, sizeof(why)),
                 FLPS_EPROTO);
    cr_assert_not_null(strstr(why, "not after part"), "%s", why);
    /* compact indices cannot descend: the encoder refuses them, and
     * version 2's u32 ones are refused on decoding */
    cr_assert_eq(roundtrip_segs(PROTO_OP_PUSH, PROTO_CODEC_SPARSE, split, 2,
                                idx, val, 5, &out, why, sizeof(why)),
                 FLPS_EINVAL);
    {
        const uint32_t up[5] = {0, 1, 2, 0, 1};
        proto_msg m;
        proto_frame f[PROTO_MAX_FRAMES];
        void *hdr = NULL;
        size_t hl, nf;

        sparse_of(&m, PROTO_OP_PUSH, up, val, 5, NULL, 0);
        m.nsegs = 2;
        m.segs = split;
        cr_assert_eq(proto_msg_encode(&m, &hdr, &hl, f, &nf), FLPS_OK);
        as_version2(f, nf, 1, 0, idx, 5, NULL, 0);
        cr_assert_eq(proto_msg_decode(f, nf, &out, why, sizeof(why)),
                     FLPS_EPROTO);
        cr_assert_not_null(strstr(why, "ascending"), "%s", why);
        free(hdr);
    }
    /* the encoder refuses counts that do not add up */
    cr_assert_eq(roundtrip_segs(PROTO_OP_PUSH, PROTO_CODEC_SPARSE, short_, 2,
                                idx, val, 5, &out, why, sizeof(why)),
                 FLPS_EINVAL);
    /* only sparse pushes and updates carry segments */
    cr_assert_eq(roundtrip_segs(PROTO_OP_PUSH, PROTO_CODEC_DENSE, back, 2, idx,
                                val, 5, &out, why, sizeof(why)),
                 FLPS_EINVAL);
}

/* ---- compact index frames (version 3) ---- */

/* A sparse PUSH of n indices at idx, encoded; its index frame's length
 * in *idxlen. Round trips to the same indices. */
static void compact_round_trip(const uint32_t *idx, uint32_t n, size_t *idxlen)
{
    float *val = calloc(n ? n : 1, sizeof(float));
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    proto_msg m, d;
    char err[ERRLEN] = "";

    cr_assert_not_null(val);
    sparse_of(&m, PROTO_OP_PUSH, idx, val, n, NULL, 0);
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(nf, 3);
    cr_assert_eq(hlen, f[0].len + f[1].len,
                 "the index frame follows the "
                 "header in its buffer");
    *idxlen = f[1].len;
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.wire_version, PROTO_VERSION);
    cr_assert_eq(d.n, n);
    cr_assert_eq(memcmp(d.idx, idx, (size_t)n * sizeof(*idx)), 0);
    cr_assert_not_null(d.expanded);
    proto_msg_fini(&d);
    cr_assert_null(d.expanded);
    free(hdr);
    free(val);
}

Test(msg, compact_indices_take_a_byte_per_gap_below_128_and_round_trip)
{
    /* gaps (index - previous - 1): 0, 127 | 128, 16383 | 16384, 2^21 - 1 |
     * 2^21: 1, 1, 2, 2, 3, 3, 4 bytes; then 2^32 - 1, a gap over 2^28: 5 */
    uint32_t idx[8];
    const uint32_t gaps[7] = {0,       127, 128, 16383, 16384, (1u << 21) - 1,
                              1u << 21};
    size_t len = 0;
    uint32_t at = 0;

    for (int i = 0; i < 7; i++) {
        at = i == 0 ? gaps[0] : at + 1 + gaps[i];
        idx[i] = at;
    }
    idx[7] = UINT32_MAX;
    compact_round_trip(idx, 8, &len);
    cr_assert_eq(len, 1 + 1 + 2 + 2 + 3 + 3 + 4 + 5);

    /* 1% of 65,536 elements, evenly: gaps of 99, a byte each */
    {
        static uint32_t sparse[655];
        for (uint32_t i = 0; i < 655; i++)
            sparse[i] = 100 * i;
        compact_round_trip(sparse, 655, &len);
        cr_assert_eq(len, 655, "a byte per index, not 4");
    }
    /* the largest first index: 5 bytes */
    {
        const uint32_t top[1] = {UINT32_MAX};
        compact_round_trip(top, 1, &len);
        cr_assert_eq(len, 5);
    }
}

/* Hand-made version 3 sparse PUSH of n pairs: the index frame's bytes as
 * given, the values 0; refused with want and needle, *out untouched. */
static void expect_compact_refused(const unsigned char *bytes, size_t len,
                                   uint32_t n, flps_err want,
                                   const char *needle)
{
    hdr_spec s = spec_for(PROTO_OP_PUSH);
    float *val = calloc(n ? n : 1, sizeof(float));
    unsigned char *copy = malloc(len ? len : 1); /* exactly len bytes */
    proto_frame pl[2];

    cr_assert(val != NULL && copy != NULL);
    memcpy(copy, bytes, len);
    s.codec = PROTO_CODEC_SPARSE;
    s.n = n;
    pl[0].data = copy;
    pl[0].len = len;
    pl[1].data = val;
    pl[1].len = (size_t)n * sizeof(float);
    expect_hdr_refused(&s, pl, 2, want, needle);
    free(copy);
    free(val);
}

Test(msg, refuses_a_compact_index_frame_cut_off_or_with_bytes_left_over)
{
    const unsigned char ok[3] = {0x01, 0x03, 0x03};  /* 1, 5, 9 */
    const unsigned char two[3] = {0x01, 0x83, 0x03}; /* 1, 389 */
    const unsigned char cut[3] = {0x01, 0x03, 0x83};
    const unsigned char more[4] = {0x01, 0x03, 0x03, 0x00};

    expect_compact_refused(two, 3, 3, FLPS_EPROTO, "entry 2 is cut off");
    expect_compact_refused(cut, 3, 3, FLPS_EPROTO, "entry 2 is cut off");
    expect_compact_refused(more, 4, 3, FLPS_EPROTO,
                           "index frame has 1 bytes after its 3 entries");
    /* the frame as encoded decodes */
    {
        size_t len;
        compact_round_trip(idx3, 3, &len);
        cr_assert_eq(len, sizeof(ok));
    }
}

Test(msg, refuses_a_varint_longer_than_5_bytes_or_not_in_its_shortest_form)
{
    const unsigned char six[6] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    const unsigned char padded[2] = {0x81, 0x00}; /* 1, in 2 bytes */
    const unsigned char zero2[2] = {0x80, 0x00};  /* 0, in 2 bytes */

    expect_compact_refused(six, 6, 1, FLPS_EPROTO, "longer than 5 bytes");
    expect_compact_refused(padded, 2, 1, FLPS_EPROTO, "shortest form");
    expect_compact_refused(zero2, 2, 1, FLPS_EPROTO, "shortest form");
}

Test(msg, refuses_compact_indices_past_2_to_the_32)
{
    /* 2^32 - 1, then a gap of 0: 2^32 */
    const unsigned char wrap[6] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x00};
    /* a first index of 2^33 - 1 in 5 bytes */
    const unsigned char big[5] = {0xff, 0xff, 0xff, 0xff, 0x1f};

    expect_compact_refused(wrap, 6, 2, FLPS_EPROTO, "past 2^32 - 1");
    expect_compact_refused(big, 5, 1, FLPS_EPROTO, "past 2^32 - 1");
    /* 2^32 - 1 alone is an index */
    {
        const uint32_t top[1] = {UINT32_MAX};
        size_t len;
        compact_round_trip(top, 1, &len);
    }
}

Test(msg, refuses_more_compact_indices_than_bytes_before_allocating)
{
    const unsigned char three[3] = {0x01, 0x03, 0x03};
    hdr_spec s = spec_for(PROTO_OP_PUSH);
    proto_frame pl[2] = {{three, 3}, {val3, sizeof(val3)}};

    /* 2^30 indices in 3 bytes: refused by the count, nothing allocated
     * (an allocation would fail: the test's hook) */
    s.codec = PROTO_CODEC_SPARSE;
    s.n = 1u << 30;
    flps_alloc_fail_at(1);
    expect_hdr_refused(&s, pl, 2, FLPS_EPROTO,
                       "index frame has 3 bytes; 1073741824 indices take at "
                       "least as many");
    flps_alloc_fail_at(0);
}

Test(msg, a_compact_rejected_index_frame_round_trips_and_is_checked)
{
    const uint32_t rej[3] = {0, 1, 300};
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0;
    void *hdr = encode_update3(rej, 3, f, &nf);
    proto_msg d;
    char err[ERRLEN] = "";

    cr_assert_eq(f[3].len, 1 + 1 + 2, "gaps 0, 0, 298");
    cr_assert_eq((const char *)f[3].data, (const char *)f[1].data + f[1].len,
                 "after the header and the index frame, in its buffer");
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(memcmp(d.idx, idx3, sizeof(idx3)), 0);
    cr_assert_eq(memcmp(d.rej, rej, sizeof(rej)), 0);
    proto_msg_fini(&d);
    /* one byte short, one byte over */
    f[3].len = 3;
    expect_refused(f, nf, FLPS_EPROTO, "rejected-index frame: entry 2 is cut");
    free(hdr);
    {
        hdr_spec s = spec_for(PROTO_OP_UPDATE);
        const unsigned char ix[3] = {0x01, 0x03, 0x03};
        const unsigned char rx[2] = {0x00, 0x00};
        proto_frame pl[3] = {{ix, 3}, {val3, sizeof(val3)}, {rx, 2}};
        s.codec = PROTO_CODEC_SPARSE;
        s.n = 3;
        s.nrej = 1;
        expect_hdr_refused(&s, pl, 3, FLPS_EPROTO,
                           "rejected-index frame has 1 bytes after its 1 "
                           "entries");
        s.nrej = 3;
        expect_hdr_refused(&s, pl, 3, FLPS_EPROTO,
                           "rejected-index frame has 2 bytes; 3 indices take "
                           "at least as many");
    }
}

Test(msg, version_2_messages_still_decode_with_u32_indices)
{
    const uint32_t rej[2] = {1, 9}, desc[2] = {9, 1};
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0;
    void *hdr = encode_update3(rej, 2, f, &nf);
    proto_msg d;
    char err[ERRLEN] = "";

    as_version2(f, nf, 1, 1, idx3, 3, rej, 2);
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.wire_version, 2);
    cr_assert_eq(d.idx, idx3, "version 2 indices are read in place");
    cr_assert_eq(d.rej, rej);
    cr_assert_null(d.expanded);
    proto_msg_fini(&d);
    /* rejected indices ascend in version 2 as well */
    f[3].data = desc;
    expect_refused(f, nf, FLPS_EPROTO,
                   "rejected indices are not strictly ascending at position "
                   "1 (1 after 9)");
    free(hdr);
    {
        hdr_spec s = spec_for(PROTO_OP_PULL);
        s.v = PROTO_VERSION_MIN - 1;
        expect_hdr_refused(&s, NULL, 0, FLPS_EPROTO, "reads 2 to 3");
    }
}

Test(msg, expanded_indices_outlive_the_message_once_taken)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;
    void *hdr = encode_sparse_push(idx3, val3, 3, f, &nf);
    proto_msg d, v;
    uint32_t *e;
    char err[ERRLEN] = "";

    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    e = proto_msg_take_expanded(&d);
    cr_assert_eq((const uint32_t *)e, d.idx);
    cr_assert_null(d.expanded);
    proto_msg_fini(&d); /* frees nothing of e */
    cr_assert_eq(memcmp(e, idx3, sizeof(idx3)), 0);
    flps_free(e);
    cr_assert_null(proto_msg_take_expanded(&d), "nothing left to take");
    free(hdr);

    /* a segment's view owns nothing */
    {
        const uint32_t idx[4] = {0, 5, 1, 2};
        const float val[4] = {1, 2, 3, 4};
        proto_seg segs[2] = {{3, 2, 0, 0}, {7, 2, 0, 0}};
        proto_msg out;
        char why[160];
        cr_assert_eq(roundtrip_segs(PROTO_OP_PUSH, PROTO_CODEC_SPARSE, segs, 2,
                                    idx, val, 4, &out, why, sizeof(why)),
                     FLPS_OK, "%s", why);
        proto_msg_seg_view(&out, 1, 2, 0, &v);
        cr_assert_null(v.expanded);
        cr_assert_eq(v.idx[1], 2);
        proto_msg_fini(&out);
    }
}

Test(msg, decode_fails_cleanly_when_the_indices_cannot_be_expanded)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;
    void *hdr = encode_sparse_push(idx3, val3, 3, f, &nf);

    flps_alloc_fail_at(1); /* no segments: the expansion is the first */
    expect_refused(f, nf, FLPS_ENOMEM, "out of memory for 3 indices");
    flps_alloc_fail_at(0);
    free(hdr);
}

Test(msg, segments_of_an_update_carry_their_compact_rejected_indices)
{
    const uint32_t idx[5] = {0, 5, 1, 2, 9};
    const uint32_t rej[3] = {4, 0, 8}; /* part 3: 4; part 7: 0, 8 */
    const float val[5] = {1, 2, 3, 4, 5};
    proto_seg segs[2] = {{3, 2, 1, 10}, {7, 3, 2, 11}};
    proto_msg m, d, v;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    char err[ERRLEN] = "";

    sparse_of(&m, PROTO_OP_UPDATE, idx, val, 5, rej, 3);
    m.nsegs = 2;
    m.segs = segs;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(f[1].len, 5, "each segment's run starts again at 0");
    cr_assert_eq(f[3].len, 3);
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    proto_msg_seg_view(&d, 1, 2, 1, &v);
    cr_assert_eq(v.n, 3);
    cr_assert_eq(v.idx[0], 1);
    cr_assert_eq(v.nrej, 2);
    cr_assert_eq(v.rej[0], 0);
    cr_assert_eq(v.rej[1], 8);
    proto_msg_fini(&d);
    free(hdr);
}

Test(msg, an_older_version_is_written_only_for_messages_without_indices)
{
    proto_msg m, d;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    char err[ERRLEN] = "";

    /* an ERROR answering a version 2 peer, in version 2 */
    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_ERROR;
    strcpy(m.job, "job");
    m.status = FLPS_EPROTO;
    strcpy(m.text, "upgrade");
    m.wire_version = 2;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.wire_version, 2);
    proto_msg_fini(&d);
    free(hdr);
    /* a message with index frames always in this version */
    sparse_of(&m, PROTO_OP_PUSH, idx3, val3, 3, NULL, 0);
    m.wire_version = 2;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(proto_msg_decode(f, nf, &d, err, sizeof(err)), FLPS_OK, "%s",
                 err);
    cr_assert_eq(d.wire_version, PROTO_VERSION);
    cr_assert_eq(memcmp(d.idx, idx3, sizeof(idx3)), 0);
    proto_msg_fini(&d);
    free(hdr);
    /* no version nobody reads */
    hdr = NULL;
    m.wire_version = PROTO_VERSION_MIN - 1;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    m.wire_version = PROTO_VERSION + 1;
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_EINVAL);
    cr_assert_null(hdr);
}
