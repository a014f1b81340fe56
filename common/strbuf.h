/* The one growable string and byte buffer: appends that grow geometrically,
 * printf into it, hand the result over. Every hand-grown `buf/len/cap`
 * triple in flps is one of these. */
#ifndef FLPS_COMMON_STRBUF_H
#define FLPS_COMMON_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

#include "common/err.h"

/* Transparent so it can live on the stack or inside another struct. data
 * is NUL-terminated after every successful append (bytes appended may hold
 * NULs themselves; len counts them all). failed is sticky: after an
 * allocation failed every append returns FLPS_ENOMEM and changes nothing,
 * so a caller may append many times and check once (flps_strbuf_error). */
typedef struct flps_strbuf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;
    int failed;
} flps_strbuf;

#define FLPS_STRBUF_INIT                                                       \
    {                                                                          \
        NULL, 0, 0, 0                                                          \
    }

/* An empty buffer in caller's memory; no allocation. */
void flps_strbuf_init(flps_strbuf *b);

/* Make room for extra more bytes (plus the NUL) without changing len.
 * Errors: FLPS_ENOMEM (also on size overflow), sticky. */
flps_err flps_strbuf_reserve(flps_strbuf *b, size_t extra);

/* Append n bytes (borrowed for the call). Errors: FLPS_ENOMEM, sticky. */
flps_err flps_strbuf_append(flps_strbuf *b, const void *data, size_t n);

/* Append a NUL-terminated string. Errors: FLPS_ENOMEM, sticky. */
flps_err flps_strbuf_puts(flps_strbuf *b, const char *s);

/* Append formatted text. Errors: FLPS_ENOMEM (sticky), FLPS_EINVAL (a
 * format error of vsnprintf; nothing appended). */
flps_err flps_strbuf_printf(flps_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
flps_err flps_strbuf_vprintf(flps_strbuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* FLPS_ENOMEM if an append ever failed, else FLPS_OK. */
flps_err flps_strbuf_error(const flps_strbuf *b);

/* Empty the buffer, keeping its memory (and clearing failed). */
void flps_strbuf_clear(flps_strbuf *b);

/* Hand the contents over: a NUL-terminated string the caller owns
 * (flps_free), "" if nothing was appended; NULL if an append failed or
 * the empty string could not be allocated. The buffer is empty and
 * unallocated afterwards in every case. */
char *flps_strbuf_take(flps_strbuf *b);

/* Free the memory; the buffer is empty and may be used again. */
void flps_strbuf_fini(flps_strbuf *b);

#endif
