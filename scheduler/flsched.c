/* flsched: the scheduler daemon. Serves the HTTP API and, while it holds
 * the lease in Redis, runs the leader's loop every 200 ms. All state is in
 * Redis, so a restarted flsched carries on where it stopped. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "proto/creds.h"
#include "scheduler/launch.h"
#include "scheduler/launch_k8s.h"
#include "scheduler/rconn.h"
#include "scheduler/sched_api.h"
#include "scheduler/sched_loop.h"
#include "scheduler/sched_store.h"
#include "services/cliver.h"
#include "services/httpd.h"
#include "services/metrics.h"
#include "services/privdrop.h"

#define FLSCHED_TICK_MS 200
#define FLSCHED_MAX_BODY ((size_t)1 << 20)

/* Set by the signal handlers, read by the main loop: the only global
 * state, as a handler can reach nothing else. flsched_reload: SIGHUP, read
 * the TLS certificate and key again. */
static volatile sig_atomic_t flsched_stop;
static volatile sig_atomic_t flsched_reload;

static void on_signal(int sig)
{
    (void)sig;
    flsched_stop = 1;
}

static void on_hangup(int sig)
{
    (void)sig;
    flsched_reload = 1;
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
    int kubernetes;     /* --launcher kubernetes */
    launch_k8s_cfg k8s; /* its --k8s-* flags */
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
    launch_k8s_usage(f);
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

/* The flags that only name something, kept until every flag is read. */
typedef struct flsched_args {
    const char *token_file, *user, *group;
} flsched_args;

/* getopt's value of the i-th --k8s-* flag. */
#define FLSCHED_K8S_OPT 1000

/* One flag (getopt's c) with its value. 0 when taken, 2 when refused
 * (said on stderr). */
static int parse_option(int c, const char *arg, flsched_cfg *cfg,
                        flsched_args *a)
{
    char err[256];
    long v;

    if (c >= FLSCHED_K8S_OPT) {
        if (launch_k8s_cfg_set(&cfg->k8s, launch_k8s_flag(c - FLSCHED_K8S_OPT),
                               arg, err, sizeof(err)) == FLPS_OK)
            return 0;
        fprintf(stderr, "flsched: %s\n", err);
        return 2;
    }
    switch (c) {
    case 'L':
        if (strcmp(arg, "agents") != 0 && strcmp(arg, "kubernetes") != 0) {
            fprintf(stderr,
                    "flsched: --launcher '%s' is not agents or kubernetes\n",
                    arg);
            return 2;
        }
        cfg->kubernetes = strcmp(arg, "kubernetes") == 0;
        return 0;
    case 'p':
        setenv("FLPS_REDIS_PASSWORD_FILE", arg, 1);
        return 0;
    case 'c':
        setenv("FLPS_REDIS_CA", arg, 1);
        return 0;
    case 'r':
        cfg->redis = arg;
        return 0;
    case 'l':
        cfg->listen = arg;
        return 0;
    case 'A':
        cfg->listen_any = 1;
        return 0;
    case 'i':
        if (arg[0] == '\0' || strlen(arg) >= sizeof(cfg->id)) {
            fprintf(stderr, "flsched: --id must be 1 to 127 bytes\n");
            return 2;
        }
        snprintf(cfg->id, sizeof(cfg->id), "%s", arg);
        return 0;
    case 't':
        a->token_file = arg;
        return 0;
    case 'C':
        cfg->tls_cert = arg;
        return 0;
    case 'K':
        cfg->tls_key = arg;
        return 0;
    case 'U':
        a->user = arg;
        return 0;
    case 'G':
        a->group = arg;
        return 0;
    case 'n':
        if (!parse_long(arg, 1, 86400, &v)) {
            fprintf(stderr,
                    "flsched: --node-ttl '%s' is not a number of "
                    "seconds from 1 to 86400\n",
                    arg);
            return 2;
        }
        cfg->node_ttl = (int)v;
        return 0;
    default: /* 'm' */
        if (!parse_long(arg, 300, 3600000, &v)) {
            fprintf(stderr,
                    "flsched: --lease-ms '%s' is not a number of "
                    "milliseconds from 300 to 3600000\n",
                    arg);
            return 2;
        }
        cfg->lease_ms = v;
        return 0;
    }
}

/* Once every flag is read: what they say together (an API on every
 * interface only when asked for, TLS as a pair, --group with --user), the
 * default id, and what the flags name (the account to become, the TLS
 * files, the token). 0 when the configuration stands, 2 when not (said
 * on stderr). */
static int finish_args(flsched_cfg *cfg, const flsched_args *a)
{
    char err[512];

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
    if (a->group != NULL && a->user == NULL) {
        fprintf(stderr, "flsched: --group goes with --user\n");
        return 2;
    }
    if (a->user != NULL && privdrop_resolve(a->user, a->group, &cfg->who, err,
                                            sizeof(err)) != FLPS_OK) {
        fprintf(stderr, "flsched: %s\n", err);
        return 2;
    }
    if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL)) {
        fprintf(stderr, "flsched: --tls-cert and --tls-key go together: "
                        "give the certificate and its private key, or "
                        "neither for plain HTTP\n");
        return 2;
    }
    if (cfg->tls_cert != NULL &&
        httpd_tls_load(cfg->tls_cert, cfg->tls_key, &cfg->tls, err,
                       sizeof(err)) != FLPS_OK) {
        fprintf(stderr, "flsched: %s\n", err);
        return 2;
    }
    if (a->token_file != NULL) {
        cfg->token = read_token(a->token_file);
        if (cfg->token == NULL) {
            httpd_tls_fini(&cfg->tls);
            return 2;
        }
    }
    return 0;
}

/* The command line into *cfg: 0 to run, 1 when --help was answered, 2
 * when it is refused (said on stderr). */
static int parse_args(int argc, char **argv, flsched_cfg *cfg)
{
    static const struct option base[] = {
        {"launcher", required_argument, NULL, 'L'},
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
    };
    /* The base flags, then the kubernetes launcher's (launch_k8s.h). */
    struct option opts[sizeof(base) / sizeof(base[0]) + 32];
    size_t no = sizeof(base) / sizeof(base[0]);
    flsched_args a = {NULL, NULL, NULL};
    int c;

    memcpy(opts, base, sizeof(base));
    for (size_t i = 0;
         launch_k8s_flag(i) != NULL && no + 1 < sizeof(opts) / sizeof(opts[0]);
         i++)
        opts[no++] = (struct option){launch_k8s_flag(i) + 2, required_argument,
                                     NULL, FLSCHED_K8S_OPT + (int)i};
    opts[no] = (struct option){NULL, 0, NULL, 0};
    memset(cfg, 0, sizeof(*cfg));
    cfg->node_ttl = 6;
    cfg->lease_ms = 5000;
    launch_k8s_cfg_init(&cfg->k8s);
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':') {
            usage(stderr);
            return 2;
        }
        if (parse_option(c, optarg, cfg, &a) != 0)
            return 2;
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
    return finish_args(cfg, &a);
}

/* What a running flsched holds, each part borrowing those before it. */
typedef struct flsched {
    launch *launcher; /* NULL: the agents */
    metrics *reg;
    sched_store *st;
    sched_loop *loop;
    sched_api *api;
    httpd *http;
    char bound[128]; /* where the API listens */
} flsched;

/* Connect to Redis, make the loop and the API and serve the API. 0, or 1
 * with the reason logged; what was made is in *d either way. */
static int flsched_start(flsched *d, flsched_cfg *cfg)
{
    sched_loop_cfg lcfg;
    sched_api_cfg acfg;
    flps_err rc;

    rc = metrics_create(&d->reg);
    if (rc == FLPS_OK)
        rc = sched_store_create(cfg->redis, 2000, &d->st);
    if (rc != FLPS_OK) {
        log_error("cannot start: %s", flps_strerror(rc));
        return 1;
    }
    if (sched_store_ping(d->st) == FLPS_ECONFIG) {
        /* Wrong credentials do not get better by retrying. */
        log_error("cannot start: %s", sched_store_error(d->st));
        return 1;
    }
    if (cfg->kubernetes) {
        char err[512];

        rc = launch_k8s_create(&cfg->k8s, &d->launcher, err, sizeof(err));
        if (rc != FLPS_OK) {
            log_error("cannot start the kubernetes launcher: %s",
                      rc == FLPS_ENOMEM ? "out of memory" : err);
            return 1;
        }
    }
    memset(&lcfg, 0, sizeof(lcfg)); /* store_grace_s: node_ttl_s */
    lcfg.id = cfg->id;
    lcfg.lease_ms = cfg->lease_ms;
    lcfg.node_ttl_s = cfg->node_ttl;
    lcfg.launcher = d->launcher;
    rc = sched_loop_create(d->st, &lcfg, &d->loop);
    if (rc != FLPS_OK) {
        log_error("cannot start the loop: %s", flps_strerror(rc));
        return 1;
    }
    acfg.redis_url = cfg->redis;
    acfg.token = cfg->token;
    acfg.stats = sched_loop_stats_of(d->loop);
    acfg.reg = d->reg;
    acfg.launcher = d->launcher;
    rc = sched_api_create(&acfg, &d->api);
    if (rc != FLPS_OK) {
        log_error("cannot start the API: %s", flps_strerror(rc));
        return 1;
    }
    rc = httpd_start_tls(cfg->listen, FLSCHED_MAX_BODY, httpd_default_limits(),
                         cfg->tls_cert != NULL ? &cfg->tls : NULL,
                         sched_api_handle, d->api, &d->http, d->bound,
                         sizeof(d->bound));
    if (rc == FLPS_OK)
        sched_api_set_http(d->api, d->http);
    httpd_tls_fini(&cfg->tls);    /* the server has its copy */
    return rc == FLPS_OK ? 0 : 1; /* httpd logged why */
}

/* The leader's loop every FLSCHED_TICK_MS until a signal: 0, or 1 when
 * Redis refuses the scheduler's credentials. */
static int flsched_run(flsched *d)
{
    while (!flsched_stop) {
        struct timespec ts = {0, FLSCHED_TICK_MS * 1000000L};

        if (flsched_reload) {
            /* The server reloads a changed certificate by itself; SIGHUP
             * does it now, changed or not. */
            flsched_reload = 0;
            if (httpd_tls_reload(d->http) == FLPS_EINVAL)
                log_info("SIGHUP: the API serves plain HTTP, nothing to "
                         "reload");
        }
        if (sched_loop_step(d->loop, flps_wall_s(), flps_mono_s()) != FLPS_OK &&
            sched_store_ping(d->st) == FLPS_ECONFIG) {
            log_error("stopping: %s", sched_store_error(d->st));
            return 1;
        }
        nanosleep(&ts, NULL);
    }
    log_info("stopping");
    return 0;
}

static void flsched_stop_all(flsched *d)
{
    httpd_stop(d->http);
    sched_api_destroy(d->api);
    sched_loop_destroy(d->loop); /* hands the lease over at once */
    launch_destroy(d->launcher);
    sched_store_destroy(d->st);
    metrics_destroy(d->reg);
}

int main(int argc, char **argv)
{
    flsched_cfg cfg;
    flsched d;
    struct sigaction sa;
    char shown[512], err[512];
    int status = 1, r;

    if (flps_cli_version(argc, argv, "flsched"))
        return 0;
    r = parse_args(argc, argv, &cfg);
    if (r != 0)
        return r == 1 ? 0 : 2;
    flps_log_setup("flsched", FLPS_LOG_INFO);
    /* Before any thread: the kubernetes launcher's watch uses libcurl. */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    privdrop_warn_root(&cfg.who, "flsched");
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_hangup;
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    memset(&d, 0, sizeof(d));
    if (flsched_start(&d, &cfg) != 0)
        goto out;
    rconn_redact_url(cfg.redis, shown, sizeof(shown));
    log_info("flsched %s: API on %s://%s, Redis at %s, lease %ld ms%s", cfg.id,
             cfg.tls_cert != NULL ? "https" : "http", d.bound, shown,
             cfg.lease_ms, cfg.token ? ", bearer token required" : "");
    /* The API is bound, its key read, Redis connected with its password:
     * nothing later needs root. */
    if (privdrop_apply(&cfg.who, err, sizeof(err)) != FLPS_OK) {
        log_error("cannot drop privileges: %s", err);
        goto out;
    }
    if (!creds_have_curve())
        log_warn("this libzmq was built without CURVE (zmq_has(\"curve\") is "
                 "0): jobs get a secret that authenticates their data plane, "
                 "but no CURVE keys; it is not encrypted");
    printf("listening on %s\n", d.bound);
    fflush(stdout);
    status = flsched_run(&d);
out:
    flsched_stop_all(&d);
    httpd_tls_fini(&cfg.tls);
    flps_free(cfg.token);
    curl_global_cleanup();
    return status;
}
