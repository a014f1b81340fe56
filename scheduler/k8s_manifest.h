/* The objects flsched's kubernetes launcher creates for one attempt of a
 * job, as pure functions from the parsed job file to jansson objects: a
 * Secret (the job file, its credentials, its report token), and either a
 * JobSet (jobset.x-k8s.io/v1alpha2: replicated jobs server and worker,
 * headless DNS, success when the workers complete) or a headless Service
 * and one Pod per shard and per worker; a Volcano PodGroup when the job
 * names the volcano scheduler. No I/O, so tests and the offline validation
 * (tests/deploy/validate.mjs) see exactly what would be sent.
 *
 * Names: the attempt's set is PREFIX-JOB-ATTEMPT ("flps-j12-0"); its pods'
 * host names are SET-server-0-I and SET-worker-0-R in both shapes (what
 * JobSet gives an Indexed Job's pods), in the subdomain SET, so a shard's
 * address is tcp://SET-server-0-I.SET:PORT. */
#ifndef FLPS_SCHED_K8S_MANIFEST_H
#define FLPS_SCHED_K8S_MANIFEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "services/jobspec.h"

/* Labels on everything the launcher creates. */
#define K8S_LABEL_INSTANCE "app.kubernetes.io/instance"
#define K8S_LABEL_MANAGED "app.kubernetes.io/managed-by"
#define K8S_LABEL_JOB "flps.io/job"
#define K8S_LABEL_ATTEMPT "flps.io/attempt"
#define K8S_LABEL_SET "flps.io/set"
#define K8S_LABEL_ROLE "flps.io/role"
#define K8S_LABEL_INDEX "flps.io/index"
/* The pod's index (its rank) under a JobSet: the Indexed Job's. */
#define K8S_COMPLETION_INDEX "batch.kubernetes.io/job-completion-index"

/* Where a pod finds its Secret's files, and flpod its private copies. */
#define K8S_SECRET_DIR "/etc/flps/job"
#define K8S_CHECKPOINT_DIR "/var/lib/flps/checkpoints"
/* Where flpod writes the job's compression plan for its worker. */
#define K8S_PLAN_FILE "/tmp/flps-plan.json"

/* The longest prefix: the pods' host names must stay DNS labels. */
#define K8S_PREFIX_MAX 24

/* The launcher's settings (flsched's --k8s-* flags), borrowed. */
typedef struct k8s_settings {
    const char *prefix;        /* names and the instance label, e.g. "flps" */
    const char *image;         /* for a job without image: */
    const char *pull_policy;   /* imagePullPolicy; NULL: the cluster's */
    const char *scheduler_url; /* FLPS_SCHEDULER for the pods' reports */
    const char *checkpoint_claim; /* the shards' checkpoints; NULL or "":
                                     an emptyDir (restarts start over) */
    const char *service_account;  /* the pods' account; NULL: default */
    int shard_port;               /* the shards' data port (base) */
    int metrics_port;             /* the pods' /metrics port (base) */
    int jobset;                   /* 1: a JobSet; 0: Pods + a Service */
    uint32_t uid, gid;            /* runAsUser/runAsGroup/fsGroup */
} k8s_settings;

/* One attempt of one job, borrowed. */
typedef struct k8s_job {
    const char *id; /* "j12" */
    uint32_t attempt;
    const jobspec *spec; /* parsed from spec_text */
    const char *spec_text;
    const char *credentials;  /* a credentials file's text; NULL: none */
    const char *report_token; /* the job's token for POST .../report */
    const char *transport;    /* "zmq" or "rdma" as flsched chose */
} k8s_job;

/* The attempt's set name into buf ("flps-j12-0"); FLPS_EINVAL when it
 * would not be a DNS label short enough for its pods' host names. */
flps_err k8s_manifest_set_name(const k8s_settings *s, const char *id,
                               uint32_t attempt, char *buf, size_t len);

/* A pod's name (= host name): SET-server-0-I or SET-worker-0-R. */
void k8s_manifest_pod_name(const char *set, int server, uint32_t index,
                           char *buf, size_t len);

/* Shard index's data-plane address as the workers dial it. */
void k8s_manifest_endpoint(const k8s_settings *s, const char *set,
                           uint32_t index, char *buf, size_t len);

/* The ports a pod listens on: its shard's data port (servers) and its
 * /metrics. Under a JobSet every pod has its own address, so the shards
 * share the base ports (the workers' /metrics is base + 1); plain Pods
 * get one port each (base + shard index, base + servers + rank for a
 * worker's metrics), so they also run side by side in one network
 * namespace (hostNetwork, the test's stand-in). */
int k8s_manifest_data_port(const k8s_settings *s, uint32_t index);
int k8s_manifest_metrics_port(const k8s_settings *s, const jobspec *spec,
                              int server, uint32_t index);

/* Each builds a new object (caller owns *out) or fails: FLPS_EINVAL for
 * arguments that cannot make one (a name too long), FLPS_ENOMEM. */
flps_err k8s_manifest_secret(const k8s_settings *s, const k8s_job *j,
                             json_t **out);
flps_err k8s_manifest_service(const k8s_settings *s, const k8s_job *j,
                              json_t **out);
flps_err k8s_manifest_pod(const k8s_settings *s, const k8s_job *j, int server,
                          uint32_t index, json_t **out);
flps_err k8s_manifest_jobset(const k8s_settings *s, const k8s_job *j,
                             json_t **out);
/* *out NULL when the job does not use Volcano (scheduler_name is not
 * volcano). */
flps_err k8s_manifest_podgroup(const k8s_settings *s, const k8s_job *j,
                               json_t **out);

/* Every object of the attempt in creation order (Secret, PodGroup,
 * JobSet; or Secret, PodGroup, Service, Pods: servers, then workers) as
 * a new JSON array. */
flps_err k8s_manifest_all(const k8s_settings *s, const k8s_job *j,
                          json_t **out);

#endif
