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

/* The convolutional network: input height x width x channels (one image
 * per row of x, pixels row-major with channels last, HWC; Fashion-MNIST is
 * 28 x 28 x 1), then
 *   conv kernel x kernel, conv1 filters, padding kernel / 2 -> ReLU ->
 *   maxpool 2 -> conv kernel x kernel, conv2 filters, same padding ->
 *   ReLU -> maxpool 2 -> FC fc -> ReLU -> FC classes,
 * with softmax cross-entropy at the end. */
typedef struct model_cnn_shape {
    size_t height, width, channels; /* height and width multiples of 4 */
    size_t kernel;                  /* odd */
    size_t conv1, conv2;            /* filters of each convolution */
    size_t fc;                      /* width of the hidden FC layer */
    size_t classes;                 /* 2..256 */
} model_cnn_shape;

/* The Fashion-MNIST CNN: 28 x 28 x 1, 5 x 5 kernels, 32 and 64 filters,
 * FC 1024, 10 classes (3,274,634 parameters). */
model_cnn_shape model_cnn_shape_fmnist(void);

/* Build the CNN of *shape. Tensors, in order: conv1.weight, conv1.bias,
 * conv2.weight, conv2.bias, fc1.weight, fc1.bias, fc2.weight, fc2.bias.
 * A conv weight is filters x (kernel x kernel x in_channels), each filter
 * stored [kh][kw][c]; fc1.weight is fc x (height/4 * width/4 * conv2), its
 * input flattened in (h, w, c) order; fc2.weight is classes x fc. Weights
 * He-uniform from seed (fan-in kernel^2 * in_channels for a conv), biases
 * 0. max_batch bounds the batch size of later calls.
 * Errors: FLPS_EINVAL (shape NULL, a zero size, height or width not a
 * multiple of 4, an even kernel, classes outside 2..256, max_batch 0,
 * sizes beyond BLAS ints), FLPS_ENOMEM. Sets OpenBLAS to one thread
 * (process-wide). *out is caller-owned; free it with model_destroy. */
flps_err model_create_cnn(const model_cnn_shape *shape, size_t max_batch,
                          uint64_t seed, model **out);

void model_destroy(model *m);

size_t model_num_tensors(const model *m);
model_tensor *model_tensor_at(model *m, size_t i);
size_t model_num_params(const model *m);
/* Floats per input row (784 for both Fashion-MNIST models); 0 for NULL. */
size_t model_input_dim(const model *m);

/* Forward and backward on a batch of b rows of x (b * input dim floats) with
 * labels y: writes the mean loss over the batch to *loss and the gradients of
 * the mean loss into every tensor's grad (overwritten, not accumulated). If
 * layer_done is not NULL it is called for each tensor as soon as its gradient
 * is final, last layer first (so communication can start while backprop of
 * earlier layers continues). Parameters are never changed: the caller applies
 * updates. Errors: FLPS_EINVAL (NULL, b == 0, b > max_batch, a label >=
 * classes), FLPS_ENONFINITE (the loss is NaN or Inf; no grad is written). */
typedef void (*model_grad_ready_fn)(void *arg, size_t tensor_index);
flps_err model_train_step(model *m, const float *x, const uint8_t *y, size_t b,
                          float *loss, model_grad_ready_fn layer_done,
                          void *arg);

/* model_train_step whose forward pass asks for each tensor before it
 * first reads it: param_needed (if not NULL) is called with the tensor's
 * index just before the forward uses that tensor's parameters, first
 * layer first, each tensor once per step, so a caller can hold the
 * forward of a layer until that layer's update has arrived while later
 * layers' updates are still on their way. The arithmetic is that of
 * model_train_step: only when the parameters are read changes. Errors as
 * model_train_step. */
typedef void (*model_param_needed_fn)(void *arg, size_t tensor_index);
flps_err model_train_step_ex(model *m, const float *x, const uint8_t *y,
                             size_t b, float *loss,
                             model_param_needed_fn param_needed, void *need_arg,
                             model_grad_ready_fn layer_done, void *arg);

/* SGD with momentum on the gradients of the last step, tensor by tensor:
 * v = momentum * v + grad, then param -= lr * v, with velocity holding
 * model_num_params floats (the tensors' in order; the caller's, zero at
 * the start). For the loops that update the model themselves (fedavg's
 * clients, saps's workers). */
void model_sgd_step(model *m, float *velocity, float lr, float momentum);

/* Predict classes of b rows of x; counts the correct ones against y and sums
 * the per-row losses. b may exceed max_batch (processed in chunks).
 * *correct and *loss_sum are overwritten with the results for these b rows,
 * not accumulated into.
 * Errors: FLPS_EINVAL (NULL, b == 0, a label >= classes). */
flps_err model_evaluate(model *m, const float *x, const uint8_t *y, size_t b,
                        size_t *correct, double *loss_sum);

#endif
