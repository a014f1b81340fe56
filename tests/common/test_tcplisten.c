/* tcplisten_open_handoff: a port handed to another process lies outside
 * the kernel's ephemeral range, so no port-0 bind can take it before that
 * process binds it (a saps worker's peer endpoint once lost that race to
 * the worker's own metrics port). */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/tcplisten.h"

Test(tcplisten, the_handoff_range_lies_beside_the_ephemeral_one)
{
    unsigned first = 0, last = 0;

    /* Linux's default: the ports above it. */
    cr_assert(tcplisten_handoff_range(32768, 60999, &first, &last));
    cr_assert_eq(first, 61000);
    cr_assert_eq(last, 65535);
    /* Too few above: those from 1024 below it. */
    cr_assert(tcplisten_handoff_range(32768, 65500, &first, &last));
    cr_assert_eq(first, 1024);
    cr_assert_eq(last, 32767);
    /* Everything ephemeral, or a range that makes no sense: none. */
    cr_assert_not(tcplisten_handoff_range(1024, 65535, &first, &last));
    cr_assert_not(tcplisten_handoff_range(1100, 65400, &first, &last));
    cr_assert_not(tcplisten_handoff_range(40000, 30000, &first, &last));
    cr_assert_not(tcplisten_handoff_range(1024, 70000, &first, &last));
}

static unsigned port_of(const char *bound)
{
    const char *colon = strrchr(bound, ':');

    cr_assert_not_null(colon, "%s", bound);
    return (unsigned)atoi(colon + 1);
}

Test(tcplisten, handoff_ports_are_outside_the_ephemeral_range_and_distinct)
{
    unsigned lo = 32768, hi = 60999, first, last;
    unsigned ports[8];
    int fds[8];
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    if (f != NULL) {
        cr_assert_eq(fscanf(f, "%u %u", &lo, &hi), 2);
        fclose(f);
    }
    for (int i = 0; i < 8; i++) {
        char bound[64];

        cr_assert_eq(tcplisten_open_handoff("127.0.0.1", 1, &fds[i], bound,
                                            sizeof(bound)),
                     FLPS_OK);
        cr_assert_eq(strncmp(bound, "127.0.0.1:", 10), 0, "%s", bound);
        ports[i] = port_of(bound);
        if (tcplisten_handoff_range(lo, hi, &first, &last))
            cr_assert(ports[i] >= first && ports[i] <= last,
                      "port %u outside [%u, %u] (ephemeral %u-%u)", ports[i],
                      first, last, lo, hi);
        for (int j = 0; j < i; j++)
            cr_assert_neq(ports[i], ports[j], "port %u twice", ports[i]);
    }
    /* Each is listening: a connection to it is accepted. */
    for (int i = 0; i < 8; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)ports[i]),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int c = socket(AF_INET, SOCK_STREAM, 0);

        cr_assert_geq(c, 0);
        cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0, "port %u",
                     ports[i]);
        close(c);
        close(fds[i]);
    }
}

Test(tcplisten, a_handoff_on_an_address_not_of_this_machine_fails_cleanly)
{
    char bound[64];
    int fd = -1;

    /* TEST-NET-1: bind refuses it (EADDRNOTAVAIL) without a packet sent;
     * no port is tried after the first, and port 0 says why. */
    cr_assert_eq(
        tcplisten_open_handoff("192.0.2.1", 1, &fd, bound, sizeof(bound)),
        FLPS_ESYS);
    cr_assert_eq(fd, -1);
}
