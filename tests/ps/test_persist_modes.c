/* ps/persist: checkpoints and write-ahead logs are the job's alone. */
#include "ps/persist.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned mode_of(const char *path)
{
    struct stat st;

    cr_assert_eq(stat(path, &st), 0, "%s is missing", path);
    return (unsigned)(st.st_mode & 07777);
}

Test(persist_modes, checkpoints_and_logs_are_created_0600)
{
    char dir[64], ckpt[256], wal[256], cmd[128];
    float v[4] = {1, 2, 3, 4};
    ckpt_part part = {0, 4, 1, 1, v, 0, NULL, 0, NULL};
    int fd = -1;

    umask(022);
    snprintf(dir, sizeof(dir), "/tmp/flps-persist-modes-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    persist_paths(dir, 0, ckpt, wal, sizeof(ckpt));
    cr_assert_eq(ckpt_write(ckpt, "m", 1, &part, 1), FLPS_OK);
    cr_assert_eq(wal_open(wal, &fd), FLPS_OK);
    close(fd);
    cr_assert_eq(mode_of(ckpt), 0600);
    cr_assert_eq(mode_of(wal), 0600);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
