"""flps: the Python binding of libflps, the flps parameter-server client.

    import numpy as np, flps
    w = np.zeros(1000, dtype=np.float32)          # the model's memory
    with flps.connect("job", 0, 1, ["tcp://127.0.0.1:5555"], {"w": w},
                      lr=0.1) as c:
        c.init()                                  # w = the shards' model
        c.push("w", grad, 0); c.wait(0)           # w updated in place

The binding is ctypes over libflps.so (no compiled extension); see
flps._native for how the library is found (FLPS_LIBRARY, FLPS_BUILD_DIR,
pkg-config, the system path) and docs/python.md for the guide.  Every error
is an FlpsError subclass (flps.errors).  flps.torch wraps a PyTorch
optimizer.
"""

from ._native import EXPECTED_MAJOR, library_path
from .client import Client, ClientStats, connect, version
from .report import report
from .errors import (
    ERROR_CLASSES,
    FlpsError,
    LibraryNotFoundError,
    VersionMismatchError,
    error_class,
    OutOfMemoryError,
    InvalidArgumentError,
    ProtocolError,
    TimedOutError,
    SystemCallError,
    RangeError,
    NonFiniteError,
    LateError,
    DuplicatePushError,
    FutureIterationError,
    JobError,
    LayoutError,
    StateError,
    IOFailedError,
    ConfigError,
    RemoteError,
    ConnectionClosedError,
    AuthError,
)

__version__ = "0.4.0"

__all__ = [
    "Client",
    "ClientStats",
    "connect",
    "version",
    "report",
    "library_path",
    "EXPECTED_MAJOR",
    "FlpsError",
    "LibraryNotFoundError",
    "VersionMismatchError",
    "ERROR_CLASSES",
    "error_class",
    "OutOfMemoryError",
    "InvalidArgumentError",
    "ProtocolError",
    "TimedOutError",
    "SystemCallError",
    "RangeError",
    "NonFiniteError",
    "LateError",
    "DuplicatePushError",
    "FutureIterationError",
    "JobError",
    "LayoutError",
    "StateError",
    "IOFailedError",
    "ConfigError",
    "RemoteError",
    "ConnectionClosedError",
    "AuthError",
]
