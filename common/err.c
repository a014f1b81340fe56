/* Messages and names for the flps_err codes, and the error-buffer
 * formatter. */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>

/* Pinned numbers must also be dense: code N sits in slot N. */
#define FLPS_ERR_CHECK_(code, num, msg)                                        \
    _Static_assert(num == FLPS_ERR_SLOT_##code,                                \
                   #code " must be numbered " #num " in order, no gaps");
FLPS_ERR_MAP(FLPS_ERR_CHECK_)
#undef FLPS_ERR_CHECK_

FLPS_API const char *flps_strerror(flps_err err)
{
    switch (err) {
#define FLPS_ERR_MSG_(code, num, msg)                                          \
    case code:                                                                 \
        return msg;
        FLPS_ERR_MAP(FLPS_ERR_MSG_)
#undef FLPS_ERR_MSG_
    default:
        return "unknown error";
    }
}

FLPS_API const char *flps_errname(flps_err err)
{
    switch (err) {
#define FLPS_ERR_NAME_(code, num, msg)                                         \
    case code:                                                                 \
        return #code;
        FLPS_ERR_MAP(FLPS_ERR_NAME_)
#undef FLPS_ERR_NAME_
    default:
        return "FLPS_E?";
    }
}

FLPS_API const char *flps_version(void)
{
#define FLPS_STR2_(x) #x
#define FLPS_STR_(x) FLPS_STR2_(x)
    return FLPS_STR_(FLPS_VERSION_MAJOR) "." FLPS_STR_(
        FLPS_VERSION_MINOR) "." FLPS_STR_(FLPS_VERSION_PATCH);
#undef FLPS_STR_
#undef FLPS_STR2_
}

flps_err flps_errbuf_vset(char *errbuf, size_t errlen, flps_err err,
                          const char *fmt, va_list ap)
{
    if (errbuf != NULL && errlen > 0)
        vsnprintf(errbuf, errlen, fmt, ap);
    return err;
}

flps_err flps_errbuf_set(char *errbuf, size_t errlen, flps_err err,
                         const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    flps_errbuf_vset(errbuf, errlen, err, fmt, ap);
    va_end(ap);
    return err;
}
