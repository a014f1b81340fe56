/* Write-ahead log and checkpoint files of a shard. Both formats are
 * little-endian binary with a CRC-32 so a torn or corrupted file is
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

#define WAL_MAGIC 0x32525746u /* "FWR2": the record carries a rank */
#define CKPT_MAGIC "FLPSCKP2"

/* On-disk WAL record header; the payload (idx then val) follows, then a
 * CRC-32 of header and payload. */
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

    if (f < 0) {
        log_error("cannot open write-ahead log %s: %s", path, strerror(errno));
        return FLPS_EIO;
    }
    *fd = f;
    return FLPS_OK;
}

static size_t wal_payload_len(const wal_record *r)
{
    return (size_t)r->n * (r->kind == WAL_ADD_SPARSE ? 8 : 4);
}

flps_err wal_append(int fd, const wal_record *r, int do_fsync)
{
    wal_disk h;
    size_t plen = wal_payload_len(r), total = sizeof(h) + plen + 4;
    unsigned char *buf = flps_malloc(total), *p;
    uLong crc;
    uint32_t crc32v;
    flps_err rc;

    if (buf == NULL)
        return FLPS_ENOMEM;
    memset(&h, 0, sizeof(h));
    h.magic = WAL_MAGIC;
    h.kind = r->kind;
    h.part = r->part;
    h.n = r->n;
    h.rank = r->rank;
    h.iter = r->iter;
    h.version = r->version;
    p = buf;
    memcpy(p, &h, sizeof(h));
    p += sizeof(h);
    if (r->kind == WAL_ADD_SPARSE) {
        memcpy(p, r->idx, (size_t)r->n * 4);
        p += (size_t)r->n * 4;
    }
    memcpy(p, r->val, (size_t)r->n * 4);
    p += (size_t)r->n * 4;
    crc = crc32(0L, buf, (uInt)(sizeof(h) + plen));
    crc32v = (uint32_t)crc;
    memcpy(p, &crc32v, 4);
    /* One write per record: a crash leaves at most one torn record. */
    rc = write_all(fd, buf, total, "write-ahead log");
    flps_free(buf);
    if (rc == FLPS_OK && do_fsync && fdatasync(fd) != 0) {
        log_error("cannot fsync write-ahead log: %s", strerror(errno));
        rc = FLPS_EIO;
    }
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

flps_err wal_replay(const char *path, wal_replay_fn fn, void *arg,
                    uint64_t *nrecords)
{
    unsigned char *data = NULL;
    size_t len = 0, off = 0;
    int missing;
    uint64_t count = 0;
    flps_err rc = read_file(path, &data, &len, &missing);

    if (rc != FLPS_OK) {
        if (missing) {
            *nrecords = 0;
            return FLPS_OK;
        }
        return rc;
    }
    while (off + sizeof(wal_disk) + 4 <= len) {
        wal_disk h;
        wal_record r;
        size_t plen, total;
        uint32_t crc;

        memcpy(&h, data + off, sizeof(h));
        if (h.magic != WAL_MAGIC ||
            (h.kind != WAL_ADD_SPARSE && h.kind != WAL_ADD_DENSE &&
             h.kind != WAL_SET))
            break;
        plen = (size_t)h.n * (h.kind == WAL_ADD_SPARSE ? 8 : 4);
        total = sizeof(h) + plen + 4;
        if (off + total > len)
            break;
        memcpy(&crc, data + off + sizeof(h) + plen, 4);
        if ((uint32_t)crc32(0L, data + off, (uInt)(sizeof(h) + plen)) != crc)
            break;
        r.kind = h.kind;
        r.part = h.part;
        r.iter = h.iter;
        r.version = h.version;
        r.n = h.n;
        r.rank = h.rank;
        /* The record header is 36 bytes and records are multiples of 4,
         * so the payload is 4-byte aligned in the malloc'd buffer. */
        if (h.kind == WAL_ADD_SPARSE) {
            r.idx = (const uint32_t *)(data + off + sizeof(h));
            r.val = (const float *)(data + off + sizeof(h) + (size_t)h.n * 4);
        } else {
            r.idx = NULL;
            r.val = (const float *)(data + off + sizeof(h));
        }
        rc = fn(arg, &r);
        if (rc != FLPS_OK)
            break;
        count++;
        off += total;
    }
    if (rc == FLPS_OK && off != len)
        log_warn("write-ahead log %s: ignoring %zu bytes of torn or corrupt "
                 "tail (never acknowledged)",
                 path, len - off);
    flps_free(data);
    *nrecords = count;
    return rc;
}

/* ---- checkpoints ----
 * Layout: "FLPSCKP1", u32 metalen, meta, u32 nparts, then per part
 * u32 id, u32 numel, u64 version, u64 iter, f32[numel], u32 nranks,
 * u64[nranks] (async: each rank's next iteration); finally the CRC-32
 * of everything before it. */

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

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (w.fd < 0) {
        log_error("cannot create checkpoint %s: %s", tmp, strerror(errno));
        return FLPS_EIO;
    }
    w.crc = crc32(0L, Z_NULL, 0);
    w.rc = FLPS_OK;
    cw_put(&w, CKPT_MAGIC, 8);
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

flps_err ckpt_read(const char *path, void **meta, size_t *metalen,
                   ckpt_part_fn fn, void *arg, int *missing)
{
    unsigned char *data = NULL;
    size_t len = 0, off;
    uint32_t mlen, nparts, crc;
    void *m = NULL;
    flps_err rc = read_file(path, &data, &len, missing);

    if (rc != FLPS_OK)
        return rc;
    rc = FLPS_EPROTO;
    if (len < 8 + 4 + 4 + 4 || memcmp(data, CKPT_MAGIC, 8) != 0) {
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
        rc = fn(arg, &p);
        flps_free(vals);
        flps_free((void *)p.rank_iters);
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
