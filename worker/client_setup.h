/* Setting a client up, from a configuration to a registered client: the
 * checks made before anything is allocated, the job's codec and each
 * layer's and part's coder, the part map and the per-part state, the
 * job's credentials, and the registration with every shard. Called only by
 * the constructor (client.c), in the order declared here; each step's
 * error leaves what it made for flps_client_destroy to free.
 * Not thread-safe: the constructing thread only. */
#ifndef FLPS_WORKER_CLIENT_SETUP_H
#define FLPS_WORKER_CLIENT_SETUP_H

#include "worker/client_internal.h"

/* Whether cfg (a whole configuration, every field read) can make a client:
 * what create checks before it allocates anything. A density warm-up that
 * cannot apply logs why. */
int client_setup_is_valid(const flps_client_config *cfg);

/* The server optimizer text ("sgd" or NULL, "momentum:B" with 0 <= B < 1,
 * "adam") as a proto_server_opt and beta (0 but for momentum): 1, or 0
 * (nothing written) for another text. */
int client_setup_server_opt(const char *text, uint8_t *opt, double *beta);

/* The job's codec from the compression text (NULL: dense): c's spec,
 * spec_text, sparse, is_auto, use_ef, density and agg.
 * Errors: FLPS_ECONFIG (sticky, naming the codecs) for a text that is not
 * a codec. */
flps_err client_setup_codec(flps_client *c, const char *compression);

/* The model's layout from cfg's tensors, under c's codec and part size:
 * the tensors and their coders, the part map, the parts and their coders,
 * the per-push scratch arrays and the shard requests.
 * Errors: FLPS_EINVAL (sticky, naming the tensor) for a tensor without a
 * name of 1..PROTO_NAME_MAX chars, a size in 1..2^32-1 or data;
 * FLPS_ENOMEM; partmap_build_pieces's. */
flps_err client_setup_layout(flps_client *c, const flps_client_config *cfg);

/* The job's credentials from $FLPS_CREDENTIALS_FILE, when it names a
 * file (which must then load): the secret for every request, and for a
 * ZeroMQ transport t (before it connects) the handshake's credentials
 * (CURVE keys, else the secret for PLAIN). Errors
 * (logged): creds_load_env's, FLPS_ESYS without randomness for the client
 * id, transport_set_credentials'. */
flps_err client_setup_credentials(flps_client *c, transport *t);

/* Register the layout and the job's settings with every shard and block
 * until each accepted them. Errors (sticky): FLPS_ENOMEM, the transport's,
 * a shard's refusal, FLPS_ETIMEDOUT. */
flps_err client_setup_register(flps_client *c);

#endif
