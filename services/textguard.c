/* Size and nesting limits of untrusted JSON or YAML, checked by one linear
 * scan before parsing. */
#include "services/textguard.h"

#include <stdio.h>

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

flps_err textguard_check(const char *text, size_t len, size_t max_len,
                         size_t max_depth, const char *what, char *errbuf,
                         size_t errlen)
{
    size_t depth;
    unsigned long line;

    if (text == NULL && len > 0)
        return FLPS_EINVAL;
    if (what == NULL)
        what = "the text";
    if (len > max_len)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "%s is %zu bytes; at most %zu are accepted",
                               what, len, max_len);
    textguard_depth(text, len, &depth, &line);
    if (depth > max_depth)
        return flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "line %lu: %s nests lists or mappings ('[', '{') %zu deep; at "
            "most %zu levels are accepted (a job file is one flat mapping of "
            "keys to values)",
            line, what, depth, max_depth);
    return FLPS_OK;
}
