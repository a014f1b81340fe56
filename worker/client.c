/* flps client library, lifecycle: the growable configuration
 * (flps_client_config_init, and reading a caller's struct of any size this
 * library knows), the constructors (flps_client_create_config, and the
 * 0.x ones as thin wrappers over it), the transport they make, destroy,
 * and the settings and accessors of a client. The layers a client is made
 * of are listed in client_internal.h; set-up is client_setup.c's. */
#include "worker/client_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transports/select.h"
#include "worker/client_energy.h"
#include "worker/client_metrics.h"
#include "worker/client_pairs.h"
#include "worker/client_req.h"
#include "worker/client_setup.h"

/* ---- the configuration ---- */

/* The 0.3 layout: the fields before size, which flps_client_create, _with
 * and _warmup read (a program built against 0.3 passes only those). */
#define CONFIG_0_3_BYTES offsetof(flps_client_config, size)

/* The smallest struct flps_client_config_init and create_config take: the
 * 0.3 fields and size. */
#define CONFIG_MIN_BYTES (CONFIG_0_3_BYTES + sizeof(size_t))

/* Every field after size, in order, with its default. A new setting is
 * appended to the struct in flps.h and here, and nowhere else: a caller's
 * struct from an older flps.h lacks the newest fields, which then keep
 * their defaults. */
#define CONFIG_FIELDS_AFTER_SIZE(X)                                            \
    X(transport, NULL)                                                         \
    X(density_warmup, 0)                                                       \
    X(density_warmup_start, 0.25)                                              \
    X(gpu_clock, NULL)                                                         \
    X(gpu_clock_slowdown, NULL)                                                \
    X(gpu_clock_record, NULL)                                                  \
    X(gpus, NULL)                                                              \
    X(server_optimizer, NULL)                                                  \
    X(push_window, 0)

/* Whether a caller's struct of size bytes holds field f whole. */
#define CONFIG_HOLDS(size, f)                                                  \
    (offsetof(flps_client_config, f) +                                         \
         sizeof(((flps_client_config *)NULL)->f) <=                            \
     (size))

/* Whether size is one this library can read, logged when it is not. who
 * names the call. */
static int config_size_ok(size_t size, const char *who)
{
    if (size > sizeof(flps_client_config)) {
        log_error("%s: a flps_client_config of %zu bytes is from a newer "
                  "flps.h than this libflps %s (%zu bytes); run the program "
                  "with the libflps it was built against",
                  who, size, flps_version(), sizeof(flps_client_config));
        return 0;
    }
    if (size < CONFIG_MIN_BYTES) {
        log_error("%s: the flps_client_config's size is %zu; make it with "
                  "flps_client_config_init, which sets size (libflps %s "
                  "reads %zu to %zu bytes)",
                  who, size, flps_version(), CONFIG_MIN_BYTES,
                  sizeof(flps_client_config));
        return 0;
    }
    return 1;
}

flps_err flps_client_config_init_size(flps_client_config *cfg, size_t size)
{
    flps_client_config d;

    if (cfg == NULL || !config_size_ok(size, "flps_client_config_init"))
        return FLPS_EINVAL;
    memset(&d, 0, sizeof(d));
    d.part_size = 65536;
    d.async = FLPS_MODE_SYNC;
    d.compression = "dense";
    d.retry_ms = 2000;
    d.deadline_ms = 300000;
    d.size = size;
#define CONFIG_DEFAULT_(f, dflt) d.f = dflt;
    CONFIG_FIELDS_AFTER_SIZE(CONFIG_DEFAULT_)
#undef CONFIG_DEFAULT_
    memcpy(cfg, &d, size); /* the caller's struct may be smaller */
    return FLPS_OK;
}

/* A whole configuration from a caller's struct of cfg->size bytes: the
 * fields it holds, the defaults for the others. */
static flps_err config_read(const flps_client_config *cfg, const char *who,
                            flps_client_config *out)
{
    size_t size;

    if (cfg == NULL)
        return FLPS_EINVAL;
    /* Read through memcpy: the caller's struct may be smaller than ours. */
    memcpy(&size, (const char *)cfg + CONFIG_0_3_BYTES, sizeof(size));
    if (!config_size_ok(size, who))
        return FLPS_EINVAL;
    flps_client_config_init_size(out, sizeof(*out));
    memcpy(out, cfg, CONFIG_0_3_BYTES);
#define CONFIG_READ_(f, dflt)                                                  \
    if (CONFIG_HOLDS(size, f))                                                 \
        memcpy(&out->f, (const char *)cfg + offsetof(flps_client_config, f),   \
               sizeof(out->f));
    CONFIG_FIELDS_AFTER_SIZE(CONFIG_READ_)
#undef CONFIG_READ_
    return FLPS_OK;
}

/* ---- the constructors ---- */

/* The largest message this client sends one shard: every element of the
 * model as an index/value pair, and room for the header. It sizes the
 * RDMA transport's registered buffers. */
static size_t largest_message(const flps_client_config *cfg)
{
    size_t n = 0;

    for (uint32_t i = 0; i < cfg->ntensors; i++)
        n += cfg->tensors[i].numel;
    return n * 8 + 65536;
}

/* The client's settings from cfg (whole and checked). */
static void copy_settings(flps_client *c, const flps_client_config *cfg)
{
    snprintf(c->job, sizeof(c->job), "%s", cfg->job);
    c->rank = cfg->rank;
    c->workers = cfg->workers;
    c->nshards = cfg->nservers;
    c->weighted = cfg->async == FLPS_MODE_WEIGHTED;
    c->async = cfg->async != 0 && !c->weighted;
    c->push_weight = 1;
    c->lr = cfg->lr;
    c->momentum = cfg->momentum;
    c->lr_cosine = cfg->lr_cosine != 0;
    c->iterations = cfg->iterations;
    c->part_size = cfg->part_size ? cfg->part_size : 65536;
    c->retry_s = (cfg->retry_ms > 0 ? cfg->retry_ms : 2000) / 1000.0;
    c->deadline_s = (cfg->deadline_ms > 0 ? cfg->deadline_ms : 300000) / 1000.0;
    c->staleness = UINT32_MAX;
    if (cfg->density_warmup > 0) {
        c->density_warmup = cfg->density_warmup;
        c->density_start = cfg->density_warmup_start;
    }
    /* client_setup_is_valid accepted it. */
    (void)client_setup_server_opt(cfg->server_optimizer, &c->server_opt,
                                  &c->server_beta);
}

/* Connect t to every shard of cfg, in order (shard i is peer i). */
static flps_err connect_shards(flps_client *c, const flps_client_config *cfg)
{
    for (uint32_t s = 0; s < c->nshards; s++) {
        uint32_t peer;
        flps_err rc;
        c->endpoints[s] = flps_strdup(cfg->servers[s] ? cfg->servers[s] : "");
        if (c->endpoints[s] == NULL)
            return FLPS_ENOMEM;
        rc = transport_connect(c->t, c->endpoints[s], &peer);
        if (rc != FLPS_OK) {
            log_error("%s", c->t->errmsg);
            return rc;
        }
    }
    return FLPS_OK;
}

/* The constructor every other one comes to: a client of cfg (a whole
 * configuration) over transport t. */
static flps_err create_on(const flps_client_config *cfg, transport *t,
                          flps_client **out)
{
    flps_client *c;
    flps_err rc;

    if (out == NULL || t == NULL || !client_setup_is_valid(cfg))
        return FLPS_EINVAL;
    c = flps_calloc(1, sizeof(*c));
    if (c == NULL)
        return FLPS_ENOMEM;
    copy_settings(c, cfg);
    rc = client_setup_codec(c, cfg->compression);
    if (rc != FLPS_OK) {
        log_error("%s", c->errmsg); /* the caller has no client to ask */
        goto fail;
    }
    c->endpoints = flps_calloc(c->nshards, sizeof(*c->endpoints));
    if (c->endpoints == NULL) {
        rc = FLPS_ENOMEM;
        goto fail;
    }
    /* The credentials first: whether CURVE runs picks the piece size. */
    rc = client_setup_credentials(c, t);
    if (rc != FLPS_OK)
        goto fail;
    rc = client_setup_layout(c, cfg);
    if (rc != FLPS_OK) {
        log_error("cannot set up the client: %s",
                  c->errmsg[0] ? c->errmsg : flps_strerror(rc));
        goto fail;
    }
    c->t = t;
    rc = connect_shards(c, cfg);
    if (rc != FLPS_OK)
        goto fail;
    rc = client_setup_register(c);
    if (rc != FLPS_OK) {
        log_error("%s", c->errmsg);
        goto fail;
    }
    client_metrics_from_env();
    rc = client_energy_open(c, cfg);
    if (rc != FLPS_OK)
        goto fail;
    *out = c;
    return FLPS_OK;
fail:
    c->t = NULL; /* the caller keeps the transport on error */
    flps_client_destroy(c);
    return rc;
}

/* A client of cfg (a whole configuration) on the transport cfg->transport
 * names. */
static flps_err create_with(const flps_client_config *cfg, flps_client **out)
{
    transport_select sel = {.kind = TRANSPORT_KIND_ZMQ};
    const char *name = cfg->transport;
    transport *t = NULL;
    char why[1024], choices[64];
    flps_err rc;

    /* Checked before the ZeroMQ context exists, so a bad configuration
     * costs nothing and is always FLPS_EINVAL. */
    if (out == NULL || !client_setup_is_valid(cfg))
        return FLPS_EINVAL;
    if (name == NULL)
        name = getenv("FLPS_TRANSPORT");
    if (name != NULL && name[0] != '\0' &&
        !transport_kind_parse(name, &sel.kind)) {
        log_error("transport: '%.64s'%s is not a transport; use %s", name,
                  cfg->transport == NULL ? " (from FLPS_TRANSPORT)" : "",
                  transport_kind_choices(choices, sizeof(choices)));
        return FLPS_EINVAL;
    }
    sel.max_message_bytes = largest_message(cfg);
    rc = transport_create_for(&sel, &t, NULL, why, sizeof(why));
    if (rc != FLPS_OK) {
        log_error("%s", why); /* the caller has no client to ask */
        return rc;
    }
    if (why[0] != '\0')
        log_info("%s", why);
    rc = create_on(cfg, t, out);
    if (rc != FLPS_OK)
        transport_destroy(t);
    return rc;
}

flps_err flps_client_create_config(const flps_client_config *cfg,
                                   flps_client **out)
{
    flps_client_config whole;

    if (config_read(cfg, "flps_client_create_config", &whole) != FLPS_OK)
        return FLPS_EINVAL;
    return create_with(&whole, out);
}

flps_err flps_client_create_on(const flps_client_config *cfg, transport *t,
                               flps_client **out)
{
    flps_client_config whole;

    if (config_read(cfg, "flps_client_create_on", &whole) != FLPS_OK)
        return FLPS_EINVAL;
    return create_on(&whole, t, out);
}

/* The 0.x constructors read cfg as 0.3 laid it out (nothing from size on)
 * and take the later settings as arguments. */
static flps_err create_0_3(const flps_client_config *cfg,
                           const char *transport_name,
                           uint64_t warmup_iterations, double start_density,
                           flps_client **out)
{
    flps_client_config whole;

    if (cfg == NULL)
        return FLPS_EINVAL;
    flps_client_config_init_size(&whole, sizeof(whole));
    memcpy(&whole, cfg, CONFIG_0_3_BYTES);
    whole.transport = transport_name;
    whole.density_warmup = warmup_iterations;
    whole.density_warmup_start = start_density;
    return create_with(&whole, out);
}

flps_err flps_client_create(const flps_client_config *cfg, flps_client **out)
{
    return flps_client_create_with(cfg, NULL, out);
}

flps_err flps_client_create_with(const flps_client_config *cfg,
                                 const char *transport_name, flps_client **out)
{
    return create_0_3(cfg, transport_name, 0, 0, out);
}

flps_err flps_client_create_warmup(const flps_client_config *cfg,
                                   const char *transport_name,
                                   uint64_t warmup_iterations,
                                   double start_density, flps_client **out)
{
    return create_0_3(cfg, transport_name, warmup_iterations, start_density,
                      out);
}

void flps_client_destroy(flps_client *c)
{
    if (c == NULL)
        return;
    client_metrics_detach(c);
    client_energy_close(c);
    for (uint32_t i = 0; c->parts != NULL && i < c->pm.nparts; i++) {
        creq_clear(&c->parts[i].req);
        codec_destroy(c->parts[i].cd);
        ef_destroy(c->parts[i].ef);
        proto_buf_release(c->parts[i].vel);
        proto_buf_release(c->parts[i].spare);
    }
    for (uint32_t s = 0; c->shard_req != NULL && s < c->nshards; s++)
        creq_clear(&c->shard_req[s]);
    transport_destroy(c->t);
    for (uint32_t i = 0; c->tensors != NULL && i < c->ntensors; i++) {
        codec_destroy(c->tensors[i].cd);
        ef_destroy(c->tensors[i].ef);
        flps_free(c->tensors[i].velocity);
        cpairs_destroy(c->tensors[i].pairs);
    }
    for (uint32_t s = 0; c->endpoints != NULL && s < c->nshards; s++)
        flps_free(c->endpoints[s]);
    flps_free(c->endpoints);
    flps_free(c->tensors);
    flps_free(c->parts);
    flps_free(c->shard_req);
    flps_free(c->win);
    flps_free(c->sel_lo);
    flps_free(c->sel_hi);
    flps_free(c->sel_pis);
    partmap_fini(&c->pm);
    explicit_bzero(c->auth, sizeof(c->auth));
    flps_free(c);
}

/* ---- settings and accessors ---- */

flps_err flps_client_set_push_weight(flps_client *c, double weight)
{
    if (c == NULL || !isfinite(weight) || weight < 0 ||
        weight > PROTO_WEIGHT_MAX)
        return FLPS_EINVAL;
    if (!c->weighted)
        return FLPS_ESTATE; /* not sticky: the client is unchanged */
    c->push_weight = weight;
    return FLPS_OK;
}

void flps_client_get_messages(const flps_client *c, uint64_t *sent,
                              uint64_t *received)
{
    if (sent != NULL)
        *sent = c->t->stats.msgs_sent;
    if (received != NULL)
        *received = c->t->stats.msgs_recv;
}

flps_err flps_client_residual_norm(const flps_client *c, uint32_t tensor,
                                   double *norm)
{
    const ctensor *t;
    double ss = 0.0;

    if (c == NULL || tensor >= c->ntensors || norm == NULL)
        return FLPS_EINVAL;
    t = &c->tensors[tensor];
    if (t->ef != NULL) {
        double v = ef_residual_norm(t->ef);
        ss = v * v;
    } else {
        /* Dense-valued codecs keep a residual per part. */
        uint32_t first = c->pm.first_part[tensor],
                 last = client_tensor_end_part(c, tensor);
        for (uint32_t pi = first; pi < last; pi++)
            if (c->parts[pi].ef != NULL) {
                double v = ef_residual_norm(c->parts[pi].ef);
                ss += v * v;
            }
    }
    *norm = sqrt(ss);
    return FLPS_OK;
}

const char *flps_client_last_error(const flps_client *c)
{
    return c->errmsg;
}

void flps_client_get_stats(const flps_client *c, flps_client_stats *out)
{
    *out = c->stats;
    /* A push held by its shard's window (client_req.h) counts as sent
     * from the push on: each push's bytes are its own, whenever they go. */
    out->bytes_sent = c->t->stats.bytes_sent + c->held_wire;
    out->bytes_received = c->t->stats.bytes_recv;
    /* A dense run sends the same control messages and re-sends; only the
     * pushes differ. */
    out->dense_bytes =
        out->bytes_sent - c->push_wire_bytes + c->dense_wire_bytes;
}

uint64_t flps_client_resume_iteration(const flps_client *c)
{
    return c->resume_iter;
}
