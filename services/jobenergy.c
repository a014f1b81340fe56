/* A job's joules per iteration from its workers' done events, each group
 * of devices read alike counted once. */
#include "services/jobenergy.h"

#include <stdio.h>
#include <string.h>

/* Fold word into have: the first word, "mixed" once another differs. */
static void fold(char *have, size_t len, const char *word)
{
    if (word[0] == '\0' || strlen(word) >= len)
        return;
    if (have[0] == '\0')
        snprintf(have, len, "%s", word);
    else if (strcmp(have, word) != 0)
        snprintf(have, len, "mixed");
}

/* Add v to the group of key (a new one, or the last when all are taken). */
static void group_add(jobenergy_groups *gs, const char *key, double v)
{
    jobenergy_group *g = NULL;

    for (size_t i = 0; i < gs->n && g == NULL; i++)
        if (strcmp(gs->g[i].key, key) == 0)
            g = &gs->g[i];
    if (g == NULL && gs->n < JOBENERGY_GROUPS) {
        g = &gs->g[gs->n++];
        snprintf(g->key, sizeof(g->key), "%s", key);
    }
    if (g == NULL)
        g = &gs->g[JOBENERGY_GROUPS - 1];
    g->sum += v;
    g->n++;
}

static double groups_total(const jobenergy_groups *gs)
{
    double t = 0;

    for (size_t i = 0; i < gs->n; i++)
        t += gs->g[i].sum / gs->g[i].n;
    return t;
}

void jobenergy_add(jobenergy *j, const char *node, const event_done *d)
{
    char key[128], mhz[24];

    if (node == NULL)
        node = "";
    if (EVENT_HAS(d, done, gpu_clock_mhz)) {
        if (d->gpu_clock_mhz > 0)
            snprintf(mhz, sizeof(mhz), "%llu",
                     (unsigned long long)d->gpu_clock_mhz);
        else
            snprintf(mhz, sizeof(mhz), "default");
        fold(j->clock, sizeof(j->clock), mhz);
    }
    if (!EVENT_HAS(d, done, joules_per_iteration))
        return;
    j->workers++;
    if (EVENT_HAS(d, done, gpu_joules_per_iteration)) {
        snprintf(key, sizeof(key), "%.63s/%.60s", node,
                 EVENT_HAS(d, done, energy_gpus) ? d->energy_gpus : "");
        group_add(&j->gpu, key, d->gpu_joules_per_iteration);
    }
    if (EVENT_HAS(d, done, cpu_joules_per_iteration))
        group_add(&j->cpu, node, d->cpu_joules_per_iteration);
    /* Only the words a worker writes: the word goes into JSON as is. */
    if (EVENT_HAS(d, done, energy_method) && d->energy_method != NULL &&
        strspn(d->energy_method, "abcdefghijklmnopqrstuvwxyz-+") ==
            strlen(d->energy_method))
        fold(j->method, sizeof(j->method), d->energy_method);
}

int jobenergy_total(const jobenergy *j, double *total, double *gpu, double *cpu,
                    int *have_gpu, int *have_cpu)
{
    if (j->workers == 0)
        return 0;
    *gpu = groups_total(&j->gpu);
    *cpu = groups_total(&j->cpu);
    *total = *gpu + *cpu;
    if (have_gpu != NULL)
        *have_gpu = j->gpu.n > 0;
    if (have_cpu != NULL)
        *have_cpu = j->cpu.n > 0;
    return 1;
}
