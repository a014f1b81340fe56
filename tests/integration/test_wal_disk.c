/* A real flps shard's write-ahead log on disk. A log that fills a real
 * disk (a small tmpfs): the shard must refuse, never acknowledge, the
 * update it could not log, and a restore from its files on a bigger disk
 * must hold exactly the acknowledged updates (needs root to mount; skipped
 * otherwise). A log with a corrupt record before intact ones: --restore
 * refuses, naming file and offset, and --restore-truncate-at-corruption
 * cuts it there and says what it dropped. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flps.h"
#include "runcmd.h"
#include "spawn.h"

#define NUMEL 1024 /* one part: 4 KiB of values per logged push */

static char base[64], mnt[128], small_dir[160], big_dir[160];
static int mounted;
static test_shard shard;

static void cleanup(void)
{
    char cmd[256];

    if (shard.pid > 0)
        test_shard_stop(&shard, SIGKILL);
    if (mounted && umount2(mnt, 0) != 0)
        umount2(mnt, MNT_DETACH);
    mounted = 0;
    if (base[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", base);
    }
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out;
    char buf[65536];
    size_t n;

    cr_assert_not_null(in, "%s: %s", from, strerror(errno));
    out = fopen(to, "wb");
    cr_assert_not_null(out, "%s: %s", to, strerror(errno));
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    cr_assert_eq(fclose(out), 0);
}

static flps_client *connect_worker(const char *endpoint, float *data)
{
    const char *servers[1] = {endpoint};
    flps_tensor t = {"w", NUMEL, data};
    flps_client_config cfg;
    flps_client *c = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg.job = "fulldisk";
    cfg.rank = 0;
    cfg.workers = 1;
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.tensors = &t;
    cfg.ntensors = 1;
    cfg.part_size = NUMEL;
    cfg.async = 1;
    cfg.compression = "dense";
    cfg.lr = 1.0;
    cfg.iterations = 1000000;
    cfg.retry_ms = 300;
    cfg.deadline_ms = 5000;
    cr_assert_eq(flps_client_create(&cfg, &c), FLPS_OK, "cannot register");
    return c;
}

Test(wal_disk, a_full_disk_refuses_the_update_and_a_restore_holds_the_acked,
     .fini = cleanup, .timeout = 120)
{
    char log1[200], log2[200], from[256], to[256], want[128];
    const char *args_fill[] = {
        "--job", "fulldisk",         "--shard", "0",       "--shards",
        "1",     "--checkpoint-dir", small_dir, "--fsync", NULL};
    const char *args_restore[] = {
        "--job", "fulldisk",  "--shard",          "0",     "--shards",
        "1",     "--restore", "--checkpoint-dir", big_dir, NULL};
    static float data[NUMEL], grad[NUMEL];
    flps_client *c;
    uint64_t acked = 0, it;
    flps_err rc = FLPS_OK;
    char *text;
    int status;

    if (geteuid() != 0)
        cr_skip_test("needs root to mount a small tmpfs; run the test as "
                     "root to check a real full disk");
    strcpy(base, "/tmp/flps-fulldisk-XXXXXX");
    cr_assert_not_null(mkdtemp(base));
    snprintf(mnt, sizeof(mnt), "%s/small", base);
    snprintf(small_dir, sizeof(small_dir), "%s/ckpt", mnt);
    snprintf(big_dir, sizeof(big_dir), "%s/big", base);
    snprintf(log1, sizeof(log1), "%s/flps-full.log", base);
    snprintf(log2, sizeof(log2), "%s/flps-restored.log", base);
    cr_assert_eq(mkdir(mnt, 0755), 0);
    cr_assert_eq(mkdir(big_dir, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=256k") != 0)
        cr_skip_test("cannot mount a tmpfs here (%s); the full-disk check "
                     "needs CAP_SYS_ADMIN",
                     strerror(errno));
    mounted = 1;

    /* Fill it: each acknowledged push is one logged record. */
    cr_assert_eq(test_shard_start(&shard, log1, args_fill), 0,
                 "flps did not start; see %s", log1);
    c = connect_worker(shard.endpoint, data);
    cr_assert_eq(flps_client_init(c), FLPS_OK, "%s", flps_client_last_error(c));
    for (size_t i = 0; i < NUMEL; i++)
        grad[i] = 1.0f;
    for (it = 0; it < 10000; it++) {
        rc = flps_client_push(c, 0, grad, it);
        if (rc == FLPS_OK)
            rc = flps_client_wait(c, it);
        if (rc != FLPS_OK)
            break;
        acked++;
    }
    cr_assert_neq(rc, FLPS_OK, "the 256 KiB disk never filled");
    cr_assert_gt(acked, 10);
    cr_log_info("%llu pushes acknowledged before the disk was full: %s",
                (unsigned long long)acked, flps_client_last_error(c));
    flps_client_destroy(c);
    /* The shard stopped rather than carry on without a durable log. */
    cr_assert_eq(waitpid(shard.pid, &status, 0), shard.pid);
    shard.pid = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1,
              "flps should exit with status 1, got %d", status);
    text = slurp(log1);
    cr_assert_not_null(strstr(text, "No space left on device"), "%s", text);
    cr_assert_not_null(
        strstr(text, "stopping: the shard cannot keep its state durable"), "%s",
        text);
    free(text);

    /* Move the files to a bigger disk and restore there. */
    snprintf(from, sizeof(from), "%s/shard-0.ckpt", small_dir);
    snprintf(to, sizeof(to), "%s/shard-0.ckpt", big_dir);
    copy_file(from, to);
    snprintf(from, sizeof(from), "%s/shard-0.wal", small_dir);
    snprintf(to, sizeof(to), "%s/shard-0.wal", big_dir);
    copy_file(from, to);
    cr_assert_eq(umount2(mnt, 0), 0, "umount %s: %s", mnt, strerror(errno));
    mounted = 0;

    cr_assert_eq(test_shard_start(&shard, log2, args_restore), 0,
                 "restored flps did not start; see %s", log2);
    for (size_t i = 0; i < NUMEL; i++)
        data[i] = -999.0f; /* the pull must overwrite every element */
    c = connect_worker(shard.endpoint, data);
    cr_assert_eq(flps_client_init(c), FLPS_OK, "%s", flps_client_last_error(c));
    /* Initial values 0, each acknowledged push -(lr/W) * 1 = -1: exact in
     * float. The refused push is not there, none is there twice. */
    for (size_t i = 0; i < NUMEL; i++)
        cr_assert_eq(data[i], -(float)acked,
                     "element %zu: %g after %llu acknowledged pushes", i,
                     (double)data[i], (unsigned long long)acked);
    flps_client_destroy(c);
    test_shard_stop(&shard, SIGTERM);
    text = slurp(log2);
    snprintf(want, sizeof(want), "and %llu log records",
             (unsigned long long)acked + 1); /* + the initial values */
    cr_assert_not_null(strstr(text, want), "%s", text);
    free(text);
}

static char cdir[64];
static test_shard cshard;

static void corrupt_cleanup(void)
{
    char cmd[128];

    if (cshard.pid > 0)
        test_shard_stop(&cshard, SIGKILL);
    if (cdir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", cdir);
    }
}

static off_t size_of(const char *path)
{
    struct stat st;

    cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
    return st.st_size;
}

Test(wal_disk, restore_refuses_a_corrupt_log_unless_told_to_cut_it,
     .fini = corrupt_cleanup, .timeout = 120)
{
    /* Records: the initial values, then one per push; each is a 36-byte
     * header, NUMEL floats and a 4-byte CRC. */
    const off_t rec = 36 + NUMEL * 4 + 4;
    char ckdir[128], wal[200], log1[128], log2[128], log3[128], want[512];
#define SHARD_ARGS "--job", "fulldisk", "--shard", "0", "--shards", "1"
    const char *first[] = {SHARD_ARGS, "--checkpoint-dir", ckdir, NULL};
    const char *restore[] = {SHARD_ARGS, "--restore", "--checkpoint-dir", ckdir,
                             NULL};
    const char *cut[] = {
        SHARD_ARGS,         "--restore", "--restore-truncate-at-corruption",
        "--checkpoint-dir", ckdir,       NULL};
#undef SHARD_ARGS
    static float data[NUMEL], grad[NUMEL];
    flps_client *c;
    run_result r;
    char *text;
    int status;
    FILE *f;

    strcpy(cdir, "/tmp/flps-corrupt-XXXXXX");
    cr_assert_not_null(mkdtemp(cdir));
    snprintf(ckdir, sizeof(ckdir), "%s/ckpt", cdir);
    snprintf(wal, sizeof(wal), "%s/shard-0.wal", ckdir);
    snprintf(log1, sizeof(log1), "%s/first.log", cdir);
    snprintf(log2, sizeof(log2), "%s/refused.log", cdir);
    snprintf(log3, sizeof(log3), "%s/cut.log", cdir);

    /* Three acknowledged pushes, then a crash. */
    cr_assert_eq(test_shard_start(&cshard, log1, first), 0);
    c = connect_worker(cshard.endpoint, data);
    cr_assert_eq(flps_client_init(c), FLPS_OK);
    for (size_t i = 0; i < NUMEL; i++)
        grad[i] = 1.0f;
    for (uint64_t it = 0; it < 3; it++) {
        cr_assert_eq(flps_client_push(c, 0, grad, it), FLPS_OK);
        cr_assert_eq(flps_client_wait(c, it), FLPS_OK);
    }
    flps_client_destroy(c);
    test_shard_stop(&cshard, SIGKILL);
    cr_assert_eq(size_of(wal), 4 * rec);

    /* Damage a value of the first push's record: two intact ones follow. */
    f = fopen(wal, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, rec + 40, SEEK_SET), 0);
    cr_assert_eq(fputc(0x55, f), 0x55);
    cr_assert_eq(fclose(f), 0);

    cr_assert_eq(test_shard_start(&cshard, log2, restore), -1,
                 "flps must not start on a log with a corrupt record");
    cr_assert_eq(waitpid(cshard.pid, &status, 0), cshard.pid);
    cshard.pid = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d",
              status);
    text = slurp(log2);
    snprintf(want, sizeof(want),
             "write-ahead log %s: corrupt record at byte offset %lld, "
             "followed by 2 intact records from byte offset %lld",
             wal, (long long)rec, (long long)(2 * rec));
    cr_assert_not_null(strstr(text, want), "%s", text);
    cr_assert_not_null(strstr(text, "--restore-truncate-at-corruption"), "%s",
                       text);
    free(text);
    cr_assert_eq(size_of(wal), 4 * rec, "a refused restore changes nothing");

    /* The operator accepts the loss: the log is cut at the corrupt record
     * and the shard holds the initial values only. */
    cr_assert_eq(test_shard_start(&cshard, log3, cut), 0, "see %s", log3);
    text = slurp(log3);
    snprintf(want, sizeof(want),
             "cut the log at the corrupt record at byte offset %lld, "
             "dropping %lld bytes (2 intact records after it are lost)",
             (long long)rec, (long long)(3 * rec));
    cr_assert_not_null(strstr(text, want), "%s", text);
    free(text);
    cr_assert_eq(size_of(wal), rec);
    for (size_t i = 0; i < NUMEL; i++)
        data[i] = -999.0f;
    c = connect_worker(cshard.endpoint, data);
    cr_assert_eq(flps_client_init(c), FLPS_OK);
    for (size_t i = 0; i < NUMEL; i++)
        cr_assert_eq(data[i], 0.0f, "element %zu: %g", i, (double)data[i]);
    flps_client_destroy(c);
    test_shard_stop(&cshard, SIGTERM);

    /* The flag means nothing without --restore: said, exit 2. */
    snprintf(want, sizeof(want),
             "%s/flps --job x --shard 0 --shards 1 --checkpoint-dir %s "
             "--restore-truncate-at-corruption",
             FLPS_BIN_DIR, ckdir);
    run_cmd(want, &r);
    cr_assert_eq(r.status, 2);
    cr_assert_not_null(
        strstr(r.err, "--restore-truncate-at-corruption only applies with "
                      "--restore"),
        "%s", r.err);
    run_free(&r);
}
