/* flps error codes: one table generates the enum and the messages. */
#ifndef FLPS_ERR_H
#define FLPS_ERR_H

#define FLPS_ERR_MAP(X)                                                        \
    X(FLPS_OK, "success")                                                      \
    X(FLPS_ENOMEM, "out of memory")                                            \
    X(FLPS_EINVAL, "invalid argument")                                         \
    X(FLPS_EPROTO, "malformed message")                                        \
    X(FLPS_ETIMEDOUT, "timed out")                                             \
    X(FLPS_ESYS, "system call failed")                                         \
    X(FLPS_ERANGE, "index out of range")                                       \
    X(FLPS_ENONFINITE, "non-finite value (NaN or Inf)")                        \
    X(FLPS_ELATE, "push for an iteration that is already closed")              \
    X(FLPS_EDUP, "second push of the same worker in one iteration")            \
    X(FLPS_EFUTURE, "push for an iteration that has not opened yet")           \
    X(FLPS_EJOB, "wrong job id")                                               \
    X(FLPS_ELAYOUT, "model layout does not match the one registered")          \
    X(FLPS_ESTATE, "operation not allowed in the current state")               \
    X(FLPS_EIO, "file input/output failed")                                    \
    X(FLPS_ECONFIG, "invalid configuration")                                   \
    X(FLPS_EREMOTE, "the server replied with an error")                        \
    X(FLPS_ECLOSED, "connection closed")

typedef enum {
#define FLPS_ERR_ENUM_(code, msg) code,
    FLPS_ERR_MAP(FLPS_ERR_ENUM_)
#undef FLPS_ERR_ENUM_
        FLPS_ERR_COUNT_
} flps_err;

/* Human message for err; never NULL, a static string. */
const char *flps_strerror(flps_err err);

/* Symbolic name ("FLPS_EINVAL") for err; never NULL, a static string. */
const char *flps_errname(flps_err err);

#endif
