/* Request tracking, the client's bottom layer: the sticky error every layer
 * reports through, the header every message starts with, and the requests
 * to the shards (one outstanding per part, or per shard for registration
 * and checkpoints), each kept with its encoded frames so it can be sent
 * again unchanged after a timeout: a shard that restarts from its
 * checkpoint loses nothing it acknowledged, and the client carries on.
 * Not thread-safe: the caller's thread only (client_internal.h). */
#ifndef FLPS_WORKER_CLIENT_REQ_H
#define FLPS_WORKER_CLIENT_REQ_H

#include "worker/client_internal.h"

/* Make err the client's sticky error with a formatted message, unless it
 * has one already (the first cause is kept). Returns the sticky error. */
flps_err client_set_error(flps_client *c, flps_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fill m with what every message of c carries: op, job, rank, part, iter,
 * the credentials and, for a weighted push, the push weight. */
void client_msg_base(const flps_client *c, proto_msg *m, uint8_t op,
                     uint32_t part, uint64_t iter);

/* Release what r holds and mark it CREQ_NONE. */
void creq_clear(creq *r);

/* Encode msg (whose idx/val point into payload, if any) as request r of
 * kind for shard, replacing what r held. Does not send.
 * Ownership: r takes its own reference to payload (the caller keeps its
 * own). Errors: FLPS_ENOMEM, proto_msg_encode's; r is unchanged then. */
flps_err creq_build(creq *r, creq_kind kind, uint32_t shard,
                    const proto_msg *msg, proto_buf *payload);

/* Send r (again) and stamp its send time. Errors: the transport's, made
 * the sticky error naming the shard. */
flps_err creq_send(flps_client *c, creq *r);

/* Flow control of dense pushes. A shard closes a piece once every worker's
 * copy is in and sends its update then; a worker that queues every piece
 * at once has all its connections send together, and with a shard beside
 * each worker S - 1 connections burst into each host's link at once and
 * overflow its queue (8% of the segments lost at 100 Mbit/s). So at most
 * c->win_limit of a shard's largest pieces are in flight (sent, their
 * update not here yet) and the others are built and held until an update
 * frees room. Under the even map (dense in the clear) the window counts
 * values (always one push, however large): a run's small pieces (a bias,
 * the tail of a run) go beside each other instead of each taking a round
 * trip of its own; under the map of parts placed largest first it counts
 * pushes.
 *
 * Held pushes wait in push order: every worker pushes in the same order,
 * so the first piece a shard misses is in flight from every worker and
 * closes, and the window never waits on itself. Once the caller waits
 * layer by layer (its first flps_client_wait_layer: flworker's overlap,
 * flps.torch's overlap=True) they wait in priority order instead: the
 * earlier iteration first, then the lower part, which is an earlier layer
 * of the model (ByteScheduler's order). Backprop pushes the last layers
 * first, so in push order the first layers' small pieces, pushed at the
 * end of backward, would queue behind a large layer's and the next
 * forward pass could not start on them while the large layer's updates
 * still flow down. A held push that goes before every push of its shard
 * in flight is then sent at once, room or not. That keeps the window from
 * waiting on itself although workers may now send in different orders
 * (one sent a piece before a lower one was pushed, another held both and
 * sends the lower first): the lowest piece a shard still misses is, at
 * every worker that has not sent it, the first held and below everything
 * in flight there that is not already answered, so it goes. The extra
 * pushes this lets past the window are bounded by the layers pushed in
 * descending order (a layer's own pieces go up). Should a window stall
 * anyway (a caller pushing one part for two iterations at once), when it
 * has not moved for CREQ_WINDOW_STALL_S while pushes are held one more is
 * sent (creq_sweep): at worst as if there were no window. */
#define CREQ_WINDOW_STALL_S 0.25

/* Allocate the windows of c's shards, each empty, with limit pushes in
 * flight per shard (0: no bound, every push sent at once).
 * Errors: FLPS_ENOMEM. */
flps_err creq_window_init(flps_client *c, uint32_t limit);

/* Send part pi's dense PUSH (built by creq_build) now when its shard's
 * window has room and nothing of the shard is held, else hold it. Errors:
 * creq_send's. */
flps_err creq_send_windowed(flps_client *c, uint32_t pi);

/* One of shard's windowed pushes, of numel values, was answered (its
 * request cleared or turned into a pull): its room goes to the held
 * pushes, sent in order. Errors: creq_send's. */
flps_err creq_window_answered(flps_client *c, uint32_t shard, uint32_t numel);

/* Resend every request that waited retry_s without an answer; fail (sticky
 * FLPS_ETIMEDOUT naming the shard) when one waited deadline_s; send one
 * held push of a window that has not moved for CREQ_WINDOW_STALL_S. now
 * is flps_mono_s(). */
flps_err creq_sweep(flps_client *c, double now);

/* Whether any request of c waits for an answer. */
int creq_any_pending(const flps_client *c);

/* Whether a part of [first, last) waits for an answer. */
int creq_parts_pending(const flps_client *c, uint32_t first, uint32_t last);

/* A tensor is pushed again only once the update of its previous push
 * arrived: sticky FLPS_ESTATE otherwise. */
flps_err creq_check_tensor_idle(flps_client *c, uint32_t tensor);

#endif
