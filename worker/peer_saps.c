/* Decentralized training, SAPS-PSGD (include/flps.h, flps_saps_*): the
 * rounds' matchings (worker/saps_peers.h), the shared-seed masks, the
 * exchanges and averages, the agreements on who is alive and on the
 * bandwidth matrix (worker/peer_sync.h), and the consensus model at the
 * end, over worker/peer_net.h. docs/algorithms.md, section 8. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "compress/codec.h"
#include "flps.h"
#include "transports/select.h"
#include "worker/client_metrics.h"
#include "worker/peer_net.h"
#include "worker/peer_sync.h"
#include "worker/saps_peers.h"

#define SAPS_DEFAULT_DENSITY 0.01
#define SAPS_DEFAULT_WINDOW 10u
#define SAPS_DEFAULT_SYNC 10u
#define SAPS_DEFAULT_DEADLINE_MS 10000
#define SAPS_DEFAULT_JOIN_MS 120000
#define SAPS_DEFAULT_PROBE_BYTES ((size_t)256 * 1024)
/* A probe payload beyond this is a mistake (64 MiB each way per pair). */
#define SAPS_MAX_PROBE_BYTES ((size_t)64 << 20)
#define SAPS_MAX_ENDPOINT 255
/* An agreement waits this many exchange deadlines for each step: a worker
 * whose peer died spent one deadline waiting for it, and reaches the
 * agreement that much after the others, which must still hear it. */
#define SAPS_AGREE_DEADLINES 3.0

/* The rounds' tags of the agreements: create's probe and agreement are
 * tag 0; boundary b's membership check (and probe) 2b + 1, its matrix
 * 2b + 2; the final one's membership 2R + 1. */
#define TAG_MEMBERS(b) (2 * (b) + 1)
#define TAG_MATRIX(b) (2 * (b) + 2)

struct flps_saps {
    uint32_t rank, n;
    uint32_t ntensors;
    float **data;     /* the tensors' values (borrowed) */
    size_t *numel;    /* per tensor */
    size_t *k;        /* per tensor: the mask's size */
    size_t total_k;   /* the mask of a round, all tensors */
    size_t params;    /* the model's elements */
    uint64_t *bitmap; /* the mask's scratch, for the largest tensor */
    uint32_t *idx;    /* a round's mask: total_k indices, tensor by tensor */
    float *buf;       /* total_k values + n suspicion flags */
    double density;
    uint64_t seed, sync_every, reprobe;
    double deadline_s, join_deadline_s;
    double agree_s; /* an agreement step's wait: SAPS_AGREE_DEADLINES */
    size_t probe_bytes;
    int auto_threshold;
    double threshold; /* in force */
    double *bw;       /* n * n bytes/s, the agreed matrix */
    uint8_t *alive;   /* agreed: workers taking part */
    uint8_t *suspect; /* peers that did not answer since the agreement */
    uint32_t *mate;
    saps_peers *sel;
    peer_net *net;
    uint64_t next_round;
    flps_saps_stats st;
    flps_err err; /* sticky */
    char errmsg[512];
};

/* ---- configuration ---- */

#define SAPS_CFG_MIN_BYTES sizeof(size_t)

flps_err flps_saps_config_init_size(flps_saps_config *cfg, size_t size)
{
    flps_saps_config d;

    if (cfg == NULL || size < SAPS_CFG_MIN_BYTES ||
        size > sizeof(flps_saps_config)) {
        log_error("flps_saps_config_init: %s (a config of %zu bytes; this "
                  "libflps %s takes up to %zu)",
                  cfg == NULL ? "no config" : "a size it cannot read", size,
                  flps_version(), sizeof(flps_saps_config));
        return FLPS_EINVAL;
    }
    memset(&d, 0, sizeof(d));
    d.size = size;
    d.density = SAPS_DEFAULT_DENSITY;
    d.bandwidth_threshold = -1;
    d.connectivity_window = SAPS_DEFAULT_WINDOW;
    d.sync_every = SAPS_DEFAULT_SYNC;
    d.seed = 1;
    d.deadline_ms = SAPS_DEFAULT_DEADLINE_MS;
    d.probe_bytes = SAPS_DEFAULT_PROBE_BYTES;
    memcpy(cfg, &d, size);
    return FLPS_OK;
}

/* cfg as this library lays it out: the caller's bytes over the defaults. */
static flps_err saps_config_read(const flps_saps_config *cfg,
                                 flps_saps_config *out)
{
    size_t size;

    if (cfg == NULL)
        return FLPS_EINVAL;
    memcpy(&size, cfg, sizeof(size));
    if (flps_saps_config_init_size(out, sizeof(*out)) != FLPS_OK ||
        size < SAPS_CFG_MIN_BYTES || size > sizeof(*out)) {
        log_error("flps_saps_create: the config's size is %zu; make it with "
                  "flps_saps_config_init",
                  size);
        return FLPS_EINVAL;
    }
    memcpy(out, cfg, size);
    out->size = sizeof(*out);
    return FLPS_OK;
}

/* The sticky error, also logged. Returns err. */
static flps_err saps_fail(flps_saps *s, flps_err err, const char *fmt, ...)
{
    va_list ap;

    if (s->err != FLPS_OK)
        return s->err;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
    va_end(ap);
    s->err = err;
    log_error("saps: %s", s->errmsg);
    return err;
}

static int saps_cfg_is_valid(const flps_saps_config *c)
{
    if (c->job == NULL || c->job[0] == '\0' || c->workers < SAPS_MIN_WORKERS ||
        c->workers > SAPS_MAX_WORKERS || c->rank >= c->workers ||
        c->tensors == NULL || c->ntensors == 0 || !(c->density > 0) ||
        c->density > 1 || c->connectivity_window < 2 || c->deadline_ms < 0 ||
        c->join_deadline_ms < 0 || c->probe_bytes > SAPS_MAX_PROBE_BYTES ||
        !isfinite(c->bandwidth_threshold))
        return 0;
    for (uint32_t i = 0; i < c->ntensors; i++)
        if (c->tensors[i].data == NULL || c->tensors[i].numel == 0 ||
            c->tensors[i].numel > UINT32_MAX)
            return 0;
    return 1;
}

/* The peers' endpoints from the comma-separated list: out[0..n) point
 * into copy (caller frees). FLPS_EINVAL (logged) unless there is one per
 * worker. */
static flps_err split_peers(const char *list, uint32_t n, char **copy,
                            const char **out)
{
    uint32_t got = 0;
    char *save = NULL;

    if (list == NULL || list[0] == '\0') {
        log_error("saps: no peers: set flps_saps_config.peers or FLPS_PEERS "
                  "to every worker's endpoint, rank order, comma-separated");
        return FLPS_EINVAL;
    }
    *copy = flps_strdup(list);
    if (*copy == NULL)
        return FLPS_ENOMEM;
    for (char *tok = strtok_r(*copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (got == n || strlen(tok) > SAPS_MAX_ENDPOINT)
            break;
        out[got++] = tok;
    }
    if (got != n || strtok_r(NULL, ",", &save) != NULL) {
        log_error("saps: the peers list names %s endpoints than the job's %u "
                  "workers",
                  got < n ? "fewer" : "more", n);
        return FLPS_EINVAL;
    }
    return FLPS_OK;
}

/* ---- set-up ---- */

/* The tensors, each one's mask size, and the buffers of a round. */
static flps_err saps_layout(flps_saps *s, const flps_saps_config *c)
{
    const codec_spec spec = {.kind = CODEC_RANDK, .density = c->density};
    size_t biggest = 0;

    s->ntensors = c->ntensors;
    s->data = flps_calloc(c->ntensors, sizeof(*s->data));
    s->numel = flps_calloc(c->ntensors, sizeof(*s->numel));
    s->k = flps_calloc(c->ntensors, sizeof(*s->k));
    if (s->data == NULL || s->numel == NULL || s->k == NULL)
        return FLPS_ENOMEM;
    for (uint32_t i = 0; i < c->ntensors; i++) {
        s->data[i] = c->tensors[i].data;
        s->numel[i] = c->tensors[i].numel;
        s->k[i] = codec_count_for(&spec, s->numel[i]);
        s->total_k += s->k[i];
        s->params += s->numel[i];
        if (s->numel[i] > biggest)
            biggest = s->numel[i];
    }
    s->bitmap = flps_calloc((biggest + 63) / 64, sizeof(*s->bitmap));
    s->idx = flps_calloc(s->total_k, sizeof(*s->idx));
    s->buf = flps_calloc(s->total_k + s->n, sizeof(*s->buf));
    s->bw = flps_calloc((size_t)s->n * s->n, sizeof(*s->bw));
    s->alive = flps_calloc(s->n, 1);
    s->suspect = flps_calloc(s->n, 1);
    s->mate = flps_calloc(s->n, sizeof(*s->mate));
    if (s->bitmap == NULL || s->idx == NULL || s->buf == NULL ||
        s->bw == NULL || s->alive == NULL || s->suspect == NULL ||
        s->mate == NULL)
        return FLPS_ENOMEM;
    memset(s->alive, 1, s->n);
    return FLPS_OK;
}

/* The largest message a worker receives, in values. */
static size_t saps_max_values(const flps_saps *s)
{
    size_t m = s->params;

    if (s->total_k + s->n > m)
        m = s->total_k + s->n;
    if (s->probe_bytes / sizeof(float) > m)
        m = s->probe_bytes / sizeof(float);
    if ((size_t)s->n * (s->n + 1) > m)
        m = (size_t)s->n * (s->n + 1);
    return m;
}

static flps_err saps_open(flps_saps *s, const flps_saps_config *c)
{
    const char *eps[SAPS_MAX_WORKERS];
    const char *tname =
        c->transport != NULL ? c->transport : getenv("FLPS_TRANSPORT");
    peer_net_cfg nc = {.job = c->job, .rank = c->rank, .workers = c->workers};
    char *copy = NULL, why[1024];
    flps_err rc;

    nc.kind = TRANSPORT_KIND_ZMQ;
    if (tname != NULL && tname[0] != '\0' &&
        !transport_kind_parse(tname, &nc.kind))
        return saps_fail(s, FLPS_ECONFIG, "transport '%.64s' is not one",
                         tname);
    rc = split_peers(c->peers != NULL ? c->peers : getenv("FLPS_PEERS"),
                     c->workers, &copy, eps);
    if (rc != FLPS_OK) {
        flps_free(copy);
        return saps_fail(s, rc, "the peers' endpoints are missing or wrong");
    }
    nc.endpoints = eps;
    nc.max_values = saps_max_values(s);
    rc = peer_net_create(&nc, &s->net, why, sizeof(why));
    flps_free(copy);
    if (rc != FLPS_OK)
        return saps_fail(s, rc, "%s", why);
    return FLPS_OK;
}

/* The threshold of the matrix among the workers alive: the configured one,
 * or the auto split of their links. */
static flps_err saps_pick_threshold(flps_saps *s, double *out)
{
    uint32_t m = 0, *live = flps_calloc(s->n, sizeof(*live));
    double *sub = NULL;
    char why[256];
    flps_err rc = FLPS_ENOMEM;

    if (!s->auto_threshold) {
        flps_free(live);
        *out = s->threshold;
        return FLPS_OK;
    }
    if (live == NULL)
        goto out;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->alive[i])
            live[m++] = i;
    if (m < SAPS_MIN_WORKERS) {
        *out = 0; /* nobody to exchange with: any threshold */
        rc = FLPS_OK;
        goto out;
    }
    sub = flps_calloc((size_t)m * m, sizeof(*sub));
    if (sub == NULL)
        goto out;
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t j = 0; j < m; j++)
            sub[(size_t)i * m + j] = s->bw[(size_t)live[i] * s->n + live[j]];
    rc = saps_threshold_auto(sub, m, out, why, sizeof(why));
    if (rc != FLPS_OK)
        saps_fail(s, rc, "the bandwidth threshold: %s", why);
out:
    flps_free(sub);
    flps_free(live);
    return rc;
}

/* How many of the live links are fast, for the log. */
static uint32_t saps_fast_links(const flps_saps *s, uint32_t *links)
{
    uint32_t fast = 0;

    *links = 0;
    for (uint32_t i = 0; i < s->n; i++)
        for (uint32_t j = i + 1; j < s->n; j++) {
            if (!s->alive[i] || !s->alive[j])
                continue;
            (*links)++;
            fast += saps_link_bandwidth(s->bw, s->n, i, j) > s->threshold;
        }
    return fast;
}

/* Probe this worker's row at tag among the workers alive and agree on the
 * whole matrix (and who is alive) at tag. */
static flps_err saps_measure(flps_saps *s, uint64_t probe_tag,
                             uint64_t agree_tag)
{
    peer_net_stats before, after;
    double t0 = flps_mono_s();
    char why[512];
    flps_err rc;

    peer_net_get_stats(s->net, &before);
    rc = peer_sync_probe(s->net, s->rank, s->n, s->alive, probe_tag,
                         s->probe_bytes, s->deadline_s,
                         s->bw + (size_t)s->rank * s->n);
    if (rc != FLPS_OK)
        return saps_fail(s, rc, "the bandwidth probe failed: %s",
                         flps_strerror(rc));
    peer_net_get_stats(s->net, &after);
    s->st.probe_bytes += after.bytes_sent - before.bytes_sent;
    s->st.probe_seconds += flps_mono_s() - t0;
    rc = peer_sync_agree(s->net, s->rank, s->n, agree_tag, s->agree_s, s->alive,
                         s->bw, why, sizeof(why));
    if (rc != FLPS_OK)
        return saps_fail(s, rc, "%s", why);
    return saps_pick_threshold(s, &s->threshold);
}

/* The workers this one counts as taking part. */
static uint32_t saps_alive(const flps_saps *s)
{
    uint32_t n = 0;

    for (uint32_t w = 0; w < s->n; w++)
        n += s->alive[w];
    return n;
}

/* Greet the others. Those that never answer within the join deadline (a
 * process that died before it, a host lost at the start) are left out
 * when most of the job's workers did answer: more than half, so that two
 * halves cut apart cannot both train. The agreement after the bandwidth
 * probe then settles, for all alike, who takes part. */
static flps_err saps_join(flps_saps *s)
{
    char why[512];
    flps_err rc;

    rc = peer_sync_join(s->net, s->rank, s->n,
                        flps_mono_s() + s->join_deadline_s, s->alive, why,
                        sizeof(why));
    if (rc == FLPS_ETIMEDOUT && saps_alive(s) * 2 > s->n) {
        uint32_t first = 0;

        while (first < s->n && s->alive[first])
            first++;
        log_warn("saps: %u of the job's %u workers never joined within %.3g "
                 "s (worker %u among them): going on with the %u that did, "
                 "most of them",
                 s->n - saps_alive(s), s->n, s->join_deadline_s, first,
                 saps_alive(s));
        return FLPS_OK;
    }
    if (rc != FLPS_OK)
        return saps_fail(s, rc, "%s", why);
    return FLPS_OK;
}

flps_err flps_saps_create(const flps_saps_config *cfg, flps_saps **out)
{
    flps_saps_config c;
    flps_saps *s;
    saps_cfg sc;
    char why[512];
    uint32_t links = 0, fast;
    flps_err rc;

    if (out == NULL || saps_config_read(cfg, &c) != FLPS_OK)
        return FLPS_EINVAL;
    if (!saps_cfg_is_valid(&c)) {
        log_error("flps_saps_create: the configuration is out of range: a job "
                  "id, 2 to %u workers, a rank below them, tensors with data, "
                  "0 < density <= 1, connectivity_window >= 2, deadlines >= "
                  "0, a finite threshold and a probe of at most 64 MiB",
                  SAPS_MAX_WORKERS);
        return FLPS_EINVAL;
    }
    memset(&sc, 0, sizeof(sc));
    if (saps_select_parse(c.peer_selection ? c.peer_selection : "adaptive",
                          &sc.select, why, sizeof(why)) != FLPS_OK) {
        log_error("flps_saps_create: peer_selection: %s", why);
        return FLPS_ECONFIG;
    }
    s = flps_calloc(1, sizeof(*s));
    if (s == NULL)
        return FLPS_ENOMEM;
    s->rank = c.rank;
    s->n = c.workers;
    s->density = c.density;
    s->seed = c.seed;
    s->sync_every = c.sync_every;
    s->reprobe = c.bandwidth_reprobe;
    s->deadline_s =
        (c.deadline_ms ? c.deadline_ms : SAPS_DEFAULT_DEADLINE_MS) / 1000.0;
    s->agree_s = SAPS_AGREE_DEADLINES * s->deadline_s;
    s->join_deadline_s = c.join_deadline_ms / 1000.0;
    if (c.join_deadline_ms == 0) {
        const char *e = getenv("FLPS_DEADLINE_MS");
        long v = e != NULL ? strtol(e, NULL, 10) : 0;

        s->join_deadline_s = (v > 0 ? (double)v : SAPS_DEFAULT_JOIN_MS) / 1e3;
    }
    s->probe_bytes = c.probe_bytes ? c.probe_bytes : SAPS_DEFAULT_PROBE_BYTES;
    s->auto_threshold = c.bandwidth_threshold < 0;
    s->threshold = s->auto_threshold ? 0 : c.bandwidth_threshold;
    rc = saps_layout(s, &c);
    if (rc != FLPS_OK)
        goto fail;
    rc = saps_open(s, &c);
    if (rc == FLPS_OK)
        rc = saps_join(s);
    if (rc == FLPS_OK)
        rc = saps_measure(s, 0, 0);
    if (rc == FLPS_OK && saps_alive(s) * 2 <= s->n)
        rc = saps_fail(s, FLPS_ESTATE,
                       "only %u of the job's %u workers took part in the "
                       "agreement after the bandwidth probe, not most of "
                       "them: this worker does not train without the "
                       "others (did it start after they had gone on "
                       "without it, or is it cut off from them?)",
                       saps_alive(s), s->n);
    if (rc != FLPS_OK)
        goto fail;
    sc.workers = s->n;
    sc.threshold = s->threshold;
    sc.window = c.connectivity_window;
    sc.seed = c.seed;
    rc = saps_peers_create(&sc, s->bw, &s->sel, why, sizeof(why));
    if (rc != FLPS_OK) {
        saps_fail(s, rc, "peer selection: %s", why);
        goto fail;
    }
    for (uint32_t w = 0; w < s->n; w++) {
        if (s->alive[w])
            continue;
        saps_peers_set_dead(s->sel, w, 0, NULL, 0);
        s->st.dead++;
        log_warn("saps: worker %u is not in the job (it never joined, or "
                 "left during the bandwidth probe): the others go on "
                 "without it",
                 w);
    }
    fast = saps_fast_links(s, &links);
    log_info("saps: rank %u of %u over %s: %zu of %zu values a round "
             "(density %g); bandwidth probe %.2f s, threshold %.4g bytes/s%s: "
             "%u of %u links fast; peers %s",
             s->rank, s->n, peer_net_transport(s->net), s->total_k, s->params,
             s->density, s->st.probe_seconds, s->threshold,
             s->auto_threshold ? " (auto)" : "", fast, links,
             saps_select_name(sc.select));
    client_metrics_from_env();
    *out = s;
    return FLPS_OK;
fail:
    flps_saps_destroy(s);
    return rc;
}

void flps_saps_destroy(flps_saps *s)
{
    if (s == NULL)
        return;
    saps_peers_destroy(s->sel);
    peer_net_destroy(s->net);
    flps_free(s->data);
    flps_free(s->numel);
    flps_free(s->k);
    flps_free(s->bitmap);
    flps_free(s->idx);
    flps_free(s->buf);
    flps_free(s->bw);
    flps_free(s->alive);
    flps_free(s->suspect);
    flps_free(s->mate);
    flps_free(s);
}

/* ---- agreements ---- */

/* Workers alive before that the agreement left out: dead from round
 * `from` on, in the matchings too. */
static void saps_mark_dead(flps_saps *s, const uint8_t *before, uint64_t from)
{
    for (uint32_t w = 0; w < s->n; w++) {
        if (!before[w] || s->alive[w])
            continue;
        saps_peers_set_dead(s->sel, w, from, NULL, 0);
        s->st.dead++;
        log_warn("saps: worker %u is gone (it did not take part in the "
                 "membership check before round %llu): the others go on "
                 "without it",
                 w, (unsigned long long)from);
    }
    memset(s->suspect, 0, s->n);
}

/* The agreement at boundary b (before round b, or after the last when b
 * is the number of rounds), with a new probe and matrix when probe. */
static flps_err saps_agree(flps_saps *s, uint64_t b, int probe)
{
    uint8_t before[SAPS_MAX_WORKERS];
    char why[512];
    flps_err rc;

    memcpy(before, s->alive, s->n);
    rc = peer_sync_agree(s->net, s->rank, s->n, TAG_MEMBERS(b), s->agree_s,
                         s->alive, NULL, why, sizeof(why));
    if (rc != FLPS_OK)
        return saps_fail(s, rc, "%s", why);
    if (probe) {
        memset(s->bw + (size_t)s->rank * s->n, 0, s->n * sizeof(*s->bw));
        rc = saps_measure(s, TAG_MEMBERS(b), TAG_MATRIX(b));
        if (rc == FLPS_OK)
            rc = saps_peers_set_bandwidth(s->sel, s->bw, s->threshold, why,
                                          sizeof(why));
        if (rc != FLPS_OK)
            return saps_fail(s, rc, "a new bandwidth matrix: %s", why);
        log_info("saps: round %llu: bandwidth measured again (threshold "
                 "%.4g bytes/s)",
                 (unsigned long long)b, s->threshold);
    }
    saps_mark_dead(s, before, b);
    return FLPS_OK;
}

/* ---- rounds ---- */

/* FNV-1a over the matching, chained into h. */
static uint64_t saps_hash(uint64_t h, const uint32_t *mate, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (mate[i] >> (8 * b)) & 0xffu;
            h *= 1099511628211ULL;
        }
    return h;
}

/* Round r's mask (the same on every worker) and this worker's values at
 * it into buf, followed by its suspicions. */
static void saps_gather(flps_saps *s, uint64_t r)
{
    size_t at = 0;

    for (uint32_t t = 0; t < s->ntensors; t++) {
        uint32_t *idx = s->idx + at;

        codec_randk_indices(s->numel[t], s->k[t], saps_mask_seed(s->seed, r, t),
                            s->bitmap, idx);
        for (size_t j = 0; j < s->k[t]; j++)
            s->buf[at + j] = s->data[t][idx[j]];
        at += s->k[t];
    }
    for (uint32_t w = 0; w < s->n; w++)
        s->buf[s->total_k + w] = s->suspect[w] ? 1.0f : 0.0f;
}

/* x[I] = (x[I] + y) / 2 with the peer's values y, and the peer's
 * suspicions taken over (a peer skipped for them is not waited for). */
static void saps_average(flps_saps *s, const float *y)
{
    size_t at = 0;

    for (uint32_t t = 0; t < s->ntensors; t++) {
        const uint32_t *idx = s->idx + at;
        float *x = s->data[t];

        for (size_t j = 0; j < s->k[t]; j++)
            x[idx[j]] = 0.5f * (x[idx[j]] + y[at + j]);
        at += s->k[t];
    }
    for (uint32_t w = 0; w < s->n; w++)
        if (y[s->total_k + w] != 0 && w != s->rank && s->alive[w])
            s->suspect[w] = 1;
}

/* The exchange of round r with peer p. */
static flps_err saps_exchange(flps_saps *s, uint64_t r, uint32_t p,
                              flps_saps_round_info *info)
{
    const size_t len = s->total_k + s->n;
    peer_msg *m = NULL;
    double t0;
    flps_err rc;

    saps_gather(s, r);
    rc = peer_net_send(s->net, p, PEER_VALUES, r, 0, s->buf, len);
    if (rc != FLPS_OK)
        return saps_fail(s, rc, "round %llu: cannot send to worker %u",
                         (unsigned long long)r, p);
    t0 = flps_mono_s();
    /* A suspected peer is not waited for: its values count only if they
     * are here already. */
    rc = peer_net_take(s->net, PEER_VALUES, r, 0, p,
                       s->suspect[p] ? t0 : t0 + s->deadline_s, &m);
    s->st.wait_seconds += flps_mono_s() - t0;
    if (rc == FLPS_OK && m->n == len) {
        saps_average(s, m->val);
        info->exchanged = 1;
        s->st.exchanges++;
        s->st.slow_exchanges += info->slow;
    } else if (rc == FLPS_OK || rc == FLPS_ETIMEDOUT) {
        if (!s->suspect[p])
            log_warn("saps: round %llu: worker %u did not answer within "
                     "%.3g s: skipped, and not waited for until the next "
                     "membership check",
                     (unsigned long long)r, p, s->deadline_s);
        s->suspect[p] = 1;
        info->skipped = 1;
        s->st.skipped++;
        rc = FLPS_OK;
    }
    peer_msg_free(m);
    peer_net_forget(s->net, PEER_VALUES, r + 1);
    return rc == FLPS_OK ? FLPS_OK
                         : saps_fail(s, rc, "round %llu: %s",
                                     (unsigned long long)r, flps_strerror(rc));
}

/* Whether boundary r holds an agreement, and a probe. */
static int saps_is_boundary(const flps_saps *s, uint64_t r, int *probe)
{
    *probe = r > 0 && s->reprobe > 0 && r % s->reprobe == 0;
    return *probe || (r > 0 && s->sync_every > 0 && r % s->sync_every == 0);
}

/* The bytes an exchange of the whole model would put on the wire: the
 * values, the flags and a header like this round's. */
static uint64_t saps_dense_bytes(const flps_saps *s, uint64_t sent)
{
    return sent + (uint64_t)(s->params - s->total_k) * sizeof(float);
}

flps_err flps_saps_round(flps_saps *s, uint64_t round,
                         flps_saps_round_info *out)
{
    flps_saps_round_info info;
    saps_round_info ri;
    peer_net_stats before, mid, after;
    char why[256];
    uint32_t p;
    int probe = 0;
    flps_err rc;

    if (s == NULL)
        return FLPS_EINVAL;
    if (s->err != FLPS_OK)
        return s->err;
    if (round != s->next_round) {
        log_error("flps_saps_round: round %llu out of order (the next is "
                  "%llu)",
                  (unsigned long long)round, (unsigned long long)s->next_round);
        return FLPS_EINVAL;
    }
    memset(&info, 0, sizeof(info));
    peer_net_get_stats(s->net, &before);
    if (saps_is_boundary(s, round, &probe)) {
        rc = saps_agree(s, round, probe);
        if (rc != FLPS_OK)
            return rc;
    }
    rc = saps_peers_round(s->sel, round, s->mate, &ri, why, sizeof(why));
    if (rc != FLPS_OK)
        return saps_fail(s, rc, "round %llu's matching: %s",
                         (unsigned long long)round, why);
    info.matching_hash = saps_hash(14695981039346656037ULL, s->mate, s->n);
    s->st.matching_digest =
        saps_hash(s->st.matching_digest ^ round, s->mate, s->n);
    info.alive = 0;
    for (uint32_t w = 0; w < s->n; w++)
        info.alive += s->alive[w];
    p = s->mate[s->rank];
    info.peer = p == SAPS_NO_PEER ? UINT32_MAX : p;
    peer_net_get_stats(s->net, &mid);
    if (p == SAPS_NO_PEER) {
        s->st.idle++;
    } else {
        info.peer_bandwidth = saps_link_bandwidth(s->bw, s->n, s->rank, p);
        info.slow = !(info.peer_bandwidth > s->threshold);
        rc = saps_exchange(s, round, p, &info);
        if (rc != FLPS_OK)
            return rc;
    }
    peer_net_get_stats(s->net, &after);
    info.bytes_sent = after.bytes_sent - before.bytes_sent;
    if (p != SAPS_NO_PEER) {
        s->st.exchange_bytes += after.bytes_sent - mid.bytes_sent;
        s->st.dense_bytes +=
            saps_dense_bytes(s, after.bytes_sent - mid.bytes_sent);
    }
    s->st.rounds++;
    s->next_round = round + 1;
    client_metrics_saps_round(&info);
    if (out != NULL)
        *out = info;
    return FLPS_OK;
}

/* ---- the consensus ---- */

/* The coordinator's side: every alive worker's model (its own included)
 * averaged into avg (params doubles), their distances to it. */
static flps_err saps_collect(flps_saps *s, uint64_t round, double *avg,
                             flps_saps_consensus_info *info)
{
    peer_msg **got = flps_calloc(s->n, sizeof(*got));
    double deadline = flps_mono_s() + s->agree_s, dist = 0;
    flps_err rc = FLPS_OK;

    if (got == NULL)
        return FLPS_ENOMEM;
    for (uint32_t w = 0; w < s->n && rc == FLPS_OK; w++) {
        if (w == s->rank || !s->alive[w])
            continue;
        rc = peer_net_take(s->net, PEER_MODEL, round, 0, w, deadline, &got[w]);
        if (rc == FLPS_ETIMEDOUT || (rc == FLPS_OK && got[w]->n != s->params)) {
            log_warn("saps: worker %u's model did not come for the "
                     "consensus: it is averaged without it",
                     w);
            peer_msg_free(got[w]);
            got[w] = NULL;
            rc = FLPS_OK;
        }
    }
    for (uint32_t w = 0; w < s->n && rc == FLPS_OK; w++) {
        size_t at = 0;

        if (w != s->rank && got[w] == NULL)
            continue;
        info->averaged++;
        for (uint32_t t = 0; t < s->ntensors; t++) {
            const float *x = w == s->rank ? s->data[t] : got[w]->val + at;

            for (size_t j = 0; j < s->numel[t]; j++)
                avg[at + j] += x[j];
            at += s->numel[t];
        }
    }
    for (size_t j = 0; rc == FLPS_OK && j < s->params; j++)
        avg[j] /= info->averaged;
    for (uint32_t w = 0; w < s->n && rc == FLPS_OK; w++) {
        double sq = 0;
        size_t at = 0;

        if (w != s->rank && got[w] == NULL)
            continue;
        for (uint32_t t = 0; t < s->ntensors; t++) {
            const float *x = w == s->rank ? s->data[t] : got[w]->val + at;

            for (size_t j = 0; j < s->numel[t]; j++)
                sq += (x[j] - avg[at + j]) * (x[j] - avg[at + j]);
            at += s->numel[t];
        }
        dist += sqrt(sq);
    }
    if (rc == FLPS_OK)
        info->distance = dist / info->averaged;
    for (uint32_t w = 0; w < s->n; w++)
        peer_msg_free(got[w]);
    flps_free(got);
    return rc;
}

/* A worker's side: its whole model to the coordinator c. */
static flps_err saps_send_model(flps_saps *s, uint64_t round, uint32_t c)
{
    float *all = flps_malloc(s->params * sizeof(float));
    size_t at = 0;
    flps_err rc;

    if (all == NULL)
        return FLPS_ENOMEM;
    for (uint32_t t = 0; t < s->ntensors; t++) {
        memcpy(all + at, s->data[t], s->numel[t] * sizeof(float));
        at += s->numel[t];
    }
    rc = peer_net_send(s->net, c, PEER_MODEL, round, 0, all, s->params);
    flps_free(all);
    return rc;
}

flps_err flps_saps_consensus(flps_saps *s, uint64_t round,
                             float *const *average,
                             flps_saps_consensus_info *out)
{
    flps_saps_consensus_info info;
    double *avg = NULL;
    flps_err rc;

    if (s == NULL || round < s->next_round)
        return FLPS_EINVAL;
    if (s->err != FLPS_OK)
        return s->err;
    memset(&info, 0, sizeof(info));
    rc = saps_agree(s, round, 0);
    if (rc != FLPS_OK)
        return rc;
    while (info.coordinator < s->n && !s->alive[info.coordinator])
        info.coordinator++;
    if (info.coordinator != s->rank) {
        rc = saps_send_model(s, round, info.coordinator);
        if (rc != FLPS_OK)
            return saps_fail(s, rc, "cannot send the model to worker %u",
                             info.coordinator);
        if (out != NULL)
            *out = info;
        return FLPS_OK;
    }
    avg = flps_calloc(s->params, sizeof(*avg));
    if (avg == NULL)
        return saps_fail(s, FLPS_ENOMEM, "out of memory");
    rc = saps_collect(s, round, avg, &info);
    if (rc != FLPS_OK) {
        flps_free(avg);
        return saps_fail(s, rc, "the consensus: %s", flps_strerror(rc));
    }
    for (size_t t = 0, at = 0; average != NULL && t < s->ntensors; t++) {
        for (size_t j = 0; j < s->numel[t]; j++)
            average[t][j] = (float)avg[at + j];
        at += s->numel[t];
    }
    flps_free(avg);
    client_metrics_saps_consensus(info.distance);
    log_info("saps: consensus of %u models: mean distance to their average "
             "%.6g",
             info.averaged, info.distance);
    if (out != NULL)
        *out = info;
    return FLPS_OK;
}

/* ---- accessors ---- */

int flps_saps_is_alive(const flps_saps *s, uint32_t w)
{
    return s != NULL && w < s->n && s->alive[w];
}

flps_err flps_saps_bandwidth(const flps_saps *s, double *bw, size_t n,
                             double *threshold)
{
    if (s == NULL || (bw != NULL && n < (size_t)s->n * s->n))
        return FLPS_EINVAL;
    if (bw != NULL)
        memcpy(bw, s->bw, (size_t)s->n * s->n * sizeof(*bw));
    if (threshold != NULL)
        *threshold = s->threshold;
    return FLPS_OK;
}

void flps_saps_get_stats(const flps_saps *s, flps_saps_stats *out)
{
    peer_net_stats ns;

    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (s == NULL)
        return;
    *out = s->st;
    peer_net_get_stats(s->net, &ns);
    out->bytes_sent = ns.bytes_sent;
    out->bytes_received = ns.bytes_received;
}

const char *flps_saps_last_error(const flps_saps *s)
{
    return s != NULL ? s->errmsg : "";
}
