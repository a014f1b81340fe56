/* Cheap checks of untrusted JSON or YAML text before a parser sees it:
 * size and nesting depth, in one pass over the bytes. libyaml's scanner
 * costs time quadratic in the depth of nested flow collections ("[[[["),
 * so a 1 MiB body of brackets kept a parser busy for minutes; this scan is
 * linear and refuses it first. */
#ifndef FLPS_SERVICES_TEXTGUARD_H
#define FLPS_SERVICES_TEXTGUARD_H

#include <stddef.h>

#include "common/err.h"

/* The deepest nesting of flow collections ('[' and '{') and the line the
 * deepest one opens on. Brackets inside double-quoted strings (JSON's and
 * YAML's, with backslash escapes) and '#' comments are not counted;
 * single quotes are not followed (a YAML plain scalar may hold a lone
 * "'"), so a bracket inside a single-quoted string counts. The result is
 * therefore a bound to refuse on, not a parser: a YAML parser must still
 * bound the depth it builds (jobspec does). Never fails. */
void textguard_depth(const char *text, size_t len, size_t *depth,
                     unsigned long *line);

/* Refuse text over max_len bytes or nested deeper than max_depth, with a
 * message in errbuf that names the limit, where it was passed and what to
 * do; what names the text ("the job file"). FLPS_OK or FLPS_ECONFIG; also
 * FLPS_EINVAL for NULL text with len > 0. Never does I/O. */
flps_err textguard_check(const char *text, size_t len, size_t max_len,
                         size_t max_depth, const char *what, char *errbuf,
                         size_t errlen);

#endif
