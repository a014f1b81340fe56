#!/usr/bin/env bash
# bench/cluster/run.sh, short: 2 host namespaces, 1 shard, 2 workers, 50
# iterations on 100 Mbit/s links. Checks that the script builds and removes
# its topology (also when it refuses to start, when the job fails and when
# it is interrupted), that the links really are rate-limited (a bulk
# transfer's bytes over time within 20% of the set rate, on the wire and
# in payload) and that the job's traffic went through them, and that the
# job runs to flrun's summary line and is recorded; then (with PyTorch) the
# same job and its DDP peer on 3 hosts, both recorded, the peer's gradients
# on the links and its accuracy that of flps dense; and decentralized saps
# jobs (adaptive and random peers) on a rate per link (--link-rates), the
# workers' probe finding the fast links and adaptive peers keeping to them.
#
# usage: test_cluster_net.sh BUILD_DIR SOURCE_DIR
# Exit 77 (skipped) when not root or when network namespaces are not
# permitted here.
set -u

build=${1:?usage: test_cluster_net.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: test_cluster_net.sh BUILD_DIR SOURCE_DIR}
build=$(cd "$build" && pwd) || exit 1
src=$(cd "$src" && pwd) || exit 1
run="$src/bench/cluster/run.sh"
export FLPS_BIN_DIR="$build/bin"
# Its own namespace names (flbt-br, flbt-h0, ...), so a benchmark running
# on the same machine is neither refused by it nor removed.
export FLB_PREFIX=flbt
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

"$run" --check
rc=$?
if [ "$rc" = 77 ]; then
    echo "SKIP: bench/cluster needs root and permission to create network namespaces (see above)"
    exit 77
fi
[ "$rc" = 0 ] || exit 1
if [ -n "$(ip netns list | grep -E '^flbt-(br|h[0-9]+)( |$)')" ]; then
    echo "FAIL: flbt-* namespaces exist before the test (another bench/cluster run?): $(ip netns list | tr '\n' ' ')"
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flps-clusternet.XXXXXX") || exit 1
bg=
passed=0
failed=0
cleanup() {
    [ -n "$bg" ] && kill -TERM "$bg" 2>/dev/null && wait "$bg" 2>/dev/null
    "$run" --cleanup >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pass() {
    passed=$((passed + 1))
    echo "ok: $1"
}
fail() {
    failed=$((failed + 1))
    echo "FAIL: $1"
}

# The root namespace as it was: its links and qdiscs (names only: counters
# and states of other interfaces may change meanwhile).
root_state() {
    ip -o link show | awk -F': ' '{print $2}' | sort
    tc qdisc show | awk '{print $1, $2, $5}' | sort
}
root_state >"$tmp/root-before"

# Nothing of ours is left: no namespace, no link or qdisc in the root
# namespace that was not there before, no process from this work dir.
check_clean() { # what
    local left procs
    left=$(ip netns list | awk '{print $1}' | grep -E '^flbt-(br|h[0-9]+)$' | tr '\n' ' ')
    if [ -n "$left" ]; then
        fail "$1: namespaces left: $left"
        return
    fi
    root_state >"$tmp/root-after"
    if ! diff -q "$tmp/root-before" "$tmp/root-after" >/dev/null; then
        fail "$1: the root namespace's links or qdiscs changed: $(diff "$tmp/root-before" "$tmp/root-after" | tr '\n' ' ')"
        return
    fi
    procs=
    for f in /proc/[0-9]*/cmdline; do
        [ "$f" = "/proc/$$/cmdline" ] && continue
        [[ "$(tr '\0' ' ' 2>/dev/null <"$f")" == *"$tmp/"* ]] && procs+="${f#/proc/} "
    done
    if [ -n "$procs" ]; then
        fail "$1: processes left: $procs"
        return
    fi
    pass "$1: topology and processes removed"
}

common=(--models mlp --codecs dense --rates 100mbit --workers 2 --shards 1
    --hosts 2 --eval-every 25 --probe-seconds 2 --delay 0)

# run.sh with the common options and ARGS, which must succeed (its output
# in OUT.out and OUT.err) and leave nothing behind.
run_ok() { # what clean-label out args...
    local what="$1" label="$2" out="$3" rc
    shift 3
    "$run" "${common[@]}" "$@" >"$out.out" 2>"$out.err"
    rc=$?
    if [ "$rc" = 0 ]; then
        pass "$what (exit 0)"
    else
        fail "$what: exit $rc: $(tail -n 15 "$out.err")"
    fi
    check_clean "$label"
}

# 1. A leftover namespace (as from a crashed run): refused, then --cleanup.
ip netns add flbt-h0
out=$("$run" "${common[@]}" --iterations 50 --work "$tmp/refused" --no-record 2>&1)
rc=$?
if [ "$rc" != 0 ] && grep -q -- "--cleanup" <<<"$out" && ip netns list | grep -q '^flbt-h0'; then
    pass "refuses to start over a crashed run's namespaces and names --cleanup"
else
    fail "refusal: exit $rc, output: $out"
fi
"$run" --cleanup >/dev/null 2>&1
check_clean "--cleanup"

# 2. The short job through the topology.
work="$tmp/ok"
run_ok "run.sh runs the short job" "after the job" "$tmp/ok" --iterations 50 \
    --work "$work" --out "$tmp/results" --label ci

"$PY" - "$work" "$tmp/results" <<'EOF'
import csv, glob, json, os, sys
work, results = sys.argv[1:]
bad = []
def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        bad.append(what)

# Rate limit: a bulk transfer h1 -> h0 for 2 s, on the wire (eth0's
# tx_bytes while the sender kept the link busy) and in payload (what the
# receiver got after its warm-up).
c = json.load(open(os.path.join(work, "calib-100mbit.json")))
for key in ("bandwidth_wire_bps", "bandwidth_bps"):
    v = c.get(key, 0)
    check(0.8e8 <= v <= 1.2e8, "%s %.1f Mbit/s is within 20%% of the set 100 Mbit/s" % (key, v / 1e6))
check(c.get("delay_applied") in (True, False), "the calibration says whether a delay was applied")
check(c.get("latency_s", 0) > 0, "a per-message latency was measured")

# The job: flrun's summary line, and its traffic on the shaped links.
try:
    summary = json.loads(open(os.path.join(work, "runs/1/flrun.out")).read().strip().splitlines()[-1])
except (OSError, ValueError, IndexError) as e:
    summary = {}
check(summary.get("iterations") == 50 and "test_accuracy" in summary,
      "the job ran its 50 iterations to flrun's summary line (%s)" % summary)
meta = json.load(open(os.path.join(work, "runs/1/meta.json")))
flps_bytes = summary.get("bytes_sent", 0) + summary.get("bytes_received", 0)
check(meta["wire_bytes"] >= 0.95 * flps_bytes > 0,
      "the job's %d bytes crossed the bridge (%d wire bytes)" % (flps_bytes, meta["wire_bytes"]))
# Both workers share h1's link: what they sent cannot have gone faster
# than the limit (20% slack for the burst and the clocks).
secs = summary.get("wall_seconds", 0)
sent_bps = 8.0 * summary.get("bytes_sent", 0) / secs if secs else 1e12
check(sent_bps <= 1.2e8, "the workers' push rate %.1f Mbit/s stays under the limit" % (sent_bps / 1e6))

# The recorded results.
csvs = [f for f in glob.glob(os.path.join(results, "*-ci.csv"))]
rows = list(csv.DictReader(open(csvs[0]))) if len(csvs) == 1 else []
check(len(rows) == 1, "one CSV row for the one run")
if rows:
    r = rows[0]
    check(r["codec"] == "dense" and r["workers"] == "2" and r["shards"] == "1"
          and r["rate"] == "100mbit" and r["commit"] != "",
          "the row names its codec, workers, shards, rate and commit")
    check(float(r["s_per_iter_median"]) > 0 and float(r["bytes_per_iter_per_worker"]) > 0,
          "the row has seconds and bytes per iteration")
evals = list(csv.DictReader(open(glob.glob(os.path.join(results, "*-ci-evals.csv"))[0])))
check(len(evals) == 2 and all(float(e["elapsed_s"]) > 0 for e in evals),
      "two evaluations (every 25 of 50 iterations), each with its elapsed_s")
doc = json.load(open(glob.glob(os.path.join(results, "*-ci.json"))[0]))
check(doc["machine"]["nproc"] >= 1 and doc["commit"] and len(doc["runs"]) == 1,
      "the JSON holds the machine, the commit and the run")
sys.exit(1 if bad else 0)
EOF
if [ $? = 0 ]; then pass "recorded figures"; else fail "recorded figures"; fi

# 3. A job that fails (its data directory does not exist): exit non-zero,
# topology removed.
"$run" "${common[@]}" --iterations 50 --work "$tmp/fail" --no-record \
    --data-dir "$tmp/no-such-dir" >"$tmp/fail.out" 2>&1
rc=$?
if [ "$rc" != 0 ] && grep -q "flrun failed" "$tmp/fail.out"; then
    pass "a failing job makes run.sh fail (exit $rc) and say so"
else
    fail "failing job: exit $rc: $(tail -n 5 "$tmp/fail.out")"
fi
check_clean "after the failed job"

# 4. Interrupted while the job trains (SIGINT as Ctrl-C sends it; job
# control so that the background script does not ignore it).
set -m
"$run" "${common[@]}" --iterations 100000 --work "$tmp/int" --no-record >"$tmp/int.out" 2>&1 &
bg=$!
set +m
for _ in $(seq 600); do
    grep -q '"event":"start"' "$tmp/int/runs/1/events-1.jsonl" 2>/dev/null && break
    kill -0 "$bg" 2>/dev/null || break
    sleep 0.1
done
if grep -q '"event":"start"' "$tmp/int/runs/1/events-1.jsonl" 2>/dev/null; then
    sleep 1 # into the training loop
    kill -INT "$bg"
    wait "$bg"
    rc=$?
    bg=
    if [ "$rc" = 130 ]; then
        pass "SIGINT stops run.sh (exit 130)"
    else
        fail "SIGINT: exit $rc: $(tail -n 5 "$tmp/int.out")"
    fi
    check_clean "after SIGINT"
else
    fail "the long job never trained: $(tail -n 5 "$tmp/int.out")"
fi

# 5. The DDP peer beside a flps job (when PyTorch with gloo is here): a
# host per worker (3 hosts), dense flps then DDP on the same MLP, data
# order and initial weights; both recorded the same way. Then the compute
# peer: the workers training alone, nothing on the wire.
if /usr/bin/python3 -c 'import torch.distributed as d, sys; sys.exit(not d.is_gloo_available())' 2>/dev/null; then
    run_ok "run.sh runs the flps job and its DDP peer" "after the peer" "$tmp/peer" \
        --hosts 3 --peers ddp,compute --iterations 50 --work "$tmp/peer" \
        --out "$tmp/peer-results" --label peer
    "$PY" - "$tmp/peer-results" <<'EOF'
import glob, json, os, sys
doc = json.load(open(glob.glob(os.path.join(sys.argv[1], "*-peer.json"))[0]))
bad = []
def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        bad.append(what)
runs = {r["codec"]: r for r in doc["runs"]}
check(sorted(runs) == ["compute", "ddp", "dense"],
      "one flps row, one DDP row and one compute row (%s)" % sorted(runs))
d, p = runs.get("dense", {}), runs.get("ddp", {})
check(p.get("shards") == 0 and p.get("system") == "ddp" and p.get("iterations") == 50,
      "the DDP row has no shards and ran its 50 iterations")
check(len(p.get("evals", [])) == 2 and all(e["elapsed_s"] > 0 for e in p.get("evals", [])),
      "the DDP run's two evaluations have their elapsed_s")
# A ring allreduce of 2 workers sends and receives the model (235,146
# floats) per iteration: it crossed the workers' links.
model = 4 * 235146
w = p.get("wire_bytes_per_iter_per_worker") or 0
check(w >= 0.95 * 2 * model, "DDP moved %d wire bytes per worker per iteration "
      "(at least 95%% of 2 x %d)" % (w, model))
check((d.get("wire_bytes_per_iter_per_worker") or 0) >= 0.95 * (d.get("bytes_per_iter_per_worker") or 1e12),
      "dense flps's payload crossed its workers' links")
c = runs.get("compute", {})
check(c.get("system") == "compute" and c.get("shards") == 0
      and (c.get("s_per_iter_median") or 0) > 0,
      "the compute row has no shards and a time per iteration")
check((c.get("wire_bytes_per_iter_per_worker") or 0) < 0.01 * model,
      "the compute run sent nothing worth counting (%s wire bytes per worker "
      "per iteration)" % c.get("wire_bytes_per_iter_per_worker"))
check(len(c.get("evals", [])) == 2, "the compute run's rank 0 evaluated twice")
# The same model, data order and arithmetic up to summation order.
a, b = d.get("final_test_accuracy"), p.get("final_test_accuracy")
check(a is not None and b is not None and abs(a - b) <= 0.002,
      "DDP ends at flps dense's test accuracy (%s against %s)" % (b, a))
sys.exit(1 if bad else 0)
EOF
    if [ $? = 0 ]; then pass "the peer's recorded figures"; else fail "the peer's recorded figures"; fi
else
    echo "skip: no PyTorch with gloo for /usr/bin/python3: the DDP peer is not tested"
fi

# 6. Decentralized jobs (mode saps, no shard) on a rate per link: 4
# workers on h1..h4, the links h1-h2 and h3-h4 at 100 Mbit/s, every other
# at 5 Mbit/s. The workers' own probe finds the 2 fast links; adaptive
# peers keep to them but for the rounds that keep the gossip graph
# connected, random peers take the slow ones two rounds in three.
links="$tmp/links.txt"
"$PY" - "$links" <<'EOF'
import sys
fast = {(1, 2), (3, 4)}
with open(sys.argv[1], "w") as f:
    for i in range(5):
        f.write(" ".join("-" if i == j else
                         "100mbit" if (min(i, j), max(i, j)) in fast else "5mbit"
                         for j in range(5)) + "\n")
EOF
run_ok "run.sh runs saps jobs on per-link rates" "after the saps jobs" "$tmp/saps" \
    --hosts 5 --workers 4 --codecs saps:0.01,saps-random:0.01 --link-rates "$links" \
    --iterations 40 --eval-every 20 --work "$tmp/saps" --out "$tmp/saps-results" --label saps
"$PY" - "$tmp/saps" "$tmp/saps-results" <<'EOF'
import glob, json, os, sys
work, results = sys.argv[1:]
doc = json.load(open(glob.glob(os.path.join(results, "*-saps.json"))[0]))
bad = []
def check(ok, what):
    """A line per check; the failed ones kept for the exit status."""
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    bad.extend([] if ok else [what])
runs = {r["codec"]: r for r in doc["runs"]}
check(sorted(runs) == ["saps-random:0.01", "saps:0.01"], "two saps rows (%s)" % sorted(runs))
a, r = runs.get("saps:0.01", {}), runs.get("saps-random:0.01", {})
for name, row in (("adaptive", a), ("random", r)):
    s = row.get("saps", {})
    check(row.get("shards") == 0 and row.get("link_rates") is not None
          and s.get("exchanges") == 4 * 40,
          "%s: no shard, the link rates recorded, 4 x 40 exchanges (%s)" % (name, s))
    # 5 Mbit/s is 625 KB/s, 100 Mbit/s 12.5 MB/s: the threshold between.
    thr = s.get("bandwidth_threshold", 0)
    check(625e3 < thr < 12.5e6, "%s: the measured threshold %.3g bytes/s splits 5 from 100 Mbit/s" % (name, thr))
for n in (1, 2):
    summary = json.loads(open(os.path.join(work, "runs/%d/flrun.out" % n)).read().strip().splitlines()[-1])
    meta = json.load(open(os.path.join(work, "runs/%d/meta.json" % n)))
    check(meta["wire_bytes"] >= 0.95 * summary["bytes_sent"] > 0,
          "job %d: the workers' %d bytes crossed the bridge (%d)" % (n, summary["bytes_sent"], meta["wire_bytes"]))
sa = a.get("saps", {}).get("slow_exchange_share", 1)
sr = r.get("saps", {}).get("slow_exchange_share", 0)
check(sa <= 0.25 and sr >= 0.4,
      "adaptive exchanged over slow links %.2f of the time, random %.2f" % (sa, sr))
sys.exit(1 if bad else 0)
EOF
if [ $? = 0 ]; then pass "saps on per-link rates"; else fail "saps on per-link rates"; fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
