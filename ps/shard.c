/* One parameter-server shard: its life (create, restore, destroy) and the
 * door every message comes through: decode, the credentials (first, so a
 * stranger learns nothing of the shard), the job, then the handler of its
 * op. The layers behind the door, each in its
 * file (ps/shard_impl.h says which owns which state): shard_layout.c
 * (REGISTER, the parts), shard_pull.c (INIT, PULL), shard_agg.c (PUSH),
 * shard_close.c (closing an iteration), shard_durable.c (log,
 * checkpoints, CHECKPOINT), shard_reply.c (replies). */
#include "ps/shard.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/quote.h"
#include "proto/creds.h"
#include "ps/shard_impl.h"

int ps_shard_is_async(const ps_shard *s)
{
    return s->configured && s->jc.mode == PROTO_MODE_ASYNC;
}

int ps_shard_is_broken(const ps_shard *s)
{
    return s->broken;
}

/* With a secret, m must carry it: checked before anything else of m, so
 * that a refusal says nothing of the shard (not its job, layout or
 * state), whatever else is wrong with m. The comparison takes the same
 * time wherever the secrets differ. Refusals are counted under
 * FLPS_EAUTH; nothing changes. */
static flps_err check_secret(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    if (creds_secret_equal(s->cfg.secret, m->auth))
        return FLPS_OK;
    ps_shard_refuse_stranger(
        s, peer, m, FLPS_EAUTH,
        m->auth[0] != '\0'
            ? "wrong credentials: not a member of this shard's job"
            : "this shard serves only its members: start the client "
              "with the job's credentials (FLPS_CREDENTIALS_FILE)");
    return FLPS_EAUTH;
}

/* With a secret, a member's m must, but for a REGISTER (which binds the
 * rank when it is accepted), come from the client instance its rank is
 * bound to; a rank nobody holds yet (after a restore: clients do not
 * register again) is bound to the first member that speaks as it.
 * Refusals are answered and counted under FLPS_EAUTH; nothing changes. */
static flps_err check_binding(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    if (m->cid == 0) {
        ps_shard_reply_error(s, peer, m, FLPS_EAUTH,
                             "request without a client id (cid) refused: "
                             "job '%s' binds every rank to its client",
                             s->job);
        return FLPS_EAUTH;
    }
    if (m->op == PROTO_OP_REGISTER || !s->configured ||
        m->rank >= s->jc.workers)
        return FLPS_OK; /* the handlers check the rest */
    if (s->owner[m->rank] == 0) {
        s->owner[m->rank] = m->cid;
    } else if (s->owner[m->rank] != m->cid) {
        ps_shard_reply_error(s, peer, m, FLPS_EAUTH,
                             "rank %u of job '%s' is bound to another client; "
                             "a worker speaks only as the rank it registered",
                             m->rank, s->job);
        return FLPS_EAUTH;
    }
    return FLPS_OK;
}

/* Decode, then the secret, then the job, then the rank's binding: what a
 * request must pass before its op's handler sees it. */
static flps_err admit(ps_shard *s, transport_rx *rx, proto_msg *m)
{
    char why[256];
    flps_err rc;

    rc = proto_msg_decode(rx->frames, rx->nframes, m, why, sizeof(why));
    if (rc != FLPS_OK) {
        /* What the bytes are, nothing of the shard. */
        ps_shard_refuse_stranger(s, rx->peer, NULL, rc, "%s", why);
        return rc;
    }
    if (m->wire_version < PROTO_VERSION) {
        /* An older client cannot read this shard's replies: refused at
         * once, in its own version, rather than left waiting. */
        ps_shard_refuse_stranger(
            s, rx->peer, m, FLPS_EPROTO,
            "this shard speaks flps protocol version %u and the client %u: "
            "run the same flps release on the shards and the workers",
            PROTO_VERSION, m->wire_version);
        return FLPS_EPROTO;
    }
    if (s->cfg.secret != NULL) {
        rc = check_secret(s, rx->peer, m);
        if (rc != FLPS_OK)
            return rc;
    }
    if (strcmp(m->job, s->job) != 0) {
        char job[PROTO_JOB_MAX * 4 + 4];
        flps_quote_str(job, sizeof(job), m->job, PROTO_JOB_MAX);
        ps_shard_reply_error(s, rx->peer, m, FLPS_EJOB,
                             "this shard serves job '%s', not '%s'", s->job,
                             job);
        return FLPS_EJOB;
    }
    if (s->cfg.secret != NULL)
        return check_binding(s, rx->peer, m);
    return FLPS_OK;
}

flps_err ps_shard_handle(ps_shard *s, transport_rx *rx)
{
    proto_msg m;
    flps_err rc;
    int kept = 0;

    memset(&m, 0, sizeof(m));
    rc = admit(s, rx, &m);
    if (rc != FLPS_OK)
        goto out;
    switch (m.op) {
    case PROTO_OP_REGISTER:
        rc = ps_shard_on_register(s, rx->peer, &m);
        break;
    case PROTO_OP_INIT:
        rc = ps_shard_on_init(s, rx->peer, &m);
        break;
    case PROTO_OP_PULL:
        rc = ps_shard_on_pull(s, rx->peer, &m);
        break;
    case PROTO_OP_PUSH:
        rc = ps_agg_push_msg(s, rx, &m);
        kept = 1; /* taken */
        break;
    case PROTO_OP_CHECKPOINT:
        rc = ps_shard_on_checkpoint(s, rx->peer, &m);
        break;
    default:
        ps_shard_reply_error(s, rx->peer, &m, FLPS_EPROTO,
                             "a shard does not accept %s", proto_op_name(m.op));
        rc = FLPS_EPROTO;
        break;
    }
out:
    proto_msg_fini(&m);
    if (!kept)
        transport_rx_release(rx);
    return rc;
}

flps_err ps_shard_create(const ps_shard_config *cfg, int restore,
                         ps_shard **out)
{
    ps_shard *s;
    flps_err rc;

    if (cfg == NULL || cfg->job == NULL || cfg->send == NULL ||
        cfg->nshards == 0 || cfg->shard >= cfg->nshards ||
        strlen(cfg->job) > PROTO_JOB_MAX || strlen(cfg->job) == 0)
        return FLPS_EINVAL;
    s = flps_calloc(1, sizeof(*s));
    if (s == NULL)
        return FLPS_ENOMEM;
    s->cfg = *cfg;
    s->wal_fd = -1;
    snprintf(s->job, sizeof(s->job), "%s", cfg->job);
    if (cfg->ckpt_dir != NULL) {
        rc = ps_shard_open_files(s, restore);
        if (rc != FLPS_OK)
            goto fail;
    }
    *out = s;
    return FLPS_OK;
fail:
    ps_shard_destroy(s);
    return rc;
}

void ps_shard_destroy(ps_shard *s)
{
    if (s == NULL)
        return;
    ps_shard_drop_held(s);
    ps_layout_drop(s);
    if (s->wal_fd >= 0)
        close(s->wal_fd);
    flps_free(s);
}

const ps_shard_stats *ps_shard_stats_get(const ps_shard *s)
{
    return &s->stats;
}

flps_err ps_shard_part(const ps_shard *s, uint32_t part, const float **values,
                       uint32_t *numel, uint64_t *version, uint64_t *iter)
{
    const ps_part *p;

    if (!s->configured || part >= s->pm.nparts || s->parts[part] == NULL ||
        !s->parts[part]->initialized)
        return FLPS_EINVAL;
    p = s->parts[part];
    *values = p->w;
    *numel = p->numel;
    *version = p->version;
    *iter = p->iter;
    return FLPS_OK;
}

uint32_t ps_shard_num_owned(const ps_shard *s)
{
    return s->nowned;
}
