"""The CNN of the sparse-communication papers on Fashion-MNIST (conv 5x5x32
-> relu -> pool -> conv 5x5x64 -> relu -> pool -> fc 1024 -> relu -> fc 10),
as an flps job's workers, with --local as plain PyTorch, or with --ddp as
PyTorch's DistributedDataParallel (bench/cluster's DDP peers of the
torch-cnn model).

    flrun examples/torch/cnn-gtopk.yaml
    python3 examples/torch/cnn.py --local --iterations 1000
"""

import os
import sys

import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(),
        nn.Linear(1024, 10))


if __name__ == "__main__":
    fmnist.main(make_model, __doc__.splitlines()[0])
