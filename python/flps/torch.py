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
applies it.  docs/python.md describes the two modes ("gradient", "server")
and the environment variables.
"""

import os
from dataclasses import dataclass

import torch

from . import client as _client
from .errors import ConfigError, InvalidArgumentError, StateError

__all__ = ["Config", "init", "DistributedOptimizer", "ENVIRONMENT",
           "HAS_POST_ACCUMULATE_HOOK"]

#: The environment variables init() reads (flrun and flagent set them for a
#: job file's command:; set them yourself otherwise).
ENVIRONMENT = {
    "FLPS_JOB": "the job id the shards serve",
    "FLPS_RANK": "this worker's rank, 0..FLPS_WORKERS-1",
    "FLPS_WORKERS": "how many workers the job has",
    "FLPS_SERVERS": "the shard endpoints, shard 0 first, comma-separated "
                    "(tcp://host:port,...)",
}

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
    config: a Config (default: the one init() returned, or init() now).
    part_size, iterations, lr_cosine, retry_ms, deadline_ms: passed to
        flps.connect.

    Every parameter must be a contiguous float32 CPU tensor.  Constructing
    it connects and makes every worker's parameters rank 0's.
    """

    def __init__(self, optimizer, named_parameters=None, compression="dense",
                 mode="gradient", *, config=None, part_size=0, iterations=0,
                 lr_cosine=False, retry_ms=0, deadline_ms=0):
        if mode not in ("gradient", "server"):
            raise ConfigError("mode=%r: use \"gradient\" (the wrapped "
                              "optimizer applies the averaged gradient) or "
                              "\"server\" (the shards apply SGD)" % (mode,))
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
            self._check_parameter(name, p)
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
        self.client = _client.connect(
            cfg.job, cfg.rank, cfg.workers, list(cfg.servers), layout, lr=lr,
            compression=compression, momentum=momentum, part_size=part_size,
            iterations=iterations, lr_cosine=lr_cosine, retry_ms=retry_ms,
            deadline_ms=deadline_ms)
        try:
            self._broadcast()
        except BaseException:
            self.client.close()
            raise
        self.iteration = self.client.resume_iteration
        self._pushed = [False] * len(self._named)
        self._hooks = []
        if HAS_POST_ACCUMULATE_HOOK:
            for i, (_, p) in enumerate(self._named):
                self._hooks.append(
                    p.register_post_accumulate_grad_hook(self._hook(i)))

    @staticmethod
    def _check_parameter(name, p):
        if p.device.type != "cpu" or p.dtype != torch.float32:
            raise InvalidArgumentError(
                "parameter %r is %s on %s; flps.torch trains float32 CPU "
                "parameters" % (name, p.dtype, p.device))
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
            if self.mode == "gradient":
                for (_, p), r in zip(self._named, self._replicas):
                    p.copy_(r.view_as(p))
                    r.zero_()

    def _hook(self, i):
        def hook(p):
            self._push(i, p.grad)
        return hook

    def _push(self, i, grad):
        name, p = self._named[i]
        if self._pushed[i]:
            raise StateError(
                "the gradient of %r was produced twice in iteration %d; flps "
                "pushes each gradient once per step: call step() after "
                "every backward()" % (name, self.iteration))
        if grad is None:
            grad = torch.zeros(p.numel(), dtype=torch.float32)
        elif grad.is_sparse:
            grad = grad.to_dense()
        self.client.push(i, grad.detach(), self.iteration)
        self._pushed[i] = True

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
        if self.mode == "gradient":
            with torch.no_grad():
                for (_, p), r in zip(self._named, self._replicas):
                    avg = r.view_as(p).neg()
                    if p.grad is None:
                        p.grad = avg
                    else:
                        p.grad.copy_(avg)
                    r.zero_()
            self.optimizer.step()
        self.iteration += 1
        self._pushed = [False] * len(self._named)
        return loss

    def zero_grad(self, *args, **kwargs):
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
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.client.close()

    def __repr__(self):
        return ("DistributedOptimizer(%s, mode=%r, compression=%r, "
                "rank %d/%d)" % (type(self.optimizer).__name__, self.mode,
                                 self.client.compression, self.config.rank,
                                 self.config.workers))
