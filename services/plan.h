/* Plans for `compression: auto`: turn a worker's measured profile (JSON)
 * into a per-layer plan (JSON) with the LAGS planner, and parse a plan back
 * into a struct. Pure functions: no I/O, no logging.
 *
 * Profile (one line flworker rank 0 prints after warm-up):
 *   {"event":"profile","iteration":25,"workers":W,"alpha":A,"beta":B,
 *    "layers":[{"name":"fc1.weight","numel":200704,"t_backward":0.000312},
 *              ...]}
 * layers in LAYOUT order (the model's first layer first); alpha in seconds
 * per message, beta in seconds per byte, t_backward in seconds.
 *
 * Plan:
 *   {"version":N,"layers":[{"name":"fc1.weight","numel":200704,
 *     "codec":"topk","density":0.0123},
 *    {"name":"fc1.bias","numel":256,"codec":"dense","density":1}],
 *    "predicted_iteration_seconds":T,"dense_iteration_seconds":D}
 * layers in LAYOUT order; codec "dense" (density 1) or "topk" (density in
 * (0, 1], k = codec_count_for). T is the planner's predicted iteration time
 * of the plan, D the same model's time with every layer dense (T <= D).
 */
#ifndef FLPS_SERVICES_PLAN_H
#define FLPS_SERVICES_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "compress/codec.h"

#define PLAN_NAME_MAX 127 /* longest layer name, bytes */

typedef struct {
    char name[PLAN_NAME_MAX + 1];
    uint64_t numel;  /* > 0 */
    codec_kind kind; /* CODEC_DENSE or CODEC_TOPK */
    double density;  /* 1 for dense; in (0, 1] for topk */
} plan_layer;

/* A parsed plan; layers in layout order. */
typedef struct {
    uint64_t version;
    size_t nlayers; /* >= 1 */
    plan_layer *layers;
    double predicted_iteration_seconds;
    double dense_iteration_seconds;
} plan;

/* Plan a profile: validate it, run lags_plan (lags_params_default with the
 * profile's workers, alpha and beta; layers reversed into backprop order)
 * and write the plan, stamped with version, as one line of compact JSON.
 * Validation: event "profile", iteration an integer >= 0, workers an
 * integer >= 1, alpha and beta numbers > 0 and finite, layers a non-empty
 * array of objects with name (a string of 1..PLAN_NAME_MAX bytes, unique),
 * numel (an integer in 1..2^32-1) and t_backward (a number >= 0, finite).
 * Ownership: on FLPS_OK caller owns *plan_json (free()). errbuf (if not
 * NULL) gets a message naming what is wrong on error; *plan_json is
 * written only on FLPS_OK.
 * Errors: FLPS_EINVAL (profile_json or plan_json NULL), FLPS_EPROTO (not
 * JSON, or a field missing, of the wrong type or out of range; a number
 * too large for a double counts as out of range), FLPS_ENOMEM.
 * Thread-safe. */
flps_err plan_from_profile(const char *profile_json, uint64_t version,
                           char **plan_json, char *errbuf, size_t errlen);

/* Parse and validate a plan (the format above: every field present, codec
 * "dense" with density 1 or "topk" with density in (0, 1], numel an integer
 * in 1..2^32-1, names 1..PLAN_NAME_MAX bytes and unique, version an integer
 * >= 0, the two times finite and >= 0, no key twice; other keys are
 * ignored). The one reader of plans: flworker, flrun and flsched use it.
 * Ownership: on FLPS_OK caller owns *out (plan_free); *out is written
 * only on FLPS_OK. errbuf (if not NULL) gets a message naming what is
 * wrong on error ("layers[2].density: expected a number").
 * Errors: FLPS_EINVAL (NULL), FLPS_EPROTO (malformed), FLPS_ENOMEM.
 * Thread-safe. */
flps_err plan_parse(const char *plan_json, plan **out, char *errbuf,
                    size_t errlen);

/* The codec spec of one planned layer (dense, or topk:density). */
codec_spec plan_layer_spec(const plan_layer *l);

/* Free p. NULL does nothing. */
void plan_free(plan *p);

#endif
