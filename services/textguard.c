/* Size, encoding and nesting limits of untrusted JSON or YAML, each
 * checked by one linear scan before parsing. */
#include "services/textguard.h"

#include <stdio.h>
#include <string.h>

void textguard_depth(const char *text, size_t len, size_t *depth,
                     unsigned long *line)
{
    size_t d = 0, max = 0;
    unsigned long ln = 1, max_line = 0;
    int in_str = 0, in_comment = 0;

    for (size_t i = 0; i < len; i++) {
        char c = text[i];

        if (c == '\n') {
            ln++;
            in_comment = 0;
            continue;
        }
        if (in_comment)
            continue;
        if (in_str) {
            if (c == '\\')
                i++; /* an escaped character, '"' included */
            else if (c == '"')
                in_str = 0;
            continue;
        }
        switch (c) {
        case '"':
            in_str = 1;
            break;
        case '#':
            /* A comment starts at a line's start or after a blank. */
            in_comment = i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' ||
                         text[i - 1] == '\n' || text[i - 1] == '\r';
            break;
        case '[':
        case '{':
            if (++d > max) {
                max = d;
                max_line = ln;
            }
            break;
        case ']':
        case '}':
            if (d > 0)
                d--;
            break;
        default:
            break;
        }
    }
    *depth = max;
    *line = max_line;
}

/* Where a byte that is not text is: its offset, line and column (the
 * column counts characters, as an editor does). */
typedef struct tg_fault {
    size_t off;
    unsigned long line, col;
    unsigned char byte;
    int utf8; /* 1: not UTF-8; 0: a control character */
} tg_fault;

/* The length of the UTF-8 sequence at s (n bytes left), or 0 when it is
 * not one: overlong forms, surrogates and code points past U+10FFFF are
 * not UTF-8 either. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4;
    else
        return 0;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

/* So few bytes that are not text do not make a short file binary. */
#define TEXTGUARD_ODD_MIN 8

static int is_control(unsigned char c)
{
    return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F;
}

/* Scan text for bytes that are not text: the first one in *first (when
 * there is one), and how many of the first TEXTGUARD_SNIFF bytes are
 * not text, NULs among them. Returns whether any was found. */
static int tg_scan(const unsigned char *s, size_t len, tg_fault *first,
                   size_t *odd, size_t *nuls)
{
    unsigned long line = 1, col = 1;
    size_t i = 0, k;
    int found = 0;

    *odd = 0;
    *nuls = 0;
    while (i < len) {
        k = utf8_len(s + i, len - i);
        if (k == 0 || (k == 1 && is_control(s[i]))) {
            if (!found) {
                first->off = i;
                first->line = line;
                first->col = col;
                first->byte = s[i];
                first->utf8 = k == 0;
                found = 1;
            }
            if (i < TEXTGUARD_SNIFF) {
                (*odd)++;
                *nuls += s[i] == 0;
            } else if (found) {
                break; /* the sniffed part is counted, the first found */
            }
            k = 1;
        }
        if (s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
        i += k;
    }
    return found;
}

flps_err textguard_text(const char *text, size_t len, const char *what,
                        char *errbuf, size_t errlen, unsigned long *line)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t odd, nuls, sniffed = len < TEXTGUARD_SNIFF ? len : TEXTGUARD_SNIFF;
    const char *utf = NULL;
    tg_fault f = {0, 0, 0, 0, 0};

    if (text == NULL && len > 0)
        return FLPS_EINVAL;
    if (what == NULL)
        what = "the text";
    if (line != NULL)
        *line = 0;
    /* A byte-order mark says the encoding; UTF-32's starts like UTF-16's. */
    if (len >= 4 && (memcmp(s, "\xFF\xFE\0\0", 4) == 0 ||
                     memcmp(s, "\0\0\xFE\xFF", 4) == 0))
        utf = "UTF-32";
    else if (len >= 2 &&
             (memcmp(s, "\xFF\xFE", 2) == 0 || memcmp(s, "\xFE\xFF", 2) == 0))
        utf = "UTF-16";
    if (utf != NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s is %s text (it starts with a %s "
                               "byte-order mark); it must be UTF-8: "
                               "`iconv -f %s -t UTF-8` converts it",
                               what, utf, utf, utf);
    if (!tg_scan(s, len, &f, &odd, &nuls))
        return FLPS_OK;
    /* As git tells binary files from text: a NUL early on. And a text in
     * no encoding at all is as good as binary: a quarter of its bytes not
     * text (random or compressed bytes have over half; Latin-1 prose, a
     * few in a hundred). */
    if (nuls > 0 || (odd >= TEXTGUARD_ODD_MIN && odd * 4 > sniffed))
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s is binary, not YAML or JSON text (byte "
                               "%zu is 0x%02X)",
                               what, f.off, (unsigned)f.byte);
    if (line != NULL)
        *line = f.line;
    if (f.utf8)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "line %lu, column %lu: byte %zu (0x%02X) is not UTF-8; %s must "
            "be UTF-8 text (was it saved as Latin-1 or Windows-1252? `iconv "
            "-f LATIN1 -t UTF-8` converts it)",
            f.line, f.col, f.off, (unsigned)f.byte, what);
    return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                           "line %lu, column %lu: byte %zu (0x%02X) is a "
                           "control character, which %s cannot hold: it "
                           "must be YAML or JSON text",
                           f.line, f.col, f.off, (unsigned)f.byte, what);
}

flps_err textguard_check_at(const char *text, size_t len, size_t max_len,
                            size_t max_depth, const char *what, char *errbuf,
                            size_t errlen, unsigned long *line)
{
    size_t depth;
    unsigned long dline;
    flps_err rc;

    if (text == NULL && len > 0)
        return FLPS_EINVAL;
    if (what == NULL)
        what = "the text";
    if (line != NULL)
        *line = 0;
    if (len > max_len)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s is %zu bytes; at most %zu are accepted",
                               what, len, max_len);
    rc = textguard_text(text, len, what, errbuf, errlen, line);
    if (rc != FLPS_OK)
        return rc;
    textguard_depth(text, len, &depth, &dline);
    if (depth > max_depth) {
        if (line != NULL)
            *line = dline;
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "line %lu: %s nests lists or mappings ('[', '{') %zu deep; at "
            "most %zu levels are accepted (a job file is one flat mapping of "
            "keys to values)",
            dline, what, depth, max_depth);
    }
    return FLPS_OK;
}

flps_err textguard_check(const char *text, size_t len, size_t max_len,
                         size_t max_depth, const char *what, char *errbuf,
                         size_t errlen)
{
    return textguard_check_at(text, len, max_len, max_depth, what, errbuf,
                              errlen, NULL);
}
