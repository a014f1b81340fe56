"""DistributedOptimizer(mode="saps"): decentralized training (SAPS-PSGD)
for a PyTorch program, over flps.saps.

No shard: every worker keeps its model, and every `local_steps` steps of
the wrapped optimizer it averages the job's share (`saps_density`) of its
parameters with one peer (docs/algorithms.md, "SAPS-PSGD")::

    torch.manual_seed(1)                      # the same start everywhere
    model = Net()
    opt = flps.torch.DistributedOptimizer(torch.optim.SGD(
        model.parameters(), lr=0.05), model.named_parameters())
    for x, y in batches:                      # a mode: saps job
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    opt.close()                               # the consensus, then done

The job file's ``mode: saps`` (FLPS_MODE, which flrun and flagent set)
chooses it as the mode argument does; the density, peer selection,
threshold, window, deadline and local_steps are the job file's
(FLPS_SAPS_DENSITY, ..., FLPS_LOCAL_STEPS), an argument that contradicts
one is refused.  Every worker must start from the same parameter values
(seed torch alike on every rank).
"""

import os

import torch

from . import saps as _saps
from .errors import ConfigError, InvalidArgumentError, StateError


def _int_env(env, name, default):
    text = env.get(name, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError("%s=%r is not a whole number" % (name, text)) \
            from None


def job_mode(environ=None):
    """The job file's mode as the launcher exported it ("" where none)."""
    env = os.environ if environ is None else environ
    keys = {k.strip() for k in env.get("FLPS_JOB_KEYS", "").split(",")}
    if "FLPS_JOB_KEYS" in env and "mode" not in keys:
        return ""  # the launcher's default, not the job file's word
    return env.get("FLPS_MODE", "").strip()


class SapsOptimizer:
    """What DistributedOptimizer(..., mode="saps") returns (with
    DistributedOptimizer, whose zero_grad, state_dict and the like it
    keeps, the bases of the class flps.torch makes).  step() runs the wrapped optimizer's step,
    then, every local_steps steps, the round's exchange of the parameters
    with this round's peer (flps.saps.Saps.round).  close() computes the
    consensus (every worker's average on the coordinator) and closes."""

    def _saps_init(self, optimizer, named, density, local_steps, environ):
        env = os.environ if environ is None else environ
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.defaults = optimizer.defaults
        self.mode = "saps"
        self.client = None
        self.tuner = None  # zero_grad and the rest: DistributedOptimizer's
        self._named = named
        self.local_steps = self._resolve_steps(env, local_steps)
        self._params = [p for _, p in named]
        # The exchange reads and writes float32 CPU memory: a parameter
        # that is such is averaged in place, others through a mirror
        # copied in and out around each exchange.
        self._mirrors = []
        arrays = []
        for name, p in named:
            direct = (p.device.type == "cpu" and p.dtype == torch.float32
                      and p.is_contiguous())
            m = p.detach() if direct else torch.empty(
                p.numel(), dtype=torch.float32)
            self._mirrors.append(None if direct else m)
            arrays.append(m.numpy().reshape(-1))
        self._arrays = arrays
        self._steps = 0
        self.round = 0
        self.consensus_info = None
        self.saps = _saps.Saps(arrays, density=density, environ=env)

    @staticmethod
    def _resolve_steps(env, local_steps):
        said = _int_env(env, "FLPS_LOCAL_STEPS", None)
        if local_steps is not None:
            if local_steps < 1:
                raise ConfigError("local_steps=%r: at least 1" % local_steps)
            if said is not None and said != local_steps:
                raise ConfigError(
                    "local_steps=%d contradicts the job file's local_steps: "
                    "%d (FLPS_LOCAL_STEPS); drop the argument or change the "
                    "job file" % (local_steps, said))
            return local_steps
        return said if said is not None and said > 0 else 1

    def _copy_in(self):
        for p, m in zip(self._params, self._mirrors):
            if m is not None:
                m.copy_(p.detach().reshape(-1).to(torch.float32))

    def _copy_out(self):
        with torch.no_grad():
            for p, m in zip(self._params, self._mirrors):
                if m is not None:
                    p.copy_(m.view_as(p).to(p.dtype))

    def step(self, closure=None):
        """The wrapped optimizer's step; after every local_steps of them,
        the round's exchange (the parameters averaged at the round's mask
        with its peer).  Returns the step's loss (closure's)."""
        if self.saps is None:
            raise StateError("the saps DistributedOptimizer is closed")
        loss = self.optimizer.step(closure)
        self._steps += 1
        if self._steps % self.local_steps == 0:
            self._copy_in()
            self.last_round = self.saps.round(self.round)
            self._copy_out()
            self.round += 1
        return loss

    def consensus(self):
        """After the last step, on every worker together: (average, info),
        the workers' average model as tensors shaped as the parameters on
        the coordinator (None elsewhere) and info (coordinator, averaged,
        distance: the mean ||x_i - x_bar||)."""
        self._copy_in()
        avg, info = self.saps.consensus(self.round)
        self.consensus_info = info
        if avg is None:
            return None, info
        return ([torch.from_numpy(a).view_as(p)
                 for a, p in zip(avg, self._params)], info)

    def close(self, consensus=True):
        """The consensus (unless consensus=False, or already asked for),
        then the connections closed; the parameters stay as they are.  The
        process's done event (flps.report) carries what it did."""
        if self.saps is None:
            return
        try:
            if consensus and self.consensus_info is None:
                self.consensus()
        finally:
            self.saps.close()
            self.saps = None

    def __repr__(self):
        return ("DistributedOptimizer(%s, mode='saps', rank %d/%d, "
                "local_steps=%d)" % (type(self.optimizer).__name__,
                                     self.saps.rank if self.saps else -1,
                                     self.saps.workers if self.saps else 0,
                                     self.local_steps))


def check_arguments(compression, kwargs):
    """Refuse what saps has no use for: it exchanges models at the job's
    saps_density, never compressed gradients."""
    if compression is not None:
        raise ConfigError(
            "compression=%r: mode saps exchanges a share of the model "
            "(saps_density in the job file, or density=), not compressed "
            "gradients; drop the argument" % (compression,))
    for k, v in kwargs.items():
        if v is not None:
            raise InvalidArgumentError(
                "%s= is not an argument of mode saps" % k)
