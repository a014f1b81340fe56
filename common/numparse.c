/* The one bounded number parser. */
#include "common/numparse.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "what: " or "", so every message reads the same. */
#define NP_WHAT(w) (w) ? (w) : "", (w) ? ": " : ""

static int np_starts_like_number(const char *s, int allow_sign)
{
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
        return 0;
    if (*s == '-' || *s == '+')
        return allow_sign && (isdigit((unsigned char)s[1]) || s[1] == '.');
    return isdigit((unsigned char)*s) || *s == '.';
}

flps_err flps_parse_u64(const char *what, const char *s, uint64_t min,
                        uint64_t max, uint64_t *out, char *errbuf,
                        size_t errlen)
{
    char *end = NULL;
    unsigned long long v;

    if (!np_starts_like_number(s, 0) || *s == '.' ||
        (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
        goto not_int;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (*end != '\0')
        goto not_int;
    if (errno == ERANGE || v < min || v > max)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "%s%s'%s' is out of range: expected an integer "
                               "from %" PRIu64 " to %" PRIu64,
                               NP_WHAT(what), s, min, max);
    *out = (uint64_t)v;
    return FLPS_OK;
not_int:
    return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                           "%s%s'%s' is not an integer (expected an integer "
                           "from %" PRIu64 " to %" PRIu64 ")",
                           NP_WHAT(what), s ? s : "", min, max);
}

flps_err flps_parse_i64(const char *what, const char *s, int64_t min,
                        int64_t max, int64_t *out, char *errbuf, size_t errlen)
{
    char *end = NULL;
    long long v;

    if (!np_starts_like_number(s, 1) || *s == '.' ||
        (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
        goto not_int;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end != '\0')
        goto not_int;
    if (errno == ERANGE || v < min || v > max)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "%s%s'%s' is out of range: expected an integer "
                               "from %" PRId64 " to %" PRId64,
                               NP_WHAT(what), s, min, max);
    *out = (int64_t)v;
    return FLPS_OK;
not_int:
    return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                           "%s%s'%s' is not an integer (expected an integer "
                           "from %" PRId64 " to %" PRId64 ")",
                           NP_WHAT(what), s ? s : "", min, max);
}

flps_err flps_parse_int(const char *what, const char *s, int min, int max,
                        int *out, char *errbuf, size_t errlen)
{
    int64_t v = 0;
    flps_err rc = flps_parse_i64(what, s, min, max, &v, errbuf, errlen);

    if (rc == FLPS_OK)
        *out = (int)v;
    return rc;
}

flps_err flps_parse_double(const char *what, const char *s, double min,
                           double max, double *out, char *errbuf, size_t errlen)
{
    char *end = NULL;
    double v;

    /* strtod also reads hex floats ("0x1p-3"), which no flag or field
     * means to accept. */
    if (!np_starts_like_number(s, 1) || strpbrk(s, "xX") != NULL)
        goto not_num;
    errno = 0;
    v = strtod(s, &end);
    if (*end != '\0' || end == s)
        goto not_num;
    if (errno == ERANGE && fabs(v) > 1.0) /* overflow, not underflow */
        goto range;
    if (!isfinite(v))
        goto not_num;
    if (v < min || v > max)
        goto range;
    *out = v;
    return FLPS_OK;
range:
    return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                           "%s%s'%s' is out of range: expected a number from "
                           "%g to %g",
                           NP_WHAT(what), s, min, max);
not_num:
    return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                           "%s%s'%s' is not a number (expected a number from "
                           "%g to %g)",
                           NP_WHAT(what), s ? s : "", min, max);
}
