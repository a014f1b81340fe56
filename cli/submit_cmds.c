/* flsubmit's commands and options, and what is made from them: the pages
 * and the shell completion scripts (see submit_cmds.h). */
#include "cli/submit_cmds.h"

#include <stdio.h>
#include <string.h>

#include "services/jobspec_flags.h"

static const submit_command commands[] = {
    {"submit", "FILE [FLAGS] | [FLAGS] -- CMD [ARGS]", 1, "FILE",
     SUBMIT_ARG_FILE, NULL, 1,
     "send a job file (YAML or JSON), or a job said\n"
     "torchrun-style; prints the job id",
     "Reads FILE, checks that it is UTF-8 text and its model name, and sends\n"
     "it to the scheduler, which checks it as flrun does. Prints the new\n"
     "job's id alone on stdout, so ID=$(flsubmit submit job.yaml) works.\n"
     "\n"
     "The job can also be said torchrun-style, with the words flrun takes:\n"
     "  flsubmit submit -n 4 -s 1 --compression gtopk:0.01 -- python3 t.py\n"
     "  flsubmit submit job.yaml -n 2 --lr 0.05\n"
     "FLAGS are -n/--workers W and -s/--servers S (after `submit`, -s is the\n"
     "servers, not --scheduler) and --KEY VALUE for any job-file key\n"
     "(--batch-size for batch_size; docs/job-file.md); the program and its\n"
     "arguments after -- become command:. A flag overrides FILE's value. A\n"
     "job without FILE is named after the script unless --name is given. A\n"
     "refused value is named by its flag (--compression: ...).\n",
     "the created job object", NULL},
    {"list", "", 0, NULL, SUBMIT_ARG_NONE, NULL, 1,
     "all jobs, in submission order",
     "A table: ID NAME STATE PROGRESS ACCURACY RESTARTS AGE, the jobs\n"
     "in the order they were submitted.\n",
     "the API's {\"jobs\": [...]}",
     "WORKERS SERVERS PRIORITY TRANSPORT (what\nit ran) SENT NODES"},
    {"status", "ID", 1, "job ID", SUBMIT_ARG_JOB, NULL, 1,
     "one job: state, progress, summary, placement",
     "State, reason (with the failing process's last error line), times,\n"
     "progress, summary and the task table of job ID.\n",
     "the job object",
     "its transport, resources and time limit, and the\ntasks' EXIT column"},
    {"watch", "ID", 1, "job ID", SUBMIT_ARG_JOB, NULL, 1,
     "live progress until the job ends; exit 0 if it\n"
     "SUCCEEDED, 1 if it FAILED or was CANCELLED",
     "Follows job ID until it ends, then prints its summary.\n"
     "Exit 0 if it SUCCEEDED, 1 if it FAILED or was CANCELLED.\n",
     "only the final job object", NULL},
    {"cancel", "ID | latest | --all", 1, "job ID, 'latest' or --all",
     SUBMIT_ARG_JOB, "latest", 1, "stop a queued or running job",
     "Stops job ID; 'latest' stops the most recently submitted job that\n"
     "is still queued or running; --all stops every queued and running\n"
     "job.\n",
     "each cancelled job object\n"
     "(JSON: one a line; YAML: one document each)",
     NULL},
    {"logs", "ID [--follow] [--events]", 1, "job ID", SUBMIT_ARG_JOB, NULL, 1,
     "what the job's processes printed; --follow\n"
     "keeps reading until the job ends",
     "Prints the lines job ID's processes printed, oldest first, each\n"
     "after its task's name. The JSON events workers send their agent\n"
     "(progress, eval, done) are left out unless --events.\n",
     "each line object\n(JSON: one a line; YAML: one document each)", NULL},
    {"nodes", "", 0, NULL, SUBMIT_ARG_NONE, NULL, 1,
     "the nodes and their used/total resources",
     "A table: NAME ADDRESS STATE CPUS MEMORY GPUS HEARTBEAT.\n",
     "the API's {\"nodes\": [...]}",
     "FREE-CPUS FREE-MEMORY FREE-GPUS and\nLAST-HEARTBEAT (UTC)"},
    {"plan", "ID", 1, "job ID", SUBMIT_ARG_JOB, NULL, 1,
     "the job's per-layer compression plan",
     "The codec and density per layer that job ID runs with.\n",
     "the plan object", NULL},
    {"doctor", "[--job FILE]", 0, NULL, SUBMIT_ARG_NONE, NULL, 1,
     "check that the cluster can run a job",
     "Checks what a job needs before it runs, one line per check, OK or\n"
     "FAIL with what to do: the scheduler and its version, Redis and its\n"
     "version, the agents and their resources, the dataset on each node,\n"
     "the nodes' clocks; with --job FILE asking for transport: rdma, the\n"
     "RDMA devices, ACTIVE ports and memlock limits of the nodes (with\n"
     "transport: auto, which nodes would run RDMA).\n"
     "Exit 0 when every check passes, else the exit code of the first\n"
     "failure's kind (8: the scheduler cannot be reached; 11: a check\n"
     "failed).\n",
     "{\"ok\", \"checks\": [{\"check\", \"ok\", \"message\"}...]}", NULL},
    {"completion", "bash | zsh", 1, "shell: bash or zsh", SUBMIT_ARG_WORDS,
     "bash zsh", 0, "print the shell completion script",
     "Prints the completion script for bash or zsh, made from the same\n"
     "table as the parser and these pages: commands, options, -o's\n"
     "formats, files, and job ids from `flsubmit list`. Load it with\n"
     "  source <(flsubmit completion bash)     # in ~/.bashrc\n"
     "  source <(flsubmit completion zsh)      # in ~/.zshrc, after\n"
     "                                         # compinit\n",
     NULL, NULL},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const submit_option options[] = {
    {SUBMIT_OPT_SCHEDULER, "scheduler", 's', "URL", SUBMIT_ARG_NONE, NULL, NULL,
     "flsched's address (default: $FLPS_SCHEDULER, else\n" SUBMIT_DEFAULT_URL
     ")"},
    {SUBMIT_OPT_CA, "ca", 0, "FILE", SUBMIT_ARG_FILE, NULL, NULL,
     "https: the CA certificate (PEM) that signed\n"
     "flsched's --tls-cert (default: $FLPS_SCHEDULER_CA,\n"
     "else the system's CAs)"},
    {SUBMIT_OPT_OUTPUT, "output", 'o', "FORMAT", SUBMIT_ARG_WORDS,
     "json yaml wide", NULL,
     "json or yaml: the API's objects instead of text;\n"
     "wide: more columns (list, status, nodes)"},
    {SUBMIT_OPT_JSON, "json", 'j', NULL, SUBMIT_ARG_NONE, NULL, NULL,
     "the same as -o json (watch: the final job object;\n"
     "logs: one line object per line)"},
    {SUBMIT_OPT_FOLLOW, "follow", 'f', NULL, SUBMIT_ARG_NONE, NULL, "logs",
     "logs: keep following until the job ends"},
    {SUBMIT_OPT_EVENTS, "events", 'e', NULL, SUBMIT_ARG_NONE, NULL, "logs",
     "logs: show the workers' JSON events too"},
    {SUBMIT_OPT_ALL, "all", 'a', NULL, SUBMIT_ARG_NONE, NULL, "cancel",
     "cancel: every queued and running job"},
    {SUBMIT_OPT_JOB, "job", 0, "FILE", SUBMIT_ARG_FILE, NULL, "doctor",
     "doctor: also check this job file's needs"},
    {SUBMIT_OPT_HELP, "help", 'h', NULL, SUBMIT_ARG_NONE, NULL, NULL,
     "this text (with a command: its own page)"},
    {SUBMIT_OPT_VERSION, "version", 0, NULL, SUBMIT_ARG_NONE, NULL, NULL,
     "print flsubmit's version and exit"},
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

_Static_assert(NOPTIONS == SUBMIT_OPT_COUNT, "one row per option id");

const submit_command *submit_cmds_commands(size_t *n)
{
    *n = NCOMMANDS;
    return commands;
}

const submit_option *submit_cmds_options(size_t *n)
{
    *n = NOPTIONS;
    return options;
}

const submit_command *submit_cmds_find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return &commands[i];
    return NULL;
}

const submit_option *submit_cmds_option(submit_opt_id id)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].id == id)
            return &options[i];
    return NULL;
}

/* Is word one of the space-separated words of list? */
static int word_in(const char *word, const char *list)
{
    size_t n = strlen(word);

    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t k = strcspn(p, " ");

        if (k == n && strncmp(p, word, n) == 0)
            return 1;
        p += k;
        p += strspn(p, " ");
    }
    return 0;
}

int submit_cmds_takes(const submit_command *c, const submit_option *o)
{
    return o->only == NULL || word_in(c->name, o->only);
}

int submit_cmds_opt_val(const submit_option *o)
{
    return o->letter != 0 ? o->letter : SUBMIT_OPT_VAL + (int)o->id;
}

const submit_option *submit_cmds_opt_by_val(int val)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (submit_cmds_opt_val(&options[i]) == val)
            return &options[i];
    return NULL;
}

/* "  LEFT                 text" with text's continuation lines under its
 * first; a LEFT wider than the column puts text on the next line. */
static void two_columns(flps_strbuf *out, const char *left, const char *text)
{
    const char *p = text;

    if (strlen(left) > 20)
        flps_strbuf_printf(out, "  %s\n  %-20s ", left, "");
    else
        flps_strbuf_printf(out, "  %-20s ", left);
    for (;;) {
        size_t k = strcspn(p, "\n");

        flps_strbuf_append(out, p, k);
        flps_strbuf_puts(out, "\n");
        if (p[k] == '\0')
            break;
        p += k + 1;
        if (*p == '\0')
            break;
        flps_strbuf_printf(out, "  %-20s ", "");
    }
}

/* "-s, --scheduler URL" or "    --ca FILE". */
static void option_left(const submit_option *o, char *buf, size_t len)
{
    char letter[8] = "    ";

    if (o->letter != 0)
        snprintf(letter, sizeof(letter), "-%c, ", o->letter);
    snprintf(buf, len, "%s--%s%s%s", letter, o->name, o->arg ? " " : "",
             o->arg ? o->arg : "");
}

flps_err submit_cmds_usage(flps_strbuf *out, const char *exit_codes)
{
    char left[64];

    flps_strbuf_puts(out, "usage: flsubmit [--scheduler URL] [--json] COMMAND "
                          "[ARGS]\n"
                          "\n"
                          "Submit jobs to flsched and follow them.\n"
                          "\n"
                          "commands (flsubmit COMMAND --help for one):\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        snprintf(left, sizeof(left), "%s%s%s", commands[i].name,
                 commands[i].synopsis[0] ? " " : "", commands[i].synopsis);
        two_columns(out, left, commands[i].summary);
    }
    flps_strbuf_puts(out, "\noptions:\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        option_left(&options[i], left, sizeof(left));
        two_columns(out, left, options[i].help);
    }
    flps_strbuf_puts(out,
                     "\n"
                     "environment:\n"
                     "  FLPS_SCHEDULER       default for --scheduler\n"
                     "  FLPS_TOKEN           sent as \"Authorization: Bearer "
                     "TOKEN\"\n"
                     "  FLPS_TOKEN_FILE      else the token is the first line "
                     "of this file\n"
                     "                       (scripts/cluster.sh makes one)\n"
                     "  FLPS_SCHEDULER_CA    default for --ca\n"
                     "\n"
                     "exit codes:\n");
    flps_strbuf_puts(out, exit_codes);
    flps_strbuf_puts(out, "\nmore: docs/flsubmit.md\n");
    return flps_strbuf_error(out);
}

flps_err submit_cmds_command_usage(const submit_command *c, flps_strbuf *out)
{
    char left[64];
    int own = 0;

    flps_strbuf_printf(out,
                       "usage: flsubmit [--scheduler URL] [--json] %s%s%s\n"
                       "\n"
                       "%s",
                       c->name, c->synopsis[0] ? " " : "", c->synopsis,
                       c->help);
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (options[i].only == NULL || !submit_cmds_takes(c, &options[i]))
            continue;
        if (!own++)
            flps_strbuf_puts(out, "\n");
        option_left(&options[i], left, sizeof(left));
        two_columns(out, left, options[i].help);
    }
    if (strcmp(c->name, "submit") == 0) {
        flps_strbuf_puts(out, "\nflags (each takes what its key takes: "
                              "docs/job-file.md):\n");
        jobspec_flags_help(out);
    }
    if (c->wide != NULL || c->object != NULL)
        flps_strbuf_puts(out, "\n");
    if (c->wide != NULL)
        flps_strbuf_printf(out, "-o wide adds %s.\n", c->wide);
    if (c->object != NULL)
        flps_strbuf_printf(out, "-o json or yaml prints %s.\n", c->object);
    flps_strbuf_puts(out, "\nflsubmit --help lists the commands, options and "
                          "exit codes.\n");
    return flps_strbuf_error(out);
}

/* ---- Completion ------------------------------------------------------ */

/* The option words ("--follow -f") of the options c takes; with c NULL,
 * of the options every command takes. */
static void option_words(flps_strbuf *out, const submit_command *c)
{
    int n = 0;

    for (size_t i = 0; i < NOPTIONS; i++) {
        const submit_option *o = &options[i];

        if (c == NULL ? o->only != NULL
                      : o->only == NULL || !submit_cmds_takes(c, o))
            continue;
        flps_strbuf_printf(out, "%s--%s", n++ ? " " : "", o->name);
        if (o->letter != 0)
            flps_strbuf_printf(out, " -%c", o->letter);
    }
}

/* The case pattern of the options that take an argument, scheduler's
 * left out ("--ca|--output|-o|--job"), or of those whose argument is of
 * kind k only. */
static void arg_pattern(flps_strbuf *out, int only_kind, submit_arg_kind k)
{
    int n = 0;

    for (size_t i = 0; i < NOPTIONS; i++) {
        const submit_option *o = &options[i];

        if (o->arg == NULL || o->id == SUBMIT_OPT_SCHEDULER ||
            (only_kind && o->arg_kind != k))
            continue;
        flps_strbuf_printf(out, "%s--%s", n++ ? "|" : "", o->name);
        if (o->letter != 0)
            flps_strbuf_printf(out, "|-%c", o->letter);
    }
}

/* words ("-n --workers ...") as a case pattern ("-n|--workers|..."). */
static void words_pattern(flps_strbuf *out, const char *words)
{
    for (const char *p = words; *p != '\0';) {
        size_t k = strcspn(p, " ");

        flps_strbuf_append(out, p, k);
        p += k;
        p += strspn(p, " ");
        if (*p != '\0')
            flps_strbuf_puts(out, "|");
    }
}

/* The bash loop that finds the command and the --scheduler given. */
static void bash_find_command(flps_strbuf *out)
{
    flps_strbuf_puts(out, "    # The command, and the --scheduler given before "
                          "the word.\n"
                          "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
                          "        w=${COMP_WORDS[i]}\n"
                          "        case $w in\n"
                          "        --)\n"
                          "            # submit's program and its arguments: "
                          "files.\n"
                          "            [[ $cmd == submit ]] && { compopt -o "
                          "default; return; }\n"
                          "            ;;\n"
                          "        --scheduler|-s)\n"
                          "            # After `submit`, -s is the servers.\n"
                          "            [[ $cmd == submit && $w == -s ]] || "
                          "sched=${COMP_WORDS[i+1]}\n"
                          "            ((i++))\n"
                          "            ;;\n"
                          "        ");
    arg_pattern(out, 0, SUBMIT_ARG_NONE);
    flps_strbuf_puts(out, ")\n"
                          "            ((i++))\n"
                          "            ;;\n"
                          "        -*)\n"
                          "            ;;\n"
                          "        *)\n"
                          "            [[ -z $cmd ]] && cmd=$w\n"
                          "            ;;\n"
                          "        esac\n"
                          "    done\n");
}

/* The bash case on the word before: an option's argument. */
static void bash_option_args(flps_strbuf *out, const char *submit_flags)
{
    flps_strbuf_puts(out, "    case $prev in\n"
                          "    --scheduler|-s)\n"
                          "        [[ $cmd == submit && $prev == -s ]] || "
                          "return\n"
                          "        ;;\n"
                          "    ");
    arg_pattern(out, 1, SUBMIT_ARG_FILE);
    flps_strbuf_puts(out, ")\n"
                          "        _flsubmit_files \"$cur\"\n"
                          "        return\n"
                          "        ;;\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const submit_option *o = &options[i];

        if (o->arg_kind != SUBMIT_ARG_WORDS)
            continue;
        flps_strbuf_printf(out, "    --%s", o->name);
        if (o->letter != 0)
            flps_strbuf_printf(out, "|-%c", o->letter);
        flps_strbuf_printf(
            out,
            ")\n"
            "        COMPREPLY=($(compgen -W '%s' -- \"$cur\"))\n"
            "        return\n"
            "        ;;\n",
            o->words);
    }
    flps_strbuf_puts(out, "    esac\n");
    if (submit_flags == NULL || *submit_flags == '\0')
        return;
    /* A job flag's value is the user's to type. */
    flps_strbuf_puts(out, "    if [[ $cmd == submit ]]; then\n"
                          "        case $prev in\n"
                          "        ");
    words_pattern(out, submit_flags);
    flps_strbuf_puts(out, ")\n"
                          "            return\n"
                          "            ;;\n"
                          "        esac\n"
                          "    fi\n");
}

/* Write, for every command, what fn writes of it. */
static void each_command(flps_strbuf *out, const char *submit_flags,
                         void (*fn)(flps_strbuf *, const submit_command *,
                                    const char *))
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        fn(out, &commands[i], submit_flags);
}

/* The bash case of command c: its own options (and submit's job flags),
 * and what its operand is. */
static void bash_command(flps_strbuf *out, const submit_command *c,
                         const char *submit_flags)
{
    static const char *const kinds[] = {"", "file", "job", "words"};
    flps_strbuf own = FLPS_STRBUF_INIT;

    option_words(&own, c);
    if (strcmp(c->name, "submit") == 0 && submit_flags != NULL)
        flps_strbuf_printf(&own, "%s%s --", own.len ? " " : "", submit_flags);
    flps_strbuf_printf(out, "    %s)\n", c->name);
    if (own.len > 0)
        flps_strbuf_printf(out, "        opts+=' %s'\n", own.data);
    flps_strbuf_fini(&own);
    if (c->arg_kind != SUBMIT_ARG_NONE)
        flps_strbuf_printf(out, "        kind=%s\n", kinds[c->arg_kind]);
    if (c->words != NULL)
        flps_strbuf_printf(out, "        words='%s'\n", c->words);
    flps_strbuf_puts(out, "        ;;\n");
}

static void bash_script(flps_strbuf *out, const char *submit_flags)
{

    flps_strbuf_puts(
        out,
        "# bash completion for flsubmit, made by `flsubmit completion bash`\n"
        "# from the table its parser and --help use.\n"
        "# Load it with: source <(flsubmit completion bash)\n"
        "\n"
        "# The job ids `flsubmit list` shows (at scheduler $1, if given).\n"
        "_flsubmit_jobs()\n"
        "{\n"
        "    flsubmit ${1:+--scheduler \"$1\"} list 2>/dev/null |\n"
        "        awk 'NR > 1 { print $1 }'\n"
        "}\n"
        "\n"
        "# The files that start with $1.\n"
        "_flsubmit_files()\n"
        "{\n"
        "    compopt -o filenames\n"
        "    COMPREPLY=($(compgen -f -- \"$1\"))\n"
        "}\n"
        "\n"
        "_flsubmit()\n"
        "{\n"
        "    local cur=${COMP_WORDS[COMP_CWORD]}\n"
        "    local prev=${COMP_WORDS[COMP_CWORD-1]}\n"
        "    local cmd= sched= i w opts kind= words=\n"
        "\n"
        "    COMPREPLY=()\n");
    bash_find_command(out);
    bash_option_args(out, submit_flags);
    flps_strbuf_puts(out, "    opts='");
    option_words(out, NULL);
    flps_strbuf_puts(out, "'\n"
                          "    if [[ -z $cmd ]]; then\n"
                          "        if [[ $cur == -* ]]; then\n"
                          "            COMPREPLY=($(compgen -W \"$opts\" -- "
                          "\"$cur\"))\n"
                          "        else\n"
                          "            COMPREPLY=($(compgen -W '");
    for (size_t i = 0; i < NCOMMANDS; i++)
        flps_strbuf_printf(out, "%s%s", i ? " " : "", commands[i].name);
    flps_strbuf_puts(out, "' -- \"$cur\"))\n"
                          "        fi\n"
                          "        return\n"
                          "    fi\n"
                          "    case $cmd in\n");
    each_command(out, submit_flags, bash_command);
    flps_strbuf_puts(
        out, "    esac\n"
             "    if [[ $cur == -* ]]; then\n"
             "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
             "        return\n"
             "    fi\n"
             "    case $kind in\n"
             "    file)\n"
             "        _flsubmit_files \"$cur\"\n"
             "        ;;\n"
             "    job)\n"
             "        COMPREPLY=($(compgen -W \"$words $(_flsubmit_jobs "
             "\"$sched\")\" "
             "-- \"$cur\"))\n"
             "        ;;\n"
             "    words)\n"
             "        COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
             "        ;;\n"
             "    esac\n"
             "}\n"
             "\n"
             "complete -F _flsubmit flsubmit\n");
}

/* text as zsh reads it inside '...' in an _arguments spec or a _describe
 * item: its lines joined into one, a ' closed and reopened, and the
 * characters those specs give a meaning escaped. */
static void zsh_text(flps_strbuf *out, const char *text)
{
    for (const char *p = text; *p != '\0'; p++) {
        if (*p == '\'')
            flps_strbuf_puts(out, "'\\''");
        else if (*p == ':' || *p == '[' || *p == ']' || *p == '\\')
            flps_strbuf_printf(out, "\\%c", *p);
        else if (*p == '\n')
            flps_strbuf_puts(out, p[1] != '\0' ? " " : "");
        else
            flps_strbuf_append(out, p, 1);
    }
}

/* The _arguments spec of option o: "(-o --output)"{-o,--output}"[...]:..."
 * written as one line of an array; no_letter leaves the short name out. */
static void zsh_option(flps_strbuf *out, const submit_option *o, int no_letter)
{
    flps_strbuf_puts(out, "        ");
    if (o->letter != 0 && !no_letter)
        flps_strbuf_printf(out, "'(-%c --%s)'{-%c,--%s}'[", o->letter, o->name,
                           o->letter, o->name);
    else
        flps_strbuf_printf(out, "'--%s[", o->name);
    zsh_text(out, o->help);
    flps_strbuf_puts(out, "]");
    if (o->arg != NULL) {
        flps_strbuf_printf(out, ":%s:", o->arg);
        if (o->arg_kind == SUBMIT_ARG_FILE)
            flps_strbuf_puts(out, "_files");
        else if (o->arg_kind == SUBMIT_ARG_WORDS)
            flps_strbuf_printf(out, "(%s)", o->words);
    }
    flps_strbuf_puts(out, "'\n");
}

/* The zsh case of command c: its options (and submit's job flags) and
 * what its operand is, for _arguments. */
static void zsh_command(flps_strbuf *out, const submit_command *c,
                        const char *submit_flags)
{
    /* After `submit`, -s is the job's servers, not --scheduler. */
    int submit = strcmp(c->name, "submit") == 0;

    flps_strbuf_printf(out, "        %s)\n            own=(\n", c->name);
    for (size_t k = 0; k < NOPTIONS; k++)
        if (submit_cmds_takes(c, &options[k])) {
            flps_strbuf_puts(out, "    ");
            zsh_option(out, &options[k],
                       submit && options[k].id == SUBMIT_OPT_SCHEDULER);
        }
    if (submit && submit_flags != NULL)
        for (const char *p = submit_flags; *p != '\0';) {
            size_t k = strcspn(p, " ");

            flps_strbuf_printf(out,
                               "                '%.*s[a job-file "
                               "key]:value:'\n",
                               (int)k, p);
            p += k;
            p += strspn(p, " ");
        }
    flps_strbuf_puts(out, "            )\n"
                          "            _arguments -s $own ");
    if (c->arg_kind != SUBMIT_ARG_NONE) {
        flps_strbuf_puts(out, "'1:");
        zsh_text(out, c->arg_name);
        flps_strbuf_puts(out, ":");
    }
    switch (c->arg_kind) {
    case SUBMIT_ARG_FILE:
        flps_strbuf_puts(out, "_files'");
        if (submit)
            flps_strbuf_puts(out, " '*::program:_normal'");
        break;
    case SUBMIT_ARG_JOB:
        flps_strbuf_puts(out, "{_flsubmit_jobs");
        if (c->words != NULL)
            flps_strbuf_printf(out, "; compadd %s", c->words);
        flps_strbuf_puts(out, "}'");
        break;
    case SUBMIT_ARG_WORDS:
        flps_strbuf_printf(out, "(%s)'", c->words);
        break;
    default:
        break;
    }
    flps_strbuf_puts(out, " && ret=0\n            ;;\n");
}

static void zsh_script(flps_strbuf *out, const char *submit_flags)
{
    flps_strbuf_puts(
        out,
        "#compdef flsubmit\n"
        "# zsh completion for flsubmit, made by `flsubmit completion zsh`\n"
        "# from the table its parser and --help use.\n"
        "# Load it with: source <(flsubmit completion zsh)  (after compinit)\n"
        "\n"
        "# The job ids `flsubmit list` shows (at the --scheduler given).\n"
        "_flsubmit_jobs()\n"
        "{\n"
        "    local -a ids\n"
        "    ids=(${(f)\"$(flsubmit ${_flsubmit_sched:+--scheduler "
        "$_flsubmit_sched} list 2>/dev/null | awk 'NR > 1 { print $1 }')\"})\n"
        "    compadd -a ids\n"
        "}\n"
        "\n"
        "_flsubmit()\n"
        "{\n"
        "    local curcontext=$curcontext state line ret=1\n"
        "    local -a commands global_opts own\n"
        "    local _flsubmit_sched=${opt_args[--scheduler]:-${opt_args[-s]}}\n"
        "\n"
        "    commands=(\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        flps_strbuf_printf(out, "        '%s:", commands[i].name);
        zsh_text(out, commands[i].summary);
        flps_strbuf_puts(out, "'\n");
    }
    flps_strbuf_puts(out, "    )\n    global_opts=(\n");
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].only == NULL)
            zsh_option(out, &options[i], 0);
    flps_strbuf_puts(out,
                     "    )\n"
                     "    _arguments -C -s $global_opts \\\n"
                     "        '1:command:->command' '*::argument:->argument' "
                     "&& ret=0\n"
                     "    case $state in\n"
                     "    command)\n"
                     "        _describe -t commands 'flsubmit command' "
                     "commands && ret=0\n"
                     "        ;;\n"
                     "    argument)\n"
                     "        _flsubmit_sched=${opt_args[--scheduler]:-"
                     "${opt_args[-s]}}\n"
                     "        case $words[1] in\n");
    each_command(out, submit_flags, zsh_command);
    flps_strbuf_puts(out, "        esac\n"
                          "        ;;\n"
                          "    esac\n"
                          "    return ret\n"
                          "}\n"
                          "\n"
                          "if [[ $funcstack[1] == _flsubmit ]]; then\n"
                          "    _flsubmit \"$@\"\n"
                          "else\n"
                          "    compdef _flsubmit flsubmit\n"
                          "fi\n");
}

/* submit's job flags as words, "-n -s --name --model ...": the short
 * ones flrun takes and a long one per key of the job-file table, as
 * services/jobspec_flags.h lists them to getopt. */
static void job_flag_words(flps_strbuf *out)
{
    struct option opts[JOBSPEC_FLAGS_KEYS];
    jobspec_flags f;
    size_t n;

    jobspec_flags_init(&f);
    n = jobspec_flags_options(&f, opts, JOBSPEC_FLAGS_KEYS);
    for (const char *p = JOBSPEC_FLAGS_SHORT; *p != '\0'; p++)
        if (*p != ':')
            flps_strbuf_printf(out, "%s-%c", out->len > 0 ? " " : "", *p);
    for (size_t i = 0; i < n; i++)
        flps_strbuf_printf(out, " --%s", opts[i].name);
}

flps_err submit_cmds_completion(const char *shell, flps_strbuf *out)
{
    flps_strbuf flags = FLPS_STRBUF_INIT;
    flps_err err;

    if (shell == NULL ||
        (strcmp(shell, "bash") != 0 && strcmp(shell, "zsh") != 0))
        return FLPS_EINVAL;
    job_flag_words(&flags);
    err = flps_strbuf_error(&flags);
    if (err == FLPS_OK && strcmp(shell, "bash") == 0)
        bash_script(out, flags.data);
    else if (err == FLPS_OK)
        zsh_script(out, flags.data);
    flps_strbuf_fini(&flags);
    return err != FLPS_OK ? err : flps_strbuf_error(out);
}
