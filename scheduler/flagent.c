/* flagent: the node agent. Registers this node's resources in Redis,
 * heartbeats, and starts and stops the flps and flworker processes the
 * scheduler assigns to it (docs/flagent.md, docs/scheduler.md). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "scheduler/agent_config.h"
#include "scheduler/agent_node.h"
#include "services/cliver.h"
#include "services/plural.h"
#include "services/privdrop.h"

/* Set by the signal handler, read by the agent's loop (process-wide by
 * nature: the one global the style allows). */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = sig;
}

/* A password in a --redis URL on the command line, overwritten in place:
 * /proc/PID/cmdline is readable by every user of the machine, the tasks
 * included. cfg keeps its own copy. */
static void hide_url_password(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char *url = strstr(argv[i], "://"), *at, *colon;

        if (url == NULL || (strncmp(argv[i], "redis", 5) != 0 &&
                            strncmp(argv[i], "--redis=redis", 13) != 0))
            continue;
        url += 3;
        at = strchr(url, '@');
        if (at == NULL)
            continue;
        colon = memchr(url, ':', (size_t)(at - url));
        for (char *p = colon != NULL ? colon + 1 : url; p < at; p++)
            *p = '*';
    }
}

/* Remove name from the environment, its value overwritten where it lies
 * first: unsetenv only drops the pointer, and /proc/PID/environ shows the
 * process's first environment as long as it runs. */
static void wipe_env(const char *name)
{
    size_t n = strlen(name);

    for (char **e = environ; *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            explicit_bzero(*e + n + 1, strlen(*e + n + 1));
    unsetenv(name);
}

/* Say once what keeps the jobs of this node apart, when something does
 * not: per-job uids need an agent that stays root. */
static void warn_isolation(const agent_config *cfg)
{
    static const char what[] =
        "so a job can read the files of the others on this node (their "
        "credentials, job files, checkpoints, logs) and signal their "
        "processes";

    if (cfg->user[0] != '\0')
        log_warn("every job's tasks run as %s, like flagent (--user), %s; "
                 "started as root without --user, flagent runs each job as "
                 "a uid of its own (--job-uids)",
                 cfg->user, what);
    else if (geteuid() != 0)
        log_warn("flagent runs as uid %u, not root: every job's tasks run "
                 "as that uid too, %s; start flagent as root for a uid per "
                 "job (--job-uids)",
                 (unsigned)geteuid(), what);
    else if (!cfg->job_uids)
        log_warn("--job-uids off: every job's tasks run as root, %s, and "
                 "may do anything on this machine",
                 what);
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
    hide_url_password(argc, argv);
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
    if (!cfg.job_uids)
        privdrop_warn_root(&who, "flagent");
    warn_isolation(&cfg);
    if (cfg.redis_password_file[0] != '\0')
        setenv("FLPS_REDIS_PASSWORD_FILE", cfg.redis_password_file, 1);
    if (cfg.redis_ca[0] != '\0')
        setenv("FLPS_REDIS_CA", cfg.redis_ca, 1);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    log_info("node %s: %g %s, %llu bytes of memory, %u %s, address %s, "
             "work dir %s, heartbeat %.1f s; flps and flworker from %s",
             cfg.name, cfg.cpus, plural_word(cfg.cpus, "cpu", "cpus"),
             (unsigned long long)cfg.memory, cfg.gpus,
             plural_word(cfg.gpus, "gpu", "gpus"), cfg.address, cfg.work_dir,
             cfg.heartbeat, bin_dir);
    rc = agent_node_create(&cfg, bin_dir, &node);
    /* The connection holds the password now: neither the tasks this agent
     * starts nor a reader of its /proc/PID/environ may find it. */
    wipe_env("FLPS_REDIS_PASSWORD");
    wipe_env("FLPS_REDIS_PASSWORD_FILE");
    wipe_env("FLPS_REDIS_USER");
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
    rc = agent_node_run(node, &stop_requested);
    agent_node_destroy(node);
    return rc == FLPS_OK ? 0 : 1;
}
