/* YAML text as flps writes it (flsubmit -o yaml, a job built from flags):
 * block style, keys in insertion order, strings plain where a reader
 * takes them back as the same strings and quoted where it would not
 * ("true", "1", "null", "0x10"), reals in their shortest round-trip form,
 * so what it writes reads back as the JSON it came from. */
#ifndef FLPS_SERVICES_YAMLOUT_H
#define FLPS_SERVICES_YAMLOUT_H

#include <jansson.h>

#include "common/err.h"
#include "common/strbuf.h"

/* Append j (any JSON value) to b as one YAML document, without a "---"
 * line (a caller writing several puts one between them), ending in a
 * newline. Empty objects and arrays are written {} and []; null is null;
 * a whole real keeps its ".0". Lines are never folded, and characters
 * beyond ASCII are written as they are (UTF-8). Errors: FLPS_EINVAL if j
 * is NULL, FLPS_ENOMEM (sticky in b). Never does I/O. */
flps_err yamlout_append(flps_strbuf *b, const json_t *j);

/* Would s, written as a plain (unquoted) YAML scalar, read back as
 * something other than the string s (null, a boolean, a number, a date or
 * time) under YAML 1.1 or 1.2? Then it must be quoted. */
int yamlout_needs_quotes(const char *s);

#endif
