/* flps_client_push: from a layer's gradient to the messages of its push.
 * Momentum, error feedback and the layer's codec (with the density
 * warm-up) run here; the messages go out through client_send.h. Three
 * paths, by codec: the dense codec writes each part's payload straight from
 * the gradient (the velocity in place); dense-valued codecs (fp16, qsgd,
 * sign) encode part by part; selecting codecs (topk, gtopk, randk, dgc and
 * every layer of an auto job) select over the whole layer and split the
 * selection by part. flps_client_set_layer_codec swaps an auto layer's
 * codec. Not thread-safe: the caller's thread only (client_internal.h). */
#include "worker/client_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "common/finite.h"
#include "worker/client_energy.h"
#include "worker/client_metrics.h"
#include "worker/client_pairs.h"
#include "worker/client_req.h"
#include "worker/client_send.h"

/* dst[i] = m * v[i] + g[i] (v may be dst itself: each element is read
 * before it is written); returns max |dst| as max_abs_bits does. */
static uint32_t momentum_into(const float *g, const float *v, float m, size_t n,
                              float *dst)
{
    uint32_t mx = 0;

    for (size_t i = 0; i < n; i++) {
        float x = m * v[i] + g[i];
        uint32_t b;
        memcpy(&b, &x, sizeof(b));
        dst[i] = x;
        b &= 0x7fffffffu;
        mx = b > mx ? b : mx;
    }
    return mx;
}

static float bits_to_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}

/* Whether m * v + g overflows anywhere in parts [first, last) of a dense
 * layer (v the parts' velocities). */
static int dense_overflows(const flps_client *c, uint32_t first, uint32_t last,
                           const float *grad, float mom)
{
    for (uint32_t pi = first; pi < last; pi++) {
        const cpart *p = &c->parts[pi];
        const float *v = p->vel ? proto_buf_data(p->vel) : NULL;
        for (uint32_t i = 0; v != NULL && i < p->numel; i++)
            if (!isfinite(mom * v[i] + grad[p->offset + i]))
                return 1;
    }
    return 0;
}

/* Write each part's dense payload of t (its velocity m * v + g with
 * momentum, else the gradient) into the part's kept buffer when nobody
 * else holds it, else into a fresh one, and record t's new max |velocity|.
 * Without momentum, *gbits gets the gradient's largest |value| as bits
 * (flps_max_abs_bits), read as it is copied. Errors (sticky):
 * FLPS_ENOMEM. */
static flps_err write_dense_payloads(flps_client *c, ctensor *t, uint32_t first,
                                     uint32_t last, const float *grad,
                                     float mom, uint32_t *gbits)
{
    double vmax = 0.0;
    uint32_t gmax = 0;

    for (uint32_t pi = first; pi < last; pi++) {
        cpart *p = &c->parts[pi];
        const size_t len = (size_t)p->numel * 4;
        proto_buf **keep = mom > 0.0f ? &p->vel : &p->spare;
        proto_buf *b = NULL;

        if (*keep != NULL && proto_buf_is_unique(*keep))
            b = proto_buf_hold(*keep);
        else
            b = proto_buf_create(len);
        if (b == NULL)
            return client_set_error(c, FLPS_ENOMEM,
                                    "out of memory for a push of %s", t->name);
        if (mom > 0.0f) {
            const float *v = p->vel ? proto_buf_data(p->vel) : NULL;
            uint32_t vb;
            if (v == NULL) {
                memcpy(proto_buf_data(b), grad + p->offset, len);
                vb = flps_max_abs_bits(grad + p->offset, p->numel);
            } else {
                vb = momentum_into(grad + p->offset, v, mom, p->numel,
                                   proto_buf_data(b));
            }
            if ((double)bits_to_float(vb) > vmax)
                vmax = (double)bits_to_float(vb);
        } else {
            const uint32_t pb = flps_copy_max_abs_bits(
                proto_buf_data(b), grad + p->offset, p->numel);
            gmax = pb > gmax ? pb : gmax;
        }
        if (*keep != b) {
            proto_buf_release(*keep);
            *keep = proto_buf_hold(b);
        }
        proto_buf_release(b);
    }
    t->vel_max = vmax;
    if (!(mom > 0.0f)) /* the branch that copied above */
        *gbits = gmax;
    return FLPS_OK;
}

/* Push the layer's parts with the dense codec: no error feedback and no
 * codec buffer. A NaN or Inf anywhere in the gradient sends nothing and
 * moves no velocity (FLPS_ENONFINITE, not sticky). With momentum the
 * gradient is checked first (one read pass), for the velocity is updated
 * in place; without, the check rides on the copy into the payloads, which
 * are the client's own until they are queued, so a refused gradient
 * leaves nothing behind (one read pass, not two). Then each part is
 * queued, once every part is written. With momentum the
 * payload is the velocity itself (it holds m * v + g as sent), updated in
 * place once the transport and the update are done with it: one copy of
 * the layer, not two. Finite inputs cannot make it overflow unless
 * m * max|v| + max|g| comes near FLT_MAX; then (and when the transport
 * still holds the last payload) the new velocity goes into a fresh buffer
 * and a part that would overflow stops the push before it is sent. */
static flps_err push_dense(flps_client *c, ctensor *t, uint32_t first,
                           uint32_t last, const float *grad, uint64_t iter)
{
    const float mom = (float)c->momentum;
    uint32_t gbits = 0;
    flps_err rc;

    if (mom > 0.0f) {
        int in_place;
        gbits = flps_max_abs_bits(grad, t->numel);
        if (gbits >= FLPS_INF_BITS)
            return FLPS_ENONFINITE;
        /* 1 % of slack covers the rounding of m * v + g. */
        in_place =
            ((double)mom * t->vel_max + (double)bits_to_float(gbits)) * 1.01 <
            (double)FLT_MAX;
        /* Rare: find an overflow before anything moves. */
        if (!in_place && dense_overflows(c, first, last, grad, mom))
            return FLPS_ENONFINITE;
    }
    rc = write_dense_payloads(c, t, first, last, grad, mom, &gbits);
    if (rc != FLPS_OK)
        return rc;
    if (gbits >= FLPS_INF_BITS)
        return FLPS_ENONFINITE; /* without momentum: nothing was queued */
    /* Queued once every part is written: on a machine with few cores the
     * transport's thread copying the first parts out would otherwise
     * compete with the loop above for the core and the memory bus (the
     * push took 2.8x a memcpy of the layer that way, 1.4x this way). */
    for (uint32_t pi = first; pi < last; pi++) {
        cpart *p = &c->parts[pi];
        proto_buf *b = proto_buf_hold(mom > 0.0f ? p->vel : p->spare);
        proto_msg m;

        client_msg_base(c, &m, PROTO_OP_PUSH, pi, iter);
        m.codec = PROTO_CODEC_DENSE;
        m.n = p->numel;
        m.val = proto_buf_data(b);
        rc = client_send_push(c, pi, &m, b, p->numel); /* takes our b */
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

/* Encode n elements of gradient g: through error feedback when the codec
 * is biased, else with plain momentum in velocity. */
static flps_err encode_grad(flps_client *c, codec *cd, ef *e, float *velocity,
                            const float *g, size_t n, codec_msg *out)
{
    const float m = (float)c->momentum;

    if (e != NULL)
        return ef_step(e, cd, g, out);
    for (size_t i = 0; i < n; i++)
        velocity[i] = m * velocity[i] + g[i];
    return codec_encode(cd, velocity, n, out);
}

/* Push parts [first, last) of t encoded part by part by a dense-valued
 * codec (fp16, qsgd, sign), each straight into its payload. */
static flps_err push_encoded_parts(flps_client *c, ctensor *t, uint32_t first,
                                   uint32_t last, const float *grad,
                                   uint64_t iter)
{
    codec_msg cm;
    flps_err rc;

    for (uint32_t pi = first; pi < last; pi++) {
        cpart *p = &c->parts[pi];
        float *vel = t->velocity ? t->velocity + p->offset : NULL;
        size_t cap = codec_max_bytes(&c->spec, p->numel);
        proto_buf *b = proto_buf_create(cap);
        if (b == NULL)
            return client_set_error(c, FLPS_ENOMEM, "out of memory");
        codec_set_output(p->cd, proto_buf_data(b), cap);
        rc = encode_grad(c, p->cd, p->ef, vel, grad + p->offset, p->numel, &cm);
        codec_set_output(p->cd, NULL, 0); /* when nothing was encoded */
        if (rc != FLPS_OK) {
            proto_buf_release(b);
            return client_set_error(c, rc, "cannot encode part %u of %s: %s",
                                    pi, t->name, flps_strerror(rc));
        }
        rc = client_send_encoded(c, pi, iter, &cm, b); /* takes b */
        if (rc != FLPS_OK)
            return rc;
    }
    return FLPS_OK;
}

/* Push parts [first, last) of t through its selecting codec: one
 * selection over the layer, split by part. */
static flps_err push_selected(flps_client *c, ctensor *t, uint32_t first,
                              uint32_t last, const float *grad, uint64_t iter)
{
    codec_msg cm;
    flps_err rc;

    /* The density of this iteration under the warm-up: a pure function of
     * iter, so every worker (and a gtopk shard) takes the same. */
    if (c->density_warmup > 0 && t->target > 0)
        codec_set_density(t->cd,
                          codec_warmup_density(c->density_start, t->target,
                                               c->density_warmup, iter));
    /* Layer-wise selection, split by part: indices are ascending, parts of
     * a tensor are consecutive ranges. */
    rc = encode_grad(c, t->cd, t->ef, t->velocity, grad, t->numel, &cm);
    if (rc == FLPS_ENONFINITE && t->ef != NULL)
        return rc; /* ef_step moved nothing */
    if (rc != FLPS_OK)
        return client_set_error(c, rc, "cannot encode layer %s: %s", t->name,
                                flps_strerror(rc));
    if (cm.idx == NULL) {
        /* A dense layer of an auto job: every element, as pairs, so the
         * shard's union aggregation takes it like any other push. */
        const float *vals = (const float *)cm.frames[0].data;
        for (uint32_t pi = first; pi < last; pi++) {
            c->sel_lo[pi] = (uint32_t)c->parts[pi].offset;
            c->sel_hi[pi] =
                (uint32_t)(c->parts[pi].offset + c->parts[pi].numel);
        }
        return client_send_selection(c, first, last, iter, NULL, vals);
    }
    client_send_split(c, first, last, cm.idx, cm.count);
    return client_send_selection(c, first, last, iter, cm.idx,
                                 (const float *)cm.frames[1].data);
}

static flps_err push_grad(flps_client *c, uint32_t tensor, const float *grad,
                          uint64_t iter)
{
    ctensor *t;
    uint32_t first, last;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (tensor >= c->ntensors || grad == NULL)
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    first = c->pm.first_part[tensor];
    last = client_tensor_end_part(c, tensor);
    rc = creq_check_tensor_idle(c, tensor);
    if (rc != FLPS_OK)
        return rc;
    /* A NaN or Inf changes nothing (no part is sent, no residual or
     * velocity moves) and the call can be repeated with a good gradient.
     * The dense codec and error feedback check as they go, before anything
     * moves (ef_step: FLPS_ENONFINITE with nothing changed); the paths
     * that encode part by part or update a plain velocity first check up
     * front. */
    if (c->spec.kind == CODEC_DENSE && !c->is_auto)
        return push_dense(c, t, first, last, grad, iter);
    if ((!c->sparse || t->ef == NULL) && !flps_all_finite(grad, t->numel))
        return FLPS_ENONFINITE;
    if (!c->sparse)
        return push_encoded_parts(c, t, first, last, grad, iter);
    return push_selected(c, t, first, last, grad, iter);
}

flps_err flps_client_push(flps_client *c, uint32_t tensor, const float *grad,
                          uint64_t iter)
{
    cmetrics_push mp;
    flps_err rc;

    client_energy_at(c, iter); /* the iterations before iter are done */
    client_metrics_push_begin(c, iter, &mp);
    rc = push_grad(c, tensor, grad, iter);
    client_metrics_push_end(c, &mp, tensor, rc);

    /* From now on a rejection of this tensor goes to the client's own
     * residual, not to the caller's mask. No reply is handled before
     * flps_client_wait, so this is in time. */
    if (rc == FLPS_OK && c->tensors[tensor].pairs != NULL)
        cpairs_forget(c->tensors[tensor].pairs);
    return rc;
}

flps_err flps_client_set_layer_codec(flps_client *c, uint32_t tensor,
                                     const char *spec)
{
    codec_spec cs;
    codec *cd = NULL;
    ctensor *t;
    flps_err rc;

    if (c->err != FLPS_OK)
        return c->err;
    if (!c->is_auto)
        return FLPS_ESTATE;
    if (tensor >= c->ntensors || spec == NULL ||
        codec_spec_parse(spec, &cs) != FLPS_OK ||
        (cs.kind != CODEC_DENSE && cs.kind != CODEC_TOPK))
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    /* The residual and velocity stay: a layer turning dense flushes its
     * residual in its next push, one turning sparse starts from zero. The
     * encoded message of an outstanding push lives in its request's
     * payload, not in the codec, so the swap is safe at any time. */
    rc = codec_create(&cs, client_layer_seed(c, tensor), &cd);
    if (rc != FLPS_OK)
        return rc;
    codec_destroy(t->cd);
    t->cd = cd;
    t->target = cs.kind == CODEC_TOPK ? cs.density : 0;
    return FLPS_OK;
}
