// What flsched's kubernetes launcher creates, checked offline (validate.mjs
// --objects): the objects tests/k8s/k8s_render writes for tests/k8s/jobs/*.yaml
// with the --k8s-* flags a chart scenario gives flsched.
//
//   1. core kinds (Secret, Service, Pod) against kubernetes-models and
//      @kubernetes/client-node's models, as the chart's objects;
//   2. JobSet (jobset.x-k8s.io/v1alpha2) against the fields and types of the
//      JobSet API's published Go types (api/jobset/v1alpha2/jobset_types.go
//      of kubernetes-sigs/jobset: JobSetSpec, ReplicatedJob, Network,
//      SuccessPolicy, FailurePolicy, ...), its Job templates against batch/v1
//      JobTemplateSpec; PodGroup (scheduling.volcano.sh/v1beta1) against
//      Volcano's PodGroupSpec fields;
//   3. the launcher's own rules: labels and names, no secret value outside
//      the Secret, the pods' security, $(VAR)s defined, the Secret mounted,
//      every shard address a shard pod's host name and port, the Service
//      selecting the pods, what each job file's keys turn on.
import fs from "node:fs";
import yaml from "js-yaml";

// ---- the JobSet API's types (v1alpha2), the fields flsched may emit ----------
// "T?" optional, "T!" required; Array<T>, enum:A|B, and client-node model names.
const JOBSET_TYPES = {
  JobSet: { apiVersion: "string!", kind: "string!", metadata: "V1ObjectMeta!", spec: "JobSetSpec!", status: "any?" },
  JobSetSpec: {
    replicatedJobs: "Array<ReplicatedJob>!",
    network: "Network?",
    successPolicy: "SuccessPolicy?",
    failurePolicy: "FailurePolicy?",
    startupPolicy: "StartupPolicy?",
    suspend: "boolean?",
    coordinator: "Coordinator?",
    managedBy: "string?",
    ttlSecondsAfterFinished: "integer?",
    volumeClaimPolicies: "Array<any>?",
  },
  ReplicatedJob: { name: "string!", groupName: "string?", template: "V1JobTemplateSpec!", replicas: "integer?", dependsOn: "Array<DependsOn>?" },
  DependsOn: { name: "string!", status: "enum:Ready|Complete!" },
  Network: { enableDNSHostnames: "boolean?", subdomain: "string?", publishNotReadyAddresses: "boolean?" },
  SuccessPolicy: { operator: "enum:All|Any!", targetReplicatedJobs: "Array<string>?" },
  FailurePolicy: { maxRestarts: "integer?", restartStrategy: "enum:Recreate|BlockingRecreate|InPlaceRestart?", rules: "Array<FailurePolicyRule>?" },
  FailurePolicyRule: {
    name: "string!",
    action: "enum:FailJobSet|RestartJobSet|RestartJobSetAndIgnoreMaxRestarts|RestartJob|RestartJobAndIgnoreMaxRestarts!",
    onJobFailureReasons: "Array<string>?",
    onJobFailureMessagePatterns: "Array<string>?",
    targetReplicatedJobs: "Array<string>?",
  },
  StartupPolicy: { startupPolicyOrder: "enum:AnyOrder|InOrder!" },
  Coordinator: { replicatedJob: "string!", jobIndex: "integer?", podIndex: "integer?" },
  // Volcano's PodGroup (scheduling.volcano.sh/v1beta1).
  PodGroup: { apiVersion: "string!", kind: "string!", metadata: "V1ObjectMeta!", spec: "PodGroupSpec!", status: "any?" },
  PodGroupSpec: { minMember: "integer?", minTaskMember: "any?", queue: "string?", priorityClassName: "string?", minResources: "any?", networkTopology: "any?" },
};

function walkTyped(value, type, path, errors, ctx) {
  const optional = type.endsWith("?");
  const required = type.endsWith("!");
  const t = optional || required ? type.slice(0, -1) : type;
  if (value === undefined || value === null) return;
  if (t === "any") return;
  if (t === "string") return typeof value === "string" || errors.push(`${path}: expected a string`);
  if (t === "boolean") return typeof value === "boolean" || errors.push(`${path}: expected a boolean`);
  if (t === "integer") return Number.isInteger(value) || errors.push(`${path}: expected an integer`);
  if (t.startsWith("enum:")) return t.slice(5).split("|").includes(value) || errors.push(`${path}: ${value} is not one of ${t.slice(5)}`);
  const arr = /^Array<(.+)>$/.exec(t);
  if (arr) {
    if (!Array.isArray(value)) return errors.push(`${path}: expected a list`);
    value.forEach((v, i) => walkTyped(v, arr[1], `${path}[${i}]`, errors, ctx));
    return;
  }
  const fields = JOBSET_TYPES[t];
  if (!fields) return ctx.walk(value, t, path, errors); // a client-node model
  if (typeof value !== "object" || Array.isArray(value)) return errors.push(`${path}: expected a ${t}`);
  for (const k of Object.keys(value)) if (!(k in fields)) errors.push(`${path}.${k}: unknown field of ${t}`);
  for (const [k, ft] of Object.entries(fields)) {
    if (ft.endsWith("!") && value[k] === undefined) errors.push(`${path}.${k}: required in ${t}`);
    walkTyped(value[k], ft, `${path}.${k}`, errors, ctx);
  }
}

// ---- helpers ------------------------------------------------------------------
const labelsOf = (o) => o.metadata?.labels || {};
const dns = (s) => typeof s === "string" && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(s) && s.length <= 63;
function flag(args, f) {
  const i = args.indexOf(f);
  return i >= 0 ? args[i + 1] : undefined;
}
function envOf(c) {
  return Object.fromEntries((c.env || []).map((e) => [e.name, e]));
}
// The pod templates of an object: [{meta, spec, role, index}] (index: a
// number for a Pod, "$(FLPS_INDEX)" under a JobSet).
function podsOf(o) {
  if (o.kind === "Pod") return [{ meta: o.metadata, spec: o.spec, role: labelsOf(o)["flps.io/role"], index: Number(labelsOf(o)["flps.io/index"]), self: o }];
  if (o.kind !== "JobSet") return [];
  return (o.spec.replicatedJobs || []).map((rj) => ({ meta: rj.template.spec.template.metadata, spec: rj.template.spec.template.spec, role: rj.name, index: "$(FLPS_INDEX)", rj }));
}

export async function validateObjects(name, file, chartFile, ctx) {
  const { check } = ctx;
  const P = (s) => `${name}: ${s}`;
  const objs = JSON.parse(fs.readFileSync(file, "utf8"));
  // The flags this scenario's flsched gets.
  const chart = yaml.loadAll(fs.readFileSync(chartFile, "utf8")).filter(Boolean);
  const dep = chart.find((o) => o.kind === "Deployment" && o.metadata.name.endsWith("-scheduler"));
  const args = dep.spec.template.spec.containers.find((c) => c.name === "flsched").args;
  const S = {
    prefix: flag(args, "--k8s-prefix"),
    image: flag(args, "--k8s-image"),
    url: flag(args, "--k8s-scheduler-url"),
    claim: flag(args, "--k8s-checkpoint-claim"),
    account: flag(args, "--k8s-service-account") || "default",
    shardPort: Number(flag(args, "--k8s-shard-port")),
    metricsPort: Number(flag(args, "--k8s-metrics-port")),
    pull: flag(args, "--k8s-pull-policy"),
    jobset: name.includes("-always-"),
    attempt: Number(name.split("-").pop()),
  };
  check(P("objects were rendered"), objs.length > 0);

  // -- 1 and 2: the schemas
  for (const o of objs) {
    const id = `${o.kind}/${o.metadata?.name}`;
    if (o.kind === "JobSet" || o.kind === "PodGroup") {
      const want = o.kind === "JobSet" ? "jobset.x-k8s.io/v1alpha2" : "scheduling.volcano.sh/v1beta1";
      check(P(`${id} is ${want}`), o.apiVersion === want, o.apiVersion);
      const errs = [];
      walkTyped(o, o.kind, "", errs, ctx);
      check(P(`${id} has only the fields and types of its API (${o.kind === "JobSet" ? "jobset_types.go" : "Volcano PodGroupSpec"})`), errs.length === 0, errs.join("; "));
      // Each replicated job's template as the batch/v1 Job it becomes.
      for (const pt of podsOf(o))
        await ctx.checkModels({ apiVersion: "batch/v1", kind: "Job", metadata: { name: `${o.metadata.name}-${pt.role}-0` }, spec: pt.rj.template.spec }, (t) => P(`${id} ${pt.role}: its Job: ${t}`));
      continue;
    }
    await ctx.checkModels(o, P);
  }

  // -- 3: the launcher's rules, job by job
  const jobs = {};
  for (const o of objs) (jobs[labelsOf(o)["flps.io/job"]] ||= []).push(o);
  check(P("every object is one job's (flps.io/job)"), !("undefined" in jobs));
  for (const [jid, list] of Object.entries(jobs)) checkJob(jid, list, S, P, check);
}

function checkJob(jid, list, S, P, check) {
  const secret = list.find((o) => o.kind === "Secret");
  const text = secret ? Buffer.from(secret.data["job.yaml"], "base64").toString() : "";
  const job = yaml.load(text) || {};
  const J = (s) => P(`${job.name || jid}: ${s}`);
  const set = `${S.prefix}-${jid}-${S.attempt}`;
  if (!check(J("a Secret holds the job file, its credentials and token"), !!secret && JSON.stringify(Object.keys(secret.data).sort()) === '["credentials","job.yaml","token"]')) return;
  check(J(`the Secret is ${set}-job, of type Opaque`), secret.metadata.name === `${set}-job` && secret.type === "Opaque");
  // Labels and names.
  for (const o of list) {
    const l = labelsOf(o);
    check(J(`${o.kind}/${o.metadata.name}: labelled as flsched's (instance ${S.prefix}, attempt ${S.attempt}, set ${set})`), l["app.kubernetes.io/managed-by"] === "flsched" && l["app.kubernetes.io/instance"] === S.prefix && l["flps.io/attempt"] === String(S.attempt) && l["flps.io/set"] === set);
    check(J(`${o.kind}/${o.metadata.name}: a DNS label of at most 63`), dns(o.metadata.name));
  }
  // No secret value outside the Secret.
  const values = Object.entries(secret.data).filter(([k]) => k !== "job.yaml").flatMap(([, v]) => Buffer.from(v, "base64").toString().split(/[\n=]/)).filter((v) => v.length >= 16);
  const outside = JSON.stringify(list.filter((o) => o.kind !== "Secret"));
  check(J("no credential or token appears outside the Secret"), values.length > 0 && values.every((v) => !outside.includes(v)));

  const servers = job.servers ?? 1;
  const workers = job.workers ?? 1;
  const pods = list.flatMap(podsOf);
  check(J(`${S.jobset ? "a JobSet" : "a Pod per shard and per worker"}`), S.jobset ? list.filter((o) => o.kind === "JobSet").length === 1 && pods.length === 2 : pods.filter((p) => p.role === "server").length === servers && pods.filter((p) => p.role === "worker").length === workers);
  const image = job.image || S.image;
  const hosts = {}; // host name -> declared data port
  const ports = [];
  const allServerLists = [];
  for (const p of pods) checkPod(p, job, S, set, secret, J, check, image, hosts, ports, allServerLists);
  if (S.jobset) checkJobSet(list.find((o) => o.kind === "JobSet"), set, servers, workers, job, S, J, check, hosts);
  else checkService(list.find((o) => o.kind === "Service"), set, pods, S, J, check);
  // Every address a worker dials is a shard pod's host name, port and subdomain.
  for (const sl of allServerLists) {
    const eps = sl.split(",");
    check(J(`the workers dial ${servers} shards`), eps.length === servers, sl);
    eps.forEach((ep, i) => {
      const m = /^tcp:\/\/([^.]+)\.([^:]+):(\d+)$/.exec(ep);
      const host = `${set}-server-0-${i}`;
      check(J(`shard ${i}'s address ${ep} is its pod's host name in the subdomain, on the port it declares`), !!m && m[1] === host && m[2] === set && hosts[host] === Number(m[3]), JSON.stringify(hosts));
    });
  }
  if (!S.jobset) check(J("no two pods of the job listen on one port (they may share a host network)"), new Set(ports).size === ports.length, ports.join(","));
  // Volcano: a PodGroup of all the pods.
  const pg = list.find((o) => o.kind === "PodGroup");
  if (job.scheduler_name === "volcano") check(J(`a Volcano PodGroup ${set} of minMember ${servers + workers}`), pg?.metadata.name === set && pg.spec.minMember === servers + workers);
  else check(J("no PodGroup"), !pg);
  if (job.queue && S.jobset) check(J(`the JobSet is in Kueue's queue ${job.queue}`), labelsOf(list.find((o) => o.kind === "JobSet"))["kueue.x-k8s.io/queue-name"] === job.queue);
}

function checkPod(p, job, S, set, secret, J, check, image, hosts, ports, allServerLists) {
  const id = `${p.role}${S.jobset ? "" : `-${p.index}`}`;
  const spec = p.spec;
  const c = spec.containers[0];
  const env = envOf(c);
  const sc = c.securityContext || {};
  const psc = spec.securityContext || {};
  const server = p.role === "server";
  const cmd = c.command || [];
  check(J(`${id}: one container`), spec.containers.length === 1);
  check(J(`${id}: non-root 10001, RuntimeDefault seccomp, no account token, never restarted by the kubelet`), psc.runAsNonRoot === true && psc.runAsUser === 10001 && psc.runAsGroup === 10001 && psc.fsGroup === 10001 && psc.seccompProfile?.type === "RuntimeDefault" && spec.automountServiceAccountToken === false && spec.restartPolicy === "Never");
  check(J(`${id}: service account ${S.account}`), spec.serviceAccountName === S.account);
  const wantAdd = job.transport === "rdma" ? '["IPC_LOCK"]' : "[]";
  check(J(`${id}: read-only root, no privilege, capabilities drop ALL add ${wantAdd}`), sc.readOnlyRootFilesystem === true && sc.allowPrivilegeEscalation === false && sc.privileged === false && sc.runAsNonRoot === true && JSON.stringify(sc.capabilities?.drop) === '["ALL"]' && JSON.stringify(sc.capabilities?.add || []) === wantAdd);
  check(J(`${id}: image ${image}`), c.image === image, c.image);
  if (S.pull) check(J(`${id}: imagePullPolicy ${S.pull}`), c.imagePullPolicy === S.pull);
  const program = job.command && !server ? job.command[0] : server ? "flps" : "flworker";
  check(J(`${id}: flpod runs ${program}`), cmd[0] === "flpod" && cmd[1] === "--" && cmd[2] === program, cmd.slice(0, 3).join(" "));
  // $(VAR): defined earlier in env ($$( is a literal $( ).
  const defined = new Set();
  const undef = [];
  const refs = (s) => (s.replace(/\$\$\(/g, "").match(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g) || []).map((r) => r.slice(2, -1));
  for (const e of c.env || []) {
    if (e.value !== undefined) undef.push(...refs(e.value).filter((v) => !defined.has(v)));
    defined.add(e.name);
  }
  undef.push(...cmd.flatMap(refs).filter((v) => !defined.has(v)));
  check(J(`${id}: every $(VAR) is defined before it is used`), undef.length === 0, undef.join(","));
  check(J(`${id}: its index is ${S.jobset ? "the Indexed Job's completion index" : p.index}`), S.jobset ? env.FLPS_INDEX?.valueFrom?.fieldRef?.fieldPath === "metadata.annotations['batch.kubernetes.io/job-completion-index']" : env.FLPS_INDEX?.value === String(p.index));
  check(J(`${id}: reports to ${S.url} as ${p.role}-${p.index} of attempt ${S.attempt}`), env.FLPS_SCHEDULER?.value === S.url && env.FLPS_TASK?.value === `${p.role}-${p.index}` && env.FLPS_ATTEMPT?.value === String(S.attempt) && env.FLPS_POD_SECRETS?.value === "/etc/flps/job");
  // Resources: requests = limits; the role's CPUs and memory; GPUs for workers; devices for all.
  const lim = c.resources?.limits || {};
  check(J(`${id}: requests equal limits, with cpu and memory`), JSON.stringify(c.resources?.requests) === JSON.stringify(lim) && !!lim.cpu && !!lim.memory);
  const res = job.resources || {};
  const gpus = !server ? res["nvidia.com/gpu"] ?? job.gpus_per_worker ?? 0 : 0;
  check(J(`${id}: ${gpus} nvidia.com/gpu`), gpus ? lim["nvidia.com/gpu"] === String(gpus) : !("nvidia.com/gpu" in lim));
  for (const [k, v] of Object.entries(res)) if (k.includes("/") && k !== "nvidia.com/gpu") check(J(`${id}: ${v} ${k} (every pod)`), lim[k] === String(v));
  // Volumes: the job's Secret (0440), /tmp, a shard's checkpoints.
  const vols = Object.fromEntries((spec.volumes || []).map((v) => [v.name, v]));
  const mounts = c.volumeMounts || [];
  check(J(`${id}: every mount has a volume`), mounts.every((m) => vols[m.name]));
  const sv = mounts.find((m) => m.mountPath === "/etc/flps/job");
  check(J(`${id}: the job's Secret ${secret.metadata.name} read-only at /etc/flps/job, mode 0440`), !!sv && sv.readOnly === true && vols[sv.name]?.secret?.secretName === secret.metadata.name && vols[sv.name].secret.defaultMode === 0o440);
  check(J(`${id}: a writable /tmp`), mounts.some((m) => m.mountPath === "/tmp" && vols[m.name]?.emptyDir));
  const claim = job.checkpoint_volume || S.claim;
  if (server) {
    const ck = mounts.find((m) => m.mountPath === "/var/lib/flps/checkpoints");
    check(J(`${id}: checkpoints on ${claim || "an emptyDir"}`), !!ck && (claim ? vols[ck.name]?.persistentVolumeClaim?.claimName === claim : !!vols[ck.name]?.emptyDir));
    check(J(`${id}: checkpoints in the job's own directory, --restore from attempt 1`), flag(cmd, "--checkpoint-dir") === `/var/lib/flps/checkpoints/${set.slice(0, set.lastIndexOf("-"))}/ckpt` && cmd.includes("--restore") === S.attempt > 0, flag(cmd, "--checkpoint-dir"));
    const listen = /^tcp:\/\/0\.0\.0\.0:(\d+)$/.exec(flag(cmd, "--listen") || "");
    const data = (c.ports || []).find((x) => x.name === "data");
    check(J(`${id}: listens on the data port it declares`), !!listen && Number(listen[1]) === data?.containerPort);
    const host = S.jobset ? `${set}-server-0-` : p.spec.hostname;
    if (S.jobset) for (let i = 0; i < (job.servers ?? 1); i++) hosts[`${host}${i}`] = data?.containerPort;
    else hosts[host] = data?.containerPort;
  } else {
    check(J(`${id}: a worker mounts no checkpoints`), !mounts.some((m) => m.mountPath === "/var/lib/flps/checkpoints"));
    const list = job.command ? env.FLPS_SERVERS?.value : flag(cmd, "--servers");
    if (list) allServerLists.push(list);
    if (job.command) check(J(`${id}: the program gets its rank and the job's variables`), env.FLPS_RANK?.value === "$(FLPS_INDEX)" && env.FLPS_WORKERS?.value === String(job.workers ?? 1) && !env.FLPS_CREDENTIALS_FILE);
    else check(J(`${id}: flworker's rank is the index`), flag(cmd, "--rank") === String(p.index) && flag(cmd, "--job") === "/etc/flps/job/job.yaml");
  }
  for (const x of c.ports || []) ports.push(x.containerPort);
  const metrics = (c.ports || []).find((x) => x.name === "metrics");
  if (metrics) check(J(`${id}: /metrics on the port it declares`), flag(cmd, "--metrics") === `0.0.0.0:${metrics.containerPort}`);
  if (job.transport === "rdma") check(J(`${id}: --transport rdma`), flag(cmd, "--transport") === "rdma" || (!!job.command && env.FLPS_TRANSPORT?.value === "rdma"));
  // What the job file's keys turn on.
  check(J(`${id}: nodeSelector as the job file says`), JSON.stringify(spec.nodeSelector || {}) === JSON.stringify(job.node_selector || {}));
  check(J(`${id}: ${(job.tolerations || []).length} tolerations`), (spec.tolerations || []).length === (job.tolerations || []).length);
  check(J(`${id}: schedulerName ${job.scheduler_name || "(default)"}`), spec.schedulerName === job.scheduler_name);
  if (job.scheduler_name === "volcano") check(J(`${id}: in Volcano's group ${set}`), p.meta.annotations?.["scheduling.k8s.io/group-name"] === set);
  if (job.queue && !S.jobset) check(J(`${id}: in Kueue's queue ${job.queue} as one pod group of ${(job.servers ?? 1) + (job.workers ?? 1)}`), p.meta.labels["kueue.x-k8s.io/queue-name"] === job.queue && p.meta.labels["kueue.x-k8s.io/pod-group-name"] === set && p.meta.annotations["kueue.x-k8s.io/pod-group-total-count"] === String((job.servers ?? 1) + (job.workers ?? 1)));
  if (job.command) {
    const words = cmd.slice(2);
    check(J(`${id}: the program's words as written, $( kept literal`), !server ? JSON.stringify(words) === JSON.stringify(job.command.map((w) => w.replace(/\$\(/g, "$$$$("))) : true, words.join(" "));
  }
}

function checkJobSet(js, set, servers, workers, job, S, J, check, hosts) {
  check(J(`the JobSet is named ${set}`), js?.metadata.name === set);
  check(J("its pods get host names in the subdomain of its own name, published before they are ready"), js.spec.network?.enableDNSHostnames === true && js.spec.network.subdomain === set && js.spec.network.publishNotReadyAddresses === true);
  check(J("it succeeds when every worker job completes (the shards end with it)"), js.spec.successPolicy?.operator === "All" && JSON.stringify(js.spec.successPolicy.targetReplicatedJobs) === '["worker"]');
  check(J("a failure is flsched's to restart, not JobSet's"), js.spec.failurePolicy?.maxRestarts === 0);
  const names = js.spec.replicatedJobs.map((r) => r.name);
  check(J("replicated jobs server and worker"), JSON.stringify(names) === '["server","worker"]');
  for (const rj of js.spec.replicatedJobs) {
    const n = rj.name === "server" ? servers : workers;
    check(J(`${rj.name}: one Indexed Job of ${n} pods, not retried`), rj.replicas === 1 && rj.template.spec.completionMode === "Indexed" && rj.template.spec.completions === n && rj.template.spec.parallelism === n && rj.template.spec.backoffLimit === 0);
    check(J(`${rj.name}: no host name of its own (JobSet names them)`), !rj.template.spec.template.spec.hostname && !rj.template.spec.template.spec.subdomain);
  }
  void job;
  void S;
  void hosts;
}

function checkService(svc, set, pods, S, J, check) {
  check(J(`a headless Service ${set}`), svc?.metadata.name === set && svc.spec.clusterIP === "None" && svc.spec.publishNotReadyAddresses === true);
  check(J("the Service selects every pod of the attempt"), pods.every((p) => Object.entries(svc.spec.selector || {}).every(([k, v]) => p.meta.labels[k] === v)));
  for (const p of pods) check(J(`${p.role}-${p.index}: host name = pod name, in the Service's subdomain`), p.spec.hostname === p.self.metadata.name && p.spec.subdomain === set && p.self.metadata.name === `${set}-${p.role}-0-${p.index}`);
  void S;
}
