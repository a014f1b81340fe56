/* JSON values written as YAML through libyaml's emitter (see yamlout.h). */
#include "services/yamlout.h"

#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "common/numparse.h"

static int on_write(void *data, unsigned char *buffer, size_t size)
{
    return flps_strbuf_append(data, buffer, size) == FLPS_OK;
}

int yamlout_needs_quotes(const char *s)
{
    /* YAML 1.1's booleans and nulls (1.2's are among them) and the
     * special reals; "<<" is a merge key, "=" a value key. */
    static const char *const words[] = {
        "~",     "null",  "Null",  "NULL", "true", "True",  "TRUE",  "false",
        "False", "FALSE", "y",     "Y",    "yes",  "Yes",   "YES",   "n",
        "N",     "no",    "No",    "NO",   "on",   "On",    "ON",    "off",
        "Off",   "OFF",   ".inf",  ".Inf", ".INF", "-.inf", "-.Inf", "-.INF",
        "+.inf", "+.Inf", "+.INF", ".nan", ".NaN", ".NAN",  "<<",    "=",
    };
    size_t n = strlen(s);

    if (n == 0)
        return 1;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcmp(s, words[i]) == 0)
            return 1;
    /* Anything that starts like a number and holds only what numbers,
     * dates and times are made of (0x1F, 1_000, 1e3, 12:30, 2025-01-02)
     * may be read as one: quote it rather than know every rule. */
    if (strchr("0123456789+-.", s[0]) == NULL)
        return 0;
    return strspn(s, "0123456789abcdefABCDEFxXoO_+-.:") == n;
}

static flps_err emit(yaml_emitter_t *e, yaml_event_t *ev)
{
    return yaml_emitter_emit(e, ev) ? FLPS_OK : FLPS_ENOMEM;
}

static flps_err emit_scalar(yaml_emitter_t *e, const char *s, size_t n,
                            yaml_scalar_style_t style)
{
    yaml_event_t ev;

    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)n,
                                      1, 1, style))
        return FLPS_ENOMEM;
    return emit(e, &ev);
}

static flps_err emit_string(yaml_emitter_t *e, const char *s, size_t n)
{
    /* libyaml picks plain where the text allows it; a string that would
     * read back as another type is quoted as kubectl quotes it. */
    return emit_scalar(e, s, n,
                       yamlout_needs_quotes(s) ? YAML_SINGLE_QUOTED_SCALAR_STYLE
                                               : YAML_ANY_SCALAR_STYLE);
}

static flps_err emit_value(yaml_emitter_t *e, const json_t *j);

/* An object or an array: block style, or flow ({} []) when empty. */
static flps_err emit_collection(yaml_emitter_t *e, const json_t *j)
{
    int map = json_is_object(j);
    size_t n = map ? json_object_size(j) : json_array_size(j);
    yaml_event_t ev;
    const char *key;
    json_t *v;
    size_t i;
    flps_err rc;
    int ok;

    ok = map ? yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                   n ? YAML_BLOCK_MAPPING_STYLE
                                                     : YAML_FLOW_MAPPING_STYLE)
             : yaml_sequence_start_event_initialize(
                   &ev, NULL, NULL, 1,
                   n ? YAML_BLOCK_SEQUENCE_STYLE : YAML_FLOW_SEQUENCE_STYLE);
    rc = ok ? emit(e, &ev) : FLPS_ENOMEM;
    if (map) {
        json_object_foreach((json_t *)j, key, v)
        {
            if (rc == FLPS_OK)
                rc = emit_string(e, key, strlen(key));
            if (rc == FLPS_OK)
                rc = emit_value(e, v);
        }
    } else {
        json_array_foreach(j, i, v)
        {
            if (rc == FLPS_OK)
                rc = emit_value(e, v);
        }
    }
    if (rc != FLPS_OK)
        return rc;
    ok = map ? yaml_mapping_end_event_initialize(&ev)
             : yaml_sequence_end_event_initialize(&ev);
    return ok ? emit(e, &ev) : FLPS_ENOMEM;
}

static flps_err emit_value(yaml_emitter_t *e, const json_t *j)
{
    char num[48];

    switch (json_typeof(j)) {
    case JSON_OBJECT:
    case JSON_ARRAY:
        return emit_collection(e, j);
    case JSON_STRING:
        return emit_string(e, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(j));
        break;
    case JSON_REAL:
        flps_format_double(num, sizeof(num) - 2, json_real_value(j));
        if (strpbrk(num, ".eEn") == NULL) /* a whole real stays a real */
            strcat(num, ".0");
        break;
    case JSON_TRUE:
        snprintf(num, sizeof(num), "true");
        break;
    case JSON_FALSE:
        snprintf(num, sizeof(num), "false");
        break;
    default:
        snprintf(num, sizeof(num), "null");
        break;
    }
    return emit_scalar(e, num, strlen(num), YAML_PLAIN_SCALAR_STYLE);
}

flps_err yamlout_append(flps_strbuf *b, const json_t *j)
{
    yaml_emitter_t e;
    yaml_event_t ev;
    flps_err rc;

    if (j == NULL)
        return FLPS_EINVAL;
    if (!yaml_emitter_initialize(&e))
        return FLPS_ENOMEM;
    yaml_emitter_set_output(&e, on_write, b);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, -1); /* never fold a long line */
    yaml_emitter_set_indent(&e, 2);
    rc = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING)
             ? emit(&e, &ev)
             : FLPS_ENOMEM;
    if (rc == FLPS_OK)
        rc = yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1)
                 ? emit(&e, &ev)
                 : FLPS_ENOMEM;
    if (rc == FLPS_OK)
        rc = emit_value(&e, j);
    if (rc == FLPS_OK)
        rc = yaml_document_end_event_initialize(&ev, 1) ? emit(&e, &ev)
                                                        : FLPS_ENOMEM;
    if (rc == FLPS_OK)
        rc =
            yaml_stream_end_event_initialize(&ev) ? emit(&e, &ev) : FLPS_ENOMEM;
    if (rc == FLPS_OK && !yaml_emitter_flush(&e))
        rc = FLPS_ENOMEM;
    yaml_emitter_delete(&e);
    if (rc == FLPS_OK)
        rc = flps_strbuf_error(b);
    return rc;
}
