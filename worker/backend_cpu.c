/* The CPU backend: the OpenBLAS models of model.c and model_cnn.c, which
 * run wherever flps builds. */
#include "worker/backend.h"

static flps_err cpu_available(char *why, size_t len)
{
    /* OpenBLAS is linked into every build: nothing can be missing. */
    if (why != NULL && len > 0)
        why[0] = '\0';
    return FLPS_OK;
}

/* The models set OpenBLAS to one thread (several workers share a node's
 * cores), which the description says. */
const worker_backend worker_backend_cpu = {
    .name = "cpu",
    .description = "OpenBLAS, 1 thread",
    .available = cpu_available,
    .create_mlp = model_create_mlp,
    .create_cnn = model_create_cnn,
};
