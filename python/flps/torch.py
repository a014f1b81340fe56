"""flps.torch: train a PyTorch model with flps shards doing the all-reduce.

    import flps.torch as ft
    cfg = ft.init()          # FLPS_JOB, FLPS_RANK, ...; alone: a world of one
    opt = ft.DistributedOptimizer(torch.optim.Adam(model.parameters()),
                                  named_parameters=model.named_parameters())
    # compression, sync mode, lr, ...: what the job file says (flps.jobenv)
    for x, y in batches:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

Constructing the DistributedOptimizer connects to the shards and makes
every worker start from rank 0's parameters (the broadcast).  Each step
pushes every parameter's gradient, waits for the shards' aggregate and
applies it; with a sparse codec in gradient mode each worker's own
optimizer step is what is compressed and averaged (the update exchange).
docs/python.md describes the two modes ("gradient", "server"), the
corrections, the density warm-up and the environment variables.
"""

import contextlib
import inspect
import math
import os
import sys
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.modules.module as _module

from . import auto as _auto
from . import client as _client
from . import jobenv as _jobenv
from . import torch_saps as _torch_saps
from .errors import ConfigError, InvalidArgumentError, StateError

__all__ = ["Config", "init", "DistributedOptimizer", "TopkSelector",
           "ENVIRONMENT", "HAS_POST_ACCUMULATE_HOOK", "SPARSE_CODECS",
           "CORRECTIONS"]

#: The environment variables flps.torch reads (flrun and flagent set them
#: for a job file's command:; set them yourself otherwise): init() the
#: first four (none of them set: a world of one), DistributedOptimizer the
#: job file's settings where its arguments are left at None (flps.jobenv:
#: the keys FLPS_JOB_KEYS names are binding).
ENVIRONMENT = dict(_jobenv.PLACE)
ENVIRONMENT.update({var: what for var, what in _jobenv.KEYS.values()})
ENVIRONMENT["FLPS_JOB_KEYS"] = ("the keys the job file gives, comma-separated "
                                "(set by flrun and flagent)")

#: The start density of a warm-up when neither the argument nor
#: FLPS_DENSITY_WARMUP_START gives one (the job file's default).
DEFAULT_WARMUP_START = 0.25

#: True where torch has Tensor.register_post_accumulate_grad_hook (2.1 and
#: later). Either way gradients are pushed during backward, as soon as each
#: is produced: older torch gets the same moment from a hook on the
#: parameter's AccumulateGrad node (_AccumulateGradHook).
HAS_POST_ACCUMULATE_HOOK = hasattr(torch.Tensor,
                                   "register_post_accumulate_grad_hook")


class _AccumulateGradHook:
    """hook(p) right after backward wrote p.grad, on torch before 2.1: a
    post-hook of p's AccumulateGrad node, the node that writes p.grad (the
    node DistributedDataParallel hooks there too).  The node lives only
    while something holds it, so this object does until remove()."""

    def __init__(self, p, hook):
        with torch.enable_grad():
            self._node = p.expand_as(p).grad_fn.next_functions[0][0]
        self._handle = self._node.register_hook(lambda *_: hook(p))

    def remove(self):
        self._handle.remove()
        self._node = None


def _post_accumulate_hook(p, hook):
    """hook(p) each time backward has written p.grad: torch's own hook
    where it has one (2.1 and later), else _AccumulateGradHook."""
    if HAS_POST_ACCUMULATE_HOOK:
        return p.register_post_accumulate_grad_hook(hook)
    return _AccumulateGradHook(p, hook)


@dataclass(frozen=True)
class Config:
    """Where this worker belongs: what init() read from the environment.
    local: a world of one (no launcher): DistributedOptimizer trains
    locally.  settings: the job file's settings (flps.jobenv.JobSettings)
    the optimizer follows."""

    job: str
    rank: int
    workers: int
    servers: tuple
    local: bool = False
    settings: object = field(default=None, compare=False, repr=False)


_config = None  # what init() returned last: the default of every optimizer
_told_alone = False  # the world-of-one notice was printed


def init(environ=None):
    """Read the worker's place in the job from the environment (or the
    mapping `environ`) and return it as a Config; DistributedOptimizer uses
    it unless given another.  With none of FLPS_JOB, FLPS_RANK,
    FLPS_WORKERS and FLPS_SERVERS set (a program run directly) it is a
    world of one: rank 0 of 1, local=True, said once on stderr.  Raises
    ConfigError naming a variable that is missing or wrong."""
    global _config, _told_alone
    env = os.environ if environ is None else environ
    if _jobenv.is_alone(env):
        if not _told_alone:
            print(_jobenv.ALONE, file=sys.stderr, flush=True)
            _told_alone = True
        _config = Config("", 0, 1, (), local=True,
                         settings=_jobenv.JobSettings.none())
        return _config
    job, rank, workers, servers = _jobenv.place(env)
    _config = Config(job, rank, workers, servers,
                     settings=_jobenv.JobSettings(env))
    return _config


def _topk_density(compression, kinds=("topk", "gtopk")):
    """D of "topk:D" or "gtopk:D" (the codecs whose selection flps.torch
    can run itself; kinds says which), "auto", else None."""
    if compression == "auto":
        return "auto"  # per layer: dense or topk:D, as the plan says
    kind, _, arg = (compression or "dense").partition(":")
    if kind not in kinds:
        return None
    try:
        density = float(arg)
    except ValueError:
        return None
    return density if 0 < density <= 1 else None


#: The codecs that select a few elements per step and keep the rest in
#: error feedback: with these, gradient mode exchanges each worker's
#: optimizer step (correction "update") unless told otherwise.
SPARSE_CODECS = ("topk", "gtopk", "dgc", "auto")

#: The values of DistributedOptimizer's correction.
CORRECTIONS = ("auto", "update", "none")


def _push_window_for(compression):
    """Dense pushes through a window sized to the link (as flworker's):
    "auto" for dense and auto jobs ($FLPS_PUSH_WINDOW, which libflps
    reads, still overrides it), else the library's choice (None)."""
    if (compression or "dense") in ("dense", "auto"):
        return "auto"
    return None


def _is_sparse(compression):
    return (compression or "dense").partition(":")[0] in SPARSE_CODECS


def _is_adaptive(optimizer):
    """True for the optimizers that scale each element by its own history
    of squared gradients (Adam and its kin, RMSprop, Adagrad, Adadelta)."""
    adaptive = tuple(getattr(torch.optim, n) for n in (
        "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad",
        "Adadelta", "SparseAdam") if hasattr(torch.optim, n))
    return isinstance(optimizer, adaptive)


def _has_momentum(optimizer):
    return any(g.get("momentum", 0) for g in optimizer.param_groups)


def _check_correction(correction):
    """Raises ConfigError for a correction that is none of CORRECTIONS."""
    if correction not in CORRECTIONS:
        raise ConfigError(
            "correction=%r: use \"auto\" (\"update\" where it can run), "
            "\"update\" (each worker's optimizer steps on its own gradient "
            "and its steps are what is compressed and averaged) or \"none\" "
            "(the optimizer steps on the averaged compressed gradient)"
            % (correction,))


def _correction_of(correction, compression, mode, selection, optimizer):
    """"update" or "none": what DistributedOptimizer's correction argument
    comes to for this codec, mode, selection and optimizer.  Raises
    ConfigError for a value it does not know or a combination that cannot
    run; warns of one that runs but loses accuracy."""
    _check_correction(correction)
    name = type(optimizer).__name__
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ConfigError(
            "LBFGS evaluates the loss several times within one step() (its "
            "closure) and flps averages one gradient per step: no mode of "
            "DistributedOptimizer can run it; use another optimizer")
    sparse = _is_sparse(compression)
    if mode == "server":
        if correction == "update":
            raise ConfigError(
                "correction=\"update\" is gradient mode's; in "
                "mode=\"server\" libflps corrects the momentum itself, "
                "before the selection")
        return "none"
    if correction == "auto":
        correction = "update" if sparse and selection != "libflps" \
            else "none"
    if correction == "update":
        if not sparse:
            raise ConfigError(
                "correction=\"update\" sends each worker's steps as top-k "
                "pairs with error feedback: it needs compression \"topk:D\", "
                "\"gtopk:D\", \"dgc:D\" or \"auto\" (got %r)"
                % (compression,))
        if selection == "libflps":
            raise ConfigError(
                "correction=\"update\" keeps each worker's residual in torch "
                "(the worker computes its gradients at the common model plus "
                "its own steps not sent yet), which libflps's own selection "
                "keeps out of reach: use selection=\"auto\" or \"torch\", "
                "or correction=\"none\"")
        return correction
    if isinstance(optimizer, torch.optim.SparseAdam):
        raise ConfigError(
            "%s steps on sparse gradients only, and with correction "
            "\"none\" it would step on the averaged gradient, which is "
            "dense: use a sparse codec with correction=\"update\" (it steps "
            "on each worker's own gradient)" % name)
    if sparse and (_is_adaptive(optimizer) or _has_momentum(optimizer)):
        warnings.warn(
            "%s%s with %s and correction \"none\" steps on the averaged "
            "sparse gradient, which lost up to 7 points of test accuracy "
            "against dense in flps's measurements (docs/python.md); "
            "correction \"update\" (with selection \"auto\" or \"torch\") "
            "keeps dense accuracy"
            % (name, " with momentum" if _has_momentum(optimizer) and
               not _is_adaptive(optimizer) else "", compression),
            RuntimeWarning, stacklevel=3)
    return correction


def _warmup_density(start, target, warmup, t):
    """libflps's codec_warmup_density, operation for operation, so a torch
    selection takes the very k libflps and a gtopk shard take: the density
    of iteration t decays from start (t = 0) to target (t >= warmup) as
    start * (target / start) ** (t / warmup), clamped to [target, start];
    target throughout when warmup is 0 or start is not above target.
    (Python's float ops and math.pow are the C doubles and libm's pow.)"""
    if warmup == 0 or t >= warmup or not start > target:
        return target
    if t == 0:
        return start
    d = start * math.pow(target / start, t / warmup)
    if d > start:
        d = start
    if d < target:
        d = target
    return d


def _top_k_exact(mag, k):
    """The indices, ascending, of the k largest of mag, ties at the k-th
    largest going to the lower index (libflps's topk_select), so the two
    select the same pairs even where many |a| are equal (Adam's first
    steps are +-lr nearly everywhere)."""
    top, idx = torch.topk(mag, k, sorted=False)
    kth = top.min()
    if not bool(torch.isfinite(kth)):
        # A NaN or Inf is among the largest |a| (torch.topk orders NaN
        # first), so libflps refuses the push and commit() never runs.
        return torch.sort(idx)[0]
    above = torch.nonzero(mag > kth, as_tuple=False).reshape(-1)
    if above.numel() < k:
        tied = torch.nonzero(mag == kth, as_tuple=False).reshape(-1)
        above = torch.cat([above, tied[:k - above.numel()]])
    return torch.sort(above)[0]  # ascending: libflps need not sort


def _top_k_lower_index_first(mag, k):
    """_top_k_exact(mag, k), by libflps's route for a large array and a
    small k: a threshold from a sample of every 100th element, about three
    standard deviations below the k-th largest, then the exact selection
    among the elements at or above it (one pass over mag instead of
    torch.topk's, which is slow on a CPU).  The same indices either way:
    when at least k elements reach the threshold the k largest are among
    them; when fewer do, or mag holds a NaN or Inf, the whole array is
    searched."""
    n = mag.numel()
    if n < 65536 or k > n // 8:
        return _top_k_exact(mag, k)
    sample = mag[::100]
    s = sample.numel()
    r0 = k * s / n
    r = min(s, int(math.ceil(r0 + 3 * math.sqrt(r0) + 1)))
    threshold = torch.topk(sample, r, sorted=False)[0].min()
    if not bool(torch.isfinite(mag.max())):
        return _top_k_exact(mag, k)
    cand = torch.nonzero(mag >= threshold, as_tuple=False).reshape(-1)
    if cand.numel() < k or cand.numel() > n // 4:
        return _top_k_exact(mag, k)
    return cand[_top_k_exact(mag[cand], k)]


#: Momentum factor masking, as libflps's ef_masks (compress/ef.c): the
#: velocity of a sent element is dropped where density * round(1 / (1 - m))
#: is below the bound of the codec's kind (docs/algorithms.md §3).
MASK_BOUNDS = {"topk": 1.0 / 8.0, "gtopk": 1.0}


class TopkSelector:
    """Top-k with error feedback (and momentum correction) for one layer,
    run by torch on the device its gradient lives on: the residual and
    velocity stay there and only the k selected (index, value) pairs go to
    the host.  The same steps as libflps's own (docs/algorithms.md):

        u <- m*u + g;  a <- r + u  (a <- r + g without momentum)
        S <- the k largest |a|;  send a[S];  r <- a, zeroed on S
        u[S] <- 0 where d * round(1 / (1 - m)) < 1 (kind "gtopk") or < 1/8
            (kind "topk") for the step's density d (momentum factor masking
            only where an element waits long enough between sends that its
            velocity is stale, as libflps's ef_step)
        after the update: r[i] += a[i] for every pair the shards left out.

    Ties between equal |a| go to the lower index, as in libflps: the same
    pairs and the same arithmetic.

    warmup, warmup_start: a density warm-up (flps_client_create_warmup):
    select(grad, iteration) takes k_at(iteration) pairs, the k of the
    density that decays from warmup_start to the layer's density over the
    first `warmup` iterations, as libflps and the shards compute it.

    kind: "topk" (every selected pair is applied: also auto's sparse
    layers) or "gtopk" (the shards keep the global top-k and the rest comes
    back through add_back); it decides where the velocity is masked.
    """

    def __init__(self, numel, density, device, momentum=0.0, warmup=0,
                 warmup_start=DEFAULT_WARMUP_START, kind="topk"):
        if kind not in MASK_BOUNDS:
            raise ValueError("TopkSelector: kind %r is none of %s"
                             % (kind, ", ".join(sorted(MASK_BOUNDS))))
        self.kind = kind
        self.numel = numel
        self.warmup = int(warmup)
        self.warmup_start = float(warmup_start)
        self.set_density(density)
        self.momentum = float(momentum)
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError("TopkSelector: momentum %r is outside [0, 1), "
                             "as libflps's error feedback refuses it"
                             % (momentum,))
        # The momentum's horizon 1 / (1 - m), rounded, from m as the float
        # libflps keeps (ef_masks: the same doubles); fixed with m.
        m32 = torch.tensor(self.momentum, dtype=torch.float32).item()
        self._horizon = math.floor(1.0 / (1.0 - m32) + 0.5)
        self.residual = torch.zeros(numel, dtype=torch.float32, device=device)
        self.velocity = (torch.zeros_like(self.residual)
                         if self.momentum > 0 else None)
        self._pending = None
        self.idx = None  # the last push's pairs, on the device
        self.val = None

    def set_density(self, density):
        """k = max(floor(density * numel), 1) from the next select on
        (density 1: every element, as an auto job's dense layer sends);
        after a warm-up, or without one."""
        self.density = float(density)
        self.k = self._k_of(self.density)

    def _k_of(self, density):
        # libflps's codec_count_for: max(floor(density * n), 1), at most n.
        return min(max(int(math.floor(density * self.numel)), 1),
                   self.numel)

    def density_at(self, iteration):
        """The density of iteration `iteration` under the warm-up (self.density
        from the warm-up's end on, and without one)."""
        if self.warmup == 0 or iteration >= self.warmup:
            return self.density
        return _warmup_density(self.warmup_start, self.density, self.warmup,
                               iteration)

    def k_at(self, iteration):
        """The k of iteration `iteration` under the warm-up (self.k from
        the warm-up's end on, and without one)."""
        if self.warmup == 0 or iteration >= self.warmup:
            return self.k
        return self._k_of(self.density_at(iteration))

    def select(self, grad, iteration=None):
        """(indices ascending, values) of grad's step, on grad's device,
        with k_at(iteration) pairs (self.k when iteration is None);
        nothing of the state moves until commit()."""
        k = self.k if iteration is None else self.k_at(iteration)
        d = self.density if iteration is None else self.density_at(iteration)
        g = grad.detach().reshape(-1).to(self.residual.dtype)
        if self.velocity is not None:
            u = self.velocity * self.momentum + g
            a = self.residual + u
        else:
            u = None
            a = self.residual + g
        if k == self.numel:
            idx = torch.arange(self.numel, device=a.device)
        else:
            idx = _top_k_lower_index_first(a.abs(), k)
        val = a[idx]
        self._pending = (a, u, idx, val, d)
        return idx, val

    def _masks(self, density):
        """libflps's ef_masks: u[S] <- 0 only when density * H is below the
        kind's bound (MASK_BOUNDS), H the momentum's horizon
        (self._horizon)."""
        return density * self._horizon < MASK_BOUNDS[self.kind]

    def commit(self):
        """The selection was pushed: r <- a zeroed on S, u[S] <- 0 where
        the density masks."""
        a, u, idx, val, d = self._pending
        self._pending = None
        a[idx] = 0
        self.residual = a
        if u is not None:
            if self._masks(d):
                u[idx] = 0
            self.velocity = u
        self.idx, self.val = idx, val

    def add_back(self, taken):
        """taken: the host's bool mask of the last push's pairs; the pairs
        not taken go back into the residual (only the mask crosses)."""
        if bool(taken.all()):
            return 0
        left = torch.from_numpy(~taken).to(self.idx.device)
        self.residual.index_add_(0, self.idx[left], self.val[left])
        return int((~taken).sum())


def _named(optimizer, named_parameters):
    """(name, parameter) for every parameter of optimizer that needs a
    gradient, in the layout's order."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if named_parameters is None:
        return [("param.%d" % i, p) for i, p in enumerate(params)
                if p.requires_grad]
    named = list(named_parameters)
    by_id = {}
    for name, p in named:
        if id(p) in by_id:
            continue  # a shared parameter is registered once
        by_id[id(p)] = name
    wanted = {id(p) for p in params}
    missing = [i for i, p in enumerate(params) if id(p) not in by_id]
    if missing:
        raise InvalidArgumentError(
            "parameters %s of the optimizer are not in named_parameters; "
            "pass model.named_parameters() of the model the optimizer "
            "trains" % missing)
    out, seen = [], set()
    for name, p in named:
        if id(p) in wanted and id(p) not in seen and p.requires_grad:
            seen.add(id(p))
            out.append((name, p))
    return out


def _check_optimizer(optimizer):
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidArgumentError(
            "optimizer is a %s; pass a torch.optim.Optimizer"
            % type(optimizer).__name__)


def _trained(optimizer, named_parameters):
    """_named's pairs; InvalidArgumentError when there are none."""
    named = _named(optimizer, named_parameters)
    if not named:
        raise InvalidArgumentError("the optimizer has no parameter that "
                                   "requires a gradient")
    return named


def _class_defaults(cls):
    """The keyword defaults of an optimizer class's constructor (torch's
    "required" sentinel and parameters without one left out)."""
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params
            if p.default is not inspect.Parameter.empty and
            isinstance(p.default, (int, float, tuple))}


def _follow_hyper(optimizer, key, said, slot):
    """The job file's value (said, a jobenv Setting it gives) in each of
    the optimizer's groups at slot: ("lr", None) is group["lr"],
    ("betas", 0) is group["betas"][0].  A group left at the class's default
    takes it; a group set otherwise is refused, naming both."""
    name = type(optimizer).__name__
    group_key, index = slot
    default = _class_defaults(type(optimizer)).get(group_key)
    for g in optimizer.param_groups:
        have = g[group_key] if index is None else g[group_key][index]
        if have == said.value:
            continue
        if default is None or g[group_key] != default:
            raise _jobenv.contradiction(
                "%s's %s" % (name, group_key if index is None
                             else "%s[%d]" % (group_key, index)),
                have, key, said)
        if index is None:
            g[group_key] = said.value
        else:
            value = list(g[group_key])
            value[index] = said.value
            g[group_key] = tuple(value)
        if group_key == "lr" and "initial_lr" in g:
            g["initial_lr"] = said.value  # an LR scheduler's base


def _follow_optimizer(js, optimizer):
    """The job file's lr and momentum (given ones only) in the wrapped
    optimizer: momentum is SGD's (RMSprop's) momentum or Adam's first
    beta."""
    lr = js.get("lr")
    if lr is not None and lr.given and all(
            "lr" in g for g in optimizer.param_groups):
        _follow_hyper(optimizer, "lr", lr, ("lr", None))
    m = js.get("momentum")
    if m is None or not m.given:
        return
    groups = optimizer.param_groups
    if all("momentum" in g for g in groups):
        _follow_hyper(optimizer, "momentum", m, ("momentum", None))
    elif all("betas" in g for g in groups):
        _follow_hyper(optimizer, "momentum", m, ("betas", 0))
    elif m.value != 0:
        raise ConfigError(
            "the job file's momentum: %s (%s) has nothing to set in %s, "
            "which has no momentum; leave momentum out of the job file"
            % (m.text, m.variable, type(optimizer).__name__))


def _follow_job(js, optimizer, mode, compression, sync_mode, part_size,
                iterations, lr_cosine, density_warmup, density_warmup_start):
    """The settings a DistributedOptimizer runs with, each its argument or
    the job file's (flps.jobenv), as a dict; the optimizer's lr and
    momentum follow the file too.  Raises ConfigError for an argument that
    contradicts the file, or a mode flps.torch cannot run."""
    if sync_mode is not None:
        try:
            parsed = _jobenv._mode(sync_mode)
        except (ValueError, AttributeError, TypeError):
            parsed = "fedavg"
        if parsed == "fedavg":
            raise ConfigError("sync_mode=%r: use \"ssgd\", \"async\" or "
                              "\"ssp:S\"" % (sync_mode,))
        sync_mode = parsed
    run = {"compression": js.resolve("compression", compression, "dense",
                                     same=_client._same_codec)}
    sync = js.resolve("mode", sync_mode, "ssgd", arg="sync_mode",
                      same=_client._same_mode)
    if sync == "fedavg":
        raise ConfigError(
            "the job file's mode: fedavg (FLPS_MODE) is federated averaging, "
            "which flps.fl runs (flps.fl.Federation: the job's rounds, "
            "clients and strategy); a DistributedOptimizer trains ssgd, "
            "async or ssp:S")
    sync = _client._bound(js, sync)
    run["asynchronous"] = sync != "ssgd"
    run["staleness"] = int(sync[4:]) if sync.startswith("ssp:") else None
    run["part_size"] = js.resolve("part_size", part_size, 0)
    run["iterations"] = js.resolve("iterations", iterations, 0)
    run["cosine"] = js.resolve(
        "lr_schedule", None if lr_cosine is None else
        ("cosine" if lr_cosine else "constant"), "constant", arg="lr_cosine",
        shown=lr_cosine) == "cosine"
    if run["cosine"] and run["iterations"] == 0:
        raise ConfigError("a cosine lr schedule decays over the job's "
                          "iterations: pass iterations= (or give iterations "
                          "in the job file)")
    run["warmup"] = js.resolve("density_warmup", density_warmup, 0)
    run["warmup_start"] = js.resolve("density_warmup_start",
                                     density_warmup_start,
                                     DEFAULT_WARMUP_START)
    # Where a warm-up came from the environment, for a refusal's message.
    run["warmup_env"] = [
        "%s=%s" % (js.get(k).variable, js.get(k).text)
        for k, arg in (("density_warmup", density_warmup),
                       ("density_warmup_start", density_warmup_start))
        if arg is None and js.get(k) is not None]
    _follow_optimizer(js, optimizer)
    return run


class DistributedOptimizer(torch.optim.Optimizer):
    """Wrap `optimizer` so that every step uses the gradients of all
    workers, aggregated by the flps shards.

    optimizer: the torch optimizer to wrap (its param_groups and state are
        shared: LR schedulers and state_dict work as on the original).
    named_parameters: (name, parameter) pairs naming the optimizer's
        parameters (model.named_parameters()); the names are the layout
        the shards check.  Default: "param.0", "param.1", ...
    compression: "dense", "topk:D", "gtopk:D", "randk:D", "dgc:D",
        "qsgd:BITS", "fp16", "sign" or "auto" (see docs/compress.md).
    mode: "gradient" (default): the shards average the (compressed)
        gradients, or with correction "update" the workers' optimizer
        steps, and every worker applies the same average; any optimizer
        works.  "server": the shards apply plain SGD themselves (the
        wrapped optimizer must be torch.optim.SGD; its lr and momentum go
        to flps) and hold the model, for checkpoints and late joins.
        "saps": no shard; decentralized SAPS-PSGD (flps.torch_saps): after
        every local_steps steps of the wrapped optimizer the worker
        averages the job's saps_density share of its parameters with one
        peer.  Default: "saps" where the job file says mode: saps
        (FLPS_MODE), else "gradient"; a mode that contradicts the file is
        refused.
    correction: what gradient mode does with a sparse codec
        (SPARSE_CODECS). "auto" (default): "update" where it can run (not
        with selection "libflps"), else "none"; other codecs, dense
        included, run as "none", as they always did.  "update": each
        worker's optimizer steps on its own gradient, taken at the common
        model plus the worker's steps not sent yet; the steps are what is
        sent, as top-k pairs with error feedback, and every worker's
        parameters hold the common model after step().  The optimizer's
        state (momentum, Adam's moments) is each worker's own; with
        sync_mode async or ssp:S the common model is the one each wait
        pulls.  "none":
        the optimizer steps on the averaged compressed gradient (with
        momentum or an adaptive optimizer a RuntimeWarning says it loses
        accuracy).
    selection: where top-k with error feedback runs (topk:D and gtopk:D):
        "auto" (default): in torch, on the tensor's device, for CUDA
        parameters (only the selected pairs cross to the host, the residual
        stays on the GPU) and for every parameter with correction
        "update"; otherwise in libflps for CPU parameters.  "torch": in
        torch for every parameter (CPU too).  "libflps": libflps's own
        top-k on the host (a CUDA gradient is copied over whole).
    sync_mode: "ssgd" (synchronous), "async" (the shards apply each push
        as it comes) or "ssp:S" (async, at most S iterations ahead of the
        slowest worker).
    config: a Config (default: the one init() returned, or init() now).
        A world of one (init() without a launcher) trains locally: step()
        is the wrapped optimizer's, nothing connects.
    density_warmup, density_warmup_start: a density warm-up over the first
        density_warmup iterations, from density_warmup_start down to the
        codec's density (flps.connect; topk:D, gtopk:D, dgc:D or auto); a
        torch selection follows the same schedule.
    part_size, iterations, lr_cosine: passed to flps.connect; in gradient
        mode lr_cosine decays the wrapped optimizer's lr instead,
        lr * (1 + cos(pi * t / iterations)) / 2 at iteration t.
    retry_ms, deadline_ms: passed to flps.connect.
    overlap: True: step() pushes what backward left and returns without
        waiting; the next forward pass waits for each layer's update just
        before a module reads its parameters and (gradient mode) steps the
        wrapped optimizer on those parameters then, or (server mode) finds
        the shards' new values in them, so the first layers compute
        while later layers' updates are still on the wire (the shards'
        window sends the first layers' pieces first).  Synchronous
        gradient or server mode with a dense-valued codec (dense, fp16,
        qsgd, sign, randk) or libflps's top-k selection (correction
        "none"); the same arithmetic, bit for bit.  Between step() and
        the next forward the parameters are the old ones: call
        synchronize() before reading them any other way (state_dict() of
        this optimizer and close() do).
        Default: the job file's overlap where it gives one, else False.

    What the job file says is what runs (flps.jobenv): compression,
    sync_mode (the file's mode), part_size, iterations, lr_cosine (its
    lr_schedule), density_warmup and density_warmup_start left at None take
    the job file's values, and the wrapped optimizer's lr and momentum (or
    Adam's first beta) take the file's lr and momentum where the optimizer
    was left at its class's defaults; an argument (or an optimizer setting)
    that contradicts what the file gives is a ConfigError naming both.
    Where the file says nothing: dense, ssgd, constant lr, no warm-up.

    Every parameter must be a contiguous float32 tensor, on the CPU or (in
    mode "gradient") on a CUDA device.  Constructing it connects and makes
    every worker's parameters rank 0's.
    """

    def __new__(cls, *args, **kwargs):
        # mode "saps" (the argument, or the job file's where none is
        # given) makes the decentralized optimizer, a subclass.
        if cls is DistributedOptimizer:
            mode = kwargs.get("mode", args[3] if len(args) > 3 else None)
            if mode == "saps" or (mode is None and _torch_saps.job_mode(
                    kwargs.get("environ")) == "saps"):
                cls = _SapsDistributedOptimizer
        return super().__new__(cls)

    def __init__(self, optimizer, named_parameters=None, compression=None,
                 mode=None, *, sync_mode=None, selection="auto",
                 correction="auto", config=None, part_size=None,
                 iterations=None, lr_cosine=None, retry_ms=0, deadline_ms=0,
                 density_warmup=None, density_warmup_start=None,
                 overlap=None):
        if mode is None:
            mode = "gradient"
        elif _torch_saps.job_mode() == "saps":
            raise ConfigError("mode=%r contradicts the job file's mode: saps "
                              "(FLPS_MODE); drop the argument or change the "
                              "job file" % (mode,))
        if mode not in ("gradient", "server"):
            raise ConfigError("mode=%r: use \"gradient\" (the wrapped "
                              "optimizer applies the averaged gradient), "
                              "\"server\" (the shards apply SGD) or \"saps\" "
                              "(no shard: decentralized)" % (mode,))
        if selection not in ("auto", "torch", "libflps"):
            raise ConfigError("selection=%r: use \"auto\" (torch for CUDA "
                              "parameters, libflps for CPU ones), \"torch\" "
                              "or \"libflps\"" % (selection,))
        _check_optimizer(optimizer)
        _check_correction(correction)
        #: "update" or "none": how gradient mode meets a sparse codec
        #: (a world of one: "none", the wrapped optimizer steps alone).
        self.correction = "none"
        # Not Optimizer.__init__: this object is a view of the wrapped one.
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.defaults = optimizer.defaults
        self.mode = mode
        cfg = config or _config or init()
        self.config = cfg
        self._named = _trained(optimizer, named_parameters)
        for name, p in self._named:
            self._check_parameter(name, p, mode)
        self.client = None
        self.tuner = None
        self.selectors = [None] * len(self._named)
        self._local = 0  # steps this process made
        self.iteration = 0
        self._pushed = [False] * len(self._named)
        self._hooks = []
        self._timing_hooks = []
        self._base = None  # async gradient mode: the model last pulled
        self._cosine = 0  # gradient mode: the lr schedule's iterations
        self._forward_hook = None  # correction "update": _to_local
        #: overlap: the iteration whose updates the next forward applies
        #: layer by layer (None: none pending), the parameters not applied
        #: yet, and the optimizer's hyperparameters as step() saw them.
        self.overlap = False
        self._deferred = None
        self._unapplied = set()
        self._hyper = None
        if cfg.local:
            return  # a world of one: the wrapped optimizer steps alone
        js = (cfg.settings if cfg.settings is not None
              else _jobenv.JobSettings())
        job = _follow_job(js, optimizer, mode, compression, sync_mode,
                          part_size, iterations, lr_cosine, density_warmup,
                          density_warmup_start)
        compression = job["compression"]
        self.correction = _correction_of(correction, compression, mode,
                                         selection, optimizer)
        density = _topk_density(compression)
        if self.correction == "update":
            density = _topk_density(compression, SPARSE_CODECS)
            selection = "torch"  # the residual is needed in torch
        if selection == "torch" and density is None:
            raise ConfigError(
                "selection=\"torch\" runs top-k in torch: it needs "
                "compression \"topk:D\", \"gtopk:D\" or \"auto\" (got %r)"
                % (compression,))
        lr, momentum = 1.0, 0.0
        if mode == "server":
            lr, momentum = self._sgd_settings(optimizer)
            # The parameters' own memory is the replica: the shards' updates
            # land in it directly.
            self._replicas = [p.detach() for _, p in self._named]
        else:
            # The replica of each parameter only receives the update, which
            # with lr 1 and momentum 0 is -mean(gradient); it is zeroed
            # after every step so the update is read back without rounding.
            self._replicas = [torch.zeros(p.numel(), dtype=torch.float32)
                              for _, p in self._named]
            if job["cosine"]:
                self._cosine = job["iterations"]
        self.overlap = self._overlap_of(js, overlap, job, compression)
        if retry_ms == 0:
            # A re-sent push whose late refusal (FLPS_ELATE) arrives after
            # the next iteration's push makes libflps pull that part
            # (worker/client_recv.c does not compare the refusal's iteration):
            # in gradient mode that turns a step's gradient into the model,
            # and the pull, asked for the closed iteration, is refused with
            # a sticky FLPS_ELATE. Without resends neither can happen; the
            # deadline still bounds every wait.
            retry_ms = deadline_ms or 300000
        layout = [(name, r) for (name, _), r in zip(self._named,
                                                    self._replicas)]
        warmup, warmup_start = job["warmup"], job["warmup_start"]
        try:
            # Resolved above against the job file: the client takes them as
            # they are (lr 1 in gradient mode is no contradiction of lr).
            self.client = _client.connect(
                cfg.job, cfg.rank, cfg.workers, list(cfg.servers), layout,
                lr=lr, compression=compression, momentum=momentum,
                part_size=job["part_size"], iterations=job["iterations"],
                asynchronous=job["asynchronous"], staleness=job["staleness"],
                lr_cosine=job["cosine"] and mode == "server",
                retry_ms=retry_ms, deadline_ms=deadline_ms,
                density_warmup=warmup, density_warmup_start=warmup_start,
                push_window=_push_window_for(compression),
                settings=_jobenv.JobSettings.none())
        except InvalidArgumentError as e:
            if warmup == 0 or not job["warmup_env"]:
                raise
            # Say where a refused warm-up came from: the job file, through
            # the launcher's environment, not this program's arguments.
            raise type(e)(
                "%s (the warm-up is %s from the environment: the job file's "
                "density_warmup and density_warmup_start)"
                % (e.message, ", ".join(job["warmup_env"])), code=e.code,
                name=e.name) from None
        self.client._ran.optimizer = type(optimizer).__name__
        #: compression "auto": the profile and plan duties (flps.auto).
        if compression == "auto":
            self.tuner = _auto.AutoTuner(
                self.client, [n for n, _ in self._named],
                [p.numel() for _, p in self._named], cfg.rank, cfg.workers,
                on_codec=self._on_codec)
        try:
            self._broadcast()
        except BaseException:
            self.client.close()
            raise

        # auto's sparse layers are topk:D; masking differs for gtopk.
        selector_kind = "gtopk" if compression.startswith("gtopk:") \
            else "topk"

        def density_of(i):
            if density != "auto":
                return density
            spec = self.tuner.codecs[i]
            return 1.0 if spec == "dense" else float(spec.partition(":")[2])

        #: Per parameter, its TopkSelector when torch runs its selection,
        #: else None (libflps's own push); every parameter has one with
        #: correction "update".
        self.selectors = [
            TopkSelector(p.numel(), density_of(i), p.device, momentum,
                         warmup=warmup, warmup_start=warmup_start,
                         kind=selector_kind)
            if density is not None and (
                selection == "torch" or
                (selection == "auto" and p.device.type == "cuda"))
            else None for i, (_, p) in enumerate(self._named)]
        #: correction "update": per parameter the common model, the one
        #: the shards hold and every worker's step() leaves in the
        #: parameters; each worker computes its gradients at the common
        #: model plus its own steps not sent yet (the residual), which
        #: _to_local puts into the parameters as a training forward starts.
        self._common = None
        self._at_local = False
        if self.correction == "update":
            self._common = [p.detach().reshape(-1).clone()
                            for _, p in self._named]
            self._param_ids = {id(p) for _, p in self._named}
            self._forward_hook = _module.register_module_forward_pre_hook(
                self._to_local)
        if self.overlap and any(sel is not None for sel in self.selectors):
            try:
                self.overlap = self._overlap_refused(
                    overlap, "top-k selected in torch")
            except BaseException:
                self.client.close()
                raise
        if self.overlap:
            self._index = {id(p): i for i, (_, p) in enumerate(self._named)}
            self._gbuf = [None] * len(self._named)
            self._forward_hook = _module.register_module_forward_pre_hook(
                self._apply_module)
        self.iteration = self.client.resume_iteration
        # The update exchange pushes steps, known only once the wrapped
        # optimizer has made them in step(): nothing to push in backward.
        if self.correction == "none":
            for i, (_, p) in enumerate(self._named):
                self._hooks.append(_post_accumulate_hook(p, self._hook(i)))
        # Rank 0 of an auto job times each layer's backward in warm-up: a
        # tensor hook runs as the parameter's gradient is produced (torch
        # 1.13 has these too); removed once the profile is out.
        if self.tuner is not None and self.tuner.alpha is not None:
            for i, (_, p) in enumerate(self._named):
                self._timing_hooks.append(p.register_hook(self._timer(i)))

    def _overlap_of(self, js, overlap, job, compression):
        """Whether step() leaves the updates to the next forward pass: the
        argument or the job file's overlap (default False), where this
        optimizer can (the class docstring's overlap)."""
        want = js.resolve("overlap", overlap, False)
        why = None
        if self.mode not in ("gradient", "server"):
            why = "mode=%r" % self.mode
        elif job["asynchronous"]:
            why = "an asynchronous job (each wait pulls the whole model)"
        elif self.correction != "none":
            why = "correction %r" % self.correction
        elif compression == "auto":
            why = "compression \"auto\""
        if want and why is not None:
            return self._overlap_refused(overlap, why)
        return bool(want)

    @staticmethod
    def _overlap_refused(overlap, why):
        """False where the job file asked for overlap and this optimizer
        cannot (it pushes during backward anyway, as flworker in async
        jobs); a ConfigError where the argument asked."""
        if overlap:
            raise ConfigError(
                "overlap=True applies the updates layer by layer in the "
                "next forward pass, in synchronous gradient or server mode "
                "with correction \"none\" and libflps's selection; not with "
                "%s: drop overlap" % why)
        return False

    @staticmethod
    def _check_parameter(name, p, mode):
        if p.device.type not in ("cpu", "cuda") or p.dtype != torch.float32:
            raise InvalidArgumentError(
                "parameter %r is %s on %s; flps.torch trains float32 CPU or "
                "CUDA parameters" % (name, p.dtype, p.device))
        if mode == "server" and p.device.type != "cpu":
            raise InvalidArgumentError(
                "parameter %r is on %s; mode=\"server\" writes the shards' "
                "model into the parameters' memory, so they must be on the "
                "CPU: use mode=\"gradient\" for CUDA parameters"
                % (name, p.device))
        if not p.is_contiguous():
            raise InvalidArgumentError("parameter %r is not contiguous"
                                       % name)

    @staticmethod
    def _sgd_settings(optimizer):
        if type(optimizer) is not torch.optim.SGD:
            raise ConfigError(
                "mode=\"server\" runs plain SGD on the shards, so it wraps "
                "torch.optim.SGD only (got %s); use mode=\"gradient\" for "
                "other optimizers" % type(optimizer).__name__)
        keys = ("lr", "momentum", "dampening", "weight_decay", "nesterov")
        settings = {tuple(g.get(k) for k in keys)
                    for g in optimizer.param_groups}
        if len(settings) != 1:
            raise ConfigError("mode=\"server\" needs one lr and momentum "
                              "for every parameter group")
        lr, momentum, dampening, weight_decay, nesterov = settings.pop()
        if dampening or weight_decay or nesterov:
            raise ConfigError(
                "mode=\"server\" runs plain SGD with momentum: set "
                "dampening=0, weight_decay=0, nesterov=False, or use "
                "mode=\"gradient\"")
        return float(lr), float(momentum)

    def _broadcast(self):
        """Rank 0's parameters become every worker's (flps_client_init)."""
        with torch.no_grad():
            if self.mode == "gradient" and self.config.rank == 0:
                for (_, p), r in zip(self._named, self._replicas):
                    r.copy_(p.reshape(-1))
            self.client.init()
            if self.tuner is not None and self.config.rank == 0:
                # Now, while a pull only re-reads the model just pulled.
                self.tuner.measure_network()
            if self.mode == "gradient" and self.client.mode != "ssgd":
                # Asynchronous: each wait pulls the model (only the changed
                # elements), so the replica keeps it; the update is the
                # change since the last pull.
                self._base = [r.clone() for r in self._replicas]
            if self.mode == "gradient":
                for (_, p), r in zip(self._named, self._replicas):
                    p.copy_(r.view_as(p))
                    if self._base is None:
                        r.zero_()

    def _hook(self, i):
        def hook(p):
            self._push(i, p.grad)
        return hook

    def _timer(self, i):
        def hook(_grad):
            if self.tuner.profiling(self._local):
                self.tuner.mark(i)
        return hook

    def _on_codec(self, i, spec):
        """The plan changed layer i's codec: a torch selector follows."""
        sel = self.selectors[i] if hasattr(self, "selectors") else None
        if sel is not None:
            sel.set_density(1.0 if spec == "dense"
                            else float(spec.partition(":")[2]))

    def _push(self, i, grad):
        name, p = self._named[i]
        if i in self._unapplied:
            # A layer the last forward pass did not read: its update first.
            self._apply([i])
        if self._pushed[i]:
            raise StateError(
                "the gradient of %r was produced twice in iteration %d; flps "
                "pushes each gradient once per step: call step() after "
                "every backward()" % (name, self.iteration))
        if grad is None:
            grad = torch.zeros(p.numel(), dtype=torch.float32,
                               device=p.device)
        elif grad.is_sparse:
            grad = grad.to_dense()
        if self.tuner is not None and not any(self._pushed):
            # The iteration's first push: its boundary, where flworker
            # too applies a new plan.
            self.tuner.check_plan(self.iteration)
        sel = self.selectors[i]
        if sel is not None:
            idx, val = sel.select(grad, self.iteration)
            # Only the pairs go to the host (int32 indices: a layer has
            # fewer than 2^31 elements wherever torch indexes it).
            self.client.push_pairs(i, idx.to(torch.int32), val,
                                   self.iteration)
            sel.commit()
        else:
            self.client.push(i, grad.detach(), self.iteration)
        self._pushed[i] = True
        if self.tuner is not None:
            self.tuner.mark_pushed()

    def step(self, closure=None):
        """Push what backward did not push already (a closure's gradients,
        a parameter backward left without one), wait for the shards and
        apply the aggregate.  Returns closure()'s loss."""
        if self.client is None:
            return self._step_alone(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.correction == "update":
            self._exchange_steps()
        elif self.overlap and closure is None:
            self._push_and_defer()
        else:
            self.synchronize()
            self._exchange_gradients()
        if self.tuner is not None:
            self.tuner.end_step(self._local, self.iteration)
            if self.tuner.profile is not None and self._timing_hooks:
                for h in self._timing_hooks:
                    h.remove()
                self._timing_hooks = []
            if self.tuner.profiling(self._local + 1):
                self.tuner.mark_start()
        self._local += 1
        self.iteration += 1
        self._pushed = [False] * len(self._named)
        return loss

    def _exchange_gradients(self):
        """Push the gradients backward did not push yet, wait, and in
        gradient mode let the optimizer step on the average."""
        self._push_rest()
        self._wait()
        if self.mode == "gradient":
            with torch.no_grad():
                self._pulled_to_updates()
                for (_, p), r, sel in zip(self._named, self._replicas,
                                          self.selectors):
                    if sel is not None:
                        self._sparse_grad(p, r)
                        continue
                    avg = r.view_as(p)
                    if p.grad is None:
                        p.grad = avg.neg().to(p.device)
                    elif p.grad.device == r.device and p.grad.shape == p.shape:
                        # In place, one pass: no 13 MB allocation (and its
                        # page faults) a step for a 3.3M-value model.
                        torch.neg(avg, out=p.grad)
                    else:
                        p.grad.copy_(avg.neg())
                    r.zero_()
                self._updates_to_pulled()
            with self._scheduled_lr():
                self.optimizer.step()

    def _push_rest(self):
        """Push, last layer first, the gradients backward did not push."""
        for i in reversed(range(len(self._named))):
            if not self._pushed[i]:
                self._push(i, self._named[i][1].grad)

    def _push_and_defer(self):
        """overlap: push what backward did not, and leave the iteration's
        updates to the next forward pass (_apply_module), with the wrapped
        optimizer's hyperparameters as they are now (gradient mode: in
        server mode the shards step, and _apply only waits)."""
        self.synchronize()
        self._push_rest()
        if self.mode != "server":
            with self._scheduled_lr():
                self._hyper = [{k: v for k, v in g.items() if k != "params"}
                               for g in self.optimizer.param_groups]
        self._deferred = self.iteration
        self._unapplied = set(range(len(self._named)))

    def _apply_module(self, module, inputs):
        """The forward pre-hook of every module (overlap): a module holding
        parameters whose update is pending waits for it (and in gradient
        mode steps them)."""
        if self._deferred is None:
            return
        mine = [self._index[id(q)] for q in module.parameters(recurse=False)
                if id(q) in self._index]
        mine = [i for i in mine if i in self._unapplied]
        if mine:
            self._apply(mine)

    def _apply(self, layers):
        """Wait for the pending updates of layers (indices); in gradient
        mode then step the wrapped optimizer on exactly those parameters,
        with the gradient the shards averaged and the hyperparameters
        step() saw; each parameter's own .grad is left as it was."""
        it = self._deferred
        self._unapplied.difference_update(layers)
        if not self._unapplied:
            self._deferred = None
        for i in layers:
            self.client.wait_layer(i, it)
        if self.mode == "server":
            return  # the shards stepped: the update lands in the parameter
        groups = self.optimizer.param_groups
        chosen = {id(self._named[i][1]) for i in layers}
        kept, grads = [dict(g) for g in groups], []
        with torch.no_grad():
            for i in layers:
                p, r = self._named[i][1], self._replicas[i]
                avg = self._gbuf[i]
                if avg is None:
                    avg = self._gbuf[i] = torch.empty_like(p)
                if avg.device == r.device:
                    torch.neg(r.view_as(p), out=avg)
                else:
                    avg.copy_(r.view_as(p))
                    avg.neg_()
                r.zero_()
                grads.append((p, p.grad))
                p.grad = avg
            try:
                for group, hyper in zip(groups, self._hyper):
                    group.update(hyper)
                    group["params"] = [q for q in group["params"]
                                       if id(q) in chosen]
                self.optimizer.step()
            finally:
                for group, was in zip(groups, kept):
                    group.clear()
                    group.update(was)
                for p, grad in grads:
                    p.grad = grad

    def synchronize(self):
        """overlap: wait for every update still pending and apply it, so the
        parameters are the model after the last step().  Without overlap,
        or with nothing pending, it returns at once."""
        if self._deferred is not None:
            self._apply(sorted(self._unapplied))

    def _exchange_steps(self):
        """Correction "update": the wrapped optimizer steps on this
        worker's own gradient, at the parameters as they are (the common
        model plus the worker's residual, after a training forward); the
        step, pushed as the "gradient" -(p_after - p_before), joins the
        residual (error feedback, in TopkSelector) and its top-k pairs go
        to the shards; their update, +mean over the workers of the pairs
        they took, moves the common model, which every worker's parameters
        then hold.  Asynchronous: the update is the change of the pulled
        model since the last pull (the other workers' steps included)."""
        with torch.no_grad():
            before = [p.detach().reshape(-1).clone() for _, p in self._named]
            with self._scheduled_lr():
                self.optimizer.step()
            for i in reversed(range(len(self._named))):
                p = self._named[i][1]
                self._push(i, before[i].sub_(p.reshape(-1)))
                before[i] = None
            self._wait()
            self._pulled_to_updates()
            for (_, p), r, common in zip(self._named, self._replicas,
                                         self._common):
                idx, vals = self._take_update(r, p.device)
                common.index_add_(0, idx, vals)
                p.copy_(common.view_as(p))
            self._updates_to_pulled()
            self._at_local = False

    def _to_local(self, module, inputs):
        """The forward pre-hook of every module (correction "update"): the
        first forward with gradients on, after a step, of a module holding
        one of the parameters moves them all from the common model to this
        worker's own, the common model plus its steps not sent yet
        (-residual), where its gradient is taken (as in CSER: the worker
        sees its own pending steps, so error feedback does not make it push
        the same way again and again).  Forwards without gradients
        (evaluation under no_grad) and other models' see the common
        model."""
        if self._at_local or not torch.is_grad_enabled():
            return
        if not any(id(q) in self._param_ids
                   for q in module.parameters(recurse=False)):
            return
        with torch.no_grad():
            for (_, p), sel in zip(self._named, self.selectors):
                p.view(-1).sub_(sel.residual)
        self._at_local = True

    def _wait(self):
        """Wait for the iteration's updates; torch selectors take back the
        pairs the shards left out."""
        self.client.wait(self.iteration)
        for i, sel in enumerate(self.selectors):
            if sel is not None:
                sel.add_back(self.client.pairs_taken(i, sel.idx.numel()))

    @staticmethod
    def _take_update(r, device):
        """(indices, values) of the non-zero elements of the host replica
        r, on device, and r zeroed there: only they cross to a GPU."""
        nz = torch.nonzero(r, as_tuple=False).reshape(-1)
        vals = r[nz]
        r[nz] = 0
        return nz.to(device), vals.to(device)

    def _step_alone(self, closure):
        """A world of one: the wrapped optimizer's step, nothing else."""
        with self._scheduled_lr():
            loss = self.optimizer.step(closure)
        self._local += 1
        self.iteration += 1
        return loss

    def _pulled_to_updates(self):
        """Asynchronous gradient mode: each replica holds the model the wait
        pulled; make it the update since the last pull (what a synchronous
        replica holds), and keep the model in the base."""
        for r, b in zip(self._replicas, self._base or ()):
            delta = r - b
            b.copy_(r)
            r.copy_(delta)

    def _updates_to_pulled(self):
        """Asynchronous gradient mode: the replicas hold the model again,
        for the next wait's pull of the changed elements."""
        for r, b in zip(self._replicas, self._base or ()):
            r.copy_(b)

    @contextlib.contextmanager
    def _scheduled_lr(self):
        """Gradient mode with a cosine schedule: the wrapped optimizer's lr
        times (1 + cos(pi * t / iterations)) / 2 for this step, as the
        shards decay theirs (an LR scheduler of the program's sees its own
        lr)."""
        if not self._cosine:
            yield
            return
        t = min(self.iteration, self._cosine) / self._cosine
        scale = 0.5 * (1.0 + math.cos(math.pi * t))
        kept = [g["lr"] for g in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["lr"] = g["lr"] * scale
        try:
            yield
        finally:
            for g, lr in zip(self.optimizer.param_groups, kept):
                g["lr"] = lr

    @staticmethod
    def _sparse_grad(p, r):
        """p.grad = the update in the host replica r (-mean of the pairs the
        shards kept), carried to p's device as pairs: the update of a
        sparse job touches at most the shards' k (gtopk) or P*k (topk)
        elements, so only those cross; r is zeroed where it was set."""
        nz, vals = DistributedOptimizer._take_update(r, p.device)
        grad = torch.zeros(p.numel(), dtype=torch.float32, device=p.device)
        grad[nz] = vals.neg()
        if p.grad is None:
            p.grad = grad.view_as(p)
        else:
            p.grad.copy_(grad.view_as(p))

    def zero_grad(self, *args, **kwargs):
        if self.tuner is not None and self.tuner.profiling(self._local):
            self.tuner.mark_start()  # the step's compute starts here
        return self.optimizer.zero_grad(*args, **kwargs)

    def state_dict(self):
        self.synchronize()
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        return self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group):
        raise StateError("the flps layout is fixed when the "
                         "DistributedOptimizer is made: add the parameters "
                         "to the optimizer before wrapping it")

    def close(self):
        """Apply the updates overlap left pending, then disconnect from the
        shards (the parameters stay as they are)."""
        self.synchronize()
        for h in self._hooks + self._timing_hooks:
            h.remove()
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        self._hooks = []
        self._timing_hooks = []
        if self.client is not None:
            self.client.close()

    def __repr__(self):
        if self.client is None:
            return ("DistributedOptimizer(%s, a world of one: local "
                    "training)" % type(self.optimizer).__name__)
        return ("DistributedOptimizer(%s, mode=%r, compression=%r, "
                "sync_mode=%r, correction=%r, rank %d/%d)"
                % (type(self.optimizer).__name__, self.mode,
                   self.client.compression, self.client.mode,
                   self.correction, self.config.rank, self.config.workers))


class _SapsDistributedOptimizer(_torch_saps.SapsOptimizer,
                                DistributedOptimizer):
    """DistributedOptimizer(..., mode="saps"): flps.torch_saps."""

    def __init__(self, optimizer, named_parameters=None, compression=None,
                 mode=None, *, density=None, local_steps=None, environ=None,
                 **kwargs):
        if mode not in (None, "saps"):
            raise ConfigError("mode=%r contradicts the job file's mode: saps "
                              "(FLPS_MODE); drop the argument or change the "
                              "job file" % (mode,))
        _check_optimizer(optimizer)
        _torch_saps.check_arguments(compression, kwargs)
        self._saps_init(optimizer, _trained(optimizer, named_parameters),
                        density, local_steps, environ)
