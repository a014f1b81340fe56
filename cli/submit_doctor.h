/* flsubmit doctor: what a job needs before it runs, checked from flsched's
 * GET /v1/info (the scheduler, its Redis, and what each agent publishes of
 * its node) and printed one check per line, OK or FAIL with what to do. */
#ifndef FLPS_CLI_SUBMIT_DOCTOR_H
#define FLPS_CLI_SUBMIT_DOCTOR_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"

/* A node's clock may be this far from flsched's (seconds): heartbeats,
 * time limits and log times compare wall clocks across nodes. */
#define SUBMIT_DOCTOR_MAX_SKEW_S 1.0
/* RDMA registers its buffers: a node must let flagent's processes lock at
 * least this much memory (bytes). */
#define SUBMIT_DOCTOR_MIN_MEMLOCK (64ULL << 20)

/* What the job file asks for, when doctor was given one. */
typedef struct submit_doctor_job {
    int given;
    int rdma;      /* transport: rdma */
    int rdma_auto; /* transport: auto: which nodes would run RDMA */
    int synthetic; /* dataset: synthetic (no files needed) */
} submit_doctor_job;

/* The checks on a /v1/info object (see docs/scheduler.md), as text: one
 * "OK    NAME  message" or "FAIL  NAME  message; what to do" line each,
 * then a last line saying how many passed. *failed is the number of
 * failed checks, and *failed_names (when failed_names is not NULL) lists
 * them, ", "-separated ("" when none failed). With json set, *out is
 * instead one JSON object {"ok": bool, "checks": [{"check","ok",
 * "message"}, ...]} and a newline. Every message is whole, however long
 * what the nodes publish. Errors: FLPS_EINVAL (info not an object),
 * FLPS_ENOMEM. Ownership: on FLPS_OK the caller owns *out and
 * *failed_names (flps_free each). */
flps_err submit_doctor_report(const json_t *info, const char *url,
                              const submit_doctor_job *job, int json,
                              char **out, int *failed, char **failed_names);

#endif
