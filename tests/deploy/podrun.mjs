// Turns one container of a rendered workload into `podman run` arguments,
// doing what the kubelet would do with it, so tests/deploy/test_pods.sh can
// run the chart's own commands, arguments, environment, user and volumes
// with the built image (there is no Kubernetes here):
//
//   node podrun.mjs RENDERED.yaml KIND NAME CONTAINER OUTDIR [KEY=VALUE ...]
//
// KEY=VALUE: pod=POD_NAME node=NODE_NAME ip=POD_IP vol:NAME=HOSTDIR (for
// persistentVolumeClaim / hostPath volumes). Writes OUTDIR/env (an env file,
// mode 0600: secrets are never put on a command line) and OUTDIR/secret-*
// (Secret volumes), and prints the podman run arguments one per line:
// user, read-only root, dropped capabilities, no new privileges, volumes,
// --env-file, the image, then command and args with $(VAR) expanded as the
// kubelet does. With --print-command it prints only the expanded command
// and arguments, NUL-separated (for a container run outside podman).
import fs from "node:fs";
import path from "node:path";
import yaml from "js-yaml";

const [file, kind, name, containerName, outDir, ...rest] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node podrun.mjs RENDERED.yaml KIND NAME CONTAINER OUTDIR [pod=..] [node=..] [ip=..] [vol:NAME=DIR] [--print-command]");
  process.exit(2);
}
const opts = { pod: name, node: "node-1", ip: "127.0.0.1", vols: {} };
let printCommand = false;
for (const r of rest) {
  if (r === "--print-command") printCommand = true;
  else if (r.startsWith("vol:")) {
    const [k, v] = r.slice(4).split("=");
    opts.vols[k] = v;
  } else {
    const i = r.indexOf("=");
    opts[r.slice(0, i)] = r.slice(i + 1);
  }
}
const die = (m) => {
  console.error(`podrun: ${m}`);
  process.exit(1);
};

const objs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter(Boolean);
const obj = objs.find((o) => o.kind === kind && o.metadata.name === name) || die(`no ${kind}/${name} in ${file}`);
const spec = kind === "Pod" ? obj.spec : obj.spec.template.spec;
const c = spec.containers.find((x) => x.name === containerName) || die(`no container ${containerName} in ${kind}/${name}`);
const byName = (k, n) => objs.find((o) => o.kind === k && o.metadata.name === n) || die(`${k} ${n} is not rendered`);

// CPU quantities: resourceFieldRef with divisor 1 rounds up to whole cores.
function cpuCores(q) {
  const s = String(q);
  return s.endsWith("m") ? Math.ceil(Number(s.slice(0, -1)) / 1000) : Math.ceil(Number(s));
}
function bytes(q) {
  const m = /^([0-9.]+)([KMGTPE]i?|k)?$/.exec(String(q)) || die(`quantity ${q}`);
  const f = { k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
  return Math.ceil(Number(m[1]) * (m[2] ? f[m[2]] : 1));
}

// ---- the environment, in order (later entries may use earlier ones) --------
const env = new Map();
const expand = (s) => String(s).replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, v) => (all === "$$" ? "$" : env.has(v) ? env.get(v) : all));
for (const e of c.env || []) {
  let v;
  if ("value" in e) v = expand(e.value);
  else if (e.valueFrom?.fieldRef) {
    const f = e.valueFrom.fieldRef.fieldPath;
    v = { "metadata.name": opts.pod, "spec.nodeName": opts.node, "status.podIP": opts.ip, "metadata.namespace": "flps" }[f];
    if (v === undefined) die(`fieldRef ${f} is not emulated`);
  } else if (e.valueFrom?.resourceFieldRef) {
    const r = e.valueFrom.resourceFieldRef;
    const [what, res] = r.resource.split(".");
    const q = c.resources?.[what]?.[res];
    if (q === undefined) die(`${r.resource} is not set (the kubelet would give the node's allocatable)`);
    v = String(res === "cpu" ? cpuCores(q) : bytes(q));
  } else if (e.valueFrom?.configMapKeyRef) {
    const r = e.valueFrom.configMapKeyRef;
    v = byName("ConfigMap", r.name).data?.[r.key];
    if (v === undefined) die(`ConfigMap ${r.name} has no key ${r.key}`);
  } else if (e.valueFrom?.secretKeyRef) {
    const r = e.valueFrom.secretKeyRef;
    const d = byName("Secret", r.name).data?.[r.key];
    if (d === undefined) die(`Secret ${r.name} has no key ${r.key}`);
    v = Buffer.from(d, "base64").toString();
  } else die(`env ${e.name}: unsupported source`);
  if (/\n/.test(v)) die(`env ${e.name} holds a newline`);
  env.set(e.name, v);
}
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "env"), [...env].map(([k, v]) => `${k}=${v}`).join("\n") + "\n", { mode: 0o600 });

const command = [...(c.command || []), ...(c.args || [])].map(expand);
if (printCommand) {
  // NUL-separated: `mapfile -d ''` reads it back, newlines and all.
  process.stdout.write(command.map((a) => `${a}\0`).join(""));
  process.exit(0);
}

// ---- security context -----------------------------------------------------
const psc = spec.securityContext || {};
const sc = c.securityContext || {};
const uid = sc.runAsUser ?? psc.runAsUser;
const gid = sc.runAsGroup ?? psc.runAsGroup;
const out = [];
// Root only where the container asks for it in so many words (flagent with
// job uids); anything else must name a non-root uid.
const explicitRoot = sc.runAsUser === 0 && sc.runAsNonRoot === false;
if (uid === undefined || (uid === 0 && !explicitRoot)) die("no non-root runAsUser");
out.push("--user", `${uid}:${gid ?? uid}`);
if (psc.fsGroup !== undefined) out.push("--group-add", String(psc.fsGroup));
if (sc.readOnlyRootFilesystem) out.push("--read-only");
if ((sc.capabilities?.drop || []).includes("ALL")) out.push("--cap-drop=ALL");
for (const a of sc.capabilities?.add || []) out.push(`--cap-add=${a}`);
if (sc.allowPrivilegeEscalation === false) out.push("--security-opt", "no-new-privileges");

// ---- volumes -----------------------------------------------------------------
for (const m of c.volumeMounts || []) {
  const v = (spec.volumes || []).find((x) => x.name === m.name) || die(`no volume ${m.name}`);
  if (v.emptyDir) out.push("--tmpfs", `${m.mountPath}:rw,mode=1777`);
  else if (v.secret) {
    const s = byName("Secret", v.secret.secretName);
    const dir = path.join(outDir, `secret-${m.name}`);
    fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
    const items = v.secret.items || Object.keys(s.data).map((k) => ({ key: k, path: k }));
    for (const it of items) {
      const f = path.join(dir, it.path);
      fs.writeFileSync(f, Buffer.from(s.data[it.key], "base64"));
      fs.chmodSync(f, it.mode ?? v.secret.defaultMode ?? 0o644);
      // The kubelet gives Secret files to fsGroup.
      if (psc.fsGroup !== undefined) fs.chownSync(f, 0, psc.fsGroup);
    }
    out.push("-v", `${dir}:${m.mountPath}:ro`);
  } else if (v.persistentVolumeClaim || v.hostPath) {
    const dir = opts.vols[m.name] || die(`volume ${m.name}: give vol:${m.name}=HOSTDIR`);
    out.push("-v", `${dir}:${m.mountPath}${m.readOnly ? ":ro" : ""}`);
  } else die(`volume ${m.name}: unsupported kind`);
}
out.push("--env-file", path.join(outDir, "env"));
out.push(c.image, ...command);
for (const a of out) {
  if (/\n/.test(a)) die(`argument with a newline: ${a}`);
  console.log(a);
}
