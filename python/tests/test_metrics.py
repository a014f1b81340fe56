"""libflps's worker metrics in a Python program: FLPS_METRICS (what flagent
sets for a command: job's workers) makes the first client serve the
flworker_* families and print "metrics on HOST:PORT"; the clients' pushes
and waits and flps.report's loss and accuracy feed them."""

import os
import re
import socket
import subprocess
import sys

import flps

from conftest import PYTHON_DIR

# Three iterations of a two-layer model, a report, a second client, and,
# given an address, a scrape of the program's own endpoint onto stderr.
PROGRAM = r"""
import sys
import urllib.request
import numpy as np
import flps

endpoint = sys.argv[1]
addr = sys.argv[2] if len(sys.argv) > 2 else None
layout = {"a": np.zeros(60, dtype=np.float32),
          "b": np.zeros(40, dtype=np.float32)}
ones = {k: np.ones(v.size, dtype=np.float32) for k, v in layout.items()}
with flps.connect("met", 0, 1, [endpoint], layout, lr=0.5) as c:
    c.init()
    for it in range(3):
        for name in ("b", "a"):  # last layer first, as backprop goes
            c.push(name, ones[name], it)
        c.wait(it)
    flps.report(iteration=3, loss=0.25, test_accuracy=0.75, test_loss=0.5)
    # A second client of the process: the same endpoint, no second line.
    flps.connect("met", 0, 1, [endpoint], layout, lr=0.5).close()
    sys.stdout.flush()
    if addr:
        url = "http://%s/metrics" % addr
        with urllib.request.urlopen(url, timeout=10) as r:
            print("CT", r.headers["Content-Type"], file=sys.stderr)
            sys.stderr.write(r.read().decode())
"""


def run_program(*args, metrics=None):
    env = {k: v for k, v in os.environ.items() if k != "FLPS_METRICS"}
    env["PYTHONPATH"] = PYTHON_DIR
    if metrics is not None:
        env["FLPS_METRICS"] = metrics
    p = subprocess.run([sys.executable, "-c", PROGRAM, *args], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p


def value(text, series):
    m = re.search(r"^%s (\S+)$" % re.escape(series), text, re.M)
    assert m, "no %s in the scrape:\n%s" % (series, text)
    return float(m.group(1))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_flps_metrics_serves_the_flworker_series_of_a_python_program(shards):
    s = shards("met", 1)
    # A fixed port, so the program knows where to scrape itself.
    addr = "127.0.0.1:%d" % free_port()
    p = run_program(s[0].endpoint, addr, metrics=addr)
    assert p.stdout.splitlines().count("metrics on %s" % addr) == 1, p.stdout
    text = p.stderr
    assert "CT text/plain; version=0.0.4; charset=utf-8" in text
    assert value(text, "flworker_iteration") == 3
    assert value(text, "flworker_iterations_total") == 3
    assert value(text, "flworker_push_seconds_count") == 6
    assert value(text, "flworker_wait_seconds_count") == 3
    assert value(text, 'flworker_layer_density{layer="a"}') == 1
    assert value(text, 'flworker_layer_density{layer="b"}') == 1
    assert value(text, "flworker_elements_sent_total") == 300
    assert value(text, "flworker_sent_bytes_total") > 0
    assert value(text, "flworker_dense_bytes_total") > 0
    assert value(text, "flworker_loss") == 0.25
    assert value(text, "flworker_test_accuracy") == 0.75
    assert value(text, "flworker_test_loss") == 0.5
    assert value(text, 'flworker_layer_residual_norm{layer="a"}') == 0
    assert value(text, 'flworker_build_info{version="%s"}'
                 % flps.version()) == 1
    assert value(text, "process_open_fds") > 2


def test_without_flps_metrics_nothing_is_served_or_printed(shards):
    s = shards("met", 1)
    p = run_program(s[0].endpoint)
    assert "metrics on" not in p.stdout
