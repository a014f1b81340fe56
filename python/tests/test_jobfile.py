"""What the job file says is what runs (flps.jobenv): flps.torch and
flps.connect follow the keys the launcher names in FLPS_JOB_KEYS, refuse
an argument that contradicts one, leave the rest to the program; a
launched program's done event says what ran without flps.report; and a
program run directly trains alone, as a world of one."""

import importlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flps  # noqa: E402
import flps.torch as ft  # noqa: E402

from conftest import BUILD_DIR, PYTHON_DIR, REPO  # noqa: E402

torch.set_num_threads(1)
jobenv = importlib.import_module("flps.jobenv")
report_mod = importlib.import_module("flps.report")

NOWHERE = ("tcp://127.0.0.1:9",)  # nothing listens: a connect times out
LAUNCHER_VARS = ("FLPS_JOB", "FLPS_RANK", "FLPS_WORKERS", "FLPS_SERVERS",
                 "FLPS_JOB_KEYS") + tuple(v for v, _ in jobenv.KEYS.values())


@pytest.fixture
def job_file(monkeypatch):
    """job_file(key=text, ...): the environment a launcher gives for a job
    file that gives these keys (besides name and model)."""
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)

    def give(**keys):
        monkeypatch.setenv("FLPS_JOB_KEYS",
                           ",".join(["name", "model"] + list(keys)))
        for key, text in keys.items():
            monkeypatch.setenv(jobenv.KEYS[key][0], str(text))
    return give


def make_model(hidden=256):
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, 8))


def batches(steps, seed=5):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 64, generator=g), torch.randn(16, 8, generator=g))
            for _ in range(steps)]


def train(opt, model, data):
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_the_job_files_compression_runs_when_the_program_passes_none(
        shards, job_file):
    s = shards("jf-comp")[0]
    job_file(compression="gtopk:0.01")
    model = make_model(2048)  # big enough that headers are not the bytes
    opt = ft.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=1e-3),
        named_parameters=model.named_parameters(),
        config=ft.Config("jf-comp", 0, 1, (s.endpoint,)), deadline_ms=60000)
    st0 = opt.client.stats()  # rank 0's model, offered dense at the start
    train(opt, model, batches(10))
    st = opt.client.stats()
    opt.close()
    assert opt.client.compression == "gtopk:0.01"
    share = (st.bytes_sent - st0.bytes_sent) / (st.dense_bytes -
                                                st0.dense_bytes)
    assert share <= 0.03, "%.4f of dense" % share


def test_an_argument_that_contradicts_the_job_file_is_refused_naming_both(
        job_file):
    job_file(compression="gtopk:0.01", mode="async", lr="0.01",
             lr_schedule="constant", part_size="4096")
    model = make_model()
    cfg = ft.Config("jf-no", 0, 1, NOWHERE)

    def make(opt=None, **kw):
        return ft.DistributedOptimizer(
            opt or torch.optim.Adam(model.parameters()),
            named_parameters=model.named_parameters(), config=cfg,
            deadline_ms=300, **kw)

    with pytest.raises(flps.ConfigError) as e:
        make(compression="dense")
    assert e.value.message == (
        "compression='dense' contradicts the job file's compression: "
        "gtopk:0.01 (FLPS_COMPRESSION); drop the argument or change the job "
        "file")
    with pytest.raises(flps.ConfigError, match=r"sync_mode='ssgd' contradicts "
                       r"the job file's mode: async \(FLPS_MODE\)"):
        make(sync_mode="ssgd")
    with pytest.raises(flps.ConfigError, match=r"Adam's lr=0.005 contradicts "
                       r"the job file's lr: 0.01 \(FLPS_LR\)"):
        make(torch.optim.Adam(model.parameters(), lr=0.005))
    with pytest.raises(flps.ConfigError, match=r"lr_cosine=True contradicts "
                       r"the job file's lr_schedule: constant"):
        make(lr_cosine=True)
    with pytest.raises(flps.ConfigError, match=r"part_size=512 contradicts "
                       r"the job file's part_size: 4096"):
        make(part_size=512)
    buf = np.zeros(4, dtype=np.float32)
    with pytest.raises(flps.ConfigError, match=r"asynchronous=False "
                       r"contradicts the job file's mode: async"):
        flps.connect("jf-no", 0, 1, list(NOWHERE), {"x": buf}, lr=0.01,
                     asynchronous=False, deadline_ms=300)
    # Two spellings of one setting, and asynchronous=True under async,
    # agree with the file: what fails is the shard that is not there.
    with pytest.raises(flps.TimedOutError):
        flps.connect("jf-no", 0, 1, list(NOWHERE), {"x": buf}, lr=0.01,
                     compression="gtopk:1e-2", asynchronous=True,
                     deadline_ms=300)


def test_a_key_the_job_file_leaves_out_is_the_programs(job_file,
                                                      monkeypatch):
    # The launcher exports every key; FLPS_JOB_KEYS says these are defaults.
    job_file()
    monkeypatch.setenv("FLPS_COMPRESSION", "dense")
    monkeypatch.setenv("FLPS_LR", "0.05")
    model = make_model()
    with pytest.raises(flps.TimedOutError):
        ft.DistributedOptimizer(
            torch.optim.Adam(model.parameters(), lr=0.003),
            named_parameters=model.named_parameters(),
            compression="topk:0.1", config=ft.Config("jf-own", 0, 1, NOWHERE),
            deadline_ms=300)


def test_overlap_is_on_only_where_the_job_file_writes_it(shards, job_file,
                                                         monkeypatch):
    """The launcher exports overlap always (its default true is
    flworker's); flps.torch overlaps where the file gives the key."""
    model = make_model()
    running = {}

    def made(job="jf-ov", **kwargs):
        s = running.get(job) or running.setdefault(job, shards(job)[0])
        opt = ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            named_parameters=model.named_parameters(),
            config=ft.Config(job, 0, 1, (s.endpoint,)),
            deadline_ms=20000, **kwargs)
        opt.close()
        return opt.overlap

    job_file()
    monkeypatch.setenv("FLPS_OVERLAP", "true")
    assert made() is False, "the launcher's default, not the file's word"
    job_file(overlap="true")
    assert made() is True
    job_file(overlap="false")
    assert made() is False
    with pytest.raises(flps.ConfigError, match=r"overlap=True contradicts "
                       r"the job file's overlap: false \(FLPS_OVERLAP\)"):
        ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            named_parameters=model.named_parameters(), overlap=True,
            config=ft.Config("jf-ov", 0, 1, NOWHERE), deadline_ms=300)
    job_file(overlap="maybe")
    with pytest.raises(flps.ConfigError, match="FLPS_OVERLAP='maybe' is not "
                       "true or false"):
        made()
    # Server mode overlaps too (the shards step; each layer's forward
    # waits for its new values).
    job_file(overlap="true")
    assert made("jf-ov-server", mode="server") is True
    # Given where it cannot run (an asynchronous job), the file's overlap
    # is not an error: the optimizer pushes during backward and waits in
    # step().
    assert made("jf-ov-async", sync_mode="async") is False


def test_the_job_files_lr_and_momentum_set_an_optimizer_at_its_defaults(
        job_file):
    job_file(lr="0.01", momentum="0.5")
    model = make_model()
    adam = torch.optim.Adam(model.parameters())
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    for opt in (adam, sgd):
        # They follow the file before anything connects.
        with pytest.raises(flps.TimedOutError):
            ft.DistributedOptimizer(
                opt, named_parameters=model.named_parameters(),
                config=ft.Config("jf-lr", 0, 1, NOWHERE), deadline_ms=300)
    assert adam.param_groups[0]["lr"] == 0.01
    assert adam.param_groups[0]["betas"] == (0.5, 0.999)
    assert sgd.param_groups[0]["momentum"] == 0.5
    with pytest.raises(flps.ConfigError, match=r"Adam's betas\[0\]=0.8 "
                       r"contradicts the job file's momentum: 0.5"):
        ft.DistributedOptimizer(
            torch.optim.Adam(model.parameters(), betas=(0.8, 0.99)),
            named_parameters=model.named_parameters(),
            config=ft.Config("jf-lr", 0, 1, NOWHERE), deadline_ms=300)
    with pytest.raises(flps.ConfigError, match="has nothing to set in "
                       "Adagrad"):
        ft.DistributedOptimizer(
            torch.optim.Adagrad(model.parameters(), lr=0.01),
            named_parameters=model.named_parameters(),
            config=ft.Config("jf-lr", 0, 1, NOWHERE), deadline_ms=300)


def test_the_job_files_async_mode_runs_asynchronously_and_trains_adam(
        shards, job_file):
    s = shards("jf-async")[0]
    job_file(mode="async")
    data = batches(12)
    model = make_model()
    opt = ft.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=1e-2),
        named_parameters=model.named_parameters(),
        config=ft.Config("jf-async", 0, 1, (s.endpoint,)), deadline_ms=60000)
    assert opt.client.mode == "async"
    train(opt, model, data)
    opt.close()
    # One worker: each push is the whole update, so the update read back
    # from the pulled model is its own gradient (to the rounding of the
    # shard's float32 sum and the difference), and Adam's steps are local
    # Adam's.
    ref = make_model()
    train(torch.optim.Adam(ref.parameters(), lr=1e-2), ref, data)
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=2e-4), (a - b).abs().max()
    s.stop()
    log = s.log()
    assert "async: a push was at most" in log, log
    served = [line for line in log.splitlines() if "served " in line][-1]
    pushes = int(served.split("served ")[1].split(" pushes")[0])
    updates = int(served.split("pushes, ")[1].split(" updates")[0])
    assert pushes == updates > 0, served


def test_the_job_files_ssp_bound_reaches_the_client(shards, job_file):
    s = shards("jf-ssp")[0]
    job_file(mode="ssp:2")
    model = make_model()
    opt = ft.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05), mode="server",
        named_parameters=model.named_parameters(), sync_mode="async",
        config=ft.Config("jf-ssp", 0, 1, (s.endpoint,)), deadline_ms=60000)
    assert opt.client.mode == "ssp:2"
    losses = train(opt, model, batches(5))
    opt.close()
    assert all(np.isfinite(losses))


def test_a_world_of_one_trains_locally_and_says_so_once(job_file, capsys,
                                                         monkeypatch):
    for var in ("FLPS_JOB_KEYS",):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(ft, "_told_alone", False)
    monkeypatch.setattr(ft, "_config", None)
    cfg = ft.init()
    ft.init()
    assert cfg.local and (cfg.rank, cfg.workers) == (0, 1)
    assert capsys.readouterr().err == jobenv.ALONE + "\n"
    model = make_model()
    opt = ft.DistributedOptimizer(torch.optim.Adam(model.parameters(),
                                                   lr=1e-2),
                                  named_parameters=model.named_parameters(),
                                  compression="gtopk:0.01")
    data = batches(1) * 30
    losses = train(opt, model, data)
    opt.close()
    assert opt.client is None and opt.iteration == 30
    assert losses[-1] < losses[0] / 2, losses
    ref = make_model()
    train(torch.optim.Adam(ref.parameters(), lr=1e-2), ref, data)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(),
                                                 ref.parameters()))


def test_connect_without_a_job_names_the_launchers(job_file):
    buf = np.zeros(4, dtype=np.float32)
    with pytest.raises(flps.InvalidArgumentError,
                       match="FLPS_JOB is not set.*flrun"):
        flps.connect(layout={"x": buf}, lr=0.1)


PROGRAM = r"""
import torch, flps.torch as ft
torch.set_num_threads(1)
ft.init()
torch.manual_seed(1)
model = torch.nn.Linear(64, 128)
opt = ft.DistributedOptimizer(torch.optim.Adam(model.parameters()),
                              named_parameters=model.named_parameters())
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(4, 64)).square().mean().backward()
    opt.step()
print("no flps.report in this program")
"""


def test_a_launched_program_prints_its_done_event_without_a_report(
        shards, tmp_path):
    s = shards("jf-done")[0]
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(PYTHONPATH=PYTHON_DIR, FLPS_BUILD_DIR=BUILD_DIR,
               FLPS_JOB="jf-done", FLPS_RANK="0", FLPS_WORKERS="1",
               FLPS_SERVERS=s.endpoint, FLPS_JOB_KEYS="name,model,compression",
               FLPS_COMPRESSION="topk:0.1")
    p = subprocess.run([sys.executable, str(prog)], env=env, text=True,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "no flps.report in this program"
    done = json.loads(lines[-1])
    assert done["event"] == "done" and done["iterations"] == 3
    assert (done["compression"], done["mode"], done["optimizer"]) == (
        "topk:0.1", "ssgd", "Adam")
    assert 0 < done["bytes_sent"] < done["dense_bytes"] / 2
    check = subprocess.run([os.path.join(BUILD_DIR, "tests", "event_check")],
                           input=lines[-1] + "\n", text=True,
                           capture_output=True, timeout=30)
    assert check.stdout == "ok\n", check.stdout


def test_the_example_run_directly_trains_as_a_world_of_one():
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(PYTHONPATH=PYTHON_DIR, FLPS_BUILD_DIR=BUILD_DIR,
               OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", "torch", "mlp.py"),
         "--iterations", "100", "--eval-every", "0", "--test-samples",
         "500"], env=env, text=True, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.startswith(jobenv.ALONE), p.stderr
    losses = [json.loads(line)["loss"] for line in p.stdout.splitlines()
              if line.startswith('{"event":"progress"')]
    assert len(losses) >= 5 and losses[-1] < losses[0], losses


def test_a_done_event_names_what_the_clients_ran(monkeypatch):
    buf = io.StringIO()
    for key, value in (("reported", False), ("done", False),
                       ("iteration", 0), ("test_accuracy", None),
                       ("test_loss", None), ("out", buf)):
        monkeypatch.setitem(report_mod._state, key, value)
    client_mod = importlib.import_module("flps.client")
    a, b = client_mod._Ran("gtopk:0.01", "async"), client_mod._Ran(
        "gtopk:0.01", "ssgd")
    a.optimizer, a.iterations, b.iterations = "Adam", 7, 5
    monkeypatch.setattr(client_mod, "_ran", [a, b])
    monkeypatch.setattr(client_mod, "_closed_stats", [])
    ev = report_mod._done_event()
    assert (ev["compression"], ev["mode"], ev["optimizer"]) == (
        "gtopk:0.01", "mixed", "Adam")
    assert ev["iterations"] == 7, "no report: the clients' iterations"
