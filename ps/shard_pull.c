/* A shard's INIT and PULL: rank 0's initial values of a part, pulls that
 * wait for them, and pull replies, whole or (async parts) only what
 * changed since the version the puller holds. */
#include "ps/shard_impl.h"

#include <string.h>

#include "common/alloc.h"
#include "common/log.h"

/* The elements of p that changed after version since, when a pull naming
 * since can be answered with them in fewer bytes than the whole part
 * (8 bytes a pair against 4 an element); -1 when it cannot (no tracking,
 * since 0 or from the future, or too many changed). */
static int64_t changed_since(const ps_part *p, uint64_t since)
{
    uint64_t n = 0;
    const uint64_t most = p->numel / 2;

    if (p->touched == NULL || since == 0 || since > p->version)
        return -1;
    for (uint32_t i = 0; i < p->numel; i++) {
        n += p->touched[i] > since;
        if (n > most)
            return -1;
    }
    return (int64_t)n;
}

/* Answer a PULL of p with the current values of the elements changed
 * after version since. */
static flps_err reply_changed(ps_shard *s, uint32_t peer, uint32_t rank,
                              ps_part *p, uint64_t since, uint32_t n)
{
    ps_reply r;
    proto_buf *b = ps_shard_reply_buf(p, (size_t)n * 8 + 4, 0);
    uint32_t *idx;
    float *val;
    uint32_t k = 0;

    if (b == NULL)
        return FLPS_ENOMEM;
    idx = proto_buf_data(b);
    val = (float *)(idx + n);
    for (uint32_t i = 0; i < p->numel && k < n; i++) {
        if (p->touched[i] > since) {
            idx[k] = i;
            val[k] = p->w[i];
            k++;
        }
    }
    p->out[p->nout].peer = peer;
    p->out[p->nout].buf = proto_buf_hold(b);
    p->nout++;
    /* iter names the version the changes are counted from (an async part
     * has no open iteration): the worker applies them only onto that
     * version or a later one. */
    ps_shard_reply_init(s, &r, PROTO_OP_PULL_REPLY, rank, p->id, since,
                        p->version);
    r.msg.codec = PROTO_CODEC_SPARSE;
    r.msg.n = n;
    r.msg.idx = idx;
    r.msg.val = val;
    r.msg.slowest = ps_part_slowest(s, p);
    r.payload = b;
    s->stats.pulls++;
    s->cfg.send(s->cfg.send_arg, peer, &r);
    return FLPS_OK;
}

static flps_err reply_values(ps_shard *s, uint32_t peer, uint32_t rank,
                             ps_part *p, uint64_t since)
{
    ps_reply r;
    proto_buf *b;
    int64_t changed;

    (void)ps_part_pull_in_flight(p, peer); /* done buffers back to the pool */
    if (p->nout == p->out_cap) {
        uint32_t cap = p->out_cap ? 2 * p->out_cap : 4;
        ps_pull_out *o = flps_realloc(p->out, cap * sizeof(*o));
        if (o == NULL)
            return FLPS_ENOMEM;
        p->out = o;
        p->out_cap = cap;
    }
    changed = changed_since(p, since);
    if (changed >= 0)
        return reply_changed(s, peer, rank, p, since, (uint32_t)changed);
    b = ps_shard_reply_buf(p, (size_t)p->numel * sizeof(float), 0);
    if (b == NULL)
        return FLPS_ENOMEM;
    p->out[p->nout].peer = peer;
    p->out[p->nout].buf = proto_buf_hold(b);
    p->nout++;
    /* A copy: the part keeps changing while the transport sends. It comes
     * from the part's pool, which keeps its reference. */
    memcpy(proto_buf_data(b), p->w, (size_t)p->numel * sizeof(float));
    ps_shard_reply_init(s, &r, PROTO_OP_PULL_REPLY, rank, p->id, p->iter,
                        p->version);
    r.msg.codec = PROTO_CODEC_DENSE;
    r.msg.n = p->numel;
    r.msg.val = proto_buf_data(b);
    r.msg.slowest = ps_part_slowest(s, p);
    r.payload = b;
    s->stats.pulls++;
    s->cfg.send(s->cfg.send_arg, peer, &r);
    return FLPS_OK;
}

flps_err ps_shard_on_init(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    flps_err rc;
    ps_part *p = ps_shard_request_part(s, peer, m, 0, &rc);
    wal_record wr;

    if (p == NULL)
        return rc;
    if (m->codec != PROTO_CODEC_DENSE || m->n != p->numel) {
        ps_shard_reply_error(s, peer, m, FLPS_EPROTO,
                             "initial values of part %u must be dense with %u "
                             "elements, got %u",
                             p->id, p->numel, m->n);
        return FLPS_EPROTO;
    }
    if (p->initialized) {
        /* Restored from a checkpoint, or another worker was first. */
        ps_shard_reply_ack(s, peer, m, 1,
                           "already initialised; pull the values", p->version);
        return FLPS_OK;
    }
    memset(&wr, 0, sizeof(wr));
    wr.kind = WAL_SET;
    wr.part = p->id;
    wr.iter = p->iter;
    wr.version = p->version + 1;
    wr.n = m->n;
    wr.val = m->val;
    rc = ps_shard_wal(s, &wr);
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, peer, m, rc, "cannot log the initial values");
        return rc;
    }
    memcpy(p->w, m->val, (size_t)p->numel * sizeof(float));
    p->version++;
    p->initialized = 1;
    ps_shard_reply_ack(s, peer, m, 0, "initialised", p->version);
    while (p->pulls != NULL) {
        ps_pull_wait *w = p->pulls;
        p->pulls = w->next;
        reply_values(s, w->peer, w->rank, p, 0);
        flps_free(w);
    }
    return FLPS_OK;
}

flps_err ps_shard_on_pull(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    flps_err rc;
    ps_part *p = ps_shard_request_part(s, peer, m, 0, &rc);

    if (p == NULL)
        return rc;
    if (!p->initialized) {
        ps_pull_wait *w;
        /* One waiting pull per rank and part: a rank that pulls again
         * (a resend) moves its wait to the newer peer, so PULLs sent
         * before INIT cannot grow the list without bound. */
        for (w = p->pulls; w != NULL; w = w->next) {
            if (w->rank == m->rank) {
                w->peer = peer;
                return FLPS_OK;
            }
        }
        w = flps_malloc(sizeof(*w));
        if (w == NULL) {
            ps_shard_reply_error(s, peer, m, FLPS_ENOMEM, "out of memory");
            return FLPS_ENOMEM;
        }
        w->peer = peer;
        w->rank = m->rank;
        w->next = p->pulls;
        p->pulls = w;
        return FLPS_OK;
    }
    if (ps_part_pull_in_flight(p, peer)) {
        /* The copy sent for its last PULL of this part is still on its
         * way (a resend, or a peer that does not read): that copy is the
         * answer. No ERROR either: a client would take it as a failure. */
        s->stats.rejected[FLPS_EDUP]++;
        if (ps_shard_refusal_log_ok(s, FLPS_EDUP))
            log_warn("ignored a PULL of part %u from peer %u: the reply to "
                     "its last one is still being sent",
                     p->id, peer);
        return FLPS_EDUP;
    }
    rc = reply_values(s, peer, m->rank, p, m->version);
    if (rc != FLPS_OK)
        ps_shard_reply_error(s, peer, m, rc, "cannot build the reply: %s",
                             flps_strerror(rc));
    return rc;
}
