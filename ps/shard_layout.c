/* A shard's model layout: the REGISTER that sets it (checked against the
 * shard's limits, then against the layout for every later worker), the
 * parts this shard owns and the scratch sized with them, and the part a
 * request names. */
#include "ps/shard_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/quote.h"
#include "compress/codec.h"

static void part_destroy(ps_part *p, uint32_t workers)
{
    if (p == NULL)
        return;
    for (uint32_t r = 0; p->rx != NULL && r < workers; r++)
        transport_rx_release(p->rx[r]);
    while (p->pulls != NULL) {
        ps_pull_wait *n = p->pulls->next;
        flps_free(p->pulls);
        p->pulls = n;
    }
    for (uint32_t i = 0; i < p->nout; i++)
        proto_buf_release(p->out[i].buf);
    flps_free(p->out);
    for (uint32_t r = 0; p->decoded != NULL && r < workers; r++)
        flps_free(p->decoded[r]);
    flps_free(p->decoded);
    flps_free(p->w);
    flps_free(p->rx);
    flps_free(p->push);
    flps_free(p->peer);
    for (int i = 0; i < PS_REPLY_POOL; i++)
        proto_buf_release(p->reply[i]);
    flps_free(p->last_async);
    flps_free(p->touched);
    flps_free(p->last_idx);
    flps_free(p->last_val);
    flps_free(p->sopt);
    flps_free(p);
}

/* A part of numel elements for workers ranks, with nstate floats of server
 * optimizer state per element (zero). */
static flps_err part_create(uint32_t id, uint32_t numel, uint32_t workers,
                            uint32_t nstate, ps_part **out)
{
    ps_part *p = flps_calloc(1, sizeof(*p));

    if (p == NULL)
        return FLPS_ENOMEM;
    p->id = id;
    p->numel = numel;
    if (nstate > 0) {
        p->sopt = flps_calloc((size_t)nstate * numel, sizeof(float));
        if (p->sopt == NULL) {
            part_destroy(p, workers);
            return FLPS_ENOMEM;
        }
    }
    p->w = flps_calloc(numel, sizeof(float));
    p->rx = flps_calloc(workers, sizeof(*p->rx));
    p->push = flps_calloc(workers, sizeof(*p->push));
    p->peer = flps_calloc(workers, sizeof(*p->peer));
    p->decoded = flps_calloc(workers, sizeof(*p->decoded));
    p->last_async = flps_calloc(workers, sizeof(*p->last_async));
    if (p->w == NULL || p->rx == NULL || p->push == NULL || p->peer == NULL ||
        p->last_async == NULL || p->decoded == NULL) {
        part_destroy(p, workers);
        return FLPS_ENOMEM;
    }
    *out = p;
    return FLPS_OK;
}

void ps_layout_drop(ps_shard *s)
{
    if (s->parts != NULL)
        for (uint32_t i = 0; i < s->pm.nparts; i++)
            part_destroy(s->parts[i], s->jc.workers);
    flps_free(s->parts);
    s->parts = NULL;
    flps_free(s->member);
    s->member = NULL;
    flps_free(s->owner);
    s->owner = NULL;
    partmap_fini(&s->pm);
    flps_free(s->tensors);
    s->tensors = NULL;
    s->ntensors = 0;
    s->nowned = 0;
    s->configured = 0;
    ps_merge_destroy(s->merge);
    flps_free(s->acc);
    flps_free(s->bits);
    flps_free(s->pos);
    s->acc = NULL;
    s->bits = NULL;
    s->pos = NULL;
    s->acc_cap = 0;
    topk_ctx_destroy(s->topk);
    flps_free(s->u_idx);
    flps_free(s->u_sum);
    flps_free(s->sel);
    flps_free(s->delta);
    flps_free(s->raw_idx);
    flps_free(s->raw_val);
    flps_free(s->sopt_next);
    s->merge = NULL;
    s->topk = NULL;
    s->u_idx = NULL;
    s->u_sum = NULL;
    s->sel = NULL;
    s->delta = NULL;
    s->raw_idx = NULL;
    s->raw_val = NULL;
    s->sopt_next = NULL;
    s->u_cap = s->sel_cap = s->delta_cap = 0;
    s->raw_cap = s->sopt_next_cap = 0;
}

/* Check a job configuration on its own; writes a reason on failure. */
static flps_err jobcfg_check(const ps_shard *s, const proto_jobcfg *c,
                             char *why, size_t len)
{
    if (c->shard != s->cfg.shard || c->nshards != s->cfg.nshards) {
        snprintf(why, len,
                 "this is shard %u of %u, the worker thinks it is shard %u "
                 "of %u",
                 s->cfg.shard, s->cfg.nshards, c->shard, c->nshards);
        return FLPS_ECONFIG;
    }
    if (c->workers == 0 || c->workers > 65536 || c->part_size == 0 ||
        !(c->lr > 0) || !isfinite(c->lr) || !(c->density > 0) ||
        c->density > 1) {
        snprintf(why, len,
                 "bad job configuration (workers %u, part_size %u, lr %g, "
                 "density %g)",
                 c->workers, c->part_size, c->lr, c->density);
        return FLPS_ECONFIG;
    }
    if (c->server_opt != PROTO_SOPT_SGD &&
        (c->mode == PROTO_MODE_ASYNC || c->agg == PROTO_AGG_GTOPK)) {
        snprintf(why, len,
                 "a server optimizer steps on each synchronous iteration's "
                 "whole update: not in an asynchronous job, nor with gtopk, "
                 "which keeps only the global top-k (use topk:D)");
        return FLPS_ECONFIG;
    }
    return FLPS_OK;
}

/* Whether c's codec is summed element by element with nothing kept per
 * piece (proto/partmap.h): as the workers decide from the same text. */
static int is_elementwise(const proto_jobcfg *c)
{
    codec_spec spec;

    return codec_spec_parse(c->compression, &spec) == FLPS_OK &&
           (spec.kind == CODEC_DENSE || spec.kind == CODEC_FP16);
}

flps_err ps_layout_configure(ps_shard *s, const proto_jobcfg *c,
                             const proto_tensor *t, uint32_t nt)
{
    uint64_t *numel = flps_malloc(nt * sizeof(*numel));
    flps_err rc;

    if (numel == NULL)
        return FLPS_ENOMEM;
    for (uint32_t i = 0; i < nt; i++)
        numel[i] = t[i].numel;
    /* The map the workers asked for: even with their piece, else parts
     * placed largest first (a REGISTER without a piece). */
    rc = c->piece > 0
             ? partmap_build_even(numel, nt, c->nshards, c->piece, &s->pm)
             : partmap_build_pieces(
                   numel, nt, c->nshards, c->part_size,
                   partmap_job_piece_size(c->agg == PROTO_AGG_DENSE,
                                          is_elementwise(c), c->part_size),
                   &s->pm);
    flps_free(numel);
    if (rc != FLPS_OK)
        return rc;
    s->jc = *c;
    s->tensors = flps_malloc(nt * sizeof(*t));
    s->parts = flps_calloc(s->pm.nparts, sizeof(*s->parts));
    if (s->tensors == NULL || s->parts == NULL) {
        rc = FLPS_ENOMEM;
        goto fail;
    }
    memcpy(s->tensors, t, nt * sizeof(*t));
    s->ntensors = nt;
    for (uint32_t i = 0; i < s->pm.nparts; i++) {
        if (s->pm.parts[i].shard != s->cfg.shard)
            continue;
        rc = part_create(i, s->pm.parts[i].numel, c->workers, ps_sopt_nstate(c),
                         &s->parts[i]);
        if (rc != FLPS_OK)
            goto fail;
        s->nowned++;
    }
    s->member = flps_calloc(c->workers, sizeof(*s->member));
    s->owner = flps_calloc(c->workers, sizeof(*s->owner));
    if (s->member == NULL || s->owner == NULL) {
        rc = FLPS_ENOMEM;
        goto fail;
    }
    rc = ps_merge_create(c->workers, &s->merge);
    if (rc != FLPS_OK)
        goto fail;
    rc = topk_ctx_create(&s->topk);
    if (rc != FLPS_OK)
        goto fail;
    s->configured = 1;
    return FLPS_OK;
fail:
    ps_layout_drop(s);
    return rc;
}

/* Compare a worker's layout and configuration with the registered ones. */
static flps_err layout_compare(const ps_shard *s, const proto_msg *m, char *why,
                               size_t len)
{
    const proto_jobcfg *a = &s->jc, *b = &m->cfg;

    if (m->ntensors != s->ntensors) {
        snprintf(why, len, "the worker's model has %u tensors, the job's %u",
                 m->ntensors, s->ntensors);
        return FLPS_ELAYOUT;
    }
    for (uint32_t i = 0; i < m->ntensors; i++) {
        if (strcmp(m->tensors[i].name, s->tensors[i].name) != 0 ||
            m->tensors[i].numel != s->tensors[i].numel) {
            /* Names are the workers' bytes: quoted, and cut. */
            char got[64], want[64];
            flps_quote_str(got, sizeof(got), m->tensors[i].name, 40);
            flps_quote_str(want, sizeof(want), s->tensors[i].name, 40);
            snprintf(why, len,
                     "tensor %u is %s[%llu] on the worker but %s[%llu] in "
                     "the job",
                     i, got, (unsigned long long)m->tensors[i].numel, want,
                     (unsigned long long)s->tensors[i].numel);
            return FLPS_ELAYOUT;
        }
    }
    if (a->piece != b->piece) {
        snprintf(why, len,
                 "the worker cuts the model into pieces of %u values%s, the "
                 "job's other workers into %u%s: run one flps version, with "
                 "the same encryption, for every worker",
                 b->piece, b->piece ? "" : " (the map of older versions)",
                 a->piece, a->piece ? "" : " (the map of older versions)");
        return FLPS_ELAYOUT;
    }
    if (a->workers != b->workers || a->part_size != b->part_size ||
        a->mode != b->mode || a->agg != b->agg || a->density != b->density ||
        a->lr != b->lr || a->lr_schedule != b->lr_schedule ||
        a->iterations != b->iterations ||
        strcmp(a->compression, b->compression) != 0) {
        snprintf(why, len,
                 "the worker's job settings (workers %u, part_size %u, mode "
                 "%u, aggregation %u, density %g, lr %g, schedule %u over "
                 "%llu) differ from the job's (%u, %u, %u, %u, %g, %g, %u "
                 "over %llu)",
                 b->workers, b->part_size, b->mode, b->agg, b->density, b->lr,
                 b->lr_schedule, (unsigned long long)b->iterations, a->workers,
                 a->part_size, a->mode, a->agg, a->density, a->lr,
                 a->lr_schedule, (unsigned long long)a->iterations);
        return FLPS_ELAYOUT;
    }
    if (a->density_warmup != b->density_warmup ||
        a->density_start != b->density_start) {
        /* Every worker and the shard must follow one schedule of k. */
        snprintf(why, len,
                 "the worker's density warm-up (%llu iterations from %g) "
                 "differs from the job's (%llu from %g)",
                 (unsigned long long)b->density_warmup, b->density_start,
                 (unsigned long long)a->density_warmup, a->density_start);
        return FLPS_ELAYOUT;
    }
    if (a->server_opt != b->server_opt || a->server_beta != b->server_beta) {
        snprintf(why, len,
                 "the worker's server optimizer (%u, beta %g) differs from "
                 "the job's (%u, beta %g)",
                 b->server_opt, b->server_beta, a->server_opt, a->server_beta);
        return FLPS_ELAYOUT;
    }
    return FLPS_OK;
}

/* A layout's total size against the shard's limit, before anything is
 * sized by it: each tensor is below 2^32 (decode) and there are at most
 * PROTO_MAX_TENSORS, so the sum cannot overflow. */
static flps_err layout_check_size(const ps_shard *s, const proto_msg *m,
                                  char *why, size_t len)
{
    const uint64_t max = s->cfg.max_model_elements
                             ? s->cfg.max_model_elements
                             : PS_MAX_MODEL_ELEMENTS_DEFAULT;
    uint64_t total = 0;

    for (uint32_t i = 0; i < m->ntensors; i++)
        total += m->tensors[i].numel;
    if (total > max) {
        snprintf(why, len,
                 "the model has %llu elements, more than this shard's limit "
                 "of %llu (flps --max-model-elements)",
                 (unsigned long long)total, (unsigned long long)max);
        return FLPS_ECONFIG;
    }
    return FLPS_OK;
}

flps_err ps_shard_on_register(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    char why[PROTO_ERRMSG_MAX + 1];
    ps_reply r;
    uint64_t min_iter = UINT64_MAX;
    flps_err rc = jobcfg_check(s, &m->cfg, why, sizeof(why));

    if (rc == FLPS_OK)
        rc = layout_check_size(s, m, why, sizeof(why));
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, peer, m, rc, "%s", why);
        return rc;
    }
    if (!s->configured) {
        rc = ps_layout_configure(s, &m->cfg, m->tensors, m->ntensors);
        if (rc != FLPS_OK) {
            ps_shard_reply_error(s, peer, m, rc,
                                 "cannot build the partition map: %s",
                                 flps_strerror(rc));
            return rc;
        }
        log_info(
            "job %s registered by rank %u: %u tensors, %u parts, %u "
            "owned by shard %u (%llu elements), %u workers",
            s->job, m->rank, s->ntensors, s->pm.nparts, s->nowned, s->cfg.shard,
            (unsigned long long)s->pm.shard_load[s->cfg.shard], s->jc.workers);
        if (s->jc.density_warmup > 0)
            log_info("job %s: density warm-up from %g to %g over %llu "
                     "iterations",
                     s->job, s->jc.density_start, s->jc.density,
                     (unsigned long long)s->jc.density_warmup);
        /* A first checkpoint holds the layout, so the log written from now
         * on can be replayed even if the shard dies before the next one. */
        if (s->cfg.ckpt_dir != NULL) {
            rc = ps_shard_checkpoint(s);
            if (rc != FLPS_OK) {
                /* Unconfigure, or a retried REGISTER would be accepted with
                 * no checkpoint holding the layout. */
                ps_layout_drop(s);
                ps_shard_reply_error(s, peer, m, rc,
                                     "cannot write a checkpoint: %s",
                                     flps_strerror(rc));
                return rc;
            }
        }
    } else {
        rc = layout_compare(s, m, why, sizeof(why));
        if (rc != FLPS_OK) {
            ps_shard_reply_error(s, peer, m, rc, "%s", why);
            return rc;
        }
    }
    if (m->rank >= s->jc.workers) {
        ps_shard_reply_error(s, peer, m, FLPS_EINVAL,
                             "rank %u is not below workers=%u", m->rank,
                             s->jc.workers);
        return FLPS_EINVAL;
    }
    s->member[m->rank] = peer + 1;
    if (s->cfg.secret != NULL && s->owner[m->rank] != m->cid) {
        if (s->owner[m->rank] != 0)
            log_info("rank %u of job %s taken over by a new client (peer %u): "
                     "a restarted worker registered it again",
                     m->rank, s->job, peer);
        s->owner[m->rank] = m->cid;
    }
    for (uint32_t i = 0; i < s->pm.nparts; i++)
        if (s->parts[i] != NULL && s->parts[i]->iter < min_iter)
            min_iter = s->parts[i]->iter;
    ps_shard_reply_init(s, &r, PROTO_OP_REGISTER_OK, m->rank, 0,
                        min_iter == UINT64_MAX ? 0 : min_iter, 0);
    s->cfg.send(s->cfg.send_arg, peer, &r);
    return FLPS_OK;
}

ps_part *ps_shard_request_part(ps_shard *s, uint32_t peer, const proto_msg *m,
                               int need_init, flps_err *err)
{
    ps_part *p;

    if (!s->configured) {
        *err = FLPS_ESTATE;
        ps_shard_reply_error(
            s, peer, m, *err,
            "the shard has no model layout yet; register first");
        return NULL;
    }
    if (m->part >= s->pm.nparts || s->parts[m->part] == NULL) {
        *err = FLPS_EINVAL;
        ps_shard_reply_error(s, peer, m, *err,
                             "part %u is not held by shard %u", m->part,
                             s->cfg.shard);
        return NULL;
    }
    if (m->rank >= s->jc.workers) {
        *err = FLPS_EINVAL;
        ps_shard_reply_error(s, peer, m, *err,
                             "rank %u is not below workers=%u", m->rank,
                             s->jc.workers);
        return NULL;
    }
    p = s->parts[m->part];
    s->member[m->rank] = peer + 1;
    if (need_init && !p->initialized) {
        *err = FLPS_ESTATE;
        ps_shard_reply_error(
            s, peer, m, *err,
            "part %u has no initial values yet; rank 0 sends them", m->part);
        return NULL;
    }
    return p;
}
