/* A shard's durability: the write-ahead log every update is appended to
 * before anyone hears of it, checkpoints (on a timer, at exit, and asked
 * for by a member of the job), and the restore of both at start; plus
 * each synchronous part's last update, kept to answer a late push. */
#include "ps/shard_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"

/* Keep r (a synchronous close, already logged) as p's last update;
 * FLPS_ENOMEM leaves p without one (a later push for that iteration is
 * refused as late, and the worker pulls the part). */
static flps_err keep_last(ps_part *p, const wal_record *r)
{
    if (r->n > p->last_cap || p->last_val == NULL) {
        size_t cap = r->n > 0 ? r->n : 1;
        uint32_t *idx = flps_malloc(cap * sizeof(*idx));
        float *val = flps_malloc(cap * sizeof(*val));
        if (idx == NULL || val == NULL) {
            flps_free(idx);
            flps_free(val);
            p->has_last = 0;
            return FLPS_ENOMEM;
        }
        flps_free(p->last_idx);
        flps_free(p->last_val);
        p->last_idx = idx;
        p->last_val = val;
        p->last_cap = cap;
    }
    if (r->kind == WAL_ADD_SPARSE)
        memcpy(p->last_idx, r->idx, (size_t)r->n * sizeof(*p->last_idx));
    memcpy(p->last_val, r->val, (size_t)r->n * sizeof(*p->last_val));
    p->last_kind = r->kind;
    p->last_n = r->n;
    p->last_version = r->version;
    p->has_last = 1;
    return FLPS_OK;
}

flps_err ps_shard_wal(ps_shard *s, const wal_record *r)
{
    flps_err rc;

    if (s->wal_fd < 0)
        return FLPS_OK;
    rc = wal_append(s->wal_fd, r, s->cfg.fsync_wal);
    /* A record that may be half written: nothing more can be appended
     * safely, and nothing acknowledged may be lost, so the daemon stops. */
    if (rc != FLPS_OK)
        s->broken = 1;
    return rc;
}

/* The checkpoint's meta block is a REGISTER message: layout + config. */
static flps_err shard_encode_meta(const ps_shard *s, void **meta, size_t *len)
{
    proto_msg m;
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_REGISTER;
    snprintf(m.job, sizeof(m.job), "%s", s->job);
    m.cfg = s->jc;
    m.ntensors = s->ntensors;
    m.tensors = s->tensors;
    return proto_msg_encode(&m, meta, len, f, &nf);
}

flps_err ps_shard_checkpoint(ps_shard *s)
{
    ckpt_part *cp;
    void *meta = NULL;
    size_t metalen = 0;
    uint32_t n = 0;
    flps_err rc;

    if (!s->configured || s->cfg.ckpt_dir == NULL)
        return FLPS_ESTATE;
    rc = shard_encode_meta(s, &meta, &metalen);
    if (rc != FLPS_OK)
        return rc;
    cp = flps_calloc(s->nowned, sizeof(*cp));
    if (cp == NULL) {
        free(meta);
        return FLPS_ENOMEM;
    }
    for (uint32_t i = 0; i < s->pm.nparts; i++) {
        ps_part *p = s->parts[i];
        if (p == NULL || !p->initialized)
            continue;
        cp[n].id = p->id;
        cp[n].numel = p->numel;
        cp[n].version = p->version;
        cp[n].iter = p->iter;
        cp[n].values = p->w;
        if (s->jc.mode == PROTO_MODE_ASYNC) {
            cp[n].nranks = s->jc.workers;
            cp[n].rank_iters = p->last_async;
        }
        cp[n].nstate = ps_sopt_nstate(&s->jc);
        cp[n].state = p->sopt;
        n++;
    }
    rc = ckpt_write(s->ckpt_path, meta, metalen, cp, n);
    free(meta);
    flps_free(cp);
    if (rc == FLPS_OK && s->wal_fd >= 0)
        rc = wal_truncate(s->wal_fd);
    /* The checkpoint holds the values but not how the last iteration of
     * each part changed them: that update goes back into the emptied log
     * (its version is the checkpoint's, so a restore does not apply it
     * again, only keeps it to answer a late push of that iteration). */
    for (uint32_t i = 0; rc == FLPS_OK && s->wal_fd >= 0 && i < s->pm.nparts;
         i++) {
        const ps_part *p = s->parts[i];
        wal_record wr;
        if (p == NULL || !p->has_last || p->last_version != p->version)
            continue;
        memset(&wr, 0, sizeof(wr));
        wr.kind = p->last_kind;
        wr.part = p->id;
        wr.iter = p->iter;
        wr.version = p->version;
        wr.n = p->last_n;
        wr.idx = p->last_kind == WAL_ADD_SPARSE ? p->last_idx : NULL;
        wr.val = p->last_val;
        rc = ps_shard_wal(s, &wr);
    }
    if (rc == FLPS_OK) {
        s->stats.checkpoints++;
        log_info("checkpoint written: %s (%u parts)", s->ckpt_path, n);
    }
    return rc;
}

static int peer_is_member(const ps_shard *s, uint32_t peer)
{
    for (uint32_t r = 0; s->member != NULL && r < s->jc.workers; r++)
        if (s->member[r] == peer + 1)
            return 1;
    return 0;
}

/* A checkpoint writes and fsyncs the whole shard: only members of the job
 * may ask, and at most once per ckpt_request_interval_s (a flood wrote
 * 400 checkpoints, 1.6 GB, in 2 s). */
flps_err ps_shard_on_checkpoint(ps_shard *s, uint32_t peer, const proto_msg *m)
{
    const double every = s->cfg.ckpt_request_interval_s == 0
                             ? PS_CKPT_REQUEST_INTERVAL_DEFAULT
                             : s->cfg.ckpt_request_interval_s;
    double now = flps_mono_s();
    flps_err rc;

    /* A restored shard has not heard from its workers yet, and a client
     * does not register again after a shard restart: the first peer to
     * speak as a rank that nobody holds becomes its member. */
    if (s->configured && s->restored && m->rank < s->jc.workers &&
        s->member[m->rank] == 0)
        s->member[m->rank] = peer + 1;
    if (s->configured && !peer_is_member(s, peer)) {
        ps_shard_reply_error(s, peer, m, FLPS_ESTATE,
                             "only a registered worker of job '%s' may ask "
                             "for a checkpoint; register first",
                             s->job);
        return FLPS_ESTATE;
    }
    if (s->ckpt_req_done && every > 0 && now - s->ckpt_req_mono < every) {
        char text[PROTO_ERRMSG_MAX + 1], when[32];
        struct tm tm;
        gmtime_r(&s->ckpt_req_wall, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(text, sizeof(text),
                 "checkpoint done recently (at %s, %.1f s ago; at most one "
                 "per %g s); not written again",
                 when, now - s->ckpt_req_mono, every);
        ps_shard_reply_ack(s, peer, m, 1, text, 0);
        return FLPS_OK;
    }
    rc = ps_shard_checkpoint(s);
    if (rc != FLPS_OK) {
        ps_shard_reply_error(s, peer, m, rc, "checkpoint failed: %s",
                             flps_strerror(rc));
        return rc;
    }
    s->ckpt_req_done = 1;
    s->ckpt_req_mono = now;
    s->ckpt_req_wall = time(NULL);
    ps_shard_reply_ack(s, peer, m, 0, "checkpoint written", 0);
    return FLPS_OK;
}

static flps_err restore_part(void *arg, const ckpt_part *cp)
{
    ps_shard *s = arg;
    ps_part *p;

    if (cp->id >= s->pm.nparts || s->parts[cp->id] == NULL ||
        s->parts[cp->id]->numel != cp->numel) {
        log_error("checkpoint holds part %u (%u elements) which this shard "
                  "does not own with that size",
                  cp->id, cp->numel);
        return FLPS_EPROTO;
    }
    p = s->parts[cp->id];
    if (cp->nranks != 0 && cp->nranks != s->jc.workers) {
        log_error("checkpoint holds iterations of %u ranks for part %u; the "
                  "job has %u workers",
                  cp->nranks, cp->id, s->jc.workers);
        return FLPS_EPROTO;
    }
    if (cp->nstate != ps_sopt_nstate(&s->jc)) {
        log_error("checkpoint holds %u floats of server-optimizer state per "
                  "element of part %u; the job's optimizer keeps %u",
                  cp->nstate, cp->id, ps_sopt_nstate(&s->jc));
        return FLPS_EPROTO;
    }
    if (cp->nstate > 0)
        memcpy(p->sopt, cp->state,
               (size_t)cp->nstate * cp->numel * sizeof(float));
    if (cp->nranks != 0)
        memcpy(p->last_async, cp->rank_iters,
               (size_t)cp->nranks * sizeof(*p->last_async));
    memcpy(p->w, cp->values, (size_t)cp->numel * sizeof(float));
    p->version = cp->version;
    p->iter = cp->iter;
    p->initialized = 1;
    return FLPS_OK;
}

/* Replay r, a server optimizer's update of p (WAL_OPT_*): the step the
 * close took, from the state restored so far, applied, and kept as the
 * last update. */
static flps_err replay_sopt(ps_shard *s, ps_part *p, const wal_record *r)
{
    const size_t nstate = ps_sopt_nstate(&s->jc);
    float *out = flps_malloc((size_t)p->numel * sizeof(float));
    float *next = flps_malloc(nstate * p->numel * sizeof(float) + 1);
    wal_record kept = *r;

    if (nstate == 0 || out == NULL || next == NULL) {
        flps_free(out);
        flps_free(next);
        if (nstate == 0)
            log_error("write-ahead log holds a server optimizer's update of "
                      "part %u; the job has none",
                      p->id);
        return nstate == 0 ? FLPS_EPROTO : FLPS_ENOMEM;
    }
    for (uint32_t j = 0; r->idx != NULL && j < r->n; j++)
        if (r->idx[j] >= p->numel || (j > 0 && r->idx[j] <= r->idx[j - 1])) {
            flps_free(out);
            flps_free(next);
            return FLPS_EPROTO;
        }
    (void)ps_sopt_step(&s->jc, p, r->iter - 1, r->idx, r->val, r->n, out, next);
    for (uint32_t i = 0; i < p->numel; i++)
        p->w[i] += out[i];
    memcpy(p->sopt, next, nstate * p->numel * sizeof(float));
    kept.kind = WAL_ADD_DENSE;
    kept.idx = NULL;
    kept.n = p->numel;
    kept.val = out;
    p->version = r->version;
    p->iter = r->iter;
    (void)keep_last(p, &kept);
    flps_free(out);
    flps_free(next);
    return FLPS_OK;
}

static flps_err replay_record(void *arg, const wal_record *r)
{
    ps_shard *s = arg;
    ps_part *p;

    if (r->part >= s->pm.nparts || s->parts[r->part] == NULL) {
        log_error("write-ahead log names part %u, not owned here", r->part);
        return FLPS_EPROTO;
    }
    p = s->parts[r->part];
    /* Records the checkpoint already contains (a crash between writing the
     * checkpoint and truncating the log) are skipped by version; the one
     * that made the checkpoint's version (written again after it) is kept
     * as the part's last update. */
    if (r->version <= p->version) {
        /* A server optimizer's update before its step is not what the
         * workers got: a late push then re-pulls instead. */
        if (r->version == p->version && s->jc.mode != PROTO_MODE_ASYNC &&
            (r->kind == WAL_ADD_SPARSE || r->kind == WAL_ADD_DENSE) &&
            r->iter == p->iter)
            (void)keep_last(p, r); /* ENOMEM: only less to replay */
        return FLPS_OK;
    }
    if (r->version != p->version + 1 ||
        (r->kind != WAL_ADD_SPARSE && r->kind != WAL_OPT_SPARSE &&
         r->n != p->numel)) {
        log_error("write-ahead log record for part %u does not follow "
                  "version %llu",
                  p->id, (unsigned long long)p->version);
        return FLPS_EPROTO;
    }
    if (r->kind == WAL_OPT_SPARSE || r->kind == WAL_OPT_DENSE)
        return replay_sopt(s, p, r);
    if (r->kind == WAL_SET) {
        memcpy(p->w, r->val, (size_t)p->numel * sizeof(float));
        p->initialized = 1;
    } else if (r->kind == WAL_ADD_DENSE) {
        for (uint32_t i = 0; i < p->numel; i++)
            p->w[i] += r->val[i];
    } else {
        for (uint32_t j = 0; j < r->n; j++) {
            if (r->idx[j] >= p->numel)
                return FLPS_EPROTO;
            p->w[r->idx[j]] += r->val[j];
        }
    }
    p->version = r->version;
    if (s->jc.mode == PROTO_MODE_ASYNC) {
        if (r->rank < s->jc.workers && r->iter > p->last_async[r->rank])
            p->last_async[r->rank] = r->iter;
    } else {
        p->iter = r->iter;
        if (r->kind == WAL_SET)
            p->has_last = 0;
        else
            (void)keep_last(p, r);
    }
    return FLPS_OK;
}

/* A torn tail is always cut off before the log is appended to again. */
static unsigned wal_flags(const ps_shard_config *cfg)
{
    return WAL_RESTORE_REPAIR |
           (cfg->wal_truncate_at_corruption ? WAL_RESTORE_TRUNCATE_AT_CORRUPTION
                                            : 0u);
}

static flps_err meta_only(void *arg, const ckpt_part *cp)
{
    (void)arg;
    (void)cp;
    return FLPS_OK;
}

/* The layout of the checkpoint's meta block: a REGISTER of this job. */
static flps_err restore_layout(ps_shard *s, const void *meta, size_t metalen)
{
    proto_msg m;
    proto_frame f = {meta, metalen};
    char why[256];
    flps_err rc;

    /* decode leaves m untouched on error, and the fini below
     * runs either way. */
    memset(&m, 0, sizeof(m));
    rc = proto_msg_decode(&f, 1, &m, why, sizeof(why));
    if (rc == FLPS_OK && m.op != PROTO_OP_REGISTER)
        rc = FLPS_EPROTO;
    if (rc == FLPS_OK && strcmp(m.job, s->job) != 0) {
        log_error("checkpoint %s belongs to job '%s', not '%s'", s->ckpt_path,
                  m.job, s->job);
        rc = FLPS_EJOB;
    }
    if (rc == FLPS_OK)
        rc = ps_layout_configure(s, &m.cfg, m.tensors, m.ntensors);
    proto_msg_fini(&m);
    return rc;
}

/* Restore from the checkpoint and the log at s's paths: the layout from
 * the checkpoint's meta block, its parts' values, then every log record
 * after them. A missing checkpoint is no error: the shard starts empty. */
static flps_err restore_files(ps_shard *s)
{
    void *meta = NULL;
    size_t metalen = 0;
    int missing = 0;
    wal_restore_info wi = {0};
    flps_err rc =
        ckpt_read(s->ckpt_path, &meta, &metalen, meta_only, NULL, &missing);

    if (rc != FLPS_OK && missing) {
        log_info("no checkpoint at %s: starting empty", s->ckpt_path);
        return FLPS_OK;
    }
    if (rc != FLPS_OK)
        return rc;
    rc = restore_layout(s, meta, metalen);
    free(meta);
    if (rc == FLPS_OK)
        rc =
            ckpt_read(s->ckpt_path, &meta, &metalen, restore_part, s, &missing);
    if (rc == FLPS_OK) {
        free(meta);
        rc =
            wal_restore(s->wal_path, wal_flags(&s->cfg), replay_record, s, &wi);
    }
    if (rc != FLPS_OK)
        return rc;
    s->restored = 1;
    log_info("restored %u parts from %s and %llu log records from %s",
             s->nowned, s->ckpt_path, (unsigned long long)wi.records,
             s->wal_path);
    return FLPS_OK;
}

flps_err ps_shard_open_files(ps_shard *s, int restore)
{
    flps_err rc;

    persist_paths(s->cfg.ckpt_dir, s->cfg.shard, s->ckpt_path, s->wal_path,
                  sizeof(s->ckpt_path));
    if (restore) {
        rc = restore_files(s);
        if (rc != FLPS_OK)
            return rc;
    } else {
        /* A fresh start must not replay somebody else's old log. */
        unlink(s->wal_path);
    }
    return wal_open(s->wal_path, &s->wal_fd);
}

flps_err ps_shard_log_close(ps_shard *s, ps_part *p, const wal_record *r,
                            const wal_record *keep)
{
    flps_err rc = ps_shard_wal(s, r);

    if (rc != FLPS_OK)
        return rc;
    /* Only a shard with a log is ever restored, which is when a push of
     * a closed iteration comes: without one, keeping costs for nothing. */
    if (s->wal_fd >= 0)
        (void)keep_last(p, keep != NULL ? keep : r); /* ENOMEM: re-pull */
    return FLPS_OK;
}
