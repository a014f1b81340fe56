/* A push onto the wire: one layer's parts as messages to their shards, and
 * what they cost in bytes (client_send.h). */
#include "worker/client_send.h"

#include <stdio.h>

#include "common/alloc.h"
#include "worker/client_req.h"

flps_err client_send_push(flps_client *c, uint32_t pi, proto_msg *m,
                          proto_buf *b, uint32_t count)
{
    cpart *p = &c->parts[pi];
    flps_err rc = creq_build(&p->req, CREQ_PUSH, p->shard, m, b);

    proto_buf_release(b);
    /* Dense pushes go through their shard's window (client_req.h). */
    if (rc == FLPS_OK)
        rc = m->codec == PROTO_CODEC_DENSE ? creq_send_windowed(c, pi)
                                           : creq_send(c, &p->req);
    if (rc != FLPS_OK)
        return client_set_error(c, rc, "cannot push part %u: %s", pi,
                                flps_strerror(rc));
    c->stats.pushes++;
    c->stats.elements_sent += count;
    for (size_t f = 0; f < p->req.nframes; f++)
        c->push_wire_bytes += transport_zmtp_frame_bytes(p->req.frames[f].len);
    /* The same push sent dense: the header (a dense header is the same
     * size or smaller) and one frame of f32 values. */
    c->dense_wire_bytes +=
        transport_zmtp_frame_bytes(proto_buf_len(p->req.hdr)) +
        transport_zmtp_frame_bytes((size_t)p->numel * 4);
    return FLPS_OK;
}

flps_err client_send_encoded(flps_client *c, uint32_t pi, uint64_t iter,
                             const codec_msg *cm, proto_buf *b)
{
    cpart *p = &c->parts[pi];
    proto_msg m;

    client_msg_base(c, &m, PROTO_OP_PUSH, pi, iter);
    m.n = p->numel;
    m.codec = PROTO_CODEC_ENCODED;
    snprintf(m.spec, sizeof(m.spec), "%s", c->spec_text);
    m.nenc = (uint32_t)cm->nframes;
    for (size_t f = 0; f < cm->nframes; f++) {
        m.enc[f].data = cm->frames[f].data;
        m.enc[f].len = cm->frames[f].len;
    }
    return client_send_push(c, pi, &m, b, p->numel);
}

void client_send_split(flps_client *c, uint32_t first, uint32_t last,
                       const uint32_t *idx, size_t n)
{
    size_t j = 0;

    for (uint32_t pi = first; pi < last; pi++) {
        uint64_t end = c->parts[pi].offset + c->parts[pi].numel;
        c->sel_lo[pi] = (uint32_t)j;
        while (j < n && idx[j] < end)
            j++;
        c->sel_hi[pi] = (uint32_t)j;
    }
}

/* A payload of at least need bytes for a sparse push whose request lives
 * in part p. The payload of p's last push comes back once the transport
 * sent it and its update arrived: written again when it fits (and is not
 * far too large), so pushes of a steady size fault in no fresh pages. A
 * new one gets a quarter more room for selections that vary. p keeps a
 * reference for next time; the caller owns the one returned. NULL when
 * out of memory. */
static proto_buf *sparse_payload(cpart *p, size_t need)
{
    proto_buf *b;

    if (p->spare != NULL && proto_buf_is_unique(p->spare) &&
        proto_buf_len(p->spare) >= need &&
        proto_buf_len(p->spare) <= 2 * need + 65536) {
        b = p->spare;
        p->spare = NULL;
    } else {
        b = proto_buf_create(need + need / 4 + 64);
    }
    if (b == NULL)
        return NULL;
    proto_buf_release(p->spare);
    p->spare = proto_buf_hold(b);
    return b;
}

/* Push the pairs [lo, hi) of a layer's selection (tensor coordinates) to
 * the shard of part pi. idx NULL: every element, index j for val[j]. */
static flps_err push_sparse(flps_client *c, uint32_t pi, uint64_t iter,
                            const uint32_t *idx, const float *val, uint32_t lo,
                            uint32_t hi)
{
    cpart *p = &c->parts[pi];
    uint32_t n = hi - lo;
    proto_buf *b = sparse_payload(p, (size_t)n * 8);
    uint32_t *ix;
    float *v;
    proto_msg m;

    if (b == NULL)
        return client_set_error(c, FLPS_ENOMEM, "out of memory");
    ix = proto_buf_data(b);
    v = (float *)(ix + n);
    for (uint32_t j = 0; j < n; j++) {
        ix[j] = (uint32_t)((idx ? idx[lo + j] : lo + j) - p->offset);
        v[j] = val[lo + j];
    }
    client_msg_base(c, &m, PROTO_OP_PUSH, pi, iter);
    m.codec = PROTO_CODEC_SPARSE;
    m.n = n;
    m.idx = ix;
    m.val = v;
    return client_send_push(c, pi, &m, b, n);
}

/* The other members of a joined push: each part of pis[1..cnt) gets a
 * request sharing r0's message, its own count and its own slice of the
 * pairs sent (which start after r0's at ix/v). */
static void join_members(flps_client *c, const creq *r0, const uint32_t *pis,
                         uint32_t cnt, const uint32_t *ix, const float *v)
{
    size_t at = r0->n;

    for (uint32_t k = 1; k < cnt; k++) {
        creq *r = &c->parts[pis[k]].req;
        creq_clear(r);
        *r = *r0;
        r->hdr = proto_buf_hold(r0->hdr);
        r->payload = proto_buf_hold(r0->payload);
        r->n = c->sel_hi[pis[k]] - c->sel_lo[pis[k]];
        r->sent_idx = ix + at;
        r->sent_val = v + at;
        at += r->n;
    }
}

/* Push parts[pis[0..cnt)] (all of one shard, ascending) as one message
 * of segments: their pairs [sel_lo, sel_hi) of the layer's selection
 * (tensor coordinates; idx NULL: every element) one after another, indices
 * relative to each part. Every part gets its own request sharing the
 * message, answered on its own. */
static flps_err push_joined(flps_client *c, const uint32_t *pis, uint32_t cnt,
                            uint64_t iter, const uint32_t *idx,
                            const float *val)
{
    cpart *p0 = &c->parts[pis[0]];
    size_t total = 0, at = 0;
    proto_seg *segs = flps_malloc((size_t)cnt * sizeof(*segs));
    proto_buf *b = NULL;
    uint32_t *ix;
    float *v;
    proto_msg m;
    creq *r0;
    flps_err rc;

    if (segs == NULL)
        return client_set_error(c, FLPS_ENOMEM, "out of memory");
    for (uint32_t k = 0; k < cnt; k++)
        total += c->sel_hi[pis[k]] - c->sel_lo[pis[k]];
    /* The first member keeps the payload for next time. */
    b = sparse_payload(p0, total * 8);
    if (b == NULL) {
        flps_free(segs);
        return client_set_error(c, FLPS_ENOMEM, "out of memory");
    }
    ix = proto_buf_data(b);
    v = (float *)(ix + total);
    for (uint32_t k = 0; k < cnt; k++) {
        const cpart *p = &c->parts[pis[k]];
        const uint32_t lo = c->sel_lo[pis[k]], hi = c->sel_hi[pis[k]];
        for (uint32_t j = lo; j < hi; j++) {
            ix[at + j - lo] = (uint32_t)((idx ? idx[j] : j) - p->offset);
            v[at + j - lo] = val[j];
        }
        segs[k].part = pis[k];
        segs[k].n = hi - lo;
        segs[k].nrej = 0;
        segs[k].version = 0;
        at += hi - lo;
    }
    client_msg_base(c, &m, PROTO_OP_PUSH, pis[0], iter);
    m.codec = PROTO_CODEC_SPARSE;
    m.n = (uint32_t)total;
    m.idx = ix;
    m.val = v;
    m.nsegs = cnt;
    m.segs = segs;
    r0 = &p0->req;
    rc = creq_build(r0, CREQ_PUSH, p0->shard, &m, b);
    proto_buf_release(b);
    flps_free(segs);
    if (rc != FLPS_OK)
        return client_set_error(c, rc, "cannot push %u parts to shard %u: %s",
                                cnt, p0->shard, flps_strerror(rc));
    r0->joined = 1;
    r0->n = c->sel_hi[pis[0]] - c->sel_lo[pis[0]];
    join_members(c, r0, pis, cnt, ix, v);
    rc = creq_send(c, r0);
    if (rc != FLPS_OK)
        return rc;
    for (uint32_t k = 1; k < cnt; k++) {
        creq *r = &c->parts[pis[k]].req;
        r->sent_at = r0->sent_at;
        r->first_sent = r0->first_sent;
    }
    c->stats.pushes++;
    c->stats.elements_sent += total;
    for (size_t f = 0; f < r0->nframes; f++)
        c->push_wire_bytes += transport_zmtp_frame_bytes(r0->frames[f].len);
    /* The same parts sent dense: one message each, a header like a
     * one-part push's and the part's f32 values. */
    for (uint32_t k = 0; k < cnt; k++)
        c->dense_wire_bytes +=
            transport_zmtp_frame_bytes(c->push_hdr_bytes) +
            transport_zmtp_frame_bytes((size_t)c->parts[pis[k]].numel * 4);
    return FLPS_OK;
}

flps_err client_send_selection(flps_client *c, uint32_t first, uint32_t last,
                               uint64_t iter, const uint32_t *idx,
                               const float *val)
{
    for (uint32_t sh = 0; sh < c->nshards; sh++) {
        uint32_t cnt = 0, pairs = 0;
        flps_err rc = FLPS_OK;
        for (uint32_t pi = first; pi <= last; pi++) {
            uint32_t np = 0;
            if (pi < last) {
                if (c->parts[pi].shard != sh)
                    continue;
                np = c->sel_hi[pi] - c->sel_lo[pi];
            }
            /* Flush the group before a part that would overflow it, and
             * at the end. */
            if (cnt > 0 && (pi == last || pairs + np > PROTO_JOINED_PAIRS)) {
                if (cnt == 1)
                    rc = push_sparse(c, c->sel_pis[0], iter, idx, val,
                                     c->sel_lo[c->sel_pis[0]],
                                     c->sel_hi[c->sel_pis[0]]);
                else
                    rc = push_joined(c, c->sel_pis, cnt, iter, idx, val);
                if (rc != FLPS_OK)
                    return rc;
                cnt = pairs = 0;
            }
            if (pi < last) {
                c->sel_pis[cnt++] = pi;
                pairs += np;
            }
        }
    }
    return FLPS_OK;
}
