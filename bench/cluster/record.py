#!/usr/bin/python3
"""Turn a bench/cluster/run.sh work directory into results CSV and JSON.

  record.py --session DIR --out RESULTS --commit SHA [--dirty]
            [--label L] [--note TEXT]

DIR holds calib-<rate>.json (one per network) and runs/<n>/ with meta.json,
flrun.out (its summary line last; peer.out for a DDP peer's run),
events-<rank>.jsonl (each worker's event lines: flworker's, a command:
job's through flps.report, or fmnist.py --ddp's). Writes
RESULTS/<stamp>-<label>.json, .csv and -evals.csv in the format
bench/cluster/README.md describes, and prints their paths.
"""
import argparse
import csv
import datetime
import glob
import json
import os
import platform
import socket
import statistics
import sys

COLUMNS = [
    "run_id", "machine", "commit", "date", "rate", "rate_bps", "delay_s",
    "delay_applied", "model", "codec", "workers", "shards", "iterations",
    "batch_size", "s_per_iter_median", "s_per_iter_mean",
    "bytes_per_iter_per_worker", "wire_bytes", "wall_s",
    "scaling_efficiency", "target_accuracy", "time_to_target_s",
    "iter_to_target", "final_test_accuracy", "eval_every",
    "wire_bytes_per_iter_per_worker",
]
EVAL_COLUMNS = ["run_id", "model", "codec", "rate", "workers", "shards",
                "iter", "elapsed_s", "test_accuracy"]


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"uname": " ".join(platform.uname()), "nproc": os.cpu_count(),
            "cpu_model": cpu, "hostname": socket.gethostname()}


def events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def batch_size(job):
    try:
        with open(job) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() == "batch_size":
                    return int(v.strip())
    except (OSError, ValueError):
        pass
    return 32  # the job-file default


def one_run(rundir, stem, mach, commit):
    meta = json.load(open(os.path.join(rundir, "meta.json")))
    if meta.get("rc") != 0:
        return None
    summary = None
    out = os.path.join(rundir, "flrun.out")
    if not os.path.exists(out):
        out = os.path.join(rundir, "peer.out")
    with open(out) as f:
        for line in f:
            if line.startswith("{"):
                summary = json.loads(line)
    if summary is None:
        return None
    r0 = events(os.path.join(rundir, "events-0.jsonl"))
    prog = [(e["iter"], e["elapsed"]) for e in r0
            if e.get("event") == "progress"]
    rates = []
    for (i0, t0), (i1, t1) in zip(prog, prog[1:]):
        if i1 > i0:
            rates.append((t1 - t0) / (i1 - i0))
    done = {}
    for rank in range(meta["workers"]):
        for e in events(os.path.join(rundir, "events-%d.jsonl" % rank)):
            if e.get("event") == "done":
                done[rank] = e
    its = meta["iterations"]
    # A DDP peer has no byte counters (its done events carry none).
    counted = len(done) == meta["workers"] and all(
        "bytes_sent" in d for d in done.values())
    moved = sum(d.get("bytes_sent", 0) + d.get("bytes_received", 0)
                for d in done.values())
    # Both directions of the worker hosts' links (their bridge ports' rx
    # and tx): the same measure for a flps job and a peer.
    ports = meta.get("port_bytes")
    hosts = meta.get("worker_hosts")
    wire_w = (sum(sum(ports[str(h)]) for h in hosts) / meta["workers"] / its
              if ports and hosts else None)
    evals = [{"iter": e["iter"], "elapsed_s": e.get("elapsed_s"),
              "test_accuracy": e["test_accuracy"]}
             for e in r0 if e.get("event") == "eval"]
    hit = next((e for e in evals if e["test_accuracy"] >= meta["target_accuracy"]
                and e["elapsed_s"] is not None), None)
    row = {
        "run_id": "%s#%d" % (stem, meta["n"]),
        "machine": "%s, %s CPUs, %s" % (mach["hostname"], mach["nproc"],
                                        mach["cpu_model"]),
        "commit": commit, "date": meta["date"], "rate": meta["rate"],
        "rate_bps": meta["rate_bps"], "delay_s": meta["delay_s"],
        "delay_applied": meta["delay_applied"], "model": meta["model"],
        "codec": meta["codec"], "workers": meta["workers"],
        "shards": meta["shards"], "iterations": its,
        "batch_size": batch_size(os.path.join(rundir, "job.yaml")),
        "s_per_iter_median": statistics.median(rates) if rates else None,
        "s_per_iter_mean": (done[0]["seconds"] / its
                            if 0 in done and "seconds" in done[0] else None),
        "bytes_per_iter_per_worker": (moved / meta["workers"] / its
                                      if counted else None),
        "wire_bytes": meta["wire_bytes"], "wall_s": summary.get("wall_seconds"),
        "scaling_efficiency": None,
        "target_accuracy": meta["target_accuracy"],
        "time_to_target_s": hit["elapsed_s"] if hit else None,
        "iter_to_target": hit["iter"] if hit else None,
        "final_test_accuracy": summary.get("test_accuracy",
                                           done.get(0, {}).get("test_accuracy")),
        "eval_every": meta["eval_every"],
        "wire_bytes_per_iter_per_worker": wire_w,
        "hosts": meta["hosts"], "system": meta.get("system", "flps"),
        "worker_hosts": hosts, "overlap": meta.get("overlap"),
        "socket_buffer": meta.get("socket_buffer"),
        "data_plane": summary.get("data_plane"),
        "evals": evals,
    }
    for k in ("host_rates", "link_rates"):
        if meta.get(k):
            row[k] = meta[k]
    if summary.get("mode") == "saps":
        # Decentralized: no shard ran; the exchanges over slow links and
        # the consensus model (the average of the workers').
        row["shards"] = 0
        row["saps"] = {k: summary[k] for k in (
            "peer_selection", "bandwidth_threshold", "exchanges",
            "slow_exchanges", "slow_exchange_share", "skipped_exchanges",
            "exchange_bytes", "probe_bytes", "consensus_accuracy",
            "consensus_distance") if k in summary}
    # Energy where the hardware reported it (flrun's summary: each node's
    # devices once, docs/energy.md), and so to the target: JSON only.
    jpi = summary.get("joules_per_iteration")
    row["joules_per_iteration"] = jpi
    row["joules_to_target"] = (jpi * hit["iter"]
                               if jpi is not None and hit else None)
    if row["system"] == "ddp" and 0 in done:
        row["ddp"] = {k: done[0][k] for k in ("ddp_hook", "powersgd_rank",
                                              "powersgd_start") if k in done[0]}
    return row


def scaling(rows):
    """s/iter at W=1 over s/iter at W, same everything else (weak scaling:
    the batch per worker is fixed, so W workers do W times the work)."""
    key = lambda r: (r["model"], r["codec"], r["rate"], r["delay_s"],
                     r["shards"], r["iterations"])
    ones = {}
    for r in rows:
        if r["workers"] == 1 and r["s_per_iter_median"]:
            ones.setdefault(key(r), []).append(r["s_per_iter_median"])
    # Repeated runs (--repeat): the median of the 1-worker ones.
    one = {k: statistics.median(v) for k, v in ones.items()}
    for r in rows:
        base = one.get(key(r))
        if base and r["s_per_iter_median"]:
            r["scaling_efficiency"] = base / r["s_per_iter_median"]


def cell(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "%.6g" % v
    return str(v)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--session", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--label", default="matrix")
    p.add_argument("--note", default="")
    p.add_argument("--commit", required=True,
                   help="git rev-parse HEAD when the runs started")
    p.add_argument("--dirty", action="store_true",
                   help="the tree had uncommitted changes to tracked files")
    a = p.parse_args()

    now = datetime.datetime.now(datetime.timezone.utc)
    stem = "%s-%s" % (now.strftime("%Y%m%dT%H%M%SZ"), a.label)
    mach = machine()
    commit, dirty = a.commit, a.dirty
    calib = [json.load(open(f)) for f in
             sorted(glob.glob(os.path.join(a.session, "calib-*.json")))]
    rows, failed = [], 0
    rundirs = sorted(glob.glob(os.path.join(a.session, "runs", "*")),
                     key=lambda d: int(os.path.basename(d)))
    for d in rundirs:
        r = one_run(d, stem, mach, commit)
        if r is None:
            failed += 1
        else:
            rows.append(r)
    scaling(rows)
    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, stem)
    doc = {"format": 1, "machine": mach, "commit": commit, "dirty": dirty,
           "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "note": a.note,
           "calibration": calib[0] if len(calib) == 1 else calib,
           "failed_runs": failed, "runs": rows}
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(base + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([cell(r[c]) for c in COLUMNS])
    with open(base + "-evals.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(EVAL_COLUMNS)
        for r in rows:
            for e in r["evals"]:
                w.writerow([cell(v) for v in (
                    r["run_id"], r["model"], r["codec"], r["rate"],
                    r["workers"], r["shards"], e["iter"], e["elapsed_s"],
                    e["test_accuracy"])])
    for r in rows:
        ttt = r["time_to_target_s"]
        jtt = r["joules_to_target"]
        print("record: %s %s W=%d on %s: %s s/iter (median), %s B/iter/worker "
              "(wire: %s), time to %.2f: %s%s, final accuracy %s" % (
                  r["model"], r["codec"], r["workers"], r["rate"],
                  cell(r["s_per_iter_median"]),
                  cell(r["bytes_per_iter_per_worker"]),
                  cell(r["wire_bytes_per_iter_per_worker"]), r["target_accuracy"],
                  "not reached" if ttt is None else "%.3f s" % ttt,
                  "" if jtt is None else " and %.6g J" % jtt,
                  cell(r["final_test_accuracy"])), file=sys.stderr)
    if failed:
        print("record: %d runs failed and are not recorded" % failed,
              file=sys.stderr)
    for suffix in (".json", ".csv", "-evals.csv"):
        print(base + suffix)


if __name__ == "__main__":
    main()
