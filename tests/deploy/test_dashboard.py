#!/usr/bin/env python3
"""Checks of the Grafana dashboard helm/flps/dashboards/flps-job.json.

    tests/deploy/test_dashboard.py [DASHBOARD.json]

- the dashboard's shape: schemaVersion 39, a ${datasource} Prometheus
  variable used by every panel and query, a job_id variable from
  label_values, unique panel ids, panels inside the 24-column grid and not
  overlapping, the panels the job view needs;
- every metric name in every PromQL expression (and in the variables'
  label_values) is one docs/metrics.md lists, with only labels the docs
  give it (its own, or the target labels flsched's http_sd list adds);
- every per-job series of a shard or worker is filtered on job_id="$job_id";
- docs/metrics.md lists exactly the names the daemons register in their C
  sources (ps/, worker/, scheduler/, common/metrics_proc.c), so a name
  the docs keep after the code dropped it, or one the code adds without
  docs, fails here. scripts/render_dashboard.py checks the same against a
  live scrape of a real job.
Prints "ok - ..." / "not ok - ..." per check, then "N passed, M failed";
exits 1 on any failure. Standard library only.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DASHBOARD = os.path.join(ROOT, "helm", "flps", "dashboards", "flps-job.json")
DOCS = os.path.join(ROOT, "docs", "metrics.md")

# Labels flsched's /v1/metrics/targets puts on every series of a target
# (docs/metrics.md), and the two Prometheus adds to every scrape.
TARGET_LABELS = {"job_id", "job_name", "role", "rank", "node"}
SCRAPE_LABELS = {"job", "instance"}
# Daemons whose series come through the http_sd list (flsched's do not).
HTTP_SD_PREFIXES = ("flps_", "flworker_", "flagent_", "process_")

PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes",
    "clamp", "clamp_max", "clamp_min", "count_over_time", "delta", "deriv",
    "exp", "floor", "histogram_quantile", "idelta", "increase", "irate",
    "label_join", "label_replace", "last_over_time", "ln", "log2", "log10",
    "max_over_time", "min_over_time", "predict_linear", "quantile_over_time",
    "rate", "resets", "round", "scalar", "sort", "sort_desc", "sqrt",
    "stddev_over_time", "sum_over_time", "time", "timestamp", "vector",
    # aggregation operators, written like calls
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk",
    "bottomk", "quantile", "count_values", "group",
    # Grafana's variable query
    "label_values",
}
AGGREGATIONS = {
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk",
    "bottomk", "quantile", "count_values", "group",
}
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
IDENT = r"[A-Za-z_:][A-Za-z0-9_:]*"

passed = 0
failed = 0


def check(name, cond, why=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok - {name}")
    else:
        failed += 1
        print(f"not ok - {name}" + (f": {why}" if why else ""))
    return cond


# ---- PromQL ------------------------------------------------------------------
def selectors(expr):
    """[(metric name, {label: value})] of every vector selector in expr.

    Grafana variables ($job_id, $__rate_interval) are left in place: they
    sit inside label values and ranges, which the walk skips. A function
    name not in PROMQL_FUNCTIONS raises ValueError, so a typo in a function
    is not mistaken for a metric."""
    out = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c in "\"'`":  # a string literal outside a selector
            j = expr.index(c, i + 1)
            i = j + 1
            continue
        if c == "[":  # a range or subquery: durations and variables
            i = expr.index("]", i) + 1
            continue
        if c == "$":  # a Grafana variable used as a number or duration
            m = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?").match(expr, i)
            i = m.end()
            continue
        if c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            m = re.compile(r"[0-9.]+(e[+-]?[0-9]+)?([smhdwy]|ms)?").match(expr, i)
            i = m.end()
            continue
        if c == "{":  # a selector without a name: {__name__=...}
            j, labels = labels_at(expr, i)
            out.append((labels.pop("__name__", None), labels))
            i = j
            continue
        m = re.compile(IDENT).match(expr, i)
        if not m:
            i += 1
            continue
        word = m.group(0)
        j = m.end()
        k = j
        while k < n and expr[k].isspace():
            k += 1
        low = word.lower()
        if low in ("by", "without", "on", "ignoring", "group_left", "group_right"):
            if k < n and expr[k] == "(":  # a list of label names
                i = expr.index(")", k) + 1
            else:
                i = j
            continue
        if low == "offset":
            m2 = re.compile(r"\s*-?[0-9a-z$_{}]+").match(expr, j)
            i = m2.end()
            continue
        if low in PROMQL_KEYWORDS:
            i = j
            continue
        if word in AGGREGATIONS and re.compile(r"(by|without)\b").match(expr, k):
            i = j  # sum by (le) (...): the by-list comes next
            continue
        if k < n and expr[k] == "(":
            if word not in PROMQL_FUNCTIONS:
                raise ValueError(f"unknown function {word}() in {expr!r}")
            i = j
            continue
        labels = {}
        if k < n and expr[k] == "{":
            k, labels = labels_at(expr, k)
            j = k
        out.append((word, labels))
        i = j
    return out


def labels_at(expr, i):
    """(index after the closing brace, {label: value}) of the matcher list
    that opens at expr[i] == '{'."""
    labels = {}
    i += 1
    pat = re.compile(r"\s*(" + IDENT + r")\s*(=~|!~|!=|=)\s*\"((?:[^\"\\]|\\.)*)\"\s*,?")
    while True:
        while expr[i].isspace():
            i += 1
        if expr[i] == "}":
            return i + 1, labels
        m = pat.match(expr, i)
        if not m:
            raise ValueError(f"bad label matcher at {expr[i:]!r}")
        labels[m.group(1)] = m.group(3)
        i = m.end()


def base_name(name, histograms):
    for s in HISTOGRAM_SUFFIXES:
        if name.endswith(s) and name[: -len(s)] in histograms:
            return name[: -len(s)]
    return name


# ---- docs/metrics.md -----------------------------------------------------------
def docs_metrics(path):
    """{name: (type, set of labels)} from the tables of docs/metrics.md."""
    out = {}
    for line in open(path, encoding="utf-8"):
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[1] not in ("counter", "gauge", "histogram"):
            continue
        labels = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cells[2])))
        for name in re.findall(r"`(" + IDENT + r")`", cells[0]):
            out[name] = (cells[1], labels)
    return out


# ---- the C sources ------------------------------------------------------------
def source_metrics(root):
    """Every metric name the daemons register: the first string literal of
    each metrics_counter/gauge/histogram call and of each row of a
    metrics_def table ({METRICS_COUNTER, "name", ...}, registered by
    metrics_register_table), and PREFIX_build_info for each
    metrics_proc_register(reg, "PREFIX") or
    metrics_proc_register_daemon(reg, "PREFIX", ...)."""
    names = set()
    call = re.compile(r"(?:\b(?:metrics_counter|metrics_gauge|metrics_histogram)\s*\(([^;]*?)"
                      r"|\{\s*METRICS_(?:COUNTER|GAUGE|HISTOGRAM)\s*,\s*)\"(" + IDENT + r")\"", re.S)
    proc = re.compile(r"metrics_proc_register(?:_daemon)?\s*\([^,]*,\s*\"([a-z]+)\"\s*[,)]")
    files = []
    for d in ("ps", "worker", "scheduler"):
        for f in sorted(os.listdir(os.path.join(root, d))):
            if f.endswith(".c"):
                files.append(os.path.join(root, d, f))
    files.append(os.path.join(root, "common", "metrics_proc.c"))
    for f in files:
        text = open(f, encoding="utf-8").read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        # Macro definitions (with their continuation lines) name no metric.
        text = re.sub(r"^[ \t]*#[ \t]*define(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)
        for m in call.finditer(text):
            names.add(m.group(2))
        for m in proc.finditer(text):
            names.add(m.group(1) + "_build_info")
    return names


# ---- self-test of the PromQL walk (the checks below rely on it) ----------------
def self_test():
    sel = selectors('sum by (le) (rate(flps_x_bucket{job_id="$job_id",a=~"b|c"}[$__rate_interval])) / scalar(max(y)) > 0')
    check("the PromQL walk finds selectors, their labels, and skips by-lists, ranges and numbers",
          sel == [("flps_x_bucket", {"job_id": "$job_id", "a": "b|c"}), ("y", {})], repr(sel))
    sel = selectors('a offset 5m + on(rank) group_left(node) b{c!="d"} * 1e3')
    check("the PromQL walk skips offset, on(), group_left()", sel == [("a", {}), ("b", {"c": "d"})], repr(sel))
    try:
        selectors("rtae(flworker_loss[1m])")
        check("a misspelt function is refused", False, "rtae() was taken")
    except ValueError:
        check("a misspelt function is refused", True)
    docs = {"flworker_loss": ("gauge", set())}
    bad = [n for n, _ in selectors('flworker_los{job_id="$job_id"}') if n not in docs]
    check("a metric missing from the docs is found", bad == ["flworker_los"], repr(bad))


# ---- the dashboard ----------------------------------------------------------------
def all_panels(d):
    for p in d.get("panels", []):
        yield p
        for q in p.get("panels", []):
            yield q


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DASHBOARD
    self_test()
    docs = docs_metrics(DOCS)
    check(f"docs/metrics.md lists metrics ({len(docs)})", len(docs) > 50)
    histograms = {n for n, (t, _) in docs.items() if t == "histogram"}

    src = source_metrics(ROOT)
    check(f"the C sources register metrics ({len(src)})", len(src) > 50)
    check("every metric the daemons register is in docs/metrics.md", src <= set(docs),
          ", ".join(sorted(src - set(docs))))
    check("every metric in docs/metrics.md is registered by a daemon", set(docs) <= src,
          ", ".join(sorted(set(docs) - src)))

    try:
        d = json.load(open(path, encoding="utf-8"))
    except (OSError, ValueError) as e:
        check(f"{path} is JSON", False, str(e))
        return
    check("schemaVersion is 39", d.get("schemaVersion") == 39, repr(d.get("schemaVersion")))
    check("the dashboard has a uid and a title", bool(d.get("uid")) and bool(d.get("title")))

    tvars = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
    ds = tvars.get("datasource", {})
    check("a datasource variable of type Prometheus", ds.get("type") == "datasource" and ds.get("query") == "prometheus", repr(ds))
    job = tvars.get("job_id", {})
    q = job.get("query")
    qtext = q.get("query") if isinstance(q, dict) else q
    m = re.fullmatch(r"label_values\((.+),\s*job_id\)", qtext or "")
    check("a job_id variable from label_values(..., job_id)", job.get("type") == "query" and m is not None, repr(qtext))
    check("the job_id variable queries ${datasource}", job.get("datasource", {}).get("uid") == "${datasource}")
    if m:
        names = [base_name(n, histograms) for n, _ in selectors(m.group(1))]
        check("the job_id variable's metric is in docs/metrics.md", names and all(n in docs for n in names), repr(names))

    panels = [p for p in all_panels(d) if p.get("type") != "row"]
    ids = [p.get("id") for p in all_panels(d)]
    check("panel ids are unique", len(ids) == len(set(ids)) and None not in ids, repr(ids))
    cells = {}
    overlap = []
    for p in all_panels(d):
        g = p.get("gridPos", {})
        if not (0 <= g.get("x", -1) and g.get("x", 0) + g.get("w", 0) <= 24 and g.get("w", 0) > 0 and g.get("h", 0) > 0):
            overlap.append(f"{p.get('title')}: outside the grid {g}")
            continue
        for x in range(g["x"], g["x"] + g["w"]):
            for yy in range(g["y"], g["y"] + g["h"]):
                if (x, yy) in cells:
                    overlap.append(f"{p.get('title')} over {cells[(x, yy)]}")
                cells[(x, yy)] = p.get("title")
    check("panels stay in the 24-column grid and do not overlap", not overlap, "; ".join(sorted(set(overlap))))

    used = set()
    for p in panels:
        t = p.get("title", "?")
        check(f"panel '{t}' uses ${{datasource}}", p.get("datasource", {}).get("uid") == "${datasource}"
              and all(x.get("datasource", {}).get("uid") == "${datasource}" for x in p.get("targets", [])))
        check(f"panel '{t}' has a description and a query", bool(p.get("description")) and bool(p.get("targets")))
        refs = [x.get("refId") for x in p.get("targets", [])]
        check(f"panel '{t}': refIds are unique", len(refs) == len(set(refs)) and None not in refs)
        for x in p.get("targets", []):
            expr = x.get("expr", "")
            try:
                sel = selectors(expr)
            except ValueError as e:
                check(f"panel '{t}' {x.get('refId')}: the expression parses", False, str(e))
                continue
            unknown, badlabels, unscoped = [], [], []
            for name, labels in sel:
                b = base_name(name or "", histograms)
                used.add(b)
                if b not in docs:
                    unknown.append(name)
                    continue
                allowed = docs[b][1] | SCRAPE_LABELS
                if b.startswith(HTTP_SD_PREFIXES):
                    allowed |= TARGET_LABELS
                if b in histograms and name.endswith("_bucket"):
                    allowed |= {"le"}
                badlabels += [f"{name}{{{k}}}" for k in labels if k not in allowed]
                if b.startswith(("flps_", "flworker_")) and labels.get("job_id") != "$job_id":
                    unscoped.append(name)
            check(f"panel '{t}' {x.get('refId')}: every metric is in docs/metrics.md", not unknown and sel, ", ".join(unknown) or "no metric")
            check(f"panel '{t}' {x.get('refId')}: only labels the metric has", not badlabels, ", ".join(badlabels))
            check(f"panel '{t}' {x.get('refId')}: shard and worker series filtered on job_id=\"$job_id\"", not unscoped, ", ".join(unscoped))

    need = {
        "iterations/s": "flworker_iterations_total",
        "bytes sent": "flworker_sent_bytes_total",
        "bytes received": "flworker_received_bytes_total",
        "compression ratio": "flworker_dense_bytes_total",
        "per-layer compression": "flworker_layer_compression_ratio",
        "per-layer density": "flworker_layer_density",
        "iteration lag": "flworker_iteration",
        "loss": "flworker_loss",
        "accuracy": "flworker_test_accuracy",
        "shard aggregation time": "flps_iteration_close_seconds",
        "rejected messages": "flps_rejected_total",
        "queue length": "flsched_queue_length",
        "jobs by state": "flsched_jobs",
    }
    for what, name in need.items():
        check(f"a panel shows {what} ({name})", name in used)

    print(f"{passed} passed, {failed} failed")


if __name__ == "__main__":
    main()
    sys.exit(1 if failed else 0)
