/* A job's energy from its workers' done events, for the summaries of flrun
 * and flsched. Each worker meters the GPUs it uses and its node's CPU
 * packages. Packages are node-wide (every worker on a node reads the same
 * ones), and workers that share GPUs (two on a node without
 * CUDA_VISIBLE_DEVICES each meter every GPU there) read the same GPUs: a
 * sum over the workers would count those once per worker. So the joules
 * per iteration are grouped: the packages by node, the GPUs by node and
 * the GPUs named (energy_gpus); each group counts once, as the mean of
 * its workers, and the groups are summed. The method and the GPU clock
 * the workers report are folded as the summaries fold a setting: the one
 * word, or "mixed". No I/O. */
#ifndef FLPS_SERVICES_JOBENERGY_H
#define FLPS_SERVICES_JOBENERGY_H

#include <stddef.h>
#include <stdint.h>

#include "services/event.h"

#define JOBENERGY_GROUPS 64 /* groups told apart; more share the last one */

/* Devices read alike by the workers in it. */
typedef struct jobenergy_group {
    char key[128]; /* the node, and for GPUs the GPUs named */
    double sum;    /* its workers' joules per iteration */
    uint32_t n;    /* its workers */
} jobenergy_group;

typedef struct jobenergy_groups {
    jobenergy_group g[JOBENERGY_GROUPS];
    size_t n;
} jobenergy_groups;

/* Caller's memory, zeroed (or {0}) before the first add. */
typedef struct jobenergy {
    uint32_t workers; /* done events with joules per iteration */
    jobenergy_groups gpu, cpu;
    char method[32]; /* energy_method folded; "" when none said one */
    char clock[16];  /* gpu_clock_mhz folded: "1830", "default", "mixed" */
} jobenergy;

/* Add one worker's done event; node names its node ("" for flrun, whose
 * workers share one). A worker without energy fields adds nothing. */
void jobenergy_add(jobenergy *j, const char *node, const event_done *d);

/* The job's joules per iteration into *total, and its GPUs' (*gpu) and CPU
 * packages' (*cpu) parts; have_gpu / have_cpu (may be NULL) whether any
 * worker metered a device of the kind. 0 when no worker reported energy
 * (nothing written). */
int jobenergy_total(const jobenergy *j, double *total, double *gpu, double *cpu,
                    int *have_gpu, int *have_cpu);

#endif
