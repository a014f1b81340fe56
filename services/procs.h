/* Child processes of flrun and flagent: start one with its stdout (and
 * optionally its stderr) piped to the parent, read what it prints line by
 * line, reap it, stop them all. */
#ifndef FLPS_SERVICES_PROCS_H
#define FLPS_SERVICES_PROCS_H

#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

/* Longest line delivered whole; the rest of a longer line is dropped. */
#define PROC_LINE_MAX 65536

typedef struct proc {
    char name[64]; /* "flps shard 1", "flworker rank 3" */
    char log_path[512];
    pid_t pid;                /* 0 once reaped */
    int out_fd;               /* read end of its stdout, -1 when closed */
    char line[PROC_LINE_MAX]; /* partial stdout line being assembled */
    size_t linelen;
    int err_fd; /* read end of its stderr when piped, else -1 */
    char err_line[PROC_LINE_MAX];
    size_t err_linelen;
    int exited;
    int status; /* wait status once exited */
} proc;

/* How proc_start_opts starts a child. Zeroed: stderr goes to the parent's
 * stderr, the child shares the parent's process group and outlives it. */
typedef struct proc_opts {
    const char *log_path; /* append the child's stderr here (borrowed) */
    int pipe_stderr;      /* stderr to p->err_fd instead (wins over log) */
    int own_group;        /* own process group: a Ctrl-C on the terminal
                             reaches only the parent, which stops it */
    int die_with_parent;  /* SIGKILL when the parent dies (Linux) */
    char *const *envp;    /* the child's environment (borrowed; NULL = the
                             parent's) */
    int set_ids;          /* run as uid and gid, with no supplementary
                             group and no_new_privs (the parent is root) */
    uid_t uid;
    gid_t gid;
    const char *cwd; /* the child's working directory (borrowed; NULL =
                        the parent's) */
} proc_opts;

/* Start argv[0] (a path) with stdout piped to p->out_fd and stderr
 * appended to log_path. */
flps_err proc_start(proc *p, const char *name, char *const argv[],
                    const char *log_path);

/* Start argv[0] (a path) as opts says, stdout piped to p->out_fd. p is
 * reset first. A program that cannot be executed, or whose uid, gid or
 * directory cannot be taken, exits 127 after printing why on its stderr.
 * Errors: FLPS_ESYS (pipe, fork or the log file; logged with the reason). The
 * pipes are non-blocking and close-on-exec. */
flps_err proc_start_opts(proc *p, const char *name, char *const argv[],
                         const proc_opts *opts);

/* Read what is available on p->out_fd and call fn for every complete line
 * (without the newline); at end of file an unterminated last line is
 * delivered too. Returns 0 on EOF (fd closed), 1 otherwise. */
typedef void (*proc_line_fn)(void *arg, proc *p, const char *line);
int proc_read_lines(proc *p, proc_line_fn fn, void *arg);

/* The same for p->err_fd when stderr is piped. */
int proc_read_err_lines(proc *p, proc_line_fn fn, void *arg);

/* Reap any exited children among procs; returns the first newly exited
 * one, or NULL. */
proc *proc_reap(proc *procs, size_t n);

/* SIGTERM every live child, wait up to grace_ms, then SIGKILL the rest. */
void proc_stop_all(proc *procs, size_t n, int grace_ms);

/* Describe an exit status ("exit status 1", "killed by signal 9"). */
void proc_describe(int status, char *buf, size_t len);

/* Print the last lines of a log file to stderr, indented. */
void proc_print_tail(const char *path, int lines);

#endif
