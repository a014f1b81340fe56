/* The one rule for ids and names that become parts of Redis keys, file
 * names, directories or process arguments: job ids, job names, node names.
 * Anything from Redis or the API is checked against it before such use. */
#ifndef FLPS_SERVICES_SAFEID_H
#define FLPS_SERVICES_SAFEID_H

#include <stddef.h>

#define SAFEID_MAX 63

/* The rule in words, for messages. */
#define SAFEID_RULE                                                            \
    "1 to 63 characters from A-Z a-z 0-9 _ . -, starting with a letter or "    \
    "digit, without '..'"

/* Whether the n bytes at s (not necessarily NUL-terminated) follow the
 * rule: [A-Za-z0-9][A-Za-z0-9._-]{0,62} with no "..". Such a name is never
 * a path of its own ("." or ".."), never an option ("-x"), and holds no
 * ':' (which splits a key), '/' or control character. */
int safeid_is_valid(const char *s, size_t n);

/* The same for a NUL-terminated s; 0 for NULL. */
int safeid_is_valid_str(const char *s);

#endif
