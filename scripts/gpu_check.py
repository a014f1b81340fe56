"""The Python steps of scripts/gpu-check.sh (read its header first).

    gpu_check.py cuda          does torch see a CUDA GPU? (exit 3 if not)
    gpu_check.py topk OUT      flps.torch's GPU top-k on 25M floats against
                               torch.topk (on the GPU, and on the CPU)
    gpu_check.py workload      the CNN of examples/torch/cnn.py training on
                               CUDA, between the marks bench_energy reads
    gpu_check.py report DIR    the steps' JSON in DIR/work -> DIR/gpu-check.json

Standard library and torch only; the flps package from python/ (this
repository's).
"""

import argparse
import datetime
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cuda(_args):
    try:
        import torch
    except ImportError as e:
        print("torch cannot be imported (%s)" % e)
        return 3
    if not torch.cuda.is_available():
        print("torch %s sees no CUDA GPU (built with CUDA: %s)"
              % (torch.__version__, torch.version.cuda or "no"))
        return 3
    print("torch %s, CUDA %s, %s" % (torch.__version__, torch.version.cuda,
                                     torch.cuda.get_device_name(0)))
    return 0


def _median_ms(fn, repeats, warmup=3):
    """Median of `repeats` timings of fn() by CUDA events, after warm-up."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def topk(args):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch
    from flps.torch import TopkSelector

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1)
    grad = torch.randn(args.numel, device=dev, generator=gen)
    sel = TopkSelector(args.numel, args.density, dev, momentum=0.9)
    k = sel.k
    selector_ms = _median_ms(lambda: sel.select(grad), args.repeats)
    topk_ms = _median_ms(
        lambda: torch.topk(grad.abs(), k, sorted=False), args.repeats)
    # The host's torch.topk on the same data: what a CPU worker pays.
    host = grad.cpu()
    t = []
    for _ in range(3):
        t0 = time.perf_counter()
        torch.topk(host.abs(), k, sorted=False)
        t.append((time.perf_counter() - t0) * 1e3)
    cpu_ms = statistics.median(t)
    # The selection is right: the same indices as torch.topk's (no ties in
    # Gaussian data), with the residual's first step being the gradient.
    idx, _ = sel.select(grad)
    want = torch.sort(torch.topk(grad.abs(), k, sorted=False)[1])[0]
    out = {
        "numel": args.numel, "density": args.density, "k": k,
        "repeats": args.repeats,
        "selector_ms": selector_ms,
        "torch_topk_gpu_ms": topk_ms,
        "torch_topk_cpu_ms": cpu_ms,
        "selector_over_torch_topk_gpu": selector_ms / topk_ms,
        "cpu_over_selector": cpu_ms / selector_ms,
        "same_indices_as_torch_topk": bool(torch.equal(idx, want)),
        "what": "TopkSelector.select (momentum, residual add, |a|, topk, "
                "sort, gather) against torch.topk(|g|) alone, both on the "
                "GPU (CUDA events, median), and torch.topk on the CPU",
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print("top-k of %d floats at %g: selector %.3f ms, torch.topk %.3f ms "
          "on the GPU (x%.2f), %.1f ms on the CPU"
          % (args.numel, args.density, selector_ms, topk_ms,
             selector_ms / topk_ms, cpu_ms))
    return 0


def workload(args):
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
    import torch
    import torch.nn.functional as F
    import cnn

    dev = torch.device("cuda")
    torch.manual_seed(1)
    model = cnn.make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.rand(args.batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    print("@energy start", flush=True)
    t0, n = time.monotonic(), 0
    while True:
        for _ in range(50):
            step()
        n += 50
        torch.cuda.synchronize()
        if time.monotonic() - t0 >= args.seconds:
            break
    print("@energy stop %d" % n, flush=True)
    return 0


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"status": "failed", "error": "%s: %s" % (path, e)}


def _cmd(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def report(args):
    work = os.path.join(args.dir, "work")
    steps = {os.path.basename(p)[:-5]: _load(p)
             for p in sorted(glob.glob(os.path.join(work, "*.json")))}
    out = {
        "check": "scripts/gpu-check.sh",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "host": platform.node(),
        "gpu": _cmd(["nvidia-smi", "--query-gpu=name,driver_version,"
                     "clocks.sm,clocks.max.sm,power.draw",
                     "--format=csv,noheader"]),
        "git": _cmd(["git", "-C", ROOT, "rev-parse", "HEAD"]),
        "steps": steps,
        "bars": {},
    }
    dense, gtopk = steps.get("cuda-dense", {}), steps.get("cuda-gtopk", {})
    if "test_accuracy" in dense and "test_accuracy" in gtopk:
        gap = dense["test_accuracy"] - gtopk["test_accuracy"]
        share = gtopk["bytes_sent"] / dense["bytes_sent"]
        out["bars"]["accuracy_within_1_5_points"] = {
            "dense": dense["test_accuracy"], "gtopk": gtopk["test_accuracy"],
            "points_below_dense": 100 * gap, "holds": 100 * gap <= 1.5}
        out["bars"]["bytes_at_most_3_percent"] = {
            "share": share, "holds": share <= 0.03}
    clocks = {k: v for k, v in steps.items() if k.startswith("energy-")}
    if clocks:
        out["bars"]["joules_per_iteration_by_clock"] = {
            k[len("energy-"):]: {
                "clock_set_mhz": v.get("clock_set_mhz"),
                "gpu_joules_per_iteration": v.get("gpu_joules_per_iteration"),
                "seconds_per_iteration": v.get("seconds_per_iteration"),
                "clock_message": v.get("clock_message")}
            for k, v in clocks.items()}
    path = os.path.join(args.dir, "gpu-check.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print("gpu-check: report in %s" % path)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("cuda")
    t = sub.add_parser("topk")
    t.add_argument("out")
    t.add_argument("--numel", type=int, default=25_000_000)
    t.add_argument("--density", type=float, default=0.01)
    t.add_argument("--repeats", type=int, default=20)
    w = sub.add_parser("workload")
    w.add_argument("--seconds", type=float, default=15.0)
    w.add_argument("--batch", type=int, default=32)
    r = sub.add_parser("report")
    r.add_argument("dir")
    args = p.parse_args(argv)
    return {"cuda": cuda, "topk": topk, "workload": workload,
            "report": report}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
