/* A dense job sends, aggregates and answers its model in the pieces of
 * the even map (proto/partmap.h): without CURVE, of PARTMAP_CLEAR_PIECE
 * elements however large part_size is, or of part_size when it is
 * smaller. Against real flps shards, the replicas after a few iterations
 * with momentum are bit for bit those of the same job cut into pieces of
 * 1000 (dense S-SGD is elementwise, so the cut cannot change a value),
 * and every message stays within a piece (the map itself is checked in
 * tests/proto/test_partmap.c). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flps.h"
#include "proto/partmap.h"
#include "spawn.h"

#define NT 2
#define NW 2
#define ITERS 4
/* Tensor 0 is 3 pieces and a bit; tensor 1 is one small part. */
static const size_t numel[NT] = {3 * PARTMAP_DENSE_PIECE + 1234, 1000};

typedef struct run {
    float *data[NW][NT];
    flps_tensor tensors[NW][NT];
    flps_client *c[NW];
    test_shard s[2];
    uint64_t pushes[NW];
} run;

static float grad_of(int r, int it, int t, size_t i)
{
    return (float)((int)((i * 7 + (size_t)t * 3 + (size_t)r * 5 +
                          (size_t)it * 11) %
                         13) -
                   6) *
           0.01f;
}

static void run_job(run *x, const char *job, uint32_t part_size)
{
    char dir[] = "/tmp/flps-pieces-XXXXXX", log[160], idx[8];
    const char *servers[2];

    cr_assert_not_null(mkdtemp(dir));
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--job",    job, "--shard", idx,
                              "--shards", "2", NULL};
        snprintf(idx, sizeof(idx), "%d", i);
        snprintf(log, sizeof(log), "%s/s%d.log", dir, i);
        cr_assert_eq(test_shard_start(&x->s[i], log, args), 0,
                     "shard %d did not start (log in %s)", i, dir);
        servers[i] = x->s[i].endpoint;
    }
    for (uint32_t r = 0; r < NW; r++) {
        flps_client_config cfg;
        static const char *names[NT] = {"big.weight", "small.bias"};
        for (int t = 0; t < NT; t++) {
            x->data[r][t] = calloc(numel[t], sizeof(float));
            cr_assert_not_null(x->data[r][t]);
            for (size_t i = 0; i < numel[t]; i++)
                x->data[r][t][i] = (float)(i % 101) * 0.125f;
            x->tensors[r][t].name = names[t];
            x->tensors[r][t].numel = numel[t];
            x->tensors[r][t].data = x->data[r][t];
        }
        memset(&cfg, 0, sizeof(cfg));
        cfg.job = job;
        cfg.rank = r;
        cfg.workers = NW;
        cfg.servers = servers;
        cfg.nservers = 2;
        cfg.tensors = x->tensors[r];
        cfg.ntensors = NT;
        cfg.part_size = part_size;
        cfg.compression = "dense";
        cfg.lr = 0.1;
        cfg.momentum = 0.9;
        cfg.retry_ms = 5000;
        cfg.deadline_ms = 30000;
        cr_assert_eq(flps_client_create(&cfg, &x->c[r]), FLPS_OK);
    }
    for (int r = 0; r < NW; r++)
        cr_assert_eq(flps_client_init(x->c[r]), FLPS_OK, "%s",
                     flps_client_last_error(x->c[r]));
    for (int it = 0; it < ITERS; it++) {
        float *g = malloc(numel[0] * sizeof(float));
        cr_assert_not_null(g);
        for (int r = 0; r < NW; r++)
            for (int t = NT - 1; t >= 0; t--) {
                for (size_t i = 0; i < numel[t]; i++)
                    g[i] = grad_of(r, it, t, i);
                cr_assert_eq(
                    flps_client_push(x->c[r], (uint32_t)t, g, (uint64_t)it),
                    FLPS_OK, "%s", flps_client_last_error(x->c[r]));
            }
        for (int r = 0; r < NW; r++)
            cr_assert_eq(flps_client_wait(x->c[r], (uint64_t)it), FLPS_OK, "%s",
                         flps_client_last_error(x->c[r]));
        free(g);
    }
    for (int r = 0; r < NW; r++) {
        flps_client_stats st;
        flps_client_get_stats(x->c[r], &st);
        x->pushes[r] = st.pushes;
        /* no message larger than a piece's values and its header */
        cr_assert_leq(st.bytes_sent / (st.pushes ? st.pushes : 1),
                      (uint64_t)PARTMAP_CLEAR_PIECE * 4 + 4096);
    }
    for (int i = 0; i < 2; i++)
        test_shard_stop(&x->s[i], SIGTERM);
}

static void run_free(run *x)
{
    for (int r = 0; r < NW; r++) {
        flps_client_destroy(x->c[r]);
        for (int t = 0; t < NT; t++)
            free(x->data[r][t]);
    }
}

/* The pieces of the even map over 2 shards: shard 0 owns the first half
 * of the elements, all within tensor 0; shard 1 the rest of tensor 0 and
 * tensor 1. */
static uint64_t even_pieces(uint64_t piece)
{
    const uint64_t half = (numel[0] + numel[1]) / 2;

    return (half + piece - 1) / piece + (numel[0] - half + piece - 1) / piece +
           (numel[1] + piece - 1) / piece;
}

Test(pieces, a_huge_dense_part_travels_in_pieces_with_the_same_result,
     .timeout = 120)
{
    static run whole, cut;

    /* Parts as large as the model: the clear piece cuts them ... */
    run_job(&whole, "pieces-a", 1u << 22);
    /* ... against pieces of 1000, a part size below the piece. */
    run_job(&cut, "pieces-b", 1000);
    for (int r = 0; r < NW; r++) {
        cr_assert_eq(whole.pushes[r],
                     (uint64_t)ITERS * even_pieces(PARTMAP_CLEAR_PIECE));
        cr_assert_eq(cut.pushes[r], (uint64_t)ITERS * even_pieces(1000));
        cr_assert_gt(cut.pushes[r], whole.pushes[r]);
        for (int t = 0; t < NT; t++)
            for (size_t i = 0; i < numel[t]; i++)
                cr_assert_eq(whole.data[r][t][i], cut.data[r][t][i],
                             "rank %d tensor %d element %zu: %a vs %a", r, t, i,
                             (double)whole.data[r][t][i],
                             (double)cut.data[r][t][i]);
    }
    /* and the model moved */
    cr_assert_neq(whole.data[0][0][5], (float)(5 % 101) * 0.125f);
    run_free(&whole);
    run_free(&cut);
}
