"""The model, data and optimizers the torch tests train, shared by the
worker processes (torch_worker.py) and the single-process reference in the
tests, so both compute the very same gradients."""

import torch

IN, HIDDEN, OUT, BATCH = 8, 16, 4, 8


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, OUT))


def make_data(workers, steps):
    g = torch.Generator().manual_seed(1234)
    n = workers * steps * BATCH
    x = torch.randn(n, IN, generator=g)
    y = torch.randn(n, OUT, generator=g)
    return x, y


def batch(x, y, workers, step, rank):
    start = (step * workers + rank) * BATCH
    return x[start:start + BATCH], y[start:start + BATCH]


def loss_of(model, xb, yb):
    return torch.nn.functional.mse_loss(model(xb), yb)


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=0.01)
    raise ValueError(name)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
