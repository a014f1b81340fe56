/* The peer-to-peer transport of decentralized training: a listener, a
 * connector to every other worker, credentials and the inbox
 * (peer_net.h). */
#include "worker/peer_net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/buf.h"
#include "proto/creds.h"
#include "proto/msg.h"
#include "proto/transport.h"
#include "transports/select.h"

/* A refusal is logged at most this often (seconds). */
#define PEER_REFUSAL_LOG_S 60.0
/* Messages the inbox holds at most beyond a few per worker. */
#define PEER_INBOX_SPARE 256

struct peer_net {
    char job[PROTO_JOB_MAX + 1];
    char auth[PROTO_AUTH_MAX + 1]; /* the job's secret; "" without one */
    uint64_t cid;                  /* this worker's random client id */
    int have_secret;
    uint32_t rank, workers;
    transport *listener, *out;
    uint32_t *peer_of; /* rank -> the connector's peer number */
    uint64_t *owner;   /* rank -> the client id that first spoke as it */
    transport_kind chosen;
    /* The inbox: messages in arrival order, with its bounds. */
    peer_msg *head, *tail;
    size_t held_msgs, held_vals, max_msgs, max_vals, max_values;
    uint64_t refused;
    double refusal_logged_at;
};

static flps_err peer_fail(char *errbuf, size_t errlen, flps_err rc,
                          const char *what)
{
    return flps_errbuf_set(errbuf, errlen, rc, "%s", what);
}

/* The job's credentials (none: nothing to do) on both transports. */
static flps_err peer_credentials(peer_net *n, char *errbuf, size_t errlen)
{
    flps_creds cr;
    char why[512];
    int found = 0;
    flps_err rc = creds_load_env(&cr, &found, why, sizeof(why));

    if (rc != FLPS_OK)
        return peer_fail(errbuf, errlen, rc, why);
    if (!found)
        return FLPS_OK;
    rc = creds_instance_id(&n->cid);
    if (rc != FLPS_OK) {
        flps_errbuf_set(errbuf, errlen, rc,
                        "cannot make a client id: no randomness (getrandom)");
        goto out;
    }
    snprintf(n->auth, sizeof(n->auth), "%s", cr.secret);
    n->have_secret = 1;
    /* Every connection authenticated in its handshake, both ways: CURVE
     * with the job's keys, else PLAIN with its secret. */
    rc = transport_set_credentials(n->listener, &cr, 1, why, sizeof(why));
    if (rc == FLPS_OK)
        rc = transport_set_credentials(n->out, &cr, 0, why, sizeof(why));
    if (rc == FLPS_ECONFIG && n->chosen != TRANSPORT_KIND_ZMQ) {
        log_warn("%s", why); /* RDMA: the secret still authenticates */
        rc = FLPS_OK;
    } else if (rc != FLPS_OK) {
        peer_fail(errbuf, errlen, rc, why);
    }
out:
    creds_wipe(&cr);
    return rc;
}

static int peer_cfg_is_valid(const peer_net_cfg *cfg)
{
    if (cfg == NULL || cfg->job == NULL || cfg->job[0] == '\0' ||
        strlen(cfg->job) > PROTO_JOB_MAX || cfg->workers < 2 ||
        cfg->rank >= cfg->workers || cfg->endpoints == NULL ||
        cfg->max_values > UINT32_MAX)
        return 0;
    for (uint32_t i = 0; i < cfg->workers; i++)
        if (cfg->endpoints[i] == NULL || cfg->endpoints[i][0] == '\0')
            return 0;
    return 1;
}

/* The two transports of kind cfg->kind, the listener bound. */
static flps_err peer_transports(peer_net *n, const peer_net_cfg *cfg,
                                char *errbuf, size_t errlen)
{
    transport_select sel = {.kind = cfg->kind};
    char why[1024], bound[256];
    flps_err rc;

    /* A header, and the values with room for the frames' alignment. */
    sel.max_message_bytes = 4096 + 4 * (cfg->max_values + 16);
    sel.listener = 1;
    rc = transport_create_for(&sel, &n->listener, &n->chosen, why, sizeof(why));
    if (rc != FLPS_OK)
        return peer_fail(errbuf, errlen, rc, why);
    if (why[0] != '\0')
        log_info("peers: %s", why);
    sel.kind = n->chosen; /* auto decided once, for both */
    sel.listener = 0;
    rc = transport_create_for(&sel, &n->out, NULL, why, sizeof(why));
    if (rc != FLPS_OK)
        return peer_fail(errbuf, errlen, rc, why);
    rc = peer_credentials(n, errbuf, errlen);
    if (rc != FLPS_OK)
        return rc;
    rc = transport_listen(n->listener, cfg->endpoints[cfg->rank], bound,
                          sizeof(bound));
    if (rc != FLPS_OK)
        return flps_errbuf_set(errbuf, errlen, rc,
                               "cannot listen for the other workers on %s: %s",
                               cfg->endpoints[cfg->rank], n->listener->errmsg);
    for (uint32_t i = 0; i < cfg->workers; i++) {
        if (i == cfg->rank)
            continue;
        rc = transport_connect(n->out, cfg->endpoints[i], &n->peer_of[i]);
        if (rc != FLPS_OK)
            return flps_errbuf_set(errbuf, errlen, rc,
                                   "cannot connect to worker %u at %s: %s", i,
                                   cfg->endpoints[i], n->out->errmsg);
    }
    return FLPS_OK;
}

flps_err peer_net_create(const peer_net_cfg *cfg, peer_net **out, char *errbuf,
                         size_t errlen)
{
    peer_net *n;
    flps_err rc;

    if (out == NULL || !peer_cfg_is_valid(cfg))
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "peers: a job id, 2 or more workers, a rank "
                               "below them and an endpoint for each");
    n = flps_calloc(1, sizeof(*n));
    if (n == NULL)
        return FLPS_ENOMEM;
    snprintf(n->job, sizeof(n->job), "%s", cfg->job);
    n->rank = cfg->rank;
    n->workers = cfg->workers;
    n->max_values = cfg->max_values;
    n->max_msgs = 8 * (size_t)cfg->workers + PEER_INBOX_SPARE;
    n->max_vals = ((size_t)cfg->workers + 8) * (cfg->max_values + 64);
    n->peer_of = flps_calloc(cfg->workers, sizeof(*n->peer_of));
    n->owner = flps_calloc(cfg->workers, sizeof(*n->owner));
    if (n->peer_of == NULL || n->owner == NULL) {
        rc = FLPS_ENOMEM;
        goto fail;
    }
    rc = peer_transports(n, cfg, errbuf, errlen);
    if (rc != FLPS_OK)
        goto fail;
    *out = n;
    return FLPS_OK;
fail:
    peer_net_destroy(n);
    return rc;
}

void peer_msg_free(peer_msg *m)
{
    if (m == NULL)
        return;
    flps_free(m->val);
    flps_free(m);
}

void peer_net_destroy(peer_net *n)
{
    if (n == NULL)
        return;
    while (n->head != NULL) {
        peer_msg *m = n->head;
        n->head = m->next;
        peer_msg_free(m);
    }
    transport_destroy(n->out);
    transport_destroy(n->listener);
    flps_free(n->peer_of);
    flps_free(n->owner);
    explicit_bzero(n->auth, sizeof(n->auth));
    flps_free(n);
}

const char *peer_net_transport(const peer_net *n)
{
    return transport_kind_name(n->chosen);
}

flps_err peer_net_send(peer_net *n, uint32_t to, peer_kind kind, uint64_t round,
                       uint64_t step, const float *val, size_t nval)
{
    proto_msg m;
    proto_frame pf[PROTO_MAX_FRAMES];
    transport_frame tf[2];
    proto_buf *hb = NULL, *pb = NULL;
    void *hdr = NULL;
    size_t hlen = 0, nf = 0;
    flps_err rc;

    if (to >= n->workers || to == n->rank || kind >= PEER_KIND_COUNT ||
        nval > UINT32_MAX || (val == NULL && nval > 0))
        return FLPS_EINVAL;
    pb = proto_buf_create(nval > 0 ? nval * sizeof(float) : 4);
    if (pb == NULL)
        return FLPS_ENOMEM;
    if (nval > 0)
        memcpy(proto_buf_data(pb), val, nval * sizeof(float));
    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_PEER;
    snprintf(m.job, sizeof(m.job), "%s", n->job);
    m.rank = n->rank;
    m.part = (uint32_t)kind;
    m.iter = round;
    m.version = step;
    m.codec = PROTO_CODEC_DENSE;
    m.n = (uint32_t)nval;
    m.val = proto_buf_data(pb);
    memcpy(m.auth, n->auth, sizeof(m.auth));
    m.cid = n->cid;
    rc = proto_msg_encode(&m, &hdr, &hlen, pf, &nf);
    explicit_bzero(m.auth, sizeof(m.auth));
    if (rc != FLPS_OK)
        goto out;
    hb = proto_buf_wrap(hdr, hlen);
    if (hb == NULL) {
        free(hdr);
        rc = FLPS_ENOMEM;
        goto out;
    }
    tf[0] = (transport_frame){hb, 0, hlen};
    tf[1] = (transport_frame){pb, 0, nval * sizeof(float)};
    rc = transport_send(n->out, n->peer_of[to], tf, 2);
    if (rc != FLPS_OK)
        log_warn("peers: cannot send to worker %u: %s", to, n->out->errmsg);
out:
    proto_buf_release(hb);
    proto_buf_release(pb);
    return rc;
}

/* One refusal: counted, and logged unless one was logged lately. */
static void peer_refuse(peer_net *n, const char *why)
{
    double now = flps_mono_s();

    n->refused++;
    if (n->refusal_logged_at == 0 ||
        now - n->refusal_logged_at >= PEER_REFUSAL_LOG_S) {
        log_warn("peers: refused a message (%llu so far): %s",
                 (unsigned long long)n->refused, why);
        n->refusal_logged_at = now;
    }
}

/* Whether m comes from a member of the job speaking as its own rank (the
 * first client id that speaks as a rank holds it). */
static int peer_is_member(peer_net *n, const proto_msg *m)
{
    char why[160];

    if (m->op != PROTO_OP_PEER || m->codec != PROTO_CODEC_DENSE ||
        m->part >= PEER_KIND_COUNT || m->rank >= n->workers ||
        m->rank == n->rank || strcmp(m->job, n->job) != 0) {
        snprintf(why, sizeof(why),
                 "%s from rank %u: not a peer message of job '%s'",
                 proto_op_name(m->op), m->rank, n->job);
        peer_refuse(n, why);
        return 0;
    }
    if (n->have_secret && !creds_secret_equal(n->auth, m->auth)) {
        peer_refuse(n, "wrong credentials: not a member of the job");
        return 0;
    }
    if (n->have_secret && m->cid == 0) {
        peer_refuse(n, "a message without a client id");
        return 0;
    }
    if (n->owner[m->rank] == 0) {
        n->owner[m->rank] = m->cid;
    } else if (n->owner[m->rank] != m->cid) {
        snprintf(why, sizeof(why),
                 "rank %u is bound to another client: a worker speaks only "
                 "as its own rank",
                 m->rank);
        peer_refuse(n, why);
        return 0;
    }
    return 1;
}

/* Put m's values into the inbox as a new entry, within its bounds. */
static flps_err peer_keep(peer_net *n, const proto_msg *m)
{
    peer_msg *e;

    if (n->held_msgs >= n->max_msgs || m->n > n->max_values ||
        n->held_vals + m->n > n->max_vals) {
        peer_refuse(n, "the inbox is full (a worker far ahead, or too much "
                       "sent)");
        return FLPS_OK;
    }
    e = flps_calloc(1, sizeof(*e));
    if (e == NULL)
        return FLPS_ENOMEM;
    e->val = flps_malloc(m->n > 0 ? (size_t)m->n * sizeof(float) : 1);
    if (e->val == NULL) {
        flps_free(e);
        return FLPS_ENOMEM;
    }
    if (m->n > 0)
        memcpy(e->val, m->val, (size_t)m->n * sizeof(float));
    e->from = m->rank;
    e->kind = (peer_kind)m->part;
    e->round = m->iter;
    e->step = m->version;
    e->n = m->n;
    if (n->tail != NULL)
        n->tail->next = e;
    else
        n->head = e;
    n->tail = e;
    n->held_msgs++;
    n->held_vals += e->n;
    return FLPS_OK;
}

/* Receive one message within timeout_ms into the inbox. FLPS_ETIMEDOUT
 * when none came; a refused one counts as received. */
static flps_err peer_recv_one(peer_net *n, int timeout_ms)
{
    transport_rx *rx = NULL;
    proto_msg m;
    char why[256];
    flps_err rc = transport_recv(n->listener, timeout_ms, &rx);

    if (rc == FLPS_EPROTO) {
        peer_refuse(n, n->listener->errmsg);
        return FLPS_OK;
    }
    if (rc != FLPS_OK)
        return rc;
    rc = proto_msg_decode(rx->frames, rx->nframes, &m, why, sizeof(why));
    if (rc != FLPS_OK) {
        peer_refuse(n, why);
        rc = FLPS_OK;
    } else {
        if (peer_is_member(n, &m))
            rc = peer_keep(n, &m);
        proto_msg_fini(&m);
    }
    transport_rx_release(rx);
    return rc;
}

/* Unlink and return the first inbox entry that matches, or NULL. */
static peer_msg *peer_find(peer_net *n, peer_kind kind, uint64_t round,
                           uint64_t step, uint32_t from)
{
    peer_msg *prev = NULL;

    for (peer_msg *e = n->head; e != NULL; prev = e, e = e->next) {
        if (e->kind != kind || e->round != round || e->step != step ||
            (from != PEER_ANY && e->from != from))
            continue;
        if (prev != NULL)
            prev->next = e->next;
        else
            n->head = e->next;
        if (n->tail == e)
            n->tail = prev;
        e->next = NULL;
        n->held_msgs--;
        n->held_vals -= e->n;
        return e;
    }
    return NULL;
}

flps_err peer_net_take(peer_net *n, peer_kind kind, uint64_t round,
                       uint64_t step, uint32_t from, double deadline,
                       peer_msg **out)
{
    for (;;) {
        peer_msg *e = peer_find(n, kind, round, step, from);
        double left;
        flps_err rc;

        if (e != NULL) {
            *out = e;
            return FLPS_OK;
        }
        left = deadline - flps_mono_s();
        /* Past the deadline: only what has already arrived (poll). */
        rc = peer_recv_one(n, left > 0 ? (int)(left * 1000.0) + 1 : 0);
        if (rc == FLPS_ETIMEDOUT && left <= 0)
            return FLPS_ETIMEDOUT;
        if (rc != FLPS_OK && rc != FLPS_ETIMEDOUT)
            return rc;
    }
}

void peer_net_forget(peer_net *n, peer_kind kind, uint64_t round)
{
    peer_msg *prev = NULL, *e = n->head;

    while (e != NULL) {
        peer_msg *next = e->next;

        if (e->kind == kind && e->round < round) {
            if (prev != NULL)
                prev->next = next;
            else
                n->head = next;
            if (n->tail == e)
                n->tail = prev;
            n->held_msgs--;
            n->held_vals -= e->n;
            peer_msg_free(e);
        } else {
            prev = e;
        }
        e = next;
    }
}

void peer_net_get_stats(const peer_net *n, peer_net_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->bytes_sent = n->out->stats.bytes_sent;
    out->msgs_sent = n->out->stats.msgs_sent;
    out->bytes_received = n->listener->stats.bytes_recv;
    out->msgs_received = n->listener->stats.msgs_recv;
    out->refused = n->refused;
    out->auth_refused = n->listener->stats.auth_refused;
}
