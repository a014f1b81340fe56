/* flsubmit: the command line for flsched: submit a job file, list, watch,
 * cancel and inspect jobs, read their logs, see the nodes. */
#include <curl/curl.h>
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

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: flsubmit [--scheduler URL] [--json] COMMAND [ARGS]\n"
        "\n"
        "Submit jobs to flsched and follow them.\n"
        "\n"
        "commands:\n"
        "  submit FILE          send a job file (YAML or JSON); prints the "
        "job id\n"
        "  list                 all jobs, in submission order\n"
        "  status ID            one job: state, progress, summary, "
        "placement\n"
        "  watch ID             live progress until the job ends; exit 0 "
        "if it\n"
        "                       SUCCEEDED, 1 if it FAILED or was "
        "CANCELLED\n"
        "  cancel ID            stop a queued or running job\n"
        "  logs ID [--follow]   what the job's processes printed; "
        "--follow\n"
        "                       keeps reading until the job ends\n"
        "  nodes                the nodes and their used/total resources\n"
        "  plan ID              the job's per-layer compression plan\n"
        "\n"
        "options:\n"
        "  -s, --scheduler URL  flsched's address (default: $FLPS_SCHEDULER, "
        "else\n"
        "                       " FLSUBMIT_DEFAULT_URL ")\n"
        "  -j, --json           print the API's JSON instead of text "
        "(watch:\n"
        "                       the final job object; logs: one line "
        "object\n"
        "                       per line)\n"
        "  -f, --follow         logs: keep following until the job ends\n"
        "  -h, --help           this text\n"
        "\n"
        "environment:\n"
        "  FLPS_SCHEDULER       default for --scheduler\n"
        "  FLPS_TOKEN           sent as \"Authorization: Bearer TOKEN\"\n"
        "\n"
        "exit codes:\n");
#define FLSUBMIT_EXIT_LINE_(name, code, msg)                                   \
    fprintf(f, "  %-4d %s\n", code, msg);
    SUBMIT_EXIT_MAP(FLSUBMIT_EXIT_LINE_)
#undef FLSUBMIT_EXIT_LINE_
    fprintf(f, "\nmore: docs/flsubmit.md\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("flsubmit: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nrun 'flsubmit --help' for the commands\n", stderr);
    return SUBMIT_EXIT_USAGE;
}

/* How many arguments each command takes after its name. */
static int command_args(const char *cmd)
{
    static const char *const one[] = {"submit", "status", "watch",
                                      "cancel", "logs",   "plan"};
    static const char *const none[] = {"list", "nodes"};

    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
        if (strcmp(cmd, one[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        if (strcmp(cmd, none[i]) == 0)
            return 0;
    return -1;
}

static int run_command(submit_ctx *ctx, const char *cmd, const char *arg,
                       int follow)
{
    if (strcmp(cmd, "submit") == 0)
        return submit_cli_submit(ctx, arg);
    if (strcmp(cmd, "list") == 0)
        return submit_cli_list(ctx);
    if (strcmp(cmd, "status") == 0)
        return submit_cli_status(ctx, arg);
    if (strcmp(cmd, "watch") == 0)
        return submit_cli_watch(ctx, arg);
    if (strcmp(cmd, "cancel") == 0)
        return submit_cli_cancel(ctx, arg);
    if (strcmp(cmd, "logs") == 0)
        return submit_cli_logs(ctx, arg, follow);
    if (strcmp(cmd, "nodes") == 0)
        return submit_cli_nodes(ctx);
    return submit_cli_plan(ctx, arg);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"scheduler", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"follow", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *url = getenv("FLPS_SCHEDULER"), *token = getenv("FLPS_TOKEN");
    const char *cmd, *arg = NULL;
    submit_http_opts hopts = {0};
    submit_ctx ctx = {0};
    struct sigaction sa;
    int json = 0, follow = 0, c, nargs, rc;
    flps_err err;

    if (flps_cli_version(argc, argv, "flsubmit"))
        return 0;
    if (url == NULL || url[0] == '\0')
        url = FLSUBMIT_DEFAULT_URL;
    /* Options may come before or after the command (GNU getopt permutes),
     * so `flsubmit status j4 --json` works. */
    opterr = 0;
    while ((c = getopt_long(argc, argv, "s:jfh", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            url = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'f':
            follow = 1;
            break;
        case 'h':
            usage(stdout);
            return SUBMIT_EXIT_OK;
        default:
            if (optopt == 's')
                return usage_error("%s needs a URL", "--scheduler");
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("%s", "no command given");
    cmd = argv[optind++];
    nargs = command_args(cmd);
    if (nargs < 0)
        return usage_error("unknown command '%s'", cmd);
    if (argc - optind < nargs)
        return usage_error(strcmp(cmd, "submit") == 0 ? "%s needs a FILE"
                                                      : "%s needs a job ID",
                           cmd);
    if (argc - optind > nargs)
        return usage_error("unexpected argument '%s'", argv[optind + nargs]);
    if (nargs == 1)
        arg = argv[optind];
    if (follow && strcmp(cmd, "logs") != 0)
        return usage_error("--follow is for the logs command, not %s", cmd);
    if (url[0] == '\0')
        return usage_error("%s", "--scheduler needs a URL");

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
    rc = run_command(&ctx, cmd, arg, follow);
    fflush(stdout);
    submit_http_destroy(ctx.http);
    curl_global_cleanup();
    return rc;
}
