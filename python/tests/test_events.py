"""The event lines the Python writers print (flps.report: progress, eval,
done; flps.auto: profile, plan) keep to the schema flworker's lines keep
to: each is fed to build/tests/event_check, which reads it with the C
reader in its strict mode (services/event.h, docs/events.md), so the C
table stays the one statement of the format."""

import collections
import importlib
import io
import json
import os
import subprocess

import pytest

from conftest import BUILD_DIR

report_mod = importlib.import_module("flps.report")
client_mod = importlib.import_module("flps.client")
auto_mod = importlib.import_module("flps.auto")

EVENT_CHECK = os.path.join(BUILD_DIR, "tests", "event_check")

Stats = collections.namedtuple(
    "Stats", "bytes_sent bytes_received dense_bytes resends")


def check(lines):
    """event_check's verdict per line."""
    if not os.access(EVENT_CHECK, os.X_OK):
        pytest.fail("no %s: build it (cmake --build build --target "
                    "event_check) or set FLPS_BUILD_DIR" % EVENT_CHECK)
    p = subprocess.run([EVENT_CHECK], input="".join(lines),
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout.splitlines()


@pytest.fixture
def out(monkeypatch):
    """flps.report's state, fresh, with its events going to a buffer; the
    process's byte counters are those of one closed client."""
    buf = io.StringIO()
    for key, value in (("reported", False), ("done", False),
                       ("iteration", 0), ("test_accuracy", None),
                       ("test_loss", None), ("out", buf)):
        monkeypatch.setitem(report_mod._state, key, value)
    monkeypatch.setattr(client_mod, "_closed_stats",
                        [Stats(1200, 3400, 56000, 1)])
    monkeypatch.setattr(client_mod, "_closed_warmup_bytes", [])
    monkeypatch.setattr(client_mod, "_closed_energy", [])
    monkeypatch.setenv("FLPS_RANK", "0")
    monkeypatch.setenv("FLPS_ITERATIONS", "3")
    return buf


def events(buf):
    lines = buf.getvalue().splitlines(keepends=True)
    return lines, [json.loads(line)["event"] for line in lines]


def test_flps_report_lines_keep_to_the_schema(out, monkeypatch):
    report = report_mod.report
    report(iteration=1, loss=0.5)
    report(iteration=2, loss=0.25, accuracy=0.5)
    report(iteration=2, test_accuracy=0.75)
    report(iteration=3, test_accuracy=0.8, test_loss=0.4)
    monkeypatch.setattr(client_mod, "_closed_warmup_bytes", [700])
    report(iteration=3, done=True)
    lines, kinds = events(out)
    assert kinds == ["progress", "progress", "eval", "eval", "done"]
    rc, verdicts = check(lines)
    assert verdicts == ["ok"] * len(lines), list(zip(lines, verdicts))
    assert rc == 0


def test_another_ranks_done_line_keeps_to_the_schema(out, monkeypatch):
    monkeypatch.setenv("FLPS_RANK", "1")
    report_mod.report(iteration=3, loss=0.1, test_accuracy=0.5, done=True)
    lines, kinds = events(out)
    assert kinds == ["done"]
    assert check(lines) == (0, ["ok"])


def _energy(**kw):
    """A Client.energy() dict as libflps fills it."""
    e = {"devices": 2, "gpus": 1, "iterations": 40, "seconds": 2.0,
         "joules": 500.0, "gpu_joules": 420.0, "cpu_joules": 80.0,
         "joules_per_iteration": 12.5, "gpu_joules_per_iteration": 10.5,
         "cpu_joules_per_iteration": 2.0, "method": "counter",
         "gpu_list": "0", "gpu_clock": "auto", "gpu_clock_mhz": 1680,
         "gpu_clock_chosen": 1, "why": ""}
    e.update(kw)
    return e


def test_a_done_line_with_what_libflps_metered_keeps_to_the_schema(
        out, monkeypatch):
    monkeypatch.setattr(client_mod, "_closed_energy", [_energy()])
    report_mod.report(iteration=40, loss=0.1, done=True)
    lines, kinds = events(out)
    assert kinds == ["progress", "done"]
    assert check(lines) == (0, ["ok", "ok"])
    done = json.loads(lines[-1])
    assert done["joules_per_iteration"] == 12.5
    assert done["gpu_joules_per_iteration"] == 10.5
    assert done["cpu_joules_per_iteration"] == 2.0
    assert done["energy_iterations"] == 40
    assert done["energy_method"] == "counter"
    assert done["energy_gpus"] == "0"
    assert done["gpu_clock_mhz"] == 1680


def test_a_done_line_claims_no_energy_nothing_metered(out, monkeypatch):
    monkeypatch.setattr(client_mod, "_closed_energy", [_energy(
        devices=0, gpus=0, iterations=0, gpu_clock="default",
        gpu_clock_mhz=0, why="no NVML library: energy is not reported")])
    report_mod.report(iteration=3, done=True)
    lines, _ = events(out)
    done = json.loads(lines[-1])
    assert not [k for k in done if "joules" in k or "energy" in k or
                k.startswith("gpu_clock")], done
    assert check(lines) == (0, ["ok"])


def test_auto_cut_short_names_no_clock_and_a_cpu_only_node_no_gpu_part(
        out, monkeypatch):
    monkeypatch.setattr(client_mod, "_closed_energy", [_energy(
        devices=1, gpus=0, gpu_joules=0.0, joules=80.0, gpu_list="",
        gpu_clock_chosen=0)])
    report_mod.report(iteration=3, done=True)
    lines, _ = events(out)
    done = json.loads(lines[-1])
    assert done["joules_per_iteration"] == 2.0
    assert "gpu_joules_per_iteration" not in done
    assert "energy_gpus" not in done
    assert "gpu_clock_mhz" not in done
    assert check(lines) == (0, ["ok"])


class FakeClient:
    def __init__(self):
        self.codecs = {}

    def set_layer_codec(self, layer, spec):
        self.codecs[layer] = spec


def test_flps_auto_profile_and_plan_lines_keep_to_the_schema(out, tmp_path):
    names, numels = ["fc1.weight", "fc1.bias"], [8192, 16]
    plan = tmp_path / "plan.json"
    tuner = auto_mod.AutoTuner(FakeClient(), names, numels, rank=0,
                               workers=2, plan_file=str(plan))
    tuner.alpha, tuner.beta = 5e-05, 1.0 / 3e9
    for step in range(auto_mod.PROFILE_TO):
        tuner.mark_start()
        for layer in reversed(range(len(names))):
            tuner.mark(layer)
        tuner.end_step(step, step)
    plan.write_text(json.dumps({"version": 1, "layers": [
        {"name": "fc1.weight", "numel": 8192, "codec": "topk",
         "density": 0.25},
        {"name": "fc1.bias", "numel": 16, "codec": "dense", "density": 1}]}))
    assert tuner.check_plan(auto_mod.PROFILE_TO)
    lines, kinds = events(out)
    assert kinds == ["profile", "plan"]
    rc, verdicts = check(lines)
    assert verdicts == ["ok", "ok"], list(zip(lines, verdicts))
    assert rc == 0


def test_the_check_tells_a_line_off_the_schema():
    rc, verdicts = check([
        '{"event":"progress","iter":"1","iterations":3,"loss":0.5,'
        '"bytes_sent":1,"dense_bytes":2,"elapsed":0.1}\n',
        '{"event":"eval","iter":1,"test_accuracy":0.5,"test_acc":0.5}\n',
        '{"event":"done","rank":0}\n'])
    assert rc == 1
    assert verdicts == [
        "progress.iter: wants a whole number >= 0, not a string",
        'eval: unknown field "test_acc"',
        "done: lacks iterations"]
