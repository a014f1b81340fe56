"""One worker process of the torch tests: trains train_common's model with
flps.torch.DistributedOptimizer and saves its parameters.

usage: torch_worker.py OUT.pt  (settings in FLPS_* and TEST_* variables)
"""

import os
import sys

import torch

import flps.torch as ft
import train_common as tc


def main():
    torch.set_num_threads(1)
    cfg = ft.init()
    steps = int(os.environ["TEST_STEPS"])
    model = tc.make_model(100 + cfg.rank)  # each rank starts elsewhere
    before = tc.flat(model).clone()
    opt = ft.DistributedOptimizer(
        tc.make_optimizer(os.environ["TEST_OPTIMIZER"], model.parameters()),
        named_parameters=model.named_parameters(),
        compression=os.environ.get("TEST_COMPRESSION", "dense"),
        mode=os.environ.get("TEST_MODE", "gradient"),
        selection=os.environ.get("TEST_SELECTION", "auto"),
        correction=os.environ.get("TEST_CORRECTION", "auto"),
        overlap=os.environ.get("TEST_OVERLAP") == "1" or None,
        deadline_ms=60000)
    synced = tc.flat(model).clone()
    x, y = tc.make_data(cfg.workers, steps)
    losses, per_step = [], []
    for step in range(steps):
        sent_before = opt.client.stats().elements_sent
        xb, yb = tc.batch(x, y, cfg.workers, step, cfg.rank)
        opt.zero_grad()
        loss = tc.loss_of(model, xb, yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        per_step.append(opt.client.stats().elements_sent - sent_before)
    stats = opt.client.stats()
    torch_layers = sum(s is not None for s in opt.selectors)
    residual = [s.residual.clone() for s in opt.selectors if s is not None]
    pending = opt.overlap and opt._deferred is not None
    opt.close()
    torch.save({"before": before, "synced": synced, "final": tc.flat(model),
                "losses": losses, "bytes_sent": stats.bytes_sent,
                "dense_bytes": stats.dense_bytes,
                "elements_sent": stats.elements_sent, "per_step": per_step,
                "density_warmup": opt.client.density_warmup,
                "density_warmup_start": opt.client.density_warmup_start,
                "torch_layers": torch_layers, "residual": residual,
                "overlap": opt.overlap, "pending_at_close": pending},
               sys.argv[1])


if __name__ == "__main__":
    main()
