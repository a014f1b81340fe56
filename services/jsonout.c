/* Compact JSON text with shortest round-trip reals (see jsonout.h). */
#include "services/jsonout.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/numparse.h"

static void put_string(flps_strbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;

    flps_strbuf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[7] = "\\u00";

        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        flps_strbuf_append(b, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"':
            flps_strbuf_puts(b, "\\\"");
            break;
        case '\\':
            flps_strbuf_puts(b, "\\\\");
            break;
        case '\n':
            flps_strbuf_puts(b, "\\n");
            break;
        case '\r':
            flps_strbuf_puts(b, "\\r");
            break;
        case '\t':
            flps_strbuf_puts(b, "\\t");
            break;
        default:
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            esc[6] = '\0';
            flps_strbuf_puts(b, esc);
            break;
        }
    }
    flps_strbuf_append(b, s + run, n - run);
    flps_strbuf_puts(b, "\"");
}

static void put_real(flps_strbuf *b, double x)
{
    char num[40];

    flps_format_double(num, sizeof(num) - 2, x);
    /* A whole real keeps its point: a reader that asks for a real (as
     * jansson's json_real_value does) must still get one. */
    if (strpbrk(num, ".eEn") == NULL)
        strcat(num, ".0");
    flps_strbuf_puts(b, num);
}

flps_err jsonout_append(flps_strbuf *b, const json_t *j)
{
    const char *key;
    json_t *v;
    size_t i;
    int first = 1;

    if (j == NULL)
        return FLPS_EINVAL;
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        flps_strbuf_puts(b, "{");
        json_object_foreach((json_t *)j, key, v)
        {
            if (!first)
                flps_strbuf_puts(b, ",");
            first = 0;
            put_string(b, key, strlen(key));
            flps_strbuf_puts(b, ":");
            jsonout_append(b, v);
        }
        flps_strbuf_puts(b, "}");
        break;
    case JSON_ARRAY:
        flps_strbuf_puts(b, "[");
        json_array_foreach(j, i, v)
        {
            if (i > 0)
                flps_strbuf_puts(b, ",");
            jsonout_append(b, v);
        }
        flps_strbuf_puts(b, "]");
        break;
    case JSON_STRING:
        put_string(b, json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER:
        flps_strbuf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        break;
    case JSON_REAL:
        put_real(b, json_real_value(j));
        break;
    case JSON_TRUE:
        flps_strbuf_puts(b, "true");
        break;
    case JSON_FALSE:
        flps_strbuf_puts(b, "false");
        break;
    default:
        flps_strbuf_puts(b, "null");
        break;
    }
    return flps_strbuf_error(b);
}

flps_err jsonout_dumps(const json_t *j, char **out)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    flps_err rc = jsonout_append(&b, j);
    char *s;

    if (rc != FLPS_OK) {
        flps_strbuf_fini(&b);
        return rc;
    }
    s = flps_strbuf_take(&b);
    if (s == NULL)
        return FLPS_ENOMEM;
    *out = s;
    return FLPS_OK;
}
