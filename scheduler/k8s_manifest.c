/* The kubernetes launcher's objects, built from the job file (no I/O). */
#include "scheduler/k8s_manifest.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/numparse.h"
#include "common/strbuf.h"
#include "services/workerenv.h"

/* Where the image keeps the Python package a command: job imports. */
#define K8S_IMAGE_PYTHON "/opt/flps/lib/python3/dist-packages"
/* A default pod gets 30 s between SIGTERM and SIGKILL: enough for a
 * shard's last checkpoint. */
#define K8S_GRACE_S 30

/* ---- Names and ports ---- */

static int is_dns_label(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '-'))
            return 0;
    return 1;
}

flps_err k8s_manifest_set_name(const k8s_settings *s, const char *id,
                               uint32_t attempt, char *buf, size_t len)
{
    char pod[128];
    int n = snprintf(buf, len, "%s-%s-%u", s->prefix, id, attempt);

    if (n < 0 || (size_t)n >= len || !is_dns_label(buf))
        return FLPS_EINVAL;
    /* The longest host name of the set must be a DNS label too. */
    k8s_manifest_pod_name(buf, 0, 1023, pod, sizeof(pod));
    return is_dns_label(pod) ? FLPS_OK : FLPS_EINVAL;
}

void k8s_manifest_pod_name(const char *set, int server, uint32_t index,
                           char *buf, size_t len)
{
    snprintf(buf, len, "%s-%s-0-%u", set, server ? "server" : "worker", index);
}

int k8s_manifest_data_port(const k8s_settings *s, uint32_t index)
{
    return s->jobset ? s->shard_port : s->shard_port + (int)index;
}

int k8s_manifest_metrics_port(const k8s_settings *s, const jobspec *spec,
                              int server, uint32_t index)
{
    if (s->jobset) /* a role each, so a shard and a worker share a node's */
        return s->metrics_port + (server ? 0 : 1);
    return s->metrics_port + (int)(server ? index : spec->servers + index);
}

void k8s_manifest_endpoint(const k8s_settings *s, const char *set,
                           uint32_t index, char *buf, size_t len)
{
    char host[96];

    k8s_manifest_pod_name(set, 1, index, host, sizeof(host));
    snprintf(buf, len, "tcp://%s.%s:%d", host, set,
             k8s_manifest_data_port(s, index));
}

/* ---- Small builders ---- */

/* A JSON string of a literal value in a pod's command or env: Kubernetes
 * expands $(NAME) there, so "$(" is written "$$(" to stay as it is. */
static json_t *literal(const char *v)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    json_t *j;

    if (strstr(v, "$(") == NULL)
        return json_string(v);
    for (const char *p = v; *p != '\0'; p++) {
        if (p[0] == '$' && p[1] == '(')
            flps_strbuf_puts(&b, "$");
        flps_strbuf_append(&b, p, 1);
    }
    j = flps_strbuf_error(&b) == FLPS_OK ? json_string(b.data) : NULL;
    flps_strbuf_fini(&b);
    return j;
}

static void add_env(json_t *env, const char *name, json_t *value)
{
    json_array_append_new(env, json_pack("{s:s,s:o}", "name", name, "value",
                                         value ? value : json_string("")));
}

static void add_env_field(json_t *env, const char *name, const char *path)
{
    json_array_append_new(env, json_pack("{s:s,s:{s:{s:s}}}", "name", name,
                                         "valueFrom", "fieldRef", "fieldPath",
                                         path));
}

/* The labels every object of the attempt carries (and its pods' too). */
static json_t *labels(const k8s_settings *s, const k8s_job *j, const char *set)
{
    char attempt[16];

    snprintf(attempt, sizeof(attempt), "%u", j->attempt);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "app.kubernetes.io/name",
                     "flps", K8S_LABEL_MANAGED, "flsched", K8S_LABEL_INSTANCE,
                     s->prefix, K8S_LABEL_JOB, j->id, K8S_LABEL_ATTEMPT,
                     attempt, K8S_LABEL_SET, set);
}

static json_t *metadata(const k8s_settings *s, const k8s_job *j,
                        const char *set, const char *name)
{
    return json_pack("{s:s,s:o}", "name", name, "labels", labels(s, j, set));
}

/* A quantity of thousandths of a CPU: "2", "1500m". */
static json_t *cpu_quantity(double cpus)
{
    char buf[32];
    long long m = (long long)(cpus * 1000.0 + 0.5);

    if (m < 1)
        m = 1;
    if (m % 1000 == 0)
        snprintf(buf, sizeof(buf), "%lld", m / 1000);
    else
        snprintf(buf, sizeof(buf), "%lldm", m);
    return json_string(buf);
}

/* Bytes as a quantity, in Mi or Gi when whole. */
static json_t *memory_quantity(uint64_t bytes)
{
    char buf[32];

    if (bytes >= (1ULL << 30) && bytes % (1ULL << 30) == 0)
        snprintf(buf, sizeof(buf), "%lluGi", (unsigned long long)(bytes >> 30));
    else if (bytes >= (1ULL << 20) && bytes % (1ULL << 20) == 0)
        snprintf(buf, sizeof(buf), "%lluMi", (unsigned long long)(bytes >> 20));
    else
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)bytes);
    return json_string(buf);
}

/* Set o's NAME to VALUE for each of the n words "NAME=VALUE" (a job
 * file's resources or node_selector entries). */
static void put_pairs(json_t *o, const char *const *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(w[i], '=');
        char name[320];

        if (eq == NULL || (size_t)(eq - w[i]) >= sizeof(name))
            continue;
        memcpy(name, w[i], (size_t)(eq - w[i]));
        name[eq - w[i]] = '\0';
        json_object_set_new(o, name, json_string(eq + 1));
    }
}

/* requests = limits (the Guaranteed class: a job's pods are not the first
 * evicted): the role's CPUs and memory, a worker's GPUs, and every device
 * resource of resources: for every pod. */
static json_t *resources(const jobspec *spec, int server)
{
    json_t *r = json_object();
    const char *w[JOBSPEC_MAP_MAX];
    size_t n = jobspec_map_words(spec->resources, spec->resources_count, w,
                                 JOBSPEC_MAP_MAX);

    json_object_set_new(
        r, "cpu",
        cpu_quantity(server ? spec->cpus_per_server : spec->cpus_per_worker));
    json_object_set_new(r, "memory",
                        memory_quantity(server ? spec->memory_per_server
                                               : spec->memory_per_worker));
    if (!server && spec->gpus_per_worker > 0) {
        char g[16];

        snprintf(g, sizeof(g), "%u", spec->gpus_per_worker);
        json_object_set_new(r, "nvidia.com/gpu", json_string(g));
    }
    put_pairs(r, w, n);
    return json_pack("{s:o,s:O}", "limits", r, "requests", r);
}

static json_t *tolerations(const jobspec *spec)
{
    json_t *a = json_array();

    for (uint32_t i = 0; i < spec->tolerations_count; i++) {
        jobspec_toleration t;
        json_t *o;

        if (jobspec_toleration_get(spec, i, &t) != FLPS_OK)
            continue;
        o = json_pack("{s:s}", "operator", t.op);
        if (t.key[0])
            json_object_set_new(o, "key", json_string(t.key));
        if (t.value[0])
            json_object_set_new(o, "value", json_string(t.value));
        if (t.effect[0])
            json_object_set_new(o, "effect", json_string(t.effect));
        if (t.has_seconds)
            json_object_set_new(o, "tolerationSeconds",
                                json_integer((json_int_t)t.seconds));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *node_selector(const jobspec *spec)
{
    json_t *o = json_object();
    const char *w[JOBSPEC_MAP_MAX];

    put_pairs(o, w,
              jobspec_map_words(spec->node_selector, spec->node_selector_count,
                                w, JOBSPEC_MAP_MAX));
    return o;
}

/* ---- The containers ---- */

/* argv of a shard: flpod (credentials, reports) runs flps. */
static json_t *server_command(const k8s_settings *s, const k8s_job *j,
                              const char *index)
{
    char shards[16], listen[48], ckpt[256], interval[32], metrics[32];
    json_t *c;

    snprintf(shards, sizeof(shards), "%u", j->spec->servers);
    snprintf(ckpt, sizeof(ckpt), "%s/%s-%s/ckpt", K8S_CHECKPOINT_DIR, s->prefix,
             j->id);
    flps_format_double(
        interval, sizeof(interval),
        j->spec->checkpoint_interval > 0 ? j->spec->checkpoint_interval : 30.0);
    c = json_pack("[s,s,s,s,s,s,s,s,s]", "flpod", "--", "flps", "--job", j->id,
                  "--shard", index, "--shards", shards);
    if (s->jobset) {
        snprintf(listen, sizeof(listen), "tcp://0.0.0.0:%d", s->shard_port);
        snprintf(metrics, sizeof(metrics), "0.0.0.0:%d", s->metrics_port);
    } else {
        uint32_t i = (uint32_t)strtoul(index, NULL, 10);

        snprintf(listen, sizeof(listen), "tcp://0.0.0.0:%d",
                 k8s_manifest_data_port(s, i));
        snprintf(metrics, sizeof(metrics), "0.0.0.0:%d",
                 k8s_manifest_metrics_port(s, j->spec, 1, i));
    }
    json_array_append_new(c, json_string("--listen"));
    json_array_append_new(c, json_string(listen));
    json_array_append_new(c, json_string("--checkpoint-dir"));
    json_array_append_new(c, json_string(ckpt));
    json_array_append_new(c, json_string("--checkpoint-interval"));
    json_array_append_new(c, json_string(interval));
    json_array_append_new(c, json_string("--metrics"));
    json_array_append_new(c, json_string(metrics));
    if (j->attempt > 0)
        json_array_append_new(c, json_string("--restore"));
    if (j->transport != NULL && j->transport[0] != '\0') {
        json_array_append_new(c, json_string("--transport"));
        json_array_append_new(c, json_string(j->transport));
    }
    return c;
}

/* The shards' endpoints, comma-separated. */
static flps_err server_list(const k8s_settings *s, const k8s_job *j,
                            const char *set, flps_strbuf *out)
{
    for (uint32_t i = 0; i < j->spec->servers; i++) {
        char ep[160];

        k8s_manifest_endpoint(s, set, i, ep, sizeof(ep));
        flps_strbuf_printf(out, "%s%s", i ? "," : "", ep);
    }
    return flps_strbuf_error(out);
}

/* argv of a worker running flworker. */
static json_t *worker_command(const k8s_job *j, const char *index,
                              const char *servers, const char *metrics)
{
    json_t *c = json_pack("[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s]", "flpod", "--",
                          "flworker", "--job", K8S_SECRET_DIR "/job.yaml",
                          "--rank", index, "--servers", servers, "--job-id",
                          j->id, "--plan", K8S_PLAN_FILE, "--metrics", metrics);

    if (j->transport != NULL && j->transport[0] != '\0') {
        json_array_append_new(c, json_string("--transport"));
        json_array_append_new(c, json_string(j->transport));
    }
    return c;
}

/* vars ("NAME=VALUE" entries) into env, taken literally; FLPS_RANK, where
 * there is one, the pod's index. Frees vars. */
static void add_vars(json_t *env, char **vars)
{
    for (size_t i = 0; vars[i] != NULL; i++) {
        char name[128];
        const char *eq = strchr(vars[i], '=');

        if (eq == NULL || (size_t)(eq - vars[i]) >= sizeof(name))
            continue;
        memcpy(name, vars[i], (size_t)(eq - vars[i]));
        name[eq - vars[i]] = '\0';
        if (strcmp(name, "FLPS_RANK") == 0)
            add_env(env, name, json_string("$(FLPS_INDEX)"));
        else
            add_env(env, name, literal(eq + 1));
    }
    workerenv_free(vars);
}

/* The job file's env: into a built-in worker's env (as flrun and flagent
 * start flworker with it). 0, or -1 without memory. */
static int add_job_env(const k8s_job *j, json_t *env)
{
    char **vars = NULL;

    if (workerenv_build_flworker(j->spec, NULL, &vars) != FLPS_OK)
        return -1;
    add_vars(env, vars);
    return 0;
}

/* A command: job's worker: its program under flpod, its FLPS_*
 * variables (services/workerenv.h) into env with FLPS_RANK the pod's
 * index. */
static json_t *user_command(const k8s_job *j, const char *servers, json_t *env)
{
    static char *const base[] = {"FLPS_PYTHON_DIR=" K8S_IMAGE_PYTHON, NULL};
    const char *words[JOBSPEC_WORDS_MAX];
    size_t nw = jobspec_words(j->spec->command, j->spec->command_argc, words,
                              JOBSPEC_WORDS_MAX);
    json_t *c = json_pack("[s,s]", "flpod", "--");
    workerenv we;
    char **vars = NULL;

    for (size_t i = 0; i < nw; i++)
        json_array_append_new(c, literal(words[i]));
    memset(&we, 0, sizeof(we));
    we.job = j->id;
    we.servers = servers;
    we.plan_file = K8S_PLAN_FILE;
    we.transport = j->transport && j->transport[0] ? j->transport : NULL;
    if (workerenv_build(j->spec, &we, base, &vars) != FLPS_OK) {
        json_decref(c);
        return NULL;
    }
    add_vars(env, vars);
    return c;
}

/* The container of a shard (server) or a worker; index is "$(FLPS_INDEX)"
 * under a JobSet, the number for a Pod. */
static json_t *container(const k8s_settings *s, const k8s_job *j,
                         const char *set, int server, const char *index,
                         json_t *env)
{
    flps_strbuf servers = FLPS_STRBUF_INIT;
    char metrics[32], task[48];
    json_t *c, *cmd = NULL, *mounts, *ports, *caps;
    uint32_t i = (uint32_t)strtoul(index[0] == '$' ? "0" : index, NULL, 10);
    int mport = k8s_manifest_metrics_port(s, j->spec, server, i);

    if (server_list(s, j, set, &servers) != FLPS_OK)
        return NULL;
    snprintf(metrics, sizeof(metrics), "0.0.0.0:%d", mport);
    snprintf(task, sizeof(task), "%s-%s", server ? "server" : "worker", index);
    add_env(env, "FLPS_JOB_ID", json_string(j->id));
    add_env(env, "FLPS_TASK", json_string(task));
    {
        char a[16];

        snprintf(a, sizeof(a), "%u", j->attempt);
        add_env(env, "FLPS_ATTEMPT", json_string(a));
    }
    add_env(env, "FLPS_SCHEDULER",
            json_string(s->scheduler_url ? s->scheduler_url : ""));
    add_env(env, "FLPS_POD_SECRETS", json_string(K8S_SECRET_DIR));
    add_env(env, "TMPDIR", json_string("/tmp"));
    /* flpod writes the plans flsched answers its reports with. */
    if (!server && j->spec->command_argc == 0)
        add_env(env, "FLPS_PLAN_FILE", json_string(K8S_PLAN_FILE));
    if (server)
        cmd = server_command(s, j, index);
    else if (j->spec->command_argc > 0)
        cmd = user_command(j, servers.data, env);
    else if (add_job_env(j, env) == 0)
        cmd = worker_command(j, index, servers.data, metrics);
    flps_strbuf_fini(&servers);
    if (cmd == NULL)
        return NULL;
    mounts = json_pack("[{s:s,s:s,s:b},{s:s,s:s}]", "name", "job", "mountPath",
                       K8S_SECRET_DIR, "readOnly", 1, "name", "tmp",
                       "mountPath", "/tmp");
    if (server)
        json_array_append_new(mounts,
                              json_pack("{s:s,s:s}", "name", "checkpoints",
                                        "mountPath", K8S_CHECKPOINT_DIR));
    ports = json_array();
    if (server)
        json_array_append_new(
            ports, json_pack("{s:s,s:i,s:s}", "name", "data", "containerPort",
                             k8s_manifest_data_port(s, i), "protocol", "TCP"));
    if (server || j->spec->command_argc == 0)
        json_array_append_new(ports, json_pack("{s:s,s:i,s:s}", "name",
                                               "metrics", "containerPort",
                                               mport, "protocol", "TCP"));
    /* RDMA registers memory, which locks pages. */
    caps = json_pack("{s:[s]}", "drop", "ALL");
    if (j->transport != NULL && strcmp(j->transport, "rdma") == 0)
        json_object_set_new(caps, "add", json_pack("[s]", "IPC_LOCK"));
    c = json_pack(
        "{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:{s:b,s:I,s:I,s:b,s:b,s:b,s:o}}", "name",
        server ? "server" : "worker", "image",
        j->spec->image[0] ? j->spec->image : s->image, "command", cmd, "env",
        env, "resources", resources(j->spec, server), "volumeMounts", mounts,
        "ports", ports, "securityContext", "runAsNonRoot", 1, "runAsUser",
        (json_int_t)s->uid, "runAsGroup", (json_int_t)s->gid,
        "allowPrivilegeEscalation", 0, "privileged", 0,
        "readOnlyRootFilesystem", 1, "capabilities", caps);
    if (c != NULL && s->pull_policy != NULL && s->pull_policy[0] != '\0')
        json_object_set_new(c, "imagePullPolicy", json_string(s->pull_policy));
    return c;
}

/* The pod spec of a shard or a worker; index as for container(). */
static json_t *pod_spec(const k8s_settings *s, const k8s_job *j,
                        const char *set, int server, const char *index)
{
    char secret[96];
    json_t *env = json_array(), *c, *spec, *ckpt;

    if (s->jobset)
        add_env_field(env, "FLPS_INDEX",
                      "metadata.annotations['" K8S_COMPLETION_INDEX "']");
    else
        add_env(env, "FLPS_INDEX", json_string(index));
    c = container(s, j, set, server, s->jobset ? "$(FLPS_INDEX)" : index, env);
    if (c == NULL)
        return NULL;
    snprintf(secret, sizeof(secret), "%s-job", set);
    if (s->checkpoint_claim != NULL && s->checkpoint_claim[0] != '\0')
        ckpt =
            json_pack("{s:s,s:{s:s}}", "name", "checkpoints",
                      "persistentVolumeClaim", "claimName",
                      j->spec->checkpoint_volume[0] ? j->spec->checkpoint_volume
                                                    : s->checkpoint_claim);
    else if (j->spec->checkpoint_volume[0])
        ckpt = json_pack("{s:s,s:{s:s}}", "name", "checkpoints",
                         "persistentVolumeClaim", "claimName",
                         j->spec->checkpoint_volume);
    else
        ckpt = json_pack("{s:s,s:{}}", "name", "checkpoints", "emptyDir");
    spec = json_pack(
        "{s:s,s:b,s:b,s:i,s:{s:b,s:I,s:I,s:I,s:{s:s}},s:[o],s:[{s:s,s:{s:s,"
        "s:i}},{s:s,s:{s:s}}]}",
        "restartPolicy", "Never", "automountServiceAccountToken", 0,
        "enableServiceLinks", 0, "terminationGracePeriodSeconds", K8S_GRACE_S,
        "securityContext", "runAsNonRoot", 1, "runAsUser", (json_int_t)s->uid,
        "runAsGroup", (json_int_t)s->gid, "fsGroup", (json_int_t)s->gid,
        "seccompProfile", "type", "RuntimeDefault", "containers", c, "volumes",
        "name", "job", "secret", "secretName", secret, "defaultMode", 0440,
        "name", "tmp", "emptyDir", "sizeLimit", "1Gi");
    if (spec == NULL)
        return NULL;
    if (server)
        json_array_append_new(json_object_get(spec, "volumes"), ckpt);
    else
        json_decref(ckpt);
    json_object_set_new(spec, "serviceAccountName",
                        json_string(s->service_account && s->service_account[0]
                                        ? s->service_account
                                        : "default"));
    if (j->spec->scheduler_name[0])
        json_object_set_new(spec, "schedulerName",
                            json_string(j->spec->scheduler_name));
    if (j->spec->node_selector_count > 0)
        json_object_set_new(spec, "nodeSelector", node_selector(j->spec));
    if (j->spec->tolerations_count > 0)
        json_object_set_new(spec, "tolerations", tolerations(j->spec));
    return spec;
}

/* The metadata of a pod (or a JobSet's pod template): the attempt's
 * labels, its role, and the gang schedulers' group. */
static json_t *pod_metadata(const k8s_settings *s, const k8s_job *j,
                            const char *set, int server, const char *index)
{
    json_t *l = labels(s, j, set), *a = json_object();
    int volcano = strcmp(j->spec->scheduler_name, "volcano") == 0;

    json_object_set_new(l, K8S_LABEL_ROLE,
                        json_string(server ? "server" : "worker"));
    if (index != NULL)
        json_object_set_new(l, K8S_LABEL_INDEX, json_string(index));
    if (volcano)
        json_object_set_new(a, "scheduling.k8s.io/group-name",
                            json_string(set));
    /* Kueue's plain-pod groups: all of the attempt's pods or none. */
    if (index != NULL && j->spec->queue[0]) {
        char total[16];

        snprintf(total, sizeof(total), "%u",
                 j->spec->servers + j->spec->workers);
        json_object_set_new(l, "kueue.x-k8s.io/queue-name",
                            json_string(j->spec->queue));
        json_object_set_new(l, "kueue.x-k8s.io/pod-group-name",
                            json_string(set));
        json_object_set_new(a, "kueue.x-k8s.io/pod-group-total-count",
                            json_string(total));
    }
    return json_pack("{s:o,s:o}", "labels", l, "annotations", a);
}

/* ---- The objects ---- */

/* Hand a built object out: FLPS_ENOMEM when json_pack had no memory. */
static flps_err give(json_t *o, json_t **out)
{
    if (o == NULL)
        return FLPS_ENOMEM;
    *out = o;
    return FLPS_OK;
}

/* The attempt's set name into set (96 bytes); 0 when it cannot be one. */
static int set_of(const k8s_settings *s, const k8s_job *j, char *set)
{
    return k8s_manifest_set_name(s, j->id, j->attempt, set, 96) == FLPS_OK;
}

/* base64 of text (caller frees), NULL without memory. */
static char *base64(const char *text)
{
    size_t n = strlen(text);
    char *out = flps_malloc(4 * ((n + 2) / 3) + 1);

    if (out != NULL)
        EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)text,
                        (int)n);
    return out;
}

static flps_err put_secret_key(json_t *data, const char *key, const char *v)
{
    char *b = base64(v);

    if (b == NULL)
        return FLPS_ENOMEM;
    json_object_set_new(data, key, json_string(b));
    explicit_bzero(b, strlen(b));
    flps_free(b);
    return FLPS_OK;
}

flps_err k8s_manifest_secret(const k8s_settings *s, const k8s_job *j,
                             json_t **out)
{
    char set[96], name[112];
    json_t *data, *o;
    flps_err rc;

    if (!set_of(s, j, set))
        return FLPS_EINVAL;
    snprintf(name, sizeof(name), "%s-job", set);
    data = json_object();
    rc = put_secret_key(data, "job.yaml", j->spec_text ? j->spec_text : "");
    if (rc == FLPS_OK && j->credentials != NULL)
        rc = put_secret_key(data, "credentials", j->credentials);
    if (rc == FLPS_OK && j->report_token != NULL)
        rc = put_secret_key(data, "token", j->report_token);
    o = json_pack("{s:s,s:s,s:o,s:s,s:o}", "apiVersion", "v1", "kind", "Secret",
                  "metadata", metadata(s, j, set, name), "type", "Opaque",
                  "data", data);
    if (rc != FLPS_OK || o == NULL) {
        json_decref(o);
        return FLPS_ENOMEM;
    }
    *out = o;
    return FLPS_OK;
}

flps_err k8s_manifest_service(const k8s_settings *s, const k8s_job *j,
                              json_t **out)
{
    char set[96];
    json_t *o;

    if (!set_of(s, j, set))
        return FLPS_EINVAL;
    /* Headless, with the records of pods not yet ready: workers dial the
     * shards by name as soon as both exist. */
    o = json_pack("{s:s,s:s,s:o,s:{s:s,s:b,s:{s:s},s:[{s:s,s:i,s:i,s:s}]}}",
                  "apiVersion", "v1", "kind", "Service", "metadata",
                  metadata(s, j, set, set), "spec", "clusterIP", "None",
                  "publishNotReadyAddresses", 1, "selector", K8S_LABEL_SET, set,
                  "ports", "name", "data", "port", s->shard_port, "targetPort",
                  s->shard_port, "protocol", "TCP");
    return give(o, out);
}

/* servers: auto: a pod's wish to share a node with the other pod of its
 * index (shard I with worker I, so the pair's traffic stays on the node
 * and each node's link carries what a ring allreduce's would). Both pods
 * carry it, so whichever the cluster schedules second follows the first;
 * preferred, not required: a node too small for the pair still runs the
 * job, apart. */
static json_t *beside_affinity(const char *set, int server, const char *idx)
{
    return json_pack(
        "{s:{s:[{s:i,s:{s:{s:{s:s,s:s,s:s}},s:s}}]}}", "podAffinity",
        "preferredDuringSchedulingIgnoredDuringExecution", "weight", 100,
        "podAffinityTerm", "labelSelector", "matchLabels", K8S_LABEL_SET, set,
        K8S_LABEL_ROLE, server ? "worker" : "server", K8S_LABEL_INDEX, idx,
        "topologyKey", "kubernetes.io/hostname");
}

flps_err k8s_manifest_pod(const k8s_settings *s, const k8s_job *j, int server,
                          uint32_t index, json_t **out)
{
    char set[96], name[128], idx[16];
    json_t *meta, *spec, *o;

    if (s->jobset ||
        k8s_manifest_set_name(s, j->id, j->attempt, set, sizeof(set)) !=
            FLPS_OK ||
        index >= (server ? j->spec->servers : j->spec->workers))
        return FLPS_EINVAL;
    k8s_manifest_pod_name(set, server, index, name, sizeof(name));
    snprintf(idx, sizeof(idx), "%u", index);
    meta = pod_metadata(s, j, set, server, idx);
    spec = pod_spec(s, j, set, server, idx);
    if (meta == NULL || spec == NULL) {
        json_decref(meta);
        json_decref(spec);
        return FLPS_ENOMEM;
    }
    json_object_set_new(meta, "name", json_string(name));
    json_object_set_new(spec, "hostname", json_string(name));
    json_object_set_new(spec, "subdomain", json_string(set));
    if (j->spec->servers_auto) {
        json_t *aff = beside_affinity(set, server, idx);
        if (aff == NULL) {
            json_decref(meta);
            json_decref(spec);
            return FLPS_ENOMEM;
        }
        json_object_set_new(spec, "affinity", aff);
    }
    o = json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", "v1", "kind", "Pod",
                  "metadata", meta, "spec", spec);
    return give(o, out);
}

/* One replicated job: an Indexed Job of count pods that is not retried
 * (flsched restarts the whole attempt from its checkpoints). */
static json_t *replicated_job(const k8s_settings *s, const k8s_job *j,
                              const char *set, int server)
{
    uint32_t count = server ? j->spec->servers : j->spec->workers;
    json_t *meta = pod_metadata(s, j, set, server, NULL);
    json_t *spec = pod_spec(s, j, set, server, "$(FLPS_INDEX)");

    if (meta == NULL || spec == NULL) {
        json_decref(meta);
        json_decref(spec);
        return NULL;
    }
    return json_pack(
        "{s:s,s:i,s:{s:{s:o},s:{s:I,s:I,s:s,s:i,s:{s:o,s:o}}}}", "name",
        server ? "server" : "worker", "replicas", 1, "template", "metadata",
        "labels", labels(s, j, set), "spec", "parallelism", (json_int_t)count,
        "completions", (json_int_t)count, "completionMode", "Indexed",
        "backoffLimit", 0, "template", "metadata", meta, "spec", spec);
}

flps_err k8s_manifest_jobset(const k8s_settings *s, const k8s_job *j,
                             json_t **out)
{
    char set[96];
    json_t *rs, *rw, *meta, *o;

    if (!s->jobset || k8s_manifest_set_name(s, j->id, j->attempt, set,
                                            sizeof(set)) != FLPS_OK)
        return FLPS_EINVAL;
    rs = replicated_job(s, j, set, 1);
    rw = replicated_job(s, j, set, 0);
    meta = metadata(s, j, set, set);
    if (rs == NULL || rw == NULL || meta == NULL) {
        json_decref(rs);
        json_decref(rw);
        json_decref(meta);
        return FLPS_ENOMEM;
    }
    /* Kueue admits a JobSet as a whole by this label. */
    if (j->spec->queue[0])
        json_object_set_new(json_object_get(meta, "labels"),
                            "kueue.x-k8s.io/queue-name",
                            json_string(j->spec->queue));
    /* The job ends when its workers do; a failure is flsched's to
     * restart (from the checkpoints, with a new attempt), not JobSet's. */
    o = json_pack("{s:s,s:s,s:o,s:{s:{s:b,s:s,s:b},s:{s:s,s:[s]},s:{s:i},"
                  "s:[o,o]}}",
                  "apiVersion", "jobset.x-k8s.io/v1alpha2", "kind", "JobSet",
                  "metadata", meta, "spec", "network", "enableDNSHostnames", 1,
                  "subdomain", set, "publishNotReadyAddresses", 1,
                  "successPolicy", "operator", "All", "targetReplicatedJobs",
                  "worker", "failurePolicy", "maxRestarts", 0, "replicatedJobs",
                  rs, rw);
    return give(o, out);
}

flps_err k8s_manifest_podgroup(const k8s_settings *s, const k8s_job *j,
                               json_t **out)
{
    char set[96];
    json_t *o;

    *out = NULL;
    if (strcmp(j->spec->scheduler_name, "volcano") != 0)
        return FLPS_OK;
    if (!set_of(s, j, set))
        return FLPS_EINVAL;
    /* Volcano binds none of the pods until all of them fit. */
    o = json_pack("{s:s,s:s,s:o,s:{s:I}}", "apiVersion",
                  "scheduling.volcano.sh/v1beta1", "kind", "PodGroup",
                  "metadata", metadata(s, j, set, set), "spec", "minMember",
                  (json_int_t)(j->spec->servers + j->spec->workers));
    return give(o, out);
}

flps_err k8s_manifest_all(const k8s_settings *s, const k8s_job *j, json_t **out)
{
    json_t *all = json_array(), *o = NULL;
    flps_err rc = k8s_manifest_secret(s, j, &o);

    if (all == NULL) {
        json_decref(o);
        return FLPS_ENOMEM;
    }
    if (rc == FLPS_OK)
        json_array_append_new(all, o);
    if (rc == FLPS_OK && (rc = k8s_manifest_podgroup(s, j, &o)) == FLPS_OK &&
        o != NULL)
        json_array_append_new(all, o);
    if (rc == FLPS_OK && s->jobset) {
        rc = k8s_manifest_jobset(s, j, &o);
        if (rc == FLPS_OK)
            json_array_append_new(all, o);
    } else if (rc == FLPS_OK) {
        rc = k8s_manifest_service(s, j, &o);
        if (rc == FLPS_OK)
            json_array_append_new(all, o);
        for (int server = 1; rc == FLPS_OK && server >= 0; server--) {
            uint32_t n = server ? j->spec->servers : j->spec->workers;

            for (uint32_t i = 0; rc == FLPS_OK && i < n; i++) {
                rc = k8s_manifest_pod(s, j, server, i, &o);
                if (rc == FLPS_OK)
                    json_array_append_new(all, o);
            }
        }
    }
    if (rc != FLPS_OK) {
        json_decref(all);
        return rc;
    }
    *out = all;
    return FLPS_OK;
}
