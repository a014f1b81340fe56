/* Allocation wrappers; tests can make the n-th allocation fail. */
#ifndef FLPS_COMMON_ALLOC_H
#define FLPS_COMMON_ALLOC_H

#include <stddef.h>

void *flps_malloc(size_t size);
void *flps_calloc(size_t n, size_t size);
void *flps_realloc(void *p, size_t size);
void flps_free(void *p);
char *flps_strdup(const char *s);

/* Test hook: the n-th allocation from now (1 = the next) returns NULL;
 * 0 disables. Not thread-safe: for single-threaded unit tests only. */
void flps_alloc_fail_at(unsigned long n);

#endif
