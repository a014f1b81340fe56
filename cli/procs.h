/* Child processes of flrun: start with piped stdout and a log file for
 * stderr, read lines, stop them all. */
#ifndef FLPS_CLI_PROCS_H
#define FLPS_CLI_PROCS_H

#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

typedef struct proc {
    char name[64]; /* "flps shard 1", "flworker rank 3" */
    char log_path[512];
    pid_t pid;        /* 0 once reaped */
    int out_fd;       /* read end of its stdout, -1 when closed */
    char line[65536]; /* partial line being assembled */
    size_t linelen;
    int exited;
    int status; /* wait status once exited */
} proc;

/* Start argv[0] (a path) with stdout piped to p->out_fd and stderr
 * appended to log_path. */
flps_err proc_start(proc *p, const char *name, char *const argv[],
                    const char *log_path);

/* Read what is available on p->out_fd and call fn for every complete line
 * (without the newline). Returns 0 on EOF (fd closed), 1 otherwise. */
typedef void (*proc_line_fn)(void *arg, proc *p, const char *line);
int proc_read_lines(proc *p, proc_line_fn fn, void *arg);

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
