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

/* Open (create) the log for appending. */
flps_err wal_open(const char *path, int *fd);

/* Append one record (one write); fsync it if asked. A failed write leaves
 * a torn tail that replay ignores, and the caller must not acknowledge. */
flps_err wal_append(int fd, const wal_record *r, int do_fsync);

/* Truncate the log (after a checkpoint made it redundant). */
flps_err wal_truncate(int fd);

/* Call fn for every intact record of the log at path, in order; stops
 * quietly at a torn or corrupt tail (never acknowledged). A missing file
 * replays nothing. */
typedef flps_err (*wal_replay_fn)(void *arg, const wal_record *r);
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
