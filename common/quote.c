/* Untrusted bytes made fit to show (quote.h). */
#include "common/quote.h"

#include <string.h>

static const char quote_hex[] = "0123456789abcdef";

/* The escape for byte c into esc (at most 4 bytes); its length. Printable
 * ASCII but the backslash is itself; keep_backslash leaves that too. */
static size_t quote_byte(unsigned char c, int keep_backslash, char *esc)
{
    if (c >= 0x20 && c < 0x7f && (c != '\\' || keep_backslash)) {
        esc[0] = (char)c;
        return 1;
    }
    esc[0] = '\\';
    switch (c) {
    case '\\':
        esc[1] = '\\';
        return 2;
    case '\n':
        esc[1] = 'n';
        return 2;
    case '\r':
        esc[1] = 'r';
        return 2;
    case '\t':
        esc[1] = 't';
        return 2;
    default:
        esc[1] = 'x';
        esc[2] = quote_hex[c >> 4];
        esc[3] = quote_hex[c & 15];
        return 4;
    }
}

/* flps_quote, with an ellipsis at the end also when cut is non-zero (the
 * caller left bytes out after src). */
static size_t quote_into(char *dst, size_t dstlen, const unsigned char *s,
                         size_t srclen, int cut)
{
    size_t len = 0, whole = 0;
    int ellipsis;

    if (dstlen == 0)
        return 0;
    for (size_t i = 0; i < srclen; i++) {
        char esc[4];
        whole += quote_byte(s[i], 0, esc);
    }
    /* What fits whole needs no room for an ellipsis. */
    ellipsis = cut || whole > dstlen - 1;
    for (size_t i = 0; i < srclen; i++) {
        char esc[4];
        size_t n = quote_byte(s[i], 0, esc);

        if (len + n + (ellipsis ? 3 : 0) > dstlen - 1)
            break;
        memcpy(dst + len, esc, n);
        len += n;
    }
    if (ellipsis) {
        /* As much of "..." as fits, and never part of an escape. */
        size_t dots = dstlen - 1 - len < 3 ? dstlen - 1 - len : 3;
        memset(dst + len, '.', dots);
        len += dots;
    }
    dst[len] = '\0';
    return len;
}

size_t flps_quote(char *dst, size_t dstlen, const void *src, size_t srclen)
{
    return quote_into(dst, dstlen, src, srclen, 0);
}

size_t flps_quote_str(char *dst, size_t dstlen, const char *s, size_t max_chars)
{
    size_t n = s != NULL ? strnlen(s, max_chars + 1) : 0;

    return quote_into(dst, dstlen, (const unsigned char *)s,
                      n > max_chars ? max_chars : n, n > max_chars);
}

/* The length of the valid UTF-8 sequence of two or more bytes at s (at
 * most n bytes there), or 0: no overlong forms, no surrogates, nothing
 * above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;

    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4;
    else
        return 0;
    if (s[0] == 0xe0)
        lo = 0xa0;
    else if (s[0] == 0xed)
        hi = 0x9f;
    else if (s[0] == 0xf0)
        lo = 0x90;
    else if (s[0] == 0xf4)
        hi = 0x8f;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

size_t flps_text_clean(char *buf, size_t len, size_t cap, size_t reserve,
                       const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t left = strlen(text);
    const size_t end = cap > reserve ? cap - reserve : 0;

    while (left > 0) {
        char esc[4];
        const char *from = esc;
        size_t n = 0;

        if (p[0] >= 0x80)
            n = utf8_seq(p, left);
        if (n > 0)
            from = (const char *)p; /* valid UTF-8: as it is */
        else
            n = quote_byte(p[0], 1, esc);
        if (len + n > end)
            break;
        memcpy(buf + len, from, n);
        len += n;
        /* A sequence kept whole moves past all of its bytes. */
        if (from == (const char *)p) {
            p += n;
            left -= n;
        } else {
            p++;
            left--;
        }
    }
    return len;
}
