#!/usr/bin/env bash
# shellcheck disable=SC1091 # the env files it sources are written at run time
# Runs the chart's pods with the built image, as far as this machine allows
# without Kubernetes: the rendered flsched Deployment, two flagent DaemonSet
# pods (nodes n1, n2) and the `helm test` pod are started with podman,
# each with exactly the command, arguments (with $(VAR) expanded), env,
# user, read-only root, dropped capabilities and volumes of its manifest
# (tests/deploy/podrun.mjs does what the kubelet would). Redis is the
# rendered StatefulSet's own command, run on this host with redis-server
# (no Redis image can be pulled here). Service names resolve to 127.0.0.1
# (--add-host) and every pod uses the host network.
#
# Checks: Redis takes its password from stdin (not argv) and answers the
# readiness probe; flsched's /healthz; the API refuses a request without
# the token; both agents register; the helm test pod (`flsubmit doctor`)
# passes; the ConfigMap's smoke job, submitted with flsubmit from a
# container, SUCCEEDS on the two agents, its tasks as a job uid; flagent
# runs as root (for the job uids), every other process as uid 10001.
#
# Needs: the image (scripts/image.sh build), redis-server, node and the
# packages of tests/deploy/package.json (tests/deploy/test_chart.sh installs
# them). Prints "N passed, M failed"; exits 1 on any failure.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
HELM="$HERE/node_modules/.helm/helm"
VERSION=$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' "$ROOT/helm/flps/Chart.yaml")
IMAGE="${FLPS_IMAGE:-localhost/flps:$VERSION}"

passed=0
failed=0
ok() {
  passed=$((passed + 1))
  echo "ok - $*"
}
not_ok() {
  failed=$((failed + 1))
  echo "not ok - $*"
}
check() { # name, command...
  local name=$1
  shift
  if "$@"; then ok "$name"; else not_ok "$name"; fi
}

[ -x "$HELM" ] || { echo "test_pods: run tests/deploy/test_chart.sh first (it installs helm)" >&2; exit 1; }
command -v podman >/dev/null || { echo "test_pods: podman is missing; run scripts/image.sh build first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "test_pods: run as root (rootful podman; volumes are given to uid 10001)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "test_pods: redis-server is missing (scripts/deps.sh)" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/flps-pods.XXXXXX")
chmod 0755 "$TMP"
CONTAINERS=()
REDIS_PID=""
cleanup() {
  local c
  for c in "${CONTAINERS[@]+"${CONTAINERS[@]}"}"; do podman rm -f -t 2 "$c" >/dev/null 2>&1 || true; done
  if [ -n "$REDIS_PID" ]; then kill "$REDIS_PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

"$ROOT/scripts/image.sh" conf "$TMP/containers.conf"
export CONTAINERS_CONF="$TMP/containers.conf"
podman image exists "$IMAGE" || { echo "test_pods: no image $IMAGE; run scripts/image.sh build" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
RPORT=$(free_port)
SPORT=$(free_port)
SPORT2=$(free_port)
APORT=$(free_port)
APORT2=$(free_port)
NS=flps
REL=t$$
# Fixed secrets, so that the second render (below) matches the first.
secret() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
# The agents launcher: the jobs run in the flagent pods started here (the
# kubernetes launcher's pods are tests/k8s/test_k8s.py's).
SETS=(--set launcher=agents --set redis.port="$RPORT" --set auth.token="$(secret)" --set redis.password="$(secret)"
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}")
"$HELM" template "$REL" "$ROOT/helm/flps" --namespace "$NS" "${SETS[@]}" --set scheduler.port="$SPORT" \
  --set agent.metrics.port="$APORT" >"$TMP/rendered.yaml"
# With host networking every replica would take the same port: the second
# flsched replica and the second agent come from a render that differs only
# in scheduler.port and agent.metrics.port.
"$HELM" template "$REL" "$ROOT/helm/flps" --namespace "$NS" "${SETS[@]}" --set scheduler.port="$SPORT2" \
  --set agent.metrics.port="$APORT2" >"$TMP/rendered2.yaml"
ok "rendered the chart (redis port $RPORT, API ports $SPORT and $SPORT2, agent metrics ports $APORT and $APORT2)"
FULL="$REL-flps"
HOSTS=(--add-host "$FULL-redis.$NS.svc:127.0.0.1" --add-host "$FULL-scheduler.$NS.svc:127.0.0.1")

podrun() { # KIND NAME CONTAINER TAG [KEY=VALUE ...] -> the podman args in $TMP/TAG.args
  local kind=$1 name=$2 container=$3 tag=$4
  shift 4
  (cd "$HERE" && node podrun.mjs "${RENDERED:-$TMP/rendered.yaml}" "$kind" "$name" "$container" "$TMP/$tag" "$@") >"$TMP/$tag.args"
}
start() { # TAG: podman run -d with the args of podrun
  local tag=$1 args
  mapfile -t args <"$TMP/$tag.args"
  CONTAINERS+=("flps-pods-$$-$tag")
  podman run -d --name "flps-pods-$$-$tag" --network=host "${HOSTS[@]}" "${args[@]}" >/dev/null
}
uid_of() { # TAG: the uid the container's main process runs as
  local pid
  pid=$(podman inspect --format '{{.State.Pid}}' "flps-pods-$$-$1")
  awk '/^Uid:/ { print $2 }' "/proc/$pid/status"
}

# ---- Redis: the StatefulSet's command, on this host -------------------------
(cd "$HERE" && node podrun.mjs "$TMP/rendered.yaml" StatefulSet "$FULL-redis" redis "$TMP/redis" --print-command) >"$TMP/redis.cmd"
mapfile -d '' rcmd <"$TMP/redis.cmd"
mkdir -p "$TMP/redis-data"
rcmd[2]=${rcmd[2]//--dir \/data/--dir $TMP/redis-data}
(
  set -a
  . "$TMP/redis/env"
  set +a
  exec "${rcmd[@]}"
) >"$TMP/redis.log" 2>&1 &
REDIS_PID=$!
pong=""
for _ in $(seq 50); do
  pong=$(set -a; . "$TMP/redis/env"; redis-cli -h 127.0.0.1 -p "$RPORT" ping 2>/dev/null) || true
  [ "$pong" = PONG ] && break
  sleep 0.1
done
check "Redis answers PING with the password (REDISCLI_AUTH, as the readiness probe)" [ "$pong" = PONG ]
check "Redis refuses a client without the password" \
  bash -c "redis-cli -h 127.0.0.1 -p $RPORT ping 2>&1 | grep -q NOAUTH"
RPASS=$(sed -n 's/^REDIS_PASSWORD=//p' "$TMP/redis/env")
rpid=$(pgrep -P "$REDIS_PID" -x redis-server || echo "$REDIS_PID")
check "Redis's password is neither in its command nor in its process's argv" \
  bash -c "! grep -q -- '$RPASS' '$TMP/redis.cmd' && ! tr '\0' ' ' </proc/$rpid/cmdline | grep -q -- '$RPASS'"
check "Redis runs with the append-only file" \
  bash -c "set -a; . '$TMP/redis/env'; redis-cli -h 127.0.0.1 -p $RPORT config get appendonly | grep -qx yes"

# ---- flsched -------------------------------------------------------------------
podrun Deployment "$FULL-scheduler" flsched sched pod="$FULL-scheduler-0"
start sched
code=""
for _ in $(seq 100); do
  code=$(curl -s -o "$TMP/healthz" -w '%{http_code}' "http://127.0.0.1:$SPORT/healthz" || true)
  [ "$code" = 200 ] && break
  sleep 0.1
done
check "flsched answers /healthz (the probes' path) with 200" [ "$code" = 200 ]
# /healthz answers 200 before the first election (a standby is healthy
# too): give the lone replica up to 10 s to take the lease.
for _ in $(seq 100); do
  grep -q '"leader":true,"redis":"ok"' "$TMP/healthz" && break
  sleep 0.1
  curl -s -o "$TMP/healthz" "http://127.0.0.1:$SPORT/healthz" || true
done
check "flsched is the leader and reaches Redis" grep -q '"leader":true,"redis":"ok"' "$TMP/healthz"
check "flsched runs as uid 10001" [ "$(uid_of sched)" = 10001 ]
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SPORT/v1/nodes" || true)
check "the API refuses a request without the token (401)" [ "$code" = 401 ]
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SPORT/metrics" || true)
check "flsched serves /metrics for the scrape annotations" [ "$code" = 200 ]

# ---- two agents ----------------------------------------------------------------
mkdir -p "$TMP/checkpoints"
chown 10001:10001 "$TMP/checkpoints"
for n in n1 n2; do
  r="$TMP/rendered.yaml"
  [ "$n" = n1 ] || r="$TMP/rendered2.yaml"
  RENDERED="$r" podrun DaemonSet "$FULL-agent" flagent "agent-$n" pod="$FULL-agent-$n" node="$n" ip=127.0.0.1 \
    vol:checkpoints="$TMP/checkpoints"
  start "agent-$n"
done
podrun Pod "$FULL-test-doctor" flsubmit test
TOKEN=$(sed -n 's/^FLPS_TOKEN=//p' "$TMP/test/env")
nodes=""
for _ in $(seq 100); do
  nodes=$(curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$SPORT/v1/nodes" || true)
  [ "$(grep -o '"state":"READY"' <<<"$nodes" | wc -l)" = 2 ] && break
  sleep 0.1
done
check "both agents registered, READY" [ "$(grep -o '"state":"READY"' <<<"$nodes" | wc -l)" = 2 ]
offer=$(python3 -c 'import json,sys; n=[x for x in json.loads(sys.argv[1])["nodes"] if x["name"]=="n1"][0]; print(n["address"], n["cpus"], n["memory"], n["gpus"])' "$nodes" 2>/dev/null || true)
check "agent n1 offers its container's limits (4 CPUs, 8Gi, no GPU) at its pod IP: $offer" [ "$offer" = "127.0.0.1 4 8589934592 0" ]
check "flagent runs as root, to run each job as a uid of its own" [ "$(uid_of agent-n1)" = 0 ]
for p in "$APORT" "$APORT2"; do
  check "flagent serves /metrics on its pod IP, port $p (the scrape annotation's)" \
    bash -c "curl -sf http://127.0.0.1:$p/metrics | grep -q '^flagent_build_info'"
done

# ---- the helm test pod -----------------------------------------------------------
mapfile -t targs <"$TMP/test.args"
if podman run --rm --network=host "${HOSTS[@]}" "${targs[@]}" >"$TMP/test.out" 2>&1 &&
  grep -q "OK    agents     2 alive: n1" "$TMP/test.out"; then
  ok "the helm test pod (flsubmit doctor) passes and sees n1 and n2"
else
  not_ok "the helm test pod: $(head -5 "$TMP/test.out")"
fi

# ---- a job through the cluster ------------------------------------------------------
# The ConfigMap's smoke job, submitted and watched with flsubmit in a
# container like the test pod.
node -e '
  const yaml = require(process.argv[1]);
  const objs = yaml.loadAll(require("fs").readFileSync(process.argv[2], "utf8")).filter(Boolean);
  process.stdout.write(objs.find((o) => o.kind === "ConfigMap").data["smoke.yaml"]);
' "$HERE/node_modules/js-yaml" "$TMP/rendered.yaml" >"$TMP/smoke.yaml"
chmod 0644 "$TMP/smoke.yaml"
job() { # TIMEOUT flsubmit-ARGS: flsubmit in a container with the test pod's env
  local t=$1 a
  shift
  mapfile -t a <"$TMP/test.args"
  # Everything before the image, then the image, then our own command.
  local n=${#a[@]} i img=-1
  for ((i = 0; i < n; i++)); do [ "${a[$i]}" = "$IMAGE" ] && img=$i && break; done
  timeout "$t" podman run --rm --network=host "${HOSTS[@]}" -v "$TMP/smoke.yaml:/job/smoke.yaml:ro" \
    "${a[@]:0:$img}" "$IMAGE" flsubmit "$@"
}
if id=$(job 60 submit /job/smoke.yaml 2>"$TMP/submit.err"); then
  ok "flsubmit submit (in a container) accepted the smoke job as $id"
  if job 180 watch "$id" >"$TMP/watch.out" 2>&1 &&
    grep -q "SUCCEEDED" "$TMP/watch.out"; then
    ok "the smoke job SUCCEEDED on the agents: $(grep -m1 'test accuracy' "$TMP/watch.out" | tr -s ' ')"
  else
    not_ok "the smoke job did not succeed: $(tail -5 "$TMP/watch.out")"
    podman logs "flps-pods-$$-agent-n1" 2>&1 | tail -10
  fi
else
  not_ok "flsubmit submit: $(cat "$TMP/submit.err")"
fi
check "checkpoints of the job are on the shared volume" bash -c "ls '$TMP/checkpoints' | grep -q ."
check "the smoke job's tasks ran as a job uid, not flagent's" \
  bash -c "podman logs flps-pods-$$-agent-n1 2>&1 | grep -q 'job uids: job .* runs as uid 60'"

# ---- a second flsched replica: one leader, and a hand-over -------------------------
RENDERED="$TMP/rendered2.yaml" podrun Deployment "$FULL-scheduler" flsched sched2 pod="$FULL-scheduler-1"
start sched2
healthz() { curl -s "http://127.0.0.1:$1/healthz" || true; }
for _ in $(seq 100); do
  [ -n "$(healthz "$SPORT2")" ] && break
  sleep 0.1
done
check "the second replica serves the API but does not lead" bash -c "grep -q '\"leader\":false' <<<'$(healthz "$SPORT2")' && grep -q '\"leader\":true' <<<'$(healthz "$SPORT")'"
podman stop -t 10 "flps-pods-$$-sched" >/dev/null
took=""
for i in $(seq 100); do
  if grep -q '"leader":true' <<<"$(healthz "$SPORT2")"; then took=$i; break; fi
  sleep 0.1
done
check "after the leader stops, the second replica leads (within $((${took:-100} / 10)).$((${took:-100} % 10)) s)" [ -n "$took" ]
check "no daemon logs the Redis password" bash -c \
  "! podman logs flps-pods-$$-sched 2>&1 | grep -qF -- '$RPASS' &&
   ! podman logs flps-pods-$$-agent-n1 2>&1 | grep -qF -- '$RPASS'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
