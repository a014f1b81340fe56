/* libFuzzer target: the checkpoint and write-ahead-log readers on
 * arbitrary files. The first byte picks the reader and the flags, the rest
 * is the file.
 *  - checkpoint (ckpt_read): accepted parts are readable for their whole
 *    size; a refusal is FLPS_EPROTO (corrupt) and never a crash.
 *  - log (wal_restore with WAL_RESTORE_REPAIR): after a repair the log
 *    reads clean (same records, nothing more to cut, no corruption); a log
 *    refused for a corrupt record before intact ones is left byte for byte
 *    as it was; every record's payload is readable for its size. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps/persist.h"
#include "tests/fuzz/fuzz_quiet.h"

static char path[96];
static volatile float sink;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_persist: %s\n", what);
        abort();
    }
}

static void write_file(const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    check(fd >= 0, "cannot create the input file");
    check(size == 0 || write(fd, data, size) == (ssize_t)size,
          "cannot write the input file");
    close(fd);
}

static uint8_t *read_file(size_t *size)
{
    struct stat st;
    uint8_t *buf;
    int fd = open(path, O_RDONLY);

    check(fd >= 0 && fstat(fd, &st) == 0, "cannot read the file back");
    *size = (size_t)st.st_size;
    buf = malloc(*size + 1);
    check(buf != NULL, "out of memory");
    check(*size == 0 || read(fd, buf, *size) == (ssize_t)*size,
          "cannot read the file back");
    close(fd);
    return buf;
}

static flps_err on_part(void *arg, const ckpt_part *p)
{
    float s = 0;

    (void)arg;
    for (uint32_t i = 0; i < p->numel; i++)
        s += p->values[i];
    for (uint32_t i = 0; i < p->nranks; i++)
        s += (float)p->rank_iters[i];
    sink = s;
    return FLPS_OK;
}

static flps_err on_record(void *arg, const wal_record *r)
{
    float s = 0;

    (void)arg;
    for (uint32_t i = 0; i < r->n; i++) {
        s += r->val[i];
        if (r->kind == WAL_ADD_SPARSE)
            s += (float)r->idx[i];
    }
    sink = s;
    return FLPS_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

    (void)argc;
    (void)argv;
    fuzz_quiet();
    snprintf(path, sizeof(path), "%s/flps-fuzz-persist-%d", base,
             (int)getpid());
    return 0;
}

static void checkpoint(const uint8_t *data, size_t size)
{
    void *meta = NULL;
    size_t metalen = 0;
    int missing = 0;
    flps_err rc;

    write_file(data, size);
    rc = ckpt_read(path, &meta, &metalen, on_part, NULL, &missing);
    check(rc == FLPS_OK || rc == FLPS_EPROTO || rc == FLPS_ENOMEM,
          "a checkpoint refused with an unexpected error");
    check(!missing, "an existing checkpoint reported missing");
    if (rc == FLPS_OK && metalen > 0)
        sink = (float)((const uint8_t *)meta)[metalen - 1];
    free(meta);
}

static void wal(const uint8_t *data, size_t size, unsigned flags)
{
    wal_restore_info a, b;
    flps_err rc;
    uint8_t *after;
    size_t after_len;

    write_file(data, size);
    rc = wal_restore(path, flags | WAL_RESTORE_REPAIR, on_record, NULL, &a);
    after = read_file(&after_len);
    if (rc == FLPS_OK) {
        check(after_len == a.kept_bytes, "the log's length after a repair");
        check(a.kept_bytes + a.dropped_bytes == size,
              "kept and dropped bytes do not add up to the file");
        check(after_len <= size && memcmp(after, data, after_len) == 0,
              "a repair changed bytes it kept");
        check(wal_restore(path, 0, on_record, NULL, &b) == FLPS_OK,
              "a repaired log does not read");
        check(b.records == a.records && b.dropped_bytes == 0 &&
                  b.corrupt_at == UINT64_MAX,
              "a repaired log is not clean");
    } else {
        check(rc == FLPS_EPROTO || rc == FLPS_ENOMEM,
              "a log refused with an unexpected error");
        check(after_len == size && memcmp(after, data, size) == 0,
              "a refused log was changed");
    }
    free(after);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        wal(data + 1, size - 1,
            data[0] & 2 ? WAL_RESTORE_TRUNCATE_AT_CORRUPTION : 0);
    else
        checkpoint(data + 1, size - 1);
    unlink(path);
    return 0;
}
