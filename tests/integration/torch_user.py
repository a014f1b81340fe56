"""A new user's PyTorch program, written from docs/python.md alone: a
784-128-10 MLP trained with torch.optim.Adam on Fashion-MNIST through
flps.torch, with no compression argument and no flps.report.  The job file
says how it runs (compression, mode); run directly it trains alone.

    python3 torch_user.py [--iterations N] [--compression C]

It prints its loss every 25 steps and rank 0's test accuracy at the end.
--compression passes compression= to the optimizer (to see a
contradiction of the job file refused).
"""

import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn.functional as F

import flps.torch as ft

DATA = os.environ.get("FLPS_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def idx(name, offset):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def images(name):
    return torch.from_numpy(idx(name, 16).astype(np.float32) / 255.0) \
        .reshape(-1, 784)


def labels(name):
    return torch.from_numpy(idx(name, 8).astype(np.int64))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int,
                   default=int(os.environ.get("FLPS_ITERATIONS", "200")))
    p.add_argument("--compression")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = ft.init()  # alone (no launcher): a world of one
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    extra = {} if args.compression is None else {
        "compression": args.compression}
    opt = ft.DistributedOptimizer(torch.optim.Adam(model.parameters(),
                                                   lr=1e-3),
                                  named_parameters=model.named_parameters(),
                                  **extra)
    x, y = images("train-images-idx3-ubyte.gz"), \
        labels("train-labels-idx1-ubyte.gz")
    mine = torch.arange(cfg.rank, len(x), cfg.workers)
    g = torch.Generator().manual_seed(cfg.rank)
    for step in range(args.iterations):
        pick = mine[torch.randint(len(mine), (32,), generator=g)]
        opt.zero_grad()
        loss = F.cross_entropy(model(x[pick]), y[pick])
        loss.backward()
        opt.step()
        if step % 25 == 0 or step + 1 == args.iterations:
            print("rank %d step %d loss %.4f" % (cfg.rank, step, loss.item()),
                  flush=True)
    if cfg.rank == 0:
        xt, yt = images("t10k-images-idx3-ubyte.gz")[:2000], \
            labels("t10k-labels-idx1-ubyte.gz")[:2000]
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        print("test accuracy %.4f" % acc, flush=True)
    opt.close()


if __name__ == "__main__":
    main()
