/* Allocation wrappers; tests can make the n-th allocation fail. */
#include "common/alloc.h"

#include <stdlib.h>
#include <string.h>

/* Test-only failure injection counter (see flps_alloc_fail_at); stays 0 in
 * every daemon, so the check is one predictable branch. */
static unsigned long alloc_fail_countdown;

static int alloc_should_fail(void)
{
    if (alloc_fail_countdown == 0)
        return 0;
    return --alloc_fail_countdown == 0;
}

void flps_alloc_fail_at(unsigned long n)
{
    alloc_fail_countdown = n;
}

void *flps_malloc(size_t size)
{
    return alloc_should_fail() ? NULL : malloc(size ? size : 1);
}

void *flps_calloc(size_t n, size_t size)
{
    return alloc_should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *flps_realloc(void *p, size_t size)
{
    return alloc_should_fail() ? NULL : realloc(p, size ? size : 1);
}

void flps_free(void *p)
{
    free(p);
}

char *flps_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = flps_malloc(n);

    if (d != NULL)
        memcpy(d, s, n);
    return d;
}
