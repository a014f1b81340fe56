/* A flood of slow clients for the HTTP server's tests: FLOOD_CONNS
 * connections from 127.0.0.2 (another client than the tests' 127.0.0.1)
 * that each send a start and then a byte every 500 ms, or nothing at all
 * (a TLS handshake never begun), and open again at once whenever the
 * server closes them, as an attacker would. One thread, one poll loop.
 * Header-only (static functions); needs criterion. */
#ifndef FLPS_TESTS_FLOOD_H
#define FLPS_TESTS_FLOOD_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FLOOD_CONNS 300

typedef struct flood {
    const char *bound; /* "127.0.0.1:PORT" of the server */
    const char *start; /* what each connection sends first ("": nothing) */
    atomic_int *stop;  /* set to end the flood */
    unsigned long connects;
} flood;

static inline double flood_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A socket to bound from the loopback address from; -1 when it cannot
 * connect. */
static inline int flood_dial_from(const char *bound, const char *from)
{
    struct sockaddr_in a, me;
    const char *colon = strrchr(bound, ':');
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_geq(fd, 0);
    memset(&me, 0, sizeof(me));
    me.sin_family = AF_INET;
    inet_pton(AF_INET, from, &me.sin_addr);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline int flood_dial(flood *f)
{
    int fd = flood_dial_from(f->bound, "127.0.0.2");

    if (fd >= 0) {
        f->connects++;
        if (f->start[0] != '\0' &&
            send(fd, f->start, strlen(f->start), MSG_NOSIGNAL) < 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* The flood's thread (arg: a flood). */
static inline void *flood_main(void *arg)
{
    flood *f = arg;
    struct pollfd p[FLOOD_CONNS];
    double next_byte = flood_now() + 0.5;

    for (int i = 0; i < FLOOD_CONNS; i++)
        p[i] = (struct pollfd){flood_dial(f), POLLIN, 0};
    while (!atomic_load(f->stop)) {
        int dribble = flood_now() >= next_byte;

        poll(p, FLOOD_CONNS, 100);
        for (int i = 0; i < FLOOD_CONNS; i++) {
            char buf[512];

            if (p[i].fd >= 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
            }
            if (p[i].fd >= 0 && dribble && f->start[0] != '\0')
                send(p[i].fd, "a", 1, MSG_NOSIGNAL);
            if (p[i].fd < 0)
                p[i].fd = flood_dial(f);
        }
        if (dribble)
            next_byte = flood_now() + 0.5;
    }
    for (int i = 0; i < FLOOD_CONNS; i++)
        if (p[i].fd >= 0)
            close(p[i].fd);
    return NULL;
}

#endif
