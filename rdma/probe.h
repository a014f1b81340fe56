/* What this node offers RDMA, read from sysfs and getrlimit alone (no
 * libibverbs, so it builds and answers everywhere): the devices under
 * /sys/class/infiniband, each port's state, link layer and GIDs, and the
 * RLIMIT_MEMLOCK the registered buffers must fit in. flagent reports it,
 * flrun, flps and the client decide transport: rdma | auto with it.
 *
 * The sysfs root is a parameter so tests can fake a node with devices:
 * rdma_probe_run(NULL, ...) reads $FLPS_SYSFS_ROOT when set (for tests
 * only; docs/rdma.md) and /sys otherwise. */
#ifndef FLPS_RDMA_PROBE_H
#define FLPS_RDMA_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RDMA_PROBE_MAX_DEVS 16
#define RDMA_PROBE_MAX_PORTS 8
#define RDMA_PROBE_NAME_MAX 64
/* The environment variable naming a fake sysfs root, for tests. */
#define RDMA_PROBE_SYSFS_ENV "FLPS_SYSFS_ROOT"

typedef struct rdma_probe_port {
    uint8_t num;         /* the port number (1-based, as ibv_devinfo) */
    int active;          /* state "4: ACTIVE" */
    char state[24];      /* the state's name ("ACTIVE", "DOWN", ...) */
    char link_layer[24]; /* "InfiniBand", "Ethernet" or "" when unknown */
    uint32_t gids;       /* GID table entries that are not all zero */
} rdma_probe_port;

typedef struct rdma_probe_dev {
    char name[RDMA_PROBE_NAME_MAX];
    size_t nports;
    rdma_probe_port ports[RDMA_PROBE_MAX_PORTS];
} rdma_probe_dev;

typedef struct rdma_probe {
    char ib_dir[512];   /* the directory read: ROOT/class/infiniband */
    int ib_dir_present; /* 0: the kernel has no RDMA class at all */
    size_t ndevs;       /* at most RDMA_PROBE_MAX_DEVS (more are ignored) */
    rdma_probe_dev devs[RDMA_PROBE_MAX_DEVS];
    int64_t memlock; /* RLIMIT_MEMLOCK soft limit in bytes; -1 unlimited */
} rdma_probe;

/* Read the node into *out. sysfs_root NULL: $FLPS_SYSFS_ROOT or "/sys".
 * A missing directory is no error (ndevs = 0); an unreadable port file
 * leaves that field empty. Errors: FLPS_EINVAL (out NULL or a root too
 * long). Never allocates; does file I/O only. */
flps_err rdma_probe_run(const char *sysfs_root, rdma_probe *out);

/* Ports in the ACTIVE state, over every device. */
size_t rdma_probe_active_ports(const rdma_probe *p);

/* The first device with an ACTIVE port, and that port: 1 and *dev, *port
 * (borrowed from p), else 0. Either out-pointer may be NULL. */
int rdma_probe_first_active(const rdma_probe *p, const char **dev,
                            uint8_t *port);

/* "mlx5_0:1" for every ACTIVE port, comma-separated, into buf ("" when
 * none; cut to len). Returns buf. */
char *rdma_probe_active_list(const rdma_probe *p, char *buf, size_t len);

/* Every device and port with its state, link layer and GIDs, one short
 * phrase ("mlx5_0 port 1 ACTIVE InfiniBand 2 GIDs; mlx5_1 port 1 DOWN
 * Ethernet 0 GIDs"), or "no RDMA device" into buf. Returns buf. */
char *rdma_probe_describe(const rdma_probe *p, char *buf, size_t len);

/* Can RDMA run on this node? 1 when a port is ACTIVE and has a GID, and
 * the memlock limit is at least min_memlock bytes (0: not checked). 0
 * otherwise, with one line in why naming the cause and the fix, in the
 * words of the job file ("no RDMA device on this node (... is empty); run
 * on nodes with RDMA NICs (check with ibv_devinfo), or set transport: zmq
 * or auto"). why may be NULL. */
int rdma_probe_usable(const rdma_probe *p, uint64_t min_memlock, char *why,
                      size_t whylen);

/* "64 MiB", "unlimited", "512 KiB": a memlock number as people read it,
 * into buf. Returns buf. */
char *rdma_probe_format_bytes(int64_t bytes, char *buf, size_t len);

#endif
