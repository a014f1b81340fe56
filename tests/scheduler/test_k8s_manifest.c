/* Tests for scheduler/k8s_manifest.c: the objects of one attempt, in both
 * shapes (JobSet; Pods and a Service), for job files with each
 * Kubernetes key. tests/deploy/validate.mjs checks the same objects
 * against the API's schemas (tests/k8s/render.c writes them). */
#include "scheduler/k8s_manifest.h"

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "services/jobspec.h"

static const char job_text[] =
    "name: m\nmodel: cnn\nworkers: 2\nservers: 2\niterations: 10\n"
    "checkpoint_interval: 5\n"
    "image: registry.example.com/flps-torch:1\n"
    "resources:\n  cpu: 2\n  memory: 3Gi\n  nvidia.com/gpu: 1\n"
    "  rdma/hca_shared_devices_a: 1\n"
    "node_selector:\n  pool: gpu\n"
    "tolerations:\n  - nvidia.com/gpu:NoSchedule\n"
    "scheduler_name: volcano\nqueue: team-a\n";

static jobspec spec;
static k8s_settings set;
static k8s_job job;

static void setup_with(const char *text, int jobset)
{
    char err[512];

    cr_assert_eq(jobspec_parse(text, strlen(text), &spec, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    memset(&set, 0, sizeof(set));
    set.prefix = "flps";
    set.image = "localhost/flps:0.4.0";
    set.scheduler_url = "http://flps-scheduler.ns.svc:8080";
    set.checkpoint_claim = "flps-checkpoints";
    set.shard_port = 7070;
    set.metrics_port = 9100;
    set.jobset = jobset;
    set.uid = set.gid = 10001;
    memset(&job, 0, sizeof(job));
    job.id = "j7";
    job.attempt = 1;
    job.spec = &spec;
    job.spec_text = text;
    job.credentials = "secret=0123456789abcdef0123456789abcdef\n";
    job.report_token = "tok0123456789abcdef0123456789abcd";
    job.transport = "zmq";
}

/* The value at path: keys and list indices separated by blanks (keys
 * hold dots: "metadata labels flps.io/role"). */
static json_t *at(json_t *o, const char *path)
{
    char key[64];

    while (o != NULL && *path != '\0') {
        size_t n = strcspn(path, " ");

        snprintf(key, sizeof(key), "%.*s", (int)n, path);
        if (key[0] >= '0' && key[0] <= '9')
            o = json_array_get(o, strtoul(key, NULL, 10));
        else
            o = json_object_get(o, key);
        path += n + (path[n] == ' ');
    }
    return o;
}

static const char *str(json_t *o, const char *path)
{
    return json_string_value(at(o, path));
}

/* Whether array a of strings holds s followed by next (NULL: anything). */
static int has_arg(json_t *a, const char *s, const char *next)
{
    for (size_t i = 0; i < json_array_size(a); i++)
        if (strcmp(json_string_value(json_array_get(a, i)), s) == 0)
            return next == NULL ||
                   (i + 1 < json_array_size(a) &&
                    strcmp(json_string_value(json_array_get(a, i + 1)), next) ==
                        0);
    return 0;
}

static const char *env_value(json_t *container, const char *name)
{
    json_t *env = json_object_get(container, "env"), *e;
    size_t i;

    json_array_foreach(env, i, e)
    {
        if (strcmp(str(e, "name"), name) == 0)
            return str(e, "value") ? str(e, "value") : "(valueFrom)";
    }
    return NULL;
}

/* The container's env holds each NAME, VALUE of want (NULL-ended;
 * "(valueFrom)" for a value taken from elsewhere, NULL value: absent). */
static void expect_env(json_t *container, const char *const *want)
{
    for (; want[0] != NULL; want += 2) {
        const char *have = env_value(container, want[0]);

        if (want[1] == NULL)
            cr_assert_null(have, "%s is set", want[0]);
        else
            cr_assert(have != NULL && strcmp(have, want[1]) == 0,
                      "%s is %s, not %s", want[0], have ? have : "(unset)",
                      want[1]);
    }
}

Test(k8s_manifest, names_are_dns_labels_and_the_same_in_both_shapes)
{
    char set_name[96], pod[128], ep[200];

    setup_with(job_text, 0);
    cr_assert_eq(
        k8s_manifest_set_name(&set, "j7", 1, set_name, sizeof(set_name)),
        FLPS_OK);
    cr_assert_str_eq(set_name, "flps-j7-1");
    k8s_manifest_pod_name(set_name, 1, 1, pod, sizeof(pod));
    cr_assert_str_eq(pod, "flps-j7-1-server-0-1");
    k8s_manifest_endpoint(&set, set_name, 1, ep, sizeof(ep));
    cr_assert_str_eq(ep, "tcp://flps-j7-1-server-0-1.flps-j7-1:7071",
                     "plain pods: one port per shard");
    set.jobset = 1;
    k8s_manifest_endpoint(&set, set_name, 1, ep, sizeof(ep));
    cr_assert_str_eq(ep, "tcp://flps-j7-1-server-0-1.flps-j7-1:7070",
                     "a JobSet's pods have an address each");
    set.prefix = "a-prefix-far-too-long-for-a-pod-host-name-with-all-this";
    cr_assert_eq(
        k8s_manifest_set_name(&set, "j7", 1, set_name, sizeof(set_name)),
        FLPS_EINVAL);
    set.prefix = "Upper";
    cr_assert_eq(
        k8s_manifest_set_name(&set, "j7", 1, set_name, sizeof(set_name)),
        FLPS_EINVAL);
}

Test(k8s_manifest, a_shard_pod_runs_flps_under_flpod_with_its_checkpoints)
{
    json_t *p = NULL, *c, *cmd;

    setup_with(job_text, 0);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 1, 1, &p), FLPS_OK);
    cr_assert_str_eq(str(p, "kind"), "Pod");
    cr_assert_str_eq(str(p, "metadata name"), "flps-j7-1-server-0-1");
    cr_assert_str_eq(str(p, "metadata labels flps.io/role"), "server");
    cr_assert_str_eq(str(p, "spec hostname"), "flps-j7-1-server-0-1");
    cr_assert_str_eq(str(p, "spec subdomain"), "flps-j7-1");
    cr_assert_str_eq(str(p, "spec restartPolicy"), "Never");
    cr_assert_str_eq(str(p, "spec schedulerName"), "volcano");
    cr_assert_str_eq(str(p, "spec nodeSelector pool"), "gpu");
    cr_assert_str_eq(str(p, "spec tolerations 0 key"), "nvidia.com/gpu");
    cr_assert_str_eq(str(p, "spec tolerations 0 operator"), "Exists");
    cr_assert(json_is_false(at(p, "spec automountServiceAccountToken")));
    c = at(p, "spec containers 0");
    cr_assert_str_eq(str(c, "image"), "registry.example.com/flps-torch:1");
    cmd = json_object_get(c, "command");
    cr_assert_str_eq(str(cmd, "0"), "flpod");
    cr_assert_str_eq(str(cmd, "2"), "flps");
    cr_assert(has_arg(cmd, "--shard", "1"));
    cr_assert(has_arg(cmd, "--shards", "2"));
    cr_assert(has_arg(cmd, "--listen", "tcp://0.0.0.0:7071"));
    cr_assert(has_arg(cmd, "--metrics", "0.0.0.0:9101"));
    cr_assert(has_arg(cmd, "--checkpoint-dir",
                      "/var/lib/flps/checkpoints/flps-j7/ckpt"));
    cr_assert(has_arg(cmd, "--checkpoint-interval", "5"));
    cr_assert(has_arg(cmd, "--restore", NULL), "attempt 1 restores");
    cr_assert(has_arg(cmd, "--transport", "zmq"));
    cr_assert_str_eq(str(c, "resources limits cpu"), "1",
                     "a shard's own cpus_per_server");
    cr_assert_str_eq(str(c, "resources limits memory"), "512Mi");
    cr_assert_null(at(c, "resources limits nvidia.com/gpu"),
                   "GPUs are the workers'");
    cr_assert_str_eq(str(c, "resources limits rdma/hca_shared_devices_a"), "1");
    cr_assert_str_eq(str(c, "resources requests rdma/hca_shared_devices_a"),
                     "1");
    expect_env(c, (const char *const[]){"FLPS_INDEX", "1", "FLPS_TASK",
                                        "server-1", "FLPS_SCHEDULER",
                                        "http://flps-scheduler.ns.svc:8080",
                                        "FLPS_PLAN_FILE", NULL, NULL});
    cr_assert_str_eq(str(p, "spec volumes 2 persistentVolumeClaim claimName"),
                     "flps-checkpoints");
    cr_assert_eq(json_integer_value(at(p, "spec volumes 0 secret defaultMode")),
                 0440);
    cr_assert_str_eq(str(p, "spec volumes 0 secret secretName"),
                     "flps-j7-1-job");
    cr_assert_str_eq(
        str(p, "metadata annotations scheduling.k8s.io/group-name"),
        "flps-j7-1");
    cr_assert_str_eq(str(p, "metadata labels kueue.x-k8s.io/queue-name"),
                     "team-a");
    json_decref(p);
}

Test(k8s_manifest, a_worker_pod_dials_every_shard_by_name)
{
    json_t *p = NULL, *c, *cmd;

    setup_with(job_text, 0);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 0, 1, &p), FLPS_OK);
    c = at(p, "spec containers 0");
    cmd = json_object_get(c, "command");
    cr_assert_str_eq(str(cmd, "2"), "flworker");
    cr_assert(has_arg(cmd, "--rank", "1"));
    cr_assert(has_arg(cmd, "--job", "/etc/flps/job/job.yaml"));
    cr_assert(has_arg(cmd, "--servers",
                      "tcp://flps-j7-1-server-0-0.flps-j7-1:7070,"
                      "tcp://flps-j7-1-server-0-1.flps-j7-1:7071"));
    cr_assert(has_arg(cmd, "--metrics", "0.0.0.0:9103"),
              "after the shards' ports");
    cr_assert_str_eq(str(c, "resources limits cpu"), "2");
    cr_assert_str_eq(str(c, "resources limits memory"), "3Gi");
    cr_assert_str_eq(str(c, "resources limits nvidia.com/gpu"), "1");
    cr_assert_eq(json_array_size(at(p, "spec volumes")), 2,
                 "a worker has no checkpoints");
    cr_assert_null(at(p, "spec hostNetwork"));
    json_decref(p);
}

Test(k8s_manifest, a_command_job_gets_its_variables_and_literal_words)
{
    static const char text[] = "name: t\nmodel: mlp\nworkers: 2\nservers: 1\n"
                               "command: [python3, train.py, '--tag=$(HOME)']\n"
                               "env:\n  NOTE: 'cost $(X)'\n";
    json_t *p = NULL, *c;

    setup_with(text, 0);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 0, 0, &p), FLPS_OK);
    c = at(p, "spec containers 0");
    cr_assert_str_eq(str(c, "image"), "localhost/flps:0.4.0");
    cr_assert_str_eq(str(c, "command 2"), "python3");
    cr_assert_str_eq(str(c, "command 4"), "--tag=$$(HOME)",
                     "Kubernetes would expand $(HOME)");
    /* No credentials file: flpod names its private copy. */
    expect_env(
        c, (const char *const[]){"FLPS_RANK", "$(FLPS_INDEX)", "FLPS_SERVERS",
                                 "tcp://flps-j7-1-server-0-0.flps-j7-1:7070",
                                 "NOTE", "cost $$(X)", "FLPS_TRANSPORT", "zmq",
                                 "FLPS_PLAN_FILE", "/tmp/flps-plan.json",
                                 "FLPS_CREDENTIALS_FILE", NULL, NULL});
    json_decref(p);
}

Test(k8s_manifest, a_built_in_worker_gets_the_job_files_env_and_a_shard_not)
{
    static const char text[] = "name: t\nmodel: mlp\nworkers: 2\nservers: 1\n"
                               "env:\n  OMP_NUM_THREADS: '1'\n"
                               "  NOTE: 'cost $(X)'\n";
    json_t *p = NULL, *c;

    setup_with(text, 0);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 0, 0, &p), FLPS_OK);
    c = at(p, "spec containers 0");
    cr_assert_str_eq(str(c, "command 2"), "flworker");
    expect_env(c, (const char *const[]){"OMP_NUM_THREADS", "1", "NOTE",
                                        "cost $$(X)", "FLPS_RANK", NULL, NULL});
    json_decref(p);
    p = NULL;
    cr_assert_eq(k8s_manifest_pod(&set, &job, 1, 0, &p), FLPS_OK);
    c = at(p, "spec containers 0");
    cr_assert_str_neq(str(c, "command 2"), "flworker");
    expect_env(c, (const char *const[]){"OMP_NUM_THREADS", NULL, NULL});
    json_decref(p);
}

Test(k8s_manifest, a_jobset_has_a_server_and_a_worker_job_and_ends_with_workers)
{
    json_t *js = NULL, *w, *c;

    setup_with(job_text, 1);
    cr_assert_eq(k8s_manifest_jobset(&set, &job, &js), FLPS_OK);
    cr_assert_str_eq(str(js, "apiVersion"), "jobset.x-k8s.io/v1alpha2");
    cr_assert_str_eq(str(js, "kind"), "JobSet");
    cr_assert_str_eq(str(js, "metadata name"), "flps-j7-1");
    cr_assert_str_eq(str(js, "metadata labels kueue.x-k8s.io/queue-name"),
                     "team-a");
    cr_assert_str_eq(str(js, "spec network subdomain"), "flps-j7-1");
    cr_assert(json_is_true(at(js, "spec network enableDNSHostnames")));
    cr_assert_str_eq(str(js, "spec successPolicy operator"), "All");
    cr_assert_str_eq(str(js, "spec successPolicy targetReplicatedJobs 0"),
                     "worker");
    cr_assert_eq(json_integer_value(at(js, "spec failurePolicy maxRestarts")),
                 0);
    cr_assert_str_eq(str(js, "spec replicatedJobs 0 name"), "server");
    w = at(js, "spec replicatedJobs 1");
    cr_assert_str_eq(str(w, "name"), "worker");
    cr_assert_eq(json_integer_value(at(w, "template spec completions")), 2);
    cr_assert_str_eq(str(w, "template spec completionMode"), "Indexed");
    cr_assert_eq(json_integer_value(at(w, "template spec backoffLimit")), 0);
    c = at(w, "template spec template spec containers 0");
    cr_assert(
        has_arg(json_object_get(c, "command"), "--rank", "$(FLPS_INDEX)"));
    expect_env(c,
               (const char *const[]){"FLPS_INDEX", "(valueFrom)", "FLPS_TASK",
                                     "worker-$(FLPS_INDEX)", NULL});
    cr_assert_str_eq(
        str(json_array_get(json_object_get(c, "env"), 0),
            "valueFrom fieldRef fieldPath"),
        "metadata.annotations['batch.kubernetes.io/job-completion-index']");
    cr_assert_null(at(w, "template spec template spec hostname"),
                   "JobSet names its pods' hosts");
    json_decref(js);
}

static char *unbase64(const char *b)
{
    static char out[1024];
    int n = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)b,
                            (int)strlen(b));

    cr_assert_geq(n, 0);
    while (n > 0 && out[n - 1] == '\0')
        n--;
    out[n] = '\0';
    return out;
}

Test(k8s_manifest, the_secret_holds_the_job_file_credentials_and_token_only)
{
    json_t *all = NULL, *o;
    size_t i;

    setup_with(job_text, 0);
    cr_assert_eq(k8s_manifest_all(&set, &job, &all), FLPS_OK);
    cr_assert_str_eq(str(all, "0 kind"), "Secret");
    cr_assert_str_eq(str(all, "0 metadata name"), "flps-j7-1-job");
    cr_assert_str_eq(unbase64(str(all, "0 data job.yaml")), job_text);
    cr_assert_str_eq(unbase64(str(all, "0 data credentials")), job.credentials);
    cr_assert_str_eq(unbase64(str(all, "0 data token")), job.report_token);
    json_array_foreach(all, i, o)
    {
        char *text;

        if (i == 0)
            continue;
        text = json_dumps(o, 0);
        cr_assert_null(strstr(text, "0123456789abcdef0123456789abcdef"),
                       "%s holds a secret value", str(o, "kind"));
        free(text);
    }
    cr_assert_str_eq(str(all, "1 kind"), "PodGroup");
    cr_assert_eq(json_integer_value(at(all, "1 spec minMember")), 4);
    cr_assert_str_eq(str(all, "2 kind"), "Service");
    cr_assert_str_eq(str(all, "2 spec clusterIP"), "None");
    cr_assert_str_eq(str(all, "2 spec selector flps.io/set"), "flps-j7-1");
    cr_assert_eq(json_array_size(all), 3 + 4, "the Service and four pods");
    cr_assert_str_eq(str(all, "3 metadata name"), "flps-j7-1-server-0-0");
    cr_assert_str_eq(str(all, "6 metadata name"), "flps-j7-1-worker-0-1");
    json_decref(all);
}

Test(k8s_manifest, no_podgroup_without_volcano_and_an_emptydir_without_claim)
{
    static const char text[] = "name: s\nmodel: mlp\n";
    json_t *pg = (json_t *)1, *p = NULL;

    setup_with(text, 0);
    set.checkpoint_claim = NULL;
    cr_assert_eq(k8s_manifest_podgroup(&set, &job, &pg), FLPS_OK);
    cr_assert_null(pg);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 1, 0, &p), FLPS_OK);
    cr_assert_not_null(at(p, "spec volumes 2 emptyDir"));
    cr_assert_null(at(p, "spec schedulerName"));
    cr_assert_null(at(p, "metadata labels kueue.x-k8s.io/queue-name"));
    json_decref(p);
}

Test(k8s_manifest, servers_auto_pods_prefer_the_node_of_their_pair)
{
    static const char text[] =
        "name: s\nmodel: mlp\nworkers: 2\nservers: auto\n";
    static const char *const term =
        "spec affinity podAffinity "
        "preferredDuringSchedulingIgnoredDuringExecution 0 podAffinityTerm";
    char path[256];
    json_t *p = NULL;

    setup_with(text, 0);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 1, 1, &p), FLPS_OK);
    snprintf(path, sizeof(path), "%s labelSelector matchLabels flps.io/role",
             term);
    cr_assert_str_eq(json_string_value(at(p, path)), "worker");
    snprintf(path, sizeof(path), "%s labelSelector matchLabels flps.io/index",
             term);
    cr_assert_str_eq(json_string_value(at(p, path)), "1");
    snprintf(path, sizeof(path), "%s topologyKey", term);
    cr_assert_str_eq(json_string_value(at(p, path)), "kubernetes.io/hostname");
    json_decref(p);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 0, 0, &p), FLPS_OK);
    snprintf(path, sizeof(path), "%s labelSelector matchLabels flps.io/role",
             term);
    cr_assert_str_eq(json_string_value(at(p, path)), "server");
    json_decref(p);
    /* A numbered servers: no wish. */
    setup_with("name: s\nmodel: mlp\nworkers: 2\nservers: 2\n", 0);
    cr_assert_eq(k8s_manifest_pod(&set, &job, 1, 0, &p), FLPS_OK);
    cr_assert_null(at(p, "spec affinity"));
    json_decref(p);
}
