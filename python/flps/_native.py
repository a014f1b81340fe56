"""Finding and loading libflps.so, and the ctypes declarations of flps.h.

The library is looked for, in this order:

1. ``FLPS_LIBRARY``: the path of the library itself (an error if it does
   not load: the caller asked for that file);
2. ``FLPS_BUILD_DIR``: an flps build directory; its ``lib/`` holds
   ``libflps.so.MAJOR``;
3. pkg-config (``pkg-config --variable=libdir flps``, so an install prefix
   on ``PKG_CONFIG_PATH`` works), then the dynamic linker's own search
   (``ctypes.util.find_library("flps")``, ``LD_LIBRARY_PATH``, the system
   directories).

It is loaded on first use, not on ``import flps``, so a program can import
the package, catch LibraryNotFoundError and say what to install.  The
library's ``flps_version()`` must have this package's major version.
"""

import atexit
import ctypes
import ctypes.util
import logging
import os
import subprocess
import threading

from .errors import LibraryNotFoundError, VersionMismatchError

#: The libflps major version this package is written for (the soname's).
EXPECTED_MAJOR = 0
#: The oldest minor version of that major that has every call used here.
MINIMUM_MINOR = 3

SONAME = "libflps.so.%d" % EXPECTED_MAJOR

_lock = threading.Lock()
_lib = None
_lib_path = None

# The logger: libflps's lines go to the Python logger "flps" and the last
# error line of each thread is kept, because flps_client_create has no
# client to ask for its last error and logs the reason instead.
_log = logging.getLogger("flps")
_last_log_error = threading.local()
_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING,
           3: logging.ERROR}


class FlpsTensor(ctypes.Structure):
    """flps_tensor of flps.h."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("numel", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
    ]


class FlpsClientConfig(ctypes.Structure):
    """flps_client_config of flps.h as 0.3 laid it out, field for field.

    That is all flps_client_create_warmup reads; the fields 0.4 appended
    (size, transport, density_warmup, density_warmup_start) are read only
    by flps_client_create_config, which this package does not call.
    """

    _fields_ = [
        ("job", ctypes.c_char_p),
        ("rank", ctypes.c_uint32),
        ("workers", ctypes.c_uint32),
        ("servers", ctypes.POINTER(ctypes.c_char_p)),
        ("nservers", ctypes.c_uint32),
        ("tensors", ctypes.POINTER(FlpsTensor)),
        ("ntensors", ctypes.c_uint32),
        ("part_size", ctypes.c_uint32),
        ("async_", ctypes.c_int),
        ("compression", ctypes.c_char_p),
        ("lr", ctypes.c_double),
        ("lr_cosine", ctypes.c_int),
        ("iterations", ctypes.c_uint64),
        ("momentum", ctypes.c_double),
        ("retry_ms", ctypes.c_int),
        ("deadline_ms", ctypes.c_int),
    ]


class FlpsClientConfigFull(ctypes.Structure):
    """flps_client_config of flps.h whole: the 0.3 fields, then what 0.4
    appended (the transport, the warm-up, the GPU clock and energy),
    server_optimizer and push_window after it, for
    flps_client_config_init_size and flps_client_create_config (which read
    the fields the struct's size holds)."""

    _fields_ = FlpsClientConfig._fields_ + [
        ("size", ctypes.c_size_t),
        ("transport", ctypes.c_char_p),
        ("density_warmup", ctypes.c_uint64),
        ("density_warmup_start", ctypes.c_double),
        ("gpu_clock", ctypes.c_char_p),
        ("gpu_clock_slowdown", ctypes.c_char_p),
        ("gpu_clock_record", ctypes.c_char_p),
        ("gpus", ctypes.c_char_p),
        ("server_optimizer", ctypes.c_char_p),
        ("push_window", ctypes.c_int),
    ]

#: flps_client_config's push_window: sized to the link at init (flps.h).
PUSH_WINDOW_AUTO = 2147483647


class FlpsSapsConfig(ctypes.Structure):
    """flps_saps_config of flps.h (0.4: decentralized training)."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("job", ctypes.c_char_p),
        ("rank", ctypes.c_uint32),
        ("workers", ctypes.c_uint32),
        ("peers", ctypes.c_char_p),
        ("tensors", ctypes.POINTER(FlpsTensor)),
        ("ntensors", ctypes.c_uint32),
        ("density", ctypes.c_double),
        ("peer_selection", ctypes.c_char_p),
        ("bandwidth_threshold", ctypes.c_double),
        ("connectivity_window", ctypes.c_uint32),
        ("bandwidth_reprobe", ctypes.c_uint64),
        ("sync_every", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("deadline_ms", ctypes.c_int),
        ("join_deadline_ms", ctypes.c_int),
        ("probe_bytes", ctypes.c_size_t),
        ("transport", ctypes.c_char_p),
    ]


class FlpsSapsRoundInfo(ctypes.Structure):
    """flps_saps_round_info of flps.h."""

    _fields_ = [
        ("peer", ctypes.c_uint32),
        ("exchanged", ctypes.c_int),
        ("skipped", ctypes.c_int),
        ("peer_bandwidth", ctypes.c_double),
        ("slow", ctypes.c_int),
        ("bytes_sent", ctypes.c_uint64),
        ("alive", ctypes.c_uint32),
        ("matching_hash", ctypes.c_uint64),
    ]


class FlpsSapsStats(ctypes.Structure):
    """flps_saps_stats of flps.h."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "rounds", "exchanges", "skipped", "idle", "slow_exchanges",
        "bytes_sent", "bytes_received", "exchange_bytes", "dense_bytes",
        "probe_bytes")] + [
        ("probe_seconds", ctypes.c_double),
        ("wait_seconds", ctypes.c_double),
        ("dead", ctypes.c_uint32),
        ("matching_digest", ctypes.c_uint64),
    ]


class FlpsSapsConsensusInfo(ctypes.Structure):
    """flps_saps_consensus_info of flps.h."""

    _fields_ = [
        ("coordinator", ctypes.c_uint32),
        ("averaged", ctypes.c_uint32),
        ("distance", ctypes.c_double),
    ]


class FlpsClientStats(ctypes.Structure):
    """flps_client_stats of flps.h."""

    _fields_ = [
        ("bytes_sent", ctypes.c_uint64),
        ("bytes_received", ctypes.c_uint64),
        ("dense_bytes", ctypes.c_uint64),
        ("pushes", ctypes.c_uint64),
        ("resends", ctypes.c_uint64),
        ("elements_sent", ctypes.c_uint64),
    ]


class FlpsEnergy(ctypes.Structure):
    """flps_energy of flps.h (0.4): what the process's client metered."""

    _fields_ = (
        [("devices", ctypes.c_uint32), ("gpus", ctypes.c_uint32),
         ("iterations", ctypes.c_uint64)] +
        [(name, ctypes.c_double) for name in (
            "seconds", "joules", "gpu_joules", "cpu_joules",
            "joules_per_iteration", "gpu_joules_per_iteration",
            "cpu_joules_per_iteration")] +
        [("method", ctypes.c_char * 32), ("gpu_list", ctypes.c_char * 64),
         ("gpu_clock", ctypes.c_char * 16),
         ("gpu_clock_mhz", ctypes.c_uint32), ("gpu_clock_chosen", ctypes.c_int),
         ("why", ctypes.c_char * 512)])


LOGGER_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_char_p)

_c_void_p = ctypes.c_void_p
_c_err = ctypes.c_int
# name: (restype, argtypes)
_PROTOTYPES = {
    "flps_version": (ctypes.c_char_p, []),
    "flps_strerror": (ctypes.c_char_p, [_c_err]),
    "flps_errname": (ctypes.c_char_p, [_c_err]),
    "flps_set_logger": (None, [LOGGER_FN, _c_void_p]),
    "flps_client_create": (_c_err, [ctypes.POINTER(FlpsClientConfig),
                                    ctypes.POINTER(_c_void_p)]),
    "flps_client_create_warmup": (_c_err, [
        ctypes.POINTER(FlpsClientConfig), ctypes.c_char_p, ctypes.c_uint64,
        ctypes.c_double, ctypes.POINTER(_c_void_p)]),
    "flps_client_init": (_c_err, [_c_void_p]),
    "flps_client_push": (_c_err, [_c_void_p, ctypes.c_uint32, _c_void_p,
                                  ctypes.c_uint64]),
    "flps_client_push_pairs": (_c_err, [_c_void_p, ctypes.c_uint32,
                                        _c_void_p, _c_void_p, ctypes.c_size_t,
                                        ctypes.c_uint64]),
    "flps_client_pairs_taken": (_c_err, [_c_void_p, ctypes.c_uint32,
                                         _c_void_p, ctypes.c_size_t]),
    "flps_client_wait": (_c_err, [_c_void_p, ctypes.c_uint64]),
    "flps_client_wait_layer": (_c_err, [_c_void_p, ctypes.c_uint32,
                                        ctypes.c_uint64]),
    "flps_client_pull": (_c_err, [_c_void_p]),
    "flps_client_set_layer_codec": (_c_err, [_c_void_p, ctypes.c_uint32,
                                             ctypes.c_char_p]),
    "flps_client_measure_network": (_c_err, [
        _c_void_p, ctypes.POINTER(ctypes.c_double),
        ctypes.POINTER(ctypes.c_double)]),
    "flps_client_checkpoint": (_c_err, [_c_void_p]),
    "flps_client_resume_iteration": (ctypes.c_uint64, [_c_void_p]),
    "flps_client_get_stats": (None, [_c_void_p,
                                     ctypes.POINTER(FlpsClientStats)]),
    "flps_client_get_messages": (None, [_c_void_p,
                                        ctypes.POINTER(ctypes.c_uint64),
                                        ctypes.POINTER(ctypes.c_uint64)]),
    "flps_client_residual_norm": (_c_err, [_c_void_p, ctypes.c_uint32,
                                           ctypes.POINTER(ctypes.c_double)]),
    "flps_client_set_staleness": (_c_err, [_c_void_p, ctypes.c_uint32]),
    "flps_client_set_push_weight": (_c_err, [_c_void_p, ctypes.c_double]),
    "flps_client_stale_wait_seconds": (ctypes.c_double, [_c_void_p]),
    "flps_client_last_error": (ctypes.c_char_p, [_c_void_p]),
    "flps_client_destroy": (None, [_c_void_p]),
}


# Calls of a later minor version than MINIMUM_MINOR: declared where the
# library has them; what uses them does without on an older library.
_OPTIONAL_PROTOTYPES = {
    "flps_metrics_report": (_c_err, [ctypes.c_double, ctypes.c_double,
                                     ctypes.c_double]),
    "flps_client_energy": (_c_err, [_c_void_p, ctypes.POINTER(FlpsEnergy),
                                    ctypes.c_size_t]),
    "flps_client_config_init_size": (_c_err, [
        ctypes.POINTER(FlpsClientConfigFull), ctypes.c_size_t]),
    "flps_client_create_config": (_c_err, [
        ctypes.POINTER(FlpsClientConfigFull), ctypes.POINTER(_c_void_p)]),
    "flps_metrics_report_round": (_c_err, [ctypes.c_uint64, ctypes.c_uint32,
                                           ctypes.c_uint32]),
    # Federated learning (flps.fl): flworker's sampling and partitions.
    "flps_fl_round_size": (ctypes.c_uint32, [ctypes.c_uint32,
                                             ctypes.c_double]),
    "flps_fl_sample": (_c_err, [ctypes.c_uint64, ctypes.c_uint64,
                                ctypes.c_uint32, ctypes.c_double, _c_void_p,
                                ctypes.c_size_t]),
    "flps_fl_stragglers": (_c_err, [ctypes.c_uint64, ctypes.c_uint32,
                                    ctypes.c_double, _c_void_p]),
    "flps_fl_partition": (_c_err, [ctypes.c_char_p, _c_void_p,
                                   ctypes.c_size_t, ctypes.c_uint32,
                                   ctypes.c_uint32, ctypes.c_uint64,
                                   _c_void_p, _c_void_p]),
    # 0.4: decentralized training (flps.saps).
    "flps_saps_config_init_size": (_c_err, [ctypes.POINTER(FlpsSapsConfig),
                                            ctypes.c_size_t]),
    "flps_saps_create": (_c_err, [ctypes.POINTER(FlpsSapsConfig),
                                  ctypes.POINTER(_c_void_p)]),
    "flps_saps_round": (_c_err, [_c_void_p, ctypes.c_uint64,
                                 ctypes.POINTER(FlpsSapsRoundInfo)]),
    "flps_saps_consensus": (_c_err, [
        _c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(FlpsSapsConsensusInfo)]),
    "flps_saps_is_alive": (ctypes.c_int, [_c_void_p, ctypes.c_uint32]),
    "flps_saps_bandwidth": (_c_err, [_c_void_p,
                                     ctypes.POINTER(ctypes.c_double),
                                     ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_double)]),
    "flps_saps_get_stats": (None, [_c_void_p, ctypes.POINTER(FlpsSapsStats)]),
    "flps_saps_last_error": (ctypes.c_char_p, [_c_void_p]),
    "flps_saps_destroy": (None, [_c_void_p]),
}
_optional = set()  # the optional calls the loaded library has


def _on_log(_arg, level, line):
    text = line.decode("utf-8", "replace") if line else ""
    if level >= 3:
        _last_log_error.line = text
    _log.log(_LEVELS.get(level, logging.ERROR), "%s", text)


# Kept for the life of the process: libflps holds the pointer.
_LOGGER = LOGGER_FN(_on_log)


def take_logged_error():
    """The last error line libflps logged on this thread since the previous
    call, or "" (and forget it)."""
    line = getattr(_last_log_error, "line", "")
    _last_log_error.line = ""
    return line


def _build_dir_candidates(build_dir):
    for sub in ("lib", "lib64", "."):
        for name in (SONAME, "libflps.so"):
            yield os.path.abspath(os.path.join(build_dir, sub, name))


def _pkg_config_candidates():
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "flps"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    libdir = out.stdout.strip()
    if out.returncode != 0 or not libdir:
        return []
    return [os.path.normpath(os.path.join(libdir, SONAME))]


def _candidates():
    """(how it was found, path or name) in the order of the module doc."""
    build_dir = os.environ.get("FLPS_BUILD_DIR")
    if build_dir:
        for path in _build_dir_candidates(build_dir):
            yield "FLPS_BUILD_DIR", path
    for path in _pkg_config_candidates():
        yield "pkg-config", path
    found = ctypes.util.find_library("flps")
    if found:
        yield "the system's library path", found
    yield "the system's library path", SONAME


def _open(path):
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        return e


def _find():
    explicit = os.environ.get("FLPS_LIBRARY")
    if explicit:
        lib = _open(explicit)
        if isinstance(lib, OSError):
            raise LibraryNotFoundError(
                "FLPS_LIBRARY=%s cannot be loaded (%s); point FLPS_LIBRARY "
                "at libflps.so.%d (build/lib/ of an flps build) or unset it"
                % (explicit, lib, EXPECTED_MAJOR))
        return lib, explicit
    tried = []
    for how, path in _candidates():
        if how != "the system's library path" and not os.path.exists(path):
            tried.append("%s (%s: no such file)" % (path, how))
            continue
        lib = _open(path)
        if not isinstance(lib, OSError):
            return lib, path
        tried.append("%s (%s: %s)" % (path, how, lib))
    raise LibraryNotFoundError(
        "cannot find libflps (%s); tried: %s. Build flps (cmake -S . -B build "
        "&& cmake --build build) and set FLPS_BUILD_DIR to the build "
        "directory, or FLPS_LIBRARY to the path of %s"
        % (SONAME, "; ".join(tried), SONAME))


def _declare(lib, path):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise VersionMismatchError(
                "%s has no %s: it is not a libflps this package can use; "
                "set FLPS_LIBRARY or FLPS_BUILD_DIR to a libflps %d.%d or "
                "later" % (path, name, EXPECTED_MAJOR, MINIMUM_MINOR)) \
                from None
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
            _optional.add(name)


def _check_version(lib, path):
    text = lib.flps_version().decode("ascii", "replace")
    try:
        major, minor = (int(x) for x in text.split(".")[:2])
    except ValueError:
        major, minor = -1, -1
    if major != EXPECTED_MAJOR or minor < MINIMUM_MINOR:
        raise VersionMismatchError(
            "%s is libflps %s, this package needs %d.x with x >= %d; set "
            "FLPS_LIBRARY or FLPS_BUILD_DIR to a matching build"
            % (path, text, EXPECTED_MAJOR, MINIMUM_MINOR))


def _restore_logger():
    # At exit the callback would run in a dying interpreter: give libflps
    # its own stderr logger back first.
    if _lib is not None:
        _lib.flps_set_logger(LOGGER_FN(), None)


def lib():
    """The loaded libflps (a ctypes.CDLL with its calls declared); loads it
    on the first call.  Raises LibraryNotFoundError or
    VersionMismatchError."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            handle, path = _find()
            _declare(handle, path)
            _check_version(handle, path)
            handle.flps_set_logger(_LOGGER, None)
            _lib_path = path
            _lib = handle
            atexit.register(_restore_logger)
    return _lib


def library_path():
    """The path (or name) libflps was loaded from; loads it if needed."""
    lib()
    return _lib_path


def has(name):
    """Whether the loaded library has the optional call `name` (loads it)."""
    lib()
    return name in _optional


def energy_of(handle):
    """What libflps metered for the client handle (flps_client_energy), as
    a dict of FlpsEnergy's fields (strings decoded); None on a library
    without the call."""
    if _lib is None or "flps_client_energy" not in _optional:
        return None
    e = FlpsEnergy()
    if _lib.flps_client_energy(handle, ctypes.byref(e), ctypes.sizeof(e)) != 0:
        return None
    out = {f: getattr(e, f) for f, _ in e._fields_}
    for f in ("method", "gpu_list", "gpu_clock", "why"):
        out[f] = out[f].decode("utf-8", "replace")
    return out


def has(name):
    """Whether the loaded libflps has the optional call name (loads it)."""
    lib()
    return name in _optional


def report_round(rnd, clients, late):
    """Give libflps's metrics endpoint a finished federated round
    (flworker_fl_round, flworker_fl_clients_total,
    flworker_fl_late_clients_total); nothing without the library or the
    call."""
    if _lib is None or "flps_metrics_report_round" not in _optional:
        return
    _lib.flps_metrics_report_round(rnd, clients, late)


def report_metrics(loss=None, test_accuracy=None, test_loss=None):
    """Give libflps's metrics endpoint (flworker_loss, flworker_test_accuracy,
    flworker_test_loss) the values flps.report got; None leaves one as it
    was.  Nothing happens before the library is loaded (no client yet, so
    nothing serves), or with a library older than flps_metrics_report."""
    if _lib is None or "flps_metrics_report" not in _optional:
        return
    nan = float("nan")
    _lib.flps_metrics_report(nan if loss is None else loss,
                             nan if test_accuracy is None else test_accuracy,
                             nan if test_loss is None else test_loss)
