/* Child processes of flrun and flagent. */
#include "services/procs.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

flps_err proc_start(proc *p, const char *name, char *const argv[],
                    const char *log_path)
{
    proc_opts o;

    memset(&o, 0, sizeof(o));
    o.log_path = log_path;
    return proc_start_opts(p, name, argv, &o);
}

/* In the child: become o->uid and o->gid for good, with no supplementary
 * group, and never gain privileges through a set-uid program. 0 on
 * success; else what failed, said on stderr. */
static int child_ids(const proc_opts *o)
{
    const char *what = NULL;

    if (setgroups(0, NULL) != 0)
        what = "setgroups";
    else if (setresgid(o->gid, o->gid, o->gid) != 0)
        what = "setresgid";
    else if (setresuid(o->uid, o->uid, o->uid) != 0)
        what = "setresuid";
    else if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        what = "no_new_privs";
    if (what == NULL)
        return 0;
    dprintf(STDERR_FILENO, "cannot run as uid %u, gid %u: %s: %s\n",
            (unsigned)o->uid, (unsigned)o->gid, what, strerror(errno));
    return -1;
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child_exec(char *const argv[], const proc_opts *o, int out_fd,
                       int err_fd, pid_t parent, const sigset_t *old_mask)
{
    struct sigaction sa;

    if (o->own_group)
        setpgid(0, 0);
    dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0)
        dup2(err_fd, STDERR_FILENO);
    /* Before the death signal: a change of uid clears it. */
    if (o->set_ids && child_ids(o) != 0)
        _exit(127);
    if (o->die_with_parent) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* the parent died before prctl */
            _exit(127);
    }
    if (o->cwd != NULL && chdir(o->cwd) != 0) {
        dprintf(STDERR_FILENO, "cannot enter %s: %s\n", o->cwd,
                strerror(errno));
        _exit(127);
    }
    /* Dispositions the parent ignores would survive exec. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &sa, NULL);
    /* The parent's SIGTERM and SIGINT handlers would swallow a stop sent
     * before exec (flrun stopping a job at once): with the default back,
     * a stop that is pending since the fork kills the child here. */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    if (o->envp != NULL)
        execve(argv[0], argv, o->envp);
    else
        execv(argv[0], argv);
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

flps_err proc_start_opts(proc *p, const char *name, char *const argv[],
                         const proc_opts *o)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, logfd = -1, child_err = -1;
    pid_t pid, parent = getpid();
    sigset_t stop, old_mask;

    memset(p, 0, sizeof(*p));
    p->out_fd = -1;
    p->err_fd = -1;
    snprintf(p->name, sizeof(p->name), "%s", name);
    if (o->log_path != NULL && !o->pipe_stderr) {
        snprintf(p->log_path, sizeof(p->log_path), "%s", o->log_path);
        logfd =
            open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (logfd < 0) {
            log_error("cannot open log file %s: %s", o->log_path,
                      strerror(errno));
            return FLPS_ESYS;
        }
        child_err = logfd;
    }
    if (pipe2(outp, O_CLOEXEC) != 0 ||
        (o->pipe_stderr && pipe2(errp, O_CLOEXEC) != 0)) {
        log_error("pipe: %s", strerror(errno));
        goto fail;
    }
    if (o->pipe_stderr)
        child_err = errp[1];
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, &old_mask);
    pid = fork();
    if (pid == 0)
        child_exec(argv, o, outp[1], child_err, parent, &old_mask);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (pid < 0) {
        log_error("fork: %s", strerror(errno));
        goto fail;
    }
    if (o->own_group)
        setpgid(pid, pid); /* both sides: no race with an early kill */
    close(outp[1]);
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    p->out_fd = outp[0];
    if (o->pipe_stderr) {
        close(errp[1]);
        fcntl(errp[0], F_SETFL, O_NONBLOCK);
        p->err_fd = errp[0];
    }
    if (logfd >= 0)
        close(logfd);
    p->pid = pid;
    return FLPS_OK;

fail:
    for (int i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    if (logfd >= 0)
        close(logfd);
    return FLPS_ESYS;
}

static int read_stream(proc *p, int *fd, char *line, size_t *len,
                       proc_line_fn fn, void *arg)
{
    char buf[8192];

    for (;;) {
        ssize_t n = read(*fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            close(*fd);
            *fd = -1;
            if (*len > 0) {
                line[*len] = '\0';
                *len = 0;
                fn(arg, p, line);
            }
            return 0;
        }
        if (n < 0)
            return 1;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                line[*len] = '\0';
                fn(arg, p, line);
                *len = 0;
            } else if (*len + 1 < PROC_LINE_MAX) {
                line[(*len)++] = buf[i];
            }
        }
    }
}

int proc_read_lines(proc *p, proc_line_fn fn, void *arg)
{
    if (p->out_fd < 0)
        return 0;
    return read_stream(p, &p->out_fd, p->line, &p->linelen, fn, arg);
}

int proc_read_err_lines(proc *p, proc_line_fn fn, void *arg)
{
    if (p->err_fd < 0)
        return 0;
    return read_stream(p, &p->err_fd, p->err_line, &p->err_linelen, fn, arg);
}

proc *proc_reap(proc *procs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int status;
        if (procs[i].pid <= 0 || procs[i].exited)
            continue;
        if (waitpid(procs[i].pid, &status, WNOHANG) == procs[i].pid) {
            procs[i].exited = 1;
            procs[i].status = status;
            return &procs[i];
        }
    }
    return NULL;
}

void proc_stop_all(proc *procs, size_t n, int grace_ms)
{
    struct timespec ts = {0, 20 * 1000000L};
    int waited = 0, alive;

    for (size_t i = 0; i < n; i++)
        if (procs[i].pid > 0 && !procs[i].exited)
            kill(procs[i].pid, SIGTERM);
    do {
        alive = 0;
        while (proc_reap(procs, n) != NULL)
            ;
        for (size_t i = 0; i < n; i++)
            if (procs[i].pid > 0 && !procs[i].exited)
                alive++;
        if (alive == 0)
            break;
        nanosleep(&ts, NULL);
        waited += 20;
    } while (waited < grace_ms);
    for (size_t i = 0; i < n; i++) {
        if (procs[i].pid > 0 && !procs[i].exited) {
            kill(procs[i].pid, SIGKILL);
            waitpid(procs[i].pid, &procs[i].status, 0);
            procs[i].exited = 1;
        }
    }
}

void proc_describe(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status 0x%x", status);
}

void proc_print_tail(const char *path, int lines)
{
    FILE *f = fopen(path, "r");
    char *ring[64] = {0};
    char buf[1024];
    int n = 0;

    if (f == NULL)
        return;
    if (lines > 64)
        lines = 64;
    while (fgets(buf, sizeof(buf), f) != NULL) {
        free(ring[n % lines]);
        ring[n % lines] = strdup(buf);
        n++;
    }
    fclose(f);
    for (int i = n > lines ? n - lines : 0; i < n; i++) {
        fprintf(stderr, "    %s", ring[i % lines] ? ring[i % lines] : "");
        free(ring[i % lines]);
        ring[i % lines] = NULL;
    }
}
