/* Credit accounting (credit.h). */
#include "rdma/credit.h"

void rdma_credit_init(rdma_credit *c, uint32_t window)
{
    c->window = window;
    c->sent = 0;
    c->returned = 0;
}

uint32_t rdma_credit_available(const rdma_credit *c)
{
    /* sent <= window + returned always holds (take checks it). */
    return (uint32_t)(c->window + c->returned - c->sent);
}

flps_err rdma_credit_take(rdma_credit *c)
{
    if (rdma_credit_available(c) == 0)
        return FLPS_ESTATE;
    c->sent++;
    return FLPS_OK;
}

flps_err rdma_credit_return(rdma_credit *c, uint64_t returned)
{
    if (returned > c->sent)
        return FLPS_EPROTO;
    if (returned > c->returned)
        c->returned = returned;
    return FLPS_OK;
}

void rdma_credit_rx_init(rdma_credit_rx *r, uint32_t window)
{
    r->reposted = 0;
    r->advertised = 0;
    r->threshold = window / 2 > 0 ? window / 2 : 1;
}

void rdma_credit_rx_reposted(rdma_credit_rx *r)
{
    r->reposted++;
}

int rdma_credit_rx_update_is_due(const rdma_credit_rx *r, int idle)
{
    uint64_t pending = r->reposted - r->advertised;

    return pending >= r->threshold || (idle && pending > 0);
}

uint64_t rdma_credit_rx_advertise(rdma_credit_rx *r)
{
    r->advertised = r->reposted;
    return r->reposted;
}
