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
exits normally after a report, every rank prints its "done" event with
its byte counts and rank 0's last test accuracy; ``flps.report(...,
done=True)`` prints it at once instead.
"""

import atexit
import json
import math
import os
import sys
import threading
import time

from . import client as _client
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


def _emit(event):
    out = _state["out"] or sys.stdout
    out.write(json.dumps(event, separators=(",", ":")) + "\n")
    out.flush()


def _done_event():
    sent, received, dense, resends = _bytes()
    ev = {"event": "done", "rank": _env_int("FLPS_RANK", 0),
          "iterations": _state["iteration"], "bytes_sent": sent,
          "bytes_received": received, "dense_bytes": dense,
          "resends": resends}
    if _env_int("FLPS_RANK", 0) == 0 and _state["test_accuracy"] is not None:
        ev["test_accuracy"] = _state["test_accuracy"]
        if _state["test_loss"] is not None:
            ev["test_loss"] = _state["test_loss"]
    warm = list(_client._closed_warmup_bytes) + [
        c.warmup_bytes_sent for c in list(_client._clients)
        if c.density_warmup > 0]
    if warm:
        # What flworker reports for a density warm-up (flrun sums it).
        ev["warmup_bytes_sent"] = sum(warm)
    ev["seconds"] = round(time.monotonic() - _state["t0"], 3)
    return ev


def report(iteration, loss=None, accuracy=None, test_accuracy=None,
           test_loss=None, done=False):
    """Report training progress as flworker does.

    iteration: iterations done so far (1 after the first).  loss and
    accuracy: the training loss and accuracy of the last iterations (a
    "progress" event, rank 0 only).  test_accuracy (and test_loss): an
    evaluation on the test set (an "eval" event, rank 0 only; the last one
    is the job's test accuracy in flrun's summary).  done: print this
    rank's "done" event now rather than at exit.  Raises
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
    rank0 = _env_int("FLPS_RANK", 0) == 0
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
            if rank0:
                ev = {"event": "eval", "iter": iteration,
                      "test_accuracy": _state["test_accuracy"]}
                if test_loss is not None:
                    ev["test_loss"] = _state["test_loss"]
                _emit(ev)
        if done and not _state["done"]:
            _state["done"] = True
            _emit(_done_event())


@atexit.register
def _at_exit():
    with _lock:
        if _state["reported"] and not _state["done"]:
            _state["done"] = True
            try:
                _emit(_done_event())
            except Exception:  # stdout closed: nothing left to tell
                pass
