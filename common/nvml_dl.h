/* NVML (NVIDIA's management library) opened at run time with dlopen, never
 * linked: the few calls flps makes, as a table of function pointers, so a
 * node without NVIDIA's driver runs the same binaries, and tests load a
 * stub library (tests/fakes/nvml_stub.c) in its place.
 *
 * The library is $FLPS_NVML_LIBRARY when set, else libnvidia-ml.so.1 found
 * by the dynamic loader. The energy meter (common/energy.h) and the GPU
 * clock control (common/gpuclock.h) each open their own: dlopen and
 * nvmlInit count references, so two opens in one process are cheap. */
#ifndef FLPS_COMMON_NVML_DL_H
#define FLPS_COMMON_NVML_DL_H

#include <stddef.h>

#include "common/err.h"

/* The environment variable naming another NVML library (a stub in tests,
 * or a driver installed off the loader's path), and the default name. */
#define NVMLDL_ENV "FLPS_NVML_LIBRARY"
#define NVMLDL_DEFAULT "libnvidia-ml.so.1"
/* NVML's buffer sizes for a name and a UUID (nvml.h's
 * NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE). */
#define NVMLDL_NAME_MAX 96
#define NVMLDL_UUID_MAX 96
/* GPUs one selection can hold (more are left out, and said so). */
#define NVMLDL_MAX_GPUS 16

/* nvmlReturn_t's values that flps tells apart (nvml.h); every other one is
 * reported through nvmldl_strerror. */
#define NVMLDL_SUCCESS 0
#define NVMLDL_ERROR_INVALID_ARGUMENT 2
#define NVMLDL_ERROR_NOT_SUPPORTED 3
#define NVMLDL_ERROR_NO_PERMISSION 4
#define NVMLDL_ERROR_NOT_FOUND 6
#define NVMLDL_ERROR_INSUFFICIENT_SIZE 7
#define NVMLDL_ERROR_DRIVER_NOT_LOADED 9
#define NVMLDL_ERROR_GPU_IS_LOST 15
#define NVMLDL_ERROR_UNKNOWN 999
/* nvmlClockType_t's graphics clock. */
#define NVMLDL_CLOCK_GRAPHICS 0

typedef int nvmldl_ret;                      /* an nvmlReturn_t */
typedef struct nvmldl_device_st *nvmldl_dev; /* an nvmlDevice_t */

/* The library and its calls. Required ones are never NULL after a
 * successful open; optional ones are NULL where the driver is too old to
 * have them (callers check). Fields are read-only for callers. */
typedef struct nvmldl {
    void *handle;   /* dlopen's */
    char path[256]; /* the name it was opened by */
    /* required */
    nvmldl_ret (*init)(void);     /* nvmlInit_v2 */
    nvmldl_ret (*shutdown)(void); /* nvmlShutdown */
    nvmldl_ret (*device_count)(unsigned *);
    nvmldl_ret (*device_by_index)(unsigned, nvmldl_dev *);
    nvmldl_ret (*device_name)(nvmldl_dev, char *, unsigned);
    /* optional */
    const char *(*error_string)(nvmldl_ret);
    nvmldl_ret (*device_uuid)(nvmldl_dev, char *, unsigned);
    nvmldl_ret (*device_by_uuid)(const char *, nvmldl_dev *);
    /* millijoules since the driver loaded (Volta and newer) */
    nvmldl_ret (*total_energy)(nvmldl_dev, unsigned long long *);
    nvmldl_ret (*power_usage)(nvmldl_dev, unsigned *); /* milliwatts */
    nvmldl_ret (*clock_info)(nvmldl_dev, int, unsigned *);
    nvmldl_ret (*supported_memory_clocks)(nvmldl_dev, unsigned *, unsigned *);
    nvmldl_ret (*supported_graphics_clocks)(nvmldl_dev, unsigned, unsigned *,
                                            unsigned *);
    nvmldl_ret (*set_locked_clocks)(nvmldl_dev, unsigned, unsigned);
    nvmldl_ret (*reset_locked_clocks)(nvmldl_dev);
    nvmldl_ret (*set_app_clocks)(nvmldl_dev, unsigned, unsigned);
    nvmldl_ret (*reset_app_clocks)(nvmldl_dev);
} nvmldl;

/* Open the library (path NULL: $FLPS_NVML_LIBRARY or NVMLDL_DEFAULT),
 * resolve its calls and call nvmlInit into *out (caller's memory; release
 * with nvmldl_close). Errors, each with one line in why (may be NULL):
 * FLPS_EIO "no NVML library (libnvidia-ml.so.1 not found)", or the
 * library lacks a required call; FLPS_ESYS nvmlInit failed ("NVML is
 * present but nvmlInit failed: Driver Not Loaded"). *out is zeroed on
 * error, so nvmldl_close on it does nothing. Not thread-safe against
 * another open of the same struct; does I/O (loads a library). */
flps_err nvmldl_open(const char *path, nvmldl *out, char *why, size_t whylen);

/* nvmlShutdown and dlclose. A zeroed or closed struct: nothing. */
void nvmldl_close(nvmldl *n);

/* NVML's own text for r ("Insufficient Permissions"), or flps's words for
 * the codes above when the library has no nvmlErrorString ("an NVML
 * error" for others). Never NULL; static or the library's. */
const char *nvmldl_strerror(const nvmldl *n, nvmldl_ret r);

/* The GPUs a process means, as NVML indices in *idx (up to max, ascending
 * for "all"): gpus NULL or "" or "all": every GPU NVML lists; else a
 * comma-separated list of NVML indices ("0,2") or UUIDs ("GPU-8f1e...").
 * *count is set on FLPS_OK. Errors: FLPS_EINVAL (a word that is neither a
 * listed index nor a known UUID, said in why), FLPS_ESYS (NVML refused the
 * count). */
flps_err nvmldl_select(const nvmldl *n, const char *gpus, unsigned *idx,
                       size_t max, size_t *count, char *why, size_t whylen);

#endif
