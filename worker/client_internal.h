/* The client library's internal entry points: what flworker and the tests
 * may call beyond include/flps.h. Nothing here is exported from libflps.so
 * (no FLPS_API): a training job sees only the public header. */
#ifndef FLPS_WORKER_CLIENT_INTERNAL_H
#define FLPS_WORKER_CLIENT_INTERNAL_H

#include "flps.h"
#include "proto/transport.h"

/* flps_client_create over a transport the caller made (a fake one in the
 * unit tests): connects t to cfg->servers in order, so shard i is peer i,
 * then registers as flps_client_create does and blocks the same way.
 * Errors: those of flps_client_create.
 * Ownership: takes ownership of t on FLPS_OK (flps_client_destroy destroys
 * it); on error the caller still owns t and destroys it. Caller owns *out
 * on FLPS_OK. */
flps_err flps_client_create_on(const flps_client_config *cfg, transport *t,
                               flps_client **out);

/* flps_client_create_on with a density warm-up, as
 * flps_client_create_warmup gives one. Errors and ownership: those of
 * flps_client_create_on. */
flps_err flps_client_create_on_warmup(const flps_client_config *cfg,
                                      transport *t, uint64_t warmup_iterations,
                                      double start_density, flps_client **out);

#endif
