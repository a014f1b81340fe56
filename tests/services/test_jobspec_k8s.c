/* Tests for services/jobspec_k8s.c: the job file's Kubernetes keys (image,
 * resources, node_selector, tolerations, scheduler_name, queue,
 * checkpoint_volume), checked as the API server would check them. */
#include "services/jobspec.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define ERRLEN 1024
#define BASE "name: k\nmodel: mlp\n"

static flps_err parse(const char *text, jobspec *out, char *err)
{
    return jobspec_parse(text, strlen(text), out, err, ERRLEN);
}

static void parse_ok(const char *text, jobspec *out)
{
    char err[ERRLEN] = "";

    cr_assert_eq(parse(text, out, err), FLPS_OK, "rejected: %s\n%s", err, text);
}

/* text must be refused, leaving *out as it was, with needle in the
 * message. */
static void refused(const char *text, const char *needle)
{
    jobspec s, sentinel;
    char err[ERRLEN] = "";

    memset(&s, 0x5A, sizeof(s));
    memcpy(&sentinel, &s, sizeof(s));
    cr_assert_eq(parse(text, &s, err), FLPS_ECONFIG, "accepted:\n%s", text);
    cr_assert_eq(memcmp(&s, &sentinel, sizeof(s)), 0);
    cr_assert_not_null(strstr(err, needle), "message lacks \"%s\": %s", needle,
                       err);
}

Test(jobspec_k8s, the_keys_are_empty_when_not_given)
{
    jobspec s;

    parse_ok(BASE, &s);
    cr_assert_str_eq(s.image, "");
    cr_assert_str_eq(s.scheduler_name, "");
    cr_assert_str_eq(s.queue, "");
    cr_assert_str_eq(s.checkpoint_volume, "");
    cr_assert_eq(s.resources_count, 0);
    cr_assert_eq(s.resources_set, 0);
    cr_assert_eq(s.node_selector_count, 0);
    cr_assert_eq(s.tolerations_count, 0);
}

Test(jobspec_k8s, reads_the_names_as_given)
{
    jobspec s;

    parse_ok(BASE "image: registry.example.com:5000/team/flps-torch:1.2@"
                  "sha256:abc\n"
                  "scheduler_name: volcano\nqueue: team-a.gpu_1\n"
                  "checkpoint_volume: ckpt-team-a\n",
             &s);
    cr_assert_str_eq(
        s.image, "registry.example.com:5000/team/flps-torch:1.2@sha256:abc");
    cr_assert_str_eq(s.scheduler_name, "volcano");
    cr_assert_str_eq(s.queue, "team-a.gpu_1");
    cr_assert_str_eq(s.checkpoint_volume, "ckpt-team-a");
}

Test(jobspec_k8s, resources_set_the_workers_needs_and_keep_device_resources)
{
    jobspec s;
    const char *w[JOBSPEC_MAP_MAX];

    parse_ok(BASE "resources:\n  cpu: 500m\n  memory: 3Gi\n"
                  "  nvidia.com/gpu: 2\n  rdma/hca_shared_devices_a: 1\n",
             &s);
    cr_assert_float_eq(s.cpus_per_worker, 0.5, 1e-12);
    cr_assert_eq(s.memory_per_worker, 3ULL << 30);
    cr_assert_eq(s.gpus_per_worker, 2);
    cr_assert_eq(s.resources_set,
                 JOBSPEC_RES_CPU | JOBSPEC_RES_MEMORY | JOBSPEC_RES_GPU);
    cr_assert_eq(s.resources_count, 1);
    cr_assert_eq(
        jobspec_map_words(s.resources, s.resources_count, w, JOBSPEC_MAP_MAX),
        1);
    cr_assert_str_eq(w[0], "rdma/hca_shared_devices_a=1");
    parse_ok(BASE "resources: {\"cpu\": 2}\n", &s);
    cr_assert_float_eq(s.cpus_per_worker, 2.0, 1e-12);
    parse_ok(BASE "resources: 'cpu=1.5 example.com/fpga=4'\n", &s);
    cr_assert_float_eq(s.cpus_per_worker, 1.5, 1e-12);
    cr_assert_eq(s.resources_count, 1);
}

Test(jobspec_k8s, node_selector_takes_label_keys_and_values)
{
    jobspec s;
    const char *w[JOBSPEC_MAP_MAX];

    parse_ok(BASE "node_selector:\n  nvidia.com/gpu.present: 'true'\n"
                  "  pool: train\n  empty: ''\n",
             &s);
    cr_assert_eq(s.node_selector_count, 3);
    jobspec_map_words(s.node_selector, s.node_selector_count, w,
                      JOBSPEC_MAP_MAX);
    cr_assert_str_eq(w[0], "nvidia.com/gpu.present=true");
    cr_assert_str_eq(w[1], "pool=train");
    cr_assert_str_eq(w[2], "empty=");
}

Test(jobspec_k8s, tolerations_as_text_or_mappings_read_back_as_kubernetes_has)
{
    jobspec s;
    jobspec_toleration t;

    parse_ok(BASE "tolerations:\n"
                  "  - nvidia.com/gpu:NoSchedule\n"
                  "  - dedicated=ml:NoExecute\n"
                  "  - key: spot\n    operator: Exists\n    effect: NoExecute\n"
                  "    tolerationSeconds: 300\n"
                  "  - {operator: Exists}\n",
             &s);
    cr_assert_eq(s.tolerations_count, 4);
    cr_assert_eq(jobspec_toleration_get(&s, 0, &t), FLPS_OK);
    cr_assert_str_eq(t.key, "nvidia.com/gpu");
    cr_assert_str_eq(t.op, "Exists");
    cr_assert_str_eq(t.effect, "NoSchedule");
    cr_assert_eq(t.has_seconds, 0);
    cr_assert_eq(jobspec_toleration_get(&s, 1, &t), FLPS_OK);
    cr_assert_str_eq(t.key, "dedicated");
    cr_assert_str_eq(t.op, "Equal");
    cr_assert_str_eq(t.value, "ml");
    cr_assert_str_eq(t.effect, "NoExecute");
    cr_assert_eq(jobspec_toleration_get(&s, 2, &t), FLPS_OK);
    cr_assert_str_eq(t.key, "spot");
    cr_assert_eq(t.has_seconds, 1);
    cr_assert_eq(t.seconds, 300);
    cr_assert_eq(jobspec_toleration_get(&s, 3, &t), FLPS_OK);
    cr_assert_str_eq(t.key, "");
    cr_assert_str_eq(t.op, "Exists");
    cr_assert_str_eq(t.effect, "");
    cr_assert_eq(jobspec_toleration_get(&s, 4, &t), FLPS_EINVAL);
}

/* What the API server would refuse, and a part of the message. */
static const struct {
    const char *text, *needle;
} refusals[] = {
    {BASE "image: -flps\n", "image: '-flps' must start with a letter"},
    {BASE "image: 'flps torch'\n", "contains ' '"},
    {BASE "image: 'flps:'\n", "is not an image reference"},
    {BASE "scheduler_name: Volcano\n", "contains 'V'"},
    {BASE "scheduler_name: volcano-\n", "is not a DNS subdomain"},
    {BASE "queue: -team\n", "queue: '-team' is not a label value"},
    {BASE "checkpoint_volume: a..b\n", "is not a DNS subdomain"},
    {BASE "cpus_per_worker: 2\nresources:\n  cpu: 1\n",
     "resources: cpu is what cpus_per_worker (line 3) gives"},
    {BASE "resources:\n  nvidia.com/gpu: 1\ngpus_per_worker: 1\n",
     "nvidia.com/gpu is what gpus_per_worker (line 5) gives"},
    {BASE "resources: 'cpu=1 cpu=2'\n", "cpu is given twice"},
    {BASE "resources:\n  cpu: lots\n", "'cpu=lots' is not a number"},
    {BASE "resources:\n  cpu: 0m\n", "at least 0.001"},
    {BASE "resources:\n  memory: 1Qi\n", "is not a SIZE"},
    {BASE "resources:\n  gpu: 1\n", "is not a resource name"},
    {BASE "resources:\n  rdma/hca: 0.5\n", "is not a device count"},
    {BASE "tolerations: ['gpu:NoWay']\n", "has an effect other than"},
    {BASE "tolerations:\n  - {key: a, operator: Exists, value: b}\n",
     "has a value with operator Exists"},
    {BASE "tolerations:\n  - {value: b}\n", "has no key"},
    {BASE "tolerations:\n  - {key: a, tolerationSeconds: 5}\n",
     "tolerationSeconds without effect NoExecute"},
    {BASE "tolerations:\n  - {key: a, colour: red}\n",
     "has a field other than"},
    {BASE "tolerations:\n  - {key: [a]}\n",
     "found a list where a single value belongs"},
    {BASE "node_selector:\n  Bad_Prefix/x: a\n", "not a label key"},
    {BASE "node_selector:\n  pool: -x\n", "not a label value"},
    {BASE "node_selector: 'a=1 a=2'\n", "a is given twice"},
};

Test(jobspec_k8s, refuses_what_the_api_server_would_refuse_and_says_why)
{
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
        refused(refusals[i].text, refusals[i].needle);
}

Test(jobspec_k8s, more_than_32_entries_are_refused)
{
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof(text), BASE "node_selector:\n");

    for (int i = 0; i < 33; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "  l%d: v\n", i);
    refused(text, "33 entries are more than 32");
}
