#!/usr/bin/env bash
# bench/cluster/run.sh: flps jobs across bandwidth-limited "hosts" made of
# network namespaces on this machine, recorded as CSV and JSON.
#
# Topology: a namespace flb-br holds a bridge; every host namespace flb-hI
# has eth0 (10.213.0.(10+I)/24) in a veth pair whose other end pI is a port
# of that bridge. Both ends of every veth are rate-limited with tbf (so both
# directions are), and delayed with netem under the tbf when the kernel has
# netem. Nothing is created in, or sent through, the root namespace: the
# veths are made directly inside the namespaces, and every process binds
# to its namespace's address. Shard I runs in flb-hI, workers in the hosts
# after the shards. The job itself is started by flrun (the real launcher,
# which also runs the `auto` planner), with FLPS_BIN_DIR pointing at small
# wrappers that `exec ip netns exec` the real flps/flworker in their host.
#
# See bench/cluster/README.md for the options, the output format and why.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="${FLPS_BIN_DIR:-$ROOT/build/bin}"
PY=/usr/bin/python3
[ -x "$PY" ] || PY="$(command -v python3 || true)"
# FLB_PREFIX names the namespaces (default flb: flb-br, flb-h0, ...), so
# the CI test's run and a benchmark's do not meet.
PREFIX="${FLB_PREFIX:-flb}"
[[ "$PREFIX" =~ ^[a-z][a-z0-9]{0,7}$ ]] || {
  echo "run.sh: FLB_PREFIX wants 1 to 8 lower-case letters or digits, not '$PREFIX'" >&2
  exit 2
}
BRNS="$PREFIX-br"
SUBNET=10.213.0
ALL_CODECS="dense,topk:0.01,gtopk:0.01,gtopk:0.001,dgc:0.01,qsgd:4,auto"

MODELS=mlp,cnn
CODECS="$ALL_CODECS"
RATES=10gbit,1gbit,100mbit
DELAY=0.5ms
WORKERS=4
SHARDS=1
HOSTS=
ITERATIONS=
EVAL_EVERY=
TARGET=
DATA_DIR=
LABEL=matrix
OUT="$HERE/results"
WORK=
NOTE=
PROBE_SECONDS=3
KEEP_GOING=0
TIME_LIMIT=0
RECORD=1
OVERLAPS=

usage() {
  cat <<EOF
usage: bench/cluster/run.sh [options]     run a matrix of jobs (needs root)
       bench/cluster/run.sh --check       can it run here? (exit 0 yes, 77 no)
       bench/cluster/run.sh --cleanup     remove what a crashed run left

Options (lists are comma-separated):
  --models LIST       mlp, cnn                         (default $MODELS)
  --codecs LIST       job compression values           (default $CODECS)
  --rates LIST        tc rates, e.g. 10gbit,1gbit,100mbit (default $RATES)
  --delay D           one-way host-to-host delay: 0, 100us, 0.5ms, 1ms
                      (default $DELAY; netem only, see the README)
  --workers LIST      worker counts; include 1 for scaling efficiency
                      (default $WORKERS)
  --shards S          shards per job (default $SHARDS)
  --hosts N           host namespaces (default: shards + largest workers,
                      one process per host)
  --iterations N      iterations per job (default: the example job's)
  --eval-every N      test evaluation interval (default 25 mlp, 100 cnn)
  --target A          target test accuracy (default 0.85 mlp, 0.89 cnn)
  --data-dir DIR      Fashion-MNIST directory (default: the job default)
  --time-limit S      the jobs' time_limit in seconds (default 0 = none)
  --label L           results file name part (default $LABEL)
  --out DIR           results directory (default bench/cluster/results)
  --work DIR          keep jobs' logs there (default a new /tmp/flb-run.*)
  --note TEXT         recorded with the results
  --probe-seconds S   bulk bandwidth probe length (default $PROBE_SECONDS)
  --overlap LIST      the jobs' overlap: values, run in turn for each job,
                      e.g. true,false,true,false (default: the example's)
  --no-record         do not write results files (the CI test's runs)
  --keep-going        go on with the matrix after a job fails
EOF
}

die() {
  echo "run.sh: $*" >&2
  exit 1
}

# Is root, and may create namespaces? Prints why not.
can_run() {
  if [ "$(id -u)" != 0 ]; then
    echo "run.sh: needs root: it creates network namespaces, veth links and tc qdiscs (run it with sudo)" >&2
    return 77
  fi
  command -v ip >/dev/null && command -v tc >/dev/null || {
    echo "run.sh: needs ip and tc (Debian: apt-get install iproute2)" >&2
    return 77
  }
  local t="$PREFIX-check$$" err
  if ! err=$(ip netns add "$t" 2>&1); then
    echo "run.sh: cannot create a network namespace here ($err): needs CAP_SYS_ADMIN (a container without --privileged cannot)" >&2
    return 77
  fi
  ip netns del "$t" 2>/dev/null || true
  return 0
}

our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-(br|h[0-9]+)$" || true
}

# Everything in our namespaces is a process this script started; stop them
# before the namespaces go, so no job outlives its network.
kill_ns_procs() {
  local ns pids
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null || true
  done
  sleep 0.2
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
  done
}

# Deleting a namespace deletes its veth ends (so both ends of each pair)
# and their qdiscs.
remove_topology() {
  local ns
  kill_ns_procs
  for ns in $(our_namespaces); do
    ip netns del "$ns" 2>/dev/null || echo "run.sh: could not delete namespace $ns" >&2
  done
}

OWN=0         # set once this run has created namespaces: only then remove them
FLRUN_PID=
PROBE_PID=
CLEANED=0
cleanup() {
  local rc=$?
  [ "$CLEANED" = 1 ] && return
  CLEANED=1
  trap - INT TERM EXIT
  if [ -n "$FLRUN_PID" ] && kill -0 "$FLRUN_PID" 2>/dev/null; then
    # flrun stops its shards and workers on TERM.
    kill -TERM "$FLRUN_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$FLRUN_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$FLRUN_PID" 2>/dev/null || true
  fi
  [ -n "$PROBE_PID" ] && kill -TERM "$PROBE_PID" 2>/dev/null || true
  if [ "$OWN" = 1 ]; then
    remove_topology
    if [ -n "$(our_namespaces)" ]; then
      echo "run.sh: some namespaces are left: $(our_namespaces | tr '\n' ' '); run.sh --cleanup" >&2
    else
      echo "run.sh: topology removed" >&2
    fi
  fi
  exit "$rc"
}
on_signal() {
  echo "run.sh: interrupted; stopping the job and removing the topology" >&2
  exit 130
}

# "100mbit" -> 100000000. tc's units: bit, kbit, mbit, gbit (powers of 1000).
rate_bps() {
  local r="$1" n unit
  n="${r%%[a-zA-Z]*}"
  unit="${r#"$n"}"
  [[ "$n" =~ ^[0-9]+$ ]] || return 1
  case "$unit" in
    bit | "") echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    *) return 1 ;;
  esac
}

# "0.5ms" | "100us" | "0" -> seconds, as a decimal.
delay_s() {
  "$PY" - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r"([0-9]*\.?[0-9]+)(us|ms|s)?", sys.argv[1])
if not m:
    sys.exit(1)
v = float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}[m.group(2)]
if v > 1:
    sys.exit(1)
print("%g" % v)
EOF
}

have_netem() {
  ip netns exec "$BRNS" tc qdisc add dev lo root netem delay 1ms 2>/dev/null || return 1
  ip netns exec "$BRNS" tc qdisc del dev lo root 2>/dev/null || true
  return 0
}

host_ip() { echo "$SUBNET.$((10 + $1))"; }

build_topology() { # hosts
  local n="$1" i
  if [ -n "$(our_namespaces)" ]; then
    echo "run.sh: namespaces from an earlier run exist ($(our_namespaces | tr '\n' ' ')): a crashed run? Remove them with: bench/cluster/run.sh --cleanup" >&2
    exit 1
  fi
  OWN=1
  ip netns add "$BRNS"
  ip -n "$BRNS" link set lo up
  # No STP: a port forwards as soon as it is up.
  ip -n "$BRNS" link add br0 type bridge stp_state 0
  ip -n "$BRNS" link set br0 up
  for ((i = 0; i < n; i++)); do
    ip netns add "$PREFIX-h$i"
    ip -n "$PREFIX-h$i" link set lo up
    ip link add eth0 netns "$PREFIX-h$i" type veth peer name "p$i" netns "$BRNS"
    ip -n "$BRNS" link set "p$i" master br0
    ip -n "$BRNS" link set "p$i" up
    ip -n "$PREFIX-h$i" addr add "$(host_ip "$i")/24" dev eth0
    ip -n "$PREFIX-h$i" link set eth0 up
  done
  echo "run.sh: $n hosts ($(host_ip 0) ... $(host_ip $((n - 1)))) on bridge br0 in $BRNS" >&2
}

# tbf on both ends of every veth; netem under it when asked and available.
# burst: 4 ms of traffic, at least 32 KB; queue: 20 ms.
shape() { # rate delay_seconds
  local rate="$1" d="$2" bps burst half i
  bps=$(rate_bps "$rate")
  burst=$((bps / 8 / 250))
  [ "$burst" -lt 32768 ] && burst=32768
  DELAY_APPLIED=false
  half=
  if [ "$d" != 0 ]; then
    if have_netem; then
      # A packet crosses two shaped egresses (host eth0, then the bridge
      # port to the other host), so each adds half the one-way delay.
      half=$("$PY" -c "print('%gus' % ($d * 1e6 / 2))")
      DELAY_APPLIED=true
    else
      echo "run.sh: this kernel has no netem qdisc: NO delay added (links are rate-limited only; delay_applied=false is recorded)" >&2
    fi
  fi
  for ((i = 0; i < HOSTS; i++)); do
    for spec in "$PREFIX-h$i eth0" "$BRNS p$i"; do
      set -- $spec
      ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
      ip netns exec "$1" tc qdisc add dev "$2" root handle 1: tbf rate "$rate" burst "$burst" latency 20ms
      if [ -n "$half" ]; then
        ip netns exec "$1" tc qdisc add dev "$2" parent 1:1 handle 10: netem delay "$half" limit 100000
      fi
    done
  done
  echo "run.sh: every link: tbf rate $rate burst $burst bytes${half:+, netem delay $half per end}" >&2
}

bridge_rx_bytes() { # sum over ports of what the hosts sent
  local i s=0 v
  for ((i = 0; i < HOSTS; i++)); do
    v=$(ip netns exec "$BRNS" cat "/sys/class/net/p$i/statistics/rx_bytes")
    s=$((s + v))
  done
  echo "$s"
}
port_rx_bytes() { ip netns exec "$BRNS" cat "/sys/class/net/p$1/statistics/rx_bytes"; }

# Latency (ping-pong) and bandwidth (bulk h1 -> h0) through the shaped links.
probe() { # rate out.json
  local rate="$1" out="$2" ready="$SESSION/probe.ready" lat bulk b0 b1 t0 t1
  rm -f "$ready"
  ip netns exec "$PREFIX-h0" "$PY" "$HERE/netprobe.py" serve --bind "$(host_ip 0)" --ready "$ready" &
  PROBE_PID=$!
  for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.05; done
  [ -s "$ready" ] || die "the probe server did not start"
  lat=$(ip netns exec "$PREFIX-h1" "$PY" "$HERE/netprobe.py" latency --connect "$(cat "$ready")")
  b0=$(port_rx_bytes 1)
  bulk=$(ip netns exec "$PREFIX-h1" "$PY" "$HERE/netprobe.py" bulk --connect "$(cat "$ready")" \
    --seconds "$PROBE_SECONDS" --counter /sys/class/net/eth0/statistics/tx_bytes)
  b1=$(port_rx_bytes 1)
  kill -TERM "$PROBE_PID" 2>/dev/null || true
  wait "$PROBE_PID" 2>/dev/null || true
  PROBE_PID=
  "$PY" - "$out" "$rate" "$(rate_bps "$rate")" "$DELAY_S" "$DELAY_APPLIED" "$lat" "$bulk" "$b0" "$b1" "$SESSION/cpu.json" <<'EOF'
import json, sys
out, rate, bps, d, applied, lat, bulk, b0, b1, cpu = sys.argv[1:]
lat, bulk = json.loads(lat), json.loads(bulk)
c = {"rate": rate, "rate_bps": int(bps), "delay_requested_s": float(d),
     "delay_applied": applied == "true", "latency_s": lat["latency_s"],
     "rtt_s": lat["rtt_s"], "bandwidth_bps": bulk["bps"],
     "bandwidth_wire_bps": bulk["wire_bps"],
     "probe_seconds": bulk["seconds"], "probe_wire_bytes": int(b1) - int(b0)}
try:
    c.update(json.load(open(cpu)))
except (OSError, ValueError):
    pass
json.dump(c, open(out, "w"), indent=1)
print("run.sh: %s: one-way latency %.1f us, bandwidth %.1f Mbit/s payload, "
      "%.1f Mbit/s on the wire (set: %.1f)" % (rate, c["latency_s"] * 1e6,
      c["bandwidth_bps"] / 1e6, c["bandwidth_wire_bps"] / 1e6, int(bps) / 1e6),
      file=sys.stderr)
EOF
}

# Aggregation rate per shard core and top-k time per element, from the
# repository's benchmarks (one core, no network).
cpu_calibration() {
  local out="$SESSION/cpu.json" agg topk
  if [ -x "$BIN/bench_aggregate" ] && [ -x "$BIN/bench_topk" ]; then
    agg=$("$BIN/bench_aggregate" --quick 2>/dev/null | tail -n 1)
    topk=$("$BIN/bench_topk" --n 2500000 --rounds 3 2>/dev/null | tail -n 1)
    "$PY" - "$out" "$agg" "$topk" <<'EOF'
import json, sys
out, agg, topk = sys.argv[1:]
c = {}
try:
    a = json.loads(agg)
    c["aggregation_pairs_per_s"] = a["P4_pairs_per_second"]
except (ValueError, KeyError):
    pass
try:
    t = json.loads(topk)
    c["topk_s_per_element"] = t["topk_seconds"] / t["n"]
    c["topk_density"] = t["k"] / t["n"]
except (ValueError, KeyError):
    pass
json.dump(c, open(out, "w"))
EOF
  else
    echo "run.sh: bench_aggregate/bench_topk not built: no CPU calibration (cmake --build build --target bench_aggregate bench_topk)" >&2
    echo '{}' >"$out"
  fi
}

# The job file: the example's keys, with ours replacing theirs.
write_job() { # model codec workers out [overlap]
  local model="$1" codec="$2" w="$3" out="$4" ov="${5:-}" ex="$ROOT/examples/fmnist-$1-dense.yaml"
  local name="flb-$model-${codec//:/-}-w$w"
  {
    grep -vE '^(#|name|workers|servers|iterations|compression|eval_every|data_dir|time_limit|transport|overlap):' "$ex" | grep -v '^$'
    if [ -n "$ov" ]; then echo "overlap: $ov"; fi
    echo "name: $name"
    echo "workers: $w"
    echo "servers: $SHARDS"
    echo "iterations: $ITERS"
    echo "compression: $codec"
    echo "eval_every: $EVERY"
    echo "transport: zmq"
    if [ "$TIME_LIMIT" != 0 ]; then echo "time_limit: $TIME_LIMIT"; fi
    if [ -n "$DATA_DIR" ]; then echo "data_dir: $DATA_DIR"; fi
  } >"$out"
}

# flps / flworker wrappers for flrun: each process into its host.
write_wrappers() { # dir workers
  local dir="$1" w="$2" s r h
  mkdir -p "$dir"
  {
    echo '#!/bin/bash'
    echo 'shard=; prev=; args=()'
    echo 'for a in "$@"; do [ "$prev" = --shard ] && shard=$a; prev=$a; done'
    echo 'case "$shard" in'
    for ((s = 0; s < SHARDS; s++)); do
      h=$((s % HOSTS))
      echo "  $s) ns=$PREFIX-h$h ip=$(host_ip "$h") ;;"
    done
    echo '  *) echo "flps wrapper: no host for shard $shard" >&2; exit 2 ;;'
    echo 'esac'
    # flrun binds shards to 127.0.0.1: bind to the host's address instead.
    echo 'for a in "$@"; do [ "$a" = tcp://127.0.0.1:0 ] && a="tcp://$ip:0"; args+=("$a"); done'
    echo "exec ip netns exec \"\$ns\" \"$BIN/flps\" \"\${args[@]}\""
  } >"$dir/flps"
  {
    echo '#!/bin/bash'
    echo 'rank=; prev='
    echo 'for a in "$@"; do [ "$prev" = --rank ] && rank=$a; prev=$a; done'
    echo 'case "$rank" in'
    for ((r = 0; r < w; r++)); do
      if ((HOSTS > SHARDS)); then
        h=$((SHARDS + r % (HOSTS - SHARDS)))
      else
        h=$(((SHARDS + r) % HOSTS))
      fi
      echo "  $r) ns=$PREFIX-h$h ;;"
    done
    echo '  *) echo "flworker wrapper: no host for rank $rank" >&2; exit 2 ;;'
    echo 'esac'
    # A copy of the events (progress, eval with elapsed_s, done) for
    # the recorder; flrun reads the same lines from the pipe.
    echo "exec > >(exec tee -a \"$dir/../events-\$rank.jsonl\")"
    echo "exec ip netns exec \"\$ns\" \"$BIN/flworker\" \"\$@\""
  } >"$dir/flworker"
  chmod 755 "$dir/flps" "$dir/flworker"
}

RUN_N=0
run_job() { # rate model codec workers [overlap]
  local rate="$1" model="$2" codec="$3" w="$4" ov="${5:-}" dir rc w0 w1 t0
  RUN_N=$((RUN_N + 1))
  dir="$SESSION/runs/$RUN_N"
  mkdir -p "$dir"
  write_job "$model" "$codec" "$w" "$dir/job.yaml" "$ov"
  write_wrappers "$dir/bin" "$w"
  t0=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "run.sh: [$RUN_N] $model $codec, $w workers, $SHARDS shards, $ITERS iterations on $rate${ov:+, overlap: $ov}" >&2
  w0=$(bridge_rx_bytes)
  set +e
  FLPS_BIN_DIR="$dir/bin" "$BIN/flrun" --log-dir "$dir/logs" --quiet "$dir/job.yaml" \
    >"$dir/flrun.out" 2>"$dir/flrun.err" &
  FLRUN_PID=$!
  wait "$FLRUN_PID"
  rc=$?
  set -e
  FLRUN_PID=
  w1=$(bridge_rx_bytes)
  "$PY" - "$dir/meta.json" <<EOF
import json, sys
json.dump({"n": $RUN_N, "date": "$t0", "rate": "$rate", "rate_bps": $(rate_bps "$rate"),
           "delay_s": $DELAY_S, "delay_applied": "$DELAY_APPLIED" == "true",
           "model": "$model", "codec": "$codec", "workers": $w, "shards": $SHARDS,
           "hosts": $HOSTS, "iterations": $ITERS, "eval_every": $EVERY,
           "target_accuracy": $TGT, "wire_bytes": $((w1 - w0)), "rc": $rc,
           "overlap": "$ov" or None},
          open(sys.argv[1], "w"))
EOF
  if [ "$rc" != 0 ]; then
    echo "run.sh: [$RUN_N] flrun failed (exit $rc): $(tail -n 3 "$dir/flrun.err" | tr '\n' ' ')" >&2
    echo "run.sh: logs in $dir" >&2
    [ "$KEEP_GOING" = 1 ] || exit 1
    return 0
  fi
  echo "run.sh: [$RUN_N] $(tail -n 1 "$dir/flrun.out")" >&2
}

main() {
  local mode=run
  while [ $# -gt 0 ]; do
    case "$1" in
      --help | -h) usage; exit 0 ;;
      --check) mode=check ;;
      --cleanup) mode=cleanup ;;
      --models) MODELS="$2"; shift ;;
      --codecs) CODECS="$2"; shift ;;
      --rates) RATES="$2"; shift ;;
      --delay) DELAY="$2"; shift ;;
      --workers) WORKERS="$2"; shift ;;
      --shards) SHARDS="$2"; shift ;;
      --hosts) HOSTS="$2"; shift ;;
      --iterations) ITERATIONS="$2"; shift ;;
      --eval-every) EVAL_EVERY="$2"; shift ;;
      --target) TARGET="$2"; shift ;;
      --data-dir) DATA_DIR="$2"; shift ;;
      --time-limit) TIME_LIMIT="$2"; shift ;;
      --label) LABEL="$2"; shift ;;
      --out) OUT="$2"; shift ;;
      --work) WORK="$2"; shift ;;
      --note) NOTE="$2"; shift ;;
      --probe-seconds) PROBE_SECONDS="$2"; shift ;;
      --overlap) OVERLAPS="$2"; shift ;;
      --no-record) RECORD=0 ;;
      --keep-going) KEEP_GOING=1 ;;
      *) usage >&2; die "unknown option '$1'" ;;
    esac
    [ $# -gt 0 ] && shift
  done

  case "$mode" in
    check) can_run; exit $? ;;
    cleanup)
      [ "$(id -u)" = 0 ] || die "--cleanup needs root"
      if [ -z "$(our_namespaces)" ]; then echo "run.sh: nothing to clean up" >&2; exit 0; fi
      echo "run.sh: removing $(our_namespaces | tr '\n' ' ')" >&2
      remove_topology
      [ -z "$(our_namespaces)" ] || die "could not remove every namespace"
      exit 0
      ;;
  esac

  # Check everything before anything is created.
  local rc=0
  can_run || rc=$?
  [ "$rc" = 0 ] || exit "$rc"
  [ -n "$PY" ] || die "needs python3"
  for b in flrun flps flworker; do
    [ -x "$BIN/$b" ] || die "no $BIN/$b: build it first (cmake --build build --target flrun flps flworker) or set FLPS_BIN_DIR"
  done
  [[ "$SHARDS" =~ ^[1-9][0-9]*$ ]] || die "--shards wants a positive integer, not '$SHARDS'"
  local maxw=0 w m c r
  for w in ${WORKERS//,/ }; do
    [[ "$w" =~ ^[1-9][0-9]*$ ]] || die "--workers wants positive integers, not '$w'"
    ((w > maxw)) && maxw=$w
  done
  [ -n "$HOSTS" ] || HOSTS=$((SHARDS + maxw))
  [[ "$HOSTS" =~ ^[0-9]+$ ]] && ((HOSTS >= 2 && HOSTS <= 200)) ||
    die "--hosts wants 2 to 200 namespaces, not '$HOSTS'"
  for m in ${MODELS//,/ }; do
    [ -f "$ROOT/examples/fmnist-$m-dense.yaml" ] || die "--models: no examples/fmnist-$m-dense.yaml (models: mlp, cnn)"
  done
  for c in ${CODECS//,/ }; do
    [[ "$c" =~ ^(dense|fp16|sign|auto|(topk|gtopk|randk|dgc):[0-9.eE+-]+|qsgd:[1-8])$ ]] ||
      die "--codecs: '$c' is not a compression value (dense, topk:D, gtopk:D, randk:D, dgc:D, qsgd:BITS, fp16, sign, auto; docs/job-file.md)"
  done
  for r in ${RATES//,/ }; do
    rate_bps "$r" >/dev/null || die "--rates: '$r' is not a tc rate such as 100mbit, 1gbit, 10gbit"
  done
  for v in ${OVERLAPS//,/ }; do
    [[ "$v" =~ ^(true|false)$ ]] || die "--overlap wants true or false (a list), not '$v'"
  done
  DELAY_S=$(delay_s "$DELAY") || die "--delay: '$DELAY' is not a delay such as 0, 100us, 0.5ms, 1ms (at most 1 s)"
  for v in "$ITERATIONS" "$EVAL_EVERY"; do
    [ -z "$v" ] || [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "--iterations/--eval-every want positive integers, not '$v'"
  done
  [ -z "$TARGET" ] || "$PY" -c "import sys; v=float(sys.argv[1]); sys.exit(not 0 < v <= 1)" "$TARGET" 2>/dev/null ||
    die "--target wants an accuracy in (0, 1], not '$TARGET'"

  # The commit the binaries were built from is the one checked out now,
  # not whatever is checked out when a long matrix ends.
  COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  DIRTY=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | head -c 1)
  trap cleanup EXIT
  trap 'echo "run.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
  trap on_signal INT TERM

  if [ -n "$WORK" ]; then mkdir -p "$WORK"; SESSION="$WORK"; else SESSION=$(mktemp -d /tmp/flb-run.XXXXXX); fi
  echo "run.sh: work directory $SESSION" >&2
  build_topology "$HOSTS"
  # Only recorded runs need it (and it takes seconds under a sanitizer).
  if [ "$RECORD" = 1 ]; then cpu_calibration; fi
  for r in ${RATES//,/ }; do
    shape "$r" "$DELAY_S"
    probe "$r" "$SESSION/calib-$r.json"
    for m in ${MODELS//,/ }; do
      ITERS="${ITERATIONS:-$(awk -F': *' '$1 == "iterations" {print $2}' "$ROOT/examples/fmnist-$m-dense.yaml")}"
      EVERY="${EVAL_EVERY:-$([ "$m" = cnn ] && echo 100 || echo 25)}"
      TGT="${TARGET:-$([ "$m" = cnn ] && echo 0.89 || echo 0.85)}"
      for c in ${CODECS//,/ }; do
        for w in ${WORKERS//,/ }; do
          if [ -z "$OVERLAPS" ]; then
            run_job "$r" "$m" "$c" "$w"
          else
            for v in ${OVERLAPS//,/ }; do run_job "$r" "$m" "$c" "$w" "$v"; done
          fi
        done
      done
    done
  done
  if [ "$RECORD" = 1 ]; then
    "$PY" "$HERE/record.py" --session "$SESSION" --out "$OUT" --label "$LABEL" \
      --note "$NOTE" --commit "$COMMIT" ${DIRTY:+--dirty}
  fi
}

# One line, so that bash has read all of it before main runs (the file may
# be edited while a long matrix runs).
main "$@"; exit $?
