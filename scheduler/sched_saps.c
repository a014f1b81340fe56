/* A saps job under flsched: its lost workers and its summary fields. */
#include "scheduler/sched_saps.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "services/jobspec.h"

int sched_saps_is_saps(const sched_job *job)
{
    jobspec spec;

    return job->spec != NULL &&
           jobspec_parse(job->spec, strlen(job->spec), &spec, NULL, 0) ==
               FLPS_OK &&
           spec.mode == JOBSPEC_MODE_SAPS;
}

int sched_saps_is_lost(const sched_task *t)
{
    static const char not_started[] = "flagent could not start it";

    return strcmp(t->role, "worker") == 0 && strcmp(t->state, "EXITED") == 0 &&
           t->exited && (t->exit_code != 0 || t->signal != 0) &&
           strncmp(t->error, not_started, sizeof(not_started) - 1) != 0;
}

uint32_t sched_saps_lost(const sched_job *job)
{
    uint32_t lost = 0;

    for (size_t i = 0; i < job->ntasks; i++)
        lost += sched_saps_is_lost(&job->tasks[i]) != 0;
    if (lost == 0 || job->workers < lost + 2 || !sched_saps_is_saps(job))
        return 0;
    return lost;
}

/* The coordinator's matrix (bytes/s, row by row) as rows of MB/s with
 * one decimal: what flsubmit status prints. */
static json_t *matrix_mbps(const uint64_t *bw, uint32_t workers)
{
    json_t *rows = json_array();

    for (uint32_t i = 0; rows != NULL && i < workers; i++) {
        json_t *row = json_array();

        for (uint32_t j = 0; row != NULL && j < workers; j++)
            json_array_append_new(
                row,
                json_real(round((double)bw[(size_t)i * workers + j] / 1e5) /
                          10));
        json_array_append_new(rows, row);
    }
    return rows;
}

/* The ranks lost (their tasks, and those a done event knows dead), each
 * once, ascending. */
static json_t *lost_ranks(const sapsfold *f, const sched_job *job)
{
    json_t *out = json_array();

    for (uint32_t w = 0; out != NULL && w < job->workers; w++) {
        int lost = f->dead != NULL && f->dead[w];

        for (size_t k = 0; k < job->ntasks && !lost; k++)
            lost =
                job->tasks[k].index == w && sched_saps_is_lost(&job->tasks[k]);
        if (lost)
            json_array_append_new(out, json_integer(w));
    }
    return out;
}

/* An unsigned count as a JSON integer. */
static void set_count(json_t *o, const char *key, uint64_t v)
{
    json_object_set_new(o, key, json_integer((json_int_t)v));
}

void sched_saps_summary(const sapsfold *f, const sched_job *job, json_t *o)
{
    uint64_t rounds = 0;
    jobspec spec;

    if (job->spec != NULL &&
        jobspec_parse(job->spec, strlen(job->spec), &spec, NULL, 0) ==
            FLPS_OK &&
        spec.local_steps > 0)
        rounds = (spec.iterations + spec.local_steps - 1) / spec.local_steps;
    set_count(o, "rounds", rounds);
    if (f->have_threshold)
        json_object_set_new(o, "bandwidth_threshold", json_real(f->threshold));
    set_count(o, "exchanges", f->exchanges);
    set_count(o, "skipped_exchanges", f->skipped);
    set_count(o, "idle_rounds", f->idle);
    set_count(o, "slow_exchanges", f->slow);
    json_object_set_new(o, "slow_exchange_share",
                        json_real(f->exchanges ? round(1e4 * (double)f->slow /
                                                       (double)f->exchanges) /
                                                     1e4
                                               : 0.0));
    set_count(o, "exchange_bytes", f->exchange_bytes);
    set_count(o, "probe_bytes", f->probe_bytes);
    if (f->have_consensus_accuracy)
        json_object_set_new(o, "consensus_accuracy", json_real(f->accuracy));
    if (f->have_consensus) {
        json_object_set_new(o, "consensus_distance", json_real(f->distance));
        set_count(o, "consensus_workers", f->averaged);
    }
    json_object_set_new(o, "workers_lost", lost_ranks(f, job));
    json_object_set_new(o, "matchings_agree",
                        json_boolean(f->said > 0 && !f->digest_differs));
    if (f->bandwidth != NULL)
        json_object_set_new(o, "bandwidth_mbps",
                            matrix_mbps(f->bandwidth, job->workers));
}
