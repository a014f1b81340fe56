#!/usr/bin/env bash
# bench/overlap.sh, short: the CNN with overlap on and then off (30
# iterations each, 2 workers, 1 shard, 100 Mbit/s links in network
# namespaces). Checks that it runs both to their summaries, removes its
# topology, prints the comparison as its last line with both times per
# iteration and their ratio, and that both runs ended with the same model
# bit for bit. The ratio is logged, not asserted: on a shared machine the
# compute time of two runs differs by more than what overlap saves (the
# measured comparison is in docs/benchmarks.md).
#
# usage: test_overlap_net.sh BUILD_DIR SOURCE_DIR
# Exit 77 (skipped) when not root or when network namespaces are not
# permitted here.
set -u

build=${1:?usage: test_overlap_net.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: test_overlap_net.sh BUILD_DIR SOURCE_DIR}
build=$(cd "$build" && pwd) || exit 1
src=$(cd "$src" && pwd) || exit 1
export FLPS_BIN_DIR="$build/bin"
# Its own namespace names, apart from a benchmark's and the other test's.
export FLB_PREFIX=flbv
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

"$src/bench/cluster/run.sh" --check
rc=$?
if [ "$rc" = 77 ]; then
    echo "SKIP: bench/overlap.sh needs root and permission to create network namespaces (see above)"
    exit 77
fi
[ "$rc" = 0 ] || exit 1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flps-overlapnet.XXXXXX") || exit 1
cleanup() {
    "$src/bench/cluster/run.sh" --cleanup >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$src/bench/overlap.sh" --iterations 30 --repeat 1 --work "$tmp/work" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" != 0 ]; then
    echo "FAIL: bench/overlap.sh exited $rc:"
    tail -n 20 "$tmp/err"
    exit 1
fi
grep '^overlap: run' "$tmp/err"
if [ -n "$(ip netns list | grep -E '^flbv-(br|h[0-9]+)( |$)')" ]; then
    echo "FAIL: namespaces left after the benchmark: $(ip netns list | tr '\n' ' ')"
    exit 1
fi
"$PY" - "$tmp/out" <<'PYEOF'
import json, math, sys

last = open(sys.argv[1]).read().strip().split("\n")[-1]
r = json.loads(last)
print("ratio (overlap on / off): %.3f, %.4f s against %.4f s per iteration"
      % (r["ratio"], r["s_per_iter_overlap"], r["s_per_iter_no_overlap"]))
bad = []
for k in ("s_per_iter_overlap", "s_per_iter_no_overlap", "ratio",
          "mean_ratio"):
    if not (isinstance(r.get(k), (int, float)) and math.isfinite(r[k])
            and r[k] > 0):
        bad.append("%s is not a positive number: %r" % (k, r.get(k)))
if r.get("model") != "cnn" or r.get("runs_each") != 1:
    bad.append("not the CNN with one run each: %r" % r)
if r.get("same_model") is not True:
    bad.append("overlap on and off ended with different models")
if bad:
    print("FAIL: " + "; ".join(bad))
    sys.exit(1)
print("ok: both runs, their ratio, the same model")
PYEOF
