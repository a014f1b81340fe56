/* Messages and names for the flps_err codes. */
#include "common/err.h"

const char *flps_strerror(flps_err err)
{
    switch (err) {
#define FLPS_ERR_MSG_(code, msg)                                               \
    case code:                                                                 \
        return msg;
        FLPS_ERR_MAP(FLPS_ERR_MSG_)
#undef FLPS_ERR_MSG_
    default:
        return "unknown error";
    }
}

const char *flps_errname(flps_err err)
{
    switch (err) {
#define FLPS_ERR_NAME_(code, msg)                                              \
    case code:                                                                 \
        return #code;
        FLPS_ERR_MAP(FLPS_ERR_NAME_)
#undef FLPS_ERR_NAME_
    default:
        return "FLPS_E?";
    }
}
