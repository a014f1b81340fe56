/* A real redis-server on a free loopback port for tests: started in a
 * temporary directory, with no persistence, and stopped at the end. */
#ifndef FLPS_TESTS_REDIS_FIXTURE_H
#define FLPS_TESTS_REDIS_FIXTURE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct test_redis {
    pid_t pid;
    int port;
    char url[64];
    char dir[64];
} test_redis;

/* A port that was free a moment ago (the kernel picks it). */
static inline int test_free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static inline int test_port_accepts(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Start redis-server on r->port (0: a free one) in r->dir, with the
 * append-only file (appendfsync everysec, as scripts/cluster.sh runs it)
 * when aof is set; 0 when it accepts connections. */
static inline int test_redis_exec(test_redis *r, int aof)
{
    char port[16];
    const int keep_port = r->port != 0;

    for (int attempt = 0; attempt < 5; attempt++) {
        if (!keep_port)
            r->port = test_free_port();
        snprintf(port, sizeof(port), "%d", r->port);
        r->pid = fork();
        if (r->pid == 0) {
            freopen("/dev/null", "w", stdout);
            execlp("redis-server", "redis-server", "--port", port, "--bind",
                   "127.0.0.1", "--save", "", "--appendonly",
                   aof ? "yes" : "no", "--appendfsync", "everysec", "--dir",
                   r->dir, (char *)NULL);
            _exit(127);
        }
        for (int i = 0; i < 200; i++) {
            struct timespec ts = {0, 20 * 1000000L};
            int status;
            if (test_port_accepts(r->port)) {
                snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d",
                         r->port);
                return 0;
            }
            if (waitpid(r->pid, &status, WNOHANG) == r->pid)
                break; /* lost the port race or no redis-server: retry */
            nanosleep(&ts, NULL);
        }
    }
    return -1;
}

/* Start redis-server on port (0: a free one); 0 when it accepts
 * connections. */
static inline int test_redis_start_on(test_redis *r, int fixed_port)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->dir, sizeof(r->dir), "/tmp/flps-redis-XXXXXX");
    if (mkdtemp(r->dir) == NULL)
        return -1;
    r->port = fixed_port;
    return test_redis_exec(r, 0);
}

/* As test_redis_start, with the append-only file on. */
static inline int test_redis_start_aof(test_redis *r)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->dir, sizeof(r->dir), "/tmp/flps-redis-XXXXXX");
    if (mkdtemp(r->dir) == NULL)
        return -1;
    return test_redis_exec(r, 1);
}

/* SIGKILL the server and start it again on its port and directory (what
 * it had fsynced to its append-only file comes back). */
static inline int test_redis_kill_and_restart(test_redis *r, int aof)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
    return test_redis_exec(r, aof);
}

static inline int test_redis_start(test_redis *r)
{
    return test_redis_start_on(r, 0);
}

/* A redis-cli command (args, as on its command line) on r, with password
 * (NULL: none) through the environment, never the command line; its
 * output without the trailing newlines (static buffer, valid until the
 * next call). */
static inline const char *test_redis_cli(const test_redis *r,
                                         const char *password, const char *args)
{
    static char out[8192];
    char cmd[1024];
    FILE *p;
    size_t n;

    snprintf(cmd, sizeof(cmd), "%s%s redis-cli --no-auth-warning -p %d %s 2>&1",
             password != NULL ? "REDISCLI_AUTH=" : "",
             password != NULL ? password : "", r->port, args);
    p = popen(cmd, "r");
    if (p == NULL)
        return "";
    n = fread(out, 1, sizeof(out) - 1, p);
    pclose(p);
    out[n] = '\0';
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = '\0';
    return out;
}

static inline void test_redis_stop(test_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

#endif
