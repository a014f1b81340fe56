/* Cheap checks of untrusted JSON or YAML text before a parser sees it:
 * size, being UTF-8 text at all, and nesting depth, each one linear pass
 * over the bytes. libyaml's scanner
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

/* How much of a text is sniffed for being binary (as git does). */
#define TEXTGUARD_SNIFF 8192

/* Is text UTF-8 text, as a YAML or JSON file must be? FLPS_OK, else
 * FLPS_ECONFIG with a message in errbuf that says what it is instead
 * (what names the text, "the job file"):
 *   binary: a NUL byte in its first TEXTGUARD_SNIFF bytes, or more than
 *     a quarter of them (and at least 8) neither text nor UTF-8: "the job
 *     file is binary,
 *     not YAML or JSON text (byte 2 is 0x03)";
 *   UTF-16 or UTF-32 (a byte-order mark): "... is UTF-16 text; ..." with
 *     the iconv command that converts it;
 *   not UTF-8 (Latin-1, Windows-1252): "line 2, column 7: byte 14
 *     (0xE9) is not UTF-8; ..." with the iconv command;
 *   a control character other than tab, CR and LF: "line 2, column 7:
 *     byte 14 (0x1B) is a control character, ...".
 * *line (when not NULL) is the line the message is about, 0 for none.
 * A UTF-8 byte-order mark is text. Also FLPS_EINVAL for NULL text with
 * len > 0. Never does I/O. */
flps_err textguard_text(const char *text, size_t len, const char *what,
                        char *errbuf, size_t errlen, unsigned long *line);

/* Refuse text over max_len bytes, not UTF-8 text (textguard_text) or
 * nested deeper than max_depth, with a message in errbuf that names the
 * limit or the fault, where it is and what to do; what names the text
 * ("the job file"). *line (when not NULL) is the line the refusal is
 * about, 0 for none. FLPS_OK or FLPS_ECONFIG; also FLPS_EINVAL for NULL
 * text with len > 0. Never does I/O. */
flps_err textguard_check_at(const char *text, size_t len, size_t max_len,
                            size_t max_depth, const char *what, char *errbuf,
                            size_t errlen, unsigned long *line);

/* textguard_check_at without the line. */
flps_err textguard_check(const char *text, size_t len, size_t max_len,
                         size_t max_depth, const char *what, char *errbuf,
                         size_t errlen);

#endif
