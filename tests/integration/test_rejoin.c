/* A shard killed with SIGKILL and restarted from its checkpoint and log
 * rejoins its job wherever the other shards are (docs/design.md,
 * "Rejoining after a crash"): real flps processes, real clients, and the
 * final parameters compared bit for bit with an undisturbed run. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flps.h"
#include "proto/transport.h"
#include "spawn.h"
#include "worker/client_internal.h"

#define NT 3
#define NW 2
#define NITER 8
/* Parts of at most 4: t0 = 4,4,2; t1 = 4,3; t2 = 3, spread over 2 shards. */
static const size_t numel[NT] = {10, 7, 3};

/* ---- a transport that loses one shard's messages on request ---- */

/* Wraps a ZeroMQ transport. lose_from_shard() takes every message waiting
 * from that peer off the wire and drops it, keeping the others for the
 * client: the updates a shard sent just before it was killed, lost as
 * they would be had it died a moment earlier. */
typedef struct lossy {
    transport base;
    transport *inner;
    transport_rx *kept[64];
    size_t nkept, next;
} lossy;

static void lossy_sync(lossy *l)
{
    l->base.stats = l->inner->stats;
}

static flps_err lossy_listen(transport *t, const char *ep, char *b, size_t n)
{
    return transport_listen(((lossy *)t)->inner, ep, b, n);
}

static flps_err lossy_connect(transport *t, const char *ep, uint32_t *peer)
{
    return transport_connect(((lossy *)t)->inner, ep, peer);
}

static flps_err lossy_send(transport *t, uint32_t peer,
                           const transport_frame *f, size_t nf)
{
    lossy *l = (lossy *)t;
    flps_err rc = transport_send(l->inner, peer, f, nf);

    lossy_sync(l);
    return rc;
}

static flps_err lossy_recv(transport *t, int timeout_ms, transport_rx **rx)
{
    lossy *l = (lossy *)t;
    flps_err rc;

    if (l->next < l->nkept) {
        *rx = l->kept[l->next++];
        return FLPS_OK;
    }
    rc = transport_recv(l->inner, timeout_ms, rx);
    lossy_sync(l);
    return rc;
}

static void lossy_destroy(transport *t)
{
    lossy *l = (lossy *)t;

    for (size_t i = l->next; i < l->nkept; i++)
        transport_rx_release(l->kept[i]);
    transport_destroy(l->inner);
    free(l);
}

static const transport_vtable lossy_vt = {"lossy",       lossy_listen,
                                          lossy_connect, lossy_send,
                                          lossy_recv,    lossy_destroy};

static lossy *lossy_create(void)
{
    lossy *l = calloc(1, sizeof(*l));

    cr_assert_not_null(l);
    cr_assert_eq(transport_zmq_create(&l->inner), FLPS_OK);
    l->base.vt = &lossy_vt;
    return l;
}

/* Take everything that arrives within quiet_ms of the last message: drop
 * what comes from peer, keep the rest in order. Returns how many dropped. */
static int lossy_lose_from(lossy *l, uint32_t peer, int quiet_ms)
{
    transport_rx *rx;
    int dropped = 0;

    while (transport_recv(l->inner, quiet_ms, &rx) == FLPS_OK) {
        if (rx->peer == peer) {
            transport_rx_release(rx);
            dropped++;
        } else {
            cr_assert_lt(l->nkept, 64);
            l->kept[l->nkept++] = rx;
        }
    }
    lossy_sync(l);
    return dropped;
}

/* ---- workers ---- */

typedef struct worker {
    float *data[NT];
    flps_tensor tensors[NT];
    flps_client *c;
} worker;

static void worker_init(worker *w, uint32_t rank, const char *const *servers,
                        const char *compression, double momentum,
                        int deadline_ms, transport *t)
{
    flps_client_config cfg;
    static const char *names[NT] = {"a.weight", "a.bias", "b.weight"};

    for (int k = 0; k < NT; k++) {
        w->data[k] = calloc(numel[k], sizeof(float));
        cr_assert_not_null(w->data[k]);
        for (size_t i = 0; i < numel[k]; i++)
            w->data[k][i] = rank == 0 ? (float)(k * 100 + (int)i) * 0.5f : -9;
        w->tensors[k].name = names[k];
        w->tensors[k].numel = numel[k];
        w->tensors[k].data = w->data[k];
    }
    cr_assert_eq(flps_client_config_init(&cfg), FLPS_OK);
    cfg.job = "rejoin";
    cfg.rank = rank;
    cfg.workers = NW;
    cfg.servers = servers;
    cfg.nservers = 2;
    cfg.tensors = w->tensors;
    cfg.ntensors = NT;
    cfg.part_size = 4;
    cfg.compression = compression;
    cfg.lr = 0.25;
    cfg.momentum = momentum;
    cfg.retry_ms = 300;
    cfg.deadline_ms = deadline_ms;
    if (t != NULL)
        cr_assert_eq(flps_client_create_on(&cfg, t, &w->c), FLPS_OK,
                     "client %u could not register", rank);
    else
        cr_assert_eq(flps_client_create(&cfg, &w->c), FLPS_OK,
                     "client %u could not register", rank);
    cr_assert_eq(flps_client_init(w->c), FLPS_OK, "%s",
                 flps_client_last_error(w->c));
}

static void worker_fini(worker *w)
{
    flps_client_destroy(w->c);
    for (int k = 0; k < NT; k++)
        free(w->data[k]);
}

/* A gradient of rank r at iteration it that depends on nothing else, so a
 * restarted worker computes the same one again. */
static float grad_of(int r, uint64_t it, int k, size_t i)
{
    return (float)(((int)i * 7 + k * 3 + r * 5 + (int)it * 11) % 13 - 6) *
           0.25f;
}

static void push_all(worker *w, uint64_t it)
{
    for (int r = 0; r < NW; r++)
        for (int k = NT - 1; k >= 0; k--) {
            float g[16];
            for (size_t i = 0; i < numel[k]; i++)
                g[i] = grad_of(r, it, k, i);
            cr_assert_eq(flps_client_push(w[r].c, (uint32_t)k, g, it), FLPS_OK,
                         "%s", flps_client_last_error(w[r].c));
        }
}

static void wait_one(worker *w, uint64_t it)
{
    cr_assert_eq(flps_client_wait(w->c, it), FLPS_OK, "%s",
                 flps_client_last_error(w->c));
}

static void run_iterations(worker *w, uint64_t from, uint64_t to)
{
    for (uint64_t it = from; it < to; it++) {
        push_all(w, it);
        for (int r = 0; r < NW; r++)
            wait_one(&w[r], it);
    }
}

/* ---- shards ---- */

typedef struct shards {
    char dir[64], ck[96], log[2][96];
    test_shard s[2];
    const char *servers[2];
    int durable;
} shards;

static void shard_start(shards *sh, int i, int restore, const char *listen)
{
    char idx[4];
    const char *a[16];
    int n = 0;

    snprintf(idx, sizeof(idx), "%d", i);
    a[n++] = "--job";
    a[n++] = "rejoin";
    a[n++] = "--shard";
    a[n++] = idx;
    a[n++] = "--shards";
    a[n++] = "2";
    if (sh->durable) {
        a[n++] = "--checkpoint-dir";
        a[n++] = sh->ck;
    }
    if (restore)
        a[n++] = "--restore";
    if (listen != NULL) {
        a[n++] = "--listen";
        a[n++] = listen;
    }
    a[n] = NULL;
    cr_assert_eq(test_shard_start(&sh->s[i], sh->log[i], a), 0,
                 "shard %d did not start; see %s", i, sh->log[i]);
    sh->servers[i] = sh->s[i].endpoint;
}

static void shards_start(shards *sh, int durable)
{
    memset(sh, 0, sizeof(*sh));
    snprintf(sh->dir, sizeof(sh->dir), "/tmp/flps-rejoin-XXXXXX");
    cr_assert_not_null(mkdtemp(sh->dir));
    snprintf(sh->ck, sizeof(sh->ck), "%s/ckpt", sh->dir);
    snprintf(sh->log[0], sizeof(sh->log[0]), "%s/s0.log", sh->dir);
    snprintf(sh->log[1], sizeof(sh->log[1]), "%s/s1.log", sh->dir);
    sh->durable = durable;
    shard_start(sh, 0, 0, NULL);
    shard_start(sh, 1, 0, NULL);
}

/* SIGKILL shard i and start it again with --restore on its port. */
static void shard_crash_and_restore(shards *sh, int i)
{
    char ep[256];

    snprintf(ep, sizeof(ep), "%s", sh->s[i].endpoint);
    cr_assert(WIFSIGNALED(test_shard_stop(&sh->s[i], SIGKILL)));
    shard_start(sh, i, 1, ep);
}

static int log_has(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int found = 0;

    cr_assert_not_null(f);
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

/* Every rank's replica, and the shards' values read back by a new pull,
 * equal ref bit for bit. */
static void assert_model(worker *w, float *const *ref, const char *what)
{
    for (int r = 0; r < NW; r++)
        for (int k = 0; k < NT; k++)
            for (size_t i = 0; i < numel[k]; i++)
                cr_assert_eq(w[r].data[k][i], ref[k][i],
                             "%s: rank %d tensor %d element %zu is %a, the "
                             "undisturbed run's %a",
                             what, r, k, i, (double)w[r].data[k][i],
                             (double)ref[k][i]);
    for (int k = 0; k < NT; k++)
        memset(w[1].data[k], 0, numel[k] * sizeof(float));
    cr_assert_eq(flps_client_pull(w[1].c), FLPS_OK);
    for (int k = 0; k < NT; k++)
        cr_assert_eq(memcmp(w[1].data[k], ref[k], numel[k] * sizeof(float)), 0,
                     "%s: the shards' tensor %d differs from the undisturbed "
                     "run's",
                     what, k);
}

/* The model after NITER undisturbed iterations. */
static void reference_run(const char *compression, double momentum, float **ref)
{
    shards sh;
    worker w[NW];

    shards_start(&sh, 0);
    for (int r = 0; r < NW; r++)
        worker_init(&w[r], (uint32_t)r, sh.servers, compression, momentum,
                    20000, NULL);
    run_iterations(w, 0, NITER);
    for (int k = 0; k < NT; k++) {
        ref[k] = malloc(numel[k] * sizeof(float));
        memcpy(ref[k], w[0].data[k], numel[k] * sizeof(float));
    }
    for (int r = 0; r < NW; r++)
        worker_fini(&w[r]);
    test_shard_stop(&sh.s[0], SIGTERM);
    test_shard_stop(&sh.s[1], SIGTERM);
}

Test(rejoin, a_lost_update_is_answered_again_and_gtopk_stays_bit_exact,
     .timeout = 120)
{
    float *ref[NT];
    shards sh;
    worker w[NW];
    lossy *l;
    int dropped;

    /* gtopk with momentum: the error-feedback residual of every worker
     * depends on the rejected indices of every update it received. */
    reference_run("gtopk:0.3", 0.5, ref);

    shards_start(&sh, 1);
    l = lossy_create();
    worker_init(&w[0], 0, sh.servers, "gtopk:0.3", 0.5, 20000, &l->base);
    worker_init(&w[1], 1, sh.servers, "gtopk:0.3", 0.5, 20000, NULL);
    run_iterations(w, 0, 3);
    /* Iteration 3 closes on both shards (rank 1 has every update), but
     * shard 1's updates to rank 0 are lost, and shard 1 is killed after
     * logging them. */
    push_all(w, 3);
    wait_one(&w[1], 3);
    dropped = lossy_lose_from(l, 1, 500);
    cr_assert_gt(dropped, 0, "no update of shard 1 to lose");
    shard_crash_and_restore(&sh, 1);
    /* Rank 0 sends its pushes again; the restored shard answers them with
     * the update it logged, rejected indices included. */
    wait_one(&w[0], 3);
    cr_assert(log_has(sh.log[1], "answered rank 0's push for closed "
                                 "iteration 3"),
              "shard 1 did not answer the late push; see %s", sh.log[1]);
    run_iterations(w, 4, NITER);
    assert_model(w, ref, "gtopk, shard 1 killed at iteration 3");

    for (int r = 0; r < NW; r++)
        worker_fini(&w[r]);
    test_shard_stop(&sh.s[0], SIGTERM);
    test_shard_stop(&sh.s[1], SIGTERM);
    for (int k = 0; k < NT; k++)
        free(ref[k]);
}

Test(rejoin,
     restarted_workers_resume_at_the_lowest_open_iteration_and_match_bit_exact,
     .timeout = 120)
{
    float *ref[NT];
    shards sh;
    worker w[NW];

    /* Dense, no momentum: a worker keeps nothing but its replica, so a
     * restarted one continues exactly where it left. */
    reference_run("dense", 0.0, ref);

    shards_start(&sh, 1);
    for (int r = 0; r < NW; r++)
        worker_init(&w[r], (uint32_t)r, sh.servers, "dense", 0.0, 3000, NULL);
    run_iterations(w, 0, 4);
    /* Shard 1 dies; iteration 4 closes on shard 0 only (open: 5), while
     * shard 1 restores its parts at 4. */
    cr_assert(WIFSIGNALED(test_shard_stop(&sh.s[1], SIGKILL)));
    push_all(w, 4);
    for (int r = 0; r < NW; r++)
        cr_assert_eq(flps_client_wait(w[r].c, 4), FLPS_ETIMEDOUT,
                     "shard 1 is dead, yet iteration 4 completed");
    for (int r = 0; r < NW; r++)
        worker_fini(&w[r]);
    /* Everything restarts, as flsched restarts a failed attempt: shard 0
     * stopped cleanly (a checkpoint at SIGTERM), shard 1 from its log. */
    cr_assert_eq(test_shard_stop(&sh.s[0], SIGTERM), 0);
    shard_start(&sh, 0, 1, NULL);
    shard_start(&sh, 1, 1, NULL);
    for (int r = 0; r < NW; r++) {
        worker_init(&w[r], (uint32_t)r, sh.servers, "dense", 0.0, 20000, NULL);
        cr_assert_eq(flps_client_resume_iteration(w[r].c), 4,
                     "rank %d resumes at %llu, not the lowest open 4", r,
                     (unsigned long long)flps_client_resume_iteration(w[r].c));
    }
    run_iterations(w, 4, NITER);
    cr_assert(log_has(sh.log[0], "for closed iteration 4"),
              "shard 0 did not answer a push of the iteration it had closed; "
              "see %s",
              sh.log[0]);
    assert_model(w, ref, "dense, all restarted after shard 1 died");

    for (int r = 0; r < NW; r++)
        worker_fini(&w[r]);
    test_shard_stop(&sh.s[0], SIGTERM);
    test_shard_stop(&sh.s[1], SIGTERM);
    for (int k = 0; k < NT; k++)
        free(ref[k]);
}
