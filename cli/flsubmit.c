/* flsubmit: the command line for flsched: submit a job file, list, watch,
 * cancel and inspect jobs, read their logs, see the nodes. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/submit_cli.h"
#include "cli/submit_http.h"
#include "common/cliver.h"

#define FLSUBMIT_DEFAULT_URL "http://127.0.0.1:8080"

/* Set by the SIGINT/SIGTERM handler, read by watch and logs --follow
 * between polls (process-wide by nature). */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

/* One row per command drives the parsing, the global page and each
 * command's own page, so they cannot drift apart. */
typedef struct command {
    const char *name;
    const char *synopsis; /* after the name, for the pages */
    int nargs;            /* operands after the name */
    const char *arg_name; /* what the operand is, for "X needs a ..." */
    unsigned opts;        /* the CMD_OPT_* it accepts */
    const char *summary;  /* one line for the global page */
    const char *help;     /* the command's own page, after its usage line */
} command;

enum {
    CMD_OPT_FOLLOW = 1,
    CMD_OPT_EVENTS = 2,
    CMD_OPT_ALL = 4,
    CMD_OPT_JOB = 8,
};

static const command commands[] = {
    {"submit", "FILE", 1, "FILE", 0,
     "send a job file (YAML or JSON); prints the job id",
     "Reads FILE, checks its model name, and sends it to the scheduler,\n"
     "which checks it as flrun does. Prints the new job's id alone on\n"
     "stdout, so ID=$(flsubmit submit job.yaml) works.\n"
     "--json prints the created job object.\n"},
    {"list", "", 0, NULL, 0, "all jobs, in submission order",
     "A table: ID NAME STATE PROGRESS ACCURACY RESTARTS AGE.\n"
     "--json prints the API's {\"jobs\": [...]}.\n"},
    {"status", "ID", 1, "job ID", 0,
     "one job: state, progress, summary, placement",
     "State, reason (with the failing process's last error line), times,\n"
     "progress, summary and the task table of job ID.\n"
     "--json prints the job object.\n"},
    {"watch", "ID", 1, "job ID", 0,
     "live progress until the job ends; exit 0 if it\n"
     "                       SUCCEEDED, 1 if it FAILED or was CANCELLED",
     "Follows job ID until it ends, then prints its summary.\n"
     "Exit 0 if it SUCCEEDED, 1 if it FAILED or was CANCELLED.\n"
     "--json prints only the final job object.\n"},
    {"cancel", "ID | latest | --all", 1, "job ID, 'latest' or --all",
     CMD_OPT_ALL, "stop a queued or running job",
     "Stops job ID; 'latest' stops the most recently submitted job that\n"
     "is still queued or running; --all stops every queued and running\n"
     "job. --json prints each cancelled job object on its own line.\n"
     "\n"
     "  -a, --all            every queued and running job\n"},
    {"logs", "ID [--follow] [--events]", 1, "job ID",
     CMD_OPT_FOLLOW | CMD_OPT_EVENTS,
     "what the job's processes printed; --follow\n"
     "                       keeps reading until the job ends",
     "Prints the lines job ID's processes printed, oldest first, each\n"
     "after its task's name. The JSON events workers send their agent\n"
     "(progress, eval, done) are left out unless --events.\n"
     "--json prints each line object on its own line.\n"
     "\n"
     "  -f, --follow         keep reading until the job ends\n"
     "  -e, --events         show the workers' JSON event lines too\n"},
    {"nodes", "", 0, NULL, 0, "the nodes and their used/total resources",
     "A table: NAME ADDRESS STATE CPUS MEMORY GPUS HEARTBEAT.\n"
     "--json prints the API's {\"nodes\": [...]}.\n"},
    {"plan", "ID", 1, "job ID", 0, "the job's per-layer compression plan",
     "The codec and density per layer that job ID runs with.\n"
     "--json prints the plan object.\n"},
    {"doctor", "[--job FILE]", 0, NULL, CMD_OPT_JOB,
     "check that the cluster can run a job",
     "Checks what a job needs before it runs, one line per check, OK or\n"
     "FAIL with what to do: the scheduler and its version, Redis and its\n"
     "version, the agents and their resources, the dataset on each node,\n"
     "the nodes' clocks; with --job FILE asking for transport: rdma, the\n"
     "RDMA devices, ACTIVE ports and memlock limits of the nodes (with\n"
     "transport: auto, which nodes would run RDMA).\n"
     "Exit 0 when every check passes, else the exit code of the first\n"
     "failure's kind (8: the scheduler cannot be reached; 11: a check\n"
     "failed).\n"
     "\n"
     "  --job FILE           also check what this job file asks for\n"},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const command *command_find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    char left[48];

    fprintf(f, "usage: flsubmit [--scheduler URL] [--json] COMMAND [ARGS]\n"
               "\n"
               "Submit jobs to flsched and follow them.\n"
               "\n"
               "commands (flsubmit COMMAND --help for one):\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command *c = &commands[i];

        snprintf(left, sizeof(left), "%s%s%s", c->name,
                 c->synopsis[0] ? " " : "", c->synopsis);
        if (strlen(left) > 20)
            fprintf(f, "  %s\n  %-20s %s\n", left, "", c->summary);
        else
            fprintf(f, "  %-20s %s\n", left, c->summary);
    }
    fprintf(
        f,
        "\n"
        "options:\n"
        "  -s, --scheduler URL  flsched's address (default: $FLPS_SCHEDULER, "
        "else\n"
        "                       " FLSUBMIT_DEFAULT_URL ")\n"
        "      --ca FILE        https: the CA certificate (PEM) that signed\n"
        "                       flsched's --tls-cert (default: "
        "$FLPS_SCHEDULER_CA,\n"
        "                       else the system's CAs)\n"
        "  -j, --json           print the API's JSON instead of text "
        "(watch:\n"
        "                       the final job object; logs: one line "
        "object\n"
        "                       per line)\n"
        "  -f, --follow         logs: keep following until the job ends\n"
        "  -e, --events         logs: show the workers' JSON events too\n"
        "  -a, --all            cancel: every queued and running job\n"
        "      --job FILE       doctor: also check this job file's needs\n"
        "  -h, --help           this text\n"
        "\n"
        "environment:\n"
        "  FLPS_SCHEDULER       default for --scheduler\n"
        "  FLPS_TOKEN           sent as \"Authorization: Bearer TOKEN\"\n"
        "  FLPS_SCHEDULER_CA    default for --ca\n"
        "\n"
        "exit codes:\n");
#define FLSUBMIT_EXIT_LINE_(name, code, msg)                                   \
    fprintf(f, "  %-4d %s\n", code, msg);
    SUBMIT_EXIT_MAP(FLSUBMIT_EXIT_LINE_)
#undef FLSUBMIT_EXIT_LINE_
    fprintf(f, "\nmore: docs/flsubmit.md\n");
}

static void command_usage(FILE *f, const command *c)
{
    fprintf(f,
            "usage: flsubmit [--scheduler URL] [--json] %s%s%s\n"
            "\n"
            "%s"
            "\n"
            "flsubmit --help lists the commands, options and exit codes.\n",
            c->name, c->synopsis[0] ? " " : "", c->synopsis, c->help);
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("flsubmit: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nrun 'flsubmit --help' for the commands\n", stderr);
    return SUBMIT_EXIT_USAGE;
}

/* "unknown command 'stauts'; did you mean 'status'?" when one command is
 * close enough to be the likely intent. */
static int unknown_command(const char *cmd)
{
    const char *names[NCOMMANDS];
    const char *best;

    for (size_t i = 0; i < NCOMMANDS; i++)
        names[i] = commands[i].name;
    best = submit_cli_closest(cmd, names, NCOMMANDS);
    fprintf(stderr, "flsubmit: unknown command '%s'", cmd);
    if (best != NULL)
        fprintf(stderr, "; did you mean '%s'?", best);
    fputs("\nrun 'flsubmit --help' for the commands\n", stderr);
    return SUBMIT_EXIT_USAGE;
}

/* The option a command was given but does not take, or NULL. */
static const char *stray_option(const command *c, unsigned given)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{CMD_OPT_FOLLOW, "--follow"},
                 {CMD_OPT_EVENTS, "--events"},
                 {CMD_OPT_ALL, "--all"},
                 {CMD_OPT_JOB, "--job"}};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((given & names[i].bit) && !(c->opts & names[i].bit))
            return names[i].name;
    return NULL;
}

/* The command (by name) with its operand and options. */
typedef struct invocation {
    const char *arg;
    const char *job_file;
    unsigned opts;
} invocation;

static int run_command(submit_ctx *ctx, const char *cmd, const invocation *inv)
{
    if (strcmp(cmd, "submit") == 0)
        return submit_cli_submit(ctx, inv->arg);
    if (strcmp(cmd, "list") == 0)
        return submit_cli_list(ctx);
    if (strcmp(cmd, "status") == 0)
        return submit_cli_status(ctx, inv->arg);
    if (strcmp(cmd, "watch") == 0)
        return submit_cli_watch(ctx, inv->arg);
    if (strcmp(cmd, "cancel") == 0) {
        if (inv->opts & CMD_OPT_ALL)
            return submit_cli_cancel_all(ctx);
        if (strcmp(inv->arg, "latest") == 0)
            return submit_cli_cancel_latest(ctx);
        return submit_cli_cancel(ctx, inv->arg);
    }
    if (strcmp(cmd, "logs") == 0)
        return submit_cli_logs(ctx, inv->arg, (inv->opts & CMD_OPT_FOLLOW) != 0,
                               (inv->opts & CMD_OPT_EVENTS) != 0);
    if (strcmp(cmd, "nodes") == 0)
        return submit_cli_nodes(ctx);
    if (strcmp(cmd, "doctor") == 0)
        return submit_cli_doctor(ctx, inv->job_file);
    return submit_cli_plan(ctx, inv->arg);
}

int main(int argc, char **argv)
{
    enum { OPT_JOB = 256, OPT_CA };
    static const struct option opts[] = {
        {"scheduler", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"follow", no_argument, NULL, 'f'},
        {"events", no_argument, NULL, 'e'},
        {"all", no_argument, NULL, 'a'},
        {"job", required_argument, NULL, OPT_JOB},
        {"ca", required_argument, NULL, OPT_CA},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *url = getenv("FLPS_SCHEDULER"), *token = getenv("FLPS_TOKEN");
    const char *ca = getenv("FLPS_SCHEDULER_CA");
    const char *cmd, *stray;
    const command *c;
    invocation inv = {0};
    submit_http_opts hopts = {0};
    submit_ctx ctx = {0};
    struct sigaction sa;
    int json = 0, help = 0, ch, nargs, rc;
    flps_err err;

    if (flps_cli_version(argc, argv, "flsubmit"))
        return 0;
    if (url == NULL || url[0] == '\0')
        url = FLSUBMIT_DEFAULT_URL;
    /* Options may come before or after the command (GNU getopt permutes),
     * so `flsubmit status j4 --json` works. */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "s:jfeah", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            url = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'f':
            inv.opts |= CMD_OPT_FOLLOW;
            break;
        case 'e':
            inv.opts |= CMD_OPT_EVENTS;
            break;
        case 'a':
            inv.opts |= CMD_OPT_ALL;
            break;
        case OPT_JOB:
            inv.opts |= CMD_OPT_JOB;
            inv.job_file = optarg;
            break;
        case OPT_CA:
            ca = optarg;
            break;
        case 'h':
            help = 1;
            break;
        default:
            if (optopt == 's')
                return usage_error("%s needs a URL", "--scheduler");
            if (optopt == OPT_JOB)
                return usage_error("%s needs a job FILE", "--job");
            if (optopt == OPT_CA)
                return usage_error("%s needs a CA certificate FILE", "--ca");
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (help && optind >= argc) {
        usage(stdout);
        return SUBMIT_EXIT_OK;
    }
    if (optind >= argc)
        return usage_error("%s", "no command given");
    cmd = argv[optind++];
    c = command_find(cmd);
    if (c == NULL)
        return unknown_command(cmd);
    if (help) {
        command_usage(stdout, c);
        return SUBMIT_EXIT_OK;
    }
    /* cancel --all takes no ID. */
    nargs = (inv.opts & CMD_OPT_ALL) && (c->opts & CMD_OPT_ALL) ? 0 : c->nargs;
    if (argc - optind < nargs) {
        fprintf(stderr, "flsubmit: %s needs a %s\n", cmd, c->arg_name);
        fprintf(stderr, "usage: flsubmit %s%s%s\n", cmd,
                c->synopsis[0] ? " " : "", c->synopsis);
        return SUBMIT_EXIT_USAGE;
    }
    if (argc - optind > nargs)
        return usage_error("unexpected argument '%s'", argv[optind + nargs]);
    if (nargs == 1)
        inv.arg = argv[optind];
    stray = stray_option(c, inv.opts);
    if (stray != NULL) {
        fprintf(stderr, "flsubmit: %s is not an option of %s\n", stray, cmd);
        fprintf(stderr, "usage: flsubmit %s%s%s\n", cmd,
                c->synopsis[0] ? " " : "", c->synopsis);
        return SUBMIT_EXIT_USAGE;
    }
    if (url[0] == '\0')
        return usage_error("%s", "--scheduler needs a URL");
    if (ca != NULL && ca[0] != '\0' && access(ca, R_OK) != 0) {
        fprintf(stderr,
                "flsubmit: cannot read the CA file %s (--ca or "
                "FLPS_SCHEDULER_CA): %s\n",
                ca, strerror(errno));
        return SUBMIT_EXIT_USAGE;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: a poll's sleep ends */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "flsubmit: libcurl could not start\n");
        return SUBMIT_EXIT_INTERNAL;
    }
    hopts.base_url = url;
    hopts.token = token;
    hopts.ca_file = ca;
    err = submit_http_create(&hopts, &ctx.http);
    if (err != FLPS_OK) {
        fprintf(stderr, "flsubmit: cannot start the HTTP client: %s\n",
                flps_strerror(err));
        curl_global_cleanup();
        return SUBMIT_EXIT_INTERNAL;
    }
    ctx.out = stdout;
    ctx.err = stderr;
    ctx.json = json;
    ctx.out_is_tty = isatty(STDOUT_FILENO);
    ctx.err_is_tty = isatty(STDERR_FILENO);
    ctx.token_set = token != NULL && token[0] != '\0';
    ctx.stop = &interrupted;
    rc = run_command(&ctx, cmd, &inv);
    fflush(stdout);
    submit_http_destroy(ctx.http);
    curl_global_cleanup();
    return rc;
}
