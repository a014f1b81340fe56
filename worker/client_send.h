/* A push onto the wire: the messages of one layer's push, part by part or
 * the parts of one shard joined in one message, each part's request
 * tracked on its own (client_req.h); payload buffers reused from push to
 * push; the byte accounting of flps_client_stats. Above it sit the two
 * ways of choosing what to push (client_push.c, client_pairs.c).
 * Not thread-safe: the caller's thread only (client_internal.h). */
#ifndef FLPS_WORKER_CLIENT_SEND_H
#define FLPS_WORKER_CLIENT_SEND_H

#include "worker/client_internal.h"

/* Send the push built in m (its frames in payload b) as part pi's request
 * and count it: one push of count elements, its bytes on the wire and the
 * bytes a dense push of the part would have taken.
 * Ownership: takes the caller's reference to b, on error too.
 * Errors (sticky): creq_build's and the transport's. */
flps_err client_send_push(flps_client *c, uint32_t pi, proto_msg *m,
                          proto_buf *b, uint32_t count);

/* Push part pi encoded by fp16, qsgd or sign: the codec wrote its frames
 * cm straight into the payload b (codec_set_output), one after another.
 * Ownership and errors: those of client_send_push. */
flps_err client_send_encoded(flps_client *c, uint32_t pi, uint64_t iter,
                             const codec_msg *cm, proto_buf *b);

/* Split a layer's selection by part: idx[0..n) ascending (tensor
 * coordinates) over parts [first, last), so that part pi's pairs are
 * [c->sel_lo[pi], c->sel_hi[pi]). */
void client_send_split(flps_client *c, uint32_t first, uint32_t last,
                       const uint32_t *idx, size_t n);

/* Push a layer's selection for iteration iter, parts [first, last) with
 * their pairs [sel_lo, sel_hi) of idx/val (tensor coordinates; idx NULL:
 * every element, index j for val[j]): per shard, its parts together in
 * messages of up to PROTO_JOINED_PAIRS pairs (a part alone when it is
 * larger or the shard has no other). idx and val are copied.
 * Errors (sticky): FLPS_ENOMEM, creq_build's, the transport's. */
flps_err client_send_selection(flps_client *c, uint32_t first, uint32_t last,
                               uint64_t iter, const uint32_t *idx,
                               const float *val);

#endif
