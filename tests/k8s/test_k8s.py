#!/usr/bin/env python3
"""flsched --launcher kubernetes against the Kubernetes-API stand-in
(tests/k8s/standin.py), which runs the pods flsched creates as real
containers with podman from the built image: their real commands, env,
Secret volumes, users and read-only roots, in the host's network.

Checks (docs/deploy.md, "What was run"):
  1. the PyTorch CNN example (examples/torch/cnn-gtopk.yaml, 2 workers,
     20 iterations) submitted with flsubmit, with `image:` the job's own
     image (examples/torch/Containerfile: FROM the flps image, PyTorch,
     the example's code; scripts/image.sh torch), runs to SUCCEEDED in its
     own pods: one per shard and per worker, with that image, under flpod;
     its workers' progress and done events reach flsched through the
     report API (the summary); Prometheus' target list lists the pods
     while it runs; the shard pods (and everything else of the job) are
     gone after the workers finish; `flsubmit logs` shows each rank's
     output, each worker's own print(); the credentials reach the pods
     only as the job's Secret;
  2. a job whose pods cannot be scheduled (it asks for a GPU the
     stand-in's node lacks) is shown by `flsubmit status` as waiting, with
     the scheduler's reason, and a job submitted after it runs to
     SUCCEEDED meanwhile; cancelling it leaves no pod, Service or Secret;
  3. a killed shard pod restarts the job from its checkpoint
     (max_restarts: 1): attempt 1 restores and the job SUCCEEDS;
  4. cancelling the PyTorch CNN job while its workers train leaves no
     pod, Service or Secret.

usage: test_k8s.py BUILD_DIR SOURCE_DIR
Needs root, podman (scripts/image.sh conf), redis-server and the image
(FLPS_IMAGE, default localhost/flps:VERSION; scripts/image.sh build);
exits 77 (skipped) without them. Builds the job's image
(FLPS_TORCH_IMAGE, default localhost/flps-torch:VERSION) with
scripts/image.sh torch: a cache hit when it is up to date, about 3
minutes and 1 GB of Debian packages otherwise. Prints ok/not ok lines and
"N passed, M failed"; exits 1 on any failure.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BUILD, ROOT = sys.argv[1], sys.argv[2]
BIN = os.path.join(BUILD, "bin")
HERE = os.path.dirname(os.path.abspath(__file__))
PASSED, FAILED = [0], [0]
NS = "flps-test"


def check(name, cond, why=""):
    if cond:
        PASSED[0] += 1
        print("ok - %s" % name, flush=True)
    else:
        FAILED[0] += 1
        print("not ok - %s%s" % (name, ": " + str(why) if why else ""), flush=True)
    return cond


def skip(why):
    print("test_k8s: skipped: %s" % why)
    sys.exit(77)


def version():
    text = open(os.path.join(ROOT, "include", "flps.h")).read()
    return ".".join(re.search(r"#define FLPS_VERSION_%s (\d+)" % k, text).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))


def free_port():
    """A loopback port the kernel had free a moment ago."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def wait_for(what, fn, timeout, every=0.5):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = fn()
        if last:
            return last
        time.sleep(every)
    print("# timed out after %ds waiting for %s" % (timeout, what), flush=True)
    return last


class Env:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.token = "api-token-0123456789abcdef"
        self.k8s_token = "k8s-token-0123456789abcdef"

    # ---- processes ----
    def spawn(self, name, args, **kw):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, **kw)
        self.procs.append((name, p))
        return p

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()

    def log_tail(self, name, n=30):
        try:
            return "".join(open(os.path.join(self.tmp, name + ".log")).readlines()[-n:])
        except OSError:
            return ""

    # ---- the stand-in's API ----
    def k8s(self, path):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.kport, path),
                                     headers={"Authorization": "Bearer " + self.k8s_token})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def objects(self, job, kinds=("pods", "services", "secrets")):
        out = []
        for k in kinds:
            items = self.k8s("/api/v1/namespaces/%s/%s?labelSelector=flps.io/job=%s" % (NS, k, job))["items"]
            out += ["%s/%s" % (k, o["metadata"]["name"]) for o in items]
        return out

    def pods(self, job):
        return self.k8s("/api/v1/namespaces/%s/pods?labelSelector=flps.io/job=%s" % (NS, job))["items"]

    # ---- flsched's API and flsubmit ----
    def api(self, path):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.sport, path),
                                     headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def job(self, jid):
        return self.api("/v1/jobs/" + jid)

    def flsubmit(self, *args, input_text=None):
        env = dict(os.environ, FLPS_SCHEDULER="http://127.0.0.1:%d" % self.sport,
                   FLPS_TOKEN=self.token)
        return subprocess.run([os.path.join(BIN, "flsubmit")] + list(args), env=env,
                              capture_output=True, text=True, input=input_text, timeout=60)

    def submit(self, name, text):
        path = os.path.join(self.tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        r = self.flsubmit("submit", path)
        if not check("%s: flsubmit submit" % name, r.returncode == 0, r.stderr.strip()):
            return None
        return r.stdout.strip().split()[-1]

    def state(self, jid):
        try:
            return self.job(jid)["state"]
        except Exception:  # noqa: BLE001 - a poll that fails is retried
            return None


def start(env, image, jobset=False):
    """Redis (once), the stand-in and flsched; with jobset the stand-in
    serves jobset.x-k8s.io and expands JobSets into pods, and flsched (on
    a Redis database of its own) makes a JobSet per job."""
    if not hasattr(env, "rport"):
        env.rport = free_port()
        env.spawn("redis", ["redis-server", "--port", str(env.rport), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no"])
    with open(os.path.join(env.tmp, "k8s-token"), "w") as f:
        f.write(env.k8s_token + "\n")
    with open(os.path.join(env.tmp, "api-token"), "w") as f:
        f.write(env.token + "\n")
    env.cluster = os.path.join(env.tmp, "cluster-jobset" if jobset else "cluster")
    portfile = env.cluster + ".port"
    env.spawn("standin", [sys.executable, os.path.join(HERE, "standin.py"), "--port-file", portfile,
                          "--token-file", os.path.join(env.tmp, "k8s-token"),
                          "--state", env.cluster] +
              (["--jobset", "--jobset-controller"] if jobset else []))
    if not wait_for("the stand-in", lambda: os.path.exists(portfile), 30):
        raise SystemExit("the stand-in did not start:\n" + env.log_tail("standin"))
    env.kport = int(open(portfile).read())
    env.sport = free_port()
    env.spawn("flsched", [
        os.path.join(BIN, "flsched"), "--redis",
        "redis://127.0.0.1:%d/%d" % (env.rport, 1 if jobset else 0),
        "--listen", "127.0.0.1:%d" % env.sport, "--token-file", os.path.join(env.tmp, "api-token"),
        "--launcher", "kubernetes", "--k8s-api", "http://127.0.0.1:%d" % env.kport,
        "--k8s-token-file", os.path.join(env.tmp, "k8s-token"), "--k8s-namespace", NS,
        "--k8s-prefix", "t%d" % (os.getpid() % 100000), "--k8s-image", image,
        "--k8s-scheduler-url", "http://127.0.0.1:%d" % env.sport,
        "--k8s-checkpoint-claim", "checkpoints",
        "--k8s-shard-port", str(17000 + os.getpid() % 1000 * 10),
        "--k8s-metrics-port", str(27000 + os.getpid() % 1000 * 10),
        "--k8s-jobset", "always" if jobset else "auto", "--k8s-image-pull-grace", "4"],
        env=dict(os.environ, FLPS_LOG="info"))
    if not wait_for("flsched", lambda: "listening on" in env.log_tail("flsched"), 30):
        raise SystemExit("flsched did not start:\n" + env.log_tail("flsched"))


def torch_job(name, image, iterations):
    """examples/torch/cnn-gtopk.yaml, the PyTorch CNN example, as a user
    would submit it to Kubernetes: its own image, the example's code where
    that image has it (/opt/job), 2 workers, fewer iterations, and rank 0's
    evaluations on 1,000 of the test images (the example's flag)."""
    over = {"name": name, "workers": "2", "iterations": str(iterations), "eval_every": "10",
            "command": "[python3, /opt/job/cnn.py, --test-samples, \"1000\"]", "image": image}
    lines = []
    for line in open(os.path.join(ROOT, "examples", "torch", "cnn-gtopk.yaml")):
        m = re.match(r"^([a-z_]+):", line)
        if m and m.group(1) in over:
            line = "%s: %s\n" % (m.group(1), over.pop(m.group(1)))
        lines.append(line)
    return "".join(lines) + "".join("%s: %s\n" % kv for kv in over.items())


def torch_cnn(env, image):
    """Must-hold 1: the PyTorch CNN example with image:, in its own pods,
    to SUCCEEDED."""
    jid = env.submit("torch-cnn", torch_job("torch-cnn-k8s", image, 20))
    if jid is None:
        return
    targets_seen = []

    def done():
        try:
            t = json.loads(urllib.request.urlopen(
                "http://127.0.0.1:%d/v1/metrics/targets" % env.sport, timeout=5).read())
            if any(x["labels"].get("job_id") == jid for x in t):
                targets_seen.append(t)
        except Exception:  # noqa: BLE001
            pass
        return env.state(jid) in ("SUCCEEDED", "FAILED", "CANCELLED")
    wait_for("the PyTorch CNN job", done, 420, every=1)
    job = env.job(jid)
    check("torch: the job SUCCEEDED", job["state"] == "SUCCEEDED", "%s %s\n%s" % (
        job["state"], job.get("reason"), env.log_tail("flsched")))
    created = [o for (k, ns, n, o) in env_created(env) if o["metadata"].get("labels", {}).get("flps.io/job") == jid]
    pods = [o for o in created if o["kind"] == "Pod"]
    roles = sorted(o["metadata"]["labels"]["flps.io/role"] for o in pods)
    check("torch: one pod per shard and per worker", roles == ["server", "worker", "worker"], roles)
    check("torch: every pod runs the job's image", all(o["spec"]["containers"][0]["image"] == image for o in pods),
          [o["spec"]["containers"][0]["image"] for o in pods])
    check("torch: every pod runs its program under flpod",
          all(o["spec"]["containers"][0]["command"][:2] == ["flpod", "--"] for o in pods))
    check("torch: the workers run the example's code from the image",
          all(o["spec"]["containers"][0]["command"][2:4] == ["python3", "/opt/job/cnn.py"]
              for o in pods if o["metadata"]["labels"]["flps.io/role"] == "worker"),
          [o["spec"]["containers"][0]["command"] for o in pods])
    check("torch: a headless Service and a Secret were made with them",
          sorted(o["kind"] for o in created if o["kind"] != "Pod") == ["Secret", "Service"])
    secret = [o for o in created if o["kind"] == "Secret"]
    if secret:
        values = [v for v in secret[0]["data"].values()]
        spec_text = json.dumps(pods)
        import base64
        plain = [base64.b64decode(v).decode() for v in values]
        creds = [p for p in plain if p.startswith("secret=") or "\nsecret=" in p]
        check("torch: the credentials are in the Secret and in no pod spec",
              creds and all(line.split("=", 1)[1] not in spec_text
                            for c in creds for line in c.splitlines() if "=" in line))
    summary = job.get("summary") or {}
    check("torch: the workers' done events reached flsched (the summary)",
          summary.get("iterations") == 20 and summary.get("test_accuracy") is not None
          and summary.get("bytes_sent", 0) > 0, summary)
    check("torch: the metrics target list listed the pods while it ran", bool(targets_seen))
    wait_for("the job's objects to go", lambda: not env.objects(jid) or None, 90)
    check("torch: no pod, Service or Secret is left after the workers finished",
          not env.objects(jid), env.objects(jid))
    r = env.flsubmit("logs", jid)
    out = r.stdout
    check("torch: flsubmit logs shows each rank's output",
          all(re.search(r"^\[%s\] " % t, out, re.M) for t in ("server-0", "worker-0", "worker-1")),
          out[-800:])
    # cnn.py's own print() at its end (to stderr): each worker's is its
    # own rank's.
    check("torch: each worker's lines are its own rank's print()",
          re.search(r"^\[worker-0\] rank 0: 20 iterations in ", out, re.M) is not None and
          re.search(r"^\[worker-1\] rank 1: 20 iterations in ", out, re.M) is not None, out[-800:])


def env_created(env):
    """Every object the stand-in was ever asked to create (its debug
    endpoint is not part of the API: it is read from the state dir)."""
    try:
        return json.load(open(os.path.join(env.cluster, "created.json")))
    except (OSError, ValueError):
        return []


def unschedulable(env):
    """Must-hold 2: a job the cluster cannot place waits there, said so
    with the reason, and holds nothing back."""
    # Every pod of it asks for an RDMA device the stand-in's node lacks.
    u = env.submit("rdma", "name: wants-rdma\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"
                           "servers: 1\niterations: 50\npriority: 9\n"
                           "resources:\n  rdma/hca_shared_devices_a: 1\n")
    d = env.submit("after", "name: after\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"
                            "servers: 1\niterations: 100\n")
    if u is None or d is None:
        return

    def waiting():
        j = env.job(u)
        return "Unschedulable" in (j.get("reason") or "") and j
    j = wait_for("the RDMA job to be unschedulable", waiting, 60)
    st = env.flsubmit("status", u).stdout
    check("unschedulable: flsubmit status says so, with the scheduler's reason",
          "cannot be scheduled" in st and "Insufficient rdma/hca_shared_devices_a" in st, st)
    check("unschedulable: its tasks are PENDING", bool(j) and all(
        t["state"] == "PENDING" for t in j["tasks"]), j and j["tasks"])
    ev = env.flsubmit("logs", u, "--events").stdout
    wait_for("the job after it", lambda: env.state(d) in ("SUCCEEDED", "FAILED"), 180)
    check("unschedulable: the job submitted after it ran to SUCCEEDED meanwhile",
          env.state(d) == "SUCCEEDED", "%s: %s" % (env.state(d), env.job(d).get("reason")))
    check("unschedulable: the waiting job is still waiting", env.state(u) == "RUNNING"
          and "Unschedulable" in env.job(u)["reason"])
    r = env.flsubmit("cancel", u)
    check("unschedulable: cancel", r.returncode == 0, r.stderr)
    wait_for("the cancelled job's objects to go", lambda: not env.objects(u) or None, 240)
    check("unschedulable: cancel leaves no pod, Service or Secret", not env.objects(u), env.objects(u))
    del ev


def run_to_end(env, name, text, timeout):
    """Submit text and wait until the job is final: (its id, the job
    object), or (None, None) when the submit failed."""
    jid = env.submit(name, text)
    if jid is None:
        return None, None
    wait_for("job %s (%s) to end" % (jid, name),
             lambda: env.state(jid) in ("SUCCEEDED", "FAILED", "CANCELLED"), timeout)
    return jid, env.job(jid)


def image_pull(env):
    """An image that is not there: ErrImagePull, then ImagePullBackOff
    (the stand-in never pulls); an event says so, and after the grace
    (--k8s-image-pull-grace 4) the job FAILS with it, and nothing is left."""
    jid, j = run_to_end(env, "pull", "name: no-image\nmodel: mlp\ndataset: synthetic\n"
                                     "max_restarts: 2\nimage: localhost/flps-not-there:0\n", 90)
    if jid is None:
        return
    check("image: a job whose image cannot be pulled FAILED, without restarts",
          j["state"] == "FAILED" and j["restarts"] == 0, "%s %s" % (j["state"], j["restarts"]))
    check("image: its reason names the image and the kubelet's words",
          "cannot pull its image localhost/flps-not-there:0 (ImagePullBackOff)" in j["reason"], j["reason"])
    ev = env.api("/v1/jobs/%s/events" % jid)["events"]
    check("image: an image_pull event", any(e["type"] == "image_pull" for e in ev),
          [e["type"] for e in ev])
    wait_for("its objects to go", lambda: not env.objects(jid) or None, 60)
    check("image: nothing is left", not env.objects(jid), env.objects(jid))


def restart_from_checkpoint(env):
    """A killed shard pod: the job restarts from its checkpoint."""
    jid = env.submit("restart", "name: restart\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"
                                "servers: 1\niterations: 12000\neval_every: 0\ncheckpoint_interval: 1\n"
                                "max_restarts: 1\ncompression: auto\n")
    if jid is None:
        return

    def far_enough():
        j = env.job(jid)
        return (j.get("progress") or {}).get("iteration", 0) >= 200 and j["state"] == "RUNNING"
    ok = wait_for("the restart job to run", far_enough, 180)
    if not check("restart: the job runs and reports progress", bool(ok), env.job(jid)):
        return
    # A checkpoint (every second) written after the progress seen, then the
    # kill at once: on a quiet machine the MLP runs about 1,000 iterations a
    # second, so a fixed sleep could outlast the job (CI: 4,000 iterations
    # done in 3.9 s, before the kill).
    def checkpointed():
        logs = env.flsubmit("logs", jid).stdout
        return re.search(r"^\[server-0\] .*checkpoint written", logs, re.M) is not None or None
    wait_for("the shard's first checkpoint", checkpointed, 60)
    before = env.job(jid)
    check("restart: the job is still running when its shard is killed",
          before["state"] == "RUNNING", "%s at %s" % (before["state"], before.get("progress")))
    server = [p["metadata"]["name"] for p in env.pods(jid)
              if p["metadata"]["labels"]["flps.io/role"] == "server"]
    r = subprocess.run(["podman", "kill", "standin-%s-%s" % (NS, server[0])], capture_output=True,
                       text=True)
    check("restart: the shard pod's container is killed", r.returncode == 0, r.stderr)
    wait_for("the restarted job", lambda: env.state(jid) in ("SUCCEEDED", "FAILED"), 240)
    j = env.job(jid)
    check("restart: the job SUCCEEDED after one restart", j["state"] == "SUCCEEDED" and
          j["restarts"] == 1 and j["attempt"] == 1, "%s restarts %s: %s" % (
              j["state"], j["restarts"], j.get("reason")))
    ev = env.api("/v1/jobs/%s/events" % jid)["events"]
    check("restart: the restart event names the killed shard",
          any(e["type"] == "restarted" and "server-0" in e["message"] for e in ev),
          [e["message"] for e in ev])
    logs = env.flsubmit("logs", jid).stdout
    check("restart: attempt 1's shard restored from the checkpoint",
          re.search(r"^\[server-0\] .*restor", logs, re.M | re.I) is not None, logs[-1500:])
    check("auto: flsched planned from rank 0's reported profile",
          any(e["type"] == "plan" for e in ev), [e["type"] for e in ev])
    check("auto: flpod wrote the plan where its worker follows it",
          re.search(r"^\[worker-0\] flpod: compression plan v\d+ written", logs, re.M) is not None,
          logs[-1500:])


def cancel_running(env, image):
    """Must-hold 1's last part: cancelling the PyTorch CNN job while its
    workers train leaves nothing behind."""
    jid = env.submit("cancel", torch_job("torch-long", image, 3000))
    if jid is None:
        return
    ok = wait_for("the long job's workers", lambda: all(
        t["state"] == "RUNNING" for t in env.job(jid)["tasks"]) and env.job(jid)["tasks"], 120)
    check("cancel: the job's pods run", bool(ok), env.job(jid)["tasks"])
    ok = wait_for("the long job's progress", lambda: (env.job(jid).get("progress") or {}).get(
        "iteration", 0) > 0, 120)
    check("cancel: its workers train (progress reported)", bool(ok), env.job(jid).get("progress"))
    r = env.flsubmit("cancel", jid)
    check("cancel: flsubmit cancel", r.returncode == 0, r.stderr)
    wait_for("the cancelled job's objects to go", lambda: not env.objects(jid) or None, 240)
    check("cancel: nothing is left (no pod, Service or Secret)", not env.objects(jid),
          env.objects(jid))


def jobset_shape(env):
    """The JobSet shape: flsched finds the CRD, makes a JobSet (its
    controller emulated by the stand-in makes the Indexed Jobs' pods, with
    the completion index as their rank), and the job runs to SUCCEEDED."""
    jid, j = run_to_end(env, "jobset", "name: in-a-jobset\nmodel: mlp\ndataset: synthetic\n"
                                       "iterations: 200\n", 180)
    if jid is None:
        return
    check("jobset: the job SUCCEEDED", j["state"] == "SUCCEEDED", j.get("reason"))
    kinds = sorted(o["kind"] for (k, ns, n, o) in env_created(env)
                   if o["metadata"].get("labels", {}).get("flps.io/job") == jid)
    check("jobset: flsched made a Secret and a JobSet; the controller the pods",
          kinds == ["JobSet", "Pod", "Pod", "Secret"], kinds)
    logs = env.flsubmit("logs", jid).stdout
    check("jobset: the ranks' output under their names from the completion index",
          re.search(r"^\[worker-0\] ", logs, re.M) and re.search(r"^\[server-0\] ", logs, re.M),
          logs[-600:])
    wait_for("the JobSet and its pods to go", lambda: not env.k8s(
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/%s/jobsets" % NS)["items"]
        and not env.objects(jid, ("pods", "secrets")) or None, 60)
    check("jobset: no JobSet, pod or Secret is left",
          not env.k8s("/apis/jobset.x-k8s.io/v1alpha2/namespaces/%s/jobsets" % NS)["items"]
          and not env.objects(jid, ("pods", "secrets")), env.objects(jid))


def stop_cluster(env):
    """Stop flsched (it must stop cleanly: exit 0, and no leak under a
    sanitizer build) and the stand-in; keep Redis."""
    for name in ("flsched", "standin"):
        for n, p in env.procs:
            if n == name and p.poll() is None:
                p.terminate()
                p.wait(60)
                if name == "flsched":
                    check("flsched stops cleanly on SIGTERM (exit 0)", p.returncode == 0,
                          "exit %s\n%s" % (p.returncode, env.log_tail("flsched", 40)))
        env.procs = [(n, p) for (n, p) in env.procs if n != name]


def main():
    t0 = time.time()
    if os.geteuid() != 0:
        skip("needs root (rootful podman)")
    for tool in ("podman", "redis-server"):
        if shutil.which(tool) is None:
            skip("%s is missing" % tool)
    image = os.environ.get("FLPS_IMAGE", "localhost/flps:" + version())
    tmp = tempfile.mkdtemp(prefix="flps-k8s.")
    os.chmod(tmp, 0o755)
    conf = os.path.join(tmp, "containers.conf")
    subprocess.run([os.path.join(ROOT, "scripts", "image.sh"), "conf", conf], check=True,
                   stdout=subprocess.DEVNULL)
    os.environ["CONTAINERS_CONF"] = conf
    if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        skip("no image %s (scripts/image.sh build)" % image)
    # The job's own image, as a user's would be: examples/torch/Containerfile
    # FROM the flps image (scripts/image.sh torch; built before this test in
    # scripts/test.sh's image stage, so here a cache hit of a few seconds).
    job_image = os.environ.get("FLPS_TORCH_IMAGE",
                               image.rsplit(":", 1)[0] + "-torch:" + image.rsplit(":", 1)[1])
    r = subprocess.run([os.path.join(ROOT, "scripts", "image.sh"), "torch"], capture_output=True,
                       text=True, env=dict(os.environ, FLPS_IMAGE=image, FLPS_TORCH_IMAGE=job_image))
    if not check("the job's image (PyTorch and the CNN example) builds FROM the flps image",
                 r.returncode == 0, r.stdout + r.stderr):
        sys.exit(1)
    print("# " + r.stdout.strip().replace("\n", "\n# "), flush=True)
    env = Env(tmp)
    try:
        start(env, image)
        for case in (torch_cnn, unschedulable, image_pull, restart_from_checkpoint,
                     cancel_running):
            t = time.time()
            case(env, job_image) if case in (torch_cnn, cancel_running) else case(env)
            print("# %s: %.0f s" % (case.__name__, time.time() - t), flush=True)
        stop_cluster(env)
        start(env, image, jobset=True)
        jobset_shape(env)
    finally:
        stop_cluster(env)
        env.stop()
        subprocess.run("podman ps -a --format '{{.Names}}' | grep '^standin-%s-' | "
                       "xargs -r podman rm -f -t 0" % NS, shell=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if FAILED[0]:
            for name in ("flsched", "standin"):
                print("# --- %s (last lines) ---\n%s" % (name, env.log_tail(name, 40)))
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed (%.0f s)" % (PASSED[0], FAILED[0], time.time() - t0))
    sys.exit(1 if FAILED[0] else 0)


if __name__ == "__main__":
    main()
