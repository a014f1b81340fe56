/* The registry of compute backends: the compiled-in ones, listed by the
 * header CMake generates, and the names flps knows whether built or not
 * (the job file's table of backends, services/jobspec.h). */
#include "worker/backend.h"

#include <stdio.h>
#include <string.h>

#include "services/jobspec.h"
#include "worker/backend_list.h"

/* Each backend_NAME.c defines one descriptor. */
#define WB_DECLARE(n) extern const worker_backend worker_backend_##n;
WORKER_BACKEND_LIST(WB_DECLARE)
#undef WB_DECLARE

static const worker_backend *const wb_built[] = {
#define WB_ENTRY(n) &worker_backend_##n,
    WORKER_BACKEND_LIST(WB_ENTRY)
#undef WB_ENTRY
};

/* Every backend flps has a name for, built here or not, and what gets it
 * built, for the message of a worker asked for one its build lacks: one
 * row of JOBSPEC_BACKEND_MAP each, which also makes the job file's words
 * for backend:. */
static const struct {
    const char *name;
    const char *how;
} wb_known[] = {
#define X(backend, value, name, how) {name, how},
    JOBSPEC_BACKEND_MAP(X)
#undef X
};

#define WB_NBUILT (sizeof(wb_built) / sizeof(wb_built[0]))
#define WB_NKNOWN (sizeof(wb_known) / sizeof(wb_known[0]))

size_t worker_backend_count(void)
{
    return WB_NBUILT;
}

const worker_backend *worker_backend_at(size_t i)
{
    return i < WB_NBUILT ? wb_built[i] : NULL;
}

const worker_backend *worker_backend_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < WB_NBUILT; i++)
        if (strcmp(wb_built[i]->name, name) == 0)
            return wb_built[i];
    return NULL;
}

const char *worker_backend_list(char *buf, size_t len)
{
    size_t n = 0;

    if (buf == NULL || len == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < WB_NBUILT && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i == 0 ? "" : ", ",
                              wb_built[i]->name);
    return buf;
}

/* The known entry called name, or -1. */
static long wb_known_index(const char *name)
{
    for (size_t i = 0; i < WB_NKNOWN; i++)
        if (strcmp(wb_known[i].name, name) == 0)
            return (long)i;
    return -1;
}

int worker_backend_is_known(const char *name)
{
    return name != NULL && wb_known_index(name) >= 0;
}

flps_err worker_backend_select(const char *name, const worker_backend **out,
                               char *why, size_t len)
{
    const worker_backend *b;
    char built[128], known[128], probe[512] = "";
    size_t n = 0;
    long k;

    if (name == NULL || out == NULL)
        return flps_errbuf_set(why, len, FLPS_EINVAL, "no backend name given");
    worker_backend_list(built, sizeof(built));
    k = wb_known_index(name);
    if (k < 0) {
        char shown[44];
        size_t c;

        /* The name is the caller's text (argv): quoted, cut if long, and
         * no control byte can break the one-line message. */
        for (c = 0; name[c] != '\0' && c < 40; c++)
            shown[c] = (unsigned char)name[c] < 0x20 || name[c] == 0x7f
                           ? '?'
                           : name[c];
        snprintf(shown + c, sizeof(shown) - c, "%s",
                 name[c] != '\0' ? "..." : "");
        known[0] = '\0';
        for (size_t i = 0; i < WB_NKNOWN && n < sizeof(known); i++)
            n += (size_t)snprintf(known + n, sizeof(known) - n, "%s%s",
                                  i == 0 ? "" : ", ", wb_known[i].name);
        return flps_errbuf_set(why, len, FLPS_ECONFIG,
                               "unknown backend '%s'; flps knows %s (built "
                               "into this flworker: %s)",
                               shown, known, built);
    }
    b = worker_backend_find(name);
    if (b == NULL)
        return flps_errbuf_set(why, len, FLPS_ECONFIG,
                               "backend %s is not built into this flworker "
                               "(built: %s); %s",
                               name, built, wb_known[k].how);
    if (b->available(probe, sizeof(probe)) != FLPS_OK)
        return flps_errbuf_set(why, len, FLPS_ECONFIG,
                               "backend %s cannot run here: %s", name,
                               probe[0] != '\0' ? probe : "it says no");
    *out = b;
    return FLPS_OK;
}
