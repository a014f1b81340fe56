/* The client library's internals: the one entry point flworker and the tests
 * may call beyond include/flps.h, and the state every layer of the client
 * shares. Nothing here is exported from libflps.so (no FLPS_API): a training
 * job sees only the public header.
 *
 * The layers, bottom first; each file includes only the headers of layers
 * below it (and this one), so the include graph has no circle. push, wait
 * and setup are one layer: none of them includes another. The layering
 * test (tests/layering/check_includes.py, CLIENT_LAYERS) checks both and
 * this list's order:
 *
 *   client_req.c    request tracking: the sticky error, the header every
 *                   message starts with, one request per part or shard kept
 *                   with its frames for a resend, retries and deadlines,
 *                   and the window of dense pushes in flight per shard
 *   client_metrics.c the flworker_* metric families the process serves when
 *                   asked (flps_metrics_serve, $FLPS_METRICS), fed by the
 *                   pairs, push, wait and lifecycle calls; beside request
 *                   tracking, it includes no other layer
 *   client_send.c   a push onto the wire: a layer's selection split by part,
 *                   parts of one shard joined in one message, payload reuse
 *                   and the byte accounting of pushes
 *   client_energy.c the process's energy metered at iteration boundaries
 *                   and the job's GPU clock (gpu_clock: auto measured
 *                   there); it adds to the metrics' energy series
 *   client_pairs.c  pairs the caller selected (flps_client_push_pairs): kept
 *                   sorted with the mask of what the shards took
 *   client_recv.c   receiving: every reply matched to its request, updates
 *                   added into the replica, what gtopk refused given back
 *   client_push.c   flps_client_push: momentum, error feedback, the codec of
 *                   each layer (with the density warm-up) and the dense path
 *   client_wait.c   the calls that block on the shards: init, pull, wait
 *                   (whole model or layer by layer), bounded staleness,
 *                   checkpoint, the network measurement
 *   client_setup.c  from a configuration to a registered client: checks,
 *                   the codecs and the part map, credentials, registration
 *   client.c        lifecycle: the configuration's init, the constructors,
 *                   destroy, the settings and accessors
 *
 * Threading: there is no lock. A client is used by one thread at a time
 * (include/flps.h), so every field below is read and written only by the
 * caller's thread. The transport's I/O thread sees only the buffers of the
 * frames it was given; they are shared through proto_buf references, and
 * the client writes a payload again only once it holds the only reference
 * (proto_buf_is_unique). The transport's stats are its own (read as
 * snapshots for flps_client_get_stats). */
#ifndef FLPS_WORKER_CLIENT_INTERNAL_H
#define FLPS_WORKER_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "compress/ef.h"
#include "flps.h"
#include "proto/buf.h"
#include "proto/msg.h"
#include "proto/partmap.h"
#include "proto/transport.h"

/* flps_client_create_config over a transport the caller made (a fake one in
 * the unit tests): connects t to cfg->servers in order, so shard i is peer
 * i, then registers as flps_client_create_config does and blocks the same
 * way. cfg->transport is not read. cfg is read as flps_client_create_config
 * reads it, so it is made by flps_client_config_init first.
 * Errors: those of flps_client_create_config.
 * Ownership: takes ownership of t on FLPS_OK (flps_client_destroy destroys
 * it); on error the caller still owns t and destroys it. Caller owns *out
 * on FLPS_OK. */
flps_err flps_client_create_on(const flps_client_config *cfg, transport *t,
                               flps_client **out);

/* ---- the state the layers share ---- */

typedef enum {
    CREQ_NONE = 0,
    CREQ_REGISTER,
    CREQ_INIT,
    CREQ_PULL,
    CREQ_PUSH,
    CREQ_CHECKPOINT,
} creq_kind;

/* One outstanding request and what is needed to send it again. Owned by
 * client_req.c (creq_build, creq_send, creq_clear); client_recv.c clears
 * it when answered, client_send.c fills the members of a joined push. */
typedef struct creq {
    creq_kind kind;
    uint32_t shard;
    uint64_t iter;
    proto_buf *hdr;
    proto_buf *payload; /* PUSH: idx (part-relative) then values; INIT */
    transport_frame frames[PROTO_MAX_FRAMES];
    size_t nframes;
    uint32_t n; /* PUSH: pairs (sparse) or values (dense) */
    /* A sparse PUSH: this part's pairs as sent (into payload), for gtopk's
     * rejected values. */
    const uint32_t *sent_idx;
    const float *sent_val;
    /* A PUSH of several parts: every member's request shares hdr, payload
     * and frames, and is answered on its own; a resend sends the whole
     * message once. */
    int joined;
    /* A dense PUSH under the window (client_req.c): windowed, it counts
     * in its shard's window once sent; held, it is built but waits for
     * room in the window (not sent yet, so no retry or deadline runs). */
    int windowed;
    int held;
    double sent_at; /* seconds, monotonic */
    double first_sent;
} creq;

/* One part of a tensor, on one shard. tensor, offset, numel and shard are
 * set at create (client_setup.c) and never change. */
typedef struct cpart {
    uint32_t tensor;
    uint64_t offset;
    uint32_t numel;
    uint32_t shard;
    creq req; /* client_req.c */
    /* Dense-valued codecs (fp16, qsgd, sign) encode part by part
     * (made by client_setup.c, used by client_push.c). */
    codec *cd;
    ef *ef;
    /* The dense codec needs neither: each push writes its payload straight
     * from the gradient. With momentum the last payload is the velocity
     * (it holds m * v + g as sent), so vel keeps a reference to it and the
     * next push updates it in place (client_push.c). */
    proto_buf *vel;
    /* The last payload (without momentum, or of a sparse push), kept to be
     * written again once nobody else holds it (the transport sent it and
     * its request was answered): no fresh buffer, and so no page faults,
     * per push (client_push.c, client_send.c). */
    proto_buf *spare;
    /* Sync: the iteration open when the replica's values of this part were
     * last pulled or updated. An update of an earlier iteration (a shard
     * one ahead answering the push of a worker restarted at the job's
     * lowest open iteration) is in the pulled values already: it is not
     * added again (client_recv.c). */
    uint64_t have_iter;
    /* Async: the slowest rank's next iteration on this part, from its last
     * pull reply (bounded staleness; client_recv.c writes it,
     * client_wait.c reads it). */
    uint64_t slowest;
    /* Async: the part's version the replica holds (0: not known), named
     * in the pulls of flps_client_wait so the shard answers with only
     * what changed since (client_recv.c). */
    uint64_t held_version;
    /* The next held push of the same shard, in push order or, once the
     * caller waits per layer, layer order (UINT32_MAX: none);
     * client_req.c. */
    uint32_t held_next;
} cpart;

/* The window of one shard (client_req.c): dense pushes sent and not yet
 * answered, the held ones waiting (in push order, or in layer order
 * once the caller waits per layer: client_req.h), and when the window
 * last moved (a push sent or answered). */
typedef struct cwindow {
    uint32_t inflight;
    uint64_t values; /* the values of the pushes in flight */
    uint32_t head;   /* the first held part; UINT32_MAX: none */
    double moved;    /* seconds, monotonic */
} cwindow;

/* The caller's pairs of a tensor's last flps_client_push_pairs; opaque
 * outside client_pairs.c. */
typedef struct cpairs cpairs;

/* One tensor of the model. name, numel and data are set at create and
 * never change; data's contents are the replica, written by client_recv.c
 * (updates, pulls) and read by client_wait.c (init). */
typedef struct ctensor {
    char name[PROTO_NAME_MAX + 1];
    size_t numel;
    float *data;
    /* Sparse codecs (topk, gtopk, randk, dgc) select over the whole layer
     * (made by client_setup.c; swapped by flps_client_set_layer_codec and
     * set to the warm-up's density by client_push.c). */
    codec *cd;
    /* The density cd selects at after the warm-up (topk, gtopk, dgc, an
     * auto layer's topk:D); 0 for a layer without one. */
    double target;
    ef *ef;          /* error feedback + momentum correction (client_push.c;
                        client_recv.c adds gtopk's rejected values back) */
    float *velocity; /* plain momentum, for codecs without error feedback */
    double vel_max;  /* dense codec: max |velocity| after the last push */
    cpairs *pairs;   /* client_pairs.c: the last push of pairs */
} ctensor;

/* What a client has added to its process's metrics (client_metrics.c):
 * where it is in the iterations and its time since the last one finished,
 * and the counters already added. Written by the client's calls on the
 * caller's thread only. */
typedef struct cmetrics {
    int started;           /* a push or wait was counted */
    uint64_t next_iter;    /* iterations finished: the next one to run */
    double mark;           /* when the last one finished (or it started) */
    double push_s, wait_s; /* in pushes and waits since mark */
    flps_client_stats added;
    uint64_t msgs_out, msgs_in;
    double residual_at; /* when the residual norms were last read */
} cmetrics;

/* What a client meters of its process's energy (client_energy.c). */
typedef struct cenergy cenergy;

/* The client. Everything down to endpoints is set at create
 * (client.c, client_setup.c) and read-only afterwards, except staleness
 * and push_weight, which the settings calls change between calls. */
struct flps_client {
    char job[PROTO_JOB_MAX + 1];
    /* The job's secret from its credentials file ("" without one) and
     * this client's random instance id, sent in every request: a shard
     * with credentials serves only its members and binds our rank to
     * cid. */
    char auth[PROTO_AUTH_MAX + 1];
    uint64_t cid;
    uint32_t rank, workers, nshards, ntensors;
    int async;
    proto_agg agg;
    codec_spec spec;
    char spec_text[PROTO_SPEC_MAX + 1];
    int sparse;  /* the codec selects (per layer) rather than encodes all */
    int is_auto; /* "auto": a codec per layer (dense or topk:D), every push
                    sparse */
    int use_ef;  /* the codec is biased: keep an error-feedback residual
                    (never for the lossless dense codec) */
    double density, lr, momentum;
    /* Density warm-up (flps_client_config.density_warmup): the iterations
     * and the start density; 0 iterations = none. */
    uint64_t density_warmup;
    double density_start;
    /* The shards' server optimizer (flps_client_config.server_optimizer):
     * a proto_server_opt and momentum's beta. */
    uint8_t server_opt;
    double server_beta;
    int lr_cosine;
    uint64_t iterations;
    double retry_s, deadline_s;
    /* Async: the most iterations this worker may be ahead of the slowest
     * (flps_client_set_staleness); UINT32_MAX: no bound. */
    uint32_t staleness;
    double stale_wait_s; /* time spent waiting for the slowest
                            (client_wait.c) */
    /* FLPS_MODE_WEIGHTED: every push carries push_weight
     * (flps_client_set_push_weight). */
    int weighted;
    double push_weight;
    uint32_t part_size;
    uint32_t piece; /* the even map's piece (REGISTER's), 0 for the map of
                       parts placed largest first */
    int curve;      /* the data plane is encrypted (CURVE) */
    transport *t;
    char **endpoints;
    ctensor *tensors;
    partmap pm;
    cpart *parts;
    /* A push's selection per part: pairs [sel_lo, sel_hi) of the layer's
     * list (written by client_push.c and client_pairs.c just before they
     * hand the layer to client_send.c); sel_pis the parts of one message
     * being built (client_send.c). */
    uint32_t *sel_lo, *sel_hi, *sel_pis;
    size_t push_hdr_bytes; /* a one-part push's header, for dense_bytes */
    creq *shard_req;       /* per shard: REGISTER / CHECKPOINT
                              (client_req.c) */
    /* Flow control of dense pushes (client_req.c): at most win_limit of
     * a shard's pieces in flight (0: no bound), the rest held until an
     * update frees room; win per shard; held_wire what the held pushes
     * will take on the wire (counted in bytes_sent from the push on, so
     * a push's bytes are its own whenever they go). */
    uint32_t win_limit;
    uint32_t win_piece; /* the largest piece: the window holds win_limit
                           of it in values, so small pieces (biases) ride
                           beside large ones */
    int win_auto;       /* FLPS_PUSH_WINDOW_AUTO: flps_client_init sizes
                           win_limit to the link (client_wait.c) */
    cwindow *win;
    uint64_t held_wire;
    /* Set by the first flps_client_wait_layer: the caller waits layer by
     * layer, so held pushes go in layer order (client_req.h); otherwise
     * in push order. */
    int layer_order;
    /* client_recv.c, from the REGISTER_OK replies. */
    uint64_t resume_iter;
    int resume_known; /* a REGISTER_OK set resume_iter */
    /* pushes, elements_sent: client_send.c; resends: client_req.c; the
     * byte counts are the transport's, read by flps_client_get_stats. */
    flps_client_stats stats;
    uint64_t push_wire_bytes;  /* what pushes took on the wire (first sends;
                                  client_send.c) */
    uint64_t dense_wire_bytes; /* what they would have taken dense */
    flps_err err;              /* sticky (client_set_error) */
    char errmsg[512];
    cmetrics metrics; /* client_metrics.c */
    cenergy *energy;  /* client_energy.c; NULL until registered */
};

/* The parts of tensor: [c->pm.first_part[tensor], this). */
static inline uint32_t client_tensor_end_part(const flps_client *c,
                                              uint32_t tensor)
{
    return tensor + 1 < c->ntensors ? c->pm.first_part[tensor + 1]
                                    : c->pm.nparts;
}

/* The seed of layer tensor's codec: seeds differ by rank and layer so
 * random codecs do not pick the same indices on every worker. */
static inline uint64_t client_layer_seed(const flps_client *c, uint32_t tensor)
{
    return ((uint64_t)c->rank << 32) ^ ((uint64_t)tensor << 8);
}

#endif
