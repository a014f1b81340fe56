/* Reports from a job's own pods: POST /v1/jobs/{id}/report, where flpod
 * (the pods' entry program) sends the event lines its worker prints
 * (progress, eval, profile, done), so a pod needs no Redis: flsched
 * stores them as flagent does for the processes it runs. The pod proves
 * it belongs to the job with the job's report token, which only the job's
 * Secret holds (docs/security.md). */
#ifndef FLPS_SCHED_REPORT_H
#define FLPS_SCHED_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"
#include "scheduler/sched_store.h"

/* Hex digits of a report token, without the NUL. */
#define SCHED_REPORT_TOKEN_LEN 64

/* The job's report token: HMAC-SHA256 of "flps-report:ID" keyed by the
 * secret of its credentials (a credentials file's text), in hex. Pure.
 * Errors: FLPS_ECONFIG (credentials that do not parse), FLPS_EINVAL. */
flps_err sched_report_token(const char *credentials, const char *id,
                            char out[SCHED_REPORT_TOKEN_LEN + 1]);

/* The most lines one report may carry. */
#define SCHED_REPORT_LINES_MAX 1000

/* Apply one report for job id: authorization is the request's
 * Authorization header (NULL when absent), body the JSON
 * {"task": "worker-3", "attempt": N, "lines": ["{...}", ...],
 *  "plan_version": V} (V: the compression plan the pod holds, 0 none).
 * The answer is *status (200 stored, 400 a malformed body, 401/403 a
 * missing or wrong token, 404 no such job, 409 the job is not RUNNING at
 * that attempt) with msg, and on 200 *answer (caller owns):
 * {"stored": N} and, when flsched holds a newer plan, "plan_version" and
 * "plan" (the plan as GET .../plan gives it; flpod writes it where the
 * worker follows it). FLPS_OK, or the store's error (Redis failed: the
 * API answers 503). */
flps_err sched_report_apply(sched_store *st, const char *id,
                            const char *authorization, const char *body,
                            size_t len, int *status, char *msg, size_t msglen,
                            json_t **answer);

#endif
