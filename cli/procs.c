/* Child processes of flrun. */
#include "cli/procs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

flps_err proc_start(proc *p, const char *name, char *const argv[],
                    const char *log_path)
{
    int pipefd[2], logfd;
    pid_t pid;

    memset(p, 0, sizeof(*p));
    p->out_fd = -1;
    snprintf(p->name, sizeof(p->name), "%s", name);
    snprintf(p->log_path, sizeof(p->log_path), "%s", log_path);
    logfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0) {
        log_error("cannot open log file %s: %s", log_path, strerror(errno));
        return FLPS_ESYS;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        log_error("pipe: %s", strerror(errno));
        close(logfd);
        return FLPS_ESYS;
    }
    pid = fork();
    if (pid < 0) {
        log_error("fork: %s", strerror(errno));
        close(pipefd[0]);
        close(pipefd[1]);
        close(logfd);
        return FLPS_ESYS;
    }
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);
    close(logfd);
    fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
    p->pid = pid;
    p->out_fd = pipefd[0];
    return FLPS_OK;
}

int proc_read_lines(proc *p, proc_line_fn fn, void *arg)
{
    char buf[8192];

    for (;;) {
        ssize_t n = read(p->out_fd, buf, sizeof(buf));
        if (n == 0) {
            close(p->out_fd);
            p->out_fd = -1;
            return 0;
        }
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 1 : 0;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                p->line[p->linelen] = '\0';
                fn(arg, p, p->line);
                p->linelen = 0;
            } else if (p->linelen + 1 < sizeof(p->line)) {
                p->line[p->linelen++] = buf[i];
            }
        }
    }
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
