/* flworker's side of compression: auto: follow the per-layer plan the
 * launcher writes (by rename) into a file, at iteration boundaries. */
#ifndef FLPS_WORKER_FLWORKER_PLAN_H
#define FLPS_WORKER_FLWORKER_PLAN_H

#include <stdint.h>
#include <sys/stat.h>

#include "flps.h"
#include "worker/model.h"

typedef struct flw_plan {
    const char *path; /* NULL: no plan to follow */
    int seen;         /* st holds the file last looked at */
    struct stat st;
    long long version; /* of the plan applied; 0 = none yet */
} flw_plan;

/* At the boundary before iteration iter: if the plan file changed, read
 * it and, when it holds a newer plan that fits m, set every layer's codec
 * of client and print the plan event. A missing, broken or stale plan is
 * logged (when there is one) and ignored. Returns 0 only when the client
 * refused a codec (logged); the job cannot go on then. */
int flw_plan_check(flw_plan *pw, flps_client *client, model *m, uint64_t iter);

#endif
