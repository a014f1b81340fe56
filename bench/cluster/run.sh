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
# With --peers it also runs what a PyTorch user would run instead, the same
# model under DistributedDataParallel (gloo), one process per worker host,
# interleaved with the flps jobs and measured the same way.
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
# Not compression values: decentralized jobs (mode: saps, no shard), by
# their peer selection and density.
SAPS_CODEC_RE='^saps(-random|-ring)?:[0-9.eE+-]+$'

MODELS=mlp,cnn
CODECS="$ALL_CODECS"
RATES=10gbit,1gbit,100mbit
HOST_RATES=
LINK_RATES=
DELAY=0.5ms
WORKERS=4
SHARDS=1
SHARDS_AUTO=0
SOCKBUF=0
ENCRYPTION=false
HOSTS=
ITERATIONS=
EVAL_EVERY=
TARGET=
DATA_DIR=
LABEL=matrix
OUT=
WORK=
NOTE=
PROBE_SECONDS=3
KEEP_GOING=0
TIME_LIMIT=0
RECORD=1
OVERLAPS=
PEERS=
REPEAT=1

usage() {
  cat <<EOF
usage: bench/cluster/run.sh [options]     run a matrix of jobs (needs root)
       bench/cluster/run.sh --check       can it run here? (exit 0 yes, 77 no)
       bench/cluster/run.sh --cleanup     remove what a crashed run left

Options (lists are comma-separated):
  --models LIST       mlp, cnn, torch-cnn (examples/torch/cnn.py as a
                      command: job)                    (default $MODELS)
  --codecs LIST       job compression values           (default $CODECS;
                      '' for the peers alone); also saps:D,
                      saps-random:D, saps-ring:D: mode saps at density D
                      with adaptive / random / ring peers (model mlp)
  --peers LIST        PyTorch DistributedDataParallel runs of the same
                      model beside the flps jobs: ddp (allreduce),
                      ddp-fp16, ddp-powersgd[:RANK] (rank 2 by default);
                      compute: W processes training alone at once, one
                      per worker host, nothing sent (the floor of an
                      iteration on these cores) (default: none; models
                      mlp and torch-cnn)
  --repeat N          run the codecs and peers N times in turn,
                      interleaved, for medians (default $REPEAT)
  --rates LIST        tc rates, e.g. 10gbit,1gbit,100mbit (default $RATES)
  --host-rates LIST   heterogeneous links instead of --rates: one tc rate
                      per host, in host order (a link runs at the slower
                      of its two hosts' rates)
  --link-rates FILE   a rate per link instead: FILE has one line per host
                      I, its rates to every host J (tc rates, '-' on the
                      diagonal); host I's eth0 gets an htb class per J
  --delay D           one-way host-to-host delay: 0, 100us, 0.5ms, 1ms
                      (default $DELAY; netem only, see the README)
  --workers LIST      worker counts; include 1 for scaling efficiency
                      (default $WORKERS)
  --shards S          shards per job (default $SHARDS); auto: the jobs'
                      servers: auto, shard I beside worker I in host I
                      (one --workers count)
  --hosts N           host namespaces (default: shards + largest workers,
                      one process per host)
  --iterations N      iterations per job (default: the example job's)
  --eval-every N      test evaluation interval (default 25 mlp, 100 cnn
                      and torch-cnn)
  --target A          target test accuracy (default 0.85 mlp, 0.89 cnn,
                      0.88 torch-cnn)
  --data-dir DIR      Fashion-MNIST directory (default: the job default)
  --time-limit S      the jobs' time_limit in seconds (default 0 = none)
  --label L           results file name part (default $LABEL)
  --out DIR           results directory (default bench/cluster/results;
                      with --host-rates or --link-rates results-hetero,
                      which bench/plot.sh's tables do not read)
  --work DIR          keep jobs' logs there (default a new /tmp/flb-run.*)
  --note TEXT         recorded with the results
  --probe-seconds S   bulk bandwidth probe length (default $PROBE_SECONDS)
  --overlap LIST      the jobs' overlap: values, run in turn for each job,
                      e.g. true,false,true,false (default: the example's
                      overlap where it writes one, else none written)
  --encryption E     the flps jobs' encryption: key, true or false
                      (default false: the data plane authenticated by the
                      job's secret but not encrypted, as the DDP peers'
                      gloo sends in the clear; true adds CURVE), recorded
                      as data_plane
  --socket-buffer B   the shards' per-connection kernel buffers in bytes
                      (flps --socket-buffer; default 0, autotuned);
                      recorded in meta.json as socket_buffer
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

# The host of worker rank R, for the flps jobs and the peers alike: the
# hosts after the shards, round robin (or beside the shards when there are
# no more hosts than shards).
worker_host() { # rank
  if ((HOSTS > SHARDS)); then
    echo $((SHARDS + $1 % (HOSTS - SHARDS)))
  else
    echo $(((SHARDS + $1) % HOSTS))
  fi
}

# The example job a model's runs start from.
example_of() { # model
  case "$1" in
    torch-cnn) echo "$ROOT/examples/torch/cnn-dense.yaml" ;;
    *) echo "$ROOT/examples/fmnist-$1-dense.yaml" ;;
  esac
}

# A key's value in a job file (comments stripped), or the default.
job_key() { # file key default
  local v
  v=$(awk -F': *' -v k="$2" '$1 == k { v = $2; sub(/[ \t]*#.*/, "", v); print v; exit }' "$1")
  echo "${v:-$3}"
}

# The PyTorch program of a model's peers (and of the torch-cnn flps jobs).
torch_program() { # model
  case "$1" in
    mlp) echo "$ROOT/examples/torch/mlp.py" ;;
    torch-cnn) echo "$ROOT/examples/torch/cnn.py" ;;
    *) return 1 ;;
  esac
}

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
  local hr=(${HOST_RATES//,/ })
  if [ -n "$LINK_RATES" ]; then
    shape_links "$LINK_RATES"
    return 0
  fi
  for ((i = 0; i < HOSTS; i++)); do
    if [ ${#hr[@]} -gt 0 ]; then
      # --host-rates: host I's own rate on both ends of its veth, so a
      # link between two hosts runs at the slower one's.
      rate="${hr[$i]}"
      bps=$(rate_bps "$rate")
      burst=$((bps / 8 / 250))
      [ "$burst" -lt 32768 ] && burst=32768
    fi
    for spec in "$PREFIX-h$i eth0" "$BRNS p$i"; do
      set -- $spec
      ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
      ip netns exec "$1" tc qdisc add dev "$2" root handle 1: tbf rate "$rate" burst "$burst" latency 20ms
      if [ -n "$half" ]; then
        ip netns exec "$1" tc qdisc add dev "$2" parent 1:1 handle 10: netem delay "$half" limit 100000
      fi
    done
  done
  if [ ${#hr[@]} -gt 0 ]; then
    echo "run.sh: host links: tbf rates $HOST_RATES (host order)${half:+, netem delay $half per end}" >&2
  else
    echo "run.sh: every link: tbf rate $rate burst $burst bytes${half:+, netem delay $half per end}" >&2
  fi
}

# --link-rates: host I's egress (eth0) an htb with one class per host J at
# the file's rate I -> J (burst as shape's, a u32 filter on J's address);
# the bridge ports unshaped. No delay (the kernel this ran on has no netem).
shape_links() { # file
  local i j row bps burst
  DELAY_APPLIED=false
  for ((i = 0; i < HOSTS; i++)); do
    read -ra row < <(sed -n "$((i + 1))p" "$1")
    ip netns exec "$BRNS" tc qdisc del dev "p$i" root 2>/dev/null || true
    ip netns exec "$PREFIX-h$i" tc qdisc del dev eth0 root 2>/dev/null || true
    ip netns exec "$PREFIX-h$i" tc qdisc add dev eth0 root handle 1: htb
    for ((j = 0; j < HOSTS; j++)); do
      [ "$j" != "$i" ] || continue
      bps=$(rate_bps "${row[$j]}")
      burst=$((bps / 8 / 250))
      [ "$burst" -lt 32768 ] && burst=32768
      ip netns exec "$PREFIX-h$i" tc class add dev eth0 parent 1: classid "1:$((j + 10))" \
        htb rate "${row[$j]}" burst "$burst" cburst "$burst" quantum 60000
      ip netns exec "$PREFIX-h$i" tc filter add dev eth0 parent 1: protocol ip prio 1 \
        u32 match ip dst "$(host_ip "$j")/32" flowid "1:$((j + 10))"
    done
  done
  echo "run.sh: link rates from $1 (htb per destination on each host's eth0)" >&2
}

# Every bridge port's counters, one line each: "I RX TX" (RX: what host I
# sent, TX: what it received).
ports_bytes() {
  local i d
  for ((i = 0; i < HOSTS; i++)); do
    d="/sys/class/net/p$i/statistics"
    echo "$i $(ip netns exec "$BRNS" cat "$d/rx_bytes") $(ip netns exec "$BRNS" cat "$d/tx_bytes")"
  done
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
# torch-cnn: examples/torch/cnn-dense.yaml's keys and its program as the
# job's command, started in each worker's host by bin/rankns, with the
# cosine schedule of the built-in models' examples.
write_job() { # model codec workers out [overlap]
  local model="$1" codec="$2" w="$3" out="$4" ov="${5:-}" ex drop="" cmd=""
  local name="flb-$model-${codec//:/-}-w$w" saps=
  ex=$(example_of "$model")
  if [[ "$codec" =~ $SAPS_CODEC_RE ]]; then
    # Decentralized: the saps example's keys (its lr), no shard; saps is
    # the peer selection (saps:D adaptive, saps-random:D, saps-ring:D).
    saps="${codec%%:*}"
    saps="${saps#saps}"
    saps="${saps#-}"
    saps="${saps:-adaptive}"
    ex="$ROOT/examples/fmnist-$model-saps.yaml"
    drop="$drop|mode|saps_density|peer_selection"
  fi
  if [ "$model" = torch-cnn ]; then
    drop='|command|env|lr_schedule'
    cmd="[$(dirname "$out")/bin/rankns, $PY, $(torch_program "$model"), --lr-schedule, cosine]"
  fi
  {
    grep -vE "^(#|name|workers|servers|iterations|compression|eval_every|data_dir|time_limit|transport|overlap|encryption$drop):" "$ex" |
      grep -vE '^($| )'
    if [ "$model" = torch-cnn ]; then
      echo "lr_schedule: cosine"
      echo "command: $cmd"
      echo 'env: {OMP_NUM_THREADS: "1"}'
    fi
    if [ -n "$ov" ]; then echo "overlap: $ov"; fi
    echo "encryption: $ENCRYPTION"
    echo "name: $name"
    echo "workers: $w"
    if [ -n "$saps" ]; then
      echo "servers: 0"
      echo "mode: saps"
      echo "saps_density: ${codec#*:}"
      echo "peer_selection: $saps"
    else
      if ((SHARDS_AUTO)); then echo "servers: auto"; else echo "servers: $SHARDS"; fi
      echo "compression: $codec"
    fi
    echo "iterations: $ITERS"
    echo "eval_every: $EVERY"
    echo "transport: zmq"
    if [ "$TIME_LIMIT" != 0 ]; then echo "time_limit: $TIME_LIMIT"; fi
    if [ -n "$DATA_DIR" ]; then echo "data_dir: $DATA_DIR"; fi
  } >"$out"
}

# The body of a case statement on a rank: "R) ns=<R's host> ;;".
rank_cases() { # workers
  local r
  for ((r = 0; r < $1; r++)); do echo "  $r) ns=$PREFIX-h$(worker_host "$r") ;;"; done
}

# flps / flworker wrappers for flrun: each process into its host; rankns
# does the same for a command: job's program (by its FLPS_RANK).
write_wrappers() { # dir workers
  local dir="$1" w="$2" s h r
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
    # --socket-buffer: the shards' per-connection buffers (flps --help).
    ((SOCKBUF > 0)) && echo "args+=(--socket-buffer $SOCKBUF)"
    echo "exec ip netns exec \"\$ns\" \"$BIN/flps\" \"\${args[@]}\""
  } >"$dir/flps"
  {
    echo '#!/bin/bash'
    echo 'rank=; prev='
    echo 'for a in "$@"; do [ "$prev" = --rank ] && rank=$a; prev=$a; done'
    echo 'case "$rank" in'
    rank_cases "$w"
    echo '  *) echo "flworker wrapper: no host for rank $rank" >&2; exit 2 ;;'
    echo 'esac'
    # A saps job's --peers: flrun's loopback endpoints, one per rank; each
    # becomes its rank's host address (the port stays: free in every
    # namespace).
    echo -n 'hosts=('
    for ((r = 0; r < w; r++)); do echo -n " $(host_ip "$(worker_host "$r")")"; done
    echo ' )'
    echo 'args=(); prev='
    echo 'for a in "$@"; do'
    echo '  if [ "$prev" = --peers ]; then'
    echo '    IFS=, read -ra eps <<<"$a"; a='
    echo '    for i in "${!eps[@]}"; do a+="${a:+,}${eps[$i]/127.0.0.1/${hosts[$i]}}"; done'
    echo '  fi'
    echo '  args+=("$a"); prev=$a'
    echo 'done'
    # A copy of the events (progress, eval with elapsed_s, done) for
    # the recorder; flrun reads the same lines from the pipe.
    echo "exec > >(exec tee -a \"$dir/../events-\$rank.jsonl\")"
    echo "exec ip netns exec \"\$ns\" \"$BIN/flworker\" \"\${args[@]}\""
  } >"$dir/flworker"
  {
    echo '#!/bin/bash'
    echo 'case "$FLPS_RANK" in'
    rank_cases "$w"
    echo '  *) echo "rankns: no host for FLPS_RANK=$FLPS_RANK" >&2; exit 2 ;;'
    echo 'esac'
    echo "exec > >(exec tee -a \"$dir/../events-\$FLPS_RANK.jsonl\")"
    echo 'exec ip netns exec "$ns" "$@"'
  } >"$dir/rankns"
  chmod 755 "$dir/flps" "$dir/flworker" "$dir/rankns"
}

RUN_N=0
# The run's record (meta.json) for record.py, from the bridge ports'
# counters before (ports-0) and after (ports-1) it: the same for a flps job
# and a peer. system: flps, ddp or compute.
write_meta() { # dir t0 rate model codec workers shards rc overlap system
  local r whosts
  whosts=$(for ((r = 0; r < $6; r++)); do worker_host "$r"; done | sort -un | tr '\n' ,)
  FLB_HOST_RATES="$HOST_RATES" FLB_LINK_RATES="$LINK_RATES" "$PY" - "$@" "$RUN_N" "$(rate_bps "$3")" "$DELAY_S" "$DELAY_APPLIED" "$HOSTS" "$ITERS" \
    "$EVERY" "$TGT" "$whosts" "$SOCKBUF" <<'EOF'
import json, os, sys
(d, t0, rate, model, codec, w, shards, rc, ov, system, n, bps, delay, applied,
 hosts, iters, every, tgt, whosts, sockbuf) = sys.argv[1:]
def ports(name):
    with open(os.path.join(d, name)) as f:
        return {int(i): (int(rx), int(tx)) for i, rx, tx in (l.split() for l in f)}
p0, p1 = ports("ports-0"), ports("ports-1")
delta = {i: [p1[i][0] - p0[i][0], p1[i][1] - p0[i][1]] for i in sorted(p1)}
json.dump({"n": int(n), "date": t0, "rate": rate, "rate_bps": int(bps),
           "delay_s": float(delay), "delay_applied": applied == "true",
           "model": model, "codec": codec, "workers": int(w), "shards": int(shards),
           "hosts": int(hosts), "iterations": int(iters), "eval_every": int(every),
           "target_accuracy": float(tgt),
           "wire_bytes": sum(rx for rx, _ in delta.values()),
           "port_bytes": {str(i): v for i, v in delta.items()},
           "worker_hosts": [int(h) for h in whosts.split(",") if h],
           "rc": int(rc), "overlap": ov or None, "system": system,
           "socket_buffer": int(sockbuf) if system == "flps" else None,
           "host_rates": [r for r in os.environ.get("FLB_HOST_RATES", "").split(",") if r] or None,
           "link_rates": [l.split() for l in open(os.environ["FLB_LINK_RATES"])]
                         if os.environ.get("FLB_LINK_RATES") else None},
          open(os.path.join(d, "meta.json"), "w"))
EOF
}

run_job() { # rate model codec workers [overlap]
  local rate="$1" model="$2" codec="$3" w="$4" ov="${5:-}" dir rc t0 ex
  # Without --overlap, the example's own overlap where it writes one
  # (examples/torch/cnn-dense.yaml), for the example's own codec only
  # (flps.torch ignores a file's overlap where it cannot run: gtopk's
  # correction "update", auto), recorded as any other.
  ex=$(example_of "$model")
  if [ -z "$ov" ] && [ "$codec" = "$(job_key "$ex" compression "")" ]; then
    ov=$(job_key "$ex" overlap "")
  fi
  RUN_N=$((RUN_N + 1))
  dir="$SESSION/runs/$RUN_N"
  mkdir -p "$dir"
  write_job "$model" "$codec" "$w" "$dir/job.yaml" "$ov"
  write_wrappers "$dir/bin" "$w"
  t0=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "run.sh: [$RUN_N] $model $codec, $w workers, $SHARDS shards, $ITERS iterations on $rate${ov:+, overlap: $ov}" >&2
  ports_bytes >"$dir/ports-0"
  set +e
  # flrun hands a command: job's program the libflps beside flps, which
  # the wrappers hide: name the build's (where BIN is a build's bin/).
  local lib=()
  if [ -f "$BIN/../lib/libflps.so" ]; then
    lib=(FLPS_BUILD_DIR="$(cd "$BIN/.." && pwd)" FLPS_LIBRARY="$(cd "$BIN/../lib" && pwd)/libflps.so")
  fi
  env FLPS_BIN_DIR="$dir/bin" "${lib[@]}" "$BIN/flrun" --log-dir "$dir/logs" --quiet "$dir/job.yaml" \
    >"$dir/flrun.out" 2>"$dir/flrun.err" &
  FLRUN_PID=$!
  wait "$FLRUN_PID"
  rc=$?
  set -e
  FLRUN_PID=
  ports_bytes >"$dir/ports-1"
  write_meta "$dir" "$t0" "$rate" "$model" "$codec" "$w" "$SHARDS" "$rc" "$ov" flps
  if [ "$rc" != 0 ]; then
    echo "run.sh: [$RUN_N] flrun failed (exit $rc): $(tail -n 3 "$dir/flrun.err" | tr '\n' ' ')" >&2
    echo "run.sh: logs in $dir" >&2
    [ "$KEEP_GOING" = 1 ] || exit 1
    return 0
  fi
  echo "run.sh: [$RUN_N] $(tail -n 1 "$dir/flrun.out")" >&2
}

# A peer: the model's PyTorch program (torch_program) under
# DistributedDataParallel with gloo (fmnist.py --ddp), rank R in
# worker_host R like the flps job's worker R, rendezvous at rank 0's
# address, with the settings of the model's dense job (job.yaml: lr,
# momentum, schedule, batch, seed); the MLP on flworker's data, order and
# initial weights. Its events are flworker's lines, recorded as a flps
# job's are; peer.out ({"wall_seconds": ...}) stands for flrun's summary.
# The compute peer: the same program with --local --events on every worker
# host at once, each training alone (only rank 0 evaluates before the end).
run_peer() { # rate model peer workers
  local rate="$1" model="$2" peer="$3" w="$4" dir rc=0 t0 r st ended start hook=allreduce
  local job args=() lim=() pids=() each=() system=ddp what="PyTorch DDP, gloo"
  RUN_N=$((RUN_N + 1))
  dir="$SESSION/runs/$RUN_N"
  mkdir -p "$dir/logs"
  job="$dir/job.yaml"
  write_job "$model" dense "$w" "$job"
  case "$peer" in
    ddp-fp16) hook=fp16 ;;
    ddp-powersgd:*) hook=powersgd; args+=(--powersgd-rank "${peer#*:}") ;;
  esac
  if [ "$peer" = compute ]; then
    system=compute what="each alone, nothing sent"
    args+=(--local --events)
  else
    args+=(--ddp --ddp-hook "$hook")
  fi
  args+=(--iterations "$ITERS"
    --batch "$(job_key "$job" batch_size 32)" --lr "$(job_key "$job" lr 0.05)"
    --momentum "$(job_key "$job" momentum 0.9)" --seed "$(job_key "$job" seed 1)"
    --lr-schedule "$(job_key "$job" lr_schedule constant)")
  if [ "$model" = mlp ]; then args+=(--flworker-data); fi
  if [ -n "$DATA_DIR" ]; then args+=(--data-dir "$DATA_DIR"); fi
  if [ "$TIME_LIMIT" != 0 ]; then lim=(timeout "$TIME_LIMIT"); fi
  t0=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "run.sh: [$RUN_N] $model $peer ($what), $w workers, $ITERS iterations on $rate" >&2
  ports_bytes >"$dir/ports-0"
  start=$(date +%s.%N)
  set +e
  for ((r = 0; r < w; r++)); do
    each=(--eval-every "$EVERY")
    if [ "$peer" = compute ] && [ "$r" != 0 ]; then each=(--eval-every 0); fi
    env RANK="$r" WORLD_SIZE="$w" MASTER_ADDR="$(host_ip "$(worker_host 0)")" \
      MASTER_PORT=$((29500 + RUN_N % 1000)) GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
      "${lim[@]}" ip netns exec "$PREFIX-h$(worker_host "$r")" "$PY" "$(torch_program "$model")" \
      "${args[@]}" "${each[@]}" >"$dir/events-$r.jsonl" 2>"$dir/logs/ddp-$r.log" &
    pids+=($!)
  done
  # A rank that fails leaves the others waiting in an allreduce: stop them.
  while [ ${#pids[@]} -gt 0 ]; do
    ended=
    wait -n -p ended "${pids[@]}"
    st=$?
    [ -n "$ended" ] || break
    mapfile -t pids < <(printf '%s\n' "${pids[@]}" | grep -vx "$ended")
    if [ "$st" != 0 ] && [ "$rc" = 0 ]; then
      rc=$st
      kill -TERM "${pids[@]}" 2>/dev/null
    fi
  done
  set -e
  "$PY" -c 'import json, sys; print(json.dumps({"wall_seconds": round(float(sys.argv[2]) - float(sys.argv[1]), 3)}))' \
    "$start" "$(date +%s.%N)" >"$dir/peer.out"
  ports_bytes >"$dir/ports-1"
  write_meta "$dir" "$t0" "$rate" "$model" "$peer" "$w" 0 "$rc" "" "$system"
  if [ "$rc" != 0 ]; then
    echo "run.sh: [$RUN_N] $peer failed (exit $rc): $(tail -n 3 "$dir/logs/ddp-0.log" | tr '\n' ' ')" >&2
    echo "run.sh: logs in $dir" >&2
    [ "$KEEP_GOING" = 1 ] || exit 1
    return 0
  fi
  echo "run.sh: [$RUN_N] $(grep '"event":"done"' "$dir/events-0.jsonl" | tail -n 1)" >&2
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
      --host-rates) HOST_RATES="$2"; shift ;;
      --link-rates) LINK_RATES="$2"; shift ;;
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
      --socket-buffer) SOCKBUF="$2"; shift ;;
      --encryption) ENCRYPTION="$2"; shift ;;
      --peers) PEERS="$2"; shift ;;
      --repeat) REPEAT="$2"; shift ;;
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
  [[ "$SOCKBUF" =~ ^[0-9]+$ ]] || die "--socket-buffer wants bytes, not '$SOCKBUF'"
  [[ "$ENCRYPTION" =~ ^(true|false)$ ]] || die "--encryption wants true or false, not '$ENCRYPTION'"
  local maxw=0 w m c r k
  for w in ${WORKERS//,/ }; do
    [[ "$w" =~ ^[1-9][0-9]*$ ]] || die "--workers wants positive integers, not '$w'"
    ((w > maxw)) && maxw=$w
  done
  # --shards auto: the jobs' servers: auto, a shard beside each worker
  # (shard I and worker I in host I), for one worker count.
  if [ "$SHARDS" = auto ]; then
    [[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || die "--shards auto wants one --workers count, not '$WORKERS'"
    SHARDS_AUTO=1 SHARDS=$maxw
    [ -n "$HOSTS" ] || HOSTS=$maxw
    ((HOSTS == SHARDS)) || die "--shards auto puts shard I beside worker I: leave --hosts out"
  fi
  [[ "$SHARDS" =~ ^[1-9][0-9]*$ ]] || die "--shards wants a positive integer or auto, not '$SHARDS'"
  [ -n "$HOSTS" ] || HOSTS=$((SHARDS + maxw))
  [[ "$HOSTS" =~ ^[0-9]+$ ]] && ((HOSTS >= 2 && HOSTS <= 200)) ||
    die "--hosts wants 2 to 200 namespaces, not '$HOSTS'"
  for m in ${MODELS//,/ }; do
    if ! [[ "$m" =~ ^[a-z0-9-]+$ ]] || [ ! -f "$(example_of "$m")" ]; then
      die "--models: '$m' has no example job ($(example_of "$m")); models: mlp, cnn, torch-cnn"
    fi
  done
  local peers=() p
  for p in ${PEERS//,/ }; do
    case "$p" in
      ddp | ddp-fp16 | compute) ;;
      ddp-powersgd) p=ddp-powersgd:2 ;;
      ddp-powersgd:*) [[ "${p#*:}" =~ ^[1-9][0-9]*$ ]] || die "--peers: '$p': the PowerSGD rank is a positive integer" ;;
      *) die "--peers: '$p' is not a peer (ddp, ddp-fp16, ddp-powersgd[:RANK], compute)" ;;
    esac
    peers+=("$p")
  done
  if [ ${#peers[@]} -gt 0 ]; then
    for m in ${MODELS//,/ }; do
      torch_program "$m" >/dev/null ||
        die "--peers: the model '$m' has no PyTorch program (the peers run mlp and torch-cnn, the built-in cnn's layers in PyTorch)"
    done
    "$PY" -c 'import torch.distributed as d, sys; sys.exit(not d.is_gloo_available())' 2>/dev/null ||
      die "--peers needs PyTorch with torch.distributed and gloo for $PY (Debian: apt-get install python3-torch)"
  fi
  [[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "--repeat wants a positive integer, not '$REPEAT'"
  for c in ${CODECS//,/ }; do
    if [[ "$c" =~ $SAPS_CODEC_RE ]]; then
      for m in ${MODELS//,/ }; do
        [ -f "$ROOT/examples/fmnist-$m-saps.yaml" ] || die "--codecs: '$c': the model '$m' has no saps example job"
      done
      continue
    fi
    [[ "$c" =~ ^(dense|fp16|sign|auto|(topk|gtopk|randk|dgc):[0-9.eE+-]+|qsgd:[1-8])$ ]] ||
      die "--codecs: '$c' is not a compression value (dense, topk:D, gtopk:D, randk:D, dgc:D, qsgd:BITS, fp16, sign, auto; docs/job-file.md)"
  done
  for r in ${RATES//,/ }; do
    rate_bps "$r" >/dev/null || die "--rates: '$r' is not a tc rate such as 100mbit, 1gbit, 10gbit"
  done
  if [ -n "$HOST_RATES" ]; then
    local hr=(${HOST_RATES//,/ })
    [ ${#hr[@]} = "$HOSTS" ] || die "--host-rates: ${#hr[@]} rates for $HOSTS hosts (one per host)"
    for r in "${hr[@]}"; do
      rate_bps "$r" >/dev/null || die "--host-rates: '$r' is not a tc rate such as 50mbit, 1gbit"
    done
    # One pass over the jobs; the run's rate (meta.json) is host 0's,
    # host_rates the whole list.
    RATES="${hr[0]}"
  fi
  if [ -z "$OUT" ]; then
    OUT="$HERE/results"
    # A heterogeneous network's runs name host 0's rate as theirs: kept
    # apart from the uniform rates' tables.
    if [ -n "$HOST_RATES$LINK_RATES" ]; then OUT="$HERE/results-hetero"; fi
  fi
  if [ -n "$LINK_RATES" ]; then
    [ -z "$HOST_RATES" ] || die "--link-rates and --host-rates: one or the other"
    [ -f "$LINK_RATES" ] || die "--link-rates: no file '$LINK_RATES'"
    LINK_RATES=$(cd "$(dirname "$LINK_RATES")" && pwd)/$(basename "$LINK_RATES")
    local row i=0 j
    while read -ra row; do
      [ ${#row[@]} = "$HOSTS" ] || die "--link-rates: line $((i + 1)) has ${#row[@]} rates for $HOSTS hosts"
      for ((j = 0; j < HOSTS; j++)); do
        [ "$j" = "$i" ] || rate_bps "${row[$j]}" >/dev/null ||
          die "--link-rates: line $((i + 1)): '${row[$j]}' is not a tc rate"
      done
      i=$((i + 1))
    done <"$LINK_RATES"
    [ "$i" = "$HOSTS" ] || die "--link-rates: $i lines for $HOSTS hosts"
    # The run's rate (meta.json): host 0's to host 1; link_rates the file.
    read -ra row < <(head -n 1 "$LINK_RATES")
    RATES="${row[1]}"
  fi
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
      ITERS="${ITERATIONS:-$(job_key "$(example_of "$m")" iterations 1000)}"
      EVERY="${EVAL_EVERY:-$([ "$m" = mlp ] && echo 25 || echo 100)}"
      case "$m" in cnn) TGT=0.89 ;; torch-cnn) TGT=0.88 ;; *) TGT=0.85 ;; esac
      TGT="${TARGET:-$TGT}"
      # --repeat: every codec and peer once, then again: interleaved, so
      # a slow spell of the machine falls on all of them alike.
      for ((k = 0; k < REPEAT; k++)); do
        for c in ${CODECS//,/ }; do
          for w in ${WORKERS//,/ }; do
            if [ -z "$OVERLAPS" ]; then
              run_job "$r" "$m" "$c" "$w"
            else
              for v in ${OVERLAPS//,/ }; do run_job "$r" "$m" "$c" "$w" "$v"; done
            fi
          done
        done
        for p in ${peers[@]+"${peers[@]}"}; do
          for w in ${WORKERS//,/ }; do run_peer "$r" "$m" "$p" "$w"; done
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
