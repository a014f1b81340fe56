#!/usr/bin/env bash
# bench/bench_energy.c against the NVML stub (tests/fakes/nvml_stub.c):
# --list names the stub's GPU and its clocks; a run measures energy between
# its program's marks at the clock asked for and restores it; a run killed
# mid-way (SIGKILL: nothing of it runs after) leaves the clock set and its
# record, and --restore, as a supervisor would, puts the clock back; without
# NVML and RAPL --list says why in one line and exits 77.
#
# usage: test_bench_energy.sh BUILD_DIR
set -u

build=${1:?usage: test_bench_energy.sh BUILD_DIR}
tool="$build/bin/bench_energy"
stub="$build/tests/libflps_nvml_stub.so"
dir=$(mktemp -d "${TMPDIR:-/tmp}/flps-bench-energy-XXXXXX")
trap 'rm -rf "$dir"' EXIT

. "$(dirname "$0")/checks.sh"

key() { sed -n "s/^$1 //p" "$dir/state"; }

cat >"$dir/state" <<'EOF'
init ok
devices 1
d0.clocks 1980,1830,1680,1530
d0.mem 3201
d0.realtime 1
EOF
export FLPS_NVML_LIBRARY="$stub" FLPS_NVML_STUB_STATE="$dir/state"
export FLPS_SYSFS_ROOT="$dir/sys"

list=$("$tool" --list)
check "--list names the GPU, its method and its clocks" \
    grep -q '"name":"gpu0".*"method":"counter".*"gpu0_clocks_mhz":\[1980,1830,1680,1530\]' <<<"$list"

out=$("$tool" --clock 1700 --record "$dir/rec" --json "$dir/run.json" -- \
    sh -c 'echo "@energy start"; sleep 0.5; sed -n "s/^d0.locked //p" "$FLPS_NVML_STUB_STATE"; echo "@energy stop 50"')
check "the program ran at the nearest supported clock" grep -qx 1680 <<<"$out"
check "its output passed through" grep -qx '@energy stop 50' <<<"$out"
check "the report has the clock set and joules per iteration" \
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["clock_set_mhz"] == 1680 and r["iterations"] == 50, r
# about 283 W (100 + 300 * (1680/1980)^3), whatever the load made of 0.5 s
watts = r["gpu_joules_per_iteration"] / r["seconds_per_iteration"]
assert 240 < watts < 330, (watts, r)
assert r["devices"][0]["method"] == "counter", r' "$dir/run.json"
check "the clock was restored after the run" test "$(key d0.locked)" = 0
check "and the record removed" test ! -e "$dir/rec"

"$tool" --clock 1530 --record "$dir/rec" -- sleep 30 >/dev/null &
pid=$!
for _ in $(seq 100); do
    [ "$(key d0.locked)" = 1530 ] && break
    sleep 0.1
done
child=$(pgrep -P "$pid")
kill -KILL "$pid"
wait "$pid" 2>/dev/null
[ -n "$child" ] && kill -KILL $child 2>/dev/null # its program, orphaned
check "a killed run leaves the clock set" test "$(key d0.locked)" = 1530
check "and its record" grep -q '^device 0 GPU-stub-0 locked 1530 3201$' "$dir/rec"
check "--restore puts the clock back" "$tool" --restore "$dir/rec"
check "the stub's clock is the default again" test "$(key d0.locked)" = 0
check "the record is spent" test ! -e "$dir/rec"

unset FLPS_NVML_LIBRARY
why=$(FLPS_NVML_LIBRARY=libflps-no-such-nvml.so.1 "$tool" --list)
rc=$?
check "without NVML or RAPL --list exits 77" test "$rc" = 77
check "with one line saying why" test "$why" = "no device reports energy: no NVML library (libflps-no-such-nvml.so.1 not found) and no RAPL domains under $dir/sys/class/powercap: energy is not reported"

checks_done
