/* The one bounded number parser, for every command-line flag and config
 * field: the whole string must be the number, it must lie in [min, max],
 * and a refusal says what was given, what was wanted and for what. */
#ifndef FLPS_COMMON_NUMPARSE_H
#define FLPS_COMMON_NUMPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Parse s as a whole decimal number in [min, max] into *out (written only
 * on FLPS_OK). what names the value in the message ("--port",
 * "batch_size"); NULL leaves it out. Leading/trailing blanks, signs on the
 * unsigned parser, hex, an empty string and overflow are refused.
 * Errors: FLPS_EINVAL with errbuf (if not NULL) holding e.g.
 *   "--port: '70000' is out of range: expected an integer from 1 to 65535"
 *   "--rank: 'x' is not an integer". */
flps_err flps_parse_u64(const char *what, const char *s, uint64_t min,
                        uint64_t max, uint64_t *out, char *errbuf,
                        size_t errlen);
flps_err flps_parse_i64(const char *what, const char *s, int64_t min,
                        int64_t max, int64_t *out, char *errbuf, size_t errlen);

/* The same for int (a convenience over flps_parse_i64). */
flps_err flps_parse_int(const char *what, const char *s, int min, int max,
                        int *out, char *errbuf, size_t errlen);

/* A finite real number (decimal or exponent notation, e.g. "0.05", "1e-3")
 * in [min, max]; NaN, Inf and overflow are refused. */
flps_err flps_parse_double(const char *what, const char *s, double min,
                           double max, double *out, char *errbuf,
                           size_t errlen);

/* The shortest decimal text that reads back as the same double (so 0.01
 * prints as "0.01", not "0.01000000000000000021"); whole numbers below
 * 10^15 without an exponent ("60", not "6e+01"). For every JSON, YAML,
 * Prometheus or message text flps writes. len >= 32 always fits. */
void flps_format_double(char *buf, size_t len, double x);

#endif
