"""flps.report: tell the launcher (flrun, flagent) how training goes.

A program run as a job's workers (``command:`` in the job file) prints the
same JSON event lines on stdout that the built-in flworker prints, so its
progress, loss and accuracy reach flrun's screen and summary and
``flsubmit watch``/``status`` the same way:

    flps.report(iteration=it, loss=loss.item(), accuracy=acc)  # progress
    flps.report(iteration=it, test_accuracy=0.87, test_loss=0.4)  # an eval

Progress and evaluations are printed by rank 0 only (as flworker does);
every rank's bytes come from the clients (flps.Client,
flps.torch.DistributedOptimizer) this process made.  When the program
exits after a report, or after making a client under a launcher (FLPS_JOB
set) without one, every rank prints its "done" event with its byte
counts, what its clients ran (compression, mode, the wrapped optimizer)
and rank 0's last test accuracy; ``flps.report(..., done=True)`` prints
it at once instead.  flps.report is optional: without it the done event
still tells the launcher the bytes and what ran.
"""

import atexit
import json
import math
import os
import sys
import threading
import time

from . import _native
from . import client as _client
from . import saps as _saps
from .errors import InvalidArgumentError

__all__ = ["report"]

_lock = threading.Lock()
_state = {
    "t0": time.monotonic(),
    "reported": False,
    "done": False,
    "iteration": 0,
    "test_accuracy": None,
    "test_loss": None,
    "out": None,  # the stream events go to; None = sys.stdout
    "test_miou": None,
    # Fields a library of the package adds to this rank's done event
    # (flps.fl: rounds, late_clients, ...), by name.
    "done_extra": {},
}


def _env_int(name, default):
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default


def _number(name, value):
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidArgumentError("%s must be a number (got %r)"
                                   % (name, value))
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError("%s must be a number (got %r)"
                                   % (name, value)) from None
    if not math.isfinite(value):
        raise InvalidArgumentError("%s must be finite (got %r)"
                                   % (name, value))
    return value


def _bytes():
    """bytes_sent, bytes_received, dense_bytes, resends over every client
    this process made, closed ones included."""
    sent = received = dense = resends = 0
    stats = list(_client._closed_stats)
    for c in list(_client._clients):
        try:
            stats.append(c.stats())
        except Exception:  # closed meanwhile: its counters are in the list
            pass
    for st in stats:
        sent += st.bytes_sent
        received += st.bytes_received
        dense += st.dense_bytes
        resends += st.resends
    return sent, received, dense, resends


def _energy():
    """What libflps metered over every client of this process (the one
    that meters at a time: flps_client_energy), as the done event's energy
    fields, written as flworker writes them (services/event.c:
    event_done_energy); {} when nothing."""
    seen = list(_client._closed_energy)
    for c in list(_client._clients):
        try:
            e = c.energy()
        except Exception:  # closed meanwhile: its energy is in the list
            e = None
        if e is not None:
            seen.append(e)
    out = {}
    metered = [e for e in seen if e["devices"] > 0 and e["iterations"] > 0]
    if metered:
        iters = sum(e["iterations"] for e in metered)
        joules = sum(e["joules"] for e in metered)
        out["joules_per_iteration"] = round(joules / iters, 6)
        gpu = [e for e in metered if e["gpus"] > 0]
        cpu = [e for e in metered if e["devices"] > e["gpus"]]
        if gpu:
            out["gpu_joules_per_iteration"] = round(
                sum(e["gpu_joules"] for e in gpu) /
                sum(e["iterations"] for e in gpu), 6)
        if cpu:
            out["cpu_joules_per_iteration"] = round(
                sum(e["cpu_joules"] for e in cpu) /
                sum(e["iterations"] for e in cpu), 6)
        out["energy_iterations"] = iters
        out["energy_method"] = _one(e["method"] for e in metered)
        if out["energy_method"] == "mixed":
            out["energy_method"] = "counter+power-integral"
        if gpu:
            out["energy_gpus"] = _one(e["gpu_list"] for e in gpu)
    # The clock set, once chosen (auto cut short by the end chose none).
    clocked = [e for e in seen if e["gpu_clock_chosen"] and
               (e["gpus"] > 0 or e["gpu_clock"] not in ("", "default"))]
    if clocked:
        out["gpu_clock_mhz"] = clocked[-1]["gpu_clock_mhz"]
    return out


def _emit(event):
    out = _state["out"] or sys.stdout
    out.write(json.dumps(event, separators=(",", ":")) + "\n")
    out.flush()


def _one(words):
    """The word every client ran, "mixed" where they differ; None for
    none."""
    words = {w for w in words if w}
    if not words:
        return None
    return words.pop() if len(words) == 1 else "mixed"


def _done_event():
    sent, received, dense, resends = _bytes()
    ran = list(_client._ran)
    iterations = _state["iteration"]
    if not _state["reported"] and ran:
        # No report: the iterations the clients' waits completed.
        iterations = max(r.iterations for r in ran)
    ev = {"event": "done", "rank": _env_int("FLPS_RANK", 0),
          "iterations": iterations, "bytes_sent": sent,
          "bytes_received": received, "dense_bytes": dense,
          "resends": resends}
    # What ran, which the launcher holds against the job file.
    for key in ("compression", "mode", "optimizer"):
        word = _one(getattr(r, key) for r in ran)
        if word is not None:
            ev[key] = word
    if _env_int("FLPS_RANK", 0) == 0 and _state["test_accuracy"] is not None:
        ev["test_accuracy"] = _state["test_accuracy"]
        if _state["test_loss"] is not None:
            ev["test_loss"] = _state["test_loss"]
    if _env_int("FLPS_RANK", 0) == 0 and _state["test_miou"] is not None:
        ev["test_miou"] = _state["test_miou"]
    ev.update(_state["done_extra"])
    warm = list(_client._closed_warmup_bytes) + [
        c.warmup_bytes_sent for c in list(_client._clients)
        if c.density_warmup > 0]
    if warm:
        # What flworker reports for a density warm-up (flrun sums it).
        ev["warmup_bytes_sent"] = sum(warm)
    # What libflps metered: joules per iteration, the GPU clock set.
    ev.update(_energy())
    for fields in list(_saps._done):
        # A decentralized worker (flps.saps): its bytes and what flworker's
        # saps done event says (one Saps a process is the case flrun
        # compares; a later one's fields win).
        for key in ("bytes_sent", "bytes_received", "dense_bytes"):
            ev[key] += fields[key]
        ev.update({k: v for k, v in fields.items()
                   if k not in ("bytes_sent", "bytes_received",
                                "dense_bytes")})
        if not _state["reported"]:
            ev["iterations"] = max(ev["iterations"], fields["rounds"])
    ev["seconds"] = round(time.monotonic() - _state["t0"], 3)
    return ev


def report(iteration, loss=None, accuracy=None, test_accuracy=None,
           test_loss=None, done=False, elapsed_s=None, test_miou=None):
    """Report training progress as flworker does.

    iteration: iterations done so far (1 after the first).  loss and
    accuracy: the training loss and accuracy of the last iterations (a
    "progress" event, rank 0 only).  test_accuracy (and test_loss): an
    evaluation on the test set (an "eval" event, rank 0 only; the last one
    is the job's test accuracy in flrun's summary).  elapsed_s: seconds
    since training began by the program's own clock, carried on the "eval"
    event as flworker's are (time to an accuracy; omitted when None).
    test_miou: a segmentation model's mean intersection over union on the
    test set, carried on the "eval" event beside test_accuracy (which an
    evaluation must give: the pixel accuracy there).
    done: print this rank's "done" event now rather than at exit.  Raises
    InvalidArgumentError for a value that is not a finite number.
    """
    if isinstance(iteration, bool) or not isinstance(iteration, int) or \
            iteration < 0:
        raise InvalidArgumentError("iteration must be a whole number >= 0 "
                                   "(got %r)" % (iteration,))
    loss = _number("loss", loss)
    accuracy = _number("accuracy", accuracy)
    test_accuracy = _number("test_accuracy", test_accuracy)
    test_loss = _number("test_loss", test_loss)
    elapsed_s = _number("elapsed_s", elapsed_s)
    test_miou = _number("test_miou", test_miou)
    if test_miou is not None and test_accuracy is None:
        raise InvalidArgumentError("test_miou comes with an evaluation: give "
                                   "test_accuracy (the pixel accuracy) too")
    rank0 = _env_int("FLPS_RANK", 0) == 0
    _native.report_metrics(loss, test_accuracy, test_loss)
    with _lock:
        _state["reported"] = True
        _state["iteration"] = iteration
        if rank0 and (loss is not None or accuracy is not None):
            sent, _, dense, _ = _bytes()
            ev = {"event": "progress", "iter": iteration,
                  "iterations": _env_int("FLPS_ITERATIONS", iteration),
                  "loss": round(loss if loss is not None else 0.0, 5),
                  "bytes_sent": sent, "dense_bytes": dense}
            if accuracy is not None:
                ev["accuracy"] = round(accuracy, 4)
            ev["elapsed"] = round(time.monotonic() - _state["t0"], 3)
            _emit(ev)
        if test_accuracy is not None:
            _state["test_accuracy"] = round(test_accuracy, 4)
            _state["test_loss"] = (round(test_loss, 4)
                                   if test_loss is not None else None)
            _state["test_miou"] = (round(test_miou, 4)
                                   if test_miou is not None else None)
            if rank0:
                ev = {"event": "eval", "iter": iteration,
                      "test_accuracy": _state["test_accuracy"]}
                if test_loss is not None:
                    ev["test_loss"] = _state["test_loss"]
                if test_miou is not None:
                    ev["test_miou"] = _state["test_miou"]
                if elapsed_s is not None:
                    ev["elapsed_s"] = round(elapsed_s, 3)
                _emit(ev)
        if done and not _state["done"]:
            _state["done"] = True
            _emit(_done_event())


@atexit.register
def _at_exit():
    with _lock:
        # A program that made a client under a launcher says what it did
        # even when it never called report().
        launched = bool(os.environ.get("FLPS_JOB")) and bool(
            _client._ran or _saps._done)
        if (_state["reported"] or launched) and not _state["done"]:
            _state["done"] = True
            try:
                _emit(_done_event())
            except Exception:  # stdout closed: nothing left to tell
                pass
