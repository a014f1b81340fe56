/* GET /v1/info: what `flsubmit doctor` checks, in one answer: flsched's
 * version, its Redis (reachable? version, clock), and each node with
 * what its agent publishes of it (flps:node:{name}:facts). */
#ifndef FLPS_SCHED_INFO_H
#define FLPS_SCHED_INFO_H

#include <jansson.h>

#include "scheduler/sched_store.h"
#include "services/httpd.h"

/* The /v1/info object (docs/scheduler.md). A Redis that does not answer
 * is part of the answer ("redis": {"ok": false, "error": ...}, no
 * "nodes"), not an error: the doctor must be able to say so. tls: the
 * certificate the API serves ("tls": its names and dates), NULL for plain
 * HTTP (no "tls"). Blocks on Redis. NULL only when out of memory.
 * Ownership: caller owns the result (json_decref). */
json_t *sched_info_json(sched_store *st, const httpd_cert_info *tls);

#endif
