/* flps: one parameter-server shard daemon. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "proto/creds.h"
#include "proto/transport.h"
#include "ps/metrics_shard.h"
#include "ps/net.h"
#include "ps/shard.h"
#include "services/cliver.h"
#include "services/fsutil.h"
#include "services/privdrop.h"
#include "transports/select.h"

/* More shards than a job could ever want (a job file allows 256 servers)
 * but few enough that a typo does not size the partition map. */
#define PS_SHARDS_MAX 65536

/* Set by the signal handler, read by the main loop: the one piece of
 * process-wide mutable state a daemon needs. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = sig;
}

/* Keep freed memory for reuse instead of giving it back to the kernel.
 * ZeroMQ allocates every received frame larger than its 8 KiB batch in its
 * I/O thread; glibc serves a large one with a fresh mmap (always above
 * 32 MiB, the highest threshold M_MMAP_THRESHOLD accepts, and in a
 * thread's own arena at any size that does not fit a 64 MiB heap) and
 * unmaps it on free, so a 100 MB dense push cost 24,000 page faults per
 * iteration, and as many again for each new reply. One arena, no mmap and
 * no trimming let the next iteration's frame land in pages the last one
 * already faulted in. The cost: the daemon's resident size stays at its
 * peak, which for a shard is its steady state. Must run before any thread
 * (ZeroMQ's) starts. */
static void keep_freed_memory(void)
{
    if (mallopt(M_ARENA_MAX, 1) != 1 || mallopt(M_MMAP_MAX, 0) != 1 ||
        mallopt(M_TRIM_THRESHOLD, INT_MAX) != 1)
        log_warn("mallopt refused a setting; large receives may page-fault");
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flps --job NAME --shard I --shards N [options]\n"
            "  --listen ENDPOINT          where to listen (default "
            "tcp://127.0.0.1:0, a free port)\n"
            "  --transport zmq|rdma|auto  the data plane (default zmq); rdma "
            "stops at once\n"
            "                             where this node cannot run it, auto "
            "takes RDMA\n"
            "                             where it can and ZeroMQ otherwise "
            "(docs/job-file.md)\n"
            "  --checkpoint-dir DIR       keep a write-ahead log and "
            "checkpoints in DIR\n"
            "  --checkpoint-interval SEC  write a checkpoint every SEC "
            "seconds (0 = only on request and at exit)\n"
            "  --restore                  start from the checkpoint and log "
            "in --checkpoint-dir\n"
            "  --restore-truncate-at-corruption\n"
            "                             with --restore: when a corrupt "
            "log record has intact\n"
            "                             ones after it, cut the log there "
            "(losing them) and\n"
            "                             start, instead of refusing to\n"
            "  --fsync                    fdatasync the log before every "
            "acknowledgement:\n"
            "                             acknowledged updates then survive "
            "a power loss,\n"
            "                             not only a crash of flps "
            "(docs/durability.md)\n"
            "  --checkpoint-request-interval SEC\n"
            "                             serve a CHECKPOINT request at most "
            "once per SEC\n"
            "                             seconds (default 10; 0 = no "
            "limit)\n"
            "  --max-connections N        connections at once; newer ones "
            "are closed\n"
            "                             (default 1024, at most 65535)\n"
            "  --max-unauthenticated N    connections not yet authenticated "
            "at once; a new\n"
            "                             one beyond it closes the idlest "
            "(default 256)\n"
            "  --max-unauthenticated-per-address N\n"
            "                             the same from one address "
            "(default 64)\n"
            "  --handshake-timeout-ms N   close a connection whose handshake "
            "is not done\n"
            "                             in N ms (default 5000)\n"
            "  --max-message-bytes N      refuse a message with a larger "
            "frame\n"
            "                             (default 268435456, 256 MiB)\n"
            "  --send-hwm N               replies queued per peer; more to a "
            "peer that\n"
            "                             does not read are dropped (default "
            "4096)\n"
            "  --socket-buffer BYTES      each connection's kernel send and "
            "receive\n"
            "                             buffer: what it keeps in flight "
            "(default 0,\n"
            "                             the kernel's autotuning)\n"
            "  --credentials-file PATH    the job's credentials (0600; else "
            "$FLPS_CREDENTIALS_FILE):\n"
            "                             serve only clients holding its "
            "secret (CURVE with its keys)\n"
            "  --max-model-elements N     refuse a REGISTER whose layout has "
            "more than N\n"
            "                             elements in all (default 2^31)\n"
            "  --user NAME [--group NAME] started as root: become NAME once "
            "the sockets\n"
            "                             are open (--checkpoint-dir must "
            "be NAME's)\n"
            "  --metrics HOST:PORT        serve Prometheus /metrics and "
            "/healthz over HTTP\n"
            "                             (default off; port 0 picks a free "
            "one)\n"
            "On start it prints one line 'listening on ENDPOINT' to stdout,\n"
            "then, with --metrics, 'metrics on HOST:PORT'.\n");
}

/* Every connection holds a descriptor: raise the soft limit to the hard
 * one and keep the connection cap below it (1,100 idle connections used
 * to exhaust the descriptors and make ZeroMQ's accept loop spin). */
static void fit_connections(uint32_t *max_conns)
{
    /* Files, the log, the metrics server and ZeroMQ's own descriptors. */
    const rlim_t spare = 64;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < *max_conns + spare) {
        uint32_t fit =
            rl.rlim_cur > spare + 1 ? (uint32_t)(rl.rlim_cur - spare) : 1;
        log_warn("only %llu file descriptors: --max-connections lowered from "
                 "%u to %u",
                 (unsigned long long)rl.rlim_cur, *max_conns, fit);
        *max_conns = fit;
    }
}

/* A whole number flag in [min, max], or a message naming it and 0. */
static int parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max,
                     uint64_t *out)
{
    char why[256];

    if (flps_parse_u64(opt, s, min, max, out, why, sizeof(why)) != FLPS_OK) {
        fprintf(stderr, "flps: %s\n", why);
        return 0;
    }
    return 1;
}

/* A whole number flag in [min, max], or a message naming it and 0. */
static int parse_u32(const char *opt, const char *s, uint32_t min, uint32_t max,
                     uint32_t *out)
{
    char why[256];
    uint64_t v;

    if (flps_parse_u64(opt, s, min, max, &v, why, sizeof(why)) != FLPS_OK) {
        fprintf(stderr, "flps: %s\n", why);
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

/* What the command line asks for. */
typedef struct flps_opts {
    const char *job, *listen_ep, *dir, *metrics_ep, *creds_path;
    const char *user, *group;
    uint32_t shard, nshards, interval;
    uint64_t max_elems;
    uint32_t ckpt_req_every, max_conns, hwm;
    uint32_t max_waiting, max_waiting_addr, handshake_ms, sockbuf;
    uint64_t max_frame;
    transport_select sel;
    int restore, do_fsync, cut_corrupt;
} flps_opts;

/* The daemon: what it was asked for and what it runs, in one struct that
 * each step below is given. */
typedef struct flps_daemon {
    flps_opts o;
    privdrop_target who;
    flps_creds creds;
    int have_creds;
    transport_limits lim;
    transport *t;
    transport_kind chosen;
    ps_metrics *pm;
    ps_shard *s;
    char bound[256], mbound[128];
    /* The log's component name ("flps/3"): flps_log_setup borrows it for
     * as long as the daemon logs. */
    char logname[32];
} flps_daemon;

/* A step's result when the daemon goes on to the next one; else the exit
 * status. */
#define GO_ON (-1)

/* Read argv into *o. GO_ON, or the exit status: 0 after --help, 2 for a
 * flag that is unknown or out of range (said on stderr). */
static int parse_options(int argc, char **argv, flps_opts *o)
{
    static const struct option opts[] = {
        {"job", required_argument, NULL, 'j'},
        {"shard", required_argument, NULL, 's'},
        {"shards", required_argument, NULL, 'n'},
        {"listen", required_argument, NULL, 'l'},
        {"checkpoint-dir", required_argument, NULL, 'd'},
        {"checkpoint-interval", required_argument, NULL, 'i'},
        {"restore", no_argument, NULL, 'r'},
        {"fsync", no_argument, NULL, 'f'},
        {"restore-truncate-at-corruption", no_argument, NULL, 'T'},
        {"metrics", required_argument, NULL, 'm'},
        {"max-model-elements", required_argument, NULL, 'E'},
        {"checkpoint-request-interval", required_argument, NULL, 'R'},
        {"max-connections", required_argument, NULL, 'C'},
        {"max-message-bytes", required_argument, NULL, 'B'},
        {"send-hwm", required_argument, NULL, 'H'},
        {"socket-buffer", required_argument, NULL, 'b'},
        {"max-unauthenticated", required_argument, NULL, 'W'},
        {"max-unauthenticated-per-address", required_argument, NULL, 'A'},
        {"handshake-timeout-ms", required_argument, NULL, 'S'},
        {"transport", required_argument, NULL, 'X'},
        {"user", required_argument, NULL, 'U'},
        {"group", required_argument, NULL, 'G'},
        {"credentials-file", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    memset(o, 0, sizeof(*o));
    o->listen_ep = "tcp://127.0.0.1:0";
    o->shard = UINT32_MAX;
    o->max_elems = PS_MAX_MODEL_ELEMENTS_DEFAULT;
    o->ckpt_req_every = (uint32_t)PS_CKPT_REQUEST_INTERVAL_DEFAULT;
    o->max_conns = TRANSPORT_MAX_PEERS_DEFAULT;
    o->hwm = TRANSPORT_SEND_HWM_DEFAULT;
    o->max_waiting = TRANSPORT_MAX_WAITING_DEFAULT;
    o->max_waiting_addr = TRANSPORT_MAX_WAITING_PER_ADDR_DEFAULT;
    o->handshake_ms = TRANSPORT_HANDSHAKE_MS_DEFAULT;
    o->max_frame = (uint64_t)TRANSPORT_MAX_FRAME_DEFAULT;
    o->sel.kind = TRANSPORT_KIND_ZMQ;
    o->sel.listener = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            o->job = optarg;
            break;
        case 's':
            if (!parse_u32("--shard", optarg, 0, PS_SHARDS_MAX - 1, &o->shard))
                return 2;
            break;
        case 'n':
            if (!parse_u32("--shards", optarg, 1, PS_SHARDS_MAX, &o->nshards))
                return 2;
            break;
        case 'l':
            o->listen_ep = optarg;
            break;
        case 'd':
            o->dir = optarg;
            break;
        case 'i':
            /* No tighter bound: flrun passes a job file's
             * checkpoint_interval, which has none. */
            if (!parse_u32("--checkpoint-interval", optarg, 0, UINT32_MAX,
                           &o->interval))
                return 2;
            break;
        case 'r':
            o->restore = 1;
            break;
        case 'f':
            o->do_fsync = 1;
            break;
        case 'T':
            o->cut_corrupt = 1;
            break;
        case 'm':
            o->metrics_ep = optarg;
            break;
        case 'R':
            if (!parse_u32("--checkpoint-request-interval", optarg, 0,
                           86400 * 365, &o->ckpt_req_every))
                return 2;
            break;
        case 'C':
            if (!parse_u32("--max-connections", optarg, 1, 65535,
                           &o->max_conns))
                return 2;
            break;
        case 'B':
            if (!parse_u64("--max-message-bytes", optarg, 4096,
                           UINT64_C(1) << 40, &o->max_frame))
                return 2;
            break;
        case 'H':
            if (!parse_u32("--send-hwm", optarg, 1, 1u << 24, &o->hwm))
                return 2;
            break;
        case 'b':
            if (!parse_u32("--socket-buffer", optarg, 0, 1u << 30, &o->sockbuf))
                return 2;
            break;
        case 'W':
            if (!parse_u32("--max-unauthenticated", optarg, 1, 65535,
                           &o->max_waiting))
                return 2;
            break;
        case 'A':
            if (!parse_u32("--max-unauthenticated-per-address", optarg, 1,
                           65535, &o->max_waiting_addr))
                return 2;
            break;
        case 'S':
            if (!parse_u32("--handshake-timeout-ms", optarg, 100, 600000,
                           &o->handshake_ms))
                return 2;
            break;
        case 'E':
            if (!parse_u64("--max-model-elements", optarg, 1, UINT64_C(1) << 40,
                           &o->max_elems))
                return 2;
            break;
        case 'X':
            if (!transport_kind_parse(optarg, &o->sel.kind)) {
                char choices[64];

                fprintf(stderr,
                        "flps: --transport: '%s' is not a transport; use "
                        "%s\n",
                        optarg,
                        transport_kind_choices(choices, sizeof(choices)));
                return 2;
            }
            break;
        case 'U':
            o->user = optarg;
            break;
        case 'G':
            o->group = optarg;
            break;
        case 'K':
            o->creds_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    return GO_ON;
}

/* The flags against each other, and --user resolved into d->who (with
 * --checkpoint-dir made or found to be that user's). GO_ON, or 2 with the
 * reason on stderr. */
static int check_options(flps_daemon *d)
{
    const flps_opts *o = &d->o;
    char why[1024];

    if (o->group != NULL && o->user == NULL) {
        fprintf(stderr, "flps: --group goes with --user\n");
        return 2;
    }
    if (o->user != NULL) {
        if (privdrop_resolve(o->user, o->group, &d->who, why, sizeof(why)) !=
                FLPS_OK ||
            (o->dir != NULL &&
             privdrop_own_dir(&d->who, "--checkpoint-dir", o->dir, why,
                              sizeof(why)) != FLPS_OK)) {
            fprintf(stderr, "flps: %s\n", why);
            return 2;
        }
    }
    if (o->job == NULL || o->nshards == 0 || o->shard >= o->nshards) {
        fprintf(stderr, "flps: --job, --shard and --shards are required, "
                        "with 0 <= shard < shards\n");
        usage(stderr);
        return 2;
    }
    if ((o->restore || o->interval > 0) && o->dir == NULL) {
        fprintf(stderr, "flps: --restore and --checkpoint-interval need "
                        "--checkpoint-dir\n");
        return 2;
    }
    if (o->cut_corrupt && !o->restore) {
        fprintf(stderr, "flps: --restore-truncate-at-corruption only applies "
                        "with --restore\n");
        return 2;
    }
    return GO_ON;
}

/* The process before any socket: the log's name, the job's credentials,
 * the checkpoint directory, the signals that stop the daemon, and the
 * allocator. GO_ON, or the exit status (logged). */
static int prepare_process(flps_daemon *d)
{
    const flps_opts *o = &d->o;
    char why[1024];
    struct sigaction sa;
    flps_err rc;

    snprintf(d->logname, sizeof(d->logname), "flps/%u", o->shard);
    flps_log_setup(d->logname, FLPS_LOG_INFO);
    /* No warning as root without --user: shards are started by flagent
     * and flrun, which warn (or drop) for them. */
    /* The job's credentials: --credentials-file, else the file
     * $FLPS_CREDENTIALS_FILE names. One that is named must load. */
    rc = o->creds_path != NULL
             ? creds_load(o->creds_path, &d->creds, why, sizeof(why))
             : creds_load_env(&d->creds, &d->have_creds, why, sizeof(why));
    if (o->creds_path != NULL && rc == FLPS_OK)
        d->have_creds = 1;
    if (rc != FLPS_OK) {
        log_error("%s", why);
        return 2;
    }
    if (o->dir != NULL && flps_mkdirs(o->dir) != 0) {
        log_error("cannot create checkpoint directory %s: %s", o->dir,
                  strerror(errno));
        return 1;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    keep_freed_memory();
    return GO_ON;
}

/* The data plane asked for, with its limits and (with the credentials'
 * keys) CURVE. GO_ON, or the exit status (logged). */
static int open_transport(flps_daemon *d)
{
    flps_opts *o = &d->o;
    char why[1024];
    flps_err rc;

    fit_connections(&o->max_conns);
    d->lim.send_hwm = (int)o->hwm;
    d->lim.socket_buffer = (int)o->sockbuf;
    d->lim.max_frame_bytes = (int64_t)o->max_frame;
    d->lim.max_peers = o->max_conns;
    /* No bound above the one on all connections. */
    d->lim.max_waiting =
        o->max_waiting < o->max_conns ? o->max_waiting : o->max_conns;
    d->lim.max_waiting_per_addr = o->max_waiting_addr;
    d->lim.handshake_ms = (int)o->handshake_ms;
    o->sel.limits = &d->lim;
    /* Before anything listens or waits: a shard that cannot run the
     * transport asked for stops here, saying why and what to do. */
    rc = transport_create_for(&o->sel, &d->t, &d->chosen, why, sizeof(why));
    if (rc != FLPS_OK) {
        log_error("%s", why);
        return rc == FLPS_ECONFIG ? 2 : 1;
    }
    if (why[0] != '\0')
        log_info("%s", why); /* what auto chose, and why */
    if (d->have_creds) {
        /* Every connection authenticated in its handshake: CURVE with the
         * keys, else PLAIN with the secret (RDMA: the secret in every
         * message, and CURVE's keys refused with a warning). */
        rc = transport_set_credentials(d->t, &d->creds, 1, why, sizeof(why));
        if (rc == FLPS_ECONFIG && d->chosen == TRANSPORT_KIND_RDMA) {
            log_warn("%s", why); /* the secret still authenticates */
        } else if (rc != FLPS_OK) {
            log_error("%s", why);
            return 2;
        }
    }
    return GO_ON;
}

/* The metrics server, the listening socket, the user the daemon becomes,
 * and the shard. GO_ON, or 1 (logged). */
static int start_serving(flps_daemon *d)
{
    const flps_opts *o = &d->o;
    ps_shard_config cfg = {
        .job = o->job,
        .shard = o->shard,
        .nshards = o->nshards,
        .ckpt_dir = o->dir,
        .fsync_wal = o->do_fsync,
        .wal_truncate_at_corruption = o->cut_corrupt,
        .max_model_elements = o->max_elems,
        .ckpt_request_interval_s =
            o->ckpt_req_every == 0 ? -1.0 : (double)o->ckpt_req_every,
        .send = ps_net_send,
        .send_arg = d->t,
        .secret = d->have_creds ? d->creds.secret : NULL,
    };
    char why[1024];
    flps_err rc;

    if (o->metrics_ep != NULL) {
        /* Before the shard, so it can report iteration closes; the HTTP
         * thread only ever reads the registry, never the shard. */
        rc = ps_metrics_create(o->metrics_ep, &d->pm, d->mbound,
                               sizeof(d->mbound));
        if (rc != FLPS_OK) {
            log_error("cannot serve metrics on %s (%s); fix or drop "
                      "--metrics",
                      o->metrics_ep, flps_strerror(rc));
            return 1;
        }
    }
    rc = transport_listen(d->t, o->listen_ep, d->bound, sizeof(d->bound));
    if (rc != FLPS_OK) {
        log_error("%s", d->t->errmsg);
        return 1;
    }
    /* Sockets bound (and the metrics one): the shard's files are written
     * as the user from here on. */
    rc = privdrop_apply(&d->who, why, sizeof(why));
    if (rc != FLPS_OK) {
        log_error("cannot drop privileges: %s", why);
        return 1;
    }
    if (d->pm != NULL) {
        cfg.on_close = ps_metrics_on_close;
        cfg.on_close_arg = d->pm;
    }
    rc = ps_shard_create(&cfg, o->restore, &d->s);
    if (rc != FLPS_OK) {
        log_error("cannot start shard %u: %s", o->shard, flps_strerror(rc));
        return 1;
    }
    return GO_ON;
}

/* Say where the shard listens: in the log, and on stdout for whoever
 * started it. */
static void announce(const flps_daemon *d)
{
    const flps_opts *o = &d->o;

    log_info("shard %u of %u for job %s listening on %s over %s%s%s; data "
             "plane %s",
             o->shard, o->nshards, o->job, d->bound,
             d->chosen == TRANSPORT_KIND_RDMA ? "RDMA" : "ZeroMQ",
             o->dir ? ", checkpoints in " : "", o->dir ? o->dir : "",
             !d->have_creds
                 ? "NOT authenticated (no credentials file: any peer "
                   "that knows the job id is served)"
             : d->creds.has_curve && d->chosen == TRANSPORT_KIND_ZMQ
                 ? "authenticated (job secret) and encrypted (CURVE)"
                 : "authenticated (job secret), not encrypted");
    printf("listening on %s\n", d->bound);
    if (d->pm != NULL) {
        log_info("metrics on http://%s/metrics (health: /healthz)", d->mbound);
        printf("metrics on %s\n", d->mbound);
    }
    fflush(stdout);
}

/* Receive and handle one message (or time out after 200 ms). 0 to go on,
 * 1 when the daemon must stop (logged). */
static int serve_one(flps_daemon *d)
{
    transport *t = d->t;
    ps_shard *s = d->s;
    transport_rx *rx = NULL;
    flps_err rc = transport_recv(t, 200, &rx);

    if (rc == FLPS_OK) {
        rc = ps_shard_handle(s, rx);
        if (ps_shard_is_broken(s)) {
            log_error("stopping: the shard cannot keep its state "
                      "durable (%s)",
                      flps_strerror(rc));
            return 1;
        }
    } else if (rc == FLPS_EPROTO) {
        /* Answered (and logged, rate-limited) like any refusal. */
        if (t->refused_peer != UINT32_MAX)
            ps_shard_refuse(s, t->refused_peer, FLPS_EPROTO, t->errmsg);
        else
            ps_shard_count_dropped(s, t->errmsg);
    } else if (rc != FLPS_ETIMEDOUT) {
        log_error("receive failed: %s", t->errmsg);
        return 1;
    }
    return 0;
}

/* Serve until a signal asks to stop (then write a last checkpoint and
 * return 0) or the shard cannot go on (1), with a checkpoint every
 * --checkpoint-interval seconds and the metrics' counters refreshed. */
static int run(flps_daemon *d)
{
    const uint32_t interval = d->o.interval;
    double last_ckpt = flps_mono_s(), last_metrics = 0;

    while (!stop_requested) {
        if (serve_one(d) != 0)
            return 1;
        if (interval > 0 && ps_shard_num_owned(d->s) > 0 &&
            flps_mono_s() - last_ckpt >= interval) {
            if (ps_shard_checkpoint(d->s) != FLPS_OK)
                log_error("periodic checkpoint failed; will retry");
            last_ckpt = flps_mono_s();
        }
        /* Copy the counters every 200 ms, not per message: scrapes come
         * every few seconds and each copy takes the registry lock. */
        if (d->pm != NULL && flps_mono_s() - last_metrics >= 0.2) {
            ps_metrics_update(d->pm, ps_shard_stats_get(d->s), &d->t->stats,
                              ps_shard_num_owned(d->s));
            last_metrics = flps_mono_s();
        }
    }
    log_info("signal %d: shutting down", (int)stop_requested);
    if (d->o.dir != NULL && ps_shard_num_owned(d->s) > 0)
        ps_shard_checkpoint(d->s);
    return 0;
}

/* One line of what the shard served, for its log. */
static void log_served(const flps_daemon *d)
{
    const ps_shard_stats *st = ps_shard_stats_get(d->s);
    const transport *t = d->t;
    uint64_t refused = 0;
    char handshakes[96] = "";

    for (int i = 0; i < FLPS_ERR_COUNT_; i++)
        refused += st->rejected[i];
    if (d->have_creds && d->chosen == TRANSPORT_KIND_ZMQ)
        snprintf(handshakes, sizeof(handshakes),
                 " and %llu connections (%s handshake refused)",
                 (unsigned long long)t->stats.auth_refused,
                 d->creds.has_curve ? "CURVE" : "PLAIN");
    log_info("served %llu pushes, %llu updates, %llu pulls; refused %llu "
             "messages%s; received %llu bytes, sent %llu bytes",
             (unsigned long long)st->pushes, (unsigned long long)st->updates,
             (unsigned long long)st->pulls, (unsigned long long)refused,
             handshakes, (unsigned long long)t->stats.bytes_recv,
             (unsigned long long)t->stats.bytes_sent);
    if (st->updates > 0 && ps_shard_is_async(d->s))
        log_info("async: a push was at most %llu iterations ahead of the "
                 "slowest worker",
                 (unsigned long long)st->async_max_lead);
}

/* Free what the steps made (any of them may not have run). */
static void tear_down(flps_daemon *d)
{
    if (d->s != NULL)
        log_served(d);
    ps_metrics_destroy(d->pm);
    ps_shard_destroy(d->s);
    transport_destroy(d->t);
    creds_wipe(&d->creds);
}

int main(int argc, char **argv)
{
    flps_daemon d;
    int status;

    if (flps_cli_version(argc, argv, "flps"))
        return 0;
    memset(&d, 0, sizeof(d));
    status = parse_options(argc, argv, &d.o);
    if (status == GO_ON)
        status = check_options(&d);
    if (status == GO_ON)
        status = prepare_process(&d);
    if (status == GO_ON)
        status = open_transport(&d);
    if (status == GO_ON)
        status = start_serving(&d);
    if (status == GO_ON) {
        announce(&d);
        status = run(&d);
    }
    tear_down(&d);
    return status;
}
