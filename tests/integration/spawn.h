/* Helpers for integration tests: start real flps shards and read the
 * endpoint they bound. Header-only so each test file stands alone. */
#ifndef FLPS_TESTS_SPAWN_H
#define FLPS_TESTS_SPAWN_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct test_shard {
    pid_t pid;
    char endpoint[256];
} test_shard;

/* Start FLPS_BIN_DIR/bin with args (NULL-terminated), stderr to log_path,
 * the child's pid in *pidp (-1 if it could not be forked). With
 * ready_prefix, wait for a stdout line starting with it and copy the rest
 * of the line to ready (stdout is then closed); without, stdout goes to
 * the log too. Returns 0 when started (and ready), -1 when the process
 * closed its stdout without the line: it is then not reaped, so the
 * caller can read its exit status. */
static inline int test_spawn_pid(const char *bin, const char *const *args,
                                 const char *log_path, const char *ready_prefix,
                                 char *ready, size_t readylen, pid_t *pidp)
{
    int pfd[2];
    char *argv[40], path[512];
    int a = 0;
    FILE *f;
    char line[512];
    pid_t pid;

    if (pipe(pfd) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/%s", FLPS_BIN_DIR, bin);
    argv[a++] = path;
    for (int i = 0; args[i] != NULL && a < 39; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    pid = fork();
    *pidp = pid;
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (ready_prefix != NULL)
            dup2(pfd[1], STDOUT_FILENO);
        else if (fd >= 0)
            dup2(fd, STDOUT_FILENO);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        close(pfd[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    if (ready_prefix == NULL) {
        close(pfd[0]);
        return 0;
    }
    f = fdopen(pfd[0], "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        size_t n = strlen(ready_prefix);
        if (strncmp(line, ready_prefix, n) == 0) {
            line[strcspn(line, "\n")] = '\0';
            if (snprintf(ready, readylen, "%s", line + n) >= (int)readylen)
                ready[readylen - 1] = '\0'; /* truncated; still usable */
            fclose(f);
            return 0;
        }
    }
    if (f != NULL)
        fclose(f);
    return -1;
}

/* As test_spawn_pid; returns the pid when started, else -1 after killing
 * and reaping the child. */
static inline pid_t test_spawn(const char *bin, const char *const *args,
                               const char *log_path, const char *ready_prefix,
                               char *ready, size_t readylen)
{
    pid_t pid = -1; /* test_spawn_pid leaves it when pipe() fails */

    if (test_spawn_pid(bin, args, log_path, ready_prefix, ready, readylen,
                       &pid) == 0)
        return pid;
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return -1;
}

/* Start build/bin/flps with the given extra arguments (NULL-terminated)
 * and wait for its "listening on" line. Returns 0 on success. stderr goes
 * to log_path. */
static inline int test_shard_start(test_shard *s, const char *log_path,
                                   const char *const *args)
{
    /* On failure s->pid stays set and unreaped: tests check the status. */
    return test_spawn_pid("flps", args, log_path, "listening on ", s->endpoint,
                          sizeof(s->endpoint), &s->pid);
}

/* Stop a shard with sig and reap it; returns its wait status. */
static inline int test_shard_stop(test_shard *s, int sig)
{
    int status = -1;
    if (s->pid > 0) {
        kill(s->pid, sig);
        waitpid(s->pid, &status, 0);
        s->pid = 0;
    }
    return status;
}

#endif
