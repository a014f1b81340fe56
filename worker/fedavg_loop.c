/* The rounds of a fedavg job in one worker process. */
#include "worker/fedavg_loop.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
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
        memcpy(x + (size_t)b * tr->dim, tr->x + (size_t)s * tr->dim,
               tr->dim * sizeof(float));
        y[b] = tr->y[s];
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

/* local_steps of SGD with momentum for client c from the global model,
 * which leaves the client's local model in a->m. *loss_sum gains each
 * step's loss. */
static flps_err fl_train_client(const fedavg_loop_args *a, fl_data *d,
                                uint32_t c, uint64_t r, float *x, uint8_t *y,
                                float *vel, double *loss_sum)
{
    const size_t nt = model_num_tensors(a->m);
    const float lr = (float)fl_lr(a->spec, r), mom = (float)a->spec->momentum;
    size_t off;
    flps_err rc;

    fl_load_global(a);
    memset(vel, 0, model_num_params(a->m) * sizeof(float));
    for (uint32_t step = 0; step < a->spec->local_steps; step++) {
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
        off = 0;
        for (size_t i = 0; i < nt; i++) {
            model_tensor *t = model_tensor_at(a->m, i);
            float *v = vel + off;

            for (size_t k = 0; k < t->numel; k++) {
                v[k] = mom * v[k] + t->grad[k];
                t->param[k] -= lr * v[k];
            }
            off += t->numel;
        }
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

flps_err fedavg_loop_run(const fedavg_loop_args *a)
{
    const jobspec *spec = a->spec;
    const uint32_t W = spec->workers, N = a->part->clients;
    const uint32_t per_round = fedavg_round_size(N, spec->client_fraction);
    const size_t P = model_num_params(a->m), nt = model_num_tensors(a->m);
    const size_t dim = a->train->dim;
    float *acc = flps_calloc(P, sizeof(float));
    float *vel = flps_calloc(P, sizeof(float));
    float *x = flps_malloc((size_t)spec->batch_size * dim * sizeof(float));
    uint8_t *y = flps_malloc(spec->batch_size);
    uint32_t *sample = flps_malloc((size_t)per_round * sizeof(uint32_t));
    const int deadline = spec->round_deadline > 0;
    flps_err slow_rc;
    uint8_t *slow = fl_stragglers(spec, N, &slow_rc);
    double t0 = flps_mono_s(), tacc = -1, tloss = 0, last_sum = 0;
    unsigned last_n = 0;
    uint64_t late_total = 0, client_rounds = 0;
    flps_client_stats st;
    fl_data d;
    flps_err rc = FLPS_ENOMEM;

    d.order = flps_malloc((a->part->n ? a->part->n : 1) * sizeof(uint32_t));
    d.cursor = flps_calloc(N, sizeof(size_t));
    d.epoch = flps_calloc(N, sizeof(uint64_t));
    if (acc == NULL || vel == NULL || x == NULL || y == NULL ||
        sample == NULL || d.order == NULL || d.cursor == NULL ||
        d.epoch == NULL || slow_rc != FLPS_OK) {
        log_error("out of memory");
        goto out;
    }
    memcpy(d.order, a->part->idx, a->part->n * sizeof(uint32_t));
    for (uint64_t r = a->start_round; r < spec->rounds; r++) {
        double total = 0, loss_sum = 0, weight = 0;
        unsigned mine = 0, nlate = 0;
        char late[256] = "";
        size_t off = 0;

        rc = fedavg_sample(N, spec->client_fraction, spec->seed, r, sample);
        if (rc != FLPS_OK) {
            log_error("round %llu: cannot sample clients: %s",
                      (unsigned long long)r, flps_strerror(rc));
            goto out;
        }
        for (uint32_t k = 0; k < per_round; k++)
            total += (double)partition_count(a->part, sample[k]);
        memset(acc, 0, P * sizeof(float));
        for (uint32_t k = 0; k < per_round; k++) {
            const uint32_t c = sample[k];
            double began, took;

            if (c % W != a->rank)
                continue;
            began = flps_mono_s();
            rc = fl_train_client(a, &d, c, r, x, y, vel, &loss_sum);
            if (rc != FLPS_OK)
                goto out;
            /* A client's round time is its own training: on real devices
             * the clients this process plays in turn run side by side. */
            took = (flps_mono_s() - began) *
                   (slow != NULL && slow[c] ? spec->straggler_slowdown : 1.0);
            client_rounds++;
            mine++;
            if (deadline && took > spec->round_deadline) {
                if (nlate < FL_LATE_SHOWN)
                    snprintf(late + strlen(late), sizeof(late) - strlen(late),
                             "%s%u (%.3g s)", nlate ? ", " : "", c, took);
                nlate++;
                continue;
            }
            fl_add_client(a, c, acc);
            weight += (double)partition_count(a->part, c);
        }
        late_total += nlate;
        if (nlate > 0)
            log_warn("round %llu: %u of this process's %u clients missed the "
                     "%.3g s round_deadline and were left out: %s%s",
                     (unsigned long long)r, nlate, mine, spec->round_deadline,
                     late, nlate > FL_LATE_SHOWN ? ", ..." : "");
        /* Every process pushes, zeros when it has no client this round:
         * the shards close a round when all of them have pushed. With a
         * deadline the shards divide by the in-time clients' samples. */
        if (deadline) {
            for (size_t j = 0; j < P; j++)
                acc[j] = -acc[j];
            rc = flps_client_set_push_weight(a->client, weight);
            if (rc != FLPS_OK) {
                log_error("round %llu: cannot set the push's weight: %s",
                          (unsigned long long)r, flps_strerror(rc));
                goto out;
            }
        } else {
            fedavg_scale_push(acc, P, W, total);
        }
        for (size_t i = 0; i < nt; i++) {
            rc = flps_client_push(a->client, (uint32_t)i, acc + off, r);
            if (rc != FLPS_OK)
                break;
            off += model_tensor_at(a->m, i)->numel;
        }
        if (rc == FLPS_OK)
            rc = flps_client_wait(a->client, r);
        if (rc != FLPS_OK) {
            log_error("round %llu: %s", (unsigned long long)r,
                      flps_client_last_error(a->client)[0]
                          ? flps_client_last_error(a->client)
                          : flps_strerror(rc));
            goto out;
        }
        if (a->rank != 0)
            continue;
        flps_client_get_stats(a->client, &st);
        printf("{\"event\":\"progress\",\"iter\":%llu,\"iterations\":%u,"
               "\"clients\":%u,\"loss\":%.5f,\"bytes_sent\":%llu,"
               "\"dense_bytes\":%llu,\"elapsed\":%.3f}\n",
               (unsigned long long)(r + 1), spec->rounds, mine,
               mine ? loss_sum / ((double)mine * spec->local_steps) : 0.0,
               (unsigned long long)st.bytes_sent,
               (unsigned long long)st.dense_bytes, flps_mono_s() - t0);
        if ((spec->eval_every > 0 && (r + 1) % spec->eval_every == 0) ||
            r + FEDAVG_LAST_EVALS >= spec->rounds) {
            rc = fl_evaluate(a, &tacc, &tloss);
            if (rc != FLPS_OK) {
                log_error("round %llu: evaluation failed: %s",
                          (unsigned long long)r, flps_strerror(rc));
                goto out;
            }
            if (r + FEDAVG_LAST_EVALS >= spec->rounds) {
                last_sum += tacc;
                last_n++;
            }
            printf("{\"event\":\"eval\",\"iter\":%llu,\"test_accuracy\":%.4f,"
                   "\"test_loss\":%.4f}\n",
                   (unsigned long long)(r + 1), tacc, tloss);
        }
        fflush(stdout);
    }
    if (a->rank == 0 && tacc < 0) {
        /* Resumed after the last round: evaluate what the shards hold. */
        rc = fl_evaluate(a, &tacc, &tloss);
        if (rc != FLPS_OK)
            goto out;
        printf("{\"event\":\"eval\",\"iter\":%u,\"test_accuracy\":%.4f,"
               "\"test_loss\":%.4f}\n",
               spec->rounds, tacc, tloss);
    }
    flps_client_get_stats(a->client, &st);
    printf("{\"event\":\"done\",\"rank\":%u,\"iterations\":%u,"
           "\"rounds\":%u,\"bytes_sent\":%llu,\"bytes_received\":%llu,"
           "\"dense_bytes\":%llu,\"resends\":%llu",
           a->rank, spec->rounds, spec->rounds,
           (unsigned long long)st.bytes_sent,
           (unsigned long long)st.bytes_received,
           (unsigned long long)st.dense_bytes, (unsigned long long)st.resends);
    if (deadline)
        printf(",\"late_clients\":%llu,\"client_rounds\":%llu",
               (unsigned long long)late_total,
               (unsigned long long)client_rounds);
    if (a->rank == 0)
        printf(",\"test_accuracy\":%.4f,\"test_loss\":%.4f,"
               "\"test_accuracy_last5\":%.4f",
               tacc, tloss, last_n ? last_sum / last_n : tacc);
    if (a->backend != NULL)
        printf(",\"backend\":\"%s\"", a->backend);
    printf(",\"seconds\":%.3f}\n", flps_mono_s() - t0);
    fflush(stdout);
    log_info("rank %u done: %u rounds in %.1f s, sent %llu bytes (dense "
             "would be %llu)",
             a->rank, spec->rounds, flps_mono_s() - t0,
             (unsigned long long)st.bytes_sent,
             (unsigned long long)st.dense_bytes);
    rc = FLPS_OK;
out:
    flps_free(acc);
    flps_free(vel);
    flps_free(x);
    flps_free(y);
    flps_free(sample);
    flps_free(d.order);
    flps_free(d.cursor);
    flps_free(d.epoch);
    flps_free(slow);
    return rc;
}
