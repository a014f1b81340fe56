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
# The API asks for a token, generated likewise into $DIR/api-token (0600):
# flsubmit reads it through FLPS_TOKEN_FILE, which `up` prints with
# FLPS_SCHEDULER. Every file the cluster writes is its user's alone (umask
# 077; Redis's directory 0700); $DIR itself is passable (0711) so each job's
# tasks, which run as a uid of their own when the cluster runs as root
# (flagent --job-uids), reach their work directories. Run as another user,
# the agents say which isolation between jobs is missing.
# FLPS_JOB_UIDS=FIRST-LAST|off is passed to the agents' --job-uids.
set -euo pipefail
umask 077
cd "$(dirname "$0")/.."
BIN="${FLPS_BIN_DIR:-$PWD/build/bin}"
DIR="${FLPS_CLUSTER_DIR:-/tmp/flps-cluster}"
CPUS="${FLPS_AGENT_CPUS:-4}"
MEM="${FLPS_AGENT_MEMORY:-8Gi}"
PWFILE="$DIR/redis-password"
TOKENFILE="$DIR/api-token"
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

# A random secret of 24 bytes (48 hex digits) into file, unless it has one.
secret_file() { # file
  if [ ! -s "$1" ]; then
    od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$1"
    echo >>"$1"
  fi
  chmod 600 "$1"
}

# The password file and Redis's config (it holds the password: 0600 too);
# Redis's directory and what is in it (the append-only file holds every
# job's credentials) its owner's alone, also when made by an older script.
redis_setup() { # port
  mkdir -p "$DIR/redis"
  chmod -R go-rwx "$DIR/redis"
  (
    umask 077
    secret_file "$PWFILE"
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

# As root, each job's tasks run as a uid of their own, which must reach the
# programs they run. A tree under a private home (a clone in /root, the
# usual case on a fresh machine) lets only root through: then the programs,
# libflps and the Python package are copied into $DIR/stage (readable by
# all, like an install) and the agents run from there, rather than opening
# the user's home or running every job as root. A `command:` job's own
# files must still be reachable by the job uids; the line below says so.
stage_if_private() {
  [ "$(id -u)" = 0 ] && [ "${FLPS_JOB_UIDS:-}" != off ] || return 0
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    test -x "$BIN/flworker" 2>/dev/null && return 0
  local st="$DIR/stage" lib="$BIN/../lib" b
  rm -rf "$st"
  mkdir -p "$st/bin" "$st/lib" "$st/python"
  for b in flsched flagent flps flworker flpod flrun flsubmit; do
    [ -x "$BIN/$b" ] && cp "$BIN/$b" "$st/bin/"
  done
  if [ -d "$lib" ]; then
    cp -a "$lib"/libflps.so* "$st/lib/" 2>/dev/null || true
  fi
  [ -d python/flps ] && cp -r python/flps "$st/python/"
  find "$st/python" -name __pycache__ -prune -exec rm -rf {} +
  chmod -R a+rX "$st"
  echo "cluster: the job uids cannot reach $BIN (a private directory above it); its programs, libflps and the Python package were copied to $st and the agents run from there. A command: job's own files must be reachable by other users too (chmod o+rx, or FLPS_JOB_UIDS=off)" >&2
  BIN="$st/bin"
  export FLPS_BIN_DIR="$st/bin" FLPS_PYTHON_DIR="$st/python" FLPS_BUILD_DIR="$st"
}

up() {
  [ -x "$BIN/flsched" ] || { echo "cluster: build first (scripts/build.sh)" >&2; exit 1; }
  if [ -f "$DIR/pids" ]; then
    echo "cluster: already up (state in $DIR); run '$0 down' first" >&2
    exit 1
  fi
  mkdir -p "$DIR"
  chmod 711 "$DIR"
  stage_if_private
  local rport rpid
  rport=$(free_port)
  redis_setup "$rport"
  secret_file "$TOKENFILE"
  rpid=$(redis_start) || exit 1
  echo "redis $rpid" >"$DIR/pids"
  local url="redis://127.0.0.1:$rport"
  # Loopback only: flsched refuses every interface without --listen-any.
  # Any local user reaches the port: the token keeps them out.
  "$BIN/flsched" --redis "$url" --redis-password-file "$PWFILE" \
    --token-file "$TOKENFILE" \
    --listen 127.0.0.1:0 >"$DIR/flsched.out" 2>"$DIR/flsched.log" &
  echo "flsched $!" >>"$DIR/pids"
  local api
  api=$(wait_for_line "$DIR/flsched.out" "listening on " 10) ||
    { echo "cluster: flsched did not start; see $DIR/flsched.log" >&2; down; exit 1; }
  local uids=()
  [ -n "${FLPS_JOB_UIDS:-}" ] && uids=(--job-uids "$FLPS_JOB_UIDS")
  for n in n1 n2; do
    "$BIN/flagent" --redis "$url" --redis-password-file "$PWFILE" \
      --name "$n" --cpus "$CPUS" --memory "$MEM" "${uids[@]}" \
      --gpus 0 --work-dir "$DIR/$n" --checkpoint-root "$DIR/checkpoints" \
      --metrics 127.0.0.1:0 >"$DIR/flagent-$n.out" 2>"$DIR/flagent-$n.log" &
    echo "flagent-$n $!" >>"$DIR/pids"
  done
  echo "http://$api" >"$DIR/scheduler"
  # Both nodes registered before anyone submits.
  for ((i = 0; i < 100; i++)); do
    [ "$(rcli scard flps:nodes 2>/dev/null)" = 2 ] && break
    for n in n1 n2; do
      if ! kill -0 "$(awk -v n="flagent-$n" '$1 == n { print $2 }' "$DIR/pids")" 2>/dev/null; then
        echo "cluster: flagent $n stopped:" >&2
        tail -n 3 "$DIR/flagent-$n.log" >&2
        down
        exit 1
      fi
    done
    sleep 0.1
  done
  echo "cluster: redis $url (data in $DIR/redis, password in $PWFILE), flsched http://$api (token in $TOKENFILE), agents n1 n2 ($CPUS CPUs, $MEM each); logs in $DIR" >&2
  if [ "$(id -u)" != 0 ]; then
    echo "cluster: not root: every job's tasks run as $(id -un), so jobs can read each other's files; run it as root for a uid per job" >&2
  fi
  echo "cluster: Prometheus targets (http_sd) at http://$api/v1/metrics/targets" >&2
  echo "export FLPS_SCHEDULER=http://$api"
  echo "export FLPS_TOKEN_FILE=$TOKENFILE"
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
  FLPS_SCHEDULER=$(cat "$DIR/scheduler") FLPS_TOKEN_FILE="$TOKENFILE" \
    "$BIN/flsubmit" nodes || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  restart-redis) restart_redis ;;
  *) echo "usage: $0 up|down|status|restart-redis" >&2; exit 2 ;;
esac
