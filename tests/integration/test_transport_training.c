/* Training over each kind of transport in one process: 2 shards (each a
 * ps_shard driven by its own thread, as the flps daemon drives one) and 4
 * clients (libflps over a transport the test makes, one thread each)
 * train the MLP on Fashion-MNIST with gtopk:0.01. A shard sums an
 * iteration's pushes in rank order, so the final parameters do not depend
 * on the order messages arrive in: a run over the RDMA transport on the
 * emulated NIC must end bit for bit where the same run over ZeroMQ ends,
 * on every shard's parts and on every client's replica, and training must
 * have made progress (the loss fell). The emulated NIC reaches only
 * within a process, hence threads rather than processes here. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flps.h"
#include "ps/net.h"
#include "ps/shard.h"
#include "tests/proto/transport_kinds.h"
#include "worker/client_internal.h"
#include "worker/dataset.h"
#include "worker/model.h"

#define NSHARDS 2
#define NWORKERS 4
#define NITER 300
#define BATCH 32
#define SUBSET 12000 /* training samples used, 3000 per worker */
#define LOSS_WINDOW 25
#define JOB "transport-training"
#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static const size_t hidden[] = {256, 128};

/* ---- the shards ---- */

typedef struct shard_th {
    ps_shard *s;
    transport *t;
    pthread_t th;
    atomic_int stop;
    char fail[512];
} shard_th;

/* The daemon's loop (ps/main.c): receive, hand to the shard, answer what
 * the transport refused. */
static void *shard_main(void *arg)
{
    shard_th *sh = arg;

    while (!atomic_load(&sh->stop)) {
        transport_rx *rx = NULL;
        flps_err rc = transport_recv(sh->t, 50, &rx);
        if (rc == FLPS_OK) {
            ps_shard_handle(sh->s, rx);
        } else if (rc == FLPS_EPROTO) {
            if (sh->t->refused_peer != UINT32_MAX)
                ps_shard_refuse(sh->s, sh->t->refused_peer, FLPS_EPROTO,
                                sh->t->errmsg);
            else
                ps_shard_count_dropped(sh->s, sh->t->errmsg);
        } else if (rc != FLPS_ETIMEDOUT) {
            snprintf(sh->fail, sizeof(sh->fail), "receive failed: %s (%s)",
                     flps_strerror(rc), sh->t->errmsg);
            break;
        }
    }
    return NULL;
}

/* ---- the clients ---- */

typedef struct worker_th {
    const conf_kind *k;
    const conf_opts *o;
    const dataset *train;
    const char *const *servers;
    uint32_t rank;
    pthread_t th;
    char fail[512];
    float *replica; /* every tensor's values at the end, in order */
    size_t nparams;
    double loss_first, loss_last; /* mean of the first / last iterations */
} worker_th;

typedef struct push_ctx {
    flps_client *c;
    model *m;
    uint64_t iter;
    flps_err err;
} push_ctx;

/* Backprop calls this as each layer's gradient is final (flworker's way). */
static void on_grad_ready(void *arg, size_t ti)
{
    push_ctx *pc = arg;

    if (pc->err == FLPS_OK)
        pc->err = flps_client_push(pc->c, (uint32_t)ti,
                                   model_tensor_at(pc->m, ti)->grad, pc->iter);
}

static void *worker_main(void *arg)
{
    worker_th *w = arg;
    model *m = NULL;
    flps_client *c = NULL;
    transport *t = NULL;
    flps_tensor *tensors = NULL;
    uint32_t *idx = NULL;
    size_t count = 0, nt, off;
    float *xb = NULL;
    uint8_t yb[BATCH];
    flps_client_config cfg;
    char why[256] = "";
    flps_err rc;

    rc = model_create_mlp(w->train->dim, hidden, 2, w->train->classes, BATCH, 1,
                          &m);
    if (rc != FLPS_OK) {
        snprintf(w->fail, sizeof(w->fail), "model: %s", flps_strerror(rc));
        goto out;
    }
    nt = model_num_tensors(m);
    tensors = calloc(nt, sizeof(*tensors));
    xb = malloc(sizeof(float) * BATCH * w->train->dim);
    if (tensors == NULL || xb == NULL ||
        dataset_split_iid(w->train->n, NWORKERS, w->rank, 1, &idx, &count) !=
            FLPS_OK) {
        snprintf(w->fail, sizeof(w->fail), "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nt; i++) {
        model_tensor *mt = model_tensor_at(m, i);
        tensors[i].name = mt->name;
        tensors[i].numel = mt->numel;
        tensors[i].data = mt->param;
    }
    rc = w->k->create(w->o, 0, &t, why, sizeof(why));
    if (rc != FLPS_OK) {
        snprintf(w->fail, sizeof(w->fail), "transport: %s", why);
        goto out;
    }
    cr_assert_eq(flps_client_config_init(&cfg), FLPS_OK);
    cfg.job = JOB;
    cfg.rank = w->rank;
    cfg.workers = NWORKERS;
    cfg.servers = w->servers;
    cfg.nservers = NSHARDS;
    cfg.tensors = tensors;
    cfg.ntensors = (uint32_t)nt;
    cfg.compression = "gtopk:0.01";
    cfg.lr = 0.05;
    cfg.momentum = 0.9;
    cfg.iterations = NITER;
    rc = flps_client_create_on(&cfg, t, &c);
    if (rc != FLPS_OK) {
        snprintf(w->fail, sizeof(w->fail), "rank %u: cannot join: %s", w->rank,
                 flps_strerror(rc));
        transport_destroy(t);
        goto out;
    }
    if (flps_client_init(c) != FLPS_OK) {
        snprintf(w->fail, sizeof(w->fail), "rank %u: init: %s", w->rank,
                 flps_client_last_error(c));
        goto out;
    }
    for (uint64_t it = 0; it < NITER; it++) {
        push_ctx pc = {c, m, it, FLPS_OK};
        float loss = 0;

        for (size_t b = 0; b < BATCH; b++) {
            uint32_t s = idx[(it * BATCH + b) % count];
            memcpy(xb + b * w->train->dim, w->train->x + s * w->train->dim,
                   sizeof(float) * w->train->dim);
            yb[b] = w->train->y[s];
        }
        rc = model_train_step(m, xb, yb, BATCH, &loss, on_grad_ready, &pc);
        if (rc == FLPS_OK)
            rc = pc.err;
        if (rc == FLPS_OK)
            rc = flps_client_wait(c, it);
        if (rc != FLPS_OK) {
            snprintf(w->fail, sizeof(w->fail),
                     "rank %u iteration %llu: %s (%s)", w->rank,
                     (unsigned long long)it, flps_strerror(rc),
                     flps_client_last_error(c));
            goto out;
        }
        if (it < LOSS_WINDOW)
            w->loss_first += loss / LOSS_WINDOW;
        if (it >= NITER - LOSS_WINDOW)
            w->loss_last += loss / LOSS_WINDOW;
    }
    w->nparams = model_num_params(m);
    w->replica = malloc(sizeof(float) * w->nparams);
    if (w->replica == NULL) {
        snprintf(w->fail, sizeof(w->fail), "out of memory");
        goto out;
    }
    off = 0;
    for (size_t i = 0; i < nt; i++) {
        model_tensor *mt = model_tensor_at(m, i);
        memcpy(w->replica + off, mt->param, sizeof(float) * mt->numel);
        off += mt->numel;
    }
out:
    flps_client_destroy(c);
    model_destroy(m);
    free(tensors);
    free(idx);
    free(xb);
    return NULL;
}

/* ---- one run ---- */

/* What a run ends with. */
typedef struct run_result {
    uint32_t nparts;
    float *parts[64];
    uint32_t numel[64];
    uint64_t version[64];
    uint32_t owner[64];
    float *replica[NWORKERS];
    size_t nparams;
    double loss_first, loss_last; /* means over the workers */
    uint64_t shard_msgs[NSHARDS];
} run_result;

static void result_fini(run_result *r)
{
    for (uint32_t p = 0; p < r->nparts; p++)
        free(r->parts[p]);
    for (int i = 0; i < NWORKERS; i++)
        free(r->replica[i]);
}

static void run_training(const conf_kind *k, const dataset *train,
                         run_result *r)
{
    conf_opts o;
    shard_th sh[NSHARDS];
    worker_th w[NWORKERS];
    char bound[NSHARDS][256];
    const char *servers[NSHARDS];
    uint32_t owned = 0;
    char why[256] = "";

    memset(r, 0, sizeof(*r));
    memset(&o, 0, sizeof(o));
    o.lim.send_hwm = TRANSPORT_SEND_HWM_DEFAULT;
    o.lim.max_frame_bytes = TRANSPORT_MAX_FRAME_DEFAULT;
    o.lim.max_peers = TRANSPORT_MAX_PEERS_DEFAULT;
    o.max_message_bytes = 4u << 20; /* the whole model is under 1 MiB */
    o.credits = 0;
    if (k->reset != NULL)
        k->reset();
    for (int i = 0; i < NSHARDS; i++) {
        ps_shard_config cfg;

        memset(&sh[i], 0, sizeof(sh[i]));
        atomic_init(&sh[i].stop, 0);
        cr_assert_eq(k->create(&o, 1, &sh[i].t, why, sizeof(why)), FLPS_OK,
                     "%s: listener: %s", k->name, why);
        cr_assert_eq(transport_listen(sh[i].t, "tcp://127.0.0.1:0", bound[i],
                                      sizeof(bound[i])),
                     FLPS_OK, "%s: listen: %s", k->name, sh[i].t->errmsg);
        servers[i] = bound[i];
        memset(&cfg, 0, sizeof(cfg));
        cfg.job = JOB;
        cfg.shard = (uint32_t)i;
        cfg.nshards = NSHARDS;
        cfg.send = ps_net_send;
        cfg.send_arg = sh[i].t;
        cr_assert_eq(ps_shard_create(&cfg, 0, &sh[i].s), FLPS_OK);
        cr_assert_eq(pthread_create(&sh[i].th, NULL, shard_main, &sh[i]), 0);
    }
    for (uint32_t i = 0; i < NWORKERS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].k = k;
        w[i].o = &o;
        w[i].train = train;
        w[i].servers = servers;
        w[i].rank = i;
        cr_assert_eq(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < NWORKERS; i++)
        pthread_join(w[i].th, NULL);
    for (int i = 0; i < NSHARDS; i++) {
        atomic_store(&sh[i].stop, 1);
        pthread_join(sh[i].th, NULL);
    }
    for (int i = 0; i < NWORKERS; i++)
        cr_assert_eq(w[i].fail[0], '\0', "%s: %s", k->name, w[i].fail);
    for (int i = 0; i < NSHARDS; i++)
        cr_assert_eq(sh[i].fail[0], '\0', "%s: shard %d: %s", k->name, i,
                     sh[i].fail);
    /* Every part of the model, from the shard that owns it. */
    for (int i = 0; i < NSHARDS; i++)
        owned += ps_shard_num_owned(sh[i].s);
    cr_assert_gt(owned, 0);
    cr_assert_leq(owned, 64);
    r->nparts = owned;
    for (uint32_t p = 0; p < owned; p++) {
        int found = 0;
        for (int i = 0; i < NSHARDS; i++) {
            const float *v;
            uint32_t n;
            uint64_t ver, iter;
            if (ps_shard_part(sh[i].s, p, &v, &n, &ver, &iter) != FLPS_OK)
                continue;
            cr_assert_eq(found, 0, "part %u on two shards", p);
            found = 1;
            r->parts[p] = malloc(sizeof(float) * n);
            cr_assert_not_null(r->parts[p]);
            memcpy(r->parts[p], v, sizeof(float) * n);
            r->numel[p] = n;
            r->version[p] = ver;
            r->owner[p] = (uint32_t)i;
        }
        cr_assert(found, "%s: part %u is on no shard", k->name, p);
    }
    for (int i = 0; i < NSHARDS; i++) {
        r->shard_msgs[i] = sh[i].t->stats.msgs_recv;
        ps_shard_destroy(sh[i].s);
        transport_destroy(sh[i].t);
    }
    r->nparams = w[0].nparams;
    for (int i = 0; i < NWORKERS; i++) {
        r->replica[i] = w[i].replica;
        r->loss_first += w[i].loss_first / NWORKERS;
        r->loss_last += w[i].loss_last / NWORKERS;
    }
    if (k->live != NULL) {
        char what[512];
        cr_assert_eq(k->live(what, sizeof(what)), 0,
                     "%s: alive after every transport was destroyed: %s",
                     k->name, what);
    }
    cr_log_info("%s: mean loss %.4f over the first %d iterations, %.4f over "
                "the last %d; the shards received %llu and %llu messages",
                k->name, r->loss_first, LOSS_WINDOW, r->loss_last, LOSS_WINDOW,
                (unsigned long long)r->shard_msgs[0],
                (unsigned long long)r->shard_msgs[1]);
}

/* Two runs end in the same bits: every part and every replica. */
static void assert_identical(const run_result *a, const char *an,
                             const run_result *b, const char *bn)
{
    cr_assert_eq(a->nparts, b->nparts);
    for (uint32_t p = 0; p < a->nparts; p++) {
        cr_assert_eq(a->numel[p], b->numel[p]);
        cr_assert_eq(a->owner[p], b->owner[p]);
        cr_assert_eq(a->version[p], b->version[p],
                     "part %u: version %llu over %s, %llu over %s", p,
                     (unsigned long long)a->version[p], an,
                     (unsigned long long)b->version[p], bn);
        for (uint32_t j = 0; j < a->numel[p]; j++)
            if (memcmp(&a->parts[p][j], &b->parts[p][j], sizeof(float)) != 0)
                cr_assert_fail("part %u element %u: %.9g over %s, %.9g over "
                               "%s",
                               p, j, a->parts[p][j], an, b->parts[p][j], bn);
    }
    cr_assert_eq(a->nparams, b->nparams);
    for (int i = 0; i < NWORKERS; i++)
        for (size_t j = 0; j < a->nparams; j++)
            if (memcmp(&a->replica[i][j], &b->replica[i][j], sizeof(float)))
                cr_assert_fail("rank %d's replica, parameter %zu: %.9g over "
                               "%s, %.9g over %s",
                               i, j, a->replica[i][j], an, b->replica[i][j],
                               bn);
}

/* The run trained: the loss fell, and the workers agree on the model. */
static void assert_trained(const run_result *r, const char *name)
{
    cr_assert_lt(r->loss_last, 0.75 * r->loss_first,
                 "%s: the mean loss went from %.4f to %.4f in %d iterations",
                 name, r->loss_first, r->loss_last, NITER);
    for (int i = 1; i < NWORKERS; i++)
        cr_assert_eq(
            memcmp(r->replica[i], r->replica[0], sizeof(float) * r->nparams), 0,
            "%s: rank %d's replica differs from rank 0's", name, i);
}

/* Fashion-MNIST's first SUBSET training samples (a synthetic set of the
 * same shape where the files are missing, said in the log). */
static void load_train(dataset *all, dataset *view)
{
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0) {
        cr_assert_eq(dataset_load_fmnist(FMNIST_DIR, "train", all), FLPS_OK);
    } else {
        cr_log_info("no Fashion-MNIST in %s: training on a synthetic set",
                    FMNIST_DIR);
        cr_assert_eq(dataset_synthetic(SUBSET, 784, 10, 1, all), FLPS_OK);
    }
    *view = *all;
    if (view->n > SUBSET)
        view->n = SUBSET;
}

Test(transport_training, two_runs_over_zeromq_end_in_the_same_bits,
     .timeout = 600)
{
    dataset all, train;
    run_result a, b;

    load_train(&all, &train);
    run_training(&kinds[KIND_ZMQ], &train, &a);
    assert_trained(&a, "zmq");
    run_training(&kinds[KIND_ZMQ], &train, &b);
    assert_identical(&a, "zmq", &b, "zmq (again)");
    result_fini(&a);
    result_fini(&b);
    dataset_fini(&all);
}

Test(transport_training, a_run_over_the_emulated_nic_ends_where_zeromq_does,
     .timeout = 600)
{
    const conf_kind *emu = &kinds[KIND_RDMA_EMU];
    dataset all, train;
    run_result a, b;
    char why[1024];

    if (emu->skip != NULL && emu->skip(why, sizeof(why)) != NULL) {
        /* stderr, not cr_log_warn: a warning makes Criterion 2.4 exit 1
         * even though every test that ran passed. */
        fprintf(stderr, "%s: skipped: %s\n", emu->name, why);
        cr_skip_test("%s: %s", emu->name, why);
    }
    load_train(&all, &train);
    run_training(&kinds[KIND_ZMQ], &train, &a);
    run_training(emu, &train, &b);
    assert_trained(&b, emu->name);
    assert_identical(&a, "zmq", &b, emu->name);
    result_fini(&a);
    result_fini(&b);
    dataset_fini(&all);
}
