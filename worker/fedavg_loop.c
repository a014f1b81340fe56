/* The rounds of a fedavg job in one worker process. */
#include "worker/fedavg_loop.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "services/event.h"
#include "worker/fedavg.h"

/* test_accuracy_last5 is the mean of this many final evaluations. */
#define FEDAVG_LAST_EVALS 5
/* Late clients a round's log line names. */
#define FL_LATE_SHOWN 8

/* Where each client is in its own data: it goes through its samples in a
 * shuffled order and reshuffles when it has seen them all, across rounds
 * (a client resumes where its last round stopped). */
typedef struct fl_data {
    uint32_t *order; /* the partition's lists, reshuffled per client */
    size_t *cursor;  /* per client, into its list */
    uint64_t *epoch; /* per client */
} fl_data;

/* The next batch of client c into x, y. */
static void fl_batch(const fedavg_loop_args *a, fl_data *d, uint32_t c,
                     float *x, uint8_t *y)
{
    const dataset *tr = a->train;
    const size_t len = partition_count(a->part, c);
    uint32_t *list = d->order + a->part->off[c];

    for (uint32_t b = 0; b < a->spec->batch_size; b++) {
        uint32_t s;

        if (d->cursor[c] == len) {
            uint64_t rng = a->spec->seed * 0x100000001b3ull ^
                           ((uint64_t)c << 32) ^ ++d->epoch[c];

            d->cursor[c] = 0;
            partition_shuffle(list, len, &rng);
        }
        s = list[d->cursor[c]++];
        dataset_copy_sample(tr, s, x, y, b);
    }
}

static void fl_load_global(const fedavg_loop_args *a)
{
    for (size_t i = 0; i < model_num_tensors(a->m); i++) {
        model_tensor *t = model_tensor_at(a->m, i);
        memcpy(t->param, a->global[i], t->numel * sizeof(float));
    }
}

/* The learning rate of round r: the job's schedule over rounds. */
static double fl_lr(const jobspec *spec, uint64_t r)
{
    if (spec->lr_schedule != JOBSPEC_LR_COSINE)
        return spec->lr;
    return spec->lr * 0.5 *
           (1.0 + cos(M_PI * (double)r / (double)spec->rounds));
}

/* The local steps of client c in a round: local_steps, or with
 * local_epochs E the batches of E passes over its samples (at least 1). */
static uint32_t fl_steps(const fedavg_loop_args *a, uint32_t c)
{
    const jobspec *spec = a->spec;
    uint64_t n;

    if (spec->local_epochs == 0)
        return spec->local_steps;
    n = ((uint64_t)spec->local_epochs * partition_count(a->part, c) +
         spec->batch_size - 1) /
        spec->batch_size;
    return n == 0 ? 1 : n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* The local steps of SGD with momentum for client c from the global
 * model, which leave the client's local model in a->m; with prox_mu the
 * gradient gains FedProx's mu * (w - global). *loss_sum gains each step's
 * loss and *steps their count. */
static flps_err fl_train_client(const fedavg_loop_args *a, fl_data *d,
                                uint32_t c, uint64_t r, float *x, uint8_t *y,
                                float *vel, double *loss_sum, uint64_t *steps)
{
    const float lr = (float)fl_lr(a->spec, r), mom = (float)a->spec->momentum;
    const float mu = (float)a->spec->prox_mu;
    const uint32_t nsteps = fl_steps(a, c);
    const size_t nt = model_num_tensors(a->m);
    flps_err rc;

    fl_load_global(a);
    memset(vel, 0, model_num_params(a->m) * sizeof(float));
    for (uint32_t step = 0; step < nsteps; step++) {
        float loss = 0;

        fl_batch(a, d, c, x, y);
        rc = model_train_step(a->m, x, y, a->spec->batch_size, &loss, NULL,
                              NULL);
        if (rc != FLPS_OK) {
            log_error("round %llu, client %u, local step %u failed: %s "
                      "(lower lr?)",
                      (unsigned long long)r, c, step, flps_strerror(rc));
            return rc;
        }
        *loss_sum += loss;
        (*steps)++;
        /* Only with a mu: mu * 0 would still turn -0 into +0. */
        for (size_t i = 0; mu > 0 && i < nt; i++) {
            model_tensor *t = model_tensor_at(a->m, i);

            for (size_t k = 0; k < t->numel; k++)
                t->grad[k] += mu * (t->param[k] - a->global[i][k]);
        }
        model_sgd_step(a->m, vel, lr, mom);
    }
    return FLPS_OK;
}

/* Add client c's delta (its local model in a->m) to acc, weighted by its
 * sample count. */
static void fl_add_client(const fedavg_loop_args *a, uint32_t c, float *acc)
{
    size_t off = 0;

    for (size_t i = 0; i < model_num_tensors(a->m); i++) {
        model_tensor *t = model_tensor_at(a->m, i);

        fedavg_add_delta(acc + off, t->param, a->global[i], t->numel,
                         (double)partition_count(a->part, c));
        off += t->numel;
    }
}

/* round_deadline's stragglers (fedavg_stragglers); NULL when there are
 * none or on failure (*rc says which). */
static uint8_t *fl_stragglers(const jobspec *spec, uint32_t N, flps_err *rc)
{
    uint8_t *slow;

    *rc = FLPS_OK;
    if (spec->round_deadline <= 0 || spec->straggler_fraction <= 0 ||
        spec->straggler_slowdown <= 1 || N == 0)
        return NULL;
    slow = flps_malloc(N);
    *rc = slow == NULL ? FLPS_ENOMEM
                       : fedavg_stragglers(N, spec->straggler_fraction,
                                           spec->seed, slow);
    if (*rc != FLPS_OK) {
        flps_free(slow);
        return NULL;
    }
    return slow;
}

static flps_err fl_evaluate(const fedavg_loop_args *a, double *acc,
                            double *loss)
{
    size_t correct = 0;
    double loss_sum = 0;
    flps_err rc;

    fl_load_global(a);
    rc = model_evaluate(a->m, a->test->x, a->test->y, a->test->n, &correct,
                        &loss_sum);
    if (rc == FLPS_OK) {
        *acc = (double)correct / (double)a->test->n;
        *loss = loss_sum / (double)a->test->n;
    }
    return rc;
}

/* The loop's buffers and counters over the rounds. */
typedef struct fl_run {
    uint32_t per_round; /* clients sampled per round */
    float *acc;         /* this process's push: the clients' deltas */
    float *vel;         /* a client's momentum */
    float *x;           /* a batch */
    uint8_t *y;
    uint32_t *sample;   /* the round's clients */
    uint64_t *sample64; /* the same, for the progress event */
    uint8_t *slow;      /* round_deadline's stragglers, or NULL */
    fl_data d;
    double t0;
    double tacc, tloss; /* rank 0's last evaluation; tacc < 0: none */
    double last_sum;    /* of the last FEDAVG_LAST_EVALS evaluations */
    unsigned last_n;
    uint64_t late_total, client_rounds;
    unsigned round_late;   /* this process's late clients in the round */
    uint64_t round_bytes0; /* bytes_sent when the round began */
} fl_run;

static flps_err fl_run_init(const fedavg_loop_args *a, fl_run *f)
{
    const jobspec *spec = a->spec;
    const uint32_t N = a->part->clients;
    const size_t P = model_num_params(a->m);
    flps_err slow_rc;

    memset(f, 0, sizeof(*f));
    f->per_round = fedavg_round_size(N, spec->client_fraction);
    f->acc = flps_calloc(P, sizeof(float));
    f->vel = flps_calloc(P, sizeof(float));
    f->x =
        flps_malloc((size_t)spec->batch_size * a->train->dim * sizeof(float));
    f->y = flps_malloc(spec->batch_size);
    f->sample = flps_malloc((size_t)f->per_round * sizeof(uint32_t));
    f->sample64 = flps_malloc((size_t)f->per_round * sizeof(uint64_t) + 1);
    f->slow = fl_stragglers(spec, N, &slow_rc);
    f->d.order = flps_malloc((a->part->n ? a->part->n : 1) * sizeof(uint32_t));
    f->d.cursor = flps_calloc(N, sizeof(size_t));
    f->d.epoch = flps_calloc(N, sizeof(uint64_t));
    f->t0 = flps_mono_s();
    f->tacc = -1;
    if (f->acc == NULL || f->vel == NULL || f->x == NULL || f->y == NULL ||
        f->sample == NULL || f->sample64 == NULL || f->d.order == NULL ||
        f->d.cursor == NULL || f->d.epoch == NULL || slow_rc != FLPS_OK) {
        log_error("out of memory");
        return FLPS_ENOMEM;
    }
    memcpy(f->d.order, a->part->idx, a->part->n * sizeof(uint32_t));
    return FLPS_OK;
}

static void fl_run_fini(fl_run *f)
{
    flps_free(f->acc);
    flps_free(f->vel);
    flps_free(f->x);
    flps_free(f->y);
    flps_free(f->sample);
    flps_free(f->sample64);
    flps_free(f->d.order);
    flps_free(f->d.cursor);
    flps_free(f->d.epoch);
    flps_free(f->slow);
}

/* Train this process's clients of round r's sample into f->acc (their
 * weighted deltas): *weight gets the in-time clients' samples, *mine how
 * many it trained, *loss_sum their steps' losses. Late clients (past
 * round_deadline) are left out and logged. */
static flps_err fl_train_round(const fedavg_loop_args *a, fl_run *f, uint64_t r,
                               double *weight, unsigned *mine, double *loss_sum,
                               uint64_t *steps)
{
    const jobspec *spec = a->spec;
    const int deadline = spec->round_deadline > 0;
    unsigned nlate = 0;
    char late[256] = "";
    flps_err rc;

    memset(f->acc, 0, model_num_params(a->m) * sizeof(float));
    for (uint32_t k = 0; k < f->per_round; k++) {
        const uint32_t c = f->sample[k];
        double began, took;

        if (c % spec->workers != a->rank)
            continue;
        began = flps_mono_s();
        rc = fl_train_client(a, &f->d, c, r, f->x, f->y, f->vel, loss_sum,
                             steps);
        if (rc != FLPS_OK)
            return rc;
        /* A client's round time is its own training: on real devices
         * the clients this process plays in turn run side by side. */
        took = (flps_mono_s() - began) *
               (f->slow != NULL && f->slow[c] ? spec->straggler_slowdown : 1.0);
        f->client_rounds++;
        (*mine)++;
        if (deadline && took > spec->round_deadline) {
            if (nlate < FL_LATE_SHOWN)
                snprintf(late + strlen(late), sizeof(late) - strlen(late),
                         "%s%u (%.3g s)", nlate ? ", " : "", c, took);
            nlate++;
            continue;
        }
        fl_add_client(a, c, f->acc);
        *weight += (double)partition_count(a->part, c);
    }
    f->late_total += nlate;
    f->round_late = nlate;
    if (nlate > 0)
        log_warn("round %llu: %u of this process's %u clients missed the "
                 "%.3g s round_deadline and were left out: %s%s",
                 (unsigned long long)r, nlate, *mine, spec->round_deadline,
                 late, nlate > FL_LATE_SHOWN ? ", ..." : "");
    return FLPS_OK;
}

/* Push f->acc as round r's contribution and wait for the round's update.
 * total: the samples of the round's whole sample; weight: of this
 * process's in-time clients. */
static flps_err fl_push_round(const fedavg_loop_args *a, fl_run *f, uint64_t r,
                              double total, double weight)
{
    const size_t P = model_num_params(a->m), nt = model_num_tensors(a->m);
    size_t off = 0;
    flps_err rc = FLPS_OK;

    /* Every process pushes, zeros when it has no client this round:
     * the shards close a round when all of them have pushed. With a
     * deadline the shards divide by the in-time clients' samples. */
    if (a->spec->round_deadline > 0) {
        for (size_t j = 0; j < P; j++)
            f->acc[j] = -f->acc[j];
        rc = flps_client_set_push_weight(a->client, weight);
        if (rc != FLPS_OK) {
            log_error("round %llu: cannot set the push's weight: %s",
                      (unsigned long long)r, flps_strerror(rc));
            return rc;
        }
    } else {
        fedavg_scale_push(f->acc, P, a->spec->workers, total);
    }
    for (size_t i = 0; i < nt; i++) {
        rc = flps_client_push(a->client, (uint32_t)i, f->acc + off, r);
        if (rc != FLPS_OK)
            break;
        off += model_tensor_at(a->m, i)->numel;
    }
    if (rc == FLPS_OK)
        rc = flps_client_wait(a->client, r);
    if (rc != FLPS_OK)
        log_error("round %llu: %s", (unsigned long long)r,
                  flps_client_last_error(a->client)[0]
                      ? flps_client_last_error(a->client)
                      : flps_strerror(rc));
    return rc;
}

static void fl_print_eval(uint64_t iter, double acc, double loss)
{
    event ev = {.kind = EVENT_EVAL};

    ev.eval.iter = iter;
    ev.eval.test_accuracy = acc;
    ev.eval.test_loss = loss;
    EVENT_SET(&ev.eval, eval, test_loss);
    (void)event_write(stdout, &ev);
}

/* Rank 0 after round r: the progress event, and an evaluation of the
 * global model each eval_every rounds and in each of the last ones. */
static flps_err fl_report_round(const fedavg_loop_args *a, fl_run *f,
                                uint64_t r, unsigned mine, double loss_sum,
                                uint64_t steps)
{
    const jobspec *spec = a->spec;
    flps_client_stats st;
    event ev = {.kind = EVENT_PROGRESS};
    flps_err rc;

    flps_client_get_stats(a->client, &st);
    ev.progress.iter = r + 1;
    ev.progress.iterations = spec->rounds;
    ev.progress.clients = mine;
    EVENT_SET(&ev.progress, progress, clients);
    ev.progress.sampled = f->per_round;
    EVENT_SET(&ev.progress, progress, sampled);
    for (uint32_t k = 0; k < f->per_round; k++)
        f->sample64[k] = f->sample[k];
    ev.progress.round_clients.v = f->sample64;
    ev.progress.round_clients.n = f->per_round;
    EVENT_SET(&ev.progress, progress, round_clients);
    if (spec->round_deadline > 0) {
        ev.progress.late = f->round_late;
        EVENT_SET(&ev.progress, progress, late);
    }
    ev.progress.round_bytes = st.bytes_sent - f->round_bytes0;
    EVENT_SET(&ev.progress, progress, round_bytes);
    ev.progress.loss = steps ? loss_sum / (double)steps : 0.0;
    ev.progress.bytes_sent = st.bytes_sent;
    ev.progress.dense_bytes = st.dense_bytes;
    ev.progress.elapsed = flps_mono_s() - f->t0;
    (void)event_write(stdout, &ev);
    if (!((spec->eval_every > 0 && (r + 1) % spec->eval_every == 0) ||
          r + FEDAVG_LAST_EVALS >= spec->rounds))
        return FLPS_OK;
    rc = fl_evaluate(a, &f->tacc, &f->tloss);
    if (rc != FLPS_OK) {
        log_error("round %llu: evaluation failed: %s", (unsigned long long)r,
                  flps_strerror(rc));
        return rc;
    }
    if (r + FEDAVG_LAST_EVALS >= spec->rounds) {
        f->last_sum += f->tacc;
        f->last_n++;
    }
    fl_print_eval(r + 1, f->tacc, f->tloss);
    return FLPS_OK;
}

/* This rank's done event and log line. */
static void fl_print_done(const fedavg_loop_args *a, const fl_run *f)
{
    const jobspec *spec = a->spec;
    flps_client_stats st;
    char comp[64], sopt[64];
    event ev = {.kind = EVENT_DONE};
    event_done *d = &ev.done;
    flps_energy en;

    flps_client_get_stats(a->client, &st);
    d->rank = a->rank;
    d->iterations = spec->rounds;
    d->rounds = spec->rounds;
    EVENT_SET(d, done, rounds);
    d->bytes_sent = st.bytes_sent;
    d->bytes_received = st.bytes_received;
    d->dense_bytes = st.dense_bytes;
    d->resends = st.resends;
    jobspec_comp_format(spec, comp, sizeof(comp));
    d->compression = comp;
    d->mode = "fedavg";
    EVENT_SET(d, done, compression);
    EVENT_SET(d, done, mode);
    if (spec->round_deadline > 0) {
        d->late_clients = f->late_total;
        d->client_rounds = f->client_rounds;
        EVENT_SET(d, done, late_clients);
        EVENT_SET(d, done, client_rounds);
    }
    jobspec_server_opt_format(spec, sopt, sizeof(sopt));
    d->server_optimizer = sopt;
    EVENT_SET(d, done, server_optimizer);
    if (spec->prox_mu > 0) {
        d->prox_mu = spec->prox_mu;
        EVENT_SET(d, done, prox_mu);
    }
    if (a->rank == 0) {
        d->test_accuracy = f->tacc;
        d->test_loss = f->tloss;
        d->test_accuracy_last5 = f->last_n ? f->last_sum / f->last_n : f->tacc;
        EVENT_SET(d, done, test_accuracy);
        EVENT_SET(d, done, test_loss);
        EVENT_SET(d, done, test_accuracy_last5);
    }
    if (a->backend != NULL) {
        d->backend = a->backend;
        EVENT_SET(d, done, backend);
    }
    if (flps_client_energy(a->client, &en, sizeof(en)) == FLPS_OK)
        event_done_energy(d, &en); /* per round: a round is an iteration */
    d->seconds = flps_mono_s() - f->t0;
    (void)event_write(stdout, &ev);
    log_info("rank %u done: %u rounds in %.1f s, sent %llu bytes (dense "
             "would be %llu)",
             a->rank, spec->rounds, flps_mono_s() - f->t0,
             (unsigned long long)st.bytes_sent,
             (unsigned long long)st.dense_bytes);
}

flps_err fedavg_loop_run(const fedavg_loop_args *a)
{
    const jobspec *spec = a->spec;
    const uint32_t N = a->part->clients;
    fl_run f;
    flps_err rc = fl_run_init(a, &f);

    if (rc != FLPS_OK)
        goto out;
    for (uint64_t r = a->start_round; r < spec->rounds; r++) {
        double total = 0, loss_sum = 0, weight = 0;
        unsigned mine = 0;
        uint64_t steps = 0;
        flps_client_stats st0;

        rc = fedavg_sample(N, spec->client_fraction, spec->seed, r, f.sample);
        if (rc != FLPS_OK) {
            log_error("round %llu: cannot sample clients: %s",
                      (unsigned long long)r, flps_strerror(rc));
            goto out;
        }
        for (uint32_t k = 0; k < f.per_round; k++)
            total += (double)partition_count(a->part, f.sample[k]);
        flps_client_get_stats(a->client, &st0);
        f.round_bytes0 = st0.bytes_sent;
        rc = fl_train_round(a, &f, r, &weight, &mine, &loss_sum, &steps);
        if (rc == FLPS_OK)
            rc = fl_push_round(a, &f, r, total, weight);
        if (rc == FLPS_OK)
            (void)flps_metrics_report_round(r + 1, mine, f.round_late);
        if (rc == FLPS_OK && a->rank == 0)
            rc = fl_report_round(a, &f, r, mine, loss_sum, steps);
        if (rc != FLPS_OK)
            goto out;
    }
    if (a->rank == 0 && f.tacc < 0) {
        /* Resumed after the last round: evaluate what the shards hold. */
        rc = fl_evaluate(a, &f.tacc, &f.tloss);
        if (rc != FLPS_OK)
            goto out;
        fl_print_eval(spec->rounds, f.tacc, f.tloss);
    }
    fl_print_done(a, &f);
out:
    fl_run_fini(&f);
    return rc;
}
