/* A fake /sys for the RDMA probe (rdma/probe.h): a temporary directory
 * with class/infiniband/DEV/ports/N/{state,link_layer,gids/K}, so tests
 * see a node with devices this machine does not have. Header-only, for
 * the tests of every folder. */
#ifndef FLPS_TESTS_FAKE_SYSFS_H
#define FLPS_TESTS_FAKE_SYSFS_H

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct fake_sysfs {
    char root[256];
} fake_sysfs;

static inline void fake_sysfs_mkdirs(const char *path)
{
    char tmp[1024];

    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static inline void fake_sysfs_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* A root with class/infiniband present and empty (with_class) or absent. */
static inline void fake_sysfs_init(fake_sysfs *s, int with_class)
{
    char dir[512];
    const char *tmp = getenv("TMPDIR");

    snprintf(s->root, sizeof(s->root), "%s/flps-sysfs-XXXXXX",
             tmp ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(s->root));
    /* Readable by the job uids a root flagent runs tasks as, as /sys is. */
    cr_assert_eq(chmod(s->root, 0755), 0);
    if (with_class) {
        snprintf(dir, sizeof(dir), "%s/class/infiniband", s->root);
        fake_sysfs_mkdirs(dir);
    }
}

/* Add port `port` of device dev: state as sysfs writes it ("4: ACTIVE",
 * "1: DOWN"), link layer, and gids GID entries that are set (then two
 * all-zero ones, as a real table has empty slots). */
static inline void fake_sysfs_port(fake_sysfs *s, const char *dev,
                                   unsigned port, const char *state,
                                   const char *link, unsigned gids)
{
    char dir[512], path[600];

    snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports/%u/gids", s->root,
             dev, port);
    fake_sysfs_mkdirs(dir);
    snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports/%u", s->root, dev,
             port);
    snprintf(path, sizeof(path), "%s/state", dir);
    fake_sysfs_write(path, state);
    snprintf(path, sizeof(path), "%s/link_layer", dir);
    fake_sysfs_write(path, link);
    for (unsigned g = 0; g < gids + 2; g++) {
        char gid[64];

        snprintf(path, sizeof(path), "%s/gids/%u", dir, g);
        snprintf(gid, sizeof(gid),
                 g < gids ? "fe80:0000:0000:0000:0202:c9ff:fe00:%04x\n"
                          : "0000:0000:0000:0000:0000:0000:0000:0000\n",
                 g + 1);
        fake_sysfs_write(path, gid);
    }
}

static inline void fake_sysfs_fini(fake_sysfs *s)
{
    char cmd[300];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->root);
    cr_assert_eq(system(cmd), 0);
}

#endif
