"""Gradient mode's update exchange (correction "update", the default with
a sparse codec): each worker's optimizer steps on its own gradient, taken
at the common model plus the worker's steps not sent yet; the steps go to
the shards as top-k pairs with error feedback. Checked against a written-
out reference, its invariant, and the combinations that are refused."""

import warnings

import pytest

torch = pytest.importorskip("torch")

import flps  # noqa: E402
import flps.torch as ft  # noqa: E402
import train_common as tc  # noqa: E402
from test_torch import W, run_workers  # noqa: E402

torch.set_num_threads(1)


def top_k(a, k):
    """The k largest |a|, ties to the lower index, ascending (a stable
    sort, independent of flps.torch's selection)."""
    order = torch.sort(-a.abs(), stable=True)[1]
    return torch.sort(order[:k])[0]


def reference_updates(steps, optimizer, density):
    """The update exchange of W workers with gtopk:density, in one process,
    written out: worker p's model is the common model minus its residual
    r_p; its optimizer steps there on its own gradient; a = r_p + (before -
    after) (pushed as a gradient: minus the step); the k largest |a| are
    sent, r_p = a without them; the shard sums the pushes in rank order,
    keeps the k largest |sum| (ties to the lower index), the pairs it left
    out go back to their residuals, and the common model moves by -sum/W
    on what it kept.  Returns the common model."""
    common = [p.detach().reshape(-1).clone()
              for p in tc.make_model(100).parameters()]  # rank 0's
    models = [tc.make_model(100 + rank) for rank in range(W)]
    opts = [tc.make_optimizer(optimizer, m.parameters()) for m in models]
    resid = [[torch.zeros_like(c) for c in common] for _ in range(W)]
    x, y = tc.make_data(W, steps)
    for step in range(steps):
        pushes = []
        for rank, m in enumerate(models):
            with torch.no_grad():
                for p, c, r in zip(m.parameters(), common, resid[rank]):
                    p.view(-1).copy_(c)
                    p.view(-1).sub_(r)
            before = [p.detach().reshape(-1).clone() for p in m.parameters()]
            m.zero_grad()
            tc.loss_of(m, *tc.batch(x, y, W, step, rank)).backward()
            opts[rank].step()
            sent = []
            for i, p in enumerate(m.parameters()):
                a = resid[rank][i] + before[i].sub_(p.detach().reshape(-1))
                idx = top_k(a, max(int(density * a.numel()), 1))
                sent.append((idx, a[idx].clone()))
                a[idx] = 0
                resid[rank][i] = a
            pushes.append(sent)
        for i, c in enumerate(common):
            k = max(int(density * c.numel()), 1)
            total = torch.zeros_like(c)
            touched = torch.zeros(c.numel(), dtype=torch.bool)
            for sent in pushes:
                total.index_add_(0, *sent[i])
                touched[sent[i][0]] = True
            kept = touched.clone()
            t = torch.nonzero(touched).reshape(-1)
            if t.numel() > k:
                kept[:] = False
                kept[t[top_k(total[t], k)]] = True
            for rank, sent in enumerate(pushes):
                idx, val = sent[i]
                left = ~kept[idx]
                resid[rank][i].index_add_(0, idx[left], val[left])
            u = torch.nonzero(kept).reshape(-1)
            c.index_add_(0, u, -(1.0 / W) * total[u])
    return torch.cat(common)


def test_two_workers_train_as_the_written_out_update_exchange(shards,
                                                              tmp_path):
    steps = 20
    s = shards("upd2")[0]
    results = run_workers(s, "upd2", tmp_path, steps, "adam",
                          compression="gtopk:0.1")
    want = reference_updates(steps, "adam", 0.1)
    assert (want - results[0]["synced"]).abs().max() > 1e-2, \
        "training should move the parameters"
    for rank, r in enumerate(results):
        assert r["torch_layers"] == 4, "every layer selected in torch"
        diff = (r["final"] - want).abs().max().item()
        assert diff < 1e-5, "rank %d is %.3g from the reference" % (rank,
                                                                    diff)
    # Every worker holds the common model; their residuals differ.
    assert torch.equal(results[0]["final"], results[1]["final"])
    assert not all(torch.equal(a, b) for a, b in zip(results[0]["residual"],
                                                     results[1]["residual"]))


@pytest.mark.parametrize("optimizer, sync_mode", [
    ("adam", "ssgd"), ("sgd", "ssgd"), ("adam", "async")])
def test_one_worker_s_own_model_is_plain_training_and_lags_by_its_residual(
        shards, optimizer, sync_mode):
    """Error feedback's invariant on the parameters: everything the worker
    sent (the common model's moves) plus its residual is everything its
    optimizer stepped, so with one worker its own model (common model -
    residual), where it takes its gradients, trains exactly as plain
    torch; and a forward without gradients sees the common model.
    Asynchronous too: the common model is then the one each wait pulls."""
    job = "upd1-%s-%s" % (optimizer, sync_mode)
    s = shards(job)[0]
    model, ref = tc.make_model(9), tc.make_model(9)
    opt = ft.DistributedOptimizer(
        tc.make_optimizer(optimizer, model.parameters()),
        model.named_parameters(), compression="gtopk:0.1",
        sync_mode=sync_mode, config=ft.Config(job, 0, 1, (s.endpoint,)),
        deadline_ms=20000)
    ref_opt = tc.make_optimizer(optimizer, ref.parameters())
    assert opt.correction == "update"
    assert opt.client.mode == sync_mode
    x, y = tc.make_data(1, 12)
    try:
        for step in range(12):
            xb, yb = tc.batch(x, y, 1, step, 0)
            common = tc.flat(model).clone()
            with torch.no_grad():
                model(xb)
            assert torch.equal(tc.flat(model), common), \
                "evaluation sees the common model"
            opt.zero_grad()
            loss = tc.loss_of(model, xb, yb)  # now at the worker's model
            residual = torch.cat([sel.residual for sel in opt.selectors])
            assert torch.allclose(tc.flat(model), common - residual,
                                  atol=1e-7, rtol=0)
            loss.backward()
            opt.step()
            ref_opt.zero_grad()
            tc.loss_of(ref, xb, yb).backward()
            ref_opt.step()
            residual = torch.cat([sel.residual for sel in opt.selectors])
            own = tc.flat(model) - residual
            assert (own - tc.flat(ref)).abs().max() < 1e-5, step
        assert residual.abs().max() > 1e-4, "the common model lags"
    finally:
        opt.close()
    common = tc.flat(model).clone()
    model(xb).sum().backward()
    assert torch.equal(tc.flat(model), common), "close() removed the hook"


CFG = ft.Config("j", 0, 1, ("tcp://127.0.0.1:9",))


def make(optimizer, **kw):
    model = tc.make_model(1)
    kw.setdefault("compression", "gtopk:0.01")
    return ft.DistributedOptimizer(optimizer(model.parameters()),
                                   model.named_parameters(), config=CFG,
                                   deadline_ms=300, retry_ms=100, **kw)


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)


@pytest.mark.parametrize("optimizer, kw, why", [
    (adam, {"correction": "fix"}, "correction='fix': use"),
    (lambda p: torch.optim.LBFGS(p), {}, "LBFGS evaluates the loss"),
    (adam, {"correction": "update", "selection": "libflps"},
     "keeps each worker's residual in torch"),
    (adam, {"correction": "update", "compression": "qsgd:8"},
     r"needs compression \"topk:D\""),
    (lambda p: torch.optim.SGD(p, lr=0.1), {"correction": "update",
                                            "mode": "server"},
     "libflps corrects the momentum itself"),
    (lambda p: torch.optim.SparseAdam(p), {"compression": "dense"},
     "steps on sparse gradients only"),
])
def test_a_combination_that_cannot_run_is_refused_with_the_reason(
        optimizer, kw, why):
    with pytest.raises(flps.ConfigError, match=why):
        make(optimizer, **kw)


@pytest.mark.parametrize("optimizer, kw", [
    (adam, {"correction": "none"}),
    (adam, {"selection": "libflps"}),  # auto: no update exchange there
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
     {"correction": "none"}),
])
def test_stepping_on_the_averaged_sparse_gradient_warns(optimizer, kw):
    with pytest.warns(RuntimeWarning, match="lost up to 7 points"):
        with pytest.raises(flps.TimedOutError):
            make(optimizer, **kw)


@pytest.mark.parametrize("optimizer, kw", [
    (adam, {"compression": "dense"}),
    (lambda p: torch.optim.SGD(p, lr=0.1), {"correction": "none"}),
])
def test_dense_jobs_and_plain_sgd_need_no_correction(optimizer, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(flps.TimedOutError):
            make(optimizer, **kw)
