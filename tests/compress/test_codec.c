/* Tests for compress/codec*.c: specs, each codec's bound, and strict
 * validation of frames on decode. */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "compress/codec.h"
#include "compress/codec_impl.h"
#include "compress/topk.h"
#include "tests/compress/avx_asm.h"

static const char *const all_specs[] = {
    "dense",    "fp16",   "topk:0.01", "gtopk:0.01", "randk:0.01",
    "dgc:0.01", "qsgd:4", "qsgd:1",    "qsgd:8",     "sign"};
#define NSPECS (sizeof(all_specs) / sizeof(all_specs[0]))

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static double rng_unit(void)
{
    return (double)(flps_splitmix64(&rng_state) >> 11) * 0x1p-53;
}

static float rng_gauss(void)
{
    double u1 = 1.0 - rng_unit(), u2 = rng_unit();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static float *gauss_array(size_t n)
{
    float *a = malloc((n ? n : 1) * sizeof(*a));

    cr_assert_not_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = rng_gauss();
    return a;
}

static codec *make(const char *s, uint64_t seed)
{
    codec_spec spec;
    codec *c = NULL;

    cr_assert_eq(codec_spec_parse(s, &spec), FLPS_OK, "%s", s);
    cr_assert_eq(codec_create(&spec, seed, &c), FLPS_OK, "%s", s);
    return c;
}

/* Decode msg into a fresh zeroed array of n. */
static float *decoded(const codec *c, const codec_msg *msg, size_t n)
{
    float *d = calloc(n ? n : 1, sizeof(*d));

    cr_assert_not_null(d);
    cr_assert_eq(
        codec_decode(codec_get_spec(c), msg->frames, msg->nframes, d, n),
        FLPS_OK);
    return d;
}

Test(codec, parses_every_documented_spec_and_formats_it_back)
{
    for (size_t s = 0; s < NSPECS; s++) {
        codec_spec spec, again;
        char buf[64];

        cr_assert_eq(codec_spec_parse(all_specs[s], &spec), FLPS_OK, "%s",
                     all_specs[s]);
        cr_assert_eq(codec_spec_format(&spec, buf, sizeof(buf)), FLPS_OK);
        cr_assert_eq(codec_spec_parse(buf, &again), FLPS_OK, "%s", buf);
        cr_assert_eq(again.kind, spec.kind);
        cr_assert_eq(again.density, spec.density);
        cr_assert_eq(again.bits, spec.bits);
    }
}

Test(codec, rejects_malformed_specs)
{
    static const char *const bad[] = {
        "",          "topk",     "topk:",    "topk:0",   "topk:1.5",
        "topk:-0.1", "topk: .1", "topk:.1x", "topk:nan", "topk:inf",
        "qsgd:0",    "qsgd:9",   "qsgd:4x",  "qsgd:",    "qsgd:-1",
        "dense:1",   "sign:",    "auto",     "Topk:0.1", "topk:0.1:2"};
    codec_spec spec = {CODEC_SIGN, 0.5, 3};
    char small[4];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(codec_spec_parse(bad[i], &spec), FLPS_EINVAL, "'%s'",
                     bad[i]);
    cr_assert_eq(spec.kind, CODEC_SIGN, "out untouched on error");
    cr_assert_eq(codec_spec_parse(NULL, &spec), FLPS_EINVAL);
    cr_assert_eq(codec_spec_parse("topk:1", &spec), FLPS_OK);
    cr_assert_eq(codec_spec_format(&spec, small, sizeof(small)), FLPS_EINVAL,
                 "too small a buffer is an error, not a truncation");
}

Test(codec, names_every_kind_once_in_the_order_messages_list_them)
{
    char buf[128], spec_text[32];

    cr_assert_str_eq(codec_kind_list(),
                     "dense, topk:D, gtopk:D, randk:D, dgc:D, qsgd:BITS, "
                     "fp16, sign, auto");
    for (unsigned k = 0; k < CODEC_KIND_COUNT; k++) {
        const char *name = codec_kind_name((codec_kind)k);
        codec_param p = codec_kind_param((codec_kind)k);
        codec_spec spec, set;

        /* The name, with a parameter where the kind takes one, is what
         * both parsers read back to the kind (auto only as a setting). */
        snprintf(spec_text, sizeof(spec_text), "%s%s", name,
                 p == CODEC_PARAM_DENSITY ? ":0.5"
                 : p == CODEC_PARAM_BITS  ? ":4"
                                          : "");
        cr_assert_eq(codec_setting_parse(spec_text, &set), FLPS_OK, "%s",
                     spec_text);
        cr_assert_eq(set.kind, (codec_kind)k, "%s", spec_text);
        cr_assert_eq(codec_kind_is_sparse((codec_kind)k),
                     p == CODEC_PARAM_DENSITY, "%s", name);
        cr_assert_eq(codec_kind_sends_exact_values((codec_kind)k),
                     k == CODEC_DENSE || k == CODEC_TOPK || k == CODEC_GTOPK ||
                         k == CODEC_DGC,
                     "%s", name);
        if (k == CODEC_AUTO) {
            cr_assert_eq(codec_spec_parse(spec_text, &spec), FLPS_EINVAL,
                         "auto is no codec");
            cr_assert_eq(codec_create(&set, 1, &(codec *){NULL}), FLPS_EINVAL);
            continue;
        }
        cr_assert_eq(codec_spec_parse(spec_text, &spec), FLPS_OK, "%s",
                     spec_text);
        cr_assert_eq(spec.kind, set.kind);
        cr_assert_eq(codec_spec_format(&spec, buf, sizeof(buf)), FLPS_OK);
        cr_assert_eq(strncmp(buf, name, strlen(name)), 0, "%s", buf);
    }
    cr_assert_str_eq(codec_kind_name(CODEC_AUTO), "auto");
    cr_assert_str_eq(codec_kind_name((codec_kind)CODEC_KIND_COUNT), "unknown");
    cr_assert_eq(codec_kind_param((codec_kind)99), CODEC_PARAM_NONE);
    cr_assert_eq(codec_setting_parse("auto:1", &(codec_spec){0}), FLPS_EINVAL,
                 "auto takes no parameter");
}

Test(codec, refuses_signs_and_hex_in_a_spec_parameter)
{
    static const char *const bad[] = {
        "topk:+0.5", "topk:0x0.1p0", "topk:1e400",
        "qsgd:+4",   "qsgd:0x4",     "qsgd:18446744073709551620"};
    codec_spec spec;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(codec_spec_parse(bad[i], &spec), FLPS_EINVAL, "'%s'",
                     bad[i]);
    cr_assert_eq(codec_spec_parse("topk:5e-2", &spec), FLPS_OK);
    cr_assert_eq(spec.density, 0.05);
    cr_assert_eq(codec_spec_parse("qsgd:08", &spec), FLPS_OK);
    cr_assert_eq(spec.bits, 8);
}

Test(codec, sends_k_pairs_for_a_density)
{
    codec_spec spec;

    cr_assert_eq(codec_spec_parse("topk:0.001", &spec), FLPS_OK);
    cr_assert_eq(codec_count_for(&spec, 0), 0);
    cr_assert_eq(codec_count_for(&spec, 1), 1);
    cr_assert_eq(codec_count_for(&spec, 999), 1);
    cr_assert_eq(codec_count_for(&spec, 25000000), 25000);
    cr_assert_eq(codec_spec_parse("randk:1", &spec), FLPS_OK);
    cr_assert_eq(codec_count_for(&spec, 77), 77);
}

Test(codec, round_trips_dense_exactly_and_adds_into_the_accumulator)
{
    size_t n = 1001;
    float *a = gauss_array(n), *acc = malloc(n * sizeof(*acc));
    codec *c = make("dense", 1);
    codec_msg msg;

    for (size_t i = 0; i < n; i++)
        acc[i] = 1.0f;
    cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
    cr_assert_eq(msg.bytes, 4 * n);
    cr_assert_eq(
        codec_decode(codec_get_spec(c), msg.frames, msg.nframes, acc, n),
        FLPS_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(acc[i], 1.0f + a[i]);
    codec_destroy(c);
    free(a);
    free(acc);
}

Test(codec, round_trips_fp16_within_half_precision)
{
    size_t n = 20000;
    float *a = malloc(n * sizeof(*a)), *d;
    codec *c = make("fp16", 1);
    codec_msg msg;

    for (size_t i = 0; i < n; i++)
        a[i] = rng_gauss() * ldexpf(1.0f, (int)(i % 36) - 24);
    a[0] = 65504.0f;
    a[1] = -70000.0f; /* saturates */
    a[2] = 1e-9f;     /* below half the smallest subnormal: zero */
    a[3] = -0.0f;
    cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
    cr_assert_eq(msg.bytes, 2 * n);
    for (size_t i = 0; i < n; i++) {
        /* Whatever path the codec took (F16C or portable), the bits are
         * those of the portable round-to-nearest-even conversion. */
        uint16_t h;
        memcpy(&h, msg.frames[0].data + 2 * i, sizeof(h));
        cr_assert_eq(h, codec_f32_to_f16(a[i]), "i=%zu", i);
    }
    d = decoded(c, &msg, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, msg.frames[0].data + 2 * i, sizeof(h));
        cr_assert_eq(d[i], codec_f16_to_f32(h), "i=%zu", i);
    }
    cr_assert_eq(d[0], 65504.0f);
    cr_assert_eq(d[1], -65504.0f, "beyond the f16 range saturates");
    cr_assert_eq(d[2], 0.0f);
    for (size_t i = 4; i < n; i++) {
        float tol = fmaxf(fabsf(a[i]) * 0x1p-11f, 0x1p-25f);
        cr_assert_leq(fabsf(d[i] - a[i]), tol, "a=%g d=%g", a[i], d[i]);
    }
    codec_destroy(c);
    free(a);
    free(d);
}

#if defined(__FLT16_MAX__)
Test(codec, converts_to_and_from_fp16_as_the_compiler_does)
{
    /* Every half value back to float, and a dense sweep of floats (every
     * 97th bit pattern, plus the neighbourhoods of the range edges) to
     * half, against the compiler's round-to-nearest-even _Float16. */
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 x;
        uint16_t hb = (uint16_t)h;
        memcpy(&x, &hb, sizeof(x));
        if ((h & 0x7c00u) == 0x7c00u)
            continue; /* inf and NaN are rejected on decode */
        cr_assert_eq(codec_f16_to_f32(hb), (float)x, "h=%#x", h);
    }
    for (uint64_t u = 0; u < 0x7f800000ull; u += 97) {
        for (int neg = 0; neg < 2; neg++) {
            uint32_t bits = (uint32_t)u | (neg ? 0x80000000u : 0u);
            float f;
            _Float16 want;
            uint16_t wb;
            memcpy(&f, &bits, sizeof(f));
            if (fabsf(f) >= 65520.0f)
                continue; /* the codec saturates where _Float16 gives inf */
            want = (_Float16)f;
            memcpy(&wb, &want, sizeof(wb));
            cr_assert_eq(codec_f32_to_f16(f), wb, "f=%a", (double)f);
        }
    }
    for (int64_t d = -5000; d <= 5000; d++) {
        static const uint32_t edges[] = {0x477fe000u, 0x38800000u, 0x33000000u,
                                         0x33800000u};
        for (size_t e = 0; e < 4; e++) {
            uint32_t bits = (uint32_t)((int64_t)edges[e] + d);
            float f;
            _Float16 want;
            uint16_t wb;
            memcpy(&f, &bits, sizeof(f));
            if (fabsf(f) >= 65520.0f)
                continue;
            want = (_Float16)f;
            memcpy(&wb, &want, sizeof(wb));
            cr_assert_eq(codec_f32_to_f16(f), wb, "f=%a", (double)f);
        }
    }
}
#endif

Test(codec, topk_sends_exactly_the_top_k_pairs)
{
    size_t n = 100000, k = 1000;
    float *a = gauss_array(n);
    uint32_t *want = malloc(k * sizeof(*want));
    codec *c = make("topk:0.01", 1);
    codec_msg msg;
    const uint8_t *pv;

    cr_assert_eq(topk_select(a, n, k, want), FLPS_OK);
    cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
    cr_assert_eq(msg.count, k);
    cr_assert_eq(msg.bytes, 8 * k);
    cr_assert_arr_eq(msg.frames[0].data, want, 4 * k);
    cr_assert_arr_eq(msg.idx, want, 4 * k);
    pv = msg.frames[1].data;
    for (size_t j = 0; j < k; j++)
        cr_assert_eq(codec_load_f32(pv + 4 * j), a[want[j]]);
    codec_destroy(c);
    free(a);
    free(want);
}

Test(codec, randk_sends_k_distinct_indices_scaled_to_be_unbiased)
{
    size_t n = 200, k = 20, trials = 20000;
    float *a = gauss_array(n);
    double *sum = calloc(n, sizeof(*sum));
    codec *c = make("randk:0.1", 7);

    for (size_t t = 0; t < trials; t++) {
        codec_msg msg;
        float *d;
        cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
        cr_assert_eq(msg.count, k);
        for (size_t j = 1; j < k; j++)
            cr_assert_gt(msg.idx[j], msg.idx[j - 1]);
        d = decoded(c, &msg, n);
        for (size_t i = 0; i < n; i++)
            sum[i] += d[i];
        free(d);
    }
    /* Each element is sent with probability k/n = 0.1 as a * 10: the mean
     * is a, with standard deviation |a| * 3 / sqrt(trials). */
    for (size_t i = 0; i < n; i++) {
        double mean = sum[i] / (double)trials;
        double sd = fabs(a[i]) * 3.0 / sqrt((double)trials);
        cr_assert_leq(fabs(mean - a[i]), 5.0 * sd + 1e-6, "i=%zu %g vs %g", i,
                      mean, (double)a[i]);
    }
    codec_destroy(c);
    free(a);
    free(sum);
}

Test(codec, dgc_sends_within_a_fifth_of_k_and_reports_the_count)
{
    static const size_t ns[] = {100, 5000, 200000, 2000000};
    static const char *const specs[] = {"dgc:0.001", "dgc:0.01", "dgc:0.1"};

    for (size_t s = 0; s < 4; s++) {
        float *a = gauss_array(ns[s]);
        for (size_t p = 0; p < 3; p++) {
            codec *c = make(specs[p], 11);
            size_t k = codec_count_for(codec_get_spec(c), ns[s]);
            for (int rep = 0; rep < 3; rep++) {
                codec_msg msg;
                float *d;
                cr_assert_eq(codec_encode(c, a, ns[s], &msg), FLPS_OK);
                cr_assert_geq(msg.count, k - k / 5, "%s n=%zu", specs[p],
                              ns[s]);
                cr_assert_leq(msg.count, k + k / 5, "%s n=%zu", specs[p],
                              ns[s]);
                cr_assert_eq(msg.bytes, 8 * msg.count);
                d = decoded(c, &msg, ns[s]);
                for (size_t j = 0; j < msg.count; j++)
                    cr_assert_eq(d[msg.idx[j]], a[msg.idx[j]]);
                free(d);
            }
            codec_destroy(c);
        }
        free(a);
    }
}

Test(codec, qsgd_is_unbiased_over_many_seeds)
{
    size_t n = 1100, trials = 3000; /* three buckets, the last partial */
    float *a = gauss_array(n);
    double *sum = calloc(n, sizeof(*sum));
    codec *c = make("qsgd:2", 5);

    for (size_t t = 0; t < trials; t++) {
        codec_msg msg;
        float *d;
        cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
        cr_assert_eq(msg.bytes, 4 * 3 + (n * 3 + 7) / 8);
        d = decoded(c, &msg, n);
        for (size_t i = 0; i < n; i++)
            sum[i] += d[i];
        free(d);
    }
    /* A level's spacing is norm / 3; the rounding noise has standard
     * deviation at most half of that. Bucket norms are about sqrt(512). */
    for (size_t i = 0; i < n; i++) {
        double sd = sqrt(512.0) / 3.0 / 2.0 / sqrt((double)trials) * 1.2;
        double mean = sum[i] / (double)trials;
        cr_assert_leq(fabs(mean - a[i]), 5.0 * sd, "i=%zu %g vs %g", i, mean,
                      (double)a[i]);
    }
    codec_destroy(c);
    free(a);
    free(sum);
}

Test(codec, qsgd_levels_stay_within_one_step_of_the_value)
{
    static const unsigned bits[] = {1, 4, 8};

    for (size_t b = 0; b < 3; b++) {
        size_t n = 2000;
        float *a = gauss_array(n), *d;
        char spec[16];
        codec *c;
        codec_msg msg;
        snprintf(spec, sizeof(spec), "qsgd:%u", bits[b]);
        c = make(spec, 3);
        a[600] = 1e-42f; /* a bucket of denormals must not overflow */
        for (size_t i = 512; i < 1024; i++)
            a[i] = a[i] * 1e-41f;
        cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
        d = decoded(c, &msg, n);
        for (size_t i = 0; i < n; i++) {
            float norm = codec_load_f32(msg.frames[0].data + 4 * (i / 512));
            float step = norm / (float)((1u << bits[b]) - 1);
            cr_assert_leq(fabsf(d[i] - a[i]), step * 1.0001f + 1e-45f,
                          "%s i=%zu", spec, i);
            cr_assert(d[i] == 0.0f || (d[i] < 0) == (a[i] < 0));
        }
        codec_destroy(c);
        free(a);
        free(d);
    }
}

Test(codec, sign_sends_one_bit_per_element_and_the_mean_magnitude)
{
    size_t n = 1003;
    float *a = gauss_array(n), *d;
    double mean = 0.0;
    codec *c = make("sign", 1);
    codec_msg msg;

    for (size_t i = 0; i < n; i++)
        mean += fabs(a[i]) / (double)n;
    cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
    cr_assert_eq(msg.bytes, 4 + (n + 7) / 8);
    cr_assert_float_eq(codec_load_f32(msg.frames[0].data), (float)mean, 1e-5);
    d = decoded(c, &msg, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(d[i], a[i] < 0 ? -(float)mean : (float)mean);
    codec_destroy(c);
    free(a);
    free(d);
}

Test(codec, refuses_to_encode_nan_or_infinity)
{
    static const float bad[] = {NAN, INFINITY, -INFINITY};

    for (size_t s = 0; s < NSPECS; s++) {
        for (size_t b = 0; b < 3; b++) {
            size_t n = 5000;
            float *a = gauss_array(n);
            codec *c = make(all_specs[s], 1);
            codec_msg msg;
            memset(&msg, 0xab, sizeof(msg));
            a[(b * 1777) % n] = bad[b];
            cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_ENONFINITE, "%s",
                         all_specs[s]);
            cr_assert_eq(msg.nframes, (size_t)0xabababababababababull,
                         "nothing is written on error");
            codec_destroy(c);
            free(a);
        }
    }
}

Test(codec, handles_empty_single_and_full_arrays)
{
    static const char *const full[] = {"topk:1", "randk:1", "dgc:1", "gtopk:1"};

    for (size_t s = 0; s < NSPECS; s++) {
        static const size_t ns[] = {0, 1, 2, 7};
        for (size_t t = 0; t < 4; t++) {
            size_t n = ns[t];
            float a[7] = {-3.0f, 2.0f, 0.5f, -0.25f, 1.0f, 0.0f, -2.0f};
            codec *c = make(all_specs[s], 1);
            codec_msg msg;
            float *d;
            cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK, "%s n=%zu",
                         all_specs[s], n);
            cr_assert_leq(msg.bytes, codec_max_bytes(codec_get_spec(c), n));
            d = decoded(c, &msg, n);
            if (n == 1 && strcmp(all_specs[s], "sign") != 0 &&
                strncmp(all_specs[s], "qsgd", 4) != 0)
                cr_assert_float_eq(d[0], -3.0f, 1e-3, "%s", all_specs[s]);
            free(d);
            codec_destroy(c);
        }
    }
    for (size_t s = 0; s < 4; s++) {
        size_t n = 300;
        float *a = gauss_array(n), *d;
        codec *c = make(full[s], 1);
        codec_msg msg;
        cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
        cr_assert_eq(msg.count, n, "%s sends everything", full[s]);
        d = decoded(c, &msg, n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(d[i], a[i]);
        free(d);
        free(a);
        codec_destroy(c);
    }
}

Test(codec, reports_bytes_within_the_advertised_bound)
{
    size_t n = 100000;
    float *a = gauss_array(n);

    for (size_t s = 0; s < NSPECS; s++) {
        codec *c = make(all_specs[s], 1);
        codec_msg msg;
        size_t sum = 0;
        cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
        for (size_t f = 0; f < msg.nframes; f++)
            sum += msg.frames[f].len;
        cr_assert_eq(sum, msg.bytes);
        cr_assert_eq(msg.nframes, codec_nframes(codec_get_spec(c)));
        cr_assert_leq(msg.bytes, codec_max_bytes(codec_get_spec(c), n), "%s",
                      all_specs[s]);
        codec_destroy(c);
    }
    free(a);
}

/* Decode with frames copied and altered by fn; expect err, acc unchanged. */
static void expect_reject(const char *spec_s, size_t n, flps_err want,
                          void (*fn)(codec_frame *fr, uint8_t **bufs,
                                     size_t *nframes, size_t n))
{
    float *a = gauss_array(n);
    float *acc = malloc(n * sizeof(*acc));
    codec *c = make(spec_s, 1);
    codec_msg msg;
    codec_frame fr[CODEC_MAX_FRAMES + 1];
    uint8_t *bufs[CODEC_MAX_FRAMES + 1] = {0};
    size_t nframes;

    cr_assert_eq(codec_encode(c, a, n, &msg), FLPS_OK);
    nframes = msg.nframes;
    for (size_t f = 0; f < CODEC_MAX_FRAMES + 1; f++) {
        size_t len = f < nframes ? msg.frames[f].len : 0;
        bufs[f] = calloc(len + 8, 1);
        if (len > 0)
            memcpy(bufs[f], msg.frames[f].data, len);
        fr[f].data = bufs[f];
        fr[f].len = len;
    }
    fn(fr, bufs, &nframes, n);
    for (size_t i = 0; i < n; i++)
        acc[i] = 0.5f;
    cr_assert_eq(codec_decode(codec_get_spec(c), fr, nframes, acc, n), want,
                 "%s", spec_s);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(acc[i], 0.5f, "%s: acc untouched on error", spec_s);
    for (size_t f = 0; f < CODEC_MAX_FRAMES + 1; f++)
        free(bufs[f]);
    codec_destroy(c);
    free(a);
    free(acc);
}

static void drop_last_frame(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)fr, (void)b, (void)n;
    (*nf)--;
}

static void add_a_frame(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)fr, (void)b, (void)n;
    (*nf)++;
}

static void shorten_frame0(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)b, (void)nf, (void)n;
    fr[0].len--;
}

static void lengthen_last(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)b, (void)n;
    fr[*nf - 1].len++;
}

static void drop_a_pair(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)b, (void)nf, (void)n;
    fr[0].len -= 4;
    fr[1].len -= 4;
}

static void index_past_n(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    uint32_t v = (uint32_t)n;
    (void)fr, (void)nf;
    memcpy(b[0] + fr[0].len - 4, &v, 4);
}

static void swap_two_indices(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    uint8_t t[4];
    (void)fr, (void)nf, (void)n;
    memcpy(t, b[0], 4);
    memcpy(b[0], b[0] + 4, 4);
    memcpy(b[0] + 4, t, 4);
}

static void repeat_an_index(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)fr, (void)nf, (void)n;
    memcpy(b[0] + 4, b[0], 4);
}

static void nan_value(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    float v = NAN;
    (void)fr, (void)nf, (void)n;
    memcpy(b[1] + 8, &v, 4);
}

static void inf_first_f32(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    float v = -INFINITY;
    (void)fr, (void)nf, (void)n;
    memcpy(b[0], &v, 4);
}

static void negative_first_f32(codec_frame *fr, uint8_t **b, size_t *nf,
                               size_t n)
{
    float v = -1.0f;
    (void)fr, (void)nf, (void)n;
    memcpy(b[0], &v, 4);
}

static void inf_half(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)fr, (void)nf, (void)n;
    b[0][2] = 0x00;
    b[0][3] = 0x7c;
}

static void padding_bit(codec_frame *fr, uint8_t **b, size_t *nf, size_t n)
{
    (void)b, (void)nf, (void)n;
    b[1][fr[1].len - 1] |= 0x80;
}

Test(codec, decode_rejects_a_wrong_frame_count_or_size)
{
    for (size_t s = 0; s < NSPECS; s++) {
        expect_reject(all_specs[s], 5000, FLPS_EPROTO, drop_last_frame);
        expect_reject(all_specs[s], 5000, FLPS_EPROTO, add_a_frame);
        expect_reject(all_specs[s], 5000, FLPS_EPROTO, shorten_frame0);
        expect_reject(all_specs[s], 5000, FLPS_EPROTO, lengthen_last);
    }
    expect_reject("topk:0.01", 5000, FLPS_EPROTO, drop_a_pair);
    expect_reject("randk:0.01", 5000, FLPS_EPROTO, drop_a_pair);
}

Test(codec, decode_rejects_bad_indices_and_values)
{
    static const char *const sparse[] = {"topk:0.01", "gtopk:0.01",
                                         "randk:0.01", "dgc:0.01"};

    for (size_t s = 0; s < 4; s++) {
        expect_reject(sparse[s], 5000, FLPS_ERANGE, index_past_n);
        expect_reject(sparse[s], 5000, FLPS_EPROTO, swap_two_indices);
        expect_reject(sparse[s], 5000, FLPS_EPROTO, repeat_an_index);
        expect_reject(sparse[s], 5000, FLPS_ENONFINITE, nan_value);
    }
    expect_reject("dense", 100, FLPS_ENONFINITE, inf_first_f32);
    expect_reject("fp16", 100, FLPS_ENONFINITE, inf_half);
    expect_reject("qsgd:4", 1000, FLPS_ENONFINITE, inf_first_f32);
    expect_reject("qsgd:4", 1000, FLPS_EPROTO, negative_first_f32);
    expect_reject("qsgd:2", 1001, FLPS_EPROTO, padding_bit);
    expect_reject("sign", 1000, FLPS_ENONFINITE, inf_first_f32);
    expect_reject("sign", 1000, FLPS_EPROTO, negative_first_f32);
    expect_reject("sign", 1001, FLPS_EPROTO, padding_bit);
}

Test(codec, repeats_a_run_from_the_same_seed)
{
    static const char *const seeded[] = {"randk:0.01", "dgc:0.01", "qsgd:4"};
    size_t n = 300000;
    float *a = gauss_array(n);

    for (size_t s = 0; s < 3; s++) {
        codec *c1 = make(seeded[s], 99), *c2 = make(seeded[s], 99);
        codec_msg m1, m2;
        uint8_t *first = NULL;
        size_t first_len = 0;
        for (int t = 0; t < 2; t++) {
            cr_assert_eq(codec_encode(c1, a, n, &m1), FLPS_OK);
            cr_assert_eq(codec_encode(c2, a, n, &m2), FLPS_OK);
            cr_assert_eq(m1.bytes, m2.bytes);
            for (size_t f = 0; f < m1.nframes; f++)
                cr_assert_arr_eq(m1.frames[f].data, m2.frames[f].data,
                                 m1.frames[f].len, "%s", seeded[s]);
            if (t == 0) {
                first_len = m1.frames[m1.nframes - 1].len;
                first = malloc(first_len);
                memcpy(first, m1.frames[m1.nframes - 1].data, first_len);
            } else if (strncmp(seeded[s], "dgc", 3) != 0) {
                cr_assert(first_len != m1.frames[m1.nframes - 1].len ||
                              memcmp(first, m1.frames[m1.nframes - 1].data,
                                     first_len) != 0,
                          "%s: the next encode draws fresh randomness",
                          seeded[s]);
            }
        }
        free(first);
        codec_destroy(c1);
        codec_destroy(c2);
    }
    free(a);
}

Test(codec, reports_out_of_memory_without_leaking)
{
    size_t n = 200000;
    float *a = gauss_array(n);

    for (size_t s = 0; s < NSPECS; s++) {
        codec_spec spec;
        flps_err rc = FLPS_ENOMEM;
        cr_assert_eq(codec_spec_parse(all_specs[s], &spec), FLPS_OK);
        for (unsigned long fail = 1; rc == FLPS_ENOMEM; fail++) {
            codec *c = NULL;
            codec_msg msg;
            flps_alloc_fail_at(fail);
            rc = codec_create(&spec, 1, &c);
            if (rc == FLPS_OK)
                rc = codec_encode(c, a, n, &msg);
            flps_alloc_fail_at(0);
            cr_assert(rc == FLPS_OK || rc == FLPS_ENOMEM, "%s", all_specs[s]);
            codec_destroy(c);
            cr_assert_lt(fail, 20);
        }
    }
    free(a);
}

Test(codec, rejects_null_arguments)
{
    codec_spec spec = {CODEC_DENSE, 0.0, 0};
    codec *c = NULL;
    codec_msg msg;
    float a[1] = {1.0f};

    cr_assert_eq(codec_create(NULL, 0, &c), FLPS_EINVAL);
    cr_assert_eq(codec_create(&spec, 0, NULL), FLPS_EINVAL);
    spec.kind = (codec_kind)99;
    cr_assert_eq(codec_create(&spec, 0, &c), FLPS_EINVAL);
    spec.kind = CODEC_DENSE;
    cr_assert_eq(codec_create(&spec, 0, &c), FLPS_OK);
    cr_assert_eq(codec_encode(c, NULL, 1, &msg), FLPS_EINVAL);
    cr_assert_eq(codec_encode(c, a, 1, NULL), FLPS_EINVAL);
    cr_assert_eq(codec_decode(&spec, NULL, 1, a, 1), FLPS_EINVAL);
    codec_destroy(c);
    codec_destroy(NULL);
}

/* ---- the fused form for error feedback ---- */

Test(codec, fused_encode_sends_what_encode_sends_and_keeps_the_rest_in_r)
{
    static const char *const specs[] = {"dense", "topk:0.01", "gtopk:0.2",
                                        "dgc:0.01"};
    size_t n = 4000;
    float *r = malloc(n * sizeof(*r)), *u = malloc(n * sizeof(*u));
    float *g = malloc(n * sizeof(*g)), *a = malloc(n * sizeof(*a));

    cr_assert_not_null(r);
    cr_assert_not_null(u);
    cr_assert_not_null(g);
    cr_assert_not_null(a);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        codec *c = make(specs[s], 3), *ref = make(specs[s], 3);
        for (int withu = 0; withu < 2; withu++) {
            codec_msg got, want;
            for (size_t i = 0; i < n; i++) {
                r[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
                u[i] = (float)((i * 104729) % 777) / 300.0f - 1.2f;
                g[i] = (float)((i * 31) % 101) / 50.0f - 1.0f;
                a[i] = withu ? r[i] + (0.5f * u[i] + g[i]) : r[i] + g[i];
            }
            cr_assert_eq(codec_encode(ref, a, n, &want), FLPS_OK);
            cr_assert_eq(
                codec_encode_fused(c, r, withu ? u : NULL, g, 0.5f, n, &got),
                FLPS_OK, "%s", specs[s]);
            cr_assert_eq(got.count, want.count, "%s", specs[s]);
            cr_assert_eq(got.nframes, want.nframes);
            for (size_t f = 0; f < got.nframes; f++) {
                cr_assert_eq(got.frames[f].len, want.frames[f].len);
                cr_assert_arr_eq(got.frames[f].data, want.frames[f].data,
                                 want.frames[f].len, "%s frame %zu", specs[s],
                                 f);
            }
            if (want.idx == NULL)
                memset(a, 0, n * sizeof(*a));
            else
                for (size_t j = 0; j < want.count; j++)
                    a[want.idx[j]] = 0.0f;
            for (size_t i = 0; i < n; i++)
                cr_assert(r[i] == a[i], "%s: r[%zu] = %g, want %g", specs[s], i,
                          (double)r[i], (double)a[i]);
        }
        codec_destroy(c);
        codec_destroy(ref);
    }
    free(r);
    free(u);
    free(g);
    free(a);
}

Test(codec, fused_encode_refuses_the_quantising_codecs)
{
    static const char *const specs[] = {"fp16", "qsgd:8", "sign", "randk:0.5"};
    float r[8] = {0}, g[8] = {1.0f};
    codec_msg msg;

    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        codec *c = make(specs[s], 1);
        cr_assert_eq(codec_encode_fused(c, r, NULL, g, 0.0f, 8, &msg),
                     FLPS_EINVAL, "%s", specs[s]);
        cr_assert_eq(r[0], 0.0f, "%s: nothing moved", specs[s]);
        codec_destroy(c);
    }
    cr_assert_eq(codec_encode_fused(NULL, r, NULL, g, 0.0f, 8, &msg),
                 FLPS_EINVAL);
}

Test(codec, every_avx_path_clears_the_upper_ymm_state_before_it_leaves)
{
    static const char *const prefixes[] = {"codec_", "topk_", "ef_", NULL};
    avx_asm_result res;

    if (avx_asm_check(prefixes, &res) != 0)
        cr_skip_test("objdump cannot disassemble the test binary");
#if defined(__x86_64__)
    cr_assert_geq(res.functions, 2, "the F16C functions were found");
#endif
    cr_assert_eq(res.violations, 0, "%s", res.report);
}

/* ---- encoding into the caller's buffer ---- */

Test(codec, encodes_into_the_callers_buffer_once_with_the_same_frames)
{
    size_t n = 3001;
    float *a = gauss_array(n);

    for (size_t s = 0; s < sizeof(all_specs) / sizeof(all_specs[0]); s++) {
        codec *c = make(all_specs[s], 9), *ref = make(all_specs[s], 9);
        size_t cap = codec_max_bytes(codec_get_spec(c), n);
        uint8_t *dst = malloc(cap);
        codec_msg got, want, again;
        size_t off = 0;

        cr_assert_not_null(dst);
        cr_assert_eq(codec_encode(ref, a, n, &want), FLPS_OK);
        cr_assert_eq(codec_set_output(c, dst, cap), FLPS_OK);
        cr_assert_eq(codec_encode(c, a, n, &got), FLPS_OK, "%s", all_specs[s]);
        cr_assert_eq(got.nframes, want.nframes);
        cr_assert_eq(got.count, want.count);
        for (size_t f = 0; f < got.nframes; f++) {
            cr_assert_eq(got.frames[f].len, want.frames[f].len);
            cr_assert_arr_eq(got.frames[f].data, want.frames[f].data,
                             want.frames[f].len, "%s frame %zu", all_specs[s],
                             f);
            if (!codec_kind_is_sparse(codec_get_spec(c)->kind))
                cr_assert_eq(got.frames[f].data, dst + off,
                             "%s: frame %zu follows the one before",
                             all_specs[s], f);
            cr_assert(got.frames[f].data >= dst &&
                          got.frames[f].data + got.frames[f].len <= dst + cap,
                      "%s: frame %zu lies in the caller's buffer", all_specs[s],
                      f);
            off += got.frames[f].len;
        }
        /* One encode only: the next writes into the codec's buffers. */
        cr_assert_eq(codec_encode(c, a, n, &again), FLPS_OK);
        cr_assert(again.frames[0].data < dst ||
                      again.frames[0].data >= dst + cap,
                  "%s", all_specs[s]);
        /* Too small: refused, and the codec's buffers still work. */
        cr_assert_eq(codec_set_output(c, dst, 1), FLPS_OK);
        cr_assert_eq(codec_encode(c, a, n, &got), FLPS_EINVAL, "%s",
                     all_specs[s]);
        cr_assert_eq(codec_encode(c, a, n, &again), FLPS_OK);
        free(dst);
        codec_destroy(c);
        codec_destroy(ref);
    }
    cr_assert_eq(codec_set_output(NULL, NULL, 0), FLPS_EINVAL);
    free(a);
}
