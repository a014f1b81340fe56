/* What this node offers RDMA, from sysfs and getrlimit (no libibverbs). */
#include "rdma/probe.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/readfile.h"

/* A RoCE port lists a GID per address and version: reading the first ones
 * is enough to say whether it has any, and keeps a probe cheap. */
#define PROBE_GIDS_SCANNED 64
/* Path buffers, each the one it is built from plus the longest suffix
 * added, so no path is ever cut. */
#define PROBE_DEV_PATH                                                         \
    (sizeof(((rdma_probe *)0)->ib_dir) + RDMA_PROBE_NAME_MAX + 2)
#define PROBE_PORTS_PATH (PROBE_DEV_PATH + 8)
#define PROBE_PORT_PATH (PROBE_PORTS_PATH + 8)
#define PROBE_FILE_PATH (PROBE_PORT_PATH + 16)

/* Copy src into dst (len bytes), cut to fit: sysfs words are short, and
 * a longer one is kept in part rather than refused. */
static void copy_cut(char *dst, size_t len, const char *src)
{
    size_t n = strnlen(src, len - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* A GID line is eight groups of hex digits; all zero is an empty slot. */
static int gid_is_set(const char *line)
{
    for (const char *c = line; *c; c++)
        if (*c != ':' && *c != '0')
            return 1;
    return 0;
}

static void probe_port(const char *portdir, rdma_probe_port *pt)
{
    char path[PROBE_FILE_PATH], line[128];
    const char *colon;

    snprintf(path, sizeof(path), "%s/state", portdir);
    flps_read_line(path, line, sizeof(line));
    /* "4: ACTIVE": the number is what ibv_port_state says, the word is for
     * people. */
    colon = strchr(line, ':');
    copy_cut(pt->state, sizeof(pt->state),
             colon ? colon + 1 + (colon[1] == ' ') : line);
    pt->active =
        strtol(line, NULL, 10) == 4 || strcmp(pt->state, "ACTIVE") == 0;
    if (pt->state[0] == '\0')
        snprintf(pt->state, sizeof(pt->state), "UNKNOWN");
    snprintf(path, sizeof(path), "%s/link_layer", portdir);
    flps_read_line(path, pt->link_layer, sizeof(pt->link_layer));
    pt->gids = 0;
    for (int g = 0; g < PROBE_GIDS_SCANNED; g++) {
        snprintf(path, sizeof(path), "%s/gids/%d", portdir, g);
        flps_read_line(path, line, sizeof(line));
        if (line[0] == '\0' && g > 0)
            break; /* past the table's end */
        if (line[0] != '\0' && gid_is_set(line))
            pt->gids++;
    }
}

static int port_cmp(const void *a, const void *b)
{
    const rdma_probe_port *x = a, *y = b;

    return (int)x->num - (int)y->num;
}

static int dev_cmp(const void *a, const void *b)
{
    return strcmp(((const rdma_probe_dev *)a)->name,
                  ((const rdma_probe_dev *)b)->name);
}

static void probe_dev(const char *devdir, rdma_probe_dev *d)
{
    char path[PROBE_PORTS_PATH];
    DIR *dir;
    struct dirent *e;

    d->nports = 0;
    snprintf(path, sizeof(path), "%s/ports", devdir);
    dir = opendir(path);
    if (dir == NULL)
        return;
    while ((e = readdir(dir)) != NULL && d->nports < RDMA_PROBE_MAX_PORTS) {
        char *end;
        long num = strtol(e->d_name, &end, 10);
        char portdir[PROBE_PORT_PATH];

        if (e->d_name[0] == '.' || *end != '\0' || num < 1 || num > 255)
            continue;
        memset(&d->ports[d->nports], 0, sizeof(d->ports[0]));
        d->ports[d->nports].num = (uint8_t)num;
        snprintf(portdir, sizeof(portdir), "%s/%ld", path, num);
        probe_port(portdir, &d->ports[d->nports]);
        d->nports++;
    }
    closedir(dir);
    qsort(d->ports, d->nports, sizeof(d->ports[0]), port_cmp);
}

flps_err rdma_probe_run(const char *sysfs_root, rdma_probe *out)
{
    const char *root = sysfs_root;
    struct rlimit rl;
    DIR *dir;
    struct dirent *e;
    int n;

    if (out == NULL)
        return FLPS_EINVAL;
    if (root == NULL)
        root = getenv(RDMA_PROBE_SYSFS_ENV);
    if (root == NULL || root[0] == '\0')
        root = "/sys";
    memset(out, 0, sizeof(*out));
    n = snprintf(out->ib_dir, sizeof(out->ib_dir), "%s/class/infiniband", root);
    if (n < 0 || (size_t)n >= sizeof(out->ib_dir))
        return FLPS_EINVAL;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        out->memlock = -1;
    else
        out->memlock = (int64_t)rl.rlim_cur;
    dir = opendir(out->ib_dir);
    if (dir == NULL)
        return FLPS_OK;
    out->ib_dir_present = 1;
    while ((e = readdir(dir)) != NULL && out->ndevs < RDMA_PROBE_MAX_DEVS) {
        rdma_probe_dev *d = &out->devs[out->ndevs];
        char devdir[PROBE_DEV_PATH];

        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(d->name))
            continue;
        copy_cut(d->name, sizeof(d->name), e->d_name);
        snprintf(devdir, sizeof(devdir), "%s/%s", out->ib_dir, d->name);
        probe_dev(devdir, d);
        out->ndevs++;
    }
    closedir(dir);
    qsort(out->devs, out->ndevs, sizeof(out->devs[0]), dev_cmp);
    return FLPS_OK;
}

size_t rdma_probe_active_ports(const rdma_probe *p)
{
    size_t n = 0;

    for (size_t i = 0; p != NULL && i < p->ndevs; i++)
        for (size_t k = 0; k < p->devs[i].nports; k++)
            n += p->devs[i].ports[k].active != 0;
    return n;
}

int rdma_probe_first_active(const rdma_probe *p, const char **dev,
                            uint8_t *port)
{
    for (size_t i = 0; p != NULL && i < p->ndevs; i++)
        for (size_t k = 0; k < p->devs[i].nports; k++)
            if (p->devs[i].ports[k].active) {
                if (dev != NULL)
                    *dev = p->devs[i].name;
                if (port != NULL)
                    *port = p->devs[i].ports[k].num;
                return 1;
            }
    return 0;
}

/* snprintf at *off into buf, never past len. */
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*off >= len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    *off += (size_t)n < len - *off ? (size_t)n : len - *off - 1;
}

char *rdma_probe_active_list(const rdma_probe *p, char *buf, size_t len)
{
    size_t off = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; p != NULL && i < p->ndevs; i++)
        for (size_t k = 0; k < p->devs[i].nports; k++)
            if (p->devs[i].ports[k].active)
                append(buf, len, &off, "%s%s:%u", off ? "," : "",
                       p->devs[i].name, (unsigned)p->devs[i].ports[k].num);
    return buf;
}

char *rdma_probe_describe(const rdma_probe *p, char *buf, size_t len)
{
    size_t off = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    if (p == NULL || p->ndevs == 0) {
        append(buf, len, &off, "no RDMA device");
        return buf;
    }
    for (size_t i = 0; i < p->ndevs; i++) {
        const rdma_probe_dev *d = &p->devs[i];

        if (d->nports == 0)
            append(buf, len, &off, "%s%s (no ports)", i ? "; " : "", d->name);
        for (size_t k = 0; k < d->nports; k++)
            append(buf, len, &off, "%s%s port %u %s %s %u GID%s",
                   i || k ? "; " : "", d->name, (unsigned)d->ports[k].num,
                   d->ports[k].state,
                   d->ports[k].link_layer[0] ? d->ports[k].link_layer
                                             : "(link layer unknown)",
                   d->ports[k].gids, d->ports[k].gids == 1 ? "" : "s");
    }
    return buf;
}

char *rdma_probe_format_bytes(int64_t bytes, char *buf, size_t len)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    size_t u = 0;

    if (bytes < 0) {
        snprintf(buf, len, "unlimited");
        return buf;
    }
    while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lld bytes", (long long)bytes);
    else if (v == (double)(int64_t)v)
        snprintf(buf, len, "%lld %s", (long long)v, unit[u]);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}

int rdma_probe_usable(const rdma_probe *p, uint64_t min_memlock, char *why,
                      size_t whylen)
{
    char have[32], need[32], desc[512];
    int active_without_gid = 0;

    if (p == NULL) {
        flps_errbuf_set(why, whylen, FLPS_EINVAL, "no probe of the node");
        return 0;
    }
    if (p->ndevs == 0) {
        flps_errbuf_set(why, whylen, FLPS_ECONFIG,
                        "no RDMA device on this node (%s %s); run on nodes "
                        "with RDMA NICs (check with ibv_devinfo), or set "
                        "transport: zmq or auto",
                        p->ib_dir,
                        p->ib_dir_present ? "is empty" : "does not exist");
        return 0;
    }
    for (size_t i = 0; i < p->ndevs; i++)
        for (size_t k = 0; k < p->devs[i].nports; k++) {
            const rdma_probe_port *pt = &p->devs[i].ports[k];

            if (pt->active && pt->gids == 0)
                active_without_gid = 1;
            if (pt->active && pt->gids > 0)
                goto port_ok;
        }
    rdma_probe_describe(p, desc, sizeof(desc));
    if (active_without_gid)
        flps_errbuf_set(why, whylen, FLPS_ECONFIG,
                        "no RDMA port with an address on this node (%s); on "
                        "RoCE give the interface an IP address (check with "
                        "ibv_devinfo -v), or set transport: zmq or auto",
                        desc);
    else
        flps_errbuf_set(why, whylen, FLPS_ECONFIG,
                        "no RDMA port is ACTIVE on this node (%s); check the "
                        "cable and the subnet manager (ibstat, ibv_devinfo), "
                        "or set transport: zmq or auto",
                        desc);
    return 0;
port_ok:
    if (min_memlock > 0 && p->memlock >= 0 &&
        (uint64_t)p->memlock < min_memlock) {
        rdma_probe_format_bytes(p->memlock, have, sizeof(have));
        rdma_probe_format_bytes((int64_t)min_memlock, need, sizeof(need));
        flps_errbuf_set(
            why, whylen, FLPS_ECONFIG,
            "the memlock limit is %s and RDMA needs at least %s (%llu bytes) "
            "for its registered buffers; raise it with `ulimit -l unlimited` "
            "(or memlock in /etc/security/limits.conf, LimitMEMLOCK= for a "
            "systemd unit), give the container IPC_LOCK (Helm: "
            "agent.rdma.enabled=true), or set transport: zmq or auto",
            have, need, (unsigned long long)min_memlock);
        return 0;
    }
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    return 1;
}
