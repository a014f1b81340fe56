/* The GID choice for RoCE ports (gid.h). */
#include "rdma/gid.h"

#include <string.h>

static int gid_is_zero(const union ibv_gid *g)
{
    static const unsigned char zero[16];
    return memcmp(g->raw, zero, 16) == 0;
}

static int gid_is_v4_mapped(const union ibv_gid *g)
{
    static const unsigned char prefix[12] = {0, 0, 0, 0, 0,    0,
                                             0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g->raw, prefix, 12) == 0 && !gid_is_zero(g);
}

int rdma_gid_pick(const union ibv_gid *tbl, int n)
{
    int first = -1, v4 = -1;

    for (int i = 0; i < n; i++) {
        if (gid_is_zero(&tbl[i]))
            continue;
        if (first < 0)
            first = i;
        if (gid_is_v4_mapped(&tbl[i]))
            v4 = i;
    }
    if (v4 >= 0)
        return v4;
    return first >= 0 ? first : 0;
}
