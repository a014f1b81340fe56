/* flagent: the node agent. Registers this node's resources in Redis,
 * heartbeats, and starts and stops the flps and flworker processes the
 * scheduler assigns to it (docs/flagent.md, docs/scheduler.md). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cliver.h"
#include "common/log.h"
#include "scheduler/agent_config.h"
#include "scheduler/agent_node.h"
#include "services/privdrop.h"

/* Set by the signal handler, read by the agent's loop (process-wide by
 * nature: the one global the style allows). */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = sig;
}

int main(int argc, char **argv)
{
    agent_config cfg;
    agent_node *node = NULL;
    privdrop_target who;
    char errbuf[512], bin_dir[PATH_MAX];
    struct sigaction sa;
    flps_err rc;

    if (flps_cli_version(argc, argv, "flagent"))
        return 0;
    if (agent_config_parse(argc, argv, &cfg, errbuf, sizeof(errbuf)) !=
        FLPS_OK) {
        fprintf(stderr, "flagent: %s\n%s", errbuf, agent_config_usage());
        return 2;
    }
    if (cfg.help) {
        fputs(agent_config_usage(), stdout);
        return 0;
    }
    if (agent_node_find_bins(bin_dir, sizeof(bin_dir), errbuf,
                             sizeof(errbuf)) != FLPS_OK) {
        fprintf(stderr, "flagent: %s\n", errbuf);
        return 2;
    }
    if (cfg.group[0] != '\0' && cfg.user[0] == '\0') {
        fprintf(stderr, "flagent: --group goes with --user\n");
        return 2;
    }
    memset(&who, 0, sizeof(who));
    if (cfg.user[0] != '\0' &&
        privdrop_resolve(cfg.user, cfg.group, &who, errbuf, sizeof(errbuf)) !=
            FLPS_OK) {
        fprintf(stderr, "flagent: %s\n", errbuf);
        return 2;
    }
    if (privdrop_own_dir(&who, "--work-dir", cfg.work_dir, errbuf,
                         sizeof(errbuf)) != FLPS_OK ||
        (strcmp(cfg.ckpt_root, cfg.work_dir) != 0 &&
         privdrop_own_dir(&who, "--checkpoint-root", cfg.ckpt_root, errbuf,
                          sizeof(errbuf)) != FLPS_OK)) {
        fprintf(stderr, "flagent: %s\n", errbuf);
        return 2;
    }
    flps_log_setup("flagent", FLPS_LOG_INFO);
    privdrop_warn_root(&who, "flagent");
    if (cfg.redis_password_file[0] != '\0')
        setenv("FLPS_REDIS_PASSWORD_FILE", cfg.redis_password_file, 1);
    if (cfg.redis_ca[0] != '\0')
        setenv("FLPS_REDIS_CA", cfg.redis_ca, 1);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    log_info("node %s: %g cpus, %llu bytes of memory, %u gpus, address %s, "
             "work dir %s, heartbeat %.1f s; flps and flworker from %s",
             cfg.name, cfg.cpus, (unsigned long long)cfg.memory, cfg.gpus,
             cfg.address, cfg.work_dir, cfg.heartbeat, bin_dir);
    rc = agent_node_create(&cfg, bin_dir, &node);
    if (rc != FLPS_OK) {
        log_error("cannot start: %s", flps_strerror(rc));
        return rc == FLPS_EINVAL ? 2 : 1;
    }
    /* Redis is connected (its password read) and the metrics socket
     * bound: nothing later needs root. Tasks inherit the user. */
    rc = privdrop_apply(&who, errbuf, sizeof(errbuf));
    if (rc != FLPS_OK) {
        log_error("cannot drop privileges: %s", errbuf);
        agent_node_destroy(node);
        return rc == FLPS_ECONFIG ? 2 : 1;
    }
    /* The connection holds the password now: the tasks this agent starts
     * must not inherit it. */
    unsetenv("FLPS_REDIS_PASSWORD");
    rc = agent_node_run(node, &stop_requested);
    agent_node_destroy(node);
    return rc == FLPS_OK ? 0 : 1;
}
