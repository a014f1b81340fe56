/* Tests for rdma/gid.c: a RoCE port's queue pairs use an IPv4-mapped GID
 * (the RoCE v2 one where a driver lists both) over a link-local one. */
#include "rdma/gid.h"

#include <criterion/criterion.h>
#include <string.h>

static void v4(union ibv_gid *g, unsigned char last)
{
    memset(g, 0, sizeof(*g));
    g->raw[10] = g->raw[11] = 0xff;
    g->raw[12] = 10;
    g->raw[15] = last;
}

static void link_local(union ibv_gid *g)
{
    memset(g, 0, sizeof(*g));
    g->raw[0] = 0xfe;
    g->raw[1] = 0x80;
    g->raw[15] = 7;
}

Test(gid, prefers_the_last_ipv4_mapped_entry)
{
    union ibv_gid t[4];

    link_local(&t[0]); /* mlx5: v1 link-local, v2 link-local, v1, v2 */
    link_local(&t[1]);
    v4(&t[2], 1);
    v4(&t[3], 1);
    cr_assert_eq(rdma_gid_pick(t, 4), 3);
}

Test(gid, takes_a_link_local_entry_when_there_is_no_other)
{
    union ibv_gid t[3];

    memset(t, 0, sizeof(t));
    link_local(&t[1]);
    cr_assert_eq(rdma_gid_pick(t, 3), 1);
}

Test(gid, an_empty_table_gives_index_0)
{
    union ibv_gid t[2];

    memset(t, 0, sizeof(t));
    cr_assert_eq(rdma_gid_pick(t, 2), 0);
    cr_assert_eq(rdma_gid_pick(t, 0), 0);
}
