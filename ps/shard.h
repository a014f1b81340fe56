/* One parameter-server shard: the parts it owns, synchronous and
 * asynchronous aggregation, init/pull, and the write-ahead log and
 * checkpoints that make acknowledged updates durable. No sockets: the daemon
 * (ps/main.c) feeds it received messages and sends what it replies. */
#ifndef FLPS_PS_SHARD_H
#define FLPS_PS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "proto/buf.h"
#include "proto/msg.h"
#include "proto/transport.h"

typedef struct ps_shard ps_shard;

/* A reply: header fields in msg; msg.idx/val/rej point into payload or
 * rej (either may be NULL; a gtopk update keeps every rank's rejected
 * indices in its payload). Borrowed for the send callback; a callback
 * that keeps the data holds the buffer (proto_buf_hold). The shard
 * writes a payload again, for a later reply, only once it holds the one
 * reference left (proto_buf_is_unique), so a held buffer never changes. */
typedef struct ps_reply {
    proto_msg msg;
    proto_buf *payload;
    proto_buf *rej;
} ps_reply;

typedef void (*ps_send_fn)(void *arg, uint32_t peer, const ps_reply *reply);

typedef struct ps_shard_config {
    const char *job; /* the job this shard serves; borrowed */
    uint32_t shard;  /* this shard's index */
    uint32_t nshards;
    const char *ckpt_dir; /* NULL: no write-ahead log, no checkpoints */
    int fsync_wal;        /* fsync the log before every acknowledgement */
    /* On restore, a corrupt log record followed by intact ones makes
     * ps_shard_create fail (FLPS_EPROTO, logged with file and offset);
     * non-zero accepts the loss and cuts the log at the corrupt record. */
    int wal_truncate_at_corruption;
    ps_send_fn send;
    void *send_arg;
    /* Optional (NULL: not called): called on the shard's thread each time
     * a synchronous iteration of a part closes, with the seconds from its
     * first push to the close (the /metrics close-latency histogram). */
    void (*on_close)(void *arg, double seconds);
    void *on_close_arg;
    /* The most elements a registered layout may have in all (every
     * tensor, every shard); a REGISTER declaring more is refused before
     * anything is allocated. 0: PS_MAX_MODEL_ELEMENTS_DEFAULT. */
    uint64_t max_model_elements;
    /* A CHECKPOINT request is served at most once per this many seconds;
     * one sooner is answered with an ACK of status 1 naming the last (the
     * log keeps every update meanwhile). 0: the default below, negative:
     * no limit. Only peers that registered may ask at all. */
    double ckpt_request_interval_s;
    /* The job's secret (hex, proto/creds.h; borrowed until
     * ps_shard_destroy); NULL: no
     * authentication, every peer that names the job is served. With it,
     * every request must carry it (else FLPS_EAUTH, counted, nothing
     * changes: a wrong REGISTER configures nothing), and each rank is
     * bound to the client instance (the header's cid) that registered it,
     * or after a restore that first spoke as it: a request as rank r from
     * another instance is refused. An authenticated REGISTER of rank r
     * from a new instance takes the rank over (a restarted worker). */
    const char *secret;
} ps_shard_config;

#define PS_CKPT_REQUEST_INTERVAL_DEFAULT 10.0

/* 2^31 elements (8 GiB of f32 for the whole model): larger than any model
 * the built-in workers train, small enough that one REGISTER cannot ask a
 * shard for 2^32 * 4096 elements. flps --max-model-elements changes it. */
#define PS_MAX_MODEL_ELEMENTS_DEFAULT (UINT64_C(1) << 31)

/* Counters, for logs and /metrics. */
typedef struct ps_shard_stats {
    uint64_t pushes;  /* accepted */
    uint64_t updates; /* iterations closed (sync) or pushes applied */
    uint64_t pulls;
    uint64_t rejected[FLPS_ERR_COUNT_]; /* refused messages, by reason */
    uint64_t elements_in;               /* index/value pairs received */
    uint64_t elements_out;              /* pairs sent in updates */
    uint64_t checkpoints;
    /* Async (and ssp) jobs: the most iterations a push was ahead of the
     * slowest rank's next iteration of its part when it was applied (the
     * staleness the job really ran with; ssp:S keeps it at most S). */
    uint64_t async_max_lead;
} ps_shard_stats;

/* Create a shard. If cfg->ckpt_dir is set and restore is non-zero, loads
 * the checkpoint and replays the write-ahead log found there (a missing
 * checkpoint is not an error: the shard starts empty). Caller owns *out. */
flps_err ps_shard_create(const ps_shard_config *cfg, int restore,
                         ps_shard **out);
void ps_shard_destroy(ps_shard *s);

/* Handle one received message. Takes ownership of rx in every case (keeps
 * it while a push waits for its iteration, else releases it). Replies go
 * through the send callback, possibly to other peers (closing an iteration
 * answers every worker). Returns the error a refused message got (it was
 * answered with an ERROR reply and counted) or FLPS_OK. Running out of
 * memory is such a refusal: the shard carries on. */
flps_err ps_shard_handle(ps_shard *s, transport_rx *rx);

/* Non-zero once an update could not be appended to the write-ahead log:
 * the shard can no longer make what it acknowledges durable, and the
 * daemon must stop. The one failure that is fatal. */
int ps_shard_is_broken(const ps_shard *s);

/* Write a checkpoint now (atomic: temp file, fsync, rename) and truncate
 * the log. FLPS_ESTATE when the shard has no layout yet or no ckpt_dir. */
flps_err ps_shard_checkpoint(ps_shard *s);

const ps_shard_stats *ps_shard_stats_get(const ps_shard *s);

/* Refuse a message that never reached ps_shard_handle (the transport
 * dropped it: too many frames): count it under err, log it (rate-limited
 * like every refusal) and answer peer with an ERROR carrying text. */
void ps_shard_refuse(ps_shard *s, uint32_t peer, flps_err err,
                     const char *text);

/* Count (under FLPS_EPROTO) and log, rate-limited, a message the
 * transport dropped without anyone to answer (a full table of peers). */
void ps_shard_count_dropped(ps_shard *s, const char *why);

/* Test and tool access: the values and version of part `part` (NULL /
 * FLPS_EINVAL if not owned or not initialised). */
flps_err ps_shard_part(const ps_shard *s, uint32_t part, const float **values,
                       uint32_t *numel, uint64_t *version, uint64_t *iter);

/* Whether the registered job is asynchronous (async or ssp). */
int ps_shard_is_async(const ps_shard *s);

/* Number of parts this shard owns (0 before a layout is known). */
uint32_t ps_shard_num_owned(const ps_shard *s);

#endif
