/* flsched: the scheduler daemon. Serves the HTTP API and, while it holds
 * the lease in Redis, runs the leader's loop every 200 ms. All state is in
 * Redis, so a restarted flsched carries on where it stopped. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/cliver.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "scheduler/rconn.h"
#include "scheduler/sched_api.h"
#include "scheduler/sched_loop.h"
#include "scheduler/sched_store.h"
#include "services/httpd.h"
#include "services/metrics.h"
#include "services/privdrop.h"

#define FLSCHED_TICK_MS 200
#define FLSCHED_MAX_BODY ((size_t)1 << 20)

/* Set by the signal handler, read by the main loop: the one piece of
 * global state, as a handler can reach nothing else. */
static volatile sig_atomic_t flsched_stop;

static void on_signal(int sig)
{
    (void)sig;
    flsched_stop = 1;
}

typedef struct flsched_cfg {
    const char *redis;
    const char *listen;
    int listen_any; /* --listen-any: every interface was asked for */
    char id[128];
    char *token;
    const char *tls_cert, *tls_key; /* both or neither: HTTPS */
    httpd_tls tls;
    privdrop_target who; /* --user, --group */
    int node_ttl;
    long lease_ms;
} flsched_cfg;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: flsched --redis redis://HOST:PORT --listen HOST:PORT\n"
        "               [--listen-any] [--id NAME] [--token-file FILE] "
        "[--node-ttl SEC]\n"
        "               [--lease-ms MS] [--tls-cert FILE --tls-key FILE]\n"
        "  --redis URL        Redis holding the cluster's state\n"
        "                     (redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB];\n"
        "                     rediss:// is TLS)\n"
        "  --redis-ca FILE    rediss:// (TLS): the CA certificate (PEM)\n"
        "                     that signed Redis's (or FLPS_REDIS_CA;\n"
        "                     default: the system's CAs)\n"
        "  --redis-password-file FILE  the Redis password, first line\n"
        "                     of FILE (or FLPS_REDIS_PASSWORD_FILE /\n"
        "                     FLPS_REDIS_PASSWORD): off the command line\n"
        "  --listen HOST:PORT where the HTTP API listens (PORT 0: any);\n"
        "                     every interface (0.0.0.0, ::, *, :PORT)\n"
        "                     only with --listen-any\n"
        "  --listen-any       allow --listen on every interface (in a\n"
        "                     container, behind a Service)\n"
        "  --id NAME          this scheduler's name in the leader lease\n"
        "                     (default HOSTNAME:PID)\n"
        "  --token-file FILE  require 'Authorization: Bearer TOKEN' with\n"
        "                     the token in FILE (not for /healthz, "
        "/metrics)\n"
        "  --node-ttl SEC     TTL given to a node's alive key found "
        "without one (default 6)\n"
        "  --lease-ms MS      leader lease (default 5000; renewed every "
        "third)\n"
        "  --tls-cert FILE    serve the API over HTTPS with this\n"
        "                     certificate (PEM, leaf first); needs\n"
        "  --tls-key FILE     its private key (PEM, mode 600 or 400)\n"
        "  --user NAME        started as root: become NAME once the API\n"
        "                     is listening; --group NAME (default: NAME's\n"
        "                     primary group)\n"
        "Prints 'listening on HOST:PORT' on stdout once the API is up.\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    int64_t v = 0;

    if (flps_parse_i64(NULL, s, lo, hi, &v, NULL, 0) != FLPS_OK)
        return 0;
    *out = (long)v;
    return 1;
}

/* The token is the file's first line without surrounding blanks. */
static char *read_token(const char *path)
{
    char buf[1024];
    FILE *f = fopen(path, "r");
    size_t n;
    char *s, *e;

    if (f == NULL) {
        fprintf(stderr, "flsched: --token-file %s: %s\n", path,
                strerror(errno));
        return NULL;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    s = buf + strspn(buf, " \t\r\n");
    e = s + strcspn(s, "\r\n");
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *e = '\0';
    if (*s == '\0') {
        fprintf(stderr, "flsched: --token-file %s holds no token\n", path);
        return NULL;
    }
    return flps_strdup(s);
}

static int parse_args(int argc, char **argv, flsched_cfg *cfg)
{
    static const struct option opts[] = {
        {"redis", required_argument, NULL, 'r'},
        {"listen", required_argument, NULL, 'l'},
        {"listen-any", no_argument, NULL, 'A'},
        {"id", required_argument, NULL, 'i'},
        {"token-file", required_argument, NULL, 't'},
        {"redis-password-file", required_argument, NULL, 'p'},
        {"redis-ca", required_argument, NULL, 'c'},
        {"node-ttl", required_argument, NULL, 'n'},
        {"lease-ms", required_argument, NULL, 'm'},
        {"tls-cert", required_argument, NULL, 'C'},
        {"tls-key", required_argument, NULL, 'K'},
        {"user", required_argument, NULL, 'U'},
        {"group", required_argument, NULL, 'G'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *token_file = NULL, *user = NULL, *group = NULL;
    char err[512];
    long v;
    int c;

    memset(cfg, 0, sizeof(*cfg));
    cfg->node_ttl = 6;
    cfg->lease_ms = 5000;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            setenv("FLPS_REDIS_PASSWORD_FILE", optarg, 1);
            break;
        case 'c':
            setenv("FLPS_REDIS_CA", optarg, 1);
            break;
        case 'r':
            cfg->redis = optarg;
            break;
        case 'l':
            cfg->listen = optarg;
            break;
        case 'A':
            cfg->listen_any = 1;
            break;
        case 'i':
            if (optarg[0] == '\0' || strlen(optarg) >= sizeof(cfg->id)) {
                fprintf(stderr, "flsched: --id must be 1 to 127 bytes\n");
                return 2;
            }
            snprintf(cfg->id, sizeof(cfg->id), "%s", optarg);
            break;
        case 't':
            token_file = optarg;
            break;
        case 'C':
            cfg->tls_cert = optarg;
            break;
        case 'K':
            cfg->tls_key = optarg;
            break;
        case 'U':
            user = optarg;
            break;
        case 'G':
            group = optarg;
            break;
        case 'n':
            if (!parse_long(optarg, 1, 86400, &v)) {
                fprintf(stderr,
                        "flsched: --node-ttl '%s' is not a number of "
                        "seconds from 1 to 86400\n",
                        optarg);
                return 2;
            }
            cfg->node_ttl = (int)v;
            break;
        case 'm':
            if (!parse_long(optarg, 300, 3600000, &v)) {
                fprintf(stderr,
                        "flsched: --lease-ms '%s' is not a number of "
                        "milliseconds from 300 to 3600000\n",
                        optarg);
                return 2;
            }
            cfg->lease_ms = v;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "flsched: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (cfg->redis == NULL || cfg->listen == NULL) {
        fprintf(stderr, "flsched: --redis and --listen are required\n");
        usage(stderr);
        return 2;
    }
    if (!cfg->listen_any && httpd_listen_is_any(cfg->listen)) {
        /* The API places jobs that run programs: reachable from every
         * network only when that is what the operator means. */
        fprintf(stderr,
                "flsched: --listen %s listens on every interface, so "
                "anyone who can reach this machine can reach the API; give "
                "one of its addresses (127.0.0.1 for this machine only), or "
                "add --listen-any if every interface is meant (e.g. in a "
                "pod behind a Service)\n",
                cfg->listen);
        return 2;
    }
    if (cfg->id[0] == '\0') {
        char host[64] = "localhost";

        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(cfg->id, sizeof(cfg->id), "%s:%ld", host, (long)getpid());
    }
    if (group != NULL && user == NULL) {
        fprintf(stderr, "flsched: --group goes with --user\n");
        return 2;
    }
    if (user != NULL &&
        privdrop_resolve(user, group, &cfg->who, err, sizeof(err)) != FLPS_OK) {
        fprintf(stderr, "flsched: %s\n", err);
        return 2;
    }
    if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL)) {
        fprintf(stderr, "flsched: --tls-cert and --tls-key go together: "
                        "give the certificate and its private key, or "
                        "neither for plain HTTP\n");
        return 2;
    }
    if (cfg->tls_cert != NULL) {
        if (httpd_tls_load(cfg->tls_cert, cfg->tls_key, &cfg->tls, err,
                           sizeof(err)) != FLPS_OK) {
            fprintf(stderr, "flsched: %s\n", err);
            return 2;
        }
    }
    if (token_file != NULL) {
        cfg->token = read_token(token_file);
        if (cfg->token == NULL) {
            httpd_tls_fini(&cfg->tls);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    flsched_cfg cfg;
    sched_store *st = NULL;
    sched_loop *loop = NULL;
    sched_api *api = NULL;
    metrics *reg = NULL;
    httpd *http = NULL;
    sched_loop_cfg lcfg;
    sched_api_cfg acfg;
    struct sigaction sa;
    char bound[128], shown[512];
    int status = 1, r;
    flps_err rc;

    if (flps_cli_version(argc, argv, "flsched"))
        return 0;
    r = parse_args(argc, argv, &cfg);
    if (r != 0)
        return r == 1 ? 0 : 2;
    flps_log_setup("flsched", FLPS_LOG_INFO);
    privdrop_warn_root(&cfg.who, "flsched");
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = metrics_create(&reg);
    if (rc == FLPS_OK)
        rc = sched_store_create(cfg.redis, 2000, &st);
    if (rc != FLPS_OK) {
        log_error("cannot start: %s", flps_strerror(rc));
        goto out;
    }
    lcfg.id = cfg.id;
    lcfg.lease_ms = cfg.lease_ms;
    lcfg.node_ttl_s = cfg.node_ttl;
    if (sched_store_ping(st) == FLPS_ECONFIG) {
        /* Wrong credentials do not get better by retrying. */
        log_error("cannot start: %s", sched_store_error(st));
        goto out;
    }
    rc = sched_loop_create(st, &lcfg, &loop);
    if (rc != FLPS_OK) {
        log_error("cannot start the loop: %s", flps_strerror(rc));
        goto out;
    }
    acfg.redis_url = cfg.redis;
    acfg.token = cfg.token;
    acfg.stats = sched_loop_stats_of(loop);
    acfg.reg = reg;
    rc = sched_api_create(&acfg, &api);
    if (rc != FLPS_OK) {
        log_error("cannot start the API: %s", flps_strerror(rc));
        goto out;
    }
    rc = httpd_start_tls(cfg.listen, FLSCHED_MAX_BODY, httpd_default_limits(),
                         cfg.tls_cert != NULL ? &cfg.tls : NULL,
                         sched_api_handle, api, &http, bound, sizeof(bound));
    httpd_tls_fini(&cfg.tls); /* the server has its copy */
    if (rc != FLPS_OK)
        goto out; /* httpd logged why */
    rconn_redact_url(cfg.redis, shown, sizeof(shown));
    log_info("flsched %s: API on %s://%s, Redis at %s, lease %ld ms%s", cfg.id,
             cfg.tls_cert != NULL ? "https" : "http", bound, shown,
             cfg.lease_ms, cfg.token ? ", bearer token required" : "");
    /* The API is bound, its key read, Redis connected with its password:
     * nothing later needs root. */
    {
        char err[512];

        if (privdrop_apply(&cfg.who, err, sizeof(err)) != FLPS_OK) {
            log_error("cannot drop privileges: %s", err);
            goto out;
        }
    }
    printf("listening on %s\n", bound);
    fflush(stdout);

    while (!flsched_stop) {
        struct timespec ts = {0, FLSCHED_TICK_MS * 1000000L};

        if (sched_loop_step(loop, flps_wall_s(), flps_mono_s()) != FLPS_OK &&
            sched_store_ping(st) == FLPS_ECONFIG) {
            log_error("stopping: %s", sched_store_error(st));
            goto out;
        }
        nanosleep(&ts, NULL);
    }
    log_info("stopping");
    status = 0;
out:
    httpd_stop(http);
    sched_api_destroy(api);
    sched_loop_destroy(loop); /* hands the lease over at once */
    sched_store_destroy(st);
    metrics_destroy(reg);
    httpd_tls_fini(&cfg.tls);
    flps_free(cfg.token);
    return status;
}
