/* flworker's state, shared by its files: flworker.c sets it up from the
 * command line and the job file, flworker_loop.c trains with it (and
 * fedavg_loop.c for mode fedavg). Single-threaded: the training thread
 * owns all of it. */
#ifndef FLPS_WORKER_FLWORKER_H
#define FLPS_WORKER_FLWORKER_H

#include <stddef.h>
#include <stdint.h>

#include "flps.h"
#include "services/jobspec.h"
#include "worker/backend.h"
#include "worker/dataset.h"
#include "worker/flworker_plan.h"
#include "worker/model.h"
#include "worker/partition.h"

#define FLW_MAX_SERVERS 256

typedef struct flw {
    jobspec spec;
    long rank;
    const char *job_id;       /* on the wire: --job-id, else the job's name */
    const char *clock_record; /* --gpu-clock-record, or NULL */
    const char *servers[FLW_MAX_SERVERS];
    uint32_t nservers;
    const worker_backend *backend;
    char comp[64]; /* the job's compression, as text */
    int is_fedavg, is_auto;
    dataset train, test;
    partition part;       /* one list per client */
    uint32_t nclients;    /* fedavg: spec.clients; else one per worker */
    const uint32_t *mine; /* this rank's samples: into part.idx */
    size_t nmine;
    model *m;
    flps_tensor *tensors; /* the client's replica: m's, or global's */
    float **global;       /* fedavg: per tensor, the global model */
    size_t nglobal;
    flps_client *client;
    int is_saps;         /* mode saps: no client, the workers' exchanges */
    const char *peers;   /* saps: --peers, else $FLPS_PEERS (NULL) */
    flps_saps *saps;     /* saps: the exchanges with the other workers */
    flw_plan plan;       /* compression: auto */
    double alpha, beta;  /* auto, rank 0: the network measured */
    double *tb_sum;      /* auto, rank 0: backward times */
    uint64_t start_iter; /* where the shards are */
} flw;

/* The client's aggregation mode (FLPS_MODE_*) for the job's mode: async
 * and ssp:S (async with a bound) are FLPS_MODE_ASYNC, fedavg is
 * FLPS_MODE_WEIGHTED with a round_deadline, ssgd and fedavg otherwise
 * FLPS_MODE_SYNC. The one place a job's mode becomes the client's. */
int flw_client_mode(const jobspec *spec);

/* Run the iterations w->start_iter .. spec.iterations - 1 of an ssgd,
 * async or ssp job on w's model and client, printing the progress, eval,
 * profile and done events (docs/events.md). Returns 0 when every
 * iteration ran and the done event is out, 1 on an error (logged). */
int flw_train(flw *w);

/* Mode saps: join the other workers (w->peers, else $FLPS_PEERS), probe
 * the links and agree on the matrix, through libflps's flps_saps_create
 * with the job's saps keys. Returns 0 on an error (logged). */
int flw_saps_connect(flw *w, const char *transport);

/* Mode saps: spec.iterations local SGD steps on w's model (lr, momentum,
 * lr_schedule as an ssgd job has them), a round of exchanges after every
 * local_steps of them (worker/saps_loop.c), then the consensus; the
 * progress, eval and done events as flw_train prints them, the
 * coordinator's done event with the consensus model's accuracy and the
 * consensus distance. Returns 0 when every round ran and the done event
 * is out, 1 on an error (logged). */
int flw_train_saps(flw *w);

#endif
