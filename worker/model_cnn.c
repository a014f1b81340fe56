/* The convolutional network of the training runtime: two same-padded
 * convolutions, each followed by ReLU and 2 x 2 max pooling, then two fully
 * connected layers. Convolutions are im2col + one OpenBLAS sgemm per layer
 * for the whole batch, in channels-last (NHWC) layout so that a GEMM's
 * output is already the next stage's input and a patch row is a few
 * contiguous copies. */
#include "worker/model.h"

#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "worker/model_internal.h"

enum {
    CNN_CONV1_W,
    CNN_CONV1_B,
    CNN_CONV2_W,
    CNN_CONV2_B,
    CNN_FC1_W,
    CNN_FC1_B,
    CNN_FC2_W,
    CNN_FC2_B,
    CNN_NTENSORS
};

typedef struct cnn {
    model_cnn_shape s;
    size_t h2, w2; /* after the first pooling: the second conv's size */
    size_t flat;   /* fc1's input: height/4 * width/4 * conv2 */
    size_t k1, k2; /* patch lengths: kernel^2 * channels, kernel^2 * conv1 */
    float *col1;   /* max_batch*height*width x k1, kept for conv1's dW */
    float *z1;     /* conv1's output before bias; in backward its grad */
    float *a1;     /* relu(pool(z1) + bias): max_batch*h2*w2 x conv1 */
    float *da1;    /* grad of a1 */
    float *col2;   /* max_batch*h2*w2 x k2; in backward the grad of it */
    float *z2;     /* conv2's output before bias; in backward its grad */
    float *a2;     /* max_batch x flat: fc1's input */
    float *da2;    /* grad of a2 */
    float *hid;    /* max_batch x fc, after ReLU */
    float *dhid;   /* grad of hid */
    float *logits; /* max_batch x classes */
    double *dbias; /* max(conv1, conv2) accumulators for a conv bias grad */
    float *bsum;   /* as many floats of scratch for them */
} cnn;

model_cnn_shape model_cnn_shape_fmnist(void)
{
    model_cnn_shape s = {28, 28, 1, 5, 32, 64, 1024, 10};

    return s;
}

/* Row (n, y, x) of col gets the kernel x kernel x c patch of image n
 * centred on (y, x), zeros where it hangs over the border (padding
 * kernel / 2, stride 1). In NHWC one kernel row of a patch is one
 * contiguous run of the image, so a patch is `kernel` copies. */
static void cnn_im2col(const float *in, size_t b, size_t h, size_t w, size_t c,
                       size_t k, float *col)
{
    size_t p = k / 2, kc = k * c;

    for (size_t n = 0; n < b; n++) {
        for (size_t y = 0; y < h; y++) {
            for (size_t x = 0; x < w; x++) {
                float *dst = col + ((n * h + y) * w + x) * k * kc;
                /* kw in [lo, hi) falls inside the image. */
                size_t lo = x < p ? p - x : 0;
                size_t hi = x + k - p > w ? w + p - x : k;

                for (size_t kh = 0; kh < k; kh++, dst += kc) {
                    size_t iy = y + kh; /* + p offset: iy - p is the row */

                    if (iy < p || iy - p >= h) {
                        memset(dst, 0, kc * sizeof(float));
                        continue;
                    }
                    if (lo > 0)
                        memset(dst, 0, lo * c * sizeof(float));
                    memcpy(dst + lo * c,
                           in + ((n * h + iy - p) * w + x + lo - p) * c,
                           (hi - lo) * c * sizeof(float));
                    if (hi < k)
                        memset(dst + hi * c, 0, (k - hi) * c * sizeof(float));
                }
            }
        }
    }
}

/* The adjoint of cnn_im2col: din (b x h x w x c, overwritten) = the sum
 * over the patches of col that each pixel was copied into. */
static void cnn_col2im(const float *col, size_t b, size_t h, size_t w, size_t c,
                       size_t k, float *din)
{
    size_t p = k / 2, kc = k * c;

    memset(din, 0, b * h * w * c * sizeof(float));
    for (size_t n = 0; n < b; n++) {
        for (size_t y = 0; y < h; y++) {
            for (size_t x = 0; x < w; x++) {
                const float *src = col + ((n * h + y) * w + x) * k * kc;
                size_t lo = x < p ? p - x : 0;
                size_t hi = x + k - p > w ? w + p - x : k;

                for (size_t kh = 0; kh < k; kh++, src += kc) {
                    size_t iy = y + kh;
                    float *d;
                    const float *s;
                    size_t len;

                    if (iy < p || iy - p >= h)
                        continue;
                    d = din + ((n * h + iy - p) * w + x + lo - p) * c;
                    s = src + lo * c;
                    len = (hi - lo) * c;
                    for (size_t i = 0; i < len; i++)
                        d[i] += s[i];
                }
            }
        }
    }
}

/* out = relu(maxpool2(z) + bias) over b images h x w x f. The bias is
 * added after the max: it is the same for the whole window, so this is
 * conv + bias -> ReLU -> pool in one pass over z. Written as selects so
 * that the channel loop vectorizes. */
static void cnn_pool_forward(const float *z, const float *bias, size_t b,
                             size_t h, size_t w, size_t f, float *out)
{
    size_t ho = h / 2, wo = w / 2;

    for (size_t n = 0; n < b; n++) {
        for (size_t py = 0; py < ho; py++) {
            for (size_t px = 0; px < wo; px++) {
                const float *z00 = z + ((n * h + 2 * py) * w + 2 * px) * f;
                const float *z01 = z00 + f, *z10 = z00 + w * f;
                const float *z11 = z10 + f;
                float *o = out + ((n * ho + py) * wo + px) * f;

                for (size_t c = 0; c < f; c++) {
                    float m = z00[c], v;

                    m = z01[c] > m ? z01[c] : m;
                    m = z10[c] > m ? z10[c] : m;
                    m = z11[c] > m ? z11[c] : m;
                    v = m + bias[c];
                    o[c] = v > 0.0f ? v : 0.0f;
                }
            }
        }
    }
}

/* The backward of cnn_pool_forward, in place: z (b x h x w x f, the
 * forward's input) is overwritten with its gradient, dout at the first
 * maximum of each window whose output passed the ReLU and 0 elsewhere.
 * The winner is found again from z with the forward's comparisons rather
 * than remembered, which saves a pass over an index array. dbias[c]
 * (f entries, overwritten) is the sum of the gradient over channel c,
 * summed in float per image (bsum, f floats of scratch) and in double
 * across images. out, dout and bsum are separate buffers from z. */
static void cnn_pool_backward(const float *restrict out,
                              const float *restrict dout, size_t b, size_t h,
                              size_t w, size_t f, float *z,
                              float *restrict bsum, double *dbias)
{
    size_t ho = h / 2, wo = w / 2;

    for (size_t c = 0; c < f; c++)
        dbias[c] = 0.0;
    for (size_t n = 0; n < b; n++) {
        for (size_t c = 0; c < f; c++)
            bsum[c] = 0.0f;
        for (size_t py = 0; py < ho; py++) {
            for (size_t px = 0; px < wo; px++) {
                /* restrict: the four rows of a window never overlap,
                 * which the compiler cannot see through the stride f. */
                float *restrict z00 = z + ((n * h + 2 * py) * w + 2 * px) * f;
                float *restrict z01 = z00 + f;
                float *restrict z10 = z00 + w * f;
                float *restrict z11 = z10 + f;
                size_t o = ((n * ho + py) * wo + px) * f;

                for (size_t c = 0; c < f; c++) {
                    /* Every load up front: a load under a condition
                     * would keep the loop from vectorizing. */
                    float v00 = z00[c], v01 = z01[c], v10 = z10[c];
                    float v11 = z11[c], d = dout[o + c];
                    float g = out[o + c] > 0.0f ? d : 0.0f;
                    float m = v00, g0 = g, g1, g2, g3;
                    int s;

                    s = v01 > m;
                    m = s ? v01 : m;
                    g1 = s ? g : 0.0f;
                    g0 = s ? 0.0f : g0;
                    s = v10 > m;
                    m = s ? v10 : m;
                    g2 = s ? g : 0.0f;
                    g0 = s ? 0.0f : g0;
                    g1 = s ? 0.0f : g1;
                    s = v11 > m;
                    g3 = s ? g : 0.0f;
                    g0 = s ? 0.0f : g0;
                    g1 = s ? 0.0f : g1;
                    g2 = s ? 0.0f : g2;
                    z00[c] = g0;
                    z01[c] = g1;
                    z10[c] = g2;
                    z11[c] = g3;
                    bsum[c] += g;
                }
            }
        }
        for (size_t c = 0; c < f; c++)
            dbias[c] += bsum[c];
    }
}

static const float *cnn_forward(model *m, const float *x, size_t b)
{
    cnn *c = m->impl;
    const model_tensor *t = m->tensors;
    const model_cnn_shape *s = &c->s;
    size_t r1 = b * s->height * s->width, r2 = b * c->h2 * c->w2;

    cnn_im2col(x, b, s->height, s->width, s->channels, s->kernel, c->col1);
    /* z1 (r1 x conv1) = col1 (r1 x k1) * W1^T, W1 stored conv1 x k1. */
    model_need(m, CNN_CONV1_W);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)r1, (int)s->conv1,
                (int)c->k1, 1.0f, c->col1, (int)c->k1, t[CNN_CONV1_W].param,
                (int)c->k1, 0.0f, c->z1, (int)s->conv1);
    model_need(m, CNN_CONV1_B);
    cnn_pool_forward(c->z1, t[CNN_CONV1_B].param, b, s->height, s->width,
                     s->conv1, c->a1);

    cnn_im2col(c->a1, b, c->h2, c->w2, s->conv1, s->kernel, c->col2);
    model_need(m, CNN_CONV2_W);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)r2, (int)s->conv2,
                (int)c->k2, 1.0f, c->col2, (int)c->k2, t[CNN_CONV2_W].param,
                (int)c->k2, 0.0f, c->z2, (int)s->conv2);
    model_need(m, CNN_CONV2_B);
    cnn_pool_forward(c->z2, t[CNN_CONV2_B].param, b, c->h2, c->w2, s->conv2,
                     c->a2);

    model_need(m, CNN_FC1_W);
    model_need(m, CNN_FC1_B);
    model_fc_forward(c->a2, b, c->flat, t[CNN_FC1_W].param, t[CNN_FC1_B].param,
                     s->fc, 1, c->hid);
    model_need(m, CNN_FC2_W);
    model_need(m, CNN_FC2_B);
    model_fc_forward(c->hid, b, s->fc, t[CNN_FC2_W].param, t[CNN_FC2_B].param,
                     s->classes, 0, c->logits);
    return c->logits;
}

static void cnn_report(model_grad_ready_fn layer_done, void *arg, size_t ti)
{
    if (layer_done != NULL)
        layer_done(arg, ti);
}

/* Backward of a convolution whose output grad is dz (rows x f) and whose
 * forward patches are in col (rows x k): the bias grad from dbias, then
 * dW = dz^T col, each reported when written. If din is not NULL, col is
 * overwritten with dcol = dz W and folded back into din by col2im. */
static void cnn_conv_backward(model *m, size_t wi, const double *dbias,
                              const float *dz, size_t rows, float *col,
                              size_t b, size_t h, size_t w, size_t cin,
                              float *din, model_grad_ready_fn layer_done,
                              void *arg)
{
    cnn *c = m->impl;
    model_tensor *wt = &m->tensors[wi], *bt = &m->tensors[wi + 1];
    size_t f = bt->numel, k = wt->numel / f;

    for (size_t i = 0; i < f; i++)
        bt->grad[i] = (float)dbias[i];
    cnn_report(layer_done, arg, wi + 1);
    /* dW (f x k) = dz^T (f x rows) * col (rows x k). */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)f, (int)k,
                (int)rows, 1.0f, dz, (int)f, col, (int)k, 0.0f, wt->grad,
                (int)k);
    cnn_report(layer_done, arg, wi);
    if (din == NULL)
        return;
    /* dcol (rows x k) = dz (rows x f) * W (f x k): col is not needed any
     * more once dW is out, so it takes dcol. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)k,
                (int)f, 1.0f, dz, (int)f, wt->param, (int)k, 0.0f, col, (int)k);
    cnn_col2im(col, b, h, w, cin, c->s.kernel, din);
}

static void cnn_backward(model *m, const float *x, const float *dlogits,
                         size_t b, model_grad_ready_fn layer_done, void *arg)
{
    cnn *c = m->impl;
    const model_cnn_shape *s = &c->s;
    size_t r1 = b * s->height * s->width, r2 = b * c->h2 * c->w2;

    (void)x; /* conv1's patches of x are in col1 */
    model_fc_backward(m, CNN_FC2_W, c->hid, b, s->fc, dlogits, c->dhid,
                      layer_done, arg);
    model_fc_backward(m, CNN_FC1_W, c->a2, b, c->flat, c->dhid, c->da2,
                      layer_done, arg);
    /* z2 and z1 are not needed after pooling: they take their grads. */
    cnn_pool_backward(c->a2, c->da2, b, c->h2, c->w2, s->conv2, c->z2, c->bsum,
                      c->dbias);
    cnn_conv_backward(m, CNN_CONV2_W, c->dbias, c->z2, r2, c->col2, b, c->h2,
                      c->w2, s->conv1, c->da1, layer_done, arg);
    cnn_pool_backward(c->a1, c->da1, b, s->height, s->width, s->conv1, c->z1,
                      c->bsum, c->dbias);
    cnn_conv_backward(m, CNN_CONV1_W, c->dbias, c->z1, r1, c->col1, b,
                      s->height, s->width, s->channels, NULL, layer_done, arg);
}

static void cnn_destroy_impl(void *impl)
{
    cnn *c = impl;

    flps_free(c->bsum);
    flps_free(c->dbias);
    flps_free(c->logits);
    flps_free(c->dhid);
    flps_free(c->hid);
    flps_free(c->da2);
    flps_free(c->a2);
    flps_free(c->z2);
    flps_free(c->col2);
    flps_free(c->da1);
    flps_free(c->a1);
    flps_free(c->z1);
    flps_free(c->col1);
    flps_free(c);
}

static const model_ops cnn_ops = {cnn_forward, cnn_backward, cnn_destroy_impl};

/* a * b * c into *out if the product is within INT_MAX: BLAS takes int
 * sizes, and a buffer of at most INT_MAX floats is far from overflowing a
 * size_t byte count. */
static int cnn_dims_ok(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab, abc;

    if (!model_mul_ok(a, b, &ab) || !model_mul_ok(ab, c, &abc) || abc > INT_MAX)
        return 0;
    *out = abc;
    return 1;
}

/* Element counts of the buffers; one struct so they are checked once. */
typedef struct cnn_sizes {
    size_t in_dim, k1, k2, h2, w2, flat;
    size_t r1, r2;         /* patch rows per max_batch */
    size_t col1, col2;     /* r1 * k1, r2 * k2 */
    size_t z1, z2, a1, a2; /* r1 * conv1, r2 * conv2, ... */
    size_t hid, logits;
    size_t numel[CNN_NTENSORS];
} cnn_sizes;

static int cnn_sizes_compute(const model_cnn_shape *s, size_t mb, cnn_sizes *z)
{
    size_t *n = z->numel;

    z->h2 = s->height / 2;
    z->w2 = s->width / 2;
    if (!cnn_dims_ok(s->height, s->width, s->channels, &z->in_dim) ||
        !cnn_dims_ok(s->kernel, s->kernel, s->channels, &z->k1) ||
        !cnn_dims_ok(s->kernel, s->kernel, s->conv1, &z->k2) ||
        !cnn_dims_ok(s->height / 4, s->width / 4, s->conv2, &z->flat) ||
        !cnn_dims_ok(mb, s->height, s->width, &z->r1) ||
        !cnn_dims_ok(mb, z->h2, z->w2, &z->r2) ||
        !cnn_dims_ok(z->r1, z->k1, 1, &z->col1) ||
        !cnn_dims_ok(z->r2, z->k2, 1, &z->col2) ||
        !cnn_dims_ok(z->r1, s->conv1, 1, &z->z1) ||
        !cnn_dims_ok(z->r2, s->conv2, 1, &z->z2) ||
        !cnn_dims_ok(z->r2, s->conv1, 1, &z->a1) ||
        !cnn_dims_ok(mb, z->flat, 1, &z->a2) ||
        !cnn_dims_ok(mb, s->fc, 1, &z->hid) ||
        !cnn_dims_ok(mb, s->classes, 1, &z->logits) ||
        !cnn_dims_ok(s->conv1, z->k1, 1, &n[CNN_CONV1_W]) ||
        !cnn_dims_ok(s->conv2, z->k2, 1, &n[CNN_CONV2_W]) ||
        !cnn_dims_ok(s->fc, z->flat, 1, &n[CNN_FC1_W]) ||
        !cnn_dims_ok(s->classes, s->fc, 1, &n[CNN_FC2_W]))
        return 0;
    n[CNN_CONV1_B] = s->conv1;
    n[CNN_CONV2_B] = s->conv2;
    n[CNN_FC1_B] = s->fc;
    n[CNN_FC2_B] = s->classes;
    return 1;
}

flps_err model_create_cnn(const model_cnn_shape *shape, size_t max_batch,
                          uint64_t seed, model **out)
{
    static const char *const names[CNN_NTENSORS] = {
        "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
        "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};
    /* The fan-in of each weight, for He init. */
    size_t fan_in[CNN_NTENSORS];
    cnn_sizes z;
    model *m = NULL;
    cnn *c;
    flps_err rc;
    uint64_t rng = seed;
    size_t nbias;

    if (out == NULL || shape == NULL || shape->height == 0 ||
        shape->width == 0 || shape->channels == 0 || shape->conv1 == 0 ||
        shape->conv2 == 0 || shape->fc == 0 || shape->height % 4 != 0 ||
        shape->width % 4 != 0 || shape->kernel % 2 == 0 || shape->classes < 2 ||
        shape->classes > 256 || max_batch == 0 ||
        !cnn_sizes_compute(shape, max_batch, &z))
        return FLPS_EINVAL;

    nbias = shape->conv1 > shape->conv2 ? shape->conv1 : shape->conv2;
    rc = model_base_create(&cnn_ops, z.in_dim, shape->classes, max_batch,
                           CNN_NTENSORS, z.numel, &m);
    if (rc != FLPS_OK)
        return rc;
    rc = FLPS_ENOMEM;
    c = flps_calloc(1, sizeof(*c));
    if (c == NULL)
        goto fail;
    m->impl = c;
    c->s = *shape;
    c->h2 = z.h2;
    c->w2 = z.w2;
    c->flat = z.flat;
    c->k1 = z.k1;
    c->k2 = z.k2;
    c->col1 = flps_malloc(z.col1 * sizeof(float));
    c->z1 = flps_malloc(z.z1 * sizeof(float));
    c->a1 = flps_malloc(z.a1 * sizeof(float));
    c->da1 = flps_malloc(z.a1 * sizeof(float));
    c->col2 = flps_malloc(z.col2 * sizeof(float));
    c->z2 = flps_malloc(z.z2 * sizeof(float));
    c->a2 = flps_malloc(z.a2 * sizeof(float));
    c->da2 = flps_malloc(z.a2 * sizeof(float));
    c->hid = flps_malloc(z.hid * sizeof(float));
    c->dhid = flps_malloc(z.hid * sizeof(float));
    c->logits = flps_malloc(z.logits * sizeof(float));
    c->dbias = flps_malloc(nbias * sizeof(double));
    c->bsum = flps_malloc(nbias * sizeof(float));
    if (c->col1 == NULL || c->z1 == NULL || c->a1 == NULL || c->da1 == NULL ||
        c->col2 == NULL || c->z2 == NULL || c->a2 == NULL || c->da2 == NULL ||
        c->hid == NULL || c->dhid == NULL || c->logits == NULL ||
        c->dbias == NULL || c->bsum == NULL)
        goto fail;

    fan_in[CNN_CONV1_W] = z.k1;
    fan_in[CNN_CONV2_W] = z.k2;
    fan_in[CNN_FC1_W] = z.flat;
    fan_in[CNN_FC2_W] = shape->fc;
    for (size_t i = 0; i < CNN_NTENSORS; i++) {
        model_tensor *t = &m->tensors[i];

        snprintf(m->names[i], MODEL_NAME_MAX, "%s", names[i]);
        if (i % 2 == 0)
            model_init_he(t->param, t->numel, fan_in[i], &rng);
        else
            memset(t->param, 0, t->numel * sizeof(float));
    }

    /* As for the MLP: worker processes share the cores. */
    openblas_set_num_threads(1);
    *out = m;
    return FLPS_OK;

fail:
    model_destroy(m);
    return rc;
}
