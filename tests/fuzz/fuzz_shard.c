/* libFuzzer target: message sequences into a fresh shard, with its
 * write-ahead log and checkpoints on, then a crash and a restore.
 *
 * The input is a sequence of messages (tests/fuzz/fuzz_input.h) from up to
 * 256 peers; a message from peer 255 with no frames is not delivered but
 * writes a checkpoint (as the daemon's timer does). After the sequence the
 * shard is dropped without a checkpoint, as a SIGKILL would, and restored
 * from its checkpoint and log. What must hold, besides no crash, no leak
 * and no undefined behaviour:
 *  - every reply the shard sends is a valid wire message;
 *  - the restored shard holds exactly the parts (values bit for bit,
 *    versions) the shard held when it was dropped: nothing acknowledged is
 *    lost and nothing is applied twice. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/persist.h"
#include "ps/shard.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_quiet.h"
#include "tests/support/rx_copy.h"

/* Parts a layout may have in this target: REGISTERs may declare far more,
 * and are refused above the element bound below. */
#define FUZZ_PART_IDS 4096u
#define FUZZ_MAX_ELEMENTS (UINT64_C(1) << 20)

static char dir[64];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_shard: %s\n", what);
        abort();
    }
}

static void on_reply(void *arg, uint32_t peer, const ps_reply *rep)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    proto_msg d;
    char err[256] = "";

    (void)arg;
    (void)peer;
    check(proto_msg_encode(&rep->msg, &hdr, &hlen, f, &nf) == FLPS_OK,
          "the shard made a reply that does not encode");
    if (proto_msg_decode(f, nf, &d, err, sizeof(err)) != FLPS_OK) {
        fprintf(stderr, "fuzz_shard: the shard sent an invalid %s: %s\n",
                proto_op_name(rep->msg.op), err);
        abort();
    }
    proto_msg_fini(&d);
    free(hdr);
}

static void remove_files(void)
{
    char ck[256], wl[256], tmp[300];

    persist_paths(dir, 0, ck, wl, sizeof(ck));
    snprintf(tmp, sizeof(tmp), "%s.tmp", ck);
    unlink(ck);
    unlink(wl);
    unlink(tmp);
}

static flps_err make_shard(int restore, ps_shard **out)
{
    ps_shard_config c;

    memset(&c, 0, sizeof(c));
    c.job = "job";
    c.shard = 0;
    c.nshards = 1;
    c.ckpt_dir = dir;
    c.fsync_wal = 0;
    c.send = on_reply;
    c.max_model_elements = FUZZ_MAX_ELEMENTS;
    c.ckpt_request_interval_s = -1;
    return ps_shard_create(&c, restore, out);
}

/* The parts of s, copied: values, numel, version per part id. */
typedef struct snapshot {
    float *values[FUZZ_PART_IDS];
    uint32_t numel[FUZZ_PART_IDS];
    uint64_t version[FUZZ_PART_IDS];
    int present[FUZZ_PART_IDS];
} snapshot;

static void take(const ps_shard *s, snapshot *sn)
{
    for (uint32_t p = 0; p < FUZZ_PART_IDS; p++) {
        const float *v;
        uint32_t n;
        uint64_t ver, it;

        sn->present[p] = ps_shard_part(s, p, &v, &n, &ver, &it) == FLPS_OK;
        sn->values[p] = NULL;
        if (!sn->present[p])
            continue;
        sn->numel[p] = n;
        sn->version[p] = ver;
        sn->values[p] = malloc((size_t)n * sizeof(float) + 1);
        check(sn->values[p] != NULL, "out of memory in the snapshot");
        memcpy(sn->values[p], v, (size_t)n * sizeof(float));
    }
}

static void drop(snapshot *sn)
{
    for (uint32_t p = 0; p < FUZZ_PART_IDS; p++)
        free(sn->values[p]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

    (void)argc;
    (void)argv;
    fuzz_quiet();
    snprintf(dir, sizeof(dir), "%s/flps-fuzz-shard-XXXXXX", base);
    if (mkdtemp(dir) == NULL) {
        perror("fuzz_shard: mkdtemp");
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static snapshot before, after;
    ps_shard *s = NULL, *r = NULL;
    size_t pos = 0;
    fuzz_msg fm;
    int checkpointed = 0;

    remove_files();
    if (make_shard(0, &s) != FLPS_OK)
        return 0;
    while (fuzz_next(data, size, &pos, &fm)) {
        transport_rx *rx = NULL;

        if (fm.peer == 255 && fm.nframes == 0) {
            checkpointed |= ps_shard_checkpoint(s) == FLPS_OK;
        } else if (fm.nframes > PROTO_MAX_FRAMES) {
            /* What the daemon does with a message the transport refused. */
            ps_shard_refuse(s, fm.peer, FLPS_EPROTO, "too many frames");
        } else if (transport_rx_copy(fm.frames, fm.nframes, fm.peer, &rx) ==
                   FLPS_OK) {
            (void)ps_shard_handle(s, rx);
        }
        fuzz_msg_free(&fm);
    }
    /* Without a checkpoint the log alone does not know the layout, and a
     * restore starts empty: that is the documented behaviour, and there is
     * nothing to compare. A shard whose log failed stops (the daemon
     * exits) and promises nothing. */
    if (!checkpointed || ps_shard_is_broken(s)) {
        ps_shard_destroy(s);
        return 0;
    }
    take(s, &before);
    ps_shard_destroy(s);
    check(make_shard(1, &r) == FLPS_OK,
          "the shard's own checkpoint and log do not restore");
    take(r, &after);
    for (uint32_t p = 0; p < FUZZ_PART_IDS; p++) {
        check(before.present[p] == after.present[p],
              "a part was lost or appeared in the restore");
        if (!before.present[p])
            continue;
        check(before.numel[p] == after.numel[p] &&
                  before.version[p] == after.version[p],
              "a part's size or version changed in the restore");
        check(memcmp(before.values[p], after.values[p],
                     (size_t)before.numel[p] * sizeof(float)) == 0,
              "a part's values changed in the restore");
    }
    drop(&before);
    drop(&after);
    ps_shard_destroy(r);
    return 0;
}
