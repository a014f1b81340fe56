/* Bounded staleness (mode: ssp:S) against a real flps shard: a fast worker
 * is never more than S iterations ahead of a slow one, while plain async
 * lets it run away; and flrun runs an ssp job of the job file to its
 * summary. */
#include <criterion/criterion.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flps.h"
#include "runcmd.h"
#include "spawn.h"

#define NUMEL 2048
#define ITERS 30
#define NW 3 /* rank 2 is the slow one */

typedef struct run {
    const char *endpoint;
    uint32_t staleness; /* UINT32_MAX: plain async */
    /* The iterations the slow worker has begun pushing: it sets j + 1
     * before it pushes iteration j, so the shards never know of more. */
    atomic_ullong slow_started;
    /* The most iterations a fast worker was ahead of that when its wait
     * returned (next iteration - slow_started). */
    atomic_llong max_lead;
    double stale_wait[NW];
    flps_err err[NW];
} run;

typedef struct worker_arg {
    run *run;
    int rank;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *a = p;
    run *rn = a->run;
    static float data[NW][NUMEL];
    float grad[NUMEL];
    flps_tensor t = {"w", NUMEL, data[a->rank]};
    const char *servers[1] = {rn->endpoint};
    flps_client_config cfg;
    flps_client *c = NULL;
    flps_err rc;

    memset(&cfg, 0, sizeof(cfg));
    cfg.job = "ssp";
    cfg.rank = (uint32_t)a->rank;
    cfg.workers = NW;
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.tensors = &t;
    cfg.ntensors = 1;
    cfg.async = 1;
    cfg.compression = "topk:0.05";
    cfg.lr = 0.01;
    cfg.iterations = ITERS;
    cfg.deadline_ms = 60000;
    for (int i = 0; i < NUMEL; i++)
        grad[i] = (float)((i * 7 + a->rank) % 13) - 6.0f;
    rc = flps_client_create(&cfg, &c);
    if (rc == FLPS_OK && rn->staleness != UINT32_MAX)
        rc = flps_client_set_staleness(c, rn->staleness);
    if (rc == FLPS_OK)
        rc = flps_client_init(c);
    for (uint64_t it = 0; rc == FLPS_OK && it < ITERS; it++) {
        if (a->rank == NW - 1) {
            struct timespec ts = {0, 30 * 1000000L};
            nanosleep(&ts, NULL); /* the slow worker's "compute" */
            atomic_store(&rn->slow_started, it + 1);
        }
        rc = flps_client_push(c, 0, grad, it);
        if (rc == FLPS_OK)
            rc = flps_client_wait(c, it);
        if (rc == FLPS_OK && a->rank != NW - 1) {
            long long lead =
                (long long)(it + 1) - (long long)atomic_load(&rn->slow_started);
            long long seen = atomic_load(&rn->max_lead);
            while (lead > seen &&
                   !atomic_compare_exchange_weak(&rn->max_lead, &seen, lead))
                ;
        }
    }
    rn->stale_wait[a->rank] = flps_client_stale_wait_seconds(c);
    rn->err[a->rank] = rc;
    flps_client_destroy(c);
    return NULL;
}

/* One job of NW workers against a fresh shard; fills rn. */
static void run_job(run *rn, uint32_t staleness)
{
    char dir[] = "/tmp/flps-ssp-XXXXXX", log[96];
    const char *args[] = {"--job",    "ssp", "--shard", "0",
                          "--shards", "1",   NULL};
    test_shard sh;
    pthread_t th[NW];
    worker_arg wa[NW];

    cr_assert_not_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s/shard.log", dir);
    cr_assert_eq(test_shard_start(&sh, log, args), 0,
                 "the shard did not start; see %s", log);
    memset(rn, 0, sizeof(*rn));
    rn->endpoint = sh.endpoint;
    rn->staleness = staleness;
    atomic_init(&rn->slow_started, 0);
    atomic_init(&rn->max_lead, LLONG_MIN);
    for (int r = 0; r < NW; r++) {
        wa[r].run = rn;
        wa[r].rank = r;
        cr_assert_eq(pthread_create(&th[r], NULL, worker_main, &wa[r]), 0);
    }
    for (int r = 0; r < NW; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < NW; r++)
        cr_assert_eq(rn->err[r], FLPS_OK, "worker %d: %s", r,
                     flps_strerror(rn->err[r]));
    test_shard_stop(&sh, SIGTERM);
}

Test(ssp, a_fast_worker_stays_within_the_staleness_of_the_slowest,
     .timeout = 120)
{
    static run rn;

    for (uint32_t s = 0; s <= 2; s += 2) {
        run_job(&rn, s);
        cr_assert_leq(atomic_load(&rn.max_lead), (long long)s,
                      "with staleness %u a fast worker got %lld iterations "
                      "ahead of the slow one",
                      s, atomic_load(&rn.max_lead));
        cr_assert_gt(rn.stale_wait[0] + rn.stale_wait[1], 0.1,
                     "the fast workers waited for the slow one");
        cr_assert_lt(rn.stale_wait[NW - 1], 0.5,
                     "the slowest worker hardly waits: %.3f s",
                     rn.stale_wait[NW - 1]);
    }
}

/* The same job in plain async: the fast workers finish far ahead, so the
 * bound above is the client's doing, not the test's pacing. */
Test(ssp, without_a_bound_the_fast_workers_run_ahead, .timeout = 120)
{
    static run rn;

    run_job(&rn, UINT32_MAX);
    cr_assert_gt(atomic_load(&rn.max_lead), 5,
                 "in async mode the fast workers were at most %lld ahead",
                 atomic_load(&rn.max_lead));
    cr_assert_eq(rn.stale_wait[0], 0);
}

Test(ssp, a_synchronous_client_refuses_a_staleness_bound_and_stays_usable)
{
    char dir[] = "/tmp/flps-ssp-sync-XXXXXX", log[96];
    const char *args[] = {"--job",    "sync", "--shard", "0",
                          "--shards", "1",    NULL};
    static float data[NUMEL], grad[NUMEL];
    flps_tensor t = {"w", NUMEL, data};
    const char *servers[1];
    flps_client_config cfg;
    flps_client *c = NULL;
    test_shard sh;

    cr_assert_eq(flps_client_set_staleness(NULL, 1), FLPS_EINVAL);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s/shard.log", dir);
    cr_assert_eq(test_shard_start(&sh, log, args), 0);
    servers[0] = sh.endpoint;
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = "sync";
    cfg.workers = 1;
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.tensors = &t;
    cfg.ntensors = 1;
    cfg.compression = "topk:0.05";
    cfg.lr = 0.01;
    cfg.iterations = 2;
    grad[3] = 1;
    cr_assert_eq(flps_client_create(&cfg, &c), FLPS_OK);
    cr_assert_eq(flps_client_set_staleness(c, 1), FLPS_ESTATE);
    cr_assert_eq(flps_client_init(c), FLPS_OK, "%s", flps_client_last_error(c));
    cr_assert_eq(flps_client_push(c, 0, grad, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(c, 0), FLPS_OK, "%s",
                 flps_client_last_error(c));
    cr_assert_lt(data[3], 0, "the update was applied");
    flps_client_destroy(c);
    test_shard_stop(&sh, SIGTERM);
}

Test(ssp, flrun_runs_an_ssp_job_to_its_summary, .timeout = 180)
{
    char dir[] = "/tmp/flrun-ssp-XXXXXX", job[128], cmd[512];
    run_result r;
    FILE *f;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    f = fopen(job, "w");
    cr_assert_not_null(f);
    fputs("name: ssp\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
          "servers: 2\nmode: ssp:2\niterations: 200\n"
          "compression: topk:0.01\neval_every: 0\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet %s", FLPS_BIN_DIR, job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "no summary line: %s", r.out);
    cr_assert_geq(
        json_number_value(json_object_get(r.summary, "test_accuracy")), 0.9,
        "%s", r.out);
    run_free(&r);
}
