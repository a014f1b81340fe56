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

#include "common/cliver.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "proto/transport.h"
#include "proto/transport_select.h"
#include "ps/metrics_shard.h"
#include "ps/net.h"
#include "ps/shard.h"
#include "services/fsutil.h"
#include "services/privdrop.h"

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
            "  --max-message-bytes N      a peer sending a larger frame is "
            "disconnected\n"
            "                             (default 268435456, 256 MiB)\n"
            "  --send-hwm N               replies queued per peer; more to a "
            "peer that\n"
            "                             does not read are dropped (default "
            "4096)\n"
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

int main(int argc, char **argv)
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
        {"transport", required_argument, NULL, 'X'},
        {"user", required_argument, NULL, 'U'},
        {"group", required_argument, NULL, 'G'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *user = NULL, *group = NULL;
    privdrop_target who;
    const char *job = NULL, *listen_ep = "tcp://127.0.0.1:0", *dir = NULL;
    const char *metrics_ep = NULL;
    uint32_t shard = UINT32_MAX, nshards = 0, interval = 0;
    uint64_t max_elems = PS_MAX_MODEL_ELEMENTS_DEFAULT;
    uint32_t ckpt_req_every = (uint32_t)PS_CKPT_REQUEST_INTERVAL_DEFAULT;
    uint32_t max_conns = TRANSPORT_MAX_PEERS_DEFAULT,
             hwm = TRANSPORT_SEND_HWM_DEFAULT;
    uint64_t max_frame = (uint64_t)TRANSPORT_MAX_FRAME_DEFAULT;
    transport_limits lim;
    transport_select sel = {.kind = TRANSPORT_KIND_ZMQ, .listener = 1};
    transport_kind chosen = TRANSPORT_KIND_ZMQ;
    char why[1024];
    int restore = 0, do_fsync = 0, cut_corrupt = 0, c;
    char bound[256], comp[64], mbound[128];
    transport *t = NULL;
    ps_shard *s = NULL;
    ps_metrics *pm = NULL;
    ps_shard_config cfg;
    struct sigaction sa;
    double last_ckpt, last_metrics = 0;
    flps_err rc;
    int status = 1;

    if (flps_cli_version(argc, argv, "flps"))
        return 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            job = optarg;
            break;
        case 's':
            if (!parse_u32("--shard", optarg, 0, PS_SHARDS_MAX - 1, &shard))
                return 2;
            break;
        case 'n':
            if (!parse_u32("--shards", optarg, 1, PS_SHARDS_MAX, &nshards))
                return 2;
            break;
        case 'l':
            listen_ep = optarg;
            break;
        case 'd':
            dir = optarg;
            break;
        case 'i':
            /* No tighter bound: flrun passes a job file's
             * checkpoint_interval, which has none. */
            if (!parse_u32("--checkpoint-interval", optarg, 0, UINT32_MAX,
                           &interval))
                return 2;
            break;
        case 'r':
            restore = 1;
            break;
        case 'f':
            do_fsync = 1;
            break;
        case 'T':
            cut_corrupt = 1;
            break;
        case 'm':
            metrics_ep = optarg;
            break;
        case 'R':
            if (!parse_u32("--checkpoint-request-interval", optarg, 0,
                           86400 * 365, &ckpt_req_every))
                return 2;
            break;
        case 'C':
            if (!parse_u32("--max-connections", optarg, 1, 65535, &max_conns))
                return 2;
            break;
        case 'B':
            if (!parse_u64("--max-message-bytes", optarg, 4096,
                           UINT64_C(1) << 40, &max_frame))
                return 2;
            break;
        case 'H':
            if (!parse_u32("--send-hwm", optarg, 1, 1u << 24, &hwm))
                return 2;
            break;
        case 'E':
            if (!parse_u64("--max-model-elements", optarg, 1, UINT64_C(1) << 40,
                           &max_elems))
                return 2;
            break;
        case 'X':
            if (!transport_kind_parse(optarg, &sel.kind)) {
                fprintf(stderr,
                        "flps: --transport: '%s' is not a transport; use "
                        "zmq, rdma or auto\n",
                        optarg);
                return 2;
            }
            break;
        case 'U':
            user = optarg;
            break;
        case 'G':
            group = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    memset(&who, 0, sizeof(who));
    if (group != NULL && user == NULL) {
        fprintf(stderr, "flps: --group goes with --user\n");
        return 2;
    }
    if (user != NULL) {
        if (privdrop_resolve(user, group, &who, why, sizeof(why)) != FLPS_OK ||
            (dir != NULL && privdrop_own_dir(&who, "--checkpoint-dir", dir, why,
                                             sizeof(why)) != FLPS_OK)) {
            fprintf(stderr, "flps: %s\n", why);
            return 2;
        }
    }
    if (job == NULL || nshards == 0 || shard >= nshards) {
        fprintf(stderr, "flps: --job, --shard and --shards are required, "
                        "with 0 <= shard < shards\n");
        usage(stderr);
        return 2;
    }
    if ((restore || interval > 0) && dir == NULL) {
        fprintf(stderr, "flps: --restore and --checkpoint-interval need "
                        "--checkpoint-dir\n");
        return 2;
    }
    if (cut_corrupt && !restore) {
        fprintf(stderr, "flps: --restore-truncate-at-corruption only applies "
                        "with --restore\n");
        return 2;
    }
    snprintf(comp, sizeof(comp), "flps/%u", shard);
    flps_log_setup(comp, FLPS_LOG_INFO);
    /* No warning as root without --user: shards are started by flagent
     * and flrun, which warn (or drop) for them. */
    if (dir != NULL && flps_mkdirs(dir) != 0) {
        log_error("cannot create checkpoint directory %s: %s", dir,
                  strerror(errno));
        return 1;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    keep_freed_memory();
    fit_connections(&max_conns);
    lim.send_hwm = (int)hwm;
    lim.max_frame_bytes = (int64_t)max_frame;
    lim.max_peers = max_conns;
    sel.limits = &lim;
    /* Before anything listens or waits: a shard that cannot run the
     * transport asked for stops here, saying why and what to do. */
    rc = transport_create_for(&sel, &t, &chosen, why, sizeof(why));
    if (rc != FLPS_OK) {
        log_error("%s", why);
        return rc == FLPS_ECONFIG ? 2 : 1;
    }
    if (why[0] != '\0')
        log_info("%s", why); /* what auto chose, and why */
    if (metrics_ep != NULL) {
        /* Before the shard, so it can report iteration closes; the HTTP
         * thread only ever reads the registry, never the shard. */
        rc = ps_metrics_create(metrics_ep, &pm, mbound, sizeof(mbound));
        if (rc != FLPS_OK) {
            log_error("cannot serve metrics on %s (%s); fix or drop "
                      "--metrics",
                      metrics_ep, flps_strerror(rc));
            goto out;
        }
    }
    rc = transport_listen(t, listen_ep, bound, sizeof(bound));
    if (rc != FLPS_OK) {
        log_error("%s", t->errmsg);
        goto out;
    }
    /* Sockets bound (and the metrics one): the shard's files are written
     * as the user from here on. */
    rc = privdrop_apply(&who, why, sizeof(why));
    if (rc != FLPS_OK) {
        log_error("cannot drop privileges: %s", why);
        goto out;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = job;
    cfg.shard = shard;
    cfg.nshards = nshards;
    cfg.ckpt_dir = dir;
    cfg.fsync_wal = do_fsync;
    cfg.wal_truncate_at_corruption = cut_corrupt;
    cfg.max_model_elements = max_elems;
    cfg.ckpt_request_interval_s =
        ckpt_req_every == 0 ? -1.0 : (double)ckpt_req_every;
    cfg.send = ps_net_send;
    cfg.send_arg = t;
    if (pm != NULL) {
        cfg.on_close = ps_metrics_on_close;
        cfg.on_close_arg = pm;
    }
    rc = ps_shard_create(&cfg, restore, &s);
    if (rc != FLPS_OK) {
        log_error("cannot start shard %u: %s", shard, flps_strerror(rc));
        goto out;
    }
    log_info("shard %u of %u for job %s listening on %s over %s%s%s", shard,
             nshards, job, bound,
             chosen == TRANSPORT_KIND_RDMA ? "RDMA" : "ZeroMQ",
             dir ? ", checkpoints in " : "", dir ? dir : "");
    printf("listening on %s\n", bound);
    if (pm != NULL) {
        log_info("metrics on http://%s/metrics (health: /healthz)", mbound);
        printf("metrics on %s\n", mbound);
    }
    fflush(stdout);

    last_ckpt = flps_mono_s();
    while (!stop_requested) {
        transport_rx *rx = NULL;
        rc = transport_recv(t, 200, &rx);
        if (rc == FLPS_OK) {
            rc = ps_shard_handle(s, rx);
            if (ps_shard_is_broken(s)) {
                log_error("stopping: the shard cannot keep its state "
                          "durable (%s)",
                          flps_strerror(rc));
                goto out;
            }
        } else if (rc == FLPS_EPROTO) {
            /* Answered (and logged, rate-limited) like any refusal. */
            if (t->refused_peer != UINT32_MAX)
                ps_shard_refuse(s, t->refused_peer, FLPS_EPROTO, t->errmsg);
            else
                ps_shard_count_dropped(s, t->errmsg);
        } else if (rc != FLPS_ETIMEDOUT) {
            log_error("receive failed: %s", t->errmsg);
            goto out;
        }
        if (interval > 0 && ps_shard_num_owned(s) > 0 &&
            flps_mono_s() - last_ckpt >= interval) {
            if (ps_shard_checkpoint(s) != FLPS_OK)
                log_error("periodic checkpoint failed; will retry");
            last_ckpt = flps_mono_s();
        }
        /* Copy the counters every 200 ms, not per message: scrapes come
         * every few seconds and each copy takes the registry lock. */
        if (pm != NULL && flps_mono_s() - last_metrics >= 0.2) {
            ps_metrics_update(pm, ps_shard_stats_get(s), &t->stats,
                              ps_shard_num_owned(s));
            last_metrics = flps_mono_s();
        }
    }
    log_info("signal %d: shutting down", (int)stop_requested);
    if (dir != NULL && ps_shard_num_owned(s) > 0)
        ps_shard_checkpoint(s);
    status = 0;
out:
    if (s != NULL) {
        const ps_shard_stats *st = ps_shard_stats_get(s);
        uint64_t refused = 0;
        for (int i = 0; i < FLPS_ERR_COUNT_; i++)
            refused += st->rejected[i];
        log_info("served %llu pushes, %llu updates, %llu pulls; refused %llu "
                 "messages; received %llu bytes, sent %llu bytes",
                 (unsigned long long)st->pushes,
                 (unsigned long long)st->updates, (unsigned long long)st->pulls,
                 (unsigned long long)refused,
                 (unsigned long long)t->stats.bytes_recv,
                 (unsigned long long)t->stats.bytes_sent);
        if (st->updates > 0 && ps_shard_is_async(s))
            log_info("async: a push was at most %llu iterations ahead of the "
                     "slowest worker",
                     (unsigned long long)st->async_max_lead);
    }
    ps_metrics_destroy(pm);
    ps_shard_destroy(s);
    transport_destroy(t);
    return status;
}
