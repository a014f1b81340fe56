#!/usr/bin/env python3
"""bench_python: what the Python binding costs per iteration.

Times the flps calls of one training iteration (push every tensor, last
layer first, then wait) from Python through the flps package (ctypes over
libflps.so) and from C (bench_client_loop, the same library) for the CNN's
layout and the same codec, each against a fresh flps shard on loopback, in
the same run and alternating (C first in even rounds, Python first in odd
ones), so both see the same machine.  Prints a line per codec and, as its
last line, one JSON object with the ratios python / C per codec, of the
fastest iteration (the bar, issue 8's <= 1.2) and of the median.

Usage: bench_python.py [--build DIR] [--codecs dense,gtopk:0.01]
                       [--iters N] [--warmup K] [--rounds R]
"""

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

# The layout bench_client_loop.c registers, first layer first.
LAYOUT = [
    ("conv1.weight", 5 * 5 * 1 * 32), ("conv1.bias", 32),
    ("conv2.weight", 5 * 5 * 32 * 64), ("conv2.bias", 64),
    ("fc1.weight", 3136 * 1024), ("fc1.bias", 1024),
    ("fc2.weight", 1024 * 10), ("fc2.bias", 10),
]
BAR = 1.2


def start_shard(flps_bin, job):
    proc = subprocess.Popen(
        [flps_bin, "--job", job, "--shard", "0", "--shards", "1", "--listen",
         "tcp://127.0.0.1:0"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else b""
    if not line.startswith(b"listening on "):
        proc.kill()
        proc.wait()
        sys.exit("bench_python: %s did not start (got %r)" % (flps_bin, line))
    proc.stdout.close()
    return proc, line[len(b"listening on "):].strip().decode()


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_c(build, endpoint, job, codec, iters, warmup):
    out = subprocess.run(
        [os.path.join(build, "bin", "bench_client_loop"), "--server",
         endpoint, "--job", job, "--compression", codec, "--iters",
         str(iters), "--warmup", str(warmup)],
        capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit("bench_python: bench_client_loop failed: %s" % out.stderr)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["median_s"], r["min_s"]


def run_python(endpoint, job, codec, iters, warmup):
    import flps

    rng = np.random.default_rng(7)
    replica = [(n, np.zeros(k, dtype=np.float32)) for n, k in LAYOUT]
    grads = [rng.standard_normal(k, dtype=np.float32) for _, k in LAYOUT]
    times = []
    with flps.connect(job, 0, 1, [endpoint], replica, lr=0.01,
                      compression=codec, iterations=warmup + iters,
                      deadline_ms=60000) as c:
        c.init()
        for it in range(warmup + iters):
            t0 = time.perf_counter()
            for t in range(len(LAYOUT) - 1, -1, -1):
                c.push(t, grads[t], it)
            c.wait(it)
            if it >= warmup:
                times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get(
        "FLPS_BUILD_DIR", os.path.join(REPO, "build")))
    ap.add_argument("--codecs", default="dense,gtopk:0.01")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ["FLPS_BUILD_DIR"] = build
    flps_bin = os.path.join(build, "bin", "flps")
    for path in (flps_bin, os.path.join(build, "bin", "bench_client_loop")):
        if not os.access(path, os.X_OK):
            sys.exit("bench_python: no %s; build flps (cmake --build %s) or "
                     "pass --build" % (path, build))
    print("bench_python: CNN layout (%d tensors, %d parameters), %d rounds "
          "of %d iterations per codec" % (len(LAYOUT), sum(k for _, k in
                                                         LAYOUT),
                                          a.rounds, a.iters))
    cases = {}
    for codec in a.codecs.split(","):
        runs = {"c": [], "py": []}  # (median, min) of each round
        for r in range(a.rounds):
            order = ("c", "py") if r % 2 == 0 else ("py", "c")
            for side in order:
                job = "bp-%s-%d" % (side, r)
                proc, ep = start_shard(flps_bin, job)
                try:
                    if side == "c":
                        runs[side].append(run_c(build, ep, job, codec,
                                                a.iters, a.warmup))
                    else:
                        runs[side].append(run_python(ep, job, codec, a.iters,
                                                     a.warmup))
                finally:
                    stop(proc)
        case = {}
        for side, key in (("c", "c"), ("py", "python")):
            case[key + "_median_s"] = statistics.median(m for m, _ in
                                                        runs[side])
            case[key + "_min_s"] = min(b for _, b in runs[side])
        case["ratio_min"] = case["python_min_s"] / case["c_min_s"]
        case["ratio_median"] = case["python_median_s"] / case["c_median_s"]
        cases[codec] = case
        print("  %-12s fastest iteration: C %8.3f ms  Python %8.3f ms  "
              "ratio %.3f;  median: C %8.3f ms  Python %8.3f ms  ratio %.3f"
              % (codec, case["c_min_s"] * 1e3, case["python_min_s"] * 1e3,
                 case["ratio_min"], case["c_median_s"] * 1e3,
                 case["python_median_s"] * 1e3, case["ratio_median"]))
    # The bar is judged on the fastest iterations: on a shared machine the
    # medians move with other people's load far more than by the binding's
    # cost, while the fastest iteration of many alternating runs is each
    # side's own cost.
    worst = max(v["ratio_min"] for v in cases.values())
    print(json.dumps({"bench": "python", "layout": "cnn",
                      "iters": a.iters, "rounds": a.rounds, "cases": cases,
                      "worst_ratio": worst, "bar": BAR, "ok": worst <= BAR}))


if __name__ == "__main__":
    main()
