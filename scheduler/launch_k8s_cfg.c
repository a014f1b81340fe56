/* flsched's --k8s-* flags: the kubernetes launcher's configuration, one
 * table row per flag (its value's kind, where it goes, its help line). */
#include "scheduler/launch_k8s.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/numparse.h"
#include "flps.h"

#define K8S_STR_(x) #x
#define K8S_STR(x) K8S_STR_(x)
#define K8S_DEFAULT_IMAGE                                                      \
    "localhost/flps:" K8S_STR(FLPS_VERSION_MAJOR) "." K8S_STR(                 \
        FLPS_VERSION_MINOR) "." K8S_STR(FLPS_VERSION_PATCH)

typedef enum {
    K8S_FLAG_TEXT,
    K8S_FLAG_PORT,
    K8S_FLAG_JOBSET,
    K8S_FLAG_SECONDS
} k8s_flag_kind;

typedef struct k8s_flag {
    const char *name;
    k8s_flag_kind kind;
    size_t off; /* in launch_k8s_cfg */
    const char *help;
} k8s_flag;

#define AT(member) offsetof(launch_k8s_cfg, member)

static const k8s_flag flags[] = {
    {"--k8s-api", K8S_FLAG_TEXT, AT(api.server),
     "URL  the Kubernetes API (default: the pod's cluster,\n"
     "                     KUBERNETES_SERVICE_HOST)"},
    {"--k8s-token-file", K8S_FLAG_TEXT, AT(api.token_file),
     "FILE  its bearer token (default: the service account's)"},
    {"--k8s-ca-file", K8S_FLAG_TEXT, AT(api.ca_file),
     "FILE  the CA of an https API (default: the service\n"
     "                     account's)"},
    {"--k8s-namespace", K8S_FLAG_TEXT, AT(api.ns),
     "NS  where jobs run (default: the service account's)"},
    {"--k8s-prefix", K8S_FLAG_TEXT, AT(set.prefix),
     "NAME  names and instance label of what it creates\n"
     "                     (default flps)"},
    {"--k8s-image", K8S_FLAG_TEXT, AT(set.image),
     "IMAGE  the pods' image for jobs without image:\n"
     "                     (default " K8S_DEFAULT_IMAGE ")"},
    {"--k8s-pull-policy", K8S_FLAG_TEXT, AT(set.pull_policy),
     "P  the pods' imagePullPolicy (Always, IfNotPresent, Never)"},
    {"--k8s-scheduler-url", K8S_FLAG_TEXT, AT(set.scheduler_url),
     "URL  where the pods report progress (this API's Service)"},
    {"--k8s-checkpoint-claim", K8S_FLAG_TEXT, AT(set.checkpoint_claim),
     "PVC  the shards' checkpoints (default: an emptyDir,\n"
     "                     so a restart starts over)"},
    {"--k8s-service-account", K8S_FLAG_TEXT, AT(set.service_account),
     "NAME  the pods' service account (default: default)"},
    {"--k8s-shard-port", K8S_FLAG_PORT, AT(set.shard_port),
     "N  the shards' data port (default 7070)"},
    {"--k8s-metrics-port", K8S_FLAG_PORT, AT(set.metrics_port),
     "N  the pods' /metrics port (default 9100)"},
    {"--k8s-image-pull-grace", K8S_FLAG_SECONDS, AT(image_pull_grace_s),
     "S  how long an image may fail to pull before the job\n"
     "                     fails (default 120)"},
    {"--k8s-jobset", K8S_FLAG_JOBSET, AT(jobset),
     "auto|always|never  a JobSet per job where its CRD is\n"
     "                     installed (default auto), else Pods + a Service"},
};

#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

const char *launch_k8s_flag(size_t i)
{
    return i < NFLAGS ? flags[i].name : NULL;
}

void launch_k8s_cfg_init(launch_k8s_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->set.prefix = "flps";
    cfg->set.image = K8S_DEFAULT_IMAGE;
    cfg->set.shard_port = 7070;
    cfg->set.metrics_port = 9100;
    cfg->set.uid = 10001;
    cfg->set.gid = 10001;
    cfg->jobset = LAUNCH_K8S_JOBSET_AUTO;
}

static flps_err set_jobset(launch_k8s_jobset *out, const char *v, char *err,
                           size_t errlen)
{
    static const char *const words[] = {
        [LAUNCH_K8S_JOBSET_AUTO] = "auto",
        [LAUNCH_K8S_JOBSET_ALWAYS] = "always",
        [LAUNCH_K8S_JOBSET_NEVER] = "never",
    };

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (strcmp(v, words[i]) == 0) {
            *out = (launch_k8s_jobset)i;
            return FLPS_OK;
        }
    }
    return flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                           "--k8s-jobset '%s' is not auto, always or never", v);
}

flps_err launch_k8s_cfg_set(launch_k8s_cfg *cfg, const char *flag,
                            const char *v, char *err, size_t errlen)
{
    for (size_t i = 0; i < NFLAGS; i++) {
        const k8s_flag *f = &flags[i];
        char *at = (char *)cfg + f->off;
        int64_t n = 0;

        if (strcmp(flag, f->name) != 0)
            continue;
        switch (f->kind) {
        case K8S_FLAG_TEXT:
            if (v[0] == '\0')
                return flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                                       "%s needs a value", flag);
            memcpy(at, &v, sizeof(v));
            return FLPS_OK;
        case K8S_FLAG_PORT:
            if (flps_parse_i64(NULL, v, 1, 65000, &n, NULL, 0) != FLPS_OK)
                return flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                                       "%s '%s' is not a port from 1 to "
                                       "65000",
                                       flag, v);
            *(int *)(void *)at = (int)n;
            return FLPS_OK;
        case K8S_FLAG_JOBSET:
            return set_jobset((launch_k8s_jobset *)(void *)at, v, err, errlen);
        case K8S_FLAG_SECONDS:
            if (flps_parse_i64(NULL, v, 1, 86400, &n, NULL, 0) != FLPS_OK)
                return flps_errbuf_set(err, errlen, FLPS_ECONFIG,
                                       "%s '%s' is not a number of seconds "
                                       "from 1 to 86400",
                                       flag, v);
            *(double *)(void *)at = (double)n;
            return FLPS_OK;
        }
    }
    return flps_errbuf_set(err, errlen, FLPS_ECONFIG, "unknown flag %s", flag);
}

void launch_k8s_usage(FILE *f)
{
    fprintf(f, "  --launcher agents|kubernetes  how admitted jobs run: flagent "
               "on\n"
               "                     registered nodes (default), or a pod per "
               "shard and\n"
               "                     per worker through the Kubernetes API:\n");
    for (size_t i = 0; i < NFLAGS; i++)
        fprintf(f, "  %s %s\n", flags[i].name, flags[i].help);
}
