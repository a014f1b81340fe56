"""Federated semantic segmentation, as FedCV does it for vision tasks beyond
classification: a small encoder-decoder labels every pixel of 32x32
images of random shapes (circles, squares, triangles, crosses) over
textured backgrounds, trained with flps.fl by the job file's clients, and
reported as mean IoU over the five classes (background and the four
shapes).

The data set is made here, seeded, and written to disk once
(--data-dir, default $TMPDIR/flps-shapes: an .npz per seed and size; a
second run, or the other worker processes, read it). Each image has a
main shape class: one or two shapes of it, and sometimes one of another
class. That class is the image's label for the job's partition, so
`partition: dirichlet:0.5` gives each client skewed shape classes.

    flrun examples/torch/fl/seg-fedavg.yaml                 # federated
    python3 examples/torch/fl/segmentation.py --central \\
        --job examples/torch/fl/seg-fedavg.yaml              # central

--central trains the same model in one process on all the training data
for the same number of sample-steps as the job's federated run
(rounds x clients per round x local_steps x batch_size), with the same
optimizer and schedule, evaluating at the same points: the baseline
docs/federated.md holds the federated mean IoU against.
"""

import argparse
import fcntl
import json
import math
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZE = 32
SHAPES = ("circle", "square", "triangle", "cross")
CLASSES = len(SHAPES) + 1  # and the background, class 0
#: In the data set's file name: a change to make() changes it.
DATA_VERSION = 2


# ---- the data set ----

def _texture(rng, size):
    """A background: two coloured sinusoid gratings and noise."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    img = np.zeros((3, size, size), dtype=np.float32)
    for _ in range(2):
        f = rng.uniform(0.1, 0.6)
        a = rng.uniform(0, np.pi)
        wave = np.sin(f * (np.cos(a) * xx + np.sin(a) * yy) +
                      rng.uniform(0, 6.3))
        img += rng.uniform(0.03, 0.12, size=(3, 1, 1)) * wave
    img += rng.normal(0, 0.04, size=img.shape)
    return img + rng.uniform(0.15, 0.4, size=(3, 1, 1))


def _mask_of(kind, rng, size):
    """A boolean mask of one shape of class kind (1..4) at a random place
    and size."""
    yy, xx = np.mgrid[0:size, 0:size]
    r = rng.uniform(3.5, 7.5)
    cy, cx = rng.uniform(r, size - r, size=2)
    dy, dx = yy - cy, xx - cx
    if kind == 1:
        return dy * dy + dx * dx <= r * r
    if kind == 2:
        return (np.abs(dy) <= r * 0.85) & (np.abs(dx) <= r * 0.85)
    if kind == 3:  # pointing up: below the apex, inside both edges
        return (dy <= r * 0.8) & (dy >= -r) & (
            np.abs(dx) <= (dy + r) * 0.6)
    w = r * 0.35
    return ((np.abs(dy) <= w) & (np.abs(dx) <= r)) | (
        (np.abs(dx) <= w) & (np.abs(dy) <= r))


def make(n, seed, size=SIZE):
    """n images (uint8, n x 3 x size x size), their masks (uint8 class per
    pixel) and main classes (0..3, the shape class the partition splits
    by), from seed."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 3, size, size), dtype=np.uint8)
    m = np.zeros((n, size, size), dtype=np.uint8)
    main = rng.integers(0, len(SHAPES), size=n)
    for i in range(n):
        img = _texture(rng, size)
        mask = np.zeros((size, size), dtype=np.uint8)
        kinds = [main[i] + 1] * int(rng.integers(1, 3))
        if rng.random() < 0.3:
            kinds.append(int(rng.integers(1, len(SHAPES) + 1)))
        for k in kinds:
            sh = _mask_of(k, rng, size)
            img[:, sh] = rng.uniform(0.55, 1, size=(3, 1))
            mask[sh] = k
        x[i] = np.clip(img * 255, 0, 255).astype(np.uint8)
        m[i] = mask
    return x, m, main.astype(np.int64)


def load(data_dir, n_train, n_test, seed):
    """The data set of seed: made and written to data_dir the first time
    (under a lock, so one worker process makes it), read after that.
    ((x, masks, main) of the training set, (x, masks) of the test set),
    x as float32 in [0, 1]."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, "shapes%d-%d-%d-%d-%d.npz"
                        % (DATA_VERSION, seed, n_train, n_test, SIZE))
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(path):
            xtr, mtr, ctr = make(n_train, seed)
            xte, mte, _ = make(n_test, seed + 1000003)
            tmp = path + ".tmp.npz"
            np.savez_compressed(tmp, xtr=xtr, mtr=mtr, ctr=ctr, xte=xte,
                                mte=mte)
            os.replace(tmp, path)
    d = np.load(path)

    def f32(a):
        return torch.from_numpy(a.astype(np.float32) / 255.0)

    return ((f32(d["xtr"]), torch.from_numpy(d["mtr"].astype(np.int64)),
             d["ctr"]),
            (f32(d["xte"]), torch.from_numpy(d["mte"].astype(np.int64))))


# ---- the model ----

class EncoderDecoder(nn.Module):
    """A small U-Net: two stages down, two up, skip connections."""

    def __init__(self, classes=CLASSES, width=8):
        super().__init__()
        w = width
        self.enc1 = nn.Sequential(nn.Conv2d(3, w, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(w, w, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(w, 2 * w, 3, stride=2,
                                            padding=1), nn.ReLU(),
                                  nn.Conv2d(2 * w, 2 * w, 3, padding=1),
                                  nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(2 * w, 4 * w, 3, stride=2,
                                           padding=1), nn.ReLU(),
                                 nn.Conv2d(4 * w, 4 * w, 3, padding=1),
                                 nn.ReLU())
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = nn.Sequential(nn.Conv2d(4 * w, 2 * w, 3, padding=1),
                                  nn.ReLU())
        self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = nn.Sequential(nn.Conv2d(2 * w, w, 3, padding=1),
                                  nn.ReLU())
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        d2 = self.dec2(torch.cat([self.up2(self.mid(e2)), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.head(d1)


def evaluate(model, x, m, classes=CLASSES):
    """(mean IoU over the classes, pixel accuracy, mean loss) on (x, m):
    per class, intersection over union of the predicted and true pixels
    summed over the whole set."""
    inter = torch.zeros(classes, dtype=torch.float64)
    union = torch.zeros(classes, dtype=torch.float64)
    correct, loss, was = 0, 0.0, model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(x), 250):
            out = model(x[i:i + 250])
            loss += F.cross_entropy(out, m[i:i + 250], reduction="sum").item()
            pred, true = out.argmax(1), m[i:i + 250]
            correct += (pred == true).sum().item()
            for k in range(classes):
                p, t = pred == k, true == k
                inter[k] += (p & t).sum().item()
                union[k] += (p | t).sum().item()
    model.train(was)
    present = union > 0
    miou = float((inter[present] / union[present]).mean())
    return miou, correct / m.numel(), loss / m.numel()


# ---- running it ----

def adam(params, lr, momentum):
    """The clients' optimizer (and the central run's): Adam, the job's
    momentum its first beta. An encoder-decoder learns the shapes in a
    few hundred Adam steps, where SGD needs thousands; a client's Adam
    starts afresh each round, as flps.fl makes its optimizer anew."""
    return torch.optim.Adam(params, lr=lr, betas=(momentum, 0.999))


def settings_of_job(path):
    """The flat key: value pairs of a job file (the keys --central uses)."""
    import yaml

    with open(path) as f:
        return yaml.safe_load(f)


def central(args):
    """The job's model trained in one process on all the training data for
    the federated run's sample-steps; its evaluations printed as JSON."""
    job = settings_of_job(args.job)
    rounds, clients = int(job["rounds"]), int(job.get("clients", 1))
    per_round = max(1, min(clients, math.ceil(
        float(job.get("client_fraction", 1)) * clients - 1e-9)))
    steps_per_round = per_round * int(job.get("local_steps", 10))
    batch, lr = int(job.get("batch_size", 32)), float(job.get("lr", 0.05))
    momentum, seed = float(job.get("momentum", 0.9)), int(job.get("seed", 1))
    cosine = job.get("lr_schedule", "constant") == "cosine"
    (xtr, mtr, _), (xte, mte) = load(args.data_dir, args.train, args.test,
                                     seed)
    torch.manual_seed(seed)
    model = EncoderDecoder()
    opt = adam(model.parameters(), lr, momentum)
    g = torch.Generator().manual_seed(seed)
    perm, pos, last, t0 = torch.randperm(len(xtr), generator=g), 0, [], \
        time.monotonic()
    for r in range(rounds):
        for group in opt.param_groups:  # the federated run's schedule
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * r / rounds)) \
                if cosine else lr
        for _ in range(steps_per_round):
            if pos + batch > len(xtr):
                perm, pos = torch.randperm(len(xtr), generator=g), 0
            idx = perm[pos:pos + batch]
            pos += batch
            opt.zero_grad()
            F.cross_entropy(model(xtr[idx]), mtr[idx]).backward()
            opt.step()
        if r + 5 >= rounds or (r + 1) % int(job.get("eval_every", 5)) == 0:
            miou, acc, loss = evaluate(model, xte, mte)
            print(json.dumps({"event": "eval", "iter": r + 1,
                              "test_accuracy": round(acc, 4),
                              "test_loss": round(loss, 4),
                              "test_miou": round(miou, 4),
                              "elapsed_s": round(time.monotonic() - t0, 3)}),
                  flush=True)
            if r + 5 >= rounds:
                last.append(miou)
    print(json.dumps({"central": True, "sample_steps":
                      rounds * steps_per_round * batch,
                      "test_miou": round(last[-1], 4),
                      "test_miou_last5": round(float(np.mean(last)), 4)}),
          flush=True)


def federated(args):
    import flps.fl as fl

    fed_seed = int(os.environ.get("FLPS_SEED", "1") or 1)
    (xtr, mtr, ctr), (xte, mte) = load(args.data_dir, args.train, args.test,
                                       fed_seed)
    torch.manual_seed(fed_seed)
    fed = fl.Federation(EncoderDecoder(), labels=ctr, classes=len(SHAPES),
                        optimizer=lambda p, lr: adam(p, lr,
                                                     fed.settings.momentum))

    def step(model, idx):
        return F.cross_entropy(model(xtr[idx]), mtr[idx])

    def test(model):
        miou, acc, loss = evaluate(model, xte, mte)
        return {"test_accuracy": acc, "test_loss": loss, "test_miou": miou}

    result = fed.run(step, test)
    if fed.rank == 0:
        print("flps.fl segmentation: mean IoU %.4f (last five %.4f), pixel "
              "accuracy %.4f" % (result.test_miou, result.test_miou_last5,
                                 result.test_accuracy), file=sys.stderr)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--central", action="store_true",
                   help="train centrally for the job's sample-steps (with "
                        "--job)")
    p.add_argument("--job", help="the job file --central follows")
    p.add_argument("--data-dir", default=os.path.join(
        tempfile.gettempdir(), "flps-shapes"))
    p.add_argument("--train", type=int, default=6000,
                   help="training images (default 6000)")
    p.add_argument("--test", type=int, default=1000,
                   help="test images (default 1000)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.central:
        if not args.job:
            p.error("--central needs --job JOB.yaml (the run to match)")
        central(args)
    else:
        federated(args)


if __name__ == "__main__":
    main()
