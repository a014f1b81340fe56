#!/usr/bin/python3
"""Render the Grafana dashboard helm/flps/dashboards/flps-job.json from a real run.

    scripts/render_dashboard.py [--out docs/dashboard.png] [--iterations N]
    scripts/render_dashboard.py --check [--iterations N]   # no PNG (a ctest)

There is no Grafana here, so this draws the dashboard's own panels itself:
it starts the local cluster (scripts/cluster.sh, with its own state
directory), a real Prometheus (Debian's `prometheus`) that finds the
shards, workers and agents through flsched's GET /v1/metrics/targets
(http_sd, scrape_interval 1s) and scrapes flsched itself, submits a short
Fashion-MNIST job with flsubmit, waits for it to end, runs every panel's
PromQL expression through Prometheus' /api/v1/query_range over the job's
run ($job_id set to the job, $__rate_interval to 4 scrape intervals, as
Grafana does) and draws the panels with their titles, legends and units
where the dashboard's gridPos puts them, into one PNG.

It also checks what was really scraped against docs/metrics.md: every
metric name Prometheus stored from the daemons is documented, and every
documented one was stored. It exits 1 when a name differs or a panel got
no data it should have had (only "Rejected messages", "> 0", may be
empty), so a dashboard that silently shows nothing does not pass.

--check does all of that but draws nothing (no matplotlib needed): the
ctest integration_dashboard_live. Exit 77 (a skip) when prometheus or
redis-server is missing.

Needs a build (build/bin, or $FLPS_BIN_DIR), redis-server, prometheus and,
to draw, python3-matplotlib (apt-get install python3-matplotlib, Debian's
python3).
"""
import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DASHBOARD = os.path.join(ROOT, "helm", "flps", "dashboards", "flps-job.json")
DOCS = os.path.join(ROOT, "docs", "metrics.md")
SCRAPE_S = 1
RATE_INTERVAL = f"{4 * SCRAPE_S}s"
# Panels whose query may rightly return nothing in a healthy run: nothing
# refused; no GPU or RAPL counter on the node (docs/energy.md: no series
# where nothing reports energy, as on the machines flps is developed on).
MAY_BE_EMPTY = {"Rejected messages", "Joules per iteration",
                "Power per worker and device", "Node power (flagent)"}
# Documented families with no series where nothing reports energy (the
# same reason): not scraped here is no problem, scraped and undocumented is.
ABSENT_WITHOUT_HARDWARE = {"flworker_energy_joules_total", "flagent_node_energy_joules_total"}

JOB = """\
name: dashboard-demo
model: mlp
dataset: fashion-mnist
partition: iid
workers: 3
servers: 2
mode: ssgd
iterations: {iterations}
batch_size: 32
lr: 0.05
momentum: 0.9
lr_schedule: cosine
compression: topk:0.01
seed: 1
eval_every: {eval_every}
cpus_per_worker: 1
cpus_per_server: 1
"""


def log(msg):
    print(f"render_dashboard: {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_json(url, params=None, timeout=10):
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def documented_names():
    names = set()
    for line in open(DOCS, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 4 and cells[1] in ("counter", "gauge", "histogram"):
            for n in re.findall(r"`([A-Za-z_:][A-Za-z0-9_:]*)`", cells[0]):
                names.add((n, cells[1]))
    return names


class Run:
    """The cluster, Prometheus and the job; stop() undoes what start did."""

    def __init__(self, bindir, iterations):
        self.bindir = bindir
        self.iterations = iterations
        self.tmp = tempfile.mkdtemp(prefix="flps-dash.")
        # Passable by others: a root flagent runs each job as a uid of its
        # own, which must reach the cluster's directories below.
        os.chmod(self.tmp, 0o711)
        self.env = dict(os.environ, FLPS_BIN_DIR=bindir, FLPS_CLUSTER_DIR=os.path.join(self.tmp, "cluster"))
        self.prom = None
        self.cluster_up = False

    def start(self):
        out = subprocess.run([os.path.join(ROOT, "scripts", "cluster.sh"), "up"], env=self.env,
                             capture_output=True, text=True, check=True).stdout
        self.cluster_up = True
        self.sched = re.search(r"export FLPS_SCHEDULER=(\S+)", out).group(1)
        self.env["FLPS_SCHEDULER"] = self.sched
        self.env["FLPS_TOKEN_FILE"] = re.search(r"export FLPS_TOKEN_FILE=(\S+)", out).group(1)
        api = urllib.parse.urlparse(self.sched).netloc
        self.prom_addr = f"127.0.0.1:{free_port()}"
        conf = os.path.join(self.tmp, "prometheus.yml")
        with open(conf, "w") as f:
            f.write(f"""global:
  scrape_interval: {SCRAPE_S}s
  evaluation_interval: {SCRAPE_S}s
scrape_configs:
  - job_name: flps-cluster
    http_sd_configs:
      - url: {self.sched}/v1/metrics/targets
        refresh_interval: {SCRAPE_S}s
  - job_name: flsched
    static_configs:
      - targets: ["{api}"]
""")
        self.prom = subprocess.Popen(
            ["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={self.tmp}/tsdb",
             f"--web.listen-address={self.prom_addr}", "--log.level=warn"],
            stdout=open(os.path.join(self.tmp, "prometheus.log"), "w"), stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://{self.prom_addr}/-/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"prometheus did not start; see {self.tmp}/prometheus.log")
        log(f"cluster at {self.sched}, prometheus at http://{self.prom_addr} (state in {self.tmp})")

    def run_job(self):
        jobfile = os.path.join(self.tmp, "job.yaml")
        with open(jobfile, "w") as f:
            f.write(JOB.format(iterations=self.iterations, eval_every=max(1, self.iterations // 6)))
        flsubmit = os.path.join(self.bindir, "flsubmit")
        self.t0 = time.time()
        out = subprocess.run([flsubmit, "submit", jobfile], env=self.env, capture_output=True, text=True, check=True).stdout
        self.job_id = out.split()[0]
        log(f"job {self.job_id} submitted ({self.iterations} iterations); waiting for it to end")
        w = subprocess.run([flsubmit, "watch", self.job_id], env=self.env, capture_output=True, text=True)
        # Two more scrapes of flsched's final per-job values.
        time.sleep(3 * SCRAPE_S)
        self.t1 = time.time()
        log(f"job {self.job_id} ended (flsubmit watch exit {w.returncode}) after {self.t1 - self.t0:.0f} s")
        if w.returncode != 0:
            raise RuntimeError(f"the job did not succeed:\n{w.stdout}\n{w.stderr}")

    def query_range(self, expr):
        r = http_json(f"http://{self.prom_addr}/api/v1/query_range",
                      {"query": expr, "start": f"{self.t0:.3f}", "end": f"{self.t1:.3f}", "step": f"{SCRAPE_S}s"})
        if r.get("status") != "success":
            raise RuntimeError(f"query {expr!r}: {r}")
        return r["data"]["result"]

    def stored_names(self):
        r = http_json(f"http://{self.prom_addr}/api/v1/label/__name__/values",
                      {"start": f"{self.t0 - 60:.0f}", "end": f"{self.t1:.0f}"})
        # Prometheus' own series about each scrape are not the daemons'.
        return {n for n in r["data"] if not n.startswith(("up", "scrape_"))}

    def stop(self):
        if self.prom is not None:
            self.prom.send_signal(signal.SIGTERM)
            try:
                self.prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.prom.kill()
        if self.cluster_up:
            subprocess.run([os.path.join(ROOT, "scripts", "cluster.sh"), "down"], env=self.env,
                           capture_output=True)


# ---- drawing ------------------------------------------------------------------
def scaled(unit, values):
    """(factor, unit text) to show values of a Grafana unit."""
    peak = max((abs(v) for v in values), default=0)
    if unit == "Bps":
        for f, u in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
            if peak >= f:
                return f, u
        return 1, "B/s"
    if unit == "s":
        return (1e-3, "ms") if peak < 1 else (1, "s")
    if unit == "percentunit":
        return 0.01, "%"
    if unit == "ops":
        return 1, "/s"
    if unit == "x":
        return 1, "×"
    return 1, ""


def legend_of(fmt, metric):
    return re.sub(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt) or \
        "{" + ",".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def draw(dash, results, t0, t1, job_id, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    bg, panel_bg, fg, grid, dim = "#111217", "#181b1f", "#ccccdc", "#2c3235", "#8e8e9e"
    colors = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#fade2a", "#ff780a", "#96d98d"]
    items = list(dash["panels"])
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in items)
    unit_h = 0.42  # inches per grid row
    header = 1.3
    W, H = 24.0, rows * unit_h + header
    fig = plt.figure(figsize=(W, H), dpi=80, facecolor=bg)
    start = datetime.datetime.fromtimestamp(t0).strftime("%Y-%m-%d %H:%M:%S")
    fig.text(0.008, 1 - 0.35 / H, dash["title"], color=fg, fontsize=20, weight="bold", va="top")
    fig.text(0.008, 1 - 0.85 / H,
             f"datasource: Prometheus (scrape 1s)    job_id: {job_id}    {start} + {t1 - t0:.0f} s    "
             f"rendered by scripts/render_dashboard.py from helm/flps/dashboards/flps-job.json",
             color=dim, fontsize=11, va="top")

    def box(g, pad=0.08):
        x = g["x"] / 24 * W
        y = H - header - (g["y"] + g["h"]) * unit_h
        return [(x + pad) / W, (y + pad) / H, (g["w"] / 24 * W - 2 * pad) / W, (g["h"] * unit_h - 2 * pad) / H]

    for p in items:
        g = p["gridPos"]
        if p["type"] == "row":
            x, y, w, h = box(g, 0.02)
            fig.text(x, y + h / 2, p["title"], color=fg, fontsize=14, weight="bold", va="center")
            continue
        x, y, w, h = box(g)
        title_h = 0.35 / H
        ax = fig.add_axes([x + 0.045 * w, y + 0.30 * h, 0.93 * w, h - title_h - 0.32 * h], facecolor=panel_bg)
        fig.patches.append(matplotlib.patches.Rectangle((x, y), w, h, transform=fig.transFigure,
                                                        facecolor=panel_bg, edgecolor=grid, zorder=-1))
        fig.text(x + 0.006, y + h - 0.08 / H, p["title"], color=fg, fontsize=12, weight="bold", va="top")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        series = []
        for t in p["targets"]:
            for r in results[(p["id"], t["refId"])]:
                pts = [(float(ts), float(v)) for ts, v in r["values"] if v not in ("NaN", "+Inf", "-Inf")]
                if pts:
                    series.append((legend_of(t.get("legendFormat", ""), r["metric"]), pts))
        allv = [v for _, pts in series for _, v in pts]
        f, utext = scaled(unit, allv)
        for i, (name, pts) in enumerate(series):
            ax.plot([datetime.datetime.fromtimestamp(ts) for ts, _ in pts], [v / f for _, v in pts],
                    color=colors[i % len(colors)], linewidth=1.4, label=name)
        ax.set_xlim(datetime.datetime.fromtimestamp(t0), datetime.datetime.fromtimestamp(t1))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=6))
        ax.tick_params(colors=dim, labelsize=9)
        for s in ax.spines.values():
            s.set_visible(False)
        ax.grid(color=grid, linewidth=0.6)
        if utext:
            ax.set_ylabel(utext, color=dim, fontsize=9)
        d = p.get("fieldConfig", {}).get("defaults", {})
        if "min" in d or "max" in d:
            lo = d.get("min", None)
            hi = d.get("max", None)
            ax.set_ylim(lo / f if lo is not None else None, hi / f * 1.02 if hi is not None else None)
        if not series:
            ax.text(0.5, 0.5, "No data", color=dim, fontsize=14, ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
        else:
            n = len(series)
            ax.legend(loc="upper left", bbox_to_anchor=(0, -0.14), ncol=min(n, 4 if n > 4 else n),
                      fontsize=8.5, frameon=False, labelcolor=fg, handlelength=1.2, columnspacing=1.2)
    fig.savefig(out, facecolor=bg, dpi=80)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "dashboard.png"))
    ap.add_argument("--iterations", type=int, default=4000)
    ap.add_argument("--bin", default=os.environ.get("FLPS_BIN_DIR", os.path.join(ROOT, "build", "bin")))
    ap.add_argument("--keep", action="store_true", help="keep the state directory (logs, TSDB)")
    ap.add_argument("--check", action="store_true", help="check the names and the panels' data, draw nothing")
    args = ap.parse_args()
    for tool in ("prometheus", "redis-server"):
        if shutil.which(tool) is None:
            log(f"SKIP: {tool} is needed (scripts/deps.sh)")
            sys.exit(77)
    if not args.check:
        if importlib.util.find_spec("matplotlib") is None:
            sys.exit("render_dashboard: python3-matplotlib is needed (apt-get install python3-matplotlib)")
    dash = json.load(open(DASHBOARD, encoding="utf-8"))
    run = Run(os.path.abspath(args.bin), args.iterations)
    problems = []
    try:
        run.start()
        run.run_job()
        results = {}
        for p in dash["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"].replace("$job_id", run.job_id).replace("$__rate_interval", RATE_INTERVAL)
                res = run.query_range(expr)
                results[(p["id"], t["refId"])] = res
                if not res and p["title"] not in MAY_BE_EMPTY:
                    problems.append(f"panel '{p['title']}' {t['refId']}: no data for {expr}")
        if problems:
            # Say how often each worker was scraped: a rate needs two samples in its window.
            seen = run.query_range(f'count_over_time(flworker_iterations_total{{job_id="{run.job_id}"}}[1h])')
            counts = {r["metric"].get("rank", "?"): r["values"][-1][1] for r in seen}
            log(f"samples of flworker_iterations_total per worker rank: {counts or 'none'}")
        stored = run.stored_names()
        docs = documented_names()
        wanted = set()
        for n, typ in docs:
            wanted |= {n + "_bucket", n + "_sum", n + "_count"} if typ == "histogram" else {n}
        for n in sorted(stored - wanted):
            problems.append(f"scraped but not in docs/metrics.md: {n}")
        for n in sorted(wanted - stored):
            if n in ABSENT_WITHOUT_HARDWARE:
                log(f"not scraped (no GPU or RAPL counter reports energy here): {n}")
                continue
            problems.append(f"in docs/metrics.md but not scraped from any daemon: {n}")
        log(f"{len(stored)} metric names scraped, {len(wanted)} documented (histograms as _bucket/_sum/_count)")
        if not args.check:
            draw(dash, results, run.t0, run.t1, run.job_id, args.out)
            log(f"wrote {args.out}")
    finally:
        run.stop()
        if args.keep:
            log(f"state kept in {run.tmp}")
        else:
            shutil.rmtree(run.tmp, ignore_errors=True)
    for p in problems:
        log(f"problem: {p}")
    n = sum(len(p.get("targets", [])) for p in dash["panels"])
    log(f"{n} queries, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
