#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz, clang with ASan + UBSan) and run
# each on a copy of its seed corpus; any crash, leak, undefined behaviour or
# broken invariant fails, with the input that did it kept under
# build-fuzz/artifacts/. Seconds per target: FLPS_FUZZ_SECONDS if set;
# else FLPS_FUZZ_TOTAL_SECONDS shared evenly by the targets run (at least
# 10 s each; CI, scripts/test.sh, gives 150: 2.5 minutes in all however
# many targets there are); else 60.
#   scripts/fuzz.sh            build and run every target
#   scripts/fuzz.sh msg shard  only these
#   scripts/fuzz.sh --seeds    regenerate the corpora make_seeds writes
#                              (all but jobspec, jobspec_flags, api_json and http)
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(msg shard jobspec jobspec_flags api_json persist plan creds event http)
# The RDMA decoders are built where rdma/ is (libibverbs and librdmacm).
if pkg-config --exists libibverbs librdmacm; then
  TARGETS+=(rdma_frame rdma_exchange)
fi
BUILD=build-fuzz

CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DFLPS_FUZZ=ON \
  -DFLPS_TESTS=OFF >/dev/null
if [ "${1:-}" = "--seeds" ]; then
  cmake --build "$BUILD" -j"$(nproc)" --target make_seeds
  "$BUILD/fuzz/make_seeds" tests/fuzz/corpus
  echo "fuzz: seeds written to tests/fuzz/corpus (job files: copy examples/*.yaml by hand)"
  exit 0
fi
if [ $# -gt 0 ]; then TARGETS=("$@"); fi
if [ -n "${FLPS_FUZZ_SECONDS:-}" ]; then
  SECONDS_EACH="$FLPS_FUZZ_SECONDS"
elif [ -n "${FLPS_FUZZ_TOTAL_SECONDS:-}" ]; then
  SECONDS_EACH=$((FLPS_FUZZ_TOTAL_SECONDS / ${#TARGETS[@]}))
  if [ "$SECONDS_EACH" -lt 10 ]; then SECONDS_EACH=10; fi
else
  SECONDS_EACH=60
fi
cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]/#/fuzz_}"

work="$(mktemp -d "${TMPDIR:-/tmp}/flps-fuzz-XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$BUILD/artifacts"
run_one() {
  local t="$1" corpus="$work/$1"
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/
  if "$BUILD/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD/artifacts/$t-" "$corpus" \
      >"$work/$t.log" 2>&1; then
    echo "fuzz: $t: $(grep -m1 -o 'Done [0-9]* runs in [0-9]* second(s)' "$work/$t.log"), no crash"
  else
    echo "fuzz: $t FAILED; the last lines of its log:"
    tail -40 "$work/$t.log"
    echo "fuzz: reproduce with $BUILD/fuzz/fuzz_$t $BUILD/artifacts/$t-*"
    return 1
  fi
}
# Two at a time (the CI machine has 2 cores).
fail=0
pids=()
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then
    wait "${pids[0]}" || fail=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
if [ $fail -ne 0 ]; then
  echo "fuzz: a target failed"
  exit 1
fi
echo "fuzz: ${#TARGETS[@]} targets ran ${SECONDS_EACH} s each without a crash"
