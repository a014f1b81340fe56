/* flagent's command line. */
#include "scheduler/agent_config.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/numparse.h"
#include "scheduler/agent_task.h"
#include "scheduler/rconn.h"
#include "services/jobspec.h"
#include "services/safeid.h"

static const char usage_text[] =
    "usage: flagent --redis redis://HOST:PORT --name NAME --cpus N\n"
    "               --memory SIZE --gpus N [--address IP] [--work-dir DIR]\n"
    "               [--heartbeat SEC]\n"
    "  --redis URL       the cluster's Redis "
    "(redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB];\n"
    "                    rediss:// is TLS)\n"
    "  --redis-password-file FILE  the Redis password, first line of FILE\n"
    "                    (keeps it off the command line; or set\n"
    "                    FLPS_REDIS_PASSWORD_FILE / FLPS_REDIS_PASSWORD)\n"
    "  --user NAME       started as root: become NAME once the sockets are\n"
    "                    open (its tasks run as NAME too, with no isolation\n"
    "                    between jobs); --group NAME (default: NAME's\n"
    "                    primary group)\n"
    "  --job-uids FIRST-LAST|off  started as root without --user: run each\n"
    "                    job's tasks as a uid and gid of its own from this\n"
    "                    range (default 60000-60999)\n"
    "  --job-uids-dir DIR  which job holds which uid, shared by the\n"
    "                    machine's flagents (default " AGENT_JOB_UIDS_DIR ")\n"
    "  --redis-ca FILE   rediss:// (TLS): the CA certificate (PEM) that\n"
    "                    signed Redis's (or FLPS_REDIS_CA; default: the\n"
    "                    system's CAs)\n"
    "  --name NAME       this node's name ([A-Za-z0-9_.-], 1..63 chars,\n"
    "                    starting with a letter or digit, no '..')\n"
    "  --cpus N          CPUs the node offers (> 0; 0.5 is half a CPU)\n"
    "  --memory SIZE     memory it offers: bytes, or K/M/G/T (powers of "
    "1000)\n"
    "                    or Ki/Mi/Gi/Ti (powers of 1024), e.g. 16Gi\n"
    "  --gpus N          GPUs it offers (>= 0)\n"
    "  --address IP      the IPv4 address other nodes reach it at; servers\n"
    "                    listen there (default 127.0.0.1)\n"
    "  --work-dir DIR    job files, checkpoints and task logs (default\n"
    "                    $TMPDIR/flagent-NAME, or /tmp/flagent-NAME)\n"
    "  --checkpoint-root DIR  where shards keep checkpoints (DIR/JOB/ckpt;\n"
    "                    default the work dir); put it on storage every\n"
    "                    node shares so a job restarted elsewhere restores\n"
    "  --data-dir DIR    the Fashion-MNIST files this node's jobs read; the\n"
    "                    agent reports whether they are there (flsubmit\n"
    "                    doctor; default " AGENT_DEFAULT_DATA_DIR ")\n"
    "  --heartbeat SEC   seconds between heartbeats (default 2); the node\n"
    "                    is LOST 2 heartbeats after the last one\n"
    "  --metrics HOST:PORT  serve flagent's Prometheus /metrics and /healthz\n"
    "                    (port 0: a free one; default off). Every task gets\n"
    "                    --metrics ADDRESS:0 whatever this says\n"
    "flps and flworker are taken from $FLPS_BIN_DIR when set, else from\n"
    "the directory flagent is in. See docs/flagent.md.\n";

const char *agent_config_usage(void)
{
    return usage_text;
}

_Static_assert(AGENT_NAME_MAX == AGENT_TASK_NAME_MAX + 1,
               "a node name is checked by agent_task_name_is_valid");

/* A directory flag into dst (size bytes): not empty, and leaving 128
 * bytes for what flagent puts under it ({job}/attempt-N/{task}.log). */
static flps_err copy_dir(const char *flag, const char *arg, char *dst,
                         size_t size, char *errbuf, size_t errlen)
{
    if (arg[0] == '\0' || strlen(arg) >= size - 128)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s: give a directory path shorter than %zu "
                               "characters",
                               flag, size - 128);
    snprintf(dst, size, "%s", arg);
    return FLPS_OK;
}

/* Which of the required flags were given (their values may be 0). */
typedef struct config_seen {
    int cpus, gpus;
} config_seen;

/* Refuse the command line with one message, into the errbuf and errlen
 * of the function it is used in. */
#define CONFIG_FAIL(...)                                                       \
    flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG, __VA_ARGS__)

/* --redis: a URL rconn can connect to. */
static flps_err config_redis(const char *arg, agent_config *cfg, char *errbuf,
                             size_t errlen)
{
    char host[256], pw[256], why[300];
    int port, db;

    if (strlen(arg) >= sizeof(cfg->redis_url))
        return CONFIG_FAIL("--redis: the URL is too long");
    if (rconn_parse_url(arg, host, sizeof(host), &port, pw, sizeof(pw), &db,
                        why, sizeof(why)) != FLPS_OK)
        return CONFIG_FAIL("--redis: %s", why);
    snprintf(cfg->redis_url, sizeof(cfg->redis_url), "%s", arg);
    return FLPS_OK;
}

/* The flags that say what the node offers: --cpus, --memory, --gpus. */
static flps_err config_resources(int c, const char *arg, agent_config *cfg,
                                 config_seen *seen, char *errbuf, size_t errlen)
{
    uint64_t u64;

    switch (c) {
    case 'c':
        /* A leading digit as always ("+1" and ".5" are refused), and
         * > 0, which the parser's inclusive bounds cannot say; so the
         * message is flagent's own, as its tests quote it. */
        if (arg[0] < '0' || arg[0] > '9' ||
            flps_parse_double("--cpus", arg, 0, 1e6, &cfg->cpus, NULL, 0) !=
                FLPS_OK ||
            !(cfg->cpus > 0))
            return CONFIG_FAIL("--cpus: '%s' is not a number of CPUs > 0 "
                               "(e.g. 8 or 0.5)",
                               arg);
        seen->cpus = 1;
        return FLPS_OK;
    case 'm':
        if (jobspec_size_parse(arg, &cfg->memory) != FLPS_OK ||
            cfg->memory == 0)
            return CONFIG_FAIL("--memory: '%s' is not a size; use bytes or a "
                               "number with K, M, G, T (powers of 1000) "
                               "or Ki, Mi, Gi, Ti (powers of 1024), e.g. 16Gi; "
                               "not 0",
                               arg);
        return FLPS_OK;
    default: /* 'g' */
        if (flps_parse_u64("--gpus", arg, 0, 1u << 16, &u64, errbuf, errlen) !=
            FLPS_OK)
            return FLPS_ECONFIG;
        cfg->gpus = (uint32_t)u64;
        seen->gpus = 1;
        return FLPS_OK;
    }
}

/* A flag that names a file or an account: --redis-password-file,
 * --redis-ca, --user, --group. */
static flps_err config_name(int c, const char *arg, agent_config *cfg,
                            char *errbuf, size_t errlen)
{
    switch (c) {
    case 'U':
    case 'G':
        if (snprintf(c == 'U' ? cfg->user : cfg->group, sizeof(cfg->user), "%s",
                     arg) >= (int)sizeof(cfg->user) ||
            arg[0] == '\0')
            return CONFIG_FAIL("--%s: give a name of 1 to 63 bytes",
                               c == 'U' ? "user" : "group");
        return FLPS_OK;
    case 'C':
        if (snprintf(cfg->redis_ca, sizeof(cfg->redis_ca), "%s", arg) >=
            (int)sizeof(cfg->redis_ca))
            return CONFIG_FAIL("--redis-ca: the path is too long");
        return FLPS_OK;
    default: /* 'p' */
        if (snprintf(cfg->redis_password_file, sizeof(cfg->redis_password_file),
                     "%s", arg) >= (int)sizeof(cfg->redis_password_file))
            return CONFIG_FAIL("--redis-password-file: the path is too long");
        return FLPS_OK;
    }
}

/* --job-uids FIRST-LAST or off. The range stays clear of the uids a
 * system gives its own users and of the largest ids (nobody, -1). */
static flps_err config_job_uids(const char *arg, agent_config *cfg,
                                char *errbuf, size_t errlen)
{
    char first[16];
    const char *dash = strchr(arg, '-');
    size_t n = dash != NULL ? (size_t)(dash - arg) : 0;
    uint64_t a = 0, b = 0;

    cfg->job_uids_given = 1;
    if (strcmp(arg, "off") == 0) {
        cfg->job_uids = 0;
        return FLPS_OK;
    }
    if (dash == NULL || n == 0 || n >= sizeof(first))
        goto bad;
    memcpy(first, arg, n);
    first[n] = '\0';
    if (flps_parse_u64(NULL, first, 1000, 4000000000u, &a, NULL, 0) !=
            FLPS_OK ||
        flps_parse_u64(NULL, dash + 1, 1000, 4000000000u, &b, NULL, 0) !=
            FLPS_OK ||
        b < a || b - a >= 1000000)
        goto bad;
    cfg->job_uids = 1;
    cfg->job_uid_first = (uint32_t)a;
    cfg->job_uid_last = (uint32_t)b;
    return FLPS_OK;
bad:
    return CONFIG_FAIL("--job-uids: '%s' is not FIRST-LAST (uids of at "
                       "least 1000, FIRST <= LAST, at most 1000000 of "
                       "them, e.g. 60000-60999) or off",
                       arg);
}

/* One flag (getopt's c) with its value into cfg. */
static flps_err config_option(int c, const char *arg, agent_config *cfg,
                              config_seen *seen, char *errbuf, size_t errlen)
{
    struct in_addr ip;

    switch (c) {
    case 'r':
        return config_redis(arg, cfg, errbuf, errlen);
    case 'U':
    case 'G':
    case 'C':
    case 'p':
        return config_name(c, arg, cfg, errbuf, errlen);
    case 'c':
    case 'm':
    case 'g':
        return config_resources(c, arg, cfg, seen, errbuf, errlen);
    case 'n':
        if (!agent_task_name_is_valid(arg, strlen(arg)))
            return CONFIG_FAIL(
                "--name: '%s' is not a node name; use " SAFEID_RULE, arg);
        snprintf(cfg->name, sizeof(cfg->name), "%s", arg);
        return FLPS_OK;
    case 'a':
        if (inet_pton(AF_INET, arg, &ip) != 1 || ip.s_addr == htonl(INADDR_ANY))
            return CONFIG_FAIL("--address: '%s' is not an IPv4 address other "
                               "nodes can reach (e.g. 10.0.0.5; not 0.0.0.0)",
                               arg);
        snprintf(cfg->address, sizeof(cfg->address), "%s", arg);
        return FLPS_OK;
    case 'w':
        return copy_dir("--work-dir", arg, cfg->work_dir, sizeof(cfg->work_dir),
                        errbuf, errlen);
    case 'J':
        return config_job_uids(arg, cfg, errbuf, errlen);
    case 'D':
        return copy_dir("--job-uids-dir", arg, cfg->job_uids_dir,
                        sizeof(cfg->job_uids_dir), errbuf, errlen);
    case 'k':
        return copy_dir("--checkpoint-root", arg, cfg->ckpt_root,
                        sizeof(cfg->ckpt_root), errbuf, errlen);
    case 'd':
        return copy_dir("--data-dir", arg, cfg->data_dir, sizeof(cfg->data_dir),
                        errbuf, errlen);
    case 'b':
        if (flps_parse_double("--heartbeat", arg, 0.1, 3600, &cfg->heartbeat,
                              errbuf, errlen) != FLPS_OK)
            return FLPS_ECONFIG;
        return FLPS_OK;
    default: /* 'M' */
        /* httpd_start checks the address itself when it binds. */
        if (arg[0] == '\0' || strlen(arg) >= sizeof(cfg->metrics))
            return CONFIG_FAIL("--metrics: '%.40s' is not HOST:PORT (e.g. "
                               "127.0.0.1:9101; port 0 picks a free one)",
                               arg);
        snprintf(cfg->metrics, sizeof(cfg->metrics), "%s", arg);
        return FLPS_OK;
    }
}

/* Once every flag is read: the required ones, and the defaults that
 * depend on others (the work dir on the name, the checkpoint root on the
 * work dir). */
static flps_err config_finish(agent_config *cfg, const config_seen *seen,
                              char *errbuf, size_t errlen)
{
    const char *tmp;

    if (cfg->redis_url[0] == '\0')
        return CONFIG_FAIL("--redis is required (e.g. --redis "
                           "redis://127.0.0.1:6379)");
    if (cfg->name[0] == '\0')
        return CONFIG_FAIL("--name is required");
    if (!seen->cpus)
        return CONFIG_FAIL("--cpus is required");
    if (cfg->memory == 0)
        return CONFIG_FAIL("--memory is required (e.g. 16Gi)");
    if (!seen->gpus)
        return CONFIG_FAIL("--gpus is required (0 for none)");
    if (cfg->work_dir[0] == '\0') {
        tmp = getenv("TMPDIR");
        if (tmp == NULL || tmp[0] == '\0' ||
            strlen(tmp) >= sizeof(cfg->work_dir) - 200)
            tmp = "/tmp";
        snprintf(cfg->work_dir, sizeof(cfg->work_dir), "%s/flagent-%s", tmp,
                 cfg->name);
    }
    if (cfg->ckpt_root[0] == '\0')
        memcpy(cfg->ckpt_root, cfg->work_dir, sizeof(cfg->ckpt_root));
    if (cfg->user[0] != '\0') {
        /* Tasks under uids of their own need an agent that stays root. */
        if (cfg->job_uids_given && cfg->job_uids)
            return CONFIG_FAIL("--job-uids needs flagent to stay root to "
                               "start each job's tasks as its own uid; "
                               "give --user or --job-uids, not both");
        cfg->job_uids = 0;
    }
    return FLPS_OK;
}

flps_err agent_config_parse(int argc, char **argv, agent_config *out,
                            char *errbuf, size_t errlen)
{
    static const struct option opts[] = {
        {"redis", required_argument, NULL, 'r'},
        {"name", required_argument, NULL, 'n'},
        {"cpus", required_argument, NULL, 'c'},
        {"memory", required_argument, NULL, 'm'},
        {"gpus", required_argument, NULL, 'g'},
        {"address", required_argument, NULL, 'a'},
        {"work-dir", required_argument, NULL, 'w'},
        {"heartbeat", required_argument, NULL, 'b'},
        {"checkpoint-root", required_argument, NULL, 'k'},
        {"data-dir", required_argument, NULL, 'd'},
        {"redis-password-file", required_argument, NULL, 'p'},
        {"redis-ca", required_argument, NULL, 'C'},
        {"user", required_argument, NULL, 'U'},
        {"group", required_argument, NULL, 'G'},
        {"metrics", required_argument, NULL, 'M'},
        {"job-uids", required_argument, NULL, 'J'},
        {"job-uids-dir", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    agent_config cfg;
    config_seen seen = {0, 0};
    int c;

    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.address, sizeof(cfg.address), "127.0.0.1");
    snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", AGENT_DEFAULT_DATA_DIR);
    cfg.heartbeat = 2.0;
    cfg.job_uids = 1;
    cfg.job_uid_first = AGENT_JOB_UID_FIRST;
    cfg.job_uid_last = AGENT_JOB_UID_LAST;
    snprintf(cfg.job_uids_dir, sizeof(cfg.job_uids_dir), "%s",
             AGENT_JOB_UIDS_DIR);
    opterr = 0;
    optind = 0; /* GNU: rescan from the start, so a second call works */
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h') {
            memset(out, 0, sizeof(*out));
            out->help = 1;
            return FLPS_OK;
        }
        if (c == ':')
            return CONFIG_FAIL("%s needs a value", argv[optind - 1]);
        if (c == '?')
            return CONFIG_FAIL("unknown option '%s'", argv[optind - 1]);
        if (config_option(c, optarg, &cfg, &seen, errbuf, errlen) != FLPS_OK)
            return FLPS_ECONFIG;
    }
    if (optind < argc)
        return CONFIG_FAIL("unexpected argument '%s'", argv[optind]);
    if (config_finish(&cfg, &seen, errbuf, errlen) != FLPS_OK)
        return FLPS_ECONFIG;
    *out = cfg;
    return FLPS_OK;
}

long long agent_config_ttl_ms(const agent_config *cfg)
{
    /* Two heartbeats: one late heartbeat is tolerated, and a dead node is
     * noticed within two heartbeat periods. */
    return llround(cfg->heartbeat * 2000.0);
}
