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
    "                    open (its tasks run as NAME too); --group NAME\n"
    "                    (default: NAME's primary group)\n"
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
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    agent_config cfg;
    int c, have_cpus = 0, have_gpus = 0;
    struct in_addr ip;
    const char *tmp;
    uint64_t u64;

    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.address, sizeof(cfg.address), "127.0.0.1");
    snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", AGENT_DEFAULT_DATA_DIR);
    cfg.heartbeat = 2.0;
    opterr = 0;
    optind = 0; /* GNU: rescan from the start, so a second call works */
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': {
            char host[256], pw[256], why[300];
            int port, db;
            if (strlen(optarg) >= sizeof(cfg.redis_url))
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "--redis: the URL is too long");
            if (rconn_parse_url(optarg, host, sizeof(host), &port, pw,
                                sizeof(pw), &db, why, sizeof(why)) != FLPS_OK)
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "--redis: %s", why);
            snprintf(cfg.redis_url, sizeof(cfg.redis_url), "%s", optarg);
            break;
        }
        case 'U':
        case 'G':
            if (snprintf(c == 'U' ? cfg.user : cfg.group, sizeof(cfg.user),
                         "%s", optarg) >= (int)sizeof(cfg.user) ||
                optarg[0] == '\0')
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "--%s: give a name of 1 to 63 bytes",
                                       c == 'U' ? "user" : "group");
            break;
        case 'C':
            if (snprintf(cfg.redis_ca, sizeof(cfg.redis_ca), "%s", optarg) >=
                (int)sizeof(cfg.redis_ca))
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "--redis-ca: the path is too long");
            break;
        case 'p':
            if (snprintf(cfg.redis_password_file,
                         sizeof(cfg.redis_password_file), "%s",
                         optarg) >= (int)sizeof(cfg.redis_password_file))
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "--redis-password-file: the path is "
                                       "too long");
            break;
        case 'n':
            if (!agent_task_name_is_valid(optarg, strlen(optarg)))
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_ECONFIG,
                    "--name: '%s' is not a node name; use " SAFEID_RULE,
                    optarg);
            snprintf(cfg.name, sizeof(cfg.name), "%s", optarg);
            break;
        case 'c':
            /* A leading digit as always ("+1" and ".5" are refused), and
             * > 0, which the parser's inclusive bounds cannot say; so the
             * message is flagent's own, as its tests quote it. */
            if (optarg[0] < '0' || optarg[0] > '9' ||
                flps_parse_double("--cpus", optarg, 0, 1e6, &cfg.cpus, NULL,
                                  0) != FLPS_OK ||
                !(cfg.cpus > 0))
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_ECONFIG,
                    "--cpus: '%s' is not a number of CPUs > 0 (e.g. "
                    "8 or 0.5)",
                    optarg);
            have_cpus = 1;
            break;
        case 'm':
            if (jobspec_size_parse(optarg, &cfg.memory) != FLPS_OK ||
                cfg.memory == 0)
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_ECONFIG,
                    "--memory: '%s' is not a size; use bytes or a "
                    "number with K, M, G, T (powers of 1000) "
                    "or Ki, Mi, Gi, Ti (powers of 1024), e.g. 16Gi; "
                    "not 0",
                    optarg);
            break;
        case 'g':
            if (flps_parse_u64("--gpus", optarg, 0, 1u << 16, &u64, errbuf,
                               errlen) != FLPS_OK)
                return FLPS_ECONFIG;
            cfg.gpus = (uint32_t)u64;
            have_gpus = 1;
            break;
        case 'a':
            if (inet_pton(AF_INET, optarg, &ip) != 1 ||
                ip.s_addr == htonl(INADDR_ANY))
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_ECONFIG,
                    "--address: '%s' is not an IPv4 address other "
                    "nodes can reach (e.g. 10.0.0.5; not 0.0.0.0)",
                    optarg);
            snprintf(cfg.address, sizeof(cfg.address), "%s", optarg);
            break;
        case 'w':
            if (copy_dir("--work-dir", optarg, cfg.work_dir,
                         sizeof(cfg.work_dir), errbuf, errlen) != FLPS_OK)
                return FLPS_ECONFIG;
            break;
        case 'k':
            if (copy_dir("--checkpoint-root", optarg, cfg.ckpt_root,
                         sizeof(cfg.ckpt_root), errbuf, errlen) != FLPS_OK)
                return FLPS_ECONFIG;
            break;
        case 'd':
            if (copy_dir("--data-dir", optarg, cfg.data_dir,
                         sizeof(cfg.data_dir), errbuf, errlen) != FLPS_OK)
                return FLPS_ECONFIG;
            break;
        case 'b':
            if (flps_parse_double("--heartbeat", optarg, 0.1, 3600,
                                  &cfg.heartbeat, errbuf, errlen) != FLPS_OK)
                return FLPS_ECONFIG;
            break;
        case 'M':
            /* httpd_start checks the address itself when it binds. */
            if (optarg[0] == '\0' || strlen(optarg) >= sizeof(cfg.metrics))
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "--metrics: '%.40s' is not HOST:PORT "
                                       "(e.g. 127.0.0.1:9101; port 0 picks a "
                                       "free one)",
                                       optarg);
            snprintf(cfg.metrics, sizeof(cfg.metrics), "%s", optarg);
            break;
        case 'h':
            memset(out, 0, sizeof(*out));
            out->help = 1;
            return FLPS_OK;
        case ':':
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "%s needs a value", argv[optind - 1]);
        default:
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "unexpected argument '%s'", argv[optind]);
    if (cfg.redis_url[0] == '\0')
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--redis is required (e.g. --redis "
                               "redis://127.0.0.1:6379)");
    if (cfg.name[0] == '\0')
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--name is required");
    if (!have_cpus)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--cpus is required");
    if (cfg.memory == 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--memory is required (e.g. 16Gi)");
    if (!have_gpus)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "--gpus is required (0 for none)");
    if (cfg.work_dir[0] == '\0') {
        tmp = getenv("TMPDIR");
        if (tmp == NULL || tmp[0] == '\0' ||
            strlen(tmp) >= sizeof(cfg.work_dir) - 200)
            tmp = "/tmp";
        snprintf(cfg.work_dir, sizeof(cfg.work_dir), "%s/flagent-%s", tmp,
                 cfg.name);
    }
    if (cfg.ckpt_root[0] == '\0')
        memcpy(cfg.ckpt_root, cfg.work_dir, sizeof(cfg.ckpt_root));
    *out = cfg;
    return FLPS_OK;
}

long long agent_config_ttl_ms(const agent_config *cfg)
{
    /* Two heartbeats: one late heartbeat is tolerated, and a dead node is
     * noticed within two heartbeat periods. */
    return llround(cfg->heartbeat * 2000.0);
}
