/* Durable shard state: the write-ahead log of applied updates and the
 * checkpoint file (a snapshot of every owned part). Internal to ps/. */
#ifndef FLPS_PS_PERSIST_H
#define FLPS_PS_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef enum {
    WAL_ADD_SPARSE = 1, /* w[idx[j]] += val[j] */
    WAL_ADD_DENSE = 2,  /* w[i] += val[i] for all i */
    WAL_SET = 3,        /* w[i] = val[i] (initial values) */
    /* The update of a job with a server optimizer, before it: the replay
     * runs the optimizer's step on it (ps_sopt_step) and applies that. */
    WAL_OPT_SPARSE = 4, /* as WAL_ADD_SPARSE */
    WAL_OPT_DENSE = 5,  /* as WAL_ADD_DENSE */
} wal_kind;

typedef struct wal_record {
    uint8_t kind;
    uint32_t rank; /* async: the worker whose push this was (its
                      duplicate check survives a restore); else 0 */
    uint32_t part;
    uint64_t iter;    /* the iteration open after this record */
    uint64_t version; /* the part's version after this record */
    uint32_t n;
    const uint32_t *idx; /* WAL_ADD_SPARSE only */
    const float *val;
} wal_record;

/* Paths of a shard's files in dir. */
void persist_paths(const char *dir, uint32_t shard, char *ckpt, char *wal,
                   size_t len);

/* Open (create) the log for appending; the new file's directory entry is
 * fsynced. Errors: FLPS_EIO (logged), FLPS_ENOMEM; *fd set only on
 * FLPS_OK. */
flps_err wal_open(const char *path, int *fd);

/* Append one record (one write); fdatasync it if asked. On any error
 * (FLPS_EIO: the write or the fsync failed, e.g. a full disk; FLPS_ENOMEM)
 * the bytes written are cut off again, so the log ends at its last good
 * record, and the caller must not acknowledge the update. If even that cut
 * fails (logged), the log ends in a torn record: the caller must append
 * nothing more (flps stops on FLPS_EIO), and wal_restore cuts it off. */
flps_err wal_append(int fd, const wal_record *r, int do_fsync);

/* Truncate the log (after a checkpoint made it redundant). */
flps_err wal_truncate(int fd);

typedef flps_err (*wal_replay_fn)(void *arg, const wal_record *r);

/* What wal_restore found. */
typedef struct wal_restore_info {
    uint64_t records;         /* intact records replayed */
    uint64_t kept_bytes;      /* the log's length afterwards */
    uint64_t dropped_bytes;   /* bytes after the intact records */
    uint64_t corrupt_at;      /* byte offset of a corrupt record that intact
                                 records follow; UINT64_MAX when none */
    uint64_t records_dropped; /* intact records after corrupt_at, lost */
} wal_restore_info;

/* Cut what follows the intact records off the file (ftruncate + fsync)
 * before returning, so records appended next follow the last good one. */
#define WAL_RESTORE_REPAIR 1u
/* Accept a corrupt record followed by intact ones: replay up to it and
 * (with WAL_RESTORE_REPAIR) cut the log there, losing the records after
 * it, instead of refusing. */
#define WAL_RESTORE_TRUNCATE_AT_CORRUPTION 2u

/* Read the log at path and call fn for every intact record, in order.
 * Records are version 3 (CRC-32C) or version 2 (zlib CRC-32, the format
 * before) in any mix. What follows the last intact record is either
 *  - a torn tail: an incomplete or checksum-failing last record, with no
 *    intact record anywhere after it. An update is acknowledged only once
 *    its record is written whole, so this was never acknowledged; it is
 *    skipped, and cut off with WAL_RESTORE_REPAIR (logged with its offset
 *    and size); or
 *  - a corrupt record followed by intact ones: FLPS_EPROTO with an error
 *    logged naming path and the byte offset, before fn is called at all
 *    and with the file untouched, unless flags has
 *    WAL_RESTORE_TRUNCATE_AT_CORRUPTION.
 * A record of a version this flps does not read (1, or 4 and up) gives
 * FLPS_EPROTO, logged with its version and offset, whatever the flags.
 * A missing file replays nothing. fn's error stops the replay, is
 * returned, and leaves the file untouched. *info is written on FLPS_OK. */
flps_err wal_restore(const char *path, unsigned flags, wal_replay_fn fn,
                     void *arg, wal_restore_info *info);

/* wal_restore without flags (reads only), giving the record count. */
flps_err wal_replay(const char *path, wal_replay_fn fn, void *arg,
                    uint64_t *nrecords);

/* One part in a checkpoint. */
typedef struct ckpt_part {
    uint32_t id;
    uint32_t numel;
    uint64_t version;
    uint64_t iter;
    const float *values;
    uint32_t nranks;            /* entries in rank_iters (0: none) */
    const uint64_t *rank_iters; /* async: per rank, next iteration */
    uint32_t nstate;            /* floats of server-optimizer state per
                                   element (0: none) */
    const float *state;         /* nstate * numel, or NULL */
} ckpt_part;

/* Write a checkpoint atomically: meta (an opaque header, e.g. the encoded
 * layout) and the parts go to path.tmp, which is fsynced and renamed over
 * path, and the directory fsynced. */
flps_err ckpt_write(const char *path, const void *meta, size_t metalen,
                    const ckpt_part *parts, uint32_t nparts);

/* Read a checkpoint: *meta (caller frees with free()) and, for each part,
 * a call to fn (values borrowed for the call). FLPS_EIO when missing
 * (*missing set to 1), FLPS_EPROTO when corrupt (bad magic/CRC/sizes). */
typedef flps_err (*ckpt_part_fn)(void *arg, const ckpt_part *p);
flps_err ckpt_read(const char *path, void **meta, size_t *metalen,
                   ckpt_part_fn fn, void *arg, int *missing);

#endif
