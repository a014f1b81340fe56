"""flps.torch: train a PyTorch model with flps shards doing the all-reduce.

    import flps.torch as ft
    cfg = ft.init()          # FLPS_JOB, FLPS_RANK, FLPS_WORKERS, FLPS_SERVERS
    opt = ft.DistributedOptimizer(torch.optim.Adam(model.parameters()),
                                  named_parameters=model.named_parameters(),
                                  compression="gtopk:0.01")
    for x, y in batches:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

Constructing the DistributedOptimizer connects to the shards and makes
every worker start from rank 0's parameters (the broadcast).  Each step
pushes every parameter's gradient, waits for the shards' aggregate and
applies it.  docs/python.md describes the two modes ("gradient", "server"),
the density warm-up and the environment variables.
"""

import math
import os
from dataclasses import dataclass

import torch

from . import auto as _auto
from . import client as _client
from .errors import ConfigError, InvalidArgumentError, StateError

__all__ = ["Config", "init", "DistributedOptimizer", "TopkSelector",
           "ENVIRONMENT", "HAS_POST_ACCUMULATE_HOOK"]

#: The environment variables flps.torch reads (flrun and flagent set them
#: for a job file's command:; set them yourself otherwise): init() the first
#: four, DistributedOptimizer the optional warm-up ones where its
#: density_warmup / density_warmup_start arguments are left at None.
ENVIRONMENT = {
    "FLPS_JOB": "the job id the shards serve",
    "FLPS_RANK": "this worker's rank, 0..FLPS_WORKERS-1",
    "FLPS_WORKERS": "how many workers the job has",
    "FLPS_SERVERS": "the shard endpoints, shard 0 first, comma-separated "
                    "(tcp://host:port,...)",
    "FLPS_DENSITY_WARMUP": "the density warm-up's iterations (the job "
                           "file's density_warmup; unset or 0: none)",
    "FLPS_DENSITY_WARMUP_START": "the warm-up's start density, 0 < S <= 1 "
                                 "(density_warmup_start; unset: 0.25)",
}

#: The start density of a warm-up when neither the argument nor
#: FLPS_DENSITY_WARMUP_START gives one (the job file's default).
DEFAULT_WARMUP_START = 0.25

#: True where torch has Tensor.register_post_accumulate_grad_hook (2.1 and
#: later): gradients are then pushed during backward, as soon as each is
#: produced. Older torch pushes them all at the start of step().
HAS_POST_ACCUMULATE_HOOK = hasattr(torch.Tensor,
                                   "register_post_accumulate_grad_hook")


@dataclass(frozen=True)
class Config:
    """Where this worker belongs: what init() read from the environment."""

    job: str
    rank: int
    workers: int
    servers: tuple


_config = None  # what init() returned last: the default of every optimizer


def _env_int(env, name, low):
    text = env.get(name)
    if text is None or text.strip() == "":
        raise ConfigError(
            "%s is not set; it is %s: set it in each worker's environment"
            % (name, ENVIRONMENT[name]))
    try:
        value = int(text)
    except ValueError:
        raise ConfigError("%s=%r is not a whole number; it is %s"
                          % (name, text, ENVIRONMENT[name])) from None
    if value < low:
        raise ConfigError("%s=%d is below %d; it is %s"
                          % (name, value, low, ENVIRONMENT[name]))
    return value


def init(environ=None):
    """Read the worker's place in the job from the environment (or the
    mapping `environ`) and return it as a Config; DistributedOptimizer uses
    it unless given another.  Raises ConfigError naming a variable that is
    missing or wrong."""
    global _config
    env = os.environ if environ is None else environ
    job = env.get("FLPS_JOB", "")
    if not job:
        raise ConfigError("FLPS_JOB is not set; it is %s"
                          % ENVIRONMENT["FLPS_JOB"])
    workers = _env_int(env, "FLPS_WORKERS", 1)
    rank = _env_int(env, "FLPS_RANK", 0)
    if rank >= workers:
        raise ConfigError("FLPS_RANK=%d is not below FLPS_WORKERS=%d"
                          % (rank, workers))
    servers = tuple(s.strip() for s in env.get("FLPS_SERVERS", "").split(",")
                    if s.strip())
    if not servers:
        raise ConfigError("FLPS_SERVERS is not set; it is %s"
                          % ENVIRONMENT["FLPS_SERVERS"])
    _config = Config(job, rank, workers, servers)
    return _config


def _topk_density(compression):
    """D of "topk:D" or "gtopk:D" (the codecs whose selection flps.torch
    can run itself), else None."""
    if compression == "auto":
        return "auto"  # per layer: dense or topk:D, as the plan says
    kind, _, arg = (compression or "dense").partition(":")
    if kind not in ("topk", "gtopk"):
        return None
    try:
        density = float(arg)
    except ValueError:
        return None
    return density if 0 < density <= 1 else None


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


def _warmup_from_environment(density_warmup, density_warmup_start, env):
    """(iterations, start, where) of the warm-up: each argument, or where it
    is None its FLPS_* variable (or none / 0.25); where names the variables
    used, for error messages.  Raises ConfigError for a variable that is
    not a number."""
    where = []
    if density_warmup is None:
        text = env.get("FLPS_DENSITY_WARMUP", "").strip()
        density_warmup = 0
        if text:
            try:
                density_warmup = int(text)
            except ValueError:
                raise ConfigError(
                    "FLPS_DENSITY_WARMUP=%r is not a whole number; it is %s"
                    % (text, ENVIRONMENT["FLPS_DENSITY_WARMUP"])) from None
            if density_warmup < 0:
                raise ConfigError(
                    "FLPS_DENSITY_WARMUP=%d is below 0; it is %s"
                    % (density_warmup, ENVIRONMENT["FLPS_DENSITY_WARMUP"]))
            where.append("FLPS_DENSITY_WARMUP=%s" % text)
    if density_warmup_start is None:
        text = env.get("FLPS_DENSITY_WARMUP_START", "").strip()
        density_warmup_start = DEFAULT_WARMUP_START
        if text:
            try:
                density_warmup_start = float(text)
            except ValueError:
                raise ConfigError(
                    "FLPS_DENSITY_WARMUP_START=%r is not a number; it is %s"
                    % (text, ENVIRONMENT["FLPS_DENSITY_WARMUP_START"])) \
                    from None
            where.append("FLPS_DENSITY_WARMUP_START=%s" % text)
    return density_warmup, density_warmup_start, where


class TopkSelector:
    """Top-k with error feedback (and momentum correction) for one layer,
    run by torch on the device its gradient lives on: the residual and
    velocity stay there and only the k selected (index, value) pairs go to
    the host.  The same steps as libflps's own (docs/algorithms.md):

        u <- m*u + g;  a <- r + u  (a <- r + g without momentum)
        S <- the k largest |a|;  send a[S];  r <- a, zeroed on S;  u[S] <- 0
        after the update: r[i] += a[i] for every pair the shards left out.

    Ties between equal |a| may be broken otherwise than by libflps (which
    takes the lower index); everything else is the same arithmetic.

    warmup, warmup_start: a density warm-up (flps_client_create_warmup):
    select(grad, iteration) takes k_at(iteration) pairs, the k of the
    density that decays from warmup_start to the layer's density over the
    first `warmup` iterations, as libflps and the shards compute it.
    """

    def __init__(self, numel, density, device, momentum=0.0, warmup=0,
                 warmup_start=DEFAULT_WARMUP_START):
        self.numel = numel
        self.warmup = int(warmup)
        self.warmup_start = float(warmup_start)
        self.set_density(density)
        self.momentum = float(momentum)
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

    def k_at(self, iteration):
        """The k of iteration `iteration` under the warm-up (self.k from
        the warm-up's end on, and without one)."""
        if self.warmup == 0 or iteration >= self.warmup:
            return self.k
        return self._k_of(_warmup_density(self.warmup_start, self.density,
                                          self.warmup, iteration))

    def select(self, grad, iteration=None):
        """(indices ascending, values) of grad's step, on grad's device,
        with k_at(iteration) pairs (self.k when iteration is None);
        nothing of the state moves until commit()."""
        k = self.k if iteration is None else self.k_at(iteration)
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
            # A NaN or Inf is among the largest |a| (torch.topk orders NaN
            # first), so libflps refuses the push and commit() never runs.
            _, idx = torch.topk(a.abs(), k, sorted=False)
            idx, _ = torch.sort(idx)  # ascending: libflps need not sort
        val = a[idx]
        self._pending = (a, u, idx, val)
        return idx, val

    def commit(self):
        """The selection was pushed: r <- a zeroed on S, u[S] <- 0."""
        a, u, idx, val = self._pending
        self._pending = None
        a[idx] = 0
        self.residual = a
        if u is not None:
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
        gradients and the wrapped optimizer applies the average on every
        worker; any optimizer works.  "server": the shards apply plain SGD
        themselves (the wrapped optimizer must be torch.optim.SGD; its lr
        and momentum go to flps) and hold the model, for checkpoints and
        late joins.
    selection: where top-k with error feedback runs (topk:D and gtopk:D):
        "auto" (default): in torch, on the tensor's device, for CUDA
        parameters (only the selected pairs cross to the host, the residual
        stays on the GPU); in libflps for CPU parameters.  "torch": in torch
        for every parameter (CPU too).  "libflps": libflps's own top-k on
        the host (a CUDA gradient is copied over whole).
    config: a Config (default: the one init() returned, or init() now).
    density_warmup, density_warmup_start: a density warm-up over the first
        density_warmup iterations, from density_warmup_start down to the
        codec's density (flps.connect; topk:D, gtopk:D, dgc:D or auto); a
        torch selection follows the same schedule.  None (default): from
        FLPS_DENSITY_WARMUP and FLPS_DENSITY_WARMUP_START, which flrun and
        flagent set from the job file's density_warmup and
        density_warmup_start (unset: no warm-up, start 0.25).
    part_size, iterations, lr_cosine, retry_ms, deadline_ms: passed to
        flps.connect.

    Every parameter must be a contiguous float32 tensor, on the CPU or (in
    mode "gradient") on a CUDA device.  Constructing it connects and makes
    every worker's parameters rank 0's.
    """

    def __init__(self, optimizer, named_parameters=None, compression="dense",
                 mode="gradient", *, selection="auto", config=None,
                 part_size=0, iterations=0, lr_cosine=False, retry_ms=0,
                 deadline_ms=0, density_warmup=None,
                 density_warmup_start=None):
        if mode not in ("gradient", "server"):
            raise ConfigError("mode=%r: use \"gradient\" (the wrapped "
                              "optimizer applies the averaged gradient) or "
                              "\"server\" (the shards apply SGD)" % (mode,))
        if selection not in ("auto", "torch", "libflps"):
            raise ConfigError("selection=%r: use \"auto\" (torch for CUDA "
                              "parameters, libflps for CPU ones), \"torch\" "
                              "or \"libflps\"" % (selection,))
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidArgumentError(
                "optimizer is a %s; pass a torch.optim.Optimizer"
                % type(optimizer).__name__)
        # Not Optimizer.__init__: this object is a view of the wrapped one.
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.defaults = optimizer.defaults
        self.mode = mode
        cfg = config or _config or init()
        self.config = cfg
        self._named = _named(optimizer, named_parameters)
        if not self._named:
            raise InvalidArgumentError("the optimizer has no parameter that "
                                       "requires a gradient")
        for name, p in self._named:
            self._check_parameter(name, p, mode)
        warmup, warmup_start, warmup_env = _warmup_from_environment(
            density_warmup, density_warmup_start, os.environ)
        density = _topk_density(compression)
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
        if retry_ms == 0:
            # A re-sent push whose late refusal (FLPS_ELATE) arrives after
            # the next iteration's push makes libflps pull that part
            # (worker/client.c does not compare the refusal's iteration):
            # in gradient mode that turns a step's gradient into the model,
            # and the pull, asked for the closed iteration, is refused with
            # a sticky FLPS_ELATE. Without resends neither can happen; the
            # deadline still bounds every wait.
            retry_ms = deadline_ms or 300000
        layout = [(name, r) for (name, _), r in zip(self._named,
                                                    self._replicas)]
        try:
            self.client = _client.connect(
                cfg.job, cfg.rank, cfg.workers, list(cfg.servers), layout,
                lr=lr, compression=compression, momentum=momentum,
                part_size=part_size, iterations=iterations,
                lr_cosine=lr_cosine, retry_ms=retry_ms,
                deadline_ms=deadline_ms, density_warmup=warmup,
                density_warmup_start=warmup_start)
        except InvalidArgumentError as e:
            if warmup == 0 or not warmup_env:
                raise
            # Say where a refused warm-up came from: the job file, through
            # the launcher's environment, not this program's arguments.
            raise type(e)(
                "%s (the warm-up is %s from the environment: the job file's "
                "density_warmup and density_warmup_start)"
                % (e.message, ", ".join(warmup_env)), code=e.code,
                name=e.name) from None
        #: compression "auto": the profile and plan duties (flps.auto).
        self.tuner = None
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

        def density_of(i):
            if density != "auto":
                return density
            spec = self.tuner.codecs[i]
            return 1.0 if spec == "dense" else float(spec.partition(":")[2])

        #: Per parameter, its TopkSelector when torch runs its selection,
        #: else None (libflps's own push).
        self.selectors = [
            TopkSelector(p.numel(), density_of(i), p.device, momentum,
                         warmup=warmup, warmup_start=warmup_start)
            if density is not None and (
                selection == "torch" or
                (selection == "auto" and p.device.type == "cuda"))
            else None for i, (_, p) in enumerate(self._named)]
        self._local = 0  # steps this process made
        self.iteration = self.client.resume_iteration
        self._pushed = [False] * len(self._named)
        self._hooks = []
        if HAS_POST_ACCUMULATE_HOOK:
            for i, (_, p) in enumerate(self._named):
                self._hooks.append(
                    p.register_post_accumulate_grad_hook(self._hook(i)))
        # Rank 0 of an auto job times each layer's backward in warm-up: a
        # tensor hook runs as the parameter's gradient is produced (torch
        # 1.13 has these too); removed once the profile is out.
        self._timing_hooks = []
        if self.tuner is not None and self.tuner.alpha is not None:
            for i, (_, p) in enumerate(self._named):
                self._timing_hooks.append(p.register_hook(self._timer(i)))

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
            if self.mode == "gradient":
                for (_, p), r in zip(self._named, self._replicas):
                    p.copy_(r.view_as(p))
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
        """Push what backward produced (all of it, last layer first, on
        torch without post-accumulate-grad hooks), wait for the shards and
        apply the aggregate.  Returns closure()'s loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for i in reversed(range(len(self._named))):
            if not self._pushed[i]:
                self._push(i, self._named[i][1].grad)
        self.client.wait(self.iteration)
        for i, sel in enumerate(self.selectors):
            if sel is not None:
                sel.add_back(self.client.pairs_taken(i, sel.idx.numel()))
        if self.mode == "gradient":
            with torch.no_grad():
                for (_, p), r, sel in zip(self._named, self._replicas,
                                          self.selectors):
                    if sel is not None:
                        self._sparse_grad(p, r)
                        continue
                    avg = r.view_as(p).neg()
                    if p.grad is None:
                        p.grad = avg.to(p.device)
                    else:
                        p.grad.copy_(avg)
                    r.zero_()
            self.optimizer.step()
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

    @staticmethod
    def _sparse_grad(p, r):
        """p.grad = the update in the host replica r (-mean of the pairs the
        shards kept), carried to p's device as pairs: the update of a
        sparse job touches at most the shards' k (gtopk) or P*k (topk)
        elements, so only those cross; r is zeroed where it was set."""
        nz = torch.nonzero(r, as_tuple=False).reshape(-1)
        vals = r[nz].neg()
        r[nz] = 0
        grad = torch.zeros(p.numel(), dtype=torch.float32, device=p.device)
        grad[nz.to(p.device)] = vals.to(p.device)
        if p.grad is None:
            p.grad = grad.view_as(p)
        else:
            p.grad.copy_(grad.view_as(p))

    def zero_grad(self, *args, **kwargs):
        if self.tuner is not None and self.tuner.profiling(self._local):
            self.tuner.mark_start()  # the step's compute starts here
        return self.optimizer.zero_grad(*args, **kwargs)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        return self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group):
        raise StateError("the flps layout is fixed when the "
                         "DistributedOptimizer is made: add the parameters "
                         "to the optimizer before wrapping it")

    def close(self):
        """Disconnect from the shards (the parameters stay as they are)."""
        for h in self._hooks + self._timing_hooks:
            h.remove()
        self._hooks = []
        self._timing_hooks = []
        self.client.close()

    def __repr__(self):
        return ("DistributedOptimizer(%s, mode=%r, compression=%r, "
                "rank %d/%d)" % (type(self.optimizer).__name__, self.mode,
                                 self.client.compression, self.config.rank,
                                 self.config.workers))
