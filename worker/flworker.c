/* flworker: one training worker of a job. Trains its shard of the data set
 * and exchanges compressed gradients with the parameter servers through
 * libflps. Progress goes to stdout as JSON event lines (docs/events.md,
 * read by flrun and flagent), logs to stderr. */
#include "worker/flworker.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "services/cliver.h"
#include "services/event.h"
#include "transports/select.h"
#include "worker/fedavg_loop.h"

/* What the command line says. */
typedef struct flw_opts {
    const char *job_file, *job_id, *metrics_ep, *plan_path;
    const char *clock_record; /* --gpu-clock-record */
    const char *transport_arg, *backend_arg, *peers;
    char *server_list;
    long rank;
    transport_select tsel; /* --transport, else the job file's */
} flw_opts;

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

static void usage(FILE *f)
{
    fprintf(f, "usage: flworker --job FILE --rank R --servers EP[,EP...]\n"
               "       flworker --job FILE --rank R [--peers EP,EP...]   "
               "(mode saps)\n"
               "  [--peers LIST]  mode saps: every worker's endpoint, rank "
               "order (default:\n"
               "                 $FLPS_PEERS); this rank listens on its own\n"
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
               "                 backend: (cpu, cuda)\n"
               "  [--gpu-clock-record PATH]  where the GPU clocks gpu_clock: "
               "changes are\n"
               "                 recorded, so the launcher restores them "
               "after a crash\n");
    {
        char built[128];

        fprintf(f, "backends built into this flworker: %s\n",
                worker_backend_list(built, sizeof(built)));
    }
}

/* Read the command line into *o. Returns -1 to go on, else the exit
 * status (0 for --help, 2 for a usage error, said on stderr). */
static int parse_options(int argc, char **argv, flw_opts *o)
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
        {"peers", required_argument, NULL, 'P'},
        {"gpu-clock-record", required_argument, NULL, 'G'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char errbuf[512];
    int64_t rank_arg;
    int c;

    memset(o, 0, sizeof(*o));
    o->rank = -1;
    o->tsel.kind = TRANSPORT_KIND_ZMQ;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            o->job_file = optarg;
            break;
        case 'r':
            /* A rank is below the job's workers, at most 1024 (jobspec.h);
             * the fit with this job is checked once it is loaded. */
            if (flps_parse_i64("--rank", optarg, 0, 1023, &rank_arg, errbuf,
                               sizeof(errbuf)) != FLPS_OK) {
                fprintf(stderr, "flworker: %s\n", errbuf);
                return 2;
            }
            o->rank = (long)rank_arg;
            break;
        case 's':
            o->server_list = optarg;
            break;
        case 'i':
            o->job_id = optarg;
            break;
        case 'p':
            o->plan_path = optarg;
            break;
        case 'm':
            o->metrics_ep = optarg;
            break;
        case 'X':
            if (!transport_kind_parse(optarg, &o->tsel.kind)) {
                char choices[64];

                fprintf(stderr,
                        "flworker: --transport: '%s' is not a transport; "
                        "use %s\n",
                        optarg,
                        transport_kind_choices(choices, sizeof(choices)));
                return 2;
            }
            o->transport_arg = optarg;
            break;
        case 'B':
            o->backend_arg = optarg;
            break;
        case 'P':
            o->peers = optarg;
            break;
        case 'G':
            o->clock_record = optarg;
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
    /* A saps job has no servers: whether it is one is the job file's to
     * say, once it is loaded. */
    if (o->job_file == NULL || o->rank < 0) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/* Whether this node can run the job's transport and compute backend: 0
 * when it can, else 2 (logged). */
static int check_node(flw *w, flw_opts *o)
{
    char why[1024];

    /* The job file's transport: (jobspec_transport and transport_kind
     * share their names), unless --transport says what flsched chose. */
    if (o->transport_arg == NULL)
        transport_kind_parse(jobspec_transport_name(w->spec.transport),
                             &o->tsel.kind);
    /* rdma that cannot run here stops before the data set is loaded; auto
     * decides in the client, which logs what it chose. */
    if (o->tsel.kind == TRANSPORT_KIND_RDMA &&
        transport_resolve(&o->tsel, NULL, why, sizeof(why)) != FLPS_OK) {
        log_error("%s", why);
        return 2;
    }
    /* The compute backend: unknown, not built in or unable to run here,
     * the worker stops before it loads the data set. */
    if (worker_backend_select(o->backend_arg != NULL
                                  ? o->backend_arg
                                  : jobspec_backend_name(w->spec.backend),
                              &w->backend, why, sizeof(why)) != FLPS_OK) {
        log_error("%s", why);
        return 2;
    }
    log_info("backend %s: %s", w->backend->name, w->backend->description);
    jobspec_comp_format(&w->spec, w->comp, sizeof(w->comp));
    return 0;
}

/* Load the job file and check that this worker can run it here: rank and
 * servers, clients, the transport and the compute backend. 0 when it can,
 * else the exit status (2; logged). */
static int load_job(flw *w, flw_opts *o)
{
    char errbuf[1024];

    if (jobspec_load(o->job_file, &w->spec, errbuf, sizeof(errbuf)) !=
        FLPS_OK) {
        log_error("%s", errbuf);
        return 2;
    }
    w->job_id = o->job_id != NULL ? o->job_id : w->spec.name;
    w->clock_record = o->clock_record;
    w->rank = o->rank;
    w->is_saps = w->spec.mode == JOBSPEC_MODE_SAPS;
    w->peers = o->peers;
    if (o->server_list == NULL && !w->is_saps) {
        log_error("--servers is missing: the job's mode %s trains on its "
                  "parameter servers",
                  jobspec_mode_name(w->spec.mode));
        return 2;
    }
    if ((uint32_t)w->rank >= w->spec.workers ||
        w->nservers != w->spec.servers) {
        log_error("rank %ld and %u servers do not fit the job (workers: %u, "
                  "servers: %u)",
                  w->rank, w->nservers, w->spec.workers, w->spec.servers);
        return 2;
    }
    w->is_fedavg = w->spec.mode == JOBSPEC_MODE_FEDAVG;
    /* In the other modes each worker is one client of the partition. */
    w->nclients =
        w->is_fedavg && w->spec.clients ? w->spec.clients : w->spec.workers;
    if (w->nclients < w->spec.workers) {
        log_error("clients: %u is fewer than workers: %u; each worker "
                  "process plays at least one client",
                  w->nclients, w->spec.workers);
        return 2;
    }
    w->is_auto = w->spec.compression == CODEC_AUTO;
    if (w->is_fedavg && w->is_auto) {
        log_error("compression: auto plans per-iteration gradients; fedavg "
                  "pushes one delta per round: use a fixed codec");
        return 2;
    }
    /* flagent passes --plan to every worker; a job with one codec has no
     * plan to follow, and that is not worth a warning. */
    w->plan.path = w->is_auto ? o->plan_path : NULL;
    return check_node(w, o);
}

/* Rank 0 reports the split of the training set (every rank computes the
 * same one): its skew and each client's sample count. The counts add up to
 * the training set, so with at most 10,000 clients (jobspec.h) the line
 * stays within the 64 KiB flrun reads as one. */
static int print_partition(const flw *w)
{
    const partition *part = &w->part;
    uint64_t *samples = flps_calloc(part->clients, sizeof(uint64_t));
    event ev = {.kind = EVENT_PARTITION};

    if (samples == NULL) {
        log_error("out of memory");
        return 0;
    }
    for (uint32_t c = 0; c < part->clients; c++)
        samples[c] = partition_count(part, c);
    ev.partition.clients = part->clients;
    ev.partition.skew = partition_skew(part, w->train.y, w->train.classes);
    ev.partition.samples.v = samples;
    ev.partition.samples.n = part->clients;
    (void)event_write(stdout, &ev);
    flps_free(samples);
    return 1;
}

/* The training and test sets, and this rank's part of the training set.
 * Returns 0 on an error (logged). */
static int load_data(flw *w)
{
    const jobspec *spec = &w->spec;
    flps_err rc;

    if (spec->dataset == JOBSPEC_DATASET_FASHION_MNIST) {
        if (dataset_load_fmnist(spec->data_dir, "train", &w->train) !=
                FLPS_OK ||
            dataset_load_fmnist(spec->data_dir, "test", &w->test) != FLPS_OK) {
            log_error("cannot load Fashion-MNIST from %s", spec->data_dir);
            return 0;
        }
    } else if (synthetic_split(spec->seed, &w->train, &w->test) != FLPS_OK) {
        log_error("cannot build the synthetic data set");
        return 0;
    }
    if (spec->partition == JOBSPEC_PARTITION_IID)
        rc = partition_iid(w->train.n, w->nclients, spec->seed, &w->part);
    else if (spec->partition == JOBSPEC_PARTITION_SHARDS)
        rc = partition_shards(w->train.y, w->train.n, w->train.classes,
                              w->nclients, spec->partition_shards, spec->seed,
                              &w->part);
    else
        rc = partition_dirichlet(w->train.y, w->train.n, w->train.classes,
                                 w->nclients, spec->dirichlet_alpha, spec->seed,
                                 &w->part);
    if (rc != FLPS_OK) {
        log_error("cannot split %zu training samples over %u clients: %s",
                  w->train.n, w->nclients, flps_strerror(rc));
        return 0;
    }
    for (uint32_t cl = (uint32_t)w->rank; cl < w->nclients; cl += spec->workers)
        w->nmine += partition_count(&w->part, cl);
    w->mine = w->part.idx + w->part.off[w->rank];
    if (w->nmine == 0) {
        log_error("rank %ld has no training samples", w->rank);
        return 0;
    }
    return w->rank != 0 || print_partition(w);
}

/* The model on the chosen backend, and the tensors the client keeps in
 * step with the shards (fedavg: a global copy apart from the model).
 * Returns 0 on an error (logged). */
static int build_model(flw *w)
{
    const size_t hidden[2] = {256, 128};
    const jobspec *spec = &w->spec;
    size_t nt;
    flps_err rc;

    if (spec->model == JOBSPEC_MODEL_CNN) {
        /* Both data sets are 28 x 28 grey images (the synthetic one's 784
         * features are read as one). */
        model_cnn_shape shape = model_cnn_shape_fmnist();

        shape.classes = w->train.classes;
        if (w->train.dim != shape.height * shape.width * shape.channels) {
            log_error("model: cnn wants %zu x %zu x %zu images, the data set "
                      "has %zu features",
                      shape.height, shape.width, shape.channels, w->train.dim);
            return 0;
        }
        rc =
            w->backend->create_cnn(&shape, spec->batch_size, spec->seed, &w->m);
    } else {
        rc = w->backend->create_mlp(w->train.dim, hidden, 2, w->train.classes,
                                    spec->batch_size, spec->seed, &w->m);
    }
    if (rc != FLPS_OK) {
        log_error("cannot build the model: %s", flps_strerror(rc));
        return 0;
    }
    nt = model_num_tensors(w->m);
    w->tensors = flps_calloc(nt, sizeof(*w->tensors));
    w->global = flps_calloc(nt, sizeof(*w->global));
    if (w->tensors == NULL || w->global == NULL) {
        log_error("out of memory");
        return 0;
    }
    w->nglobal = nt;
    for (size_t i = 0; i < nt; i++) {
        model_tensor *t = model_tensor_at(w->m, i);
        w->tensors[i].name = t->name;
        w->tensors[i].numel = t->numel;
        w->tensors[i].data = t->param;
        if (w->is_fedavg) {
            /* Clients train the model's own parameters; the replica the
             * shards update is the round's global model. */
            w->global[i] = flps_malloc(t->numel * sizeof(float));
            if (w->global[i] == NULL) {
                log_error("out of memory");
                return 0;
            }
            memcpy(w->global[i], t->param, t->numel * sizeof(float));
            w->tensors[i].data = w->global[i];
        }
    }
    return 1;
}

/* --metrics: serve libflps's worker metrics (the client feeds them; the
 * loop adds its loss and evaluations) and say where on stdout. Returns 0
 * on an error (logged). */
static int serve_metrics(const char *endpoint)
{
    char bound[128];
    flps_err rc;

    if (endpoint == NULL)
        return 1;
    rc = flps_metrics_serve(endpoint, bound, sizeof(bound));
    if (rc != FLPS_OK) {
        log_error("cannot serve metrics on %s (%s); fix or drop --metrics",
                  endpoint, flps_strerror(rc));
        return 0;
    }
    printf("metrics on %s\n", bound);
    fflush(stdout);
    return 1;
}

int flw_client_mode(const jobspec *spec)
{
    switch (spec->mode) {
    case JOBSPEC_MODE_ASYNC:
    case JOBSPEC_MODE_SSP:
        /* ssp:S is async with a bound: the shards apply pushes as they
         * come and tell the slowest worker's iteration; the client waits. */
        return FLPS_MODE_ASYNC;
    case JOBSPEC_MODE_FEDAVG:
        /* With a deadline only the clients in time count: each push
         * carries their samples as its weight (fedavg_loop.c). */
        return spec->round_deadline > 0 ? FLPS_MODE_WEIGHTED : FLPS_MODE_SYNC;
    default:
        return FLPS_MODE_SYNC;
    }
}

/* The client's configuration for this job and rank, on the transport
 * tsel chose. */
static void client_config(const flw *w, const transport_select *tsel,
                          flps_client_config *cc)
{
    const jobspec *spec = &w->spec;

    flps_client_config_init(cc);
    cc->job = w->job_id;
    cc->rank = (uint32_t)w->rank;
    cc->workers = spec->workers;
    cc->servers = w->servers;
    cc->nservers = w->nservers;
    cc->tensors = w->tensors;
    cc->ntensors = (uint32_t)model_num_tensors(w->m);
    cc->part_size = spec->part_size;
    cc->async = flw_client_mode(spec);
    cc->compression = w->comp;
    cc->lr = spec->lr;
    cc->momentum = spec->momentum;
    cc->lr_cosine = spec->lr_schedule == JOBSPEC_LR_COSINE;
    cc->iterations = spec->iterations;
    cc->transport = transport_kind_name(tsel->kind);
    /* jobspec allows a warm-up only for ssgd with topk, gtopk, dgc or
     * auto; the client checks again. */
    cc->density_warmup = spec->density_warmup;
    cc->density_warmup_start = spec->density_warmup_start;
    /* The client sets the clock and meters the energy (docs/energy.md). */
    cc->gpu_clock = spec->gpu_clock;
    cc->gpu_clock_slowdown = spec->gpu_clock_slowdown;
    cc->gpu_clock_record = w->clock_record;
    /* Dense pushes (dense jobs, and auto's dense layers) go through a
     * window sized to the link at init: without one, at 100 Mbit/s with a
     * shard beside each worker, the S - 1 connections into each host
     * overflowed its queue (docs/benchmarks.md, "Flow control of dense
     * pushes"). $FLPS_PUSH_WINDOW still overrides it (the library). */
    if (w->spec.compression == CODEC_DENSE || w->is_auto)
        cc->push_window = FLPS_PUSH_WINDOW_AUTO;
    if (w->is_fedavg) {
        /* One synchronous iteration per round, pushing pre-scaled deltas
         * (worker/fedavg.h): lr 1 makes the shards apply the weighted mean;
         * momentum and the schedule are the clients' local business. */
        cc->lr = 1.0;
        cc->momentum = 0;
        cc->lr_cosine = 0;
        cc->iterations = spec->rounds;
    }
}

/* The client's last error, else rc's message. */
static const char *client_error(const flw *w, flps_err rc)
{
    return flps_client_last_error(w->client)[0]
               ? flps_client_last_error(w->client)
               : flps_strerror(rc);
}

/* Join the shards, get the model, and (auto, rank 0) measure the network
 * for the planner. Returns 0 on an error (logged). */
static int connect_client(flw *w, const transport_select *tsel)
{
    flps_client_config cc;
    flps_err rc;

    client_config(w, tsel, &cc);
    rc = flps_client_create_config(&cc, &w->client);
    if (rc != FLPS_OK) {
        log_error("cannot join the parameter servers: %s", flps_strerror(rc));
        return 0;
    }
    if (w->spec.mode == JOBSPEC_MODE_SSP &&
        flps_client_set_staleness(w->client, w->spec.staleness) != FLPS_OK) {
        log_error("cannot set the staleness bound");
        return 0;
    }
    if (flps_client_init(w->client) != FLPS_OK) {
        log_error("cannot get the initial model: %s",
                  flps_client_last_error(w->client));
        return 0;
    }
    if (w->is_auto && w->rank == 0) {
        /* The planner's inputs come from rank 0 (it alone prints the
         * profile). alpha/beta are measured now, while a pull only re-reads
         * the model just pulled. */
        rc = flps_client_measure_network(w->client, &w->alpha, &w->beta);
        if (rc != FLPS_OK) {
            log_error("cannot measure the network: %s", client_error(w, rc));
            return 0;
        }
        log_info("network: alpha %.3g s, beta %.3g s/byte (%.3g GB/s)",
                 w->alpha, w->beta, 1e-9 / w->beta);
        w->tb_sum = flps_calloc(model_num_tensors(w->m), sizeof(double));
        if (w->tb_sum == NULL) {
            log_error("out of memory");
            return 0;
        }
    }
    w->start_iter = flps_client_resume_iteration(w->client);
    return 1;
}

static void print_start(const flw *w)
{
    event ev = {.kind = EVENT_START};

    log_info("rank %ld of %u: %zu training samples, model %s with %zu "
             "parameters, compression %s, starting at iteration %llu",
             w->rank, w->spec.workers, w->nmine,
             jobspec_model_name(w->spec.model), model_num_params(w->m), w->comp,
             (unsigned long long)w->start_iter);
    ev.start.rank = (uint64_t)w->rank;
    ev.start.samples = w->nmine;
    ev.start.params = model_num_params(w->m);
    ev.start.start_iteration = w->start_iter;
    (void)event_write(stdout, &ev);
}

/* The rounds of a fedavg job (the shards' iterations are the rounds). */
static int run_fedavg(flw *w)
{
    fedavg_loop_args fa = {.spec = &w->spec,
                           .rank = (uint32_t)w->rank,
                           .train = &w->train,
                           .test = &w->test,
                           .part = &w->part,
                           .m = w->m,
                           .client = w->client,
                           .global = w->global,
                           .start_round = w->start_iter,
                           .backend = w->backend->name};

    return fedavg_loop_run(&fa) == FLPS_OK ? 0 : 1;
}

static void flw_fini(flw *w)
{
    flps_client_destroy(w->client);
    flps_saps_destroy(w->saps);
    flps_metrics_stop();
    model_destroy(w->m);
    dataset_fini(&w->train);
    dataset_fini(&w->test);
    partition_fini(&w->part);
    for (size_t i = 0; i < w->nglobal; i++)
        flps_free(w->global[i]);
    flps_free(w->global);
    flps_free(w->tensors);
    flps_free(w->tb_sum);
}

int main(int argc, char **argv)
{
    flw_opts o;
    char logname[32];
    int status;
    flw w;

    if (flps_cli_version(argc, argv, "flworker"))
        return 0;
    status = parse_options(argc, argv, &o);
    if (status >= 0)
        return status;
    memset(&w, 0, sizeof(w));
    if (o.server_list != NULL &&
        !split_servers(o.server_list, w.servers, &w.nservers)) {
        usage(stderr);
        return 2;
    }
    snprintf(logname, sizeof(logname), "flworker/%ld", o.rank);
    flps_log_setup(logname, FLPS_LOG_INFO);
    status = load_job(&w, &o);
    if (status != 0)
        return status;
    status = 1;
    if (load_data(&w) && build_model(&w) && serve_metrics(o.metrics_ep) &&
        (w.is_saps ? flw_saps_connect(&w, transport_kind_name(o.tsel.kind))
                   : connect_client(&w, &o.tsel))) {
        print_start(&w);
        status = w.is_saps     ? flw_train_saps(&w)
                 : w.is_fedavg ? run_fedavg(&w)
                               : flw_train(&w);
    }
    flw_fini(&w);
    return status;
}
