"""Tests of bench/scale_model: its closed forms against hand-computed
values, the properties a scaling model must have, and --validate's verdicts
on fabricated measured points (a bench/cluster results file)."""

import importlib.machinery
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "bench", "scale_model")


def load_module():
    loader = importlib.machinery.SourceFileLoader("scale_model", PROG)
    spec = importlib.util.spec_from_loader("scale_model", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


sm = load_module()


def run(*args):
    return subprocess.run([sys.executable, PROG, *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def cal():
    return sm.load_calibration(sm.DEFAULT_CALIBRATION)


@pytest.fixture
def ideal(cal):
    """Only the wire: no CPU anywhere, no headers, the full link rate."""
    return dict(cal, alpha_s=1e-4, link_efficiency=1.0, topk_s_per_element=0.0,
                ef_s_per_element=0.0, dense_pass_s_per_element=0.0,
                dense_sum_s_per_element=0.0,
                apply_pairs_per_s=1e30, aggregation_pairs_per_s=1e30,
                msg_overhead_s=0.0, header_bytes=0, part_size=65536)


def test_ring_allreduce_matches_the_hand_computed_value(ideal):
    # P = 4, d = 1e6 floats (4 MB), 1 Gbit/s = 8 ns a byte, alpha 0.1 ms:
    # 2 * 3 * 0.1 ms + 2 * 3/4 * 4e6 * 8e-9 s = 0.6 ms + 48 ms.
    t = sm.ring_dense_time(ideal, [("w", 1000000)], 4, 1.0)
    assert t == pytest.approx(0.0486, rel=1e-9)


def test_topk_allgather_and_the_gtopk_tree_match_hand_computed_values(ideal):
    one = [("w", 1000000)]
    # k = 10,000 pairs of 8 bytes = 80 KB = 0.64 ms at 1 Gbit/s.
    assert sm.topk_allgather_time(ideal, one, 0.01, 4, 1.0) == pytest.approx(
        2 * 1e-4 + 3 * 0.64e-3, rel=1e-9)
    # P = 8: 3 rounds up the tree and 3 down, each alpha + 0.64 ms.
    assert sm.gtopk_tree_time(ideal, one, 0.01, 8, 1.0) == pytest.approx(
        6 * (1e-4 + 0.64e-3), rel=1e-9)


def test_flps_dense_on_one_shard_carries_p_times_the_bytes(ideal):
    # One part of 65536 floats (256 KiB), P = 3, one shard: the shard's
    # link takes 3 pushes in and 3 updates out.
    t = sm.flps_time(ideal, "t-one", [("w", 65536)], "dense", 1.0, 3, 1, 1.0)
    assert t == pytest.approx(2e-4 + 2 * 3 * 262144 * 8e-9, rel=1e-9)
    # Three shards cannot split one part: the same.
    t3 = sm.flps_time(ideal, "t-one", [("w", 65536)], "dense", 1.0, 3, 3, 1.0)
    assert t3 == pytest.approx(t, rel=1e-9)


def test_flps_gtopk_replies_at_most_k_pairs_while_topk_replies_the_union(ideal):
    layers = [("w", 65536)]
    k = sm.kcount(0.01, 65536)  # 655
    d_topk = sm.flps_time(ideal, "t-one", layers, "topk", 0.01, 8, 1, 1.0,
                          detail=True)
    d_gtopk = sm.flps_time(ideal, "t-one", layers, "gtopk", 0.01, 8, 1, 1.0,
                           detail=True)
    union = 65536 * (1 - (1 - k / 65536) ** 8)
    assert d_topk["bytes_per_worker"] == pytest.approx(8 * k + 8 * union)
    # gtopk: k pairs back, plus 4 bytes per rejected index of this worker.
    rej = k * (1 - k / union)
    assert d_gtopk["bytes_per_worker"] == pytest.approx(8 * k + 8 * k + 4 * rej)


def test_the_layer_tables_are_the_real_models():
    r50 = sm.load_layout("resnet50")
    bert = sm.load_layout("bert_base")
    assert (len(r50), sum(n for _, n in r50)) == (161, 25557032)
    assert (len(bert), sum(n for _, n in bert)) == (199, 109482240)
    assert dict(r50)["fc.weight"] == 2048 * 1000
    assert dict(bert)["embeddings.word_embeddings.weight"] == 30522 * 768
    assert sum(n for _, n in sm.load_layout("mlp")) == 235146
    assert sum(n for _, n in sm.load_layout("cnn")) == 3274634


def test_more_workers_never_shrink_the_ring_bandwidth_term(ideal):
    r50 = sm.load_layout("resnet50")
    wire = dict(ideal, alpha_s=0.0)
    ts = [sm.ring_dense_time(wire, r50, P, 10.0) for P in (2, 3, 4, 8, 100, 1024)]
    assert ts == sorted(ts)
    # And it approaches 2 * 4d bytes: 2 * 102 MB at 10 Gbit/s = 0.164 s.
    assert ts[-1] < 2 * 4 * 25557032 * 0.8e-9


@pytest.mark.parametrize("codec,dens", [("dense", 1.0), ("topk", 0.01),
                                        ("gtopk", 0.001)])
def test_flps_gets_no_faster_with_more_workers_and_no_slower_with_more_shards(
        cal, codec, dens):
    r50 = sm.load_layout("resnet50")
    by_p = [sm.flps_time(cal, "resnet50", r50, codec, dens, P, 4, 10.0)
            for P in sm.WORKERS]
    assert by_p == sorted(by_p)
    by_s = [sm.flps_time(cal, "resnet50", r50, codec, dens, 64, S, 10.0)
            for S in (1, 2, 4, 8, 16, 32)]
    assert all(b <= a * 1.001 for a, b in zip(by_s, by_s[1:]))


def test_shards_needed_is_the_smallest_s_whose_links_keep_up(cal):
    r50 = sm.load_layout("resnet50")
    for P in (4, 16, 64):
        S = sm.shards_needed(cal, "resnet50", r50, "dense", 1.0, P, 10.0)
        at = sm.flps_time(cal, "resnet50", r50, "dense", 1.0, P, S, 10.0, detail=True)
        below = sm.flps_time(cal, "resnet50", r50, "dense", 1.0, P, S - 1, 10.0,
                             detail=True)
        assert at["shard_link_over_worker"] <= sm.BOTTLENECK_SLACK
        assert below["shard_link_over_worker"] > sm.BOTTLENECK_SLACK
        # Every shard's link carries P times its share: about P shards.
        assert P * 0.9 <= S <= P * 1.1


def test_no_shard_count_helps_once_one_part_outweighs_a_worker(cal):
    # ResNet-50 at P = 1024: a shard holding one part of 65536 floats
    # receives 1024 * 256 KiB = 268 MB, a worker sends 102 MB.
    r50 = sm.load_layout("resnet50")
    assert sm.shards_needed(cal, "resnet50", r50, "dense", 1.0, 1024, 10.0) is None
    small = dict(cal, part_size=4096)
    assert sm.shards_needed(small, "resnet50", r50, "dense", 1.0, 1024, 10.0) is not None


def fabricated_results(tmp_path, seconds):
    """A bench/cluster results file (format 1) with one 4-worker run."""
    doc = {
        "format": 1,
        "machine": {"nproc": 2, "cpu_model": "test", "hostname": "t"},
        "commit": "0" * 40,
        "calibration": [{"rate": "100mbit", "rate_bps": 1e8, "latency_s": 5e-5,
                         "bandwidth_bps": 9.4e7,
                         "aggregation_pairs_per_s": 3e7,
                         "topk_s_per_element": 5e-10}],
        "runs": [{"run_id": "t#1", "model": "mlp", "codec": "gtopk:0.01",
                  "workers": 4, "shards": 1, "rate_bps": 1e8,
                  "s_per_iter_median": seconds},
                 {"run_id": "t#2", "model": "mlp", "codec": "auto",
                  "workers": 4, "shards": 1, "rate_bps": 1e8,
                  "s_per_iter_median": 0.5}],
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return path


def predicted_for(tmp_path):
    cal = sm.load_calibration(sm.DEFAULT_CALIBRATION)
    sm.merge_measured(cal, str(fabricated_results(tmp_path, 1.0)))
    pt = [p for p in cal["points"] if p["codec"] == "gtopk:0.01"][0]
    pred, why = sm.predict_point(cal, pt)
    assert why is None and pred > 0
    return pred


@pytest.mark.parametrize("off,rc", [(0.10, 0), (-0.10, 0), (0.40, 1), (-0.40, 1)])
def test_validate_fails_on_a_point_40_percent_off_and_passes_at_10(tmp_path, off, rc):
    pred = predicted_for(tmp_path)
    path = fabricated_results(tmp_path, pred / (1 + off))
    res = run("--measured", str(path), "--validate")
    assert res.returncode == rc, res.stdout + res.stderr
    assert "1 points checked" in res.stdout
    assert ("OFF" in res.stdout) == (rc == 1)
    # auto has a plan per layer: reported, not judged.
    assert "skipped: codec auto is not modelled" in res.stdout


def test_the_measured_calibration_replaces_the_files_figures(tmp_path):
    cal = sm.load_calibration(sm.DEFAULT_CALIBRATION)
    sm.merge_measured(cal, str(fabricated_results(tmp_path, 1.0)))
    assert cal["alpha_s"] == 5e-5
    assert cal["link_efficiency"] == pytest.approx(0.94)
    assert cal["aggregation_pairs_per_s"] == 3e7
    assert cal["topk_s_per_element"] == 5e-10


def test_validate_without_measured_points_fails_and_says_what_to_give():
    res = run("--validate")
    assert res.returncode == 1
    assert "no measured point could be checked" in res.stdout


def test_bad_input_is_refused_with_what_to_do(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = run("--measured", str(bad))
    assert res.returncode == 2 and "is not JSON" in res.stderr
    bad.write_text(json.dumps({"format": 7}))
    res = run("--measured", str(bad))
    assert res.returncode == 2 and "bench/cluster/README.md" in res.stderr
    res = run("--calibration", str(tmp_path / "missing.json"))
    assert res.returncode == 2 and "cannot read" in res.stderr
    c = json.loads(open(sm.DEFAULT_CALIBRATION).read())
    c["link_efficiency"] = -1
    bad.write_text(json.dumps(c))
    res = run("--calibration", str(bad))
    assert res.returncode == 2 and "link_efficiency" in res.stderr
    res = run("--part-size", "0")
    assert res.returncode == 2 and "--part-size" in res.stderr


def test_self_test_and_help_run():
    res = run("--self-test")
    assert res.returncode == 0, res.stdout
    assert "self-test: 0 failed" in res.stdout
    res = run("--help")
    assert res.returncode == 0 and "--validate" in res.stdout


def test_the_whole_grid_writes_its_tables(tmp_path):
    out = tmp_path / "out"
    md = tmp_path / "scale.md"
    res = run("--out", str(out), "--markdown", str(md))
    assert res.returncode == 0, res.stderr
    assert "shards needed (links/+cpu)" in res.stdout
    names = sorted(os.listdir(out))
    assert names == ["scale.csv", "scale.json", "shards_needed.csv",
                     "stop_scaling.csv", "summary.txt", "validation.csv"]
    rows = (out / "scale.csv").read_text().splitlines()
    assert rows[0].startswith("model,link_gbit,density,workers,scheme,shards")
    # 2 models x 3 links x P in 9 values, every scheme present.
    for scheme in ("ring_dense", "topk_allgather", "gtopk_tree", "flps_dense",
                   "flps_topk", "flps_gtopk"):
        assert sum(1 for r in rows if (",%s," % scheme) in r) >= 2 * 3 * 9
    doc = json.loads((out / "scale.json").read_text())
    assert doc["validation"] == {"checked": 0, "off": 0}
    assert len(doc["shards_needed"]) == 2 * 3 * 5 * 9
    text = md.read_text()
    assert "#### resnet50, density 0.01" in text and "#### bert_base, density 0.001" in text
    assert "no measured points were given" in text


def test_the_mlps_dense_bytes_are_its_floats_and_nine_headers(cal):
    # fc1.weight (200,704) travels as 3 pieces of 65,536 and one of 3,096;
    # the five other tensors one message each: 9 messages each way.
    mlp = sm.load_layout("mlp")
    r = sm.flps_time(cal, "mlp", mlp, "dense", 1.0, 4, 1, 0.1, detail=True)
    assert r["bytes_per_worker"] == 2 * (4 * 235146 + 9 * cal["header_bytes"])
    assert r["messages_per_worker"] == 9


def test_faster_shard_links_need_proportionally_fewer_shards(cal):
    r50 = sm.load_layout("resnet50")
    same = sm.shards_needed(cal, "resnet50", r50, "dense", 1.0, 64, 10.0)
    fast = sm.shards_needed(cal, "resnet50", r50, "dense", 1.0, 64, 10.0,
                            shard_gbit=100.0)
    assert 60 <= same <= 70
    assert 6 <= fast <= 8


def test_the_median_holds_an_evaluation_only_when_most_intervals_do(cal):
    # 1500 iterations: progress every 15. eval_every 25: 60% of the
    # intervals hold one, so the median does; eval_every 100: 15%, it does not.
    pt = {"model": "mlp", "iterations": 1500, "eval_every": 25}
    assert sm.eval_share(cal, pt) == pytest.approx(cal["eval_s"]["mlp"] / 15)
    assert sm.eval_share(cal, dict(pt, eval_every=100)) == 0.0
    assert sm.eval_share(cal, dict(pt, eval_every=5)) == pytest.approx(
        cal["eval_s"]["mlp"] / 5)
    assert sm.eval_share(cal, {"model": "mlp"}) == 0.0


def test_a_token_bucket_lets_a_small_phase_through_but_not_more_than_its_rate(ideal):
    one = [("w", 65536)]
    plain = sm.flps_time(ideal, "t-one", one, "topk", 0.01, 1, 1, 0.1)
    burst = sm.flps_time(ideal, "t-one", one, "topk", 0.01, 1, 1, 0.1,
                         burst_bytes=50000)
    wire = 8 * 655 * 8 / 0.1e9  # one direction of 655 pairs at 100 Mbit/s
    assert plain == pytest.approx(2e-4 + 2 * wire)
    assert burst == pytest.approx(max(2e-4, wire))
    # A phase larger than the bucket pays for what exceeds it.
    dense = sm.flps_time(ideal, "t-one", one, "dense", 1.0, 1, 1, 0.1,
                         burst_bytes=50000)
    dwire = 4 * 65536 * 8 / 0.1e9
    assert dense == pytest.approx(2e-4 + 2 * (dwire - 50000 * 8 / 0.1e9))
