/* The one growable string and byte buffer. */
#include "common/strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"

void flps_strbuf_init(flps_strbuf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

flps_err flps_strbuf_reserve(flps_strbuf *b, size_t extra)
{
    size_t need, ncap;
    char *p;

    if (b->failed)
        return FLPS_ENOMEM;
    if (extra > SIZE_MAX - 1 - b->len)
        goto fail;
    need = b->len + extra + 1;
    if (need <= b->cap)
        return FLPS_OK;
    /* Doubling keeps n appends O(n) bytes copied in all. */
    ncap = b->cap ? b->cap : 64;
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    p = flps_realloc(b->data, ncap);
    if (p == NULL)
        goto fail;
    b->data = p;
    b->cap = ncap;
    return FLPS_OK;
fail:
    b->failed = 1;
    return FLPS_ENOMEM;
}

flps_err flps_strbuf_append(flps_strbuf *b, const void *data, size_t n)
{
    if (flps_strbuf_reserve(b, n) != FLPS_OK)
        return FLPS_ENOMEM;
    if (n > 0)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return FLPS_OK;
}

flps_err flps_strbuf_puts(flps_strbuf *b, const char *s)
{
    return flps_strbuf_append(b, s, strlen(s));
}

flps_err flps_strbuf_vprintf(flps_strbuf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;

    if (b->failed)
        return FLPS_ENOMEM;
    /* Try in the room there is; grow once to the exact size if short. */
    va_copy(ap2, ap);
    n = vsnprintf(b->data ? b->data + b->len : NULL,
                  b->data ? b->cap - b->len : 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        if (b->data != NULL)
            b->data[b->len] = '\0';
        return FLPS_EINVAL;
    }
    if (b->data == NULL || (size_t)n >= b->cap - b->len) {
        if (flps_strbuf_reserve(b, (size_t)n) != FLPS_OK) {
            if (b->data != NULL)
                b->data[b->len] = '\0';
            return FLPS_ENOMEM;
        }
        va_copy(ap2, ap);
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap2);
        va_end(ap2);
    }
    b->len += (size_t)n;
    return FLPS_OK;
}

flps_err flps_strbuf_printf(flps_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    flps_err rc;

    va_start(ap, fmt);
    rc = flps_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

flps_err flps_strbuf_error(const flps_strbuf *b)
{
    return b->failed ? FLPS_ENOMEM : FLPS_OK;
}

void flps_strbuf_clear(flps_strbuf *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

char *flps_strbuf_take(flps_strbuf *b)
{
    char *s = b->failed ? NULL : b->data;

    if (b->failed)
        flps_free(b->data);
    else if (s == NULL)
        s = flps_strdup("");
    flps_strbuf_init(b);
    return s;
}

void flps_strbuf_fini(flps_strbuf *b)
{
    flps_free(b->data);
    flps_strbuf_init(b);
}
