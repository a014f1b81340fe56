/* Setting a client up: checks, codecs, the part map, credentials and the
 * registration (client_setup.h). */
#include "worker/client_setup.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "proto/creds.h"
#include "worker/client_recv.h"
#include "worker/client_req.h"

/* Auto jobs start each layer on this codec until a plan says otherwise:
 * below AUTO_DENSE_BELOW elements the per-message latency dominates and
 * top-k would save little. */
#define AUTO_DENSE_BELOW 4096
#define AUTO_INITIAL_TOPK "topk:0.01"

/* What create checks of the 0.3 fields. */
static int config_is_valid(const flps_client_config *cfg)
{
    return cfg != NULL && cfg->job != NULL && strlen(cfg->job) > 0 &&
           strlen(cfg->job) <= PROTO_JOB_MAX && cfg->workers > 0 &&
           cfg->rank < cfg->workers && cfg->nservers > 0 &&
           cfg->servers != NULL && cfg->ntensors > 0 &&
           cfg->ntensors <= PROTO_MAX_TENSORS && cfg->tensors != NULL &&
           cfg->lr > 0 && isfinite(cfg->lr) && cfg->momentum >= 0 &&
           cfg->momentum < 1;
}

/* Whether cfg's density warm-up can apply (the log line says why not). */
static int warmup_is_valid(const flps_client_config *cfg)
{
    codec_spec cs;
    const char *comp = cfg->compression ? cfg->compression : "dense";
    const double start = cfg->density_warmup_start;

    if (cfg->density_warmup == 0)
        return 1;
    if (!(start > 0) || start > 1) {
        log_error("density warm-up: start density %g is out of range; "
                  "expected 0 < start <= 1",
                  start);
        return 0;
    }
    if (cfg->async) {
        log_error("density warm-up: only synchronous jobs follow a "
                  "warm-up (async = 0); leave it out for async and ssp");
        return 0;
    }
    if (strcmp(comp, "auto") != 0 &&
        (codec_spec_parse(comp, &cs) != FLPS_OK ||
         (cs.kind != CODEC_TOPK && cs.kind != CODEC_GTOPK &&
          cs.kind != CODEC_DGC))) {
        log_error("density warm-up: compression '%.64s' has no selection "
                  "density to warm up; use topk:D, gtopk:D, dgc:D or auto",
                  comp);
        return 0;
    }
    return 1;
}

int client_setup_server_opt(const char *text, uint8_t *opt, double *beta)
{
    double b = 0;

    if (text == NULL || strcmp(text, "sgd") == 0) {
        *opt = PROTO_SOPT_SGD;
    } else if (strcmp(text, "adam") == 0) {
        *opt = PROTO_SOPT_ADAM;
    } else if (strncmp(text, "momentum:", 9) == 0 &&
               flps_parse_double(NULL, text + 9, 0, 1, &b, NULL, 0) ==
                   FLPS_OK &&
               b < 1) {
        *opt = PROTO_SOPT_MOMENTUM;
    } else {
        return 0;
    }
    *beta = b;
    return 1;
}

/* Whether cfg's server optimizer is one the shards can run for its job
 * (the log line says why not). */
static int server_opt_is_valid(const flps_client_config *cfg)
{
    codec_spec cs;
    uint8_t opt;
    double beta;

    if (!client_setup_server_opt(cfg->server_optimizer, &opt, &beta)) {
        log_error("server_optimizer '%.64s' is none of sgd, momentum:B "
                  "(0 <= B < 1), adam",
                  cfg->server_optimizer);
        return 0;
    }
    if (opt == PROTO_SOPT_SGD)
        return 1;
    if (cfg->async == FLPS_MODE_ASYNC) {
        log_error("server_optimizer %s steps on each synchronous "
                  "iteration's update; an asynchronous job has none",
                  cfg->server_optimizer);
        return 0;
    }
    if (cfg->compression != NULL &&
        codec_spec_parse(cfg->compression, &cs) == FLPS_OK &&
        cs.kind == CODEC_GTOPK) {
        log_error("server_optimizer %s steps on the whole update, and gtopk "
                  "keeps only its global top-k: use topk:D",
                  cfg->server_optimizer);
        return 0;
    }
    return 1;
}

int client_setup_is_valid(const flps_client_config *cfg)
{
    return config_is_valid(cfg) && warmup_is_valid(cfg) &&
           server_opt_is_valid(cfg);
}

flps_err client_setup_codec(flps_client *c, const char *text)
{
    if (text == NULL)
        text = codec_kind_name(CODEC_DENSE);
    if (codec_setting_parse(text, &c->spec) != FLPS_OK)
        return client_set_error(c, FLPS_ECONFIG,
                                "compression '%s' is not a codec; use one of "
                                "%s",
                                text, codec_kind_list());
    if (c->spec.kind == CODEC_AUTO) {
        /* Every push is a list of pairs (a dense layer sends all of them),
         * so the shards aggregate the union and never cut it: density 1. */
        c->is_auto = 1;
        c->sparse = 1;
        c->use_ef = 1;
        c->density = 1.0;
        c->agg = PROTO_AGG_TOPK;
        c->spec.kind = CODEC_DENSE;
        snprintf(c->spec_text, sizeof(c->spec_text), "%s",
                 codec_kind_name(CODEC_AUTO));
        return FLPS_OK;
    }
    codec_spec_format(&c->spec, c->spec_text, sizeof(c->spec_text));
    c->sparse = codec_kind_is_sparse(c->spec.kind);
    c->density = c->sparse ? c->spec.density : 1.0;
    c->agg = c->spec.kind == CODEC_GTOPK ? PROTO_AGG_GTOPK
             : c->sparse                 ? PROTO_AGG_TOPK
                                         : PROTO_AGG_DENSE;
    /* randk is unbiased by its scaling and qsgd below 4 bits by its
     * stochastic rounding; error feedback on them lets the residual grow
     * without bound (compress/ef.h), so they run without it. dense is
     * lossless: its residual would be zero after every push. */
    c->use_ef = !(c->spec.kind == CODEC_RANDK || c->spec.kind == CODEC_DENSE ||
                  (c->spec.kind == CODEC_QSGD && c->spec.bits < 4));
    return FLPS_OK;
}

/* One codec of spec (and its error feedback or plain velocity) for n
 * elements. */
static flps_err make_coder(flps_client *c, const codec_spec *spec, size_t n,
                           uint64_t seed, codec **cd, ef **e, float **velocity)
{
    flps_err rc = codec_create(spec, seed, cd);

    if (rc != FLPS_OK)
        return rc;
    if (c->use_ef)
        return ef_create_for(spec, n, (float)c->momentum, e);
    *velocity = flps_calloc(n, sizeof(float));
    return *velocity ? FLPS_OK : FLPS_ENOMEM;
}

/* Tensor i from src: its name, size and replica, and with a selecting
 * codec its own coder (an auto layer's by its size). */
static flps_err setup_tensor(flps_client *c, uint32_t i, const flps_tensor *src)
{
    ctensor *t = &c->tensors[i];
    codec_spec ls = c->spec;
    flps_err rc;

    if (src->name == NULL || strlen(src->name) > PROTO_NAME_MAX ||
        src->numel == 0 || src->numel > UINT32_MAX || src->data == NULL)
        return client_set_error(c, FLPS_EINVAL,
                                "tensor %u needs a name of 1..%d chars, "
                                "0 < numel < 2^32 and data",
                                i, PROTO_NAME_MAX);
    snprintf(t->name, sizeof(t->name), "%s", src->name);
    t->numel = src->numel;
    t->data = src->data;
    if (!c->sparse)
        return FLPS_OK;
    if (c->is_auto &&
        codec_spec_parse(t->numel >= AUTO_DENSE_BELOW ? AUTO_INITIAL_TOPK
                                                      : "dense",
                         &ls) != FLPS_OK)
        return FLPS_EINVAL;
    rc = make_coder(c, &ls, t->numel, client_layer_seed(c, i), &t->cd, &t->ef,
                    &t->velocity);
    if (rc != FLPS_OK)
        return rc;
    if (ls.kind == CODEC_TOPK || ls.kind == CODEC_GTOPK || ls.kind == CODEC_DGC)
        t->target = ls.density;
    return FLPS_OK;
}

/* The tensors of cfg and the part map over them. */
static flps_err setup_tensors(flps_client *c, const flps_client_config *cfg)
{
    uint64_t *numel;
    flps_err rc = FLPS_OK;
    int elementwise;

    c->tensors = flps_calloc(cfg->ntensors, sizeof(*c->tensors));
    numel = flps_calloc(cfg->ntensors, sizeof(*numel));
    if (c->tensors == NULL || numel == NULL) {
        flps_free(numel);
        return FLPS_ENOMEM;
    }
    c->ntensors = cfg->ntensors;
    for (uint32_t i = 0; i < cfg->ntensors && rc == FLPS_OK; i++) {
        rc = setup_tensor(c, i, &cfg->tensors[i]);
        numel[i] = cfg->tensors[i].numel;
    }
    /* Dense values summed element by element in the clear: the even map
     * with the clear piece (partmap.h says why not under CURVE); else
     * parts placed largest first, cut in the codec's pieces. */
    elementwise = c->spec.kind == CODEC_DENSE || c->spec.kind == CODEC_FP16;
    if (c->agg == PROTO_AGG_DENSE && elementwise && !c->curve)
        c->piece =
            partmap_clear_piece(numel, c->ntensors, c->nshards, c->part_size);
    if (rc == FLPS_OK)
        rc = c->piece > 0
                 ? partmap_build_even(numel, c->ntensors, c->nshards, c->piece,
                                      &c->pm)
                 : partmap_build_pieces(
                       numel, c->ntensors, c->nshards, c->part_size,
                       partmap_job_piece_size(c->agg == PROTO_AGG_DENSE,
                                              elementwise, c->part_size),
                       &c->pm);
    flps_free(numel);
    return rc;
}

/* push_hdr_bytes: the largest part id and an iteration of 5 bytes, within
 * a few bytes of every one-part push's header. */
static flps_err measure_push_header(flps_client *c)
{
    proto_msg m;
    void *hdr = NULL;
    size_t nf;
    proto_frame pf[PROTO_MAX_FRAMES];

    client_msg_base(c, &m, PROTO_OP_PUSH, c->pm.nparts - 1, UINT32_MAX);
    m.codec = PROTO_CODEC_DENSE;
    if (proto_msg_encode(&m, &hdr, &c->push_hdr_bytes, pf, &nf) != FLPS_OK)
        return FLPS_ENOMEM;
    free(hdr);
    return FLPS_OK;
}

/* The parts of the map, with a dense-valued codec's coder per part (and
 * its velocity per tensor when it runs without error feedback). */
static flps_err setup_parts(flps_client *c)
{
    flps_err rc;

    for (uint32_t i = 0; i < c->pm.nparts; i++) {
        cpart *p = &c->parts[i];
        p->tensor = c->pm.parts[i].tensor;
        p->offset = c->pm.parts[i].offset;
        p->numel = c->pm.parts[i].numel;
        p->shard = c->pm.parts[i].shard;
        if (!c->sparse && c->spec.kind != CODEC_DENSE) {
            float *unused = NULL;
            rc =
                make_coder(c, &c->spec, p->numel, ((uint64_t)c->rank << 32) ^ i,
                           &p->cd, &p->ef, &unused);
            /* Dense-valued codecs without error feedback keep their
             * velocity per tensor (allocated below). */
            flps_free(unused);
            if (rc != FLPS_OK)
                return rc;
        }
    }
    if (!c->sparse && !c->use_ef && c->spec.kind != CODEC_DENSE) {
        for (uint32_t i = 0; i < c->ntensors; i++) {
            c->tensors[i].velocity =
                flps_calloc(c->tensors[i].numel, sizeof(float));
            if (c->tensors[i].velocity == NULL)
                return FLPS_ENOMEM;
        }
    }
    return FLPS_OK;
}

/* The window of dense pushes in flight per shard without a setting: none
 * (client_req.h). A held push moves only while its client is called, so
 * a program that drives several clients from one thread, waiting for
 * each in turn, would wait for ever on the others' held pushes; flworker
 * and flps.torch, one client per process, ask for FLPS_PUSH_WINDOW_AUTO
 * on dense jobs. */
#define PUSH_WINDOW_DEFAULT 0u

/* cfg's push_window as a window limit (0: no bound): $FLPS_PUSH_WINDOW
 * ("auto" or an integer) where cfg leaves it to the library (0) or asks
 * for FLPS_PUSH_WINDOW_AUTO, else cfg's number, else the default. A value
 * that is neither is logged and the default taken. Sets c->win_auto for
 * FLPS_PUSH_WINDOW_AUTO: no bound until flps_client_init sizes it. */
static uint32_t push_window_of(flps_client *c, const flps_client_config *cfg)
{
    const char *env = getenv("FLPS_PUSH_WINDOW");
    char why[160];
    int w = cfg->push_window;

    if ((w == 0 || w == FLPS_PUSH_WINDOW_AUTO) && env != NULL &&
        env[0] != '\0') {
        if (strcmp(env, "auto") == 0)
            w = FLPS_PUSH_WINDOW_AUTO;
        else if (flps_parse_int("FLPS_PUSH_WINDOW", env, INT32_MIN, INT32_MAX,
                                &w, why, sizeof(why)) != FLPS_OK) {
            log_warn("%s (or \"auto\"); taking the default (no window)", why);
            w = 0;
        }
    }
    c->win_auto = w == FLPS_PUSH_WINDOW_AUTO;
    if (w == 0)
        return PUSH_WINDOW_DEFAULT;
    return w < 0 || c->win_auto ? 0 : (uint32_t)w;
}

flps_err client_setup_layout(flps_client *c, const flps_client_config *cfg)
{
    flps_err rc = setup_tensors(c, cfg);

    if (rc != FLPS_OK)
        return rc;
    c->parts = flps_calloc(c->pm.nparts, sizeof(*c->parts));
    c->shard_req = flps_calloc(c->nshards, sizeof(*c->shard_req));
    c->sel_lo = flps_calloc(c->pm.nparts, sizeof(*c->sel_lo));
    c->sel_hi = flps_calloc(c->pm.nparts, sizeof(*c->sel_hi));
    c->sel_pis = flps_calloc(c->pm.nparts, sizeof(*c->sel_pis));
    if (c->parts == NULL || c->shard_req == NULL || c->sel_lo == NULL ||
        c->sel_hi == NULL || c->sel_pis == NULL)
        return FLPS_ENOMEM;
    rc = creq_window_init(c, push_window_of(c, cfg));
    if (rc != FLPS_OK)
        return rc;
    rc = measure_push_header(c);
    if (rc != FLPS_OK)
        return rc;
    return setup_parts(c);
}

flps_err client_setup_credentials(flps_client *c, transport *t)
{
    flps_creds cr;
    char why[512];
    int found = 0;
    flps_err rc = creds_load_env(&cr, &found, why, sizeof(why));

    if (rc != FLPS_OK) {
        log_error("%s", why);
        return rc;
    }
    if (!found)
        return FLPS_OK;
    rc = creds_instance_id(&c->cid);
    if (rc != FLPS_OK) {
        log_error("cannot make a client id: no randomness (getrandom)");
        goto out;
    }
    snprintf(c->auth, sizeof(c->auth), "%s", cr.secret);
    /* Before the first connect: every DEALER authenticates in its
     * handshake (CURVE, encrypted; else PLAIN with the secret). */
    rc = transport_set_credentials(t, &cr, 0, why, sizeof(why));
    c->curve = rc == FLPS_OK && cr.has_curve && strcmp(t->vt->name, "zmq") == 0;
    if (rc == FLPS_ECONFIG && strcmp(t->vt->name, "zmq") != 0) {
        log_warn("%s", why); /* RDMA: the secret still authenticates */
        rc = FLPS_OK;
    } else if (rc != FLPS_OK) {
        log_error("%s", why);
    }
out:
    creds_wipe(&cr);
    return rc;
}

/* The REGISTER message for shard s: the layout pt and the job's
 * settings. */
static void register_msg(const flps_client *c, uint32_t s, proto_tensor *pt,
                         proto_msg *m)
{
    client_msg_base(c, m, PROTO_OP_REGISTER, 0, 0);
    m->cfg.shard = s;
    m->cfg.nshards = c->nshards;
    m->cfg.workers = c->workers;
    m->cfg.part_size = c->part_size;
    m->cfg.piece = c->piece;
    m->cfg.mode = c->async      ? PROTO_MODE_ASYNC
                  : c->weighted ? PROTO_MODE_WEIGHTED
                                : PROTO_MODE_SSGD;
    m->cfg.agg = (uint8_t)c->agg;
    m->cfg.density = c->density;
    snprintf(m->cfg.compression, sizeof(m->cfg.compression), "%s",
             c->spec_text);
    m->cfg.lr = c->lr;
    m->cfg.lr_schedule = c->lr_cosine ? PROTO_LR_COSINE : PROTO_LR_CONSTANT;
    m->cfg.iterations = c->iterations;
    m->cfg.density_warmup = c->density_warmup;
    m->cfg.density_start = c->density_warmup > 0 ? c->density_start : 0;
    m->cfg.server_opt = c->server_opt;
    m->cfg.server_beta = c->server_beta;
    m->ntensors = c->ntensors;
    m->tensors = pt;
}

flps_err client_setup_register(flps_client *c)
{
    proto_tensor *pt = flps_calloc(c->ntensors, sizeof(*pt));
    flps_err rc = FLPS_OK;

    if (pt == NULL)
        return FLPS_ENOMEM;
    for (uint32_t i = 0; i < c->ntensors; i++) {
        snprintf(pt[i].name, sizeof(pt[i].name), "%s", c->tensors[i].name);
        pt[i].numel = c->tensors[i].numel;
    }
    for (uint32_t s = 0; s < c->nshards && rc == FLPS_OK; s++) {
        proto_msg m;
        register_msg(c, s, pt, &m);
        rc = creq_build(&c->shard_req[s], CREQ_REGISTER, s, &m, NULL);
        if (rc == FLPS_OK)
            rc = creq_send(c, &c->shard_req[s]);
    }
    flps_free(pt);
    if (rc != FLPS_OK)
        return client_set_error(c, rc, "cannot register with the shards: %s",
                                flps_strerror(rc));
    return client_recv_drain(c);
}
