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
#include "cli/submit_cmds.h"
#include "cli/submit_http.h"
#include "common/strbuf.h"
#include "services/cliver.h"
#include "services/jobspec_flags.h"

/* Set by the SIGINT/SIGTERM handler, read by watch and logs --follow
 * between polls (process-wide by nature). */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

/* The exit codes' lines for the global page. */
static flps_err exit_code_lines(flps_strbuf *out)
{
#define FLSUBMIT_EXIT_LINE_(name, code, msg)                                   \
    flps_strbuf_printf(out, "  %-4d %s\n", code, msg);
    SUBMIT_EXIT_MAP(FLSUBMIT_EXIT_LINE_)
#undef FLSUBMIT_EXIT_LINE_
    return flps_strbuf_error(out);
}

/* Print a page the table makes; 0, or 70 when it cannot be made. */
static int print_page(flps_strbuf *page, flps_err err)
{
    if (err != FLPS_OK) {
        flps_strbuf_fini(page);
        fprintf(stderr, "flsubmit: out of memory\n");
        return SUBMIT_EXIT_INTERNAL;
    }
    fputs(page->data, stdout);
    flps_strbuf_fini(page);
    return SUBMIT_EXIT_OK;
}

static int usage(void)
{
    flps_strbuf codes = FLPS_STRBUF_INIT, page = FLPS_STRBUF_INIT;
    flps_err err = exit_code_lines(&codes);

    if (err == FLPS_OK)
        err = submit_cmds_usage(&page, codes.data);
    flps_strbuf_fini(&codes);
    return print_page(&page, err);
}

static int command_usage(const submit_command *c)
{
    flps_strbuf page = FLPS_STRBUF_INIT;

    return print_page(&page, submit_cmds_command_usage(c, &page));
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("flsubmit: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nrun 'flsubmit --help' for the commands\n", stderr);
    return SUBMIT_EXIT_USAGE;
}

static void command_line_of(const submit_command *c)
{
    fprintf(stderr, "usage: flsubmit %s%s%s\n", c->name,
            c->synopsis[0] ? " " : "", c->synopsis);
}

/* "unknown command 'stauts'; did you mean 'status'?" when one command is
 * close enough to be the likely intent. */
static int unknown_command(const char *cmd)
{
    const submit_command *cmds;
    const char *names[32], *best;
    size_t n;

    cmds = submit_cmds_commands(&n);
    for (size_t i = 0; i < n && i < 32; i++)
        names[i] = cmds[i].name;
    best = submit_cli_closest(cmd, names, n < 32 ? n : 32);
    fprintf(stderr, "flsubmit: unknown command '%s'", cmd);
    if (best != NULL)
        fprintf(stderr, "; did you mean '%s'?", best);
    fputs("\nrun 'flsubmit --help' for the commands\n", stderr);
    return SUBMIT_EXIT_USAGE;
}

/* The command line: the command with its operand and options, and where
 * and how to reach flsched. */
typedef struct invocation {
    const char *cmd;
    const submit_command *c;
    const char *arg;
    const char *job_file;
    unsigned given; /* 1 << submit_opt_id of each option given */
    const char *url, *token, *ca;
    const char *output; /* -o's word, or NULL for text */
    int help;
    /* submit's words but flsubmit's own options ([FILE] -n 4 ... -- CMD),
     * after job_argv[0] (the program's name, for getopt); 0 when none */
    int job_argc;
    char **job_argv;
    jobspec_flags flags;     /* what they say */
    const char *submit_file; /* their job file, or NULL */
} invocation;

static int run_command(submit_ctx *ctx, const char *cmd, invocation *inv)
{
    if (strcmp(cmd, "submit") == 0)
        return submit_cli_submit(ctx, inv->submit_file, &inv->flags);
    if (strcmp(cmd, "list") == 0)
        return submit_cli_list(ctx);
    if (strcmp(cmd, "status") == 0)
        return submit_cli_status(ctx, inv->arg);
    if (strcmp(cmd, "watch") == 0)
        return submit_cli_watch(ctx, inv->arg);
    if (strcmp(cmd, "cancel") == 0) {
        if (inv->given & (1u << SUBMIT_OPT_ALL))
            return submit_cli_cancel_all(ctx);
        if (strcmp(inv->arg, "latest") == 0)
            return submit_cli_cancel_latest(ctx);
        return submit_cli_cancel(ctx, inv->arg);
    }
    if (strcmp(cmd, "logs") == 0)
        return submit_cli_logs(ctx, inv->arg,
                               (inv->given & (1u << SUBMIT_OPT_FOLLOW)) != 0,
                               (inv->given & (1u << SUBMIT_OPT_EVENTS)) != 0);
    if (strcmp(cmd, "nodes") == 0)
        return submit_cli_nodes(ctx);
    if (strcmp(cmd, "doctor") == 0)
        return submit_cli_doctor(ctx, inv->job_file);
    return submit_cli_plan(ctx, inv->arg);
}

/* getopt_long's options and short-option string, from the table. */
typedef struct getopt_table {
    struct option longs[SUBMIT_OPT_COUNT + 1];
    char shorts[2 * SUBMIT_OPT_COUNT + 2];
} getopt_table;

static void getopt_table_init(getopt_table *t)
{
    const submit_option *opts;
    size_t n, k = 0;

    opts = submit_cmds_options(&n);
    memset(t, 0, sizeof(*t));
    t->shorts[k++] = ':'; /* a missing argument is told from an unknown */
    for (size_t i = 0; i < n; i++) {
        t->longs[i].name = opts[i].name;
        t->longs[i].has_arg =
            opts[i].arg != NULL ? required_argument : no_argument;
        t->longs[i].val = submit_cmds_opt_val(&opts[i]);
        if (opts[i].letter != 0) {
            t->shorts[k++] = (char)opts[i].letter;
            if (opts[i].arg != NULL)
                t->shorts[k++] = ':';
        }
    }
}

/* Take one option getopt_long returned (o, its argument arg): an
 * argument goes where its option's slot says; --json is -o json; the
 * switches are in inv->given. */
static void take_option(invocation *inv, const submit_option *o,
                        const char *arg)
{
    const char **slot[SUBMIT_OPT_COUNT] = {
        [SUBMIT_OPT_SCHEDULER] = &inv->url,
        [SUBMIT_OPT_CA] = &inv->ca,
        [SUBMIT_OPT_OUTPUT] = &inv->output,
        [SUBMIT_OPT_JOB] = &inv->job_file,
    };

    inv->given |= 1u << o->id;
    if (slot[o->id] != NULL)
        *slot[o->id] = arg;
    if (o->id == SUBMIT_OPT_JSON)
        inv->output = "json";
    inv->help |= o->id == SUBMIT_OPT_HELP;
}

/* Read the options (before or after the command: GNU getopt permutes,
 * so `flsubmit status j4 --json` works) into inv. Returns -1 to go on,
 * else the exit status (a usage error, said). */
static int parse_options(int argc, char **argv, invocation *inv)
{
    const submit_option *o;
    getopt_table t;
    int ch;

    getopt_table_init(&t);
    opterr = 0;
    while ((ch = getopt_long(argc, argv, t.shorts, t.longs, NULL)) != -1) {
        o = ch == ':' || ch == '?' ? submit_cmds_opt_by_val(optopt)
                                   : submit_cmds_opt_by_val(ch);
        if (ch == ':' && o != NULL) {
            char what[80];

            snprintf(what, sizeof(what), "--%s needs %s %s", o->name,
                     o->arg != NULL && strchr("AEIOU", o->arg[0]) ? "an" : "a",
                     o->arg != NULL ? o->arg : "value");
            if (o->id == SUBMIT_OPT_JOB)
                snprintf(what, sizeof(what), "--job needs a job FILE");
            else if (o->id == SUBMIT_OPT_CA)
                snprintf(what, sizeof(what),
                         "--ca needs a CA certificate FILE");
            return usage_error("%s", what);
        }
        if (ch == '?' || o == NULL)
            return usage_error("unknown option '%s'", argv[optind - 1]);
        take_option(inv, o, optarg);
    }
    return -1;
}

/* Is w one of flsubmit's own options ("--json", "--output=yaml", "-o",
 * "-h")? After `submit` (in_submit), -s is the job's servers, not
 * --scheduler. *takes_next: its argument is the next word. */
static int own_option(const char *w, int in_submit, int *takes_next)
{
    const submit_option *opts;
    size_t n, k;

    *takes_next = 0;
    if (w[0] != '-' || w[1] == '\0')
        return 0;
    opts = submit_cmds_options(&n);
    for (size_t i = 0; i < n; i++) {
        if (w[1] == '-') {
            k = strlen(opts[i].name);
            if (strncmp(w + 2, opts[i].name, k) != 0 ||
                (w[2 + k] != '\0' && w[2 + k] != '='))
                continue;
            *takes_next = opts[i].arg != NULL && w[2 + k] == '\0';
            return 1;
        }
        if (opts[i].letter == w[1] && !(in_submit && w[1] == 's')) {
            *takes_next = opts[i].arg != NULL && w[2] == '\0';
            return 1;
        }
    }
    return 0;
}

/* The index of the command word in argv, or argc when there is none:
 * the first word that is neither an option nor an option's argument. */
static int command_index(int argc, char **argv)
{
    int takes_next;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return i + 1 < argc ? i + 1 : argc;
        if (argv[i][0] != '-' || argv[i][1] == '\0')
            return i;
        if (own_option(argv[i], 0, &takes_next) && takes_next)
            i++;
    }
    return argc;
}

/* The words after `submit` ([FILE] -n 4 ... -- CMD): flsubmit's own
 * options among them stay in argv, for getopt; the job's words move to
 * inv->job_argv[1..] (in their order). argv keeps its first *argc words.
 * Returns -1 to go on, else the exit status. */
static int split_submit_words(int *argc, char **argv, invocation *inv)
{
    int cmd = command_index(*argc, argv), keep, takes_next;

    if (cmd >= *argc || strcmp(argv[cmd], "submit") != 0)
        return -1;
    inv->job_argv = calloc((size_t)*argc + 1, sizeof(*inv->job_argv));
    if (inv->job_argv == NULL) {
        fprintf(stderr, "flsubmit: out of memory\n");
        return SUBMIT_EXIT_INTERNAL;
    }
    inv->job_argv[inv->job_argc++] = argv[0];
    keep = cmd + 1;
    for (int i = cmd + 1; i < *argc; i++) {
        const char *w = argv[i];

        if (strcmp(w, "--") == 0) {
            while (i < *argc)
                inv->job_argv[inv->job_argc++] = argv[i++];
            break;
        }
        if (own_option(w, 1, &takes_next)) {
            argv[keep++] = argv[i];
            if (takes_next && i + 1 < *argc)
                argv[keep++] = argv[++i];
            continue;
        }
        inv->job_argv[inv->job_argc++] = argv[i];
        /* A flag's value is the job's, whatever it looks like. */
        if (w[0] == '-' && w[1] != '\0' &&
            (w[1] == '-' ? strchr(w, '=') == NULL : w[2] == '\0') &&
            i + 1 < *argc && strcmp(argv[i + 1], "--") != 0)
            inv->job_argv[inv->job_argc++] = argv[++i];
    }
    *argc = keep;
    if (inv->job_argc == 1)
        inv->job_argc = 0; /* none: "submit needs a FILE" */
    return -1;
}

/* A job word refused: said, exit status rc. */
static int job_words_refused(const char *why, int rc)
{
    fprintf(stderr, "flsubmit: %s; nothing was sent\n", why);
    return rc;
}

/* submit's job words read as flrun reads its own (services/jobspec_flags.h):
 * each flag checked as the job file's value would be, at most one FILE,
 * the command after --. Returns -1 to go on, else the exit status: 64 for
 * words that say no job, 2 for a value refused. */
static int parse_job_words(invocation *inv)
{
    struct option opts[JOBSPEC_FLAGS_KEYS + 1];
    char why[1100], letter[3] = "-";
    char **argv = inv->job_argv;
    size_t n;
    int c, nargs;

    jobspec_flags_init(&inv->flags);
    if (inv->job_argc == 0)
        return -1;
    n = jobspec_flags_options(&inv->flags, opts, JOBSPEC_FLAGS_KEYS);
    memset(&opts[n], 0, sizeof(opts[n]));
    nargs = jobspec_flags_split(&inv->flags, inv->job_argc, argv);
    optind = 0; /* a fresh scan, of other words than main's */
    opterr = 0;
    while ((c = getopt_long(nargs, argv, ":" JOBSPEC_FLAGS_SHORT, opts,
                            NULL)) != -1) {
        if (c == '?' || c == ':') {
            /* optopt: the letter of a short option; 0, or a long
             * option's value, for a long one (the word just read). */
            letter[1] = optopt > 0 && optopt < 0x80 ? (char)optopt : '\0';
            jobspec_flags_refuse_word(letter[1] ? letter : argv[optind - 1],
                                      c == ':', why, sizeof(why));
            return job_words_refused(why, SUBMIT_EXIT_USAGE);
        }
        if (jobspec_flags_take(&inv->flags, c, optarg, why, sizeof(why)) < 0)
            return job_words_refused(why, SUBMIT_EXIT_REFUSED);
    }
    if (jobspec_flags_operands(&inv->flags, inv->job_argc, nargs, argv, optind,
                               &inv->submit_file, why, sizeof(why)) != FLPS_OK)
        return job_words_refused(why, SUBMIT_EXIT_USAGE);
    return -1;
}

/* The option a command was given but does not take, or NULL. */
static const submit_option *stray_option(const submit_command *c,
                                         unsigned given)
{
    const submit_option *opts;
    size_t n;

    opts = submit_cmds_options(&n);
    for (size_t i = 0; i < n; i++)
        if ((given & (1u << opts[i].id)) && !submit_cmds_takes(c, &opts[i]))
            return &opts[i];
    return NULL;
}

/* -o's word for command c: text (NULL), json, yaml, or wide where c has a
 * wider table. Returns -1 to go on, else the exit status. */
static int check_output(const invocation *inv)
{
    const char *o = inv->output;

    if (o == NULL)
        return -1;
    if (strcmp(o, "json") != 0 && strcmp(o, "yaml") != 0 &&
        strcmp(o, "wide") != 0)
        return usage_error("-o takes json, yaml or wide, not '%s'", o);
    if (strcmp(o, "wide") == 0 ? inv->c->wide == NULL
                               : inv->c->object == NULL) {
        fprintf(stderr, "flsubmit: %s has no -o %s%s\n", inv->cmd, o,
                strcmp(o, "wide") == 0 ? " (list, status and nodes have)" : "");
        command_line_of(inv->c);
        return SUBMIT_EXIT_USAGE;
    }
    return -1;
}

/* The command and its operands after the options: which command, its
 * operand, options it does not take, a CA file that cannot be read.
 * Returns -1 to go on, else the exit status (help printed, or a usage
 * error said). */
static int check_command(int argc, char **argv, invocation *inv)
{
    const submit_option *stray;
    int nargs, rc;

    if (inv->help && optind >= argc)
        return usage();
    if (optind >= argc)
        return usage_error("%s", "no command given");
    inv->cmd = argv[optind++];
    inv->c = submit_cmds_find(inv->cmd);
    if (inv->c == NULL)
        return unknown_command(inv->cmd);
    if (inv->help)
        return command_usage(inv->c);
    /* cancel --all takes no ID; submit's FILE is among its job words. */
    nargs = ((inv->given & (1u << SUBMIT_OPT_ALL)) &&
             submit_cmds_takes(inv->c, submit_cmds_option(SUBMIT_OPT_ALL))) ||
                    inv->job_argc > 0
                ? 0
                : inv->c->nargs;
    if (argc - optind < nargs) {
        fprintf(stderr, "flsubmit: %s needs a %s\n", inv->cmd,
                inv->c->arg_name);
        command_line_of(inv->c);
        return SUBMIT_EXIT_USAGE;
    }
    if (argc - optind > nargs)
        return usage_error("unexpected argument '%s'", argv[optind + nargs]);
    if (nargs == 1)
        inv->arg = argv[optind];
    stray = stray_option(inv->c, inv->given);
    if (stray != NULL) {
        fprintf(stderr, "flsubmit: --%s is not an option of %s\n", stray->name,
                inv->cmd);
        command_line_of(inv->c);
        return SUBMIT_EXIT_USAGE;
    }
    if ((rc = check_output(inv)) >= 0)
        return rc;
    if (inv->url[0] == '\0')
        return usage_error("%s", "--scheduler needs a URL");
    if (inv->ca != NULL && inv->ca[0] != '\0' && access(inv->ca, R_OK) != 0) {
        fprintf(stderr,
                "flsubmit: cannot read the CA file %s (--ca or "
                "FLPS_SCHEDULER_CA): %s\n",
                inv->ca, strerror(errno));
        return SUBMIT_EXIT_USAGE;
    }
    return -1;
}

/* flsubmit completion bash|zsh: the script, made from the table. */
static int completion(const char *shell)
{
    flps_strbuf page = FLPS_STRBUF_INIT;
    flps_err err = submit_cmds_completion(shell, &page);

    if (err == FLPS_EINVAL) {
        flps_strbuf_fini(&page);
        fprintf(stderr, "flsubmit: no completion for '%s'; bash or zsh\n",
                shell);
        return SUBMIT_EXIT_USAGE;
    }
    return print_page(&page, err);
}

/* Run the command against flsched over a fresh HTTP client; its exit
 * status. */
static int run(invocation *inv)
{
    submit_http_opts hopts = {0};
    submit_ctx ctx = {0};
    struct sigaction sa;
    flps_err err;
    int rc;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: a poll's sleep ends */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "flsubmit: libcurl could not start\n");
        return SUBMIT_EXIT_INTERNAL;
    }
    hopts.base_url = inv->url;
    hopts.token = inv->token;
    hopts.ca_file = inv->ca;
    err = submit_http_create(&hopts, &ctx.http);
    if (err != FLPS_OK) {
        fprintf(stderr, "flsubmit: cannot start the HTTP client: %s\n",
                flps_strerror(err));
        curl_global_cleanup();
        return SUBMIT_EXIT_INTERNAL;
    }
    ctx.out = stdout;
    ctx.err = stderr;
    ctx.json = inv->output != NULL && strcmp(inv->output, "wide") != 0;
    ctx.yaml = inv->output != NULL && strcmp(inv->output, "yaml") == 0;
    ctx.wide = inv->output != NULL && strcmp(inv->output, "wide") == 0;
    ctx.out_is_tty = isatty(STDOUT_FILENO);
    ctx.err_is_tty = isatty(STDERR_FILENO);
    ctx.token_set = inv->token != NULL && inv->token[0] != '\0';
    ctx.stop = &interrupted;
    rc = run_command(&ctx, inv->cmd, inv);
    fflush(stdout);
    submit_http_destroy(ctx.http);
    curl_global_cleanup();
    return rc;
}

/* The token from $FLPS_TOKEN_FILE (its first line, without surrounding
 * blanks) into buf, when FLPS_TOKEN is not set: a token kept in a private
 * file never needs to be in a shell's history or environment. NULL when
 * there is none; exits with SUBMIT_EXIT_USAGE when the file cannot be
 * read. */
static const char *token_from_file(char *buf, size_t len)
{
    const char *path = getenv("FLPS_TOKEN_FILE");
    size_t n, start = 0;
    FILE *f;

    if (path == NULL || path[0] == '\0')
        return NULL;
    f = fopen(path, "r");
    if (f == NULL || fgets(buf, (int)len, f) == NULL) {
        fprintf(stderr, "flsubmit: FLPS_TOKEN_FILE=%s: %s\n", path,
                f == NULL ? strerror(errno) : "empty file");
        if (f != NULL)
            fclose(f);
        exit(SUBMIT_EXIT_USAGE);
    }
    fclose(f);
    n = strcspn(buf, "\r\n");
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    buf[n] = '\0';
    while (buf[start] == ' ' || buf[start] == '\t')
        start++;
    return buf[start] != '\0' ? buf + start : NULL;
}

int main(int argc, char **argv)
{
    invocation inv = {0};
    char token[512];
    int rc;

    if (flps_cli_version(argc, argv, "flsubmit"))
        return 0;
    inv.url = getenv("FLPS_SCHEDULER");
    inv.token = getenv("FLPS_TOKEN");
    if (inv.token == NULL || inv.token[0] == '\0')
        inv.token = token_from_file(token, sizeof(token));
    inv.ca = getenv("FLPS_SCHEDULER_CA");
    if (inv.url == NULL || inv.url[0] == '\0')
        inv.url = SUBMIT_DEFAULT_URL;
    rc = split_submit_words(&argc, argv, &inv);
    if (rc < 0)
        rc = parse_options(argc, argv, &inv);
    if (rc < 0)
        rc = check_command(argc, argv, &inv);
    if (rc < 0 && !inv.c->needs_scheduler)
        rc = completion(inv.arg);
    if (rc < 0)
        rc = parse_job_words(&inv);
    if (rc < 0)
        rc = run(&inv);
    free(inv.job_argv);
    return rc;
}
