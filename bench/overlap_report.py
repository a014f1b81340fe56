#!/usr/bin/env python3
"""bench/overlap_report.py WORK MODEL CODEC RATE WORKERS ITERATIONS: the
runs bench/overlap.sh left in WORK/runs/N (meta.json, flrun.out, rank 0's
events-0.jsonl), one line each on stderr and the JSON comparison as the
last line of stdout."""
import glob
import json
import os
import statistics
import sys


def run_of(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    if meta["rc"] != 0:
        sys.exit("overlap_report: run %d failed (see %s)" % (meta["n"], d))
    lines = open(os.path.join(d, "flrun.out")).read().split("\n")
    summary = json.loads([ln for ln in lines if ln.startswith("{")][-1])
    # Rank 0's progress clock: the median interval per iteration after the
    # first 10% (start-up, cold caches).
    prog, done = [], {}
    for ln in open(os.path.join(d, "events-0.jsonl")):
        try:
            e = json.loads(ln)
        except ValueError:
            continue
        if e.get("event") == "progress":
            prog.append((e["iter"], e["elapsed"]))
        elif e.get("event") == "done":
            done = e
    skip = max(1, len(prog) // 10)
    steps = [(b[1] - a[1]) / (b[0] - a[0])
             for a, b in zip(prog[skip:], prog[skip + 1:]) if b[0] > a[0]]
    return {"run": meta["n"], "overlap": meta["overlap"] == "true",
            "median_s_per_iter": statistics.median(steps),
            "mean_s_per_iter": summary["seconds_per_iteration"],
            "compute_seconds": summary["compute_seconds"],
            "push_seconds": summary["push_seconds"],
            "comm_wait_seconds": summary["comm_wait_seconds"],
            "model_hash": summary.get("model_hash"),
            # Rank 0's forward waits per layer (overlap on; 0 when off).
            "layer_wait_seconds": {l["name"]: l.get("wait_seconds", 0)
                                   for l in done.get("layers", [])}}


def main():
    work, model, codec, rate, workers, iters = sys.argv[1:7]
    runs = [run_of(d) for d in sorted(glob.glob(os.path.join(work, "runs", "*")),
                                      key=lambda p: int(os.path.basename(p)))]
    for r in runs:
        print("overlap: run %d, overlap %-3s: %.4f s/iteration (median), "
              "%.4f (mean); per worker: compute %.2f s, push %.2f s, "
              "waiting on the network %.2f s"
              % (r["run"], "on" if r["overlap"] else "off",
                 r["median_s_per_iter"], r["mean_s_per_iter"],
                 r["compute_seconds"], r["push_seconds"],
                 r["comm_wait_seconds"]), file=sys.stderr)
    on = [r for r in runs if r["overlap"]]
    off = [r for r in runs if not r["overlap"]]
    if not on or not off:
        sys.exit("overlap_report: a configuration has no run")

    def med(rs, k):
        return statistics.median(r[k] for r in rs)

    out = {"model": model, "codec": codec, "rate": rate,
           "workers": int(workers), "shards": 1, "iterations": int(iters),
           "runs_each": len(on),
           "s_per_iter_overlap": med(on, "median_s_per_iter"),
           "s_per_iter_no_overlap": med(off, "median_s_per_iter"),
           "mean_s_per_iter_overlap": med(on, "mean_s_per_iter"),
           "mean_s_per_iter_no_overlap": med(off, "mean_s_per_iter"),
           "compute_seconds_overlap": med(on, "compute_seconds"),
           "compute_seconds_no_overlap": med(off, "compute_seconds"),
           "comm_wait_seconds_overlap": med(on, "comm_wait_seconds"),
           "comm_wait_seconds_no_overlap": med(off, "comm_wait_seconds"),
           "same_model": len({r["model_hash"] for r in runs}) == 1,
           "rank0_layer_wait_seconds_overlap": {
               k: statistics.median(r["layer_wait_seconds"].get(k, 0)
                                    for r in on)
               for k in on[0]["layer_wait_seconds"]}}
    out["ratio"] = out["s_per_iter_overlap"] / out["s_per_iter_no_overlap"]
    out["mean_ratio"] = (out["mean_s_per_iter_overlap"]
                         / out["mean_s_per_iter_no_overlap"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
