"""Fashion-MNIST training for the examples: the IDX reader, the loop, and
the three ways to run it (an flps job's worker; plain PyTorch in one
process with --local; PyTorch's own DistributedDataParallel with --ddp).
mlp.py and cnn.py give the models.

As a job's worker (``command:`` in the job file) the settings come from the
FLPS_* variables flrun and flagent set (docs/job-file.md); --local and
--ddp read the same variables when they are set and the flags otherwise.

--ddp trains with torch.distributed (gloo) and DistributedDataParallel,
one process per rank, placed the way torchrun places them (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment), with PyTorch's
gradient compression hooks (--ddp-hook fp16 or powersgd): the peers
bench/cluster measures flps against. Its events are flworker's JSON lines
(progress, eval with elapsed_s, done), so bench/cluster records both alike.
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flworker_like  # noqa: E402

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def _read_idx(path, magic, ndim):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        raise ValueError("%s is not an IDX file with %d dimensions (magic "
                         "0x%08x, expected 0x%08x)" % (path, ndim, got, magic))
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError("%s holds %d bytes of data, its header says %s"
                         % (path, body.size, dims))
    return body.reshape(dims)


def load(data_dir, split, flworker=False):
    """(images as float32 N x 1 x 28 x 28, labels as int64 N): pixels in
    [0, 1], or normalised as flworker reads them when flworker is true."""
    img_name, lab_name = FILES[split]
    for name in (img_name, lab_name):
        path = os.path.join(data_dir, name)
        if not os.path.exists(path):
            sys.exit("fmnist: %s is missing; install Debian's Fashion-MNIST "
                     "files there or set data_dir in the job file" % path)
    x = _read_idx(os.path.join(data_dir, img_name), 0x00000803, 3)
    y = _read_idx(os.path.join(data_dir, lab_name), 0x00000801, 1)
    x = flworker_like.normalise(x) if flworker else \
        x.astype(np.float32) / 255.0
    x = torch.from_numpy(x).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def _env(name, default, kind=str):
    text = os.environ.get(name)
    return default if text in (None, "") else kind(text)


def settings(argv, description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--local", action="store_true",
                   help="train in this one process with plain PyTorch (no "
                        "flps), for comparison")
    p.add_argument("--events", action="store_true",
                   help="with --local: flworker's event lines on stdout, as "
                        "--ddp prints them, instead of the plain progress "
                        "(bench/cluster's compute peer: W of these at once, "
                        "one per host, time an iteration with no "
                        "communication)")
    p.add_argument("--iterations", type=int,
                   default=_env("FLPS_ITERATIONS", 1000, int))
    p.add_argument("--batch", type=int, default=_env("FLPS_BATCH", 32, int),
                   help="batch size of one worker")
    p.add_argument("--optimizer", choices=OPTIMIZERS,
                   default=_env("FLPS_TORCH_OPTIMIZER", "sgd"),
                   help="the torch optimizer: sgd (with --momentum), adam or "
                        "adamw (torch's defaults, --lr; a job file's lr: "
                        "0.001 suits them)")
    p.add_argument("--lr", type=float, default=_env("FLPS_LR", 0.05, float))
    p.add_argument("--momentum", type=float,
                   default=_env("FLPS_MOMENTUM", 0.9, float),
                   help="SGD's momentum")
    p.add_argument("--lr-schedule", choices=("constant", "cosine"),
                   default="constant",
                   help="constant (default), or cosine: lr * (1 + cos(pi * "
                        "t / iterations)) / 2 at step t, as a job's "
                        "lr_schedule: cosine (the flag, not FLPS_LR_SCHEDULE, "
                        "decides)")
    p.add_argument("--seed", type=int, default=_env("FLPS_SEED", 1, int))
    p.add_argument("--eval-every", type=int,
                   default=_env("FLPS_EVAL_EVERY", 100, int))
    p.add_argument("--compression",
                   default=_env("FLPS_COMPRESSION", "dense"))
    p.add_argument("--data-dir", default=_env("FLPS_DATA_DIR",
                                              DEFAULT_DATA_DIR))
    p.add_argument("--mode", choices=("server", "gradient"),
                   default=_env("FLPS_TORCH_MODE", None),
                   help="how flps.torch applies the aggregate (docs/python.md): "
                        "server (the default for sgd: the shards run this "
                        "SGD, with the momentum applied before compression, "
                        "as in DGC) or gradient (the default for adam and "
                        "adamw, which the shards cannot run: torch's "
                        "optimizer steps on every worker)")
    p.add_argument("--correction", choices=("auto", "update", "none"),
                   default=_env("FLPS_TORCH_CORRECTION", "auto"),
                   help="gradient mode's correction for a sparse codec "
                        "(docs/python.md): auto (update with a sparse "
                        "codec), update (each worker's optimizer step is "
                        "compressed and averaged) or none (the optimizer "
                        "steps on the averaged sparse gradient)")
    p.add_argument("--device", default=_env("FLPS_TORCH_DEVICE", "cpu"),
                   help="where the model and the data live: cpu (default) "
                        "or cuda, flps.torch's GPU path (top-k selected on "
                        "the GPU; needs --mode gradient, the default for "
                        "adam and adamw)")
    p.add_argument("--test-samples", type=int, default=10000,
                   help="evaluate on the first N test images")
    p.add_argument("--flworker-data", action="store_true",
                   help="the data, its order per rank and the initial "
                        "weights of flps's built-in worker (flworker_like.py:"
                        " normalised pixels, its iid partition and shuffles, "
                        "its He-uniform init; the MLP only)")
    p.add_argument("--ddp", action="store_true",
                   help="train with torch.distributed (gloo) and "
                        "DistributedDataParallel instead of flps, one "
                        "process per rank from torchrun's variables (RANK, "
                        "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
    p.add_argument("--ddp-hook", choices=("allreduce", "fp16", "powersgd"),
                   default="allreduce",
                   help="--ddp's gradient communication: allreduce (DDP's "
                        "default), fp16 (fp16_compress_hook) or powersgd "
                        "(powerSGD_hook)")
    p.add_argument("--powersgd-rank", type=int, default=2,
                   help="PowerSGD's matrix_approximation_rank (default 2)")
    p.add_argument("--powersgd-start", type=int, default=None,
                   help="PowerSGD's start_powerSGD_iter: plain allreduce "
                        "before it (default: iterations / 10, at least 2)")
    args = p.parse_args(argv)
    if args.mode is None:
        args.mode = "server" if args.optimizer == "sgd" else "gradient"
    if args.ddp and args.local:
        p.error("--ddp and --local are two different ways to run: pick one")
    if args.events and not args.local:
        p.error("--events goes with --local (--ddp prints the event lines "
                "always; an flps job reports through flps.report)")
    if args.powersgd_start is None:
        args.powersgd_start = max(2, args.iterations // 10)
    if args.powersgd_start < 2:
        p.error("--powersgd-start must be at least 2 (PowerSGD's error "
                "feedback and warm start begin after DDP's first iterations)")
    return args


OPTIMIZERS = ("sgd", "adam", "adamw")


def make_optimizer(args, params):
    """The --optimizer over params: SGD with --lr and --momentum, or Adam /
    AdamW with --lr and torch's other defaults."""
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=args.lr)
    return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)


def evaluate(model, x, y):
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            out = model(x[i:i + 1000])
            loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return correct / len(x), loss / len(x)


def lr_at(args, it):
    """The learning rate of step it (0 first), as the shards compute it."""
    if args.lr_schedule == "cosine" and args.iterations > 0:
        return args.lr * 0.5 * (1.0 + math.cos(
            math.pi * min(it, args.iterations) / args.iterations))
    return args.lr


class Events:
    """flworker's event lines on stdout, for --ddp and --local --events:
    rank 0's progress and evaluations (with elapsed_s, seconds since the
    training loop began), every rank's done event (no byte counts: DDP has
    none to give, --local sends none)."""

    def __init__(self, rank, args, t0):
        self.rank, self.args, self.t0 = rank, args, t0
        self.acc = self.loss = None

    def _emit(self, ev):
        sys.stdout.write(json.dumps(ev, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def __call__(self, iteration, loss=None, accuracy=None,
                 test_accuracy=None, test_loss=None, elapsed_s=None):
        if self.rank != 0:
            return
        if test_accuracy is not None:
            self.acc, self.loss = test_accuracy, test_loss
            self._emit({"event": "eval", "iter": iteration,
                        "test_accuracy": round(test_accuracy, 4),
                        "test_loss": round(test_loss, 4),
                        "elapsed_s": round(elapsed_s, 3)})
        else:
            self._emit({"event": "progress", "iter": iteration,
                        "iterations": self.args.iterations,
                        "loss": round(loss, 5), "accuracy": round(accuracy, 4),
                        "elapsed": round(time.monotonic() - self.t0, 3)})

    def done(self):
        ev = {"event": "done", "rank": self.rank,
              "iterations": self.args.iterations,
              "seconds": round(time.monotonic() - self.t0, 3)}
        if self.args.local:
            ev["system"] = "local"
        else:
            ev["ddp_hook"] = self.args.ddp_hook
        if self.args.ddp and self.args.ddp_hook == "powersgd":
            ev["powersgd_rank"] = self.args.powersgd_rank
            ev["powersgd_start"] = self.args.powersgd_start
        if self.acc is not None:
            ev["test_accuracy"] = round(self.acc, 4)
            ev["test_loss"] = round(self.loss, 4)
        self._emit(ev)


def ddp_wrap(model, args):
    """model in DistributedDataParallel with --ddp-hook's communication."""
    from torch.distributed.algorithms.ddp_comm_hooks import (
        default_hooks, powerSGD_hook)
    from torch.nn.parallel import DistributedDataParallel

    if args.ddp_hook == "powersgd":
        # One bucket: the hook chains its allreduces in callbacks, and with
        # several buckets in flight the ranks can issue them to gloo in
        # different orders (they then pair up wrong and gloo aborts). The
        # first bucket's own cap is the knob DDP documents for that.
        import torch.distributed as dist
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        dist._DEFAULT_FIRST_BUCKET_BYTES = size
        ddp = DistributedDataParallel(model, bucket_cap_mb=size / 2**20 + 1)
    else:
        ddp = DistributedDataParallel(model)
    if args.ddp_hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.ddp_hook == "powersgd":
        # warm_start and use_error_feedback as PowerSGD's defaults.
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=args.powersgd_start)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp


def main(make_model, description, argv=None, flworker_init=None):
    """Train make_model().  flworker_init(model, seed): what
    --flworker-data sets the initial weights with (flworker's init of this
    model); without it --flworker-data is refused."""
    torch.set_num_threads(1)
    args = settings(sys.argv[1:] if argv is None else argv, description)
    if args.flworker_data and flworker_init is None:
        sys.exit("fmnist: --flworker-data: flps's worker has no model like "
                 "this one to copy the initial weights of (mlp.py has)")
    if args.local:
        rank, workers = 0, 1
    elif args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, workers = dist.get_rank(), dist.get_world_size()
    else:
        import flps
        import flps.torch as ft
        cfg = ft.init()
        rank, workers = cfg.rank, cfg.workers
    torch.manual_seed(args.seed)  # every rank builds the same model
    device = torch.device(args.device)
    model = make_model()
    if args.flworker_data:
        flworker_init(model, args.seed)
    model = model.to(device)
    xtr, ytr = load(args.data_dir, "train", args.flworker_data)
    xte, yte = load(args.data_dir, "test", args.flworker_data)
    xte, yte = xte[:args.test_samples].to(device), \
        yte[:args.test_samples].to(device)
    # This rank's share of the training set: an iid shard, and the order
    # its batches take.
    g = torch.Generator().manual_seed(args.seed)
    if args.flworker_data:
        order = torch.tensor(flworker_like.iid_slice(len(xtr), workers, rank,
                                                     args.seed))
        batches = flworker_like.batches(range(len(order)), args.batch,
                                        args.seed, rank)
    else:
        order = torch.randperm(len(xtr), generator=g)[rank::workers]
        batches = None
    xtr, ytr = xtr[order].to(device), ytr[order].to(device)
    opt = make_optimizer(args, model.parameters())
    net = model
    if args.ddp:
        net = ddp_wrap(model, args)
    elif not args.local:
        cosine = {"iterations": args.iterations, "lr_cosine": True} \
            if args.lr_schedule == "cosine" else {}
        opt = ft.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(),
            compression=args.compression, mode=args.mode,
            correction=args.correction, **cosine)
        report = flps.report
    else:
        def local_report(iteration, loss=None, accuracy=None,
                         test_accuracy=None, test_loss=None, elapsed_s=None):
            if test_accuracy is not None:
                print("iter %d: test accuracy %.4f, test loss %.4f"
                      % (iteration, test_accuracy, test_loss), flush=True)
            elif iteration % max(1, args.iterations // 10) == 0:
                print("iter %d/%d  loss %.4f  acc %.4f"
                      % (iteration, args.iterations, loss, accuracy),
                      flush=True)
        report = local_report
    # flps.torch applies a schedule it is given (the shards in server mode,
    # the wrapped optimizer's lr in gradient mode: setting lr here too
    # would decay it twice); this loop does otherwise (--local, --ddp, a
    # world of one).
    own_lr = args.local or args.ddp or opt.client is None
    # Progress as often as flworker reports it (every iterations / 100):
    # the median of its intervals is bench/cluster's time per iteration.
    every = max(1, args.iterations // 100)
    t0 = time.monotonic()  # elapsed_s counts from here, as flworker's does
    if args.ddp or args.events:
        report = Events(rank, args, t0)
    pos, win_loss, win_correct, win_n = 0, 0.0, 0, 0
    if batches is None:
        perm = torch.randperm(len(xtr), generator=g)
    for it in range(args.iterations):
        if batches is not None:
            idx = torch.tensor(next(batches)).to(device)
        else:
            if pos + args.batch > len(xtr):
                perm, pos = torch.randperm(len(xtr), generator=g), 0
            idx = perm[pos:pos + args.batch].to(device)
            pos += args.batch
        xb, yb = xtr[idx], ytr[idx]
        if own_lr and args.lr_schedule != "constant":
            for group in opt.param_groups:
                group["lr"] = lr_at(args, it)
        opt.zero_grad()
        out = net(xb)
        loss = F.cross_entropy(out, yb)
        loss.backward()
        opt.step()
        win_loss += loss.item() * len(yb)
        win_correct += (out.argmax(1) == yb).sum().item()
        win_n += len(yb)
        done = it + 1
        if done % every == 0 or done == args.iterations:
            report(iteration=done, loss=win_loss / win_n,
                   accuracy=win_correct / win_n)
            win_loss, win_correct, win_n = 0.0, 0, 0
        if rank == 0 and args.eval_every > 0 and \
                done % args.eval_every == 0 and done < args.iterations:
            acc, tl = evaluate(model, xte, yte)
            report(iteration=done, test_accuracy=acc, test_loss=tl,
                   elapsed_s=time.monotonic() - t0)
    acc, tl = evaluate(model, xte, yte) if rank == 0 else (None, None)
    report(iteration=args.iterations, test_accuracy=acc, test_loss=tl,
           elapsed_s=time.monotonic() - t0 if rank == 0 else None)
    if args.ddp or args.events:
        report.done()
        if args.ddp:
            import torch.distributed as dist
            # Leave together: a rank that tore gloo down while rank 0
            # still evaluated aborted once at exit ("terminate called
            # without an active exception", a PowerSGD run of the MLP).
            dist.barrier()
            dist.destroy_process_group()
    elif not args.local and opt.client is not None:  # not a world of one
        sent = opt.client.stats()
        opt.close()
        print("rank %d: %d iterations in %.1f s, sent %d bytes (%.2f%% of "
              "dense)" % (rank, args.iterations, time.monotonic() - t0,
                          sent.bytes_sent, 100 * sent.sent_share),
              file=sys.stderr)
    else:
        print('{"test_accuracy":%.4f,"iterations":%d,"wall_seconds":%.3f}'
              % (acc, args.iterations, time.monotonic() - t0))
