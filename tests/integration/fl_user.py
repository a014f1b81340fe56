"""A federated PyTorch program for the integration tests: a small MLP on a
seeded synthetic 4-class problem, trained with flps.fl under the job
file's settings.  FL_KILL=C:R makes client C kill its own process
(SIGKILL) in its first local step of round R: a client killed mid-round,
which must be late, not a failed job."""

import os
import signal

import torch
import torch.nn.functional as F

import flps.fl as fl

torch.set_num_threads(1)
torch.manual_seed(0)
N = 4000
x = torch.randn(N, 20)
y = (x @ torch.randn(20, 4)).argmax(1)
xt, yt = x[:1000], y[:1000]
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 4))
fed = fl.Federation(model, labels=y.numpy(), classes=4)
kill = tuple(int(v) for v in os.environ.get("FL_KILL", "-1:-1").split(":"))


def step(model, idx):
    if (fed.current_client, fed.current_round) == kill:
        os.kill(os.getpid(), signal.SIGKILL)
    return F.cross_entropy(model(x[idx]), y[idx])


def evaluate(model):
    with torch.no_grad():
        return float((model(xt).argmax(1) == yt).float().mean())


fed.run(step, evaluate)
