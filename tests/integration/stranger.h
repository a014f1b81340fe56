/* Helpers for integration tests that play a stranger to a shard: raw TCP
 * connections to its endpoint, a ZMTP 3 greeting for a mechanism, a frame
 * header announcing any size, and the shard's memory from /proc.
 * Header-only, like spawn.h. */
#ifndef FLPS_TESTS_STRANGER_H
#define FLPS_TESTS_STRANGER_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

/* The address of a "tcp://A.B.C.D:PORT" endpoint; 0 on success. */
static inline int stranger_addr(const char *endpoint, struct sockaddr_in *a)
{
    const char *host = strstr(endpoint, "://");
    const char *port = strrchr(endpoint, ':');
    char ip[64];
    size_t n;

    if (host == NULL || port == NULL || port <= host + 3)
        return -1;
    host += 3;
    n = (size_t)(port - host);
    if (n >= sizeof(ip))
        return -1;
    memcpy(ip, host, n);
    ip[n] = '\0';
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)atoi(port + 1));
    return inet_pton(AF_INET, ip, &a->sin_addr) == 1 ? 0 : -1;
}

/* A TCP connection to a, blocking; -1 when it cannot be made. */
static inline int stranger_connect(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send len bytes (a few: a fresh blocking socket takes them whole), no
 * SIGPIPE; 0, or -1 when the peer closed. */
static inline int stranger_write(int fd, const void *buf, size_t len)
{
    return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* A ZMTP 3.0 greeting (64 bytes) for mechanism mech ("NULL", "PLAIN",
 * "CURVE"), as a client. */
static inline int stranger_greet(int fd, const char *mech)
{
    unsigned char g[64];

    memset(g, 0, sizeof(g));
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3; /* major */
    g[11] = 0; /* minor */
    memcpy(g + 12, mech, strlen(mech) < 20 ? strlen(mech) : 20);
    return stranger_write(fd, g, sizeof(g));
}

/* The header of one long command frame announcing size bytes. */
static inline int stranger_frame_header(int fd, uint64_t size)
{
    unsigned char h[9];

    h[0] = 0x06; /* command, long */
    for (int i = 0; i < 8; i++)
        h[1 + i] = (unsigned char)(size >> (56 - 8 * i));
    return stranger_write(fd, h, sizeof(h));
}

/* A line "Key:   N kB" of /proc/pid/status, in bytes; -1 if absent. */
static inline long long stranger_proc_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    long long v = -1;
    size_t n = strlen(key);
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = atoll(line + n + 1) * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* Raise this process's descriptor limit to at least want (up to the hard
 * limit); the limit now. */
static inline rlim_t stranger_fd_limit(rlim_t want)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

#endif
