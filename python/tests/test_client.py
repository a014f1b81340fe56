"""flps.Client against real flps shards: exact dense round trips, the
zero-copy layout, stats, and every error path the binding adds."""

import ctypes
import ctypes.util
import gc
import os
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import flps
from flps import _native

from conftest import BUILD_DIR, PYTHON_DIR

LR = 0.5


def test_version_is_the_expected_major_and_the_library_comes_from_the_build():
    major = int(flps.version().split(".")[0])
    assert major == flps.EXPECTED_MAJOR
    assert flps.library_path().startswith(BUILD_DIR)


def test_error_table_matches_the_loaded_library():
    lib = _native.lib()
    for code, cls in flps.ERROR_CLASSES.items():
        assert lib.flps_errname(code).decode() == cls.name, code
        assert issubclass(cls, flps.FlpsError)
    # One past the table: a newer library's code is still an FlpsError.
    nxt = max(flps.ERROR_CLASSES) + 1
    assert lib.flps_errname(nxt).decode() == "FLPS_E?"
    assert flps.error_class(nxt) is flps.FlpsError


def test_a_dense_round_trip_on_two_shards_is_exact(shards):
    s = shards("rt", 2)
    w = np.arange(10, dtype=np.float32)
    b = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    w0, b0 = w.copy(), b.copy()
    with flps.connect("rt", 0, 1, [x.endpoint for x in s],
                      [("w", w), ("b", b)], lr=LR, part_size=4,
                      deadline_ms=20000) as c:
        c.init()
        np.testing.assert_array_equal(w, w0)  # rank 0's values came back
        for it in range(3):
            gw = np.linspace(-1, 1, 10, dtype=np.float32) * (it + 1)
            gb = np.array([0.5, 0.25, -1.0], dtype=np.float32)
            c.push("b", gb, it)
            c.push(0, gw, it)
            c.wait(it)
            w0 = w0 - np.float32(LR) * gw
            b0 = b0 - np.float32(LR) * gb
            np.testing.assert_array_equal(w, w0)
            np.testing.assert_array_equal(b, b0)
        st = c.stats()
        assert isinstance(st, flps.ClientStats)
        assert st.elements_sent == 3 * 13
        assert st.pushes >= 3 * 2 and st.resends == 0
        assert st.bytes_sent == st.dense_bytes > 0  # dense: nothing saved
        assert st.sent_share == 1.0
        # Pull replaces the replica with the shards' model, which it is.
        w[:] = 7
        c.pull()
        np.testing.assert_array_equal(w, w0)
        alpha, beta = c.measure_network()
        assert alpha > 0 and beta > 0
    assert c.closed


def test_wait_layer_adds_one_layers_update_and_refuses_an_async_client(
        shards):
    s = shards("wl", 2)
    w = np.zeros(10, dtype=np.float32)
    b = np.zeros(3, dtype=np.float32)
    with flps.connect("wl", 0, 1, [x.endpoint for x in s],
                      [("w", w), ("b", b)], lr=LR, part_size=4,
                      deadline_ms=20000) as c:
        c.init()
        c.push("b", np.ones(3, dtype=np.float32), 0)
        c.push("w", np.ones(10, dtype=np.float32), 0)
        c.wait_layer("b", 0)
        np.testing.assert_array_equal(b, np.full(3, -LR, dtype=np.float32))
        c.wait_layer(0, 0)
        np.testing.assert_array_equal(w, np.full(10, -LR, dtype=np.float32))
        c.wait_layer("w", 0)  # nothing outstanding: at once
        with pytest.raises(flps.InvalidArgumentError):
            c.wait_layer(5, 1)
    s = shards("wl-async")
    w = np.zeros(4, dtype=np.float32)
    with flps.connect("wl-async", 0, 1, [s[0].endpoint], [("w", w)], lr=LR,
                      asynchronous=True, deadline_ms=20000) as c:
        c.init()
        with pytest.raises(flps.StateError, match="wait_layer|async"):
            c.wait_layer(0, 0)


def test_two_workers_get_the_update_of_the_averaged_gradient(shards):
    s = shards("avg", 1)
    n = 6
    models = [np.full(n, 1.0, dtype=np.float32),
              np.full(n, 99.0, dtype=np.float32)]
    grads = [np.arange(n, dtype=np.float32), np.full(n, 2.0, np.float32)]
    clients = [None, None]
    errors = []

    def worker(r):
        try:
            c = flps.connect("avg", r, 2, s[0].endpoint, {"x": models[r]},
                             lr=LR, deadline_ms=20000)
            clients[r] = c
            c.init()
            c.push("x", grads[r], 0)
            c.wait(0)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in clients:
        if c is not None:
            c.close()
    assert not errors, errors
    want = np.float32(1.0) - np.float32(LR / 2) * (grads[0] + grads[1])
    np.testing.assert_array_equal(models[0], want)
    np.testing.assert_array_equal(models[1], want)  # rank 1 got rank 0's


def test_torch_tensors_are_registered_without_a_copy(shards):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    s = shards("tt", 1)
    t = torch.ones(2, 3)
    with flps.connect("tt", 0, 1, [s[0].endpoint], {"t": t}, lr=1.0,
                      deadline_ms=20000) as c:
        c.init()
        c.push("t", torch.full((2, 3), 0.25), 0)
        c.wait(0)
    assert torch.equal(t, torch.full((2, 3), 0.75))


def test_the_client_keeps_the_layout_buffers_alive(shards):
    s = shards("alive", 1)
    buf = np.zeros(4, dtype=np.float32)
    ref = weakref.ref(buf)
    c = flps.connect("alive", 0, 1, [s[0].endpoint], {"x": buf}, lr=1.0,
                     deadline_ms=20000)
    del buf
    gc.collect()
    assert ref() is not None, "the layout buffer was freed under libflps"
    c.init()
    c.close()
    gc.collect()
    assert ref() is None, "close() should let the buffer go"


@pytest.mark.parametrize("buf, why", [
    (np.zeros(4, dtype=np.float64), "float32"),
    (np.zeros((4, 4), dtype=np.float32)[:, 1], "C-contiguous"),
    ([0.0, 1.0], "numpy array or torch"),
    (np.zeros(0, dtype=np.float32), "empty"),
])
def test_a_layout_buffer_libflps_cannot_write_into_is_refused(buf, why):
    with pytest.raises(flps.InvalidArgumentError, match=why) as e:
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0)
    assert isinstance(e.value, ValueError)
    assert e.value.name == "FLPS_EINVAL"


def test_a_read_only_layout_buffer_is_refused():
    buf = np.zeros(4, dtype=np.float32)
    buf.flags.writeable = False
    with pytest.raises(flps.InvalidArgumentError, match="read-only"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0)


def test_an_automatic_push_window_is_sized_at_init_and_changes_no_value(
        shards, caplog):
    s = shards("pw", 2)
    w = np.arange(10, dtype=np.float32)
    w0 = w.copy()
    with caplog.at_level("INFO", logger="flps"):
        with flps.connect("pw", 0, 1, [x.endpoint for x in s], {"w": w},
                          lr=LR, part_size=4, deadline_ms=20000,
                          push_window="auto") as c:
            c.init()
            for it in range(3):
                g = np.linspace(-1, 1, 10, dtype=np.float32) * (it + 1)
                c.push("w", g, it)
                c.wait(it)
                w0 = w0 - np.float32(LR) * g
                np.testing.assert_array_equal(w, w0)
    said = [r.getMessage() for r in caplog.records if r.name == "flps"]
    # Loopback holds every piece of a shard in 2 ms: no bound, and why.
    assert any(m.startswith("push window: no bound (the link measured")
               for m in said), said


@pytest.mark.parametrize("window", ["big", 1.5, True, 2**31 - 1])
def test_a_push_window_that_is_no_count_is_refused(window):
    buf = np.zeros(4, dtype=np.float32)
    with pytest.raises(flps.InvalidArgumentError, match="push_window must"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     push_window=window)


def test_settings_out_of_range_are_refused_with_what_they_must_be():
    buf = np.zeros(4, dtype=np.float32)
    with pytest.raises(flps.InvalidArgumentError, match="rank < workers"):
        flps.connect("j", 2, 2, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0)
    with pytest.raises(flps.InvalidArgumentError, match="twice"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"],
                     [("x", buf), ("x", np.zeros(2, np.float32))], lr=1.0)
    with pytest.raises(flps.InvalidArgumentError, match="deadline_ms"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     deadline_ms=-1)
    with pytest.raises(flps.InvalidArgumentError, match="job id"):
        flps.connect(None, 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0)
    # The names come from libflps's table (compress/codec.h), not a copy.
    with pytest.raises(flps.ConfigError,
                       match=r"'zip' is not a codec; use one of dense, "
                             r"topk:D, .*qsgd:BITS, .*auto"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     compression="zip")


@pytest.mark.parametrize("start", [0, 1.5, float("nan")])
def test_a_warm_up_start_density_out_of_range_is_refused(start):
    buf = np.zeros(4, dtype=np.float32)
    with pytest.raises(flps.InvalidArgumentError,
                       match=r"start density \S+ is out of range; expected "
                       r"0 < start <= 1"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     compression="gtopk:0.1", density_warmup=10,
                     density_warmup_start=start)


def test_a_warm_up_is_refused_where_nothing_can_follow_it():
    buf = np.zeros(4, dtype=np.float32)
    with pytest.raises(flps.InvalidArgumentError, match="only synchronous"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     compression="topk:0.1", asynchronous=True,
                     density_warmup=10, density_warmup_start=0.5)
    with pytest.raises(flps.InvalidArgumentError,
                       match="'fp16' has no selection density"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     compression="fp16", density_warmup=10)
    with pytest.raises(flps.InvalidArgumentError, match="density_warmup must"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     compression="topk:0.1", density_warmup=-1)
    with pytest.raises(flps.InvalidArgumentError,
                       match="density_warmup_start must be a number"):
        flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"], {"x": buf}, lr=1.0,
                     compression="topk:0.1", density_warmup=10,
                     density_warmup_start="0.5")


def test_a_warm_up_sends_the_schedules_pairs_and_gtopk_takes_them_all(shards):
    """One worker, gtopk:0.1 over 100 elements, 10 iterations of warm-up
    from 0.5: each push sends k(t) = floor(100 d(t)) pairs, and the shard
    keeps the global top k(t) too, so it takes every one of them (with the
    target's k it would leave out all but 10)."""
    s = shards("warm")[0]
    w = np.zeros(100, dtype=np.float32)
    rng = np.random.default_rng(3)
    sent, taken = [], []
    with flps.connect("warm", 0, 1, [s.endpoint], {"w": w}, lr=0.1,
                      compression="gtopk:0.1", density_warmup=10,
                      density_warmup_start=0.5, deadline_ms=20000) as c:
        assert (c.density_warmup, c.density_warmup_start) == (10, 0.5)
        c.init()
        for it in range(14):
            g = rng.standard_normal(100).astype(np.float32)
            order = np.argsort(-np.abs(g), kind="stable")
            before = c.stats().elements_sent
            # The pairs path: the caller selects k(t); the shard cuts its
            # global top k at the same k(t).
            k = int(np.floor(0.5 * (0.1 / 0.5) ** (it / 10) * 100)) \
                if it < 10 else 10
            idx = np.sort(order[:k]).astype(np.uint32)
            c.push_pairs(0, idx, g[idx], it)
            assert c.warmup_bytes_sent == 0 or it >= 10
            c.wait(it)
            sent.append(c.stats().elements_sent - before)
            taken.append(int(c.pairs_taken(0, k).sum()))
            if it == 9:
                at_end = c.stats().bytes_sent
        assert c.warmup_bytes_sent == at_end > 0, "the warm-up's bytes"
    want = [50, 42, 36, 30, 26, 22, 19, 16, 13, 11, 10, 10, 10, 10]
    assert sent == want
    assert taken == want, "the shard's global k follows the schedule"


def test_push_errors_are_raised_and_only_the_sticky_ones_stick(shards):
    s = shards("perr", 1)
    x = np.zeros(5, dtype=np.float32)
    with flps.connect("perr", 0, 1, [s[0].endpoint], {"x": x}, lr=1.0,
                      deadline_ms=20000) as c:
        c.init()
        with pytest.raises(flps.InvalidArgumentError, match="has 4 elements"):
            c.push("x", np.zeros(4, np.float32), 0)
        with pytest.raises(flps.InvalidArgumentError, match="no tensor 'y'"):
            c.push("y", np.zeros(5, np.float32), 0)
        with pytest.raises(flps.InvalidArgumentError, match="not a tensor"):
            c.push(1, np.zeros(5, np.float32), 0)
        bad = np.array([1, np.nan, 0, 0, 0], dtype=np.float32)
        with pytest.raises(flps.NonFiniteError) as e:
            c.push("x", bad, 0)
        assert e.value.code == 7 and "non-finite" in e.value.message
        with pytest.raises(flps.StateError, match="not an auto job"):
            c.set_layer_codec("x", "dense")
        # None of those broke the client.
        assert c.last_error == ""
        c.push("x", np.ones(5, np.float64), 0)  # converted, not refused
        c.wait(0)
        np.testing.assert_array_equal(x, -np.ones(5, np.float32))
        # A second push of the same tensor before its update is sticky.
        c.push("x", np.ones(5, np.float32), 1)
        with pytest.raises(flps.StateError) as e:
            c.push("x", np.ones(5, np.float32), 1)
        assert c.last_error and c.last_error in e.value.message
        with pytest.raises(flps.StateError):
            c.wait(1)  # every later call fails with the same error
    with pytest.raises(flps.StateError, match="closed"):
        c.push("x", np.ones(5, np.float32), 2)


def test_pushed_pairs_and_the_mask_of_what_gtopk_did_not_take(shards):
    """Two workers push pairs of their own choosing; gtopk:0.25 keeps the 2
    largest sums of the 8 elements, and each worker learns which of its
    pairs were left out."""
    s = shards("pairs", 1)
    xs = [np.zeros(8, dtype=np.float32) for _ in range(2)]
    cs = [flps.connect("pairs", r, 2, [s[0].endpoint], {"x": xs[r]}, lr=2.0,
                       compression="gtopk:0.25", deadline_ms=20000)
          for r in range(2)]
    try:
        for c in cs:
            c.init()
        # Rank 0: 7, 1, 0 (any order, int64); rank 1: 1, 5 (uint32).
        assert cs[0].push_pairs("x", np.array([7, 1, 0]),
                                np.array([3.0, 1.0, 0.5]), 0) == 3
        cs[1].push_pairs(0, np.array([1, 5], np.uint32),
                         np.array([2.0, -4.0], np.float32), 0)
        for c in cs:
            c.wait(0)
        # Sums: x1 = 3, x5 = -4, x7 = 3, x0 = 0.5: the 2 largest are x5 and,
        # of the tie 3 = 3, the lower index x1.
        want = np.zeros(8, np.float32)
        want[1], want[5] = -3.0, 4.0
        for x in xs:
            np.testing.assert_array_equal(x, want)
        assert cs[0].pairs_taken("x", 3).tolist() == [False, True, False]
        assert cs[1].pairs_taken("x", 2).tolist() == [True, True]
        c = cs[0]
        with pytest.raises(flps.InvalidArgumentError, match="pushed count"):
            c.pairs_taken("x", 2)
        with pytest.raises(flps.RangeError, match="8 elements"):
            c.push_pairs("x", [8], [1.0], 1)
        with pytest.raises(flps.InvalidArgumentError, match="at most once"):
            c.push_pairs("x", [2, 2], [1.0, 1.0], 1)
        with pytest.raises(flps.NonFiniteError):
            c.push_pairs("x", [2], [float("nan")], 1)
        with pytest.raises(flps.InvalidArgumentError, match="hold -1"):
            c.push_pairs("x", [-1], [1.0], 1)
        with pytest.raises(flps.InvalidArgumentError, match="one value per"):
            c.push_pairs("x", [1, 2], [1.0], 1)
        assert c.last_error == "", "none of those is sticky"
        assert c.pairs_taken("x", 3).tolist() == [False, True, False]
    finally:
        for c in cs:
            c.close()


def test_pairs_are_refused_by_a_job_of_dense_values(shards):
    s = shards("pdense", 1)
    x = np.zeros(4, dtype=np.float32)
    with flps.connect("pdense", 0, 1, [s[0].endpoint], {"x": x}, lr=1.0,
                      compression="fp16", deadline_ms=20000) as c:
        c.init()
        with pytest.raises(flps.StateError, match="add pairs"):
            c.push_pairs("x", [0], [1.0], 0)
        assert c.last_error == ""
        with pytest.raises(flps.StateError, match="after wait"):
            c.pairs_taken("x", 0)


def test_an_auto_job_takes_a_codec_per_layer(shards):
    s = shards("auto", 1)
    x = np.zeros(8, dtype=np.float32)
    with flps.connect("auto", 0, 1, [s[0].endpoint], {"x": x}, lr=1.0,
                      compression="auto", deadline_ms=20000) as c:
        c.init()
        c.set_layer_codec("x", "topk:0.25")
        with pytest.raises(flps.InvalidArgumentError):
            c.set_layer_codec("x", "lz4")
        g = np.array([0, 0, 5, 0, 0, -6, 0, 0], dtype=np.float32)
        c.push("x", g, 0)
        c.wait(0)
        np.testing.assert_array_equal(x, -g)  # the two largest were sent
        assert c.stats().elements_sent == 2
        assert c.residual_norm("x") == 0.0  # nothing else was nonzero
        sent, received = c.messages()
        assert sent >= 3 and received >= 3  # register, init, pull, push...
        g2 = np.array([1, 0, 0, 4, 0, 0, 2, 0], dtype=np.float32)
        c.push("x", g2, 1)
        c.wait(1)
        # 4 and 2 were sent; 1 stays in the residual
        assert c.residual_norm(0) == pytest.approx(1.0)
        assert c.messages()[0] > sent
        with pytest.raises(flps.InvalidArgumentError):
            c.residual_norm("nope")


def test_a_staleness_bound_holds_a_fast_worker_back(shards):
    """Rank 1 never pushes: with staleness 1 rank 0 may finish iteration 0
    (its next, 1, is one ahead of rank 1's 0) but not iteration 1, which
    waits until the deadline and says how far behind the slowest is."""
    s = shards("ssp", 1)
    x = np.zeros(8, dtype=np.float32)
    y = np.zeros(8, dtype=np.float32)
    idle = flps.connect("ssp", 1, 2, [s[0].endpoint], {"x": y}, lr=1.0,
                        asynchronous=True, deadline_ms=20000)
    with flps.connect("ssp", 0, 2, [s[0].endpoint], {"x": x}, lr=1.0,
                      asynchronous=True, deadline_ms=1500) as c:
        with pytest.raises(ValueError):
            c.set_staleness(-1)
        c.set_staleness(1)
        c.init()
        g = np.ones(8, dtype=np.float32)
        c.push("x", g, 0)
        c.wait(0)
        c.push("x", g, 1)
        t0 = time.monotonic()
        with pytest.raises(flps.TimedOutError, match="slowest worker"):
            c.wait(1)
        assert time.monotonic() - t0 >= 1.0
        assert c.stale_wait_seconds < 0.01  # the held-back wait failed
    idle.close()
    s2 = shards("sspsync", 1)
    with flps.connect("sspsync", 0, 1, [s2[0].endpoint], {"x": x},
                      lr=1.0, deadline_ms=5000) as c:
        with pytest.raises(flps.StateError, match="asynchronous"):
            c.set_staleness(1)


def test_a_weighted_job_takes_the_weighted_mean_of_the_pushes(shards):
    """Two workers push 3*g0 with weight 3 and 1*g1 with weight 1: the
    shards apply lr * (3 g0 + g1) / 4, not / 2; a round pushed with weight
    0 everywhere changes nothing."""
    s = shards("wtd", 1)
    x0 = np.zeros(4, dtype=np.float32)
    x1 = np.zeros(4, dtype=np.float32)
    g0 = np.array([1, 2, 3, 4], dtype=np.float32)
    g1 = np.array([4, 0, -4, 8], dtype=np.float32)
    c0 = flps.connect("wtd", 0, 2, [s[0].endpoint], {"x": x0}, lr=1.0,
                      weighted=True, deadline_ms=20000)
    c1 = flps.connect("wtd", 1, 2, [s[0].endpoint], {"x": x1}, lr=1.0,
                      weighted=True, deadline_ms=20000)
    with c0, c1:
        c0.init()
        c1.init()
        with pytest.raises(ValueError):
            c0.set_push_weight(-1)
        c0.set_push_weight(3)
        c1.set_push_weight(1)
        c0.push("x", 3 * g0, 0)
        c1.push("x", g1, 0)
        c0.wait(0)
        c1.wait(0)
        want = -((3 * g0 + g1) * np.float32(0.25))
        np.testing.assert_array_equal(x0, want)
        np.testing.assert_array_equal(x1, want)
        c0.set_push_weight(0)
        c1.set_push_weight(0)
        c0.push("x", np.zeros(4, dtype=np.float32), 1)
        c1.push("x", np.zeros(4, dtype=np.float32), 1)
        c0.wait(1)
        c1.wait(1)
        np.testing.assert_array_equal(x0, want)
    s2 = shards("wtdsync", 1)
    with flps.connect("wtdsync", 0, 1, [s2[0].endpoint], {"x": x0},
                      lr=1.0, deadline_ms=5000) as c:
        with pytest.raises(flps.StateError, match="weighted"):
            c.set_push_weight(1)


def test_checkpoint_writes_into_the_shards_directory(shards, tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    s = shards("ck", 1, extra=("--checkpoint-dir", str(ck)))
    x = np.ones(3, dtype=np.float32)
    with flps.connect("ck", 0, 1, [s[0].endpoint], {"x": x}, lr=1.0,
                      deadline_ms=20000) as c:
        c.init()
        c.checkpoint()
    assert os.listdir(ck), "the shard wrote nothing"


def test_checkpoint_without_a_checkpoint_dir_says_so(shards):
    s = shards("nock", 1)
    x = np.ones(3, dtype=np.float32)
    with flps.connect("nock", 0, 1, [s[0].endpoint], {"x": x}, lr=1.0,
                      deadline_ms=20000) as c:
        c.init()
        with pytest.raises(flps.StateError, match="refused"):
            c.checkpoint()


def test_an_unreachable_shard_fails_within_the_deadline():
    x = np.zeros(3, dtype=np.float32)
    t0 = time.monotonic()
    with pytest.raises(flps.TimedOutError) as e:
        flps.connect("gone", 0, 1, ["tcp://127.0.0.1:9"], {"x": x}, lr=1.0,
                     deadline_ms=500, retry_ms=100)
    took = time.monotonic() - t0
    assert took < 10, "took %.1f s for a 0.5 s deadline" % took
    assert "tcp://127.0.0.1:9" in e.value.message
    assert "did not answer" in e.value.message
    assert isinstance(e.value, TimeoutError)
    assert e.value.name == "FLPS_ETIMEDOUT"


def test_a_shard_that_dies_mid_training_times_out_the_wait(shards):
    s = shards("dies", 1)
    x = np.zeros(3, dtype=np.float32)
    with flps.connect("dies", 0, 2, [s[0].endpoint], {"x": x}, lr=1.0,
                      deadline_ms=800, retry_ms=200) as c:
        c.init()
        c.push("x", np.ones(3, np.float32), 0)
        s[0].stop()  # rank 1 never comes, and the shard is gone
        t0 = time.monotonic()
        with pytest.raises(flps.TimedOutError, match="did not answer"):
            c.wait(0)
        assert time.monotonic() - t0 < 10


def _run_isolated(env_extra, code):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FLPS_LIBRARY", "FLPS_BUILD_DIR", "LD_LIBRARY_PATH",
                        "PKG_CONFIG_PATH")}
    env.update(env_extra)
    env["PYTHONPATH"] = PYTHON_DIR
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)


PROBE = """
import numpy as np, flps
try:
    flps.connect("j", 0, 1, ["tcp://127.0.0.1:1"],
                 {"x": np.zeros(1, np.float32)}, lr=1.0)
except flps.LibraryNotFoundError as e:
    print("NOTFOUND", e)
else:
    print("LOADED")
"""


def test_a_missing_library_named_by_flps_library_is_a_clear_error(tmp_path):
    r = _run_isolated({"FLPS_LIBRARY": str(tmp_path / "libflps.so.0")}, PROBE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("NOTFOUND"), r.stdout
    assert "FLPS_LIBRARY=%s" % (tmp_path / "libflps.so.0") in r.stdout
    assert "cannot be loaded" in r.stdout


def test_no_library_anywhere_names_both_variables(tmp_path):
    if ctypes.util.find_library("flps"):
        pytest.skip("a libflps is installed on this system's library path")
    r = _run_isolated({"FLPS_BUILD_DIR": str(tmp_path / "nobuild"),
                       "PKG_CONFIG_PATH": str(tmp_path)}, PROBE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("NOTFOUND"), r.stdout
    assert "FLPS_BUILD_DIR" in r.stdout and "FLPS_LIBRARY" in r.stdout
    assert str(tmp_path / "nobuild") in r.stdout  # what was tried


def test_flps_build_dir_finds_the_library():
    r = _run_isolated({"FLPS_BUILD_DIR": BUILD_DIR},
                      "import flps; print(flps.library_path())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(BUILD_DIR, "lib", _native.SONAME)


def test_pkg_config_finds_an_installed_library(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", str(prefix)],
                   check=True, capture_output=True, timeout=120)
    r = _run_isolated({"PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")},
                      "import flps; print(flps.library_path())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(prefix / "lib" / _native.SONAME)


def test_a_library_of_another_major_version_is_refused():
    class Fake:
        def flps_version(self):
            return b"%d.0.0" % (flps.EXPECTED_MAJOR + 1)

    with pytest.raises(flps.VersionMismatchError, match="needs 0.x"):
        _native._check_version(Fake(), "/x/libflps.so")


def test_the_package_version_is_written_alike_in_pyproject():
    with open(os.path.join(PYTHON_DIR, "pyproject.toml")) as f:
        assert 'version = "%s"' % flps.__version__ in f.read()
    assert int(flps.__version__.split(".")[0]) == flps.EXPECTED_MAJOR


def test_libflps_log_lines_go_to_the_flps_logger(caplog):
    x = np.zeros(3, dtype=np.float32)
    with caplog.at_level("WARNING", logger="flps"):
        with pytest.raises(flps.TimedOutError):
            flps.connect("logs", 0, 1, ["tcp://127.0.0.1:9"], {"x": x},
                         lr=1.0, deadline_ms=300, retry_ms=100)
    lines = [r for r in caplog.records if r.name == "flps"]
    assert any(r.levelname == "ERROR" and "did not answer" in r.getMessage()
               for r in lines), [r.getMessage() for r in lines]


def test_a_job_with_credentials_serves_only_clients_that_hold_them(
        shards, tmp_path, monkeypatch):
    creds = tmp_path / "creds"
    secret = os.urandom(32).hex()
    creds.write_text("secret=%s\n" % secret)
    creds.chmod(0o600)
    s = shards("authpy", 1, ("--credentials-file", str(creds)))
    w = np.arange(8, dtype=np.float32)
    monkeypatch.delenv("FLPS_CREDENTIALS_FILE", raising=False)
    with pytest.raises(flps.AuthError):
        flps.connect("authpy", 0, 1, [s[0].endpoint], [("w", w)], lr=LR,
                     deadline_ms=20000)
    # The variable a launcher sets is all a program needs.
    monkeypatch.setenv("FLPS_CREDENTIALS_FILE", str(creds))
    w0 = w.copy()
    with flps.connect("authpy", 0, 1, [s[0].endpoint], [("w", w)], lr=LR,
                      deadline_ms=20000) as c:
        c.init()
        g = np.ones(8, dtype=np.float32)
        c.push("w", g, 0)
        c.wait(0)
        np.testing.assert_array_equal(w, w0 - np.float32(LR) * g)
    assert "data plane authenticated" in s[0].log()
    assert secret not in s[0].log()
    # A credentials file others may read is refused before anything
    # connects.
    creds.chmod(0o644)
    with pytest.raises(flps.ConfigError):
        flps.connect("authpy", 0, 1, [s[0].endpoint], [("w", w)], lr=LR,
                     deadline_ms=20000)


def test_energy_says_why_nothing_is_metered_and_what_the_clock_is(
        shards, monkeypatch, tmp_path):
    """Client.energy() is libflps's flps_client_energy: on this machine no
    NVML and (with an empty sysfs) no RAPL, so no device and one line why;
    gpu_clock comes from FLPS_GPU_CLOCK and is refused without a GPU."""
    s = shards("en", 1)
    monkeypatch.setenv("FLPS_NVML_LIBRARY", str(tmp_path / "no-nvml.so"))
    monkeypatch.setenv("FLPS_SYSFS_ROOT", str(tmp_path))
    monkeypatch.setenv("FLPS_GPU_CLOCK", "max")
    w = np.zeros(4, dtype=np.float32)
    with flps.connect("en", 0, 1, [x.endpoint for x in s], [("w", w)],
                      lr=LR, deadline_ms=20000) as c:
        c.init()
        e = c.energy()
        assert e["devices"] == 0 and e["iterations"] == 0
        assert e["gpu_clock"] == "max" and e["gpu_clock_mhz"] == 0
        assert "no NVML library" in e["why"]
        assert "running at the default clock" in e["why"], e["why"]
