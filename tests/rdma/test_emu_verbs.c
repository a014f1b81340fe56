/* Tests for tests/rdma/emu_verbs.c, the emulated NIC the transport's tests
 * stand on: it must fail where hardware fails (keys, bounds, RNR, a peer
 * gone) or those tests prove nothing. */
#include "emu_verbs.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    unsigned char *buf;
    struct ibv_mr *mr;
} side;

static const rdma_verbs *V;
static side A, B;

static void side_open(side *s)
{
    struct ibv_device **l;
    struct ibv_qp_init_attr ia;
    int n;

    l = V->get_device_list(&n);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(V->get_device_name(l[0]), "emu0");
    s->ctx = V->open_device(l[0]);
    V->free_device_list(l);
    s->pd = V->alloc_pd(s->ctx);
    s->cq = V->create_cq(s->ctx, 16, NULL, NULL, 0);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = s->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    s->qp = V->create_qp(s->pd, &ia);
    cr_assert_not_null(s->qp);
    s->buf = calloc(1, 4096);
    s->mr = V->reg_mr(s->pd, s->buf, 4096,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    cr_assert_not_null(s->mr);
}

static void side_connect(side *s, const side *to)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    cr_assert_eq(V->modify_qp(s->qp, &a,
                              IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX |
                                  IBV_QP_ACCESS_FLAGS),
                 0);
    a.qp_state = IBV_QPS_RTR;
    a.dest_qp_num = to->qp->qp_num;
    cr_assert_eq(
        V->modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN), 0);
    a.qp_state = IBV_QPS_RTS;
    cr_assert_eq(V->modify_qp(s->qp, &a, IBV_QP_STATE), 0);
}

static void side_close(side *s)
{
    V->destroy_qp(s->qp);
    V->dereg_mr(s->mr);
    cr_assert_eq(V->destroy_cq(s->cq), 0);
    cr_assert_eq(V->dealloc_pd(s->pd), 0);
    V->close_device(s->ctx);
    free(s->buf);
}

static void setup(void)
{
    V = rdma_emu_verbs();
    rdma_emu_reset();
    side_open(&A);
    side_open(&B);
    side_connect(&A, &B);
    side_connect(&B, &A);
}

static void teardown(void)
{
    side_close(&A);
    side_close(&B);
    cr_assert_eq(rdma_emu_live_mrs(), 0);
    cr_assert_eq(rdma_emu_live_qps(), 0);
    cr_assert_eq(rdma_emu_live_cqs(), 0);
    cr_assert_eq(rdma_emu_live_pds(), 0);
    cr_assert_eq(rdma_emu_live_contexts(), 0);
}

static void post_recv(side *s, uint64_t id, size_t off, uint32_t len)
{
    struct ibv_sge sge = {(uint64_t)(uintptr_t)(s->buf + off), len,
                          s->mr->lkey};
    struct ibv_recv_wr wr = {0}, *bad;

    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    cr_assert_eq(V->post_recv(s->qp, &wr, &bad), 0);
}

static int post(side *s, enum ibv_wr_opcode op, size_t off, uint32_t len,
                uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
    struct ibv_sge sge = {(uint64_t)(uintptr_t)(s->buf + off), len, lkey};
    struct ibv_send_wr wr = {0}, *bad;

    wr.wr_id = 99;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return V->post_send(s->qp, &wr, &bad);
}

static struct ibv_wc poll1(side *s)
{
    struct ibv_wc wc;
    cr_assert_eq(V->poll_cq(s->cq, 1, &wc), 1, "no completion");
    return wc;
}

TestSuite(emu_verbs, .init = setup, .fini = teardown);

Test(emu_verbs, a_send_lands_in_the_posted_receive)
{
    struct ibv_wc wc;

    memcpy(A.buf, "hello", 5);
    post_recv(&B, 7, 100, 64);
    cr_assert_eq(post(&A, IBV_WR_SEND, 0, 5, A.mr->lkey, 0, 0, 0), 0);
    wc = poll1(&A);
    cr_assert_eq(wc.status, IBV_WC_SUCCESS);
    cr_assert_eq(wc.opcode, IBV_WC_SEND);
    wc = poll1(&B);
    cr_assert_eq(wc.status, IBV_WC_SUCCESS);
    cr_assert_eq(wc.opcode, IBV_WC_RECV);
    cr_assert_eq(wc.wr_id, 7);
    cr_assert_eq(wc.byte_len, 5);
    cr_assert_eq(memcmp(B.buf + 100, "hello", 5), 0);
}

Test(emu_verbs, a_send_without_a_receive_is_rnr)
{
    cr_assert_eq(post(&A, IBV_WR_SEND, 0, 5, A.mr->lkey, 0, 0, 0), 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_RNR_RETRY_EXC_ERR);
    /* The queue pair is in error now: what follows is flushed. */
    cr_assert_eq(post(&A, IBV_WR_SEND, 0, 5, A.mr->lkey, 0, 0, 0), 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_WR_FLUSH_ERR);
}

Test(emu_verbs, write_with_imm_consumes_a_receive_and_carries_imm)
{
    struct ibv_wc wc;

    memcpy(A.buf, "payload!", 8);
    post_recv(&B, 3, 0, 0);
    cr_assert_eq(post(&A, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 8, A.mr->lkey,
                      (uint64_t)(uintptr_t)(B.buf + 1000), B.mr->rkey, 42),
                 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_SUCCESS);
    wc = poll1(&B);
    cr_assert_eq(wc.status, IBV_WC_SUCCESS);
    cr_assert_eq(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    cr_assert(wc.wc_flags & IBV_WC_WITH_IMM);
    cr_assert_eq(ntohl(wc.imm_data), 42);
    cr_assert_eq(wc.wr_id, 3);
    cr_assert_eq(memcmp(B.buf + 1000, "payload!", 8), 0);
}

Test(emu_verbs, a_plain_write_completes_only_at_the_sender)
{
    struct ibv_wc wc;

    cr_assert_eq(post(&A, IBV_WR_RDMA_WRITE, 0, 8, A.mr->lkey,
                      (uint64_t)(uintptr_t)B.buf, B.mr->rkey, 0),
                 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_SUCCESS);
    cr_assert_eq(V->poll_cq(B.cq, 1, &wc), 0);
}

Test(emu_verbs, a_wrong_rkey_or_bounds_is_a_remote_access_error)
{
    cr_assert_eq(post(&A, IBV_WR_RDMA_WRITE, 0, 8, A.mr->lkey,
                      (uint64_t)(uintptr_t)B.buf, B.mr->rkey + 1000, 0),
                 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_REM_ACCESS_ERR);
}

Test(emu_verbs, a_write_past_the_region_is_a_remote_access_error)
{
    cr_assert_eq(post(&A, IBV_WR_RDMA_WRITE, 0, 16, A.mr->lkey,
                      (uint64_t)(uintptr_t)(B.buf + 4090), B.mr->rkey, 0),
                 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_REM_ACCESS_ERR);
}

Test(emu_verbs, a_wrong_lkey_is_a_local_protection_error)
{
    post_recv(&B, 1, 0, 64);
    cr_assert_eq(post(&A, IBV_WR_SEND, 0, 8, A.mr->lkey ^ 0x55, 0, 0, 0), 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_LOC_PROT_ERR);
}

Test(emu_verbs, a_send_longer_than_the_receive_fails_both_ends)
{
    post_recv(&B, 1, 0, 4);
    cr_assert_eq(post(&A, IBV_WR_SEND, 0, 8, A.mr->lkey, 0, 0, 0), 0);
    cr_assert_eq(poll1(&A).status, IBV_WC_REM_INV_REQ_ERR);
    cr_assert_eq(poll1(&B).status, IBV_WC_LOC_LEN_ERR);
}

Test(emu_verbs, a_vanished_peer_stops_answering)
{
    uint32_t q[4];

    cr_assert_eq(rdma_emu_qp_numbers(q, 4), 2);
    cr_assert_eq(q[0], A.qp->qp_num, "oldest first");
    post_recv(&A, 5, 0, 64);
    cr_assert_eq(rdma_emu_vanish_qp(B.qp->qp_num), 0);
    cr_assert_eq(rdma_emu_vanish_qp(B.qp->qp_num), -1, "already gone");
    cr_assert_eq(post(&A, IBV_WR_SEND, 0, 8, A.mr->lkey, 0, 0, 0), 0);
    {
        struct ibv_wc wc[2];
        int n = V->poll_cq(A.cq, 2, wc);
        cr_assert_eq(n, 2);
        /* a's posted receive is flushed when a's queue pair fails. */
        cr_assert_eq(wc[0].status, IBV_WC_RETRY_EXC_ERR);
        cr_assert_eq(wc[1].status, IBV_WC_WR_FLUSH_ERR);
        cr_assert_eq(wc[1].wr_id, 5);
    }
}

Test(emu_verbs, knobs_fail_what_they_say)
{
    struct ibv_device **l;
    struct ibv_port_attr pa;
    unsigned char mem[64];
    uint64_t lim;
    int n;

    rdma_emu_set_no_device(1);
    l = V->get_device_list(&n);
    cr_assert_eq(n, 0);
    cr_assert_null(l[0]);
    V->free_device_list(l);
    rdma_emu_set_port_down(1);
    cr_assert_eq(V->query_port(A.ctx, 1, &pa), 0);
    cr_assert_eq(pa.state, IBV_PORT_DOWN);
    rdma_emu_fail_next_reg_mr(ENOMEM);
    errno = 0;
    cr_assert_null(V->reg_mr(A.pd, mem, sizeof(mem), 0));
    cr_assert_eq(errno, ENOMEM);
    rdma_emu_set_memlock_limit(12345);
    cr_assert_eq(V->memlock_limit(&lim), 0);
    cr_assert_eq(lim, 12345);
    rdma_emu_reset();
    cr_assert_eq(V->query_port(A.ctx, 1, &pa), 0);
    cr_assert_eq(pa.state, IBV_PORT_ACTIVE);
}

Test(emu_verbs, a_busy_domain_or_queue_cannot_be_freed)
{
    cr_assert_eq(V->dealloc_pd(A.pd), EBUSY);
    cr_assert_eq(V->destroy_cq(A.cq), EBUSY);
}
