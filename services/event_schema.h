/* The schema of the JSON event lines a worker prints on stdout for its
 * launcher: every event, its fields in the order they are written, their
 * types and which are required. The one place they are stated: the typed
 * structs, the writer, the reader, the docs table (docs/events.md) and the
 * check of the Python writers are all made from these lists. */
#ifndef FLPS_SERVICES_EVENT_SCHEMA_H
#define FLPS_SERVICES_EVENT_SCHEMA_H

/* A field is F(event, field, TYPE, NEED, what it says), with
 *   TYPE  U64   a whole number >= 0, written as such (uint64_t);
 *         F3, F4, F5, F6  a number written with 3, 4, 5 or 6 decimals
 *               (double; any JSON number is read);
 *         G9    a number written with 9 significant digits (double);
 *         BOOL  true or false (int);
 *         STR   a string (const char *);
 *         U64S  an array of whole numbers >= 0;
 *         DONE_LAYERS, PROFILE_LAYERS  an array of objects whose fields
 *               are EVENT_FIELDS_done_layer / EVENT_FIELDS_profile_layer;
 *   NEED  REQ   every writer writes it; OPT  present only where it applies.
 * New fields go where they belong in the order; a field is never renamed,
 * retyped or made required once a release has written it (docs/events.md,
 * "Compatibility"). */

#define EVENT_FIELDS_start(F, e)                                               \
    F(e, rank, U64, REQ, "the worker's rank")                                  \
    F(e, samples, U64, REQ, "training samples this rank trains on")            \
    F(e, params, U64, REQ, "parameters of the model")                          \
    F(e, start_iteration, U64, REQ,                                            \
      "the first iteration (round) it runs: 0, or where the shards are "       \
      "when it rejoins")

#define EVENT_FIELDS_progress(F, e)                                            \
    F(e, iter, U64, REQ, "iterations (rounds) done")                           \
    F(e, iterations, U64, REQ, "iterations (rounds) the job runs")             \
    F(e, clients, U64, OPT, "fedavg: clients this process trained this round") \
    F(e, sampled, U64, OPT, "fedavg: clients sampled this round, in all")      \
    F(e, round_clients, U64S, OPT,                                             \
      "fedavg: the ids of the clients sampled this round, ascending")          \
    F(e, late, U64, OPT,                                                       \
      "fedavg: this process's clients left out of this round as late")         \
    F(e, round_bytes, U64, OPT, "fedavg: bytes this rank sent this round")     \
    F(e, loss, F5, REQ,                                                        \
      "mean training loss since the last progress event (fedavg: of the "      \
      "round's local steps)")                                                  \
    F(e, bytes_sent, U64, REQ, "bytes this rank's pushes sent so far")         \
    F(e, dense_bytes, U64, REQ, "what the same pushes would have sent dense")  \
    F(e, elements_sent, U64, OPT,                                              \
      "flworker: index/value pairs (or dense values) its pushes sent so far")  \
    F(e, accuracy, F4, OPT, "training accuracy (flps.report's accuracy=)")     \
    F(e, elapsed, F3, REQ, "seconds since the training loop began")

#define EVENT_FIELDS_eval(F, e)                                                \
    F(e, iter, U64, REQ, "iterations (rounds) done")                           \
    F(e, test_accuracy, F4, REQ, "accuracy on the test set")                   \
    F(e, test_loss, F4, OPT, "mean loss on the test set")                      \
    F(e, test_miou, F4, OPT,                                                   \
      "segmentation: mean intersection over union on the test set")            \
    F(e, elapsed_s, F3, OPT, "seconds since the training loop began")

#define EVENT_FIELDS_done_layer(F, e)                                          \
    F(e, name, STR, REQ, "the tensor's name")                                  \
    F(e, bytes_sent, U64, REQ, "bytes its pushes sent")                        \
    F(e, elements_sent, U64, REQ, "elements its pushes sent")                  \
    F(e, wait_seconds, F6, REQ, "seconds the forward waited for its updates")

#define EVENT_FIELDS_done(F, e)                                                \
    F(e, rank, U64, REQ, "the worker's rank")                                  \
    F(e, iterations, U64, REQ, "iterations (fedavg: rounds) the job ran")      \
    F(e, rounds, U64, OPT, "fedavg, saps: rounds the job ran")                 \
    F(e, bytes_sent, U64, REQ, "bytes this rank's pushes sent")                \
    F(e, bytes_received, U64, REQ, "bytes this rank received")                 \
    F(e, dense_bytes, U64, REQ, "what the same pushes would have sent dense")  \
    F(e, resends, U64, REQ, "requests resent after a timeout")                 \
    F(e, compression, STR, OPT,                                                \
      "the codec this rank's client ran, as a job file writes it")             \
    F(e, mode, STR, OPT,                                                       \
      "how this rank's client ran: ssgd, async, ssp:S, fedavg or weighted")    \
    F(e, optimizer, STR, OPT,                                                  \
      "flps.torch: the wrapped optimizer's class (Adam, SGD, ...)")            \
    F(e, late_clients, U64, OPT,                                               \
      "fedavg: client rounds left out as late (past round_deadline, or a "     \
      "client process that died)")                                             \
    F(e, client_rounds, U64, OPT,                                              \
      "fedavg: client rounds this process trained (late ones included)")       \
    F(e, server_optimizer, STR, OPT,                                           \
      "fedavg: the shards' step on the averaged delta (sgd, momentum:B, "      \
      "adam)")                                                                 \
    F(e, prox_mu, F6, OPT, "fedavg: FedProx's mu the clients trained with")    \
    F(e, test_accuracy, F4, OPT,                                               \
      "rank 0 (saps: the coordinator, its own model): the final test "         \
      "accuracy")                                                              \
    F(e, test_loss, F4, OPT, "rank 0: the final test loss")                    \
    F(e, test_accuracy_last5, F4, OPT,                                         \
      "fedavg, rank 0: mean test accuracy of the last five rounds")            \
    F(e, test_miou, F4, OPT, "rank 0: the final mean IoU (segmentation)")      \
    F(e, test_miou_last5, F4, OPT,                                             \
      "fedavg, rank 0: mean IoU of the last five rounds (segmentation)")       \
    F(e, warmup_bytes_sent, U64, OPT,                                          \
      "density_warmup: bytes sent by the warm-up's end")                       \
    F(e, staleness, U64, OPT, "ssp: the staleness bound")                      \
    F(e, stale_wait_seconds, F3, OPT,                                          \
      "ssp: seconds waited for the slowest worker")                            \
    F(e, backend, STR, OPT, "the compute backend (cpu, cuda)")                 \
    F(e, overlap, BOOL, OPT, "whether pushes overlapped backprop")             \
    F(e, compute_seconds, F6, OPT,                                             \
      "seconds computing (steps less their pushes and waits)")                 \
    F(e, push_seconds, F6, OPT, "seconds inside pushes (compression, queue)")  \
    F(e, comm_wait_seconds, F6, OPT, "seconds blocked on the network")         \
    F(e, seconds_per_iteration, F6, OPT, "the loop's seconds per iteration")   \
    F(e, joules_per_iteration, F6, OPT,                                        \
      "energy per iteration of the devices this rank metered (the two "        \
      "below), where the hardware reports it (docs/energy.md)")                \
    F(e, gpu_joules_per_iteration, F6, OPT, "that of its GPUs (NVML)")         \
    F(e, cpu_joules_per_iteration, F6, OPT,                                    \
      "of its node's CPU packages (RAPL): node-wide, alike for every rank")    \
    F(e, energy_iterations, U64, OPT, "iterations metered (over windows)")     \
    F(e, energy_gpus, STR, OPT,                                                \
      "the GPUs metered, NVML indices (\"0,1\"): ranks on one node that "      \
      "name the same GPUs count them once in a job's total")                   \
    F(e, gpu_clock_mhz, U64, OPT,                                              \
      "the GPU clock gpu_clock set (auto: its choice); 0 where the clocks "    \
      "were left alone or refused")                                            \
    F(e, energy_method, STR, OPT, "counter, power-integral or both")           \
    F(e, model_hash, STR, OPT,                                                 \
      "FNV-1a of the final replica, 16 hex digits: equal replicas, equal "     \
      "hashes")                                                                \
    F(e, layers, DONE_LAYERS, OPT, "per tensor, what its pushes sent")         \
    F(e, peer_selection, STR, OPT,                                             \
      "saps: how peers were chosen (adaptive, random, ring)")                  \
    F(e, bandwidth_threshold, G9, OPT,                                         \
      "saps: the fast links' threshold in force at the end, bytes/s")          \
    F(e, exchanges, U64, OPT, "saps: rounds whose peer's values came")         \
    F(e, skipped_exchanges, U64, OPT,                                          \
      "saps: rounds whose peer did not answer in time")                        \
    F(e, idle_rounds, U64, OPT, "saps: rounds without a peer")                 \
    F(e, slow_exchanges, U64, OPT,                                             \
      "saps: exchanges over links at or below the threshold")                  \
    F(e, exchange_bytes, U64, OPT, "saps: of bytes_sent, the exchanges'")      \
    F(e, probe_bytes, U64, OPT, "saps: of bytes_sent, the bandwidth probes'")  \
    F(e, matching_digest, STR, OPT,                                            \
      "saps: every round's matching hashed in a chain, 16 hex digits: equal "  \
      "on workers that computed the same matchings")                           \
    F(e, dead_workers, U64S, OPT,                                              \
      "saps: the ranks this worker knows dead at the end")                     \
    F(e, consensus_workers, U64, OPT,                                          \
      "saps, the coordinator (the lowest rank alive): models averaged")        \
    F(e, consensus_accuracy, F4, OPT,                                          \
      "saps, the coordinator: test accuracy of the workers' average model")    \
    F(e, consensus_distance, G9, OPT,                                          \
      "saps, the coordinator: mean L2 distance of the models to their "        \
      "average")                                                               \
    F(e, bandwidth, U64S, OPT,                                                 \
      "saps, the coordinator of a job of at most 64 workers: the measured "    \
      "bandwidth matrix in force at the end, bytes/s, row by row (workers x "  \
      "workers; 0 on the diagonal)")                                           \
    F(e, seconds, F3, REQ, "seconds since the training loop began")

#define EVENT_FIELDS_plan(F, e)                                                \
    F(e, version, U64, REQ, "the plan's version, 1 or more")                   \
    F(e, iteration, U64, REQ, "the iteration it applies from")

#define EVENT_FIELDS_profile_layer(F, e)                                       \
    F(e, name, STR, REQ, "the tensor's name")                                  \
    F(e, numel, U64, REQ, "its elements")                                      \
    F(e, t_backward, G9, REQ, "its mean backward time, seconds")

#define EVENT_FIELDS_profile(F, e)                                             \
    F(e, iteration, U64, REQ, "the iteration the profile ends at")             \
    F(e, workers, U64, REQ, "the job's workers")                               \
    F(e, alpha, G9, REQ, "measured latency, seconds per message")              \
    F(e, beta, G9, REQ, "measured inverse bandwidth, seconds per byte")        \
    F(e, layers, PROFILE_LAYERS, REQ, "per tensor, in layout order")

#define EVENT_FIELDS_partition(F, e)                                           \
    F(e, clients, U64, REQ, "clients the training set is split over")          \
    F(e, skew, F6, REQ, "the split's label skew (0: iid)")                     \
    F(e, samples, U64S, REQ, "each client's training samples")

/* X(KIND, name, written by, read by, what it says): the events, in the
 * order a worker prints them first. */
#define EVENT_KINDS(X)                                                         \
    X(START, start, "flworker, every rank, once it has the model",             \
      "flagent (the job's log stream); tests wait for it",                     \
      "the worker is training")                                                \
    X(PARTITION, partition, "flworker rank 0, before training",                \
      "flrun (summary: partition_skew, samples_per_client)",                   \
      "how the training set was split")                                        \
    X(PROGRESS, progress,                                                      \
      "flworker, every rank, each 1% of the iterations (fedavg: rank 0, "      \
      "each round); flps.report, rank 0",                                      \
      "flrun (rank 0's line on screen, every rank's bytes); flagent "          \
      "(rank 0's into the job hash's p_* fields, every rank's bytes into "     \
      "its task hash)",                                                        \
      "how training goes")                                                     \
    X(EVAL, eval,                                                              \
      "flworker rank 0, each eval_every and at the end (fedavg: also the "     \
      "last five rounds); flps.report, rank 0",                                \
      "flrun (screen; the last is the summary's test_accuracy); flagent "      \
      "(rank 0's p_test_accuracy)",                                            \
      "an evaluation of the model on the test set")                            \
    X(PROFILE, profile,                                                        \
      "flworker rank 0 of a compression: auto job, once; flps.auto, rank 0",   \
      "flrun and flagent (rank 0's, whole, to the LAGS planner: "              \
      "services/plan.h)",                                                      \
      "per-layer backward times and the network, for the planner")             \
    X(PLAN, plan, "flworker and flps.auto, every rank, on applying a plan",    \
      "nobody (the job's log)", "a new per-layer plan is in force")            \
    X(DONE, done,                                                              \
      "flworker, every rank, at the end; flps.report, every rank, at exit "    \
      "(also without a report, once a launched program made a client)",        \
      "flrun (summary: the bytes, and the compression and mode held against "  \
      "the job file); flagent (the whole line into the task hash's done, "     \
      "which flsched's summary reads)",                                        \
      "what this rank did")

#endif
