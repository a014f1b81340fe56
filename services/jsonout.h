/* JSON text as flps writes it: compact, keys in insertion order, and reals
 * in their shortest round-trip form (0.25048, not 0.25047999999999998), so
 * what flsched's API and flsubmit --json print reads back exactly and
 * reads well. */
#ifndef FLPS_SERVICES_JSONOUT_H
#define FLPS_SERVICES_JSONOUT_H

#include <jansson.h>

#include "common/err.h"
#include "common/strbuf.h"

/* Append j (any JSON value) to b as compact JSON text. A real is written
 * by flps_format_double and keeps a ".0" when whole, so it stays a real
 * for the reader. Strings are UTF-8 with '"', '\\' and control characters
 * escaped. Errors: FLPS_EINVAL if j is NULL, FLPS_ENOMEM (sticky in b). */
flps_err jsonout_append(flps_strbuf *b, const json_t *j);

/* j as a NUL-terminated string. Errors as jsonout_append.
 * Ownership: on FLPS_OK the caller owns *out (flps_free). */
flps_err jsonout_dumps(const json_t *j, char **out);

#endif
