"""flps.saps: four decentralized workers as threads of this process, over
loopback with a job secret: each round every pair averages exactly the
masked values (the same mask on both sides), every worker computes the
same matchings, and the coordinator's consensus is the workers' average."""

import json
import os
import socket
import subprocess
import threading

import numpy as np
import pytest

import flps.saps

N = 4
SIZES = (1000, 37)
DENSITY = 0.05


def free_endpoints(n):
    socks, eps = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        eps.append("tcp://127.0.0.1:%d" % s.getsockname()[1])
    for s in socks:
        s.close()
    return ",".join(eps)


def run_workers(fn, n=N):
    """fn(rank) in n threads; the results by rank, or the first error."""
    out, errors = [None] * n, []

    def one(rank):
        try:
            out[rank] = fn(rank)
        except BaseException as e:  # re-raised in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return out


@pytest.fixture
def secret(tmp_path, monkeypatch):
    creds = tmp_path / "creds"
    creds.write_text("secret=%s\n" % os.urandom(32).hex())
    creds.chmod(0o600)
    monkeypatch.setenv("FLPS_CREDENTIALS_FILE", str(creds))


def test_pairs_average_exactly_the_masked_values_and_agree_on_everything(
        secret):
    peers = free_endpoints(N)
    env = {"FLPS_JOB": "pysaps", "FLPS_WORKERS": str(N), "FLPS_PEERS": peers,
           "FLPS_SAPS_DENSITY": str(DENSITY), "FLPS_SEED": "7",
           "FLPS_PEER_DEADLINE": "20"}
    rounds = 6

    def worker(rank):
        # Worker w's model: every value w, so what a round changed shows.
        w = [np.full(n, float(rank), dtype=np.float32) for n in SIZES]
        with flps.saps.Saps(w, rank=rank, environ=env) as s:
            first = s.round(0)
            after_first = [t.copy() for t in w]
            infos = [first] + [s.round(r) for r in range(1, rounds)]
            final = [t.copy() for t in w]
            avg, cons = s.consensus(rounds)
            matrix, threshold = s.bandwidth()
            return dict(first=after_first, infos=infos, final=final, avg=avg,
                        cons=cons, stats=s.stats(), matrix=matrix,
                        threshold=threshold)

    res = run_workers(worker)
    for rank, r in enumerate(res):
        info = r["infos"][0]
        p = info["peer"]
        assert p is not None and p != rank and info["exchanged"]
        assert res[p]["infos"][0]["peer"] == rank
        for t, n in enumerate(SIZES):
            mine, theirs = r["first"][t], res[p]["first"][t]
            moved = mine != rank
            # k = floor(density * n) values (at least one), on both sides
            # the same ones, each now the pair's mean.
            assert moved.sum() == max(int(DENSITY * n), 1)
            assert np.array_equal(moved, theirs != p)
            assert np.all(mine[moved] == np.float32((rank + p) / 2))
            assert np.array_equal(mine[moved], theirs[moved])
    # The same matching on every worker in every round.
    for k in range(rounds):
        assert len({r["infos"][k]["matching_hash"] for r in res}) == 1
        assert all(r["infos"][k]["alive"] == N for r in res)
    assert len({r["stats"]["matching_digest"] for r in res}) == 1
    assert all(r["stats"]["exchanges"] == rounds for r in res)
    # The coordinator (rank 0) holds the average of the final models.
    assert res[0]["cons"]["coordinator"] == 0
    assert res[0]["cons"]["averaged"] == N
    assert all(r["avg"] is None for r in res[1:])
    for t in range(len(SIZES)):
        want = np.mean([r["final"][t] for r in res], axis=0)
        assert np.allclose(res[0]["avg"][t], want, atol=1e-6)
    dist = np.mean([np.sqrt(sum(((r["final"][t] - res[0]["avg"][t]) ** 2)
                                .sum() for t in range(len(SIZES))))
                    for r in res])
    assert res[0]["cons"]["distance"] == pytest.approx(dist, rel=1e-4)
    # Every worker holds the same measured matrix, positive off the
    # diagonal.
    for r in res:
        assert r["matrix"] == res[0]["matrix"]
        assert r["threshold"] == res[0]["threshold"]
        assert all(r["matrix"][i][j] > 0 for i in range(N) for j in range(N)
                   if i != j)


def test_without_the_peers_it_says_what_it_needs():
    w = [np.zeros(4, dtype=np.float32)]
    with pytest.raises(flps.InvalidArgumentError, match="FLPS_PEERS"):
        flps.saps.Saps(w, environ={"FLPS_JOB": "x", "FLPS_WORKERS": "2"})
    with pytest.raises(flps.InvalidArgumentError, match="float32"):
        flps.saps.Saps([np.zeros(4)], environ={})


PROGRAM = r"""
import os
import numpy as np
import flps.saps
rank = int(os.environ["FLPS_RANK"])
w = [np.full(100, float(rank), dtype=np.float32)]
with flps.saps.Saps(w) as s:
    for r in range(20):
        s.round(r)
    s.consensus(20)
"""


def flrun_summary(tmp_path, program, job_text, timeout=120):
    """program as a command: job (job_text, then its command) under flrun:
    the summary it printed."""
    from conftest import BUILD_DIR

    prog = tmp_path / "prog.py"
    prog.write_text(program)
    job = tmp_path / "job.yaml"
    job.write_text(job_text + "command: [%s, %s]\n" % ("/usr/bin/python3",
                                                       prog))
    p = subprocess.run([os.path.join(BUILD_DIR, "bin", "flrun"), "--log-dir",
                        str(tmp_path / "logs"), str(job)],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_under_flrun_the_summary_has_what_the_workers_did(tmp_path):
    summary = flrun_summary(
        tmp_path, PROGRAM,
        "name: pysaps\nworkers: 3\nmode: saps\niterations: 20\n")
    assert summary["mode"] == "saps"
    assert summary["rounds"] == 20
    # Three workers: one idle a round, the other two exchange.
    assert summary["exchanges"] == 2 * 20
    assert summary["idle_rounds"] == 20
    assert summary["matchings_agree"] is True
    assert summary["consensus_workers"] == 3
    assert summary["consensus_distance"] > 0
    assert summary["workers_lost"] == []
    assert summary["bytes_sent"] >= summary["exchange_bytes"] > 0
