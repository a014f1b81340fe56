"""A two-hidden-layer MLP on Fashion-MNIST (784-256-128-10, the layers of
flps's built-in mlp), as an flps job's workers, with --local as plain
PyTorch, or with --ddp as PyTorch's DistributedDataParallel; with
--flworker-data it starts from the built-in mlp's weights and trains on its
data in its order (bench/cluster's DDP peers of the built-in MLP).

    flrun examples/torch/mlp.yaml
    python3 examples/torch/mlp.py --local --iterations 1000
"""

import os
import sys

import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402
import flworker_like  # noqa: E402


def make_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def flworker_init(model, seed):
    """The built-in mlp's initial weights (worker/model.c) from seed."""
    flworker_like.he_uniform_([m for m in model if isinstance(m, nn.Linear)],
                              seed)


if __name__ == "__main__":
    fmnist.main(make_model, __doc__.splitlines()[0],
                flworker_init=flworker_init)
