// Offline checks of the objects `helm template` renders from helm/flps.
//
//   node validate.mjs SCENARIO RENDERED.yaml [SCENARIO RENDERED.yaml ...]
//   node validate.mjs --objects NAME OBJECTS.json CHART.yaml [NAME OBJECTS.json CHART.yaml ...]
//
// SCENARIO is one of default (launcher kubernetes), agents, kubernetes, rdma,
// external-redis, gpu, minimal, monitoring (the values files of tests/deploy/). For every object:
//   1. kubernetes-models: types, enum values, required fields, quantities;
//   2. a walk over @kubernetes/client-node's generated models: unknown
//      fields (kubernetes-models lets them through);
// and then the chart's own rules: kinds, images, ports, probes, resources,
// security contexts, that every $(VAR) in args is defined, that no secret
// value appears outside a Secret, what each scenario turns on, and that the
// kubernetes launcher's Role grants exactly the verbs of scheduler/k8s_api.h.
// --objects checks what flsched's kubernetes launcher creates (a JSON array
// from tests/k8s/k8s_render, rendered with the flags CHART.yaml's flsched
// gets): the same two schema checks, the JobSet API's types (jobset_types.go
// of kubernetes-sigs/jobset, v1alpha2) and Volcano's PodGroup fields for the
// custom kinds, and the launcher's rules (objects.mjs).
// Prints one line per check, "ok - ..." or "not ok - ...", then
// "validate: P passed, F failed"; exits 1 when anything failed.
import fs from "node:fs";
import path from "node:path";
import yaml from "js-yaml";
// Only the generated models: the package's index needs Node 22.
import * as gen from "@kubernetes/client-node/dist/gen/models/all.js";

let passed = 0;
let failed = 0;
function check(name, cond, why = "") {
  if (cond) {
    passed++;
    console.log(`ok - ${name}`);
  } else {
    failed++;
    console.log(`not ok - ${name}${why ? `: ${why}` : ""}`);
  }
  return cond;
}

// ---- 1. kubernetes-models ---------------------------------------------------
async function modelsClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  const path = group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/${version}/${kind}`;
  try {
    const m = await import(path);
    return m[kind];
  } catch {
    return null;
  }
}

// ---- 2. unknown fields, through client-node's attribute maps ----------------
const PRIMITIVES = new Set(["string", "number", "boolean", "Date", "any", "object", "IntOrString"]);
function genClassName(apiVersion, kind) {
  if (!apiVersion.includes("/")) return `V1${kind}`;
  const [group, version] = apiVersion.split("/");
  const v = version.charAt(0).toUpperCase() + version.slice(1);
  // apps/v1 Deployment -> V1Deployment; policy/v1 PodDisruptionBudget -> V1PodDisruptionBudget.
  if (["apps", "policy", "batch", "networking.k8s.io", "rbac.authorization.k8s.io"].includes(group)) return `${v}${kind}`;
  return null;
}

function walk(value, type, path, errors) {
  if (value === null || value === undefined) return;
  if (type === "string") {
    // Quantities are strings in the models; YAML numbers are fine there.
    if (typeof value !== "string" && !(typeof value === "number" && /(limits|requests|capacity|storage)/.test(path)))
      errors.push(`${path}: expected a string, got ${typeof value}`);
    return;
  }
  if (type === "number") {
    if (typeof value !== "number") errors.push(`${path}: expected a number, got ${typeof value}`);
    return;
  }
  if (type === "boolean") {
    if (typeof value !== "boolean") errors.push(`${path}: expected a boolean, got ${typeof value}`);
    return;
  }
  if (type === "IntOrString") {
    if (typeof value !== "number" && typeof value !== "string") errors.push(`${path}: expected an int or a string`);
    return;
  }
  if (PRIMITIVES.has(type)) return;
  let m = /^Array<(.+)>$/.exec(type);
  if (m) {
    if (!Array.isArray(value)) return errors.push(`${path}: expected a list`);
    value.forEach((v, i) => walk(v, m[1], `${path}[${i}]`, errors));
    return;
  }
  m = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (m) {
    if (typeof value !== "object" || Array.isArray(value)) return errors.push(`${path}: expected a mapping`);
    for (const [k, v] of Object.entries(value)) walk(v, m[1], `${path}.${k}`, errors);
    return;
  }
  const cls = gen[type];
  if (!cls || typeof cls.getAttributeTypeMap !== "function") return errors.push(`${path}: no model ${type}`);
  if (typeof value !== "object" || Array.isArray(value)) return errors.push(`${path}: expected a ${type} mapping`);
  const attrs = new Map(cls.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(value)) {
    if (!attrs.has(k)) errors.push(`${path}.${k}: unknown field of ${type}`);
    else walk(v, attrs.get(k), `${path}.${k}`, errors);
  }
}

// The ServiceMonitor CRD is not in either package: its fields the chart uses.
const SERVICE_MONITOR = {
  top: ["apiVersion", "kind", "metadata", "spec"],
  spec: ["selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels", "podTargetLabels", "sampleLimit"],
  endpoint: ["port", "targetPort", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "bearerTokenSecret", "authorization", "tlsConfig", "relabelings", "metricRelabelings", "params"],
};
function checkServiceMonitor(o) {
  const errors = [];
  for (const k of Object.keys(o)) if (!SERVICE_MONITOR.top.includes(k)) errors.push(`.${k}: unknown`);
  walk(o.metadata, "V1ObjectMeta", ".metadata", errors);
  const spec = o.spec || {};
  for (const k of Object.keys(spec)) if (!SERVICE_MONITOR.spec.includes(k)) errors.push(`.spec.${k}: unknown`);
  walk(spec.selector, "V1LabelSelector", ".spec.selector", errors);
  if (!Array.isArray(spec.endpoints) || spec.endpoints.length === 0) errors.push(".spec.endpoints: required, a non-empty list");
  for (const [i, e] of (spec.endpoints || []).entries()) {
    for (const k of Object.keys(e)) if (!SERVICE_MONITOR.endpoint.includes(k)) errors.push(`.spec.endpoints[${i}].${k}: unknown`);
    for (const k of ["interval", "scrapeTimeout"])
      if (e[k] !== undefined && !/^[0-9]+(ms|s|m|h)$/.test(e[k])) errors.push(`.spec.endpoints[${i}].${k}: not a duration`);
  }
  return errors;
}

// ---- helpers over rendered objects ------------------------------------------
const FLPS_CONTAINERS = new Set(["flsched", "flagent", "flsubmit"]);
// The flags of the binaries (flsched --help, flagent --help, docs/scheduler.md, docs/flagent.md).
const FLAGS = {
  flsched: new Set(["--redis", "--listen", "--listen-any", "--id", "--token-file", "--node-ttl", "--lease-ms", "--launcher",
    "--k8s-api", "--k8s-token-file", "--k8s-ca-file", "--k8s-namespace", "--k8s-prefix", "--k8s-image", "--k8s-pull-policy",
    "--k8s-scheduler-url", "--k8s-checkpoint-claim", "--k8s-service-account", "--k8s-shard-port", "--k8s-metrics-port", "--k8s-jobset", "--k8s-image-pull-grace"]),
  flagent: new Set(["--redis", "--name", "--cpus", "--memory", "--gpus", "--address", "--work-dir", "--checkpoint-root", "--heartbeat", "--metrics", "--job-uids"]),
  flsubmit: new Set(["--scheduler", "--json"]),
};
const REQUIRED_FLAGS = {
  flsched: ["--redis", "--listen", "--token-file"],
  flagent: ["--redis", "--name", "--cpus", "--memory", "--gpus", "--address"],
  flsubmit: [],
};

function podSpecOf(o) {
  if (o.kind === "Pod") return o.spec;
  if (["Deployment", "StatefulSet", "DaemonSet"].includes(o.kind)) return o.spec?.template?.spec;
  return null;
}
function podLabelsOf(o) {
  return o.kind === "Pod" ? o.metadata?.labels : o.spec?.template?.metadata?.labels;
}
function flagValue(args, flag) {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}
// The Redis password reaches a container only as a file of a mounted Secret
// (FLPS_REDIS_PASSWORD_FILE), readable by owner and group (root and the
// fsGroup), never by others such as the job uids, and never as a variable.
function passwordFileOk(spec, c) {
  const env = c.env || [];
  const pf = env.find((e) => e.name === "FLPS_REDIS_PASSWORD_FILE")?.value;
  const mount = (c.volumeMounts || []).find((m) => pf?.startsWith(m.mountPath + "/"));
  const vol = mount && (spec.volumes || []).find((v) => v.name === mount.name);
  return !env.some((e) => e.name === "FLPS_REDIS_PASSWORD") && !!vol?.secret?.secretName && (vol.secret.defaultMode & 0o007) === 0 && vol.secret.items?.some((i) => pf.endsWith("/" + i.path)) && mount.readOnly === true;
}

function find(objs, kind, suffix) {
  return objs.filter((o) => o.kind === kind && (!suffix || o.metadata.name.endsWith(suffix)));
}
function matches(selector, labels) {
  return Object.entries(selector || {}).every(([k, v]) => labels?.[k] === v);
}

const EXPECT = {
  default: {
    kinds: { ServiceAccount: 1, Secret: 2, ConfigMap: 1, PersistentVolumeClaim: 1, Service: 2, Deployment: 1, StatefulSet: 1, PodDisruptionBudget: 1, Pod: 1, Role: 1, RoleBinding: 1 },
    image: "localhost/flps:0.4.0",
    replicas: 2,
    launcher: "kubernetes",
    jobImage: "localhost/flps:0.4.0",
    jobset: "auto",
    ports: [7070, 9100],
  },
  agents: {
    kinds: { ServiceAccount: 1, Secret: 2, ConfigMap: 1, PersistentVolumeClaim: 1, Service: 2, Deployment: 1, StatefulSet: 1, DaemonSet: 1, PodDisruptionBudget: 1, Pod: 1 },
    image: "localhost/flps:0.4.0",
    replicas: 2,
  },
  kubernetes: {
    kinds: { ServiceAccount: 1, Secret: 2, ConfigMap: 1, Service: 2, Deployment: 1, StatefulSet: 1, PodDisruptionBudget: 1, Pod: 1, Role: 1, RoleBinding: 1 },
    image: "localhost/flps:0.4.0",
    replicas: 2,
    launcher: "kubernetes",
    jobImage: "registry.example.com/team/flps-torch:1.0",
    jobset: "never",
    claim: "team-checkpoints",
    jobServiceAccount: "flps-jobs",
    ports: [7100, 9300],
  },
  rdma: {
    kinds: { ServiceAccount: 1, Secret: 2, ConfigMap: 1, Service: 2, Deployment: 1, StatefulSet: 1, DaemonSet: 1, PodDisruptionBudget: 1, Pod: 1 },
    image: "localhost/flps:0.4.0",
    replicas: 2,
  },
  "external-redis": {
    kinds: { ServiceAccount: 1, ConfigMap: 1, Service: 1, Deployment: 1, DaemonSet: 1, PodDisruptionBudget: 1, Pod: 1 },
    image: "localhost/flps:0.4.0",
    replicas: 3,
  },
  gpu: {
    kinds: { ServiceAccount: 1, Secret: 2, ConfigMap: 1, PersistentVolumeClaim: 1, Service: 2, Deployment: 1, StatefulSet: 1, DaemonSet: 1, PodDisruptionBudget: 1, Pod: 1, ServiceMonitor: 1 },
    image: "localhost:5000/flps:0.2.0-test",
    replicas: 2,
  },
  minimal: {
    kinds: { Secret: 2, ConfigMap: 1, Service: 2, Deployment: 1, StatefulSet: 1, DaemonSet: 1 },
    image: "localhost/flps:0.4.0",
    replicas: 1,
    noServiceAccount: true,
    noPdb: true,
    noTestPod: true,
    noScrape: true,
    agentMetricsPort: 0,
    gpus: 1,
    rdma: true,
    noJobUids: true,
  },
  monitoring: {
    kinds: { ServiceAccount: 1, Secret: 2, ConfigMap: 2, PersistentVolumeClaim: 1, Service: 2, Deployment: 1, StatefulSet: 1, DaemonSet: 1, PodDisruptionBudget: 1, Pod: 1, ServiceMonitor: 1 },
    image: "localhost/flps:0.4.0",
    replicas: 2,
    agentMetricsPort: 9200,
    dashboard: { namespace: "monitoring", annotations: { grafana_folder: "flps" } },
  },
};
// The dashboard the chart ships, to compare with the rendered ConfigMap.
const DASHBOARD_FILE = path.join(path.dirname(new URL(import.meta.url).pathname), "../../helm/flps/dashboards/flps-job.json");
for (const [k, e] of Object.entries(EXPECT)) {
  if (e.launcher === undefined) e.launcher = "agents";
  if (e.gpus === undefined) e.gpus = k === "gpu" ? 2 : 0;
  if (e.rdma === undefined) e.rdma = k === "rdma";
  if (e.agentMetricsPort === undefined) e.agentMetricsPort = 9101;
}

// Both schema checks of one object of a kind the packages know.
async function checkModels(o, P) {
  const id = `${o.kind}/${o.metadata?.name}`;
  const Cls = await modelsClass(o.apiVersion, o.kind);
  if (check(P(`${id} is a known kind (${o.apiVersion})`), !!Cls)) {
    let err = "";
    try {
      new Cls(o).validate();
    } catch (e) {
      err = e.message;
    }
    check(P(`${id} is valid for kubernetes-models`), err === "", err);
  }
  const gname = genClassName(o.apiVersion, o.kind);
  const errs = [];
  if (!gname || !gen[gname]) errs.push(`no client-node model for ${o.apiVersion} ${o.kind}`);
  else walk(o, gname, "", errs);
  check(P(`${id} has no unknown fields (client-node ${gname})`), errs.length === 0, errs.join("; "));
}

async function validateScenario(scenario, file) {
  const exp = EXPECT[scenario];
  if (!check(`${scenario}: known scenario`, !!exp, `expected one of ${Object.keys(EXPECT).join(", ")}`)) return;
  const objs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((o) => o && typeof o === "object");
  const P = (name) => `${scenario}: ${name}`;

  // -- every object against both schemas
  for (const o of objs) {
    const id = `${o.kind}/${o.metadata?.name}`;
    if (o.apiVersion === "monitoring.coreos.com/v1" && o.kind === "ServiceMonitor") {
      const errs = checkServiceMonitor(o);
      check(P(`${id} has only known ServiceMonitor fields`), errs.length === 0, errs.join("; "));
      continue;
    }
    await checkModels(o, P);
  }

  // -- kinds
  const kinds = {};
  for (const o of objs) kinds[o.kind] = (kinds[o.kind] || 0) + 1;
  check(P("the kinds rendered"), JSON.stringify(Object.entries(kinds).sort()) === JSON.stringify(Object.entries(exp.kinds).sort()), `got ${JSON.stringify(kinds)}, want ${JSON.stringify(exp.kinds)}`);
  const names = objs.map((o) => `${o.kind}/${o.metadata.name}`);
  check(P("object names are unique"), new Set(names).size === names.length);
  check(P("every name is a DNS label of at most 63 characters"), objs.every((o) => /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(o.metadata.name) && o.metadata.name.length <= 63));

  // -- secrets never appear outside a Secret
  const secretValues = [];
  for (const s of find(objs, "Secret")) for (const v of Object.values(s.data || {})) secretValues.push(Buffer.from(v, "base64").toString());
  const outside = JSON.stringify(objs.filter((o) => o.kind !== "Secret"));
  check(P("no secret value appears outside a Secret"), secretValues.every((v) => v.length >= 16 && !outside.includes(v)));

  // -- every pod: security, resources, env
  const pods = objs.filter((o) => podSpecOf(o));
  for (const o of pods) {
    const id = `${o.kind}/${o.metadata.name}`;
    const spec = podSpecOf(o);
    const psc = spec.securityContext || {};
    check(P(`${id}: pod runs as non-root uid 10001`), psc.runAsNonRoot === true && psc.runAsUser === 10001 && psc.runAsGroup === 10001 && psc.seccompProfile?.type === "RuntimeDefault");
    const isSched = o.kind === "Deployment" && o.metadata.name.endsWith("-scheduler");
    if (isSched && exp.launcher === "kubernetes") check(P(`${id}: the service account token for the kubernetes launcher`), spec.automountServiceAccountToken === true);
    else check(P(`${id}: no service account token`), spec.automountServiceAccountToken === false);
    const sa = spec.serviceAccountName;
    check(P(`${id}: service account ${exp.noServiceAccount ? "default" : "of the release"}`), exp.noServiceAccount ? sa === "default" : find(objs, "ServiceAccount").some((x) => x.metadata.name === sa));
    for (const c of spec.containers) {
      const cid = `${id} ${c.name}`;
      const sc = c.securityContext || {};
      const isAgent = c.name === "flagent";
      // flagent with job uids: root, to start each job's tasks as its own
      // uid, with the six capabilities that takes (all in Pod Security
      // "baseline"); everything else runs as uid 10001 with none.
      const rootAgent = isAgent && !exp.noJobUids;
      const wantAdd = (rootAgent ? ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"] : []).concat(isAgent && exp.rdma ? ["IPC_LOCK"] : []);
      if (rootAgent) check(P(`${cid}: root for the job uids, no privilege escalation, read-only root`), sc.runAsNonRoot === false && sc.runAsUser === 0 && sc.runAsGroup === 0 && sc.allowPrivilegeEscalation === false && sc.privileged === false && sc.readOnlyRootFilesystem === true);
      else check(P(`${cid}: non-root, no privilege escalation, read-only root`), sc.runAsNonRoot === true && sc.runAsUser === 10001 && sc.allowPrivilegeEscalation === false && sc.privileged === false && sc.readOnlyRootFilesystem === true);
      check(P(`${cid}: capabilities drop ALL, add ${JSON.stringify(wantAdd)}`), JSON.stringify(sc.capabilities?.drop) === '["ALL"]' && JSON.stringify(sc.capabilities?.add || []) === JSON.stringify(wantAdd));
      check(P(`${cid}: memory request and limit`), !!c.resources?.requests?.memory && !!c.resources?.limits?.memory);
      if (FLPS_CONTAINERS.has(c.name)) check(P(`${cid}: image ${exp.image}`), c.image === exp.image, `got ${c.image}`);
      else check(P(`${cid}: redis image`), c.name === "redis" && /^redis:/.test(c.image), `got ${c.image}`);
      // Kubernetes leaves $(VAR) as it is when VAR is not in env.
      const envNames = new Set((c.env || []).map((e) => e.name));
      const refs = [...(c.args || []), ...(c.command || [])].join(" ").match(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g) || [];
      const undefinedRefs = refs.map((r) => r.slice(2, -1)).filter((n) => !envNames.has(n));
      check(P(`${cid}: every $(VAR) in command/args is in env`), undefinedRefs.length === 0, undefinedRefs.join(", "));
      // Every ConfigMap / Secret a container refers to is rendered or given.
      for (const e of c.env || []) {
        const cm = e.valueFrom?.configMapKeyRef;
        if (cm) {
          const m = find(objs, "ConfigMap").find((x) => x.metadata.name === cm.name);
          check(P(`${cid}: env ${e.name} from ConfigMap ${cm.name} key ${cm.key}`), !!m && cm.key in (m.data || {}));
        }
        const sk = e.valueFrom?.secretKeyRef;
        if (sk) {
          const s = find(objs, "Secret").find((x) => x.metadata.name === sk.name);
          const external = scenario === "external-redis" && ["infra-redis", "flps-api-token"].includes(sk.name);
          check(P(`${cid}: env ${e.name} from Secret ${sk.name} key ${sk.key}`), external || (!!s && sk.key in (s.data || {})));
        }
      }
      // Only real flags, and the required ones.
      if (FLAGS[c.name]) {
        const args = c.args || [];
        const flags = args.filter((a) => a.startsWith("--"));
        const bad = flags.filter((f) => !FLAGS[c.name].has(f));
        check(P(`${cid}: only flags ${c.name} has`), bad.length === 0, bad.join(", "));
        const missing = REQUIRED_FLAGS[c.name].filter((f) => !flags.includes(f));
        check(P(`${cid}: the flags ${c.name} requires`), missing.length === 0, missing.join(", "));
        check(P(`${cid}: command is ${c.name}`), JSON.stringify(c.command) === JSON.stringify([c.name]));
      }
    }
    const mounts = spec.containers.flatMap((c) => (c.volumeMounts || []).map((m) => m.name));
    const vols = new Set((spec.volumes || []).map((v) => v.name).concat((o.spec.volumeClaimTemplates || []).map((v) => v.metadata.name)));
    check(P(`${id}: every volume mount has a volume`), mounts.every((m) => vols.has(m)), mounts.filter((m) => !vols.has(m)).join(", "));
    const ro = spec.containers.every((c) => (c.volumeMounts || []).some((m) => m.mountPath === "/tmp"));
    check(P(`${id}: a writable /tmp under the read-only root`), o.kind === "Pod" || ro);
  }

  // -- flsched
  const [dep] = find(objs, "Deployment", "-scheduler");
  if (check(P("flsched Deployment"), !!dep)) {
    const c = dep.spec.template.spec.containers.find((x) => x.name === "flsched");
    check(P(`flsched replicas ${exp.replicas}`), dep.spec.replicas === exp.replicas);
    const port = c.ports?.find((p) => p.name === "http");
    check(P("flsched port http 8080"), port?.containerPort === 8080 && flagValue(c.args, "--listen") === "0.0.0.0:8080");
    // flsched refuses every interface unless it is asked for explicitly.
    check(P("flsched --listen-any with 0.0.0.0"), c.args.includes("--listen-any"));
    for (const pr of ["readinessProbe", "livenessProbe"])
      check(P(`flsched ${pr} GET /healthz on http`), c[pr]?.httpGet?.path === "/healthz" && c[pr]?.httpGet?.port === "http");
    check(P("flsched --id is the pod name"), flagValue(c.args, "--id") === "$(POD_NAME)" && c.env.some((e) => e.name === "POD_NAME" && e.valueFrom?.fieldRef?.fieldPath === "metadata.name"));
    const tf = flagValue(c.args, "--token-file");
    const mount = c.volumeMounts.find((m) => tf?.startsWith(m.mountPath + "/"));
    const vol = mount && dep.spec.template.spec.volumes.find((v) => v.name === mount.name);
    check(P("flsched --token-file is in a mounted Secret"), !!vol?.secret?.secretName && vol.secret.items?.some((i) => tf.endsWith("/" + i.path)) && (vol.secret.defaultMode & 0o040) !== 0);
    const ann = dep.spec.template.metadata.annotations || {};
    if (exp.noScrape) check(P("flsched pods have no scrape annotations"), !("prometheus.io/scrape" in ann));
    else check(P("flsched pods have the Prometheus scrape annotations"), ann["prometheus.io/scrape"] === "true" && ann["prometheus.io/port"] === "8080" && ann["prometheus.io/path"] === "/metrics");
    const redis = flagValue(c.args, "--redis");
    if (scenario === "external-redis") check(P("flsched --redis is the external URL, no password in it"), redis === "redis://redis.infra.svc:6380/2", redis);
    else check(P("flsched --redis is the release's Redis, no password in it"), /^redis:\/\/[a-z0-9-]+-redis\.[a-z0-9-]+\.svc:6379\/0$/.test(redis), redis);
    check(P("flsched reads the Redis password from a mounted Secret file"), passwordFileOk(dep.spec.template.spec, c));
    const [svc] = find(objs, "Service", "-scheduler");
    check(P("flsched Service selects the flsched pods"), !!svc && matches(svc.spec.selector, dep.spec.template.metadata.labels));
    check(P("flsched Service port http to the pod's http"), svc?.spec.ports?.[0]?.port === 8080 && svc.spec.ports[0].targetPort === "http");
    if (exp.noScrape) check(P("flsched Service has no scrape annotations"), !svc?.metadata.annotations?.["prometheus.io/scrape"]);
    else check(P("flsched Service has the Prometheus scrape annotations"), svc?.metadata.annotations?.["prometheus.io/scrape"] === "true");
    const [pdb] = find(objs, "PodDisruptionBudget");
    if (exp.noPdb) check(P("no PDB for one replica"), !pdb);
    else check(P("the PDB selects the flsched pods"), !!pdb && matches(pdb.spec.selector.matchLabels, dep.spec.template.metadata.labels));
  }

  // -- the kubernetes launcher: flsched's flags, its Role and the claim
  checkLauncher(objs, exp, P);

  // -- flagent
  const [ds] = find(objs, "DaemonSet", "-agent");
  if (exp.launcher === "kubernetes") check(P("no flagent DaemonSet with launcher kubernetes"), !ds);
  else if (check(P("flagent DaemonSet"), !!ds)) {
    const spec = ds.spec.template.spec;
    const c = spec.containers.find((x) => x.name === "flagent");
    const env = Object.fromEntries(c.env.map((e) => [e.name, e]));
    check(P("flagent --name is the node name"), flagValue(c.args, "--name") === "$(NODE_NAME)" && env.NODE_NAME?.valueFrom?.fieldRef?.fieldPath === "spec.nodeName");
    check(P("flagent --address is the pod IP"), flagValue(c.args, "--address") === "$(POD_IP)" && env.POD_IP?.valueFrom?.fieldRef?.fieldPath === "status.podIP");
    check(P("flagent work dir and checkpoint root are mounted"), ["--work-dir", "--checkpoint-root"].every((f) => c.volumeMounts.some((m) => m.mountPath === flagValue(c.args, f))));
    const ckVol = spec.volumes.find((v) => v.name === "checkpoints");
    const workVol = spec.volumes.find((v) => v.name === "work");
    check(P("flagent work dir is an emptyDir"), !!workVol?.emptyDir);
    check(P("flagent FLPS_BIN_DIR is the image's"), env.FLPS_BIN_DIR?.valueFrom?.configMapKeyRef?.key === "FLPS_BIN_DIR");
    check(P("flagent reads the Redis password from a mounted Secret file"), passwordFileOk(spec, c));
    if (exp.noJobUids) check(P("flagent runs every task as its own uid (no --job-uids)"), !c.args.includes("--job-uids") && !spec.volumes.some((v) => v.name === "job-uids"));
    else check(P("flagent --job-uids 60000-60999 with its records on an emptyDir"), flagValue(c.args, "--job-uids") === "60000-60999" && c.volumeMounts.some((m) => m.mountPath === "/var/lib/flps/job-uids" && spec.volumes.find((v) => v.name === m.name)?.emptyDir));
    const ann = ds.spec.template.metadata.annotations || {};
    const mport = exp.agentMetricsPort;
    if (mport) {
      check(P(`flagent --metrics is the pod IP, port ${mport}`), flagValue(c.args, "--metrics") === `$(POD_IP):${mport}`, flagValue(c.args, "--metrics"));
      check(P(`flagent declares its metrics port ${mport}`), c.ports?.length === 1 && c.ports[0].name === "metrics" && c.ports[0].containerPort === mport && c.ports[0].protocol === "TCP", JSON.stringify(c.ports));
    } else {
      check(P("flagent runs without --metrics and declares no port"), !c.args.includes("--metrics") && !c.ports);
    }
    if (mport && !exp.noScrape)
      check(P(`flagent pods have the Prometheus scrape annotations (port ${mport})`), ann["prometheus.io/scrape"] === "true" && ann["prometheus.io/port"] === String(mport) && ann["prometheus.io/path"] === "/metrics", JSON.stringify(ann));
    else check(P("flagent pods have no scrape annotations"), !Object.keys(ann).some((k) => k.startsWith("prometheus.io/")), JSON.stringify(ann));
    if (exp.gpus > 0) {
      const g = String(exp.gpus);
      check(P(`flagent asks for ${g} nvidia.com/gpu`), c.resources.limits["nvidia.com/gpu"] === g && c.resources.requests["nvidia.com/gpu"] === g);
      check(P(`flagent --gpus ${g}`), flagValue(c.args, "--gpus") === g);
    } else {
      check(P("flagent asks for no GPU and offers --gpus 0"), !JSON.stringify(c.resources).includes("nvidia.com/gpu") && flagValue(c.args, "--gpus") === "0");
    }
    if (scenario === "gpu") {
      check(P("flagent offers the given --cpus 16 and --memory 60Gi"), flagValue(c.args, "--cpus") === "16" && flagValue(c.args, "--memory") === "60Gi");
      check(P("flagent runs on GPU nodes and tolerates their taint"), spec.nodeSelector?.["nvidia.com/gpu.present"] === "true" && spec.tolerations?.some((t) => t.key === "nvidia.com/gpu"));
    } else {
      check(P("flagent offers its CPU and memory limits"), flagValue(c.args, "--cpus") === "$(AGENT_CPUS)" && env.AGENT_CPUS?.valueFrom?.resourceFieldRef?.resource === "limits.cpu" && flagValue(c.args, "--memory") === "$(AGENT_MEMORY)" && env.AGENT_MEMORY?.valueFrom?.resourceFieldRef?.resource === "limits.memory" && !!c.resources.limits.cpu);
    }
    if (exp.rdma) check(P("flagent asks for the RDMA device"), c.resources.limits["rdma/hca_shared_devices_a"] === "1");
    else check(P("flagent asks for no RDMA device"), !JSON.stringify(c.resources).includes("rdma/"));
    if (scenario === "rdma") {
      check(P("flagent uses the host network"), spec.hostNetwork === true && spec.dnsPolicy === "ClusterFirstWithHostNet");
      check(P("flagent checkpoints in a hostPath"), ckVol?.hostPath?.path === "/var/lib/flps/checkpoints" && ckVol.hostPath.type === "Directory");
      check(P("flagent runs only on RDMA nodes"), spec.nodeSelector?.["flps.io/rdma"] === "true");
    } else {
      check(P("flagent keeps the pod network"), !spec.hostNetwork);
    }
    if (scenario === "external-redis") check(P("flagent checkpoints on the existing claim"), ckVol?.persistentVolumeClaim?.claimName === "shared-checkpoints");
    else if (scenario === "minimal") check(P("flagent checkpoints on an emptyDir"), !!ckVol?.emptyDir);
    else if (scenario !== "rdma") {
      const [pvc] = find(objs, "PersistentVolumeClaim", "-checkpoints");
      check(P("flagent checkpoints on the chart's ReadWriteMany claim"), !!pvc && ckVol?.persistentVolumeClaim?.claimName === pvc.metadata.name && pvc.spec.accessModes.includes("ReadWriteMany"));
    }
  }

  // -- the ServiceMonitor: on in gpu and monitoring, off elsewhere
  const [sm] = find(objs, "ServiceMonitor");
  if (exp.kinds.ServiceMonitor) {
    const [svc] = find(objs, "Service", "-scheduler");
    check(P("ServiceMonitor is monitoring.coreos.com/v1"), sm?.apiVersion === "monitoring.coreos.com/v1");
    check(P("ServiceMonitor scrapes /metrics on port http of the flsched Service, in the release's namespace"), !!sm && sm.spec.endpoints[0].port === "http" && sm.spec.endpoints[0].path === "/metrics" && matches(sm.spec.selector.matchLabels, svc.metadata.labels) && JSON.stringify(sm.spec.namespaceSelector?.matchNames) === '["flps"]');
    if (scenario === "gpu") check(P("ServiceMonitor carries the given labels"), sm?.metadata.labels.release === "prometheus");
    if (scenario === "monitoring") check(P("ServiceMonitor scrapes every 15s"), sm?.spec.endpoints[0].interval === "15s");
  } else {
    check(P("no ServiceMonitor"), !sm);
  }

  // -- the Grafana dashboard ConfigMap
  const dcms = find(objs, "ConfigMap").filter((o) => "grafana_dashboard" in (o.metadata.labels || {}));
  if (exp.dashboard) {
    const [cm] = dcms;
    check(P("one dashboard ConfigMap labelled grafana_dashboard: \"1\""), dcms.length === 1 && cm.metadata.labels.grafana_dashboard === "1");
    check(P(`dashboard ConfigMap in namespace ${exp.dashboard.namespace}`), cm?.metadata.namespace === exp.dashboard.namespace, cm?.metadata.namespace);
    check(P("dashboard ConfigMap carries the given annotations"), JSON.stringify(cm?.metadata.annotations) === JSON.stringify(exp.dashboard.annotations));
    let same = false;
    let why = "";
    try {
      same = JSON.stringify(JSON.parse(cm.data["flps-job.json"])) === JSON.stringify(JSON.parse(fs.readFileSync(DASHBOARD_FILE, "utf8")));
    } catch (e) {
      why = e.message;
    }
    check(P("dashboard ConfigMap holds helm/flps/dashboards/flps-job.json as it is"), same, why);
    check(P("dashboard ConfigMap has only flps-job.json"), JSON.stringify(Object.keys(cm?.data || {})) === '["flps-job.json"]');
  } else {
    check(P("no dashboard ConfigMap"), dcms.length === 0);
  }

  // -- Redis
  const [sts] = find(objs, "StatefulSet", "-redis");
  if (scenario === "external-redis") {
    check(P("no Redis is deployed"), !sts && find(objs, "Service", "-redis").length === 0);
  } else if (check(P("Redis StatefulSet"), !!sts)) {
    const c = sts.spec.template.spec.containers[0];
    const script = c.command.join(" ");
    check(P("Redis runs with AOF, appendfsync everysec"), /--appendonly yes/.test(script) && /--appendfsync everysec/.test(script));
    check(P("Redis takes its password from the Secret, not from args"), /requirepass "\$REDIS_PASSWORD"/.test(script) && !/--requirepass/.test(script) && c.env.some((e) => e.name === "REDIS_PASSWORD" && e.valueFrom?.secretKeyRef));
    if (scenario === "minimal") check(P("Redis keeps /data on an emptyDir"), !sts.spec.volumeClaimTemplates && sts.spec.template.spec.volumes.some((v) => v.name === "data" && v.emptyDir) && c.volumeMounts.some((m) => m.name === "data" && m.mountPath === "/data"));
    else check(P("Redis keeps /data on a volume claim"), sts.spec.volumeClaimTemplates?.[0]?.metadata.name === "data" && c.volumeMounts.some((m) => m.name === "data" && m.mountPath === "/data"));
    check(P("Redis has readiness and liveness probes"), !!c.readinessProbe?.exec && !!c.livenessProbe?.tcpSocket);
    const [svc] = find(objs, "Service", "-redis");
    check(P("Redis Service selects the Redis pod on 6379"), !!svc && matches(svc.spec.selector, sts.spec.template.metadata.labels) && svc.spec.ports[0].port === 6379 && sts.spec.serviceName === svc.metadata.name);
  }

  // -- helm test
  const [tp] = find(objs, "Pod");
  if (exp.noTestPod) check(P("no helm test Pod"), !tp);
  else if (check(P("helm test Pod"), !!tp)) {
    const c = tp.spec.containers[0];
    check(P("helm test Pod is a test hook"), tp.metadata.annotations?.["helm.sh/hook"] === "test" && tp.spec.restartPolicy === "Never");
    check(P("helm test runs flsubmit doctor with FLPS_SCHEDULER and FLPS_TOKEN"), JSON.stringify([...c.command, ...c.args]) === '["flsubmit","doctor"]' && c.env.some((e) => e.name === "FLPS_SCHEDULER") && c.env.some((e) => e.name === "FLPS_TOKEN" && e.valueFrom?.secretKeyRef));
    const [cm] = find(objs, "ConfigMap");
    const [svc] = find(objs, "Service", "-scheduler");
    check(P("FLPS_SCHEDULER names the flsched Service"), cm.data.FLPS_SCHEDULER.startsWith(`http://${svc.metadata.name}.`) && cm.data.FLPS_SCHEDULER.endsWith(":8080"));
  }
  // -- the chart's own Secrets
  if (scenario === "external-redis") check(P("no Secret is made when both are given"), find(objs, "Secret").length === 0);
}

// ---- the kubernetes launcher in the chart --------------------------------------
// scheduler/k8s_api.h's table: X(ENUM, "group", "version", "resource", "verbs").
const K8S_API_H = path.join(path.dirname(new URL(import.meta.url).pathname), "../../scheduler/k8s_api.h");
function launcherTable() {
  const rows = [];
  const re = /X\((K8S_[A-Z_]+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)"\)/g;
  for (const m of fs.readFileSync(K8S_API_H, "utf8").replace(/\\\n/g, " ").matchAll(re))
    for (const verb of m[5].split(/\s+/).filter(Boolean)) rows.push(`${m[2]}|${m[4]}|${verb}`);
  return rows.sort();
}

function checkLauncher(objs, exp, P) {
  const [dep] = find(objs, "Deployment", "-scheduler");
  const args = dep?.spec.template.spec.containers.find((c) => c.name === "flsched")?.args || [];
  const [role] = find(objs, "Role");
  const [binding] = find(objs, "RoleBinding");
  if (exp.launcher !== "kubernetes") {
    check(P("agents: flsched runs no kubernetes launcher and gets no Role"), !args.includes("--launcher") && !role && !binding);
    return;
  }
  check(P("flsched --launcher kubernetes"), flagValue(args, "--launcher") === "kubernetes");
  check(P(`flsched --k8s-image ${exp.jobImage}`), flagValue(args, "--k8s-image") === exp.jobImage, flagValue(args, "--k8s-image"));
  check(P(`flsched --k8s-jobset ${exp.jobset}`), flagValue(args, "--k8s-jobset") === exp.jobset);
  check(P(`flsched --k8s-shard-port and --k8s-metrics-port ${exp.ports}`), flagValue(args, "--k8s-shard-port") === String(exp.ports[0]) && flagValue(args, "--k8s-metrics-port") === String(exp.ports[1]));
  const [cm] = find(objs, "ConfigMap").filter((x) => x.data?.FLPS_SCHEDULER);
  check(P("the job pods report to the flsched Service (--k8s-scheduler-url)"), flagValue(args, "--k8s-scheduler-url") === cm?.data.FLPS_SCHEDULER);
  const prefix = flagValue(args, "--k8s-prefix") || "";
  check(P("--k8s-prefix is a DNS label of at most 24 characters"), /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(prefix) && prefix.length <= 24, prefix);
  const [pvc] = find(objs, "PersistentVolumeClaim", "-checkpoints");
  if (exp.claim) check(P(`the shards checkpoint on the existing claim ${exp.claim}`), flagValue(args, "--k8s-checkpoint-claim") === exp.claim && !pvc);
  else check(P("the shards checkpoint on the chart's ReadWriteMany claim"), !!pvc && flagValue(args, "--k8s-checkpoint-claim") === pvc.metadata.name && pvc.spec.accessModes.includes("ReadWriteMany"));
  if (exp.jobServiceAccount) check(P(`the job pods' service account ${exp.jobServiceAccount}`), flagValue(args, "--k8s-service-account") === exp.jobServiceAccount);
  else check(P("the job pods use the namespace's default account"), !args.includes("--k8s-service-account"));
  // The Role: exactly the verbs on the resources flsched calls.
  const granted = [];
  for (const r of role?.rules || []) {
    check(P("the Role names no resourceNames or nonResourceURLs"), !r.resourceNames && !r.nonResourceURLs);
    for (const g of r.apiGroups || []) for (const res of r.resources || []) for (const v of r.verbs || []) granted.push(`${g}|${res}|${v}`);
  }
  granted.sort();
  const want = launcherTable();
  check(P("the Role grants exactly the verbs of scheduler/k8s_api.h's table"), want.length > 0 && JSON.stringify(granted) === JSON.stringify(want), `grants ${granted.filter((g) => !want.includes(g)).join(", ") || "-"} beyond it, lacks ${want.filter((w) => !granted.includes(w)).join(", ") || "-"}`);
  check(P("the Role grants no wildcard"), !granted.some((g) => g.includes("*")));
  const sa = dep.spec.template.spec.serviceAccountName;
  check(P("the RoleBinding binds the Role to flsched's service account in its namespace"), binding?.roleRef?.kind === "Role" && binding.roleRef.name === role?.metadata.name && binding.subjects?.length === 1 && binding.subjects[0].kind === "ServiceAccount" && binding.subjects[0].name === sa && binding.subjects[0].namespace === "flps");
}

const argv = process.argv.slice(2);
if (argv[0] === "--objects") {
  const { validateObjects } = await import("./objects.mjs");
  const rest = argv.slice(1);
  if (rest.length === 0 || rest.length % 3 !== 0) {
    console.error("usage: node validate.mjs --objects NAME OBJECTS.json CHART.yaml [...]");
    process.exit(2);
  }
  for (let i = 0; i < rest.length; i += 3) {
    const r = await validateObjects(rest[i], rest[i + 1], rest[i + 2], { check, modelsClass, walk, checkModels });
    void r;
  }
  console.log(`validate: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}
if (argv.length === 0 || argv.length % 2 !== 0) {
  console.error("usage: node validate.mjs SCENARIO RENDERED.yaml [SCENARIO RENDERED.yaml ...]");
  process.exit(2);
}
for (let i = 0; i < argv.length; i += 2) await validateScenario(argv[i], argv[i + 1]);
console.log(`validate: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
