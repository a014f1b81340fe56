/* Write-ahead log and checkpoint files of a shard. Both formats are
 * little-endian binary with a checksum, so a torn or corrupted file is
 * detected instead of silently loaded. */
#include "ps/persist.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "ps/crc32c.h"

/* Record formats, told apart by their magic. Version 3 ends each record
 * with a CRC-32C (ps/crc32c.c); version 2 ended it with zlib's CRC-32 and
 * is still read, so a shard upgraded in place restores the log it left.
 * Both have the same header and sizes; new records are always version 3,
 * so a log may hold version 2 records followed by version 3 ones. */
#define WAL_MAGIC_V3 0x33525746u /* "FWR3" */
#define WAL_MAGIC_V2 0x32525746u /* "FWR2": the record carries a rank */
#define CKPT_MAGIC "FLPSCKP2"
/* Version 3 adds each part's server-optimizer state; written only where
 * a part has some, so every other checkpoint stays version 2. */
#define CKPT_MAGIC_V3 "FLPSCKP3"

/* On-disk WAL record header; the payload (idx then val) follows, then the
 * checksum of header and payload. */
typedef struct __attribute__((packed)) wal_disk {
    uint32_t magic;
    uint8_t kind;
    uint8_t pad[3];
    uint32_t part;
    uint32_t n;
    uint32_t rank;
    uint64_t iter;
    uint64_t version;
} wal_disk;

static flps_err fsync_dir_of(const char *path);

void persist_paths(const char *dir, uint32_t shard, char *ckpt, char *wal,
                   size_t len)
{
    if (ckpt != NULL)
        snprintf(ckpt, len, "%s/shard-%u.ckpt", dir, shard);
    if (wal != NULL)
        snprintf(wal, len, "%s/shard-%u.wal", dir, shard);
}

static flps_err write_all(int fd, const void *buf, size_t len, const char *what)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            log_error("cannot write %s: %s", what, strerror(errno));
            return FLPS_EIO;
        }
        p += w;
        len -= (size_t)w;
    }
    return FLPS_OK;
}

flps_err wal_open(const char *path, int *fd)
{
    int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    flps_err rc;

    if (f < 0) {
        log_error("cannot open write-ahead log %s: %s", path, strerror(errno));
        return FLPS_EIO;
    }
    /* The file's directory entry must survive a power loss as well as the
     * records fsynced into it. */
    rc = fsync_dir_of(path);
    if (rc != FLPS_OK) {
        if (rc == FLPS_EIO)
            log_error("cannot fsync the directory of write-ahead log %s: %s",
                      path, strerror(errno));
        close(f);
        return rc;
    }
    *fd = f;
    return FLPS_OK;
}

static int wal_kind_is_known(uint8_t kind)
{
    return kind >= WAL_ADD_SPARSE && kind <= WAL_OPT_DENSE;
}

/* Whether a record of kind carries indices before its values. */
static int wal_kind_is_sparse(uint8_t kind)
{
    return kind == WAL_ADD_SPARSE || kind == WAL_OPT_SPARSE;
}

static size_t wal_payload_len(uint8_t kind, uint32_t n)
{
    return (size_t)n * (wal_kind_is_sparse(kind) ? 8 : 4);
}

static uint32_t wal_checksum(uint32_t magic, const unsigned char *p, size_t len)
{
    if (magic == WAL_MAGIC_V2)
        return (uint32_t)crc32(0L, p, (uInt)len);
    return crc32c_update(0, p, len);
}

/* A failed append must leave no bytes behind: a later append would land
 * behind them, and the next restore would stop at the torn record and
 * drop every acknowledged record after it. */
static void wal_rollback(int fd, off_t start)
{
    if (ftruncate(fd, start) != 0)
        log_error("cannot cut a failed record off the write-ahead log (%s); "
                  "the log now ends in a torn record from byte %lld, which "
                  "the next --restore cuts off",
                  strerror(errno), (long long)start);
}

flps_err wal_append(int fd, const wal_record *r, int do_fsync)
{
    wal_disk h;
    size_t plen = wal_payload_len(r->kind, r->n), total = sizeof(h) + plen + 4;
    unsigned char *buf = flps_malloc(total), *p;
    uint32_t crc;
    off_t start;
    flps_err rc;

    if (buf == NULL)
        return FLPS_ENOMEM;
    memset(&h, 0, sizeof(h));
    h.magic = WAL_MAGIC_V3;
    h.kind = r->kind;
    h.part = r->part;
    h.n = r->n;
    h.rank = r->rank;
    h.iter = r->iter;
    h.version = r->version;
    p = buf;
    memcpy(p, &h, sizeof(h));
    p += sizeof(h);
    /* An empty sparse push (zero pairs) may carry no arrays at all, and
     * memcpy from NULL is undefined even for zero bytes. */
    if (r->n > 0) {
        if (wal_kind_is_sparse(r->kind)) {
            memcpy(p, r->idx, (size_t)r->n * 4);
            p += (size_t)r->n * 4;
        }
        memcpy(p, r->val, (size_t)r->n * 4);
        p += (size_t)r->n * 4;
    }
    crc = crc32c_update(0, buf, sizeof(h) + plen);
    memcpy(p, &crc, 4);
    /* The log is only ever appended to by this thread, so its end is
     * where this record starts. */
    start = lseek(fd, 0, SEEK_END);
    if (start < 0) {
        log_error("cannot find the end of the write-ahead log: %s",
                  strerror(errno));
        flps_free(buf);
        return FLPS_EIO;
    }
    /* One write per record: a crash leaves at most one torn record. */
    rc = write_all(fd, buf, total, "write-ahead log");
    flps_free(buf);
    if (rc == FLPS_OK && do_fsync && fdatasync(fd) != 0) {
        log_error("cannot fsync write-ahead log: %s", strerror(errno));
        rc = FLPS_EIO;
    }
    if (rc != FLPS_OK)
        wal_rollback(fd, start);
    return rc;
}

flps_err wal_truncate(int fd)
{
    if (ftruncate(fd, 0) != 0) {
        log_error("cannot truncate write-ahead log: %s", strerror(errno));
        return FLPS_EIO;
    }
    return FLPS_OK;
}

static flps_err read_file(const char *path, unsigned char **data, size_t *len,
                          int *missing)
{
    FILE *f = fopen(path, "rb");
    flps_strbuf b = FLPS_STRBUF_INIT;
    size_t n;

    *missing = 0;
    if (f == NULL) {
        if (errno == ENOENT) {
            *missing = 1;
            return FLPS_EIO;
        }
        log_error("cannot open %s: %s", path, strerror(errno));
        return FLPS_EIO;
    }
    /* fread straight into the buffer's spare room: a checkpoint can be
     * large, and reading through a bounce buffer would copy it twice. */
    for (;;) {
        size_t r;
        if (flps_strbuf_reserve(&b, 1 << 20) != FLPS_OK) {
            flps_strbuf_fini(&b);
            fclose(f);
            return FLPS_ENOMEM;
        }
        r = fread(b.data + b.len, 1, b.cap - b.len - 1, f);
        b.len += r;
        b.data[b.len] = '\0';
        if (r == 0)
            break;
    }
    if (ferror(f)) {
        log_error("cannot read %s: %s", path, strerror(errno));
        flps_strbuf_fini(&b);
        fclose(f);
        return FLPS_EIO;
    }
    fclose(f);
    n = b.len;
    *data = (unsigned char *)flps_strbuf_take(&b);
    *len = n;
    return FLPS_OK;
}

/* The length of the intact record at off (off <= len), or 0 when the
 * bytes there are not one: too short, an unknown magic or kind, a payload
 * past the end, or a checksum mismatch. Fills *h when it returns > 0. */
static size_t wal_intact_at(const unsigned char *data, size_t len, size_t off,
                            wal_disk *h)
{
    size_t plen;
    uint32_t crc;

    if (len - off < sizeof(*h) + 4)
        return 0;
    memcpy(h, data + off, sizeof(*h));
    if ((h->magic != WAL_MAGIC_V3 && h->magic != WAL_MAGIC_V2) ||
        !wal_kind_is_known(h->kind))
        return 0;
    plen = wal_payload_len(h->kind, h->n);
    if (plen > len - off - sizeof(*h) - 4)
        return 0;
    memcpy(&crc, data + off + sizeof(*h) + plen, 4);
    if (wal_checksum(h->magic, data + off, sizeof(*h) + plen) != crc)
        return 0;
    return sizeof(*h) + plen + 4;
}

/* The first offset after bad where an intact record starts, or 0 if none
 * does. Every byte offset is tried: a torn record of any length may have
 * had records appended behind it (logs written before issue 12's fix). */
static size_t wal_next_intact(const unsigned char *data, size_t len, size_t bad)
{
    static const uint32_t magics[2] = {WAL_MAGIC_V3, WAL_MAGIC_V2};
    wal_disk h;

    for (size_t p = bad + 1; p + sizeof(h) + 4 <= len; p++)
        for (int i = 0; i < 2; i++)
            if (memcmp(data + p, &magics[i], 4) == 0 &&
                wal_intact_at(data, len, p, &h) > 0)
                return p;
    return 0;
}

/* The format version of a record at p that this flps does not read (1:
 * "FWLR", before records carried a rank; 4-9: "FWR4".."FWR9", a newer
 * flps), or 0 when the bytes there are no such magic. */
static int wal_unread_version(const unsigned char *p, size_t avail)
{
    if (avail < 4)
        return 0;
    if (memcmp(p, "FWLR", 4) == 0)
        return 1;
    if (memcmp(p, "FWR", 3) == 0 && p[3] >= '4' && p[3] <= '9')
        return p[3] - '0';
    return 0;
}

/* Cut the log at path to len bytes, durably. */
static flps_err wal_cut(const char *path, size_t len)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    flps_err rc = FLPS_OK;

    if (fd < 0) {
        log_error("cannot open write-ahead log %s to cut it: %s", path,
                  strerror(errno));
        return FLPS_EIO;
    }
    if (ftruncate(fd, (off_t)len) != 0 || fsync(fd) != 0) {
        log_error("cannot cut write-ahead log %s at byte %zu: %s", path, len,
                  strerror(errno));
        rc = FLPS_EIO;
    }
    close(fd);
    return rc;
}

flps_err wal_restore(const char *path, unsigned flags, wal_replay_fn fn,
                     void *arg, wal_restore_info *info)
{
    unsigned char *data = NULL;
    size_t len = 0, off = 0, next = 0;
    int missing;
    uint64_t count = 0, later = 0;
    wal_restore_info res;
    wal_disk h;
    flps_err rc = read_file(path, &data, &len, &missing);

    memset(&res, 0, sizeof(res));
    res.corrupt_at = UINT64_MAX;
    if (rc != FLPS_OK) {
        if (!missing)
            return rc;
        *info = res;
        return FLPS_OK;
    }
    /* Check the whole log before replaying any of it, so a log that is
     * refused changes nothing. */
    for (size_t t; off < len && (t = wal_intact_at(data, len, off, &h)) > 0;
         off += t)
        count++;
    /* A record of a format this flps does not read is no damage: cutting
     * it off as a torn tail would drop a whole log of acknowledged
     * updates. */
    if (off < len && wal_unread_version(data + off, len - off) > 0) {
        int v = wal_unread_version(data + off, len - off);
        log_error("write-ahead log %s: the record at byte offset %zu is in "
                  "format version %d, which this flps does not read (it "
                  "reads versions 2 and 3); refusing to restore, nothing "
                  "changed. Restore with the flps release that wrote it and "
                  "let it write a checkpoint (SIGTERM does), then upgrade",
                  path, off, v);
        rc = FLPS_EPROTO;
        goto out;
    }
    if (off < len)
        next = wal_next_intact(data, len, off);
    if (next > 0) {
        for (size_t p = next, t;
             p < len && (t = wal_intact_at(data, len, p, &h)) > 0; p += t)
            later++;
        if (!(flags & WAL_RESTORE_TRUNCATE_AT_CORRUPTION)) {
            log_error("write-ahead log %s: corrupt record at byte offset %zu, "
                      "followed by %llu intact records from byte offset %zu "
                      "(%zu bytes from the corrupt record to the end); "
                      "refusing to restore, nothing changed. Restore the file "
                      "from a backup, or accept losing those updates: restart "
                      "with --restore-truncate-at-corruption to cut the log "
                      "at byte %zu",
                      path, off, (unsigned long long)later, next, len - off,
                      off);
            rc = FLPS_EPROTO;
            goto out;
        }
        res.corrupt_at = off;
        res.records_dropped = later;
    }
    /* Replay: every record up to off was checked above. The header is 36
     * bytes and records are multiples of 4, so the payload is 4-byte
     * aligned in the malloc'd buffer. */
    for (size_t p = 0, t; p < off; p += t) {
        wal_record r;

        t = wal_intact_at(data, len, p, &h);
        r.kind = h.kind;
        r.part = h.part;
        r.iter = h.iter;
        r.version = h.version;
        r.n = h.n;
        r.rank = h.rank;
        if (wal_kind_is_sparse(h.kind)) {
            r.idx = (const uint32_t *)(data + p + sizeof(h));
            r.val = (const float *)(data + p + sizeof(h) + (size_t)h.n * 4);
        } else {
            r.idx = NULL;
            r.val = (const float *)(data + p + sizeof(h));
        }
        rc = fn(arg, &r);
        if (rc != FLPS_OK)
            goto out;
    }
    res.records = count;
    res.kept_bytes = off;
    res.dropped_bytes = len - off;
    if (off == len)
        goto done;
    if (!(flags & WAL_RESTORE_REPAIR)) {
        log_warn("write-ahead log %s: ignoring %zu bytes of torn tail from "
                 "byte offset %zu",
                 path, len - off, off);
        res.kept_bytes = len;
        goto done;
    }
    /* Cut before anything is appended: a record written behind the
     * garbage would be lost at the next restore. */
    rc = wal_cut(path, off);
    if (rc != FLPS_OK)
        goto out;
    if (next > 0)
        log_warn("write-ahead log %s: --restore-truncate-at-corruption: cut "
                 "the log at the corrupt record at byte offset %zu, dropping "
                 "%zu bytes (%llu intact records after it are lost)",
                 path, off, len - off, (unsigned long long)later);
    else
        log_warn("write-ahead log %s: cut a torn last record at byte offset "
                 "%zu (%zu bytes; an update that was never acknowledged)",
                 path, off, len - off);
done:
    *info = res;
out:
    flps_free(data);
    return rc;
}

flps_err wal_replay(const char *path, wal_replay_fn fn, void *arg,
                    uint64_t *nrecords)
{
    wal_restore_info info;
    flps_err rc = wal_restore(path, 0, fn, arg, &info);

    if (rc == FLPS_OK)
        *nrecords = info.records;
    return rc;
}

/* ---- checkpoints ----
 * Layout: "FLPSCKP2", u32 metalen, meta, u32 nparts, then per part
 * u32 id, u32 numel, u64 version, u64 iter, f32[numel], u32 nranks,
 * u64[nranks] (async: each rank's next iteration); finally the CRC-32
 * of everything before it. "FLPSCKP3" is the same with u32 nstate,
 * f32[nstate * numel] (the server optimizer's state) after each part's
 * u64[nranks]. */

static flps_err fsync_dir_of(const char *path)
{
    char *copy = flps_strdup(path);
    int fd;
    flps_err rc = FLPS_OK;

    if (copy == NULL)
        return FLPS_ENOMEM;
    fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd) != 0)
            rc = FLPS_EIO;
        close(fd);
    }
    flps_free(copy);
    return rc;
}

typedef struct crc_writer {
    int fd;
    uLong crc;
    flps_err rc;
} crc_writer;

static void cw_put(crc_writer *w, const void *p, size_t len)
{
    /* Nothing to add; and crc32(crc, NULL, 0) would return the initial
     * value, not crc. */
    if (w->rc != FLPS_OK || len == 0)
        return;
    w->crc = crc32(w->crc, p, (uInt)len);
    w->rc = write_all(w->fd, p, len, "checkpoint");
}

flps_err ckpt_write(const char *path, const void *meta, size_t metalen,
                    const ckpt_part *parts, uint32_t nparts)
{
    char tmp[4200];
    crc_writer w;
    uint32_t u32, crc;
    int v3 = 0;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (w.fd < 0) {
        log_error("cannot create checkpoint %s: %s", tmp, strerror(errno));
        return FLPS_EIO;
    }
    w.crc = crc32(0L, Z_NULL, 0);
    w.rc = FLPS_OK;
    for (uint32_t i = 0; i < nparts; i++)
        v3 |= parts[i].nstate > 0;
    cw_put(&w, v3 ? CKPT_MAGIC_V3 : CKPT_MAGIC, 8);
    u32 = (uint32_t)metalen;
    cw_put(&w, &u32, 4);
    cw_put(&w, meta, metalen);
    cw_put(&w, &nparts, 4);
    for (uint32_t i = 0; i < nparts; i++) {
        cw_put(&w, &parts[i].id, 4);
        cw_put(&w, &parts[i].numel, 4);
        cw_put(&w, &parts[i].version, 8);
        cw_put(&w, &parts[i].iter, 8);
        cw_put(&w, parts[i].values, (size_t)parts[i].numel * 4);
        cw_put(&w, &parts[i].nranks, 4);
        cw_put(&w, parts[i].rank_iters, (size_t)parts[i].nranks * 8);
        if (v3) {
            cw_put(&w, &parts[i].nstate, 4);
            cw_put(&w, parts[i].state,
                   (size_t)parts[i].nstate * parts[i].numel * 4);
        }
    }
    crc = (uint32_t)w.crc;
    if (w.rc == FLPS_OK)
        w.rc = write_all(w.fd, &crc, 4, "checkpoint");
    if (w.rc == FLPS_OK && fsync(w.fd) != 0) {
        log_error("cannot fsync checkpoint %s: %s", tmp, strerror(errno));
        w.rc = FLPS_EIO;
    }
    if (close(w.fd) != 0 && w.rc == FLPS_OK)
        w.rc = FLPS_EIO;
    if (w.rc == FLPS_OK && rename(tmp, path) != 0) {
        log_error("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        w.rc = FLPS_EIO;
    }
    if (w.rc != FLPS_OK) {
        unlink(tmp);
        return w.rc;
    }
    return fsync_dir_of(path);
}

/* A version 3 part's state at *off into p (nstate, state: a copy the
 * caller frees; NULL with nstate > 0 when out of memory). FLPS_EPROTO when
 * the sizes run past the file. */
static flps_err ckpt_read_state(const unsigned char *data, size_t len,
                                size_t *off, ckpt_part *p)
{
    size_t bytes;

    if (4 > len - 4 - *off)
        return FLPS_EPROTO;
    memcpy(&p->nstate, data + *off, 4);
    *off += 4;
    if (p->nstate > 2)
        return FLPS_EPROTO;
    bytes = (size_t)p->nstate * p->numel * 4;
    if (bytes > len - 4 - *off)
        return FLPS_EPROTO;
    if (bytes > 0) {
        float *st = flps_malloc(bytes);
        if (st != NULL)
            memcpy(st, data + *off, bytes);
        p->state = st;
    }
    *off += bytes;
    return FLPS_OK;
}

flps_err ckpt_read(const char *path, void **meta, size_t *metalen,
                   ckpt_part_fn fn, void *arg, int *missing)
{
    unsigned char *data = NULL;
    size_t len = 0, off;
    uint32_t mlen, nparts, crc;
    int v3;
    void *m = NULL;
    flps_err rc = read_file(path, &data, &len, missing);

    if (rc != FLPS_OK)
        return rc;
    rc = FLPS_EPROTO;
    v3 = len >= 8 && memcmp(data, CKPT_MAGIC_V3, 8) == 0;
    if (len < 8 + 4 + 4 + 4 || (!v3 && memcmp(data, CKPT_MAGIC, 8) != 0)) {
        log_error("checkpoint %s: not an flps checkpoint (bad magic)", path);
        goto out;
    }
    memcpy(&crc, data + len - 4, 4);
    if ((uint32_t)crc32(0L, data, (uInt)(len - 4)) != crc) {
        log_error("checkpoint %s: CRC mismatch (file is corrupt)", path);
        goto out;
    }
    memcpy(&mlen, data + 8, 4);
    off = 12;
    if (off + mlen + 4 > len - 4)
        goto bad_size;
    m = flps_malloc(mlen ? mlen : 1);
    if (m == NULL) {
        rc = FLPS_ENOMEM;
        goto out;
    }
    memcpy(m, data + off, mlen);
    off += mlen;
    memcpy(&nparts, data + off, 4);
    off += 4;
    for (uint32_t i = 0; i < nparts; i++) {
        ckpt_part p;
        float *vals;
        if (off + 24 > len - 4)
            goto bad_size;
        memcpy(&p.id, data + off, 4);
        memcpy(&p.numel, data + off + 4, 4);
        memcpy(&p.version, data + off + 8, 8);
        memcpy(&p.iter, data + off + 16, 8);
        off += 24;
        if ((size_t)p.numel * 4 > len - 4 - off)
            goto bad_size;
        /* Copy: values in the file are not 4-byte aligned in general. */
        vals = flps_malloc((size_t)p.numel * 4 + 4);
        if (vals == NULL) {
            rc = FLPS_ENOMEM;
            goto out;
        }
        memcpy(vals, data + off, (size_t)p.numel * 4);
        off += (size_t)p.numel * 4;
        p.values = vals;
        p.rank_iters = NULL;
        if (4 > len - 4 - off) {
            flps_free(vals);
            goto bad_size;
        }
        memcpy(&p.nranks, data + off, 4);
        off += 4;
        if ((size_t)p.nranks * 8 > len - 4 - off) {
            flps_free(vals);
            goto bad_size;
        }
        if (p.nranks > 0) {
            uint64_t *ri = flps_malloc((size_t)p.nranks * 8);
            if (ri == NULL) {
                flps_free(vals);
                rc = FLPS_ENOMEM;
                goto out;
            }
            memcpy(ri, data + off, (size_t)p.nranks * 8);
            p.rank_iters = ri;
        }
        off += (size_t)p.nranks * 8;
        p.nstate = 0;
        p.state = NULL;
        if (v3 && ckpt_read_state(data, len, &off, &p) != FLPS_OK) {
            flps_free(vals);
            flps_free((void *)p.rank_iters);
            goto bad_size;
        }
        rc = p.state == NULL && p.nstate > 0 ? FLPS_ENOMEM : fn(arg, &p);
        flps_free(vals);
        flps_free((void *)p.rank_iters);
        flps_free((void *)p.state);
        if (rc != FLPS_OK)
            goto out;
        rc = FLPS_EPROTO;
    }
    if (off != len - 4)
        goto bad_size;
    *meta = m;
    *metalen = mlen;
    m = NULL;
    rc = FLPS_OK;
    goto out;
bad_size:
    log_error("checkpoint %s: sizes inconsistent (file is corrupt)", path);
    rc = FLPS_EPROTO;
out:
    flps_free(m);
    flps_free(data);
    return rc;
}
