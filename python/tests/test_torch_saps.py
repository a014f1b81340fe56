"""flps.torch.DistributedOptimizer(mode="saps"): two workers as threads of
this process average their parameters exactly at density 1; the job
file's mode: saps chooses it and refuses a mode or compression that says
otherwise; under flrun a PyTorch program's summary has the saps rounds,
the exchanges and the consensus."""

import pytest

torch = pytest.importorskip("torch")

import flps  # noqa: E402
import flps.torch as ft  # noqa: E402

from test_saps import (free_endpoints, flrun_summary, run_workers,  # noqa
                       secret)

torch.set_num_threads(1)


def saps_env(workers, density="1", local_steps="1"):
    return {"FLPS_JOB": "torchsaps", "FLPS_WORKERS": str(workers),
            "FLPS_PEERS": free_endpoints(workers), "FLPS_MODE": "saps",
            "FLPS_JOB_KEYS": "mode,saps_density,local_steps",
            "FLPS_SAPS_DENSITY": density, "FLPS_LOCAL_STEPS": local_steps,
            "FLPS_SEED": "3", "FLPS_PEER_DEADLINE": "20"}


def test_a_step_averages_the_parameters_with_the_peer(secret):  # noqa: F811
    env = saps_env(2)

    def worker(rank):
        model = torch.nn.Linear(4, 3)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(rank))
        # lr 0: the step leaves the model, the exchange averages it.
        opt = ft.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.0),
            model.named_parameters(), environ=dict(env, FLPS_RANK=str(rank)))
        assert opt.mode == "saps"
        assert isinstance(opt, ft.DistributedOptimizer)
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
        after = [p.detach().clone() for p in model.parameters()]
        avg, info = opt.consensus()
        opt.close()
        return after, avg, info, opt.last_round

    out = run_workers(worker, 2)
    for rank in (0, 1):
        after, _, info, last = out[rank]
        assert last["peer"] == 1 - rank and last["exchanged"]
        # Density 1: every value is the pair's mean.
        assert all(torch.all(p == 0.5) for p in after)
        assert info["coordinator"] == 0
    assert out[0][2]["averaged"] == 2
    assert out[0][1] is not None and out[1][1] is None
    assert all(torch.all(a == 0.5) for a in out[0][1])
    assert out[0][2]["distance"] == pytest.approx(0.0, abs=1e-6)


def test_the_job_files_saps_refuses_what_contradicts_it(monkeypatch):
    model = torch.nn.Linear(2, 1)
    env = saps_env(2)
    with monkeypatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        with pytest.raises(flps.ConfigError, match="mode: saps"):
            ft.DistributedOptimizer(
                torch.optim.SGD(model.parameters(), lr=0.1),
                model.named_parameters(), mode="gradient")
    with pytest.raises(flps.ConfigError, match="saps_density"):
        ft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                model.named_parameters(), mode="saps",
                                compression="topk:0.01", environ=env)
    with pytest.raises(flps.ConfigError, match="FLPS_LOCAL_STEPS"):
        ft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                model.named_parameters(), mode="saps",
                                local_steps=3, environ=env)


PROGRAM = r"""
import torch
import flps.torch as ft
torch.set_num_threads(1)
torch.manual_seed(1)  # the same start on every worker
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 2))
opt = ft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                              model.named_parameters())
assert opt.mode == "saps", opt
x = torch.randn(64, 8)
y = (x[:, 0] > 0).long()
for i in range(40):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
opt.close()
"""


def test_under_flrun_a_torch_program_trains_saps(tmp_path):
    summary = flrun_summary(
        tmp_path, PROGRAM,
        "name: torchsaps\nworkers: 3\nmode: saps\niterations: 40\n"
        "local_steps: 2\nsaps_density: 0.1\n", timeout=180)
    assert summary["mode"] == "saps"
    assert summary["rounds"] == 20
    # Three workers: one idle a round, the other two exchange.
    assert summary["exchanges"] == 2 * 20
    assert summary["matchings_agree"] is True
    assert summary["consensus_workers"] == 3
    assert summary["workers_lost"] == []
