#!/usr/bin/env bash
# A local flps cluster on loopback: redis-server on a free port, flsched,
# and two flagents (n1, n2). State lives under $FLPS_CLUSTER_DIR
# (default /tmp/flps-cluster).
#   scripts/cluster.sh up      start it; prints `export FLPS_SCHEDULER=...`
#   scripts/cluster.sh down    stop everything it started
#   scripts/cluster.sh status  what runs, and the nodes
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/build/bin"
DIR="${FLPS_CLUSTER_DIR:-/tmp/flps-cluster}"
CPUS="${FLPS_AGENT_CPUS:-4}"
MEM="${FLPS_AGENT_MEMORY:-8Gi}"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_for_line() { # file, prefix, seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if grep -q "^$2" "$1" 2>/dev/null; then
      grep "^$2" "$1" | head -1 | sed "s/^$2//"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

up() {
  [ -x "$BIN/flsched" ] || { echo "cluster: build first (scripts/build.sh)" >&2; exit 1; }
  if [ -f "$DIR/pids" ]; then
    echo "cluster: already up (state in $DIR); run '$0 down' first" >&2
    exit 1
  fi
  mkdir -p "$DIR"
  local rport
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$DIR" --logfile "$DIR/redis.log" --daemonize no >/dev/null 2>&1 &
  echo "redis $!" >"$DIR/pids"
  for ((i = 0; i < 50; i++)); do
    redis-cli -p "$rport" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  local url="redis://127.0.0.1:$rport"
  # Loopback only: flsched refuses every interface without --listen-any.
  "$BIN/flsched" --redis "$url" --listen 127.0.0.1:0 >"$DIR/flsched.out" 2>"$DIR/flsched.log" &
  echo "flsched $!" >>"$DIR/pids"
  local api
  api=$(wait_for_line "$DIR/flsched.out" "listening on " 10) ||
    { echo "cluster: flsched did not start; see $DIR/flsched.log" >&2; down; exit 1; }
  for n in n1 n2; do
    "$BIN/flagent" --redis "$url" --name "$n" --cpus "$CPUS" --memory "$MEM" \
      --gpus 0 --work-dir "$DIR/$n" --checkpoint-root "$DIR/checkpoints" >"$DIR/flagent-$n.out" 2>"$DIR/flagent-$n.log" &
    echo "flagent-$n $!" >>"$DIR/pids"
  done
  echo "http://$api" >"$DIR/scheduler"
  # Both nodes registered before anyone submits.
  for ((i = 0; i < 100; i++)); do
    [ "$(redis-cli -p "$rport" scard flps:nodes 2>/dev/null)" = 2 ] && break
    sleep 0.1
  done
  echo "cluster: redis $url, flsched http://$api, agents n1 n2 ($CPUS CPUs, $MEM each); logs in $DIR" >&2
  echo "export FLPS_SCHEDULER=http://$api"
}

down() {
  [ -f "$DIR/pids" ] || return 0
  # Agents first (they stop their tasks), then the scheduler, then Redis.
  tac "$DIR/pids" | while read -r name pid; do
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$DIR/pids"
  echo "cluster: stopped (logs kept in $DIR)" >&2
}

status() {
  if [ ! -f "$DIR/pids" ]; then echo "cluster: not running"; return 0; fi
  while read -r name pid; do
    if kill -0 "$pid" 2>/dev/null; then echo "$name: running (pid $pid)"; else echo "$name: gone"; fi
  done <"$DIR/pids"
  FLPS_SCHEDULER=$(cat "$DIR/scheduler") "$BIN/flsubmit" nodes || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
