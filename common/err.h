/* Error codes shared by every flps module, and their messages. */
#ifndef FLPS_COMMON_ERR_H
#define FLPS_COMMON_ERR_H

#include "flps_err.h"

#endif
