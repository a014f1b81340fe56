/* Per-job uids for flagent's tasks (docs/flagent.md, "Isolation between
 * jobs"), as systemd's DynamicUser gives a service a uid of its own: every
 * job with a task on the machine holds one uid from --job-uids (its gid is
 * the same number), so one job's processes can neither read another's
 * files nor signal its processes. Which job holds which uid is recorded in
 * --job-uids-dir, one file per uid, under a lock every flagent of the
 * machine takes: two agents on one machine give a job the same uid (they
 * may share its checkpoint directory), and a restarted agent takes its
 * jobs' uids back. A uid nobody holds any more is freed: every process
 * still running under it is killed, and the job's directories go back to
 * the agent, so the next job given that uid finds nothing of the last.
 * Needs root; single-threaded like the agent. */
#ifndef FLPS_SCHED_AGENT_UIDS_H
#define FLPS_SCHED_AGENT_UIDS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

typedef struct agent_uids agent_uids;

/* Everything borrowed for agent_uids_open (copied). */
typedef struct agent_uids_cfg {
    const char *dir;       /* the records (made mode 0700 if missing) */
    uint32_t first, last;  /* the range, inclusive */
    const char *cluster;   /* whose job ids these are (Redis's address):
                              two clusters' "j1" are two jobs */
    const char *work_dir;  /* this agent's: {work_dir}/{job} is the job's */
    const char *ckpt_root; /* {ckpt_root}/{job} is the job's (servers) */
} agent_uids_cfg;

/* Open the records: make the directory, take back the uids this agent's
 * work dir held before a restart (an agent that died; kept until
 * agent_uids_sweep), and free those whose agents are all gone. Drops the
 * process's supplementary groups, which would otherwise come along into
 * the job's files. Errors: FLPS_ECONFIG (not root, a path with a newline),
 * FLPS_ESYS (the directory or its lock), FLPS_ENOMEM; message in errbuf.
 * Caller owns *out (agent_uids_close). */
flps_err agent_uids_open(const agent_uids_cfg *cfg, agent_uids **out,
                         char *errbuf, size_t errlen);

/* Release every job this agent holds (agent_uids_release), then free u.
 * Call once the tasks are stopped. NULL does nothing. */
void agent_uids_close(agent_uids *u);

/* The uid of job on this machine: the one it holds, else a new one that
 * no job holds and no user or group has (its stray processes killed
 * first), searched from first + N for flsched's job id "jN" (from a hash
 * of other ids), so every machine of a cluster gives a job the same uid
 * unless it is taken there. Makes {work_dir}/{job} (and {ckpt_root}/{job}
 * for a server) the uid's, mode 0700, the whole tree when it was another
 * uid's. Errors: FLPS_ESTATE (every uid of the range is held),
 * FLPS_ESYS (a record or a directory), FLPS_EINVAL (job is not a job
 * id); message in errbuf. *uid written on FLPS_OK only. */
flps_err agent_uids_hold(agent_uids *u, const char *job, int server, uid_t *uid,
                         char *errbuf, size_t errlen);

/* This agent no longer runs tasks of job. When no agent of the machine
 * holds it, its uid is freed (see the top). Failures are logged. */
void agent_uids_release(agent_uids *u, const char *job);

/* Release every job held that keep(arg, job) says is no longer on the
 * node: the uids taken back at open whose tasks did not come back. */
void agent_uids_sweep(agent_uids *u, int (*keep)(void *arg, const char *job),
                      void *arg);

/* The uid job holds through this agent, or (uid_t)-1. */
uid_t agent_uids_of(const agent_uids *u, const char *job);

/* Act on files as uid (and gid uid) until agent_uids_leave: the file
 * system's checks are made as that user, so a link the job planted in its
 * directory leads the agent nowhere the job could not go itself, and what
 * is created is the job's. Only for the calling thread (setfsuid). 0 on
 * success, -1 when the identity did not change (nothing to undo). */
int agent_uids_enter(uid_t uid);
void agent_uids_leave(void);

/* Whether path and every directory above it can be passed through by
 * other users (x for others), which the job uids need to reach their
 * directories and programs. 1 when so; 0 with the first one that cannot
 * in blocker (len bytes). */
int agent_uids_reachable(const char *path, char *blocker, size_t len);

#endif
