/*
 * The CUDA driver API, loaded at run time with dlopen so that libcoop has no
 * link-time dependency on a driver. cuda.h supplies the types and, through its
 * #defines (cuMemAlloc -> cuMemAlloc_v2, ...), the versioned symbol names the
 * driver exports; each entry below has exactly the prototype cuda.h declares.
 *
 * The library name defaults to "libcuda.so.1"; the environment variable
 * COOP_CUDA_DRIVER names another file (tests point it at a mock driver or at a
 * missing file).
 */
#ifndef COOP_CUDA_DRIVER_H
#define COOP_CUDA_DRIVER_H

#include <cuda.h>

#include "coop.h"

/* X(name) for every driver entry point coop calls. */
#define COOP_CUDA_DRIVER_FUNCTIONS(X)                                                              \
    X(cuGetErrorName)                                                                              \
    X(cuGetErrorString)                                                                            \
    X(cuInit)                                                                                      \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease)                                                                   \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxPushCurrent)                                                                            \
    X(cuCtxPopCurrent)                                                                             \
    X(cuCtxSynchronize)                                                                            \
    X(cuMemGetInfo)                                                                                \
    X(cuMemAlloc)                                                                                  \
    X(cuMemFree)                                                                                   \
    X(cuMemGetAllocationGranularity)                                                               \
    X(cuMemAddressReserve)                                                                         \
    X(cuMemAddressFree)                                                                            \
    X(cuMemCreate)                                                                                 \
    X(cuMemRelease)                                                                                \
    X(cuMemMap)                                                                                    \
    X(cuMemUnmap)                                                                                  \
    X(cuMemSetAccess)                                                                              \
    X(cuEventCreate)                                                                               \
    X(cuEventRecord)                                                                               \
    X(cuEventQuery)                                                                                \
    X(cuEventSynchronize)                                                                          \
    X(cuEventDestroy)

#define COOP_CUDA_DRIVER_FIELD(name) __typeof__(name) *name;

typedef struct cuda_driver {
    void *library; /* dlopen handle */
    struct {
        COOP_CUDA_DRIVER_FUNCTIONS(COOP_CUDA_DRIVER_FIELD)
    } fn;
} cuda_driver;

/* Loads the driver library and every entry point. COOP_ERR_NO_DRIVER with
 * "no CUDA driver (libcuda.so.1: <dlerror>)" if the library cannot be
 * loaded or lacks an entry point. */
coop_status cuda_driver_load(cuda_driver *drv);

/* Forgets the entry points; drv may be zeroed. The library itself stays
 * loaded for the life of the process (see cuda_driver.c). */
void cuda_driver_unload(cuda_driver *drv);

/* Sets the thread's error for a failed driver call and returns
 * COOP_ERR_BACKEND (COOP_ERR_NOMEM for CUDA_ERROR_OUT_OF_MEMORY).
 * The message names the call, the driver's error name, number and
 * description (cuGetErrorString), and what was asked. */
coop_status cuda_driver_error(const cuda_driver *drv, CUresult rc, const char *call,
                              const char *what_fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
