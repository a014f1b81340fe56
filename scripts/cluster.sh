#!/usr/bin/env bash
# A local flps cluster on loopback: redis-server on a free port, flsched,
# and two flagents (n1, n2). State lives under $FLPS_CLUSTER_DIR
# (default /tmp/flps-cluster).
#   scripts/cluster.sh up             start it; prints `export FLPS_SCHEDULER=...`
#   scripts/cluster.sh down           stop everything it started
#   scripts/cluster.sh status         what runs, and the nodes
#   scripts/cluster.sh restart-redis  kill redis-server (SIGKILL, as a crash
#                                     does) and start it again on its data
# Redis keeps its data in $DIR/redis (append-only file, fsynced every
# second), so jobs and the job-id counter survive a restart of Redis, and
# of the cluster on the same $DIR. It asks for a password, generated at the
# first `up` into $DIR/redis-password (mode 0600); flsched and the agents
# read it from that file (--redis-password-file), never from a command line.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${FLPS_BIN_DIR:-$PWD/build/bin}"
DIR="${FLPS_CLUSTER_DIR:-/tmp/flps-cluster}"
CPUS="${FLPS_AGENT_CPUS:-4}"
MEM="${FLPS_AGENT_MEMORY:-8Gi}"
PWFILE="$DIR/redis-password"
CONF="$DIR/redis.conf"

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

# redis-cli with the password from the environment (REDISCLI_AUTH), not argv.
rcli() {
  REDISCLI_AUTH="$(head -n 1 "$PWFILE")" redis-cli --no-auth-warning \
    -p "$(cat "$DIR/redis-port")" "$@"
}

# The password file and Redis's config (it holds the password: 0600 too).
redis_setup() { # port
  mkdir -p "$DIR/redis"
  (
    umask 077
    if [ ! -s "$PWFILE" ]; then
      od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$PWFILE"
      echo >>"$PWFILE"
    fi
    {
      echo "port $1"
      echo "bind 127.0.0.1"
      echo "dir $DIR/redis"
      echo "appendonly yes"
      echo "appendfsync everysec"
      echo "save \"\""
      echo "logfile $DIR/redis.log"
      echo "daemonize no"
      echo "requirepass $(head -n 1 "$PWFILE")"
    } >"$CONF"
  )
  chmod 600 "$PWFILE" "$CONF"
  echo "$1" >"$DIR/redis-port"
}

redis_start() {
  redis-server "$CONF" >/dev/null 2>&1 &
  local pid=$!
  for ((i = 0; i < 100; i++)); do
    [ "$(rcli ping 2>/dev/null)" = PONG ] && { echo "$pid"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "cluster: redis-server did not start; see $DIR/redis.log" >&2
  return 1
}

up() {
  [ -x "$BIN/flsched" ] || { echo "cluster: build first (scripts/build.sh)" >&2; exit 1; }
  if [ -f "$DIR/pids" ]; then
    echo "cluster: already up (state in $DIR); run '$0 down' first" >&2
    exit 1
  fi
  mkdir -p "$DIR"
  local rport rpid
  rport=$(free_port)
  redis_setup "$rport"
  rpid=$(redis_start) || exit 1
  echo "redis $rpid" >"$DIR/pids"
  local url="redis://127.0.0.1:$rport"
  # Loopback only: flsched refuses every interface without --listen-any.
  "$BIN/flsched" --redis "$url" --redis-password-file "$PWFILE" \
    --listen 127.0.0.1:0 >"$DIR/flsched.out" 2>"$DIR/flsched.log" &
  echo "flsched $!" >>"$DIR/pids"
  local api
  api=$(wait_for_line "$DIR/flsched.out" "listening on " 10) ||
    { echo "cluster: flsched did not start; see $DIR/flsched.log" >&2; down; exit 1; }
  for n in n1 n2; do
    "$BIN/flagent" --redis "$url" --redis-password-file "$PWFILE" \
      --name "$n" --cpus "$CPUS" --memory "$MEM" \
      --gpus 0 --work-dir "$DIR/$n" --checkpoint-root "$DIR/checkpoints" \
      --metrics 127.0.0.1:0 >"$DIR/flagent-$n.out" 2>"$DIR/flagent-$n.log" &
    echo "flagent-$n $!" >>"$DIR/pids"
  done
  echo "http://$api" >"$DIR/scheduler"
  # Both nodes registered before anyone submits.
  for ((i = 0; i < 100; i++)); do
    [ "$(rcli scard flps:nodes 2>/dev/null)" = 2 ] && break
    sleep 0.1
  done
  echo "cluster: redis $url (data in $DIR/redis, password in $PWFILE), flsched http://$api, agents n1 n2 ($CPUS CPUs, $MEM each); logs in $DIR" >&2
  echo "cluster: Prometheus targets (http_sd) at http://$api/v1/metrics/targets" >&2
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

restart_redis() {
  [ -f "$DIR/pids" ] || { echo "cluster: not running" >&2; exit 1; }
  local old new
  old=$(awk '$1 == "redis" { print $2 }' "$DIR/pids")
  kill -KILL "$old" 2>/dev/null || true
  while kill -0 "$old" 2>/dev/null; do sleep 0.1; done
  new=$(redis_start) || exit 1
  sed -i "s/^redis $old\$/redis $new/" "$DIR/pids"
  echo "cluster: redis-server restarted (pid $new) on its data in $DIR/redis" >&2
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
  restart-redis) restart_redis ;;
  *) echo "usage: $0 up|down|status|restart-redis" >&2; exit 2 ;;
esac
