/* Error codes shared by every flps module, and their messages: the table is
 * the public one of include/flps.h; this adds what only the internals use. */
#ifndef FLPS_COMMON_ERR_H
#define FLPS_COMMON_ERR_H

#include <stdarg.h>
#include <stddef.h>

#include "flps.h"

/* How many codes the table has. The numbers are 0..FLPS_ERR_COUNT_-1 with
 * no gap (err.c checks it at compile time), so arrays indexed by a code,
 * such as the shard's refusal counters, have this size. */
enum {
#define FLPS_ERR_SLOT_(code, num, msg) FLPS_ERR_SLOT_##code,
    FLPS_ERR_MAP(FLPS_ERR_SLOT_)
#undef FLPS_ERR_SLOT_
        FLPS_ERR_COUNT_
};

/* Write a message into errbuf (errlen bytes, always NUL-terminated,
 * truncated if longer) and return err: the one formatter for every
 * `char *errbuf, size_t errlen` out-parameter. errbuf NULL or errlen 0
 * writes nothing. */
flps_err flps_errbuf_set(char *errbuf, size_t errlen, flps_err err,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same with a va_list, for formatters that forward their own
 * arguments (a sticky error on a struct, a reply's text). */
flps_err flps_errbuf_vset(char *errbuf, size_t errlen, flps_err err,
                          const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
