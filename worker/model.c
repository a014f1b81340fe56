/* The multilayer perceptron of the training runtime: forward, backward and
 * evaluation on the CPU with OpenBLAS. */
#include "worker/model.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/rng.h"

/* Longest tensor name: "fc" + 20 digits + ".weight" + NUL fits. */
#define MODEL_NAME_MAX 32

struct model {
    size_t nlayers; /* fully connected layers: nhidden + 1 */
    size_t *dims;   /* nlayers + 1 widths: in_dim, hidden..., classes */
    size_t max_batch;
    size_t nparams;
    model_tensor *tensors; /* 2 * nlayers: fc<l>.weight, fc<l>.bias, ... */
    char (*names)[MODEL_NAME_MAX];
    float *params; /* all tensors back to back, in tensor order */
    float *grads;  /* same layout as params */
    /* acts[l], 1 <= l <= nlayers: layer l's output for max_batch rows, after
     * ReLU for hidden layers, the logits for the last; acts[0] is unused
     * (the caller's input is read in place). */
    float **acts;
    float *act_buf;
    float *delta[2]; /* ping-pong buffers for the backward pass */
};

/* Uniform in [-1, 1), exactly representable (24 random bits). */
static float model_rng_sym(uint64_t *state)
{
    float u = (float)(flps_splitmix64(state) >> 40) * 0x1.0p-24f;

    return 2.0f * u - 1.0f;
}

static int model_mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static int model_add_ok(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a)
        return 0;
    *out = a + b;
    return 1;
}

/* He-uniform (Kaiming): U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)) keeps the
 * variance of ReLU activations constant across layers. Biases start at 0. */
static void model_init_params(model *m, uint64_t seed)
{
    uint64_t rng = seed;

    for (size_t l = 1; l <= m->nlayers; l++) {
        model_tensor *w = &m->tensors[2 * (l - 1)];
        model_tensor *b = &m->tensors[2 * (l - 1) + 1];
        float bound = sqrtf(6.0f / (float)m->dims[l - 1]);

        for (size_t i = 0; i < w->numel; i++)
            w->param[i] = bound * model_rng_sym(&rng);
        memset(b->param, 0, b->numel * sizeof(float));
    }
}

flps_err model_create_mlp(size_t in_dim, const size_t *hidden, size_t nhidden,
                          size_t classes, size_t max_batch, uint64_t seed,
                          model **out)
{
    flps_err rc = FLPS_ENOMEM;
    size_t nparams = 0, nacts = 0, maxdim = 0, ndelta;
    model *m;

    if (out == NULL || in_dim == 0 || classes < 2 || classes > 256 ||
        max_batch == 0 || max_batch > INT_MAX || in_dim > INT_MAX ||
        (nhidden > 0 && hidden == NULL) || nhidden > 1000)
        return FLPS_EINVAL;
    for (size_t i = 0; i < nhidden; i++)
        if (hidden[i] == 0 || hidden[i] > INT_MAX)
            return FLPS_EINVAL;

    m = flps_calloc(1, sizeof(*m));
    if (m == NULL)
        return FLPS_ENOMEM;
    m->nlayers = nhidden + 1;
    m->max_batch = max_batch;
    m->dims = flps_malloc((m->nlayers + 1) * sizeof(*m->dims));
    if (m->dims == NULL)
        goto fail;
    m->dims[0] = in_dim;
    for (size_t i = 0; i < nhidden; i++)
        m->dims[i + 1] = hidden[i];
    m->dims[m->nlayers] = classes;

    /* Every size below is checked: a huge layer must fail with EINVAL, not
     * wrap around into a small allocation. */
    rc = FLPS_EINVAL;
    for (size_t l = 0; l <= m->nlayers; l++)
        if (m->dims[l] > maxdim)
            maxdim = m->dims[l];
    for (size_t l = 1; l <= m->nlayers; l++) {
        size_t w, rows;

        if (!model_mul_ok(m->dims[l], m->dims[l - 1], &w) ||
            !model_add_ok(nparams, w, &nparams) ||
            !model_add_ok(nparams, m->dims[l], &nparams) ||
            !model_mul_ok(max_batch, m->dims[l], &rows) ||
            !model_add_ok(nacts, rows, &nacts))
            goto fail;
    }
    if (!model_mul_ok(max_batch, maxdim, &ndelta) ||
        nparams > SIZE_MAX / sizeof(float) ||
        nacts > SIZE_MAX / sizeof(float) || ndelta > SIZE_MAX / sizeof(float))
        goto fail;

    rc = FLPS_ENOMEM;
    m->nparams = nparams;
    m->tensors = flps_calloc(2 * m->nlayers, sizeof(*m->tensors));
    m->names = flps_calloc(2 * m->nlayers, sizeof(*m->names));
    m->params = flps_malloc(nparams * sizeof(float));
    m->grads = flps_calloc(nparams, sizeof(float));
    m->acts = flps_calloc(m->nlayers + 1, sizeof(*m->acts));
    m->act_buf = flps_malloc(nacts * sizeof(float));
    m->delta[0] = flps_malloc(ndelta * sizeof(float));
    m->delta[1] = flps_malloc(ndelta * sizeof(float));
    if (m->tensors == NULL || m->names == NULL || m->params == NULL ||
        m->grads == NULL || m->acts == NULL || m->act_buf == NULL ||
        m->delta[0] == NULL || m->delta[1] == NULL)
        goto fail;

    {
        size_t off = 0, aoff = 0;

        for (size_t l = 1; l <= m->nlayers; l++) {
            model_tensor *w = &m->tensors[2 * (l - 1)];
            model_tensor *b = &m->tensors[2 * (l - 1) + 1];

            snprintf(m->names[2 * (l - 1)], MODEL_NAME_MAX, "fc%zu.weight", l);
            snprintf(m->names[2 * (l - 1) + 1], MODEL_NAME_MAX, "fc%zu.bias",
                     l);
            w->name = m->names[2 * (l - 1)];
            w->numel = m->dims[l] * m->dims[l - 1];
            w->param = m->params + off;
            w->grad = m->grads + off;
            off += w->numel;
            b->name = m->names[2 * (l - 1) + 1];
            b->numel = m->dims[l];
            b->param = m->params + off;
            b->grad = m->grads + off;
            off += b->numel;
            m->acts[l] = m->act_buf + aoff;
            aoff += max_batch * m->dims[l];
        }
    }
    model_init_params(m, seed);

    /* Several worker processes share a couple of cores: OpenBLAS threads
     * would only oversubscribe them. The setting is process-wide, and
     * setting it again for every model is harmless. */
    openblas_set_num_threads(1);

    *out = m;
    return FLPS_OK;

fail:
    model_destroy(m);
    return rc;
}

void model_destroy(model *m)
{
    if (m == NULL)
        return;
    flps_free(m->delta[1]);
    flps_free(m->delta[0]);
    flps_free(m->act_buf);
    flps_free(m->acts);
    flps_free(m->grads);
    flps_free(m->params);
    flps_free(m->names);
    flps_free(m->tensors);
    flps_free(m->dims);
    flps_free(m);
}

size_t model_num_tensors(const model *m)
{
    return m == NULL ? 0 : 2 * m->nlayers;
}

model_tensor *model_tensor_at(model *m, size_t i)
{
    if (m == NULL || i >= 2 * m->nlayers)
        return NULL;
    return &m->tensors[i];
}

size_t model_num_params(const model *m)
{
    return m == NULL ? 0 : m->nparams;
}

/* Forward b rows of x through every layer into m->acts. */
static void model_forward(model *m, const float *x, size_t b)
{
    const float *in = x;

    for (size_t l = 1; l <= m->nlayers; l++) {
        const model_tensor *w = &m->tensors[2 * (l - 1)];
        const float *bias = m->tensors[2 * (l - 1) + 1].param;
        size_t nin = m->dims[l - 1], nout = m->dims[l];
        float *z = m->acts[l];

        for (size_t i = 0; i < b; i++)
            memcpy(z + i * nout, bias, nout * sizeof(float));
        /* z (b x nout) += in (b x nin) * W^T, W stored nout x nin. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)nout,
                    (int)nin, 1.0f, in, (int)nin, w->param, (int)nin, 1.0f, z,
                    (int)nout);
        if (l < m->nlayers)
            for (size_t i = 0; i < b * nout; i++)
                z[i] = z[i] > 0.0f ? z[i] : 0.0f;
        in = z;
    }
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
    size_t k = m->dims[m->nlayers];

    for (size_t i = 0; i < b; i++) {
        if (y[i] >= k) {
            log_error("model: label %u of row %zu is not below %zu classes",
                      y[i], i, k);
            return FLPS_EINVAL;
        }
    }
    return FLPS_OK;
}

flps_err model_train_step(model *m, const float *x, const uint8_t *y, size_t b,
                          float *loss, model_grad_ready_fn layer_done,
                          void *arg)
{
    size_t L, k;
    double total;
    float *delta;
    int cur = 0;
    flps_err rc;

    if (m == NULL || x == NULL || y == NULL || loss == NULL || b == 0 ||
        b > m->max_batch)
        return FLPS_EINVAL;
    rc = model_check_labels(m, y, b);
    if (rc != FLPS_OK)
        return rc;
    L = m->nlayers;
    k = m->dims[L];

    model_forward(m, x, b);
    delta = m->delta[cur];
    total = model_softmax_xent(m->acts[L], y, b, k, delta, NULL);
    /* Refuse before any gradient is written: a NaN or Inf here comes from
     * non-finite inputs or parameters and would poison the server. */
    if (!isfinite(total))
        return FLPS_ENONFINITE;

    for (size_t l = L; l >= 1; l--) {
        size_t wi = 2 * (l - 1), bi = wi + 1;
        size_t nin = m->dims[l - 1], nout = m->dims[l];
        const float *in = l > 1 ? m->acts[l - 1] : x;
        model_tensor *w = &m->tensors[wi], *bt = &m->tensors[bi];

        /* Bias gradient: column sums of delta (b x nout). */
        for (size_t j = 0; j < nout; j++) {
            double s = 0.0;

            for (size_t i = 0; i < b; i++)
                s += delta[i * nout + j];
            bt->grad[j] = (float)s;
        }
        if (layer_done != NULL)
            layer_done(arg, bi);
        /* dW (nout x nin) = delta^T (nout x b) * in (b x nin). */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nout,
                    (int)nin, (int)b, 1.0f, delta, (int)nout, in, (int)nin,
                    0.0f, w->grad, (int)nin);
        if (layer_done != NULL)
            layer_done(arg, wi);
        if (l == 1)
            break;
        /* delta_prev (b x nin) = delta (b x nout) * W (nout x nin), then
         * through the ReLU: zero where the activation was clipped. */
        {
            float *prev = m->delta[cur ^ 1];

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b,
                        (int)nin, (int)nout, 1.0f, delta, (int)nout, w->param,
                        (int)nin, 0.0f, prev, (int)nin);
            for (size_t i = 0; i < b * nin; i++)
                if (!(in[i] > 0.0f))
                    prev[i] = 0.0f;
            cur ^= 1;
            delta = prev;
        }
    }
    *loss = (float)(total / (double)b);
    return FLPS_OK;
}

flps_err model_evaluate(model *m, const float *x, const uint8_t *y, size_t b,
                        size_t *correct, double *loss_sum)
{
    size_t ok = 0, in_dim, k;
    double total = 0.0;
    flps_err rc;

    if (m == NULL || x == NULL || y == NULL || correct == NULL ||
        loss_sum == NULL || b == 0)
        return FLPS_EINVAL;
    rc = model_check_labels(m, y, b);
    if (rc != FLPS_OK)
        return rc;
    in_dim = m->dims[0];
    k = m->dims[m->nlayers];
    for (size_t start = 0; start < b; start += m->max_batch) {
        size_t n = b - start < m->max_batch ? b - start : m->max_batch;

        model_forward(m, x + start * in_dim, n);
        total +=
            model_softmax_xent(m->acts[m->nlayers], y + start, n, k, NULL, &ok);
    }
    *correct = ok;
    *loss_sum = total;
    return FLPS_OK;
}
