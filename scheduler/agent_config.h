/* flagent's command line: flags, sizes with unit suffixes, and the
 * defaults of docs/scheduler.md. Parsing only: no I/O. */
#ifndef FLPS_SCHED_AGENT_CONFIG_H
#define FLPS_SCHED_AGENT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define AGENT_NAME_MAX 64
#define AGENT_PATH_MAX 1024
/* The job file's default data_dir (services/jobspec_keys.c). */
#define AGENT_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
/* Per-job uids (docs/flagent.md, "Isolation between jobs"): below
 * systemd's DynamicUser range (61184-65519), in Debian's range of users
 * made on demand; a uid or gid with an entry in the user or group
 * database is never handed out. */
#define AGENT_JOB_UID_FIRST 60000u
#define AGENT_JOB_UID_LAST 60999u
#define AGENT_JOB_UIDS_DIR "/var/lib/flps/job-uids"

typedef struct agent_config {
    char redis_url[512];            /* --redis, required */
    char redis_password_file[4096]; /* "" = none (see rconn.h) */
    char redis_ca[4096];            /* --redis-ca, "" = FLPS_REDIS_CA */
    char name[AGENT_NAME_MAX];      /* --name, required: [A-Za-z0-9_.-]{1,63} */
    double cpus;      /* --cpus, required, a decimal > 0 (e.g. 8, 0.5) */
    uint64_t memory;  /* --memory SIZE (jobspec_size_parse), required, > 0 */
    uint32_t gpus;    /* --gpus, required, >= 0 */
    char address[64]; /* --address, IPv4, default 127.0.0.1 */
    char work_dir[AGENT_PATH_MAX];  /* --work-dir, default
                                       $TMPDIR/flagent-NAME (or /tmp/...) */
    char ckpt_root[AGENT_PATH_MAX]; /* --checkpoint-root: where servers keep
                                       checkpoints, ROOT/{job}/ckpt; shared
                                       storage lets a job restarted on
                                       another node restore. Default
                                       work_dir */
    char data_dir[AGENT_PATH_MAX];  /* --data-dir: the Fashion-MNIST files
                                       the agent reports on (default the
                                       job file's default data_dir) */
    double heartbeat;               /* --heartbeat seconds, default 2 */
    char metrics[128]; /* --metrics HOST:PORT for flagent's own /metrics;
                          "" = off */
    char user[64];     /* --user: who to become after start-up ("" none) */
    char group[64];    /* --group ("" the user's primary group) */
    /* --job-uids FIRST-LAST | off: started as root (without --user), each
     * job's tasks run under a uid and gid of their own from this range.
     * Default AGENT_JOB_UID_FIRST-AGENT_JOB_UID_LAST. */
    int job_uids;       /* 0: off */
    int job_uids_given; /* the flag was on the command line */
    uint32_t job_uid_first, job_uid_last;
    /* --job-uids-dir: which job holds which uid, shared by every flagent
     * of the machine (default AGENT_JOB_UIDS_DIR) */
    char job_uids_dir[AGENT_PATH_MAX];
    int help; /* --help was given: print usage, exit 0 */
} agent_config;

/* Parse flagent's arguments (argv[0] is the program). On FLPS_ECONFIG
 * errbuf holds one message naming the flag, the value and what is
 * accepted; *out is written only on FLPS_OK. With --help, FLPS_OK and out->help
 * set (the other flags are not checked). Uses getopt_long: not
 * thread-safe; resets optind itself. */
flps_err agent_config_parse(int argc, char **argv, agent_config *out,
                            char *errbuf, size_t errlen);

/* The usage text (a static string). */
const char *agent_config_usage(void);

/* Milliseconds the node's alive key lives: 2 heartbeats. */
long long agent_config_ttl_ms(const agent_config *cfg);

#endif
