/* Tests for compress/lags.c: the layer-wise density planner. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "compress/lags.h"

static lags_params net(double alpha, double beta)
{
    lags_params p;

    lags_params_default(&p);
    p.alpha = alpha;
    p.beta = beta;
    return p;
}

Test(lags, lowers_the_density_of_layers_with_less_backprop_left_to_hide_behind)
{
    /* Backprop order; 1M elements each, 2 ms of backward each, 1 GB/s,
     * 100 us per message. Dense would cost 8.2 ms per layer. */
    lags_layer layers[3] = {
        {1000000, 0.002}, {1000000, 0.002}, {1000000, 0.002}};
    lags_params p = net(1e-4, 1e-9);
    lags_choice plan[3];
    double t;

    cr_assert_eq(lags_plan(layers, 3, &p, plan, &t), FLPS_OK);
    cr_assert_eq(plan[0].spec.kind, CODEC_TOPK);
    cr_assert_eq(plan[1].spec.kind, CODEC_TOPK);
    cr_assert_eq(plan[2].spec.kind, CODEC_TOPK);
    /* rho = (t_hide / 2 - alpha) / (8 d beta) */
    cr_assert_float_eq(plan[0].spec.density, (0.002 - 1e-4) / 0.008, 1e-12);
    cr_assert_float_eq(plan[1].spec.density, (0.001 - 1e-4) / 0.008, 1e-12);
    cr_assert_eq(plan[2].spec.density, 0.001,
                 "the last layer hides behind nothing: rho_min");
    cr_assert_gt(plan[0].spec.density, plan[1].spec.density);
    for (int j = 0; j < 2; j++) {
        double hide = 0.002 * (2 - j);
        cr_assert_leq(plan[j].t_comm, hide + 1e-12,
                      "layer %d's push hides behind the backprop left", j);
        cr_assert_eq(plan[j].bytes, 8 * plan[j].k);
    }
    cr_assert_eq(plan[2].k, 1000);
}

Test(lags, sends_a_layer_dense_when_its_communication_hides_anyway)
{
    lags_layer layers[2] = {{1000000, 0.010}, {1000000, 0.050}};
    lags_params p = net(1e-4, 1e-9);
    lags_choice plan[2];

    cr_assert_eq(lags_plan(layers, 2, &p, plan, NULL), FLPS_OK);
    cr_assert_eq(plan[0].spec.kind, CODEC_DENSE, "8.2 ms hides in 50 ms");
    cr_assert_eq(plan[0].k, 1000000);
    cr_assert_eq(plan[0].bytes, 4000000);
    cr_assert_eq(plan[1].spec.kind, CODEC_TOPK);
}

Test(lags, keeps_tiny_layers_dense)
{
    lags_layer layers[4] = {{100, 0.0}, {4095, 0.0}, {4096, 0.0}, {10, 0.0}};
    lags_params p = net(1e-3, 1e-8);
    lags_choice plan[4];

    cr_assert_eq(lags_plan(layers, 4, &p, plan, NULL), FLPS_OK);
    cr_assert_eq(plan[0].spec.kind, CODEC_DENSE);
    cr_assert_eq(plan[1].spec.kind, CODEC_DENSE);
    cr_assert_eq(plan[2].spec.kind, CODEC_TOPK, "4096 is not below 4096");
    cr_assert_eq(plan[2].k, 4, "rho_min * 4096 rounds down to 4");
    cr_assert_eq(plan[3].spec.kind, CODEC_DENSE);
}

Test(lags, sends_everything_dense_on_a_free_network)
{
    lags_layer layers[2] = {{10000000, 0.0}, {5000000, 0.0}};
    lags_params p = net(1e-3, 0.0);
    lags_choice plan[2];
    double t;

    cr_assert_eq(lags_plan(layers, 2, &p, plan, &t), FLPS_OK);
    cr_assert_eq(plan[0].spec.kind, CODEC_DENSE);
    cr_assert_eq(plan[1].spec.kind, CODEC_DENSE);
    cr_assert_float_eq(t, 4e-3, 1e-15, "two layers at 2 alpha each");
}

Test(lags, divides_the_density_by_the_workers_in_the_shard_form)
{
    lags_layer layers[2] = {{1000000, 0.002}, {1000000, 0.002}};
    lags_params p = net(1e-4, 1e-9);
    lags_choice worker[2], shard[2];

    p.workers = 4;
    cr_assert_eq(lags_plan(layers, 2, &p, worker, NULL), FLPS_OK);
    p.per_shard = 1;
    cr_assert_eq(lags_plan(layers, 2, &p, shard, NULL), FLPS_OK);
    cr_assert_float_eq(shard[0].spec.density, worker[0].spec.density / 4,
                       1e-12);
    cr_assert_float_eq(shard[0].t_comm, 2 * (1e-4 + 4 * shard[0].bytes * 1e-9),
                       1e-12);
}

Test(lags, predicts_the_wait_free_backprop_timeline)
{
    /* With 2 s per push: layer 0 is ready at 1 and sent 1..3; layer 1 is
     * ready at 1.5, waits for the link and is sent 3..5; backward ends at
     * 1.5, so the iteration takes 5. */
    lags_layer layers[2] = {{10000, 1.0}, {10000, 0.5}};
    lags_params p = net(0.5, 0.0);
    lags_choice plan[2];
    double t;

    plan[0].spec = (codec_spec){CODEC_DENSE, 1.0, 0};
    plan[1].spec = (codec_spec){CODEC_DENSE, 1.0, 0};
    p.alpha = 1.0; /* 2 s per layer */
    cr_assert_eq(lags_predict(layers, 2, &p, plan, &t), FLPS_OK);
    cr_assert_float_eq(t, 5.0, 1e-12);
    p.alpha = 0.5; /* 1 s per layer: 1..2, then 2..3 */
    cr_assert_eq(lags_predict(layers, 2, &p, plan, &t), FLPS_OK);
    cr_assert_float_eq(t, 3.0, 1e-12);
    p.alpha = 0.0; /* nothing to send: backward alone */
    cr_assert_eq(lags_predict(layers, 2, &p, plan, &t), FLPS_OK);
    cr_assert_float_eq(t, 1.5, 1e-12);
}

static uint64_t rng_state = 12345;

static double rng_unit(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

Test(lags, never_predicts_worse_than_all_dense_on_random_profiles)
{
    enum { MAXL = 60 };

    for (int trial = 0; trial < 3000; trial++) {
        lags_layer layers[MAXL];
        lags_choice plan[MAXL], dense[MAXL];
        size_t nl = 1 + (size_t)(rng_unit() * MAXL);
        lags_params p = net(pow(10.0, -6.0 + 4.0 * rng_unit()),
                            pow(10.0, -11.0 + 4.0 * rng_unit()));
        double t_plan, t_check, t_dense;

        if (trial % 10 == 0)
            p.beta = 0.0;
        p.workers = 1 + (unsigned)(rng_unit() * 64);
        p.per_shard = trial % 2;
        p.rho_min = pow(10.0, -4.0 + 3.0 * rng_unit());
        p.dense_below = (size_t)(rng_unit() * 10000);
        for (size_t j = 0; j < nl; j++) {
            layers[j].numel = (size_t)pow(10.0, 7.5 * rng_unit());
            layers[j].t_backward =
                rng_unit() < 0.1 ? 0.0 : pow(10.0, -6.0 + 5.0 * rng_unit());
            dense[j].spec = (codec_spec){CODEC_DENSE, 1.0, 0};
        }
        cr_assert_eq(lags_plan(layers, nl, &p, plan, &t_plan), FLPS_OK);
        cr_assert_eq(lags_predict(layers, nl, &p, plan, &t_check), FLPS_OK);
        cr_assert_eq(lags_predict(layers, nl, &p, dense, &t_dense), FLPS_OK);
        cr_assert_float_eq(t_plan, t_check, 1e-12 * (1.0 + t_plan),
                           "plan and predict agree");
        cr_assert_leq(t_plan, t_dense * (1.0 + 1e-12), "trial %d", trial);
        for (size_t j = 0; j < nl; j++) {
            cr_assert(plan[j].spec.kind == CODEC_DENSE ||
                      plan[j].spec.kind == CODEC_TOPK);
            cr_assert_leq(plan[j].bytes, 4 * layers[j].numel);
            if (plan[j].spec.kind == CODEC_TOPK) {
                cr_assert_geq(plan[j].spec.density, p.rho_min);
                cr_assert_lt(plan[j].spec.density, 0.5);
                cr_assert_geq(layers[j].numel, p.dense_below);
            }
        }
    }
}

Test(lags, rejects_bad_parameters)
{
    lags_layer layers[1] = {{1000, 0.001}};
    lags_choice plan[1];
    lags_params p = net(1e-4, 1e-9);
    double t = 42.0;

    p.workers = 0;
    cr_assert_eq(lags_plan(layers, 1, &p, plan, &t), FLPS_EINVAL);
    p = net(-1.0, 1e-9);
    cr_assert_eq(lags_plan(layers, 1, &p, plan, &t), FLPS_EINVAL);
    p = net(1e-4, NAN);
    cr_assert_eq(lags_plan(layers, 1, &p, plan, &t), FLPS_EINVAL);
    p = net(1e-4, 1e-9);
    p.rho_min = 0.0;
    cr_assert_eq(lags_plan(layers, 1, &p, plan, &t), FLPS_EINVAL);
    p.rho_min = 1.5;
    cr_assert_eq(lags_plan(layers, 1, &p, plan, &t), FLPS_EINVAL);
    p = net(1e-4, 1e-9);
    layers[0].t_backward = -1.0;
    cr_assert_eq(lags_plan(layers, 1, &p, plan, &t), FLPS_EINVAL);
    layers[0].t_backward = 0.001;
    cr_assert_eq(lags_plan(NULL, 1, &p, plan, &t), FLPS_EINVAL);
    cr_assert_eq(lags_plan(layers, 1, &p, NULL, &t), FLPS_EINVAL);
    cr_assert_eq(t, 42.0, "out untouched on error");
    plan[0].spec = (codec_spec){CODEC_QSGD, 0.0, 4};
    cr_assert_eq(lags_predict(layers, 1, &p, plan, &t), FLPS_EINVAL);
    cr_assert_eq(lags_plan(layers, 0, &p, NULL, &t), FLPS_OK);
    cr_assert_eq(t, 0.0, "no layers, no time");
}
