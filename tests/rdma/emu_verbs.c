/* The emulated RDMA NIC (emu_verbs.h): RC queue pairs moving bytes between
 * registered regions of one process, with the checks and the error
 * completions of hardware. */
#include "emu_verbs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMU_MAX_SGE 8

typedef struct emu_mr {
    struct ibv_mr mr;
    int access;
    struct emu_mr *next;
} emu_mr;

typedef struct emu_cq {
    struct ibv_cq cq;
    struct ibv_wc *ring;
    int cap, head, count;
    int users; /* queue pairs that complete into it */
} emu_cq;

typedef struct emu_rwr {
    uint64_t wr_id;
    struct ibv_sge sge[EMU_MAX_SGE];
    int nsge;
} emu_rwr;

typedef struct emu_qp {
    struct ibv_qp qp;
    emu_cq *scq, *rcq;
    uint32_t dest; /* the connected queue pair (from RTR) */
    int vanished;
    int sig_all;
    emu_rwr *rq; /* posted RECVs, a ring */
    int rq_cap, rq_head, rq_count;
    struct emu_qp *next;
} emu_qp;

typedef struct emu_pd {
    struct ibv_pd pd;
    int users; /* regions and queue pairs in it */
} emu_pd;

/* The one emulated NIC of the process: like hardware, it is shared by
 * everything in the process, so it is global; lock guards every field. */
static struct {
    pthread_mutex_t lock;
    struct ibv_device dev;
    int no_device, port_down;
    int fail_reg_mr, fail_create_qp; /* errno of the next failure */
    uint64_t memlock;
    emu_mr *mrs;
    emu_qp *qps;
    uint32_t next_qpn, next_key;
    size_t live_mrs, live_qps, live_pds, live_cqs, live_ctx;
} E = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .memlock = UINT64_MAX,
    .next_qpn = 0x100,
    .next_key = 0x1000,
};

static void emu_lock(void)
{
    pthread_mutex_lock(&E.lock);
}

static void emu_unlock(void)
{
    pthread_mutex_unlock(&E.lock);
}

/* --- devices and ports ------------------------------------------------ */

static struct ibv_device **emu_get_device_list(int *num)
{
    struct ibv_device **list = calloc(2, sizeof(*list));

    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    emu_lock();
    if (!E.no_device) {
        snprintf(E.dev.name, sizeof(E.dev.name), "emu0");
        snprintf(E.dev.dev_name, sizeof(E.dev.dev_name), "uverbs0");
        E.dev.transport_type = IBV_TRANSPORT_IB;
        E.dev.node_type = IBV_NODE_CA;
        list[0] = &E.dev;
    }
    if (num != NULL)
        *num = E.no_device ? 0 : 1;
    emu_unlock();
    return list;
}

static void emu_free_device_list(struct ibv_device **list)
{
    free(list);
}

static const char *emu_get_device_name(struct ibv_device *dev)
{
    return dev->name;
}

static struct ibv_context *emu_open_device(struct ibv_device *dev)
{
    struct ibv_context *ctx = calloc(1, sizeof(*ctx));

    if (ctx == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ctx->device = dev;
    emu_lock();
    E.live_ctx++;
    emu_unlock();
    return ctx;
}

static int emu_close_device(struct ibv_context *ctx)
{
    emu_lock();
    E.live_ctx--;
    emu_unlock();
    free(ctx);
    return 0;
}

static int emu_port_count(struct ibv_context *ctx)
{
    (void)ctx;
    return 1;
}

static int emu_query_port(struct ibv_context *ctx, uint8_t port,
                          struct ibv_port_attr *attr)
{
    (void)ctx;
    if (port != 1)
        return EINVAL;
    memset(attr, 0, sizeof(*attr));
    emu_lock();
    attr->state = E.port_down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    attr->phys_state = E.port_down ? 3 : 5; /* Disabled / LinkUp */
    emu_unlock();
    attr->max_mtu = IBV_MTU_4096;
    attr->active_mtu = IBV_MTU_4096;
    attr->gid_tbl_len = 1;
    attr->lid = 1;
    attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

static int emu_query_gid(struct ibv_context *ctx, uint8_t port, int index,
                         union ibv_gid *gid)
{
    (void)ctx;
    if (port != 1 || index != 0)
        return EINVAL;
    memset(gid, 0, sizeof(*gid));
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    gid->raw[15] = 1;
    return 0;
}

/* --- protection domains, regions, completion queues ------------------- */

static struct ibv_pd *emu_alloc_pd(struct ibv_context *ctx)
{
    emu_pd *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    p->pd.context = ctx;
    emu_lock();
    p->pd.handle = E.next_key++;
    E.live_pds++;
    emu_unlock();
    return &p->pd;
}

static int emu_dealloc_pd(struct ibv_pd *pd)
{
    emu_pd *p = (emu_pd *)pd;

    emu_lock();
    if (p->users > 0) {
        emu_unlock();
        return EBUSY;
    }
    E.live_pds--;
    emu_unlock();
    free(p);
    return 0;
}

static struct ibv_mr *emu_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                                 int access)
{
    emu_mr *m;

    emu_lock();
    if (E.fail_reg_mr != 0) {
        errno = E.fail_reg_mr;
        E.fail_reg_mr = 0;
        emu_unlock();
        return NULL;
    }
    emu_unlock();
    if (addr == NULL || length == 0) {
        errno = EINVAL;
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->access = access;
    emu_lock();
    m->mr.handle = E.next_key;
    m->mr.lkey = E.next_key++;
    m->mr.rkey = E.next_key++;
    m->next = E.mrs;
    E.mrs = m;
    E.live_mrs++;
    ((emu_pd *)pd)->users++;
    emu_unlock();
    return &m->mr;
}

static int emu_dereg_mr(struct ibv_mr *mr)
{
    emu_mr **pp;

    emu_lock();
    for (pp = &E.mrs; *pp != NULL; pp = &(*pp)->next) {
        if (&(*pp)->mr == mr) {
            emu_mr *m = *pp;
            *pp = m->next;
            E.live_mrs--;
            ((emu_pd *)mr->pd)->users--;
            emu_unlock();
            free(m);
            return 0;
        }
    }
    emu_unlock();
    return EINVAL;
}

static struct ibv_cq *emu_create_cq(struct ibv_context *ctx, int cqe,
                                    void *cq_context,
                                    struct ibv_comp_channel *channel,
                                    int comp_vector)
{
    emu_cq *c;

    (void)comp_vector;
    if (cqe <= 0 || channel != NULL) {
        errno = EINVAL;
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL ||
        (c->ring = calloc((size_t)cqe, sizeof(*c->ring))) == NULL) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    c->cap = cqe;
    c->cq.context = ctx;
    c->cq.cq_context = cq_context;
    c->cq.cqe = cqe;
    emu_lock();
    E.live_cqs++;
    emu_unlock();
    return &c->cq;
}

static int emu_destroy_cq(struct ibv_cq *cq)
{
    emu_cq *c = (emu_cq *)cq;

    emu_lock();
    if (c->users > 0) {
        emu_unlock();
        return EBUSY;
    }
    E.live_cqs--;
    emu_unlock();
    free(c->ring);
    free(c);
    return 0;
}

/* Add a completion (lock held). A full queue loses it, as an overrun CQ
 * does on hardware; the transport must size its queues so it never is. */
static void emu_complete(emu_cq *c, const struct ibv_wc *wc)
{
    if (c->count == c->cap) {
        fprintf(stderr, "emu_verbs: completion queue overrun (%d entries)\n",
                c->cap);
        return;
    }
    c->ring[(c->head + c->count) % c->cap] = *wc;
    c->count++;
}

static int emu_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    emu_cq *c = (emu_cq *)cq;
    int n = 0;

    emu_lock();
    while (n < num && c->count > 0) {
        wc[n++] = c->ring[c->head];
        c->head = (c->head + 1) % c->cap;
        c->count--;
    }
    emu_unlock();
    return n;
}

/* --- queue pairs ------------------------------------------------------ */

static struct ibv_qp *emu_create_qp(struct ibv_pd *pd,
                                    struct ibv_qp_init_attr *attr)
{
    emu_qp *q;

    if (attr->qp_type != IBV_QPT_RC || attr->send_cq == NULL ||
        attr->recv_cq == NULL || attr->cap.max_recv_wr == 0 ||
        attr->cap.max_recv_sge > EMU_MAX_SGE ||
        attr->cap.max_send_sge > EMU_MAX_SGE) {
        errno = EINVAL;
        return NULL;
    }
    emu_lock();
    if (E.fail_create_qp != 0) {
        errno = E.fail_create_qp;
        E.fail_create_qp = 0;
        emu_unlock();
        return NULL;
    }
    emu_unlock();
    q = calloc(1, sizeof(*q));
    if (q == NULL ||
        (q->rq = calloc(attr->cap.max_recv_wr, sizeof(*q->rq))) == NULL) {
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->rq_cap = (int)attr->cap.max_recv_wr;
    q->scq = (emu_cq *)attr->send_cq;
    q->rcq = (emu_cq *)attr->recv_cq;
    q->sig_all = attr->sq_sig_all;
    q->qp.context = pd->context;
    q->qp.qp_context = attr->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = attr->send_cq;
    q->qp.recv_cq = attr->recv_cq;
    q->qp.qp_type = IBV_QPT_RC;
    q->qp.state = IBV_QPS_RESET;
    emu_lock();
    q->qp.qp_num = E.next_qpn++ & 0xffffffu;
    q->qp.handle = q->qp.qp_num;
    q->next = E.qps;
    E.qps = q;
    E.live_qps++;
    q->scq->users++;
    q->rcq->users++;
    ((emu_pd *)pd)->users++;
    emu_unlock();
    return &q->qp;
}

static emu_qp *emu_find_qp(uint32_t qpn)
{
    for (emu_qp *q = E.qps; q != NULL; q = q->next)
        if (q->qp.qp_num == qpn && !q->vanished)
            return q;
    return NULL;
}

/* Move q to ERR (lock held): its posted RECVs are flushed. */
static void emu_qp_error(emu_qp *q)
{
    q->qp.state = IBV_QPS_ERR;
    while (q->rq_count > 0) {
        struct ibv_wc wc = {0};
        wc.wr_id = q->rq[q->rq_head].wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = q->qp.qp_num;
        emu_complete(q->rcq, &wc);
        q->rq_head = (q->rq_head + 1) % q->rq_cap;
        q->rq_count--;
    }
}

static int emu_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                         int attr_mask)
{
    emu_qp *q = (emu_qp *)qp;
    int rc = 0;

    if (!(attr_mask & IBV_QP_STATE))
        return EINVAL;
    emu_lock();
    switch (attr->qp_state) {
    case IBV_QPS_INIT:
        if (qp->state != IBV_QPS_RESET || !(attr_mask & IBV_QP_PORT) ||
            attr->port_num != 1)
            rc = EINVAL;
        break;
    case IBV_QPS_RTR:
        if (qp->state != IBV_QPS_INIT || !(attr_mask & IBV_QP_DEST_QPN) ||
            !(attr_mask & IBV_QP_AV))
            rc = EINVAL;
        else if (E.port_down)
            rc = ENETDOWN;
        else
            q->dest = attr->dest_qp_num;
        break;
    case IBV_QPS_RTS:
        if (qp->state != IBV_QPS_RTR)
            rc = EINVAL;
        break;
    case IBV_QPS_ERR:
        emu_qp_error(q);
        break;
    case IBV_QPS_RESET:
        q->rq_count = 0;
        break;
    default:
        rc = EINVAL;
    }
    if (rc == 0)
        qp->state = attr->qp_state;
    emu_unlock();
    return rc;
}

static int emu_destroy_qp(struct ibv_qp *qp)
{
    emu_qp *q = (emu_qp *)qp;

    emu_lock();
    for (emu_qp **pp = &E.qps; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    }
    E.live_qps--;
    q->scq->users--;
    q->rcq->users--;
    ((emu_pd *)qp->pd)->users--;
    emu_unlock();
    free(q->rq);
    free(q);
    return 0;
}

static int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                         struct ibv_recv_wr **bad_wr)
{
    emu_qp *q = (emu_qp *)qp;
    int rc = 0;

    emu_lock();
    for (; wr != NULL; wr = wr->next) {
        emu_rwr *r;
        if (qp->state == IBV_QPS_RESET || wr->num_sge > EMU_MAX_SGE ||
            wr->num_sge < 0) {
            rc = EINVAL;
            break;
        }
        if (q->rq_count == q->rq_cap) {
            rc = ENOMEM;
            break;
        }
        if (qp->state == IBV_QPS_ERR || q->vanished) {
            struct ibv_wc wc = {0};
            wc.wr_id = wr->wr_id;
            wc.status = IBV_WC_WR_FLUSH_ERR;
            wc.opcode = IBV_WC_RECV;
            wc.qp_num = qp->qp_num;
            emu_complete(q->rcq, &wc);
            continue;
        }
        r = &q->rq[(q->rq_head + q->rq_count) % q->rq_cap];
        r->wr_id = wr->wr_id;
        r->nsge = wr->num_sge;
        memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(r->sge[0]));
        q->rq_count++;
    }
    if (rc != 0 && bad_wr != NULL)
        *bad_wr = wr;
    emu_unlock();
    return rc;
}

/* The region with key key (an lkey, or an rkey when remote) that holds
 * [addr, addr+len) and allows access, in pd; NULL when none. */
static emu_mr *emu_find_mr(uint32_t key, int remote, struct ibv_pd *pd,
                           uint64_t addr, uint64_t len, int access)
{
    for (emu_mr *m = E.mrs; m != NULL; m = m->next) {
        uint64_t base = (uint64_t)(uintptr_t)m->mr.addr;
        if ((remote ? m->mr.rkey : m->mr.lkey) != key)
            continue;
        if (m->mr.pd != pd || (m->access & access) != access)
            return NULL;
        if (addr < base || len > m->mr.length ||
            addr - base > m->mr.length - len)
            return NULL;
        return m;
    }
    return NULL;
}

/* Copy the gathered bytes of wr's sges into dst (len bytes, counted
 * before). */
static void emu_gather(const struct ibv_send_wr *wr, unsigned char *dst)
{
    for (int i = 0; i < wr->num_sge; i++) {
        memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr,
               wr->sg_list[i].length);
        dst += wr->sg_list[i].length;
    }
}

/* Carry out one send work request of q (lock held); returns the status
 * of its completion and fills the receiver's side. */
static enum ibv_wc_status emu_execute(emu_qp *q, const struct ibv_send_wr *wr,
                                      uint32_t *byte_len)
{
    uint64_t len = 0;
    emu_qp *d;
    struct ibv_wc rwc = {0};
    int consume = wr->opcode == IBV_WR_SEND ||
                  wr->opcode == IBV_WR_SEND_WITH_IMM ||
                  wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;

    for (int i = 0; i < wr->num_sge; i++) {
        const struct ibv_sge *s = &wr->sg_list[i];
        if (!(wr->send_flags & IBV_SEND_INLINE) &&
            emu_find_mr(s->lkey, 0, q->qp.pd, s->addr, s->length, 0) == NULL)
            return IBV_WC_LOC_PROT_ERR;
        len += s->length;
    }
    *byte_len = (uint32_t)len;
    d = emu_find_qp(q->dest);
    if (d == NULL || d->dest != q->qp.qp_num ||
        (d->qp.state != IBV_QPS_RTR && d->qp.state != IBV_QPS_RTS))
        return IBV_WC_RETRY_EXC_ERR; /* nobody answers */
    if (wr->opcode == IBV_WR_RDMA_WRITE ||
        wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        if (len > 0 &&
            emu_find_mr(wr->wr.rdma.rkey, 1, d->qp.pd, wr->wr.rdma.remote_addr,
                        len, IBV_ACCESS_REMOTE_WRITE) == NULL) {
            emu_qp_error(d);
            return IBV_WC_REM_ACCESS_ERR;
        }
    } else if (!consume) {
        return IBV_WC_LOC_QP_OP_ERR; /* READ and atomics: not emulated */
    }
    if (consume && d->rq_count == 0) {
        return IBV_WC_RNR_RETRY_EXC_ERR;
    }
    if (consume && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
        emu_rwr *r = &d->rq[d->rq_head];
        uint64_t room = 0;
        for (int i = 0; i < r->nsge; i++)
            room += r->sge[i].length;
        if (room < len) {
            rwc.wr_id = r->wr_id;
            rwc.status = IBV_WC_LOC_LEN_ERR;
            rwc.opcode = IBV_WC_RECV;
            rwc.qp_num = d->qp.qp_num;
            d->rq_head = (d->rq_head + 1) % d->rq_cap;
            d->rq_count--;
            emu_complete(d->rcq, &rwc);
            emu_qp_error(d);
            return IBV_WC_REM_INV_REQ_ERR;
        }
    }
    if (wr->opcode == IBV_WR_RDMA_WRITE ||
        wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        emu_gather(wr, (unsigned char *)(uintptr_t)wr->wr.rdma.remote_addr);
    } else {
        /* Scatter into the RECV's buffers. */
        emu_rwr *r = &d->rq[d->rq_head];
        uint64_t left = len;
        int si = 0;
        size_t so = 0;
        for (int i = 0; i < r->nsge && left > 0; i++) {
            uint64_t n = r->sge[i].length < left ? r->sge[i].length : left;
            unsigned char *dst = (unsigned char *)(uintptr_t)r->sge[i].addr;
            uint64_t done = 0;
            while (done < n) {
                const struct ibv_sge *s = &wr->sg_list[si];
                uint64_t take = s->length - so;
                if (take > n - done)
                    take = n - done;
                memcpy(dst + done, (unsigned char *)(uintptr_t)s->addr + so,
                       take);
                done += take;
                so += take;
                if (so == s->length) {
                    si++;
                    so = 0;
                }
            }
            left -= n;
        }
    }
    if (consume) {
        emu_rwr *r = &d->rq[d->rq_head];
        rwc.wr_id = r->wr_id;
        rwc.status = IBV_WC_SUCCESS;
        rwc.opcode = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM
                         ? IBV_WC_RECV_RDMA_WITH_IMM
                         : IBV_WC_RECV;
        rwc.byte_len = (uint32_t)len;
        if (wr->opcode != IBV_WR_SEND) {
            rwc.wc_flags = IBV_WC_WITH_IMM;
            rwc.imm_data = wr->imm_data;
        }
        rwc.qp_num = d->qp.qp_num;
        rwc.src_qp = q->qp.qp_num;
        d->rq_head = (d->rq_head + 1) % d->rq_cap;
        d->rq_count--;
        emu_complete(d->rcq, &rwc);
    }
    return IBV_WC_SUCCESS;
}

static enum ibv_wc_opcode emu_wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    default:
        return IBV_WC_SEND;
    }
}

static int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                         struct ibv_send_wr **bad_wr)
{
    emu_qp *q = (emu_qp *)qp;
    int rc = 0;

    emu_lock();
    for (; wr != NULL; wr = wr->next) {
        struct ibv_wc wc = {0};
        uint32_t byte_len = 0;

        if (wr->num_sge < 0 || wr->num_sge > EMU_MAX_SGE ||
            (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR)) {
            rc = EINVAL;
            break;
        }
        wc.wr_id = wr->wr_id;
        wc.opcode = emu_wc_opcode(wr->opcode);
        wc.qp_num = qp->qp_num;
        if (qp->state == IBV_QPS_ERR || q->vanished) {
            wc.status = IBV_WC_WR_FLUSH_ERR;
        } else {
            wc.status = emu_execute(q, wr, &byte_len);
            wc.byte_len = byte_len;
        }
        if (wc.status != IBV_WC_SUCCESS || q->sig_all ||
            (wr->send_flags & IBV_SEND_SIGNALED))
            emu_complete(q->scq, &wc);
        /* After the failed request's own completion, as hardware orders
         * them: the error, then the flushed receives. */
        if (wc.status != IBV_WC_SUCCESS && qp->state != IBV_QPS_ERR)
            emu_qp_error(q);
    }
    if (rc != 0 && bad_wr != NULL)
        *bad_wr = wr;
    emu_unlock();
    return rc;
}

static int emu_memlock_limit(uint64_t *bytes)
{
    emu_lock();
    *bytes = E.memlock;
    emu_unlock();
    return 0;
}

static const rdma_verbs emu_table = {
    .name = "emu",
    .get_device_list = emu_get_device_list,
    .free_device_list = emu_free_device_list,
    .get_device_name = emu_get_device_name,
    .open_device = emu_open_device,
    .close_device = emu_close_device,
    .port_count = emu_port_count,
    .query_port = emu_query_port,
    .query_gid = emu_query_gid,
    .alloc_pd = emu_alloc_pd,
    .dealloc_pd = emu_dealloc_pd,
    .reg_mr = emu_reg_mr,
    .dereg_mr = emu_dereg_mr,
    .create_cq = emu_create_cq,
    .destroy_cq = emu_destroy_cq,
    .create_qp = emu_create_qp,
    .modify_qp = emu_modify_qp,
    .destroy_qp = emu_destroy_qp,
    .post_send = emu_post_send,
    .post_recv = emu_post_recv,
    .poll_cq = emu_poll_cq,
    .memlock_limit = emu_memlock_limit,
};

const rdma_verbs *rdma_emu_verbs(void)
{
    return &emu_table;
}

void rdma_emu_reset(void)
{
    emu_lock();
    E.no_device = 0;
    E.port_down = 0;
    E.fail_reg_mr = 0;
    E.fail_create_qp = 0;
    E.memlock = UINT64_MAX;
    emu_unlock();
}

#define EMU_GETTER(name, field)                                                \
    size_t name(void)                                                          \
    {                                                                          \
        size_t n;                                                              \
        emu_lock();                                                            \
        n = E.field;                                                           \
        emu_unlock();                                                          \
        return n;                                                              \
    }
EMU_GETTER(rdma_emu_live_mrs, live_mrs)
EMU_GETTER(rdma_emu_live_qps, live_qps)
EMU_GETTER(rdma_emu_live_pds, live_pds)
EMU_GETTER(rdma_emu_live_cqs, live_cqs)
EMU_GETTER(rdma_emu_live_contexts, live_ctx)

void rdma_emu_set_no_device(int on)
{
    emu_lock();
    E.no_device = on;
    emu_unlock();
}

void rdma_emu_set_port_down(int on)
{
    emu_lock();
    E.port_down = on;
    emu_unlock();
}

void rdma_emu_fail_next_reg_mr(int err)
{
    emu_lock();
    E.fail_reg_mr = err;
    emu_unlock();
}

void rdma_emu_fail_next_create_qp(int err)
{
    emu_lock();
    E.fail_create_qp = err;
    emu_unlock();
}

void rdma_emu_set_memlock_limit(uint64_t bytes)
{
    emu_lock();
    E.memlock = bytes;
    emu_unlock();
}

int rdma_emu_vanish_qp(uint32_t qpn)
{
    int rc = -1;

    emu_lock();
    for (emu_qp *q = E.qps; q != NULL; q = q->next) {
        if (q->qp.qp_num == qpn && !q->vanished) {
            emu_qp_error(q);
            q->vanished = 1;
            rc = 0;
            break;
        }
    }
    emu_unlock();
    return rc;
}

size_t rdma_emu_qp_numbers(uint32_t *qpns, size_t max)
{
    size_t n = 0, i;

    emu_lock();
    for (emu_qp *q = E.qps; q != NULL; q = q->next)
        n++;
    /* The list is newest first: write it oldest first. */
    i = n;
    for (emu_qp *q = E.qps; q != NULL; q = q->next) {
        i--;
        if (i < max)
            qpns[i] = q->qp.qp_num;
    }
    emu_unlock();
    return n;
}
