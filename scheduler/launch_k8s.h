/* The kubernetes launcher (launch.h): for each admitted attempt of a job,
 * a Secret and a JobSet (where the JobSet CRD is installed; checked at
 * start through the API's discovery) or a headless Service and one Pod
 * per shard and per worker, with the job's own image (k8s_manifest.h);
 * gang placement is the cluster's (JobSet with Kueue, or Volcano). Each
 * turn it follows the pods into the task hashes (PENDING, RUNNING,
 * EXITED; the pods' logs into the job's log stream; Unschedulable,
 * ImagePullBackOff, OOMKilled and evictions as events and reasons in
 * plain words), reports exits to the loop as flagent does (so failures
 * restart the job from its checkpoints up to max_restarts), and deletes
 * everything an attempt created once it ends. A thread watches the pods
 * (list, then watch with bookmarks from the list's resourceVersion). */
#ifndef FLPS_SCHED_LAUNCH_K8S_H
#define FLPS_SCHED_LAUNCH_K8S_H

#include <stddef.h>
#include <stdio.h>

#include "common/err.h"
#include "scheduler/k8s_api.h"
#include "scheduler/k8s_manifest.h"
#include "scheduler/launch.h"

typedef enum {
    LAUNCH_K8S_JOBSET_AUTO = 0, /* a JobSet where the CRD is installed */
    LAUNCH_K8S_JOBSET_ALWAYS,   /* refuse to start without the CRD */
    LAUNCH_K8S_JOBSET_NEVER,    /* always Pods and a headless Service */
} launch_k8s_jobset;

typedef struct launch_k8s_cfg {
    k8s_api_cfg api;  /* stop is set by the launcher */
    k8s_settings set; /* jobset is decided at create */
    launch_k8s_jobset jobset;
    double log_interval_s;     /* between two reads of a pod's log; 0: 2 */
    double image_pull_grace_s; /* an image that cannot be pulled for this
                                  long fails the job; 0: 120 */
} launch_k8s_cfg;

/* Defaults: in-cluster API, prefix "flps", the flps image of this
 * version, ports 7070 and 9100, JobSet where installed, uid 10001. */
void launch_k8s_cfg_init(launch_k8s_cfg *cfg);

/* flsched's i-th flag of this launcher ("--k8s-api", ...), NULL past
 * the last; each takes a value. */
const char *launch_k8s_flag(size_t i);

/* Take flag (a launch_k8s_flag) with value into cfg (value is
 * borrowed: it must outlive cfg, as argv does). FLPS_ECONFIG with the
 * reason in err for a value it refuses. */
flps_err launch_k8s_cfg_set(launch_k8s_cfg *cfg, const char *flag,
                            const char *value, char *err, size_t errlen);

/* The flags' lines of flsched --help. */
void launch_k8s_usage(FILE *f);

/* Connect (the namespace and token of cfg->api), look for the JobSet CRD,
 * start watching the pods. Everything in cfg is copied. Errors:
 * FLPS_ECONFIG (said in err: no API address, the token, JobSet asked for
 * and not installed, a prefix too long), FLPS_EIO (the API did not answer
 * discovery), FLPS_ENOMEM, FLPS_ESYS (the thread). */
flps_err launch_k8s_create(const launch_k8s_cfg *cfg, launch **out, char *err,
                           size_t errlen);

#endif
