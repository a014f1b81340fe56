/* Tests for services/plan.c: profile JSON in, LAGS plan JSON out, and the
 * plan parser. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "services/plan.h"

/* An MLP's layout, 1 GB/s and 50 us a message. Backprop runs fc3 first and
 * fc1.weight last: fc1.weight hides behind nothing, fc2.weight behind
 * fc1's 0.31 ms of backward. */
static const char *profile_ok =
    "{\"event\":\"profile\",\"iteration\":25,\"workers\":2,\"alpha\":5e-05,"
    "\"beta\":1e-09,\"layers\":["
    "{\"name\":\"fc1.weight\",\"numel\":200704,\"t_backward\":0.0003},"
    "{\"name\":\"fc1.bias\",\"numel\":256,\"t_backward\":0.00001},"
    "{\"name\":\"fc2.weight\",\"numel\":65536,\"t_backward\":0.0002},"
    "{\"name\":\"fc2.bias\",\"numel\":256,\"t_backward\":0.00001},"
    "{\"name\":\"fc3.weight\",\"numel\":2560,\"t_backward\":0.00005},"
    "{\"name\":\"fc3.bias\",\"numel\":10,\"t_backward\":0.000001}]}";

static json_t *plan_layer_json(json_t *doc, size_t i)
{
    return json_array_get(json_object_get(doc, "layers"), i);
}

static const char *str_of(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    cr_assert_not_null(s, "no string %s", k);
    return s;
}

static double num_of(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    cr_assert(json_is_number(v), "no number %s", k);
    return json_number_value(v);
}

static json_t *plan_doc(const char *profile, uint64_t version)
{
    char *text = NULL, err[256] = "";
    json_t *doc;

    cr_assert_eq(plan_from_profile(profile, version, &text, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_not_null(text);
    cr_assert_null(strchr(text, '\n'), "one line");
    doc = json_loads(text, 0, NULL);
    cr_assert_not_null(doc, "%s", text);
    free(text);
    return doc;
}

Test(plan, gives_a_layer_that_cannot_hide_a_lower_density_than_one_that_can)
{
    json_t *doc = plan_doc(profile_ok, 1);
    json_t *fc1 = plan_layer_json(doc, 0), *fc2 = plan_layer_json(doc, 2);

    cr_assert_eq(json_array_size(json_object_get(doc, "layers")), 6);
    cr_assert_str_eq(str_of(fc1, "name"), "fc1.weight", "layout order");
    cr_assert_str_eq(str_of(fc2, "name"), "fc2.weight");
    cr_assert_str_eq(str_of(fc1, "codec"), "topk");
    cr_assert_str_eq(str_of(fc2, "codec"), "topk");
    cr_assert_float_eq(num_of(fc1, "density"), 0.001, 1e-12,
                       "nothing left to hide behind: rho_min");
    /* rho = (t_hide / 2 - alpha) / (8 d beta) with t_hide = 0.31 ms */
    cr_assert_float_eq(num_of(fc2, "density"),
                       (0.00031 / 2 - 5e-5) / (8 * 65536 * 1e-9), 1e-9);
    cr_assert_lt(num_of(fc1, "density"), num_of(fc2, "density"));
    cr_assert_eq(num_of(fc1, "numel"), 200704);
    json_decref(doc);
}

Test(plan, keeps_tiny_layers_dense)
{
    json_t *doc = plan_doc(profile_ok, 1);
    size_t tiny[] = {1, 3, 4, 5};

    for (size_t i = 0; i < 4; i++) {
        json_t *l = plan_layer_json(doc, tiny[i]);
        cr_assert_str_eq(str_of(l, "codec"), "dense", "%s", str_of(l, "name"));
        cr_assert(json_is_integer(json_object_get(l, "density")));
        cr_assert_eq(num_of(l, "density"), 1);
    }
    json_decref(doc);
}

Test(plan, predicts_no_slower_than_all_dense)
{
    json_t *doc = plan_doc(profile_ok, 1);
    double t = num_of(doc, "predicted_iteration_seconds");
    double d = num_of(doc, "dense_iteration_seconds");

    cr_assert_gt(t, 0.0);
    cr_assert_leq(t, d);
    /* Dense fc1.weight alone costs 2 (alpha + 4 d beta) = 1.7 ms. */
    cr_assert_gt(d, 0.0017);
    cr_assert_lt(t, d / 2, "sparsifying fc1.weight saves most of it");
    json_decref(doc);
}

Test(plan, sends_everything_dense_when_communication_hides)
{
    /* 10 ms of backward after fc2.weight: its 0.6 ms push hides. */
    const char *p =
        "{\"event\":\"profile\",\"iteration\":3,\"workers\":1,\"alpha\":1e-5,"
        "\"beta\":1e-9,\"layers\":["
        "{\"name\":\"a\",\"numel\":100,\"t_backward\":0.01},"
        "{\"name\":\"b\",\"numel\":65536,\"t_backward\":0.001}]}";
    json_t *doc = plan_doc(p, 1);

    cr_assert_str_eq(str_of(plan_layer_json(doc, 1), "codec"), "dense");
    cr_assert_eq(num_of(doc, "predicted_iteration_seconds"),
                 num_of(doc, "dense_iteration_seconds"));
    json_decref(doc);
}

Test(plan, passes_the_version_through)
{
    json_t *doc = plan_doc(profile_ok, 7);

    cr_assert(json_is_integer(json_object_get(doc, "version")));
    cr_assert_eq(json_integer_value(json_object_get(doc, "version")), 7);
    json_decref(doc);
}

Test(plan, round_trips_through_plan_parse)
{
    char *text = NULL;
    plan *p = NULL;
    json_t *doc;

    cr_assert_eq(plan_from_profile(profile_ok, 42, &text, NULL, 0), FLPS_OK);
    cr_assert_eq(plan_parse(text, &p, NULL, 0), FLPS_OK, "%s", text);
    doc = json_loads(text, 0, NULL);
    cr_assert_eq(p->version, 42);
    cr_assert_eq(p->nlayers, 6);
    for (size_t i = 0; i < p->nlayers; i++) {
        json_t *l = plan_layer_json(doc, i);
        codec_spec s = plan_layer_spec(&p->layers[i]);
        cr_assert_str_eq(p->layers[i].name, str_of(l, "name"));
        cr_assert_eq(p->layers[i].numel, (uint64_t)num_of(l, "numel"));
        cr_assert_eq(p->layers[i].kind, strcmp(str_of(l, "codec"), "dense")
                                            ? CODEC_TOPK
                                            : CODEC_DENSE);
        cr_assert_eq(p->layers[i].density, num_of(l, "density"),
                     "exact through %%.17g");
        cr_assert_eq(s.kind, p->layers[i].kind);
        cr_assert_eq(s.density, p->layers[i].density);
    }
    cr_assert_str_eq(p->layers[0].name, "fc1.weight");
    cr_assert_eq(p->layers[0].kind, CODEC_TOPK);
    cr_assert_eq(p->layers[5].kind, CODEC_DENSE);
    cr_assert_eq(p->predicted_iteration_seconds,
                 num_of(doc, "predicted_iteration_seconds"));
    cr_assert_eq(p->dense_iteration_seconds,
                 num_of(doc, "dense_iteration_seconds"));
    json_decref(doc);
    plan_free(p);
    free(text);
}

/* The profile refused, FLPS_EPROTO, *plan_json untouched, and the message
 * contains each of the words. */
static void refused(const char *profile, const char *w1, const char *w2)
{
    char err[256] = "", *text = (char *)"untouched";

    cr_assert_eq(plan_from_profile(profile, 1, &text, err, sizeof(err)),
                 FLPS_EPROTO, "accepted: %s", profile);
    cr_assert_str_eq(text, "untouched");
    cr_assert_not_null(strstr(err, w1), "'%s' lacks '%s'", err, w1);
    if (w2 != NULL)
        cr_assert_not_null(strstr(err, w2), "'%s' lacks '%s'", err, w2);
}

#define HEAD "{\"event\":\"profile\",\"iteration\":25,\"workers\":2,"
#define NET "\"alpha\":5e-05,\"beta\":1e-09,"
#define L1 "{\"name\":\"w\",\"numel\":8192,\"t_backward\":0.001}"

Test(plan, refuses_a_profile_without_a_key_and_names_it)
{
    refused(HEAD "\"alpha\":5e-05,\"layers\":[" L1 "]}", "beta", "missing");
    refused("{\"event\":\"profile\",\"workers\":2," NET "\"layers\":[" L1 "]}",
            "iteration", "missing");
    refused(HEAD NET "\"layers\":[{\"name\":\"w\",\"t_backward\":0.001}]}",
            "layers[0].numel", "missing");
    refused(HEAD "\"alpha\":5e-05,\"beta\":1e-09}", "layers", "missing");
    refused("{\"iteration\":25,\"workers\":2," NET "\"layers\":[" L1 "]}",
            "event", NULL);
}

Test(plan, refuses_a_field_of_the_wrong_type_and_names_it)
{
    refused(HEAD NET "\"layers\":[" L1
                     ",{\"name\":\"b\",\"numel\":\"10\",\"t_backward\":0}]}",
            "layers[1].numel", "integer");
    refused(HEAD NET "\"layers\":[{\"name\":\"w\",\"numel\":8192.0,"
                     "\"t_backward\":0.001}]}",
            "layers[0].numel", "integer");
    refused("{\"event\":\"profile\",\"iteration\":25,\"workers\":\"2\"," NET
            "\"layers\":[" L1 "]}",
            "workers", "integer");
    refused(HEAD "\"alpha\":\"fast\",\"beta\":1e-9,\"layers\":[" L1 "]}",
            "alpha", "number");
    refused(HEAD NET "\"layers\":[{\"name\":7,\"numel\":1,\"t_backward\":0}]}",
            "layers[0].name", "string");
    refused(HEAD NET "\"layers\":{}}", "layers", "array");
    refused(HEAD NET "\"layers\":[3]}", "layers[0]", "object");
    refused("[1,2]", "object", NULL);
    refused("{\"event\":\"profile\"", "JSON", NULL);
}

Test(plan, refuses_a_number_too_large_for_a_double_and_names_the_field)
{
    /* JSON has no NaN or Inf: they arrive as an overflowing number. */
    refused(HEAD NET "\"layers\":[{\"name\":\"w\",\"numel\":8192,"
                     "\"t_backward\":1e999}]}",
            "t_backward", "overflow");
    refused(HEAD "\"alpha\":-1e999,\"beta\":1e-9,\"layers\":[" L1 "]}", "alpha",
            NULL);
}

Test(plan, refuses_negative_or_zero_times_and_costs)
{
    refused(HEAD NET "\"layers\":[" L1
                     ",{\"name\":\"b\",\"numel\":10,\"t_backward\":-0.001}]}",
            "layers[1].t_backward", ">= 0");
    refused(HEAD "\"alpha\":0,\"beta\":1e-9,\"layers\":[" L1 "]}", "alpha",
            "> 0");
    refused(HEAD "\"alpha\":1e-5,\"beta\":-1e-9,\"layers\":[" L1 "]}", "beta",
            "> 0");
    refused("{\"event\":\"profile\",\"iteration\":25,\"workers\":0," NET
            "\"layers\":[" L1 "]}",
            "workers", "below 1");
    refused(HEAD NET "\"layers\":[{\"name\":\"w\",\"numel\":0,"
                     "\"t_backward\":0.001}]}",
            "layers[0].numel", "below 1");
    refused(HEAD NET "\"layers\":[{\"name\":\"w\",\"numel\":4294967296,"
                     "\"t_backward\":0.001}]}",
            "layers[0].numel", "2^32");
}

Test(plan, refuses_duplicate_empty_or_long_names)
{
    char big[512], name[200];

    refused(HEAD NET "\"layers\":[" L1 "," L1 "]}", "\"w\"", "twice");
    refused(HEAD NET "\"layers\":[{\"name\":\"\",\"numel\":1,"
                     "\"t_backward\":0}]}",
            "layers[0].name", NULL);
    memset(name, 'x', 128);
    name[128] = '\0';
    snprintf(big, sizeof(big),
             HEAD NET "\"layers\":[{\"name\":\"%s\",\"numel\":1,"
                      "\"t_backward\":0}]}",
             name);
    refused(big, "layers[0].name", "127");
    /* 127 bytes are fine. */
    name[127] = '\0';
    snprintf(big, sizeof(big),
             HEAD NET "\"layers\":[{\"name\":\"%s\",\"numel\":1,"
                      "\"t_backward\":0}]}",
             name);
    json_decref(plan_doc(big, 1));
}

Test(plan, refuses_an_empty_layer_list)
{
    refused(HEAD NET "\"layers\":[]}", "layers", "empty");
}

Test(plan, refuses_costs_that_overflow_the_model)
{
    refused(HEAD "\"alpha\":1e-5,\"beta\":1e308,\"layers\":[" L1 "]}",
            "overflow", NULL);
    refused(HEAD NET "\"layers\":[{\"name\":\"a\",\"numel\":1,"
                     "\"t_backward\":1e308},{\"name\":\"b\",\"numel\":1,"
                     "\"t_backward\":1e308}]}",
            "backward", NULL);
}

Test(plan, refuses_null_arguments)
{
    char *text = NULL;
    plan *p = NULL;

    cr_assert_eq(plan_from_profile(NULL, 1, &text, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(plan_from_profile(profile_ok, 1, NULL, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(plan_parse(NULL, &p, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(plan_parse("{}", NULL, NULL, 0), FLPS_EINVAL);
    cr_assert_null(text);
    cr_assert_null(p);
    plan_free(NULL);
}

#define PLAN_HEAD "{\"version\":3,\"layers\":["
#define PLAN_TAIL                                                              \
    "],\"predicted_iteration_seconds\":0.001,"                                 \
    "\"dense_iteration_seconds\":0.002}"
#define PL_DENSE                                                               \
    "{\"name\":\"b\",\"numel\":10,\"codec\":\"dense\",\"density\":1}"

Test(plan, parses_a_hand_written_plan)
{
    plan *p = NULL;

    cr_assert_eq(plan_parse(PLAN_HEAD
                            "{\"name\":\"w\",\"numel\":8192,\"codec\":\"topk\","
                            "\"density\":0.25}," PL_DENSE PLAN_TAIL,
                            &p, NULL, 0),
                 FLPS_OK);
    cr_assert_eq(p->version, 3);
    cr_assert_eq(p->nlayers, 2);
    cr_assert_str_eq(p->layers[0].name, "w");
    cr_assert_eq(p->layers[0].kind, CODEC_TOPK);
    cr_assert_eq(p->layers[0].density, 0.25);
    cr_assert_eq(p->layers[1].kind, CODEC_DENSE);
    cr_assert_eq(p->layers[1].density, 1.0);
    cr_assert_eq(p->predicted_iteration_seconds, 0.001);
    cr_assert_eq(p->dense_iteration_seconds, 0.002);
    plan_free(p);
}

Test(plan, parse_refuses_malformed_plans)
{
    static const char *bad[] = {
        "not json",
        "[]",
        "{\"layers\":[" PL_DENSE PLAN_TAIL,
        "{\"version\":-1,\"layers\":[" PL_DENSE PLAN_TAIL,
        PLAN_HEAD PLAN_TAIL,
        PLAN_HEAD PL_DENSE "," PL_DENSE PLAN_TAIL,
        PLAN_HEAD "{\"name\":\"b\",\"numel\":10,\"codec\":\"qsgd\","
                  "\"density\":1}" PLAN_TAIL,
        PLAN_HEAD "{\"name\":\"b\",\"numel\":10,\"codec\":\"dense\","
                  "\"density\":0.5}" PLAN_TAIL,
        PLAN_HEAD "{\"name\":\"b\",\"numel\":10,\"codec\":\"topk\","
                  "\"density\":0}" PLAN_TAIL,
        PLAN_HEAD "{\"name\":\"b\",\"numel\":10,\"codec\":\"topk\","
                  "\"density\":1.5}" PLAN_TAIL,
        PLAN_HEAD "{\"name\":\"b\",\"numel\":0,\"codec\":\"dense\","
                  "\"density\":1}" PLAN_TAIL,
        PLAN_HEAD
        "{\"name\":\"b\",\"codec\":\"dense\",\"density\":1}" PLAN_TAIL,
        PLAN_HEAD PL_DENSE "]}",
        PLAN_HEAD PL_DENSE "],\"predicted_iteration_seconds\":-1,"
                           "\"dense_iteration_seconds\":0.002}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        plan *p = (plan *)&bad; /* any non-NULL marker */
        cr_assert_eq(plan_parse(bad[i], &p, NULL, 0), FLPS_EPROTO,
                     "accepted: %s", bad[i]);
        cr_assert_eq(p, (plan *)&bad, "*out untouched on error");
    }
}

/* plan_parse refuses text with a message holding why, and leaves *out. */
static void assert_refused_saying(const char *text, const char *why)
{
    plan *p = NULL;
    char msg[256];

    cr_assert_eq(plan_parse(text, &p, msg, sizeof(msg)), FLPS_EPROTO,
                 "accepted: %s", text);
    cr_assert_not_null(strstr(msg, why), "%s: %s", text, msg);
    cr_assert_null(p);
}

Test(plan, parse_names_what_is_wrong)
{
    assert_refused_saying("{\"version\":3,", "not valid JSON: ");
    assert_refused_saying("[]", "expected a JSON object");
    assert_refused_saying("{\"version\":3,\"version\":4}",
                          "duplicate object key");
    assert_refused_saying("{\"layers\":[" PL_DENSE PLAN_TAIL,
                          "version: missing");
    assert_refused_saying(PLAN_HEAD PL_DENSE "," PL_DENSE PLAN_TAIL,
                          "layers[1].name: \"b\" appears twice");
    assert_refused_saying(
        PLAN_HEAD "{\"name\":\"b\",\"numel\":10,\"codec\":\"dense\","
                  "\"density\":0.5}" PLAN_TAIL,
        "layers[0].codec: \"dense\" with density 0.5; expected \"dense\" "
        "with density 1 or \"topk\" with a density in (0, 1]");
    assert_refused_saying(PLAN_HEAD "{\"name\":\"b\",\"numel\":10,"
                                    "\"codec\":\"dense\"}" PLAN_TAIL,
                          "layers[0].density: missing");
    assert_refused_saying(PLAN_HEAD PL_DENSE
                          "],\"predicted_iteration_seconds\":0.001}",
                          "dense_iteration_seconds: missing");
}

Test(plan, survives_every_failed_allocation)
{
    unsigned long n;
    flps_err rc = FLPS_ENOMEM;

    for (n = 1; rc == FLPS_ENOMEM && n < 100; n++) {
        char *text = NULL, err[64];
        plan *p = NULL;
        flps_alloc_fail_at(n);
        rc = plan_from_profile(profile_ok, 1, &text, err, sizeof(err));
        if (rc == FLPS_ENOMEM) {
            cr_assert_null(text);
            cr_assert_str_eq(err, "out of memory");
            continue;
        }
        cr_assert_eq(rc, FLPS_OK);
        for (unsigned long m = 1;; m++) {
            flps_alloc_fail_at(m);
            rc = plan_parse(text, &p, err, sizeof(err));
            if (rc == FLPS_OK)
                break;
            cr_assert_eq(rc, FLPS_ENOMEM);
            cr_assert_null(p);
        }
        flps_alloc_fail_at(0);
        plan_free(p);
        free(text);
    }
    flps_alloc_fail_at(0);
    cr_assert_eq(rc, FLPS_OK);
    cr_assert_gt(n, 2, "the planner allocates and was made to fail");
}
