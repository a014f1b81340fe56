/* flworker's training loop for ssgd, async and ssp: batches, the step with
 * its pushes during (overlap) or after backprop, the waits, the profile of
 * an auto job, and the progress, eval and done events. */
#include "worker/flworker.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/rng.h"
#include "services/event.h"

/* Auto jobs: the backward time of each layer is averaged over the local
 * iterations [FLW_PROFILE_FROM, FLW_PROFILE_TO) (the first ones pay for
 * cold caches and page faults), then rank 0 prints the profile. */
#define FLW_PROFILE_FROM 5
#define FLW_PROFILE_TO 25

typedef struct push_ctx {
    flps_client *client;
    model *m;
    uint64_t iter;
    flps_err err;
    /* Profiling (NULL when off): per tensor, the sum of its backward
     * times; last = when the computation of the next gradient began. */
    double *tb_sum;
    double last;
    /* This iteration's time inside pushes, and inside the forward's
     * per-layer waits. */
    double push_s, layer_wait_s;
    /* Per tensor, over the run: bytes and elements its pushes sent, and
     * the forward's time waiting for its updates (the done event's). */
    event_done_layer *layers;
    /* overlap: false: the gradients are only noted (order[0..norder), in
     * the order backprop finished them) and pushed after the backward. */
    int defer;
    size_t *order, norder;
    /* overlap: the forward waits for each layer's update of wait_iter
     * before it reads the layer (wait_layers 0: nothing outstanding). */
    int wait_layers;
    uint64_t wait_iter;
} push_ctx;

/* The loop's own state, beside the worker's. */
typedef struct loop {
    flw *w;
    float *xb;        /* the batch */
    uint8_t *yb;      /* its labels */
    uint32_t *xb_idx; /* this rank's samples, shuffled per epoch */
    size_t cursor, epoch;
    /* The push order of overlap: false. */
    size_t *order;
    /* overlap: the forward waits per layer; outstanding: the last
     * iteration's updates are not all in yet. */
    int layer_waits, outstanding;
    uint64_t progress_every, nwin;
    double loss_window;
    uint64_t warmup_sent; /* bytes sent by the warm-up's end */
    /* The loop's clock and where its time went. */
    double t0, compute_s, push_total_s, comm_wait_s;
    double acc, tloss; /* rank 0's last evaluation */
    /* The events' per-layer arrays, made before training starts: what
     * each layer sent and waited (see push_ctx), and its profile (auto,
     * rank 0). */
    event_done_layer *done_layers;
    event_profile_layer *profile_layers;
} loop;

/* Push tensor ti's gradient (compression and queueing: the sending is the
 * transport's), timed and its bytes counted. */
static void push_layer(push_ctx *pc, size_t ti)
{
    flps_client_stats before, after;
    model_tensor *t;
    double t0, dt;
    flps_err rc;

    if (pc->err != FLPS_OK)
        return;
    flps_client_get_stats(pc->client, &before);
    t0 = flps_mono_s();
    t = model_tensor_at(pc->m, ti);
    rc = flps_client_push(pc->client, (uint32_t)ti, t->grad, pc->iter);
    if (rc != FLPS_OK)
        pc->err = rc;
    dt = flps_mono_s() - t0;
    flps_client_get_stats(pc->client, &after);
    pc->push_s += dt;
    /* Only this push sends during the call (resends happen in the
     * waits), so the deltas are this layer's. */
    pc->layers[ti].bytes_sent += after.bytes_sent - before.bytes_sent;
    pc->layers[ti].elements_sent += after.elements_sent - before.elements_sent;
}

/* Called by backprop as each tensor's gradient is final: with overlap the
 * push starts while earlier layers are still being computed. */
static void on_grad_ready(void *arg, size_t ti)
{
    push_ctx *pc = arg;

    /* The time since the previous callback returned (or since the step
     * began, less the forward's waits) is this layer's backward
     * computation; the push below is communication work and is left out
     * of the next layer's time. */
    if (pc->tb_sum != NULL)
        pc->tb_sum[ti] += flps_mono_s() - pc->last;
    if (pc->defer)
        pc->order[pc->norder++] = ti;
    else
        push_layer(pc, ti);
    if (pc->tb_sum != NULL)
        pc->last = flps_mono_s();
}

/* Called by the forward pass before it first reads tensor ti: wait for
 * that layer's update of the previous iteration only. */
static void on_param_needed(void *arg, size_t ti)
{
    push_ctx *pc = arg;
    double t0, dt;
    flps_err rc;

    if (!pc->wait_layers || pc->err != FLPS_OK)
        return;
    t0 = flps_mono_s();
    rc = flps_client_wait_layer(pc->client, (uint32_t)ti, pc->wait_iter);
    if (rc != FLPS_OK)
        pc->err = rc;
    dt = flps_mono_s() - t0;
    pc->layer_wait_s += dt;
    pc->layers[ti].wait_seconds += dt;
    pc->last += dt; /* not backward time of the profile */
}

/* FNV-1a over every parameter's bytes: equal replicas, equal hashes. */
static uint64_t model_hash(model *m)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < model_num_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        const unsigned char *b = (const unsigned char *)t->param;
        for (size_t k = 0; k < t->numel * sizeof(float); k++) {
            h ^= b[k];
            h *= 1099511628211ULL;
        }
    }
    return h;
}

/* One splitmix64 output for a given state (a hash of x). */
static uint64_t mix64(uint64_t x)
{
    return flps_splitmix64(&x);
}

/* Shuffle idx[0..n) with a seeded generator (Fisher-Yates). */
static void shuffle(uint32_t *idx, size_t n, uint64_t seed)
{
    uint64_t state = seed;
    for (size_t i = n; i > 1; i--) {
        size_t j;
        state = mix64(state);
        j = (size_t)(state % i);
        uint32_t tmp = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = tmp;
    }
}

static flps_err evaluate(model *m, const dataset *test, double *acc,
                         double *loss)
{
    size_t correct = 0;
    double loss_sum = 0;
    flps_err rc =
        model_evaluate(m, test->x, test->y, test->n, &correct, &loss_sum);
    if (rc == FLPS_OK) {
        *acc = (double)correct / (double)test->n;
        *loss = loss_sum / (double)test->n;
    }
    return rc;
}

/* The profile event of an auto job (rank 0, once): each layer's mean
 * backward time over the profile's iterations. */
static void print_profile(const loop *L, uint64_t iteration, unsigned samples)
{
    const flw *w = L->w;
    size_t nt = model_num_tensors(w->m);
    event_profile_layer *layers = L->profile_layers;
    event ev = {.kind = EVENT_PROFILE};

    for (size_t i = 0; i < nt; i++) {
        const model_tensor *t = model_tensor_at(w->m, i);

        layers[i].name = t->name;
        layers[i].numel = t->numel;
        layers[i].t_backward = w->tb_sum[i] / samples;
    }
    ev.profile.iteration = iteration;
    ev.profile.workers = w->spec.workers;
    ev.profile.alpha = w->alpha;
    ev.profile.beta = w->beta;
    ev.profile.layers.v = layers;
    ev.profile.layers.n = nt;
    (void)event_write(stdout, &ev);
}

static void print_eval(uint64_t iter, double acc, double loss, double elapsed)
{
    event ev = {.kind = EVENT_EVAL};

    ev.eval.iter = iter;
    ev.eval.test_accuracy = acc;
    ev.eval.test_loss = loss;
    EVENT_SET(&ev.eval, eval, test_loss);
    /* elapsed_s: the progress lines' clock, so a run's time to a target
     * accuracy can be read from its events. */
    ev.eval.elapsed_s = elapsed;
    EVENT_SET(&ev.eval, eval, elapsed_s);
    (void)event_write(stdout, &ev);
}

/* Every rank reports its bytes, so a job's progress can count all
 * workers as its summary does; the loss is rank 0's. */
static void print_progress(loop *L, uint64_t iter)
{
    flw *w = L->w;
    flps_client_stats st;
    event ev = {.kind = EVENT_PROGRESS};

    flps_client_get_stats(w->client, &st);
    ev.progress.iter = iter;
    ev.progress.iterations = w->spec.iterations;
    ev.progress.loss = L->loss_window / (double)L->nwin;
    ev.progress.bytes_sent = st.bytes_sent;
    ev.progress.dense_bytes = st.dense_bytes;
    ev.progress.elements_sent = st.elements_sent;
    EVENT_SET(&ev.progress, progress, elements_sent);
    ev.progress.elapsed = flps_mono_s() - L->t0;
    (void)event_write(stdout, &ev);
    L->loss_window = 0;
    L->nwin = 0;
}

static int loop_init(loop *L, flw *w)
{
    const jobspec *spec = &w->spec;
    size_t nt = model_num_tensors(w->m);
    int async = flw_client_mode(spec) == FLPS_MODE_ASYNC;

    memset(L, 0, sizeof(*L));
    L->w = w;
    L->acc = -1;
    L->xb =
        flps_malloc((size_t)spec->batch_size * w->train.dim * sizeof(float));
    L->yb = flps_malloc(spec->batch_size);
    L->xb_idx = flps_malloc(w->nmine * sizeof(uint32_t));
    L->order = flps_calloc(nt, sizeof(size_t));
    L->done_layers = flps_calloc(nt, sizeof(*L->done_layers));
    if (w->tb_sum != NULL)
        L->profile_layers = flps_calloc(nt, sizeof(*L->profile_layers));
    if (L->xb == NULL || L->yb == NULL || L->xb_idx == NULL ||
        L->order == NULL || L->done_layers == NULL ||
        (w->tb_sum != NULL && L->profile_layers == NULL)) {
        log_error("out of memory");
        return 0;
    }
    for (size_t i = 0; i < nt; i++)
        L->done_layers[i].name = model_tensor_at(w->m, i)->name;
    memcpy(L->xb_idx, w->mine, w->nmine * sizeof(uint32_t));
    shuffle(L->xb_idx, w->nmine,
            mix64(spec->seed * 1000003ULL + (uint64_t)w->rank));
    L->progress_every = spec->iterations / 100 ? spec->iterations / 100 : 1;
    /* overlap: the next forward waits per layer. An async (or ssp) wait
     * pulls the whole model, so there it stays one wait per iteration
     * (the pushes still go out during backprop). */
    L->layer_waits = spec->overlap && !async;
    if (spec->overlap && async && w->rank == 0)
        log_info("overlap: %s jobs push during backprop but wait for the "
                 "whole model after it (their wait pulls it)",
                 jobspec_mode_name(spec->mode));
    return 1;
}

static void loop_fini(loop *L)
{
    flps_free(L->xb);
    flps_free(L->yb);
    flps_free(L->xb_idx);
    flps_free(L->order);
    flps_free(L->done_layers);
    flps_free(L->profile_layers);
}

/* The next batch of this rank's samples into xb, yb; a new epoch
 * reshuffles them. */
static void next_batch(loop *L)
{
    flw *w = L->w;
    const dataset *tr = &w->train;

    for (uint32_t b = 0; b < w->spec.batch_size; b++) {
        uint32_t s;
        if (L->cursor == w->nmine) {
            L->cursor = 0;
            L->epoch++;
            shuffle(L->xb_idx, w->nmine,
                    mix64(w->spec.seed * 1000003ULL + (uint64_t)w->rank +
                          L->epoch * 7919ULL));
        }
        s = L->xb_idx[L->cursor++];
        dataset_copy_sample(tr, s, L->xb, L->yb, b);
    }
}

/* Iteration it: the plan, a batch, the step with its pushes, the wait,
 * the timing and the profile. *loss gets the step's loss. Returns 0 on an
 * error (logged). */
static int loop_step(loop *L, uint64_t it, float *loss)
{
    flw *w = L->w;
    uint64_t local = it - w->start_iter;
    push_ctx pc = {.client = w->client,
                   .m = w->m,
                   .iter = it,
                   .err = FLPS_OK,
                   .layers = L->done_layers,
                   .defer = !w->spec.overlap,
                   .order = L->order,
                   .wait_layers = L->outstanding,
                   .wait_iter = it - 1};
    double step_t0, step_dt, wait_t0, wait_dt = 0;
    flps_client_stats st;
    flps_err rc;

    if (!flw_plan_check(&w->plan, w->client, w->m, it))
        return 0;
    if (w->tb_sum != NULL && local >= FLW_PROFILE_FROM &&
        local < FLW_PROFILE_TO)
        pc.tb_sum = w->tb_sum;
    next_batch(L);
    pc.last = flps_mono_s();
    step_t0 = pc.last;
    rc = model_train_step_ex(w->m, L->xb, L->yb, w->spec.batch_size, loss,
                             L->layer_waits ? on_param_needed : NULL, &pc,
                             on_grad_ready, &pc);
    if (rc != FLPS_OK) {
        log_error("training step %llu failed: %s (lower lr?)",
                  (unsigned long long)it, flps_strerror(rc));
        return 0;
    }
    /* overlap: false: every layer now, in backprop's order, so the
     * pushes (and so the results) are those of overlap on. */
    for (size_t k = 0; k < pc.norder; k++)
        push_layer(&pc, pc.order[k]);
    step_dt = flps_mono_s() - step_t0;
    wait_t0 = flps_mono_s();
    if (pc.err == FLPS_OK && !L->layer_waits) {
        pc.err = flps_client_wait(w->client, it);
        wait_dt = flps_mono_s() - wait_t0;
    }
    if (pc.err != FLPS_OK) {
        log_error("iteration %llu: %s", (unsigned long long)it,
                  flps_client_last_error(w->client)[0]
                      ? flps_client_last_error(w->client)
                      : flps_strerror(pc.err));
        return 0;
    }
    L->outstanding = L->layer_waits;
    L->compute_s += step_dt - pc.push_s - pc.layer_wait_s;
    L->push_total_s += pc.push_s;
    L->comm_wait_s += pc.layer_wait_s + wait_dt;
    /* The client counts the iteration's time and bytes itself. */
    flps_metrics_report(*loss, NAN, NAN);
    if (pc.tb_sum != NULL && local + 1 == FLW_PROFILE_TO)
        print_profile(L, it + 1, FLW_PROFILE_TO - FLW_PROFILE_FROM);
    if (it + 1 == w->spec.density_warmup) {
        flps_client_get_stats(w->client, &st);
        L->warmup_sent = st.bytes_sent;
    }
    return 1;
}

/* After iteration it: progress each 1% and at the end; rank 0's
 * evaluations each eval_every. Returns 0 on an error (logged). */
static int loop_report(loop *L, uint64_t it)
{
    flw *w = L->w;
    const jobspec *spec = &w->spec;
    int eval_now = w->rank == 0 && spec->eval_every > 0 &&
                   (it + 1) % spec->eval_every == 0;
    double wait_t0;

    if ((it + 1) % L->progress_every == 0 || it + 1 == spec->iterations)
        print_progress(L, it + 1);
    /* An evaluation, and the end, read the whole model: every layer's
     * update first. */
    if (L->outstanding && (it + 1 == spec->iterations || eval_now)) {
        wait_t0 = flps_mono_s();
        if (flps_client_wait(w->client, it) != FLPS_OK) {
            log_error("iteration %llu: %s", (unsigned long long)it,
                      flps_client_last_error(w->client));
            return 0;
        }
        L->comm_wait_s += flps_mono_s() - wait_t0;
        L->outstanding = 0;
    }
    if (eval_now && it + 1 < spec->iterations &&
        evaluate(w->m, &w->test, &L->acc, &L->tloss) == FLPS_OK) {
        print_eval(it + 1, L->acc, L->tloss, flps_mono_s() - L->t0);
        flps_metrics_report(NAN, L->acc, L->tloss);
    }
    return 1;
}

/* This rank's done event: its counters, rank 0's final evaluation, where
 * the loop's time went and what each layer's pushes sent. */
static void print_done(loop *L, double loop_s, const flps_client_stats *st)
{
    flw *w = L->w;
    const jobspec *spec = &w->spec;
    size_t nt = model_num_tensors(w->m);
    event ev = {.kind = EVENT_DONE};
    event_done *d = &ev.done;
    char hash[24], mode[32];
    flps_energy en;

    d->rank = (uint64_t)w->rank;
    d->iterations = spec->iterations;
    d->bytes_sent = st->bytes_sent;
    d->bytes_received = st->bytes_received;
    d->dense_bytes = st->dense_bytes;
    d->resends = st->resends;
    /* What the client ran, which the launcher's summary holds against the
     * job file (its client is made from the same spec). */
    jobspec_mode_format(spec, mode, sizeof(mode));
    d->compression = w->comp;
    d->mode = mode;
    EVENT_SET(d, done, compression);
    EVENT_SET(d, done, mode);
    if (w->rank == 0) {
        d->test_accuracy = L->acc;
        d->test_loss = L->tloss;
        EVENT_SET(d, done, test_accuracy);
        EVENT_SET(d, done, test_loss);
    }
    if (spec->density_warmup > 0) {
        d->warmup_bytes_sent = L->warmup_sent;
        EVENT_SET(d, done, warmup_bytes_sent);
    }
    if (spec->mode == JOBSPEC_MODE_SSP) {
        d->staleness = spec->staleness;
        d->stale_wait_seconds = flps_client_stale_wait_seconds(w->client);
        EVENT_SET(d, done, staleness);
        EVENT_SET(d, done, stale_wait_seconds);
    }
    snprintf(hash, sizeof(hash), "%016llx",
             (unsigned long long)model_hash(w->m));
    d->backend = w->backend->name;
    d->overlap = spec->overlap;
    d->compute_seconds = L->compute_s;
    d->push_seconds = L->push_total_s;
    d->comm_wait_seconds = L->comm_wait_s;
    d->seconds_per_iteration =
        spec->iterations > w->start_iter
            ? loop_s / (double)(spec->iterations - w->start_iter)
            : 0.0;
    d->model_hash = hash;
    d->layers.v = L->done_layers;
    d->layers.n = nt;
    EVENT_SET(d, done, backend);
    EVENT_SET(d, done, overlap);
    EVENT_SET(d, done, compute_seconds);
    EVENT_SET(d, done, push_seconds);
    EVENT_SET(d, done, comm_wait_seconds);
    EVENT_SET(d, done, seconds_per_iteration);
    EVENT_SET(d, done, model_hash);
    EVENT_SET(d, done, layers);
    if (flps_client_energy(w->client, &en, sizeof(en)) == FLPS_OK)
        event_done_energy(d, &en);
    d->seconds = flps_mono_s() - L->t0;
    (void)event_write(stdout, &ev);
}

/* After the last iteration: rank 0's final evaluation, the done event and
 * the log line. Returns 0 on an error (logged). */
static int loop_finish(loop *L)
{
    flw *w = L->w;
    double loop_s = flps_mono_s() - L->t0;
    flps_client_stats st;

    if (w->rank == 0) {
        if (evaluate(w->m, &w->test, &L->acc, &L->tloss) != FLPS_OK) {
            log_error("final evaluation failed");
            return 0;
        }
        flps_metrics_report(NAN, L->acc, L->tloss);
        print_eval(w->spec.iterations, L->acc, L->tloss, flps_mono_s() - L->t0);
    }
    flps_client_get_stats(w->client, &st);
    print_done(L, loop_s, &st);
    log_info("rank %ld done: %llu iterations in %.1f s (computing %.1f s, "
             "pushing %.1f s, waiting on the network %.1f s, overlap %s), "
             "sent %llu bytes (dense would be %llu)",
             w->rank, (unsigned long long)w->spec.iterations, loop_s,
             L->compute_s, L->push_total_s, L->comm_wait_s,
             w->spec.overlap ? "on" : "off", (unsigned long long)st.bytes_sent,
             (unsigned long long)st.dense_bytes);
    return 1;
}

int flw_train(flw *w)
{
    loop L;
    int status = 1;

    if (!loop_init(&L, w))
        goto out;
    L.t0 = flps_mono_s();
    for (uint64_t it = w->start_iter; it < w->spec.iterations; it++) {
        float loss = 0;

        if (!loop_step(&L, it, &loss))
            goto out;
        L.loss_window += loss;
        L.nwin++;
        if (!loop_report(&L, it))
            goto out;
    }
    if (loop_finish(&L))
        status = 0;
out:
    loop_fini(&L);
    return status;
}
