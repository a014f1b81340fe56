"""Tests of bench/cluster_report: the tables and the issue's bars read
from a bench/cluster results file (fabricated here, format 1 of
bench/cluster/README.md), its plots, and its refusal of bad input."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "bench", "cluster_report")


def run(*args):
    return subprocess.run([sys.executable, PROG, *args], capture_output=True,
                          text=True, timeout=120)


def result_file(tmp_path, ttt, name="r.json"):
    """Runs of the MLP on 100mbit and 10gbit, time to target per codec from
    ttt[(rate, codec)] (None: not reached)."""
    runs = []
    for i, ((rate, codec), t) in enumerate(sorted(ttt.items())):
        evals = [{"iter": 25, "elapsed_s": 1.0, "test_accuracy": 0.7}]
        if t is not None:
            evals.append({"iter": 50, "elapsed_s": t, "test_accuracy": 0.86})
        runs.append({"run_id": "t#%d" % i, "model": "mlp", "codec": codec,
                     "rate": rate, "rate_bps": 1e8, "workers": 4, "shards": 1,
                     "s_per_iter_median": 0.05, "bytes_per_iter_per_worker":
                     1.9e6 if codec == "dense" else 4.1e4,
                     "scaling_efficiency": None, "target_accuracy": 0.85,
                     "time_to_target_s": t, "final_test_accuracy": 0.86,
                     "evals": evals})
    doc = {"format": 1, "machine": {"nproc": 2, "cpu_model": "test", "hostname": "h"},
           "commit": "1234567890abcdef", "dirty": False, "date": "2026-12-01T14:00:00Z",
           "note": "fabricated by the test",
           "calibration": {"rate": "100mbit", "rate_bps": 1e8, "latency_s": 4e-5,
                           "bandwidth_bps": 9.5e7, "delay_requested_s": 5e-4,
                           "delay_applied": False},
           "runs": runs}
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


GOOD = {("100mbit", "dense"): 100.0, ("100mbit", "gtopk:0.01"): 10.0,
        ("100mbit", "auto"): 10.5, ("10gbit", "dense"): 8.0, ("10gbit", "auto"): 8.4}


def test_the_tables_hold_every_run_and_the_speedup_over_dense(tmp_path):
    res = run(str(result_file(tmp_path, GOOD)))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "| 100mbit | gtopk:0.01 | 4 | 1 | 0.0500 s | 41 kB |" in out
    assert "| 10.00× |" in out  # dense 100 s / gtopk 10 s
    assert "commit `123456789`" in out and "fabricated by the test" in out
    assert "| 100mbit | 0.0005 s | False |" in out


def test_check_passes_when_the_bars_hold(tmp_path):
    res = run(str(result_file(tmp_path, GOOD)), "--check")
    assert res.returncode == 0, res.stdout
    assert "**holds**: MLP, 100 Mbit/s, 4 workers: gtopk:0.01 reaches 85% 10.00×" in res.stdout
    assert "auto / gtopk:0.01 = 1.05" in res.stdout
    assert "auto / dense = 1.05" in res.stdout
    assert "not decided (runs missing): CNN" in res.stdout


@pytest.mark.parametrize("change,what", [
    ({("100mbit", "gtopk:0.01"): 25.0, ("100mbit", "auto"): 25.0}, "4.00× sooner"),
    ({("10gbit", "auto"): 9.0}, "auto / dense = 1.12"),
    ({("100mbit", "auto"): None}, "auto did not reach the target"),
])
def test_check_fails_when_a_bar_is_missed(tmp_path, change, what):
    res = run(str(result_file(tmp_path, {**GOOD, **change})),
              "--check")
    assert res.returncode == 1, res.stdout
    assert "**missed**" in res.stdout and what in res.stdout


def test_a_later_file_replaces_the_same_run(tmp_path):
    a = result_file(tmp_path, GOOD, "a.json")
    b = result_file(tmp_path, {**GOOD, ("100mbit", "gtopk:0.01"): 50.0}, "b.json")
    res = run(str(a), str(b), "--check")
    assert res.returncode == 1 and "2.00× sooner" in res.stdout


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot-nox not installed")
def test_plots_are_small_pngs(tmp_path):
    out = tmp_path / "img"
    res = run(str(result_file(tmp_path, GOOD)), "--plot", str(out), "--markdown",
              str(tmp_path / "t.md"))
    assert res.returncode == 0, res.stderr
    names = sorted(os.listdir(out))
    assert names == ["cluster-accuracy-mlp-100mbit.png", "cluster-accuracy-mlp-10gbit.png",
                     "cluster-bytes-mlp.png"]
    for n in names:
        data = (out / n).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 100 * 1024


def test_bad_input_is_refused_with_what_to_do(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[]")
    res = run(str(p))
    assert res.returncode == 2 and "bench/cluster/README.md" in res.stderr
    p.write_text(json.dumps({"format": 1, "runs": [{"model": "mlp"}]}))
    res = run(str(p))
    assert res.returncode == 2 and "lacks model, codec, rate" in res.stderr
    res = run(str(tmp_path / "nope.json"))
    assert res.returncode == 2 and "cannot read" in res.stderr
