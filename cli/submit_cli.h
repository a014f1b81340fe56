/* flsubmit's commands: each talks to flsched through submit_http, prints
 * through submit_render (or the API's JSON with --json), and returns the
 * process exit code documented in docs/flsubmit.md. */
#ifndef FLPS_CLI_SUBMIT_CLI_H
#define FLPS_CLI_SUBMIT_CLI_H

#include <signal.h>
#include <stdio.h>

#include "cli/submit_http.h"
#include "services/jobspec_flags.h"

/* Exit codes: one per kind of failure, so scripts can tell them apart. */
#define SUBMIT_EXIT_MAP(X)                                                     \
    X(SUBMIT_EXIT_OK, 0, "success")                                            \
    X(SUBMIT_EXIT_JOB_FAILED, 1, "the watched job ended FAILED or CANCELLED")  \
    X(SUBMIT_EXIT_REFUSED, 2, "the scheduler refused the job file (400, 413)") \
    X(SUBMIT_EXIT_NOT_FOUND, 3, "no such job, or no plan for it (404)")        \
    X(SUBMIT_EXIT_AUTH, 4, "the token was refused (401, 403)")                 \
    X(SUBMIT_EXIT_CONFLICT, 5, "the job has already finished (409)")           \
    X(SUBMIT_EXIT_UNPLACEABLE, 6,                                              \
      "the job needs more than the nodes could ever give (422)")               \
    X(SUBMIT_EXIT_FILE, 7, "FILE is missing or unreadable (nothing sent)")     \
    X(SUBMIT_EXIT_UNREACHABLE, 8,                                              \
      "cannot reach the scheduler, or the connection broke")                   \
    X(SUBMIT_EXIT_TIMEOUT, 9,                                                  \
      "no connection within 5 s, or no answer within 30 s")                    \
    X(SUBMIT_EXIT_BAD_REPLY, 10,                                               \
      "the scheduler failed (5xx) or sent a malformed or unexpected reply")    \
    X(SUBMIT_EXIT_CHECK_FAILED, 11,                                            \
      "doctor: a check failed (each FAIL line says what to do)")               \
    X(SUBMIT_EXIT_USAGE, 64, "bad command line or scheduler URL")              \
    X(SUBMIT_EXIT_INTERNAL, 70, "out of memory")                               \
    X(SUBMIT_EXIT_INTERRUPTED, 130,                                            \
      "interrupted (Ctrl-C) while watching or following logs")

enum {
#define SUBMIT_EXIT_ENUM_(name, code, msg) name = code,
    SUBMIT_EXIT_MAP(SUBMIT_EXIT_ENUM_)
#undef SUBMIT_EXIT_ENUM_
};

/* What every command needs. All pointers are borrowed for the command. */
typedef struct submit_ctx {
    submit_http *http;
    FILE *out, *err;
    int json;       /* print the API's objects instead of text: JSON, or
                       YAML when yaml is set too */
    int yaml;       /* -o yaml */
    int wide;       /* -o wide: the tables' extra columns */
    size_t ndocs;   /* objects printed so far (YAML's "---" between) */
    int out_is_tty; /* out is a terminal: progress redraws in place */
    int err_is_tty; /* err is a terminal: hints are worth printing */
    int token_set;  /* FLPS_TOKEN was given (for the 401 message) */
    long poll_ms;   /* watch/logs --follow period; 0 = 500 */
    long retry_ms;  /* how long watch rides out a scheduler that
                       cannot be reached; 0 = 30000 */
    volatile sig_atomic_t *stop; /* set by SIGINT; may be NULL */
} submit_ctx;

/* The exit code for an HTTP status the command did not expect. */
int submit_cli_exit_for_status(long status);

/* The exit code for a submit_http_request error. */
int submit_cli_exit_for_err(flps_err err);

/* The commands. Each prints its result on ctx->out and any error on
 * ctx->err (one "flsubmit: ..." line) and returns the exit code. */
/* submit: the job file (NULL: none) with the flags the command line gave
 * merged in (services/jobspec_flags.h: -n 4 -s 1 --compression gtopk:0.01
 * [FILE] -- python3 t.py; none given: the file is sent as it is). A
 * message about a flag's line, flsubmit's or the scheduler's, names the
 * flag (exit 2). */
int submit_cli_submit(submit_ctx *ctx, const char *file, jobspec_flags *flags);
int submit_cli_list(submit_ctx *ctx);
int submit_cli_status(submit_ctx *ctx, const char *id);
int submit_cli_watch(submit_ctx *ctx, const char *id);
int submit_cli_cancel(submit_ctx *ctx, const char *id);
/* cancel latest: the most recently submitted job still QUEUED or RUNNING;
 * exit 3 when there is none. */
int submit_cli_cancel_latest(submit_ctx *ctx);
/* cancel --all: every QUEUED or RUNNING job, one line (or object) each;
 * a job that finished meanwhile is skipped. */
int submit_cli_cancel_all(submit_ctx *ctx);
/* events: also print the JSON event lines workers send their agent. */
int submit_cli_logs(submit_ctx *ctx, const char *id, int follow, int events);
int submit_cli_nodes(submit_ctx *ctx);
int submit_cli_plan(submit_ctx *ctx, const char *id);
/* doctor: the checks of submit_doctor.c; job_file may be NULL. */
int submit_cli_doctor(submit_ctx *ctx, const char *job_file);

/* The word of words[0..n) closest to word by edit distance, if it is
 * close enough to be a likely typo (at most 2 edits, and fewer than half
 * of word's length); NULL otherwise. */
const char *submit_cli_closest(const char *word, const char *const *words,
                               size_t n);

/* Is line a JSON event a worker prints for its agent ({"event": ...})? */
int submit_cli_is_event_line(const char *line);

#endif
