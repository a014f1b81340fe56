"""compression "auto" from Python: the profile and the plan, as flworker.

An auto job starts every layer of at least 4096 elements on "topk:0.01"
and smaller ones dense (flps_client_set_layer_codec).  Rank 0 measures the
network right after init and each layer's backward time over local steps
[PROFILE_FROM, PROFILE_TO), then prints the profile event on stdout:

    {"event":"profile","iteration":25,"workers":W,"alpha":A,"beta":B,
     "layers":[{"name":"fc1.weight","numel":200704,"t_backward":3.1e-4},...]}

flrun and flagent read it, run the LAGS planner and write the plan to the
file named by FLPS_PLAN_FILE; every rank watches that file at iteration
boundaries and applies a newer plan with set_layer_codec, printing
{"event":"plan","version":N,"iteration":I}.  The formats are flworker's
(services/plan.h).
"""

import json
import logging
import os
import time

from .errors import FlpsError

__all__ = ["AutoTuner", "PROFILE_FROM", "PROFILE_TO", "AUTO_DENSE_BELOW",
           "initial_codec"]

#: Local steps whose backward times make the profile (the first ones pay
#: for cold caches); flworker's FLW_PROFILE_FROM and FLW_PROFILE_TO.
PROFILE_FROM = 5
PROFILE_TO = 25
#: Below this many elements a layer of an auto job starts dense (libflps's
#: AUTO_DENSE_BELOW), else on AUTO_INITIAL_TOPK.
AUTO_DENSE_BELOW = 4096
AUTO_INITIAL_TOPK = "topk:0.01"

_log = logging.getLogger("flps")


def initial_codec(numel):
    """The codec libflps gives a layer of an auto job before any plan."""
    return AUTO_INITIAL_TOPK if numel >= AUTO_DENSE_BELOW else "dense"


def _emit(event):
    # flps.report is the function (the package exports it): the module is
    # in sys.modules under its name.
    import importlib
    importlib.import_module("flps.report")._emit(event)


class AutoTuner:
    """The auto-job duties of one worker.

    client: the flps.Client (compression "auto"); names, numels: the
    layout; rank, workers: this worker's place; plan_file: the file the
    launcher writes plans to (default FLPS_PLAN_FILE; None or "": no plan
    is ever applied); on_codec(layer, spec): called after a layer's codec
    changed (flps.torch keeps its own selectors in step).

    Call measure_network() right after init (rank 0), check_plan(iteration)
    before an iteration's first push, mark_start() where a step's compute
    starts, mark(layer) as each layer's gradient is produced, mark_pushed()
    after a push, and end_step(local_step, iteration) after each wait.
    """

    def __init__(self, client, names, numels, rank, workers, plan_file=None,
                 on_codec=None, profile_from=PROFILE_FROM,
                 profile_to=PROFILE_TO):
        self.client = client
        self.names = list(names)
        self.numels = list(numels)
        self.rank = rank
        self.workers = workers
        if plan_file is None:
            plan_file = os.environ.get("FLPS_PLAN_FILE", "")
        self.plan_file = plan_file or None
        self.on_codec = on_codec
        self.profile_from = profile_from
        self.profile_to = profile_to
        self.alpha = self.beta = None
        self.plan_version = 0
        self.codecs = [initial_codec(n) for n in self.numels]
        self._tb = [0.0] * len(self.names)
        self._last = None
        self._stat = None
        self.profile = None  #: the profile event printed, once it was

    # -- the profile --

    def measure_network(self):
        """Rank 0: (alpha, beta) to the shards (a few pulls: the replica
        is overwritten with the model, as flps_client_pull does)."""
        self.alpha, self.beta = self.client.measure_network()
        _log.info("network: alpha %.3g s, beta %.3g s/byte", self.alpha,
                  self.beta)
        return self.alpha, self.beta

    def profiling(self, local_step):
        """Whether local_step's backward times count."""
        return (self.rank == 0 and self.alpha is not None and
                self.profile_from <= local_step < self.profile_to)

    def mark_start(self):
        self._last = time.monotonic()

    def mark(self, layer):
        """Layer `layer`'s gradient was just produced: the time since the
        last mark (or the step's start) is its backward time."""
        now = time.monotonic()
        if self._last is not None:
            self._tb[layer] += now - self._last
        self._last = now

    def mark_pushed(self):
        """A push has just returned: its time is nobody's backward."""
        if self._last is not None:
            self._last = time.monotonic()

    def end_step(self, local_step, iteration):
        """After the wait of `iteration` (the local_step-th of this
        process): print the profile when the window closes."""
        if (self.rank == 0 and self.alpha is not None and self.profile is None
                and local_step + 1 == self.profile_to):
            samples = self.profile_to - self.profile_from
            self.profile = {
                "event": "profile", "iteration": iteration + 1,
                "workers": self.workers, "alpha": self.alpha,
                "beta": self.beta,
                "layers": [{"name": n, "numel": k, "t_backward": t / samples}
                           for n, k, t in zip(self.names, self.numels,
                                              self._tb)]}
            _emit(self.profile)
        self._last = None

    # -- the plan --

    def _parse(self, text):
        """[(spec), ...] of a plan's text, and its version; raises
        ValueError saying what is wrong."""
        try:
            plan = json.loads(text)
        except ValueError as e:
            raise ValueError("not JSON (%s)" % e) from None
        if not isinstance(plan, dict) or not isinstance(
                plan.get("version"), int) or isinstance(
                    plan.get("version"), bool) or plan["version"] < 1 or \
                not isinstance(plan.get("layers"), list):
            raise ValueError('wants {"version": N >= 1, "layers": [...]}')
        layers = plan["layers"]
        if len(layers) != len(self.names):
            raise ValueError("has %d layers, the model has %d"
                             % (len(layers), len(self.names)))
        specs = []
        for i, layer in enumerate(layers):
            if not isinstance(layer, dict):
                raise ValueError("layer %d is not an object" % i)
            name, numel = layer.get("name"), layer.get("numel")
            if name != self.names[i] or numel != self.numels[i]:
                raise ValueError(
                    "layer %d is %s with %r elements, the model's is %s with "
                    "%d" % (i, name, numel, self.names[i], self.numels[i]))
            codec, density = layer.get("codec"), layer.get("density")
            if codec == "dense":
                specs.append("dense")
            elif (codec == "topk" and isinstance(density, (int, float))
                  and not isinstance(density, bool) and 0 < density <= 1):
                specs.append("topk:%.17g" % density)
            else:
                raise ValueError('layer %s wants codec "dense" or "topk" with '
                                 "a density in (0, 1]" % self.names[i])
        return plan["version"], specs

    def check_plan(self, iteration):
        """If the plan file changed and holds a newer plan, apply it (every
        layer's codec) and print the plan event.  A broken or stale plan is
        logged and ignored; the layers keep their codecs."""
        if self.plan_file is None:
            return False
        try:
            st = os.stat(self.plan_file)
        except OSError:
            return False  # no plan yet is normal
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self._stat:
            return False
        self._stat = key
        try:
            with open(self.plan_file) as f:
                text = f.read(1 << 20)
            version, specs = self._parse(text)
        except (OSError, ValueError) as e:
            _log.warning("plan %s ignored: %s; keeping plan v%d",
                         self.plan_file, e, self.plan_version)
            return False
        if version <= self.plan_version:
            _log.warning("plan %s ignored: version %d is not newer than v%d",
                         self.plan_file, version, self.plan_version)
            return False
        for i, spec in enumerate(specs):
            try:
                self.client.set_layer_codec(i, spec)
            except FlpsError as e:
                raise type(e)("plan v%d: cannot set %s of layer %s: %s"
                              % (version, spec, self.names[i], e.message),
                              code=e.code, name=e.name) from None
            self.codecs[i] = spec
            if self.on_codec is not None:
                self.on_codec(i, spec)
        self.plan_version = version
        sparse = sum(s != "dense" for s in specs)
        _log.info("plan v%d applied: %d layers sparse, %d dense", version,
                  sparse, len(specs) - sparse)
        _emit({"event": "plan", "version": version, "iteration": iteration})
        return True
