#!/usr/bin/env python3
"""A small stand-in of the Kubernetes API, written for flps's tests.

It serves what flsched's kubernetes launcher uses (scheduler/k8s_api.h's
table) the way the real API server does, and runs the pods it is given
with podman, as a one-node cluster would:

- discovery: GET /api, /apis, /apis/GROUP/VERSION (404 for jobset.x-k8s.io
  unless --jobset: then JobSets are stored, and expanded into pods as the
  JobSet controller would, --jobset-controller);
- namespaced pods, services, secrets (and jobsets, podgroups): create (201,
  409 AlreadyExists, 422 Invalid), get, list with labelSelector and the
  list's resourceVersion, watch with resourceVersion (replayed from a
  bounded event history; too old: an ERROR event with a 410 Status) and
  BOOKMARK events, delete with DeleteOptions (a pod gets a
  deletionTimestamp, its container SIGTERM and the grace period, then
  DELETED); pods/log with timestamps and sinceTime;
- a bearer token (--token-file), 401 without it;
- one node, standin-node, with --node-resource NAME=COUNT extended
  resources and --node-label K=V labels: a pod that asks for more than it
  has (e.g. nvidia.com/gpu) or selects other labels stays Pending with
  PodScheduled False, reason Unschedulable, the scheduler's message;
- a scheduled pod runs with podman from its image (--pull=never: an image
  that is not there is ErrImagePull, then ImagePullBackOff), in the host's
  network (every pod's ports must differ), with its command and args,
  env (values, fieldRef, secretKeyRef, $(VAR) expanded as the kubelet
  does), user and groups (runAsUser, runAsGroup, fsGroup), read-only root,
  dropped capabilities, and its volumes (Secret files with defaultMode and
  group fsGroup, emptyDirs, PersistentVolumeClaims as directories under
  --state); the pods' hostname.subdomain names resolve to 127.0.0.1
  through a hosts file shared by the namespace's pods; exit codes and
  OOMKilled as the kubelet reports them.

What it does not do: admission beyond the checks above, RBAC (the token is
one), resource limits (cgroups), other kinds, patch/update, real
scheduling, DNS, multi-node networking.

usage: standin.py --port-file FILE --token-file FILE --state DIR
                  [--port N] [--jobset] [--jobset-controller]
                  [--node-resource NAME=N ...] [--node-label K=V ...]
"""
import argparse
import base64
import copy
import datetime
import http.server
import json
import os
import re
import shutil
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

HISTORY = 2000  # watch events kept; older resourceVersions get 410
GRACE_DEFAULT = 30

CORE = {"pods": "Pod", "services": "Service", "secrets": "Secret"}
GROUPS = {
    ("jobset.x-k8s.io", "v1alpha2"): {"jobsets": "JobSet"},
    ("scheduling.volcano.sh", "v1beta1"): {"podgroups": "PodGroup"},
}


def now_rfc3339(nano=False):
    t = datetime.datetime.now(datetime.timezone.utc)
    if nano:
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%09dZ" % (t.microsecond * 1000)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def status_obj(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}


def selector_matches(sel, labels):
    if not sel:
        return True
    labels = labels or {}
    for term in sel.split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            k = k.rstrip("=")
            v = v.lstrip("=")
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def parse_quantity(q):
    """CPU counts and byte sizes, as numbers (enough for the checks here)."""
    q = str(q)
    units = {"m": 1e-3, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3,
             "Ti": 1024 ** 4, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    for u in sorted(units, key=len, reverse=True):
        if q.endswith(u):
            return float(q[: -len(u)]) * units[u]
    return float(q)


class Cluster:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Condition()
        self.rv = 100
        self.objects = {}  # (kind, ns, name) -> obj
        self.events = []  # (rv, kind, ns, type, obj)
        self.procs = {}  # (ns, name) -> runner
        self.logs = {}  # (ns, name) -> [(ts, line)]
        self.node_res = {"cpu": 1000, "memory": 1 << 50, "pods": 1000}
        for r in args.node_resource or []:
            k, v = r.split("=", 1)
            self.node_res[k] = float(v)
        self.node_labels = {"kubernetes.io/hostname": "standin-node"}
        for r in args.node_label or []:
            k, v = r.split("=", 1)
            self.node_labels[k] = v
        self.created = []  # every object ever created (kind, ns, name, obj)
        os.makedirs(args.state, exist_ok=True)

    # ---- store ----
    def bump(self):
        self.rv += 1
        return str(self.rv)

    def record(self, kind, ns, etype, obj):
        """Called with the lock held."""
        self.events.append((self.rv, kind, ns, etype, copy.deepcopy(obj)))
        if len(self.events) > HISTORY:
            del self.events[: len(self.events) - HISTORY]
        self.lock.notify_all()

    def put(self, kind, ns, obj, etype):
        with self.lock:
            obj["metadata"]["resourceVersion"] = self.bump()
            self.objects[(kind, ns, obj["metadata"]["name"])] = obj
            self.record(kind, ns, etype, obj)
            return copy.deepcopy(obj)

    def update_pod(self, ns, name, fn):
        with self.lock:
            obj = self.objects.get(("Pod", ns, name))
            if obj is None:
                return
            fn(obj)
            obj["metadata"]["resourceVersion"] = self.bump()
            self.record("Pod", ns, "MODIFIED", obj)

    def remove(self, kind, ns, name):
        with self.lock:
            obj = self.objects.pop((kind, ns, name), None)
            if obj is None:
                return None
            obj["metadata"]["resourceVersion"] = self.bump()
            self.record(kind, ns, "DELETED", obj)
            return obj

    # ---- create ----
    def create(self, kind, ns, obj):
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if obj.get("kind") != kind:
            return 400, status_obj(400, "BadRequest",
                                   "the kind %r does not match the path's %s" % (obj.get("kind"), kind))
        if not name or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name) or len(name) > 253:
            return 422, status_obj(422, "Invalid", "%s %r is invalid: metadata.name" % (kind, name))
        if kind == "Pod":
            for f in ("hostname", "subdomain"):
                v = obj.get("spec", {}).get(f)
                if v is not None and not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", v) or (v and len(v) > 63):
                    return 422, status_obj(422, "Invalid", "Pod %r is invalid: spec.%s" % (name, f))
        with self.lock:
            if (kind, ns, name) in self.objects:
                return 409, status_obj(409, "AlreadyExists",
                                       '%ss "%s" already exists' % (kind.lower(), name))
        meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        obj["metadata"] = meta
        if kind == "Pod":
            obj["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
        # For tests: every object ever created (not part of the API).
        with self.lock:
            self.created.append((kind, ns, name, copy.deepcopy(obj)))
            with open(os.path.join(self.args.state, "created.json.tmp"), "w") as f:
                json.dump(self.created, f)
            os.rename(os.path.join(self.args.state, "created.json.tmp"),
                      os.path.join(self.args.state, "created.json"))
        out = self.put(kind, ns, obj, "ADDED")
        if kind == "Pod":
            self.write_hosts(ns)
            threading.Thread(target=self.schedule, args=(ns, name), daemon=True).start()
        if kind == "JobSet" and self.args.jobset_controller:
            threading.Thread(target=self.expand_jobset, args=(ns, name), daemon=True).start()
        return 201, out

    # ---- the scheduler ----
    def requests_of(self, pod):
        need = {}
        for c in pod["spec"].get("containers", []):
            res = c.get("resources", {})
            req = dict(res.get("limits", {}))
            req.update(res.get("requests", {}))
            for k, v in req.items():
                need[k] = need.get(k, 0) + parse_quantity(v)
        return need

    def used(self):
        used = {}
        with self.lock:
            for (kind, ns, name), o in self.objects.items():
                if kind == "Pod" and o["spec"].get("nodeName") and \
                        o["status"].get("phase") in ("Pending", "Running"):
                    for k, v in self.requests_of(o).items():
                        used[k] = used.get(k, 0) + v
        return used

    def schedule(self, ns, name):
        with self.lock:
            pod = copy.deepcopy(self.objects.get(("Pod", ns, name)))
        if pod is None:
            return
        need = self.requests_of(pod)
        used = self.used()
        why = []
        for k, v in sorted(need.items()):
            if v > self.node_res.get(k, 0) - used.get(k, 0):
                why.append("Insufficient %s" % k)
        for k, v in (pod["spec"].get("nodeSelector") or {}).items():
            if self.node_labels.get(k) != v:
                why.append("node(s) didn't match Pod's node affinity/selector")
                break
        if why:
            msg = "0/1 nodes are available: 1 %s. preemption: 0/1 nodes are available: " \
                  "1 No preemption victims found for incoming pod." % ", 1 ".join(why)

            def unsched(o):
                o["status"]["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": msg, "lastTransitionTime": now_rfc3339()}]
            self.update_pod(ns, name, unsched)
            return

        def bound(o):
            o["spec"]["nodeName"] = "standin-node"
            o["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                          "lastTransitionTime": now_rfc3339()}]
            o["status"]["hostIP"] = "127.0.0.1"
            o["status"]["podIP"] = "127.0.0.1"
            o["status"]["podIPs"] = [{"ip": "127.0.0.1"}]
            o["status"]["startTime"] = now_rfc3339()
            o["status"]["containerStatuses"] = [{
                "name": o["spec"]["containers"][0]["name"], "ready": False, "restartCount": 0,
                "image": o["spec"]["containers"][0]["image"], "imageID": "",
                "state": {"waiting": {"reason": "ContainerCreating"}}}]
        self.update_pod(ns, name, bound)
        Runner(self, ns, name).start()

    # ---- hosts: every pod's hostname.subdomain is 127.0.0.1 ----
    def hosts_path(self, ns):
        return os.path.join(self.args.state, "hosts-" + ns)

    def write_hosts(self, ns):
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        with self.lock:
            for (kind, n, name), o in self.objects.items():
                if kind != "Pod" or n != ns:
                    continue
                h, s = o["spec"].get("hostname"), o["spec"].get("subdomain")
                if h and s:
                    lines.append("127.0.0.1 %s.%s %s.%s.%s.svc.cluster.local" % (h, s, h, s, ns))
        path = self.hosts_path(ns)
        # In place: the containers have this file mounted.
        with open(path, "a+") as f:
            f.seek(0)
            f.truncate()
            f.write("\n".join(lines) + "\n")
        os.chmod(path, 0o644)

    # ---- the JobSet controller, as far as flsched's JobSets need ----
    def expand_jobset(self, ns, name):
        with self.lock:
            js = copy.deepcopy(self.objects.get(("JobSet", ns, name)))
        if js is None:
            return
        sub = (js["spec"].get("network") or {}).get("subdomain") or name
        for rj in js["spec"]["replicatedJobs"]:
            for ji in range(rj.get("replicas", 1)):
                jspec = rj["template"]["spec"]
                for pi in range(jspec.get("completions") or jspec.get("parallelism") or 1):
                    tmpl = copy.deepcopy(jspec["template"])
                    host = "%s-%s-%d-%d" % (name, rj["name"], ji, pi)
                    meta = tmpl.get("metadata") or {}
                    meta["name"] = host + "-" + uuid.uuid4().hex[:5]
                    meta.setdefault("labels", {})["jobset.sigs.k8s.io/jobset-name"] = name
                    meta.setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(pi)
                    meta["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                                "kind": "JobSet", "name": name,
                                                "uid": js["metadata"]["uid"]}]
                    tmpl["metadata"] = meta
                    tmpl["spec"]["hostname"] = host
                    tmpl["spec"]["subdomain"] = sub
                    tmpl["apiVersion"] = "v1"
                    tmpl["kind"] = "Pod"
                    self.create("Pod", ns, tmpl)

    # ---- delete ----
    def delete(self, kind, ns, name, grace=None):
        with self.lock:
            obj = self.objects.get((kind, ns, name))
        if obj is None:
            return 404, status_obj(404, "NotFound", '%ss "%s" not found' % (kind.lower(), name))
        if kind == "JobSet":
            uid = obj["metadata"]["uid"]
            with self.lock:
                owned = [n for (k, s, n), o in self.objects.items()
                         if k == "Pod" and s == ns and any(r.get("uid") == uid for r in
                                                           o["metadata"].get("ownerReferences", []))]
            for n in owned:
                self.delete("Pod", ns, n)
        if kind != "Pod":
            return 200, self.remove(kind, ns, name)
        if grace is None:
            grace = obj["spec"].get("terminationGracePeriodSeconds", GRACE_DEFAULT)

        def mark(o):
            o["metadata"]["deletionTimestamp"] = now_rfc3339()
            o["metadata"]["deletionGracePeriodSeconds"] = grace
        self.update_pod(ns, name, mark)
        runner = self.procs.get((ns, name))
        with self.lock:
            out = copy.deepcopy(self.objects.get(("Pod", ns, name)))
        if runner is not None:
            threading.Thread(target=runner.stop, args=(grace,), daemon=True).start()
        else:
            self.remove("Pod", ns, name)
        return 200, out

    def shutdown(self):
        for r in list(self.procs.values()):
            r.stop(2)


class Runner:
    """One pod's container, run with podman as the kubelet would."""

    def __init__(self, cluster, ns, name):
        self.c = cluster
        self.ns = ns
        self.name = name
        self.cname = "standin-%s-%s" % (ns, name)
        self.proc = None
        self.deleting = False
        self.dir = os.path.join(cluster.args.state, "pods", ns, name)

    def start(self):
        self.c.procs[(self.ns, self.name)] = self
        threading.Thread(target=self.run, daemon=True).start()

    def set_state(self, state, **extra):
        def fn(o):
            cs = o["status"]["containerStatuses"][0]
            cs["state"] = state
            cs.update(extra)
            if "running" in state:
                o["status"]["phase"] = "Running"
            if "terminated" in state:
                ok = state["terminated"]["exitCode"] == 0
                o["status"]["phase"] = "Succeeded" if ok else "Failed"
        self.c.update_pod(self.ns, self.name, fn)

    def log(self, line):
        self.c.logs.setdefault((self.ns, self.name), []).append((now_rfc3339(True), line))

    # ---- what the kubelet resolves ----
    def field(self, pod, path):
        m = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
        if m:
            return (pod["metadata"].get(m.group(1)) or {}).get(m.group(2), "")
        return {"metadata.name": pod["metadata"]["name"],
                "metadata.namespace": self.ns,
                "metadata.uid": pod["metadata"]["uid"],
                "spec.nodeName": pod["spec"].get("nodeName", ""),
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
                "status.podIP": pod["status"].get("podIP", ""),
                "status.hostIP": pod["status"].get("hostIP", "")}.get(path, "")

    def secret(self, name):
        with self.c.lock:
            return copy.deepcopy(self.c.objects.get(("Secret", self.ns, name)))

    @staticmethod
    def expand(s, env):
        """$(VAR) from env, $$( kept as $(, unknown $(VAR) left as it is."""
        out, i = [], 0
        while i < len(s):
            if s.startswith("$$", i):
                out.append("$")
                i += 2
            elif s.startswith("$(", i) and ")" in s[i:]:
                j = s.index(")", i)
                var = s[i + 2:j]
                out.append(env[var] if var in env else s[i:j + 1])
                i = j + 1
            else:
                out.append(s[i])
                i += 1
        return "".join(out)

    def env_of(self, pod, c):
        env = {}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = self.expand(e["value"], env)
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    env[e["name"]] = self.field(pod, vf["fieldRef"]["fieldPath"])
                elif "secretKeyRef" in vf:
                    s = self.secret(vf["secretKeyRef"]["name"])
                    if s is None:
                        raise RuntimeError('secret "%s" not found' % vf["secretKeyRef"]["name"])
                    env[e["name"]] = base64.b64decode(s["data"][vf["secretKeyRef"]["key"]]).decode()
        return env

    def volumes(self, pod, c):
        """podman arguments for the container's volume mounts."""
        psc = pod["spec"].get("securityContext") or {}
        uid, fsgroup = psc.get("runAsUser", 0), psc.get("fsGroup")
        args = []
        vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        for m in c.get("volumeMounts", []):
            v = vols[m["name"]]
            ro = ":ro" if m.get("readOnly") else ""
            if "secret" in v:
                s = self.secret(v["secret"]["secretName"])
                if s is None:
                    raise RuntimeError('secret "%s" not found' % v["secret"]["secretName"])
                d = os.path.join(self.dir, "vol-" + m["name"])
                os.makedirs(d, exist_ok=True)
                mode = v["secret"].get("defaultMode", 0o644)
                items = v["secret"].get("items") or [{"key": k, "path": k} for k in s.get("data", {})]
                for it in items:
                    p = os.path.join(d, it["path"])
                    with open(p, "wb") as f:
                        f.write(base64.b64decode(s["data"][it["key"]]))
                    os.chown(p, 0, fsgroup if fsgroup is not None else 0)
                    os.chmod(p, it.get("mode", mode))
                os.chmod(d, 0o755)
                args += ["-v", "%s:%s:ro" % (d, m["mountPath"])]
            elif "emptyDir" in v:
                d = os.path.join(self.dir, "vol-" + m["name"])
                os.makedirs(d, exist_ok=True)
                os.chown(d, uid, fsgroup if fsgroup is not None else 0)
                os.chmod(d, 0o2775 if fsgroup is not None else 0o755)
                args += ["-v", "%s:%s%s" % (d, m["mountPath"], ro)]
            elif "persistentVolumeClaim" in v:
                d = os.path.join(self.c.args.state, "pvc", v["persistentVolumeClaim"]["claimName"])
                os.makedirs(d, exist_ok=True)
                os.chown(d, uid, fsgroup if fsgroup is not None else 0)
                os.chmod(d, 0o2775)
                args += ["-v", "%s:%s%s" % (d, m["mountPath"], ro)]
            else:
                raise RuntimeError("volume %s: a kind the stand-in does not mount" % m["name"])
        return args

    def podman_args(self, pod):
        c = pod["spec"]["containers"][0]
        psc = pod["spec"].get("securityContext") or {}
        sc = c.get("securityContext") or {}
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        gid = sc.get("runAsGroup", psc.get("runAsGroup"))
        env = self.env_of(pod, c)
        args = ["podman", "run", "--name", self.cname, "--pull=never", "--network=host",
                "--no-hosts", "-v", "%s:/etc/hosts:ro" % self.c.hosts_path(self.ns),
                "--log-driver=none"]
        if uid is not None:
            args += ["--user", "%d:%d" % (uid, gid if gid is not None else uid)]
        if psc.get("fsGroup") is not None:
            args += ["--group-add", str(psc["fsGroup"])]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only"]
        caps = sc.get("capabilities") or {}
        for cap in caps.get("drop", []):
            args += ["--cap-drop", cap]
        for cap in caps.get("add", []):
            args += ["--cap-add", cap]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        envfile = os.path.join(self.dir, "env")
        with open(envfile, "w") as f:
            for k, v in env.items():
                f.write("%s=%s\n" % (k, v.replace("\n", " ")))
        os.chmod(envfile, 0o600)
        args += ["--env-file", envfile]
        args += self.volumes(pod, c)
        cmd = [self.expand(a, env) for a in c.get("command", [])]
        rest = [self.expand(a, env) for a in c.get("args", [])]
        if cmd:
            args += ["--entrypoint", json.dumps(cmd)]
        args += [c["image"]] + rest
        return args

    def run(self):
        with self.c.lock:
            pod = copy.deepcopy(self.c.objects.get(("Pod", self.ns, self.name)))
        if pod is None:
            return
        os.makedirs(self.dir, exist_ok=True)
        image = pod["spec"]["containers"][0]["image"]
        if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
            self.set_state({"waiting": {"reason": "ErrImagePull", "message":
                                        'pull access denied for %s: image not known (the stand-in never pulls)' % image}})
            time.sleep(1)
            self.set_state({"waiting": {"reason": "ImagePullBackOff", "message":
                                        'Back-off pulling image "%s"' % image}})
            self.c.procs.pop((self.ns, self.name), None)
            self.finish_deleting_if_asked()
            return
        try:
            args = self.podman_args(pod)
        except (RuntimeError, KeyError) as e:
            self.set_state({"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}})
            self.c.procs.pop((self.ns, self.name), None)
            self.finish_deleting_if_asked()
            return
        subprocess.run(["podman", "rm", "-f", self.cname], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        started = now_rfc3339()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.set_state({"running": {"startedAt": started}})
        for raw in self.proc.stdout:
            self.log(raw.decode("utf-8", "replace").rstrip("\n"))
        code = self.proc.wait()
        oom = subprocess.run(["podman", "inspect", "--format", "{{.State.OOMKilled}}", self.cname],
                             capture_output=True, text=True).stdout.strip() == "true"
        subprocess.run(["podman", "rm", "-f", self.cname], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
        self.set_state({"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                                       "finishedAt": now_rfc3339(), "containerID": ""}})
        self.c.procs.pop((self.ns, self.name), None)
        self.finish_deleting_if_asked()

    def finish_deleting_if_asked(self):
        if self.deleting:
            self.c.remove("Pod", self.ns, self.name)

    def stop(self, grace):
        self.deleting = True
        if self.proc is None:
            self.c.remove("Pod", self.ns, self.name)
            return
        subprocess.run(["podman", "stop", "-t", str(int(grace)), self.cname],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster = None
    token = None

    def log_message(self, fmt, *a):
        if os.environ.get("STANDIN_DEBUG"):
            sys.stderr.write("standin: " + fmt % a + "\n")

    def reply(self, code, obj, ctype="application/json"):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def authorized(self):
        if self.headers.get("Authorization") == "Bearer " + self.token:
            return True
        self.reply(401, status_obj(401, "Unauthorized", "Unauthorized"))
        return False

    def route(self):
        """(kind, ns, name, sub, query) of a resource path, or None."""
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        parts = [p for p in u.path.split("/") if p]
        if len(parts) >= 4 and parts[:2] == ["api", "v1"] and parts[2] == "namespaces":
            rest, table = parts[4:], CORE
        elif len(parts) >= 6 and parts[0] == "apis" and parts[3] == "namespaces":
            table = GROUPS.get((parts[1], parts[2]))
            if table is None or (parts[1] == "jobset.x-k8s.io" and not self.cluster.args.jobset):
                return None
            rest = parts[5:]
        else:
            return None
        ns = parts[3] if parts[0] == "api" else parts[4]
        if not rest or rest[0] not in table:
            return None
        return table[rest[0]], ns, rest[1] if len(rest) > 1 else None, \
            rest[2] if len(rest) > 2 else None, q

    def do_GET(self):
        if not self.authorized():
            return
        path = urllib.parse.urlsplit(self.path).path.rstrip("/")
        if path == "/api":
            return self.reply(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            groups = [{"name": g, "versions": [{"groupVersion": g + "/" + v, "version": v}]}
                      for (g, v) in GROUPS if g != "jobset.x-k8s.io" or self.cluster.args.jobset]
            return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        m = re.match(r"^/apis/([^/]+)/([^/]+)$", path)
        if m:
            table = GROUPS.get((m.group(1), m.group(2)))
            if table is None or (m.group(1) == "jobset.x-k8s.io" and not self.cluster.args.jobset):
                return self.reply(404, status_obj(404, "NotFound", "the server could not find the requested resource"))
            return self.reply(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                    "groupVersion": m.group(1) + "/" + m.group(2),
                                    "resources": [{"name": r, "namespaced": True, "kind": k,
                                                   "verbs": ["create", "delete", "get", "list", "watch"]}
                                                  for r, k in table.items()]})
        r = self.route()
        if r is None:
            return self.reply(404, status_obj(404, "NotFound", "the server could not find the requested resource"))
        kind, ns, name, sub, q = r
        if name is None:
            if q.get("watch") in ("true", "1"):
                return self.watch(kind, ns, q)
            return self.list(kind, ns, q)
        if sub == "log" and kind == "Pod":
            return self.pod_log(ns, name, q)
        with self.cluster.lock:
            o = copy.deepcopy(self.cluster.objects.get((kind, ns, name)))
        if o is None:
            return self.reply(404, status_obj(404, "NotFound", '%ss "%s" not found' % (kind.lower(), name)))
        self.reply(200, o)

    def list(self, kind, ns, q):
        sel = q.get("labelSelector")
        with self.cluster.lock:
            items = [copy.deepcopy(o) for (k, n, _), o in self.cluster.objects.items()
                     if k == kind and n == ns and selector_matches(sel, o["metadata"].get("labels"))]
            rv = str(self.cluster.rv)
        self.reply(200, {"kind": kind + "List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": rv}, "items": items})

    def chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, kind, ns, q):
        sel = q.get("labelSelector")
        timeout = min(int(q.get("timeoutSeconds") or 1800), 1800)
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        c = self.cluster
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            with c.lock:
                start = int(q.get("resourceVersion") or c.rv)
                oldest = c.events[0][0] if c.events else c.rv
            if start < oldest - 1 and start < c.rv:
                self.chunk({"type": "ERROR", "object": status_obj(
                    410, "Expired", "too old resource version: %d (%d)" % (start, oldest))})
                self.wfile.write(b"0\r\n\r\n")
                return
            seen = start
            end = time.time() + timeout
            last_mark = time.time()
            while time.time() < end:
                with c.lock:
                    new = [e for e in c.events if e[0] > seen]
                    if not new:
                        c.lock.wait(timeout=1.0)
                        new = [e for e in c.events if e[0] > seen]
                    current = c.rv
                for rv, k, n, etype, obj in new:
                    seen = rv
                    if k == kind and n == ns and selector_matches(sel, obj["metadata"].get("labels")):
                        self.chunk({"type": etype, "object": obj})
                if bookmarks and time.time() - last_mark >= 2:
                    last_mark = time.time()
                    seen = max(seen, current)
                    self.chunk({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(seen)}}})
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def pod_log(self, ns, name, q):
        with self.cluster.lock:
            pod = self.cluster.objects.get(("Pod", ns, name))
        if pod is None:
            return self.reply(404, status_obj(404, "NotFound", 'pods "%s" not found' % name))
        cs = (pod["status"].get("containerStatuses") or [{}])[0]
        if "waiting" in cs.get("state", {"waiting": {}}):
            return self.reply(400, status_obj(
                400, "BadRequest", 'container "%s" in pod "%s" is waiting to start: %s' % (
                    pod["spec"]["containers"][0]["name"], name,
                    cs.get("state", {}).get("waiting", {}).get("reason", "ContainerCreating"))))
        since = q.get("sinceTime")
        ts = q.get("timestamps") in ("true", "1")
        out = []
        for t, line in list(self.cluster.logs.get((ns, name), [])):
            if since and t[:19] < since[:19]:
                continue
            out.append((t + " " if ts else "") + line)
        self.reply(200, ("\n".join(out) + ("\n" if out else "")).encode(), "text/plain")

    def do_POST(self):
        if not self.authorized():
            return
        r = self.route()
        if r is None or r[2] is not None:
            return self.reply(404, status_obj(404, "NotFound", "the server could not find the requested resource"))
        kind, ns, _, _, _ = r
        try:
            obj = json.loads(self.body())
        except ValueError:
            return self.reply(400, status_obj(400, "BadRequest", "the body is not JSON"))
        code, out = self.cluster.create(kind, ns, obj)
        self.reply(code, out)

    def do_DELETE(self):
        if not self.authorized():
            return
        r = self.route()
        if r is None or r[2] is None:
            return self.reply(404, status_obj(404, "NotFound", "the server could not find the requested resource"))
        kind, ns, name, _, q = r
        body = self.body()
        opts = json.loads(body) if body else {}
        grace = opts.get("gracePeriodSeconds", q.get("gracePeriodSeconds"))
        code, out = self.cluster.delete(kind, ns, name, int(grace) if grace is not None else None)
        self.reply(code, out)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--jobset", action="store_true")
    ap.add_argument("--jobset-controller", action="store_true")
    ap.add_argument("--node-resource", action="append")
    ap.add_argument("--node-label", action="append")
    args = ap.parse_args()
    Handler.cluster = Cluster(args)
    with open(args.token_file) as f:
        Handler.token = f.read().strip()
    srv = Server(("127.0.0.1", args.port), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        Handler.cluster.shutdown()


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    main()
