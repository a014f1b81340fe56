/* A real flps shard under the abuse of issue 12: a message of too many
 * frames, a REGISTER of 2^32 - 1 elements and a stranger's CHECKPOINT are
 * each answered with an ERROR, and the shard goes on serving. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/msg.h"
#include "proto/transport.h"
#include "spawn.h"

#define WAIT_MS 10000

static void send_msg(transport *t, uint32_t peer, const proto_msg *m)
{
    proto_frame f[PROTO_MAX_FRAMES];
    transport_frame tf[PROTO_MAX_FRAMES];
    void *hdr = NULL;
    size_t hlen, nf;
    proto_buf *b[PROTO_MAX_FRAMES];

    cr_assert_eq(proto_msg_encode(m, &hdr, &hlen, f, &nf), FLPS_OK);
    for (size_t i = 0; i < nf; i++) {
        b[i] = proto_buf_create(f[i].len ? f[i].len : 1);
        memcpy(proto_buf_data(b[i]), f[i].data, f[i].len);
        tf[i].buf = b[i];
        tf[i].off = 0;
        tf[i].len = f[i].len;
    }
    cr_assert_eq(transport_send(t, peer, tf, nf), FLPS_OK);
    for (size_t i = 0; i < nf; i++)
        proto_buf_release(b[i]);
    free(hdr);
}

/* The next reply on t, decoded into *m (caller finis it). */
static void recv_reply(transport *t, proto_msg *m)
{
    transport_rx *rx = NULL;
    char why[256];

    cr_assert_eq(transport_recv(t, WAIT_MS, &rx), FLPS_OK, "no reply");
    cr_assert_eq(proto_msg_decode(rx->frames, rx->nframes, m, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    /* Keep nothing that points into rx: the tests read header fields. */
    m->idx = NULL;
    m->val = NULL;
    m->rej = NULL;
    transport_rx_release(rx);
}

static proto_msg register_msg(proto_tensor *t)
{
    proto_msg m;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_REGISTER;
    strcpy(m.job, "abuse");
    m.cfg.shard = 0;
    m.cfg.nshards = 1;
    m.cfg.workers = 1;
    m.cfg.part_size = 64;
    m.cfg.mode = PROTO_MODE_SSGD;
    m.cfg.agg = PROTO_AGG_DENSE;
    m.cfg.density = 1;
    m.cfg.lr = 0.1;
    strcpy(m.cfg.compression, "dense");
    strcpy(t->name, "w");
    t->numel = 128;
    m.tensors = t;
    m.ntensors = 1;
    return m;
}

Test(dataplane_limits, a_shard_answers_abuse_and_goes_on_serving, .timeout = 60)
{
    char dir[] = "/tmp/flps-abuse-XXXXXX", log[160];
    const char *args[] = {"--job",
                          "abuse",
                          "--shard",
                          "0",
                          "--shards",
                          "1",
                          "--checkpoint-dir",
                          dir,
                          "--max-connections",
                          "8",
                          NULL};
    test_shard s;
    transport *t, *stranger;
    uint32_t peer, speer;
    proto_tensor tensor;
    proto_msg m, r;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s/shard.log", dir);
    cr_assert_eq(test_shard_start(&s, log, args), 0, "see %s", log);
    cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
    cr_assert_eq(transport_connect(t, s.endpoint, &peer), FLPS_OK);

    /* Six frames: more than a message may have. */
    {
        transport_frame f[6];
        for (int i = 0; i < 6; i++) {
            f[i].buf = proto_buf_create(4);
            memset(proto_buf_data(f[i].buf), 0, 4);
            f[i].off = 0;
            f[i].len = 4;
        }
        cr_assert_eq(transport_send(t, peer, f, 6), FLPS_OK);
        for (int i = 0; i < 6; i++)
            proto_buf_release(f[i].buf);
    }
    recv_reply(t, &r);
    cr_assert_eq(r.op, PROTO_OP_ERROR);
    cr_assert_eq(r.status, FLPS_EPROTO);
    cr_assert_neq(strstr(r.text, "more than 4 frames"), NULL, "%s", r.text);
    proto_msg_fini(&r);

    /* One REGISTER of 2^32 - 1 elements: refused, nothing allocated. */
    m = register_msg(&tensor);
    tensor.numel = UINT32_MAX;
    send_msg(t, peer, &m);
    recv_reply(t, &r);
    cr_assert_eq(r.op, PROTO_OP_ERROR);
    cr_assert_eq(r.status, FLPS_ECONFIG);
    cr_assert_neq(strstr(r.text, "--max-model-elements"), NULL, "%s", r.text);
    proto_msg_fini(&r);

    /* The legitimate worker registers. */
    m = register_msg(&tensor);
    send_msg(t, peer, &m);
    recv_reply(t, &r);
    cr_assert_eq(r.op, PROTO_OP_REGISTER_OK, "%s", r.text);
    proto_msg_fini(&r);

    /* A stranger's CHECKPOINT is refused; the worker's is written, and
     * its next one is "done recently". */
    cr_assert_eq(transport_zmq_create(&stranger), FLPS_OK);
    cr_assert_eq(transport_connect(stranger, s.endpoint, &speer), FLPS_OK);
    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_CHECKPOINT;
    strcpy(m.job, "abuse");
    send_msg(stranger, speer, &m);
    recv_reply(stranger, &r);
    cr_assert_eq(r.op, PROTO_OP_ERROR);
    cr_assert_eq(r.status, FLPS_ESTATE);
    proto_msg_fini(&r);
    send_msg(t, peer, &m);
    recv_reply(t, &r);
    cr_assert_eq(r.op, PROTO_OP_ACK);
    cr_assert_str_eq(r.text, "checkpoint written");
    proto_msg_fini(&r);
    send_msg(t, peer, &m);
    recv_reply(t, &r);
    cr_assert_eq(r.op, PROTO_OP_ACK);
    cr_assert_eq(r.status, 1);
    cr_assert_neq(strstr(r.text, "done recently"), NULL, "%s", r.text);
    proto_msg_fini(&r);

    transport_destroy(stranger);
    transport_destroy(t);
    {
        int st = test_shard_stop(&s, SIGTERM);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the shard did not exit cleanly; see %s", log);
    }
    {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
    }
}
