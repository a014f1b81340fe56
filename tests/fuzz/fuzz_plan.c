/* libFuzzer target: the LAGS plan's JSON (services/plan.c), both ways in.
 * The input, NUL-terminated as the scheduler and flrun hold it, is parsed
 * as a plan (plan_parse, what reads a plan back) and planned as a worker's
 * profile (plan_from_profile, whose output every consumer parses). What
 * must hold: an accepted plan is within the documented bounds (at least
 * one layer; names of 1..127 bytes, unique; numel 1..2^32-1; dense at
 * density 1 or top-k in (0, 1]; finite times >= 0); a planned profile
 * gives a plan that plan_parse accepts, with the version asked for, the
 * profile's layers (names and sizes, in order) and a predicted time no
 * worse than all-dense; refusals of a profile carry a message. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "services/plan.h"
#include "tests/fuzz/fuzz_target.h"

#define FUZZ_PLAN_VERSION 7

static void check_plan(const plan *p)
{
    fuzz_require(p->nlayers >= 1 && p->layers != NULL, "a plan without layers");
    for (size_t i = 0; i < p->nlayers; i++) {
        const plan_layer *l = &p->layers[i];
        size_t n = strnlen(l->name, sizeof(l->name));

        fuzz_require(n >= 1 && n <= PLAN_NAME_MAX,
                     "a layer name of a bad length");
        for (size_t j = 0; j < i; j++)
            fuzz_require(strcmp(p->layers[j].name, l->name) != 0,
                         "a layer name twice");
        fuzz_require(l->numel >= 1 && l->numel <= 0xffffffffull,
                     "a layer size outside 1..2^32-1");
        fuzz_require((l->kind == CODEC_DENSE && l->density == 1.0) ||
                         (l->kind == CODEC_TOPK && l->density > 0.0 &&
                          l->density <= 1.0),
                     "a layer neither dense at 1 nor top-k in (0, 1]");
        fuzz_require(plan_layer_spec(l).kind == l->kind,
                     "a layer's codec spec of another kind");
    }
    fuzz_require(isfinite(p->predicted_iteration_seconds) &&
                     p->predicted_iteration_seconds >= 0.0 &&
                     isfinite(p->dense_iteration_seconds) &&
                     p->dense_iteration_seconds >= 0.0,
                 "a plan time not finite and >= 0");
}

/* The plan made from profile_text against the profile itself. */
static void check_planned(const char *profile_text, const char *plan_json)
{
    json_t *prof = json_loads(profile_text, JSON_REJECT_DUPLICATES, NULL);
    json_t *layers = json_object_get(prof, "layers");
    plan *p = NULL;
    flps_err rc = plan_parse(plan_json, &p, NULL, 0);

    if (rc == FLPS_ENOMEM || prof == NULL) {
        json_decref(prof);
        return; /* out of memory: nothing to compare */
    }
    fuzz_require(rc == FLPS_OK,
                 "a planned profile gives a plan plan_parse refuses");
    check_plan(p);
    fuzz_require(p->version == FUZZ_PLAN_VERSION, "a plan of another version");
    fuzz_require(p->nlayers == json_array_size(layers),
                 "a plan with another number of layers than its profile");
    for (size_t i = 0; i < p->nlayers; i++) {
        json_t *l = json_array_get(layers, i);

        fuzz_require(
            strcmp(p->layers[i].name,
                   json_string_value(json_object_get(l, "name"))) == 0 &&
                p->layers[i].numel ==
                    (uint64_t)json_integer_value(json_object_get(l, "numel")),
            "a planned layer that is not the profile's, in order");
    }
    fuzz_require(p->predicted_iteration_seconds <= p->dense_iteration_seconds,
                 "a plan predicted slower than all-dense");
    plan_free(p);
    json_decref(prof);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *plan_json = NULL;
    char err[256];
    plan *p = NULL;
    flps_err rc;

    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    err[0] = '\0';
    rc = plan_parse(text, &p, err, sizeof(err));
    if (rc == FLPS_OK) {
        check_plan(p);
        plan_free(p);
    } else {
        fuzz_require(rc == FLPS_EPROTO || rc == FLPS_ENOMEM,
                     "a plan refused with an error other than EPROTO/ENOMEM");
        fuzz_require(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0',
                     "a plan refused without a message");
    }
    err[0] = '\0';
    rc = plan_from_profile(text, FUZZ_PLAN_VERSION, &plan_json, err,
                           sizeof(err));
    if (rc == FLPS_OK) {
        fuzz_require(plan_json != NULL && strchr(plan_json, '\n') == NULL,
                     "a plan not on one line");
        check_planned(text, plan_json);
        free(plan_json);
    } else {
        fuzz_require(
            rc == FLPS_EPROTO || rc == FLPS_ENOMEM,
            "a profile refused with an error other than EPROTO/ENOMEM");
        fuzz_require(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0',
                     "a profile refused without a message");
    }
    free(text);
    return 0;
}
