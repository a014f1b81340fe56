"""A two-hidden-layer MLP on Fashion-MNIST, as an flps job's workers or,
with --local, as plain PyTorch.

    flrun examples/torch/mlp.yaml
    python3 examples/torch/mlp.py --local --iterations 1000
"""

import os
import sys

import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402


def make_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


if __name__ == "__main__":
    fmnist.main(make_model, __doc__.splitlines()[0])
