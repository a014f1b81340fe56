/* Dropping root for the daemons (flsched, flagent, flps): --user NAME
 * [--group NAME] resolved at start, applied once the sockets are bound and
 * what needs root is open, and checked afterwards. */
#ifndef FLPS_SERVICES_PRIVDROP_H
#define FLPS_SERVICES_PRIVDROP_H

#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

/* Who to become. Zeroed: nobody was asked for (set == 0). */
typedef struct privdrop_target {
    int set;
    uid_t uid;
    gid_t gid;
    char user[64];  /* the name, or the number as given */
    char group[64]; /* likewise */
} privdrop_target;

/* Resolve user (a name or a numeric uid) and group (a name or a numeric
 * gid; NULL or "": the user's primary group) into *out. A numeric uid with
 * no passwd entry needs group. Errors: FLPS_ECONFIG with the reason in
 * errbuf ("no user 'x' on this machine"), FLPS_EINVAL (user NULL or "").
 * Does not change anything; may read /etc/passwd and /etc/group (or NSS).
 * On error *out is zeroed. */
flps_err privdrop_resolve(const char *user, const char *group,
                          privdrop_target *out, char *errbuf, size_t errlen);

/* Become t: drop every supplementary group, then set the real, effective
 * and saved group and user ids to t's, and check the result (getresuid,
 * getresgid, no supplementary group left, and that uid 0 cannot be taken
 * back). Applies to every thread of the process (glibc). Logs one line,
 * "dropped privileges: now user U (uid N), group G (gid M)". Not root: a
 * t that is already what the process is succeeds without change (logged);
 * anything else is FLPS_ECONFIG ("--user needs root"). A failed call is
 * FLPS_ESYS, and the process must stop: it may be half-dropped. t not
 * set: nothing is done (FLPS_OK). Message in errbuf. */
flps_err privdrop_apply(const privdrop_target *t, char *errbuf, size_t errlen);

/* Before privdrop_apply(t): dir (named what in messages, "--work-dir")
 * must be t's, as the daemon writes there as t. A dir this call creates
 * (with its missing parents, mode 0700) is given to t; one that exists and
 * is not t's is refused (FLPS_ECONFIG: "chown USER DIR, or name a
 * directory that does not exist yet"); what cannot be created is
 * FLPS_ESYS. Nothing is done (FLPS_OK) when t is not set or the process is
 * not root. Message in errbuf. */
flps_err privdrop_own_dir(const privdrop_target *t, const char *what,
                          const char *dir, char *errbuf, size_t errlen);

/* Log, once, that daemon runs as root without --user (a warning), when
 * the effective uid is 0 and t is not set. */
void privdrop_warn_root(const privdrop_target *t, const char *daemon);

#endif
