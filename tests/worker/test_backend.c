/* Tests for worker/backend.c and worker/backend_cpu.c: the registry of
 * compiled-in backends, the messages for a backend that is unknown or not
 * built, and the CPU backend's models against the OpenBLAS constructors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend.h"
#include "worker/dataset.h"
#include "worker/model.h"

Test(backend, the_registry_lists_cpu_first_and_every_backend_whole)
{
    size_t n = worker_backend_count();
    char list[256], want[256] = "";

    cr_assert_geq(n, 1);
    cr_assert_str_eq(worker_backend_at(0)->name, "cpu");
    cr_assert_null(worker_backend_at(n), "past the end is NULL");
    for (size_t i = 0; i < n; i++) {
        const worker_backend *b = worker_backend_at(i);

        cr_assert_not_null(b);
        cr_assert_gt(strlen(b->name), 0);
        cr_assert_gt(strlen(b->description), 0);
        cr_assert_null(strchr(b->description, '\n'), "one line");
        cr_assert_not_null(b->available);
        cr_assert_not_null(b->create_mlp);
        cr_assert_not_null(b->create_cnn);
        cr_assert(worker_backend_is_known(b->name), "%s", b->name);
        cr_assert_eq(worker_backend_find(b->name), b, "%s", b->name);
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(worker_backend_at(j)->name, b->name);
        strcat(want, i == 0 ? "" : ", ");
        strcat(want, b->name);
    }
    cr_assert_str_eq(worker_backend_list(list, sizeof(list)), want);
}

Test(backend, finds_cpu_and_it_runs_here)
{
    const worker_backend *b = worker_backend_find("cpu"), *sel = NULL;
    char why[256] = "x";

    cr_assert_not_null(b);
    cr_assert_str_eq(b->name, "cpu");
    cr_assert_str_eq(b->description, "OpenBLAS, 1 thread");
    cr_assert_eq(b->available(why, sizeof(why)), FLPS_OK);
    cr_assert_str_eq(why, "", "nothing to explain");
    cr_assert_eq(b->available(NULL, 0), FLPS_OK);
    cr_assert_eq(worker_backend_select("cpu", &sel, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(sel, b);
}

/* 40 bytes of 'c'. */
#define C40 "cccccccccccccccccccccccccccccccccccccccc"

Test(backend, finds_nothing_for_an_unknown_name_and_says_what_is_built)
{
    const worker_backend *sentinel = (const worker_backend *)&sentinel;
    const worker_backend *out = sentinel;
    char why[512], built[128], want[512];
    const char *names[] = {"nope", "", "CPU", "cpu ", "cud"};

    cr_assert_null(worker_backend_find(NULL));
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        cr_assert_null(worker_backend_find(names[i]), "'%s'", names[i]);
        cr_assert_not(worker_backend_is_known(names[i]), "'%s'", names[i]);
    }
    cr_assert_not(worker_backend_is_known(NULL));
    snprintf(want, sizeof(want),
             "unknown backend 'nope'; flps knows cpu, cuda (built into this "
             "flworker: %s)",
             worker_backend_list(built, sizeof(built)));
    cr_assert_eq(worker_backend_select("nope", &out, why, sizeof(why)),
                 FLPS_ECONFIG);
    cr_assert_str_eq(why, want);
    cr_assert_eq(out, sentinel, "*out untouched on failure");
    /* 3 + 37 + 3 bytes: the first 40 are shown. */
    snprintf(want, sizeof(want),
             "unknown backend 'a?b%.37s...'; flps knows cpu, cuda (built "
             "into this flworker: %s)",
             C40, built);
    cr_assert_eq(worker_backend_select("a\nb" C40, &out, why, sizeof(why)),
                 FLPS_ECONFIG);
    cr_assert_str_eq(why, want, "a control byte shown as ?, cut at 40");
    cr_assert_eq(worker_backend_select(NULL, &out, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_eq(worker_backend_select("cpu", NULL, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_eq(out, sentinel);
}

Test(backend, cuda_is_known_and_where_not_built_the_message_says_how_to_get_it)
{
    const worker_backend *sentinel = (const worker_backend *)&sentinel;
    const worker_backend *out = sentinel;
    char why[512], built[128], want[512];

    cr_assert(worker_backend_is_known("cuda"));
    cr_assert(worker_backend_is_known("cpu"));
    if (worker_backend_find("cuda") != NULL)
        cr_skip_test("this build has the cuda backend");
    snprintf(want, sizeof(want),
             "backend cuda is not built into this flworker (built: %s); "
             "build flps where the CUDA toolkit is installed so cmake finds "
             "it",
             worker_backend_list(built, sizeof(built)));
    cr_assert_eq(worker_backend_select("cuda", &out, why, sizeof(why)),
                 FLPS_ECONFIG);
    cr_assert_str_eq(why, want);
    cr_assert_eq(out, sentinel, "*out untouched on failure");
}

Test(backend, the_list_is_cut_to_its_buffer_and_always_terminated)
{
    char small[3] = {'x', 'x', 'x'}, one[1] = {'x'}, full[64];

    worker_backend_list(full, sizeof(full));
    cr_assert_str_eq(worker_backend_list(small, sizeof(small)), "cp");
    cr_assert_eq(strncmp(full, small, 2), 0);
    cr_assert_str_eq(worker_backend_list(one, sizeof(one)), "");
    one[0] = 'x';
    worker_backend_list(one, 0);
    cr_assert_eq(one[0], 'x', "len 0 writes nothing");
}

/* Build a model with the backend's constructor and one with model.h's,
 * run one step on the same batch and demand the same numbers, bit for
 * bit: loss, every gradient, the parameters and the tensor layout. */
typedef struct order_log {
    size_t n, order[16];
} order_log;

static void log_done(void *arg, size_t t)
{
    order_log *l = arg;

    cr_assert_lt(l->n, 16);
    l->order[l->n++] = t;
}

static void expect_same_step(model *a, model *b, const dataset *ds, size_t n)
{
    order_log la = {0}, lb = {0};
    float loss_a, loss_b;

    cr_assert_eq(model_num_tensors(a), model_num_tensors(b));
    cr_assert_eq(model_num_params(a), model_num_params(b));
    cr_assert_eq(model_input_dim(a), model_input_dim(b));
    cr_assert_eq(model_train_step(a, ds->x, ds->y, n, &loss_a, log_done, &la),
                 FLPS_OK);
    cr_assert_eq(model_train_step(b, ds->x, ds->y, n, &loss_b, log_done, &lb),
                 FLPS_OK);
    cr_assert(memcmp(&loss_a, &loss_b, sizeof(float)) == 0, "loss %g vs %g",
              (double)loss_a, (double)loss_b);
    cr_assert_eq(la.n, model_num_tensors(a), "every gradient reported");
    cr_assert_eq(la.n, lb.n);
    cr_assert_eq(memcmp(la.order, lb.order, la.n * sizeof(size_t)), 0,
                 "reported in the same order");
    for (size_t i = 0; i < model_num_tensors(a); i++) {
        model_tensor *ta = model_tensor_at(a, i), *tb = model_tensor_at(b, i);

        cr_assert_str_eq(ta->name, tb->name);
        cr_assert_eq(ta->numel, tb->numel);
        cr_assert(memcmp(ta->param, tb->param, ta->numel * sizeof(float)) == 0,
                  "%s: parameters differ", ta->name);
        cr_assert(memcmp(ta->grad, tb->grad, ta->numel * sizeof(float)) == 0,
                  "%s: gradients differ", ta->name);
    }
    /* A gradient that is all zeros would make the comparison empty. */
    {
        model_tensor *t0 = model_tensor_at(a, 0);
        size_t nz = 0;

        for (size_t j = 0; j < t0->numel; j++)
            nz += t0->grad[j] != 0.0f;
        cr_assert_gt(nz, 0, "the step computed something");
    }
}

Test(backend, the_cpu_mlp_trains_bit_identically_to_model_create_mlp)
{
    const worker_backend *cpu = worker_backend_find("cpu");
    const size_t hidden[] = {16, 8};
    dataset ds = {0};
    model *a = NULL, *b = NULL;

    cr_assert_not_null(cpu);
    cr_assert_eq(dataset_synthetic(32, 12, 4, 3, &ds), FLPS_OK);
    cr_assert_eq(cpu->create_mlp(12, hidden, 2, 4, 32, 7, &a), FLPS_OK);
    cr_assert_eq(model_create_mlp(12, hidden, 2, 4, 32, 7, &b), FLPS_OK);
    expect_same_step(a, b, &ds, 32);
    model_destroy(a);
    model_destroy(b);
    dataset_fini(&ds);
}

Test(backend, the_cpu_cnn_trains_bit_identically_to_model_create_cnn)
{
    const worker_backend *cpu = worker_backend_find("cpu");
    const model_cnn_shape shape = {.height = 8,
                                   .width = 8,
                                   .channels = 1,
                                   .kernel = 3,
                                   .conv1 = 4,
                                   .conv2 = 6,
                                   .fc = 10,
                                   .classes = 3};
    dataset ds = {0};
    model *a = NULL, *b = NULL;

    cr_assert_not_null(cpu);
    cr_assert_eq(dataset_synthetic(16, 64, 3, 11, &ds), FLPS_OK);
    cr_assert_eq(cpu->create_cnn(&shape, 16, 9, &a), FLPS_OK);
    cr_assert_eq(model_create_cnn(&shape, 16, 9, &b), FLPS_OK);
    expect_same_step(a, b, &ds, 16);
    model_destroy(a);
    model_destroy(b);
    dataset_fini(&ds);
}

Test(backend, the_cpu_constructors_refuse_what_model_h_refuses)
{
    const worker_backend *cpu = worker_backend_find("cpu");
    const size_t hidden[] = {16};
    model_cnn_shape shape = model_cnn_shape_fmnist();
    model *sentinel = (model *)&sentinel, *m = sentinel;

    cr_assert_not_null(cpu);
    cr_assert_eq(cpu->create_mlp(12, hidden, 1, 1, 32, 7, &m), FLPS_EINVAL,
                 "one class is too few");
    cr_assert_eq(cpu->create_mlp(12, hidden, 1, 4, 0, 7, &m), FLPS_EINVAL,
                 "max_batch 0");
    shape.kernel = 4;
    cr_assert_eq(cpu->create_cnn(&shape, 16, 1, &m), FLPS_EINVAL,
                 "an even kernel");
    cr_assert_eq(cpu->create_cnn(NULL, 16, 1, &m), FLPS_EINVAL);
    cr_assert_eq(m, sentinel, "*out untouched on failure");
}
