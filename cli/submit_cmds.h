/* flsubmit's command line as data: one table of commands and one of
 * options, from which the parser, the global --help page, each command's
 * own page and the bash and zsh completion scripts are all made, so none
 * of them can drift from the others. No I/O: the pages and scripts are
 * written into a caller's buffer. */
#ifndef FLPS_CLI_SUBMIT_CMDS_H
#define FLPS_CLI_SUBMIT_CMDS_H

#include <stddef.h>

#include "common/err.h"
#include "common/strbuf.h"

/* Where flsched is when neither --scheduler nor FLPS_SCHEDULER says. */
#define SUBMIT_DEFAULT_URL "http://127.0.0.1:8080"

/* What a command's operand (or an option's argument) is, for completion:
 * nothing to offer, a file, a job id, or one of the words in `words`. */
typedef enum {
    SUBMIT_ARG_NONE = 0,
    SUBMIT_ARG_FILE,
    SUBMIT_ARG_JOB,
    SUBMIT_ARG_WORDS,
} submit_arg_kind;

/* The options, by id: getopt_long's value for an option is its short
 * letter, or SUBMIT_OPT_VAL + id for one that has none. */
typedef enum {
    SUBMIT_OPT_SCHEDULER,
    SUBMIT_OPT_CA,
    SUBMIT_OPT_OUTPUT,
    SUBMIT_OPT_JSON,
    SUBMIT_OPT_FOLLOW,
    SUBMIT_OPT_EVENTS,
    SUBMIT_OPT_ALL,
    SUBMIT_OPT_JOB,
    SUBMIT_OPT_HELP,
    SUBMIT_OPT_VERSION,
    SUBMIT_OPT_COUNT
} submit_opt_id;

#define SUBMIT_OPT_VAL 0x100

typedef struct submit_command {
    const char *name;
    const char *synopsis; /* after the name, for the pages */
    int nargs;            /* operands after the name */
    const char *arg_name; /* what the operand is, for "X needs a ..." */
    submit_arg_kind arg_kind;
    const char *words;   /* SUBMIT_ARG_WORDS: the operand's words, and
                            with SUBMIT_ARG_JOB the words besides ids */
    int needs_scheduler; /* 0: runs without flsched (completion) */
    const char *summary; /* one line for the global page ("\n" continues
                            it under the summary column) */
    const char *help;    /* the command's own page, after its usage line */
    const char *object;  /* what -o json and -o yaml print; NULL: the
                            command has no such output */
    const char *wide;    /* the columns -o wide adds; NULL: no -o wide */
} submit_command;

typedef struct submit_option {
    submit_opt_id id;
    const char *name; /* the long name, "scheduler" */
    int letter;       /* the short name, 's', or 0 */
    const char *arg;  /* the argument's name, "URL", or NULL for none */
    submit_arg_kind arg_kind;
    const char *words; /* SUBMIT_ARG_WORDS: the argument's words */
    const char *only;  /* the commands that take it, space-separated, or
                          NULL for every command */
    const char *help;  /* for the pages; "\n" continues it */
} submit_option;

/* The commands and options, in the pages' order; *n is how many. Static
 * tables, never NULL. */
const submit_command *submit_cmds_commands(size_t *n);
const submit_option *submit_cmds_options(size_t *n);

/* The command called name, or NULL. */
const submit_command *submit_cmds_find(const char *name);

/* The option with that id (never NULL for an id below SUBMIT_OPT_COUNT). */
const submit_option *submit_cmds_option(submit_opt_id id);

/* Does command c take option o? */
int submit_cmds_takes(const submit_command *c, const submit_option *o);

/* The getopt_long value of o: its letter, or SUBMIT_OPT_VAL + its id. */
int submit_cmds_opt_val(const submit_option *o);

/* The option getopt_long returned val for, or NULL. */
const submit_option *submit_cmds_opt_by_val(int val);

/* The global page (usage, commands, options, environment, exit codes;
 * exit_codes is its text, one "  N    meaning" line each), appended to
 * out. Returns flps_strbuf_error(out). */
flps_err submit_cmds_usage(flps_strbuf *out, const char *exit_codes);

/* Command c's own page, appended to out. */
flps_err submit_cmds_command_usage(const submit_command *c, flps_strbuf *out);

/* The completion script for shell ("bash" or "zsh"), appended to out: it
 * completes every command, every option (a command's own options after
 * it), -o's formats, files for FILE arguments, job ids from `flsubmit
 * list` (at the --scheduler given on the line, if any), and after
 * `submit` the job's flags (-n, -s and a --KEY per job-file key, from
 * services/jobspec_flags.h, as submit's page lists them). Errors:
 * FLPS_EINVAL for another shell (out unchanged), FLPS_ENOMEM. */
flps_err submit_cmds_completion(const char *shell, flps_strbuf *out);

#endif
