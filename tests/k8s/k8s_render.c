/* k8s_render: every object flsched's kubernetes launcher would create for
 * job files, written as one JSON array, for the offline validation of
 * tests/deploy/test_chart.sh (validate.mjs --objects). The same builder
 * (scheduler/k8s_manifest.c) and flag parser (launch_k8s_cfg.c) as
 * flsched; credentials and tokens are fixed placeholders.
 *
 *   k8s_render [--k8s-FLAG VALUE]... [--attempt N] JOBFILE...
 *
 * --k8s-jobset always renders JobSets, never (the default) Pods and a
 * Service; auto is refused (it asks the API). Exit 0, or 2 with why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "scheduler/k8s_manifest.h"
#include "scheduler/launch_k8s.h"
#include "services/jobspec.h"

#define PLACEHOLDER_SECRET                                                     \
    "secret=00000000000000000000000000000000000000000000000000000000000000"    \
    "00\n"

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The objects of one job file into all. 0, or 2 with why on stderr. */
static int render(const launch_k8s_cfg *cfg, const char *path, unsigned n,
                  unsigned attempt, json_t *all)
{
    char err[1024], id[32];
    char *text = read_file(path);
    jobspec *spec = malloc(sizeof(*spec));
    k8s_job j;
    json_t *objs = NULL, *o;
    size_t i;
    flps_err rc;

    if (text == NULL || spec == NULL) {
        fprintf(stderr, "k8s_render: cannot read %s\n", path);
        free(text);
        free(spec);
        return 2;
    }
    if (jobspec_parse(text, strlen(text), spec, err, sizeof(err)) != FLPS_OK) {
        fprintf(stderr, "k8s_render: %s: %s\n", path, err);
        free(text);
        free(spec);
        return 2;
    }
    snprintf(id, sizeof(id), "j%u", n);
    /* auto is decided at admission; on Kubernetes it is ZeroMQ. */
    j = (k8s_job){id,
                  attempt,
                  spec,
                  text,
                  PLACEHOLDER_SECRET,
                  "report-token-placeholder-0123456789abcdef",
                  spec->transport == JOBSPEC_TRANSPORT_AUTO
                      ? "zmq"
                      : jobspec_transport_name(spec->transport)};
    rc = k8s_manifest_all(&cfg->set, &j, &objs);
    if (rc != FLPS_OK) {
        fprintf(stderr, "k8s_render: %s: %s\n", path, flps_strerror(rc));
        free(text);
        free(spec);
        return 2;
    }
    json_array_foreach(objs, i, o) json_array_append(all, o);
    json_decref(objs);
    free(text);
    free(spec);
    return 0;
}

int main(int argc, char **argv)
{
    launch_k8s_cfg cfg;
    unsigned attempt = 0, n = 0;
    json_t *all = json_array();
    char err[256];
    int rc = 0;

    launch_k8s_cfg_init(&cfg);
    cfg.jobset = LAUNCH_K8S_JOBSET_NEVER;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (strcmp(argv[i], "--attempt") == 0 && i + 1 < argc) {
            attempt = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (strncmp(argv[i], "--k8s-", 6) == 0 && i + 1 < argc) {
            if (launch_k8s_cfg_set(&cfg, argv[i], argv[i + 1], err,
                                   sizeof(err)) != FLPS_OK) {
                fprintf(stderr, "k8s_render: %s\n", err);
                return 2;
            }
            i++;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "k8s_render: unknown option %s\n", argv[i]);
            return 2;
        } else {
            if (cfg.jobset == LAUNCH_K8S_JOBSET_AUTO) {
                fprintf(stderr, "k8s_render: --k8s-jobset auto asks the API; "
                                "give always or never\n");
                return 2;
            }
            cfg.set.jobset = cfg.jobset == LAUNCH_K8S_JOBSET_ALWAYS;
            rc = render(&cfg, argv[i], ++n, attempt, all);
        }
    }
    if (rc == 0) {
        char *text = json_dumps(all, JSON_INDENT(1));

        if (text == NULL)
            return 2;
        puts(text);
        free(text);
    }
    json_decref(all);
    return rc;
}
