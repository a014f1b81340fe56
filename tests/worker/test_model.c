/* Tests for worker/model.c: gradients, determinism, the layer_done order,
 * learning on a synthetic set, evaluation and argument checks. */
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

/* Reference MLP in double precision, written independently of model.c:
 * weights out x in row-major, ReLU between layers, mean softmax
 * cross-entropy. p holds every tensor back to back in model order. */
static double ref_loss(const size_t *dims, size_t nlayers, const double *p,
                       const float *x, const uint8_t *y, size_t b)
{
    double total = 0.0;
    double a[64], z[64];

    for (size_t r = 0; r < b; r++) {
        const double *q = p;
        size_t n = dims[0];

        for (size_t j = 0; j < n; j++)
            a[j] = x[r * dims[0] + j];
        for (size_t l = 1; l <= nlayers; l++) {
            const double *w = q, *bias = q + dims[l] * dims[l - 1];

            for (size_t o = 0; o < dims[l]; o++) {
                double s = bias[o];

                for (size_t i = 0; i < dims[l - 1]; i++)
                    s += w[o * dims[l - 1] + i] * a[i];
                z[o] = (l < nlayers && s < 0.0) ? 0.0 : s;
            }
            q = bias + dims[l];
            n = dims[l];
            memcpy(a, z, n * sizeof(double));
        }
        {
            double mx = a[0], sum = 0.0;

            for (size_t j = 1; j < n; j++)
                mx = a[j] > mx ? a[j] : mx;
            for (size_t j = 0; j < n; j++)
                sum += exp(a[j] - mx);
            total += mx + log(sum) - a[y[r]];
        }
    }
    return total / (double)b;
}

Test(model, gradients_match_central_differences_of_a_double_reference)
{
    const size_t hidden[] = {6, 5};
    const size_t dims[] = {4, 6, 5, 3};
    const size_t b = 5;
    float x[5 * 4];
    uint8_t y[5];
    uint64_t s = 42;
    model *m = NULL;
    double *p;
    size_t np;
    float loss;

    cr_assert_eq(model_create_mlp(4, hidden, 2, 3, 8, 7, &m), FLPS_OK);
    /* Non-zero biases so their gradient paths are exercised too. */
    for (size_t t = 1; t < model_num_tensors(m); t += 2) {
        model_tensor *bt = model_tensor_at(m, t);
        for (size_t i = 0; i < bt->numel; i++)
            bt->param[i] = (float)(0.2 * test_uniform(&s) - 0.1);
    }
    for (size_t i = 0; i < b * 4; i++)
        x[i] = (float)(2.0 * test_uniform(&s) - 1.0);
    for (size_t i = 0; i < b; i++)
        y[i] = (uint8_t)(i % 3);

    np = model_num_params(m);
    p = calloc(np, sizeof(*p));
    cr_assert_not_null(p);
    {
        size_t off = 0;
        for (size_t t = 0; t < model_num_tensors(m); t++) {
            model_tensor *mt = model_tensor_at(m, t);
            for (size_t i = 0; i < mt->numel; i++)
                p[off++] = mt->param[i];
        }
        cr_assert_eq(off, np);
    }

    cr_assert_eq(model_train_step(m, x, y, b, &loss, NULL, NULL), FLPS_OK);
    cr_assert_float_eq(loss, ref_loss(dims, 3, p, x, y, b), 1e-5,
                       "the model's loss agrees with the reference");

    {
        const double eps = 1e-6;
        double worst = 0.0;
        size_t off = 0;

        for (size_t t = 0; t < model_num_tensors(m); t++) {
            model_tensor *mt = model_tensor_at(m, t);
            for (size_t i = 0; i < mt->numel; i++, off++) {
                double keep = p[off], up, down, fd, g, err;

                p[off] = keep + eps;
                up = ref_loss(dims, 3, p, x, y, b);
                p[off] = keep - eps;
                down = ref_loss(dims, 3, p, x, y, b);
                p[off] = keep;
                fd = (up - down) / (2 * eps);
                g = mt->grad[i];
                err = fabs(g - fd) / fmax(1e-3, fabs(g) + fabs(fd));
                cr_expect_lt(err, 1e-3, "%s[%zu]: analytic %g vs numeric %g",
                             mt->name, i, g, fd);
                worst = fmax(worst, err);
            }
        }
        cr_log_info("worst relative gradient error %g", worst);
        cr_assert_lt(worst, 1e-3);
    }
    free(p);
    model_destroy(m);
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

Test(model, the_same_seed_gives_bit_identical_parameters)
{
    const size_t hidden[] = {256, 128};
    model *a = NULL, *b = NULL, *c = NULL;

    cr_assert_eq(model_create_mlp(784, hidden, 2, 10, 32, 1234, &a), FLPS_OK);
    cr_assert_eq(model_create_mlp(784, hidden, 2, 10, 64, 1234, &b), FLPS_OK);
    cr_assert_eq(model_create_mlp(784, hidden, 2, 10, 32, 1235, &c), FLPS_OK);
    cr_assert(params_equal(a, b), "max_batch does not affect the init");
    cr_assert_not(params_equal(a, c), "another seed gives other weights");
    model_destroy(a);
    model_destroy(b);
    model_destroy(c);
}

Test(model, lays_out_the_784_256_128_10_mlp_in_layer_order)
{
    const size_t hidden[] = {256, 128};
    const char *names[] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                           "fc2.bias",   "fc3.weight", "fc3.bias"};
    const size_t numel[] = {256 * 784, 256, 128 * 256, 128, 10 * 128, 10};
    const size_t fan_in[] = {784, 784, 256, 256, 128, 128};
    model *m = NULL;
    float *prev_end = NULL;

    cr_assert_eq(model_create_mlp(784, hidden, 2, 10, 32, 1, &m), FLPS_OK);
    cr_assert_eq(model_num_tensors(m), 6);
    cr_assert_eq(model_num_params(m), 235146);
    cr_assert_null(model_tensor_at(m, 6));
    for (size_t t = 0; t < 6; t++) {
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
                               0.1 * 2.0 / (double)fan_in[t], "%s", names[t]);
    }
    model_destroy(m);
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

Test(model, reports_each_gradient_once_last_layer_first_when_final)
{
    const size_t hidden[] = {16, 8};
    dataset ds = {0};
    done_log log = {0};
    float loss;

    cr_assert_eq(dataset_synthetic(32, 12, 4, 3, &ds), FLPS_OK);
    cr_assert_eq(model_create_mlp(12, hidden, 2, 4, 32, 5, &log.m), FLPS_OK);
    cr_assert_eq(
        model_train_step(log.m, ds.x, ds.y, 32, &loss, record_done, &log),
        FLPS_OK);
    cr_assert_eq(log.calls, 6);
    {
        const size_t want[] = {5, 4, 3, 2, 1, 0};
        for (size_t i = 0; i < 6; i++)
            cr_assert_eq(log.order[i], want[i], "call %zu reported %zu", i,
                         log.order[i]);
    }
    for (size_t t = 0; t < 6; t++) {
        model_tensor *mt = model_tensor_at(log.m, t);
        cr_assert(memcmp(log.snap[t], mt->grad, mt->numel * sizeof(float)) == 0,
                  "%s did not change after it was reported", mt->name);
        free(log.snap[t]);
    }
    model_destroy(log.m);
    dataset_fini(&ds);
}

Test(model, overwrites_gradients_and_leaves_parameters_alone)
{
    const size_t hidden[] = {16};
    dataset ds = {0};
    model *m = NULL, *ref = NULL;
    float l1, l2, *g1;
    size_t np;

    cr_assert_eq(dataset_synthetic(20, 6, 3, 9, &ds), FLPS_OK);
    cr_assert_eq(model_create_mlp(6, hidden, 1, 3, 20, 5, &m), FLPS_OK);
    cr_assert_eq(model_create_mlp(6, hidden, 1, 3, 20, 5, &ref), FLPS_OK);
    np = model_num_params(m);
    g1 = malloc(np * sizeof(float));
    cr_assert_not_null(g1);
    cr_assert_eq(model_train_step(m, ds.x, ds.y, 20, &l1, NULL, NULL), FLPS_OK);
    memcpy(g1, model_tensor_at(m, 0)->grad, np * sizeof(float));
    cr_assert_eq(model_train_step(m, ds.x, ds.y, 20, &l2, NULL, NULL), FLPS_OK);
    cr_assert_eq(l1, l2);
    cr_assert(memcmp(g1, model_tensor_at(m, 0)->grad, np * sizeof(float)) == 0,
              "a second step on the same batch gives the same gradients");
    cr_assert(params_equal(m, ref), "the caller applies updates, not us");
    free(g1);
    model_destroy(m);
    model_destroy(ref);
    dataset_fini(&ds);
}

Test(model, lowers_the_loss_and_learns_a_synthetic_set_with_plain_sgd)
{
    const size_t hidden[] = {32};
    const size_t n = 2000, b = 32, steps = 400;
    dataset ds = {0};
    model *m = NULL;
    double first = 0.0, last = 0.0;
    size_t correct = 0;
    double loss_sum;

    cr_assert_eq(dataset_synthetic(n, 20, 5, 11, &ds), FLPS_OK);
    cr_assert_eq(model_create_mlp(20, hidden, 1, 5, b, 17, &m), FLPS_OK);
    for (size_t s = 0; s < steps; s++) {
        size_t start = (s * b) % (n - b);
        float loss;

        cr_assert_eq(model_train_step(m, ds.x + start * 20, ds.y + start, b,
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

Test(model, evaluates_a_hand_built_case_in_chunks)
{
    /* No hidden layer: logits = W x + b with W = I, b = (0, 0.5). */
    const float x[] = {2, 0, 0, 3, 1, 0, 0, 0};
    const uint8_t y[] = {0, 1, 1, 1};
    model *m = NULL;
    size_t correct = 99;
    double loss_sum = -1.0, want;

    cr_assert_eq(model_create_mlp(2, NULL, 0, 2, 3, 1, &m), FLPS_OK);
    cr_assert_eq(model_num_tensors(m), 2);
    {
        float *w = model_tensor_at(m, 0)->param;
        float *bias = model_tensor_at(m, 1)->param;
        w[0] = 1, w[1] = 0, w[2] = 0, w[3] = 1;
        bias[0] = 0, bias[1] = 0.5f;
    }
    /* Logits (2, .5) right, (0, 3.5) right, (1, .5) wrong, (0, .5) right. */
    want = log1p(exp(-1.5)) + log1p(exp(-3.5)) + log1p(exp(0.5)) +
           log1p(exp(-0.5));
    cr_assert_eq(model_evaluate(m, x, y, 4, &correct, &loss_sum), FLPS_OK);
    cr_assert_eq(correct, 3);
    cr_assert_float_eq(loss_sum, want, 1e-5);
    cr_assert_eq(model_evaluate(m, x + 4, y + 2, 1, &correct, &loss_sum),
                 FLPS_OK);
    cr_assert_eq(correct, 0, "results are overwritten, not accumulated");
    cr_assert_float_eq(loss_sum, log1p(exp(0.5)), 1e-5);
    model_destroy(m);
}

Test(model, rejects_bad_arguments_without_touching_outputs)
{
    const size_t hidden[] = {4}, zero[] = {0};
    float x[3 * 5] = {0};
    uint8_t y[5] = {0}, bad_y[2] = {0, 3};
    model *m = NULL, *sentinel = (model *)&x;
    float loss = 7.0f;
    size_t correct = 7;
    double loss_sum = 7.0;

    cr_assert_eq(model_create_mlp(3, hidden, 1, 3, 4, 1, &m), FLPS_OK);
    cr_assert_eq(model_train_step(m, x, y, 5, &loss, NULL, NULL), FLPS_EINVAL,
                 "b > max_batch");
    cr_assert_eq(model_train_step(m, x, y, 0, &loss, NULL, NULL), FLPS_EINVAL);
    cr_assert_eq(model_train_step(NULL, x, y, 1, &loss, NULL, NULL),
                 FLPS_EINVAL);
    cr_assert_eq(model_train_step(m, NULL, y, 1, &loss, NULL, NULL),
                 FLPS_EINVAL);
    cr_assert_eq(model_train_step(m, x, NULL, 1, &loss, NULL, NULL),
                 FLPS_EINVAL);
    cr_assert_eq(model_train_step(m, x, y, 1, NULL, NULL, NULL), FLPS_EINVAL);
    cr_assert_eq(model_train_step(m, x, bad_y, 2, &loss, NULL, NULL),
                 FLPS_EINVAL, "a label outside the classes");
    cr_assert_eq(loss, 7.0f);

    cr_assert_eq(model_evaluate(m, x, y, 0, &correct, &loss_sum), FLPS_EINVAL);
    cr_assert_eq(model_evaluate(NULL, x, y, 1, &correct, &loss_sum),
                 FLPS_EINVAL);
    cr_assert_eq(model_evaluate(m, x, y, 1, NULL, &loss_sum), FLPS_EINVAL);
    cr_assert_eq(model_evaluate(m, x, y, 1, &correct, NULL), FLPS_EINVAL);
    cr_assert_eq(model_evaluate(m, x, bad_y, 2, &correct, &loss_sum),
                 FLPS_EINVAL);
    cr_assert_eq(correct, 7);
    cr_assert_eq(loss_sum, 7.0);
    model_destroy(m);

    m = sentinel;
    cr_assert_eq(model_create_mlp(0, hidden, 1, 3, 4, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_mlp(3, NULL, 1, 3, 4, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_mlp(3, zero, 1, 3, 4, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_mlp(3, hidden, 1, 1, 4, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_mlp(3, hidden, 1, 3, 0, 1, &m), FLPS_EINVAL);
    cr_assert_eq(model_create_mlp(3, hidden, 1, 3, 4, 1, NULL), FLPS_EINVAL);
    cr_assert_eq(model_create_mlp((size_t)1 << 40, hidden, 1, 3, 4, 1, &m),
                 FLPS_EINVAL, "sizes that do not fit BLAS ints");
    cr_assert_eq(m, sentinel, "*out is written only on success");
    model_destroy(NULL);
    cr_assert_eq(model_num_tensors(NULL), 0);
}

Test(model, fails_cleanly_when_any_allocation_fails)
{
    const size_t hidden[] = {8, 4};
    size_t failed = 0;

    for (unsigned long k = 1; k < 64; k++) {
        model *m = NULL;
        flps_err rc;

        flps_alloc_fail_at(k);
        rc = model_create_mlp(5, hidden, 2, 3, 4, 1, &m);
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
    cr_assert_gt(failed, 5, "every allocation was tried");
}

/* The forward's requests for parameters (model_train_step_ex): each
 * tensor once, first layer first, before backprop; an update written into
 * a tensor when asked for is what the forward reads. */
typedef struct {
    model *m;
    size_t asked, order[16];
    int done_seen, asked_after_done;
} need_log;

static void nudge(model_tensor *mt, size_t t)
{
    for (size_t i = 0; i < mt->numel; i++)
        mt->param[i] += 0.01f * (float)((i + t) % 5) - 0.02f;
}

static void on_need(void *arg, size_t t)
{
    need_log *log = arg;

    cr_assert_lt(log->asked, 16);
    log->order[log->asked++] = t;
    log->asked_after_done |= log->done_seen;
    nudge(model_tensor_at(log->m, t), t);
}

static void on_done_seen(void *arg, size_t t)
{
    (void)t;
    ((need_log *)arg)->done_seen = 1;
}

Test(model, the_mlp_asks_for_each_tensor_before_the_forward_reads_it)
{
    const size_t hidden[2] = {16, 8};
    dataset ds = {0};
    need_log log = {0};
    model *ref = NULL;
    float loss, ref_loss;

    cr_assert_eq(dataset_synthetic(32, 20, 4, 9, &ds), FLPS_OK);
    cr_assert_eq(model_create_mlp(20, hidden, 2, 4, 32, 3, &log.m), FLPS_OK);
    cr_assert_eq(model_create_mlp(20, hidden, 2, 4, 32, 3, &ref), FLPS_OK);
    for (size_t t = 0; t < model_num_tensors(ref); t++)
        nudge(model_tensor_at(ref, t), t);
    cr_assert_eq(model_train_step(ref, ds.x, ds.y, 32, &ref_loss, NULL, NULL),
                 FLPS_OK);
    cr_assert_eq(model_train_step_ex(log.m, ds.x, ds.y, 32, &loss, on_need,
                                     &log, on_done_seen, &log),
                 FLPS_OK);
    cr_assert_eq(log.asked, 6);
    for (size_t i = 0; i < 6; i++)
        cr_assert_eq(log.order[i], i, "request %zu was for %zu", i,
                     log.order[i]);
    cr_assert_not(log.asked_after_done);
    cr_assert_eq(loss, ref_loss);
    for (size_t t = 0; t < 6; t++) {
        model_tensor *a = model_tensor_at(log.m, t),
                     *b = model_tensor_at(ref, t);
        cr_assert(memcmp(a->grad, b->grad, a->numel * sizeof(float)) == 0,
                  "%s: the gradient of the updated model, bit for bit",
                  a->name);
    }
    model_destroy(ref);
    model_destroy(log.m);
    dataset_fini(&ds);
}
