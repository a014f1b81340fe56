"""flps.torch against a real shard and two real worker processes: the
broadcast, dense SGD equal to single-process SGD on the averaged
gradients, identical workers under Adam, and the configuration errors."""

import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import flps  # noqa: E402
import flps.torch as ft  # noqa: E402
import train_common as tc  # noqa: E402

from conftest import HERE, PYTHON_DIR  # noqa: E402

torch.set_num_threads(1)
W = 2


def run_workers(shard, job, tmp_path, steps, optimizer, mode="gradient",
                compression="dense", selection="auto", extra_env=None,
                correction="auto"):
    """Train on W worker processes against shard; their saved results.
    extra_env: more variables for the workers (e.g. FLPS_DENSITY_WARMUP)."""
    procs, outs = [], []
    for rank in range(W):
        out = tmp_path / ("%s-%d.pt" % (job, rank))
        env = dict(os.environ, **(extra_env or {}))
        env.update(PYTHONPATH=os.pathsep.join([PYTHON_DIR, HERE]),
                   FLPS_JOB=job, FLPS_RANK=str(rank), FLPS_WORKERS=str(W),
                   FLPS_SERVERS=shard.endpoint, TEST_STEPS=str(steps),
                   TEST_OPTIMIZER=optimizer, TEST_MODE=mode,
                   TEST_COMPRESSION=compression, TEST_SELECTION=selection,
                   TEST_CORRECTION=correction, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "torch_worker.py"), str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
        outs.append(out)
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=150)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a worker of %s hung; shard log:\n%s"
                        % (job, shard.log()))
    for rank, p in enumerate(procs):
        assert p.returncode == 0, "worker %d failed:\n%s" % (rank, logs[rank])
    return [torch.load(o) for o in outs]


def reference(steps, optimizer):
    """Single-process training of rank 0's model on the average of the
    W workers' gradients of the same batches."""
    model = tc.make_model(100)
    opt = tc.make_optimizer(optimizer, model.parameters())
    x, y = tc.make_data(W, steps)
    for step in range(steps):
        grads = []
        for rank in range(W):
            model.zero_grad()
            tc.loss_of(model, *tc.batch(x, y, W, step, rank)).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = (grads[0][i] + grads[1][i]) / W
        opt.step()
    return tc.flat(model)


def check_broadcast(results):
    assert not torch.equal(results[0]["before"], results[1]["before"]), \
        "the ranks should start from different values"
    for r in results:
        assert torch.equal(r["synced"], results[0]["before"]), \
            "every worker starts from rank 0's parameters"


@pytest.mark.parametrize("mode", ["gradient", "server"])
def test_dense_sgd_equals_single_process_sgd_on_averaged_gradients(
        shards, tmp_path, mode):
    steps = 20
    job = "sgd-" + mode
    s = shards(job)[0]
    results = run_workers(s, job, tmp_path, steps, "sgd", mode=mode)
    check_broadcast(results)
    want = reference(steps, "sgd")
    assert (want - results[0]["synced"]).abs().max() > 1e-2, \
        "training should move the parameters"
    for rank, r in enumerate(results):
        diff = (r["final"] - want).abs().max().item()
        assert diff < 1e-5, "rank %d is %.3g from the reference" % (rank,
                                                                    diff)


@pytest.mark.parametrize("optimizer,mode", [("sgd", "gradient"),
                                            ("adam", "gradient"),
                                            ("sgd", "server")])
def test_overlap_applies_the_same_updates_bit_for_bit(shards, tmp_path,
                                                      optimizer, mode):
    """overlap=True leaves each step's updates to the next forward pass,
    layer by layer: the same models as without it, to the last bit (in
    server mode the shards' SGD steps and the forward pass waits for each
    layer's new values)."""
    steps = 20
    tag = optimizer + "-" + mode
    plain = run_workers(shards("plain-" + tag)[0], "plain-" + tag,
                        tmp_path, steps, optimizer, mode=mode)
    over = run_workers(shards("over-" + tag)[0], "over-" + tag,
                       tmp_path, steps, optimizer, mode=mode,
                       extra_env={"TEST_OVERLAP": "1"})
    for rank in range(W):
        assert over[rank]["overlap"] and not plain[rank]["overlap"]
        assert over[rank]["pending_at_close"], \
            "the last step's updates waited for a forward pass"
        assert torch.equal(over[rank]["final"], plain[rank]["final"]), \
            "rank %d differs with overlap" % rank
    assert (over[0]["final"] - over[0]["synced"]).abs().max() > 1e-2


def test_overlap_steps_each_layer_as_the_forward_pass_reaches_it(shards):
    """After step() the parameters wait for the next forward: each module's
    own are stepped just before it runs (with the lr step() saw, not one a
    scheduler set since), a layer the forward skips is stepped before
    backward pushes it again, and synchronize() steps the rest."""
    s = shards("overlap-one")[0]
    cfg = ft.Config("overlap-one", 0, 1, (s.endpoint,))
    model, ref = tc.make_model(3), tc.make_model(3)
    opt = ft.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        model.named_parameters(), config=cfg, overlap=True,
        deadline_ms=20000)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    first, last = model[0], model[2]
    x, y = tc.make_data(1, 4)
    seen = []
    probe = first.register_forward_pre_hook(
        lambda m, i: seen.append(torch.equal(last.weight, ref[2].weight)))
    try:
        for step in range(3):
            xb, yb = tc.batch(x, y, 1, step, 0)
            opt.zero_grad()
            tc.loss_of(model, xb, yb).backward()
            before = tc.flat(model).clone()
            opt.step()
            assert torch.equal(tc.flat(model), before), \
                "step() left the update to the next forward"
            ref_opt.zero_grad()
            tc.loss_of(ref, xb, yb).backward()
            ref_opt.step()
            # A scheduler's lr after step() is the next step's.
            opt.param_groups[0]["lr"] = 0.05 if step % 2 else 0.1
            ref_opt.param_groups[0]["lr"] = opt.param_groups[0]["lr"]
        # The first layer alone: its parameters are stepped, the last
        # layer's are not (they are the reference's of one step before).
        with torch.no_grad():
            first(x[:2])
        assert torch.equal(first.weight, ref[0].weight)
        assert not torch.equal(last.weight, ref[2].weight)
        assert opt._unapplied == {2, 3}
        opt.synchronize()
        assert torch.equal(tc.flat(model), tc.flat(ref))
        assert opt._deferred is None
        assert len(seen) == 4 and not any(seen[1:]), \
            "after a step, the first module ran before the last was stepped"
        # A layer the forward pass skips: stepped before its next push.
        xb, yb = tc.batch(x, y, 1, 3, 0)
        opt.zero_grad()
        tc.loss_of(model, xb, yb).backward()
        opt.step()
        ref_opt.zero_grad()
        tc.loss_of(ref, xb, yb).backward()
        ref_opt.step()
        opt.zero_grad()
        (first(xb).sum() * 0).backward()  # the last layer is not run
        assert opt._unapplied == {2, 3}
        opt.step()  # pushes the last layer's (no) gradient
        assert torch.equal(last.weight, ref[2].weight), \
            "stepped before it was pushed again"
        assert opt._unapplied == {0, 1, 2, 3}
    finally:
        probe.remove()
        opt.close()


def test_overlap_in_server_mode_waits_for_each_layer_as_the_forward_reaches_it(
        shards):
    """Server mode: the shards step, and overlap leaves their new values
    to the next forward pass: each module waits for its own parameters'
    just before it runs, and synchronize() for the rest; the model is the
    one a plain torch SGD makes from the same gradients. (The replica is
    the parameter itself, so a layer's values may land early, while
    waiting for another's: only "no later than its forward" holds.)"""
    s = shards("overlap-server")[0]
    cfg = ft.Config("overlap-server", 0, 1, (s.endpoint,))
    model, ref = tc.make_model(3), tc.make_model(3)
    opt = ft.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        model.named_parameters(), mode="server", config=cfg, overlap=True,
        deadline_ms=20000)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    first = model[0]
    x, y = tc.make_data(1, 3)
    try:
        assert opt.overlap
        for step in range(3):
            xb, yb = tc.batch(x, y, 1, step, 0)
            opt.zero_grad()
            tc.loss_of(model, xb, yb).backward()
            opt.step()
            assert opt._deferred == step and opt._unapplied == {0, 1, 2, 3}
            ref_opt.zero_grad()
            tc.loss_of(ref, xb, yb).backward()
            ref_opt.step()
        with torch.no_grad():
            first(x[:2])
        assert opt._unapplied == {2, 3}, "the first module waited for its own"
        assert torch.allclose(first.weight, ref[0].weight, atol=1e-6)
        assert torch.allclose(first.bias, ref[0].bias, atol=1e-6)
        opt.synchronize()
        assert opt._deferred is None and not opt._unapplied
        assert torch.allclose(tc.flat(model), tc.flat(ref), atol=1e-6)
        assert not torch.allclose(tc.flat(model), tc.flat(tc.make_model(3)),
                                  atol=1e-3), "training moved the model"
    finally:
        opt.close()


@pytest.mark.parametrize("kwargs,why", [
    ({"sync_mode": "async"}, "asynchronous"),
    ({"compression": "auto", "correction": "none"}, "auto"),
])
def test_overlap_is_refused_where_it_cannot_run(kwargs, why):
    model = tc.make_model(1)
    with pytest.raises(flps.ConfigError, match="overlap.*" + why):
        ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            named_parameters=model.named_parameters(), overlap=True,
            config=ft.Config("j", 0, 1, ("tcp://x:1",)), **kwargs)


def test_adam_keeps_every_worker_identical_after_50_steps(shards, tmp_path):
    s = shards("adam")[0]
    results = run_workers(s, "adam", tmp_path, 50, "adam")
    check_broadcast(results)
    assert torch.equal(results[0]["final"], results[1]["final"])
    want = reference(50, "adam")
    assert (results[0]["final"] - want).abs().max() < 1e-4
    assert (results[0]["final"] - results[0]["synced"]).abs().max() > 1e-2


def test_adam_with_gtopk_keeps_workers_identical_and_sends_less(shards,
                                                                 tmp_path):
    s = shards("gtopk")[0]
    results = run_workers(s, "gtopk", tmp_path, 30, "adam",
                          compression="gtopk:0.1")
    assert torch.equal(results[0]["final"], results[1]["final"])
    assert (results[0]["final"] - results[0]["synced"]).abs().max() > 1e-3
    for r in results:
        assert r["bytes_sent"] < 0.5 * r["dense_bytes"]


@pytest.mark.parametrize("compression,mode,optimizer", [
    ("topk:0.1", "gradient", "sgd"),
    ("gtopk:0.1", "gradient", "adam"),
    ("gtopk:0.1", "server", "sgd"),  # momentum 0.9: momentum correction
])
def test_top_k_selected_in_torch_trains_as_libflps_own_top_k(
        shards, tmp_path, compression, mode, optimizer):
    """CPU tensors forced onto the path CUDA tensors take: torch.topk with
    the residual kept as a tensor, only the pairs handed to libflps (with
    the gradient exchange, correction "none", which both can run)."""
    steps = 25
    tag = compression.partition(":")[0] + "-" + mode
    own = run_workers(shards("own-" + tag)[0], "own-" + tag, tmp_path, steps,
                      optimizer, mode=mode, compression=compression,
                      selection="libflps", correction="none")
    sel = run_workers(shards("sel-" + tag)[0], "sel-" + tag, tmp_path, steps,
                      optimizer, mode=mode, compression=compression,
                      selection="torch", correction="none")
    for r in own:
        assert r["torch_layers"] == 0
    for r in sel:
        assert r["torch_layers"] == 4, "every layer selected in torch"
        assert r["residual"] and any(x.abs().max() > 0 for x in r["residual"])
    assert (own[0]["final"] - own[0]["synced"]).abs().max() > 1e-3,         "training should move the parameters"
    for rank in range(W):
        diff = (sel[rank]["final"] - own[rank]["final"]).abs().max().item()
        assert diff < 1e-5, "rank %d: torch's selection is %.3g from "             "libflps's" % (rank, diff)
        assert sel[rank]["elements_sent"] == own[rank]["elements_sent"]
    assert torch.equal(sel[0]["final"], sel[1]["final"])


def test_selection_in_torch_needs_a_top_k_codec():
    model = tc.make_model(1)
    with pytest.raises(flps.ConfigError, match="topk:D"):
        ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            named_parameters=model.named_parameters(), compression="fp16",
            selection="torch", config=ft.Config("j", 0, 1, ("tcp://x:1",)))
    with pytest.raises(flps.ConfigError, match="selection"):
        ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            named_parameters=model.named_parameters(), selection="gpu",
            config=ft.Config("j", 0, 1, ("tcp://x:1",)))


def test_the_torch_selector_keeps_what_it_did_not_send():
    """Error feedback's invariant: everything sent plus the residual is
    everything accumulated, and a pair the shards left out comes back."""
    import numpy as np
    sel = ft.TopkSelector(10, 0.3, torch.device("cpu"))
    g = torch.tensor([0.5, -4.0, 1.0, 3.0, -0.25, 2.0, 0.0, 0.1, -3.5, 1.5])
    idx, val = sel.select(g)
    assert idx.tolist() == [1, 3, 8]
    assert torch.equal(sel.residual, torch.zeros(10)), "nothing moves yet"
    sel.commit()
    assert torch.equal(sel.residual + torch.zeros(10).index_add(0, idx, val),
                       g)
    assert sel.add_back(np.array([True, False, True])) == 1
    assert sel.residual[3].item() == 3.0 and sel.residual[1].item() == 0.0
    idx2, _ = sel.select(torch.zeros(10))
    assert 3 in idx2.tolist(), "the left-out value is sent again"


@pytest.mark.parametrize("kind,density,momentum,masked", [
    ("topk", 0.1, 0.9, False), ("gtopk", 0.5, 0.9, False),
    ("topk", 0.09, 0.9, False), ("gtopk", 0.09, 0.9, True),
    ("topk", 0.02, 0.9, False), ("topk", 0.01, 0.9, True),
    ("gtopk", 0.01, 0.9, True), ("gtopk", 0.5, 0.5, False),
    ("gtopk", 0.5, 0.25, True), ("topk", 0.5, 0.25, False),
    ("topk", 0.05, 0.5, True)])
def test_the_torch_selector_masks_the_velocity_as_libflps_does(
        kind, density, momentum, masked):
    """u[S] <- 0 only where density * round(1 / (1 - m)) is below 1 for
    gtopk, 1/8 for topk (compress/ef.h): an element sent often enough for
    its velocity to be fresh keeps it."""
    n = 200
    sel = ft.TopkSelector(n, density, torch.device("cpu"), momentum,
                          kind=kind)
    g = torch.arange(1, n + 1, dtype=torch.float32)
    idx, val = sel.select(g)
    assert torch.equal(val, g[idx])
    sel.commit()
    want = g.clone()
    if masked:
        want[idx] = 0
    assert torch.equal(sel.velocity, want)
    assert torch.equal(sel.residual[idx], torch.zeros(idx.numel()))


def test_the_torch_selector_refuses_a_kind_it_does_not_know():
    with pytest.raises(ValueError, match="kind 'dgc' is none of gtopk, topk"):
        ft.TopkSelector(10, 0.1, torch.device("cpu"), 0.9, kind="dgc")


# ---- density warm-up ----

WARM_ENV = {"FLPS_DENSITY_WARMUP": "10", "FLPS_DENSITY_WARMUP_START": "0.5"}
# train_common's model, layer by layer: 8x16 weight, bias, 16x4 weight, bias.
LAYER_SIZES = [tc.IN * tc.HIDDEN, tc.HIDDEN, tc.HIDDEN * tc.OUT, tc.OUT]


def warm_pairs(target, t, warmup=10, start=0.5):
    """The pairs one step sends: per layer max(floor(d(t) n), 1) with d(t)
    the DGC schedule start * (target / start)^(t / warmup)."""
    d = target
    if t < warmup:
        d = min(max(start * (target / start) ** (t / warmup), target), start)
    return sum(min(max(math.floor(d * n), 1), n) for n in LAYER_SIZES)


def test_the_warm_up_schedule_of_the_model():
    want = [warm_pairs(0.1, t) for t in range(15)]
    assert want[0] == 64 + 8 + 32 + 2, "half of every layer at first"
    assert want[10:] == [12 + 1 + 6 + 1] * 5, "the target's k from 10 on"
    assert all(want[t] > want[10] for t in range(10))
    assert want == sorted(want, reverse=True)


def test_the_torch_selector_follows_the_warm_up():
    sel = ft.TopkSelector(128, 0.1, torch.device("cpu"), warmup=10,
                          warmup_start=0.5)
    assert sel.k == 12, "the target's k"
    assert [sel.k_at(t) for t in (0, 5, 9, 10, 11, 1000)] == [
        64, math.floor(0.5 * 0.2 ** 0.5 * 128), 15, 12, 12, 12]
    g = torch.arange(128, dtype=torch.float32) - 64
    idx, val = sel.select(g, 0)
    assert idx.numel() == 64
    assert torch.equal(val.abs().sort().values,
                       g.abs().sort().values[-64:])
    idx, _ = sel.select(g)
    assert idx.numel() == 12, "no iteration: the target's k"
    plain = ft.TopkSelector(128, 0.1, torch.device("cpu"))
    assert plain.k_at(0) == 12, "no warm-up"


@pytest.mark.parametrize("selection", ["libflps", "torch"])
@pytest.mark.parametrize("compression", ["topk:0.1", "gtopk:0.1"])
def test_the_warm_up_from_the_environment_sets_every_pushs_pairs(
        shards, monkeypatch, compression, selection):
    """FLPS_DENSITY_WARMUP and FLPS_DENSITY_WARMUP_START (what flrun sets
    from a job file's density_warmup) drive the optimizer: each step sends
    the schedule's pairs, and a gtopk shard takes every one of them (it
    keeps the global top k(t) of the same schedule)."""
    for k, v in WARM_ENV.items():
        monkeypatch.setenv(k, v)
    job = "warm-%s-%s" % (compression.partition(":")[0], selection)
    s = shards(job)[0]
    model = tc.make_model(5)
    opt = ft.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        model.named_parameters(), compression=compression,
        selection=selection, config=ft.Config(job, 0, 1, (s.endpoint,)),
        deadline_ms=20000)
    x, y = tc.make_data(1, 15)
    sent, left_out = [], 0
    try:
        assert opt.client.density_warmup == 10
        assert opt.client.density_warmup_start == 0.5
        for step in range(15):
            before = opt.client.stats().elements_sent
            opt.zero_grad()
            tc.loss_of(model, *tc.batch(x, y, 1, step, 0)).backward()
            opt.step()
            sent.append(opt.client.stats().elements_sent - before)
            for i, sel in enumerate(opt.selectors):
                if sel is not None:
                    taken = opt.client.pairs_taken(i, sel.idx.numel())
                    left_out += int((~taken).sum())
    finally:
        opt.close()
    assert sent == [warm_pairs(0.1, t) for t in range(15)]
    if selection == "torch":
        assert all(sel is not None for sel in opt.selectors)
        assert left_out == 0, "one worker: the shard takes all k(t) pairs"


@pytest.mark.parametrize("compression,optimizer", [("topk:0.1", "sgd"),
                                                   ("gtopk:0.1", "adam")])
def test_a_warm_up_trains_alike_in_torch_and_in_libflps(
        shards, tmp_path, compression, optimizer):
    """Two workers, 15 steps, 10 of them warming up from 0.5 (from the
    environment, as a command: job gets it): torch's selection sends the
    pairs of libflps's own, step by step, and trains to its parameters."""
    steps = 15
    tag = "warm2-" + compression.partition(":")[0]
    own = run_workers(shards(tag + "-own")[0], tag + "-own", tmp_path, steps,
                      optimizer, compression=compression,
                      selection="libflps", extra_env=WARM_ENV,
                      correction="none")
    sel = run_workers(shards(tag + "-sel")[0], tag + "-sel", tmp_path, steps,
                      optimizer, compression=compression, selection="torch",
                      extra_env=WARM_ENV, correction="none")
    want = [warm_pairs(0.1, t) for t in range(steps)]
    for r in own + sel:
        assert (r["density_warmup"], r["density_warmup_start"]) == (10, 0.5)
        assert r["per_step"] == want
    for r in sel:
        assert r["torch_layers"] == 4
    assert (own[0]["final"] - own[0]["synced"]).abs().max() > 1e-3
    for rank in range(W):
        diff = (sel[rank]["final"] - own[rank]["final"]).abs().max().item()
        assert diff < 1e-5, "rank %d: torch's selection is %.3g from " \
            "libflps's" % (rank, diff)
    assert torch.equal(own[0]["final"], own[1]["final"])
    assert torch.equal(sel[0]["final"], sel[1]["final"])


def test_a_warm_up_the_library_refuses_is_an_exception_naming_its_source(
        monkeypatch):
    model = tc.make_model(1)
    cfg = ft.Config("j", 0, 1, ("tcp://127.0.0.1:9",))

    def make(**kw):
        return ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            model.named_parameters(), compression="gtopk:0.1", config=cfg,
            deadline_ms=300, retry_ms=100, **kw)

    for start in (0, 1.5):
        with pytest.raises(flps.InvalidArgumentError,
                           match="start density %g is out of range" % start):
            make(density_warmup=10, density_warmup_start=start)
    monkeypatch.setenv("FLPS_DENSITY_WARMUP", "10")
    monkeypatch.setenv("FLPS_DENSITY_WARMUP_START", "1.5")
    with pytest.raises(flps.InvalidArgumentError,
                       match=r"out of range.*FLPS_DENSITY_WARMUP=10, "
                       r"FLPS_DENSITY_WARMUP_START=1.5 from the environment"):
        make()
    monkeypatch.setenv("FLPS_DENSITY_WARMUP", "ten")
    with pytest.raises(flps.ConfigError, match="FLPS_DENSITY_WARMUP='ten' is "
                       "not a whole number"):
        make()
    monkeypatch.setenv("FLPS_DENSITY_WARMUP", "10")
    monkeypatch.setenv("FLPS_DENSITY_WARMUP_START", "half")
    with pytest.raises(flps.ConfigError,
                       match="FLPS_DENSITY_WARMUP_START='half'"):
        make()
    # The arguments win over the environment: no warm-up, so the
    # unreachable shard is what fails.
    with pytest.raises(flps.TimedOutError):
        make(density_warmup=0, density_warmup_start=0.25)


def _auto_run(shards, tmp_path, monkeypatch, selection):
    """One in-process worker of an auto job: 25 warm-up steps (the
    profile), then a plan written as a launcher would, 5 more steps."""
    import importlib
    import io
    import json
    report_mod = importlib.import_module("flps.report")
    job = "auto-" + selection
    s = shards(job)[0]
    plan = tmp_path / ("%s-plan.json" % job)
    monkeypatch.setenv("FLPS_PLAN_FILE", str(plan))
    out = io.StringIO()
    monkeypatch.setitem(report_mod._state, "out", out)
    model = tc.make_model(3)
    opt = ft.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        model.named_parameters(), compression="auto", selection=selection,
        correction="none", config=ft.Config(job, 0, 1, (s.endpoint,)),
        deadline_ms=20000)
    x, y = tc.make_data(1, 30)
    sent = []
    try:
        for step in range(30):
            if step == 25:
                layers = [{"name": n, "numel": p.numel(),
                           "codec": "topk" if n.endswith("weight")
                           else "dense",
                           "density": 0.25 if n.endswith("weight") else 1}
                          for n, p in model.named_parameters()]
                plan.write_text(json.dumps({
                    "version": 1, "layers": layers,
                    "predicted_iteration_seconds": 0.001,
                    "dense_iteration_seconds": 0.002}))
            before = opt.client.stats().elements_sent
            opt.zero_grad()
            tc.loss_of(model, *tc.batch(x, y, 1, step, 0)).backward()
            opt.step()
            sent.append(opt.client.stats().elements_sent - before)
        # A stale plan (not newer) and a broken one are ignored.
        plan.write_text(json.dumps({"version": 1, "layers": []}))
        assert not opt.tuner.check_plan(30)
        plan.write_text("{not json")
        assert not opt.tuner.check_plan(30)
        assert opt.tuner.plan_version == 1
    finally:
        opt.close()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return model, opt, events, sent


def test_auto_profiles_the_warm_up_and_follows_the_plan(shards, tmp_path,
                                                         monkeypatch):
    finals = {}
    for selection in ("libflps", "torch"):
        model, opt, events, sent = _auto_run(shards, tmp_path, monkeypatch,
                                             selection)
        profiles = [e for e in events if e["event"] == "profile"]
        assert len(profiles) == 1, events
        prof = profiles[0]
        assert prof["iteration"] == 25 and prof["workers"] == 1
        assert prof["alpha"] > 0 and prof["beta"] > 0
        assert [(l["name"], l["numel"]) for l in prof["layers"]] == [
            (n, p.numel()) for n, p in model.named_parameters()]
        assert all(l["t_backward"] >= 0 for l in prof["layers"])
        assert sum(l["t_backward"] for l in prof["layers"]) > 0
        plans = [e for e in events if e["event"] == "plan"]
        assert plans == [{"event": "plan", "version": 1, "iteration": 25}]
        # Layers of < 4096 elements start dense: 128 + 16 + 64 + 4 pairs;
        # the plan's top-k of a quarter of each weight: 32 + 16 + 16 + 4.
        assert sent[:25] == [212] * 25
        assert sent[25:] == [68] * 5
        assert opt.tuner.codecs == ["topk:0.25", "dense", "topk:0.25",
                                    "dense"]
        if selection == "torch":
            assert all(s is not None for s in opt.selectors)
            assert [s.k for s in opt.selectors] == [32, 16, 16, 4]
        finals[selection] = tc.flat(model)
    assert (finals["torch"] - finals["libflps"]).abs().max() < 1e-6


ENV = {"FLPS_JOB": "j", "FLPS_RANK": "1", "FLPS_WORKERS": "2",
       "FLPS_SERVERS": "tcp://a:1, tcp://b:2"}


def test_init_reads_the_environment():
    cfg = ft.init(ENV)
    assert cfg == ft.Config("j", 1, 2, ("tcp://a:1", "tcp://b:2"))


@pytest.mark.parametrize("var, value, why", [
    ("FLPS_JOB", "", "FLPS_JOB is not set"),
    ("FLPS_RANK", None, "FLPS_RANK is not set"),
    ("FLPS_RANK", "x", "FLPS_RANK='x' is not a whole number"),
    ("FLPS_RANK", "2", "not below FLPS_WORKERS=2"),
    ("FLPS_WORKERS", "0", "FLPS_WORKERS=0 is below 1"),
    ("FLPS_SERVERS", " , ", "FLPS_SERVERS is not set"),
])
def test_init_names_the_variable_that_is_wrong(var, value, why):
    env = dict(ENV)
    if value is None:
        del env[var]
    else:
        env[var] = value
    with pytest.raises(flps.ConfigError, match=why):
        ft.init(env)


def test_server_mode_refuses_what_the_shards_cannot_run():
    model = tc.make_model(1)
    cfg = ft.Config("j", 0, 1, ("tcp://127.0.0.1:1",))
    with pytest.raises(flps.ConfigError, match="torch.optim.SGD only"):
        ft.DistributedOptimizer(torch.optim.Adam(model.parameters()),
                                mode="server", config=cfg)
    with pytest.raises(flps.ConfigError, match="nesterov"):
        ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                            nesterov=True), mode="server", config=cfg)
    with pytest.raises(flps.ConfigError, match="mode='sync'"):
        ft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                mode="sync", config=cfg)


def test_parameters_must_be_named_when_names_are_given():
    model = tc.make_model(1)
    cfg = ft.Config("j", 0, 1, ("tcp://127.0.0.1:1",))
    named = list(model.named_parameters())[:-1]
    with pytest.raises(flps.InvalidArgumentError, match="not in named_"):
        ft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                named_parameters=named, config=cfg)


def test_an_unreachable_shard_fails_the_optimizer_within_the_deadline():
    model = tc.make_model(1)
    cfg = ft.Config("j", 0, 1, ("tcp://127.0.0.1:9",))
    with pytest.raises(flps.TimedOutError, match="127.0.0.1:9"):
        ft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                config=cfg, deadline_ms=300, retry_ms=100)


def test_one_worker_in_process_equals_plain_sgd_with_a_scheduler(shards):
    s = shards("one")[0]
    cfg = ft.Config("one", 0, 1, (s.endpoint,))
    model, ref = tc.make_model(7), tc.make_model(7)
    inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    opt = ft.DistributedOptimizer(inner, model.named_parameters(),
                                  config=cfg, deadline_ms=20000)
    assert opt.client.retry_ms == 20000, "no resends unless asked for"
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2,
                                                gamma=0.5)
    x, y = tc.make_data(1, 6)
    try:
        for step in range(6):
            xb, yb = tc.batch(x, y, 1, step, 0)

            def closure():
                opt.zero_grad()
                loss = tc.loss_of(model, xb, yb)
                loss.backward()
                return loss

            loss = opt.step(closure)
            assert loss is not None
            ref_opt.zero_grad()
            tc.loss_of(ref, xb, yb).backward()
            ref_opt.step()
            sched.step()
            ref_sched.step()
        assert inner.param_groups[0]["lr"] == pytest.approx(0.0125)
        assert opt.iteration == 6
        assert torch.equal(tc.flat(model), tc.flat(ref))
    finally:
        opt.close()


@pytest.mark.parametrize("compression,sized", [("dense", True),
                                               ("topk:0.1", False)])
def test_a_dense_optimizer_sizes_its_push_window_to_the_link(
        shards, caplog, monkeypatch, compression, sized):
    monkeypatch.delenv("FLPS_PUSH_WINDOW", raising=False)
    s = shards("pwin")[0]
    cfg = ft.Config("pwin", 0, 1, (s.endpoint,))
    model = tc.make_model(7)
    with caplog.at_level("INFO", logger="flps"):
        opt = ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            model.named_parameters(), config=cfg, compression=compression,
            deadline_ms=20000)
        opt.close()
    said = [r.getMessage() for r in caplog.records if r.name == "flps"]
    assert any(m.startswith("push window:") for m in said) == sized, said


def test_backward_pushes_each_gradient_as_it_is_written(shards):
    """torch's post-accumulate-grad hook where it has one (2.1+), else the
    AccumulateGrad node's hook: either way backward pushes, and the model
    stays what plain SGD makes of the same batches."""
    s = shards("hooks")[0]
    cfg = ft.Config("hooks", 0, 1, (s.endpoint,))
    model, ref = tc.make_model(3), tc.make_model(3)
    opt = ft.DistributedOptimizer(torch.optim.SGD(model.parameters(),
                                                  lr=0.1),
                                  model.named_parameters(), config=cfg,
                                  deadline_ms=20000)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x, y = tc.make_data(1, 3)
    try:
        for step in range(3):
            xb, yb = tc.batch(x, y, 1, step, 0)
            opt.zero_grad()
            pushes = opt.client.stats().pushes
            tc.loss_of(model, xb, yb).backward()
            assert all(opt._pushed), "backward should have pushed them all"
            assert opt.client.stats().pushes > pushes
            opt.step()
            ref_opt.zero_grad()
            tc.loss_of(ref, xb, yb).backward()
            ref_opt.step()
        assert torch.equal(tc.flat(model), tc.flat(ref))
        # A second backward before step() would push a gradient twice.
        tc.loss_of(model, xb, yb).backward()
        with pytest.raises(flps.StateError, match="produced twice"):
            tc.loss_of(model, xb, yb).backward()
    finally:
        opt.close()
    # close() removed the hooks: a backward now pushes nothing.
    model.zero_grad()
    opt._pushed = [False] * len(opt._pushed)
    tc.loss_of(model, xb, yb).backward()
    assert not any(opt._pushed)
