#!/usr/bin/env bash
# scripts/gpu-check.sh on a machine without a GPU, using the build that is
# there (so nothing is built): it must stop at its first GPU step with one
# line saying why, and exit 77. Then with the NVML stub standing in for a
# GPU and a torch without CUDA: it must get past that step, write its JSON
# report with every CUDA step marked skipped and why, and exit 1.
#
# usage: test_gpu_check.sh BUILD_DIR SOURCE_DIR
# Exit 77 (skipped) where this machine has NVML (a real GPU node).
set -u

build=${1:?usage: test_gpu_check.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: test_gpu_check.sh BUILD_DIR SOURCE_DIR}
out=$(mktemp -d "${TMPDIR:-/tmp}/flps-gpu-check-XXXXXX")
trap 'rm -rf "$out"' EXIT

. "$(dirname "$0")/checks.sh"

unset FLPS_NVML_LIBRARY FLPS_NVML_STUB_STATE
if "$build/bin/bench_energy" --list 2>/dev/null | grep -q '"kind":"gpu"'; then
    echo "SKIP: this machine has a GPU: run scripts/gpu-check.sh itself"
    exit 77
fi

text=$(bash "$src/scripts/gpu-check.sh" --build-dir "$build" "$out/a" 2>&1)
rc=$?
echo "$text"
check "without a GPU it exits 77" test "$rc" = 77
check "with one line" test "$(printf '%s\n' "$text" | wc -l)" = 1
check "that says there is no GPU and why" \
    grep -q '^gpu-check: no GPU here (no NVML library (libnvidia-ml.so.1 not found).*); nothing GPU-related was run$' <<<"$text"
check "and builds nothing" test ! -e "$src/build-gpucheck"

# The stub's GPU, and a python3 whose torch has no CUDA (or no torch).
cat >"$out/state" <<'EOF2'
init ok
devices 1
d0.clocks 1980,1830,1680
d0.mem 3201
EOF2
export FLPS_NVML_LIBRARY="$build/tests/libflps_nvml_stub.so"
export FLPS_NVML_STUB_STATE="$out/state"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
text=$(PYTHON=$PY bash "$src/scripts/gpu-check.sh" --build-dir "$build" "$out/b" 2>&1)
rc=$?
echo "$text"
check "past the GPU step, CUDA steps that cannot run fail the check" test "$rc" = 1
check "the report is written" test -s "$out/b/gpu-check.json"
check "naming the GPU NVML listed and each skipped step's reason" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
s = r["steps"]
assert s["devices"]["devices"][0]["model"] == "Stub GPU 0", s["devices"]
for k in ("cuda-dense", "cuda-gtopk", "topk", "energy-default"):
    assert s[k]["status"] == "skipped", (k, s[k])
    assert "CUDA" in s[k]["message"] or "torch" in s[k]["message"], s[k]
' "$out/b/gpu-check.json"
check "the stub's clocks were never set" test -z "$(grep -E "^d0.(locked|app) [1-9]" "$out/state")"

checks_done
