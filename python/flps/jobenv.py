"""flps.jobenv: what the job file says, read from the launcher's FLPS_*
variables, and the one rule every constructor of the package follows.

flrun and flagent run a job file's ``command:`` with the job's settings in
FLPS_* variables (docs/job-file.md) and name the keys the file gives in
FLPS_JOB_KEYS.  flps.connect, flps.torch.init and
flps.torch.DistributedOptimizer then resolve each setting so:

* a key the job file gives is what runs: an argument left out (None) takes
  it, and an argument that says otherwise is refused with a ConfigError
  that names both values;
* a key the job file leaves out is the program's: its argument, else the
  API's own default.

Variables a person sets by hand (no FLPS_JOB_KEYS: no launcher set them)
fill in where the program passes nothing, and an argument wins over them.
"""

import math
import os

from .errors import ConfigError

__all__ = ["JobSettings", "KEYS", "PLACE", "ALONE", "canonical_codec",
           "contradiction", "is_alone", "place"]

#: The job file's keys the package follows: key -> (variable, what it is).
KEYS = {
    "compression": ("FLPS_COMPRESSION", "the job file's compression"),
    "mode": ("FLPS_MODE", "the job file's mode: ssgd, async or ssp:S"),
    "lr": ("FLPS_LR", "the job file's lr"),
    "momentum": ("FLPS_MOMENTUM", "the job file's momentum"),
    "lr_schedule": ("FLPS_LR_SCHEDULE",
                    "the job file's lr_schedule: constant or cosine"),
    "iterations": ("FLPS_ITERATIONS", "the job file's iterations"),
    "part_size": ("FLPS_PART_SIZE", "the job file's part_size"),
    "density_warmup": ("FLPS_DENSITY_WARMUP",
                       "the density warm-up's iterations (the job file's "
                       "density_warmup; unset or 0: none)"),
    "density_warmup_start": ("FLPS_DENSITY_WARMUP_START",
                             "the warm-up's start density, 0 < S <= 1 "
                             "(density_warmup_start; unset: 0.25)"),
    # Federated averaging (flps.fl).
    "rounds": ("FLPS_ROUNDS", "the job file's rounds (fedavg)"),
    "clients": ("FLPS_CLIENTS", "the job file's clients (0 there: workers)"),
    "client_fraction": ("FLPS_CLIENT_FRACTION",
                        "the job file's client_fraction, 0 < F <= 1"),
    "local_steps": ("FLPS_LOCAL_STEPS", "the job file's local_steps"),
    "local_epochs": ("FLPS_LOCAL_EPOCHS",
                     "the job file's local_epochs (0: local_steps)"),
    "round_deadline": ("FLPS_ROUND_DEADLINE",
                       "the job file's round_deadline, seconds (0: none)"),
    "straggler_fraction": ("FLPS_STRAGGLER_FRACTION",
                           "the job file's straggler_fraction"),
    "straggler_slowdown": ("FLPS_STRAGGLER_SLOWDOWN",
                           "the job file's straggler_slowdown"),
    "prox_mu": ("FLPS_PROX_MU", "the job file's prox_mu (FedProx)"),
    "server_optimizer": ("FLPS_SERVER_OPTIMIZER",
                         "the job file's server_optimizer: sgd, momentum:B "
                         "or adam"),
    "server_lr": ("FLPS_SERVER_LR", "the job file's server_lr"),
    "partition": ("FLPS_PARTITION",
                  "the job file's partition: iid, dirichlet:A or shards:N"),
    "seed": ("FLPS_SEED", "the job file's seed"),
    "batch_size": ("FLPS_BATCH", "the job file's batch_size"),
    "eval_every": ("FLPS_EVAL_EVERY", "the job file's eval_every"),
    "overlap": ("FLPS_OVERLAP", "the job file's overlap: true or false"),
}

_DENSITY_CODECS = ("topk", "gtopk", "randk", "dgc")


def canonical_codec(spec):
    """A codec spec as a job file writes it: "gtopk:0.01" for "gtopk:1e-2",
    so two spellings of one setting compare equal; spec itself when it does
    not parse (libflps says what is wrong with it)."""
    if not isinstance(spec, str):
        return spec
    kind, sep, arg = spec.partition(":")
    try:
        if kind in _DENSITY_CODECS and sep:
            return "%s:%r" % (kind, float(arg))
        if kind == "qsgd" and sep:
            return "%s:%d" % (kind, int(arg))
    except ValueError:
        pass
    return spec


def _whole(text):
    value = int(text)
    if value < 0:
        raise ValueError("below 0")
    return value


def _number(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("not finite")
    return value


def _mode(text):
    word, sep, arg = text.partition(":")
    if word == "ssp" and sep:
        return "ssp:%d" % _whole(arg)
    if word in ("ssgd", "async", "fedavg") and not sep:
        return word
    raise ValueError("not a mode")


def _bool(text):
    if text not in ("true", "false"):
        raise ValueError("not a boolean")
    return text == "true"


def _schedule(text):
    if text not in ("constant", "cosine"):
        raise ValueError("not a schedule")
    return text


def _fraction(text):
    value = _number(text)
    if not 0 < value <= 1:
        raise ValueError("not in (0, 1]")
    return value


def _partition(text):
    word, sep, arg = text.partition(":")
    if word == "iid" and not sep:
        return word
    if word == "dirichlet" and sep and _number(arg) > 0:
        return "dirichlet:%r" % float(arg)
    if word == "shards" and sep and _whole(arg) > 0:
        return "shards:%d" % int(arg)
    raise ValueError("not a partition")


def _server_optimizer(text):
    word, sep, arg = text.partition(":")
    if word in ("sgd", "adam") and not sep:
        return word
    if word == "momentum" and sep and 0 <= _number(arg) < 1:
        return "momentum:%r" % float(arg)
    raise ValueError("not a server optimizer")


_PARSE = {
    "compression": (canonical_codec, "a codec"),
    "mode": (_mode, "a mode (ssgd, async, ssp:S or fedavg)"),
    "lr": (_number, "a number"),
    "momentum": (_number, "a number"),
    "lr_schedule": (_schedule, "constant or cosine"),
    "iterations": (_whole, "a whole number"),
    "part_size": (_whole, "a whole number"),
    "density_warmup": (_whole, "a whole number"),
    "density_warmup_start": (_number, "a number"),
    "rounds": (_whole, "a whole number"),
    "clients": (_whole, "a whole number"),
    "client_fraction": (_fraction, "a number with 0 < F <= 1"),
    "local_steps": (_whole, "a whole number"),
    "local_epochs": (_whole, "a whole number"),
    "round_deadline": (_number, "a number of seconds"),
    "straggler_fraction": (_number, "a number"),
    "straggler_slowdown": (_number, "a number"),
    "prox_mu": (_number, "a number"),
    "server_optimizer": (_server_optimizer, "sgd, momentum:B or adam"),
    "server_lr": (_number, "a number"),
    "partition": (_partition, "iid, dirichlet:A or shards:N"),
    "seed": (_whole, "a whole number"),
    "batch_size": (_whole, "a whole number"),
    "eval_every": (_whole, "a whole number"),
    "overlap": (_bool, "true or false"),
}


#: The variables that say where a worker belongs, with what each holds.
PLACE = {
    "FLPS_JOB": "the job id the shards serve",
    "FLPS_RANK": "this worker's rank, 0..FLPS_WORKERS-1",
    "FLPS_WORKERS": "how many workers the job has",
    "FLPS_SERVERS": "the shard endpoints, shard 0 first, comma-separated "
                    "(tcp://host:port,...)",
}

#: The notice of a program run without a launcher.
ALONE = ("flps: FLPS_JOB is not set: running as a world of one, plain local "
         "training; launch with flrun or flsubmit to train distributed")


def is_alone(environ=None):
    """Whether no launcher placed this process: none of PLACE's variables
    is set (a program run directly)."""
    env = os.environ if environ is None else environ
    return not any(env.get(v, "").strip() for v in PLACE)


def _place_int(env, name, low):
    text = env.get(name)
    if text is None or text.strip() == "":
        raise ConfigError(
            "%s is not set; it is %s: set it in each worker's environment"
            % (name, PLACE[name]))
    try:
        value = int(text)
    except ValueError:
        raise ConfigError("%s=%r is not a whole number; it is %s"
                          % (name, text, PLACE[name])) from None
    if value < low:
        raise ConfigError("%s=%d is below %d; it is %s"
                          % (name, value, low, PLACE[name]))
    return value


def place(environ=None):
    """(job, rank, workers, servers) from PLACE's variables.  Raises
    ConfigError naming a variable that is missing or wrong."""
    env = os.environ if environ is None else environ
    job = env.get("FLPS_JOB", "")
    if not job:
        raise ConfigError("FLPS_JOB is not set; it is %s" % PLACE["FLPS_JOB"])
    workers = _place_int(env, "FLPS_WORKERS", 1)
    rank = _place_int(env, "FLPS_RANK", 0)
    if rank >= workers:
        raise ConfigError("FLPS_RANK=%d is not below FLPS_WORKERS=%d"
                          % (rank, workers))
    servers = tuple(s.strip() for s in env.get("FLPS_SERVERS", "").split(",")
                    if s.strip())
    if not servers:
        raise ConfigError("FLPS_SERVERS is not set; it is %s"
                          % PLACE["FLPS_SERVERS"])
    return job, rank, workers, servers


def contradiction(arg, shown, key, said):
    """The ConfigError of an argument that contradicts the job file: arg
    the argument's name, shown its value as the program gave it, said the
    job file's Setting."""
    return ConfigError(
        "%s=%r contradicts the job file's %s: %s (%s); drop the argument "
        "or change the job file" % (arg, shown, key, said.text,
                                    said.variable))


class Setting:
    """One key as the launcher exported it: text (the variable's value),
    value (parsed), variable, and given (the job file says it, as opposed
    to a variable set by hand)."""

    __slots__ = ("key", "variable", "text", "value", "given")

    def __init__(self, key, variable, text, value, given):
        self.key, self.variable, self.text = key, variable, text
        self.value, self.given = value, given

    def __repr__(self):
        return "Setting(%s=%r%s)" % (self.variable, self.text,
                                     "" if self.given else ", by hand")


class JobSettings:
    """The settings of KEYS in an environment (os.environ by default):
    launched is True where a launcher set FLPS_JOB_KEYS.  A variable that
    does not parse is a ConfigError naming it, raised when the setting is
    asked for."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        self.launched = "FLPS_JOB_KEYS" in env
        given = {k.strip() for k in env.get("FLPS_JOB_KEYS", "").split(",")
                 if k.strip()}
        self._text = {}
        self._defaults = {}
        for key, (variable, _) in KEYS.items():
            text = env.get(variable, "").strip()
            if not text and key == "density_warmup" and key in given:
                text = "0"  # the launcher exports only a warm-up of N > 0
            if text and (key in given or not self.launched):
                self._text[key] = (variable, text, key in given)
            elif text:
                self._defaults[key] = (variable, text, False)

    @classmethod
    def none(cls):
        """Settings that say nothing: every argument stands."""
        return cls({})

    def get(self, key, defaults=False):
        """The Setting of key, or None where the environment has none (or
        holds only the launcher's default for it; with defaults=True that
        default too, for a setting the API has no default of its own)."""
        found = self._text.get(key) or (self._defaults.get(key) if defaults
                                         else None)
        if found is None:
            return None
        variable, text, given = found
        parse, what = _PARSE[key]
        try:
            value = parse(text)
        except (ValueError, OverflowError):
            raise ConfigError("%s=%r is not %s; it is %s"
                              % (variable, text, what, KEYS[key][1])) \
                from None
        return Setting(key, variable, text, value, given)

    def gives(self, key):
        """Whether the job file says key (so an argument must agree)."""
        return key in self._text and self._text[key][2]

    def resolve(self, key, value, default, arg=None, same=None,
                shown=None):
        """The setting key: value (the program's argument; None = not
        passed) where given, checked against the job file; else the job
        file's (or a variable's); else default.  arg names the argument in
        the message (default: key) and shown its value (default: value);
        same(a, b) compares (default ==)."""
        if value is not None and not self.gives(key):
            return value  # a variable set by hand does not bind
        said = self.get(key)
        if value is None:
            return default if said is None else said.value
        if said is not None:
            agree = same(value, said.value) if same else value == said.value
            if not agree:
                raise contradiction(arg or key,
                                    value if shown is None else shown, key,
                                    said)
        return value

    def __repr__(self):
        return "JobSettings(%s)" % ", ".join(
            "%s=%r" % (v, t) for v, t, _ in self._text.values())
