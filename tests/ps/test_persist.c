/* Tests for ps/persist.c: the write-ahead log and checkpoint files. */
#include "ps/persist.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "common/alloc.h"
#include "ps/crc32c.h"
#include "tests/log_capture.h"

/* ---- helpers ---- */

static char dir[64];
static char path[256];

static void make_dir(void)
{
    strcpy(dir, "/tmp/flps-persist-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/file", dir);
}

static void remove_dir(void)
{
    char p[300];

    unlink(path);
    snprintf(p, sizeof(p), "%s.tmp", path);
    unlink(p);
    rmdir(dir);
}

static off_t file_size(const char *p)
{
    struct stat st;

    cr_assert_eq(stat(p, &st), 0, "%s: %s", p, strerror(errno));
    return st.st_size;
}

static void flip_byte(const char *p, off_t at)
{
    int fd = open(p, O_RDWR);
    unsigned char b;

    cr_assert_geq(fd, 0);
    cr_assert_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

/* Records seen by a replay, copied. */
#define MAXREC 16
typedef struct seen {
    int n;
    int fail_at; /* return FLPS_EPROTO for this record (-1: never) */
    wal_record r[MAXREC];
    uint32_t idx[MAXREC][8];
    float val[MAXREC][8];
} seen;

static flps_err collect(void *arg, const wal_record *r)
{
    seen *s = arg;

    cr_assert_lt(s->n, MAXREC);
    cr_assert_leq(r->n, 8);
    if (s->n == s->fail_at)
        return FLPS_EPROTO;
    s->r[s->n] = *r;
    if (r->kind == WAL_ADD_SPARSE) {
        cr_assert_not_null(r->idx);
        memcpy(s->idx[s->n], r->idx, r->n * sizeof(uint32_t));
    } else {
        cr_assert_null(r->idx);
    }
    cr_assert_eq((uintptr_t)r->val % 4, 0, "values are 4-byte aligned");
    memcpy(s->val[s->n], r->val, r->n * sizeof(float));
    s->n++;
    return FLPS_OK;
}

static const uint32_t sp_idx[3] = {0, 4, 7};
static const float sp_val[3] = {-0.5f, 0.25f, 1e-7f};
static const float dn_val[4] = {1.0f, -2.0f, 3.5f, -0.0f};
static const float set_val[4] = {9.0f, 8.0f, 7.0f, 6.0f};

static wal_record rec(uint8_t kind, uint32_t part, uint64_t iter,
                      uint64_t version)
{
    wal_record r;

    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.part = part;
    r.iter = iter;
    r.version = version;
    if (kind == WAL_ADD_SPARSE) {
        r.n = 3;
        r.idx = sp_idx;
        r.val = sp_val;
    } else {
        r.n = 4;
        r.val = kind == WAL_SET ? set_val : dn_val;
    }
    return r;
}

/* The three kinds, in the order a shard writes them. */
static void write_three(int do_fsync)
{
    int fd = -1;
    wal_record a = rec(WAL_SET, 5, 0, 1);
    wal_record b = rec(WAL_ADD_SPARSE, 5, 1, 2);
    wal_record c = rec(WAL_ADD_DENSE, 9, 12, 40);

    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    cr_assert_eq(wal_append(fd, &a, do_fsync), FLPS_OK);
    cr_assert_eq(wal_append(fd, &b, do_fsync), FLPS_OK);
    cr_assert_eq(wal_append(fd, &c, do_fsync), FLPS_OK);
    close(fd);
}

static void assert_record(const seen *s, int i, const wal_record *want)
{
    const wal_record *r = &s->r[i];

    cr_assert_eq(r->kind, want->kind, "record %d", i);
    cr_assert_eq(r->part, want->part, "record %d", i);
    cr_assert_eq(r->iter, want->iter, "record %d", i);
    cr_assert_eq(r->version, want->version, "record %d", i);
    cr_assert_eq(r->n, want->n, "record %d", i);
    if (want->kind == WAL_ADD_SPARSE)
        cr_assert_eq(memcmp(s->idx[i], want->idx, want->n * 4), 0);
    cr_assert_eq(memcmp(s->val[i], want->val, want->n * 4), 0,
                 "record %d: values bit for bit", i);
}

/* The first n of write_three's records were replayed. */
static void assert_prefix(const seen *s, int n)
{
    wal_record want[3] = {rec(WAL_SET, 5, 0, 1), rec(WAL_ADD_SPARSE, 5, 1, 2),
                          rec(WAL_ADD_DENSE, 9, 12, 40)};

    cr_assert_geq(s->n, n);
    for (int i = 0; i < n; i++)
        assert_record(s, i, &want[i]);
}

/* Exactly the first n of write_three's records were replayed. */
static void assert_first_records(const seen *s, int n)
{
    cr_assert_eq(s->n, n, "replayed %d records, expected %d", s->n, n);
    assert_prefix(s, n);
}

/* ---- write-ahead log ---- */

Test(persist, paths_name_the_shards_files_in_the_directory)
{
    char ck[64], wl[64];

    persist_paths("/var/lib/flps", 3, ck, wl, sizeof(ck));
    cr_assert_str_eq(ck, "/var/lib/flps/shard-3.ckpt");
    cr_assert_str_eq(wl, "/var/lib/flps/shard-3.wal");
}

Test(persist, wal_replays_every_kind_of_record_in_order)
{
    seen s = {.fail_at = -1};
    uint64_t n = 99;

    make_dir();
    write_three(1);
    cr_assert_eq(file_size(path), (36 + 24 + 4) + (36 + 16 + 4) * 2,
                 "36-byte header, payload, 4-byte CRC per record");
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 3);
    assert_first_records(&s, 3);
    remove_dir();
}

Test(persist, wal_append_after_reopening_continues_the_log)
{
    seen s = {.fail_at = -1};
    uint64_t n = 0;
    int fd;
    wal_record d = rec(WAL_ADD_SPARSE, 1, 2, 3);

    make_dir();
    write_three(0);
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    cr_assert_eq(wal_append(fd, &d, 0), FLPS_OK);
    close(fd);
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 4);
    assert_prefix(&s, 3);
    assert_record(&s, 3, &d);
    remove_dir();
}

/* Also with no arrays at all, as an empty sparse push reaches the log
 * (found by fuzz_shard under UBSan: memcpy from NULL, undefined even for
 * 0 bytes; the sanitizer stage fails this test on the old code). */
Test(persist, wal_record_with_no_elements_round_trips)
{
    seen s = {.fail_at = -1};
    uint64_t n = 0;
    int fd;
    wal_record e;

    make_dir();
    memset(&e, 0, sizeof(e));
    e.kind = WAL_ADD_SPARSE;
    e.part = 2;
    e.iter = 8;
    e.version = 8;
    e.n = 0;
    e.idx = sp_idx;
    e.val = sp_val;
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    cr_assert_eq(wal_append(fd, &e, 0), FLPS_OK);
    e.idx = NULL;
    e.val = NULL;
    e.version = 9;
    cr_assert_eq(wal_append(fd, &e, 0), FLPS_OK);
    e.kind = WAL_ADD_DENSE;
    e.version = 10;
    cr_assert_eq(wal_append(fd, &e, 0), FLPS_OK);
    close(fd);
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 3);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(s.r[k].n, 0);
        cr_assert_eq(s.r[k].version, 8 + (uint64_t)k);
    }
    remove_dir();
}

Test(persist, wal_replay_ignores_a_torn_tail)
{
    off_t full;

    make_dir();
    write_three(0);
    full = file_size(path);
    /* Cut the last record anywhere: inside the CRC, the payload, the
     * header, or leaving a single byte of it. */
    for (off_t cut = 1; cut < 36 + 16 + 4; cut += 3) {
        seen s = {.fail_at = -1};
        uint64_t n = 99;
        unlink(path); /* write_three appends: start from scratch */
        write_three(0);
        cr_assert_eq(truncate(path, full - cut), 0);
        cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK,
                     "cut %lld bytes", (long long)cut);
        cr_assert_eq(n, 2, "cut %lld bytes", (long long)cut);
        assert_first_records(&s, 2);
    }
    remove_dir();
}

static void read_all(const char *p, unsigned char *buf, size_t len)
{
    int fd = open(p, O_RDONLY);

    cr_assert_geq(fd, 0);
    cr_assert_eq(read(fd, buf, len), (ssize_t)len);
    close(fd);
}

Test(persist, wal_replay_refuses_a_bad_crc_record_with_intact_records_after)
{
    seen s = {.fail_at = -1};
    uint64_t n = 99;
    const off_t second = 36 + 16 + 4; /* after the SET */
    unsigned char before[256], after[256];
    off_t size;
    char want[600];

    make_dir();
    write_three(0);
    flip_byte(path, second + 36 + 2); /* a value byte of record 2 */
    size = file_size(path);
    read_all(path, before, (size_t)size);
    test_log_begin();
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_EPROTO,
                 "an intact record follows the corrupt one");
    test_log_end();
    cr_assert_eq(n, 99, "no count on error");
    cr_assert_eq(s.n, 0, "nothing replayed: the log is checked first");
    snprintf(want, sizeof(want),
             "write-ahead log %s: corrupt record at byte offset %lld", path,
             (long long)second);
    cr_assert_not_null(strstr(test_logged, want), "test_logged: %s",
                       test_logged);
    cr_assert_not_null(strstr(test_logged, "--restore-truncate-at-corruption"),
                       "says what to do: %s", test_logged);
    cr_assert_eq(file_size(path), size, "the file is untouched");
    read_all(path, after, (size_t)size);
    cr_assert_eq(memcmp(before, after, (size_t)size), 0);
    remove_dir();
}

Test(persist, wal_replay_refuses_a_bad_magic_or_kind_with_records_after)
{
    const off_t second = 36 + 16 + 4; /* after the SET */

    make_dir();
    for (int field = 0; field < 2; field++) {
        seen s = {.fail_at = -1};
        uint64_t n = 99;
        unlink(path);
        write_three(0);
        flip_byte(path, second + (field == 0 ? 0 : 4)); /* magic, kind */
        cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_EPROTO);
        cr_assert_eq(s.n, 0);
    }
    remove_dir();
}

Test(persist, wal_replay_treats_a_bad_crc_last_record_as_a_torn_tail)
{
    seen s = {.fail_at = -1};
    uint64_t n = 99;
    off_t size;

    make_dir();
    write_three(0);
    size = file_size(path);
    flip_byte(path, size - 6); /* a value byte of the last record */
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 2);
    assert_first_records(&s, 2);
    cr_assert_eq(file_size(path), size, "a plain replay only reads");
    remove_dir();
}

Test(persist, wal_restore_cuts_a_torn_tail_so_new_records_follow_the_last)
{
    const off_t two = (36 + 24 + 4) + (36 + 16 + 4);
    wal_record d = rec(WAL_ADD_SPARSE, 5, 2, 3);
    wal_restore_info info;
    char want[600];
    int fd;

    make_dir();
    /* Cut the last record anywhere, as a crash in its write does. */
    for (off_t keep = 1; keep < 36 + 16 + 4; keep += 5) {
        seen s = {.fail_at = -1}, again = {.fail_at = -1};
        uint64_t n = 0;
        unlink(path);
        write_three(0);
        cr_assert_eq(truncate(path, two + keep), 0);
        test_log_begin();
        cr_assert_eq(wal_restore(path, WAL_RESTORE_REPAIR, collect, &s, &info),
                     FLPS_OK);
        test_log_end();
        cr_assert_eq(info.records, 2, "kept %lld", (long long)keep);
        cr_assert_eq(info.kept_bytes, (uint64_t)two);
        cr_assert_eq(info.dropped_bytes, (uint64_t)keep);
        cr_assert_eq(info.corrupt_at, UINT64_MAX);
        assert_first_records(&s, 2);
        cr_assert_eq(file_size(path), two, "the torn tail is cut off");
        snprintf(want, sizeof(want),
                 "cut a torn last record at byte offset %lld (%lld bytes",
                 (long long)two, (long long)keep);
        cr_assert_not_null(strstr(test_logged, want), "test_logged: %s",
                           test_logged);

        /* An acknowledged append, then a second restore: all of it. */
        cr_assert_eq(wal_open(path, &fd), FLPS_OK);
        cr_assert_eq(wal_append(fd, &d, 1), FLPS_OK);
        close(fd);
        cr_assert_eq(wal_replay(path, collect, &again, &n), FLPS_OK);
        cr_assert_eq(n, 3);
        assert_prefix(&again, 2);
        assert_record(&again, 2, &d);
    }
    remove_dir();
}

Test(persist, wal_restore_with_the_flag_cuts_at_a_corrupt_record_and_reports)
{
    const off_t second = 36 + 16 + 4; /* after the SET */
    wal_restore_info info;
    seen s = {.fail_at = -1};
    uint64_t n = 0;
    wal_record d = rec(WAL_ADD_DENSE, 9, 13, 41);
    off_t size;
    char want[600];
    int fd;

    make_dir();
    write_three(0);
    size = file_size(path);
    flip_byte(path, second + 36 + 2);
    cr_assert_eq(wal_restore(path, WAL_RESTORE_REPAIR, collect, &s, &info),
                 FLPS_EPROTO, "the repair alone does not accept the loss");
    cr_assert_eq(s.n, 0);
    cr_assert_eq(file_size(path), size);

    test_log_begin();
    cr_assert_eq(
        wal_restore(path,
                    WAL_RESTORE_REPAIR | WAL_RESTORE_TRUNCATE_AT_CORRUPTION,
                    collect, &s, &info),
        FLPS_OK);
    test_log_end();
    cr_assert_eq(info.records, 1);
    cr_assert_eq(info.corrupt_at, (uint64_t)second);
    cr_assert_eq(info.records_dropped, 1, "the intact third record is lost");
    cr_assert_eq(info.dropped_bytes, (uint64_t)(size - second));
    cr_assert_eq(info.kept_bytes, (uint64_t)second);
    assert_first_records(&s, 1);
    cr_assert_eq(file_size(path), second);
    snprintf(want, sizeof(want),
             "cut the log at the corrupt record at byte offset %lld, "
             "dropping %lld bytes (1 intact records after it are lost)",
             (long long)second, (long long)(size - second));
    cr_assert_not_null(strstr(test_logged, want), "test_logged: %s",
                       test_logged);

    /* What is appended next is found by the next restore. */
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    cr_assert_eq(wal_append(fd, &d, 0), FLPS_OK);
    close(fd);
    memset(&s, 0, sizeof(s));
    s.fail_at = -1;
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 2);
    assert_prefix(&s, 1);
    assert_record(&s, 1, &d);
    remove_dir();
}

Test(persist, wal_restore_refuses_records_appended_behind_a_torn_one)
{
    /* The log issue 12 found: a torn record with acknowledged records
     * appended behind it by an older flps. Found at any length of the torn
     * piece, and refused: those records were acknowledged. */
    const off_t one = 36 + 16 + 4;
    wal_record c = rec(WAL_ADD_DENSE, 9, 12, 40);

    make_dir();
    for (off_t piece = 1; piece < 36 + 24 + 4; piece += 7) {
        seen s = {.fail_at = -1};
        wal_restore_info info;
        int fd;
        unlink(path);
        write_three(0);
        /* Keep record 1, a piece of record 2, then record 3 again. */
        cr_assert_eq(truncate(path, one + piece), 0);
        cr_assert_eq(wal_open(path, &fd), FLPS_OK);
        cr_assert_eq(wal_append(fd, &c, 0), FLPS_OK);
        close(fd);
        test_log_begin();
        cr_assert_eq(wal_restore(path, WAL_RESTORE_REPAIR, collect, &s, &info),
                     FLPS_EPROTO, "piece of %lld bytes", (long long)piece);
        test_log_end();
        cr_assert_eq(s.n, 0);
        cr_assert_not_null(strstr(test_logged,
                                  "corrupt record at byte offset 56, "
                                  "followed by 1 intact records"),
                           "test_logged: %s", test_logged);
        cr_assert_eq(file_size(path), one + piece + 36 + 16 + 4);
    }
    remove_dir();
}

Test(persist, wal_append_writes_version_3_records_with_a_crc32c)
{
    wal_record a = rec(WAL_SET, 5, 0, 1);
    unsigned char buf[36 + 16 + 4];
    uint32_t magic, crc;
    int fd;

    make_dir();
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    cr_assert_eq(wal_append(fd, &a, 0), FLPS_OK);
    close(fd);
    cr_assert_eq(file_size(path), sizeof(buf));
    read_all(path, buf, sizeof(buf));
    memcpy(&magic, buf, 4);
    memcpy(&crc, buf + 36 + 16, 4);
    cr_assert_eq(memcmp(buf, "FWR3", 4), 0, "magic %08x", magic);
    cr_assert_eq(crc, crc32c_update(0, buf, 36 + 16));
    remove_dir();
}

/* A version 2 record (the format before CRC-32C) as an older flps wrote
 * it: same header and sizes, magic "FWR2", zlib's CRC-32. */
static void append_v2(const wal_record *r)
{
    unsigned char buf[36 + 8 * 8 + 4];
    size_t plen = (size_t)r->n * (r->kind == WAL_ADD_SPARSE ? 8 : 4);
    uint32_t u32, crc;
    int fd;

    cr_assert_leq(plen, 64);
    memset(buf, 0, 36);
    memcpy(buf, "FWR2", 4);
    buf[4] = r->kind;
    memcpy(buf + 8, &r->part, 4);
    memcpy(buf + 12, &r->n, 4);
    u32 = r->rank;
    memcpy(buf + 16, &u32, 4);
    memcpy(buf + 20, &r->iter, 8);
    memcpy(buf + 28, &r->version, 8);
    if (r->kind == WAL_ADD_SPARSE) {
        memcpy(buf + 36, r->idx, (size_t)r->n * 4);
        memcpy(buf + 36 + (size_t)r->n * 4, r->val, (size_t)r->n * 4);
    } else {
        memcpy(buf + 36, r->val, (size_t)r->n * 4);
    }
    crc = (uint32_t)crc32(0L, buf, (uInt)(36 + plen));
    memcpy(buf + 36 + plen, &crc, 4);
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, buf, 36 + plen + 4), (ssize_t)(36 + plen + 4));
    close(fd);
}

Test(persist, wal_replay_reads_version_2_records_and_new_ones_after_them)
{
    seen s = {.fail_at = -1};
    uint64_t n = 0;
    wal_record a = rec(WAL_SET, 5, 0, 1), b = rec(WAL_ADD_SPARSE, 5, 1, 2);
    wal_record c = rec(WAL_ADD_DENSE, 9, 12, 40);
    int fd;

    make_dir();
    append_v2(&a);
    append_v2(&b);
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    cr_assert_eq(wal_append(fd, &c, 0), FLPS_OK);
    close(fd);
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 3);
    assert_first_records(&s, 3);

    /* A corrupt version 2 record is found like a version 3 one. */
    flip_byte(path, 36 + 2);
    memset(&s, 0, sizeof(s));
    s.fail_at = -1;
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_EPROTO);
    remove_dir();
}

Test(persist, wal_restore_refuses_a_log_format_it_does_not_read)
{
    /* A version 1 log ("FWLR"), or one from a newer flps, is no torn tail:
     * cutting it off would drop every update in it. */
    static const char *const magic[] = {"FWLR", "FWR4"};
    static const char *const says[] = {"format version 1,",
                                       "format version 4,"};

    make_dir();
    for (int i = 0; i < 2; i++) {
        unsigned char rec1[64];
        seen s = {.fail_at = -1};
        wal_restore_info info;
        char want[600];
        int fd;

        memset(rec1, 0x11, sizeof(rec1));
        memcpy(rec1, magic[i], 4);
        unlink(path);
        write_three(0);
        fd = open(path, O_WRONLY | O_APPEND);
        cr_assert_geq(fd, 0);
        cr_assert_eq(write(fd, rec1, sizeof(rec1)), (ssize_t)sizeof(rec1));
        close(fd);
        test_log_begin();
        cr_assert_eq(
            wal_restore(path,
                        WAL_RESTORE_REPAIR | WAL_RESTORE_TRUNCATE_AT_CORRUPTION,
                        collect, &s, &info),
            FLPS_EPROTO, "%s", magic[i]);
        test_log_end();
        cr_assert_eq(s.n, 0);
        cr_assert_eq(file_size(path), 176 + 64, "nothing cut");
        snprintf(want, sizeof(want),
                 "write-ahead log %s: the record at byte offset 176 is in %s",
                 path, says[i]);
        cr_assert_not_null(strstr(test_logged, want), "test_logged: %s",
                           test_logged);
    }
    remove_dir();
}

Test(persist, a_failed_append_leaves_the_log_at_its_last_good_record)
{
    /* A file size limit makes the kernel write part of the record and
     * fail the rest (EFBIG), as a full disk does (ENOSPC): the part must
     * not stay, or the next good record would land behind it. */
    const off_t three = (36 + 24 + 4) + (36 + 16 + 4) * 2;
    wal_record a = rec(WAL_SET, 5, 0, 1), d = rec(WAL_ADD_DENSE, 9, 13, 41);
    struct rlimit lim = {.rlim_cur = (rlim_t)three + 20,
                         .rlim_max = RLIM_INFINITY};
    seen s = {.fail_at = -1};
    uint64_t n = 0;
    int fd;

    make_dir();
    write_three(0);
    signal(SIGXFSZ, SIG_IGN);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    cr_assert_eq(wal_append(fd, &a, 1), FLPS_EIO);
    cr_assert_eq(file_size(path), three, "the 20 bytes written are cut off");
    lim.rlim_cur = RLIM_INFINITY;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    cr_assert_eq(wal_append(fd, &d, 1), FLPS_OK);
    close(fd);
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 4, "the record after the failed one is found");
    assert_prefix(&s, 3);
    assert_record(&s, 3, &d);
    remove_dir();
}

Test(persist, wal_replay_returns_the_callbacks_error_and_stops)
{
    seen s = {.fail_at = 1};
    uint64_t n = 99;

    make_dir();
    write_three(0);
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_EPROTO);
    cr_assert_eq(s.n, 1);
    remove_dir();
}

Test(persist, wal_replay_of_a_missing_or_empty_log_replays_nothing)
{
    seen s = {.fail_at = -1};
    uint64_t n = 99;
    int fd;

    make_dir();
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    close(fd);
    n = 99;
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(s.n, 0);
    remove_dir();
}

Test(persist, wal_truncate_empties_the_log_and_appends_start_over)
{
    seen s = {.fail_at = -1};
    uint64_t n = 99;
    int fd;
    wal_record d = rec(WAL_ADD_DENSE, 9, 13, 41);

    make_dir();
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    for (int i = 0; i < 3; i++) {
        wal_record r = rec(WAL_SET, 1, 0, 1);
        cr_assert_eq(wal_append(fd, &r, 0), FLPS_OK);
    }
    cr_assert_eq(wal_truncate(fd), FLPS_OK);
    cr_assert_eq(file_size(path), 0);
    cr_assert_eq(wal_append(fd, &d, 1), FLPS_OK);
    close(fd);
    cr_assert_eq(file_size(path), 36 + 16 + 4, "no hole before the record");
    cr_assert_eq(wal_replay(path, collect, &s, &n), FLPS_OK);
    cr_assert_eq(n, 1);
    assert_record(&s, 0, &d);
    remove_dir();
}

Test(persist, wal_open_fails_with_eio_in_a_missing_directory)
{
    int fd = -7;

    cr_assert_eq(wal_open("/nonexistent-flps-dir/shard-0.wal", &fd), FLPS_EIO);
    cr_assert_eq(fd, -7, "fd untouched on error");
}

Test(persist, wal_append_fails_cleanly_when_out_of_memory)
{
    int fd;
    wal_record r = rec(WAL_SET, 1, 0, 1);

    make_dir();
    cr_assert_eq(wal_open(path, &fd), FLPS_OK);
    flps_alloc_fail_at(1);
    cr_assert_eq(wal_append(fd, &r, 0), FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    close(fd);
    cr_assert_eq(file_size(path), 0, "nothing written");
    remove_dir();
}

/* ---- checkpoints ---- */

#define MAXPART 4
typedef struct parts_seen {
    uint32_t n;
    int fail_at;
    ckpt_part p[MAXPART];
    float vals[MAXPART][16];
} parts_seen;

static flps_err collect_part(void *arg, const ckpt_part *p)
{
    parts_seen *s = arg;

    cr_assert_lt(s->n, MAXPART);
    cr_assert_leq(p->numel, 16);
    if ((int)s->n == s->fail_at)
        return FLPS_ELAYOUT;
    s->p[s->n] = *p;
    memcpy(s->vals[s->n], p->values, p->numel * sizeof(float));
    s->p[s->n].values = s->vals[s->n];
    s->n++;
    return FLPS_OK;
}

static const float v0[5] = {1.5f, -2.25f, 0.0f, 1e-38f, 3e38f};
static const float v1[1] = {-7.0f};
static const float v2[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                             9, 10, 11, 12, 13, 14, 15, 16};
static const char meta_text[] = "layout and config, opaque to persist";

static void write_ckpt(void)
{
    ckpt_part parts[3] = {
        {2, 5, 17, 16, v0, 0, NULL, 0, NULL},
        {5, 1, 1, 0, v1, 0, NULL, 0, NULL},
        {9, 16, UINT64_MAX, 123456789012345ull, v2, 0, NULL, 0, NULL},
    };

    cr_assert_eq(ckpt_write(path, meta_text, sizeof(meta_text), parts, 3),
                 FLPS_OK);
}

static long ckpt_size(void)
{
    /* magic, meta, part count, per part 24 bytes of header, the values
     * and a rank count (0 here), CRC */
    return 8 + 4 + (long)sizeof(meta_text) + 4 + 3 * (24 + 4) +
           (5 + 1 + 16) * 4 + 4;
}

Test(persist, checkpoint_round_trips_meta_and_every_part)
{
    parts_seen s = {.fail_at = -1};
    void *meta = NULL;
    size_t metalen = 0;
    int missing = 7;
    const float *want[3] = {v0, v1, v2};
    const uint32_t ids[3] = {2, 5, 9}, numel[3] = {5, 1, 16};
    const uint64_t vers[3] = {17, 1, UINT64_MAX},
                   iters[3] = {16, 0, 123456789012345ull};

    make_dir();
    write_ckpt();
    cr_assert_eq(file_size(path), ckpt_size());
    cr_assert_eq(ckpt_read(path, &meta, &metalen, collect_part, &s, &missing),
                 FLPS_OK);
    cr_assert_eq(missing, 0);
    cr_assert_eq(metalen, sizeof(meta_text));
    cr_assert_eq(memcmp(meta, meta_text, metalen), 0);
    cr_assert_eq(s.n, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(s.p[i].id, ids[i]);
        cr_assert_eq(s.p[i].numel, numel[i]);
        cr_assert_eq(s.p[i].version, vers[i]);
        cr_assert_eq(s.p[i].iter, iters[i]);
        cr_assert_eq(memcmp(s.vals[i], want[i], numel[i] * 4), 0,
                     "part %d values bit for bit", i);
    }
    free(meta);
    remove_dir();
}

Test(persist, checkpoint_with_no_parts_and_empty_meta_round_trips)
{
    parts_seen s = {.fail_at = -1};
    void *meta = NULL;
    size_t metalen = 99;
    int missing = 7;

    make_dir();
    cr_assert_eq(ckpt_write(path, "", 0, NULL, 0), FLPS_OK);
    cr_assert_eq(ckpt_read(path, &meta, &metalen, collect_part, &s, &missing),
                 FLPS_OK);
    cr_assert_eq(metalen, 0);
    cr_assert_not_null(meta);
    cr_assert_eq(s.n, 0);
    free(meta);
    remove_dir();
}

Test(persist, checkpoint_write_leaves_no_temporary_file_behind)
{
    char tmp[300];

    make_dir();
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    write_ckpt();
    cr_assert_eq(access(tmp, F_OK), -1);
    cr_assert_eq(errno, ENOENT);
    cr_assert_eq(access(path, F_OK), 0);
    remove_dir();
}

Test(persist, checkpoint_write_replaces_the_previous_checkpoint_whole)
{
    parts_seen s = {.fail_at = -1};
    ckpt_part one = {1, 1, 2, 3, v1, 0, NULL, 0, NULL};
    void *meta = NULL;
    size_t metalen = 0;
    int missing;
    char tmp[300];

    make_dir();
    write_ckpt();
    /* A stale temp file from a crash mid-write is overwritten too. */
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    {
        FILE *f = fopen(tmp, "w");
        cr_assert_not_null(f);
        fputs("half a checkpoint from a crash", f);
        fclose(f);
    }
    cr_assert_eq(ckpt_write(path, "m", 1, &one, 1), FLPS_OK);
    cr_assert_eq(access(tmp, F_OK), -1);
    cr_assert_eq(ckpt_read(path, &meta, &metalen, collect_part, &s, &missing),
                 FLPS_OK);
    cr_assert_eq(metalen, 1);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.p[0].id, 1);
    cr_assert_eq(s.vals[0][0], -7.0f);
    free(meta);
    remove_dir();
}

Test(persist, checkpoint_read_reports_a_missing_file)
{
    parts_seen s = {.fail_at = -1};
    void *meta = (void *)&s;
    size_t metalen = 99;
    int missing = 0;

    make_dir();
    cr_assert_eq(ckpt_read(path, &meta, &metalen, collect_part, &s, &missing),
                 FLPS_EIO);
    cr_assert_eq(missing, 1);
    cr_assert_eq(meta, (void *)&s, "meta untouched");
    cr_assert_eq(metalen, 99);
    cr_assert_eq(s.n, 0);
    remove_dir();
}

Test(persist, checkpoint_read_refuses_any_flipped_byte)
{
    long size;

    make_dir();
    write_ckpt();
    size = (long)file_size(path);
    for (long at = 0; at < size; at++) {
        parts_seen s = {.fail_at = -1};
        void *meta = (void *)&s;
        size_t metalen = 99;
        int missing = 7;
        flip_byte(path, at);
        cr_assert_eq(
            ckpt_read(path, &meta, &metalen, collect_part, &s, &missing),
            FLPS_EPROTO, "byte %ld flipped", at);
        cr_assert_eq(missing, 0);
        cr_assert_eq(meta, (void *)&s, "meta untouched");
        cr_assert_eq(s.n, 0, "no part of a corrupt file is handed out");
        flip_byte(path, at); /* restore */
    }
    remove_dir();
}

Test(persist, checkpoint_read_refuses_a_truncated_file)
{
    long size;

    make_dir();
    write_ckpt();
    size = (long)file_size(path);
    for (long len = 0; len < size; len += 7) {
        parts_seen s = {.fail_at = -1};
        void *meta = NULL;
        size_t metalen;
        int missing = 7;
        cr_assert_eq(truncate(path, len), 0);
        cr_assert_eq(
            ckpt_read(path, &meta, &metalen, collect_part, &s, &missing),
            FLPS_EPROTO, "cut to %ld bytes", len);
        cr_assert_eq(missing, 0);
        cr_assert_null(meta);
        unlink(path);
        write_ckpt();
    }
    remove_dir();
}

Test(persist, checkpoint_read_passes_on_the_callbacks_error)
{
    parts_seen s = {.fail_at = 1};
    void *meta = NULL;
    size_t metalen;
    int missing;

    make_dir();
    write_ckpt();
    cr_assert_eq(ckpt_read(path, &meta, &metalen, collect_part, &s, &missing),
                 FLPS_ELAYOUT);
    cr_assert_null(meta);
    cr_assert_eq(s.n, 1);
    remove_dir();
}

Test(persist, checkpoint_write_fails_with_eio_in_a_missing_directory)
{
    ckpt_part one = {1, 1, 2, 3, v1, 0, NULL, 0, NULL};

    cr_assert_eq(
        ckpt_write("/nonexistent-flps-dir/shard-0.ckpt", "m", 1, &one, 1),
        FLPS_EIO);
}

/* More than 3 MiB of values: read_file grows its buffer several times. */
#define BIG_NUMEL (800u * 1024u)

static flps_err check_big_part(void *arg, const ckpt_part *p)
{
    uint32_t *count = arg;

    cr_assert_eq(p->numel, BIG_NUMEL);
    for (uint32_t i = 0; i < p->numel; i++)
        if (p->values[i] != (float)i)
            cr_assert_fail("part %u, value %u is %g", p->id, i,
                           (double)p->values[i]);
    (*count)++;
    return FLPS_OK;
}

Test(persist, checkpoint_larger_than_one_read_round_trips)
{
    float *vals = flps_malloc(BIG_NUMEL * sizeof(float));
    ckpt_part parts[2];
    void *meta = NULL;
    size_t metalen = 0;
    uint32_t count = 0;
    int missing = 7;

    cr_assert_not_null(vals);
    for (uint32_t i = 0; i < BIG_NUMEL; i++)
        vals[i] = (float)i;
    memset(parts, 0, sizeof(parts));
    for (uint32_t i = 0; i < 2; i++) {
        parts[i].id = i;
        parts[i].numel = BIG_NUMEL;
        parts[i].version = 1;
        parts[i].values = vals;
    }
    make_dir();
    cr_assert_eq(ckpt_write(path, "m", 1, parts, 2), FLPS_OK);
    cr_assert_eq(
        ckpt_read(path, &meta, &metalen, check_big_part, &count, &missing),
        FLPS_OK);
    cr_assert_eq(count, 2);
    cr_assert_eq(metalen, 1);
    cr_assert_eq(memcmp(meta, "m", 1), 0);
    free(meta);
    flps_free(vals);
    remove_dir();
}
