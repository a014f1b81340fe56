/* Benchmark of the shard's sparse aggregation: P workers' top-k
 * contributions to one layer handed to a ps_shard in-process through
 * ps_shard_handle (decode, validation, the union sum, the update and its
 * replies; no sockets), in pairs per second, against a memcpy of the same
 * bytes measured in the same run. Two layouts: the whole layer as one part,
 * and the client's default parts of 65536 elements, each worker's parts
 * joined into messages of up to PROTO_JOINED_PAIRS pairs as libflps sends
 * them. Last line: one JSON object.
 *
 * Usage: bench_aggregate [--quick] [--numel N] [--k K] [--rounds R]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_stats.h"
#include "bench/bench_util.h"
#include "common/log.h"
#include "common/numparse.h"
#include "proto/partmap.h"
#include "ps/shard.h"
#include "tests/support/rx_copy.h"

#define JOB "bench-aggregate"
#define DEFAULT_PART_SIZE 65536u
#define MAX_P 32

static const uint32_t PS[] = {2, 4, 8, 16, 32};
#define NPS (sizeof(PS) / sizeof(PS[0]))

/* What the shard sent, counted by the send callback. */
typedef struct sink {
    uint64_t updates, errors, pairs_out;
    char last_error[PROTO_ERRMSG_MAX + 1];
} sink;

static void on_send(void *arg, uint32_t peer, const ps_reply *rep)
{
    sink *k = arg;

    (void)peer;
    if (rep->msg.op == PROTO_OP_UPDATE) {
        k->updates += rep->msg.nsegs > 0 ? rep->msg.nsegs : 1; /* parts */
        k->pairs_out += rep->msg.n;
    } else if (rep->msg.op == PROTO_OP_ERROR) {
        k->errors++;
        snprintf(k->last_error, sizeof(k->last_error), "%s", rep->msg.text);
    }
}

/* One message as the transport would deliver it. */
static flps_err deliver(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen;
    void *hdr = NULL;
    transport_rx *rx = NULL;
    flps_err rc = proto_msg_encode(m, &hdr, &hlen, f, &nf);

    if (rc == FLPS_OK)
        rc = transport_rx_copy(f, nf, peer, &rx);
    free(hdr);
    return rc == FLPS_OK ? ps_shard_handle(s, rx) : rc;
}

static proto_msg base_msg(uint8_t op, uint32_t rank, uint32_t part,
                          uint64_t iter)
{
    proto_msg m;

    memset(&m, 0, sizeof(m));
    m.op = op;
    snprintf(m.job, sizeof(m.job), "%s", JOB);
    m.rank = rank;
    m.part = part;
    m.iter = iter;
    return m;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y);
}

/* P contributions of k ascending distinct indices in [0, numel) each: half
 * of them a hot set common to every worker (the large coordinates top-k
 * finds on every replica), half each worker's own, and Gaussian values. */
typedef struct contrib {
    uint32_t *idx; /* [P][k] */
    float *val;
} contrib;

static int make_contribs(uint32_t P, size_t numel, size_t k, contrib *out)
{
    unsigned char *mark = calloc(numel, 1);
    uint32_t *hot = malloc((k / 2 + 1) * sizeof(uint32_t));
    size_t nhot = 0;
    uint64_t seed = 12345;

    out->idx = malloc((size_t)P * k * sizeof(uint32_t));
    out->val = malloc((size_t)P * k * sizeof(float));
    if (mark == NULL || hot == NULL || out->idx == NULL || out->val == NULL) {
        free(mark);
        free(hot);
        return -1;
    }
    while (nhot < k / 2) {
        uint32_t i = (uint32_t)(flps_splitmix64(&seed) % numel);
        if (!mark[i]) {
            mark[i] = 1;
            hot[nhot++] = i;
        }
    }
    for (uint32_t r = 0; r < P; r++) {
        uint32_t *idx = out->idx + (size_t)r * k;
        size_t n = 0;
        for (size_t h = 0; h < nhot; h++)
            idx[n++] = hot[h];
        while (n < k) {
            uint32_t i = (uint32_t)(flps_splitmix64(&seed) % numel);
            if (!mark[i]) {
                mark[i] = 2;
                idx[n++] = i;
            }
        }
        for (size_t j = nhot; j < k; j++)
            mark[idx[j]] = 0; /* private: free for the next worker */
        qsort(idx, k, sizeof(*idx), cmp_u32);
        bench_fill_gaussian(out->val + (size_t)r * k, k, 77 + r);
    }
    free(mark);
    free(hot);
    return 0;
}

/* A registered, initialised shard of one tensor of numel elements cut in
 * parts of part_size, for P workers, aggregating the union of pushes. */
static ps_shard *make_shard(uint32_t P, size_t numel, uint32_t part_size,
                            const partmap *pm, sink *k)
{
    ps_shard_config c;
    ps_shard *s = NULL;
    proto_tensor t;
    float *zeros = calloc(part_size, sizeof(float));

    memset(&c, 0, sizeof(c));
    c.job = JOB;
    c.shard = 0;
    c.nshards = 1;
    c.send = on_send;
    c.send_arg = k;
    if (zeros == NULL || ps_shard_create(&c, 0, &s) != FLPS_OK) {
        free(zeros);
        return NULL;
    }
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "layer0");
    t.numel = numel;
    for (uint32_t r = 0; r < P; r++) {
        proto_msg m = base_msg(PROTO_OP_REGISTER, r, 0, 0);
        m.cfg.shard = 0;
        m.cfg.nshards = 1;
        m.cfg.workers = P;
        m.cfg.part_size = part_size;
        m.cfg.mode = PROTO_MODE_SSGD;
        m.cfg.agg = PROTO_AGG_TOPK;
        m.cfg.density = 1.0;
        m.cfg.lr = 0.01;
        snprintf(m.cfg.compression, sizeof(m.cfg.compression), "topk:0.004");
        m.tensors = &t;
        m.ntensors = 1;
        if (deliver(s, 100 + r, &m) != FLPS_OK)
            goto fail;
    }
    for (uint32_t p = 0; p < pm->nparts; p++) {
        proto_msg m = base_msg(PROTO_OP_INIT, 0, p, 0);
        m.codec = PROTO_CODEC_DENSE;
        m.n = pm->parts[p].numel;
        m.val = zeros;
        if (deliver(s, 100, &m) != FLPS_OK)
            goto fail;
    }
    free(zeros);
    return s;
fail:
    free(zeros);
    ps_shard_destroy(s);
    return NULL;
}

/* Encode parts [p0, p1) of worker r's pairs [lo, hi) (rel: their
 * part-relative indices, per part from segs) as one received message. */
static int build_one(uint32_t r, uint32_t p0, uint32_t p1, uint64_t iter,
                     const uint32_t *rel, const float *val, size_t n,
                     proto_seg *segs, transport_rx **out)
{
    proto_msg m = base_msg(PROTO_OP_PUSH, r, p0, iter);
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf, hlen;
    void *hdr = NULL;
    flps_err rc;

    m.codec = PROTO_CODEC_SPARSE;
    m.n = (uint32_t)n;
    m.idx = rel;
    m.val = val;
    if (p1 - p0 > 1) {
        m.nsegs = p1 - p0;
        m.segs = segs;
    }
    rc = proto_msg_encode(&m, &hdr, &hlen, f, &nf);
    if (rc == FLPS_OK)
        rc = transport_rx_copy(f, nf, 100 + r, out);
    free(hdr);
    return rc == FLPS_OK ? 0 : -1;
}

/* Every worker's pushes of one iteration, encoded and wrapped as received
 * messages before the clock starts. A worker pushes every part, an empty
 * one where it selected nothing, its parts joined into messages of up to
 * PROTO_JOINED_PAIRS pairs (as libflps does). Returns the message count,
 * or -1. */
static long build_pushes(const partmap *pm, const contrib *cb, uint32_t P,
                         size_t k, uint64_t iter, transport_rx **rx,
                         uint32_t *rel, proto_seg *segs)
{
    size_t q = 0;

    for (uint32_t r = 0; r < P; r++) {
        const uint32_t *idx = cb->idx + (size_t)r * k;
        const float *val = cb->val + (size_t)r * k;
        size_t j = 0, lo = 0;
        uint32_t p0 = 0;
        for (uint32_t p = 0; p <= pm->nparts; p++) {
            size_t plo = j;
            if (p < pm->nparts) {
                const uint64_t off = pm->parts[p].offset,
                               end = off + pm->parts[p].numel;
                while (j < k && idx[j] < end) {
                    rel[j] = (uint32_t)(idx[j] - off);
                    j++;
                }
            }
            if (p > p0 && (p == pm->nparts || j - lo > PROTO_JOINED_PAIRS)) {
                /* parts [p0, p) make one message */
                if (build_one(r, p0, p, iter, rel + lo, val + lo, plo - lo,
                              segs + p0, &rx[q]) != 0)
                    return -1;
                q++;
                p0 = p;
                lo = plo;
            }
            if (p < pm->nparts) {
                segs[p].part = p;
                segs[p].n = (uint32_t)(j - plo);
                segs[p].nrej = 0;
                segs[p].version = 0;
            }
        }
    }
    return (long)q;
}

typedef struct agg_result {
    double agg_s, memcpy_s; /* medians per iteration */
    double union_pairs;     /* pairs in each update */
    size_t messages;        /* pushes per iteration, all workers */
    int ok;
} agg_result;

static int run_layout(uint32_t P, size_t numel, size_t k, uint32_t part_size,
                      int rounds, const contrib *cb, agg_result *out)
{
    const uint64_t n64 = numel;
    const size_t bytes = (size_t)P * k * 8;
    partmap pm;
    sink snk;
    ps_shard *s = NULL;
    transport_rx **rx = NULL;
    uint32_t *rel = malloc(k * sizeof(uint32_t));
    proto_seg *segs = NULL;
    char *src = malloc(bytes), *dst = malloc(bytes);
    double *ta = calloc((size_t)rounds, sizeof(double));
    double *tm = calloc((size_t)rounds, sizeof(double));
    volatile char keep = 0;
    size_t nmsg;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    memset(&snk, 0, sizeof(snk));
    if (partmap_build(&n64, 1, 1, part_size, &pm) != FLPS_OK)
        return -1;
    rx = calloc((size_t)P * pm.nparts, sizeof(*rx));
    segs = calloc(pm.nparts, sizeof(*segs));
    if (rel == NULL || src == NULL || dst == NULL || ta == NULL || tm == NULL ||
        rx == NULL || segs == NULL)
        goto out;
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    s = make_shard(P, numel, part_size, &pm, &snk);
    if (s == NULL) {
        fprintf(stderr, "bench_aggregate: cannot set up the shard%s%s\n",
                snk.errors ? ": " : "", snk.last_error);
        goto out;
    }
    /* Round 0 warms up (first touch of the accumulators) and is not
     * counted. */
    for (int r = 0; r <= rounds; r++) {
        uint64_t upd0 = snk.updates, out0 = snk.pairs_out;
        double t0, t1;

        {
            long built =
                build_pushes(&pm, cb, P, k, (uint64_t)r, rx, rel, segs);
            if (built < 0) {
                fprintf(stderr, "bench_aggregate: out of memory\n");
                goto out_shard;
            }
            nmsg = (size_t)built;
            out->messages = nmsg;
        }
        t0 = flps_mono_s();
        for (size_t q = 0; q < nmsg; q++)
            ps_shard_handle(s, rx[q]);
        t1 = flps_mono_s();
        if (snk.errors > 0 || snk.updates - upd0 != (uint64_t)P * pm.nparts) {
            fprintf(stderr,
                    "bench_aggregate: the shard answered %llu part updates "
                    "for %u workers' pushes of %u parts (%llu errors: %s)\n",
                    (unsigned long long)(snk.updates - upd0), P, pm.nparts,
                    (unsigned long long)snk.errors, snk.last_error);
            goto out_shard;
        }
        out->union_pairs = (double)(snk.pairs_out - out0) / P;
        if (r > 0)
            ta[r - 1] = t1 - t0;

        t0 = flps_mono_s();
        memcpy(dst, src, bytes);
        t1 = flps_mono_s();
        keep ^= dst[(size_t)r % bytes];
        if (r > 0)
            tm[r - 1] = t1 - t0;
    }
    out->agg_s = bench_median(ta, (size_t)rounds);
    out->memcpy_s = bench_median(tm, (size_t)rounds);
    out->ok = 1;
    rc = 0;
out_shard:
    ps_shard_destroy(s);
out:
    (void)keep;
    partmap_fini(&pm);
    free(rx);
    free(segs);
    free(rel);
    free(src);
    free(dst);
    free(ta);
    free(tm);
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t numel = 25000000, k = 100000;
    int rounds = 0, quick = 0;
    char err[200];
    bench_json j;
    double load[3] = {0, 0, 0};

    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        flps_err rc = FLPS_OK;
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
            continue;
        }
        if (v != NULL && strcmp(argv[i], "--numel") == 0)
            rc = flps_parse_u64("--numel", v, 1000, UINT32_MAX, &numel, err,
                                sizeof(err));
        else if (v != NULL && strcmp(argv[i], "--k") == 0)
            rc = flps_parse_u64("--k", v, 2, UINT32_MAX, &k, err, sizeof(err));
        else if (v != NULL && strcmp(argv[i], "--rounds") == 0)
            rc = flps_parse_int("--rounds", v, 1, 100, &rounds, err,
                                sizeof(err));
        else {
            fprintf(stderr,
                    "usage: %s [--quick] [--numel N] [--k K] [--rounds R]\n",
                    argv[0]);
            return 2;
        }
        if (rc != FLPS_OK) {
            fprintf(stderr, "bench_aggregate: %s\n", err);
            return 2;
        }
        i++;
    }
    if (quick && numel == 25000000 && k == 100000) {
        numel /= 10;
        k /= 10;
    }
    if (rounds == 0)
        rounds = quick ? 9 : 15;
    /* The shard logs each registration at INFO; only trouble matters. */
    flps_log_setup("bench_aggregate", FLPS_LOG_WARN);
    if (k > numel) {
        fprintf(stderr, "bench_aggregate: need k <= numel\n");
        return 2;
    }
    if (getloadavg(load, 3) < 0)
        load[0] = NAN;
    printf("bench_aggregate: one layer of %llu floats, P workers' top-k of "
           "%llu pairs each (half shared), medians of %d rounds, one core; "
           "load average %.2f\n",
           (unsigned long long)numel, (unsigned long long)k, rounds, load[0]);
    fflush(stdout);
    memset(&j, 0, sizeof(j));

    for (size_t pi = 0; pi < NPS; pi++) {
        const uint32_t P = PS[pi];
        contrib cb;
        agg_result one, parts;
        const double pairs = (double)P * (double)k;
        char key[64];

        if (make_contribs(P, numel, k, &cb) != 0) {
            fprintf(stderr, "bench_aggregate: out of memory\n");
            return 1;
        }
        if (run_layout(P, numel, k, (uint32_t)numel, rounds, &cb, &one) != 0 ||
            run_layout(P, numel, k,
                       numel < DEFAULT_PART_SIZE ? (uint32_t)numel
                                                 : DEFAULT_PART_SIZE,
                       rounds, &cb, &parts) != 0) {
            free(cb.idx);
            free(cb.val);
            return 1;
        }
        free(cb.idx);
        free(cb.val);
        printf("P=%-2u %9.0f pairs in, union %8.0f | one part: %7.2f ms = "
               "%6.1f M pairs/s = %5.1fx memcpy (%.2f ms) | parts of %u "
               "in %zu messages: %7.2f ms = %6.1f M pairs/s = %5.1fx "
               "memcpy\n",
               P, pairs, one.union_pairs, one.agg_s * 1e3,
               pairs / one.agg_s / 1e6, one.agg_s / one.memcpy_s,
               one.memcpy_s * 1e3, DEFAULT_PART_SIZE, parts.messages,
               parts.agg_s * 1e3, pairs / parts.agg_s / 1e6,
               parts.agg_s / parts.memcpy_s);
        fflush(stdout);
        snprintf(key, sizeof(key), "P%u_pairs_per_second", P);
        bench_json_num(&j, key, pairs / one.agg_s);
        snprintf(key, sizeof(key), "P%u_over_memcpy", P);
        bench_json_num(&j, key, one.agg_s / one.memcpy_s);
        snprintf(key, sizeof(key), "P%u_seconds", P);
        bench_json_num(&j, key, one.agg_s);
        snprintf(key, sizeof(key), "P%u_parts_pairs_per_second", P);
        bench_json_num(&j, key, pairs / parts.agg_s);
        snprintf(key, sizeof(key), "P%u_parts_over_memcpy", P);
        bench_json_num(&j, key, parts.agg_s / parts.memcpy_s);
        snprintf(key, sizeof(key), "P%u_parts_messages", P);
        bench_json_num(&j, key, (double)parts.messages);
        snprintf(key, sizeof(key), "P%u_memcpy_seconds", P);
        bench_json_num(&j, key, one.memcpy_s);
    }
    if (getloadavg(load, 3) < 0)
        load[0] = NAN;
    bench_json_num(&j, "numel", (double)numel);
    bench_json_num(&j, "k", (double)k);
    bench_json_lit(&j, "quick", quick ? "true" : "false");
    bench_json_num(&j, "load_average", load[0]);
    bench_json_print(&j);
    return 0;
}
