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


def test_pool_makes_the_same_run_in_several_files_one_entry_of_medians(tmp_path):
    a = result_file(tmp_path, GOOD, "a.json")
    b = result_file(tmp_path, {**GOOD, ("100mbit", "gtopk:0.01"): 50.0}, "b.json")
    res = run(str(a), str(b), "--check", "--pool")
    # gtopk's time is the median of 10 and 50 s; dense's of 100 and 100.
    assert res.returncode == 1 and "3.33× sooner" in res.stdout, res.stdout
    gtopk = next(l for l in res.stdout.splitlines() if "| 100mbit | gtopk:0.01 |" in l)
    assert "| 2: t#2, t#2 |" in gtopk
    c = result_file(tmp_path, {**GOOD, ("100mbit", "gtopk:0.01"): 15.0}, "c.json")
    res = run(str(a), str(b), str(c), "--check", "--pool")
    assert res.returncode == 0 and "6.67× sooner" in res.stdout, res.stdout


def test_pool_refuses_runs_of_other_settings(tmp_path):
    a = result_file(tmp_path, GOOD, "a.json")
    b = result_file(tmp_path, GOOD, "b.json")
    for f in (a, b):
        doc = json.loads(f.read_text())
        for r in doc["runs"]:
            r["iterations"] = 3000 if f == b and r["codec"] == "dense" else 1500
        f.write_text(json.dumps(doc))
    res = run(str(a), str(b), "--pool")
    assert res.returncode == 2 and res.stdout == ""
    assert "--pool: mlp dense at 100mbit has iterations 1500 in a.json and 3000 in " \
           "b.json; pool only invocations of the same settings" in res.stderr


def test_pool_gives_the_bars_against_the_peers_the_medians_of_invocations(tmp_path):
    slow = [("mlp", "dense", "100mbit", 4, 0.16, 2.95e6, 90.0)] + \
        [e for e in PEERS_GOOD if e[:2] != ("mlp", "dense")]
    fast = [("mlp", "dense", "100mbit", 4, 0.11, 2.95e6, 90.0),
            ("mlp", "dense", "100mbit", 4, 0.12, 2.95e6, 90.0)] + \
        [e for e in PEERS_GOOD if e[:2] != ("mlp", "dense")]
    one = peer_file(tmp_path, slow, "one.json")
    res = run(str(one), "--check")
    assert res.returncode == 1 and "flps / DDP = 1.23" in res.stdout, res.stdout
    # Pooled with a second invocation: dense's median of 0.16, 0.11, 0.12
    # is 0.12 against DDP's 0.13 (0.13 in both).
    res = run(str(one), str(peer_file(tmp_path, fast, "two.json")), "--check", "--pool")
    assert res.returncode == 0, res.stdout
    assert "takes 0.1200 s per iteration, DDP 0.1300 s (flps / DDP = 0.92" in res.stdout


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


# ---- The DDP peers (issue 23): rows, medians of repeated runs, bars ----

def peer_file(tmp_path, entries, name="p.json"):
    """entries: (model, codec, rate, shards, s/iter, wire bytes, time to
    target or None); several entries of one key are repeated runs."""
    runs = []
    for i, (model, codec, rate, S, spi, wire, t) in enumerate(entries):
        evals = [{"iter": 25, "elapsed_s": 0.5, "test_accuracy": 0.7}]
        if t is not None:
            evals.append({"iter": 50, "elapsed_s": t, "test_accuracy": 0.86})
        runs.append({"run_id": "p#%d" % (i + 1), "model": model, "codec": codec,
                     "rate": rate, "workers": 4, "shards": S,
                     "s_per_iter_median": spi,
                     "bytes_per_iter_per_worker": None if codec.startswith("ddp")
                     else 1.9e6, "wire_bytes_per_iter_per_worker": wire,
                     "target_accuracy": 0.85, "time_to_target_s": t,
                     "final_test_accuracy": 0.87, "evals": evals})
    doc = {"format": 1, "machine": {"nproc": 2}, "commit": "abc", "date": "d",
           "runs": runs}
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


PEERS_GOOD = [
    ("mlp", "dense", "100mbit", 4, 0.12, 2.95e6, 90.0),
    ("mlp", "gtopk:0.01", "100mbit", 1, 0.015, 5e4, 10.0),
    ("mlp", "auto", "100mbit", 1, 0.015, 5e4, 11.0),
    ("mlp", "ddp", "100mbit", 0, 0.13, 2.99e6, 100.0),
    ("mlp", "ddp-powersgd:2", "100mbit", 0, 0.032, 3.6e5, 38.0),
    ("mlp", "ddp-fp16", "100mbit", 0, 0.075, 1.5e6, 55.0),
]


def test_peer_rows_show_wire_bytes_and_the_speedup_over_ddp(tmp_path):
    res = run(str(peer_file(tmp_path, PEERS_GOOD)))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "| 100mbit | ddp | 4 | 0 | 0.1300 s | - | 2.99 MB |" in out
    assert "| 100mbit | ddp-powersgd:2 | 4 | 0 | 0.0320 s | - | 360 kB |" in out
    # gtopk: 100 s of DDP over its 10 s; DDP itself 1.00x.
    gtopk = next(l for l in out.splitlines() if "| gtopk:0.01 |" in l)
    assert "| 10.00× | 0.8700 | 1: p#2 |" in gtopk
    ddp = next(l for l in out.splitlines() if "| ddp |" in l)
    assert "| - | 1.00× | 0.8700 |" in ddp
    # Peers sort after flps's codecs.
    assert out.index("| ddp |") > out.index("| auto |")


def test_the_compute_peer_gives_each_system_its_time_beyond_compute(tmp_path):
    entries = PEERS_GOOD + [("mlp", "compute", "100mbit", 0, 0.01, 1e3, 5.0)]
    res = run(str(peer_file(tmp_path, entries)), "--check")
    assert res.returncode == 0, res.stdout
    out = res.stdout
    # One worker's training alone: no time to target, no accuracy, no
    # speedups; a row of its own after the peers.
    row = next(l for l in out.splitlines() if l.startswith("| 100mbit | compute |"))
    assert "| 0.0100 s |" in row
    assert "| - (no communication) | - | - | - | 1: p#7 |" in row
    assert out.index("| compute |") > out.index("| ddp |")
    assert "Beyond compute alone (`compute`: the 4 processes" in out
    assert "| 100mbit | dense | 4 | 4 | 0.1200 s | +0.1100 s | 12.00× |" in out
    assert "| 100mbit | ddp | 4 | 0 | 0.1300 s | +0.1200 s | 13.00× |" in out
    assert "| 100mbit | compute | 4 | 0 | 0.0100 s | - | 1.00× |" in out
    # The bars read the same runs as without it.
    bars = run(str(peer_file(tmp_path, PEERS_GOOD, "b.json")), "--check").stdout
    assert out[out.index("- **"):] == bars[bars.index("- **"):]


def test_without_a_compute_peer_there_is_no_table_beyond_compute(tmp_path):
    res = run(str(peer_file(tmp_path, PEERS_GOOD)))
    assert res.returncode == 0, res.stderr
    assert "Beyond compute" not in res.stdout


def test_repeated_runs_are_one_row_of_medians(tmp_path):
    entries = PEERS_GOOD + [
        ("mlp", "ddp", "100mbit", 0, 0.15, 3.01e6, 120.0),
        ("mlp", "ddp", "100mbit", 0, 0.14, 3.00e6, None),
    ]
    res = run(str(peer_file(tmp_path, entries)))
    assert res.returncode == 0, res.stderr
    ddp = [l for l in res.stdout.splitlines() if "| ddp |" in l]
    assert len(ddp) == 1
    # s/iter median of 0.13, 0.15, 0.14; time: 100, 120, never -> 120.
    assert "| 0.1400 s | - | 3 MB |" in ddp[0]
    assert "| 120.0 s (85%) |" in ddp[0]
    assert "| 3: p#4, p#7, p#8 |" in ddp[0]


def test_check_holds_the_bars_against_the_peers(tmp_path):
    res = run(str(peer_file(tmp_path, PEERS_GOOD)), "--check")
    assert res.returncode == 0, res.stdout
    out = res.stdout
    assert ("**holds**: MLP, 100mbit, 4 workers: dense flps with 4 shards takes "
            "0.1200 s per iteration, DDP 0.1300 s (flps / DDP = 0.92; bar ≤ 1.00)") in out
    assert "DDP 2.99 MB (-1.3%; bar ±5%)" in out
    assert "**holds**: MLP, 100mbit, 4 workers: auto (S=1) reaches the target in 11.0 s" in out
    assert "gtopk:0.01 (S=1) reaches the target in 10.0 s, DDP in 100.0 s (10.00× sooner; bar 3×)" in out
    assert "DDP PowerSGD rank 2 in 38.0 s" in out
    assert "not decided (runs missing): PyTorch CNN, 1gbit" in out


@pytest.mark.parametrize("change,what", [
    (("mlp", "dense", "100mbit", 4, 0.2, 2.95e6, 90.0), "flps / DDP = 1.54"),
    (("mlp", "dense", "100mbit", 4, 0.12, 2.0e6, 90.0), "(-33.1%; bar ±5%)"),
    (("mlp", "auto", "100mbit", 1, 0.015, 5e4, 150.0), "auto (S=1) reaches the target in 150.0 s"),
    (("mlp", "gtopk:0.01", "100mbit", 1, 0.015, 5e4, 40.0), "2.50× sooner; bar 3×"),
])
def test_check_fails_when_a_bar_against_the_peers_is_missed(tmp_path, change, what):
    entries = [change if e[:4] == change[:4] else e for e in PEERS_GOOD]
    res = run(str(peer_file(tmp_path, entries)), "--check")
    assert res.returncode == 1, res.stdout
    line = next(l for l in res.stdout.splitlines() if what in l)
    assert line.startswith("- **missed**")


def test_bars_against_the_peers_need_one_invocation(tmp_path):
    flps = peer_file(tmp_path, [e for e in PEERS_GOOD if not e[1].startswith("ddp")],
                     "flps.json")
    ddp = peer_file(tmp_path, [e for e in PEERS_GOOD if e[1].startswith("ddp")],
                    "ddp.json")
    res = run(str(flps), str(ddp), "--check")
    assert res.returncode == 0, res.stdout
    assert "not decided (runs missing): MLP, 100mbit, 4 workers: dense flps with 4 " \
           "shards (one beside each worker) per iteration against DDP in the same " \
           "invocation" in res.stdout


def test_a_codec_run_both_ways_of_overlap_is_two_rows_each_checked(tmp_path):
    p = peer_file(tmp_path, PEERS_GOOD + [
        ("mlp", "dense", "100mbit", 4, 0.14, 2.95e6, 95.0)])
    doc = json.loads(p.read_text())
    doc["runs"][0]["overlap"] = "true"   # 0.12 s
    doc["runs"][-1]["overlap"] = "false"  # 0.14 s, slower than DDP's 0.13
    p.write_text(json.dumps(doc))
    res = run(str(p), "--check")
    assert res.returncode == 1, res.stdout
    rows = [l for l in res.stdout.splitlines() if l.startswith("| 100mbit | dense")]
    assert len(rows) == 2
    assert any("| dense (overlap true) |" in l and "| 0.1200 s |" in l for l in rows)
    assert any("| dense (overlap false) |" in l and "| 0.1400 s |" in l for l in rows)
    assert "**holds**: MLP, 100mbit, 4 workers: dense flps with 4 shards, overlap " \
           "true takes 0.1200 s per iteration" in res.stdout
    assert "**missed**: MLP, 100mbit, 4 workers: dense flps with 4 shards, overlap " \
           "false takes 0.1400 s per iteration, DDP 0.1300 s (flps / DDP = 1.08" \
           in res.stdout


def torch_cnn_file(tmp_path, curves):
    """The PyTorch CNN at 1gbit with bench/cluster's own target (88%):
    curves[codec] is its evaluations as (elapsed_s, test_accuracy)."""
    runs = []
    for i, (codec, curve) in enumerate(curves.items()):
        peer = codec.startswith("ddp")
        t88 = next((t for t, a in curve if a >= 0.88), None)
        runs.append({"run_id": "c#%d" % (i + 1), "model": "torch-cnn",
                     "codec": codec, "rate": "1gbit", "workers": 4,
                     "shards": 0 if peer else 4, "s_per_iter_median": 0.2,
                     "wire_bytes_per_iter_per_worker": 4e7 if peer else 6e5,
                     "target_accuracy": 0.88, "time_to_target_s": t88,
                     "final_test_accuracy": curve[-1][1],
                     "evals": [{"iter": 100 * (j + 1), "elapsed_s": t,
                                "test_accuracy": a}
                               for j, (t, a) in enumerate(curve)]})
    p = tmp_path / "cnn.json"
    p.write_text(json.dumps({"format": 1, "machine": {"nproc": 2}, "commit": "abc",
                             "date": "d", "runs": runs}))
    return p


def test_the_cnn_is_checked_at_its_own_target_and_at_the_issues_85(tmp_path):
    p = torch_cnn_file(tmp_path, {
        "gtopk:0.01": [(20.0, 0.80), (40.0, 0.851), (60.0, 0.87), (80.0, 0.881)],
        "ddp": [(50.0, 0.84), (100.0, 0.86), (150.0, 0.885)],
        "ddp-powersgd:2": [(30.0, 0.83), (60.0, 0.86), (70.0, 0.882)],
    })
    res = run(str(p), "--check")
    assert res.returncode == 1, res.stdout
    out = res.stdout
    # 88%: 80 s against DDP's 150 (1.88×) and PowerSGD's 70.
    assert "**missed**: PyTorch CNN, 1gbit, 4 workers: gtopk:0.01 (S=4) reaches the " \
           "target in 80.0 s, DDP in 150.0 s (1.88× sooner; bar 3×)" in out
    assert "**missed**: PyTorch CNN, 1gbit, 4 workers: gtopk:0.01 reaches the target " \
           "in 80.0 s, DDP PowerSGD rank 2 in 70.0 s" in out
    # 85%, read from the evaluations: 40 s against 100 s and 60 s.
    assert "**missed**: PyTorch CNN, 1gbit, 4 workers: gtopk:0.01 (S=4) reaches 85% " \
           "(the issue's number) in 40.0 s, DDP in 100.0 s (2.50× sooner; bar 3×)" in out
    assert "**holds**: PyTorch CNN, 1gbit, 4 workers: gtopk:0.01 reaches 85% (the " \
           "issue's number) in 40.0 s, DDP PowerSGD rank 2 in 60.0 s" in out


def test_the_mlp_is_checked_at_its_target_only(tmp_path):
    res = run(str(peer_file(tmp_path, PEERS_GOOD)), "--check")
    assert "the issue's number" not in res.stdout


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot-nox not installed")
def test_plots_with_the_peers_are_small_pngs(tmp_path):
    out = tmp_path / "img"
    res = run(str(peer_file(tmp_path, PEERS_GOOD)), "--plot", str(out),
              "--markdown", str(tmp_path / "t.md"))
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(out)) == ["cluster-accuracy-mlp-100mbit.png",
                                       "cluster-bytes-mlp.png"]
    for n in os.listdir(out):
        data = (out / n).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 100 * 1024


# ---- bench/cluster/record.py: a flps job and a DDP peer alike ----

RECORD = os.path.join(ROOT, "bench", "cluster", "record.py")


def fake_run(session, n, codec, shards, system, done_extra, summary_name, summary):
    d = session / "runs" / str(n)
    d.mkdir(parents=True)
    # Hosts 1 and 2 are the workers'; host 0 (the shard's) is not counted.
    meta = {"n": n, "date": "2026-12-02T00:00:00Z", "rate": "100mbit",
            "rate_bps": 100000000, "delay_s": 0.0005, "delay_applied": False,
            "model": "mlp", "codec": codec, "workers": 2, "shards": shards,
            "hosts": 3, "iterations": 10, "eval_every": 5, "target_accuracy": 0.5,
            "wire_bytes": 3000, "port_bytes": {"0": [1000, 1000], "1": [100, 300],
                                               "2": [200, 400]},
            "worker_hosts": [1, 2], "rc": 0, "overlap": None, "system": system}
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "job.yaml").write_text("batch_size: 32\n")
    (d / summary_name).write_text(json.dumps(summary) + "\n")
    for rank in range(2):
        ev = []
        if rank == 0:
            ev = [{"event": "progress", "iter": 5, "elapsed": 1.0},
                  {"event": "eval", "iter": 5, "test_accuracy": 0.6, "elapsed_s": 1.1},
                  {"event": "progress", "iter": 10, "elapsed": 2.0},
                  {"event": "eval", "iter": 10, "test_accuracy": 0.7, "elapsed_s": 2.2}]
        ev.append(dict({"event": "done", "rank": rank, "seconds": 2.5}, **done_extra))
        (d / ("events-%d.jsonl" % rank)).write_text(
            "".join(json.dumps(e) + "\n" for e in ev))


def test_record_writes_wire_bytes_per_worker_for_flps_and_the_peer(tmp_path):
    session = tmp_path / "s"
    session.mkdir()
    fake_run(session, 1, "dense", 1, "flps",
             {"bytes_sent": 500, "bytes_received": 500}, "flrun.out",
             {"wall_seconds": 3.0, "test_accuracy": 0.7})
    fake_run(session, 2, "ddp", 0, "ddp",
             {"ddp_hook": "allreduce", "test_accuracy": 0.71}, "peer.out",
             {"wall_seconds": 4.0})
    res = subprocess.run([sys.executable, RECORD, "--session", str(session),
                          "--out", str(tmp_path / "out"), "--commit", "abc",
                          "--label", "t"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    path = next(l for l in res.stdout.splitlines() if l.endswith("-t.json"))
    flps, ddp = json.load(open(path))["runs"]
    # Workers' hosts 1 and 2: (100 + 300 + 200 + 400) / 2 workers / 10 its.
    assert flps["wire_bytes_per_iter_per_worker"] == 50.0
    assert ddp["wire_bytes_per_iter_per_worker"] == 50.0
    assert flps["bytes_per_iter_per_worker"] == 100.0  # 2 ranks x 1000 / 2 / 10
    assert ddp["bytes_per_iter_per_worker"] is None  # DDP counts no bytes
    assert (flps["system"], ddp["system"]) == ("flps", "ddp")
    assert ddp["final_test_accuracy"] == 0.71 and ddp["wall_s"] == 4.0
    assert ddp["ddp"] == {"ddp_hook": "allreduce"}
    assert ddp["time_to_target_s"] == 1.1 and ddp["s_per_iter_median"] == 0.2
    csv_path = path[:-len(".json")] + ".csv"
    header = open(csv_path).readline().strip().split(",")
    assert header[-1] == "wire_bytes_per_iter_per_worker"


def test_record_keeps_the_compute_peer_apart_with_no_bytes_of_its_own(tmp_path):
    session = tmp_path / "s"
    session.mkdir()
    fake_run(session, 1, "compute", 0, "compute",
             {"system": "local", "test_accuracy": 0.7}, "peer.out",
             {"wall_seconds": 3.0})
    _, (row,) = record(session, tmp_path)
    assert row["system"] == "compute" and row["codec"] == "compute"
    assert row["bytes_per_iter_per_worker"] is None
    assert row["s_per_iter_median"] == 0.2
    assert "ddp" not in row


def test_record_gives_joules_to_the_target_where_energy_was_measured(tmp_path):
    session = tmp_path / "s"
    session.mkdir()
    fake_run(session, 1, "dense", 1, "flps",
             {"bytes_sent": 500, "bytes_received": 500}, "flrun.out",
             {"wall_seconds": 3.0, "test_accuracy": 0.7,
              "joules_per_iteration": 2.5})
    fake_run(session, 2, "gtopk:0.01", 1, "flps",
             {"bytes_sent": 50, "bytes_received": 50}, "flrun.out",
             {"wall_seconds": 3.0, "test_accuracy": 0.7})
    res, runs = record(session, tmp_path)
    metered, dark = runs
    # The target (0.5) is first reached at iteration 5: 5 x 2.5 J.
    assert metered["joules_per_iteration"] == 2.5
    assert metered["joules_to_target"] == 12.5
    assert "and 12.5 J" in res.stderr
    assert dark["joules_per_iteration"] is None
    assert dark["joules_to_target"] is None


def record(session, tmp_path):
    """record.py over session: its result and the runs of its JSON."""
    res = subprocess.run([sys.executable, RECORD, "--session", str(session),
                          "--out", str(tmp_path / "out"), "--commit", "abc",
                          "--label", "t"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    path = next(l for l in res.stdout.splitlines() if l.endswith("-t.json"))
    return res, json.load(open(path))["runs"]
