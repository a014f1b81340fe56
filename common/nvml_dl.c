/* NVML opened at run time with dlopen: the calls flps makes, resolved by
 * name into a table. */
#include "common/nvml_dl.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every call by its exported name and where its pointer goes. The _v2
 * names are what nvml.h's macros make of nvmlInit and friends since CUDA
 * 6; a driver without them is too old to have the energy counter either. */
static const struct nvmldl_sym {
    const char *name;
    size_t offset;
    int required;
} nvmldl_syms[] = {
    {"nvmlInit_v2", offsetof(nvmldl, init), 1},
    {"nvmlShutdown", offsetof(nvmldl, shutdown), 1},
    {"nvmlDeviceGetCount_v2", offsetof(nvmldl, device_count), 1},
    {"nvmlDeviceGetHandleByIndex_v2", offsetof(nvmldl, device_by_index), 1},
    {"nvmlDeviceGetName", offsetof(nvmldl, device_name), 1},
    {"nvmlErrorString", offsetof(nvmldl, error_string), 0},
    {"nvmlDeviceGetUUID", offsetof(nvmldl, device_uuid), 0},
    {"nvmlDeviceGetHandleByUUID", offsetof(nvmldl, device_by_uuid), 0},
    {"nvmlDeviceGetTotalEnergyConsumption", offsetof(nvmldl, total_energy), 0},
    {"nvmlDeviceGetPowerUsage", offsetof(nvmldl, power_usage), 0},
    {"nvmlDeviceGetClockInfo", offsetof(nvmldl, clock_info), 0},
    {"nvmlDeviceGetSupportedMemoryClocks",
     offsetof(nvmldl, supported_memory_clocks), 0},
    {"nvmlDeviceGetSupportedGraphicsClocks",
     offsetof(nvmldl, supported_graphics_clocks), 0},
    {"nvmlDeviceSetGpuLockedClocks", offsetof(nvmldl, set_locked_clocks), 0},
    {"nvmlDeviceResetGpuLockedClocks", offsetof(nvmldl, reset_locked_clocks),
     0},
    {"nvmlDeviceSetApplicationsClocks", offsetof(nvmldl, set_app_clocks), 0},
    {"nvmlDeviceResetApplicationsClocks", offsetof(nvmldl, reset_app_clocks),
     0},
};

flps_err nvmldl_open(const char *path, nvmldl *out, char *why, size_t whylen)
{
    nvmldl n;
    nvmldl_ret r;

    memset(out, 0, sizeof(*out));
    memset(&n, 0, sizeof(n));
    if (path == NULL || path[0] == '\0')
        path = getenv(NVMLDL_ENV);
    if (path == NULL || path[0] == '\0')
        path = NVMLDL_DEFAULT;
    snprintf(n.path, sizeof(n.path), "%s", path);
    /* RTLD_LOCAL: NVML's symbols stay out of the process's namespace, so
     * a user's program that links its own NVML (pynvml does not; some
     * tools do) keeps its own. */
    n.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (n.handle == NULL)
        return flps_errbuf_set(why, whylen, FLPS_EIO,
                               "no NVML library (%s not found)", path);
    for (size_t i = 0; i < sizeof(nvmldl_syms) / sizeof(nvmldl_syms[0]); i++) {
        void *sym = dlsym(n.handle, nvmldl_syms[i].name);

        /* A function pointer from dlsym's void *: memcpy is the
         * conversion ISO C leaves defined on every ABI dlsym exists on. */
        memcpy((char *)&n + nvmldl_syms[i].offset, &sym, sizeof(sym));
        if (sym == NULL && nvmldl_syms[i].required) {
            dlclose(n.handle);
            return flps_errbuf_set(why, whylen, FLPS_EIO,
                                   "the NVML library %s has no %s (a driver "
                                   "older than flps supports)",
                                   path, nvmldl_syms[i].name);
        }
    }
    r = n.init();
    if (r != NVMLDL_SUCCESS) {
        flps_errbuf_set(why, whylen, FLPS_ESYS,
                        "NVML (%s) is present but nvmlInit failed: %s", path,
                        nvmldl_strerror(&n, r));
        dlclose(n.handle);
        return FLPS_ESYS;
    }
    *out = n;
    return FLPS_OK;
}

void nvmldl_close(nvmldl *n)
{
    if (n == NULL || n->handle == NULL)
        return;
    n->shutdown();
    dlclose(n->handle);
    memset(n, 0, sizeof(*n));
}

const char *nvmldl_strerror(const nvmldl *n, nvmldl_ret r)
{
    const char *s = NULL;

    if (n != NULL && n->error_string != NULL)
        s = n->error_string(r);
    if (s != NULL)
        return s;
    switch (r) {
    case NVMLDL_SUCCESS:
        return "Success";
    case NVMLDL_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVMLDL_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVMLDL_ERROR_NOT_FOUND:
        return "Not Found";
    case NVMLDL_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVMLDL_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    default:
        return "an NVML error";
    }
}

/* Is word an index NVML lists (0..count-1)? */
static int select_index(const char *word, unsigned count, unsigned *out)
{
    char *end;
    unsigned long v;

    if (word[0] < '0' || word[0] > '9')
        return 0;
    v = strtoul(word, &end, 10);
    if (*end != '\0' || v >= count)
        return 0;
    *out = (unsigned)v;
    return 1;
}

/* Is word the UUID of one of the count GPUs? */
static int select_uuid(const nvmldl *n, const char *word, unsigned count,
                       unsigned *out)
{
    if (n->device_uuid == NULL)
        return 0;
    for (unsigned i = 0; i < count; i++) {
        nvmldl_dev d;
        char uuid[NVMLDL_UUID_MAX];

        if (n->device_by_index(i, &d) != NVMLDL_SUCCESS ||
            n->device_uuid(d, uuid, sizeof(uuid)) != NVMLDL_SUCCESS)
            continue;
        if (strcmp(uuid, word) == 0) {
            *out = i;
            return 1;
        }
    }
    return 0;
}

flps_err nvmldl_select(const nvmldl *n, const char *gpus, unsigned *idx,
                       size_t max, size_t *count, char *why, size_t whylen)
{
    unsigned total = 0;
    size_t k = 0;
    nvmldl_ret r = n->device_count(&total);
    char list[512], *save = NULL;

    if (r != NVMLDL_SUCCESS)
        return flps_errbuf_set(why, whylen, FLPS_ESYS,
                               "nvmlDeviceGetCount failed: %s",
                               nvmldl_strerror(n, r));
    if (gpus == NULL || gpus[0] == '\0' || strcmp(gpus, "all") == 0) {
        for (unsigned i = 0; i < total && k < max; i++)
            idx[k++] = i;
        *count = k;
        return FLPS_OK;
    }
    if (strlen(gpus) >= sizeof(list))
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "the GPU list is longer than %zu characters",
                               sizeof(list) - 1);
    memcpy(list, gpus, strlen(gpus) + 1);
    for (char *w = strtok_r(list, ", ", &save); w != NULL;
         w = strtok_r(NULL, ", ", &save)) {
        unsigned i;

        if (!select_index(w, total, &i) && !select_uuid(n, w, total, &i))
            return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                                   "GPU '%s' is neither an index below %u "
                                   "nor the UUID of a GPU NVML lists",
                                   w, total);
        if (k < max)
            idx[k++] = i;
    }
    *count = k;
    return FLPS_OK;
}
