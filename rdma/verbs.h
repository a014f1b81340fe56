/* The verbs seam: every libibverbs call the RDMA transport makes goes
 * through one table, so tests can put an in-process emulation of RC
 * semantics (tests/rdma/emu_verbs.h) where the real library would be.
 * The types are libibverbs' own; an implementation fills the real structs
 * (qp->qp_num, mr->lkey/rkey/addr/length, ...). */
#ifndef FLPS_RDMA_VERBS_H
#define FLPS_RDMA_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "rdma/rdma.h"

struct rdma_verbs {
    const char *name; /* "libibverbs", "emu" */
    /* ibv_get_device_list / ibv_free_device_list / ibv_get_device_name. */
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    /* The number of physical ports (ibv_query_device's phys_port_cnt);
     * -1 on error. */
    int (*port_count)(struct ibv_context *ctx);
    int (*query_port)(struct ibv_context *ctx, uint8_t port,
                      struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index,
                     union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    /* NULL with errno set on failure (ENOMEM: usually the memlock limit). */
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
                             int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe,
                                void *cq_context,
                                struct ibv_comp_channel *channel,
                                int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd,
                                struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                     int attr_mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr,
                     struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad_wr);
    /* Completions taken (0..num), or -1 on error. */
    int (*poll_cq)(struct ibv_cq *cq, int num, struct ibv_wc *wc);
    /* How many bytes this process may lock (register): RLIMIT_MEMLOCK's
     * soft limit, UINT64_MAX when unlimited or when the process holds
     * CAP_IPC_LOCK. 0 on success, -1 when it cannot be read. */
    int (*memlock_limit)(uint64_t *bytes);
};

#endif
