/* Tests for compress/ef.c: error feedback and momentum correction. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "compress/codec.h"
#include "compress/ef.h"
#include "tests/compress/avx_state.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double rng_unit(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static float rng_gauss(void)
{
    double u1 = 1.0 - rng_unit(), u2 = rng_unit();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static codec *make(const char *s)
{
    codec_spec spec;
    codec *c = NULL;

    cr_assert_eq(codec_spec_parse(s, &spec), FLPS_OK, "%s", s);
    cr_assert_eq(codec_create(&spec, 17, &c), FLPS_OK);
    return c;
}

/* Run steps of EF with codec spec s and momentum m; check that what was
 * sent plus the residual equals what was accumulated. */
static void check_conservation(const char *s, float m, size_t n, int steps)
{
    codec *c = make(s);
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g)), *u = calloc(n, sizeof(*u));
    float *d = malloc(n * sizeof(*d));
    double *sent = calloc(n, sizeof(*sent)), *accum = calloc(n, sizeof(*accum));
    double scale = 0.0;

    cr_assert_eq(ef_create(n, m, &e), FLPS_OK);
    for (int t = 0; t < steps; t++) {
        codec_msg msg;
        const float *vel = ef_velocity(e);
        for (size_t i = 0; i < n; i++) {
            /* Gradients with a bias per element, so some of them build up
             * in the residual over the steps. */
            g[i] = rng_gauss() + (float)(i % 7) * 0.1f;
            /* The accumulated quantity: g, or the updated velocity. */
            u[i] = m > 0.0f ? m * vel[i] + g[i] : g[i];
            accum[i] += u[i];
        }
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK, "%s", s);
        memset(d, 0, n * sizeof(*d));
        cr_assert_eq(
            codec_decode(codec_get_spec(c), msg.frames, msg.nframes, d, n),
            FLPS_OK);
        for (size_t i = 0; i < n; i++)
            sent[i] += d[i];
    }
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(accum[i]));
    for (size_t i = 0; i < n; i++) {
        double have = sent[i] + ef_residual(e)[i];
        cr_assert_leq(fabs(have - accum[i]), 1e-4 * (scale + 1.0),
                      "%s m=%g i=%zu: sent+r=%g accumulated=%g", s, (double)m,
                      i, have, accum[i]);
    }
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(u);
    free(d);
    free(sent);
    free(accum);
}

Test(ef, conserves_what_was_accumulated_for_every_codec)
{
    static const char *const specs[] = {"dense",      "fp16",     "topk:0.01",
                                        "gtopk:0.05", "dgc:0.01", "qsgd:4",
                                        "qsgd:8",     "sign"};

    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        check_conservation(specs[s], 0.0f, 5000, 60);
        check_conservation(specs[s], 0.9f, 5000, 60);
    }
    check_conservation("topk:0.001", 0.9f, 200000, 20);
}

Test(ef, topk_residual_is_the_sum_with_the_sent_indices_zeroed)
{
    size_t n = 1000;
    codec *c = make("topk:0.05");
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g)), *want = malloc(n * sizeof(*want));
    codec_msg msg;

    cr_assert_eq(ef_create(n, 0.0f, &e), FLPS_OK);
    cr_assert_null(ef_velocity(e), "no velocity without momentum");
    for (int t = 0; t < 5; t++) {
        for (size_t i = 0; i < n; i++) {
            g[i] = rng_gauss();
            want[i] = ef_residual(e)[i] + g[i];
        }
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
        cr_assert_eq(msg.count, 50);
        for (size_t j = 0; j < msg.count; j++)
            want[msg.idx[j]] = 0.0f;
        cr_assert_arr_eq(ef_residual(e), want, n * sizeof(*want),
                         "r = a with S zeroed, exactly");
    }
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(want);
}

Test(ef, masks_the_velocity_on_the_sent_indices)
{
    size_t n = 500;
    codec *c = make("topk:0.05"); /* 0.05 * 2 under topk's 1/8 */
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g)), *want = malloc(n * sizeof(*want));
    codec_msg msg;

    cr_assert_eq(ef_create(n, 0.5f, &e), FLPS_OK);
    for (int t = 0; t < 4; t++) {
        for (size_t i = 0; i < n; i++) {
            g[i] = rng_gauss();
            want[i] = 0.5f * ef_velocity(e)[i] + g[i];
        }
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
        for (size_t j = 0; j < msg.count; j++)
            want[msg.idx[j]] = 0.0f;
        cr_assert_arr_eq(ef_velocity(e), want, n * sizeof(*want));
    }
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(want);
}

/* With m = 0.9 the momentum remembers about H = 10 steps, and an element
 * is sent every 1/d steps on average. topk and dgc mask the velocity of a
 * sent element only where it waits more than eight horizons (d * H < 1/8:
 * below 0.0125), gtopk where it waits more than one (below 0.1); elsewhere
 * the velocity is kept. */
Test(ef, keeps_the_velocity_where_elements_are_sent_within_the_momentums_memory)
{
    static const struct {
        const char *spec;
        float m;
        int masked;
    } cases[] = {
        {"topk:0.1", 0.9f, 0},     {"gtopk:0.5", 0.9f, 0},
        {"topk:0.09", 0.9f, 0},    {"gtopk:0.09", 0.9f, 1},
        {"topk:0.02", 0.9f, 0},    {"topk:0.01", 0.9f, 1},
        {"gtopk:0.01", 0.9f, 1},   {"topk:0.002", 0.99f, 0},
        {"topk:0.001", 0.99f, 1},  {"gtopk:0.01", 0.99f, 0},
        {"gtopk:0.009", 0.99f, 1}, {"dgc:0.2", 0.9f, 0},
        {"dgc:0.05", 0.9f, 0},     {"dgc:0.01", 0.9f, 1},
    };
    size_t n = 1000;
    float *g = malloc(n * sizeof(*g)), *want = malloc(n * sizeof(*want));

    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        codec *c = make(cases[ci].spec);
        ef *e = NULL;
        codec_msg msg;
        int zeroed = 0;

        cr_assert_eq(ef_create(n, cases[ci].m, &e), FLPS_OK);
        for (int t = 0; t < 4; t++) {
            for (size_t i = 0; i < n; i++) {
                g[i] = rng_gauss();
                want[i] = cases[ci].m * ef_velocity(e)[i] + g[i];
            }
            cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
            cr_assert_gt(msg.count, 0);
            for (size_t j = 0; j < msg.count; j++) {
                if (cases[ci].masked)
                    want[msg.idx[j]] = 0.0f;
                zeroed |= ef_velocity(e)[msg.idx[j]] == 0.0f;
            }
            cr_assert_arr_eq(ef_velocity(e), want, n * sizeof(*want),
                             "%s, m = %g: the velocity %s", cases[ci].spec,
                             (double)cases[ci].m,
                             cases[ci].masked ? "masked on S" : "kept");
        }
        cr_assert_eq(zeroed, cases[ci].masked, "%s", cases[ci].spec);
        ef_destroy(e);
        codec_destroy(c);
    }
    free(g);
    free(want);
}

Test(ef, keeps_the_velocity_for_codecs_that_send_every_element)
{
    size_t n = 300;
    codec *c = make("qsgd:4");
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g));
    codec_msg msg;

    cr_assert_eq(ef_create(n, 0.9f, &e), FLPS_OK);
    for (size_t i = 0; i < n; i++)
        g[i] = 1.0f;
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_float_eq(ef_velocity(e)[i], 1.9f, 1e-6);
    ef_destroy(e);
    codec_destroy(c);
    free(g);
}

Test(ef, leaves_no_residual_with_the_dense_codec)
{
    size_t n = 64;
    codec *c = make("dense");
    ef *e = NULL;
    float g[64];
    codec_msg msg;

    for (size_t i = 0; i < n; i++)
        g[i] = rng_gauss();
    cr_assert_eq(ef_create(n, 0.0f, &e), FLPS_OK);
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ef_residual(e)[i], 0.0f);
    ef_destroy(e);
    codec_destroy(c);
}

Test(ef, a_failed_step_changes_nothing)
{
    size_t n = 400;
    codec *c = make("topk:0.01");
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g));
    float *r0 = malloc(n * sizeof(*r0)), *u0 = malloc(n * sizeof(*u0));
    codec_msg msg, untouched;

    cr_assert_eq(ef_create(n, 0.9f, &e), FLPS_OK);
    for (size_t i = 0; i < n; i++)
        g[i] = rng_gauss();
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
    memcpy(r0, ef_residual(e), n * sizeof(*r0));
    memcpy(u0, ef_velocity(e), n * sizeof(*u0));
    g[123] = NAN;
    memset(&untouched, 0x5a, sizeof(untouched));
    msg = untouched;
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_ENONFINITE);
    cr_assert_arr_eq(&msg, &untouched, sizeof(msg));
    cr_assert_arr_eq(ef_residual(e), r0, n * sizeof(*r0));
    cr_assert_arr_eq(ef_velocity(e), u0, n * sizeof(*u0));
    g[123] = 1e38f;
    g[124] = 3e38f; /* finite g, but r + u overflows somewhere */
    for (int t = 0; t < 3; t++) {
        flps_err rc = ef_step(e, c, g, &msg);
        cr_assert(rc == FLPS_OK || rc == FLPS_ENONFINITE);
    }
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(r0);
    free(u0);
}

Test(ef, adds_back_what_the_shard_did_not_take)
{
    ef *e = NULL;
    uint32_t idx[] = {1, 3};
    float val[] = {0.5f, -2.0f};
    uint32_t bad_idx[] = {0, 4};
    float bad_val[] = {1.0f, INFINITY};

    cr_assert_eq(ef_create(4, 0.0f, &e), FLPS_OK);
    cr_assert_eq(ef_add_back(e, idx, val, 2), FLPS_OK);
    cr_assert_eq(ef_residual(e)[1], 0.5f);
    cr_assert_eq(ef_residual(e)[3], -2.0f);
    cr_assert_eq(ef_add_back(e, bad_idx, val, 2), FLPS_ERANGE);
    cr_assert_eq(ef_add_back(e, idx, bad_val, 2), FLPS_ENONFINITE);
    cr_assert_eq(ef_residual(e)[0], 0.0f, "rejected add-backs change nothing");
    cr_assert_eq(ef_residual(e)[1], 0.5f);
    ef_reset(e);
    cr_assert_eq(ef_residual(e)[3], 0.0f);
    cr_assert_eq(ef_size(e), 4);
    ef_destroy(e);
}

Test(ef, rejects_bad_arguments_and_reports_out_of_memory)
{
    ef *e = NULL;

    cr_assert_eq(ef_create(10, -0.1f, &e), FLPS_EINVAL);
    cr_assert_eq(ef_create(10, 1.0f, &e), FLPS_EINVAL);
    cr_assert_eq(ef_create(10, NAN, &e), FLPS_EINVAL);
    cr_assert_eq(ef_create(10, 0.5f, NULL), FLPS_EINVAL);
    for (unsigned long fail = 1; fail <= 5; fail++) {
        flps_alloc_fail_at(fail);
        cr_assert_eq(ef_create(10, 0.5f, &e), FLPS_ENOMEM);
        flps_alloc_fail_at(0);
        cr_assert_null(e);
    }
    cr_assert_eq(ef_create(10, 0.5f, &e), FLPS_OK);
    cr_assert_eq(ef_step(e, NULL, NULL, NULL), FLPS_EINVAL);
    ef_destroy(e);
    {
        /* Codecs whose error exceeds their input make the residual grow
         * without bound: refused. */
        static const char *const refused[] = {"randk:0.5", "qsgd:3", "qsgd:1"};
        for (size_t s = 0; s < 3; s++) {
            codec *c = make(refused[s]);
            float g[10] = {1.0f};
            codec_msg msg;
            cr_assert_eq(ef_create(10, 0.0f, &e), FLPS_OK);
            cr_assert_eq(ef_step(e, c, g, &msg), FLPS_EINVAL, "%s", refused[s]);
            ef_destroy(e);
            codec_destroy(c);
        }
    }
    ef_destroy(NULL);
}

/* ---- the in-place step of the exact codecs ---- */

/* ef_step of an ef made by ef_create_for against ALGORITHMS.md written out
 * with separate arrays and codec_encode: the same messages, residual and
 * velocity, bit for bit, step after step. */
static void check_against_the_written_out_step(const char *s, float m, size_t n,
                                               int steps)
{
    codec *c = make(s), *ref = make(s);
    codec_spec spec = *codec_get_spec(c);
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g)), *r = calloc(n, sizeof(*r));
    float *u = calloc(n, sizeof(*u)), *a = malloc(n * sizeof(*a));
    /* Masking only where an element waits long enough between sends:
     * density * round(1/(1-m)) under 1 for gtopk, 1/8 for topk and dgc
     * (ef.h). */
    const double bound = spec.kind == CODEC_GTOPK ? 1.0 : 0.125;
    const int masks =
        m > 0.0f && spec.density * floor(1.0 / (1.0 - (double)m) + 0.5) < bound;

    cr_assert_eq(ef_create_for(&spec, n, m, &e), FLPS_OK);
    for (int t = 0; t < steps; t++) {
        codec_msg got, want;
        for (size_t i = 0; i < n; i++) {
            g[i] = rng_gauss() + (float)(i % 5) * 0.05f;
            if (m > 0.0f) {
                u[i] = m * u[i] + g[i];
                a[i] = r[i] + u[i];
            } else {
                a[i] = r[i] + g[i];
            }
        }
        cr_assert_eq(codec_encode(ref, a, n, &want), FLPS_OK);
        cr_assert_eq(ef_step(e, c, g, &got), FLPS_OK, "%s step %d", s, t);
        cr_assert_eq(got.nframes, want.nframes);
        cr_assert_eq(got.count, want.count, "%s step %d", s, t);
        for (size_t f = 0; f < got.nframes; f++)
            cr_assert_arr_eq(got.frames[f].data, want.frames[f].data,
                             want.frames[f].len, "%s step %d frame %zu", s, t,
                             f);
        if (want.idx != NULL) {
            for (size_t j = 0; j < want.count; j++) {
                a[want.idx[j]] = 0.0f;
                if (masks)
                    u[want.idx[j]] = 0.0f;
            }
        } else {
            memset(a, 0, n * sizeof(*a));
        }
        memcpy(r, a, n * sizeof(*r));
        for (size_t i = 0; i < n; i++)
            cr_assert(ef_residual(e)[i] == r[i], "%s step %d r[%zu]", s, t, i);
        if (m > 0.0f)
            cr_assert_arr_eq(ef_velocity(e), u, n * sizeof(*u), "%s step %d u",
                             s, t);
    }
    ef_destroy(e);
    codec_destroy(c);
    codec_destroy(ref);
    free(g);
    free(r);
    free(u);
    free(a);
}

Test(ef, the_in_place_step_gives_what_the_written_out_step_gives)
{
    /* dgc's sample starts its runs on cache lines of the array it reads,
     * so only its exact fallback (below 65536) compares across arrays;
     * tests/compress/test_topk.c compares its sampled form in place. */
    static const struct {
        const char *spec;
        size_t n;
    } cases[] = {
        {"topk:0.01", 5000},     {"topk:0.004", 300000},  {"gtopk:0.05", 5000},
        {"gtopk:0.001", 200003}, {"dgc:0.01", 5000},      {"dense", 5000},
        {"topk:1", 100},         {"topk:0.00001", 70000}, {"topk:0.05", 5000}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_against_the_written_out_step(cases[i].spec, 0.9f, cases[i].n, 6);
        check_against_the_written_out_step(cases[i].spec, 0.0f, cases[i].n, 6);
    }
}

Test(ef, the_in_place_step_conserves_what_was_accumulated)
{
    codec_spec spec;
    size_t n = 3000;
    codec *c = make("topk:0.02");
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g)), *d = malloc(n * sizeof(*d));
    double *acc = calloc(n, sizeof(*acc)), *sent = calloc(n, sizeof(*sent));

    cr_assert_eq(codec_spec_parse("topk:0.02", &spec), FLPS_OK);
    cr_assert_eq(ef_create_for(&spec, n, 0.0f, &e), FLPS_OK);
    for (int t = 0; t < 40; t++) {
        codec_msg msg;
        for (size_t i = 0; i < n; i++) {
            g[i] = rng_gauss() + (float)(i % 3) * 0.2f;
            acc[i] += g[i];
        }
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
        memset(d, 0, n * sizeof(*d));
        cr_assert_eq(codec_decode(&spec, msg.frames, msg.nframes, d, n),
                     FLPS_OK);
        for (size_t i = 0; i < n; i++)
            sent[i] += d[i];
    }
    for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabs(sent[i] + ef_residual(e)[i] - acc[i]),
                      1e-4 * (fabs(acc[i]) + 1.0), "i=%zu", i);
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(d);
    free(acc);
    free(sent);
}

/* A sum that overflows f32 although g is finite: the step fails before
 * anything moves, with and without momentum. */
Test(ef, an_overflowing_sum_fails_the_in_place_step_and_changes_nothing)
{
    static const float g[4] = {3e38f, 3e38f, 1.0f, 0.0f};
    codec_spec spec;
    codec *c = make("topk:0.25");

    cr_assert_eq(codec_spec_parse("topk:0.25", &spec), FLPS_OK);
    for (int mom = 0; mom < 2; mom++) {
        ef *e = NULL;
        float r0[4], u0[4] = {0};
        codec_msg msg, untouched;
        cr_assert_eq(ef_create_for(&spec, 4, mom ? 0.9f : 0.0f, &e), FLPS_OK);
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
        cr_assert_eq(msg.count, 1);
        cr_assert_eq(msg.idx[0], 0, "ties go to the lower index");
        memcpy(r0, ef_residual(e), sizeof(r0));
        if (mom)
            memcpy(u0, ef_velocity(e), sizeof(u0));
        memset(&untouched, 0x5a, sizeof(untouched));
        msg = untouched;
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_ENONFINITE, "m=%d", mom);
        cr_assert_arr_eq(&msg, &untouched, sizeof(msg));
        cr_assert_arr_eq(ef_residual(e), r0, sizeof(r0));
        if (mom)
            cr_assert_arr_eq(ef_velocity(e), u0, sizeof(u0));
        /* After a reset the bounds are small again and the step works. */
        ef_reset(e);
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
        ef_destroy(e);
    }
    codec_destroy(c);
}

Test(ef, a_nan_gradient_fails_the_in_place_step_and_changes_nothing)
{
    codec_spec spec;
    size_t n = 100000;
    codec *c = make("dgc:0.01");
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g));
    float *r0 = malloc(n * sizeof(*r0)), *u0 = malloc(n * sizeof(*u0));
    codec_msg msg;

    cr_assert_eq(codec_spec_parse("dgc:0.01", &spec), FLPS_OK);
    cr_assert_eq(ef_create_for(&spec, n, 0.9f, &e), FLPS_OK);
    for (size_t i = 0; i < n; i++)
        g[i] = rng_gauss();
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
    memcpy(r0, ef_residual(e), n * sizeof(*r0));
    memcpy(u0, ef_velocity(e), n * sizeof(*u0));
    g[n - 1] = NAN;
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_ENONFINITE);
    cr_assert_arr_eq(ef_residual(e), r0, n * sizeof(*r0));
    cr_assert_arr_eq(ef_velocity(e), u0, n * sizeof(*u0));
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(r0);
    free(u0);
}

Test(ef, made_by_ef_create_for_it_keeps_only_the_residual_and_velocity)
{
    static const char *const specs[] = {"topk:0.01", "qsgd:8"};

    for (size_t k = 0; k < 2; k++) {
        codec_spec spec;
        ef *e = NULL;
        codec *c = make(specs[k]);
        float g[100];
        codec_msg msg;

        cr_assert_eq(codec_spec_parse(specs[k], &spec), FLPS_OK);
        /* The struct, r and u: three allocations, no scratch arrays. */
        for (unsigned long fail = 1; fail <= 3; fail++) {
            flps_alloc_fail_at(fail);
            cr_assert_eq(ef_create_for(&spec, 100, 0.9f, &e), FLPS_ENOMEM);
            flps_alloc_fail_at(0);
            cr_assert_null(e);
        }
        flps_alloc_fail_at(4);
        cr_assert_eq(ef_create_for(&spec, 100, 0.9f, &e), FLPS_OK);
        flps_alloc_fail_at(0);
        for (size_t i = 0; i < 100; i++)
            g[i] = rng_gauss();
        /* The codec's first buffers fail: nothing moves. */
        flps_alloc_fail_at(1);
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_ENOMEM, "%s", specs[k]);
        flps_alloc_fail_at(0);
        for (size_t i = 0; i < 100; i++)
            cr_assert_eq(ef_residual(e)[i], 0.0f, "%s", specs[k]);
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK, "%s", specs[k]);
        ef_destroy(e);
        codec_destroy(c);
    }
    {
        codec_spec spec;
        ef *e = NULL;
        cr_assert_eq(codec_spec_parse("randk:0.1", &spec), FLPS_OK);
        cr_assert_eq(ef_create_for(&spec, 100, 0.0f, &e), FLPS_EINVAL);
        cr_assert_eq(ef_create_for(NULL, 100, 0.0f, &e), FLPS_EINVAL);
    }
}

/* The quantising codecs in place (ef_create_for) against the scratch
 * arrays (ef_create): the same frames, residual and velocity, bit for
 * bit. */
Test(ef, the_in_place_quantised_step_gives_what_the_scratch_step_gives)
{
    static const char *const specs[] = {"fp16", "qsgd:4", "qsgd:8", "sign"};
    size_t n = 5003;
    float *g = malloc(n * sizeof(*g));

    cr_assert_not_null(g);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++)
        for (int mom = 0; mom < 2; mom++) {
            codec *c0 = make(specs[s]), *c1 = make(specs[s]);
            float m = mom ? 0.9f : 0.0f;
            ef *e0 = NULL, *e1 = NULL;
            cr_assert_eq(ef_create(n, m, &e0), FLPS_OK);
            cr_assert_eq(ef_create_for(codec_get_spec(c1), n, m, &e1), FLPS_OK);
            for (int t = 0; t < 8; t++) {
                codec_msg want, got;
                for (size_t i = 0; i < n; i++)
                    g[i] = rng_gauss() + (float)(i % 9) * 0.03f;
                cr_assert_eq(ef_step(e0, c0, g, &want), FLPS_OK);
                cr_assert_eq(ef_step(e1, c1, g, &got), FLPS_OK);
                cr_assert_eq(got.nframes, want.nframes);
                for (size_t f = 0; f < got.nframes; f++) {
                    cr_assert_eq(got.frames[f].len, want.frames[f].len);
                    cr_assert_arr_eq(got.frames[f].data, want.frames[f].data,
                                     want.frames[f].len, "%s m=%g step %d",
                                     specs[s], (double)m, t);
                }
                cr_assert_arr_eq(ef_residual(e1), ef_residual(e0),
                                 n * sizeof(float), "%s step %d r", specs[s],
                                 t);
                if (mom)
                    cr_assert_arr_eq(ef_velocity(e1), ef_velocity(e0),
                                     n * sizeof(float), "%s step %d u",
                                     specs[s], t);
            }
            ef_destroy(e0);
            ef_destroy(e1);
            codec_destroy(c0);
            codec_destroy(c1);
        }
    free(g);
}

/* A qsgd bucket whose norm overflows f32, and a sum that overflows: the
 * in-place step refuses before anything moves, with the scratch step's
 * error codes. */
Test(ef, the_in_place_quantised_step_refuses_overflows_and_changes_nothing)
{
    size_t n = 1024;
    codec *c = make("qsgd:8");
    ef *e = NULL;
    float *g = malloc(n * sizeof(*g)), *r0 = malloc(n * sizeof(*r0));
    codec_msg msg;

    cr_assert_eq(ef_create_for(codec_get_spec(c), n, 0.0f, &e), FLPS_OK);
    for (size_t i = 0; i < n; i++)
        g[i] = rng_gauss();
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
    memcpy(r0, ef_residual(e), n * sizeof(*r0));
    for (size_t i = 512; i < n; i++)
        g[i] = 2e37f; /* the second bucket's norm is 4.5e38 */
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_ERANGE);
    cr_assert_arr_eq(ef_residual(e), r0, n * sizeof(*r0));
    g[700] = 3.4e38f;
    cr_assert_eq(ef_step(e, c, g, &msg), FLPS_ERANGE);
    cr_assert_arr_eq(ef_residual(e), r0, n * sizeof(*r0));
    ef_destroy(e);
    codec_destroy(c);
    free(g);
    free(r0);
}

Test(ef, the_in_place_step_leaves_the_upper_ymm_state_clean)
{
    static const char *const specs[] = {"topk:0.004", "dgc:0.01", "dense"};
    size_t n = 300001;
    float *g = malloc(n * sizeof(*g));

    if (!avx_state_is_observable())
        cr_skip_test("the CPU does not report XINUSE");
    for (size_t i = 0; i < n; i++)
        g[i] = rng_gauss();
    for (size_t s = 0; s < 3; s++) {
        codec *c = make(specs[s]);
        ef *e = NULL;
        codec_msg msg;
        cr_assert_eq(ef_create_for(codec_get_spec(c), n, 0.9f, &e), FLPS_OK);
        avx_state_clear();
        cr_assert_eq(ef_step(e, c, g, &msg), FLPS_OK);
        cr_assert_not(avx_state_is_dirty(), "%s", specs[s]);
        ef_destroy(e);
        codec_destroy(c);
    }
    free(g);
}

Test(ef, a_step_writes_into_the_callers_buffer_and_clears_the_setting)
{
    static const char *const specs[] = {"fp16", "qsgd:8", "sign", "topk:0.01"};
    size_t n = 2000;
    float *g = malloc(n * sizeof(*g));

    cr_assert_not_null(g);
    for (size_t i = 0; i < n; i++)
        g[i] = rng_gauss();
    for (size_t s = 0; s < 4; s++) {
        codec *c0 = make(specs[s]), *c1 = make(specs[s]);
        size_t cap = codec_max_bytes(codec_get_spec(c1), n);
        uint8_t *dst = malloc(cap);
        ef *e0 = NULL, *e1 = NULL;
        codec_msg want, got;

        cr_assert_not_null(dst);
        cr_assert_eq(ef_create_for(codec_get_spec(c0), n, 0.9f, &e0), FLPS_OK);
        cr_assert_eq(ef_create_for(codec_get_spec(c1), n, 0.9f, &e1), FLPS_OK);
        cr_assert_eq(ef_step(e0, c0, g, &want), FLPS_OK);
        cr_assert_eq(codec_set_output(c1, dst, cap), FLPS_OK);
        cr_assert_eq(ef_step(e1, c1, g, &got), FLPS_OK, "%s", specs[s]);
        for (size_t f = 0; f < got.nframes; f++) {
            cr_assert(got.frames[f].data >= dst &&
                      got.frames[f].data < dst + cap);
            cr_assert_arr_eq(got.frames[f].data, want.frames[f].data,
                             want.frames[f].len, "%s", specs[s]);
        }
        cr_assert_arr_eq(ef_residual(e1), ef_residual(e0), n * sizeof(float),
                         "%s", specs[s]);
        /* A refused step clears the setting too. */
        g[5] = NAN;
        cr_assert_eq(codec_set_output(c1, dst, cap), FLPS_OK);
        cr_assert_eq(ef_step(e1, c1, g, &got), FLPS_ENONFINITE);
        g[5] = 0.5f;
        cr_assert_eq(ef_step(e1, c1, g, &got), FLPS_OK);
        cr_assert(got.frames[0].data < dst || got.frames[0].data >= dst + cap,
                  "%s: the codec's own buffers again", specs[s]);
        ef_destroy(e0);
        ef_destroy(e1);
        codec_destroy(c0);
        codec_destroy(c1);
        free(dst);
    }
    free(g);
}
