"""Fixtures of the flps Python tests: the build, and real flps shards.

The tests run against the libflps and flps of an flps build: FLPS_BUILD_DIR
(default: build/ at the repository's root).  `import flps` comes from
python/ of this checkout.
"""

import os
import select
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)

if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)
os.environ.setdefault("FLPS_BUILD_DIR", os.path.join(REPO, "build"))
BUILD_DIR = os.path.abspath(os.environ["FLPS_BUILD_DIR"])
FLPS_BIN = os.path.join(BUILD_DIR, "bin", "flps")


class Shard:
    """One running `flps` process."""

    def __init__(self, proc, endpoint, log_path):
        self.proc = proc
        self.endpoint = endpoint
        self.log_path = log_path

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_shard(job, shard, shards, log_path, extra=()):
    """Start build/bin/flps for shard `shard` of `shards` of `job` on a free
    loopback port and return it once it printed `listening on`."""
    if not os.access(FLPS_BIN, os.X_OK):
        pytest.fail("no flps binary at %s: build flps (cmake --build build) "
                    "or set FLPS_BUILD_DIR to the build directory" % FLPS_BIN)
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [FLPS_BIN, "--job", job, "--shard", str(shard), "--shards",
         str(shards), "--listen", "tcp://127.0.0.1:0", *extra],
        stdout=subprocess.PIPE, stderr=log)
    log.close()
    deadline = time.monotonic() + 20
    line = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if line.startswith(b"listening on "):
                proc.stdout.close()
                return Shard(proc, line[len(b"listening on "):].strip()
                             .decode(), log_path)
            if line == b"":
                break
    proc.kill()
    proc.wait()
    with open(log_path, errors="replace") as f:
        pytest.fail("flps shard %d of job %s did not start (last line %r); "
                    "its log:\n%s" % (shard, job, line, f.read()))


@pytest.fixture
def shards(tmp_path):
    """shards(job, n=1, extra=()) -> list of n running Shards of job; all
    are stopped at the end of the test."""
    started = []

    def make(job, n=1, extra=()):
        out = []
        for i in range(n):
            log = str(tmp_path / ("%s-s%d.log" % (job, i)))
            s = start_shard(job, i, n, log, extra)
            started.append(s)
            out.append(s)
        return out

    yield make
    for s in started:
        s.stop()
