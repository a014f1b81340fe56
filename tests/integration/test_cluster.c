/* Real flps shard processes and real clients over ZeroMQ on loopback:
 * the shards' parameters must equal values computed by hand, and a shard
 * killed with SIGKILL and restarted from its checkpoint directory must
 * keep every update it acknowledged. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flps.h"
#include "spawn.h"

#define NT 3
/* Tensor sizes and part size chosen so both shards own parts:
 * t0 = 10 elements -> parts of 4,4,2; t1 = 7 -> 4,3; t2 = 3 -> 3. */
static const size_t numel[NT] = {10, 7, 3};

typedef struct worker {
    float *data[NT];
    flps_tensor tensors[NT];
    flps_client *c;
} worker;

static void worker_init(worker *w, const char *job, uint32_t rank,
                        const char *const *servers, const char *compression,
                        double lr)
{
    flps_client_config cfg;
    static const char *names[NT] = {"a.weight", "a.bias", "b.weight"};

    for (int t = 0; t < NT; t++) {
        w->data[t] = calloc(numel[t], sizeof(float));
        cr_assert_not_null(w->data[t]);
        /* Rank 0's values become the model; other ranks start wrong on
         * purpose so the pull must overwrite them. */
        for (size_t i = 0; i < numel[t]; i++)
            w->data[t][i] =
                rank == 0 ? (float)(t * 100 + (int)i) * 0.5f : -999.0f;
        w->tensors[t].name = names[t];
        w->tensors[t].numel = numel[t];
        w->tensors[t].data = w->data[t];
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = job;
    cfg.rank = rank;
    cfg.workers = 2;
    cfg.servers = servers;
    cfg.nservers = 2;
    cfg.tensors = w->tensors;
    cfg.ntensors = NT;
    cfg.part_size = 4;
    cfg.compression = compression;
    cfg.lr = lr;
    cfg.momentum = 0;
    cfg.retry_ms = 300;
    cfg.deadline_ms = 20000;
    cr_assert_eq(flps_client_create(&cfg, &w->c), FLPS_OK,
                 "client %u could not register with the shards", rank);
}

static void worker_fini(worker *w)
{
    flps_client_destroy(w->c);
    for (int t = 0; t < NT; t++)
        free(w->data[t]);
}

/* Deterministic gradient of rank r, iteration it, element i of tensor t. */
static float grad_of(int r, uint64_t it, int t, size_t i)
{
    return (float)(((int)i * 7 + t * 3 + r * 5 + (int)it * 11) % 13 - 6) *
           0.25f;
}

static void step(worker *w, int nw, uint64_t it, float **expect, double lr)
{
    const float scale = (float)(lr / nw);
    for (int r = 0; r < nw; r++) {
        for (int t = NT - 1; t >= 0; t--) {
            float g[16];
            for (size_t i = 0; i < numel[t]; i++)
                g[i] = grad_of(r, it, t, i);
            cr_assert_eq(flps_client_push(w[r].c, (uint32_t)t, g, it), FLPS_OK,
                         "%s", flps_client_last_error(w[r].c));
        }
    }
    for (int r = 0; r < nw; r++)
        cr_assert_eq(flps_client_wait(w[r].c, it), FLPS_OK, "%s",
                     flps_client_last_error(w[r].c));
    /* The shard sums in rank order, then applies -(lr/W * sum). */
    for (int t = 0; t < NT; t++) {
        for (size_t i = 0; i < numel[t]; i++) {
            float acc = 0;
            for (int r = 0; r < nw; r++)
                acc += grad_of(r, it, t, i);
            expect[t][i] += -(scale * acc);
        }
    }
}

static void assert_replicas(worker *w, int nw, float **expect)
{
    for (int r = 0; r < nw; r++)
        for (int t = 0; t < NT; t++)
            for (size_t i = 0; i < numel[t]; i++)
                cr_assert_eq(w[r].data[t][i], expect[t][i],
                             "rank %d tensor %d element %zu: %g, expected %g",
                             r, t, i, (double)w[r].data[t][i],
                             (double)expect[t][i]);
}

static void make_expect(float **expect)
{
    for (int t = 0; t < NT; t++) {
        expect[t] = calloc(numel[t], sizeof(float));
        for (size_t i = 0; i < numel[t]; i++)
            expect[t][i] = (float)(t * 100 + (int)i) * 0.5f;
    }
}

Test(cluster, two_shards_and_two_workers_hold_the_hand_computed_parameters,
     .timeout = 60)
{
    char dir[] = "/tmp/flps-it-XXXXXX", log0[128], log1[128];
    test_shard s[2];
    const char *servers[2];
    worker w[2];
    float *expect[NT];
    const double lr = 0.5;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(log0, sizeof(log0), "%s/s0.log", dir);
    snprintf(log1, sizeof(log1), "%s/s1.log", dir);
    {
        const char *a0[] = {"--job",    "it", "--shard", "0",
                            "--shards", "2",  NULL};
        const char *a1[] = {"--job",    "it", "--shard", "1",
                            "--shards", "2",  NULL};
        cr_assert_eq(test_shard_start(&s[0], log0, a0), 0);
        cr_assert_eq(test_shard_start(&s[1], log1, a1), 0);
    }
    servers[0] = s[0].endpoint;
    servers[1] = s[1].endpoint;
    worker_init(&w[0], "it", 0, servers, "dense", lr);
    worker_init(&w[1], "it", 1, servers, "dense", lr);
    cr_assert_eq(flps_client_init(w[0].c), FLPS_OK, "%s",
                 flps_client_last_error(w[0].c));
    cr_assert_eq(flps_client_init(w[1].c), FLPS_OK, "%s",
                 flps_client_last_error(w[1].c));
    make_expect(expect);
    assert_replicas(w, 2, expect);

    for (uint64_t it = 0; it < 5; it++)
        step(w, 2, it, expect, lr);
    assert_replicas(w, 2, expect);

    /* What the servers hold, read back by a full pull. */
    for (int t = 0; t < NT; t++)
        memset(w[1].data[t], 0, numel[t] * sizeof(float));
    cr_assert_eq(flps_client_pull(w[1].c), FLPS_OK);
    assert_replicas(w, 2, expect);

    worker_fini(&w[0]);
    worker_fini(&w[1]);
    cr_assert_eq(test_shard_stop(&s[0], SIGTERM), 0);
    cr_assert_eq(test_shard_stop(&s[1], SIGTERM), 0);
    for (int t = 0; t < NT; t++)
        free(expect[t]);
}

Test(cluster, a_shard_killed_and_restarted_from_its_checkpoint_loses_nothing,
     .timeout = 90)
{
    char dir[] = "/tmp/flps-it-XXXXXX", log0[128], log1[128], ck[128];
    char port_ep[256];
    test_shard s[2];
    const char *servers[2];
    worker w[2];
    float *expect[NT];
    const double lr = 0.25;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(log0, sizeof(log0), "%s/s0.log", dir);
    snprintf(log1, sizeof(log1), "%s/s1.log", dir);
    snprintf(ck, sizeof(ck), "%s/ckpt", dir);
    {
        const char *a0[] = {"--job",    "it", "--shard",          "0",
                            "--shards", "2",  "--checkpoint-dir", ck,
                            NULL};
        const char *a1[] = {"--job",    "it", "--shard",          "1",
                            "--shards", "2",  "--checkpoint-dir", ck,
                            NULL};
        cr_assert_eq(test_shard_start(&s[0], log0, a0), 0);
        cr_assert_eq(test_shard_start(&s[1], log1, a1), 0);
    }
    servers[0] = s[0].endpoint;
    servers[1] = s[1].endpoint;
    worker_init(&w[0], "it", 0, servers, "topk:0.5", lr);
    worker_init(&w[1], "it", 1, servers, "topk:0.5", lr);
    cr_assert_eq(flps_client_init(w[0].c), FLPS_OK);
    cr_assert_eq(flps_client_init(w[1].c), FLPS_OK);

    for (uint64_t it = 0; it < 3; it++) {
        for (int r = 0; r < 2; r++)
            for (int t = NT - 1; t >= 0; t--) {
                float g[16];
                for (size_t i = 0; i < numel[t]; i++)
                    g[i] = grad_of(r, it, t, i);
                cr_assert_eq(flps_client_push(w[r].c, (uint32_t)t, g, it),
                             FLPS_OK);
            }
        for (int r = 0; r < 2; r++)
            cr_assert_eq(flps_client_wait(w[r].c, it), FLPS_OK);
    }
    /* Shard 1 dies before anyone asked for a checkpoint: the one written
     * at registration and the write-ahead log must be enough. */
    for (int t = 0; t < NT; t++) {
        expect[t] = malloc(numel[t] * sizeof(float));
        memcpy(expect[t], w[0].data[t], numel[t] * sizeof(float));
    }
    snprintf(port_ep, sizeof(port_ep), "%s", s[1].endpoint);
    cr_assert(WIFSIGNALED(test_shard_stop(&s[1], SIGKILL)));
    {
        const char *a1[] = {"--job",
                            "it",
                            "--shard",
                            "1",
                            "--shards",
                            "2",
                            "--checkpoint-dir",
                            ck,
                            "--restore",
                            "--listen",
                            port_ep,
                            NULL};
        cr_assert_eq(test_shard_start(&s[1], log1, a1), 0,
                     "the shard did not restart; see %s", log1);
    }
    for (int t = 0; t < NT; t++)
        memset(w[1].data[t], 0, numel[t] * sizeof(float));
    cr_assert_eq(flps_client_pull(w[1].c), FLPS_OK, "%s",
                 flps_client_last_error(w[1].c));
    for (int t = 0; t < NT; t++) {
        cr_assert_eq(memcmp(w[1].data[t], expect[t], numel[t] * sizeof(float)),
                     0, "tensor %d lost updates in the restart of shard 1", t);
        free(expect[t]);
    }

    /* A checkpoint in the middle, then more acknowledged iterations that
     * only the write-ahead log holds. */
    cr_assert_eq(flps_client_checkpoint(w[0].c), FLPS_OK, "%s",
                 flps_client_last_error(w[0].c));
    for (uint64_t it = 3; it < 6; it++) {
        for (int r = 0; r < 2; r++)
            for (int t = NT - 1; t >= 0; t--) {
                float g[16];
                for (size_t i = 0; i < numel[t]; i++)
                    g[i] = grad_of(r, it, t, i);
                cr_assert_eq(flps_client_push(w[r].c, (uint32_t)t, g, it),
                             FLPS_OK);
            }
        for (int r = 0; r < 2; r++)
            cr_assert_eq(flps_client_wait(w[r].c, it), FLPS_OK);
    }
    /* Every worker's replica is what the shards acknowledged. */
    for (int t = 0; t < NT; t++) {
        expect[t] = malloc(numel[t] * sizeof(float));
        memcpy(expect[t], w[0].data[t], numel[t] * sizeof(float));
        cr_assert_eq(
            memcmp(w[0].data[t], w[1].data[t], numel[t] * sizeof(float)), 0,
            "the replicas of the two workers differ");
    }

    /* Crash shard 0 without warning and restart it on the same port. */
    snprintf(port_ep, sizeof(port_ep), "%s", s[0].endpoint);
    cr_assert(WIFSIGNALED(test_shard_stop(&s[0], SIGKILL)));
    {
        const char *a0[] = {"--job",
                            "it",
                            "--shard",
                            "0",
                            "--shards",
                            "2",
                            "--checkpoint-dir",
                            ck,
                            "--restore",
                            "--listen",
                            port_ep,
                            NULL};
        cr_assert_eq(test_shard_start(&s[0], log0, a0), 0,
                     "the shard did not restart; see %s", log0);
    }

    /* A full pull reads the restored state: equal to what was acked. */
    for (int t = 0; t < NT; t++)
        memset(w[1].data[t], 0, numel[t] * sizeof(float));
    cr_assert_eq(flps_client_pull(w[1].c), FLPS_OK, "%s",
                 flps_client_last_error(w[1].c));
    for (int t = 0; t < NT; t++)
        for (size_t i = 0; i < numel[t]; i++)
            cr_assert_eq(w[1].data[t][i], expect[t][i],
                         "tensor %d element %zu lost after restart: %g, "
                         "acknowledged %g",
                         t, i, (double)w[1].data[t][i], (double)expect[t][i]);

    /* Training goes on through the restarted shard: both replicas stay
     * equal and iteration 6 is accepted. */
    for (int r = 0; r < 2; r++)
        for (int t = NT - 1; t >= 0; t--) {
            float g[16];
            for (size_t i = 0; i < numel[t]; i++)
                g[i] = grad_of(r, 6, t, i);
            cr_assert_eq(flps_client_push(w[r].c, (uint32_t)t, g, 6), FLPS_OK);
        }
    for (int r = 0; r < 2; r++)
        cr_assert_eq(flps_client_wait(w[r].c, 6), FLPS_OK, "%s",
                     flps_client_last_error(w[r].c));
    for (int t = 0; t < NT; t++)
        cr_assert_eq(
            memcmp(w[0].data[t], w[1].data[t], numel[t] * sizeof(float)), 0);

    worker_fini(&w[0]);
    worker_fini(&w[1]);
    test_shard_stop(&s[0], SIGTERM);
    test_shard_stop(&s[1], SIGTERM);
    for (int t = 0; t < NT; t++)
        free(expect[t]);
}
