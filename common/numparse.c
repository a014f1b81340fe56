/* The one bounded number parser. */
#include "common/numparse.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
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

typedef enum { NP_OK, NP_SYNTAX, NP_RANGE } np_status;

/* Decimal digits with an optional sign (when allowed): the magnitude and
 * the sign, or why not. Hex, blanks and trailing characters are syntax
 * errors; more than 64 bits of magnitude is a range error. */
static np_status np_integer(const char *s, int allow_sign, int *neg,
                            uint64_t *mag)
{
    char *end = NULL;
    unsigned long long v;

    if (!np_starts_like_number(s, allow_sign) || *s == '.' ||
        (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
        return NP_SYNTAX;
    *neg = *s == '-';
    if (*s == '-' || *s == '+')
        s++;
    if (!isdigit((unsigned char)*s))
        return NP_SYNTAX;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (*end != '\0')
        return NP_SYNTAX;
    if (errno == ERANGE)
        return NP_RANGE;
    *mag = (uint64_t)v;
    return NP_OK;
}

/* The refusal of an integer, bounds already formatted. */
static flps_err np_refuse(const char *what, const char *s, np_status st,
                          const char *lo, const char *hi, char *errbuf,
                          size_t errlen)
{
    if (st != NP_SYNTAX) /* too many bits, or outside [min, max] */
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "%s%s'%s' is out of range: expected an integer "
                               "from %s to %s",
                               NP_WHAT(what), s, lo, hi);
    return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                           "%s%s'%s' is not an integer (expected an integer "
                           "from %s to %s)",
                           NP_WHAT(what), s ? s : "", lo, hi);
}

flps_err flps_parse_u64(const char *what, const char *s, uint64_t min,
                        uint64_t max, uint64_t *out, char *errbuf,
                        size_t errlen)
{
    char lo[24], hi[24];
    uint64_t v = 0;
    int neg = 0;
    np_status st = np_integer(s, 0, &neg, &v);

    if (st == NP_OK && v >= min && v <= max) {
        *out = v;
        return FLPS_OK;
    }
    snprintf(lo, sizeof(lo), "%" PRIu64, min);
    snprintf(hi, sizeof(hi), "%" PRIu64, max);
    return np_refuse(what, s, st, lo, hi, errbuf, errlen);
}

flps_err flps_parse_i64(const char *what, const char *s, int64_t min,
                        int64_t max, int64_t *out, char *errbuf, size_t errlen)
{
    char lo[24], hi[24];
    uint64_t mag = 0;
    int neg = 0;
    int64_t v = 0;
    np_status st = np_integer(s, 1, &neg, &mag);

    /* -2^63 is the one magnitude that fits only when negative. */
    if (st == NP_OK && mag <= (uint64_t)INT64_MAX + (uint64_t)neg) {
        v = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        if (v >= min && v <= max) {
            *out = v;
            return FLPS_OK;
        }
    }
    snprintf(lo, sizeof(lo), "%" PRId64, min);
    snprintf(hi, sizeof(hi), "%" PRId64, max);
    return np_refuse(what, s, st, lo, hi, errbuf, errlen);
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

void flps_format_double(char *buf, size_t len, double x)
{
    if (x == floor(x) && fabs(x) < 1e15) {
        snprintf(buf, len, "%.0f", x);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}
