"""Fashion-MNIST training for the examples: the IDX reader, the loop, and
the two ways to run it (an flps job's worker, or plain PyTorch with
--local).  mlp.py and cnn.py give the models.

As a job's worker (``command:`` in the job file) the settings come from the
FLPS_* variables flrun and flagent set (docs/job-file.md); --local reads the
same variables when they are set and the flags otherwise.
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

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


def load(data_dir, split):
    """(images as float32 N x 1 x 28 x 28 in [0, 1], labels as int64 N)."""
    img_name, lab_name = FILES[split]
    for name in (img_name, lab_name):
        path = os.path.join(data_dir, name)
        if not os.path.exists(path):
            sys.exit("fmnist: %s is missing; install Debian's Fashion-MNIST "
                     "files there or set data_dir in the job file" % path)
    x = _read_idx(os.path.join(data_dir, img_name), 0x00000803, 3)
    y = _read_idx(os.path.join(data_dir, lab_name), 0x00000801, 1)
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def _env(name, default, kind=str):
    text = os.environ.get(name)
    return default if text in (None, "") else kind(text)


def settings(argv, description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--local", action="store_true",
                   help="train in this one process with plain PyTorch (no "
                        "flps), for comparison")
    p.add_argument("--iterations", type=int,
                   default=_env("FLPS_ITERATIONS", 1000, int))
    p.add_argument("--batch", type=int, default=_env("FLPS_BATCH", 32, int),
                   help="batch size of one worker")
    p.add_argument("--lr", type=float, default=_env("FLPS_LR", 0.05, float))
    p.add_argument("--momentum", type=float,
                   default=_env("FLPS_MOMENTUM", 0.9, float))
    p.add_argument("--seed", type=int, default=_env("FLPS_SEED", 1, int))
    p.add_argument("--eval-every", type=int,
                   default=_env("FLPS_EVAL_EVERY", 100, int))
    p.add_argument("--compression",
                   default=_env("FLPS_COMPRESSION", "dense"))
    p.add_argument("--data-dir", default=_env("FLPS_DATA_DIR",
                                              DEFAULT_DATA_DIR))
    p.add_argument("--mode", choices=("server", "gradient"),
                   default=_env("FLPS_TORCH_MODE", "server"),
                   help="how flps.torch applies the aggregate (docs/python.md): "
                        "server (default here: the shards run this SGD, with "
                        "the momentum applied before compression, as in "
                        "DGC) or gradient (torch's SGD steps on the averaged "
                        "gradient on every worker: momentum after "
                        "compression, which costs sparse codecs accuracy)")
    p.add_argument("--test-samples", type=int, default=10000,
                   help="evaluate on the first N test images")
    return p.parse_args(argv)


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


def main(make_model, description, argv=None):
    torch.set_num_threads(1)
    args = settings(sys.argv[1:] if argv is None else argv, description)
    if args.local:
        rank, workers = 0, 1
    else:
        import flps
        import flps.torch as ft
        cfg = ft.init()
        rank, workers = cfg.rank, cfg.workers
    torch.manual_seed(args.seed)  # every rank builds the same model
    model = make_model()
    xtr, ytr = load(args.data_dir, "train")
    xte, yte = load(args.data_dir, "test")
    xte, yte = xte[:args.test_samples], yte[:args.test_samples]
    # This rank's share of the training set: an iid shard.
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(xtr), generator=g)[rank::workers]
    xtr, ytr = xtr[order], ytr[order]
    opt = torch.optim.SGD(model.parameters(), lr=args.lr,
                          momentum=args.momentum)
    if not args.local:
        opt = ft.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(),
            compression=args.compression, mode=args.mode)
        report = flps.report
    else:
        def report(iteration, loss=None, accuracy=None, test_accuracy=None,
                   test_loss=None):
            if test_accuracy is not None:
                print("iter %d: test accuracy %.4f, test loss %.4f"
                      % (iteration, test_accuracy, test_loss), flush=True)
            elif iteration % max(1, args.iterations // 10) == 0:
                print("iter %d/%d  loss %.4f  acc %.4f"
                      % (iteration, args.iterations, loss, accuracy),
                      flush=True)
    every = max(1, min(50, args.iterations // 20))
    t0 = time.monotonic()
    pos, win_loss, win_correct, win_n = 0, 0.0, 0, 0
    perm = torch.randperm(len(xtr), generator=g)
    for it in range(args.iterations):
        if pos + args.batch > len(xtr):
            perm, pos = torch.randperm(len(xtr), generator=g), 0
        idx = perm[pos:pos + args.batch]
        pos += args.batch
        xb, yb = xtr[idx], ytr[idx]
        opt.zero_grad()
        out = model(xb)
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
            report(iteration=done, test_accuracy=acc, test_loss=tl)
    acc, tl = evaluate(model, xte, yte) if rank == 0 else (None, None)
    report(iteration=args.iterations, test_accuracy=acc, test_loss=tl)
    if not args.local:
        sent = opt.client.stats()
        opt.close()
        print("rank %d: %d iterations in %.1f s, sent %d bytes (%.2f%% of "
              "dense)" % (rank, args.iterations, time.monotonic() - t0,
                          sent.bytes_sent, 100 * sent.sent_share),
              file=sys.stderr)
    else:
        print('{"test_accuracy":%.4f,"iterations":%d,"wall_seconds":%.3f}'
              % (acc, args.iterations, time.monotonic() - t0))
