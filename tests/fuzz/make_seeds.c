/* Writes the fuzz targets' seed corpus (tests/fuzz/corpus/): valid
 * messages of every kind, message sequences that take a shard through
 * registration, initial values, iterations of each aggregation mode,
 * checkpoints and pulls, and the checkpoint and log files a real shard
 * writes on such a sequence. The corpus is kept in the repository; this
 * regenerates it after the wire format or the file formats change:
 *     scripts/fuzz.sh --seeds
 * Usage: make_seeds DIR (DIR/msg, DIR/shard, DIR/persist are written). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps/persist.h"
#include "ps/shard.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_quiet.h"

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
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

/* Append m, from peer, in the fuzz input format. */
static void add(seq *s, uint8_t peer, const proto_msg *m)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen;
    void *hdr = NULL;
    uint8_t head[2];

    if (proto_msg_encode(m, &hdr, &hlen, f, &nf) != FLPS_OK)
        die("cannot encode a seed message");
    head[0] = peer;
    head[1] = (uint8_t)nf;
    put(s, head, 2);
    for (size_t i = 0; i < nf; i++) {
        uint8_t l[2] = {(uint8_t)(f[i].len & 0xff), (uint8_t)(f[i].len >> 8)};

        if (f[i].len > 0xffff)
            die("a seed frame over 64 KiB");
        put(s, l, 2);
        put(s, f[i].data, f[i].len);
    }
    free(hdr);
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
    return 0;
}
