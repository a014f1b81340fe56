/* flrun's state, shared by its files: flrun.c starts and supervises the
 * job's processes; flrun_report.c turns the workers' event lines
 * (docs/events.md) into the progress display and the summary line.
 * Single-threaded: the main loop owns all of it. */
#ifndef FLPS_CLI_FLRUN_H
#define FLPS_CLI_FLRUN_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "services/jobenergy.h"
#include "services/jobspec.h"
#include "services/procs.h"
#include "services/sapsfold.h"

typedef struct run {
    jobspec spec;
    proc *procs; /* servers first, then workers */
    size_t nprocs, nservers;
    char endpoints[256][128];
    int tty, quiet, verbose;
    /* Each process's log, written by flrun from its piped stdout and
     * stderr (NULL for a shard that writes its own: not --verbose). */
    FILE **logs;
    /* Each worker's event lines, which its log leaves out: NAME.events
     * beside NAME.log, opened at the first (NULL before). */
    FILE **events;
    double t0;
    /* From the workers' events. */
    uint32_t done;
    uint64_t bytes_sent, bytes_received, dense_bytes;
    uint64_t late_clients, client_rounds; /* fedavg with round_deadline */
    uint64_t warmup_bytes_sent; /* through the density warm-up's end */
    double test_accuracy, test_loss;
    int have_accuracy;
    uint64_t last_iter;
    double last_loss;
    uint64_t last_sent, last_dense; /* summed over the workers */
    uint64_t (*rank_bytes)[2];      /* each worker's last sent, dense */
    double last_accuracy; /* training accuracy, when the worker gives it */
    int have_last_accuracy;
    int need_newline;
    /* Iterations, or rounds for fedavg (the shards close one synchronous
     * iteration a round): what progress counts to and the summary says. */
    uint64_t total;
    /* Rank 0's report of the data split: each client's samples (owned;
     * have_samples: it came). */
    uint64_t *samples;
    size_t nsamples;
    int have_samples;
    double skew;
    /* fedavg: rank 0's mean of the last five rounds' evaluations. */
    double acc_last5;
    int have_last5;
    /* Segmentation: rank 0's last mean IoU and fedavg's last five's mean;
     * have_late: a done event counted late clients. */
    double miou, miou_last5;
    int have_miou, have_miou_last5, have_late;
    /* compression: auto: the plan file the workers watch (empty
     * otherwise) and the version written to it (0 = none yet). */
    char plan_path[PATH_MAX + 16];
    uint64_t plan_version;
    uint32_t server_restarts; /* shards restarted from their checkpoints */
    /* What the shards and workers run: transport: rdma, or auto decided
     * on this machine ("zmq" or "rdma"). */
    const char *transport;
    const char *data_plane; /* what the credentials protect, for the summary */
    /* flworker's time split, summed over the workers that report it, and
     * the bytes each layer's pushes sent, summed over all workers
     * (layer_names owned, from the first report). */
    uint32_t timed;
    double compute_s, push_s, comm_wait_s, s_per_iter;
    char **layer_names;
    uint64_t *layer_bytes;
    size_t nlayers;
    /* The workers' hashes of their replicas at the end: the first one
     * reported, and whether every other was the same. */
    char model_hash[24];
    int hash_differs;
    /* The compute backend the workers' done events name (flworker's;
     * empty when none does, "mixed" when they differ). */
    char backend[16];
    /* The workers' energy per iteration and GPU clock (one node: the CPU
     * packages count once). */
    jobenergy energy;
    /* What the workers' done events say they ran, the same way (empty
     * when none says; "mixed" when they differ), and how many said each:
     * the summary holds them against the job file. */
    char ran_compression[64], ran_mode[32], ran_optimizer[32];
    uint32_t said_compression, said_mode;
    /* Per worker: 1 once its done event came (owned; NULL before the
     * first). */
    unsigned char *rank_done;
    int have_test_loss; /* the last evaluation had a test loss */
    /* Mode saps: the workers' endpoints (owned; "" otherwise), the
     * workers that died while the others went on (per worker, owned), and
     * what the done events said. */
    char *peers;
    unsigned char *lost;
    uint32_t nlost;
    sapsfold saps;
} run;

/* One line worker p printed on stdout (arg is the run): an event updates
 * the run, and rank 0's progress and evaluations show on stderr; rank 0's
 * profile of an auto job is planned at once. Returns 1 for an event, 0
 * for any other line (the caller shows and logs those). */
int flrun_on_worker_line(void *arg, proc *p, const char *line);

/* End a progress line drawn in place on a terminal, before other output. */
void flrun_end_progress_line(run *r);

/* After every worker exited 0: the one-line report on stderr (unless
 * quiet), what was not reported and any setting the workers ran other
 * than the job file says (loudly, always), and the JSON summary as the
 * last line of stdout. */
void flrun_print_summary(const run *r, double wall);

/* Free what the events left in r (not r->procs); r is done with. */
void flrun_report_fini(run *r);

#endif
