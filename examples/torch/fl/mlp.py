"""The PyTorch MLP of examples/torch/mlp.py (784-256-128-10) as federated
clients: a job file's mode: fedavg runs it with flps.fl, which gives the
program its rounds, the clients each process plays (sampled from the job's
seed exactly as flworker samples them), each client's Fashion-MNIST
samples (the job's partition of the labels) and the strategy (FedAvg,
FedProx's prox_mu, the shards' server_optimizer).

    flrun examples/torch/fl/mlp-fedavg.yaml
    python3 examples/torch/fl/mlp.py          # a world of one, same rounds

The data and the initial weights are flworker's (normalised pixels, its
He-uniform init from the seed), so a run is comparable with the built-in
mlp of examples/fmnist-mlp-fedavg.yaml.
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import fmnist  # noqa: E402
import mlp  # noqa: E402

import flps.fl as fl  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get(
        "FLPS_DATA_DIR", fmnist.DEFAULT_DATA_DIR))
    p.add_argument("--test-samples", type=int, default=10000)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    xtr, ytr = fmnist.load(args.data_dir, "train", flworker=True)
    xte, yte = fmnist.load(args.data_dir, "test", flworker=True)
    xte, yte = xte[:args.test_samples], yte[:args.test_samples]
    fed = fl.Federation(mlp.make_model(), labels=ytr.numpy(), classes=10)
    mlp.flworker_init(fed.model, fed.settings.seed)

    def step(model, idx):
        return F.cross_entropy(model(xtr[idx]), ytr[idx])

    def evaluate(model):
        acc, loss = fmnist.evaluate(model, xte, yte)
        return {"test_accuracy": acc, "test_loss": loss}

    result = fed.run(step, evaluate)
    if fed.rank == 0:
        print("flps.fl: %d rounds, test accuracy %.4f (last five %.4f), "
              "%d late client rounds" % (
                  result.rounds, result.test_accuracy,
                  result.test_accuracy_last5, result.late_clients),
              file=sys.stderr)


if __name__ == "__main__":
    main()
