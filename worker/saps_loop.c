/* flworker's loop for mode saps (decentralized SAPS-PSGD): local SGD on
 * the worker's own model, a round of exchanges through libflps's
 * flps_saps_* after every local_steps steps, rank 0's evaluations of its
 * own model, and at the end the consensus: the coordinator evaluates its
 * own model and the average of every worker's, and reports them with the
 * consensus distance (docs/algorithms.md, section 8). */
#include "worker/flworker.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "services/event.h"

/* The loop's state beside the worker's. */
typedef struct sl {
    flw *w;
    float *xb, *vel;
    uint8_t *yb;
    uint32_t *order; /* this rank's samples, shuffled per epoch */
    size_t cursor;
    uint64_t epoch, rounds, progress_every, nwin;
    double loss_window, t0, compute_s, comm_s;
    double acc, tloss; /* the last evaluation of this worker's model */
    double cacc;       /* the coordinator: the average model's accuracy */
    flps_saps_consensus_info cons;
    int have_cons; /* this worker is the coordinator */
    uint64_t *dead;
    size_t ndead;
    uint64_t *bw; /* the coordinator's done event: the matrix, bytes/s */
    char hash[24];
} sl;

int flw_saps_connect(flw *w, const char *transport)
{
    const jobspec *spec = &w->spec;
    flps_saps_config c;
    flps_err rc;

    flps_saps_config_init(&c);
    c.job = w->job_id;
    c.rank = (uint32_t)w->rank;
    c.workers = spec->workers;
    c.peers = w->peers;
    c.tensors = w->tensors;
    c.ntensors = (uint32_t)model_num_tensors(w->m);
    c.density = spec->saps_density;
    c.peer_selection = jobspec_peer_selection_name(spec->peer_selection);
    c.bandwidth_threshold = spec->bandwidth_threshold;
    c.connectivity_window = spec->connectivity_window;
    c.bandwidth_reprobe = spec->bandwidth_reprobe;
    c.seed = spec->seed;
    c.deadline_ms = (int)(spec->peer_deadline * 1000.0 + 0.5);
    if (c.deadline_ms < 1)
        c.deadline_ms = 1;
    c.transport = transport;
    rc = flps_saps_create(&c, &w->saps);
    if (rc != FLPS_OK) {
        log_error("cannot join the other workers: %s", flps_strerror(rc));
        return 0;
    }
    return 1;
}

static flps_err sl_evaluate(flw *w, double *acc, double *loss)
{
    size_t correct = 0;
    double sum = 0;
    flps_err rc =
        model_evaluate(w->m, w->test.x, w->test.y, w->test.n, &correct, &sum);

    if (rc == FLPS_OK) {
        *acc = (double)correct / (double)w->test.n;
        *loss = sum / (double)w->test.n;
    }
    return rc;
}

/* The learning rate of iteration t, as the shards schedule an ssgd job's. */
static float sl_lr(const jobspec *spec, uint64_t t)
{
    if (spec->lr_schedule != JOBSPEC_LR_COSINE)
        return (float)spec->lr;
    return (float)(spec->lr * 0.5 *
                   (1.0 + cos(M_PI * (double)t / (double)spec->iterations)));
}

static int sl_init(sl *L, flw *w)
{
    const jobspec *spec = &w->spec;

    memset(L, 0, sizeof(*L));
    L->w = w;
    L->acc = -1;
    L->xb =
        flps_malloc((size_t)spec->batch_size * w->train.dim * sizeof(float));
    L->yb = flps_malloc(spec->batch_size);
    L->vel = flps_calloc(model_num_params(w->m), sizeof(float));
    L->order = flps_malloc(w->nmine * sizeof(uint32_t));
    L->dead = flps_calloc(spec->workers, sizeof(uint64_t));
    if (L->xb == NULL || L->yb == NULL || L->vel == NULL || L->order == NULL ||
        L->dead == NULL) {
        log_error("out of memory");
        return 0;
    }
    memcpy(L->order, w->mine, w->nmine * sizeof(uint32_t));
    L->rounds = (spec->iterations + spec->local_steps - 1) / spec->local_steps;
    L->progress_every = spec->iterations / 100 ? spec->iterations / 100 : 1;
    return 1;
}

static void sl_fini(sl *L)
{
    flps_free(L->xb);
    flps_free(L->yb);
    flps_free(L->vel);
    flps_free(L->order);
    flps_free(L->dead);
    flps_free(L->bw);
}

/* The next batch of this rank's samples; each epoch in a new order. */
static void sl_batch(sl *L)
{
    flw *w = L->w;
    const dataset *tr = &w->train;

    for (uint32_t b = 0; b < w->spec.batch_size; b++) {
        uint32_t s;

        if (L->cursor == 0) {
            uint64_t rng = w->spec.seed * 0x9e3779b97f4a7c15ull ^
                           ((uint64_t)w->rank << 40) ^ L->epoch++;

            partition_shuffle(L->order, w->nmine, &rng);
        }
        s = L->order[L->cursor];
        L->cursor = (L->cursor + 1) % w->nmine;
        dataset_copy_sample(tr, s, L->xb, L->yb, b);
    }
}

static void sl_print_eval(const sl *L, uint64_t iter)
{
    event ev = {.kind = EVENT_EVAL};

    ev.eval.iter = iter;
    ev.eval.test_accuracy = L->acc;
    ev.eval.test_loss = L->tloss;
    ev.eval.elapsed_s = flps_mono_s() - L->t0;
    EVENT_SET(&ev.eval, eval, test_loss);
    EVENT_SET(&ev.eval, eval, elapsed_s);
    (void)event_write(stdout, &ev);
}

static void sl_print_progress(sl *L, uint64_t iter)
{
    flps_saps_stats st;
    event ev = {.kind = EVENT_PROGRESS};

    flps_saps_get_stats(L->w->saps, &st);
    ev.progress.iter = iter;
    ev.progress.iterations = L->w->spec.iterations;
    ev.progress.loss = L->loss_window / (double)L->nwin;
    ev.progress.bytes_sent = st.bytes_sent;
    ev.progress.dense_bytes = st.dense_bytes;
    ev.progress.elapsed = flps_mono_s() - L->t0;
    (void)event_write(stdout, &ev);
    L->loss_window = 0;
    L->nwin = 0;
}

/* Iteration it: a batch, the step and the update; after every local_steps
 * of them (and the last), round it / local_steps. Returns 0 on an error
 * (logged). */
static int sl_step(sl *L, uint64_t it)
{
    flw *w = L->w;
    const jobspec *spec = &w->spec;
    double t0 = flps_mono_s();
    float loss = 0;
    flps_err rc;

    sl_batch(L);
    rc = model_train_step(w->m, L->xb, L->yb, spec->batch_size, &loss, NULL,
                          NULL);
    if (rc != FLPS_OK) {
        log_error("training step %llu failed: %s (lower lr?)",
                  (unsigned long long)it, flps_strerror(rc));
        return 0;
    }
    model_sgd_step(w->m, L->vel, sl_lr(spec, it), (float)spec->momentum);
    L->loss_window += loss;
    L->nwin++;
    flps_metrics_report(loss, NAN, NAN);
    L->compute_s += flps_mono_s() - t0;
    if ((it + 1) % spec->local_steps != 0 && it + 1 != spec->iterations)
        return 1;
    t0 = flps_mono_s();
    rc = flps_saps_round(w->saps, it / spec->local_steps, NULL);
    L->comm_s += flps_mono_s() - t0;
    if (rc != FLPS_OK) {
        log_error("round %llu: %s",
                  (unsigned long long)(it / spec->local_steps),
                  flps_saps_last_error(w->saps));
        return 0;
    }
    return 1;
}

/* FNV-1a over every parameter's bytes (as flw_train's done event has it). */
static void sl_hash(sl *L)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < model_num_tensors(L->w->m); i++) {
        const model_tensor *t = model_tensor_at(L->w->m, i);
        const unsigned char *b = (const unsigned char *)t->param;

        for (size_t k = 0; k < t->numel * sizeof(float); k++) {
            h ^= b[k];
            h *= 1099511628211ULL;
        }
    }
    snprintf(L->hash, sizeof(L->hash), "%016llx", (unsigned long long)h);
}

/* The end: the consensus, and the coordinator's evaluations of its own
 * model and of the average. Returns 0 on an error (logged). */
static int sl_consensus(sl *L)
{
    flw *w = L->w;
    size_t nt = model_num_tensors(w->m);
    float **avg = flps_calloc(nt, sizeof(*avg));
    int ok = 0;
    double closs = 0;

    sl_hash(L);
    for (size_t i = 0; avg != NULL && i < nt; i++)
        if ((avg[i] = flps_malloc(model_tensor_at(w->m, i)->numel *
                                  sizeof(float))) == NULL)
            goto out;
    if (avg == NULL ||
        flps_saps_consensus(w->saps, L->rounds, avg, &L->cons) != FLPS_OK) {
        log_error("the consensus: %s", flps_saps_last_error(w->saps));
        goto out;
    }
    for (uint32_t r = 0; r < w->spec.workers; r++)
        if (!flps_saps_is_alive(w->saps, r))
            L->dead[L->ndead++] = r;
    L->have_cons = L->cons.coordinator == (uint32_t)w->rank;
    ok = 1;
    if (!L->have_cons)
        goto out;
    ok = sl_evaluate(w, &L->acc, &L->tloss) == FLPS_OK;
    if (ok) {
        flps_metrics_report(NAN, L->acc, L->tloss);
        sl_print_eval(L, w->spec.iterations);
    }
    for (size_t i = 0; ok && i < nt; i++) {
        model_tensor *t = model_tensor_at(w->m, i);
        memcpy(t->param, avg[i], t->numel * sizeof(float));
    }
    ok = ok && sl_evaluate(w, &L->cacc, &closs) == FLPS_OK;
    if (!ok)
        log_error("the final evaluations failed");
    else
        log_info("consensus of %u workers: own model %.4f, average model "
                 "%.4f, mean distance to the average %.4g",
                 L->cons.averaged, L->acc, L->cacc, L->cons.distance);
out:
    for (size_t i = 0; avg != NULL && i < nt; i++)
        flps_free(avg[i]);
    flps_free(avg);
    return ok;
}

/* The coordinator's done event: the matrix in force, for flsched's
 * status (a line of at most 64 x 64 numbers; none when the job is
 * larger or memory is short). */
static void sl_done_bandwidth(sl *L, event_done *d)
{
    size_t n = L->w->spec.workers;
    double *m;

    if (n > 64)
        return;
    m = flps_malloc(n * n * sizeof(*m));
    L->bw = flps_malloc(n * n * sizeof(*L->bw));
    if (m == NULL || L->bw == NULL ||
        flps_saps_bandwidth(L->w->saps, m, n * n, NULL) != FLPS_OK) {
        flps_free(m);
        return;
    }
    for (size_t i = 0; i < n * n; i++)
        L->bw[i] = isfinite(m[i]) && m[i] > 0 ? (uint64_t)llround(m[i]) : 0;
    flps_free(m);
    d->bandwidth.v = L->bw;
    d->bandwidth.n = n * n;
    EVENT_SET(d, done, bandwidth);
}

/* The saps fields of the done event. */
static void sl_done_saps(sl *L, const flps_saps_stats *st, event_done *d,
                         char *digest, size_t len)
{
    const jobspec *spec = &L->w->spec;
    double threshold = 0;

    d->rounds = L->rounds;
    d->peer_selection = jobspec_peer_selection_name(spec->peer_selection);
    (void)flps_saps_bandwidth(L->w->saps, NULL, 0, &threshold);
    d->bandwidth_threshold = threshold;
    EVENT_SET(d, done, bandwidth_threshold);
    d->exchanges = st->exchanges;
    d->skipped_exchanges = st->skipped;
    d->idle_rounds = st->idle;
    d->slow_exchanges = st->slow_exchanges;
    d->exchange_bytes = st->exchange_bytes;
    d->probe_bytes = st->probe_bytes;
    snprintf(digest, len, "%016llx", (unsigned long long)st->matching_digest);
    d->matching_digest = digest;
    d->dead_workers.v = L->dead;
    d->dead_workers.n = L->ndead;
    EVENT_SET(d, done, rounds);
    EVENT_SET(d, done, peer_selection);
    EVENT_SET(d, done, exchanges);
    EVENT_SET(d, done, skipped_exchanges);
    EVENT_SET(d, done, idle_rounds);
    EVENT_SET(d, done, slow_exchanges);
    EVENT_SET(d, done, exchange_bytes);
    EVENT_SET(d, done, probe_bytes);
    EVENT_SET(d, done, matching_digest);
    EVENT_SET(d, done, dead_workers);
    if (L->have_cons) {
        d->test_accuracy = L->acc;
        d->test_loss = L->tloss;
        d->consensus_workers = L->cons.averaged;
        d->consensus_accuracy = L->cacc;
        d->consensus_distance = L->cons.distance;
        EVENT_SET(d, done, test_accuracy);
        EVENT_SET(d, done, test_loss);
        EVENT_SET(d, done, consensus_workers);
        EVENT_SET(d, done, consensus_accuracy);
        EVENT_SET(d, done, consensus_distance);
        sl_done_bandwidth(L, d);
    }
}

static void sl_print_done(sl *L, double loop_s)
{
    const flw *w = L->w;
    flps_saps_stats st;
    event ev = {.kind = EVENT_DONE};
    event_done *d = &ev.done;
    char digest[24];

    flps_saps_get_stats(w->saps, &st);
    d->rank = (uint64_t)w->rank;
    d->iterations = w->spec.iterations;
    d->bytes_sent = st.bytes_sent;
    d->bytes_received = st.bytes_received;
    d->dense_bytes = st.dense_bytes;
    d->mode = "saps";
    d->backend = w->backend->name;
    d->compute_seconds = L->compute_s;
    d->comm_wait_seconds = L->comm_s;
    d->seconds_per_iteration = loop_s / (double)w->spec.iterations;
    d->model_hash = L->hash;
    EVENT_SET(d, done, mode);
    EVENT_SET(d, done, backend);
    EVENT_SET(d, done, compute_seconds);
    EVENT_SET(d, done, push_seconds);
    EVENT_SET(d, done, comm_wait_seconds);
    EVENT_SET(d, done, seconds_per_iteration);
    EVENT_SET(d, done, model_hash);
    sl_done_saps(L, &st, d, digest, sizeof(digest));
    d->seconds = flps_mono_s() - L->t0;
    (void)event_write(stdout, &ev);
    log_info("rank %ld done: %llu iterations, %llu rounds in %.1f s "
             "(computing %.1f s, exchanging %.1f s): %llu exchanges, %llu "
             "skipped, %llu idle, %llu over slow links; sent %llu bytes; "
             "matchings digest %s",
             w->rank, (unsigned long long)w->spec.iterations,
             (unsigned long long)L->rounds, loop_s, L->compute_s, L->comm_s,
             (unsigned long long)st.exchanges, (unsigned long long)st.skipped,
             (unsigned long long)st.idle, (unsigned long long)st.slow_exchanges,
             (unsigned long long)st.bytes_sent, digest);
}

int flw_train_saps(flw *w)
{
    const jobspec *spec = &w->spec;
    sl L;
    int status = 1;

    if (!sl_init(&L, w))
        goto out;
    L.t0 = flps_mono_s();
    for (uint64_t it = 0; it < spec->iterations; it++) {
        if (!sl_step(&L, it))
            goto out;
        if ((it + 1) % L.progress_every == 0 || it + 1 == spec->iterations)
            sl_print_progress(&L, it + 1);
        if (w->rank == 0 && spec->eval_every > 0 &&
            (it + 1) % spec->eval_every == 0 && it + 1 < spec->iterations &&
            sl_evaluate(w, &L.acc, &L.tloss) == FLPS_OK) {
            sl_print_eval(&L, it + 1);
            flps_metrics_report(NAN, L.acc, L.tloss);
        }
    }
    if (sl_consensus(&L)) {
        sl_print_done(&L, flps_mono_s() - L.t0);
        status = 0;
    }
out:
    sl_fini(&L);
    return status;
}
