"""flps.report: the event lines flworker prints, from a program run as a
command: job's worker, with byte counts from its (closed) clients."""

import json
import os
import subprocess
import sys

import pytest

import flps

from conftest import PYTHON_DIR

PROGRAM = r"""
import sys
import numpy as np
import flps
w = np.zeros(100, dtype=np.float32)
c = flps.connect("rep", 0, 1, [sys.argv[1]], {"w": w}, lr=0.5)
c.init()
for it in range(2):
    c.push("w", np.ones(100, dtype=np.float32), it)
    c.wait(it)
    flps.report(iteration=it + 1, loss=1.0 / (it + 1), accuracy=0.5)
sent = c.stats().bytes_sent
c.close()
del c  # the done event at exit still counts the closed client's bytes
flps.report(iteration=2, test_accuracy=0.75, test_loss=0.5)
print("not an event")
print("SENT", sent, file=sys.stderr)
"""


def run(args, env_extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c"] + args, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    events = [json.loads(line) for line in p.stdout.splitlines()
              if line.startswith("{")]
    return events, p


def test_rank_0_prints_progress_eval_and_done_with_the_clients_bytes(shards):
    s = shards("rep", 1)
    events, p = run([PROGRAM, s[0].endpoint],
                    {"FLPS_RANK": "0", "FLPS_ITERATIONS": "2"})
    sent = int(p.stderr.split("SENT ")[1].split()[0])
    assert [e["event"] for e in events] == ["progress", "progress", "eval",
                                            "done"]
    first = events[0]
    assert list(first) == ["event", "iter", "iterations", "loss",
                           "bytes_sent", "dense_bytes", "accuracy", "elapsed"]
    assert (first["iter"], first["iterations"], first["loss"],
            first["accuracy"]) == (1, 2, 1.0, 0.5)
    assert 0 < first["bytes_sent"] < sent
    assert events[1]["loss"] == 0.5
    assert events[2] == {"event": "eval", "iter": 2, "test_accuracy": 0.75,
                         "test_loss": 0.5}
    done = events[3]
    assert done["rank"] == 0 and done["iterations"] == 2
    assert done["bytes_sent"] == sent
    assert done["bytes_received"] > 0
    assert done["dense_bytes"] == sent  # dense: what it sent
    assert done["test_accuracy"] == 0.75 and done["test_loss"] == 0.5


def test_other_ranks_print_only_their_done_event():
    events, _ = run(["import flps; flps.report(iteration=3, loss=0.1, "
                     "test_accuracy=0.5)"], {"FLPS_RANK": "1"})
    assert events == [{"event": "done", "rank": 1, "iterations": 3,
                       "bytes_sent": 0, "bytes_received": 0,
                       "dense_bytes": 0, "resends": 0,
                       "seconds": events[0]["seconds"]}]


def test_done_true_prints_the_done_event_once():
    events, _ = run(["import flps; flps.report(iteration=1, done=True)"],
                    {"FLPS_RANK": "0"})
    assert [e["event"] for e in events] == ["done"]


def test_a_value_that_is_not_a_finite_number_is_refused():
    with pytest.raises(flps.InvalidArgumentError, match="loss must be finite"):
        flps.report(iteration=1, loss=float("nan"))
    with pytest.raises(flps.InvalidArgumentError, match="accuracy"):
        flps.report(iteration=1, accuracy="high")
    with pytest.raises(flps.InvalidArgumentError, match="iteration"):
        flps.report(iteration=-1)


def test_a_program_without_a_report_prints_nothing_at_exit():
    events, _ = run(["import flps"], {"FLPS_RANK": "0"})
    assert events == []


def test_an_eval_carries_elapsed_s_when_given():
    events, _ = run(["import flps; flps.report(iteration=4, test_accuracy=0.5, "
                     "test_loss=0.25, elapsed_s=1.23456, done=True)"],
                    {"FLPS_RANK": "0"})
    assert events[0] == {"event": "eval", "iter": 4, "test_accuracy": 0.5,
                         "test_loss": 0.25, "elapsed_s": 1.235}
