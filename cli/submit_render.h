/* flsubmit's human output: pure functions from the scheduler's JSON (job,
 * node and plan objects, see docs/scheduler.md) to text. No I/O, no clock:
 * the caller passes "now", so tests compare exact strings. */
#ifndef FLPS_CLI_SUBMIT_RENDER_H
#define FLPS_CLI_SUBMIT_RENDER_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"

/* Width of the progress bar between the brackets. */
#define SUBMIT_RENDER_BAR_WIDTH 20

/* Bytes in SI units as flrun prints them: "999 B", "5.5 MB", "117.8 MB".
 * A negative or non-finite value gives "-". Always NUL-terminates buf
 * (truncating when len is too small); len >= 16 is always enough. */
void submit_render_bytes(double bytes, char *buf, size_t len);

/* Bytes in IEC units for node memory, ".0" dropped: "512 MiB", "1.5 GiB",
 * "16 GiB". Same conventions as submit_render_bytes. */
void submit_render_bytes_iec(double bytes, char *buf, size_t len);

/* A duration rounded to whole seconds: "0s", "59s", "2m05s", "1h02m",
 * "3d04h". Negative or non-finite gives "-". len >= 16 is always enough. */
void submit_render_duration(double seconds, char *buf, size_t len);

/* The fraction of the job done, in [0, 1]: progress.iteration / iterations
 * (summary.iterations counts once the job has a summary). 0 when either is
 * missing. */
double submit_render_fraction(const json_t *job);

/* Is state one of the final states SUCCEEDED, FAILED, CANCELLED? NULL is
 * not final. */
int submit_render_state_is_final(const char *state);

/* One progress line, no newline, no carriage return:
 *   "RUNNING    [##########..........]  50.0%  iter 750/1500  loss 0.4100
 *    acc 84.00%  sent 5.5 MB (2.12% of dense)  ETA 8s"
 * (one line; wrapped here). A missing field shows as "-"; "restarts R/M"
 * is appended once the job has restarted. width > 0 is the terminal's
 * width: a line that would not fit in width - 1 columns is rendered
 * compact (no state column, a 10-character bar, single spaces, the ETA
 * before the bytes: "[#####.....]  50.0% 750/1500 loss 0.4100 acc 84.00%
 * ETA 8s sent 5.5 MB (2.12%)")
 * and cut if still too wide, so it never wraps; 0 = no limit.
 * Errors: FLPS_EINVAL if job is not an object, FLPS_ENOMEM.
 * Ownership: on FLPS_OK the caller owns *out (free with flps_free). */
flps_err submit_render_progress(const json_t *job, int width, char **out);

/* The line `watch` prints when a job changes state, no newline: the state
 * in the progress line's first column, then what it means:
 *   "QUEUED     waiting for 4 workers and 2 servers to be placed"
 *   "QUEUED     restart 1/3: worker-2 on n1 exited with status 1"
 *   "RUNNING    attempt 0 on n1, n2"
 * Final states give the title line of submit_render_summary. Errors and
 * ownership as submit_render_progress. */
flps_err submit_render_state_line(const json_t *job, char **out);

/* The final summary of a job, several lines each ending in '\n': a title
 * ("Job j42 (name) SUCCEEDED"; a FAILED job's reason after ": "), then the
 * summary fields, or the last progress and run time when there is no
 * summary. Errors and ownership as submit_render_progress. */
flps_err submit_render_summary(const json_t *job, char **out);

/* The `list` table: ID NAME STATE PROGRESS ACCURACY RESTARTS AGE, one row
 * per job object of jobs (an array), AGE measured from now (Unix seconds).
 * An empty array gives "No jobs.\n". Errors: FLPS_EINVAL if jobs is not an
 * array, FLPS_ENOMEM. Ownership as submit_render_progress. */
flps_err submit_render_jobs(const json_t *jobs, double now, char **out);

/* The `list -o wide` table: submit_render_jobs's columns, then WORKERS
 * SERVERS PRIORITY TRANSPORT (what it ran, else what it asked for) SENT
 * (bytes and their share of dense) NODES (the distinct nodes of its
 * tasks, comma-separated). Errors and ownership as submit_render_jobs. */
flps_err submit_render_jobs_wide(const json_t *jobs, double now, char **out);

/* The `status` view of one job: "Key:  value" lines, the progress, the
 * summary when present, and a table of its tasks. Errors and ownership as
 * submit_render_progress. */
flps_err submit_render_status(const json_t *job, char **out);

/* The `status -o wide` view: submit_render_status's, with Transport:,
 * Resources: (per worker and per server) and Time limit: lines after
 * Tasks:, and an EXIT column (exit code, "signal N" or "-") in the task
 * table. Errors and ownership as submit_render_status. */
flps_err submit_render_status_wide(const json_t *job, char **out);

/* The `nodes` table: NAME ADDRESS STATE CPUS MEMORY GPUS HEARTBEAT, the
 * resource columns as used/total, HEARTBEAT as the time since
 * last_heartbeat at now. An empty array gives "No nodes registered.\n".
 * Errors: FLPS_EINVAL if nodes is not an array, FLPS_ENOMEM. */
flps_err submit_render_nodes(const json_t *nodes, double now, char **out);

/* The `nodes -o wide` table: submit_render_nodes's columns, then
 * FREE-CPUS FREE-MEMORY FREE-GPUS (total - used) and LAST-HEARTBEAT (its
 * UTC time). Errors and ownership as submit_render_nodes. */
flps_err submit_render_nodes_wide(const json_t *nodes, double now, char **out);

/* The `plan` view: a title with the version and predicted iteration time
 * for job id (borrowed), then LAYER NUMEL CODEC DENSITY rows. Errors:
 * FLPS_EINVAL if plan is not an object, FLPS_ENOMEM. */
flps_err submit_render_plan(const json_t *plan, const char *id, char **out);

/* One log line object {"id","task","line"} as "[task] line\n". Errors:
 * FLPS_EINVAL if it is not an object, FLPS_ENOMEM. */
flps_err submit_render_log_line(const json_t *line, char **out);

/* The human message of an error body {"error": "...", "line", "field"}:
 * the error text, plus " (line N, field F)" when those are given and the
 * text does not already start with "line ". Errors: FLPS_EPROTO when body
 * is not a JSON object with a string "error", FLPS_ENOMEM. Ownership as
 * submit_render_progress. */
flps_err submit_render_error_body(const char *body, size_t len, char **out);

#endif
