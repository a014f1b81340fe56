"""flps.saps: decentralized training (SAPS-PSGD) from Python.

No parameter server: every worker keeps its own model and, each round,
averages a shared random share of it with one peer, the peers chosen from
the bandwidth the workers measure (docs/algorithms.md, section 8)::

    import numpy as np, flps.saps
    w = [np.zeros(1000, dtype=np.float32), np.zeros(10, dtype=np.float32)]
    with flps.saps.Saps(w) as s:               # FLPS_* of a saps job
        for r in range(rounds):
            local_sgd_steps(w)                 # the program's own
            s.round(r)                         # w averaged in place
        avg, info = s.consensus(rounds)        # the workers' average

Saps() reads what it is not given from the variables flrun and flagent set
for a ``mode: saps`` job (FLPS_JOB, FLPS_RANK, FLPS_WORKERS, FLPS_PEERS,
FLPS_SAPS_DENSITY, FLPS_PEER_SELECTION, FLPS_BANDWIDTH_THRESHOLD,
FLPS_CONNECTIVITY_WINDOW, FLPS_BANDWIDTH_REPROBE, FLPS_PEER_DEADLINE,
FLPS_SEED); libflps reads FLPS_CREDENTIALS_FILE and FLPS_TRANSPORT itself.
The tensors are float32 NumPy arrays (C-contiguous) the rounds write into;
keep them alive while the Saps object is.  ctypes drops the GIL for every
call, so workers may also run as threads of one process.  Under a launcher
the process's "done" event (flps.report) carries what its Saps did: the
mode, bytes, exchanges, the matchings' digest and the consensus, so
flrun's summary says whether the workers agreed.
"""

import ctypes
import os

from . import _native
from .errors import InvalidArgumentError, StateError, library_error

# The done event's saps fields of every Saps this process closed
# (flps.report prints them at exit).
_done = []


def _env(environ, name, cast, default):
    text = environ.get(name)
    if text is None or text == "":
        return default
    try:
        return cast(text)
    except ValueError:
        raise InvalidArgumentError("%s=%r is not what a saps job sets"
                                   % (name, text)) from None


def _threshold(text):
    return -1.0 if text == "auto" else float(text)


def _arrays(tensors):
    import numpy as np  # only here: the rest of the package has no numpy

    out = []
    for i, t in enumerate(tensors):
        if (not isinstance(t, np.ndarray) or t.dtype != np.float32 or
                not t.flags["C_CONTIGUOUS"] or not t.flags["WRITEABLE"]):
            raise InvalidArgumentError(
                "tensor %d: expected a writeable C-contiguous float32 NumPy "
                "array (the rounds average into it)" % i)
        out.append(t)
    if not out:
        raise InvalidArgumentError("expected at least one tensor")
    return out


class Saps:
    """One worker of a decentralized job (flps_saps_* of flps.h).

    Creating it joins the other workers (blocks until all have), measures
    this worker's row of the bandwidth matrix and agrees on the matrix with
    the others.  Arguments left None come from the job's variables; every
    worker must start from the same model values.
    """

    def __init__(self, tensors, job=None, rank=None, workers=None, peers=None,
                 density=None, peer_selection=None, bandwidth_threshold=None,
                 connectivity_window=None, bandwidth_reprobe=None, seed=None,
                 peer_deadline=None, environ=None):
        env = os.environ if environ is None else environ
        lib = _native.lib()
        if not _native.has("flps_saps_create"):
            raise StateError("libflps %s has no decentralized training "
                             "(flps_saps_*): it needs 0.4 or later"
                             % _native.library_path())
        self._lib = lib
        self._handle = None
        self.tensors = _arrays(tensors)
        cfg = _native.FlpsSapsConfig()
        rc = lib.flps_saps_config_init_size(ctypes.byref(cfg),
                                            ctypes.sizeof(cfg))
        if rc != 0:
            raise self._error(rc, "flps_saps_config_init")
        self.job = job if job is not None else env.get("FLPS_JOB", "")
        self.rank = rank if rank is not None else _env(env, "FLPS_RANK",
                                                       int, 0)
        self.workers = (workers if workers is not None else
                        _env(env, "FLPS_WORKERS", int, 0))
        peers = peers if peers is not None else env.get("FLPS_PEERS")
        if not self.job or not peers:
            raise InvalidArgumentError(
                "a saps worker needs the job id and every worker's endpoint "
                "(job=, peers= or FLPS_JOB and FLPS_PEERS, which flrun sets "
                "for a mode: saps job)")
        if isinstance(peers, (list, tuple)):
            peers = ",".join(peers)
        # Kept: the config borrows them until create returns.
        self._keep = [self.job.encode(), peers.encode()]
        cfg.job, cfg.peers = self._keep
        cfg.rank, cfg.workers = self.rank, self.workers
        arr = (_native.FlpsTensor * len(self.tensors))()
        for i, t in enumerate(self.tensors):
            arr[i].name = None
            arr[i].numel = t.size
            arr[i].data = t.ctypes.data
        self._tensor_array = arr
        cfg.tensors, cfg.ntensors = arr, len(self.tensors)
        opt = [
            ("density", density, "FLPS_SAPS_DENSITY", float),
            ("bandwidth_threshold", bandwidth_threshold,
             "FLPS_BANDWIDTH_THRESHOLD", _threshold),
            ("connectivity_window", connectivity_window,
             "FLPS_CONNECTIVITY_WINDOW", int),
            ("bandwidth_reprobe", bandwidth_reprobe, "FLPS_BANDWIDTH_REPROBE",
             int),
            ("seed", seed, "FLPS_SEED", int),
        ]
        for field, given, var, cast in opt:
            value = given if given is not None else _env(env, var, cast, None)
            if field == "bandwidth_threshold" and value == "auto":
                value = -1.0
            if value is not None:
                setattr(cfg, field, value)
        sel = (peer_selection if peer_selection is not None else
               env.get("FLPS_PEER_SELECTION"))
        if sel:
            self._keep.append(sel.encode())
            cfg.peer_selection = self._keep[-1]
        deadline = (peer_deadline if peer_deadline is not None else
                    _env(env, "FLPS_PEER_DEADLINE", float, None))
        if deadline is not None:
            cfg.deadline_ms = max(1, int(deadline * 1000 + 0.5))
        self.peer_selection = sel or "adaptive"
        self._rounds = 0
        self._cons = None
        handle = ctypes.c_void_p()
        rc = lib.flps_saps_create(ctypes.byref(cfg), ctypes.byref(handle))
        if rc != 0:
            raise self._error(rc, "joining the job's other workers",
                              _native.take_logged_error())
        self._handle = handle

    def _error(self, rc, what, why=""):
        if not why and self._handle is not None:
            why = self._lib.flps_saps_last_error(self._handle).decode(
                "utf-8", "replace")
        return library_error(self._lib, rc, what, why)

    def _live(self):
        if self._handle is None:
            raise StateError("the saps worker of job %r is closed" % self.job)
        return self._handle

    def round(self, r):
        """Round r (0, 1, 2, ... in order): the exchange with this round's
        peer, averaged into the tensors.  Returns what it did: a dict with
        peer (None for no peer), exchanged, skipped, peer_bandwidth (bytes/s),
        slow, bytes_sent, alive and matching_hash."""
        info = _native.FlpsSapsRoundInfo()
        rc = self._lib.flps_saps_round(self._live(), r, ctypes.byref(info))
        if rc != 0:
            raise self._error(rc, "saps round %d" % r)
        self._rounds = r + 1
        return {
            "peer": None if info.peer == 0xFFFFFFFF else info.peer,
            "exchanged": bool(info.exchanged), "skipped": bool(info.skipped),
            "peer_bandwidth": info.peer_bandwidth, "slow": bool(info.slow),
            "bytes_sent": info.bytes_sent, "alive": info.alive,
            "matching_hash": info.matching_hash,
        }

    def consensus(self, rounds):
        """After the last round (rounds = how many ran): every live worker
        sends its model to the coordinator (the lowest rank alive).  Returns
        (average, info): on the coordinator the workers' average (float32
        arrays shaped as the tensors) and info's distance, the mean
        ||x_i - x_bar||; elsewhere average is None.  info: coordinator,
        averaged, distance."""
        import numpy as np

        avg = [np.empty_like(t) for t in self.tensors]
        ptrs = (ctypes.c_void_p * len(avg))(*[a.ctypes.data for a in avg])
        info = _native.FlpsSapsConsensusInfo()
        rc = self._lib.flps_saps_consensus(self._live(), rounds, ptrs,
                                           ctypes.byref(info))
        if rc != 0:
            raise self._error(rc, "the consensus after round %d" % rounds)
        out = {"coordinator": info.coordinator, "averaged": info.averaged,
               "distance": info.distance}
        self._cons = out
        return (avg if info.coordinator == self.rank else None), out

    def is_alive(self, w):
        """Whether worker w still takes part (False once known dead)."""
        return bool(self._lib.flps_saps_is_alive(self._live(), w))

    def bandwidth(self):
        """(matrix, threshold): the agreed bandwidth matrix in bytes/s, a
        list of rows (a dead worker's row 0), and the threshold above which
        a link is fast."""
        n = self.workers
        bw = (ctypes.c_double * (n * n))()
        thr = ctypes.c_double()
        rc = self._lib.flps_saps_bandwidth(self._live(), bw, n * n,
                                           ctypes.byref(thr))
        if rc != 0:
            raise self._error(rc, "the bandwidth matrix")
        return [list(bw[i * n:(i + 1) * n]) for i in range(n)], thr.value

    def stats(self):
        """The counters of flps_saps_stats, as a dict."""
        st = _native.FlpsSapsStats()
        self._lib.flps_saps_get_stats(self._live(), ctypes.byref(st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    def _done_fields(self):
        """What this worker did, in the done event's saps fields."""
        st = self.stats()
        _, threshold = self.bandwidth()
        ev = {"mode": "saps", "rounds": self._rounds,
              "peer_selection": self.peer_selection,
              "bandwidth_threshold": threshold,
              "exchanges": st["exchanges"],
              "skipped_exchanges": st["skipped"],
              "idle_rounds": st["idle"],
              "slow_exchanges": st["slow_exchanges"],
              "exchange_bytes": st["exchange_bytes"],
              "probe_bytes": st["probe_bytes"],
              "matching_digest": "%016x" % st["matching_digest"],
              "dead_workers": [w for w in range(self.workers)
                               if not self.is_alive(w)],
              "bytes_sent": st["bytes_sent"],
              "bytes_received": st["bytes_received"],
              "dense_bytes": st["dense_bytes"]}
        if self._cons is not None and self._cons["coordinator"] == self.rank:
            ev["consensus_workers"] = self._cons["averaged"]
            ev["consensus_distance"] = self._cons["distance"]
            if self.workers <= 64:  # flsched's status shows it
                matrix, _ = self.bandwidth()
                ev["bandwidth"] = [max(0, int(round(x))) for row in matrix
                                   for x in row]
        return ev

    def close(self):
        """Close the connections (the tensors stay as they are)."""
        if self._handle is not None:
            _done.append(self._done_fields())
            self._lib.flps_saps_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
