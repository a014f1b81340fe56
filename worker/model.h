/* Neural network models for the training runtime (CPU, OpenBLAS). */
#ifndef FLPS_WORKER_MODEL_H
#define FLPS_WORKER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct model model;

/* One parameter tensor: name and element count, and the model's parameter
 * and gradient storage for it (owned by the model, valid until
 * model_destroy). Order: the order of the model's layers, first layer
 * first (weights then bias of each layer). */
typedef struct model_tensor {
    const char *name; /* e.g. "fc1.weight" */
    size_t numel;
    float *param;
    float *grad;
} model_tensor;

/* Build the MLP in_dim-h1-h2-...-classes with ReLU between layers and
 * softmax cross-entropy at the end, weights initialised He-uniform from
 * seed, biases 0. hidden = {256, 128} gives the 784-256-128-10 model.
 * max_batch bounds the batch size of later calls.
 * Errors: FLPS_EINVAL (a zero width, classes outside 2..256, max_batch 0,
 * sizes beyond BLAS ints, hidden NULL with nhidden > 0), FLPS_ENOMEM.
 * Sets OpenBLAS to one thread (process-wide). *out is caller-owned; free it
 * with model_destroy (NULL does nothing). */
flps_err model_create_mlp(size_t in_dim, const size_t *hidden, size_t nhidden,
                          size_t classes, size_t max_batch, uint64_t seed,
                          model **out);
void model_destroy(model *m);

size_t model_num_tensors(const model *m);
model_tensor *model_tensor_at(model *m, size_t i);
size_t model_num_params(const model *m);

/* Forward and backward on a batch of b rows of x (b * in_dim) with labels y:
 * writes the mean loss over the batch to *loss and the gradients of the mean
 * loss into every tensor's grad (overwritten, not accumulated).
 * If layer_done is not NULL it is called for each tensor as soon as its
 * gradient is final, last layer first (so communication can start while
 * backprop of earlier layers continues). Parameters are never changed: the
 * caller applies updates.
 * Errors: FLPS_EINVAL (NULL, b == 0, b > max_batch, a label >= classes),
 * FLPS_ENONFINITE (the loss is NaN or Inf; no grad is written). */
typedef void (*model_grad_ready_fn)(void *arg, size_t tensor_index);
flps_err model_train_step(model *m, const float *x, const uint8_t *y, size_t b,
                          float *loss, model_grad_ready_fn layer_done,
                          void *arg);

/* Predict classes of b rows of x; counts the correct ones against y and sums
 * the per-row losses. b may exceed max_batch (processed in chunks).
 * *correct and *loss_sum are overwritten with the results for these b rows,
 * not accumulated into.
 * Errors: FLPS_EINVAL (NULL, b == 0, a label >= classes). */
flps_err model_evaluate(model *m, const float *x, const uint8_t *y, size_t b,
                        size_t *correct, double *loss_sum);

#endif
