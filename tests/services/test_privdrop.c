/* Dropping root (services/privdrop.c): resolving --user/--group, and the
 * drop itself in a forked child when the test runs as root. */
#include <criterion/criterion.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "services/privdrop.h"

Test(privdrop, resolves_a_user_and_its_primary_group)
{
    struct passwd *pw = getpwnam("nobody");
    privdrop_target t;
    char err[256];

    cr_assert_not_null(pw, "this machine has no user nobody");
    cr_assert_eq(privdrop_resolve("nobody", NULL, &t, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert(t.set);
    cr_assert_eq(t.uid, pw->pw_uid);
    cr_assert_eq(t.gid, pw->pw_gid);
    cr_assert_str_eq(t.user, "nobody");
    cr_assert_eq(privdrop_resolve("65534", "12345", &t, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_eq(t.uid, 65534);
    cr_assert_eq(t.gid, 12345);
}

Test(privdrop, refuses_unknown_users_groups_and_root_with_a_reason)
{
    privdrop_target t;
    char err[256];

    cr_assert_eq(privdrop_resolve("no-such-user-x", NULL, &t, err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert(strstr(err, "no such user") != NULL, "%s", err);
    cr_assert_eq(t.set, 0);
    cr_assert_eq(
        privdrop_resolve("nobody", "no-such-group-x", &t, err, sizeof(err)),
        FLPS_ECONFIG);
    cr_assert(strstr(err, "no such group") != NULL, "%s", err);
    cr_assert_eq(privdrop_resolve("root", NULL, &t, err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert(strstr(err, "drops nothing") != NULL, "%s", err);
    /* A uid nobody has an entry for has no primary group to take. */
    cr_assert_eq(privdrop_resolve("4000123", NULL, &t, err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert(strstr(err, "add --group") != NULL, "%s", err);
    cr_assert_eq(privdrop_resolve("", NULL, &t, err, sizeof(err)), FLPS_EINVAL);
}

Test(privdrop, drops_every_id_and_every_supplementary_group)
{
    privdrop_target t;
    char err[256];
    pid_t pid;
    int st;

    if (geteuid() != 0)
        cr_skip_test("needs root");
    cr_assert_eq(privdrop_resolve("nobody", NULL, &t, err, sizeof(err)),
                 FLPS_OK);
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        gid_t extra = 4242;
        uid_t r, e, s;

        /* Start with a supplementary group, to see it go. */
        if (setgroups(1, &extra) != 0)
            _exit(10);
        if (privdrop_apply(&t, err, sizeof(err)) != FLPS_OK)
            _exit(11);
        if (getresuid(&r, &e, &s) != 0 || r != t.uid || e != t.uid ||
            s != t.uid)
            _exit(12);
        if (getgid() != t.gid || getegid() != t.gid || getgroups(0, NULL) != 0)
            _exit(13);
        if (setuid(0) == 0)
            _exit(14);
        /* Applying again as the user is a no-op, not an error. */
        if (privdrop_apply(&t, err, sizeof(err)) != FLPS_OK)
            _exit(15);
        _exit(0);
    }
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st));
    cr_assert_eq(WEXITSTATUS(st), 0, "step %d of the drop failed",
                 WEXITSTATUS(st));
}

Test(privdrop, gives_a_new_dir_to_the_user_and_refuses_one_of_root)
{
    char base[] = "/tmp/flps-privdrop-XXXXXX", sub[128], err[512];
    privdrop_target t;
    struct stat st;

    if (geteuid() != 0)
        cr_skip_test("needs root");
    cr_assert_not_null(mkdtemp(base));
    cr_assert_eq(privdrop_resolve("nobody", NULL, &t, err, sizeof(err)),
                 FLPS_OK);
    snprintf(sub, sizeof(sub), "%s/work", base);
    cr_assert_eq(privdrop_own_dir(&t, "--work-dir", sub, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_eq(stat(sub, &st), 0);
    cr_assert_eq(st.st_uid, t.uid);
    cr_assert_eq(st.st_gid, t.gid);
    /* base exists and is root's. */
    cr_assert_eq(privdrop_own_dir(&t, "--work-dir", base, err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert(strstr(err, "chown nobody") != NULL, "%s", err);
    rmdir(sub);
    rmdir(base);
}
