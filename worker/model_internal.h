/* Internal to the training runtime: what the generic half of the models
 * (model.c: tensors, loss, train step, evaluation) shares with each kind of
 * model (the MLP in model.c, the CNN in model_cnn.c). */
#ifndef FLPS_WORKER_MODEL_INTERNAL_H
#define FLPS_WORKER_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "worker/model.h"

/* Longest tensor name: "conv" + 20 digits + ".weight" + NUL fits. */
#define MODEL_NAME_MAX 40

/* What a kind of model supplies. */
typedef struct model_ops {
    /* Forward b <= max_batch rows of x; returns the b x classes logits,
     * owned by the model and valid until its next forward. */
    const float *(*forward)(model *m, const float *x, size_t b);
    /* After a forward on the same x and b: backward from dlogits
     * (d(mean loss)/d(logits), b x classes), writing every tensor's grad
     * and calling layer_done (if not NULL) for each tensor once its grad is
     * final, last tensor first. */
    void (*backward)(model *m, const float *x, const float *dlogits, size_t b,
                     model_grad_ready_fn layer_done, void *arg);
    /* Frees m->impl (which may be NULL: a model that failed half-built). */
    void (*destroy_impl)(void *impl);
} model_ops;

struct model {
    const model_ops *ops;
    void *impl; /* the kind's own state; owned, freed by ops->destroy_impl */
    size_t in_dim;
    size_t classes;
    size_t max_batch;
    size_t ntensors;
    size_t nparams;
    model_tensor *tensors; /* in layer order, first layer first */
    char (*names)[MODEL_NAME_MAX];
    float *params;  /* all tensors back to back, in tensor order */
    float *grads;   /* same layout as params */
    float *dlogits; /* max_batch x classes, for the train step */
    /* During model_train_step_ex only (else NULL): called before the
     * forward first reads a tensor (model_need). */
    model_param_needed_fn param_needed;
    void *need_arg;
};

/* In a forward pass, before tensor ti's parameters are first read. */
static inline void model_need(const model *m, size_t ti)
{
    if (m->param_needed != NULL)
        m->param_needed(m->need_arg, ti);
}

/* Build the generic part: ntensors tensors with numel[i] elements each,
 * laid back to back in params and grads (grads zeroed), names left empty
 * for the caller to fill (m->names[i], MODEL_NAME_MAX bytes each). The
 * caller sets impl. Errors: FLPS_EINVAL (sizes that overflow),
 * FLPS_ENOMEM. *out is caller-owned (model_destroy). */
flps_err model_base_create(const model_ops *ops, size_t in_dim, size_t classes,
                           size_t max_batch, size_t ntensors,
                           const size_t *numel, model **out);

/* He-uniform (Kaiming) init of n weights with the given fan-in, drawing
 * from *rng: U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)). */
void model_init_he(float *w, size_t n, size_t fan_in, uint64_t *rng);

/* out (b x nout) = in (b x nin) * W^T + bias, W stored nout x nin; then
 * ReLU if relu is non-zero. */
void model_fc_forward(const float *in, size_t b, size_t nin, const float *w,
                      const float *bias, size_t nout, int relu, float *out);

/* Backward of a fully connected layer whose weight is tensor wi of m and
 * bias tensor wi + 1: bias grad = column sums of delta (b x nout), weight
 * grad = delta^T in, each reported through layer_done as soon as written
 * (bias first). If dprev is not NULL it receives delta * W (b x nin),
 * zeroed where in is not positive (in is a ReLU output). */
void model_fc_backward(model *m, size_t wi, const float *in, size_t b,
                       size_t nin, const float *delta, float *dprev,
                       model_grad_ready_fn layer_done, void *arg);

/* a * b and a + b into *out unless they overflow size_t (then 0). */
static inline int model_mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static inline int model_add_ok(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a)
        return 0;
    *out = a + b;
    return 1;
}

#endif
