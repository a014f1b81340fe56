/* Writes the fuzz targets' seed corpus (tests/fuzz/corpus/): valid
 * messages of every kind, message sequences that take a shard through
 * registration, initial values, iterations of each aggregation mode,
 * checkpoints and pulls, and the checkpoint and log files a real shard
 * writes on such a sequence; for the decoders of plans, credentials and
 * the RDMA transport, valid inputs and near-misses of each. The corpus is
 * kept in the repository; this regenerates it after the wire format or the
 * file formats change:
 *     scripts/fuzz.sh --seeds
 * Usage: make_seeds DIR (DIR/msg, DIR/shard, DIR/persist, DIR/plan,
 * DIR/creds and, in a build with RDMA, DIR/rdma_frame and
 * DIR/rdma_exchange are written). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/creds.h"
#include "ps/persist.h"
#include "ps/shard.h"
#include "services/plan.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_quiet.h"
#include "tests/support/msg_v2.h"
#include "tests/support/rx_copy.h"
#if FLPS_FUZZ_RDMA
#include "rdma/exchange.h"
#include "rdma/frame.h"
#endif

typedef struct seq {
    uint8_t *buf;
    size_t len, cap;
} seq;

static void die(const char *what)
{
    fprintf(stderr, "make_seeds: %s\n", what);
    exit(1);
}

static void put(seq *s, const void *p, size_t n)
{
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2 + 256;
        s->buf = realloc(s->buf, s->cap);
        if (s->buf == NULL)
            die("out of memory");
    }
    if (n > 0) /* an empty frame may have no data (NULL) */
        memcpy(s->buf + s->len, p, n);
    s->len += n;
}

/* Append the message of frames f, from peer, in the fuzz input format. */
static void put_frames(seq *s, uint8_t peer, const proto_frame *f, size_t nf)
{
    uint8_t head[2] = {peer, (uint8_t)nf};

    put(s, head, 2);
    for (size_t i = 0; i < nf; i++) {
        uint8_t l[2] = {(uint8_t)(f[i].len & 0xff), (uint8_t)(f[i].len >> 8)};

        if (f[i].len > 0xffff)
            die("a seed frame over 64 KiB");
        put(s, l, 2);
        put(s, f[i].data, f[i].len);
    }
}

/* Append m, from peer, in the fuzz input format: as this version writes
 * it, or (v2) as version 2 did (u32 index frames). */
static void add_as(seq *s, uint8_t peer, const proto_msg *m, int v2)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen;
    void *hdr = NULL;

    if (proto_msg_encode(m, &hdr, &hlen, f, &nf) != FLPS_OK)
        die("cannot encode a seed message");
    if (v2 && !msg_frames_as_version2(f, nf, m->codec == PROTO_CODEC_SPARSE,
                                      m->op == PROTO_OP_UPDATE, m->idx, m->n,
                                      m->rej, m->nrej))
        die("a header that does not start with v = 3");
    put_frames(s, peer, f, nf);
    free(hdr);
}

static void add(seq *s, uint8_t peer, const proto_msg *m)
{
    add_as(s, peer, m, 0);
}

/* The marker fuzz_shard reads as "write a checkpoint now". */
static void add_checkpoint_now(seq *s)
{
    uint8_t m[2] = {255, 0};

    put(s, m, 2);
}

static void save(const char *dir, const char *name, const seq *s)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(s->buf, 1, s->len, f) != s->len || fclose(f))
        die(path);
}

static proto_msg base(uint8_t op, uint32_t rank, uint32_t part, uint64_t iter)
{
    proto_msg m;

    memset(&m, 0, sizeof(m));
    m.op = op;
    strcpy(m.job, "job");
    m.rank = rank;
    m.part = part;
    m.iter = iter;
    return m;
}

/* The layout of every sequence: w0 of 10 and w1 of 6 elements in parts of
 * 8 on one shard: p0 = w0[0,8), p1 = w0[8,10), p2 = w1[0,6). */
static proto_tensor tensors[2] = {{"w0", 10}, {"w1", 6}};
static const uint32_t numel[3] = {8, 2, 6};

static proto_jobcfg jobcfg(uint8_t agg, uint8_t mode, const char *comp)
{
    proto_jobcfg c;

    memset(&c, 0, sizeof(c));
    c.shard = 0;
    c.nshards = 1;
    c.workers = 2;
    c.part_size = 8;
    c.mode = mode;
    c.agg = agg;
    c.density = 0.25;
    c.lr = 0.1;
    c.lr_schedule = PROTO_LR_CONSTANT;
    c.iterations = 100;
    snprintf(c.compression, sizeof(c.compression), "%s", comp);
    return c;
}

static void add_register(seq *s, const proto_jobcfg *c)
{
    for (uint32_t r = 0; r < c->workers; r++) {
        proto_msg m = base(PROTO_OP_REGISTER, r, 0, 0);

        m.cfg = *c;
        m.tensors = tensors;
        m.ntensors = 2;
        add(s, (uint8_t)(1 + r), &m);
    }
}

static void add_init(seq *s)
{
    static float v[8] = {0.5f, -0.25f, 1, 2, -3, 0.125f, 4, -1};

    for (uint32_t p = 0; p < 3; p++) {
        proto_msg m = base(PROTO_OP_INIT, 0, p, 0);

        m.codec = PROTO_CODEC_DENSE;
        m.n = numel[p];
        m.val = v;
        add(s, 1, &m);
    }
}

static void add_pushes(seq *s, uint8_t agg, uint64_t iter)
{
    static const uint32_t idx[2][2] = {{0, 1}, {1, 5}};
    static const float val[2][2] = {{0.5f, -1}, {2, 0.25f}};
    static float dense[8] = {0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f};

    for (uint32_t p = 0; p < 3; p++)
        for (uint32_t r = 0; r < 2; r++) {
            proto_msg m = base(PROTO_OP_PUSH, r, p, iter);

            if (agg == PROTO_AGG_DENSE) {
                m.codec = PROTO_CODEC_DENSE;
                m.n = numel[p];
                m.val = dense;
            } else {
                m.codec = PROTO_CODEC_SPARSE;
                m.n = numel[p] > idx[r][1] ? 2 : 1;
                m.idx = idx[r];
                m.val = val[r];
            }
            add(s, (uint8_t)(1 + r), &m);
        }
}

/* A joined sparse push of every part from each rank (protocol segs). */
static void add_joined_pushes(seq *s, uint64_t iter)
{
    static const uint32_t idx[4] = {2, 1, 0, 3};
    static const float val[4] = {1, -2, 0.5f, 0.75f};
    proto_seg segs[3] = {{0, 1, 0, 0}, {1, 2, 0, 0}, {2, 1, 0, 0}};
    uint32_t sidx[4] = {idx[0], 0, idx[1], idx[3]};

    for (uint32_t r = 0; r < 2; r++) {
        proto_msg m = base(PROTO_OP_PUSH, r, 0, iter);

        m.codec = PROTO_CODEC_SPARSE;
        m.n = 4;
        m.idx = sidx;
        m.val = val;
        m.nsegs = 3;
        m.segs = segs;
        add(s, (uint8_t)(1 + r), &m);
    }
    (void)idx;
}

static void add_pull_and_checkpoint_request(seq *s)
{
    proto_msg m = base(PROTO_OP_PULL, 1, 2, 0);

    add(s, 2, &m);
    m = base(PROTO_OP_CHECKPOINT, 0, 0, 0);
    add(s, 1, &m);
}

/* A sequence for agg/mode: register, init, three iterations with a
 * checkpoint after the first, then (with requests) a pull and a checkpoint
 * request. */
static void sequence(seq *s, uint8_t agg, uint8_t mode, const char *comp,
                     int requests)
{
    proto_jobcfg c = jobcfg(agg, mode, comp);

    add_register(s, &c);
    add_init(s);
    add_pushes(s, agg, 0);
    add_checkpoint_now(s);
    add_pushes(s, agg, 1);
    if (agg != PROTO_AGG_DENSE)
        add_joined_pushes(s, 2);
    else
        add_pushes(s, agg, 2);
    if (requests)
        add_pull_and_checkpoint_request(s);
}

/* Sparse pushes of no pairs, alone and in segments, one per file for
 * fuzz_msg (which gives every empty frame NULL data, as an encoder's
 * frames of no pairs have): the decoder once offset that NULL. */
static void empty_pushes(const char *msgdir)
{
    proto_seg segs[2] = {{0, 0, 0, 0}, {2, 0, 0, 0}};
    proto_msg m = base(PROTO_OP_PUSH, 1, 0, 0);
    seq s = {0};

    m.codec = PROTO_CODEC_SPARSE;
    add(&s, 2, &m);
    save(msgdir, "empty-00", &s);
    s.len = 0;
    m.nsegs = 2;
    m.segs = segs;
    add(&s, 2, &m);
    save(msgdir, "empty-01", &s);
    free(s.buf);
}

/* A sparse op message of n pairs at idx and val, alone in file name of
 * msgdir, as version 3 writes it or (v2) as version 2 did. */
static void save_sparse(const char *msgdir, const char *name, int v2,
                        proto_msg m, uint32_t n, const uint32_t *idx,
                        const float *val)
{
    seq s = {0};

    m.codec = PROTO_CODEC_SPARSE;
    m.n = n;
    m.idx = idx;
    m.val = val;
    add_as(&s, 1, &m, v2);
    save(msgdir, name, &s);
    free(s.buf);
}

/* Messages with compact index frames (version 3) beyond what a shard's
 * sequence holds: an UPDATE with rejected indices, alone and of several
 * parts, a sparse PULL_REPLY, gaps of every varint length; and version
 * 2's u32 forms of a push and an update, still read. One per file for
 * fuzz_msg. */
static void compact_seeds(const char *msgdir)
{
    static const uint32_t idx[6] = {0, 127, 255, 16639, 2113535, UINT32_MAX};
    static const uint32_t seg_idx[5] = {0, 5, 1, 2, 9};
    static const uint32_t rej[3] = {1, 2, 9};
    static const float val[6] = {1, -2, 0.5f, 4, -8, 16};
    proto_seg segs[2] = {{3, 2, 0, 10}, {7, 3, 3, 11}};
    proto_msg upd = base(PROTO_OP_UPDATE, 1, 4, 7);

    upd.version = 8;
    upd.nrej = 3;
    upd.rej = rej;
    save_sparse(msgdir, "compact-00", 0, upd, 6, idx, val);
    save_sparse(msgdir, "compact-01", 1, upd, 6, idx, val);
    save_sparse(msgdir, "compact-03", 0, base(PROTO_OP_PULL_REPLY, 1, 4, 7), 6,
                idx, val);
    save_sparse(msgdir, "compact-04", 1, base(PROTO_OP_PUSH, 1, 4, 7), 6, idx,
                val);
    upd.nsegs = 2;
    upd.segs = segs;
    save_sparse(msgdir, "compact-02", 0, upd, 5, seg_idx, val);
}

/* REGISTERs of the even map (cfg's 16th field, the piece), alone and with
 * a warm-up and a server optimizer beside it, and the same registration
 * then a shard's first dense pushes of that map. One per file for
 * fuzz_msg; the sequence for fuzz_shard. */
static void even_map_seeds(const char *msgdir, const char *shdir)
{
    proto_jobcfg c = jobcfg(PROTO_AGG_DENSE, PROTO_MODE_SSGD, "dense");
    static const float g[4] = {0.5f, -1, 0.25f, 2};
    seq s = {0};

    c.piece = 4;
    add_register(&s, &c);
    save(msgdir, "even-00", &s);
    s.len = 0;
    c.density_warmup = 0;
    c.server_opt = PROTO_SOPT_MOMENTUM;
    c.server_beta = 0.9;
    add_register(&s, &c);
    save(msgdir, "even-01", &s);
    s.len = 0;
    c.server_opt = PROTO_SOPT_SGD;
    c.server_beta = 0;
    add_register(&s, &c);
    for (uint32_t r = 0; r < c.workers; r++) {
        proto_msg m = base(PROTO_OP_PUSH, r, 0, 0);
        m.codec = PROTO_CODEC_DENSE;
        m.n = 4;
        m.val = g;
        add(&s, (uint8_t)(1 + r), &m);
    }
    save(shdir, "even", &s);
    free(s.buf);
}

static void ignore_reply(void *arg, uint32_t peer, const ps_reply *reply)
{
    (void)arg;
    (void)peer;
    (void)reply;
}

/* Run seq through a real shard with its files in dir; leaves them there. */
static void run_shard(const char *dir, const seq *s)
{
    ps_shard_config c;
    ps_shard *sh;
    size_t pos = 0;
    fuzz_msg fm;

    memset(&c, 0, sizeof(c));
    c.job = "job";
    c.nshards = 1;
    c.ckpt_dir = dir;
    c.send = ignore_reply;
    c.ckpt_request_interval_s = -1;
    if (ps_shard_create(&c, 0, &sh) != FLPS_OK)
        die("cannot create a shard");
    while (fuzz_next(s->buf, s->len, &pos, &fm)) {
        transport_rx *rx = NULL;

        if (fm.peer == 255 && fm.nframes == 0) {
            if (ps_shard_checkpoint(sh) != FLPS_OK)
                die("the seed sequence's checkpoint failed");
        } else if (transport_rx_copy(fm.frames, fm.nframes, fm.peer, &rx) ==
                   FLPS_OK) {
            flps_err rc = ps_shard_handle(sh, rx);

            if (rc != FLPS_OK)
                fprintf(stderr, "make_seeds: a seed message was refused: %s\n",
                        flps_strerror(rc));
        }
        fuzz_msg_free(&fm);
    }
    ps_shard_destroy(sh);
}

static void save_file_with_prefix(const char *dir, const char *name,
                                  uint8_t prefix, const char *src)
{
    seq s = {0};
    FILE *f = fopen(src, "rb");
    uint8_t buf[4096];
    size_t n;

    if (f == NULL)
        die(src);
    put(&s, &prefix, 1);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        put(&s, buf, n);
    fclose(f);
    save(dir, name, &s);
    free(s.buf);
}

static void subdir(char *out, size_t len, const char *root, const char *name)
{
    snprintf(out, len, "%s/%s", root, name);
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        die(out);
}

static void save_bytes(const char *dir, const char *name, const void *p,
                       size_t n)
{
    seq s = {0};

    put(&s, p, n);
    save(dir, name, &s);
    free(s.buf);
}

static void save_text(const char *dir, const char *name, const char *text)
{
    save_bytes(dir, name, text, strlen(text));
}

/* --- plans: profiles, the plans made from them, and near-misses -------- */

#define SEED_PROFILE_HEAD                                                      \
    "{\"event\":\"profile\",\"iteration\":25,\"workers\":2,\"alpha\":5e-05,"   \
    "\"beta\":1e-09,\"layers\":["
#define SEED_PLAN_HEAD "{\"version\":3,\"layers\":["
#define SEED_PLAN_TAIL                                                         \
    "],\"predicted_iteration_seconds\":0.001,\"dense_iteration_seconds\":"     \
    "0.002}"

static void plan_seeds(const char *root)
{
    static const struct {
        const char *name, *text;
    } profiles[] = {
        {"profile-mlp", SEED_PROFILE_HEAD
         "{\"name\":\"fc1.weight\",\"numel\":200704,\"t_backward\":0.0003},"
         "{\"name\":\"fc1.bias\",\"numel\":256,\"t_backward\":0.00001},"
         "{\"name\":\"fc2.weight\",\"numel\":65536,\"t_backward\":0.0002},"
         "{\"name\":\"fc2.bias\",\"numel\":256,\"t_backward\":0.00001},"
         "{\"name\":\"fc3.weight\",\"numel\":2560,\"t_backward\":0.00005},"
         "{\"name\":\"fc3.bias\",\"numel\":10,\"t_backward\":0.000001}]}"},
        {"profile-one", SEED_PROFILE_HEAD
         "{\"name\":\"w\",\"numel\":8192,\"t_backward\":0.001}]}"},
        {"profile-slow-net",
         "{\"event\":\"profile\",\"iteration\":0,\"workers\":64,"
         "\"alpha\":0.01,\"beta\":1e-06,\"layers\":["
         "{\"name\":\"conv\",\"numel\":4294967295,\"t_backward\":0},"
         "{\"name\":\"fc\",\"numel\":1000000,\"t_backward\":1e300}]}"},
    };
    static const struct {
        const char *name, *text;
    } misses[] = {
        {"profile-workers-0",
         "{\"event\":\"profile\",\"iteration\":1,\"workers\":0,\"alpha\":1,"
         "\"beta\":1,\"layers\":[{\"name\":\"w\",\"numel\":1,"
         "\"t_backward\":0}]}"},
        {"profile-name-twice",
         SEED_PROFILE_HEAD "{\"name\":\"w\",\"numel\":1,\"t_backward\":0},"
                           "{\"name\":\"w\",\"numel\":2,\"t_backward\":0}]}"},
        {"profile-overflow", SEED_PROFILE_HEAD
         "{\"name\":\"w\",\"numel\":8192,\"t_backward\":1e999}]}"},
        {"profile-duplicate-key", "{\"event\":\"profile\",\"event\":\"x\"}"},
        {"plan-name-twice", SEED_PLAN_HEAD
         "{\"name\":\"w\",\"numel\":4,\"codec\":\"dense\",\"density\":1},"
         "{\"name\":\"w\",\"numel\":4,\"codec\":\"dense\",\"density\":"
         "1}" SEED_PLAN_TAIL},
        {"plan-topk-0",
         SEED_PLAN_HEAD "{\"name\":\"w\",\"numel\":4,\"codec\":\"topk\","
                        "\"density\":0}" SEED_PLAN_TAIL},
        {"plan-dense-half",
         SEED_PLAN_HEAD "{\"name\":\"w\",\"numel\":4,\"codec\":\"dense\","
                        "\"density\":0.5}" SEED_PLAN_TAIL},
        {"plan-numel-2to32",
         SEED_PLAN_HEAD "{\"name\":\"w\",\"numel\":4294967296,\"codec\":"
                        "\"dense\",\"density\":1}" SEED_PLAN_TAIL},
        {"plan-no-times", SEED_PLAN_HEAD
         "{\"name\":\"w\",\"numel\":4,\"codec\":\"topk\",\"density\":0.5}]}"},
        {"plan-no-layers", "{\"version\":3,\"layers\":[]}"},
    };
    char dir[400];

    subdir(dir, sizeof(dir), root, "plan");
    for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++) {
        char name[64], err[256], *text = NULL;

        save_text(dir, profiles[i].name, profiles[i].text);
        if (plan_from_profile(profiles[i].text, i + 1, &text, err,
                              sizeof(err)) != FLPS_OK)
            die(err);
        snprintf(name, sizeof(name), "plan-of-%s", profiles[i].name);
        save_text(dir, name, text);
        free(text);
    }
    for (size_t i = 0; i < sizeof(misses) / sizeof(misses[0]); i++)
        save_text(dir, misses[i].name, misses[i].text);
}

/* --- credentials ------------------------------------------------------- */

/* The key pairs of ZeroMQ's CURVE test vectors (RFC 26): public values,
 * valid Z85. */
static flps_creds seed_creds(int curve)
{
    flps_creds c;

    memset(&c, 0, sizeof(c));
    snprintf(c.secret, sizeof(c.secret), "%s",
             "00112233445566778899aabbccddeeff"
             "0123456789abcdef0123456789abcdef");
    if (curve) {
        c.has_curve = 1;
        snprintf(c.server_public, sizeof(c.server_public), "%s",
                 "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
        snprintf(c.server_secret, sizeof(c.server_secret), "%s",
                 "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6");
        snprintf(c.client_public, sizeof(c.client_public), "%s",
                 "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID");
        snprintf(c.client_secret, sizeof(c.client_secret), "%s",
                 "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs");
    }
    return c;
}

static void creds_seeds(const char *root)
{
    static const struct {
        const char *name, *text;
    } misses[] = {
        {"three-curve-keys",
         "secret=00112233445566778899aabbccddeeff\n"
         "curve_server_public=rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n"
         "curve_server_secret=JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\n"
         "curve_client_public=Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\n"},
        {"upper-crlf-comments",
         "# a comment\r\n\r\n  secret = 00112233445566778899AABBCCDDEEFF  "
         "\r\n\t# another\r\n"},
        {"secret-odd", "secret=00112233445566778899aabbccddeef\n"},
        {"secret-twice", "secret=00112233445566778899aabbccddeeff\n"
                         "secret=00112233445566778899aabbccddeeff\n"},
        {"unknown-key", "secret=00112233445566778899aabbccddeeff\n"
                        "curve_server_public_key=abc\n"},
        {"no-secret", "# nothing but a comment\n"},
        {"not-key-value", "secret 00112233445566778899aabbccddeeff\n"},
        {"key-not-z85",
         "secret=00112233445566778899aabbccddeeff\n"
         "curve_client_secret=D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%c\"\n"},
    };
    static const char nul[] = "secret=00112233445566778899aabb\0ccddeeff\n";
    char dir[400], text[CREDS_FILE_MAX];

    subdir(dir, sizeof(dir), root, "creds");
    for (int curve = 0; curve <= 1; curve++) {
        flps_creds c = seed_creds(curve);

        if (creds_format(&c, text, sizeof(text)) != FLPS_OK)
            die("cannot format seed credentials");
        save_text(dir, curve ? "curve" : "secret-only", text);
    }
    for (size_t i = 0; i < sizeof(misses) / sizeof(misses[0]); i++)
        save_text(dir, misses[i].name, misses[i].text);
    save_bytes(dir, "nul-byte", nul, sizeof(nul) - 1);
}

#if FLPS_FUZZ_RDMA
/* --- the RDMA transport's frames and connection exchange --------------- */

/* The message of n frames of lens (byte j of frame i is i * 7 + j) with
 * the credit counts, encoded at out (cap bytes); returns its length. */
static size_t encode_frames(const size_t *lens, size_t n, uint64_t credits,
                            uint64_t freed, unsigned char *out, size_t cap)
{
    transport_frame f[RDMA_FRAME_MAX];
    size_t used = 0;
    flps_err rc;

    for (size_t i = 0; i < n; i++) {
        unsigned char *d;

        f[i].buf = proto_buf_create(lens[i] ? lens[i] : 1);
        if (f[i].buf == NULL)
            die("out of memory");
        f[i].off = 0;
        f[i].len = lens[i];
        d = proto_buf_data(f[i].buf);
        for (size_t j = 0; j < lens[i]; j++)
            d[j] = (unsigned char)(i * 7 + j);
    }
    rc = rdma_frame_encode(f, n, credits, freed, out, cap, &used);
    for (size_t i = 0; i < n; i++)
        proto_buf_release(f[i].buf);
    if (rc != FLPS_OK)
        die("cannot encode a seed RDMA message");
    return used;
}

/* That message after fuzz_rdma_frame's limit byte. */
static void save_frames(const char *dir, const char *name, uint8_t limit,
                        const size_t *lens, size_t n, uint64_t credits,
                        uint64_t freed)
{
    unsigned char b[512];
    size_t used = encode_frames(lens, n, credits, freed, b + 1, sizeof(b) - 1);

    b[0] = limit;
    save_bytes(dir, name, b, used + 1);
}

/* The message of lens {10, 20} (80 bytes after the limit byte, none) with
 * the byte at off set to v (off 0: none), and delta bytes more (zeros) or
 * fewer. */
static void save_frames_patched(const char *dir, const char *name, size_t off,
                                uint8_t v, int delta)
{
    static const size_t lens[2] = {10, 20};
    unsigned char b[128];
    size_t used;

    memset(b, 0, sizeof(b));
    used = encode_frames(lens, 2, 1, 2, b + 1, sizeof(b) - 1);
    if (used + 1 + (size_t)(delta > 0 ? delta : 0) > sizeof(b) ||
        (delta < 0 && (size_t)-delta > used))
        die("a seed RDMA message patched beyond its buffer");
    b[0] = 1; /* no limit */
    if (off > 0)
        b[off] = v;
    save_bytes(dir, name, b, (size_t)((long)used + 1 + delta));
}

static void rdma_frame_seeds(const char *root)
{
    static const size_t one[] = {3}, two[] = {10, 20}, four[] = {0, 8, 1, 17},
                        five[] = {6, 0, 9, 4, 2};
    size_t many[RDMA_FRAME_MAX] = {0};
    char dir[400];

    subdir(dir, sizeof(dir), root, "rdma_frame");
    save_frames(dir, "empty", 1, NULL, 0, 0, 0);
    save_frames(dir, "one", 1, one, 1, 5, 0);
    save_frames(dir, "two", 1, two, 2, 1, 2);
    save_frames(dir, "four", 1, four, 4, 1u << 20, 7);
    save_frames(dir, "five", 1, five, 5, 3, 3);
    save_frames(dir, "sixteen-empty", 1, many, RDMA_FRAME_MAX, 0, 0);
    save_frames(dir, "two-limit-24", 6, two, 2, 1, 2);
    save_frames(dir, "two-over-limit-16", 4, two, 2, 1, 2);
    save_frames_patched(dir, "bad-tag", 1, 'X', 0);
    save_frames_patched(dir, "count-17", 5, RDMA_FRAME_MAX + 1, 0);
    save_frames_patched(dir, "count-3", 5, 3, 0);
    save_frames_patched(dir, "frame-past-end", 33, 200, 0);
    save_frames_patched(dir, "frame-shorter", 33, 9, 0);
    save_frames_patched(dir, "cut", 0, 0, -8);
    save_frames_patched(dir, "trailing", 0, 0, 8);
}

/* A connector's HELLO as a RoCE v2 port sends it (no LID, a GID of
 * ::ffff:10.1.2.3). */
static rdma_xch seed_hello(void)
{
    rdma_xch x = {
        .type = RDMA_XCH_HELLO,
        .qp_num = 0x000a1b,
        .psn = 0x5c3f02,
        .mtu = 3,
        .gid_index = 1,
        .gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3},
        .credits = 64,
        .slot_bytes = 65536,
        .landing_addr = 0x7f3a20000000ull,
        .landing_len = (uint64_t)256 << 20,
        .landing_rkey = 0x1d2c,
        .ctrl_rkey = 0x1d2d,
        .ctrl_addr = 0x7f3a1ff00040ull,
        .max_message_bytes = (uint64_t)255 << 20,
        .session = 42,
    };

    return x;
}

/* x encoded, with the byte at off set to v (off < len) or cut to len. */
static void save_xch(const char *dir, const char *name, const rdma_xch *x,
                     size_t off, int v, size_t cut)
{
    unsigned char b[RDMA_XCH_MAX_BYTES];
    size_t n = 0;

    if (rdma_xch_encode(x, b, sizeof(b), &n) != FLPS_OK)
        die("cannot encode a seed exchange message");
    if (v >= 0 && off < n)
        b[off] = (unsigned char)v;
    save_bytes(dir, name, b, cut ? cut : n);
}

static void rdma_exchange_seeds(const char *root)
{
    rdma_xch hello = seed_hello(), accept = seed_hello(), qp1 = seed_hello();
    rdma_xch refuse, empty;
    char dir[400];

    subdir(dir, sizeof(dir), root, "rdma_exchange");
    accept.type = RDMA_XCH_ACCEPT;
    accept.landing_addr = 0;
    accept.landing_len = 0;
    memset(&refuse, 0, sizeof(refuse));
    refuse.type = RDMA_XCH_REFUSE;
    snprintf(refuse.text, sizeof(refuse.text), "%s",
             "the listener has no free slot (max_peers 4)");
    empty = refuse;
    empty.text[0] = '\0';
    save_xch(dir, "hello", &hello, 0, -1, 0);
    save_xch(dir, "accept", &accept, 0, -1, 0);
    save_xch(dir, "refuse", &refuse, 0, -1, 0);
    save_xch(dir, "refuse-empty", &empty, 0, -1, 0);
    save_xch(dir, "version-2", &hello, 4, 2, 0);
    save_xch(dir, "type-4", &hello, 6, 4, 0);
    qp1.qp_num = 1;
    save_xch(dir, "qp-0", &qp1, 8, 0, 0);
    save_xch(dir, "mtu-6", &hello, 18, 6, 0);
    save_xch(dir, "ctrl-unaligned", &hello, 68, 3, 0);
    save_xch(dir, "hello-cut", &hello, 0, -1, RDMA_XCH_BYTES - 1);
    save_xch(dir, "refuse-control", &refuse, 12, '\n', 0);
    save_xch(dir, "refuse-cut", &refuse, 0, -1, RDMA_XCH_REFUSE_BYTES + 3);
}
#endif

/* The corpora of the decoders with no shard behind them. */
static void decoder_seeds(const char *root)
{
    plan_seeds(root);
    creds_seeds(root);
#if FLPS_FUZZ_RDMA
    rdma_frame_seeds(root);
    rdma_exchange_seeds(root);
#endif
}

int main(int argc, char **argv)
{
    static const struct {
        uint8_t agg, mode;
        const char *comp, *name;
    } kinds[] = {
        {PROTO_AGG_GTOPK, PROTO_MODE_SSGD, "gtopk:0.25", "gtopk"},
        {PROTO_AGG_TOPK, PROTO_MODE_SSGD, "topk:0.25", "topk"},
        {PROTO_AGG_DENSE, PROTO_MODE_SSGD, "dense", "dense"},
        {PROTO_AGG_TOPK, PROTO_MODE_ASYNC, "topk:0.25", "async"},
    };
    char msgdir[400], shdir[400], pdir[400], tmp[] = "/tmp/flps-seeds-XXXXXX";

    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    fuzz_quiet();
    if (mkdir(argv[1], 0755) != 0 && errno != EEXIST)
        die(argv[1]);
    subdir(msgdir, sizeof(msgdir), argv[1], "msg");
    subdir(shdir, sizeof(shdir), argv[1], "shard");
    subdir(pdir, sizeof(pdir), argv[1], "persist");
    if (mkdtemp(tmp) == NULL)
        die("mkdtemp");
    empty_pushes(msgdir);
    compact_seeds(msgdir);
    even_map_seeds(msgdir, shdir);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        seq s = {0};
        char name[64], ck[256], wl[256];
        size_t pos = 0;
        fuzz_msg fm;
        int i = 0;

        seq files = {0};

        sequence(&s, kinds[k].agg, kinds[k].mode, kinds[k].comp, 1);
        sequence(&files, kinds[k].agg, kinds[k].mode, kinds[k].comp, 0);
        save(shdir, kinds[k].name, &s);
        /* Every message of the sequence, one per file, for fuzz_msg. */
        while (fuzz_next(s.buf, s.len, &pos, &fm)) {
            seq one = {0};
            uint8_t head[2] = {(uint8_t)fm.peer, (uint8_t)fm.nframes};

            put(&one, head, 2);
            for (size_t f = 0; f < fm.nframes; f++) {
                uint8_t l[2] = {(uint8_t)(fm.frames[f].len & 0xff),
                                (uint8_t)(fm.frames[f].len >> 8)};
                put(&one, l, 2);
                put(&one, fm.frames[f].data, fm.frames[f].len);
            }
            if (fm.nframes > 0) {
                snprintf(name, sizeof(name), "%s-%02d", kinds[k].name, i++);
                save(msgdir, name, &one);
            }
            free(one.buf);
            fuzz_msg_free(&fm);
        }
        /* The files a real shard writes for it: its checkpoint (after the
         * first iteration) and the log of the iterations after it. */
        run_shard(tmp, &files);
        persist_paths(tmp, 0, ck, wl, sizeof(ck));
        snprintf(name, sizeof(name), "ckpt-%s", kinds[k].name);
        save_file_with_prefix(pdir, name, 0, ck);
        snprintf(name, sizeof(name), "wal-%s", kinds[k].name);
        save_file_with_prefix(pdir, name, 1, wl);
        snprintf(name, sizeof(name), "wal-cut-%s", kinds[k].name);
        save_file_with_prefix(pdir, name, 3, wl);
        unlink(ck);
        unlink(wl);
        free(s.buf);
        free(files.buf);
    }
    rmdir(tmp);
    decoder_seeds(argv[1]);
    return 0;
}
