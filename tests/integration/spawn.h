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

/* Start build/bin/flps with the given extra arguments (NULL-terminated)
 * and wait for its "listening on" line. Returns 0 on success. stderr goes
 * to log_path. */
static inline int test_shard_start(test_shard *s, const char *log_path,
                                   const char *const *args)
{
    int pfd[2];
    char *argv[32];
    int a = 0;
    FILE *f;
    char line[256];

    if (pipe(pfd) != 0)
        return -1;
    argv[a++] = (char *)FLPS_BIN_DIR "/flps";
    for (int i = 0; args[i] != NULL && a < 31; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(pfd[1], STDOUT_FILENO);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        close(pfd[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    f = fdopen(pfd[0], "r");
    if (f == NULL || fgets(line, sizeof(line), f) == NULL ||
        strncmp(line, "listening on ", 13) != 0) {
        if (f != NULL)
            fclose(f);
        return -1;
    }
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    snprintf(s->endpoint, sizeof(s->endpoint), "%s", line + 13);
    return 0;
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
