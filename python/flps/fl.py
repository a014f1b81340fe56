"""flps.fl: federated averaging of a PyTorch model, run as a job file's
``mode: fedavg`` (docs/federated.md).

    import flps.fl as fl

    fed = fl.Federation(model, labels=train_labels)   # the job file's settings
    def step(model, idx):            # one local step: the loss of the samples
        return F.cross_entropy(model(x[idx]), y[idx])
    def evaluate(model):             # rank 0, on the global model
        return {"test_accuracy": accuracy(model, x_test, y_test)}
    result = fed.run(step, evaluate)

Each worker process plays the clients c with c % workers == rank.  In
every round the clients are sampled from the job's seed exactly as flworker
samples them (libflps's flps_fl_sample), each sampled client of this
process trains local_steps (or local_epochs) steps of SGD on its samples
(the job's partition of `labels`, flps_fl_partition) from the global model,
and its model delta, weighted by its sample count, goes to the shards, which
take the weighted mean of the round's deltas and apply their server
optimizer (sgd, momentum:B or adam).  A client runs in a forked process of
its own (on CPU models): one that misses round_deadline, or whose process
dies, is left out of the round as late, and the job goes on.  With a codec
(topk:D, gtopk:D, dgc:D) each client keeps its own error-feedback residual.

Run without a launcher (no FLPS_JOB) it is a world of one: the same rounds
in this one process, the averaging and the server optimizer done here.
"""

import importlib
import math
import mmap
import os
import select
import signal
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

from . import _native
from . import client as _client
from . import jobenv as _jobenv
from .errors import (ConfigError, FlpsError, InvalidArgumentError,
                     error_class)

# The module (flps.report, the name, is the function the package exports).
_report = importlib.import_module(".report", __package__)

__all__ = ["Federation", "FederationResult", "FedSettings", "round_size",
           "sample", "stragglers", "partition", "skew", "ClientFailedError"]

#: test_accuracy_last5 is the mean of this many final evaluations.
LAST_EVALS = 5


class ClientFailedError(FlpsError):
    """A client's training raised (its traceback went to stderr): a bug in
    the program's step, not a late client."""


def _lib(call):
    lib = _native.lib()
    if not _native.has(call):
        raise InvalidArgumentError(
            "%s has no %s: flps.fl needs a libflps with the federated calls "
            "(flps_fl_*); point FLPS_BUILD_DIR or FLPS_LIBRARY at a current "
            "build" % (_native.library_path(), call))
    return lib


def _check(rc, what):
    if rc != 0:
        lib = _native.lib()
        why = _native.take_logged_error() or lib.flps_strerror(rc).decode()
        raise error_class(rc)("%s: %s" % (what, why), code=rc,
                              name=lib.flps_errname(rc).decode())


def round_size(clients, fraction):
    """Clients sampled per round: ceil(fraction * clients), at least 1."""
    return int(_lib("flps_fl_round_size").flps_fl_round_size(clients,
                                                            fraction))


def sample(seed, rnd, clients, fraction):
    """The clients of round rnd (0 first), ascending: what flworker picks
    for a job of this seed, clients and client_fraction."""
    lib = _lib("flps_fl_sample")
    n = round_size(clients, fraction)
    out = np.zeros(max(n, 1), dtype=np.uint32)
    _native.take_logged_error()
    _check(lib.flps_fl_sample(seed, rnd, clients, fraction, out.ctypes.data,
                              out.size),
           "cannot sample round %d's clients" % rnd)
    return [int(c) for c in out[:n]]


def stragglers(seed, clients, fraction):
    """round_deadline's simulated stragglers (straggler_fraction): a bool
    array over the clients, as flworker draws them."""
    lib = _lib("flps_fl_stragglers")
    out = np.zeros(max(clients, 1), dtype=np.uint8)
    _check(lib.flps_fl_stragglers(seed, clients, fraction, out.ctypes.data),
           "cannot draw the stragglers")
    return out[:clients].astype(bool)


def partition(labels, clients, spec="iid", seed=1, classes=None):
    """Split the samples of `labels` (integer class labels, one per sample)
    among `clients` as a job file's partition says ("iid", "dirichlet:A",
    "shards:N"): a list of index arrays (int64), client 0 first, the very
    split flworker makes for the same labels, spec and seed.  classes:
    the number of classes (default: max label + 1)."""
    lib = _lib("flps_fl_partition")
    y = np.ascontiguousarray(np.asarray(labels).reshape(-1), dtype=np.int64)
    if y.size and y.min() < 0:
        raise InvalidArgumentError("labels must be >= 0")
    if classes is None:
        classes = int(y.max()) + 1 if y.size else 1
    y32 = y.astype(np.uint32)
    idx = np.zeros(max(y.size, 1), dtype=np.uint32)
    off = np.zeros(clients + 1, dtype=np.uintp)
    _native.take_logged_error()
    _check(lib.flps_fl_partition(spec.encode(), y32.ctypes.data, y.size,
                                 classes, clients, seed, idx.ctypes.data,
                                 off.ctypes.data),
           "cannot split %d samples over %d clients as %s"
           % (y.size, clients, spec))
    return [idx[off[c]:off[c + 1]].astype(np.int64) for c in range(clients)]


def skew(parts, labels, classes=None):
    """The split's label skew as flworker reports it: the mean over clients
    of the total-variation distance between a client's label histogram and
    the whole set's (0: every client sees the global mix)."""
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    k = int(classes if classes is not None else (y.max() + 1 if y.size
                                                  else 1))
    total = np.bincount(y, minlength=k) / max(y.size, 1)
    dists = [0.5 * np.abs(np.bincount(y[p], minlength=k) / p.size -
                          total).sum() for p in parts if p.size]
    return float(np.mean(dists)) if dists else 0.0


@dataclass(frozen=True)
class FedSettings:
    """What a Federation runs: each the job file's where it gives one (an
    argument that contradicts it is refused), else the argument, else the
    launcher's or the API's default."""

    rounds: int
    clients: int
    client_fraction: float
    local_steps: int
    local_epochs: int
    batch_size: int
    lr: float
    momentum: float
    lr_schedule: str
    partition: str
    seed: int
    round_deadline: float
    straggler_fraction: float
    straggler_slowdown: float
    prox_mu: float
    server_optimizer: str
    server_lr: float
    compression: str
    eval_every: int


# key: (the API's default, how the argument is checked)
_DEFAULTS = {
    "rounds": 10, "clients": 0, "client_fraction": 1.0, "local_steps": 10,
    "local_epochs": 0, "batch_size": 32, "lr": 0.05, "momentum": 0.9,
    "lr_schedule": "constant", "partition": "iid", "seed": 1,
    "round_deadline": 0.0, "straggler_fraction": 0.0,
    "straggler_slowdown": 10.0, "prox_mu": 0.0, "server_optimizer": "sgd",
    "server_lr": 1.0, "compression": "dense", "eval_every": 100,
}

_SAME = {"compression": _client._same_codec,
         "partition": lambda a, b: _canon("partition", a) == b,
         "server_optimizer": lambda a, b: _canon("server_optimizer", a) == b}


def _canon(key, value):
    try:
        return _jobenv._PARSE[key][0](value)
    except (ValueError, TypeError, AttributeError):
        return value


def _resolve(js, workers, args):
    """The FedSettings of args (key -> argument or None) under the job
    file's settings js."""
    mode = js.get("mode")
    if mode is not None and mode.given and mode.value != "fedavg":
        raise ConfigError(
            "the job file's mode: %s (FLPS_MODE) is not fedavg; flps.fl runs "
            "federated averaging: set mode: fedavg in the job file, or use "
            "flps.torch.DistributedOptimizer" % mode.text)
    out = {}
    for key, default in _DEFAULTS.items():
        said = js.get(key, defaults=True)
        fallback = said.value if said is not None else default
        value = js.resolve(key, args.get(key), fallback, same=_SAME.get(key))
        if key in ("partition", "server_optimizer", "lr_schedule"):
            try:
                value = _jobenv._PARSE[key][0](value)
            except (ValueError, TypeError, AttributeError):
                raise InvalidArgumentError("%s=%r is not %s" % (
                    key, value, _jobenv._PARSE[key][1])) from None
        out[key] = value
    if out["clients"] == 0:
        out["clients"] = workers  # the job file's "one per worker"
    s = FedSettings(**out)
    if s.clients < workers:
        raise ConfigError("clients: %d is fewer than workers: %d; each "
                          "worker process plays at least one client"
                          % (s.clients, workers))
    if s.rounds < 1 or not 0 < s.client_fraction <= 1 or s.batch_size < 1 \
            or (s.local_steps < 1 and s.local_epochs < 1) or s.lr <= 0 \
            or not 0 <= s.momentum < 1 or s.prox_mu < 0 or s.server_lr <= 0:
        raise InvalidArgumentError("settings out of range: %s" % (s,))
    kind = s.compression.partition(":")[0]
    if kind == "auto":
        raise ConfigError("compression: auto plans per-iteration gradients; "
                          "fedavg pushes one delta per round: use a fixed "
                          "codec")
    if kind == "gtopk" and s.server_optimizer != "sgd":
        raise ConfigError("server_optimizer %s steps on the whole averaged "
                          "delta, and gtopk keeps only its global top-k: use "
                          "topk:D" % s.server_optimizer)
    return s


@dataclass
class FederationResult:
    """What a Federation.run did in this process (rank 0: with the
    evaluations)."""

    rounds: int
    client_rounds: int = 0  #: clients this process trained, late included
    late_clients: int = 0  #: of those, left out as late
    test_accuracy: float = None  #: rank 0: the last evaluation's
    test_accuracy_last5: float = None  #: rank 0: mean of the last five
    test_miou: float = None
    test_miou_last5: float = None
    history: list = None  #: rank 0: per round (round, sampled, late, bytes,
    #: loss, and the evaluation's fields where there was one)
    bytes_sent: int = 0


class _Late(Exception):
    """A client missed the deadline or its process died."""


class Federation:
    """Federated averaging of `model` over the job's clients.

    model: a torch.nn.Module; its floating-point parameters and buffers
        are the federated model (rank 0's initial values become everyone's).
    labels: one integer class label per training sample, which the job's
        partition splits among the clients (dirichlet:A and shards:N split
        by label; a segmentation program hands each image's dominant
        class).  Sample indices are positions in this list.
    optimizer: a factory optimizer(params, lr) for a client's local
        training (default: torch.optim.SGD with the job's momentum; a fresh
        one, velocity zero, every round, as flworker's clients).
    isolate: True to run each client in a forked process (a client that
        dies or misses round_deadline is late; the default on CPU models,
        where the child trains with one thread, since OpenMP cannot be
        used after a fork), False to train in this process (CUDA models).
    rounds, clients, client_fraction, local_steps, local_epochs,
    batch_size, lr, momentum, lr_schedule, partition, seed, round_deadline,
    straggler_fraction, straggler_slowdown, prox_mu, server_optimizer,
    server_lr, compression, eval_every: as the job file's keys of those
        names (docs/job-file.md); left out (None), the job file's, else the
        defaults.  An argument that contradicts a key the job file gives is
        a ConfigError naming both.
    environ: the environment to read (default os.environ).

    Raises ConfigError for settings the job file refuses, and FlpsError
    subclasses when the shards cannot be joined (connect happens in run).
    """

    def __init__(self, model, labels, *, optimizer=None, isolate=None,
                 classes=None, environ=None, **settings):
        unknown = set(settings) - set(_DEFAULTS)
        if unknown:
            raise InvalidArgumentError(
                "Federation got unknown settings %s; it takes %s"
                % (sorted(unknown), ", ".join(sorted(_DEFAULTS))))
        env = os.environ if environ is None else environ
        self.local = _jobenv.is_alone(env)
        if self.local:
            self.job, self.rank, self.workers, self.servers = "", 0, 1, ()
            # Variables set by hand fill in where arguments say nothing.
            js = _jobenv.JobSettings(env)
        else:
            self.job, self.rank, self.workers, self.servers = \
                _jobenv.place(env)
            js = _jobenv.JobSettings(env)
        self.settings = _resolve(js, self.workers, settings)
        self.model = model
        self.labels = np.asarray(labels).reshape(-1)
        self.classes = classes
        self._optimizer = optimizer
        self._isolate = isolate
        self.parts = None
        self.client = None
        #: The client and round whose local training runs now (step and
        #: the optimizer factory may read them); None between clients.
        self.current_client = self.current_round = None

    # -- the model as flat tensors --

    def _tensors(self):
        """(name, tensor) of every floating-point parameter and buffer."""
        out = [(n, p) for n, p in self.model.named_parameters()
               if p.dtype.is_floating_point]
        out += [(n, b) for n, b in self.model.named_buffers()
                if b.dtype.is_floating_point]
        return out

    def _setup_model(self):
        import torch

        self._named = self._tensors()
        if not self._named:
            raise InvalidArgumentError("the model has no floating-point "
                                       "parameters to federate")
        self._params = {id(p) for p in self.model.parameters()}
        self._numels = [t.numel() for _, t in self._named]
        self._offsets = np.cumsum([0] + self._numels)
        self._nparams = int(self._offsets[-1])
        self._device = self._named[0][1].device
        #: The global model, one float32 CPU tensor per tensor: libflps
        #: writes each round's update into them.
        self.global_ = [t.detach().to("cpu", torch.float32).reshape(-1)
                        .clone() for _, t in self._named]
        if self._isolate is None:
            self._isolate = self._device.type == "cpu" and hasattr(os, "fork")

    def _load_global(self):
        """The model's tensors = the global model."""
        import torch

        with torch.no_grad():
            for (_, t), g in zip(self._named, self.global_):
                t.copy_(g.view_as(t))

    def _delta_into(self, out):
        """out (numpy float32, all tensors) = model - global."""
        for (_, t), g, lo, hi in zip(self._named, self.global_,
                                     self._offsets[:-1], self._offsets[1:]):
            out[lo:hi] = (t.detach().to("cpu").reshape(-1) - g).numpy()

    # -- a client's local training --

    def _steps(self, c):
        s = self.settings
        if s.local_epochs == 0:
            return s.local_steps
        return max(1, math.ceil(s.local_epochs * self.parts[c].size /
                                s.batch_size))

    def _batches(self, c):
        """Client c's batches for this round: it goes through its samples
        in a shuffled order and reshuffles when it has seen them all,
        across rounds."""
        import torch

        s = self.settings
        mine = self.parts[c]
        out = []
        for _ in range(self._steps(c)):
            batch = []
            while len(batch) < s.batch_size:
                if self._cursor[c] == mine.size:
                    self._epoch[c] += 1
                    rng = np.random.default_rng([s.seed, c, self._epoch[c]])
                    self._order[c] = mine[rng.permutation(mine.size)]
                    self._cursor[c] = 0
                take = min(s.batch_size - len(batch),
                           mine.size - self._cursor[c])
                batch.extend(self._order[c][self._cursor[c]:
                                            self._cursor[c] + take])
                self._cursor[c] += take
            out.append(torch.as_tensor(np.asarray(batch, dtype=np.int64)))
        return out

    def _lr(self, r):
        s = self.settings
        if s.lr_schedule != "cosine":
            return s.lr
        return s.lr * 0.5 * (1.0 + math.cos(math.pi * r / s.rounds))

    def _train(self, step, batches, lr, out):
        """Local SGD from the global model over batches (FedProx's term
        with prox_mu); the delta into out. Returns the summed loss."""
        import torch

        self._load_global()
        self.model.train()
        params = [t for _, t in self._named if id(t) in self._params and
                  t.requires_grad]
        opt = (self._optimizer(params, lr) if self._optimizer is not None
               else torch.optim.SGD(params, lr=lr,
                                    momentum=self.settings.momentum))
        mu = self.settings.prox_mu
        anchor = [t.detach().clone() for t in params] if mu > 0 else None
        loss_sum = 0.0
        for idx in batches:
            opt.zero_grad()
            loss = step(self.model, idx)
            total = loss
            if mu > 0:
                prox = sum(((p - a) ** 2).sum() for p, a in zip(params,
                                                                 anchor))
                total = loss + 0.5 * mu * prox
            total.backward()
            opt.step()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError("the loss is %r (lower lr?)" % value)
            loss_sum += value
        self._delta_into(out)
        return loss_sum

    def _run_client(self, step, c, r, deadline):
        """(delta, loss_sum, seconds) of client c in round r; _Late when it
        misses deadline (0: none) or its process dies."""
        batches = self._batches(c)
        lr = self._lr(r)
        self.current_client, self.current_round = c, r
        delta = self._delta
        began = time.monotonic()
        if not self._isolate:
            loss_sum = self._train(step, batches, lr, delta)
            took = time.monotonic() - began
            if deadline > 0 and took > deadline:
                raise _Late("took %.3g s" % took)
            return delta, loss_sum, took
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the client's process
            code = 3
            try:
                import torch

                torch.set_num_threads(1)  # OpenMP cannot follow a fork
                self._header[1] = self._train(step, batches, lr, delta)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        status = self._wait_child(pid, deadline)
        took = time.monotonic() - began
        if status is None:
            raise _Late("missed the %.3g s deadline" % deadline)
        if os.WIFSIGNALED(status):
            raise _Late("its process died of signal %d"
                        % os.WTERMSIG(status))
        if os.WEXITSTATUS(status) == 3:
            raise ClientFailedError(
                "round %d: client %d's training raised (its traceback is "
                "above on stderr)" % (r, c))
        if os.WEXITSTATUS(status) != 0:
            raise _Late("its process exited with status %d"
                        % os.WEXITSTATUS(status))
        return delta, float(self._header[1]), took

    @staticmethod
    def _wait_child(pid, deadline):
        """The child's wait status; None after killing it at the deadline
        (0: no deadline)."""
        end = time.monotonic() + deadline if deadline > 0 else None
        fd = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                fd = None
        try:
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return status
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    return None
                if fd is not None:
                    select.select([fd], [], [], left)
                else:
                    time.sleep(0.002 if left is None else min(0.002, left))
        finally:
            if fd is not None:
                os.close(fd)

    # -- compression with error feedback per client --

    def _codec(self):
        kind, _, arg = self.settings.compression.partition(":")
        if kind in ("topk", "gtopk", "dgc"):
            return kind, float(arg)
        return kind, None

    def _with_residual(self, c, delta):
        """a_c = client c's residual + its delta (a copy it owns)."""
        res = self._residual.get(c)
        return delta.astype(np.float32) if res is None else res + delta

    def _select(self, chosen):
        """What this process pushes of its clients' deltas (chosen:
        [(client, weight, a_c)], a_c = its residual + its delta): each
        client sends the k largest |a_c| over its whole model (k = the
        codec's k of every tensor, added up, so a tensor gets what its
        values earn) and keeps the rest as its residual; the pairs of all
        of them are summed, weighted, over the union of their indices.
        Returns (indices ascending over the whole model, weighted sums,
        [(client, its indices, its values)])."""
        k = min(sum(min(max(int(math.floor(self._density * n)), 1), n)
                    for n in self._numels), self._nparams)
        sums = np.zeros(self._nparams, dtype=np.float64)
        sel = np.zeros(self._nparams, dtype=bool)
        sent = []
        for c, w, a in chosen:
            mine = (np.arange(self._nparams) if k == self._nparams else
                    np.sort(np.argpartition(-np.abs(a), k - 1)[:k]))
            sums[mine] += w * a[mine]
            sel[mine] = True
            sent.append((c, mine, a[mine].copy()))
            a[mine] = 0
            self._residual[c] = a
        idx = np.nonzero(sel)[0]
        return idx, sums[idx], sent

    def _push_pairs(self, r, chosen, weight):
        """Push this process's pairs of the round (_select) tensor by
        tensor; gtopk's pairs the shards did not take go back into the
        residuals of the clients that sent them."""
        if chosen:
            idx, vals, sent = self._select(chosen)
        else:
            idx, vals, sent = np.zeros(0, dtype=np.int64), np.zeros(0), []
        self.client.set_push_weight(weight)
        cuts = np.searchsorted(idx, self._offsets)
        for i, lo in enumerate(self._offsets[:-1]):
            seg = slice(cuts[i], cuts[i + 1])
            self.client.push_pairs(i, (idx[seg] - lo).astype(np.uint32),
                                   (-vals[seg]).astype(np.float32), r)
        self.client.wait(r)
        if self._codec()[0] != "gtopk":
            return
        back = np.zeros(self._nparams, dtype=bool)
        for i in range(len(self._numels)):
            n = int(cuts[i + 1] - cuts[i])
            if n > 0:
                taken = self.client.pairs_taken(i, n)
                back[idx[cuts[i]:cuts[i + 1]][~taken]] = True
        for c, mine, val in sent:
            left = back[mine]
            self._residual[c][mine[left]] += val[left]

    # -- the rounds --

    def _connect(self):
        s = self.settings
        layout = [(n, g) for (n, _), g in zip(self._named, self.global_)]
        kind, _ = self._codec()
        self.client = _client.connect(
            self.job, self.rank, self.workers, list(self.servers), layout,
            lr=s.server_lr, compression=s.compression, momentum=0.0,
            iterations=s.rounds, weighted=True,
            server_optimizer=s.server_optimizer,
            settings=_jobenv.JobSettings.none())
        self.client._ran.mode = "fedavg"
        if self.rank == 0:
            for (_, t), g in zip(self._named, self.global_):
                g.copy_(t.detach().to("cpu").reshape(-1))
        self.client.init()
        return self.client.resume_iteration

    def _emit(self, ev):
        with _report._lock:
            _report._emit(ev)

    def _partition_event(self):
        s = self.settings
        ev = {"event": "partition", "clients": s.clients,
              "skew": round(skew(self.parts, self.labels, self.classes), 6),
              "samples": [int(p.size) for p in self.parts]}
        self._emit(ev)

    def _push_dense(self, r, acc, weight):
        self.client.set_push_weight(weight)
        for i, (lo, hi) in enumerate(zip(self._offsets[:-1],
                                         self._offsets[1:])):
            self.client.push(i, -acc[lo:hi], r)
        self.client.wait(r)

    def _local_round(self, r, chosen_dense, weight):
        """A world of one: the shards' weighted mean and server optimizer,
        here."""
        s = self.settings
        if weight <= 0:
            u = np.zeros(self._nparams, dtype=np.float32)
        else:
            u = (s.server_lr * chosen_dense / weight).astype(np.float32)
        kind = s.server_optimizer.partition(":")[0]
        if kind == "momentum":
            beta = float(s.server_optimizer.partition(":")[2])
            self._v = beta * self._v + u
            u = self._v
        elif kind == "adam":
            g = chosen_dense / weight if weight > 0 else 0 * chosen_dense
            self._v = 0.9 * self._v + 0.1 * g
            self._s2 = 0.99 * self._s2 + 0.01 * g * g
            u = (s.server_lr * self._v / (np.sqrt(self._s2) + 1e-3)).astype(
                np.float32)
        for g, lo, hi in zip(self.global_, self._offsets[:-1],
                             self._offsets[1:]):
            g += torch_from(u[lo:hi])

    def run(self, step, evaluate=None):
        """Train every round: step(model, idx) returns the loss (a torch
        scalar) of the samples idx (a LongTensor of indices into labels);
        evaluate(model), called on rank 0 with the global model every
        eval_every rounds and in each of the last five, returns the test
        accuracy (a number) or a dict with test_accuracy and optionally
        test_loss and test_miou.  Prints the launcher's events (partition,
        progress per round, eval, done).  Returns a FederationResult; the
        model holds the global model afterwards."""
        s = self.settings
        self._setup_model()
        self.parts = partition(self.labels, s.clients, s.partition, s.seed,
                               self.classes)
        self._cursor = [p.size for p in self.parts]
        self._epoch = [0] * s.clients
        self._order = [p for p in self.parts]
        self._delta = np.zeros(self._nparams, dtype=np.float32)
        self._header = np.zeros(2, dtype=np.float64)
        if self._isolate:
            # The child's delta and loss come back through shared memory.
            shm = mmap.mmap(-1, self._nparams * 4 + 16)
            self._header = np.frombuffer(shm, dtype=np.float64, count=2)
            self._delta = np.frombuffer(shm, dtype=np.float32,
                                        count=self._nparams, offset=16)
        self._residual = {}
        kind, self._density = self._codec()
        sparse = self._density is not None
        slow = (stragglers(s.seed, s.clients, s.straggler_fraction)
                if s.round_deadline > 0 and s.straggler_fraction > 0 and
                s.straggler_slowdown > 1 else None)
        result = FederationResult(rounds=s.rounds, history=[])
        t0 = time.monotonic()
        start = 0
        if self.local:
            self._v = np.zeros(self._nparams, dtype=np.float32)
            self._s2 = np.zeros(self._nparams, dtype=np.float32)
        else:
            start = self._connect()
        if self.rank == 0:
            self._partition_event()
        last = []
        for r in range(start, s.rounds):
            sampled = sample(s.seed, r, s.clients, s.client_fraction)
            mine = [c for c in sampled if c % self.workers == self.rank]
            before = self.client.stats().bytes_sent if self.client else 0
            acc = np.zeros(self._nparams, dtype=np.float64)
            chosen, weight, late, loss_sum, steps = [], 0.0, [], 0.0, 0
            for c in mine:
                deadline = s.round_deadline
                if slow is not None and slow[c]:
                    deadline /= s.straggler_slowdown
                result.client_rounds += 1
                try:
                    delta, lsum, _ = self._run_client(step, c, r, deadline)
                except _Late as e:
                    late.append((c, str(e)))
                    continue
                n_c = float(self.parts[c].size)
                loss_sum += lsum
                steps += self._steps(c)
                weight += n_c
                if sparse:
                    chosen.append((c, n_c, self._with_residual(c, delta)))
                else:
                    acc += n_c * delta
            result.late_clients += len(late)
            if late:
                print("flps.fl: round %d: %d of this process's %d clients "
                      "were left out as late: %s" % (
                          r, len(late), len(mine),
                          ", ".join("%d (%s)" % x for x in late[:8])),
                      file=sys.stderr, flush=True)
            if self.local:
                if chosen:  # what the shards would add
                    idx, vals, _ = self._select(chosen)
                    acc[idx] += vals
                self._local_round(r, acc, weight)
            elif sparse:
                self._push_pairs(r, chosen, weight)
            else:
                self._push_dense(r, acc, weight)
            sent = self.client.stats().bytes_sent if self.client else 0
            _native.report_metrics(loss_sum / steps if steps else None)
            _native.report_round(r + 1, len(mine), len(late))
            row = {"round": r + 1, "round_clients": sampled,
                   "clients": len(mine), "late": len(late),
                   "round_bytes": sent - before,
                   "loss": loss_sum / steps if steps else 0.0}
            if self.rank == 0:
                self._progress(row, sent, t0)
                if evaluate is not None and (
                        (s.eval_every and (r + 1) % s.eval_every == 0) or
                        r + LAST_EVALS >= s.rounds):
                    ev = self._evaluate(evaluate, r + 1, t0)
                    row.update(ev)
                    if r + LAST_EVALS >= s.rounds:
                        last.append(ev)
                result.history.append(row)
        self._load_global()
        if self.rank == 0 and last:
            result.test_accuracy = last[-1]["test_accuracy"]
            result.test_accuracy_last5 = float(np.mean(
                [e["test_accuracy"] for e in last]))
            if "test_miou" in last[-1]:
                result.test_miou = last[-1]["test_miou"]
                result.test_miou_last5 = float(np.mean(
                    [e["test_miou"] for e in last]))
        result.bytes_sent = self.client.stats().bytes_sent if self.client \
            else 0
        self._done(result)
        return result

    def _progress(self, row, sent, t0):
        st = self.client.stats() if self.client else None
        ev = {"event": "progress", "iter": row["round"],
              "iterations": self.settings.rounds, "clients": row["clients"],
              "sampled": len(row["round_clients"]),
              "round_clients": row["round_clients"]}
        if self.settings.round_deadline > 0 or row["late"]:
            ev["late"] = row["late"]
        ev.update({"round_bytes": row["round_bytes"],
                   "loss": round(row["loss"], 5), "bytes_sent": sent,
                   "dense_bytes": st.dense_bytes if st else 0,
                   "elapsed": round(time.monotonic() - t0, 3)})
        self._emit(ev)

    def _evaluate(self, evaluate, it, t0):
        self._load_global()
        was = self.model.training
        self.model.eval()
        try:
            got = evaluate(self.model)
        finally:
            self.model.train(was)
        ev = dict(got) if isinstance(got, dict) else {"test_accuracy": got}
        if "test_accuracy" not in ev:
            raise InvalidArgumentError(
                "evaluate returned %r; return the test accuracy or a dict "
                "with test_accuracy (and test_loss, test_miou)" % (got,))
        ev = {k: float(v) for k, v in ev.items()
              if k in ("test_accuracy", "test_loss", "test_miou")}
        _report.report(iteration=it, test_accuracy=ev["test_accuracy"],
                       test_loss=ev.get("test_loss"),
                       test_miou=ev.get("test_miou"),
                       elapsed_s=time.monotonic() - t0)
        return ev

    def _done(self, result):
        s = self.settings
        extra = {"rounds": s.rounds, "mode": "fedavg",
                 "late_clients": result.late_clients,
                 "client_rounds": result.client_rounds,
                 "server_optimizer": s.server_optimizer}
        if s.prox_mu > 0:
            extra["prox_mu"] = round(s.prox_mu, 6)
        if result.test_accuracy_last5 is not None:
            extra["test_accuracy_last5"] = round(result.test_accuracy_last5,
                                                 4)
        if result.test_miou_last5 is not None:
            extra["test_miou_last5"] = round(result.test_miou_last5, 4)
        with _report._lock:
            _report._state["done_extra"] = extra
            _report._state["iteration"] = s.rounds
            _report._state["reported"] = True
        if not self.local:
            _report.report(iteration=s.rounds, done=True)
            self.client.close()

    def close(self):
        if self.client is not None:
            self.client.close()


def torch_from(a):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))
