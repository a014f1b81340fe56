/* Tests for worker/model_cnn.c: gradients against a double-precision
 * reference, the Fashion-MNIST layout, determinism, the layer_done order,
 * learning, evaluation and argument checks. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "worker/dataset.h"
#include "worker/model.h"

/* A small deterministic generator for test inputs (splitmix64). */
static uint64_t test_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double test_uniform(uint64_t *s)
{
    return (double)(test_rng(s) >> 11) * 0x1.0p-53;
}

/* Reference convolution, written independently of model_cnn.c from the
 * layout model.h documents: in is h x w x cin (HWC), weight f x k x k x cin
 * ([f][kh][kw][c]), zero padding k / 2, stride 1; then + bias, ReLU and
 * 2 x 2 max pooling into out (h/2 x w/2 x f). */
static void ref_conv_block(const double *in, size_t h, size_t w, size_t cin,
                           const double *wt, const double *bias, size_t f,
                           size_t k, double *tmp, double *out)
{
    long p = (long)k / 2;

    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++)
            for (size_t o = 0; o < f; o++) {
                double s = bias[o];

                for (size_t kh = 0; kh < k; kh++)
                    for (size_t kw = 0; kw < k; kw++) {
                        long iy = (long)y + (long)kh - p;
                        long ix = (long)x + (long)kw - p;

                        if (iy < 0 || ix < 0 || iy >= (long)h || ix >= (long)w)
                            continue;
                        for (size_t c = 0; c < cin; c++)
                            s += wt[((o * k + kh) * k + kw) * cin + c] *
                                 in[((size_t)iy * w + (size_t)ix) * cin + c];
                    }
                tmp[(y * w + x) * f + o] = s > 0.0 ? s : 0.0;
            }
    for (size_t y = 0; y < h / 2; y++)
        for (size_t x = 0; x < w / 2; x++)
            for (size_t o = 0; o < f; o++) {
                double m = -INFINITY;

                for (size_t dy = 0; dy < 2; dy++)
                    for (size_t dx = 0; dx < 2; dx++)
                        m = fmax(m,
                                 tmp[((2 * y + dy) * w + 2 * x + dx) * f + o]);
                out[(y * (w / 2) + x) * f + o] = m;
            }
}

static void ref_fc(const double *in, size_t nin, const double *wt,
                   const double *bias, size_t nout, int relu, double *out)
{
    for (size_t o = 0; o < nout; o++) {
        double s = bias[o];

        for (size_t i = 0; i < nin; i++)
            s += wt[o * nin + i] * in[i];
        out[o] = relu && s < 0.0 ? 0.0 : s;
    }
}

/* Mean softmax cross-entropy of the CNN of shape s with the parameters p
 * (every tensor back to back in model order) on b rows of x. */
static double ref_loss(const model_cnn_shape *s, const double *p,
                       const float *x, const uint8_t *y, size_t b)
{
    size_t H = s->height, W = s->width, C = s->channels, K = s->kernel;
    size_t flat = (H / 4) * (W / 4) * s->conv2;
    const double *w1 = p, *b1 = w1 + s->conv1 * K * K * C;
    const double *w2 = b1 + s->conv1, *b2 = w2 + s->conv2 * K * K * s->conv1;
    const double *f1 = b2 + s->conv2, *fb1 = f1 + s->fc * flat;
    const double *f2 = fb1 + s->fc, *fb2 = f2 + s->classes * s->fc;
    double *in = malloc(H * W * C * sizeof(double));
    double *tmp = malloc(H * W * s->conv1 * sizeof(double));
    double *a1 = malloc(H * W * s->conv1 / 4 * sizeof(double));
    double *a2 = malloc(flat * sizeof(double));
    double *hid = malloc(s->fc * sizeof(double));
    double *z = malloc(s->classes * sizeof(double));
    double total = 0.0;

    cr_assert(in && tmp && a1 && a2 && hid && z);
    for (size_t r = 0; r < b; r++) {
        double mx, sum = 0.0;

        for (size_t i = 0; i < H * W * C; i++)
            in[i] = x[r * H * W * C + i];
        ref_conv_block(in, H, W, C, w1, b1, s->conv1, K, tmp, a1);
        ref_conv_block(a1, H / 2, W / 2, s->conv1, w2, b2, s->conv2, K, tmp,
                       a2);
        ref_fc(a2, flat, f1, fb1, s->fc, 1, hid);
        ref_fc(hid, s->fc, f2, fb2, s->classes, 0, z);
        mx = z[0];
        for (size_t j = 1; j < s->classes; j++)
            mx = fmax(mx, z[j]);
        for (size_t j = 0; j < s->classes; j++)
            sum += exp(z[j] - mx);
        total += mx + log(sum) - z[y[r]];
    }
    free(in);
    free(tmp);
    free(a1);
    free(a2);
    free(hid);
    free(z);
    return total / (double)b;
}

/* The model's parameters as doubles, back to back (caller frees). */
static double *params_as_double(model *m)
{
    double *p = calloc(model_num_params(m), sizeof(*p));
    size_t off = 0;

    cr_assert_not_null(p);
    for (size_t t = 0; t < model_num_tensors(m); t++) {
        model_tensor *mt = model_tensor_at(m, t);
        for (size_t i = 0; i < mt->numel; i++)
            p[off++] = mt->param[i];
    }
    cr_assert_eq(off, model_num_params(m));
    return p;
}

/* Weights redrawn uniform up to their He bound (their largest initial
 * magnitude) and biases in +-0.1, so that the bias paths are exercised
 * and about half of every ReLU passes. */
static void randomise(model *m, uint64_t *s)
{
    for (size_t t = 0; t < model_num_tensors(m); t++) {
        model_tensor *mt = model_tensor_at(m, t);
        double scale = 0.1;

        if (t % 2 == 0) {
            scale = 0.0;
            for (size_t i = 0; i < mt->numel; i++)
                scale = fmax(scale, fabs(mt->param[i]));
        }
        for (size_t i = 0; i < mt->numel; i++)
            mt->param[i] = (float)(scale * (2.0 * test_uniform(s) - 1.0));
    }
}

/* Central differences of the reference at p for each chosen element
 * against the model's gradients. stride 1 checks every element; a larger
 * one checks that many evenly spread ones per tensor. Returns the worst
 * relative error. */
static double check_grads(model *m, const model_cnn_shape *shape, double *p,
                          const float *x, const uint8_t *y, size_t b,
                          size_t per_tensor)
{
    const double eps = 1e-6;
    double worst = 0.0;
    size_t base = 0;

    for (size_t t = 0; t < model_num_tensors(m); t++) {
        model_tensor *mt = model_tensor_at(m, t);
        size_t step = per_tensor == 0 || per_tensor >= mt->numel
                          ? 1
                          : mt->numel / per_tensor;

        for (size_t i = step / 2; i < mt->numel; i += step) {
            size_t off = base + i;
            double keep = p[off], up, down, fd, g, err;

            p[off] = keep + eps;
            up = ref_loss(shape, p, x, y, b);
            p[off] = keep - eps;
            down = ref_loss(shape, p, x, y, b);
            p[off] = keep;
            fd = (up - down) / (2 * eps);
            g = mt->grad[i];
            err = fabs(g - fd) / fmax(1e-3, fabs(g) + fabs(fd));
            cr_expect_lt(err, 1e-3, "%s[%zu]: analytic %g vs numeric %g",
                         mt->name, i, g, fd);
            worst = fmax(worst, err);
        }
        base += mt->numel;
    }
    return worst;
}

Test(cnn, gradients_match_central_differences_of_a_double_reference)
{
    /* The second shape's 5 x 5 kernels overhang a 2 x 2 image on every
     * side: both ends of a patch row are padding. */
    const model_cnn_shape shapes[] = {{8, 8, 2, 3, 3, 4, 5, 3},
                                      {4, 8, 1, 5, 2, 3, 4, 2}};

    for (size_t k = 0; k < 2; k++) {
        const model_cnn_shape *sh = &shapes[k];
        size_t in_dim = sh->height * sh->width * sh->channels, b = 3;
        float *x = malloc(b * in_dim * sizeof(float));
        uint8_t y[3];
        uint64_t s = 42 + k;
        model *m = NULL;
        double *p, worst;
        float loss;

        cr_assert_not_null(x);
        cr_assert_eq(model_create_cnn(sh, 4, 7, &m), FLPS_OK);
        randomise(m, &s);
        for (size_t i = 0; i < b * in_dim; i++)
            x[i] = (float)(2.0 * test_uniform(&s) - 1.0);
        for (size_t i = 0; i < b; i++)
            y[i] = (uint8_t)(i % sh->classes);
        p = params_as_double(m);
        cr_assert_eq(model_train_step(m, x, y, b, &loss, NULL, NULL), FLPS_OK);
        cr_assert_float_eq(loss, ref_loss(sh, p, x, y, b), 1e-5,
                           "the model's loss agrees with the reference");
        worst = check_grads(m, sh, p, x, y, b, 0);
        cr_log_info("shape %zu: worst relative gradient error %g", k, worst);
        cr_assert_lt(worst, 1e-3);
        free(p);
        free(x);
        model_destroy(m);
    }
}

Test(cnn, the_fashion_mnist_cnn_has_the_gradients_of_the_reference,
     .timeout = 120)
{
    const model_cnn_shape sh = model_cnn_shape_fmnist();
    dataset ds = {0};
    model *m = NULL;
    double *p, worst;
    float loss;

    cr_assert_eq(dataset_synthetic(2, 784, 10, 5, &ds), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 2, 3, &m), FLPS_OK);
    {
        /* Non-zero biases, as above; the He weights stay. */
        uint64_t s = 9;
        for (size_t t = 1; t < model_num_tensors(m); t += 2) {
            model_tensor *bt = model_tensor_at(m, t);
            for (size_t i = 0; i < bt->numel; i++)
                bt->param[i] = (float)(0.2 * test_uniform(&s) - 0.1);
        }
    }
    p = params_as_double(m);
    cr_assert_eq(model_train_step(m, ds.x, ds.y, 2, &loss, NULL, NULL),
                 FLPS_OK);
    cr_assert_float_eq(loss, ref_loss(&sh, p, ds.x, ds.y, 2), 1e-4);
    worst = check_grads(m, &sh, p, ds.x, ds.y, 2, 3);
    cr_log_info("worst relative gradient error %g", worst);
    cr_assert_lt(worst, 1e-3);
    free(p);
    model_destroy(m);
    dataset_fini(&ds);
}

static int params_equal(model *a, model *b)
{
    for (size_t t = 0; t < model_num_tensors(a); t++) {
        model_tensor *ta = model_tensor_at(a, t), *tb = model_tensor_at(b, t);
        if (memcmp(ta->param, tb->param, ta->numel * sizeof(float)) != 0)
            return 0;
    }
    return 1;
}

Test(cnn, lays_out_the_fashion_mnist_cnn_in_layer_order)
{
    const model_cnn_shape sh = model_cnn_shape_fmnist();
    const char *names[] = {"conv1.weight", "conv1.bias", "conv2.weight",
                           "conv2.bias",   "fc1.weight", "fc1.bias",
                           "fc2.weight",   "fc2.bias"};
    const size_t numel[] = {32 * 25,           32,   64 * 25 * 32, 64,
                            1024 * 7 * 7 * 64, 1024, 10 * 1024,    10};
    const size_t fan_in[] = {25, 25, 800, 800, 3136, 3136, 1024, 1024};
    model *m = NULL;
    float *prev_end = NULL;

    cr_assert_eq(model_create_cnn(&sh, 32, 1, &m), FLPS_OK);
    cr_assert_eq(model_num_tensors(m), 8);
    cr_assert_eq(model_num_params(m), 3274634);
    cr_assert_eq(model_input_dim(m), 784);
    cr_assert_null(model_tensor_at(m, 8));
    for (size_t t = 0; t < 8; t++) {
        model_tensor *mt = model_tensor_at(m, t);
        double bound = sqrt(6.0 / (double)fan_in[t]), sum2 = 0.0;

        cr_assert_str_eq(mt->name, names[t]);
        cr_assert_eq(mt->numel, numel[t], "%s", names[t]);
        if (prev_end != NULL)
            cr_assert_eq(mt->param, prev_end, "tensors are contiguous");
        prev_end = mt->param + mt->numel;
        for (size_t i = 0; i < mt->numel; i++) {
            if (t % 2 == 1)
                cr_assert_eq(mt->param[i], 0.0f, "biases start at 0");
            else
                cr_assert_leq(fabs(mt->param[i]), bound);
            sum2 += (double)mt->param[i] * mt->param[i];
        }
        if (t % 2 == 0) /* U(-a, a) has variance a^2 / 3 = 2 / fan_in */
            cr_assert_float_eq(sum2 / (double)mt->numel,
                               2.0 / (double)fan_in[t],
                               0.15 * 2.0 / (double)fan_in[t], "%s", names[t]);
    }
    model_destroy(m);
}

Test(cnn, the_same_seed_gives_bit_identical_parameters)
{
    const model_cnn_shape sh = model_cnn_shape_fmnist();
    model *a = NULL, *b = NULL, *c = NULL;

    cr_assert_eq(model_create_cnn(&sh, 32, 1234, &a), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 8, 1234, &b), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 32, 1235, &c), FLPS_OK);
    cr_assert(params_equal(a, b), "max_batch does not affect the init");
    cr_assert_not(params_equal(a, c), "another seed gives other weights");
    model_destroy(a);
    model_destroy(b);
    model_destroy(c);
}

typedef struct {
    model *m;
    size_t calls;
    size_t order[16];
    float *snap[16]; /* each tensor's grad as it was when reported */
} done_log;

static void record_done(void *arg, size_t t)
{
    done_log *log = arg;
    model_tensor *mt = model_tensor_at(log->m, t);

    cr_assert_lt(log->calls, 16);
    log->order[log->calls++] = t;
    log->snap[t] = malloc(mt->numel * sizeof(float));
    cr_assert_not_null(log->snap[t]);
    memcpy(log->snap[t], mt->grad, mt->numel * sizeof(float));
}

Test(cnn, reports_each_gradient_once_last_layer_first_when_final)
{
    const model_cnn_shape sh = {8, 8, 1, 5, 4, 6, 16, 4};
    dataset ds = {0};
    done_log log = {0};
    float loss;

    cr_assert_eq(dataset_synthetic(16, 64, 4, 3, &ds), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 16, 5, &log.m), FLPS_OK);
    cr_assert_eq(
        model_train_step(log.m, ds.x, ds.y, 16, &loss, record_done, &log),
        FLPS_OK);
    cr_assert_eq(log.calls, 8);
    for (size_t i = 0; i < 8; i++)
        cr_assert_eq(log.order[i], 7 - i, "call %zu reported %zu", i,
                     log.order[i]);
    for (size_t t = 0; t < 8; t++) {
        model_tensor *mt = model_tensor_at(log.m, t);
        cr_assert(memcmp(log.snap[t], mt->grad, mt->numel * sizeof(float)) == 0,
                  "%s did not change after it was reported", mt->name);
        free(log.snap[t]);
    }
    model_destroy(log.m);
    dataset_fini(&ds);
}

Test(cnn, overwrites_gradients_and_leaves_parameters_alone)
{
    const model_cnn_shape sh = {8, 8, 1, 3, 4, 6, 16, 3};
    dataset ds = {0}, other = {0};
    model *m = NULL, *ref = NULL;
    float l1, l2, *g1;
    size_t np;

    cr_assert_eq(dataset_synthetic(20, 64, 3, 9, &ds), FLPS_OK);
    cr_assert_eq(dataset_synthetic(20, 64, 3, 10, &other), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 20, 5, &m), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 20, 5, &ref), FLPS_OK);
    np = model_num_params(m);
    g1 = malloc(np * sizeof(float));
    cr_assert_not_null(g1);
    cr_assert_eq(model_train_step(m, ds.x, ds.y, 20, &l1, NULL, NULL), FLPS_OK);
    memcpy(g1, model_tensor_at(m, 0)->grad, np * sizeof(float));
    /* A step on other data between the two: nothing carries over. */
    cr_assert_eq(model_train_step(m, other.x, other.y, 7, &l2, NULL, NULL),
                 FLPS_OK);
    cr_assert_eq(model_train_step(m, ds.x, ds.y, 20, &l2, NULL, NULL), FLPS_OK);
    cr_assert_eq(l1, l2);
    cr_assert(memcmp(g1, model_tensor_at(m, 0)->grad, np * sizeof(float)) == 0,
              "a second step on the same batch gives the same gradients");
    cr_assert(params_equal(m, ref), "the caller applies updates, not us");
    free(g1);
    model_destroy(m);
    model_destroy(ref);
    dataset_fini(&ds);
    dataset_fini(&other);
}

Test(cnn, lowers_the_loss_and_learns_a_synthetic_set_with_plain_sgd)
{
    const model_cnn_shape sh = {8, 8, 1, 3, 8, 8, 32, 5};
    const size_t n = 2000, b = 32, steps = 300;
    dataset ds = {0};
    model *m = NULL;
    double first = 0.0, last = 0.0;
    size_t correct = 0;
    double loss_sum;

    cr_assert_eq(dataset_synthetic(n, 64, 5, 11, &ds), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, b, 17, &m), FLPS_OK);
    for (size_t s = 0; s < steps; s++) {
        size_t start = (s * b) % (n - b);
        float loss;

        cr_assert_eq(model_train_step(m, ds.x + start * 64, ds.y + start, b,
                                      &loss, NULL, NULL),
                     FLPS_OK);
        cr_assert(isfinite(loss));
        if (s < 10)
            first += loss / 10.0;
        if (s >= steps - 10)
            last += loss / 10.0;
        for (size_t t = 0; t < model_num_tensors(m); t++) {
            model_tensor *mt = model_tensor_at(m, t);
            for (size_t i = 0; i < mt->numel; i++)
                mt->param[i] -= 0.05f * mt->grad[i];
        }
    }
    cr_assert_lt(last, 0.5 * first, "loss fell from %g to %g", first, last);
    cr_assert_eq(model_evaluate(m, ds.x, ds.y, n, &correct, &loss_sum),
                 FLPS_OK);
    cr_assert_gt((double)correct / (double)n, 0.9, "accuracy %zu / %zu",
                 correct, n);
    cr_assert_lt(loss_sum / (double)n, last + 0.2);
    model_destroy(m);
    dataset_fini(&ds);
}

Test(cnn, evaluates_in_chunks_as_row_by_row)
{
    const model_cnn_shape sh = {8, 8, 1, 3, 4, 6, 16, 4};
    dataset ds = {0};
    model *m = NULL;
    size_t correct = 0, sum_correct = 0;
    double loss_sum = 0, sum_loss = 0;
    float loss;

    cr_assert_eq(dataset_synthetic(10, 64, 4, 21, &ds), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 4, 5, &m), FLPS_OK);
    for (size_t i = 0; i < 10; i++) {
        cr_assert_eq(
            model_evaluate(m, ds.x + i * 64, ds.y + i, 1, &correct, &loss_sum),
            FLPS_OK);
        sum_correct += correct;
        sum_loss += loss_sum;
    }
    cr_assert_eq(model_evaluate(m, ds.x, ds.y, 10, &correct, &loss_sum),
                 FLPS_OK, "10 rows in chunks of max_batch 4");
    cr_assert_eq(correct, sum_correct);
    cr_assert_float_eq(loss_sum, sum_loss, 1e-4);
    cr_assert_eq(model_train_step(m, ds.x, ds.y, 4, &loss, NULL, NULL),
                 FLPS_OK);
    cr_assert_eq(model_evaluate(m, ds.x, ds.y, 4, &correct, &loss_sum),
                 FLPS_OK);
    cr_assert_float_eq(loss_sum / 4, loss, 1e-5,
                       "evaluation and training see the same loss");
    model_destroy(m);
    dataset_fini(&ds);
}

Test(cnn, rejects_bad_shapes_and_arguments_without_touching_outputs)
{
    const model_cnn_shape good = {8, 8, 1, 3, 2, 2, 4, 3};
    model_cnn_shape bad[12];
    float x[5 * 64] = {0};
    uint8_t y[5] = {0}, bad_y[2] = {0, 3};
    model *m = NULL, *sentinel = (model *)&x;
    float loss = 7.0f;
    size_t nbad = 0;

    for (size_t i = 0; i < 12; i++)
        bad[i] = good;
    bad[nbad++].height = 6; /* not a multiple of 4 */
    bad[nbad++].width = 10; /* not a multiple of 4 */
    bad[nbad++].height = 0;
    bad[nbad++].channels = 0;
    bad[nbad++].kernel = 4; /* even */
    bad[nbad++].kernel = 0;
    bad[nbad++].conv1 = 0;
    bad[nbad++].conv2 = 0;
    bad[nbad++].fc = 0;
    bad[nbad++].classes = 1;
    bad[nbad++].classes = 257;
    bad[nbad++].fc = (size_t)1 << 40; /* beyond BLAS ints */
    m = sentinel;
    for (size_t i = 0; i < nbad; i++)
        cr_assert_eq(model_create_cnn(&bad[i], 4, 1, &m), FLPS_EINVAL,
                     "bad shape %zu", i);
    cr_assert_eq(model_create_cnn(NULL, 4, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_cnn(&good, 0, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_cnn(&good, (size_t)1 << 40, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_cnn(&good, 4, 1, NULL), FLPS_EINVAL);
    cr_assert_eq(m, sentinel, "*out is written only on success");

    m = NULL;
    cr_assert_eq(model_create_cnn(&good, 4, 1, &m), FLPS_OK);
    cr_assert_eq(model_train_step(m, x, y, 5, &loss, NULL, NULL), FLPS_EINVAL,
                 "b > max_batch");
    cr_assert_eq(model_train_step(m, x, bad_y, 2, &loss, NULL, NULL),
                 FLPS_EINVAL, "a label outside the classes");
    cr_assert_eq(loss, 7.0f);
    model_destroy(m);
}

Test(cnn, refuses_a_non_finite_loss_without_writing_gradients)
{
    const model_cnn_shape sh = {4, 4, 1, 3, 2, 2, 4, 2};
    float x[16] = {0};
    uint8_t y[1] = {1};
    model *m = NULL;
    float loss = 7.0f;

    cr_assert_eq(model_create_cnn(&sh, 1, 1, &m), FLPS_OK);
    model_tensor_at(m, 7)->param[0] = INFINITY;
    cr_assert_eq(model_train_step(m, x, y, 1, &loss, NULL, NULL),
                 FLPS_ENONFINITE);
    cr_assert_eq(loss, 7.0f);
    for (size_t i = 0; i < model_num_params(m); i++)
        cr_assert_eq(model_tensor_at(m, 0)->grad[i], 0.0f);
    model_destroy(m);
}

Test(cnn, fails_cleanly_when_any_allocation_fails)
{
    const model_cnn_shape sh = {8, 8, 1, 3, 2, 2, 4, 3};
    size_t failed = 0;

    for (unsigned long k = 1; k < 64; k++) {
        model *m = NULL;
        flps_err rc;

        flps_alloc_fail_at(k);
        rc = model_create_cnn(&sh, 4, 1, &m);
        flps_alloc_fail_at(0);
        if (rc == FLPS_OK) {
            cr_assert_not_null(m);
            model_destroy(m);
            break;
        }
        cr_assert_eq(rc, FLPS_ENOMEM, "allocation %lu", k);
        cr_assert_null(m);
        failed++;
    }
    cr_assert_gt(failed, 15, "every allocation was tried");
}

/* The forward's requests for parameters: each tensor once, first layer
 * first, all before backprop reports a gradient; and an update written
 * into a tensor when it is asked for is read by the forward, as if it had
 * been there before the step. */
typedef struct {
    model *m;
    size_t asked, order[16];
    int done_seen, asked_after_done;
} need_log;

static void on_need(void *arg, size_t t)
{
    need_log *log = arg;
    model_tensor *mt = model_tensor_at(log->m, t);

    cr_assert_lt(log->asked, 16);
    log->order[log->asked++] = t;
    log->asked_after_done |= log->done_seen;
    for (size_t i = 0; i < mt->numel; i++)
        mt->param[i] += 0.01f * (float)((i + t) % 7) - 0.03f;
}

static void on_done_seen(void *arg, size_t t)
{
    (void)t;
    ((need_log *)arg)->done_seen = 1;
}

Test(cnn, asks_for_each_tensor_before_the_forward_reads_it)
{
    const model_cnn_shape sh = {8, 8, 1, 5, 4, 6, 16, 4};
    dataset ds = {0};
    need_log log = {0};
    model *ref = NULL;
    float loss, ref_loss_v;

    cr_assert_eq(dataset_synthetic(16, 64, 4, 3, &ds), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 16, 5, &log.m), FLPS_OK);
    cr_assert_eq(model_create_cnn(&sh, 16, 5, &ref), FLPS_OK);
    /* ref: the same updates, written before the step. */
    for (size_t t = 0; t < model_num_tensors(ref); t++) {
        model_tensor *mt = model_tensor_at(ref, t);
        for (size_t i = 0; i < mt->numel; i++)
            mt->param[i] += 0.01f * (float)((i + t) % 7) - 0.03f;
    }
    cr_assert_eq(model_train_step(ref, ds.x, ds.y, 16, &ref_loss_v, NULL, NULL),
                 FLPS_OK);
    cr_assert_eq(model_train_step_ex(log.m, ds.x, ds.y, 16, &loss, on_need,
                                     &log, on_done_seen, &log),
                 FLPS_OK);
    cr_assert_eq(log.asked, 8, "each tensor asked for once");
    for (size_t i = 0; i < 8; i++)
        cr_assert_eq(log.order[i], i, "request %zu was for %zu", i,
                     log.order[i]);
    cr_assert_not(log.asked_after_done, "every request before backprop");
    cr_assert_eq(loss, ref_loss_v, "the forward read the updated values");
    for (size_t t = 0; t < 8; t++) {
        model_tensor *a = model_tensor_at(log.m, t),
                     *b = model_tensor_at(ref, t);
        cr_assert(memcmp(a->grad, b->grad, a->numel * sizeof(float)) == 0,
                  "%s: the gradient of the updated model, bit for bit",
                  a->name);
    }
    /* Outside the step nothing is asked for. */
    log.asked = 0;
    cr_assert_eq(model_train_step(log.m, ds.x, ds.y, 16, &loss, NULL, NULL),
                 FLPS_OK);
    cr_assert_eq(log.asked, 0);
    model_destroy(ref);
    model_destroy(log.m);
    dataset_fini(&ds);
}
