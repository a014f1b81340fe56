/* Untrusted bytes made fit to show: in an error reply, a log line, a
 * message a person reads. A peer's job id, a header key or a codec name
 * may hold a newline, an ESC or bytes that are not UTF-8; shown raw they
 * forge log lines, drive a terminal or break whatever parses the text. */
#ifndef FLPS_COMMON_QUOTE_H
#define FLPS_COMMON_QUOTE_H

#include <stddef.h>

/* Write srclen untrusted bytes of src into dst (dstlen > 0; always
 * NUL-terminated) as printable ASCII: a backslash as "\\", newline,
 * carriage return and tab as "\n", "\r", "\t", every other byte outside
 * 0x20-0x7e as "\xNN". What does not fit whole ends in "..." (an escape is
 * never cut). Returns the length written. src may be NULL when srclen is
 * 0. For a value inside a sentence: "job '%s'". */
size_t flps_quote(char *dst, size_t dstlen, const void *src, size_t srclen);

/* As flps_quote for the NUL-terminated s, cut at max_chars of s (the
 * result fits dstlen either way). */
size_t flps_quote_str(char *dst, size_t dstlen, const char *s,
                      size_t max_chars);

/* Append the NUL-terminated text to buf from len on, keeping valid UTF-8
 * and every printable character (a backslash included) and writing every
 * control character, DEL and byte that is not part of a valid UTF-8
 * sequence as an escape ("\n", "\r", "\t", else "\xNN"). Nothing is
 * written at or beyond cap - reserve; an escape or a UTF-8 sequence that
 * does not fit whole is left out, and so is the rest. Returns the new
 * length; buf is not NUL-terminated (the caller ends it). For a whole
 * message made of trusted text and quoted values, so that one missed
 * value still cannot forge a line or carry invalid UTF-8. */
size_t flps_text_clean(char *buf, size_t len, size_t cap, size_t reserve,
                       const char *text);

#endif
