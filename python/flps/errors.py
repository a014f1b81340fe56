"""The exceptions of the flps package: one class per libflps error code.

Every error the package raises is an :class:`FlpsError`.  A failed libflps
call raises the subclass of its code (``flps.TimedOutError`` for
``FLPS_ETIMEDOUT``, ...), carrying the code's number, its name and the
client's message (``flps_client_last_error``).  Errors the package finds
itself before calling the library (a buffer of the wrong type or size) use
the same classes; two more cover the library itself (not found, wrong
version).

The numbers are pinned by ``include/flps.h`` (a code keeps its number in
every release), which is why they may be written here; the tests check
this table against ``flps_errname`` of the loaded library.  Two classes
also derive from the Python exception a caller would expect:
InvalidArgumentError and NonFiniteError are ValueErrors, TimedOutError is a
TimeoutError.
"""


class FlpsError(Exception):
    """Base of every error of the flps package.

    Attributes:
        code: the libflps error number (``None`` for an error that has no
            libflps code, such as a library that cannot be found).
        name: the code's symbolic name, e.g. ``"FLPS_ETIMEDOUT"``.
        message: what went wrong and, where known, what to do.
    """

    code = None
    name = "FLPS_E?"

    def __init__(self, message, code=None, name=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if name is not None:
            self.name = name

    def __str__(self):
        return "%s [%s]" % (self.message, self.name)


class LibraryNotFoundError(FlpsError):
    """libflps.so could not be found or loaded."""

    name = "FLPS_ENOLIBRARY"


class VersionMismatchError(FlpsError):
    """The libflps found is of a version this package cannot use."""

    name = "FLPS_EVERSION"


class OutOfMemoryError(FlpsError):
    """FLPS_ENOMEM (1): out of memory."""

    code = 1
    name = "FLPS_ENOMEM"


class InvalidArgumentError(FlpsError, ValueError):
    """FLPS_EINVAL (2): invalid argument."""

    code = 2
    name = "FLPS_EINVAL"


class ProtocolError(FlpsError):
    """FLPS_EPROTO (3): malformed message."""

    code = 3
    name = "FLPS_EPROTO"


class TimedOutError(FlpsError, TimeoutError):
    """FLPS_ETIMEDOUT (4): timed out."""

    code = 4
    name = "FLPS_ETIMEDOUT"


class SystemCallError(FlpsError):
    """FLPS_ESYS (5): system call failed."""

    code = 5
    name = "FLPS_ESYS"


class RangeError(FlpsError):
    """FLPS_ERANGE (6): index out of range."""

    code = 6
    name = "FLPS_ERANGE"


class NonFiniteError(FlpsError, ValueError):
    """FLPS_ENONFINITE (7): non-finite value (NaN or Inf)."""

    code = 7
    name = "FLPS_ENONFINITE"


class LateError(FlpsError):
    """FLPS_ELATE (8): push for an iteration that is already closed."""

    code = 8
    name = "FLPS_ELATE"


class DuplicatePushError(FlpsError):
    """FLPS_EDUP (9): second push of the same worker in one iteration."""

    code = 9
    name = "FLPS_EDUP"


class FutureIterationError(FlpsError):
    """FLPS_EFUTURE (10): push for an iteration that has not opened yet."""

    code = 10
    name = "FLPS_EFUTURE"


class JobError(FlpsError):
    """FLPS_EJOB (11): wrong job id."""

    code = 11
    name = "FLPS_EJOB"


class LayoutError(FlpsError):
    """FLPS_ELAYOUT (12): model layout does not match the one registered."""

    code = 12
    name = "FLPS_ELAYOUT"


class StateError(FlpsError):
    """FLPS_ESTATE (13): operation not allowed in the current state."""

    code = 13
    name = "FLPS_ESTATE"


class IOFailedError(FlpsError):
    """FLPS_EIO (14): file input/output failed."""

    code = 14
    name = "FLPS_EIO"


class ConfigError(FlpsError):
    """FLPS_ECONFIG (15): invalid configuration."""

    code = 15
    name = "FLPS_ECONFIG"


class RemoteError(FlpsError):
    """FLPS_EREMOTE (16): the server replied with an error."""

    code = 16
    name = "FLPS_EREMOTE"


class ConnectionClosedError(FlpsError):
    """FLPS_ECLOSED (17): connection closed."""

    code = 17
    name = "FLPS_ECLOSED"


class AuthError(FlpsError):
    """FLPS_EAUTH (18): not a member of the job (credentials refused)."""

    code = 18
    name = "FLPS_EAUTH"


#: libflps error number -> its exception class (every code but FLPS_OK).
ERROR_CLASSES = {
    OutOfMemoryError.code: OutOfMemoryError,
    InvalidArgumentError.code: InvalidArgumentError,
    ProtocolError.code: ProtocolError,
    TimedOutError.code: TimedOutError,
    SystemCallError.code: SystemCallError,
    RangeError.code: RangeError,
    NonFiniteError.code: NonFiniteError,
    LateError.code: LateError,
    DuplicatePushError.code: DuplicatePushError,
    FutureIterationError.code: FutureIterationError,
    JobError.code: JobError,
    LayoutError.code: LayoutError,
    StateError.code: StateError,
    IOFailedError.code: IOFailedError,
    ConfigError.code: ConfigError,
    RemoteError.code: RemoteError,
    ConnectionClosedError.code: ConnectionClosedError,
    AuthError.code: AuthError,
}


def error_class(code):
    """The exception class of libflps error number `code`; FlpsError for a
    number this package does not know (a newer library's code)."""
    return ERROR_CLASSES.get(code, FlpsError)


def library_error(lib, code, what, why=""):
    """The exception for libflps error `code` of the call described by
    `what`: `why` (what the library said), else the code's text."""
    if not why:
        why = lib.flps_strerror(code).decode()
    return error_class(code)("%s: %s" % (what, why), code=code,
                             name=lib.flps_errname(code).decode())
