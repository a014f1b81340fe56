/* Pool sizing, the memlock check and registered regions (pool.h). */
#include "rdma/pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "rdma/exchange.h"
#include "rdma/frame.h"

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

flps_err rdma_pool_plan_make(size_t max_message_bytes, uint32_t credits,
                             rdma_pool_plan *out, char *why, size_t whylen)
{
    /* A message of any frame count fits: the largest header and the
     * padding of every frame come on top of the payload. */
    const size_t over =
        rdma_frame_header_bytes(RDMA_FRAME_MAX) + 8 * RDMA_FRAME_MAX;
    rdma_pool_plan p;
    size_t need;

    if (credits == 0 || credits > RDMA_XCH_MAX_CREDITS)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "%u RDMA credits: give 1..%d", credits,
                               RDMA_XCH_MAX_CREDITS);
    if (max_message_bytes > RDMA_XCH_MAX_LANDING - over - 4096)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "largest message of %zu bytes is beyond what "
                               "the RDMA transport can register (2^40)",
                               max_message_bytes);
    need = max_message_bytes + over;
    memset(&p, 0, sizeof(p));
    p.credits = credits;
    p.slot_bytes = round_up(need, RDMA_SLOT_BYTES_MIN);
    if (p.slot_bytes > RDMA_SLOT_BYTES_MAX) {
        p.slot_bytes = RDMA_SLOT_BYTES_MAX;
        p.landing_bytes = round_up(need, 4096);
    }
    p.peer_bytes = 2 * (uint64_t)credits * p.slot_bytes +
                   2 * (uint64_t)p.landing_bytes + 2 * RDMA_CTRL_BYTES;
    *out = p;
    return FLPS_OK;
}

static void fmt_bytes(char *buf, size_t len, uint64_t b)
{
    if (b >= ((uint64_t)1 << 30))
        snprintf(buf, len, "%.1f GiB", (double)b / (1 << 30));
    else if (b >= ((uint64_t)1 << 20))
        snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
    else
        snprintf(buf, len, "%.1f KiB", (double)b / (1 << 10));
}

flps_err rdma_pool_memlock_check(uint64_t locked, uint64_t need, uint64_t limit,
                                 char *why, size_t whylen)
{
    char total_s[32], limit_s[32];
    uint64_t total = locked + need;

    if (limit == UINT64_MAX || (total >= locked && total <= limit))
        return FLPS_OK;
    fmt_bytes(total_s, sizeof(total_s), total);
    fmt_bytes(limit_s, sizeof(limit_s), limit);
    return flps_errbuf_set(
        why, whylen, FLPS_ENOMEM,
        "the RDMA buffer pools need %llu bytes (%s) of locked memory but "
        "the memlock limit (RLIMIT_MEMLOCK) is %llu bytes (%s): raise it "
        "with `ulimit -l unlimited` (or at least `ulimit -l %llu`, in KiB) "
        "where the process starts, give its container the IPC_LOCK "
        "capability, or on Kubernetes set the Helm value "
        "agent.rdma.enabled=true (IPC_LOCK for the pods); or lower the "
        "job's largest message",
        (unsigned long long)total, total_s, (unsigned long long)limit, limit_s,
        (unsigned long long)((total + 1023) / 1024));
}

flps_err rdma_region_init(rdma_region *r, const rdma_verbs *v,
                          struct ibv_pd *pd, size_t len, int access, char *why,
                          size_t whylen)
{
    void *mem = NULL;
    size_t alen = round_up(len, 4096);

    memset(r, 0, sizeof(*r));
    /* Page-aligned: registration pins whole pages anyway. */
    if (posix_memalign(&mem, 4096, alen) != 0)
        return flps_errbuf_set(why, whylen, FLPS_ENOMEM,
                               "out of memory for an RDMA buffer of %zu "
                               "bytes",
                               alen);
    memset(mem, 0, alen);
    r->mr = v->reg_mr(pd, mem, alen, access);
    if (r->mr == NULL) {
        int e = errno;
        free(mem);
        if (e == ENOMEM || e == EPERM || e == EAGAIN)
            return flps_errbuf_set(
                why, whylen, FLPS_ENOMEM,
                "registering %zu bytes of RDMA memory failed (%s): the "
                "memlock limit is too low or the device is out of "
                "resources; raise it with `ulimit -l unlimited`, give the "
                "container the IPC_LOCK capability, or on Kubernetes set "
                "the Helm value agent.rdma.enabled=true",
                alen, strerror(e));
        return flps_errbuf_set(why, whylen, FLPS_ESYS,
                               "registering %zu bytes of RDMA memory "
                               "failed: %s",
                               alen, strerror(e));
    }
    r->addr = mem;
    r->len = alen;
    return FLPS_OK;
}

void rdma_region_dereg(rdma_region *r, const rdma_verbs *v)
{
    if (r->mr != NULL)
        v->dereg_mr(r->mr);
    r->mr = NULL;
}

void rdma_region_fini(rdma_region *r, const rdma_verbs *v)
{
    rdma_region_dereg(r, v);
    free(r->addr);
    r->addr = NULL;
    r->len = 0;
}

flps_err rdma_slots_init(rdma_slots *s, const rdma_verbs *v, struct ibv_pd *pd,
                         uint32_t n, size_t slot_bytes, int access, char *why,
                         size_t whylen)
{
    flps_err rc;

    memset(s, 0, sizeof(*s));
    if (n == 0 || slot_bytes == 0 || slot_bytes % 8 != 0 ||
        slot_bytes > SIZE_MAX / n)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "a pool of %u slots of %zu bytes", n,
                               slot_bytes);
    s->free = flps_malloc(n * sizeof(*s->free));
    if (s->free == NULL)
        return flps_errbuf_set(why, whylen, FLPS_ENOMEM,
                               "out of memory for an RDMA slot pool");
    rc = rdma_region_init(&s->reg, v, pd, (size_t)n * slot_bytes, access, why,
                          whylen);
    if (rc != FLPS_OK) {
        flps_free(s->free);
        s->free = NULL;
        return rc;
    }
    s->n = n;
    s->slot_bytes = slot_bytes;
    for (uint32_t i = 0; i < n; i++)
        s->free[i] = n - 1 - i; /* slot 0 first */
    s->nfree = n;
    return FLPS_OK;
}

void rdma_slots_fini(rdma_slots *s, const rdma_verbs *v)
{
    rdma_region_fini(&s->reg, v);
    flps_free(s->free);
    memset(s, 0, sizeof(*s));
}

flps_err rdma_slots_get(rdma_slots *s, uint32_t *slot)
{
    if (s->nfree == 0)
        return FLPS_ESTATE;
    *slot = s->free[--s->nfree];
    return FLPS_OK;
}

void rdma_slots_put(rdma_slots *s, uint32_t slot)
{
    s->free[s->nfree++] = slot;
}
