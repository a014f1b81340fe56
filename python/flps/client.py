"""flps.Client: one libflps client (flps_client_*) from Python.

The layout's buffers are the caller's float32 arrays (numpy arrays or torch
CPU tensors).  They are registered without a copy: libflps writes the
shards' model and every update straight into them, and the Client keeps a
reference to each so they live as long as the client does.  Do not resize
or reallocate them while the client is open.
"""

import ctypes
import os
import weakref
import threading
from dataclasses import dataclass

import numpy as np

from . import _native
from . import jobenv as _jobenv
from .errors import (ConfigError, InvalidArgumentError, RangeError,
                     StateError, library_error)

__all__ = ["Client", "ClientStats", "connect", "version"]


@dataclass(frozen=True)
class ClientStats:
    """Counters of a client since it was created (flps_client_stats)."""

    bytes_sent: int  #: put on the wire, framing included
    bytes_received: int  #: taken off the wire, likewise
    dense_bytes: int  #: what bytes_sent would be, had every push been dense
    pushes: int  #: push messages sent (first attempts)
    resends: int  #: requests sent again after a timeout
    elements_sent: int  #: index/value pairs (or dense values) pushed

    @property
    def sent_share(self):
        """bytes_sent / dense_bytes (the compression's saving); 0 before
        the first push."""
        return self.bytes_sent / self.dense_bytes if self.dense_bytes else 0.0


def _is_torch_tensor(obj):
    return type(obj).__module__.startswith("torch") and hasattr(
        obj, "data_ptr")


def _describe(obj):
    return "%s.%s" % (type(obj).__module__, type(obj).__qualname__)


def _replica_buffer(obj, what):
    """(address, numel) of a float32 buffer libflps may write into: a
    C-contiguous, writeable numpy array or a contiguous torch CPU tensor.
    Raises InvalidArgumentError saying what is wrong with obj."""
    if isinstance(obj, np.ndarray):
        if obj.dtype != np.float32:
            raise InvalidArgumentError(
                "%s is a numpy array of %s; flps needs float32 (make it with "
                "dtype=numpy.float32)" % (what, obj.dtype))
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError(
                "%s is not C-contiguous; pass numpy.ascontiguousarray(...) "
                "and keep that array" % what)
        if not obj.flags.writeable:
            raise InvalidArgumentError(
                "%s is read-only; libflps writes the model into it" % what)
        return obj.ctypes.data, obj.size
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise InvalidArgumentError(
                "%s is on %s; flps needs a CPU tensor" % (what, obj.device))
        if str(obj.dtype) != "torch.float32":
            raise InvalidArgumentError(
                "%s is a tensor of %s; flps needs torch.float32"
                % (what, obj.dtype))
        if not obj.is_contiguous():
            raise InvalidArgumentError(
                "%s is not contiguous; pass tensor.contiguous() and keep "
                "that tensor" % what)
        return obj.data_ptr(), obj.numel()
    raise InvalidArgumentError(
        "%s is a %s; flps needs a float32 numpy array or torch CPU tensor "
        "(it writes into it, so no copy can be made)" % (what, _describe(obj)))


_F32 = np.dtype(np.float32)


def _gradient(obj, numel, what):
    """(address, keep-alive) of obj as numel contiguous float32 values;
    copies only when obj is not already such a buffer."""
    if (type(obj) is np.ndarray and obj.dtype == _F32
            and obj.flags.c_contiguous):
        buf, n, ptr = obj, obj.size, obj.ctypes.data  # the common case
    elif _is_torch_tensor(obj):
        if (obj.device.type == "cpu" and str(obj.dtype) == "torch.float32"
                and obj.is_contiguous()):
            buf = obj
        else:
            import torch

            buf = obj.detach().to("cpu", torch.float32).contiguous()
        n, ptr = buf.numel(), buf.data_ptr()
    else:
        buf = np.ascontiguousarray(obj, dtype=np.float32)
        n, ptr = buf.size, buf.ctypes.data
    if n != numel:
        raise InvalidArgumentError(
            "%s has %d elements; the layout says %d" % (what, n, numel))
    return ptr, buf


def _host_pairs_array(obj, kind, what):
    """obj (numpy array, torch tensor on any device, or array-like) as a
    1-D C-contiguous numpy array of uint32 (kind "index") or float32 (kind
    "value") on the host.  A torch tensor on a GPU is copied to the host
    here, and only it: these are the pairs, not the layer."""
    if _is_torch_tensor(obj):
        obj = obj.detach()
        if obj.device.type != "cpu":
            obj = obj.cpu()
        obj = obj.numpy()
    arr = np.asarray(obj)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if kind == "value":
        return np.ascontiguousarray(arr, dtype=np.float32)
    if arr.dtype == np.uint32:
        return np.ascontiguousarray(arr)
    if arr.size and arr.dtype.kind not in "iu":
        raise InvalidArgumentError(
            "%s are %s; pass integer element indices" % (what, arr.dtype))
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 2**32):
        raise InvalidArgumentError(
            "%s hold %d; an element index is in 0..numel-1"
            % (what, int(arr.min()) if int(arr.min()) < 0 else int(arr.max())))
    return np.ascontiguousarray(arr, dtype=np.uint32)


def _layout_items(layout):
    if hasattr(layout, "items"):
        return list(layout.items())
    items = list(layout)
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise InvalidArgumentError(
                "layout must be a mapping of name to buffer or a sequence of "
                "(name, buffer) pairs; got an element %r" % (item,))
    return items


#: Every open client of this process (weakly), and the final counters of
#: every closed one: flps.report reads the process's byte counts from them.
_clients = weakref.WeakSet()
_closed_stats = []
#: warmup_bytes_sent of every closed client that had a density warm-up.
_closed_warmup_bytes = []
#: What libflps metered (Client.energy()) of every closed client that
#: metered something or set a clock.
_closed_energy = []


class _Ran:
    """What one client of this process ran, for its done event: the codec
    and mode it registered, the optimizer flps.torch wrapped around it, and
    the iterations its waits completed."""

    __slots__ = ("compression", "mode", "optimizer", "iterations")

    def __init__(self, compression, mode):
        self.compression, self.mode = compression, mode
        self.optimizer = None
        self.iterations = 0


#: One _Ran per client this process made, closed ones included.
_ran = []


def _mode_of(asynchronous, staleness, weighted):
    """The mode a program's arguments ask for ("ssgd", "async", "ssp:S",
    "weighted"), or None where they say nothing."""
    if asynchronous is None and staleness is None and weighted is None:
        return None
    if weighted:
        return "weighted"
    if staleness is not None:
        return "ssp:%d" % staleness if isinstance(staleness, int) else "ssp"
    return "async" if asynchronous else "ssgd"


def _same_mode(prog, job):
    """Whether the program's mode agrees with the job file's: the same, or
    asynchronous=True under ssp:S (which the bound makes precise), or a
    synchronous one under fedavg (its rounds are synchronous iterations)."""
    return (prog == job or (prog == "async" and job.startswith("ssp:")) or
            (job == "fedavg" and prog in ("ssgd", "weighted")))


def _resolve_mode(js, asynchronous, staleness, weighted):
    """(asynchronous, staleness or None, weighted) after the job file."""
    prog = _mode_of(asynchronous, staleness, weighted)
    arg, shown = "asynchronous", asynchronous
    if weighted:
        arg, shown = "weighted", weighted
    elif staleness is not None:
        arg, shown = "staleness", staleness
    mode = js.resolve("mode", prog, "ssgd", arg=arg, shown=shown,
                      same=_same_mode)
    mode = _bound(js, mode)
    if mode == "fedavg":
        return False, None, bool(weighted)
    if mode.startswith("ssp:"):
        return True, int(mode[4:]), False
    return mode == "async", None, mode == "weighted"


def _bound(js, mode):
    """mode, or the job file's ssp:S where the program asked for "async"
    (which ssp:S makes precise)."""
    said = js.get("mode") if mode == "async" and js.gives("mode") else None
    return said.value if said is not None else mode


def _same_codec(a, b):
    return _jobenv.canonical_codec(a) == _jobenv.canonical_codec(b)


def _job_place(job, rank, workers, servers):
    """job, rank, workers and servers, each from its FLPS_* variable where
    None.  Without a job and without FLPS_JOB: an InvalidArgumentError that
    names the launchers."""
    if job is None and not os.environ.get("FLPS_JOB", ""):
        raise InvalidArgumentError(
            "no job id to join: job is None and FLPS_JOB is not set; run the "
            "program as a job file's command: under flrun (flrun JOB.yaml) "
            "or flsubmit, which set FLPS_JOB, FLPS_RANK, FLPS_WORKERS and "
            "FLPS_SERVERS, or pass job, rank, workers and servers")
    if job is None or rank is None or workers is None or servers is None:
        ej, er, ew, es = (None,) * 4
        if not _jobenv.is_alone():
            try:
                ej, er, ew, es = _jobenv.place()
            except ConfigError as e:
                raise InvalidArgumentError(e.message) from None
        job = ej if job is None else job
        rank = er if rank is None else rank
        workers = ew if workers is None else workers
        servers = list(es) if servers is None and es else servers
    return job, rank, workers, servers


def _deadline_from_environment(deadline_ms):
    """deadline_ms, or FLPS_DEADLINE_MS (set by flrun and flagent for a
    command: job's workers) when it is 0, so a launched program whose peers
    never connect fails instead of waiting forever."""
    if deadline_ms != 0:
        return deadline_ms
    text = os.environ.get("FLPS_DEADLINE_MS", "").strip()
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(
            "FLPS_DEADLINE_MS=%r is not a whole number of milliseconds"
            % (text,)) from None
    return min(max(value, 0), 2**31 - 1)


class Client:
    """A connection of one worker to the shards of a job.

    Made by :func:`connect`; see there for the arguments.  Methods block
    as the flps_client_* calls do (the GIL is released while they run).
    One client may be used from several threads, one call at a time (calls
    are serialized by a lock).  Use it as a context manager, or call
    :meth:`close`.
    """

    def __init__(self, job=None, rank=None, workers=None, servers=None,
                 layout=None, *, lr=None, compression=None, momentum=None,
                 part_size=None, asynchronous=None, staleness=None,
                 lr_cosine=None, iterations=None, retry_ms=0, deadline_ms=0,
                 weighted=None, density_warmup=None,
                 density_warmup_start=None, server_optimizer=None,
                 push_window=None, settings=None):
        lib = _native.lib()
        self._lib = lib
        self._handle = None
        self._lock = threading.Lock()
        self._final_stats = None
        if isinstance(deadline_ms, int) and not isinstance(deadline_ms, bool):
            deadline_ms = _deadline_from_environment(deadline_ms)
        job, rank, workers, servers = _job_place(job, rank, workers, servers)
        if not isinstance(job, str) or not job:
            raise InvalidArgumentError("job must be the job id, a non-empty "
                                       "string (got %r)" % (job,))
        if layout is None:
            raise InvalidArgumentError(
                "no layout: pass the model's tensors, a mapping of name to "
                "float32 buffer or a sequence of (name, buffer) pairs")
        # What the job file says (the launcher's FLPS_* variables) is what
        # runs; an argument that contradicts it is refused (flps.jobenv).
        js = _jobenv.JobSettings() if settings is None else settings
        if staleness is not None and (
                isinstance(staleness, bool) or not isinstance(staleness, int)
                or not 0 <= staleness < 2**32 - 1):
            raise InvalidArgumentError("staleness must be a whole number in "
                                       "0..2^32-2 (got %r)" % (staleness,))
        if weighted and (asynchronous or staleness is not None):
            raise InvalidArgumentError("a weighted job is synchronous: "
                                       "asynchronous and weighted exclude "
                                       "each other")
        asynchronous, staleness, weighted = _resolve_mode(
            js, asynchronous, staleness, weighted)
        compression = js.resolve("compression", compression, "dense",
                                 same=_same_codec)
        lr_said = js.get("lr", defaults=True)
        lr = js.resolve("lr", lr, lr_said.value if lr_said else None)
        if lr is None:
            raise InvalidArgumentError(
                "lr is required: the shards' learning rate (> 0); pass lr= "
                "or give lr in the job file")
        momentum = js.resolve("momentum", momentum, 0.0)
        part_size = js.resolve("part_size", part_size, 0)
        iterations = js.resolve("iterations", iterations, 0)
        lr_cosine = js.resolve(
            "lr_schedule",
            None if lr_cosine is None else
            ("cosine" if lr_cosine else "constant"), "constant",
            arg="lr_cosine", shown=lr_cosine) == "cosine"
        server_optimizer = js.resolve("server_optimizer", server_optimizer,
                                      "sgd")
        window = _push_window_value(push_window)
        if not isinstance(server_optimizer, str):
            raise InvalidArgumentError(
                "server_optimizer must be \"sgd\", \"momentum:B\" or \"adam\" "
                "(got %r)" % (server_optimizer,))
        density_warmup = js.resolve("density_warmup", density_warmup, 0)
        density_warmup_start = js.resolve("density_warmup_start",
                                          density_warmup_start, 0.25)
        if weighted and asynchronous:
            raise InvalidArgumentError("a weighted job is synchronous: "
                                       "asynchronous and weighted exclude "
                                       "each other")
        for what, value, top in (("rank", rank, 2**32), ("workers", workers,
                                                         2**32),
                                 ("part_size", part_size, 2**32),
                                 ("iterations", iterations, 2**64),
                                 ("retry_ms", retry_ms, 2**31),
                                 ("deadline_ms", deadline_ms, 2**31),
                                 ("density_warmup", density_warmup, 2**64)):
            if isinstance(value, bool) or not isinstance(value, int) or not (
                    0 <= value < top):
                raise InvalidArgumentError(
                    "%s must be a whole number in [0, %d) (got %r)"
                    % (what, top, value))
        if isinstance(density_warmup_start, bool) or not isinstance(
                density_warmup_start, (int, float)):
            raise InvalidArgumentError(
                "density_warmup_start must be a number with 0 < S <= 1 "
                "(got %r)" % (density_warmup_start,))
        # Its range is libflps's to check (flps_client_create_warmup), so
        # the message is the library's.
        density_warmup_start = float(density_warmup_start)
        if isinstance(servers, str):
            servers = [s for s in servers.split(",") if s]
        servers = list(servers) if servers is not None else []
        if not servers:
            raise InvalidArgumentError(
                "no shard endpoints given; pass servers=['tcp://host:port', "
                "...], one per shard")
        items = _layout_items(layout)
        if not items:
            raise InvalidArgumentError("the layout has no tensors")
        self.names = []
        self.numels = []
        self._buffers = []  # keeps the caller's memory alive
        tensors = (_native.FlpsTensor * len(items))()
        names_b = []
        for i, (name, buf) in enumerate(items):
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(
                    "tensor %d of the layout has no name (got %r)" % (i, name))
            ptr, numel = _replica_buffer(buf, "tensor %r of the layout" % name)
            if numel == 0:
                raise InvalidArgumentError(
                    "tensor %r of the layout is empty" % name)
            names_b.append(name.encode())
            tensors[i].name = names_b[-1]
            tensors[i].numel = numel
            tensors[i].data = ptr
            self.names.append(name)
            self.numels.append(numel)
            self._buffers.append(buf)
        if len(set(self.names)) != len(self.names):
            raise InvalidArgumentError(
                "the layout names a tensor twice: %s" % self.names)
        self._index = {n: i for i, n in enumerate(self.names)}
        servers_b = [s.encode() for s in servers]
        cservers = (ctypes.c_char_p * len(servers_b))(*servers_b)
        job_b = job.encode()
        comp_b = compression.encode() if compression else None
        cfg = _native.FlpsClientConfig(
            job=job_b, rank=rank, workers=workers, servers=cservers,
            nservers=len(servers_b), tensors=tensors, ntensors=len(items),
            part_size=part_size,
            async_=2 if weighted else 1 if asynchronous else 0,
            compression=comp_b, lr=lr, lr_cosine=1 if lr_cosine else 0,
            iterations=iterations, momentum=momentum, retry_ms=retry_ms,
            deadline_ms=deadline_ms)
        self.job = job
        self.rank = rank
        self.workers = workers
        self.servers = servers
        self.compression = compression or "dense"
        #: How the client runs: "ssgd", "async", "ssp:S" or "weighted".
        self.mode = ("weighted" if weighted else "ssp:%d" % staleness
                     if staleness is not None else
                     "async" if asynchronous else "ssgd")
        self.retry_ms = retry_ms
        self.deadline_ms = deadline_ms
        #: The density warm-up's iterations (0: none) and start density.
        self.density_warmup = density_warmup
        self.density_warmup_start = density_warmup_start
        self._warmup_sent = 0
        #: What the shards make of each iteration's update (sgd: apply it).
        self.server_optimizer = server_optimizer
        out = ctypes.c_void_p()
        _native.take_logged_error()
        if server_optimizer != "sgd" or window != 0:
            rc = self._create_config(lib, cfg, density_warmup,
                                     density_warmup_start,
                                     server_optimizer.encode(), out, window)
        elif density_warmup > 0:
            # NULL transport: $FLPS_TRANSPORT or zmq, as flps_client_create.
            rc = lib.flps_client_create_warmup(
                ctypes.byref(cfg), None, density_warmup, density_warmup_start,
                ctypes.byref(out))
        else:
            rc = lib.flps_client_create(ctypes.byref(cfg), ctypes.byref(out))
        if rc != 0:
            why = _native.take_logged_error()
            if rc == InvalidArgumentError.code and not why:
                why = ("a setting is out of its range: job 1..63 characters, "
                       "0 <= rank < workers, lr > 0, 0 <= momentum < 1 (got "
                       "job=%r rank=%r workers=%r lr=%r momentum=%r)"
                       % (job, rank, workers, lr, momentum))
            raise self._error(rc, "cannot join job %r at %s" %
                              (job, ",".join(servers)), why)
        self._handle = out
        if staleness is not None:
            try:
                self.set_staleness(staleness)
            except BaseException:
                self.close()
                raise
        self._ran = _Ran(_jobenv.canonical_codec(self.compression),
                         self.mode)
        _ran.append(self._ran)
        _clients.add(self)

    @staticmethod
    def _create_config(lib, cfg, warmup, warmup_start, sopt_b, out,
                       window=0):
        """flps_client_create_config with cfg's 0.3 fields and the later
        settings; InvalidArgumentError where the library predates them."""
        if not (_native.has("flps_client_create_config") and
                _native.has("flps_client_config_init_size")):
            raise InvalidArgumentError(
                "a server optimizer or a push window needs libflps 0.4 "
                "or later with "
                "flps_client_create_config; %s has none"
                % _native.library_path())
        whole = _native.FlpsClientConfigFull()
        rc = lib.flps_client_config_init_size(ctypes.byref(whole),
                                              ctypes.sizeof(whole))
        if rc != 0:
            return rc
        for name, _ in _native.FlpsClientConfig._fields_:
            setattr(whole, name, getattr(cfg, name))
        whole.density_warmup = warmup
        whole.density_warmup_start = warmup_start
        whole.server_optimizer = sopt_b
        whole.push_window = window
        return lib.flps_client_create_config(ctypes.byref(whole),
                                             ctypes.byref(out))

    # -- errors --

    def _error(self, rc, what, why=None):
        lib = self._lib
        if why is None:
            why = ""
            if self._handle is not None:
                why = lib.flps_client_last_error(self._handle).decode(
                    "utf-8", "replace")
        return library_error(lib, rc, what, why)

    def _live(self):
        if self._handle is None:
            raise StateError("the client of job %r is closed; make a new one "
                             "with flps.connect" % self.job)
        return self._handle

    def _call(self, what, fn, *args, hints=None):
        """fn(handle, *args), raising its error; hints: code -> advice added
        to the message of that code."""
        with self._lock:
            rc = fn(self._live(), *args)
            if rc != 0:
                err = self._error(rc, what)
                if hints and rc in hints:
                    err = type(err)("%s (%s)" % (err.message, hints[rc]),
                                    code=err.code, name=err.name)
                raise err

    def layer(self, layer):
        """The index of `layer` (an index or a tensor's name)."""
        if isinstance(layer, str):
            try:
                return self._index[layer]
            except KeyError:
                raise InvalidArgumentError(
                    "no tensor %r in the layout (it has %s)"
                    % (layer, ", ".join(self.names))) from None
        if isinstance(layer, bool) or not isinstance(layer, int) or not (
                0 <= layer < len(self.names)):
            raise InvalidArgumentError(
                "layer %r is not a tensor of the layout (0..%d or a name)"
                % (layer, len(self.names) - 1))
        return layer

    # -- the calls --

    def init(self):
        """Rank 0 offers its buffers as the initial model (shards restored
        from a checkpoint keep theirs); then every rank pulls the model into
        its buffers.  Blocks."""
        self._call("cannot fetch the initial model",
                   self._lib.flps_client_init)

    def push(self, layer, grad, iteration):
        """Push the gradient of `layer` (index or name) for `iteration`.

        grad: the layer's numel float32 values (any array-like; a
        contiguous float32 numpy array or CPU tensor is used without a
        copy).  Returns at once; the update arrives in :meth:`wait`."""
        i = self.layer(layer)
        ptr, keep = _gradient(grad, self.numels[i],
                              "the gradient of %r" % self.names[i])
        self._call("cannot push the gradient of %r for iteration %d"
                   % (self.names[i], iteration), self._lib.flps_client_push,
                   i, ptr, iteration)
        del keep

    def push_pairs(self, layer, indices, values, iteration):
        """Push `layer`'s already-selected pairs for `iteration`
        (flps_client_push_pairs): values[j] at element index indices[j], in
        any order, each index at most once.  For a selection made by the
        caller with its own error feedback (flps.torch does it on the
        tensor's device); libflps applies no momentum or residual to them.
        Only for jobs whose shards aggregate pairs (topk, gtopk, dgc, randk,
        auto).  indices and values may be numpy arrays or torch tensors on
        any device (only these are copied to the host).  After wait(),
        pairs_taken() says which the shards did not take.  Returns the
        number of pairs pushed."""
        i = self.layer(layer)
        idx = _host_pairs_array(indices, "index",
                                "the indices of %r" % self.names[i])
        val = _host_pairs_array(values, "value",
                                "the values of %r" % self.names[i])
        if idx.size != val.size:
            raise InvalidArgumentError(
                "%d indices and %d values for %r; give one value per index"
                % (idx.size, val.size, self.names[i]))
        self._call("cannot push %d pairs of %r for iteration %d"
                   % (idx.size, self.names[i], iteration),
                   self._lib.flps_client_push_pairs, i, idx.ctypes.data,
                   val.ctypes.data, idx.size, iteration,
                   hints={
                       InvalidArgumentError.code: "each index at most once, "
                       "at most numel pairs",
                       RangeError.code: "an index is not below the layer's %d elements"
                       % self.numels[i],
                       StateError.code: "pairs go only to jobs whose shards "
                       "add pairs (topk, gtopk, dgc, randk, auto), and a "
                       "layer is pushed once per iteration"})
        return idx.size

    def pairs_taken(self, layer, n):
        """After wait(): a numpy bool array of the n pairs of `layer`'s last
        push_pairs, in the order pushed, True where the shards took the
        pair into the update and False where they did not (gtopk); add
        those back into the residual (flps_client_pairs_taken)."""
        i = self.layer(layer)
        out = np.empty(n, dtype=np.uint8)
        self._call("cannot tell which pairs of %r were taken" % self.names[i],
                   self._lib.flps_client_pairs_taken, i, out.ctypes.data, n,
                   hints={StateError.code: "call it after wait() of a "
                          "push_pairs of that layer",
                          InvalidArgumentError.code: "n must be the pushed "
                          "count, the number of pairs push_pairs returned"})
        return out.view(np.bool_)

    def wait(self, iteration):
        """Block until every part pushed for `iteration` has its update and
        add the updates into the buffers."""
        self._call("iteration %d did not complete" % iteration,
                   self._lib.flps_client_wait, iteration)
        self._waited(iteration)

    def _waited(self, iteration):
        """What a wait that returned for iteration records: the iterations
        run and, at the warm-up's last iteration, the bytes sent so far."""
        self._ran.iterations = max(self._ran.iterations, iteration + 1)
        if self.density_warmup > 0 and iteration + 1 == self.density_warmup:
            self._warmup_sent = self.stats().bytes_sent

    def wait_layer(self, layer, iteration):
        """Synchronous clients: block until every part of `layer` (index or
        name) pushed for `iteration` has its update and add it into that
        layer's buffer (flps_client_wait_layer): call it just before the
        next forward pass reads the layer.  Updates of other layers that
        arrive first are added too; call wait() (or this for every layer)
        before reading the whole model."""
        i = self.layer(layer)
        if self.mode != "ssgd":
            raise StateError("wait_layer waits for one layer's update in a "
                             "synchronous job; this client is %s, where "
                             "each wait pulls the whole model: use wait()"
                             % self.mode)
        self._call("the update of %r for iteration %d did not arrive"
                   % (self.names[i], iteration),
                   self._lib.flps_client_wait_layer, i, iteration)
        self._waited(iteration)

    @property
    def warmup_bytes_sent(self):
        """bytes_sent when the wait of the density warm-up's last iteration
        returned (as flworker reports it); 0 before, or without one."""
        return self._warmup_sent

    def pull(self):
        """Replace the buffers' contents with the shards' model.  Blocks."""
        self._call("cannot pull the model", self._lib.flps_client_pull)

    def checkpoint(self):
        """Ask every shard to write a checkpoint now.  Blocks."""
        self._call("cannot checkpoint", self._lib.flps_client_checkpoint,
                   hints={StateError.code: "a shard writes checkpoints only "
                          "when started with --checkpoint-dir"})

    def set_layer_codec(self, layer, spec):
        """Auto jobs (compression "auto") only: send `layer` as "dense" or
        "topk:D" from its next push on."""
        i = self.layer(layer)
        self._call("cannot set the codec of %r to %r" % (self.names[i], spec),
                   self._lib.flps_client_set_layer_codec, i, spec.encode(),
                   hints={
                       StateError.code: "not an auto job: only a client made "
                       "with compression=\"auto\" takes a codec per layer, "
                       "this one has %r" % self.compression,
                       InvalidArgumentError.code: "use \"dense\" or "
                       "\"topk:D\" with 0 < D <= 1"})

    def set_staleness(self, staleness):
        """Bounded staleness (SSP) for an asynchronous client: wait() holds
        this worker back until it is at most `staleness` iterations ahead
        of the slowest worker (0: every worker's previous iteration)."""
        if not isinstance(staleness, int) or not 0 <= staleness < 2**32 - 1:
            raise ValueError("staleness must be an integer in 0..2^32-2, "
                             "not %r" % (staleness,))
        self._call("cannot set the staleness bound",
                   self._lib.flps_client_set_staleness, staleness,
                   hints={StateError.code: "a staleness bound needs an "
                          "asynchronous client: connect with "
                          "asynchronous=True"})

    def set_push_weight(self, weight):
        """The weight of this worker's next pushes in a weighted job
        (connect(..., weighted=True)): the shards divide each iteration's
        summed pushes by the sum of their weights instead of by workers,
        so pushing weight * g with `weight` gives the weighted mean of the
        g (FedAvg's sample-weighted average; 0 for nothing to add)."""
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not 0 <= weight <= 1e15:
            raise ValueError("weight must be a number in 0..1e15, not %r"
                             % (weight,))
        self._call("cannot set the push weight",
                   self._lib.flps_client_set_push_weight,
                   ctypes.c_double(weight),
                   hints={StateError.code: "a push weight needs a weighted "
                          "client: connect with weighted=True"})

    @property
    def stale_wait_seconds(self):
        """Seconds wait() spent held back by the staleness bound."""
        with self._lock:
            return self._lib.flps_client_stale_wait_seconds(self._live())

    def measure_network(self):
        """(alpha seconds, beta seconds per byte) to the shards, measured
        with a few pulls that replace the buffers as pull() does."""
        alpha, beta = ctypes.c_double(), ctypes.c_double()
        self._call("cannot measure the network",
                   self._lib.flps_client_measure_network, ctypes.byref(alpha),
                   ctypes.byref(beta))
        return alpha.value, beta.value

    @property
    def resume_iteration(self):
        """The first iteration the shards have not closed yet."""
        with self._lock:
            return self._lib.flps_client_resume_iteration(self._live())

    def stats(self):
        """The client's counters, as a :class:`ClientStats`."""
        st = _native.FlpsClientStats()
        with self._lock:
            self._lib.flps_client_get_stats(self._live(), ctypes.byref(st))
        return ClientStats(*(getattr(st, f) for f, _ in st._fields_))

    def energy(self):
        """What libflps metered of this process's energy through this client
        (flps_client_energy, docs/energy.md): a dict with devices, gpus,
        iterations, seconds, joules (gpu_joules, cpu_joules), joules per
        iteration, method, the gpu_clock setting and the clock set
        (gpu_clock_mhz, 0 for the default), and why (a line where nothing
        reports energy or the clock was refused); None on a libflps
        without the call.  Only the process's first live client meters."""
        with self._lock:
            return _native.energy_of(self._live())

    def messages(self):
        """(sent, received): messages put on and taken off the wire."""
        sent, received = ctypes.c_uint64(), ctypes.c_uint64()
        with self._lock:
            self._lib.flps_client_get_messages(self._live(), ctypes.byref(sent),
                                               ctypes.byref(received))
        return sent.value, received.value

    def residual_norm(self, layer):
        """L2 norm of `layer`'s error-feedback residual (0 without one)."""
        norm = ctypes.c_double()
        self._call("cannot read the residual", self._lib.flps_client_residual_norm,
                   self.layer(layer), ctypes.byref(norm))
        return norm.value

    @property
    def last_error(self):
        """The client's sticky error message, "" while it is healthy."""
        with self._lock:
            return self._lib.flps_client_last_error(self._live()).decode(
                "utf-8", "replace")

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Close the connections and free the client; the buffers stay the
        caller's.  Closing twice does nothing."""
        with self._lock:
            if self._handle is not None:
                # What flps.report says about bytes after the close.
                st = _native.FlpsClientStats()
                self._lib.flps_client_get_stats(self._handle,
                                                ctypes.byref(st))
                self._final_stats = ClientStats(
                    *(getattr(st, f) for f, _ in st._fields_))
                _clients.discard(self)
                _closed_stats.append(self._final_stats)
                energy = _native.energy_of(self._handle)
                if energy is not None and (energy["devices"] > 0 or
                                           energy["gpu_clock"] != "default"):
                    _closed_energy.append(energy)
                if self.density_warmup > 0:
                    _closed_warmup_bytes.append(self._warmup_sent)
                self._lib.flps_client_destroy(self._handle)
                self._handle = None
                self._buffers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()

    def __repr__(self):
        return "<flps.Client job=%r rank=%d/%d %d tensors %s>" % (
            self.job, self.rank, self.workers, len(self.names),
            "closed" if self.closed else "open")


def _push_window_value(window):
    """push_window= as flps_client_config's int (0: the library's choice);
    InvalidArgumentError for anything but None, "auto" or an int."""
    if window is None:
        return 0
    if window == "auto":
        return _native.PUSH_WINDOW_AUTO
    if (isinstance(window, bool) or not isinstance(window, int)
            or not -2**31 <= window < _native.PUSH_WINDOW_AUTO):
        raise InvalidArgumentError(
            "push_window must be None, \"auto\" or a whole number of "
            "pieces (negative: no bound) (got %r)" % (window,))
    return window


def connect(job=None, rank=None, workers=None, servers=None, layout=None,
            *, lr=None, compression=None, momentum=None, part_size=None,
            asynchronous=None, staleness=None, lr_cosine=None,
            iterations=None, retry_ms=0, deadline_ms=0, weighted=None,
            density_warmup=None, density_warmup_start=None,
            server_optimizer=None, push_window=None, settings=None):
    """Join job `job` as worker `rank` of `workers` and register `layout`.

    job, rank, workers, servers: where this worker belongs; each one left
        out (None) is read from FLPS_JOB, FLPS_RANK, FLPS_WORKERS or
        FLPS_SERVERS, which flrun and flsubmit set for a job file's
        command:.  Without a job and without FLPS_JOB, an
        InvalidArgumentError names the launchers.
    servers: the shard endpoints, shard i first (a list, or one
        comma-separated string), e.g. ["tcp://10.0.0.7:5555"].
    layout: the model, first layer first: a mapping of tensor name to its
        buffer, or a sequence of (name, buffer) pairs.  Each buffer is a
        C-contiguous float32 numpy array or a contiguous float32 torch CPU
        tensor; libflps writes the model into it (no copy is made) and the
        client keeps it alive.
    lr: the shards' learning rate (> 0); they apply
        w -= lr / workers * sum of the pushed gradients.
    compression: "dense", "fp16", "topk:D", "gtopk:D", "randk:D", "dgc:D",
        "qsgd:BITS", "sign" or "auto".
    momentum: worker-side momentum in [0, 1).
    asynchronous, staleness: the shards apply each push as it comes
        (asynchronous=True); staleness=S bounds how far a worker runs ahead
        of the slowest (SSP, set_staleness).
    part_size, lr_cosine, iterations, retry_ms, deadline_ms: as
        flps_client_config's fields (0 = the library's default; the
        deadline bounds every blocking call, 300 s by default).
    weighted: synchronous, with the shards dividing each iteration's summed
        pushes by the sum of the pushes' weights (set_push_weight) instead
        of by workers (FLPS_MODE_WEIGHTED).
    density_warmup, density_warmup_start: a density warm-up
        (flps_client_create_warmup) over the first density_warmup
        iterations (0 = none): each layer's selection density decays from
        density_warmup_start (0 < S <= 1) to its codec's density D,
        S * (D / S) ** (t / density_warmup), and the shards cut a gtopk sum
        to the same k.  Synchronous jobs with topk:D, gtopk:D, dgc:D or
        auto only; anything else is an InvalidArgumentError with libflps's
        reason.  Every worker of a job must pass the same two values.
    server_optimizer: what the shards make of each iteration's update U
        before applying it: "sgd" (U), "momentum:B" (v <- B v + U, apply
        v: FedAvgM) or "adam" (lr times Adam's step on U: FedAdam);
        synchronous or weighted jobs, not gtopk (flps.fl passes the job
        file's).
    push_window: dense pushes in flight to each shard (flps_client_config's
        push_window): None (the default: $FLPS_PUSH_WINDOW, else no
        bound), a positive number of pieces, a negative number (no bound)
        or "auto" (sized to the link measured by init();
        DistributedOptimizer passes it for dense and auto jobs).  Keep
        None where one thread drives several clients: a held push moves
        only while its own client is called.
    settings: the job file's settings to follow (flps.jobenv.JobSettings;
        default: the launcher's FLPS_* variables).

    What the job file says is what runs: a setting left out (None) takes
    the job file's compression, mode (ssgd, async, ssp:S), lr, momentum,
    lr_schedule, iterations, part_size and density warm-up, and an
    argument that contradicts one the file gives is a ConfigError naming
    both values.  Where the file says nothing the defaults are: lr the
    launcher's FLPS_LR (required without one), compression "dense",
    momentum 0, synchronous, a constant lr, no warm-up (start 0.25).

    Blocks until every shard accepted the layout, and returns the
    :class:`Client`; call its init() next.  Raises an FlpsError subclass
    (TimedOutError for a shard that does not answer within the deadline,
    LayoutError for a layout other workers registered differently, ...).
    """
    return Client(job, rank, workers, servers, layout, lr=lr,
                  compression=compression, momentum=momentum,
                  part_size=part_size, asynchronous=asynchronous,
                  staleness=staleness, lr_cosine=lr_cosine,
                  iterations=iterations, retry_ms=retry_ms,
                  deadline_ms=deadline_ms, weighted=weighted,
                  density_warmup=density_warmup,
                  density_warmup_start=density_warmup_start,
                  server_optimizer=server_optimizer,
                  push_window=push_window, settings=settings)


def version():
    """The version of the libflps loaded, "MAJOR.MINOR.PATCH"."""
    return _native.lib().flps_version().decode()
