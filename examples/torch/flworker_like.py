"""What flps's built-in worker (flworker) does before its first step, in
Python, so that a PyTorch program can train on exactly its data, order and
initial weights (fmnist.py --flworker-data; bench/cluster's DDP peers of
the built-in MLP).

- Pixels are normalised as worker/dataset.c does: (p / 255 - 0.2860) /
  0.3530, in float32.
- The iid partition is worker/partition.c's: one Fisher-Yates shuffle of
  0..n-1 from the job's seed (splitmix64, unbiased draws), cut into
  contiguous slices, rank r's slice r.
- Each rank then shuffles its slice (worker/flworker.c: splitmix64 outputs
  modulo i, seeded from seed * 1000003 + rank) and reads it in order,
  reshuffling the shuffled slice in place whenever it runs out (seeded
  from seed * 1000003 + rank + epoch * 7919): batches() yields the same
  indices flworker trains rank r on.
- Fully connected weights are He-uniform from one splitmix64 stream
  seeded with the job's seed, layer after layer (worker/model.c:
  bound * (2 * (z >> 40) / 2^24 - 1), bound = sqrt(6 / fan_in) in float32);
  biases are 0.

All of it is bit for bit what the C code computes (integer arithmetic
modulo 2^64 and float32 operations that round alike); the training steps
that follow are not (torch and OpenBLAS sum in other orders).
"""

import numpy as np
import torch

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
FMNIST_MEAN = np.float32(0.2860)
FMNIST_STD = np.float32(0.3530)


def splitmix64(state):
    """(new state, output) of common/rng.h's flps_splitmix64."""
    state = (state + GOLDEN) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def mix64(x):
    """flworker.c's mix64: one splitmix64 output for state x."""
    return splitmix64(x & MASK)[1]


def normalise(images):
    """uint8 images (any shape) -> float32 as worker/dataset.c reads them."""
    lut = (np.arange(256, dtype=np.float32) / np.float32(255.0)
           - FMNIST_MEAN) / FMNIST_STD
    return lut[images]


def iid_slice(n, workers, rank, seed):
    """Rank's indices of worker/partition.c's partition_iid (as a list)."""
    perm = list(range(n))
    state = seed & MASK
    for i in range(n, 1, -1):
        threshold = ((1 << 64) - i) % i  # (0 - bound) % bound in uint64
        while True:
            state, r = splitmix64(state)
            if r >= threshold:
                break
        j = r % i
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    base, extra = divmod(n, workers)
    start = rank * base + min(rank, extra)
    return perm[start:start + base + (rank < extra)]


def _shuffle(idx, seed):
    """flworker.c's shuffle(): Fisher-Yates with splitmix64 outputs mod i."""
    state = seed
    for i in range(len(idx), 1, -1):
        state = mix64(state)
        j = state % i
        idx[i - 1], idx[j] = idx[j], idx[i - 1]


def batches(mine, batch, seed, rank):
    """Endless batches (lists of sample indices) in flworker's order for
    rank, from its slice mine."""
    idx = list(mine)
    _shuffle(idx, mix64(seed * 1000003 + rank))
    cursor, epoch = 0, 0
    while True:
        out = []
        for _ in range(batch):
            if cursor == len(idx):
                cursor = 0
                epoch += 1
                _shuffle(idx, mix64(seed * 1000003 + rank + epoch * 7919))
            out.append(idx[cursor])
            cursor += 1
        yield out


def he_uniform_(linears, seed):
    """Set the weights of linears (nn.Linear, in model order) as
    model_create_mlp does from seed, and their biases to 0."""
    k = 0
    for lin in linears:
        nout, nin = lin.weight.shape
        n = nout * nin
        # splitmix64's state after k + 1 + i steps is seed + (k + 1 + i) *
        # GOLDEN (mod 2^64): the whole layer's draws at once.
        steps = np.arange(k + 1, k + 1 + n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            z = np.uint64(seed & MASK) + steps * np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
        sym = np.float32(2.0) * u - np.float32(1.0)
        bound = np.sqrt(np.float32(6.0) / np.float32(nin))
        w = (bound * sym).astype(np.float32).reshape(nout, nin)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.zero_()
        k += n
