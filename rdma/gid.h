/* Which GID a RoCE port's queue pairs use. On RoCE the GID table holds a
 * link-local entry and one per IP address of the interface, often once per
 * RoCE version (mlx5: v1 then v2 for each); an IPv4-mapped entry routes
 * where a link-local one does not, and the later of two equal entries is
 * the RoCE v2 one on the common drivers. No I/O: it reads a table the
 * caller queried. */
#ifndef FLPS_RDMA_GID_H
#define FLPS_RDMA_GID_H

#include <infiniband/verbs.h>

/* The index to use among n entries of tbl: the last IPv4-mapped
 * (::ffff:a.b.c.d) entry, else the first non-zero one, else 0. */
int rdma_gid_pick(const union ibv_gid *tbl, int n);

#endif
