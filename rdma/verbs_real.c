/* The verbs seam over libibverbs: most entries are the library's own
 * functions; the ones libibverbs defines inline (post, poll, query_port)
 * get a function here. */
#include "rdma/verbs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

static int rv_port_count(struct ibv_context *ctx)
{
    struct ibv_device_attr attr;

    if (ibv_query_device(ctx, &attr) != 0)
        return -1;
    return attr.phys_port_cnt;
}

static int rv_query_port(struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr)
{
    return ibv_query_port(ctx, port, attr);
}

static struct ibv_mr *rv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                                int access)
{
    return ibv_reg_mr(pd, addr, length, access);
}

static int rv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                        struct ibv_send_wr **bad_wr)
{
    return ibv_post_send(qp, wr, bad_wr);
}

static int rv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad_wr)
{
    return ibv_post_recv(qp, wr, bad_wr);
}

static int rv_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, num, wc);
}

/* Whether the effective capability set holds CAP_IPC_LOCK (bit 14), read
 * from /proc so that no libcap is needed. */
static int rv_has_ipc_lock(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int has = 0;

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long caps;
        if (sscanf(line, "CapEff: %llx", &caps) == 1) {
            has = (caps >> 14) & 1u;
            break;
        }
    }
    fclose(f);
    return has;
}

static int rv_memlock_limit(uint64_t *bytes)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        return -1;
    if (rl.rlim_cur == RLIM_INFINITY || rv_has_ipc_lock())
        *bytes = UINT64_MAX;
    else
        *bytes = (uint64_t)rl.rlim_cur;
    return 0;
}

static const rdma_verbs rv_table = {
    .name = "libibverbs",
    .get_device_list = ibv_get_device_list,
    .free_device_list = ibv_free_device_list,
    .get_device_name = ibv_get_device_name,
    .open_device = ibv_open_device,
    .close_device = ibv_close_device,
    .port_count = rv_port_count,
    .query_port = rv_query_port,
    .query_gid = ibv_query_gid,
    .alloc_pd = ibv_alloc_pd,
    .dealloc_pd = ibv_dealloc_pd,
    .reg_mr = rv_reg_mr,
    .dereg_mr = ibv_dereg_mr,
    .create_cq = ibv_create_cq,
    .destroy_cq = ibv_destroy_cq,
    .create_qp = ibv_create_qp,
    .modify_qp = ibv_modify_qp,
    .destroy_qp = ibv_destroy_qp,
    .post_send = rv_post_send,
    .post_recv = rv_post_recv,
    .poll_cq = rv_poll_cq,
    .memlock_limit = rv_memlock_limit,
};

const rdma_verbs *rdma_verbs_real(void)
{
    return &rv_table;
}
