"""flps.fl: federated averaging of a PyTorch model.  libflps's client
sample and partitions from Python, the job file's settings and their
refusals, a world of one, rounds against real shards (the shards' weighted
mean and server optimizer are the local ones), a client that dies or
misses the deadline being late, and event lines that keep to the
schema."""

import importlib
import io
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flps  # noqa: E402
import flps.fl as fl  # noqa: E402

from conftest import BUILD_DIR, REPO  # noqa: E402

jobenv = importlib.import_module("flps.jobenv")
report_mod = importlib.import_module("flps.report")
client_mod = importlib.import_module("flps.client")
saps_mod = importlib.import_module("flps.saps")
torch.set_num_threads(1)

sys.path.insert(0, os.path.join(REPO, "examples", "torch"))
import flworker_like  # noqa: E402

LAUNCHER_VARS = ("FLPS_JOB", "FLPS_RANK", "FLPS_WORKERS", "FLPS_SERVERS",
                 "FLPS_JOB_KEYS") + tuple(v for v, _ in jobenv.KEYS.values())


@pytest.fixture
def clean_env(monkeypatch):
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture
def events(monkeypatch):
    """flps.report's state, fresh, its events going to a buffer."""
    buf = io.StringIO()
    for key, value in (("reported", False), ("done", False),
                       ("iteration", 0), ("test_accuracy", None),
                       ("test_loss", None), ("test_miou", None),
                       ("done_extra", {}), ("out", buf)):
        monkeypatch.setitem(report_mod._state, key, value)
    # Nor what earlier tests' clients and saps runs left for the done event.
    monkeypatch.setattr(client_mod, "_ran", [])
    monkeypatch.setattr(saps_mod, "_done", [])
    return buf


def problem(n=1200, seed=0, hidden=16):
    """A seeded 4-class problem and a small MLP for it."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, generator=g)
    y = (x @ torch.randn(12, 4, generator=g)).argmax(1)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(12, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 4))
    return x, y, model


def step_of(x, y):
    def step(model, idx):
        return torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
    return step


def accuracy_of(x, y):
    def evaluate(model):
        with torch.no_grad():
            return float((model(x).argmax(1) == y).float().mean())
    return evaluate


# ---- libflps's sample and partitions ----

def test_a_rounds_sample_is_its_size_distinct_ascending_and_seeded():
    assert fl.round_size(10, 0.5) == 5
    assert fl.round_size(100, 0.1) == 10
    assert fl.round_size(10, 0.01) == 1
    seen = set()
    for r in range(20):
        s = fl.sample(1, r, 10, 0.5)
        assert len(s) == 5 and s == sorted(set(s)) and max(s) < 10
        assert s == fl.sample(1, r, 10, 0.5)
        seen.add(tuple(s))
    assert len(seen) > 10, "rounds differ"
    assert fl.sample(2, 0, 10, 0.5) != fl.sample(1, 0, 10, 0.5) or \
        fl.sample(2, 1, 10, 0.5) != fl.sample(1, 1, 10, 0.5)
    with pytest.raises(flps.InvalidArgumentError):
        fl.sample(1, 0, 10, 0)


def test_the_iid_partition_is_flworkers_worker_split():
    labels = np.arange(1000) % 10
    parts = fl.partition(labels, 3, "iid", seed=42)
    for c in range(3):
        assert parts[c].tolist() == list(
            flworker_like.iid_slice(1000, 3, c, 42)), "client %d" % c


@pytest.mark.parametrize("spec", ["iid", "dirichlet:0.5", "shards:2"])
def test_every_partition_gives_every_sample_to_one_client(spec):
    labels = np.random.default_rng(1).integers(0, 10, size=3000)
    parts = fl.partition(labels, 20, spec, seed=7)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(3000))
    assert parts[0].tolist() == fl.partition(labels, 20, spec,
                                             seed=7)[0].tolist()


def test_label_partitions_skew_the_clients_classes():
    labels = np.random.default_rng(1).integers(0, 10, size=6000)
    iid = fl.skew(fl.partition(labels, 10, "iid"), labels)
    dirichlet = fl.skew(fl.partition(labels, 10, "dirichlet:0.5"), labels)
    shards = fl.partition(labels, 100, "shards:2")
    assert iid < 0.1
    assert dirichlet > 0.3
    assert all(len(set(labels[p].tolist())) <= 3 for p in shards)
    assert fl.skew(shards, labels) > 0.7


def test_the_skew_of_clients_of_one_class_each_is_one_minus_its_share():
    labels = np.array([0, 0, 1, 1])
    assert fl.skew([np.array([0, 1]), np.array([2, 3])], labels) == 0.5


def test_a_partition_the_labels_cannot_give_is_refused():
    with pytest.raises(flps.FlpsError):
        fl.partition(np.zeros(10, dtype=int), 20, "iid")
    with pytest.raises(flps.FlpsError):
        fl.partition(np.arange(100) % 3, 5, "kmeans:2")
    with pytest.raises(flps.FlpsError):
        fl.partition(np.arange(100) % 3, 10, "shards:20")


# ---- the job file's settings ----

def give(monkeypatch, **keys):
    """The environment a launcher gives rank 0 of 1 for a job file that
    gives keys."""
    monkeypatch.setenv("FLPS_JOB", "fl")
    monkeypatch.setenv("FLPS_RANK", "0")
    monkeypatch.setenv("FLPS_WORKERS", "1")
    monkeypatch.setenv("FLPS_SERVERS", "tcp://127.0.0.1:9")
    monkeypatch.setenv("FLPS_JOB_KEYS", ",".join(["name"] + list(keys)))
    for key, text in keys.items():
        monkeypatch.setenv(jobenv.KEYS[key][0], str(text))


def test_a_federation_follows_the_job_file_and_fills_in_the_rest(clean_env):
    x, y, model = problem()
    give(clean_env, mode="fedavg", rounds=7, clients=4,
         client_fraction=0.5, partition="dirichlet:0.3", prox_mu=0.01,
         server_optimizer="momentum:0.9")
    clean_env.setenv("FLPS_LOCAL_STEPS", "10")  # the launcher's default
    fed = fl.Federation(model, y.numpy(), local_steps=3)
    s = fed.settings
    assert (s.rounds, s.clients, s.client_fraction) == (7, 4, 0.5)
    assert s.partition == "dirichlet:0.3" and s.prox_mu == 0.01
    assert s.server_optimizer == "momentum:0.9"
    assert s.local_steps == 3, "a key the file leaves out is the program's"
    assert not fed.local


def test_an_argument_that_contradicts_the_job_file_is_refused(clean_env):
    x, y, model = problem()
    give(clean_env, mode="fedavg", rounds=7, server_optimizer="adam")
    with pytest.raises(flps.ConfigError, match="rounds=9 contradicts"):
        fl.Federation(model, y.numpy(), rounds=9)
    with pytest.raises(flps.ConfigError, match="server_optimizer"):
        fl.Federation(model, y.numpy(), server_optimizer="sgd")
    give(clean_env, mode="ssgd")
    with pytest.raises(flps.ConfigError, match="not fedavg"):
        fl.Federation(model, y.numpy())


def test_settings_flps_fl_cannot_run_are_refused(clean_env):
    x, y, model = problem()
    with pytest.raises(flps.ConfigError, match="auto"):
        fl.Federation(model, y.numpy(), compression="auto")
    with pytest.raises(flps.ConfigError, match="gtopk"):
        fl.Federation(model, y.numpy(), compression="gtopk:0.1",
                      server_optimizer="adam")
    with pytest.raises(flps.InvalidArgumentError, match="server_optimizer"):
        fl.Federation(model, y.numpy(), server_optimizer="nesterov")
    with pytest.raises(flps.InvalidArgumentError, match="unknown settings"):
        fl.Federation(model, y.numpy(), round=3)


def test_the_distributed_optimizer_points_fedavg_jobs_at_flps_fl(clean_env):
    import flps.torch as ft

    x, y, model = problem()
    give(clean_env, mode="fedavg")
    cfg = ft.init()
    with pytest.raises(flps.ConfigError, match="flps.fl"):
        ft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                named_parameters=model.named_parameters(),
                                config=cfg)


# ---- a world of one ----

def test_a_world_of_one_trains_every_round(clean_env, events):
    x, y, model = problem()
    fed = fl.Federation(model, y.numpy(), rounds=6, clients=6,
                        client_fraction=0.5, local_steps=8, lr=0.1,
                        partition="dirichlet:0.5", eval_every=2)
    before = accuracy_of(x, y)(model)
    r = fed.run(step_of(x, y), accuracy_of(x, y))
    assert fed.local
    assert r.client_rounds == 6 * 3 and r.late_clients == 0
    assert r.test_accuracy > before + 0.2
    assert r.test_accuracy == pytest.approx(accuracy_of(x, y)(model)), \
        "the model holds the global model afterwards"
    assert [h["round_clients"] for h in r.history] == [
        fl.sample(1, k, 6, 0.5) for k in range(6)]


def test_isolated_and_in_process_clients_train_alike(clean_env, events):
    results = []
    for isolate in (True, False):
        x, y, model = problem()
        fed = fl.Federation(model, y.numpy(), rounds=3, clients=4,
                            local_steps=4, isolate=isolate, eval_every=0)
        results.append(fed.run(step_of(x, y), accuracy_of(x, y)))
    assert results[0].test_accuracy == pytest.approx(
        results[1].test_accuracy, abs=1e-6)


def test_a_client_whose_process_dies_is_late_and_the_rest_train(clean_env,
                                                                events):
    x, y, model = problem()
    fed = fl.Federation(model, y.numpy(), rounds=3, clients=4,
                        local_steps=3, eval_every=0)
    victim = fl.sample(1, 1, 4, 1.0)[2]
    plain = step_of(x, y)

    def step(m, idx):
        if (fed.current_client, fed.current_round) == (victim, 1):
            os.kill(os.getpid(), signal.SIGKILL)
        return plain(m, idx)

    r = fed.run(step, accuracy_of(x, y))
    assert r.late_clients == 1 and r.client_rounds == 12
    assert r.history[1]["late"] == 1


def test_a_client_past_the_deadline_is_killed_and_late(clean_env, events):
    import time

    x, y, model = problem()
    fed = fl.Federation(model, y.numpy(), rounds=2, clients=2,
                        local_steps=2, round_deadline=2.0, eval_every=0)
    plain = step_of(x, y)

    def step(m, idx):
        if fed.current_client == 1 and fed.current_round == 0:
            time.sleep(60)
        return plain(m, idx)

    began = time.monotonic()
    r = fed.run(step, accuracy_of(x, y))
    assert r.late_clients == 1
    assert time.monotonic() - began < 30, "the late client was not waited for"


def test_a_client_that_raises_fails_the_run(clean_env, events):
    x, y, model = problem()
    fed = fl.Federation(model, y.numpy(), rounds=1, clients=2, local_steps=1)

    def step(m, idx):
        raise ValueError("a bug in the program")

    with pytest.raises(fl.ClientFailedError, match="raised"):
        fed.run(step)


# ---- against real shards ----

def run_on_shards(monkeypatch, shards, job, hidden=16, **settings):
    """A Federation of one worker against a real shard; its result and the
    global model."""
    s = shards(job)[0]
    monkeypatch.setenv("FLPS_JOB", job)
    monkeypatch.setenv("FLPS_RANK", "0")
    monkeypatch.setenv("FLPS_WORKERS", "1")
    monkeypatch.setenv("FLPS_SERVERS", s.endpoint)
    x, y, model = problem(hidden=hidden)
    fed = fl.Federation(model, y.numpy(), isolate=False, **settings)
    r = fed.run(step_of(x, y), accuracy_of(x, y))
    return r, torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def run_alone(**settings):
    x, y, model = problem()
    fed = fl.Federation(model, y.numpy(), isolate=False, **settings)
    r = fed.run(step_of(x, y), accuracy_of(x, y))
    return r, torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("sopt", ["sgd", "momentum:0.9", "adam"])
def test_the_shards_weighted_mean_and_optimizer_are_the_local_ones(
        clean_env, events, shards, sopt):
    settings = dict(rounds=4, clients=5, client_fraction=0.6, local_steps=3,
                    partition="dirichlet:0.5", server_optimizer=sopt,
                    server_lr=0.05 if sopt == "adam" else 1.0, eval_every=0)
    alone, w_alone = run_alone(**settings)
    dist, w_dist = run_on_shards(clean_env, shards, "fl-" + sopt[:4],
                                 **settings)
    assert torch.allclose(w_alone, w_dist, atol=2e-5), \
        (w_alone - w_dist).abs().max()
    assert dist.bytes_sent > 0
    done = [json.loads(line) for line in events.getvalue().splitlines()
            if '"done"' in line][-1]
    assert done["mode"] == "fedavg" and done["server_optimizer"] == sopt


def test_topk_deltas_keep_each_clients_residual_and_send_a_few(clean_env,
                                                               events,
                                                               shards):
    settings = dict(rounds=6, clients=4, local_steps=4, eval_every=0,
                    hidden=256)
    dense, _ = run_on_shards(clean_env, shards, "fl-dense", **settings)
    sparse, _ = run_on_shards(clean_env, shards, "fl-topk",
                              compression="topk:0.05", **settings)

    def rounds_bytes(r):  # the initial model's broadcast left out
        return sum(h["round_bytes"] for h in r.history)

    # 4 clients of 5% pairs (8 bytes each) against one dense push.
    assert rounds_bytes(sparse) < 0.5 * rounds_bytes(dense)
    assert sparse.test_accuracy > 0.5


# ---- the event lines ----

def test_flps_fl_lines_keep_to_the_schema(clean_env, events):
    x, y, model = problem()
    fed = fl.Federation(model, y.numpy(), rounds=5, clients=4,
                        client_fraction=0.5, local_steps=2, eval_every=2,
                        round_deadline=60)
    fed.run(step_of(x, y), accuracy_of(x, y))
    with report_mod._lock:
        report_mod._state["done"] = False
    report_mod.report(iteration=5, done=True)
    lines = events.getvalue().splitlines(keepends=True)
    kinds = [json.loads(line)["event"] for line in lines]
    assert kinds[0] == "partition" and kinds.count("progress") == 5
    assert "eval" in kinds and kinds[-1] == "done"
    checker = os.path.join(BUILD_DIR, "tests", "event_check")
    p = subprocess.run([checker], input="".join(lines), capture_output=True,
                       text=True, timeout=30)
    assert p.stdout.splitlines() == ["ok"] * len(lines), list(
        zip(lines, p.stdout.splitlines()))
    done = json.loads(lines[-1])
    assert done["late_clients"] == 0 and done["client_rounds"] == 10
    assert "test_accuracy_last5" in done
