/* The models of the training runtime on the CPU with OpenBLAS: what every
 * kind shares (tensors, softmax cross-entropy, the train step and
 * evaluation, fully connected layers), and the multilayer perceptron. */
#include "worker/model.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/rng.h"
#include "worker/model_internal.h"

/* Uniform in [-1, 1), exactly representable (24 random bits). */
static float model_rng_sym(uint64_t *state)
{
    float u = (float)(flps_splitmix64(state) >> 40) * 0x1.0p-24f;

    return 2.0f * u - 1.0f;
}

/* He-uniform keeps the variance of ReLU activations constant across
 * layers. */
void model_init_he(float *w, size_t n, size_t fan_in, uint64_t *rng)
{
    float bound = sqrtf(6.0f / (float)fan_in);

    for (size_t i = 0; i < n; i++)
        w[i] = bound * model_rng_sym(rng);
}

flps_err model_base_create(const model_ops *ops, size_t in_dim, size_t classes,
                           size_t max_batch, size_t ntensors,
                           const size_t *numel, model **out)
{
    size_t nparams = 0, nlogits;
    model *m;

    for (size_t i = 0; i < ntensors; i++)
        if (!model_add_ok(nparams, numel[i], &nparams))
            return FLPS_EINVAL;
    if (nparams > SIZE_MAX / sizeof(float) ||
        !model_mul_ok(max_batch, classes, &nlogits) ||
        nlogits > SIZE_MAX / sizeof(float))
        return FLPS_EINVAL;

    m = flps_calloc(1, sizeof(*m));
    if (m == NULL)
        return FLPS_ENOMEM;
    m->ops = ops;
    m->in_dim = in_dim;
    m->classes = classes;
    m->max_batch = max_batch;
    m->ntensors = ntensors;
    m->nparams = nparams;
    m->tensors = flps_calloc(ntensors, sizeof(*m->tensors));
    m->names = flps_calloc(ntensors, sizeof(*m->names));
    m->params = flps_malloc(nparams * sizeof(float));
    m->grads = flps_calloc(nparams, sizeof(float));
    m->dlogits = flps_malloc(nlogits * sizeof(float));
    if (m->tensors == NULL || m->names == NULL || m->params == NULL ||
        m->grads == NULL || m->dlogits == NULL) {
        model_destroy(m);
        return FLPS_ENOMEM;
    }
    for (size_t i = 0, off = 0; i < ntensors; i++) {
        m->tensors[i].name = m->names[i];
        m->tensors[i].numel = numel[i];
        m->tensors[i].param = m->params + off;
        m->tensors[i].grad = m->grads + off;
        off += numel[i];
    }
    *out = m;
    return FLPS_OK;
}

void model_destroy(model *m)
{
    if (m == NULL)
        return;
    if (m->impl != NULL)
        m->ops->destroy_impl(m->impl);
    flps_free(m->dlogits);
    flps_free(m->grads);
    flps_free(m->params);
    flps_free(m->names);
    flps_free(m->tensors);
    flps_free(m);
}

size_t model_num_tensors(const model *m)
{
    return m == NULL ? 0 : m->ntensors;
}

model_tensor *model_tensor_at(model *m, size_t i)
{
    if (m == NULL || i >= m->ntensors)
        return NULL;
    return &m->tensors[i];
}

size_t model_num_params(const model *m)
{
    return m == NULL ? 0 : m->nparams;
}

void model_sgd_step(model *m, float *velocity, float lr, float momentum)
{
    size_t off = 0;

    for (size_t i = 0; i < m->ntensors; i++) {
        model_tensor *t = &m->tensors[i];
        float *v = velocity + off;

        for (size_t k = 0; k < t->numel; k++) {
            v[k] = momentum * v[k] + t->grad[k];
            t->param[k] -= lr * v[k];
        }
        off += t->numel;
    }
}

size_t model_input_dim(const model *m)
{
    return m == NULL ? 0 : m->in_dim;
}

void model_fc_forward(const float *in, size_t b, size_t nin, const float *w,
                      const float *bias, size_t nout, int relu, float *out)
{
    for (size_t i = 0; i < b; i++)
        memcpy(out + i * nout, bias, nout * sizeof(float));
    /* out (b x nout) += in (b x nin) * W^T, W stored nout x nin. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)nout,
                (int)nin, 1.0f, in, (int)nin, w, (int)nin, 1.0f, out,
                (int)nout);
    if (relu)
        for (size_t i = 0; i < b * nout; i++)
            out[i] = out[i] > 0.0f ? out[i] : 0.0f;
}

void model_fc_backward(model *m, size_t wi, const float *in, size_t b,
                       size_t nin, const float *delta, float *dprev,
                       model_grad_ready_fn layer_done, void *arg)
{
    model_tensor *w = &m->tensors[wi], *bt = &m->tensors[wi + 1];
    size_t nout = bt->numel;

    /* Bias gradient: column sums of delta (b x nout), in double so the
     * sum does not depend on b's rounding. */
    for (size_t j = 0; j < nout; j++) {
        double s = 0.0;

        for (size_t i = 0; i < b; i++)
            s += delta[i * nout + j];
        bt->grad[j] = (float)s;
    }
    if (layer_done != NULL)
        layer_done(arg, wi + 1);
    /* dW (nout x nin) = delta^T (nout x b) * in (b x nin). */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nout, (int)nin,
                (int)b, 1.0f, delta, (int)nout, in, (int)nin, 0.0f, w->grad,
                (int)nin);
    if (layer_done != NULL)
        layer_done(arg, wi);
    if (dprev == NULL)
        return;
    /* dprev (b x nin) = delta (b x nout) * W (nout x nin), then through
     * the ReLU that made in: zero where it clipped. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)nin,
                (int)nout, 1.0f, delta, (int)nout, w->param, (int)nin, 0.0f,
                dprev, (int)nin);
    for (size_t i = 0; i < b * nin; i++)
        if (!(in[i] > 0.0f))
            dprev[i] = 0.0f;
}

/* Softmax cross-entropy over b rows of logits (k classes each), stable by
 * subtracting the row maximum. Returns the summed loss; adds the number of
 * rows whose argmax (first on ties) is the label to *correct if not NULL;
 * writes d(mean loss)/d(logits) = (softmax - onehot) / b to dlogits if not
 * NULL. */
static double model_softmax_xent(const float *logits, const uint8_t *y,
                                 size_t b, size_t k, float *dlogits,
                                 size_t *correct)
{
    double total = 0.0;

    for (size_t i = 0; i < b; i++) {
        const float *z = logits + i * k;
        size_t arg = 0;
        double sum = 0.0, lse;

        for (size_t j = 1; j < k; j++)
            if (z[j] > z[arg])
                arg = j;
        for (size_t j = 0; j < k; j++)
            sum += exp((double)z[j] - (double)z[arg]);
        lse = (double)z[arg] + log(sum);
        total += lse - (double)z[y[i]];
        if (correct != NULL && arg == y[i])
            (*correct)++;
        if (dlogits != NULL) {
            float *d = dlogits + i * k;

            for (size_t j = 0; j < k; j++)
                d[j] = (float)(exp((double)z[j] - lse) / (double)b);
            d[y[i]] -= 1.0f / (float)b;
        }
    }
    return total;
}

static flps_err model_check_labels(const model *m, const uint8_t *y, size_t b)
{
    for (size_t i = 0; i < b; i++) {
        if (y[i] >= m->classes) {
            log_error("model: label %u of row %zu is not below %zu classes",
                      y[i], i, m->classes);
            return FLPS_EINVAL;
        }
    }
    return FLPS_OK;
}

flps_err model_train_step(model *m, const float *x, const uint8_t *y, size_t b,
                          float *loss, model_grad_ready_fn layer_done,
                          void *arg)
{
    return model_train_step_ex(m, x, y, b, loss, NULL, NULL, layer_done, arg);
}

flps_err model_train_step_ex(model *m, const float *x, const uint8_t *y,
                             size_t b, float *loss,
                             model_param_needed_fn param_needed, void *need_arg,
                             model_grad_ready_fn layer_done, void *arg)
{
    const float *logits;
    double total;
    flps_err rc;

    if (m == NULL || x == NULL || y == NULL || loss == NULL || b == 0 ||
        b > m->max_batch)
        return FLPS_EINVAL;
    rc = model_check_labels(m, y, b);
    if (rc != FLPS_OK)
        return rc;

    m->param_needed = param_needed;
    m->need_arg = need_arg;
    logits = m->ops->forward(m, x, b);
    m->param_needed = NULL;
    m->need_arg = NULL;
    total = model_softmax_xent(logits, y, b, m->classes, m->dlogits, NULL);
    /* Refuse before any gradient is written: a NaN or Inf here comes from
     * non-finite inputs or parameters and would poison the server. */
    if (!isfinite(total))
        return FLPS_ENONFINITE;
    m->ops->backward(m, x, m->dlogits, b, layer_done, arg);
    *loss = (float)(total / (double)b);
    return FLPS_OK;
}

flps_err model_evaluate(model *m, const float *x, const uint8_t *y, size_t b,
                        size_t *correct, double *loss_sum)
{
    size_t ok = 0;
    double total = 0.0;
    flps_err rc;

    if (m == NULL || x == NULL || y == NULL || correct == NULL ||
        loss_sum == NULL || b == 0)
        return FLPS_EINVAL;
    rc = model_check_labels(m, y, b);
    if (rc != FLPS_OK)
        return rc;
    for (size_t start = 0; start < b; start += m->max_batch) {
        size_t n = b - start < m->max_batch ? b - start : m->max_batch;
        const float *logits = m->ops->forward(m, x + start * m->in_dim, n);

        total +=
            model_softmax_xent(logits, y + start, n, m->classes, NULL, &ok);
    }
    *correct = ok;
    *loss_sum = total;
    return FLPS_OK;
}

/* ---- The MLP ---- */

typedef struct mlp {
    size_t nlayers; /* fully connected layers: nhidden + 1 */
    size_t *dims;   /* nlayers + 1 widths: in_dim, hidden..., classes */
    /* acts[l], 1 <= l <= nlayers: layer l's output for max_batch rows, after
     * ReLU for hidden layers, the logits for the last; acts[0] is unused
     * (the caller's input is read in place). */
    float **acts;
    float *act_buf;
    float *delta[2]; /* ping-pong buffers for the backward pass */
} mlp;

static void mlp_destroy_impl(void *impl)
{
    mlp *p = impl;

    flps_free(p->delta[1]);
    flps_free(p->delta[0]);
    flps_free(p->act_buf);
    flps_free(p->acts);
    flps_free(p->dims);
    flps_free(p);
}

/* Forward b rows of x through every layer into acts. */
static const float *mlp_forward(model *m, const float *x, size_t b)
{
    mlp *p = m->impl;
    const float *in = x;

    for (size_t l = 1; l <= p->nlayers; l++) {
        const model_tensor *w = &m->tensors[2 * (l - 1)];

        model_need(m, 2 * (l - 1));
        model_need(m, 2 * (l - 1) + 1);
        model_fc_forward(in, b, p->dims[l - 1], w->param, w[1].param,
                         p->dims[l], l < p->nlayers, p->acts[l]);
        in = p->acts[l];
    }
    return p->acts[p->nlayers];
}

static void mlp_backward(model *m, const float *x, const float *dlogits,
                         size_t b, model_grad_ready_fn layer_done, void *arg)
{
    mlp *p = m->impl;
    const float *delta = dlogits;

    for (size_t l = p->nlayers; l >= 1; l--) {
        const float *in = l > 1 ? p->acts[l - 1] : x;
        float *prev = delta == p->delta[0] ? p->delta[1] : p->delta[0];

        model_fc_backward(m, 2 * (l - 1), in, b, p->dims[l - 1], delta,
                          l > 1 ? prev : NULL, layer_done, arg);
        delta = prev;
    }
}

static const model_ops mlp_ops = {mlp_forward, mlp_backward, mlp_destroy_impl};

flps_err model_create_mlp(size_t in_dim, const size_t *hidden, size_t nhidden,
                          size_t classes, size_t max_batch, uint64_t seed,
                          model **out)
{
    flps_err rc;
    size_t nacts = 0, maxdim = 0, ndelta, nlayers = nhidden + 1;
    size_t *numel = NULL;
    model *m = NULL;
    mlp *p;
    uint64_t rng = seed;

    if (out == NULL || in_dim == 0 || classes < 2 || classes > 256 ||
        max_batch == 0 || max_batch > INT_MAX || in_dim > INT_MAX ||
        (nhidden > 0 && hidden == NULL) || nhidden > 1000)
        return FLPS_EINVAL;
    for (size_t i = 0; i < nhidden; i++)
        if (hidden[i] == 0 || hidden[i] > INT_MAX)
            return FLPS_EINVAL;

    numel = flps_malloc(2 * nlayers * sizeof(*numel));
    if (numel == NULL)
        return FLPS_ENOMEM;
    /* Every size below is checked: a huge layer must fail with EINVAL, not
     * wrap around into a small allocation. */
    rc = FLPS_EINVAL;
    for (size_t l = 1; l <= nlayers; l++) {
        size_t nin = l == 1 ? in_dim : hidden[l - 2];
        size_t nout = l == nlayers ? classes : hidden[l - 1];
        size_t rows;

        if (!model_mul_ok(nout, nin, &numel[2 * (l - 1)]) ||
            !model_mul_ok(max_batch, nout, &rows) ||
            !model_add_ok(nacts, rows, &nacts))
            goto fail;
        numel[2 * (l - 1) + 1] = nout;
        maxdim = nin > maxdim ? nin : maxdim;
    }
    if (!model_mul_ok(max_batch, maxdim, &ndelta) ||
        nacts > SIZE_MAX / sizeof(float) || ndelta > SIZE_MAX / sizeof(float))
        goto fail;
    rc = model_base_create(&mlp_ops, in_dim, classes, max_batch, 2 * nlayers,
                           numel, &m);
    if (rc != FLPS_OK)
        goto fail;

    rc = FLPS_ENOMEM;
    p = flps_calloc(1, sizeof(*p));
    if (p == NULL)
        goto fail;
    m->impl = p;
    p->nlayers = nlayers;
    p->dims = flps_malloc((nlayers + 1) * sizeof(*p->dims));
    p->acts = flps_calloc(nlayers + 1, sizeof(*p->acts));
    p->act_buf = flps_malloc(nacts * sizeof(float));
    p->delta[0] = flps_malloc(ndelta * sizeof(float));
    p->delta[1] = flps_malloc(ndelta * sizeof(float));
    if (p->dims == NULL || p->acts == NULL || p->act_buf == NULL ||
        p->delta[0] == NULL || p->delta[1] == NULL)
        goto fail;
    p->dims[0] = in_dim;
    for (size_t i = 0; i < nhidden; i++)
        p->dims[i + 1] = hidden[i];
    p->dims[nlayers] = classes;

    for (size_t l = 1, aoff = 0; l <= nlayers; l++) {
        model_tensor *w = &m->tensors[2 * (l - 1)];

        snprintf(m->names[2 * (l - 1)], MODEL_NAME_MAX, "fc%zu.weight", l);
        snprintf(m->names[2 * (l - 1) + 1], MODEL_NAME_MAX, "fc%zu.bias", l);
        p->acts[l] = p->act_buf + aoff;
        aoff += max_batch * p->dims[l];
        /* Biases start at 0 (base_create's grads are zeroed, params not). */
        model_init_he(w->param, w->numel, p->dims[l - 1], &rng);
        memset(w[1].param, 0, w[1].numel * sizeof(float));
    }

    /* Several worker processes share a couple of cores: OpenBLAS threads
     * would only oversubscribe them. The setting is process-wide, and
     * setting it again for every model is harmless. */
    openblas_set_num_threads(1);

    flps_free(numel);
    *out = m;
    return FLPS_OK;

fail:
    model_destroy(m);
    flps_free(numel);
    return rc;
}
