/* services/fsutil and the files the services create: private modes. */
#include "services/fsutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "services/procs.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/flps-fsutil-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    umask(022); /* the usual umask, which leaves 0644 files world-readable */
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        cr_log_warn("could not remove %s", dir);
}

static unsigned mode_of(const char *path)
{
    struct stat st;

    cr_assert_eq(stat(path, &st), 0, "%s is missing", path);
    return (unsigned)(st.st_mode & 07777);
}

TestSuite(fsutil, .init = setup, .fini = teardown);

Test(fsutil, mkdirs_makes_every_missing_directory_private)
{
    char a[128], b[128];

    snprintf(a, sizeof(a), "%s/a", dir);
    snprintf(b, sizeof(b), "%s/a/b/c", dir);
    cr_assert_eq(chmod(dir, 0755), 0);
    cr_assert_eq(flps_mkdirs(b), 0);
    cr_assert_eq(mode_of(a), 0700);
    cr_assert_eq(mode_of(b), 0700);
    cr_assert_eq(mode_of(dir), 0755, "an existing one keeps its mode");
    cr_assert_eq(flps_mkdirs(b), 0, "existing is fine");
}

Test(fsutil, a_child_log_is_readable_by_its_owner_only)
{
    char log[128];
    char *argv[] = {"/bin/sh", "-c", "echo to-stderr >&2", NULL};
    proc p;
    int status = 0;

    snprintf(log, sizeof(log), "%s/child.log", dir);
    cr_assert_eq(proc_start(&p, "sh", argv, log), FLPS_OK);
    cr_assert_eq(waitpid(p.pid, &status, 0), p.pid);
    close(p.out_fd);
    cr_assert_eq(mode_of(log), 0600);
}
