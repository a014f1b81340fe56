/* Dropping root: resolve the user and group, then setgroups, setresgid,
 * setresuid, in that order, and check what the kernel says we are. */
#include "services/privdrop.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/numparse.h"
#include "services/fsutil.h"

#define PRIVDROP_BUF 16384

/* A number (uid or gid) the whole of s spells, or -1. */
static long long as_id(const char *s)
{
    uint64_t v;

    if (flps_parse_u64(NULL, s, 0, 0xfffffffeULL, &v, NULL, 0) != FLPS_OK)
        return -1;
    return (long long)v;
}

flps_err privdrop_resolve(const char *user, const char *group,
                          privdrop_target *out, char *errbuf, size_t errlen)
{
    char buf[PRIVDROP_BUF];
    struct passwd pw, *pwp = NULL;
    struct group gr, *grp = NULL;
    privdrop_target t;
    long long id;
    int have_gid = 0;

    memset(out, 0, sizeof(*out));
    memset(&t, 0, sizeof(t));
    if (user == NULL || user[0] == '\0')
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "--user needs a user name");
    if (strlen(user) >= sizeof(t.user) ||
        (group != NULL && strlen(group) >= sizeof(t.group)))
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--user/--group: the name is too long");
    snprintf(t.user, sizeof(t.user), "%s", user);
    id = as_id(user);
    if (id >= 0) {
        t.uid = (uid_t)id;
        if (getpwuid_r(t.uid, &pw, buf, sizeof(buf), &pwp) == 0 &&
            pwp != NULL) {
            t.gid = pwp->pw_gid;
            have_gid = 1;
        }
    } else {
        if (getpwnam_r(user, &pw, buf, sizeof(buf), &pwp) != 0 || pwp == NULL)
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "--user %s: no such user on this machine; "
                                   "give an existing user name or a numeric "
                                   "uid (with --group)",
                                   user);
        t.uid = pwp->pw_uid;
        t.gid = pwp->pw_gid;
        have_gid = 1;
    }
    if (group != NULL && group[0] != '\0') {
        snprintf(t.group, sizeof(t.group), "%s", group);
        id = as_id(group);
        if (id >= 0) {
            t.gid = (gid_t)id;
        } else if (getgrnam_r(group, &gr, buf, sizeof(buf), &grp) == 0 &&
                   grp != NULL) {
            t.gid = grp->gr_gid;
        } else {
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "--group %s: no such group on this "
                                   "machine; give an existing group name or "
                                   "a numeric gid",
                                   group);
        }
        have_gid = 1;
    } else if (have_gid) {
        if (getgrgid_r(t.gid, &gr, buf, sizeof(buf), &grp) == 0 && grp != NULL)
            snprintf(t.group, sizeof(t.group), "%s", grp->gr_name);
        else
            snprintf(t.group, sizeof(t.group), "%u", (unsigned)t.gid);
    }
    if (!have_gid)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--user %s: uid %s has no entry in the user "
                               "database, so it has no primary group; add "
                               "--group GID",
                               user, user);
    if (t.uid == 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--user %s is root (uid 0): that drops "
                               "nothing; give an unprivileged user",
                               user);
    t.set = 1;
    *out = t;
    return FLPS_OK;
}

flps_err privdrop_apply(const privdrop_target *t, char *errbuf, size_t errlen)
{
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    int ngroups;

    if (t == NULL || !t->set)
        return FLPS_OK;
    if (geteuid() != 0) {
        if (getuid() == t->uid && geteuid() == t->uid && getgid() == t->gid &&
            getegid() == t->gid) {
            log_info("already user %s (uid %u), group %s (gid %u): nothing "
                     "to drop",
                     t->user, (unsigned)t->uid, t->group, (unsigned)t->gid);
            return FLPS_OK;
        }
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--user %s needs root: this process runs as "
                               "uid %u; start it as root, or without --user",
                               t->user, (unsigned)geteuid());
    }
    /* Groups first: once the uid is not 0, they can no longer be changed. */
    if (setgroups(0, NULL) != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS, "setgroups: %s",
                               strerror(errno));
    if (setresgid(t->gid, t->gid, t->gid) != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS, "setresgid(%u): %s",
                               (unsigned)t->gid, strerror(errno));
    if (setresuid(t->uid, t->uid, t->uid) != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS, "setresuid(%u): %s",
                               (unsigned)t->uid, strerror(errno));
    /* Trust what the kernel reports, not the calls' return values. */
    if (getresuid(&ru, &eu, &su) != 0 || getresgid(&rg, &eg, &sg) != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                               "getresuid/getresgid: %s", strerror(errno));
    ngroups = getgroups(0, NULL);
    if (ru != t->uid || eu != t->uid || su != t->uid || rg != t->gid ||
        eg != t->gid || sg != t->gid || ngroups != 0)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ESYS,
            "the privilege drop did not hold: uids %u/%u/%u, gids %u/%u/%u, "
            "%d supplementary groups",
            (unsigned)ru, (unsigned)eu, (unsigned)su, (unsigned)rg,
            (unsigned)eg, (unsigned)sg, ngroups);
    if (setuid(0) == 0 || seteuid(0) == 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                               "uid 0 could be taken back after the drop");
    log_info("dropped privileges: now user %s (uid %u), group %s (gid %u), "
             "no supplementary groups",
             t->user, (unsigned)t->uid, t->group, (unsigned)t->gid);
    return FLPS_OK;
}

flps_err privdrop_own_dir(const privdrop_target *t, const char *what,
                          const char *dir, char *errbuf, size_t errlen)
{
    struct stat st;

    if (t == NULL || !t->set || geteuid() != 0)
        return FLPS_OK;
    if (stat(dir, &st) != 0) {
        if (flps_mkdirs(dir) != 0 || chown(dir, t->uid, t->gid) != 0)
            return flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                                   "cannot create %s %s for user %s: %s", what,
                                   dir, t->user, strerror(errno));
        return FLPS_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s %s is not a directory", what, dir);
    if (st.st_uid != t->uid)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "%s %s belongs to uid %u, but this daemon runs as --user %s "
            "(uid %u) once it has started and writes there: chown %s %s, or "
            "name a directory that does not exist yet (it is then made for "
            "%s)",
            what, dir, (unsigned)st.st_uid, t->user, (unsigned)t->uid, t->user,
            dir, t->user);
    return FLPS_OK;
}

void privdrop_warn_root(const privdrop_target *t, const char *daemon)
{
    if ((t == NULL || !t->set) && geteuid() == 0)
        log_warn("%s runs as root; give --user NAME to run it as an "
                 "unprivileged user once its sockets are open",
                 daemon);
}
