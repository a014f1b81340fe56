/* flworker: one training worker of a job. Trains its shard of the data set
 * and exchanges compressed gradients with the parameter servers through
 * libflps. Progress goes to stdout as JSON lines (read by flrun and
 * flagent), logs to stderr. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/cliver.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/rng.h"
#include "flps.h"
#include "proto/transport_select.h"
#include "services/jobspec.h"
#include "worker/backend.h"
#include "worker/dataset.h"
#include "worker/fedavg_loop.h"
#include "worker/flworker_metrics.h"
#include "worker/model.h"
#include "worker/partition.h"

#define FLW_MAX_SERVERS 256
/* Auto jobs: the backward time of each layer is averaged over the local
 * iterations [FLW_PROFILE_FROM, FLW_PROFILE_TO) (the first ones pay for
 * cold caches and page faults), then rank 0 prints the profile. */
#define FLW_PROFILE_FROM 5
#define FLW_PROFILE_TO 25
#define FLW_PLAN_MAX_BYTES (1 << 20)

typedef struct push_ctx {
    flps_client *client;
    model *m;
    uint64_t iter;
    flps_err err;
    /* Profiling (NULL when off): per tensor, the sum of its backward
     * times; last = when the computation of the next gradient began. */
    double *tb_sum;
    double last;
    /* --metrics (NULL when off): each push is timed and its elements
     * counted into it. */
    flw_metrics *fm;
    /* This iteration's time inside pushes, and inside the forward's
     * per-layer waits. */
    double push_s, layer_wait_s;
    /* Per tensor, over the run: bytes and elements its pushes sent, and
     * the forward's time waiting for its updates. */
    uint64_t *layer_bytes, *layer_elements;
    double *layer_wait;
    /* overlap: false: the gradients are only noted (order[0..norder), in
     * the order backprop finished them) and pushed after the backward. */
    int defer;
    size_t *order, norder;
    /* overlap: the forward waits for each layer's update of wait_iter
     * before it reads the layer (wait_layers 0: nothing outstanding). */
    int wait_layers;
    uint64_t wait_iter;
} push_ctx;

/* Push tensor ti's gradient (compression and queueing: the sending is the
 * transport's), timed and its bytes counted. */
static void push_layer(push_ctx *pc, size_t ti)
{
    flps_client_stats before, after;
    model_tensor *t;
    double t0, dt;
    flps_err rc;

    if (pc->err != FLPS_OK)
        return;
    flps_client_get_stats(pc->client, &before);
    t0 = flps_mono_s();
    t = model_tensor_at(pc->m, ti);
    rc = flps_client_push(pc->client, (uint32_t)ti, t->grad, pc->iter);
    if (rc != FLPS_OK)
        pc->err = rc;
    dt = flps_mono_s() - t0;
    flps_client_get_stats(pc->client, &after);
    pc->push_s += dt;
    /* Only this push sends during the call (resends happen in the
     * waits), so the deltas are this layer's. */
    pc->layer_bytes[ti] += after.bytes_sent - before.bytes_sent;
    pc->layer_elements[ti] += after.elements_sent - before.elements_sent;
    if (pc->fm != NULL)
        flw_metrics_push(pc->fm, ti, dt,
                         after.elements_sent - before.elements_sent,
                         after.bytes_sent - before.bytes_sent,
                         after.dense_bytes - before.dense_bytes);
}

/* Called by backprop as each tensor's gradient is final: with overlap the
 * push starts while earlier layers are still being computed. */
static void on_grad_ready(void *arg, size_t ti)
{
    push_ctx *pc = arg;

    /* The time since the previous callback returned (or since the step
     * began, less the forward's waits) is this layer's backward
     * computation; the push below is communication work and is left out
     * of the next layer's time. */
    if (pc->tb_sum != NULL)
        pc->tb_sum[ti] += flps_mono_s() - pc->last;
    if (pc->defer)
        pc->order[pc->norder++] = ti;
    else
        push_layer(pc, ti);
    if (pc->tb_sum != NULL)
        pc->last = flps_mono_s();
}

/* Called by the forward pass before it first reads tensor ti: wait for
 * that layer's update of the previous iteration only. */
static void on_param_needed(void *arg, size_t ti)
{
    push_ctx *pc = arg;
    double t0, dt;
    flps_err rc;

    if (!pc->wait_layers || pc->err != FLPS_OK)
        return;
    t0 = flps_mono_s();
    rc = flps_client_wait_layer(pc->client, (uint32_t)ti, pc->wait_iter);
    if (rc != FLPS_OK)
        pc->err = rc;
    dt = flps_mono_s() - t0;
    pc->layer_wait_s += dt;
    pc->layer_wait[ti] += dt;
    pc->last += dt; /* not backward time of the profile */
}

/* FNV-1a over every parameter's bytes: equal replicas, equal hashes. */
static uint64_t model_hash(model *m)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < model_num_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        const unsigned char *b = (const unsigned char *)t->param;
        for (size_t k = 0; k < t->numel * sizeof(float); k++) {
            h ^= b[k];
            h *= 1099511628211ULL;
        }
    }
    return h;
}

/* The per-layer plan of an auto job, read from a file the scheduler
 * replaces (by rename) whenever it has a new one. */
typedef struct plan_watch {
    const char *path; /* NULL: no --plan */
    int seen;         /* st holds the file last looked at */
    struct stat st;
    long long version; /* of the plan applied; 0 = none yet */
} plan_watch;

static int stat_changed(const struct stat *a, const struct stat *b)
{
    return a->st_dev != b->st_dev || a->st_ino != b->st_ino ||
           a->st_size != b->st_size || a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
           a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

/* Read the whole file into a fresh buffer (caller frees); NULL on error
 * with why filled in. */
static char *read_small_file(const char *path, size_t *len, char *why,
                             size_t whylen)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;

    if (f == NULL) {
        snprintf(why, whylen, "cannot open it: %s", strerror(errno));
        return NULL;
    }
    buf = malloc(FLW_PLAN_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    n = fread(buf, 1, FLW_PLAN_MAX_BYTES + 1, f);
    if (ferror(f) || n > FLW_PLAN_MAX_BYTES) {
        snprintf(why, whylen, "%s",
                 ferror(f) ? "cannot read it" : "it is over 1 MiB");
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Check the plan parsed from text against the model; on success write the
 * version and each tensor's codec spec (specs[i], 32 bytes each) and the
 * number of sparse layers. Parsing does no I/O. */
static int plan_parse(const char *text, size_t len, model *m,
                      long long *version, char (*specs)[32], size_t *nsparse,
                      char *why, size_t whylen)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr), *layers, *v;
    size_t nt = model_num_tensors(m), sparse = 0;
    int ok = 0;

    if (root == NULL) {
        snprintf(why, whylen, "not JSON (line %d: %s)", jerr.line, jerr.text);
        return 0;
    }
    v = json_object_get(root, "version");
    layers = json_object_get(root, "layers");
    if (!json_is_object(root) || !json_is_integer(v) ||
        json_integer_value(v) < 1 || !json_is_array(layers)) {
        snprintf(why, whylen, "wants {\"version\": N >= 1, \"layers\": [...]}");
        goto out;
    }
    if (json_array_size(layers) != nt) {
        snprintf(why, whylen, "has %zu layers, the model has %zu",
                 json_array_size(layers), nt);
        goto out;
    }
    for (size_t i = 0; i < nt; i++) {
        json_t *l = json_array_get(layers, i);
        const model_tensor *t = model_tensor_at(m, i);
        const char *name = json_string_value(json_object_get(l, "name"));
        const char *codec = json_string_value(json_object_get(l, "codec"));
        json_t *numel = json_object_get(l, "numel");
        json_t *dens = json_object_get(l, "density");
        double d = json_is_number(dens) ? json_number_value(dens) : -1;

        if (name == NULL || strcmp(name, t->name) != 0 ||
            !json_is_integer(numel) ||
            json_integer_value(numel) != (json_int_t)t->numel) {
            snprintf(why, whylen,
                     "layer %zu is %s with %lld elements, the model's is %s "
                     "with %zu",
                     i, name ? name : "(no name)",
                     json_is_integer(numel)
                         ? (long long)json_integer_value(numel)
                         : -1LL,
                     t->name, t->numel);
            goto out;
        }
        if (codec != NULL && strcmp(codec, "dense") == 0) {
            snprintf(specs[i], 32, "dense");
        } else if (codec != NULL && strcmp(codec, "topk") == 0 && d > 0 &&
                   d <= 1) {
            snprintf(specs[i], 32, "topk:%.17g", d);
            sparse++;
        } else {
            snprintf(why, whylen,
                     "layer %s wants codec \"dense\" or \"topk\" with a "
                     "density in (0, 1]",
                     t->name);
            goto out;
        }
    }
    *version = (long long)json_integer_value(v);
    *nsparse = sparse;
    ok = 1;
out:
    json_decref(root);
    return ok;
}

/* At an iteration boundary: if the plan file changed, read it and apply a
 * newer plan. Returns 0 only when the client failed while applying. */
static int plan_check(plan_watch *pw, flps_client *client, model *m,
                      uint64_t iter)
{
    struct stat st;
    char why[256], (*specs)[32] = NULL;
    char *text = NULL;
    size_t len = 0, nt = model_num_tensors(m), nsparse = 0;
    long long version = 0;
    int ok = 1;

    if (pw->path == NULL || stat(pw->path, &st) != 0)
        return 1; /* no plan yet is normal */
    if (pw->seen && !stat_changed(&st, &pw->st))
        return 1;
    pw->st = st;
    pw->seen = 1;
    specs = calloc(nt, sizeof(*specs));
    text = specs ? read_small_file(pw->path, &len, why, sizeof(why)) : NULL;
    if (specs == NULL) {
        log_warn("plan %s: out of memory; keeping plan v%lld", pw->path,
                 pw->version);
        goto out;
    }
    if (text == NULL || !plan_parse(text, len, m, &version, specs, &nsparse,
                                    why, sizeof(why))) {
        log_warn("plan %s ignored: %s; keeping plan v%lld", pw->path, why,
                 pw->version);
        goto out;
    }
    if (version <= pw->version) {
        log_warn("plan %s ignored: version %lld is not newer than v%lld",
                 pw->path, version, pw->version);
        goto out;
    }
    for (size_t i = 0; i < nt; i++) {
        flps_err rc =
            flps_client_set_layer_codec(client, (uint32_t)i, specs[i]);
        if (rc != FLPS_OK) {
            log_error("plan v%lld: cannot set %s of layer %s: %s", version,
                      specs[i], model_tensor_at(m, i)->name, flps_strerror(rc));
            ok = 0;
            goto out;
        }
    }
    pw->version = version;
    log_info("plan v%lld applied: %zu layers sparse, %zu dense", version,
             nsparse, nt - nsparse);
    printf("{\"event\":\"plan\",\"version\":%lld,\"iteration\":%llu}\n",
           version, (unsigned long long)iter);
    fflush(stdout);
out:
    free(text);
    free(specs);
    return ok;
}

static void print_profile(model *m, uint64_t iteration, uint32_t workers,
                          double alpha, double beta, const double *tb_sum,
                          unsigned samples)
{
    printf("{\"event\":\"profile\",\"iteration\":%llu,\"workers\":%u,"
           "\"alpha\":%.9g,\"beta\":%.9g,\"layers\":[",
           (unsigned long long)iteration, workers, alpha, beta);
    for (size_t i = 0; i < model_num_tensors(m); i++) {
        const model_tensor *t = model_tensor_at(m, i);
        printf("%s{\"name\":\"%s\",\"numel\":%zu,\"t_backward\":%.9g}",
               i ? "," : "", t->name, t->numel, tb_sum[i] / samples);
    }
    printf("]}\n");
    fflush(stdout);
}

/* One splitmix64 output for a given state (a hash of x). */
static uint64_t mix64(uint64_t x)
{
    return flps_splitmix64(&x);
}

/* Shuffle idx[0..n) with a seeded generator (Fisher-Yates). */
static void shuffle(uint32_t *idx, size_t n, uint64_t seed)
{
    uint64_t state = seed;
    for (size_t i = n; i > 1; i--) {
        size_t j;
        state = mix64(state);
        j = (size_t)(state % i);
        uint32_t tmp = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = tmp;
    }
}

static int split_servers(char *list, const char **out, uint32_t *n)
{
    char *save = NULL;
    *n = 0;
    for (char *tok = strtok_r(list, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n == FLW_MAX_SERVERS)
            return 0;
        out[(*n)++] = tok;
    }
    return *n > 0;
}

static flps_err evaluate(model *m, const dataset *test, double *acc,
                         double *loss)
{
    size_t correct = 0;
    double loss_sum = 0;
    flps_err rc =
        model_evaluate(m, test->x, test->y, test->n, &correct, &loss_sum);
    if (rc == FLPS_OK) {
        *acc = (double)correct / (double)test->n;
        *loss = loss_sum / (double)test->n;
    }
    return rc;
}

/* The synthetic set: one draw of class centres for training and test
 * alike (two draws with different seeds would be two unrelated problems),
 * split 12,000 / 2,000. */
static flps_err synthetic_split(uint64_t seed, dataset *train, dataset *test)
{
    const size_t ntrain = 12000, ntest = 2000;
    dataset all;
    flps_err rc = dataset_synthetic(ntrain + ntest, 784, 10, seed, &all);

    if (rc != FLPS_OK)
        return rc;
    *test = all;
    test->n = ntest;
    test->x = flps_malloc(ntest * all.dim * sizeof(float));
    test->y = flps_malloc(ntest);
    if (test->x == NULL || test->y == NULL) {
        flps_free(test->x);
        flps_free(test->y);
        dataset_fini(&all);
        return FLPS_ENOMEM;
    }
    memcpy(test->x, all.x + ntrain * all.dim, ntest * all.dim * sizeof(float));
    memcpy(test->y, all.y + ntrain, ntest);
    *train = all;
    train->n = ntrain;
    return FLPS_OK;
}

/* Rank 0 reports the split of the training set (every rank computes the
 * same one): its skew and each client's sample count. The counts add up to
 * the training set, so with at most 10,000 clients (jobspec.h) the line
 * stays within the 64 KiB flrun reads as one. */
static void print_partition(const partition *part, const dataset *train)
{
    printf("{\"event\":\"partition\",\"clients\":%u,\"skew\":%.6f,"
           "\"samples\":[",
           part->clients, partition_skew(part, train->y, train->classes));
    for (uint32_t c = 0; c < part->clients; c++)
        printf("%s%zu", c ? "," : "", partition_count(part, c));
    printf("]}\n");
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: flworker --job FILE --rank R --servers EP[,EP...]\n"
               "  [--job-id ID]  job id used on the wire (default: the job "
               "file's name)\n"
               "  [--plan FILE]  compression auto: per-layer plan (JSON) to "
               "follow, re-read\n"
               "                 whenever it changes\n"
               "  [--metrics HOST:PORT]  serve Prometheus /metrics and "
               "/healthz (port 0: a\n"
               "                 free one); prints 'metrics on HOST:PORT' "
               "on stdout\n"
               "  [--transport zmq|rdma|auto]  the data plane, instead of the "
               "job file's\n"
               "                 transport: (flsched passes what it chose "
               "for auto)\n"
               "  [--credentials-file PATH]  the job's credentials (0600; "
               "else\n"
               "                 $FLPS_CREDENTIALS_FILE)\n"
               "  [--backend NAME]  the compute backend, instead of the "
               "job file's\n"
               "                 backend: (cpu, cuda)\n");
    {
        char built[128];

        fprintf(f, "backends built into this flworker: %s\n",
                worker_backend_list(built, sizeof(built)));
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"job", required_argument, NULL, 'j'},
        {"rank", required_argument, NULL, 'r'},
        {"servers", required_argument, NULL, 's'},
        {"job-id", required_argument, NULL, 'i'},
        {"plan", required_argument, NULL, 'p'},
        {"metrics", required_argument, NULL, 'm'},
        {"transport", required_argument, NULL, 'X'},
        {"credentials-file", required_argument, NULL, 'K'},
        {"backend", required_argument, NULL, 'B'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *job_file = NULL, *job_id = NULL, *metrics_ep = NULL;
    const char *transport_arg = NULL, *backend_arg = NULL;
    const worker_backend *backend = NULL;
    transport_select tsel = {.kind = TRANSPORT_KIND_ZMQ};
    char twhy[1024];
    flw_metrics *fm = NULL;
    char mbound[128];
    const char *servers[FLW_MAX_SERVERS];
    char *server_list = NULL, errbuf[512], comp[64], logname[32];
    uint32_t nservers = 0;
    long rank = -1;
    jobspec spec;
    dataset train, test;
    uint32_t *mine = NULL, *xb_idx = NULL, nclients;
    partition part;
    float **global = NULL; /* fedavg: the replica, apart from the model */
    size_t nglobal = 0;
    int is_fedavg;
    size_t nmine = 0, cursor = 0, epoch = 0;
    float *xb = NULL;
    uint8_t *yb = NULL;
    model *m = NULL;
    flps_client *client = NULL;
    flps_tensor *tensors = NULL;
    flps_client_config cc;
    flps_client_stats st;
    size_t hidden[2] = {256, 128};
    double t0, loss_window = 0, acc = -1, tloss = 0;
    uint64_t start_iter, progress_every, nwin = 0;
    uint64_t warmup_sent = 0; /* bytes sent by the warm-up's end */
    int c, status = 1;
    flps_err rc;
    int64_t rank_arg;
    plan_watch pw;
    int is_auto;
    double *tb_sum = NULL, alpha = 0, beta = 0;
    /* The loop's time split, and what each layer sent (see push_ctx). */
    double compute_s = 0, push_total_s = 0, comm_wait_s = 0, loop_s = 0;
    uint64_t *layer_bytes = NULL, *layer_elements = NULL;
    double *layer_wait = NULL;
    size_t *order = NULL;
    int layer_waits = 0, outstanding = 0;

    if (flps_cli_version(argc, argv, "flworker"))
        return 0;
    memset(&pw, 0, sizeof(pw));
    memset(&part, 0, sizeof(part));
    memset(&train, 0, sizeof(train));
    memset(&test, 0, sizeof(test));
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            job_file = optarg;
            break;
        case 'r':
            /* A rank is below the job's workers, at most 1024 (jobspec.h);
             * the fit with this job is checked once it is loaded. */
            if (flps_parse_i64("--rank", optarg, 0, 1023, &rank_arg, errbuf,
                               sizeof(errbuf)) != FLPS_OK) {
                fprintf(stderr, "flworker: %s\n", errbuf);
                return 2;
            }
            rank = (long)rank_arg;
            break;
        case 's':
            server_list = optarg;
            break;
        case 'i':
            job_id = optarg;
            break;
        case 'p':
            pw.path = optarg;
            break;
        case 'm':
            metrics_ep = optarg;
            break;
        case 'X':
            if (!transport_kind_parse(optarg, &tsel.kind)) {
                fprintf(stderr,
                        "flworker: --transport: '%s' is not a transport; "
                        "use zmq, rdma or auto\n",
                        optarg);
                return 2;
            }
            transport_arg = optarg;
            break;
        case 'B':
            backend_arg = optarg;
            break;
        case 'K':
            /* libflps reads the job's credentials from the file this
             * variable names (the path only; the secret stays in it). */
            if (setenv("FLPS_CREDENTIALS_FILE", optarg, 1) != 0) {
                fprintf(stderr, "flworker: cannot set FLPS_CREDENTIALS_FILE\n");
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (job_file == NULL || rank < 0 || server_list == NULL ||
        !split_servers(server_list, servers, &nservers)) {
        usage(stderr);
        return 2;
    }
    snprintf(logname, sizeof(logname), "flworker/%ld", rank);
    flps_log_setup(logname, FLPS_LOG_INFO);
    if (jobspec_load(job_file, &spec, errbuf, sizeof(errbuf)) != FLPS_OK) {
        log_error("%s", errbuf);
        return 2;
    }
    if (job_id == NULL)
        job_id = spec.name;
    if ((uint32_t)rank >= spec.workers || nservers != spec.servers) {
        log_error("rank %ld and %u servers do not fit the job (workers: %u, "
                  "servers: %u)",
                  rank, nservers, spec.workers, spec.servers);
        return 2;
    }
    is_fedavg = spec.mode == JOBSPEC_MODE_FEDAVG;
    /* In the other modes each worker is one client of the partition. */
    nclients = is_fedavg && spec.clients ? spec.clients : spec.workers;
    if (nclients < spec.workers) {
        log_error("clients: %u is fewer than workers: %u; each worker "
                  "process plays at least one client",
                  nclients, spec.workers);
        return 2;
    }
    if (is_fedavg && spec.compression == JOBSPEC_COMP_AUTO) {
        log_error("compression: auto plans per-iteration gradients; fedavg "
                  "pushes one delta per round: use a fixed codec");
        return 2;
    }
    is_auto = spec.compression == JOBSPEC_COMP_AUTO;
    /* flagent passes --plan to every worker; a job with one codec has no
     * plan to follow, and that is not worth a warning. */
    if (!is_auto)
        pw.path = NULL;
    /* The job file's transport: (jobspec_transport and transport_kind
     * share their names), unless --transport says what flsched chose. */
    if (transport_arg == NULL)
        transport_kind_parse(jobspec_transport_name(spec.transport),
                             &tsel.kind);
    /* rdma that cannot run here stops before the data set is loaded; auto
     * decides in the client, which logs what it chose. */
    if (tsel.kind == TRANSPORT_KIND_RDMA &&
        transport_resolve(&tsel, NULL, twhy, sizeof(twhy)) != FLPS_OK) {
        log_error("%s", twhy);
        return 2;
    }
    /* The compute backend: unknown, not built in or unable to run here,
     * the worker stops before it loads the data set. */
    if (worker_backend_select(backend_arg != NULL
                                  ? backend_arg
                                  : jobspec_backend_name(spec.backend),
                              &backend, twhy, sizeof(twhy)) != FLPS_OK) {
        log_error("%s", twhy);
        return 2;
    }
    log_info("backend %s: %s", backend->name, backend->description);
    jobspec_comp_format(&spec, comp, sizeof(comp));

    if (spec.dataset == JOBSPEC_DATASET_FASHION_MNIST) {
        if (dataset_load_fmnist(spec.data_dir, "train", &train) != FLPS_OK ||
            dataset_load_fmnist(spec.data_dir, "test", &test) != FLPS_OK) {
            log_error("cannot load Fashion-MNIST from %s", spec.data_dir);
            goto out;
        }
    } else if (synthetic_split(spec.seed, &train, &test) != FLPS_OK) {
        log_error("cannot build the synthetic data set");
        goto out;
    }
    rc = spec.partition == JOBSPEC_PARTITION_IID
             ? partition_iid(train.n, nclients, spec.seed, &part)
             : partition_dirichlet(train.y, train.n, train.classes, nclients,
                                   spec.dirichlet_alpha, spec.seed, &part);
    if (rc != FLPS_OK) {
        log_error("cannot split %zu training samples over %u clients: %s",
                  train.n, nclients, flps_strerror(rc));
        goto out;
    }
    for (uint32_t cl = (uint32_t)rank; cl < nclients; cl += spec.workers)
        nmine += partition_count(&part, cl);
    mine = part.idx + part.off[rank];
    if (nmine == 0) {
        log_error("rank %ld has no training samples", rank);
        goto out;
    }
    if (rank == 0)
        print_partition(&part, &train);
    if (spec.model == JOBSPEC_MODEL_CNN) {
        /* Both data sets are 28 x 28 grey images (the synthetic one's 784
         * features are read as one). */
        model_cnn_shape shape = model_cnn_shape_fmnist();

        shape.classes = train.classes;
        if (train.dim != shape.height * shape.width * shape.channels) {
            log_error("model: cnn wants %zu x %zu x %zu images, the data set "
                      "has %zu features",
                      shape.height, shape.width, shape.channels, train.dim);
            goto out;
        }
        rc = backend->create_cnn(&shape, spec.batch_size, spec.seed, &m);
    } else {
        rc = backend->create_mlp(train.dim, hidden, 2, train.classes,
                                 spec.batch_size, spec.seed, &m);
    }
    if (rc != FLPS_OK) {
        log_error("cannot build the model: %s", flps_strerror(rc));
        goto out;
    }
    xb = flps_malloc((size_t)spec.batch_size * train.dim * sizeof(float));
    yb = flps_malloc(spec.batch_size);
    xb_idx = flps_malloc(nmine * sizeof(uint32_t));
    tensors = flps_calloc(model_num_tensors(m), sizeof(*tensors));
    global = flps_calloc(model_num_tensors(m), sizeof(*global));
    if (xb == NULL || yb == NULL || xb_idx == NULL || tensors == NULL ||
        global == NULL) {
        log_error("out of memory");
        goto out;
    }
    nglobal = model_num_tensors(m);
    for (size_t i = 0; i < model_num_tensors(m); i++) {
        model_tensor *t = model_tensor_at(m, i);
        tensors[i].name = t->name;
        tensors[i].numel = t->numel;
        tensors[i].data = t->param;
        if (is_fedavg) {
            /* Clients train the model's own parameters; the replica the
             * shards update is the round's global model. */
            global[i] = flps_malloc(t->numel * sizeof(float));
            if (global[i] == NULL) {
                log_error("out of memory");
                goto out;
            }
            memcpy(global[i], t->param, t->numel * sizeof(float));
            tensors[i].data = global[i];
        }
    }

    if (metrics_ep != NULL) {
        rc = flw_metrics_create(metrics_ep, m, &fm, mbound, sizeof(mbound));
        if (rc != FLPS_OK) {
            log_error("cannot serve metrics on %s (%s); fix or drop "
                      "--metrics",
                      metrics_ep, flps_strerror(rc));
            goto out;
        }
        log_info("metrics on http://%s/metrics (health: /healthz)", mbound);
        printf("metrics on %s\n", mbound);
        fflush(stdout);
    }
    memset(&cc, 0, sizeof(cc));
    cc.job = job_id;
    cc.rank = (uint32_t)rank;
    cc.workers = spec.workers;
    cc.servers = servers;
    cc.nservers = nservers;
    cc.tensors = tensors;
    cc.ntensors = (uint32_t)model_num_tensors(m);
    cc.part_size = spec.part_size;
    /* ssp:S is async with a bound: the shards apply pushes as they come
     * and tell the slowest worker's iteration; the client waits. */
    cc.async = spec.mode == JOBSPEC_MODE_ASYNC || spec.mode == JOBSPEC_MODE_SSP;
    cc.compression = comp;
    cc.lr = spec.lr;
    cc.momentum = spec.momentum;
    cc.lr_cosine = spec.lr_schedule == JOBSPEC_LR_COSINE;
    cc.iterations = spec.iterations;
    if (is_fedavg) {
        /* One synchronous iteration per round, pushing pre-scaled deltas
         * (worker/fedavg.h): lr 1 makes the shards apply the weighted mean;
         * momentum and the schedule are the clients' local business. */
        cc.lr = 1.0;
        cc.momentum = 0;
        cc.lr_cosine = 0;
        cc.iterations = spec.rounds;
        /* With a deadline only the clients in time count: each push
         * carries their samples as its weight (fedavg_loop.c). */
        if (spec.round_deadline > 0)
            cc.async = FLPS_MODE_WEIGHTED;
    }
    /* jobspec allows a warm-up only for ssgd with topk, gtopk, dgc or
     * auto; the client checks again. */
    rc = flps_client_create_warmup(&cc, transport_kind_name(tsel.kind),
                                   spec.density_warmup,
                                   spec.density_warmup_start, &client);
    if (rc != FLPS_OK) {
        log_error("cannot join the parameter servers: %s", flps_strerror(rc));
        goto out;
    }
    if (spec.mode == JOBSPEC_MODE_SSP &&
        flps_client_set_staleness(client, spec.staleness) != FLPS_OK) {
        log_error("cannot set the staleness bound");
        goto out;
    }
    if (flps_client_init(client) != FLPS_OK) {
        log_error("cannot get the initial model: %s",
                  flps_client_last_error(client));
        goto out;
    }
    if (is_auto && rank == 0) {
        /* The planner's inputs come from rank 0 (it alone prints the
         * profile). alpha/beta are measured now, while a pull only re-reads
         * the model just pulled. */
        rc = flps_client_measure_network(client, &alpha, &beta);
        if (rc != FLPS_OK) {
            log_error("cannot measure the network: %s",
                      flps_client_last_error(client)[0]
                          ? flps_client_last_error(client)
                          : flps_strerror(rc));
            goto out;
        }
        log_info("network: alpha %.3g s, beta %.3g s/byte (%.3g GB/s)", alpha,
                 beta, 1e-9 / beta);
        tb_sum = flps_calloc(model_num_tensors(m), sizeof(double));
        if (tb_sum == NULL) {
            log_error("out of memory");
            goto out;
        }
    }
    start_iter = flps_client_resume_iteration(client);
    log_info("rank %ld of %u: %zu training samples, model %s with %zu "
             "parameters, compression %s, starting at iteration %llu",
             rank, spec.workers, nmine, jobspec_model_name(spec.model),
             model_num_params(m), comp, (unsigned long long)start_iter);
    printf("{\"event\":\"start\",\"rank\":%ld,\"samples\":%zu,"
           "\"params\":%zu,\"start_iteration\":%llu}\n",
           rank, nmine, model_num_params(m), (unsigned long long)start_iter);
    fflush(stdout);
    if (is_fedavg) {
        /* The shards' iterations are the rounds. */
        fedavg_loop_args fa = {.spec = &spec,
                               .rank = (uint32_t)rank,
                               .train = &train,
                               .test = &test,
                               .part = &part,
                               .m = m,
                               .client = client,
                               .global = global,
                               .start_round = start_iter,
                               .backend = backend->name};

        if (fedavg_loop_run(&fa) == FLPS_OK)
            status = 0;
        goto out;
    }

    memcpy(xb_idx, mine, nmine * sizeof(uint32_t));
    shuffle(xb_idx, nmine, mix64(spec.seed * 1000003ULL + (uint64_t)rank));
    progress_every = spec.iterations / 100 ? spec.iterations / 100 : 1;
    layer_bytes = flps_calloc(model_num_tensors(m), sizeof(uint64_t));
    layer_elements = flps_calloc(model_num_tensors(m), sizeof(uint64_t));
    layer_wait = flps_calloc(model_num_tensors(m), sizeof(double));
    order = flps_calloc(model_num_tensors(m), sizeof(size_t));
    if (layer_bytes == NULL || layer_elements == NULL || layer_wait == NULL ||
        order == NULL) {
        log_error("out of memory");
        goto out;
    }
    /* overlap: the next forward waits per layer. An async (or ssp) wait
     * pulls the whole model, so there it stays one wait per iteration
     * (the pushes still go out during backprop). */
    layer_waits = spec.overlap && !cc.async;
    if (spec.overlap && cc.async && rank == 0)
        log_info("overlap: %s jobs push during backprop but wait for the "
                 "whole model after it (their wait pulls it)",
                 jobspec_mode_name(spec.mode));
    t0 = flps_mono_s();
    for (uint64_t it = start_iter; it < spec.iterations; it++) {
        uint64_t local = it - start_iter;
        push_ctx pc = {.client = client,
                       .m = m,
                       .iter = it,
                       .err = FLPS_OK,
                       .fm = fm,
                       .layer_bytes = layer_bytes,
                       .layer_elements = layer_elements,
                       .layer_wait = layer_wait,
                       .defer = !spec.overlap,
                       .order = order,
                       .wait_layers = outstanding,
                       .wait_iter = it - 1};
        float loss = 0;
        double step_t0, step_dt, wait_t0, wait_dt = 0;

        if (!plan_check(&pw, client, m, it))
            goto out;
        if (tb_sum != NULL && local >= FLW_PROFILE_FROM &&
            local < FLW_PROFILE_TO)
            pc.tb_sum = tb_sum;

        for (uint32_t b = 0; b < spec.batch_size; b++) {
            uint32_t s;
            if (cursor == nmine) {
                cursor = 0;
                epoch++;
                shuffle(xb_idx, nmine,
                        mix64(spec.seed * 1000003ULL + (uint64_t)rank +
                              epoch * 7919ULL));
            }
            s = xb_idx[cursor++];
            memcpy(xb + (size_t)b * train.dim, train.x + (size_t)s * train.dim,
                   train.dim * sizeof(float));
            yb[b] = train.y[s];
        }
        pc.last = flps_mono_s();
        step_t0 = pc.last;
        rc = model_train_step_ex(m, xb, yb, spec.batch_size, &loss,
                                 layer_waits ? on_param_needed : NULL, &pc,
                                 on_grad_ready, &pc);
        if (rc != FLPS_OK) {
            log_error("training step %llu failed: %s (lower lr?)",
                      (unsigned long long)it, flps_strerror(rc));
            goto out;
        }
        /* overlap: false: every layer now, in backprop's order, so the
         * pushes (and so the results) are those of overlap on. */
        for (size_t k = 0; k < pc.norder; k++)
            push_layer(&pc, pc.order[k]);
        step_dt = flps_mono_s() - step_t0;
        wait_t0 = flps_mono_s();
        if (pc.err == FLPS_OK && !layer_waits) {
            pc.err = flps_client_wait(client, it);
            wait_dt = flps_mono_s() - wait_t0;
        }
        if (pc.err != FLPS_OK) {
            log_error("iteration %llu: %s", (unsigned long long)it,
                      flps_client_last_error(client)[0]
                          ? flps_client_last_error(client)
                          : flps_strerror(pc.err));
            goto out;
        }
        outstanding = layer_waits;
        compute_s += step_dt - pc.push_s - pc.layer_wait_s;
        push_total_s += pc.push_s;
        comm_wait_s += pc.layer_wait_s + wait_dt;
        if (fm != NULL) {
            flps_client_get_stats(client, &st);
            flw_metrics_iteration(fm, it, step_dt - pc.push_s - pc.layer_wait_s,
                                  pc.push_s + pc.layer_wait_s + wait_dt,
                                  pc.layer_wait_s + wait_dt, loss, &st);
        }
        if (pc.tb_sum != NULL && local + 1 == FLW_PROFILE_TO)
            print_profile(m, it + 1, spec.workers, alpha, beta, tb_sum,
                          FLW_PROFILE_TO - FLW_PROFILE_FROM);
        if (it + 1 == spec.density_warmup) {
            flps_client_get_stats(client, &st);
            warmup_sent = st.bytes_sent;
        }
        loss_window += loss;
        nwin++;
        /* Every rank reports its bytes, so a job's progress can count
         * all workers as its summary does; the loss is rank 0's. */
        if ((it + 1) % progress_every == 0 || it + 1 == spec.iterations) {
            if (fm != NULL)
                flw_metrics_client(fm, client);
            flps_client_get_stats(client, &st);
            printf("{\"event\":\"progress\",\"iter\":%llu,\"iterations\":%llu,"
                   "\"loss\":%.5f,\"bytes_sent\":%llu,\"dense_bytes\":%llu,"
                   "\"elapsed\":%.3f}\n",
                   (unsigned long long)(it + 1),
                   (unsigned long long)spec.iterations,
                   loss_window / (double)nwin,
                   (unsigned long long)st.bytes_sent,
                   (unsigned long long)st.dense_bytes, flps_mono_s() - t0);
            fflush(stdout);
            loss_window = 0;
            nwin = 0;
        }
        /* An evaluation, and the end, read the whole model: every layer's
         * update first. */
        if (outstanding &&
            (it + 1 == spec.iterations || (rank == 0 && spec.eval_every > 0 &&
                                           (it + 1) % spec.eval_every == 0))) {
            wait_t0 = flps_mono_s();
            if (flps_client_wait(client, it) != FLPS_OK) {
                log_error("iteration %llu: %s", (unsigned long long)it,
                          flps_client_last_error(client));
                goto out;
            }
            comm_wait_s += flps_mono_s() - wait_t0;
            outstanding = 0;
        }
        if (rank == 0 && spec.eval_every > 0 &&
            (it + 1) % spec.eval_every == 0 && it + 1 < spec.iterations) {
            if (evaluate(m, &test, &acc, &tloss) == FLPS_OK) {
                /* elapsed_s: the progress lines' clock, so a run's time
                 * to a target accuracy can be read from its events. */
                printf("{\"event\":\"eval\",\"iter\":%llu,"
                       "\"test_accuracy\":%.4f,\"test_loss\":%.4f,"
                       "\"elapsed_s\":%.3f}\n",
                       (unsigned long long)(it + 1), acc, tloss,
                       flps_mono_s() - t0);
                fflush(stdout);
                if (fm != NULL)
                    flw_metrics_eval(fm, acc, tloss);
            }
        }
    }
    loop_s = flps_mono_s() - t0;
    if (rank == 0) {
        if (evaluate(m, &test, &acc, &tloss) != FLPS_OK) {
            log_error("final evaluation failed");
            goto out;
        }
        if (fm != NULL)
            flw_metrics_eval(fm, acc, tloss);
        printf("{\"event\":\"eval\",\"iter\":%llu,\"test_accuracy\":%.4f,"
               "\"test_loss\":%.4f,\"elapsed_s\":%.3f}\n",
               (unsigned long long)spec.iterations, acc, tloss,
               flps_mono_s() - t0);
    }
    flps_client_get_stats(client, &st);
    printf("{\"event\":\"done\",\"rank\":%ld,\"iterations\":%llu,"
           "\"bytes_sent\":%llu,\"bytes_received\":%llu,"
           "\"dense_bytes\":%llu,\"resends\":%llu",
           rank, (unsigned long long)spec.iterations,
           (unsigned long long)st.bytes_sent,
           (unsigned long long)st.bytes_received,
           (unsigned long long)st.dense_bytes, (unsigned long long)st.resends);
    if (rank == 0)
        printf(",\"test_accuracy\":%.4f,\"test_loss\":%.4f", acc, tloss);
    if (spec.density_warmup > 0)
        printf(",\"warmup_bytes_sent\":%llu", (unsigned long long)warmup_sent);
    if (spec.mode == JOBSPEC_MODE_SSP)
        printf(",\"staleness\":%u,\"stale_wait_seconds\":%.3f", spec.staleness,
               flps_client_stale_wait_seconds(client));
    /* Where the loop's time went: computing (the steps less their pushes
     * and waits), pushing (compression and queueing), blocked on the
     * network; and what each layer's pushes sent. */
    printf(",\"backend\":\"%s\",\"overlap\":%s,\"compute_seconds\":%.6f,"
           "\"push_seconds\":%.6f,"
           "\"comm_wait_seconds\":%.6f,\"seconds_per_iteration\":%.6f,"
           "\"model_hash\":\"%016llx\",\"layers\":[",
           backend->name, spec.overlap ? "true" : "false", compute_s,
           push_total_s, comm_wait_s,
           spec.iterations > start_iter
               ? loop_s / (double)(spec.iterations - start_iter)
               : 0.0,
           (unsigned long long)model_hash(m));
    for (size_t i = 0; i < model_num_tensors(m); i++)
        printf("%s{\"name\":\"%s\",\"bytes_sent\":%llu,\"elements_sent\":%llu,"
               "\"wait_seconds\":%.6f}",
               i ? "," : "", model_tensor_at(m, i)->name,
               (unsigned long long)layer_bytes[i],
               (unsigned long long)layer_elements[i], layer_wait[i]);
    printf("],\"seconds\":%.3f}\n", flps_mono_s() - t0);
    fflush(stdout);
    log_info("rank %ld done: %llu iterations in %.1f s (computing %.1f s, "
             "pushing %.1f s, waiting on the network %.1f s, overlap %s), "
             "sent %llu bytes (dense would be %llu)",
             rank, (unsigned long long)spec.iterations, loop_s, compute_s,
             push_total_s, comm_wait_s, spec.overlap ? "on" : "off",
             (unsigned long long)st.bytes_sent,
             (unsigned long long)st.dense_bytes);
    status = 0;
out:
    flw_metrics_destroy(fm);
    flps_client_destroy(client);
    model_destroy(m);
    dataset_fini(&train);
    dataset_fini(&test);
    partition_fini(&part);
    for (size_t i = 0; i < nglobal; i++)
        flps_free(global[i]);
    flps_free(global);
    flps_free(xb);
    flps_free(yb);
    flps_free(xb_idx);
    flps_free(tensors);
    flps_free(tb_sum);
    flps_free(layer_bytes);
    flps_free(layer_elements);
    flps_free(layer_wait);
    flps_free(order);
    return status;
}
